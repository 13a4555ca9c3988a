/* runtime/cpu/gemm.c — the CPU backend's own single-precision GEMM, whose
 * every output element has one fixed accumulation order, and the threads that
 * run it.
 *
 *   C[i,j] = (beta ? C[i,j] : 0) + alpha * acc(i,j),
 *   acc(i,j) = fma(A[i,K-1], B[K-1,j], ... fma(A[i,1], B[1,j], fma(A[i,0], B[0,j], 0)))
 *
 * one FMA chain per element over k in index order, from 0, in float; then one
 * multiply by alpha and, with beta, one add to C. Nothing else: no partial sums
 * split over k, no alpha folded into the chain. So an element's bits depend on
 * row i of A, column j of B, K, alpha and C[i,j] alone: not on M or N (how
 * many rows a call holds), not on the element's place in the call, not on the
 * thread count, and not on the instruction set (FMA is exactly rounded
 * whatever the vector width). OpenBLAS gives none of this: its kernels pick
 * different tile shapes, with different accumulator splits over k, for the
 * edges of a call and for each thread's share of it (runtime/cpu/README.md).
 *
 * The work is organised as in Goto's and BLIS's GEMMs, which is what makes it
 * fast, without touching the order: B is packed, per thread, in panels of NR
 * columns (zeros past N) for a chunk of k, and a microkernel keeps an MR x NR
 * tile of C in registers while it walks k, reading A straight from the caller's
 * buffer (rows past M are not computed: the kernel is specialised for every
 * row count up to MR). When K is longer than one chunk the tile's accumulators
 * are stored between chunks and reloaded (floats, so the chain is unchanged).
 * Tasks are blocks of C; threads take them in any order, each element is
 * computed by exactly one task, so the split never shows in the result.
 *
 * Kernels: AVX-512F (MR 8, NR 32), AVX2 + FMA (MR 6, NR 16), and portable C
 * with fmaf (MR 4, NR 16) for every other CPU, picked at start-up from what the
 * CPU has, or by PIPE_CPU_GEMM=avx512|avx2|portable; all give the same bits. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_ctx.h"
#include "cpu_simd.h"
#include "pg_limits.h"

#ifdef PG_CPU_AVX2
#include <immintrin.h>
#define PG_TARGET_AVX512 __attribute__((target("avx512f")))
#define PG_TARGET_AVX2FMA __attribute__((target("avx2,fma")))
#endif

/* Sizes of the blocking (none of them changes a result, only the speed):
 * packed B holds at most PACK_B_FLOATS floats per thread (256 KiB: an L2's
 * share); K is walked in chunks of at most KC_MAX; a task's column block is
 * at most NB_MAX wide; when K takes more than one chunk a task has at most
 * MB_PART rows, whose partial sums live in PART_FLOATS per thread. */
#define PACK_B_FLOATS 65536
#define KC_MAX 1024
#define NB_MAX 256
#define MB_PART 256
#define MR_MAX 8
#define PART_FLOATS ((MB_PART + MR_MAX) * (PACK_B_FLOATS / KC_MAX))
#define PACK_A_FLOATS (KC_MAX * MR_MAX)
#define PACK_ROWS 8 /* rows of B [K,N] packed side by side (pack_rows_avx) */
/* A product of fewer multiply-adds than this runs on the calling thread alone:
 * waking the others would cost more than it saves. */
#define PAR_MIN_FMAS (1 << 18)
#define TASKS_PER_THREAD 4

/* ---- one call ------------------------------------------------------------- */

typedef struct gemm_kern gemm_kern;

typedef struct gemm_job {
    const gemm_kern *kern;
    int ta, tb;           /* A is [K,M] (ta) or [M,K]; B is [N,K] (tb) or [K,N] */
    int64_t M, N, K;
    float alpha;
    const float *A;
    int64_t lda;
    const float *B;
    int64_t ldb;
    int beta;             /* 1: add to C; 0: overwrite C */
    float *C;
    int64_t ldc;
    const pg_cpu_bsrc *bsrc; /* B made by its own packing (an implicit matrix), or NULL: B as stored */
    const float *bpk;        /* B packed already for the whole of K (pg_cpu_gemm_pack), or NULL: packed per task */
    const pg_cpu_epi *epi;   /* run on each strip of C after its last k (a fused elementwise op), or NULL */
    /* the blocking, set once per call */
    int64_t kc;           /* k per chunk */
    int64_t nb, mb;       /* a task's columns and rows */
    int64_t ncb;          /* column blocks */
    int64_t ntasks;
} gemm_job;

/* One tile: rows [0, mr) (mr <= the kernel's MR) of A from a (A(i0, k0) of
 * the call), kc values of k, the packed panel b of NR columns; the tile's
 * partial sums pt (read unless first, written unless last); with last, C
 * from c for w columns. */
typedef void gemm_tile_fn(const gemm_job *g, int mr, const float *a, int64_t lda, int a_rows, int64_t kc,
                          const float *b, float *pt, int first, int last, float *c, int64_t w);

/* Packs B for columns [j0, j0+nbw), k in [k0, k0+kc), into panels of nr (below). */
typedef void gemm_pack_fn(const gemm_job *g, int nr, float *bp, int64_t j0, int64_t nbw, int64_t k0, int64_t kc);

struct gemm_kern {
    const char *name;
    int mr, nr;
    gemm_tile_fn *tile;
    gemm_pack_fn *pack;
};

/* A(i, k) of the call */
static inline const float *a_at(const gemm_job *g, int64_t i, int64_t k)
{
    return g->ta ? g->A + k * g->lda + i : g->A + i * g->lda + k;
}

/* Packing B: columns [j0, j0+nbw) for k in [k0, k0+kc) into panels of nr
 * columns: panel q holds, for each k in order, the nr values
 * B(k, j0+q*nr+0..nr-1), zeros past the block. bp is 64-byte aligned and
 * kc*nr a multiple of 16. Only data moves here: no arithmetic, no rounding. */

/* Panel columns [j, w) for k in [ka, kb) one value at a time, columns [w, nr) 0. */
static void pack_panel_scalar(const gemm_job *g, int nr, float *dst, int64_t jc, int64_t j, int64_t w,
                              int64_t k0, int64_t ka, int64_t kb)
{
    for (int64_t k = ka; k < kb; k++) {
        float *d = dst + k * nr;
        for (int64_t jj = j; jj < w; jj++)
            d[jj] = g->tb ? g->B[(jc + jj) * g->ldb + k0 + k] : g->B[(k0 + k) * g->ldb + jc + jj];
        for (int64_t jj = w > j ? w : j; jj < nr; jj++)
            d[jj] = 0.0f;
    }
}

static void pack_portable(const gemm_job *g, int nr, float *bp, int64_t j0, int64_t nbw, int64_t k0, int64_t kc)
{
    for (int64_t q = 0; q * nr < nbw; q++) {
        int64_t w = nbw - q * nr < nr ? nbw - q * nr : nr;
        pack_panel_scalar(g, nr, bp + q * kc * nr, j0 + q * nr, 0, w, k0, 0, kc);
    }
}

#ifdef PG_CPU_AVX2
/* The same with AVX moves, nr a multiple of 8. B stored [K,N]: PACK_ROWS
 * rows of the block at a time are read left to right, 8 floats at a time,
 * and dealt to the panels: a few sequential streams the prefetcher follows
 * (a whole panel at a time read kc rows 64 bytes each, kc streams at once:
 * 5-15 % slower at llama's input-gradient products where B comes from memory,
 * as a stage's weights do in the backward; a row at a time across all panels
 * scatters the stores). */
PG_TARGET_AVX2FMA static void pack_rows_avx(const gemm_job *g, int nr, float *bp, int64_t j0, int64_t nbw,
                                            int64_t k0, int64_t kc)
{
    int64_t nq = (nbw + nr - 1) / nr, w8 = nbw / 8 * 8;
    for (int64_t kg = 0; kg < kc; kg += PACK_ROWS) {
        int64_t kn = kc - kg < PACK_ROWS ? kc - kg : PACK_ROWS;
        for (int64_t j = 0; j < w8; j += 8) {
            const float *src = g->B + (k0 + kg) * g->ldb + j0 + j;
            float *d = bp + j / nr * kc * nr + kg * nr + j % nr;
            for (int64_t k = 0; k < kn; k++)
                _mm256_store_ps(d + k * nr, _mm256_loadu_ps(src + k * g->ldb));
        }
    }
    if (w8 < nq * nr) /* the last columns, fewer than 8, and the zeros */
        pack_panel_scalar(g, nr, bp + (nq - 1) * kc * nr, j0 + (nq - 1) * nr, w8 - (nq - 1) * nr,
                          nbw - (nq - 1) * nr, k0, 0, kc);
}

/* B stored [N,K]: turned by 8 x 8 transposes, eight rows of B's storage in
 * (eight streams along k), eight k of the panel out. */
PG_TARGET_AVX2FMA static void pack_turn_avx(const gemm_job *g, int nr, float *bp, int64_t j0, int64_t nbw,
                                            int64_t k0, int64_t kc)
{
    const int64_t ldb = g->ldb;
    for (int64_t q = 0; q * nr < nbw; q++) {
        int64_t jc = j0 + q * nr;
        int64_t w = nbw - q * nr < nr ? nbw - q * nr : nr;
        int64_t w8 = w / 8 * 8; /* columns in whole groups of 8 */
        float *dst = bp + q * kc * nr;
        int64_t k8 = kc / 8 * 8;
        for (int64_t j = 0; j < w8; j += 8) {
            const float *src = g->B + (jc + j) * ldb + k0;
            for (int64_t k = 0; k < k8; k += 8) {
                const float *const r[8] = {src + k,           src + ldb + k,     src + 2 * ldb + k,
                                           src + 3 * ldb + k, src + 4 * ldb + k, src + 5 * ldb + k,
                                           src + 6 * ldb + k, src + 7 * ldb + k};
                pg_cpu_t8x8(r, dst + k * nr + j, nr);
            }
        }
        if (k8 < kc) /* the last k, fewer than 8 */
            pack_panel_scalar(g, nr, dst, jc, 0, w8, k0, k8, kc);
        if (w8 < nr) /* the last columns, fewer than 8, and the zeros */
            pack_panel_scalar(g, nr, dst, jc, w8, w, k0, 0, kc);
    }
}

PG_TARGET_AVX2FMA static void pack_avx(const gemm_job *g, int nr, float *bp, int64_t j0, int64_t nbw, int64_t k0,
                                       int64_t kc)
{
    if (g->tb)
        pack_turn_avx(g, nr, bp, j0, nbw, k0, kc);
    else
        pack_rows_avx(g, nr, bp, j0, nbw, k0, kc);
}
#endif

/* The end of a tile from its accumulators acc[r*nr + j] (scalar, the same
 * IEEE operations as the vector kernels' own ends): t = alpha acc, then
 * C = C + t (beta) or C = t, rows < mr and columns < w only. */
static void tile_end_scalar(const gemm_job *g, const float *acc, int nr, int mr, int64_t w, float *c)
{
    for (int r = 0; r < mr; r++)
        for (int64_t j = 0; j < w; j++) {
            float t = acc[r * nr + j] * g->alpha;
            c[r * g->ldc + j] = g->beta ? c[r * g->ldc + j] + t : t;
        }
}

/* ---- portable kernel: fmaf, MR 4, NR 16 ------------------------------------ */

#define P_MR 4
#define P_NR 16

static void tile_portable(const gemm_job *g, int mr, const float *a, int64_t lda, int a_rows, int64_t kc,
                          const float *b, float *pt, int first, int last, float *c, int64_t w)
{
    float acc[P_MR * P_NR];
    if (first)
        memset(acc, 0, sizeof acc);
    else
        memcpy(acc, pt, sizeof acc);
    int64_t rs = a_rows ? lda : 1, ks = a_rows ? 1 : lda; /* A's strides along rows and k */
    for (int r = 0; r < mr; r++) {
        float *ar = acc + r * P_NR;
        for (int64_t k = 0; k < kc; k++) {
            float av = a[r * rs + k * ks];
            for (int j = 0; j < P_NR; j++)
                ar[j] = fmaf(av, b[k * P_NR + j], ar[j]);
        }
    }
    if (last)
        tile_end_scalar(g, acc, P_NR, mr, w, c);
    else
        memcpy(pt, acc, sizeof acc);
}

#ifdef PG_CPU_AVX2
/* A tile function's switch case: the microkernel ukr inlined for n rows and
 * for each way A is laid out. */
#define UKR_CASE(ukr, n)                                                                    \
    case n:                                                                                 \
        if (a_rows)                                                                         \
            ukr(n, 1, g, a, lda, kc, b, pt, first, last, c, w);                             \
        else                                                                                \
            ukr(n, 0, g, a, lda, kc, b, pt, first, last, c, w);                             \
        break;

/* ---- AVX-512F kernel: MR 8, NR 32 (two zmm per row: 16 accumulators) ------- */

#define Z_MR 8
#define Z_NR 32

/* One tile of mr rows (a compile-time constant after inlining): A read in
 * place, row r at a + r*rsa, k at a + k*csa. */
PG_TARGET_AVX512 static inline __attribute__((always_inline)) void
ukr_avx512(const int mr, const int a_rows, const gemm_job *g, const float *a, const int64_t lda, int64_t kc,
           const float *b, float *pt, int first, int last, float *c, int64_t w)
{
    __m512 acc[Z_MR][2];
    if (last && g->beta) /* C is read at the end: ask for it now */
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            _mm_prefetch((const char *)(c + r * g->ldc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + r * g->ldc + 16), _MM_HINT_T0);
        }
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
        acc[r][0] = first ? _mm512_setzero_ps() : _mm512_load_ps(pt + r * Z_NR);
        acc[r][1] = first ? _mm512_setzero_ps() : _mm512_load_ps(pt + r * Z_NR + 16);
    }
    if (a_rows) { /* each row of A runs along k */
        for (int64_t k = 0; k < kc; k++) {
            __m512 b0 = _mm512_load_ps(b + k * Z_NR), b1 = _mm512_load_ps(b + k * Z_NR + 16);
#pragma GCC unroll 8
            for (int r = 0; r < mr; r++) {
                __m512 av = _mm512_set1_ps(a[r * lda + k]);
                acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
            }
        }
    } else { /* the tile's rows are adjacent at each k */
        for (int64_t k = 0; k < kc; k++) {
            __m512 b0 = _mm512_load_ps(b + k * Z_NR), b1 = _mm512_load_ps(b + k * Z_NR + 16);
            const float *ak = a + k * lda;
#pragma GCC unroll 8
            for (int r = 0; r < mr; r++) {
                __m512 av = _mm512_set1_ps(ak[r]);
                acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
            }
        }
    }
    if (!last) {
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            _mm512_store_ps(pt + r * Z_NR, acc[r][0]);
            _mm512_store_ps(pt + r * Z_NR + 16, acc[r][1]);
        }
        return;
    }
    __mmask16 m0 = w >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << w) - 1u);
    __mmask16 m1 = w >= 32 ? (__mmask16)0xFFFF : w > 16 ? (__mmask16)((1u << (w - 16)) - 1u) : (__mmask16)0;
    __m512 va = _mm512_set1_ps(g->alpha);
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
        float *cr = c + r * g->ldc;
        __m512 t0 = _mm512_mul_ps(acc[r][0], va), t1 = _mm512_mul_ps(acc[r][1], va);
        if (g->beta) {
            t0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), t0);
            t1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr + 16), t1);
        }
        _mm512_mask_storeu_ps(cr, m0, t0);
        _mm512_mask_storeu_ps(cr + 16, m1, t1);
    }
}

PG_TARGET_AVX512 static void tile_avx512(const gemm_job *g, int mr, const float *a, int64_t lda, int a_rows,
                                         int64_t kc, const float *b, float *pt, int first, int last, float *c,
                                         int64_t w)
{
    switch (mr) {
        UKR_CASE(ukr_avx512, 8) UKR_CASE(ukr_avx512, 7) UKR_CASE(ukr_avx512, 6) UKR_CASE(ukr_avx512, 5)
        UKR_CASE(ukr_avx512, 4) UKR_CASE(ukr_avx512, 3) UKR_CASE(ukr_avx512, 2) UKR_CASE(ukr_avx512, 1)
    }
}

/* ---- AVX2 + FMA kernel: MR 6, NR 16 (two ymm per row: 12 accumulators) ----- */

#define Y_MR 6
#define Y_NR 16

PG_TARGET_AVX2FMA static inline __attribute__((always_inline)) void
ukr_avx2(const int mr, const int a_rows, const gemm_job *g, const float *a, const int64_t lda, int64_t kc,
         const float *b, float *pt, int first, int last, float *c, int64_t w)
{
    __m256 acc[Y_MR][2];
    if (last && g->beta)
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++)
            _mm_prefetch((const char *)(c + r * g->ldc), _MM_HINT_T0);
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        acc[r][0] = first ? _mm256_setzero_ps() : _mm256_load_ps(pt + r * Y_NR);
        acc[r][1] = first ? _mm256_setzero_ps() : _mm256_load_ps(pt + r * Y_NR + 8);
    }
    if (a_rows) {
        for (int64_t k = 0; k < kc; k++) {
            __m256 b0 = _mm256_load_ps(b + k * Y_NR), b1 = _mm256_load_ps(b + k * Y_NR + 8);
#pragma GCC unroll 6
            for (int r = 0; r < mr; r++) {
                __m256 av = _mm256_broadcast_ss(a + r * lda + k);
                acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
            }
        }
    } else {
        for (int64_t k = 0; k < kc; k++) {
            __m256 b0 = _mm256_load_ps(b + k * Y_NR), b1 = _mm256_load_ps(b + k * Y_NR + 8);
            const float *ak = a + k * lda;
#pragma GCC unroll 6
            for (int r = 0; r < mr; r++) {
                __m256 av = _mm256_broadcast_ss(ak + r);
                acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
            }
        }
    }
    if (!last) {
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            _mm256_store_ps(pt + r * Y_NR, acc[r][0]);
            _mm256_store_ps(pt + r * Y_NR + 8, acc[r][1]);
        }
        return;
    }
    if (w < Y_NR) { /* a last, narrower column panel */
        float t[Y_MR * Y_NR];
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            _mm256_storeu_ps(t + r * Y_NR, acc[r][0]);
            _mm256_storeu_ps(t + r * Y_NR + 8, acc[r][1]);
        }
        tile_end_scalar(g, t, Y_NR, mr, w, c);
        return;
    }
    __m256 va = _mm256_set1_ps(g->alpha);
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        float *cr = c + r * g->ldc;
        __m256 t0 = _mm256_mul_ps(acc[r][0], va), t1 = _mm256_mul_ps(acc[r][1], va);
        if (g->beta) {
            t0 = _mm256_add_ps(_mm256_loadu_ps(cr), t0);
            t1 = _mm256_add_ps(_mm256_loadu_ps(cr + 8), t1);
        }
        _mm256_storeu_ps(cr, t0);
        _mm256_storeu_ps(cr + 8, t1);
    }
}

PG_TARGET_AVX2FMA static void tile_avx2(const gemm_job *g, int mr, const float *a, int64_t lda, int a_rows,
                                        int64_t kc, const float *b, float *pt, int first, int last, float *c,
                                        int64_t w)
{
    switch (mr) {
        UKR_CASE(ukr_avx2, 6) UKR_CASE(ukr_avx2, 5) UKR_CASE(ukr_avx2, 4) UKR_CASE(ukr_avx2, 3)
        UKR_CASE(ukr_avx2, 2) UKR_CASE(ukr_avx2, 1)
    }
}
#endif /* PG_CPU_AVX2 */

static const gemm_kern kern_portable = {"portable", P_MR, P_NR, tile_portable, pack_portable};
#ifdef PG_CPU_AVX2
static const gemm_kern kern_avx512 = {"avx512", Z_MR, Z_NR, tile_avx512, pack_avx};
static const gemm_kern kern_avx2 = {"avx2", Y_MR, Y_NR, tile_avx2, pack_avx};
#endif

/* dst[k*mrmax + r] = src[k*lda + r] for r < mr, k < kc: a strip of A stored
 * [K,M], its rows adjacent at each k (copies of a constant size, inlined). */
static void copy_strip(float *dst, int mrmax, const float *src, int64_t lda, int mr, int64_t kc)
{
#define COPY_STRIP_CASE(n)                                                                  \
    case n:                                                                                 \
        for (int64_t k = 0; k < kc; k++)                                                    \
            memcpy(dst + k * mrmax, src + k * lda, n * sizeof *dst);                        \
        break;
    switch (mr) {
        COPY_STRIP_CASE(8) COPY_STRIP_CASE(7) COPY_STRIP_CASE(6) COPY_STRIP_CASE(5)
        COPY_STRIP_CASE(4) COPY_STRIP_CASE(3) COPY_STRIP_CASE(2) COPY_STRIP_CASE(1)
    }
#undef COPY_STRIP_CASE
}

/* The rows of the next strip when `left` rows remain: mrmax, except that the
 * last two strips share their rows evenly when they are fewer than 2 mrmax
 * (128 rows: 20 x 6 + 4 + 4, not 21 x 6 + 2): a strip of few rows keeps too
 * few FMA chains in flight to hide their latency, and costs nearly as much as
 * a full one. Which strip a row lands in does not change its bits. */
static int strip_rows(int mrmax, int64_t left)
{
    if (left <= mrmax)
        return (int)left;
    if (left < 2 * mrmax)
        return (int)((left + 1) / 2);
    return mrmax;
}

/* Rows [i0, i0+mb) x columns [j0, j0+nbw) for k in [k0, k0+kc), from the
 * packed bp, tile by tile: each MR-row strip of A (in L1) against every
 * NR-column panel of bp (in L2), panel jr at bp + jr pstride (kc NR when the
 * task packed the chunk itself, K NR in a copy packed for all of K). part:
 * the block's partial sums, tile by tile (NULL: K is one chunk). A stored [K,M] is first copied strip by strip
 * into ap (kc x MR, the strip's rows adjacent at each k): read in place, its
 * rows lie lda apart at every k, which for a power-of-two lda lands every k
 * of a strip in the same L1 set. */
static void run_block(const gemm_kern *kr, const gemm_job *g, const float *bp, int64_t pstride, float *part, float *ap,
                      int64_t i0, int64_t mb, int64_t j0, int64_t nbw, int64_t k0, int64_t kc, int first, int last)
{
    int64_t njr = (nbw + kr->nr - 1) / kr->nr, tile = (int64_t)kr->mr * kr->nr;
    int mr = 0;
    for (int64_t ir = 0, strip = 0; ir < mb; ir += mr, strip++) {
        mr = strip_rows(kr->mr, mb - ir);
        const float *a = a_at(g, i0 + ir, k0);
        int64_t lda = g->lda;
        if (g->ta) {
            copy_strip(ap, kr->mr, a, g->lda, mr, kc);
            a = ap;
            lda = kr->mr;
        }
        for (int64_t jr = 0; jr < njr; jr++) {
            int64_t w = nbw - jr * kr->nr < kr->nr ? nbw - jr * kr->nr : kr->nr;
            kr->tile(g, mr, a, lda, !g->ta, kc, bp + jr * pstride,
                     part ? part + (strip * njr + jr) * tile : NULL, first, last,
                     g->C + (i0 + ir) * g->ldc + j0 + jr * kr->nr, w);
        }
        if (last && g->epi) /* the strip's C is final and still in L1 */
            g->epi->fn(g->epi->arg, i0 + ir, mr, j0, nbw);
    }
}

/* ---- tasks ----------------------------------------------------------------- */

/* Task t: column block t mod ncb, row block t / ncb; every chunk of k. */
static void run_task(void *arg, int64_t t, float *scratch)
{
    const gemm_job *g = arg;
    const gemm_kern *kr = g->kern;
    float *bp = scratch, *part = scratch + PACK_B_FLOATS, *ap = part + PART_FLOATS;
    int64_t cb = t % g->ncb, rb = t / g->ncb;
    int64_t j0 = cb * g->nb, i0 = rb * g->mb;
    int64_t nbw = g->N - j0 < g->nb ? g->N - j0 : g->nb;
    int64_t mb = g->M - i0 < g->mb ? g->M - i0 : g->mb;
    int chunks = g->K > g->kc;
    int64_t k0 = 0;
    do {
        int64_t kc = g->K - k0 < g->kc ? g->K - k0 : g->kc;
        const float *b = bp;
        int64_t pstride = kc * kr->nr;
        if (g->bpk) /* the panels of columns j0.. start at j0 K (j0 is a multiple of NR), chunk k0 at k0 NR */
            b = g->bpk + j0 * g->K + k0 * kr->nr, pstride = g->K * kr->nr;
        else if (g->bsrc)
            g->bsrc->pack(g->bsrc->arg, kr->nr, bp, j0, nbw, k0, kc);
        else
            kr->pack(g, kr->nr, bp, j0, nbw, k0, kc);
        run_block(kr, g, b, pstride, chunks ? part : NULL, ap, i0, mb, j0, nbw, k0, kc, k0 == 0, k0 + kc >= g->K);
        k0 += kc;
    } while (k0 < g->K);
}

/* ---- the threads -----------------------------------------------------------
 * A job is ntasks calls fn(arg, t, scratch) for t in [0, ntasks); the caller
 * publishes it and takes tasks like any worker. Tasks are claimed through one
 * 64-bit ticket, (ntasks << 32) | next, by compare-and-swap: a claim succeeds
 * only while the current job has tasks left, so a worker that wakes late, or
 * was preempted between two looks, can never take a task of a job that is
 * over or run one twice; the job's fn and arg are read after a successful
 * claim (they cannot change until every task is done). The caller returns
 * when done == ntasks: it never waits for a worker that took no task, so a
 * sleeping or descheduled worker only means less help. Waiting threads spin
 * a little (the next product usually follows within microseconds), then sleep
 * on a condition variable; the sleeper announces itself (sleepers,
 * caller_sleeps) before it checks, the waker changes the state before it
 * checks for sleepers, all sequentially consistent, so no wake-up is lost. */

#define SPIN_NS 100000 /* how long a waiting thread spins before it sleeps */

/* Set while this thread runs a task of pg_cpu_parallel: its buffers, for a
 * pg_cpu_gemm inside the task, which then runs on this thread alone. */
static _Thread_local float *task_scratch;

typedef void task_fn(void *arg, int64_t t, float *scratch);

struct pg_cpu_gemm_pool {
    const gemm_kern *kern;
    int n;                    /* threads, the caller's included */
    float **scratch;          /* [n]: PACK_B_FLOATS + PART_FLOATS + PACK_A_FLOATS floats each */
    pthread_t *tid;           /* [n - 1] workers */
    int started;              /* workers running */
    pthread_mutex_t mu;
    pthread_cond_t wake;      /* tasks to take, or stop: for sleeping workers */
    pthread_cond_t done_cv;   /* done reached ntasks: for a sleeping caller */
    task_fn *fn;              /* the job, written before the ticket */
    void *arg;
    atomic_ullong ticket;     /* (ntasks << 32) | next task */
    atomic_long done;         /* tasks finished */
    atomic_int sleepers;      /* workers asleep on wake */
    atomic_int caller_sleeps; /* the caller asleep on done_cv */
    atomic_int stop;
};

typedef struct worker_arg {
    pg_cpu_gemm_pool *p;
    int idx;
} worker_arg;

static int tasks_left(pg_cpu_gemm_pool *p)
{
    unsigned long long v = atomic_load(&p->ticket);
    return (v & 0xFFFFFFFFu) < (v >> 32);
}

/* Claims and runs tasks while the current job has any; 1 if it ran one. */
static int take_tasks(pg_cpu_gemm_pool *p, float *scratch)
{
    int ran = 0;
    unsigned long long v = atomic_load(&p->ticket);
    while ((v & 0xFFFFFFFFu) < (v >> 32)) {
        if (!atomic_compare_exchange_weak(&p->ticket, &v, v + 1))
            continue; /* v now holds the ticket as it is */
        p->fn(p->arg, (int64_t)(v & 0xFFFFFFFFu), scratch);
        ran = 1;
        if (atomic_fetch_add(&p->done, 1) + 1 == (long)(v >> 32) && atomic_load(&p->caller_sleeps)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
        v = atomic_load(&p->ticket);
    }
    return ran;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#ifdef PG_CPU_AVX2
    _mm_pause();
#endif
}

static int idle(pg_cpu_gemm_pool *p, long unused)
{
    (void)unused;
    return !tasks_left(p) && !atomic_load(&p->stop);
}

static int unfinished(pg_cpu_gemm_pool *p, long ntasks)
{
    return atomic_load(&p->done) < ntasks;
}

/* Spins up to SPIN_NS while cond(p, arg) holds; 1 if it stopped holding. */
static int spin_while(int (*cond)(pg_cpu_gemm_pool *, long), pg_cpu_gemm_pool *p, long arg)
{
    int64_t t0 = now_ns();
    for (int i = 1;; i++) {
        if (!cond(p, arg))
            return 1;
        cpu_relax();
        if (!(i & 63) && now_ns() - t0 > SPIN_NS)
            return 0;
    }
}

static void *worker_main(void *v)
{
    worker_arg *wa = v;
    pg_cpu_gemm_pool *p = wa->p;
    float *scratch = p->scratch[wa->idx];
    free(wa);
    while (!atomic_load(&p->stop)) {
        if (take_tasks(p, scratch) || spin_while(idle, p, 0))
            continue;
        pthread_mutex_lock(&p->mu);
        atomic_fetch_add(&p->sleepers, 1);
        while (idle(p, 0))
            pthread_cond_wait(&p->wake, &p->mu);
        atomic_fetch_sub(&p->sleepers, 1);
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

/* fn(arg, t, scratch) for every t in [0, ntasks) (ntasks < 2^31), on every
 * thread; returns when all are done. */
static void run_parallel(pg_cpu_gemm_pool *p, int64_t ntasks, task_fn *fn, void *arg)
{
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->done, 0);
    atomic_store(&p->ticket, (unsigned long long)ntasks << 32);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    take_tasks(p, p->scratch[0]);
    if (!spin_while(unfinished, p, (long)ntasks)) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_sleeps, 1);
        while (unfinished(p, (long)ntasks))
            pthread_cond_wait(&p->done_cv, &p->mu);
        atomic_store(&p->caller_sleeps, 0);
        pthread_mutex_unlock(&p->mu);
    }
}

static const gemm_kern *pick_kern(char *err, size_t errlen)
{
    const char *want = getenv("PIPE_CPU_GEMM");
#ifdef PG_CPU_AVX2
    int has512 = __builtin_cpu_supports("avx512f");
    int has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    int has512 = 0, has2 = 0;
#endif
    if (!want || !*want) {
#ifdef PG_CPU_AVX2
        if (has512)
            return &kern_avx512;
        if (has2)
            return &kern_avx2;
#endif
        return &kern_portable;
    }
    if (!strcmp(want, "portable"))
        return &kern_portable;
#ifdef PG_CPU_AVX2
    if (!strcmp(want, "avx512") && has512)
        return &kern_avx512;
    if (!strcmp(want, "avx2") && has2)
        return &kern_avx2;
#endif
    if (!strcmp(want, "avx512") || !strcmp(want, "avx2"))
        snprintf(err, errlen, "PIPE_CPU_GEMM=%s: this CPU (or this build) has no %s kernel; it can run: %s%sportable",
                 want, !strcmp(want, "avx512") ? "AVX-512F" : "AVX2+FMA", has512 ? "avx512, " : "",
                 has2 ? "avx2, " : "");
    else
        snprintf(err, errlen, "PIPE_CPU_GEMM=%s is not a GEMM kernel: use avx512, avx2 or portable "
                 "(or leave it unset to take the best this CPU has)", want);
    return NULL;
}

pg_cpu_gemm_pool *pg_cpu_gemm_pool_new(int threads)
{
    char err[256];
    const gemm_kern *kern = pick_kern(err, sizeof err);
    if (!kern) {
        pg_rt_error(__FILE__, __LINE__, "%s", err);
        return NULL;
    }
    if (threads < 1)
        threads = 1;
    pg_cpu_gemm_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->scratch = calloc((size_t)threads, sizeof *p->scratch)) ||
        !(p->tid = calloc((size_t)threads, sizeof *p->tid))) {
        pg_rt_error(__FILE__, __LINE__, "cannot allocate the GEMM thread pool for %d threads", threads);
        if (p)
            free(p->scratch);
        free(p);
        return NULL;
    }
    p->kern = kern;
    p->n = threads;
    atomic_init(&p->ticket, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_sleeps, 0);
    atomic_init(&p->stop, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    size_t bytes = (size_t)(PACK_B_FLOATS + PART_FLOATS + PACK_A_FLOATS) * sizeof(float);
    for (int i = 0; i < threads; i++)
        if (!(p->scratch[i] = aligned_alloc(64, bytes))) {
            pg_rt_error(__FILE__, __LINE__, "cannot allocate %zu bytes of GEMM workspace for each of %d threads",
                        bytes, threads);
            pg_cpu_gemm_pool_free(p);
            return NULL;
        }
    /* the workers take no signals: those go to the stage's own threads */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = 0;
    for (int i = 1; i < threads && !rc; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            rc = ENOMEM;
            break;
        }
        wa->p = p;
        wa->idx = i;
        rc = pthread_create(&p->tid[p->started], NULL, worker_main, wa);
        if (rc)
            free(wa);
        else
            p->started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        char why[400];
        pg_rt_error(__FILE__, __LINE__, "cannot start GEMM thread %d of %d: %s", p->started + 1, threads,
                    pg_thread_start_why(rc, why, sizeof why));
        pg_cpu_gemm_pool_free(p);
        return NULL;
    }
    return p;
}

void pg_cpu_gemm_pool_free(pg_cpu_gemm_pool *p)
{
    if (!p)
        return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->stop, 1);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->started; i++)
            pthread_join(p->tid[i], NULL);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done_cv);
    for (int i = 0; i < p->n; i++)
        free(p->scratch[i]);
    free(p->scratch);
    free(p->tid);
    free(p);
}

const char *pg_cpu_gemm_kernel(const pg_cpu_gemm_pool *p) { return p->kern->name; }

/* ---- the call -------------------------------------------------------------- */

/* The blocking of one call, its tasks, and the threads that run them. */
static void gemm_run(pg_cpu_gemm_pool *p, gemm_job g)
{
    const gemm_kern *kr = p->kern;
    int64_t M = g.M, N = g.N, K = g.K;
    int chunks = K > KC_MAX;
    g.kc = chunks ? KC_MAX : (K > 0 ? K : 1);
    if (chunks)
        g.nb = PACK_B_FLOATS / KC_MAX; /* a multiple of every kernel's NR */
    else {
        g.nb = PACK_B_FLOATS / g.kc / kr->nr * kr->nr;
        if (g.nb > NB_MAX)
            g.nb = NB_MAX;
    }
    int par = p->n > 1 && (double)M * (double)N * (double)K >= PAR_MIN_FMAS;
    /* Every thread gets several tasks (TASKS_PER_THREAD: a thread that is
     * preempted then holds up a small share): narrower column blocks first,
     * down to one panel, then blocks of rows too (each task packs its own B,
     * so splitting rows packs B again) */
    int64_t want = par ? (int64_t)TASKS_PER_THREAD * p->n : 1;
    /* ... unless rows outnumber columns: then splitting the rows (each task
     * packing B again, K x nb) costs less than splitting the columns (each
     * task reading all of A again, M x K) */
    int64_t rows_first = M > N ? (want + 1) / 2 : 1;
    if ((N + g.nb - 1) / g.nb * rows_first < want) {
        int64_t nb = (N * rows_first + want - 1) / want;
        nb = (nb + kr->nr - 1) / kr->nr * kr->nr;
        if (nb < g.nb)
            g.nb = nb;
    }
    g.ncb = (N + g.nb - 1) / g.nb;
    /* rows per task: all of them, unless more tasks are still needed or the
     * partial sums must fit */
    int64_t nrb = 1;
    if (g.ncb < want)
        nrb = (want + g.ncb - 1) / g.ncb;
    g.mb = (M + nrb - 1) / nrb;
    if (g.mb < 4 * kr->mr) /* not thinner than that: each task packs its B */
        g.mb = 4 * kr->mr;
    g.mb = (g.mb + kr->mr - 1) / kr->mr * kr->mr;
    if (chunks && g.mb > MB_PART / kr->mr * kr->mr)
        g.mb = MB_PART / kr->mr * kr->mr;
    g.ntasks = ((M + g.mb - 1) / g.mb) * g.ncb;
    while (g.ntasks >= ((int64_t)1 << 31)) { /* the ticket counts tasks in 32 bits */
        g.mb *= 2;
        g.ntasks = ((M + g.mb - 1) / g.mb) * g.ncb;
    }
    if (!par || g.ntasks == 1 || task_scratch) {
        for (int64_t t = 0; t < g.ntasks; t++)
            run_task(&g, t, task_scratch ? task_scratch : p->scratch[0]);
        return;
    }
    run_parallel(p, g.ntasks, run_task, &g);
}

void pg_cpu_gemm(pg_ctx *c, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, int beta, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return;
    gemm_job g = {c->gemm->kern, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL, NULL, 0, 0, 0, 0, 0};
    gemm_run(c->gemm, g);
}

void pg_cpu_gemm_epi(pg_ctx *c, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                     int64_t lda, const float *B, int64_t ldb, int beta, float *C, int64_t ldc, const pg_cpu_epi *epi)
{
    if (M <= 0 || N <= 0)
        return;
    gemm_job g = {c->gemm->kern, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL, epi, 0, 0, 0, 0, 0};
    gemm_run(c->gemm, g);
}

void pg_cpu_gemm_bsrc(pg_ctx *c, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                      const pg_cpu_bsrc *b, int beta, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return;
    gemm_job g = {c->gemm->kern, 0, 0, M, N, K, alpha, A, lda, NULL, 0, beta, C, ldc, b, NULL, NULL, 0, 0, 0, 0, 0};
    gemm_run(c->gemm, g);
}

/* ---- B packed once for many products ---------------------------------------
 * A weight is the same B for every micro-batch of a step: packed here once
 * (pg_cpu_gemm_pack) into the panels a task would pack for itself, but over
 * the whole of K, then read in place by every product (pg_cpu_gemm_packed):
 * panel q at bp + q K NR, the chunk from k0 at + k0 NR. The kernels' own
 * packing functions fill it, so it holds exactly what a task's buffer would:
 * the same values for the same FMA chains, the same bits. */

int64_t pg_cpu_gemm_packed_floats(const pg_ctx *c, int64_t N, int64_t K)
{
    int64_t nr = c->gemm->kern->nr;
    return (N + nr - 1) / nr * nr * K;
}

typedef struct pack_job {
    gemm_job g;    /* B, ldb, tb, N, K: what the packing functions read */
    float *bp;
    int64_t ppt;   /* panels per task */
} pack_job;

static void pack_task(void *arg, int64_t t, float *scratch)
{
    (void)scratch;
    const pack_job *j = arg;
    const gemm_kern *kr = j->g.kern;
    int64_t q0 = t * j->ppt, j0 = q0 * kr->nr;
    int64_t nbw = j->g.N - j0 < j->ppt * kr->nr ? j->g.N - j0 : j->ppt * kr->nr;
    kr->pack(&j->g, kr->nr, j->bp + q0 * kr->nr * j->g.K, j0, nbw, 0, j->g.K);
}

void pg_cpu_gemm_pack(pg_ctx *c, int tb, int64_t N, int64_t K, const float *B, int64_t ldb, float *bp)
{
    pg_cpu_gemm_pool *p = c->gemm;
    const gemm_kern *kr = p->kern;
    if (N <= 0 || K <= 0)
        return;
    pack_job j = {{kr, 0, tb, 0, N, K, 1.0f, NULL, 0, B, ldb, 0, NULL, 0, NULL, NULL, NULL, 0, 0, 0, 0, 0}, bp, 0};
    int64_t panels = (N + kr->nr - 1) / kr->nr;
    /* a task per few panels (about PACK_B_FLOATS floats, a task's own pack), several per thread */
    j.ppt = PACK_B_FLOATS / (kr->nr * K);
    if (j.ppt < 1)
        j.ppt = 1;
    int64_t want = (int64_t)TASKS_PER_THREAD * p->n;
    if (p->n > 1 && (panels + j.ppt - 1) / j.ppt < want)
        j.ppt = (panels + want - 1) / want;
    int64_t ntasks = (panels + j.ppt - 1) / j.ppt;
    if (p->n == 1 || ntasks == 1 || task_scratch || (double)N * (double)K < PAR_MIN_FMAS / 16) {
        for (int64_t t = 0; t < ntasks; t++)
            pack_task(&j, t, NULL);
        return;
    }
    run_parallel(p, ntasks, pack_task, &j);
}

int pg_cpu_gemm_pack_diff(const pg_ctx *c, int tb, int64_t N, int64_t K, const float *B, int64_t ldb, const float *bp,
                          int64_t *kd, int64_t *jd)
{
    int64_t nr = c->gemm->kern->nr, np = (N + nr - 1) / nr * nr;
    for (int64_t j = 0; j < np; j++) {
        const float *panel = bp + j / nr * nr * K + j % nr;
        for (int64_t k = 0; k < K; k++) {
            float want = j >= N ? 0.0f : tb ? B[j * ldb + k] : B[k * ldb + j];
            if (memcmp(&panel[k * nr], &want, sizeof want)) {
                *kd = k, *jd = j;
                return 1;
            }
        }
    }
    return 0;
}

void pg_cpu_gemm_packed(pg_ctx *c, int ta, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                        const float *bp, int beta, float *C, int64_t ldc, const pg_cpu_epi *epi)
{
    if (M <= 0 || N <= 0)
        return;
    gemm_job g = {c->gemm->kern, ta, 0, M, N, K, alpha, A, lda, NULL, 0, beta, C, ldc, NULL, bp, epi, 0, 0, 0, 0, 0};
    gemm_run(c->gemm, g);
}

/* ---- pg_cpu_parallel ------------------------------------------------------- */

int pg_cpu_in_task(void) { return task_scratch != NULL; }

typedef struct par_job {
    void (*fn)(void *arg, int64_t t);
    void *arg;
} par_job;

static void par_task(void *arg, int64_t t, float *scratch)
{
    const par_job *j = arg;
    task_scratch = scratch;
    j->fn(j->arg, t);
    task_scratch = NULL;
}

void pg_cpu_parallel(pg_ctx *c, int64_t n, void (*fn)(void *arg, int64_t t), void *arg)
{
    pg_cpu_gemm_pool *p = c->gemm;
    if (p->n == 1 || n < 2 || task_scratch || n >= ((int64_t)1 << 31)) {
        for (int64_t t = 0; t < n; t++)
            fn(arg, t);
        return;
    }
    par_job j = {fn, arg};
    run_parallel(p, n, par_task, &j);
}

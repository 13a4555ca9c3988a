/* runtime/cpu/cpu_kernels.h — helpers private to the CPU kernels (not part of
 * the pg_ops.h contract): argument checks and the counter hashes that init
 * and dropout use. Everything here is a pure function of its arguments. */
#ifndef PG_CPU_KERNELS_H
#define PG_CPU_KERNELS_H

#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "pg_ops.h"

/* gemm.c's threads, buffers and kernel; the backend's pg_ctx holds one
 * (cpu_ctx.h). */
typedef struct pg_cpu_gemm_pool pg_cpu_gemm_pool;

/* gemm.c: C[M,N] = (beta ? C : 0) + alpha * op(A) op(B), row-major, where
 * op(A) is A[M,K] (row stride lda) or, with ta, A stored as [K,M]; op(B) is
 * B[K,N] (ldb) or, with tb, B stored as [N,K]. Each element is one FMA chain
 * over k in index order from 0, then times alpha, then (beta) added to C: its
 * bits do not depend on M, N, its place, the thread count or the kernel. */
void pg_cpu_gemm(pg_ctx *c, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, int beta, float *C, int64_t ldc);
/* An elementwise op fused into a GEMM's store: fn(arg, i0, rows, j0, cols)
 * runs once for every strip of C, rows [i0, i0 + rows) x columns [j0, j0 +
 * cols), right after the strip's last k (C final there, still in L1), on
 * whichever GEMM thread computed it; the strips cover C exactly once. It may
 * read C and the caller's other buffers and write only its own output at
 * those rows and columns. An op whose every element's bits depend on that
 * element alone (not on its place or the count) gives the bits of a separate
 * pass over the whole of C after the product. */
typedef struct pg_cpu_epi {
    void (*fn)(const void *arg, int64_t i0, int64_t rows, int64_t j0, int64_t cols);
    const void *arg;
} pg_cpu_epi;
/* pg_cpu_gemm, then epi on every strip of C (epi NULL: pg_cpu_gemm) */
void pg_cpu_gemm_epi(pg_ctx *c, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                     int64_t lda, const float *B, int64_t ldb, int beta, float *C, int64_t ldc, const pg_cpu_epi *epi);
/* B of a product given by the code that packs it rather than as a matrix (an
 * implicit matrix: conv.c's windows over an image, no column matrix stored).
 * pack(arg, nr, bp, j0, nbw, k0, kc) writes B's columns [j0, j0 + nbw) for k
 * in [k0, k0 + kc) as gemm.c's panels: panel q at bp + q kc nr holds, for each
 * k in order, the nr values B(k0 + k, j0 + q nr + 0 .. nr - 1), zeros past
 * the block; bp is 64-byte aligned. It only moves data, so the product's bits
 * are those of pg_cpu_gemm on the stored B [K, N]; it runs on any GEMM thread
 * (several at once) and must not write anything but bp. */
typedef struct pg_cpu_bsrc {
    void (*pack)(const void *arg, int nr, float *bp, int64_t j0, int64_t nbw, int64_t k0, int64_t kc);
    const void *arg;
} pg_cpu_bsrc;
/* pg_cpu_gemm with ta = 0 and B from b: C[M,N] = (beta ? C : 0) + alpha A[M,K] B[K,N] */
void pg_cpu_gemm_bsrc(pg_ctx *c, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                      const pg_cpu_bsrc *b, int beta, float *C, int64_t ldc);
/* B packed once for many products (a weight, the same B for every
 * micro-batch of a step; wpack.c keeps them): gemm.c's panels of the
 * context's kernel's NR columns over the whole of K, panel q at bp + q K NR
 * holding, for each k in order, the NR values B(k, q NR + 0 .. NR - 1), zeros
 * past N. pg_cpu_gemm_packed_floats: its size, ceil(N / NR) NR K floats.
 * pg_cpu_gemm_pack writes it from B [K,N] (ldb) or, with tb, B stored [N,K],
 * bp 64-byte aligned (on the GEMM threads). pg_cpu_gemm_packed is
 * pg_cpu_gemm_epi with B read from bp: packing only moves values, so the
 * bits are those of pg_cpu_gemm on the B it was packed from.
 * pg_cpu_gemm_pack_diff: 0 when bp holds B's current values, else 1 and the
 * first (k, j) that differs (PIPE_CHECK_PACKS). */
int64_t pg_cpu_gemm_packed_floats(const pg_ctx *c, int64_t N, int64_t K);
void pg_cpu_gemm_pack(pg_ctx *c, int tb, int64_t N, int64_t K, const float *B, int64_t ldb, float *bp);
void pg_cpu_gemm_packed(pg_ctx *c, int ta, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                        const float *bp, int beta, float *C, int64_t ldc, const pg_cpu_epi *epi);
int pg_cpu_gemm_pack_diff(const pg_ctx *c, int tb, int64_t N, int64_t K, const float *B, int64_t ldb, const float *bp,
                          int64_t *kd, int64_t *jd);
/* wpack.c: a weight W [rows, cols] as B of a product, packed once after each
 * write of W: orient PG_CPU_WT for B = W^T (x W^T, the forward: tb), PG_CPU_W
 * for B = W (dy W, the backward-input). *bp the copy, or NULL when W is not
 * one of the stage's packed weights (or the call runs inside a
 * pg_cpu_parallel task): pack per call then. 1 (the message printed) when
 * PIPE_CHECK_PACKS finds the copy stale. */
enum { PG_CPU_WT = 0, PG_CPU_W = 1 };
int pg_cpu_wpack_b(pg_ctx *c, const float *w, int64_t rows, int64_t cols, int orient, const float **bp);
/* Marks every packed weight that [p, p + bytes) overlaps as written: its
 * copies are packed again at their next use. */
void pg_cpu_wpack_touch(pg_ctx *c, const void *p, size_t bytes);
void pg_cpu_wpack_free(pg_ctx *c);
/* backend.c: bytes of zeroed memory, 256-byte aligned (2 MiB and asked for
 * transparent huge pages from 8 MiB on), for free(); NULL when not had. */
void *pg_cpu_alloc_zeroed(size_t bytes);
/* The line pg_gemm_weights_plan prints (main.c: at start-up, on stdout) when
 * the stage has GEMM weights: how many are packed, their bytes, how many the
 * cap left out. */
void pg_cpu_wpack_say(const pg_ctx *c, int stage, FILE *out);
int pg_cpu_in_task(void); /* gemm.c: 1 inside a pg_cpu_parallel task */
/* fn(arg, t) for every t in [0, n), spread over the GEMM threads in any
 * order; returns when all are done. Inside fn, pg_cpu_gemm runs on the
 * thread that calls it (so the tasks must write disjoint outputs, and each
 * task's bits are the same on any thread). */
void pg_cpu_parallel(pg_ctx *c, int64_t n, void (*fn)(void *arg, int64_t t), void *arg);
/* threads >= 1 (the caller's included); the kernel from the CPU or
 * PIPE_CPU_GEMM. NULL + message when it cannot. */
pg_cpu_gemm_pool *pg_cpu_gemm_pool_new(int threads);
void pg_cpu_gemm_pool_free(pg_cpu_gemm_pool *p);
const char *pg_cpu_gemm_kernel(const pg_cpu_gemm_pool *p); /* "avx512", "avx2", "portable" */

/* Column blocks for fixed-order column sums: a row-major walk over [n, BLK]
 * with double accumulators on the stack, so no workspace is needed. */
#define PG_CPU_COLBLK 64

/* Argument rules (sizes >= 0, within 32-bit ints, ...): runtime/core/op_args.h. */

/* pg_splitmix64 and pg_unit24: pg_contract.h (through pg_ops.h). */

/* e^a[j] in place for a block of PG_CPU_EXP_BLK floats (pg_cpu_exp_blk), or
 * lane by lane inside a caller's fixed-count loop (pg_cpu_exp_clamp, then
 * pg_cpu_exp_lane): each a[j] clamped to [-87, 88] first (so e^a stays a
 * normal float; NaN stays NaN), within 1 ulp of e^x (0.99 at worst;
 * tests/kernels.t bounds it by 3). Fixed-count loops that -O2 turns into SIMD
 * (libm's expf/tanhf are calls, one element at a time).
 * Only IEEE add, mul, compare and integer ops, no FMA contraction under
 * -std=c11: an element's bits do not depend on its lane, its block or the
 * instruction set's vector width. */
#define PG_CPU_EXP_BLK 16

/* Block helpers are forced inline, so that a caller compiled for a wider
 * instruction set (PG_CPU_AVX2 below) vectorizes their loops with it too. */
#if defined(__GNUC__)
#define PG_CPU_INLINE static inline __attribute__((always_inline))
#else
#define PG_CPU_INLINE static inline
#endif

/* On x86 with gcc or clang, the hottest elementwise loops are compiled twice:
 * for the baseline (SSE2) and with __attribute__((target("avx2"))), picked at
 * run time. Both run the same IEEE operations lane by lane (no FMA: avx2 alone
 * does not enable it, and -std=c11 does not contract), so the bits are the
 * same on either path; only the vector width differs. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define PG_CPU_AVX2 1
#define PG_CPU_TARGET_AVX2 __attribute__((target("avx2")))
static inline int pg_cpu_has_avx2(void)
{
    static int has = -1; /* the CPU does not change: asked once per file */
    if (has < 0)
        has = __builtin_cpu_supports("avx2") ? 1 : 0;
    return has;
}
#endif

/* layernorm.c's rows, rmsnorm.c's too: mean NULL is rmsnorm (no centring, no
 * bias); the ops' argument checks are the callers'. */
void pg_cpu_norm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x, const float *w, const float *b,
                     float *y, float *mean, float *rstd);
void pg_cpu_norm_bwd_in(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w, const float *mean,
                        const float *rstd, const float *dy, float *dx);
void pg_cpu_norm_bwd_w(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *mean, const float *rstd,
                       const float *dy, float *dw, float *db);
/* The same fused with the residual add beside them: the forward of z = x + s,
 * writing z; the backward's dx plus ds (a skip's gradient). */
void pg_cpu_norm_add_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x, const float *s, float *z,
                         const float *w, const float *b, float *y, float *mean, float *rstd);
void pg_cpu_norm_bwd_in_add(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w, const float *mean,
                            const float *rstd, const float *dy, const float *ds, float *dx);

/* Row sums of the norms (layernorm.c, rmsnorm.c): a row is cut into chunks of
 * PG_CPU_ROW_CHUNK elements, a chunk into blocks of PG_CPU_ROW_LANES; lane l of
 * a chunk adds the elements l, l + 16, ... of it in index order in float (a
 * last partial block padded with zeros), the lanes are added in the fixed tree
 * of pg_cpu_lanes_sum, and the chunks' sums in double in chunk order. The
 * order is set by the row's length alone, and the lanes are SIMD registers at
 * -O2 on any instruction set (the same IEEE adds lane by lane): a row's bits do
 * not depend on the thread, its place or the vector width. Float lanes keep
 * each lane's chain to at most 16 adds (a relative error of a few 1e-7, below
 * the float result's own rounding); the double between chunks keeps long rows
 * (d = 4096 and more) as precise. */
#define PG_CPU_ROW_LANES 16
#define PG_CPU_ROW_CHUNK 256

/* The largest of x[0, n), n >= 1, in PG_CPU_ROW_LANES lanes (exact in any
 * order; a plain loop's compare-and-branch does not vectorize). */
PG_CPU_INLINE float pg_cpu_row_max(const float *x, int64_t n)
{
    float mx[PG_CPU_ROW_LANES];
    for (int l = 0; l < PG_CPU_ROW_LANES; l++)
        mx[l] = x[0];
    int64_t j = 0;
    for (; j + PG_CPU_ROW_LANES <= n; j += PG_CPU_ROW_LANES)
        for (int l = 0; l < PG_CPU_ROW_LANES; l++)
            mx[l] = x[j + l] > mx[l] ? x[j + l] : mx[l];
    for (; j < n; j++)
        mx[0] = x[j] > mx[0] ? x[j] : mx[0];
    float m = mx[0];
    for (int l = 1; l < PG_CPU_ROW_LANES; l++)
        m = mx[l] > m ? mx[l] : m;
    return m;
}

/* PG_CPU_ROW_LANES double lanes added in pg_cpu_lanes_sum's tree: the sums
 * that stay in double (the attention softmax's rows, pg_sumsq) */
PG_CPU_INLINE double pg_cpu_lanes_sum_d(const double *a)
{
    double h[PG_CPU_ROW_LANES / 2];
    for (int l = 0; l < PG_CPU_ROW_LANES / 2; l++)
        h[l] = a[l] + a[l + PG_CPU_ROW_LANES / 2];
    return ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
}

/* sum of a[i] b[i] over [0, n) in double: PG_CPU_ROW_LANES lanes, lane l
 * adding the products i = l mod 16 in index order, then pg_cpu_lanes_sum_d */
PG_CPU_INLINE double pg_cpu_dot_d(const float *a, const float *b, int64_t n)
{
    /* the lanes start as 0.0 + the first block's products (the add kept: the
     * same bits as from zeros, without the zero-fill gcc makes a `rep stos`,
     * slow at this size: most of the softmax backward's rows at T = 64) */
    double acc[PG_CPU_ROW_LANES];
    int64_t i = 0;
    if (n >= PG_CPU_ROW_LANES) {
        for (int l = 0; l < PG_CPU_ROW_LANES; l++)
            acc[l] = 0.0 + (double)a[l] * b[l];
        i = PG_CPU_ROW_LANES;
    } else
        for (int l = 0; l < PG_CPU_ROW_LANES; l++)
            acc[l] = 0.0;
    for (; i + PG_CPU_ROW_LANES <= n; i += PG_CPU_ROW_LANES)
        for (int l = 0; l < PG_CPU_ROW_LANES; l++)
            acc[l] += (double)a[i + l] * b[i + l];
    for (int l = 0; i + l < n; l++)
        acc[l] += (double)a[i + l] * b[i + l];
    return pg_cpu_lanes_sum_d(acc);
}

PG_CPU_INLINE float pg_cpu_lanes_sum(const float *a)
{
    float h[PG_CPU_ROW_LANES / 2];
    for (int l = 0; l < PG_CPU_ROW_LANES / 2; l++)
        h[l] = a[l] + a[l + PG_CPU_ROW_LANES / 2];
    return ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
}

/* the k < PG_CPU_ROW_LANES elements of a (none for NULL) at t, zeros after them */
PG_CPU_INLINE void pg_cpu_row_pad(const float *a, int64_t k, float *t)
{
    for (int l = 0; l < PG_CPU_ROW_LANES; l++)
        t[l] = 0.0f;
    if (a)
        memcpy(t, a, (size_t)k * sizeof *t);
}

/* sum of x[0, d) in the row sums' order */
PG_CPU_INLINE double pg_cpu_row_sum(const float *x, int64_t d)
{
    double s = 0.0;
    for (int64_t c = 0; c < d; c += PG_CPU_ROW_CHUNK) {
        int64_t e = d - c < PG_CPU_ROW_CHUNK ? d : c + PG_CPU_ROW_CHUNK, j = c;
        float acc[PG_CPU_ROW_LANES] = {0}, t[PG_CPU_ROW_LANES];
        for (; j + PG_CPU_ROW_LANES <= e; j += PG_CPU_ROW_LANES)
            for (int l = 0; l < PG_CPU_ROW_LANES; l++)
                acc[l] += x[j + l];
        if (j < e) {
            pg_cpu_row_pad(x + j, e - j, t);
            for (int l = 0; l < PG_CPU_ROW_LANES; l++)
                acc[l] += t[l];
        }
        s += pg_cpu_lanes_sum(acc);
    }
    return s;
}

/* sum of (x - m)^2 over x[0, d) in the same order (the pads' deviations zeroed) */
PG_CPU_INLINE double pg_cpu_row_sqdev(const float *x, int64_t d, float m)
{
    double s = 0.0;
    for (int64_t c = 0; c < d; c += PG_CPU_ROW_CHUNK) {
        int64_t e = d - c < PG_CPU_ROW_CHUNK ? d : c + PG_CPU_ROW_CHUNK, j = c;
        float acc[PG_CPU_ROW_LANES] = {0}, t[PG_CPU_ROW_LANES];
        for (; j + PG_CPU_ROW_LANES <= e; j += PG_CPU_ROW_LANES)
            for (int l = 0; l < PG_CPU_ROW_LANES; l++) {
                float v = x[j + l] - m;
                acc[l] += v * v;
            }
        if (j < e) {
            pg_cpu_row_pad(NULL, 0, t);
            for (int64_t l = 0; l < e - j; l++)
                t[l] = x[j + l] - m;
            for (int l = 0; l < PG_CPU_ROW_LANES; l++)
                acc[l] += t[l] * t[l];
        }
        s += pg_cpu_lanes_sum(acc);
    }
    return s;
}

/* The clamp, in a loop of its own: there gcc turns the two compares into
 * selects; inside the exp's loop it duplicates the loop body for the clamped
 * constants instead and vectorizes nothing. */
PG_CPU_INLINE float pg_cpu_exp_clamp(float a)
{
    a = a < -87.0f ? -87.0f : a;
    return a > 88.0f ? 88.0f : a;
}

/* e^a for a clamped a: a = n ln2 + r, n = round(a / ln2) by the 1.5 * 2^23
 * trick (n is then the low bits of t's mantissa, so 2^n is built with integer
 * ops alone) and ln2 split in two (n ln2_hi is exact), |r| <= 0.347: the
 * reduction gives r and 2^n; e^r = 1 + r + r^2 q(r), q of degree 4 fitted to
 * (e^r - 1 - r) / r^2 on that interval (relative error 4e-9 before rounding;
 * Taylor's degree 7 before, to the same precision), evaluated in halves
 * (Estrin's form: a chain of 7 dependent operations, Horner's 14). */
PG_CPU_INLINE float pg_cpu_exp_reduce(float a, float *scale)
{
    const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    union { float f; uint32_t u; } t, s;
    t.f = a * 1.44269504088896341f + shift;
    float n = t.f - shift;
    s.u = (t.u << 23) + ((127u - 0x4B400000u) << 23); /* t.u = bits(1.5 * 2^23) + n: (n + 127) << 23 */
    *scale = s.f;
    return (a - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
}

PG_CPU_INLINE float pg_cpu_exp_poly(float r) /* e^r, |r| <= 0.347 */
{
    float r2 = r * r;
    float q = (4.999998808e-01f + 1.666651815e-01f * r) +
              r2 * ((4.166953266e-02f + 8.368923329e-03f * r) + 1.375138178e-03f * r2);
    return (1.0f + r) + r2 * q;
}

PG_CPU_INLINE float pg_cpu_exp_lane(float a)
{
    float scale, r = pg_cpu_exp_reduce(a, &scale);
    return pg_cpu_exp_poly(r) * scale;
}

PG_CPU_INLINE void pg_cpu_exp_blk(float *a)
{
    for (int j = 0; j < PG_CPU_EXP_BLK; j++)
        a[j] = pg_cpu_exp_clamp(a[j]);
    for (int j = 0; j < PG_CPU_EXP_BLK; j++)
        a[j] = pg_cpu_exp_lane(a[j]);
}

/* e^a[j] in place for PG_CPU_EXP_WIDE clamped floats (pg_cpu_exp_clamp), the
 * same bits as pg_cpu_exp_lane, in two loops: the reduction, then the
 * polynomial. The loop is latency-bound (a lane's steps depend on each other;
 * the core overlaps only the lanes whose operations fit its scheduler at
 * once), so two short chains over a wide block run faster than one long
 * chain: gelu's forward over 256 x 512 took 0.96 ns an element in blocks of 16
 * with this exp in one loop, 0.67 like this (bench/README.md, "The gelu
 * family"). */
#define PG_CPU_EXP_WIDE 64

PG_CPU_INLINE void pg_cpu_exp_wide(float *a)
{
    float sc[PG_CPU_EXP_WIDE];
    for (int j = 0; j < PG_CPU_EXP_WIDE; j++)
        a[j] = pg_cpu_exp_reduce(a[j], &sc[j]);
    for (int j = 0; j < PG_CPU_EXP_WIDE; j++)
        a[j] = pg_cpu_exp_poly(a[j]) * sc[j];
}


/* e[j] = e^(x[j] - m) for j < nb <= PG_CPU_EXP_WIDE, in whole blocks of
 * PG_CPU_EXP_BLK (a last partial block padded: its pad's e is 0), each element
 * through pg_cpu_exp_blk's operations (the clamp, then pg_cpu_exp_lane), in
 * two passes over all the blocks: the range reductions, then the polynomials
 * (independent chains the core overlaps; one block at a time left it waiting
 * on latency). x[0, avail) may be read (avail >= nb): a partial block within
 * it is read whole (its pad's values, whatever they are, give exponentials
 * that are then replaced by zeros), past it element by element with the pad
 * at -87. Returns the blocks written. The score rows' softmax (attention.c)
 * and the cross-entropy rows (loss.c) add the blocks into their lanes in
 * order, as they did block by block. */
PG_CPU_INLINE int64_t pg_cpu_exp_shifted(const float *x, int64_t nb, int64_t avail, float m, float *e)
{
    /* the lanes' indices as floats: `lane < k` then compares floats, which
     * gcc vectorizes (an int lane against an int64 count it left scalar) */
    static const float lane[PG_CPU_EXP_BLK] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    int64_t nblk = (nb + PG_CPU_EXP_BLK - 1) / PG_CPU_EXP_BLK;
    float sc[PG_CPU_EXP_WIDE];
    for (int64_t b = 0; b < nblk; b++) {
        float *eb = e + b * PG_CPU_EXP_BLK;
        const float *xb = x + b * PG_CPU_EXP_BLK;
        int64_t k = nb - b * PG_CPU_EXP_BLK; /* the block's elements */
        if (k >= PG_CPU_EXP_BLK || (b + 1) * PG_CPU_EXP_BLK <= avail) /* a pad read whole: zeroed below */
            for (int l = 0; l < PG_CPU_EXP_BLK; l++)
                eb[l] = xb[l] - m;
        else
            for (int l = 0; l < PG_CPU_EXP_BLK; l++)
                eb[l] = l < k ? xb[l] - m : -87.0f;
    }
    for (int64_t b = 0; b < nblk; b++)
        for (int l = 0; l < PG_CPU_EXP_BLK; l++)
            e[b * PG_CPU_EXP_BLK + l] = pg_cpu_exp_clamp(e[b * PG_CPU_EXP_BLK + l]);
    for (int64_t b = 0; b < nblk; b++)
        for (int l = 0; l < PG_CPU_EXP_BLK; l++)
            e[b * PG_CPU_EXP_BLK + l] = pg_cpu_exp_reduce(e[b * PG_CPU_EXP_BLK + l], &sc[b * PG_CPU_EXP_BLK + l]);
    for (int64_t b = 0; b < nblk; b++)
        for (int l = 0; l < PG_CPU_EXP_BLK; l++)
            e[b * PG_CPU_EXP_BLK + l] = pg_cpu_exp_poly(e[b * PG_CPU_EXP_BLK + l]) * sc[b * PG_CPU_EXP_BLK + l];
    float *last = e + (nblk - 1) * PG_CPU_EXP_BLK, kf = (float)(nb - (nblk - 1) * PG_CPU_EXP_BLK);
    for (int l = 0; l < PG_CPU_EXP_BLK; l++) /* the pad's zeros, selected (a fill would be a memset call) */
        last[l] = lane[l] < kf ? last[l] : 0.0f;
    return nblk;
}

#endif

/* runtime/cpu/conv.c — conv2d (conv1d is its h = 1 case) and conv_transpose2d
 * on the backend's GEMM (gemm.c), one GEMM per sample and group against the
 * column matrix col [C_g kh kw, positions] of the window (im2col's):
 *
 *   conv2d            y_g  [out_g, P]  = W_g [out_g, K] col(x_g) [K, P]
 *                     dx_g             = col2im(W_g^T dy_g)
 *                     dW_g [out_g, K] += dy_g [out_g, P] col(x_g)^T
 *   conv_transpose2d  y_g              = col2im(W_g^T x_g)   (W_g [in_g, K])
 *                     dx_g [in_g, P]   = W_g col(dy_g)
 *                     dW_g [in_g, K]  += x_g [in_g, P] col(dy_g)^T
 *
 * (P: the positions the kernel is placed at; K = C_g kh kw, C_g the channels
 * of the image the window reads: x for a convolution, y for a transposed one.)
 * A 1 x 1 window with stride 1 and no padding is its own column matrix: the
 * GEMM reads x (writes dx, y) in place, no workspace.
 *
 * Implicit where it can be (an implicit GEMM: bench/README.md measured the
 * stored column matrix at 28-58 % of a small layer's time): W col(.) never
 * stores col, the GEMM packs its B panels straight from the image (win_pack,
 * pg_cpu_gemm_bsrc), the same values in the same order, so the same bits as
 * a stored col; and with stride 1 the col2im products are computed as what
 * they are, a convolution of the other tensor with the window mirrored
 * (direct_gemm: image value (iy, ix) of channel ch is one FMA chain over (m,
 * ky, kx) in index order of W[m, (ch, ky, kx)] in[m, iy + ph - ky dh, ix + pw
 * - kx dw], terms outside `in` being 0 x w), the workspace holding the
 * rearranged weight. Strided col2im (where the mirrored window would skip
 * most positions) still stores col in the workspace; the weight gradient
 * (whose B is col transposed) packs it from the bordered image by 8 x 8
 * transposes (win_pack_t), or stores it where the bordered copy does not fit.
 * With the AVX2 kernel two of these are not packed at all: with stride 1 and
 * grid rows of whole 16-wide panels (or 8-wide rows in pairs) conv.c's own
 * tiles read B in the bordered image (direct_rows), and with 16k channels
 * the weight gradient's tiles walk the image turned channels last
 * (direct_wgrad).
 *
 * Why these bits hold on any layout: every element of a GEMM is one FMA chain
 * over k in index order (runtime/cpu/README.md), whatever the threads, so y
 * and the column gradients depend on nothing but the sample; which of the
 * two ways a col2im product takes depends on the geometry alone; the strided
 * col2im adds a position's contributions in a fixed order (channel, ky, kx,
 * then the positions in row-major order) on one thread; a weight gradient is
 * one chain over a sample's positions, added into dw sample by sample in
 * index order; a bias gradient sums a micro-batch's dy in double (samples,
 * then positions, in index order) and adds it once. */
#include <string.h>

#include "cpu_ctx.h"
#include "cpu_simd.h"
#include "op_args.h"

/* An implicit column matrix: B(k, j), k = (ch, ky, kx) in index order, j =
 * (py, px) a position of a grid PW wide, is img[ch, iy, ix] with iy = py sy +
 * y0 + ky ky_d, ix = px sx + x0 + kx kx_d, 0 outside the image [C, SH, SW].
 * im2col's matrix is (sy, sx, y0, x0, ky_d, kx_d) = (sh, sw, -ph, -pw, dh,
 * dw); the mirrored window of direct_gemm is (1, 1, ph, pw, -dh, -dw). */
typedef struct win {
    const float *img;
    int64_t SH, SW, PH, PW, kh, kw, sy, sx, y0, x0, ky_d, kx_d;
    int inside; /* every value read lies inside the image (win_padded): no checks */
    int avx2;   /* win_pack_t may transpose with AVX2 (the context's choice: data moves alike) */
} win;

/* d[0, n) = plane[iy, ix0 + t sx] for t < n, 0 outside the plane: n values
 * of B along one row of the grid (the image row iy, from column ix0) */
static inline void win_run(const win *v, const float *restrict plane, int64_t iy, int64_t ix0, int64_t n,
                           float *restrict d)
{
    if (iy < 0 || iy >= v->SH) {
        memset(d, 0, (size_t)n * sizeof *d);
        return;
    }
    const float *restrict src = plane + iy * v->SW;
    if (v->sx != 1) {
        for (int64_t t = 0; t < n; t++) {
            int64_t ix = ix0 + t * v->sx;
            d[t] = ix >= 0 && ix < v->SW ? src[ix] : 0.0f;
        }
        return;
    }
    int64_t lo = ix0 < 0 ? -ix0 : 0, hi = v->SW - ix0; /* t in [lo, hi) reads the row */
    if (lo == 0 && hi >= n) { /* inside the row: the panels' widths as fixed-size copies */
        if (n == 16)
            memcpy(d, src + ix0, 16 * sizeof *d);
        else if (n == 32)
            memcpy(d, src + ix0, 32 * sizeof *d);
        else
            memcpy(d, src + ix0, (size_t)n * sizeof *d);
        return;
    }
    lo = lo < n ? lo : n;
    hi = hi < lo ? lo : hi > n ? n : hi;
    for (int64_t t = 0; t < lo; t++)
        d[t] = 0.0f;
    for (int64_t t = lo; t < hi; t++)
        d[t] = src[ix0 + t];
    for (int64_t t = hi; t < n; t++)
        d[t] = 0.0f;
}

/* d[0, n) = s[t sx]: a run inside the image; the widths of the panels and
 * of small images' rows (8, 16, 32) as fixed-size copies (a libc call each
 * would cost more than the copy) */
static inline __attribute__((always_inline)) void win_copy(const float *restrict s, int64_t sx, int64_t n,
                                                            float *restrict d)
{
    if (sx != 1)
        for (int64_t t = 0; t < n; t++)
            d[t] = s[t * sx];
    else if (n == 16)
        memcpy(d, s, 16 * sizeof *d);
    else if (n == 32)
        memcpy(d, s, 32 * sizeof *d);
    else if (n == 8)
        memcpy(d, s, 8 * sizeof *d);
    else
        memcpy(d, s, (size_t)n * sizeof *d);
}

/* v over a copy of its image in buf with zero borders wide enough that
 * every value it reads lies inside (so win_run always copies whole runs),
 * when the C padded planes fit in room floats; else v itself. Only values
 * move: B is the same matrix. */
/* The zero border v's window needs around its image, b[0..3] = top, bottom,
 * left, right (all 0: every value it reads lies inside) */
static void win_border(const win *v, int64_t b[4])
{
    int64_t ey = (v->kh - 1) * v->ky_d, ex = (v->kw - 1) * v->kx_d; /* the window's extent, either way */
    b[0] = -(v->y0 + (ey < 0 ? ey : 0)), b[1] = (v->PH - 1) * v->sy + v->y0 + (ey > 0 ? ey : 0) - (v->SH - 1);
    b[2] = -(v->x0 + (ex < 0 ? ex : 0)), b[3] = (v->PW - 1) * v->sx + v->x0 + (ex > 0 ? ex : 0) - (v->SW - 1);
    for (int i = 0; i < 4; i++)
        b[i] = b[i] > 0 ? b[i] : 0;
}

/* The border bd (win_border's) of n planes of H x W cells of `cell` floats
 * set to 0: only the border, which the image's copy does not overwrite
 * (zeroing the whole buffer first was 3 % of a ResNet stage) */
static void zero_border(float *buf, int64_t n, int64_t H, int64_t W, int64_t cell, const int64_t bd[4])
{
    size_t f = sizeof *buf;
    for (int64_t i = 0; i < n; i++) {
        float *p = buf + i * H * W * cell;
        memset(p, 0, (size_t)(bd[0] * W * cell) * f);
        for (int64_t y = bd[0]; y < H - bd[1]; y++) {
            memset(p + y * W * cell, 0, (size_t)(bd[2] * cell) * f);
            memset(p + ((y + 1) * W - bd[3]) * cell, 0, (size_t)(bd[3] * cell) * f);
        }
        memset(p + (H - bd[1]) * W * cell, 0, (size_t)(bd[1] * W * cell) * f);
    }
}

static win win_padded(win v, int64_t C, float *buf, int64_t room)
{
    int64_t bd[4];
    win_border(&v, bd);
    int64_t top = bd[0], bot = bd[1], lef = bd[2], rig = bd[3];
    int64_t H = v.SH + top + bot, W = v.SW + lef + rig;
    if ((top | bot | lef | rig) == 0)
        v.inside = 1;
    if (v.inside || !buf || C * H * W > room)
        return v;
    zero_border(buf, C, H, W, 1, bd);
    for (int64_t ch = 0; ch < C; ch++)
        for (int64_t y = 0; y < v.SH; y++)
            win_copy(v.img + (ch * v.SH + y) * v.SW, 1, v.SW, buf + (ch * H + top + y) * W + lef);
    v.img = buf, v.SH = H, v.SW = W, v.y0 += top, v.x0 += lef, v.inside = 1;
    return v;
}

/* The GEMM's packing of a win (pg_cpu_bsrc): the block's positions cut into
 * runs along the grid's rows within a panel (at most WIN_RUNS at a time),
 * then k by k ((ch, ky, kx) counted up, no division) each run copied from its
 * image row; zeros past the block in the last panel. */
#define WIN_RUNS 64

/* The runs of one group (WIN_RUNS at most) for k in [k0, k0 + kc): run u
 * reads the image at so[u] (+ the k's shift) and fills n[u] values of panel
 * row k at off[u] */
typedef struct win_runs {
    int64_t so[WIN_RUNS], off[WIN_RUNS], n[WIN_RUNS];
    int count;
} win_runs;

PG_CPU_INLINE void win_runs_body(const win *v, const win_runs *w, int nr, float *bp, int64_t k0, int64_t kc)
{
    int64_t ch = k0 / (v->kh * v->kw), ky = k0 / v->kw % v->kh, kx = k0 % v->kw;
    for (int64_t k = 0; k < kc; k++) {
        const float *base = v->img + ch * v->SH * v->SW + ky * v->ky_d * v->SW + kx * v->kx_d;
        float *d = bp + k * nr;
        for (int u = 0; u < w->count; u++)
            win_copy(base + w->so[u], v->sx, w->n[u], d + w->off[u]);
        if (++kx == v->kw) {
            kx = 0;
            if (++ky == v->kh)
                ky = 0, ch++;
        }
    }
}

static void win_runs_copy(const win *v, const win_runs *w, int nr, float *bp, int64_t k0, int64_t kc)
{
    win_runs_body(v, w, nr, bp, k0, kc);
}
#ifdef PG_CPU_AVX2
PG_CPU_TARGET_AVX2 static void win_runs_copy_avx2(const win *v, const win_runs *w, int nr, float *bp, int64_t k0,
                                                  int64_t kc)
{
    win_runs_body(v, w, nr, bp, k0, kc);
}
#endif

/* The GEMM's packing of a win (pg_cpu_bsrc): the block's positions cut into
 * runs along the grid's rows within a panel (WIN_RUNS at a time), then k by
 * k ((ch, ky, kx) counted up, no division) each run copied from its image
 * row, inside the image by whole copies (compiled for AVX2 too), else value
 * by value with its checks; zeros past the block in the last panel. */
static void win_pack(const void *arg, int nr, float *bp, int64_t j0, int64_t nbw, int64_t k0, int64_t kc)
{
    const win *v = arg;
    for (int64_t j = 0; j < nbw;) {
        win_runs w;
        int64_t iy0[WIN_RUNS], ix0[WIN_RUNS];
        /* a run ends at the grid's row or at the panel's end */
        for (w.count = 0; j < nbw && w.count < WIN_RUNS; w.count++) {
            int u = w.count;
            int64_t py = (j0 + j) / v->PW, px = (j0 + j) % v->PW, q = j / nr, jj = j % nr;
            w.n[u] = v->PW - px < nr - jj ? v->PW - px : nr - jj;
            w.n[u] = w.n[u] < nbw - j ? w.n[u] : nbw - j;
            w.off[u] = q * kc * nr + jj, iy0[u] = py * v->sy + v->y0, ix0[u] = px * v->sx + v->x0;
            w.so[u] = iy0[u] * v->SW + ix0[u];
            j += w.n[u];
        }
        if (v->inside) {
#ifdef PG_CPU_AVX2
            if (v->avx2) {
                win_runs_copy_avx2(v, &w, nr, bp, k0, kc);
                continue;
            }
#endif
            win_runs_copy(v, &w, nr, bp, k0, kc);
            continue;
        }
        int64_t ch = k0 / (v->kh * v->kw), ky = k0 / v->kw % v->kh, kx = k0 % v->kw;
        for (int64_t k = 0; k < kc; k++) {
            const float *plane = v->img + ch * v->SH * v->SW;
            for (int u = 0; u < w.count; u++)
                win_run(v, plane, iy0[u] + ky * v->ky_d, ix0[u] + kx * v->kx_d, w.n[u], bp + k * nr + w.off[u]);
            if (++kx == v->kw) {
                kx = 0;
                if (++ky == v->kh)
                    ky = 0, ch++;
            }
        }
    }
    int64_t last = nbw % nr; /* the last panel's columns, if it is not full */
    if (last)
        for (int64_t k = 0; k < kc; k++)
            memset(bp + (nbw / nr) * kc * nr + k * nr + last, 0, (size_t)(nr - last) * sizeof *bp);
}

#ifdef PG_CPU_AVX2
/* d[t nr + jj] = s0[off[jj] + t] for t < n rounded down to 8 and jj < w
 * rounded down to 8, the columns past that (up to nr) done for those t too,
 * by 8 x 8 transposes in AVX registers; returns the t done. */
__attribute__((target("avx2"))) static int64_t win_t8x8(const float *s0, const int64_t *off, int64_t w, int64_t n,
                                                        int nr, float *d)
{
    int64_t n8 = n / 8 * 8, w8 = w / 8 * 8;
    for (int64_t t = 0; t < n8; t += 8) {
        for (int64_t j = 0; j < w8; j += 8) {
            const float *const r[8] = {s0 + off[j] + t,     s0 + off[j + 1] + t, s0 + off[j + 2] + t,
                                       s0 + off[j + 3] + t, s0 + off[j + 4] + t, s0 + off[j + 5] + t,
                                       s0 + off[j + 6] + t, s0 + off[j + 7] + t};
            pg_cpu_t8x8(r, d + t * nr + j, nr);
        }
        for (int64_t tt = t; tt < t + 8; tt++) {
            for (int64_t jj = w8; jj < w; jj++)
                d[tt * nr + jj] = s0[off[jj] + tt];
            for (int64_t jj = w; jj < nr; jj++)
                d[tt * nr + jj] = 0.0f;
        }
    }
    return n8;
}
#endif

/* The GEMM's packing of col^T, a win inside its image (the weight
 * gradient's B: B(k, j) = col(j, k), k a position, j = (ch, ky, kx)): for
 * each panel, each column's offset in the image; then for each run of
 * positions along a grid row, value t of column jj is the image at the run's
 * start + jj's offset + t sx. A transpose: rows of the image into the
 * panel's k-major layout. */
#define WIN_NR_MAX 64
static void win_pack_t(const void *arg, int nr, float *bp, int64_t j0, int64_t nbw, int64_t k0, int64_t kc)
{
    const win *v = arg;
    int64_t khw = v->kh * v->kw;
    for (int64_t q = 0; q * nr < nbw; q++) {
        int64_t jc = j0 + q * nr, w = nbw - q * nr < nr ? nbw - q * nr : nr, off[WIN_NR_MAX];
        float *dst = bp + q * kc * nr;
        for (int64_t jj = 0; jj < w; jj++) {
            int64_t kk = jc + jj, ky = kk / v->kw % v->kh, kx = kk % v->kw;
            off[jj] = kk / khw * v->SH * v->SW + ky * v->ky_d * v->SW + kx * v->kx_d;
        }
        for (int64_t p = k0; p < k0 + kc;) {
            int64_t py = p / v->PW, px = p % v->PW;
            int64_t n = v->PW - px < k0 + kc - p ? v->PW - px : k0 + kc - p;
            const float *s0 = v->img + (py * v->sy + v->y0) * v->SW + px * v->sx + v->x0;
            float *d = dst + (p - k0) * nr;
            int64_t t = 0;
#ifdef PG_CPU_AVX2
            if (v->avx2 && v->sx == 1)
                t = win_t8x8(s0, off, w, n, nr, d);
#endif
            for (; t < n; t++) {
                for (int64_t jj = 0; jj < w; jj++)
                    d[t * nr + jj] = s0[off[jj] + t * v->sx];
                for (int64_t jj = w; jj < nr; jj++)
                    d[t * nr + jj] = 0.0f;
            }
            p += n;
        }
    }
}

/* ---- the direct products: B read where it lies, not packed ----
 *
 * With stride 1 along the grid's rows, B's row k = (ch, ky, kx) over 16
 * consecutive positions of a grid row is 16 consecutive values of the image:
 * img[off[k] + base], off[k] = ch SH SW + ky ky_d SW + kx kx_d, base the
 * positions' first value for k = 0. So when the window lies inside its
 * (bordered) image and the grid's rows are whole panels of 16 (or rows of 8
 * in pairs: a panel's second 8 values a row of the image further), the AVX2 + FMA
 * kernel's tiles (6 rows of A by 16 positions, 12 accumulators, as gemm.c's)
 * load B straight from the image at those offsets: no panel is packed. Each
 * element is still the GEMM's one FMA chain over k in index order from 0,
 * over the same values (the border's zeros included), then (alpha being 1)
 * stored or, with beta, added to C: the bits of pg_cpu_gemm_bsrc on the same
 * matrices, which is what the other kernels (AVX-512, portable) compute and
 * tests/conv_kernels.t compares. Tasks are runs of grid rows, each element in
 * exactly one, so the threads cannot show in the result. */
#ifdef PG_CPU_AVX2
#define DIRECT_MR 6
#define DIRECT_NR 16
#define DIRECT_K_MAX 1152 /* off[] on the stack; a longer k takes the packed way */

typedef struct direct_job {
    const win *v;
    const float *a; /* A [M, K], row i at a + i lda */
    int64_t lda, M, K;
    const int64_t *off; /* [K] */
    int beta;
    float *out;         /* C [M, PH PW] */
    int64_t rows;       /* grid rows a task */
} direct_job;

/* mr rows of C (a constant after inlining) by 16 positions: B's row k at b + off[k] */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
direct_ukr(const int mr, const float *a, int64_t lda, const float *b, int64_t b8, const int64_t *off, int64_t K,
           int beta, float *c, int64_t ldc)
{
    __m256 acc[DIRECT_MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const float *bk = b + off[k];
        __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + b8);
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            __m256 av = _mm256_broadcast_ss(a + r * lda + k);
            acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        float *cr = c + r * ldc;
        __m256 t0 = acc[r][0], t1 = acc[r][1];
        if (beta) {
            t0 = _mm256_add_ps(_mm256_loadu_ps(cr), t0);
            t1 = _mm256_add_ps(_mm256_loadu_ps(cr + 8), t1);
        }
        _mm256_storeu_ps(cr, t0);
        _mm256_storeu_ps(cr + 8, t1);
    }
}

__attribute__((target("avx2,fma"))) static void direct_tile(int mr, const float *a, int64_t lda, const float *b,
                                                          int64_t b8, const int64_t *off, int64_t K, int beta,
                                                          float *c, int64_t ldc)
{
#define DIRECT_CASE(n)                                                                      \
    case n:                                                                                 \
        direct_ukr(n, a, lda, b, b8, off, K, beta, c, ldc);                                 \
        break;
    switch (mr) {
        DIRECT_CASE(6) DIRECT_CASE(5) DIRECT_CASE(4) DIRECT_CASE(3) DIRECT_CASE(2) DIRECT_CASE(1)
    }
#undef DIRECT_CASE
}

/* Task t: grid rows [t rows, (t + 1) rows), each panel of 16 positions (of
 * one grid row, or of two rows of 8: its second 8 values then lie a row of
 * the image further) against every strip of A (the panel's B stays in L1
 * for the strips); the strips as gemm.c cuts them (6 rows, the last two
 * sharing fewer than 12). */
static void direct_task(void *arg, int64_t t)
{
    const direct_job *j = arg;
    const win *v = j->v;
    int64_t P = v->PH * v->PW, y1 = (t + 1) * j->rows < v->PH ? (t + 1) * j->rows : v->PH;
    int64_t b8 = v->PW == 8 ? v->SW : 8, dy = v->PW == 8 ? 2 : 1;
    for (int64_t py = t * j->rows; py < y1; py += dy)
        for (int64_t px = 0; px < v->PW; px += DIRECT_NR) {
            const float *b = v->img + (py + v->y0) * v->SW + px + v->x0;
            for (int64_t i = 0, mr; i < j->M; i += mr) {
                int64_t left = j->M - i;
                mr = left <= DIRECT_MR ? left : left < 2 * DIRECT_MR ? (left + 1) / 2 : DIRECT_MR;
                direct_tile((int)mr, j->a + i * j->lda, j->lda, b, b8, j->off, j->K, j->beta,
                            j->out + i * P + py * v->PW + px, P);
            }
        }
}
#endif

/* out [M, PH PW] (= beta ? out : 0) + A [M, K] win(v) [K, PH PW] by the direct
 * products when they apply (the AVX2 GEMM kernel, v inside its image, stride
 * 1, whole panels, k within DIRECT_K_MAX); 0 when they do not (the caller
 * then packs) */
static int direct_rows(pg_ctx *c, const win *v, int64_t M, int64_t K, const float *a, int64_t lda, int beta,
                       float *out)
{
#ifdef PG_CPU_AVX2
    int whole = v->PW % DIRECT_NR == 0 || (v->PW == 8 && v->PH % 2 == 0); /* panels of 16: 1 row, or 2 of 8 */
    if (!v->inside || v->sy != 1 || v->sx != 1 || !whole || K > DIRECT_K_MAX ||
        strcmp(pg_cpu_gemm_kernel(c->gemm), "avx2"))
        return 0;
    int64_t off[DIRECT_K_MAX], ch = 0, ky = 0, kx = 0;
    for (int64_t k = 0; k < K; k++) { /* (ch, ky, kx) counted up */
        off[k] = ch * v->SH * v->SW + ky * v->ky_d * v->SW + kx * v->kx_d;
        if (++kx == v->kw) {
            kx = 0;
            if (++ky == v->kh)
                ky = 0, ch++;
        }
    }
    /* tasks of at least ~2^17 multiply-adds (a row of 32 positions at 16 x 144 is 2^16.2) */
    int64_t per_row = M * v->PW * K, rows = per_row >= (1 << 17) ? 1 : ((1 << 17) + per_row - 1) / per_row;
    rows += v->PW == 8 && rows % 2; /* rows of 8 go in pairs */
    direct_job j = {v, a, lda, M, K, off, beta, out, rows};
    pg_cpu_parallel(c, (v->PH + rows - 1) / rows, direct_task, &j);
    return 1;
#else
    (void)c, (void)v, (void)M, (void)K, (void)a, (void)lda, (void)beta, (void)out;
    return 0;
#endif
}

/* ---- the direct weight gradient: the image channels last ----
 *
 * dW [M, C kh kw] += lhs [M, P] col^T: element (m, (ch, ky, kx)) is one FMA
 * chain over the positions p in index order of lhs[m, p] img[ch, iy(p, ky),
 * ix(p, kx)]. With the image's channels last ([SH SW, C], 16 channels a
 * vector), 16 channels at one (ky, kx) are 16 consecutive floats at every p:
 * a tile of 6 rows of lhs by those 16 columns walks p with two loads and six
 * broadcasts a step, where the packed way turned K x P values of col^T into
 * panels for every sample. The image goes channels last once per sample by
 * 8 x 8 transposes, with its zero border (or, for a 1 x 1 window inside the
 * image, only the positions it reads: [P, C], what the workspace holds); the
 * chain, its values and the final add into dW (alpha 1) are the packed
 * way's, so the same bits. */
#ifdef PG_CPU_AVX2
typedef struct dwg_job {
    const float *img;   /* [rows of SW, C]: the image channels last */
    int64_t C, SW, PH, PW, kh, kw, sy, sx, y0, x0, ky_d, kx_d;
    const float *lhs;   /* [M, P] */
    int64_t M, P;
    float *dw;          /* [M, C kh kw] */
} dwg_job;

/* mr rows (a constant after inlining) of lhs from row i by 16 channels at
 * (ky, kx), channel group cg: the chain over every position, then added in */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
dwg_ukr(const int mr, const dwg_job *j, int64_t i, int64_t cg, int64_t ky, int64_t kx)
{
    __m256 acc[DIRECT_MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    /* the job's fields in locals: read through j, gcc reloads them at every step */
    const int64_t P = j->P, PW = j->PW, PH = j->PH, step = j->sx * j->C;
    const float *ar[DIRECT_MR];
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++)
        ar[r] = j->lhs + (i + r) * P;
    const float *b = j->img + ((j->y0 + ky * j->ky_d) * j->SW + j->x0 + kx * j->kx_d) * j->C + cg * 16;
    const int64_t row = j->sy * j->SW * j->C;
    for (int64_t py = 0, p = 0; py < PH; py++, b += row) {
        const float *bp = b;
        for (int64_t e = p + PW; p < e; p++, bp += step) {
            __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
#pragma GCC unroll 6
            for (int r = 0; r < mr; r++) {
                __m256 av = _mm256_broadcast_ss(ar[r] + p);
                acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
            }
        }
    }
    int64_t K = j->C * j->kh * j->kw;
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        float t[16];
        _mm256_storeu_ps(t, acc[r][0]);
        _mm256_storeu_ps(t + 8, acc[r][1]);
        float *d = j->dw + (i + r) * K + (cg * 16 * j->kh + ky) * j->kw + kx;
        for (int l = 0; l < 16; l++)
            d[l * j->kh * j->kw] = d[l * j->kh * j->kw] + t[l];
    }
}

__attribute__((target("avx2,fma"))) static void dwg_tile(int mr, const dwg_job *j, int64_t i, int64_t cg,
                                                       int64_t ky, int64_t kx)
{
#define DWG_CASE(n)                                                                         \
    case n:                                                                                 \
        dwg_ukr(n, j, i, cg, ky, kx);                                                       \
        break;
    switch (mr) {
        DWG_CASE(6) DWG_CASE(5) DWG_CASE(4) DWG_CASE(3) DWG_CASE(2) DWG_CASE(1)
    }
#undef DWG_CASE
}

/* Task t: the columns of channel group t / (kh kw) at (ky, kx) = t mod (kh kw), every strip of rows */
static void dwg_task(void *arg, int64_t t)
{
    const dwg_job *j = arg;
    int64_t khw = j->kh * j->kw, cg = t / khw, ky = t % khw / j->kw, kx = t % j->kw;
    for (int64_t i = 0, mr; i < j->M; i += mr) {
        int64_t left = j->M - i;
        mr = left <= DIRECT_MR ? left : left < 2 * DIRECT_MR ? (left + 1) / 2 : DIRECT_MR;
        dwg_tile((int)mr, j, i, cg, ky, kx);
    }
}

/* dst[(y W + x) ld + l] = src[l plane + y sw + x sx] for l < 8, x < n, y < h:
 * 8 channels of h rows of n values (every sx-th) turned channels last, by 8 x 8
 * transposes (values only move) */
__attribute__((target("avx2"))) static void chan_last8(const float *src, int64_t plane, int64_t sw, int64_t sx,
                                                       int64_t h, int64_t n, float *dst, int64_t W, int64_t ld)
{
    for (int64_t y = 0; y < h; y++) {
        int64_t x = 0;
        for (; x + 8 <= n; x += 8) {
            float tmp[8][8];
            const float *r[8];
            for (int l = 0; l < 8; l++) {
                const float *s0 = src + l * plane + y * sw + x * sx;
                if (sx == 1)
                    r[l] = s0;
                else {
                    for (int i = 0; i < 8; i++)
                        tmp[l][i] = s0[i * sx];
                    r[l] = tmp[l];
                }
            }
            pg_cpu_t8x8(r, dst + (y * W + x) * ld, ld);
        }
        for (; x < n; x++)
            for (int l = 0; l < 8; l++)
                dst[(y * W + x) * ld + l] = src[l * plane + y * sw + x * sx];
    }
}
#endif

/* dw [M, C kh kw] += lhs [M, P] col(v)^T by the direct tiles when they apply
 * (the AVX2 GEMM kernel, C a multiple of 16, at least 256 positions, the
 * channels-last image in room floats of buf); 0 when they do not (the caller packs) */
static int direct_wgrad(pg_ctx *c, const win *v, int64_t C, int64_t M, const float *lhs, float *dw, float *buf,
                        int64_t room)
{
#ifdef PG_CPU_AVX2
    int64_t bd[4], P = v->PH * v->PW, plane = v->SH * v->SW;
    /* fewer positions: each tile's chain is too short to pay for its scattered adds into dw
     * (3 x 3 64 -> 64 at 8 x 8: 52 GFLOP/s this way, 66 packed) */
    if (C % 16 || P < 256 || !buf || strcmp(pg_cpu_gemm_kernel(c->gemm), "avx2"))
        return 0;
    win_border(v, bd);
    int64_t H = v->SH + bd[0] + bd[1], W = v->SW + bd[2] + bd[3];
    dwg_job j = {buf, C, W, v->PH, v->PW, v->kh, v->kw, v->sy, v->sx, v->y0 + bd[0], v->x0 + bd[2], v->ky_d,
                 v->kx_d, lhs, M, P, dw};
    if (C * H * W <= room) { /* the whole image, bordered */
        zero_border(buf, 1, H, W, C, bd);
        for (int64_t ch = 0; ch < C; ch += 8)
            chan_last8(v->img + ch * plane, plane, v->SW, 1, v->SH, v->SW, buf + (bd[0] * W + bd[2]) * C + ch, W, C);
    } else if (v->kh == 1 && v->kw == 1 && (bd[0] | bd[1] | bd[2] | bd[3]) == 0 && C * P <= room) {
        /* a 1 x 1 window inside the image: the positions it reads, [P, C] */
        for (int64_t ch = 0; ch < C; ch += 8)
            chan_last8(v->img + ch * plane + v->y0 * v->SW + v->x0, plane, v->sy * v->SW, v->sx, v->PH, v->PW,
                       buf + ch, v->PW, C);
        j.SW = v->PW, j.sy = j.sx = 1, j.y0 = j.x0 = 0;
    } else
        return 0;
    pg_cpu_parallel(c, C / 16 * v->kh * v->kw, dwg_task, &j);
    return 1;
#else
    (void)c, (void)v, (void)C, (void)M, (void)lhs, (void)dw, (void)buf, (void)room;
    return 0;
#endif
}

/* img [C, IH, IW] += the adjoint of im2col: each column entry added back where
 * im2col took it from, in im2col's order (rows, then positions row-major). */
static void col2im_add(const pg_conv *g, int64_t C, int64_t IH, int64_t IW, int64_t PH, int64_t PW, const float *col,
                       float *img)
{
    for (int64_t ch = 0; ch < C; ch++)
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                const float *row = col + ((ch * g->kh + ky) * g->kw + kx) * PH * PW;
                float *plane = img + ch * IH * IW;
                int64_t x0 = kx * g->dw - g->pw;
                for (int64_t py = 0; py < PH; py++) {
                    int64_t iy = py * g->sh - g->ph + ky * g->dh;
                    if (iy < 0 || iy >= IH)
                        continue;
                    const float *src = row + py * PW;
                    float *dst = plane + iy * IW;
                    for (int64_t px = 0; px < PW; px++) {
                        int64_t ix = px * g->sw + x0;
                        if (ix >= 0 && ix < IW)
                            dst[ix] += src[px];
                    }
                }
            }
}

/* One call's sizes: the window's image (what im2col reads, col2im writes:
 * C channels of one group, IH x IW) and positions (PH x PW = P), K = C kh kw,
 * x's and y's planes, and whether the window is pointwise. */
typedef struct cv {
    int64_t C, IH, IW, PH, PW, P, K, HW, OHW;
    int pw;
} cv;

static cv cv_of(const pg_conv *g)
{
    cv v = {pg_conv_img_c(g) / g->groups, pg_conv_img_h(g), pg_conv_img_w(g), g->transposed ? g->h : g->oh,
            g->transposed ? g->w : g->ow, 0, 0, g->h * g->w, g->oh * g->ow, pg_conv_is_pointwise(g)};
    v.P = v.PH * v.PW;
    v.K = v.C * g->kh * g->kw;
    return v;
}

/* col [C kh kw, PH PW] from img [C, IH, IW]: row (c, ky, kx), column (py, px)
 * holds img[c, py sh - ph + ky dh, px sw - pw + kx dw], 0 outside (the
 * window matrix of gemm_col, stored: the weight gradient reads it whole). */
static void im2col_of(const pg_conv *g, const cv *v, const float *img, float *col)
{
    win wn = {img, v->IH, v->IW, v->PH, v->PW, g->kh, g->kw, g->sh, g->sw, -g->ph, -g->pw, g->dh, g->dw, 0, 0};
    for (int64_t k = 0; k < v->K; k++) {
        const float *plane = img + k / (g->kh * g->kw) * v->IH * v->IW;
        int64_t ky = k / g->kw % g->kh, kx = k % g->kw;
        for (int64_t py = 0; py < v->PH; py++)
            win_run(&wn, plane, py * g->sh - g->ph + ky * g->dh, kx * g->dw - g->pw, v->PW,
                    col + k * v->P + py * v->PW);
    }
}

static void col2im_of(const pg_conv *g, const cv *v, const float *col, float *img)
{
    col2im_add(g, v->C, v->IH, v->IW, v->PH, v->PW, col, img);
}

/* planes [n, hw] set to the bias of their channel (n = r * C, channel = plane mod C), or 0 */
static void fill_bias(int64_t r, int64_t C, int64_t hw, const float *b, float *y)
{
    for (int64_t s = 0; s < r; s++)
        for (int64_t ch = 0; ch < C; ch++) {
            float v = b ? b[ch] : 0.0f, *p = y + (s * C + ch) * hw;
            for (int64_t i = 0; i < hw; i++)
                p[i] = v;
        }
}

/* db[C] += the sums of dy [r, C, hw] per channel: in double, samples then
 * positions in index order, one float add */
static void bias_grad(int64_t r, int64_t C, int64_t hw, const float *dy, float *db)
{
    for (int64_t ch = 0; ch < C; ch++) {
        double s = 0.0;
        for (int64_t n = 0; n < r; n++) {
            const float *p = dy + (n * C + ch) * hw;
            for (int64_t i = 0; i < hw; i++)
                s += p[i];
        }
        db[ch] += (float)s;
    }
}

static int ws_ok(const char *op, const pg_conv *g, const float *ws)
{
    if (pg_conv_ws_floats(g) > 0 && !ws)
        return PG_RT_FAIL("%s: a %lldx%lld window needs its workspace of %lld floats, got NULL", op,
                          (long long)g->kh, (long long)g->kw, (long long)pg_conv_ws_floats(g));
    return 0;
}

static int check(const char *op, int64_t r, const pg_conv *g, int transposed, const float *ws)
{
    if (pg_args_conv_op(op, r, g, transposed))
        return 1;
    return ws_ok(op, g, ws);
}

/* The three products, each for a convolution and its transpose (which
 * swap the roles of x and y). A side is one tensor of the op, [r, ch, plane]:
 * its group gi of sample s starts at (s ch + gi ch / groups) plane. */
typedef struct side {
    int64_t ch, plane;
} side;

static int64_t at(const pg_conv *g, side t, int64_t s, int64_t gi) { return (s * t.ch + gi * (t.ch / g->groups)) * t.plane; }

/* out_g [M, P] (= beta ? out_g : 0) + W_g [M, K] col(img_g) [K, P]: conv2d's
 * y from x, conv_transpose2d's dx from dy. M = out's channels of a group.
 * The column matrix is implicit: the GEMM packs its panels from the image. */
static void gemm_col(pg_ctx *c, int64_t r, const pg_conv *g, const cv *v, const float *w, const float *img, side si,
                     float *out, side so, int beta, float *ws)
{
    int64_t M = so.ch / g->groups;
    for (int64_t s = 0; s < r; s++)
        for (int64_t gi = 0; gi < g->groups; gi++) {
            const float *ig = img + at(g, si, s, gi), *wg = w + gi * M * v->K;
            float *og = out + at(g, so, s, gi);
            if (v->pw) {
                pg_cpu_gemm(c, 0, 0, M, v->P, v->K, 1.0f, wg, v->K, ig, v->P, beta, og, v->P);
                continue;
            }
            win wn = {ig, v->IH, v->IW, v->PH, v->PW, g->kh, g->kw, g->sh, g->sw, -g->ph, -g->pw, g->dh, g->dw, 0,
                      c->avx2};
            wn = win_padded(wn, v->C, ws, pg_conv_ws_floats(g));
            if (direct_rows(c, &wn, M, v->K, wg, v->K, beta, og))
                continue;
            pg_cpu_bsrc b = {win_pack, &wn};
            pg_cpu_gemm_bsrc(c, M, v->P, v->K, 1.0f, wg, v->K, &b, beta, og, v->P);
        }
}

/* Whether col2im's product takes the direct way: stride 1 (each image value
 * then gathers from the positions by the mirrored window), a B no larger than
 * col (M kh kw rows against C kh kw: packing B costs what building col does,
 * and a 3-channel stem's dx would pack 16 channels' windows for 3 rows of
 * output), and room in the workspace ([C kh kw, P]) for the rearranged
 * weight ([C, M kh kw]). */
static int direct_ok(const pg_conv *g, const cv *v, side sn)
{
    int64_t M = sn.ch / g->groups;
    return !v->pw && g->sh == 1 && g->sw == 1 && M <= v->C && M <= v->P;
}

/* img_g [C, IH IW] (= beta ? img_g : 0) + W'_g [C, M kh kw] win(in_g): the
 * adjoint of im2col for stride 1, as a convolution of in_g with the window
 * mirrored (image value (iy, ix) takes in_g[m, iy + ph - ky dh, ix + pw -
 * kx dw]), W'_g[ch, (m, ky, kx)] = W_g[m, (ch, ky, kx)] built in ws. One FMA
 * chain per image value over (m, ky, kx) in index order, no scattered adds. */
static void direct_gemm(pg_ctx *c, int64_t r, const pg_conv *g, const cv *v, const float *w, const float *in,
                        side sn, float *img, side si, int beta, float *ws)
{
    int64_t M = sn.ch / g->groups, khw = g->kh * g->kw, KD = M * khw;
    for (int64_t gi = 0; gi < g->groups; gi++) {
        const float *wg = w + gi * M * v->K;
        for (int64_t ch = 0; ch < v->C; ch++)
            for (int64_t m = 0; m < M; m++)
                memcpy(ws + ch * KD + m * khw, wg + m * v->K + ch * khw, (size_t)khw * sizeof *ws);
        for (int64_t s = 0; s < r; s++) {
            win wn = {in + at(g, sn, s, gi), v->PH, v->PW, v->IH, v->IW, g->kh, g->kw, 1, 1, g->ph, g->pw, -g->dh,
                      -g->dw, 0, c->avx2};
            wn = win_padded(wn, M, ws + v->C * KD, pg_conv_ws_floats(g) - v->C * KD);
            if (direct_rows(c, &wn, v->C, KD, ws, KD, beta, img + at(g, si, s, gi)))
                continue;
            pg_cpu_bsrc b = {win_pack, &wn};
            pg_cpu_gemm_bsrc(c, v->C, v->IH * v->IW, KD, 1.0f, ws, KD, &b, beta, img + at(g, si, s, gi), v->IH * v->IW);
        }
    }
}

/* img_g += col2im(W_g^T [K, M] in_g [M, P]): conv2d's dx from dy (img zeroed
 * first), conv_transpose2d's y from x (img holding the bias). */
static void col2im_gemm(pg_ctx *c, int64_t r, const pg_conv *g, const cv *v, const float *w, const float *in, side sn,
                        float *img, side si, float *ws)
{
    int64_t M = sn.ch / g->groups;
    for (int64_t s = 0; s < r; s++)
        for (int64_t gi = 0; gi < g->groups; gi++) {
            float *ig = img + at(g, si, s, gi);
            pg_cpu_gemm(c, 1, 0, v->K, v->P, M, 1.0f, w + gi * M * v->K, v->K, in + at(g, sn, s, gi), v->P, v->pw,
                        v->pw ? ig : ws, v->P);
            if (!v->pw)
                col2im_of(g, v, ws, ig);
        }
}

/* dW_g [M, K] += lhs_g [M, P] col(img_g)^T, sample by sample: conv2d's from
 * dy and x, conv_transpose2d's from x and dy. */
static void wgrad(pg_ctx *c, int64_t r, const pg_conv *g, const cv *v, const float *lhs, side sl, const float *img,
                  side si, float *dw, float *ws)
{
    int64_t M = sl.ch / g->groups;
    for (int64_t s = 0; s < r; s++)
        for (int64_t gi = 0; gi < g->groups; gi++) {
            const float *ig = img + at(g, si, s, gi);
            win wn = {ig, v->IH, v->IW, v->PH, v->PW, g->kh, g->kw, g->sh, g->sw, -g->ph, -g->pw, g->dh, g->dw, 0,
                      c->avx2};
            if (!v->pw &&
                direct_wgrad(c, &wn, v->C, M, lhs + at(g, sl, s, gi), dw + gi * M * v->K, ws, pg_conv_ws_floats(g)))
                continue;
            if (!v->pw && (wn = win_padded(wn, v->C, ws, pg_conv_ws_floats(g))).inside) {
                pg_cpu_bsrc b = {win_pack_t, &wn};
                pg_cpu_gemm_bsrc(c, M, v->K, v->P, 1.0f, lhs + at(g, sl, s, gi), v->P, &b, 1, dw + gi * M * v->K, v->K);
                continue;
            }
            if (!v->pw)
                im2col_of(g, v, ig, ws);
            pg_cpu_gemm(c, 0, 1, M, v->K, v->P, 1.0f, lhs + at(g, sl, s, gi), v->P, v->pw ? ig : ws, v->P, 1,
                        dw + gi * M * v->K, v->K);
        }
}

/* x's and y's sides */
static side xs(const pg_conv *g) { return (side){g->in, g->h * g->w}; }
static side ys(const pg_conv *g) { return (side){g->out, g->oh * g->ow}; }

/* ---- start-up ---- */

/* Nothing to plan on the CPU (each pass's column workspace is an arena frame
 * buffer the memory plan reserved); the geometries are checked all the same. */
int pg_conv_plan(pg_ctx *c, int stage, int n, const pg_conv *g)
{
    (void)c, (void)stage;
    for (int i = 0; i < n; i++)
        if (pg_args_conv_op("conv_plan", 1, &g[i], g[i].transposed))
            return 1;
    return 0;
}

/* ---- conv2d ---- */

int pg_conv2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *w, const float *b, float *y,
                  float *ws)
{
    if (check("conv2d_fwd", r, g, 0, ws))
        return 1;
    cv v = cv_of(g);
    if (b)
        fill_bias(r, g->out, v.P, b, y);
    gemm_col(c, r, g, &v, w, x, xs(g), y, ys(g), b != NULL, ws);
    return 0;
}

int pg_conv2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *dy, const float *w, float *dx, float *ws)
{
    if (check("conv2d_bwd_in", r, g, 0, ws))
        return 1;
    cv v = cv_of(g);
    if (direct_ok(g, &v, ys(g))) {
        direct_gemm(c, r, g, &v, w, dy, ys(g), dx, xs(g), 0, ws);
        return 0;
    }
    memset(dx, 0, (size_t)(r * g->in * v.HW) * sizeof *dx);
    col2im_gemm(c, r, g, &v, w, dy, ys(g), dx, xs(g), ws);
    return 0;
}

int pg_conv2d_bwd_w(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *dy, float *dw, float *db,
                    float *ws)
{
    if (check("conv2d_bwd_w", r, g, 0, ws))
        return 1;
    cv v = cv_of(g);
    wgrad(c, r, g, &v, dy, ys(g), x, xs(g), dw, ws);
    if (db)
        bias_grad(r, g->out, v.OHW, dy, db);
    return 0;
}

/* ---- conv_transpose2d ---- */

int pg_conv_transpose2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *w, const float *b,
                            float *y, float *ws)
{
    if (check("conv_transpose2d_fwd", r, g, 1, ws))
        return 1;
    cv v = cv_of(g);
    fill_bias(r, g->out, v.OHW, b, y); /* col2im adds into it */
    if (direct_ok(g, &v, xs(g)))
        direct_gemm(c, r, g, &v, w, x, xs(g), y, ys(g), 1, ws);
    else
        col2im_gemm(c, r, g, &v, w, x, xs(g), y, ys(g), ws);
    return 0;
}

int pg_conv_transpose2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *dy, const float *w, float *dx,
                               float *ws)
{
    if (check("conv_transpose2d_bwd_in", r, g, 1, ws))
        return 1;
    cv v = cv_of(g);
    gemm_col(c, r, g, &v, w, dy, ys(g), dx, xs(g), 0, ws);
    return 0;
}

int pg_conv_transpose2d_bwd_w(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *dy, float *dw,
                              float *db, float *ws)
{
    if (check("conv_transpose2d_bwd_w", r, g, 1, ws))
        return 1;
    cv v = cv_of(g);
    wgrad(c, r, g, &v, x, xs(g), dy, ys(g), dw, ws);
    if (db)
        bias_grad(r, g->out, v.OHW, dy, db);
    return 0;
}

/* runtime/cpu/layernorm.c — layer norm over the last dim d of n rows, and the
 * rows of rmsnorm.c (the same passes without the centring: m = 0, and x - 0,
 * g - 0 are exact, so no code of its own is needed).
 * Saved: mean[n], rstd[n] = 1/sqrt(biased var + eps). A row is read in two
 * passes for its statistics (the mean, then the squared deviations from it:
 * no cancellation, and the row is in L1 for the second) and one for its
 * output; the sums are cpu_kernels.h's row sums (float lanes within chunks of
 * 256, the chunks in double), an order set by d alone. Every pass runs in
 * blocks of LN_L through local buffers (fixed counts, no aliasing questions:
 * SIMD at -O2), a last partial block padded, so every element takes the same
 * instructions; the row loops are the baseline build, and their AVX2 twins
 * (below, in intrinsics) are picked at run time (the same IEEE operations
 * lane by lane: the same bits).
 * Rows go in groups of LN_G, a pass over every row of the group before the
 * next pass (LN_G says why); a row's operations do not change.
 * w and b may be NULL (no affine). */
#include <math.h>
#include <string.h>

#include "cpu_ctx.h"
#include "cpu_simd.h"
#include "op_args.h"

#define LN_L PG_CPU_ROW_LANES

/* y = (x - m) rs [* w] [+ b] of one block */
PG_CPU_INLINE void ln_out_blk(const float *x, float m, float rs, const float *w, const float *b, float *y)
{
    float t[LN_L];
    for (int l = 0; l < LN_L; l++)
        t[l] = (x[l] - m) * rs;
    if (w)
        for (int l = 0; l < LN_L; l++)
            t[l] *= w[l];
    if (b)
        for (int l = 0; l < LN_L; l++)
            t[l] += b[l];
    for (int l = 0; l < LN_L; l++)
        y[l] = t[l];
}

/* y of one row, its statistics m and rs given */
PG_CPU_INLINE void ln_out_row(const float *x, int64_t d, float m, float rs, const float *w, const float *b, float *y)
{
    int64_t j = 0;
    for (; j + LN_L <= d; j += LN_L)
        ln_out_blk(x + j, m, rs, w ? w + j : NULL, b ? b + j : NULL, y + j);
    if (j < d) {
        float bx[LN_L], bw[LN_L], bb[LN_L], by[LN_L];
        pg_cpu_row_pad(x + j, d - j, bx), pg_cpu_row_pad(w ? w + j : NULL, d - j, bw);
        pg_cpu_row_pad(b ? b + j : NULL, d - j, bb);
        ln_out_blk(bx, m, rs, w ? bw : NULL, b ? bb : NULL, by);
        memcpy(y + j, by, (size_t)(d - j) * sizeof *y);
    }
}

/* Rows in groups of LN_G, each pass over the whole group before the next
 * (every row's means, then every row's deviations, then the outputs): a row's
 * passes depend on each other (a chain of a few hundred cycles at d = 128),
 * the group's rows do not, and the core overlaps only the work that sits
 * close together in the instruction stream. A row's operations and their
 * order are the same as one row at a time: the same bits. mean NULL:
 * rmsnorm's rows (m = 0). */
#define LN_G 8

PG_CPU_INLINE void ln_fwd_group(int64_t g, int64_t d, float eps, const float *x, const float *w, const float *b,
                                float *y, float *mean, float *rstd)
{
    float m[LN_G], rs[LN_G];
    for (int64_t r = 0; r < g; r++)
        m[r] = mean ? (float)(pg_cpu_row_sum(x + r * d, d) / (double)d) : 0.0f;
    for (int64_t r = 0; r < g; r++)
        rs[r] = (float)(1.0 / sqrt(pg_cpu_row_sqdev(x + r * d, d, m[r]) / (double)d + (double)eps));
    for (int64_t r = 0; r < g; r++) {
        ln_out_row(x + r * d, d, m[r], rs[r], w, b, y + r * d);
        if (mean)
            mean[r] = m[r];
        rstd[r] = rs[r];
    }
}

/* The rows of x or, with s, of z = x + s, written group by group just before
 * the group is normalised (pg_add_fwd's one add an element: the same z). */
PG_CPU_INLINE void ln_fwd_body(int64_t n, int64_t d, float eps, const float *x, const float *s, float *z,
                               const float *w, const float *b, float *y, float *mean, float *rstd)
{
    for (int64_t i = 0; i < n; i += LN_G) {
        int64_t g = n - i < LN_G ? n - i : LN_G;
        const float *xi = x + i * d;
        if (s) {
            for (int64_t k = i * d; k < (i + g) * d; k++)
                z[k] = x[k] + s[k];
            xi = z + i * d;
        }
        ln_fwd_group(g, d, eps, xi, w, b, y + i * d, mean ? mean + i : NULL, rstd + i);
    }
}

static void ln_fwd_rows(int64_t n, int64_t d, float eps, const float *x, const float *s, float *z, const float *w,
                        const float *b, float *y, float *mean, float *rstd)
{
    ln_fwd_body(n, d, eps, x, s, z, w, b, y, mean, rstd);
}

#ifdef PG_CPU_AVX2
/* The AVX2 twins of the row passes: the loops above, operation for operation,
 * in AVX2 registers, so the same bits (tests/kernels.t compares the two
 * builds for every length class). A block of LN_L = 16 floats is two vectors,
 * lanes 0-7 and 8-15; a row's last partial block is read by masked loads,
 * which give the zeros the loops pad with, and written by masked stores. Why
 * not the loops: gcc keeps their blocks' buffers on the stack (each step
 * stored and read back, the accumulators too, a memcpy call for every tail),
 * and leaves the fused adds' loops (z = x + s, dx += ds) scalar, as they have
 * no fixed count. */
_Static_assert(LN_L == 16, "a row block is two AVX2 vectors");

typedef struct ln8_tail { /* the lanes of a partial block of k < 16: lo 0-7, hi 8-15 */
    __m256i lo, hi;
} ln8_tail;

PG_CPU_INLINE PG_CPU_TARGET_AVX2 ln8_tail ln8_tail_of(int64_t k)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i kv = _mm256_set1_epi32((int32_t)k);
    ln8_tail t = {_mm256_cmpgt_epi32(kv, lane), _mm256_cmpgt_epi32(kv, _mm256_add_epi32(lane, _mm256_set1_epi32(8)))};
    return t;
}

/* pg_cpu_lanes_sum of the lanes a (0-7) and b (8-15): the same tree */
PG_CPU_INLINE PG_CPU_TARGET_AVX2 float ln8_lanes_sum(__m256 a, __m256 b)
{
    __m256 h = _mm256_add_ps(a, b);                                                     /* h[l] = a[l] + a[l + 8] */
    __m128 k = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));      /* h[l] + h[l + 4] */
    __m128 p = _mm_add_ps(k, _mm_movehl_ps(k, k)); /* (h0 + h4) + (h2 + h6), (h1 + h5) + (h3 + h7) */
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

/* pg_cpu_row_sum (m NULL) or pg_cpu_row_sqdev (the deviations from *m) */
PG_CPU_INLINE PG_CPU_TARGET_AVX2 double ln8_row_sum(const float *x, int64_t d, const float *m)
{
    double s = 0.0;
    __m256 mv = _mm256_set1_ps(m ? *m : 0.0f);
    for (int64_t c = 0; c < d; c += PG_CPU_ROW_CHUNK) {
        int64_t e = d - c < PG_CPU_ROW_CHUNK ? d : c + PG_CPU_ROW_CHUNK, j = c;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (; j + LN_L <= e; j += LN_L) {
            __m256 v0 = _mm256_loadu_ps(x + j), v1 = _mm256_loadu_ps(x + j + 8);
            if (m) {
                v0 = _mm256_sub_ps(v0, mv), v1 = _mm256_sub_ps(v1, mv);
                v0 = _mm256_mul_ps(v0, v0), v1 = _mm256_mul_ps(v1, v1);
            }
            a0 = _mm256_add_ps(a0, v0), a1 = _mm256_add_ps(a1, v1);
        }
        if (j < e) { /* the pad adds zeros (its deviations zeroed) */
            ln8_tail t = ln8_tail_of(e - j);
            __m256 v0 = _mm256_maskload_ps(x + j, t.lo), v1 = _mm256_maskload_ps(x + j + 8, t.hi);
            if (m) {
                v0 = _mm256_and_ps(_mm256_sub_ps(v0, mv), _mm256_castsi256_ps(t.lo));
                v1 = _mm256_and_ps(_mm256_sub_ps(v1, mv), _mm256_castsi256_ps(t.hi));
                v0 = _mm256_mul_ps(v0, v0), v1 = _mm256_mul_ps(v1, v1);
            }
            a0 = _mm256_add_ps(a0, v0), a1 = _mm256_add_ps(a1, v1);
        }
        s += ln8_lanes_sum(a0, a1);
    }
    return s;
}

/* ln_out_blk of one vector */
PG_CPU_INLINE PG_CPU_TARGET_AVX2 __m256 ln8_out(__m256 x, __m256 m, __m256 rs, const float *w, const float *b,
                                                int64_t j, const __m256i *mask)
{
    __m256 t = _mm256_mul_ps(_mm256_sub_ps(x, m), rs);
    if (w)
        t = _mm256_mul_ps(t, mask ? _mm256_maskload_ps(w + j, *mask) : _mm256_loadu_ps(w + j));
    if (b)
        t = _mm256_add_ps(t, mask ? _mm256_maskload_ps(b + j, *mask) : _mm256_loadu_ps(b + j));
    return t;
}

PG_CPU_INLINE PG_CPU_TARGET_AVX2 void ln8_out_row(const float *x, int64_t d, float m, float rs, const float *w,
                                                  const float *b, float *y)
{
    __m256 mv = _mm256_set1_ps(m), rv = _mm256_set1_ps(rs);
    int64_t j = 0;
    for (; j + 8 <= d; j += 8)
        _mm256_storeu_ps(y + j, ln8_out(_mm256_loadu_ps(x + j), mv, rv, w, b, j, NULL));
    if (j < d) {
        __m256i lo = ln8_tail_of(d - j).lo;
        _mm256_maskstore_ps(y + j, lo, ln8_out(_mm256_maskload_ps(x + j, lo), mv, rv, w, b, j, &lo));
    }
}

/* z = x + s over [0, k): pg_add_fwd's one add an element */
PG_CPU_INLINE PG_CPU_TARGET_AVX2 void ln8_add(const float *x, const float *s, float *z, int64_t k)
{
    int64_t j = 0;
    for (; j + 8 <= k; j += 8)
        _mm256_storeu_ps(z + j, _mm256_add_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(s + j)));
    for (; j < k; j++)
        z[j] = x[j] + s[j];
}

PG_CPU_TARGET_AVX2 static void ln_fwd_rows_avx2(int64_t n, int64_t d, float eps, const float *x, const float *s,
                                                float *z, const float *w, const float *b, float *y, float *mean,
                                                float *rstd)
{
    for (int64_t i = 0; i < n; i += LN_G) {
        int64_t g = n - i < LN_G ? n - i : LN_G;
        const float *xi = x + i * d;
        if (s) {
            ln8_add(xi, s + i * d, z + i * d, g * d);
            xi = z + i * d;
        }
        float m[LN_G], rs[LN_G];
        for (int64_t r = 0; r < g; r++)
            m[r] = mean ? (float)(ln8_row_sum(xi + r * d, d, NULL) / (double)d) : 0.0f;
        for (int64_t r = 0; r < g; r++)
            rs[r] = (float)(1.0 / sqrt(ln8_row_sum(xi + r * d, d, &m[r]) / (double)d + (double)eps));
        for (int64_t r = 0; r < g; r++) {
            ln8_out_row(xi + r * d, d, m[r], rs[r], w, b, y + (i + r) * d);
            if (mean)
                mean[i + r] = m[r];
            rstd[i + r] = rs[r];
        }
    }
}
#endif

void pg_cpu_norm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x, const float *w, const float *b,
                     float *y, float *mean, float *rstd)
{
    PG_CPU_PICK(c, ln_fwd_rows)(n, d, eps, x, NULL, NULL, w, b, y, mean, rstd);
}

void pg_cpu_norm_add_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x, const float *s, float *z,
                         const float *w, const float *b, float *y, float *mean, float *rstd)
{
    PG_CPU_PICK(c, ln_fwd_rows)(n, d, eps, x, s, z, w, b, y, mean, rstd);
}

/* z = x + s, then layernorm of z: the group's rows of z are still in L1 */
int pg_add_layernorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x, const float *s, float *z,
                         const float *w, const float *b, float *y, float *mean, float *rstd)
{
    if (pg_args_layernorm("add_layernorm_fwd", n, d))
        return 1;
    pg_cpu_norm_add_fwd(c, n, d, eps, x, s, z, w, b, y, mean, rstd);
    return 0;
}

int pg_layernorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x,
                     const float *w, const float *b, float *y, float *mean, float *rstd)
{
    if (pg_args_layernorm("layernorm_fwd", n, d))
        return 1;
    pg_cpu_norm_fwd(c, n, d, eps, x, w, b, y, mean, rstd);
    return 0;
}

/* g = dy [* w] and xhat = (x - m) rs of one block */
PG_CPU_INLINE void ln_g_xh(const float *x, const float *dy, const float *w, float m, float rs, float *g, float *xh)
{
    if (w) /* one loop each way: a copy then a multiply in place is compiled to
            * narrower stores than the loads that follow (a stalled forward) */
        for (int l = 0; l < LN_L; l++)
            g[l] = dy[l] * w[l];
    else
        for (int l = 0; l < LN_L; l++)
            g[l] = dy[l];
    for (int l = 0; l < LN_L; l++)
        xh[l] = (x[l] - m) * rs;
}

/* dx = rs (g - mean(g) - xhat mean(g xhat)) of one block */
PG_CPU_INLINE void ln_dx_blk(const float *x, const float *dy, const float *w, float m, float rs, float mg,
                             float mgx, float *dx)
{
    float g[LN_L], xh[LN_L];
    ln_g_xh(x, dy, w, m, rs, g, xh);
    for (int l = 0; l < LN_L; l++)
        g[l] = rs * (g[l] - mg - xh[l] * mgx);
    for (int l = 0; l < LN_L; l++)
        dx[l] = g[l];
}

/* the row's tail from j (d - j < LN_L elements) in zero-padded blocks: g = 0 there */
typedef struct ln_tail {
    float x[LN_L], dy[LN_L], w[LN_L];
} ln_tail;

PG_CPU_INLINE void ln_tail_load(ln_tail *t, const float *x, const float *dy, const float *w, int64_t k)
{
    pg_cpu_row_pad(x, k, t->x), pg_cpu_row_pad(dy, k, t->dy), pg_cpu_row_pad(w, k, t->w);
}

/* the row's mean(g) (0 when not centred) and mean(g xhat) */
PG_CPU_INLINE void ln_bwd_means(const float *x, const float *dy, const float *w, int64_t d, int centred, float m,
                                float rs, float *mg, float *mgx)
{
    double sg = 0.0, sgx = 0.0;
    ln_tail t;
    for (int64_t c = 0; c < d; c += PG_CPU_ROW_CHUNK) {
        int64_t e = d - c < PG_CPU_ROW_CHUNK ? d : c + PG_CPU_ROW_CHUNK, j = c;
        float ag[LN_L] = {0}, agx[LN_L] = {0}, g[LN_L], xh[LN_L];
        for (; j + LN_L <= e; j += LN_L) {
            ln_g_xh(x + j, dy + j, w ? w + j : NULL, m, rs, g, xh);
            for (int l = 0; l < LN_L; l++) {
                ag[l] += g[l];
                agx[l] += g[l] * xh[l];
            }
        }
        if (j < e) { /* the padded tail: g = 0 there, so it adds zeros */
            ln_tail_load(&t, x + j, dy + j, w ? w + j : NULL, e - j);
            ln_g_xh(t.x, t.dy, w ? t.w : NULL, m, rs, g, xh);
            for (int l = 0; l < LN_L; l++) {
                ag[l] += g[l];
                agx[l] += g[l] * xh[l];
            }
        }
        sg += pg_cpu_lanes_sum(ag);
        sgx += pg_cpu_lanes_sum(agx);
    }
    *mg = centred ? (float)(sg / (double)d) : 0.0f;
    *mgx = (float)(sgx / (double)d);
}

PG_CPU_INLINE void ln_dx_row(const float *x, const float *dy, const float *w, int64_t d, float m, float rs,
                             float mg, float mgx, float *dx)
{
    int64_t j = 0;
    for (; j + LN_L <= d; j += LN_L)
        ln_dx_blk(x + j, dy + j, w ? w + j : NULL, m, rs, mg, mgx, dx + j);
    if (j < d) {
        float o[LN_L];
        ln_tail t;
        ln_tail_load(&t, x + j, dy + j, w ? w + j : NULL, d - j);
        ln_dx_blk(t.x, t.dy, w ? t.w : NULL, m, rs, mg, mgx, o);
        memcpy(dx + j, o, (size_t)(d - j) * sizeof *dx);
    }
}

/* in groups of LN_G rows as the forward: every row's means, then every dx */
PG_CPU_INLINE void ln_bwd_in_group(int64_t g, int64_t d, const float *x, const float *w, const float *mean,
                                   const float *rstd, const float *dy, float *dx)
{
    float mg[LN_G], mgx[LN_G];
    for (int64_t r = 0; r < g; r++)
        ln_bwd_means(x + r * d, dy + r * d, w, d, mean != NULL, mean ? mean[r] : 0.0f, rstd[r], &mg[r], &mgx[r]);
    for (int64_t r = 0; r < g; r++)
        ln_dx_row(x + r * d, dy + r * d, w, d, mean ? mean[r] : 0.0f, rstd[r], mg[r], mgx[r], dx + r * d);
}

/* dx of each group and, with ds, dx += ds over the group while it is in L1
 * (pg_axpy_inplace's one add an element: the same sum) */
PG_CPU_INLINE void ln_bwd_in_body(int64_t n, int64_t d, const float *x, const float *w, const float *mean,
                                  const float *rstd, const float *dy, const float *ds, float *dx)
{
    for (int64_t i = 0; i < n; i += LN_G) {
        int64_t g = n - i < LN_G ? n - i : LN_G;
        ln_bwd_in_group(g, d, x + i * d, w, mean ? mean + i : NULL, rstd + i, dy + i * d, dx + i * d);
        if (ds)
            for (int64_t k = i * d; k < (i + g) * d; k++)
                dx[k] += ds[k];
    }
}

static void ln_bwd_in_rows(int64_t n, int64_t d, const float *x, const float *w, const float *mean,
                           const float *rstd, const float *dy, const float *ds, float *dx)
{
    ln_bwd_in_body(n, d, x, w, mean, rstd, dy, ds, dx);
}

#ifdef PG_CPU_AVX2
/* ln_g_xh of one vector (mask: a tail's lanes, loaded masked: zeros past it) */
PG_CPU_INLINE PG_CPU_TARGET_AVX2 __m256 ln8_g_xh(const float *x, const float *dy, const float *w, __m256 m, __m256 rs,
                                                 const __m256i *mask, __m256 *xh)
{
    __m256 xv = mask ? _mm256_maskload_ps(x, *mask) : _mm256_loadu_ps(x);
    __m256 g = mask ? _mm256_maskload_ps(dy, *mask) : _mm256_loadu_ps(dy);
    if (w)
        g = _mm256_mul_ps(g, mask ? _mm256_maskload_ps(w, *mask) : _mm256_loadu_ps(w));
    *xh = _mm256_mul_ps(_mm256_sub_ps(xv, m), rs);
    return g;
}

/* ln_bwd_means: the sums of g and g xhat in the row sums' order */
PG_CPU_INLINE PG_CPU_TARGET_AVX2 void ln8_bwd_means(const float *x, const float *dy, const float *w, int64_t d,
                                                    int centred, float m, float rs, float *mg, float *mgx)
{
    double sg = 0.0, sgx = 0.0;
    __m256 mv = _mm256_set1_ps(m), rv = _mm256_set1_ps(rs), xh0, xh1;
    for (int64_t c = 0; c < d; c += PG_CPU_ROW_CHUNK) {
        int64_t e = d - c < PG_CPU_ROW_CHUNK ? d : c + PG_CPU_ROW_CHUNK, j = c;
        __m256 ag0 = _mm256_setzero_ps(), ag1 = ag0, agx0 = ag0, agx1 = ag0;
        for (; j + LN_L <= e; j += LN_L) {
            __m256 g0 = ln8_g_xh(x + j, dy + j, w ? w + j : NULL, mv, rv, NULL, &xh0);
            __m256 g1 = ln8_g_xh(x + j + 8, dy + j + 8, w ? w + j + 8 : NULL, mv, rv, NULL, &xh1);
            ag0 = _mm256_add_ps(ag0, g0), ag1 = _mm256_add_ps(ag1, g1);
            agx0 = _mm256_add_ps(agx0, _mm256_mul_ps(g0, xh0)), agx1 = _mm256_add_ps(agx1, _mm256_mul_ps(g1, xh1));
        }
        if (j < e) { /* the padded tail: g = 0 there, so it adds zeros */
            ln8_tail t = ln8_tail_of(e - j);
            __m256 g0 = ln8_g_xh(x + j, dy + j, w ? w + j : NULL, mv, rv, &t.lo, &xh0);
            __m256 g1 = ln8_g_xh(x + j + 8, dy + j + 8, w ? w + j + 8 : NULL, mv, rv, &t.hi, &xh1);
            ag0 = _mm256_add_ps(ag0, g0), ag1 = _mm256_add_ps(ag1, g1);
            agx0 = _mm256_add_ps(agx0, _mm256_mul_ps(g0, xh0)), agx1 = _mm256_add_ps(agx1, _mm256_mul_ps(g1, xh1));
        }
        sg += ln8_lanes_sum(ag0, ag1);
        sgx += ln8_lanes_sum(agx0, agx1);
    }
    *mg = centred ? (float)(sg / (double)d) : 0.0f;
    *mgx = (float)(sgx / (double)d);
}

/* ln_dx_row: dx = rs (g - mg - xhat mgx) */
PG_CPU_INLINE PG_CPU_TARGET_AVX2 void ln8_dx_row(const float *x, const float *dy, const float *w, int64_t d, float m,
                                                 float rs, float mg, float mgx, float *dx)
{
    __m256 mv = _mm256_set1_ps(m), rv = _mm256_set1_ps(rs), gv = _mm256_set1_ps(mg), gxv = _mm256_set1_ps(mgx), xh;
    int64_t j = 0;
    for (; j + 8 <= d; j += 8) {
        __m256 g = ln8_g_xh(x + j, dy + j, w ? w + j : NULL, mv, rv, NULL, &xh);
        _mm256_storeu_ps(dx + j, _mm256_mul_ps(rv, _mm256_sub_ps(_mm256_sub_ps(g, gv), _mm256_mul_ps(xh, gxv))));
    }
    if (j < d) {
        __m256i lo = ln8_tail_of(d - j).lo;
        __m256 g = ln8_g_xh(x + j, dy + j, w ? w + j : NULL, mv, rv, &lo, &xh);
        _mm256_maskstore_ps(dx + j, lo, _mm256_mul_ps(rv, _mm256_sub_ps(_mm256_sub_ps(g, gv), _mm256_mul_ps(xh, gxv))));
    }
}

/* dx += ds over [0, k): pg_axpy_inplace's one add an element */
PG_CPU_INLINE PG_CPU_TARGET_AVX2 void ln8_add_into(float *dx, const float *ds, int64_t k)
{
    int64_t j = 0;
    for (; j + 8 <= k; j += 8)
        _mm256_storeu_ps(dx + j, _mm256_add_ps(_mm256_loadu_ps(dx + j), _mm256_loadu_ps(ds + j)));
    for (; j < k; j++)
        dx[j] += ds[j];
}

PG_CPU_TARGET_AVX2 static void ln_bwd_in_rows_avx2(int64_t n, int64_t d, const float *x, const float *w,
                                                   const float *mean, const float *rstd, const float *dy,
                                                   const float *ds, float *dx)
{
    for (int64_t i = 0; i < n; i += LN_G) {
        int64_t g = n - i < LN_G ? n - i : LN_G;
        float mg[LN_G], mgx[LN_G];
        for (int64_t r = 0, k = i * d; r < g; r++, k += d)
            ln8_bwd_means(x + k, dy + k, w, d, mean != NULL, mean ? mean[i + r] : 0.0f, rstd[i + r], &mg[r], &mgx[r]);
        for (int64_t r = 0, k = i * d; r < g; r++, k += d)
            ln8_dx_row(x + k, dy + k, w, d, mean ? mean[i + r] : 0.0f, rstd[i + r], mg[r], mgx[r], dx + k);
        if (ds)
            ln8_add_into(dx + i * d, ds + i * d, g * d);
    }
}
#endif

void pg_cpu_norm_bwd_in(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w, const float *mean,
                        const float *rstd, const float *dy, float *dx)
{
    PG_CPU_PICK(c, ln_bwd_in_rows)(n, d, x, w, mean, rstd, dy, NULL, dx);
}

void pg_cpu_norm_bwd_in_add(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w, const float *mean,
                            const float *rstd, const float *dy, const float *ds, float *dx)
{
    PG_CPU_PICK(c, ln_bwd_in_rows)(n, d, x, w, mean, rstd, dy, ds, dx);
}

/* layernorm's dx, then dx += ds (a skip's gradient), group by group */
int pg_layernorm_bwd_in_add(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w, const float *mean,
                            const float *rstd, const float *dy, const float *ds, float *dx)
{
    if (pg_args_layernorm("layernorm_bwd_in_add", n, d))
        return 1;
    pg_cpu_norm_bwd_in_add(c, n, d, x, w, mean, rstd, dy, ds, dx);
    return 0;
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, xhat = (x - mean) rstd;
 * both means from the row sums in the order above. */
int pg_layernorm_bwd_in(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w,
                        const float *mean, const float *rstd, const float *dy, float *dx)
{
    if (pg_args_layernorm("layernorm_bwd_in", n, d))
        return 1;
    pg_cpu_norm_bwd_in(c, n, d, x, w, mean, rstd, dy, dx);
    return 0;
}

/* dw[d] += sum_rows dy xhat; db[d] += sum_rows dy; per column the rows in
 * index order in double, one float add into dw/db at the end: the CUDA
 * reference path's order, bit for bit (runtime/cuda/README.md), so this
 * order stays; only the columns of a block run side by side. The rows are
 * ld floats apart (d columns of them summed). */
PG_CPU_INLINE void ln_bwd_w_cols(int64_t n, int64_t d, int64_t ld, const float *x, const float *mean,
                                 const float *rstd, const float *dy, float *dw, float *db)
{
    double sw[PG_CPU_COLBLK], sb[PG_CPU_COLBLK];
    for (int64_t j0 = 0; j0 < d; j0 += PG_CPU_COLBLK) {
        int64_t nb = d - j0 < PG_CPU_COLBLK ? d - j0 : PG_CPU_COLBLK;
        for (int64_t j = 0; j < nb; j++)
            sw[j] = sb[j] = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const float *xr = x + i * ld + j0, *dyr = dy + i * ld + j0;
            float m = mean ? mean[i] : 0.0f, rs = rstd[i];
            if (nb == PG_CPU_COLBLK) /* a fixed count: SIMD at -O2, same adds */
                for (int64_t j = 0; j < PG_CPU_COLBLK; j++) {
                    float xh = (xr[j] - m) * rs;
                    sw[j] += (double)dyr[j] * xh;
                    sb[j] += dyr[j];
                }
            else
                for (int64_t j = 0; j < nb; j++) {
                    float xh = (xr[j] - m) * rs;
                    sw[j] += (double)dyr[j] * xh;
                    sb[j] += dyr[j];
                }
        }
        for (int64_t j = 0; j < nb; j++) {
            if (dw)
                dw[j0 + j] += (float)sw[j];
            if (db)
                db[j0 + j] += (float)sb[j];
        }
    }
}

static void ln_bwd_w_run(int64_t n, int64_t d, const float *x, const float *mean, const float *rstd,
                         const float *dy, float *dw, float *db)
{
    ln_bwd_w_cols(n, d, d, x, mean, rstd, dy, dw, db);
}
#ifdef PG_CPU_AVX2
/* ln_bwd_w_cols' sums, the rows in order, each row's columns 16 at a time
 * (two vectors of x, four of four doubles each way), in passes of up to
 * LN_W_COLS columns whose sums stay in L1: every column's rows in index
 * order, the same operations, so the same bits. A pass reads its rows
 * front to back (a step's x and dy come from memory: walking 16 columns down
 * all the rows, one cache line a row, was 3-4 times slower there); the
 * columns past the last 16 by the loops. */
#define LN_W_COLS 256

PG_CPU_INLINE PG_CPU_TARGET_AVX2 void ln8_w_add(double *sw, double *sb, const float *dy, __m128 xh)
{
    __m256d g = _mm256_cvtps_pd(_mm_loadu_ps(dy));
    _mm256_store_pd(sw, _mm256_add_pd(_mm256_load_pd(sw), _mm256_mul_pd(g, _mm256_cvtps_pd(xh))));
    _mm256_store_pd(sb, _mm256_add_pd(_mm256_load_pd(sb), g));
}

PG_CPU_TARGET_AVX2 static void ln_bwd_w_run_avx2(int64_t n, int64_t d, const float *x, const float *mean,
                                                 const float *rstd, const float *dy, float *dw, float *db)
{
    _Alignas(32) double sw[LN_W_COLS], sb[LN_W_COLS];
    int64_t d16 = d / 16 * 16;
    for (int64_t j0 = 0; j0 < d16; j0 += LN_W_COLS) {
        int64_t nb = d16 - j0 < LN_W_COLS ? d16 - j0 : LN_W_COLS;
        for (int64_t j = 0; j < nb; j += 4)
            _mm256_store_pd(sw + j, _mm256_setzero_pd()), _mm256_store_pd(sb + j, _mm256_setzero_pd());
        for (int64_t i = 0; i < n; i++) {
            const float *xr = x + i * d + j0, *dyr = dy + i * d + j0;
            __m256 m = _mm256_set1_ps(mean ? mean[i] : 0.0f), rs = _mm256_set1_ps(rstd[i]);
            for (int64_t j = 0; j < nb; j += 16) {
                __m256 xh0 = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + j), m), rs);
                __m256 xh1 = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + j + 8), m), rs);
                ln8_w_add(sw + j, sb + j, dyr + j, _mm256_castps256_ps128(xh0));
                ln8_w_add(sw + j + 4, sb + j + 4, dyr + j + 4, _mm256_extractf128_ps(xh0, 1));
                ln8_w_add(sw + j + 8, sb + j + 8, dyr + j + 8, _mm256_castps256_ps128(xh1));
                ln8_w_add(sw + j + 12, sb + j + 12, dyr + j + 12, _mm256_extractf128_ps(xh1, 1));
            }
        }
        for (int64_t j = 0; j < nb; j += 4) { /* one float add into dw and db */
            if (dw)
                _mm_storeu_ps(dw + j0 + j, _mm_add_ps(_mm_loadu_ps(dw + j0 + j), _mm256_cvtpd_ps(_mm256_load_pd(sw + j))));
            if (db)
                _mm_storeu_ps(db + j0 + j, _mm_add_ps(_mm_loadu_ps(db + j0 + j), _mm256_cvtpd_ps(_mm256_load_pd(sb + j))));
        }
    }
    if (d16 < d)
        ln_bwd_w_cols(n, d - d16, d, x + d16, mean, rstd, dy + d16, dw ? dw + d16 : NULL, db ? db + d16 : NULL);
}
#endif

void pg_cpu_norm_bwd_w(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *mean, const float *rstd,
                       const float *dy, float *dw, float *db)
{
    PG_CPU_PICK(c, ln_bwd_w_run)(n, d, x, mean, rstd, dy, dw, db);
}

int pg_layernorm_bwd_w(pg_ctx *c, int64_t n, int64_t d, const float *x,
                       const float *mean, const float *rstd, const float *dy, float *dw, float *db)
{
    if (pg_args_layernorm("layernorm_bwd_w", n, d))
        return 1;
    pg_cpu_norm_bwd_w(c, n, d, x, mean, rstd, dy, dw, db);
    return 0;
}

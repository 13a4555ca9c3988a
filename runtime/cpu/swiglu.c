/* runtime/cpu/swiglu.c — Llama's gated MLP input: g = x Wg^T + bg, u = x Wu^T
 * + bu, y = silu(g) u with silu(g) = g / (1 + e^-g). The projections are
 * linear.c's (one GEMM each: a row's bits do not depend on the rows sharing
 * the call); the elementwise parts are pure per element (in blocks, below). */
#include "cpu_ctx.h"
#include "cpu_simd.h"
#include "op_args.h"

/* The elementwise parts in blocks of SWI_BLK, as activation.c's silu: fixed-
 * count loops that -O2 turns into SIMD (libm's exp in double, a call per
 * element, before), the baseline and AVX2 builds of one source, a last
 * partial block padded; e = exp(-g) by pg_cpu_exp_wide, s = 1 / (1 + e),
 * 1 - s = e s. */
#define SWI_BLK PG_CPU_EXP_WIDE

PG_CPU_INLINE void swi_exp(const float *g, float *e) /* e = exp(-g) */
{
    for (int j = 0; j < SWI_BLK; j++)
        e[j] = pg_cpu_exp_clamp(-g[j]);
    pg_cpu_exp_wide(e);
}

/* y = silu(g) u = g / (1 + e) u */
PG_CPU_INLINE void swi_fwd_blk(const float *g, const float *u, float *y)
{
    float o[SWI_BLK];
    swi_exp(g, o);
    for (int j = 0; j < SWI_BLK; j++)
        o[j] = (g[j] / (1.0f + o[j])) * u[j];
    for (int j = 0; j < SWI_BLK; j++)
        y[j] = o[j];
}

/* du = dy silu(g) = dy g s; dg = dy u silu'(g), silu'(g) = s (1 + g e s) */
PG_CPU_INLINE void swi_bwd_blk(const float *g, const float *u, const float *dy, float *dg, float *du)
{
    float a[SWI_BLK], o[SWI_BLK];
    swi_exp(g, a);
    for (int j = 0; j < SWI_BLK; j++) {
        float e = a[j], s = 1.0f / (1.0f + e);
        a[j] = dy[j] * (g[j] * s);
        o[j] = (dy[j] * u[j]) * (s * (1.0f + g[j] * (e * s)));
    }
    for (int j = 0; j < SWI_BLK; j++) {
        du[j] = a[j];
        dg[j] = o[j];
    }
}

/* the whole blocks of [0, m), m a multiple of SWI_BLK */
static void swi_fwd_run(int64_t m, const float *g, const float *u, float *y)
{
    for (int64_t i = 0; i < m; i += SWI_BLK)
        swi_fwd_blk(g + i, u + i, y + i);
}
static void swi_bwd_run(int64_t m, const float *g, const float *u, const float *dy, float *dg, float *du)
{
    for (int64_t i = 0; i < m; i += SWI_BLK)
        swi_bwd_blk(g + i, u + i, dy + i, dg + i, du + i);
}
#ifdef PG_CPU_AVX2
/* The AVX2 path: the blocks' operations one for one in AVX2 registers, as
 * activation.c's gelu (the loops above, compiled for AVX2, went through stack
 * buffers step by step and made the clamps compares and blends): over blocks
 * of SWI_W elements, 32 at a time, stage 1 negates g (the sign flipped, as C's
 * unary minus) and reduces its clamped exp's range (cpu_simd.h), stage 2 runs
 * the polynomial and swiglu's formula. The same bits as the loops
 * (tests/kernels.t compares them for every length class). */
#define SWI_W 128
#define SWI_EACH PG_AVX2_EACH
_Static_assert(SWI_BLK % (8 * PG_AVX2_U) == 0 && SWI_W % (8 * PG_AVX2_U) == 0, "the runs' counts are whole iterations");

/* stage 1 of the elements [i, i + w): r and 2^n of exp(-g) */
PG_CPU_INLINE PG_CPU_TARGET_AVX2 void swi_reduce(const float *g, int64_t w, float *r, float *sc)
{
    for (int64_t j = 0; j < w; j += 8 * PG_AVX2_U) {
        __m256 a[PG_AVX2_U];
        SWI_EACH(a[k] = _mm256_xor_ps(_mm256_loadu_ps(g + j + 8 * k), PG_V8(-0.0f)));
        pg_avx2_exp_reduce32(a, r + j, sc + j);
    }
}

/* y = (g / (1 + e)) u; m a multiple of 32 */
PG_CPU_TARGET_AVX2 static void swi_fwd_run_avx2(int64_t m, const float *g, const float *u, float *y)
{
    _Alignas(32) float r[SWI_W], sc[SWI_W];
    for (int64_t i = 0; i < m; i += SWI_W) {
        int64_t w = m - i < SWI_W ? m - i : SWI_W;
        swi_reduce(g + i, w, r, sc);
        for (int64_t j = 0; j < w; j += 8 * PG_AVX2_U) {
            const float *gj = g + i + j, *uj = u + i + j;
            __m256 e[PG_AVX2_U];
            pg_avx2_exp_poly32(r + j, sc + j, e);
            SWI_EACH(e[k] = _mm256_div_ps(_mm256_loadu_ps(gj + 8 * k), _mm256_add_ps(PG_V8(1.0f), e[k])));
            SWI_EACH(_mm256_storeu_ps(y + i + j + 8 * k, _mm256_mul_ps(e[k], _mm256_loadu_ps(uj + 8 * k))));
        }
    }
}

/* du = dy (g s), dg = (dy u) (s (1 + g (e s))), s = 1 / (1 + e); m a multiple of 32 */
PG_CPU_TARGET_AVX2 static void swi_bwd_run_avx2(int64_t m, const float *g, const float *u, const float *dy,
                                                float *dg, float *du)
{
    _Alignas(32) float r[SWI_W], sc[SWI_W];
    for (int64_t i = 0; i < m; i += SWI_W) {
        int64_t w = m - i < SWI_W ? m - i : SWI_W;
        swi_reduce(g + i, w, r, sc);
        for (int64_t j = 0; j < w; j += 8 * PG_AVX2_U) {
            const float *gj = g + i + j, *uj = u + i + j, *dj = dy + i + j;
            __m256 e[PG_AVX2_U], s[PG_AVX2_U], v[PG_AVX2_U], d[PG_AVX2_U], t[PG_AVX2_U];
            pg_avx2_exp_poly32(r + j, sc + j, e);
            SWI_EACH(s[k] = _mm256_div_ps(PG_V8(1.0f), _mm256_add_ps(PG_V8(1.0f), e[k])));
            SWI_EACH(v[k] = _mm256_loadu_ps(gj + 8 * k));
            SWI_EACH(d[k] = _mm256_loadu_ps(dj + 8 * k));
            SWI_EACH(t[k] = _mm256_mul_ps(d[k], _mm256_mul_ps(v[k], s[k])));
            SWI_EACH(e[k] = _mm256_mul_ps(v[k], _mm256_mul_ps(e[k], s[k])));
            SWI_EACH(e[k] = _mm256_mul_ps(s[k], _mm256_add_ps(PG_V8(1.0f), e[k])));
            SWI_EACH(e[k] = _mm256_mul_ps(_mm256_mul_ps(d[k], _mm256_loadu_ps(uj + 8 * k)), e[k]));
            SWI_EACH(_mm256_storeu_ps(du + i + j + 8 * k, t[k]));
            SWI_EACH(_mm256_storeu_ps(dg + i + j + 8 * k, e[k]));
        }
    }
}
#endif

int pg_swiglu_fwd(pg_ctx *c, int64_t n, int64_t d, int64_t h, const float *x,
                  const float *wg, const float *bg, const float *wu, const float *bu,
                  float *g, float *u, float *y)
{
    if (pg_linear_fwd(c, n, d, h, x, wg, bg, g) || pg_linear_fwd(c, n, d, h, x, wu, bu, u))
        return 1;
    int64_t m = n * h, i = m / SWI_BLK * SWI_BLK;
    PG_CPU_PICK(c, swi_fwd_run)(i, g, u, y);
    if (i < m) {
        float bg_[SWI_BLK] = {0}, bu_[SWI_BLK] = {0}, by[SWI_BLK];
        for (int64_t j = 0; j < m - i; j++)
            bg_[j] = g[i + j], bu_[j] = u[i + j];
        swi_fwd_blk(bg_, bu_, by);
        for (int64_t j = 0; j < m - i; j++)
            y[i + j] = by[j];
    }
    return 0;
}

int pg_swiglu_bwd_in(pg_ctx *c, int64_t n, int64_t d, int64_t h, const float *wg, const float *wu,
                     const float *g, const float *u, const float *dy, float *dg, float *du, float *dx)
{
    if (pg_args_linear("swiglu_bwd_in", n, d, h))
        return 1;
    int64_t m = n * h, i = m / SWI_BLK * SWI_BLK;
    PG_CPU_PICK(c, swi_bwd_run)(i, g, u, dy, dg, du);
    if (i < m) {
        float bg_[SWI_BLK] = {0}, bu_[SWI_BLK] = {0}, bd[SWI_BLK] = {0}, og[SWI_BLK], ou[SWI_BLK];
        for (int64_t j = 0; j < m - i; j++)
            bg_[j] = g[i + j], bu_[j] = u[i + j], bd[j] = dy[i + j];
        swi_bwd_blk(bg_, bu_, bd, og, ou);
        for (int64_t j = 0; j < m - i; j++)
            dg[i + j] = og[j], du[i + j] = ou[j];
    }
    if (!dx)
        return 0;
    if (pg_linear_bwd_in(c, n, d, h, dg, wg, dx))
        return 1;
    return pg_linear_bwd_in_add(c, n, d, h, du, wu, dx);
}

int pg_swiglu_bwd_w(pg_ctx *c, int64_t n, int64_t d, int64_t h, const float *x, const float *dg,
                    const float *du, float *dwg, float *dbg, float *dwu, float *dbu)
{
    if (pg_linear_bwd_w(c, n, d, h, x, dg, dwg, dbg))
        return 1;
    return pg_linear_bwd_w(c, n, d, h, x, du, dwu, dbu);
}

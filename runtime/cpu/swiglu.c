/* runtime/cpu/swiglu.c — Llama's gated MLP input: g = x Wg^T + bg, u = x Wu^T
 * + bu, y = silu(g) u with silu(g) = g / (1 + e^-g). The projections are
 * linear.c's (one GEMM each: a row's bits do not depend on the rows sharing
 * the call); the elementwise parts are pure per element. */
#include <math.h>

#include "cpu_kernels.h"
#include "op_args.h"

/* sigmoid in double, rounded once */
static float sigm(float g) { return (float)(1.0 / (1.0 + exp(-(double)g))); }

int pg_swiglu_fwd(pg_ctx *c, int64_t n, int64_t d, int64_t h, const float *x,
                  const float *wg, const float *bg, const float *wu, const float *bu,
                  float *g, float *u, float *y)
{
    if (pg_linear_fwd(c, n, d, h, x, wg, bg, g) || pg_linear_fwd(c, n, d, h, x, wu, bu, u))
        return 1;
    for (int64_t i = 0; i < n * h; i++)
        y[i] = (g[i] * sigm(g[i])) * u[i];
    return 0;
}

/* silu'(g) = s (1 + g (1 - s)), s = sigmoid(g) */
int pg_swiglu_bwd_in(pg_ctx *c, int64_t n, int64_t d, int64_t h, const float *wg, const float *wu,
                     const float *g, const float *u, const float *dy, float *dg, float *du, float *dx)
{
    if (pg_args_linear("swiglu_bwd_in", n, d, h))
        return 1;
    for (int64_t i = 0; i < n * h; i++) {
        float s = sigm(g[i]);
        du[i] = dy[i] * (g[i] * s);
        dg[i] = (dy[i] * u[i]) * (s * (1.0f + g[i] * (1.0f - s)));
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

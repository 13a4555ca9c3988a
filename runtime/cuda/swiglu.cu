/* runtime/cuda/swiglu.cu — Llama's gated MLP input, as runtime/cpu/swiglu.c:
 * g = x Wg^T + bg, u = x Wu^T + bu (linear.cu's GEMMs), y = silu(g) u; the
 * sigmoid in double, rounded once; _rn intrinsics keep the products unfused. */
#include "cuda_common.h"
#include "op_args.h"

__device__ __forceinline__ float sigm(float g) { return (float)(1.0 / (1.0 + exp(-(double)g))); }

__global__ void swiglu_fwd_kernel(int64_t count, const float *g, const float *u, float *y)
{
    PG_GRID_STRIDE(i, count) {
        y[i] = __fmul_rn(__fmul_rn(g[i], sigm(g[i])), u[i]);
    }
}

/* du = dy silu(g); dg = dy u silu'(g), silu'(g) = s (1 + g (1 - s)) */
__global__ void swiglu_bwd_kernel(int64_t count, const float *g, const float *u, const float *dy, float *dg, float *du)
{
    PG_GRID_STRIDE(i, count) {
        float s = sigm(g[i]);
        du[i] = __fmul_rn(dy[i], __fmul_rn(g[i], s));
        float ds = __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(g[i], __fsub_rn(1.0f, s))));
        dg[i] = __fmul_rn(__fmul_rn(dy[i], u[i]), ds);
    }
}

int pg_swiglu_fwd(pg_ctx *c, int64_t n, int64_t d, int64_t h, const float *x,
                  const float *wg, const float *bg, const float *wu, const float *bu,
                  float *g, float *u, float *y)
{
    if (pg_linear_fwd(c, n, d, h, x, wg, bg, g) || pg_linear_fwd(c, n, d, h, x, wu, bu, u))
        return 1;
    if (n * h == 0)
        return 0;
    swiglu_fwd_kernel<<<pg_cuda_blocks(n * h, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(n * h, g, u, y);
    LAUNCH_CHECK("swiglu_fwd_kernel");
    return 0;
}

int pg_swiglu_bwd_in(pg_ctx *c, int64_t n, int64_t d, int64_t h, const float *wg, const float *wu,
                     const float *g, const float *u, const float *dy, float *dg, float *du, float *dx)
{
    if (pg_args_linear("swiglu_bwd_in", n, d, h))
        return 1;
    if (n * h > 0) {
        swiglu_bwd_kernel<<<pg_cuda_blocks(n * h, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(n * h, g, u, dy,
                                                                                                      dg, du);
        LAUNCH_CHECK("swiglu_bwd_kernel");
    }
    if (!dx)
        return 0;
    return pg_linear_bwd_in(c, n, d, h, dg, wg, dx) || pg_linear_bwd_in_add(c, n, d, h, du, wu, dx);
}

int pg_swiglu_bwd_w(pg_ctx *c, int64_t n, int64_t d, int64_t h, const float *x, const float *dg,
                    const float *du, float *dwg, float *dbg, float *dwu, float *dbu)
{
    return pg_linear_bwd_w(c, n, d, h, x, dg, dwg, dbg) || pg_linear_bwd_w(c, n, d, h, x, du, dwu, dbu);
}

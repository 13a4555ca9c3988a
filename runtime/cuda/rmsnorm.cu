/* runtime/cuda/rmsnorm.cu — RMS norm over the last dim d of n rows (Llama's),
 * as runtime/cpu/rmsnorm.c: y = (x rstd) w, rstd = 1/sqrt(mean(x^2) + eps)
 * saved [n]; sums in double. Row ops: one block of PG_CUDA_RED_THREADS per
 * row (strided partials, fixed tree); the weight gradient one thread per
 * column walking the rows in index order. _rn intrinsics keep nvcc from
 * fusing the elementwise products into FMAs. */
#include "cuda_common.h"
#include "op_args.h"

__global__ void rmsnorm_fwd_kernel(int64_t n, int64_t d, float eps, const float *x, const float *w, float *y,
                                   float *rstd)
{
    __shared__ double sh[PG_CUDA_RED_THREADS];
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const float *xr = x + i * d;
        float *yr = y + i * d;
        double s = 0.0;
        for (int64_t j = threadIdx.x; j < d; j += PG_CUDA_RED_THREADS)
            s += (double)xr[j] * xr[j];
        float rs = (float)(1.0 / sqrt(pg_block_sum(s, sh) / (double)d + (double)eps));
        for (int64_t j = threadIdx.x; j < d; j += PG_CUDA_RED_THREADS) {
            float t = __fmul_rn(xr[j], rs);
            yr[j] = w ? __fmul_rn(t, w[j]) : t;
        }
        if (threadIdx.x == 0)
            rstd[i] = rs;
    }
}

/* dx = rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd */
__global__ void rmsnorm_bwd_in_kernel(int64_t n, int64_t d, const float *x, const float *w, const float *rstd,
                                      const float *dy, float *dx)
{
    __shared__ double sh[PG_CUDA_RED_THREADS];
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const float *xr = x + i * d, *dyr = dy + i * d;
        float *dxr = dx + i * d;
        float rs = rstd[i];
        double sgx = 0.0;
        for (int64_t j = threadIdx.x; j < d; j += PG_CUDA_RED_THREADS) {
            float g = w ? __fmul_rn(dyr[j], w[j]) : dyr[j];
            sgx += (double)g * __fmul_rn(xr[j], rs);
        }
        float mgx = (float)(pg_block_sum(sgx, sh) / (double)d);
        for (int64_t j = threadIdx.x; j < d; j += PG_CUDA_RED_THREADS) {
            float g = w ? __fmul_rn(dyr[j], w[j]) : dyr[j];
            dxr[j] = __fmul_rn(rs, __fsub_rn(g, __fmul_rn(__fmul_rn(xr[j], rs), mgx)));
        }
    }
}

/* dw[d] += sum_rows dy xhat (rows in index order, double) */
__global__ void rmsnorm_bwd_w_kernel(int64_t n, int64_t d, const float *x, const float *rstd, const float *dy,
                                     float *dw)
{
    PG_GRID_STRIDE(j, d) {
        double sw = 0.0;
        for (int64_t i = 0; i < n; i++)
            sw += (double)dy[i * d + j] * __fmul_rn(x[i * d + j], rstd[i]);
        dw[j] += (float)sw;
    }
}

int pg_rmsnorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x, const float *w,
                   float *y, float *rstd)
{
    if (pg_args_layernorm("rmsnorm_fwd", n, d))
        return 1;
    if (!n)
        return 0;
    rmsnorm_fwd_kernel<<<PG_GEOM(pg_geom_rows(n)), 0, c->stream>>>(n, d, eps, x, w, y, rstd);
    LAUNCH_CHECK("rmsnorm_fwd_kernel");
    return 0;
}

/* The residual add beside the norm (pg_ops.h) as the two calls. */
int pg_add_rmsnorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x, const float *s, float *z,
                       const float *w, float *y, float *rstd)
{
    if (pg_args_layernorm("add_rmsnorm_fwd", n, d))
        return 1;
    return pg_add_fwd(c, n * d, x, s, z) || pg_rmsnorm_fwd(c, n, d, eps, z, w, y, rstd);
}

int pg_rmsnorm_bwd_in_add(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w, const float *rstd,
                          const float *dy, const float *ds, float *dx)
{
    if (pg_args_layernorm("rmsnorm_bwd_in_add", n, d))
        return 1;
    return pg_rmsnorm_bwd_in(c, n, d, x, w, rstd, dy, dx) || pg_axpy_inplace(c, dx, ds, n * d);
}

int pg_rmsnorm_bwd_in(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w,
                      const float *rstd, const float *dy, float *dx)
{
    if (pg_args_layernorm("rmsnorm_bwd_in", n, d))
        return 1;
    if (!n)
        return 0;
    rmsnorm_bwd_in_kernel<<<PG_GEOM(pg_geom_rows(n)), 0, c->stream>>>(n, d, x, w, rstd, dy, dx);
    LAUNCH_CHECK("rmsnorm_bwd_in_kernel");
    return 0;
}

int pg_rmsnorm_bwd_w(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *rstd,
                     const float *dy, float *dw)
{
    if (pg_args_layernorm("rmsnorm_bwd_w", n, d))
        return 1;
    if (!n || !dw)
        return 0;
    rmsnorm_bwd_w_kernel<<<pg_cuda_blocks(d, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(n, d, x, rstd, dy, dw);
    LAUNCH_CHECK("rmsnorm_bwd_w_kernel");
    return 0;
}

/* runtime/cuda/layernorm.cu — layer norm over the last dim d of n rows, as
 * runtime/cpu/layernorm.c: saved mean[n], rstd[n] = 1/sqrt(biased var + eps),
 * statistics in double in two passes, w and b may be NULL.
 * Row ops: one block of PG_CUDA_RED_THREADS per row (strided partials + fixed
 * tree). Weight gradients: the chunked column sums of colsum.cu, or (the
 * reference path) one thread per column walking rows in index order.
 * Elementwise formulas use _rn intrinsics so nvcc cannot fuse them into FMAs:
 * given the same mean/rstd the outputs equal the CPU's bits. */
#include "cuda_common.h"
#include "op_args.h"


__global__ void layernorm_fwd_kernel(int64_t n, int64_t d, float eps, const float *x, const float *w,
                                     const float *b, float *y, float *mean, float *rstd)
{
    __shared__ double sh[PG_CUDA_RED_THREADS];
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const float *xr = x + i * d;
        float *yr = y + i * d;
        double s = 0.0;
        for (int64_t j = threadIdx.x; j < d; j += PG_CUDA_RED_THREADS)
            s += xr[j];
        double mu = pg_block_sum(s, sh) / (double)d;
        double ss = 0.0;
        for (int64_t j = threadIdx.x; j < d; j += PG_CUDA_RED_THREADS) {
            double e = xr[j] - mu;
            ss += e * e;
        }
        ss = pg_block_sum(ss, sh);
        float m = (float)mu;
        float rs = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
        for (int64_t j = threadIdx.x; j < d; j += PG_CUDA_RED_THREADS) {
            float v = __fmul_rn(__fsub_rn(xr[j], m), rs);
            if (w)
                v = __fmul_rn(v, w[j]);
            if (b)
                v = __fadd_rn(v, b[j]);
            yr[j] = v;
        }
        if (threadIdx.x == 0) {
            mean[i] = m;
            rstd[i] = rs;
        }
    }
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, xhat = (x - mean) rstd */
__global__ void layernorm_bwd_in_kernel(int64_t n, int64_t d, const float *x, const float *w,
                                        const float *mean, const float *rstd, const float *dy, float *dx)
{
    __shared__ double sh[PG_CUDA_RED_THREADS];
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const float *xr = x + i * d, *dyr = dy + i * d;
        float *dxr = dx + i * d;
        float m = mean[i], rs = rstd[i];
        double sg = 0.0, sgx = 0.0;
        for (int64_t j = threadIdx.x; j < d; j += PG_CUDA_RED_THREADS) {
            float g = w ? __fmul_rn(dyr[j], w[j]) : dyr[j];
            float xh = __fmul_rn(__fsub_rn(xr[j], m), rs);
            sg += g;
            sgx += (double)g * xh;
        }
        sg = pg_block_sum(sg, sh);
        sgx = pg_block_sum(sgx, sh);
        float mg = (float)(sg / (double)d), mgx = (float)(sgx / (double)d);
        for (int64_t j = threadIdx.x; j < d; j += PG_CUDA_RED_THREADS) {
            float g = w ? __fmul_rn(dyr[j], w[j]) : dyr[j];
            float xh = __fmul_rn(__fsub_rn(xr[j], m), rs);
            dxr[j] = __fmul_rn(rs, __fsub_rn(__fsub_rn(g, mg), __fmul_rn(xh, mgx)));
        }
    }
}

/* dw[d] += sum_rows dy xhat; db[d] += sum_rows dy (rows in index order, double) */
__global__ void layernorm_bwd_w_kernel(int64_t n, int64_t d, const float *x, const float *mean,
                                       const float *rstd, const float *dy, float *dw, float *db)
{
    PG_GRID_STRIDE(j, d) {
        double sw = 0.0, sb = 0.0;
        for (int64_t i = 0; i < n; i++) {
            float xh = __fmul_rn(__fsub_rn(x[i * d + j], mean[i]), rstd[i]);
            float g = dy[i * d + j];
            sw += (double)g * xh; /* exact product in double: an FMA changes nothing */
            sb += g;
        }
        if (dw)
            dw[j] += (float)sw;
        if (db)
            db[j] += (float)sb;
    }
}

int pg_layernorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x,
                     const float *w, const float *b, float *y, float *mean, float *rstd)
{
    if (pg_args_layernorm("layernorm_fwd", n, d))
        return 1;
    if (!n)
        return 0;
    layernorm_fwd_kernel<<<PG_GEOM(pg_geom_rows(n)), 0, c->stream>>>(n, d, eps, x, w, b, y, mean, rstd);
    LAUNCH_CHECK("layernorm_fwd_kernel");
    return 0;
}

int pg_layernorm_bwd_in(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w,
                        const float *mean, const float *rstd, const float *dy, float *dx)
{
    if (pg_args_layernorm("layernorm_bwd_in", n, d))
        return 1;
    if (!n)
        return 0;
    layernorm_bwd_in_kernel<<<PG_GEOM(pg_geom_rows(n)), 0, c->stream>>>(n, d, x, w, mean, rstd, dy, dx);
    LAUNCH_CHECK("layernorm_bwd_in_kernel");
    return 0;
}

/* The residual add beside the norm (pg_ops.h) as the two calls: no fused
 * kernel here. */
int pg_add_layernorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x, const float *s, float *z,
                         const float *w, const float *b, float *y, float *mean, float *rstd)
{
    if (pg_args_layernorm("add_layernorm_fwd", n, d))
        return 1;
    return pg_add_fwd(c, n * d, x, s, z) || pg_layernorm_fwd(c, n, d, eps, z, w, b, y, mean, rstd);
}

int pg_layernorm_bwd_in_add(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w, const float *mean,
                            const float *rstd, const float *dy, const float *ds, float *dx)
{
    if (pg_args_layernorm("layernorm_bwd_in_add", n, d))
        return 1;
    return pg_layernorm_bwd_in(c, n, d, x, w, mean, rstd, dy, dx) || pg_axpy_inplace(c, dx, ds, n * d);
}

int pg_layernorm_bwd_w(pg_ctx *c, int64_t n, int64_t d, const float *x,
                       const float *mean, const float *rstd, const float *dy, float *dw, float *db)
{
    if (pg_args_layernorm("layernorm_bwd_w", n, d))
        return 1;
    if (!n || (!dw && !db))
        return 0;
    if (pg_cuda_fast(c, PG_CUDA_K_COLSUM))
        return pg_cuda_norm_bwd_w_chunked(c, "layernorm_bwd_w", n, d, 1, x, mean, rstd, dy, dw, db);
    layernorm_bwd_w_kernel<<<pg_cuda_blocks(d, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(n, d, x, mean, rstd, dy, dw, db);
    LAUNCH_CHECK("layernorm_bwd_w_kernel");
    return 0;
}

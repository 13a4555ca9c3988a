/* runtime/cuda/dims.cu — the mean over one per-sample dim (mean(dim),
 * global_avgpool) and two dims swapped (transpose(i, j)), as
 * runtime/cpu/dims.c: one thread per output value; the mean sums its d values
 * in index order in double and rounds once, so it equals the CPU bit for bit. */
#include "cuda_common.h"
#include "op_args.h"

#define GRID(count) pg_cuda_blocks(count, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream

/* y[o, i] = sum_k x[o, k, i] / d */
__global__ void mean_fwd_kernel(int64_t count, int64_t d, int64_t inner, const float *x, float *y)
{
    PG_GRID_STRIDE(k, count) {
        int64_t o = k / inner, i = k % inner;
        const float *p = x + o * d * inner + i;
        double s = 0.0;
        for (int64_t j = 0; j < d; j++)
            s = __dadd_rn(s, (double)p[j * inner]);
        y[k] = (float)(s / (double)d);
    }
}

/* dx[o, k, i] = dy[o, i] / d */
__global__ void mean_bwd_kernel(int64_t count, int64_t d, int64_t inner, const float *dy, float *dx)
{
    PG_GRID_STRIDE(k, count) {
        int64_t o = k / (d * inner), i = k % inner;
        dx[k] = (float)((double)dy[o * inner + i] / (double)d);
    }
}

/* y [outer, b, mid, a, inner] = x [outer, a, mid, b, inner]: thread k writes y's element k */
__global__ void swap_dims_kernel(int64_t count, int64_t a, int64_t mid, int64_t b, int64_t inner, const float *x,
                                 float *y)
{
    PG_GRID_STRIDE(k, count) {
        int64_t e = k % inner, t = k / inner;
        int64_t i = t % a;
        t /= a;
        int64_t m = t % mid;
        t /= mid;
        int64_t j = t % b, o = t / b;
        y[k] = x[(((o * a + i) * mid + m) * b + j) * inner + e];
    }
}

int pg_mean_fwd(pg_ctx *c, int64_t outer, int64_t d, int64_t inner, const float *x, float *y)
{
    if (pg_args_mean("mean_fwd", outer, d, inner))
        return 1;
    int64_t count = outer * inner;
    if (!count)
        return 0;
    mean_fwd_kernel<<<GRID(count)>>>(count, d, inner, x, y);
    LAUNCH_CHECK("mean_fwd_kernel");
    return 0;
}

int pg_mean_bwd_in(pg_ctx *c, int64_t outer, int64_t d, int64_t inner, const float *dy, float *dx)
{
    if (pg_args_mean("mean_bwd_in", outer, d, inner))
        return 1;
    int64_t count = outer * d * inner;
    if (!count)
        return 0;
    mean_bwd_kernel<<<GRID(count)>>>(count, d, inner, dy, dx);
    LAUNCH_CHECK("mean_bwd_kernel");
    return 0;
}

int pg_swap_dims(pg_ctx *c, int64_t outer, int64_t a, int64_t mid, int64_t b, int64_t inner, const float *x, float *y)
{
    if (pg_args_swap_dims(outer, a, mid, b, inner))
        return 1;
    int64_t count = outer * a * mid * b * inner;
    if (!count)
        return 0;
    swap_dims_kernel<<<GRID(count)>>>(count, a, mid, b, inner, x, y);
    LAUNCH_CHECK("swap_dims_kernel");
    return 0;
}

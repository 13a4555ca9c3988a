/* runtime/cuda/skip.cu — combining a popped skip with the current tensor, as
 * runtime/cpu/skip.c. add's backward is the identity for both inputs (the
 * generated code copies or shares dy), so only concat has a backward here. */
#include "cuda_common.h"
#include "op_args.h"

/* y = x + s; y may alias x or s. */
__global__ void add_fwd_kernel(int64_t count, const float *x, const float *s, float *y)
{
    PG_GRID_STRIDE(i, count) y[i] = x[i] + s[i];
}

int pg_add_fwd(pg_ctx *c, int64_t count, const float *x, const float *s, float *y)
{
    if (pg_args_count("add_fwd", count))
        return 1;
    if (!count)
        return 0;
    add_fwd_kernel<<<pg_cuda_blocks(count, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(count, x, s, y);
    LAUNCH_CHECK("add_fwd_kernel");
    return 0;
}

/* Copy an [n, w] block between row pitches (in floats): one 2-D memcpy. */
static int copy_block(pg_ctx *c, float *dst, int64_t dpitch, const float *src, int64_t spitch,
                      int64_t n, int64_t w)
{
    if (!n || !w)
        return 0;
    CUDA_CHECK(cudaMemcpy2DAsync(dst, (size_t)dpitch * sizeof(float), src, (size_t)spitch * sizeof(float),
                                 (size_t)w * sizeof(float), (size_t)n, cudaMemcpyDeviceToDevice, c->stream));
    return 0;
}

/* y[n, a+b] = [x[n,a], s[n,b]] */
int pg_concat_fwd(pg_ctx *c, int64_t n, int64_t a, int64_t b, const float *x, const float *s, float *y)
{
    if (pg_args_sizes("concat_fwd", "n", n, "a", a, "b", b))
        return 1;
    if (copy_block(c, y, a + b, x, a, n, a))
        return 1;
    return copy_block(c, y + a, a + b, s, b, n, b);
}

/* dx[n,a] = dy[:, :a], ds[n,b] = dy[:, a:]; either output may be NULL. */
int pg_concat_bwd(pg_ctx *c, int64_t n, int64_t a, int64_t b, const float *dy, float *dx, float *ds)
{
    if (pg_args_sizes("concat_bwd", "n", n, "a", a, "b", b))
        return 1;
    if (dx && copy_block(c, dx, a, dy, a + b, n, a))
        return 1;
    if (ds && copy_block(c, ds, b, dy + a, a + b, n, b))
        return 1;
    return 0;
}

/* runtime/cuda/loss.cu — losses, value and gradient in one pass, as
 * runtime/cpu/loss.c: each call sees one micro-batch and divides by the WHOLE
 * batch's normaliser `denom`. `loss` is a HOST double (the generated code
 * passes &io->loss); the op reads it back, so it synchronises the stream,
 * except inside a step's run of compute (step.cu), where the sum goes to a
 * device slot that pg_backend_fetch delivers (`loss` is not written).
 * Sums are in double with a fixed order (see pg_cuda_reduce_to_host); the
 * cross-entropy row losses are summed over rows by one fixed tree. */
#include <math.h>

#include "cuda_common.h"
#include "op_args.h"

/* dy = 2 (y - t) / denom (the CPU's double product, so the same bits); returns (y - t)^2. */
struct mse_term {
    const float *y, *t;
    float *dy;
    double g;
    __device__ double operator()(int64_t i) const
    {
        float diff = y[i] - t[i];
        dy[i] = (float)(g * diff);
        return (double)diff * diff;
    }
};

int pg_mse_fwd_bwd(pg_ctx *c, int64_t count, const float *y, const float *target,
                   double denom, double *loss, float *dy)
{
    if (pg_args_mse(count, denom))
        return 1;
    mse_term f = {y, target, dy, 2.0 / denom};
    if (c->in_run) /* inside a step's run of compute: deferred (step.cu) */
        return pg_cuda_reduce_deferred(c, count, f, 1.0, denom);
    double s = 0.0;
    if (pg_cuda_reduce_to_host(c, count, f, &s))
        return 1;
    *loss = s / denom;
    return 0;
}

/* One row by one block: logp = x - max - log(sum exp(x - max)) in double;
 * dx = (softmax - onehot(t)) * inv; returns -logp[t] to every thread (NaN
 * for a t out of range, never read). */
__device__ double cross_entropy_row(const float *x, int64_t V, int64_t t, double inv, float *dx, double *shd,
                                    float *shf)
{
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < V; j += PG_CUDA_RED_THREADS)
        m = fmaxf(m, x[j]);
    m = pg_block_max(m, shf);
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < V; j += PG_CUDA_RED_THREADS)
        s += exp((double)x[j] - m);
    double lse = log(pg_block_sum(s, shd));
    for (int64_t j = threadIdx.x; j < V; j += PG_CUDA_RED_THREADS) {
        double p = exp((double)x[j] - m - lse);
        dx[j] = (float)((j == t ? p - 1.0 : p) * inv);
    }
    return t >= 0 && t < V ? lse - ((double)x[t] - m) : (double)NAN;
}

/* One block per row: rowloss[i] = -logp[target], dlogits as above. */
__global__ void cross_entropy_rows_kernel(int64_t n, int64_t V, const float *logits, const int32_t *target,
                                          double inv, double *rowloss, float *dlogits)
{
    __shared__ double shd[PG_CUDA_RED_THREADS];
    __shared__ float shf[PG_CUDA_RED_THREADS];
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        /* target checked before (a bad one is reported; never read out of range) */
        double l = cross_entropy_row(logits + i * V, V, target[i], inv, dlogits + i * V, shd, shf);
        if (threadIdx.x == 0)
            rowloss[i] = l;
    }
}

/* No rows: the loss is 0 (deferred inside a run: its slot must still say 0). */
static int no_rows(pg_ctx *c, double mul, double *loss)
{
    if (c->in_run) {
        double *slot = NULL;
        if (pg_cuda_defer_scalar(c, mul, 0.0, &slot))
            return 1;
        CUDA_CHECK(cudaMemsetAsync(slot, 0, sizeof *slot, c->stream));
        return 0;
    }
    *loss = 0.0;
    return 0;
}

int pg_cross_entropy_fwd_bwd(pg_ctx *c, int64_t n, int64_t V, const float *logits,
                             const int32_t *target, double denom, double *loss, float *dlogits)
{
    if (pg_args_cross_entropy(n, V, denom))
        return 1;
    if (pg_cuda_check_ids(c, "cross_entropy", "target", "classes",
                          "check the target data against the model's output size", n, V, target))
        return 1;
    double inv = 1.0 / denom;
    if (n == 0)
        return no_rows(c, inv, loss);
    void *ws = NULL;
    if (pg_cuda_scratch(c, (size_t)n * sizeof(double), &ws))
        return 1;
    double *rowloss = (double *)ws; /* [n] */
    unsigned blocks = (unsigned)(n < PG_CUDA_MAX_BLOCKS ? n : PG_CUDA_MAX_BLOCKS);
    cross_entropy_rows_kernel<<<blocks, PG_CUDA_RED_THREADS, 0, c->stream>>>(n, V, logits, target, inv,
                                                                             rowloss, dlogits);
    LAUNCH_CHECK("cross_entropy_rows_kernel");
    if (c->in_run) { /* inside a step's run of compute: deferred (step.cu) */
        double *slot = NULL;
        return pg_cuda_defer_scalar(c, inv, 0.0, &slot) || pg_cuda_sum_to_dev(c, rowloss, n, slot);
    }
    double total = 0.0;
    if (pg_cuda_sum_to_host(c, rowloss, n, &total))
        return 1;
    *loss = total * inv;
    return 0;
}

/* cross_entropy(ignore = id): one block per row as above, with inv = 1 / *count
 * read on the device (0 when nothing counts) and each counted row's loss
 * already times inv; an ignored row gets loss 0 and a zero gradient. Target
 * ids were checked when their file was opened (pg_data_ids, the ignored id
 * allowed); a row with another id out of range gets a NaN loss, never a read
 * out of range. */
__global__ void cross_entropy_ignore_rows_kernel(int64_t n, int64_t V, const float *logits, const int32_t *target,
                                                 int32_t ignore, const double *count, double *rowloss, float *dlogits)
{
    __shared__ double shd[PG_CUDA_RED_THREADS];
    __shared__ float shf[PG_CUDA_RED_THREADS];
    double inv = *count > 0.0 ? 1.0 / *count : 0.0;
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        float *dx = dlogits + i * V;
        if (target[i] == ignore) {
            for (int64_t j = threadIdx.x; j < V; j += PG_CUDA_RED_THREADS)
                dx[j] = 0.0f;
            if (threadIdx.x == 0)
                rowloss[i] = 0.0;
            continue;
        }
        double l = cross_entropy_row(logits + i * V, V, target[i], inv, dx, shd, shf);
        if (threadIdx.x == 0)
            rowloss[i] = l * inv;
    }
}

int pg_cross_entropy_ignore_fwd_bwd(pg_ctx *c, int64_t n, int64_t V, const float *logits,
                                    const int32_t *target, int32_t ignore, const double *count,
                                    double *loss, float *dlogits)
{
    if (pg_args_cross_entropy(n, V, 1.0))
        return 1;
    if (n == 0)
        return no_rows(c, 1.0, loss);
    void *ws = NULL;
    if (pg_cuda_scratch(c, (size_t)n * sizeof(double), &ws))
        return 1;
    double *rowloss = (double *)ws; /* [n], each already divided by the count */
    unsigned blocks = (unsigned)(n < PG_CUDA_MAX_BLOCKS ? n : PG_CUDA_MAX_BLOCKS);
    cross_entropy_ignore_rows_kernel<<<blocks, PG_CUDA_RED_THREADS, 0, c->stream>>>(n, V, logits, target, ignore, count,
                                                                                    rowloss, dlogits);
    LAUNCH_CHECK("cross_entropy_ignore_rows_kernel");
    if (c->in_run) {
        double *slot = NULL;
        return pg_cuda_defer_scalar(c, 1.0, 0.0, &slot) || pg_cuda_sum_to_dev(c, rowloss, n, slot);
    }
    return pg_cuda_sum_to_host(c, rowloss, n, loss);
}

/* runtime/cuda/batchnorm.cu — batch norm over n rows of x[n, C], per feature,
 * as runtime/cpu/batchnorm.c: training output uses this micro-batch's
 * statistics (biased variance); running statistics are updated once per step
 * from double sums over all micro-batches (sum, sumsq, run_mean, run_var are
 * device arrays). One thread per feature walks the rows in index order, in
 * double (the CPU's order, no workspace needed); adjacent threads touch
 * adjacent features, so every row step is a coalesced access. The weight
 * gradients take the chunked column sums of colsum.cu instead (many more
 * threads; PG_CUDA_K_COLSUM); statistics and the input gradient keep the
 * one-thread-per-feature walk (later work: the same chunking). */
#include "cuda_common.h"
#include "op_args.h"

#define GRID(count) pg_cuda_blocks(count, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream

__global__ void batchnorm_fwd_kernel(int64_t n, int64_t C, float eps, const float *x, const float *w,
                                     const float *b, float *y, float *mean, float *rstd)
{
    PG_GRID_STRIDE(j, C) {
        double s = 0.0, ss = 0.0;
        for (int64_t i = 0; i < n; i++)
            s += x[i * C + j];
        s /= (double)n;
        for (int64_t i = 0; i < n; i++) {
            double e = x[i * C + j] - s;
            ss = __dadd_rn(ss, __dmul_rn(e, e)); /* unfused, as the CPU: same bits */
        }
        float m = (float)s;
        float rs = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
        mean[j] = m;
        rstd[j] = rs;
        for (int64_t i = 0; i < n; i++) {
            float v = __fmul_rn(__fsub_rn(x[i * C + j], m), rs);
            if (w)
                v = __fmul_rn(v, w[j]);
            if (b)
                v = __fadd_rn(v, b[j]);
            y[i * C + j] = v;
        }
    }
}

/* dx = rstd (g - mean_rows(g) - xhat mean_rows(g xhat)), g = dy w */
__global__ void batchnorm_bwd_in_kernel(int64_t n, int64_t C, const float *x, const float *w,
                                        const float *mean, const float *rstd, const float *dy, float *dx)
{
    PG_GRID_STRIDE(j, C) {
        float m = mean[j], rs = rstd[j], wj = w ? w[j] : 1.0f;
        double sg = 0.0, sgx = 0.0;
        for (int64_t i = 0; i < n; i++) {
            int64_t k = i * C + j;
            float g = w ? __fmul_rn(dy[k], wj) : dy[k];
            float xh = __fmul_rn(__fsub_rn(x[k], m), rs);
            sg += g;
            sgx += (double)g * xh;
        }
        float mg = (float)(sg / (double)n), mgx = (float)(sgx / (double)n);
        for (int64_t i = 0; i < n; i++) {
            int64_t k = i * C + j;
            float g = w ? __fmul_rn(dy[k], wj) : dy[k];
            float xh = __fmul_rn(__fsub_rn(x[k], m), rs);
            dx[k] = __fmul_rn(rs, __fsub_rn(__fsub_rn(g, mg), __fmul_rn(xh, mgx)));
        }
    }
}

/* dw[C] += sum_rows dy xhat; db[C] += sum_rows dy */
__global__ void batchnorm_bwd_w_kernel(int64_t n, int64_t C, const float *x, const float *mean,
                                       const float *rstd, const float *dy, float *dw, float *db)
{
    PG_GRID_STRIDE(j, C) {
        float m = mean[j], rs = rstd[j];
        double sw = 0.0, sb = 0.0;
        for (int64_t i = 0; i < n; i++) {
            int64_t k = i * C + j;
            float xh = __fmul_rn(__fsub_rn(x[k], m), rs);
            sw += (double)dy[k] * xh;
            sb += dy[k];
        }
        if (dw)
            dw[j] += (float)sw;
        if (db)
            db[j] += (float)sb;
    }
}

/* sum[C] += x, sumsq[C] += x^2 over the rows in index order (double). */
__global__ void batchnorm_stats_acc_kernel(int64_t n, int64_t C, const float *x, double *sum, double *sumsq)
{
    PG_GRID_STRIDE(j, C) {
        double s = sum[j], q = sumsq[j];
        for (int64_t i = 0; i < n; i++) {
            double v = x[i * C + j];
            s += v;
            q += v * v;
        }
        sum[j] = s;
        sumsq[j] = q;
    }
}

/* run = (1 - momentum) run + momentum stat, unbiased variance, in double;
 * _rn intrinsics keep the CPU's rounding (no fused multiply-adds). */
__global__ void batchnorm_running_update_kernel(int64_t total_n, int64_t C, float momentum, const double *sum,
                                                const double *sumsq, float *run_mean, float *run_var)
{
    PG_GRID_STRIDE(j, C) {
        double N = (double)total_n, mom = momentum;
        double mu = sum[j] / N;
        double var = __dsub_rn(sumsq[j], __dmul_rn(sum[j], mu)) / (N - 1.0);
        if (var < 0.0)
            var = 0.0; /* rounding of a constant feature */
        run_mean[j] = (float)__dadd_rn(__dmul_rn(1.0 - mom, (double)run_mean[j]), __dmul_rn(mom, mu));
        run_var[j] = (float)__dadd_rn(__dmul_rn(1.0 - mom, (double)run_var[j]), __dmul_rn(mom, var));
    }
}

/* Inference: the running statistics; _rn intrinsics keep the CPU's rounding. */
__global__ void batchnorm_eval_fwd_kernel(int64_t n, int64_t C, float eps, const float *x, const float *w,
                                          const float *b, const float *run_mean, const float *run_var, float *y)
{
    PG_GRID_STRIDE(k, n * C) {
        int64_t j = k % C;
        double v = __ddiv_rn(__dsub_rn((double)x[k], (double)run_mean[j]),
                             __dsqrt_rn(__dadd_rn((double)run_var[j], (double)eps)));
        if (w)
            v = __dmul_rn(v, (double)w[j]);
        if (b)
            v = __dadd_rn(v, (double)b[j]);
        y[k] = (float)v;
    }
}

int pg_batchnorm_eval_fwd(pg_ctx *c, int64_t n, int64_t C, float eps, const float *x, const float *w,
                          const float *b, const float *run_mean, const float *run_var, float *y)
{
    if (pg_args_batchnorm("batchnorm_eval_fwd", n, C))
        return 1;
    batchnorm_eval_fwd_kernel<<<GRID(n * C)>>>(n, C, eps, x, w, b, run_mean, run_var, y);
    LAUNCH_CHECK("batchnorm_eval_fwd_kernel");
    return 0;
}

int pg_batchnorm_fwd(pg_ctx *c, int64_t n, int64_t C, float eps, const float *x,
                     const float *w, const float *b, float *y, float *mean, float *rstd)
{
    if (pg_args_batchnorm("batchnorm_fwd", n, C))
        return 1;
    batchnorm_fwd_kernel<<<GRID(C)>>>(n, C, eps, x, w, b, y, mean, rstd);
    LAUNCH_CHECK("batchnorm_fwd_kernel");
    return 0;
}

int pg_batchnorm_bwd_in(pg_ctx *c, int64_t n, int64_t C, const float *x, const float *w,
                        const float *mean, const float *rstd, const float *dy, float *dx)
{
    if (pg_args_batchnorm("batchnorm_bwd_in", n, C))
        return 1;
    batchnorm_bwd_in_kernel<<<GRID(C)>>>(n, C, x, w, mean, rstd, dy, dx);
    LAUNCH_CHECK("batchnorm_bwd_in_kernel");
    return 0;
}

int pg_batchnorm_bwd_w(pg_ctx *c, int64_t n, int64_t C, const float *x,
                       const float *mean, const float *rstd, const float *dy, float *dw, float *db)
{
    if (pg_args_batchnorm("batchnorm_bwd_w", n, C))
        return 1;
    if (!dw && !db)
        return 0;
    if (pg_cuda_fast(c, PG_CUDA_K_COLSUM))
        return pg_cuda_norm_bwd_w_chunked(c, "batchnorm_bwd_w", n, C, 0, x, mean, rstd, dy, dw, db);
    batchnorm_bwd_w_kernel<<<GRID(C)>>>(n, C, x, mean, rstd, dy, dw, db);
    LAUNCH_CHECK("batchnorm_bwd_w_kernel");
    return 0;
}

int pg_batchnorm_stats_acc(pg_ctx *c, int64_t n, int64_t C, const float *x, double *sum, double *sumsq)
{
    if (n < 0 || C <= 0)
        return PG_RT_FAIL("batchnorm_stats_acc: need n >= 0 and C > 0, got n=%lld C=%lld",
                          (long long)n, (long long)C);
    if (!n)
        return 0;
    batchnorm_stats_acc_kernel<<<GRID(C)>>>(n, C, x, sum, sumsq);
    LAUNCH_CHECK("batchnorm_stats_acc_kernel");
    return 0;
}

/* Data-parallel replicas (runtime/core/dp.c sets the hook): the step's sums,
 * device doubles in the arena, go to host memory, through the hook (a sum over
 * the replicas on the TCP mesh, in replica order) and back. The hook waits on
 * the other replicas, which no CUDA graph can hold: a stage that calls it runs
 * its steps eagerly (pg_cuda_graph_blocker, as dropout does). Not yet run on a
 * GPU. */
int pg_backend_set_stats_reduce(pg_ctx *c, pg_stats_reduce_fn fn, void *arg)
{
    c->stats_fn = fn;
    c->stats_arg = arg;
    c->stats_reduced = 0;
    return 0;
}

int pg_batchnorm_stats_reduce(pg_ctx *c, int64_t C, double *sum, double *sumsq)
{
    if (C <= 0)
        return PG_RT_FAIL("batchnorm_stats_reduce: need C > 0, got C=%lld", (long long)C);
    if (!c->stats_fn)
        return 0;
    if (pg_cuda_graph_blocker(c, "deferred batch norm's sums over the data-parallel replicas"))
        return 1;
    if (C > c->stats_cap) {
        double *h = (double *)realloc(c->stats_host, (size_t)C * 2 * sizeof(double));
        if (!h)
            return PG_RT_FAIL("out of memory for the batch-norm sums of %lld features", (long long)C);
        c->stats_host = h;
        c->stats_cap = C;
    }
    double *hs = c->stats_host, *hq = c->stats_host + C;
    CUDA_CHECK(cudaMemcpyAsync(hs, sum, (size_t)C * sizeof(double), cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaMemcpyAsync(hq, sumsq, (size_t)C * sizeof(double), cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    c->stats_reduced = 1;
    if (c->stats_fn(c->stats_arg, hs, hq, C))
        return 1;
    CUDA_CHECK(cudaMemcpyAsync(sum, hs, (size_t)C * sizeof(double), cudaMemcpyHostToDevice, c->stream));
    CUDA_CHECK(cudaMemcpyAsync(sumsq, hq, (size_t)C * sizeof(double), cudaMemcpyHostToDevice, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream)); /* hs, hq are reused by the next call */
    return 0;
}

int pg_batchnorm_running_update(pg_ctx *c, int64_t total_n, int64_t C, float momentum,
                                const double *sum, const double *sumsq, float *run_mean, float *run_var)
{
    if (c->stats_fn && !c->stats_reduced)
        return PG_RT_FAIL("batch norm without `deferred` cannot train with data-parallel replicas: each replica "
                          "would update its running statistics from its own rows; declare it batchnorm(deferred)");
    c->stats_reduced = 0;
    if (total_n < 2 || C <= 0)
        return PG_RT_FAIL("batchnorm_running_update: need more than one value per feature "
                          "(batch %lld) and C > 0 (C=%lld)", (long long)total_n, (long long)C);
    batchnorm_running_update_kernel<<<GRID(C)>>>(total_n, C, momentum, sum, sumsq, run_mean, run_var);
    LAUNCH_CHECK("batchnorm_running_update_kernel");
    return 0;
}

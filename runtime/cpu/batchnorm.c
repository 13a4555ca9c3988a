/* runtime/cpu/batchnorm.c — batch norm over n rows of x[n, C], per feature.
 * Training output uses this micro-batch's statistics (biased variance), as
 * torchgpipe's deferred batch norm; running statistics are updated once per
 * step from double sums over all micro-batches. Every sum runs over rows in
 * index order, in double, per block of features (no workspace needed). */
#include <math.h>

#include "cpu_ctx.h"
#include "cpu_kernels.h"
#include "op_args.h"

#define BLK PG_CPU_COLBLK

static int64_t blk_len(int64_t C, int64_t j0) { return C - j0 < BLK ? C - j0 : BLK; }

int pg_batchnorm_fwd(pg_ctx *c, int64_t n, int64_t C, float eps, const float *x,
                     const float *w, const float *b, float *y, float *mean, float *rstd)
{
    (void)c;
    if (pg_args_batchnorm("batchnorm_fwd", n, C))
        return 1;
    double s[BLK], ss[BLK];
    for (int64_t j0 = 0; j0 < C; j0 += BLK) {
        int64_t nb = blk_len(C, j0);
        for (int64_t j = 0; j < nb; j++)
            s[j] = ss[j] = 0.0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < nb; j++)
                s[j] += x[i * C + j0 + j];
        for (int64_t j = 0; j < nb; j++)
            s[j] /= (double)n; /* now the mean */
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < nb; j++) {
                double e = x[i * C + j0 + j] - s[j];
                ss[j] += e * e;
            }
        for (int64_t j = 0; j < nb; j++) {
            mean[j0 + j] = (float)s[j];
            rstd[j0 + j] = (float)(1.0 / sqrt(ss[j] / (double)n + (double)eps));
        }
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < C; j++) {
            float v = (x[i * C + j] - mean[j]) * rstd[j];
            if (w)
                v *= w[j];
            if (b)
                v += b[j];
            y[i * C + j] = v;
        }
    return 0;
}

int pg_batchnorm_eval_fwd(pg_ctx *c, int64_t n, int64_t C, float eps, const float *x, const float *w,
                          const float *b, const float *run_mean, const float *run_var, float *y)
{
    (void)c;
    if (pg_args_batchnorm("batchnorm_eval_fwd", n, C))
        return 1;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < C; j++) {
            double v = ((double)x[i * C + j] - run_mean[j]) / sqrt((double)run_var[j] + (double)eps);
            if (w)
                v *= w[j];
            if (b)
                v += b[j];
            y[i * C + j] = (float)v;
        }
    return 0;
}

/* dx = rstd (g - mean_rows(g) - xhat mean_rows(g xhat)), g = dy w */
int pg_batchnorm_bwd_in(pg_ctx *c, int64_t n, int64_t C, const float *x, const float *w,
                        const float *mean, const float *rstd, const float *dy, float *dx)
{
    (void)c;
    if (pg_args_batchnorm("batchnorm_bwd_in", n, C))
        return 1;
    double sg[BLK], sgx[BLK];
    for (int64_t j0 = 0; j0 < C; j0 += BLK) {
        int64_t nb = blk_len(C, j0);
        for (int64_t j = 0; j < nb; j++)
            sg[j] = sgx[j] = 0.0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < nb; j++) {
                int64_t k = i * C + j0 + j;
                float g = w ? dy[k] * w[j0 + j] : dy[k];
                float xh = (x[k] - mean[j0 + j]) * rstd[j0 + j];
                sg[j] += g;
                sgx[j] += (double)g * xh;
            }
        for (int64_t j = 0; j < nb; j++) {
            sg[j] /= (double)n;
            sgx[j] /= (double)n;
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < nb; j++) {
                int64_t k = i * C + j0 + j;
                float rs = rstd[j0 + j];
                float g = w ? dy[k] * w[j0 + j] : dy[k];
                float xh = (x[k] - mean[j0 + j]) * rs;
                dx[k] = rs * (g - (float)sg[j] - xh * (float)sgx[j]);
            }
    }
    return 0;
}

/* dw[C] += sum_rows dy xhat; db[C] += sum_rows dy */
int pg_batchnorm_bwd_w(pg_ctx *c, int64_t n, int64_t C, const float *x,
                       const float *mean, const float *rstd, const float *dy, float *dw, float *db)
{
    (void)c;
    if (pg_args_batchnorm("batchnorm_bwd_w", n, C))
        return 1;
    double sw[BLK], sb[BLK];
    for (int64_t j0 = 0; j0 < C; j0 += BLK) {
        int64_t nb = blk_len(C, j0);
        for (int64_t j = 0; j < nb; j++)
            sw[j] = sb[j] = 0.0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < nb; j++) {
                int64_t k = i * C + j0 + j;
                float xh = (x[k] - mean[j0 + j]) * rstd[j0 + j];
                sw[j] += (double)dy[k] * xh;
                sb[j] += dy[k];
            }
        for (int64_t j = 0; j < nb; j++) {
            if (dw)
                dw[j0 + j] += (float)sw[j];
            if (db)
                db[j0 + j] += (float)sb[j];
        }
    }
    return 0;
}

/* sum[C] += x, sumsq[C] += x^2 over the rows in index order (double). */
int pg_batchnorm_stats_acc(pg_ctx *c, int64_t n, int64_t C, const float *x, double *sum, double *sumsq)
{
    (void)c;
    if (n < 0 || C <= 0)
        return PG_RT_FAIL("batchnorm_stats_acc: need n >= 0 and C > 0, got n=%lld C=%lld",
                          (long long)n, (long long)C);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < C; j++) {
            double v = x[i * C + j];
            sum[j] += v;
            sumsq[j] += v * v;
        }
    return 0;
}

int pg_backend_set_stats_reduce(pg_ctx *c, pg_stats_reduce_fn fn, void *arg)
{
    c->stats_fn = fn;
    c->stats_arg = arg;
    c->stats_reduced = 0;
    return 0;
}

int pg_batchnorm_stats_reduce(pg_ctx *c, int64_t C, double *sum, double *sumsq)
{
    if (!c->stats_fn)
        return 0;
    if (C <= 0)
        return PG_RT_FAIL("batchnorm_stats_reduce: need C > 0, got C=%lld", (long long)C);
    c->stats_reduced = 1;
    return c->stats_fn(c->stats_arg, sum, sumsq, C);
}

/* As BatchNorm1d on the whole batch: run = (1 - momentum) run + momentum stat,
 * with the unbiased variance; arithmetic in double as PyTorch's CPU kernel. */
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
    double N = (double)total_n, mom = momentum;
    for (int64_t j = 0; j < C; j++) {
        double mu = sum[j] / N;
        double var = (sumsq[j] - sum[j] * mu) / (N - 1.0);
        if (var < 0.0)
            var = 0.0; /* rounding of a constant feature */
        run_mean[j] = (float)((1.0 - mom) * run_mean[j] + mom * mu);
        run_var[j] = (float)((1.0 - mom) * run_var[j] + mom * var);
    }
    return 0;
}

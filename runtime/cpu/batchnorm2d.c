/* runtime/cpu/batchnorm2d.c — batch norm of images x [r, C, hw], per channel
 * over its r * hw values (PyTorch's BatchNorm2d), with batchnorm.c's
 * semantics: the output normalises by this micro-batch's statistics (biased
 * variance), the running statistics move once per step from double sums
 * (pg_batchnorm_running_update). Every sum runs in double over the samples,
 * then the positions, in index order, one channel at a time. */
#include <math.h>

#include "cpu_kernels.h"
#include "op_args.h"

/* the values of channel ch of sample s */
static const float *plane(const float *x, int64_t s, int64_t C, int64_t ch, int64_t hw)
{
    return x + (s * C + ch) * hw;
}

int pg_batchnorm2d_fwd(pg_ctx *c, int64_t r, int64_t C, int64_t hw, float eps, const float *x, const float *w,
                       const float *b, float *y, float *mean, float *rstd)
{
    (void)c;
    if (pg_args_bn2d("batchnorm2d_fwd", r, C, hw, 1))
        return 1;
    double n = (double)(r * hw);
    for (int64_t ch = 0; ch < C; ch++) {
        double s = 0.0, ss = 0.0;
        for (int64_t k = 0; k < r; k++) {
            const float *p = plane(x, k, C, ch, hw);
            for (int64_t i = 0; i < hw; i++)
                s += p[i];
        }
        double mu = s / n;
        for (int64_t k = 0; k < r; k++) {
            const float *p = plane(x, k, C, ch, hw);
            for (int64_t i = 0; i < hw; i++) {
                double e = p[i] - mu;
                ss += e * e;
            }
        }
        mean[ch] = (float)mu;
        rstd[ch] = (float)(1.0 / sqrt(ss / n + (double)eps));
        float m = mean[ch], rs = rstd[ch], wv = w ? w[ch] : 1.0f, bv = b ? b[ch] : 0.0f;
        for (int64_t k = 0; k < r; k++) {
            const float *p = plane(x, k, C, ch, hw);
            float *q = y + (k * C + ch) * hw;
            for (int64_t i = 0; i < hw; i++) {
                float v = (p[i] - m) * rs;
                if (w)
                    v *= wv;
                if (b)
                    v += bv;
                q[i] = v;
            }
        }
    }
    return 0;
}

int pg_batchnorm2d_eval_fwd(pg_ctx *c, int64_t r, int64_t C, int64_t hw, float eps, const float *x, const float *w,
                            const float *b, const float *run_mean, const float *run_var, float *y)
{
    (void)c;
    if (pg_args_bn2d("batchnorm2d_eval_fwd", r, C, hw, 1))
        return 1;
    for (int64_t k = 0; k < r; k++)
        for (int64_t ch = 0; ch < C; ch++) {
            const float *p = plane(x, k, C, ch, hw);
            float *q = y + (k * C + ch) * hw;
            double sd = sqrt((double)run_var[ch] + (double)eps);
            for (int64_t i = 0; i < hw; i++) {
                double v = ((double)p[i] - run_mean[ch]) / sd;
                if (w)
                    v *= w[ch];
                if (b)
                    v += b[ch];
                q[i] = (float)v;
            }
        }
    return 0;
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, means over the channel's values */
int pg_batchnorm2d_bwd_in(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, const float *w,
                          const float *mean, const float *rstd, const float *dy, float *dx)
{
    (void)c;
    if (pg_args_bn2d("batchnorm2d_bwd_in", r, C, hw, 1))
        return 1;
    double n = (double)(r * hw);
    for (int64_t ch = 0; ch < C; ch++) {
        float m = mean[ch], rs = rstd[ch], wv = w ? w[ch] : 1.0f;
        double sg = 0.0, sgx = 0.0;
        for (int64_t k = 0; k < r; k++) {
            const float *p = plane(x, k, C, ch, hw), *d = plane(dy, k, C, ch, hw);
            for (int64_t i = 0; i < hw; i++) {
                float g = w ? d[i] * wv : d[i];
                float xh = (p[i] - m) * rs;
                sg += g;
                sgx += (double)g * xh;
            }
        }
        float mg = (float)(sg / n), mgx = (float)(sgx / n);
        for (int64_t k = 0; k < r; k++) {
            const float *p = plane(x, k, C, ch, hw), *d = plane(dy, k, C, ch, hw);
            float *q = dx + (k * C + ch) * hw;
            for (int64_t i = 0; i < hw; i++) {
                float g = w ? d[i] * wv : d[i];
                float xh = (p[i] - m) * rs;
                q[i] = rs * (g - mg - xh * mgx);
            }
        }
    }
    return 0;
}

/* dw[C] += sum dy xhat; db[C] += sum dy */
int pg_batchnorm2d_bwd_w(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, const float *mean,
                         const float *rstd, const float *dy, float *dw, float *db)
{
    (void)c;
    if (pg_args_bn2d("batchnorm2d_bwd_w", r, C, hw, 1))
        return 1;
    for (int64_t ch = 0; ch < C; ch++) {
        float m = mean[ch], rs = rstd[ch];
        double sw = 0.0, sb = 0.0;
        for (int64_t k = 0; k < r; k++) {
            const float *p = plane(x, k, C, ch, hw), *d = plane(dy, k, C, ch, hw);
            for (int64_t i = 0; i < hw; i++) {
                float xh = (p[i] - m) * rs;
                sw += (double)d[i] * xh;
                sb += d[i];
            }
        }
        if (dw)
            dw[ch] += (float)sw;
        if (db)
            db[ch] += (float)sb;
    }
    return 0;
}

/* sum[C] += x, sumsq[C] += x^2 over the samples and positions in index order (double) */
int pg_batchnorm2d_stats_acc(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, double *sum,
                             double *sumsq)
{
    (void)c;
    if (pg_args_bn2d("batchnorm2d_stats_acc", r, C, hw, 0))
        return 1;
    for (int64_t ch = 0; ch < C; ch++)
        for (int64_t k = 0; k < r; k++) {
            const float *p = plane(x, k, C, ch, hw);
            for (int64_t i = 0; i < hw; i++) {
                double v = p[i];
                sum[ch] += v;
                sumsq[ch] += v * v;
            }
        }
    return 0;
}

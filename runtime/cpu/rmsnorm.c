/* runtime/cpu/rmsnorm.c — RMS norm over the last dim d of n rows (Llama's
 * LlamaRMSNorm): y = (x rstd) w, rstd = 1/sqrt(mean(x^2) + eps), saved [n].
 * Sums in double over 8 fixed lanes per row (lane l: the elements j = l mod
 * 8, in index order; the lanes added in a fixed tree), as layernorm.c: an
 * order set by d alone. */
#include <math.h>

#include "cpu_kernels.h"
#include "op_args.h"

#define RMS_LANES 8

static double lanes_sum(const double *acc)
{
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* sum a[j] b[j] of one row in double, by lanes */
static double row_dot(const float *a, const float *b, int64_t d)
{
    double acc[RMS_LANES] = {0};
    int64_t j = 0;
    for (; j + RMS_LANES <= d; j += RMS_LANES)
        for (int l = 0; l < RMS_LANES; l++)
            acc[l] += (double)a[j + l] * b[j + l];
    for (; j < d; j++)
        acc[j % RMS_LANES] += (double)a[j] * b[j];
    return lanes_sum(acc);
}

int pg_rmsnorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x, const float *w,
                   float *y, float *rstd)
{
    (void)c;
    if (pg_args_layernorm("rmsnorm_fwd", n, d))
        return 1;
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * d;
        float *yr = y + i * d;
        float rs = (float)(1.0 / sqrt(row_dot(xr, xr, d) / (double)d + (double)eps));
        for (int64_t j = 0; j < d; j++) {
            float t = xr[j] * rs;
            yr[j] = w ? t * w[j] : t;
        }
        rstd[i] = rs;
    }
    return 0;
}

/* dx = rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd */
int pg_rmsnorm_bwd_in(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w,
                      const float *rstd, const float *dy, float *dx)
{
    (void)c;
    if (pg_args_layernorm("rmsnorm_bwd_in", n, d))
        return 1;
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * d, *dyr = dy + i * d;
        float *dxr = dx + i * d;
        float rs = rstd[i];
        double acc[RMS_LANES] = {0};
        for (int64_t j = 0; j < d; j++) {
            float g = w ? dyr[j] * w[j] : dyr[j];
            acc[j % RMS_LANES] += (double)g * (xr[j] * rs);
        }
        float mgx = (float)(lanes_sum(acc) / (double)d);
        for (int64_t j = 0; j < d; j++) {
            float g = w ? dyr[j] * w[j] : dyr[j];
            dxr[j] = rs * (g - (xr[j] * rs) * mgx);
        }
    }
    return 0;
}

/* dw[d] += sum_rows dy xhat: rows in index order in double per block of
 * columns, one float add into dw at the end */
int pg_rmsnorm_bwd_w(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *rstd,
                     const float *dy, float *dw)
{
    (void)c;
    if (pg_args_layernorm("rmsnorm_bwd_w", n, d))
        return 1;
    if (!dw)
        return 0;
    double sw[PG_CPU_COLBLK];
    for (int64_t j0 = 0; j0 < d; j0 += PG_CPU_COLBLK) {
        int64_t nb = d - j0 < PG_CPU_COLBLK ? d - j0 : PG_CPU_COLBLK;
        for (int64_t j = 0; j < nb; j++)
            sw[j] = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const float *xr = x + i * d + j0, *dyr = dy + i * d + j0;
            float rs = rstd[i];
            for (int64_t j = 0; j < nb; j++)
                sw[j] += (double)dyr[j] * (xr[j] * rs);
        }
        for (int64_t j = 0; j < nb; j++)
            dw[j0 + j] += (float)sw[j];
    }
    return 0;
}

/* runtime/cpu/layernorm.c — layer norm over the last dim d of n rows.
 * Saved: mean[n], rstd[n] = 1/sqrt(biased var + eps). Statistics in double,
 * two passes, elements in index order. w and b may be NULL (no affine). */
#include <math.h>

#include "cpu_kernels.h"

static int ln_dims_ok(const char *op, int64_t n, int64_t d)
{
    if (n < 0 || d <= 0)
        return PG_RT_FAIL("%s: need n >= 0 and d > 0, got n=%lld d=%lld", op, (long long)n, (long long)d);
    return 0;
}

int pg_layernorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x,
                     const float *w, const float *b, float *y, float *mean, float *rstd)
{
    (void)c;
    if (ln_dims_ok("layernorm_fwd", n, d))
        return 1;
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * d;
        float *yr = y + i * d;
        double s = 0.0;
        for (int64_t j = 0; j < d; j++)
            s += xr[j];
        double mu = s / (double)d;
        double ss = 0.0;
        for (int64_t j = 0; j < d; j++) {
            double e = xr[j] - mu;
            ss += e * e;
        }
        float m = (float)mu;
        float rs = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
        for (int64_t j = 0; j < d; j++) {
            float v = (xr[j] - m) * rs;
            if (w)
                v *= w[j];
            if (b)
                v += b[j];
            yr[j] = v;
        }
        mean[i] = m;
        rstd[i] = rs;
    }
    return 0;
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, xhat = (x - mean) rstd */
int pg_layernorm_bwd_in(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w,
                        const float *mean, const float *rstd, const float *dy, float *dx)
{
    (void)c;
    if (ln_dims_ok("layernorm_bwd_in", n, d))
        return 1;
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * d, *dyr = dy + i * d;
        float *dxr = dx + i * d;
        float m = mean[i], rs = rstd[i];
        double sg = 0.0, sgx = 0.0;
        for (int64_t j = 0; j < d; j++) {
            float g = w ? dyr[j] * w[j] : dyr[j];
            float xh = (xr[j] - m) * rs;
            sg += g;
            sgx += (double)g * xh;
        }
        float mg = (float)(sg / (double)d), mgx = (float)(sgx / (double)d);
        for (int64_t j = 0; j < d; j++) {
            float g = w ? dyr[j] * w[j] : dyr[j];
            float xh = (xr[j] - m) * rs;
            dxr[j] = rs * (g - mg - xh * mgx);
        }
    }
    return 0;
}

/* dw[d] += sum_rows dy xhat; db[d] += sum_rows dy; rows in index order in double
 * per block of columns, one float add into dw/db at the end. */
int pg_layernorm_bwd_w(pg_ctx *c, int64_t n, int64_t d, const float *x,
                       const float *mean, const float *rstd, const float *dy, float *dw, float *db)
{
    (void)c;
    if (ln_dims_ok("layernorm_bwd_w", n, d))
        return 1;
    double sw[PG_CPU_COLBLK], sb[PG_CPU_COLBLK];
    for (int64_t j0 = 0; j0 < d; j0 += PG_CPU_COLBLK) {
        int64_t nb = d - j0 < PG_CPU_COLBLK ? d - j0 : PG_CPU_COLBLK;
        for (int64_t j = 0; j < nb; j++)
            sw[j] = sb[j] = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const float *xr = x + i * d + j0, *dyr = dy + i * d + j0;
            float m = mean[i], rs = rstd[i];
            for (int64_t j = 0; j < nb; j++) {
                float xh = (xr[j] - m) * rs;
                sw[j] += (double)dyr[j] * xh;
                sb[j] += dyr[j];
            }
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

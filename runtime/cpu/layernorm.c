/* runtime/cpu/layernorm.c — layer norm over the last dim d of n rows.
 * Saved: mean[n], rstd[n] = 1/sqrt(biased var + eps). Statistics in double,
 * two passes, in 8 fixed lanes per row (lanes_sum). w and b may be NULL (no
 * affine). */
#include <math.h>

#include "cpu_kernels.h"
#include "op_args.h"

/* Row sums in double over 8 lanes (lane l takes the elements j = l mod 8 in
 * index order), the lanes added in a fixed tree: an order set by d alone, and
 * fixed-count inner loops that -O2 vectorizes. */
#define LN_LANES 8
#define LN_BLK 16 /* elementwise passes run in blocks of this many */

static double lanes_sum(const double *acc)
{
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* sum x and sum (x - mu)^2 of one row, mu = sum x / d */
static void row_stats(const float *x, int64_t d, double *mu_out, double *ss_out)
{
    double acc[LN_LANES] = {0};
    int64_t j = 0;
    for (; j + LN_LANES <= d; j += LN_LANES)
        for (int l = 0; l < LN_LANES; l++)
            acc[l] += x[j + l];
    for (; j < d; j++)
        acc[j % LN_LANES] += x[j];
    double mu = lanes_sum(acc) / (double)d;
    for (int l = 0; l < LN_LANES; l++)
        acc[l] = 0.0;
    for (j = 0; j + LN_LANES <= d; j += LN_LANES)
        for (int l = 0; l < LN_LANES; l++) {
            double e = x[j + l] - mu;
            acc[l] += e * e;
        }
    for (; j < d; j++) {
        double e = x[j] - mu;
        acc[j % LN_LANES] += e * e;
    }
    *mu_out = mu;
    *ss_out = lanes_sum(acc);
}

/* y = (x - mean) rstd [* w] [+ b] of one row: blocks of LN_BLK through a
 * local buffer (fixed counts, no aliasing questions: SIMD at -O2), then the
 * tail, with the same operations. */
static void ln_row_out(const float *x, int64_t d, float m, float rs, const float *w,
                       const float *b, float *y)
{
    int64_t j = 0;
    for (; j + LN_BLK <= d; j += LN_BLK) {
        float t[LN_BLK];
        for (int l = 0; l < LN_BLK; l++)
            t[l] = (x[j + l] - m) * rs;
        if (w)
            for (int l = 0; l < LN_BLK; l++)
                t[l] *= w[j + l];
        if (b)
            for (int l = 0; l < LN_BLK; l++)
                t[l] += b[j + l];
        for (int l = 0; l < LN_BLK; l++)
            y[j + l] = t[l];
    }
    for (; j < d; j++) {
        float v = (x[j] - m) * rs;
        if (w)
            v *= w[j];
        if (b)
            v += b[j];
        y[j] = v;
    }
}

int pg_layernorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x,
                     const float *w, const float *b, float *y, float *mean, float *rstd)
{
    (void)c;
    if (pg_args_layernorm("layernorm_fwd", n, d))
        return 1;
    for (int64_t i = 0; i < n; i++) {
        double mu, ss;
        row_stats(x + i * d, d, &mu, &ss);
        float m = (float)mu;
        float rs = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
        ln_row_out(x + i * d, d, m, rs, w, b, y + i * d);
        mean[i] = m;
        rstd[i] = rs;
    }
    return 0;
}

/* g and xhat of LN_BLK elements of a row from j */
static inline void ln_g_xh(const float *x, const float *dy, const float *w, int64_t j, float m,
                           float rs, float *g, float *xh)
{
    for (int l = 0; l < LN_BLK; l++)
        g[l] = dy[j + l];
    if (w)
        for (int l = 0; l < LN_BLK; l++)
            g[l] *= w[j + l];
    for (int l = 0; l < LN_BLK; l++)
        xh[l] = (x[j + l] - m) * rs;
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, xhat = (x - mean) rstd;
 * the sums in double over LN_LANES lanes as row_stats (lane l: j = l mod 8). */
int pg_layernorm_bwd_in(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w,
                        const float *mean, const float *rstd, const float *dy, float *dx)
{
    (void)c;
    if (pg_args_layernorm("layernorm_bwd_in", n, d))
        return 1;
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * d, *dyr = dy + i * d;
        float *dxr = dx + i * d;
        float m = mean[i], rs = rstd[i];
        float g[LN_BLK], xh[LN_BLK];
        double sg[LN_LANES] = {0}, sgx[LN_LANES] = {0};
        int64_t j = 0;
        for (; j + LN_BLK <= d; j += LN_BLK) {
            ln_g_xh(xr, dyr, w, j, m, rs, g, xh);
            for (int h = 0; h < LN_BLK; h += LN_LANES)
                for (int l = 0; l < LN_LANES; l++) {
                    sg[l] += g[h + l];
                    sgx[l] += (double)g[h + l] * xh[h + l];
                }
        }
        for (int64_t jt = j; jt < d; jt++) {
            float gt = w ? dyr[jt] * w[jt] : dyr[jt], xt = (xr[jt] - m) * rs;
            sg[(jt - j) % LN_LANES] += gt;
            sgx[(jt - j) % LN_LANES] += (double)gt * xt;
        }
        float mg = (float)(lanes_sum(sg) / (double)d), mgx = (float)(lanes_sum(sgx) / (double)d);
        for (j = 0; j + LN_BLK <= d; j += LN_BLK) {
            ln_g_xh(xr, dyr, w, j, m, rs, g, xh);
            for (int l = 0; l < LN_BLK; l++)
                g[l] = rs * (g[l] - mg - xh[l] * mgx);
            for (int l = 0; l < LN_BLK; l++)
                dxr[j + l] = g[l];
        }
        for (; j < d; j++) {
            float gt = w ? dyr[j] * w[j] : dyr[j], xt = (xr[j] - m) * rs;
            dxr[j] = rs * (gt - mg - xt * mgx);
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
    if (pg_args_layernorm("layernorm_bwd_w", n, d))
        return 1;
    double sw[PG_CPU_COLBLK], sb[PG_CPU_COLBLK];
    for (int64_t j0 = 0; j0 < d; j0 += PG_CPU_COLBLK) {
        int64_t nb = d - j0 < PG_CPU_COLBLK ? d - j0 : PG_CPU_COLBLK;
        for (int64_t j = 0; j < nb; j++)
            sw[j] = sb[j] = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const float *xr = x + i * d + j0, *dyr = dy + i * d + j0;
            float m = mean[i], rs = rstd[i];
            if (nb == PG_CPU_COLBLK) /* a fixed count: SIMD at -O2, same adds */
                for (int64_t j = 0; j < PG_CPU_COLBLK; j++) {
                    float xh = (xr[j] - m) * rs;
                    sw[j] += (double)dyr[j] * xh;
                    sb[j] += dyr[j];
                }
            else
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

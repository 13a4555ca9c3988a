/* runtime/cpu/batchnorm2d.c — batch norm of images x [r, C, hw], per channel
 * over its r * hw values (PyTorch's BatchNorm2d), with batchnorm.c's
 * semantics: the output normalises by this micro-batch's statistics (biased
 * variance), the running statistics move once per step from double sums
 * (pg_batchnorm_running_update).
 *
 * The order of every sum is set by (r, hw) alone: a channel's values are r
 * planes of hw, each plane summed in cpu_kernels.h's row-sum order (float
 * lanes within chunks of 256, the chunks in double), the planes' sums added
 * in double in sample order. The mean, then the squared deviations from it
 * (no cancellation), then the output: each pass a stream of 16-float blocks
 * through local buffers (a last partial block padded with zeros, whose dy = 0
 * adds nothing to the gradient sums), compiled for the baseline and for AVX2
 * and picked at run time (PG_CPU_PICK): the same IEEE operations lane by
 * lane, so the same bits. The deferred statistics (stats_acc) sum in double
 * lanes (8, a fixed tree), per plane, the planes added in sample order: the
 * same sums however the micro-batch's samples are split into calls. */
#include <math.h>
#include <string.h>

#include "cpu_ctx.h"
#include "op_args.h"

#define BN_L PG_CPU_ROW_LANES
#define BN_DL 8 /* stats_acc's double lanes */

/* the values of channel ch of sample s */
static const float *plane(const float *x, int64_t s, int64_t C, int64_t ch, int64_t hw)
{
    return x + (s * C + ch) * hw;
}

/* the block of a at j, or its k = e - j < BN_L values padded with zeros at t */
PG_CPU_INLINE const float *bn_blk(const float *a, int64_t j, int64_t e, float *t)
{
    if (j + BN_L <= e)
        return a + j;
    pg_cpu_row_pad(a + j, e - j, t);
    return t;
}

/* d[0, min(k, BN_L)) = t: a whole block as a copy of constant size (inlined:
 * a memcpy of a computed size is a libc call per 16 floats, which was most of
 * the output and dx passes) */
PG_CPU_INLINE void bn_store(float *d, const float *t, int64_t k)
{
    if (k >= BN_L)
        memcpy(d, t, BN_L * sizeof *d);
    else
        memcpy(d, t, (size_t)k * sizeof *d);
}

/* *sg += sum of g = dy wv, *sgx += sum of g xhat over one plane, xhat = (x - m) rs */
PG_CPU_INLINE void bn_grad_sums(const float *x, const float *dy, int64_t hw, float m, float rs, float wv,
                                double *sg, double *sgx)
{
    double s = 0.0, sx = 0.0;
    for (int64_t c = 0; c < hw; c += PG_CPU_ROW_CHUNK) {
        int64_t e = hw - c < PG_CPU_ROW_CHUNK ? hw : c + PG_CPU_ROW_CHUNK;
        float ag[BN_L] = {0}, agx[BN_L] = {0}, tx[BN_L], td[BN_L];
        for (int64_t j = c; j < e; j += BN_L) {
            const float *bx = bn_blk(x, j, e, tx), *bd = bn_blk(dy, j, e, td);
            for (int l = 0; l < BN_L; l++) {
                float g = bd[l] * wv, xh = (bx[l] - m) * rs;
                ag[l] += g;
                agx[l] += g * xh;
            }
        }
        s += pg_cpu_lanes_sum(ag);
        sx += pg_cpu_lanes_sum(agx);
    }
    *sg += s;
    *sgx += sx;
}

/* y = (x - m) rs [* wv] [+ bv] over one plane */
PG_CPU_INLINE void bn_out(const float *x, int64_t hw, float m, float rs, const float *w, const float *b, float wv,
                          float bv, float *y)
{
    for (int64_t j = 0; j < hw; j += BN_L) {
        float t[BN_L], tx[BN_L];
        const float *bx = bn_blk(x, j, hw, tx);
        for (int l = 0; l < BN_L; l++)
            t[l] = (bx[l] - m) * rs;
        if (w)
            for (int l = 0; l < BN_L; l++)
                t[l] *= wv;
        if (b)
            for (int l = 0; l < BN_L; l++)
                t[l] += bv;
        bn_store(y + j, t, hw - j);
    }
}

/* dx = rs (g - mg - xhat mgx), g = dy wv, over one plane */
PG_CPU_INLINE void bn_dx(const float *x, const float *dy, int64_t hw, float m, float rs, float wv, float mg,
                         float mgx, float *dx)
{
    for (int64_t j = 0; j < hw; j += BN_L) {
        float t[BN_L], tx[BN_L], td[BN_L];
        const float *bx = bn_blk(x, j, hw, tx), *bd = bn_blk(dy, j, hw, td);
        for (int l = 0; l < BN_L; l++) {
            float g = bd[l] * wv, xh = (bx[l] - m) * rs;
            t[l] = rs * (g - mg - xh * mgx);
        }
        bn_store(dx + j, t, hw - j);
    }
}

/* ---- the channel loops, compiled twice (baseline and AVX2) ---- */

PG_CPU_INLINE void bn2d_fwd_body(int64_t r, int64_t C, int64_t hw, float eps, const float *x, const float *w,
                                 const float *b, float *y, float *mean, float *rstd)
{
    double n = (double)(r * hw);
    for (int64_t ch = 0; ch < C; ch++) {
        double s = 0.0, ss = 0.0;
        for (int64_t k = 0; k < r; k++)
            s += pg_cpu_row_sum(plane(x, k, C, ch, hw), hw);
        float m = (float)(s / n);
        for (int64_t k = 0; k < r; k++)
            ss += pg_cpu_row_sqdev(plane(x, k, C, ch, hw), hw, m);
        float rs = (float)(1.0 / sqrt(ss / n + (double)eps));
        mean[ch] = m;
        rstd[ch] = rs;
        for (int64_t k = 0; k < r; k++)
            bn_out(plane(x, k, C, ch, hw), hw, m, rs, w, b, w ? w[ch] : 1.0f, b ? b[ch] : 0.0f,
                   y + (k * C + ch) * hw);
    }
}

PG_CPU_INLINE void bn2d_bwd_in_body(int64_t r, int64_t C, int64_t hw, const float *x, const float *w,
                                    const float *mean, const float *rstd, const float *dy, float *dx)
{
    double n = (double)(r * hw);
    for (int64_t ch = 0; ch < C; ch++) {
        float m = mean[ch], rs = rstd[ch], wv = w ? w[ch] : 1.0f; /* dy * 1 is dy exactly */
        double sg = 0.0, sgx = 0.0;
        for (int64_t k = 0; k < r; k++)
            bn_grad_sums(plane(x, k, C, ch, hw), plane(dy, k, C, ch, hw), hw, m, rs, wv, &sg, &sgx);
        float mg = (float)(sg / n), mgx = (float)(sgx / n);
        for (int64_t k = 0; k < r; k++)
            bn_dx(plane(x, k, C, ch, hw), plane(dy, k, C, ch, hw), hw, m, rs, wv, mg, mgx, dx + (k * C + ch) * hw);
    }
}

PG_CPU_INLINE void bn2d_bwd_w_body(int64_t r, int64_t C, int64_t hw, const float *x, const float *mean,
                                   const float *rstd, const float *dy, float *dw, float *db)
{
    for (int64_t ch = 0; ch < C; ch++) {
        double sb = 0.0, sw = 0.0;
        for (int64_t k = 0; k < r; k++)
            bn_grad_sums(plane(x, k, C, ch, hw), plane(dy, k, C, ch, hw), hw, mean[ch], rstd[ch], 1.0f, &sb, &sw);
        if (dw)
            dw[ch] += (float)sw;
        if (db)
            db[ch] += (float)sb;
    }
}

/* sum[C] += x, sumsq[C] += x^2: per plane in BN_DL double lanes (lane l takes
 * the values l mod BN_DL), the lanes added in a fixed tree */
PG_CPU_INLINE void bn2d_stats_body(int64_t r, int64_t C, int64_t hw, const float *x, double *sum, double *sumsq)
{
    for (int64_t ch = 0; ch < C; ch++)
        for (int64_t k = 0; k < r; k++) {
            const float *p = plane(x, k, C, ch, hw);
            double a[BN_DL] = {0}, q[BN_DL] = {0};
            for (int64_t j = 0; j < hw; j += BN_DL) {
                double t[BN_DL];
                if (j + BN_DL <= hw)
                    for (int l = 0; l < BN_DL; l++)
                        t[l] = p[j + l];
                else
                    for (int l = 0; l < BN_DL; l++)
                        t[l] = j + l < hw ? p[j + l] : 0.0;
                for (int l = 0; l < BN_DL; l++) {
                    a[l] += t[l];
                    q[l] += t[l] * t[l];
                }
            }
            sum[ch] += ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
            sumsq[ch] += ((q[0] + q[4]) + (q[2] + q[6])) + ((q[1] + q[5]) + (q[3] + q[7]));
        }
}

static void bn2d_fwd(int64_t r, int64_t C, int64_t hw, float eps, const float *x, const float *w, const float *b,
                     float *y, float *mean, float *rstd)
{
    bn2d_fwd_body(r, C, hw, eps, x, w, b, y, mean, rstd);
}
static void bn2d_bwd_in(int64_t r, int64_t C, int64_t hw, const float *x, const float *w, const float *mean,
                        const float *rstd, const float *dy, float *dx)
{
    bn2d_bwd_in_body(r, C, hw, x, w, mean, rstd, dy, dx);
}
static void bn2d_bwd_w(int64_t r, int64_t C, int64_t hw, const float *x, const float *mean, const float *rstd,
                       const float *dy, float *dw, float *db)
{
    bn2d_bwd_w_body(r, C, hw, x, mean, rstd, dy, dw, db);
}
static void bn2d_stats(int64_t r, int64_t C, int64_t hw, const float *x, double *sum, double *sumsq)
{
    bn2d_stats_body(r, C, hw, x, sum, sumsq);
}
#ifdef PG_CPU_AVX2
PG_CPU_TARGET_AVX2 static void bn2d_fwd_avx2(int64_t r, int64_t C, int64_t hw, float eps, const float *x,
                                             const float *w, const float *b, float *y, float *mean, float *rstd)
{
    bn2d_fwd_body(r, C, hw, eps, x, w, b, y, mean, rstd);
}
PG_CPU_TARGET_AVX2 static void bn2d_bwd_in_avx2(int64_t r, int64_t C, int64_t hw, const float *x, const float *w,
                                                const float *mean, const float *rstd, const float *dy, float *dx)
{
    bn2d_bwd_in_body(r, C, hw, x, w, mean, rstd, dy, dx);
}
PG_CPU_TARGET_AVX2 static void bn2d_bwd_w_avx2(int64_t r, int64_t C, int64_t hw, const float *x, const float *mean,
                                               const float *rstd, const float *dy, float *dw, float *db)
{
    bn2d_bwd_w_body(r, C, hw, x, mean, rstd, dy, dw, db);
}
PG_CPU_TARGET_AVX2 static void bn2d_stats_avx2(int64_t r, int64_t C, int64_t hw, const float *x, double *sum,
                                               double *sumsq)
{
    bn2d_stats_body(r, C, hw, x, sum, sumsq);
}
#endif

/* ---- the ops ---- */

int pg_batchnorm2d_fwd(pg_ctx *c, int64_t r, int64_t C, int64_t hw, float eps, const float *x, const float *w,
                       const float *b, float *y, float *mean, float *rstd)
{
    if (pg_args_bn2d("batchnorm2d_fwd", r, C, hw, 1))
        return 1;
    PG_CPU_PICK(c, bn2d_fwd)(r, C, hw, eps, x, w, b, y, mean, rstd);
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
    if (pg_args_bn2d("batchnorm2d_bwd_in", r, C, hw, 1))
        return 1;
    PG_CPU_PICK(c, bn2d_bwd_in)(r, C, hw, x, w, mean, rstd, dy, dx);
    return 0;
}

/* dw[C] += sum dy xhat; db[C] += sum dy */
int pg_batchnorm2d_bwd_w(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, const float *mean,
                         const float *rstd, const float *dy, float *dw, float *db)
{
    if (pg_args_bn2d("batchnorm2d_bwd_w", r, C, hw, 1))
        return 1;
    PG_CPU_PICK(c, bn2d_bwd_w)(r, C, hw, x, mean, rstd, dy, dw, db);
    return 0;
}

/* sum[C] += x, sumsq[C] += x^2 over the samples and positions (double) */
int pg_batchnorm2d_stats_acc(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, double *sum,
                             double *sumsq)
{
    if (pg_args_bn2d("batchnorm2d_stats_acc", r, C, hw, 0))
        return 1;
    PG_CPU_PICK(c, bn2d_stats)(r, C, hw, x, sum, sumsq);
    return 0;
}

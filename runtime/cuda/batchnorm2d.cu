/* runtime/cuda/batchnorm2d.cu — batch norm of images x [r, C, hw], per channel
 * over its r * hw values, as runtime/cpu/batchnorm2d.c (this micro-batch's
 * statistics, biased variance; the running statistics move once per step
 * through batchnorm.cu's pg_batchnorm_running_update). One thread per channel
 * walks the samples, then the positions, in index order, in double: the CPU's
 * order and arithmetic (_rn intrinsics, nothing fused), so the statistics,
 * the output and both gradients equal the CPU's bit for bit. The evaluation
 * forward is elementwise. Later work: a block per channel with a fixed tree
 * (a channel of a large image is a long serial walk for one thread). */
#include <math.h>

#include "cuda_common.h"
#include "op_args.h"

#define GRID(count) pg_cuda_blocks(count, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream

/* the values of channel ch of sample s */
__device__ __forceinline__ int64_t plane(int64_t s, int64_t C, int64_t ch, int64_t hw) { return (s * C + ch) * hw; }

__global__ void bn2d_fwd_kernel(int64_t r, int64_t C, int64_t hw, float eps, const float *x, const float *w,
                                const float *b, float *y, float *mean, float *rstd)
{
    PG_GRID_STRIDE(ch, C) {
        double n = (double)(r * hw), s = 0.0, ss = 0.0;
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++)
                s = __dadd_rn(s, (double)x[plane(k, C, ch, hw) + i]);
        double mu = s / n;
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++) {
                double e = __dsub_rn((double)x[plane(k, C, ch, hw) + i], mu);
                ss = __dadd_rn(ss, __dmul_rn(e, e));
            }
        float m = (float)mu, rs = (float)(1.0 / sqrt(ss / n + (double)eps));
        mean[ch] = m;
        rstd[ch] = rs;
        float wv = w ? w[ch] : 1.0f, bv = b ? b[ch] : 0.0f;
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++) {
                int64_t at = plane(k, C, ch, hw) + i;
                float v = __fmul_rn(__fsub_rn(x[at], m), rs);
                if (w)
                    v = __fmul_rn(v, wv);
                if (b)
                    v = __fadd_rn(v, bv);
                y[at] = v;
            }
    }
}

__global__ void bn2d_eval_kernel(int64_t count, int64_t C, int64_t hw, float eps, const float *x, const float *w,
                                 const float *b, const float *run_mean, const float *run_var, float *y)
{
    PG_GRID_STRIDE(k, count) {
        int64_t ch = (k / hw) % C;
        double sd = sqrt((double)run_var[ch] + (double)eps);
        double v = __ddiv_rn(__dsub_rn((double)x[k], (double)run_mean[ch]), sd);
        if (w)
            v = __dmul_rn(v, (double)w[ch]);
        if (b)
            v = __dadd_rn(v, (double)b[ch]);
        y[k] = (float)v;
    }
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w */
__global__ void bn2d_bwd_in_kernel(int64_t r, int64_t C, int64_t hw, const float *x, const float *w,
                                   const float *mean, const float *rstd, const float *dy, float *dx)
{
    PG_GRID_STRIDE(ch, C) {
        double n = (double)(r * hw), sg = 0.0, sgx = 0.0;
        float m = mean[ch], rs = rstd[ch], wv = w ? w[ch] : 1.0f;
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++) {
                int64_t at = plane(k, C, ch, hw) + i;
                float g = w ? __fmul_rn(dy[at], wv) : dy[at];
                float xh = __fmul_rn(__fsub_rn(x[at], m), rs);
                sg = __dadd_rn(sg, (double)g);
                sgx = __dadd_rn(sgx, __dmul_rn((double)g, (double)xh));
            }
        float mg = (float)(sg / n), mgx = (float)(sgx / n);
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++) {
                int64_t at = plane(k, C, ch, hw) + i;
                float g = w ? __fmul_rn(dy[at], wv) : dy[at];
                float xh = __fmul_rn(__fsub_rn(x[at], m), rs);
                dx[at] = __fmul_rn(rs, __fsub_rn(__fsub_rn(g, mg), __fmul_rn(xh, mgx)));
            }
    }
}

/* dw[C] += sum dy xhat; db[C] += sum dy */
__global__ void bn2d_bwd_w_kernel(int64_t r, int64_t C, int64_t hw, const float *x, const float *mean,
                                  const float *rstd, const float *dy, float *dw, float *db)
{
    PG_GRID_STRIDE(ch, C) {
        float m = mean[ch], rs = rstd[ch];
        double sw = 0.0, sb = 0.0;
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++) {
                int64_t at = plane(k, C, ch, hw) + i;
                float xh = __fmul_rn(__fsub_rn(x[at], m), rs);
                sw = __dadd_rn(sw, __dmul_rn((double)dy[at], (double)xh));
                sb = __dadd_rn(sb, (double)dy[at]);
            }
        if (dw)
            dw[ch] = __fadd_rn(dw[ch], (float)sw);
        if (db)
            db[ch] = __fadd_rn(db[ch], (float)sb);
    }
}

/* sum[C] += x, sumsq[C] += x^2 over the samples and positions in index order */
__global__ void bn2d_stats_acc_kernel(int64_t r, int64_t C, int64_t hw, const float *x, double *sum, double *sumsq)
{
    PG_GRID_STRIDE(ch, C) {
        double s = sum[ch], ss = sumsq[ch];
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++) {
                double v = x[plane(k, C, ch, hw) + i];
                s = __dadd_rn(s, v);
                ss = __dadd_rn(ss, __dmul_rn(v, v));
            }
        sum[ch] = s;
        sumsq[ch] = ss;
    }
}

int pg_batchnorm2d_fwd(pg_ctx *c, int64_t r, int64_t C, int64_t hw, float eps, const float *x, const float *w,
                       const float *b, float *y, float *mean, float *rstd)
{
    if (pg_args_bn2d("batchnorm2d_fwd", r, C, hw, 1))
        return 1;
    bn2d_fwd_kernel<<<GRID(C)>>>(r, C, hw, eps, x, w, b, y, mean, rstd);
    LAUNCH_CHECK("bn2d_fwd_kernel");
    return 0;
}

int pg_batchnorm2d_eval_fwd(pg_ctx *c, int64_t r, int64_t C, int64_t hw, float eps, const float *x, const float *w,
                            const float *b, const float *run_mean, const float *run_var, float *y)
{
    if (pg_args_bn2d("batchnorm2d_eval_fwd", r, C, hw, 1))
        return 1;
    int64_t count = r * C * hw;
    bn2d_eval_kernel<<<GRID(count)>>>(count, C, hw, eps, x, w, b, run_mean, run_var, y);
    LAUNCH_CHECK("bn2d_eval_kernel");
    return 0;
}

int pg_batchnorm2d_bwd_in(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, const float *w,
                          const float *mean, const float *rstd, const float *dy, float *dx)
{
    if (pg_args_bn2d("batchnorm2d_bwd_in", r, C, hw, 1))
        return 1;
    bn2d_bwd_in_kernel<<<GRID(C)>>>(r, C, hw, x, w, mean, rstd, dy, dx);
    LAUNCH_CHECK("bn2d_bwd_in_kernel");
    return 0;
}

int pg_batchnorm2d_bwd_w(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, const float *mean,
                         const float *rstd, const float *dy, float *dw, float *db)
{
    if (pg_args_bn2d("batchnorm2d_bwd_w", r, C, hw, 1))
        return 1;
    bn2d_bwd_w_kernel<<<GRID(C)>>>(r, C, hw, x, mean, rstd, dy, dw, db);
    LAUNCH_CHECK("bn2d_bwd_w_kernel");
    return 0;
}

int pg_batchnorm2d_stats_acc(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, double *sum,
                             double *sumsq)
{
    if (pg_args_bn2d("batchnorm2d_stats_acc", r, C, hw, 0))
        return 1;
    if (!r)
        return 0;
    bn2d_stats_acc_kernel<<<GRID(C)>>>(r, C, hw, x, sum, sumsq);
    LAUNCH_CHECK("bn2d_stats_acc_kernel");
    return 0;
}

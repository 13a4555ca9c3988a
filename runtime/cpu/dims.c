/* runtime/cpu/dims.c — ops over the per-sample dims of a tensor: the mean
 * over one of them (mean(dim), global_avgpool) and two of them swapped
 * (transpose(i, j)). Single-threaded loops; the mean sums in double in index
 * order and rounds once, so its bits depend on nothing but the values. */
#include "cpu_kernels.h"
#include "op_args.h"

/* y[o, i] = sum_k x[o, k, i] / d */
int pg_mean_fwd(pg_ctx *c, int64_t outer, int64_t d, int64_t inner, const float *x, float *y)
{
    (void)c;
    if (pg_args_mean("mean_fwd", outer, d, inner))
        return 1;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *p = x + o * d * inner + i;
            double s = 0.0;
            for (int64_t k = 0; k < d; k++)
                s += p[k * inner];
            y[o * inner + i] = (float)(s / (double)d);
        }
    return 0;
}

/* dx[o, k, i] = dy[o, i] / d */
int pg_mean_bwd_in(pg_ctx *c, int64_t outer, int64_t d, int64_t inner, const float *dy, float *dx)
{
    (void)c;
    if (pg_args_mean("mean_bwd_in", outer, d, inner))
        return 1;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            float v = (float)(dy[o * inner + i] / (double)d);
            float *p = dx + o * d * inner + i;
            for (int64_t k = 0; k < d; k++)
                p[k * inner] = v;
        }
    return 0;
}

/* y [outer, b, mid, a, inner] = x [outer, a, mid, b, inner] with a and b swapped */
int pg_swap_dims(pg_ctx *c, int64_t outer, int64_t a, int64_t mid, int64_t b, int64_t inner, const float *x, float *y)
{
    (void)c;
    if (pg_args_swap_dims(outer, a, mid, b, inner))
        return 1;
    for (int64_t o = 0; o < outer; o++) {
        const float *xs = x + o * a * mid * b * inner;
        float *ys = y + o * a * mid * b * inner;
        for (int64_t j = 0; j < b; j++)
            for (int64_t m = 0; m < mid; m++)
                for (int64_t i = 0; i < a; i++) {
                    const float *src = xs + ((i * mid + m) * b + j) * inner;
                    float *dst = ys + ((j * mid + m) * a + i) * inner;
                    for (int64_t e = 0; e < inner; e++)
                        dst[e] = src[e];
                }
    }
    return 0;
}

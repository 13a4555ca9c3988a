/* runtime/cpu/optim.c — gradient norms and optimizer steps, one tensor at a
 * time, elementwise in float with the scalar factors computed in double, in
 * the same operation order as torch.optim's single-tensor SGD and AdamW. */
#include <math.h>

#include "cpu_kernels.h"
#include "op_args.h"

#define SGD_BLK 16 /* elements per block of pg_sgd_step's vectorizable passes */

/* *out = sum g^2 over the elements in index order (double). */
int pg_sumsq(pg_ctx *c, int64_t count, const float *g, double *out)
{
    (void)c;
    if (pg_args_count("sumsq", count))
        return 1;
    double s = 0.0;
    for (int64_t i = 0; i < count; i++)
        s += (double)g[i] * g[i];
    *out = s;
    return 0;
}

int pg_scale(pg_ctx *c, float *x, float a, int64_t count)
{
    (void)c;
    if (pg_args_count("scale", count))
        return 1;
    for (int64_t i = 0; i < count; i++)
        x[i] *= a;
    return 0;
}

/* torch.optim.SGD (dampening 0, no Nesterov):
 *   d = g + wd w;  buf = d on the first step, else momentum buf + d;  w -= lr buf
 * With momentum 0 the buffer is not touched (may be NULL). */
int pg_sgd_step(pg_ctx *c, int64_t count, float *w, const float *g, float *buf,
                float lr, float momentum, float weight_decay, int first_step)
{
    (void)c;
    if (pg_args_count("sgd_step", count))
        return 1;
    if (momentum != 0.0f && !buf)
        return PG_RT_FAIL("sgd_step: momentum %g needs a momentum buffer", (double)momentum);
    /* Blocks of SGD_BLK, one pass per term with the tests hoisted out, so each
     * pass is a fixed-count loop that -O2 turns into SIMD; every element sees
     * the same float operations in the same order as the plain loop below. */
    int64_t i = 0;
    for (; i + SGD_BLK <= count; i += SGD_BLK) {
        float d[SGD_BLK];
        for (int j = 0; j < SGD_BLK; j++)
            d[j] = g[i + j];
        if (weight_decay != 0.0f)
            for (int j = 0; j < SGD_BLK; j++)
                d[j] = d[j] + weight_decay * w[i + j];
        if (momentum != 0.0f) {
            if (!first_step)
                for (int j = 0; j < SGD_BLK; j++)
                    d[j] = buf[i + j] * momentum + d[j];
            for (int j = 0; j < SGD_BLK; j++)
                buf[i + j] = d[j];
        }
        for (int j = 0; j < SGD_BLK; j++)
            w[i + j] = w[i + j] + (-lr) * d[j];
    }
    for (; i < count; i++) {
        float d = g[i];
        if (weight_decay != 0.0f)
            d = d + weight_decay * w[i];
        if (momentum != 0.0f) {
            d = first_step ? d : buf[i] * momentum + d;
            buf[i] = d;
        }
        w[i] = w[i] + (-lr) * d;
    }
    return 0;
}

/* torch.optim.AdamW (amsgrad off), step t >= 1:
 *   w *= 1 - lr wd;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g g
 *   w += -(lr / (1 - beta1^t)) m / (sqrt(v) / sqrt(1 - beta2^t) + eps) */
int pg_adamw_step(pg_ctx *c, int64_t count, float *w, const float *g, float *m, float *v,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t)
{
    (void)c;
    if (pg_args_adamw(count, t))
        return 1;
    float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    float b1 = beta1, one_b1 = (float)(1.0 - (double)beta1);
    float b2 = beta2, one_b2 = (float)(1.0 - (double)beta2);
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    float neg_step = (float)(-((double)lr / bc1));
    float bc2_sqrt = (float)sqrt(bc2);
    for (int64_t i = 0; i < count; i++) {
        float gi = g[i];
        float wi = w[i] * decay;
        float mi = m[i] * b1 + one_b1 * gi;
        float vi = v[i] * b2 + one_b2 * gi * gi;
        float den = sqrtf(vi) / bc2_sqrt + eps;
        w[i] = wi + neg_step * mi / den;
        m[i] = mi;
        v[i] = vi;
    }
    return 0;
}

/* runtime/cpu/loss.c — losses, value and gradient in one pass. Each call sees
 * one micro-batch and divides by the WHOLE batch's normaliser `denom`, so the
 * partial losses and gradients of the micro-batches add up to the batch's.
 * Sums run over elements in index order, in double. */
#include <math.h>

#include "cpu_kernels.h"
#include "op_args.h"

/* loss = sum (y - t)^2 / denom;  dy = 2 (y - t) / denom */
int pg_mse_fwd_bwd(pg_ctx *c, int64_t count, const float *y, const float *target,
                   double denom, double *loss, float *dy)
{
    (void)c;
    if (pg_args_mse(count, denom))
        return 1;
    double s = 0.0, g = 2.0 / denom;
    for (int64_t i = 0; i < count; i++) {
        float diff = y[i] - target[i];
        s += (double)diff * diff;
        dy[i] = (float)(g * diff);
    }
    *loss = s / denom;
    return 0;
}

/* Per row: logp = x - max - log(sum exp(x - max)); loss = -sum logp[target] / denom;
 * dlogits = (softmax - onehot(target)) / denom. */
int pg_cross_entropy_fwd_bwd(pg_ctx *c, int64_t n, int64_t V, const float *logits,
                             const int32_t *target, double denom, double *loss, float *dlogits)
{
    (void)c;
    if (pg_args_cross_entropy(n, V, denom))
        return 1;
    for (int64_t i = 0; i < n; i++)
        if (target[i] < 0 || target[i] >= V)
            return PG_RT_FAIL("cross_entropy: row %lld has target id %ld, outside the classes [0, %lld); "
                              "check the target data against the model's output size",
                              (long long)i, (long)target[i], (long long)V);
    double total = 0.0, inv = 1.0 / denom;
    for (int64_t i = 0; i < n; i++) {
        const float *x = logits + i * V;
        float *dx = dlogits + i * V;
        float m = x[0];
        for (int64_t j = 1; j < V; j++)
            if (x[j] > m)
                m = x[j];
        double s = 0.0;
        for (int64_t j = 0; j < V; j++)
            s += exp((double)x[j] - m);
        double lse = log(s);
        total += lse - ((double)x[target[i]] - m);
        for (int64_t j = 0; j < V; j++)
            dx[j] = (float)(exp((double)x[j] - m - lse) * inv);
        dx[target[i]] = (float)((exp((double)x[target[i]] - m - lse) - 1.0) * inv);
    }
    *loss = total * inv;
    return 0;
}

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

/* One row: dx = (softmax(x) - onehot(t)) * inv; returns -log softmax(x)[t]
 * (logp = x - max - log(sum exp(x - max)), in double). */
static double ce_row(const float *x, int64_t V, int32_t t, double inv, float *dx)
{
    float m = x[0];
    for (int64_t j = 1; j < V; j++)
        if (x[j] > m)
            m = x[j];
    double s = 0.0;
    for (int64_t j = 0; j < V; j++)
        s += exp((double)x[j] - m);
    double lse = log(s);
    for (int64_t j = 0; j < V; j++)
        dx[j] = (float)(exp((double)x[j] - m - lse) * inv);
    dx[t] = (float)((exp((double)x[t] - m - lse) - 1.0) * inv);
    return lse - ((double)x[t] - m);
}

/* Per row: loss = -sum logp[target] / denom; dlogits = (softmax - onehot(target)) / denom. */
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
    for (int64_t i = 0; i < n; i++)
        total += ce_row(logits + i * V, V, target[i], inv, dlogits + i * V);
    *loss = total * inv;
    return 0;
}

/* As pg_cross_entropy_fwd_bwd, rows whose target is `ignore` left out (zero
 * gradient), divided by *count, the counted positions of the whole batch. */
int pg_cross_entropy_ignore_fwd_bwd(pg_ctx *c, int64_t n, int64_t V, const float *logits,
                                    const int32_t *target, int32_t ignore, const double *count,
                                    double *loss, float *dlogits)
{
    (void)c;
    double denom = *count;
    if (pg_args_cross_entropy(n, V, 1.0) || !(denom >= 0.0))
        return n < 0 || V <= 0 ? 1 : PG_RT_FAIL("cross_entropy: the batch's counted positions are %g", denom);
    for (int64_t i = 0; i < n; i++)
        if (target[i] != ignore && (target[i] < 0 || target[i] >= V))
            return PG_RT_FAIL("cross_entropy: row %lld has target id %ld, outside the classes [0, %lld) and not "
                              "the ignored id %ld; check the target data against the model's output size",
                              (long long)i, (long)target[i], (long long)V, (long)ignore);
    double total = 0.0, inv = denom > 0.0 ? 1.0 / denom : 0.0;
    for (int64_t i = 0; i < n; i++) {
        const float *x = logits + i * V;
        float *dx = dlogits + i * V;
        if (target[i] == ignore)
            for (int64_t j = 0; j < V; j++)
                dx[j] = 0.0f;
        else
            total += ce_row(x, V, target[i], inv, dx);
    }
    *loss = total * inv;
    return 0;
}

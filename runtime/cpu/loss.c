/* runtime/cpu/loss.c — losses, value and gradient in one pass. Each call sees
 * one micro-batch and divides by the WHOLE batch's normaliser `denom`, so the
 * partial losses and gradients of the micro-batches add up to the batch's.
 * Sums run over elements in index order, in double. */
#include <math.h>
#include <string.h>

#include "cpu_ctx.h"
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

/* Cross-entropy rows in blocks of CE_BLK (pg_cpu_exp_blk's, a last partial
 * block padded; pg_cpu_exp_shifted's, 4 blocks at a time in two passes),
 * baseline and AVX2 builds of the same source (one bits): the
 * row's max in lanes (exact in any order), e = exp(x - max) in float into dx,
 * their sum as cpu_kernels.h's row sums (float lanes in chunks, chunks in
 * double), then dx = e (inv / sum) and dx[t] = (e_t / sum - 1) inv;
 * -log softmax(x)[t] = log(sum) - (x_t - max) in double. (Before: libm's
 * exp in double, a call per element, twice per element.) */
#define CE_BLK PG_CPU_EXP_BLK
_Static_assert(PG_CPU_ROW_CHUNK % PG_CPU_EXP_WIDE == 0, "a row chunk holds whole spans of exponentials");

/* One row: dx = (softmax(x) - onehot(t)) * inv; returns -log softmax(x)[t] */
PG_CPU_INLINE double ce_row(const float *x, int64_t V, int32_t t, double inv, float *dx)
{
    float m = pg_cpu_row_max(x, V), e[CE_BLK];
    double s = 0.0;
    for (int64_t c = 0; c < V; c += PG_CPU_ROW_CHUNK) {
        int64_t end = V - c < PG_CPU_ROW_CHUNK ? V : c + PG_CPU_ROW_CHUNK, j = c;
        /* the lanes start as 0 + the chunk's first block, whole blocks go back
         * into dx where the row has room (as attention.c's softmax rows: a
         * zero-fill and a short copy are `rep stos` / `rep movs` there) */
        float acc[PG_CPU_ROW_LANES], ew[PG_CPU_EXP_WIDE];
        for (; j < end; j += PG_CPU_EXP_WIDE) {
            int64_t k = end - j < PG_CPU_EXP_WIDE ? end - j : PG_CPU_EXP_WIDE;
            int64_t nblk = pg_cpu_exp_shifted(x + j, k, V - j, m, ew), b = 0, w = 0;
            if (j == c) {
                for (int l = 0; l < PG_CPU_ROW_LANES; l++)
                    acc[l] = 0.0f + ew[l];
                b = 1;
            }
            for (; b < nblk; b++)
                for (int l = 0; l < PG_CPU_ROW_LANES; l++)
                    acc[l] += ew[b * CE_BLK + l];
            for (; w < nblk && j + (w + 1) * CE_BLK <= V; w++)
                for (int l = 0; l < CE_BLK; l++)
                    dx[j + w * CE_BLK + l] = ew[w * CE_BLK + l];
            for (int64_t q = w * CE_BLK; q < k; q++)
                dx[j + q] = ew[q];
        }
        s += pg_cpu_lanes_sum(acc);
    }
    float scale = (float)(inv / s);
    double et = dx[t];
    int64_t j = 0;
    for (; j + CE_BLK <= V; j += CE_BLK) {
        for (int l = 0; l < CE_BLK; l++)
            e[l] = dx[j + l] * scale;
        for (int l = 0; l < CE_BLK; l++)
            dx[j + l] = e[l];
    }
    for (; j < V; j++)
        dx[j] *= scale;
    dx[t] = (float)((et / s - 1.0) * inv);
    return log(s) - ((double)x[t] - m);
}

/* rows [0, n) (those whose target is `ignore` zeroed when has_ignore); the losses' sum */
PG_CPU_INLINE double ce_rows_body(int64_t n, int64_t V, const float *logits, const int32_t *target, int has_ignore,
                                  int32_t ignore, double inv, float *dlogits)
{
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const float *x = logits + i * V;
        float *dx = dlogits + i * V;
        if (has_ignore && target[i] == ignore)
            memset(dx, 0, (size_t)V * sizeof *dx);
        else
            total += ce_row(x, V, target[i], inv, dx);
    }
    return total;
}

static double ce_rows(int64_t n, int64_t V, const float *logits, const int32_t *target, int has_ignore,
                      int32_t ignore, double inv, float *dlogits)
{
    return ce_rows_body(n, V, logits, target, has_ignore, ignore, inv, dlogits);
}
#ifdef PG_CPU_AVX2
PG_CPU_TARGET_AVX2 static double ce_rows_avx2(int64_t n, int64_t V, const float *logits, const int32_t *target,
                                              int has_ignore, int32_t ignore, double inv, float *dlogits)
{
    return ce_rows_body(n, V, logits, target, has_ignore, ignore, inv, dlogits);
}
#endif

/* Per row: loss = -sum logp[target] / denom; dlogits = (softmax - onehot(target)) / denom. */
int pg_cross_entropy_fwd_bwd(pg_ctx *c, int64_t n, int64_t V, const float *logits,
                             const int32_t *target, double denom, double *loss, float *dlogits)
{
    if (pg_args_cross_entropy(n, V, denom))
        return 1;
    for (int64_t i = 0; i < n; i++)
        if (target[i] < 0 || target[i] >= V)
            return PG_RT_FAIL("cross_entropy: row %lld has target id %ld, outside the classes [0, %lld); "
                              "check the target data against the model's output size",
                              (long long)i, (long)target[i], (long long)V);
    double inv = 1.0 / denom;
    *loss = PG_CPU_PICK(c, ce_rows)(n, V, logits, target, 0, 0, inv, dlogits) * inv;
    return 0;
}

/* As pg_cross_entropy_fwd_bwd, rows whose target is `ignore` left out (zero
 * gradient), divided by *count, the counted positions of the whole batch. */
int pg_cross_entropy_ignore_fwd_bwd(pg_ctx *c, int64_t n, int64_t V, const float *logits,
                                    const int32_t *target, int32_t ignore, const double *count,
                                    double *loss, float *dlogits)
{
    double denom = *count;
    if (pg_args_cross_entropy(n, V, 1.0) || !(denom >= 0.0))
        return n < 0 || V <= 0 ? 1 : PG_RT_FAIL("cross_entropy: the batch's counted positions are %g", denom);
    for (int64_t i = 0; i < n; i++)
        if (target[i] != ignore && (target[i] < 0 || target[i] >= V))
            return PG_RT_FAIL("cross_entropy: row %lld has target id %ld, outside the classes [0, %lld) and not "
                              "the ignored id %ld; check the target data against the model's output size",
                              (long long)i, (long)target[i], (long long)V, (long)ignore);
    double inv = denom > 0.0 ? 1.0 / denom : 0.0;
    *loss = PG_CPU_PICK(c, ce_rows)(n, V, logits, target, 1, ignore, inv, dlogits) * inv;
    return 0;
}

/* runtime/cpu/dropout.c — inverted dropout whose mask is a pure function of
 * (seed, sample index in the whole batch, element index within the sample):
 *   key  = splitmix64(seed)
 *   u    = top 24 bits of splitmix64(splitmix64(key + sample) + element) / 2^24
 *   keep = u >= p;  y = keep ? x * (1 / (1 - p)) : 0
 * No state, so any micro-batch or stage split draws the same mask; callers
 * fold the step into the seed. Stable forever: checkpoints depend on it. */
#include "cpu_kernels.h"
#include "op_args.h"

/* y = x masked and scaled; applied the same way forward (x) and backward (dy). */
static void dropout_apply(int64_t rows, int64_t per_row, float p, uint64_t seed,
                          int64_t first_sample, const float *x, float *y)
{
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    uint64_t key = pg_splitmix64(seed);
    for (int64_t i = 0; i < rows; i++) {
        uint64_t rowkey = pg_splitmix64(key + (uint64_t)(first_sample + i));
        for (int64_t j = 0; j < per_row; j++) {
            float u = pg_unit24(pg_splitmix64(rowkey + (uint64_t)j));
            int64_t k = i * per_row + j;
            y[k] = u >= p ? x[k] * scale : 0.0f;
        }
    }
}

int pg_dropout_fwd(pg_ctx *c, int64_t rows, int64_t per_row, float p, uint64_t seed,
                   int64_t first_sample, const float *x, float *y)
{
    (void)c;
    if (pg_args_dropout("dropout_fwd", rows, per_row, p))
        return 1;
    dropout_apply(rows, per_row, p, seed, first_sample, x, y);
    return 0;
}

int pg_dropout_bwd_in(pg_ctx *c, int64_t rows, int64_t per_row, float p, uint64_t seed,
                      int64_t first_sample, const float *dy, float *dx)
{
    (void)c;
    if (pg_args_dropout("dropout_bwd_in", rows, per_row, p))
        return 1;
    dropout_apply(rows, per_row, p, seed, first_sample, dy, dx);
    return 0;
}

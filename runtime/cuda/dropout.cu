/* runtime/cuda/dropout.cu — inverted dropout whose mask is a pure function of
 * (seed, sample index in the whole batch, element index within the sample),
 * the same counter hash as runtime/cpu/dropout.c, so masks and outputs are
 * bitwise equal to the CPU's:
 *   key  = splitmix64(seed)
 *   u    = top 24 bits of splitmix64(splitmix64(key + sample) + element) / 2^24
 *   keep = u >= p;  y = keep ? x * (1 / (1 - p)) : 0 */
#include "cuda_common.h"
#include "op_args.h"

/* Applied the same way forward (x) and backward (dy); y may alias x. */
__global__ void dropout_apply_kernel(int64_t rows, int64_t per_row, float p, float scale, uint64_t key,
                                     int64_t first_sample, const float *x, float *y)
{
    PG_GRID_STRIDE(k, rows * per_row) {
        int64_t i = k / per_row, j = k - i * per_row;
        uint64_t rowkey = pg_splitmix64(key + (uint64_t)(first_sample + i));
        float u = pg_unit24(pg_splitmix64(rowkey + (uint64_t)j));
        y[k] = u >= p ? x[k] * scale : 0.0f;
    }
}

static int dropout_apply(pg_ctx *c, int64_t rows, int64_t per_row, float p, uint64_t seed,
                         int64_t first_sample, const float *x, float *y)
{
    int64_t count = rows * per_row;
    /* the generated code derives `seed` from the step on the host: a graph
     * would replay one step's masks, so a step with dropout runs eagerly */
    if (pg_cuda_graph_blocker(c, "dropout (its seed is a per-step host value)"))
        return 1;
    if (!count)
        return 0;
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; /* host float division, as the CPU */
    uint64_t key = pg_splitmix64(seed);
    dropout_apply_kernel<<<pg_cuda_blocks(count, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(
        rows, per_row, p, scale, key, first_sample, x, y);
    LAUNCH_CHECK("dropout_apply_kernel");
    return 0;
}

int pg_dropout_fwd(pg_ctx *c, int64_t rows, int64_t per_row, float p, uint64_t seed,
                   int64_t first_sample, const float *x, float *y)
{
    if (pg_args_dropout("dropout_fwd", rows, per_row, p))
        return 1;
    return dropout_apply(c, rows, per_row, p, seed, first_sample, x, y);
}

int pg_dropout_bwd_in(pg_ctx *c, int64_t rows, int64_t per_row, float p, uint64_t seed,
                      int64_t first_sample, const float *dy, float *dx)
{
    if (pg_args_dropout("dropout_bwd_in", rows, per_row, p))
        return 1;
    return dropout_apply(c, rows, per_row, p, seed, first_sample, dy, dx);
}

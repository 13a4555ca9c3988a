/* runtime/cuda/embed.cu — token embedding, learned position embedding, and
 * logits by a table transposed (the tied output layer), as runtime/cpu/embed.c.
 * Token ids live on the device; they are checked there before use (one small
 * read-back), so a bad id fails the op with its row and value. */
#include "cuda_common.h"
#include "op_args.h"

/* Buckets of vocabulary rows in embed_bwd_w (see there). Any count gives the
 * same bits; 32 spreads the updates while keeping the id scans cheap. */
#define EMBED_BUCKETS PG_EMBED_BUCKETS

#define IDS_HINT "check the data file against the model's vocab size"

static int sizes_ok(const char *op, int64_t n, int64_t vocab, int64_t d)
{
    if (pg_args_sizes(op, "n", n, "vocab", vocab, "d", d))
        return 1;
    return 0;
}

#define GRID(count) pg_cuda_blocks(count, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream

/* y[n,d] = table[ids[i]] */
/* A bad id (reported by the id check, at once or at the end of the step)
 * gives a zero row here, never a read outside the table. */
__global__ void embed_fwd_kernel(int64_t n, int64_t d, int64_t vocab, const int32_t *ids, const float *table, float *y)
{
    PG_GRID_STRIDE(k, n * d) {
        int64_t i = k / d, j = k - i * d;
        int64_t v = ids[i];
        y[k] = v >= 0 && v < vocab ? table[v * d + j] : 0.0f;
    }
}

/* dtable[ids[i]] += dy[i] with every element's additions in token index order
 * (the CPU's order, so the same bits), without atomics: thread (j, bucket)
 * owns column j of the vocabulary rows v with v % EMBED_BUCKETS == bucket and
 * scans all ids in order, adding the tokens that land in its rows. Threads of
 * a warp read the same id (one broadcast load) and adjacent dy columns. */
__global__ void embed_bwd_w_kernel(int64_t n, int64_t d, int64_t vocab, const int32_t *ids, const float *dy,
                                   float *dtable)
{
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int32_t bucket = (int32_t)blockIdx.y;
    if (j >= d)
        return;
    for (int64_t i = 0; i < n; i++) {
        int32_t v = ids[i];
        if (v < 0 || (int64_t)v >= vocab || v % EMBED_BUCKETS != bucket)
            continue;
        float *dst = dtable + (int64_t)v * d + j;
        *dst = *dst + dy[i * d + j];
    }
}

int pg_embed_fwd(pg_ctx *c, int64_t n, int64_t vocab, int64_t d, const int32_t *ids,
                 const float *table, float *y)
{
    if (sizes_ok("embed_fwd", n, vocab, d))
        return 1;
    if (pg_cuda_check_ids(c, "embed_fwd", "token", "vocabulary", IDS_HINT, n, vocab, ids))
        return 1;
    if (!n || !d)
        return 0;
    embed_fwd_kernel<<<GRID(n * d)>>>(n, d, vocab, ids, table, y);
    LAUNCH_CHECK("embed_fwd_kernel");
    return 0;
}

int pg_embed_bwd_w(pg_ctx *c, int64_t n, int64_t vocab, int64_t d, const int32_t *ids,
                   const float *dy, float *dtable)
{
    if (sizes_ok("embed_bwd_w", n, vocab, d))
        return 1;
    if (pg_cuda_check_ids(c, "embed_bwd_w", "token", "vocabulary", IDS_HINT, n, vocab, ids))
        return 1;
    if (!n || !d)
        return 0;
    if (d > (int64_t)PG_CUDA_THREADS * 2147483647LL)
        return PG_RT_FAIL("embed_bwd_w: row size d=%lld too large", (long long)d);
    embed_bwd_w_kernel<<<PG_GEOM(pg_geom_embed_bwd_w(d)), 0, c->stream>>>(n, d, vocab, ids, dy, dtable);
    LAUNCH_CHECK("embed_bwd_w_kernel");
    return 0;
}

/* y[r,T,d] = x[r,T,d] + table[T,d]; y may alias x. */
__global__ void pos_embed_fwd_kernel(int64_t total, int64_t td, const float *x, const float *table, float *y)
{
    PG_GRID_STRIDE(k, total) y[k] = x[k] + table[k % td];
}

/* dtable[T,d] += sum over the r rows of dy[r,T,d]: rows in index order, double. */
__global__ void pos_embed_bwd_w_kernel(int64_t r, int64_t td, const float *dy, float *dtable)
{
    PG_GRID_STRIDE(k, td) {
        double s = 0.0;
        for (int64_t i = 0; i < r; i++)
            s += dy[i * td + k];
        dtable[k] += (float)s;
    }
}

int pg_pos_embed_fwd(pg_ctx *c, int64_t r, int64_t T, int64_t d, const float *x,
                     const float *table, float *y)
{
    if (pg_args_sizes("pos_embed_fwd", "r", r, "T", T, "d", d))
        return 1;
    int64_t td = T * d;
    if (!r || !td)
        return 0;
    pos_embed_fwd_kernel<<<GRID(r * td)>>>(r * td, td, x, table, y);
    LAUNCH_CHECK("pos_embed_fwd_kernel");
    return 0;
}

int pg_pos_embed_bwd_w(pg_ctx *c, int64_t r, int64_t T, int64_t d, const float *dy, float *dtable)
{
    if (pg_args_sizes("pos_embed_bwd_w", "r", r, "T", T, "d", d))
        return 1;
    int64_t td = T * d;
    if (!td)
        return 0;
    pos_embed_bwd_w_kernel<<<GRID(td)>>>(r, td, dy, dtable);
    LAUNCH_CHECK("pos_embed_bwd_w_kernel");
    return 0;
}


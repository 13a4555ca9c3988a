/* runtime/cpu/embed.c — token embedding, learned position embedding, and
 * logits by a table transposed (the tied output layer). */
#include <string.h>

#include "cpu_kernels.h"
#include "op_args.h"

static int ids_ok(const char *op, int64_t n, int64_t vocab, const int32_t *ids)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return PG_RT_FAIL("%s: row %lld has token id %ld, outside the vocabulary [0, %lld); "
                              "check the data file against the model's vocab size",
                              op, (long long)i, (long)ids[i], (long long)vocab);
    return 0;
}

/* y[n,d] = table[ids[i]] */
int pg_embed_fwd(pg_ctx *c, int64_t n, int64_t vocab, int64_t d, const int32_t *ids,
                 const float *table, float *y)
{
    (void)c;
    if (pg_args_sizes("embed_fwd", "n", n, "vocab", vocab, "d", d))
        return 1;
    if (ids_ok("embed_fwd", n, vocab, ids))
        return 1;
    for (int64_t i = 0; i < n; i++)
        memcpy(y + i * d, table + (int64_t)ids[i] * d, (size_t)d * sizeof *y);
    return 0;
}

/* dtable[ids[i]] += dy[i], rows in index order (a repeated id sums in that order). */
int pg_embed_bwd_w(pg_ctx *c, int64_t n, int64_t vocab, int64_t d, const int32_t *ids,
                   const float *dy, float *dtable)
{
    (void)c;
    if (pg_args_sizes("embed_bwd_w", "n", n, "vocab", vocab, "d", d))
        return 1;
    if (ids_ok("embed_bwd_w", n, vocab, ids))
        return 1;
    for (int64_t i = 0; i < n; i++) {
        float *dst = dtable + (int64_t)ids[i] * d;
        const float *src = dy + i * d;
        for (int64_t j = 0; j < d; j++)
            dst[j] += src[j];
    }
    return 0;
}

/* y[r,T,d] = x[r,T,d] + table[T,d]; y may alias x. */
int pg_pos_embed_fwd(pg_ctx *c, int64_t r, int64_t T, int64_t d, const float *x,
                     const float *table, float *y)
{
    (void)c;
    if (pg_args_sizes("pos_embed_fwd", "r", r, "T", T, "d", d))
        return 1;
    int64_t td = T * d;
    for (int64_t i = 0; i < r; i++)
        for (int64_t k = 0; k < td; k++)
            y[i * td + k] = x[i * td + k] + table[k];
    return 0;
}

/* dtable[T,d] += sum over the r rows of dy[r,T,d]: rows in index order, in
 * double per block of elements, one float add at the end. */
int pg_pos_embed_bwd_w(pg_ctx *c, int64_t r, int64_t T, int64_t d, const float *dy, float *dtable)
{
    (void)c;
    if (pg_args_sizes("pos_embed_bwd_w", "r", r, "T", T, "d", d))
        return 1;
    int64_t td = T * d;
    double s[PG_CPU_COLBLK];
    for (int64_t k0 = 0; k0 < td; k0 += PG_CPU_COLBLK) {
        int64_t nb = td - k0 < PG_CPU_COLBLK ? td - k0 : PG_CPU_COLBLK;
        for (int64_t k = 0; k < nb; k++)
            s[k] = 0.0;
        for (int64_t i = 0; i < r; i++)
            for (int64_t k = 0; k < nb; k++)
                s[k] += dy[i * td + k0 + k];
        for (int64_t k = 0; k < nb; k++)
            dtable[k0 + k] += (float)s[k];
    }
    return 0;
}


/* Generation: position p + j of each sequence's row, pads as they are; y may alias x. */
int pg_pos_embed_dec(pg_ctx *c, int64_t seqs, int64_t t, int64_t seq, int64_t d, const int32_t *rows,
                     const float *x, const float *table, float *y)
{
    (void)c;
    if (pg_args_sizes("pos_embed_dec", "seqs", seqs, "t", t, "d", d) || pg_args_sizes("pos_embed_dec", "seq", seq, "d", d, "t", t))
        return 1;
    for (int64_t i = 0; i < seqs; i++) {
        const int32_t *w = rows + i * PG_DEC_ROW_INTS;
        if (w[PG_DEC_POS] < 0 || w[PG_DEC_N] < 0 || w[PG_DEC_N] > t || (int64_t)w[PG_DEC_POS] + w[PG_DEC_N] > seq)
            return PG_RT_FAIL("pos_embed_dec: sequence %lld of the call has positions %ld + %ld, outside the table's "
                              "%lld (or more than t = %lld)", (long long)i, (long)w[PG_DEC_POS], (long)w[PG_DEC_N],
                              (long long)seq, (long long)t);
        for (int64_t jj = 0; jj < t; jj++) {
            const float *xr = x + (i * t + jj) * d;
            float *yr = y + (i * t + jj) * d;
            if (jj >= w[PG_DEC_N]) {
                memmove(yr, xr, (size_t)d * sizeof *yr);
                continue;
            }
            const float *tr = table + (w[PG_DEC_POS] + jj) * d;
            for (int64_t k = 0; k < d; k++)
                yr[k] = xr[k] + tr[k];
        }
    }
    return 0;
}

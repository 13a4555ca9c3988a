/* runtime/core/gen_seqs.c — stage 0's sequences in generation (generate.h).
 *
 * The cache has `batch` rows; decode micro-batch mb owns rows [first_mb,
 * first_mb + count_mb) (the first batch % nmb micro-batches one more). A free
 * row takes the next prompt: its context is the prompt, none of it cached
 * yet. Each round, a live row's call gives it its next uncached context
 * positions, at most `prefill` of them, and asks for a sample when they reach
 * the context's end. A sampled token is a new token of the prompt's output;
 * a stop id or max_new ends the sequence and frees the row, otherwise the
 * token joins the context. A context that would outgrow the cache (length
 * positions) keeps its last length / 2 tokens and recomputes them from
 * position 0: the model then sees at least that much of what came before. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "generate.h"

typedef struct gen_row {
    int64_t prompt;               /* -1: free */
    int32_t *ctx;                 /* [length]: the context, position by position */
    int64_t len, cached, made;    /* context tokens, how many of them the cache holds, new tokens so far */
} gen_row;

struct pg_gen_seqs {
    const pg_dec_desc *dd;
    int32_t *const *prompt;
    const int64_t *plen;
    int64_t n, next, max_new, vocab, shifts;
    const int32_t *stop;
    int nstop;
    gen_row *row;                 /* [batch] */
    int32_t **out;                /* [n][max_new]: each prompt's new tokens */
    int64_t *outn;
    int *stopped;
};

pg_gen_seqs *pg_gen_seqs_new(const pg_dec_desc *dd, int32_t *const *prompts, const int64_t *plen, int64_t n,
                             int64_t max_new, const int32_t *stop, int nstop, int64_t vocab)
{
    pg_gen_seqs *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    *q = (pg_gen_seqs){dd, prompts, plen, n, 0, max_new, vocab, 0, stop, nstop, NULL, NULL, NULL, NULL};
    q->row = calloc((size_t)dd->batch, sizeof *q->row);
    q->out = calloc((size_t)(n > 0 ? n : 1), sizeof *q->out);
    q->outn = calloc((size_t)(n > 0 ? n : 1), sizeof *q->outn);
    q->stopped = calloc((size_t)(n > 0 ? n : 1), sizeof *q->stopped);
    int ok = q->row && q->out && q->outn && q->stopped;
    for (int64_t s = 0; ok && s < dd->batch; s++) {
        q->row[s].prompt = -1;
        ok = (q->row[s].ctx = malloc((size_t)dd->length * sizeof(int32_t))) != NULL;
    }
    for (int64_t i = 0; ok && i < n; i++)
        ok = (q->out[i] = malloc((size_t)(max_new > 0 ? max_new : 1) * sizeof(int32_t))) != NULL;
    if (!ok) {
        pg_gen_seqs_free(q);
        return NULL;
    }
    return q;
}

void pg_gen_seqs_free(pg_gen_seqs *q)
{
    if (!q)
        return;
    for (int64_t s = 0; q->row && s < q->dd->batch; s++)
        free(q->row[s].ctx);
    for (int64_t i = 0; q->out && i < q->n; i++)
        free(q->out[i]);
    free(q->row);
    free(q->out);
    free(q->outn);
    free(q->stopped);
    free(q);
}

/* micro-batch mb's cache rows: [*first, *first + count) */
static int64_t mb_rows(const pg_dec_desc *dd, int mb, int64_t *first)
{
    int64_t B = dd->batch, M = dd->nmb, extra = B % M;
    *first = (int64_t)mb * (B / M) + (mb < extra ? mb : extra);
    return B / M + (mb < extra);
}

int64_t pg_gen_seqs_call(pg_gen_seqs *q, int mb, int32_t *rows, int32_t *tok, int64_t *t)
{
    const pg_dec_desc *dd = q->dd;
    int64_t first, cnt = mb_rows(dd, mb, &first), nseq = 0, tmax = 0;
    for (int64_t s = first; s < first + cnt; s++) {
        gen_row *w = &q->row[s];
        if (w->prompt < 0 && q->next < q->n) { /* a free row takes the next prompt */
            w->prompt = q->next++;
            w->len = q->plen[w->prompt];
            memcpy(w->ctx, q->prompt[w->prompt], (size_t)w->len * sizeof(int32_t));
            w->cached = w->made = 0;
        }
        if (w->prompt < 0)
            continue;
        int64_t n = w->len - w->cached < dd->prefill ? w->len - w->cached : dd->prefill;
        int32_t *x = rows + nseq * PG_DEC_MSG_INTS;
        x[PG_DEC_SEQ] = (int32_t)s;
        x[PG_DEC_POS] = (int32_t)w->cached;
        x[PG_DEC_N] = (int32_t)n;
        x[PG_DEC_FLAGS] = w->cached + n == w->len ? PG_DEC_SAMPLE : 0;
        x[PG_DEC_PROMPT] = (int32_t)w->prompt;
        x[PG_DEC_MADE] = (int32_t)w->made;
        tmax = n > tmax ? n : tmax;
        nseq++;
    }
    for (int64_t i = 0; i < nseq; i++) { /* the ids, each sequence padded to tmax */
        const int32_t *x = rows + i * PG_DEC_MSG_INTS;
        gen_row *w = &q->row[x[PG_DEC_SEQ]];
        for (int64_t j = 0; j < tmax; j++)
            tok[i * tmax + j] = j < x[PG_DEC_N] ? w->ctx[w->cached + j] : 0;
        w->cached += x[PG_DEC_N];
    }
    *t = tmax;
    return nseq;
}

static int is_stop(const pg_gen_seqs *q, int32_t tok)
{
    for (int k = 0; k < q->nstop; k++)
        if (q->stop[k] == tok)
            return 1;
    return 0;
}

int pg_gen_seqs_take(pg_gen_seqs *q, const int32_t *rows, int64_t nseq, const int32_t *tokens, char *err,
                     size_t errlen)
{
    const pg_dec_desc *dd = q->dd;
    for (int64_t i = 0; i < nseq; i++) {
        const int32_t *x = rows + i * PG_DEC_MSG_INTS;
        if (!(x[PG_DEC_FLAGS] & PG_DEC_SAMPLE))
            continue;
        gen_row *w = &q->row[x[PG_DEC_SEQ]];
        int32_t tk = tokens[i];
        if (tk < 0 || tk >= q->vocab) {
            snprintf(err, errlen, "the token sampled for prompt %lld is %ld, outside the input vocabulary [0, %lld)",
                     (long long)w->prompt, (long)tk, (long long)q->vocab);
            return -1;
        }
        q->out[w->prompt][q->outn[w->prompt]++] = tk;
        w->made++;
        if (is_stop(q, tk) || w->made >= q->max_new) {
            q->stopped[w->prompt] = is_stop(q, tk);
            w->prompt = -1; /* done: the row is free */
            continue;
        }
        if (w->len == dd->length) { /* the cache is full: keep the last half, recompute it */
            int64_t keep = dd->length / 2;
            memmove(w->ctx, w->ctx + w->len - keep, (size_t)keep * sizeof(int32_t));
            w->len = keep;
            w->cached = 0;
            q->shifts++;
        }
        w->ctx[w->len++] = tk;
    }
    return 0;
}

const int32_t *pg_gen_seqs_out(const pg_gen_seqs *q, int64_t i, int64_t *n, int *stopped)
{
    *n = q->outn[i];
    *stopped = q->stopped[i];
    return q->out[i];
}

int64_t pg_gen_seqs_shifts(const pg_gen_seqs *q) { return q->shifts; }

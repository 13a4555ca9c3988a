/* runtime/core/decode.c — the rounds of generation with the KV cache
 * (generate.h, pg_dec_desc in pg_contract.h).
 *
 * In a round every stage runs its decode actions once, in order. Stage 0 (it
 * holds chunk 0) makes each micro-batch's call at its FWD of chunk 0: first
 * it takes the tokens sampled from that micro-batch's call of the round
 * before (from the stage holding the last chunk), then asks its sequences
 * (gen_seqs.c) for the call: the rows, and the token ids into the arena. A
 * call's rows go with it: every SEND_ACT or SEND_SKIP first sends the
 * micro-batch's rows (a fixed-size message, tag PG_TAG(PG_TAG_GEN, mb, 0)),
 * then, when the call has sequences, the payload of rows x t token rows; each
 * RECV takes them in the same order. So every stage knows each call's rows
 * before its FWD: it writes the row table (cache row, first position, real
 * new positions, flags) into the arena and calls the chunk's dec function.
 * After the last chunk's FWD its stage samples a token for every row flagged
 * PG_DEC_SAMPLE from the logits of the row's last real position and sends
 * them to stage 0 (tag PG_TAG(PG_TAG_GEN, mb, 1)), which takes them at the
 * micro-batch's next FWD of chunk 0; on one link the tokens of a round come
 * after that round's activations and before the next round's, in the order
 * both ends meet them (the schedule orders each round's activations alike).
 * A micro-batch without sequences passes its rows alone; a round in which no
 * micro-batch has any is the last, on every stage.
 * The calls' results do not depend on the stage count, the micro-batches or
 * the other sequences of a call (the kernels' rows are independent and the
 * GEMM's bits do not depend on the row count), so neither do the tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"

enum { CTL_ROUND, CTL_NSEQ, CTL_T, CTL_SPARE, CTL_HDR };

typedef struct dec_ctx {
    pg_run *r;
    const pg_dec_desc *dd;
    pg_gen_seqs *q;           /* stage 0's sequences, else NULL */
    size_t ctl_ints;          /* a call's message: CTL_HDR + rows x PG_DEC_MSG_INTS */
    int32_t *ctl;             /* [nmb][ctl_ints]: each micro-batch's call this round */
    int32_t *back;            /* [nmb][rows]: tokens sampled from each micro-batch's last call */
    int32_t *table;           /* [rows][PG_DEC_ROW_INTS]: the row table of a call, host side */
    int32_t *tok;             /* stage 0: the token ids of a call [rows x prefill] */
    float *lg;                /* the sampler: one position's logits [vocab] */
    pg_sampler smp;
    int first, last;          /* the stages holding chunk 0 and the last chunk */
    pg_decode_stats *st;
} dec_ctx;

static int net_fail(dec_ctx *x, const char *what, int peer, pg_net_status st)
{
    pg_run *r = x->r;
    if (st == PG_NET_TIMEOUT)
        fprintf(stderr, "stage %d waiting in --generate for %s from stage %d for %g s\n", r->d->stage, what, peer,
                r->opt.timeout_s);
    else
        fprintf(stderr, "stage %d: --generate: %s with stage %d failed: %s\n", r->d->stage, what, peer,
                pg_net_error(r->net));
    return 1;
}

/* A received call's rows must fit this stage's tables. */
static int ctl_check(dec_ctx *x, const int32_t *c, int mb, int64_t round, int peer)
{
    const pg_dec_desc *dd = x->dd;
    const char *bad = NULL;
    if (c[CTL_ROUND] != (int32_t)round)
        bad = "of another round";
    else if (c[CTL_NSEQ] < 0 || c[CTL_NSEQ] > dd->rows || c[CTL_T] < 0 || c[CTL_T] > dd->prefill ||
             (c[CTL_NSEQ] > 0 && c[CTL_T] < 1))
        bad = "with a sequence or position count out of range";
    for (int32_t i = 0; !bad && i < c[CTL_NSEQ]; i++) {
        const int32_t *w = c + CTL_HDR + (size_t)i * PG_DEC_MSG_INTS;
        if (w[PG_DEC_SEQ] < 0 || w[PG_DEC_SEQ] >= dd->batch || w[PG_DEC_POS] < 0 || w[PG_DEC_N] < 0 ||
            w[PG_DEC_N] > c[CTL_T] || (int64_t)w[PG_DEC_POS] + w[PG_DEC_N] > dd->length)
            bad = "with a row out of range";
    }
    if (!bad)
        return 0;
    fprintf(stderr, "stage %d: --generate: stage %d sent micro-batch %d's call of round %lld %s (a stage of "
                    "another build?)\n", x->r->d->stage, peer, mb, (long long)round, bad);
    return 1;
}

/* Stage 0, before micro-batch mb's call of this round: the tokens of its last one, then the new call. */
static int make_call(dec_ctx *x, int mb, int64_t round)
{
    pg_run *r = x->r;
    int32_t *c = x->ctl + (size_t)mb * x->ctl_ints, *back = x->back + (size_t)mb * x->dd->rows;
    char err[256];
    if (round > 0 && c[CTL_NSEQ] > 0) {
        if (x->last != r->d->stage) {
            pg_net_status st = pg_net_recv(r->net, x->last, PG_TAG(PG_TAG_GEN, mb, 1), back,
                                           (size_t)c[CTL_NSEQ] * sizeof(int32_t), r->opt.timeout_s);
            if (st)
                return net_fail(x, "receiving the sampled tokens", x->last, st);
        }
        if (pg_gen_seqs_take(x->q, c + CTL_HDR, c[CTL_NSEQ], back, err, sizeof err)) {
            fprintf(stderr, "stage %d: --generate: %s\n", r->d->stage, err);
            return 1;
        }
    }
    int64_t t = 0, n = pg_gen_seqs_call(x->q, mb, c + CTL_HDR, x->tok, &t);
    c[CTL_ROUND] = (int32_t)round;
    c[CTL_NSEQ] = (int32_t)n;
    c[CTL_T] = (int32_t)t;
    c[CTL_SPARE] = 0;
    return n ? pg_copy_to_dev(r->ctx, r->A + x->dd->tokens_off, x->tok, (size_t)(n * t) * sizeof(int32_t)) : 0;
}

/* The last chunk's stage, after micro-batch mb's call: a token per flagged row, to stage 0. */
static int sample_call(dec_ctx *x, int mb, const int32_t *c)
{
    pg_run *r = x->r;
    const pg_dec_desc *dd = x->dd;
    int32_t *back = x->back + (size_t)mb * dd->rows;
    for (int32_t i = 0; i < c[CTL_NSEQ]; i++) {
        const int32_t *w = c + CTL_HDR + (size_t)i * PG_DEC_MSG_INTS;
        back[i] = -1;
        if (!(w[PG_DEC_FLAGS] & PG_DEC_SAMPLE) || w[PG_DEC_N] < 1)
            continue;
        size_t at = ((size_t)i * (size_t)c[CTL_T] + (size_t)(w[PG_DEC_N] - 1)) * (size_t)dd->vocab;
        if (pg_copy_to_host(r->ctx, x->lg, r->A + dd->logits_off + at * sizeof(float), (size_t)dd->vocab * sizeof(float)))
            return 1;
        back[i] = pg_sample(&x->smp, x->lg, w[PG_DEC_PROMPT], w[PG_DEC_MADE]);
        x->st->tokens++;
    }
    if (x->first == r->d->stage || c[CTL_NSEQ] == 0)
        return 0;
    pg_net_status st = pg_net_send(r->net, x->first, PG_TAG(PG_TAG_GEN, mb, 1), back,
                                   (size_t)c[CTL_NSEQ] * sizeof(int32_t));
    return st ? net_fail(x, "sending the sampled tokens", x->first, st) : 0;
}

/* FWD: the call of micro-batch mb on chunk `chunk`, with its row table. */
static int run_call(dec_ctx *x, int a, const pg_step_action *A, int64_t round)
{
    pg_run *r = x->r;
    const pg_stage_desc *d = r->d;
    int mb = A->mb;
    if (A->chunk == 0 && make_call(x, mb, round))
        return 1;
    const int32_t *c = x->ctl + (size_t)mb * x->ctl_ints;
    if (c[CTL_NSEQ] == 0)
        return 0;
    const pg_chunk_desc *cf = pg_run_chunk_fns(d, A->chunk);
    if (!cf || !cf->dec) {
        fprintf(stderr, "stage %d: decode action %d names chunk %d, which this stage has no decode function for\n",
                d->stage, a, A->chunk);
        return 1;
    }
    for (int32_t i = 0; i < c[CTL_NSEQ]; i++)
        memcpy(x->table + (size_t)i * PG_DEC_ROW_INTS, c + CTL_HDR + (size_t)i * PG_DEC_MSG_INTS,
               PG_DEC_ROW_INTS * sizeof(int32_t));
    if (pg_copy_to_dev(r->ctx, r->A + x->dd->rows_off, x->table, (size_t)c[CTL_NSEQ] * PG_DEC_ROW_INTS * sizeof(int32_t)))
        return 1;
    pg_mb_io io;
    memset(&io, 0, sizeof io);
    io.mb = io.slot = mb;
    io.seqs = c[CTL_NSEQ];
    io.t = c[CTL_T];
    io.rows = io.seqs * io.t;
    io.step = r->opt.steps;
    io.seed = d->train.seed;
    io.infer = 1;
    double t0 = pg_run_now();
    r->cur_action = a;
    if (cf->dec(r->ctx, r->A, &io)) {
        fprintf(stderr, "stage %d: --generate: the decode call of chunk %d failed (round %lld, micro-batch %d)\n",
                d->stage, A->chunk, (long long)round, mb);
        return 1;
    }
    x->st->calls++;
    int rc = A->chunk == d->nchunks - 1 ? sample_call(x, mb, c) : 0;
    x->st->busy_s += pg_run_now() - t0;
    return rc;
}

/* SEND_ACT / SEND_SKIP and their receives: the rows, then the payload. */
static int message(dec_ctx *x, const pg_step_action *A, int64_t round)
{
    pg_run *r = x->r;
    int32_t *c = x->ctl + (size_t)A->mb * x->ctl_ints;
    uint32_t rows_tag = PG_TAG(PG_TAG_GEN, A->mb, 0);
    int send = A->kind == PG_SEND_ACT || A->kind == PG_SEND_SKIP;
    pg_net_status st;
    if (send)
        st = pg_net_send(r->net, A->peer, rows_tag, c, x->ctl_ints * sizeof(int32_t));
    else
        st = pg_net_recv(r->net, A->peer, rows_tag, c, x->ctl_ints * sizeof(int32_t), r->opt.timeout_s);
    if (st)
        return net_fail(x, send ? "sending a decode call's rows" : "receiving a decode call's rows", A->peer, st);
    if (!send && ctl_check(x, c, A->mb, round, A->peer))
        return 1;
    size_t bytes = (size_t)c[CTL_NSEQ] * (size_t)c[CTL_T] * (size_t)A->bytes;
    if (!bytes)
        return 0;
    if (send)
        st = pg_net_send(r->net, A->peer, A->tag, r->A + A->off, bytes);
    else
        st = pg_net_recv(r->net, A->peer, A->tag, r->A + A->off, bytes, r->opt.timeout_s);
    return st ? net_fail(x, send ? "sending activations" : "receiving activations", A->peer, st) : 0;
}

static void ctx_free(dec_ctx *x)
{
    free(x->ctl);
    free(x->back);
    free(x->table);
    free(x->tok);
    free(x->lg);
    pg_sampler_free(&x->smp);
}

int pg_decode_run(pg_run *r, pg_gen_seqs *q, const pg_sampling *s, pg_decode_stats *st)
{
    const pg_stage_desc *d = r->d;
    const pg_dec_desc *dd = d->dec;
    dec_ctx x;
    memset(&x, 0, sizeof x);
    memset(st, 0, sizeof *st);
    x.r = r, x.dd = dd, x.q = q, x.st = st;
    x.ctl_ints = CTL_HDR + (size_t)dd->rows * PG_DEC_MSG_INTS;
    x.ctl = calloc((size_t)dd->nmb * x.ctl_ints, sizeof(int32_t));
    x.back = calloc((size_t)dd->nmb * (size_t)dd->rows, sizeof(int32_t));
    x.table = calloc((size_t)dd->rows * PG_DEC_ROW_INTS, sizeof(int32_t));
    x.tok = calloc((size_t)dd->rows * (size_t)dd->prefill, sizeof(int32_t));
    x.lg = calloc((size_t)(dd->vocab > 0 ? dd->vocab : 1), sizeof(float));
    x.smp.opt = *s;
    x.first = 0; /* chunk 0 runs on stage 0 in every placement */
    x.last = dd->last_stage;
    if (!x.ctl || !x.back || !x.table || !x.tok || !x.lg || pg_sampler_init(&x.smp, dd->vocab > 0 ? dd->vocab : 1)) {
        fprintf(stderr, "stage %d: out of memory for --generate\n", d->stage);
        ctx_free(&x);
        return 1;
    }
    int rc = 0;
    double t0 = pg_run_now();
    for (int64_t round = 0; !rc; round++) {
        for (int a = 0; a < dd->nactions && !rc; a++) {
            const pg_step_action *A = &dd->actions[a];
            if (A->kind == PG_FWD)
                rc = run_call(&x, a, A, round);
            else
                rc = message(&x, A, round);
        }
        st->rounds = round + 1;
        int live = 0;
        for (int mb = 0; mb < dd->nmb; mb++)
            live |= x.ctl[(size_t)mb * x.ctl_ints + CTL_NSEQ] > 0;
        if (!live)
            break;
    }
    st->wall_s = pg_run_now() - t0;
    ctx_free(&x);
    return rc;
}

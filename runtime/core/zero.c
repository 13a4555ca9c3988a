/* runtime/core/zero.c — `--zero 1`: the optimizer state sharded over the
 * data-parallel replicas (ZeRO stage 1).
 *
 * The gradients are summed over the D replicas as without it (dp.c: every
 * replica then holds every summed gradient, so the non-finite verdict and the
 * grad-norm clip are the same bits). The parameters this stage steps,
 * concatenated in table order (what dp.c reduces), are cut into D contiguous
 * shards at n q / D; replica q runs the optimizer on shard q only (the same
 * elementwise code over a sub-range of each parameter: its result is the
 * same bits as on the whole parameter) and keeps the optimizer state of
 * those elements only; then each replica sends its updated weights to every
 * other (an all-gather of pure copies, lent from the arena). Traffic per
 * step: the reduction's 2 (D-1)/D of the gradient bytes plus (D-1)/D for the
 * weights.
 *
 * pipegen lays the optimizer state out as one region at the end of the arena
 * ([opt_lo, arena_bytes): pg_stage_desc), so a replica allocates the arena up
 * to opt_lo and, after it, its shard's state only: for each stepped
 * parameter in table order with a part in the shard, its state 0 then its
 * state 1 over that part, each PG_ZERO_ALIGN-aligned. Every reader of the
 * state goes through pg_zero_state (the optimizer) or pg_zero_state_get/put
 * (checkpoints, which hold each stage's whole state: replica 0 gathers the
 * other replicas' shards before writing, each replica loads its part). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_bytes.h"
#include "pg_ops.h"
#include "stage_run.h"

#define ZERO_CHUNK PG_DP_CHUNK    /* floats per message of the weights' all-gather (dp_bytes.h) */
#define TAG_WEIGHTS PG_TAG(PG_TAG_DP, 0, 7) /* the updated weights of a shard */
#define TAG_STATE PG_TAG(PG_TAG_DP, 0, 8)   /* a replica's optimizer state, to replica 0 for a checkpoint */

struct pg_zero {
    int nopt;            /* state tensors per parameter: 2 AdamW, 1 SGD with momentum, 0 */
    int64_t *lo, *hi;    /* [D * nparams] replica q's elements [lo, hi) of parameter i (lo == hi: none) */
    int64_t *at;         /* [D * nparams] the byte offset of that part's state 0 in replica q's region (-1: none) */
    int64_t *bytes;      /* [D] the bytes of replica q's region */
    unsigned char **ck;  /* [D] replica 0 at a checkpoint: the others' regions (NULL otherwise) */
    size_t sent;         /* weight bytes this replica sends per step */
};

static int64_t part_bytes(int64_t floats) { return pg_zero_part_bytes(floats, 1); } /* one state tensor of a part */

int pg_zero_layout(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    int D = r->replicas > 0 ? r->replicas : 1, np = d->nparams;
    if (!r->opt.zero)
        return 0;
    if (strcmp(pg_backend_name(), "cpu") != 0) {
        fprintf(stderr, "stage %d: --zero 1 runs on the CPU runtime only: on the %s runtime the gathered weights "
                "would also have to refresh the bf16 shadows and the optimizer's CUDA graphs, which is not done yet; "
                "run without --zero\n", d->stage, pg_backend_name());
        return 1;
    }
    if (d->opt_lo < 0 || d->opt_bytes < 0 || d->opt_lo + d->opt_bytes != d->arena_bytes) {
        fprintf(stderr, "stage %d: the stage file's optimizer-state region [%" PRId64 ", +%" PRId64 ") is not the "
                "end of its %" PRId64 "-byte arena: generate it again with this pipegen\n", d->stage, d->opt_lo,
                d->opt_bytes, d->arena_bytes);
        return 1;
    }
    if (D == 1) {
        if (d->stage == 0)
            printf("--zero 1 with one replica: nothing to shard, the optimizer state stays whole (no effect)\n");
        return 0;
    }
    struct pg_zero *z = calloc(1, sizeof *z);
    size_t cells = (size_t)D * (size_t)(np ? np : 1);
    if (!z || !(z->lo = malloc(cells * sizeof *z->lo)) || !(z->hi = malloc(cells * sizeof *z->hi)) ||
        !(z->at = malloc(cells * sizeof *z->at)) || !(z->bytes = calloc((size_t)D, sizeof *z->bytes)) ||
        !(z->ck = calloc((size_t)D, sizeof *z->ck))) {
        if (z) {
            free(z->lo); free(z->hi); free(z->at); free(z->bytes); free(z->ck);
        }
        free(z);
        fprintf(stderr, "stage %d: out of memory\n", d->stage);
        return 1;
    }
    r->zero = z;
    z->nopt = pg_optim_adam(d->train.optimizer) ? 2 : d->train.momentum > 0 ? 1 : 0;
    int64_t n = 0;
    for (int i = 0; i < np; i++)
        if (pg_param_stepped(d, &d->params[i]))
            n += d->params[i].numel;
    for (int q = 0; q < D; q++) {
        int64_t s0 = n * q / D, s1 = n * (q + 1) / D, base = 0, bytes = 0;
        for (int i = 0; i < np; i++) {
            const pg_param_desc *p = &d->params[i];
            size_t c = (size_t)q * (size_t)np + (size_t)i;
            z->lo[c] = z->hi[c] = 0;
            z->at[c] = -1;
            if (!pg_param_stepped(d, p))
                continue;
            int64_t a = s0 > base ? s0 : base, b = s1 < base + p->numel ? s1 : base + p->numel;
            if (a < b) {
                z->lo[c] = a - base;
                z->hi[c] = b - base;
                if (p->opt_off[0] >= 0) {
                    z->at[c] = bytes;
                    bytes += pg_zero_part_bytes(b - a, p->opt_off[1] >= 0 ? 2 : 1); /* dp_bytes.h */
                }
            }
            base += p->numel;
        }
        z->bytes[q] = bytes;
    }
    int me = r->replica;
    for (int i = 0; i < np; i++)
        z->sent += (size_t)(z->hi[(size_t)me * np + i] - z->lo[(size_t)me * np + i]) * 4 * (size_t)(D - 1);
    return 0;
}

int64_t pg_zero_arena_bytes(const pg_run *r)
{
    return r->zero ? r->d->opt_lo + r->zero->bytes[r->replica] : r->d->arena_bytes;
}

void pg_zero_guard(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    size_t bytes = (size_t)pg_zero_arena_bytes(r);
    if (!r->zero || d->narena_bufs <= 0) {
        pg_arena_guard(r->ctx, r->A, bytes, d->arena_bufs, d->narena_bufs);
        return;
    }
    /* the generated list places the whole state past this arena's end: the
     * compact region instead */
    pg_arena_buf *b = malloc(((size_t)d->narena_bufs + 1) * sizeof *b);
    if (!b)
        return; /* no guard: the run is still correct */
    int n = 0;
    for (int i = 0; i < d->narena_bufs; i++)
        if (d->arena_bufs[i].off < d->opt_lo)
            b[n++] = d->arena_bufs[i];
    b[n++] = (pg_arena_buf){d->opt_lo, r->zero->bytes[r->replica]};
    pg_arena_guard(r->ctx, r->A, bytes, b, n);
    free(b);
}

float *pg_zero_state(pg_run *r, const pg_param_desc *p, int k, int64_t *lo, int64_t *hi)
{
    const pg_stage_desc *d = r->d;
    *lo = 0;
    *hi = p->numel;
    if (!r->zero)
        return p->opt_off[k] >= 0 ? (float *)(r->A + p->opt_off[k]) : NULL;
    size_t c = (size_t)r->replica * (size_t)d->nparams + (size_t)(p - d->params);
    *lo = r->zero->lo[c];
    *hi = r->zero->hi[c];
    if (r->zero->at[c] < 0 || p->opt_off[k] < 0)
        return NULL;
    return (float *)(r->A + d->opt_lo + r->zero->at[c] + (int64_t)k * part_bytes(*hi - *lo));
}

/* Replica q's state k of parameter p: its part [lo, hi) (NULL: none). */
static const float *state_of(pg_run *r, int q, const pg_param_desc *p, int k, int64_t *lo, int64_t *hi)
{
    const pg_stage_desc *d = r->d;
    struct pg_zero *z = r->zero;
    size_t c = (size_t)q * (size_t)d->nparams + (size_t)(p - d->params);
    *lo = z->lo[c];
    *hi = z->hi[c];
    if (z->at[c] < 0)
        return NULL;
    const unsigned char *base = q == r->replica ? r->A + d->opt_lo : z->ck[q];
    return base ? (const float *)(base + z->at[c] + (int64_t)k * part_bytes(*hi - *lo)) : NULL;
}

int pg_zero_state_get(pg_run *r, const pg_param_desc *p, int k, float *dst)
{
    if (!r->zero)
        return pg_copy_to_host(r->ctx, dst, r->A + p->opt_off[k], (size_t)p->numel * 4);
    for (int q = 0; q < r->replicas; q++) {
        int64_t lo, hi;
        const float *s = state_of(r, q, p, k, &lo, &hi);
        if (hi > lo && !s)
            return fprintf(stderr, "stage %d: the optimizer state of replica %d was not gathered\n", r->d->stage, q), 1;
        if (hi > lo)
            memcpy(dst + lo, s, (size_t)(hi - lo) * 4);
    }
    return 0;
}

int pg_zero_state_put(pg_run *r, const pg_param_desc *p, int k, const float *src)
{
    int64_t lo, hi;
    float *s = pg_zero_state(r, p, k, &lo, &hi);
    return s && hi > lo ? pg_copy_to_dev(r->ctx, s, src + lo, (size_t)(hi - lo) * 4) : 0;
}

/* Replica q's updated weights: each parameter's part in messages of at most
 * ZERO_CHUNK floats, lent (send) or received into place. */
static int weights_xfer(pg_run *r, int q, int owner, int sending, uint64_t *seq)
{
    const pg_stage_desc *d = r->d;
    struct pg_zero *z = r->zero;
    for (int i = 0; i < d->nparams; i++) {
        size_t c = (size_t)owner * (size_t)d->nparams + (size_t)i;
        float *w = (float *)(r->A + d->params[i].off);
        for (int64_t e = z->lo[c]; e < z->hi[c]; e += ZERO_CHUNK) {
            size_t b = (size_t)((z->hi[c] - e < ZERO_CHUNK ? z->hi[c] - e : ZERO_CHUNK) * 4);
            pg_net_status st = sending ? pg_net_send_rank_lent(r->net, pg_dp_rank(r, q), TAG_WEIGHTS, w + e, b, seq)
                                       : pg_net_recv_rank(r->net, pg_dp_rank(r, q), TAG_WEIGHTS, w + e, b, r->opt.timeout_s);
            if (st)
                return pg_dp_xfer_fail(r, "updated weights", q, sending, st);
        }
        /* received into place: the CPU's packed GEMM copies of it are behind (runtime/cpu/wpack.c) */
        if (!sending && z->hi[c] > z->lo[c] && pg_param_written(r->ctx, w + z->lo[c], z->hi[c] - z->lo[c]))
            return 1;
    }
    return 0;
}

int pg_zero_allgather(pg_run *r)
{
    struct pg_zero *z = r->zero;
    if (!z)
        return 0;
    int D = r->replicas, me = r->replica;
    uint64_t *seq = calloc((size_t)D, sizeof *seq);
    if (!seq) {
        fprintf(stderr, "stage %d: out of memory\n", r->d->stage);
        return 1;
    }
    int rc = 0;
    for (int q = 0; q < D && !rc; q++) /* this shard out to every other replica, lent from the arena */
        rc = q != me && weights_xfer(r, q, me, 1, &seq[q]);
    for (int q = 0; q < D && !rc; q++) /* the other shards into place */
        rc = q != me && weights_xfer(r, q, q, 0, NULL);
    for (int q = 0; q < D && !rc; q++) { /* the next step's forward may not change a lent weight before it is out */
        pg_net_status st = q == me ? PG_NET_OK : pg_net_wait_lent(r->net, pg_dp_rank(r, q), seq[q], r->opt.timeout_s);
        if (st)
            rc = pg_dp_xfer_fail(r, "updated weights", q, 1, st);
    }
    free(seq);
    return rc;
}

int pg_zero_ckpt_gather(pg_run *r)
{
    struct pg_zero *z = r->zero;
    if (!z)
        return 0;
    int me = r->replica;
    const unsigned char *mine = r->A + r->d->opt_lo;
    pg_net_status st;
    if (me != 0) {
        uint64_t seq = 0;
        if ((st = pg_net_send_rank_lent(r->net, pg_dp_rank(r, 0), TAG_STATE, mine, (size_t)z->bytes[me], &seq)) ||
            (st = pg_net_wait_lent(r->net, pg_dp_rank(r, 0), seq, r->opt.timeout_s)))
            return pg_dp_xfer_fail(r, "the optimizer state for a checkpoint", 0, 1, st);
        return 0;
    }
    for (int q = 1; q < r->replicas; q++) {
        if (!(z->ck[q] = malloc(z->bytes[q] ? (size_t)z->bytes[q] : 1))) {
            fprintf(stderr, "stage %d: out of memory for replica %d's optimizer state (%" PRId64 " bytes)\n",
                    r->d->stage, q, z->bytes[q]);
            return 1;
        }
        if ((st = pg_net_recv_rank(r->net, pg_dp_rank(r, q), TAG_STATE, z->ck[q], (size_t)z->bytes[q], r->opt.timeout_s)))
            return pg_dp_xfer_fail(r, "the optimizer state for a checkpoint", q, 0, st);
    }
    return 0;
}

void pg_zero_ckpt_done(pg_run *r)
{
    for (int q = 0; r->zero && q < r->replicas; q++) {
        free(r->zero->ck[q]);
        r->zero->ck[q] = NULL;
    }
}

void pg_zero_report(const pg_run *r)
{
    const struct pg_zero *z = r->zero;
    if (!z)
        return;
    int D = r->replicas;
    size_t grads = 0;
    for (int i = 0; i < r->d->nparams; i++)
        if (pg_param_stepped(r->d, &r->d->params[i]))
            grads += (size_t)r->d->params[i].numel * 4;
    printf("stage %d: --zero 1: optimizer state %" PRId64 " bytes on this process of %" PRId64 " without --zero "
           "(arena %" PRId64 " of %" PRId64 " bytes); the updated weights all-gathered: %zu bytes sent per step (in "
           "all 3 (D-1)/D of the %zu gradient bytes instead of 2 (D-1)/D, D = %d)\n", r->d->stage,
           z->bytes[r->replica], r->d->opt_bytes, pg_zero_arena_bytes(r), r->d->arena_bytes, z->sent, grads, D);
}

void pg_zero_free(pg_run *r)
{
    struct pg_zero *z = r->zero;
    if (!z)
        return;
    pg_zero_ckpt_done(r);
    free(z->lo);
    free(z->hi);
    free(z->at);
    free(z->bytes);
    free(z->ck);
    free(z);
    r->zero = NULL;
}

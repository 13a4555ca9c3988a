/* runtime/core/dp.c — data-parallel replicas of the pipeline (pp x dp).
 *
 * A run of P stages and D replicas is P x D processes of the same P stage
 * binaries, rank = replica x P + stage. Replica q trains on rows
 * [q B/D, (q+1) B/D) of every step's global batch B, split into its nmb
 * micro-batches as the .pipe splits the batch; the rows keep their global
 * index (inputs, targets, dropout masks), so a loss divided by B (mean) is the
 * whole batch's.
 *
 * After a stage's last backward of a step (its gradient folds and tie
 * reductions done), every gradient it trains is summed over the D copies of
 * the stage: the stage's gradients, concatenated in parameter order, are cut
 * into D contiguous shards; replica q receives shard q from every other
 * replica and sums it as replica 0 + 1 + ... + D-1 for every element (the
 * order never depends on which message came first), then sends the sum to
 * every other replica (reduce-scatter + all-gather: each process sends
 * 2 (D-1)/D of its gradient bytes). The verdict, the grad-norm clip and the
 * optimizer then see the same gradients on every replica, so the replicas
 * stay bitwise identical. Deferred batch norm's sums are summed the same way
 * (pg_dp_stats, through the backend's stats hook) before the running
 * statistics are updated.
 *
 * On a backend whose arena is device memory (CUDA) the same reduction runs on
 * a host copy: the gradients are copied out of the arena before it and back
 * after it (`host` below), so the sums are the CPU's, bit for bit, whether the
 * replicas share one GPU or not. NCCL per stage group is not used yet. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_ops.h"
#include "stage_run.h"

#define DP_TIMES 4096 /* reductions timed for pg_dp_report */
#define PG_TAG_DP 24u /* kind of the replica messages: x 0 shard in, 1 shard summed, 2 loss, 3 batch-norm sums, 4 start word */
/* Messages carry at most DP_CHUNK floats: the sum of one chunk overlaps the
 * arrival of the next, and the summed chunk leaves at once (both sides cut
 * a shard at the same places: every DP_CHUNK from its start, and at the
 * parameters' ends). */
#define DP_CHUNK ((int64_t)1 << 16)

struct pg_dp {
    int n;                 /* parameters reduced */
    int *param;            /* [n] index into d->params */
    int64_t numel;         /* their elements in all */
    float *in;             /* [(D-1) * shard_max] the other replicas' copies of this replica's shard */
    int64_t shard_max;
    double *stats;         /* [D * 2 * stats_max] batch-norm sums of every replica */
    int64_t stats_max;
    float *host;           /* [numel] the gradients in host memory when the arena is the GPU's (NULL: the arena) */
    size_t sent;           /* gradient bytes one reduction sends */
    double red_t[DP_TIMES]; /* the reduction's time in steps 2.. (the first DP_TIMES of them: pg_dp_report) */
    int64_t red_steps;
};

static int64_t shard_lo(int64_t n, int D, int q) { return n * q / D; }

int pg_dp_layout(pg_run *r, pg_launch *l)
{
    const pg_stage_desc *d = r->d;
    int P = d->nstages;
    const char *src = l->source ? l->source : "environment";
    if (l->world % P) {
        fprintf(stderr, "stage %d of model %s (%d stages) was started as rank %d of %d (%s): the world must be "
                "%d x D processes, D data-parallel replicas of the %d stages (rank = replica x %d + stage)\n",
                d->stage, d->model, P, l->rank, l->world, src, P, P, P);
        return 1;
    }
    int D = l->world / P;
    if (r->opt.dp && r->opt.dp != D) {
        fprintf(stderr, "stage %d: --dp %" PRId64 " but the world of %d processes (%s) holds %d replica%s of the %d "
                "stages: start %" PRId64 " processes for --dp %" PRId64 "\n", d->stage, r->opt.dp, l->world, src, D,
                D == 1 ? "" : "s", P, r->opt.dp * P, r->opt.dp);
        return 1;
    }
    if (l->rank % P != d->stage) {
        fprintf(stderr, "stage %d of model %s (%d stages) was started as rank %d of %d (%s): rank = replica x %d + "
                "stage, so stage %d runs as rank %d", d->stage, d->model, P, l->rank, l->world, src, P, d->stage,
                d->stage);
        for (int q = 1; q < D && q < 4; q++)
            fprintf(stderr, ", %d", q * P + d->stage);
        fprintf(stderr, "%s\n", D > 4 ? ", ..." : "");
        return 1;
    }
    int64_t B = d->train.batch;
    if (B % D) {
        fprintf(stderr, "stage %d: %d replicas do not divide the batch of %" PRId64 " rows (train.batch of %s): "
                "choose a replica count that divides it\n", d->stage, D, B, d->source);
        return 1;
    }
    if (B / D < d->nmb) {
        fprintf(stderr, "stage %d: %d replicas leave %" PRId64 " rows each, fewer than the %d micro-batches of %s: "
                "use at most %" PRId64 " replicas or fewer micro-batches\n", d->stage, D, B / D, d->nmb, d->source,
                B / d->nmb);
        return 1;
    }
    if (D > 1 && r->opt.generate) {
        fprintf(stderr, "stage %d: --generate runs with one replica only (%d were started): generate from the "
                "weights it saved (--save, then --load with one replica)\n", d->stage, D);
        return 1;
    }
    l->replica = l->rank / P;
    l->replicas = D;
    r->replica = l->replica;
    r->replicas = D;
    r->rows = B / D;
    r->row0 = (int64_t)r->replica * r->rows;
    r->mb_rows = malloc((size_t)d->nmb * sizeof *r->mb_rows);
    r->mb_first = malloc((size_t)d->nmb * sizeof *r->mb_first);
    if (!r->mb_rows || !r->mb_first) {
        fprintf(stderr, "stage %d: out of memory\n", d->stage);
        return 1;
    }
    int64_t row = r->row0; /* the split of the .pipe (codegen): the first rows mod nmb get one more */
    for (int i = 0; i < d->nmb; i++) {
        r->mb_rows[i] = r->rows / d->nmb + (i < r->rows % d->nmb);
        r->mb_first[i] = row;
        row += r->mb_rows[i];
    }
    return 0;
}

/* Does this stage reduce parameter p? Everything it trains; a transmitted
 * tie's copy on a user is not stepped (its owner reduces the summed one). */
static int reduced(const pg_stage_desc *d, const pg_param_desc *p)
{
    return !p->is_buffer && p->grad_off >= 0 && !(p->tie == 2 && p->owner != d->stage);
}

static int64_t grad_numel(const pg_stage_desc *d)
{
    int64_t n = 0;
    for (int i = 0; i < d->nparams; i++)
        if (reduced(d, &d->params[i]))
            n += d->params[i].numel;
    return n;
}

/* Batch-norm sums: 2 x C doubles per deferred batch norm, C at most the
 * largest buffer (its running mean). */
static int64_t stats_max(const pg_stage_desc *d)
{
    int64_t m = 0;
    for (int i = 0; i < d->nparams; i++)
        if (d->params[i].is_buffer && d->params[i].numel > m)
            m = d->params[i].numel;
    return m;
}

size_t pg_dp_link_bytes(const pg_run *r)
{
    const pg_stage_desc *d = r->d;
    int64_t n = grad_numel(d), shard = (n + r->replicas - 1) / r->replicas, bufs = 0;
    for (int i = 0; i < d->nparams; i++)
        if (d->params[i].is_buffer)
            bufs += d->params[i].numel;
    /* two shards, every batch norm's sums (2 C doubles for 2 C buffer floats), the
     * loss, the start word and the headers: a message per chunk and per parameter end */
    int64_t msgs = 2 * (shard / DP_CHUNK + d->nparams + 2) + d->nparams + 8;
    return (size_t)(2 * shard * 4 + bufs * 8 + msgs * 16 + 4096);
}

static int dp_stats(void *arg, double *sum, double *sumsq, int64_t C);

int pg_dp_init(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    int D = r->replicas;
    if (D <= 1)
        return 0;
    struct pg_dp *p = calloc(1, sizeof *p);
    if (!p) {
        fprintf(stderr, "stage %d: out of memory\n", d->stage);
        return 1;
    }
    r->dp = p;
    p->param = malloc((size_t)(d->nparams ? d->nparams : 1) * sizeof *p->param);
    for (int i = 0; p->param && i < d->nparams; i++)
        if (reduced(d, &d->params[i]))
            p->param[p->n++] = i;
    p->numel = grad_numel(d);
    p->shard_max = (p->numel + D - 1) / D + 1;
    p->stats_max = stats_max(d);
    p->in = malloc((size_t)(D - 1) * (size_t)p->shard_max * 4);
    p->stats = malloc((size_t)D * 2 * (size_t)(p->stats_max ? p->stats_max : 1) * sizeof(double));
    /* the arena is device memory; PIPE_DP_STAGED=1 takes the same path on the
     * CPU, so that tests/ppdp_staged.t checks it where no GPU is */
    const char *force = getenv("PIPE_DP_STAGED");
    int staged = strcmp(pg_backend_name(), "cpu") != 0 || (force && !strcmp(force, "1"));
    if (staged)
        p->host = malloc((size_t)(p->numel ? p->numel : 1) * 4);
    if (!p->param || !p->in || !p->stats || (staged && !p->host)) {
        fprintf(stderr, "stage %d: out of memory for the replicas' gradient reduction (%" PRId64 " floats)\n", d->stage,
                p->numel);
        return 1;
    }
    if (staged && r->replica == 0)
        printf("stage %d: gradient reduction over %d replicas: through host memory over TCP (the %s arena staged, "
               "summed in replica order as on the CPU; NCCL is not used for it yet)\n", d->stage, D, pg_backend_name());
    return pg_backend_set_stats_reduce(r->ctx, dp_stats, r);
}

void pg_dp_free(pg_run *r)
{
    struct pg_dp *p = r->dp;
    if (!p)
        return;
    free(p->param);
    free(p->in);
    free(p->stats);
    free(p->host);
    free(p);
    r->dp = NULL;
}

static int rank_of(const pg_run *r, int q) { return q * r->d->nstages + r->d->stage; }

static int dp_fail(const pg_run *r, const char *what, int q, int sending)
{
    fprintf(stderr, "stage %d of replica %d: %s %s %s stage %d of replica %d failed: %s\n", r->d->stage, r->replica,
            sending ? "sending" : "receiving", what, sending ? "to" : "from", r->d->stage, q, pg_net_error(r->net));
    return 1;
}

/* Every replica's n doubles of `mine` gathered into all[D][n], in replica order. */
static int allgather_f64(pg_run *r, uint32_t tag, const double *mine, double *all, int64_t n, const char *what)
{
    int D = r->replicas, me = r->replica;
    size_t bytes = (size_t)n * sizeof(double);
    for (int q = 0; q < D; q++)
        if (q != me && pg_net_send_rank(r->net, rank_of(r, q), tag, mine, bytes))
            return dp_fail(r, what, q, 1);
    if (all + (int64_t)me * n != mine)
        memcpy(all + (int64_t)me * n, mine, bytes);
    for (int q = 0; q < D; q++)
        if (q != me && pg_net_recv_rank(r->net, rank_of(r, q), tag, all + (int64_t)q * n, bytes, r->opt.timeout_s))
            return dp_fail(r, what, q, 0);
    return 0;
}

/* The backend's stats hook (deferred batch norm, before its running update):
 * sum and sumsq [C] become those of the whole global batch. */
static int dp_stats(void *arg, double *sum, double *sumsq, int64_t C)
{
    pg_run *r = arg;
    struct pg_dp *p = r->dp;
    int D = r->replicas;
    if (C > p->stats_max) {
        fprintf(stderr, "stage %d: batch-norm sums of %" PRId64 " features, more than the %" PRId64 " planned\n",
                r->d->stage, C, p->stats_max);
        return 1;
    }
    double *mine = p->stats + (int64_t)r->replica * 2 * C; /* this replica's [sum | sumsq], in its own row */
    memcpy(mine, sum, (size_t)C * sizeof(double));
    memcpy(mine + C, sumsq, (size_t)C * sizeof(double));
    if (allgather_f64(r, PG_TAG(PG_TAG_DP, 0, 3), mine, p->stats, 2 * C, "the batch-norm sums"))
        return 1;
    for (int64_t j = 0; j < 2 * C; j++) {
        double v = p->stats[j];
        for (int q = 1; q < D; q++)
            v += p->stats[(int64_t)q * 2 * C + j];
        (j < C ? sum : sumsq)[j < C ? j : j - C] = v;
    }
    return 0;
}

/* The stage's gradients as one vector of numel floats, in parameter order:
 * fn(arg, piece, count, at) for each stretch of [lo, hi) inside one
 * parameter's gradient (in the arena, or in the host copy `host` when the
 * arena is device memory), `at` its index in the vector. 0, or the first
 * nonzero fn. */
static int each_piece(pg_run *r, int64_t lo, int64_t hi, int (*fn)(pg_run *, float *, int64_t, int64_t, void *),
                      void *arg)
{
    const struct pg_dp *p = r->dp;
    int64_t at = 0;
    for (int k = 0; k < p->n && at < hi; k++) {
        const pg_param_desc *q = &r->d->params[p->param[k]];
        int64_t a = lo > at ? lo : at, b = hi < at + q->numel ? hi : at + q->numel;
        float *g = p->host ? p->host + at : (float *)(r->A + q->grad_off);
        int rc = a < b ? fn(r, g + (a - at), b - a, a, arg) : 0;
        if (rc)
            return rc;
        at += q->numel;
    }
    return 0;
}


static int each_chunk(pg_run *r, int64_t lo, int64_t hi, int (*fn)(pg_run *, float *, int64_t, int64_t, void *),
                      void *arg)
{
    for (int64_t c = lo; c < hi; c += DP_CHUNK) {
        int rc = each_piece(r, c, hi - c < DP_CHUNK ? hi : c + DP_CHUNK, fn, arg);
        if (rc)
            return rc;
    }
    return 0;
}

typedef struct xfer {
    int q;          /* the other replica */
    uint32_t tag;
    float *buf;     /* receive into buf[at - base] instead of the piece (NULL: the piece) */
    int64_t base;
} xfer;

static int send_piece(pg_run *r, float *piece, int64_t n, int64_t at, void *arg)
{
    const xfer *x = arg;
    (void)at;
    return pg_net_send_rank(r->net, rank_of(r, x->q), x->tag, piece, (size_t)n * 4) ? 1 : 0;
}

static int recv_piece(pg_run *r, float *piece, int64_t n, int64_t at, void *arg)
{
    const xfer *x = arg;
    float *dst = x->buf ? x->buf + (at - x->base) : piece;
    return pg_net_recv_rank(r->net, rank_of(r, x->q), x->tag, dst, (size_t)n * 4, r->opt.timeout_s) ? 1 : 0;
}

/* a[e] += b[e]: one addition per element, so vectorising it changes no bit */
static void add_into(float *restrict a, const float *restrict b, int64_t n)
{
    for (int64_t e = 0; e < n; e++)
        a[e] += b[e];
}

/* g = x_0 + x_1 + ... + x_{D-1} for each element of the piece, in replica
 * order, x_me being the piece itself and the others the received copies
 * (replica 0's copy accumulates when it is not this replica's) */
static int sum_piece(pg_run *r, float *g, int64_t n, int64_t at, void *arg)
{
    const struct pg_dp *p = r->dp;
    int64_t base = *(const int64_t *)arg;
    int D = r->replicas, me = r->replica;
    float *in = p->in + (at - base), *acc = me == 0 ? g : in; /* x_0 */
    for (int q = 1; q < D; q++)
        add_into(acc, q == me ? g : in + (int64_t)(q < me ? q : q - 1) * p->shard_max, n);
    if (acc != g)
        memcpy(g, acc, (size_t)n * 4);
    return 0;
}

/* The arena's gradients to the host copy (to_host) or back; nothing when the
 * arena is host memory. */
static int stage_grads(pg_run *r, int to_host)
{
    const struct pg_dp *p = r->dp;
    int64_t at = 0;
    for (int k = 0; p->host && k < p->n; k++) {
        const pg_param_desc *q = &r->d->params[p->param[k]];
        unsigned char *g = r->A + q->grad_off;
        if (to_host ? pg_copy_to_host(r->ctx, p->host + at, g, (size_t)q->numel * 4)
                    : pg_copy_to_dev(r->ctx, g, p->host + at, (size_t)q->numel * 4)) {
            fprintf(stderr, "stage %d of replica %d: copying the gradients %s the GPU for the replicas' sum failed\n",
                    r->d->stage, r->replica, to_host ? "from" : "to");
            return 1;
        }
        at += q->numel;
    }
    return 0;
}

int pg_dp_reduce(pg_run *r, int64_t step)
{
    const pg_stage_desc *d = r->d;
    double local = 0.0;
    for (int mb = 0; d->has_loss && mb < d->nmb; mb++)
        local += r->loss[mb];
    r->loss_global = local;
    struct pg_dp *p = r->dp;
    if (!p)
        return 0;
    int D = r->replicas, me = r->replica;
    /* every copy of this stage is here: a word each way first, so that the
     * time measured below is the reduction's, not the replicas' skew */
    double word = 0.0, *words = p->stats; /* D doubles */
    if (allgather_f64(r, PG_TAG(PG_TAG_DP, 0, 4), &word, words, 1, "the start word") || pg_sync(r->ctx))
        return 1;
    double t0 = pg_run_now();
    if (stage_grads(r, 1))
        return 1;
    int64_t n = p->numel, lo = shard_lo(n, D, me), hi = shard_lo(n, D, me + 1);
    /* reduce-scatter: shard q of this replica's gradients to replica q (the
     * send rings hold a step's traffic: pg_dp_link_bytes) */
    for (int q = 0; q < D; q++) {
        xfer x = {q, PG_TAG(PG_TAG_DP, 0, 0), NULL, 0};
        if (q != me && each_chunk(r, shard_lo(n, D, q), shard_lo(n, D, q + 1), send_piece, &x))
            return dp_fail(r, "a gradient shard", q, 1);
    }
    /* chunk by chunk: every other replica's copy, the sum in replica order
     * 0 + 1 + ... + D-1 (whatever arrived first), and the summed chunk out
     * to every other replica (the all-gather) */
    for (int64_t c = lo; c < hi; c += DP_CHUNK) {
        int64_t ce = hi - c < DP_CHUNK ? hi : c + DP_CHUNK;
        for (int q = 0, slot = 0; q < D; q++) {
            if (q == me)
                continue;
            xfer x = {q, PG_TAG(PG_TAG_DP, 0, 0), p->in + (int64_t)slot++ * p->shard_max, lo};
            if (each_piece(r, c, ce, recv_piece, &x))
                return dp_fail(r, "a gradient shard", q, 0);
        }
        each_piece(r, c, ce, sum_piece, &lo);
        for (int q = 0; q < D; q++) {
            xfer x = {q, PG_TAG(PG_TAG_DP, 0, 1), NULL, 0};
            if (q != me && each_piece(r, c, ce, send_piece, &x))
                return dp_fail(r, "a summed gradient shard", q, 1);
        }
    }
    for (int q = 0; q < D; q++) { /* the other replicas' summed shards, into place */
        xfer x = {q, PG_TAG(PG_TAG_DP, 0, 1), NULL, 0};
        if (q != me && each_chunk(r, shard_lo(n, D, q), shard_lo(n, D, q + 1), recv_piece, &x))
            return dp_fail(r, "a summed gradient shard", q, 0);
    }
    if (stage_grads(r, 0))
        return 1;
    p->sent = (size_t)(n - (hi - lo)) * 4 + (size_t)(D - 1) * (size_t)(hi - lo) * 4;
    if (step > 0 && p->red_steps < DP_TIMES)
        p->red_t[p->red_steps++] = pg_run_now() - t0;
    if (d->has_loss) { /* the loss of the whole batch: the replicas' sums, in replica order */
        double *dst = p->stats; /* D doubles (it holds D x 2 x max(C, 1)); the batch-norm sums are done by now */
        if (allgather_f64(r, PG_TAG(PG_TAG_DP, 0, 2), &local, dst, 1, "the loss"))
            return 1;
        double g = dst[0];
        for (int q = 1; q < D; q++)
            g += dst[q];
        r->loss_global = g;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void pg_dp_report(pg_run *r)
{
    struct pg_dp *p = r->dp;
    if (!p || !p->red_steps)
        return;
    qsort(p->red_t, (size_t)p->red_steps, sizeof p->red_t[0], cmp_double);
    double med = p->red_t[p->red_steps / 2];
    if (!(med > 0))
        return;
    printf("stage %d: gradient reduction over %d replicas: %zu bytes sent per step in %.3f ms (%.1f MiB/s, median "
           "of steps 2..%" PRId64 ")\n", r->d->stage, r->replicas, p->sent, med * 1e3, (double)p->sent / med / 1048576.0,
           p->red_steps + 1);
}

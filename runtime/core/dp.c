/* runtime/core/dp.c — data-parallel replicas of the pipeline (pp x dp).
 *
 * A run of P stages and D replicas is P x D processes of the same P stage
 * binaries, rank = replica x P + stage. Replica q trains on rows
 * [q B/D, (q+1) B/D) of every step's global batch B, split into its nmb
 * micro-batches as the .pipe splits the batch; the rows keep their global
 * index (inputs, targets, dropout masks), so a loss divided by B (mean) is the
 * whole batch's.
 *
 * Every gradient a stage trains is summed over the D copies of the stage (but
 * a replicated tie's copy on a user: its owner's sum, summed over the
 * replicas already, comes to it in TIE_SUM_RECV; pg_param_reduced):
 * the gradients, concatenated in parameter order, are cut into D contiguous
 * shards; replica q receives shard q from every other replica and sums it as
 * replica 0 + 1 + ... + D-1 for every element (the order never depends on
 * which message came first), then sends the sum to every other replica
 * (reduce-scatter + all-gather: each process sends 2 (D-1)/D of its gradient
 * bytes). This runs in buckets: a layer's gradients are final once the
 * step's last micro-batch has run its weight-gradient code (the generated
 * bwd_w then calls PG_GRADS_FINAL), so consecutive layers in the order the
 * backward finishes them, at least PIPE_DP_BUCKET_BYTES a bucket, are
 * reduced by a reducer thread while the backward goes on (an element's sum
 * is the same whatever its bucket: plan_buckets); the rest when the verdict
 * needs them. The main thread writes no gradient of a posted bucket again
 * this step, and pg_dp_reduce waits for every bucket (and its lent sends)
 * before the verdict, the clip and the optimizer read or write any. Every gradient
 * byte leaves as a lent send from where it lies (no copy into the link's
 * ring), the other replicas' copies of a chunk arrive in a chunk buffer, and
 * the chunk's sum is one pass that writes it in place. The verdict, the
 * grad-norm clip and the optimizer then see the same gradients on every
 * replica, so the replicas
 * stay bitwise identical. Deferred batch norm's sums are summed the same way
 * (pg_dp_stats, through the backend's stats hook) before the running
 * statistics are updated.
 *
 * On a backend whose arena is device memory (CUDA) the reduction runs in one
 * bucket after the backward (no early buckets: the reducer thread does not
 * touch the device), on the device when the backend can (pg_dp_dev.h: NCCL,
 * one communicator per stage group, the same shards and the same sums in
 * replica order, runtime/cuda/dp_nccl.cu), else on a host copy: the
 * gradients are copied out of the arena before it and back after it (`host`
 * below). The sums are the CPU's, bit for bit, either way; the host path is
 * taken when two replicas share a GPU (NCCL refuses that), or with
 * PIPE_DP_NCCL=0, and replica 0 says at start-up which path runs and why. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg_limits.h"
#include "dp_bytes.h"
#include "pg_dp_dev.h"
#include "pg_ops.h"
#include "stage_run.h"

#define DP_TIMES 4096 /* reductions timed for pg_dp_report */
/* Messages carry at most DP_CHUNK floats: the sum of one chunk overlaps the
 * arrival of the next, and the summed chunk leaves at once (both sides cut
 * a shard at the same places: every DP_CHUNK from its start, and at the
 * parameters' ends). */
#define DP_CHUNK PG_DP_CHUNK /* dp_bytes.h: the buffers' sizes follow from it */
/* An early bucket's least size where the host has a spare core
 * (PIPE_DP_BUCKET_BYTES overrides it: bucket_bytes). Each bucket costs a wake
 * of the reducer thread, a few more message headers and a wait for the
 * slowest replica's copy; at loopback TCP's 1.5-3 GiB/s, 1 MiB takes 0.3-0.7
 * ms to reduce, well above that fixed cost (tens of us), while the quickstart
 * MLP's 1-2 MiB layers and gpt_char's blocks still get a bucket each.
 * (PyTorch DDP's 25 MiB suits NCCL at tens of GB/s.) */
#define DP_BUCKET_BYTES ((int64_t)1 << 20)

/* The gradients reduced together: the parameters of consecutive layers in
 * the order their gradients become final (an early bucket, reduced by the
 * reducer thread while the stage's backward goes on: plan_buckets), or the
 * rest (the last bucket, reduced when the step's verdict needs them). */
typedef struct dp_bucket {
    int n;                 /* parameters */
    int *param;            /* [n] indices into d->params, in parameter order */
    int64_t numel;         /* their elements in all */
    int after;             /* early: the BWD_W action in which it becomes final; -1: the last bucket */
    int layer;             /* early: its last layer (PG_GRADS_FINAL(io, layer) in that action) */
} dp_bucket;

struct pg_dp {
    int nb;                /* buckets: nb - 1 early ones in the order they start, then the last */
    dp_bucket *b;
    float *in;             /* [(D-1) * DP_CHUNK] the other replicas' copies of one chunk of this replica's shard */
    const float **x;       /* [D] the sum's sources, in replica order */
    uint64_t *scattered, *last; /* [D] the last lent send to each replica: of the reduce-scatter, of either phase */
    double *stats;         /* [D * 2 * stats_max] batch-norm sums of every replica */
    int64_t stats_max;
    size_t sent;           /* gradient bytes the last bucket sends (after the backward) */
    size_t sent_early;     /* those the early buckets send (while it runs) */
    size_t held;           /* bytes of in, stats and host, or the device reduction's (dp_bytes.h; pg_dp_report prints it) */
    int staged;            /* the arena is device memory (or PIPE_DP_STAGED=1): one bucket, off the reducer thread */
    pg_dp_dev *dev;        /* staged: the backend reduces it on the device (NCCL), or NULL: */
    float *host;           /* staged: [the last bucket's numel] the gradients in host memory */
    double red_t[DP_TIMES]; /* the last bucket's time in steps 2.. (the first DP_TIMES of them: pg_dp_report) */
    int64_t red_steps;
    double wait_t[DP_TIMES]; /* steps 2..: from the backward's end (pg_dp_reduce) to every gradient summed */
    int64_t wait_steps;
    /* the reducer thread: reduces this step's early buckets in order, as the
     * main thread posts them (pg_dp_action_done); the buffers above are
     * shared, used by one thread at a time (the last bucket waits for it) */
    pthread_t thr;
    int thr_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int posted, done;      /* early buckets posted and reduced this step */
    int failed;            /* the reducer printed a failure: the step fails */
    atomic_int stop;       /* pg_dp_stop: leave at the next receive slice */
    int check_overlap;     /* PIPE_CHECK_OVERLAP=1: once the last early bucket is posted, wait for them all */
    int64_t overlapped;    /* steps whose early buckets were all reduced then, before the stage's backward
                            * ended (check_overlap) */
    int64_t bucket_bytes;  /* an early bucket's least size (PIPE_DP_BUCKET_BYTES; 0: none) */
    char bucket_why[96];   /* where bucket_bytes came from (pg_dp_report) */
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
    r->local_procs = l->local_world;
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

static int64_t grad_numel(const pg_stage_desc *d)
{
    int64_t n = 0;
    for (int i = 0; i < d->nparams; i++)
        if (pg_param_reduced(d, &d->params[i]))
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

/* This process's buffers and traffic (dp_bytes.h, shared with `pipegen plan`). */
static pg_dp_bytes dp_bytes(const pg_run *r)
{
    const pg_stage_desc *d = r->d;
    int64_t bufs = 0;
    for (int i = 0; i < d->nparams; i++)
        if (d->params[i].is_buffer)
            bufs += d->params[i].numel;
    return pg_dp_bytes_of(grad_numel(d), stats_max(d), bufs, d->nparams, r->replicas, r->replica);
}

size_t pg_dp_link_bytes(const pg_run *r) { return (size_t)dp_bytes(r).link; }

static int dp_stats(void *arg, double *sum, double *sumsq, int64_t C);

/* The moments a parameter's gradient becomes final, in the order they come:
 * layer l (of the stage's layer table) whose weight-gradient code alone
 * writes it (pg_param_desc.grad_layer, from pipegen) is done with it in the
 * step's last BWD_W action of its chunk, right after its code
 * (PG_GRADS_FINAL); a chunk's bwd_w runs its layers last to first. So the
 * layers sort by (that action, last layer first). A layer whose chunk has no
 * BWD_W on this stage, or an index out of range, never finishes early. */
typedef struct dp_event {
    int action, layer;
} dp_event;

static int cmp_event(const void *x, const void *y)
{
    const dp_event *a = x, *b = y;
    if (a->action != b->action)
        return (a->action > b->action) - (a->action < b->action);
    return (a->layer < b->layer) - (a->layer > b->layer); /* the later layer first */
}

/* The buckets: consecutive layers in the order their gradients become final,
 * gathered until a bucket holds at least min_bytes, each reduced by the
 * reducer thread from the moment its last layer is done; then the last
 * bucket: the layers after the last cut (the last layer to finish among
 * them when the stage's last backward action finishes it: nothing would be
 * left to overlap it) and every parameter no one layer finishes (used by
 * several layers, tied). Each element's sum is the same whatever its bucket.
 * min_bytes 0 or staged: the last bucket alone. 0, or -1 out of memory. */
static int plan_buckets(const pg_stage_desc *d, struct pg_dp *p, int64_t min_bytes)
{
    int nl = d->nlayers > 0 ? d->nlayers : 0, nc = d->nchunks > 0 ? d->nchunks : 1, ne = 0;
    int *lastw = malloc((size_t)nc * sizeof *lastw), *bucket_of = malloc((size_t)(nl ? nl : 1) * sizeof *bucket_of);
    int64_t *numel = calloc((size_t)(nl ? nl : 1), sizeof *numel);
    dp_event *ev = malloc((size_t)(nl ? nl : 1) * sizeof *ev);
    p->b = calloc((size_t)nl + 1, sizeof *p->b);
    int rc = -1;
    if (!lastw || !bucket_of || !numel || !ev || !p->b)
        goto out;
    for (int c = 0; c < nc; c++)
        lastw[c] = -1;
    int last_bwd = -1; /* the stage's last backward action */
    for (int a = 0; a < d->nactions; a++) {
        const pg_step_action *x = &d->actions[a];
        if ((x->kind == PG_BWD_W || x->kind == PG_BWD_B) && x->chunk >= 0 && x->chunk < nc) {
            last_bwd = a;
            if (x->kind == PG_BWD_W)
                lastw[x->chunk] = a;
        }
    }
    for (int i = 0; i < d->nparams; i++) { /* each layer's floats that it alone finishes */
        const pg_param_desc *q = &d->params[i];
        int l = q->grad_layer;
        if (pg_param_reduced(d, q) && l >= 0 && l < nl && d->layers[l].chunk >= 0 && d->layers[l].chunk < nc &&
            lastw[d->layers[l].chunk] >= 0)
            numel[l] += q->numel;
    }
    for (int l = 0; l < nl; l++) {
        bucket_of[l] = -1;
        if (numel[l])
            ev[ne++] = (dp_event){lastw[d->layers[l].chunk], l};
    }
    qsort(ev, (size_t)ne, sizeof *ev, cmp_event);
    int early = 0;
    int64_t acc = 0;
    /* the last layer to finish, when its action is the stage's last backward one,
     * has nothing left to overlap: never an early bucket's end (staged: no early
     * buckets, the reducer thread does not touch the device) */
    for (int e = 0; min_bytes > 0 && !p->staged && (e + 1 < ne || (e < ne && ev[e].action < last_bwd)); e++) {
        bucket_of[ev[e].layer] = early;
        acc += numel[ev[e].layer];
        if (acc * 4 >= min_bytes) {
            p->b[early].after = ev[e].action;
            p->b[early++].layer = ev[e].layer;
            acc = 0;
        }
    }
    for (int l = 0; l < nl; l++) /* the layers after the last cut: the last bucket */
        if (bucket_of[l] >= early)
            bucket_of[l] = -1;
    p->nb = early + 1;
    p->b[early].after = p->b[early].layer = -1;
    for (int k = 0; k < p->nb; k++)
        if (!(p->b[k].param = malloc((size_t)(d->nparams ? d->nparams : 1) * sizeof *p->b[k].param)))
            goto out;
    for (int i = 0; i < d->nparams; i++) { /* each bucket's parameters in table order */
        const pg_param_desc *q = &d->params[i];
        if (!pg_param_reduced(d, q))
            continue;
        int l = q->grad_layer, k = l >= 0 && l < nl && bucket_of[l] >= 0 ? bucket_of[l] : early;
        p->b[k].param[p->b[k].n++] = i;
        p->b[k].numel += q->numel;
    }
    rc = 0;
out:
    free(lastw);
    free(bucket_of);
    free(numel);
    free(ev);
    return rc;
}

static int reduce_bucket(pg_run *r, int k);

/* The reducer thread: this step's early buckets, in order, as they are posted. */
static void *reducer_main(void *arg)
{
    pg_run *r = arg;
    struct pg_dp *p = r->dp;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->done == p->posted && !atomic_load(&p->stop))
            pthread_cond_wait(&p->cv, &p->mu);
        if (atomic_load(&p->stop))
            break;
        int k = p->done, skip = p->failed;
        pthread_mutex_unlock(&p->mu);
        int rc = skip ? 0 : reduce_bucket(r, k);
        pthread_mutex_lock(&p->mu);
        p->failed |= rc;
        p->done++;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* The backend's device reduction of the last (staged: the only) bucket,
 * collective over the stage's replicas (pg_dp_dev.h): 1 up, 0 not used (why),
 * -1 failed (printed). PIPE_DP_NCCL=0 keeps the host path. */
static int dp_dev_init(pg_run *r, char *why, size_t whylen)
{
    const char *env = getenv("PIPE_DP_NCCL");
    const dp_bucket *bk = &r->dp->b[r->dp->nb - 1];
    pg_dp_dev_args a = {r->ctx, r->net, r->d->stage, r->d->nstages, r->replica, r->replicas,
                        PG_TAG(PG_TAG_DP, 0, 5), PG_TAG(PG_TAG_DP, 0, 6), r->opt.timeout_s,
                        !(env && !strcmp(env, "0")), r->A, r->d->params, bk->param, bk->n};
    return pg_dp_dev_init(&a, &r->dp->dev, why, whylen);
}

/* PIPE_DP_BUCKET_BYTES: an early bucket's least size in bytes (0: no early
 * buckets, the whole reduction after the backward). Unset or empty: the
 * early buckets' work (the sums, the kernel's socket copies) is CPU work too,
 * so it overlaps the backward only with a core that no compute thread of this
 * host's processes uses: DP_BUCKET_BYTES when the host has such a spare core,
 * else 0 (on 2 cores with 2 single-threaded replicas they only slowed the
 * step: bench/README.md). why says which. 0, or 1 after saying what is wrong
 * with the variable. */
static int bucket_bytes(const pg_run *r, int64_t *out, char *why, size_t whylen)
{
    const char *v = getenv("PIPE_DP_BUCKET_BYTES");
    if (!v || !*v) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int procs = r->local_procs > 0 ? r->local_procs : 1, threads = r->opt.threads > 0 ? r->opt.threads : 1;
        *out = cores > (long)procs * threads ? DP_BUCKET_BYTES : 0;
        snprintf(why, whylen, "PIPE_DP_BUCKET_BYTES unset: %ld cores, %d process%s x %d thread%s on this host", cores,
                 procs, procs == 1 ? "" : "es", threads, threads == 1 ? "" : "s");
        return 0;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*end || errno || x < 0) {
        fprintf(stderr, "stage %d: PIPE_DP_BUCKET_BYTES='%s': want a byte count >= 0 (0: sum the gradients over the "
                "replicas after the backward only)\n", r->d->stage, v);
        return 1;
    }
    *out = x;
    snprintf(why, whylen, "PIPE_DP_BUCKET_BYTES");
    return 0;
}

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
    p->x = malloc((size_t)D * sizeof *p->x);
    p->scattered = malloc((size_t)D * sizeof *p->scattered);
    p->last = malloc((size_t)D * sizeof *p->last);
    pg_dp_bytes b = dp_bytes(r);
    p->stats_max = stats_max(d);
    p->in = malloc((size_t)b.in);
    p->stats = malloc((size_t)b.stats);
    /* the arena is device memory; PIPE_DP_STAGED=1 takes the same path on the
     * CPU, so that tests/ppdp_staged.t checks it where no GPU is */
    const char *force = getenv("PIPE_DP_STAGED");
    p->staged = strcmp(pg_backend_name(), "cpu") != 0 || (force && !strcmp(force, "1"));
    char why[256] = "";
    int dev = 0; /* staged: the backend's device reduction (NCCL on CUDA) when every replica can take it */
    if (bucket_bytes(r, &p->bucket_bytes, p->bucket_why, sizeof p->bucket_why))
        return 1;
    if (plan_buckets(d, p, p->bucket_bytes) || !p->in || !p->stats || !p->x || !p->scattered || !p->last ||
        (p->staged && (dev = dp_dev_init(r, why, sizeof why)) == 0 &&
         !(p->host = malloc((size_t)(p->b[p->nb - 1].numel ? p->b[p->nb - 1].numel : 1) * 4)))) {
        fprintf(stderr, "stage %d: out of memory for the replicas' gradient reduction (%" PRId64 " floats)\n", d->stage,
                grad_numel(d));
        return 1;
    }
    if (dev < 0)
        return 1; /* printed */
    p->held = (size_t)(b.in + b.stats) + (p->host ? (size_t)p->b[p->nb - 1].numel * 4 : 0) + pg_dp_dev_bytes(p->dev);
    if (p->dev && r->replica == 0)
        printf("stage %d: gradient reduction over %d replicas: on the GPUs by NCCL (one communicator per stage group, "
               "grouped send/recv, summed in replica order as on the CPU; %zu bytes of device buffers)\n", d->stage, D,
               pg_dp_dev_bytes(p->dev));
    else if (p->staged && r->replica == 0)
        printf("stage %d: gradient reduction over %d replicas: through host memory over TCP (the %s arena staged, "
               "summed in replica order as on the CPU; not by NCCL: %s)\n", d->stage, D, pg_backend_name(), why);
    const char *co = getenv("PIPE_CHECK_OVERLAP");
    p->check_overlap = co && *co && strcmp(co, "0") != 0;
    if (p->nb > 1) {
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->cv, NULL);
        int pe = pthread_create(&p->thr, NULL, reducer_main, r);
        if (pe != 0) {
            char why[400];
            pthread_cond_destroy(&p->cv);
            pthread_mutex_destroy(&p->mu);
            fprintf(stderr, "stage %d: cannot start the thread of the replicas' gradient reduction: %s\n", d->stage,
                    pg_thread_start_why(pe, why, sizeof why));
            return 1;
        }
        p->thr_started = 1;
    }
    return pg_backend_set_stats_reduce(r->ctx, dp_stats, r);
}

void pg_dp_stop(pg_run *r)
{
    struct pg_dp *p = r->dp;
    if (p) { /* the device reduction goes with the network, before the backend */
        pg_dp_dev_free(p->dev);
        p->dev = NULL;
    }
    if (!p || !p->thr_started)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thr, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    p->thr_started = 0;
}

void pg_dp_free(pg_run *r)
{
    struct pg_dp *p = r->dp;
    if (!p)
        return;
    pg_dp_stop(r);
    for (int k = 0; p->b && k < p->nb; k++)
        free(p->b[k].param);
    free(p->b);
    free(p->in);
    free(p->x);
    free(p->scattered);
    free(p->last);
    free(p->stats);
    free(p->host);
    free(p);
    r->dp = NULL;
}

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
        if (q != me && pg_net_send_rank(r->net, pg_dp_rank(r, q), tag, mine, bytes))
            return dp_fail(r, what, q, 1);
    if (all + (int64_t)me * n != mine)
        memcpy(all + (int64_t)me * n, mine, bytes);
    for (int q = 0; q < D; q++)
        if (q != me && pg_net_recv_rank(r->net, pg_dp_rank(r, q), tag, all + (int64_t)q * n, bytes, r->opt.timeout_s))
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

/* A bucket's gradients as one vector of numel floats, in parameter order:
 * fn(arg, piece, count, at) for each stretch of [lo, hi) inside one
 * parameter's gradient (the arena's host memory: replicas run on the CPU
 * runtime only), `at` its index in the vector. 0, or the first nonzero fn. */
typedef int (*piece_fn)(pg_run *, float *, int64_t, int64_t, void *);

static int each_piece(pg_run *r, const dp_bucket *bk, int64_t lo, int64_t hi, piece_fn fn, void *arg)
{
    int64_t at = 0;
    for (int k = 0; k < bk->n && at < hi; k++) {
        const pg_param_desc *q = &r->d->params[bk->param[k]];
        int64_t a = lo > at ? lo : at, b = hi < at + q->numel ? hi : at + q->numel;
        float *g = r->dp->host ? r->dp->host + at : (float *)(r->A + q->grad_off); /* staged: the one bucket's copy */
        int rc = a < b ? fn(r, g + (a - at), b - a, a, arg) : 0;
        if (rc)
            return rc;
        at += q->numel;
    }
    return 0;
}

static int each_chunk(pg_run *r, const dp_bucket *bk, int64_t lo, int64_t hi, piece_fn fn, void *arg)
{
    for (int64_t c = lo; c < hi; c += DP_CHUNK) {
        int rc = each_piece(r, bk, c, hi - c < DP_CHUNK ? hi : c + DP_CHUNK, fn, arg);
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
    uint64_t seq;   /* lent sends: the number of the last one (pg_net_wait_lent) */
    pg_net_status st;
} xfer;

/* The piece goes out from where it lies: the link borrows it until
 * pg_net_wait_lent says it is written (no copy into the send ring). */
static int lend_piece(pg_run *r, float *piece, int64_t n, int64_t at, void *arg)
{
    xfer *x = arg;
    (void)at;
    x->st = pg_net_send_rank_lent(r->net, pg_dp_rank(r, x->q), x->tag, piece, (size_t)n * 4, &x->seq);
    return x->st != PG_NET_OK;
}

/* A receive (or, buf NULL, the wait for the lent sends up to seq) from
 * replica q, up to --timeout, in slices of at most half a second so that the
 * reducer thread leaves soon after pg_dp_stop (a receive that timed out
 * resumes where it stopped: pg_net.h). */
static pg_net_status dp_wait(pg_run *r, int q, uint32_t tag, void *buf, size_t bytes, uint64_t seq)
{
    double left = r->opt.timeout_s;
    for (;;) {
        double s = left < 0.5 ? left : 0.5;
        pg_net_status st = buf ? pg_net_recv_rank(r->net, pg_dp_rank(r, q), tag, buf, bytes, s)
                               : pg_net_wait_lent(r->net, pg_dp_rank(r, q), seq, s);
        left -= s;
        if (st != PG_NET_TIMEOUT || left <= 0 || atomic_load(&r->dp->stop))
            return st;
    }
}

static int recv_piece(pg_run *r, float *piece, int64_t n, int64_t at, void *arg)
{
    xfer *x = arg;
    float *dst = x->buf ? x->buf + (at - x->base) : piece;
    x->st = dp_wait(r, x->q, x->tag, dst, (size_t)n * 4, 0);
    return x->st != PG_NET_OK;
}

int pg_dp_xfer_fail(const pg_run *r, const char *what, int q, int sending, pg_net_status st)
{
    if (st == PG_NET_TIMEOUT) {
        fprintf(stderr, "stage %d of replica %d: %s %s %s stage %d of replica %d: nothing moved for %g s (--timeout)\n",
                r->d->stage, r->replica, sending ? "sending" : "receiving", what, sending ? "to" : "from", r->d->stage,
                q, r->opt.timeout_s);
        return 1;
    }
    return dp_fail(r, what, q, sending);
}

/* o[e] = a[e] + b[e]: one addition per element (o may be a or b), so
 * vectorising it changes no bit */
static void add2(float *o, const float *a, const float *b, int64_t n)
{
    for (int64_t e = 0; e < n; e++)
        o[e] = a[e] + b[e];
}

#define SUM_BLOCK 2048 /* floats summed at once in a block that stays in L1 */

/* g = x[0] + x[1] + ... + x[D-1] for each element, in replica order (one of
 * the x[q] may be g itself): one pass over the sources, one store. */
static void sum_replicas(float *g, const float *const *x, int D, int64_t n)
{
    if (D == 2) {
        add2(g, x[0], x[1], n);
        return;
    }
    float t[SUM_BLOCK];
    for (int64_t b = 0; b < n; b += SUM_BLOCK) {
        int64_t m = n - b < SUM_BLOCK ? n - b : SUM_BLOCK;
        add2(t, x[0] + b, x[1] + b, m);
        for (int q = 2; q < D; q++)
            add2(t, t, x[q] + b, m);
        memcpy(g + b, t, (size_t)m * 4);
    }
}

/* The piece summed over the replicas in place: x_me is the piece itself, the
 * others' copies were received into the chunk buffers (slot per replica, at
 * the piece's place in the chunk that starts at *arg). */
static int sum_piece(pg_run *r, float *g, int64_t n, int64_t at, void *arg)
{
    struct pg_dp *p = r->dp;
    int64_t c = *(const int64_t *)arg;
    int D = r->replicas, me = r->replica;
    for (int q = 0, slot = 0; q < D; q++)
        p->x[q] = q == me ? g : p->in + (int64_t)slot++ * DP_CHUNK + (at - c);
    sum_replicas(g, p->x, D, n);
    return 0;
}

/* Bucket k's gradients summed over the replicas: its vector cut into D
 * shards, shard q reduced by replica q. 0, or 1 after printing the failure. */
/* The arena's gradients to the host copy (to_host) or back; nothing when the
 * arena is host memory. Staged, the last bucket is the only one. */
static int stage_grads(pg_run *r, int to_host)
{
    const struct pg_dp *p = r->dp;
    const dp_bucket *bk = &p->b[p->nb - 1];
    int64_t at = 0;
    for (int k = 0; p->host && k < bk->n; k++) {
        const pg_param_desc *q = &r->d->params[bk->param[k]];
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

static int reduce_bucket(pg_run *r, int k)
{
    struct pg_dp *p = r->dp;
    const dp_bucket *bk = &p->b[k];
    int D = r->replicas, me = r->replica;
    int64_t n = bk->numel, lo = shard_lo(n, D, me), hi = shard_lo(n, D, me + 1);
    uint64_t *scattered = p->scattered, *last = p->last;
    uint32_t in_tag = PG_TAG(PG_TAG_DP, k, 0), sum_tag = PG_TAG(PG_TAG_DP, k, 1);
    /* reduce-scatter: shard q of this replica's gradients to replica q, lent
     * from the gradients themselves (nothing writes them before the
     * all-gather below brings shard q back) */
    for (int q = 0; q < D; q++) {
        xfer x = {q, in_tag, NULL, 0, 0, PG_NET_OK};
        if (q != me && each_chunk(r, bk, shard_lo(n, D, q), shard_lo(n, D, q + 1), lend_piece, &x))
            return pg_dp_xfer_fail(r, "a gradient shard", q, 1, x.st);
        scattered[q] = last[q] = x.seq;
    }
    int main_thread = k == p->nb - 1; /* the last bucket: the trace's spans (the reducer thread's buckets have none) */
    if (main_thread)
        r->dp_mark[2] = pg_run_now();
    /* chunk by chunk: every other replica's copy into the chunk buffers, the
     * sum in replica order 0 + 1 + ... + D-1 (whatever arrived first) into
     * place, and the summed chunk out to every other replica (the all-gather),
     * lent from where it lies (nothing writes it again in this step) */
    for (int64_t c = lo; c < hi; c += DP_CHUNK) {
        int64_t ce = hi - c < DP_CHUNK ? hi : c + DP_CHUNK;
        for (int q = 0, slot = 0; q < D; q++) {
            if (q == me)
                continue;
            xfer x = {q, in_tag, p->in + (int64_t)slot++ * DP_CHUNK, c, 0, PG_NET_OK};
            if (each_piece(r, bk, c, ce, recv_piece, &x))
                return pg_dp_xfer_fail(r, "a gradient shard", q, 0, x.st);
        }
        each_piece(r, bk, c, ce, sum_piece, &c);
        for (int q = 0; q < D; q++) {
            xfer x = {q, sum_tag, NULL, 0, last[q], PG_NET_OK};
            if (q != me && each_piece(r, bk, c, ce, lend_piece, &x))
                return pg_dp_xfer_fail(r, "a summed gradient shard", q, 1, x.st);
            last[q] = x.seq;
        }
    }
    if (main_thread)
        r->dp_mark[3] = pg_run_now();
    for (int q = 0; q < D; q++) { /* the other replicas' summed shards, into place once this one's copy is out */
        xfer x = {q, sum_tag, NULL, 0, 0, PG_NET_OK};
        if (q == me)
            continue;
        if ((x.st = dp_wait(r, q, 0, NULL, 0, scattered[q])))
            return pg_dp_xfer_fail(r, "a gradient shard", q, 1, x.st);
        if (each_chunk(r, bk, shard_lo(n, D, q), shard_lo(n, D, q + 1), recv_piece, &x))
            return pg_dp_xfer_fail(r, "a summed gradient shard", q, 0, x.st);
    }
    if (main_thread)
        r->dp_mark[4] = pg_run_now();
    for (int q = 0; q < D; q++) { /* the clip and the optimizer may write the gradients: every lent send is out */
        pg_net_status st = q == me ? PG_NET_OK : dp_wait(r, q, 0, NULL, 0, last[q]);
        if (st)
            return pg_dp_xfer_fail(r, "a summed gradient shard", q, 1, st);
    }
    return 0;
}

/* The bytes bucket k sends in one reduction: 2 (D-1)/D of its gradients. */
static size_t bucket_sent(const pg_run *r, int k)
{
    int64_t n = r->dp->b[k].numel, D = r->replicas, me = r->replica;
    int64_t mine = shard_lo(n, (int)D, (int)me + 1) - shard_lo(n, (int)D, (int)me);
    return (size_t)(n - mine) * 4 + (size_t)(D - 1) * (size_t)mine * 4;
}

/* Wait until the reducer thread has reduced every early bucket posted so
 * far (mu held). */
static void wait_reducer(struct pg_dp *p)
{
    while (p->done < p->posted)
        pthread_cond_wait(&p->cv, &p->mu);
}

/* Post the early buckets that are final at action a after the weight
 * gradients of layer l (l -1: the action's end, every bucket of a): the
 * reducer thread starts on them. PIPE_CHECK_OVERLAP=1: once the last is
 * posted (some backward work of the stage is still to come: plan_buckets),
 * wait until every one is reduced and count the step. */
static void post_buckets(pg_run *r, int a, int l)
{
    struct pg_dp *p = r->dp;
    pthread_mutex_lock(&p->mu);
    int posted = 0;
    while (p->posted < p->nb - 1 && p->b[p->posted].after == a && (l < 0 || p->b[p->posted].layer == l)) {
        p->posted++; /* all of its gradients are final */
        posted = 1;
    }
    if (posted)
        pthread_cond_broadcast(&p->cv);
    if (posted && p->check_overlap && p->posted == p->nb - 1) {
        wait_reducer(p);
        p->overlapped += !p->failed;
    }
    pthread_mutex_unlock(&p->mu);
}

/* PG_GRADS_FINAL's hook (pg_mb_io.grads_final): stage layer l's gradients are final. */
static void grads_final(void *arg, int l)
{
    pg_run *r = arg;
    post_buckets(r, r->cur_action, l);
}

void pg_dp_mb_io(pg_run *r, int a, pg_mb_io *io)
{
    struct pg_dp *p = r->dp;
    /* only the main thread writes posted: no lock needed to read it here */
    if (p && p->posted < p->nb - 1 && p->b[p->posted].after == a) {
        io->grads_final = grads_final;
        io->grads_final_arg = r;
    }
}

void pg_dp_action_end(pg_run *r, int a)
{
    struct pg_dp *p = r->dp;
    if (p && p->posted < p->nb - 1 && p->b[p->posted].after == a)
        post_buckets(r, a, -1); /* a bucket whose layer's hook did not run (a replayed action): final now */
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
    int D = r->replicas;
    r->dp_mark[0] = pg_run_now(); /* the trace's spans (trace.c): waiting, reduce-scatter, sum, all-gather */
    if (p->nb > 1) { /* the early buckets: every one posted (a step always runs its backward), then reduced */
        pthread_mutex_lock(&p->mu);
        p->posted = p->nb - 1;
        pthread_cond_broadcast(&p->cv);
        wait_reducer(p);
        int failed = p->failed;
        p->posted = p->done = 0;
        pthread_mutex_unlock(&p->mu);
        if (failed)
            return 1;
    }
    /* every copy of this stage is here: a word each way first, so that the
     * time measured below is the reduction's, not the replicas' skew */
    double word = 0.0, *words = p->stats; /* D doubles */
    if (allgather_f64(r, PG_TAG(PG_TAG_DP, 0, 4), &word, words, 1, "the start word") || pg_sync(r->ctx))
        return 1;
    double t0 = r->dp_mark[1] = pg_run_now();
    if (p->dev ? pg_dp_dev_reduce(p->dev) : stage_grads(r, 1) || reduce_bucket(r, p->nb - 1) || stage_grads(r, 0))
        return 1;
    if (p->dev) /* one span in the trace: the device does the three parts as one */
        r->dp_mark[2] = r->dp_mark[3] = r->dp_mark[4] = pg_run_now();
    p->sent = bucket_sent(r, p->nb - 1);
    p->sent_early = 0;
    for (int k = 0; k + 1 < p->nb; k++)
        p->sent_early += bucket_sent(r, k);
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
    r->dp_mark[5] = pg_run_now();
    if (step > 0 && p->wait_steps < DP_TIMES)
        p->wait_t[p->wait_steps++] = r->dp_mark[5] - r->dp_mark[0];
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of t[0..n) (n > 0), sorting t. */
static double median(double *t, int64_t n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

/* What the reduction left on the step's critical path: the median time from
 * the end of the backward to every gradient summed (the replicas' skew
 * included), with the early buckets or without (bench/dp.sh compares them). */
static void report_wait(const pg_run *r, struct pg_dp *p)
{
    if (!p->wait_steps)
        return;
    printf("stage %d: after the backward the step waited %.3f ms for the replicas' gradient sums (median of steps "
           "2..%" PRId64 "; %d early bucket%s of at least %" PRId64 " bytes: %s)\n", r->d->stage,
           median(p->wait_t, p->wait_steps) * 1e3, p->wait_steps + 1, p->nb - 1, p->nb == 2 ? "" : "s", p->bucket_bytes,
           p->bucket_why);
}

void pg_dp_report(pg_run *r)
{
    struct pg_dp *p = r->dp;
    if (!p)
        return;
    report_wait(r, p);
    if (p->nb > 1)
        printf("stage %d: %d gradient bucket%s (%zu bytes sent per step) reduced while the backward ran\n",
               r->d->stage, p->nb - 1, p->nb == 2 ? "" : "s", p->sent_early);
    if (p->check_overlap)
        printf("stage %d replica %d: %d early gradient bucket%s, all reduced before the stage's backward ended in %"
               PRId64 " of %" PRId64 " steps (PIPE_CHECK_OVERLAP)\n", r->d->stage, r->replica,
               p->nb - 1, p->nb == 2 ? "" : "s", p->overlapped, r->opt.steps);
    if (!p->red_steps || !p->sent)
        return;
    double med = median(p->red_t, p->red_steps);
    if (!(med > 0))
        return;
    printf("stage %d: gradient reduction over %d replicas%s: %zu bytes sent per step in %.3f ms (%.1f MiB/s, median "
           "of steps 2..%" PRId64 ")%s; buffers %zu bytes, send rings %d x %zu bytes\n", r->d->stage, r->replicas,
           p->dev ? " by NCCL" : "", p->sent, med * 1e3, (double)p->sent / med / 1048576.0, p->red_steps + 1,
           p->nb > 1 ? " after the backward" : "", p->held, r->replicas - 1, pg_dp_link_bytes(r));
}

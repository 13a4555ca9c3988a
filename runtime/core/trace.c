/* runtime/core/trace.c — --trace FILE and --profile FILE of a stage program.
 *
 * Recording: at start-up every stage allocates a ring of --trace-steps N steps
 * (default 10) of nactions + 1 events; inside a step each action stores its
 * start and end (CLOCK_MONOTONIC) into its fixed place, and the step itself
 * one more: no allocation, no I/O, two clock reads per action. The ring keeps
 * the last N steps of the run. On a backend with a device clock (CUDA) the
 * actions' spans are the device's instead: step.c writes them after the
 * step's synchronisation from its marks on the stream (pg_backend_mark),
 * mark 0 put at the host's time as the step began; the profile's layer,
 * chunk and stage costs are then GPU time, with no synchronisation added.
 *
 * One clock: after the start-up exchange every stage learns its offset to
 * stage 0's clock. Stages on the same host (same kernel boot id) share
 * CLOCK_MONOTONIC, so the offset is exactly 0; a stage on another host pings
 * stage 0 SYNC_PINGS times over its pg_net link and keeps the offset of the
 * fastest round trip (error at most half of it).
 *
 * One file: after the last step every stage sends its events (already on
 * stage 0's clock) and, with --profile, its per-layer text to stage 0 over the
 * existing links; stage 0 alone writes FILE (to FILE.tmp, then renamed). So a
 * run spread over several hosts still yields one file, on stage 0's host.
 * Every stage must be given the same --trace/--profile/--trace-steps options
 * (piperun passes the same options to all stages).
 *
 * The trace is Chrome-trace JSON (Perfetto, chrome://tracing): one "X" event
 * per action and per step, pid = stage, tid 0, ts/dur in microseconds from
 * the first event, names F3 / B3 / W3 (micro-batch 3) for compute, SEND_ACT 3,
 * RECV_GRAD 3, ... for messages, args {step, action, kind, mb, chunk, peer,
 * bytes}; and the spans around the actions (the step's start and end, the
 * main loop's work until the next step and its parts: spans[] below), each
 * starting where the one before ended; otherData describes the run.
 *
 * The profile is the format `pipegen plan/gen --balance` read (dsl/cost.h):
 * per layer fwd_s, bwd_s and its split bwd_b_s / bwd_w_s, seconds per
 * micro-batch: the mean of its chunk's measured passes over the kept steps
 * (the run's first step left out when there are others), split among the
 * chunk's layers by their estimated flops. bwd_b_s excludes the forward that
 * a checkpointed micro-batch recomputes (measured on a micro-batch that keeps
 * its activations, else the recomputing B minus F) and, where both were
 * measured, recompute_s: the forward that a checkpointed B reruns (split
 * like the forward). Plus per chunk and per stage summaries, stage_costs
 * (each stage's own OPT_STEP / GRAD_NORM / TIE_REDUCE time and its time
 * before and after a step's actions; stage_costs() below) and the measured
 * message transit, per-send cost to the sender and per-receive cost to the
 * receiver (of a message already sent when the RECV began). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io_atomic.h"
#include "stage_run.h"

#define PG_TAG_TRACE 26u /* kind of the trace messages: clock sync and the gather */
#define SYNC_PINGS 16


/* A step's events: its actions, then with replicas the reduction's spans
 * (PG_TRACE_DP_*, nested in the action that ran the reduction), then its end
 * after the last action (PG_TRACE_END), the main loop's work after it
 * (PG_TRACE_BETWEEN) and that work's parts (PG_TRACE_LOG, _EVAL, _STOP, _CKPT), then
 * its start before the first action (PG_TRACE_DATA), then the step. */
enum { AFTER_ACTIONS = 2 + PG_TRACE_PARTS, /* END, BETWEEN, the parts */
       AROUND = AFTER_ACTIONS + 2 };        /* ... and DATA, the step */
static int dp_spans(const pg_run *r) { return r->replicas > 1 ? PG_TRACE_DP_SPANS : 0; }
static int per_step(const pg_run *r) { return r->d->nactions + dp_spans(r) + AROUND; }
/* the actions among ps events of a step (of any stage: the count is the stage's own) */
static int actions_in(const pg_run *r, int64_t ps) { return (int)ps - AROUND - dp_spans(r); }

/* The event `i` of the step's events (step, as recorded: its place in the ring). */
static pg_trace_ev *slot(pg_run *r, int64_t step, int i)
{
    return &r->tr_ev[(size_t)(step % r->opt.trace_steps) * (size_t)per_step(r) + (size_t)i];
}

/* The place of END, BETWEEN or a part of it among a step's events. */
static int after_slot(const pg_run *r, int kind)
{
    return r->d->nactions + dp_spans(r) + (PG_TRACE_END - kind);
}

int pg_trace_init(pg_run *r)
{
    r->tr_first = r->tr_last = -1;
    r->tr_offset = 0.0;
    r->tracing = r->opt.trace || r->opt.profile;
    if (!r->tracing)
        return 0;
    size_t n = (size_t)r->opt.trace_steps * (size_t)per_step(r);
    r->tr_ev = calloc(n, sizeof *r->tr_ev);
    if (!r->tr_ev) {
        fprintf(stderr, "stage %d: cannot allocate %zu bytes for the trace of %" PRId64 " steps (--trace-steps)\n",
                r->d->stage, n * sizeof *r->tr_ev, r->opt.trace_steps);
        return 1;
    }
    return 0;
}

void pg_trace_action(pg_run *r, int64_t step, int a, double t0, double t1)
{
    const pg_step_action *x = &r->d->actions[a];
    pg_trace_ev *e = slot(r, step, a);
    e->t0 = t0;
    e->t1 = t1;
    e->bytes = x->bytes;
    e->step = (int32_t)step;
    e->action = a;
    e->kind = x->kind;
    e->mb = x->mb;
    e->chunk = x->chunk;
    e->peer = x->peer;
}

/* The step is over: its span, and its work between steps not yet recorded. */
void pg_trace_step(pg_run *r, int64_t step, double t0, double t1)
{
    *slot(r, step, per_step(r) - 1) = (pg_trace_ev){t0, t1, 0, (int32_t)step, -1, -1, -1, -1, -1};
    for (int k = PG_TRACE_BETWEEN; k >= PG_TRACE_BETWEEN - PG_TRACE_PARTS; k--)
        *slot(r, step, after_slot(r, k)) = (pg_trace_ev){t1, t1, 0, (int32_t)step, 0, k, -1, -1, -1};
    if (r->tr_first < 0)
        r->tr_first = step;
    r->tr_last = step;
    r->tr_end = t1;
}

void pg_trace_data(pg_run *r, int64_t step, double t0, double t1)
{
    *slot(r, step, per_step(r) - 2) = (pg_trace_ev){t0, t1, 0, (int32_t)step, -1, PG_TRACE_DATA, -1, -1, -1};
}

void pg_trace_end(pg_run *r, int64_t step, double t0, double t1)
{
    *slot(r, step, after_slot(r, PG_TRACE_END)) = (pg_trace_ev){t0, t1, 0, (int32_t)step, -1, PG_TRACE_END, -1, -1, -1};
}

void pg_trace_part(pg_run *r, int kind, double t0, double t1)
{
    if (!r->tracing || r->tr_last < 0 || kind > PG_TRACE_LOG || kind < PG_TRACE_CKPT)
        return;
    pg_trace_ev *e = slot(r, r->tr_last, after_slot(r, kind));
    e->t0 = t0;
    e->t1 = t1;
    e->action = 1;
}

void pg_trace_between(pg_run *r, double t)
{
    if (!r->tracing || r->tr_last < 0)
        return;
    pg_trace_ev *e = slot(r, r->tr_last, after_slot(r, PG_TRACE_BETWEEN));
    if (e->action) /* recorded already */
        return;
    e->t0 = r->tr_end;
    e->t1 = t;
    e->action = 1;
}

void pg_trace_dp(pg_run *r, int64_t step)
{
    pg_trace_ev *e = slot(r, step, r->d->nactions);
    const double *m = r->dp_mark;
    e[0] = (pg_trace_ev){m[0], m[5], 0, (int32_t)step, -1, PG_TRACE_DP_REDUCE, -1, -1, -1};
    for (int i = 0; i < 4; i++) /* wait, reduce-scatter, sum, all-gather */
        e[1 + i] = (pg_trace_ev){m[i], m[i + 1], 0, (int32_t)step, -1, PG_TRACE_DP_WAIT - i, -1, -1, -1};
}

/* ---- one clock ------------------------------------------------------------- */

static void boot_id(char out[64])
{
    memset(out, 0, 64);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(out, 63, f))
            out[0] = 0;
        fclose(f);
    }
    if (!out[0]) /* unknown: never equal to another process's, so it pings */
        snprintf(out, 64, "unknown boot id, pid %ld", (long)getpid());
}

/* "stage 2", or "stage 2 of replica 1" for another replica's process */
static const char *rank_name(const pg_run *r, int rank, char *buf, size_t n)
{
    int P = r->d->nstages;
    if (rank / P == r->replica)
        snprintf(buf, n, "stage %d", rank % P);
    else
        snprintf(buf, n, "stage %d of replica %d", rank % P, rank / P);
    return buf;
}

static int sync_fail(pg_run *r, int rank)
{
    char nb[48];
    fprintf(stderr, "stage %d: trace clock exchange with %s failed: %s (give every stage the same --trace/--profile)\n",
            r->d->stage, rank_name(r, rank, nb, sizeof nb), pg_net_error(r->net));
    return 1;
}

/* This process's clock for the process `rank`, which measures its offset to it. */
static int sync_serve(pg_run *r, int rank, const char mine[64])
{
    char theirs[64];
    double tmo = r->opt.timeout_s;
    if (pg_net_recv_rank(r->net, rank, PG_TAG(PG_TAG_TRACE, 0, 0), theirs, 64, tmo) ||
        pg_net_send_rank(r->net, rank, PG_TAG(PG_TAG_TRACE, 0, 1), mine, 64))
        return sync_fail(r, rank);
    if (!memcmp(mine, theirs, 64))
        return 0;
    for (int i = 0; i < SYNC_PINGS; i++) {
        double x;
        if (pg_net_recv_rank(r->net, rank, PG_TAG(PG_TAG_TRACE, 0, 2), &x, sizeof x, tmo))
            return sync_fail(r, rank);
        x = pg_run_now();
        if (pg_net_send_rank(r->net, rank, PG_TAG(PG_TAG_TRACE, 0, 3), &x, sizeof x))
            return sync_fail(r, rank);
    }
    return 0;
}

/* The offset of the clock of the process `rank` to this one's into *offset
 * (0 on the same kernel, else the fastest of SYNC_PINGS round trips). */
static int sync_ask(pg_run *r, int rank, const char mine[64], double *offset)
{
    char theirs[64];
    double tmo = r->opt.timeout_s;
    *offset = 0.0;
    if (pg_net_send_rank(r->net, rank, PG_TAG(PG_TAG_TRACE, 0, 0), mine, 64) ||
        pg_net_recv_rank(r->net, rank, PG_TAG(PG_TAG_TRACE, 0, 1), theirs, 64, tmo))
        return sync_fail(r, rank);
    if (!memcmp(mine, theirs, 64))
        return 0; /* one kernel: one CLOCK_MONOTONIC */
    double best = INFINITY;
    for (int i = 0; i < SYNC_PINGS; i++) {
        double t0 = pg_run_now(), t1;
        if (pg_net_send_rank(r->net, rank, PG_TAG(PG_TAG_TRACE, 0, 2), &t0, sizeof t0) ||
            pg_net_recv_rank(r->net, rank, PG_TAG(PG_TAG_TRACE, 0, 3), &t1, sizeof t1, tmo))
            return sync_fail(r, rank);
        double t2 = pg_run_now();
        if (t2 - t0 < best) {
            best = t2 - t0;
            *offset = t1 - 0.5 * (t0 + t2);
        }
    }
    return 0;
}

/* Do the other replicas trace? With --trace every process does (each its own
 * row); --profile alone is replica 0's (main.c). */
static int replicas_trace(const pg_run *r) { return r->replicas > 1 && r->opt.trace; }

/* Every stage to its replica's stage 0; each other replica's stage 0 to rank 0
 * (replica 0's), after its own stages: the offset of a stage of replica q is
 * then its offset to q's stage 0 plus that stage's to rank 0 (pg_trace_finish). */
int pg_trace_sync(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    int P = d->nstages, base = r->replica * P;
    if (!r->tracing || (P < 2 && !replicas_trace(r)))
        return 0;
    char mine[64];
    boot_id(mine);
    if (d->stage != 0)
        return sync_ask(r, base, mine, &r->tr_offset);
    for (int k = 1; k < P; k++)
        if (sync_serve(r, base + k, mine))
            return 1;
    if (r->replica > 0)
        return sync_ask(r, 0, mine, &r->tr_offset);
    for (int q = 1; replicas_trace(r) && q < r->replicas; q++)
        if (sync_serve(r, q * P, mine))
            return 1;
    return 0;
}

/* ---- the profile of one stage ------------------------------------------------ */

static int is_compute(int k) { return k == PG_FWD || k == PG_BWD_B || k == PG_BWD_W; }

static void json_name(FILE *o, const char *s)
{
    fputc('"', o);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', o);
        if ((unsigned char)*s >= 0x20)
            fputc(*s, o);
    }
    fputc('"', o);
}

typedef struct chunk_acc {
    double f, b, brc, w;
    int64_t nf, nb, nbrc, nw;
} chunk_acc;

static double mean(double s, int64_t n) { return n > 0 ? s / (double)n : 0.0; }

/* This stage's three profile sections (layers, chunks, stage times) as JSON
 * text into sec[0..2], from its nsteps * ps events in step order. */
static int stage_profile(pg_run *r, const pg_trace_ev *ev, int64_t nsteps, int ps, char *sec[3], size_t len[3])
{
    const pg_stage_desc *d = r->d;
    int nc = d->nchunk_fns > 0 ? d->nchunk_fns : 1;
    chunk_acc *acc = calloc((size_t)nc, sizeof *acc);
    FILE *o[3] = {NULL, NULL, NULL};
    int rc = 1;
    for (int i = 0; i < 3; i++) {
        sec[i] = NULL;
        len[i] = 0;
    }
    for (int i = 0; i < 3; i++)
        if (!(o[i] = open_memstream(&sec[i], &len[i])))
            goto out;
    if (!acc)
        goto out;
    double opt = 0, norm = 0, other = 0, steps_s = 0;
    int64_t nused = 0;
    for (int64_t j = 0; j < nsteps; j++) {
        const pg_trace_ev *e = ev + j * ps, *st = e + ps - 1;
        if (nsteps > 1 && st->step == r->tr_first)
            continue; /* the run's first step warms up */
        nused++;
        double inside = 0;
        for (int a = 0; a < ps - 1; a++) {
            if (e[a].kind < 0)
                continue; /* the reduction's spans lie inside an action */
            double t = e[a].t1 - e[a].t0;
            inside += t;
            if (e[a].kind == PG_OPT_STEP)
                opt += t;
            else if (e[a].kind == PG_GRAD_NORM)
                norm += t;
            if (!is_compute(e[a].kind))
                continue;
            int ci = 0;
            while (ci < d->nchunk_fns && d->chunks[ci].chunk != e[a].chunk)
                ci++;
            if (ci == d->nchunk_fns)
                continue;
            chunk_acc *c = &acc[ci];
            if (e[a].kind == PG_FWD) {
                c->f += t;
                c->nf++;
            } else if (e[a].kind == PG_BWD_W) {
                c->w += t;
                c->nw++;
            } else if (e[a].mb >= 0 && e[a].mb < d->nmb && d->mb_recompute[e[a].mb]) {
                c->brc += t;
                c->nbrc++;
            } else {
                c->b += t;
                c->nb++;
            }
        }
        other += (st->t1 - st->t0) - inside;
        steps_s += st->t1 - st->t0;
    }
    /* per chunk: F, pure B, W, and the forward a checkpointed B reruns (its
     * measured B minus the pure B; -1 when either was not measured) */
    double *F = calloc((size_t)nc * 4, sizeof *F);
    if (!F)
        goto out;
    for (int ci = 0; ci < d->nchunk_fns; ci++) {
        chunk_acc *c = &acc[ci];
        double f = mean(c->f, c->nf), b = c->nb ? mean(c->b, c->nb) : mean(c->brc, c->nbrc) - f;
        double rc = c->nb && c->nbrc ? mean(c->brc, c->nbrc) - b : -1.0;
        F[3 * ci] = f;
        F[3 * ci + 1] = b > 0 ? b : 0;
        F[3 * ci + 2] = mean(c->w, c->nw);
        F[3 * nc + ci] = rc < 0 && c->nb && c->nbrc ? 0.0 : rc;
        fprintf(o[1], "%s    {\"chunk\": %d, \"stage\": %d, \"fwd_s\": %.6e, \"bwd_b_s\": %.6e, \"bwd_w_s\": %.6e, "
                      "\"bwd_b_recompute_s\": %.6e, \"samples\": %" PRId64 "}",
                ci ? ",\n" : "", d->chunks[ci].chunk, d->stage, F[3 * ci], F[3 * ci + 1], F[3 * ci + 2],
                mean(c->brc, c->nbrc), c->nf);
    }
    /* per layer: its share of the chunk by estimated flops */
    for (int l = 0; l < d->nlayers; l++) {
        const pg_layer_info *L = &d->layers[l];
        int ci = 0;
        while (ci < d->nchunk_fns && d->chunks[ci].chunk != L->chunk)
            ci++;
        double share[3] = {0, 0, 0}, recompute = -1;
        if (ci < d->nchunk_fns) {
            double tot[3] = {0, 0, 0};
            int n = 0;
            for (int k = 0; k < d->nlayers; k++)
                if (d->layers[k].chunk == L->chunk) {
                    tot[0] += d->layers[k].fwd;
                    tot[1] += d->layers[k].bwd_b;
                    tot[2] += d->layers[k].bwd_w;
                    n++;
                }
            const double own[3] = {L->fwd, L->bwd_b, L->bwd_w};
            for (int p = 0; p < 3; p++)
                share[p] = F[3 * ci + p] * (tot[p] > 0 ? own[p] / tot[p] : p == 2 ? 0.0 : 1.0 / n);
            if (F[3 * nc + ci] >= 0) /* the rerun forward, split like the forward */
                recompute = F[3 * nc + ci] * (tot[0] > 0 ? own[0] / tot[0] : 1.0 / n);
        }
        fprintf(o[0], "%s    {\"name\": ", l ? ",\n" : "");
        json_name(o[0], L->name);
        fprintf(o[0], ", \"stage\": %d, \"chunk\": %d, \"fwd_s\": %.6e, \"bwd_s\": %.6e, \"bwd_b_s\": %.6e, \"bwd_w_s\": %.6e",
                d->stage, L->chunk, share[0], share[1] + share[2], share[1], share[2]);
        if (recompute >= 0)
            fprintf(o[0], ", \"recompute_s\": %.6e", recompute);
        fputc('}', o[0]);
    }
    free(F);
    fprintf(o[2], "    {\"stage\": %d, \"step_s\": %.6e, \"optimizer_s\": %.6e, \"grad_norm_s\": %.6e, \"outside_actions_s\": %.6e}",
            d->stage, mean(steps_s, nused), mean(opt, nused), mean(norm, nused), mean(other, nused));
    rc = 0;
out:
    for (int i = 0; i < 3; i++)
        if (o[i] && fclose(o[i]))
            rc = 1;
    free(acc);
    if (rc) {
        for (int i = 0; i < 3; i++) {
            free(sec[i]);
            sec[i] = NULL;
        }
        fprintf(stderr, "stage %d: out of memory for the profile\n", d->stage);
    }
    return rc;
}

/* ---- stage 0: the files ------------------------------------------------------- */

typedef struct stage_events {
    int64_t nsteps, ps, lo;
    double offset;
    pg_trace_ev *ev;   /* [nsteps * ps] */
    int device;        /* its actions' spans are device time (step.c's marks), else host time */
    char *sec[3];
    size_t len[3];
} stage_events;

/* The reduction's spans: names in the trace and args.kind. */
static const char *const dp_name[PG_TRACE_DP_SPANS] = {"dp reduce", "dp wait", "dp reduce-scatter", "dp sum",
                                                       "dp all-gather"};
static const char *const dp_kind[PG_TRACE_DP_SPANS] = {"DP_REDUCE", "DP_WAIT", "DP_REDUCE_SCATTER", "DP_SUM",
                                                       "DP_ALL_GATHER"};
static int dp_index(int k) { return PG_TRACE_DP_REDUCE - k; } /* 0 .. PG_TRACE_DP_SPANS - 1 for the spans */

/* The spans around the actions: name in the trace, args.kind, cat. */
typedef struct span_name {
    int kind;
    const char *name, *akind, *cat;
} span_name;
static const span_name spans[] = {
    {PG_TRACE_DATA, "batch and zeroing", "DATA", "data"},
    {PG_TRACE_END, "step end", "STEP_END", "step_end"},
    {PG_TRACE_BETWEEN, "between steps", "BETWEEN", "between"},
    {PG_TRACE_LOG, "log line", "LOG", "between"},
    {PG_TRACE_EVAL, "evaluation", "EVAL", "between"},
    {PG_TRACE_STOP, "stop exchange", "STOP", "between"},
    {PG_TRACE_CKPT, "checkpoint", "CHECKPOINT", "between"},
};
static const span_name *span_of(int k)
{
    for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++)
        if (spans[i].kind == k)
            return &spans[i];
    return NULL;
}

/* Is e written? BETWEEN and its parts only once recorded (pg_trace_part/between). */
static int recorded(const pg_trace_ev *e)
{
    return !(e->kind <= PG_TRACE_BETWEEN && e->kind >= PG_TRACE_CKPT && !e->action);
}

static const char *cat_of(int k)
{
    if (span_of(k))
        return span_of(k)->cat;
    if (k < -1)
        return "dp";
    if (k < 0)
        return "step";
    if (is_compute(k))
        return "compute";
    return k == PG_OPT_STEP ? "optimizer" : "comm";
}

static long long ns_of(double t, double zero) { return llround((t - zero) * 1e9); }

static void us(FILE *o, long long ns)
{
    fprintf(o, "%s%lld.%03lld", ns < 0 ? "-" : "", llabs(ns) / 1000, llabs(ns) % 1000);
}

static void write_event(FILE *o, int stage, const pg_trace_ev *e, double zero, int *first)
{
    char name[64];
    if (!recorded(e))
        return;
    if (span_of(e->kind))
        snprintf(name, sizeof name, "%s", span_of(e->kind)->name);
    else if (e->kind < -1)
        snprintf(name, sizeof name, "%s", dp_name[dp_index(e->kind)]);
    else if (e->kind < 0)
        snprintf(name, sizeof name, "step %d", e->step + 1);
    else if (is_compute(e->kind))
        snprintf(name, sizeof name, "%c%d", e->kind == PG_FWD ? 'F' : e->kind == PG_BWD_B ? 'B' : 'W', e->mb);
    else if (e->mb >= 0)
        snprintf(name, sizeof name, "%s %d", pg_step_kind_name(e->kind), e->mb);
    else
        snprintf(name, sizeof name, "%s", pg_step_kind_name(e->kind));
    long long t0 = ns_of(e->t0, zero), t1 = ns_of(e->t1, zero);
    fprintf(o, "%s{\"ph\": \"X\", \"pid\": %d, \"tid\": 0, \"name\": \"%s\", \"cat\": \"%s\", \"ts\": ", *first ? "" : ",\n",
            stage, name, cat_of(e->kind));
    us(o, t0);
    fprintf(o, ", \"dur\": ");
    us(o, t1 - t0);
    fprintf(o, ", \"args\": {\"step\": %d", e->step + 1);
    if (e->kind >= 0)
        fprintf(o, ", \"action\": %d, \"kind\": \"%s\", \"mb\": %d, \"chunk\": %d, \"peer\": %d, \"bytes\": %" PRId64,
                e->action, pg_step_kind_name(e->kind), e->mb, e->chunk, e->peer, e->bytes);
    else if (span_of(e->kind))
        fprintf(o, ", \"kind\": \"%s\"", span_of(e->kind)->akind);
    else if (e->kind < -1)
        fprintf(o, ", \"kind\": \"%s\"", dp_kind[dp_index(e->kind)]);
    fprintf(o, "}}");
    *first = 0;
}

static void run_info(FILE *o, const pg_run *r, const stage_events *se)
{
    const pg_stage_desc *d = r->d;
    fprintf(o, "\"model\": ");
    json_name(o, d->model);
    fprintf(o, ", \"source\": ");
    json_name(o, d->source);
    fprintf(o, ", \"plan_hash\": \"%016" PRIx64 "\", \"stages\": %d, \"chunks\": %d, \"microbatches\": %d, "
               "\"replicas\": %d, \"batch\": %" PRId64 ", \"first_step\": %" PRId64 ", \"last_step\": %" PRId64,
            d->plan_hash, d->nstages, d->nchunks, d->nmb, r->replicas, d->train.batch, se[0].lo + 1,
            se[0].lo + se[0].nsteps);
}

/* A file of stage 0's, printed into memory first; finish_out writes it the
 * one way every output is written (io_atomic.h: beside it, fsync, rename;
 * EFBIG over ulimit -f rather than SIGXFSZ). */
typedef struct out_text {
    FILE *f;
    char *text;
    size_t len;
} out_text;

static FILE *open_out(out_text *o)
{
    o->text = NULL;
    o->len = 0;
    return o->f = open_memstream(&o->text, &o->len);
}

static int finish_out(out_text *o, const char *path, const char *what)
{
    char err[4400] = "out of memory";
    int bad = ferror(o->f) != 0;
    bad |= fclose(o->f) != 0;
    if (!bad) {
        const void *parts[1] = {o->text};
        bad = pg_io_write_atomic(path, parts, &o->len, 1, err, sizeof err) != 0;
    }
    if (bad)
        fprintf(stderr, "stage 0: cannot write the %s %s: %s\n", what, path, err);
    free(o->text);
    return bad;
}

/* The trace of nproc processes se[rank], pid = rank = replica x stages + stage. */
static int write_trace(pg_run *r, const stage_events *se, int nproc)
{
    const pg_stage_desc *d = r->d;
    out_text ot;
    FILE *o = open_out(&ot);
    if (!o) {
        fprintf(stderr, "stage 0: cannot write the trace %s: out of memory\n", r->opt.trace);
        return 1;
    }
    double zero = INFINITY;
    for (int k = 0; k < nproc; k++)
        for (int64_t i = 0; i < se[k].nsteps * se[k].ps; i++)
            if (se[k].ev[i].t0 < zero)
                zero = se[k].ev[i].t0;
    if (!isfinite(zero))
        zero = 0;
    fprintf(o, "{\"traceEvents\": [\n");
    int first = 1;
    for (int k = 0; k < nproc; k++) {
        char name[64]; /* one row per process: replica 0's stages, then replica 1's, ... */
        if (r->replicas > 1)
            snprintf(name, sizeof name, "stage %d replica %d", k % d->nstages, k / d->nstages);
        else
            snprintf(name, sizeof name, "stage %d", k);
        fprintf(o, "%s{\"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"name\": \"process_name\", \"args\": {\"name\": \"%s\"}},\n"
                   "{\"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"name\": \"process_sort_index\", \"args\": {\"sort_index\": %d}}",
                first ? "" : ",\n", k, name, k, k);
        first = 0;
        for (int64_t j = 0; j < se[k].nsteps; j++) {
            const pg_trace_ev *e = se[k].ev + j * se[k].ps;
            write_event(o, k, &e[se[k].ps - 1], zero, &first); /* the step, then its actions */
            for (int64_t a = 0; a + 1 < se[k].ps; a++)
                write_event(o, k, &e[a], zero, &first);
        }
    }
    fprintf(o, "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"format\": \"pipegen-trace\", \"version\": 1, ");
    run_info(o, r, se);
    fprintf(o, ", \"clock\": \"CLOCK_MONOTONIC of stage 0, microseconds from the first event; stages on other hosts "
               "aligned by the fastest of %d pings; a process with device_time 1 timed its actions on its GPU "
               "(CUDA events, put on its clock as its step began)\", \"clock_offset_us\": [", SYNC_PINGS);
    for (int k = 0; k < nproc; k++)
        fprintf(o, "%s%.3f", k ? ", " : "", se[k].offset * 1e6);
    fprintf(o, "], \"device_time\": [");
    for (int k = 0; k < nproc; k++)
        fprintf(o, "%s%d", k ? ", " : "", se[k].device);
    fprintf(o, "]}}\n");
    return finish_out(&ot, r->opt.trace, "trace");
}

/* Messages: the n-th activation/gradient/skip SEND from s to t of a step
 * meets the n-th such RECV on t from s. When the receiver was already waiting
 * (its RECV began before the SEND), RECV end - SEND start is the transit
 * time; latency + bytes / bandwidth is fitted to those by least squares. */
/* Least squares y = lat + x / bw over n points given as sums: bw 0 (lat the
 * mean) when the sizes do not vary or the slope is not positive. */
static void fit_line(int64_t n, double sx, double sy, double sxx, double sxy, double *lat, double *bw)
{
    double den = (double)n * sxx - sx * sx;
    *lat = n ? sy / (double)n : 0;
    *bw = 0;
    if (n >= 2 && den > 1e-9 * sxx * (double)n) {
        double slope = ((double)n * sxy - sx * sy) / den;
        if (slope > 0) {
            *bw = 1.0 / slope;
            *lat = (sy - slope * sx) / (double)n;
            if (*lat < 0)
                *lat = 0;
        }
    }
}

static int skip_step(const pg_run *r, const stage_events *x, int64_t j)
{
    return x->nsteps > 1 && x->ev[j * x->ps + x->ps - 1].step == r->tr_first; /* the run's first step warms up */
}

/* What a SEND costs its sender (the action's own duration: the stage does
 * nothing else meanwhile), fitted like the transit: send_latency_s + bytes /
 * send_bytes_per_s over every activation/gradient/skip send. */
static void send_fit(const pg_run *r, const stage_events *se, double *lat, double *bw)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int64_t n = 0;
    for (int s = 0; s < r->d->nstages; s++)
        for (int64_t j = 0; j < se[s].nsteps; j++) {
            if (skip_step(r, &se[s], j))
                continue;
            for (int64_t a = 0; a + 1 < se[s].ps; a++) {
                const pg_trace_ev *e = &se[s].ev[j * se[s].ps + a];
                if (!pg_step_msg_send(e->kind))
                    continue;
                double x = (double)e->bytes, y = e->t1 - e->t0;
                sx += x;
                sy += y;
                sxx += x * x;
                sxy += x * y;
                n++;
            }
        }
    fit_line(n, sx, sy, sxx, sxy, lat, bw);
}

/* The end of the n-th send of kind k to stage `to` in step j of stage u's
 * events (-INFINITY when there is none). */
static double nth_send_end(const pg_run *r, const stage_events *se, int u, int64_t j, int k, int to, int nth)
{
    const stage_events *x = &se[u];
    int na = actions_in(r, x->ps);
    const pg_trace_ev *e = x->ev + j * x->ps;
    for (int a = 0, seen = 0; a < na; a++)
        if (e[a].kind == k && e[a].peer == to && seen++ == nth)
            return e[a].t1;
    return -INFINITY;
}

/* Per stage, what the actions outside F/B/W cost the stage itself, waits left
 * out (so the prediction can add the waits its simulation finds):
 *  - OPT_STEP, GRAD_NORM and VERDICT (local work; VERDICT with the replicas'
 *    reduction): their durations;
 *  - tie_s: the tie receives (TIE_GRAD_RECV: the owner's fold and sums,
 *    TIE_SUM_RECV), each from the end of the send it meets on the other stage
 *    (or its own start, if later) to its end;
 *  - step_start_s / step_end_s: the step's time before its first action (the
 *    gradients zeroed, the batch loaded) and after its last;
 *  - send_s: the mean of its activation, gradient and skip sends (per send):
 *    the stages pay apart (a send that wakes a waiting receiver costs its
 *    sender more on a busy machine), which the fit over all sends hides.
 * Means per step over the kept steps; needs every stage's events (stage 0). */
static void stage_costs(const pg_run *r, const stage_events *se, FILE *o)
{
    const pg_stage_desc *d = r->d;
    int np = d->nstages;
    fprintf(o, "\"stage_costs\": [\n");
    for (int k = 0; k < np; k++) {
        double opt = 0, norm = 0, verdict = 0, tie = 0, pre = 0, post = 0, send = 0;
        int64_t used = 0, nsend = 0;
        for (int64_t j = 0; j < se[k].nsteps; j++) {
            if (skip_step(r, &se[k], j))
                continue;
            const pg_trace_ev *e = se[k].ev + j * se[k].ps, *stp = e + se[k].ps - 1;
            int na = actions_in(r, se[k].ps); /* the actions */
            used++;
            if (na > 0) {
                pre += e[0].t0 - stp->t0;
                post += stp->t1 - e[na - 1].t1;
            }
            for (int a = 0; a < na; a++) {
                const pg_trace_ev *x = &e[a];
                double t = x->t1 - x->t0;
                if (x->kind == PG_OPT_STEP)
                    opt += t;
                else if (x->kind == PG_GRAD_NORM)
                    norm += t;
                else if (x->kind == PG_VERDICT)
                    verdict += t;
                else if (pg_step_msg_send(x->kind)) {
                    send += t;
                    nsend++;
                }
                else if ((x->kind == PG_TIE_GRAD_RECV || x->kind == PG_TIE_SUM_RECV) && x->peer >= 0 && x->peer < np) {
                    int sk = x->kind == PG_TIE_GRAD_RECV ? PG_TIE_GRAD_SEND : PG_TIE_SUM_SEND, nth = 0;
                    for (int b = 0; b < a; b++) /* FIFO per link: the n-th such receive meets the n-th send */
                        nth += e[b].kind == x->kind && e[b].peer == x->peer;
                    double sent = se[x->peer].nsteps == se[k].nsteps && se[x->peer].lo == se[k].lo
                                      ? nth_send_end(r, se, x->peer, j, sk, k, nth) : -INFINITY;
                    double from = sent > x->t0 ? sent : x->t0;
                    tie += x->t1 > from ? x->t1 - from : 0;
                }
            }
        }
        fprintf(o, "%s    {\"stage\": %d, \"optimizer_s\": %.6e, \"grad_norm_s\": %.6e, \"verdict_s\": %.6e, "
                   "\"tie_s\": %.6e, \"step_start_s\": %.6e, \"step_end_s\": %.6e",
                k ? ",\n" : "", k, mean(opt, used), mean(norm, used), mean(verdict, used), mean(tie, used),
                mean(pre, used), mean(post, used));
        if (nsend) /* per send, not per step */
            fprintf(o, ", \"send_s\": %.6e", mean(send, nsend));
        fputc('}', o);
    }
    fprintf(o, "\n],\n");
}

static void message_stats(const pg_run *r, const stage_events *se, FILE *o)
{
    const pg_stage_desc *d = r->d;
    double sx = 0, sy = 0, sxx = 0, sxy = 0, send_s = 0, bytes = 0;
    double rx = 0, ry = 0, rxx = 0, rxy = 0; /* receives of messages already sent */
    int64_t n = 0, count = 0, nr = 0;
    for (int s = 0; s < d->nstages; s++)
        for (int t = 0; t < d->nstages; t++) {
            if (s == t || se[s].nsteps != se[t].nsteps)
                continue;
            for (int64_t j = 0; j < se[s].nsteps; j++) {
                if (skip_step(r, &se[s], j))
                    continue;
                const pg_trace_ev *es = se[s].ev + j * se[s].ps, *et = se[t].ev + j * se[t].ps;
                int64_t a = 0, b = 0;
                for (;;) {
                    while (a < se[s].ps - 1 && !(pg_step_msg_send(es[a].kind) && es[a].peer == t))
                        a++;
                    while (b < se[t].ps - 1 && !(pg_step_msg_recv(et[b].kind) && et[b].peer == s))
                        b++;
                    if (a >= se[s].ps - 1 || b >= se[t].ps - 1)
                        break;
                    count++;
                    send_s += es[a].t1 - es[a].t0;
                    bytes += (double)es[a].bytes;
                    if (et[b].t0 >= es[a].t1) { /* sent before the RECV began: its cost alone */
                        double x = (double)es[a].bytes, y = et[b].t1 - et[b].t0;
                        rx += x;
                        ry += y;
                        rxx += x * x;
                        rxy += x * y;
                        nr++;
                    }
                    if (et[b].t0 <= es[a].t0) {
                        double x = (double)es[a].bytes, y = et[b].t1 - es[a].t0;
                        sx += x;
                        sy += y;
                        sxx += x * x;
                        sxy += x * y;
                        n++;
                    }
                    a++;
                    b++;
                }
            }
        }
    double lat, bw, slat, sbw, rlat, rbw;
    fit_line(n, sx, sy, sxx, sxy, &lat, &bw);
    send_fit(r, se, &slat, &sbw);
    fit_line(nr, rx, ry, rxx, rxy, &rlat, &rbw);
    fprintf(o, "\"messages\": {\"count\": %" PRId64 ", \"waited\": %" PRId64 ", \"mean_bytes\": %.1f, "
               "\"send_s\": %.6e, \"latency_s\": %.6e, \"bytes_per_s\": %.6e, "
               "\"send_latency_s\": %.6e, \"send_bytes_per_s\": %.6e",
            count, n, count ? bytes / (double)count : 0.0, count ? send_s / (double)count : 0.0, lat, bw, slat, sbw);
    if (nr) /* else nothing to say: every receive waited */
        fprintf(o, ", \"ready\": %" PRId64 ", \"recv_latency_s\": %.6e, \"recv_bytes_per_s\": %.6e", nr, rlat, rbw);
    fprintf(o, "}");
}

static int write_profile(pg_run *r, const stage_events *se)
{
    const pg_stage_desc *d = r->d;
    out_text ot;
    FILE *o = open_out(&ot);
    if (!o) {
        fprintf(stderr, "stage 0: cannot write the profile %s: out of memory\n", r->opt.profile);
        return 1;
    }
    fprintf(o, "{\"format\": \"pipegen-profile\", \"version\": 1, ");
    run_info(o, r, se);
    fprintf(o, ",\n\"note\": \"seconds per micro-batch, means over the steps kept (--trace-steps) but the run's first; "
               "a chunk's time split among its layers by estimated flops; bwd_b_s without the recomputed forward; "
               "stage_costs without waits\",\n");
    static const char *const key[3] = {"layers", "chunks", "stage_times"};
    for (int i = 0; i < 3; i++) {
        fprintf(o, "\"%s\": [\n", key[i]);
        int first = 1;
        for (int k = 0; k < d->nstages; k++)
            if (se[k].len[i]) {
                fprintf(o, "%s", first ? "" : ",\n");
                fwrite(se[k].sec[i], 1, se[k].len[i], o);
                first = 0;
            }
        fprintf(o, "\n],\n");
    }
    stage_costs(r, se, o);
    message_stats(r, se, o);
    fprintf(o, "\n}\n");
    return finish_out(&ot, r->opt.profile, "profile");
}

static int gather_fail(pg_run *r, int rank, int sending)
{
    char nb[48];
    fprintf(stderr, "stage %d: gathering the trace %s %s failed: %s\n", r->d->stage, sending ? "on" : "from",
            rank_name(r, rank, nb, sizeof nb), pg_net_error(r->net));
    return 1;
}

/* One process's events (and with `profile` its profile sections) to rank `to`:
 * a header {steps, events per step, first step, clock offset}, then a message
 * per step; tag .. tag + 3. add: seconds added to every time on the way (a
 * replica's stage 0 puts its stages' events on rank 0's clock). */
static int send_events(pg_run *r, int to, uint32_t tag, const stage_events *x, int profile, double add)
{
    double off = x->offset + add;
    int64_t hdr[5] = {x->nsteps, x->ps, x->lo, 0, x->device};
    memcpy(&hdr[3], &off, sizeof(double));
    if (pg_net_send_rank(r->net, to, tag, hdr, sizeof hdr))
        return gather_fail(r, to, 1);
    pg_trace_ev *buf = malloc((size_t)x->ps * sizeof *buf);
    if (!buf) {
        fprintf(stderr, "stage %d: out of memory for the trace\n", r->d->stage);
        return 1;
    }
    for (int64_t j = 0; j < x->nsteps; j++) {
        memcpy(buf, x->ev + j * x->ps, (size_t)x->ps * sizeof *buf);
        for (int64_t a = 0; a < x->ps; a++) {
            buf[a].t0 += add;
            buf[a].t1 += add;
        }
        if (pg_net_send_rank(r->net, to, tag + 1, buf, (size_t)x->ps * sizeof *buf)) {
            free(buf);
            return gather_fail(r, to, 1);
        }
    }
    free(buf);
    if (!profile)
        return 0;
    uint64_t lens[3] = {x->len[0], x->len[1], x->len[2]};
    if (pg_net_send_rank(r->net, to, tag + 2, lens, sizeof lens))
        return gather_fail(r, to, 1);
    for (int i = 0; i < 3; i++)
        if (lens[i] && pg_net_send_rank(r->net, to, tag + 3, x->sec[i], lens[i]))
            return gather_fail(r, to, 1);
    return 0;
}

/* The other side of send_events, into *x (its buffers malloc'd). */
static int recv_events(pg_run *r, int from, uint32_t tag, stage_events *x, int profile)
{
    int64_t hdr[5], W = r->opt.trace_steps;
    double tmo = r->opt.timeout_s;
    char nb[48];
    if (pg_net_recv_rank(r->net, from, tag, hdr, sizeof hdr, tmo))
        return gather_fail(r, from, 0);
    x->nsteps = hdr[0];
    x->ps = hdr[1];
    x->lo = hdr[2];
    memcpy(&x->offset, &hdr[3], sizeof(double));
    x->device = hdr[4] != 0;
    if (x->nsteps < 0 || x->ps < 1 || x->nsteps > W || x->ps > (int64_t)1 << 24) {
        fprintf(stderr, "stage %d: %s sent a trace of %" PRId64 " steps x %" PRId64 " events (bad header)\n",
                r->d->stage, rank_name(r, from, nb, sizeof nb), x->nsteps, x->ps);
        return 1;
    }
    x->ev = malloc((size_t)(x->nsteps > 0 ? x->nsteps : 1) * (size_t)x->ps * sizeof *x->ev);
    if (!x->ev) {
        fprintf(stderr, "stage %d: out of memory for the trace of %s\n", r->d->stage, rank_name(r, from, nb, sizeof nb));
        return 1;
    }
    for (int64_t j = 0; j < x->nsteps; j++)
        if (pg_net_recv_rank(r->net, from, tag + 1, x->ev + j * x->ps, (size_t)x->ps * sizeof *x->ev, tmo))
            return gather_fail(r, from, 0);
    if (!profile)
        return 0;
    uint64_t lens[3];
    if (pg_net_recv_rank(r->net, from, tag + 2, lens, sizeof lens, tmo))
        return gather_fail(r, from, 0);
    for (int i = 0; i < 3; i++) {
        if (!lens[i])
            continue;
        if (lens[i] > ((uint64_t)1 << 30) || !(x->sec[i] = malloc((size_t)lens[i]))) {
            fprintf(stderr, "stage %d: the profile of %s is too large (%" PRIu64 " bytes)\n", r->d->stage,
                    rank_name(r, from, nb, sizeof nb), lens[i]);
            return 1;
        }
        x->len[i] = (size_t)lens[i];
        if (pg_net_recv_rank(r->net, from, tag + 3, x->sec[i], x->len[i], tmo))
            return gather_fail(r, from, 0);
    }
    return 0;
}

/* Every stage's events to its replica's stage 0 (tag kind 1); with replicas,
 * each other replica's stage 0 forwards its replica's to rank 0 (tag kind 2),
 * which writes them all: se[rank]. */
int pg_trace_finish(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    if (!r->tracing)
        return 0;
    int ps = per_step(r), np = d->nstages, rc = 1, base = r->replica * np;
    int nproc = r->replica == 0 && replicas_trace(r) ? np * r->replicas : np;
    int profile = r->opt.profile != NULL;
    int64_t W = r->opt.trace_steps;
    int64_t lo = r->tr_last < 0 ? 0 : (r->tr_last - W + 1 > r->tr_first ? r->tr_last - W + 1 : r->tr_first);
    int64_t nsteps = r->tr_last < 0 ? 0 : r->tr_last - lo + 1;
    stage_events *se = calloc((size_t)nproc, sizeof *se);
    pg_trace_ev *mine = malloc((size_t)(nsteps > 0 ? nsteps : 1) * (size_t)ps * sizeof *mine);
    if (!se || !mine) {
        fprintf(stderr, "stage %d: out of memory for the trace\n", d->stage);
        goto out;
    }
    /* this stage's events in step order, on its replica's stage 0's clock (rank 0's for a stage 0) */
    for (int64_t j = 0; j < nsteps; j++) {
        memcpy(mine + j * ps, r->tr_ev + ((lo + j) % W) * ps, (size_t)ps * sizeof *mine);
        for (int a = 0; a < ps; a++) {
            mine[j * ps + a].t0 += r->tr_offset;
            mine[j * ps + a].t1 += r->tr_offset;
        }
    }
    stage_events *me = &se[d->stage];
    *me = (stage_events){nsteps, ps, lo, r->tr_offset, mine, r->dev_clock, {NULL, NULL, NULL}, {0, 0, 0}};
    mine = NULL;
    if (profile && stage_profile(r, me->ev, nsteps, ps, me->sec, me->len))
        goto out;
    uint32_t tag = PG_TAG(PG_TAG_TRACE, 1, 0), fwd = PG_TAG(PG_TAG_TRACE, 2, 0);
    if (d->stage != 0) {
        rc = send_events(r, base, tag, me, profile, 0.0);
        goto out;
    }
    for (int k = 1; k < np; k++)
        if (recv_events(r, base + k, tag, &se[k], profile))
            goto out;
    if (r->replica > 0) { /* the stages' clocks were this one's: add its offset to rank 0's */
        for (int k = 0; k < np; k++)
            if (send_events(r, 0, fwd, &se[k], 0, k ? r->tr_offset : 0.0))
                goto out;
        rc = 0;
        goto out;
    }
    for (int k = np; k < nproc; k++)
        if (recv_events(r, k - k % np, fwd, &se[k], 0))
            goto out;
    rc = 0;
    if (r->opt.trace && write_trace(r, se, nproc))
        rc = 1;
    if (profile && write_profile(r, se))
        rc = 1;
    if (!rc && r->opt.trace && nproc > np)
        printf("trace: %" PRId64 " steps x %d stages x %d replicas written to %s\n", nsteps, np, r->replicas,
               r->opt.trace);
    else if (!rc && r->opt.trace)
        printf("trace: %" PRId64 " steps x %d stages written to %s\n", nsteps, np, r->opt.trace);
    if (!rc && profile)
        printf("profile: written to %s\n", r->opt.profile);
out:
    free(mine);
    if (se)
        for (int k = 0; k < nproc; k++) {
            free(se[k].ev);
            for (int i = 0; i < 3; i++)
                free(se[k].sec[i]);
        }
    free(se);
    return rc;
}

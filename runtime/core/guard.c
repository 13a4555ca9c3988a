/* runtime/core/guard.c — see guard.h. */
#include "guard.h"
#include "checkpoint.h"
#include "io_atomic.h"
#include "pg_proc.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ---- memory ---------------------------------------------------------------- */

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

int pg_guard_memory(const pg_stage_desc *d, int64_t arena_bytes, char *err, size_t errlen)
{
    uint64_t need = (uint64_t)arena_bytes, avail = pg_proc_bytes("/proc/meminfo", "MemAvailable:");
    if (avail && need > avail) {
        snprintf(err, errlen,
                 "stage %d: its arena needs %" PRIu64 " bytes (%.2f GiB) but this machine has only %" PRIu64
                 " bytes (%.2f GiB) available (MemAvailable): use more stages, a smaller batch or more micro-batches "
                 "(see `pipegen plan`)",
                 d->stage, need, gib(need), avail, gib(avail));
        return -1;
    }
    /* what the limits leave: the limit minus what is mapped already (code,
     * libraries, the BLAS's buffers, set up before this check) */
    static const int lims[2] = {RLIMIT_AS, RLIMIT_DATA};
    static const char *const names[2] = {"RLIMIT_AS (ulimit -v)", "RLIMIT_DATA (ulimit -d)"};
    static const char *const keys[2] = {"VmSize:", "VmData:"};
    for (int i = 0; i < 2; i++) {
        struct rlimit rl;
        if (getrlimit(lims[i], &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
            continue;
        uint64_t used = pg_proc_bytes("/proc/self/status", keys[i]), lim = (uint64_t)rl.rlim_cur, left = lim > used ? lim - used : 0;
        if (need > left) {
            snprintf(err, errlen,
                     "stage %d: its arena needs %" PRIu64 " bytes (%.2f GiB) but %s allows this process only %" PRIu64
                     " bytes (%.2f GiB), of which %" PRIu64 " are in use already (code, libraries, the BLAS's "
                     "buffers): raise the limit, or use more stages, a smaller batch or more micro-batches",
                     d->stage, need, gib(need), names[i], lim, gib(lim), used);
            return -1;
        }
    }
    return 0;
}

/* ---- open files ------------------------------------------------------------ */

int pg_guard_files(const pg_stage_desc *d, int world, char *err, size_t errlen)
{
    /* a link to every other process (every stage of every replica), two
     * listening sockets during the rendezvous, data files, a checkpoint,
     * stdio and the launcher's socket */
    rlim_t need = (rlim_t)(world > d->nstages ? world : d->nstages) + 24;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
        return 0;
    if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) { /* the soft limit may rise to the hard one */
        rl.rlim_cur = need;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
            return 0;
    }
    snprintf(err, errlen,
             "stage %d: ulimit -n allows %llu open files but a stage of this %d-stage pipeline needs about %llu "
             "(a connection to every other stage, data and checkpoint files): raise it (ulimit -n %llu)",
             d->stage, (unsigned long long)rl.rlim_cur, d->nstages, (unsigned long long)need,
             (unsigned long long)need);
    return -1;
}

/* ---- which stage holds the loss ------------------------------------------- */

int pg_guard_init(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    r->loss_stage = d->has_loss ? d->stage : -1;
    uint32_t tag = PG_TAG(PG_TAG_VERDICT, 0xffff, 0xff);
    uint64_t mine = (uint64_t)d->has_loss;
    for (int k = 0; k < d->nstages; k++)
        if (k != d->stage && pg_net_send(r->net, k, tag, &mine, sizeof mine)) {
            fprintf(stderr, "stage %d: start-up exchange with stage %d failed: %s\n", d->stage, k, pg_net_error(r->net));
            return 1;
        }
    for (int k = 0; k < d->nstages; k++) {
        uint64_t h;
        if (k == d->stage)
            continue;
        if (pg_net_recv(r->net, k, tag, &h, sizeof h, r->opt.timeout_s)) {
            fprintf(stderr, "stage %d: start-up exchange with stage %d failed: %s\n", d->stage, k, pg_net_error(r->net));
            return 1;
        }
        if (h)
            r->loss_stage = k;
    }
    if (r->loss_stage < 0) {
        fprintf(stderr, "stage %d: no stage of this pipeline holds the loss\n", d->stage);
        return 1;
    }
    return 0;
}

/* ---- the step's verdict: non-finite loss or gradients ------------------------ */

#define FINITE_BLK 64 /* floats tested at once: a fixed-count loop that -O2 vectorizes */

int pg_guard_finite(const float *v, size_t n, size_t *bad)
{
    size_t i = 0;
    for (; i + FINITE_BLK <= n; i += FINITE_BLK) { /* a block with no inf or nan passes whole */
        uint32_t any = 0;
        for (int j = 0; j < FINITE_BLK; j++) {
            uint32_t u;
            memcpy(&u, &v[i + j], 4);
            any |= (u & 0x7f800000u) == 0x7f800000u;
        }
        if (any)
            break;
    }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        if ((u & 0x7f800000u) == 0x7f800000u) {
            *bad = i;
            return -1;
        }
    }
    return 0;
}

int pg_guard_finite_msg(const float *v, size_t n, const char *what, char *err, size_t errlen)
{
    size_t bad;
    if (!pg_guard_finite(v, n, &bad))
        return 0;
    snprintf(err, errlen, "%s, element %zu is %s", what, bad, v[bad] != v[bad] ? "nan" : v[bad] > 0 ? "inf" : "-inf");
    return -1;
}

/* The verdict word each stage sends: what it found, and where. */
#define V_LOSS 1u      /* the loss of a micro-batch is not finite (loss stage) */
#define V_GRAD 2u      /* the gradient of a parameter this stage owns is not finite */

/* This stage's own findings: bits V_LOSS / V_GRAD; what names the first. */
static uint32_t local_findings(pg_run *r, int64_t step, char *what, size_t wl)
{
    const pg_stage_desc *d = r->d;
    uint32_t f = 0;
    what[0] = 0;
    for (int mb = 0; d->has_loss && mb < d->nmb; mb++)
        if (!isfinite(r->loss[mb])) {
            snprintf(what, wl, "the loss of step %" PRId64 " is not finite (%g in micro-batch %d%s)", step + 1,
                     r->loss[mb], mb, r->replicas > 1 ? " of this replica" : "");
            f |= V_LOSS;
            break;
        }
    if (d->has_loss && !f && !isfinite(r->loss_global)) { /* another replica's rows (dp.c) */
        snprintf(what, wl, "the loss of step %" PRId64 " is not finite (%g over the %d replicas)", step + 1,
                 r->loss_global, r->replicas);
        f |= V_LOSS;
    }
    for (int i = 0; i < d->nparams; i++) {
        const pg_param_desc *p = &d->params[i];
        if (p->is_buffer || p->owner != d->stage)
            continue;
        double s = r->norms[p->index];
        if (!isfinite(s)) {
            if (!f)
                snprintf(what, wl, "the gradient of %s in step %" PRId64 " is not finite (its sum of squares is %g)",
                         p->name, step + 1, s);
            f |= V_GRAD;
            break;
        }
    }
    return f;
}

int pg_guard_findings(pg_run *r, int64_t step, int seg)
{
    const pg_stage_desc *d = r->d;
    int np = d->nmodel_params;
    /* Without clipping, a gradient's sum of squares only tells whether it is
     * finite (a finite float's square is finite in double, a non-finite one's
     * is not): where the gradients lie in host memory (the CPU backend) their
     * bits are tested instead, a vectorized pass where the sum in index order
     * is a chain of dependent additions, and the sum is made only of a
     * gradient found not finite (its message prints it); but on a step the
     * log line shows, every sum is made: the verdicts carry them to the loss
     * stage, whose log line prints their norm (step.c). */
    int test_bits = !(d->train.grad_clip > 0) && !pg_run_logged(r, step) && !strcmp(pg_backend_name(), "cpu");
    memset(r->norms, 0, (size_t)np * sizeof(double));
    for (int i = 0; i < d->nparams; i++) {
        const pg_param_desc *p = &d->params[i];
        size_t bad;
        if (p->is_buffer || p->owner != d->stage ||
            (test_bits && !pg_guard_finite((const float *)(r->A + p->grad_off), (size_t)p->numel, &bad)))
            continue;
        /* one run of compute (pg_ops.h): a backend that defers the sums (CUDA: one graph
         * of them from the second step) reads them all back at once below, not one by one */
        int rep = pg_backend_compute(r->ctx, seg, &r->norms[p->index]);
        if (rep < 0 || (!rep && pg_sumsq(r->ctx, p->numel, (const float *)(r->A + p->grad_off), &r->norms[p->index])))
            return 1;
    }
    if (pg_backend_compute_end(r->ctx) || pg_backend_fetch(r->ctx))
        return 1;
    memcpy(r->norm_in, r->norms, (size_t)np * sizeof(double)); /* every other stage's come with its verdict */
    r->v_mine = local_findings(r, step, r->v_what, sizeof r->v_what);
    r->v_all = r->v_mine;
    r->v_who = r->v_mine ? d->stage : -1;
    uint64_t w = r->v_mine; /* the message: the word's bits, then this stage's sums of squares */
    memcpy(&r->v_msg[0], &w, sizeof w);
    memcpy(&r->v_msg[1], r->norms, (size_t)np * sizeof(double));
    r->verdict_state = 1;
    return 0;
}

/* The message's size: the word and a sum of squares per model parameter. */
static size_t verdict_bytes(const pg_stage_desc *d) { return (size_t)(1 + d->nmodel_params) * sizeof(double); }

/* 0 when x names another stage and carries a verdict message; else 1 after saying so. */
static int verdict_action_ok(const pg_run *r, int a, const pg_step_action *x)
{
    const pg_stage_desc *d = r->d;
    if (x->peer >= 0 && x->peer < d->nstages && x->peer != d->stage && (size_t)x->bytes == verdict_bytes(d) &&
        r->verdict_state >= 1)
        return 0;
    fprintf(stderr, "stage %d: action %d %s (peer %d, %lld bytes) does not fit this stage's verdict (%zu bytes, after "
                    "its VERDICT)\n", d->stage, a, pg_step_kind_name(x->kind), x->peer, (long long)x->bytes,
            verdict_bytes(d));
    return 1;
}

int pg_guard_give(pg_run *r, int a, const pg_step_action *x, int64_t step)
{
    if (verdict_action_ok(r, a, x))
        return 1;
    if (pg_net_send(r->net, x->peer, x->tag, r->v_msg, verdict_bytes(r->d))) {
        fprintf(stderr, "stage %d: sending the verdict on step %" PRId64 " to stage %d failed: %s\n", r->d->stage,
                step + 1, x->peer, pg_net_error(r->net));
        return 1;
    }
    return 0;
}

int pg_guard_take(pg_run *r, int a, const pg_step_action *x, int64_t step)
{
    const pg_stage_desc *d = r->d;
    int k = x->peer;
    if (verdict_action_ok(r, a, x))
        return 1;
    double *in = r->v_msg + 1 + d->nmodel_params; /* the second half of the buffer */
    pg_net_status st = pg_net_recv(r->net, k, x->tag, in, verdict_bytes(d), r->opt.timeout_s);
    if (st == PG_NET_TIMEOUT) {
        fprintf(stderr, "stage %d waiting for the verdict on step %" PRId64 " from stage %d for %g s (stage %d has "
                        "not finished the step: its own message says what it waits for)\n",
                d->stage, step + 1, k, r->opt.timeout_s, k);
        return 1;
    }
    if (st) {
        fprintf(stderr, "stage %d: receiving the verdict on step %" PRId64 " from stage %d failed: %s\n", d->stage,
                step + 1, k, pg_net_error(r->net));
        return 1;
    }
    uint64_t w;
    memcpy(&w, &in[0], sizeof w);
    if (w && (r->v_who < 0 || k < r->v_who))
        r->v_who = k;
    r->v_all |= w;
    for (int p = 0; p < d->nmodel_params; p++) /* the sums of squares of what k owns */
        if (d->model_params[p].owner == k)
            r->norm_in[p] = in[1 + p];
    return 0;
}

int pg_guard_decide(pg_run *r, int a, const pg_step_action *x, int64_t step)
{
    const pg_stage_desc *d = r->d;
    if (r->verdict_state == 2)
        return 0;
    if (r->verdict_state != 1) {
        fprintf(stderr, "stage %d: action %d %s comes before the step's VERDICT: this stage's action table cannot "
                        "have been made by pipegen (regenerate it)\n", d->stage, a, pg_step_kind_name(x ? x->kind : -1));
        return 1;
    }
    r->verdict_state = 2;
    uint64_t all = r->v_all;
    r->step_verdict = !all ? PG_VERDICT_OK : r->opt.skip_nonfinite ? PG_VERDICT_SKIP : PG_VERDICT_STOP;
    r->step_bad = (int)all;
    if (r->v_mine && r->step_verdict == PG_VERDICT_STOP)
        fprintf(stderr,
                "stage %d: %s: stopping before the optimizer; check the data and the learning rate, or pass "
                "--skip-nonfinite to skip such steps\n",
                d->stage, r->v_what);
    else if (r->v_mine)
        fprintf(stderr, "stage %d: %s: skipping the step on every stage (--skip-nonfinite)\n", d->stage, r->v_what);
    else if (r->step_verdict == PG_VERDICT_STOP)
        fprintf(stderr, "stage %d: stopping: stage %d found the %s of step %" PRId64 " not finite\n", d->stage,
                r->v_who, all & V_LOSS ? "loss" : "gradients", step + 1);
    return 0;
}

/* ---- signals ------------------------------------------------------------------ */

/* The one piece of state a signal handler may touch. */
static struct {
    volatile sig_atomic_t caught; /* SIGINT or SIGTERM received, 0 if none (SIGHUP counts as SIGTERM) */
} sigstate;

static void on_stop_signal(int sig)
{
    if (sig == SIGHUP) /* the terminal closed: stop as SIGTERM does, after the checkpoint */
        sig = SIGTERM;
    if (sigstate.caught)
        pg_io_stop_now(sig); /* a second one: the user will not wait for the checkpoint */
    sigstate.caught = sig;
}

void pg_guard_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

int pg_guard_stop_agree(pg_run *r, int64_t step, int *sig)
{
    const pg_stage_desc *d = r->d;
    uint64_t mine = (uint64_t)sigstate.caught, all = mine;
    uint32_t up = PG_TAG(PG_TAG_STOP, 0, 0), down = PG_TAG(PG_TAG_STOP, 0, 1);
    pg_net_status st = PG_NET_OK;
    int base = r->replica * d->nstages, peer = base; /* ranks, for the message */
    if (d->stage != 0) {
        if ((st = pg_net_send(r->net, 0, up, &mine, sizeof mine)) == PG_NET_OK)
            st = pg_net_recv(r->net, 0, down, &all, sizeof all, r->opt.timeout_s);
    } else {
        for (int k = 1; k < d->nstages && !st; k++) {
            uint64_t v;
            peer = base + k;
            if (!(st = pg_net_recv(r->net, k, up, &v, sizeof v, r->opt.timeout_s)) && v && !all)
                all = v;
        }
        /* replicas: replica 0's stage 0 decides for every replica, so all stop after the same step */
        for (int q = 1; q < r->replicas && r->replica == 0 && !st; q++) {
            uint64_t v;
            peer = q * d->nstages;
            if (!(st = pg_net_recv_rank(r->net, peer, up, &v, sizeof v, r->opt.timeout_s)) && v && !all)
                all = v;
        }
        for (int q = 1; q < r->replicas && r->replica == 0 && !st; q++) {
            peer = q * d->nstages;
            st = pg_net_send_rank(r->net, peer, down, &all, sizeof all);
        }
        if (r->replica > 0 && !st) {
            peer = 0;
            if ((st = pg_net_send_rank(r->net, 0, up, &all, sizeof all)) == PG_NET_OK)
                st = pg_net_recv_rank(r->net, 0, down, &all, sizeof all, r->opt.timeout_s);
        }
        for (int k = 1; k < d->nstages && !st; k++) {
            peer = base + k;
            st = pg_net_send(r->net, k, down, &all, sizeof all);
        }
    }
    if (st) {
        fprintf(stderr, "stage %d: after step %" PRId64 ": the stop exchange with %s %d failed: %s\n", d->stage,
                step, r->replicas > 1 ? "rank" : "stage", peer, pg_net_error(r->net));
        return 1;
    }
    *sig = (int)all;
    return 0;
}

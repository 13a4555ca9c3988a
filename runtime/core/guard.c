/* runtime/core/guard.c — see guard.h. */
#include "guard.h"
#include "checkpoint.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ---- memory ---------------------------------------------------------------- */

/* MemAvailable in bytes, or 0 when unknown. */
static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024u;
}

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

int pg_guard_memory(const pg_stage_desc *d, char *err, size_t errlen)
{
    uint64_t need = (uint64_t)d->arena_bytes, avail = mem_available();
    if (avail && need > avail) {
        snprintf(err, errlen,
                 "stage %d: its arena needs %" PRIu64 " bytes (%.2f GiB) but this machine has only %" PRIu64
                 " bytes (%.2f GiB) available (MemAvailable): use more stages, a smaller batch or more micro-batches "
                 "(see `pipegen plan`)",
                 d->stage, need, gib(need), avail, gib(avail));
        return -1;
    }
    static const int lims[2] = {RLIMIT_AS, RLIMIT_DATA};
    static const char *const names[2] = {"RLIMIT_AS (ulimit -v)", "RLIMIT_DATA (ulimit -d)"};
    for (int i = 0; i < 2; i++) {
        struct rlimit rl;
        if (getrlimit(lims[i], &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && need > (uint64_t)rl.rlim_cur) {
            snprintf(err, errlen,
                     "stage %d: its arena needs %" PRIu64 " bytes (%.2f GiB) but %s allows this process only %" PRIu64
                     " bytes (%.2f GiB)",
                     d->stage, need, gib(need), names[i], (uint64_t)rl.rlim_cur, gib((uint64_t)rl.rlim_cur));
            return -1;
        }
    }
    return 0;
}

/* ---- token ids ----------------------------------------------------------- */

int pg_guard_ids(const pg_datafile *f, int64_t vocab, const char *path, const char *what, const char *limit,
                 char *err, size_t errlen)
{
    if (f->dtype != 2 || vocab <= 0)
        return 0;
    const int32_t *v = f->data;
    uint64_t n = f->samples * f->sample_elems;
    for (uint64_t i = 0; i < n; i++)
        if (v[i] < 0 || (int64_t)v[i] >= vocab) {
            snprintf(err, errlen,
                     "%s: sample %" PRIu64 ", element %" PRIu64 " is %s %" PRId32 ", outside [0, %" PRId64
                     "): the model's %s is %" PRId64,
                     path, i / f->sample_elems, i % f->sample_elems, what, v[i], vocab, limit, vocab);
            return -1;
        }
    return 0;
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

/* ---- non-finite loss -------------------------------------------------------- */

int pg_guard_verdict_send(pg_run *r, int64_t step)
{
    const pg_stage_desc *d = r->d;
    int bad = -1;
    for (int mb = 0; mb < d->nmb && bad < 0; mb++)
        if (!isfinite(r->loss[mb]))
            bad = mb;
    r->step_verdict = bad < 0 ? PG_VERDICT_OK : r->opt.skip_nonfinite ? PG_VERDICT_SKIP : PG_VERDICT_STOP;
    if (bad >= 0 && r->step_verdict == PG_VERDICT_STOP)
        fprintf(stderr,
                "stage %d: the loss of step %" PRId64 " is not finite (%g in micro-batch %d): stopping before the "
                "optimizer; check the data and the learning rate, or pass --skip-nonfinite to skip such steps\n",
                d->stage, step + 1, r->loss[bad], bad);
    else if (bad >= 0)
        fprintf(stderr, "stage %d: the loss of step %" PRId64 " is not finite (%g in micro-batch %d): skipping the "
                        "step on every stage (--skip-nonfinite)\n",
                d->stage, step + 1, r->loss[bad], bad);
    uint64_t v = (uint64_t)r->step_verdict;
    for (int k = 0; k < d->nstages; k++)
        if (k != d->stage && pg_net_send(r->net, k, PG_TAG(PG_TAG_VERDICT, 0, 0), &v, sizeof v)) {
            fprintf(stderr, "stage %d: sending the loss verdict of step %" PRId64 " to stage %d failed: %s\n", d->stage,
                    step + 1, k, pg_net_error(r->net));
            return 1;
        }
    return 0;
}

int pg_guard_verdict_recv(pg_run *r, int64_t step)
{
    const pg_stage_desc *d = r->d;
    uint64_t v = 0;
    pg_net_status st = pg_net_recv(r->net, r->loss_stage, PG_TAG(PG_TAG_VERDICT, 0, 0), &v, sizeof v, r->opt.timeout_s);
    if (st) {
        if (st == PG_NET_TIMEOUT)
            fprintf(stderr, "stage %d waiting for the loss verdict of step %" PRId64 " from stage %d for %g s\n",
                    d->stage, step + 1, r->loss_stage, r->opt.timeout_s);
        else
            fprintf(stderr, "stage %d: receiving the loss verdict of step %" PRId64 " from stage %d failed: %s\n",
                    d->stage, step + 1, r->loss_stage, pg_net_error(r->net));
        return 1;
    }
    r->step_verdict = v <= PG_VERDICT_STOP ? (int)v : PG_VERDICT_STOP;
    if (r->step_verdict == PG_VERDICT_STOP)
        fprintf(stderr, "stage %d: stopping: stage %d found the loss of step %" PRId64 " not finite\n", d->stage,
                r->loss_stage, step + 1);
    return 0;
}

/* ---- signals ------------------------------------------------------------------ */

/* The one piece of state a signal handler may touch. */
static struct {
    volatile sig_atomic_t caught; /* SIGINT or SIGTERM received, 0 if none */
} sigstate;

static void on_stop_signal(int sig)
{
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
}

int pg_guard_stop_agree(pg_run *r, int64_t step, int *sig)
{
    const pg_stage_desc *d = r->d;
    uint64_t mine = (uint64_t)sigstate.caught, all = mine;
    uint32_t up = PG_TAG(PG_TAG_STOP, 0, 0), down = PG_TAG(PG_TAG_STOP, 0, 1);
    pg_net_status st = PG_NET_OK;
    int peer = 0;
    if (d->stage != 0) {
        if ((st = pg_net_send(r->net, 0, up, &mine, sizeof mine)) == PG_NET_OK)
            st = pg_net_recv(r->net, 0, down, &all, sizeof all, r->opt.timeout_s);
    } else {
        for (int k = 1; k < d->nstages && !st; k++) {
            uint64_t v;
            peer = k;
            if (!(st = pg_net_recv(r->net, k, up, &v, sizeof v, r->opt.timeout_s)) && v && !all)
                all = v;
        }
        for (int k = 1; k < d->nstages && !st; k++) {
            peer = k;
            st = pg_net_send(r->net, k, down, &all, sizeof all);
        }
    }
    if (st) {
        fprintf(stderr, "stage %d: after step %" PRId64 ": the stop exchange with stage %d failed: %s\n", d->stage,
                step, peer, pg_net_error(r->net));
        return 1;
    }
    *sig = (int)all;
    return 0;
}

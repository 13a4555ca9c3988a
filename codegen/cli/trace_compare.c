/* codegen/cli/trace_compare.c — `pipegen trace`'s measured against simulated,
 * action by action. The prediction's simulation (predict.c: the same
 * schedule, the same costs) gives every action of every stage a span from the
 * end of the stage's action before it (the first: from the end of its batch
 * loading) to its own end, its waits included, as the runtime records its
 * spans (runtime/core/trace.c: contiguous); the trace gives the measured span
 * of the same action (args.action) in every step used. Per stage, summed by
 * what the action is and divided by the steps: F, B, W; the sends; the
 * receives split at the start of the send each meets (before it the receiver
 * waited for its peer to get there, time that the peer's own actions
 * explain; after it the message's transit and the receive's own cost); the
 * local work of the step's end (VERDICT, GRAD_NORM, OPT_STEP); the time
 * before the first and after the last action. A column where the measured
 * time exceeds the simulated one is what the simulation does not know. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/trace_data.h"
#include "schedule/sched_internal.h"
#include "schedule/sched_sim.h"
#include "schedule/svg.h"

enum { CMP_F, CMP_B, CMP_W, CMP_SEND, CMP_PEER, CMP_MSG, CMP_WORK, CMP_AROUND, CMP__COUNT };
static const char *const cmp_name[CMP__COUNT] = { "F", "B", "W", "sends", "receives: waiting for the peer's send",
                                                  "after it", "the step's end work", "before and after the actions" };

static int cmp_of(pg_act_kind k)
{
    if (k == PG_FWD)
        return CMP_F;
    if (k == PG_BWD_B)
        return CMP_B;
    if (k == PG_BWD_W)
        return CMP_W;
    if (pg_act_is_send(k))
        return CMP_SEND;
    if (pg_act_is_recv(k))
        return CMP_PEER; /* split into CMP_PEER and CMP_MSG */
    return CMP_WORK;     /* VERDICT, GRAD_NORM, OPT_STEP */
}

/* peer[st][i], at[st][i]: for a receive, the stage and index of the send it
 * meets (the n-th receive from a peer meets the peer's n-th send to it: the
 * verified FIFO per pair); -1 for the other actions. */
static int match_sends(const pg_schedule *s, int **peer, int **at)
{
    for (int st = 0; st < s->nstages; st++)
        for (int i = 0; i < s->stage[st].n; i++) {
            const pg_act *a = &s->stage[st].act[i];
            peer[st][i] = at[st][i] = -1;
            if (!pg_act_is_recv(a->kind) || a->peer < 0 || a->peer >= s->nstages)
                continue;
            int nth = 0;
            for (int k = 0; k < i; k++)
                nth += pg_act_is_recv(s->stage[st].act[k].kind) && s->stage[st].act[k].peer == a->peer;
            const pg_stage_sched *q = &s->stage[a->peer];
            for (int k = 0; k < q->n; k++)
                if (pg_act_is_send(q->act[k].kind) && q->act[k].peer == st && nth-- == 0) {
                    peer[st][i] = a->peer;
                    at[st][i] = k;
                    break;
                }
        }
    return 0;
}

/* The action's span split into its parts: all of it in its group, a
 * receive's in CMP_PEER up to the matching send's start and CMP_MSG after. */
static void add_span(double *row, pg_act_kind k, double t0, double t1, double send_t0)
{
    double span = t1 - t0;
    int g = cmp_of(k);
    if (g != CMP_PEER) {
        row[g] += span;
        return;
    }
    double wait = send_t0 - t0;
    wait = wait < 0 ? 0 : wait > span ? span : wait;
    row[CMP_PEER] += wait;
    row[CMP_MSG] += span - wait;
}

/* The simulated spans of one step, from the finished run sim, into
 * sim_[st * CMP__COUNT + g]. */
static void simulated_spans(const pg_sim *sim, const pg_schedule *s, const pg_sched_costs *c, int **peer, int **at,
                            double *sim_)
{
    for (int st = 0; st < s->nstages; st++) {
        double *row = sim_ + (size_t)st * CMP__COUNT, prev = c->step_start[st];
        for (int i = 0; i < s->stage[st].n; i++) {
            pg_act_kind k = s->stage[st].act[i].kind;
            int msg = pg_act_is_send(k) || pg_act_is_recv(k);
            double end = sim->start[st][i] + (msg ? sim->own[st][i] : sim->dur[st][i]);
            add_span(row, k, prev, end, peer[st][i] >= 0 ? sim->start[peer[st][i]][at[st][i]] : prev);
            prev = end;
        }
        row[CMP_AROUND] = c->step_start[st] + c->step_end[st];
    }
}

/* The replay of one step: sim (a finished run of the prediction) run again
 * with span(st, i) as each local action's time and each send's cost to its
 * stage, the measured time before the first action (pre[st]) and after the
 * last (post[st]); message transit and receive costs stay the predicted
 * ones, and every wait is the simulation's. Its step, or -1. */
static double replay(pg_sim *sim, const pg_schedule *s, const pg_sched_costs *c, double (*span)(void *, int, int),
                     void *arg, const double *pre, const double *post)
{
    pg_sched_costs cc = *c;
    for (int st = 0; st < s->nstages; st++) {
        cc.step_start[st] = pre[st];
        cc.step_end[st] = post[st];
        for (int i = 0; i < s->stage[st].n; i++) {
            pg_act_kind k = s->stage[st].act[i].kind;
            if (pg_act_is_send(k))
                sim->own[st][i] = span(arg, st, i);
            else if (!pg_act_is_recv(k))
                sim->dur[st][i] = span(arg, st, i);
        }
    }
    sim->clock0 = cc.step_start;
    pg_sim_free(sim);
    double t = pg_sim_run(sim) == SIM_OK ? pg_sim_step_time(sim, &cc) : -1.0;
    sim->clock0 = c->step_start; /* cc goes out of scope */
    return t;
}

/* The measured spans of step index j (a replay's span()), or their means
 * over the steps used (j < 0). */
typedef struct measured {
    const tev **ix;
    int np, nmax, j;
    double *mean; /* [np * nmax] */
} measured;

static double measured_span(void *arg, int st, int i)
{
    const measured *x = arg;
    if (x->j < 0)
        return x->mean[(size_t)st * (size_t)x->nmax + (size_t)i];
    const tev *e = x->ix[((size_t)x->j * (size_t)x->np + (size_t)st) * (size_t)x->nmax + (size_t)i];
    return e->t1 - e->t0;
}

/* Where the trace and the schedule differ, said on out; 0 when they agree:
 * every stage's actions, in every step, of the schedule's kinds. */
static int mismatch(const trace *t, const pg_schedule *s, const tev **ix, int nmax, FILE *out)
{
    int ns = t->last - t->first + 1;
    for (int j = 0; j < ns; j++)
        for (int st = 0; st < s->nstages; st++)
            for (int i = 0; i < s->stage[st].n; i++) {
                const tev *e = ix[((size_t)j * (size_t)s->nstages + (size_t)st) * (size_t)nmax + (size_t)i];
                if (!e) {
                    fprintf(out, "measured against simulated: not shown: step %d of stage %d has no event of action %d "
                                 "(a trace of another schedule, or of a runtime that did not write args.action)\n",
                            t->first + j, st, i);
                    return 1;
                }
                if (e->kind != (int)s->stage[st].act[i].kind) {
                    fprintf(out, "measured against simulated: not shown: stage %d's action %d is %s in the trace but %s "
                                 "in the model's schedule (a trace of another schedule?)\n",
                            st, i, e->kind >= 0 && e->kind < PG_STEP_KIND_COUNT ? pg_act_name((pg_act_kind)e->kind) : "?",
                            pg_act_name(s->stage[st].act[i].kind));
                    return 1;
                }
            }
    return 0;
}

/* Step index j's measured span over the stages: the earliest start of a
 * stage's step to the latest end (the step lines' measured step). */
static double step_of(const tev **stp, int np, int j)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int st = 0; st < np; st++) {
        const tev *e = stp[(size_t)j * (size_t)np + (size_t)st];
        if (e && e->t0 < lo)
            lo = e->t0;
        if (e && e->t1 > hi)
            hi = e->t1;
    }
    return hi > lo ? hi - lo : 0.0;
}

int trace_compare(const trace *t, const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, FILE *out)
{
    if (t->replicas > 1) {
        fprintf(out, "measured against simulated: not shown for a pp x dp trace (the simulation is of one replica)\n");
        return 0;
    }
    int np = s->nstages, ns = t->last - t->first + 1, nmax = 1, rc = -1;
    for (int st = 0; st < np; st++)
        nmax = s->stage[st].n > nmax ? s->stage[st].n : nmax;
    if ((double)ns * np * nmax > (double)(1 << 26)) {
        fprintf(out, "measured against simulated: not shown: %d steps x %d actions: too many\n", ns, nmax);
        return 0;
    }
    const tev **ix = calloc((size_t)ns * (size_t)np * (size_t)nmax, sizeof *ix);
    const tev **stp = calloc((size_t)ns * (size_t)np, sizeof *stp), **around = calloc((size_t)ns * (size_t)np * 2, sizeof *around);
    int **peer = calloc((size_t)np, sizeof *peer), **at = calloc((size_t)np, sizeof *at);
    double *meas = calloc((size_t)np * CMP__COUNT, sizeof *meas), *sim = calloc((size_t)np * CMP__COUNT, sizeof *sim);
    double *whole = calloc((size_t)np, sizeof *whole), *mean = calloc((size_t)np * (size_t)nmax, sizeof *mean);
    double *pre = calloc((size_t)np * 2, sizeof *pre), *post = pre + np, *mpre = calloc((size_t)np * 2, sizeof *mpre);
    double *mpost = mpre ? mpre + np : NULL;
    pg_sim run;
    memset(&run, 0, sizeof run);
    if (!ix || !stp || !around || !peer || !at || !meas || !sim || !whole || !mean || !pre || !mpre)
        goto out;
    for (int st = 0; st < np; st++)
        if (!(peer[st] = malloc((size_t)nmax * sizeof **peer)) || !(at[st] = malloc((size_t)nmax * sizeof **at)))
            goto out;
    for (int i = 0; i < t->n; i++) { /* each stage's events of each step: its actions, its step, DATA and END */
        const tev *e = &t->ev[i];
        if (e->row >= np || e->step < t->first || e->step > t->last)
            continue;
        size_t js = (size_t)(e->step - t->first) * (size_t)np + (size_t)e->row;
        if (e->kind == -1)
            stp[js] = e;
        else if (e->kind == PG_TIMELINE_DATA || e->kind == PG_TIMELINE_END)
            around[2 * js + (e->kind == PG_TIMELINE_END)] = e;
        else if (e->kind >= 0 && e->kind < PG_STEP_KIND_COUNT && e->action >= 0 && e->action < s->stage[e->row].n)
            ix[js * (size_t)nmax + (size_t)e->action] = e;
    }
    if (mismatch(t, s, ix, nmax, out)) {
        rc = 0;
        goto out;
    }
    match_sends(s, peer, at);
    if (pg_sim_run_timed(&run, m, s, c) != SIM_OK) { /* the prediction above ran it: only memory fails here */
        fprintf(out, "measured against simulated: not shown: the simulation did not finish\n");
        rc = 0;
        goto out;
    }
    simulated_spans(&run, s, c, peer, at, sim);
    int used = 0;
    double replayed = 0, step_span = 0;
    for (int j = 0; j < ns; j++) {
        if (t->first + j == 1 && ns > 1)
            continue; /* the run's first step warms up, as in the lines above */
        used++;
        for (int st = 0; st < np; st++) {
            size_t js = (size_t)j * (size_t)np + (size_t)st;
            double *row = meas + (size_t)st * CMP__COUNT;
            for (int i = 0; i < s->stage[st].n; i++) {
                const tev *e = ix[js * (size_t)nmax + (size_t)i], *snd = NULL;
                mean[(size_t)st * (size_t)nmax + (size_t)i] += e->t1 - e->t0;
                if (peer[st][i] >= 0)
                    snd = ix[((size_t)j * (size_t)np + (size_t)peer[st][i]) * (size_t)nmax + (size_t)at[st][i]];
                add_span(row, s->stage[st].act[i].kind, e->t0, e->t1, snd ? snd->t0 : e->t0);
            }
            for (int k = 0; k < 2; k++) {
                double d = around[2 * js + k] ? around[2 * js + k]->t1 - around[2 * js + k]->t0 : 0.0;
                row[CMP_AROUND] += d;
                (k ? post : pre)[st] = d;
                (k ? mpost : mpre)[st] += d;
            }
            if (stp[js])
                whole[st] += stp[js]->t1 - stp[js]->t0;
        }
        measured x = { ix, np, nmax, j, mean };
        double r = replay(&run, s, c, measured_span, &x, pre, post);
        if (r < 0)
            goto replay_failed;
        replayed += r;
        step_span += step_of(stp, np, j);
    }
    if (used) {
        for (size_t k = 0; k < (size_t)np * (size_t)nmax; k++)
            mean[k] /= used;
        for (int st = 0; st < np; st++) {
            mpre[st] /= used;
            mpost[st] /= used;
        }
        measured x = { ix, np, nmax, -1, mean };
        double rm = replay(&run, s, c, measured_span, &x, mpre, mpost);
        if (rm < 0)
            goto replay_failed;
        char a[48], b[48];
        trace_fmt_time(a, sizeof a, replayed / used);
        trace_fmt_time(b, sizeof b, rm);
        fprintf(out, "replayed (the simulation with each traced step's own measured F/B/W, sends and step's end work; "
                     "transit and receives as predicted): %s, measured/replayed %.3f; with each action's mean over the "
                     "steps instead: %s, replayed/that %.3f\n",
                a, replayed > 0 ? step_span / replayed : 0.0, b, rm > 0 ? replayed / used / rm : 0.0);
    }
    fprintf(out, "measured (simulated) per step, action by action (each from the end of the one before; simulated by "
                 "the prediction's costs):\n");
    for (int st = 0; st < np && used; st++) {
        char a[48], b[48];
        double tot = 0;
        fprintf(out, "stage %d:", st);
        for (int g = 0; g < CMP__COUNT; g++) {
            double mv = meas[(size_t)st * CMP__COUNT + g] / used, sv = sim[(size_t)st * CMP__COUNT + g];
            tot += sv;
            trace_fmt_time(a, sizeof a, mv);
            trace_fmt_time(b, sizeof b, sv);
            fprintf(out, "%s %s %s (%s)", g == 0 ? "" : ",", cmp_name[g], a, b);
        }
        trace_fmt_time(a, sizeof a, whole[st] / used);
        trace_fmt_time(b, sizeof b, tot);
        fprintf(out, "; its step %s (%s)\n", a, b);
    }
    rc = 0;
    goto out;
replay_failed: /* the same schedule finished above: only a wait the replayed times cannot meet */
    fprintf(out, "measured against simulated: not shown: a replay of the measured times did not finish\n");
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "pipegen: out of memory\n");
    pg_sim_timed_free(&run);
    free(mean);
    free(pre);
    free(mpre);
    for (int st = 0; st < np; st++) {
        if (peer)
            free(peer[st]);
        if (at)
            free(at[st]);
    }
    free(peer);
    free(at);
    free(ix);
    free(stp);
    free(around);
    free(meas);
    free(sim);
    free(whole);
    return rc;
}

/* codegen/schedule/sched_sim.c — the all-stages simulation behind verify and predict.
 * Stages advance in turn as far as they can until all finish or none can
 * move. With non-blocking sends the outcome (and every timestamp) does not
 * depend on the order in which stages are advanced. */
#include <stdlib.h>
#include <string.h>
#include "schedule/sched_sim.h"

typedef struct sim_msg {
    int stage, idx;  /* the sending action */
    double arrive;
} sim_msg;

typedef struct sim_fifo {
    int head, n, cap;
    sim_msg *msg;
} sim_fifo;

typedef struct sim_lent {
    int to, k;                      /* the message: fifo (stage, to), index k */
    int slot;
} sim_lent;

typedef struct sim_ctx {
    pg_sim *sim;
    int p;
    sim_fifo *fifo;                 /* [src * p + dst] */
    int pushed;                     /* a message was sent (progress even if the action blocks) */
    sim_lent *lent[PG_SCHED_MAX_STAGES]; /* lend_slot: each stage's lent messages not yet known taken */
    int nlent[PG_SCHED_MAX_STAGES], lent_cap[PG_SCHED_MAX_STAGES];
} sim_ctx;

int pg_sim_match(const pg_act *send, const pg_act *recv)
{
    switch (recv->kind) {
    case PG_RECV_ACT:
        return send->kind == PG_SEND_ACT && send->mb == recv->mb && send->chunk + 1 == recv->chunk;
    case PG_RECV_GRAD:
        return send->kind == PG_SEND_GRAD && send->mb == recv->mb && send->chunk - 1 == recv->chunk;
    case PG_RECV_SKIP:
        return send->kind == PG_SEND_SKIP && send->mb == recv->mb && send->skip == recv->skip;
    case PG_RECV_SKIP_GRAD:
        return send->kind == PG_SEND_SKIP_GRAD && send->mb == recv->mb && send->skip == recv->skip;
    case PG_TIE_RECV:
        return send->kind == PG_TIE_SEND && send->param == recv->param;
    case PG_TIE_GRAD_RECV:
        return send->kind == PG_TIE_GRAD_SEND && send->param == recv->param;
    case PG_TIE_SUM_RECV:
        return send->kind == PG_TIE_SUM_SEND && send->param == recv->param;
    case PG_VERDICT_RECV:
        return send->kind == PG_VERDICT_SEND;
    default:
        return 0;
    }
}

static double dur_of(const sim_ctx *c, int st, int idx)
{
    return c->sim->dur ? c->sim->dur[st][idx] : 0.0;
}

static int push(sim_ctx *c, int from, int to, int idx)
{
    sim_fifo *f = &c->fifo[from * c->p + to];
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 16;
        sim_msg *m = realloc(f->msg, (size_t)cap * sizeof *m);
        if (!m)
            return -1;
        f->msg = m;
        f->cap = cap;
    }
    f->msg[f->n++] = (sim_msg){ from, idx, c->sim->clock[from] + dur_of(c, from, idx) };
    c->pushed = 1;
    return 0;
}

/* Step results. */
enum { STEP_BLOCKED, STEP_MOVED, STEP_FAILED };

/* lend_slot: remember the message stage st just pushed as lent from slot. -1: out of memory. */
static int lend(sim_ctx *c, int st, int to, int slot)
{
    if (c->nlent[st] == c->lent_cap[st]) {
        int cap = c->lent_cap[st] ? 2 * c->lent_cap[st] : 16;
        sim_lent *l = realloc(c->lent[st], (size_t)cap * sizeof *l);
        if (!l)
            return -1;
        c->lent[st] = l;
        c->lent_cap[st] = cap;
    }
    c->lent[st][c->nlent[st]++] = (sim_lent){ to, c->fifo[st * c->p + to].n - 1, slot };
    return 0;
}

/* lend_slot: may stage st run a compute action of `slot` (-1: any)? Every
 * lent message of that slot must have been taken by its receiver; those are
 * forgotten. STEP_MOVED or STEP_BLOCKED (wait_for: the receiver). */
static int lent_taken(sim_ctx *c, int st, int slot)
{
    for (int i = 0; i < c->nlent[st]; i++) {
        const sim_lent *l = &c->lent[st][i];
        if ((slot < 0 || l->slot == slot) && l->k >= c->fifo[st * c->p + l->to].head) {
            c->sim->wait_for[st] = l->to;
            return STEP_BLOCKED;
        }
    }
    int n = 0;
    for (int i = 0; i < c->nlent[st]; i++)
        if (!(slot < 0 || c->lent[st][i].slot == slot))
            c->lent[st][n++] = c->lent[st][i];
    c->nlent[st] = n;
    return STEP_MOVED;
}

/* Receive on stage st, current action idx, from stage `from`. */
static int take(sim_ctx *c, int st, int idx, int from)
{
    pg_sim *sim = c->sim;
    sim_fifo *f = &c->fifo[from * c->p + st];
    if (f->head == f->n) {
        sim->wait_for[st] = from;
        return STEP_BLOCKED;
    }
    sim_msg *msg = &f->msg[f->head];
    const pg_act *send = &sim->s->stage[msg->stage].act[msg->idx];
    const pg_act *recv = &sim->s->stage[st].act[idx];
    if (!pg_sim_match(send, recv)) {
        sim->status = SIM_MISMATCH;
        sim->recv = (pg_sim_ref){ st, idx };
        sim->send = (pg_sim_ref){ msg->stage, msg->idx };
        return STEP_FAILED;
    }
    f->head++;
    if (msg->arrive > sim->clock[st])
        sim->clock[st] = msg->arrive;
    return STEP_MOVED;
}

/* Try to complete the current action of stage st. -1: out of memory. */
static int step(sim_ctx *c, int st)
{
    pg_sim *sim = c->sim;
    int idx = sim->pc[st];
    const pg_act *a = &sim->s->stage[st].act[idx];
    int r;
    if (pg_act_is_send(a->kind)) {
        if (push(c, st, a->peer, idx) != 0)
            return -1;
        if (sim->lend_slot && sim->lend_slot[st][idx] >= 0 && lend(c, st, a->peer, sim->lend_slot[st][idx]) != 0)
            return -1;
        r = STEP_MOVED;
    } else if (pg_act_is_recv(a->kind)) {
        r = take(c, st, idx, a->peer);
    } else if (sim->lend_slot && pg_act_is_compute(a->kind) &&
               lent_taken(c, st, sim->lend_slot[st][idx]) == STEP_BLOCKED) {
        r = STEP_BLOCKED;
    } else {
        double d = dur_of(c, st, idx);
        sim->clock[st] += d;
        if (pg_act_is_compute(a->kind))
            sim->busy[st] += d;
        r = STEP_MOVED;
    }
    if (r == STEP_MOVED) {
        int message = pg_act_is_send(a->kind) || pg_act_is_recv(a->kind);
        if (sim->start) /* a local action (compute, VERDICT, GRAD_NORM, OPT_STEP) began dur ago */
            sim->start[st][idx] = sim->clock[st] - (message ? 0.0 : dur_of(c, st, idx));
        if (sim->own && message)
            sim->clock[st] += sim->own[st][idx];
        sim->pc[st]++;
        sim->wait_for[st] = -1;
    }
    return r;
}

static void free_fifos(sim_ctx *c)
{
    if (c->fifo)
        for (int i = 0; i < c->p * c->p; i++)
            free(c->fifo[i].msg);
    free(c->fifo);
    for (int st = 0; st < PG_SCHED_MAX_STAGES; st++)
        free(c->lent[st]);
}

static int collect_unreceived(sim_ctx *c)
{
    pg_sim *sim = c->sim;
    int n = 0;
    for (int i = 0; i < c->p * c->p; i++)
        n += c->fifo[i].n - c->fifo[i].head;
    if (n == 0)
        return 0;
    sim->left = malloc((size_t)n * sizeof *sim->left);
    if (!sim->left)
        return -1;
    for (int from = 0; from < c->p; from++)
        for (int to = 0; to < c->p; to++) {
            sim_fifo *f = &c->fifo[from * c->p + to];
            for (int k = f->head; k < f->n; k++)
                sim->left[sim->nleft++] = (pg_sim_ref){ from, f->msg[k].idx };
        }
    /* stage, then action order: insertion sort (few messages in practice) */
    for (int i = 1; i < sim->nleft; i++) {
        pg_sim_ref x = sim->left[i];
        int j = i;
        while (j > 0 && (sim->left[j - 1].stage > x.stage ||
                         (sim->left[j - 1].stage == x.stage && sim->left[j - 1].idx > x.idx))) {
            sim->left[j] = sim->left[j - 1];
            j--;
        }
        sim->left[j] = x;
    }
    return n;
}

pg_sim_status pg_sim_run(pg_sim *sim)
{
    const pg_schedule *s = sim->s;
    sim_ctx c = { .sim = sim, .p = s->nstages };
    sim->status = SIM_OK;
    sim->nleft = 0;
    sim->left = NULL;
    for (int st = 0; st < PG_SCHED_MAX_STAGES; st++) {
        sim->pc[st] = 0;
        sim->wait_for[st] = -1;
        sim->clock[st] = sim->busy[st] = 0;
        if (sim->clock0 && st < s->nstages)
            sim->clock[st] = sim->clock0[st];
    }
    if (c.p < 1 || c.p > PG_SCHED_MAX_STAGES)
        return sim->status = SIM_NOMEM;
    c.fifo = calloc((size_t)c.p * (size_t)c.p, sizeof *c.fifo);
    if (!c.fifo)
        return sim->status = SIM_NOMEM;
    int moved = 1, done = 0;
    while (moved && !done) {
        moved = 0;
        c.pushed = 0;
        done = 1;
        for (int st = 0; st < c.p; st++) {
            while (sim->pc[st] < s->stage[st].n) {
                int r = step(&c, st);
                if (r < 0) {
                    sim->status = SIM_NOMEM;
                    goto out;
                }
                if (r == STEP_FAILED)
                    goto out;
                if (r == STEP_BLOCKED)
                    break;
                moved = 1;
            }
            if (sim->pc[st] < s->stage[st].n)
                done = 0;
        }
        moved |= c.pushed;
    }
    if (!done)
        sim->status = SIM_DEADLOCK;
    else {
        int n = collect_unreceived(&c);
        if (n < 0)
            sim->status = SIM_NOMEM;
        else if (n > 0)
            sim->status = SIM_UNRECEIVED;
    }
out:
    free_fifos(&c);
    return sim->status;
}

void pg_sim_free(pg_sim *sim)
{
    free(sim->left);
    sim->left = NULL;
    sim->nleft = 0;
}

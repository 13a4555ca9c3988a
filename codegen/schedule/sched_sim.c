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

typedef struct sim_ctx {
    pg_sim *sim;
    int p;
    sim_fifo *fifo;                 /* [src * p + dst] */
    int sub[PG_SCHED_MAX_STAGES];   /* progress inside a collective action */
    int pushed;                     /* a message was sent (progress even if the action blocks) */
    int synced[PG_SCHED_MAX_STAGES];   /* passed its first GRAD_NORM / OPT_STEP (sim->verdict) */
    int arrived[PG_SCHED_MAX_STAGES];  /* reached its first GRAD_NORM / OPT_STEP */
    double arrive_at[PG_SCHED_MAX_STAGES]; /* when */
    int narrived;
} sim_ctx;

static int is_send(pg_act_kind k)
{
    return k == PG_SEND_ACT || k == PG_SEND_GRAD || k == PG_SEND_SKIP || k == PG_SEND_SKIP_GRAD ||
           k == PG_TIE_SEND || k == PG_TIE_GRAD_SEND;
}

static int is_recv(pg_act_kind k)
{
    return k == PG_RECV_ACT || k == PG_RECV_GRAD || k == PG_RECV_SKIP || k == PG_RECV_SKIP_GRAD ||
           k == PG_TIE_RECV || k == PG_TIE_GRAD_RECV;
}

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
    case PG_TIE_REDUCE:
        return send->kind == PG_TIE_REDUCE && send->param == recv->param;
    case PG_GRAD_NORM:
        return send->kind == PG_GRAD_NORM;
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

static int nth_stage(uint64_t mask, int p, int n)
{
    for (int s = 0; s < p && s < 64; s++)
        if ((mask >> s & 1) && n-- == 0)
            return s;
    return -1;
}

/* TIE_REDUCE: the lowest user receives from the others in stage order, then
 * sends the sum back to each; the others send, then receive. */
static int step_tie_reduce(sim_ctx *c, int st, int idx, const pg_act *a)
{
    uint64_t mask = c->sim->m->params[a->param].stage_mask;
    int root = nth_stage(mask, c->p, 0), nusers = 0;
    for (int s = 0; s < c->p && s < 64; s++)
        nusers += (int)(mask >> s & 1);
    int *sub = &c->sub[st];
    if (st != root) {
        if (*sub == 0) {
            if (push(c, st, root, idx) != 0)
                return -1;
            *sub = 1;
        }
        int r = take(c, st, idx, root);
        if (r == STEP_MOVED)
            *sub = 2;
        return r;
    }
    while (*sub < nusers - 1) {
        int r = take(c, st, idx, nth_stage(mask, c->p, *sub + 1));
        if (r != STEP_MOVED)
            return r;
        ++*sub;
    }
    for (int u = 1; u < nusers; u++)
        if (push(c, st, nth_stage(mask, c->p, u), idx) != 0)
            return -1;
    *sub = nusers;
    return STEP_MOVED;
}

/* GRAD_NORM: send to every other stage, then receive from each in order. */
static int step_grad_norm(sim_ctx *c, int st, int idx)
{
    int *sub = &c->sub[st];
    if (*sub == 0) {
        for (int o = 0; o < c->p; o++)
            if (o != st && push(c, st, o, idx) != 0)
                return -1;
        *sub = 1;
    }
    while (*sub < c->p) {
        int o = *sub - 1 < st ? *sub - 1 : *sub; /* the sub-th other stage */
        int r = take(c, st, idx, o);
        if (r != STEP_MOVED)
            return r;
        ++*sub;
    }
    return STEP_MOVED;
}

/* sim->verdict: the step's verdict (runtime/core/guard.c) is an exchange
 * among all stages at each one's first GRAD_NORM / OPT_STEP: a stage goes on
 * once every stage has arrived at its own, the last to arrive at once, the
 * others verdict_transit after it. STEP_MOVED when it may go on (its clock
 * advanced), STEP_BLOCKED while a stage has not arrived. */
static int verdict_wait(sim_ctx *c, int st, const pg_act *a)
{
    pg_sim *sim = c->sim;
    if (!sim->verdict || c->synced[st] || (a->kind != PG_GRAD_NORM && a->kind != PG_OPT_STEP))
        return STEP_MOVED;
    if (!c->arrived[st]) {
        c->arrived[st] = 1;
        c->arrive_at[st] = sim->clock[st];
        c->narrived++;
        c->pushed = 1;
    }
    if (c->narrived < c->p) {
        for (int o = 0; o < c->p; o++)
            if (!c->arrived[o]) {
                sim->wait_for[st] = o;
                break;
            }
        return STEP_BLOCKED;
    }
    int last = 0;
    for (int o = 1; o < c->p; o++)
        if (c->arrive_at[o] > c->arrive_at[last])
            last = o;
    double t = c->arrive_at[last] + (st == last ? 0.0 : sim->verdict_transit);
    if (t > sim->clock[st])
        sim->clock[st] = t;
    return STEP_MOVED;
}

/* Try to complete the current action of stage st. -1: out of memory. */
static int step(sim_ctx *c, int st)
{
    pg_sim *sim = c->sim;
    int idx = sim->pc[st];
    const pg_act *a = &sim->s->stage[st].act[idx];
    int r;
    if (verdict_wait(c, st, a) == STEP_BLOCKED)
        return STEP_BLOCKED;
    if (is_send(a->kind)) {
        if (push(c, st, a->peer, idx) != 0)
            return -1;
        r = STEP_MOVED;
    } else if (is_recv(a->kind)) {
        r = take(c, st, idx, a->peer);
    } else if (a->kind == PG_TIE_REDUCE) {
        r = step_tie_reduce(c, st, idx, a);
    } else if (a->kind == PG_GRAD_NORM) {
        r = step_grad_norm(c, st, idx);
    } else {
        double d = dur_of(c, st, idx);
        sim->clock[st] += d;
        if (pg_act_is_compute(a->kind))
            sim->busy[st] += d;
        r = STEP_MOVED;
    }
    if (r == STEP_MOVED) {
        if (sim->start)
            sim->start[st][idx] = sim->clock[st] - (pg_act_is_compute(a->kind) ? dur_of(c, st, idx) : 0.0);
        if (sim->own && !pg_act_is_compute(a->kind))
            sim->clock[st] += sim->own[st][idx];
        if (a->kind == PG_GRAD_NORM || a->kind == PG_OPT_STEP)
            c->synced[st] = 1;
        sim->pc[st]++;
        c->sub[st] = 0;
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

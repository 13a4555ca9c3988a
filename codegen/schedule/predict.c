/* codegen/schedule/predict.c — pg_schedule_predict: the verifier's simulation with a
 * clock, in the emitted order of each stage's actions (a RECV blocks, as in
 * the runtime). A compute action takes its chunk's cost; a message arrives
 * `latency + bytes / bandwidth` after its SEND began, and the SEND keeps its
 * sender busy `send_cost_latency + bytes / send_cost_bytes_per_s` (an
 * activation, gradient or skip send its stage's own measured mean, where the
 * profile has it: the stages pay apart, see cost.h); a RECV
 * waits for the arrival, then keeps its receiver busy `recv_cost_latency +
 * bytes / recv_cost_bytes_per_s` (a tie receive also its share of the
 * stage's measured folds and sums). The step's end is actions like the rest
 * (schedule_comms.c): VERDICT, GRAD_NORM and OPT_STEP take their stage's
 * measured times, the verdict and tie messages travel as messages. Each
 * stage starts at its step_start and ends step_end after its last action.
 * Message sizes come from the model: activations and their gradients by the
 * chunk's boundary shapes, skips by their shapes, tie messages by the
 * parameter's size, a verdict by 8 bytes and 8 per parameter. Step time is
 * the last stage's finish; a stage's bubble is the fraction of the step it
 * does no compute. */
#include <stdlib.h>
#include <string.h>
#include "schedule/sched_sim.h"

static int64_t rows_of(const ir_model *m, int mb, int nmb)
{
    int64_t b = m->train.batch > 0 ? m->train.batch : 0;
    return b / nmb + (mb < b % nmb ? 1 : 0);
}

static double elem_bytes(const ir_model *m)
{
    return m->train.precision == DT_BF16 ? 2.0 : 4.0;
}

/* Bytes one message of send action a carries (0 when the model has no layers). */
static double msg_bytes(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, const pg_act *a)
{
    if (!m->layers || m->nlayers == 0)
        return 0;
    double rows = a->mb >= 0 ? (double)rows_of(m, a->mb, s->nmb) : 1.0;
    switch (a->kind) {
    case PG_SEND_ACT: case PG_SEND_GRAD: {
        if (c->has_elems) /* known per chunk: no walk over the layers per message */
            return a->chunk >= 0 && a->chunk < 64
                       ? rows * (a->kind == PG_SEND_ACT ? c->out_elems[a->chunk] : c->in_elems[a->chunk]) * elem_bytes(m)
                       : 0;
        /* the chunk boundary: the last layer of chunk c (ACT) or the first layer
         * of chunk c (GRAD: gradient of its input) */
        const ir_layer *l = NULL;
        for (int i = 0; i < m->nlayers; i++)
            if (m->layers[i].chunk == a->chunk) {
                if (a->kind == PG_SEND_GRAD && !l)
                    l = &m->layers[i];
                if (a->kind == PG_SEND_ACT)
                    l = &m->layers[i];
            }
        if (!l)
            return 0;
        return rows * (double)pg_shape_numel(a->kind == PG_SEND_ACT ? &l->out : &l->in) * elem_bytes(m);
    }
    case PG_SEND_SKIP: case PG_SEND_SKIP_GRAD:
        if (a->skip < 0 || a->skip >= m->nskips)
            return 0;
        return rows * (double)pg_shape_numel(&m->skips[a->skip].shape) * elem_bytes(m);
    case PG_TIE_SEND: case PG_TIE_GRAD_SEND: case PG_TIE_SUM_SEND:
        if (a->param < 0 || a->param >= m->nparams)
            return 0;
        return (double)pg_shape_numel(&m->params[a->param].shape) * 4.0;
    case PG_VERDICT_SEND:
        return 8.0 * (1 + m->nparams);
    default:
        return 0;
    }
}

int pg_mb_recomputes(const ir_model *m, int mb, int nmb)
{
    return m->train.checkpoint == CKPT_ALWAYS || (m->train.checkpoint == CKPT_EXCEPT_LAST && mb < nmb - 1);
}

static int stage_ix(int st)
{
    return st >= 0 && st < 64 ? st : 0;
}

double pg_act_cost(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, int st, const pg_act *a)
{
    int ch = a->chunk >= 0 && a->chunk < 64 ? a->chunk : 0;
    switch (a->kind) {
    case PG_FWD: return c->fwd[ch];
    case PG_BWD_B: /* a checkpointed micro-batch first recomputes its forward (gen_prepare.c's rule) */
        return c->bwd_b[ch] + (c->recompute && a->mb >= 0 && pg_mb_recomputes(m, a->mb, s->nmb) ? c->rerun[ch] : 0);
    case PG_BWD_W: return c->bwd_w[ch];
    case PG_OPT_STEP: return c->opt[stage_ix(st)];
    case PG_GRAD_NORM: return c->grad_norm[stage_ix(st)];
    case PG_VERDICT: return c->verdict[stage_ix(st)];
    default: {
        double t = c->send_latency;
        if (c->send_bytes_per_s > 0)
            t += msg_bytes(m, s, c, a) / c->send_bytes_per_s;
        return t;
    }
    }
}

/* The SEND that a RECV meets, for its size. */
static pg_act sender_of(const pg_act *a)
{
    pg_act x = *a;
    x.kind = pg_act_send_kind(a->kind);
    if (a->kind == PG_RECV_ACT)
        x.chunk = a->chunk - 1;
    else if (a->kind == PG_RECV_GRAD)
        x.chunk = a->chunk + 1;
    return x;
}

/* The stage's tie receives (TIE_GRAD_RECV, TIE_SUM_RECV): c->tie is spread over them. */
static int tie_recvs(const pg_schedule *s, int st)
{
    int n = 0;
    for (int i = 0; st >= 0 && st < s->nstages && i < s->stage[st].n; i++)
        n += s->stage[st].act[i].kind == PG_TIE_GRAD_RECV || s->stage[st].act[i].kind == PG_TIE_SUM_RECV;
    return n;
}

/* An activation, gradient or skip message (what the profile's send costs are of). */
static int is_mb_send(pg_act_kind k)
{
    return k == PG_SEND_ACT || k == PG_SEND_GRAD || k == PG_SEND_SKIP || k == PG_SEND_SKIP_GRAD;
}

/* What send a of stage st costs its sender: the stage's own measured mean
 * for its micro-batches' messages where c has it, else the fit over all
 * stages' sends. */
static double send_own(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, int st, const pg_act *a)
{
    int k = stage_ix(st);
    if (c->has_send_own[k] && is_mb_send(a->kind))
        return c->send_own[k];
    return c->send_cost_latency + (c->send_cost_bytes_per_s > 0 ? msg_bytes(m, s, c, a) / c->send_cost_bytes_per_s : 0.0);
}

double pg_act_own_cost(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, int st, const pg_act *a)
{
    if (pg_act_is_send(a->kind))
        return send_own(m, s, c, st, a);
    if (pg_act_is_recv(a->kind)) {
        pg_act x = sender_of(a);
        double t = c->recv_cost_latency;
        if (c->recv_cost_bytes_per_s > 0)
            t += msg_bytes(m, s, c, &x) / c->recv_cost_bytes_per_s;
        if (a->kind == PG_TIE_GRAD_RECV || a->kind == PG_TIE_SUM_RECV)
            t += c->tie[stage_ix(st)] / tie_recvs(s, st);
        return t;
    }
    return 0;
}

static void setup_timed(pg_sim *sim, const ir_model *m, const pg_schedule *s, const pg_sched_costs *c)
{
    for (int st = 0; st < s->nstages; st++)
        for (int i = 0; i < s->stage[st].n; i++) {
            sim->dur[st][i] = pg_act_cost(m, s, c, st, &s->stage[st].act[i]);
            sim->own[st][i] = pg_act_own_cost(m, s, c, st, &s->stage[st].act[i]);
        }
    sim->clock0 = c->step_start;
}

pg_sim_status pg_sim_run_timed(pg_sim *sim, const ir_model *m, const pg_schedule *s, const pg_sched_costs *c)
{
    memset(sim, 0, sizeof *sim);
    sim->m = m;
    sim->s = s;
    int p = s->nstages;
    if (p < 1 || p > PG_SCHED_MAX_STAGES || !s->stage)
        return sim->status = SIM_NOMEM;
    sim->dur = calloc((size_t)p, sizeof *sim->dur);
    sim->own = calloc((size_t)p, sizeof *sim->own);
    sim->start = calloc((size_t)p, sizeof *sim->start);
    if (!sim->dur || !sim->own || !sim->start)
        return sim->status = SIM_NOMEM;
    for (int st = 0; st < p; st++) {
        size_t n = (size_t)(s->stage[st].n > 0 ? s->stage[st].n : 1);
        if (!(sim->dur[st] = calloc(n, sizeof **sim->dur)) || !(sim->own[st] = calloc(n, sizeof **sim->own)) ||
            !(sim->start[st] = calloc(n, sizeof **sim->start)))
            return sim->status = SIM_NOMEM;
    }
    setup_timed(sim, m, s, c);
    return pg_sim_run(sim);
}

void pg_sim_timed_free(pg_sim *sim)
{
    pg_sim_free(sim);
    double **arr[3] = { sim->dur, sim->own, sim->start };
    for (int k = 0; k < 3; k++) {
        for (int st = 0; arr[k] && st < sim->s->nstages; st++)
            free(arr[k][st]);
        free(arr[k]);
    }
    sim->dur = sim->own = sim->start = NULL;
}

double pg_sim_step_time(const pg_sim *sim, const pg_sched_costs *c)
{
    double t = 0;
    for (int st = 0; st < sim->s->nstages && st < 64; st++)
        if (sim->clock[st] + c->step_end[st] > t)
            t = sim->clock[st] + c->step_end[st];
    return t;
}

int pg_schedule_predict(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c,
                        pg_sched_prediction *out)
{
    memset(out, 0, sizeof *out);
    if (s->nstages < 1 || s->nstages > PG_SCHED_MAX_STAGES || !s->stage)
        return -1;
    pg_sim sim;
    int rc = -1;
    if (pg_sim_run_timed(&sim, m, s, c) == SIM_OK) {
        out->step_time = pg_sim_step_time(&sim, c);
        for (int st = 0; st < s->nstages; st++) {
            out->busy[st] = sim.busy[st];
            out->bubble[st] = out->step_time > 0 ? 1.0 - sim.busy[st] / out->step_time : 0.0;
        }
        rc = 0;
    }
    pg_sim_timed_free(&sim);
    return rc;
}

/* codegen/predict.c — pg_schedule_predict: the verifier's simulation with a
 * clock. A compute action takes its chunk's cost; a message arrives `latency +
 * bytes / bandwidth` after its SEND (the sender does not wait); a RECV waits
 * for the arrival. Message sizes come from the model: activations and their
 * gradients by the chunk's boundary shapes, skips by their shapes, tie
 * messages by the parameter's size, GRAD_NORM by 8 bytes per parameter.
 * Step time is the last stage's finish; a stage's bubble is the fraction of
 * the step it does no compute. */
#include <stdlib.h>
#include <string.h>
#include "sched_sim.h"

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
static double msg_bytes(const ir_model *m, const pg_schedule *s, const pg_act *a)
{
    if (!m->layers || m->nlayers == 0)
        return 0;
    double rows = a->mb >= 0 ? (double)rows_of(m, a->mb, s->nmb) : 1.0;
    switch (a->kind) {
    case A_SEND_ACT: case A_SEND_GRAD: {
        /* the chunk boundary: the last layer of chunk c (ACT) or the first layer
         * of chunk c (GRAD: gradient of its input) */
        const ir_layer *l = NULL;
        for (int i = 0; i < m->nlayers; i++)
            if (m->layers[i].chunk == a->chunk) {
                if (a->kind == A_SEND_GRAD && !l)
                    l = &m->layers[i];
                if (a->kind == A_SEND_ACT)
                    l = &m->layers[i];
            }
        if (!l)
            return 0;
        return rows * (double)pg_shape_numel(a->kind == A_SEND_ACT ? &l->out : &l->in) * elem_bytes(m);
    }
    case A_SEND_SKIP: case A_SEND_SKIP_GRAD:
        if (a->skip < 0 || a->skip >= m->nskips)
            return 0;
        return rows * (double)pg_shape_numel(&m->skips[a->skip].shape) * elem_bytes(m);
    case A_TIE_SEND: case A_TIE_GRAD_SEND: case A_TIE_REDUCE:
        if (a->param < 0 || a->param >= m->nparams)
            return 0;
        return (double)pg_shape_numel(&m->params[a->param].shape) * 4.0;
    case A_GRAD_NORM:
        return 8.0 * m->nparams;
    default:
        return 0;
    }
}

int pg_mb_recomputes(const ir_model *m, int mb, int nmb)
{
    return m->train.checkpoint == CKPT_ALWAYS || (m->train.checkpoint == CKPT_EXCEPT_LAST && mb < nmb - 1);
}

double pg_act_cost(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, const pg_act *a)
{
    int ch = a->chunk >= 0 && a->chunk < 64 ? a->chunk : 0;
    switch (a->kind) {
    case A_FWD: return c->fwd[ch];
    case A_BWD_B: /* a checkpointed micro-batch first recomputes its forward (emit.c's rule) */
        return c->bwd_b[ch] + (c->recompute && a->mb >= 0 && pg_mb_recomputes(m, a->mb, s->nmb) ? c->fwd[ch] : 0);
    case A_BWD_W: return c->bwd_w[ch];
    case A_OPT_STEP: return 0;
    default: {
        double t = c->send_latency;
        if (c->send_bytes_per_s > 0)
            t += msg_bytes(m, s, a) / c->send_bytes_per_s;
        return t;
    }
    }
}

int pg_schedule_predict(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c,
                        pg_sched_prediction *out)
{
    memset(out, 0, sizeof *out);
    if (s->nstages < 1 || s->nstages > PG_SCHED_MAX_STAGES || !s->stage)
        return -1;
    double **dur = calloc((size_t)s->nstages, sizeof *dur);
    int rc = -1;
    if (!dur)
        return -1;
    for (int st = 0; st < s->nstages; st++) {
        dur[st] = malloc((size_t)(s->stage[st].n > 0 ? s->stage[st].n : 1) * sizeof **dur);
        if (!dur[st])
            goto out;
        for (int i = 0; i < s->stage[st].n; i++)
            dur[st][i] = pg_act_cost(m, s, c, &s->stage[st].act[i]);
    }
    pg_sim sim = { .m = m, .s = s, .dur = dur };
    if (pg_sim_run(&sim) == SIM_OK) {
        for (int st = 0; st < s->nstages; st++)
            if (sim.clock[st] > out->step_time)
                out->step_time = sim.clock[st];
        for (int st = 0; st < s->nstages; st++) {
            out->busy[st] = sim.busy[st];
            out->bubble[st] = out->step_time > 0 ? 1.0 - sim.busy[st] / out->step_time : 0.0;
        }
        rc = 0;
    }
    pg_sim_free(&sim);
out:
    for (int st = 0; st < s->nstages; st++)
        free(dur[st]);
    free(dur);
    return rc;
}

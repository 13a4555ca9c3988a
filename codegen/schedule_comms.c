/* codegen/schedule_comms.c — pg_schedule_add_comms: turns lists of compute
 * actions into complete step programs.
 *
 * Around each compute action of stage s:
 *   FWD(c, mb):   RECV_ACT from stage(c-1) and RECV_SKIP of every skip popped in
 *                 c and stashed on another stage, before; SEND_ACT to stage(c+1)
 *                 and SEND_SKIP of every skip stashed in c and popped on another
 *                 stage, after (straight to the popping stage, no relay).
 *   BWD_B(c, mb): RECV_GRAD from stage(c+1) and RECV_SKIP_GRAD of skips stashed
 *                 in c before; SEND_GRAD to stage(c-1) and SEND_SKIP_GRAD of
 *                 skips popped in c after.
 * Only where the neighbour chunk lives on another stage. Chunk fields: SEND_ACT
 * and SEND_GRAD carry the sending chunk, RECV_ACT and RECV_GRAD the receiving
 * chunk; skip actions carry the chunk of the stash (SEND_SKIP, RECV_SKIP_GRAD)
 * or of the pop (RECV_SKIP, SEND_SKIP_GRAD) on their own stage.
 *
 * Per step, for a parameter used by two or more stages:
 *   transmit:  at the start the owner TIE_SENDs the value to each user in stage
 *              order, each user TIE_RECVs it first thing; at the end each user
 *              TIE_GRAD_SENDs its gradient and the owner TIE_GRAD_RECVs them in
 *              stage order, before its OPT_STEP.
 *   replicate: one TIE_REDUCE(param) on every using stage (peer = the lowest
 *              using stage). The runtime and the verifier treat it as: every
 *              other user sends its gradient to the lowest one, which adds them
 *              in stage order and sends the sum back to each.
 * Then GRAD_NORM on every stage when grad_clip > 0 (all stages exchange their
 * sums of squares), then OPT_STEP. */
#include <stdlib.h>
#include <string.h>
#include "sched_internal.h"

typedef struct comms_builder {
    const ir_model *m;
    const pg_schedule *s;
    pg_stage_sched out;
    int failed;
} comms_builder;

static void emit(comms_builder *b, pg_act_kind k, int mb, int chunk, int peer, int skip, int param)
{
    pg_act a = pg_act_make(k, mb, chunk);
    a.peer = peer;
    a.skip = skip;
    a.param = param;
    if (!b->failed && pg_sched_push(&b->out, a) != 0)
        b->failed = 1;
}

static int skip_stash_chunk(const ir_model *m, int k)
{
    return pg_layer_chunk(m, m->skips[k].stash_layer);
}

static int skip_pop_chunk(const ir_model *m, int k)
{
    return pg_layer_chunk(m, m->skips[k].pop_layer);
}

/* Parameters that need tie communication: used by two or more stages. */
static int is_cross_stage_tie(const ir_param *p)
{
    uint64_t mask = p->stage_mask;
    return p->tie != TIE_NONE && mask && (mask & (mask - 1));
}

static int lowest_stage(uint64_t mask)
{
    int s = 0;
    while (s < 63 && !(mask >> s & 1))
        s++;
    return s;
}

static void emit_compute(comms_builder *b, int st, const pg_act *a)
{
    const ir_model *m = b->m;
    const pg_schedule *s = b->s;
    int c = a->chunk, mb = a->mb, last = s->nchunks - 1;
    if (a->kind == A_FWD) {
        if (c > 0 && pg_chunk_stage(s, c - 1) != st)
            emit(b, A_RECV_ACT, mb, c, pg_chunk_stage(s, c - 1), -1, -1);
        for (int k = 0; k < m->nskips; k++) {
            int from = pg_chunk_stage(s, skip_stash_chunk(m, k));
            if (skip_pop_chunk(m, k) == c && from != st)
                emit(b, A_RECV_SKIP, mb, c, from, k, -1);
        }
    } else if (a->kind == A_BWD_B) {
        if (c < last && pg_chunk_stage(s, c + 1) != st)
            emit(b, A_RECV_GRAD, mb, c, pg_chunk_stage(s, c + 1), -1, -1);
        for (int k = 0; k < m->nskips; k++) {
            int from = pg_chunk_stage(s, skip_pop_chunk(m, k));
            if (skip_stash_chunk(m, k) == c && from != st)
                emit(b, A_RECV_SKIP_GRAD, mb, c, from, k, -1);
        }
    }
    if (!b->failed && pg_sched_push(&b->out, *a) != 0)
        b->failed = 1;
    if (a->kind == A_FWD) {
        if (c < last && pg_chunk_stage(s, c + 1) != st)
            emit(b, A_SEND_ACT, mb, c, pg_chunk_stage(s, c + 1), -1, -1);
        for (int k = 0; k < m->nskips; k++) {
            int to = pg_chunk_stage(s, skip_pop_chunk(m, k));
            if (skip_stash_chunk(m, k) == c && to != st)
                emit(b, A_SEND_SKIP, mb, c, to, k, -1);
        }
    } else if (a->kind == A_BWD_B) {
        if (c > 0 && pg_chunk_stage(s, c - 1) != st)
            emit(b, A_SEND_GRAD, mb, c, pg_chunk_stage(s, c - 1), -1, -1);
        for (int k = 0; k < m->nskips; k++) {
            int to = pg_chunk_stage(s, skip_stash_chunk(m, k));
            if (skip_pop_chunk(m, k) == c && to != st)
                emit(b, A_SEND_SKIP_GRAD, mb, c, to, k, -1);
        }
    }
}

static void emit_step_start(comms_builder *b, int st)
{
    const ir_model *m = b->m;
    for (int i = 0; i < m->nparams; i++) {
        const ir_param *p = &m->params[i];
        if (!is_cross_stage_tie(p) || p->tie != TIE_TRANSMIT || !(p->stage_mask >> st & 1))
            continue;
        int owner = lowest_stage(p->stage_mask);
        if (st == owner) {
            for (int u = owner + 1; u < b->s->nstages && u < 64; u++)
                if (p->stage_mask >> u & 1)
                    emit(b, A_TIE_SEND, -1, -1, u, -1, i);
        } else {
            emit(b, A_TIE_RECV, -1, -1, owner, -1, i);
        }
    }
}

static void emit_step_end(comms_builder *b, int st)
{
    const ir_model *m = b->m;
    for (int i = 0; i < m->nparams; i++) {
        const ir_param *p = &m->params[i];
        if (!is_cross_stage_tie(p) || p->tie != TIE_TRANSMIT || !(p->stage_mask >> st & 1))
            continue;
        int owner = lowest_stage(p->stage_mask);
        if (st == owner) {
            for (int u = owner + 1; u < b->s->nstages && u < 64; u++)
                if (p->stage_mask >> u & 1)
                    emit(b, A_TIE_GRAD_RECV, -1, -1, u, -1, i);
        } else {
            emit(b, A_TIE_GRAD_SEND, -1, -1, owner, -1, i);
        }
    }
    for (int i = 0; i < m->nparams; i++) {
        const ir_param *p = &m->params[i];
        if (is_cross_stage_tie(p) && p->tie == TIE_REPLICATE && (p->stage_mask >> st & 1))
            emit(b, A_TIE_REDUCE, -1, -1, lowest_stage(p->stage_mask), -1, i);
    }
    if (m->train.grad_clip > 0)
        emit(b, A_GRAD_NORM, -1, -1, -1, -1, -1);
    emit(b, A_OPT_STEP, -1, -1, -1, -1, -1);
}

int pg_schedule_add_comms(const ir_model *m, pg_schedule *s)
{
    for (int st = 0; st < s->nstages; st++) {
        pg_stage_sched *ss = &s->stage[st];
        comms_builder b = { m, s, { 0 }, 0 };
        emit_step_start(&b, st);
        for (int i = 0; i < ss->n; i++)
            if (pg_act_is_compute(ss->act[i].kind))
                emit_compute(&b, st, &ss->act[i]);
        emit_step_end(&b, st);
        if (b.failed) {
            free(b.out.act);
            return -1;
        }
        free(ss->act);
        ss->act = b.out.act;
        ss->n = b.out.n;
        ss->cap = b.out.cap;
    }
    return 0;
}

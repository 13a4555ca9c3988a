/* codegen/schedule/schedule_comms.c — pg_schedule_add_comms: turns lists of compute
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
 * Per step, for a parameter used by two or more stages (owner: the lowest
 * using stage; users: the others):
 *   transmit:  at the start the owner TIE_SENDs the value to each user in stage
 *              order, each user TIE_RECVs it first thing.
 *   both:      a user TIE_GRAD_SENDs its gradient accumulators to the owner as
 *              soon as they are final: after its last BWD_W of a chunk that
 *              uses the parameter (and after the messages the owner receives
 *              from it before: the sends are ordered as the owner receives,
 *              below); the owner TIE_GRAD_RECVs them in stage order after all
 *              its compute (the first one folds its own uses).
 *   replicate: after its VERDICT the owner TIE_SUM_SENDs the summed gradient
 *              (summed over the replicas too) to each user, which
 *              TIE_SUM_RECVs it into its copy's gradient before it clips and
 *              steps; so every copy steps alike.
 * Then each stage's end: VERDICT (its gradients final: local folds, the sum
 * over the replicas; their sums of squares; its findings), VERDICT_SEND to
 * every other stage, the TIE_SUM_SENDs it owes, then from every other stage
 * in stage order the TIE_SUM_RECVs that stage owes it and its VERDICT_RECV,
 * GRAD_NORM when grad_clip > 0 (local: the norm of every stage's sums), and
 * OPT_STEP. Every send of the step's end comes before the stage's first
 * receive of it, so the last stage to finish its backward finds every other
 * stage's messages waiting.
 *
 * Messages between two stages travel in one ordered stream, and a stage may
 * receive them in another order than its peer made them: with interleaved or
 * V placement a skip stashed in chunk a and popped in chunk b of a later round
 * is made with a's output of that micro-batch but received after b's input
 * of later micro-batches. So, last, each RECV is paired with its SEND by
 * identity (kind, micro-batch, chunk or skip) and each stage's sends to a peer
 * are put in the order that peer receives them: a send waits in the list
 * until the messages the peer takes before it are sent (never earlier than
 * what it sends is made). Sends do not block, so the wait adds no dependency
 * the receiver did not have; the slots keep what a late send reads alive
 * (pg_assign_slots). */
#include <stdlib.h>
#include <string.h>
#include "schedule/sched_internal.h"

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

/* A user's TIE_GRAD_SENDs of the parameters whose gradients the compute
 * action a (the index-th of the stage's compute list in) finishes: a is the
 * stage's last BWD_W of the chunks that use them (or, when no layer of the
 * stage names the parameter, its last BWD_W). */
static void emit_tie_grads_final(comms_builder *b, int st, const pg_stage_sched *in, int index)
{
    const ir_model *m = b->m;
    if (in->act[index].kind != PG_BWD_W)
        return;
    for (int i = 0; i < m->nparams; i++) {
        const ir_param *p = &m->params[i];
        int owner = lowest_stage(p->stage_mask);
        if (!is_cross_stage_tie(p) || st == owner || !(p->stage_mask >> st & 1))
            continue;
        int last = -1, last_w = -1;
        for (int j = 0; j < in->n; j++)
            if (in->act[j].kind == PG_BWD_W) {
                last_w = j;
                if (pg_chunk_uses_param(m, in->act[j].chunk, i))
                    last = j;
            }
        if ((last >= 0 ? last : last_w) == index)
            emit(b, PG_TIE_GRAD_SEND, -1, -1, owner, -1, i);
    }
}

static void emit_compute(comms_builder *b, int st, const pg_act *a)
{
    const ir_model *m = b->m;
    const pg_schedule *s = b->s;
    int c = a->chunk, mb = a->mb, last = s->nchunks - 1;
    if (a->kind == PG_FWD) {
        if (c > 0 && pg_chunk_stage(s, c - 1) != st)
            emit(b, PG_RECV_ACT, mb, c, pg_chunk_stage(s, c - 1), -1, -1);
        for (int k = 0; k < m->nskips; k++) {
            int from = pg_chunk_stage(s, skip_stash_chunk(m, k));
            if (skip_pop_chunk(m, k) == c && from != st)
                emit(b, PG_RECV_SKIP, mb, c, from, k, -1);
        }
    } else if (a->kind == PG_BWD_B) {
        if (c < last && pg_chunk_stage(s, c + 1) != st)
            emit(b, PG_RECV_GRAD, mb, c, pg_chunk_stage(s, c + 1), -1, -1);
        for (int k = 0; k < m->nskips; k++) {
            int from = pg_chunk_stage(s, skip_pop_chunk(m, k));
            if (skip_stash_chunk(m, k) == c && from != st)
                emit(b, PG_RECV_SKIP_GRAD, mb, c, from, k, -1);
        }
    }
    if (!b->failed && pg_sched_push(&b->out, *a) != 0)
        b->failed = 1;
    if (a->kind == PG_FWD) {
        if (c < last && pg_chunk_stage(s, c + 1) != st)
            emit(b, PG_SEND_ACT, mb, c, pg_chunk_stage(s, c + 1), -1, -1);
        for (int k = 0; k < m->nskips; k++) {
            int to = pg_chunk_stage(s, skip_pop_chunk(m, k));
            if (skip_stash_chunk(m, k) == c && to != st)
                emit(b, PG_SEND_SKIP, mb, c, to, k, -1);
        }
    } else if (a->kind == PG_BWD_B) {
        if (c > 0 && pg_chunk_stage(s, c - 1) != st)
            emit(b, PG_SEND_GRAD, mb, c, pg_chunk_stage(s, c - 1), -1, -1);
        for (int k = 0; k < m->nskips; k++) {
            int to = pg_chunk_stage(s, skip_stash_chunk(m, k));
            if (skip_pop_chunk(m, k) == c && to != st)
                emit(b, PG_SEND_SKIP_GRAD, mb, c, to, k, -1);
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
                    emit(b, PG_TIE_SEND, -1, -1, u, -1, i);
        } else {
            emit(b, PG_TIE_RECV, -1, -1, owner, -1, i);
        }
    }
}

/* The owner of a parameter tied across stages, -1 when it is not (or st does not use it). */
static int tie_owner_for(const ir_param *p, int st)
{
    return is_cross_stage_tie(p) && (p->stage_mask >> st & 1) ? lowest_stage(p->stage_mask) : -1;
}

static void emit_step_end(comms_builder *b, int st)
{
    const ir_model *m = b->m;
    int P = b->s->nstages;
    for (int i = 0; i < m->nparams; i++) /* the owner adds its users' accumulators, in stage order */
        if (tie_owner_for(&m->params[i], st) == st)
            for (int u = st + 1; u < P && u < 64; u++)
                if (m->params[i].stage_mask >> u & 1)
                    emit(b, PG_TIE_GRAD_RECV, -1, -1, u, -1, i);
    emit(b, PG_VERDICT, -1, -1, -1, -1, -1);
    for (int o = 0; o < P; o++)
        if (o != st)
            emit(b, PG_VERDICT_SEND, -1, -1, o, -1, -1);
    for (int i = 0; i < m->nparams; i++) /* replicate: the sum back to every user */
        if (tie_owner_for(&m->params[i], st) == st && m->params[i].tie == TIE_REPLICATE)
            for (int u = st + 1; u < P && u < 64; u++)
                if (m->params[i].stage_mask >> u & 1)
                    emit(b, PG_TIE_SUM_SEND, -1, -1, u, -1, i);
    for (int o = 0; o < P; o++) { /* from each other stage as it sent them: its verdict, then its sums */
        if (o == st)
            continue;
        emit(b, PG_VERDICT_RECV, -1, -1, o, -1, -1);
        for (int i = 0; i < m->nparams; i++)
            if (tie_owner_for(&m->params[i], st) == o && m->params[i].tie == TIE_REPLICATE)
                emit(b, PG_TIE_SUM_RECV, -1, -1, o, -1, i);
    }
    if (m->train.grad_clip > 0)
        emit(b, PG_GRAD_NORM, -1, -1, -1, -1, -1);
    emit(b, PG_OPT_STEP, -1, -1, -1, -1, -1);
}

/* ---- sends in the order their peers receive them ---------------------------- */

static int is_mb_send(pg_act_kind k)
{
    return k == PG_SEND_ACT || k == PG_SEND_GRAD || k == PG_SEND_SKIP || k == PG_SEND_SKIP_GRAD;
}

static int is_mb_recv(pg_act_kind k)
{
    return k == PG_RECV_ACT || k == PG_RECV_GRAD || k == PG_RECV_SKIP || k == PG_RECV_SKIP_GRAD;
}

/* A per-micro-batch message by what it is, the same at both ends: the send's
 * kind, the micro-batch, the sending chunk (activations, gradients) or the skip. */
typedef struct msg_id {
    pg_act_kind kind;
    int mb, x;
} msg_id;

static msg_id id_of_send(const pg_act *a)
{
    msg_id id = { a->kind, a->mb, a->kind == PG_SEND_SKIP || a->kind == PG_SEND_SKIP_GRAD ? a->skip : a->chunk };
    return id;
}

static msg_id id_of_recv(const pg_act *a)
{
    msg_id id = { PG_SEND_ACT, a->mb, a->chunk - 1 };
    switch (a->kind) {
    case PG_RECV_GRAD: id.kind = PG_SEND_GRAD, id.x = a->chunk + 1; break;
    case PG_RECV_SKIP: id.kind = PG_SEND_SKIP, id.x = a->skip; break;
    case PG_RECV_SKIP_GRAD: id.kind = PG_SEND_SKIP_GRAD, id.x = a->skip; break;
    default: break;
    }
    return id;
}

static int id_eq(msg_id a, msg_id b)
{
    return a.kind == b.kind && a.mb == b.mb && a.x == b.x;
}

/* One stage's per-micro-batch sends to one peer: the order the peer receives
 * them in (want), and the sends made but held back (held, indices into the
 * stage's actions); and its TIE_GRAD_SENDs to the peer held back (ties): the
 * owner receives them after every per-micro-batch message, so they follow
 * the last of those. */
typedef struct send_queue {
    msg_id *want;
    int nwant, next;
    int *held;
    int nheld;
    int *ties;
    int nties;
} send_queue;

/* Emit the held TIE_GRAD_SENDs once every per-micro-batch message the peer
 * wants is out (all: whatever is left, at the step's end). */
static int release_ties(send_queue *q, const pg_stage_sched *in, pg_stage_sched *out, int all)
{
    if (!all && (q->next < q->nwant || q->nheld))
        return 0;
    for (int t = 0; t < q->nties; t++)
        if (pg_sched_push(out, in->act[q->ties[t]]) != 0)
            return -1;
    q->nties = 0;
    return 0;
}

/* Emit the held sends the peer takes next, as long as there are such. */
static int release(send_queue *q, const pg_stage_sched *in, pg_stage_sched *out)
{
    for (int found = 1; found && q->next < q->nwant;) {
        found = 0;
        for (int h = 0; h < q->nheld; h++)
            if (id_eq(id_of_send(&in->act[q->held[h]]), q->want[q->next])) {
                if (pg_sched_push(out, in->act[q->held[h]]) != 0)
                    return -1;
                q->held[h] = q->held[--q->nheld];
                q->next++;
                found = 1;
                break;
            }
    }
    return 0;
}

/* Emit every held send, in the order they were made (what the peer never
 * asks for, or asks for out of reach: the verifier reports it). */
static int release_all(send_queue *q, const pg_stage_sched *in, pg_stage_sched *out)
{
    /* held[] lost its order when sends were taken out: sort by action index */
    for (int i = 1; i < q->nheld; i++)
        for (int j = i; j > 0 && q->held[j - 1] > q->held[j]; j--) {
            int t = q->held[j];
            q->held[j] = q->held[j - 1];
            q->held[j - 1] = t;
        }
    for (int h = 0; h < q->nheld; h++)
        if (pg_sched_push(out, in->act[q->held[h]]) != 0)
            return -1;
    q->nheld = 0;
    return 0;
}

static int order_stage_sends(pg_schedule *s, int st)
{
    int p = s->nstages, rc = -1;
    pg_stage_sched *in = &s->stage[st], out = { 0 };
    send_queue *q = calloc((size_t)p, sizeof *q);
    if (!q)
        return -1;
    for (int r = 0; r < p; r++) {
        const pg_stage_sched *rs = &s->stage[r];
        if (r == st)
            continue;
        q[r].want = malloc((size_t)(rs->n > 0 ? rs->n : 1) * sizeof *q[r].want);
        q[r].held = malloc((size_t)(in->n > 0 ? in->n : 1) * sizeof *q[r].held);
        q[r].ties = malloc((size_t)(in->n > 0 ? in->n : 1) * sizeof *q[r].ties);
        if (!q[r].want || !q[r].held || !q[r].ties)
            goto out;
        for (int i = 0; i < rs->n; i++)
            if (is_mb_recv(rs->act[i].kind) && rs->act[i].peer == st)
                q[r].want[q[r].nwant++] = id_of_recv(&rs->act[i]);
    }
    for (int i = 0; i < in->n; i++) {
        const pg_act *a = &in->act[i];
        int r = a->peer;
        if (is_mb_send(a->kind) && r >= 0 && r < p && r != st) {
            q[r].held[q[r].nheld++] = i;
            if (release(&q[r], in, &out) != 0 || release_ties(&q[r], in, &out, 0) != 0)
                goto out;
            continue;
        }
        if (a->kind == PG_TIE_GRAD_SEND && r >= 0 && r < p && r != st) {
            q[r].ties[q[r].nties++] = i;
            if (release_ties(&q[r], in, &out, 0) != 0)
                goto out;
            continue;
        }
        /* the step's end (everything but the compute, its messages and the
         * step start's tie values): nothing held may pass it */
        if (!pg_act_is_compute(a->kind) && !is_mb_recv(a->kind) && a->kind != PG_TIE_SEND && a->kind != PG_TIE_RECV)
            for (int r2 = 0; r2 < p; r2++)
                if (r2 != st && (release_all(&q[r2], in, &out) != 0 || release_ties(&q[r2], in, &out, 1) != 0))
                    goto out;
        if (pg_sched_push(&out, *a) != 0)
            goto out;
    }
    for (int r = 0; r < p; r++)
        if (r != st && (release_all(&q[r], in, &out) != 0 || release_ties(&q[r], in, &out, 1) != 0))
            goto out;
    free(in->act);
    in->act = out.act;
    in->n = out.n;
    in->cap = out.cap;
    out.act = NULL;
    rc = 0;
out:
    free(out.act);
    for (int r = 0; r < p; r++) {
        free(q[r].want);
        free(q[r].held);
        free(q[r].ties);
    }
    free(q);
    return rc;
}

static int order_sends(pg_schedule *s)
{
    for (int st = 0; st < s->nstages; st++)
        if (order_stage_sends(s, st) != 0)
            return -1;
    return 0;
}

int pg_schedule_add_comms(const ir_model *m, pg_schedule *s)
{
    for (int st = 0; st < s->nstages; st++) {
        pg_stage_sched *ss = &s->stage[st];
        comms_builder b = { m, s, { 0 }, 0 };
        emit_step_start(&b, st);
        for (int i = 0; i < ss->n; i++)
            if (pg_act_is_compute(ss->act[i].kind)) {
                emit_compute(&b, st, &ss->act[i]);
                emit_tie_grads_final(&b, st, ss, i);
            }
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
    return order_sends(s);
}

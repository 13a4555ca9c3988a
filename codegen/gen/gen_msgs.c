/* codegen/gen/gen_msgs.c — every message a stage sends or receives: the arena
 * offset, byte count and tag of its SEND/RECV actions (activations, gradients,
 * skips, tie values and gradients), and the bytes each link carries per step. */
#include <stdlib.h>

#include "gen/gen_internal.h"

/* A tie action of the stage: what it sends or receives (the runtime does the
 * arithmetic; see runtime/core/step.c), and the bytes it adds to each link.
 *  TIE_SEND/TIE_RECV (transmit): the value, owner -> user, into the user's copy;
 *  TIE_GRAD_SEND/RECV: the user's nacc gradient accumulators -> the owner's
 *  workspace; with replicate, when the tie check is on, the user also sends a
 *  hash of its stepped copy after the step (8 bytes);
 *  TIE_SUM_SEND/RECV (replicate): the summed gradient, owner -> user, into
 *  the user's first accumulator. */
static int plan_tie_message(pg_gen *g, em_stage *S, int a, pg_diag *d)
{
    const ir_model *m = g->m;
    const pg_act *A = &g->s->stage[S->stage].act[a];
    int p = A->param, s = S->stage;
    if (p < 0 || p >= m->nparams || S->param_mp[p] < 0 || S->grad_mp[p] < 0 || A->peer < 0 || A->peer >= g->nstages) {
        char buf[160];
        pg_error(d, m->loc, "schedule: stage %d action %d %s names a parameter this stage does not train", s, a,
                 pg_act_str(A, buf, sizeof buf));
        return -1;
    }
    const ir_param *P = &m->params[p];
    int64_t vb = pg_shape_numel(&P->shape) * 4;
    int64_t poff = S->mp.buf[S->param_mp[p]].offset, goff = S->mp.buf[S->grad_mp[p]].offset;
    /* the runtime's tags: PG_TAG(sending kind, param, 0) */
    S->act_tag[a] = PG_TAG(pg_act_send_kind(A->kind), p, 0);
    switch (A->kind) {
    case PG_TIE_SEND:
        S->act_off[a] = poff, S->act_bytes[a] = vb;
        S->send_bytes[A->peer] += vb;
        break;
    case PG_TIE_RECV:
        S->act_off[a] = poff, S->act_bytes[a] = vb;
        break;
    case PG_TIE_GRAD_SEND:
        S->act_off[a] = goff, S->act_bytes[a] = acc_block_bytes(P, nacc_of(g, s, p));
        S->send_bytes[A->peer] += S->act_bytes[a] + (P->tie == TIE_REPLICATE ? 8 : 0);
        break;
    case PG_TIE_GRAD_RECV:
        S->act_off[a] = S->ws_mp >= 0 ? S->mp.buf[S->ws_mp].offset : -1;
        S->act_bytes[a] = acc_block_bytes(P, nacc_of(g, A->peer, p));
        break;
    case PG_TIE_SUM_SEND:
        S->act_off[a] = goff, S->act_bytes[a] = vb;
        S->send_bytes[A->peer] += vb;
        break;
    default: /* PG_TIE_SUM_RECV */
        S->act_off[a] = goff, S->act_bytes[a] = vb;
        break;
    }
    return 0;
}

/* SEND/RECV: arena offset, bytes and tag of every message of the stage. */
int plan_messages(pg_gen *g, em_stage *S, pg_diag *d)
{
    const ir_model *m = g->m;
    const pg_stage_sched *ss = &g->s->stage[S->stage];
    for (int a = 0; a < ss->n; a++) {
        const pg_act *A = &ss->act[a];
        S->act_slot[a] = A->slot;
        S->act_off[a] = -1;
        S->act_bytes[a] = 0;
        S->act_tag[a] = 0;
        int mb = A->mb, c = A->chunk, sb = -1, slot = -1, sendk = -1, x = 0;
        int64_t numel = 0;
        em_chunk *ch = NULL;
        switch (A->kind) {
        case PG_SEND_ACT: case PG_RECV_ACT: case PG_SEND_GRAD: case PG_RECV_GRAD:
            ch = find_chunk(S, c);
            if (!ch)
                break;
            slot = stage_fwd_slot(S, g->s->nmb, c, mb);
            if (A->kind == PG_SEND_ACT) sb = ch->y_slot, sendk = PG_SEND_ACT, x = c, numel = ch->tens[ch->lout[ch->last - ch->first]].numel;
            if (A->kind == PG_RECV_ACT) sb = ch->x_slot, sendk = PG_SEND_ACT, x = c - 1, numel = ch->tens[0].numel;
            if (A->kind == PG_SEND_GRAD) sb = ch->dx_slot, sendk = PG_SEND_GRAD, x = c, numel = ch->tens[0].numel;
            if (A->kind == PG_RECV_GRAD) sb = ch->dy_slot, sendk = PG_SEND_GRAD, x = c + 1, numel = ch->tens[ch->lout[ch->last - ch->first]].numel;
            break;
        case PG_SEND_SKIP: case PG_RECV_SKIP: case PG_SEND_SKIP_GRAD: case PG_RECV_SKIP_GRAD: {
            if (A->skip < 0 || A->skip >= m->nskips)
                break;
            const ir_skip *sk = &m->skips[A->skip];
            int sc = m->layers[sk->stash_layer].chunk, pc = m->layers[sk->pop_layer].chunk;
            int own = (A->kind == PG_SEND_SKIP || A->kind == PG_RECV_SKIP_GRAD) ? sc : pc;
            ch = find_chunk(S, own);
            if (!ch)
                break;
            slot = stage_fwd_slot(S, g->s->nmb, own, mb);
            x = A->skip;
            numel = pg_shape_numel(&sk->shape);
            if (A->kind == PG_SEND_SKIP) sb = ch->skout[A->skip], sendk = PG_SEND_SKIP;
            if (A->kind == PG_RECV_SKIP) sb = ch->skin[A->skip], sendk = PG_SEND_SKIP;
            if (A->kind == PG_SEND_SKIP_GRAD) sb = ch->skgout[A->skip], sendk = PG_SEND_SKIP_GRAD;
            if (A->kind == PG_RECV_SKIP_GRAD) sb = ch->skgin[A->skip], sendk = PG_SEND_SKIP_GRAD;
            break;
        }
        case PG_TIE_SEND: case PG_TIE_RECV: case PG_TIE_GRAD_SEND: case PG_TIE_GRAD_RECV: case PG_TIE_SUM_SEND:
        case PG_TIE_SUM_RECV:
            if (plan_tie_message(g, S, a, d))
                return -1;
            continue;
        case PG_VERDICT_SEND: case PG_VERDICT_RECV: /* the runtime's own buffer: the word, then a sum of squares per parameter */
            S->act_bytes[a] = 8 * (1 + (int64_t)m->nparams);
            S->act_tag[a] = PG_TAG(PG_VERDICT_SEND, 0, 0);
            if (A->kind == PG_VERDICT_SEND && A->peer >= 0 && A->peer < g->nstages)
                S->send_bytes[A->peer] += S->act_bytes[a];
            continue;
        default:
            continue;
        }
        if (!ch || sb < 0 || slot < 0 || ch->sb[sb].alias_chunk >= 0) {
            char buf[160];
            pg_error(d, m->loc, "schedule: stage %d action %d %s does not match the chunk layout", S->stage, a,
                     pg_act_str(A, buf, sizeof buf));
            return -1;
        }
        S->act_slot[a] = slot;
        S->act_off[a] = slot_off(&S->mp, ch, sb, slot);
        S->act_bytes[a] = g->mb_rows[mb] * numel * 4;
        S->act_tag[a] = PG_TAG(sendk, mb, x);
        if (A->kind == PG_SEND_ACT || A->kind == PG_SEND_GRAD || A->kind == PG_SEND_SKIP || A->kind == PG_SEND_SKIP_GRAD) {
            if (A->peer >= 0 && A->peer < g->nstages)
                S->send_bytes[A->peer] += S->act_bytes[a];
        } else {
            /* a receive into a slot must not land while that slot still holds another micro-batch */
            for (int b = a + 1; b < ss->n; b++) {
                const pg_act *B = &ss->act[b];
                if (B->chunk == ch->chunk && B->slot == slot && B->mb == mb && B->kind == PG_FWD)
                    break;
                if (A->kind == PG_RECV_ACT || A->kind == PG_RECV_SKIP) {
                    if ((B->kind == PG_FWD || B->kind == PG_BWD_B || B->kind == PG_BWD_W) && B->chunk == ch->chunk &&
                        B->slot == slot && B->mb != mb) {
                        pg_error(d, m->loc, "schedule: stage %d receives micro-batch %d into slot %d while micro-batch %d still uses it",
                                 S->stage, mb, slot, B->mb);
                        return -1;
                    }
                } else {
                    break;
                }
            }
        }
    }
    return 0;
}

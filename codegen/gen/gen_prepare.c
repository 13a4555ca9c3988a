/* codegen/gen/gen_prepare.c — pg_gen_prepare: the micro-batches' rows and
 * recomputes, then per stage the whole-step buffers (parameters, gradient
 * accumulators, optimizer state, bf16 shadows, the tie workspace, batchnorm's
 * sums, the batch input and target), its chunks (gen_layout.c), the memory plan
 * and its messages (gen_msgs.c). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen_layer.h"
#include "base/progress.h"
#include "schedule/sched_sim.h"

static int is_last_chunk(const pg_gen *g, int c) { return c == g->m->nchunks - 1; }

/* The stage's buffers, before they share memory, within PG_BYTES_LIMIT
 * (base/bytes.h)? 0, or -1 after "the model needs N bytes on stage k, more
 * than this machine can address", naming the largest buffer. */
static int stage_addressable(const ir_model *m, const em_stage *S, pg_diag *d)
{
    if (pg_mp_unshared_bytes(&S->mp) <= PG_BYTES_LIMIT)
        return 0;
    int big = 0;
    for (int i = 1; i < S->mp.n; i++)
        if (S->mp.buf[i].bytes > S->mp.buf[big].bytes)
            big = i;
    const pg_mp_buf *B = &S->mp.buf[big];
    char bb[64];
    if (B->bytes > PG_BYTES_LIMIT) /* sums and products saturate past the limit: no exact count */
        sfmt(bb, sizeof bb, "more than %" PRId64, PG_BYTES_LIMIT);
    else
        sfmt(bb, sizeof bb, "%" PRId64, B->bytes);
    pg_error(d, m->loc, "the model needs more than %" PRId64 " bytes (64 PiB) on stage %d, more than this machine can "
             "address: its largest buffer, %s (%s), takes %s bytes; a smaller batch, smaller layers, or more stages",
             PG_BYTES_LIMIT, S->stage, B->name, B->note[0] ? B->note : pg_mp_cat_name(B->cat), bb);
    return -1;
}

/* Slots used per chunk. */
static int analyse_schedule(pg_gen *g, em_stage *S, pg_diag *d)
{
    const pg_stage_sched *ss = &g->s->stage[S->stage];
    for (int ci = 0; ci < S->nchunks; ci++) {
        em_chunk *ch = &S->ch[ci];
        int maxslot = -1;
        for (int a = 0; a < ss->n; a++) {
            const pg_act *A = &ss->act[a];
            if (A->chunk != ch->chunk || (A->kind != PG_FWD && A->kind != PG_BWD_B && A->kind != PG_BWD_W))
                continue;
            if (A->slot < 0) {
                pg_error(d, g->m->loc, "schedule: stage %d action %d has no activation slot", S->stage, a);
                return -1;
            }
            if (A->slot > maxslot)
                maxslot = A->slot;
        }
        ch->nslots = maxslot + 1;
    }
    return 0;
}

static int build_stage(pg_gen *g, em_stage *S, pg_diag *d)
{
    const ir_model *m = g->m;
    int np = m->nparams;
    char name[128], note[200], sh[96];
    S->param_mp = malloc((size_t)(np + 1) * sizeof(int));
    S->grad_mp = malloc((size_t)(np + 1) * sizeof(int));
    S->opt_mp[0] = malloc((size_t)(np + 1) * sizeof(int));
    S->opt_mp[1] = malloc((size_t)(np + 1) * sizeof(int));
    S->send_bytes = calloc((size_t)g->nstages, sizeof(int64_t));
    S->layer_mp = malloc((size_t)(m->nlayers + 1) * sizeof(int));
    S->shadow_mp = malloc((size_t)(np + 1) * sizeof(int));
    S->ws_mp = -1;
    const pg_stage_sched *ss = &g->s->stage[S->stage];
    int nact = ss->n + 1;
    S->act_slot = malloc((size_t)nact * sizeof(int));
    S->act_tick = malloc((size_t)nact * sizeof(int));
    S->act_off = malloc((size_t)nact * sizeof(int64_t));
    S->act_bytes = malloc((size_t)nact * sizeof(int64_t));
    S->act_tag = malloc((size_t)nact * sizeof(uint32_t));
    S->ch = calloc((size_t)m->nchunks, sizeof *S->ch);
    if (!S->param_mp || !S->grad_mp || !S->opt_mp[0] || !S->opt_mp[1] || !S->send_bytes || !S->act_slot || !S->act_tick ||
        !S->act_off || !S->act_bytes || !S->act_tag || !S->ch || !S->layer_mp || !S->shadow_mp) {
        pg_error(d, m->loc, "out of memory");
        return -1;
    }
    /* parameters, gradients, optimizer state */
    for (int p = 0; p < np; p++) {
        const ir_param *P = &m->params[p];
        S->param_mp[p] = S->grad_mp[p] = S->opt_mp[0][p] = S->opt_mp[1][p] = -1;
        if (!(P->stage_mask >> S->stage & 1))
            continue;
        if (P->dtype != DT_F32) {
            pg_error(d, P->loc, "parameter '%s': only f32 parameters are supported by the code generator yet", P->name);
            return -1;
        }
        int64_t bytes = pg_bytes_of(1, pg_shape_numel(&P->shape), 4);
        pg_shape_str(P->dtype, &P->shape, sh, sizeof sh);
        sfmt(name, sizeof name, "param %s", P->name);
        S->param_mp[p] = pg_mp_add(&S->mp, name, MP_PARAMS, bytes, PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
        sfmt(S->mp.buf[S->param_mp[p]].note, sizeof S->mp.buf[0].note, "%s", sh);
        if (P->is_buffer)
            continue;
        int nacc = nacc_of(g, S->stage, p);
        sfmt(name, sizeof name, "grad %s", P->name);
        S->grad_mp[p] = pg_mp_add(&S->mp, name, MP_GRADS, acc_block_bytes(P, nacc), PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
        if (nacc > 1)
            sfmt(S->mp.buf[S->grad_mp[p]].note, sizeof S->mp.buf[0].note,
                 "%d x %s, every %" PRId64 " bytes: one accumulator per using layer, summed in layer order", nacc, sh,
                 acc_numel(P) * 4);
        else
            sfmt(S->mp.buf[S->grad_mp[p]].note, sizeof S->mp.buf[0].note, "%s", sh);
        /* transmit: a user's copy is overwritten from the owner every step; only the owner steps */
        int nopt = pg_opt_adam(m->train.optimizer) ? 2 : (m->train.momentum > 0 ? 1 : 0);
        if (is_tied(P) && P->tie == TIE_TRANSMIT && P->owner_stage != S->stage)
            nopt = 0;
        static const char *const on[2][2] = {{"momentum", ""}, {"adam_m", "adam_v"}};
        for (int k = 0; k < nopt; k++) {
            sfmt(name, sizeof name, "%s %s", on[pg_opt_adam(m->train.optimizer)][k], P->name);
            S->opt_mp[k][p] = pg_mp_add(&S->mp, name, MP_OPTSTATE, bytes, PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
            sfmt(S->mp.buf[S->opt_mp[k][p]].note, sizeof S->mp.buf[0].note, "%s", sh);
        }
    }
    /* bf16 shadows of the weights this stage's GEMMs read (pg_ops.h, "bf16 shadow weights") */
    for (int p = 0; p < np; p++)
        S->shadow_mp[p] = -1;
    for (int i = 0; i < m->nlayers && m->train.precision == DT_BF16; i++) {
        const ir_layer *L = &m->layers[i];
        const gen_layer_kind *K = gen_layer_kind_of(L->kind);
        if (L->stage != S->stage || !K)
            continue;
        for (int k = 0; k < L->nparam && k < PG_MAX_LAYER_PARAMS; k++) {
            int p = L->param[k];
            unsigned gw = K->gemm_weights_of ? K->gemm_weights_of(L) : K->gemm_weights;
            if (!(gw >> k & 1) || p < 0 || p >= np || S->shadow_mp[p] >= 0 || S->param_mp[p] < 0)
                continue;
            sfmt(name, sizeof name, "shadow %s", m->params[p].name);
            S->shadow_mp[p] = pg_mp_add(&S->mp, name, MP_PARAMS, pg_bytes_of(1, pg_shape_numel(&m->params[p].shape), 2),
                                        PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
            pg_shape_str(DT_BF16, &m->params[p].shape, sh, sizeof sh);
            sfmt(S->mp.buf[S->shadow_mp[p]].note, sizeof S->mp.buf[0].note,
                 "%s: bf16 copy for the GEMMs, written with the weight", sh);
        }
    }
    /* the bf16 GEMM operand copies (runtime/core/pg_bf16ws.h): the largest
     * product of the stage's layers, in the step (rmax samples) and in a
     * decode call (token rows, the positions dimension dropped) */
    S->bf16ws_mp = -1;
    int64_t bws = 0;
    for (int i = 0; i < m->nlayers && m->train.precision == DT_BF16; i++) {
        const ir_layer *L = &m->layers[i];
        const gen_layer_kind *K = gen_layer_kind_of(L->kind);
        if (L->stage != S->stage || !K || !K->bf16_ws)
            continue;
        int64_t w = K->bf16_ws(L, g->rmax);
        if (w > bws)
            bws = w;
        if (g->dec_on && L->in.rank >= 1) {
            ir_layer tok = *L; /* per token: [T, ...] -> [...] */
            tok.in.rank--;
            memmove(tok.in.dim, tok.in.dim + 1, (size_t)tok.in.rank * sizeof tok.in.dim[0]);
            if ((w = K->bf16_ws(&tok, g->dec_rows * g->dec_prefill)) > bws)
                bws = w;
        }
    }
    if (bws > 0) {
        S->bf16ws_mp = pg_mp_add(&S->mp, "bf16 operands", MP_WORKSPACE, bws, PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
        sfmt(S->mp.buf[S->bf16ws_mp].note, sizeof S->mp.buf[0].note,
             "the GEMMs' operands rounded to bf16 (the CUDA runtime; the CPU rounds as it packs)");
    }
    /* tie workspace on an owner: the largest gradient block one user sends */
    int64_t ws = 0;
    for (int p = 0; p < np; p++) {
        const ir_param *P = &m->params[p];
        if (!is_tied(P) || P->owner_stage != S->stage || P->is_buffer)
            continue;
        for (int u = 0; u < g->nstages && u < 64; u++)
            if (u != S->stage && (P->stage_mask >> u & 1) && acc_block_bytes(P, nacc_of(g, u, p)) > ws)
                ws = acc_block_bytes(P, nacc_of(g, u, p));
    }
    if (ws) {
        S->ws_mp = pg_mp_add(&S->mp, "tie workspace", MP_WORKSPACE, ws, PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
        sfmt(S->mp.buf[S->ws_mp].note, sizeof S->mp.buf[0].note, "a tied parameter's gradient accumulators from one user");
    }
    /* the layers' own whole-step buffers (batchnorm's sums for its running statistics) */
    for (int i = 0; i < m->nlayers; i++) {
        const ir_layer *L = &m->layers[i];
        const gen_layer_kind *K = gen_layer_kind_of(L->kind);
        S->layer_mp[i] = L->stage == S->stage && K && K->stage_buffer ? K->stage_buffer(S, L) : -1;
    }
    /* chunks of this stage */
    for (int c = 0; c < m->nchunks; c++) {
        int first, last;
        chunk_layers(m, c, &first, &last);
        if (first < 0) {
            pg_error(d, m->loc, "chunk %d has no layers", c);
            return -1;
        }
        if (m->layers[first].stage != S->stage)
            continue;
        em_chunk *ch = &S->ch[S->nchunks++];
        ch->chunk = c;
        ch->stage = S->stage;
        ch->first = first;
        ch->last = last;
        ch->is_first = c == 0;
        ch->is_last = is_last_chunk(g, c);
        if (layout_chunk(g, S, ch, d))
            return -1;
    }
    if (analyse_schedule(g, S, d))
        return -1;
    if (index_fwd_slots(S, &g->s->stage[S->stage], g->s->nmb)) {
        pg_error(d, m->loc, "out of memory");
        return -1;
    }
    /* batch input / targets */
    S->input_mp = S->target_mp = S->count_mp = -1;
    if (S->stage == m->layers[0].stage) {
        int64_t es = 4;
        S->input_mp = pg_mp_add(&S->mp, "input", MP_IO, pg_bytes_of(m->train.batch, pg_shape_numel(&m->input), es),
                                PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
        pg_shape_str(m->input_dtype, &m->input, sh, sizeof sh);
        sfmt(S->mp.buf[S->input_mp].note, sizeof note, "%s %s per sample, the whole batch", m->input_name, sh);
    }
    if (S->stage == m->layers[m->nlayers - 1].stage) {
        S->target_mp = pg_mp_add(&S->mp, "target", MP_IO, pg_bytes_of(m->train.batch, pg_shape_numel(&m->target), 4),
                                 PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
        pg_shape_str(m->target_dtype, &m->target, sh, sizeof sh);
        sfmt(S->mp.buf[S->target_mp].note, sizeof note, "%s %s per sample, the whole batch", m->target_name, sh);
        if (m->train.loss == LOSS_CROSS_ENTROPY && m->train.ignore_index != PG_NO_IGNORE) {
            S->count_mp = pg_mp_add(&S->mp, "counted targets", MP_IO, 8, PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
            sfmt(S->mp.buf[S->count_mp].note, sizeof note,
                 "double: the target positions of the whole batch that are not %" PRId64 ", written each step",
                 m->train.ignore_index);
        }
    }
    /* activation slots; frame buffers with their lifetimes */
    for (int ci = 0; ci < S->nchunks; ci++) {
        em_chunk *ch = &S->ch[ci];
        for (int b = 0; b < ch->nsb; b++) {
            if (ch->sb[b].alias_chunk >= 0)
                continue; /* another chunk's buffer */
            sfmt(name, sizeof name, "c%d.%s", ch->chunk, ch->sb[b].local);
            for (char *q = name; *q; q++)
                if (*q >= 'A' && *q <= 'Z')
                    *q = (char)(*q - 'A' + 'a');
            ch->sb[b].mp = pg_mp_add(&S->mp, name, ch->sb[b].cat, pg_bytes_mul(ch->sb[b].stride, ch->nslots), PG_MP_WHOLE_STEP,
                                     PG_MP_WHOLE_STEP);
            sfmt(S->mp.buf[ch->sb[b].mp].note, sizeof S->mp.buf[0].note, "%d slots x %" PRId64 " bytes: %s",
                     ch->nslots, ch->sb[b].stride, ch->sb[b].note);
        }
    }
    if (plan_frames(g, S, d) || dec_layout_stage(g, S, d))
        return -1;
    S->mp.guard = g->guard;
    if (stage_addressable(m, S, d)) /* below the limit, no offset the solver computes can overflow */
        return -1;
    pg_mp_solve(&S->mp);
    char err[600];
    if (pg_mp_check(&S->mp, err, sizeof err)) {
        pg_error(d, m->loc, "internal error: the memory plan of stage %d is wrong: %s", S->stage, err);
        return -1;
    }
    if (plan_messages(g, S, d) || dec_plan_messages(g, S, d))
        return -1;
    /* the final gather of parameters to stage 0 */
    if (S->stage != 0)
        for (int p = 0; p < np; p++)
            if (m->params[p].owner_stage == S->stage && m->params[p].stage_mask)
                S->send_bytes[0] = pg_bytes_add(S->send_bytes[0], pg_bytes_of(1, pg_shape_numel(&m->params[p].shape), 4));
    if (m->train.grad_clip > 0)
        for (int k = 0; k < g->nstages; k++)
            if (k != S->stage)
                S->send_bytes[k] += (int64_t)np * 8;
    int loss_stage = chunk_stage(g, g->s->nchunks - 1);
    if (!(m->train.grad_clip > 0) && S->stage != loss_stage) /* the log line's gradient norm (runtime/core/step.c) */
        S->send_bytes[loss_stage] += (int64_t)np * 8;
    return 0;
}

/* A tied parameter's gradient is summed by the runtime stage by stage: the
 * owner's uses in layer order, then each other stage's, in stage order
 * (runtime/core/step.c). That is the layer order whenever stages hold the model
 * in order; with interleaved chunks it can differ, and a sum of three or more
 * accumulators in another order is other bits than one stage's. Refused. */
static int check_tie_order(const ir_model *m, pg_diag *d)
{
    int *byl = malloc((size_t)(m->nlayers + 1) * sizeof(int));
    int *bys = malloc((size_t)(m->nlayers + 1) * sizeof(int));
    int rc = 0;
    if (!byl || !bys) {
        pg_error(d, m->loc, "out of memory");
        rc = -1;
    }
    for (int p = 0; p < m->nparams && !rc; p++) {
        const ir_param *P = &m->params[p];
        if (!is_tied(P) || P->is_buffer)
            continue;
        int n = 0, k = 0;
        for (int i = 0; i < m->nlayers; i++)
            if (layer_uses(&m->layers[i], p))
                byl[n++] = i;
        for (int st = 0; st < m->nstages; st++)
            for (int j = 0; j < n; j++)
                if (m->layers[byl[j]].stage == st)
                    bys[k++] = byl[j];
        /* the first two may trade places: a + b is b + a */
        int bad = n >= 2 && !((byl[0] == bys[0] && byl[1] == bys[1]) || (byl[0] == bys[1] && byl[1] == bys[0]));
        for (int j = 2; j < n && !bad; j++)
            bad = byl[j] != bys[j];
        if (!bad)
            continue;
        int at = 2;
        while (at < n && byl[at] == bys[at])
            at++;
        if (at >= n)
            at = 1;
        const ir_layer *L = &m->layers[byl[at]], *E = NULL;
        for (int j = 0; j < at && !E; j++)
            if (m->layers[byl[j]].stage > L->stage)
                E = &m->layers[byl[j]];
        pg_error(d, L->loc, "parameter '%s' is used here on stage %d after a use on stage %d: with its %d uses spread "
                 "over the stages out of layer order, the tied gradient would be summed in another order than on one "
                 "stage (not bitwise reproducible)", P->name, L->stage, E ? E->stage : m->layers[byl[0]].stage, n);
        if (E)
            pg_note(d, E->loc, "the use on stage %d is here", E->stage);
        if (P->tie_loc.line > 0)
            pg_note(d, P->tie_loc, "tied here; move the splits so that the stages hold its uses in layer order, or "
                    "use a schedule without interleaving");
        rc = -1;
    }
    free(byl);
    free(bys);
    return rc;
}

/* May the runtime lend the step's messages from the arena (runtime/core/
 * step.c)? A lent message of slot s is waited for before its stage's next
 * compute action of slot s, so a stage may now wait for a peer to have
 * received it: the schedule's own verification (non-blocking sends) does not
 * cover that. Simulated here with those waits, from the slots the tables
 * carry: 1 when every stage finishes, else 0 (the messages are copied). */
static int lend_ok(const pg_gen *g)
{
    const pg_schedule *s = g->s;
    int *ls[PG_SCHED_MAX_STAGES] = {0}, ok = 0;
    for (int k = 0; k < s->nstages; k++) {
        const pg_stage_sched *ss = &s->stage[k];
        if (!(ls[k] = malloc((size_t)(ss->n ? ss->n : 1) * sizeof(int))))
            goto out;
        for (int a = 0; a < ss->n; a++) {
            pg_act_kind kind = ss->act[a].kind;
            ls[k][a] = pg_step_msg_send((int)kind) || pg_act_is_compute(kind) ? g->st[k].act_slot[a] : -1;
        }
    }
    pg_sim sim = {.m = g->m, .s = s, .lend_slot = ls};
    ok = pg_sim_run(&sim) == SIM_OK;
    pg_sim_free(&sim);
out:
    for (int k = 0; k < s->nstages; k++)
        free(ls[k]);
    return ok;
}

int pg_gen_prepare(const ir_model *m, const pg_schedule *s, int64_t guard_bytes, pg_gen **out, pg_diag *d)
{
    *out = NULL;
    pg_gen *g = calloc(1, sizeof *g);
    if (!g) {
        pg_error(d, m->loc, "out of memory");
        return -1;
    }
    g->m = m;
    g->s = s;
    g->nstages = m->nstages;
    g->guard = guard_bytes > 0 ? (guard_bytes + 63) / 64 * 64 : 0;
    int64_t B = m->train.batch, M = m->train.microbatches;
    if (M < 1 || B < M || s->nmb != M || s->nstages != m->nstages) {
        pg_error(d, m->loc, "batch %" PRId64 " in %" PRId64 " micro-batches: every micro-batch needs a row", B, M);
        pg_gen_free(g);
        return -1;
    }
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].chunk < 0 || m->layers[i].chunk >= s->nchunks ||
            chunk_stage(g, m->layers[i].chunk) != m->layers[i].stage) {
            pg_error(d, m->layers[i].loc, "layer '%s' is on stage %d, but the schedule runs its chunk %d on stage %d",
                     m->layers[i].name, m->layers[i].stage, m->layers[i].chunk, chunk_stage(g, m->layers[i].chunk));
            pg_gen_free(g);
            return -1;
        }
    if (check_tie_order(m, d)) {
        pg_gen_free(g);
        return -1;
    }
    if (count_uses(g)) {
        pg_error(d, m->loc, "out of memory");
        pg_gen_free(g);
        return -1;
    }
    if (pg_schedule_forward_only(m, s, &g->ev, d)) { /* evaluation's schedule, verified like the step's */
        pg_gen_free(g);
        return -1;
    }
    g->mb_rows = malloc((size_t)M * sizeof(int64_t));
    g->mb_first = malloc((size_t)M * sizeof(int64_t));
    g->recompute = malloc((size_t)M * sizeof(int));
    g->st = calloc((size_t)m->nstages, sizeof *g->st);
    if (!g->mb_rows || !g->mb_first || !g->recompute || !g->st) {
        pg_error(d, m->loc, "out of memory");
        pg_gen_free(g);
        return -1;
    }
    int64_t row = 0;
    for (int64_t i = 0; i < M; i++) {
        g->mb_rows[i] = B / M + (i < B % M);
        g->mb_first[i] = row;
        row += g->mb_rows[i];
        g->recompute[i] = m->train.checkpoint == CKPT_ALWAYS || (m->train.checkpoint == CKPT_EXCEPT_LAST && i < M - 1);
    }
    g->rmax = g->mb_rows[0];
    if (dec_plan(g, d)) { /* generation with the KV cache: whether, its sizes, its schedule */
        pg_gen_free(g);
        return -1;
    }
    /* what a layer kind refuses (batchnorm: too few rows for its statistics) */
    for (int i = 0; i < m->nlayers; i++) {
        const gen_layer_kind *K = gen_layer_kind_of(m->layers[i].kind);
        if (K && K->check && K->check(m, &m->layers[i], d)) {
            pg_gen_free(g);
            return -1;
        }
    }
    for (int k = 0; k < m->nstages; k++) {
        g->st[k].stage = k;
        if (build_stage(g, &g->st[k], d)) {
            pg_gen_free(g);
            return -1;
        }
        pg_progress("stage %d of %d laid out (buffers, memory plan)", k + 1, g->nstages);
    }
    g->lend_sends = lend_ok(g);
    *out = g;
    return 0;
}

int64_t pg_gen_arena_bytes(const pg_gen *g, int k)
{
    return k >= 0 && k < g->nstages ? g->st[k].mp.total : 0;
}

void pg_gen_set_auto_json(pg_gen *g, const char *json)
{
    g->auto_json = json;
}

void pg_gen_set_blocks_json(pg_gen *g, const char *json)
{
    g->blocks_json = json;
}

void pg_gen_free(pg_gen *g)
{
    if (!g)
        return;
    pg_schedule_free(&g->ev);
    for (int k = 0; g->st && k < g->nstages; k++) {
        em_stage *S = &g->st[k];
        for (int i = 0; S->ch && i < S->nchunks; i++)
            chunk_free(&S->ch[i]);
        free(S->ch);
        dec_free_stage(S);
        pg_mp_free(&S->mp);
        free(S->param_mp); free(S->grad_mp); free(S->opt_mp[0]); free(S->opt_mp[1]); free(S->layer_mp); free(S->shadow_mp);
        free(S->act_slot); free(S->fwd_slot); free(S->act_tick); free(S->act_off); free(S->act_bytes); free(S->act_tag); free(S->send_bytes);
    }
    free(g->st);
    pg_schedule_free(&g->dsched);
    free(g->nacc);
    free(g->acc_at);
    free(g->mb_rows);
    free(g->mb_first);
    free(g->recompute);
    free(g);
}


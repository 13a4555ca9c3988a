/* codegen/gen/layers/skip.c — the skip statements: `stash name` saves the current
 * tensor (which passes on unchanged), `pop name add|concat|take` combines it
 * back (take: the stash replaces the current tensor, which gets no gradient
 * from it; the layer before stashed it, so its stash brings it one).
 * Within one chunk the stash is the tensor itself and its gradient a frame
 * buffer; across chunks the stash is a slot buffer sent to (or, on the same
 * stage, read in place by) the popping chunk, and the skip gradient comes back
 * the same way (runtime: pg_add_fwd, pg_concat_*, pg_copy, pg_axpy_inplace). */
#include <inttypes.h>

#include "gen/gen_layer.h"

/* ---- stash ---- */

static int stash_slots(pg_gen *g, em_stage *S, em_chunk *ch, int i, int cur, pg_diag *d)
{
    const ir_model *m = g->m;
    const ir_layer *L = &m->layers[i];
    const ir_skip *sk = &m->skips[L->skip];
    char note[200], sh[96], mac[64];
    (void)S, (void)d;
    if (m->layers[sk->pop_layer].chunk == ch->chunk) {
        ch->sktensor[L->skip] = cur;
        return 0;
    }
    int pc = m->layers[sk->pop_layer].chunk, here = m->layers[sk->pop_layer].stage == ch->stage;
    int64_t bytes = g->rmax * pg_shape_numel(&sk->shape) * 4;
    shape_rows(&sk->shape, sh, sizeof sh);
    sfmt(mac, sizeof mac, "c%d_skip%d_out", ch->chunk, L->skip);
    sfmt(note, sizeof note, "skip %s stashed: %s, %s chunk %d%s", sk->name, sh, here ? "read by" : "sent to", pc,
         here ? " on this stage" : "");
    ch->skout[L->skip] = add_slotbuf(ch, mac, note, MP_SKIP, bytes);
    sfmt(mac, sizeof mac, "c%d_skip%d_grad_in", ch->chunk, L->skip);
    if (here)
        sfmt(note, sizeof note, "gradient of skip %s: %s, written by chunk %d on this stage", sk->name, sh, pc);
    else
        sfmt(note, sizeof note, "gradient of skip %s: %s, received", sk->name, sh);
    ch->skgin[L->skip] = add_slotbuf(ch, mac, note, here ? MP_ACTIVATIONS : MP_RECV, bytes);
    return 0;
}

/* a skip popped in the same chunk: its gradient, written by the pop's backward */
static void stash_saved(const ir_model *m, em_chunk *ch, int i, int64_t R)
{
    const ir_layer *L = &m->layers[i];
    const ir_skip *sk = &m->skips[L->skip];
    char note[200], sh[96];
    if (ch->sktensor[L->skip] < 0)
        return;
    shape_rows(&sk->shape, sh, sizeof sh);
    sfmt(note, sizeof note, "gradient of skip %s", sk->name);
    ch->skgframe[L->skip] = frame_alloc(ch, R * pg_shape_numel(&sk->shape) * 4, note, sh);
}

static void stash_fwd(em_out *e, em_layer *a)
{
    const ir_model *m = e->g->m;
    const em_chunk *ch = e->ch;
    int k = a->L->skip;
    const ir_skip *sk = &m->skips[k];
    if (ch->skout[k] >= 0) {
        fprintf(e->o, "    /* stash %s: %s, sent to chunk %d */\n", sk->name, a->shi, m->layers[sk->pop_layer].chunk);
        fprintf(e->o, "    PG_TRY(pg_copy(c, %s, %s, %s));\n", ch->sb[ch->skout[k]].local, a->x, a->cnt);
    } else {
        fprintf(e->o, "    /* stash %s: %s stays in %s */\n", sk->name, a->shi, a->x);
    }
}

/* the skip's gradient: received from the popping chunk, or written by the pop of this one */
static void stash_skip_grad(em_out *e, em_layer *a, char *ds, size_t n)
{
    const em_chunk *ch = e->ch;
    int k = a->L->skip;
    if (ch->skgin[k] >= 0)
        sfmt(ds, n, "%s", ch->sb[ch->skgin[k]].local);
    else
        sfmt(ds, n, "%s", fa(e, ch->skgframe[k]));
}

/* the tensor's gradient gains the skip's */
static void stash_bwd_b(em_out *e, em_layer *a)
{
    const ir_model *m = e->g->m;
    const em_chunk *ch = e->ch;
    int k = a->L->skip;
    const ir_skip *sk = &m->skips[k];
    char ds[64];
    if (!a->dx_wanted)
        return;
    em_dx(e, a);
    stash_skip_grad(e, a, ds, sizeof ds);
    if (ch->skgin[k] >= 0)
        fprintf(e->o, "    PG_TRY(pg_axpy_inplace(c, %s, %s, %s)); /* + gradient of skip %s from chunk %d */\n", a->dx,
                ds, a->cnt, sk->name, m->layers[sk->pop_layer].chunk);
    else
        fprintf(e->o, "    PG_TRY(pg_axpy_inplace(c, %s, %s, %s)); /* + gradient of skip %s */\n", a->dx, ds, a->cnt,
                sk->name);
}

static void stash_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    fprintf(o, "\"skip\": ");
    json_str(o, m->skips[L->skip].name);
}

/* generation: no gradient, so no frame buffer */
static void stash_dec_saved(const pg_gen *g, em_chunk *ch, int i, int64_t R)
{
    (void)g, (void)ch, (void)i, (void)R;
}

const gen_layer_kind gen_stash = {
    .passes_through = 1,
    .slots = stash_slots, .saved = stash_saved, .fwd = stash_fwd, .bwd_b = stash_bwd_b, .json_attrs = stash_attrs,
    .skip_grad = stash_skip_grad,
    .per_token = 1, .dec_saved = stash_dec_saved,
};

/* ---- pop ---- */

static int pop_slots(pg_gen *g, em_stage *S, em_chunk *ch, int i, int cur, pg_diag *d)
{
    const ir_model *m = g->m;
    const ir_layer *L = &m->layers[i];
    const ir_skip *sk = &m->skips[L->skip];
    int sc = m->layers[sk->stash_layer].chunk;
    int64_t bytes = g->rmax * pg_shape_numel(&sk->shape) * 4;
    char note[200], sh[96], mac[64];
    (void)cur;
    if (sc == ch->chunk)
        return 0;
    shape_rows(&sk->shape, sh, sizeof sh);
    if (m->layers[sk->stash_layer].stage == ch->stage) {
        /* stashed by an earlier chunk of this stage: read the stash in place (it lives
         * until that chunk's BWD_W, after this chunk's BWD_B) and write its gradient
         * straight into that chunk's buffer */
        em_chunk *sch = find_chunk(S, sc);
        if (!sch || sch->skout[L->skip] < 0 || sch->skgin[L->skip] < 0) {
            pg_error(d, L->loc, "skip '%s': the stashing chunk %d is not laid out", sk->name, sc);
            return -1;
        }
        sfmt(mac, sizeof mac, "c%d_skip%d_in", ch->chunk, L->skip);
        sfmt(note, sizeof note, "skip %s: %s, chunk %d's stash on this stage, read in place", sk->name, sh, sc);
        ch->skin[L->skip] = add_alias(ch, mac, note, sch, sch->skout[L->skip]);
        sfmt(mac, sizeof mac, "c%d_skip%d_grad_out", ch->chunk, L->skip);
        sfmt(note, sizeof note, "gradient of skip %s: %s, written into chunk %d's buffer on this stage", sk->name, sh,
             sc);
        ch->skgout[L->skip] = add_alias(ch, mac, note, sch, sch->skgin[L->skip]);
        if (ch->skin[L->skip] < 0 || ch->skgout[L->skip] < 0) {
            pg_error(d, L->loc, "chunk %d has too many buffers for the code generator", ch->chunk);
            return -1;
        }
    } else {
        sfmt(mac, sizeof mac, "c%d_skip%d_in", ch->chunk, L->skip);
        sfmt(note, sizeof note, "skip %s: %s, received from chunk %d", sk->name, sh, sc);
        ch->skin[L->skip] = add_slotbuf(ch, mac, note, MP_RECV, bytes);
        sfmt(mac, sizeof mac, "c%d_skip%d_grad_out", ch->chunk, L->skip);
        sfmt(note, sizeof note, "gradient of skip %s: %s, sent back", sk->name, sh);
        ch->skgout[L->skip] = add_slotbuf(ch, mac, note, MP_SKIP, bytes);
    }
    return 0;
}

/* A concat along dim k as pg_concat's [n, a] + [n, b]: n = rows times the
 * dims before k ("r" or "r * N"), a and b the rest of each side. */
static void concat_sizes(const ir_skip *sk, const pg_shape *in, char *n, size_t nn, int64_t *a, int64_t *b)
{
    int64_t per = 1, after = 1;
    for (int d = 0; d < sk->concat_dim; d++)
        per *= in->dim[d];
    for (int d = sk->concat_dim + 1; d < in->rank; d++)
        after *= in->dim[d];
    if (per == 1)
        sfmt(n, nn, "r");
    else
        sfmt(n, nn, "r * %" PRId64, per);
    *a = in->dim[sk->concat_dim] * after;
    *b = sk->shape.dim[sk->concat_dim] * after;
}

/* the popped skip's value: received from the stashing chunk, or a tensor of this one */
static void pop_skip(em_out *e, em_layer *a, char *s, size_t n)
{
    const em_chunk *ch = e->ch;
    int k = a->L->skip;
    if (ch->skin[k] >= 0)
        sfmt(s, n, "%s", ch->sb[ch->skin[k]].local);
    else
        tval(e, ch->sktensor[k], s, n);
}

static int pop_is_add(const ir_model *m, const ir_layer *L) { return m->skips[L->skip].mode == POP_ADD; }

static void pop_fwd(em_out *e, em_layer *a)
{
    const ir_skip *sk = &e->g->m->skips[a->L->skip];
    char s[64], n[64];
    int64_t na, nb;
    pop_skip(e, a, s, sizeof s);
    if (sk->mode == POP_ADD) {
        fprintf(e->o, "    PG_TRY(pg_add_fwd(c, %s, %s, %s, %s));\n", a->cnt, a->x, s, a->y);
    } else if (sk->mode == POP_TAKE) {
        fprintf(e->o, "    PG_TRY(pg_copy(c, %s, %s, r * %" PRId64 ")); /* the stash replaces %s */\n", a->y, s,
                pg_shape_numel(&sk->shape), a->x);
    } else {
        concat_sizes(sk, &a->in->shape, n, sizeof n, &na, &nb);
        fprintf(e->o, "    PG_TRY(pg_concat_fwd(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s));\n", n, na, nb, a->x, s,
                a->y);
    }
}

/* dy goes to the tensor and to the skip: whole (add) or split (concat, which always writes both) */
static void pop_bwd_b(em_out *e, em_layer *a)
{
    const em_chunk *ch = e->ch;
    int k = a->L->skip;
    const ir_skip *sk = &e->g->m->skips[k];
    char ds[64];
    int ds_wanted = 1;
    if (a->dx_wanted || sk->mode == POP_CONCAT)
        em_dx(e, a);
    if (ch->skgout[k] >= 0) {
        sfmt(ds, sizeof ds, "%s", ch->sb[ch->skgout[k]].local);
    } else {
        sfmt(ds, sizeof ds, "%s", fa(e, ch->skgframe[k]));
        ds_wanted = ch->tens[ch->sktensor[k]].need_grad;
    }
    if (sk->mode == POP_CONCAT) {
        char n[64];
        int64_t na, nb;
        concat_sizes(sk, &a->in->shape, n, sizeof n, &na, &nb);
        fprintf(e->o, "    PG_TRY(pg_concat_bwd(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s)); /* %s */\n", n, na, nb,
                a->dy, a->dx, ds, a->L->name);
        return;
    }
    if (a->dx_wanted && sk->mode == POP_ADD)
        fprintf(e->o, "    PG_TRY(pg_copy(c, %s, %s, %s)); /* %s */\n", a->dx, a->dy, a->cnt, a->L->name);
    if (a->dx_wanted && sk->mode == POP_TAKE) /* replaced: its own stash adds what it gets */
        fprintf(e->o, "    PG_TRY(pg_zero(c, %s, %s)); /* %s */\n", a->dx, a->cnt, a->L->name);
    if (ds_wanted)
        fprintf(e->o, "    PG_TRY(pg_copy(c, %s, %s, r * %" PRId64 ")); /* gradient of skip %s */\n", ds, a->dy,
                pg_shape_numel(&sk->shape), sk->name);
}

/* concat's "dim" only where it is not the last (the plan of a model without one stays as it was) */
static void pop_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    const ir_skip *sk = &m->skips[L->skip];
    stash_attrs(o, m, L);
    fprintf(o, ", \"mode\": \"%s\"", sk->mode == POP_ADD ? "add" : sk->mode == POP_TAKE ? "take" : "concat");
    if (sk->mode == POP_CONCAT && sk->concat_dim != sk->shape.rank - 1)
        fprintf(o, ", \"dim\": %d", sk->concat_dim);
}

const gen_layer_kind gen_pop = {
    .slots = pop_slots, .fwd = pop_fwd, .bwd_b = pop_bwd_b, .json_attrs = pop_attrs,
    .is_add = pop_is_add, .add_skip = pop_skip,
    .per_token = 1,
};

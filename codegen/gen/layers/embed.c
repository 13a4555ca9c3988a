/* codegen/gen/layers/embed.c — the table lookups: embed(table | vocab -> dim)
 * (token ids i32[T] -> f32[T, dim] by a table [vocab, dim]), pos_embed(seq,
 * dim) ([T, dim] plus a table [seq, dim]) and logits(table) ([.., dim] ->
 * [.., vocab] by a table transposed, tied to an embedding or not)
 * (runtime: pg_embed_*, pg_pos_embed_*, pg_logits_*). */
#include <inttypes.h>

#include "gen/gen_layer.h"

static void vocab_dim_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    fprintf(o, "\"vocab\": %" PRId64 ", \"dim\": %" PRId64, L->vocab, L->dim);
}

/* ---- embed: no input gradient (token ids) ---- */

static void embed_fwd(em_out *e, em_layer *a)
{
    fprintf(e->o, "    PG_TRY(pg_embed_fwd(c, %s, %" PRId64 ", %" PRId64 ", (const int32_t *)%s, %s, %s));\n", a->cnt,
            a->L->vocab, a->L->dim, a->x, a->p[0], a->y);
}

static void embed_bwd_w(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    em_x(e, a);
    fprintf(e->o, "    PG_TRY(pg_embed_bwd_w(c, %s, %" PRId64 ", %" PRId64 ", (const int32_t *)%s, %s, %s)); /* %s */\n",
            a->cnt, L->vocab, L->dim, a->x, a->dy, a->p[0], L->name);
}

const gen_layer_kind gen_embed = {
    .reads_tokens = 1,
    .per_token = 1,
    .fwd = embed_fwd, .bwd_w = embed_bwd_w, .json_attrs = vocab_dim_attrs,
};

/* ---- pos_embed: the gradient passes through; the table's needs only dy;
 * an input of T <= seq positions uses the table's first T rows ---- */

static void pos_fwd(em_out *e, em_layer *a)
{
    fprintf(e->o, "    PG_TRY(pg_pos_embed_fwd(c, r, %" PRId64 ", %" PRId64 ", %s, %s, %s));\n", a->in->shape.dim[0], a->L->dim,
            a->x, a->p[0], a->y);
}

static void pos_bwd_b(em_out *e, em_layer *a)
{
    if (!a->dx_wanted)
        return;
    em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_copy(c, %s, %s, %s)); /* %s */\n", a->dx, a->dy, a->cnt, a->L->name);
}

static void pos_bwd_w(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    fprintf(e->o, "    PG_TRY(pg_pos_embed_bwd_w(c, r, %" PRId64 ", %" PRId64 ", %s, %s)); /* %s */\n", a->in->shape.dim[0], L->dim,
            a->dy, a->p[0], L->name);
}

static void pos_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    fprintf(o, "\"seq\": %" PRId64 ", \"dim\": %" PRId64, L->seq, L->dim);
}

/* generation: position pos + j of each sequence's row table entry, j < its
 * real positions (pads pass through) */
static void pos_dec(em_out *e, em_layer *a)
{
    fprintf(e->o, "    PG_TRY(pg_pos_embed_dec(c, io->seqs, io->t, %" PRId64 ", %" PRId64 ", DEC_ROWS, %s, %s, %s));\n",
            a->L->seq, a->L->dim, a->x, a->p[0], a->y);
}

const gen_layer_kind gen_pos_embed = {
    .fwd = pos_fwd, .bwd_b = pos_bwd_b, .bwd_w = pos_bwd_w, .json_attrs = pos_attrs,
    .dec = pos_dec,
};

/* ---- logits ---- */

static void logits_fwd(em_out *e, em_layer *a)
{
    fprintf(e->o, "    PG_TRY(pg_logits_fwd(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s));\n", a->n, a->L->dim,
            a->L->vocab, a->x, a->p[0], a->y);
}

static void logits_bwd_b(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    if (!a->dx_wanted)
        return;
    em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_logits_bwd_in(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s)); /* %s */\n", a->n, L->dim,
            L->vocab, a->dy, a->p[0], a->dx, L->name);
}

static void logits_bwd_w(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    em_x(e, a);
    fprintf(e->o, "    PG_TRY(pg_logits_bwd_w(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s)); /* %s */\n", a->n, L->dim,
            L->vocab, a->x, a->dy, a->p[0], L->name);
}

/* a linear layer with W = the table (the logits' dy, vocab wide, padded) */
static int64_t logits_bf16_ws(const ir_layer *L, int64_t R)
{
    return pg_bf16ws_linear(gen_gemm_rows(L, R), L->dim, L->vocab);
}

const gen_layer_kind gen_logits = {
    .gemm_weights = 1u << 0, /* the table */
    .bf16_ws = logits_bf16_ws,
    .per_token = 1,
    .fwd = logits_fwd, .bwd_b = logits_bwd_b, .bwd_w = logits_bwd_w, .json_attrs = vocab_dim_attrs,
};

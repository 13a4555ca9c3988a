/* codegen/gen/gen_layer.c — one layer's statements in each pass (forward,
 * backward-input, backward-weight) and the C text of its operands: a
 * tensor's value or gradient, a frame buffer, a parameter. Reading an
 * operand notes the frame buffer's use (plan_frames in gen_layout.c). What a
 * layer kind does is its entry in the table below (gen_layer.h). */
#include <inttypes.h>
#include <string.h>

#include "gen/gen_layer.h"

/* Note a use of frame buffer id in the current pass and layer step. */
void frame_use(em_out *e, int64_t id)
{
    if (!e->rec || id < 0)
        return;
    em_fbuf *f = &e->rec[id];
    int k = e->pass;
    if (f->lo[k] < 0 || e->step < f->lo[k])
        f->lo[k] = e->step;
    if (e->step > f->hi[k])
        f->hi[k] = e->step;
}

/* Frame buffer id's local (a float pointer at its offset in this
 * micro-batch's row of frame_c<k>, declared where it is used). */
const char *fa(em_out *e, int64_t id)
{
    char *b = e->fx[e->nfx++ % 8];
    frame_use(e, id);
    sfmt(b, sizeof e->fx[0], "%s", e->ch->fb[id].name);
    return b;
}

void tval(em_out *e, int t, char *buf, size_t n)
{
    const em_chunk *ch = e->ch;
    const em_tensor *T = &ch->tens[t];
    if (T->vloc == LOC_INPUT)
        input_local(e->g->m, buf, n);
    else if (T->vloc == LOC_SLOT)
        sfmt(buf, n, "%s", ch->sb[T->vslot].local);
    else
        sfmt(buf, n, "%s", ch->fb[T->voff].name), frame_use(e, T->voff);
}

void tgrad(em_out *e, int t, char *buf, size_t n)
{
    const em_chunk *ch = e->ch;
    const em_tensor *T = &ch->tens[t];
    if (T->gloc == LOC_SLOT)
        sfmt(buf, n, "%s", ch->sb[T->gslot].local);
    else
        sfmt(buf, n, "%s", ch->fb[T->goff].name), frame_use(e, T->goff);
}

/* n for a layer input: rows * every dim but the last */
void nexpr(const em_tensor *T, char *buf, size_t sz)
{
    int64_t per = T->numel / last_dim(&T->shape);
    if (per == 1)
        sfmt(buf, sz, "r");
    else
        sfmt(buf, sz, "r * %" PRId64, per);
}

void cexpr(const em_tensor *T, char *buf, size_t sz) { sfmt(buf, sz, "r * %" PRId64, T->numel); }

/* ---- the kinds ---- */

extern const gen_layer_kind gen_linear, gen_relu, gen_gelu, gen_layernorm, gen_batchnorm, gen_embed, gen_pos_embed,
    gen_attention, gen_logits, gen_dropout, gen_stash, gen_pop, gen_rmsnorm, gen_swiglu;
extern const gen_layer_kind gen_conv, gen_pool2d, gen_global_avgpool, gen_upsample, gen_flatten, gen_reshape,
    gen_transpose, gen_mean, gen_sigmoid, gen_tanh, gen_silu;

/* one line per kind the code generator does (codegen/gen/layers/, codegen/README.md) */
static const gen_layer_kind *const kinds[LK__COUNT] = {
    [LK_LINEAR] = &gen_linear,
    [LK_RELU] = &gen_relu,
    [LK_GELU] = &gen_gelu,
    [LK_LAYERNORM] = &gen_layernorm,
    [LK_BATCHNORM] = &gen_batchnorm,
    [LK_EMBED] = &gen_embed,
    [LK_POS_EMBED] = &gen_pos_embed,
    [LK_ATTENTION] = &gen_attention,
    [LK_LOGITS] = &gen_logits,
    [LK_DROPOUT] = &gen_dropout,
    [LK_RMSNORM] = &gen_rmsnorm,
    [LK_SWIGLU] = &gen_swiglu,
    [LK_STASH] = &gen_stash,
    [LK_POP] = &gen_pop,
    [LK_CONV2D] = &gen_conv,
    [LK_CONV1D] = &gen_conv,
    [LK_CONV_T2D] = &gen_conv,
    [LK_MAXPOOL2D] = &gen_pool2d,
    [LK_AVGPOOL2D] = &gen_pool2d,
    [LK_GLOBAL_AVGPOOL] = &gen_global_avgpool,
    [LK_UPSAMPLE] = &gen_upsample,
    [LK_FLATTEN] = &gen_flatten,
    [LK_RESHAPE] = &gen_reshape,
    [LK_TRANSPOSE] = &gen_transpose,
    [LK_MEAN] = &gen_mean,
    [LK_BATCHNORM2D] = &gen_batchnorm,
    [LK_SIGMOID] = &gen_sigmoid,
    [LK_TANH] = &gen_tanh,
    [LK_SILU] = &gen_silu,
};

const gen_layer_kind *gen_layer_kind_of(ir_layer_kind k)
{
    return (unsigned)k < LK__COUNT ? kinds[k] : NULL;
}

void em_x(em_out *e, em_layer *a) { tval(e, a->tin, a->x, sizeof a->x); }

void em_dx(em_out *e, em_layer *a) { tgrad(e, a->tin, a->dx, sizeof a->dx); }

/* What every pass of layer i knows of it (no operand read yet). */
static const gen_layer_kind *layer_begin(em_out *e, int i, em_layer *a)
{
    const em_chunk *ch = e->ch;
    memset(a, 0, sizeof *a);
    a->i = i;
    a->li = i - ch->first;
    a->L = &e->g->m->layers[i];
    a->tin = ch->lin[a->li];
    a->tout = ch->lout[a->li];
    a->in = &ch->tens[a->tin];
    a->out = &ch->tens[a->tout];
    a->dx_wanted = a->in->need_grad;
    nexpr(a->in, a->n, sizeof a->n);
    cexpr(a->in, a->cnt, sizeof a->cnt);
    return gen_layer_kind_of(a->L->kind);
}

/* the parameters' locals, "" past nparam */
static void param_locals(const em_chunk *ch, em_layer *a)
{
    for (int k = 0; k < a->L->nparam && k < PG_MAX_LAYER_PARAMS; k++)
        sfmt(a->p[k], sizeof a->p[k], "%s", plocal(ch, a->L->param[k], 0));
}

/* The forward's operands of layer i, and a comment naming it; its kind's entry. */
static const gen_layer_kind *forward_begin(em_out *e, int i, em_layer *a)
{
    const gen_layer_kind *K = layer_begin(e, i, a);
    tval(e, a->tin, a->x, sizeof a->x);
    tval(e, a->tout, a->y, sizeof a->y);
    shape_rows(&a->in->shape, a->shi, sizeof a->shi);
    shape_rows(&a->out->shape, a->sho, sizeof a->sho);
    param_locals(e->ch, a);
    if (K && !K->passes_through)
        fprintf(e->o, "    /* %s: %s %s -> %s */\n", a->L->name, layer_kind_name(a->L->kind), a->shi, a->sho);
    return K;
}

/* ---- an activation applied in the store of the GEMM beside it ----
 * linear -> act: the linear's forward writes s and act(s) in one call;
 * act -> linear: the linear's backward-input writes the activation output's
 * gradient g and the activation's input gradient in one call. Only layers
 * next to each other in one chunk, the one's output the other's input (a
 * stash between them, or a chunk boundary, keeps the two calls): the same
 * bits, one pass over memory fewer (runtime/cpu/linear.c). */

static const gen_layer_kind *kind_at(const em_out *e, int i)
{
    const em_chunk *ch = e->ch;
    if (i < ch->first || i > ch->last)
        return NULL;
    return gen_layer_kind_of(e->g->m->layers[i].kind);
}

/* Layer i's forward applies layer i + 1's activation: that activation's K->act. */
static const char *fused_act_after(const em_out *e, int i)
{
    const em_chunk *ch = e->ch;
    const gen_layer_kind *K = kind_at(e, i), *N = kind_at(e, i + 1);
    if (!K || !N || !K->store_act || !N->act || ch->lin[i + 1 - ch->first] != ch->lout[i - ch->first])
        return NULL;
    return N->act;
}

/* Layer i's backward-input applies the backward of layer i - 1's activation
 * (both gradients wanted): that activation's K->act. */
static const char *fused_act_before(const em_out *e, int i)
{
    const em_chunk *ch = e->ch;
    const gen_layer_kind *K = kind_at(e, i), *P = kind_at(e, i - 1);
    if (!K || !P || !K->store_act || !P->act)
        return NULL;
    int s = ch->lin[i - 1 - ch->first], h = ch->lin[i - ch->first];
    if (ch->lout[i - 1 - ch->first] != h || !ch->tens[s].need_grad || !ch->tens[h].need_grad)
        return NULL;
    return P->act;
}

/* ---- the residual add and the norm after it in one pass ----
 * pop add -> [stash] -> norm: the pop's forward writes the sum and the norm's
 * output in one call (the passes_through layers between keep their own
 * statements, after it); stash -> norm: the norm's backward-input adds the
 * skip's gradient, which the stash's backward would add after it. */

/* Layer i's sum is normalised by layer j in the same call: j, else -1. */
static int fused_add_norm(const em_out *e, int i)
{
    const em_chunk *ch = e->ch;
    const gen_layer_kind *K = kind_at(e, i);
    if (!K || !K->is_add || !K->is_add(e->g->m, &e->g->m->layers[i]))
        return -1;
    int j = i + 1;
    while (kind_at(e, j) && kind_at(e, j)->passes_through)
        j++;
    const gen_layer_kind *N = kind_at(e, j);
    return N && N->fwd_add && ch->lin[j - ch->first] == ch->lout[i - ch->first] ? j : -1;
}

/* The earlier layer whose call computes norm j (fused_add_norm), else -1. */
static int norm_fused_back(const em_out *e, int j)
{
    int i = j - 1;
    while (kind_at(e, i) && kind_at(e, i)->passes_through)
        i--;
    return kind_at(e, i) && fused_add_norm(e, i) == j ? i : -1;
}

/* Norm j's backward-input adds the gradient of the skip stashed by layer j - 1. */
static int fused_skip_norm(const em_out *e, int j)
{
    const em_chunk *ch = e->ch;
    const gen_layer_kind *N = kind_at(e, j), *P = kind_at(e, j - 1);
    return N && P && N->bwd_add && P->skip_grad && ch->lout[j - 1 - ch->first] == ch->lin[j - ch->first] &&
           ch->tens[ch->lin[j - ch->first]].need_grad;
}

void emit_layer_fwd(em_out *e, int i)
{
    em_layer a;
    int p = norm_fused_back(e, i);
    if (p >= 0) {
        fprintf(e->o, "    /* %s: in %s's call above */\n", e->g->m->layers[i].name, e->g->m->layers[p].name);
        return;
    }
    if (fused_act_after(e, i - 1)) {
        fprintf(e->o, "    /* %s: in %s's call above */\n", e->g->m->layers[i].name, e->g->m->layers[i - 1].name);
        return;
    }
    const gen_layer_kind *K = forward_begin(e, i, &a);
    const char *act = fused_act_after(e, i);
    int j = fused_add_norm(e, i);
    if (j >= 0) {
        em_layer b;
        char s[64];
        K->add_skip(e, &a, s, sizeof s);
        const gen_layer_kind *N = forward_begin(e, j, &b);
        N->fwd_add(e, &b, a.x, s);
    } else if (K && act) {
        char y[64];
        tval(e, e->ch->lout[i + 1 - e->ch->first], y, sizeof y);
        K->fwd_act(e, &a, act, y);
    } else if (K)
        K->fwd(e, &a);
}

/* In a decode chunk, r is the call's token rows and the shapes are per token. */
void emit_layer_dec(em_out *e, int i)
{
    em_layer a;
    const gen_layer_kind *K = forward_begin(e, i, &a);
    if (K)
        (K->dec ? K->dec : K->fwd)(e, &a);
}

/* Every backward reads the output's gradient dy. */
void emit_layer_bwd_b(em_out *e, int i)
{
    em_layer a;
    if (fused_skip_norm(e, i + 1)) {
        fprintf(e->o, "    /* %s: in %s's call above */\n", e->g->m->layers[i].name, e->g->m->layers[i + 1].name);
        return;
    }
    if (fused_act_before(e, i + 1)) {
        fprintf(e->o, "    /* %s: in %s's call above */\n", e->g->m->layers[i].name, e->g->m->layers[i + 1].name);
        return;
    }
    const gen_layer_kind *K = layer_begin(e, i, &a);
    tgrad(e, a.tout, a.dy, sizeof a.dy);
    param_locals(e->ch, &a);
    const char *act = fused_act_before(e, i);
    if (fused_skip_norm(e, i)) {
        em_layer b;
        char ds[64];
        layer_begin(e, i - 1, &b);
        kind_at(e, i - 1)->skip_grad(e, &b, ds, sizeof ds);
        K->bwd_add(e, &a, ds);
    } else if (K && act) {
        char s[64], dx[64];
        tval(e, e->ch->lin[i - 1 - e->ch->first], s, sizeof s);
        tgrad(e, e->ch->lin[i - 1 - e->ch->first], dx, sizeof dx);
        K->bwd_act(e, &a, act, s, dx);
    } else if (K && K->bwd_b)
        K->bwd_b(e, &a);
}

/* Only layers with weights have code here; each use of a parameter has its own
 * gradient accumulator (count_uses). */
void emit_layer_bwd_w(em_out *e, int i)
{
    const ir_model *m = e->g->m;
    em_layer a;
    const gen_layer_kind *K = layer_begin(e, i, &a);
    if (!K || !K->bwd_w)
        return;
    tgrad(e, a.tout, a.dy, sizeof a.dy);
    for (int k = 0; k < PG_MAX_LAYER_PARAMS; k++) {
        int p = k < a.L->nparam ? a.L->param[k] : -1;
        if (p < 0) {
            sfmt(a.p[k], sizeof a.p[k], "NULL");
            continue;
        }
        const char *gm = plocal(e->ch, p, 1);
        int j = e->g->acc_at[i * PG_MAX_LAYER_PARAMS + k]; /* this use's own accumulator */
        if (j)
            sfmt(a.p[k], sizeof a.p[k], "(%s + %d * %" PRId64 ")", gm, j, acc_numel(&m->params[p]));
        else
            sfmt(a.p[k], sizeof a.p[k], "%s", gm);
    }
    K->bwd_w(e, &a);
}

/* The layer whose backward-weight code alone writes parameter p's gradient on
 * stage S (pg_param_desc.grad_layer), a model layer index; -1 when no one
 * layer finishes it: a buffer, a tie across stages (summed over its stages
 * after the backward), several uses on the stage (their accumulators are
 * folded after it), or a kind without weight-gradient code. */
int grad_layer_of(const pg_gen *g, const em_stage *S, int p)
{
    const ir_model *m = g->m;
    const ir_param *P = &m->params[p];
    if (P->is_buffer || P->tie != TIE_NONE || stage_nacc(g, S->stage, p) != 1)
        return -1;
    for (int c = 0; c < S->nchunks; c++)
        for (int i = S->ch[c].first; i <= S->ch[c].last; i++)
            if (layer_uses(&m->layers[i], p)) {
                const gen_layer_kind *K = gen_layer_kind_of(m->layers[i].kind);
                return K && K->bwd_w ? i : -1;
            }
    return -1;
}

/* Model layer i's index in stage S's layer table (pg_stage_desc.layers: its
 * chunks in order, each chunk's layers in order), -1 when S does not hold it. */
int stage_layer_at(const em_stage *S, int i)
{
    for (int c = 0, at = 0; c < S->nchunks; c++) {
        const em_chunk *ch = &S->ch[c];
        if (i >= ch->first && i <= ch->last)
            return at + i - ch->first;
        at += ch->last - ch->first + 1;
    }
    return -1;
}

/* PG_GRADS_FINAL after layer i's weight-gradient code, when it finishes
 * some parameter's gradient (grad_layer_of): the runtime may start summing
 * them over the replicas there (runtime/core/dp.c). */
void emit_grads_final(em_out *e, int i)
{
    const ir_layer *L = &e->g->m->layers[i];
    for (int k = 0; k < L->nparam && k < PG_MAX_LAYER_PARAMS; k++)
        if (L->param[k] >= 0 && grad_layer_of(e->g, e->S, L->param[k]) == i) {
            fprintf(e->o, "    PG_GRADS_FINAL(io, %d); /* %s's gradients, final after the step's last micro-batch */\n",
                    stage_layer_at(e->S, i), L->name);
            return;
        }
}

/* codegen/gen/layers/swiglu.c — swiglu(d -> h[, bias]): silu(x Wg^T) * (x Wu^T),
 * Llama's gated MLP input. The forward saves both projections g and u; the
 * backward-input leaves their gradients dg and du for the backward-weight
 * (runtime: pg_swiglu_*). Parameters gate.weight[, gate.bias], up.weight[, up.bias]. */
#include <inttypes.h>

#include "gen/gen_layer.h"

enum { G, U, DG, DU }; /* its saved frame buffers */

static void saved(const ir_model *m, em_chunk *ch, int i, int64_t R)
{
    const ir_layer *L = &m->layers[i];
    int li = i - ch->first;
    const em_tensor *in = &ch->tens[ch->lin[li]];
    int64_t n = R * (in->numel / last_dim(&in->shape));
    static const char *const names[4] = {"gate", "up", "dgate", "dup"};
    em_aux *ax = &ch->aux[li];
    char note[200];
    for (int k = 0; k < 4; k++) {
        sfmt(note, sizeof note, "%s %s", L->name, names[k]);
        ax->off[k] = frame_alloc(ch, n * L->out_features * 4, note, "[n, h]");
    }
    ax->n = 4;
}

/* the parameter locals: gate weight, gate bias, up weight, up bias ("NULL": none) */
static void params(const em_layer *a, const char **wg, const char **bg, const char **wu, const char **bu)
{
    int b = a->L->bias;
    *wg = a->p[0];
    *bg = b ? a->p[1] : "NULL";
    *wu = a->p[b ? 2 : 1];
    *bu = b ? a->p[3] : "NULL";
}

static void fwd(em_out *e, em_layer *a)
{
    const int64_t *s = e->ch->aux[a->li].off;
    const char *wg, *bg, *wu, *bu;
    params(a, &wg, &bg, &wu, &bu);
    fprintf(e->o, "    PG_TRY(pg_swiglu_fwd(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s, %s, %s, %s, %s));\n", a->n,
            a->L->in_features, a->L->out_features, a->x, wg, bg, wu, bu, fa(e, s[G]), fa(e, s[U]), a->y);
}

/* always run: it also leaves dg and du for the weight gradient */
static void bwd_b(em_out *e, em_layer *a)
{
    const int64_t *s = e->ch->aux[a->li].off;
    const char *wg, *bg, *wu, *bu;
    params(a, &wg, &bg, &wu, &bu);
    if (a->dx_wanted)
        em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_swiglu_bwd_in(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s, %s, %s, %s, %s)); /* %s */\n",
            a->n, a->L->in_features, a->L->out_features, wg, wu, fa(e, s[G]), fa(e, s[U]), a->dy, fa(e, s[DG]),
            fa(e, s[DU]), a->dx_wanted ? a->dx : "NULL", a->L->name);
}

static void bwd_w(em_out *e, em_layer *a)
{
    const int64_t *s = e->ch->aux[a->li].off;
    int b = a->L->bias;
    em_x(e, a);
    fprintf(e->o, "    PG_TRY(pg_swiglu_bwd_w(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s, %s, %s, %s)); /* %s */\n", a->n,
            a->L->in_features, a->L->out_features, a->x, fa(e, s[DG]), fa(e, s[DU]), a->p[0], b ? a->p[1] : "NULL",
            a->p[b ? 2 : 1], b ? a->p[3] : "NULL", a->L->name);
}

static unsigned gemm_weights_of(const ir_layer *L)
{
    return L->bias ? (1u << 0 | 1u << 2) : (1u << 0 | 1u << 1);
}

static void json_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    fprintf(o, "\"in\": %" PRId64 ", \"out\": %" PRId64 ", \"bias\": %s", L->in_features, L->out_features,
            L->bias ? "true" : "false");
}

const gen_layer_kind gen_swiglu = {
    .gemm_weights_of = gemm_weights_of,
    .bf16_ws = gen_bf16ws_in_out,
    .per_token = 1,
    .saved = saved, .fwd = fwd, .bwd_b = bwd_b, .bwd_w = bwd_w, .json_attrs = json_attrs,
};

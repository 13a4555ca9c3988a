/* codegen/gen/layers/linear.c — linear(in -> out[, bias]): y = x W^T + b over the
 * last dim, W [out, in], b [out] (runtime: pg_linear_*). */
#include <inttypes.h>

#include "gen/gen_layer.h"

static void fwd(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    fprintf(e->o, "    PG_TRY(pg_linear_fwd(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s));\n", a->n, L->in_features,
            L->out_features, a->x, a->p[0], L->bias ? a->p[1] : "NULL", a->y);
}

static void bwd_b(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    if (!a->dx_wanted)
        return;
    em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_linear_bwd_in(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s)); /* %s */\n", a->n,
            L->in_features, L->out_features, a->dy, a->p[0], a->dx, L->name);
}

/* y = act(x W^T + b): the product into the linear's own output, the activation's output y in the same call */
static void fwd_act(em_out *e, em_layer *a, const char *act, const char *y)
{
    const ir_layer *L = a->L;
    fprintf(e->o, "    PG_TRY(pg_linear_act_fwd(c, pg_%s_fwd, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s, %s));\n", act,
            a->n, L->in_features, L->out_features, a->x, a->p[0], L->bias ? a->p[1] : "NULL", a->y, y);
}

/* the input's gradient (the activation's output gradient) and, in the same
 * call, the activation's input gradient dx at its input s */
static void bwd_act(em_out *e, em_layer *a, const char *act, const char *s, const char *dx)
{
    const ir_layer *L = a->L;
    em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_linear_bwd_in_act(c, pg_%s_bwd_in, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s, %s)); /* %s */\n",
            act, a->n, L->in_features, L->out_features, a->dy, a->p[0], s, a->dx, dx, L->name);
}

static void bwd_w(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    em_x(e, a);
    fprintf(e->o, "    PG_TRY(pg_linear_bwd_w(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s)); /* %s */\n", a->n,
            L->in_features, L->out_features, a->x, a->dy, a->p[0], L->bias ? a->p[1] : "NULL", L->name);
}

static void json_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    fprintf(o, "\"in_features\": %" PRId64 ", \"out_features\": %" PRId64 ", \"bias\": %s", L->in_features,
            L->out_features, L->bias ? "true" : "false");
}

const gen_layer_kind gen_linear = {
    .gemm_weights = 1u << 0, /* W */
    .bf16_ws = gen_bf16ws_in_out,
    .per_token = 1,
    .store_act = 1, .fwd_act = fwd_act, .bwd_act = bwd_act,
    .fwd = fwd, .bwd_b = bwd_b, .bwd_w = bwd_w, .json_attrs = json_attrs,
};

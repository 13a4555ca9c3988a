/* codegen/gen/layers/activation.c — the element-wise activations relu, gelu
 * (GPT-2's tanh form), sigmoid, tanh and silu: no parameters, the backward
 * reads the input (runtime: pg_relu_*, pg_gelu_*, pg_sigmoid_*, ...). */
#include "gen/gen_layer.h"

static void act_fwd(em_out *e, em_layer *a, const char *op)
{
    fprintf(e->o, "    PG_TRY(pg_%s_fwd(c, %s, %s, %s));\n", op, a->cnt, a->x, a->y);
}

static void act_bwd_b(em_out *e, em_layer *a, const char *op)
{
    em_x(e, a);
    if (!a->dx_wanted)
        return;
    em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_%s_bwd_in(c, %s, %s, %s, %s)); /* %s */\n", op, a->cnt, a->x, a->dy, a->dx, a->L->name);
}

static void relu_fwd(em_out *e, em_layer *a) { act_fwd(e, a, "relu"); }
static void relu_bwd_b(em_out *e, em_layer *a) { act_bwd_b(e, a, "relu"); }
static void gelu_fwd(em_out *e, em_layer *a) { act_fwd(e, a, "gelu"); }
static void gelu_bwd_b(em_out *e, em_layer *a) { act_bwd_b(e, a, "gelu"); }

static void sigmoid_fwd(em_out *e, em_layer *a) { act_fwd(e, a, "sigmoid"); }
static void sigmoid_bwd_b(em_out *e, em_layer *a) { act_bwd_b(e, a, "sigmoid"); }
static void tanh_fwd(em_out *e, em_layer *a) { act_fwd(e, a, "tanh"); }
static void tanh_bwd_b(em_out *e, em_layer *a) { act_bwd_b(e, a, "tanh"); }
static void silu_fwd(em_out *e, em_layer *a) { act_fwd(e, a, "silu"); }
static void silu_bwd_b(em_out *e, em_layer *a) { act_bwd_b(e, a, "silu"); }

const gen_layer_kind gen_relu = {.act = "relu", .per_token = 1, .fwd = relu_fwd, .bwd_b = relu_bwd_b};
const gen_layer_kind gen_gelu = {.act = "gelu", .per_token = 1, .fwd = gelu_fwd, .bwd_b = gelu_bwd_b};
const gen_layer_kind gen_sigmoid = {.act = "sigmoid", .per_token = 1, .fwd = sigmoid_fwd, .bwd_b = sigmoid_bwd_b};
const gen_layer_kind gen_tanh = {.act = "tanh", .per_token = 1, .fwd = tanh_fwd, .bwd_b = tanh_bwd_b};
const gen_layer_kind gen_silu = {.act = "silu", .per_token = 1, .fwd = silu_fwd, .bwd_b = silu_bwd_b};

/* dsl/layers_lm.c — the layer kinds of today's language models, beside
 * layers.c's table: attention in every form (grouped-query heads, rotary
 * positions, with or without biases, one qkv projection as GPT-2's or q, k,
 * v, o as Llama's, dropout on its probabilities), rmsnorm and swiglu. Each
 * has its attributes and its apply function (shape rule and parameters). */
#include <math.h>

#include "check_ctx.h"

#define POSITIVE 1, 1, 0, 0, 1, 0  /* >= 1 (ints) */
#define GT0 1, 0, 0, 0, 0, 0       /* > 0 */
#define UNIT_OPEN 1, 1, 1, 0, 0, 1 /* [0, 1) */
#define NORANGE 0, 0, 0, 0, 0, 0

const attr_spec lm_attention_attrs[] = {
    {"heads", AT_INT, A_POS | A_REQ, POSITIVE, NULL},
    {"causal", AT_FLAG, 0, NORANGE, NULL},
    {"kv_heads", AT_INT, 0, POSITIVE, NULL},
    {"rope", AT_FLOAT, 0, GT0, NULL},
    {"bias", AT_BOOL, 0, NORANGE, NULL},
    {"separate_qkv", AT_BOOL, 0, NORANGE, NULL},
    {"dropout", AT_FLOAT, 0, UNIT_OPEN, NULL},
    {0}};
enum { ATT_HEADS, ATT_CAUSAL, ATT_KV, ATT_ROPE, ATT_BIAS, ATT_SEPARATE, ATT_DROPOUT };

const attr_spec lm_rmsnorm_attrs[] = {
    {"eps", AT_FLOAT, A_POS, GT0, NULL},
    {0}};

const attr_spec lm_swiglu_attrs[] = {
    {"in", AT_INT, A_POS | A_ARROW | A_REQ, POSITIVE, NULL},
    {"out", AT_INT, A_POS | A_REQ, POSITIVE, NULL},
    {"bias", AT_BOOL, 0, NORANGE, NULL},
    {0}};

static pg_shape shape2(int64_t a, int64_t b) { return (pg_shape){2, {a, b}}; }
static pg_shape shape1(int64_t a) { return (pg_shape){1, {a}}; }

/* "<name>.weight" [out, in] and, with L->bias, "<name>.bias" [out]: PyTorch's
 * Linear init, uniform in +-1/sqrt(in) */
static void add_projection(chk *c, ir_layer *L, const char *name, int64_t out, int64_t in)
{
    char w[64], bname[64];
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(bname, sizeof bname, "%s.bias", name);
    double sc = 1.0 / sqrt((double)in);
    layer_add_own(c, L, w, shape2(out, in), INIT_UNIFORM, sc, 1);
    if (L->bias) layer_add_own(c, L, bname, shape1(out), INIT_UNIFORM, sc, 0);
}

/* attention(heads, causal, kv_heads = K, rope = THETA, bias = B, separate_qkv = S,
 * dropout = P) on [T, d]: head size hd = d / heads; K key/value heads, each
 * shared by heads / K query heads. Parameters, in this order (biases only with
 * bias = true, the default):
 *   one projection:  qkv.weight [(heads + 2K) hd, d] (q | k | v rows), qkv.bias,
 *                    proj.weight [d, d], proj.bias
 *   separate_qkv:    q.weight [d, d], q.bias, k.weight [K hd, d], k.bias,
 *                    v.weight [K hd, d], v.bias, o.weight [d, d], o.bias */
void lm_apply_attention(chk *c, ir_layer *L, const bound_attr *b, chain *ch)
{
    L->heads = b[ATT_HEADS].i;
    L->causal = b[ATT_CAUSAL].set ? (int)b[ATT_CAUSAL].i : 0;
    L->kv_heads = b[ATT_KV].set ? b[ATT_KV].i : L->heads;
    L->rope_theta = b[ATT_ROPE].set ? b[ATT_ROPE].f : 0.0;
    L->bias = b[ATT_BIAS].set ? (int)b[ATT_BIAS].i : 1;
    L->separate_qkv = b[ATT_SEPARATE].set ? (int)b[ATT_SEPARATE].i : 0;
    L->p = b[ATT_DROPOUT].set ? b[ATT_DROPOUT].f : 0.0;
    if (!ch->known || layer_need_f32(c, L, ch)) return;
    char a[96];
    if (ch->shape.rank != 2) {
        chk_error(c, L->loc, "attention expects input [T, d] but gets %s", pg_shape_str(ch->dt, &ch->shape, a, sizeof a));
        ch->known = 0;
        return;
    }
    int64_t d = ch->shape.dim[1];
    L->dim = d;
    if (d % L->heads != 0) {
        chk_error(c, b[ATT_HEADS].loc, "attention: the model width %lld is not divisible by heads = %lld", (long long)d,
                  (long long)L->heads);
        return;
    }
    if (L->heads % L->kv_heads != 0) {
        chk_error(c, b[ATT_KV].loc, "attention: kv_heads = %lld does not divide heads = %lld (each key/value head "
                  "serves heads / kv_heads query heads)", (long long)L->kv_heads, (long long)L->heads);
        return;
    }
    int64_t hd = d / L->heads, kvd = L->kv_heads * hd;
    if (L->rope_theta > 0 && hd % 2 != 0) {
        chk_error(c, b[ATT_ROPE].loc, "attention: rope needs an even head size, but d / heads = %lld / %lld = %lld",
                  (long long)d, (long long)L->heads, (long long)hd);
        return;
    }
    int64_t d3;
    if (__builtin_mul_overflow(d, (int64_t)3, &d3)) {
        chk_error(c, L->loc, "attention: integer overflow in 3 * %lld", (long long)d);
        ch->known = 0;
        return;
    }
    if (L->separate_qkv) {
        add_projection(c, L, "q", d, d);
        add_projection(c, L, "k", kvd, d);
        add_projection(c, L, "v", kvd, d);
        add_projection(c, L, "o", d, d);
    } else {
        add_projection(c, L, "qkv", d + 2 * kvd, d);
        add_projection(c, L, "proj", d, d);
    }
}

/* rmsnorm([eps]) over the last dim: x / sqrt(mean(x^2) + eps) * weight, weight [d]
 * starting at 1 (Llama's LlamaRMSNorm; eps 1e-6 unless given). */
void lm_apply_rmsnorm(chk *c, ir_layer *L, const bound_attr *b, chain *ch)
{
    L->eps = b[0].set ? b[0].f : 1e-6;
    if (!ch->known || layer_need_f32(c, L, ch)) return;
    layer_add_own(c, L, "weight", shape1(ch->shape.dim[ch->shape.rank - 1]), INIT_ONES, 0, 0);
}

/* swiglu(d -> h[, bias = false]): [.., d] -> [.., h], silu(x Wg^T) * (x Wu^T),
 * gate.weight and up.weight [h, d] (and their biases with bias = true): the
 * gate and up projections of Llama's MLP; its down projection is a linear(h -> d). */
void lm_apply_swiglu(chk *c, ir_layer *L, const bound_attr *b, chain *ch)
{
    L->in_features = b[0].i;
    L->out_features = b[1].i;
    L->bias = b[2].set ? (int)b[2].i : 0;
    add_projection(c, L, "gate", L->out_features, L->in_features);
    add_projection(c, L, "up", L->out_features, L->in_features);
    if (!ch->known || layer_need_f32(c, L, ch)) return;
    layer_want_last(c, L, ch, L->in_features, L->out_features);
}

/* dsl/layers_conv.c — the layer kinds of convolutional networks: their
 * attributes (PyTorch's names, argument order and defaults) and shape rules,
 * with parameters named and laid out as PyTorch's modules' state dicts.
 * Per-sample shapes are channel-first, as in PyTorch: an image is [C, H, W], a
 * signal [C, L]. layers.c's layer_apply calls layer_apply_conv for every kind
 * from LK_CONV2D on. Every shape error names the input's shape and what the
 * layer needed. */
#include <math.h>
#include <string.h>
#include "check_ctx.h"

#define POSITIVE 1, 1, 0, 0, 1, 0 /* >= 1 */
#define NONNEG 1, 1, 0, 0, 0, 0   /* >= 0 */
#define DIM_OR_MINUS1 1, 1, 0, 0, -1, 0 /* >= -1 (reshape's inferred dim; 0 refused apart) */
#define NORANGE 0, 0, 0, 0, 0, 0

/* ---- attribute tables (PyTorch's argument order) ------------------------- */
const attr_spec conv2d_attrs[] = {
    {"in", AT_INT, A_POS | A_ARROW | A_REQ, POSITIVE, NULL},
    {"out", AT_INT, A_POS | A_REQ, POSITIVE, NULL},
    {"kernel", AT_INT2, A_POS | A_REQ, POSITIVE, NULL},
    {"stride", AT_INT2, A_POS, POSITIVE, NULL},
    {"padding", AT_INT2, A_POS, NONNEG, NULL},
    {"dilation", AT_INT2, A_POS, POSITIVE, NULL},
    {"groups", AT_INT, A_POS, POSITIVE, NULL},
    {"bias", AT_BOOL, A_POS, NORANGE, NULL},
    {0}};
const attr_spec conv1d_attrs[] = {
    {"in", AT_INT, A_POS | A_ARROW | A_REQ, POSITIVE, NULL},
    {"out", AT_INT, A_POS | A_REQ, POSITIVE, NULL},
    {"kernel", AT_INT, A_POS | A_REQ, POSITIVE, NULL},
    {"stride", AT_INT, A_POS, POSITIVE, NULL},
    {"padding", AT_INT, A_POS, NONNEG, NULL},
    {"dilation", AT_INT, A_POS, POSITIVE, NULL},
    {"groups", AT_INT, A_POS, POSITIVE, NULL},
    {"bias", AT_BOOL, A_POS, NORANGE, NULL},
    {0}};
const attr_spec conv_transpose2d_attrs[] = {
    {"in", AT_INT, A_POS | A_ARROW | A_REQ, POSITIVE, NULL},
    {"out", AT_INT, A_POS | A_REQ, POSITIVE, NULL},
    {"kernel", AT_INT2, A_POS | A_REQ, POSITIVE, NULL},
    {"stride", AT_INT2, A_POS, POSITIVE, NULL},
    {"padding", AT_INT2, A_POS, NONNEG, NULL},
    {"output_padding", AT_INT2, A_POS, NONNEG, NULL},
    {"groups", AT_INT, A_POS, POSITIVE, NULL},
    {"bias", AT_BOOL, A_POS, NORANGE, NULL},
    {0}};
const attr_spec pool2d_attrs[] = { /* stride defaults to the kernel, as PyTorch's */
    {"kernel", AT_INT2, A_POS | A_REQ, POSITIVE, NULL},
    {"stride", AT_INT2, A_POS, POSITIVE, NULL},
    {"padding", AT_INT2, A_POS, NONNEG, NULL},
    {0}};
const attr_spec upsample_attrs[] = {
    {"scale", AT_INT, A_POS, POSITIVE, NULL},
    {"mode", AT_WORD, A_POS, NORANGE, "nearest|bilinear"},
    {0}};
const attr_spec reshape_attrs[] = { /* reshape(d0, d1, ...): up to PG_MAX_DIMS, one may be -1 */
    {"d0", AT_INT, A_POS | A_REQ, DIM_OR_MINUS1, NULL},
    {"d1", AT_INT, A_POS, DIM_OR_MINUS1, NULL},
    {"d2", AT_INT, A_POS, DIM_OR_MINUS1, NULL},
    {"d3", AT_INT, A_POS, DIM_OR_MINUS1, NULL},
    {0}};
const attr_spec transpose_attrs[] = {
    {"dim0", AT_INT, A_POS | A_REQ, NONNEG, NULL},
    {"dim1", AT_INT, A_POS | A_REQ, NONNEG, NULL},
    {0}};
const attr_spec mean_attrs[] = {
    {"dim", AT_INT, A_POS | A_REQ, NONNEG, NULL},
    {0}};
const attr_spec pop_concat_attrs[] = {
    {"dim", AT_INT, A_POS, NONNEG, NULL},
    {0}};

/* ---- helpers ------------------------------------------------------------- */

static const char *sh(const chain *ch, char *buf, size_t n) { return pg_shape_str(ch->dt, &ch->shape, buf, n); }

static const char *kname(const ir_layer *L) { return layer_kind_name(L->kind); }

/* The input must be f32 of this rank; else an error naming what it needed. */
static int need_rank(chk *c, ir_layer *L, chain *ch, int rank, const char *what) {
    if (layer_need_f32(c, L, ch)) return 1;
    if (ch->shape.rank == rank) return 0;
    char a[96];
    chk_error(c, L->loc, "%s expects %s but gets %s", kname(L), what, sh(ch, a, sizeof a));
    ch->known = 0;
    return 1;
}

/* (h, w) of a bound AT_INT2 attribute, or the default pair. */
static void pair_of(const bound_attr *b, int64_t dh, int64_t dw, int64_t out[2]) {
    out[0] = b->set ? b->i : dh;
    out[1] = b->set ? b->i2 : dw;
}

static const char *pair_text(const int64_t v[2], int one_d, char *buf, size_t n) {
    if (one_d || v[0] == v[1]) snprintf(buf, n, "%lld", (long long)v[1]);
    else snprintf(buf, n, "(%lld, %lld)", (long long)v[0], (long long)v[1]);
    return buf;
}

/* The spatial output of a convolution or pooling window along one axis: size
 * in, padding p on each side, window k dilated by d, stride s. -1 with an error
 * when the window is larger than the padded input. */
static int64_t window_out(chk *c, const ir_layer *L, const chain *ch, int one_d, int axis, int64_t in) {
    const char *an = one_d ? "length" : axis == 0 ? "height" : "width";
    int64_t k = L->kernel[axis], s = L->stride[axis], p = L->padding[axis], d = L->dilation[axis];
    int64_t span, padded;
    char a[96];
    if (__builtin_mul_overflow(d, k - 1, &span) || __builtin_add_overflow(span, (int64_t)1, &span) ||
        __builtin_mul_overflow(p, (int64_t)2, &padded) || __builtin_add_overflow(padded, in, &padded)) {
        chk_error(c, L->loc, "%s: integer overflow in the window or the padded input (%s)", kname(L), sh(ch, a, sizeof a));
        return -1;
    }
    if (span > padded) {
        char dil[96] = "";
        if (d > 1) snprintf(dil, sizeof dil, " (dilation %lld: it spans %lld)", (long long)d, (long long)span);
        chk_error(c, L->loc, "%s: the kernel %s %lld%s is larger than the padded input %s %lld (input %s, padding %lld)",
                  kname(L), an, (long long)k, dil, an, (long long)padded, sh(ch, a, sizeof a), (long long)p);
        return -1;
    }
    return (padded - span) / s + 1;
}

/* in and out must be divisible by groups (PyTorch's rule): an error at groups. */
static int groups_ok(chk *c, const ir_layer *L, const bound_attr *g) {
    int bad = 0;
    if (L->in_features % L->groups) {
        chk_error(c, g->loc, "%s: in = %lld is not divisible by groups = %lld", kname(L), (long long)L->in_features,
                  (long long)L->groups);
        bad = 1;
    }
    if (L->out_features % L->groups) {
        chk_error(c, g->loc, "%s: out = %lld is not divisible by groups = %lld", kname(L), (long long)L->out_features,
                  (long long)L->groups);
        bad = 1;
    }
    return !bad;
}

/* "conv2d(3 -> 16) expects input f32[3, H, W] but gets f32[4, 32, 32]" */
static int channels_ok(chk *c, const ir_layer *L, chain *ch, const char *dims) {
    if (ch->shape.dim[0] == L->in_features) return 1;
    char a[96];
    chk_error(c, L->loc, "%s(%lld -> %lld) expects input f32[%lld, %s] but gets %s", kname(L),
              (long long)L->in_features, (long long)L->out_features, (long long)L->in_features, dims,
              sh(ch, a, sizeof a));
    return 0;
}

/* ---- convolutions -------------------------------------------------------- */

/* conv2d, conv1d: weight [out, in / groups, kh, kw] ([out, in / groups, k]), bias [out] */
static void apply_conv(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    int one_d = L->kind == LK_CONV1D;
    L->in_features = b[0].i;
    L->out_features = b[1].i;
    if (one_d) { /* the height axis of a signal: one row, no window */
        L->kernel[0] = L->stride[0] = L->dilation[0] = 1, L->padding[0] = 0;
        L->kernel[1] = b[2].i;
        L->stride[1] = b[3].set ? b[3].i : 1;
        L->padding[1] = b[4].set ? b[4].i : 0;
        L->dilation[1] = b[5].set ? b[5].i : 1;
    } else {
        pair_of(&b[2], b[2].i, b[2].i2, L->kernel);
        pair_of(&b[3], 1, 1, L->stride);
        pair_of(&b[4], 0, 0, L->padding);
        pair_of(&b[5], 1, 1, L->dilation);
    }
    L->output_padding[0] = L->output_padding[1] = 0;
    L->groups = b[6].set ? b[6].i : 1;
    L->bias = b[7].set ? (int)b[7].i : 1;
    if (groups_ok(c, L, &b[6])) {
        int64_t cin = L->in_features / L->groups, fan = cin * L->kernel[0] * L->kernel[1];
        double sc = 1.0 / sqrt((double)fan); /* PyTorch's kaiming_uniform(a = sqrt 5): U(-1/sqrt(fan_in), ..) */
        pg_shape w = one_d ? (pg_shape){3, {L->out_features, cin, L->kernel[1]}}
                           : (pg_shape){4, {L->out_features, cin, L->kernel[0], L->kernel[1]}};
        layer_add_own(c, L, "weight", w, INIT_UNIFORM, sc, 1);
        if (L->bias) layer_add_own(c, L, "bias", (pg_shape){1, {L->out_features}}, INIT_UNIFORM, sc, 0);
    }
    if (!ch->known || need_rank(c, L, ch, one_d ? 2 : 3, one_d ? "a signal f32[C, L]" : "an image f32[C, H, W]"))
        return;
    channels_ok(c, L, ch, one_d ? "L" : "H, W");
    int64_t oh = one_d ? 1 : window_out(c, L, ch, 0, 0, ch->shape.dim[1]);
    int64_t ow = window_out(c, L, ch, one_d, 1, ch->shape.dim[one_d ? 1 : 2]);
    if (oh < 0 || ow < 0) {
        ch->known = 0;
        return;
    }
    ch->shape = one_d ? (pg_shape){2, {L->out_features, ow}} : (pg_shape){3, {L->out_features, oh, ow}};
}

/* The output of a transposed convolution along one axis:
 * (in - 1) stride - 2 padding + (kernel - 1) + output_padding + 1, at least 1. */
static int64_t transposed_out(chk *c, const ir_layer *L, const chain *ch, int axis, int64_t in) {
    const char *an = axis == 0 ? "height" : "width";
    int64_t k = L->kernel[axis], s = L->stride[axis], p = L->padding[axis], op = L->output_padding[axis];
    int64_t o, p2;
    char a[96];
    if (__builtin_mul_overflow(in - 1, s, &o) || __builtin_add_overflow(o, k, &o) || __builtin_add_overflow(o, op, &o) ||
        __builtin_mul_overflow(p, (int64_t)2, &p2) || __builtin_sub_overflow(o, p2, &o)) {
        chk_error(c, L->loc, "%s: integer overflow in the output size (input %s)", kname(L), sh(ch, a, sizeof a));
        return -1;
    }
    if (o < 1) {
        chk_error(c, L->loc, "%s: the output %s would be %lld, below 1 (input %s, kernel %lld, stride %lld, "
                  "padding %lld)", kname(L), an, (long long)o, sh(ch, a, sizeof a), (long long)k, (long long)s,
                  (long long)p);
        return -1;
    }
    return o;
}

/* conv_transpose2d: weight [in, out / groups, kh, kw], bias [out] */
static void apply_conv_t(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    L->in_features = b[0].i;
    L->out_features = b[1].i;
    pair_of(&b[2], b[2].i, b[2].i2, L->kernel);
    pair_of(&b[3], 1, 1, L->stride);
    pair_of(&b[4], 0, 0, L->padding);
    pair_of(&b[5], 0, 0, L->output_padding);
    L->dilation[0] = L->dilation[1] = 1;
    L->groups = b[6].set ? b[6].i : 1;
    L->bias = b[7].set ? (int)b[7].i : 1;
    int bad = 0;
    for (int a = 0; a < 2; a++)
        if (L->output_padding[a] >= L->stride[a] && !bad) {
            char op[48], st[48];
            chk_error(c, b[5].loc, "conv_transpose2d: output_padding %s must be smaller than the stride %s",
                      pair_text(L->output_padding, 0, op, sizeof op), pair_text(L->stride, 0, st, sizeof st));
            bad = 1;
        }
    if (groups_ok(c, L, &b[6])) {
        int64_t cout = L->out_features / L->groups, fan = cout * L->kernel[0] * L->kernel[1];
        double sc = 1.0 / sqrt((double)fan); /* PyTorch's fan_in of a transposed weight: its dim 1 */
        layer_add_own(c, L, "weight", (pg_shape){4, {L->in_features, cout, L->kernel[0], L->kernel[1]}},
                        INIT_UNIFORM, sc, 1);
        if (L->bias) layer_add_own(c, L, "bias", (pg_shape){1, {L->out_features}}, INIT_UNIFORM, sc, 0);
    }
    if (!ch->known || need_rank(c, L, ch, 3, "an image f32[C, H, W]")) return;
    channels_ok(c, L, ch, "H, W");
    int64_t oh = transposed_out(c, L, ch, 0, ch->shape.dim[1]), ow = transposed_out(c, L, ch, 1, ch->shape.dim[2]);
    if (oh < 0 || ow < 0 || bad) {
        ch->known = 0;
        return;
    }
    ch->shape = (pg_shape){3, {L->out_features, oh, ow}};
}

/* ---- pooling and resampling ---------------------------------------------- */

/* maxpool2d, avgpool2d: [C, H, W] -> [C, OH, OW]; padding at most half the
 * kernel (PyTorch refuses more) */
static void apply_pool(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    pair_of(&b[0], b[0].i, b[0].i2, L->kernel);
    pair_of(&b[1], L->kernel[0], L->kernel[1], L->stride);
    pair_of(&b[2], 0, 0, L->padding);
    L->dilation[0] = L->dilation[1] = 1;
    int bad = 0;
    for (int a = 0; a < 2 && !bad; a++)
        if (L->padding[a] > L->kernel[a] / 2) {
            char p[48], k[48];
            chk_error(c, b[2].loc, "%s: padding %s is more than half the kernel %s", kname(L),
                      pair_text(L->padding, 0, p, sizeof p), pair_text(L->kernel, 0, k, sizeof k));
            bad = 1;
        }
    if (!ch->known || need_rank(c, L, ch, 3, "an image f32[C, H, W]")) return;
    int64_t oh = bad ? -1 : window_out(c, L, ch, 0, 0, ch->shape.dim[1]);
    int64_t ow = bad ? -1 : window_out(c, L, ch, 0, 1, ch->shape.dim[2]);
    if (oh < 0 || ow < 0) {
        ch->known = 0;
        return;
    }
    ch->shape.dim[1] = oh;
    ch->shape.dim[2] = ow;
}

static void apply_global_avgpool(chk *c, ir_layer *L, chain *ch) {
    if (!ch->known || need_rank(c, L, ch, 3, "an image f32[C, H, W]")) return;
    ch->shape = (pg_shape){1, {ch->shape.dim[0]}};
}

static void apply_upsample(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    L->scale = b[0].set ? b[0].i : 2;
    L->bilinear = b[1].set && strcmp(b[1].word, "bilinear") == 0;
    if (!ch->known || need_rank(c, L, ch, 3, "an image f32[C, H, W]")) return;
    for (int d = 1; d < 3; d++)
        if (__builtin_mul_overflow(ch->shape.dim[d], L->scale, &ch->shape.dim[d])) {
            chk_error(c, b[0].loc, "upsample: integer overflow scaling the input by %lld", (long long)L->scale);
            ch->known = 0;
            return;
        }
}

/* ---- shapes -------------------------------------------------------------- */

static void apply_flatten(chk *c, ir_layer *L, chain *ch) {
    if (!ch->known || layer_need_f32(c, L, ch)) return;
    ch->shape = (pg_shape){1, {pg_shape_numel(&ch->shape)}};
}

/* reshape(d0, d1, ...): as PyTorch's view of the per-sample dims, one of them
 * may be -1 (inferred) */
static void apply_reshape(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    pg_shape want = {0, {0}};
    int infer = -1, bad = 0;
    for (int k = 0; k < PG_MAX_DIMS && b[k].set; k++) {
        if (b[k].i == 0) {
            chk_error(c, b[k].loc, "reshape: a dimension of 0 (a sample would hold nothing)");
            bad = 1;
        } else if (b[k].i < 0 && infer >= 0) {
            chk_error(c, b[k].loc, "reshape: only one dimension can be -1 (inferred)");
            bad = 1;
        }
        if (b[k].i < 0) infer = k;
        want.dim[want.rank++] = b[k].i;
    }
    for (int k = want.rank; k < PG_MAX_DIMS; k++)
        if (b[k].set && !bad) {
            chk_error(c, b[k].loc, "reshape: d%d is given without d%d; the dims are d0, d1, ... in order", k, want.rank);
            bad = 1;
        }
    if (bad) {
        ch->known = 0;
        return;
    }
    if (!ch->known || layer_need_f32(c, L, ch)) return;
    int64_t numel = pg_shape_numel(&ch->shape), known = 1;
    for (int k = 0; k < want.rank; k++)
        if (k != infer && __builtin_mul_overflow(known, want.dim[k], &known)) known = -1;
    char a[96], w[96] = "", *o = w;
    for (int k = 0; k < want.rank; k++)
        o += snprintf(o, sizeof w - (size_t)(o - w), "%s%lld", k ? ", " : "", (long long)want.dim[k]);
    if (known > 0 && infer >= 0 && numel % known == 0) want.dim[infer] = numel / known;
    if (known <= 0 || (infer >= 0 && numel % known) || pg_shape_numel(&want) != numel) {
        chk_error(c, L->loc, "reshape(%s) cannot hold the input %s: it has %lld elements per sample", w,
                  sh(ch, a, sizeof a), (long long)numel);
        ch->known = 0;
        return;
    }
    ch->shape = want;
}

/* a per-sample dim of the input: an error naming its dims when out of range */
static int dim_ok(chk *c, const ir_layer *L, chain *ch, const bound_attr *b, int64_t d) {
    if (d < ch->shape.rank) return 1;
    char a[96];
    chk_error(c, b->loc, "%s: dim %lld is out of range: the input %s has dims 0 .. %d (per sample; the batch is "
              "implicit)", kname(L), (long long)d, sh(ch, a, sizeof a), ch->shape.rank - 1);
    ch->known = 0;
    return 0;
}

static void apply_transpose(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    L->axis[0] = (int)(b[0].i < PG_MAX_DIMS ? b[0].i : PG_MAX_DIMS);
    L->axis[1] = (int)(b[1].i < PG_MAX_DIMS ? b[1].i : PG_MAX_DIMS);
    if (!ch->known || layer_need_f32(c, L, ch)) return;
    if (!dim_ok(c, L, ch, &b[0], b[0].i) || !dim_ok(c, L, ch, &b[1], b[1].i)) return;
    int64_t t = ch->shape.dim[L->axis[0]];
    ch->shape.dim[L->axis[0]] = ch->shape.dim[L->axis[1]];
    ch->shape.dim[L->axis[1]] = t;
}

static void apply_mean(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    L->axis[0] = (int)(b[0].i < PG_MAX_DIMS ? b[0].i : PG_MAX_DIMS);
    if (!ch->known || layer_need_f32(c, L, ch)) return;
    char a[96];
    if (ch->shape.rank < 2) {
        chk_error(c, L->loc, "mean needs at least 2 per-sample dims but gets %s (the batch is implicit)",
                  sh(ch, a, sizeof a));
        ch->known = 0;
        return;
    }
    if (!dim_ok(c, L, ch, &b[0], b[0].i)) return;
    for (int k = L->axis[0]; k + 1 < ch->shape.rank; k++) ch->shape.dim[k] = ch->shape.dim[k + 1];
    ch->shape.rank--;
}

/* ---- batchnorm2d: per channel (dim 0) over the batch and the positions ---- */

static void apply_batchnorm2d(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    L->deferred = b[0].set ? (int)b[0].i : 0;
    L->eps = b[1].set ? b[1].f : 1e-5;
    L->momentum = b[2].set ? b[2].f : 0.1;
    if (!ch->known || need_rank(c, L, ch, 3, "an image f32[C, H, W]")) return;
    pg_shape s = {1, {ch->shape.dim[0]}};
    layer_add_own(c, L, "weight", s, INIT_ONES, 0, 0);
    layer_add_own(c, L, "bias", s, INIT_ZEROS, 0, 0);
    layer_add_buffer(c, L, "running_mean", s, INIT_ZEROS);
    layer_add_buffer(c, L, "running_var", s, INIT_ONES);
}

void layer_apply_conv(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    switch (L->kind) {
    case LK_CONV2D: case LK_CONV1D: apply_conv(c, L, b, ch); break;
    case LK_CONV_T2D: apply_conv_t(c, L, b, ch); break;
    case LK_MAXPOOL2D: case LK_AVGPOOL2D: apply_pool(c, L, b, ch); break;
    case LK_GLOBAL_AVGPOOL: apply_global_avgpool(c, L, ch); break;
    case LK_UPSAMPLE: apply_upsample(c, L, b, ch); break;
    case LK_FLATTEN: apply_flatten(c, L, ch); break;
    case LK_RESHAPE: apply_reshape(c, L, b, ch); break;
    case LK_TRANSPOSE: apply_transpose(c, L, b, ch); break;
    case LK_MEAN: apply_mean(c, L, b, ch); break;
    case LK_BATCHNORM2D: apply_batchnorm2d(c, L, b, ch); break;
    case LK_SIGMOID: case LK_TANH: case LK_SILU:
        if (ch->known) layer_need_f32(c, L, ch);
        break;
    default: break;
    }
}

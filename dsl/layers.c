/* dsl/layers.c — the layer kinds: their attributes (names, types, defaults,
 * ranges), how call arguments bind to them, and each kind's shape rule and
 * parameters. One table row and one apply function per kind. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "check_ctx.h"

/* ---- attribute tables ---------------------------------------------------- */
#define POSITIVE 1, 1, 0, 0, 1, 0      /* >= 1 (ints) */
#define GT0 1, 0, 0, 0, 0, 0           /* > 0 */
#define UNIT_OPEN 1, 1, 1, 0, 0, 1     /* [0, 1) */
#define NORANGE 0, 0, 0, 0, 0, 0

static const attr_spec linear_attrs[] = {
    {"in", AT_INT, A_POS | A_ARROW | A_REQ, POSITIVE, NULL},
    {"out", AT_INT, A_POS | A_REQ, POSITIVE, NULL},
    {"bias", AT_BOOL, A_POS, NORANGE, NULL},
    {0}};
static const attr_spec none_attrs[] = {{0}};
static const attr_spec layernorm_attrs[] = {
    {"eps", AT_FLOAT, A_POS, GT0, NULL},
    {"bias", AT_BOOL, 0, NORANGE, NULL},
    {0}};
static const attr_spec batchnorm_attrs[] = {
    {"deferred", AT_FLAG, 0, NORANGE, NULL},
    {"eps", AT_FLOAT, A_POS, GT0, NULL},
    {"momentum", AT_FLOAT, A_POS, 1, 1, 1, 1, 0, 1, NULL}, /* [0, 1] */
    {0}};
static const attr_spec embed_attrs[] = {
    {"table", AT_TABLE, A_POS, NORANGE, NULL},
    {"vocab", AT_INT, A_POS | A_ARROW, POSITIVE, NULL},
    {"dim", AT_INT, A_POS, POSITIVE, NULL},
    {0}};
static const attr_spec pos_embed_attrs[] = {
    {"seq", AT_INT, A_POS | A_REQ, POSITIVE, NULL},
    {"dim", AT_INT, A_POS | A_REQ, POSITIVE, NULL},
    {0}};
static const attr_spec logits_attrs[] = {
    {"table", AT_TABLE, A_POS, NORANGE, NULL},
    {"dim", AT_INT, A_POS | A_ARROW, POSITIVE, NULL},
    {"vocab", AT_INT, A_POS, POSITIVE, NULL},
    {0}};
static const attr_spec dropout_attrs[] = {
    {"p", AT_FLOAT, A_POS | A_REQ, UNIT_OPEN, NULL},
    {0}};

typedef struct layer_kind_info {
    const char *name;
    const attr_spec *attrs;
} layer_kind_info;

/* indexed by ir_layer_kind; stash and pop are statements, not callable kinds */
static const layer_kind_info kinds[LK__COUNT] = {
    [LK_LINEAR] = {"linear", linear_attrs},
    [LK_RELU] = {"relu", none_attrs},
    [LK_GELU] = {"gelu", none_attrs},
    [LK_LAYERNORM] = {"layernorm", layernorm_attrs},
    [LK_BATCHNORM] = {"batchnorm", batchnorm_attrs},
    [LK_EMBED] = {"embed", embed_attrs},
    [LK_POS_EMBED] = {"pos_embed", pos_embed_attrs},
    [LK_ATTENTION] = {"attention", lm_attention_attrs},
    [LK_LOGITS] = {"logits", logits_attrs},
    [LK_DROPOUT] = {"dropout", dropout_attrs},
    [LK_RMSNORM] = {"rmsnorm", lm_rmsnorm_attrs},
    [LK_SWIGLU] = {"swiglu", lm_swiglu_attrs},
    [LK_STASH] = {"stash", none_attrs},
    [LK_POP] = {"pop", none_attrs},
    /* convolutional networks: dsl/layers_conv.c */
    [LK_CONV2D] = {"conv2d", conv2d_attrs},
    [LK_CONV1D] = {"conv1d", conv1d_attrs},
    [LK_CONV_T2D] = {"conv_transpose2d", conv_transpose2d_attrs},
    [LK_MAXPOOL2D] = {"maxpool2d", pool2d_attrs},
    [LK_AVGPOOL2D] = {"avgpool2d", pool2d_attrs},
    [LK_GLOBAL_AVGPOOL] = {"global_avgpool", none_attrs},
    [LK_UPSAMPLE] = {"upsample", upsample_attrs},
    [LK_FLATTEN] = {"flatten", none_attrs},
    [LK_RESHAPE] = {"reshape", reshape_attrs},
    [LK_TRANSPOSE] = {"transpose", transpose_attrs},
    [LK_MEAN] = {"mean", mean_attrs},
    [LK_BATCHNORM2D] = {"batchnorm2d", batchnorm_attrs},
    [LK_SIGMOID] = {"sigmoid", none_attrs},
    [LK_TANH] = {"tanh", none_attrs},
    [LK_SILU] = {"silu", none_attrs},
};

static const char *const callable_names[] = {"linear", "relu", "gelu", "layernorm", "batchnorm",
                                             "embed", "pos_embed", "attention", "logits", "dropout",
                                             "rmsnorm", "swiglu",
                                             "conv2d", "conv1d", "conv_transpose2d", "maxpool2d", "avgpool2d",
                                             "global_avgpool", "upsample", "flatten", "reshape", "transpose",
                                             "mean", "batchnorm2d", "sigmoid", "tanh", "silu"};

int layer_kind_find(const char *name) {
    for (int k = 0; k < LK__COUNT; k++)
        if (k != LK_STASH && k != LK_POP && strcmp(kinds[k].name, name) == 0) return k;
    return -1;
}

const char *layer_kind_name(ir_layer_kind k) { return k < LK__COUNT ? kinds[k].name : "?"; }
const attr_spec *layer_kind_attrs(ir_layer_kind k) { return kinds[k].attrs; }

const char *const *layer_kind_names(int *n) {
    *n = (int)(sizeof callable_names / sizeof callable_names[0]);
    return callable_names;
}

/* ---- binding arguments --------------------------------------------------- */

static void range_text(const attr_spec *s, char *buf, size_t n) {
    if (s->has_lo && s->has_hi)
        snprintf(buf, n, "in %c%.10g, %.10g%c", s->lo_incl ? '[' : '(', s->lo, s->hi, s->hi_incl ? ']' : ')');
    else if (s->has_lo)
        snprintf(buf, n, "%s %.10g", s->lo_incl ? ">=" : ">", s->lo);
    else
        snprintf(buf, n, "%s %.10g", s->hi_incl ? "<=" : "<", s->hi);
}

static int in_range(const attr_spec *s, double v) {
    if (s->has_lo && (s->lo_incl ? v < s->lo : v <= s->lo)) return 0;
    if (s->has_hi && (s->hi_incl ? v > s->hi : v >= s->hi)) return 0;
    return !isnan(v);
}

static int check_range(chk *c, const char *what, const attr_spec *s, double v, pg_loc loc) {
    if (!(s->has_lo || s->has_hi) || in_range(s, v)) return 0;
    char r[64];
    range_text(s, r, sizeof r);
    chk_error(c, loc, "%s: %s = %.10g is out of range: must be %s", what, s->name, v, r);
    return 1;
}

static int nspecs(const attr_spec *specs) {
    int n = 0;
    while (specs[n].name) n++;
    return n;
}

static int find_spec(const attr_spec *specs, const char *name) {
    for (int i = 0; specs[i].name; i++)
        if (strcmp(specs[i].name, name) == 0) return i;
    return -1;
}

/* Set one number-valued attribute from an expression. */
static int bind_number(chk *c, const chk_env *env, const char *what, const attr_spec *s,
                       const ast_expr *e, bound_attr *b) {
    pg_val v;
    if (chk_eval(c, env, e, &v, 0) != 0) return 1;
    if (s->type == AT_INT) {
        if (v.k != V_INT) {
            chk_error(c, e->loc, "%s: %s must be an integer, got %g", what, s->name, v.f);
            return 1;
        }
        if (check_range(c, what, s, (double)v.i, e->loc)) return 1;
        b->i = v.i;
        b->f = (double)v.i;
    } else {
        if (check_range(c, what, s, v.f, e->loc)) return 1;
        b->f = v.f;
    }
    b->set = 1;
    b->loc = e->loc;
    return 0;
}

/* One integer, or a pair `(h, w)` of them (a conv's kernel, stride, ...): i, i2. */
static int bind_int2(chk *c, const chk_env *env, const char *what, const attr_spec *s,
                     const ast_expr *e, bound_attr *b) {
    attr_spec one = *s;
    one.type = AT_INT;
    if (e->kind != EX_TUPLE) {
        if (bind_number(c, env, what, &one, e, b)) return 1;
        b->i2 = b->i;
        return 0;
    }
    const ast_arg *x = e->args;
    if (!x || !x->next || x->next->next) {
        chk_error(c, e->loc, "%s: %s must be one integer or a pair (h, w)", what, s->name);
        return 1;
    }
    bound_attr h, w;
    if (bind_number(c, env, what, &one, x->value, &h) | bind_number(c, env, what, &one, x->next->value, &w))
        return 1;
    b->set = 1;
    b->loc = e->loc;
    b->i = h.i;
    b->i2 = w.i;
    return 0;
}

static int bind_value(chk *c, const chk_env *env, const char *what, const attr_spec *s,
                      const ast_expr *e, bound_attr *b) {
    switch (s->type) {
    case AT_INT2:
        return bind_int2(c, env, what, s, e, b);
    case AT_INT:
    case AT_FLOAT:
        return bind_number(c, env, what, s, e, b);
    case AT_BOOL:
    case AT_FLAG:
        if (e->kind == EX_NAME && (strcmp(e->str, "true") == 0 || strcmp(e->str, "false") == 0)) {
            b->set = 1;
            b->loc = e->loc;
            b->i = e->str[0] == 't';
            return 0;
        }
        chk_error(c, e->loc, "%s: %s must be true or false", what, s->name);
        return 1;
    case AT_TABLE: {
        int np = e->kind == EX_NAME ? chk_find_nparam(c, e->str) : -1;
        if (np < 0) {
            if (e->kind == EX_NAME) {
                const char **cands = chk_xmalloc(sizeof *cands * (size_t)(c->nnparams + 1));
                for (int i = 0; i < c->nnparams; i++) cands[i] = c->nparams[i].st->name;
                char dm[128];
                chk_error(c, e->loc, "%s: unknown parameter '%s'%s", what, e->str,
                          chk_didyoumean(dm, sizeof dm, e->str, cands, c->nnparams));
                free(cands);
            } else {
                chk_error(c, e->loc, "%s: %s must name a `param`", what, s->name);
            }
            return 1;
        }
        b->set = 1;
        b->loc = e->loc;
        b->table = np;
        return 0;
    }
    case AT_WORD: {
        if (e->kind == EX_NAME) {
            const char *p = s->words;
            size_t n = strlen(e->str);
            while (p && *p) {
                const char *bar = strchr(p, '|');
                size_t len = bar ? (size_t)(bar - p) : strlen(p);
                if (len == n && strncmp(p, e->str, n) == 0) {
                    b->set = 1;
                    b->loc = e->loc;
                    b->word = e->str;
                    return 0;
                }
                p = bar ? bar + 1 : NULL;
            }
        }
        char list[128];
        size_t o = 0;
        for (const char *p = s->words; *p && o + 8 < sizeof list; p++) {
            if (*p != '|') list[o++] = *p;
            else if (strchr(p + 1, '|')) o += (size_t)snprintf(list + o, sizeof list - o, ", ");
            else o += (size_t)snprintf(list + o, sizeof list - o, " or ");
        }
        list[o] = '\0';
        chk_error(c, e->loc, "%s: %s must be %s", what, s->name, list);
        return 1;
    }
    case AT_STRING:
        if (e->kind != EX_STRING) {
            chk_error(c, e->loc, "%s: %s must be a string in double quotes", what, s->name);
            return 1;
        }
        b->set = 1;
        b->loc = e->loc;
        b->word = e->str;
        return 0;
    case AT_PAIR: {
        const ast_arg *x = e->kind == EX_TUPLE ? e->args : NULL;
        if (!x || !x->next || x->next->next) {
            chk_error(c, e->loc, "%s: %s must be a pair, e.g. (0.9, 0.999)", what, s->name);
            return 1;
        }
        pg_val v1, v2;
        int r1 = chk_eval(c, env, x->value, &v1, 0), r2 = chk_eval(c, env, x->next->value, &v2, 0);
        if (r1 || r2) return 1;
        if (check_range(c, what, s, v1.f, x->value->loc) | check_range(c, what, s, v2.f, x->next->value->loc))
            return 1;
        b->set = 1;
        b->loc = e->loc;
        b->f = v1.f;
        b->f2 = v2.f;
        return 0;
    }
    }
    return 1;
}

static const char *arg_hint(const attr_spec *specs, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; specs[i].name && o + 1 < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", specs[i].name);
    return buf;
}

int chk_bind_args(chk *c, const chk_env *env, const char *what, const attr_spec *specs,
                  const ast_arg *args, pg_loc call_loc, bound_attr *out) {
    int errs = 0, pos = 0, ns = nspecs(specs);
    memset(out, 0, sizeof *out * PG_MAX_ATTRS);
    for (int i = 0; i < PG_MAX_ATTRS; i++) out[i].table = -1;
    const char *names[PG_MAX_ATTRS];
    for (int i = 0; i < ns; i++) names[i] = specs[i].name;
    for (const ast_arg *a = args; a; a = a->next) {
        const ast_expr *e = a->value;
        if (a->key) {
            int k = find_spec(specs, a->key);
            if (k < 0) {
                char dm[128], h[128];
                if (ns == 0) chk_error(c, a->key_loc, "%s takes no attributes", what);
                else chk_error(c, a->key_loc, "%s has no attribute '%s'%s (it has: %s)", what, a->key,
                               chk_didyoumean(dm, sizeof dm, a->key, names, ns), arg_hint(specs, h, sizeof h));
                errs++;
                continue;
            }
            if (out[k].set) {
                if (chk_error(c, a->key_loc, "%s: '%s' is given twice", what, a->key))
                    chk_note(c, out[k].loc, "first given here");
                errs++;
                continue;
            }
            errs += bind_value(c, env, what, &specs[k], e, &out[k]);
            continue;
        }
        /* positional: a bare name is a constant, a flag, or a param */
        if (e->kind == EX_NAME && !chk_lookup(c, env, e->str)) {
            int k = find_spec(specs, e->str);
            if (k >= 0 && specs[k].type == AT_FLAG) {
                out[k].set = 1;
                out[k].loc = e->loc;
                out[k].i = 1;
                continue;
            }
            int t = -1;
            for (int i = 0; i < ns; i++)
                if (specs[i].type == AT_TABLE) t = i;
            int w = pos < ns && (specs[pos].type == AT_WORD) ? pos : -1;
            if (t >= 0 && chk_find_nparam(c, e->str) >= 0) {
                errs += bind_value(c, env, what, &specs[t], e, &out[t]);
                if (pos <= t) pos = t + 1;
                continue;
            }
            if (w >= 0 || (pos < ns && (specs[pos].type == AT_BOOL))) {
                errs += bind_value(c, env, what, &specs[pos], e, &out[pos]);
                pos++;
                continue;
            }
            const char *extra[PG_MAX_ATTRS + 64];
            int nx = 0;
            for (int i = 0; i < ns; i++)
                if (specs[i].type == AT_FLAG) extra[nx++] = specs[i].name;
            for (int i = 0; t >= 0 && i < c->nnparams && nx < PG_MAX_ATTRS + 64; i++)
                extra[nx++] = c->nparams[i].st->name;
            chk_unknown_name(c, env, e->loc, e->str, extra, nx);
            errs++;
            continue;
        }
        /* skip attributes that are never positional or already set by name */
        while (pos < ns && (!(specs[pos].flags & A_POS) || specs[pos].type == AT_TABLE || out[pos].set)) pos++;
        if (e->kind == EX_ARROW) {
            int k = pos;
            while (k < ns && !(specs[k].flags & A_ARROW)) k++;
            if (k >= ns || k + 1 >= ns) {
                chk_error(c, e->loc, "%s does not take `a -> b`", what);
                errs++;
                continue;
            }
            errs += bind_value(c, env, what, &specs[k], e->lhs, &out[k]);
            errs += bind_value(c, env, what, &specs[k + 1], e->rhs, &out[k + 1]);
            pos = k + 2;
            continue;
        }
        if (pos >= ns) {
            char h[128];
            if (ns == 0) chk_error(c, e->loc, "%s takes no arguments", what);
            else chk_error(c, e->loc, "too many arguments to %s (it takes: %s)", what, arg_hint(specs, h, sizeof h));
            errs++;
            break;
        }
        errs += bind_value(c, env, what, &specs[pos], e, &out[pos]);
        pos++;
    }
    for (int i = 0; i < ns; i++)
        if ((specs[i].flags & A_REQ) && !out[i].set && !errs) {
            chk_error(c, call_loc, "%s needs a value for '%s'", what, specs[i].name);
            errs++;
        }
    return errs;
}

/* ---- parameters ---------------------------------------------------------- */

int chk_add_param(chk *c, const char *name, pg_loc loc, const pg_shape *s, ir_init init,
                  double scale, int decay, int is_buffer) {
    c->params = chk_grow(c->params, &c->capparams, c->nparams_ + 1, sizeof *c->params);
    ir_param *p = &c->params[c->nparams_];
    memset(p, 0, sizeof *p);
    p->name = name;
    p->loc = loc;
    p->dtype = DT_F32;
    p->shape = *s;
    p->init = init;
    p->init_scale = scale;
    p->decay = decay;
    p->decay_group = -1;
    p->is_buffer = is_buffer;
    p->owner_stage = -1;
    p->tie = TIE_NONE;
    return c->nparams_++;
}

int chk_use_nparam(chk *c, int np, int layer) {
    chk_nparam *p = &c->nparams[np];
    if (p->index < 0) {
        p->index = chk_add_param(c, chk_strdup(c, p->st->name), p->st->loc, &p->shape, p->init, p->scale, 1, 0);
        p->first_user = layer;
    }
    return p->index;
}

static pg_shape shape2(int64_t a, int64_t b) { return (pg_shape){2, {a, b}}; }
static pg_shape shape1(int64_t a) { return (pg_shape){1, {a}}; }

static int layer_index(chk *c, const ir_layer *L) { return (int)(L - c->layers); }

void layer_add_own(chk *c, ir_layer *L, const char *suffix, pg_shape s, ir_init init, double scale, int decay) {
    char *n = chk_qualify(c, L->name, suffix);
    L->param[L->nparam++] = chk_add_param(c, n, L->loc, &s, init, scale, decay, 0);
}

void layer_add_buffer(chk *c, ir_layer *L, const char *suffix, pg_shape s, ir_init init) {
    char *n = chk_qualify(c, L->name, suffix);
    L->buffer[L->nbuffer++] = chk_add_param(c, n, L->loc, &s, init, 0, 0, 1);
}

/* ---- shape rules --------------------------------------------------------- */

int layer_need_f32(chk *c, ir_layer *L, chain *ch) {
    if (ch->dt == DT_F32) return 0;
    char a[96];
    pg_shape_str(ch->dt, &ch->shape, a, sizeof a);
    chk_error(c, L->loc, "%s expects f32 input but gets %s (only embed takes i32 token ids)", kinds[L->kind].name, a);
    ch->known = 0;
    return 1;
}

static int64_t last_dim(const chain *ch) { return ch->shape.dim[ch->shape.rank - 1]; }

void layer_want_last(chk *c, ir_layer *L, chain *ch, int64_t in, int64_t out) {
    if (last_dim(ch) != in) {
        pg_shape want = ch->shape;
        want.dim[want.rank - 1] = in;
        char a[96], w[96];
        chk_error(c, L->loc, "%s(%lld -> %lld) expects input %s but gets %s", kinds[L->kind].name, (long long)in,
                  (long long)out, pg_shape_str(DT_F32, &want, w, sizeof w), pg_shape_str(ch->dt, &ch->shape, a, sizeof a));
    }
    ch->shape.dim[ch->shape.rank - 1] = out; /* the declared output, even after an error */
}

static void apply_linear(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    L->in_features = b[0].i;
    L->out_features = b[1].i;
    L->bias = b[2].set ? (int)b[2].i : 1;
    double sc = 1.0 / sqrt((double)L->in_features);
    layer_add_own(c, L, "weight", shape2(L->out_features, L->in_features), INIT_UNIFORM, sc, 1);
    if (L->bias) layer_add_own(c, L, "bias", shape1(L->out_features), INIT_UNIFORM, sc, 0);
    if (!ch->known || layer_need_f32(c, L, ch)) return;
    layer_want_last(c, L, ch, L->in_features, L->out_features);
}

static void apply_norm(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    L->eps = b[L->kind == LK_LAYERNORM ? 0 : 1].set ? b[L->kind == LK_LAYERNORM ? 0 : 1].f : 1e-5;
    if (L->kind == LK_BATCHNORM) {
        L->deferred = b[0].set ? (int)b[0].i : 0;
        L->momentum = b[2].set ? b[2].f : 0.1;
    }
    if (!ch->known || layer_need_f32(c, L, ch)) return;
    int64_t d = last_dim(ch);
    L->bias = L->kind == LK_LAYERNORM && b[1].set ? (int)b[1].i : 1;
    layer_add_own(c, L, "weight", shape1(d), INIT_ONES, 0, 0);
    if (L->bias) layer_add_own(c, L, "bias", shape1(d), INIT_ZEROS, 0, 0);
    if (L->kind == LK_BATCHNORM) {
        layer_add_buffer(c, L, "running_mean", shape1(d), INIT_ZEROS);
        layer_add_buffer(c, L, "running_var", shape1(d), INIT_ONES);
    }
}

/* The table of embed / logits: a named param [V, d] or the layer's own weight. */
static int table_shape(chk *c, ir_layer *L, const bound_attr *b, int vocab_i, int dim_i, pg_shape *t) {
    const char *k = kinds[L->kind].name;
    if (b[0].set && (b[vocab_i].set || b[dim_i].set)) {
        chk_error(c, L->loc, "%s takes a param or sizes, not both", k);
        return -1;
    }
    if (b[0].set) {
        chk_nparam *p = &c->nparams[b[0].table];
        if (!p->ok) return -1;
        if (p->shape.rank != 2) {
            char s[96];
            if (chk_error(c, b[0].loc, "%s needs a [vocab, dim] table but '%s' is %s", k, p->st->name,
                          pg_shape_str(p->dt, &p->shape, s, sizeof s)))
                chk_note(c, p->st->loc, "'%s' is declared here", p->st->name);
            return -1;
        }
        *t = p->shape;
        return 0;
    }
    if (!b[vocab_i].set || !b[dim_i].set) {
        if (L->kind == LK_EMBED) chk_error(c, L->loc, "embed needs a table: embed(P) with `param P : f32[V, d]`, or embed(V -> d)");
        else chk_error(c, L->loc, "logits needs a table: logits(P) with `param P : f32[V, d]`, or logits(d -> V)");
        return -1;
    }
    *t = shape2(b[vocab_i].i, b[dim_i].i);
    return 0;
}

/* A named table used here must have the shape this use needs: report both. */
static int table_use(chk *c, ir_layer *L, const bound_attr *b, const pg_shape *need) {
    chk_nparam *p = &c->nparams[b[0].table];
    int idx = chk_use_nparam(c, b[0].table, layer_index(c, L));
    L->param[L->nparam++] = idx;
    if (pg_shape_eq(need, &p->shape)) return 0;
    char s1[96], s2[96];
    if (chk_error(c, b[0].loc, "%s here needs '%s' as %s but it is %s", kinds[L->kind].name, p->st->name,
                  pg_shape_str(DT_F32, need, s1, sizeof s1), pg_shape_str(p->dt, &p->shape, s2, sizeof s2))) {
        if (p->first_user >= 0 && p->first_user != layer_index(c, L))
            chk_note(c, c->layers[p->first_user].loc, "'%s' is also used here, as %s", p->st->name, s2);
        if (p->tie) chk_note(c, p->tie->loc, "'%s' is tied here: every use must agree on one shape", p->st->name);
        else chk_note(c, p->st->loc, "'%s' is declared here", p->st->name);
    }
    return -1;
}

static void apply_embed(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    pg_shape t;
    L->in_dtype = DT_I32;
    if (table_shape(c, L, b, 1, 2, &t) != 0) {
        ch->known = 0;
        return;
    }
    L->vocab = t.dim[0];
    L->dim = t.dim[1];
    if (b[0].set) {
        int idx = chk_use_nparam(c, b[0].table, layer_index(c, L));
        L->param[L->nparam++] = idx;
    } else {
        layer_add_own(c, L, "weight", t, INIT_NORMAL, 0.02, 1);
    }
    if (!ch->known) return;
    char a[96];
    if (ch->dt != DT_I32 || ch->shape.rank != 1) {
        chk_error(c, L->loc, "embed expects token ids i32[T] but gets %s", pg_shape_str(ch->dt, &ch->shape, a, sizeof a));
        ch->known = 0;
        return;
    }
    ch->dt = DT_F32;
    ch->shape = shape2(ch->shape.dim[0], L->dim);
}

/* pos_embed(seq, dim) on [T, dim] with T <= seq adds the table's first T rows
 * (a model trained on shorter windows than its table, as a Hugging Face GPT-2's
 * n_positions). */
static void apply_pos_embed(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    L->seq = b[0].i;
    L->dim = b[1].i;
    pg_shape want = shape2(L->seq, L->dim);
    layer_add_own(c, L, "weight", want, INIT_NORMAL, 0.02, 1);
    if (!ch->known || layer_need_f32(c, L, ch)) return;
    if (ch->shape.rank != 2 || ch->shape.dim[1] != L->dim || ch->shape.dim[0] > L->seq) {
        char a[96], w[96];
        chk_error(c, L->loc, "pos_embed(%lld, %lld) expects input %s (or fewer positions) but gets %s", (long long)L->seq,
                  (long long)L->dim, pg_shape_str(DT_F32, &want, w, sizeof w),
                  pg_shape_str(ch->dt, &ch->shape, a, sizeof a));
        if (ch->shape.rank != 2) ch->shape = want;
        ch->shape.dim[1] = L->dim; /* its positions as they came: the target's check follows them */
    }
}

static void apply_logits(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    pg_shape t;
    if (table_shape(c, L, b, 2, 1, &t) != 0) {
        ch->known = 0;
        return;
    }
    L->vocab = t.dim[0];
    L->dim = t.dim[1];
    if (!b[0].set) layer_add_own(c, L, "weight", t, INIT_NORMAL, 0.02, 1);
    if (!ch->known || layer_need_f32(c, L, ch)) {
        if (b[0].set) L->param[L->nparam++] = chk_use_nparam(c, b[0].table, layer_index(c, L));
        return;
    }
    if (b[0].set) {
        pg_shape need = shape2(t.dim[0], last_dim(ch));
        table_use(c, L, b, &need);
    } else {
        layer_want_last(c, L, ch, L->dim, L->vocab);
    }
    ch->shape.dim[ch->shape.rank - 1] = L->vocab;
}

static void apply_dropout(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    L->p = b[0].f;
    if (b[0].set && L->p == 0) chk_warning(c, b[0].loc, "dropout with p = 0 has no effect");
    if (ch->known) layer_need_f32(c, L, ch);
}


void layer_apply(chk *c, ir_layer *L, const bound_attr *b, chain *ch) {
    const attr_spec *specs = kinds[L->kind].attrs;
    for (int i = 0; specs[i].name && i < 32; i++) /* pipegen check lists the defaults it filled in */
        if (!b[i].set && !(specs[i].flags & A_REQ) && (specs[i].type == AT_FLOAT || specs[i].type == AT_BOOL))
            L->defaulted |= 1u << i;
    if (L->kind != LK_EMBED) L->in_dtype = ch->known ? ch->dt : DT_F32;
    if (ch->known) L->in = ch->shape;
    switch (L->kind) {
    case LK_LINEAR: apply_linear(c, L, b, ch); break;
    case LK_RELU:
    case LK_GELU:
        if (ch->known) layer_need_f32(c, L, ch);
        break;
    case LK_LAYERNORM:
    case LK_BATCHNORM: apply_norm(c, L, b, ch); break;
    case LK_EMBED: apply_embed(c, L, b, ch); break;
    case LK_POS_EMBED: apply_pos_embed(c, L, b, ch); break;
    case LK_ATTENTION: lm_apply_attention(c, L, b, ch); break;
    case LK_RMSNORM: lm_apply_rmsnorm(c, L, b, ch); break;
    case LK_SWIGLU: lm_apply_swiglu(c, L, b, ch); break;
    case LK_LOGITS: apply_logits(c, L, b, ch); break;
    case LK_DROPOUT: apply_dropout(c, L, b, ch); break;
    default: layer_apply_conv(c, L, b, ch); break; /* layers_conv.c */
    }
    if (ch->known) L->out = ch->shape;
}

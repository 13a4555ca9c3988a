/* dsl/train.c — the `train { ... }` settings: one handler per setting, defaults
 * in check.c's train_defaults (as documented in ir.h), ranges checked here. */
#include <stdlib.h>
#include <string.h>
#include "check_ctx.h"

#define POSITIVE 1, 1, 0, 0, 1, 0
#define NONNEG 1, 1, 0, 0, 0, 0
#define GT0 1, 0, 0, 0, 0, 0
#define UNIT_OPEN 1, 1, 1, 0, 0, 1
#define NORANGE 0, 0, 0, 0, 0, 0

static const attr_spec sgd_attrs[] = {
    {"lr", AT_FLOAT, A_POS, GT0, NULL},
    {"momentum", AT_FLOAT, A_POS, UNIT_OPEN, NULL},
    {"weight_decay", AT_FLOAT, A_POS, NONNEG, NULL},
    {0}};
static const attr_spec adamw_attrs[] = {
    {"lr", AT_FLOAT, A_POS, GT0, NULL},
    {"betas", AT_PAIR, A_POS, UNIT_OPEN, NULL},
    {"eps", AT_FLOAT, A_POS, GT0, NULL},
    {"weight_decay", AT_FLOAT, A_POS, NONNEG, NULL},
    {0}};
static const attr_spec adam_attrs[] = {
    {"lr", AT_FLOAT, A_POS, GT0, NULL},
    {"betas", AT_PAIR, A_POS, UNIT_OPEN, NULL},
    {"eps", AT_FLOAT, A_POS, GT0, NULL},
    {0}};
static const attr_spec warmup_attrs[] = {
    {"warmup", AT_INT, A_POS, NONNEG, NULL},
    {0}};
static const attr_spec cosine_attrs[] = {
    {"warmup", AT_INT, A_POS, NONNEG, NULL},
    {"min", AT_FLOAT, A_POS, NONNEG, NULL},
    {0}};
static const attr_spec interleaved_attrs[] = {
    {"v", AT_INT, A_POS | A_REQ, POSITIVE, NULL},
    {0}};
static const attr_spec file_attrs[] = {
    {"path", AT_STRING, A_POS | A_REQ, NORANGE, NULL},
    {0}};
static const attr_spec mse_attrs[] = {
    {"reduction", AT_WORD, A_POS, NORANGE, "sum|mean"},
    {0}};
/* the ignored target id, an i32 like every target (PyTorch's ignore_index) */
/* generation's static sizes (codegen/gen/gen_decode.c): sequences in flight,
 * their micro-batches, cache positions per sequence, new positions per call */
static const attr_spec kv_cache_attrs[] = {
    {"batch", AT_INT, A_POS, 1, 1, 1, 1, 1, 65536, NULL},
    {"microbatches", AT_INT, A_POS, 1, 1, 1, 1, 1, 4096, NULL},
    {"length", AT_INT, A_POS, 1, 1, 1, 1, 1, 16384, NULL},
    {"prefill", AT_INT, A_POS, 1, 1, 1, 1, 1, 16384, NULL},
    {0}};
static const attr_spec cross_entropy_attrs[] = {
    {"ignore", AT_INT, A_POS, 1, 1, 1, 1, -2147483648.0, 2147483647.0, NULL},
    {0}};

/* `name` or `name(args)`: the name, its args and whether it had parens. */
static const char *call_name(const ast_expr *e, const ast_arg **args) {
    *args = NULL;
    if (e->kind == EX_NAME) return e->str;
    if (e->kind == EX_CALL) {
        *args = e->args;
        return e->str;
    }
    return NULL;
}

/* Pick one of names (NULL-terminated) for e; report with did-you-mean. */
static int pick(chk *c, const char *setting, const ast_expr *e, const char *const *names, const ast_arg **args) {
    const char *n = call_name(e, args);
    int cnt = 0;
    while (names[cnt]) cnt++;
    for (int i = 0; n && i < cnt; i++)
        if (strcmp(n, names[i]) == 0) return i;
    char list[256] = "", dm[128] = "";
    size_t o = 0;
    for (int i = 0; i < cnt && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? (i == cnt - 1 ? " or " : ", ") : "", names[i]);
    if (n) chk_didyoumean(dm, sizeof dm, n, names, cnt);
    if (e->kind == EX_STRING) {
        /* `schedule = "1f1b"`: a name is written bare, as in `schedule = 1f1b` */
        int known = -1;
        for (int i = 0; i < cnt && known < 0; i++) {
            size_t l = strlen(names[i]);
            if (strncmp(e->str, names[i], l) == 0 && (e->str[l] == '\0' || e->str[l] == '(')) known = i;
        }
        if (known >= 0)
            chk_error(c, e->loc, "%s = \"%.64s\" is a string; write it without quotes: %s = %.64s", setting, e->str,
                      setting, e->str);
        else
            chk_error(c, e->loc, "%s = \"%.64s\" is a string; write one of %s without quotes (e.g. %s = %s)", setting,
                      e->str, list, setting, names[0]);
        return -1;
    }
    chk_error(c, e->loc, "unknown %s '%s'%s (expected %s)", setting, n ? n : "value", dm, list);
    return -1;
}

static int no_args(chk *c, const char *what, const ast_expr *e) {
    if (e->kind == EX_CALL && e->args) {
        chk_error(c, e->loc, "%s takes no arguments", what);
        return -1;
    }
    return 0;
}

static int int_setting(chk *c, const ast_arg *a, int64_t lo, int64_t hi, int64_t *out) {
    int64_t v;
    if (chk_eval_int(c, NULL, a->value, a->key, &v, 0) != 0) return -1;
    if (v < lo || v > hi) {
        if (hi == INT64_MAX)
            chk_error(c, a->value->loc, "%s = %lld is out of range: must be >= %lld", a->key, (long long)v, (long long)lo);
        else
            chk_error(c, a->value->loc, "%s = %lld is out of range: must be in [%lld, %lld]", a->key, (long long)v,
                      (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

static void set_schedule(chk *c, const ast_arg *a, ir_train *t) {
    static const char *const names[] = {"gpipe", "1f1b", "interleaved", "zb1", "file", "zbv", "auto", NULL};
    const ast_arg *args;
    bound_attr b[PG_MAX_ATTRS];
    int k = pick(c, "schedule", a->value, names, &args);
    t->schedule_loc = a->value->loc;
    switch (k) {
    case 0: if (!no_args(c, "gpipe", a->value)) t->schedule = SCHED_GPIPE; break;
    case 1: if (!no_args(c, "1f1b", a->value)) t->schedule = SCHED_1F1B; break;
    case 3: if (!no_args(c, "zb1", a->value)) t->schedule = SCHED_ZB1; break;
    case 5: if (!no_args(c, "zbv", a->value)) t->schedule = SCHED_ZBV; break;
    case 6: if (!no_args(c, "auto", a->value)) t->schedule = SCHED_AUTO; break;
    case 2:
        if (chk_bind_args(c, NULL, "interleaved", interleaved_attrs, args, a->value->loc, b) == 0) {
            t->schedule = SCHED_INTERLEAVED;
            t->interleave = (int)(b[0].i > PG_MAX_STAGES ? PG_MAX_STAGES + 1 : b[0].i);
            if (b[0].i > PG_MAX_STAGES)
                chk_error(c, b[0].loc, "interleaved: v = %lld is out of range: must be in [1, %d]",
                          (long long)b[0].i, PG_MAX_STAGES);
            else if (b[0].i == 1)
                chk_warning(c, b[0].loc, "interleaved(1) has one chunk per stage: it is plain 1f1b");
        }
        break;
    case 4:
        if (chk_bind_args(c, NULL, "file", file_attrs, args, a->value->loc, b) == 0) {
            const char *p = b[0].word, *src = c->m->source_path;
            const char *slash = src ? strrchr(src, '/') : NULL;
            t->schedule = SCHED_FILE;
            if (p[0] == '/' || !slash) {
                t->schedule_file = chk_strdup(c, p);
            } else {
                size_t ld = (size_t)(slash - src), lp = strlen(p);
                char *r = pg_arena_alloc(c->a, ld + lp + 2);
                if (!r) abort();
                memcpy(r, src, ld);
                r[ld] = '/';
                memcpy(r + ld + 1, p, lp + 1);
                t->schedule_file = r;
            }
        }
        break;
    default: break;
    }
}

/* `memory = 40GiB`: bytes per stage, a whole number with an optional binary
 * suffix (KiB, MiB, GiB, TiB), or an integer expression of bytes. */
static void set_memory(chk *c, const ast_arg *a, ir_train *t) {
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    const ast_expr *e = a->value;
    t->memory_loc = e->loc;
    if (e->kind == EX_NAME && e->str && e->str[0] >= '0' && e->str[0] <= '9') {
        const char *p = e->str;
        int64_t v = 0;
        while (*p >= '0' && *p <= '9') {
            if (v > (INT64_MAX - (*p - '0')) / 10) v = INT64_MAX / 2; /* caught by the range check below */
            else v = v * 10 + (*p - '0');
            p++;
        }
        int u = 0;
        while (u < 4 && strcmp(p, units[u]) != 0) u++;
        if (u == 4) {
            chk_error(c, e->loc, "memory = %s: the unit must be KiB, MiB, GiB or TiB (or give bytes)", e->str);
            return;
        }
        int shift = 10 * (u + 1);
        if (v < 1 || v > (INT64_MAX >> shift)) {
            chk_error(c, e->loc, "memory = %s is out of range: must be at least 1 byte and below 8 EiB", e->str);
            return;
        }
        t->memory = v << shift;
        return;
    }
    int64_t v;
    if (chk_eval_int(c, NULL, e, "memory", &v, 0) != 0) return;
    if (v < 1) {
        chk_error(c, e->loc, "memory = %lld is out of range: must be at least 1 byte", (long long)v);
        return;
    }
    t->memory = v;
}

static void set_loss(chk *c, const ast_arg *a, ir_train *t) {
    static const char *const names[] = {"mse", "cross_entropy", NULL};
    const ast_arg *args;
    bound_attr b[PG_MAX_ATTRS];
    c->loss_loc = a->value->loc;
    c->have_loss = 1;
    int k = pick(c, "loss", a->value, names, &args);
    if (k == 0 && chk_bind_args(c, NULL, "mse", mse_attrs, args, a->value->loc, b) == 0)
        t->loss = b[0].set && strcmp(b[0].word, "sum") == 0 ? LOSS_MSE_SUM : LOSS_MSE_MEAN;
    if (k == 1) { /* cross_entropy even when its argument is bad: no mse errors follow */
        t->loss = LOSS_CROSS_ENTROPY;
        if (chk_bind_args(c, NULL, "cross_entropy", cross_entropy_attrs, args, a->value->loc, b) == 0)
            t->ignore_index = b[0].set ? b[0].i : PG_NO_IGNORE;
    }
}

static void set_optimizer(chk *c, const ast_arg *a, ir_train *t) {
    static const char *const names[] = {"sgd", "adamw", "adam", NULL};
    const ast_arg *args;
    bound_attr b[PG_MAX_ATTRS];
    int k = pick(c, "optimizer", a->value, names, &args);
    if (k == 0 && chk_bind_args(c, NULL, "sgd", sgd_attrs, args, a->value->loc, b) == 0) {
        t->optimizer = OPT_SGD;
        t->lr = b[0].set ? b[0].f : 1e-2;
        t->momentum = b[1].set ? b[1].f : 0;
        t->weight_decay = b[2].set ? b[2].f : 0;
    }
    if (k == 1 && chk_bind_args(c, NULL, "adamw", adamw_attrs, args, a->value->loc, b) == 0) {
        t->optimizer = OPT_ADAMW;
        t->lr = b[0].set ? b[0].f : 1e-3;
        t->beta1 = b[1].set ? b[1].f : 0.9;
        t->beta2 = b[1].set ? b[1].f2 : 0.999;
        t->adam_eps = b[2].set ? b[2].f : 1e-8;
        t->weight_decay = b[3].set ? b[3].f : 0.01;
    }
    if (k == 2) {
        for (const ast_arg *x = args; x; x = x->next)
            if (x->key && strcmp(x->key, "weight_decay") == 0) {
                chk_error(c, x->key_loc, "adam has no weight decay: use adamw(weight_decay = ...) for decoupled "
                          "decay, or leave weight_decay out");
                return;
            }
        if (chk_bind_args(c, NULL, "adam", adam_attrs, args, a->value->loc, b) == 0) {
            t->optimizer = OPT_ADAM;
            t->lr = b[0].set ? b[0].f : 1e-3;
            t->beta1 = b[1].set ? b[1].f : 0.9;
            t->beta2 = b[1].set ? b[1].f2 : 0.999;
            t->adam_eps = b[2].set ? b[2].f : 1e-8;
            t->weight_decay = 0;
        }
    }
}

/* constant, constant(warmup), cosine(warmup, min), linear(warmup, min),
 * inverse_sqrt(warmup): the formulas are lr_at's (runtime/core/step.c). */
static void set_lr_schedule(chk *c, const ast_arg *a, ir_train *t, pg_loc *warmup_loc) {
    static const char *const names[] = {"constant", "cosine", "linear", "inverse_sqrt", NULL};
    static const ir_lr_sched kinds[] = {LR_CONSTANT, LR_COSINE, LR_LINEAR, LR_INVSQRT};
    const ast_arg *args;
    bound_attr b[PG_MAX_ATTRS];
    int k = pick(c, "lr_schedule", a->value, names, &args);
    if (k < 0)
        return;
    int decays = kinds[k] == LR_COSINE || kinds[k] == LR_LINEAR; /* down to min at `steps` */
    if (chk_bind_args(c, NULL, names[k], decays ? cosine_attrs : warmup_attrs, args, a->value->loc, b) == 0) {
        t->lr_schedule = kinds[k];
        t->warmup = b[0].set ? b[0].i : 0;
        t->lr_min = decays && b[1].set ? b[1].f : 0;
        *warmup_loc = b[0].set ? b[0].loc : a->value->loc;
    }
}

/* `generate = kv_cache(batch, microbatches, length, prefill)` or `generate = none` */
static void set_generate(chk *c, const ast_arg *a, ir_train *t) {
    static const char *const names[] = {"kv_cache", "none", NULL};
    const ast_arg *args;
    bound_attr b[PG_MAX_ATTRS];
    t->gen_loc = a->value->loc;
    int k = pick(c, "generate", a->value, names, &args);
    if (k == 1 && !no_args(c, "none", a->value)) t->gen_off = 1;
    if (k == 0 && chk_bind_args(c, NULL, "kv_cache", kv_cache_attrs, args, a->value->loc, b) == 0) {
        t->gen_batch = b[0].set ? b[0].i : 0;
        t->gen_microbatches = b[1].set ? b[1].i : 0;
        t->gen_length = b[2].set ? b[2].i : 0;
        t->gen_prefill = b[3].set ? b[3].i : 0;
        if (b[0].set && b[1].set && b[1].i > b[0].i)
            chk_error(c, b[1].loc, "kv_cache: microbatches = %lld is more than batch = %lld: every micro-batch needs "
                      "a sequence", (long long)b[1].i, (long long)b[0].i);
        if (b[2].set && b[3].set && b[3].i > b[2].i)
            chk_error(c, b[3].loc, "kv_cache: prefill = %lld is more than length = %lld: a call never has more new "
                      "positions than the cache holds", (long long)b[3].i, (long long)b[2].i);
    }
}

/* `block_margin = 0.05`: the fraction of the predicted step a split inside a
 * repeat instance must save before `stages = N` takes it over whole blocks. */
static void set_block_margin(chk *c, const ast_arg *a, ir_train *t) {
    pg_val v;
    t->block_margin_loc = a->value->loc;
    if (chk_eval(c, NULL, a->value, &v, 0) != 0) return;
    double x = v.k == V_INT ? (double)v.i : v.f;
    if (!(x >= 0 && x <= 1)) {
        chk_error(c, a->value->loc, "block_margin = %g is out of range: must be in [0, 1], the fraction of the "
                  "predicted step a split inside a block must save (0.05: 5%%)", x);
        return;
    }
    t->block_margin = x;
}

/* `shuffle = true | false` */
static void set_bool(chk *c, const ast_arg *a, int *out) {
    static const char *const names[] = {"false", "true", NULL};
    int w = -1;
    const ast_arg *args;
    w = pick(c, a->key, a->value, names, &args);
    if (w >= 0 && !no_args(c, names[w], a->value)) *out = w;
}

/* `weight_decay = V for "p" "q"`: one more group, in file order. */
static void add_decay_group(chk *c, const ast_arg *a, ir_train *t) {
    const ast_expr *e = a->value;
    pg_val v;
    if (e->kind != EX_FOR) {
        chk_error(c, a->key_loc, "weight_decay is set in the optimizer (adamw(weight_decay = 0.01)); in train it "
                  "needs the parameters it is for: weight_decay = 0 for \"*.bias\" \"*norm*\"");
        return;
    }
    if (!e->lhs || chk_eval(c, NULL, e->lhs, &v, 0) != 0) return;
    double x = v.k == V_INT ? (double)v.i : v.f;
    if (!(x >= 0) || x > 1e6) {
        chk_error(c, e->lhs->loc, "weight_decay = %g is out of range: must be >= 0", x);
        return;
    }
    int n = 0;
    for (const ast_arg *p = e->args; p; p = p->next) n++;
    ir_decay_group *g = pg_arena_alloc(c->a, (size_t)(t->ndecay_groups + 1) * sizeof *g);
    const char **pats = pg_arena_alloc(c->a, (size_t)(n ? n : 1) * sizeof *pats);
    pg_loc *locs = pg_arena_alloc(c->a, (size_t)(n ? n : 1) * sizeof *locs);
    if (!g || !pats || !locs) abort();
    if (t->ndecay_groups) memcpy(g, t->decay_groups, (size_t)t->ndecay_groups * sizeof *g);
    n = 0;
    for (const ast_arg *p = e->args; p; p = p->next) {
        if (!p->value || p->value->kind != EX_STRING) continue;
        if (!p->value->str[0]) {
            chk_error(c, p->value->loc, "an empty pattern matches no parameter name");
            return;
        }
        locs[n] = p->value->loc;
        pats[n++] = chk_strdup(c, p->value->str);
    }
    g[t->ndecay_groups] = (ir_decay_group){x, a->key_loc, n, pats, locs, 0};
    t->decay_groups = g;
    t->ndecay_groups++;
}

static void set_word(chk *c, const ast_arg *a, const char *const *names, int *out) {
    const ast_arg *args;
    int k = pick(c, a->key, a->value, names, &args);
    if (k >= 0 && !no_args(c, names[k], a->value)) *out = k;
}

static const char *const settings[] = {"batch", "microbatches", "schedule", "checkpoint", "loss", "optimizer",
                                       "lr_schedule", "steps", "grad_clip", "seed", "precision", "stages",
                                       "memory", "placement", "eval_every", "eval_batches", "shuffle",
                                       "weight_decay", "generate", "block_margin"};
#define NSETTINGS ((int)(sizeof settings / sizeof settings[0]))

const char *pg_train_setting_name(int k) { return k >= 0 && k < NSETTINGS ? settings[k] : NULL; }

void chk_train(chk *c, const ast_stmt *st) {
    ir_train *t = &c->m->train;
    const ast_arg *seen[NSETTINGS] = {0};
    pg_loc warmup_loc = {0};
    for (const ast_arg *a = st->args; a; a = a->next) {
        int k = -1;
        for (int i = 0; a->key && i < NSETTINGS; i++)
            if (strcmp(a->key, settings[i]) == 0) k = i;
        if (k < 0) {
            char dm[128], list[256];
            size_t o = 0;
            for (int i = 0; i < NSETTINGS; i++)
                o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", settings[i]);
            if (a->key && *chk_didyoumean(dm, sizeof dm, a->key, settings, NSETTINGS))
                chk_error(c, a->key_loc, "unknown train setting '%s'%s", a->key, dm);
            else
                chk_error(c, a->key_loc, "unknown train setting '%s' (the settings are: %s)", a->key ? a->key : "?",
                          list);
            continue;
        }
        if (k == 17) { /* weight_decay = V for "...": one group a line, several allowed */
            add_decay_group(c, a, t);
            continue;
        }
        if (a->value && a->value->kind == EX_FOR) {
            chk_error(c, a->value->op_loc, "only weight_decay is set for parameters by name (`weight_decay = 0 for "
                      "\"*.bias\"`); %s applies to the whole model", a->key);
            continue;
        }
        if (seen[k]) {
            if (chk_error(c, a->key_loc, "duplicate train setting '%s'", a->key))
                chk_note(c, seen[k]->key_loc, "'%s' is first set here", a->key);
            continue;
        }
        seen[k] = a;
        int64_t v;
        switch (k) {
        case 0:
            c->batch_loc = a->value->loc;
            if (!int_setting(c, a, 1, INT32_MAX, &v)) t->batch = v;
            break;
        case 1:
            c->micro_loc = a->value->loc;
            if (!int_setting(c, a, 1, INT32_MAX, &v)) t->microbatches = v;
            break;
        case 2: set_schedule(c, a, t); break;
        case 3: {
            static const char *const names[] = {"always", "except_last", "never", NULL};
            int w = -1;
            set_word(c, a, names, &w);
            if (w >= 0) t->checkpoint = (ir_ckpt)w; /* enum order matches names */
            break;
        }
        case 4: set_loss(c, a, t); break;
        case 5: set_optimizer(c, a, t); break;
        case 6: set_lr_schedule(c, a, t, &warmup_loc); break;
        case 7:
            if (!int_setting(c, a, 1, INT64_MAX, &v)) t->steps = v;
            break;
        case 8: {
            pg_val fv;
            if (chk_eval(c, NULL, a->value, &fv, 0) != 0) break;
            if (!(fv.f >= 0)) chk_error(c, a->value->loc, "grad_clip = %g is out of range: must be >= 0 (0 = off)", fv.f);
            else t->grad_clip = fv.f;
            break;
        }
        case 9:
            if (!int_setting(c, a, 0, INT64_MAX, &v)) t->seed = (uint64_t)v;
            break;
        case 10: {
            static const char *const names[] = {"f32", "bf16", NULL};
            int w = -1;
            set_word(c, a, names, &w);
            if (w >= 0) t->precision = w == 0 ? DT_F32 : DT_BF16;
            break;
        }
        case 11:
            t->stages_loc = a->value->loc;
            if (!int_setting(c, a, 1, PG_MAX_STAGES, &v)) t->stages = (int)v;
            break;
        case 12: set_memory(c, a, t); break;
        case 13: {
            static const char *const names[] = {"loop", "v", NULL};
            int w = -1;
            t->placement_loc = a->value->loc;
            set_word(c, a, names, &w);
            if (w >= 0) t->placement = w == 0 ? PLACE_LOOP : PLACE_V;
            break;
        }
        case 14:
            if (!int_setting(c, a, 0, INT64_MAX, &v)) t->eval_every = v;
            break;
        case 15:
            if (!int_setting(c, a, 0, INT64_MAX, &v)) t->eval_batches = v;
            break;
        case 16: set_bool(c, a, &t->shuffle); break;
        case 18: set_generate(c, a, t); break;
        case 19: set_block_margin(c, a, t); break;
        }
    }
    t->defaulted = 0;
    for (int k = 0; k < NSETTINGS && k < 32; k++)
        if (!seen[k]) t->defaulted |= 1u << k;
    if (t->schedule == SCHED_AUTO && !seen[12])
        chk_error(c, t->schedule_loc, "schedule = auto needs a per-stage memory budget: add `memory = 40GiB` (KiB, MiB, GiB)");
    else if (seen[12] && t->schedule != SCHED_AUTO)
        chk_warning(c, t->memory_loc, "memory has no effect: only schedule = auto chooses by memory");
    if (seen[19] && !seen[11])
        chk_warning(c, t->block_margin_loc, "block_margin has no effect: only `stages = N` chooses the split");
    if (seen[1] && t->microbatches > t->batch) {
        if (chk_error(c, c->micro_loc, "microbatches = %lld is more than batch = %lld: every micro-batch needs a row",
                      (long long)t->microbatches, (long long)t->batch)) {
            if (seen[0]) chk_note(c, c->batch_loc, "batch is set here");
            else chk_note(c, c->micro_loc, "batch is not set and defaults to 32");
        }
    }
    const char *sn = t->lr_schedule == LR_COSINE ? "cosine" : "linear";
    if ((t->lr_schedule == LR_COSINE || t->lr_schedule == LR_LINEAR) && t->warmup > t->steps)
        chk_warning(c, warmup_loc, "warmup = %lld is longer than steps = %lld: the %s decay never starts",
                    (long long)t->warmup, (long long)t->steps, sn);
    if ((t->lr_schedule == LR_COSINE || t->lr_schedule == LR_LINEAR) && t->lr_min >= t->lr)
        chk_warning(c, warmup_loc, "%s min = %g is not below lr = %g: the schedule has no effect", sn, t->lr_min, t->lr);
    if (t->optimizer == OPT_ADAM)
        for (int i = 0; i < t->ndecay_groups; i++)
            if (t->decay_groups[i].value != 0)
                chk_error(c, t->decay_groups[i].loc, "weight_decay = %g for ...: adam has no weight decay; use "
                          "adamw (decoupled decay) to decay these parameters", t->decay_groups[i].value);
}

/* `*` matches any run of characters (dots included), `?` one character. */
static int glob_match(const char *p, const char *s) {
    const char *star = NULL, *back = NULL;
    while (*s) {
        if (*p == '*') {
            star = p++;
            back = s;
        } else if (*p == '?' || *p == *s) {
            p++;
            s++;
        } else if (star) {
            p = star + 1;
            s = ++back;
        } else {
            return 0;
        }
    }
    while (*p == '*') p++;
    return *p == 0;
}

void chk_weight_decay(chk *c) {
    ir_train *t = &c->m->train;
    for (int i = 0; i < c->nparams_; i++) {
        ir_param *p = &c->params[i];
        p->decay_group = -1;
        p->weight_decay = p->is_buffer || t->optimizer == OPT_ADAM ? 0.0 : p->decay ? t->weight_decay : 0.0;
        if (p->is_buffer || !t->ndecay_groups) continue;
        p->weight_decay = t->weight_decay; /* groups replace the default rule */
        for (int g = 0; g < t->ndecay_groups && p->decay_group < 0; g++)
            for (int k = 0; k < t->decay_groups[g].npatterns; k++)
                if (glob_match(t->decay_groups[g].patterns[k], p->name)) {
                    p->decay_group = g;
                    p->weight_decay = t->decay_groups[g].value;
                    t->decay_groups[g].nparams++;
                    break;
                }
    }
    for (int g = 0; g < t->ndecay_groups; g++) {
        const ir_decay_group *G = &t->decay_groups[g];
        int any = 0;
        for (int k = 0; k < G->npatterns; k++) {
            int hit = 0;
            for (int i = 0; i < c->nparams_ && !hit; i++)
                hit = !c->params[i].is_buffer && glob_match(G->patterns[k], c->params[i].name);
            if (!hit)
                chk_warning(c, G->pattern_locs[k], "pattern \"%s\" matches no parameter name (`pipegen check` lists "
                            "them: layer names with .weight or .bias, and every param)", G->patterns[k]);
            any |= hit;
        }
        if (any && !G->nparams)
            chk_warning(c, G->loc, "weight_decay = %g for ...: every parameter it matches is set by an earlier group "
                        "(the first group that matches a parameter sets it)", G->value);
    }
}

/* dsl/check_ctx.h — the checker's private context, shared by check.c (driver and
 * declarations), eval.c (constant expressions), layers.c (layer kinds), train.c
 * (train settings), expand.c (blocks, repeats, skips, shapes) and stages.c
 * (chunks, stages, ties). Not part of the front end's public interface (ir.h is). */
#ifndef PG_CHECK_CTX_H
#define PG_CHECK_CTX_H

#include "ast.h"
#include "diag.h"
#include "ir.h"

#define PG_MAX_LAYERS 1000000 /* a model expanding past this is refused */
#define PG_MAX_STAGES 64      /* stage_mask is a uint64_t */
#define PG_MAX_CALL_DEPTH 100 /* block calls nest at most this deep */
#define CHK_MAX_ERRORS 50     /* the checker stops after this many errors */
#define CHK_MAX_WARNINGS 50   /* ...and shows at most this many warnings */

/* A string -> int map (open addressing, grows at half load) for the names of
 * constants, blocks, params, block formals and reported messages, so lookups
 * stay O(1) in files with 100,000 declarations. Keys are not owned. */
typedef struct chk_index {
    const char **keys;
    int *vals;
    size_t cap, count;
} chk_index;

int chk_index_get(const chk_index *ix, const char *key);    /* the value, or -1 */
int chk_index_put(chk_index *ix, const char *key, int val); /* -1 when added, else the value already there */
void chk_index_set(chk_index *ix, const char *key, int val); /* add or overwrite */
void chk_index_free(chk_index *ix);

/* ---- values of constant expressions -------------------------------------- */
typedef enum val_kind { V_INT, V_FLOAT } val_kind;
typedef struct pg_val {
    val_kind k;
    int64_t i;
    double f; /* V_FLOAT; for V_INT equals (double)i */
} pg_val;

/* Block formals bound to values for one block call; consts are global. */
typedef struct chk_env {
    const char *const *names;
    const pg_val *vals;
    int n;
    const chk_index *idx; /* names -> position, or NULL (then a linear search) */
} chk_env;

/* ---- declarations -------------------------------------------------------- */
typedef struct chk_const {
    const char *name;
    pg_loc loc;
    pg_val v;
} chk_const;

typedef struct chk_block {
    const ast_stmt *st;
    int recursive; /* part of a call cycle: reported once, never expanded */
    chk_index formals; /* formal name -> position */
} chk_block;

typedef struct chk_nparam { /* a `param NAME : f32[...]` statement */
    const ast_stmt *st;
    pg_dtype dt;
    pg_shape shape;
    int ok;             /* shape and options valid */
    ir_init init;
    double scale;
    int index;          /* in the model's params once first used, else -1 */
    const ast_stmt *tie; /* `tie NAME mode`, or NULL */
    ir_tie_mode tie_mode;
    int first_user;     /* layer index of the first use, -1 */
} chk_nparam;

/* A qualified name -> where it was defined; open addressing, grows at half load. */
typedef struct chk_name {
    const char *name;
    pg_loc loc;
} chk_name;

/* A top-level `split`: where, and how many layers came before it. */
typedef struct chk_split {
    pg_loc loc;
    int at_layer;
} chk_split;

typedef struct chk {
    pg_diag *d;
    ir_model *m;
    const pg_ast *ast;
    const struct pg_profile *profile; /* measured layer times for `stages = N` (cost.h), or NULL */
    pg_arena *a; /* = &m->arena: everything the model keeps */

    chk_const *consts;   int nconsts, capconsts;
    chk_block *blocks;   int nblocks, capblocks;
    chk_nparam *nparams; int nnparams, capnparams;
    chk_index const_ix, block_ix, nparam_ix; /* name -> index in the arrays above */

    ir_layer *layers;    int nlayers, caplayers;
    ir_param *params;    int nparams_, capparams;
    ir_skip *skips;      int nskips, capskips;
    chk_split *splits;   int nsplits, capsplits;
    chk_name *names;     size_t namecap, namecount;

    /* messages already reported (loc + text), so a block expanded 12 times
     * reports its error once */
    char **seen;         int nseen, capseen;
    chk_index seen_ix;
    int errors0;        /* d->errors when the check began */
    int too_many;       /* CHK_MAX_ERRORS reached: report nothing more, expand no further */
    int warnings_hidden; /* warnings past CHK_MAX_WARNINGS */

    /* where train settings were written, for errors that point at them */
    pg_loc loss_loc, batch_loc, micro_loc, train_loc;
    int have_loss;
    int cur_chunk;
    int cur_instance;   /* the outermost repeat instance being expanded, -1 outside */
    int ninstances;
    int expand_stopped; /* set after a fatal expansion error (layer limit) */
    int kinds_listed;   /* the layers there are were named (after the first unknown layer) */
    long reports;       /* diagnostics attempted, duplicates included: a repeat stops
                         * expanding instances once one of them reported something */
} chk;

/* ---- reporting (check.c) ------------------------------------------------- */
/* Report once per (loc, text); return 1 when printed, so notes can follow. */
int chk_error(chk *c, pg_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int chk_warning(chk *c, pg_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void chk_note(chk *c, pg_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* ", did you mean 'x'?" or "" (static buffer owned by the caller). */
const char *chk_didyoumean(char *buf, size_t n, const char *word, const char *const *cands, int ncands);
void *chk_xmalloc(size_t n);
void *chk_grow(void *p, int *cap, int need, size_t elem);
char *chk_strdup(chk *c, const char *s);
char *chk_qualify(chk *c, const char *prefix, const char *name); /* "p.name" or "name" */
const char *chk_fmt_count(int64_t v, char *buf, size_t n);        /* 124,439,808 */

/* ---- names (check.c) ----------------------------------------------------- */
/* Register a qualified name; on a duplicate report it (with a note at the first)
 * and return -1. what: "layer", "block call", ... */
int chk_name_define(chk *c, const char *name, pg_loc loc, const char *what);
int chk_find_block(const chk *c, const char *name);
int chk_find_nparam(const chk *c, const char *name);
int chk_find_const(const chk *c, const char *name);

/* ---- expressions (eval.c) ------------------------------------------------ */
/* Evaluate; quiet suppresses reports (used when only counting layers). 0 / -1. */
int chk_eval(chk *c, const chk_env *env, const ast_expr *e, pg_val *out, int quiet);
int chk_eval_int(chk *c, const chk_env *env, const ast_expr *e, const char *what, int64_t *out, int quiet);
const pg_val *chk_lookup(const chk *c, const chk_env *env, const char *name);
/* "unknown name 'x'" with did-you-mean over consts, formals and extra. */
void chk_unknown_name(chk *c, const chk_env *env, pg_loc loc, const char *name,
                      const char *const *extra, int nextra);
/* Evaluate dims into a positive shape; 0 or -1. what: "input", "param 'wte'" */
int chk_eval_dims(chk *c, const ast_dims *dims, pg_loc at, pg_shape *out);
int chk_dtype(chk *c, const char *name, pg_loc loc, pg_dtype *out);

/* ---- argument binding (layers.c) ----------------------------------------- */
typedef enum attr_type {
    AT_INT,    /* integer, range-checked */
    AT_FLOAT,  /* number */
    AT_BOOL,   /* true | false */
    AT_FLAG,   /* a bare name (`causal`), or `causal = true|false` */
    AT_TABLE,  /* the name of a `param` */
    AT_WORD,   /* one of a set of names (`sum`, `mean`) */
    AT_STRING, /* "..." */
    AT_PAIR,   /* (a, b) of numbers */
    AT_INT2    /* one integer (both values) or a pair (h, w), range-checked: i, i2 */
} attr_type;

enum { A_POS = 1, A_ARROW = 2, A_REQ = 4 };

typedef struct attr_spec {
    const char *name;
    attr_type type;
    int flags;         /* A_POS: may be given by position; A_ARROW: `a -> b` fills it and the next */
    char has_lo, lo_incl, has_hi, hi_incl;
    double lo, hi;
    const char *words; /* AT_WORD: "sum|mean" */
} attr_spec;

#define PG_MAX_ATTRS 8
typedef struct bound_attr {
    int set;
    pg_loc loc;
    int64_t i, i2; /* AT_INT2: (h, w) */
    double f, f2;
    const char *word;
    int table; /* AT_TABLE: index into c->nparams */
} bound_attr;

/* Bind args of `what(...)` to specs (NULL-name terminated); out has PG_MAX_ATTRS
 * entries. Returns the number of errors. */
int chk_bind_args(chk *c, const chk_env *env, const char *what, const attr_spec *specs,
                  const ast_arg *args, pg_loc call_loc, bound_attr *out);

/* The current tensor along the chain of layers. */
typedef struct chain {
    int known; /* 0 after a shape error we cannot recover from */
    pg_dtype dt;
    pg_shape shape;
} chain;

/* Layer kinds (layers.c). */
int layer_kind_find(const char *name);          /* ir_layer_kind or -1 */
const attr_spec *layer_kind_attrs(ir_layer_kind k);
const char *const *layer_kind_names(int *n);    /* for did-you-mean */
/* Apply a bound layer to the chain: check shapes, create parameters. */
void layer_apply(chk *c, ir_layer *L, const bound_attr *b, chain *ch);
int chk_add_param(chk *c, const char *name, pg_loc loc, const pg_shape *s, ir_init init,
                  double scale, int decay, int is_buffer);

/* Convolutional networks (layers_conv.c): the attribute tables of their kinds
 * and their shape rules (every kind from LK_CONV2D on). */
extern const attr_spec conv2d_attrs[], conv1d_attrs[], conv_transpose2d_attrs[], pool2d_attrs[],
    upsample_attrs[], reshape_attrs[], transpose_attrs[], mean_attrs[];
void layer_apply_conv(chk *c, ir_layer *L, const bound_attr *b, chain *ch);
/* `pop NAME concat(dim = k)`: the options a pop mode takes (layers_conv.c) */
extern const attr_spec pop_concat_attrs[];
int chk_use_nparam(chk *c, int np, int layer); /* param index of a named param */
/* Layer L's own parameter, or buffer, "<L>.<suffix>" (layers.c, for layers_lm.c
 * and layers_conv.c). */
void layer_add_own(chk *c, ir_layer *L, const char *suffix, pg_shape s, ir_init init, double scale, int decay);
void layer_add_buffer(chk *c, ir_layer *L, const char *suffix, pg_shape s, ir_init init);
/* kind(in -> out) on the chain: a located error unless its last dim is in; then it is out. */
void layer_want_last(chk *c, ir_layer *L, chain *ch, int64_t in, int64_t out);
/* 0, or 1 after a located error when the chain is not f32 (then unknown). */
int layer_need_f32(chk *c, ir_layer *L, chain *ch);
/* The language-model kinds (layers_lm.c): attributes and apply functions. */
extern const attr_spec lm_attention_attrs[], lm_rmsnorm_attrs[], lm_swiglu_attrs[];
void lm_apply_attention(chk *c, ir_layer *L, const bound_attr *b, chain *ch);
void lm_apply_rmsnorm(chk *c, ir_layer *L, const bound_attr *b, chain *ch);
void lm_apply_swiglu(chk *c, ir_layer *L, const bound_attr *b, chain *ch);

/* ---- the rest ------------------------------------------------------------ */
void chk_train(chk *c, const ast_stmt *st);         /* train.c */
const char *pg_train_setting_name(int k);           /* train.c: setting k of its table (ir_train.defaulted), or NULL */
void chk_weight_decay(chk *c);                      /* train.c: each parameter's rate, by its group or the rule */
void chk_skips_static(chk *c);                      /* expand.c: pairing, split placement */
void chk_expand(chk *c, chain *ch);                 /* expand.c: the model's items into layers */
void chk_stages(chk *c);                            /* stages.c */
void chk_ties(chk *c);                              /* stages.c */

#endif

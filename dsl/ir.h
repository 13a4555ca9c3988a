/* dsl/ir.h — the checked, expanded model: what the checker (dsl/check.c) hands to
 * codegen. Blocks and repeats are expanded, names are qualified, every shape is
 * known, every layer knows its chunk and stage, every parameter knows which
 * stages use it. Codegen never looks at the AST.
 *
 * Shapes are per sample: the batch dimension is implicit. A tensor of shape
 * [T, d] for one micro-batch of r rows is r*T*d contiguous floats, row-major. */
#ifndef PG_IR_H
#define PG_IR_H

#include <stdint.h>
#include <stdio.h>
#include "ast.h"
#include "diag.h"

#define PG_MAX_DIMS 4
#define PG_MAX_LAYER_PARAMS 8 /* a layer's own and shared parameters: attention's q, k, v, o weights and biases */

typedef enum pg_dtype { DT_F32, DT_BF16, DT_I32 } pg_dtype;

typedef struct pg_shape {
    int rank;
    int64_t dim[PG_MAX_DIMS];
} pg_shape;

int64_t pg_shape_numel(const pg_shape *s);          /* product of dims (1 for rank 0) */
int pg_shape_eq(const pg_shape *a, const pg_shape *b);
/* "f32[512, 1024]" into buf; returns buf. */
const char *pg_shape_str(pg_dtype dt, const pg_shape *s, char *buf, size_t n);
const char *pg_dtype_name(pg_dtype dt);

typedef enum ir_layer_kind {
    LK_LINEAR,     /* y = x W^T + b over the last dim; W [out, in], b [out] */
    LK_RELU,
    LK_GELU,       /* GPT-2 tanh form */
    LK_LAYERNORM,  /* over the last dim; weight [d], bias [d] */
    LK_BATCHNORM,  /* over the batch, per feature (last dim); weight, bias [C]; running stats */
    LK_EMBED,      /* i32[T] -> f32[T, d] by table [V, d] */
    LK_POS_EMBED,  /* [T, d] + table [seq, d]   (T == seq) */
    LK_ATTENTION,  /* [T, d] -> [T, d]; qkv W [3d, d], b [3d]; proj W [d, d], b [d] */
    LK_LOGITS,     /* [.., d] -> [.., V] by table [V, d] transposed, no bias */
    LK_DROPOUT,    /* deterministic: mask from (seed, step, sample index, element) */
    LK_RMSNORM,    /* x * rsqrt(mean(x^2) + eps) * weight over the last dim (Llama's); weight [d] */
    LK_SWIGLU,     /* silu(x Wg^T [+ bg]) * (x Wu^T [+ bu]); gate, up W [h, d] (dsl/layers_lm.c) */
    LK_STASH,      /* save the current tensor under skip `skip`; tensor unchanged */
    LK_POP,        /* combine skip `skip` into the current tensor (add | concat on a dim | take) */
    /* convolutional networks (dsl/layers_conv.c): channel-first per-sample shapes, [C, H, W] or [C, L] */
    LK_CONV2D,     /* [C, H, W] -> [out, OH, OW]; weight [out, C / groups, kh, kw], bias [out] */
    LK_CONV1D,     /* [C, L] -> [out, OL]; weight [out, C / groups, k], bias [out] */
    LK_CONV_T2D,   /* conv_transpose2d: [C, H, W] -> [out, OH, OW]; weight [C, out / groups, kh, kw], bias [out] */
    LK_MAXPOOL2D,  /* [C, H, W] -> [C, OH, OW], padding counts as -inf */
    LK_AVGPOOL2D,  /* [C, H, W] -> [C, OH, OW], divided by kh * kw (padding counted) */
    LK_GLOBAL_AVGPOOL, /* [C, H, W] -> [C] */
    LK_UPSAMPLE,   /* [C, H, W] -> [C, s H, s W], nearest or bilinear (align_corners false) */
    LK_FLATTEN,    /* [d0, d1, ...] -> [d0 d1 ...] */
    LK_RESHAPE,    /* the same elements in another per-sample shape */
    LK_TRANSPOSE,  /* per-sample dims i and j swapped */
    LK_MEAN,       /* mean over per-sample dim `dim`, which is dropped */
    LK_BATCHNORM2D, /* per channel over the batch and positions of [C, H, W]; as batchnorm otherwise */
    LK_SIGMOID,
    LK_TANH,
    LK_SILU,       /* x sigmoid(x) */
    LK__COUNT
} ir_layer_kind;
/* a kind's name as the .pipe writes it ("pos_embed"), "?" out of range (dsl/layers.c) */
const char *layer_kind_name(ir_layer_kind k);

/* add: elementwise; concat: along skip.concat_dim; take: the stash replaces the
 * current tensor (which the layer before must have stashed) */
typedef enum ir_pop_mode { POP_ADD, POP_CONCAT, POP_TAKE } ir_pop_mode;
typedef enum ir_tie_mode { TIE_NONE, TIE_REPLICATE, TIE_TRANSMIT } ir_tie_mode;

/* How a parameter's first value is made: from (its name, the seed) only. */
typedef enum ir_init {
    INIT_ZEROS,
    INIT_ONES,
    INIT_UNIFORM, /* U(-scale, scale); linear uses scale = 1/sqrt(in) as PyTorch does */
    INIT_NORMAL   /* N(0, scale^2); named params default to scale 0.02 */
} ir_init;

typedef struct ir_param {
    const char *name;     /* safetensors name: "layer0.weight", "h.3.attn.qkv.weight", "wte" */
    pg_loc loc;           /* the layer or `param` statement that made it */
    pg_dtype dtype;
    pg_shape shape;
    ir_init init;
    double init_scale;
    int is_buffer;        /* 1: not trained (batchnorm running stats), no grad, no optimizer state */
    int decay;            /* 1: weight decay applies by the default rule (matrices); 0: biases, norms */
    double weight_decay;  /* the rate its optimizer applies: the default rule (decay x the optimizer's
                             weight_decay), or its group's (train `weight_decay = V for "pattern"`) */
    int decay_group;      /* the group (ir_train.decay_groups) that set weight_decay, -1: the default rule */
    uint64_t stage_mask;  /* bit s set: stage s uses it (reads it in some layer) */
    int owner_stage;      /* lowest stage that uses it: holds the master for TIE_TRANSMIT */
    ir_tie_mode tie;      /* from `tie P mode`; TIE_NONE when used by one stage */
    ir_tie_mode tie_decl; /* the `tie P mode` as written (TIE_NONE: none), whatever the stages */
    pg_loc tie_loc;
} ir_param;

typedef struct ir_layer {
    ir_layer_kind kind;
    const char *name;     /* unique qualified path: "layer0", "h.3.attn", "h.3.stash.res" */
    pg_loc loc;
    int chunk;            /* model chunk (split pieces, in order); = stage unless interleaved */
    int instance;         /* the repeat instance it was expanded in (of the outermost repeat, numbered
                           * over the model from 0), -1 outside every repeat: `stages = N` keeps
                           * instances whole (codegen/choose/balance.c) */
    int stage;            /* pg_placement_stage(model placement, chunk, ...) */
    pg_dtype in_dtype;    /* DT_I32 for embed, else DT_F32 */
    pg_shape in, out;     /* per-sample shapes of the current tensor before and after */
    /* attributes (only the ones of this kind are meaningful) */
    int64_t in_features, out_features; /* linear, swiglu (d -> h); conv: in and out channels */
    int bias;                          /* linear, swiglu, attention, layernorm, conv: 1 = has bias(es) */
    int64_t heads;                     /* attention */
    int causal;                        /* attention */
    int64_t kv_heads;                  /* attention: key/value heads (= heads unless grouped-query) */
    double rope_theta;                 /* attention: rotary embedding base; 0 = none */
    int separate_qkv;                  /* attention: q, k, v, o projections (Llama) instead of qkv, proj */
    double eps;                        /* layernorm, batchnorm, rmsnorm */
    double momentum;                   /* batchnorm running-stat momentum */
    int deferred;                      /* batchnorm: running stats once per mini-batch */
    double p;                          /* dropout probability (dropout, attention's probabilities) */
    int64_t vocab, dim, seq;           /* embed / logits (vocab, dim), pos_embed (seq, dim) */
    int param[PG_MAX_LAYER_PARAMS];    /* indices into model params, in the order above; -1 = none */
    int nparam;
    int buffer[2];                     /* batchnorm running_mean, running_var (param indices) */
    int nbuffer;
    int skip;                          /* stash / pop: index into skips, else -1 */
    /* convolution and pooling, (h, w) pairs; conv1d and 1-D shapes use [1] (h: 1, 0, 1) */
    int64_t kernel[2], stride[2], padding[2], dilation[2], output_padding[2];
    int64_t groups;                    /* conv: channels in groups (in and out divisible) */
    int64_t scale;                     /* upsample: integer factor */
    int bilinear;                      /* upsample: 0 nearest, 1 bilinear */
    int axis[2];                       /* transpose: the dims swapped; mean: axis[0] */
    unsigned defaulted;                /* bit i: optional number or true/false attribute i of the kind
                                        * (layers.c's table) was not written and took its default */
} ir_layer;

typedef struct ir_skip {
    const char *name;     /* qualified: "h.3.res" */
    int stash_layer, pop_layer;   /* layer indices */
    ir_pop_mode mode;
    int concat_dim;       /* POP_CONCAT: the per-sample dim joined (the last unless `concat(dim = k)`) */
    pg_shape shape;       /* the stashed tensor's per-sample shape */
    pg_loc stash_loc, pop_loc;
} ir_skip;

/* Order matters: plan.json and the listings name them through tables in this order. */
typedef enum ir_schedule {
    SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB1, SCHED_FILE,
    SCHED_ZBV,  /* zero-bubble V: two chunks per stage in V placement, B and W apart */
    SCHED_AUTO  /* only before codegen/choose/auto.c resolves it into one of the others */
} ir_schedule;
/* Where chunk c runs on P stages: PLACE_LOOP, stage c mod P (Megatron's
 * interleaving; one chunk per stage is its special case); PLACE_V, two chunks
 * per stage, stage s holding chunks s and 2P-1-s (ZBV, DualPipeV), so the first
 * and the last chunk share stage 0. */
typedef enum ir_placement { PLACE_LOOP, PLACE_V } ir_placement;
/* The stage of chunk c of nchunks on nstages under placement pl. */
static inline int pg_placement_stage(ir_placement pl, int c, int nchunks, int nstages) {
    if (nstages < 1) return 0;
    if (pl == PLACE_V && nchunks == 2 * nstages) return c < nstages ? c : 2 * nstages - 1 - c;
    return c % nstages;
}
static inline const char *pg_placement_name(ir_placement pl) { return pl == PLACE_V ? "v" : "loop"; }
typedef enum ir_ckpt { CKPT_ALWAYS, CKPT_EXCEPT_LAST, CKPT_NEVER } ir_ckpt;
typedef enum ir_loss { LOSS_MSE_SUM, LOSS_MSE_MEAN, LOSS_CROSS_ENTROPY } ir_loss;
#define PG_NO_IGNORE INT64_MIN /* ir_train.ignore_index when cross_entropy ignores nothing */
typedef enum ir_opt { OPT_SGD, OPT_ADAMW, OPT_ADAM } ir_opt; /* adam: adamw without weight decay */
/* adam and adamw: two moments of state per parameter */
static inline int pg_opt_adam(ir_opt o) { return o == OPT_ADAMW || o == OPT_ADAM; }
/* every one with a linear warm-up over `warmup` steps first (runtime/core/step.c, lr_at) */
typedef enum ir_lr_sched { LR_CONSTANT, LR_COSINE, LR_LINEAR, LR_INVSQRT } ir_lr_sched;

/* `weight_decay = V for "p" "q"` in train: the parameters whose names match a
 * pattern (`*` any characters, `?` one) decay at V; the first group that
 * matches a parameter sets it. With groups, the parameters no group matches
 * decay at the optimizer's weight_decay (the default rule is replaced). */
typedef struct ir_decay_group {
    double value;
    pg_loc loc;               /* the setting's key */
    int npatterns;
    const char **patterns;
    pg_loc *pattern_locs;
    int nparams;              /* parameters it set (pg_check) */
} ir_decay_group;

typedef struct ir_train {
    int64_t batch;          /* default 32 */
    int64_t microbatches;   /* default 1; first batch % m micro-batches get one more row */
    ir_schedule schedule;   /* default 1f1b */
    int interleave;         /* v for interleaved(v); 1 otherwise */
    const char *schedule_file; /* file("x.csv"), resolved relative to the .pipe */
    pg_loc schedule_loc;
    ir_ckpt checkpoint;     /* default except_last */
    ir_loss loss;           /* default mse(mean) */
    int64_t ignore_index;   /* cross_entropy(ignore = -100): targets holding it count nowhere; PG_NO_IGNORE: none */
    ir_opt optimizer;       /* default sgd */
    double lr;              /* sgd default 1e-2; adamw default 1e-3 */
    double momentum;        /* sgd, default 0 */
    double weight_decay;    /* default 0 (sgd), 0.01 (adamw) */
    double beta1, beta2, adam_eps; /* adamw: 0.9, 0.999, 1e-8 */
    ir_lr_sched lr_schedule;
    int64_t warmup;         /* linear warm-up steps (every schedule; 0 none) */
    double lr_min;          /* cosine, linear: the floor reached at `steps` */
    int64_t steps;          /* default number of steps; the cosine horizon. default 100 */
    double grad_clip;       /* global L2 norm clip; 0 = off */
    int ndecay_groups;      /* `weight_decay = V for "pattern" ...` lines, in file order */
    ir_decay_group *decay_groups;
    int64_t eval_every;     /* evaluate every N steps (and after the last); 0: after the last step only */
    int64_t eval_batches;   /* evaluate on the first K batches of --eval-data; 0: every row of it */
    int shuffle;            /* 1: every epoch visits the samples of --data in a fresh seeded order */
    uint64_t seed;          /* default 0 */
    pg_dtype precision;     /* f32 | bf16 */
    int stages;             /* `stages = N`; 0 when not given */
    pg_loc stages_loc;
    int placement;          /* `placement = loop | v` (ir_placement), -1 when not given */
    pg_loc placement_loc;
    int64_t memory;         /* `memory = 40GiB`: bytes per stage for schedule = auto; 0 none */
    double block_margin;    /* `stages = N` cuts a repeat instance only when that predicts a step shorter
                               by more than this fraction (default 0.05) */
    pg_loc block_margin_loc;
    pg_loc memory_loc;
    int auto_chosen;        /* 1: schedule (and for stages = N the split) chosen by `schedule = auto` */
    unsigned defaulted;     /* bit k: setting k of dsl/train.c's table was not written (pipegen check lists them) */
    /* `generate = kv_cache(batch, microbatches, length, prefill)`: the static
     * sizes of generation with the KV cache (codegen/gen/gen_decode.c), 0 where
     * not given (the generator's defaults); gen_off: `generate = none` */
    int64_t gen_batch, gen_microbatches, gen_length, gen_prefill;
    int gen_off;
    pg_loc gen_loc;
} ir_train;

typedef struct ir_model {
    const char *name;
    const char *source_path;
    pg_loc loc;
    const char *input_name;  pg_dtype input_dtype;  pg_shape input;
    const char *target_name; pg_dtype target_dtype; pg_shape target;
    ir_train train;
    int ninstances; /* repeat instances (ir_layer.instance 0 .. ninstances - 1) */
    int nlayers;   ir_layer *layers;    /* in execution order */
    int nparams;   ir_param *params;    /* in first-use order (then unused named params) */
    int nskips;    ir_skip *skips;
    int nchunks;   /* pieces between splits (or chosen by the balancer) */
    int nstages;   /* nchunks / interleave */
    ir_placement placement; /* chunk -> stage (layers[i].stage follows it) */
    int balanced;  /* 1: `stages = N` without splits: the split is pipegen's (dsl/stages.c, codegen/choose/balance.c) */
    pg_arena arena; /* everything above lives here */
} ir_model;

/* Check the tree and build the model. Reports every error it can through d and
 * returns the error count; m is valid only when it returns 0. */
int pg_check(const pg_ast *ast, ir_model *m, pg_diag *d);
void pg_model_free(ir_model *m);

/* Parameter counts (trainable elements) of the whole model and of one stage;
 * a replicated tied parameter counts once in the model, once per using stage. */
int64_t pg_model_param_count(const ir_model *m);
int64_t pg_stage_param_count(const ir_model *m, int stage);
/* Another split of a checked model (codegen/choose/balance.c, codegen/choose/auto.c): compute
 * layer j (stash and pop excluded, in layer order) into chunk chunk_of[j], of
 * nchunks in order on nstages under placement pl; the stages that use each
 * parameter and their ties follow. -1 when a parameter without a `tie` would be
 * used on two stages (the model is left repartitioned all the same). */
int pg_model_repartition(ir_model *m, int nchunks, int nstages, ir_placement pl, const int *chunk_of);

/* `pipegen check` summary. */
void pg_model_summary(const ir_model *m, FILE *out);

#endif

/* runtime/core/pg_contract.h — the one contract between pipegen (codegen/)
 * and the stage runtime (runtime/core, runtime/cpu, runtime/cuda).
 *
 * Everything the generated stage<k>.c and the runtime must agree on lives
 * here and nowhere else: the action kinds and their names, the message-tag
 * formula and the reserved tag kinds, the dropout seed formula, the numbered
 * settings (optimizer, learning-rate schedule, loss, parameter init, tie mode,
 * data type), and the descriptor structs a stage file fills in. pipegen
 * includes this header to print enum names and designated initialisers; the
 * runtime includes it (through pg_stage.h) to read them.
 *
 * Dependency-free on purpose: C11 (and C++17, for nvcc) with <stdint.h> only.
 *
 * PG_CONTRACT_VERSION counts incompatible changes of the structs below; a
 * stage file records the version it was generated against as the first
 * field of pg_stage_desc (PG_CONTRACT_TAG), and main.c refuses a stage whose
 * tag differs before it reads anything else. Appending a field at the end of
 * pg_stage_desc that reads as 0 when absent keeps the version; anything else
 * (a field added in the middle, an enum renumbered) increments it. */
#ifndef PG_CONTRACT_H
#define PG_CONTRACT_H

#include <stdint.h>

#define PG_CONTRACT_VERSION 9 /* 3: pg_param_desc.chunk, .grad_layer; pg_mb_io.grads_final; 4: pg_stage_desc.opt_lo,
                                 .opt_bytes; 5: pg_stage_desc.has_ignore, .ignore_id, .count_off; 6: the
                                 step's end as actions (TIE_SUM_*, VERDICT*; no TIE_REDUCE; GRAD_NORM local); 7:
                                 pg_param_desc.weight_decay, pg_train_desc.eval_every, .eval_batches, .shuffle,
                                 pg_stage_desc.eval_actions, .output_rank, .output_dim; 8: pg_mb_io.seqs, .t,
                                 pg_chunk_desc.dec, pg_stage_desc.dec, .dec_why (generation with the KV cache);
                                 9: pg_stage_desc.nconvs, .convs (the convolution geometries) */
/* "PGCTRC" in the high bytes and the version in the low ones: a stage file
 * from before the contract had a pointer there, which never reads as this. */
#define PG_CONTRACT_TAG(version) (UINT64_C(0x5047435452430000) | (uint64_t)(version))

/* ---- the step: action kinds ---------------------------------------------
 * One list, in the order of the enum: X(NAME, what it does). The schedule
 * (codegen/schedule/schedule.c), the emitter, the runtime (step.c) and every message
 * (`action 12 RECV_GRAD(mb 3) ...`) use these names.
 *
 * The step's end is actions too, each placed where what it needs is final
 * (codegen/schedule/schedule_comms.c): a user of a tied parameter sends its
 * gradient accumulators to the owner (TIE_GRAD_SEND) right after the last
 * weight-gradient pass that writes them; the owner adds them in stage order
 * (TIE_GRAD_RECV) after its own; then every stage makes its verdict
 * (VERDICT: its gradients final, their sums of squares, non-finite loss or
 * gradients) and sends it to every other stage (VERDICT_SEND), the owner of
 * a replicated tie sends the sum back (TIE_SUM_SEND), and each stage receives
 * what it needs (VERDICT_RECV, TIE_SUM_RECV) before it clips (GRAD_NORM) and
 * steps (OPT_STEP). No exchange waits for one that could have gone earlier. */
#define PG_STEP_KINDS(X)                                                                                        \
    X(FWD, "forward of (chunk, mb)")                                                                           \
    X(BWD_B, "backward, input gradient (includes the loss gradient on the last chunk)")                       \
    X(BWD_W, "backward, weight gradient (accumulates)")                                                       \
    X(SEND_ACT, "chunk's output of mb, to the stage holding chunk + 1")                                       \
    X(RECV_ACT, "chunk's input of mb, from the stage holding chunk - 1")                                      \
    X(SEND_GRAD, "gradient of chunk's input of mb, to the stage holding chunk - 1")                           \
    X(RECV_GRAD, "gradient of chunk's output of mb, from the stage holding chunk + 1")                        \
    X(SEND_SKIP, "stashed tensor `skip` of mb, straight to the popping stage")                                \
    X(RECV_SKIP, "stashed tensor `skip` of mb, from the stashing stage")                                      \
    X(SEND_SKIP_GRAD, "gradient of skip `skip` of mb, back to the stashing stage")                            \
    X(RECV_SKIP_GRAD, "gradient of skip `skip` of mb, from the popping stage")                                \
    X(TIE_SEND, "transmit: the owner sends the value of `param` to a user (peer)")                            \
    X(TIE_RECV, "transmit: a user receives the value (peer = owner)")                                         \
    X(TIE_GRAD_SEND, "a user sends its gradient accumulators of `param` to the owner, once they are final")   \
    X(TIE_GRAD_RECV, "the owner receives and adds them, in stage order (the first folds its own uses)")       \
    X(TIE_SUM_SEND, "replicate: the owner sends the summed gradient of `param` to a user")                    \
    X(TIE_SUM_RECV, "replicate: a user receives it into its copy's gradient (peer = owner)")                  \
    X(VERDICT, "the stage's gradients final (folds, replicas), their sums of squares, its findings")          \
    X(VERDICT_SEND, "the verdict word and the sums of squares of the gradients it owns, to stage peer")       \
    X(VERDICT_RECV, "stage peer's verdict word and sums of squares")                                          \
    X(GRAD_NORM, "grad clipping: the global norm from every stage's sums of squares, then scale")             \
    X(OPT_STEP, "optimizer step on this stage's parameters (once every verdict is in)")

typedef enum pg_step_kind {
#define PG_STEP_KIND_ENUM_(name, what) PG_##name,
    PG_STEP_KINDS(PG_STEP_KIND_ENUM_)
#undef PG_STEP_KIND_ENUM_
    PG_STEP_KIND_COUNT
} pg_step_kind;

/* "FWD", "RECV_GRAD", ...; "?" for a number that is no kind. */
static inline const char *pg_step_kind_name(int kind)
{
    static const char *const names[] = {
#define PG_STEP_KIND_NAME_(name, what) #name,
        PG_STEP_KINDS(PG_STEP_KIND_NAME_)
#undef PG_STEP_KIND_NAME_
    };
    return kind >= 0 && kind < (int)PG_STEP_KIND_COUNT ? names[kind] : "?";
}

/* 1 for the pipeline's message sends (an activation, gradient or skip of a
 * micro-batch, sent from its slot of the arena). */
static inline int pg_step_msg_send(int kind)
{
    return kind == PG_SEND_ACT || kind == PG_SEND_GRAD || kind == PG_SEND_SKIP || kind == PG_SEND_SKIP_GRAD;
}

/* 1 for their receives (into a slot of the arena). */
static inline int pg_step_msg_recv(int kind)
{
    return kind == PG_RECV_ACT || kind == PG_RECV_GRAD || kind == PG_RECV_SKIP || kind == PG_RECV_SKIP_GRAD;
}

/* ---- message tags ---------------------------------------------------------
 * (kind << 24) | (mb << 8) | x: kind is the SEND's action kind (or a reserved
 * kind below), mb the micro-batch (or a parameter index for tie messages), x
 * the sending chunk for activations and gradients, the skip index for skips.
 * The generator computes every table entry's tag with it, and the runtime
 * every tag it sends outside the table, so a receive names what it expects. */
#define PG_TAG(kind, mb, x) \
    (((uint32_t)(kind) << 24) | (((uint32_t)(mb) & 0xffffu) << 8) | ((uint32_t)(x) & 0xffu))

/* Tag kinds of the runtime's own exchanges, above every action kind. */
enum {
    PG_TAG_GEN = 25,     /* generation: a decode call's row table before each message, the sampled tokens (decode.c) */
    PG_TAG_EVAL = 26,    /* evaluation and --predict: the row counts, the other replicas' wait (eval.c) */
    PG_TAG_CKPT = 27,    /* checkpoint: reports, verdicts, the resume agreement */
    PG_TAG_VERDICT = 28, /* the start-up exchange of which stage holds the loss (guard.c) */
    PG_TAG_STOP = 29,    /* the --save-on-exit stop agreement (guard.c) */
    PG_TAG_SAVE = 30     /* the final parameter gather (--save) */
};                       /* (31, the grad-norm exchange up to contract 5, is free: the verdicts carry the sums) */

/* ---- random streams -------------------------------------------------------
 * splitmix64's output function applied to x + the golden ratio: a bijective,
 * well-mixed 64-bit hash (Steele, Lea, Flood 2014). Every random stream of a
 * run is built from it (parameter initial values, dropout masks, synthetic
 * data), on the host and in CUDA kernels alike, so it is written once, here. */
#ifdef __CUDACC__
#define PG_CONTRACT_FN static inline __host__ __device__
#else
#define PG_CONTRACT_FN static inline
#endif
PG_CONTRACT_FN uint64_t pg_splitmix64(uint64_t x)
{
    uint64_t z = x + UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}
/* Uniform in [0, 1) from the top 24 bits of a hash: exact in float. */
PG_CONTRACT_FN float pg_unit24(uint64_t h) { return (float)(h >> 40) * (1.0f / 16777216.0f); }

/* A dropout layer's mask seed: a function of (train.seed, step, layer index)
 * only, so masks do not depend on the stage count, the schedule or the
 * recomputation; the kernels draw element (sample, i) from it. */
PG_CONTRACT_FN uint64_t pg_dropout_seed(uint64_t seed, int64_t step, int layer)
{
    return seed ^ (UINT64_C(0x9E3779B97F4A7C15) * (uint64_t)(step * 4096 + layer + 1));
}

/* ---- numbered settings ---------------------------------------------------- */
/* adam is adamw without weight decay: the same update and state (two moments) */
typedef enum pg_optim { PG_OPTIM_SGD = 0, PG_OPTIM_ADAMW = 1, PG_OPTIM_ADAM = 2 } pg_optim;
PG_CONTRACT_FN int pg_optim_adam(int optimizer) { return optimizer == PG_OPTIM_ADAMW || optimizer == PG_OPTIM_ADAM; }
/* each after a linear warm-up of train.warmup steps (runtime/core/step.c, lr_at) */
typedef enum pg_lr_schedule { PG_LR_CONSTANT = 0, PG_LR_COSINE = 1, PG_LR_LINEAR = 2, PG_LR_INVSQRT = 3 } pg_lr_schedule;
typedef enum pg_loss_kind { PG_LOSS_MSE_SUM = 0, PG_LOSS_MSE_MEAN = 1, PG_LOSS_CROSS_ENTROPY = 2 } pg_loss_kind;
/* a parameter's initial values (runtime/core/init.c has the formulas) */
typedef enum pg_init_kind { PG_INIT_ZEROS = 0, PG_INIT_ONES = 1, PG_INIT_UNIFORM = 2, PG_INIT_NORMAL = 3 } pg_init_kind;
/* a parameter used by several stages: each holds a copy and the gradients are
 * summed (replicate), or the owner sends the value and receives the gradients
 * (transmit) */
typedef enum pg_tie_mode { PG_TIE_NONE = 0, PG_TIE_REPLICATE = 1, PG_TIE_TRANSMIT = 2 } pg_tie_mode;
/* the element type of the model's input and target */
typedef enum pg_data_type { PG_DATA_F32 = 0, PG_DATA_I32 = 2 } pg_data_type;

/* ---- descriptors ------------------------------------------------------------ */
typedef struct pg_ctx pg_ctx; /* the backend's state (pg_ops.h) */

/* One action of a stage's step. */
typedef struct pg_step_action {
    int kind;       /* pg_step_kind */
    int mb;         /* micro-batch, -1 for per-step actions */
    int chunk;      /* model chunk, -1 for per-step actions */
    int slot;       /* activation slot of (chunk, mb) on this stage, -1 if none */
    int peer;       /* other stage of a SEND/RECV, -1 otherwise */
    int skip;       /* skip index for *_SKIP*, else -1 */
    int param;      /* model param index for TIE_*, else -1 */
    uint32_t tag;   /* PG_TAG(...) for SEND/RECV, 0 otherwise */
    int64_t off;    /* arena byte offset of the message (SEND/RECV), -1 otherwise */
    int64_t bytes;  /* exact message bytes (SEND/RECV), 0 otherwise */
} pg_step_action;

/* What one call of a chunk function works on. */
typedef struct pg_mb_io {
    int mb;              /* micro-batch index */
    int slot;            /* its activation slot on this chunk */
    int recompute;       /* 1: checkpointed; BWD_B recomputes the forward first */
    int64_t rows;        /* rows of this micro-batch */
    int64_t first_row;   /* index of its first row within the batch */
    int64_t step;        /* 0-based training step */
    uint64_t seed;       /* train.seed */
    double loss;         /* out (FWD of the loss chunk): this micro-batch's partial loss */
    int infer;           /* 1: inference (--generate): no dropout, batch norm by its running statistics, nothing updated */
    /* The runtime's hook, non-NULL only while the step's last backward-weight
     * action of the chunk runs and replicas sum gradients while the backward
     * goes on (runtime/core/dp.c): the chunk's bwd_w calls it (PG_GRADS_FINAL)
     * after the weight-gradient code of each layer l (an index into
     * pg_stage_desc.layers) that is some parameter's grad_layer. */
    void (*grads_final)(void *arg, int l);
    void *grads_final_arg;
    /* A decode call (a chunk's `dec` function, generation with the KV cache):
     * rows = seqs x t token rows, t new positions of each of seqs sequences,
     * whose cache rows, first positions and real new positions the stage's
     * decode row table holds (pg_dec_desc.rows_off); slot is the decode
     * micro-batch. 0 in the step's calls. */
    int64_t seqs, t;
} pg_mb_io;

typedef int (*pg_chunk_fn)(pg_ctx *c, unsigned char *A, pg_mb_io *io);

typedef struct pg_chunk_desc {
    int chunk;
    pg_chunk_fn fwd, bwd_b, bwd_w;
    pg_chunk_fn dec;         /* generation with the KV cache: new positions of a decode micro-batch (NULL: none) */
} pg_chunk_desc;

/* Generation with the KV cache (runtime/core/decode.c; the generator's side is
 * codegen/gen/gen_decode.c). Up to `batch` sequences are in flight, cut into
 * nmb decode micro-batches (the first batch % nmb take one more); each
 * attention layer keeps the keys and values of every sequence's positions in
 * its cache ([batch, length, kv_heads x head size], in the arena). The work
 * goes in rounds: in each, every micro-batch flows once through the chunks by
 * `actions` (the decode schedule: FWD, SEND/RECV_ACT, SEND/RECV_SKIP, built
 * and verified like the step's, one action list per round), and a call gives
 * each of its sequences up to `prefill` new positions: its prompt (in pieces
 * of at most `prefill`) or the one token sampled in the round before.
 * Tensors in a decode call are per token: the positions dimension is gone,
 * rows = sequences x t. The row table (int32 [rows][4] at rows_off) says per
 * sequence of a call: its cache row, its first new position, how many of the
 * t positions are real (the rest pad to t: attention skips them), and flags;
 * the runtime writes it before each call. In `actions`, off is the message's
 * buffer for that micro-batch and bytes its bytes per token row. */
typedef struct pg_dec_desc {
    int64_t batch, length, prefill;
    int nmb;
    int64_t rows;                 /* sequences of a micro-batch at most: ceil(batch / nmb) */
    int64_t rows_off;             /* the row table, int32 [rows][4] */
    int64_t tokens_off;           /* the stage holding chunk 0: the token ids of a call, i32 [rows * prefill] */
    int64_t logits_off;           /* the stage holding the last chunk: the logits of a call, f32 [rows * prefill, vocab] */
    int64_t vocab;
    int last_stage;               /* the stage holding the last chunk: it samples (chunk 0 is on stage 0) */
    int nactions;
    const pg_step_action *actions;
    int64_t cache_bytes;          /* this stage's KV caches (reported) */
} pg_dec_desc;
/* A row of the row table: the sequence's cache row, its first new position,
 * its real new positions (<= t), and PG_DEC_SAMPLE when the last of them is
 * the end of its context (the last chunk samples the next token there). */
enum { PG_DEC_SEQ = 0, PG_DEC_POS = 1, PG_DEC_N = 2, PG_DEC_FLAGS = 3, PG_DEC_ROW_INTS = 4 };
#define PG_DEC_SAMPLE 1

/* One parameter. In a stage's own table the offsets are arena byte offsets
 * (-1 where a buffer does not exist); in the model table they are -1. */
typedef struct pg_param_desc {
    const char *name;        /* safetensors name, as in the .pipe */
    int index;               /* index in the model's parameter list (plan order) */
    int rank;
    int64_t dim[4];
    int64_t numel;
    int init;                /* pg_init_kind */
    double init_scale;
    int decay;               /* weight decay applies by the default rule (matrices, not biases or norms) */
    double weight_decay;     /* the rate the optimizer applies to it: by the rule (decay x
                                train.weight_decay) or by a `weight_decay = V for "pattern"` group */
    int is_buffer;           /* not trained: no grad, no optimizer state */
    int tie;                 /* pg_tie_mode */
    int owner;               /* stage holding the master copy (lowest using stage) */
    uint64_t stage_mask;     /* stages using it */
    int64_t off, grad_off, opt_off[2];
    /* A parameter used by several layers gives each use its own gradient
     * accumulator, nacc [numel] buffers from grad_off in layer order,
     * acc_numel floats apart (numel rounded up to the plan's 256-byte
     * alignment; 0 reads as numel), nacc 0 reading as 1; their sum in layer
     * order, first into the first, is the gradient: the same float operations
     * for any stage count. stage_nacc[s] is stage s's nacc (NULL: 1 on each
     * using stage). A tie message carries n accumulators as one block of
     * (n - 1) * acc_numel + numel floats. */
    int nacc;
    const int *stage_nacc;
    int64_t acc_numel;
    /* Where its gradient becomes final (the replicas' gradient buckets,
     * runtime/core/dp.c): the chunk of this stage whose one layer alone uses
     * it, and that layer's index in pg_stage_desc.layers (grad_layer), whose
     * backward-weight code of the step's last micro-batch writes the gradient
     * last and then calls PG_GRADS_FINAL. Both -1 where no one layer finishes
     * it: a parameter used by several layers (its accumulators are folded
     * later) or tied across stages (summed over them first), a buffer, and
     * every entry of the model table. */
    int chunk;
    int grad_layer;
} pg_param_desc;

typedef struct pg_train_desc {
    int64_t batch, microbatches, steps;
    int optimizer;                     /* pg_optim */
    double lr, momentum, weight_decay, beta1, beta2, adam_eps;
    int lr_schedule;                   /* pg_lr_schedule: a linear warm-up, then constant, cosine or linear to lr_min
                                          at `steps`, or inverse_sqrt */
    int64_t warmup;
    double lr_min, grad_clip;
    uint64_t seed;
    int loss;                          /* pg_loss_kind */
    int64_t eval_every;                /* evaluate every N steps and after the last (0: after the last only) */
    int64_t eval_batches;              /* evaluate on the first K batches of --eval-data (0: every row) */
    int shuffle;                       /* 1: a fresh seeded order of the data file's samples every epoch */
} pg_train_desc;

/* A bf16 shadow of a GEMM weight (precision = bf16): the stage's parameter
 * `param` (index into pg_stage_desc.params) has its numel bf16 values at arena
 * offset `off` (pg_ops.h, "bf16 shadow weights"). */
typedef struct pg_shadow_desc {
    int param;
    int64_t off;
} pg_shadow_desc;

/* One layer of a stage (--profile, runtime/core/trace.c): its qualified name,
 * its chunk, and the cost model's estimated flops per sample of its F, B and W
 * passes (dsl/cost.c), by which a chunk's measured time is split among its layers. */
typedef struct pg_layer_info {
    const char *name;
    int chunk;
    double fwd, bwd_b, bwd_w;
} pg_layer_info;

/* One buffer of the arena {offset, bytes} (the guard-byte mode lists them). */
typedef struct pg_arena_buf {
    int64_t off, bytes;
} pg_arena_buf;

/* Everything the runtime needs from a generated stage<k>.c: its
 * `const pg_stage_desc pg_stage`. */
typedef struct pg_stage_desc {
    uint64_t contract;                 /* PG_CONTRACT_TAG(PG_CONTRACT_VERSION): first, always */
    const char *pipegen_version;
    const char *model;
    const char *source;                /* the .pipe file name (no directories) */
    int stage, nstages, nchunks, nmb;
    uint64_t plan_hash;                /* FNV-1a 64 of plan.json without its hash line */
    int64_t arena_bytes;
    /* The optimizer state of every parameter (opt_off) lies in [opt_lo, opt_lo
     * + opt_bytes), the end of the arena (opt_lo + opt_bytes = arena_bytes),
     * a parameter's state 0 then its state 1, parameters in table order; with
     * --zero 1 a replica holds only its shard of it (runtime/core/zero.c). */
    int64_t opt_lo, opt_bytes;
    pg_train_desc train;

    int nparams;                       /* parameters held by this stage */
    const pg_param_desc *params;
    int nmodel_params;                 /* every parameter of the model, plan order (for --save) */
    const pg_param_desc *model_params;

    int nchunk_fns;
    const pg_chunk_desc *chunks;
    int nactions;
    const pg_step_action *actions;
    const int64_t *mb_rows;            /* [nmb] */
    const int64_t *mb_first_row;       /* [nmb] */
    const int *mb_recompute;           /* [nmb] 1: checkpointed on this stage */

    /* Stage 0: the model input of the whole batch, loaded before each step. */
    int has_input;
    int64_t input_off;                 /* arena offset of [batch, ...] */
    int input_dtype;                   /* pg_data_type */
    int input_rank;                    /* per-sample rank */
    int64_t input_dim[4];
    int64_t input_per_sample;          /* elements */
    int64_t input_vocab;               /* i32 input: ids in [0, vocab) for synthetic data */
    /* The stage holding the loss: the targets of the whole batch. */
    int has_loss;
    int64_t target_off;
    int target_dtype;                  /* pg_data_type */
    int target_rank;
    int64_t target_dim[4];
    int64_t target_per_sample;
    int64_t target_vocab;
    /* cross_entropy(ignore = id): target positions holding ignore_id count
     * nowhere; before each step the runtime writes at count_off (a double)
     * how many positions of the whole batch, every replica's rows, do count
     * (runtime/core/ignore.c). has_ignore 0: none. */
    int has_ignore;
    int64_t ignore_id;
    int64_t count_off;

    const int64_t *send_bytes;         /* [nstages]: bytes sent to each peer in one step, plus the final gather */
    int64_t ws_off, ws_bytes;          /* workspace for tie reductions: one received gradient block */
    /* --generate: on the stage holding the last chunk, the model output
     * (logits) of activation slot s starts at output_off + s *
     * output_slot_bytes, output_per_sample elements per row; output_per_sample
     * is 0 on the other stages. */
    int64_t output_off, output_slot_bytes, output_per_sample;
    /* --profile: this stage's layers in chunk and layer order. */
    int nlayers;
    const pg_layer_info *layers;
    /* train.precision: 0 f32 (the generator writes nothing then), 1 bf16
     * (main.c passes it to pg_backend_set_precision). */
    int precision;
    /* `pipegen gen --guard-bytes N`: N free bytes precede the first arena
     * buffer and follow each; arena_bufs lists every buffer (narena_bufs of
     * them), and a runtime built with AddressSanitizer poisons every other
     * byte of the arena (pg_arena_guard). 0 / NULL otherwise. */
    int64_t guard_bytes;
    int narena_bufs;
    const pg_arena_buf *arena_bufs;
    /* bf16 shadows of this stage's GEMM weights, planned when precision =
     * bf16 (main.c registers them with pg_shadow_register); 0 / NULL otherwise. */
    int nshadows;
    const pg_shadow_desc *shadows;
    /* The bf16 GEMM operand copies (runtime/core/pg_bf16ws.h): an arena
     * buffer planned when precision = bf16, which main.c hands to the
     * backend with pg_bf16_workspace; 0 otherwise. */
    int64_t bf16_ws_off, bf16_ws_bytes;
    /* FNV-1a 64 of the model's input, target, layers and skips without their
     * chunks and stages (codegen/gen/gen_plan_json.c, model_arch_hash): equal for every
     * layout of one model. A checkpoint's model identity (checkpoint.c)
     * includes it. */
    uint64_t arch_hash;
    /* Generation with the KV cache (pg_dec_desc); NULL when the model cannot
     * generate, and then dec_why says why (NULL: not a language model). */
    const pg_dec_desc *dec;
    const char *dec_why;
    /* The forward-only schedule (evaluation, --predict; codegen/schedule:
     * pg_schedule_forward_only): the step's forward actions and transmitted
     * ties' value messages in the step's order, verified on their own;
     * offsets, bytes and tags as in `actions`. */
    int neval_actions;
    const pg_step_action *eval_actions;
    /* The model output per sample (--predict writes it): its rank and shape
     * (output_per_sample elements), on the stage holding the last chunk. */
    int output_rank;
    int64_t output_dim[4];
    /* The stage's distinct convolution geometries (conv2d, conv1d,
     * conv_transpose2d; runtime/core/pg_conv.h), in layer order, and the
     * backend's pg_conv_plan (pg_ops.h), which main.c calls with them at
     * start-up: the CUDA runtime makes every cuDNN plan and sizes the one
     * workspace there. Named here, not called by main.c directly, so that
     * only a stage with convolutions links them (and, on CUDA, cuDNN).
     * 0 / NULL: none. */
    int nconvs;
    const struct pg_conv *convs;
    int (*conv_plan)(pg_ctx *c, int stage, int n, const struct pg_conv *g);
    /* 1: the step's activation, gradient and skip messages may be lent from
     * the arena (runtime/core/step.c: a slot's lent messages are waited for
     * before the next compute action of that slot): pipegen's simulation of
     * every stage with that wait finished (codegen/gen/gen_prepare.c). 0
     * (absent): each is copied into the send ring, as before. */
    int lend_sends;
    /* The weights this stage's GEMMs read as their B (linear layers, the
     * projections of attention and swiglu, the logits' table), as indices
     * into params: main.c names them to the backend (pg_gemm_weights_plan),
     * and the CPU runtime packs each once a step. 0 / NULL
     * (absent): none, every product packs its weight itself. */
    int ngemm_weights;
    const int *gemm_weights;
} pg_stage_desc;

#endif

/* runtime/core/pg_stage.h — the contract between a generated stage<k>.c and the
 * stage runtime (runtime/core/main.c, step.c).
 *
 * The generated file defines one `const pg_stage_desc pg_stage` holding
 * everything the runtime needs: the arena size, the parameter tables, the
 * per-chunk forward / backward-input / backward-weight functions, and the step
 * as a static action table whose SEND/RECV entries carry fixed arena offsets
 * and exact byte counts. The runtime owns the loop, data, network, optimizer.
 * The generated code only calls pg_ops.h and points into the arena, so it is
 * the same for the CPU and CUDA backends. */
#ifndef PG_STAGE_H
#define PG_STAGE_H

#include <stdint.h>
#include "pg_ops.h"

/* Action kinds: the same order as codegen/schedule.h's pg_act_kind. */
typedef enum pg_step_kind {
    PG_FWD, PG_BWD_B, PG_BWD_W,
    PG_SEND_ACT, PG_RECV_ACT, PG_SEND_GRAD, PG_RECV_GRAD,
    PG_SEND_SKIP, PG_RECV_SKIP, PG_SEND_SKIP_GRAD, PG_RECV_SKIP_GRAD,
    PG_TIE_REDUCE, PG_TIE_SEND, PG_TIE_RECV, PG_TIE_GRAD_SEND, PG_TIE_GRAD_RECV,
    PG_GRAD_NORM, PG_OPT_STEP,
    PG_STEP_KIND_COUNT
} pg_step_kind;

/* Message tags: (kind of the SEND << 24) | (mb << 8) | x, where x is the
 * sending chunk for activations/gradients and the skip index for skips. Both
 * ends compute it from the same formula, so a receive names what it expects. */
#define PG_TAG(send_kind, mb, x) \
    (((uint32_t)(send_kind) << 24) | (((uint32_t)(mb) & 0xffffu) << 8) | ((uint32_t)(x) & 0xffu))
#define PG_TAG_SAVE 30u      /* kind used for the final parameter gather */
#define PG_TAG_NORM 31u      /* kind used for the grad-norm exchange */

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
} pg_mb_io;

typedef int (*pg_chunk_fn)(pg_ctx *c, unsigned char *A, pg_mb_io *io);

typedef struct pg_chunk_desc {
    int chunk;
    pg_chunk_fn fwd, bwd_b, bwd_w;
} pg_chunk_desc;

/* One parameter. In a stage's own table the offsets are arena byte offsets
 * (-1 where a buffer does not exist); in the model table they are -1. */
typedef struct pg_param_desc {
    const char *name;        /* safetensors name, as in the .pipe */
    int index;               /* index in the model's parameter list (plan order) */
    int rank;
    int64_t dim[4];
    int64_t numel;
    int init;                /* ir_init numbering: 0 zeros, 1 ones, 2 uniform, 3 normal */
    double init_scale;
    int decay;               /* weight decay applies */
    int is_buffer;           /* not trained: no grad, no optimizer state */
    int tie;                 /* 0 none, 1 replicate, 2 transmit */
    int owner;               /* stage holding the master copy (lowest using stage) */
    uint64_t stage_mask;     /* stages using it */
    int64_t off, grad_off, opt_off[2];
    /* Appended: a parameter used by several layers gives each use its own
     * gradient accumulator, nacc [numel] buffers from grad_off in layer order,
     * acc_numel floats apart (numel rounded up to the plan's 256-byte
     * alignment; 0 reads as numel), nacc 0 reading as 1; their sum in layer
     * order, first into the first, is the gradient: the same float operations
     * for any stage count. stage_nacc[s] is stage s's nacc (NULL: 1 on each
     * using stage). A tie message carries n accumulators as one block of
     * (n - 1) * acc_numel + numel floats. */
    int nacc;
    const int *stage_nacc;
    int64_t acc_numel;
} pg_param_desc;

enum { PG_OPTIM_SGD = 0, PG_OPTIM_ADAMW = 1 };
enum { PG_LR_CONSTANT = 0, PG_LR_COSINE = 1 };
enum { PG_LOSS_MSE_SUM = 0, PG_LOSS_MSE_MEAN = 1, PG_LOSS_CROSS_ENTROPY = 2 };

typedef struct pg_train_desc {
    int64_t batch, microbatches, steps;
    int optimizer;                     /* PG_OPTIM_* */
    double lr, momentum, weight_decay, beta1, beta2, adam_eps;
    int lr_schedule;                   /* PG_LR_*: cosine = linear warm-up then cosine to lr_min over `steps` */
    int64_t warmup;
    double lr_min, grad_clip;
    uint64_t seed;
    int loss;                          /* PG_LOSS_* */
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

typedef struct pg_stage_desc {
    const char *pipegen_version;
    const char *model;
    const char *source;                /* the .pipe file name (no directories) */
    int stage, nstages, nchunks, nmb;
    uint64_t plan_hash;                /* FNV-1a 64 of plan.json without its hash line */
    int64_t arena_bytes;
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
    int input_dtype;                   /* 0 f32, 2 i32 */
    int input_rank;                    /* per-sample rank */
    int64_t input_dim[4];
    int64_t input_per_sample;          /* elements */
    int64_t input_vocab;               /* i32 input: ids in [0, vocab) for synthetic data */
    /* The stage holding the loss: the targets of the whole batch. */
    int has_loss;
    int64_t target_off;
    int target_dtype;
    int target_rank;
    int64_t target_dim[4];
    int64_t target_per_sample;
    int64_t target_vocab;

    const int64_t *send_bytes;         /* [nstages]: bytes sent to each peer in one step, plus the final gather */
    int64_t ws_off, ws_bytes;          /* workspace for tie reductions: one received gradient block */
    /* Appended (--generate): on the stage holding the last chunk, the model
     * output (logits) of activation slot s starts at output_off + s *
     * output_slot_bytes, output_per_sample elements per row; output_per_sample
     * is 0 on the other stages and in stage files generated before. */
    int64_t output_off, output_slot_bytes, output_per_sample;
    /* Appended (--profile): this stage's layers in chunk and layer order; 0 in
     * stage files generated before (the profile then lists chunks only). */
    int nlayers;
    const pg_layer_info *layers;
    /* Appended: train.precision, 0 f32 (the generator writes nothing then),
     * 1 bf16 (main.c passes it to pg_backend_set_precision). */
    int precision;
    /* Appended (`pipegen gen --guard-bytes N`): N free bytes precede the first
     * arena buffer and follow each; arena_bufs lists every buffer {off, bytes}
     * (narena_bufs of them), and main.c has a runtime built with AddressSanitizer
     * poison every other byte of the arena (pg_arena_guard). 0 / NULL otherwise,
     * and in stage files generated before. */
    int64_t guard_bytes;
    int narena_bufs;
    const pg_arena_buf *arena_bufs;
    /* Appended: bf16 shadows of this stage's GEMM weights, planned when
     * precision = bf16 (main.c registers them with pg_shadow_register); 0 /
     * NULL otherwise, and in stage files generated before. */
    int nshadows;
    const pg_shadow_desc *shadows;
    /* Appended: FNV-1a 64 of the model's input, target, layers and skips
     * without their chunks and stages (codegen/emit.c, model_arch_hash): equal
     * for every layout of one model. A checkpoint's model identity
     * (checkpoint.c) includes it; 0 in stage files generated before. */
    uint64_t arch_hash;
} pg_stage_desc;

/* Defined by the generated stage<k>.c. */
extern const pg_stage_desc pg_stage;

/* Generated code checks every op: `PG_TRY(pg_linear_fwd(...));` */
#define PG_TRY(call) do { int pg_rc_ = (call); if (pg_rc_) return pg_rc_; } while (0)

#endif

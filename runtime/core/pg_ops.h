/* runtime/core/pg_ops.h — the kernels the generated stage code calls.
 *
 * One interface, two backends: runtime/cpu (C, its own GEMM) and runtime/cuda
 * (CUDA kernels + cuBLAS). Pointers are backend memory (host on CPU, device on
 * CUDA), always inside the stage's arena. Every op returns 0 or a non-zero
 * error code after reporting `file:line: what` through pg_rt_error().
 *
 * Conventions
 *  - n is the number of rows the op works on: micro-batch rows times every
 *    per-sample dimension but the last (a [T, d] tensor of r rows has n = r*T).
 *  - Forward ops overwrite their outputs. Backward-input ops (_bwd_in)
 *    overwrite dx. Backward-weight ops (_bwd_w) ACCUMULATE (+=) into weight
 *    gradients, so gradients sum over micro-batches in the order the schedule
 *    calls them (index order): that order is what makes results bitwise equal
 *    across stage counts and schedules.
 *  - Every reduction has a fixed order: no float atomics, no thread-count-
 *    dependent splits of a reduction. Same inputs, same bits.
 *  - Weight layouts follow PyTorch: linear W is [out, in].
 */
#ifndef PG_OPS_H
#define PG_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pg_contract.h" /* pg_ctx, pg_arena_buf */
#include "pg_conv.h"     /* pg_conv: a convolution's or pooling window's geometry */

/* pg_ctx: the backend's state (BLAS handle/stream, thread count) */

/* Backend lifetime. threads <= 0: backend default. */
pg_ctx *pg_backend_init(int threads);
void pg_backend_free(pg_ctx *c);
const char *pg_backend_name(void);             /* "cpu" or "cuda" */
/* The arena: one allocation made at start-up (zeroed). NULL + message when it cannot. */
void *pg_arena_create(pg_ctx *c, size_t bytes);
void pg_arena_destroy(pg_ctx *c, void *arena);
/* pg_arena_buf: one buffer of the arena, [off, off + bytes). */
/* Right after pg_arena_create: on the CPU runtime built with AddressSanitizer,
 * every byte of the arena's first `bytes` outside the n buffers is poisoned, so
 * that an access into a gap between them (`pipegen gen --guard-bytes`) is
 * reported; otherwise (and on CUDA) nothing. n = 0: nothing. */
void pg_arena_guard(pg_ctx *c, void *arena, size_t bytes, const pg_arena_buf *bufs, int n);
/* Host <-> backend copies (identity memcpy on CPU). */
int pg_copy_to_dev(pg_ctx *c, void *dst, const void *src, size_t bytes);
int pg_copy_to_host(pg_ctx *c, void *dst, const void *src, size_t bytes);
int pg_sync(pg_ctx *c);

/* ---- the step: CUDA graphs, device-side per-step values -------------------
 * step.c (runtime/core) brackets each training step with step_begin/step_end
 * and each run of consecutive compute calls (the gradient zeroing, the FWD /
 * BWD_B / BWD_W actions between two messages, the optimizer) with
 * pg_backend_compute ... pg_backend_compute_end. The CPU backend does nothing
 * here (compute returns 0: make the calls; its ops write their results at
 * once, as outside a step). The CUDA backend (runtime/cuda/
 * step.cu) runs the first step eagerly, captures each run as a CUDA graph the
 * first time it is met after that and replays it from then on; the values a
 * captured op must not bake in (the learning rate, AdamW's step, a loss) live
 * in device memory, written here at step start or read back here. */
typedef struct pg_step_info {
    int64_t step;       /* 0-based training step */
    float lr;           /* the lr the optimizer ops get this step */
    float beta1, beta2; /* AdamW's betas as the optimizer ops get them (SGD: 0) */
    int graphs;         /* 1: the backend may capture and replay (0: --no-graph) */
} pg_step_info;
int pg_backend_step_begin(pg_ctx *c, const pg_step_info *s);
/* Before a compute call (or group of calls) of the run `seg` (an id the same
 * every step, unique within it). 0: make the calls; 1: the backend replayed
 * them already, skip them; -1: failed (printed). A backend may defer the
 * scalar ops (losses, pg_sumsq) inside a run: then their own `double *` is
 * not written and the value goes to `scalar_dst` (a host double that outlives
 * the step; NULL: dropped) by pg_backend_fetch at the latest, and its id
 * checks are reported by pg_backend_step_end. So the caller copies the op's
 * result to scalar_dst right after the call (what a non-deferring backend
 * needs) and reads scalar_dst only after pg_backend_fetch. */
int pg_backend_compute(pg_ctx *c, int seg, double *scalar_dst);
int pg_backend_compute_end(pg_ctx *c);        /* the run is over (0 or 1) */
int pg_backend_fetch(pg_ctx *c);              /* deliver deferred scalars now (synchronises) */
int pg_backend_step_end(pg_ctx *c);           /* wait for the step, deliver, report id errors */
/* ---- device time ------------------------------------------------------------
 * On a backend whose work runs on a device (CUDA) the host only enqueues it,
 * so host clocks time the enqueueing. There step.c times the stage by marks
 * on the device's own clock: pg_backend_mark (inside a step, never inside a
 * run of compute) records a mark on the stage's stream after all work
 * enqueued so far and returns its number in the step (0, 1, ...; -1: failed,
 * printed); run_start 1 says that a run of compute opens right after it
 * (pg_backend_compute, nothing enqueued between): if that run is then
 * captured as a CUDA graph, the mark moves to the graph's launch (capturing
 * is host work). After pg_backend_step_end has waited for the step,
 * pg_backend_mark_times writes when the device reached each of the step's
 * first n marks, in seconds from mark 0, without waiting again (0, or 1
 * printed). pg_backend_device_clock is 0 on the CPU (its ops run at the
 * call: step.c times them on the host and never marks) and 1 on CUDA. */
int pg_backend_device_clock(const pg_ctx *c);
int pg_backend_mark(pg_ctx *c, int run_start);
int pg_backend_mark_times(pg_ctx *c, double *sec, int n);
/* train.precision: 0 f32, 1 bf16 (GEMM operands in bf16, f32 accumulation,
 * f32 weights and gradients on CUDA; the CPU computes in f32 and says so). */
int pg_backend_set_precision(pg_ctx *c, int precision);
/* The stage's convolution geometries (pg_stage_desc.convs), at start-up: the
 * CUDA runtime makes each one's cuDNN plan (descriptors, three deterministic
 * algorithms, their workspace), sizes the one workspace for the largest and
 * says so on stderr, so no step plans or allocates (a captured one
 * included); the CPU runtime has nothing to plan (its column workspace is in
 * the arena) and checks them. The generated table names it (conv_plan). */
int pg_conv_plan(pg_ctx *c, int stage, int n, const pg_conv *g);
/* 1 when work queued on the device waits for something that will never come
 * (a peer died with its message in flight): from then on the backend neither
 * synchronises nor frees device memory (pg_arena_destroy and pg_backend_free
 * only drop host state), and the process should leave with _exit() rather
 * than through exit handlers that might wait for the device. Always 0 on the
 * CPU. Ask before pg_backend_free. */
int pg_backend_poisoned(const pg_ctx *c);
/* After training, one line about the backend on `out` prefixed with "stage K: "
 * (CUDA: graphs captured and launched, the arena against the device memory
 * the process used at its peak); nothing on the CPU. */
void pg_backend_report(pg_ctx *c, int stage, int64_t arena_bytes, FILE *out);

/* ---- bf16 shadow weights --------------------------------------------------
 * With precision = bf16 the generator plans, for each weight a GEMM reads
 * (linear, attention and logits weights), a bf16 copy of it in the arena
 * (pg_stage_desc.shadows), and main.c registers each right after the arena
 * is made. The CUDA backend keeps shadow = bf16(w) (round to nearest even):
 * it rounds w when registered and after any pg_copy_to_dev into w, the
 * optimizer steps write the shadow along with w, and pg_param_written says
 * that something else (a tied weight received from its owner) wrote w. Its
 * bf16 GEMMs then read the shadow instead of rounding w again. The CPU
 * computes in f32: both are no-ops there. */
int pg_shadow_register(pg_ctx *c, const float *w, int64_t count, void *shadow);
int pg_param_written(pg_ctx *c, const float *w, int64_t count);
/* The arena buffer the plan reserved for the bf16 GEMMs' operand copies
 * (pg_stage_desc.bf16_ws_off, runtime/core/pg_bf16ws.h): the CUDA backend
 * rounds the operands into it instead of memory of its own; unused on the
 * CPU. */
int pg_bf16_workspace(pg_ctx *c, void *p, int64_t bytes);

/* ---- the GEMM weights ------------------------------------------------------
 * The weights the stage's GEMMs read as their B (pg_stage_desc.gemm_weights),
 * named once at start-up, right after the arena. The CPU backend reserves a
 * copy of each packed for its GEMM, both ways a layer reads it (x W^T and dy
 * W), packs it at its first use after each write (so once a step: the
 * optimizer writes it) and says on `out` (NULL: nowhere) what it reserved;
 * every write into a weight must go through the backend
 * (pg_copy_to_dev, the optimizer steps, pg_copy, pg_zero, or pg_param_written
 * for what arrives from the network), as it must for CUDA's bf16 shadows.
 * CUDA: nothing to do (cuBLAS reads W as it lies). */
typedef struct pg_gemm_weight {
    const char *name;   /* the parameter's name, for messages */
    const float *w;     /* [rows, cols] as the layer holds it: W [out, in] */
    int64_t rows, cols;
} pg_gemm_weight;
int pg_gemm_weights_plan(pg_ctx *c, int stage, int n, const pg_gemm_weight *w, FILE *out);

/* ---- elementwise / memory ---------------------------------------------- */
int pg_zero(pg_ctx *c, float *x, int64_t count);
int pg_copy(pg_ctx *c, float *dst, const float *src, int64_t count);
int pg_axpy_inplace(pg_ctx *c, float *y, const float *x, int64_t count); /* y += x */

/* ---- linear: y[n,out] = x[n,in] W[out,in]^T + b[out] --------------------- */
int pg_linear_fwd(pg_ctx *c, int64_t n, int64_t in, int64_t out,
                  const float *x, const float *w, const float *b /*NULL: no bias*/, float *y);
int pg_linear_bwd_in(pg_ctx *c, int64_t n, int64_t in, int64_t out,
                     const float *dy, const float *w, float *dx);          /* dx = dy W */
int pg_linear_bwd_w(pg_ctx *c, int64_t n, int64_t in, int64_t out,
                    const float *x, const float *dy, float *dw, float *db /*NULL*/); /* dw += dy^T x; db += sum dy */
/* dx += dy W: a second projection's share of one input's gradient (attention's k, v) */
int pg_linear_bwd_in_add(pg_ctx *c, int64_t n, int64_t in, int64_t out,
                         const float *dy, const float *w, float *dx);

/* ---- linear with the elementwise activation beside it -------------------
 * An activation's forward and backward-input ops (pg_relu_fwd, pg_gelu_fwd,
 * pg_sigmoid_fwd, pg_tanh_fwd, pg_silu_fwd; their _bwd_in), named in the
 * fused calls below. Each gives the bits of the two separate calls (the
 * activations are elementwise, an element's bits its own): the CPU applies
 * act to each strip of the product while it is in cache (one pass over
 * memory fewer); CUDA makes the two calls. */
typedef int pg_act_fwd_fn(pg_ctx *c, int64_t count, const float *x, float *y);
typedef int pg_act_bwd_fn(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx);
/* s = x W^T + b (pg_linear_fwd), then y = act(s) */
int pg_linear_act_fwd(pg_ctx *c, pg_act_fwd_fn *act, int64_t n, int64_t in, int64_t out, const float *x,
                      const float *w, const float *b /*NULL*/, float *s, float *y);
/* g = dy W (pg_linear_bwd_in), then dx = act's backward at s applied to g:
 * the linear after the activation whose input s was */
int pg_linear_bwd_in_act(pg_ctx *c, pg_act_bwd_fn *act, int64_t n, int64_t in, int64_t out, const float *dy,
                         const float *w, const float *s, float *g, float *dx);

/* ---- activations --------------------------------------------------------- */
int pg_relu_fwd(pg_ctx *c, int64_t count, const float *x, float *y);
int pg_relu_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx);
int pg_gelu_fwd(pg_ctx *c, int64_t count, const float *x, float *y);      /* tanh form */
int pg_gelu_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx);

/* ---- layernorm over the last dim d; saves mean[n], rstd[n] --------------- */
int pg_layernorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x,
                     const float *w, const float *b, float *y, float *mean, float *rstd);
int pg_layernorm_bwd_in(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w,
                        const float *mean, const float *rstd, const float *dy, float *dx);
int pg_layernorm_bwd_w(pg_ctx *c, int64_t n, int64_t d, const float *x,
                       const float *mean, const float *rstd, const float *dy, float *dw, float *db);
/* The residual add beside a norm, in the same pass over the rows (the bits of
 * the separate calls): z = x + s (pg_add_fwd), then the norm of z; and the
 * norm's input gradient plus a skip's gradient ds (pg_axpy_inplace after it). */
int pg_add_layernorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x, const float *s, float *z,
                         const float *w, const float *b, float *y, float *mean, float *rstd);
int pg_layernorm_bwd_in_add(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w, const float *mean,
                            const float *rstd, const float *dy, const float *ds, float *dx);

/* ---- batchnorm over n rows per feature (C features) ---------------------
 * Training output uses this micro-batch's statistics (as torchgpipe's deferred
 * batch norm does); mean/var of the micro-batch are saved for backward and for
 * the deferred running-stat update. */
int pg_batchnorm_fwd(pg_ctx *c, int64_t n, int64_t C, float eps, const float *x,
                     const float *w, const float *b, float *y, float *mean, float *rstd);
int pg_batchnorm_bwd_in(pg_ctx *c, int64_t n, int64_t C, const float *x, const float *w,
                        const float *mean, const float *rstd, const float *dy, float *dx);
int pg_batchnorm_bwd_w(pg_ctx *c, int64_t n, int64_t C, const float *x,
                       const float *mean, const float *rstd, const float *dy, float *dw, float *db);
/* Inference (the stage's --generate): y = (x - run_mean) / sqrt(run_var + eps)
 * w + b per feature, in double, rounded once; nothing is updated. w, b may be
 * NULL (no affine). */
int pg_batchnorm_eval_fwd(pg_ctx *c, int64_t n, int64_t C, float eps, const float *x, const float *w,
                          const float *b, const float *run_mean, const float *run_var, float *y);
/* Running stats from per-micro-batch sums: sum[C], sumsq[C] accumulated over all
 * micro-batches of the step in index order (pg_batchnorm_stats_acc), then one
 * update with the whole batch's count, equal to BatchNorm1d on the whole batch. */
int pg_batchnorm_stats_acc(pg_ctx *c, int64_t n, int64_t C, const float *x, double *sum, double *sumsq);
int pg_batchnorm_running_update(pg_ctx *c, int64_t total_n, int64_t C, float momentum,
                                const double *sum, const double *sumsq, float *run_mean, float *run_var);
/* Data-parallel replicas (runtime/core/dp.c): deferred batch norm calls this
 * just before its running update, and the stats hook (when one is set) sums
 * sum[C] and sumsq[C] over the replicas in place, so the running statistics
 * are the whole global batch's. With a hook set, a running update that did
 * not follow this call (batch norm without `deferred`, whose statistics
 * would differ between the replicas) fails. No hook: nothing happens. */
typedef int (*pg_stats_reduce_fn)(void *arg, double *sum, double *sumsq, int64_t C);
int pg_backend_set_stats_reduce(pg_ctx *c, pg_stats_reduce_fn fn, void *arg);
int pg_batchnorm_stats_reduce(pg_ctx *c, int64_t C, double *sum, double *sumsq);

/* ---- embeddings ----------------------------------------------------------- */
/* y[n,d] = table[ids[i]]; ids checked < vocab (error names the bad id). */
int pg_embed_fwd(pg_ctx *c, int64_t n, int64_t vocab, int64_t d, const int32_t *ids,
                 const float *table, float *y);
int pg_embed_bwd_w(pg_ctx *c, int64_t n, int64_t vocab, int64_t d, const int32_t *ids,
                   const float *dy, float *dtable); /* rows in index order */
/* y[r,T,d] = x + table[T,d] for each of r rows. */
int pg_pos_embed_fwd(pg_ctx *c, int64_t r, int64_t T, int64_t d, const float *x,
                     const float *table, float *y);
int pg_pos_embed_bwd_w(pg_ctx *c, int64_t r, int64_t T, int64_t d, const float *dy, float *dtable);

/* ---- logits by a table transposed: y[n,V] = x[n,d] table[V,d]^T --------- */
int pg_logits_fwd(pg_ctx *c, int64_t n, int64_t d, int64_t V, const float *x, const float *table, float *y);
int pg_logits_bwd_in(pg_ctx *c, int64_t n, int64_t d, int64_t V, const float *dy, const float *table, float *dx);
int pg_logits_bwd_w(pg_ctx *c, int64_t n, int64_t d, int64_t V, const float *x, const float *dy, float *dtable);

/* ---- attention: x[r,T,d], heads h ----------------------------------------
 * Saved for backward: qkv[r,T,3d], att[r,h,T,T] (softmax probs), ctx[r,T,d]
 * (heads merged, before the output projection). bwd_in also leaves dqkv[r,T,3d]
 * and dctx for bwd_w. A backend may keep something else in att (the CUDA
 * runtime's fused bf16 attention keeps the log-sum-exp of each score row
 * there, and reads ctx in bwd_in); only that backend's bwd_in reads it. */
int pg_attention_fwd(pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal,
                     const float *x, const float *wqkv, const float *bqkv,
                     const float *wo, const float *bo,
                     float *qkv, float *att, float *ctxbuf, float *y);
int pg_attention_bwd_in(pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal,
                        const float *wqkv, const float *wo,
                        const float *qkv, const float *att, const float *ctxbuf, const float *dy,
                        float *dctx, float *dqkv, float *dx);
int pg_attention_bwd_w(pg_ctx *c, int64_t r, int64_t T, int64_t d,
                       const float *x, const float *ctxbuf, const float *dy, const float *dqkv,
                       float *dwqkv, float *dbqkv, float *dwo, float *dbo);

/* ---- attention's core over projected q, k, v: grouped-query heads, rotary
 * positions, dropout on the probabilities. q[r,T,*] has `heads` heads of hd
 * columns in each row of ldq floats (head i: columns [i hd, (i+1) hd)); k and
 * v have kv_heads heads (rows of ldk, ldv), and query head i reads key/value
 * head i / (heads / kv_heads). With rope_theta > 0 the forward first rotates q
 * and k in place as Llama does (the half split: for j < hd/2, the pair (j, j +
 * hd/2) of position t turns by t * theta^(-2j/hd), that inverse frequency,
 * the angle and its cos and sin in float as transformers computes them), so
 * q and k stay rotated for the backward. att[r,h,T,T] keeps the softmax
 * probabilities P (before dropout); ctx[r,T,heads*hd] = drop(P) v with
 * pg_dropout_fwd's masks (p, seed, first_sample; the element of a sample is
 * (head * T + i) * T + j); p = 0: no dropout. The backward writes dq, dk, dv
 * (rows of ldq, ldk, ldv) with respect to the unrotated q and k: ready for
 * the projections' gradients. */
typedef struct pg_attn_dims {
    int64_t T, heads, kv_heads, hd;
    int causal;
    float rope_theta;           /* 0: no rotary embedding */
    int64_t ldq, ldk, ldv;      /* row strides of q, k, v and of dq, dk, dv */
} pg_attn_dims;
int pg_attn_fwd(pg_ctx *c, int64_t r, const pg_attn_dims *s, float p, uint64_t seed, int64_t first_sample,
                float *q, float *k, const float *v, float *att, float *ctx);
int pg_attn_bwd(pg_ctx *c, int64_t r, const pg_attn_dims *s, float p, uint64_t seed, int64_t first_sample,
                const float *q, const float *k, const float *v, const float *att, const float *dctx,
                float *dq, float *dk, float *dv);

/* ---- generation with the KV cache (runtime/core/decode.c) ----------------
 * A decode call works on t new positions of each of `seqs` sequences, r =
 * seqs x t token rows, and the call's row table rows[seqs][4] (pg_contract.h:
 * the sequence's cache row, its first new position p, its real new positions
 * n <= t, flags); a sequence's positions j >= n pad its rows to t.
 * pos_embed_dec: y = x + table[p + j] at the real positions (p + n <= seq,
 * the table's rows), y = x at the pads; y may alias x.
 * attn_decode: the attention core of those positions over each sequence's
 * keys and values so far. q, k, v [r, *] as pg_attn_fwd's (rows of ldq, ldk,
 * ldv); kc, vc [batch, s->T, kv_heads * hd]: cache row b holds sequence b's
 * keys and values by position (s->T positions; s->causal must be 1). First
 * every real new position's q and k are rotated at its position (rope), and
 * its k and v written at that position of its sequence's cache row; then
 * position p + j attends to the cache's positions 0 .. p + j: ctx [r, heads *
 * hd], 0 at the pads. These are, bit for bit, the scores, softmax and sums
 * pg_attn_fwd computes at those positions of the whole sequence (its terms
 * past a position are zeros). */
int pg_pos_embed_dec(pg_ctx *c, int64_t seqs, int64_t t, int64_t seq, int64_t d, const int32_t *rows,
                     const float *x, const float *table, float *y);
int pg_attn_decode(pg_ctx *c, int64_t seqs, int64_t t, int64_t batch, const pg_attn_dims *s, const int32_t *rows,
                   float *q, float *k, const float *v, float *kc, float *vc, float *ctx);

/* ---- rmsnorm over the last dim d (Llama's LlamaRMSNorm): y = x rstd w with
 * rstd = 1/sqrt(mean(x^2) + eps) saved [n]; w may be NULL (no scale). */
int pg_rmsnorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x, const float *w,
                   float *y, float *rstd);
int pg_rmsnorm_bwd_in(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w,
                      const float *rstd, const float *dy, float *dx);
int pg_rmsnorm_bwd_w(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *rstd,
                     const float *dy, float *dw);          /* dw += sum_rows dy x rstd */
/* with the residual add beside it, as pg_add_layernorm_fwd and pg_layernorm_bwd_in_add */
int pg_add_rmsnorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x, const float *s, float *z,
                       const float *w, float *y, float *rstd);
int pg_rmsnorm_bwd_in_add(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w, const float *rstd,
                          const float *dy, const float *ds, float *dx);

/* ---- swiglu: g = x Wg^T + bg, u = x Wu^T + bu (both [n, h], saved),
 * y = silu(g) u. The backward-input leaves dg = dy u silu'(g) and du = dy
 * silu(g) for the backward-weight; dx = dg Wg + du Wu (NULL: not wanted).
 * Biases may be NULL. */
int pg_swiglu_fwd(pg_ctx *c, int64_t n, int64_t d, int64_t h, const float *x,
                  const float *wg, const float *bg, const float *wu, const float *bu,
                  float *g, float *u, float *y);
int pg_swiglu_bwd_in(pg_ctx *c, int64_t n, int64_t d, int64_t h, const float *wg, const float *wu,
                     const float *g, const float *u, const float *dy, float *dg, float *du, float *dx);
int pg_swiglu_bwd_w(pg_ctx *c, int64_t n, int64_t d, int64_t h, const float *x, const float *dg,
                    const float *du, float *dwg, float *dbg, float *dwu, float *dbu);

/* ---- dropout: keep with prob 1-p, scaled 1/(1-p); mask from a counter hash of
 * (seed, sample index within the whole batch, element index), never from state. */
int pg_dropout_fwd(pg_ctx *c, int64_t rows, int64_t per_row, float p, uint64_t seed,
                   int64_t first_sample, const float *x, float *y);
int pg_dropout_bwd_in(pg_ctx *c, int64_t rows, int64_t per_row, float p, uint64_t seed,
                      int64_t first_sample, const float *dy, float *dx);

/* ---- skips ---------------------------------------------------------------- */
int pg_add_fwd(pg_ctx *c, int64_t count, const float *x, const float *s, float *y);
/* concat: y[n, a+b] = [x[n,a], s[n,b]]; backward splits dy. Along per-sample
 * dim k of the tensors: n = rows times the dims before k, a and b the rest. */
int pg_concat_fwd(pg_ctx *c, int64_t n, int64_t a, int64_t b, const float *x, const float *s, float *y);
int pg_concat_bwd(pg_ctx *c, int64_t n, int64_t a, int64_t b, const float *dy, float *dx, float *ds);

/* ---- convolutional networks ----------------------------------------------
 * Per-sample tensors are channel-first (PyTorch's layout): x [r, C, H, W] is r
 * samples of C planes of H x W, row-major. A convolution's or pooling window's
 * shape is a pg_conv (pg_conv.h), which the generated code passes as a
 * constant; its weights are laid out as PyTorch's modules' (conv [out, in /
 * groups, kh, kw], conv_transpose [in, out / groups, kh, kw], bias [out]).
 * ws is the layer's workspace in the arena, pg_conv_ws_floats(g) floats (NULL
 * when 0), planned for this op alone: nothing lives in it between calls, and
 * a backend that needs none (or its own, sized at start-up) ignores it.
 * Every output element is computed whole by one thread in a fixed order;
 * weight gradients add each sample's sum into dw in sample order. */
int pg_conv2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *w,
                  const float *b /*NULL: no bias*/, float *y, float *ws);
int pg_conv2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *dy, const float *w, float *dx,
                     float *ws);                                                  /* dx = conv2d's gradient */
int pg_conv2d_bwd_w(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *dy, float *dw,
                    float *db /*NULL*/, float *ws);                               /* dw += ..; db += sums of dy */
/* conv_transpose2d (g->transposed): the adjoint of conv2d with the same window */
int pg_conv_transpose2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *w,
                            const float *b /*NULL*/, float *y, float *ws);
int pg_conv_transpose2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *dy, const float *w,
                               float *dx, float *ws);
int pg_conv_transpose2d_bwd_w(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *dy,
                              float *dw, float *db /*NULL*/, float *ws);
/* Pooling over g's window (g->in == g->out channels, dilation 1). maxpool:
 * padding counts as -inf, the first largest value of a window (in row-major
 * window order) takes its gradient; the backward finds it again in x.
 * avgpool: divided by kh * kw, padding included (count_include_pad). */
int pg_maxpool2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, float *y);
int pg_maxpool2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *dy, float *dx);
int pg_avgpool2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, float *y);
int pg_avgpool2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *dy, float *dx);
/* upsample of n planes [h, w] by an integer scale: nearest, or bilinear with
 * align_corners false (PyTorch's nn.Upsample); y [n, h scale, w scale]. */
int pg_upsample_fwd(pg_ctx *c, int64_t n, int64_t h, int64_t w, int64_t scale, int bilinear, const float *x,
                    float *y);
int pg_upsample_bwd_in(pg_ctx *c, int64_t n, int64_t h, int64_t w, int64_t scale, int bilinear, const float *dy,
                       float *dx);
/* mean over the middle dim of x [outer, d, inner]: y [outer, inner] (in
 * double, d in index order). global_avgpool is the mean of [r * C, H * W, 1]. */
int pg_mean_fwd(pg_ctx *c, int64_t outer, int64_t d, int64_t inner, const float *x, float *y);
int pg_mean_bwd_in(pg_ctx *c, int64_t outer, int64_t d, int64_t inner, const float *dy, float *dx);
/* y [outer, b, mid, a, inner] = x [outer, a, mid, b, inner] with dims a and b
 * swapped (transpose(i, j) of the per-sample dims); its own backward with a
 * and b exchanged. flatten and reshape are pg_copy. */
int pg_swap_dims(pg_ctx *c, int64_t outer, int64_t a, int64_t mid, int64_t b, int64_t inner, const float *x,
                 float *y);
/* batchnorm2d: per channel of x [r, C, hw] over its r * hw values, otherwise
 * as the batchnorm ops above (mean and rstd [C] saved; the running update is
 * pg_batchnorm_running_update with total_n = batch * hw). */
int pg_batchnorm2d_fwd(pg_ctx *c, int64_t r, int64_t C, int64_t hw, float eps, const float *x, const float *w,
                       const float *b, float *y, float *mean, float *rstd);
int pg_batchnorm2d_bwd_in(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, const float *w,
                          const float *mean, const float *rstd, const float *dy, float *dx);
int pg_batchnorm2d_bwd_w(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, const float *mean,
                         const float *rstd, const float *dy, float *dw, float *db);
int pg_batchnorm2d_eval_fwd(pg_ctx *c, int64_t r, int64_t C, int64_t hw, float eps, const float *x, const float *w,
                            const float *b, const float *run_mean, const float *run_var, float *y);
int pg_batchnorm2d_stats_acc(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, double *sum,
                             double *sumsq);
/* sigmoid, tanh, silu (x sigmoid(x)): elementwise; the backward reads x */
int pg_sigmoid_fwd(pg_ctx *c, int64_t count, const float *x, float *y);
int pg_sigmoid_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx);
int pg_tanh_fwd(pg_ctx *c, int64_t count, const float *x, float *y);
int pg_tanh_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx);
int pg_silu_fwd(pg_ctx *c, int64_t count, const float *x, float *y);
int pg_silu_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx);

/* ---- losses: value and gradient in one pass ------------------------------
 * The loss of the whole batch is the sum over micro-batches of these partial
 * losses, so each is already divided by the WHOLE batch's normaliser `denom`
 * (mse(sum): 1; mse(mean): batch*features; cross_entropy: batch*positions).
 * *loss receives this micro-batch's partial loss (summed rows in index order, double). */
int pg_mse_fwd_bwd(pg_ctx *c, int64_t count, const float *y, const float *target,
                   double denom, double *loss, float *dy);
int pg_cross_entropy_fwd_bwd(pg_ctx *c, int64_t n, int64_t V, const float *logits,
                             const int32_t *target, double denom, double *loss, float *dlogits);
/* cross_entropy(ignore = id): rows whose target is `ignore` add nothing to the
 * loss and get a zero gradient; the others are divided by *count (backend
 * memory: the number of target positions of the whole batch that count, which
 * the runtime writes before each step); a count of 0 makes the loss and every
 * gradient 0. */
int pg_cross_entropy_ignore_fwd_bwd(pg_ctx *c, int64_t n, int64_t V, const float *logits,
                                    const int32_t *target, int32_t ignore, const double *count,
                                    double *loss, float *dlogits);

/* ---- optimizers (one parameter tensor at a time) ------------------------- */
/* Sum of squares of g in a fixed order (for global-norm clipping). */
int pg_sumsq(pg_ctx *c, int64_t count, const float *g, double *out);
int pg_scale(pg_ctx *c, float *x, float a, int64_t count);
/* PyTorch SGD: g += wd*w; buf = momentum*buf + g (buf = g on the first step); w -= lr*buf */
int pg_sgd_step(pg_ctx *c, int64_t count, float *w, const float *g, float *buf,
                float lr, float momentum, float weight_decay, int first_step);
/* PyTorch AdamW: w *= 1 - lr*wd; m,v moments; bias correction with step t (1-based). */
int pg_adamw_step(pg_ctx *c, int64_t count, float *w, const float *g, float *m, float *v,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t);

/* ---- parameter init (host side, before upload): deterministic from
 * (name, seed) only, so every stage that holds a copy makes the same bits. */
void pg_init_param(float *dst, int64_t count, int init_kind, double scale,
                   const char *name, uint64_t seed);

/* Error reporting used by every backend. */
void pg_rt_error(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define PG_RT_FAIL(...) (pg_rt_error(__FILE__, __LINE__, __VA_ARGS__), 1)

#endif

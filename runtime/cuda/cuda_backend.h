/* runtime/cuda/cuda_backend.h — what the CUDA stage runtime adds to pg_ops.h,
 * callable from C (runtime/core) and CUDA files alike.
 *
 * The process context. pg_net_init takes no pg_ctx (pg_net.h is shared with
 * the CPU build and stays unchanged), yet the CUDA transport must enqueue its
 * copies and NCCL calls on the backend's stream. pg_backend_init therefore
 * records the context it made in one process-wide slot that
 * pg_cuda_process_ctx returns (pg_backend_free clears it). This is the only
 * process-wide state of the CUDA runtime; it is acceptable because a stage
 * process has exactly one backend (main.c calls pg_backend_init once, before
 * pg_net_init, and frees it after pg_net_close). A second live context
 * replaces the slot (tests that make several see the newest).
 *
 * CUDA graphs (graph.cu): capture the step's work on the context's stream
 * once, then replay it each step. Nothing may synchronise the stream or read
 * device memory back while capturing; step.cu drives them from the step
 * hooks of pg_ops.h (runtime/cuda/README.md, "CUDA graphs"). */
#ifndef PG_CUDA_BACKEND_H
#define PG_CUDA_BACKEND_H

#include "pg_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The context pg_backend_init made in this process, NULL if none is live. */
pg_ctx *pg_cuda_process_ctx(void);

/* The transport left work on c's stream waiting for a peer that is gone
 * (why: a static string for messages): from now on c is never synchronised and
 * its device memory never freed (pg_backend_poisoned; process exit frees it). */
void pg_cuda_poison(pg_ctx *c, const char *why);
/* Kernel paths (runtime/cuda/README.md, "Kernel paths"): a mask of the fast
 * paths in use; pg_backend_init takes it from PIPE_CUDA_KERNELS (default:
 * all). Each can be turned off for the reference path it replaced, so the GPU
 * tests compare the two. A fused attention's backward must run under the
 * paths its forward ran under (what the forward saves in `att` differs). */
enum {
    PG_CUDA_K_COLSUM = 1u << 0, /* chunked column sums: bias, layernorm, batchnorm weight gradients */
    PG_CUDA_K_PAD = 1u << 1,    /* bf16 operand copies with an unaligned leading dimension padded */
    PG_CUDA_K_SHADOW = 1u << 2, /* bf16 shadow weights, written by the optimizer step */
    PG_CUDA_K_FLASH = 1u << 3,  /* fused attention (bf16 precision, head dim <= 64) */
    PG_CUDA_K_LT = 1u << 4,     /* cuBLASLt: the bias added in the bf16 GEMM's epilogue */
    PG_CUDA_K_MSPLIT = 1u << 5, /* a bf16 GEMM with m not a multiple of 8: the aligned m & ~7 rows, then the rest */
    PG_CUDA_K_ALL = (1u << 6) - 1
};
#define PG_CUDA_NKPATHS 6 /* the PG_CUDA_K_* bits */
unsigned pg_cuda_kernel_paths(const pg_ctx *c);
void pg_cuda_set_kernel_paths(pg_ctx *c, unsigned paths);
/* How many GEMM shapes cuBLASLt has offered a bias-epilogue algorithm for so
 * far (the others ran the reference path): the GPU tests check it is used. */
int pg_cuda_lt_shapes(const pg_ctx *c);

typedef struct pg_cuda_graph pg_cuda_graph;

/* Start capturing every op enqueued on c's stream (thread-local capture mode:
 * other threads' CUDA calls are unaffected). 0 or 1 after pg_rt_error. */
int pg_cuda_graph_begin(pg_ctx *c);
/* Stop capturing and instantiate what was captured: *out is a graph to launch
 * any number of times (free it with pg_cuda_graph_free). On failure (e.g. a
 * captured op synchronised) *out is NULL, the capture is ended and 1 is
 * returned after pg_rt_error naming the cause. */
int pg_cuda_graph_end(pg_ctx *c, pg_cuda_graph **out);
/* Enqueue one replay on c's stream (asynchronous, like the ops). */
int pg_cuda_graph_launch(pg_ctx *c, pg_cuda_graph *g);
void pg_cuda_graph_free(pg_cuda_graph *g);

#ifdef __cplusplus
}
#endif

#endif

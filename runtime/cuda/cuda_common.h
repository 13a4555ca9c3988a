/* runtime/cuda/cuda_common.h — what every CUDA kernel file shares (not part of
 * the pg_ops.h contract): the backend context, located error checks for every
 * CUDA/cuBLAS call and launch, launch geometry, the scratch buffer, and the
 * counter hash dropout uses.
 *
 * Determinism: every reduction in runtime/cuda has a fixed order that depends
 * only on the sizes of the op (never on the device, the SM count or timing):
 * either one thread walks its rows in index order, or a fixed-size block
 * (PG_CUDA_RED_THREADS) does strided partial sums and a fixed tree. No float
 * atomics anywhere. cuBLAS runs with atomics disallowed on one stream. */
#ifndef PG_CUDA_COMMON_H
#define PG_CUDA_COMMON_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "pg_ops.h"
}
#include "hstage.h"
#include "cuda_backend.h" /* PG_CUDA_K_*: the kernel paths */
#include "launch_geom.h"  /* every launch's grid and block, plain C (tests/cuda_geom.t) */

/* The per-step values captured ops read from device memory (step.cu writes
 * them at step start from pg_step_info, with the host formulas of optim.cu). */
struct pg_cuda_stepvals {
    double lr;       /* (double) of the step's float lr: AdamW decay 1 - lr*wd, SGD's lr */
    float neg_step;  /* AdamW: (float)-(lr / (1 - beta1^t)) */
    float bc2_sqrt;  /* AdamW: (float)sqrt(1 - beta2^t) */
    int first_step;  /* SGD: step == 0 */
    int pad;
};

/* A deferred scalar (step.cu): device slot k is delivered to dst as
 * div != 0 ? raw / div : raw * mul, the host formula of the op. */
struct pg_cuda_slot {
    double *dst;
    double mul, div;
};

/* An id check inside a run (step.cu): reported at the end of the step. */
struct pg_cuda_site {
    const char *op, *what, *range_what, *hint;
    int64_t n, limit;
    const int32_t *ids;
};

struct pg_cuda_graph;
struct pg_cuda_seg {        /* a captured run of compute: its id, graph, call count */
    int id, calls;
    struct pg_cuda_graph *g;
};

#define PG_CUDA_BLAS_WS ((size_t)32 << 20) /* cuBLAS workspace: 32 MiB (NVIDIA's advice for Hopper) */

/* A cuBLASLt algorithm chosen once per GEMM shape (linear.cu, the bias
 * epilogue): key = {transa, transb, m, n, k, lda, ldb, ldc}; ok 0: cuBLASLt
 * offered none, the reference path runs instead. */
#define PG_CUDA_LT_PLANS 64
struct pg_cuda_lt_plan {
    int key[8];
    int ok;
    cublasLtMatmulAlgo_t algo;
};

/* A bf16 shadow of an f32 weight (shadow.cu): shadow[i] = bf16(w[i]). */
struct pg_cuda_shadow {
    const float *w;
    void *shadow;
    int64_t count;
};
#define PG_CUDA_SLOTS 8192  /* deferred scalars per stage (slot 0: dropped values): the losses and a sum of squares per gradient */
#define PG_CUDA_SITES 1024  /* id-check sites per stage */

/* The backend state behind pg_ctx (runtime/cuda/backend.cu owns its lifetime). */
/* the kinds of device memory the runtime allocates beside the arena (pg_backend_report) */
enum { PG_CUDA_OWN_BLAS, PG_CUDA_OWN_SCRATCH, PG_CUDA_OWN_BF16, PG_CUDA_OWN_LINKS, PG_CUDA_OWN_REPLICAS,
       PG_CUDA_OWN_STATE, PG_CUDA_NOWN };

struct pg_ctx {
    int device;               /* the CUDA device this stage runs on */
    cudaStream_t stream;      /* every kernel, copy and cuBLAS call goes here, in order */
    cublasHandle_t blas;      /* bound to stream */
    void *scratch;            /* device workspace for multi-pass ops (attention, losses) */
    size_t scratch_bytes;     /* its size; grows on first need, then stays */
    unsigned long long *flag; /* device: first bad row of an id check (ULLONG_MAX: none) */
    double *host_ret;         /* pinned host: scalars read back (loss, sumsq) */
    /* precision (linear.cu) */
    int precision;            /* 0 f32 (cublasSgemm), 1 bf16 operands (cublasGemmEx, f32 accumulation) */
    void *blas_ws;            /* cuBLAS workspace, fixed at init (no allocation while capturing) */
    void *bf16_plan;          /* bf16 copies of GEMM operands: the arena buffer the plan reserved */
    size_t bf16_plan_bytes;   /* (pg_bf16_workspace; 0: none planned) */
    size_t bf16_need_max;     /* the most one product's copies took (the report) */
    void *bf16_ws;            /* ... or, past it (or unplanned), memory of our own: grows on first need, then stays */
    size_t bf16_ws_bytes;
    unsigned kpaths;          /* PG_CUDA_K_* fast kernel paths in use (the rest: reference paths) */
    /* how often each fast path (bit k of PG_CUDA_K_*: kp_calls[k]) and a bf16
     * GEMM ran, as the host called them (a graph replay repeats its calls
     * without counting): the end-of-run report, so a test sees a path taken */
    long long kp_calls[PG_CUDA_NKPATHS], bf16_gemms;
    cublasLtHandle_t lt;      /* cuBLASLt (the bias epilogue), sharing blas_ws on the same stream */
    struct pg_cuda_lt_plan lt_plans[PG_CUDA_LT_PLANS];
    int nlt_plans;
    struct pg_cuda_shadow *shadows; /* registered bf16 shadow weights (shadow.cu) */
    /* data-parallel replicas (batchnorm.cu): the batch-norm sums' hook, NULL with one replica */
    pg_stats_reduce_fn stats_fn;
    void *stats_arg;
    int stats_reduced;        /* the next running update follows pg_batchnorm_stats_reduce */
    double *stats_host;       /* [2 x stats_cap] the sums on their way through the hook */
    int64_t stats_cap;
    int nshadows, shadows_cap;
    /* the step (step.cu): state between pg_backend_step_begin and _step_end */
    int in_step, in_run;      /* inside a step; inside a run of compute */
    int run_mode;             /* 0 eager, 1 capturing, 2 replayed */
    int run_id, run_calls, run_seg;
    pg_step_info info;        /* this step's values, as step.c passed them */
    int64_t steps_done;       /* steps completed in this process (graphs start after one) */
    const char *graph_block;  /* why graphs are off (dropout), NULL: they may be used */
    int graph_note;           /* the note about graph_block was printed */
    struct pg_cuda_stepvals *sv_dev, *sv_host; /* device / pinned host */
    double *slot_dev, *slot_host;              /* [PG_CUDA_SLOTS] device / pinned host */
    unsigned long long *step_flag;             /* device: (site << 40 | row) of the first bad id */
    double *cur_dst;          /* the current run's scalar_dst */
    struct pg_cuda_slot slots[PG_CUDA_SLOTS];
    int nslots;
    struct pg_cuda_site sites[PG_CUDA_SITES];
    int nsites;
    struct pg_cuda_seg *segs; /* captured runs */
    int nsegs, segs_cap;
    long long graphs_captured, graph_launches; /* for pg_backend_report */
    /* device time (step.cu, pg_backend_mark): the step's marks, timing events
     * made as a step first needs them, then reused every step */
    cudaEvent_t *marks;
    int nmarks, marks_cap;
    int mark_armed;           /* the last mark, made with run_start: the next run's start (-1: none) */
    int run_mark;             /* the open run's start mark (-1: none) */
    /* the step's host -> device copies go through pinned buffers (hstage.h) */
    pg_hstage hstage;
    cudaEvent_t hstage_ev[PG_HSTAGE_SLOTS];
    /* device memory in use (cudaMemGetInfo: total - free) when the context was
     * made, and the most seen at a step's end since (pg_backend_report) */
    size_t mem_base, mem_peak;
    /* the device memory this process's runtime holds beside the arena, by kind
     * (PG_CUDA_OWN_*), now and at that peak: the report names every byte it
     * can; own_links and own_replicas are kept by cuda_net.cu and dp_nccl.cu */
    size_t state_bytes;       /* the step state block (step.cu) */
    long long own_links, own_replicas;
    long long own_at_peak[PG_CUDA_NOWN];
    /* non-NULL: work on the stream waits for a peer that died (why); nothing
     * may synchronise or free device memory any more (pg_backend_poisoned) */
    const char *poisoned;
    /* conv.cu: cuDNN's handle and the convolution plans, NULL until a
     * convolution runs, and its end and report line, set with it (hooks, so a
     * stage without convolutions neither links conv.cu nor needs libcudnn) */
    struct pg_cuda_conv *conv;
    void (*conv_release)(pg_ctx *c);
    void (*conv_report)(const pg_ctx *c, int stage, FILE *out);
};

/* ---- located error checks -------------------------------------------------
 * Each reports `file:line: error: CALL failed: REASON` through pg_rt_error and
 * makes the enclosing int function return 1. */
static inline int pg_cuda_fail(const char *file, int line, const char *call, cudaError_t e)
{
    pg_rt_error(file, line, "%s failed: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
    return 1;
}

static inline const char *pg_cublas_status_name(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
    }
}

static inline int pg_cublas_fail(const char *file, int line, const char *call, cublasStatus_t s)
{
    pg_rt_error(file, line, "%s failed: %s (%d)", call, pg_cublas_status_name(s), (int)s);
    return 1;
}

#define CUDA_CHECK(call)                                                            \
    do {                                                                            \
        cudaError_t pg_e_ = (call);                                                 \
        if (pg_e_ != cudaSuccess)                                                   \
            return pg_cuda_fail(__FILE__, __LINE__, #call, pg_e_);                  \
    } while (0)

#define CUBLAS_CHECK(call)                                                          \
    do {                                                                            \
        cublasStatus_t pg_s_ = (call);                                              \
        if (pg_s_ != CUBLAS_STATUS_SUCCESS)                                         \
            return pg_cublas_fail(__FILE__, __LINE__, #call, pg_s_);                \
    } while (0)

/* After every <<<...>>>: a bad configuration shows up here, at its launch site. */
#define LAUNCH_CHECK(kernel_name)                                                   \
    do {                                                                            \
        cudaError_t pg_e_ = cudaGetLastError();                                     \
        if (pg_e_ != cudaSuccess)                                                   \
            return pg_cuda_fail(__FILE__, __LINE__, "launch of " kernel_name, pg_e_); \
    } while (0)

/* ---- launch geometry (launch_geom.h) ----------------------------------------
 * Elementwise kernels are grid-stride loops over int64 indices with a grid
 * capped at PG_CUDA_MAX_BLOCKS, so any count launches; results do not depend
 * on the grid (each element is computed by exactly one thread). A launch
 * takes its geometry g as kernel<<<PG_GEOM(g), 0, stream>>>. */
#define PG_GEOM(g) dim3((g).grid[0], (g).grid[1], (g).grid[2]), dim3((g).block[0], (g).block[1], (g).block[2])

#define PG_GRID_STRIDE(i, count)                                                    \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count);   \
         i += (int64_t)gridDim.x * blockDim.x)

/* Fixed-shape tree sum over a block of exactly PG_CUDA_RED_THREADS threads:
 * sh[] holds one partial per thread; returns the total to every thread. */
__device__ __forceinline__ double pg_block_sum(double v, double *sh)
{
    __syncthreads(); /* sh may still be read from a previous call */
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = PG_CUDA_RED_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    return sh[0];
}

/* Max over a block (order-free: max is exact). */
__device__ __forceinline__ float pg_block_max(float v, float *sh)
{
    __syncthreads();
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = PG_CUDA_RED_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    return sh[0];
}

/* ---- helpers implemented in backend.cu ------------------------------------ */
/* Record the device memory in use now if it is the most so far (step ends). */
void pg_cuda_mem_sample(pg_ctx *c);
/* A device workspace of at least `bytes` (grown once, stream-ordered). */
int pg_cuda_scratch(pg_ctx *c, size_t bytes, void **out);
/* Device memory the runtime allocated beside the arena (pg_backend_report):
 * what each kind (PG_CUDA_OWN_*) holds now; pg_cuda_own_add counts the
 * links' and the replicas' (no-op without a live context). */
void pg_cuda_own_now(const pg_ctx *c, long long own[PG_CUDA_NOWN]);
void pg_cuda_own_add(int kind, long long delta);
/* Checks ids[0..n) are in [0, limit) on the device; on the first bad row it
 * reports "OP: row R has WHAT id I, outside ...HINT" and returns 1. Synchronous. */
int pg_cuda_check_ids(pg_ctx *c, const char *op, const char *what, const char *range_what,
                      const char *hint, int64_t n, int64_t limit, const int32_t *ids);
/* Fixed-order sum of the device doubles partial[0..np) into the host double
 * *out: one block, strided partials, fixed tree. Synchronous. */
int pg_cuda_sum_to_host(pg_ctx *c, const double *partial, int64_t np, double *out);

/* The same sum into the DEVICE double *dst (no read-back; capturable). */
int pg_cuda_sum_to_dev(pg_ctx *c, const double *partial, int64_t np, double *dst);

/* step.cu. Inside a run of compute (pg_backend_compute) a scalar op defers
 * its result: pg_cuda_defer_scalar gives the device slot to write, delivered
 * by pg_backend_fetch to the run's scalar_dst as raw / div (div != 0) or
 * raw * mul. pg_cuda_capturing: a run is being captured (nothing may
 * synchronise or allocate). pg_cuda_graph_blocker: an op whose by-value
 * arguments change every step (dropout's seed) keeps graphs off. */
int pg_cuda_defer_scalar(pg_ctx *c, double mul, double div, double **slot);
int pg_cuda_capturing(const pg_ctx *c);
int pg_cuda_graph_blocker(pg_ctx *c, const char *why);
/* A workspace moved (it grew outside a capture): the graphs point into the
 * old one, so they are freed and captured again when next met. */
void pg_cuda_drop_graphs(pg_ctx *c);
/* id checks inside a run: the site's index for the step flag (-1: failed). */
int pg_cuda_id_site(pg_ctx *c, const char *op, const char *what, const char *range_what, const char *hint,
                    int64_t n, int64_t limit, const int32_t *ids);

/* C[m,n] = alpha op(A) op(B) + beta C (column-major, as cublasSgemm), batch
 * 0: one product; batch >= 1: strided batched. f32 precision: cublasSgemm /
 * cublasSgemmStridedBatched exactly; bf16: A and B rounded to bf16 into the
 * operand workspace, cublasGemmEx with CUBLAS_COMPUTE_32F into the f32 C. */
int pg_cuda_gemm(pg_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha,
                 const float *A, int lda, long long sA, const float *B, int ldb, long long sB, const float *beta,
                 float *C, int ldc, long long sC, int batch);

/* Is the fast kernel path k (PG_CUDA_K_*) on? */
static inline int pg_cuda_fast(const pg_ctx *c, unsigned k) { return (c->kpaths & k) != 0; }

/* The fast path k (one PG_CUDA_K_* bit) is taken once more. */
static inline void pg_cuda_count(pg_ctx *c, unsigned k)
{
    for (int i = 0; i < PG_CUDA_NKPATHS; i++)
        if (k == 1u << i)
            c->kp_calls[i]++;
}

/* acc[m] += column sums of a[n,m] (linear.cu): with PG_CUDA_K_COLSUM the
 * chunked sums of colsum.cu, else one thread per column walking the rows in
 * index order in double. */
int pg_cuda_colsum_acc(pg_ctx *c, int64_t n, int64_t m, const float *a, float *acc);

/* colsum.cu: the chunked column sums of kernel_ref.h, on the device.
 * acc[m] += column sums of a[n,m]: */
int pg_cuda_colsum_chunked(pg_ctx *c, int64_t n, int64_t m, const float *a, float *acc);
/* dw[j] += sum_i dy xhat, db[j] += sum_i dy over x[n,m], xhat = (x - mean) rstd
 * with per-row (layernorm) or per-column (batchnorm) statistics; dw or db may
 * be NULL. */
int pg_cuda_norm_bwd_w_chunked(pg_ctx *c, const char *op, int64_t n, int64_t m, int stats_per_row, const float *x,
                               const float *mean, const float *rstd, const float *dy, float *dw, float *db);

/* shadow.cu. The bf16 shadow holding [p, p + span) of a registered weight
 * (NULL: none, or the shadow path is off): what a bf16 GEMM reads instead of
 * rounding the f32 operand again. */
const void *pg_cuda_shadow_of(const pg_ctx *c, const float *p, int64_t span);
/* The shadow of exactly w[count] that an optimizer step writes along with w
 * (NULL: none). */
void *pg_cuda_shadow_for_update(const pg_ctx *c, const float *w, int64_t count);
/* [dst, dst + bytes) was written behind the ops' backs (a host copy): re-round
 * every shadow it touches, on the stream. */
int pg_cuda_shadow_touch(pg_ctx *c, const void *dst, size_t bytes);

/* flash_attn.cu: the fused attention of kernel_ref.h for x[r,T,d], h heads,
 * when it applies (bf16 precision, the path on, head dim <= 128). qkv[r,T,3d]
 * in, ctx[r,T,d] out, lse2[r,h,T] (in `att`) saved for the backward. */
int pg_cuda_flash_applies(const pg_ctx *c, int64_t d, int64_t h);
int pg_cuda_flash_fwd(pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal, const float *qkv,
                      float *ctx, float *lse2);
/* dqkv[r,T,3d] from qkv, ctx, dctx and lse2 (overwritten). */
int pg_cuda_flash_bwd(pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal, const float *qkv,
                      const float *ctx, const float *dctx, const float *lse2, float *dqkv);

/* ---- fixed-shape sums over many elements ----------------------------------
 * pg_cuda_reduce_to_host(c, count, f, &out): out = sum of f(i) for i in
 * [0, count), where f is a device functor returning double (and may write
 * elementwise outputs as a side effect). Always PG_CUDA_RED_BLOCKS blocks of
 * PG_CUDA_RED_THREADS threads: thread t of block b takes i = b*THREADS + t,
 * then every BLOCKS*THREADS-th element, in order; each block's fixed tree
 * makes one partial; one block sums the partials in a fixed tree. The order
 * depends on nothing but count, so the same inputs give the same bits. */
template <typename F>
__global__ void pg_partial_sums_kernel(int64_t count, F f, double *partial)
{
    __shared__ double sh[PG_CUDA_RED_THREADS];
    /* A block past the last element sums PG_CUDA_RED_THREADS zeros: its tree
     * gives +0.0, written here without the tree (the whole block leaves
     * together, before any barrier; small sums leave most blocks empty, and
     * each tree costs 9 barriers) */
    if ((int64_t)blockIdx.x * PG_CUDA_RED_THREADS >= count) {
        if (threadIdx.x == 0)
            partial[blockIdx.x] = 0.0;
        return;
    }
    double s = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * PG_CUDA_RED_THREADS + threadIdx.x; i < count;
         i += (int64_t)PG_CUDA_RED_BLOCKS * PG_CUDA_RED_THREADS)
        s += f(i);
    s = pg_block_sum(s, sh);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

/* Inside a run of compute (c->in_run): the same sum into a deferred slot
 * (step.cu) instead of a read-back. mul/div: the op's host formula for its
 * result (see pg_cuda_defer_scalar). 0 or 1. */
template <typename F>
static int pg_cuda_reduce_deferred(pg_ctx *c, int64_t count, F f, double mul, double div)
{
    double *slot = NULL;
    void *ws = NULL;
    if (pg_cuda_defer_scalar(c, mul, div, &slot) || pg_cuda_scratch(c, PG_CUDA_RED_BLOCKS * sizeof(double), &ws))
        return 1;
    pg_partial_sums_kernel<F><<<PG_GEOM(pg_geom_reduce()), 0, c->stream>>>(count, f, (double *)ws);
    LAUNCH_CHECK("pg_partial_sums_kernel");
    return pg_cuda_sum_to_dev(c, (const double *)ws, PG_CUDA_RED_BLOCKS, slot);
}

template <typename F>
static int pg_cuda_reduce_to_host(pg_ctx *c, int64_t count, F f, double *out)
{
    void *ws = NULL;
    if (pg_cuda_scratch(c, PG_CUDA_RED_BLOCKS * sizeof(double), &ws))
        return 1;
    pg_partial_sums_kernel<F><<<PG_GEOM(pg_geom_reduce()), 0, c->stream>>>(count, f, (double *)ws);
    LAUNCH_CHECK("pg_partial_sums_kernel");
    return pg_cuda_sum_to_host(c, (const double *)ws, PG_CUDA_RED_BLOCKS, out);
}

/* ---- sizes: the ops' argument rules are runtime/core/op_args.h's (cuBLAS
 * takes int sizes: pg_args_dim_ok) ------------------------------------------ */

/* the dropout counter hash: pg_splitmix64 and pg_unit24 (pg_contract.h) */

#endif

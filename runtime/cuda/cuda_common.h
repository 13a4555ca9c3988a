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

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "pg_ops.h"
}

/* The backend state behind pg_ctx (runtime/cuda/backend.cu owns its lifetime). */
struct pg_ctx {
    int device;               /* the CUDA device this stage runs on */
    cudaStream_t stream;      /* every kernel, copy and cuBLAS call goes here, in order */
    cublasHandle_t blas;      /* bound to stream */
    void *scratch;            /* device workspace for multi-pass ops (attention, losses) */
    size_t scratch_bytes;     /* its size; grows on first need, then stays */
    unsigned long long *flag; /* device: first bad row of an id check (ULLONG_MAX: none) */
    double *host_ret;         /* pinned host: scalars read back (loss, sumsq) */
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

/* ---- launch geometry -------------------------------------------------------
 * Elementwise kernels are grid-stride loops over int64 indices with a grid
 * capped at PG_CUDA_MAX_BLOCKS, so any count launches; results do not depend
 * on the grid (each element is computed by exactly one thread). */
#define PG_CUDA_THREADS 256
#define PG_CUDA_MAX_BLOCKS 65535
/* Reductions: block size and the number of partial sums are fixed constants,
 * so the summation tree is the same on every device. */
#define PG_CUDA_RED_THREADS 256
#define PG_CUDA_RED_BLOCKS 512

static inline unsigned pg_cuda_blocks(int64_t count, int threads)
{
    int64_t b = (count + threads - 1) / threads;
    if (b < 1)
        b = 1;
    return (unsigned)(b < PG_CUDA_MAX_BLOCKS ? b : PG_CUDA_MAX_BLOCKS);
}

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
/* A device workspace of at least `bytes` (grown once, stream-ordered). */
int pg_cuda_scratch(pg_ctx *c, size_t bytes, void **out);
/* Checks ids[0..n) are in [0, limit) on the device; on the first bad row it
 * reports "OP: row R has WHAT id I, outside ...HINT" and returns 1. Synchronous. */
int pg_cuda_check_ids(pg_ctx *c, const char *op, const char *what, const char *range_what,
                      const char *hint, int64_t n, int64_t limit, const int32_t *ids);
/* Fixed-order sum of the device doubles partial[0..np) into the host double
 * *out: one block, strided partials, fixed tree. Synchronous. */
int pg_cuda_sum_to_host(pg_ctx *c, const double *partial, int64_t np, double *out);

/* acc[m] += column sums of a[n,m], rows in index order in double (linear.cu). */
int pg_cuda_colsum_acc(pg_ctx *c, int64_t n, int64_t m, const float *a, float *acc);

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
    double s = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * PG_CUDA_RED_THREADS + threadIdx.x; i < count;
         i += (int64_t)PG_CUDA_RED_BLOCKS * PG_CUDA_RED_THREADS)
        s += f(i);
    s = pg_block_sum(s, sh);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

template <typename F>
static int pg_cuda_reduce_to_host(pg_ctx *c, int64_t count, F f, double *out)
{
    void *ws = NULL;
    if (pg_cuda_scratch(c, PG_CUDA_RED_BLOCKS * sizeof(double), &ws))
        return 1;
    pg_partial_sums_kernel<F><<<PG_CUDA_RED_BLOCKS, PG_CUDA_RED_THREADS, 0, c->stream>>>(count, f, (double *)ws);
    LAUNCH_CHECK("pg_partial_sums_kernel");
    return pg_cuda_sum_to_host(c, (const double *)ws, PG_CUDA_RED_BLOCKS, out);
}

/* ---- sizes ---------------------------------------------------------------- */
/* cuBLAS takes int sizes: every dimension must fit. */
static inline int pg_cuda_dim_ok(int64_t v) { return v >= 0 && v <= 2147483647; }

/* ---- the dropout counter hash (same formula as runtime/cpu/cpu_kernels.h) -- */
__host__ __device__ __forceinline__ uint64_t pg_cuda_splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__host__ __device__ __forceinline__ float pg_cuda_unit24(uint64_t h)
{
    return (float)(h >> 40) * (1.0f / 16777216.0f);
}

#endif

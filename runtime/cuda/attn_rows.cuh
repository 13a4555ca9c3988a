/* runtime/cuda/attn_rows.cuh — the softmax row kernels of attention, shared
 * by GPT-2's block (attention.cu) and the core over projected q, k, v
 * (attn_core.cu): one block per score row, a fixed tree. */
#ifndef PG_ATTN_ROWS_CUH
#define PG_ATTN_ROWS_CUH

#include <math.h>

#include "cuda_common.h"

/* one block per row, up to the grid's limit (the kernels stride over the rest) */
static inline unsigned row_blocks(int64_t rows) { return (unsigned)(rows < PG_CUDA_MAX_BLOCKS ? rows : PG_CUDA_MAX_BLOCKS); }

/* Softmax of each score row a[row, 0..len) in place (len = i + 1 when causal,
 * i = row % T), entries [len, T) become 0. Max in float, exponentials in
 * float, their sum in double, one float reciprocal: the CPU's formula. */
static __global__ void softmax_rows_kernel(int64_t rows, int64_t T, int causal, float *att)
{
    __shared__ double shd[PG_CUDA_RED_THREADS];
    __shared__ float shf[PG_CUDA_RED_THREADS];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        float *a = att + row * T;
        int64_t len = causal ? row % T + 1 : T;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < len; j += PG_CUDA_RED_THREADS)
            m = fmaxf(m, a[j]);
        m = pg_block_max(m, shf);
        double s = 0.0;
        for (int64_t j = threadIdx.x; j < len; j += PG_CUDA_RED_THREADS) {
            float e = expf(a[j] - m);
            a[j] = e;
            s += e;
        }
        s = pg_block_sum(s, shd);
        float inv = (float)(1.0 / s);
        for (int64_t j = threadIdx.x; j < T; j += PG_CUDA_RED_THREADS)
            a[j] = j < len ? a[j] * inv : 0.0f;
    }
}

/* Softmax backward per row, in place on the score gradients g = datt:
 * D = sum_j att_j g_j (double, fixed tree); ds_j = att_j (g_j - D) scale for
 * j < len (0 where the probability underflowed to 0, as the CPU), 0 beyond. */
static __global__ void softmax_bwd_rows_kernel(int64_t rows, int64_t T, int causal, float scale,
                                        const float *att, float *g)
{
    __shared__ double sh[PG_CUDA_RED_THREADS];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float *a = att + row * T;
        float *gr = g + row * T;
        int64_t len = causal ? row % T + 1 : T;
        double D = 0.0;
        for (int64_t j = threadIdx.x; j < len; j += PG_CUDA_RED_THREADS)
            D += (double)a[j] * gr[j];
        float Df = (float)pg_block_sum(D, sh);
        for (int64_t j = threadIdx.x; j < T; j += PG_CUDA_RED_THREADS) {
            float aj = a[j];
            gr[j] = (j < len && aj != 0.0f) ? aj * (gr[j] - Df) * scale : 0.0f;
        }
    }
}

#endif

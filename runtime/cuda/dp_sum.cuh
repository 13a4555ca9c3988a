/* runtime/cuda/dp_sum.cuh — the kernel of the replicas' gradient sum on the
 * GPU (dp_nccl.cu), kept apart so that tests/gpu/dp_sum_emu.cc runs it on the
 * CPU (tests/gpu/cuda_emu.h) against kernel_ref.h's pg_ref_dp_sum, which is
 * runtime/core/dp.c's sum on the CPU. */
#ifndef PG_DP_SUM_CUH
#define PG_DP_SUM_CUH

#include <stdint.h>

#define PG_DP_SUM_THREADS 256

/* own[e] = x_0[e] + x_1[e] + ... + x_{D-1}[e] for e in [0, m), in replica
 * order: replica me's copy is own itself, replica q's (q != me) is
 * recv[slot * stride + e] with slot = q - (q > me) (the other replicas in
 * replica order). Each element is one thread's (a grid-stride loop: the grid
 * changes no bit), its additions __fadd_rn one after another (no FMA
 * contraction, no atomics). */
__global__ void pg_dp_sum_kernel(float *own, const float *recv, int64_t stride, int D, int me, int64_t m)
{
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < m; e += (int64_t)gridDim.x * blockDim.x) {
        float v = me == 0 ? own[e] : recv[e];
        for (int q = 1; q < D; q++)
            v = __fadd_rn(v, q == me ? own[e] : recv[(int64_t)(q - (q > me)) * stride + e]);
        own[e] = v;
    }
}

#endif

/* tests/gpu/cuda_emu.h — just enough of CUDA, on the CPU, to run the fused
 * attention kernels of runtime/cuda/flash_attn.cuh unchanged (C++20, threads).
 *
 * A launch runs its blocks one after another; each block's threads are real
 * std::threads, so __syncthreads is a barrier over the block and every
 * data race or missing barrier of the kernel can show up as a wrong result
 * here too. `__shared__` arrays become function-local statics: one copy,
 * shared by the block's threads (blocks never overlap). Warp operations
 * (__shfl_xor_sync, the m16n8k16 tensor-core product) exchange values through
 * a per-warp buffer between two barriers over the warp's 32 threads, and the
 * product is computed from the fragment layout as the PTX ISA defines it
 * ("Matrix Fragments for mma.m16n8k16 with floating point type"), written here
 * independently of the kernels' use of it. bf16 rounding is kernel_ref.h's
 * pg_ref_bf16 (round to nearest even, as __float2bfloat16_rn). */
#ifndef PG_CUDA_EMU_H
#define PG_CUDA_EMU_H

#define PG_FLASH_EMU 1

#include <barrier>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <thread>
#include <vector>

#include "../../runtime/cuda/kernel_ref.h"

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct emu_dim3 {
    unsigned x, y, z;
};
inline thread_local emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

struct __nv_bfloat16 {
    uint16_t bits;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    float r = pg_ref_bf16(f);
    uint32_t u;
    memcpy(&u, &r, 4);
    return __nv_bfloat16{(uint16_t)(u >> 16)};
}

inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi)
{
    return __nv_bfloat162{__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}

static_assert(sizeof(__nv_bfloat162) == 4, "two bf16 in one 32-bit register");

/* f32 addition rounded to nearest even: the host's float + (an addition has
 * no multiply to contract with, so no FMA either way) */
inline float __fadd_rn(float a, float b) { return a + b; }

/* ---- one block's shared state ------------------------------------------------ */

struct emu_warp {
    std::barrier<> *bar;
    uint64_t xchg[32];                 /* shuffles */
    uint32_t a[32][4], b[32][2];       /* mma operands */
};

struct emu_block {
    std::barrier<> *bar;
    std::vector<emu_warp> warps;
};

inline emu_block *emu_cur; /* the block being run (blocks run one at a time) */

inline void __syncthreads() { emu_cur->bar->arrive_and_wait(); }

template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lanemask)
{
    (void)mask;
    static_assert(sizeof(T) <= 8, "shuffle of up to 8 bytes");
    emu_warp &w = emu_cur->warps[threadIdx.x / 32];
    unsigned lane = threadIdx.x % 32;
    memcpy(&w.xchg[lane], &v, sizeof v);
    w.bar->arrive_and_wait();
    T r;
    memcpy(&r, &w.xchg[lane ^ (unsigned)lanemask], sizeof r);
    w.bar->arrive_and_wait();
    return r;
}

/* The bf16 with bits h as a float. */
inline float emu_bf16_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A[row][col] of the m16n8k16 product from the lanes' A registers:
 * lane = 4 (row % 8) + (col % 8) / 2, register (row >= 8) + 2 (col >= 8),
 * the low half for an even col. */
inline float emu_a(const emu_warp &w, int row, int col)
{
    uint32_t r = w.a[4 * (row % 8) + (col % 8) / 2][(row >= 8) + 2 * (col >= 8)];
    return emu_bf16_float((uint16_t)(col % 2 ? r >> 16 : r & 0xffffu));
}

/* B[row][col] (16 x 8): lane = 4 col + (row % 8) / 2, register row >= 8 */
inline float emu_b(const emu_warp &w, int row, int col)
{
    uint32_t r = w.b[4 * col + (row % 8) / 2][row >= 8];
    return emu_bf16_float((uint16_t)(row % 2 ? r >> 16 : r & 0xffffu));
}

/* c += a b over the warp: C[row][col] with row = g (+8 for c2, c3),
 * col = 2t + (i & 1); products of bf16 values are exact in float, summed in k order. */
inline void mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    emu_warp &w = emu_cur->warps[threadIdx.x / 32];
    unsigned lane = threadIdx.x % 32;
    memcpy(w.a[lane], a, sizeof w.a[lane]);
    w.b[lane][0] = b0;
    w.b[lane][1] = b1;
    w.bar->arrive_and_wait();
    int g = (int)lane / 4, t = (int)lane % 4;
    float d[4];
    for (int i = 0; i < 4; i++) {
        int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
        float s = c[i];
        for (int k = 0; k < 16; k++)
            s += emu_a(w, row, k) * emu_b(w, k, col);
        d[i] = s;
    }
    w.bar->arrive_and_wait();
    memcpy(c, d, sizeof d);
}

/* Runs body() as the kernel <<<grid, threads>>>: blocks in order, each
 * block's threads concurrently. threads: a multiple of 32. */
template <class F>
inline void emu_launch(emu_dim3 grid, unsigned threads, F body)
{
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                std::barrier<> bar((ptrdiff_t)threads);
                std::vector<std::barrier<> *> wb;
                emu_block blk;
                blk.bar = &bar;
                blk.warps.resize(threads / 32);
                for (auto &w : blk.warps) {
                    w.bar = new std::barrier<>(32);
                    wb.push_back(w.bar);
                }
                emu_cur = &blk;
                std::vector<std::thread> th;
                for (unsigned t = 0; t < threads; t++)
                    th.emplace_back([=] {
                        threadIdx = emu_dim3{t, 0, 0};
                        blockIdx = emu_dim3{bx, by, bz};
                        blockDim = emu_dim3{threads, 1, 1};
                        gridDim = grid;
                        body();
                    });
                for (auto &x : th)
                    x.join();
                for (auto *b : wb)
                    delete b;
                emu_cur = nullptr;
            }
}

#endif

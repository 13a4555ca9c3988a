/* tests/gpu/flash_refs.h — the fused attention's host references
 * (runtime/cuda/kernel_ref.h) over every head of a micro-batch, in the
 * layouts of the ops: qkv[r,T,3d], ctx[r,T,d], lse2[r,h,T]. Shared by
 * tests/gpu/test_ops_gpu.cu and tests/gpu/flash_emu.cc. */
#ifndef PG_FLASH_REFS_H
#define PG_FLASH_REFS_H

#include <stdint.h>
#include <vector>

#include "../../runtime/cuda/kernel_ref.h"

/* Forward reference of every head: ctx_ref[r,T,d], lse_ref[r,h,T]. Then the
 * backward reference fed with the forward the kernel under test made
 * (ctx_in, lse_in; NULL lse_in: the reference's own), so a backward error is
 * not blamed on the forward: dqkv_ref[r,T,3d] and D_ref[r,h,T] (the row
 * terms). bf16: the kernels' roundings or none. */
static inline void flash_refs(int64_t r, int64_t T, int64_t d, int64_t h, int causal, int bf16,
                              const std::vector<float> &qkv, const std::vector<float> &ctx_in,
                              const std::vector<float> &dctx, const float *lse_in, std::vector<float> &ctx_ref,
                              std::vector<float> &lse_ref, std::vector<float> &dqkv_ref, std::vector<float> &D_ref)
{
    const int64_t hd = d / h, ld = 3 * d;
    ctx_ref.assign((size_t)(r * T * d), 0.0f);
    lse_ref.assign((size_t)(r * h * T), 0.0f);
    dqkv_ref.assign((size_t)(r * T * ld), 0.0f);
    D_ref.assign((size_t)(r * h * T), 0.0f);
    std::vector<float> o((size_t)(T * ld)), dO((size_t)(T * ld)), g((size_t)(3 * T * ld));
    for (int64_t b = 0; b < r; b++)
        for (int64_t hh = 0; hh < h; hh++) {
            const float *q = &qkv[(size_t)(b * T * ld + hh * hd)];
            float *L = &lse_ref[(size_t)((b * h + hh) * T)];
            pg_ref_flash_fwd_head(T, hd, causal, bf16, ld, q, q + d, q + 2 * d, o.data(), L);
            for (int64_t i = 0; i < T; i++)
                for (int64_t c = 0; c < hd; c++) {
                    size_t at = (size_t)((b * T + i) * d + hh * hd + c), hi = (size_t)(i * ld + c);
                    ctx_ref[at] = o[hi];
                    o[hi] = ctx_in[at];
                    dO[hi] = dctx[at];
                }
            for (int64_t i = 0; i < T; i++)
                D_ref[(size_t)((b * h + hh) * T + i)] = pg_ref_flash_rowdot(hd, &dO[(size_t)(i * ld)], &o[(size_t)(i * ld)]);
            float *dq = g.data(), *dk = dq + T * ld, *dv = dk + T * ld;
            pg_ref_flash_bwd_head(T, hd, causal, bf16, ld, q, q + d, q + 2 * d, o.data(), dO.data(),
                                  lse_in ? lse_in + (b * h + hh) * T : L, dq, dk, dv);
            for (int64_t i = 0; i < T; i++)
                for (int64_t c = 0; c < hd; c++) {
                    size_t row = (size_t)((b * T + i) * ld + hh * hd + c), hi = (size_t)(i * ld + c);
                    dqkv_ref[row] = dq[hi];
                    dqkv_ref[row + (size_t)d] = dk[hi];
                    dqkv_ref[row + 2 * (size_t)d] = dv[hi];
                }
        }
}

#endif

/* runtime/cuda/flash_attn.cu — fused (flash-style) attention for precision =
 * bf16, the PG_CUDA_K_FLASH path of attention.cu. kernel_ref.h holds the host
 * reference of this exact arithmetic (pg_ref_flash_fwd_head / _bwd_head).
 *
 * The unfused path writes every head's [T,T] scores, softmaxes them in place
 * and reads them back for the P V product and twice more in the backward: at
 * T = 1024 that is most of the step's activation traffic. Here the scores
 * live in registers only; the forward saves the base-2 log-sum-exp per row
 * (lse2[r,h,T], in the first r*h*T floats of the planned `att` buffer) and
 * the backward recomputes the probabilities from it (FlashAttention-2).
 *
 * Layout: qkv[r,T,3d] f32 (q, k, v in column blocks [0,d) [d,2d) [2d,3d), head
 * hh at columns hh*hd), ctx and dctx [r,T,d]. Tiles of 64 rows are loaded from
 * f32, rounded to bf16 (round to nearest even, as every bf16 GEMM operand) and
 * zero-padded beyond T and beyond hd (to hdp = 16, 32 or 64 columns), into
 * shared memory whose rows are padded by 16 bytes, so the 32-bit fragment
 * loads below hit 32 different banks. Products are mma.sync m16n8k16 (bf16 in,
 * f32 accumulate), sm_80 instructions that sm_90 runs (no wgmma: that needs
 * the sm_90a target this build does not use). A block is 4 warps; each warp
 * owns 16 rows of the block's 64-row tile.
 *
 * Fragment layout (PTX ISA, mma.m16n8k16 with .bf16): lane = 4 g + t.
 *   A (16x16, row): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
 *                   a3 = A[g+8][2t+8..]   (two bf16 per register, low = first)
 *   B (16x8, col):  b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
 *   C (16x8 f32):   c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
 * So a product's C tiles for columns 16s..16s+15 are, packed pairwise, the A
 * fragment of the next product over those 16 columns (P V, dS K, ...), and a B
 * fragment is one 32-bit load when B's k index runs along a shared-memory row:
 * B = K^T reads K's rows, B = V (for P V) reads V transposed (svt[c][key]).
 *
 * Determinism: every sum has a fixed order (per-thread loops in index order,
 * then a fixed butterfly over the 4 lanes of a row; the tensor core's own
 * order for a given instruction); no atomics. The backward is two kernels:
 * dK and dV by one block per key tile looping over the query tiles in order,
 * dQ by one block per query tile looping over the key tiles in order; each
 * output element is written by exactly one thread, once. That recomputes
 * Q K^T and dO V^T once more than an atomic dQ accumulation would (7 instead
 * of 5 tile products), the price of bitwise repeatable results. Each block
 * works on one (sample, head, tile), so a sample's bits never depend on how
 * many samples share the call. */
#include <math.h>

#include "cuda_common.h"
#include "flash_attn.cuh"

static_assert(FA_T == PG_FLASH_TILE, "launch_geom.h's tile is the kernels' (tests/cuda_geom.t checks the geometry by it)");

/* ---- launchers -------------------------------------------------------------- */

int pg_cuda_flash_applies(const pg_ctx *c, int64_t d, int64_t h)
{
    return c->precision == 1 && pg_cuda_fast(c, PG_CUDA_K_FLASH) && h > 0 && d % h == 0 && pg_flash_hdp(d / h) != 0;
}

/* The grid (tiles, h, r) and the sizes every kernel assumes, checked with the
 * sizes in the message (a launch that would fail says why, before it runs). */
static int flash_grid(const char *op, int64_t r, int64_t T, int64_t d, int64_t h, dim3 *grid)
{
    int64_t ntiles = (T + FA_T - 1) / FA_T;
    if (r <= 0 || T <= 0 || h <= 0 || d % h || !pg_flash_hdp(d / h) || 3 * d > 2147483647LL || T > 2147483647LL ||
        ntiles > 2147483647LL || h > 65535 || r > 65535 || pg_geom_check(pg_geom_flash(r, T, h, FA_THREADS), NULL, 0))
        return PG_RT_FAIL("%s: sizes r=%lld T=%lld d=%lld heads=%lld outside the fused attention's limits (r and "
                          "heads at most 65535, head dim d/heads at most %d)", op, (long long)r, (long long)T,
                          (long long)d, (long long)h, PG_FLASH_MAX_HD);
    pg_geom g = pg_geom_flash(r, T, h, FA_THREADS);
    *grid = dim3(g.grid[0], g.grid[1], g.grid[2]);
    return 0;
}

/* 4-byte alignment of the f32 tensors the kernels read and write by element
 * (cudaMalloc'd arena buffers always are; a misaligned pointer is a caller bug). */
static int flash_aligned(const char *op, const void *a, const void *b, const void *c, const void *e)
{
    if (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)e) % 4)
        return PG_RT_FAIL("%s: a tensor is not 4-byte aligned (%p %p %p %p)", op, a, b, c, e);
    return 0;
}

#define FLASH_DISPATCH(hdp, kernel, grid, ...)                                                                  \
    do {                                                                                                        \
        switch (hdp) {                                                                                          \
        case 16: kernel<16><<<grid, FA_THREADS, 0, c->stream>>>(__VA_ARGS__); break;                            \
        case 32: kernel<32><<<grid, FA_THREADS, 0, c->stream>>>(__VA_ARGS__); break;                            \
        default: kernel<64><<<grid, FA_THREADS, 0, c->stream>>>(__VA_ARGS__); break;                            \
        }                                                                                                       \
        LAUNCH_CHECK(#kernel);                                                                                  \
    } while (0)

int pg_cuda_flash_fwd(pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal, const float *qkv,
                      float *ctx, float *lse2)
{
    dim3 grid;
    if (r == 0)
        return 0;
    if (flash_grid("attention_fwd (fused)", r, T, d, h, &grid) ||
        flash_aligned("attention_fwd (fused)", qkv, ctx, lse2, lse2))
        return 1;
    int hdp = pg_flash_hdp(d / h);
    pg_cuda_count(c, PG_CUDA_K_FLASH);
    FLASH_DISPATCH(hdp, flash_fwd_kernel, grid, (int)T, (int)d, (int)h, causal, pg_flash_scale_log2(d / h), qkv, ctx,
                   lse2);
    return 0;
}

int pg_cuda_flash_bwd(pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal, const float *qkv,
                      const float *ctx, const float *dctx, const float *lse2, float *dqkv)
{
    dim3 grid;
    if (r == 0)
        return 0;
    if (flash_grid("attention_bwd_in (fused)", r, T, d, h, &grid) ||
        flash_aligned("attention_bwd_in (fused)", qkv, ctx, dctx, dqkv) ||
        flash_aligned("attention_bwd_in (fused)", lse2, lse2, lse2, lse2))
        return 1;
    int64_t rows = r * h * T;
    void *ws = NULL;
    if (pg_cuda_scratch(c, (size_t)rows * sizeof(float), &ws))
        return 1;
    float *D = (float *)ws; /* [r,h,T] */
    flash_rowdot_kernel<<<pg_cuda_blocks(rows * 32, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(
        rows, (int)T, (int)d, (int)h, ctx, dctx, D);
    LAUNCH_CHECK("flash_rowdot_kernel");
    int hdp = pg_flash_hdp(d / h);
    float sl2 = pg_flash_scale_log2(d / h), scale = pg_flash_scale(d / h);
    FLASH_DISPATCH(hdp, flash_bwd_dkv_kernel, grid, (int)T, (int)d, (int)h, causal, sl2, scale, qkv, dctx, lse2, D,
                   dqkv);
    FLASH_DISPATCH(hdp, flash_bwd_dq_kernel, grid, (int)T, (int)d, (int)h, causal, sl2, scale, qkv, dctx, lse2, D,
                   dqkv);
    return 0;
}

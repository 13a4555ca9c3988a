/* tests/gpu/flash_emu.cc — the fused attention kernels of
 * runtime/cuda/flash_attn.cuh, run on the CPU under tests/gpu/cuda_emu.h,
 * against the host reference of their arithmetic (kernel_ref.h,
 * pg_ref_flash_fwd_head / _bwd_head with the bf16 roundings). Run by
 * tests/flash_emu.t in `make test`: the kernels' tiling, fragment indexing,
 * masks, row statistics and the two backward kernels are checked here before
 * any GPU runs them (tests/gpu/test_ops_gpu.cu checks them again on a GPU).
 * Every output is poisoned with NaN first, so an element no thread writes
 * fails. Sizes cover T not a multiple of the 64-row tile, one row, head dims
 * 8, 24 and 64 (padded to 16, 32, 64), several heads and samples, causal and
 * full masks. */
#include "cuda_emu.h"

#include "../../runtime/cuda/flash_attn.cuh"
#include "../tap.h"
#include "flash_refs.h"

#include <vector>

typedef std::vector<float> fvec;

static uint64_t rng = 7;
static float uni(float lo, float hi)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((double)(rng >> 11) * (1.0 / 9007199254740992.0));
}

/* max |got - ref| / max |ref| over the elements; NaN in got is infinite */
static double rel_err(const fvec &got, const fvec &ref)
{
    double worst = 0.0, mag = 1e-30;
    for (size_t i = 0; i < ref.size(); i++) {
        mag = fmax(mag, fabs((double)ref[i]));
        double d = fabs((double)got[i] - (double)ref[i]);
        if (!(d <= worst))
            worst = isnan(d) ? INFINITY : d;
    }
    return worst / mag;
}

template <int HDP>
static void run_fwd(int T, int d, int h, int r, int causal, const float *qkv, float *ctx, float *lse2)
{
    emu_dim3 grid{(unsigned)((T + 63) / 64), (unsigned)h, (unsigned)r};
    float sl2 = pg_flash_scale_log2(d / h);
    emu_launch(grid, FA_THREADS, [=] { flash_fwd_kernel<HDP>(T, d, h, causal, sl2, qkv, ctx, lse2); });
}

template <int HDP>
static void run_bwd(int T, int d, int h, int r, int causal, const float *qkv, const float *ctx, const float *dctx,
                    const float *lse2, float *D, float *dqkv)
{
    int64_t rows = (int64_t)r * h * T;
    /* three blocks of 256 for however many rows: the grid-stride loop too */
    emu_launch(emu_dim3{3, 1, 1}, 256, [=] { flash_rowdot_kernel(rows, T, d, h, ctx, dctx, D); });
    emu_dim3 grid{(unsigned)((T + 63) / 64), (unsigned)h, (unsigned)r};
    int hd = d / h;
    float sl2 = pg_flash_scale_log2(hd), scale = pg_flash_scale(hd);
    emu_launch(grid, FA_THREADS, [=] { flash_bwd_dkv_kernel<HDP>(T, d, h, causal, sl2, scale, qkv, dctx, lse2, D, dqkv); });
    emu_launch(grid, FA_THREADS, [=] { flash_bwd_dq_kernel<HDP>(T, d, h, causal, sl2, scale, qkv, dctx, lse2, D, dqkv); });
}

/* off: the inputs start that many floats into their vectors (1: no row is
 * 16-byte aligned, every tile takes the kernels' element-by-element loads) */
static void check(int T, int hd, int h, int r, int causal, int off = 0)
{
    const int d = hd * h;
    const int64_t ld = 3 * (int64_t)d;
    fvec qkv_mem((size_t)(r * T * ld + off)), dctx_mem((size_t)(r * T * d + off));
    for (auto &x : qkv_mem)
        x = uni(-2.0f, 2.0f); /* scores of a few units: a real softmax, not a flat one */
    for (auto &x : dctx_mem)
        x = uni(-1.0f, 1.0f);
    fvec qkv(qkv_mem.begin() + off, qkv_mem.end()), dctx(dctx_mem.begin() + off, dctx_mem.end()); /* the references' */
    const float *qkv_in = qkv_mem.data() + off, *dctx_in = dctx_mem.data() + off; /* the kernels' */
    fvec ctx((size_t)(r * T * d), NAN), lse2((size_t)(r * h * T), NAN), D((size_t)(r * h * T), NAN);
    fvec dqkv((size_t)(r * T * ld), NAN);
    int hdp = pg_flash_hdp(hd);
    if (hdp == 16)
        run_fwd<16>(T, d, h, r, causal, qkv_in, ctx.data(), lse2.data());
    else if (hdp == 32)
        run_fwd<32>(T, d, h, r, causal, qkv_in, ctx.data(), lse2.data());
    else
        run_fwd<64>(T, d, h, r, causal, qkv_in, ctx.data(), lse2.data());
    if (hdp == 16)
        run_bwd<16>(T, d, h, r, causal, qkv_in, ctx.data(), dctx_in, lse2.data(), D.data(), dqkv.data());
    else if (hdp == 32)
        run_bwd<32>(T, d, h, r, causal, qkv_in, ctx.data(), dctx_in, lse2.data(), D.data(), dqkv.data());
    else
        run_bwd<64>(T, d, h, r, causal, qkv_in, ctx.data(), dctx_in, lse2.data(), D.data(), dqkv.data());

    /* the references, fed with the kernels' own forward outputs for the backward (so each error is located) */
    fvec ctx_ref, lse_ref, dqkv_ref, D_ref;
    flash_refs(r, T, d, h, causal, 1, qkv, ctx, dctx, lse2.data(), ctx_ref, lse_ref, dqkv_ref, D_ref);
    char what[96];
    snprintf(what, sizeof what, "T=%d hd=%d heads=%d r=%d %s%s", T, hd, h, r, causal ? "causal" : "full",
             off ? ", rows not 16-byte aligned" : "");
    double e;
    e = rel_err(ctx, ctx_ref);
    OK(e < 2e-4, "fused forward, %s: ctx = the tiled online-softmax reference (err %.1e)", what, e);
    e = rel_err(lse2, lse_ref);
    OK(e < 2e-5, "fused forward, %s: log-sum-exp per row (err %.1e)", what, e);
    e = rel_err(D, D_ref);
    OK(e < 1e-6, "fused backward, %s: D = rowsum(dO o O) (err %.1e)", what, e);
    e = rel_err(dqkv, dqkv_ref);
    OK(e < 1e-3, "fused backward, %s: dq, dk, dv = the reference backward (err %.1e)", what, e);
}

int main(void)
{
    check(70, 64, 2, 2, 1); /* GPT-2's head dim; a partial second tile */
    check(70, 64, 2, 1, 0);
    check(130, 24, 3, 1, 1); /* three query tiles, hd padded 24 -> 32 */
    check(33, 8, 2, 1, 0);   /* hd padded 8 -> 16 */
    check(1, 64, 1, 1, 1);   /* one row */
    check(70, 6, 2, 2, 1);   /* hd padded 6 -> 16; the second head's rows start 6 floats in: element loads */
    check(130, 64, 2, 1, 1, 1); /* no 16-byte aligned row: every tile loaded element by element */
    return DONE();
}

/* runtime/cuda/flash_attn.cuh — the device code of the fused attention
 * (flash_attn.cu has the design notes and the launchers). Kept apart so that
 * tests/gpu/flash_emu.cc can run these very kernels on the CPU, with the
 * CUDA built-ins (threads, barriers, shuffles, the mma instruction) emulated
 * (tests/gpu/cuda_emu.h, defining PG_FLASH_EMU): `make test` then checks the
 * kernels' indexing, tiling and masks against kernel_ref.h on any machine. */
#ifndef PG_FLASH_ATTN_CUH
#define PG_FLASH_ATTN_CUH

#include <math.h>
#include <stdint.h>

#ifndef PG_FLASH_EMU
#include <cuda_bf16.h>
#endif

#include "kernel_ref.h"


typedef __nv_bfloat16 bf16;

#define FA_T 64                       /* rows per tile (PG_FLASH_BQ = PG_FLASH_BK) */
#define FA_THREADS (PG_FLASH_WARPS * 32)
#define FA_PAD 8                      /* bf16 per shared row: row stride = 4 banks mod 32 */

static_assert(PG_FLASH_BQ == FA_T && PG_FLASH_BK == FA_T && PG_FLASH_WARPS * 16 == FA_T && FA_THREADS == 2 * FA_T,
              "the kernels assume 64-row tiles of 4 warps x 16 rows (and a thread per row of lse2 and of D)");

/* ---- fragments ------------------------------------------------------------- */

__device__ __forceinline__ uint32_t ld_b32(const bf16 *p) { return *reinterpret_cast<const uint32_t *>(p); }

/* two floats rounded to bf16 and packed, lo in the low half (the first column) */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* c += a b, one m16n8k16 tensor-core product (on the CPU: cuda_emu.h's) */
#ifndef PG_FLASH_EMU
__device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

/* The A fragment of rows [row0, row0 + 16), columns [col0, col0 + 16) of s */
template <int W>
__device__ __forceinline__ void load_a(uint32_t a[4], const bf16 (*s)[W], int row0, int col0, int g, int t)
{
    a[0] = ld_b32(&s[row0 + g][col0 + 2 * t]);
    a[1] = ld_b32(&s[row0 + g + 8][col0 + 2 * t]);
    a[2] = ld_b32(&s[row0 + g][col0 + 2 * t + 8]);
    a[3] = ld_b32(&s[row0 + g + 8][col0 + 2 * t + 8]);
}

/* acc[8 tiles of 8 columns] += A (this warp's 16 rows, NKS k-steps in a[])
 * times B where B[k][n] = s[n][k]: the product with s's rows 0..63 as the 64
 * columns (S = Q K^T reads K's rows, dP = dO V^T reads V's rows). */
template <int NKS, int W>
__device__ __forceinline__ void mma_rows(float acc[8][4], const uint32_t a[NKS][4], const bf16 (*s)[W], int g, int t)
{
#pragma unroll
    for (int j = 0; j < 8; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc[j][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < NKS; kk++)
            mma_16816(acc[j], a[kk], ld_b32(&s[j * 8 + g][kk * 16 + 2 * t]), ld_b32(&s[j * 8 + g][kk * 16 + 2 * t + 8]));
    }
}

/* out[HDP/8 tiles] += P (16 rows x 64, the C tiles p[8][4] rounded to bf16)
 * times B[64][HDP] stored transposed in st[c][row] (V for O += P V, dO for
 * dV += P^T dO, Q for dK += dS^T Q, K for dQ += dS K). */
template <int HDP>
__device__ __forceinline__ void mma_p_by_t(float out[HDP / 8][4], const float p[8][4], const bf16 (*st)[FA_T + FA_PAD],
                                           int g, int t)
{
#pragma unroll
    for (int ks = 0; ks < 4; ks++) {
        uint32_t a[4] = {pack_bf16(p[2 * ks][0], p[2 * ks][1]), pack_bf16(p[2 * ks][2], p[2 * ks][3]),
                         pack_bf16(p[2 * ks + 1][0], p[2 * ks + 1][1]), pack_bf16(p[2 * ks + 1][2], p[2 * ks + 1][3])};
#pragma unroll
        for (int nn = 0; nn < HDP / 8; nn++)
            mma_16816(out[nn], a, ld_b32(&st[nn * 8 + g][ks * 16 + 2 * t]),
                      ld_b32(&st[nn * 8 + g][ks * 16 + 2 * t + 8]));
    }
}

/* ---- tiles -----------------------------------------------------------------
 * A 64-row tile goes from global memory to shared memory in two halves, so
 * that the next tile's loads are in flight while the warps multiply the
 * current one: fa_stage_load issues this thread's loads into registers (16
 * bytes at a time where the tensor is 16-byte aligned), fa_stage_store later
 * rounds them to bf16 into the tile (and fa_stage_store_t into its
 * transpose). The values, the rounding and the zeros beyond T and hd are the
 * same as element by element: the tile's contents, hence every result bit,
 * do not depend on how it was loaded.
 *
 * Thread mapping: lane = 4 q + p with q = 0..7, p = 0..3; warp w. The thread
 * holds rows 2 rp and 2 rp + 1, rp = q + 8 w (so the block covers 64 rows),
 * of column chunks cc = p + 4 u (4 floats each; u = 0 .. HDP/16 - 1). A warp's
 * load reads 8 rows x 64 contiguous bytes (whole 32-byte sectors); the bf16
 * row store is 8 bytes a lane, 16 distinct bank pairs (two wavefronts, the
 * least for 256 bytes); the transposed store writes the two rows' values of
 * one column as one 32-bit word (two lanes a bank: 2-way). */
template <int HDP> struct fa_stage {
    float v[HDP / 16][2][4]; /* [u][row of the pair][column of the chunk] */
};

/* this thread's pair of rows: rows 2 fa_pair() and 2 fa_pair() + 1 of the tile */
__device__ __forceinline__ int fa_pair(void) { return (int)(threadIdx.x % 32) / 4 + 8 * (int)(threadIdx.x / 32); }

/* Can rows of src with leading dimension ld be read 16 bytes at a time? */
__device__ __forceinline__ bool fa_vec_ok(const float *src, int64_t ld)
{
    return ((uintptr_t)src & 15) == 0 && (ld & 3) == 0;
}

__device__ __forceinline__ void fa_ld4(float v[4], const float *p)
{
#ifndef PG_FLASH_EMU
    float4 x = *reinterpret_cast<const float4 *>(p);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
#else
    for (int k = 0; k < 4; k++)
        v[k] = p[k];
#endif
}

/* this thread's part of rows [row0, row0 + 64) of src (0 beyond T or hd) */
template <int HDP>
__device__ __forceinline__ void fa_stage_load(fa_stage<HDP> &st, const float *src, int64_t ld, int row0, int T, int hd,
                                              bool vec)
{
    const int rp = fa_pair(), p = threadIdx.x % 4;
#pragma unroll
    for (int u = 0; u < HDP / 16; u++) {
        const int c = 4 * (p + 4 * u);
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int r = row0 + 2 * rp + e;
            float *v = st.v[u][e];
            if (r < T && vec && c + 4 <= hd)
                fa_ld4(v, src + (int64_t)r * ld + c);
            else
#pragma unroll
                for (int k = 0; k < 4; k++)
                    v[k] = r < T && c + k < hd ? src[(int64_t)r * ld + c + k] : 0.0f;
        }
    }
}

__device__ __forceinline__ void st_b32(bf16 *p, uint32_t x) { *reinterpret_cast<uint32_t *>(p) = x; }

__device__ __forceinline__ void st_b64(bf16 *p, uint32_t lo, uint32_t hi)
{
#ifndef PG_FLASH_EMU
    *reinterpret_cast<uint2 *>(p) = make_uint2(lo, hi);
#else
    st_b32(p, lo);
    st_b32(p + 2, hi);
#endif
}

/* s[r][c] = bf16(the staged tile's [r][c]) */
template <int HDP>
__device__ __forceinline__ void fa_stage_store(bf16 (*s)[HDP + FA_PAD], const fa_stage<HDP> &st)
{
    const int rp = fa_pair(), p = threadIdx.x % 4;
#pragma unroll
    for (int u = 0; u < HDP / 16; u++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const float *v = st.v[u][e];
            st_b64(&s[2 * rp + e][4 * (p + 4 * u)], pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]));
        }
}

/* the same tile transposed: s[c][r] */
template <int HDP>
__device__ __forceinline__ void fa_stage_store_t(bf16 (*s)[FA_T + FA_PAD], const fa_stage<HDP> &st)
{
    const int rp = fa_pair(), p = threadIdx.x % 4;
#pragma unroll
    for (int u = 0; u < HDP / 16; u++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            st_b32(&s[4 * (p + 4 * u) + k][2 * rp], pack_bf16(st.v[u][0][k], st.v[u][1][k]));
}

__device__ __forceinline__ bool visible(int i, int j, int T, int causal) { return i < T && j < T && (!causal || j <= i); }

/* sum over the 4 lanes of a row: a fixed butterfly, the same bits in all 4 */
__device__ __forceinline__ float quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

__device__ __forceinline__ float quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

/* The tensors of head hh of sample b: q, k, v (rows 3d floats apart), dO (rows
 * d apart), and the head's lse2 and D rows ([T] each; NULL for the forward). */
struct fa_head {
    const float *q, *k, *v, *dO, *L, *D;
};

__device__ __forceinline__ fa_head head_of(int T, int d, int h, int b, int hh, const float *qkv, const float *dctx,
                                           const float *lse2, const float *D)
{
    const int hd = d / h;
    const float *q = qkv + (int64_t)b * T * (3 * (int64_t)d) + (int64_t)hh * hd;
    fa_head x = {q, q + d, q + 2 * d, NULL, NULL, NULL};
    if (dctx) {
        x.dO = dctx + (int64_t)b * T * d + (int64_t)hh * hd;
        x.L = lse2 + ((int64_t)b * h + hh) * T;
        x.D = D + ((int64_t)b * h + hh) * T;
    }
    return x;
}

/* A warp's 16-row accumulator tile out: rows r0 (times s0) and r0 + 8 (times
 * s1) of this thread, dst[row * ld + c] for rows < T and columns c < hd. */
template <int NON>
__device__ __forceinline__ void store_tile(const float acc[NON][4], float *dst, int64_t ld, int r0, int T, int hd,
                                           float s0, float s1, int t)
{
#pragma unroll
    for (int nn = 0; nn < NON; nn++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int c = nn * 8 + 2 * t + e;
            if (c < hd && r0 < T)
                dst[(int64_t)r0 * ld + c] = acc[nn][e] * s0;
            if (c < hd && r0 + 8 < T)
                dst[(int64_t)(r0 + 8) * ld + c] = acc[nn][2 + e] * s1;
        }
}

/* ---- forward ----------------------------------------------------------------
 * Block (x, hh, b): query tile nqt-1-x (the longest causal rows start first)
 * of head hh of sample b. ctx[b, i, hh*hd + c] and lse2[(b*h + hh)*T + i]. */
template <int HDP>
__global__ void __launch_bounds__(FA_THREADS) flash_fwd_kernel(int T, int d, int h, int causal, float sl2,
                                                               const float *qkv, float *ctx, float *lse2)
{
    constexpr int NKS = HDP / 16, NON = HDP / 8;
    __shared__ __align__(16) bf16 sq[FA_T][HDP + FA_PAD];
    __shared__ __align__(16) bf16 sk[FA_T][HDP + FA_PAD];
    __shared__ __align__(16) bf16 svt[HDP][FA_T + FA_PAD];
    const int nqt = (T + FA_T - 1) / FA_T, qt = nqt - 1 - (int)blockIdx.x;
    const int hh = blockIdx.y, b = blockIdx.z, hd = d / h;
    const int64_t ld = 3 * (int64_t)d;
    const fa_head H = head_of(T, d, h, b, hh, qkv, NULL, NULL, NULL);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int i0 = qt * FA_T + warp * 16 + g, i1 = i0 + 8; /* this thread's two query rows */

    fa_stage<HDP> rk, rv;
    fa_stage_load<HDP>(rk, H.q, ld, qt * FA_T, T, hd, fa_vec_ok(H.q, ld));
    fa_stage_store<HDP>(sq, rk);
    const bool veck = fa_vec_ok(H.k, ld), vecv = fa_vec_ok(H.v, ld);
    fa_stage_load<HDP>(rk, H.k, ld, 0, T, hd, veck); /* key tile 0, in flight while Q's fragments load */
    fa_stage_load<HDP>(rv, H.v, ld, 0, T, hd, vecv);
    __syncthreads();
    uint32_t qa[NKS][4];
#pragma unroll
    for (int kk = 0; kk < NKS; kk++)
        load_a(qa[kk], sq, warp * 16, kk * 16, g, t);

    float o[NON][4];
#pragma unroll
    for (int nn = 0; nn < NON; nn++)
        o[nn][0] = o[nn][1] = o[nn][2] = o[nn][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    const int nkt = causal ? qt + 1 : nqt;
    for (int kt = 0; kt < nkt; kt++) {
        __syncthreads(); /* every warp is done with the previous key tile */
        fa_stage_store<HDP>(sk, rk);
        fa_stage_store_t<HDP>(svt, rv);
        __syncthreads();
        if (kt + 1 < nkt) { /* the next key tile's loads, in flight during this tile's products */
            fa_stage_load<HDP>(rk, H.k, ld, (kt + 1) * FA_T, T, hd, veck);
            fa_stage_load<HDP>(rv, H.v, ld, (kt + 1) * FA_T, T, hd, vecv);
        }
        float s[8][4];
        mma_rows<NKS>(s, qa, sk, g, t);
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int key = kt * FA_T + j * 8 + 2 * t + e;
                s[j][e] = visible(i0, key, T, causal) ? s[j][e] * sl2 : -INFINITY;
                s[j][2 + e] = visible(i1, key, T, causal) ? s[j][2 + e] * sl2 : -INFINITY;
                mx0 = fmaxf(mx0, s[j][e]);
                mx1 = fmaxf(mx1, s[j][2 + e]);
            }
        float mn0 = fmaxf(m0, quad_max(mx0)), mn1 = fmaxf(m1, quad_max(mx1));
        float base0 = mn0 == -INFINITY ? 0.0f : mn0, base1 = mn1 == -INFINITY ? 0.0f : mn1; /* 2^(-inf): 0, not NaN */
        float al0 = exp2f(m0 - base0), al1 = exp2f(m1 - base1);
        float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                s[j][e] = exp2f(s[j][e] - base0);
                s[j][2 + e] = exp2f(s[j][2 + e] - base1);
                rs0 += s[j][e];
                rs1 += s[j][2 + e];
            }
        l0 = l0 * al0 + quad_sum(rs0);
        l1 = l1 * al1 + quad_sum(rs1);
        m0 = mn0;
        m1 = mn1;
#pragma unroll
        for (int nn = 0; nn < NON; nn++) {
            o[nn][0] *= al0;
            o[nn][1] *= al0;
            o[nn][2] *= al1;
            o[nn][3] *= al1;
        }
        mma_p_by_t<HDP>(o, s, svt, g, t);
    }
    store_tile<NON>(o, ctx + (int64_t)b * T * d + (int64_t)hh * hd, d, i0, T, hd, 1.0f / l0, 1.0f / l1, t);
    if (t == 0) {
        float *L = lse2 + ((int64_t)b * h + hh) * T;
        if (i0 < T)
            L[i0] = m0 + log2f(l0);
        if (i1 < T)
            L[i1] = m1 + log2f(l1);
    }
}

/* ---- backward ---------------------------------------------------------------
 * D[(b*h + hh)*T + i] = sum_c dctx[b,i,hh*hd+c] ctx[b,i,hh*hd+c]: one warp per
 * row, in double, lane partials in column order then a fixed butterfly. */
__global__ void flash_rowdot_kernel(int64_t rows, int T, int d, int h, const float *ctx, const float *dctx,
                                    float *D)
{
    const int hd = d / h, lane = threadIdx.x % 32;
    for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < rows;
         w += (int64_t)gridDim.x * blockDim.x / 32) {
        int64_t b = w / ((int64_t)h * T), rem = w % ((int64_t)h * T);
        int hh = (int)(rem / T), i = (int)(rem % T);
        int64_t off = ((int64_t)b * T + i) * d + (int64_t)hh * hd;
        double s = 0.0;
        for (int c = lane; c < hd; c += 32)
            s += (double)dctx[off + c] * ctx[off + c];
        for (int x = 16; x > 0; x >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, x);
        if (lane == 0)
            D[w] = (float)s;
    }
}

/* dK and dV. Block (kt, hh, b): key tile kt, query tiles from the first that
 * sees it to the last, in order. Warp w owns keys kt*64 + 16w .. + 15 and
 * computes S^T = K_w Q^T and dP^T = V_w dO^T (16 keys x 64 queries), then
 * dV += P^T dO and dK += dS^T Q. */
template <int HDP>
__global__ void __launch_bounds__(FA_THREADS) flash_bwd_dkv_kernel(int T, int d, int h, int causal, float sl2,
                                                                   float scale, const float *qkv, const float *dctx,
                                                                   const float *lse2, const float *D, float *dqkv)
{
    constexpr int NKS = HDP / 16, NON = HDP / 8;
    __shared__ __align__(16) bf16 sq[FA_T][HDP + FA_PAD];
    __shared__ __align__(16) bf16 sdo[FA_T][HDP + FA_PAD];
    __shared__ __align__(16) bf16 sqt[HDP][FA_T + FA_PAD];
    __shared__ __align__(16) bf16 sdot[HDP][FA_T + FA_PAD];
    __shared__ float slse[FA_T], sD[FA_T];
    const int nqt = (T + FA_T - 1) / FA_T, kt = blockIdx.x; /* small kt: most query tiles, start first */
    const int hh = blockIdx.y, b = blockIdx.z, hd = d / h;
    const int64_t ld = 3 * (int64_t)d;
    const fa_head H = head_of(T, d, h, b, hh, qkv, dctx, lse2, D);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int j0 = kt * FA_T + warp * 16 + g, j1 = j0 + 8; /* this thread's two key rows */

    fa_stage<HDP> rq, rdo;
    { /* K and V of this key tile, for the A fragments */
        fa_stage_load<HDP>(rq, H.k, ld, kt * FA_T, T, hd, fa_vec_ok(H.k, ld));
        fa_stage_load<HDP>(rdo, H.v, ld, kt * FA_T, T, hd, fa_vec_ok(H.v, ld));
        fa_stage_store<HDP>(sq, rq);
        fa_stage_store<HDP>(sdo, rdo);
    }
    const int qt0 = causal ? kt : 0;
    const bool vecq = fa_vec_ok(H.q, ld), vecdo = fa_vec_ok(H.dO, d);
    fa_stage_load<HDP>(rq, H.q, ld, qt0 * FA_T, T, hd, vecq); /* the first query tile, in flight */
    fa_stage_load<HDP>(rdo, H.dO, d, qt0 * FA_T, T, hd, vecdo);
    const int le = threadIdx.x % FA_T; /* this thread's row of lse2 (threads < 64) or of D (the others) */
    const float *lrow = threadIdx.x < FA_T ? H.L : H.D;
    float rl = qt0 * FA_T + le < T ? lrow[qt0 * FA_T + le] : 0.0f;
    __syncthreads();
    uint32_t ka[NKS][4], va[NKS][4];
#pragma unroll
    for (int kk = 0; kk < NKS; kk++) {
        load_a(ka[kk], sq, warp * 16, kk * 16, g, t);
        load_a(va[kk], sdo, warp * 16, kk * 16, g, t);
    }
    float dk[NON][4], dv[NON][4];
#pragma unroll
    for (int nn = 0; nn < NON; nn++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dk[nn][e] = dv[nn][e] = 0.0f;

    for (int qt = qt0; qt < nqt; qt++) {
        __syncthreads(); /* every warp is done with the previous query tile (and the K/V staging) */
        fa_stage_store<HDP>(sq, rq);
        fa_stage_store<HDP>(sdo, rdo);
        fa_stage_store_t<HDP>(sqt, rq);
        fa_stage_store_t<HDP>(sdot, rdo);
        (threadIdx.x < FA_T ? slse : sD)[le] = rl;
        __syncthreads();
        if (qt + 1 < nqt) { /* the next dO tile's loads, in flight during this tile's products */
            fa_stage_load<HDP>(rdo, H.dO, d, (qt + 1) * FA_T, T, hd, vecdo);
            rl = (qt + 1) * FA_T + le < T ? lrow[(qt + 1) * FA_T + le] : 0.0f;
        }
        float p[8][4], ds[8][4];
        mma_rows<NKS>(p, ka, sq, g, t);   /* S^T */
        mma_rows<NKS>(ds, va, sdo, g, t); /* dP^T */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int qc = j * 8 + 2 * t + e, i = qt * FA_T + qc;
                float L = slse[qc], Dq = sD[qc];
                float p0 = visible(i, j0, T, causal) ? exp2f(p[j][e] * sl2 - L) : 0.0f;
                float p1 = visible(i, j1, T, causal) ? exp2f(p[j][2 + e] * sl2 - L) : 0.0f;
                ds[j][e] = p0 * (ds[j][e] - Dq) * scale;
                ds[j][2 + e] = p1 * (ds[j][2 + e] - Dq) * scale;
                p[j][e] = p0;
                p[j][2 + e] = p1;
            }
        mma_p_by_t<HDP>(dv, p, sdot, g, t);
        if (qt + 1 < nqt) /* the next Q tile's: in the registers p held (all of them at once would spill) */
            fa_stage_load<HDP>(rq, H.q, ld, (qt + 1) * FA_T, T, hd, vecq);
        mma_p_by_t<HDP>(dk, ds, sqt, g, t);
    }
    float *dk0 = dqkv + (int64_t)b * T * ld + d + (int64_t)hh * hd; /* row 0 of this head's dk; dv d further */
    store_tile<NON>(dk, dk0, ld, j0, T, hd, 1.0f, 1.0f, t);
    store_tile<NON>(dv, dk0 + d, ld, j0, T, hd, 1.0f, 1.0f, t);
}

/* dQ. Block (x, hh, b): query tile nqt-1-x, key tiles in order up to the
 * last it sees. Warp w owns queries qt*64 + 16w .. + 15: S = Q_w K^T,
 * dP = dO_w V^T, dQ += dS K. */
template <int HDP>
__global__ void __launch_bounds__(FA_THREADS) flash_bwd_dq_kernel(int T, int d, int h, int causal, float sl2,
                                                                  float scale, const float *qkv, const float *dctx,
                                                                  const float *lse2, const float *D, float *dqkv)
{
    constexpr int NKS = HDP / 16, NON = HDP / 8;
    __shared__ __align__(16) bf16 sk[FA_T][HDP + FA_PAD];
    __shared__ __align__(16) bf16 sv[FA_T][HDP + FA_PAD];
    __shared__ __align__(16) bf16 skt[HDP][FA_T + FA_PAD];
    const int nqt = (T + FA_T - 1) / FA_T, qt = nqt - 1 - (int)blockIdx.x;
    const int hh = blockIdx.y, b = blockIdx.z, hd = d / h;
    const int64_t ld = 3 * (int64_t)d;
    const fa_head H = head_of(T, d, h, b, hh, qkv, dctx, lse2, D);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int i0 = qt * FA_T + warp * 16 + g, i1 = i0 + 8;

    fa_stage<HDP> rk, rv;
    { /* Q and dO of this query tile, for the A fragments */
        fa_stage_load<HDP>(rk, H.q, ld, qt * FA_T, T, hd, fa_vec_ok(H.q, ld));
        fa_stage_load<HDP>(rv, H.dO, d, qt * FA_T, T, hd, fa_vec_ok(H.dO, d));
        fa_stage_store<HDP>(sk, rk);
        fa_stage_store<HDP>(sv, rv);
    }
    const bool veck = fa_vec_ok(H.k, ld), vecv = fa_vec_ok(H.v, ld);
    fa_stage_load<HDP>(rk, H.k, ld, 0, T, hd, veck); /* key tile 0, in flight */
    fa_stage_load<HDP>(rv, H.v, ld, 0, T, hd, vecv);
    __syncthreads();
    uint32_t qa[NKS][4], oa[NKS][4];
#pragma unroll
    for (int kk = 0; kk < NKS; kk++) {
        load_a(qa[kk], sk, warp * 16, kk * 16, g, t);
        load_a(oa[kk], sv, warp * 16, kk * 16, g, t);
    }
    const float L0 = i0 < T ? H.L[i0] : 0.0f, L1 = i1 < T ? H.L[i1] : 0.0f;
    const float D0 = i0 < T ? H.D[i0] : 0.0f, D1 = i1 < T ? H.D[i1] : 0.0f;
    float dq[NON][4];
#pragma unroll
    for (int nn = 0; nn < NON; nn++)
        dq[nn][0] = dq[nn][1] = dq[nn][2] = dq[nn][3] = 0.0f;

    const int nkt = causal ? qt + 1 : nqt;
    for (int kt = 0; kt < nkt; kt++) {
        __syncthreads();
        fa_stage_store<HDP>(sk, rk);
        fa_stage_store<HDP>(sv, rv);
        fa_stage_store_t<HDP>(skt, rk);
        __syncthreads();
        if (kt + 1 < nkt) { /* the next key tile's loads, in flight during this tile's products */
            fa_stage_load<HDP>(rk, H.k, ld, (kt + 1) * FA_T, T, hd, veck);
            fa_stage_load<HDP>(rv, H.v, ld, (kt + 1) * FA_T, T, hd, vecv);
        }
        float s[8][4], ds[8][4];
        mma_rows<NKS>(s, qa, sk, g, t);  /* S */
        mma_rows<NKS>(ds, oa, sv, g, t); /* dP */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int key = kt * FA_T + j * 8 + 2 * t + e;
                float p0 = visible(i0, key, T, causal) ? exp2f(s[j][e] * sl2 - L0) : 0.0f;
                float p1 = visible(i1, key, T, causal) ? exp2f(s[j][2 + e] * sl2 - L1) : 0.0f;
                ds[j][e] = p0 * (ds[j][e] - D0) * scale;
                ds[j][2 + e] = p1 * (ds[j][2 + e] - D1) * scale;
            }
        mma_p_by_t<HDP>(dq, ds, skt, g, t);
    }
    store_tile<NON>(dq, dqkv + (int64_t)b * T * ld + (int64_t)hh * hd, ld, i0, T, hd, 1.0f, 1.0f, t);
}

#endif

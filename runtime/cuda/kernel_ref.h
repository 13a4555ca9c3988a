/* runtime/cuda/kernel_ref.h — host-side C references of the fast CUDA kernel
 * paths' exact arithmetic, and the constants both sides share (runtime/cuda/
 * README.md, "Kernel paths"). Plain C11 that also compiles as C++: the CUDA
 * files include it for the constants, tests/gpu/test_ops_gpu.cu for the
 * references (checked against the CPU backend's ops by tests/gpu_ops_on_cpu.t
 * on every machine, and against the kernels by `make test-gpu` on a GPU).
 *
 *  - Chunked column sums (colsum.cu): the bias, layernorm and batchnorm weight
 *    gradients. Rows are cut into fixed chunks whose size depends on the row
 *    count only; each chunk is summed in row order in double, then the chunk
 *    sums in chunk order in double, one float add into the accumulator. The
 *    GPU kernels do exactly these double additions (no FMA can apply to a sum
 *    of exact products), so they match these references bit for bit.
 *  - Fused attention (flash_attn.cu): the tiled online-softmax forward and the
 *    deterministic backward, with the bf16 roundings where the kernels round
 *    (Q, K, V, dO, P and dS are bf16 tensor-core operands; every sum is f32).
 *    The tensor cores' summation order inside a 16x8x16 product is the
 *    hardware's, so the kernels match these references to rounding, not bit
 *    for bit; the references fix what can go wrong: tiling, masks, the
 *    running max and sum, the rescaling, the saved log-sum-exp, the
 *    backward's D = rowsum(dO o O) and where the scale applies. With the
 *    roundings off they are the f32 attention of runtime/cpu (to f32
 *    rounding), which tests/gpu/test_ops_gpu.cu checks on every machine. */
#ifndef PG_KERNEL_REF_H
#define PG_KERNEL_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- chunked column sums ---------------------------------------------------- */

/* Rows per chunk for n rows: 32 up to 8192 rows, then n/256 rounded up, so
 * there are at most 256 chunks. A function of n only: the same bits for the
 * same micro-batch size on any device. */
static inline int64_t pg_colsum_chunk_rows(int64_t n)
{
    return n <= 8192 ? 32 : (n + 255) / 256;
}

static inline int64_t pg_colsum_nchunks(int64_t n)
{
    int64_t ch = pg_colsum_chunk_rows(n);
    return n > 0 ? (n + ch - 1) / ch : 0;
}

/* acc[m] += column sums of a[n,m], rows in chunks of ch rows: each chunk in
 * row order in double, the chunk sums in chunk order in double, one float
 * add. ch = n (one chunk) is the reference path's (and the CPU's) row order. */
static inline void pg_ref_colsum_acc_ch(int64_t n, int64_t m, int64_t ch, const float *a, float *acc)
{
    for (int64_t j = 0; j < m; j++) {
        double total = 0.0;
        for (int64_t c0 = 0; c0 < n; c0 += ch) {
            double s = 0.0;
            for (int64_t i = c0; i < n && i < c0 + ch; i++)
                s += a[i * m + j];
            total += s;
        }
        acc[j] += (float)total;
    }
}

/* The linear bias gradient as colsum.cu sums it. */
static inline void pg_ref_colsum_acc(int64_t n, int64_t m, const float *a, float *acc)
{
    pg_ref_colsum_acc_ch(n, m, pg_colsum_chunk_rows(n), a, acc);
}

/* Normalisation weight gradients over n rows of x[n,m] in chunks of ch rows:
 * dw[j] += sum dy xhat, db[j] += sum dy, xhat = (x - mean) rstd in float.
 * Layer norm has per-row statistics (mean[i], rstd[i]), batch norm per-column
 * ones (mean[j], rstd[j]): stats_per_row says which. dw or db may be NULL. */
static inline void pg_ref_norm_bwd_w_ch(int64_t n, int64_t m, int64_t ch, int stats_per_row, const float *x,
                                        const float *mean, const float *rstd, const float *dy, float *dw, float *db)
{
    for (int64_t j = 0; j < m; j++) {
        double tw = 0.0, tb = 0.0;
        for (int64_t c0 = 0; c0 < n; c0 += ch) {
            double sw = 0.0, sb = 0.0;
            for (int64_t i = c0; i < n && i < c0 + ch; i++) {
                int64_t k = i * m + j, st = stats_per_row ? i : j;
                float xh = (x[k] - mean[st]) * rstd[st];
                float g = dy[k];
                sw += (double)g * xh;
                sb += g;
            }
            tw += sw;
            tb += sb;
        }
        if (dw)
            dw[j] += (float)tw;
        if (db)
            db[j] += (float)tb;
    }
}

/* The layernorm / batchnorm weight gradients as colsum.cu sums them. */
static inline void pg_ref_norm_bwd_w(int64_t n, int64_t m, int stats_per_row, const float *x, const float *mean,
                                     const float *rstd, const float *dy, float *dw, float *db)
{
    pg_ref_norm_bwd_w_ch(n, m, pg_colsum_chunk_rows(n), stats_per_row, x, mean, rstd, dy, dw, db);
}

/* ---- the replicas' gradient sum ---------------------------------------------- */

/* g[e] = x[0][e] + x[1][e] + ... + x[D-1][e], one float addition after another
 * in replica order (g may be one of the x[q]): runtime/core/dp.c's sum on the
 * CPU, and what dp_sum.cuh's kernel computes on the GPU (the NCCL path of
 * dp_nccl.cu), so the two paths give the same bits. */
static inline void pg_ref_dp_sum(float *g, const float *const *x, int D, int64_t n)
{
    for (int64_t e = 0; e < n; e++) {
        float v = x[0][e];
        for (int q = 1; q < D; q++)
            v += x[q][e];
        g[e] = v;
    }
}

/* ---- bf16 ------------------------------------------------------------------- */

/* x rounded to bf16 (round to nearest, ties to even; NaN stays NaN), as a float:
 * what __float2bfloat16_rn gives. */
static inline float pg_ref_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) {
        u |= 0x00400000u; /* quiet NaN */
    } else {
        u += 0x7fffu + ((u >> 16) & 1u);
    }
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* Leading dimension (elements) of a bf16 operand copy whose source leading
 * dimension ld is not a multiple of 8 elements (16 bytes, the alignment the
 * tensor-core GEMMs need; GPT-2's vocabulary 50257 is the case): padded to a
 * multiple of 64 elements. Other leading dimensions are kept. */
static inline int64_t pg_bf16_padded_ld(int64_t rows, int64_t ld)
{
    if (ld % 8 == 0)
        return ld;
    return (rows + 63) / 64 * 64;
}

/* ---- fused attention -------------------------------------------------------- */

#define PG_FLASH_BQ 64    /* query rows per tile (and per block) */
#define PG_FLASH_BK 64    /* key rows per tile */
#define PG_FLASH_WARPS 4  /* 16 rows of the tile per warp */
#define PG_FLASH_MAX_HD 64

/* The head dimension the kernels compute with: hd padded with zeros to 16,
 * 32 or 64 (0: hd > 64, the fused path does not apply; its register tiles
 * would spill, see flash_attn.cu). */
static inline int pg_flash_hdp(int64_t hd)
{
    return hd <= 0 ? 0 : hd <= 16 ? 16 : hd <= 32 ? 32 : hd <= 64 ? 64 : 0;
}

/* (float)(1/sqrt(hd)) and that times log2(e): scores are kept in base 2. */
static inline float pg_flash_scale(int64_t hd) { return (float)(1.0 / sqrt((double)hd)); }
static inline float pg_flash_scale_log2(int64_t hd) { return pg_flash_scale(hd) * 1.44269504088896341f; }

/* Whether query i sees key j. */
static inline int pg_flash_visible(int64_t i, int64_t j, int64_t T, int causal)
{
    return i < T && j < T && (!causal || j <= i);
}

/* bf16 rounding where the kernels round a tensor-core operand (bf16 = 1), or
 * none (bf16 = 0: the same algorithm in f32, which must then agree with the
 * unfused f32 attention to f32 rounding; that checks the algebra). */
static inline float pg_ref_round(float x, int bf16) { return bf16 ? pg_ref_bf16(x) : x; }

/* One head of one sample: q, k, v, o rows `ld` floats apart (q[i*ld + c],
 * c < hd). Writes o[T, hd] (same ld) and lse2[T] = the base-2 log-sum-exp of
 * the scaled scores (what the backward recomputes the probabilities from).
 * Per query tile, key tiles in order (up to the diagonal tile when causal):
 * S = q k^T (f32 sums of rounded operands), s2 = S * scale_log2 (masked:
 * -inf), m' = max(m, max s2), alpha = 2^(m - m'), p = 2^(s2 - m'),
 * l = l alpha + sum p, O = O alpha + p v (p and v rounded); at the end
 * o = O * (1/l), lse2 = m + log2(l). */
static inline void pg_ref_flash_fwd_head(int64_t T, int64_t hd, int causal, int bf16, int64_t ld, const float *q,
                                         const float *k, const float *v, float *o, float *lse2)
{
    const float sl2 = pg_flash_scale_log2(hd);
    float s2[PG_FLASH_BK], p[PG_FLASH_BK];
    int64_t nt = (T + PG_FLASH_BK - 1) / PG_FLASH_BK;
    for (int64_t i = 0; i < T; i++) {
        int64_t qt = i / PG_FLASH_BQ, last = causal ? qt : nt - 1;
        float m = -INFINITY, l = 0.0f, *acc = o + i * ld; /* the row's accumulator is its output */
        for (int64_t c = 0; c < hd; c++)
            acc[c] = 0.0f;
        for (int64_t kt = 0; kt <= last; kt++) {
            float mt = -INFINITY;
            for (int64_t jj = 0; jj < PG_FLASH_BK; jj++) {
                int64_t j = kt * PG_FLASH_BK + jj;
                s2[jj] = -INFINITY;
                if (!pg_flash_visible(i, j, T, causal))
                    continue;
                float s = 0.0f;
                for (int64_t c = 0; c < hd; c++)
                    s += pg_ref_round(q[i * ld + c], bf16) * pg_ref_round(k[j * ld + c], bf16);
                s2[jj] = s * sl2;
                mt = fmaxf(mt, s2[jj]);
            }
            float mn = fmaxf(m, mt);
            float base = mn == -INFINITY ? 0.0f : mn; /* nothing visible yet: 2^(-inf) = 0, never NaN */
            float alpha = exp2f(m - base);
            float rs = 0.0f;
            for (int64_t jj = 0; jj < PG_FLASH_BK; jj++) {
                p[jj] = exp2f(s2[jj] - base);
                rs += p[jj];
            }
            l = l * alpha + rs;
            for (int64_t c = 0; c < hd; c++) {
                float s = 0.0f;
                for (int64_t jj = 0; jj < PG_FLASH_BK; jj++) {
                    int64_t j = kt * PG_FLASH_BK + jj;
                    if (j < T)
                        s += pg_ref_round(p[jj], bf16) * pg_ref_round(v[j * ld + c], bf16);
                }
                acc[c] = acc[c] * alpha + s;
            }
            m = mn;
        }
        float inv = 1.0f / l;
        for (int64_t c = 0; c < hd; c++)
            acc[c] *= inv;
        lse2[i] = m + log2f(l);
    }
}

/* D[i] = sum_c dO[i,c] o[i,c] in double, as a float: the row term of the
 * softmax backward (equal to sum_j P_ij dP_ij). */
static inline float pg_ref_flash_rowdot(int64_t hd, const float *dO, const float *o)
{
    double s = 0.0;
    for (int64_t c = 0; c < hd; c++)
        s += (double)dO[c] * o[c];
    return (float)s;
}

/* The backward of one head: D[i] (pg_ref_flash_rowdot of the f32 o and dO),
 * P = 2^(S scale_log2 - lse2[i]) (0 where masked), dP = dO v^T (rounded
 * operands), dS = P (dP - D) scale (rounded); dv = P^T dO (P rounded),
 * dk = dS^T q, dq = dS k. Writes dq, dk, dv (rows ld apart). */
static inline void pg_ref_flash_bwd_head(int64_t T, int64_t hd, int causal, int bf16, int64_t ld, const float *q,
                                         const float *k, const float *v, const float *o, const float *dO,
                                         const float *lse2, float *dq, float *dk, float *dv)
{
    const float scale = pg_flash_scale(hd), sl2 = pg_flash_scale_log2(hd);
    for (int64_t i = 0; i < T; i++)
        for (int64_t c = 0; c < hd; c++)
            dq[i * ld + c] = dk[i * ld + c] = dv[i * ld + c] = 0.0f;
    for (int64_t i = 0; i < T; i++) {
        float D = pg_ref_flash_rowdot(hd, dO + i * ld, o + i * ld);
        for (int64_t j = 0; j < T; j++) {
            if (!pg_flash_visible(i, j, T, causal))
                continue;
            float s = 0.0f, dp = 0.0f;
            for (int64_t c = 0; c < hd; c++) {
                s += pg_ref_round(q[i * ld + c], bf16) * pg_ref_round(k[j * ld + c], bf16);
                dp += pg_ref_round(dO[i * ld + c], bf16) * pg_ref_round(v[j * ld + c], bf16);
            }
            float p = exp2f(s * sl2 - lse2[i]);
            float ds = pg_ref_round(p * (dp - D) * scale, bf16), pb = pg_ref_round(p, bf16);
            for (int64_t c = 0; c < hd; c++) {
                dv[j * ld + c] += pb * pg_ref_round(dO[i * ld + c], bf16);
                dk[j * ld + c] += ds * pg_ref_round(q[i * ld + c], bf16);
                dq[i * ld + c] += ds * pg_ref_round(k[j * ld + c], bf16);
            }
        }
    }
}

#endif

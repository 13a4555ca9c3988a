/* runtime/cuda/attention.cu — multi-head self-attention, x[r,T,d], h heads of
 * hd = d/h, as runtime/cpu/attention.c:
 *   qkv = x Wqkv^T + bqkv               [r,T,3d]: q, k, v in columns [0,d) [d,2d) [2d,3d)
 *   att = softmax(q k^T / sqrt(hd))     [r,h,T,T]: per head, causal mask j > i -> 0
 *   ctx = att v, heads merged           [r,T,d]
 *   y   = ctx Wo^T + bo                 [r,T,d]
 * Per-head products are strided-batched GEMMs (pg_cuda_gemm, linear.cu) on strided views (no
 * copies), one call per sample batched over the h heads (head h+1's q/k/v/ctx
 * start hd floats later, its att/score block T*T later), so a call's shape
 * never depends on r and a sample's bits do not depend on how many samples
 * share the micro-batch. Softmax forward/backward are row kernels (one block
 * per row, fixed tree). The backward needs one sample's score gradients
 * [h,T,T], kept in the context's scratch workspace.
 *
 * With precision = bf16 (and the PG_CUDA_K_FLASH path on, head dim <= 64)
 * the middle of both passes is the fused attention of flash_attn.cu instead:
 * no [T,T] scores in memory; `att` then holds only the base-2 log-sum-exp
 * per row, lse2[r,h,T], in its first r*h*T floats, for the backward.
 *
 * Row-major <-> column-major (see linear.cu): a row-major M[R,C] with ld L is
 * the column-major M^T[C,R] with ld L; each mapping is derived at its call. */
#include <math.h>

#include "attn_rows.cuh"
#include "cuda_common.h"
#include "op_args.h"


int pg_attention_fwd(pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal,
                     const float *x, const float *wqkv, const float *bqkv,
                     const float *wo, const float *bo,
                     float *qkv, float *att, float *ctxbuf, float *y)
{
    if (pg_args_attention("attention_fwd", r, T, d, h))
        return 1;
    int64_t hd = d / h, d3 = 3 * d;
    float scale = (float)(1.0 / sqrt((double)hd));
    const float one = 1.0f, zero = 0.0f;
    if (pg_linear_fwd(c, r * T, d, d3, x, wqkv, bqkv, qkv))
        return 1;
    if (r == 0)
        return pg_linear_fwd(c, 0, d, d, ctxbuf, wo, bo, y);
    if (pg_cuda_flash_applies(c, d, h)) {
        if (pg_cuda_flash_fwd(c, r, T, d, h, causal, qkv, ctxbuf, att))
            return 1;
        return pg_linear_fwd(c, r * T, d, d, ctxbuf, wo, bo, y);
    }
    /* S[T,T] = scale q[T,hd] k[T,hd]^T (q, k with ld 3d), per head.
     * Column-major S^T = k q^T: A = k (read as k^T[hd,T], op T), B = q (read
     * as q^T[hd,T], op N), C = S (read as S^T, ld T); m = n = T, kdim = hd. */
    for (int64_t b = 0; b < r; b++) {
        const float *q = qkv + b * T * d3, *k = q + d;
        if (pg_cuda_gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, (int)T, (int)T, (int)hd,
                            &scale, k, (int)d3, hd, q, (int)d3, hd,
                            &zero, att + b * h * T * T, (int)T, T * T, (int)h))
            return 1;
    }
    int64_t rows = r * h * T;
    softmax_rows_kernel<<<row_blocks(rows), PG_CUDA_RED_THREADS, 0, c->stream>>>(rows, T, causal, att);
    LAUNCH_CHECK("softmax_rows_kernel");
    /* ctx[T,hd] (ld d) = att[T,T] v[T,hd] (v with ld 3d), per head.
     * Column-major ctx^T = v^T att^T: A = v (read as v^T[hd,T], op N), B = att
     * (read as att^T, op N), C = ctx (read as ctx^T[hd,T], ld d); m = hd, n = kdim = T. */
    for (int64_t b = 0; b < r; b++) {
        const float *v = qkv + b * T * d3 + 2 * d;
        if (pg_cuda_gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, (int)hd, (int)T, (int)T,
                            &one, v, (int)d3, hd, att + b * h * T * T, (int)T, T * T,
                            &zero, ctxbuf + b * T * d, (int)d, hd, (int)h))
            return 1;
    }
    return pg_linear_fwd(c, r * T, d, d, ctxbuf, wo, bo, y);
}

/* dctx = dy Wo; per head: dv = att^T dctx, datt = dctx v^T,
 * ds = att (datt - rowsum(att datt)) / sqrt(hd), dq = ds k, dk = ds^T q;
 * dx = dqkv Wqkv. */
int pg_attention_bwd_in(pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal,
                        const float *wqkv, const float *wo,
                        const float *qkv, const float *att, const float *ctxbuf, const float *dy,
                        float *dctx, float *dqkv, float *dx)
{
    if (pg_args_attention("attention_bwd_in", r, T, d, h))
        return 1;
    int64_t hd = d / h, d3 = 3 * d;
    float scale = (float)(1.0 / sqrt((double)hd));
    const float one = 1.0f, zero = 0.0f;
    if (pg_linear_bwd_in(c, r * T, d, d, dy, wo, dctx))
        return 1;
    if (pg_cuda_flash_applies(c, d, h)) { /* att holds lse2 (the forward took the same path) */
        if (pg_cuda_flash_bwd(c, r, T, d, h, causal, qkv, ctxbuf, dctx, att, dqkv))
            return 1;
        return pg_linear_bwd_in(c, r * T, d, d3, dqkv, wqkv, dx);
    }
    void *ws = NULL;
    if (r > 0 && pg_cuda_scratch(c, (size_t)(h * T * T) * sizeof(float), &ws))
        return 1;
    float *ds = (float *)ws; /* [h,T,T]: one sample's score gradients */
    for (int64_t b = 0; b < r; b++) {
        const float *q = qkv + b * T * d3, *k = q + d, *v = q + 2 * d;
        float *dq = dqkv + b * T * d3, *dk = dq + d, *dv = dq + 2 * d;
        const float *a = att + b * h * T * T;
        const float *dc = dctx + b * T * d;
        /* dv[T,hd] (ld 3d) = att^T dctx. Column-major dv^T = dctx^T att:
         * A = dctx (read as dctx^T[hd,T], ld d, op N), B = att (read as att^T,
         * op T gives att), C = dv (read as dv^T, ld 3d); m = hd, n = kdim = T. */
        if (pg_cuda_gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, (int)hd, (int)T, (int)T,
                            &one, dc, (int)d, hd, a, (int)T, T * T,
                            &zero, dv, (int)d3, hd, (int)h))
            return 1;
        /* datt[T,T] = dctx[T,hd] v[T,hd]^T. Column-major datt^T = v dctx^T:
         * A = v (read as v^T, op T), B = dctx (read as dctx^T, op N), C = datt
         * (read as datt^T, ld T); m = n = T, kdim = hd. */
        if (pg_cuda_gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, (int)T, (int)T, (int)hd,
                            &one, v, (int)d3, hd, dc, (int)d, hd,
                            &zero, ds, (int)T, T * T, (int)h))
            return 1;
        softmax_bwd_rows_kernel<<<row_blocks(h * T), PG_CUDA_RED_THREADS, 0, c->stream>>>(h * T, T, causal, scale, a, ds);
        LAUNCH_CHECK("softmax_bwd_rows_kernel");
        /* dq[T,hd] (ld 3d) = ds[T,T] k[T,hd]. Column-major dq^T = k^T ds^T:
         * A = k (read as k^T, op N), B = ds (read as ds^T, op N), C = dq (ld 3d). */
        if (pg_cuda_gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, (int)hd, (int)T, (int)T,
                            &one, k, (int)d3, hd, ds, (int)T, T * T,
                            &zero, dq, (int)d3, hd, (int)h))
            return 1;
        /* dk[T,hd] (ld 3d) = ds^T q. Column-major dk^T = q^T ds:
         * A = q (read as q^T, op N), B = ds (read as ds^T, op T gives ds), C = dk. */
        if (pg_cuda_gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, (int)hd, (int)T, (int)T,
                            &one, q, (int)d3, hd, ds, (int)T, T * T,
                            &zero, dk, (int)d3, hd, (int)h))
            return 1;
    }
    return pg_linear_bwd_in(c, r * T, d, d3, dqkv, wqkv, dx);
}

/* dWo += dy^T ctx, dbo += sum dy; dWqkv += dqkv^T x, dbqkv += sum dqkv. */
int pg_attention_bwd_w(pg_ctx *c, int64_t r, int64_t T, int64_t d,
                       const float *x, const float *ctxbuf, const float *dy, const float *dqkv,
                       float *dwqkv, float *dbqkv, float *dwo, float *dbo)
{
    if (r < 0 || T <= 0 || d <= 0)
        return PG_RT_FAIL("attention_bwd_w: bad sizes r=%lld T=%lld d=%lld",
                          (long long)r, (long long)T, (long long)d);
    if (pg_linear_bwd_w(c, r * T, d, d, ctxbuf, dy, dwo, dbo))
        return 1;
    return pg_linear_bwd_w(c, r * T, d, 3 * d, x, dqkv, dwqkv, dbqkv);
}

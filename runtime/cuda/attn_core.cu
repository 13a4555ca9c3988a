/* runtime/cuda/attn_core.cu — attention's core over projected q, k, v
 * (pg_ops.h's pg_attn_*), as runtime/cpu/attention.c: grouped-query heads
 * (query head i reads key/value head i / (heads / kv_heads)), rotary
 * positions (Llama's half split, cos and sin of the float angle), dropout on
 * the probabilities with pg_dropout_fwd's masks. Per sample and key/value
 * head, the query heads of the group are one strided-batched GEMM against
 * the shared key or value (stride 0), so a call's shape never depends on r;
 * the sums over a group (dk, dv) are GEMMs with beta 1 in head order. The
 * softmax rows are attn_rows.cuh's. Scratch: one sample's [h,T,T] score
 * gradients, and its dropped probabilities when p > 0. */
#include <math.h>

#include "attn_rows.cuh"
#include "cuda_common.h"
#include "op_args.h"

/* One (row, head, pair j) of q (heads hq) or k (heads hk): (a, b) -> (a c - b s,
 * b c + a s), or back (a c + b s, b c - a s); the angle as the CPU makes it. */
__global__ void rope_kernel(int64_t rows, int64_t T, int64_t hq, int64_t hk, int64_t hd, float theta, float *q,
                            int64_t ldq, float *k, int64_t ldk, int inverse)
{
    int64_t half = hd / 2, per = (hq + hk) * half;
    PG_GRID_STRIDE(idx, rows * per) {
        int64_t row = idx / per, rem = idx - row * per, head = rem / half, j = rem - head * half;
        float e = __fdiv_rn((float)(2 * j), (float)hd);
        float inv = __fdiv_rn(1.0f, (float)pow((double)theta, (double)e));
        float ang = __fmul_rn((float)(row % T), inv);
        float cs = (float)cos((double)ang), sn = (float)sin((double)ang);
        float *x = head < hq ? q + row * ldq + head * hd : k + row * ldk + (head - hq) * hd;
        float x1 = x[j], x2 = x[j + half];
        if (inverse) {
            x[j] = __fadd_rn(__fmul_rn(x1, cs), __fmul_rn(x2, sn));
            x[j + half] = __fsub_rn(__fmul_rn(x2, cs), __fmul_rn(x1, sn));
        } else {
            x[j] = __fsub_rn(__fmul_rn(x1, cs), __fmul_rn(x2, sn));
            x[j + half] = __fadd_rn(__fmul_rn(x2, cs), __fmul_rn(x1, sn));
        }
    }
}

/* One sample's [h,T,T] block dropped as pg_dropout_fwd drops element k of the
 * sample (k = (head T + i) T + j), kept values scaled; dst may be src. */
__global__ void attn_drop_kernel(int64_t count, float p, float keep, uint64_t key, int64_t sample, const float *src,
                                 float *dst)
{
    uint64_t rowkey = pg_splitmix64(key + (uint64_t)sample);
    PG_GRID_STRIDE(k, count) {
        float u = pg_unit24(pg_splitmix64(rowkey + (uint64_t)k));
        dst[k] = u >= p ? __fmul_rn(src[k], keep) : 0.0f;
    }
}

static int rope(pg_ctx *c, int64_t r, const pg_attn_dims *s, float *q, float *k, int inverse)
{
    int64_t count = r * s->T * (s->heads + s->kv_heads) * (s->hd / 2);
    if (s->rope_theta <= 0 || count == 0)
        return 0;
    rope_kernel<<<pg_cuda_blocks(count, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(
        r * s->T, s->T, s->heads, s->kv_heads, s->hd, s->rope_theta, q, s->ldq, k, s->ldk, inverse);
    LAUNCH_CHECK("rope_kernel");
    return 0;
}

static int drop(pg_ctx *c, const pg_attn_dims *s, float p, uint64_t seed, int64_t sample, const float *src, float *dst)
{
    int64_t count = s->heads * s->T * s->T;
    attn_drop_kernel<<<pg_cuda_blocks(count, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(
        count, p, 1.0f / (1.0f - p), pg_splitmix64(seed), sample, src, dst);
    LAUNCH_CHECK("attn_drop_kernel");
    return 0;
}

static int attn_args(pg_ctx *c, const char *op, int64_t r, const pg_attn_dims *s, float p)
{
    if (r < 0 || s->T <= 0 || s->heads <= 0 || s->kv_heads <= 0 || s->hd <= 0 || s->heads % s->kv_heads != 0 ||
        !pg_args_dim_ok(r * s->T) || !pg_args_dim_ok(s->heads * s->hd) || !pg_args_dim_ok(s->T * s->T) ||
        !(p >= 0.0f && p < 1.0f) || s->ldq < s->heads * s->hd || s->ldk < s->kv_heads * s->hd ||
        s->ldv < s->kv_heads * s->hd || (s->rope_theta > 0 && s->hd % 2 != 0))
        return PG_RT_FAIL("%s: bad sizes r=%lld T=%lld heads=%lld kv_heads=%lld hd=%lld p=%g (need kv_heads "
                          "dividing heads, p in [0, 1), row strides of at least the heads' columns, an even "
                          "head size with rope)", op, (long long)r, (long long)s->T, (long long)s->heads,
                          (long long)s->kv_heads, (long long)s->hd, (double)p);
    /* the masks' seed is a per-step host value: a graph would replay one step's */
    if (p > 0.0f && pg_cuda_graph_blocker(c, "attention dropout (its seed is a per-step host value)"))
        return 1;
    return 0;
}

int pg_attn_fwd(pg_ctx *c, int64_t r, const pg_attn_dims *s, float p, uint64_t seed, int64_t first_sample,
                float *q, float *k, const float *v, float *att, float *ctx)
{
    if (attn_args(c, "attn_fwd", r, s, p))
        return 1;
    if (r == 0)
        return 0;
    int64_t T = s->T, h = s->heads, hd = s->hd, d = h * hd, grp = h / s->kv_heads;
    float scale = (float)(1.0 / sqrt((double)hd));
    const float one = 1.0f, zero = 0.0f;
    if (rope(c, r, s, q, k, 0))
        return 1;
    /* S[T,T] = scale q k^T per head; column-major S^T = k q^T (see attention.cu): A = k
     * (stride 0 over the group), B = the group's q heads (stride hd), C = their att blocks */
    for (int64_t b = 0; b < r; b++)
        for (int64_t g = 0; g < s->kv_heads; g++)
            if (pg_cuda_gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, (int)T, (int)T, (int)hd, &scale, k + b * T * s->ldk + g * hd,
                             (int)s->ldk, 0, q + b * T * s->ldq + g * grp * hd, (int)s->ldq, hd, &zero,
                             att + (b * h + g * grp) * T * T, (int)T, T * T, (int)grp))
                return 1;
    softmax_rows_kernel<<<row_blocks(r * h * T), PG_CUDA_RED_THREADS, 0, c->stream>>>(r * h * T, T, s->causal, att);
    LAUNCH_CHECK("softmax_rows_kernel");
    void *ws = NULL;
    if (p > 0.0f && pg_cuda_scratch(c, (size_t)(h * T * T) * sizeof(float), &ws))
        return 1;
    for (int64_t b = 0; b < r; b++) {
        const float *P = att + b * h * T * T;
        if (p > 0.0f) {
            if (drop(c, s, p, seed, first_sample + b, P, (float *)ws))
                return 1;
            P = (const float *)ws;
        }
        /* ctx[T,hd] (ld d) = P v; column-major ctx^T = v^T P^T: A = v (stride 0), B = P */
        for (int64_t g = 0; g < s->kv_heads; g++)
            if (pg_cuda_gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, (int)hd, (int)T, (int)T, &one, v + b * T * s->ldv + g * hd,
                             (int)s->ldv, 0, P + g * grp * T * T, (int)T, T * T, &zero, ctx + b * T * d + g * grp * hd,
                             (int)d, hd, (int)grp))
                return 1;
    }
    return 0;
}

int pg_attn_bwd(pg_ctx *c, int64_t r, const pg_attn_dims *s, float p, uint64_t seed, int64_t first_sample,
                const float *q, const float *k, const float *v, const float *att, const float *dctx,
                float *dq, float *dk, float *dv)
{
    if (attn_args(c, "attn_bwd", r, s, p))
        return 1;
    if (r == 0)
        return 0;
    int64_t T = s->T, h = s->heads, hd = s->hd, d = h * hd, grp = h / s->kv_heads;
    float scale = (float)(1.0 / sqrt((double)hd));
    const float one = 1.0f, zero = 0.0f;
    void *ws = NULL;
    if (pg_cuda_scratch(c, (size_t)((p > 0.0f ? 2 : 1) * h * T * T) * sizeof(float), &ws))
        return 1;
    float *ds = (float *)ws, *pd = ds + h * T * T; /* [h,T,T] each: one sample's */
    for (int64_t b = 0; b < r; b++) {
        const float *a = att + b * h * T * T, *P = a, *dc = dctx + b * T * d;
        if (p > 0.0f) {
            if (drop(c, s, p, seed, first_sample + b, a, pd))
                return 1;
            P = pd;
        }
        for (int64_t g = 0; g < s->kv_heads; g++) {
            const float *vg = v + b * T * s->ldv + g * hd;
            float *dvg = dv + b * T * s->ldv + g * hd;
            /* dv_g = sum over the group of P^T dctx; column-major dv^T = dctx^T P: A = dctx, B = P (op T) */
            for (int64_t i = 0; i < grp; i++) {
                int64_t hh = g * grp + i;
                if (pg_cuda_gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, (int)hd, (int)T, (int)T, &one, dc + hh * hd, (int)d, 0,
                                 P + hh * T * T, (int)T, 0, i ? &one : &zero, dvg, (int)s->ldv, 0, 0))
                    return 1;
            }
            /* dP[T,T] = dctx v^T; column-major dP^T = v dctx^T: A = v (op T, stride 0), B = the group's dctx */
            if (pg_cuda_gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, (int)T, (int)T, (int)hd, &one, vg, (int)s->ldv, 0,
                             dc + g * grp * hd, (int)d, hd, &zero, ds + g * grp * T * T, (int)T, T * T, (int)grp))
                return 1;
        }
        if (p > 0.0f && drop(c, s, p, seed, first_sample + b, ds, ds))
            return 1;
        softmax_bwd_rows_kernel<<<row_blocks(h * T), PG_CUDA_RED_THREADS, 0, c->stream>>>(h * T, T, s->causal, scale,
                                                                                           a, ds);
        LAUNCH_CHECK("softmax_bwd_rows_kernel");
        for (int64_t g = 0; g < s->kv_heads; g++) {
            const float *kg = k + b * T * s->ldk + g * hd;
            float *dkg = dk + b * T * s->ldk + g * hd;
            /* dq = ds k; column-major dq^T = k^T ds^T: A = k (stride 0), B = the group's ds */
            if (pg_cuda_gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, (int)hd, (int)T, (int)T, &one, kg, (int)s->ldk, 0,
                             ds + g * grp * T * T, (int)T, T * T, &zero, dq + b * T * s->ldq + g * grp * hd,
                             (int)s->ldq, hd, (int)grp))
                return 1;
            /* dk_g = sum over the group of ds^T q; column-major dk^T = q^T ds: A = q, B = ds (op T) */
            for (int64_t i = 0; i < grp; i++) {
                int64_t hh = g * grp + i;
                if (pg_cuda_gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, (int)hd, (int)T, (int)T, &one,
                                 q + b * T * s->ldq + hh * hd, (int)s->ldq, 0, ds + hh * T * T, (int)T, 0,
                                 i ? &one : &zero, dkg, (int)s->ldk, 0, 0))
                    return 1;
            }
        }
    }
    return rope(c, r, s, dq, dk, 1); /* back to the unrotated q and k */
}

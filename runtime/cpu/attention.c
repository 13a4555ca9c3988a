/* runtime/cpu/attention.c — multi-head self-attention, x[r,T,d], h heads of
 * hd = d/h. As GPT-2's attention block:
 *   qkv = x Wqkv^T + bqkv               [r,T,3d]: q, k, v in columns [0,d) [d,2d) [2d,3d)
 *   att = softmax(q k^T / sqrt(hd))     [r,h,T,T]: per head, causal mask j > i -> 0
 *   ctx = att v, heads merged           [r,T,d]
 *   y   = ctx Wo^T + bo                 [r,T,d]
 * The per-head products are GEMM calls on strided views (no copies), with
 * shapes that do not depend on r, so a sample's bits do not depend on how many
 * samples share the call; the (sample, head) pairs are spread over the
 * backend's threads (pg_cpu_parallel), each computed whole by one thread. The
 * softmax backward works on blocks of score rows in a bounded stack buffer,
 * because the interface gives no [T,T] workspace. */
#include <math.h>

#include "cpu_kernels.h"
#include "op_args.h"

/* Softmax of one score row in place over [0, len); entries [len, T) become 0.
 * The exponentials go through pg_cpu_exp_blk in blocks (the last one padded),
 * the sum in double in index order. */
static void softmax_row(float *a, int64_t len, int64_t T)
{
    float m = a[0];
    for (int64_t j = 1; j < len; j++)
        if (a[j] > m)
            m = a[j];
    double s = 0.0;
    for (int64_t j0 = 0; j0 < len; j0 += PG_CPU_EXP_BLK) {
        int64_t nb = len - j0 < PG_CPU_EXP_BLK ? len - j0 : PG_CPU_EXP_BLK;
        float e[PG_CPU_EXP_BLK] = {0};
        for (int64_t j = 0; j < nb; j++)
            e[j] = a[j0 + j] - m;
        pg_cpu_exp_blk(e);
        for (int64_t j = 0; j < nb; j++) {
            a[j0 + j] = e[j];
            s += e[j];
        }
    }
    float inv = (float)(1.0 / s);
    for (int64_t j = 0; j < len; j++)
        a[j] *= inv;
    for (int64_t j = len; j < T; j++)
        a[j] = 0.0f;
}

/* One (sample, head) of the forward: scores, softmax, context. */
typedef struct attn_fwd_job {
    pg_ctx *c;
    int64_t T, d, h, causal;
    float scale;
    const float *qkv;
    float *att, *ctxbuf;
} attn_fwd_job;

static void attn_fwd_head(void *arg, int64_t t)
{
    const attn_fwd_job *j = arg;
    int64_t T = j->T, d = j->d, h = j->h, hd = d / h, d3 = 3 * d, b = t / h, hh = t % h;
    const float *q = j->qkv + b * T * d3 + hh * hd; /* [T, hd], row stride 3d */
    const float *k = q + d, *v = q + 2 * d;
    float *a = j->att + (b * h + hh) * T * T;       /* [T, T] */
    float *cx = j->ctxbuf + b * T * d + hh * hd;    /* [T, hd], row stride d */
    pg_cpu_gemm(j->c, 0, 1, T, T, hd, j->scale, q, d3, k, d3, 0, a, T);
    for (int64_t i = 0; i < T; i++)
        softmax_row(a + i * T, j->causal ? i + 1 : T, T);
    pg_cpu_gemm(j->c, 0, 0, T, hd, T, 1.0f, a, T, v, d3, 0, cx, d);
}

/* The (sample, head) pairs run on the backend's threads: each writes its own
 * slices of att and ctx, with the same operations on any thread. */
int pg_attention_fwd(pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal,
                     const float *x, const float *wqkv, const float *bqkv,
                     const float *wo, const float *bo,
                     float *qkv, float *att, float *ctxbuf, float *y)
{
    if (pg_args_attention("attention_fwd", r, T, d, h))
        return 1;
    int64_t d3 = 3 * d;
    if (pg_linear_fwd(c, r * T, d, d3, x, wqkv, bqkv, qkv))
        return 1;
    attn_fwd_job j = {c, T, d, h, causal, (float)(1.0 / sqrt((double)(d / h))), qkv, att, ctxbuf};
    pg_cpu_parallel(c, r * h, attn_fwd_head, &j);
    return pg_linear_fwd(c, r * T, d, d, ctxbuf, wo, bo, y);
}

/* The softmax backward works on blocks of score rows in ATT_WS_FLOATS floats
 * of stack (64 KiB; no [T,T] workspace comes through the interface): a block
 * holds rb = min(T, ATT_WS_FLOATS / T) rows of T scores (all of them for
 * T <= 128). Block sizes depend on T alone, so a sample's bits do not depend on
 * r or on its place in the micro-batch. */
#define ATT_WS_FLOATS 16384

/* dctx = dy Wo; per head: dv = att^T dctx; per block of rows i:
 *   S = dctx_i v^T,  D_i = sum_j att_ij S_ij (= dctx_i . ctx_i; double, j in order),
 *   ds_ij = att_ij (S_ij - D_i) / sqrt(hd),  dq_i = ds_i k,  dk += ds_i^T q_i
 * (ds is 0 past a row's causal limit; with a causal mask, the columns past the
 * block's last row are left out of the products);
 * then dx = dqkv Wqkv. Every product is one GEMM with shapes set by T, hd and
 * the block alone. attn_bwd_head is one (sample, head), its score rows in
 * blocks on the stack of the thread that runs it. */
typedef struct attn_bwd_job {
    pg_ctx *c;
    int64_t T, d, h, causal, rb;
    float scale;
    const float *qkv, *att, *dctx;
    float *dqkv;
} attn_bwd_job;

static void attn_bwd_head(void *arg, int64_t t)
{
    const attn_bwd_job *j = arg;
    pg_ctx *c = j->c;
    int64_t T = j->T, d = j->d, h = j->h, hd = d / h, d3 = 3 * d, rb = j->rb, b = t / h, hh = t % h;
    float S[ATT_WS_FLOATS];
    const float *q = j->qkv + b * T * d3 + hh * hd;
    const float *k = q + d, *v = q + 2 * d;
    float *dq = j->dqkv + b * T * d3 + hh * hd;
    float *dk = dq + d, *dv = dq + 2 * d;
    const float *a = j->att + (b * h + hh) * T * T;
    const float *dc = j->dctx + b * T * d + hh * hd;
    pg_cpu_gemm(c, 1, 0, T, hd, T, 1.0f, a, T, dc, d, 0, dv, d3);
    for (int64_t i = 0; i < T; i++)
        for (int64_t e = 0; e < hd; e++)
            dk[i * d3 + e] = 0.0f;
    for (int64_t i0 = 0; i0 < T; i0 += rb) {
        int64_t nr = T - i0 < rb ? T - i0 : rb;
        int64_t nc = j->causal ? i0 + nr : T; /* columns that can be nonzero */
        pg_cpu_gemm(c, 0, 1, nr, nc, hd, 1.0f, dc + i0 * d, d, v, d3, 0, S, nc);
        for (int64_t ii = 0; ii < nr; ii++) {
            int64_t len = j->causal ? i0 + ii + 1 : T;
            const float *ai = a + (i0 + ii) * T;
            float *si = S + ii * nc;
            double D = 0.0;
            for (int64_t jj = 0; jj < len; jj++)
                D += (double)ai[jj] * si[jj];
            float Df = (float)D;
            for (int64_t jj = 0; jj < len; jj++)
                si[jj] = ai[jj] * (si[jj] - Df) * j->scale;
            for (int64_t jj = len; jj < nc; jj++)
                si[jj] = 0.0f;
        }
        pg_cpu_gemm(c, 0, 0, nr, hd, nc, 1.0f, S, nc, k, d3, 0, dq + i0 * d3, d3);
        pg_cpu_gemm(c, 1, 0, nc, hd, nr, 1.0f, S, nc, q + i0 * d3, d3, 1, dk, d3);
    }
}

int pg_attention_bwd_in(pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal,
                        const float *wqkv, const float *wo,
                        const float *qkv, const float *att, const float *ctxbuf, const float *dy,
                        float *dctx, float *dqkv, float *dx)
{
    (void)ctxbuf; /* the probabilities are in att: ctx is for backends that recompute them */
    if (pg_args_attention("attention_bwd_in", r, T, d, h))
        return 1;
    if (T > ATT_WS_FLOATS)
        return PG_RT_FAIL("attention_bwd_in: sequence length %lld is over the %d positions the "
                          "CPU kernel supports", (long long)T, ATT_WS_FLOATS);
    int64_t d3 = 3 * d;
    if (pg_linear_bwd_in(c, r * T, d, d, dy, wo, dctx))
        return 1;
    attn_bwd_job j = {c, T, d, h, causal, ATT_WS_FLOATS / T < T ? ATT_WS_FLOATS / T : T,
                      (float)(1.0 / sqrt((double)(d / h))), qkv, att, dctx, dqkv};
    pg_cpu_parallel(c, r * h, attn_bwd_head, &j);
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

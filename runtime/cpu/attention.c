/* runtime/cpu/attention.c — multi-head self-attention, x[r,T,d], h heads of
 * hd = d/h. As GPT-2's attention block:
 *   qkv = x Wqkv^T + bqkv               [r,T,3d]: q, k, v in columns [0,d) [d,2d) [2d,3d)
 *   att = softmax(q k^T / sqrt(hd))     [r,h,T,T]: per head, causal mask j > i -> 0
 *   ctx = att v, heads merged           [r,T,d]
 *   y   = ctx Wo^T + bo                 [r,T,d]
 * The per-head products are sgemm calls on strided views (no copies), with
 * shapes that do not depend on r, so a sample's bits do not depend on how many
 * samples share the call. The softmax backward runs as fixed-order loops
 * because the interface gives no [T,T] workspace. */
#include <cblas.h>
#include <math.h>

#include "cpu_kernels.h"

static int attn_dims_ok(const char *op, int64_t r, int64_t T, int64_t d, int64_t h)
{
    if (r < 0 || T <= 0 || d <= 0 || h <= 0 || d % h != 0 || !pg_cpu_dim_ok(3 * d) ||
        !pg_cpu_dim_ok(T) || !pg_cpu_dim_ok(r * T))
        return PG_RT_FAIL("%s: bad sizes r=%lld T=%lld d=%lld heads=%lld (need T, d, heads > 0 "
                          "and d divisible by heads)", op, (long long)r, (long long)T,
                          (long long)d, (long long)h);
    return 0;
}

/* Softmax of one score row in place over [0, len); entries [len, T) become 0. */
static void softmax_row(float *a, int64_t len, int64_t T)
{
    float m = a[0];
    for (int64_t j = 1; j < len; j++)
        if (a[j] > m)
            m = a[j];
    double s = 0.0;
    for (int64_t j = 0; j < len; j++) {
        float e = expf(a[j] - m);
        a[j] = e;
        s += e;
    }
    float inv = (float)(1.0 / s);
    for (int64_t j = 0; j < len; j++)
        a[j] *= inv;
    for (int64_t j = len; j < T; j++)
        a[j] = 0.0f;
}

int pg_attention_fwd(pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal,
                     const float *x, const float *wqkv, const float *bqkv,
                     const float *wo, const float *bo,
                     float *qkv, float *att, float *ctxbuf, float *y)
{
    if (attn_dims_ok("attention_fwd", r, T, d, h))
        return 1;
    int64_t hd = d / h, d3 = 3 * d;
    float scale = (float)(1.0 / sqrt((double)hd));
    if (pg_linear_fwd(c, r * T, d, d3, x, wqkv, bqkv, qkv))
        return 1;
    for (int64_t b = 0; b < r; b++)
        for (int64_t hh = 0; hh < h; hh++) {
            const float *q = qkv + b * T * d3 + hh * hd; /* [T, hd], row stride 3d */
            const float *k = q + d, *v = q + 2 * d;
            float *a = att + (b * h + hh) * T * T;       /* [T, T] */
            float *cx = ctxbuf + b * T * d + hh * hd;    /* [T, hd], row stride d */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)T, (int)hd,
                        scale, q, (int)d3, k, (int)d3, 0.0f, a, (int)T);
            for (int64_t i = 0; i < T; i++)
                softmax_row(a + i * T, causal ? i + 1 : T, T);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)hd, (int)T,
                        1.0f, a, (int)T, v, (int)d3, 0.0f, cx, (int)d);
        }
    return pg_linear_fwd(c, r * T, d, d, ctxbuf, wo, bo, y);
}

/* Dot product in a fixed order: 8 interleaved partial sums (so the compiler
 * can use vector lanes without reordering anything), then summed in order. */
static float dot(const float *a, const float *b, int64_t n)
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += a[i + l] * b[i + l];
    for (; i < n; i++)
        acc[0] += a[i] * b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* D = dctx_i . ctx_i = sum_j att_ij (dctx_i . v_j), with ctx_i rebuilt from
 * att and v in chunks of the head dim (the interface passes no ctx here). */
static double row_softmax_dot(const float *ai, int64_t len, const float *v, int64_t d3,
                              const float *dci, int64_t hd)
{
    float cx[256];
    double D = 0.0;
    for (int64_t e0 = 0; e0 < hd; e0 += 256) {
        int64_t ne = hd - e0 < 256 ? hd - e0 : 256;
        for (int64_t e = 0; e < ne; e++)
            cx[e] = 0.0f;
        for (int64_t j = 0; j < len; j++) {
            const float *vj = v + j * d3 + e0;
            float a = ai[j];
            for (int64_t e = 0; e < ne; e++)
                cx[e] += a * vj[e];
        }
        D += dot(dci + e0, cx, ne);
    }
    return D;
}

/* dctx = dy Wo; per head: dv = att^T dctx, datt = dctx v^T,
 * ds = att (datt - rowsum(att datt)), dq = ds k / sqrt(hd), dk = ds^T q / sqrt(hd);
 * dx = dqkv Wqkv. */
int pg_attention_bwd_in(pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal,
                        const float *wqkv, const float *wo,
                        const float *qkv, const float *att, const float *dy,
                        float *dctx, float *dqkv, float *dx)
{
    if (attn_dims_ok("attention_bwd_in", r, T, d, h))
        return 1;
    int64_t hd = d / h, d3 = 3 * d;
    float scale = (float)(1.0 / sqrt((double)hd));
    if (pg_linear_bwd_in(c, r * T, d, d, dy, wo, dctx))
        return 1;
    for (int64_t b = 0; b < r; b++)
        for (int64_t hh = 0; hh < h; hh++) {
            const float *q = qkv + b * T * d3 + hh * hd;
            const float *k = q + d, *v = q + 2 * d;
            float *dq = dqkv + b * T * d3 + hh * hd;
            float *dk = dq + d, *dv = dq + 2 * d;
            const float *a = att + (b * h + hh) * T * T;
            const float *dc = dctx + b * T * d + hh * hd;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)T, (int)hd, (int)T,
                        1.0f, a, (int)T, dc, (int)d, 0.0f, dv, (int)d3);
            for (int64_t i = 0; i < T; i++)
                for (int64_t e = 0; e < hd; e++)
                    dq[i * d3 + e] = dk[i * d3 + e] = 0.0f;
            for (int64_t i = 0; i < T; i++) {
                int64_t len = causal ? i + 1 : T;
                const float *ai = a + i * T, *dci = dc + i * d, *qi = q + i * d3;
                float *dqi = dq + i * d3;
                float Df = (float)row_softmax_dot(ai, len, v, d3, dci, hd);
                for (int64_t j = 0; j < len; j++) {
                    if (ai[j] == 0.0f)
                        continue; /* underflowed probability: no gradient */
                    float ds = ai[j] * (dot(dci, v + j * d3, hd) - Df) * scale;
                    const float *kj = k + j * d3;
                    float *dkj = dk + j * d3;
                    for (int64_t e = 0; e < hd; e++) {
                        dqi[e] += ds * kj[e];
                        dkj[e] += ds * qi[e];
                    }
                }
            }
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

/* runtime/cpu/attention.c — multi-head self-attention, x[r,T,d], h heads of
 * hd = d/h, and its core over projected q, k, v (pg_attn_*: grouped-query
 * heads, rotary positions, dropout on the probabilities), which GPT-2's
 * block below runs too. As GPT-2's attention block:
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
#include <stdlib.h>
#include <string.h>

#include "cpu_ctx.h"
#include "op_args.h"

/* The score rows' sums run in PG_CPU_ROW_LANES double lanes (lane l adds
 * the elements j = l mod 16 in index order), the lanes added in a fixed tree
 * (pg_cpu_lanes_sum_d): an order set by the row's length alone, SIMD at -O2 (a
 * chain of dependent double adds, one per element, was most of the softmax's
 * time). */
_Static_assert(PG_CPU_ROW_LANES == PG_CPU_EXP_BLK, "softmax_row adds a block of exponentials into the lanes");

/* Softmax of one score row in place over [0, len); entries [len, T) become 0.
 * The exponentials go through pg_cpu_exp_shifted, PG_CPU_EXP_WIDE at a time,
 * their sum in lanes (pg_cpu_lanes_sum_d), lane l adding the elements j = l
 * mod 16 in index order. Every pass goes by whole blocks of 16 where the row
 * has room (a pad's exponential is 0, what the row's tail gets anyway; 0 times
 * the inverse sum stays 0): the short copies and fills that gcc made into
 * `rep movs` / `rep stos` and scalar tails were half of the forward's time at
 * T = 64. Inlined into the AVX2 twins of its callers. */
PG_CPU_INLINE void softmax_row(float *a, int64_t len, int64_t T)
{
    float m = pg_cpu_row_max(a, len);
    double acc[PG_CPU_ROW_LANES]; /* set from the first block (a zero-fill is a `rep stos`) */
    int64_t done = 0;             /* entries written back, pads included */
    for (int64_t j0 = 0; j0 < len; j0 += PG_CPU_EXP_WIDE) {
        int64_t nb = len - j0 < PG_CPU_EXP_WIDE ? len - j0 : PG_CPU_EXP_WIDE;
        float e[PG_CPU_EXP_WIDE];
        int64_t nblk = pg_cpu_exp_shifted(a + j0, nb, T - j0, m, e), b = 0, bb = 0;
        if (j0 == 0) { /* 0.0 + e: the zero's add kept (the same bits as from zeros), without a fill */
            for (int l = 0; l < PG_CPU_ROW_LANES; l++)
                acc[l] = 0.0 + (double)e[l];
            bb = 1;
        }
        for (; bb < nblk; bb++)
            for (int l = 0; l < PG_CPU_ROW_LANES; l++)
                acc[l] += e[bb * PG_CPU_EXP_BLK + l];
        for (; b < nblk && j0 + (b + 1) * PG_CPU_EXP_BLK <= T; b++)
            for (int l = 0; l < PG_CPU_EXP_BLK; l++)
                a[j0 + b * PG_CPU_EXP_BLK + l] = e[b * PG_CPU_EXP_BLK + l];
        done = j0 + b * PG_CPU_EXP_BLK;
        for (; done < j0 + nb; done++)
            a[done] = e[done - j0];
    }
    float inv = (float)(1.0 / pg_cpu_lanes_sum_d(acc));
    int64_t j = 0;
    for (; j + PG_CPU_EXP_BLK <= done; j += PG_CPU_EXP_BLK)
        for (int l = 0; l < PG_CPU_EXP_BLK; l++)
            a[j + l] *= inv;
    for (; j < done; j++)
        a[j] *= inv;
    for (; j < T && j % PG_CPU_EXP_BLK; j++)
        a[j] = 0.0f;
    for (; j + PG_CPU_EXP_BLK <= T; j += PG_CPU_EXP_BLK)
        for (int l = 0; l < PG_CPU_EXP_BLK; l++)
            a[j + l] = 0.0f;
    for (; j < T; j++)
        a[j] = 0.0f;
}

/* ---- rotary positions (Llama's half split) ---------------------------------- */

/* The inverse frequencies of the pairs j < half = hd/2, as transformers
 * computes them in float: inv[j] = 1 / theta^(2j/hd). */
static void rope_inv(float theta, int64_t hd, float *inv)
{
    for (int64_t j = 0; j < hd / 2; j++) {
        float e = (float)(2 * j) / (float)hd;
        inv[j] = 1.0f / (float)pow((double)theta, (double)e);
    }
}

/* cos and sin of position t for the pairs j < half: angle = t * inv[j] in
 * float, its cos and sin in double rounded to float (as transformers) */
static void rope_row(const float *inv, int64_t half, int64_t t, float *cs, float *sn)
{
    for (int64_t j = 0; j < half; j++) {
        float ang = (float)t * inv[j];
        cs[j] = (float)cos((double)ang);
        sn[j] = (float)sin((double)ang);
    }
}

/* One pair (a, b) at cos c, sin s: (a c - b s, b c + a s), or its inverse
 * (the gradient's way back: (a c + b s, b c - a s)). */
PG_CPU_INLINE void rope_pair(float *a, float *b, float c, float s, int inverse)
{
    float x1 = *a, x2 = *b;
    if (inverse) {
        *a = x1 * c + x2 * s;
        *b = x2 * c - x1 * s;
    } else {
        *a = x1 * c - x2 * s;
        *b = x2 * c + x1 * s;
    }
}

/* ROPE_BLK pairs of one head at cos c, sin s, as rope_pair (the same
 * operations per pair): restrict, since the halves, and the table, never
 * overlap, so -O2 vectorizes the fixed-count loop in place (the values staged
 * through local arrays were copied in 16-byte halves and read back whole, a
 * store-forwarding stall per vector) */
#define ROPE_BLK 8

PG_CPU_INLINE void rope_blk(float *restrict a, float *restrict b, const float *restrict c, const float *restrict s,
                            int inverse)
{
    if (inverse)
        for (int l = 0; l < ROPE_BLK; l++) {
            float x1 = a[l], x2 = b[l];
            a[l] = x1 * c[l] + x2 * s[l];
            b[l] = x2 * c[l] - x1 * s[l];
        }
    else
        for (int l = 0; l < ROPE_BLK; l++) {
            float x1 = a[l], x2 = b[l];
            a[l] = x1 * c[l] - x2 * s[l];
            b[l] = x2 * c[l] + x1 * s[l];
        }
}

/* nh heads of one row, in place: ROPE_BLK pairs at a time, the rest one by one */
PG_CPU_INLINE void rope_heads(float *x, int64_t nh, int64_t hd, const float *cs, const float *sn, int inverse)
{
    int64_t half = hd / 2;
    for (int64_t h = 0; h < nh; h++) {
        float *a = x + h * hd, *b = a + half;
        int64_t j = 0;
        for (; j + ROPE_BLK <= half; j += ROPE_BLK)
            rope_blk(a + j, b + j, cs + j, sn + j, inverse);
        for (; j < half; j++)
            rope_pair(a + j, b + j, cs[j], sn[j], inverse);
    }
}

#define ROPE_MAX_HALF 512 /* head sizes up to 1024 */

typedef struct rope_job {
    const pg_attn_dims *s;
    int64_t r;
    const float *inv; /* [hd/2] */
    const float *tab; /* the context's table (rope_table), or NULL: each position's made here */
    float *q, *k;
    int inverse;
} rope_job;

/* position t of q and k in every sample, at the table's cos and sin of t
 * (or those made once for the r rows that share it, without a table) */
PG_CPU_INLINE void rope_pos_body(const rope_job *j, int64_t t)
{
    const pg_attn_dims *s = j->s;
    int64_t half = s->hd / 2;
    float cs_own[ROPE_MAX_HALF], sn_own[ROPE_MAX_HALF];
    const float *cs = cs_own, *sn = sn_own;
    if (j->tab)
        cs = j->tab + t * half, sn = j->tab + (s->T + t) * half;
    else
        rope_row(j->inv, half, t, cs_own, sn_own);
    for (int64_t b = 0; b < j->r; b++) {
        int64_t row = b * s->T + t;
        rope_heads(j->q + row * s->ldq, s->heads, s->hd, cs, sn, j->inverse);
        rope_heads(j->k + row * s->ldk, s->kv_heads, s->hd, cs, sn, j->inverse);
    }
}

static void rope_pos(void *arg, int64_t t) { rope_pos_body(arg, t); }
#ifdef PG_CPU_AVX2
PG_CPU_TARGET_AVX2 static void rope_pos_avx2(void *arg, int64_t t) { rope_pos_body(arg, t); }
#endif

/* The context's rotary table for T positions of head size hd at theta: cos
 * of every (position, pair) in [T, hd/2], then sin in the same shape, made by
 * rope_row (libm's cos and sin in double: 1,024 of each per call for llama's
 * T = 64, hd = 32, 16 calls a step per block pair) the first time and kept
 * while the sizes stay; NULL where it cannot be allocated (the positions then
 * make their own rows, the same values). */
static const float *rope_table(pg_ctx *c, const pg_attn_dims *s, const float *inv)
{
    int64_t half = s->hd / 2;
    if (c->rope_tab && c->rope_T == s->T && c->rope_hd == s->hd && c->rope_theta == s->rope_theta)
        return c->rope_tab;
    free(c->rope_tab);
    c->rope_tab = malloc((size_t)(2 * s->T * half) * sizeof *c->rope_tab);
    if (!c->rope_tab)
        return NULL;
    for (int64_t t = 0; t < s->T; t++)
        rope_row(inv, half, t, c->rope_tab + t * half, c->rope_tab + (s->T + t) * half);
    c->rope_T = s->T, c->rope_hd = s->hd, c->rope_theta = s->rope_theta;
    return c->rope_tab;
}

static void rope_apply(pg_ctx *c, int64_t r, const pg_attn_dims *s, float *q, float *k, int inverse)
{
    float inv[ROPE_MAX_HALF];
    rope_inv(s->rope_theta, s->hd, inv);
    rope_job j = {s, r, inv, rope_table(c, s, inv), q, k, inverse};
    pg_cpu_parallel(c, s->T, PG_CPU_PICK(c, rope_pos), &j);
}

/* ---- the core ------------------------------------------------------------------- */

/* The softmax backward and the dropped probabilities work on blocks of score
 * rows in ATT_WS_FLOATS floats of stack (64 KiB; no [T,T] workspace comes
 * through the interface): a block holds rb = min(T, ATT_WS_FLOATS / T) rows
 * of T scores (all of them for T <= 128). Block sizes depend on T alone, so a
 * sample's bits do not depend on r or on its place in the micro-batch. */
#define ATT_WS_FLOATS 16384

typedef struct attn_job {
    pg_ctx *c;
    const pg_attn_dims *s;
    int64_t rb;
    float scale, p;
    uint64_t key;          /* splitmix64(seed): the dropout masks' key */
    int64_t first_sample;
    const float *q, *k, *v, *att, *dctx;
    float *attw, *ctx, *dq, *dk, *dv;
} attn_job;

/* Rows [i0, i0 + nr), columns [0, nc) of head hh's dropout mask of sample b
 * applied to src (rows of nc floats) into dst (may be src): kept entries
 * scaled by 1/(1-p), dropped ones 0, as pg_dropout_fwd would drop element
 * (hh T + i) T + j of the sample. The forward drops the probabilities, the
 * backward the gradient of the dropped ones. */
static void drop_rows(const attn_job *j, int64_t b, int64_t hh, int64_t i0, int64_t nr, int64_t nc, const float *src,
                      float *dst)
{
    int64_t T = j->s->T;
    float keep = 1.0f / (1.0f - j->p);
    uint64_t rowkey = pg_splitmix64(j->key + (uint64_t)(j->first_sample + b));
    for (int64_t ii = 0; ii < nr; ii++)
        for (int64_t jj = 0; jj < nc; jj++) {
            uint64_t e = (uint64_t)((hh * T + i0 + ii) * T + jj);
            float u = pg_unit24(pg_splitmix64(rowkey + e));
            dst[ii * nc + jj] = u >= j->p ? src[ii * nc + jj] * keep : 0.0f;
        }
}

/* One (sample, head) of the forward: scores, softmax, context. */
PG_CPU_INLINE void attn_fwd_head_body(const attn_job *j, int64_t t)
{
    const pg_attn_dims *s = j->s;
    int64_t T = s->T, h = s->heads, hd = s->hd, d = h * hd, b = t / h, hh = t % h, g = hh / (h / s->kv_heads);
    const float *q = j->q + b * T * s->ldq + hh * hd; /* [T, hd], row stride ldq */
    const float *k = j->k + b * T * s->ldk + g * hd, *v = j->v + b * T * s->ldv + g * hd;
    float *a = j->attw + (b * h + hh) * T * T;         /* [T, T] */
    float *cx = j->ctx + b * T * d + hh * hd;          /* [T, hd], row stride d */
    pg_cpu_gemm(j->c, 0, 1, T, T, hd, j->scale, q, s->ldq, k, s->ldk, 0, a, T);
    for (int64_t i = 0; i < T; i++)
        softmax_row(a + i * T, s->causal ? i + 1 : T, T);
    if (j->p == 0.0f) {
        pg_cpu_gemm(j->c, 0, 0, T, hd, T, 1.0f, a, T, v, s->ldv, 0, cx, d);
        return;
    }
    float w[ATT_WS_FLOATS];
    for (int64_t i0 = 0; i0 < T; i0 += j->rb) {
        int64_t nr = T - i0 < j->rb ? T - i0 : j->rb;
        drop_rows(j, b, hh, i0, nr, T, a + i0 * T, w);
        pg_cpu_gemm(j->c, 0, 0, nr, hd, T, 1.0f, w, T, v, s->ldv, 0, cx + i0 * d, d);
    }
}

/* the core's tasks, baseline and AVX2 builds of one source (cpu_kernels.h) */
static void attn_fwd_head(void *arg, int64_t t) { attn_fwd_head_body(arg, t); }
#ifdef PG_CPU_AVX2
PG_CPU_TARGET_AVX2 static void attn_fwd_head_avx2(void *arg, int64_t t) { attn_fwd_head_body(arg, t); }
#endif

static int attn_args(const char *op, int64_t r, const pg_attn_dims *s, float p)
{
    if (r < 0 || s->T <= 0 || s->heads <= 0 || s->kv_heads <= 0 || s->hd <= 0 || s->heads % s->kv_heads != 0 ||
        !pg_args_dim_ok(r * s->T) || !pg_args_dim_ok(s->heads * s->hd) || !(p >= 0.0f && p < 1.0f) ||
        s->ldq < s->heads * s->hd || s->ldk < s->kv_heads * s->hd || s->ldv < s->kv_heads * s->hd ||
        (s->rope_theta > 0 && (s->hd % 2 != 0 || s->hd / 2 > ROPE_MAX_HALF)))
        return PG_RT_FAIL("%s: bad sizes r=%lld T=%lld heads=%lld kv_heads=%lld hd=%lld p=%g (need kv_heads "
                          "dividing heads, p in [0, 1), row strides of at least the heads' columns, an even "
                          "head size of at most %d with rope)", op, (long long)r, (long long)s->T,
                          (long long)s->heads, (long long)s->kv_heads, (long long)s->hd, (double)p,
                          2 * ROPE_MAX_HALF);
    if (s->T > ATT_WS_FLOATS)
        return PG_RT_FAIL("%s: sequence length %lld is over the %d positions the CPU kernel supports", op,
                          (long long)s->T, ATT_WS_FLOATS);
    return 0;
}

/* The (sample, head) pairs run on the backend's threads: each writes its own
 * slices of att and ctx, with the same operations on any thread. */
int pg_attn_fwd(pg_ctx *c, int64_t r, const pg_attn_dims *s, float p, uint64_t seed, int64_t first_sample,
                float *q, float *k, const float *v, float *att, float *ctx)
{
    if (attn_args("attn_fwd", r, s, p))
        return 1;
    if (s->rope_theta > 0)
        rope_apply(c, r, s, q, k, 0);
    int64_t T = s->T;
    attn_job j = {c, s, ATT_WS_FLOATS / T < T ? ATT_WS_FLOATS / T : T, (float)(1.0 / sqrt((double)s->hd)), p,
                  pg_splitmix64(seed), first_sample, q, k, v, NULL, NULL, att, ctx, NULL, NULL, NULL};
    pg_cpu_parallel(c, r * s->heads, PG_CPU_PICK(c, attn_fwd_head), &j);
    return 0;
}

/* One row of the softmax's gradient in place: s_j = a_j (s_j - D) scale over
 * [0, len) (in that order, as one expression), 0 over [len, nc); blocks of
 * PG_CPU_EXP_BLK through a local (the store then aliases nothing the loop
 * reads, and -O2 vectorizes it), the rest one by one. */
PG_CPU_INLINE void ds_row(const float *a, float *s, int64_t len, int64_t nc, float D, float scale)
{
    int64_t j = 0;
    for (; j + PG_CPU_EXP_BLK <= len; j += PG_CPU_EXP_BLK) {
        float t[PG_CPU_EXP_BLK];
        for (int l = 0; l < PG_CPU_EXP_BLK; l++)
            t[l] = a[j + l] * (s[j + l] - D) * scale;
        for (int l = 0; l < PG_CPU_EXP_BLK; l++)
            s[j + l] = t[l];
    }
    for (; j < len; j++)
        s[j] = a[j] * (s[j] - D) * scale;
    for (j = len; j < nc; j++)
        s[j] = 0.0f;
}

/* One (sample, key/value head g): the query heads of its group in order, so
 * dk and dv sum over them in a fixed order. For each head, with P = att and
 * Pd = drop(P):
 *   dv (+)= Pd^T dctx;  per block of rows i:  S = dctx_i v^T (then dropped: dP),
 *   D_i = sum_j P_ij S_ij (double: pg_cpu_dot_d),  ds_ij = P_ij (S_ij - D_i) / sqrt(hd),
 *   dq_i = ds_i k,  dk += ds_i^T q_i
 * (ds is 0 past a row's causal limit; with a causal mask, the columns past the
 * block's last row are left out of the products). */
PG_CPU_INLINE void attn_bwd_group_body(const attn_job *j, int64_t t)
{
    const pg_attn_dims *s = j->s;
    pg_ctx *c = j->c;
    int64_t T = s->T, h = s->heads, hd = s->hd, d = h * hd, rb = j->rb, grp = h / s->kv_heads;
    int64_t b = t / s->kv_heads, g = t % s->kv_heads;
    float S[ATT_WS_FLOATS];
    const float *k = j->k + b * T * s->ldk + g * hd, *v = j->v + b * T * s->ldv + g * hd;
    float *dk = j->dk + b * T * s->ldk + g * hd, *dv = j->dv + b * T * s->ldv + g * hd;
    for (int64_t i = 0; i < T; i++)
        memset(dk + i * s->ldk, 0, (size_t)hd * sizeof *dk);
    for (int64_t hh = g * grp; hh < (g + 1) * grp; hh++) {
        const float *q = j->q + b * T * s->ldq + hh * hd;
        float *dq = j->dq + b * T * s->ldq + hh * hd;
        const float *a = j->att + (b * h + hh) * T * T;
        const float *dc = j->dctx + b * T * d + hh * hd;
        int first = hh == g * grp;
        if (j->p == 0.0f)
            pg_cpu_gemm(c, 1, 0, T, hd, T, 1.0f, a, T, dc, d, !first, dv, s->ldv);
        else
            for (int64_t i0 = 0; i0 < T; i0 += rb) {
                int64_t nr = T - i0 < rb ? T - i0 : rb;
                drop_rows(j, b, hh, i0, nr, T, a + i0 * T, S);
                pg_cpu_gemm(c, 1, 0, T, hd, nr, 1.0f, S, T, dc + i0 * d, d, !first || i0 > 0, dv, s->ldv);
            }
        for (int64_t i0 = 0; i0 < T; i0 += rb) {
            int64_t nr = T - i0 < rb ? T - i0 : rb;
            int64_t nc = s->causal ? i0 + nr : T; /* columns that can be nonzero */
            pg_cpu_gemm(c, 0, 1, nr, nc, hd, 1.0f, dc + i0 * d, d, v, s->ldv, 0, S, nc);
            if (j->p != 0.0f) /* dP = dPd dropped and scaled by the same mask */
                drop_rows(j, b, hh, i0, nr, nc, S, S);
            for (int64_t ii = 0; ii < nr; ii++) {
                int64_t len = s->causal ? i0 + ii + 1 : T;
                const float *ai = a + (i0 + ii) * T;
                float *si = S + ii * nc;
                ds_row(ai, si, len, nc, (float)pg_cpu_dot_d(ai, si, len), j->scale);
            }
            pg_cpu_gemm(c, 0, 0, nr, hd, nc, 1.0f, S, nc, k, s->ldk, 0, dq + i0 * s->ldq, s->ldq);
            pg_cpu_gemm(c, 1, 0, nc, hd, nr, 1.0f, S, nc, q + i0 * s->ldq, s->ldq, 1, dk, s->ldk);
        }
    }
}

static void attn_bwd_group(void *arg, int64_t t) { attn_bwd_group_body(arg, t); }
#ifdef PG_CPU_AVX2
PG_CPU_TARGET_AVX2 static void attn_bwd_group_avx2(void *arg, int64_t t) { attn_bwd_group_body(arg, t); }
#endif

int pg_attn_bwd(pg_ctx *c, int64_t r, const pg_attn_dims *s, float p, uint64_t seed, int64_t first_sample,
                const float *q, const float *k, const float *v, const float *att, const float *dctx,
                float *dq, float *dk, float *dv)
{
    if (attn_args("attn_bwd", r, s, p))
        return 1;
    int64_t T = s->T;
    attn_job j = {c, s, ATT_WS_FLOATS / T < T ? ATT_WS_FLOATS / T : T, (float)(1.0 / sqrt((double)s->hd)), p,
                  pg_splitmix64(seed), first_sample, q, k, v, att, dctx, NULL, NULL, dq, dk, dv};
    pg_cpu_parallel(c, r * s->kv_heads, PG_CPU_PICK(c, attn_bwd_group), &j);
    if (s->rope_theta > 0) /* back to the unrotated q and k: the projections' gradients */
        rope_apply(c, r, s, dq, dk, 1);
    return 0;
}

/* ---- GPT-2's block: qkv projection, the core, output projection ------------------ */

static pg_attn_dims gpt2_dims(int64_t T, int64_t d, int64_t h, int causal)
{
    pg_attn_dims s = {T, h, h, d / h, causal, 0.0f, 3 * d, 3 * d, 3 * d};
    return s;
}

int pg_attention_fwd(pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal,
                     const float *x, const float *wqkv, const float *bqkv,
                     const float *wo, const float *bo,
                     float *qkv, float *att, float *ctxbuf, float *y)
{
    if (pg_args_attention("attention_fwd", r, T, d, h))
        return 1;
    pg_attn_dims s = gpt2_dims(T, d, h, causal);
    if (pg_linear_fwd(c, r * T, d, 3 * d, x, wqkv, bqkv, qkv) ||
        pg_attn_fwd(c, r, &s, 0.0f, 0, 0, qkv, qkv + d, qkv + 2 * d, att, ctxbuf))
        return 1;
    return pg_linear_fwd(c, r * T, d, d, ctxbuf, wo, bo, y);
}

int pg_attention_bwd_in(pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal,
                        const float *wqkv, const float *wo,
                        const float *qkv, const float *att, const float *ctxbuf, const float *dy,
                        float *dctx, float *dqkv, float *dx)
{
    (void)ctxbuf; /* the probabilities are in att: ctx is for backends that recompute them */
    if (pg_args_attention("attention_bwd_in", r, T, d, h))
        return 1;
    pg_attn_dims s = gpt2_dims(T, d, h, causal);
    if (pg_linear_bwd_in(c, r * T, d, d, dy, wo, dctx) ||
        pg_attn_bwd(c, r, &s, 0.0f, 0, 0, qkv, qkv + d, qkv + 2 * d, att, dctx, dqkv, dqkv + d, dqkv + 2 * d))
        return 1;
    return pg_linear_bwd_in(c, r * T, d, 3 * d, dqkv, wqkv, dx);
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

/* ---- generation with the KV cache ------------------------------------------------ */

typedef struct dec_job {
    pg_ctx *c;
    const pg_attn_dims *s;
    int64_t t, kvd;           /* new positions per sequence, a cache position's floats */
    const int32_t *rows;
    float scale;
    float *q, *k;
    const float *v;
    float *kc, *vc, *ctx;
} dec_job;

/* Token row u (sequence u / t, position j = u % t of its call): rotated q and
 * k at its position, k and v into its sequence's cache. */
static void dec_store(void *arg, int64_t u)
{
    const dec_job *j = arg;
    const pg_attn_dims *s = j->s;
    const int32_t *w = j->rows + (u / j->t) * PG_DEC_ROW_INTS;
    int64_t jj = u % j->t, pos = w[PG_DEC_POS] + jj;
    if (jj >= w[PG_DEC_N])
        return;
    float *q = j->q + u * s->ldq, *k = j->k + u * s->ldk;
    if (s->rope_theta > 0) {
        float inv[ROPE_MAX_HALF], cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
        rope_inv(s->rope_theta, s->hd, inv);
        rope_row(inv, s->hd / 2, pos, cs, sn);
        rope_heads(q, s->heads, s->hd, cs, sn, 0);
        rope_heads(k, s->kv_heads, s->hd, cs, sn, 0);
    }
    size_t at = ((size_t)w[PG_DEC_SEQ] * (size_t)s->T + (size_t)pos) * (size_t)j->kvd;
    memcpy(j->kc + at, k, (size_t)j->kvd * sizeof(float));
    memcpy(j->vc + at, j->v + u * s->ldv, (size_t)j->kvd * sizeof(float));
}

/* One (sequence, head): its real new positions' scores over the cache, in
 * blocks of query rows that fit the stack, softmax, context; pads get 0. */
static void dec_head(void *arg, int64_t u)
{
    const dec_job *j = arg;
    const pg_attn_dims *s = j->s;
    int64_t h = s->heads, hd = s->hd, d = h * hd, i = u / h, hh = u % h, g = hh / (h / s->kv_heads);
    const int32_t *w = j->rows + i * PG_DEC_ROW_INTS;
    int64_t p = w[PG_DEC_POS], n = w[PG_DEC_N];
    float *cx = j->ctx + i * j->t * d + hh * hd;
    for (int64_t jj = n; jj < j->t; jj++)
        memset(cx + jj * d, 0, (size_t)hd * sizeof *cx);
    if (n < 1)
        return;
    const float *q = j->q + i * j->t * s->ldq + hh * hd;
    const float *kc = j->kc + (size_t)w[PG_DEC_SEQ] * (size_t)s->T * (size_t)j->kvd + g * hd;
    const float *vc = j->vc + (size_t)w[PG_DEC_SEQ] * (size_t)s->T * (size_t)j->kvd + g * hd;
    float a[ATT_WS_FLOATS];
    int64_t rb = ATT_WS_FLOATS / (p + n);
    for (int64_t j0 = 0; j0 < n; j0 += rb) {
        int64_t nr = n - j0 < rb ? n - j0 : rb, nc = p + j0 + nr; /* the keys the block's last row sees */
        pg_cpu_gemm(j->c, 0, 1, nr, nc, hd, j->scale, q + j0 * s->ldq, s->ldq, kc, j->kvd, 0, a, nc);
        for (int64_t ii = 0; ii < nr; ii++)
            softmax_row(a + ii * nc, p + j0 + ii + 1, nc);
        pg_cpu_gemm(j->c, 0, 0, nr, hd, nc, 1.0f, a, nc, vc, j->kvd, 0, cx + j0 * d, d);
    }
}

int pg_attn_decode(pg_ctx *c, int64_t seqs, int64_t t, int64_t batch, const pg_attn_dims *s, const int32_t *rows,
                   float *q, float *k, const float *v, float *kc, float *vc, float *ctx)
{
    if (attn_args("attn_decode", seqs, s, 0.0f))
        return 1;
    if (!s->causal || t < 0 || batch < 1 || !pg_args_dim_ok(seqs * t))
        return PG_RT_FAIL("attn_decode: bad sizes seqs=%lld t=%lld batch=%lld causal=%d (a cache holds only a causal "
                          "layer's positions)", (long long)seqs, (long long)t, (long long)batch, s->causal);
    for (int64_t i = 0; i < seqs; i++) {
        const int32_t *w = rows + i * PG_DEC_ROW_INTS;
        if (w[PG_DEC_SEQ] < 0 || w[PG_DEC_SEQ] >= batch || w[PG_DEC_POS] < 0 || w[PG_DEC_N] < 0 || w[PG_DEC_N] > t ||
            (int64_t)w[PG_DEC_POS] + w[PG_DEC_N] > s->T)
            return PG_RT_FAIL("attn_decode: sequence %lld of the call has cache row %ld, positions %ld + %ld: outside "
                              "the cache of %lld rows of %lld positions (or more than t = %lld)",
                              (long long)i, (long)w[PG_DEC_SEQ], (long)w[PG_DEC_POS], (long)w[PG_DEC_N],
                              (long long)batch, (long long)s->T, (long long)t);
    }
    dec_job j = {c, s, t, s->kv_heads * s->hd, rows, (float)(1.0 / sqrt((double)s->hd)), q, k, v, kc, vc, ctx};
    pg_cpu_parallel(c, seqs * t, dec_store, &j);
    pg_cpu_parallel(c, seqs * s->heads, dec_head, &j);
    return 0;
}

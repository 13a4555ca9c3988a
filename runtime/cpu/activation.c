/* runtime/cpu/activation.c — relu, gelu (tanh form, as GPT-2 and
 * torch.nn.GELU(approximate="tanh")), sigmoid, tanh and silu. Elementwise; y may alias x, dx may alias dy. */
#include <math.h>

#include "cpu_ctx.h"
#include "cpu_simd.h"
#include "op_args.h"

/* relu runs in blocks of RELU_BLK: all loads of a block, then all its stores.
 * The fixed-count inner loops become branch-free SIMD selects at -O2 (a plain
 * `x > 0 ? x : 0` loop is a data-dependent branch, mispredicted half the time
 * on activations: ~20x slower); the bits are the same, and y == x still works. */
#define RELU_BLK 16

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

int pg_relu_fwd(pg_ctx *c, int64_t count, const float *x, float *y)
{
    (void)c;
    if (pg_args_count("relu_fwd", count))
        return 1;
    int64_t i = 0;
    for (; i + RELU_BLK <= count; i += RELU_BLK) {
        float v[RELU_BLK];
        for (int j = 0; j < RELU_BLK; j++)
            v[j] = x[i + j] > 0.0f ? x[i + j] : 0.0f;
        for (int j = 0; j < RELU_BLK; j++)
            y[i + j] = v[j];
    }
    for (; i < count; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return 0;
}

/* PyTorch's threshold backward: the gradient passes where x > 0. */
int pg_relu_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx)
{
    (void)c;
    if (pg_args_count("relu_bwd_in", count))
        return 1;
    int64_t i = 0;
    for (; i + RELU_BLK <= count; i += RELU_BLK) {
        float v[RELU_BLK];
        for (int j = 0; j < RELU_BLK; j++) {
            float g = dy[i + j]; /* loaded unconditionally, so the select needs no branch */
            v[j] = x[i + j] > 0.0f ? g : 0.0f;
        }
        for (int j = 0; j < RELU_BLK; j++)
            dx[i + j] = v[j];
    }
    for (; i < count; i++)
        dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
    return 0;
}

/* gelu in blocks of GELU_BLK elements: fixed-count loops that -O2 turns into
 * SIMD, with cpu_kernels.h's exp in place of libm's tanhf (a call per
 * element). A last partial block is padded into a full one, so every element
 * takes the same instructions and its bits do not depend on where it sits or
 * on the count. With z = 2 k (x + c x^3) = x (A + B x^2) and e = exp(-z):
 * 0.5 (1 + tanh(z / 2)) = s = 1 / (1 + e), 1 - s = e s, and y = x s = x / (1 + e).
 * The steps in loops of their own over wide blocks (pg_cpu_exp_wide says why). */
#define GELU_BLK PG_CPU_EXP_WIDE
#define GELU_A (2.0f * GELU_K) /* z = x (A + B x^2) */
#define GELU_B (2.0f * GELU_K * GELU_C)

/* e[j] = exp(-z(x[j])) */
PG_CPU_INLINE void gelu_exp_blk(const float *x, float *e)
{
    for (int j = 0; j < GELU_BLK; j++) {
        float v = x[j];
        e[j] = pg_cpu_exp_clamp(v * (-GELU_A - GELU_B * (v * v)));
    }
    pg_cpu_exp_wide(e);
}

PG_CPU_INLINE void gelu_fwd_blk(const float *x, float *y)
{
    float o[GELU_BLK];
    gelu_exp_blk(x, o);
    for (int j = 0; j < GELU_BLK; j++)
        o[j] = x[j] / (1.0f + o[j]);
    for (int j = 0; j < GELU_BLK; j++) /* after all loads: y may alias x */
        y[j] = o[j];
}

/* the whole blocks of [0, n), n a multiple of GELU_BLK */
static void gelu_fwd_run(int64_t n, const float *x, float *y)
{
    for (int64_t i = 0; i < n; i += GELU_BLK)
        gelu_fwd_blk(x + i, y + i);
}

#ifdef PG_CPU_AVX2
/* gelu's AVX2 path: the blocks' operations above, the exp's included
 * (cpu_simd.h's pg_avx2_exp_reduce32 and pg_avx2_exp_poly32), one for one in
 * AVX2 registers: the same bits as the loops (tests/kernels.t compares them
 * for every length class). Why not the loops: gcc stores each of their steps'
 * results to the block's buffers and reads them back (six stores a vector, and
 * the output copied in 16-byte halves), and makes the two clamps seven
 * compares, blends and masks. Here 32 elements at a time go through two
 * stages over blocks of GELU_W elements: the argument, its clamp and the exp's
 * range reduction, then the polynomial and gelu's own formula. */
#define GELU_W 128
#define GELU_EACH PG_AVX2_EACH
#define V8 PG_V8
_Static_assert(GELU_BLK % (8 * PG_AVX2_U) == 0 && GELU_W % (8 * PG_AVX2_U) == 0, "the runs' counts are whole iterations");

/* stage 1 of 32 elements: r and 2^n of exp(-z(x)), -z = x (-A - B x^2) */
PG_CPU_INLINE PG_CPU_TARGET_AVX2 void gelu_reduce32(const float *x, float *r, float *sc)
{
    __m256 a[PG_AVX2_U], t[PG_AVX2_U];
    GELU_EACH(a[k] = _mm256_loadu_ps(x + 8 * k));
    GELU_EACH(t[k] = _mm256_mul_ps(V8(GELU_B), _mm256_mul_ps(a[k], a[k])));
    GELU_EACH(a[k] = _mm256_mul_ps(a[k], _mm256_sub_ps(V8(-GELU_A), t[k])));
    pg_avx2_exp_reduce32(a, r, sc);
}

/* y = x / (1 + e): x read again after stage 1, each vector before its y is
 * stored (y may alias x); n a multiple of 32 */
PG_CPU_TARGET_AVX2 static void gelu_fwd_run_avx2(int64_t n, const float *x, float *y)
{
    _Alignas(32) float r[GELU_W], sc[GELU_W];
    for (int64_t i = 0; i < n; i += GELU_W) {
        int64_t w = n - i < GELU_W ? n - i : GELU_W;
        for (int64_t j = 0; j < w; j += 8 * PG_AVX2_U)
            gelu_reduce32(x + i + j, r + j, sc + j);
        for (int64_t j = 0; j < w; j += 8 * PG_AVX2_U) {
            __m256 e[PG_AVX2_U];
            pg_avx2_exp_poly32(r + j, sc + j, e);
            GELU_EACH(e[k] = _mm256_div_ps(_mm256_loadu_ps(x + i + j + 8 * k), _mm256_add_ps(V8(1.0f), e[k])));
            GELU_EACH(_mm256_storeu_ps(y + i + j + 8 * k, e[k]));
        }
    }
}
#endif

/* y = 0.5 x (1 + tanh(k (x + c x^3))) = x s */
int pg_gelu_fwd(pg_ctx *c, int64_t count, const float *x, float *y)
{
    (void)c;
    if (pg_args_count("gelu_fwd", count))
        return 1;
    int64_t i = count / GELU_BLK * GELU_BLK;
#ifdef PG_CPU_AVX2
    if (c->avx2)
        gelu_fwd_run_avx2(i, x, y);
    else
#endif
        gelu_fwd_run(i, x, y);
    if (i < count) {
        float bx[GELU_BLK] = {0}, by[GELU_BLK];
        for (int64_t j = 0; j < count - i; j++)
            bx[j] = x[i + j];
        gelu_fwd_blk(bx, by);
        for (int64_t j = 0; j < count - i; j++)
            y[i + j] = by[j];
    }
    return 0;
}

/* dy/dx = s + x s (1 - s) z' = s (1 + x z' e s), z' = A + 3 B x^2 */
PG_CPU_INLINE void gelu_bwd_blk(const float *x, const float *dy, float *dx)
{
    float o[GELU_BLK];
    gelu_exp_blk(x, o);
    for (int j = 0; j < GELU_BLK; j++) {
        float v = x[j], e = o[j], s = 1.0f / (1.0f + e);
        float dz = GELU_A + (3.0f * GELU_B) * (v * v);
        o[j] = dy[j] * (s * (1.0f + (v * dz) * (e * s)));
    }
    for (int j = 0; j < GELU_BLK; j++) /* after all loads: dx may alias dy */
        dx[j] = o[j];
}

static void gelu_bwd_run(int64_t n, const float *x, const float *dy, float *dx)
{
    for (int64_t i = 0; i < n; i += GELU_BLK)
        gelu_bwd_blk(x + i, dy + i, dx + i);
}
#ifdef PG_CPU_AVX2
/* gelu_bwd_blk's formula in the AVX2 stages of gelu_fwd_run_avx2 (dx may alias dy) */
PG_CPU_TARGET_AVX2 static void gelu_bwd_run_avx2(int64_t n, const float *x, const float *dy, float *dx)
{
    _Alignas(32) float r[GELU_W], sc[GELU_W];
    for (int64_t i = 0; i < n; i += GELU_W) {
        int64_t w = n - i < GELU_W ? n - i : GELU_W;
        for (int64_t j = 0; j < w; j += 8 * PG_AVX2_U)
            gelu_reduce32(x + i + j, r + j, sc + j);
        for (int64_t j = 0; j < w; j += 8 * PG_AVX2_U) {
            const float *xj = x + i + j;
            __m256 e[PG_AVX2_U], s[PG_AVX2_U], v[PG_AVX2_U], t[PG_AVX2_U];
            pg_avx2_exp_poly32(r + j, sc + j, e);
            GELU_EACH(s[k] = _mm256_div_ps(V8(1.0f), _mm256_add_ps(V8(1.0f), e[k])));
            GELU_EACH(v[k] = _mm256_loadu_ps(xj + 8 * k));
            GELU_EACH(t[k] = _mm256_add_ps(V8(GELU_A), _mm256_mul_ps(V8(3.0f * GELU_B), _mm256_mul_ps(v[k], v[k]))));
            GELU_EACH(t[k] = _mm256_mul_ps(_mm256_mul_ps(v[k], t[k]), _mm256_mul_ps(e[k], s[k])));
            GELU_EACH(t[k] = _mm256_mul_ps(s[k], _mm256_add_ps(V8(1.0f), t[k])));
            GELU_EACH(_mm256_storeu_ps(dx + i + j + 8 * k, _mm256_mul_ps(_mm256_loadu_ps(dy + i + j + 8 * k), t[k])));
        }
    }
}
#endif

int pg_gelu_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx)
{
    (void)c;
    if (pg_args_count("gelu_bwd_in", count))
        return 1;
    int64_t i = count / GELU_BLK * GELU_BLK;
#ifdef PG_CPU_AVX2
    if (c->avx2)
        gelu_bwd_run_avx2(i, x, dy, dx);
    else
#endif
        gelu_bwd_run(i, x, dy, dx);
    if (i < count) {
        float bx[GELU_BLK] = {0}, bd[GELU_BLK] = {0}, bo[GELU_BLK];
        for (int64_t j = 0; j < count - i; j++) {
            bx[j] = x[i + j];
            bd[j] = dy[i + j];
        }
        gelu_bwd_blk(bx, bd, bo);
        for (int64_t j = 0; j < count - i; j++)
            dx[i + j] = bo[j];
    }
    return 0;
}

/* ---- sigmoid, tanh, silu --------------------------------------------------
 * In blocks of PG_CPU_EXP_WIDE as gelu (pg_cpu_exp_wide, a last partial block
 * padded), so an element's bits do not depend on where it sits. With
 * e = exp(-x): sigmoid s = 1 / (1 + e) and 1 - s = e s; tanh from e = exp(-2|x|):
 * |t| = (1 - e) / (1 + e), 1 - t^2 = 4 e / (1 + e)^2 (no cancellation near
 * |t| = 1); silu x s. The backward recomputes them from x. */
#define ACT_BLK PG_CPU_EXP_WIDE

PG_CPU_INLINE void sig_exp_blk(const float *x, float *e) /* e = exp(-x) */
{
    for (int j = 0; j < ACT_BLK; j++)
        e[j] = pg_cpu_exp_clamp(-x[j]);
    pg_cpu_exp_wide(e);
}

PG_CPU_INLINE void tanh_exp_blk(const float *x, float *e) /* e = exp(-2|x|) */
{
    for (int j = 0; j < ACT_BLK; j++) /* fabsf is a bit mask: a compare kept this loop scalar */
        e[j] = pg_cpu_exp_clamp(-2.0f * fabsf(x[j]));
    pg_cpu_exp_wide(e);
}

PG_CPU_INLINE void sigmoid_fwd_blk(const float *x, const float *dy, float *y)
{
    float e[ACT_BLK];
    (void)dy;
    sig_exp_blk(x, e);
    for (int j = 0; j < ACT_BLK; j++)
        y[j] = 1.0f / (1.0f + e[j]);
}

PG_CPU_INLINE void sigmoid_bwd_blk(const float *x, const float *dy, float *dx)
{
    float e[ACT_BLK];
    sig_exp_blk(x, e);
    for (int j = 0; j < ACT_BLK; j++) {
        float s = 1.0f / (1.0f + e[j]);
        e[j] = dy[j] * (s * (e[j] * s));
    }
    for (int j = 0; j < ACT_BLK; j++)
        dx[j] = e[j];
}

PG_CPU_INLINE void tanh_fwd_blk(const float *x, const float *dy, float *y)
{
    float e[ACT_BLK];
    (void)dy;
    tanh_exp_blk(x, e);
    for (int j = 0; j < ACT_BLK; j++) {
        float t = (1.0f - e[j]) / (1.0f + e[j]);
        e[j] = copysignf(t, x[j]);
    }
    for (int j = 0; j < ACT_BLK; j++)
        y[j] = e[j];
}

PG_CPU_INLINE void tanh_bwd_blk(const float *x, const float *dy, float *dx)
{
    float e[ACT_BLK];
    tanh_exp_blk(x, e);
    for (int j = 0; j < ACT_BLK; j++) {
        float q = 1.0f + e[j];
        e[j] = dy[j] * (4.0f * e[j] / (q * q));
    }
    for (int j = 0; j < ACT_BLK; j++)
        dx[j] = e[j];
}

PG_CPU_INLINE void silu_fwd_blk(const float *x, const float *dy, float *y)
{
    float e[ACT_BLK];
    (void)dy;
    sig_exp_blk(x, e);
    for (int j = 0; j < ACT_BLK; j++)
        e[j] = x[j] / (1.0f + e[j]);
    for (int j = 0; j < ACT_BLK; j++)
        y[j] = e[j];
}

/* d(x s)/dx = s + x s (1 - s) = s (1 + x e s) */
PG_CPU_INLINE void silu_bwd_blk(const float *x, const float *dy, float *dx)
{
    float e[ACT_BLK];
    sig_exp_blk(x, e);
    for (int j = 0; j < ACT_BLK; j++) {
        float s = 1.0f / (1.0f + e[j]);
        e[j] = dy[j] * (s * (1.0f + x[j] * (e[j] * s)));
    }
    for (int j = 0; j < ACT_BLK; j++)
        dx[j] = e[j];
}

/* The whole blocks of [0, n) for one kind and direction, baseline and AVX2
 * twins (dy is NULL in a forward), then the op: the blocks, a padded tail. */
#define ACT_RUNS(name)                                                                                              \
    static void name##_run(int64_t n, const float *x, const float *dy, float *out)                                 \
    {                                                                                                               \
        for (int64_t i = 0; i < n; i += ACT_BLK)                                                                    \
            name##_blk(x + i, dy ? dy + i : NULL, out + i);                                                         \
    }                                                                                                               \
    ACT_RUN_AVX2(name)
#ifdef PG_CPU_AVX2
#define ACT_RUN_AVX2(name)                                                                                          \
    PG_CPU_TARGET_AVX2 static void name##_run_avx2(int64_t n, const float *x, const float *dy, float *out)         \
    {                                                                                                               \
        for (int64_t i = 0; i < n; i += ACT_BLK)                                                                    \
            name##_blk(x + i, dy ? dy + i : NULL, out + i);                                                         \
    }
#define ACT_PICK(name) (c->avx2 ? name##_run_avx2 : name##_run)
#else
#define ACT_RUN_AVX2(name)
#define ACT_PICK(name) name##_run
#endif

ACT_RUNS(sigmoid_fwd)
ACT_RUNS(sigmoid_bwd)
ACT_RUNS(tanh_fwd)
ACT_RUNS(tanh_bwd)
ACT_RUNS(silu_fwd)
ACT_RUNS(silu_bwd)

typedef void (*act_run_fn)(int64_t n, const float *x, const float *dy, float *out);
typedef void (*act_blk_fn)(const float *x, const float *dy, float *out);

static int act_apply(const char *op, act_run_fn run, act_blk_fn blk, int64_t count, const float *x, const float *dy,
                     float *out)
{
    if (pg_args_count(op, count))
        return 1;
    int64_t i = count / ACT_BLK * ACT_BLK;
    run(i, x, dy, out);
    if (i < count) {
        float bx[ACT_BLK] = {0}, bd[ACT_BLK] = {0}, bo[ACT_BLK];
        for (int64_t j = 0; j < count - i; j++) {
            bx[j] = x[i + j];
            bd[j] = dy ? dy[i + j] : 0.0f;
        }
        blk(bx, dy ? bd : NULL, bo);
        for (int64_t j = 0; j < count - i; j++)
            out[i + j] = bo[j];
    }
    return 0;
}

int pg_sigmoid_fwd(pg_ctx *c, int64_t count, const float *x, float *y)
{
    (void)c;
    return act_apply("sigmoid_fwd", ACT_PICK(sigmoid_fwd), sigmoid_fwd_blk, count, x, NULL, y);
}

int pg_sigmoid_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx)
{
    (void)c;
    return act_apply("sigmoid_bwd_in", ACT_PICK(sigmoid_bwd), sigmoid_bwd_blk, count, x, dy, dx);
}

int pg_tanh_fwd(pg_ctx *c, int64_t count, const float *x, float *y)
{
    (void)c;
    return act_apply("tanh_fwd", ACT_PICK(tanh_fwd), tanh_fwd_blk, count, x, NULL, y);
}

int pg_tanh_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx)
{
    (void)c;
    return act_apply("tanh_bwd_in", ACT_PICK(tanh_bwd), tanh_bwd_blk, count, x, dy, dx);
}

int pg_silu_fwd(pg_ctx *c, int64_t count, const float *x, float *y)
{
    (void)c;
    return act_apply("silu_fwd", ACT_PICK(silu_fwd), silu_fwd_blk, count, x, NULL, y);
}

int pg_silu_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx)
{
    (void)c;
    return act_apply("silu_bwd_in", ACT_PICK(silu_bwd), silu_bwd_blk, count, x, dy, dx);
}

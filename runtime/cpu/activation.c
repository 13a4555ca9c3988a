/* runtime/cpu/activation.c — relu and gelu (tanh form, as GPT-2 and
 * torch.nn.GELU(approximate="tanh")). Elementwise; y may alias x, dx may alias dy. */
#include <math.h>

#include "cpu_kernels.h"
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
 * SIMD, with pg_cpu_exp in place of libm's tanhf (a call per element, and
 * ~70% of a gpt_char step's non-GEMM time before). A last partial block is
 * padded into a full one, so every element takes the same instructions and
 * its bits do not depend on where it sits or on the count.
 * 0.5 (1 + tanh(u)) = s = 1 / (1 + e), e = exp(-2u), and 1 - s = e s. */
#define GELU_BLK PG_CPU_EXP_BLK

/* e[j] = exp(-2 u(x[j])), u(v) = k (v + c v^3) */
PG_CPU_INLINE void gelu_exp_blk(const float *x, float *e)
{
    for (int j = 0; j < GELU_BLK; j++) {
        float v = x[j];
        e[j] = -2.0f * (GELU_K * (v + GELU_C * v * v * v));
    }
    pg_cpu_exp_blk(e);
}

PG_CPU_INLINE void gelu_fwd_blk(const float *x, float *y)
{
    float e[GELU_BLK];
    gelu_exp_blk(x, e);
    for (int j = 0; j < GELU_BLK; j++)
        e[j] = x[j] * (1.0f / (1.0f + e[j]));
    for (int j = 0; j < GELU_BLK; j++)
        y[j] = e[j];
}

/* the whole blocks of [0, n), n a multiple of GELU_BLK */
static void gelu_fwd_run(int64_t n, const float *x, float *y)
{
    for (int64_t i = 0; i < n; i += GELU_BLK)
        gelu_fwd_blk(x + i, y + i);
}
#ifdef PG_CPU_AVX2
PG_CPU_TARGET_AVX2 static void gelu_fwd_run_avx2(int64_t n, const float *x, float *y)
{
    for (int64_t i = 0; i < n; i += GELU_BLK)
        gelu_fwd_blk(x + i, y + i);
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
    if (pg_cpu_has_avx2())
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

/* dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) u', t = tanh(u), u' = k (1 + 3 c x^2);
 * with s as above: 0.5 (1 + t) = s and 0.5 (1 - t^2) = 2 s (1 - s) = 2 s e s. */
PG_CPU_INLINE void gelu_bwd_blk(const float *x, const float *dy, float *dx)
{
    float e[GELU_BLK];
    gelu_exp_blk(x, e);
    for (int j = 0; j < GELU_BLK; j++) {
        float v = x[j];
        float s = 1.0f / (1.0f + e[j]);
        float du = GELU_K * (1.0f + 3.0f * GELU_C * v * v);
        e[j] = (s + v * (2.0f * s * (e[j] * s)) * du) * dy[j];
    }
    for (int j = 0; j < GELU_BLK; j++)
        dx[j] = e[j];
}

static void gelu_bwd_run(int64_t n, const float *x, const float *dy, float *dx)
{
    for (int64_t i = 0; i < n; i += GELU_BLK)
        gelu_bwd_blk(x + i, dy + i, dx + i);
}
#ifdef PG_CPU_AVX2
PG_CPU_TARGET_AVX2 static void gelu_bwd_run_avx2(int64_t n, const float *x, const float *dy, float *dx)
{
    for (int64_t i = 0; i < n; i += GELU_BLK)
        gelu_bwd_blk(x + i, dy + i, dx + i);
}
#endif

int pg_gelu_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx)
{
    (void)c;
    if (pg_args_count("gelu_bwd_in", count))
        return 1;
    int64_t i = count / GELU_BLK * GELU_BLK;
#ifdef PG_CPU_AVX2
    if (pg_cpu_has_avx2())
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

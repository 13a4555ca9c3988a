/* runtime/cpu/optim.c — gradient norms and optimizer steps, one tensor at a
 * time, elementwise in float with the scalar factors computed in double, in
 * the same operation order as torch.optim's single-tensor SGD and AdamW. */
#include <math.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "cpu_ctx.h"
#include "cpu_simd.h"
#include "op_args.h"

#define SGD_BLK 16 /* elements per block of pg_sgd_step's and pg_scale's vectorizable passes */

/* *out = sum g^2 in double, in PG_CPU_ROW_LANES lanes: lane l adds the
 * squares of the elements i = l mod 16 in index order, the lanes are added in
 * pg_cpu_lanes_sum_d's tree. An order set by count alone, the same IEEE
 * operations on the baseline and AVX2 builds (one chain of dependent adds over
 * all the elements, as before, was the step's slowest pass over the
 * gradients: 2.0 -> 0.6 ms for 2M of them). */
static double sumsq_run(int64_t count, const float *g) { return pg_cpu_dot_d(g, g, count); }
#ifdef PG_CPU_AVX2
PG_CPU_TARGET_AVX2 static double sumsq_run_avx2(int64_t count, const float *g) { return pg_cpu_dot_d(g, g, count); }
#endif

int pg_sumsq(pg_ctx *c, int64_t count, const float *g, double *out)
{
    if (pg_args_count("sumsq", count))
        return 1;
    *out = PG_CPU_PICK(c, sumsq_run)(count, g);
    return 0;
}

int pg_scale(pg_ctx *c, float *x, float a, int64_t count)
{
    if (pg_args_count("scale", count))
        return 1;
    int64_t i = 0;
    for (; i + SGD_BLK <= count; i += SGD_BLK) /* fixed-count blocks: -O2 vectorizes them, one multiply each */
        for (int j = 0; j < SGD_BLK; j++)
            x[i + j] *= a;
    for (; i < count; i++)
        x[i] *= a;
    pg_cpu_wpack_touch(c, x, (size_t)count * sizeof *x); /* a weight's packed GEMM copies, were x one */
    return 0;
}

/* torch.optim.SGD (dampening 0, no Nesterov):
 *   d = g + wd w;  buf = d on the first step, else momentum buf + d;  w -= lr buf
 * With momentum 0 the buffer is not touched (may be NULL). */
int pg_sgd_step(pg_ctx *c, int64_t count, float *w, const float *g, float *buf,
                float lr, float momentum, float weight_decay, int first_step)
{
    if (pg_args_count("sgd_step", count))
        return 1;
    if (momentum != 0.0f && !buf)
        return PG_RT_FAIL("sgd_step: momentum %g needs a momentum buffer", (double)momentum);
    /* Blocks of SGD_BLK, one pass per term with the tests hoisted out, so each
     * pass is a fixed-count loop that -O2 turns into SIMD; every element sees
     * the same float operations in the same order as the plain loop below. */
    int64_t i = 0;
    for (; i + SGD_BLK <= count; i += SGD_BLK) {
        float d[SGD_BLK];
        for (int j = 0; j < SGD_BLK; j++)
            d[j] = g[i + j];
        if (weight_decay != 0.0f)
            for (int j = 0; j < SGD_BLK; j++)
                d[j] = d[j] + weight_decay * w[i + j];
        if (momentum != 0.0f) {
            if (!first_step)
                for (int j = 0; j < SGD_BLK; j++)
                    d[j] = buf[i + j] * momentum + d[j];
            for (int j = 0; j < SGD_BLK; j++)
                buf[i + j] = d[j];
        }
        for (int j = 0; j < SGD_BLK; j++)
            w[i + j] = w[i + j] + (-lr) * d[j];
    }
    for (; i < count; i++) {
        float d = g[i];
        if (weight_decay != 0.0f)
            d = d + weight_decay * w[i];
        if (momentum != 0.0f) {
            d = first_step ? d : buf[i] * momentum + d;
            buf[i] = d;
        }
        w[i] = w[i] + (-lr) * d;
    }
    pg_cpu_wpack_touch(c, w, (size_t)count * sizeof *w); /* its packed GEMM copies are behind now */
    return 0;
}

/* torch.optim.AdamW (amsgrad off), step t >= 1:
 *   w *= 1 - lr wd;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g g
 *   w += -(lr / (1 - beta1^t)) m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * One element's float operations, in this order, whatever its block: */
typedef struct adamw_k {
    float decay, b1, one_b1, b2, one_b2, neg_step, bc2_sqrt, eps;
} adamw_k;

/* Blocks of ADAMW_BLK, each pass a fixed-count loop that -O2 turns into SIMD
 * (the scalar loop with libm's sqrtf did not vectorize: sqrtf may set errno);
 * every element sees the IEEE operations of the plain loop, in its order (no
 * FMA contraction under -std=c11, and sqrt is correctly rounded on every
 * path), so the bits are those of the scalar loop. */
#define ADAMW_BLK 16

/* sqrt of each element in place, no errno: the SSE instruction where there is one */
PG_CPU_INLINE void sqrt_blk(float *a)
{
#if defined(__SSE__)
    for (int j = 0; j < ADAMW_BLK; j += 4)
        _mm_storeu_ps(a + j, _mm_sqrt_ps(_mm_loadu_ps(a + j)));
#else
    for (int j = 0; j < ADAMW_BLK; j++)
        a[j] = sqrtf(a[j]);
#endif
}

PG_CPU_INLINE void adamw_blk(const adamw_k *k, float *w, const float *g, float *m, float *v)
{
    /* the factors in locals: a store to w could alias *k as far as the compiler knows */
    const float decay = k->decay, b1 = k->b1, one_b1 = k->one_b1, b2 = k->b2, one_b2 = k->one_b2;
    const float neg_step = k->neg_step, bc2_sqrt = k->bc2_sqrt, eps = k->eps;
    float mi[ADAMW_BLK], vi[ADAMW_BLK], den[ADAMW_BLK];
    for (int j = 0; j < ADAMW_BLK; j++) {
        mi[j] = m[j] * b1 + one_b1 * g[j];
        vi[j] = v[j] * b2 + one_b2 * g[j] * g[j];
        den[j] = vi[j];
    }
    sqrt_blk(den);
    /* one array written per loop: w, m and v may alias too */
    for (int j = 0; j < ADAMW_BLK; j++)
        w[j] = w[j] * decay + neg_step * mi[j] / (den[j] / bc2_sqrt + eps);
    for (int j = 0; j < ADAMW_BLK; j++)
        m[j] = mi[j];
    for (int j = 0; j < ADAMW_BLK; j++)
        v[j] = vi[j];
}

static void adamw_run(const adamw_k *k, int64_t n, float *w, const float *g, float *m, float *v)
{
    for (int64_t i = 0; i < n; i += ADAMW_BLK)
        adamw_blk(k, w + i, g + i, m + i, v + i);
}
#ifdef PG_CPU_AVX2
/* The AVX2 path: adamw_blk's operations one for one in AVX2 registers, a
 * vector at a time (vsqrtps is correctly rounded, as sqrtps; w, m and v
 * stored in that order after the vector's loads, so aliases end as in the
 * block): the same bits (tests/kernels.t compares the two builds). The loop
 * above, compiled for AVX2, went through its three stack buffers and did the
 * square roots four at a time. */
PG_CPU_TARGET_AVX2 static void adamw_run_avx2(const adamw_k *k, int64_t n, float *w, const float *g, float *m, float *v)
{
    const __m256 decay = _mm256_set1_ps(k->decay), b1 = _mm256_set1_ps(k->b1), one_b1 = _mm256_set1_ps(k->one_b1);
    const __m256 b2 = _mm256_set1_ps(k->b2), one_b2 = _mm256_set1_ps(k->one_b2), eps = _mm256_set1_ps(k->eps);
    const __m256 neg_step = _mm256_set1_ps(k->neg_step), bc2_sqrt = _mm256_set1_ps(k->bc2_sqrt);
    for (int64_t i = 0; i < n; i += 8) {
        __m256 gi = _mm256_loadu_ps(g + i);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), b1), _mm256_mul_ps(one_b1, gi));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2), _mm256_mul_ps(_mm256_mul_ps(one_b2, gi), gi));
        __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2_sqrt), eps);
        __m256 wi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(w + i), decay),
                                  _mm256_div_ps(_mm256_mul_ps(neg_step, mi), den));
        _mm256_storeu_ps(w + i, wi);
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
    }
}
#endif

int pg_adamw_step(pg_ctx *c, int64_t count, float *w, const float *g, float *m, float *v,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t)
{
    if (pg_args_adamw(count, t))
        return 1;
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    adamw_k k = {(float)(1.0 - (double)lr * (double)weight_decay), beta1, (float)(1.0 - (double)beta1), beta2,
                 (float)(1.0 - (double)beta2), (float)(-((double)lr / bc1)), (float)sqrt(bc2), eps};
    int64_t i = count / ADAMW_BLK * ADAMW_BLK;
#ifdef PG_CPU_AVX2
    if (c->avx2)
        adamw_run_avx2(&k, i, w, g, m, v);
    else
#endif
        adamw_run(&k, i, w, g, m, v);
    if (i < count) { /* the last partial block, padded (the pad's results are dropped) */
        float bw[ADAMW_BLK] = {0}, bg[ADAMW_BLK] = {0}, bm[ADAMW_BLK] = {0}, bv[ADAMW_BLK] = {0};
        int64_t r = count - i;
        memcpy(bw, w + i, (size_t)r * 4), memcpy(bg, g + i, (size_t)r * 4);
        memcpy(bm, m + i, (size_t)r * 4), memcpy(bv, v + i, (size_t)r * 4);
        adamw_blk(&k, bw, bg, bm, bv);
        memcpy(w + i, bw, (size_t)r * 4), memcpy(m + i, bm, (size_t)r * 4), memcpy(v + i, bv, (size_t)r * 4);
    }
    pg_cpu_wpack_touch(c, w, (size_t)count * sizeof *w); /* its packed GEMM copies are behind now */
    return 0;
}

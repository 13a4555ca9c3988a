/* runtime/cpu/cpu_simd.h — AVX helpers shared by the CPU kernels: the packing
 * (gemm.c's panels of B, conv.c's panels made from an image: data moves only),
 * and cpu_kernels.h's exp in AVX2 registers (activation.c's gelu, swiglu.c),
 * operation for operation its scalar steps, so whichever build runs them the
 * bits are the same. Not in cpu_kernels.h, which the CUDA runtime includes. */
#ifndef PG_CPU_SIMD_H
#define PG_CPU_SIMD_H

#include "cpu_kernels.h"

#ifdef PG_CPU_AVX2
#include <immintrin.h>

/* d[i ld + l] = r[l][i] for i, l < 8: eight rows of eight floats, turned,
 * out as eight rows ld floats apart (8 x 8 transpose in AVX registers) */
static inline __attribute__((always_inline, target("avx2"))) void pg_cpu_t8x8(const float *const r[8], float *d,
                                                                             int64_t ld)
{
    __m256 r0 = _mm256_loadu_ps(r[0]), r1 = _mm256_loadu_ps(r[1]), r2 = _mm256_loadu_ps(r[2]);
    __m256 r3 = _mm256_loadu_ps(r[3]), r4 = _mm256_loadu_ps(r[4]), r5 = _mm256_loadu_ps(r[5]);
    __m256 r6 = _mm256_loadu_ps(r[6]), r7 = _mm256_loadu_ps(r[7]);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(d + ld, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(d + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(d + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(d + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(d + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(d + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(d + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* cpu_kernels.h's exp (pg_cpu_exp_clamp, pg_cpu_exp_reduce, pg_cpu_exp_poly)
 * one for one in AVX2 registers, 32 floats (PG_AVX2_U vectors) at a time, step
 * by step side by side: four independent chains in the instruction stream (one
 * vector at a time left the core waiting on latency, gelu 10-25 % slower).
 * The clamps are vmaxps(-87, a) and vminps(88, a), which are `a < -87 ? -87 :
 * a` and `a > 88 ? 88 : a` exactly, a NaN included (gcc made the scalar
 * clamps seven compares, blends and masks). Two stages, as pg_cpu_exp_wide:
 * the clamp and range reduction (r and 2^n out to L1), then the polynomial;
 * a caller runs stage 1 over a block of its elements, then stage 2 with its
 * own formula. */
#define PG_AVX2_U 4
#define PG_AVX2_EACH(stmt) /* stmt for the vectors k = 0 .. PG_AVX2_U - 1 */                                            \
    do {                                                                                                               \
        { const int k = 0; stmt; }                                                                                     \
        { const int k = 1; stmt; }                                                                                     \
        { const int k = 2; stmt; }                                                                                     \
        { const int k = 3; stmt; }                                                                                     \
    } while (0)
#define PG_V8(f) _mm256_set1_ps(f)

/* stage 1: a clamped, then r (to r) and 2^n (to sc) of e^a; r, sc 32-byte aligned */
static inline __attribute__((always_inline, target("avx2"))) void pg_avx2_exp_reduce32(__m256 a[PG_AVX2_U], float *r,
                                                                                      float *sc)
{
    __m256 t[PG_AVX2_U], n[PG_AVX2_U];
    PG_AVX2_EACH(a[k] = _mm256_min_ps(PG_V8(88.0f), _mm256_max_ps(PG_V8(-87.0f), a[k])));
    PG_AVX2_EACH(t[k] = _mm256_add_ps(_mm256_mul_ps(a[k], PG_V8(1.44269504088896341f)), PG_V8(12582912.0f)));
    PG_AVX2_EACH(n[k] = _mm256_sub_ps(t[k], PG_V8(12582912.0f)));
    PG_AVX2_EACH(_mm256_store_ps(sc + 8 * k, _mm256_castsi256_ps(_mm256_add_epi32(
                                                 _mm256_slli_epi32(_mm256_castps_si256(t[k]), 23),
                                                 _mm256_set1_epi32((int32_t)((127u - 0x4B400000u) << 23))))));
    PG_AVX2_EACH(a[k] = _mm256_sub_ps(a[k], _mm256_mul_ps(n[k], PG_V8(0.693145751953125f))));
    PG_AVX2_EACH(_mm256_store_ps(r + 8 * k, _mm256_sub_ps(a[k], _mm256_mul_ps(n[k], PG_V8(1.42860682030941723e-6f)))));
}

/* stage 2: e = pg_cpu_exp_poly(r) times 2^n */
static inline __attribute__((always_inline, target("avx2"))) void pg_avx2_exp_poly32(const float *rp, const float *sc,
                                                                                    __m256 e[PG_AVX2_U])
{
    __m256 r[PG_AVX2_U], r2[PG_AVX2_U], lo[PG_AVX2_U], hi[PG_AVX2_U];
    PG_AVX2_EACH(r[k] = _mm256_load_ps(rp + 8 * k));
    PG_AVX2_EACH(r2[k] = _mm256_mul_ps(r[k], r[k]));
    PG_AVX2_EACH(lo[k] = _mm256_add_ps(PG_V8(4.999998808e-01f), _mm256_mul_ps(PG_V8(1.666651815e-01f), r[k])));
    PG_AVX2_EACH(hi[k] = _mm256_add_ps(PG_V8(4.166953266e-02f), _mm256_mul_ps(PG_V8(8.368923329e-03f), r[k])));
    PG_AVX2_EACH(hi[k] = _mm256_add_ps(hi[k], _mm256_mul_ps(PG_V8(1.375138178e-03f), r2[k])));
    PG_AVX2_EACH(lo[k] = _mm256_add_ps(lo[k], _mm256_mul_ps(r2[k], hi[k])));
    PG_AVX2_EACH(e[k] = _mm256_add_ps(_mm256_add_ps(PG_V8(1.0f), r[k]), _mm256_mul_ps(r2[k], lo[k])));
    PG_AVX2_EACH(e[k] = _mm256_mul_ps(e[k], _mm256_load_ps(sc + 8 * k)));
}
#endif

#endif

/* runtime/cpu/cpu_simd.h — AVX helpers shared by the CPU kernels' packing
 * (gemm.c's panels of B, conv.c's panels made from an image): data moves only,
 * no arithmetic, so whichever build runs them the bits are the same. Not in
 * cpu_kernels.h, which the CUDA runtime includes. */
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
#endif

#endif

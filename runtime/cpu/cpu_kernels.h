/* runtime/cpu/cpu_kernels.h — helpers private to the CPU kernels (not part of
 * the pg_ops.h contract): argument checks and the counter hashes that init
 * and dropout use. Everything here is a pure function of its arguments. */
#ifndef PG_CPU_KERNELS_H
#define PG_CPU_KERNELS_H

#include <limits.h>
#include <stdint.h>

#include "pg_ops.h"

/* Column blocks for fixed-order column sums: a row-major walk over [n, BLK]
 * with double accumulators on the stack, so no workspace is needed. */
#define PG_CPU_COLBLK 64

/* Sizes must be >= 0 and fit the 32-bit ints cblas takes. */
static inline int pg_cpu_dim_ok(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* splitmix64's output function applied to x + golden ratio: a bijective,
 * well-mixed 64-bit hash (Steele, Lea, Flood 2014). */
static inline uint64_t pg_cpu_splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) from the top 24 bits of a hash: exact in float. */
static inline float pg_cpu_unit24(uint64_t h) { return (float)(h >> 40) * (1.0f / 16777216.0f); }

#endif

/* runtime/core/init.c — parameter initial values (host code, both backends), a pure function of
 * (name, seed, element index). This formula is part of the checkpoint
 * contract: never change it (every stage that holds a replicated copy, and
 * every rerun, must make the same bits).
 *
 *   key    = splitmix64(fnv1a64(name) ^ splitmix64(seed))
 *   bits_i = splitmix64(key + i)                 (i: element index, uint64)
 *   u(i)   = (bits_i >> 40) / 2^24               (uniform in [0, 1), 24 bits)
 *   zeros (0): 0          ones (1): 1
 *   uniform (2): (float)(scale * (2 u(i) - 1))   in [-scale, scale)
 *   normal (3):  element i uses its pair p = i / 2 (integer division):
 *       u1 = ((bits_{2p} >> 40) + 1) / 2^24 in (0, 1],  u2 = u(2p + 1)
 *       rad = sqrt(-2 ln u1)
 *       value = (float)(scale * rad * (i even ? cos(2 pi u2) : sin(2 pi u2)))
 *   (double arithmetic throughout, libm log/sqrt/cos/sin, one rounding to float)
 * splitmix64(x) = mix(x + 0x9E3779B97F4A7C15) with the standard splitmix64
 * finaliser; fnv1a64 is FNV-1a over the name's bytes (offset basis
 * 0xcbf29ce484222325, prime 0x100000001b3). */
#include <math.h>

#include "pg_ops.h"

static uint64_t fnv1a64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; s && *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static double unit24d(uint64_t bits) { return (double)(bits >> 40) * (1.0 / 16777216.0); }

void pg_init_param(float *dst, int64_t count, int init_kind, double scale,
                   const char *name, uint64_t seed)
{
    uint64_t key = pg_splitmix64(fnv1a64(name) ^ pg_splitmix64(seed));
    const double two_pi = 6.283185307179586;
    for (int64_t i = 0; i < count; i++) {
        double v;
        switch (init_kind) {
        case 0: v = 0.0; break;
        case 1: v = 1.0; break;
        case 2: v = scale * (2.0 * unit24d(pg_splitmix64(key + (uint64_t)i)) - 1.0); break;
        case 3: {
            uint64_t p = (uint64_t)i / 2;
            double u1 = ((double)(pg_splitmix64(key + 2 * p) >> 40) + 1.0) * (1.0 / 16777216.0);
            double u2 = unit24d(pg_splitmix64(key + 2 * p + 1));
            double rad = sqrt(-2.0 * log(u1));
            v = scale * rad * ((i & 1) ? sin(two_pi * u2) : cos(two_pi * u2));
            break;
        }
        default:
            pg_rt_error(__FILE__, __LINE__, "init of %s: unknown init kind %d; filling zeros",
                        name ? name : "(unnamed)", init_kind);
            for (int64_t j = 0; j < count; j++)
                dst[j] = 0.0f;
            return;
        }
        dst[i] = (float)v;
    }
}

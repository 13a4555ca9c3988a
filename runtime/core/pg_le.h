/* runtime/core/pg_le.h — little-endian byte-order helpers for on-disk and
 * on-wire integers (.pgd headers, safetensors lengths, net frames). Valid C11
 * and C++ (included by runtime/cuda/cuda_net.cu, compiled by nvcc). */
#ifndef PG_LE_H
#define PG_LE_H

#include <stdint.h>

static inline void pg_put32(unsigned char *b, uint32_t v)
{
    for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
}
static inline void pg_put64(unsigned char *b, uint64_t v)
{
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t pg_get32(const unsigned char *b)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)b[i] << (8 * i);
    return v;
}
static inline uint64_t pg_get64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}

#endif

/* codegen/base/bytes.h — byte counts of the planner, overflow-checked. A
 * stage's buffer is rows x elements x 4 (a batch of 2^31 rows of a tensor of
 * 2^40 elements overflows 64 bits), and its arena a sum of thousands of
 * them: every such product and sum goes through these, which saturate at
 * PG_BYTES_OVER instead of wrapping, and a stage whose buffers reach
 * PG_BYTES_LIMIT is refused before its memory plan is solved (gen_prepare.c:
 * "the model needs N bytes on stage k, more than this machine can address").
 * Below the limit no offset the planner computes can overflow. */
#ifndef PG_BYTES_H
#define PG_BYTES_H

#include <stdint.h>

/* 64 PiB: past the address space of any machine (x86-64 and arm64 map at
 * most 2^57 bytes, most 2^48). */
#define PG_BYTES_LIMIT ((int64_t)1 << 56)
#define PG_BYTES_OVER (PG_BYTES_LIMIT + 1) /* "more than the limit" */

static inline int64_t pg_bytes_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > PG_BYTES_LIMIT)
        return PG_BYTES_OVER;
    return r;
}

static inline int64_t pg_bytes_add(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r) || r > PG_BYTES_LIMIT)
        return PG_BYTES_OVER;
    return r;
}

/* rows x elements x element bytes */
static inline int64_t pg_bytes_of(int64_t rows, int64_t elems, int64_t each)
{
    return pg_bytes_mul(pg_bytes_mul(rows, elems), each);
}

#endif

/* codegen/gen/memplan.h — the static memory planner: sizes + lifetimes -> offsets
 * in one arena per stage (TVM USMP's interface, so the algorithm can change
 * without touching the emitter). Buffers whose lifetimes overlap never share
 * bytes; every offset is PG_MP_ALIGN (256) byte aligned, so an operand's
 * alignment (which cuBLAS may choose kernels by) is the same whatever the stage
 * count. With guard bytes G (a multiple of 64; `pipegen gen --guard-bytes`),
 * each buffer is followed by at least G free bytes (up to the next aligned
 * offset) and the arena starts with G rounded up to the alignment, so no two
 * buffers live at once are adjacent: a sanitizer build of the runtime poisons
 * the gaps (pg_arena_guard). */
#ifndef PG_MEMPLAN_H
#define PG_MEMPLAN_H

#include <stdint.h>
#include <stdio.h>

#define PG_MP_ALIGN 256
#define PG_MP_WHOLE_STEP (-1) /* first_use/last_use: alive during the whole step */

typedef enum pg_mp_cat {
    MP_PARAMS, MP_GRADS, MP_OPTSTATE, MP_ACTIVATIONS, MP_RECOMPUTE,
    MP_RECV, MP_SKIP, MP_IO, MP_WORKSPACE,
    MP_KVCACHE, MP_DECODE, /* generation with the KV cache: the caches, a decode call's buffers (gen_decode.c) */
    MP__COUNT
} pg_mp_cat;

typedef struct pg_mp_buf {
    char name[96];
    pg_mp_cat cat;
    int64_t bytes;
    int first_use, last_use; /* action indices (inclusive), or PG_MP_WHOLE_STEP */
    int64_t offset;          /* out */
    char note[160];          /* what it holds, for the generated header (shape, per-slot stride) */
} pg_mp_buf;

typedef struct pg_memplan {
    int n, cap;
    pg_mp_buf *buf;
    int64_t total;           /* arena bytes (aligned) */
    int64_t opt_lo;          /* out: the optimizer state (MP_OPTSTATE) is [opt_lo, total), at the end */
    int64_t guard;           /* in: free bytes before the first buffer and after each (0: packed) */
} pg_memplan;

const char *pg_mp_cat_name(pg_mp_cat c);
/* Add a buffer; returns its index, or -1 when out of memory. */
int pg_mp_add(pg_memplan *p, const char *name, pg_mp_cat cat, int64_t bytes, int first_use, int last_use);
/* Assign offsets. The optimizer state (MP_OPTSTATE) goes last, one region
 * [opt_lo, total) in insertion order. Of the others, the buffers alive the whole step first, greedy by size
 * (largest first, ties by insertion order) at the lowest aligned free offset;
 * then, above them, the buffers with a shorter lifetime: greedy by size over
 * lifetimes (TVM USMP's greedy_by_size: each at the lowest aligned offset
 * where it meets no placed buffer whose lifetime overlaps its own) while
 * there are at most PG_MP_GREEDY_MAX of them, else a linear scan in order of
 * first use (best fit among the free ranges; near-linear for models with
 * thousands of layers). Deterministic. */
#define PG_MP_GREEDY_MAX 6000
void pg_mp_solve(pg_memplan *p);
/* Check a solved plan: every offset aligned, every buffer inside the arena,
 * and no two buffers whose lifetimes overlap closer than the guard bytes in
 * memory. 0, or -1 with what is wrong in err. */
int pg_mp_check(const pg_memplan *p, char *err, size_t errlen);
/* Bytes the buffers would take without sharing (each aligned, with its guard). */
int64_t pg_mp_unshared_bytes(const pg_memplan *p);
int64_t pg_mp_cat_bytes(const pg_memplan *p, pg_mp_cat c);
void pg_mp_free(pg_memplan *p);

#endif

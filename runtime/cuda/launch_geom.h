/* runtime/cuda/launch_geom.h — the grid and block of every launch in
 * runtime/cuda, as plain C (no CUDA header), so that tests/cuda_geom.t checks
 * them without a GPU over the shapes of every example model, GPT-2 small
 * among them: within CUDA's limits (grid x below 2^31, y and z at most 65535,
 * at most 1024 threads a block), never an empty grid, and every item reached
 * by the kernels that have no stride loop. The launchers call these; the
 * kernels' loops are what the comments say.
 *
 * Kinds of kernel:
 *  - grid-stride (elementwise, PG_GRID_STRIDE): any grid reaches any count;
 *    ceil(count / threads) blocks, at least 1, at most PG_CUDA_MAX_BLOCKS;
 *  - rows (a block per row, block-stride over the rows: layernorm, softmax,
 *    cross-entropy): min(rows, PG_CUDA_MAX_BLOCKS) blocks, at least 1;
 *  - the fixed-order reduction: exactly PG_CUDA_RED_BLOCKS blocks of
 *    PG_CUDA_RED_THREADS (the summation tree depends on nothing else);
 *  - one thread per column in x, no stride (colsum chunks, embed_bwd_w): x
 *    must reach every column, y is the chunk (or bucket) and must fit;
 *  - the fused attention: a block per (query tile, head, sample). */
#ifndef PG_CUDA_LAUNCH_GEOM_H
#define PG_CUDA_LAUNCH_GEOM_H

#include <stdint.h>
#include <stdio.h>

#define PG_CUDA_THREADS 256
#define PG_CUDA_MAX_BLOCKS 65535
/* Reductions: block size and the number of partial sums are fixed constants,
 * so the summation tree is the same on every device. */
#define PG_CUDA_RED_THREADS 256
#define PG_CUDA_RED_BLOCKS 512
#define PG_COLSUM_THREADS 256  /* colsum.cu: columns per block of a chunk */
#define PG_EMBED_BUCKETS 32    /* embed.cu: vocabulary buckets of embed_bwd_w */
#define PG_PITCHED_MAX_X 1024  /* linear.cu: x blocks of the padded bf16 copy */
#define PG_FLASH_TILE 64       /* flash_attn.cuh: rows of a query or key tile */

typedef struct pg_geom {
    uint32_t grid[3], block[3];
} pg_geom;

static inline pg_geom pg_geom_of(int64_t gx, int64_t gy, int64_t gz, int64_t threads)
{
    pg_geom g = {{(uint32_t)gx, (uint32_t)gy, (uint32_t)gz}, {(uint32_t)threads, 1, 1}};
    return g;
}

/* Blocks of a grid-stride kernel over count items. */
static inline unsigned pg_cuda_blocks(int64_t count, int threads)
{
    int64_t b = (count + threads - 1) / threads;
    if (b < 1)
        b = 1;
    return (unsigned)(b < PG_CUDA_MAX_BLOCKS ? b : PG_CUDA_MAX_BLOCKS);
}

static inline pg_geom pg_geom_stride(int64_t count, int threads)
{
    return pg_geom_of(pg_cuda_blocks(count, threads), 1, 1, threads);
}

/* A block per row, block-stride: rows 0 still launch one block (no work). */
static inline pg_geom pg_geom_rows(int64_t rows)
{
    return pg_geom_of(rows < 1 ? 1 : rows < PG_CUDA_MAX_BLOCKS ? rows : PG_CUDA_MAX_BLOCKS, 1, 1,
                      PG_CUDA_RED_THREADS);
}

static inline pg_geom pg_geom_reduce(void) { return pg_geom_of(PG_CUDA_RED_BLOCKS, 1, 1, PG_CUDA_RED_THREADS); }

/* colsum_chunks_kernel over m columns in `chunks` chunks of rows. */
static inline pg_geom pg_geom_colsum(int64_t m, int64_t chunks)
{
    return pg_geom_of((m + PG_COLSUM_THREADS - 1) / PG_COLSUM_THREADS, chunks, 1, PG_COLSUM_THREADS);
}

/* embed_bwd_w over d columns, a y block per bucket. */
static inline pg_geom pg_geom_embed_bwd_w(int64_t d)
{
    return pg_geom_of((d + PG_CUDA_THREADS - 1) / PG_CUDA_THREADS, PG_EMBED_BUCKETS, 1, PG_CUDA_THREADS);
}

/* The padded bf16 copy of cols columns of ld rows: both loops stride. */
static inline pg_geom pg_geom_pitched(int64_t ld, int64_t cols)
{
    int64_t xb = (ld + PG_CUDA_THREADS - 1) / PG_CUDA_THREADS;
    return pg_geom_of(xb < 1 ? 1 : xb < PG_PITCHED_MAX_X ? xb : PG_PITCHED_MAX_X,
                      cols < 1 ? 1 : cols < PG_CUDA_MAX_BLOCKS ? cols : PG_CUDA_MAX_BLOCKS, 1, PG_CUDA_THREADS);
}

/* The fused attention of r samples, T tokens, h heads; threads a block. */
static inline pg_geom pg_geom_flash(int64_t r, int64_t T, int64_t h, int threads)
{
    return pg_geom_of((T + PG_FLASH_TILE - 1) / PG_FLASH_TILE, h, r, threads);
}

/* Within CUDA's limits? 0, or 1 with the reason in why. */
static inline int pg_geom_check(pg_geom g, char *why, size_t n)
{
    uint64_t threads = (uint64_t)g.block[0] * g.block[1] * g.block[2];
    if (!g.grid[0] || !g.grid[1] || !g.grid[2] || g.grid[0] > 2147483647u || g.grid[1] > 65535 || g.grid[2] > 65535 ||
        !threads || threads > 1024 || g.block[0] > 1024 || g.block[1] > 1024 || g.block[2] > 64) {
        snprintf(why, n, "grid (%u, %u, %u) of blocks (%u, %u, %u): outside CUDA's limits (grid x 1 .. 2^31 - 1, y and "
                 "z 1 .. 65535, 1 .. 1024 threads a block)", g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1],
                 g.block[2]);
        return 1;
    }
    return 0;
}

/* Do the threads of x (a thread per item, no stride loop) reach `count` items? */
static inline int pg_geom_reaches_x(pg_geom g, int64_t count)
{
    return (uint64_t)g.grid[0] * g.block[0] >= (uint64_t)(count > 0 ? count : 0);
}

#endif

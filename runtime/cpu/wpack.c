/* runtime/cpu/wpack.c — the GEMM weights packed once a step.
 *
 * A linear layer's forward (y = x W^T) and input gradient (dx = dy W) take
 * the weight as the GEMM's B, the same B for every micro-batch of a step;
 * gemm.c would pack it into its panels again in every call (13 % of llama's
 * loss stage). Here each weight the stage's GEMMs read (main.c names them at
 * start-up from pg_stage_desc.gemm_weights) gets a packed copy per way it is
 * read, in one block reserved at start-up beside the arena, and the products
 * read the copy (pg_cpu_gemm_packed).
 *
 * Never stale, by construction: each weight has a generation, which every
 * write into its bytes advances, and each copy the generation it was packed
 * at; a use whose copy is behind packs it again first. The writes of a
 * weight all go through the backend, since on CUDA the arena is device
 * memory the core cannot write itself: pg_copy_to_dev (init, --load,
 * --resume, a replica's gathered state), pg_copy, pg_zero, pg_axpy_inplace,
 * the optimizer steps (optim.c), and pg_param_written for what arrives over
 * the network (a transmitted tie, --zero 1's gathered weights, generation's
 * tie messages): each calls pg_cpu_wpack_touch on the bytes it wrote. With
 * PIPE_CHECK_PACKS=1 (tests/lib.sh sets it for every test) each use whose
 * copy is current compares it with the weight, value by value, and a
 * difference stops the op with the weight's name and the element: a writer
 * that did not mark its write.
 *
 * The copies hold the same values as the weight (packing moves, it does not
 * round), so the products' bits are those of packing per call. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ctx.h"
#include "op_args.h"

/* One packed weight. */
struct pg_cpu_wpack {
    const char *name;
    const float *w;          /* [rows, cols], W [out, in] */
    int64_t rows, cols;
    atomic_uint_fast64_t gen; /* advanced by every write into w (from 1) */
    float *bp[2];            /* [PG_CPU_WT]: B = W^T, N rows, K cols; [PG_CPU_W]: B = W, N cols, K rows */
    uint_fast64_t at[2];     /* the generation each copy holds (0: none yet) */
};

/* The cap on one stage's copies when PIPE_CPU_PACK_MIB does not set one. */
#define WPACK_DEFAULT_MIB 1024

/* N and K of B in orientation o of weight e (the GEMM's view) */
static int64_t b_n(const struct pg_cpu_wpack *e, int o) { return o == PG_CPU_WT ? e->rows : e->cols; }
static int64_t b_k(const struct pg_cpu_wpack *e, int o) { return o == PG_CPU_WT ? e->cols : e->rows; }

/* The cap in bytes: PIPE_CPU_PACK_MIB (0: no packed weights), else the default. -1: not a number. */
static int64_t wpack_cap(void)
{
    const char *v = getenv("PIPE_CPU_PACK_MIB");
    if (!v || !*v)
        return (int64_t)WPACK_DEFAULT_MIB << 20;
    char *end;
    long long mib = strtoll(v, &end, 10);
    if (*end || mib < 0 || mib > ((int64_t)1 << 40))
        return -1;
    return (int64_t)mib << 20;
}

int pg_gemm_weights_plan(pg_ctx *c, int stage, int n, const pg_gemm_weight *w, FILE *out)
{
    if (n < 0 || (n && !w))
        return PG_RT_FAIL("gemm_weights_plan: stage %d names %d weights at %p", stage, n, (const void *)w);
    if (c->wp)
        return PG_RT_FAIL("gemm_weights_plan: stage %d's GEMM weights are planned already", stage);
    int64_t cap = wpack_cap();
    if (cap < 0)
        return PG_RT_FAIL("PIPE_CPU_PACK_MIB=%s: not a size in MiB (0 packs no weight; unset: at most %d MiB a "
                          "stage)", getenv("PIPE_CPU_PACK_MIB"), WPACK_DEFAULT_MIB);
    const char *ck = getenv("PIPE_CHECK_PACKS");
    c->wp_check = ck && *ck && strcmp(ck, "0") != 0;
    /* the weights, in table order, while their copies fit the cap */
    int64_t floats = 0;
    int take = 0;
    for (int i = 0; i < n; i++) {
        if (!w[i].w || w[i].rows <= 0 || w[i].cols <= 0 || w[i].rows > INT32_MAX || w[i].cols > INT32_MAX)
            return PG_RT_FAIL("gemm_weights_plan: stage %d: weight %d ('%s') is %p [%lld, %lld]", stage, i,
                              w[i].name ? w[i].name : "?", (const void *)w[i].w, (long long)w[i].rows,
                              (long long)w[i].cols);
        /* in double: each copy is at most 2^62 floats, both together may pass 2^63 */
        double f = (double)pg_cpu_gemm_packed_floats(c, w[i].rows, w[i].cols) +
                   (double)pg_cpu_gemm_packed_floats(c, w[i].cols, w[i].rows);
        if (((double)floats + f) * sizeof(float) > (double)cap)
            break;
        floats += (int64_t)f;
        take++;
    }
    c->nwp_left = n - take;
    if (!take) {
        if (out)
            pg_cpu_wpack_say(c, stage, out);
        return 0;
    }
    c->wp = calloc((size_t)take, sizeof *c->wp);
    c->wp_bytes = (size_t)floats * sizeof(float);
    c->wp_mem = c->wp ? pg_cpu_alloc_zeroed(c->wp_bytes) : NULL; /* huge pages, as the arena: streamed each step */
    if (!c->wp || !c->wp_mem) {
        free(c->wp), c->wp = NULL;
        return PG_RT_FAIL("stage %d: cannot reserve %zu bytes (%.1f MiB) for its %d GEMM weights packed once a step; "
                          "PIPE_CPU_PACK_MIB=0 runs without them (each product packs its weight itself)",
                          stage, c->wp_bytes, (double)c->wp_bytes / 1048576.0, take);
    }
    float *at = c->wp_mem;
    for (int i = 0; i < take; i++) {
        struct pg_cpu_wpack *e = &c->wp[i];
        e->name = w[i].name ? w[i].name : "?";
        e->w = w[i].w, e->rows = w[i].rows, e->cols = w[i].cols;
        atomic_init(&e->gen, 1);
        for (int o = 0; o < 2; o++) {
            e->bp[o] = at;
            at += pg_cpu_gemm_packed_floats(c, b_n(e, o), b_k(e, o));
        }
    }
    c->nwp = take;
    if (out)
        pg_cpu_wpack_say(c, stage, out);
    return 0;
}

void pg_cpu_wpack_say(const pg_ctx *c, int stage, FILE *out)
{
    if (!c->nwp && !c->nwp_left)
        return;
    fprintf(out, "stage %d: %d GEMM weight%s packed once a step (W^T and W): %zu bytes (%.2f MiB) beside the arena",
            stage, c->nwp, c->nwp == 1 ? "" : "s", c->wp_bytes, (double)c->wp_bytes / 1048576.0);
    if (c->nwp_left)
        fprintf(out, "; %d more packed in every product (over PIPE_CPU_PACK_MIB)", c->nwp_left);
    fprintf(out, "\n");
}

void pg_cpu_wpack_free(pg_ctx *c)
{
    free(c->wp_mem);
    free(c->wp);
    c->wp = NULL, c->wp_mem = NULL, c->nwp = 0;
}

void pg_cpu_wpack_touch(pg_ctx *c, const void *p, size_t bytes)
{
    if (!c) /* the copies without a context (the data and checkpoint readers' tools and fuzzers): nothing packed */
        return;
    const char *lo = p, *hi = lo + bytes;
    for (int i = 0; i < c->nwp && bytes; i++) {
        struct pg_cpu_wpack *e = &c->wp[i];
        const char *w = (const char *)e->w;
        if (lo < w + (size_t)(e->rows * e->cols) * sizeof(float) && w < hi)
            atomic_fetch_add(&e->gen, 1);
    }
}

/* PIPE_CHECK_PACKS: 1 and a located message when e's copy o differs from w */
static int wpack_stale(pg_ctx *c, const struct pg_cpu_wpack *e, int o)
{
    int64_t k, j;
    if (!pg_cpu_gemm_pack_diff(c, o == PG_CPU_WT, b_n(e, o), b_k(e, o), e->w, e->cols, e->bp[o], &k, &j))
        return 0;
    int64_t r = o == PG_CPU_WT ? j : k, col = o == PG_CPU_WT ? k : j;
    int64_t nr = pg_cpu_gemm_packed_floats(c, 1, 1); /* one column over one k: the kernel's NR */
    float packed = e->bp[o][j / nr * nr * b_k(e, o) + k * nr + j % nr];
    return PG_RT_FAIL("PIPE_CHECK_PACKS: GEMM weight '%s' [%lld, %lld]: its packed copy (B = %s) holds %.9g at [%lld, "
                      "%lld] where the weight holds %.9g: the weight was written without marking it (pg_copy_to_dev, "
                      "pg_param_written or an optimizer step; runtime/cpu/wpack.c)",
                      e->name, (long long)e->rows, (long long)e->cols, o == PG_CPU_WT ? "W^T" : "W", packed,
                      (long long)r, (long long)col, e->w[r * e->cols + col]);
}

int pg_cpu_wpack_b(pg_ctx *c, const float *w, int64_t rows, int64_t cols, int orient, const float **bp)
{
    *bp = NULL;
    if (pg_cpu_in_task()) /* its tasks run on several threads at once: no packing from there */
        return 0;
    for (int i = 0; i < c->nwp; i++) {
        struct pg_cpu_wpack *e = &c->wp[i];
        if (e->w != w || e->rows != rows || e->cols != cols)
            continue;
        uint_fast64_t gen = atomic_load(&e->gen);
        if (e->at[orient] != gen) {
            pg_cpu_gemm_pack(c, orient == PG_CPU_WT, b_n(e, orient), b_k(e, orient), w, cols, e->bp[orient]);
            e->at[orient] = gen;
        } else if (c->wp_check && wpack_stale(c, e, orient))
            return 1;
        *bp = e->bp[orient];
        return 0;
    }
    return 0;
}

/* runtime/cpu/cpu_ctx.h — the CPU backend's state, pg_ops.h's opaque pg_ctx.
 * Apart from cpu_kernels.h, which the CUDA runtime includes too (for the
 * counter hashes) and which must not define a pg_ctx of its own there. */
#ifndef PG_CPU_CTX_H
#define PG_CPU_CTX_H

#include "cpu_kernels.h"

struct pg_ctx {
    int threads;            /* GEMM threads, the caller's included (>= 1) */
    pg_cpu_gemm_pool *gemm; /* gemm.c: the workers, their buffers, the kernel */
    pg_stats_reduce_fn stats_fn; /* data-parallel replicas: batch-norm sums over the replicas (NULL: one) */
    void *stats_arg;
    int stats_reduced;      /* the next running update follows pg_batchnorm_stats_reduce */
    int avx2;               /* the elementwise and row loops' AVX2 build (cpu_kernels.h): the CPU has
                             * AVX2 and the GEMM kernel is not "portable" (PIPE_CPU_GEMM=portable runs
                             * what a host without AVX2 runs, to compare its bits) */
    float *rope_tab;        /* attention.c's rotary table (cos, then sin, [rope_T, rope_hd / 2] each) */
    int64_t rope_T, rope_hd;
    float rope_theta;
    struct pg_cpu_wpack *wp; /* wpack.c: the GEMM weights packed once a step ([nwp]) */
    int nwp, nwp_left;       /* weights packed; weights named but left unpacked (over the cap) */
    float *wp_mem;           /* their packed copies, one block reserved at start-up */
    size_t wp_bytes;
    int wp_check;            /* PIPE_CHECK_PACKS: every use compares the copy with the weight */
};

/* fn's AVX2 twin fn_avx2 (PG_CPU_TARGET_AVX2, the same source) where the
 * context says so, else fn: the elementwise and row loops' dispatch */
#ifdef PG_CPU_AVX2
#define PG_CPU_PICK(c, fn) ((c)->avx2 ? fn##_avx2 : fn)
#else
#define PG_CPU_PICK(c, fn) (fn)
#endif

#endif

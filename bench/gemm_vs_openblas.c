/* bench/gemm_vs_openblas.c — what the fixed accumulation order costs: the CPU
 * runtime's GEMM (runtime/cpu/gemm.c, one FMA chain per element, the same bits
 * for any row count, thread count and kernel) or OpenBLAS's cblas_sgemm (the
 * anchor) at the products the examples' layers make. Run by bench/gemm.sh,
 * one side per process (OpenBLAS's idle workers keep spinning after a call
 * and would take the cores from ours), alternately, several rounds.
 *
 *   gemm_vs_openblas ours|openblas THREADS
 *
 * One line per product: name, M N K and GFLOP/s of the best of 3 batches of
 * calls (each ~20 ms at 100 GFLOP/s), after one batch to warm up. Built with
 * -DPG_NO_OPENBLAS (a host without OpenBLAS's headers: bench/profile.sh) it
 * measures ours alone. */
#ifndef PG_NO_OPENBLAS
#include <cblas.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_ctx.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct product {
    const char *name;
    int ta, tb; /* as pg_cpu_gemm: A stored [K,M], B stored [N,K] */
    int M, N, K;
    int beta;
} product;

/* mlp: 64-row micro-batches (batch 512 / 8); gpt_char: 256 rows (4 samples x 64
 * positions), d 128, per-head attention products of 64 positions x 32. */
static const product products[] = {
    {"mlp layer1 fwd", 0, 1, 64, 1024, 512, 1},      {"mlp layer1 bwd_in", 0, 0, 64, 512, 1024, 0},
    {"mlp layer1 bwd_w", 1, 0, 1024, 512, 64, 1},    {"mlp layer2 fwd", 0, 1, 64, 256, 1024, 1},
    {"gpt qkv fwd", 0, 1, 256, 384, 128, 1},         {"gpt fc fwd", 0, 1, 256, 512, 128, 1},
    {"gpt proj bwd_in", 0, 0, 256, 512, 128, 0},     {"gpt fc bwd_w", 1, 0, 512, 128, 256, 1},
    {"gpt logits fwd", 0, 1, 256, 256, 128, 0},      {"gpt attention q k^T", 0, 1, 64, 64, 32, 0},
    {"gpt attention att v", 0, 0, 64, 32, 64, 0},    {"square 1024", 0, 0, 1024, 1024, 1024, 0},
};

static void call(int ours, pg_ctx *c, const product *p, const float *A, const float *B, float *C)
{
    int lda = p->ta ? p->M : p->K, ldb = p->tb ? p->K : p->N;
    if (ours)
        pg_cpu_gemm(c, p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, p->beta, C, p->N);
#ifndef PG_NO_OPENBLAS
    else
        cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans, p->M,
                    p->N, p->K, 1.0f, A, lda, B, ldb, p->beta ? 1.0f : 0.0f, C, p->N);
#endif
}

int main(int argc, char **argv)
{
    int ours = argc > 1 && !strcmp(argv[1], "ours"), threads = argc > 2 ? atoi(argv[2]) : 0;
    if (argc != 3 || (!ours && strcmp(argv[1], "openblas")) || threads < 1) {
        fprintf(stderr, "usage: gemm_vs_openblas ours|openblas THREADS\n");
        return 2;
    }
    pg_ctx *c = NULL;
    if (ours) {
        if (!(c = pg_backend_init(threads)))
            return 1;
        printf("# ours: the %s kernel, %d thread(s)\n", pg_cpu_gemm_kernel(c->gemm), threads);
    } else {
#ifdef PG_NO_OPENBLAS
        fprintf(stderr, "gemm_vs_openblas: built without OpenBLAS (-DPG_NO_OPENBLAS): `ours` only\n");
        return 2;
#else
        openblas_set_num_threads(threads);
        printf("# %s, %d thread(s)\n", openblas_get_config(), threads);
#endif
    }
    for (size_t i = 0; i < sizeof products / sizeof products[0]; i++) {
        const product *p = &products[i];
        size_t na = (size_t)p->M * p->K, nb = (size_t)p->N * p->K, nc = (size_t)p->M * p->N;
        float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4);
        if (!A || !B || !C)
            return 1;
        for (size_t j = 0; j < na; j++)
            A[j] = (float)(j % 7) * 0.1f - 0.3f;
        for (size_t j = 0; j < nb; j++)
            B[j] = (float)(j % 5) * 0.1f - 0.2f;
        memset(C, 0, nc * 4);
        double flops = 2.0 * p->M * p->N * p->K;
        int calls = (int)(2e9 * 0.01 / flops) + 1; /* ~20 ms at 100 GFLOP/s */
        double t = 1e30;
        for (int batch = 0; batch < 4; batch++) { /* the first one warms up */
            double t0 = now_s();
            for (int k = 0; k < calls; k++)
                call(ours, c, p, A, B, C);
            double tb = (now_s() - t0) / calls;
            if (batch > 0 && tb < t)
                t = tb;
        }
        printf("%s|%d %d %d|%.2f\n", p->name, p->M, p->N, p->K, flops / t * 1e-9);
        free(A), free(B), free(C);
    }
    pg_backend_free(c);
    return 0;
}

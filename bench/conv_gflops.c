/* bench/conv_gflops.c — the CPU convolutions against the GEMM's own peak, and
 * what the window costs. For each convolution of examples/resnet.pipe (a
 * micro-batch of 8 samples): the GFLOP/s of pg_conv2d_fwd, _bwd_in and
 * _bwd_w (2 flops a multiply-add), and of the same op's GEMMs alone on a
 * stored B matrix made beforehand (the column matrix; for a stride-1 input
 * gradient, which runtime/cpu/conv.c computes as the mirrored window's
 * product, a matrix of that product's shape); the difference is the share of
 * the op that is not that GEMM: building or packing the window (im2col, the
 * implicit GEMM's packing from the image), col2im. Then the GEMM's peak: a
 * 512 x 512 x 512 product. Run by bench/resnet.sh, pinned to the benchmark's
 * cores.
 *
 *   conv_gflops THREADS
 *
 * One line per layer and pass: name, op GFLOP/s, GEMM-only GFLOP/s, the
 * window's share in per cent; best of 3 batches after a warm-up. Times
 * are the process's CPU time (with 1 thread, what the op took of a core,
 * whatever else runs there; with more, idle workers' spinning counts too). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_ctx.h"

/* the process's CPU time: on cores shared with other work (a loaded machine)
 * it still counts only this program's work; with 1 thread it is the op's time */
static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct layer {
    const char *name;
    pg_conv g;
} layer;

/* conv2d geometry: in, out, h = w, kernel, stride, padding */
static pg_conv geom(int64_t in, int64_t out, int64_t hw, int64_t k, int64_t s, int64_t p)
{
    int64_t o = (hw + 2 * p - k) / s + 1;
    pg_conv g = {in, out, hw, hw, o, o, k, k, s, s, p, p, 1, 1, 1, 0};
    return g;
}

#define R 8 /* samples a call: the example's micro-batch */

/* seconds a call of fn(pass) takes: best of 3 batches of calls, ~0.1 s each */
typedef struct run {
    pg_ctx *c;
    const pg_conv *g;
    float *x, *w, *y, *dx, *dw, *ws, *col;
    int gemm_only;
} run;

static void call(run *u, int pass)
{
    const pg_conv *g = u->g;
    int64_t K = g->in * g->kh * g->kw, P = g->oh * g->ow, HW = g->h * g->w;
    int pw = pg_conv_is_pointwise(g), direct = !pw && g->sh == 1 && g->sw == 1 && g->out <= P;
    int64_t KD = g->out * g->kh * g->kw; /* the mirrored window's k: dx = W' [in, KD] B [KD, HW] */
    if (!u->gemm_only) {
        if (pass == 0)
            pg_conv2d_fwd(u->c, R, g, u->x, u->w, NULL, u->y, u->ws);
        else if (pass == 1)
            pg_conv2d_bwd_in(u->c, R, g, u->y, u->w, u->dx, u->ws);
        else
            pg_conv2d_bwd_w(u->c, R, g, u->x, u->y, u->dw, NULL, u->ws);
        return;
    }
    for (int64_t s = 0; s < R; s++) { /* the op's own products on a ready column matrix */
        const float *col = pw ? u->x + s * g->in * HW : u->col;
        if (pass == 0)
            pg_cpu_gemm(u->c, 0, 0, g->out, P, K, 1.0f, u->w, K, col, P, 0, u->y + s * g->out * P, P);
        else if (pass == 1 && direct)
            pg_cpu_gemm(u->c, 0, 0, g->in, HW, KD, 1.0f, u->w, KD, u->col, HW, 0, u->dx + s * g->in * HW, HW);
        else if (pass == 1)
            pg_cpu_gemm(u->c, 1, 0, K, P, g->out, 1.0f, u->w, K, u->y + s * g->out * P, P, 0,
                        pw ? u->dx + s * g->in * HW : u->col, P);
        else
            pg_cpu_gemm(u->c, 0, 1, g->out, K, P, 1.0f, u->y + s * g->out * P, P, col, P, 1, u->dw, K);
    }
}

static double best_s(run *u, int pass)
{
    call(u, pass);
    double t0 = now_s();
    int n = 0;
    while (now_s() - t0 < 0.03)
        call(u, pass), n++;
    double best = 1e9;
    for (int b = 0; b < 3; b++) {
        double t = now_s();
        for (int i = 0; i < n; i++)
            call(u, pass);
        double e = (now_s() - t) / n;
        if (e < best)
            best = e;
    }
    return best;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    pg_ctx *c = pg_backend_init(threads);
    if (!c)
        return 1;
    const layer layers[] = {
        {"stem 3->16 @32", geom(3, 16, 32, 3, 1, 1)},    {"3x3 16->16 @32", geom(16, 16, 32, 3, 1, 1)},
        {"3x3 16->32 /2", geom(16, 32, 32, 3, 2, 1)},    {"3x3 32->32 @16", geom(32, 32, 16, 3, 1, 1)},
        {"1x1 16->32 /2", geom(16, 32, 32, 1, 2, 0)},    {"3x3 32->64 /2", geom(32, 64, 16, 3, 2, 1)},
        {"3x3 64->64 @8", geom(64, 64, 8, 3, 1, 1)},     {"1x1 64->64 @8", geom(64, 64, 8, 1, 1, 0)},
    };
    static const char *const pass_name[3] = {"fwd", "bwd_in", "bwd_w"};
    printf("%-16s %-7s %12s %12s %9s\n", "layer", "pass", "op_GFLOP/s", "gemm_GFLOP/s", "win_share");
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        const pg_conv *g = &layers[i].g;
        int64_t K = g->in * g->kh * g->kw, P = g->oh * g->ow;
        run u = {c, g, malloc(sizeof(float) * (size_t)(R * g->in * g->h * g->w)), malloc(sizeof(float) * (size_t)(g->out * K)),
                 malloc(sizeof(float) * (size_t)(R * g->out * P)), malloc(sizeof(float) * (size_t)(R * g->in * g->h * g->w)),
                 calloc((size_t)(g->out * K), sizeof(float)), malloc(sizeof(float) * (size_t)(K * P + 1)),
                 calloc((size_t)((K > g->out * g->kh * g->kw ? K : g->out * g->kh * g->kw) * P + 1), sizeof(float)), 0};
        for (int64_t k = 0; k < R * g->in * g->h * g->w; k++)
            u.x[k] = (float)(k % 7) * 0.1f;
        for (int64_t k = 0; k < g->out * K; k++)
            u.w[k] = (float)(k % 5) * 0.1f;
        for (int64_t k = 0; k < R * g->out * P; k++)
            u.y[k] = (float)(k % 3) * 0.1f;
        double flops = 2.0 * R * (double)g->out * (double)P * (double)K;
        for (int pass = 0; pass < 3; pass++) {
            u.gemm_only = 0;
            double op = best_s(&u, pass);
            u.gemm_only = 1;
            double gm = best_s(&u, pass);
            printf("%-16s %-7s %12.2f %12.2f %8.1f%%\n", layers[i].name, pass_name[pass], flops / op * 1e-9,
                   flops / gm * 1e-9, (op - gm) / op * 100.0);
        }
        free(u.x), free(u.w), free(u.y), free(u.dx), free(u.dw), free(u.ws), free(u.col);
    }
    /* the GEMM's own peak on these threads */
    int n = 512;
    float *a = calloc((size_t)(n * n), sizeof(float)), *b = calloc((size_t)(n * n), sizeof(float)),
          *d = calloc((size_t)(n * n), sizeof(float));
    pg_cpu_gemm(c, 0, 0, n, n, n, 1.0f, a, n, b, n, 0, d, n);
    double best = 1e9;
    for (int k = 0; k < 5; k++) {
        double t = now_s();
        pg_cpu_gemm(c, 0, 0, n, n, n, 1.0f, a, n, b, n, 0, d, n);
        double e = now_s() - t;
        if (e < best)
            best = e;
    }
    printf("gemm peak 512x512x512: %.2f GFLOP/s (%d thread%s, kernel %s)\n", 2.0 * n * n * (double)n / best * 1e-9,
           threads, threads == 1 ? "" : "s", pg_cpu_gemm_kernel(c->gemm));
    free(a), free(b), free(d);
    pg_backend_free(c);
    return 0;
}

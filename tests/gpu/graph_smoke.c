/* tests/gpu/graph_smoke.c — the CUDA runtime's additions to pg_ops.h
 * (runtime/cuda/cuda_backend.h), from C: the process context slot, and a
 * CUDA graph captured once and replayed (y += x three times gives 3x, bitwise),
 * and a capture broken by a read-back fails with a message instead of
 * crashing. Linked against libpgrt_cuda.a by tests/cuda_link.t on every
 * machine; run by tests/gpu/run_gpu_tests.sh on a GPU. TAP on stdout. */
#include <stdio.h>
#include <stdlib.h>

#include "cuda_backend.h"
#include "pg_ops.h"

static int nt, nfail;

static void ok(int cond, const char *what)
{
    printf("%sok %d - %s\n", cond ? "" : "not ", ++nt, what);
    nfail += !cond;
}

int main(void)
{
    enum { N = 1000 };
    pg_ctx *c = pg_backend_init(0);
    if (!c) {
        printf("not ok 1 - pg_backend_init (needs a GPU)\n1..1\n");
        return 1;
    }
    ok(pg_cuda_process_ctx() == c, "pg_backend_init records the process context");
    float *a = pg_arena_create(c, 2 * N * sizeof(float));
    float host[N], back[N];
    for (int i = 0; i < N; i++)
        host[i] = 0.1f * (float)i - 3.0f;
    ok(a && !pg_copy_to_dev(c, a, host, sizeof host), "arena and upload");
    float *x = a, *y = a + N;
    pg_cuda_graph *g = NULL;
    int rc = pg_cuda_graph_begin(c);
    rc = rc || pg_axpy_inplace(c, y, x, N);
    rc = pg_cuda_graph_end(c, &g) || rc;
    ok(!rc && g, "capture of y += x");
    for (int k = 0; k < 3 && g; k++)
        rc = rc || pg_cuda_graph_launch(c, g);
    rc = rc || pg_sync(c) || pg_copy_to_host(c, back, y, sizeof back);
    int same = !rc;
    for (int i = 0; i < N && same; i++)
        same = back[i] == (host[i] + host[i]) + host[i];
    ok(same, "three replays give x + x + x bitwise");
    pg_cuda_graph_free(g);

    /* a read-back inside the capture: refused, reported, no graph */
    g = NULL;
    double s = 0;
    rc = pg_cuda_graph_begin(c);
    int op = pg_sumsq(c, N, x, &s);
    int end = pg_cuda_graph_end(c, &g);
    ok(!rc && (op || end) && !g, "a synchronising op during capture fails cleanly");
    pg_sync(c); /* clears the error the refused call left */
    rc = pg_zero(c, y, N) || pg_sync(c) || pg_copy_to_host(c, back, y, sizeof back);
    same = !rc;
    for (int i = 0; i < N && same; i++)
        same = back[i] == 0.0f;
    ok(same, "the stream works after the failed capture");
    pg_arena_destroy(c, a);
    pg_backend_free(c);
    ok(pg_cuda_process_ctx() == NULL, "pg_backend_free clears the process context");
    printf("1..%d\n", nt);
    return nfail != 0;
}

/* tests/gpu/marks.c — device time through pg_ops.h (pg_backend_mark,
 * pg_backend_mark_times), from C, on the backend it is linked with: the CPU
 * has no device clock and refuses marks; CUDA (run emulated by
 * tests/cuda_emu_time.t, on a GPU unchanged) times the stream: a mark's time
 * is when the stream got there, read after the step's end; a mark that opens
 * a captured run moves to the graph's launch (the host's capture is not
 * device work); marks outside a step, inside a run, or read before the step
 * ended fail with a message (stderr, checked by the test). TAP on stdout. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pg_ops.h"

static int nt, nfail;

static void ok(int cond, const char *what)
{
    printf("%sok %d - %s\n", cond ? "" : "not ", ++nt, what);
    nfail += !cond;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A step of the zeroing of x as one run of compute between two marks, the
 * host sleeping `hold_ms` after the run opened (a slow capture); the device
 * time of the run into *run_s. 0, or 1. */
static int timed_step(pg_ctx *c, int64_t step, float *x, int64_t n, long hold_ms, double *run_s)
{
    pg_step_info si = {step, 0.0f, 0.0f, 0.0f, 1};
    double t[2];
    int m0, m1, rep;
    if (pg_backend_step_begin(c, &si) || (m0 = pg_backend_mark(c, 1)) < 0 || (rep = pg_backend_compute(c, 7, NULL)) < 0)
        return 1;
    nap_ms(hold_ms);
    if ((!rep && pg_zero(c, x, n)) || pg_backend_compute_end(c) || (m1 = pg_backend_mark(c, 0)) < 0 ||
        pg_backend_step_end(c) || pg_backend_mark_times(c, t, 2) || m0 != 0 || m1 != 1)
        return 1;
    *run_s = t[1] - t[0];
    return 0;
}

int main(void)
{
    enum { N = 4096 };
    setvbuf(stdout, NULL, _IOLBF, 0);
    pg_ctx *c = pg_backend_init(1);
    if (!c) {
        printf("not ok 1 - pg_backend_init\n1..1\n");
        return 1;
    }
    if (!pg_backend_device_clock(c)) {
        ok(pg_backend_mark(c, 0) < 0, "the CPU backend: no device clock, and a mark fails");
        double t = 0.0;
        ok(pg_backend_mark_times(c, &t, 1) != 0, "the CPU backend: reading marks fails");
        pg_backend_free(c);
        printf("1..%d\n", nt);
        return nfail != 0;
    }
    float *x = pg_arena_create(c, N * sizeof(float));
    ok(x != NULL, "an arena");
    pg_step_info si = {0, 0.0f, 0.0f, 0.0f, 1};
    ok(pg_backend_mark(c, 0) < 0, "a mark outside a step fails");
    ok(!pg_backend_step_begin(c, &si) && pg_backend_compute(c, 3, NULL) == 0 && pg_backend_mark(c, 0) < 0,
       "a mark inside a run of compute fails");
    double t[4];
    int rc = pg_backend_compute_end(c) || pg_backend_mark(c, 0) != 0;
    nap_ms(30); /* the stream idle: the next mark is when the host records it */
    rc = rc || pg_backend_mark(c, 0) != 1;
    ok(!rc && pg_backend_mark_times(c, t, 2) != 0, "reading the marks before the step's end fails");
    rc = rc || pg_backend_step_end(c);
    ok(!rc && pg_backend_mark_times(c, t, 3) != 0, "reading more marks than the step made fails");
    ok(!rc && !pg_backend_mark_times(c, t, 2) && t[0] == 0.0 && t[1] >= 0.029 && t[1] < 5.0,
       "the marks' times after the step: mark 0 at 0, the next when the idle stream got there, after the host's 30 ms");
    /* graphs from the second step of the process on: run 7 is captured at its first step, then replayed */
    double captured = 0.0, replayed = 0.0;
    rc = timed_step(c, 1, x, N, 60, &captured) || timed_step(c, 2, x, N, 0, &replayed);
    ok(!rc, "two steps of one run of compute between two marks: captured, then replayed");
    printf("# the run's device time: captured %.6f s, replayed %.6f s\n", captured, replayed);
    ok(!rc && captured < 0.05,
       "a mark that opens a captured run moves to the graph's launch: the host's 60 ms of capture is not device time");
    pg_arena_destroy(c, x);
    pg_backend_free(c);
    printf("1..%d\n", nt);
    return nfail != 0;
}

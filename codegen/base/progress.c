/* codegen/base/progress.c — see progress.h. */
#include "base/progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROGRESS_AFTER_S 1.0 /* on a terminal: quiet for runs shorter than this */

static struct {
    double t0;  /* CLOCK_MONOTONIC at start */
    int mode;   /* 0 never, 1 on a terminal after PROGRESS_AFTER_S, 2 always */
} progress;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void pg_progress_start(void)
{
    const char *v = getenv("PIPEGEN_PROGRESS");
    progress.t0 = now_s();
    progress.mode = v && !strcmp(v, "1") ? 2 : v && !strcmp(v, "0") ? 0 : isatty(2) ? 1 : 0;
}

void pg_progress(const char *fmt, ...)
{
    double t = now_s() - progress.t0;
    if (!progress.mode || (progress.mode == 1 && t < PROGRESS_AFTER_S))
        return;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "pipegen: %s, %.1f s\n", line, t);
}

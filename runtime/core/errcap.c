/* runtime/core/errcap.c — see errcap.h. glibc's fopencookie makes the
 * stream that writes through and keeps the last line. */
#define _GNU_SOURCE
#include "errcap.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* The capture the tap feeds (NULL: none now). The tap's FILE stays open for
 * the life of the process: a library that read `stderr` while it was the tap
 * (the CUDA driver, a profiler's injection) may write through it at exit, and
 * a closed FILE would be glibc's "invalid stdio handle", an abort. */
static pg_errcap *active;

static ssize_t tap_write(void *cookie, const char *b, size_t n)
{
    (void)cookie;
    pg_errcap *c = active;
    size_t done = 0;
    while (done < n) { /* through to the real stderr first, as an unbuffered stream would */
        ssize_t w = write(2, b + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    for (size_t i = 0; c && i < n; i++) {
        if (b[i] == '\n') {
            if (c->len) {
                memcpy(c->last, c->line, c->len);
                c->last[c->len] = 0;
            }
            c->len = 0;
        } else if (c->len + 1 < sizeof c->line) {
            c->line[c->len++] = b[i];
        }
    }
    return (ssize_t)n; /* a lost stderr must not turn into errors of the writers */
}

int pg_errcap_begin(pg_errcap *c)
{
    static FILE *tap; /* one per process, never closed (above) */
    memset(c, 0, sizeof *c);
    if (!tap) {
        cookie_io_functions_t io = {.read = NULL, .write = tap_write, .seek = NULL, .close = NULL};
        tap = fopencookie(NULL, "w", io);
        if (!tap)
            return -1;
        setvbuf(tap, NULL, _IONBF, 0);
    }
    fflush(stderr);
    active = c;
    c->real = stderr;
    c->tap = tap;
    stderr = tap;
    return 0;
}

void pg_errcap_end(pg_errcap *c)
{
    if (!c->real)
        return;
    stderr = c->real;
    if (active == c)
        active = NULL;
    c->real = NULL;
    c->tap = NULL;
}

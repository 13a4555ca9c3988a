/* runtime/core/errcap.c — see errcap.h. glibc's fopencookie makes the
 * stream that writes through and keeps the last line. */
#define _GNU_SOURCE
#include "errcap.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

static ssize_t tap_write(void *cookie, const char *b, size_t n)
{
    pg_errcap *c = cookie;
    size_t done = 0;
    while (done < n) { /* through to the real stderr first, as an unbuffered stream would */
        ssize_t w = write(2, b + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    for (size_t i = 0; i < n; i++) {
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
    memset(c, 0, sizeof *c);
    cookie_io_functions_t io = {.read = NULL, .write = tap_write, .seek = NULL, .close = NULL};
    FILE *f = fopencookie(c, "w", io);
    if (!f)
        return -1;
    setvbuf(f, NULL, _IONBF, 0);
    fflush(stderr);
    c->real = stderr;
    c->tap = f;
    stderr = f;
    return 0;
}

void pg_errcap_end(pg_errcap *c)
{
    if (!c->real)
        return;
    stderr = c->real;
    fclose(c->tap);
    c->real = NULL;
    c->tap = NULL;
}

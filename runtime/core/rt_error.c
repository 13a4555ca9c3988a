/* runtime/core/rt_error.c — pg_rt_error (pg_ops.h): how every op of every
 * backend reports a failure, "FILE:LINE: error: ...", on stderr. */
#include <stdarg.h>
#include <stdio.h>

#include "pg_ops.h"

void pg_rt_error(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: error: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

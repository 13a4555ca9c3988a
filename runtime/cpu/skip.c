/* runtime/cpu/skip.c — combining a popped skip with the current tensor.
 * add's backward is the identity for both inputs (the generated code copies
 * or shares dy), so only concat has a backward here. */
#include <string.h>

#include "cpu_kernels.h"
#include "op_args.h"

/* y = x + s; y may alias x or s. */
int pg_add_fwd(pg_ctx *c, int64_t count, const float *x, const float *s, float *y)
{
    (void)c;
    if (pg_args_count("add_fwd", count))
        return 1;
    for (int64_t i = 0; i < count; i++)
        y[i] = x[i] + s[i];
    return 0;
}

/* y[n, a+b] = [x[n,a], s[n,b]] */
int pg_concat_fwd(pg_ctx *c, int64_t n, int64_t a, int64_t b, const float *x, const float *s, float *y)
{
    (void)c;
    if (pg_args_sizes("concat_fwd", "n", n, "a", a, "b", b))
        return 1;
    for (int64_t i = 0; i < n; i++) {
        if (a)
            memcpy(y + i * (a + b), x + i * a, (size_t)a * sizeof *y);
        if (b)
            memcpy(y + i * (a + b) + a, s + i * b, (size_t)b * sizeof *y);
    }
    return 0;
}

/* dx[n,a] = dy[:, :a], ds[n,b] = dy[:, a:] */
int pg_concat_bwd(pg_ctx *c, int64_t n, int64_t a, int64_t b, const float *dy, float *dx, float *ds)
{
    (void)c;
    if (pg_args_sizes("concat_bwd", "n", n, "a", a, "b", b))
        return 1;
    for (int64_t i = 0; i < n; i++) {
        if (dx && a)
            memcpy(dx + i * a, dy + i * (a + b), (size_t)a * sizeof *dx);
        if (ds && b)
            memcpy(ds + i * b, dy + i * (a + b) + a, (size_t)b * sizeof *ds);
    }
    return 0;
}

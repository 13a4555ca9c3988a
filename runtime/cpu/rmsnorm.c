/* runtime/cpu/rmsnorm.c — RMS norm over the last dim d of n rows (Llama's
 * LlamaRMSNorm): y = (x rstd) w, rstd = 1/sqrt(mean(x^2) + eps), saved [n].
 * The rows are layernorm.c's without the centring (pg_cpu_norm_*, mean NULL:
 * m = 0, and x - 0 and g - 0 are exact, so the arithmetic is rmsnorm's own):
 * the sums as cpu_kernels.h's row sums, an order set by d alone; the weight
 * gradient per column over the rows in index order in double (the CUDA
 * reference path's order). */
#include "cpu_kernels.h"
#include "op_args.h"

int pg_rmsnorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x, const float *w,
                   float *y, float *rstd)
{
    if (pg_args_layernorm("rmsnorm_fwd", n, d))
        return 1;
    pg_cpu_norm_fwd(c, n, d, eps, x, w, NULL, y, NULL, rstd);
    return 0;
}

/* z = x + s, then rmsnorm of z (layernorm.c: a group's rows of z in L1) */
int pg_add_rmsnorm_fwd(pg_ctx *c, int64_t n, int64_t d, float eps, const float *x, const float *s, float *z,
                       const float *w, float *y, float *rstd)
{
    if (pg_args_layernorm("add_rmsnorm_fwd", n, d))
        return 1;
    pg_cpu_norm_add_fwd(c, n, d, eps, x, s, z, w, NULL, y, NULL, rstd);
    return 0;
}

/* rmsnorm's dx, then dx += ds (a skip's gradient) */
int pg_rmsnorm_bwd_in_add(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w, const float *rstd,
                          const float *dy, const float *ds, float *dx)
{
    if (pg_args_layernorm("rmsnorm_bwd_in_add", n, d))
        return 1;
    pg_cpu_norm_bwd_in_add(c, n, d, x, w, NULL, rstd, dy, ds, dx);
    return 0;
}

/* dx = rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd */
int pg_rmsnorm_bwd_in(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *w,
                      const float *rstd, const float *dy, float *dx)
{
    if (pg_args_layernorm("rmsnorm_bwd_in", n, d))
        return 1;
    pg_cpu_norm_bwd_in(c, n, d, x, w, NULL, rstd, dy, dx);
    return 0;
}

/* dw[d] += sum_rows dy xhat, one float add into dw at the end */
int pg_rmsnorm_bwd_w(pg_ctx *c, int64_t n, int64_t d, const float *x, const float *rstd,
                     const float *dy, float *dw)
{
    if (pg_args_layernorm("rmsnorm_bwd_w", n, d))
        return 1;
    if (!dw)
        return 0;
    pg_cpu_norm_bwd_w(c, n, d, x, NULL, rstd, dy, dw, NULL);
    return 0;
}

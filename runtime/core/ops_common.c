/* runtime/core/ops_common.c — the ops of pg_ops.h that are the same on every
 * backend, written once: the logits-by-table ops, which are the backend's own
 * linear ops. (The error report every op's failure goes through is
 * rt_error.c's; the initial values, pg_init_param, are init.c's.) */

#include "pg_ops.h"

/* Logits by a table transposed are a bias-free linear layer with W = table[V,d]. */
int pg_logits_fwd(pg_ctx *c, int64_t n, int64_t d, int64_t V, const float *x, const float *table, float *y)
{
    return pg_linear_fwd(c, n, d, V, x, table, NULL, y);
}

int pg_logits_bwd_in(pg_ctx *c, int64_t n, int64_t d, int64_t V, const float *dy, const float *table, float *dx)
{
    return pg_linear_bwd_in(c, n, d, V, dy, table, dx);
}

int pg_logits_bwd_w(pg_ctx *c, int64_t n, int64_t d, int64_t V, const float *x, const float *dy, float *dtable)
{
    return pg_linear_bwd_w(c, n, d, V, x, dy, dtable, NULL);
}

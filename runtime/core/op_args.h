/* runtime/core/op_args.h — the argument rules of pg_ops.h's ops, written once
 * for every backend (runtime/cpu, runtime/cuda): each returns 0, or reports
 * through pg_rt_error, naming the op and the values, and returns 1. Sizes a
 * BLAS or cuBLAS call takes must fit a 32-bit int. */
#ifndef PG_OP_ARGS_H
#define PG_OP_ARGS_H

#include <stdint.h>

#include "pg_ops.h"

static inline int pg_args_dim_ok(int64_t v) { return v >= 0 && v <= 2147483647; }

/* An elementwise op over count values. */
static inline int pg_args_count(const char *op, int64_t count)
{
    if (count < 0)
        return PG_RT_FAIL("%s: negative count %lld", op, (long long)count);
    return 0;
}

/* Three sizes that must not be negative, named as the op's documentation names them. */
static inline int pg_args_sizes(const char *op, const char *na, int64_t a, const char *nb, int64_t b, const char *nc,
                                int64_t c)
{
    if (a < 0 || b < 0 || c < 0)
        return PG_RT_FAIL("%s: negative size %s=%lld %s=%lld %s=%lld", op, na, (long long)a, nb, (long long)b, nc,
                          (long long)c);
    return 0;
}

static inline int pg_args_linear(const char *op, int64_t n, int64_t in, int64_t out)
{
    if (!pg_args_dim_ok(n) || !pg_args_dim_ok(in) || !pg_args_dim_ok(out))
        return PG_RT_FAIL("%s: sizes n=%lld in=%lld out=%lld must be in [0, 2147483647]", op, (long long)n,
                          (long long)in, (long long)out);
    return 0;
}

/* A fused linear and activation (pg_linear_act_fwd, pg_linear_bwd_in_act): the linear's sizes and an activation. */
static inline int pg_args_linear_act(const char *op, const void *act, int64_t n, int64_t in, int64_t out)
{
    if (!act)
        return PG_RT_FAIL("%s: no activation op given (NULL)", op);
    return pg_args_linear(op, n, in, out);
}

static inline int pg_args_attention(const char *op, int64_t r, int64_t T, int64_t d, int64_t h)
{
    if (r < 0 || T <= 0 || d <= 0 || h <= 0 || d % h != 0 || !pg_args_dim_ok(3 * d) || !pg_args_dim_ok(T) ||
        !pg_args_dim_ok(r * T))
        return PG_RT_FAIL("%s: bad sizes r=%lld T=%lld d=%lld heads=%lld (need T, d, heads > 0 "
                          "and d divisible by heads)", op, (long long)r, (long long)T, (long long)d, (long long)h);
    return 0;
}

static inline int pg_args_layernorm(const char *op, int64_t n, int64_t d)
{
    if (n < 0 || d <= 0)
        return PG_RT_FAIL("%s: need n >= 0 and d > 0, got n=%lld d=%lld", op, (long long)n, (long long)d);
    return 0;
}

static inline int pg_args_batchnorm(const char *op, int64_t n, int64_t C)
{
    if (n <= 0 || C <= 0)
        return PG_RT_FAIL("%s: need n > 0 rows and C > 0 features, got n=%lld C=%lld", op, (long long)n,
                          (long long)C);
    return 0;
}

static inline int pg_args_dropout(const char *op, int64_t rows, int64_t per_row, float p)
{
    if (rows < 0 || per_row < 0 || !(p >= 0.0f && p <= 1.0f))
        return PG_RT_FAIL("%s: need rows, per_row >= 0 and p in [0, 1], got rows=%lld per_row=%lld p=%g", op,
                          (long long)rows, (long long)per_row, (double)p);
    return 0;
}

static inline int pg_args_mse(int64_t count, double denom)
{
    if (count < 0 || !(denom > 0.0))
        return PG_RT_FAIL("mse: need count >= 0 and denom > 0, got count=%lld denom=%g", (long long)count, denom);
    return 0;
}

static inline int pg_args_cross_entropy(int64_t n, int64_t V, double denom)
{
    if (n < 0 || V <= 0 || !(denom > 0.0))
        return PG_RT_FAIL("cross_entropy: need n >= 0, V > 0 and denom > 0, got n=%lld V=%lld denom=%g", (long long)n,
                          (long long)V, denom);
    return 0;
}

static inline int pg_args_adamw(int64_t count, int64_t t)
{
    if (count < 0 || t < 1)
        return PG_RT_FAIL("adamw_step: need count >= 0 and step t >= 1, got count=%lld t=%lld", (long long)count,
                          (long long)t);
    return 0;
}

/* A convolution's or pooling window's geometry (pg_conv.h): every size
 * positive (padding >= 0), channels divisible by groups, y's size the one the
 * window gives, and each matrix a sample's GEMMs use within a 32-bit int. */
static inline int pg_args_conv(const char *op, int64_t r, const pg_conv *g)
{
    int64_t oh, ow;
    if (g->transposed) {
        oh = (g->h - 1) * g->sh - 2 * g->ph + g->dh * (g->kh - 1) + 1; /* + output_padding < stride */
        ow = (g->w - 1) * g->sw - 2 * g->pw + g->dw * (g->kw - 1) + 1;
    } else {
        oh = (g->h + 2 * g->ph - g->dh * (g->kh - 1) - 1) / (g->sh > 0 ? g->sh : 1) + 1;
        ow = (g->w + 2 * g->pw - g->dw * (g->kw - 1) - 1) / (g->sw > 0 ? g->sw : 1) + 1;
    }
    int sizes = r >= 0 && g->in > 0 && g->out > 0 && g->h > 0 && g->w > 0 && g->oh > 0 && g->ow > 0 && g->kh > 0 &&
                g->kw > 0 && g->sh > 0 && g->sw > 0 && g->ph >= 0 && g->pw >= 0 && g->dh > 0 && g->dw > 0 &&
                g->groups > 0 && g->in % g->groups == 0 && g->out % g->groups == 0;
    int fits = sizes && (g->transposed ? g->oh >= oh && g->oh < oh + g->sh && g->ow >= ow && g->ow < ow + g->sw
                                       : g->oh == oh && g->ow == ow) &&
               pg_args_dim_ok(g->in * g->h * g->w) && pg_args_dim_ok(g->out * g->oh * g->ow) &&
               pg_args_dim_ok(g->in * g->kh * g->kw * g->oh * g->ow) &&
               pg_args_dim_ok(g->out * g->kh * g->kw * g->h * g->w);
    if (!fits)
        return PG_RT_FAIL("%s: bad geometry r=%lld in=%lld out=%lld %lldx%lld -> %lldx%lld kernel %lldx%lld "
                          "stride %lldx%lld padding %lldx%lld dilation %lldx%lld groups %lld%s", op, (long long)r,
                          (long long)g->in, (long long)g->out, (long long)g->h, (long long)g->w, (long long)g->oh,
                          (long long)g->ow, (long long)g->kh, (long long)g->kw, (long long)g->sh, (long long)g->sw,
                          (long long)g->ph, (long long)g->pw, (long long)g->dh, (long long)g->dw,
                          (long long)g->groups, g->transposed ? " (transposed)" : "");
    return 0;
}

/* A convolution op's geometry: pg_args_conv, and transposed exactly when the
 * op is conv_transpose2d's. */
static inline int pg_args_conv_op(const char *op, int64_t r, const pg_conv *g, int transposed)
{
    if (pg_args_conv(op, r, g))
        return 1;
    if (g->transposed != transposed)
        return PG_RT_FAIL("%s: called with a%s geometry", op, g->transposed ? " transposed" : "n untransposed");
    return 0;
}

/* A pooling window: a pg_conv that keeps its channels, groups 1, dilation 1. */
static inline int pg_args_pool(const char *op, int64_t r, const pg_conv *g)
{
    if (pg_args_conv(op, r, g))
        return 1;
    if (g->in != g->out || g->groups != 1 || g->dh != 1 || g->dw != 1 || g->transposed)
        return PG_RT_FAIL("%s: a pooling window keeps its channels (in=%lld out=%lld), has groups 1 and dilation 1",
                          op, (long long)g->in, (long long)g->out);
    return 0;
}

/* upsample of n planes [h, w] by an integer scale */
static inline int pg_args_upsample(const char *op, int64_t n, int64_t h, int64_t w, int64_t scale)
{
    if (n < 0 || h <= 0 || w <= 0 || scale <= 0 || !pg_args_dim_ok(h * scale * w * scale))
        return PG_RT_FAIL("%s: need n >= 0, h, w, scale > 0 and the output plane within 2^31, got n=%lld h=%lld "
                          "w=%lld scale=%lld", op, (long long)n, (long long)h, (long long)w, (long long)scale);
    return 0;
}

/* the mean over the middle dim of [outer, d, inner] */
static inline int pg_args_mean(const char *op, int64_t outer, int64_t d, int64_t inner)
{
    if (outer < 0 || d <= 0 || inner <= 0)
        return PG_RT_FAIL("%s: need outer >= 0, d > 0 and inner > 0, got outer=%lld d=%lld inner=%lld", op,
                          (long long)outer, (long long)d, (long long)inner);
    return 0;
}

/* swap_dims of [outer, a, mid, b, inner] */
static inline int pg_args_swap_dims(int64_t outer, int64_t a, int64_t mid, int64_t b, int64_t inner)
{
    if (outer < 0 || a <= 0 || mid <= 0 || b <= 0 || inner <= 0)
        return PG_RT_FAIL("swap_dims: need outer >= 0 and a, mid, b, inner > 0, got outer=%lld a=%lld mid=%lld "
                          "b=%lld inner=%lld", (long long)outer, (long long)a, (long long)mid, (long long)b,
                          (long long)inner);
    return 0;
}

/* batchnorm2d over x [r, C, hw]; stats_acc allows r = 0 (min_r 0), the others need a sample */
static inline int pg_args_bn2d(const char *op, int64_t r, int64_t C, int64_t hw, int64_t min_r)
{
    if (r < min_r || C <= 0 || hw <= 0)
        return PG_RT_FAIL(min_r ? "%s: need r > 0 samples, C > 0 channels and hw > 0 positions, got r=%lld C=%lld hw=%lld"
                                : "%s: need r >= 0, C > 0 and hw > 0, got r=%lld C=%lld hw=%lld",
                          op, (long long)r, (long long)C, (long long)hw);
    return 0;
}

#endif

/* runtime/core/pg_conv.h — the geometry of a convolution or a pooling window,
 * as pipegen emits it (a constant in the generated stage code) and the ops of
 * pg_ops.h read it, and the workspace a convolution's CPU ops need, which the
 * memory plan reserves (codegen/gen/layers/conv.c): one definition for both.
 *
 * Shapes are channel-first per sample, PyTorch's: x [r, in, h, w] and
 * y [r, out, oh, ow], r samples after another. A 1-D convolution (conv1d) is
 * the 2-D one with h = oh = kh = sh = dh = 1 and ph = 0. Windows follow
 * PyTorch: output position o reads input o * stride - padding + k * dilation
 * for k in [0, kernel); for a transposed convolution (conv_transpose2d) it is
 * the other way round: input position i writes output i * stride - padding +
 * k * dilation, so oh = (h - 1) sh - 2 ph + dh (kh - 1) + output_padding + 1. */
#ifndef PG_CONV_H
#define PG_CONV_H

#include <stdint.h>

typedef struct pg_conv {
    int64_t in, out;        /* channels of x and of y (pooling: equal) */
    int64_t h, w, oh, ow;   /* x's and y's height and width */
    int64_t kh, kw;         /* kernel (window) */
    int64_t sh, sw;         /* stride */
    int64_t ph, pw;         /* padding on each side */
    int64_t dh, dw;         /* dilation (1 for pooling and transposed) */
    int64_t groups;         /* in and out divisible by it (1 for pooling) */
    int transposed;         /* conv_transpose2d: weight [in, out / groups, kh, kw], else [out, in / groups, kh, kw] */
} pg_conv;

/* The window's map between an "image" and the positions the kernel is placed
 * at: a convolution reads x at y's positions, a transposed one writes y at x's. */
static inline int64_t pg_conv_img_c(const pg_conv *g) { return g->transposed ? g->out : g->in; }
static inline int64_t pg_conv_img_h(const pg_conv *g) { return g->transposed ? g->oh : g->h; }
static inline int64_t pg_conv_img_w(const pg_conv *g) { return g->transposed ? g->ow : g->w; }
static inline int64_t pg_conv_pos(const pg_conv *g) { return g->transposed ? g->h * g->w : g->oh * g->ow; }

/* 1: the window is the identity (1 x 1, stride 1, no padding): the image is
 * its own column matrix and no workspace is needed. */
static inline int pg_conv_is_pointwise(const pg_conv *g)
{
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* Floats of workspace each of a convolution's CPU ops (forward, input
 * gradient, weight gradient) needs: one sample's column matrix of one group,
 * [image channels / groups * kh * kw, positions]; 0 when pointwise. Whatever
 * the rows: the ops go sample by sample. */
static inline int64_t pg_conv_ws_floats(const pg_conv *g)
{
    if (pg_conv_is_pointwise(g))
        return 0;
    return pg_conv_img_c(g) / g->groups * g->kh * g->kw * pg_conv_pos(g);
}

/* Whether a and b are one geometry: field by field (memcmp would compare the
 * padding after `transposed` too, which a compound literal leaves unset). */
static inline int pg_conv_same(const pg_conv *a, const pg_conv *b)
{
    return a->in == b->in && a->out == b->out && a->h == b->h && a->w == b->w && a->oh == b->oh && a->ow == b->ow &&
           a->kh == b->kh && a->kw == b->kw && a->sh == b->sh && a->sw == b->sw && a->ph == b->ph && a->pw == b->pw &&
           a->dh == b->dh && a->dw == b->dw && a->groups == b->groups && a->transposed == b->transposed;
}

#endif

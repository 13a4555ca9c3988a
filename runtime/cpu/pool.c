/* runtime/cpu/pool.c — pooling and resampling of image planes: maxpool2d,
 * avgpool2d (windows as pg_conv.h describes them), upsample (nearest and
 * bilinear). One thread, planes in index order; a backward that scatters
 * (several outputs reading one input) adds into dx in output order, so the
 * bits are fixed. Sums of windows run in double and round once. */
#include <math.h>
#include <string.h>

#include "cpu_kernels.h"
#include "op_args.h"

/* The window of output (oy, ox) clipped to the plane: [y0, y1) x [x0, x1). */
static void window(const pg_conv *g, int64_t oy, int64_t ox, int64_t *y0, int64_t *y1, int64_t *x0, int64_t *x1)
{
    int64_t ys = oy * g->sh - g->ph, xs = ox * g->sw - g->pw;
    *y0 = ys < 0 ? 0 : ys;
    *x0 = xs < 0 ? 0 : xs;
    *y1 = ys + g->kh < g->h ? ys + g->kh : g->h;
    *x1 = xs + g->kw < g->w ? xs + g->kw : g->w;
}

/* The index in the plane of the window's first largest value (NaN wins, as in
 * PyTorch); the window always holds a value: padding is at most half the kernel. */
static int64_t argmax(const pg_conv *g, const float *plane, int64_t oy, int64_t ox)
{
    int64_t y0, y1, x0, x1, best = -1;
    float m = -INFINITY;
    window(g, oy, ox, &y0, &y1, &x0, &x1);
    for (int64_t iy = y0; iy < y1; iy++)
        for (int64_t ix = x0; ix < x1; ix++) {
            float v = plane[iy * g->w + ix];
            if (best < 0 || v > m || isnan(v)) {
                m = v;
                best = iy * g->w + ix;
                if (isnan(v))
                    return best;
            }
        }
    return best;
}

int pg_maxpool2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, float *y)
{
    (void)c;
    if (pg_args_pool("maxpool2d_fwd", r, g))
        return 1;
    int64_t HW = g->h * g->w, OHW = g->oh * g->ow;
    for (int64_t n = 0; n < r * g->in; n++) {
        const float *plane = x + n * HW;
        for (int64_t oy = 0; oy < g->oh; oy++)
            for (int64_t ox = 0; ox < g->ow; ox++)
                y[n * OHW + oy * g->ow + ox] = plane[argmax(g, plane, oy, ox)];
    }
    return 0;
}

int pg_maxpool2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *dy, float *dx)
{
    (void)c;
    if (pg_args_pool("maxpool2d_bwd_in", r, g))
        return 1;
    int64_t HW = g->h * g->w, OHW = g->oh * g->ow;
    memset(dx, 0, (size_t)(r * g->in * HW) * sizeof *dx);
    for (int64_t n = 0; n < r * g->in; n++) {
        const float *plane = x + n * HW;
        for (int64_t oy = 0; oy < g->oh; oy++)
            for (int64_t ox = 0; ox < g->ow; ox++)
                dx[n * HW + argmax(g, plane, oy, ox)] += dy[n * OHW + oy * g->ow + ox];
    }
    return 0;
}

int pg_avgpool2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, float *y)
{
    (void)c;
    if (pg_args_pool("avgpool2d_fwd", r, g))
        return 1;
    int64_t HW = g->h * g->w, OHW = g->oh * g->ow;
    double div = (double)(g->kh * g->kw); /* padding counted (count_include_pad) */
    for (int64_t n = 0; n < r * g->in; n++) {
        const float *plane = x + n * HW;
        for (int64_t oy = 0; oy < g->oh; oy++)
            for (int64_t ox = 0; ox < g->ow; ox++) {
                int64_t y0, y1, x0, x1;
                double s = 0.0;
                window(g, oy, ox, &y0, &y1, &x0, &x1);
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++)
                        s += plane[iy * g->w + ix];
                y[n * OHW + oy * g->ow + ox] = (float)(s / div);
            }
    }
    return 0;
}

int pg_avgpool2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *dy, float *dx)
{
    (void)c;
    if (pg_args_pool("avgpool2d_bwd_in", r, g))
        return 1;
    int64_t HW = g->h * g->w, OHW = g->oh * g->ow;
    double div = (double)(g->kh * g->kw);
    memset(dx, 0, (size_t)(r * g->in * HW) * sizeof *dx);
    for (int64_t n = 0; n < r * g->in; n++) {
        float *plane = dx + n * HW;
        for (int64_t oy = 0; oy < g->oh; oy++)
            for (int64_t ox = 0; ox < g->ow; ox++) {
                int64_t y0, y1, x0, x1;
                float v = (float)(dy[n * OHW + oy * g->ow + ox] / div);
                window(g, oy, ox, &y0, &y1, &x0, &x1);
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++)
                        plane[iy * g->w + ix] += v;
            }
    }
    return 0;
}

/* ---- upsample ---- */

/* Bilinear source of output index o along an axis of n inputs: PyTorch's
 * align_corners = false map, src = (o + 0.5) / scale - 0.5 clamped at 0;
 * i0 = floor(src), i1 = i0 + 1 (or i0 at the edge), weights l0, l1. */
typedef struct lerp {
    int64_t i0, i1;
    float l0, l1;
} lerp;

static lerp lerp_of(int64_t o, int64_t n, int64_t scale)
{
    float src = (1.0f / (float)scale) * ((float)o + 0.5f) - 0.5f;
    if (src < 0.0f)
        src = 0.0f;
    lerp l;
    l.i0 = (int64_t)src;
    l.i1 = l.i0 < n - 1 ? l.i0 + 1 : l.i0;
    l.l1 = src - (float)l.i0;
    l.l0 = 1.0f - l.l1;
    return l;
}

int pg_upsample_fwd(pg_ctx *c, int64_t n, int64_t h, int64_t w, int64_t scale, int bilinear, const float *x,
                    float *y)
{
    (void)c;
    if (pg_args_upsample("upsample_fwd", n, h, w, scale))
        return 1;
    int64_t oh = h * scale, ow = w * scale;
    for (int64_t p = 0; p < n; p++) {
        const float *in = x + p * h * w;
        float *out = y + p * oh * ow;
        for (int64_t oy = 0; oy < oh; oy++) {
            if (!bilinear) {
                for (int64_t ox = 0; ox < ow; ox++)
                    out[oy * ow + ox] = in[(oy / scale) * w + ox / scale];
                continue;
            }
            lerp ly = lerp_of(oy, h, scale);
            for (int64_t ox = 0; ox < ow; ox++) {
                lerp lx = lerp_of(ox, w, scale);
                const float *r0 = in + ly.i0 * w, *r1 = in + ly.i1 * w;
                out[oy * ow + ox] = ly.l0 * (lx.l0 * r0[lx.i0] + lx.l1 * r0[lx.i1]) +
                                    ly.l1 * (lx.l0 * r1[lx.i0] + lx.l1 * r1[lx.i1]);
            }
        }
    }
    return 0;
}

int pg_upsample_bwd_in(pg_ctx *c, int64_t n, int64_t h, int64_t w, int64_t scale, int bilinear, const float *dy,
                       float *dx)
{
    (void)c;
    if (pg_args_upsample("upsample_bwd_in", n, h, w, scale))
        return 1;
    int64_t oh = h * scale, ow = w * scale;
    for (int64_t p = 0; p < n; p++) {
        const float *g = dy + p * oh * ow;
        float *d = dx + p * h * w;
        if (!bilinear) { /* each input gathers its scale x scale block, row-major, in double */
            for (int64_t iy = 0; iy < h; iy++)
                for (int64_t ix = 0; ix < w; ix++) {
                    double s = 0.0;
                    for (int64_t a = 0; a < scale; a++)
                        for (int64_t b = 0; b < scale; b++)
                            s += g[(iy * scale + a) * ow + ix * scale + b];
                    d[iy * w + ix] = (float)s;
                }
            continue;
        }
        memset(d, 0, (size_t)(h * w) * sizeof *d);
        for (int64_t oy = 0; oy < oh; oy++) {
            lerp ly = lerp_of(oy, h, scale);
            for (int64_t ox = 0; ox < ow; ox++) {
                lerp lx = lerp_of(ox, w, scale);
                float v = g[oy * ow + ox];
                d[ly.i0 * w + lx.i0] += ly.l0 * lx.l0 * v;
                d[ly.i0 * w + lx.i1] += ly.l0 * lx.l1 * v;
                d[ly.i1 * w + lx.i0] += ly.l1 * lx.l0 * v;
                d[ly.i1 * w + lx.i1] += ly.l1 * lx.l1 * v;
            }
        }
    }
    return 0;
}

/* runtime/cuda/pool.cu — pooling and resampling of image planes on the GPU:
 * maxpool2d, avgpool2d (windows as pg_conv.h describes them) and upsample
 * (nearest, bilinear), the CPU's runtime/cpu/pool.c bit for bit. One thread
 * per output value in the forwards; the backwards are gathers, one thread per
 * input value, so nothing is scattered and no atomics are needed: an input
 * adds the contributions of the outputs that read it in output index order,
 * the order in which the CPU's scatter adds them, in the same float (or,
 * nearest's blocks, double) arithmetic; _rn intrinsics keep nvcc from fusing
 * the products into the sums. */
#include <math.h>

#include "cuda_common.h"
#include "op_args.h"

#define GRID(count) pg_cuda_blocks(count, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream

/* The window of output (oy, ox) clipped to the plane: [y0, y1) x [x0, x1). */
__device__ __forceinline__ void window(const pg_conv g, int64_t oy, int64_t ox, int64_t *y0, int64_t *y1, int64_t *x0,
                                       int64_t *x1)
{
    int64_t ys = oy * g.sh - g.ph, xs = ox * g.sw - g.pw;
    *y0 = ys < 0 ? 0 : ys;
    *x0 = xs < 0 ? 0 : xs;
    *y1 = ys + g.kh < g.h ? ys + g.kh : g.h;
    *x1 = xs + g.kw < g.w ? xs + g.kw : g.w;
}

/* The outputs whose windows hold input (iy, ix): oy in [*o0, *o1), ox in [*p0, *p1). */
__device__ __forceinline__ void readers(const pg_conv g, int64_t iy, int64_t ix, int64_t *o0, int64_t *o1,
                                        int64_t *p0, int64_t *p1)
{
    /* oy sh - ph <= iy < oy sh - ph + kh */
    int64_t a = iy + g.ph - g.kh + 1, b = ix + g.pw - g.kw + 1;
    *o0 = a <= 0 ? 0 : (a + g.sh - 1) / g.sh;
    *p0 = b <= 0 ? 0 : (b + g.sw - 1) / g.sw;
    int64_t e = (iy + g.ph) / g.sh + 1, f = (ix + g.pw) / g.sw + 1;
    *o1 = e < g.oh ? e : g.oh;
    *p1 = f < g.ow ? f : g.ow;
}

/* The plane index of the window's first largest value (NaN wins, as in PyTorch). */
__device__ int64_t argmax(const pg_conv g, const float *plane, int64_t oy, int64_t ox)
{
    int64_t y0, y1, x0, x1, best = -1;
    float m = -INFINITY;
    window(g, oy, ox, &y0, &y1, &x0, &x1);
    for (int64_t iy = y0; iy < y1; iy++)
        for (int64_t ix = x0; ix < x1; ix++) {
            float v = plane[iy * g.w + ix];
            if (best < 0 || v > m || isnan(v)) {
                m = v;
                best = iy * g.w + ix;
                if (isnan(v))
                    return best;
            }
        }
    return best;
}

__global__ void maxpool_fwd_kernel(int64_t count, pg_conv g, const float *x, float *y)
{
    PG_GRID_STRIDE(k, count) {
        int64_t OHW = g.oh * g.ow, n = k / OHW, o = k % OHW;
        const float *plane = x + n * g.h * g.w;
        y[k] = plane[argmax(g, plane, o / g.ow, o % g.ow)];
    }
}

__global__ void maxpool_bwd_kernel(int64_t count, pg_conv g, const float *x, const float *dy, float *dx)
{
    PG_GRID_STRIDE(k, count) {
        int64_t HW = g.h * g.w, n = k / HW, i = k % HW, iy = i / g.w, ix = i % g.w;
        const float *plane = x + n * HW, *d = dy + n * g.oh * g.ow;
        int64_t o0, o1, p0, p1;
        float s = 0.0f;
        readers(g, iy, ix, &o0, &o1, &p0, &p1);
        for (int64_t oy = o0; oy < o1; oy++)
            for (int64_t ox = p0; ox < p1; ox++)
                if (argmax(g, plane, oy, ox) == i)
                    s = __fadd_rn(s, d[oy * g.ow + ox]);
        dx[k] = s;
    }
}

__global__ void avgpool_fwd_kernel(int64_t count, pg_conv g, const float *x, float *y)
{
    PG_GRID_STRIDE(k, count) {
        int64_t OHW = g.oh * g.ow, n = k / OHW, o = k % OHW;
        const float *plane = x + n * g.h * g.w;
        int64_t y0, y1, x0, x1;
        double s = 0.0;
        window(g, o / g.ow, o % g.ow, &y0, &y1, &x0, &x1);
        for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = x0; ix < x1; ix++)
                s = __dadd_rn(s, (double)plane[iy * g.w + ix]);
        y[k] = (float)(s / (double)(g.kh * g.kw)); /* padding counted (count_include_pad) */
    }
}

__global__ void avgpool_bwd_kernel(int64_t count, pg_conv g, const float *dy, float *dx)
{
    PG_GRID_STRIDE(k, count) {
        int64_t HW = g.h * g.w, n = k / HW, i = k % HW;
        const float *d = dy + n * g.oh * g.ow;
        double div = (double)(g.kh * g.kw);
        int64_t o0, o1, p0, p1;
        float s = 0.0f;
        readers(g, i / g.w, i % g.w, &o0, &o1, &p0, &p1);
        for (int64_t oy = o0; oy < o1; oy++)
            for (int64_t ox = p0; ox < p1; ox++)
                s = __fadd_rn(s, (float)((double)d[oy * g.ow + ox] / div));
        dx[k] = s;
    }
}

int pg_maxpool2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, float *y)
{
    if (pg_args_pool("maxpool2d_fwd", r, g))
        return 1;
    int64_t count = r * g->in * g->oh * g->ow;
    if (!count)
        return 0;
    maxpool_fwd_kernel<<<GRID(count)>>>(count, *g, x, y);
    LAUNCH_CHECK("maxpool_fwd_kernel");
    return 0;
}

int pg_maxpool2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *dy, float *dx)
{
    if (pg_args_pool("maxpool2d_bwd_in", r, g))
        return 1;
    int64_t count = r * g->in * g->h * g->w;
    if (!count)
        return 0;
    maxpool_bwd_kernel<<<GRID(count)>>>(count, *g, x, dy, dx);
    LAUNCH_CHECK("maxpool_bwd_kernel");
    return 0;
}

int pg_avgpool2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, float *y)
{
    if (pg_args_pool("avgpool2d_fwd", r, g))
        return 1;
    int64_t count = r * g->in * g->oh * g->ow;
    if (!count)
        return 0;
    avgpool_fwd_kernel<<<GRID(count)>>>(count, *g, x, y);
    LAUNCH_CHECK("avgpool_fwd_kernel");
    return 0;
}

int pg_avgpool2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *dy, float *dx)
{
    if (pg_args_pool("avgpool2d_bwd_in", r, g))
        return 1;
    int64_t count = r * g->in * g->h * g->w;
    if (!count)
        return 0;
    avgpool_bwd_kernel<<<GRID(count)>>>(count, *g, dy, dx);
    LAUNCH_CHECK("avgpool_bwd_kernel");
    return 0;
}

/* ---- upsample ---- */

/* Bilinear source of output index o along an axis of n inputs: PyTorch's
 * align_corners = false map, src = (o + 0.5) / scale - 0.5 clamped at 0;
 * i0 = floor(src), i1 = i0 + 1 (or i0 at the edge), weights l0, l1 (pool.c's). */
struct lerp {
    int64_t i0, i1;
    float l0, l1;
};

__device__ __forceinline__ lerp lerp_of(int64_t o, int64_t n, int64_t scale)
{
    float src = __fsub_rn(__fmul_rn(1.0f / (float)scale, __fadd_rn((float)o, 0.5f)), 0.5f);
    if (src < 0.0f)
        src = 0.0f;
    lerp l;
    l.i0 = (int64_t)src;
    l.i1 = l.i0 < n - 1 ? l.i0 + 1 : l.i0;
    l.l1 = __fsub_rn(src, (float)l.i0);
    l.l0 = __fsub_rn(1.0f, l.l1);
    return l;
}

__global__ void upsample_fwd_kernel(int64_t count, int64_t h, int64_t w, int64_t scale, int bilinear,
                                    const float *x, float *y)
{
    PG_GRID_STRIDE(k, count) {
        int64_t oh = h * scale, ow = w * scale, p = k / (oh * ow), o = k % (oh * ow), oy = o / ow, ox = o % ow;
        const float *in = x + p * h * w;
        if (!bilinear) {
            y[k] = in[(oy / scale) * w + ox / scale];
            continue;
        }
        lerp ly = lerp_of(oy, h, scale), lx = lerp_of(ox, w, scale);
        const float *r0 = in + ly.i0 * w, *r1 = in + ly.i1 * w;
        float a = __fadd_rn(__fmul_rn(lx.l0, r0[lx.i0]), __fmul_rn(lx.l1, r0[lx.i1]));
        float b = __fadd_rn(__fmul_rn(lx.l0, r1[lx.i0]), __fmul_rn(lx.l1, r1[lx.i1]));
        y[k] = __fadd_rn(__fmul_rn(ly.l0, a), __fmul_rn(ly.l1, b));
    }
}

/* nearest: each input's scale x scale block, row-major, in double */
__global__ void upsample_nearest_bwd_kernel(int64_t count, int64_t h, int64_t w, int64_t scale, const float *dy,
                                            float *dx)
{
    PG_GRID_STRIDE(k, count) {
        int64_t ow = w * scale, p = k / (h * w), i = k % (h * w), iy = i / w, ix = i % w;
        const float *g = dy + p * h * scale * ow;
        double s = 0.0;
        for (int64_t a = 0; a < scale; a++)
            for (int64_t b = 0; b < scale; b++)
                s = __dadd_rn(s, (double)g[(iy * scale + a) * ow + ix * scale + b]);
        dx[k] = (float)s;
    }
}

/* bilinear: the outputs within one input of (iy, ix) in output order, each
 * output's four corners in the CPU's order (i0 i0, i0 i1, i1 i0, i1 i1) */
__global__ void upsample_bilinear_bwd_kernel(int64_t count, int64_t h, int64_t w, int64_t scale, const float *dy,
                                             float *dx)
{
    PG_GRID_STRIDE(k, count) {
        int64_t oh = h * scale, ow = w * scale, p = k / (h * w), i = k % (h * w), iy = i / w, ix = i % w;
        const float *g = dy + p * oh * ow;
        int64_t oy0 = (iy - 1) * scale > 0 ? (iy - 1) * scale : 0, oy1 = (iy + 2) * scale < oh ? (iy + 2) * scale : oh;
        int64_t ox0 = (ix - 1) * scale > 0 ? (ix - 1) * scale : 0, ox1 = (ix + 2) * scale < ow ? (ix + 2) * scale : ow;
        float s = 0.0f;
        for (int64_t oy = oy0; oy < oy1; oy++) {
            lerp ly = lerp_of(oy, h, scale);
            if (ly.i0 != iy && ly.i1 != iy)
                continue;
            for (int64_t ox = ox0; ox < ox1; ox++) {
                lerp lx = lerp_of(ox, w, scale);
                float v = g[oy * ow + ox];
                if (ly.i0 == iy && lx.i0 == ix)
                    s = __fadd_rn(s, __fmul_rn(__fmul_rn(ly.l0, lx.l0), v));
                if (ly.i0 == iy && lx.i1 == ix)
                    s = __fadd_rn(s, __fmul_rn(__fmul_rn(ly.l0, lx.l1), v));
                if (ly.i1 == iy && lx.i0 == ix)
                    s = __fadd_rn(s, __fmul_rn(__fmul_rn(ly.l1, lx.l0), v));
                if (ly.i1 == iy && lx.i1 == ix)
                    s = __fadd_rn(s, __fmul_rn(__fmul_rn(ly.l1, lx.l1), v));
            }
        }
        dx[k] = s;
    }
}

int pg_upsample_fwd(pg_ctx *c, int64_t n, int64_t h, int64_t w, int64_t scale, int bilinear, const float *x,
                    float *y)
{
    if (pg_args_upsample("upsample_fwd", n, h, w, scale))
        return 1;
    int64_t count = n * h * scale * w * scale;
    if (!count)
        return 0;
    upsample_fwd_kernel<<<GRID(count)>>>(count, h, w, scale, bilinear, x, y);
    LAUNCH_CHECK("upsample_fwd_kernel");
    return 0;
}

int pg_upsample_bwd_in(pg_ctx *c, int64_t n, int64_t h, int64_t w, int64_t scale, int bilinear, const float *dy,
                       float *dx)
{
    if (pg_args_upsample("upsample_bwd_in", n, h, w, scale))
        return 1;
    int64_t count = n * h * w;
    if (!count)
        return 0;
    if (bilinear) {
        upsample_bilinear_bwd_kernel<<<GRID(count)>>>(count, h, w, scale, dy, dx);
        LAUNCH_CHECK("upsample_bilinear_bwd_kernel");
    } else {
        upsample_nearest_bwd_kernel<<<GRID(count)>>>(count, h, w, scale, dy, dx);
        LAUNCH_CHECK("upsample_nearest_bwd_kernel");
    }
    return 0;
}

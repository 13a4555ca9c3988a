/* runtime/cpu/conv.c — conv2d (conv1d is its h = 1 case) and conv_transpose2d
 * on the backend's GEMM (gemm.c), by im2col: one sample's image of one group
 * becomes a column matrix col [C_g kh kw, positions] in the workspace, and the
 * convolution is one GEMM with it:
 *
 *   conv2d            y_g  [out_g, P]  = W_g [out_g, K] col(x_g) [K, P]
 *                     dx_g             = col2im(W_g^T dy_g)
 *                     dW_g [out_g, K] += dy_g [out_g, P] col(x_g)^T
 *   conv_transpose2d  y_g              = col2im(W_g^T x_g)   (W_g [in_g, K])
 *                     dx_g [in_g, P]   = W_g col(dy_g)
 *                     dW_g [in_g, K]  += x_g [in_g, P] col(dy_g)^T
 *
 * (P: the positions the kernel is placed at; K = C_g kh kw, C_g the channels
 * of the image the window reads: x for a convolution, y for a transposed one.)
 * A 1 x 1 window with stride 1 and no padding is its own column matrix: the
 * GEMM reads x (writes dx, y) in place, no workspace.
 *
 * Why these bits hold on any layout: every element of a GEMM is one FMA chain
 * over k in index order (runtime/cpu/README.md), whatever the threads, so y
 * and the column gradients depend on nothing but the sample; col2im adds a
 * position's contributions in a fixed order (channel, ky, kx, then the
 * positions in row-major order) on one thread; a weight gradient is one
 * chain over a sample's positions, added into dw sample by sample in index
 * order; a bias gradient sums a micro-batch's dy in double (samples, then
 * positions, in index order) and adds it once.
 *
 * Why im2col and not an implicit GEMM: measured (bench/README.md, "conv"),
 * the column matrix costs a few per cent of a 3 x 3 layer's time, which is
 * all an implicit GEMM could save, against a second microkernel to keep. */
#include <string.h>

#include "cpu_kernels.h"
#include "op_args.h"

/* col [C kh kw, PH PW] from img [C, IH, IW]: row (c, ky, kx), column (py, px)
 * holds img[c, py sh - ph + ky dh, px sw - pw + kx dw], 0 outside. */
static void im2col(const pg_conv *g, int64_t C, int64_t IH, int64_t IW, int64_t PH, int64_t PW, const float *img,
                   float *col)
{
    for (int64_t ch = 0; ch < C; ch++)
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                float *row = col + ((ch * g->kh + ky) * g->kw + kx) * PH * PW;
                const float *plane = img + ch * IH * IW;
                int64_t x0 = kx * g->dw - g->pw;
                for (int64_t py = 0; py < PH; py++) {
                    float *dst = row + py * PW;
                    int64_t iy = py * g->sh - g->ph + ky * g->dh;
                    if (iy < 0 || iy >= IH) {
                        memset(dst, 0, (size_t)PW * sizeof *dst);
                        continue;
                    }
                    const float *src = plane + iy * IW;
                    if (g->sw == 1) { /* a run of the row, zeros either side */
                        int64_t lo = x0 < 0 ? -x0 : 0, hi = IW - x0 < PW ? IW - x0 : PW;
                        if (lo > PW)
                            lo = PW;
                        if (hi < lo)
                            hi = lo;
                        memset(dst, 0, (size_t)lo * sizeof *dst);
                        memcpy(dst + lo, src + x0 + lo, (size_t)(hi - lo) * sizeof *dst);
                        memset(dst + hi, 0, (size_t)(PW - hi) * sizeof *dst);
                        continue;
                    }
                    for (int64_t px = 0; px < PW; px++) {
                        int64_t ix = px * g->sw + x0;
                        dst[px] = ix >= 0 && ix < IW ? src[ix] : 0.0f;
                    }
                }
            }
}

/* img [C, IH, IW] += the adjoint of im2col: each column entry added back where
 * im2col took it from, in im2col's order (rows, then positions row-major). */
static void col2im_add(const pg_conv *g, int64_t C, int64_t IH, int64_t IW, int64_t PH, int64_t PW, const float *col,
                       float *img)
{
    for (int64_t ch = 0; ch < C; ch++)
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                const float *row = col + ((ch * g->kh + ky) * g->kw + kx) * PH * PW;
                float *plane = img + ch * IH * IW;
                int64_t x0 = kx * g->dw - g->pw;
                for (int64_t py = 0; py < PH; py++) {
                    int64_t iy = py * g->sh - g->ph + ky * g->dh;
                    if (iy < 0 || iy >= IH)
                        continue;
                    const float *src = row + py * PW;
                    float *dst = plane + iy * IW;
                    for (int64_t px = 0; px < PW; px++) {
                        int64_t ix = px * g->sw + x0;
                        if (ix >= 0 && ix < IW)
                            dst[ix] += src[px];
                    }
                }
            }
}

/* One call's sizes: the window's image (what im2col reads, col2im writes:
 * C channels of one group, IH x IW) and positions (PH x PW = P), K = C kh kw,
 * x's and y's planes, and whether the window is pointwise. */
typedef struct cv {
    int64_t C, IH, IW, PH, PW, P, K, HW, OHW;
    int pw;
} cv;

static cv cv_of(const pg_conv *g)
{
    cv v = {pg_conv_img_c(g) / g->groups, pg_conv_img_h(g), pg_conv_img_w(g), g->transposed ? g->h : g->oh,
            g->transposed ? g->w : g->ow, 0, 0, g->h * g->w, g->oh * g->ow, pg_conv_is_pointwise(g)};
    v.P = v.PH * v.PW;
    v.K = v.C * g->kh * g->kw;
    return v;
}

static void im2col_of(const pg_conv *g, const cv *v, const float *img, float *col)
{
    im2col(g, v->C, v->IH, v->IW, v->PH, v->PW, img, col);
}

static void col2im_of(const pg_conv *g, const cv *v, const float *col, float *img)
{
    col2im_add(g, v->C, v->IH, v->IW, v->PH, v->PW, col, img);
}

/* planes [n, hw] set to the bias of their channel (n = r * C, channel = plane mod C), or 0 */
static void fill_bias(int64_t r, int64_t C, int64_t hw, const float *b, float *y)
{
    for (int64_t s = 0; s < r; s++)
        for (int64_t ch = 0; ch < C; ch++) {
            float v = b ? b[ch] : 0.0f, *p = y + (s * C + ch) * hw;
            for (int64_t i = 0; i < hw; i++)
                p[i] = v;
        }
}

/* db[C] += the sums of dy [r, C, hw] per channel: in double, samples then
 * positions in index order, one float add */
static void bias_grad(int64_t r, int64_t C, int64_t hw, const float *dy, float *db)
{
    for (int64_t ch = 0; ch < C; ch++) {
        double s = 0.0;
        for (int64_t n = 0; n < r; n++) {
            const float *p = dy + (n * C + ch) * hw;
            for (int64_t i = 0; i < hw; i++)
                s += p[i];
        }
        db[ch] += (float)s;
    }
}

static int ws_ok(const char *op, const pg_conv *g, const float *ws)
{
    if (pg_conv_ws_floats(g) > 0 && !ws)
        return PG_RT_FAIL("%s: a %lldx%lld window needs its workspace of %lld floats, got NULL", op,
                          (long long)g->kh, (long long)g->kw, (long long)pg_conv_ws_floats(g));
    return 0;
}

static int check(const char *op, int64_t r, const pg_conv *g, int transposed, const float *ws)
{
    if (pg_args_conv_op(op, r, g, transposed))
        return 1;
    return ws_ok(op, g, ws);
}

/* The three products, each for a convolution and its transpose (which
 * swap the roles of x and y). A side is one tensor of the op, [r, ch, plane]:
 * its group gi of sample s starts at (s ch + gi ch / groups) plane. */
typedef struct side {
    int64_t ch, plane;
} side;

static int64_t at(const pg_conv *g, side t, int64_t s, int64_t gi) { return (s * t.ch + gi * (t.ch / g->groups)) * t.plane; }

/* out_g [M, P] (= beta ? out_g : 0) + W_g [M, K] col(img_g) [K, P]: conv2d's
 * y from x, conv_transpose2d's dx from dy. M = out's channels of a group. */
static void gemm_col(pg_ctx *c, int64_t r, const pg_conv *g, const cv *v, const float *w, const float *img, side si,
                     float *out, side so, int beta, float *ws)
{
    int64_t M = so.ch / g->groups;
    for (int64_t s = 0; s < r; s++)
        for (int64_t gi = 0; gi < g->groups; gi++) {
            const float *ig = img + at(g, si, s, gi);
            if (!v->pw)
                im2col_of(g, v, ig, ws);
            pg_cpu_gemm(c, 0, 0, M, v->P, v->K, 1.0f, w + gi * M * v->K, v->K, v->pw ? ig : ws, v->P, beta,
                        out + at(g, so, s, gi), v->P);
        }
}

/* img_g += col2im(W_g^T [K, M] in_g [M, P]): conv2d's dx from dy (img zeroed
 * first), conv_transpose2d's y from x (img holding the bias). */
static void col2im_gemm(pg_ctx *c, int64_t r, const pg_conv *g, const cv *v, const float *w, const float *in, side sn,
                        float *img, side si, float *ws)
{
    int64_t M = sn.ch / g->groups;
    for (int64_t s = 0; s < r; s++)
        for (int64_t gi = 0; gi < g->groups; gi++) {
            float *ig = img + at(g, si, s, gi);
            pg_cpu_gemm(c, 1, 0, v->K, v->P, M, 1.0f, w + gi * M * v->K, v->K, in + at(g, sn, s, gi), v->P, v->pw,
                        v->pw ? ig : ws, v->P);
            if (!v->pw)
                col2im_of(g, v, ws, ig);
        }
}

/* dW_g [M, K] += lhs_g [M, P] col(img_g)^T, sample by sample: conv2d's from
 * dy and x, conv_transpose2d's from x and dy. */
static void wgrad(pg_ctx *c, int64_t r, const pg_conv *g, const cv *v, const float *lhs, side sl, const float *img,
                  side si, float *dw, float *ws)
{
    int64_t M = sl.ch / g->groups;
    for (int64_t s = 0; s < r; s++)
        for (int64_t gi = 0; gi < g->groups; gi++) {
            const float *ig = img + at(g, si, s, gi);
            if (!v->pw)
                im2col_of(g, v, ig, ws);
            pg_cpu_gemm(c, 0, 1, M, v->K, v->P, 1.0f, lhs + at(g, sl, s, gi), v->P, v->pw ? ig : ws, v->P, 1,
                        dw + gi * M * v->K, v->K);
        }
}

/* x's and y's sides */
static side xs(const pg_conv *g) { return (side){g->in, g->h * g->w}; }
static side ys(const pg_conv *g) { return (side){g->out, g->oh * g->ow}; }

/* ---- start-up ---- */

/* Nothing to plan on the CPU (each pass's column workspace is an arena frame
 * buffer the memory plan reserved); the geometries are checked all the same. */
int pg_conv_plan(pg_ctx *c, int stage, int n, const pg_conv *g)
{
    (void)c, (void)stage;
    for (int i = 0; i < n; i++)
        if (pg_args_conv_op("conv_plan", 1, &g[i], g[i].transposed))
            return 1;
    return 0;
}

/* ---- conv2d ---- */

int pg_conv2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *w, const float *b, float *y,
                  float *ws)
{
    if (check("conv2d_fwd", r, g, 0, ws))
        return 1;
    cv v = cv_of(g);
    if (b)
        fill_bias(r, g->out, v.P, b, y);
    gemm_col(c, r, g, &v, w, x, xs(g), y, ys(g), b != NULL, ws);
    return 0;
}

int pg_conv2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *dy, const float *w, float *dx, float *ws)
{
    if (check("conv2d_bwd_in", r, g, 0, ws))
        return 1;
    cv v = cv_of(g);
    memset(dx, 0, (size_t)(r * g->in * v.HW) * sizeof *dx);
    col2im_gemm(c, r, g, &v, w, dy, ys(g), dx, xs(g), ws);
    return 0;
}

int pg_conv2d_bwd_w(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *dy, float *dw, float *db,
                    float *ws)
{
    if (check("conv2d_bwd_w", r, g, 0, ws))
        return 1;
    cv v = cv_of(g);
    wgrad(c, r, g, &v, dy, ys(g), x, xs(g), dw, ws);
    if (db)
        bias_grad(r, g->out, v.OHW, dy, db);
    return 0;
}

/* ---- conv_transpose2d ---- */

int pg_conv_transpose2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *w, const float *b,
                            float *y, float *ws)
{
    if (check("conv_transpose2d_fwd", r, g, 1, ws))
        return 1;
    cv v = cv_of(g);
    fill_bias(r, g->out, v.OHW, b, y); /* col2im adds into it */
    col2im_gemm(c, r, g, &v, w, x, xs(g), y, ys(g), ws);
    return 0;
}

int pg_conv_transpose2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *dy, const float *w, float *dx,
                               float *ws)
{
    if (check("conv_transpose2d_bwd_in", r, g, 1, ws))
        return 1;
    cv v = cv_of(g);
    gemm_col(c, r, g, &v, w, dy, ys(g), dx, xs(g), 0, ws);
    return 0;
}

int pg_conv_transpose2d_bwd_w(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *dy, float *dw,
                              float *db, float *ws)
{
    if (check("conv_transpose2d_bwd_w", r, g, 1, ws))
        return 1;
    cv v = cv_of(g);
    wgrad(c, r, g, &v, x, xs(g), dy, ys(g), dw, ws);
    if (db)
        bias_grad(r, g->out, v.OHW, dy, db);
    return 0;
}

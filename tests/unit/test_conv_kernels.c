/* tests/unit/test_conv_kernels.c — the CPU ops of convolutional networks
 * (runtime/cpu/conv.c, pool.c, dims.c, batchnorm2d.c, activation.c's
 * sigmoid/tanh/silu) against their pg_ops.h contract:
 *  - forwards against naive double references (the direct sums of the
 *    definitions), backwards by the adjoint identities <f(x), dy> = <x, dx>
 *    and <f(w), dy> = <w, dw> (the ops are linear in each), at odd sizes:
 *    stride 2 on odd planes, dilation 2, depthwise, a kernel larger than its
 *    stride, 1 x 1 with stride 1 (no workspace) and 2, padding larger than
 *    half the kernel, transposed with output_padding and groups;
 *  - the bits: a sample alone equals it inside a batch, 1 and 3 threads give
 *    the same bytes, a weight gradient of 3 samples equals 3 calls of one, and
 *    batchnorm2d's baseline and AVX2 loops give the same bytes;
 *  - the error paths' texts.
 * PyTorch itself checks them through whole models (tests/oracle.t,
 * oracle_conv and oracle_pool). Run by tests/conv_kernels.t, also as
 * `test_conv_kernels digest` (a hash of the convolutions' bytes) under every
 * GEMM kernel this CPU has. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_ctx.h"
#include "pg_ops.h"
#include "../tap.h"

typedef struct rng { uint64_t s; } rng;

static double unit(rng *r)
{
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(r->s >> 11) * (1.0 / 9007199254740992.0);
}

static float *fill(rng *r, int64_t n)
{
    float *a = calloc((size_t)(n > 0 ? n : 1), sizeof *a);
    for (int64_t i = 0; i < n; i++)
        a[i] = (float)(2.0 * unit(r) - 1.0);
    return a;
}

static float *zeros(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

static double dot(const float *a, const float *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

static double rel(double a, double b) { return fabs(a - b) / (fabs(b) > 1e-12 ? fabs(b) : 1e-12); }

/* max |a - ref| / max |ref| */
static double max_rel(const float *a, const double *ref, int64_t n)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs(a[i] - ref[i]) > num)
            num = fabs(a[i] - ref[i]);
        if (fabs(ref[i]) > den)
            den = fabs(ref[i]);
    }
    return den > 0 ? num / den : num;
}

static pg_ctx *ctx_with(int threads, const char *kernel)
{
    if (kernel)
        setenv("PIPE_CPU_GEMM", kernel, 1);
    pg_ctx *c = pg_backend_init(threads);
    if (kernel)
        unsetenv("PIPE_CPU_GEMM");
    return c;
}

/* ---- stderr capture for the error paths ---- */

typedef struct capture { int saved_fd; FILE *tmp; char text[1024]; } capture;

static void capture_begin(capture *c)
{
    fflush(stderr);
    c->tmp = tmpfile();
    c->saved_fd = dup(2);
    if (c->tmp)
        dup2(fileno(c->tmp), 2);
}

static const char *capture_end(capture *c)
{
    fflush(stderr);
    dup2(c->saved_fd, 2);
    close(c->saved_fd);
    c->text[0] = 0;
    if (c->tmp) {
        rewind(c->tmp);
        size_t n = fread(c->text, 1, sizeof c->text - 1, c->tmp);
        c->text[n] = 0;
        for (size_t i = 0; i < n; i++)
            if (c->text[i] == '\n')
                c->text[i] = ' ';
        fclose(c->tmp);
    }
    return c->text;
}

/* ---- convolutions ---- */

typedef struct conv_case {
    const char *what;
    pg_conv g;
    int bias;
} conv_case;

/* oh, ow from the window (plus output_padding op for a transposed one) */
static pg_conv geom(int64_t in, int64_t out, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                    int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups, int transposed, int64_t op)
{
    pg_conv g = {in, out, h, w, 0, 0, kh, kw, sh, sw, ph, pw, dh, dw, groups, transposed};
    if (transposed) {
        g.oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + op + 1;
        g.ow = (w - 1) * sw - 2 * pw + dw * (kw - 1) + op + 1;
    } else {
        g.oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
        g.ow = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
    }
    return g;
}

#define N_CASES 20
static conv_case cases[N_CASES];

static void make_cases(void)
{
    int k = 0;
    cases[k++] = (conv_case){"stride 2 on a 9 x 11 plane", geom(3, 6, 9, 11, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0, 0), 1};
    cases[k++] = (conv_case){"depthwise, dilation 2, padding 3 > kernel / 2", geom(8, 8, 5, 6, 3, 3, 1, 1, 3, 3, 2, 2, 8, 0, 0), 1};
    cases[k++] = (conv_case){"kernel (2, 3) > stride (1, 2), groups 2", geom(8, 6, 7, 8, 2, 3, 1, 2, 0, 1, 1, 1, 2, 0, 0), 0};
    cases[k++] = (conv_case){"1 x 1, stride 1 (no workspace)", geom(6, 4, 5, 7, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0), 1};
    cases[k++] = (conv_case){"1 x 1, stride 2", geom(6, 6, 5, 7, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0, 0), 1};
    cases[k++] = (conv_case){"one row (conv1d): kernel 3, stride 2, dilation 2", geom(4, 5, 1, 8, 1, 3, 1, 2, 0, 1, 1, 2, 1, 0, 0), 1};
    cases[k++] = (conv_case){"16 -> 32 on 16 x 16 (the GEMM splits among threads)", geom(16, 32, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0), 1};
    cases[k++] = (conv_case){"transposed, stride 2, output_padding 1, groups 2", geom(6, 4, 3, 2, 3, 3, 2, 2, 1, 1, 1, 1, 2, 1, 1), 1};
    cases[k++] = (conv_case){"transposed 2 x 2, stride 2 (a U-Net's)", geom(8, 4, 4, 5, 2, 2, 2, 2, 0, 0, 1, 1, 1, 1, 0), 0};
    cases[k++] = (conv_case){"transposed 1 x 1 (no workspace)", geom(5, 3, 4, 3, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0), 1};
    cases[k++] = (conv_case){"transposed 3 x 3, stride 1, padding 1 (y by the mirrored window)", geom(4, 6, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0), 1};
    cases[k++] = (conv_case){"3 x 3 on 3 x 3, one position, 4 > 1 out channels (dx by col2im)", geom(2, 4, 3, 3, 3, 3, 1, 1, 0, 0, 1, 1, 1, 0, 0), 1};
    cases[k++] = (conv_case){"3 x 3 on 10 x 12: runs of 12, 27 columns (a transpose's edges)", geom(3, 5, 10, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0), 1};
    cases[k++] = (conv_case){"a column: 40 x 1, kernel (3, 1) (a position per row of the grid)", geom(3, 4, 40, 1, 3, 1, 1, 1, 1, 0, 1, 1, 1, 0, 0), 0};
    /* rows of 16 and 32 positions: the AVX2 kernel's direct products (B read in the image, conv.c) */
    cases[k++] = (conv_case){"13 -> 7 on 6 x 32: direct, strips of 4 + 3 and 6 + 4 + 3", geom(13, 7, 6, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0), 1};
    cases[k++] = (conv_case){"dilation 2, padding 2 on 5 x 16: direct", geom(4, 4, 5, 16, 3, 3, 1, 1, 2, 2, 2, 2, 1, 0, 0), 1};
    cases[k++] = (conv_case){"transposed 3 x 3, stride 1 on 4 x 16: direct both ways", geom(5, 6, 4, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0), 1};
    /* 16 channels and 256 positions or more: dW by the direct tiles, the image channels last */
    cases[k++] = (conv_case){"1 x 1, stride 2, 16 -> 8 on 32 x 32: dW from the positions read", geom(16, 8, 32, 32, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0, 0), 0};
    cases[k++] = (conv_case){"3 x 3, stride 2, dilation 2, 32 -> 6 on 35 x 33: dW, odd rows", geom(32, 6, 35, 33, 3, 3, 2, 2, 2, 2, 2, 2, 1, 0, 0), 1};
    cases[k++] = (conv_case){"3 x 3 on 6 x 8, 9 -> 8: direct, rows of 8 in pairs", geom(9, 8, 6, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0), 1};
}

/* a workspace as the arena hands it over: whatever the last layer left (NaN
 * here, so a value read before it is written shows in every result) */
static float *used_ws(const pg_conv *g)
{
    int64_t n = pg_conv_ws_floats(g);
    float *ws = zeros(n);
    for (int64_t i = 0; i < n; i++)
        ws[i] = NAN;
    return ws;
}

static int64_t wcount(const pg_conv *g)
{
    return g->transposed ? g->in * (g->out / g->groups) * g->kh * g->kw : g->out * (g->in / g->groups) * g->kh * g->kw;
}

/* y = conv(x) by its definition, in double: each input position the window
 * maps to an output position adds x w there (both directions in one loop) */
static void conv_ref(const pg_conv *g, int64_t r, const float *x, const float *w, const float *b, double *y)
{
    int64_t cin = g->in / g->groups, cout = g->out / g->groups;
    for (int64_t s = 0; s < r; s++)
        for (int64_t co = 0; co < g->out; co++)
            for (int64_t i = 0; i < g->oh * g->ow; i++)
                y[(s * g->out + co) * g->oh * g->ow + i] = b ? b[co] : 0.0;
    for (int64_t s = 0; s < r; s++)
        for (int64_t gi = 0; gi < g->groups; gi++)
            for (int64_t a = 0; a < cin; a++)
                for (int64_t o = 0; o < cout; o++)
                    for (int64_t ky = 0; ky < g->kh; ky++)
                        for (int64_t kx = 0; kx < g->kw; kx++) {
                            int64_t ci = gi * cin + a, co = gi * cout + o;
                            double wv = g->transposed ? w[((ci * cout + o) * g->kh + ky) * g->kw + kx]
                                                      : w[((co * cin + a) * g->kh + ky) * g->kw + kx];
                            /* positions p of the window's grid, image i = p s - pad + k d */
                            int64_t PH = g->transposed ? g->h : g->oh, PW = g->transposed ? g->w : g->ow;
                            int64_t IH = g->transposed ? g->oh : g->h, IW = g->transposed ? g->ow : g->w;
                            for (int64_t py = 0; py < PH; py++)
                                for (int64_t px = 0; px < PW; px++) {
                                    int64_t iy = py * g->sh - g->ph + ky * g->dh, ix = px * g->sw - g->pw + kx * g->dw;
                                    if (iy < 0 || iy >= IH || ix < 0 || ix >= IW)
                                        continue;
                                    if (g->transposed)
                                        y[(s * g->out + co) * IH * IW + iy * IW + ix] +=
                                            wv * x[(s * g->in + ci) * PH * PW + py * PW + px];
                                    else
                                        y[(s * g->out + co) * PH * PW + py * PW + px] +=
                                            wv * x[(s * g->in + ci) * IH * IW + iy * IW + ix];
                                }
                        }
}

typedef int (*conv_fwd_fn)(pg_ctx *, int64_t, const pg_conv *, const float *, const float *, const float *, float *,
                           float *);
typedef int (*conv_bin_fn)(pg_ctx *, int64_t, const pg_conv *, const float *, const float *, float *, float *);
typedef int (*conv_bw_fn)(pg_ctx *, int64_t, const pg_conv *, const float *, const float *, float *, float *,
                          float *);

static conv_fwd_fn fwd_of(const pg_conv *g) { return g->transposed ? pg_conv_transpose2d_fwd : pg_conv2d_fwd; }
static conv_bin_fn bin_of(const pg_conv *g) { return g->transposed ? pg_conv_transpose2d_bwd_in : pg_conv2d_bwd_in; }
static conv_bw_fn bw_of(const pg_conv *g) { return g->transposed ? pg_conv_transpose2d_bwd_w : pg_conv2d_bwd_w; }

/* One case's three products for r samples: y, dx, dw (+= into zeros), db. */
typedef struct conv_out {
    float *y, *dx, *dw, *db;
} conv_out;

static void conv_run(pg_ctx *c, const conv_case *k, int64_t r, const float *x, const float *w, const float *b,
                     const float *dy, conv_out *o)
{
    const pg_conv *g = &k->g;
    float *ws = used_ws(g);
    o->y = zeros(r * g->out * g->oh * g->ow);
    o->dx = zeros(r * g->in * g->h * g->w);
    o->dw = zeros(wcount(g));
    o->db = zeros(g->out);
    fwd_of(g)(c, r, g, x, w, k->bias ? b : NULL, o->y, pg_conv_ws_floats(g) ? ws : NULL);
    bin_of(g)(c, r, g, dy, w, o->dx, pg_conv_ws_floats(g) ? ws : NULL);
    bw_of(g)(c, r, g, x, dy, o->dw, k->bias ? o->db : NULL, pg_conv_ws_floats(g) ? ws : NULL);
    free(ws);
}

static void conv_free(conv_out *o) { free(o->y), free(o->dx), free(o->dw), free(o->db); }

static int same(const float *a, const float *b, int64_t n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }

static void test_conv_case(const conv_case *k, rng *rg)
{
    const pg_conv *g = &k->g;
    int64_t r = 3, nx = r * g->in * g->h * g->w, ny = r * g->out * g->oh * g->ow, nw = wcount(g);
    float *x = fill(rg, nx), *w = fill(rg, nw), *b = fill(rg, g->out), *dy = fill(rg, ny);
    pg_ctx *c1 = ctx_with(1, NULL), *c3 = ctx_with(3, NULL);
    conv_out o, o3, one;
    conv_run(c1, k, r, x, w, b, dy, &o);

    double *ref = calloc((size_t)ny, sizeof *ref);
    conv_ref(g, r, x, w, k->bias ? b : NULL, ref);
    double e = max_rel(o.y, ref, ny);
    OK(e < 1e-6, "%s: forward equals the definition (rel %.1e)", k->what, e);
    /* adjoints: y - bias is linear in x and in w */
    double ydy = 0.0;
    for (int64_t i = 0; i < ny; i++)
        ydy += (ref[i] - (k->bias ? b[(i / (g->oh * g->ow)) % g->out] : 0.0)) * dy[i];
    double xdx = dot(x, o.dx, nx), wdw = dot(w, o.dw, nw);
    OK(rel(xdx, ydy) < 1e-5, "%s: <x, dx> = <y, dy> (rel %.1e)", k->what, rel(xdx, ydy));
    OK(rel(wdw, ydy) < 1e-5, "%s: <w, dw> = <y, dy> (rel %.1e)", k->what, rel(wdw, ydy));
    if (k->bias) {
        double worst = 0.0;
        for (int64_t co = 0; co < g->out; co++) {
            double s = 0.0;
            for (int64_t n = 0; n < r; n++)
                for (int64_t i = 0; i < g->oh * g->ow; i++)
                    s += dy[(n * g->out + co) * g->oh * g->ow + i];
            if (fabs(o.db[co] - s) > worst)
                worst = fabs(o.db[co] - s);
        }
        OK(worst < 1e-5, "%s: db is the sum of dy per channel (max err %.1e)", k->what, worst);
    }

    /* the bits */
    conv_run(c3, k, r, x, w, b, dy, &o3);
    OK(same(o.y, o3.y, ny) && same(o.dx, o3.dx, nx) && same(o.dw, o3.dw, nw) && same(o.db, o3.db, g->out),
       "%s: 3 threads give the bytes of 1 (y, dx, dw, db)", k->what);
    int64_t px = g->in * g->h * g->w, py = g->out * g->oh * g->ow;
    conv_run(c3, k, 1, x + px, w, b, dy + py, &one);
    OK(same(one.y, o.y + py, py) && same(one.dx, o.dx + px, px),
       "%s: sample 1 alone gives its bytes inside a batch of 3 (y, dx)", k->what);
    float *dw3 = zeros(nw), *ws = used_ws(g);
    for (int64_t s = 0; s < r; s++)
        bw_of(g)(c1, 1, g, x + s * px, dy + s * py, dw3, NULL, pg_conv_ws_floats(g) ? ws : NULL);
    OK(same(dw3, o.dw, nw), "%s: dw of 3 samples is 3 calls of one added in order (bitwise)", k->what);
    bw_of(g)(c1, r, g, x, dy, dw3, NULL, pg_conv_ws_floats(g) ? ws : NULL);
    int twice = 1;
    for (int64_t i = 0; i < nw && twice; i++)
        twice = fabsf(dw3[i] - 2.0f * o.dw[i]) <= 1e-5f * (1.0f + fabsf(o.dw[i]));
    OK(twice, "%s: bwd_w adds into dw (a second call doubles it)", k->what);
    free(dw3), free(ws);
    conv_free(&o), conv_free(&o3), conv_free(&one);
    free(ref), free(x), free(w), free(b), free(dy);
    pg_backend_free(c1), pg_backend_free(c3);
}

/* ---- pooling, upsample, mean, swap_dims ---- */

static void test_pools(pg_ctx *c, rng *rg)
{
    pg_conv g = geom(3, 3, 7, 9, 3, 2, 2, 2, 1, 1, 1, 1, 1, 0, 0); /* odd plane, kernel (3, 2), padding 1 */
    int64_t r = 2, nx = r * 3 * 7 * 9, ny = r * 3 * g.oh * g.ow;
    float *x = fill(rg, nx), *dy = fill(rg, ny), *y = zeros(ny), *dx = zeros(nx);
    double *ref = calloc((size_t)ny, sizeof *ref);
    for (int pass = 0; pass < 2; pass++) {
        int mx = pass == 0;
        for (int64_t n = 0; n < r * 3; n++)
            for (int64_t oy = 0; oy < g.oh; oy++)
                for (int64_t ox = 0; ox < g.ow; ox++) {
                    double m = -INFINITY, s = 0.0;
                    for (int64_t ky = 0; ky < g.kh; ky++)
                        for (int64_t kx = 0; kx < g.kw; kx++) {
                            int64_t iy = oy * g.sh - g.ph + ky, ix = ox * g.sw - g.pw + kx;
                            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
                                continue;
                            double v = x[n * g.h * g.w + iy * g.w + ix];
                            s += v;
                            m = v > m ? v : m;
                        }
                    ref[n * g.oh * g.ow + oy * g.ow + ox] = mx ? m : s / (double)(g.kh * g.kw);
                }
        (mx ? pg_maxpool2d_fwd : pg_avgpool2d_fwd)(c, r, &g, x, y);
        double e = max_rel(y, ref, ny);
        OK(e < 1e-6, "%s: forward equals the definition, padding %s (rel %.1e)", mx ? "maxpool2d" : "avgpool2d",
           mx ? "as -inf" : "counted", e);
        if (mx)
            pg_maxpool2d_bwd_in(c, r, &g, x, dy, dx);
        else
            pg_avgpool2d_bwd_in(c, r, &g, dy, dx);
        double a = dot(x, dx, nx), b = dot(y, dy, ny);
        OK(rel(a, b) < 1e-5, "%s: <x, dx> = <y, dy> (rel %.1e)", mx ? "maxpool2d" : "avgpool2d", rel(a, b));
    }
    free(x), free(dy), free(y), free(dx), free(ref);

    for (int bil = 0; bil < 2; bil++) { /* upsample: linear; nearest against its definition */
        int64_t n = 4, h = 3, w = 5, s = bil ? 2 : 3, ny2 = n * h * s * w * s;
        float *ux = fill(rg, n * h * w), *uy = zeros(ny2), *ud = fill(rg, ny2), *udx = zeros(n * h * w);
        pg_upsample_fwd(c, n, h, w, s, bil, ux, uy);
        pg_upsample_bwd_in(c, n, h, w, s, bil, ud, udx);
        int def = 1;
        for (int64_t p = 0; !bil && p < n; p++)
            for (int64_t oy = 0; oy < h * s; oy++)
                for (int64_t ox = 0; ox < w * s; ox++)
                    def &= uy[(p * h * s + oy) * w * s + ox] == ux[(p * h + oy / s) * w + ox / s];
        double a = dot(ux, udx, n * h * w), b = dot(uy, ud, ny2);
        OK(def && rel(a, b) < 1e-5, "upsample %s x%lld: %s<x, dx> = <y, dy> (rel %.1e)", bil ? "bilinear" : "nearest",
           (long long)s, bil ? "" : "each output is its input's value, ", rel(a, b));
        free(ux), free(uy), free(ud), free(udx);
    }

    /* mean over the middle dim of [2, 5, 3], swap of [2, 3, 4, 5, 1] */
    float *mx = fill(rg, 30), *my = zeros(6), *mdy = fill(rg, 6), *mdx = zeros(30);
    pg_mean_fwd(c, 2, 5, 3, mx, my);
    pg_mean_bwd_in(c, 2, 5, 3, mdy, mdx);
    double me = 0.0;
    for (int o = 0; o < 2; o++)
        for (int i = 0; i < 3; i++) {
            double s = 0.0;
            for (int k = 0; k < 5; k++)
                s += mx[(o * 5 + k) * 3 + i];
            me = fmax(me, fabs(my[o * 3 + i] - s / 5.0));
        }
    OK(me < 1e-7 && rel(dot(mx, mdx, 30), dot(my, mdy, 6)) < 1e-5, "mean: forward is the mean, backward its adjoint");
    float *sx = fill(rg, 120), *sy = zeros(120), *sb = zeros(120);
    pg_swap_dims(c, 2, 3, 4, 5, 1, sx, sy);
    int ok = 1;
    for (int o = 0; o < 2; o++)
        for (int a = 0; a < 3; a++)
            for (int m = 0; m < 4; m++)
                for (int b = 0; b < 5; b++)
                    ok &= sy[((o * 5 + b) * 4 + m) * 3 + a] == sx[((o * 3 + a) * 4 + m) * 5 + b];
    pg_swap_dims(c, 2, 5, 4, 3, 1, sy, sb);
    OK(ok && same(sb, sx, 120), "swap_dims swaps dims a and b, and swapping back restores x");
    free(mx), free(my), free(mdy), free(mdx), free(sx), free(sy), free(sb);
}

/* ---- batchnorm2d: against the definitions in double; the baseline and AVX2 loops bitwise ---- */

/* One run of the four training ops on x [r, C, hw] (dw, db and the sums added into zeros). */
typedef struct bn2d_out {
    float *y, *m, *rs, *dx, *dw, *db;
    double s[5], q[5];
} bn2d_out;

static void bn2d_run(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, const float *w, const float *b,
                     const float *dy, bn2d_out *o)
{
    int64_t n = r * C * hw;
    o->y = zeros(n), o->m = zeros(C), o->rs = zeros(C), o->dx = zeros(n), o->dw = zeros(C), o->db = zeros(C);
    memset(o->s, 0, sizeof o->s), memset(o->q, 0, sizeof o->q);
    pg_batchnorm2d_fwd(c, r, C, hw, 1e-5f, x, w, b, o->y, o->m, o->rs);
    pg_batchnorm2d_bwd_in(c, r, C, hw, x, w, o->m, o->rs, dy, o->dx);
    pg_batchnorm2d_bwd_w(c, r, C, hw, x, o->m, o->rs, dy, o->dw, o->db);
    pg_batchnorm2d_stats_acc(c, 1, C, hw, x, o->s, o->q); /* two calls: one micro-batch split */
    pg_batchnorm2d_stats_acc(c, r - 1, C, hw, x + C * hw, o->s, o->q);
}

static void bn2d_free(bn2d_out *o) { free(o->y), free(o->m), free(o->rs), free(o->dx), free(o->dw), free(o->db); }

static int bn2d_same(const bn2d_out *a, const bn2d_out *b, int64_t n, int64_t C)
{
    return same(a->y, b->y, n) && same(a->m, b->m, C) && same(a->rs, b->rs, C) && same(a->dx, b->dx, n) &&
           same(a->dw, b->dw, C) && same(a->db, b->db, C) && !memcmp(a->s, b->s, sizeof a->s) &&
           !memcmp(a->q, b->q, sizeof a->q);
}

static void test_batchnorm2d(pg_ctx *c, rng *rg)
{
    /* hw 300: a plane of one full chunk of 256 and a partial one ending in a partial block */
    int64_t r = 3, C = 5, hw = 300, n = r * C * hw;
    double cnt = (double)(r * hw);
    float *x = fill(rg, n), *w = fill(rg, C), *b = fill(rg, C), *dy = fill(rg, n);
    for (int64_t i = 0; i < n; i++)
        x[i] = 2.0f + 3.0f * x[i]; /* a mean away from 0 */
    bn2d_out o;
    bn2d_run(c, r, C, hw, x, w, b, dy, &o);
    double ey = 0, edx = 0, ew = 0, es = 0, ems = 0;
    for (int64_t ch = 0; ch < C; ch++) {
        double s = 0, ss = 0, sg = 0, sgx = 0, sq = 0, sd = 0, sdx = 0;
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++) {
                double v = x[(k * C + ch) * hw + i];
                s += v, sq += v * v;
            }
        double mu = s / cnt;
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++) {
                double e = x[(k * C + ch) * hw + i] - mu;
                ss += e * e;
            }
        double rs = 1.0 / sqrt(ss / cnt + 1e-5);
        ems = fmax(ems, fmax(fabs(o.m[ch] - mu) / fabs(mu), fabs(o.rs[ch] - rs) / rs));
        es = fmax(es, fmax(fabs(o.s[ch] - s) / fabs(s), fabs(o.q[ch] - sq) / sq));
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++) {
                int64_t at = (k * C + ch) * hw + i;
                double xh = (x[at] - mu) * rs, g = (double)dy[at] * w[ch];
                ey = fmax(ey, fabs(o.y[at] - (xh * w[ch] + b[ch])));
                sg += g, sgx += g * xh, sd += dy[at], sdx += dy[at] * xh;
            }
        double dwr = sdx, dbr = sd;
        ew = fmax(ew, fmax(fabs(o.dw[ch] - dwr), fabs(o.db[ch] - dbr)) / (1.0 + fabs(dbr)));
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++) {
                int64_t at = (k * C + ch) * hw + i;
                double xh = (x[at] - mu) * rs, g = (double)dy[at] * w[ch];
                edx = fmax(edx, fabs(o.dx[at] - rs * (g - sg / cnt - xh * sgx / cnt)));
            }
    }
    OK(ems < 1e-6 && ey < 1e-5, "batchnorm2d forward: mean, rstd and y are the definitions' (rel %.1e, abs %.1e)", ems,
       ey);
    OK(edx < 1e-5 && ew < 1e-5, "batchnorm2d backward: dx, dw and db are the definitions' (abs %.1e, %.1e)", edx, ew);
    OK(es < 1e-12, "batchnorm2d_stats_acc: the sums in double over a micro-batch split in two calls (rel %.1e)", es);
    /* the AVX2 build of the loops against the baseline's (the portable GEMM context runs those) */
    pg_ctx *cp = ctx_with(1, "portable");
    bn2d_out op;
    bn2d_run(cp, r, C, hw, x, w, b, dy, &op);
    OK(bn2d_same(&o, &op, n, C), "batchnorm2d: the baseline loops give the AVX2 loops' bytes (y, mean, rstd, dx, dw, db, sums)");
    bn2d_free(&op);
    pg_backend_free(cp);
    float rm[5] = {0, 0, 0, 0, 0}, rv[5] = {1, 1, 1, 1, 1};
    float *ye = zeros(n), *xt = zeros(n), *yt = zeros(n), *y1 = zeros(n);
    pg_swap_dims(c, r, C, 1, hw, 1, x, xt); /* [r, C, hw] -> [r, hw, C] */
    pg_batchnorm2d_eval_fwd(c, r, C, hw, 1e-5f, x, w, b, rm, rv, ye);
    pg_batchnorm_eval_fwd(c, r * hw, C, 1e-5f, xt, w, b, rm, rv, yt);
    pg_swap_dims(c, r, hw, 1, C, 1, yt, y1);
    OK(same(ye, y1, n), "batchnorm2d_eval_fwd: batchnorm's bits");
    bn2d_free(&o);
    free(x), free(w), free(b), free(dy), free(ye), free(xt), free(yt), free(y1);
}

/* ---- sigmoid, tanh, silu against double references ---- */

static void test_activations(pg_ctx *c, rng *rg)
{
    int64_t n = 37; /* two blocks and a partial one */
    float *x = fill(rg, n), *dy = fill(rg, n), *y = zeros(n), *dx = zeros(n);
    for (int64_t i = 0; i < n; i++)
        x[i] *= 6.0f;
    x[0] = 1e-4f, x[1] = -90.0f, x[2] = 90.0f;
    const char *names[3] = {"sigmoid", "tanh", "silu"};
    for (int k = 0; k < 3; k++) {
        (k == 0 ? pg_sigmoid_fwd : k == 1 ? pg_tanh_fwd : pg_silu_fwd)(c, n, x, y);
        (k == 0 ? pg_sigmoid_bwd_in : k == 1 ? pg_tanh_bwd_in : pg_silu_bwd_in)(c, n, x, dy, dx);
        double ey = 0.0, ed = 0.0;
        for (int64_t i = 0; i < n; i++) {
            double v = x[i], s = 1.0 / (1.0 + exp(-v)), t = tanh(v);
            double f = k == 0 ? s : k == 1 ? t : v * s;
            double d = k == 0 ? s * (1 - s) : k == 1 ? 1 - t * t : s * (1 + v * (1 - s));
            ey = fmax(ey, fabs(y[i] - f) / fmax(fabs(f), 1e-3));
            ed = fmax(ed, fabs(dx[i] - d * dy[i]) / fmax(fabs(d * dy[i]), 1e-3));
        }
        OK(ey < 1e-5 && ed < 1e-5, "%s: forward and backward within 1e-5 of double (rel %.1e, %.1e), from x = +-90 "
           "to 1e-4", names[k], ey, ed);
    }
    free(x), free(dy), free(y), free(dx);
}

/* ---- error paths ---- */

static void expect_error(int rc, capture *cap, const char *want, const char *what)
{
    const char *msg = capture_end(cap);
    OK(rc != 0 && strstr(msg, want) != NULL, "%s: fails naming it (%s)", what, msg);
}

static void test_errors(pg_ctx *c)
{
    capture cap;
    float buf[64] = {0};
    pg_conv g = geom(3, 4, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0), bad = g;
    bad.oh = 4;
    capture_begin(&cap);
    expect_error(pg_conv2d_fwd(c, 1, &bad, buf, buf, NULL, buf, buf), &cap,
                 "conv2d_fwd: bad geometry r=1 in=3 out=4 5x5 -> 4x5 kernel 3x3", "a geometry whose output is not its window's");
    bad = g, bad.groups = 2;
    capture_begin(&cap);
    expect_error(pg_conv2d_bwd_w(c, 1, &bad, buf, buf, buf, NULL, buf), &cap, "groups 2", "channels not divisible by groups");
    capture_begin(&cap);
    expect_error(pg_conv2d_bwd_in(c, 1, &g, buf, buf, buf, NULL), &cap,
                 "conv2d_bwd_in: a 3x3 window needs its workspace of 675 floats, got NULL", "a missing workspace");
    capture_begin(&cap);
    expect_error(pg_conv_transpose2d_fwd(c, 1, &g, buf, buf, NULL, buf, buf), &cap,
                 "conv_transpose2d_fwd: called with an untransposed geometry", "a transposed op with a convolution's geometry");
    capture_begin(&cap);
    expect_error(pg_maxpool2d_fwd(c, 1, &g, buf, buf), &cap, "maxpool2d_fwd: a pooling window keeps its channels (in=3 out=4)",
                 "a pooling window that changes channels");
    capture_begin(&cap);
    expect_error(pg_upsample_fwd(c, 1, 0, 3, 2, 0, buf, buf), &cap, "upsample_fwd: need n >= 0, h, w, scale > 0",
                 "upsample of an empty plane");
    capture_begin(&cap);
    expect_error(pg_mean_bwd_in(c, 1, 0, 1, buf, buf), &cap, "mean_bwd_in: need outer >= 0, d > 0 and inner > 0",
                 "a mean over an empty dim");
    capture_begin(&cap);
    expect_error(pg_swap_dims(c, 1, 2, 0, 2, 1, buf, buf), &cap, "swap_dims: need outer >= 0 and a, mid, b, inner > 0",
                 "a swap with an empty dim");
    capture_begin(&cap);
    expect_error(pg_batchnorm2d_fwd(c, 0, 2, 3, 1e-5f, buf, NULL, NULL, buf, buf, buf), &cap,
                 "batchnorm2d_fwd: need r > 0 samples", "batchnorm2d of no samples");
    capture_begin(&cap);
    expect_error(pg_batchnorm2d_stats_acc(c, 1, 0, 3, buf, NULL, NULL), &cap, "batchnorm2d_stats_acc: need r >= 0, C > 0",
                 "batchnorm2d statistics of no channels");
    capture_begin(&cap);
    expect_error(pg_silu_bwd_in(c, -1, buf, buf, buf), &cap, "silu_bwd_in: negative count", "silu of a negative count");
}

/* `test_conv_kernels digest`: a hash of every case's y, dx, dw with 2 threads
 * and the GEMM kernel PIPE_CPU_GEMM names (tests/conv_kernels.t compares). */
static int digest(void)
{
    pg_ctx *c = pg_backend_init(2);
    if (!c)
        return 1;
    rng rg = {777};
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < N_CASES; i++) {
        const pg_conv *g = &cases[i].g;
        int64_t nx = 3 * g->in * g->h * g->w, ny = 3 * g->out * g->oh * g->ow;
        float *x = fill(&rg, nx), *w = fill(&rg, wcount(g)), *b = fill(&rg, g->out), *dy = fill(&rg, ny);
        conv_out o;
        conv_run(c, &cases[i], 3, x, w, b, dy, &o);
        const float *parts[3] = {o.y, o.dx, o.dw};
        int64_t lens[3] = {ny, nx, wcount(g)};
        for (int k = 0; k < 3; k++) {
            const unsigned char *p = (const unsigned char *)parts[k];
            for (size_t j = 0; j < (size_t)lens[k] * sizeof(float); j++)
                h = (h ^ p[j]) * 1099511628211ull;
        }
        conv_free(&o), free(x), free(w), free(b), free(dy);
    }
    printf("%016llx %s\n", (unsigned long long)h, pg_cpu_gemm_kernel(c->gemm));
    pg_backend_free(c);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    make_cases();
    if (argc > 1 && !strcmp(argv[1], "digest"))
        return digest();
    rng rg = {4242};
    for (int i = 0; i < N_CASES; i++)
        test_conv_case(&cases[i], &rg);
    pg_ctx *c = pg_backend_init(1);
    if (!c)
        return 1;
    test_pools(c, &rg);
    test_batchnorm2d(c, &rg);
    test_activations(c, &rg);
    test_errors(c);
    pg_backend_free(c);
    return DONE();
}

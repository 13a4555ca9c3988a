/* tests/gpu/test_conv_ops.h — the ops of convolutional networks (pg_ops.h's
 * section: conv2d, conv1d as its h = 1 case, conv_transpose2d, max and average
 * pooling, upsample nearest and bilinear, mean, swap_dims, batchnorm2d,
 * sigmoid, tanh, silu) against naive double references, the += of their
 * weight gradients, bitwise repetition, the bits of one sample whatever the
 * rows around it, and their error paths. Part of test_ops_gpu.cu (included
 * after its helpers: fvec, up, down, close_to, OK, G), so it runs on the CUDA
 * backend (make test-gpu) and on the CPU one (tests/gpu_ops_on_cpu.t). */

/* y[yi] += w[wi] x[xi] over every (x, y, w) index triple of a convolution's
 * forward (PyTorch's definitions), r samples. */
template <class F> static void conv_triples(const pg_conv &g, int64_t r, F f)
{
    int64_t ig = g.in / g.groups, og = g.out / g.groups;
    for (int64_t n = 0; n < r; n++) {
        if (!g.transposed) {
            for (int64_t o = 0; o < g.out; o++)
                for (int64_t oy = 0; oy < g.oh; oy++)
                    for (int64_t ox = 0; ox < g.ow; ox++)
                        for (int64_t c = 0; c < ig; c++)
                            for (int64_t ky = 0; ky < g.kh; ky++)
                                for (int64_t kx = 0; kx < g.kw; kx++) {
                                    int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
                                    if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
                                        continue;
                                    int64_t ci = (o / og) * ig + c;
                                    f((((n * g.in + ci) * g.h + iy) * g.w + ix),
                                      ((n * g.out + o) * g.oh + oy) * g.ow + ox, ((o * ig + c) * g.kh + ky) * g.kw + kx);
                                }
            continue;
        }
        for (int64_t ci = 0; ci < g.in; ci++)
            for (int64_t iy = 0; iy < g.h; iy++)
                for (int64_t ix = 0; ix < g.w; ix++)
                    for (int64_t o = 0; o < og; o++)
                        for (int64_t ky = 0; ky < g.kh; ky++)
                            for (int64_t kx = 0; kx < g.kw; kx++) {
                                int64_t oy = iy * g.sh - g.ph + ky * g.dh, ox = ix * g.sw - g.pw + kx * g.dw;
                                if (oy < 0 || oy >= g.oh || ox < 0 || ox >= g.ow)
                                    continue;
                                int64_t co = (ci / ig) * og + o;
                                f(((n * g.in + ci) * g.h + iy) * g.w + ix, ((n * g.out + co) * g.oh + oy) * g.ow + ox,
                                  ((ci * og + o) * g.kh + ky) * g.kw + kx);
                            }
    }
}

static pg_conv conv_geom(int64_t in, int64_t out, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                         int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups, int transposed, int64_t oph = 0,
                         int64_t opw = 0)
{
    pg_conv g = {in, out, h, w, 0, 0, kh, kw, sh, sw, ph, pw, dh, dw, groups, transposed};
    if (transposed) {
        g.oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1;
        g.ow = (w - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1;
    } else {
        g.oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
        g.ow = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
    }
    return g;
}

static void test_conv_one(const char *name, const pg_conv &g, int64_t r)
{
    int tr = g.transposed;
    int64_t nx = r * g.in * g.h * g.w, ny = r * g.out * g.oh * g.ow, P = g.oh * g.ow;
    int64_t nw = tr ? g.in * (g.out / g.groups) * g.kh * g.kw : g.out * (g.in / g.groups) * g.kh * g.kw;
    fvec x = rnd(nx), w = rnd(nw, -0.5, 0.5), b = rnd(g.out), dy = rnd(ny), dw0 = rnd(nw), db0 = rnd(g.out);
    dvec y(ny), dx(nx, 0.0), dw(dw0.begin(), dw0.end()), db(db0.begin(), db0.end());
    for (int64_t i = 0; i < ny; i++)
        y[i] = b[(i / P) % g.out];
    conv_triples(g, r, [&](int64_t xi, int64_t yi, int64_t wi) {
        y[yi] += (double)w[wi] * x[xi];
        dx[xi] += (double)w[wi] * dy[yi];
        dw[wi] += (double)x[xi] * dy[yi];
    });
    for (int64_t i = 0; i < ny; i++)
        db[(i / P) % g.out] += dy[i];
    int64_t nws = pg_conv_ws_floats(&g);
    float *X = up(x), *W = up(w), *B = up(b), *DY = up(dy), *Y = dzeros(ny), *DX = dzeros(nx), *DW = up(dw0),
          *DB = up(db0), *WS = nws ? dzeros(nws) : NULL;
    auto fwd = [&](int64_t rr, const float *xx, float *yy) {
        return tr ? pg_conv_transpose2d_fwd(G.c, rr, &g, xx, W, B, yy, WS) : pg_conv2d_fwd(G.c, rr, &g, xx, W, B, yy, WS);
    };
    char what[200];
    snprintf(what, sizeof what, "%s: forward, input gradient and weight gradient run", name);
    OK(fwd(r, X, Y) == 0 &&
           (tr ? pg_conv_transpose2d_bwd_in(G.c, r, &g, DY, W, DX, WS) : pg_conv2d_bwd_in(G.c, r, &g, DY, W, DX, WS)) == 0 &&
           (tr ? pg_conv_transpose2d_bwd_w(G.c, r, &g, X, DY, DW, DB, WS) : pg_conv2d_bwd_w(G.c, r, &g, X, DY, DW, DB, WS)) == 0,
       "%s", what);
    snprintf(what, sizeof what, "%s: y = the definition (bias included)", name);
    close_to(what, down(Y, ny), y, 1e-5);
    snprintf(what, sizeof what, "%s: dx = the adjoint", name);
    close_to(what, down(DX, nx), dx, 1e-5);
    snprintf(what, sizeof what, "%s: dw and db accumulate (+=)", name);
    close_to(what, down(DW, nw), dw, 1e-5);
    close_to(what, down(DB, g.out), db, 1e-5);
    /* the same bits again, and sample 1 alone gives sample 1's bits */
    fvec y1 = down(Y, ny);
    float *Y2 = dzeros(ny), *Y3 = dzeros(ny / r);
    fwd(r, X, Y2);
    fwd(1, X + g.in * g.h * g.w, Y3);
    snprintf(what, sizeof what, "%s: forward bitwise repeatable, and one sample's bits do not depend on the rows", name);
    fvec one = down(Y3, ny / r);
    OK(same_bits(y1, down(Y2, ny)) && memcmp(one.data(), y1.data() + ny / r, (size_t)(ny / r) * sizeof(float)) == 0,
       "%s", what);
}

static void test_conv(void)
{
    /* conv2d: groups, strides, padding and dilation that differ per axis */
    test_conv_one("conv2d 4->6 groups 2, k 3x2, stride 2x1, pad 1x1, dilation 1x2",
                  conv_geom(4, 6, 9, 7, 3, 2, 2, 1, 1, 1, 1, 2, 2, 0), 3);
    test_conv_one("conv2d 3->5 1x1 (pointwise)", conv_geom(3, 5, 4, 6, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0), 2);
    test_conv_one("conv1d 3->5 k 3 pad 1 (h = 1)", conv_geom(3, 5, 1, 11, 1, 3, 1, 1, 0, 1, 1, 1, 1, 0), 2);
    test_conv_one("conv_transpose2d 4->6 groups 2, k 3x3, stride 2, pad 1, output_padding 1x0",
                  conv_geom(4, 6, 5, 4, 3, 3, 2, 2, 1, 1, 1, 1, 2, 1, 1, 0), 2);
    test_conv_one("conv_transpose2d 3->2 k 2, stride 2 (a U-Net's up)", conv_geom(3, 2, 4, 3, 2, 2, 2, 2, 0, 0, 1, 1, 1, 1),
                  3);
    pg_conv g = conv_geom(4, 6, 9, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0);
    float *X = dzeros(4 * 9 * 7), *W = dzeros(6 * 4 * 9), *Y = dzeros(6 * 9 * 7), *WS = dzeros(pg_conv_ws_floats(&g));
    pg_conv bad = g;
    bad.oh = 8;
    OK(pg_conv2d_fwd(G.c, 1, &bad, X, W, NULL, Y, WS) != 0, "conv2d_fwd rejects an output height the window does not give");
    bad = g;
    bad.groups = 4;
    OK(pg_conv2d_fwd(G.c, 1, &bad, X, W, NULL, Y, WS) != 0, "conv2d_fwd rejects out = 6 not divisible by groups = 4");
    OK(pg_conv_transpose2d_fwd(G.c, 1, &g, X, W, NULL, Y, WS) != 0,
       "conv_transpose2d_fwd rejects an untransposed geometry");
}

/* ---- pooling, upsample ---- */

static void test_pool(void)
{
    const int64_t r = 2, C = 3;
    pg_conv g = conv_geom(C, C, 7, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0);
    int64_t HW = g.h * g.w, OHW = g.oh * g.ow, nx = r * C * HW, ny = r * C * OHW;
    fvec x = rnd(nx), dy = rnd(ny);
    dvec ymax(ny), dxmax(nx, 0.0), yavg(ny), dxavg(nx, 0.0);
    for (int64_t p = 0; p < r * C; p++)
        for (int64_t oy = 0; oy < g.oh; oy++)
            for (int64_t ox = 0; ox < g.ow; ox++) {
                int64_t best = -1, o = p * OHW + oy * g.ow + ox;
                double s = 0.0;
                for (int64_t ky = 0; ky < g.kh; ky++)
                    for (int64_t kx = 0; kx < g.kw; kx++) {
                        int64_t iy = oy * g.sh - g.ph + ky, ix = ox * g.sw - g.pw + kx;
                        if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
                            continue;
                        int64_t i = p * HW + iy * g.w + ix;
                        s += x[i];
                        if (best < 0 || x[i] > x[best])
                            best = i;
                    }
                ymax[o] = x[best];
                dxmax[best] += dy[o];
                yavg[o] = s / (double)(g.kh * g.kw);
                for (int64_t ky = 0; ky < g.kh; ky++)
                    for (int64_t kx = 0; kx < g.kw; kx++) {
                        int64_t iy = oy * g.sh - g.ph + ky, ix = ox * g.sw - g.pw + kx;
                        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
                            dxavg[p * HW + iy * g.w + ix] += dy[o] / (double)(g.kh * g.kw);
                    }
            }
    float *X = up(x), *DY = up(dy), *Y = dzeros(ny), *DX = dzeros(nx);
    OK(pg_maxpool2d_fwd(G.c, r, &g, X, Y) == 0 && pg_maxpool2d_bwd_in(G.c, r, &g, X, DY, DX) == 0, "maxpool2d runs");
    close_to("maxpool2d_fwd: the window's largest value (padding never wins)", down(Y, ny), ymax, 0.0);
    close_to("maxpool2d_bwd_in: dy to each window's largest value, summed", down(DX, nx), dxmax, 1e-6);
    OK(pg_avgpool2d_fwd(G.c, r, &g, X, Y) == 0 && pg_avgpool2d_bwd_in(G.c, r, &g, DY, DX) == 0, "avgpool2d runs");
    close_to("avgpool2d_fwd: divided by kh kw, padding counted", down(Y, ny), yavg, 1e-6);
    fvec dx1 = down(DX, nx);
    close_to("avgpool2d_bwd_in", dx1, dxavg, 1e-6);
    pg_avgpool2d_bwd_in(G.c, r, &g, DY, DX);
    OK(same_bits(dx1, down(DX, nx)), "avgpool2d_bwd_in is bitwise repeatable");
    pg_conv bad = conv_geom(C, C + 1, 7, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0);
    OK(pg_maxpool2d_fwd(G.c, r, &bad, X, Y) != 0, "maxpool2d_fwd rejects a window that changes the channels");
}

/* PyTorch's align_corners = false source of output o, scale s, n inputs */
static void lerp_ref(int64_t o, int64_t n, int64_t s, int64_t *i0, int64_t *i1, double *l1)
{
    double src = (o + 0.5) / (double)s - 0.5;
    if (src < 0)
        src = 0;
    *i0 = (int64_t)src;
    *i1 = *i0 < n - 1 ? *i0 + 1 : *i0;
    *l1 = src - (double)*i0;
}

static void test_upsample(int bilinear, int64_t s)
{
    const int64_t n = 5, h = 4, w = 3, oh = h * s, ow = w * s;
    fvec x = rnd(n * h * w), dy = rnd(n * oh * ow);
    dvec y(n * oh * ow), dx(n * h * w, 0.0);
    for (int64_t p = 0; p < n; p++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                int64_t o = (p * oh + oy) * ow + ox;
                if (!bilinear) {
                    int64_t i = (p * h + oy / s) * w + ox / s;
                    y[o] = x[i];
                    dx[i] += dy[o];
                    continue;
                }
                int64_t y0, y1, x0, x1;
                double ly, lx;
                lerp_ref(oy, h, s, &y0, &y1, &ly);
                lerp_ref(ox, w, s, &x0, &x1, &lx);
                int64_t at[4] = {(p * h + y0) * w + x0, (p * h + y0) * w + x1, (p * h + y1) * w + x0, (p * h + y1) * w + x1};
                double wt[4] = {(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx};
                y[o] = 0;
                for (int k = 0; k < 4; k++) {
                    y[o] += wt[k] * x[at[k]];
                    dx[at[k]] += wt[k] * dy[o];
                }
            }
    float *X = up(x), *DY = up(dy), *Y = dzeros(n * oh * ow), *DX = dzeros(n * h * w);
    char what[120];
    snprintf(what, sizeof what, "upsample %s x%lld", bilinear ? "bilinear" : "nearest", (long long)s);
    OK(pg_upsample_fwd(G.c, n, h, w, s, bilinear, X, Y) == 0 && pg_upsample_bwd_in(G.c, n, h, w, s, bilinear, DY, DX) == 0,
       "%s runs", what);
    close_to(what, down(Y, n * oh * ow), y, 1e-6);
    close_to(what, down(DX, n * h * w), dx, 1e-6);
    OK(pg_upsample_fwd(G.c, n, h, w, 0, bilinear, X, Y) != 0, "%s: scale 0 is rejected", what);
}

/* ---- mean, swap_dims ---- */

static void test_dims(void)
{
    const int64_t outer = 3, d = 5, inner = 4;
    fvec x = rnd(outer * d * inner), dy = rnd(outer * inner);
    dvec y(outer * inner, 0.0), dx(outer * d * inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < d; k++)
            for (int64_t i = 0; i < inner; i++) {
                y[o * inner + i] += x[(o * d + k) * inner + i] / (double)d;
                dx[(o * d + k) * inner + i] = dy[o * inner + i] / (double)d;
            }
    float *X = up(x), *DY = up(dy), *Y = dzeros(outer * inner), *DX = dzeros(outer * d * inner);
    OK(pg_mean_fwd(G.c, outer, d, inner, X, Y) == 0 && pg_mean_bwd_in(G.c, outer, d, inner, DY, DX) == 0, "mean runs");
    close_to("mean_fwd over the middle dim", down(Y, outer * inner), y, 1e-6);
    close_to("mean_bwd_in", down(DX, outer * d * inner), dx, 1e-7);
    OK(pg_mean_fwd(G.c, outer, 0, inner, X, Y) != 0, "mean_fwd rejects d = 0");
    const int64_t a = 3, mid = 2, b = 4, in2 = 3, n = 2 * a * mid * b * in2;
    fvec s = rnd(n);
    dvec t(n);
    for (int64_t o = 0; o < 2; o++)
        for (int64_t i = 0; i < a; i++)
            for (int64_t m = 0; m < mid; m++)
                for (int64_t j = 0; j < b; j++)
                    for (int64_t e = 0; e < in2; e++)
                        t[(((o * b + j) * mid + m) * a + i) * in2 + e] = s[(((o * a + i) * mid + m) * b + j) * in2 + e];
    float *S = up(s), *T = dzeros(n);
    OK(pg_swap_dims(G.c, 2, a, mid, b, in2, S, T) == 0, "swap_dims runs");
    close_to("swap_dims: [o, a, mid, b, in] -> [o, b, mid, a, in]", down(T, n), t, 0.0);
    OK(pg_swap_dims(G.c, 2, a, 0, b, in2, S, T) != 0, "swap_dims rejects mid = 0");
}

/* ---- batchnorm2d ---- */

static void test_batchnorm2d(void)
{
    const int64_t r = 3, C = 5, hw = 13, n = r * C * hw;
    const double eps = 1e-5;
    fvec x = rnd(n, -1, 2), w = rnd(C), b = rnd(C), dy = rnd(n), dw0 = rnd(C), db0 = rnd(C);
    dvec y(n), dx(n), mean(C), rstd(C), dw(dw0.begin(), dw0.end()), db(db0.begin(), db0.end()), sum(C), sumsq(C);
    auto at = [&](int64_t k, int64_t ch, int64_t i) { return (k * C + ch) * hw + i; };
    for (int64_t ch = 0; ch < C; ch++) {
        double s = 0, ss = 0, cnt = (double)(r * hw);
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++) {
                s += x[at(k, ch, i)];
                sumsq[ch] += (double)x[at(k, ch, i)] * x[at(k, ch, i)];
            }
        sum[ch] = s;
        mean[ch] = s / cnt;
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++)
                ss += (x[at(k, ch, i)] - mean[ch]) * (x[at(k, ch, i)] - mean[ch]);
        rstd[ch] = 1.0 / sqrt(ss / cnt + eps);
        double sg = 0, sgx = 0;
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++) {
                double xh = (x[at(k, ch, i)] - mean[ch]) * rstd[ch], g = dy[at(k, ch, i)] * (double)w[ch];
                y[at(k, ch, i)] = xh * w[ch] + b[ch];
                sg += g;
                sgx += g * xh;
                dw[ch] += dy[at(k, ch, i)] * xh;
                db[ch] += dy[at(k, ch, i)];
            }
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < hw; i++) {
                double xh = (x[at(k, ch, i)] - mean[ch]) * rstd[ch], g = dy[at(k, ch, i)] * (double)w[ch];
                dx[at(k, ch, i)] = rstd[ch] * (g - sg / cnt - xh * sgx / cnt);
            }
    }
    float *X = up(x), *W = up(w), *B = up(b), *DY = up(dy), *Y = dzeros(n), *M = dzeros(C), *R = dzeros(C),
          *DX = dzeros(n), *DW = up(dw0), *DB = up(db0);
    OK(pg_batchnorm2d_fwd(G.c, r, C, hw, (float)eps, X, W, B, Y, M, R) == 0 &&
           pg_batchnorm2d_bwd_in(G.c, r, C, hw, X, W, M, R, DY, DX) == 0 &&
           pg_batchnorm2d_bwd_w(G.c, r, C, hw, X, M, R, DY, DW, DB) == 0,
       "batchnorm2d forward and backward run");
    close_to("batchnorm2d_fwd y (per channel over samples and positions)", down(Y, n), y, 1e-5);
    close_to("batchnorm2d_fwd mean", down(M, C), mean, 1e-6);
    close_to("batchnorm2d_fwd rstd", down(R, C), rstd, 1e-5);
    close_to("batchnorm2d_bwd_in", down(DX, n), dx, 1e-5);
    close_to("batchnorm2d_bwd_w dw accumulates", down(DW, C), dw, 1e-5);
    close_to("batchnorm2d_bwd_w db accumulates", down(DB, C), db, 1e-5);
    double *S = up_d(dvec(C, 0.0)), *SS = up_d(dvec(C, 0.0));
    OK(pg_batchnorm2d_stats_acc(G.c, 1, C, hw, X, S, SS) == 0 &&
           pg_batchnorm2d_stats_acc(G.c, r - 1, C, hw, X + C * hw, S, SS) == 0,
       "batchnorm2d_stats_acc runs over two micro-batches");
    dvec gs = down_d(S, C), gss = down_d(SS, C);
    double e = 0;
    for (int64_t ch = 0; ch < C; ch++)
        e = fmax(e, fmax(fabs(gs[ch] - sum[ch]), fabs(gss[ch] - sumsq[ch])));
    OK(e < 1e-9, "batchnorm2d_stats_acc sums in double (err %.1e)", e);
    fvec rm = rnd(C), rv = rnd(C, 0.25, 2.0);
    float *RM = up(rm), *RV = up(rv), *YE = dzeros(n);
    dvec ye(n);
    for (int64_t k = 0; k < r; k++)
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t i = 0; i < hw; i++)
                ye[at(k, ch, i)] = ((double)x[at(k, ch, i)] - rm[ch]) / sqrt((double)rv[ch] + eps) * w[ch] + b[ch];
    OK(pg_batchnorm2d_eval_fwd(G.c, r, C, hw, (float)eps, X, W, B, RM, RV, YE) == 0, "batchnorm2d_eval_fwd runs");
    close_to("batchnorm2d_eval_fwd by the running statistics", down(YE, n), ye, 1e-6);
    OK(pg_batchnorm2d_fwd(G.c, 0, C, hw, (float)eps, X, W, B, Y, M, R) != 0, "batchnorm2d_fwd rejects r = 0");
}

/* ---- sigmoid, tanh, silu ---- */

static void test_conv_activations(void)
{
    const int64_t n = 5000;
    fvec x = rnd(n, -9, 9), dy = rnd(n);
    float *X = up(x), *DY = up(dy), *Y = dzeros(n), *DX = dzeros(n);
    dvec y(n), dx(n);
    for (int kind = 0; kind < 3; kind++) {
        const char *name = kind == 0 ? "sigmoid" : kind == 1 ? "tanh" : "silu";
        for (int64_t i = 0; i < n; i++) {
            double v = x[i], s = 1.0 / (1.0 + exp(-v)), t = tanh(v);
            y[i] = kind == 0 ? s : kind == 1 ? t : v * s;
            dx[i] = dy[i] * (kind == 0 ? s * (1 - s) : kind == 1 ? 1 - t * t : s * (1 + v * (1 - s)));
        }
        int st = kind == 0 ? pg_sigmoid_fwd(G.c, n, X, Y) || pg_sigmoid_bwd_in(G.c, n, X, DY, DX)
                 : kind == 1 ? pg_tanh_fwd(G.c, n, X, Y) || pg_tanh_bwd_in(G.c, n, X, DY, DX)
                             : pg_silu_fwd(G.c, n, X, Y) || pg_silu_bwd_in(G.c, n, X, DY, DX);
        OK(st == 0, "%s forward and backward run", name);
        char what[80];
        snprintf(what, sizeof what, "%s_fwd", name);
        close_to(what, down(Y, n), y, 1e-6);
        snprintf(what, sizeof what, "%s_bwd_in", name);
        close_to(what, down(DX, n), dx, 1e-6);
    }
    OK(pg_silu_fwd(G.c, -1, X, Y) != 0, "silu_fwd rejects a negative count");
}

static void test_conv_layers(void)
{
    test_conv();
    test_pool();
    test_upsample(0, 2);
    test_upsample(1, 2);
    test_upsample(1, 3);
    test_dims();
    test_batchnorm2d();
    test_conv_activations();
}

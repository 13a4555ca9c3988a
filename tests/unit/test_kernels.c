/* tests/unit/test_kernels.c — the CPU kernels against their pg_ops.h contract:
 * finite-difference gradients for every input and weight, forward values
 * against naive double references, += semantics of every _bwd_w, bitwise row
 * independence of the GEMMs, optimizer steps against torch.optim, init and
 * dropout determinism, and the error paths; the GEMM's bits against its
 * documented formula for every kernel this CPU has, and the same bits for any
 * row count, place and thread count. Run by tests/kernels.t, which also runs it
 * as `test_kernels digest` (the bits of a fixed set of products, see main). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_ctx.h" /* pg_cpu_gemm, the backend's GEMM, and struct pg_ctx */
#include "pg_ops.h"
#include "../tap.h"

#define FD_EPS 1e-3f
#define FD_TOL 2e-3 /* observed errors stay below 3e-4 */

/* ---- test data ----------------------------------------------------------- */

typedef struct rng { uint64_t s; } rng;

static double rng_unit(rng *r) /* [0, 1) */
{
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(r->s >> 11) * (1.0 / 9007199254740992.0);
}

static void fill(rng *r, float *a, int64_t n, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++)
        a[i] = (float)(lo + (hi - lo) * rng_unit(r));
}

/* Values with |v| in [0.1, 1]: away from relu's kink. */
static void fill_off_zero(rng *r, float *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double m = 0.1 + 0.9 * rng_unit(r);
        a[i] = (float)(rng_unit(r) < 0.5 ? -m : m);
    }
}

static float *fa(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

static double proj(const float *y, const float *p, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)y[i] * p[i];
    return s;
}

static double max_rel_diff(const float *a, const double *ref, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - ref[i]) / (fabs(ref[i]) + 1e-3);
        if (d > worst)
            worst = d;
    }
    return worst;
}

/* ---- finite differences ----------------------------------------------------
 * f(st) runs the forward with the current inputs and returns a scalar (a
 * random projection of the output, or the loss). Each element of p is moved
 * by +-FD_EPS; the result is ||numeric - analytic|| / max(norms). */
typedef double (*objective)(void *st);

static double fd_relerr(objective f, void *st, float *p, int64_t n, const float *ana)
{
    double diff2 = 0.0, num2 = 0.0, ana2 = 0.0;
    for (int64_t k = 0; k < n; k++) {
        float save = p[k];
        float hi = save + FD_EPS, lo = save - FD_EPS;
        p[k] = hi;
        double fp = f(st);
        p[k] = lo;
        double fm = f(st);
        p[k] = save;
        double num = (fp - fm) / ((double)hi - (double)lo);
        diff2 += (num - ana[k]) * (num - ana[k]);
        num2 += num * num;
        ana2 += (double)ana[k] * ana[k];
    }
    double scale = fmax(sqrt(num2), sqrt(ana2));
    double e = scale > 1e-12 ? sqrt(diff2) / scale : sqrt(diff2);
    printf("# fd relerr %.2e\n", e);
    return e;
}

/* Doubling check: g2 must be exactly 2 * g1 element by element. */
static int exactly_doubled(const float *g1, const float *g2, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (g2[i] != 2.0f * g1[i])
            return 0;
    return 1;
}

/* ---- stderr capture for the error paths ----------------------------------- */

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
        for (size_t i = 0; i < n; i++) /* one TAP line */
            if (c->text[i] == '\n')
                c->text[i] = ' ';
        fclose(c->tmp);
    }
    return c->text;
}

/* ---- linear -------------------------------------------------------------- */

typedef struct lin_case {
    pg_ctx *c;
    int64_t n, in, out;
    float *x, *w, *b, *y, *p;
} lin_case;

static double lin_obj(void *v)
{
    lin_case *t = v;
    pg_linear_fwd(t->c, t->n, t->in, t->out, t->x, t->w, t->b, t->y);
    return proj(t->y, t->p, t->n * t->out);
}

static void test_linear(pg_ctx *c, rng *r)
{
    lin_case t = {c, 3, 5, 4, 0, 0, 0, 0, 0};
    t.x = fa(15), t.w = fa(20), t.b = fa(4), t.y = fa(12), t.p = fa(12);
    fill(r, t.x, 15, -1, 1), fill(r, t.w, 20, -1, 1), fill(r, t.b, 4, -1, 1), fill(r, t.p, 12, -1, 1);

    double ref[12];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            double s = t.b[j];
            for (int k = 0; k < 5; k++)
                s += (double)t.x[i * 5 + k] * t.w[j * 5 + k];
            ref[i * 4 + j] = s;
        }
    pg_linear_fwd(c, 3, 5, 4, t.x, t.w, t.b, t.y);
    OK(max_rel_diff(t.y, ref, 12) < 1e-5, "linear_fwd equals the naive x W^T + b");

    float *dx = fa(15), *dw = fa(20), *db = fa(4);
    OK(pg_linear_bwd_in(c, 3, 5, 4, t.p, t.w, dx) == 0 &&
       pg_linear_bwd_w(c, 3, 5, 4, t.x, t.p, dw, db) == 0, "linear backward calls succeed");
    OK(fd_relerr(lin_obj, &t, t.x, 15, dx) < FD_TOL, "linear_bwd_in matches finite differences (x)");
    OK(fd_relerr(lin_obj, &t, t.w, 20, dw) < FD_TOL, "linear_bwd_w matches finite differences (W)");
    OK(fd_relerr(lin_obj, &t, t.b, 4, db) < FD_TOL, "linear_bwd_w matches finite differences (b)");

    float *dw2 = fa(20), *db2 = fa(4);
    memcpy(dw2, dw, 20 * sizeof *dw), memcpy(db2, db, 4 * sizeof *db);
    pg_linear_bwd_w(c, 3, 5, 4, t.x, t.p, dw2, db2);
    OK(exactly_doubled(dw, dw2, 20) && exactly_doubled(db, db2, 4),
       "linear_bwd_w accumulates: a second call doubles dW and db exactly");

    /* no bias */
    free(t.b);
    t.b = NULL;
    pg_linear_fwd(c, 3, 5, 4, t.x, t.w, NULL, t.y);
    int nobias_ok = 1;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            double s = 0.0;
            for (int k = 0; k < 5; k++)
                s += (double)t.x[i * 5 + k] * t.w[j * 5 + k];
            nobias_ok &= fabs(t.y[i * 4 + j] - s) < 1e-5;
        }
    OK(nobias_ok, "linear_fwd with a NULL bias is x W^T");
    free(t.x), free(t.w), free(t.y), free(t.p), free(dx), free(dw), free(db), free(dw2), free(db2);
}

/* ---- activations ------------------------------------------------------------ */

typedef struct act_case {
    pg_ctx *c;
    int gelu;
    int64_t n;
    float *x, *y, *p;
} act_case;

static double act_obj(void *v)
{
    act_case *t = v;
    if (t->gelu)
        pg_gelu_fwd(t->c, t->n, t->x, t->y);
    else
        pg_relu_fwd(t->c, t->n, t->x, t->y);
    return proj(t->y, t->p, t->n);
}

static void test_activations(pg_ctx *c, rng *r)
{
    for (int gelu = 0; gelu < 2; gelu++) {
        act_case t = {c, gelu, 24, fa(24), fa(24), fa(24)};
        float *dx = fa(24);
        if (gelu)
            fill(r, t.x, 24, -3, 3);
        else
            fill_off_zero(r, t.x, 24);
        fill(r, t.p, 24, -1, 1);
        act_obj(&t);
        int fwd_ok = 1;
        for (int i = 0; i < 24; i++) {
            double v = t.x[i];
            double ref = gelu ? 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)))
                              : (v > 0 ? v : 0);
            fwd_ok &= fabs(t.y[i] - ref) < 1e-5;
        }
        OK(fwd_ok, "%s forward matches its formula", gelu ? "gelu (tanh)" : "relu");
        if (gelu)
            pg_gelu_bwd_in(c, 24, t.x, t.p, dx);
        else
            pg_relu_bwd_in(c, 24, t.x, t.p, dx);
        OK(fd_relerr(act_obj, &t, t.x, 24, dx) < FD_TOL, "%s_bwd_in matches finite differences",
           gelu ? "gelu" : "relu");
        if (gelu) { /* tighter: against the derivative of the formula in double */
            int d_ok = 1;
            for (int i = 0; i < 24; i++) {
                double v = t.x[i], h = 1e-6, k = sqrt(2.0 / M_PI);
#define GELU_D(u) (0.5 * (u) * (1.0 + tanh(k * ((u) + 0.044715 * (u) * (u) * (u)))))
                double der = (GELU_D(v + h) - GELU_D(v - h)) / (2 * h);
#undef GELU_D
                d_ok &= fabs(dx[i] - der * t.p[i]) < 1e-5;
            }
            OK(d_ok, "gelu_bwd_in equals the derivative of the tanh form to 1e-5");
        }
        free(t.x), free(t.y), free(t.p), free(dx);
    }
}

/* cpu_kernels.h's exp over its whole range, dense: within 3 ulp of e^a in
 * double (a float's ulp is 2^-23 relative at most); the clamps to [-87, 88]
 * and NaN through. Then gelu's tanh form over [-12, 12], dense, against the
 * formula in double (as 1 / (1 + e^-2u): 1 + tanh(u) cancels even in double):
 * an element's error is its argument's rounding times the exp's slope (|2u|
 * times a few ulp, relative), a few ulp more, and below 2e-37 where the
 * clamp holds e^-2u; the derivative's near its zero at x = -0.75, where two
 * terms of about 1 cancel, against their size. */
static void test_exp_and_gelu_range(pg_ctx *c)
{
    double worst = 0.0;
    for (int64_t i = 0; i < 1 << 20; i += PG_CPU_EXP_BLK) {
        float a[PG_CPU_EXP_BLK], e[PG_CPU_EXP_BLK];
        for (int j = 0; j < PG_CPU_EXP_BLK; j++)
            e[j] = a[j] = -87.0f + 175.0f * (float)(i + j) / (float)(1 << 20);
        pg_cpu_exp_blk(e);
        for (int j = 0; j < PG_CPU_EXP_BLK; j++)
            worst = fmax(worst, fabs(e[j] / exp((double)a[j]) - 1.0));
    }
    float edge[PG_CPU_EXP_BLK] = {-200.0f, 200.0f, NAN, 0.0f, -87.0f, 88.0f, 1.0f, -1.0f};
    pg_cpu_exp_blk(edge);
    OK(worst < 3.0 / 8388608.0 && edge[0] == edge[4] && edge[1] == edge[5] && isnan(edge[2]) && edge[3] == 1.0f &&
           fabs(edge[6] / M_E - 1.0) < 2.4e-7,
       "exp within 3 ulp over [-87, 88] (worst %.2f ulp), clamped outside, NaN kept", worst * 8388608.0);
    int64_t n = 240001; /* blocks and a tail */
    float *x = fa(n), *y = fa(n), *dy = fa(n), *dx = fa(n);
    for (int64_t i = 0; i < n; i++)
        x[i] = -12.0f + 24.0f * (float)i / (float)(n - 1), dy[i] = 1.0f;
    pg_gelu_fwd(c, n, x, y);
    pg_gelu_bwd_in(c, n, x, dy, dx);
    double wy = 0.0, wd = 0.0, k = sqrt(2.0 / M_PI);
    for (int64_t i = 0; i < n; i++) {
        double v = x[i], u = k * (v + 0.044715 * v * v * v), e = exp(-2.0 * u), s = 1.0 / (1.0 + e);
        double f = v * s, d = s + v * 2.0 * s * (e * s) * k * (1.0 + 3 * 0.044715 * v * v);
        double tol = (4.0 + 4.0 * fabs(u)) / 8388608.0;
        wy = fmax(wy, fabs(y[i] - f) / (tol * fabs(f) + 2e-37));
        wd = fmax(wd, fabs(dx[i] - d) / (tol * (fabs(d) + 0.5)));
    }
    OK(wy <= 1.0 && wd <= 1.0, "gelu forward and backward over [-12, 12] within (4 + 4|u|) ulp of the tanh form in "
       "double (worst %.2f, %.2f of that)", wy, wd);
    free(x), free(y), free(dy), free(dx);
}

/* gelu's former formula, one element at a time: the blocks' operations
 * (activation.c) through cpu_kernels.h's scalar exp, which the AVX2 path
 * and the baseline loops must both give bit for bit */
static float gelu_former(float v, float dy, float *dx)
{
    const float k = 0.7978845608028654f, a = 2.0f * k, b = 2.0f * k * 0.044715f;
    float e = pg_cpu_exp_lane(pg_cpu_exp_clamp(v * (-a - b * (v * v)))), s = 1.0f / (1.0f + e);
    *dx = dy * (s * (1.0f + (v * (a + (3.0f * b) * (v * v))) * (e * s)));
    return v / (1.0f + e);
}

/* gelu forward and backward, every length class of the loops (a tail alone,
 * a vector, vectors and a tail, a block of 64, the AVX2 stages' 128 and
 * past it, long counts), on values that reach the exp's clamps (|x| up to
 * 150), zeros, NaN and infinities: the AVX2 path, the baseline loops, the
 * former formula element by element, and in place (y = x, dx = dy) all the
 * same bytes. */
static void test_gelu_builds(pg_ctx *c, rng *r)
{
    static const int64_t ns[] = {1, 7, 8, 9, 63, 64, 65, 127, 128, 129, 200, 255, 256, 257, 1000, 4099};
    int avx2 = c->avx2, same = 1, former = 1;
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        int64_t n = ns[k];
        float *x = fa(n), *dy = fa(n), *y[2], *dx[2], *yi = fa(n), *dxi = fa(n);
        fill(r, x, n, -6, 6), fill(r, dy, n, -1, 1);
        for (int64_t i = 0; i < n; i += 5) /* far out, both ways */
            x[i] *= 25.0f;
        static const float odd[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 88.5f, -87.5f, 1e-30f};
        for (int64_t i = 0; i < n && i < 8; i++)
            x[n - 1 - i] = odd[i];
        for (int b = 0; b < 2; b++) {
            y[b] = fa(n), dx[b] = fa(n);
            c->avx2 = b ? 0 : avx2;
            pg_gelu_fwd(c, n, x, y[b]);
            pg_gelu_bwd_in(c, n, x, dy, dx[b]);
        }
        c->avx2 = avx2;
        memcpy(yi, x, (size_t)n * 4), memcpy(dxi, dy, (size_t)n * 4);
        pg_gelu_fwd(c, n, yi, yi);
        pg_gelu_bwd_in(c, n, x, dxi, dxi);
        same &= !memcmp(y[0], y[1], (size_t)n * 4) && !memcmp(dx[0], dx[1], (size_t)n * 4) &&
                !memcmp(y[0], yi, (size_t)n * 4) && !memcmp(dx[0], dxi, (size_t)n * 4);
        for (int64_t i = 0; i < n; i++) {
            float d, f = gelu_former(x[i], dy[i], &d);
            former &= !memcmp(&f, &y[0][i], 4) && !memcmp(&d, &dx[0][i], 4);
        }
        free(x), free(dy), free(y[0]), free(y[1]), free(dx[0]), free(dx[1]), free(yi), free(dxi);
    }
    OK(same, "gelu forward and backward: the %s build, the baseline loops and in place give the same bytes, counts "
       "1 to 4099", avx2 ? "AVX2" : "baseline");
    OK(former, "gelu forward and backward give the former formula's bits element by element (clamps, zeros, NaN, "
       "infinities included)");
}

/* swiglu: the elementwise parts against the formulas in double on the
 * kernel's own g and u (h = 37: two blocks and a tail per row, rows of
 * different lengths' tails land mid-block), dx against finite differences. */
typedef struct swi_case {
    pg_ctx *c;
    int64_t n, d, h;
    float *x, *wg, *wu, *g, *u, *y, *p;
} swi_case;

static double swi_obj(void *v)
{
    swi_case *t = v;
    pg_swiglu_fwd(t->c, t->n, t->d, t->h, t->x, t->wg, NULL, t->wu, NULL, t->g, t->u, t->y);
    return proj(t->y, t->p, t->n * t->h);
}

static void test_swiglu(pg_ctx *c, rng *r)
{
    int64_t n = 3, d = 5, h = 37, nh = n * h;
    swi_case t = {c, n, d, h, fa(n * d), fa(h * d), fa(h * d), fa(nh), fa(nh), fa(nh), fa(nh)};
    fill(r, t.x, n * d, -2, 2), fill(r, t.wg, h * d, -1.5, 1.5), fill(r, t.wu, h * d, -1, 1), fill(r, t.p, nh, -1, 1);
    swi_obj(&t);
    float *dg = fa(nh), *du = fa(nh), *dx = fa(n * d);
    pg_swiglu_bwd_in(c, n, d, h, t.wg, t.wu, t.g, t.u, t.p, dg, du, dx);
    double ey = 0.0, eg = 0.0, eu = 0.0;
    for (int64_t i = 0; i < nh; i++) { /* dg against the size of its terms: 1 + g (1 - s) cancels near g = -1.28 */
        double g = t.g[i], u = t.u[i], s = 1.0 / (1.0 + exp(-g)), dy = t.p[i];
        double ry = g * s * u, rdu = dy * g * s, rdg = dy * u * s * (1.0 + g * (1.0 - s));
        ey = fmax(ey, fabs(t.y[i] - ry) / (fabs(ry) + 1e-30));
        eu = fmax(eu, fabs(du[i] - rdu) / (fabs(rdu) + 1e-30));
        eg = fmax(eg, fabs(dg[i] - rdg) / (fabs(dy * u * s) * (1.0 + fabs(g * (1.0 - s))) + 1e-30));
    }
    OK(ey < 1e-6 && eu < 1e-6 && eg < 1e-6, "swiglu: y, du and dg within 1e-6 of the formulas in double (%.1e, %.1e, "
       "%.1e)", ey, eu, eg);
    OK(fd_relerr(swi_obj, &t, t.x, n * d, dx) < FD_TOL, "swiglu_bwd_in matches finite differences (x)");
    free(t.x), free(t.wg), free(t.wu), free(t.g), free(t.u), free(t.y), free(t.p), free(dg), free(du), free(dx);
}

/* a[0, n) and b[0, n) the same bytes, where they are not both NaN: a NaN's
 * sign follows which operand of a multiply the compiler put first (x86
 * returns the first NaN operand), not the formula */
static int same_or_nan(const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, 4) && !(isnan(a[i]) && isnan(b[i])))
            return 0;
    return 1;
}

/* swiglu's former formula, one element at a time: the blocks' operations
 * (swiglu.c) through cpu_kernels.h's scalar exp, which the AVX2 path and the
 * baseline loops must both give bit for bit */
static float swi_former(float g, float u, float dy, float *dg, float *du)
{
    float e = pg_cpu_exp_lane(pg_cpu_exp_clamp(-g)), s = 1.0f / (1.0f + e);
    *du = dy * (g * s);
    *dg = (dy * u) * (s * (1.0f + g * (e * s)));
    return (g / (1.0f + e)) * u;
}

/* swiglu's elementwise parts, every length class of the loops (as
 * test_gelu_builds), on gates that reach the exp's clamps, zeros, NaN and
 * infinities: the AVX2 path, the baseline loops and the former formula element
 * by element the same bytes (NaN as NaN: same_or_nan). The forward through one row with d = 1 and x = 1
 * (g and u are the weights, exactly; -0 becomes +0 in the GEMM's sum), the
 * backward alone (dx NULL) on the gates as they are. */
static void test_swiglu_builds(pg_ctx *c, rng *r)
{
    static const int64_t ns[] = {1, 7, 8, 9, 63, 64, 65, 127, 128, 129, 200, 255, 256, 257, 1000, 4099};
    int avx2 = c->avx2, same = 1, former = 1;
    float one = 1.0f;
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        int64_t n = ns[k];
        float *xg = fa(n), *xu = fa(n), *dy = fa(n), *g[2], *u[2], *y[2], *dg[2], *du[2];
        fill(r, xg, n, -8, 8), fill(r, xu, n, -2, 2), fill(r, dy, n, -1, 1);
        for (int64_t i = 0; i < n; i += 5) /* far out, both ways */
            xg[i] *= 20.0f;
        static const float odd[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 88.5f, -87.5f, 1e-30f};
        for (int64_t i = 0; i < n && i < 8; i++)
            xg[n - 1 - i] = odd[i];
        if (n > 9)
            xu[1] = INFINITY, xu[2] = NAN, dy[3] = -INFINITY;
        for (int b = 0; b < 2; b++) {
            g[b] = fa(n), u[b] = fa(n), y[b] = fa(n), dg[b] = fa(n), du[b] = fa(n);
            c->avx2 = b ? 0 : avx2;
            pg_swiglu_fwd(c, 1, 1, n, &one, xg, NULL, xu, NULL, g[b], u[b], y[b]);
            pg_swiglu_bwd_in(c, 1, 1, n, xg, xu, xg, xu, dy, dg[b], du[b], NULL);
        }
        c->avx2 = avx2;
        same &= same_or_nan(g[0], g[1], n) && same_or_nan(u[0], u[1], n) && same_or_nan(y[0], y[1], n) &&
                same_or_nan(dg[0], dg[1], n) && same_or_nan(du[0], du[1], n);
        for (int64_t i = 0; i < n; i++) {
            float fg, fu, f = swi_former(g[0][i], u[0][i], 0.0f, &fg, &fu);
            former &= same_or_nan(&f, &y[0][i], 1);
            swi_former(xg[i], xu[i], dy[i], &fg, &fu);
            former &= same_or_nan(&fg, &dg[0][i], 1) && same_or_nan(&fu, &du[0][i], 1);
        }
        free(xg), free(xu), free(dy);
        for (int b = 0; b < 2; b++)
            free(g[b]), free(u[b]), free(y[b]), free(dg[b]), free(du[b]);
    }
    OK(same, "swiglu forward and backward: the %s build and the baseline loops give the same bytes, counts 1 to 4099",
       avx2 ? "AVX2" : "baseline");
    OK(former, "swiglu forward and backward give the former formula's bits element by element (clamps, zeros, NaN, "
       "infinities included)");
}

/* ---- layernorm ----------------------------------------------------------- */

typedef struct ln_case {
    pg_ctx *c;
    int64_t n, d;
    float *x, *w, *b, *y, *mean, *rstd, *p;
} ln_case;

static double ln_obj(void *v)
{
    ln_case *t = v;
    pg_layernorm_fwd(t->c, t->n, t->d, 1e-5f, t->x, t->w, t->b, t->y, t->mean, t->rstd);
    return proj(t->y, t->p, t->n * t->d);
}

static void test_layernorm(pg_ctx *c, rng *r)
{
    int64_t n = 3, d = 6, nd = 18;
    ln_case t = {c, n, d, fa(nd), fa(d), fa(d), fa(nd), fa(n), fa(n), fa(nd)};
    fill(r, t.x, nd, -2, 2), fill(r, t.w, d, 0.5, 1.5), fill(r, t.b, d, -1, 1), fill(r, t.p, nd, -1, 1);
    ln_obj(&t);
    double ref[18];
    for (int i = 0; i < n; i++) {
        double mu = 0, var = 0;
        for (int j = 0; j < d; j++)
            mu += t.x[i * d + j] / (double)d;
        for (int j = 0; j < d; j++)
            var += (t.x[i * d + j] - mu) * (t.x[i * d + j] - mu) / (double)d;
        for (int j = 0; j < d; j++)
            ref[i * d + j] = (t.x[i * d + j] - mu) / sqrt(var + 1e-5) * t.w[j] + t.b[j];
    }
    OK(max_rel_diff(t.y, ref, nd) < 1e-5, "layernorm_fwd equals the naive reference");
    float *dx = fa(nd), *dw = fa(d), *db = fa(d), *dw2 = fa(d), *db2 = fa(d);
    pg_layernorm_bwd_in(c, n, d, t.x, t.w, t.mean, t.rstd, t.p, dx);
    pg_layernorm_bwd_w(c, n, d, t.x, t.mean, t.rstd, t.p, dw, db);
    OK(fd_relerr(ln_obj, &t, t.x, nd, dx) < FD_TOL, "layernorm_bwd_in matches finite differences (x)");
    OK(fd_relerr(ln_obj, &t, t.w, d, dw) < FD_TOL, "layernorm_bwd_w matches finite differences (w)");
    OK(fd_relerr(ln_obj, &t, t.b, d, db) < FD_TOL, "layernorm_bwd_w matches finite differences (b)");
    ln_obj(&t);
    memcpy(dw2, dw, d * 4), memcpy(db2, db, d * 4);
    pg_layernorm_bwd_w(c, n, d, t.x, t.mean, t.rstd, t.p, dw2, db2);
    OK(exactly_doubled(dw, dw2, d) && exactly_doubled(db, db2, d), "layernorm_bwd_w accumulates exactly");
    free(t.x), free(t.w), free(t.b), free(t.y), free(t.mean), free(t.rstd), free(t.p);
    free(dx), free(dw), free(db), free(dw2), free(db2);
}

/* Layernorm and rmsnorm rows of every length the row sums treat apart: a tail
 * alone (6), whole blocks of 16 (16, 128), blocks and a tail (37), chunks of
 * 256 and a tail (300, 700); forward and bwd_in against the formulas in
 * double, with and without the affine weights, on rows off zero (x + 3: the
 * centring matters). */
/* the largest |a - ref| over the largest |ref|: a sum's error against the
 * row's scale (an element's own relative error is large where y = xhat w + b
 * cancels, whatever the sums) */
static double max_norm_diff(const float *a, const double *ref, int64_t n)
{
    double worst = 0.0, scale = 0.0;
    for (int64_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(a[i] - ref[i]));
        scale = fmax(scale, fabs(ref[i]));
    }
    return worst / scale;
}

/* rmsnorm (rms) or layernorm forward, then its bwd_in from the saved statistics
 * (mean unused for rmsnorm) */
static void norm_run(pg_ctx *c, int rms, int64_t n, int64_t d, const float *x, const float *w, const float *b,
                     const float *dy, float *y, float *mean, float *rstd, float *dx)
{
    if (rms) {
        pg_rmsnorm_fwd(c, n, d, 1e-5f, x, w, y, rstd);
        pg_rmsnorm_bwd_in(c, n, d, x, w, rstd, dy, dx);
    } else {
        pg_layernorm_fwd(c, n, d, 1e-5f, x, w, b, y, mean, rstd);
        pg_layernorm_bwd_in(c, n, d, x, w, mean, rstd, dy, dx);
    }
}

static void norm_case(pg_ctx *c, rng *r, int64_t d, int rms, int affine, double *err_y, double *err_dx)
{
    int64_t n = 3, nd = n * d;
    float *x = fa(nd), *w = fa(d), *b = fa(d), *y = fa(nd), *mean = fa(n), *rstd = fa(n), *dy = fa(nd), *dx = fa(nd);
    double *ry = calloc((size_t)nd, sizeof *ry), *rdx = calloc((size_t)nd, sizeof *rdx);
    fill(r, x, nd, 1, 5), fill(r, w, d, 0.5, 1.5), fill(r, b, d, -1, 1), fill(r, dy, nd, -1, 1);
    const float *pw = affine ? w : NULL, *pb = affine && !rms ? b : NULL;
    norm_run(c, rms, n, d, x, pw, pb, dy, y, mean, rstd, dx);
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * d, *dyr = dy + i * d;
        double mu = 0, var = 0, mg = 0, mgx = 0;
        for (int64_t j = 0; !rms && j < d; j++)
            mu += xr[j] / (double)d;
        for (int64_t j = 0; j < d; j++)
            var += (xr[j] - mu) * (xr[j] - mu) / (double)d;
        double rs = 1.0 / sqrt(var + 1e-5);
        for (int64_t j = 0; j < d; j++) {
            double g = dyr[j] * (pw ? (double)w[j] : 1.0), xh = (xr[j] - mu) * rs;
            ry[i * d + j] = xh * (pw ? (double)w[j] : 1.0) + (pb ? (double)b[j] : 0.0);
            mg += rms ? 0.0 : g / (double)d;
            mgx += g * xh / (double)d;
        }
        for (int64_t j = 0; j < d; j++) {
            double g = dyr[j] * (pw ? (double)w[j] : 1.0), xh = (xr[j] - mu) * rs;
            rdx[i * d + j] = rs * (g - mg - xh * mgx);
        }
    }
    *err_y = max_norm_diff(y, ry, nd);
    *err_dx = max_norm_diff(dx, rdx, nd);
    free(x), free(w), free(b), free(y), free(mean), free(rstd), free(dy), free(dx), free(ry), free(rdx);
}

static void test_norm_lengths(pg_ctx *c, rng *r)
{
    static const int64_t ds[] = {6, 16, 37, 128, 300, 700};
    for (int rms = 0; rms <= 1; rms++) {
        double wy = 0, wdx = 0;
        for (size_t k = 0; k < sizeof ds / sizeof *ds; k++)
            for (int affine = 0; affine <= 1; affine++) {
                double ey, edx;
                norm_case(c, r, ds[k], rms, affine, &ey, &edx);
                wy = ey > wy ? ey : wy, wdx = edx > wdx ? edx : wdx;
            }
        OK(wy < 1e-6, "%s_fwd equals the formula in double for d = 6, 16, 37, 128, 300, 700, with and without "
           "weights (worst error %.2g of the largest value)", rms ? "rmsnorm" : "layernorm", wy);
        OK(wdx < 1e-6, "%s_bwd_in equals the formula in double for the same rows (worst %.2g)",
           rms ? "rmsnorm" : "layernorm", wdx);
    }
}

/* The norms take rows in groups (layernorm.c's LN_G): 19 rows in one call
 * (groups and a remainder) give every row the bits it gets alone, forward
 * (y, mean, rstd) and backward, layernorm and rmsnorm, d = 37 (blocks and a
 * tail). */
static void test_norm_rows_alone(pg_ctx *c, rng *r)
{
    int64_t n = 19, d = 37, nd = n * d;
    float *x = fa(nd), *w = fa(d), *b = fa(d), *dy = fa(nd), *y = fa(nd), *dx = fa(nd), *m = fa(n), *rs = fa(n);
    float *y1 = fa(nd), *dx1 = fa(nd), *m1 = fa(n), *rs1 = fa(n);
    fill(r, x, nd, -2, 3), fill(r, w, d, 0.5, 1.5), fill(r, b, d, -1, 1), fill(r, dy, nd, -1, 1);
    for (int rms = 0; rms < 2; rms++) {
        norm_run(c, rms, n, d, x, w, b, dy, y, m, rs, dx);
        for (int64_t i = 0; i < n; i++)
            norm_run(c, rms, 1, d, x + i * d, w, b, dy + i * d, y1 + i * d, m1 + i, rs1 + i, dx1 + i * d);
        OK(!memcmp(y, y1, (size_t)nd * 4) && !memcmp(dx, dx1, (size_t)nd * 4) && !memcmp(rs, rs1, (size_t)n * 4) &&
               (rms || !memcmp(m, m1, (size_t)n * 4)),
           "%s: 19 rows in one call give each row the bits it gets alone (forward, statistics, backward)",
           rms ? "rmsnorm" : "layernorm");
    }
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(m), free(rs), free(y1), free(dx1), free(m1), free(rs1);
}

/* The residual add fused into the norms (pg_add_layernorm_fwd,
 * pg_layernorm_bwd_in_add, the rmsnorm pair): the bytes of pg_add_fwd then the
 * norm, and of the norm's backward then pg_axpy_inplace, for every length
 * class of a row (below, at and past the 16-float blocks and 256-float
 * chunks of the row sums) and row counts around the groups of 8, with and
 * without the affine weights. (kernels.t runs this again with the baseline
 * loops, PIPE_CPU_GEMM=portable.) */
static int norm_add_differs(pg_ctx *c, rng *r, int rms, int affine, int64_t n, int64_t d)
{
    int64_t nd = n * d;
    float *x = fa(nd), *s = fa(nd), *w = fa(d), *b = fa(d), *dy = fa(nd), *ds = fa(nd);
    float *z1 = fa(nd), *y1 = fa(nd), *m1 = fa(n), *r1 = fa(n), *dx1 = fa(nd);
    float *z2 = fa(nd), *y2 = fa(nd), *m2 = fa(n), *r2 = fa(n), *dx2 = fa(nd);
    fill(r, x, nd, -2, 3), fill(r, s, nd, -1, 1), fill(r, w, d, 0.5, 1.5), fill(r, b, d, -1, 1);
    fill(r, dy, nd, -1, 1), fill(r, ds, nd, -1, 1);
    const float *wa = affine ? w : NULL, *ba = affine ? b : NULL;
    int rc = pg_add_fwd(c, nd, x, s, z1);
    if (rms) {
        rc |= pg_rmsnorm_fwd(c, n, d, 1e-5f, z1, wa, y1, r1) || pg_add_rmsnorm_fwd(c, n, d, 1e-5f, x, s, z2, wa, y2, r2);
        rc |= pg_rmsnorm_bwd_in(c, n, d, z1, wa, r1, dy, dx1) || pg_rmsnorm_bwd_in_add(c, n, d, z1, wa, r1, dy, ds, dx2);
    } else {
        rc |= pg_layernorm_fwd(c, n, d, 1e-5f, z1, wa, ba, y1, m1, r1) ||
              pg_add_layernorm_fwd(c, n, d, 1e-5f, x, s, z2, wa, ba, y2, m2, r2);
        rc |= pg_layernorm_bwd_in(c, n, d, z1, wa, m1, r1, dy, dx1) ||
              pg_layernorm_bwd_in_add(c, n, d, z1, wa, m1, r1, dy, ds, dx2);
    }
    rc |= pg_axpy_inplace(c, dx1, ds, nd);
    int bad = rc || memcmp(z1, z2, (size_t)nd * 4) || memcmp(y1, y2, (size_t)nd * 4) ||
              memcmp(r1, r2, (size_t)n * 4) || memcmp(m1, m2, (size_t)n * 4) || memcmp(dx1, dx2, (size_t)nd * 4);
    float *all[] = {x, s, w, b, dy, ds, z1, y1, m1, r1, dx1, z2, y2, m2, r2, dx2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
    return bad;
}

/* why = "" when differs finds nothing for any affine, d in ds and n in ns;
 * else where it first did */
typedef int norm_differs_fn(pg_ctx *c, rng *r, int rms, int affine, int64_t n, int64_t d);

static void norm_sweep(pg_ctx *c, rng *r, int rms, norm_differs_fn *differs, const int64_t *ds, size_t nds,
                       const int64_t *ns, size_t nns, char why[96])
{
    why[0] = 0;
    for (int affine = 0; affine <= 1 && !why[0]; affine++)
        for (size_t k = 0; k < nds && !why[0]; k++)
            for (size_t i = 0; i < nns && !why[0]; i++)
                if (differs(c, r, rms, affine, ns[i], ds[k]))
                    snprintf(why, 96, ": differs at n %lld d %lld%s", (long long)ns[i], (long long)ds[k],
                             affine ? "" : " without weights");
}

static void test_norm_add(pg_ctx *c, rng *r)
{
    static const int64_t ds[] = {1, 7, 15, 16, 17, 100, 128, 255, 256, 257, 300, 513};
    static const int64_t ns[] = {1, 7, 8, 9, 19};
    for (int rms = 0; rms <= 1; rms++) {
        char why[96];
        norm_sweep(c, r, rms, norm_add_differs, ds, sizeof ds / sizeof *ds, ns, sizeof ns / sizeof *ns, why);
        OK(!why[0], "add_%s_fwd and %s_bwd_in_add give the bytes of the add and the norm apart (z, y, statistics, "
           "dx + ds), d = 1..513, n = 1..19, with and without weights%s", rms ? "rmsnorm" : "layernorm",
           rms ? "rmsnorm" : "layernorm", why);
    }
    capture cap;
    capture_begin(&cap);
    float v[4] = {0};
    int rc = pg_add_layernorm_fwd(c, 1, 0, 1e-5f, v, v, v, NULL, NULL, v, v, v);
    const char *msg = capture_end(&cap);
    OK(rc == 1 && strstr(msg, "add_layernorm_fwd: need n >= 0 and d > 0, got n=1 d=0"),
       "add_layernorm_fwd with d = 0 is refused, naming it: %s", msg);
    capture_begin(&cap);
    rc = pg_rmsnorm_bwd_in_add(c, -1, 4, v, NULL, v, v, v, v);
    msg = capture_end(&cap);
    OK(rc == 1 && strstr(msg, "rmsnorm_bwd_in_add: need n >= 0 and d > 0, got n=-1 d=4"),
       "rmsnorm_bwd_in_add with n = -1 is refused, naming it: %s", msg);
    capture_begin(&cap);
    rc = pg_add_rmsnorm_fwd(c, 2, -3, 1e-5f, v, v, v, NULL, v, v) + pg_layernorm_bwd_in_add(c, 2, -3, v, NULL, v, v, v, v, v);
    msg = capture_end(&cap);
    OK(rc == 2 && strstr(msg, "add_rmsnorm_fwd: need n >= 0 and d > 0") &&
           strstr(msg, "layernorm_bwd_in_add: need n >= 0 and d > 0"),
       "add_rmsnorm_fwd and layernorm_bwd_in_add with d < 0 are refused, naming themselves: %s", msg);
}

/* The norms' AVX2 rows (layernorm.c: intrinsics) against their baseline
 * loops, which are the former code unchanged: the bytes of y, the
 * statistics, z and dx of every op (plain and fused with the add), layernorm
 * and rmsnorm, with and without the affine weights, for every length class of
 * a row (a vector, a block of 16, a chunk of 256, and a tail of each) and row
 * counts around the groups of 8. */
enum { NO_Y, NO_M, NO_RS, NO_Z, NO_Y2, NO_M2, NO_RS2, NO_DX, NO_DX2, NO_DW, NO_DB, NO_N }; /* the outputs compared */

static void norm_all(pg_ctx *c, int rms, int64_t n, int64_t d, const float *x, const float *s, const float *w,
                     const float *b, const float *dy, const float *ds, float *const *o)
{
    if (rms) {
        pg_rmsnorm_fwd(c, n, d, 1e-5f, x, w, o[NO_Y], o[NO_RS]);
        pg_add_rmsnorm_fwd(c, n, d, 1e-5f, x, s, o[NO_Z], w, o[NO_Y2], o[NO_RS2]);
        pg_rmsnorm_bwd_in(c, n, d, x, w, o[NO_RS], dy, o[NO_DX]);
        pg_rmsnorm_bwd_in_add(c, n, d, x, w, o[NO_RS], dy, ds, o[NO_DX2]);
        pg_rmsnorm_bwd_w(c, n, d, x, o[NO_RS], dy, o[NO_DW]);
    } else {
        pg_layernorm_fwd(c, n, d, 1e-5f, x, w, b, o[NO_Y], o[NO_M], o[NO_RS]);
        pg_add_layernorm_fwd(c, n, d, 1e-5f, x, s, o[NO_Z], w, b, o[NO_Y2], o[NO_M2], o[NO_RS2]);
        pg_layernorm_bwd_in(c, n, d, x, w, o[NO_M], o[NO_RS], dy, o[NO_DX]);
        pg_layernorm_bwd_in_add(c, n, d, x, w, o[NO_M], o[NO_RS], dy, ds, o[NO_DX2]);
        pg_layernorm_bwd_w(c, n, d, x, o[NO_M], o[NO_RS], dy, o[NO_DW], o[NO_DB]);
    }
}

static int64_t norm_out_len(int i, int64_t n, int64_t d)
{
    return i == NO_M || i == NO_RS || i == NO_M2 || i == NO_RS2 ? n : i == NO_DW || i == NO_DB ? d : n * d;
}

static int norm_builds_differ(pg_ctx *c, rng *r, int rms, int affine, int64_t n, int64_t d)
{
    int64_t nd = n * d;
    float *x = fa(nd), *s = fa(nd), *w = fa(d), *b = fa(d), *dy = fa(nd), *ds = fa(nd), *o[2][NO_N];
    fill(r, x, nd, -2, 4), fill(r, s, nd, -1, 1), fill(r, w, d, 0.5, 1.5), fill(r, b, d, -1, 1);
    fill(r, dy, nd, -1, 1), fill(r, ds, nd, -1, 1);
    int avx2 = c->avx2, bad = 0;
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < NO_N; i++) /* zeroed (calloc): rmsnorm leaves the means alone */
            o[k][i] = fa(norm_out_len(i, n, d));
        c->avx2 = k ? 0 : avx2;
        norm_all(c, rms, n, d, x, s, affine ? w : NULL, affine ? b : NULL, dy, ds, o[k]);
    }
    c->avx2 = avx2;
    for (int i = 0; i < NO_N; i++) {
        bad |= memcmp(o[0][i], o[1][i], (size_t)norm_out_len(i, n, d) * 4) != 0;
        free(o[0][i]), free(o[1][i]);
    }
    free(x), free(s), free(w), free(b), free(dy), free(ds);
    return bad;
}

static void test_norm_builds(pg_ctx *c, rng *r)
{
    static const int64_t ds[] = {1, 6, 7, 8, 9, 15, 16, 17, 37, 100, 128, 255, 256, 257, 300, 513, 700};
    static const int64_t ns[] = {1, 9, 19};
    for (int rms = 0; rms <= 1; rms++) {
        char why[96];
        norm_sweep(c, r, rms, norm_builds_differ, ds, sizeof ds / sizeof *ds, ns, sizeof ns / sizeof *ns, why);
        OK(!why[0], "%s: the %s rows and the baseline loops give the same bytes (forward, fused add, backward, "
           "fused skip gradient, weight gradients), d = 1..700, n = 1..19%s", rms ? "rmsnorm" : "layernorm",
           c->avx2 ? "AVX2" : "baseline", why);
    }
}

/* ---- batchnorm ----------------------------------------------------------- */

typedef struct bn_case {
    pg_ctx *c;
    int64_t n, C;
    float *x, *w, *b, *y, *mean, *rstd, *p;
} bn_case;

static double bn_obj(void *v)
{
    bn_case *t = v;
    pg_batchnorm_fwd(t->c, t->n, t->C, 1e-5f, t->x, t->w, t->b, t->y, t->mean, t->rstd);
    return proj(t->y, t->p, t->n * t->C);
}

static void test_batchnorm(pg_ctx *c, rng *r)
{
    int64_t n = 5, C = 3, nc = 15;
    bn_case t = {c, n, C, fa(nc), fa(C), fa(C), fa(nc), fa(C), fa(C), fa(nc)};
    fill(r, t.x, nc, -2, 2), fill(r, t.w, C, 0.5, 1.5), fill(r, t.b, C, -1, 1), fill(r, t.p, nc, -1, 1);
    bn_obj(&t);
    double ref[15], worst = 0.0;
    for (int j = 0; j < C; j++) {
        double mu = 0, var = 0;
        for (int i = 0; i < n; i++)
            mu += t.x[i * C + j] / (double)n;
        for (int i = 0; i < n; i++)
            var += (t.x[i * C + j] - mu) * (t.x[i * C + j] - mu) / (double)n;
        for (int i = 0; i < n; i++) {
            double s = (t.x[i * C + j] - mu) / sqrt(var + 1e-5) * t.w[j];
            ref[i * C + j] = s + t.b[j];
            /* relative to the terms summed: y = s + b can cancel to near 0,
             * where a float's rounding of s is far more than 1e-5 of y */
            double e = fabs(t.y[i * C + j] - ref[i * C + j]) / (fabs(s) + fabs(t.b[j]) + 1e-3);
            worst = e > worst ? e : worst;
        }
    }
    OK(worst < 1e-5, "batchnorm_fwd normalises with the micro-batch's biased variance (%.2g of its terms)", worst);
    float *dx = fa(nc), *dw = fa(C), *db = fa(C), *dw2 = fa(C), *db2 = fa(C);
    pg_batchnorm_bwd_in(c, n, C, t.x, t.w, t.mean, t.rstd, t.p, dx);
    pg_batchnorm_bwd_w(c, n, C, t.x, t.mean, t.rstd, t.p, dw, db);
    OK(fd_relerr(bn_obj, &t, t.x, nc, dx) < FD_TOL, "batchnorm_bwd_in matches finite differences (x)");
    OK(fd_relerr(bn_obj, &t, t.w, C, dw) < FD_TOL, "batchnorm_bwd_w matches finite differences (w)");
    OK(fd_relerr(bn_obj, &t, t.b, C, db) < FD_TOL, "batchnorm_bwd_w matches finite differences (b)");
    bn_obj(&t);
    memcpy(dw2, dw, C * 4), memcpy(db2, db, C * 4);
    pg_batchnorm_bwd_w(c, n, C, t.x, t.mean, t.rstd, t.p, dw2, db2);
    OK(exactly_doubled(dw, dw2, C) && exactly_doubled(db, db2, C), "batchnorm_bwd_w accumulates exactly");

    /* running stats from two micro-batches (2 + 3 rows) equal the whole batch's */
    double sum[3] = {0}, sumsq[3] = {0};
    float rm[3] = {0.5f, -0.5f, 0.0f}, rv[3] = {1.0f, 2.0f, 0.5f};
    pg_batchnorm_stats_acc(c, 2, C, t.x, sum, sumsq);
    pg_batchnorm_stats_acc(c, 3, C, t.x + 2 * C, sum, sumsq);
    float rm0[3], rv0[3];
    memcpy(rm0, rm, sizeof rm), memcpy(rv0, rv, sizeof rv);
    OK(pg_batchnorm_running_update(c, n, C, 0.1f, sum, sumsq, rm, rv) == 0, "batchnorm_running_update succeeds");
    int run_ok = 1;
    for (int j = 0; j < C; j++) {
        double mu = 0, var = 0;
        for (int i = 0; i < n; i++)
            mu += t.x[i * C + j] / (double)n;
        for (int i = 0; i < n; i++)
            var += (t.x[i * C + j] - mu) * (t.x[i * C + j] - mu) / (double)(n - 1);
        run_ok &= fabs(rm[j] - (0.9 * rm0[j] + 0.1 * mu)) < 1e-6;
        run_ok &= fabs(rv[j] - (0.9 * rv0[j] + 0.1 * var)) < 1e-6;
    }
    OK(run_ok, "running stats: momentum 0.1 update with the whole batch's mean and unbiased variance");
    capture cap;
    capture_begin(&cap);
    int rc = pg_batchnorm_running_update(c, 1, C, 0.1f, sum, sumsq, rm, rv);
    const char *msg = capture_end(&cap);
    OK(rc != 0 && strstr(msg, "more than one value"), "running update of a batch of one is an error: %s", msg);
    free(t.x), free(t.w), free(t.b), free(t.y), free(t.mean), free(t.rstd), free(t.p);
    free(dx), free(dw), free(db), free(dw2), free(db2);
}

/* ---- embeddings, position embedding, logits -------------------------------- */

typedef struct emb_case {
    pg_ctx *c;
    int64_t n, V, d;
    const int32_t *ids;
    float *table, *y, *p;
} emb_case;

static double emb_obj(void *v)
{
    emb_case *t = v;
    pg_embed_fwd(t->c, t->n, t->V, t->d, t->ids, t->table, t->y);
    return proj(t->y, t->p, t->n * t->d);
}

static void test_embed(pg_ctx *c, rng *r)
{
    static const int32_t ids[5] = {3, 0, 3, 6, 1}; /* a repeated id */
    emb_case t = {c, 5, 7, 4, ids, fa(28), fa(20), fa(20)};
    fill(r, t.table, 28, -1, 1), fill(r, t.p, 20, -1, 1);
    emb_obj(&t);
    int fwd_ok = 1;
    for (int i = 0; i < 5; i++)
        fwd_ok &= memcmp(t.y + i * 4, t.table + ids[i] * 4, 16) == 0;
    OK(fwd_ok, "embed_fwd copies the rows of the table");
    float *dt = fa(28), *dt2 = fa(28);
    pg_embed_bwd_w(c, 5, 7, 4, ids, t.p, dt);
    OK(fd_relerr(emb_obj, &t, t.table, 28, dt) < FD_TOL, "embed_bwd_w matches finite differences (table)");
    OK(dt[4 * 3] == t.p[0] + t.p[8], "embed_bwd_w sums a repeated id's rows in row order");

    static const int32_t distinct[3] = {2, 5, 0};
    memset(dt, 0, 28 * 4);
    pg_embed_bwd_w(c, 3, 7, 4, distinct, t.p, dt);
    memcpy(dt2, dt, 28 * 4);
    pg_embed_bwd_w(c, 3, 7, 4, distinct, t.p, dt2);
    OK(exactly_doubled(dt, dt2, 28), "embed_bwd_w accumulates exactly");

    capture cap;
    static const int32_t bad[4] = {1, 2, 7, 0};
    capture_begin(&cap);
    int rc = pg_embed_fwd(c, 4, 7, 4, bad, t.table, t.y);
    const char *msg = capture_end(&cap);
    OK(rc != 0 && strstr(msg, "row 2") && strstr(msg, "token id 7"),
       "embed_fwd refuses id 7 of vocab 7, naming row and id: %s", msg);
    static const int32_t neg[2] = {0, -3};
    capture_begin(&cap);
    rc = pg_embed_bwd_w(c, 2, 7, 4, neg, t.p, dt);
    msg = capture_end(&cap);
    OK(rc != 0 && strstr(msg, "row 1") && strstr(msg, "-3"), "embed_bwd_w refuses a negative id: %s", msg);
    free(t.table), free(t.y), free(t.p), free(dt), free(dt2);
}

typedef struct pos_case {
    pg_ctx *c;
    int64_t r, T, d;
    float *x, *table, *y, *p;
} pos_case;

static double pos_obj(void *v)
{
    pos_case *t = v;
    pg_pos_embed_fwd(t->c, t->r, t->T, t->d, t->x, t->table, t->y);
    return proj(t->y, t->p, t->r * t->T * t->d);
}

static void test_pos_embed(pg_ctx *c, rng *r)
{
    pos_case t = {c, 3, 4, 2, fa(24), fa(8), fa(24), fa(24)};
    fill(r, t.x, 24, -1, 1), fill(r, t.table, 8, -1, 1), fill(r, t.p, 24, -1, 1);
    pos_obj(&t);
    int fwd_ok = 1;
    for (int i = 0; i < 24; i++)
        fwd_ok &= t.y[i] == t.x[i] + t.table[i % 8];
    OK(fwd_ok, "pos_embed_fwd adds table[t] to every sample");
    float *dt = fa(8), *dt2 = fa(8);
    pg_pos_embed_bwd_w(c, 3, 4, 2, t.p, dt);
    OK(fd_relerr(pos_obj, &t, t.table, 8, dt) < FD_TOL, "pos_embed_bwd_w matches finite differences (table)");
    memcpy(dt2, dt, 32);
    pg_pos_embed_bwd_w(c, 3, 4, 2, t.p, dt2);
    OK(exactly_doubled(dt, dt2, 8), "pos_embed_bwd_w accumulates exactly");
    free(t.x), free(t.table), free(t.y), free(t.p), free(dt), free(dt2);
}

typedef struct logit_case {
    pg_ctx *c;
    int64_t n, d, V;
    float *x, *table, *y, *p;
} logit_case;

static double logit_obj(void *v)
{
    logit_case *t = v;
    pg_logits_fwd(t->c, t->n, t->d, t->V, t->x, t->table, t->y);
    return proj(t->y, t->p, t->n * t->V);
}

static void test_logits(pg_ctx *c, rng *r)
{
    logit_case t = {c, 3, 4, 6, fa(12), fa(24), fa(18), fa(18)};
    fill(r, t.x, 12, -1, 1), fill(r, t.table, 24, -1, 1), fill(r, t.p, 18, -1, 1);
    logit_obj(&t);
    double ref[18];
    for (int i = 0; i < 3; i++)
        for (int v = 0; v < 6; v++) {
            double s = 0;
            for (int k = 0; k < 4; k++)
                s += (double)t.x[i * 4 + k] * t.table[v * 4 + k];
            ref[i * 6 + v] = s;
        }
    OK(max_rel_diff(t.y, ref, 18) < 1e-5, "logits_fwd equals x table^T");
    float *dx = fa(12), *dt = fa(24), *dt2 = fa(24);
    pg_logits_bwd_in(c, 3, 4, 6, t.p, t.table, dx);
    pg_logits_bwd_w(c, 3, 4, 6, t.x, t.p, dt);
    OK(fd_relerr(logit_obj, &t, t.x, 12, dx) < FD_TOL, "logits_bwd_in matches finite differences (x)");
    OK(fd_relerr(logit_obj, &t, t.table, 24, dt) < FD_TOL, "logits_bwd_w matches finite differences (table)");
    memcpy(dt2, dt, 24 * 4);
    pg_logits_bwd_w(c, 3, 4, 6, t.x, t.p, dt2);
    OK(exactly_doubled(dt, dt2, 24), "logits_bwd_w accumulates exactly");
    free(t.x), free(t.table), free(t.y), free(t.p), free(dx), free(dt), free(dt2);
}

/* ---- attention ------------------------------------------------------------ */

typedef struct attn_case {
    pg_ctx *c;
    int64_t r, T, d, h;
    int causal;
    float *x, *wqkv, *bqkv, *wo, *bo; /* inputs */
    float *qkv, *att, *ctx, *y, *p;   /* saved + output + projection */
} attn_case;

static double attn_obj(void *v)
{
    attn_case *t = v;
    pg_attention_fwd(t->c, t->r, t->T, t->d, t->h, t->causal, t->x, t->wqkv, t->bqkv, t->wo, t->bo,
                     t->qkv, t->att, t->ctx, t->y);
    return proj(t->y, t->p, t->r * t->T * t->d);
}

static void attn_alloc(attn_case *t, pg_ctx *c, int64_t r, int64_t T, int64_t d, int64_t h, int causal, rng *g)
{
    *t = (attn_case){c, r, T, d, h, causal, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    int64_t n = r * T;
    t->x = fa(n * d), t->wqkv = fa(3 * d * d), t->bqkv = fa(3 * d), t->wo = fa(d * d), t->bo = fa(d);
    t->qkv = fa(n * 3 * d), t->att = fa(r * h * T * T), t->ctx = fa(n * d), t->y = fa(n * d), t->p = fa(n * d);
    fill(g, t->x, n * d, -1, 1), fill(g, t->wqkv, 3 * d * d, -0.5, 0.5), fill(g, t->bqkv, 3 * d, -0.2, 0.2);
    fill(g, t->wo, d * d, -0.5, 0.5), fill(g, t->bo, d, -0.2, 0.2), fill(g, t->p, n * d, -1, 1);
}

static void attn_free(attn_case *t)
{
    free(t->x), free(t->wqkv), free(t->bqkv), free(t->wo), free(t->bo);
    free(t->qkv), free(t->att), free(t->ctx), free(t->y), free(t->p);
}

/* y of attention in double, straight from the definition. */
static void attn_reference(const attn_case *t, double *y)
{
    int64_t r = t->r, T = t->T, d = t->d, h = t->h, hd = d / h;
    double *qkv = calloc((size_t)(T * 3 * d), sizeof *qkv), *ctx = calloc((size_t)(T * d), sizeof *ctx);
    double *s = calloc((size_t)T, sizeof *s);
    for (int64_t b = 0; b < r; b++) {
        const float *x = t->x + b * T * d;
        for (int64_t i = 0; i < T; i++)
            for (int64_t o = 0; o < 3 * d; o++) {
                double acc = t->bqkv[o];
                for (int64_t k = 0; k < d; k++)
                    acc += (double)x[i * d + k] * t->wqkv[o * d + k];
                qkv[i * 3 * d + o] = acc;
            }
        for (int64_t hh = 0; hh < h; hh++)
            for (int64_t i = 0; i < T; i++) {
                double mx = -INFINITY, z = 0.0;
                for (int64_t j = 0; j < T; j++) {
                    double acc = 0.0;
                    for (int64_t e = 0; e < hd; e++)
                        acc += qkv[i * 3 * d + hh * hd + e] * qkv[j * 3 * d + d + hh * hd + e];
                    s[j] = (t->causal && j > i) ? -INFINITY : acc / sqrt((double)hd);
                    if (s[j] > mx)
                        mx = s[j];
                }
                for (int64_t j = 0; j < T; j++)
                    z += (s[j] = exp(s[j] - mx));
                for (int64_t e = 0; e < hd; e++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < T; j++)
                        acc += s[j] / z * qkv[j * 3 * d + 2 * d + hh * hd + e];
                    ctx[i * d + hh * hd + e] = acc;
                }
            }
        for (int64_t i = 0; i < T; i++)
            for (int64_t o = 0; o < d; o++) {
                double acc = t->bo[o];
                for (int64_t k = 0; k < d; k++)
                    acc += ctx[i * d + k] * t->wo[o * d + k];
                y[(b * T + i) * d + o] = acc;
            }
    }
    free(qkv), free(ctx), free(s);
}

/* dqkv of attention in double from the saved qkv, att and dctx:
 * dv = att^T dctx, ds = att (dctx v^T - rowsum(att dctx v^T)) / sqrt(hd),
 * dq = ds k, dk = ds^T q. */
static void attn_dqkv_reference(const attn_case *t, const float *dctx, double *dqkv)
{
    int64_t T = t->T, d = t->d, h = t->h, hd = d / h, d3 = 3 * d;
    double *ds = calloc((size_t)(T * T), sizeof *ds);
    for (int64_t b = 0; b < t->r; b++)
        for (int64_t hh = 0; hh < h; hh++) {
            const float *q = t->qkv + b * T * d3 + hh * hd, *k = q + d, *v = q + 2 * d;
            const float *a = t->att + (b * h + hh) * T * T, *dc = dctx + b * T * d + hh * hd;
            double *dq = dqkv + b * T * d3 + hh * hd, *dk = dq + d, *dv = dq + 2 * d;
            for (int64_t i = 0; i < T; i++) {
                double D = 0.0;
                for (int64_t j = 0; j < T; j++) {
                    double s = 0.0;
                    for (int64_t e = 0; e < hd; e++)
                        s += (double)dc[i * d + e] * v[j * d3 + e];
                    ds[i * T + j] = s;
                    D += a[i * T + j] * s;
                }
                for (int64_t j = 0; j < T; j++)
                    ds[i * T + j] = a[i * T + j] * (ds[i * T + j] - D) / sqrt((double)hd);
            }
            for (int64_t i = 0; i < T; i++)
                for (int64_t e = 0; e < hd; e++) {
                    double sq = 0.0, sk = 0.0, sv = 0.0;
                    for (int64_t j = 0; j < T; j++) {
                        sq += ds[i * T + j] * k[j * d3 + e];
                        sk += ds[j * T + i] * q[j * d3 + e];
                        sv += (double)a[j * T + i] * dc[j * d + e];
                    }
                    dq[i * d3 + e] = sq, dk[i * d3 + e] = sk, dv[i * d3 + e] = sv;
                }
        }
    free(ds);
}

static void test_attention(pg_ctx *c, rng *g)
{
    for (int causal = 1; causal >= 0; causal--) {
        attn_case t;
        int64_t r = 2, T = 4, d = 8, h = 2, n = r * T;
        attn_alloc(&t, c, r, T, d, h, causal, g);
        const char *kind = causal ? "causal" : "full";
        OK(attn_obj(&t) == attn_obj(&t), "attention_fwd (%s) runs", kind);
        double *ref = calloc((size_t)(n * d), sizeof *ref);
        attn_reference(&t, ref);
        OK(max_rel_diff(t.y, ref, n * d) < 1e-4, "attention_fwd (%s) equals the naive reference", kind);
        int mask_ok = 1;
        for (int64_t b = 0; b < r * h && causal; b++)
            for (int64_t i = 0; i < T; i++)
                for (int64_t j = i + 1; j < T; j++)
                    mask_ok &= t.att[(b * T + i) * T + j] == 0.0f;
        OK(mask_ok, "attention (%s) saves probabilities with the future masked to 0", kind);

        float *dctx = fa(n * d), *dqkv = fa(n * 3 * d), *dx = fa(n * d);
        float *dwqkv = fa(3 * d * d), *dbqkv = fa(3 * d), *dwo = fa(d * d), *dbo = fa(d);
        attn_obj(&t);
        OK(pg_attention_bwd_in(c, r, T, d, h, causal, t.wqkv, t.wo, t.qkv, t.att, t.ctx, t.p, dctx, dqkv, dx) == 0 &&
           pg_attention_bwd_w(c, r, T, d, t.x, t.ctx, t.p, dqkv, dwqkv, dbqkv, dwo, dbo) == 0,
           "attention (%s) backward calls succeed", kind);
        OK(fd_relerr(attn_obj, &t, t.x, n * d, dx) < FD_TOL, "attention_bwd_in (%s) matches finite differences (x)", kind);
        OK(fd_relerr(attn_obj, &t, t.wqkv, 3 * d * d, dwqkv) < FD_TOL,
           "attention_bwd_w (%s) matches finite differences (Wqkv)", kind);
        OK(fd_relerr(attn_obj, &t, t.bqkv, 3 * d, dbqkv) < FD_TOL,
           "attention_bwd_w (%s) matches finite differences (bqkv)", kind);
        OK(fd_relerr(attn_obj, &t, t.wo, d * d, dwo) < FD_TOL, "attention_bwd_w (%s) matches finite differences (Wo)", kind);
        OK(fd_relerr(attn_obj, &t, t.bo, d, dbo) < FD_TOL, "attention_bwd_w (%s) matches finite differences (bo)", kind);

        attn_obj(&t);
        float *g2[4] = {fa(3 * d * d), fa(3 * d), fa(d * d), fa(d)};
        memcpy(g2[0], dwqkv, (size_t)(3 * d * d) * 4), memcpy(g2[1], dbqkv, (size_t)(3 * d) * 4);
        memcpy(g2[2], dwo, (size_t)(d * d) * 4), memcpy(g2[3], dbo, (size_t)d * 4);
        pg_attention_bwd_w(c, r, T, d, t.x, t.ctx, t.p, dqkv, g2[0], g2[1], g2[2], g2[3]);
        OK(exactly_doubled(dwqkv, g2[0], 3 * d * d) && exactly_doubled(dbqkv, g2[1], 3 * d) &&
           exactly_doubled(dwo, g2[2], d * d) && exactly_doubled(dbo, g2[3], d),
           "attention_bwd_w (%s) accumulates exactly", kind);
        for (int k = 0; k < 4; k++)
            free(g2[k]);
        free(ref), free(dctx), free(dqkv), free(dx), free(dwqkv), free(dbqkv), free(dwo), free(dbo);
        attn_free(&t);
    }

    /* T over 128: the softmax backward works through several blocks of score
     * rows (64 KiB of them: 81 rows of 200 here, so 3 blocks); dqkv against
     * the formulas in double from the same saved qkv, att and dctx */
    for (int causal = 1; causal >= 0; causal--) {
        attn_case t;
        int64_t r = 2, T = 200, d = 8, h = 2, n = r * T;
        attn_alloc(&t, c, r, T, d, h, causal, g);
        float *dctx = fa(n * d), *dqkv = fa(n * 3 * d), *dx = fa(n * d);
        double *ref = calloc((size_t)(n * 3 * d), sizeof *ref);
        attn_obj(&t);
        int rc = pg_attention_bwd_in(c, r, T, d, h, causal, t.wqkv, t.wo, t.qkv, t.att, t.ctx, t.p, dctx, dqkv, dx);
        attn_dqkv_reference(&t, dctx, ref);
        OK(rc == 0 && max_rel_diff(dqkv, ref, n * 3 * d) < 1e-4,
           "attention_bwd_in (%s, T = 200: 3 blocks of score rows) equals the formulas in double", causal ? "causal" : "full");
        free(dctx), free(dqkv), free(dx), free(ref);
        attn_free(&t);
    }

    /* sample 1 alone gives the same bits as sample 1 of three */
    attn_case big, one;
    int64_t T = 128, d = 128, h = 4, td = T * d; /* projections above 1e6 multiply-adds */
    attn_alloc(&big, c, 3, T, d, h, 1, g);
    attn_alloc(&one, c, 1, T, d, h, 1, g);
    memcpy(one.x, big.x + td, (size_t)td * 4), memcpy(one.wqkv, big.wqkv, (size_t)(3 * d * d) * 4);
    memcpy(one.bqkv, big.bqkv, (size_t)(3 * d) * 4), memcpy(one.wo, big.wo, (size_t)(d * d) * 4);
    memcpy(one.bo, big.bo, (size_t)d * 4), memcpy(one.p, big.p + td, (size_t)td * 4);
    attn_obj(&big), attn_obj(&one);
    OK(memcmp(one.y, big.y + td, (size_t)td * 4) == 0, "attention_fwd of one sample equals it inside three, bitwise");
    float *dc3 = fa(3 * td), *dq3 = fa(9 * td), *dx3 = fa(3 * td), *dc1 = fa(td), *dq1 = fa(3 * td), *dx1 = fa(td);
    pg_attention_bwd_in(c, 3, T, d, h, 1, big.wqkv, big.wo, big.qkv, big.att, big.ctx, big.p, dc3, dq3, dx3);
    pg_attention_bwd_in(c, 1, T, d, h, 1, one.wqkv, one.wo, one.qkv, one.att, one.ctx, one.p, dc1, dq1, dx1);
    OK(memcmp(dx1, dx3 + td, (size_t)td * 4) == 0 && memcmp(dq1, dq3 + 3 * td, (size_t)(3 * td) * 4) == 0,
       "attention_bwd_in of one sample equals it inside three, bitwise");
    capture cap;
    capture_begin(&cap);
    int rc = pg_attention_fwd(c, 1, T, d, 5, 1, one.x, one.wqkv, one.bqkv, one.wo, one.bo, one.qkv, one.att,
                              one.ctx, one.y);
    const char *msg = capture_end(&cap);
    OK(rc != 0 && strstr(msg, "divisible"), "attention with d=128 and 5 heads is an error: %s", msg);
    free(dc3), free(dq3), free(dx3), free(dc1), free(dq1), free(dx1);
    attn_free(&big), attn_free(&one);
}

/* ---- Llama's attention core: grouped heads, rotary positions ---------------
 * pg_attn_fwd / pg_attn_bwd at every length class of the rewritten loops
 * (runtime/cpu/attention.c): rows shorter than a block of 16, whole blocks,
 * partial blocks, more than one 64-wide span of exponentials, more than one
 * block of score rows in the backward (T > 128); head sizes whose halves are
 * under, at and past the rotation's blocks of 8 pairs. Checked three ways:
 *  - the bits of the rotated q and k and of the probabilities against the
 *    formulas as they were written before the blocks (core_rope_ref: one pair
 *    at a time; core_softmax_ref: pg_cpu_exp_blk block by block, the sum in
 *    16 double lanes, then one multiply per element), the scores by the very
 *    GEMM call the kernel makes (the order of the double lanes' adds does
 *    not show in float probabilities: the sum is exact or nearly so);
 *  - ctx, dq, dk and dv against the definition in double;
 *  - the baseline loops (avx2 off: what a host without AVX2 runs) give the
 *    same bytes as this CPU's build. */
typedef struct core_case {
    int64_t r, T, h, kv, hd;
    int causal;
    float theta;
} core_case;

static void core_rope_ref(float *x, int64_t rows, int64_t nh, int64_t ld, int64_t T, int64_t hd, float theta)
{
    int64_t half = hd / 2;
    for (int64_t row = 0; row < rows; row++)
        for (int64_t j = 0; j < half; j++) {
            float e = (float)(2 * j) / (float)hd, inv = 1.0f / (float)pow((double)theta, (double)e);
            float ang = (float)(row % T) * inv, cs = (float)cos((double)ang), sn = (float)sin((double)ang);
            for (int64_t hh = 0; hh < nh; hh++) {
                float *a = x + row * ld + hh * hd, *b = a + half, x1 = a[j], x2 = b[j];
                a[j] = x1 * cs - x2 * sn;
                b[j] = x2 * cs + x1 * sn;
            }
        }
}

static void core_softmax_ref(float *a, int64_t len, int64_t T)
{
    float m = a[0];
    for (int64_t j = 1; j < len; j++)
        m = a[j] > m ? a[j] : m;
    double acc[PG_CPU_ROW_LANES] = {0};
    for (int64_t j0 = 0; j0 < len; j0 += PG_CPU_EXP_BLK) {
        int64_t nb = len - j0 < PG_CPU_EXP_BLK ? len - j0 : PG_CPU_EXP_BLK;
        float e[PG_CPU_EXP_BLK];
        for (int64_t j = 0; j < PG_CPU_EXP_BLK; j++)
            e[j] = j < nb ? a[j0 + j] - m : -87.0f;
        pg_cpu_exp_blk(e);
        for (int64_t j = 0; j < PG_CPU_EXP_BLK; j++)
            acc[j] += j < nb ? e[j] : 0.0f;
        memcpy(a + j0, e, (size_t)nb * sizeof *a);
    }
    float inv = (float)(1.0 / pg_cpu_lanes_sum_d(acc));
    for (int64_t j = 0; j < len; j++)
        a[j] *= inv;
    for (int64_t j = len; j < T; j++)
        a[j] = 0.0f;
}

/* x rotated in double (the reference's own cos and sin), or back with inverse */
static void core_rope_d(double *x, int64_t rows, int64_t nh, int64_t T, int64_t hd, double theta, int inverse)
{
    int64_t half = hd / 2;
    for (int64_t row = 0; row < rows; row++)
        for (int64_t hh = 0; hh < nh; hh++)
            for (int64_t j = 0; j < half; j++) {
                double ang = (double)(row % T) / pow(theta, (double)(2 * j) / (double)hd);
                double c = cos(ang), s = inverse ? -sin(ang) : sin(ang);
                double *a = x + (row * nh + hh) * hd + j, *b = a + half, x1 = *a, x2 = *b;
                *a = x1 * c - x2 * s;
                *b = x2 * c + x1 * s;
            }
}

/* ctx, dq, dk, dv in double from the unrotated q, k, v and dctx */
static void core_reference(const core_case *k, const float *q, const float *kk, const float *v, const float *dctx,
                           double *ctx, double *dq, double *dk, double *dv)
{
    int64_t r = k->r, T = k->T, h = k->h, kv = k->kv, hd = k->hd, n = r * T, grp = h / kv;
    double *qd = calloc((size_t)(n * h * hd), sizeof *qd), *kd = calloc((size_t)(n * kv * hd), sizeof *kd);
    double *P = calloc((size_t)(T * T), sizeof *P), *S = calloc((size_t)(T * T), sizeof *S), sc = 1.0 / sqrt((double)hd);
    for (int64_t i = 0; i < n * h * hd; i++)
        qd[i] = q[i];
    for (int64_t i = 0; i < n * kv * hd; i++)
        kd[i] = kk[i];
    if (k->theta > 0)
        core_rope_d(qd, n, h, T, hd, k->theta, 0), core_rope_d(kd, n, kv, T, hd, k->theta, 0);
    memset(dk, 0, (size_t)(n * kv * hd) * sizeof *dk), memset(dv, 0, (size_t)(n * kv * hd) * sizeof *dv);
    for (int64_t b = 0; b < r; b++)
        for (int64_t hh = 0; hh < h; hh++) {
            int64_t g = hh / grp;
            const double *qh = qd + b * T * h * hd + hh * hd, *kh = kd + b * T * kv * hd + g * hd;
            const float *vh = v + b * T * kv * hd + g * hd, *dch = dctx + b * T * h * hd + hh * hd;
            for (int64_t i = 0; i < T; i++) {
                int64_t len = k->causal ? i + 1 : T;
                double mx = -INFINITY, z = 0.0, D = 0.0;
                for (int64_t j = 0; j < len; j++) {
                    double s = 0.0;
                    for (int64_t e = 0; e < hd; e++)
                        s += qh[i * h * hd + e] * kh[j * kv * hd + e];
                    P[i * T + j] = s * sc, mx = fmax(mx, s * sc);
                }
                for (int64_t j = 0; j < T; j++)
                    z += P[i * T + j] = j < len ? exp(P[i * T + j] - mx) : 0.0;
                for (int64_t j = 0; j < T; j++) {
                    double dp = 0.0;
                    P[i * T + j] /= z;
                    for (int64_t e = 0; e < hd; e++)
                        dp += (double)dch[i * h * hd + e] * vh[j * kv * hd + e];
                    S[i * T + j] = dp, D += P[i * T + j] * dp;
                }
                for (int64_t j = 0; j < T; j++)
                    S[i * T + j] = P[i * T + j] * (S[i * T + j] - D) * sc;
            }
            for (int64_t i = 0; i < T; i++)
                for (int64_t e = 0; e < hd; e++) {
                    double c = 0.0, sq = 0.0, sk = 0.0, sv = 0.0;
                    for (int64_t j = 0; j < T; j++) {
                        c += P[i * T + j] * vh[j * kv * hd + e];
                        sq += S[i * T + j] * kh[j * kv * hd + e];
                        sk += S[j * T + i] * qh[j * h * hd + e];
                        sv += P[j * T + i] * dch[j * h * hd + e];
                    }
                    ctx[(b * T + i) * h * hd + hh * hd + e] = c, dq[(b * T + i) * h * hd + hh * hd + e] = sq;
                    dk[(b * T + i) * kv * hd + g * hd + e] += sk, dv[(b * T + i) * kv * hd + g * hd + e] += sv;
                }
        }
    if (k->theta > 0)
        core_rope_d(dq, n, h, T, hd, k->theta, 1), core_rope_d(dk, n, kv, T, hd, k->theta, 1);
    free(qd), free(kd), free(P), free(S);
}

/* the outputs of one forward and backward; q and k come back rotated */
typedef struct core_out { float *q, *k, *att, *ctx, *dq, *dk, *dv; } core_out;

static int core_run(pg_ctx *c, const core_case *k, const float *q0, const float *k0, const float *v,
                    const float *dctx, core_out *o)
{
    int64_t n = k->r * k->T, qn = n * k->h * k->hd, kn = n * k->kv * k->hd;
    pg_attn_dims s = {k->T, k->h, k->kv, k->hd, k->causal, k->theta, k->h * k->hd, k->kv * k->hd, k->kv * k->hd};
    o->q = fa(qn), o->k = fa(kn), o->att = fa(k->r * k->h * k->T * k->T), o->ctx = fa(qn);
    o->dq = fa(qn), o->dk = fa(kn), o->dv = fa(kn);
    memcpy(o->q, q0, (size_t)qn * 4), memcpy(o->k, k0, (size_t)kn * 4);
    return pg_attn_fwd(c, k->r, &s, 0.0f, 0, 0, o->q, o->k, v, o->att, o->ctx) ||
           pg_attn_bwd(c, k->r, &s, 0.0f, 0, 0, o->q, o->k, v, o->att, dctx, o->dq, o->dk, o->dv);
}

static void core_free(core_out *o) { free(o->q), free(o->k), free(o->att), free(o->ctx), free(o->dq), free(o->dk), free(o->dv); }

static int core_same(const core_case *k, const core_out *a, const core_out *b)
{
    size_t qn = (size_t)(k->r * k->T * k->h * k->hd) * 4, kn = (size_t)(k->r * k->T * k->kv * k->hd) * 4;
    return !memcmp(a->q, b->q, qn) && !memcmp(a->k, b->k, kn) && !memcmp(a->ctx, b->ctx, qn) &&
           !memcmp(a->att, b->att, (size_t)(k->r * k->h * k->T * k->T) * 4) && !memcmp(a->dq, b->dq, qn) &&
           !memcmp(a->dk, b->dk, kn) && !memcmp(a->dv, b->dv, kn);
}

static void test_attn_core(pg_ctx *c, rng *g)
{
    static const core_case cases[] = {
        {2, 3, 4, 2, 8, 1, 10000.0f},    {2, 16, 4, 2, 16, 1, 10000.0f}, {2, 21, 4, 1, 20, 1, 500.0f},
        {2, 64, 8, 4, 32, 1, 10000.0f},  {1, 80, 4, 2, 36, 1, 10000.0f}, {1, 150, 2, 1, 16, 1, 10000.0f},
        {2, 37, 4, 2, 16, 0, 10000.0f},  {1, 150, 2, 2, 8, 0, 0.0f},    {1, 100, 4, 2, 64, 1, 10000.0f},
        {1, 128, 2, 1, 128, 1, 10000.0f}, {3, 33, 2, 2, 24, 0, 0.0f},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const core_case *k = &cases[ci];
        int64_t r = k->r, T = k->T, h = k->h, kv = k->kv, hd = k->hd, n = r * T, qn = n * h * hd, kn = n * kv * hd;
        float *q = fa(qn), *kk = fa(kn), *v = fa(kn), *dctx = fa(qn);
        fill(g, q, qn, -1, 1), fill(g, kk, kn, -1, 1), fill(g, v, kn, -1, 1), fill(g, dctx, qn, -1, 1);
        core_out o, base;
        int rc = core_run(c, k, q, kk, v, dctx, &o);
        char what[96];
        snprintf(what, sizeof what, "attn core T=%lld heads %lld/%lld hd=%lld %s%s", (long long)T, (long long)h,
                 (long long)kv, (long long)hd, k->causal ? "causal" : "full", k->theta > 0 ? " rope" : "");
        /* the rotation and the probabilities, bit for bit against the former formulas */
        float *qr = fa(qn), *kr = fa(kn), *att = fa(r * h * T * T);
        memcpy(qr, q, (size_t)qn * 4), memcpy(kr, kk, (size_t)kn * 4);
        if (k->theta > 0)
            core_rope_ref(qr, n, h, h * hd, T, hd, k->theta), core_rope_ref(kr, n, kv, kv * hd, T, hd, k->theta);
        OK(rc == 0 && !memcmp(qr, o.q, (size_t)qn * 4) && !memcmp(kr, o.k, (size_t)kn * 4),
           "%s: rotated q and k are the pairwise formula's bits", what);
        for (int64_t b = 0; b < r; b++)
            for (int64_t hh = 0; hh < h; hh++) {
                float *a = att + (b * h + hh) * T * T;
                pg_cpu_gemm(c, 0, 1, T, T, hd, (float)(1.0 / sqrt((double)hd)), o.q + b * T * h * hd + hh * hd, h * hd,
                            o.k + b * T * kv * hd + hh / (h / kv) * hd, kv * hd, 0, a, T);
                for (int64_t i = 0; i < T; i++)
                    core_softmax_ref(a + i * T, k->causal ? i + 1 : T, T);
            }
        OK(!memcmp(att, o.att, (size_t)(r * h * T * T) * 4),
           "%s: the probabilities are the block-by-block softmax's bits (16 double lanes)", what);
        /* the values against the definition */
        double *ctx = calloc((size_t)qn, sizeof *ctx), *dq = calloc((size_t)qn, sizeof *dq);
        double *dk = calloc((size_t)kn, sizeof *dk), *dv = calloc((size_t)kn, sizeof *dv);
        core_reference(k, q, kk, v, dctx, ctx, dq, dk, dv);
        double e1 = max_rel_diff(o.ctx, ctx, qn), e2 = max_rel_diff(o.dq, dq, qn);
        double e3 = max_rel_diff(o.dk, dk, kn), e4 = max_rel_diff(o.dv, dv, kn);
        OK(e1 < 5e-4 && e2 < 5e-4 && e3 < 5e-4 && e4 < 5e-4,
           "%s: ctx, dq, dk, dv equal the definition in double (%.1e %.1e %.1e %.1e)", what, e1, e2, e3, e4);
        /* the baseline loops: the same bytes */
        int avx2 = c->avx2;
        c->avx2 = 0;
        rc = core_run(c, k, q, kk, v, dctx, &base);
        c->avx2 = avx2;
        OK(rc == 0 && core_same(k, &o, &base), "%s: the baseline loops give the same bytes as the %s build", what,
           avx2 ? "AVX2" : "baseline");
        core_free(&o), core_free(&base);
        free(q), free(kk), free(v), free(dctx), free(qr), free(kr), free(att), free(ctx), free(dq), free(dk), free(dv);
    }
}

/* ---- dropout ------------------------------------------------------------ */

static void test_dropout(pg_ctx *c, rng *r)
{
    int64_t rows = 10, per = 300, n = rows * per;
    float p = 0.25f;
    float *x = fa(n), *y = fa(n), *ys = fa(n), *dx = fa(n);
    fill(r, x, n, 0.5, 1.5);
    pg_dropout_fwd(c, rows, per, p, 42, 100, x, y);
    pg_dropout_fwd(c, 4, per, p, 42, 100, x, ys);
    pg_dropout_fwd(c, 6, per, p, 42, 104, x + 4 * per, ys + 4 * per);
    OK(memcmp(y, ys, (size_t)n * 4) == 0, "dropout mask depends on the sample index, not on the micro-batch split");
    int64_t kept = 0;
    int scale_ok = 1;
    for (int64_t i = 0; i < n; i++)
        if (y[i] != 0.0f) {
            kept++;
            scale_ok &= y[i] == x[i] * (1.0f / 0.75f);
        }
    double frac = (double)kept / (double)n;
    OK(fabs(frac - 0.75) < 0.03, "dropout keeps about 1 - p of the elements (%.3f)", frac);
    OK(scale_ok, "dropout scales kept elements by 1 / (1 - p)");
    pg_dropout_bwd_in(c, rows, per, p, 42, 100, x, dx);
    OK(memcmp(dx, y, (size_t)n * 4) == 0, "dropout_bwd_in applies the forward mask and scale");
    pg_dropout_fwd(c, rows, per, p, 43, 100, x, ys);
    OK(memcmp(y, ys, (size_t)n * 4) != 0, "a different seed gives a different mask");
    pg_dropout_fwd(c, rows, per, 0.0f, 42, 100, x, ys);
    OK(memcmp(x, ys, (size_t)n * 4) == 0, "dropout with p = 0 is the identity");
    capture cap;
    capture_begin(&cap);
    int rc = pg_dropout_fwd(c, rows, per, 1.5f, 42, 0, x, ys);
    capture_end(&cap);
    OK(rc != 0, "dropout with p = 1.5 is an error");
    free(x), free(y), free(ys), free(dx);
}

/* ---- skips -------------------------------------------------------------------- */

static void test_skips(pg_ctx *c, rng *r)
{
    float x[6], s[4], y[10], dx[6], ds[4], sum[6];
    fill(r, x, 6, -1, 1), fill(r, s, 4, -1, 1);
    pg_concat_fwd(c, 2, 3, 2, x, s, y);
    OK(y[0] == x[0] && y[2] == x[2] && y[3] == s[0] && y[5] == x[3] && y[9] == s[3],
       "concat_fwd puts x then s on the last dim");
    pg_concat_bwd(c, 2, 3, 2, y, dx, ds);
    OK(memcmp(dx, x, sizeof x) == 0 && memcmp(ds, s, sizeof s) == 0, "concat_bwd splits dy back");
    pg_add_fwd(c, 4, x, s, sum);
    OK(sum[0] == x[0] + s[0] && sum[3] == x[3] + s[3], "add_fwd adds elementwise");
    float acc[4] = {1, 2, 3, 4};
    pg_axpy_inplace(c, acc, s, 4);
    OK(acc[2] == 3 + s[2], "axpy_inplace adds into y");
}

/* ---- losses ------------------------------------------------------------------ */

typedef struct mse_case {
    pg_ctx *c;
    int64_t n;
    float *y, *t, *dy;
    double denom;
} mse_case;

static double mse_obj(void *v)
{
    mse_case *m = v;
    double loss;
    pg_mse_fwd_bwd(m->c, m->n, m->y, m->t, m->denom, &loss, m->dy);
    return loss;
}

static void test_mse(pg_ctx *c, rng *r)
{
    mse_case m = {c, 12, fa(12), fa(12), fa(12), 6.0};
    fill(r, m.y, 12, -1, 1), fill(r, m.t, 12, -1, 1);
    double ref = 0.0;
    for (int i = 0; i < 12; i++)
        ref += ((double)m.y[i] - m.t[i]) * ((double)m.y[i] - m.t[i]);
    double loss = mse_obj(&m);
    OK(fabs(loss - ref / 6.0) < 1e-6 * ref, "mse loss is sum (y - t)^2 / denom");
    float *dy = fa(12);
    memcpy(dy, m.dy, 48);
    OK(fd_relerr(mse_obj, &m, m.y, 12, dy) < FD_TOL, "mse gradient matches finite differences");
    double l1, l2;
    pg_mse_fwd_bwd(c, 5, m.y, m.t, 6.0, &l1, m.dy);
    pg_mse_fwd_bwd(c, 7, m.y + 5, m.t + 5, 6.0, &l2, m.dy + 5);
    OK(fabs(l1 + l2 - loss) < 1e-12 && memcmp(m.dy, dy, 48) == 0,
       "mse partial losses add up to the batch's; gradients are per element");
    free(m.y), free(m.t), free(m.dy), free(dy);
}

typedef struct ce_case {
    pg_ctx *c;
    int64_t n, V;
    float *logits, *dl;
    const int32_t *tg;
    double denom;
} ce_case;

static double ce_obj(void *v)
{
    ce_case *e = v;
    double loss;
    pg_cross_entropy_fwd_bwd(e->c, e->n, e->V, e->logits, e->tg, e->denom, &loss, e->dl);
    return loss;
}

static void test_cross_entropy(pg_ctx *c, rng *r)
{
    static const int32_t tg[4] = {2, 0, 4, 2};
    ce_case e = {c, 4, 5, fa(20), fa(20), tg, 8.0};
    fill(r, e.logits, 20, -3, 3);
    e.logits[7] = 80.0f; /* a large logit: max subtraction keeps it finite */
    double ref = 0.0;
    for (int i = 0; i < 4; i++) {
        double mx = -INFINITY, z = 0.0;
        for (int j = 0; j < 5; j++)
            mx = fmax(mx, e.logits[i * 5 + j]);
        for (int j = 0; j < 5; j++)
            z += exp(e.logits[i * 5 + j] - mx);
        ref += -(e.logits[i * 5 + tg[i]] - mx - log(z));
    }
    double loss = ce_obj(&e);
    OK(isfinite(loss) && fabs(loss - ref / 8.0) < 1e-6 * fabs(ref), "cross_entropy loss is -sum log softmax[target] / denom");
    float *dl = fa(20);
    memcpy(dl, e.dl, 80);
    double rowsum = 0.0;
    for (int j = 0; j < 5; j++)
        rowsum += dl[j];
    OK(fabs(rowsum) < 1e-6, "cross_entropy gradient of a row sums to 0");
    OK(fd_relerr(ce_obj, &e, e.logits, 20, dl) < FD_TOL, "cross_entropy gradient matches finite differences");
    static const int32_t bad[3] = {1, 5, 0};
    capture cap;
    capture_begin(&cap);
    int rc = pg_cross_entropy_fwd_bwd(c, 3, 5, e.logits, bad, 8.0, &loss, e.dl);
    const char *msg = capture_end(&cap);
    OK(rc != 0 && strstr(msg, "row 1") && strstr(msg, "target id 5"),
       "cross_entropy refuses target 5 of 5 classes, naming row and id: %s", msg);
    free(e.logits), free(e.dl), free(dl);
}

/* Rows of every length the loss's blocks and chunks treat apart (V = 5, 16,
 * 37, 256, 300, 700), one with a target in the padded tail, one logit far
 * above the rest: the loss and the gradient against the formulas in double. */
/* One cross-entropy row as loss.c computed it block by block before its
 * exponentials went 4 blocks at a time (pg_cpu_exp_shifted): e = exp(x - max)
 * per block of 16 (the last padded), float lanes per chunk of 256, the chunks
 * in double, dx = e (inv / sum), dx[t] = (e_t / sum - 1) inv. */
static double ce_row_former(const float *x, int64_t V, int32_t t, double inv, float *dx)
{
    float m = x[0];
    for (int64_t j = 1; j < V; j++)
        m = x[j] > m ? x[j] : m;
    double s = 0.0;
    for (int64_t c = 0; c < V; c += PG_CPU_ROW_CHUNK) {
        int64_t end = V - c < PG_CPU_ROW_CHUNK ? V : c + PG_CPU_ROW_CHUNK;
        float acc[PG_CPU_ROW_LANES] = {0};
        for (int64_t j = c; j < end; j += PG_CPU_EXP_BLK) {
            float e[PG_CPU_EXP_BLK];
            for (int l = 0; l < PG_CPU_EXP_BLK; l++)
                e[l] = j + l < end ? x[j + l] - m : -87.0f;
            pg_cpu_exp_blk(e);
            for (int l = 0; l < PG_CPU_EXP_BLK; l++)
                acc[l] += j + l < end ? e[l] : 0.0f;
            for (int l = 0; l < PG_CPU_EXP_BLK && j + l < end; l++)
                dx[j + l] = e[l];
        }
        s += pg_cpu_lanes_sum(acc);
    }
    float scale = (float)(inv / s);
    double et = dx[t];
    for (int64_t j = 0; j < V; j++)
        dx[j] *= scale;
    dx[t] = (float)((et / s - 1.0) * inv);
    return log(s) - ((double)x[t] - m);
}

/* the loss and gradient bits of the former block-by-block rows, on this
 * CPU's build and on the baseline loops */
static void test_cross_entropy_former(pg_ctx *c, rng *r)
{
    static const int64_t Vs[] = {5, 16, 37, 64, 65, 256, 300, 700, 2048};
    int same = 1;
    for (size_t k = 0; k < sizeof Vs / sizeof *Vs; k++)
        for (int avx2 = c->avx2; avx2 >= 0; avx2--) {
            int64_t n = 3, V = Vs[k];
            float *x = fa(n * V), *dx = fa(n * V), *want = fa(n * V);
            int32_t tg[3] = {0, (int32_t)(V - 1), (int32_t)(V / 2)};
            fill(r, x, n * V, -6, 6);
            double loss, ref = 0.0;
            int keep = c->avx2;
            c->avx2 = avx2;
            pg_cross_entropy_fwd_bwd(c, n, V, x, tg, 4.0, &loss, dx);
            c->avx2 = keep;
            for (int64_t i = 0; i < n; i++)
                ref += ce_row_former(x + i * V, V, tg[i], 0.25, want + i * V);
            same &= loss == ref * 0.25 && !memcmp(dx, want, (size_t)(n * V) * 4);
            free(x), free(dx), free(want);
        }
    OK(same, "cross_entropy gives the former block-by-block rows' bits, loss and gradient, for V = 5, 16, 37, 64, "
       "65, 256, 300, 700, 2048 (%s)", c->avx2 ? "AVX2 and baseline builds" : "baseline build");
}

static void test_cross_entropy_lengths(pg_ctx *c, rng *r)
{
    static const int64_t Vs[] = {5, 16, 37, 256, 300, 700};
    double wl = 0, wg = 0;
    for (size_t k = 0; k < sizeof Vs / sizeof *Vs; k++) {
        int64_t n = 3, V = Vs[k];
        float *x = fa(n * V), *dx = fa(n * V);
        int32_t tg[3] = {0, (int32_t)(V - 1), (int32_t)(V / 2)};
        fill(r, x, n * V, -6, 6);
        x[V + 1] = 60.0f;
        double loss, ref = 0.0;
        pg_cross_entropy_fwd_bwd(c, n, V, x, tg, 4.0, &loss, dx);
        for (int64_t i = 0; i < n; i++) {
            const float *xr = x + i * V;
            double mx = -INFINITY, z = 0.0;
            for (int64_t j = 0; j < V; j++)
                mx = fmax(mx, xr[j]);
            for (int64_t j = 0; j < V; j++)
                z += exp(xr[j] - mx);
            ref += (mx + log(z) - xr[tg[i]]) / 4.0;
            for (int64_t j = 0; j < V; j++) {
                double want = (exp(xr[j] - mx) / z - (j == tg[i])) / 4.0;
                wg = fmax(wg, fabs(dx[i * V + j] - want));
            }
        }
        wl = fmax(wl, fabs(loss - ref) / fabs(ref));
        free(x), free(dx);
    }
    OK(wl < 1e-6, "cross_entropy loss equals the formula in double for V = 5, 16, 37, 256, 300, 700 (worst relative "
       "error %.2g)", wl);
    OK(wg < 1e-7, "cross_entropy gradient equals the formula in double for the same rows (worst absolute error %.2g "
       "of values up to 0.25)", wg);
}

/* ---- optimizers: against torch.optim 1.13, three steps ---------------------
 * Expected values printed by torch.optim.SGD(lr=0.1, momentum=0.9,
 * weight_decay=0.01) and torch.optim.AdamW(lr=0.01, betas=(0.9, 0.999),
 * eps=1e-8, weight_decay=0.1) from w0 with the gradients below. */
static const float opt_w0[4] = {0.5f, -1.25f, 2.0f, 0.1f};
static const float opt_g[3][4] = {{0.3f, -0.2f, 0.05f, 1.0f}, {-0.1f, 0.4f, 0.25f, -0.5f}, {0.2f, 0.2f, -0.3f, 0.75f}};
static const double sgd_want[3][4] = {
    {0.46950000524520874, -1.2287499904632568, 1.9930000305175781, -0.00010000467591453344},
    {0.4515804946422577, -1.2483962774276733, 1.9597070217132568, -0.04018990322947502},
    {0.41500136256217957, -1.2848294973373413, 1.957783579826355, -0.1512306183576584}};
static const double adamw_want[3][4] = {
    {0.4895000159740448, -1.2387499809265137, 1.9880000352859497, 0.08990000188350677},
    {0.4850083291530609, -1.2411723136901855, 1.977401614189148, 0.08714673668146133},
    {0.47849246859550476, -1.2451235055923462, 1.9759842157363892, 0.08178938925266266}};

static int close4(const float *w, const double *want)
{
    for (int i = 0; i < 4; i++)
        if (fabs(w[i] - want[i]) > 2e-7 * fmax(1.0, fabs(want[i])))
            return 0;
    return 1;
}

/* AdamW runs in vectorized blocks of 16 and a padded last block: every
 * element (37: two blocks and 5 more, over three steps) gets the bits of the
 * plain loop of its definition, operation for operation. */
/* pg_sumsq's order (runtime/cpu/optim.c): 16 double lanes, lane l adding
 * the squares of the elements i = l mod 16 in index order, the lanes added
 * as ((0+8 + 4+12) + (2+10 + 6+14)) + ((1+9 + 5+13) + (3+11 + 7+15)). */
static void test_sumsq_lanes(pg_ctx *c)
{
    /* magnitudes 1e-3 to 1e3: the index order's sum differs from the lanes' */
    float g[37];
    for (int i = 0; i < 37; i++)
        g[i] = (float)(i % 7 - 3) * 0.37f * (i % 5 == 0 ? 1000.0f : 1e-3f) + (float)i * 1e-3f;
    double acc[16] = {0}, h[8], in_order = 0.0;
    for (int i = 0; i < 37; i++) {
        acc[i % 16] += (double)g[i] * g[i];
        in_order += (double)g[i] * g[i];
    }
    for (int l = 0; l < 8; l++)
        h[l] = acc[l] + acc[l + 8];
    double want = ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7])), got;
    pg_sumsq(c, 37, g, &got);
    OK(got == want && want != in_order,
       "sumsq of 37 elements adds them in its documented lanes (%.17g, want %.17g; in index order %.17g)", got, want,
       in_order);
}

static void test_adamw_blocks(pg_ctx *c)
{
    enum { N = 37 };
    float w[N], g[N], m[N] = {0}, v[N] = {0}, rw[N], rm[N] = {0}, rv[N] = {0};
    for (int i = 0; i < N; i++) {
        w[i] = rw[i] = 0.03f * (float)(i - 17);
        g[i] = 0.011f * (float)((i * 7) % 13 - 6);
    }
    const float lr = 2e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    int same = 1;
    for (int t = 1; t <= 3; t++) {
        pg_adamw_step(c, N, w, g, m, v, lr, b1, b2, eps, wd, t);
        float decay = (float)(1.0 - (double)lr * (double)wd), one_b1 = (float)(1.0 - (double)b1);
        float one_b2 = (float)(1.0 - (double)b2);
        float neg_step = (float)(-((double)lr / (1.0 - pow((double)b1, (double)t))));
        float bc2_sqrt = (float)sqrt(1.0 - pow((double)b2, (double)t));
        for (int i = 0; i < N; i++) {
            float wi = rw[i] * decay, mi = rm[i] * b1 + one_b1 * g[i], vi = rv[i] * b2 + one_b2 * g[i] * g[i];
            rw[i] = wi + neg_step * mi / (sqrtf(vi) / bc2_sqrt + eps);
            rm[i] = mi, rv[i] = vi;
        }
        same &= !memcmp(w, rw, sizeof w) && !memcmp(m, rm, sizeof m) && !memcmp(v, rv, sizeof v);
    }
    OK(same, "adamw in blocks gives every element the bits of its plain definition (37 elements, 3 steps)");
}

/* adamw's AVX2 path (optim.c: intrinsics) against the baseline loops and the
 * plain definition, every length class (a tail alone, a block, blocks and a
 * tail, long), gradients from zero to 1e20 (g g overflows: v and the
 * denominator infinite), NaN and infinities, two steps: the same bytes (NaN
 * as NaN) */
static void test_adamw_builds(pg_ctx *c, rng *r)
{
    static const int64_t ns[] = {1, 7, 8, 15, 16, 17, 40, 1000, 4099};
    const float lr = 2e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    int avx2 = c->avx2, same = 1, plain = 1;
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        int64_t n = ns[k];
        float *g = fa(n), *w[3], *m[3], *v[3];
        for (int b = 0; b < 3; b++)
            w[b] = fa(n), m[b] = fa(n), v[b] = fa(n);
        fill(r, g, n, -1, 1), fill(r, w[0], n, -1, 1);
        static const float odd[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e20f, -3e19f, 1e-30f};
        for (int64_t i = 0; i < n; i++)
            g[i] = i % 11 == 3 ? odd[(i / 11) % 8] : g[i] * (i % 3 == 0 ? 1e-4f : 1.0f);
        memcpy(w[1], w[0], (size_t)n * 4), memcpy(w[2], w[0], (size_t)n * 4);
        for (int t = 1; t <= 2; t++) {
            for (int b = 0; b < 2; b++) {
                c->avx2 = b ? 0 : avx2;
                pg_adamw_step(c, n, w[b], g, m[b], v[b], lr, b1, b2, eps, wd, t);
            }
            float decay = (float)(1.0 - (double)lr * (double)wd), one_b1 = (float)(1.0 - (double)b1);
            float one_b2 = (float)(1.0 - (double)b2);
            float neg_step = (float)(-((double)lr / (1.0 - pow((double)b1, (double)t))));
            float bc2_sqrt = (float)sqrt(1.0 - pow((double)b2, (double)t));
            for (int64_t i = 0; i < n; i++) {
                float wi = w[2][i] * decay, mi = m[2][i] * b1 + one_b1 * g[i], vi = v[2][i] * b2 + one_b2 * g[i] * g[i];
                w[2][i] = wi + neg_step * mi / (sqrtf(vi) / bc2_sqrt + eps);
                m[2][i] = mi, v[2][i] = vi;
            }
            same &= same_or_nan(w[0], w[1], n) && same_or_nan(m[0], m[1], n) && same_or_nan(v[0], v[1], n);
            plain &= same_or_nan(w[0], w[2], n) && same_or_nan(m[0], m[2], n) && same_or_nan(v[0], v[2], n);
        }
        c->avx2 = avx2;
        free(g);
        for (int b = 0; b < 3; b++)
            free(w[b]), free(m[b]), free(v[b]);
    }
    OK(same && plain, "adamw: the %s build, the baseline loops and the plain definition give the same bytes, counts 1 "
       "to 4099, two steps (zeros, 1e20, NaN and infinities among the gradients)%s", avx2 ? "AVX2" : "baseline",
       same ? "" : ": the builds differ");
}

static void test_optimizers(pg_ctx *c)
{
    float w[4], buf[4], m[4], v[4];
    memcpy(w, opt_w0, sizeof w);
    for (int s = 0; s < 3; s++) {
        pg_sgd_step(c, 4, w, opt_g[s], buf, 0.1f, 0.9f, 0.01f, s == 0);
        OK(close4(w, sgd_want[s]), "sgd step %d (momentum, weight decay) matches torch.optim.SGD", s + 1);
    }
    memcpy(w, opt_w0, sizeof w);
    memset(m, 0, sizeof m), memset(v, 0, sizeof v);
    for (int s = 0; s < 3; s++) {
        pg_adamw_step(c, 4, w, opt_g[s], m, v, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, s + 1);
        OK(close4(w, adamw_want[s]), "adamw step %d matches torch.optim.AdamW", s + 1);
    }
    test_adamw_blocks(c);
    memcpy(w, opt_w0, sizeof w);
    pg_sgd_step(c, 4, w, opt_g[0], NULL, 0.5f, 0.0f, 0.0f, 1);
    OK(w[0] == 0.5f - 0.5f * 0.3f && w[3] == 0.1f - 0.5f * 1.0f, "plain sgd without momentum needs no buffer");
    double ss;
    pg_sumsq(c, 4, opt_w0, &ss);
    OK(ss == (0.25 + 4.0) + (1.5625 + (double)0.1f * 0.1f), "sumsq is the sum of squares in double, in lanes");
    test_sumsq_lanes(c);
    float sc[2] = {2.0f, -3.0f};
    pg_scale(c, sc, 0.5f, 2);
    OK(sc[0] == 1.0f && sc[1] == -1.5f, "scale multiplies in place");
}

/* ---- init ------------------------------------------------------------------ */

static uint64_t ref_mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void test_init(void)
{
    int64_t n = 100000;
    float *a = fa(n), *b = fa(n), *s = fa(10);
    pg_init_param(a, n, 2, 0.5, "layer0.weight", 1);
    pg_init_param(b, n, 2, 0.5, "layer0.weight", 1);
    OK(memcmp(a, b, (size_t)n * 4) == 0, "init: same name and seed give the same bits");
    pg_init_param(s, 10, 2, 0.5, "layer0.weight", 1);
    OK(memcmp(a, s, 40) == 0, "init: an element depends on its index only, not the count");
    pg_init_param(b, n, 2, 0.5, "layer1.weight", 1);
    OK(memcmp(a, b, (size_t)n * 4) != 0, "init: a different name gives different values");
    pg_init_param(b, n, 2, 0.5, "layer0.weight", 2);
    OK(memcmp(a, b, (size_t)n * 4) != 0, "init: a different seed gives different values");
    double mean = 0, sq = 0, lo = 1, hi = -1;
    for (int64_t i = 0; i < n; i++)
        mean += a[i], sq += (double)a[i] * a[i], lo = fmin(lo, a[i]), hi = fmax(hi, a[i]);
    mean /= n, sq = sqrt(sq / n);
    OK(fabs(mean) < 0.01 && fabs(sq - 0.5 / sqrt(3.0)) < 0.01 && lo >= -0.5 && hi < 0.5,
       "init uniform(0.5): mean %.4f, rms %.4f, range [%.3f, %.3f]", mean, sq, lo, hi);
    pg_init_param(a, n, 3, 0.02, "wte", 7);
    mean = 0, sq = 0;
    for (int64_t i = 0; i < n; i++)
        mean += a[i], sq += (double)a[i] * a[i];
    mean /= n, sq = sqrt(sq / n - mean * mean);
    OK(fabs(mean) < 0.0005 && fabs(sq - 0.02) < 0.0005, "init normal(0.02): mean %.5f, std %.5f", mean, sq);
    pg_init_param(s, 10, 0, 1.0, "z", 1);
    pg_init_param(s + 5, 5, 1, 1.0, "o", 1);
    OK(s[0] == 0.0f && s[4] == 0.0f && s[5] == 1.0f && s[9] == 1.0f, "init zeros and ones");

    /* The documented formula, re-derived here, must match bit for bit. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = "h.0.attn.qkv.weight"; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    uint64_t key = ref_mix(h ^ ref_mix(99));
    float got[6];
    pg_init_param(got, 6, 2, 0.125, "h.0.attn.qkv.weight", 99);
    int uni_ok = 1;
    for (int i = 0; i < 6; i++)
        uni_ok &= got[i] == (float)(0.125 * (2.0 * ((double)(ref_mix(key + (uint64_t)i) >> 40) / 16777216.0) - 1.0));
    OK(uni_ok, "init uniform follows the formula documented in runtime/core/init.c");
    pg_init_param(got, 6, 3, 0.02, "h.0.attn.qkv.weight", 99);
    int nrm_ok = 1;
    for (int i = 0; i < 6; i++) {
        uint64_t pr = (uint64_t)i / 2;
        double u1 = ((double)(ref_mix(key + 2 * pr) >> 40) + 1.0) / 16777216.0;
        double u2 = (double)(ref_mix(key + 2 * pr + 1) >> 40) / 16777216.0;
        double rad = sqrt(-2.0 * log(u1)), ang = 6.283185307179586 * u2;
        nrm_ok &= got[i] == (float)(0.02 * rad * ((i & 1) ? sin(ang) : cos(ang)));
    }
    OK(nrm_ok, "init normal follows the formula documented in runtime/core/init.c");
    free(a), free(b), free(s);
}

/* ---- the GEMM: one accumulation order per element ---------------------------
 * gemm.c promises C = (beta ? C : 0) + alpha * acc with acc an FMA chain over k
 * in index order from 0. gemm_ref computes exactly that, one element at a
 * time with fmaf (the C library's, exactly rounded), and each kernel must
 * match it bit for bit, whatever the shapes, strides and threads. */

static void gemm_ref(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, int beta, float *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++)
                acc = fmaf(ta ? A[k * lda + i] : A[i * lda + k], tb ? B[j * ldb + k] : B[k * ldb + j], acc);
            float t = acc * alpha;
            C[i * ldc + j] = beta ? C[i * ldc + j] + t : t;
        }
}

/* The GEMM kernels gemm.c has; which of them this CPU runs. */
static const char *const gemm_kernels[] = {"avx512", "avx2", "portable"};
#define N_GEMM_KERNELS 3

static int cpu_runs_kernel(const char *k)
{
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    if (!strcmp(k, "avx512"))
        return __builtin_cpu_supports("avx512f");
    if (!strcmp(k, "avx2"))
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    if (strcmp(k, "portable"))
        return 0;
#endif
    return 1;
}

/* 1, with a skipped check saying so, when this CPU cannot run GEMM kernel kn. */
static int kernel_absent(const char *kn, int threads)
{
    if (cpu_runs_kernel(kn))
        return 0;
    OK(1, "# SKIP this CPU has no %s GEMM kernel (%d threads)", kn, threads);
    return 1;
}

/* A backend with `threads` threads and the GEMM kernel `kernel` (NULL: the
 * one this CPU picks), through PIPE_CPU_GEMM as a user would ask for it. */
static pg_ctx *ctx_with(int threads, const char *kernel)
{
    const char *old = getenv("PIPE_CPU_GEMM");
    char *saved = old ? strdup(old) : NULL;
    if (kernel)
        setenv("PIPE_CPU_GEMM", kernel, 1);
    else
        unsetenv("PIPE_CPU_GEMM");
    pg_ctx *c = pg_backend_init(threads);
    if (saved)
        setenv("PIPE_CPU_GEMM", saved, 1);
    else
        unsetenv("PIPE_CPU_GEMM");
    free(saved);
    return c;
}

typedef struct gemm_case {
    int ta, tb;
    int64_t M, N, K;
    float alpha;
    int beta;
    int64_t pad; /* extra floats at the end of every row of A, B and C */
} gemm_case;

/* Every kind of edge: rows past every tile height (1..8), columns past every
 * tile width, K = 0 and 1, K over one chunk (2048) and over two, all four
 * transpositions, alpha != 1, beta 0 and 1, strided rows. */
static const gemm_case gemm_cases[] = {
    {0, 1, 37, 70, 130, 1.0f, 0, 0},  {0, 1, 13, 33, 9, 0.125f, 1, 3}, {0, 0, 12, 100, 2100, 1.0f, 1, 1},
    {1, 0, 10, 40, 4500, 1.0f, 1, 0}, {1, 1, 7, 5, 1, 2.5f, 0, 2},     {0, 0, 3, 17, 0, 1.0f, 1, 0},
    {0, 0, 1, 17, 64, 1.0f, 0, 5},    {1, 0, 300, 40, 33, 1.0f, 1, 0}, {0, 1, 40, 130, 200, 1.0f, 1, 0},
    {1, 1, 9, 31, 70, -0.5f, 1, 7},   {0, 0, 2, 1, 3, 1.0f, 0, 0},     {1, 0, 6, 96, 2049, 0.75f, 0, 4},
};
#define N_GEMM_CASES (int)(sizeof gemm_cases / sizeof gemm_cases[0])

/* Case g's operands (random), and C as gemm_ref leaves it from C0. */
typedef struct gemm_data {
    int64_t ac, bc, ldc;       /* row strides of A, B, C */
    float *A, *B, *C0, *R, *C; /* C: the kernel's result */
} gemm_data;

static void gemm_data_make(const gemm_case *g, rng *r, gemm_data *d)
{
    int64_t ar = g->ta ? g->K : g->M, br = g->tb ? g->N : g->K;
    d->ac = (g->ta ? g->M : g->K) + g->pad, d->bc = (g->tb ? g->K : g->N) + g->pad, d->ldc = g->N + g->pad;
    d->A = fa(ar * d->ac), d->B = fa(br * d->bc), d->C0 = fa(g->M * d->ldc), d->R = fa(g->M * d->ldc);
    d->C = fa(g->M * d->ldc);
    fill(r, d->A, ar * d->ac, -1, 1), fill(r, d->B, br * d->bc, -1, 1), fill(r, d->C0, g->M * d->ldc, -2, 2);
    memcpy(d->R, d->C0, (size_t)(g->M * d->ldc) * sizeof *d->R);
    gemm_ref(g->ta, g->tb, g->M, g->N, g->K, g->alpha, d->A, d->ac, d->B, d->bc, g->beta, d->R, d->ldc);
}

/* 1 when pg_cpu_gemm on c gives gemm_ref's bits, the padding of C (never
 * written) included; else the first difference goes to why. */
static int gemm_case_exact(pg_ctx *c, const gemm_case *g, gemm_data *d, char *why, size_t whylen)
{
    int64_t len = g->M * d->ldc;
    memcpy(d->C, d->C0, (size_t)len * sizeof *d->C);
    pg_cpu_gemm(c, g->ta, g->tb, g->M, g->N, g->K, g->alpha, d->A, d->ac, d->B, d->bc, g->beta, d->C, d->ldc);
    if (memcmp(d->C, d->R, (size_t)len * sizeof *d->C) == 0)
        return 1;
    for (int64_t e = 0; e < len; e++)
        if (memcmp(&d->C[e], &d->R[e], sizeof *d->C)) {
            snprintf(why, whylen, "ta %d tb %d M %lld N %lld K %lld: C[%lld][%lld] = %.9g, the formula %.9g",
                     g->ta, g->tb, (long long)g->M, (long long)g->N, (long long)g->K, (long long)(e / d->ldc),
                     (long long)(e % d->ldc), d->C[e], d->R[e]);
            break;
        }
    return 0;
}

/* ---- B packed once for many products (gemm.c's pg_cpu_gemm_pack, wpack.c) - */

static float *fa64(int64_t n) /* 64-byte aligned, as the packed copies are */
{
    size_t bytes = ((size_t)(n > 16 ? n : 16) * sizeof(float) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

/* Case g's B packed for c's kernel once, then the product from the copy:
 * byte for byte what pg_cpu_gemm gives from B as stored, and the formula;
 * pg_cpu_gemm_pack_diff finds nothing, then the one element changed in B. */
static int gemm_packed_exact(pg_ctx *c, const gemm_case *g, gemm_data *d, char *why, size_t whylen)
{
    if (!gemm_case_exact(c, g, d, why, whylen))
        return 0;
    int64_t len = g->M * d->ldc, kd = -1, jd = -1;
    float *bp = fa64(pg_cpu_gemm_packed_floats(c, g->N, g->K)), *U = fa(len);
    memcpy(U, d->C, (size_t)len * sizeof *U);
    memcpy(d->C, d->C0, (size_t)len * sizeof *d->C);
    pg_cpu_gemm_pack(c, g->tb, g->N, g->K, d->B, d->bc, bp);
    pg_cpu_gemm_packed(c, g->ta, g->M, g->N, g->K, g->alpha, d->A, d->ac, bp, g->beta, d->C, d->ldc, NULL);
    int same = memcmp(d->C, U, (size_t)len * sizeof *U) == 0;
    int fresh = !pg_cpu_gemm_pack_diff(c, g->tb, g->N, g->K, d->B, d->bc, bp, &kd, &jd);
    int found = 1;
    if (g->K > 0) { /* B(K-1, N/2) changed: found there */
        int64_t k = g->K - 1, j = g->N / 2;
        float *e = g->tb ? &d->B[j * d->bc + k] : &d->B[k * d->bc + j], keep = *e;
        *e += 1.0f;
        found = pg_cpu_gemm_pack_diff(c, g->tb, g->N, g->K, d->B, d->bc, bp, &kd, &jd) && kd == k && jd == j;
        *e = keep;
    }
    if (!same || !fresh || !found)
        snprintf(why, whylen, "ta %d tb %d M %lld N %lld K %lld: %s", g->ta, g->tb, (long long)g->M, (long long)g->N,
                 (long long)g->K, !same ? "the product from the packed B differs" : !fresh ? "the fresh copy differs"
                 : "a changed B was not found");
    free(bp), free(U);
    return same && fresh && found;
}

static void test_gemm_formula(rng *r)
{
    gemm_data data[N_GEMM_CASES];
    for (int i = 0; i < N_GEMM_CASES; i++)
        gemm_data_make(&gemm_cases[i], r, &data[i]);
    for (int k = 0; k < N_GEMM_KERNELS; k++)
        for (int threads = 1; threads <= 3; threads++) {
            const char *kn = gemm_kernels[k];
            if (kernel_absent(kn, threads))
                continue;
            pg_ctx *c = ctx_with(threads, kn);
            int all = c != NULL;
            char why[256] = "backend init failed";
            for (int i = 0; all && i < N_GEMM_CASES; i++)
                all = gemm_packed_exact(c, &gemm_cases[i], &data[i], why, sizeof why);
            OK(all, "GEMM kernel %s, %d thread(s): every element is its FMA chain over k, times alpha, plus C "
               "(%d cases: every tile edge, K = 0 .. 4500, strides, all transpositions), and from B packed once "
               "for the whole of K (pg_cpu_gemm_packed) the same bytes%s%s",
               kn, threads, N_GEMM_CASES, all ? "" : ": ", all ? "" : why);
            pg_backend_free(c);
        }
    for (int i = 0; i < N_GEMM_CASES; i++)
        free(data[i].A), free(data[i].B), free(data[i].C0), free(data[i].R), free(data[i].C);
    capture cap;
    capture_begin(&cap);
    pg_ctx *bad = ctx_with(1, "sse9");
    const char *msg = capture_end(&cap);
    OK(bad == NULL && strstr(msg, "PIPE_CPU_GEMM=sse9") && strstr(msg, "avx512, avx2 or portable"),
       "PIPE_CPU_GEMM=sse9 is refused, naming the kernels there are: %s", msg);
    pg_backend_free(bad);
}

/* The outputs of the linear ops of one weight w [out, in] over n rows: fwd,
 * act_fwd with gelu (s, ya), bwd_in, bwd_in_act (g, dxa), bwd_in_add. */
typedef struct lin_outs {
    float *y, *s, *ya, *dx, *g, *dxa, *dxs;
} lin_outs;

static lin_outs lin_outs_new(int64_t n, int64_t in, int64_t out)
{
    lin_outs o = {fa(n * out), fa(n * out), fa(n * out), fa(n * in), fa(n * in), fa(n * in), fa(n * in)};
    return o;
}

static void lin_outs_free(lin_outs *o)
{
    free(o->y), free(o->s), free(o->ya), free(o->dx), free(o->g), free(o->dxa), free(o->dxs);
}

static int lin_run(pg_ctx *c, int64_t n, int64_t in, int64_t out, const float *x, const float *w, const float *b,
                   const float *dy, lin_outs *o)
{
    for (int64_t i = 0; i < n * in; i++)
        o->dxs[i] = (float)i * 0.001f; /* bwd_in_add adds to it */
    return pg_linear_fwd(c, n, in, out, x, w, b, o->y) ||
           pg_linear_act_fwd(c, pg_gelu_fwd, n, in, out, x, w, b, o->s, o->ya) ||
           pg_linear_bwd_in(c, n, in, out, dy, w, o->dx) ||
           pg_linear_bwd_in_act(c, pg_gelu_bwd_in, n, in, out, dy, w, x, o->g, o->dxa) ||
           pg_linear_bwd_in_add(c, n, in, out, dy, w, o->dxs);
}

static int lin_same(const lin_outs *a, const lin_outs *b, int64_t n, int64_t in, int64_t out)
{
    size_t fo = (size_t)(n * out) * sizeof(float), fi = (size_t)(n * in) * sizeof(float);
    return !memcmp(a->y, b->y, fo) && !memcmp(a->s, b->s, fo) && !memcmp(a->ya, b->ya, fo) &&
           !memcmp(a->dx, b->dx, fi) && !memcmp(a->g, b->g, fi) && !memcmp(a->dxa, b->dxa, fi) &&
           !memcmp(a->dxs, b->dxs, fi);
}

/* The linear ops on a stage's packed weights (wpack.c) give the bytes of the
 * same ops without them, every kernel and thread count: edge widths both
 * ways, K past a chunk (KC_MAX 1024) both ways. */
static void test_wpack_linear(rng *r)
{
    static const int64_t shapes[][3] = {{37, 130, 70}, {9, 40, 1030}, {70, 1100, 33}, {1, 17, 5}}; /* {n, in, out} */
    for (int k = 0; k < N_GEMM_KERNELS; k++)
        for (int threads = 1; threads <= 3; threads++) {
            const char *kn = gemm_kernels[k];
            if (kernel_absent(kn, threads))
                continue;
            pg_ctx *plain = ctx_with(threads, kn);
            int bad = !plain, runs = 0;
            char why[160] = "backend init failed";
            for (int i = 0; !bad && i < 4; i++) {
                int64_t n = shapes[i][0], in = shapes[i][1], out = shapes[i][2];
                float *x = fa(n * in), *w = fa(out * in), *b = fa(out), *dy = fa(n * out);
                fill(r, x, n * in, -1, 1), fill(r, w, out * in, -0.3, 0.3), fill(r, b, out, -1, 1);
                fill(r, dy, n * out, -1, 1);
                pg_ctx *pk = ctx_with(threads, kn);
                pg_gemm_weight gw = {"layer.weight", w, out, in};
                lin_outs A = lin_outs_new(n, in, out), B = lin_outs_new(n, in, out);
                bad = !pk || pg_gemm_weights_plan(pk, 0, 1, &gw, NULL) || pk->nwp != 1;
                for (int rep = 0; !bad && rep < 2; rep++) { /* packs at the first use, reads the copy at the second */
                    bad = lin_run(plain, n, in, out, x, w, b, dy, &A) || lin_run(pk, n, in, out, x, w, b, dy, &B) ||
                          !lin_same(&A, &B, n, in, out);
                    runs++;
                }
                if (bad)
                    snprintf(why, sizeof why, "n %lld in %lld out %lld", (long long)n, (long long)in, (long long)out);
                lin_outs_free(&A), lin_outs_free(&B);
                pg_backend_free(pk);
                free(x), free(w), free(b), free(dy);
            }
            OK(!bad && runs == 8, "linear fwd, act_fwd, bwd_in, bwd_in_act, bwd_in_add on a packed weight give the "
               "bytes of the unpacked ones, kernel %s, %d thread(s)%s%s", kn, threads, bad ? ": " : "", bad ? why : "");
            pg_backend_free(plain);
        }
}

/* The copies follow every marked write of the weight; an unmarked one is
 * stale (so the copy is really what the products read) and PIPE_CHECK_PACKS
 * stops the op naming the weight and the element. */
static void test_wpack_writes(rng *r)
{
    int64_t n = 13, in = 70, out = 40;
    float *x = fa(n * in), *w = fa(out * in), *w2 = fa(out * in), *g = fa(out * in);
    float *y = fa(n * out), *ref = fa(n * out);
    fill(r, x, n * in, -1, 1), fill(r, w, out * in, -0.3, 0.3), fill(r, w2, out * in, -0.3, 0.3);
    fill(r, g, out * in, -1, 1);
    unsetenv("PIPE_CHECK_PACKS");
    pg_ctx *plain = ctx_with(2, NULL), *c = ctx_with(2, NULL);
    pg_gemm_weight gw = {"h0.fc.weight", w, out, in};
    int rc = pg_gemm_weights_plan(c, 0, 1, &gw, NULL);
    OK(rc == 0 && c->nwp == 1 && c->wp_check == 0, "a weight planned: one packed, no check without PIPE_CHECK_PACKS");
    size_t bo = (size_t)(n * out) * sizeof *y;
#define FRESH()                                                                                      \
    (pg_linear_fwd(plain, n, in, out, x, w, NULL, ref) == 0 && pg_linear_fwd(c, n, in, out, x, w, NULL, y) == 0 && \
     memcmp(y, ref, bo) == 0)
    OK(FRESH() && FRESH(), "first use packs, the next reads the copy: the plain bytes both times");
    pg_copy_to_dev(c, w, w2, (size_t)(out * in) * sizeof *w);
    OK(FRESH(), "pg_copy_to_dev into the weight (init, --load, --resume): packed again");
    pg_sgd_step(c, out * in, w, g, NULL, 0.1f, 0.0f, 0.0f, 1);
    OK(FRESH(), "an SGD step: packed again");
    float *m = fa(out * in), *v = fa(out * in);
    pg_adamw_step(c, out * in / 2, w + out * in / 2, g, m, v, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
    OK(FRESH(), "an AdamW step on half of it (a --zero 1 shard): packed again");
    w[5] += 1.0f;
    pg_param_written(c, w + 5, 1);
    OK(FRESH(), "pg_param_written on one element (a tie received over the network): packed again");
    w[7] += 1.0f;
    pg_copy(c, w + 3, w + 3, 10); /* a copy onto itself still marks */
    w[9] += 1.0f;
    pg_zero(c, w + 9, 1);
    OK(FRESH(), "pg_copy and pg_zero into it: packed again");
    pg_linear_fwd(plain, n, in, out, x, w, NULL, ref);
    w[11] += 1.0f; /* unmarked */
    pg_linear_fwd(c, n, in, out, x, w, NULL, y);
    OK(memcmp(y, ref, bo) == 0, "an unmarked write is not seen: the products read the copy packed before it");
    pg_backend_free(c);

    setenv("PIPE_CHECK_PACKS", "1", 1);
    c = ctx_with(1, NULL);
    rc = pg_gemm_weights_plan(c, 0, 1, &gw, NULL);
    rc |= pg_linear_fwd(c, n, in, out, x, w, NULL, y) || pg_linear_bwd_in(c, n, in, out, y, w, x);
    w[out * in - 1] = 5.0f; /* unmarked: [39, 69] */
    capture cap;
    capture_begin(&cap);
    int st = pg_linear_bwd_in(c, n, in, out, y, w, x);
    const char *msg = capture_end(&cap);
    OK(rc == 0 && st == 1 && strstr(msg, "wpack.c:") &&
       strstr(msg, "PIPE_CHECK_PACKS: GEMM weight 'h0.fc.weight' [40, 70]: its packed copy (B = W) holds ") &&
       strstr(msg, " at [39, 69] where the weight holds 5: the weight was written without marking it"),
       "PIPE_CHECK_PACKS: a use after an unmarked write stops, naming the weight and the element: %s", msg);
    pg_backend_free(c);
    unsetenv("PIPE_CHECK_PACKS");

    /* the cap: weights in table order while they fit; the report says so */
    pg_gemm_weight two[2] = {{"a", w, out, in}, {"b", w2, 700, 400}};
    setenv("PIPE_CPU_PACK_MIB", "1", 1);
    c = ctx_with(1, NULL);
    FILE *f = tmpfile();
    rc = pg_gemm_weights_plan(c, 3, 2, two, f);
    char line[300] = "";
    if (f) {
        rewind(f);
        if (!fgets(line, sizeof line, f))
            line[0] = 0;
        fclose(f);
    }
    OK(rc == 0 && c->nwp == 1 && c->nwp_left == 1 &&
       strstr(line, "stage 3: 1 GEMM weight packed once a step (W^T and W): ") &&
       strstr(line, " beside the arena; 1 more packed in every product (over PIPE_CPU_PACK_MIB)"),
       "PIPE_CPU_PACK_MIB=1: the weights that fit are packed, the start-up line counts the rest: %s", line);
    pg_backend_free(c);
    setenv("PIPE_CPU_PACK_MIB", "0", 1);
    c = ctx_with(1, NULL);
    rc = pg_gemm_weights_plan(c, 0, 2, two, NULL);
    OK(rc == 0 && c->nwp == 0 && c->nwp_left == 2 && FRESH(), "PIPE_CPU_PACK_MIB=0: no copies, the products as before");
    pg_backend_free(c);
    setenv("PIPE_CPU_PACK_MIB", "lots", 1);
    c = ctx_with(1, NULL);
    capture_begin(&cap);
    rc = pg_gemm_weights_plan(c, 0, 2, two, NULL);
    msg = capture_end(&cap);
    OK(rc == 1 &&
       strstr(msg, "PIPE_CPU_PACK_MIB=lots: not a size in MiB (0 packs no weight; unset: at most 1024 MiB a stage)"),
       "PIPE_CPU_PACK_MIB=lots is refused: %s", msg);
    pg_backend_free(c);
    setenv("PIPE_CPU_PACK_MIB", "100000000", 1);
    pg_gemm_weight huge = {"huge", w, (int64_t)1 << 21, (int64_t)1 << 21}; /* 32 TiB of copies: never read */
    c = ctx_with(1, NULL);
    capture_begin(&cap);
    rc = pg_gemm_weights_plan(c, 2, 1, &huge, NULL);
    msg = capture_end(&cap);
    OK(rc == 1 && c->nwp == 0 &&
       strstr(msg, "stage 2: cannot reserve 35184372088832 bytes (33554432.0 MiB) for its 1 GEMM weights packed once "
                   "a step; PIPE_CPU_PACK_MIB=0 runs without them"),
       "copies that cannot be had are refused at start-up: %s", msg);
    pg_backend_free(c);
    unsetenv("PIPE_CPU_PACK_MIB");
    pg_gemm_weight bad = {"bad", w, 0, 5};
    c = ctx_with(1, NULL);
    capture_begin(&cap);
    rc = pg_gemm_weights_plan(c, 1, 1, &bad, NULL);
    msg = capture_end(&cap);
    OK(rc == 1 && strstr(msg, "gemm_weights_plan: stage 1: weight 0 ('bad') is ") && strstr(msg, " [0, 5]"),
       "a weight of no rows is refused, named: %s", msg);
    rc = pg_gemm_weights_plan(c, 1, 1, &gw, NULL);
    capture_begin(&cap);
    rc = rc * 10 + pg_gemm_weights_plan(c, 1, 1, &gw, NULL);
    msg = capture_end(&cap);
    OK(rc == 1 && strstr(msg, "gemm_weights_plan: stage 1's GEMM weights are planned already"),
       "planning the weights twice is refused: %s", msg);
    pg_backend_free(c);
#undef FRESH
    pg_backend_free(plain);
    free(x), free(w), free(w2), free(g), free(y), free(ref), free(m), free(v);
}

/* Rows of a micro-batch come out bitwise as the same rows in a bigger one,
 * wherever they sit in it (linear_fwd and linear_bwd_in; OpenBLAS failed this
 * on AVX2 hosts and, for small products, on AVX-512 ones). */
static void row_independence(pg_ctx *c, rng *r, int64_t in, int64_t out)
{
    int64_t N = 20;
    float *x = fa(N * in), *w = fa(out * in), *b = fa(out), *y20 = fa(N * out), *y7 = fa(7 * out);
    float *dx20 = fa(N * in), *dx7 = fa(7 * in);
    fill(r, x, N * in, -1, 1), fill(r, w, out * in, -0.1, 0.1), fill(r, b, out, -1, 1);
    pg_linear_fwd(c, N, in, out, x, w, b, y20);
    pg_linear_fwd(c, 7, in, out, x + 3 * in, w, b, y7);
    OK(memcmp(y7, y20 + 3 * out, (size_t)(7 * out) * sizeof *y7) == 0,
       "linear_fwd rows are independent of the row count: 7 rows == rows 3..9 of 20 (in %lld, out %lld, %d thread(s))",
       (long long)in, (long long)out, c->threads);
    pg_linear_bwd_in(c, N, in, out, y20, w, dx20); /* y as dy */
    pg_linear_bwd_in(c, 7, in, out, y20 + 3 * out, w, dx7);
    OK(memcmp(dx7, dx20 + 3 * in, (size_t)(7 * in) * sizeof *dx7) == 0,
       "linear_bwd_in rows are independent of the row count (in %lld, out %lld, %d thread(s))",
       (long long)in, (long long)out, c->threads);
    free(x), free(w), free(b), free(y20), free(y7), free(dx20), free(dx7);
}

/* Every run of m rows from s of a 70-row product equals those rows of it. */
static void row_sweep(pg_ctx *c, rng *r)
{
    int64_t N = 70, in = 45, out = 50;
    float *x = fa(N * in), *w = fa(out * in), *b = fa(out), *y = fa(N * out), *ys = fa(N * out);
    fill(r, x, N * in, -1, 1), fill(r, w, out * in, -0.2, 0.2), fill(r, b, out, -1, 1);
    pg_linear_fwd(c, N, in, out, x, w, b, y);
    static const int64_t ms[] = {1, 2, 3, 5, 6, 7, 8, 9, 13, 16, 17, 31, 64}, ss[] = {0, 1, 3, 6};
    int bad = 0;
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
        for (size_t j = 0; j < sizeof ss / sizeof *ss; j++) {
            pg_linear_fwd(c, ms[i], in, out, x + ss[j] * in, w, b, ys);
            bad += memcmp(ys, y + ss[j] * out, (size_t)(ms[i] * out) * sizeof *y) != 0;
        }
    OK(bad == 0, "linear_fwd: rows s..s+m-1 alone equal them inside 70 rows for m = 1..64, s = 0..6 "
       "(%d thread(s); %d of 52 differ)", c->threads, bad);
    free(x), free(w), free(b), free(y), free(ys);
}

static void test_linear_row_independence(rng *r)
{
    for (int threads = 1; threads <= 3; threads += 2) {
        pg_ctx *c = ctx_with(threads, NULL);
        row_independence(c, r, 512, 1024);
        row_independence(c, r, 768, 768);
        row_independence(c, r, 1024, 256);
        row_independence(c, r, 33, 17);
        row_sweep(c, r);
        pg_backend_free(c);
    }
}

/* ---- an activation in the GEMM's store (pg_linear_act_fwd, pg_linear_bwd_in_act) ----
 * The fused call must give the bytes of the two separate calls, for every
 * activation, every length class of a row piece (the strips the GEMM hands its
 * store: below, at and past the activations' blocks of 64 and the GEMM's
 * column blocks of 256), rows past every tile height, K over one chunk of k,
 * every kernel and 1 and 3 threads. */

typedef struct act_ops {
    const char *name;
    pg_act_fwd_fn *fwd;
    pg_act_bwd_fn *bwd;
} act_ops;

static const act_ops act_list[] = {
    {"relu", pg_relu_fwd, pg_relu_bwd_in},          {"gelu", pg_gelu_fwd, pg_gelu_bwd_in},
    {"sigmoid", pg_sigmoid_fwd, pg_sigmoid_bwd_in}, {"tanh", pg_tanh_fwd, pg_tanh_bwd_in},
    {"silu", pg_silu_fwd, pg_silu_bwd_in},
};
#define N_ACTS (int)(sizeof act_list / sizeof act_list[0])

/* n rows, in -> out: 0 when the fused forward and backward-input equal the
 * separate calls byte for byte, else 1 with the first difference in why. */
static int linear_act_differs(pg_ctx *c, rng *r, const act_ops *A, int64_t n, int64_t in, int64_t out, char *why,
                              size_t wl)
{
    float *x = fa(n * in), *w = fa(out * in), *b = fa(out), *s1 = fa(n * out), *y1 = fa(n * out);
    float *s2 = fa(n * out), *y2 = fa(n * out), *dy = fa(n * out), *g1 = fa(n * in), *dx1 = fa(n * in);
    float *g2 = fa(n * in), *dx2 = fa(n * in), *h = fa(n * in);
    fill(r, x, n * in, -2, 2), fill(r, w, out * in, -0.5, 0.5), fill(r, b, out, -1, 1);
    fill(r, dy, n * out, -1, 1), fill(r, h, n * in, -4, 4);
    int bad = 0;
    pg_linear_fwd(c, n, in, out, x, w, b, s1);
    A->fwd(c, n * out, s1, y1);
    if (pg_linear_act_fwd(c, A->fwd, n, in, out, x, w, b, s2, y2) ||
        memcmp(s1, s2, (size_t)(n * out) * sizeof *s1) || memcmp(y1, y2, (size_t)(n * out) * sizeof *y1))
        bad = 1, snprintf(why, wl, "%s forward, n %lld in %lld out %lld", A->name, (long long)n, (long long)in,
                          (long long)out);
    /* the backward: h is the activation's input, dy the linear's output gradient */
    pg_linear_bwd_in(c, n, in, out, dy, w, g1);
    A->bwd(c, n * in, h, g1, dx1);
    if (!bad && (pg_linear_bwd_in_act(c, A->bwd, n, in, out, dy, w, h, g2, dx2) ||
                 memcmp(g1, g2, (size_t)(n * in) * sizeof *g1) || memcmp(dx1, dx2, (size_t)(n * in) * sizeof *dx1)))
        bad = 1, snprintf(why, wl, "%s backward-input, n %lld in %lld out %lld", A->name, (long long)n,
                          (long long)in, (long long)out);
    free(x), free(w), free(b), free(s1), free(y1), free(s2), free(y2), free(dy), free(g1), free(dx1), free(g2);
    free(dx2), free(h);
    return bad;
}

static void test_linear_act(rng *r)
{
    /* {n, in, out}: the fused width is out forward, in backward */
    static const int64_t shapes[][3] = {
        {5, 1, 1},    {7, 3, 17},    {13, 16, 64},  {37, 65, 63},   {70, 63, 65},  {9, 130, 130},
        {6, 256, 256}, {20, 257, 300}, {3, 512, 96}, {11, 40, 513}, {4, 1100, 70}, {2, 70, 1100},
        {3, 0, 20},   {4, 20, 0},
    };
    const int nsh = (int)(sizeof shapes / sizeof shapes[0]);
    for (int k = 0; k < N_GEMM_KERNELS; k++)
        for (int threads = 1; threads <= 3; threads += 2) {
            const char *kn = gemm_kernels[k];
            if (kernel_absent(kn, threads))
                continue;
            pg_ctx *c = ctx_with(threads, kn);
            char why[160] = "backend init failed";
            int bad = c == NULL;
            for (int a = 0; !bad && a < N_ACTS; a++)
                for (int i = 0; !bad && i < nsh; i++)
                    bad = linear_act_differs(c, r, &act_list[a], shapes[i][0], shapes[i][1], shapes[i][2], why,
                                             sizeof why);
            OK(!bad, "linear_act_fwd and linear_bwd_in_act (relu, gelu, sigmoid, tanh, silu) give the bytes of "
               "linear then the activation, kernel %s, %d thread(s), widths 1..1100, K up to 1100%s%s", kn, threads,
               bad ? ": differs at " : "", bad ? why : "");
            pg_backend_free(c);
        }
    pg_ctx *c = ctx_with(1, NULL);
    float v[4] = {0};
    capture cap;
    capture_begin(&cap);
    int rc = pg_linear_act_fwd(c, NULL, 1, 1, 1, v, v, NULL, v + 1, v + 2);
    const char *msg = capture_end(&cap);
    OK(rc == 1 && strstr(msg, "linear_act_fwd: no activation op given (NULL)"),
       "linear_act_fwd without an activation is refused, naming it: %s", msg);
    capture_begin(&cap);
    rc = pg_linear_bwd_in_act(c, pg_gelu_bwd_in, 1, -1, 1, v, v, v, v + 1, v + 2);
    msg = capture_end(&cap);
    OK(rc == 1 && strstr(msg, "linear_bwd_in_act: sizes n=1 in=-1 out=1"),
       "linear_bwd_in_act with a negative size is refused, naming it: %s", msg);
    pg_backend_free(c);
}

/* The products of a small training step: linear forward and both backwards
 * (one with more rows than a chunk of k), attention forward and backward.
 * Their bytes are compared across thread counts and kernels, and hashed for
 * `test_kernels digest`. */
typedef struct gemm_bundle {
    float *out[48];
    int64_t len[48];
    int n;
} gemm_bundle;

static float *bundle_add(gemm_bundle *bd, int64_t len)
{
    bd->len[bd->n] = len;
    return bd->out[bd->n++] = fa(len);
}

static void bundle_run(pg_ctx *c, gemm_bundle *bd)
{
    rng r = {777};
    *bd = (gemm_bundle){{0}, {0}, 0};
    int64_t n = 64, in = 256, out = 192; /* 3 M multiply-adds: several tasks on 2 or more threads */
    float *x = fa(n * in), *w = fa(out * in), *b = fa(out), *dy = fa(n * out);
    fill(&r, x, n * in, -1, 1), fill(&r, w, out * in, -0.1, 0.1), fill(&r, b, out, -1, 1);
    fill(&r, dy, n * out, -1, 1);
    pg_linear_fwd(c, n, in, out, x, w, b, bundle_add(bd, n * out));
    pg_linear_bwd_in(c, n, in, out, dy, w, bundle_add(bd, n * in));
    float *dw = bundle_add(bd, out * in), *db = bundle_add(bd, out);
    pg_linear_bwd_w(c, n, in, out, x, dy, dw, db);
    int64_t nl = 2100, il = 40, ol = 48; /* K = 2100 rows: two chunks of k */
    float *xl = fa(nl * il), *dyl = fa(nl * ol);
    fill(&r, xl, nl * il, -1, 1), fill(&r, dyl, nl * ol, -1, 1);
    pg_linear_bwd_w(c, nl, il, ol, xl, dyl, bundle_add(bd, ol * il), bundle_add(bd, ol));
    attn_case t;
    int64_t ar = 2, T = 48, d = 64, h = 4, an = ar * T;
    attn_alloc(&t, c, ar, T, d, h, 1, &r);
    attn_obj(&t);
    memcpy(bundle_add(bd, an * d), t.y, (size_t)(an * d) * 4);
    float *dctx = fa(an * d), *dqkv = bundle_add(bd, an * 3 * d), *dx = bundle_add(bd, an * d);
    pg_attention_bwd_in(c, ar, T, d, h, 1, t.wqkv, t.wo, t.qkv, t.att, t.ctx, t.p, dctx, dqkv, dx);
    pg_attention_bwd_w(c, ar, T, d, t.x, t.ctx, t.p, dqkv, bundle_add(bd, 3 * d * d), bundle_add(bd, 3 * d),
                       bundle_add(bd, d * d), bundle_add(bd, d));
    attn_free(&t);
    free(x), free(w), free(b), free(dy), free(xl), free(dyl), free(dctx);
    /* the row and elementwise ops, whose loops the portable kernel runs in
     * their baseline build (what a host without AVX2 runs): rows of 300
     * (chunks, blocks and a tail), the activations over all of them, swiglu,
     * the loss by rows */
    int64_t rn = 5, rd = 300;
    float *rx = fa(rn * rd), *rw = fa(rd), *rb = fa(rd), *rdy = fa(rn * rd);
    int32_t tg[5] = {0, 299, 17, 150, 3};
    fill(&r, rx, rn * rd, -3, 4), fill(&r, rw, rd, 0.5, 1.5), fill(&r, rb, rd, -1, 1), fill(&r, rdy, rn * rd, -1, 1);
    float *mean = bundle_add(bd, rn), *rstd = bundle_add(bd, rn), *rrstd = bundle_add(bd, rn);
    pg_layernorm_fwd(c, rn, rd, 1e-5f, rx, rw, rb, bundle_add(bd, rn * rd), mean, rstd);
    pg_layernorm_bwd_in(c, rn, rd, rx, rw, mean, rstd, rdy, bundle_add(bd, rn * rd));
    pg_layernorm_bwd_w(c, rn, rd, rx, mean, rstd, rdy, bundle_add(bd, rd), bundle_add(bd, rd));
    pg_rmsnorm_fwd(c, rn, rd, 1e-5f, rx, rw, bundle_add(bd, rn * rd), rrstd);
    pg_rmsnorm_bwd_in(c, rn, rd, rx, rw, rrstd, rdy, bundle_add(bd, rn * rd));
    pg_gelu_fwd(c, rn * rd, rx, bundle_add(bd, rn * rd));
    pg_gelu_bwd_in(c, rn * rd, rx, rdy, bundle_add(bd, rn * rd));
    pg_silu_fwd(c, rn * rd, rx, bundle_add(bd, rn * rd));
    pg_silu_bwd_in(c, rn * rd, rx, rdy, bundle_add(bd, rn * rd));
    pg_sigmoid_fwd(c, rn * rd, rx, bundle_add(bd, rn * rd));
    pg_sigmoid_bwd_in(c, rn * rd, rx, rdy, bundle_add(bd, rn * rd));
    pg_tanh_fwd(c, rn * rd, rx, bundle_add(bd, rn * rd));
    pg_tanh_bwd_in(c, rn * rd, rx, rdy, bundle_add(bd, rn * rd));
    float *sg = bundle_add(bd, rn * 60), *su = bundle_add(bd, rn * 60); /* swiglu: d = 5, h = 60 (a tail of 12) */
    pg_swiglu_fwd(c, rn, 5, 60, rx, rw, NULL, rb, NULL, sg, su, bundle_add(bd, rn * 60));
    pg_swiglu_bwd_in(c, rn, 5, 60, rw, rb, sg, su, rdy, bundle_add(bd, rn * 60), bundle_add(bd, rn * 60),
                     bundle_add(bd, rn * 5));
    double loss;
    pg_cross_entropy_fwd_bwd(c, rn, rd, rx, tg, 10.0, &loss, bundle_add(bd, rn * rd));
    memcpy(bundle_add(bd, 2), &loss, sizeof loss);
    free(rx), free(rw), free(rb), free(rdy);
}

static int bundle_same(const gemm_bundle *a, const gemm_bundle *b)
{
    int same = a->n == b->n;
    for (int i = 0; same && i < a->n; i++)
        same = a->len[i] == b->len[i] && memcmp(a->out[i], b->out[i], (size_t)a->len[i] * 4) == 0;
    return same;
}

static uint64_t bundle_digest(const gemm_bundle *bd) /* FNV-1a 64 over the bytes */
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < bd->n; i++) {
        const unsigned char *p = (const unsigned char *)bd->out[i];
        for (int64_t k = 0; k < bd->len[i] * 4; k++)
            h = (h ^ p[k]) * 0x100000001b3ull;
    }
    return h;
}

static void bundle_free(gemm_bundle *bd)
{
    for (int i = 0; i < bd->n; i++)
        free(bd->out[i]);
    bd->n = 0;
}

/* 1, 2, 3 and 4 threads give the same bytes; so does every kernel. */
static void test_threads_and_kernels(void)
{
    gemm_bundle ref, other;
    pg_ctx *c = ctx_with(1, NULL);
    bundle_run(c, &ref);
    const char *kname = pg_cpu_gemm_kernel(c->gemm);
    pg_backend_free(c);
    for (int threads = 2; threads <= 4; threads++) {
        c = ctx_with(threads, NULL);
        bundle_run(c, &other);
        OK(bundle_same(&ref, &other), "linear fwd/bwd_in/bwd_w, attention fwd/bwd and the row ops give the same "
           "bytes with %d threads as with 1 (kernel %s)", threads, kname);
        bundle_free(&other);
        pg_backend_free(c);
    }
    for (int k = 0; k < N_GEMM_KERNELS; k++) {
        if (!strcmp(gemm_kernels[k], kname))
            continue;
        if (!cpu_runs_kernel(gemm_kernels[k])) {
            OK(1, "# SKIP this CPU has no %s GEMM kernel", gemm_kernels[k]);
            continue;
        }
        c = ctx_with(2, gemm_kernels[k]);
        bundle_run(c, &other);
        OK(bundle_same(&ref, &other), "the %s GEMM kernel (2 threads) gives the same bytes as %s (1 thread), the row "
           "ops too (portable: their baseline loops): an AVX2-only or older host computes what this one does", gemm_kernels[k], kname);
        bundle_free(&other);
        pg_backend_free(c);
    }
    bundle_free(&ref);
}

/* One sample through a whole pre-LN GPT block and the tied logits (embed,
 * pos_embed, layernorm, causal attention, skip adds, a gelu MLP) alone gives
 * the bits it gets as sample 1 of three: what generating one row at a time,
 * equal to the batched forward, rests on. 3 threads, so the big products are
 * split among them too. */
typedef struct gpt_w {
    int64_t V, T, d, h;
    float *wte, *wpe, *ln_w, *ln_b, *wqkv, *bqkv, *wo, *bo, *w1, *b1, *w2, *b2;
} gpt_w;

static void gpt_logits(pg_ctx *c, const gpt_w *w, int64_t r, const int32_t *ids, float *logits)
{
    int64_t T = w->T, d = w->d, n = r * T;
    float *x = fa(n * d), *a = fa(n * d), *y = fa(n * d), *mean = fa(n), *rstd = fa(n);
    float *qkv = fa(n * 3 * d), *att = fa(r * w->h * T * T), *ctx = fa(n * d), *f = fa(n * 4 * d);
    pg_embed_fwd(c, n, w->V, d, ids, w->wte, x);
    pg_pos_embed_fwd(c, r, T, d, x, w->wpe, x);
    pg_layernorm_fwd(c, n, d, 1e-5f, x, w->ln_w, w->ln_b, a, mean, rstd);
    pg_attention_fwd(c, r, T, d, w->h, 1, a, w->wqkv, w->bqkv, w->wo, w->bo, qkv, att, ctx, y);
    pg_add_fwd(c, n * d, x, y, x);
    pg_layernorm_fwd(c, n, d, 1e-5f, x, w->ln_w, w->ln_b, a, mean, rstd);
    pg_linear_fwd(c, n, d, 4 * d, a, w->w1, w->b1, f);
    pg_gelu_fwd(c, n * 4 * d, f, f);
    pg_linear_fwd(c, n, 4 * d, d, f, w->w2, w->b2, y);
    pg_add_fwd(c, n * d, x, y, x);
    pg_layernorm_fwd(c, n, d, 1e-5f, x, w->ln_w, w->ln_b, a, mean, rstd);
    pg_logits_fwd(c, n, d, w->V, a, w->wte, logits);
    free(x), free(a), free(y), free(mean), free(rstd), free(qkv), free(att), free(ctx), free(f);
}

static void test_sample_of_batch(rng *g)
{
    gpt_w w = {100, 24, 64, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    int64_t V = w.V, T = w.T, d = w.d;
    float **ps[] = {&w.wte, &w.wpe, &w.ln_w, &w.ln_b, &w.wqkv, &w.bqkv, &w.wo, &w.bo, &w.w1, &w.b1, &w.w2, &w.b2};
    int64_t ns[] = {V * d, T * d, d, d, 3 * d * d, 3 * d, d * d, d, 4 * d * d, 4 * d, 4 * d * d, d};
    for (int i = 0; i < 12; i++) {
        *ps[i] = fa(ns[i]);
        fill(g, *ps[i], ns[i], -0.3, 0.3);
    }
    int32_t ids[3 * 24];
    for (int i = 0; i < 3 * 24; i++)
        ids[i] = (int32_t)(rng_unit(g) * (double)V);
    pg_ctx *c = ctx_with(3, NULL);
    float *l3 = fa(3 * T * V), *l1 = fa(T * V);
    gpt_logits(c, &w, 3, ids, l3);
    gpt_logits(c, &w, 1, ids + T, l1);
    OK(memcmp(l1, l3 + T * V, (size_t)(T * V) * sizeof *l1) == 0,
       "a GPT block's logits for one sample alone equal them inside a batch of three, bitwise");
    pg_backend_free(c);
    for (int i = 0; i < 12; i++)
        free(*ps[i]);
    free(l3), free(l1);
}

/* ---- backend ------------------------------------------------------------------ */

static void test_backend(pg_ctx *c)
{
    OK(strcmp(pg_backend_name(), "cpu") == 0, "backend name is cpu");
    unsigned char *arena = pg_arena_create(c, 1000);
    int zero = arena != NULL && ((uintptr_t)arena % 256) == 0;
    for (int i = 0; zero && i < 1000; i++)
        zero &= arena[i] == 0;
    OK(zero, "arena is 256-byte aligned (as the plan's offsets) and zeroed");
    float src[3] = {1, 2, 3}, dst[3] = {0};
    pg_copy_to_dev(c, arena, src, sizeof src);
    pg_copy_to_host(c, dst, arena, sizeof dst);
    OK(memcmp(src, dst, sizeof src) == 0 && pg_sync(c) == 0, "copies to and from the backend round-trip");
    pg_arena_destroy(c, arena);
    capture cap;
    capture_begin(&cap);
    void *huge = pg_arena_create(c, SIZE_MAX / 2);
    const char *msg = capture_end(&cap);
    OK(huge == NULL && strstr(msg, "bytes"), "an arena too large fails with its size in bytes: %s", msg);
    pg_arena_destroy(c, huge);
}

/* `test_kernels digest`: only the hash of the bundle's bytes (with the
 * threads and kernel PIPE_CPU_GEMM picks), one line, for tests/kernels.t to
 * compare across kernels and OPENBLAS_CORETYPE settings. */
static int print_digest(void)
{
    pg_ctx *c = ctx_with(2, getenv("PIPE_CPU_GEMM"));
    if (!c)
        return 1;
    gemm_bundle bd;
    bundle_run(c, &bd);
    printf("%016llx %s\n", (unsigned long long)bundle_digest(&bd), pg_cpu_gemm_kernel(c->gemm));
    bundle_free(&bd);
    pg_backend_free(c);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* a sanitizer exit must not eat the TAP */
    if (argc > 1 && !strcmp(argv[1], "digest"))
        return print_digest();
    pg_ctx *c = pg_backend_init(1);
    if (!c)
        return 1;
    rng r = {12345};
    test_backend(c);
    test_linear(c, &r);
    test_gemm_formula(&r);
    test_wpack_linear(&r);
    test_wpack_writes(&r);
    test_linear_row_independence(&r);
    test_linear_act(&r);
    test_activations(c, &r);
    test_exp_and_gelu_range(c);
    test_gelu_builds(c, &r);
    test_swiglu(c, &r);
    test_swiglu_builds(c, &r);
    test_adamw_builds(c, &r);
    test_layernorm(c, &r);
    test_norm_lengths(c, &r);
    test_norm_rows_alone(c, &r);
    test_norm_add(c, &r);
    test_norm_builds(c, &r);
    test_batchnorm(c, &r);
    test_embed(c, &r);
    test_pos_embed(c, &r);
    test_logits(c, &r);
    test_attention(c, &r);
    test_attn_core(c, &r);
    test_threads_and_kernels();
    test_sample_of_batch(&r);
    test_dropout(c, &r);
    test_skips(c, &r);
    test_mse(c, &r);
    test_cross_entropy(c, &r);
    test_cross_entropy_lengths(c, &r);
    test_cross_entropy_former(c, &r);
    test_optimizers(c);
    test_init();
    pg_backend_free(c);
    return DONE();
}

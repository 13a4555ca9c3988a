/* tests/gpu/test_ops_gpu.cu — every pg_ops.h op of the CUDA backend on random
 * inputs against naive host references (double unless the CPU backend's
 * float formula is the contract, as for dropout and the optimizer steps, where
 * the GPU must match bit for bit), the += semantics of every _bwd_w, bitwise
 * reproducibility of the reductions run twice, and the error paths.
 *
 * usage: test_ops_gpu [GROUP...]   (no GROUP: every group, in order)
 *        test_ops_gpu --list       (the groups, one a line)
 * Each group starts from its own seed, so a group's inputs and results do not
 * depend on which groups ran before it; tests/gpu/run_gpu_tests.sh runs each
 * in its own process (a fault in one leaves the others' results, and a
 * poisoned context is not shared). TAP on stdout, line-buffered: what was
 * printed survives a crash. Tolerances are relative: max |got - ref| over
 * max |ref|.
 *
 * Links only the CUDA backend objects (build-cuda/cuda/), or the emulated
 * CUDA backend (build/emu/, tests/cuda_emu_ops.t). Needs a GPU and says "no GPU found"
 * (exit 1) without one. Host code only. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

extern "C" {
#include "pg_ops.h"
}
#include "../../runtime/cpu/cpu_kernels.h" /* the CPU's dropout hash, the reference */
#include "../../runtime/cuda/kernel_ref.h" /* host references of the CUDA fast paths */
#include "flash_refs.h"
#include "../tap.h"

/* Built with -DPG_TEST_ON_CPU (g++, linked with runtime/cpu) the same checks
 * run against the CPU backend, which shares the contract: that validates the
 * references and tolerances on machines without a GPU (tests/gpu_ops_on_cpu.t). */
#ifdef PG_TEST_ON_CPU
#define EXPECT_BACKEND "cpu"
static int device_count(const char **why)
{
    *why = "";
    return 1;
}
/* the CPU backend has the reference formulas only: no kernel paths to switch */
enum { PG_CUDA_K_COLSUM = 1, PG_CUDA_K_PAD = 2, PG_CUDA_K_SHADOW = 4, PG_CUDA_K_FLASH = 8, PG_CUDA_K_LT = 16,
       PG_CUDA_K_MSPLIT = 32, PG_CUDA_K_ALL = 63 };
#define ON_GPU 0
static void set_paths(pg_ctx *c, unsigned paths) { (void)c, (void)paths; }
static unsigned paths_on(const pg_ctx *c) { return (void)c, 0u; }
#else
#include <cuda_runtime.h>
#include "cuda_backend.h"
#define EXPECT_BACKEND "cuda"
#define ON_GPU 1
static void set_paths(pg_ctx *c, unsigned paths) { pg_cuda_set_kernel_paths(c, paths); }
static unsigned paths_on(const pg_ctx *c) { return pg_cuda_kernel_paths(c); }
static int device_count(const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    *why = e != cudaSuccess ? cudaGetErrorString(e) : "0 devices";
    return e == cudaSuccess ? n : 0;
}
#endif

/* The cross-entropy loss against the formula in double: the CUDA kernels take
 * exp in double (1e-10); the CPU backend takes it in float (runtime/cpu/loss.c,
 * pg_cpu_exp_blk: about 2 ulp a term, so a relative 1e-7 bounds the sum's
 * error; measured 2e-10). CE_VS_CPU: the CUDA loss against the CPU's. */
#define CE_LOSS_TOL(ref) (ON_GPU ? 1e-10 : 1e-7 * fabs(ref))
#define CE_VS_CPU 1e-7

typedef std::vector<float> fvec;
typedef std::vector<double> dvec;

/* ---- test state: one arena, bump-allocated ------------------------------- */

struct gpu {
    pg_ctx *c;
    char *arena;
    size_t used, size;
    uint64_t rng;
};

static gpu G;

static double unit(void) /* [0, 1) */
{
    G.rng = G.rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(G.rng >> 11) * (1.0 / 9007199254740992.0);
}

static fvec rnd(int64_t n, double lo = -1.0, double hi = 1.0)
{
    fvec v((size_t)n);
    for (auto &x : v)
        x = (float)(lo + (hi - lo) * unit());
    return v;
}

static void *dalloc(size_t bytes)
{
    size_t at = (G.used + 255) / 256 * 256;
    if (at + bytes > G.size) {
        fprintf(stderr, "test arena exhausted\n");
        exit(2);
    }
    G.used = at + bytes;
    return G.arena + at;
}

static float *up(const fvec &h)
{
    float *d = (float *)dalloc(h.size() * sizeof(float) + 4);
    if (pg_copy_to_dev(G.c, d, h.data(), h.size() * sizeof(float)))
        exit(2);
    return d;
}

static int32_t *up_ids(const std::vector<int32_t> &h)
{
    int32_t *d = (int32_t *)dalloc(h.size() * sizeof(int32_t) + 4);
    if (pg_copy_to_dev(G.c, d, h.data(), h.size() * sizeof(int32_t)))
        exit(2);
    return d;
}

static double *up_d(const dvec &h)
{
    double *d = (double *)dalloc(h.size() * sizeof(double) + 8);
    if (pg_copy_to_dev(G.c, d, h.data(), h.size() * sizeof(double)))
        exit(2);
    return d;
}

static float *dzeros(int64_t n) { return up(fvec((size_t)n, 0.0f)); }

static fvec down(const float *d, int64_t n)
{
    fvec h((size_t)n);
    if (pg_copy_to_host(G.c, h.data(), d, (size_t)n * sizeof(float)))
        exit(2);
    return h;
}

static dvec down_d(const double *d, int64_t n)
{
    dvec h((size_t)n);
    if (pg_copy_to_host(G.c, h.data(), d, (size_t)n * sizeof(double)))
        exit(2);
    return h;
}

/* max |got - ref| / max |ref| (relative to the reference's scale; NaN in got
 * is infinite, an all-zero reference needs got exactly zero). */
static double err(const fvec &got, const dvec &ref)
{
    double worst = 0.0, mag = 0.0;
    for (size_t i = 0; i < ref.size(); i++)
        mag = fmax(mag, fabs(ref[i]));
    for (size_t i = 0; i < ref.size(); i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= worst)) /* NaN counts as the worst */
            worst = isnan(d) ? INFINITY : d;
    }
    return worst == 0.0 ? 0.0 : mag > 0.0 ? worst / mag : INFINITY;
}

#define TOL 2e-5

static void close_to(const char *what, const fvec &got, const dvec &ref, double tol = TOL)
{
    double e = err(got, ref);
    OK(got.size() == ref.size() && e <= tol, "%s (err %.2e, tol %.0e)", what, e, tol);
}

static bool same_bits(const fvec &a, const fvec &b)
{
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

static dvec dv(const fvec &f) { return dvec(f.begin(), f.end()); }

/* ---- against the CPU backend ------------------------------------------------
 * The same program built for the CPU (tests/gpu_ops_on_cpu.t) with
 * PG_OPS_RECORD=FILE writes every output named by vs_cpu() to FILE; a CUDA
 * build (emulated: tests/cuda_emu_ops.t; on a GPU: run_gpu_tests.sh, with
 * the file the bundle carries) with PG_OPS_AGAINST=FILE compares the same
 * outputs, computed from the same inputs (each group draws its own, in the
 * same order on every backend), with the CPU backend's: bit for bit where
 * runtime/cuda/README.md promises the CPU's bits (tol < 0), else within the
 * relative tolerance tol. Without either variable nothing happens. */

#define VS_MAGIC "pipegen ops vs cpu 1\n"

struct vs_state {
    FILE *rec;
    std::vector<std::pair<std::string, std::vector<char>>> cpu;
    int loaded;
};
static vs_state VS;

static const std::vector<char> *vs_find(const char *name)
{
    const char *path = getenv("PG_OPS_AGAINST");
    if (!VS.loaded) {
        VS.loaded = 1;
        FILE *f = fopen(path, "rb");
        char magic[sizeof VS_MAGIC] = "";
        if (!f || fread(magic, 1, sizeof VS_MAGIC - 1, f) != sizeof VS_MAGIC - 1 || strcmp(magic, VS_MAGIC)) {
            fprintf(stderr, "test_ops_gpu: PG_OPS_AGAINST=%s: not a CPU record (%s)\n", path,
                    f ? "wrong magic" : strerror(errno));
            if (f)
                fclose(f);
            return NULL;
        }
        uint32_t nl = 0;
        uint64_t nb = 0;
        while (fread(&nl, 4, 1, f) == 1 && nl < 4096) {
            std::string n(nl, '\0');
            if (fread(&n[0], 1, nl, f) != nl || fread(&nb, 8, 1, f) != 1 || nb > ((uint64_t)1 << 32))
                break;
            std::vector<char> b((size_t)nb);
            if (nb && fread(b.data(), 1, (size_t)nb, f) != nb)
                break;
            VS.cpu.push_back({n, b});
        }
        fclose(f);
    }
    for (const auto &r : VS.cpu)
        if (r.first == name)
            return &r.second;
    return NULL;
}

/* data[n] (float or double) under `name`: recorded, or compared with the CPU's */
template <class T>
static void vs_cpu_any(const char *name, const std::vector<T> &v, double tol)
{
    const char *rec = getenv("PG_OPS_RECORD"), *against = getenv("PG_OPS_AGAINST");
    size_t bytes = v.size() * sizeof(T);
    if (rec && *rec) {
        if (!VS.rec && !(VS.rec = fopen(rec, "wb"))) {
            fprintf(stderr, "test_ops_gpu: PG_OPS_RECORD=%s: %s\n", rec, strerror(errno));
            exit(2);
        }
        if (ftell(VS.rec) == 0)
            fputs(VS_MAGIC, VS.rec);
        uint32_t nl = (uint32_t)strlen(name);
        uint64_t nb = bytes;
        fwrite(&nl, 4, 1, VS.rec);
        fwrite(name, 1, nl, VS.rec);
        fwrite(&nb, 8, 1, VS.rec);
        fwrite(v.data(), 1, bytes, VS.rec);
        fflush(VS.rec);
    }
    if (!against || !*against)
        return;
    const std::vector<char> *c = vs_find(name);
    if (!c || c->size() != bytes) {
        OK(0, "%s: the CPU backend's result is in %s (%s)", name, against, c ? "of another size" : "not found");
        return;
    }
    std::vector<T> cv(v.size());
    memcpy(cv.data(), c->data(), bytes);
    if (tol < 0) {
        size_t bad = 0;
        for (size_t i = 0; i < v.size(); i++)
            bad += memcmp(&v[i], &cv[i], sizeof(T)) != 0;
        OK(bad == 0, "%s: bit for bit the CPU backend's (%zu of %zu elements differ)", name, bad, v.size());
        return;
    }
    double worst = 0.0, mag = 0.0;
    for (size_t i = 0; i < v.size(); i++) {
        mag = fmax(mag, fabs((double)cv[i]));
        double d = fabs((double)v[i] - (double)cv[i]);
        if (!(d <= worst))
            worst = isnan(d) ? INFINITY : d;
    }
    double e = worst == 0.0 ? 0.0 : mag > 0.0 ? worst / mag : INFINITY;
    OK(e <= tol, "%s: within %.0e of the CPU backend's, relative (err %.2e)", name, tol, e);
}

#define BITWISE (-1.0)
static void vs_cpu(const char *name, const fvec &v, double tol = BITWISE) { vs_cpu_any(name, v, tol); }
static void vs_cpu_d(const char *name, const dvec &v, double tol = BITWISE) { vs_cpu_any(name, v, tol); }

/* ---- naive references ---------------------------------------------------- */

/* y[n,out] = x[n,in] w[out,in]^T (+ b) */
static dvec ref_linear(int64_t n, int64_t in, int64_t out, const dvec &x, const dvec &w, const dvec *b)
{
    dvec y((size_t)(n * out));
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < out; o++) {
            double s = b ? (*b)[o] : 0.0;
            for (int64_t k = 0; k < in; k++)
                s += x[i * in + k] * w[o * in + k];
            y[i * out + o] = s;
        }
    return y;
}

/* dx[n,in] = dy[n,out] w[out,in] */
static dvec ref_linear_bwd_in(int64_t n, int64_t in, int64_t out, const dvec &dy, const dvec &w)
{
    dvec dx((size_t)(n * in), 0.0);
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < out; o++)
            for (int64_t k = 0; k < in; k++)
                dx[i * in + k] += dy[i * out + o] * w[o * in + k];
    return dx;
}

/* dw0 + dy^T x */
static dvec ref_linear_bwd_w(int64_t n, int64_t in, int64_t out, const dvec &x, const dvec &dy, const dvec &dw0)
{
    dvec dw = dw0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < out; o++)
            for (int64_t k = 0; k < in; k++)
                dw[o * in + k] += dy[i * out + o] * x[i * in + k];
    return dw;
}

static dvec ref_colsum(int64_t n, int64_t m, const dvec &a, const dvec &acc0)
{
    dvec acc = acc0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++)
            acc[j] += a[i * m + j];
    return acc;
}

/* ---- tests --------------------------------------------------------------- */

static void test_memory(void)
{
    fvec a = rnd(1000), b = rnd(1000);
    float *da = up(a), *db = up(b);
    OK(pg_axpy_inplace(G.c, da, db, 1000) == 0, "axpy_inplace runs");
    dvec r(1000);
    for (int i = 0; i < 1000; i++)
        r[i] = (double)a[i] + b[i];
    close_to("axpy_inplace: y += x", down(da, 1000), r, 1e-7);
    vs_cpu("axpy_inplace", down(da, 1000));
    OK(pg_copy(G.c, db, da, 1000) == 0 && same_bits(down(db, 1000), down(da, 1000)), "copy");
    /* overlapping copies behave as memmove */
    fvec m = rnd(100);
    float *dm = up(m);
    OK(pg_copy(G.c, dm + 3, dm, 90) == 0, "overlapping copy forward runs");
    fvec got = down(dm, 100), want = m;
    memmove(want.data() + 3, m.data(), 90 * sizeof(float));
    OK(same_bits(got, want), "overlapping copy to a higher address is memmove");
    dm = up(m);
    OK(pg_copy(G.c, dm, dm + 7, 90) == 0, "overlapping copy backward runs");
    want = m;
    memmove(want.data(), m.data() + 7, 90 * sizeof(float));
    OK(same_bits(down(dm, 100), want), "overlapping copy to a lower address is memmove");
    OK(pg_zero(G.c, da, 1000) == 0 && err(down(da, 1000), dvec(1000, 0.0)) == 0.0, "zero");
    OK(pg_zero(G.c, da, -1) != 0, "zero rejects a negative count");
}

static void test_linear(void)
{
    const int64_t n = 37, in = 29, out = 45;
    fvec x = rnd(n * in), w = rnd(out * in), b = rnd(out), dy = rnd(n * out);
    float *dx_ = up(x), *dw_ = up(w), *db_ = up(b), *y = dzeros(n * out);
    dvec bd = dv(b);
    OK(pg_linear_fwd(G.c, n, in, out, dx_, dw_, db_, y) == 0, "linear_fwd runs");
    close_to("linear_fwd with bias", down(y, n * out), ref_linear(n, in, out, dv(x), dv(w), &bd));
    vs_cpu("linear_fwd (f32)", down(y, n * out), 1e-6);
    OK(pg_linear_fwd(G.c, n, in, out, dx_, dw_, NULL, y) == 0, "linear_fwd without bias runs");
    close_to("linear_fwd without bias", down(y, n * out), ref_linear(n, in, out, dv(x), dv(w), NULL));
    float *ddy = up(dy), *gx = dzeros(n * in);
    OK(pg_linear_bwd_in(G.c, n, in, out, ddy, dw_, gx) == 0, "linear_bwd_in runs");
    close_to("linear_bwd_in: dx = dy W", down(gx, n * in), ref_linear_bwd_in(n, in, out, dv(dy), dv(w)));
    vs_cpu("linear_bwd_in (f32)", down(gx, n * in), 1e-6);
    fvec gw0 = rnd(out * in), gb0 = rnd(out);
    float *gw = up(gw0), *gb = up(gb0);
    OK(pg_linear_bwd_w(G.c, n, in, out, dx_, ddy, gw, gb) == 0, "linear_bwd_w runs");
    close_to("linear_bwd_w: dW += dy^T x", down(gw, out * in), ref_linear_bwd_w(n, in, out, dv(x), dv(dy), dv(gw0)));
    vs_cpu("linear_bwd_w dW (f32)", down(gw, out * in), 1e-6);
    /* db: the column sums in row order in double, one float add (the CPU's
     * bits), or with the chunked column sums those of kernel_ref.h */
    fvec gbv = down(gb, out), want = gb0;
    int chunked = (paths_on(G.c) & PG_CUDA_K_COLSUM) != 0;
    pg_ref_colsum_acc_ch(n, out, chunked ? pg_colsum_chunk_rows(n) : n, dy.data(), want.data());
    OK(same_bits(gbv, want), "linear_bwd_w: db += column sums, bitwise %s", chunked ? "the chunked sums" : "the CPU's order");
    /* determinism: the same call twice from the same start gives the same bits */
    float *gw2 = up(gw0), *gb2 = up(gb0);
    pg_linear_bwd_w(G.c, n, in, out, dx_, ddy, gw2, gb2);
    OK(same_bits(down(gw, out * in), down(gw2, out * in)) && same_bits(gbv, down(gb2, out)),
       "linear_bwd_w is bitwise reproducible");
    OK(pg_linear_fwd(G.c, -1, in, out, dx_, dw_, NULL, y) != 0, "linear_fwd rejects a negative size");
    /* logits by a table are a bias-free linear */
    OK(pg_logits_fwd(G.c, n, in, out, dx_, dw_, y) == 0, "logits_fwd runs");
    close_to("logits_fwd = x table^T", down(y, n * out), ref_linear(n, in, out, dv(x), dv(w), NULL));
    OK(pg_logits_bwd_in(G.c, n, in, out, ddy, dw_, gx) == 0, "logits_bwd_in runs");
    close_to("logits_bwd_in", down(gx, n * in), ref_linear_bwd_in(n, in, out, dv(dy), dv(w)));
    gw = up(gw0);
    OK(pg_logits_bwd_w(G.c, n, in, out, dx_, ddy, gw) == 0, "logits_bwd_w runs");
    close_to("logits_bwd_w accumulates", down(gw, out * in), ref_linear_bwd_w(n, in, out, dv(x), dv(dy), dv(gw0)));
}

static void test_activations(void)
{
    const int64_t n = 5000;
    fvec x = rnd(n, -4, 4), dy = rnd(n);
    float *dx_ = up(x), *ddy = up(dy), *y = dzeros(n);
    dvec r(n), g(n);
    pg_relu_fwd(G.c, n, dx_, y);
    for (int64_t i = 0; i < n; i++)
        r[i] = x[i] > 0 ? x[i] : 0.0;
    close_to("relu_fwd", down(y, n), r, 0.0);
    vs_cpu("relu_fwd", down(y, n));
    pg_relu_bwd_in(G.c, n, dx_, ddy, y);
    for (int64_t i = 0; i < n; i++)
        r[i] = x[i] > 0 ? dy[i] : 0.0;
    close_to("relu_bwd_in", down(y, n), r, 0.0);
    vs_cpu("relu_bwd_in", down(y, n));
    const double k = sqrt(2.0 / M_PI), cc = 0.044715;
    pg_gelu_fwd(G.c, n, dx_, y);
    for (int64_t i = 0; i < n; i++) {
        double v = x[i], t = tanh(k * (v + cc * v * v * v));
        r[i] = 0.5 * v * (1 + t);
        g[i] = (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * cc * v * v)) * dy[i];
    }
    close_to("gelu_fwd (tanh form)", down(y, n), r, 1e-6);
    vs_cpu("gelu_fwd (device tanhf)", down(y, n), 1e-6);
    pg_gelu_bwd_in(G.c, n, dx_, ddy, y);
    close_to("gelu_bwd_in", down(y, n), g, 1e-5);
    vs_cpu("gelu_bwd_in (device tanhf)", down(y, n), 1e-6);
    OK(pg_relu_fwd(G.c, -5, dx_, y) != 0, "relu_fwd rejects a negative count");
}

/* Normalisation references over groups: layernorm normalises rows (stride 1
 * within a row), batchnorm normalises columns; `get(i, j)` indexes group i, element j. */
static void ref_norm(int64_t groups, int64_t len, double eps, const fvec &x, const fvec &w, const fvec &b,
                     const fvec &dy, int rows_are_groups, int64_t C, dvec &y, dvec &mean, dvec &rstd,
                     dvec &dx, dvec &dw, dvec &db)
{
    auto at = [&](int64_t gi, int64_t j) { return rows_are_groups ? gi * len + j : j * C + gi; };
    y.assign(x.size(), 0);
    dx.assign(x.size(), 0);
    mean.assign(groups, 0);
    rstd.assign(groups, 0);
    int64_t nw = rows_are_groups ? len : groups;
    dw.assign(nw, 0);
    db.assign(nw, 0);
    for (int64_t gi = 0; gi < groups; gi++) {
        double s = 0, ss = 0;
        for (int64_t j = 0; j < len; j++)
            s += x[at(gi, j)];
        double mu = s / len;
        for (int64_t j = 0; j < len; j++)
            ss += (x[at(gi, j)] - mu) * (x[at(gi, j)] - mu);
        double rs = 1.0 / sqrt(ss / len + eps);
        mean[gi] = mu;
        rstd[gi] = rs;
        double sg = 0, sgx = 0;
        for (int64_t j = 0; j < len; j++) {
            int64_t k = at(gi, j), wi = rows_are_groups ? j : gi;
            double xh = (x[k] - mu) * rs;
            y[k] = xh * w[wi] + b[wi];
            double gg = dy[k] * w[wi];
            sg += gg;
            sgx += gg * xh;
            dw[wi] += dy[k] * xh;
            db[wi] += dy[k];
        }
        for (int64_t j = 0; j < len; j++) {
            int64_t k = at(gi, j), wi = rows_are_groups ? j : gi;
            double xh = (x[k] - mu) * rs;
            dx[k] = rs * (dy[k] * w[wi] - sg / len - xh * sgx / len);
        }
    }
}

static void test_layernorm(void)
{
    const int64_t n = 19, d = 300;
    fvec x = rnd(n * d, -2, 3), w = rnd(d), b = rnd(d), dy = rnd(n * d);
    dvec y, mean, rstd, dx, dw, db;
    ref_norm(n, d, 1e-5, x, w, b, dy, 1, d, y, mean, rstd, dx, dw, db);
    float *X = up(x), *W = up(w), *B = up(b), *DY = up(dy), *Y = dzeros(n * d), *M = dzeros(n), *R = dzeros(n);
    OK(pg_layernorm_fwd(G.c, n, d, 1e-5f, X, W, B, Y, M, R) == 0, "layernorm_fwd runs");
    close_to("layernorm_fwd y", down(Y, n * d), y, 1e-5);
    close_to("layernorm_fwd mean", down(M, n), mean, 1e-6);
    close_to("layernorm_fwd rstd", down(R, n), rstd, 1e-5);
    vs_cpu("layernorm_fwd y (a tree of double sums)", down(Y, n * d), 1e-6);
    float *DX = dzeros(n * d);
    OK(pg_layernorm_bwd_in(G.c, n, d, X, W, M, R, DY, DX) == 0, "layernorm_bwd_in runs");
    close_to("layernorm_bwd_in", down(DX, n * d), dx, 1e-5);
    vs_cpu("layernorm_bwd_in (a tree of double sums)", down(DX, n * d), 1e-6);
    fvec dw0 = rnd(d), db0 = rnd(d);
    float *DW = up(dw0), *DB = up(db0);
    OK(pg_layernorm_bwd_w(G.c, n, d, X, M, R, DY, DW, DB) == 0, "layernorm_bwd_w runs");
    for (int64_t j = 0; j < d; j++) {
        dw[j] += dw0[j];
        db[j] += db0[j];
    }
    close_to("layernorm_bwd_w dw accumulates", down(DW, d), dw, 1e-5);
    close_to("layernorm_bwd_w db accumulates", down(DB, d), db, 1e-6);
    /* no affine: w = 1, b = 0 */
    fvec ones(d, 1.0f), zeros(d, 0.0f);
    ref_norm(n, d, 1e-5, x, ones, zeros, dy, 1, d, y, mean, rstd, dx, dw, db);
    pg_layernorm_fwd(G.c, n, d, 1e-5f, X, NULL, NULL, Y, M, R);
    close_to("layernorm_fwd without affine", down(Y, n * d), y, 1e-5);
    pg_layernorm_bwd_in(G.c, n, d, X, NULL, M, R, DY, DX);
    close_to("layernorm_bwd_in without affine", down(DX, n * d), dx, 1e-5);
    OK(pg_layernorm_fwd(G.c, n, 0, 1e-5f, X, W, B, Y, M, R) != 0, "layernorm_fwd rejects d = 0");
}

static void test_batchnorm(void)
{
    const int64_t n = 57, C = 70;
    fvec x = rnd(n * C, -1, 2), w = rnd(C), b = rnd(C), dy = rnd(n * C);
    dvec y, mean, rstd, dx, dw, db;
    ref_norm(C, n, 1e-5, x, w, b, dy, 0, C, y, mean, rstd, dx, dw, db);
    float *X = up(x), *W = up(w), *B = up(b), *DY = up(dy), *Y = dzeros(n * C), *M = dzeros(C), *R = dzeros(C);
    OK(pg_batchnorm_fwd(G.c, n, C, 1e-5f, X, W, B, Y, M, R) == 0, "batchnorm_fwd runs");
    close_to("batchnorm_fwd y", down(Y, n * C), y, 1e-5);
    close_to("batchnorm_fwd mean", down(M, C), mean, 1e-6);
    close_to("batchnorm_fwd rstd", down(R, C), rstd, 1e-5);
    vs_cpu("batchnorm_fwd mean", down(M, C));
    vs_cpu("batchnorm_fwd rstd", down(R, C));
    vs_cpu("batchnorm_fwd y", down(Y, n * C), 1e-6);
    float *DX = dzeros(n * C);
    OK(pg_batchnorm_bwd_in(G.c, n, C, X, W, M, R, DY, DX) == 0, "batchnorm_bwd_in runs");
    close_to("batchnorm_bwd_in", down(DX, n * C), dx, 1e-5);
    vs_cpu("batchnorm_bwd_in", down(DX, n * C), 1e-6);
    fvec dw0 = rnd(C), db0 = rnd(C);
    float *DW = up(dw0), *DB = up(db0);
    OK(pg_batchnorm_bwd_w(G.c, n, C, X, M, R, DY, DW, DB) == 0, "batchnorm_bwd_w runs");
    for (int64_t j = 0; j < C; j++) {
        dw[j] += dw0[j];
        db[j] += db0[j];
    }
    close_to("batchnorm_bwd_w dw accumulates", down(DW, C), dw, 1e-5);
    close_to("batchnorm_bwd_w db accumulates", down(DB, C), db, 1e-6);
    /* running stats: two micro-batches accumulated, then one update */
    double *S = up_d(dvec(C, 0.0)), *SS = up_d(dvec(C, 0.0));
    OK(pg_batchnorm_stats_acc(G.c, 20, C, X, S, SS) == 0 && pg_batchnorm_stats_acc(G.c, n - 20, C, X + 20 * C, S, SS) == 0,
       "batchnorm_stats_acc runs twice");
    fvec rm0 = rnd(C), rv0 = rnd(C, 0.5, 1.5);
    float *RM = up(rm0), *RV = up(rv0);
    OK(pg_batchnorm_running_update(G.c, n, C, 0.1f, S, SS, RM, RV) == 0, "batchnorm_running_update runs");
    dvec wm(C), wv(C);
    for (int64_t j = 0; j < C; j++) {
        double var = 0;
        for (int64_t i = 0; i < n; i++)
            var += (x[i * C + j] - mean[j]) * (x[i * C + j] - mean[j]);
        var /= (double)(n - 1);
        wm[j] = 0.9 * rm0[j] + 0.1 * mean[j];
        wv[j] = 0.9 * rv0[j] + 0.1 * var;
    }
    close_to("batchnorm running mean", down(RM, C), wm, 1e-6);
    close_to("batchnorm running var (unbiased)", down(RV, C), wv, 1e-5);
    vs_cpu("batchnorm_running_update mean", down(RM, C));
    vs_cpu("batchnorm_running_update var", down(RV, C));
    vs_cpu_d("batchnorm_stats_acc sum", down_d(S, C));
    vs_cpu_d("batchnorm_stats_acc sum of squares", down_d(SS, C));
    dvec sum = down_d(S, C);
    double e = 0;
    for (int64_t j = 0; j < C; j++) {
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            s += x[i * C + j];
        e = fmax(e, fabs(s - sum[j]));
    }
    OK(e < 1e-9, "batchnorm_stats_acc sums in double (err %.1e)", e);
    OK(pg_batchnorm_running_update(G.c, 1, C, 0.1f, S, SS, RM, RV) != 0, "running_update rejects a batch of 1");
    /* inference: normalised by the running statistics, which stay as they were */
    fvec rm1 = rnd(C), rv1 = rnd(C, 0.25, 2.0);
    float *RM1 = up(rm1), *RV1 = up(rv1), *YE = dzeros(n * C), *YN = dzeros(n * C);
    OK(pg_batchnorm_eval_fwd(G.c, n, C, 1e-5f, X, W, B, RM1, RV1, YE) == 0, "batchnorm_eval_fwd runs");
    OK(pg_batchnorm_eval_fwd(G.c, n, C, 1e-5f, X, NULL, NULL, RM1, RV1, YN) == 0, "batchnorm_eval_fwd runs without affine");
    dvec ye(n * C), yn(n * C);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < C; j++) {
            double v = ((double)x[i * C + j] - rm1[j]) / sqrt((double)rv1[j] + 1e-5);
            yn[i * C + j] = v;
            ye[i * C + j] = v * w[j] + b[j];
        }
    close_to("batchnorm_eval_fwd y", down(YE, n * C), ye, 1e-6);
    vs_cpu("batchnorm_eval_fwd y", down(YE, n * C), 1e-6);
    close_to("batchnorm_eval_fwd y without affine", down(YN, n * C), yn, 1e-6);
    fvec rm2 = down(RM1, C), rv2 = down(RV1, C);
    OK(rm2 == rm1 && rv2 == rv1, "batchnorm_eval_fwd leaves the running statistics alone");
    OK(pg_batchnorm_eval_fwd(G.c, 0, C, 1e-5f, X, W, B, RM1, RV1, YE) != 0, "batchnorm_eval_fwd rejects n = 0");
}

static void test_embed(void)
{
    const int64_t n = 300, V = 50, d = 33;
    std::vector<int32_t> ids(n);
    for (auto &v : ids)
        v = (int32_t)(unit() * 10) * 5; /* few distinct ids: many repeats */
    fvec table = rnd(V * d), dy = rnd(n * d), dt0 = rnd(V * d);
    int32_t *I = up_ids(ids);
    float *TB = up(table), *Y = dzeros(n * d), *DY = up(dy), *DT = up(dt0);
    OK(pg_embed_fwd(G.c, n, V, d, I, TB, Y) == 0, "embed_fwd runs");
    fvec y = down(Y, n * d);
    bool ok = true;
    for (int64_t i = 0; i < n; i++)
        ok = ok && memcmp(&y[i * d], &table[ids[i] * d], d * sizeof(float)) == 0;
    OK(ok, "embed_fwd gathers the rows");
    vs_cpu("embed_fwd", y);
    OK(pg_embed_bwd_w(G.c, n, V, d, I, DY, DT) == 0, "embed_bwd_w runs");
    fvec want = dt0; /* float adds in token order: the CPU's exact bits */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < d; j++)
            want[ids[i] * d + j] += dy[i * d + j];
    OK(same_bits(down(DT, V * d), want), "embed_bwd_w adds rows in token order (bitwise)");
    vs_cpu("embed_bwd_w", down(DT, V * d));
    std::vector<int32_t> bad = ids;
    bad[123] = (int32_t)V;
    int32_t *BI = up_ids(bad);
    OK(pg_embed_fwd(G.c, n, V, d, BI, TB, Y) != 0, "embed_fwd rejects id == vocab (error names row 123)");
    bad[123] = -1;
    BI = up_ids(bad);
    OK(pg_embed_bwd_w(G.c, n, V, d, BI, DY, DT) != 0, "embed_bwd_w rejects a negative id");
    /* position embedding */
    const int64_t r = 7, T = 11;
    fvec x = rnd(r * T * d), pt = rnd(T * d), pdy = rnd(r * T * d), pt0 = rnd(T * d);
    float *X = up(x), *PT = up(pt), *PY = dzeros(r * T * d), *PDY = up(pdy), *PG = up(pt0);
    OK(pg_pos_embed_fwd(G.c, r, T, d, X, PT, PY) == 0, "pos_embed_fwd runs");
    dvec ry(r * T * d), rg(T * d);
    for (int64_t i = 0; i < r * T * d; i++)
        ry[i] = (double)(x[i] + pt[i % (T * d)]);
    close_to("pos_embed_fwd adds the table", down(PY, r * T * d), ry, 0.0);
    vs_cpu("pos_embed_fwd", down(PY, r * T * d));
    OK(pg_pos_embed_bwd_w(G.c, r, T, d, PDY, PG) == 0, "pos_embed_bwd_w runs");
    for (int64_t k = 0; k < T * d; k++) {
        double s = 0;
        for (int64_t i = 0; i < r; i++)
            s += pdy[i * T * d + k];
        rg[k] = (double)(pt0[k] + (float)s);
    }
    close_to("pos_embed_bwd_w accumulates (bitwise)", down(PG, T * d), rg, 0.0);
    vs_cpu("pos_embed_bwd_w", down(PG, T * d));
}

/* Attention reference in double: qkv, att, ctx, y and the backward. */
struct attn_ref {
    dvec qkv, att, ctx, y, dctx, dqkv, dx;
};

static attn_ref ref_attention(int64_t r, int64_t T, int64_t d, int64_t h, int causal, const fvec &x,
                              const fvec &wqkv, const fvec &bqkv, const fvec &wo, const fvec &bo, const fvec &dy)
{
    attn_ref R;
    int64_t hd = d / h, d3 = 3 * d;
    double sc = 1.0 / sqrt((double)hd);
    dvec bq = dv(bqkv), bod = dv(bo);
    R.qkv = ref_linear(r * T, d, d3, dv(x), dv(wqkv), &bq);
    R.att.assign(r * h * T * T, 0.0);
    R.ctx.assign(r * T * d, 0.0);
    R.dqkv.assign(r * T * d3, 0.0);
    for (int64_t b = 0; b < r; b++)
        for (int64_t hh = 0; hh < h; hh++) {
            double *a = &R.att[(b * h + hh) * T * T];
            auto Q = [&](int64_t i, int64_t e) { return R.qkv[(b * T + i) * d3 + hh * hd + e]; };
            auto K = [&](int64_t i, int64_t e) { return R.qkv[(b * T + i) * d3 + d + hh * hd + e]; };
            auto Vv = [&](int64_t i, int64_t e) { return R.qkv[(b * T + i) * d3 + 2 * d + hh * hd + e]; };
            for (int64_t i = 0; i < T; i++) {
                int64_t len = causal ? i + 1 : T;
                double m = -INFINITY, s = 0;
                for (int64_t j = 0; j < len; j++) {
                    double v = 0;
                    for (int64_t e = 0; e < hd; e++)
                        v += Q(i, e) * K(j, e);
                    a[i * T + j] = v * sc;
                    m = fmax(m, v * sc);
                }
                for (int64_t j = 0; j < len; j++)
                    s += (a[i * T + j] = exp(a[i * T + j] - m));
                for (int64_t j = 0; j < len; j++)
                    a[i * T + j] /= s;
                for (int64_t e = 0; e < hd; e++) {
                    double cx = 0;
                    for (int64_t j = 0; j < len; j++)
                        cx += a[i * T + j] * Vv(j, e);
                    R.ctx[(b * T + i) * d + hh * hd + e] = cx;
                }
            }
        }
    R.y = ref_linear(r * T, d, d, R.ctx, dv(wo), &bod);
    R.dctx = ref_linear_bwd_in(r * T, d, d, dv(dy), dv(wo));
    for (int64_t b = 0; b < r; b++)
        for (int64_t hh = 0; hh < h; hh++) {
            const double *a = &R.att[(b * h + hh) * T * T];
            auto at = [&](int64_t i, int64_t e, int64_t part) { return (b * T + i) * d3 + part * d + hh * hd + e; };
            auto DC = [&](int64_t i, int64_t e) { return R.dctx[(b * T + i) * d + hh * hd + e]; };
            for (int64_t i = 0; i < T; i++) {
                int64_t len = causal ? i + 1 : T;
                dvec datt(len);
                double D = 0;
                for (int64_t j = 0; j < len; j++) {
                    double s = 0;
                    for (int64_t e = 0; e < hd; e++)
                        s += DC(i, e) * R.qkv[at(j, e, 2)];
                    datt[j] = s;
                    D += a[i * T + j] * s;
                }
                for (int64_t j = 0; j < len; j++) {
                    double ds = a[i * T + j] * (datt[j] - D) * sc;
                    for (int64_t e = 0; e < hd; e++) {
                        R.dqkv[at(i, e, 0)] += ds * R.qkv[at(j, e, 1)];
                        R.dqkv[at(j, e, 1)] += ds * R.qkv[at(i, e, 0)];
                        R.dqkv[at(j, e, 2)] += a[i * T + j] * DC(i, e);
                    }
                }
            }
        }
    R.dx = ref_linear_bwd_in(r * T, d, d3, R.dqkv, dv(wqkv));
    return R;
}

static void test_attention(int causal)
{
    const int64_t r = 3, T = 13, d = 24, h = 3, d3 = 3 * d;
    const char *mode = causal ? "causal" : "full";
    fvec x = rnd(r * T * d), wqkv = rnd(d3 * d, -0.5, 0.5), bqkv = rnd(d3), wo = rnd(d * d, -0.5, 0.5),
         bo = rnd(d), dy = rnd(r * T * d);
    attn_ref R = ref_attention(r, T, d, h, causal, x, wqkv, bqkv, wo, bo, dy);
    float *X = up(x), *WQ = up(wqkv), *BQ = up(bqkv), *WO = up(wo), *BO = up(bo), *DY = up(dy);
    float *QKV = dzeros(r * T * d3), *ATT = dzeros(r * h * T * T), *CTX = dzeros(r * T * d), *Y = dzeros(r * T * d);
    OK(pg_attention_fwd(G.c, r, T, d, h, causal, X, WQ, BQ, WO, BO, QKV, ATT, CTX, Y) == 0, "attention_fwd (%s) runs", mode);
    close_to("attention_fwd qkv", down(QKV, r * T * d3), R.qkv, 1e-5);
    close_to("attention_fwd att (softmax, masked)", down(ATT, r * h * T * T), R.att, 1e-5);
    close_to("attention_fwd ctx", down(CTX, r * T * d), R.ctx, 1e-5);
    close_to("attention_fwd y", down(Y, r * T * d), R.y, 1e-5);
    vs_cpu(causal ? "attention_fwd y (f32, causal)" : "attention_fwd y (f32, full)", down(Y, r * T * d), 1e-5);
    vs_cpu(causal ? "attention_fwd att (f32, causal)" : "attention_fwd att (f32, full)", down(ATT, r * h * T * T), 1e-5);
    float *DCTX = dzeros(r * T * d), *DQKV = dzeros(r * T * d3), *DX = dzeros(r * T * d);
    OK(pg_attention_bwd_in(G.c, r, T, d, h, causal, WQ, WO, QKV, ATT, CTX, DY, DCTX, DQKV, DX) == 0,
       "attention_bwd_in (%s) runs", mode);
    close_to("attention_bwd_in dctx", down(DCTX, r * T * d), R.dctx, 1e-5);
    close_to("attention_bwd_in dqkv", down(DQKV, r * T * d3), R.dqkv, 1e-5);
    close_to("attention_bwd_in dx", down(DX, r * T * d), R.dx, 1e-5);
    vs_cpu(causal ? "attention_bwd_in dx (f32, causal)" : "attention_bwd_in dx (f32, full)", down(DX, r * T * d), 1e-5);
    fvec dx1 = down(DX, r * T * d);
    pg_attention_bwd_in(G.c, r, T, d, h, causal, WQ, WO, QKV, ATT, CTX, DY, DCTX, DQKV, DX);
    OK(same_bits(dx1, down(DX, r * T * d)), "attention_bwd_in (%s) is bitwise reproducible", mode);
    /* a sample's bits do not depend on how many samples share the call */
    float *Y1 = dzeros(T * d);
    pg_attention_fwd(G.c, 1, T, d, h, causal, X + T * d, WQ, BQ, WO, BO, QKV, ATT, CTX, Y1);
    fvec yall = down(Y, r * T * d);
    fvec y1 = down(Y1, T * d);
    bool bitwise = memcmp(y1.data(), &yall[T * d], T * d * sizeof(float)) == 0;
    printf("# attention_fwd (%s): sample 1 alone is %sbitwise equal to its row in the batch\n", mode,
           bitwise ? "" : "NOT ");
    close_to("attention_fwd: sample 1 alone matches the reference", y1, dvec(&R.y[T * d], &R.y[2 * T * d]), 1e-5);
    fvec gwq0 = rnd(d3 * d), gbq0 = rnd(d3), gwo0 = rnd(d * d), gbo0 = rnd(d);
    float *GWQ = up(gwq0), *GBQ = up(gbq0), *GWO = up(gwo0), *GBO = up(gbo0);
    /* recompute the forward for the full batch (QKV/CTX were overwritten) */
    pg_attention_fwd(G.c, r, T, d, h, causal, X, WQ, BQ, WO, BO, QKV, ATT, CTX, Y);
    pg_attention_bwd_in(G.c, r, T, d, h, causal, WQ, WO, QKV, ATT, CTX, DY, DCTX, DQKV, DX);
    OK(pg_attention_bwd_w(G.c, r, T, d, X, CTX, DY, DQKV, GWQ, GBQ, GWO, GBO) == 0, "attention_bwd_w (%s) runs", mode);
    close_to("attention_bwd_w dWo", down(GWO, d * d), ref_linear_bwd_w(r * T, d, d, R.ctx, dv(dy), dv(gwo0)), 1e-5);
    close_to("attention_bwd_w dbo", down(GBO, d), ref_colsum(r * T, d, dv(dy), dv(gbo0)), 1e-5);
    close_to("attention_bwd_w dWqkv", down(GWQ, d3 * d), ref_linear_bwd_w(r * T, d, d3, dv(x), R.dqkv, dv(gwq0)), 1e-5);
    close_to("attention_bwd_w dbqkv", down(GBQ, d3), ref_colsum(r * T, d3, R.dqkv, dv(gbq0)), 1e-5);
    OK(pg_attention_fwd(G.c, r, T, 25, h, causal, X, WQ, BQ, WO, BO, QKV, ATT, CTX, Y) != 0,
       "attention_fwd rejects d not divisible by heads");
}

static void test_dropout(void)
{
    const int64_t rows = 9, per = 1000;
    const float p = 0.3f;
    const uint64_t seed = 12345;
    const int64_t first = 17;
    fvec x = rnd(rows * per);
    float *X = up(x), *Y = dzeros(rows * per);
    OK(pg_dropout_fwd(G.c, rows, per, p, seed, first, X, Y) == 0, "dropout_fwd runs");
    fvec want(rows * per);
    float scale = 1.0f / (1.0f - p);
    uint64_t key = pg_splitmix64(seed);
    int64_t kept = 0;
    for (int64_t i = 0; i < rows; i++) {
        uint64_t rk = pg_splitmix64(key + (uint64_t)(first + i));
        for (int64_t j = 0; j < per; j++) {
            float u = pg_unit24(pg_splitmix64(rk + (uint64_t)j));
            want[i * per + j] = u >= p ? x[i * per + j] * scale : 0.0f;
            kept += u >= p;
        }
    }
    OK(same_bits(down(Y, rows * per), want), "dropout_fwd equals the CPU's mask and scale bitwise");
    vs_cpu("dropout_fwd", down(Y, rows * per));
    OK(kept > 0.65 * rows * per && kept < 0.75 * rows * per, "dropout keeps about 1 - p (%lld of %lld)",
       (long long)kept, (long long)(rows * per));
    OK(pg_dropout_bwd_in(G.c, rows, per, p, seed, first, X, Y) == 0 && same_bits(down(Y, rows * per), want),
       "dropout_bwd_in applies the same mask");
    /* micro-batch split: rows 3.. with first_sample + 3 give the same values */
    float *Y2 = dzeros(rows * per);
    pg_dropout_fwd(G.c, rows - 3, per, p, seed, first + 3, X + 3 * per, Y2);
    OK(memcmp(down(Y2, (rows - 3) * per).data(), &want[3 * per], (rows - 3) * per * sizeof(float)) == 0,
       "dropout mask depends on the sample index, not the call");
    OK(pg_dropout_fwd(G.c, rows, per, 1.5f, seed, first, X, Y) != 0, "dropout rejects p > 1");
}

static void test_skip(void)
{
    const int64_t n = 31, a = 7, b = 12;
    fvec x = rnd(n * a), s = rnd(n * b);
    float *X = up(x), *S = up(s), *Y = dzeros(n * (a + b)), *DX = dzeros(n * a), *DS = dzeros(n * b);
    OK(pg_add_fwd(G.c, n * a, X, X, DX) == 0, "add_fwd runs");
    dvec r(n * a);
    for (int64_t i = 0; i < n * a; i++)
        r[i] = (double)(x[i] + x[i]);
    close_to("add_fwd", down(DX, n * a), r, 0.0);
    vs_cpu("add_fwd", down(DX, n * a));
    OK(pg_concat_fwd(G.c, n, a, b, X, S, Y) == 0, "concat_fwd runs");
    fvec y = down(Y, n * (a + b));
    bool ok = true;
    for (int64_t i = 0; i < n; i++)
        ok = ok && !memcmp(&y[i * (a + b)], &x[i * a], a * 4) && !memcmp(&y[i * (a + b) + a], &s[i * b], b * 4);
    OK(ok, "concat_fwd lays out [x, s] per row");
    vs_cpu("concat_fwd", y);
    OK(pg_concat_bwd(G.c, n, a, b, Y, DX, DS) == 0, "concat_bwd runs");
    OK(same_bits(down(DX, n * a), x) && same_bits(down(DS, n * b), s), "concat_bwd splits dy");
    OK(pg_concat_bwd(G.c, n, a, b, Y, NULL, DS) == 0, "concat_bwd accepts a NULL output");
}

static void test_losses(void)
{
    const int64_t n = 1000;
    fvec y = rnd(n), t = rnd(n);
    float *Y = up(y), *TT = up(t), *DY = dzeros(n);
    double loss = -1, denom = 250.0;
    OK(pg_mse_fwd_bwd(G.c, n, Y, TT, denom, &loss, DY) == 0, "mse runs");
    double s = 0;
    dvec g(n);
    for (int64_t i = 0; i < n; i++) {
        float diff = y[i] - t[i];
        s += (double)diff * diff;
        g[i] = (float)(2.0 / denom * diff);
    }
    OK(fabs(loss - s / denom) < 1e-12 * fmax(1.0, s), "mse loss (%.17g vs %.17g)", loss, s / denom);
    close_to("mse gradient (bitwise)", down(DY, n), g, 0.0);
    vs_cpu("mse gradient", down(DY, n));
    vs_cpu_d("mse loss (a tree of double sums)", dvec(1, loss), 1e-12);
    double loss2 = -1;
    pg_mse_fwd_bwd(G.c, n, Y, TT, denom, &loss2, DY);
    OK(memcmp(&loss, &loss2, sizeof loss) == 0, "mse loss is bitwise reproducible");

    const int64_t rows = 77, V = 1031;
    fvec lg = rnd(rows * V, -5, 5);
    std::vector<int32_t> tg(rows);
    for (auto &v : tg)
        v = (int32_t)(unit() * V);
    float *LG = up(lg), *DL = dzeros(rows * V);
    int32_t *TG = up_ids(tg);
    double ce = -1, dn = 2.0; /* gradients of order 1: the absolute tolerance bites */
    OK(pg_cross_entropy_fwd_bwd(G.c, rows, V, LG, TG, dn, &ce, DL) == 0, "cross_entropy runs");
    double tot = 0;
    dvec dl(rows * V);
    for (int64_t i = 0; i < rows; i++) {
        double m = -INFINITY, z = 0;
        for (int64_t j = 0; j < V; j++)
            m = fmax(m, lg[i * V + j]);
        for (int64_t j = 0; j < V; j++)
            z += exp(lg[i * V + j] - m);
        tot += log(z) - (lg[i * V + tg[i]] - m);
        for (int64_t j = 0; j < V; j++)
            dl[i * V + j] = (exp(lg[i * V + j] - m) / z - (j == tg[i])) / dn;
    }
    OK(fabs(ce - tot / dn) < CE_LOSS_TOL(tot / dn), "cross_entropy loss (%.17g vs %.17g)", ce, tot / dn);
    close_to("cross_entropy gradient", down(DL, rows * V), dl, 1e-6);
    vs_cpu("cross_entropy gradient (device exp)", down(DL, rows * V), 1e-6);
    vs_cpu_d("cross_entropy loss (device exp, a tree of sums)", dvec(1, ce), CE_VS_CPU);
    double ce2 = -1;
    pg_cross_entropy_fwd_bwd(G.c, rows, V, LG, TG, dn, &ce2, DL);
    OK(memcmp(&ce, &ce2, sizeof ce) == 0, "cross_entropy loss is bitwise reproducible");
    tg[40] = (int32_t)V;
    TG = up_ids(tg);
    OK(pg_cross_entropy_fwd_bwd(G.c, rows, V, LG, TG, dn, &ce, DL) != 0, "cross_entropy rejects target == V");
}

/* ---- Llama's layers: rmsnorm, swiglu, the attention core, cross_entropy(ignore) ---- */

static void test_rmsnorm(void)
{
    const int64_t n = 37, d = 70;
    fvec x = rnd(n * d, -2, 2), w = rnd(d, 0.5, 1.5), dy = rnd(n * d), dw0 = rnd(d);
    dvec y(n * d), rs(n), dx(n * d), dw = dv(dw0);
    for (int64_t i = 0; i < n; i++) {
        double ss = 0, sgx = 0;
        for (int64_t j = 0; j < d; j++)
            ss += (double)x[i * d + j] * x[i * d + j];
        rs[i] = 1.0 / sqrt(ss / d + 1e-6);
        for (int64_t j = 0; j < d; j++) {
            y[i * d + j] = x[i * d + j] * rs[i] * w[j];
            sgx += dy[i * d + j] * w[j] * x[i * d + j] * rs[i];
            dw[j] += dy[i * d + j] * x[i * d + j] * rs[i];
        }
        for (int64_t j = 0; j < d; j++)
            dx[i * d + j] = rs[i] * (dy[i * d + j] * w[j] - x[i * d + j] * rs[i] * sgx / d);
    }
    float *X = up(x), *W = up(w), *DY = up(dy), *Y = dzeros(n * d), *R = dzeros(n), *DX = dzeros(n * d), *DW = up(dw0);
    OK(pg_rmsnorm_fwd(G.c, n, d, 1e-6f, X, W, Y, R) == 0, "rmsnorm_fwd runs");
    close_to("rmsnorm_fwd y", down(Y, n * d), y, 1e-5);
    close_to("rmsnorm_fwd rstd", down(R, n), rs, 1e-5);
    vs_cpu("rmsnorm_fwd y", down(Y, n * d), 1e-6);
    vs_cpu("rmsnorm_fwd rstd", down(R, n), 1e-6);
    OK(pg_rmsnorm_bwd_in(G.c, n, d, X, W, R, DY, DX) == 0, "rmsnorm_bwd_in runs");
    close_to("rmsnorm_bwd_in", down(DX, n * d), dx, 1e-5);
    vs_cpu("rmsnorm_bwd_in", down(DX, n * d), 1e-6);
    OK(pg_rmsnorm_bwd_w(G.c, n, d, X, R, DY, DW) == 0, "rmsnorm_bwd_w runs");
    close_to("rmsnorm_bwd_w accumulates", down(DW, d), dw, 1e-5);
    vs_cpu("rmsnorm_bwd_w", down(DW, d), 1e-6);
    OK(pg_rmsnorm_fwd(G.c, n, 0, 1e-6f, X, W, Y, R) != 0, "rmsnorm_fwd rejects d = 0");
}

static void test_swiglu(void)
{
    const int64_t n = 23, d = 16, h = 40;
    fvec x = rnd(n * d), wg = rnd(h * d, -0.5, 0.5), bg = rnd(h), wu = rnd(h * d, -0.5, 0.5), dy = rnd(n * h);
    dvec bgd = dv(bg), g = ref_linear(n, d, h, dv(x), dv(wg), &bgd), u = ref_linear(n, d, h, dv(x), dv(wu), NULL);
    dvec y(n * h), dg(n * h), du(n * h);
    for (int64_t i = 0; i < n * h; i++) {
        double s = 1.0 / (1.0 + exp(-g[i]));
        y[i] = g[i] * s * u[i];
        du[i] = dy[i] * g[i] * s;
        dg[i] = dy[i] * u[i] * s * (1.0 + g[i] * (1.0 - s));
    }
    dvec dx = ref_linear_bwd_in(n, d, h, dg, dv(wg)), dxu = ref_linear_bwd_in(n, d, h, du, dv(wu));
    for (int64_t i = 0; i < n * d; i++)
        dx[i] += dxu[i];
    float *X = up(x), *WG = up(wg), *BG = up(bg), *WU = up(wu), *DY = up(dy);
    float *Gb = dzeros(n * h), *Ub = dzeros(n * h), *Y = dzeros(n * h), *DG = dzeros(n * h), *DU = dzeros(n * h),
          *DX = dzeros(n * d);
    OK(pg_swiglu_fwd(G.c, n, d, h, X, WG, BG, WU, NULL, Gb, Ub, Y) == 0, "swiglu_fwd runs");
    close_to("swiglu_fwd y", down(Y, n * h), y, 1e-5);
    vs_cpu("swiglu_fwd y", down(Y, n * h), 1e-5);
    OK(pg_swiglu_bwd_in(G.c, n, d, h, WG, WU, Gb, Ub, DY, DG, DU, DX) == 0, "swiglu_bwd_in runs");
    close_to("swiglu_bwd_in dgate", down(DG, n * h), dg, 1e-5);
    close_to("swiglu_bwd_in dup", down(DU, n * h), du, 1e-5);
    close_to("swiglu_bwd_in dx", down(DX, n * d), dx, 1e-5);
    vs_cpu("swiglu_bwd_in dgate", down(DG, n * h), 1e-5);
    vs_cpu("swiglu_bwd_in dx", down(DX, n * d), 1e-5);
    fvec gw0 = rnd(h * d), gb0 = rnd(h), uw0 = rnd(h * d);
    float *GW = up(gw0), *GB = up(gb0), *UW = up(uw0);
    OK(pg_swiglu_bwd_w(G.c, n, d, h, X, DG, DU, GW, GB, UW, NULL) == 0, "swiglu_bwd_w runs");
    close_to("swiglu_bwd_w dWgate", down(GW, h * d), ref_linear_bwd_w(n, d, h, dv(x), dg, dv(gw0)), 1e-5);
    close_to("swiglu_bwd_w dbgate", down(GB, h), ref_colsum(n, h, dg, dv(gb0)), 1e-5);
    close_to("swiglu_bwd_w dWup", down(UW, h * d), ref_linear_bwd_w(n, d, h, dv(x), du, dv(uw0)), 1e-5);
}

/* The core in double: rope (cos and sin of the float angle, as the kernels), grouped
 * heads, softmax, dropout with pg_dropout_fwd's masks, and the backward. */
static void ref_attn_core(int64_t r, const pg_attn_dims &s, float p, uint64_t seed, const dvec &q0, const dvec &k0,
                          const dvec &v, const dvec &dctx, dvec &att, dvec &ctx, dvec &dq, dvec &dk, dvec &dv_)
{
    int64_t T = s.T, h = s.heads, hd = s.hd, half = hd / 2, d = h * hd, grp = h / s.kv_heads;
    dvec q = q0, k = k0;
    auto rot = [&](dvec &z, int64_t ld, int64_t nh, int inv) {
        for (int64_t row = 0; row < r * T; row++)
            for (int64_t j = 0; j < half; j++) {
                float ang = (float)(row % T) * (1.0f / (float)pow((double)s.rope_theta, (double)((float)(2 * j) / (float)hd)));
                double c = (float)cos((double)ang), sn = (float)sin((double)ang);
                for (int64_t hh = 0; hh < nh; hh++) {
                    double &a = z[row * ld + hh * hd + j], &b = z[row * ld + hh * hd + j + half];
                    double x1 = a, x2 = b;
                    a = inv ? x1 * c + x2 * sn : x1 * c - x2 * sn;
                    b = inv ? x2 * c - x1 * sn : x2 * c + x1 * sn;
                }
            }
    };
    rot(q, s.ldq, h, 0);
    rot(k, s.ldk, s.kv_heads, 0);
    double sc = 1.0 / sqrt((double)hd), keep = 1.0 / (1.0 - p);
    att.assign(r * h * T * T, 0.0);
    ctx.assign(r * T * d, 0.0);
    dq.assign(r * T * s.ldq, 0.0);
    dk.assign(r * T * s.ldk, 0.0);
    dv_.assign(r * T * s.ldv, 0.0);
    auto mask = [&](int64_t b, int64_t hh, int64_t i, int64_t j) {
        uint64_t rowkey = pg_splitmix64(pg_splitmix64(seed) + (uint64_t)b);
        return p == 0.0f || pg_unit24(pg_splitmix64(rowkey + (uint64_t)((hh * T + i) * T + j))) >= p ? keep : 0.0;
    };
    for (int64_t b = 0; b < r; b++)
        for (int64_t hh = 0; hh < h; hh++) {
            int64_t g = hh / grp;
            double *a = &att[(b * h + hh) * T * T];
            auto Q = [&](int64_t i, int64_t e) -> double & { return q[(b * T + i) * s.ldq + hh * hd + e]; };
            auto K = [&](int64_t i, int64_t e) -> double & { return k[(b * T + i) * s.ldk + g * hd + e]; };
            auto V = [&](int64_t i, int64_t e) { return v[(b * T + i) * s.ldv + g * hd + e]; };
            for (int64_t i = 0; i < T; i++) {
                int64_t len = s.causal ? i + 1 : T;
                double m = -INFINITY, z = 0, D = 0;
                for (int64_t j = 0; j < len; j++) {
                    double x = 0;
                    for (int64_t e = 0; e < hd; e++)
                        x += Q(i, e) * K(j, e);
                    m = fmax(m, a[i * T + j] = x * sc);
                }
                for (int64_t j = 0; j < len; j++)
                    z += (a[i * T + j] = exp(a[i * T + j] - m));
                for (int64_t j = 0; j < len; j++)
                    a[i * T + j] /= z;
                dvec dp(len);
                for (int64_t j = 0; j < len; j++) {
                    double pd = a[i * T + j] * mask(b, hh, i, j), gsum = 0;
                    for (int64_t e = 0; e < hd; e++) {
                        double dc = dctx[(b * T + i) * d + hh * hd + e];
                        ctx[(b * T + i) * d + hh * hd + e] += pd * V(j, e);
                        dv_[(b * T + j) * s.ldv + g * hd + e] += pd * dc;
                        gsum += dc * V(j, e);
                    }
                    dp[j] = gsum * mask(b, hh, i, j);
                    D += a[i * T + j] * dp[j];
                }
                for (int64_t j = 0; j < len; j++) {
                    double ds = a[i * T + j] * (dp[j] - D) * sc;
                    for (int64_t e = 0; e < hd; e++) {
                        dq[(b * T + i) * s.ldq + hh * hd + e] += ds * K(j, e);
                        dk[(b * T + j) * s.ldk + g * hd + e] += ds * Q(i, e);
                    }
                }
            }
        }
    rot(dq, s.ldq, h, 1);
    rot(dk, s.ldk, s.kv_heads, 1);
}

static void test_attn_core(float p)
{
    const int64_t r = 2, T = 9, h = 4, kv = 2, hd = 6, d = h * hd;
    pg_attn_dims s = {T, h, kv, hd, 1, 100.0f, d, kv * hd, kv * hd};
    uint64_t seed = 77;
    fvec q = rnd(r * T * d), k = rnd(r * T * kv * hd), v = rnd(r * T * kv * hd), dctx = rnd(r * T * d);
    dvec att, ctx, dq, dk, dvr;
    ref_attn_core(r, s, p, seed, dv(q), dv(k), dv(v), dv(dctx), att, ctx, dq, dk, dvr);
    float *Q = up(q), *K = up(k), *V = up(v), *DC = up(dctx), *ATT = dzeros(r * h * T * T), *CTX = dzeros(r * T * d);
    float *DQ = dzeros(r * T * d), *DK = dzeros(r * T * kv * hd), *DV = dzeros(r * T * kv * hd);
    OK(pg_attn_fwd(G.c, r, &s, p, seed, 0, Q, K, V, ATT, CTX) == 0, "attn_fwd (GQA 4/2, rope, dropout %g) runs", (double)p);
    close_to("attn_fwd att", down(ATT, r * h * T * T), att, 1e-5);
    close_to("attn_fwd ctx", down(CTX, r * T * d), ctx, 1e-5);
    vs_cpu(p > 0 ? "attn_fwd ctx (dropout)" : "attn_fwd ctx", down(CTX, r * T * d), 1e-5);
    OK(pg_attn_bwd(G.c, r, &s, p, seed, 0, Q, K, V, ATT, DC, DQ, DK, DV) == 0, "attn_bwd (dropout %g) runs", (double)p);
    close_to("attn_bwd dq (unrotated)", down(DQ, r * T * d), dq, 1e-5);
    close_to("attn_bwd dk (unrotated, summed over the group)", down(DK, r * T * kv * hd), dk, 1e-5);
    close_to("attn_bwd dv (summed over the group)", down(DV, r * T * kv * hd), dvr, 1e-5);
    vs_cpu(p > 0 ? "attn_bwd dq (dropout)" : "attn_bwd dq", down(DQ, r * T * d), 1e-5);
    vs_cpu(p > 0 ? "attn_bwd dk (dropout)" : "attn_bwd dk", down(DK, r * T * kv * hd), 1e-5);
    fvec dq1 = down(DQ, r * T * d);
    pg_attn_bwd(G.c, r, &s, p, seed, 0, Q, K, V, ATT, DC, DQ, DK, DV);
    OK(same_bits(dq1, down(DQ, r * T * d)), "attn_bwd (dropout %g) is bitwise reproducible", (double)p);
    pg_attn_dims bad = s;
    bad.kv_heads = 3;
    OK(pg_attn_fwd(G.c, r, &bad, p, seed, 0, Q, K, V, ATT, CTX) != 0, "attn_fwd rejects kv_heads not dividing heads");
}

static void test_cross_entropy_ignore(void)
{
    const int64_t rows = 53, V = 97;
    fvec lg = rnd(rows * V, -4, 4);
    std::vector<int32_t> tg(rows);
    int counted = 0;
    for (int64_t i = 0; i < rows; i++) {
        tg[i] = unit() < 0.3 ? -100 : (int32_t)(unit() * V);
        counted += tg[i] != -100;
    }
    double cnt = 2.0 * counted; /* the whole batch's count: this call is half of it */
    float *LG = up(lg), *DL = dzeros(rows * V);
    int32_t *TG = up_ids(tg);
    double *CNT = up_d(dvec(1, cnt)), ce = -1;
    OK(pg_cross_entropy_ignore_fwd_bwd(G.c, rows, V, LG, TG, -100, CNT, &ce, DL) == 0, "cross_entropy(ignore) runs");
    double tot = 0;
    dvec dl(rows * V, 0.0);
    for (int64_t i = 0; i < rows; i++) {
        if (tg[i] == -100)
            continue;
        double m = -INFINITY, z = 0;
        for (int64_t j = 0; j < V; j++)
            m = fmax(m, lg[i * V + j]);
        for (int64_t j = 0; j < V; j++)
            z += exp(lg[i * V + j] - m);
        tot += log(z) - (lg[i * V + tg[i]] - m);
        for (int64_t j = 0; j < V; j++)
            dl[i * V + j] = (exp(lg[i * V + j] - m) / z - (j == tg[i])) / cnt;
    }
    OK(fabs(ce - tot / cnt) < CE_LOSS_TOL(tot / cnt), "cross_entropy(ignore) loss over the counted rows (%.17g vs %.17g)",
       ce, tot / cnt);
    close_to("cross_entropy(ignore) gradient, zero on ignored rows", down(DL, rows * V), dl, 1e-6);
    vs_cpu_d("cross_entropy(ignore) loss", dvec(1, ce), CE_VS_CPU);
    vs_cpu("cross_entropy(ignore) gradient", down(DL, rows * V), 1e-6);
    double *ZERO = up_d(dvec(1, 0.0));
    OK(pg_cross_entropy_ignore_fwd_bwd(G.c, rows, V, LG, TG, -100, ZERO, &ce, DL) == 0 && ce == 0.0,
       "cross_entropy(ignore) with nothing counted: loss 0");
    close_to("...and every gradient 0", down(DL, rows * V), dvec(rows * V, 0.0), 0.0);
}

static void test_optim(void)
{
    const int64_t n = 3001;
    fvec g = rnd(n), w = rnd(n), m = rnd(n), v = rnd(n, 0, 1), buf = rnd(n);
    float *Gd = up(g);
    double ss = -1, want = 0;
    for (int64_t i = 0; i < n; i++)
        want += (double)g[i] * g[i];
    OK(pg_sumsq(G.c, n, Gd, &ss) == 0 && fabs(ss - want) < 1e-12 * want, "sumsq (%.17g vs %.17g)", ss, want);
    double ss2 = -1;
    pg_sumsq(G.c, n, Gd, &ss2);
    OK(memcmp(&ss, &ss2, sizeof ss) == 0, "sumsq is bitwise reproducible");
    float *Wd = up(w);
    pg_scale(G.c, Wd, 0.37f, n);
    fvec ws = w;
    for (auto &e : ws)
        e *= 0.37f;
    OK(same_bits(down(Wd, n), ws), "scale (bitwise)");
    vs_cpu("scale", down(Wd, n));
    vs_cpu_d("sumsq (a tree of double sums)", dvec(1, ss), 1e-12);
    /* SGD with momentum and weight decay, second step: the CPU's float formula */
    const float lr = 0.01f, mom = 0.9f, wd = 0.05f;
    Wd = up(w);
    float *Bd = up(buf);
    OK(pg_sgd_step(G.c, n, Wd, Gd, Bd, lr, mom, wd, 0) == 0, "sgd_step runs");
    fvec we = w, be = buf;
    for (int64_t i = 0; i < n; i++) {
        float d = g[i];
        d = d + wd * we[i];
        d = be[i] * mom + d;
        be[i] = d;
        we[i] = we[i] + (-lr) * d;
    }
    OK(same_bits(down(Wd, n), we) && same_bits(down(Bd, n), be), "sgd_step equals the CPU's formula bitwise");
    vs_cpu("sgd_step w", down(Wd, n));
    vs_cpu("sgd_step momentum buffer", down(Bd, n));
    /* AdamW step 3 */
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, awd = 0.1f;
    Wd = up(w);
    float *Md = up(m), *Vd = up(v);
    OK(pg_adamw_step(G.c, n, Wd, Gd, Md, Vd, lr, b1, b2, eps, awd, 3) == 0, "adamw_step runs");
    float decay = (float)(1.0 - (double)lr * (double)awd);
    float one_b1 = (float)(1.0 - (double)b1), one_b2 = (float)(1.0 - (double)b2);
    double bc1 = 1.0 - pow((double)b1, 3.0), bc2 = 1.0 - pow((double)b2, 3.0);
    float neg_step = (float)(-((double)lr / bc1)), bc2_sqrt = (float)sqrt(bc2);
    fvec wa = w, ma = m, va = v;
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float wi = wa[i] * decay;
        float mi = ma[i] * b1 + one_b1 * gi;
        float vi = va[i] * b2 + one_b2 * gi * gi;
        float den = sqrtf(vi) / bc2_sqrt + eps;
        wa[i] = wi + neg_step * mi / den;
        ma[i] = mi;
        va[i] = vi;
    }
    OK(same_bits(down(Wd, n), wa) && same_bits(down(Md, n), ma) && same_bits(down(Vd, n), va),
       "adamw_step equals the CPU's formula bitwise");
    vs_cpu("adamw_step w", down(Wd, n));
    vs_cpu("adamw_step m", down(Md, n));
    vs_cpu("adamw_step v", down(Vd, n));
    OK(pg_adamw_step(G.c, n, Wd, Gd, Md, Vd, lr, b1, b2, eps, awd, 0) != 0, "adamw_step rejects t = 0");
    OK(pg_sgd_step(G.c, n, Wd, Gd, NULL, lr, mom, wd, 0) != 0, "sgd_step with momentum needs a buffer");
}

static void test_init(void)
{
    fvec a(1000), b(1000);
    pg_init_param(a.data(), 1000, 3, 0.02, "wte", 7);
    pg_init_param(b.data(), 1000, 3, 0.02, "wte", 7);
    double s = 0;
    for (float e : a)
        s += (double)e * e;
    OK(same_bits(a, b) && sqrt(s / 1000) > 0.015 && sqrt(s / 1000) < 0.025, "init: normal, deterministic (std %.4f)",
       sqrt(s / 1000));
}

/* ---- the CUDA fast paths (runtime/cuda/README.md, "Kernel paths") ---------
 * Each fast path against its host reference (kernel_ref.h) and against the
 * reference path it replaced (PG_CUDA_K_* off). Built for the CPU the same
 * code checks the references themselves against the CPU backend's ops. */

static const char *path_word(int fast) { return fast ? "fast path" : "reference path"; }

/* The chunked column sums: bias, layernorm and batchnorm weight gradients. */
static void test_colsum_paths(void)
{
    /* the reference itself: one chunk is the row order, several are close to it */
    const int64_t ns[3] = {20, 1000, 9000}, m = 37; /* 9000 rows: the n/256-row chunks */
    for (int k = 0; k < 3; k++) {
        int64_t n = ns[k];
        fvec a = rnd(n * m), acc0 = rnd(m), chunk = acc0, rows = acc0;
        pg_ref_colsum_acc(n, m, a.data(), chunk.data());
        pg_ref_colsum_acc_ch(n, m, n, a.data(), rows.data());
        if (n <= 32)
            OK(same_bits(chunk, rows), "chunked column sums of %lld rows (one chunk) = the row order, bitwise", (long long)n);
        else
            close_to("chunked column sums = the row order, to rounding", chunk, dv(rows), 1e-6);
        OK(pg_colsum_nchunks(n) <= 256 && pg_colsum_nchunks(n) * pg_colsum_chunk_rows(n) >= n,
           "%lld rows: %lld chunks of %lld rows cover them, at most 256", (long long)n, (long long)pg_colsum_nchunks(n),
           (long long)pg_colsum_chunk_rows(n));
    }
    /* the ops under each path */
    const int64_t n = 1000, d = 300;
    fvec x = rnd(n * d, -2, 2), dy = rnd(n * d), w = rnd(d), b = rnd(d), dw0 = rnd(d), db0 = rnd(d);
    float *X = up(x), *DY = up(dy), *W = up(w), *B = up(b), *Y = dzeros(n * d), *M = dzeros(n), *R = dzeros(n);
    float *BM = dzeros(d), *BR = dzeros(d);
    for (int mode = 0; mode < 2; mode++) {
        set_paths(G.c, mode ? PG_CUDA_K_ALL : PG_CUDA_K_ALL & ~PG_CUDA_K_COLSUM);
        int fast = (paths_on(G.c) & PG_CUDA_K_COLSUM) != 0;
        int64_t ch = fast ? pg_colsum_chunk_rows(n) : n;
        /* bias gradient */
        float *GB = up(db0), *GW = up(fvec((size_t)(d * d), 0.0f));
        OK(pg_linear_bwd_w(G.c, n, d, d, X, DY, GW, GB) == 0, "linear_bwd_w runs (%s)", path_word(fast));
        fvec want = db0;
        pg_ref_colsum_acc_ch(n, d, ch, dy.data(), want.data());
        OK(same_bits(down(GB, d), want), "bias gradient of %lld rows, %s: bitwise the host reference", (long long)n,
           path_word(fast));
        /* layer norm: per-row statistics from the op's own forward */
        pg_layernorm_fwd(G.c, n, d, 1e-5f, X, W, B, Y, M, R);
        fvec mean = down(M, n), rstd = down(R, n), ww = dw0, wb = db0;
        float *DW = up(dw0), *DB = up(db0);
        OK(pg_layernorm_bwd_w(G.c, n, d, X, M, R, DY, DW, DB) == 0, "layernorm_bwd_w runs (%s)", path_word(fast));
        pg_ref_norm_bwd_w_ch(n, d, ch, 1, x.data(), mean.data(), rstd.data(), dy.data(), ww.data(), wb.data());
        OK(same_bits(down(DW, d), ww) && same_bits(down(DB, d), wb),
           "layernorm weight gradients, %s: bitwise the host reference", path_word(fast));
        /* batch norm: per-column statistics; dw only (db NULL) */
        pg_batchnorm_fwd(G.c, n, d, 1e-5f, X, W, B, Y, BM, BR);
        fvec bmean = down(BM, d), brstd = down(BR, d), bw = dw0;
        DW = up(dw0);
        OK(pg_batchnorm_bwd_w(G.c, n, d, X, BM, BR, DY, DW, NULL) == 0, "batchnorm_bwd_w runs (%s)", path_word(fast));
        pg_ref_norm_bwd_w_ch(n, d, ch, 0, x.data(), bmean.data(), brstd.data(), dy.data(), bw.data(), NULL);
        OK(same_bits(down(DW, d), bw), "batchnorm weight gradient, %s: bitwise the host reference", path_word(fast));
        if (mode == 0) { /* the reference path from inputs both backends share: the CPU's bits */
            vs_cpu("bias gradient (reference path)", down(GB, d));
            fvec hm = rnd(n, -0.5, 0.5), hr = rnd(n, 0.5, 2.0), cm = rnd(d, -0.5, 0.5), cr = rnd(d, 0.5, 2.0);
            float *HM = up(hm), *HR = up(hr), *CM = up(cm), *CR = up(cr);
            DW = up(dw0), DB = up(db0);
            pg_layernorm_bwd_w(G.c, n, d, X, HM, HR, DY, DW, DB);
            vs_cpu("layernorm_bwd_w dw (reference path)", down(DW, d));
            vs_cpu("layernorm_bwd_w db (reference path)", down(DB, d));
            DW = up(dw0), DB = up(db0);
            pg_batchnorm_bwd_w(G.c, n, d, X, CM, CR, DY, DW, DB);
            vs_cpu("batchnorm_bwd_w dw (reference path)", down(DW, d));
            vs_cpu("batchnorm_bwd_w db (reference path)", down(DB, d));
        }
    }
    set_paths(G.c, PG_CUDA_K_ALL);
}

static uint16_t bf16_bits(float f)
{
    float r = pg_ref_bf16(f);
    uint32_t u;
    memcpy(&u, &r, 4);
    return (uint16_t)(u >> 16);
}

/* bf16 shadow weights: kept equal to bf16(w) by every writer of w, and what
 * the bf16 GEMMs read. The CPU plans them but leaves them alone. */
static void test_shadow(void)
{
    const int64_t n = 40, in = 64, out = 48, cnt = out * in;
    fvec x = rnd(n * in), w = rnd(cnt, -0.5, 0.5);
    float *X = up(x), *W = up(w), *Y = dzeros(n * out), *Y2 = dzeros(n * out);
    uint16_t *S = (uint16_t *)dalloc((size_t)cnt * 2);
    auto shadow_is = [&](const fvec &wv) {
        std::vector<uint16_t> h((size_t)cnt);
        if (pg_copy_to_host(G.c, h.data(), S, (size_t)cnt * 2))
            exit(2);
        for (int64_t i = 0; i < cnt; i++)
            if (h[(size_t)i] != (ON_GPU ? bf16_bits(wv[(size_t)i]) : 0))
                return false;
        return true;
    };
    const char *kept = ON_GPU ? "holds bf16(w)" : "is left alone (CPU)";
    OK(pg_shadow_register(G.c, W, cnt, S) == 0, "shadow_register runs");
    OK(shadow_is(w), "a registered shadow %s", kept);
    pg_backend_set_precision(G.c, 1);
    set_paths(G.c, PG_CUDA_K_ALL);
    pg_linear_fwd(G.c, n, in, out, X, W, NULL, Y);
    set_paths(G.c, PG_CUDA_K_ALL & ~PG_CUDA_K_SHADOW);
    pg_linear_fwd(G.c, n, in, out, X, W, NULL, Y2);
    close_to("bf16 linear_fwd reading the shadow = rounding the weight again", down(Y, n * out), dv(down(Y2, n * out)), 1e-6);
    set_paths(G.c, PG_CUDA_K_ALL);
    fvec g = rnd(cnt);
    float *Gd = up(g), *Md = dzeros(cnt), *Vd = dzeros(cnt), *Bd = dzeros(cnt);
    OK(pg_adamw_step(G.c, cnt, W, Gd, Md, Vd, 0.05f, 0.9f, 0.999f, 1e-8f, 0.1f, 1) == 0 && shadow_is(down(W, cnt)),
       "after adamw_step the shadow %s", kept);
    OK(pg_sgd_step(G.c, cnt, W, Gd, Bd, 0.05f, 0.9f, 0.0f, 1) == 0 && shadow_is(down(W, cnt)),
       "after sgd_step the shadow %s", kept);
    fvec w2 = rnd(cnt, -0.5, 0.5);
    OK(pg_copy_to_dev(G.c, W, w2.data(), (size_t)cnt * 4) == 0 && shadow_is(w2),
       "after a host copy into w (init, --load, --resume) the shadow %s", kept);
    fvec w3 = rnd(cnt, -0.5, 0.5);
    float *W3 = up(w3);
    OK(pg_copy(G.c, W, W3, cnt) == 0 && pg_param_written(G.c, W, cnt) == 0 && shadow_is(w3),
       "after pg_param_written (a tied weight received) the shadow %s", kept);
    if (ON_GPU) { /* spoil the shadow behind the runtime's back: the GEMM must see it */
        std::vector<uint16_t> ones((size_t)cnt, 0x3f80); /* bf16 1.0 */
        pg_copy_to_dev(G.c, S, ones.data(), (size_t)cnt * 2);
        pg_linear_fwd(G.c, n, in, out, X, W, NULL, Y);
        set_paths(G.c, PG_CUDA_K_ALL & ~PG_CUDA_K_SHADOW);
        pg_linear_fwd(G.c, n, in, out, X, W, NULL, Y2);
        set_paths(G.c, PG_CUDA_K_ALL);
        OK(err(down(Y, n * out), dv(down(Y2, n * out))) > 1e-2, "the bf16 GEMM reads the shadow (a spoiled one shows)");
        pg_param_written(G.c, W, cnt);
        OK(shadow_is(w3), "pg_param_written repairs it");
        OK(pg_shadow_register(G.c, W, cnt, S) != 0, "a weight has one shadow only");
        OK(pg_shadow_register(G.c, X, n * in, (char *)S + 2) != 0, "a shadow must be 16-byte aligned");
    }
    pg_backend_set_precision(G.c, 0);
    OK(pg_shadow_register(G.c, W, -1, S) != 0, "shadow_register rejects a negative count");
}

/* bf16 GEMMs whose operand has a leading dimension that is not a multiple of
 * 8 (the logits' vocabulary): padded copies and plain ones give the same
 * products; both close to the exact ones. The forward, with the vocabulary as
 * m, split at m & ~7 (msplit) and in one call: the same products. */
static void test_pad(void)
{
    const int64_t n = 37, d = 24, V = 1031;
    fvec x = rnd(n * d), t = rnd(V * d, -0.5, 0.5), dy = rnd(n * V), gt0 = rnd(V * d);
    float *X = up(x), *TB = up(t), *DY = up(dy), *DX = dzeros(n * d), *DX2 = dzeros(n * d);
    float *GT = up(gt0), *GT2 = up(gt0), *Y = dzeros(n * V);
    pg_backend_set_precision(G.c, 1);
    set_paths(G.c, PG_CUDA_K_ALL);
    OK(pg_logits_fwd(G.c, n, d, V, X, TB, Y) == 0, "bf16 logits forward with V = %lld runs", (long long)V);
    close_to("bf16 logits_fwd = exact, to bf16 rounding", down(Y, n * V), ref_linear(n, d, V, dv(x), dv(t), NULL), 2e-2);
    float *Y2 = dzeros(n * V);
    set_paths(G.c, PG_CUDA_K_ALL & ~PG_CUDA_K_MSPLIT);
    OK(pg_logits_fwd(G.c, n, d, V, X, TB, Y2) == 0, "bf16 logits forward with V = %lld, m not split, runs", (long long)V);
    set_paths(G.c, PG_CUDA_K_ALL);
    close_to("bf16 logits_fwd: V split at V & ~7 = one call", down(Y, n * V), dv(down(Y2, n * V)), 1e-5);
    OK(pg_logits_bwd_in(G.c, n, d, V, DY, TB, DX) == 0 && pg_logits_bwd_w(G.c, n, d, V, X, DY, GT) == 0,
       "bf16 logits backward with V = %lld runs (padded operand copies)", (long long)V);
    set_paths(G.c, PG_CUDA_K_ALL & ~PG_CUDA_K_PAD);
    pg_logits_bwd_in(G.c, n, d, V, DY, TB, DX2);
    pg_logits_bwd_w(G.c, n, d, V, X, DY, GT2);
    set_paths(G.c, PG_CUDA_K_ALL);
    close_to("bf16 logits_bwd_in: padded = unpadded", down(DX, n * d), dv(down(DX2, n * d)), 1e-5);
    close_to("bf16 logits_bwd_w: padded = unpadded", down(GT, V * d), dv(down(GT2, V * d)), 1e-5);
    close_to("bf16 logits_bwd_in = exact, to bf16 rounding", down(DX, n * d), ref_linear_bwd_in(n, d, V, dv(dy), dv(t)), 2e-2);
    close_to("bf16 logits_bwd_w = exact, to bf16 rounding", down(GT, V * d),
             ref_linear_bwd_w(n, d, V, dv(x), dv(dy), dv(gt0)), 2e-2);
    pg_backend_set_precision(G.c, 0);
}

/* bf16 linear forward with its bias in the cuBLASLt epilogue, against the
 * bias broadcast + GEMM it replaced and the exact product; an unaligned width
 * (29: padded operand copies) too. */
static void test_linear_bias_lt(void)
{
    const int64_t n = 37, outs = 48, ins[2] = {64, 29};
    pg_backend_set_precision(G.c, 1);
    for (int k = 0; k < 2; k++) {
        int64_t in = ins[k], out = outs;
        fvec x = rnd(n * in), w = rnd(out * in, -0.5, 0.5), b = rnd(out);
        float *X = up(x), *W = up(w), *B = up(b), *Y = dzeros(n * out), *Y1 = dzeros(n * out), *Y2 = dzeros(n * out);
        dvec bd = dv(b);
        set_paths(G.c, PG_CUDA_K_ALL);
        OK(pg_linear_fwd(G.c, n, in, out, X, W, B, Y) == 0 && pg_linear_fwd(G.c, n, in, out, X, W, B, Y1) == 0,
           "bf16 linear_fwd with bias, in = %lld, runs (bias in the epilogue)", (long long)in);
        OK(same_bits(down(Y, n * out), down(Y1, n * out)), "bf16 linear_fwd with bias (in = %lld) is bitwise repeatable",
           (long long)in);
        close_to("bf16 linear_fwd with bias = exact, to bf16 rounding", down(Y, n * out),
                 ref_linear(n, in, out, dv(x), dv(w), &bd), 1e-2);
        set_paths(G.c, PG_CUDA_K_ALL & ~PG_CUDA_K_LT);
        pg_linear_fwd(G.c, n, in, out, X, W, B, Y2);
        close_to("bf16 linear_fwd: bias in the epilogue = bias broadcast first", down(Y, n * out),
                 dv(down(Y2, n * out)), 1e-5);
    }
    set_paths(G.c, PG_CUDA_K_ALL);
    pg_backend_set_precision(G.c, 0);
#ifndef PG_TEST_ON_CPU
    OK(pg_cuda_lt_shapes(G.c) >= 2, "cuBLASLt offered a bias-epilogue algorithm for both shapes (%d)",
       pg_cuda_lt_shapes(G.c));
#endif
}

/* The fused attention's reference (kernel_ref.h) on every machine: without
 * its roundings it must be the backend's own f32 attention (f32 precision:
 * unfused on both backends), with them close to it. */
static void test_flash_reference(int causal)
{
    const int64_t r = 2, T = 70, d = 48, h = 2, d3 = 3 * d; /* head dim 24: padded to 32 */
    const char *mode = causal ? "causal" : "full";
    fvec x = rnd(r * T * d), wqkv = rnd(d3 * d, -0.5, 0.5), bqkv = rnd(d3), wo = rnd(d * d, -0.5, 0.5), bo = rnd(d),
         dy = rnd(r * T * d);
    float *X = up(x), *WQ = up(wqkv), *BQ = up(bqkv), *WO = up(wo), *BO = up(bo), *DY = up(dy);
    float *QKV = dzeros(r * T * d3), *ATT = dzeros(r * h * T * T), *CTX = dzeros(r * T * d), *Y = dzeros(r * T * d);
    float *DCTX = dzeros(r * T * d), *DQKV = dzeros(r * T * d3), *DX = dzeros(r * T * d);
    pg_attention_fwd(G.c, r, T, d, h, causal, X, WQ, BQ, WO, BO, QKV, ATT, CTX, Y);
    pg_attention_bwd_in(G.c, r, T, d, h, causal, WQ, WO, QKV, ATT, CTX, DY, DCTX, DQKV, DX);
    fvec qkv = down(QKV, r * T * d3), ctx = down(CTX, r * T * d), dctx = down(DCTX, r * T * d), dqkv = down(DQKV, r * T * d3);
    for (int bf = 0; bf < 2; bf++) {
        fvec ctx_ref, lse_ref, dqkv_ref, D_ref;
        flash_refs(r, T, d, h, causal, bf, qkv, ctx, dctx, NULL, ctx_ref, lse_ref, dqkv_ref, D_ref);
        char what[160];
        snprintf(what, sizeof what, "fused attention reference (%s, %s) = the f32 attention op's ctx", mode,
                 bf ? "bf16 roundings" : "f32");
        close_to(what, ctx_ref, dv(ctx), bf ? 2e-2 : 1e-5);
        snprintf(what, sizeof what, "fused attention reference (%s, %s) backward = the f32 op's dq, dk, dv", mode,
                 bf ? "bf16 roundings" : "f32");
        close_to(what, dqkv_ref, dv(dqkv), bf ? 3e-2 : 1e-4);
    }
}

/* precision = bf16 attention: on the GPU the fused kernels (flash_attn.cu)
 * against their reference, repeatable bit for bit, close to the unfused bf16
 * path; on the CPU the f32 computation against the same reference without
 * roundings (what checks these tolerances on every machine). */
static void test_attention_bf16(int causal, int64_t hd)
{
    const int64_t r = 2, T = 70, h = 2, d = h * hd, d3 = 3 * d;
    char what[160];
    fvec x = rnd(r * T * d), wqkv = rnd(d3 * d, -0.3, 0.3), bqkv = rnd(d3), wo = rnd(d * d, -0.3, 0.3), bo = rnd(d),
         dy = rnd(r * T * d);
    float *X = up(x), *WQ = up(wqkv), *BQ = up(bqkv), *WO = up(wo), *BO = up(bo), *DY = up(dy);
    float *QKV = dzeros(r * T * d3), *ATT = dzeros(r * h * T * T), *CTX = dzeros(r * T * d), *Y = dzeros(r * T * d);
    float *DCTX = dzeros(r * T * d), *DQKV = dzeros(r * T * d3), *DX = dzeros(r * T * d);
    pg_backend_set_precision(G.c, 1);
    set_paths(G.c, PG_CUDA_K_ALL);
    int fused = ON_GPU && pg_flash_hdp(hd) != 0;
    const char *how = fused ? "fused" : ON_GPU ? "unfused" : "CPU f32";
    OK(pg_attention_fwd(G.c, r, T, d, h, causal, X, WQ, BQ, WO, BO, QKV, ATT, CTX, Y) == 0 &&
           pg_attention_bwd_in(G.c, r, T, d, h, causal, WQ, WO, QKV, ATT, CTX, DY, DCTX, DQKV, DX) == 0,
       "bf16 attention (%s, hd %lld, %s) runs", causal ? "causal" : "full", (long long)hd, how);
    fvec qkv = down(QKV, r * T * d3), ctx = down(CTX, r * T * d), dctx = down(DCTX, r * T * d);
    fvec dqkv = down(DQKV, r * T * d3), lse_got = down(ATT, r * h * T);
    fvec ctx_ref, lse_ref, dqkv_ref, D_ref;
    flash_refs(r, T, d, h, causal, ON_GPU, qkv, ctx, dctx, fused ? lse_got.data() : NULL, ctx_ref, lse_ref, dqkv_ref,
               D_ref);
    /* the fused kernels round where the reference rounds: only summation order differs */
    double tf = fused ? 2e-3 : ON_GPU ? 2e-2 : 1e-5, tb = fused ? 5e-3 : ON_GPU ? 3e-2 : 1e-4;
    snprintf(what, sizeof what, "bf16 attention (%s, hd %lld, %s): ctx = the fused attention reference",
             causal ? "causal" : "full", (long long)hd, how);
    close_to(what, ctx, dv(ctx_ref), tf);
    if (fused) {
        snprintf(what, sizeof what, "fused attention (%s, hd %lld) saves the rows' log-sum-exp in att",
                 causal ? "causal" : "full", (long long)hd);
        close_to(what, lse_got, dv(lse_ref), 1e-4);
    }
    snprintf(what, sizeof what, "bf16 attention (%s, hd %lld, %s): dq, dk, dv = the fused attention reference",
             causal ? "causal" : "full", (long long)hd, how);
    close_to(what, dqkv, dv(dqkv_ref), tb);
    /* bits repeat: forward and backward again */
    pg_attention_fwd(G.c, r, T, d, h, causal, X, WQ, BQ, WO, BO, QKV, ATT, CTX, Y);
    pg_attention_bwd_in(G.c, r, T, d, h, causal, WQ, WO, QKV, ATT, CTX, DY, DCTX, DQKV, DX);
    OK(same_bits(ctx, down(CTX, r * T * d)) && same_bits(dqkv, down(DQKV, r * T * d3)),
       "bf16 attention (%s, hd %lld, %s) is bitwise repeatable", causal ? "causal" : "full", (long long)hd, how);
    if (fused) { /* the unfused bf16 path on the same inputs */
        set_paths(G.c, PG_CUDA_K_ALL & ~PG_CUDA_K_FLASH);
        pg_attention_fwd(G.c, r, T, d, h, causal, X, WQ, BQ, WO, BO, QKV, ATT, CTX, Y);
        pg_attention_bwd_in(G.c, r, T, d, h, causal, WQ, WO, QKV, ATT, CTX, DY, DCTX, DQKV, DX);
        set_paths(G.c, PG_CUDA_K_ALL);
        snprintf(what, sizeof what, "fused attention (%s, hd %lld) = the unfused bf16 path: ctx",
                 causal ? "causal" : "full", (long long)hd);
        close_to(what, ctx, dv(down(CTX, r * T * d)), 2e-2);
        snprintf(what, sizeof what, "fused attention (%s, hd %lld) = the unfused bf16 path: dqkv",
                 causal ? "causal" : "full", (long long)hd);
        close_to(what, dqkv, dv(down(DQKV, r * T * d3)), 3e-2);
    }
    pg_backend_set_precision(G.c, 0);
}

#include "test_conv_ops.h" /* the ops of convolutional networks */

/* The backend's setup checks: the arena, the kernel paths' switch. */
static void test_setup(void)
{
    fvec z = down((float *)G.arena, 4096);
    OK(err(z, dvec(4096, 0.0)) == 0.0, "arena starts zeroed");
    /* its cudaMalloc fails on purpose, which compute-sanitizer reports as an
     * API error: under memcheck (PG_OPS_MEMCHECK=1, device_lib.sh) skipped,
     * so that every API error memcheck reports is a real one */
    if (getenv("PG_OPS_MEMCHECK"))
        printf("ok %d # SKIP an impossible arena: its cudaMalloc fails on purpose, an API error under compute-sanitizer"
               " (PG_OPS_MEMCHECK=1); checked in the op tests' own run\n", ++tap_n);
    else
        OK(pg_arena_create(G.c, (size_t)1 << 60) == NULL, "an impossible arena fails with a message");
#ifndef PG_TEST_ON_CPU
    OK(pg_cuda_kernel_paths(G.c) == PG_CUDA_K_ALL || getenv("PIPE_CUDA_KERNELS"),
       "every fast kernel path is on by default (mask %#x)", pg_cuda_kernel_paths(G.c));
    const char *saved = getenv("PIPE_CUDA_KERNELS");
    setenv("PIPE_CUDA_KERNELS", "colsum,flash", 1);
    pg_ctx *c2 = pg_backend_init(0);
    OK(c2 && pg_cuda_kernel_paths(c2) == (PG_CUDA_K_COLSUM | PG_CUDA_K_FLASH),
       "PIPE_CUDA_KERNELS=colsum,flash turns on just those two");
    pg_backend_free(c2);
    setenv("PIPE_CUDA_KERNELS", "colsum,bogus", 1);
    c2 = pg_backend_init(0);
    OK(c2 == NULL, "PIPE_CUDA_KERNELS with an unknown path fails with a message");
    pg_backend_free(c2);
    if (saved)
        setenv("PIPE_CUDA_KERNELS", saved, 1);
    else
        unsetenv("PIPE_CUDA_KERNELS");
#endif
    test_memory();
}

static void test_flash(void)
{
    test_flash_reference(1);
    test_flash_reference(0);
    test_attention_bf16(1, 64);
    test_attention_bf16(0, 64);
    test_attention_bf16(1, 24);
    test_attention_bf16(1, 96); /* head dim over 64: the unfused path */
}

static void test_norms(void)
{
    test_layernorm();
    test_batchnorm();
}

static void test_attention_f32(void)
{
    test_attention(1);
    test_attention(0);
}

static void test_misc(void)
{
    test_dropout();
    test_skip();
}

/* the Llama family's layers */
static void test_llama(void)
{
    test_rmsnorm();
    test_swiglu();
    test_attn_core(0.0f);
    test_attn_core(0.3f);
    test_cross_entropy_ignore();
}

/* the convolutions: cuDNN's (conv.cu); emulated, against the emulated cuDNN's
 * direct loops (tests/gpu/emu/cudnn_emu.cc) */
static void test_conv_group(void) { test_conv(); }

/* the other layers of convolutional networks: runtime/cuda's own kernels */
static void test_conv_others(void)
{
    test_pool();
    test_upsample(0, 2);
    test_upsample(1, 2);
    test_upsample(1, 3);
    test_dims();
    test_batchnorm2d();
    test_conv_activations();
}

static void test_optim_init(void)
{
    test_optim();
    test_init();
}

/* The groups, in the order a GPU session most needs them: the fast kernel
 * paths come right after the setup. */
static const struct {
    const char *name;
    void (*run)(void);
} groups[] = {
    {"setup", test_setup},   {"colsum", test_colsum_paths}, {"shadow", test_shadow},     {"pad", test_pad},
    {"lt", test_linear_bias_lt}, {"flash", test_flash},     {"linear", test_linear},     {"activations", test_activations},
    {"norms", test_norms},   {"embed", test_embed},         {"attention", test_attention_f32},
    {"dropout_skip", test_misc}, {"losses", test_losses},   {"llama", test_llama},       {"conv", test_conv_group},
    {"conv_layers", test_conv_others}, {"optim", test_optim_init},
};
#define NGROUPS (int)(sizeof groups / sizeof groups[0])

static int group_index(const char *name)
{
    for (int g = 0; g < NGROUPS; g++)
        if (!strcmp(groups[g].name, name))
            return g;
    return -1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* a crash keeps every line printed */
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (int g = 0; g < NGROUPS; g++)
            printf("%s\n", groups[g].name);
        return 0;
    }
    for (int a = 1; a < argc; a++)
        if (group_index(argv[a]) < 0) {
            fprintf(stderr, "test_ops_gpu: no group '%s' (test_ops_gpu --list names them)\n", argv[a]);
            return 2;
        }
    const char *why = "";
    if (device_count(&why) == 0) {
        fprintf(stderr, "test_ops_gpu: no GPU found (cudaGetDeviceCount: %s); run on a machine with a CUDA GPU\n", why);
        printf("1..0 # SKIP no GPU found\n");
        return 1;
    }
    OK(strcmp(pg_backend_name(), EXPECT_BACKEND) == 0, "backend name is %s", EXPECT_BACKEND);
    G.c = pg_backend_init(0);
    if (!G.c) {
        printf("not ok 1 - pg_backend_init\n1..1\n");
        return 1;
    }
    G.size = (size_t)64 << 20;
    G.arena = (char *)pg_arena_create(G.c, G.size);
    OK(G.arena != NULL, "arena of 64 MiB");
    if (!G.arena)
        return DONE();
    for (int g = 0; g < NGROUPS; g++) {
        int want = argc == 1;
        for (int a = 1; a < argc; a++)
            want |= group_index(argv[a]) == g;
        if (!want)
            continue;
        printf("# group %s\n", groups[g].name);
        /* each group its own inputs, whatever ran before (its buffers follow
         * the earlier groups' in the arena: a registered shadow stays) */
        G.rng = 42 + 1000003ull * (uint64_t)g;
        groups[g].run();
    }
    OK(pg_sync(G.c) == 0, "no asynchronous errors at the end");
    pg_arena_destroy(G.c, G.arena);
    pg_backend_free(G.c);
    return DONE();
}

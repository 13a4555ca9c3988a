/* tests/gpu/emu/cudnn_emu.cc — cuDNN's legacy convolution API on the CPU, for
 * the emulated CUDA runtime (tests/gpu/emu/README.md): the handle and its
 * stream, 4-d tensor, filter and convolution descriptors with cuDNN's
 * parameter semantics (NCHW or NHWC, pads, strides, dilations, groups,
 * convolution or cross-correlation, the math type), the _v7 heuristics'
 * records (status, workspace bytes, determinism flag, math type), the
 * workspace-size queries, and Forward / BackwardData / BackwardFilter with
 * alpha and beta (beta 0: the output is not read, as cuDNN documents).
 *
 * Checked as cuDNN checks: a descriptor value out of range, a filter whose
 * channels times the groups are not the input's, an output descriptor that is
 * not the convolution's output, a null operand, an unknown algorithm, a
 * workspace smaller than the algorithm's size or null with a non-zero size:
 * the status cuDNN returns (CUDNN_STATUS_BAD_PARAM; an algorithm that does not
 * support the geometry, CUDNN_STATUS_NOT_SUPPORTED), with a cuda-emu note
 * saying what. Each operand's whole span must lie in one device allocation
 * and the output apart from the inputs (else the process stops, as a GPU
 * would fault or race). The work is enqueued on the handle's stream, so a
 * capture records it and a graph replays it; the workspace is overwritten
 * when it runs (an algorithm's scratch keeps nothing for the caller).
 *
 * The products are direct loops over the definition of cross-correlation,
 * summed in double, never runtime/cpu's im2col code nor conv.cu's: they are
 * the check of conv.cu's descriptors and layouts. The heuristics are the
 * emulator's own (supported algorithms first, in a fixed order that puts the
 * non-deterministic ones of the two backward directions first, so a caller
 * that does not filter on the determinism flag gets one), and the workspace
 * bytes its own model of each algorithm's scratch: neither is a GPU's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cudnn.h"
#include "emu_rt.h"

struct cudnnContext {
    cudaStream_t stream;
};

struct cudnnTensorStruct {
    int set;
    cudnnTensorFormat_t format;
    cudnnDataType_t type;
    int n, c, h, w;
};

struct cudnnFilterStruct {
    int set;
    cudnnTensorFormat_t format;
    cudnnDataType_t type;
    int k, c, h, w;
};

struct cudnnConvolutionStruct {
    int set;
    int ph, pw, sh, sw, dh, dw;
    cudnnConvolutionMode_t mode;
    cudnnDataType_t type;
    int groups;
    cudnnMathType_t math;
};

namespace {

/* A 4-d operand in memory: its sizes and the element strides of its four
 * indices (n, c, h, w for a tensor; k, c, r, s for a filter). */
struct dims {
    int d[4];
    long long st[4];
    long long count() const { return (long long)d[0] * d[1] * d[2] * d[3]; }
    long long at(int a, int b, int c, int e) const { return a * st[0] + b * st[1] + c * st[2] + e * st[3]; }
};

dims layout(cudnnTensorFormat_t f, int a, int b, int c, int e)
{
    dims t = {{a, b, c, e}, {0, 0, 0, 0}};
    if (f == CUDNN_TENSOR_NCHW) {
        t.st[3] = 1, t.st[2] = e, t.st[1] = (long long)c * e, t.st[0] = (long long)b * c * e;
    } else { /* NHWC: the channels innermost */
        t.st[1] = 1, t.st[3] = b, t.st[2] = (long long)e * b, t.st[0] = (long long)c * e * b;
    }
    return t;
}

/* One convolution's whole geometry: X the input, F the filter, Y the output. */
struct geom {
    dims x, f, y;
    int ph, pw, sh, sw, dh, dw, groups, flip;
};

int out_size(int in, int pad, int k, int dil, int stride) { return (in + 2 * pad - ((k - 1) * dil + 1)) / stride + 1; }

/* The output dims of conv over xd with fd, or BAD_PARAM (noted). */
cudnnStatus_t output_dims(const char *call, const cudnnConvolutionStruct *cd, const cudnnTensorStruct *xd,
                          const cudnnFilterStruct *fd, int out[4])
{
    if (!cd || !xd || !fd || !cd->set || !xd->set || !fd->set) {
        pg_emu_rt::note("%s: a descriptor is null or was never set", call);
        return CUDNN_STATUS_BAD_PARAM;
    }
    if (xd->type != fd->type || xd->type != CUDNN_DATA_FLOAT || cd->type != CUDNN_DATA_FLOAT) {
        pg_emu_rt::note("%s: data types x %d, filter %d, compute %d: only CUDNN_DATA_FLOAT is emulated", call,
                        (int)xd->type, (int)fd->type, (int)cd->type);
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    if (fd->c * cd->groups != xd->c || fd->k % cd->groups) {
        pg_emu_rt::note("%s: the filter [%d, %d, %d, %d] with %d group(s) does not fit the input's %d channels (the "
                        "filter's channels times the groups must be the input's, its count a multiple of the groups)",
                        call, fd->k, fd->c, fd->h, fd->w, cd->groups, xd->c);
        return CUDNN_STATUS_BAD_PARAM;
    }
    int oh = out_size(xd->h, cd->ph, fd->h, cd->dh, cd->sh), ow = out_size(xd->w, cd->pw, fd->w, cd->dw, cd->sw);
    if (xd->h + 2 * cd->ph < (fd->h - 1) * cd->dh + 1 || xd->w + 2 * cd->pw < (fd->w - 1) * cd->dw + 1 || oh < 1 ||
        ow < 1) {
        pg_emu_rt::note("%s: the dilated %dx%d filter is larger than the padded %dx%d input", call, fd->h, fd->w,
                        xd->h + 2 * cd->ph, xd->w + 2 * cd->pw);
        return CUDNN_STATUS_BAD_PARAM;
    }
    out[0] = xd->n, out[1] = fd->k, out[2] = oh, out[3] = ow;
    return CUDNN_STATUS_SUCCESS;
}

/* The geometry of a call whose input is xd, filter fd and output yd. */
cudnnStatus_t resolve(const char *call, const cudnnTensorStruct *xd, const cudnnFilterStruct *fd,
                      const cudnnConvolutionStruct *cd, const cudnnTensorStruct *yd, geom *g)
{
    int o[4];
    cudnnStatus_t s = output_dims(call, cd, xd, fd, o);
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    if (!yd || !yd->set || yd->type != xd->type || yd->n != o[0] || yd->c != o[1] || yd->h != o[2] ||
        yd->w != o[3]) {
        pg_emu_rt::note("%s: the output descriptor is [%d, %d, %d, %d], the convolution of [%d, %d, %d, %d] gives "
                        "[%d, %d, %d, %d]", call, yd ? yd->n : 0, yd ? yd->c : 0, yd ? yd->h : 0, yd ? yd->w : 0,
                        xd->n, xd->c, xd->h, xd->w, o[0], o[1], o[2], o[3]);
        return CUDNN_STATUS_BAD_PARAM;
    }
    g->x = layout(xd->format, xd->n, xd->c, xd->h, xd->w);
    g->f = layout(fd->format, fd->k, fd->c, fd->h, fd->w);
    g->y = layout(yd->format, yd->n, yd->c, yd->h, yd->w);
    g->ph = cd->ph, g->pw = cd->pw, g->sh = cd->sh, g->sw = cd->sw, g->dh = cd->dh, g->dw = cd->dw;
    g->groups = cd->groups, g->flip = cd->mode == CUDNN_CONVOLUTION;
    return CUDNN_STATUS_SUCCESS;
}

/* Every term of the definition: y[n, k, oy, ox] += f[k, c, i, j] *
 * x[n, g * C/G + c, oy * sh - ph + i * dh, ox * sw - pw + j * dw] over the
 * filter's channels c of k's group g and the window (i, j) inside the image
 * (a convolution, not a correlation, reads the filter turned: kh-1-i, kw-1-j).
 * visit(xi, fi, yi) gets the three element offsets. */
template <class V> void each_term(const geom &g, V visit)
{
    int N = g.y.d[0], K = g.y.d[1], OH = g.y.d[2], OW = g.y.d[3];
    int Cg = g.f.d[1], KH = g.f.d[2], KW = g.f.d[3], H = g.x.d[2], W = g.x.d[3], Kg = K / g.groups;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++)
                    for (int c = 0; c < Cg; c++)
                        for (int i = 0; i < KH; i++)
                            for (int j = 0; j < KW; j++) {
                                int iy = oy * g.sh - g.ph + i * g.dh, ix = ox * g.sw - g.pw + j * g.dw;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                                    continue;
                                int fi = g.flip ? KH - 1 - i : i, fj = g.flip ? KW - 1 - j : j;
                                visit(g.x.at(n, k / Kg * Cg + c, iy, ix), g.f.at(k, c, fi, fj), g.y.at(n, k, oy, ox));
                            }
}

/* out = alpha acc + beta out, element by element (beta 0: out not read) */
void blend(float *out, const std::vector<double> &acc, float alpha, float beta)
{
    for (size_t i = 0; i < acc.size(); i++)
        out[i] = (float)((double)alpha * acc[i] + (beta != 0.0f ? (double)beta * out[i] : 0.0));
}

enum dir { FWD, DATA, FILTER };
const char *const dir_name[] = {"forward", "backward-data", "backward-filter"};
const int algo_count[] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};

/* Whether algorithm a of direction d runs geometry g (cuDNN's documented
 * limits: the FFT ones want unit strides and dilations, Winograd 3x3 (and the
 * non-fused one 5x5) at unit strides, DIRECT and the filter's WINOGRAD are not
 * implemented). */
cudnnStatus_t supports(dir d, int a, const geom &g)
{
    bool unit = g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1;
    int kh = g.f.d[2], kw = g.f.d[3];
    bool k3 = kh == 3 && kw == 3, k35 = k3 || (kh == 5 && kw == 5);
    bool ok = true;
    if (d == FWD)
        ok = a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT                ? false
             : a == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
                     a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING    ? unit
             : a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD            ? unit && k3
             : a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED   ? unit && k35
                                                                   : true;
    else if (d == DATA)
        ok = a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ? unit
             : a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD                                           ? unit && k3
             : a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED                                  ? unit && k35
                                                                                                       : true;
    else
        ok = a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD ? false
             : a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ? unit
             : a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED ? unit && k35
                                                                        : true;
    return ok ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
}

bool deterministic(dir d, int a)
{
    if (d == DATA)
        return a != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
    if (d == FILTER)
        return a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 && a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
    return true;
}

/* The emulator's model of algorithm a's scratch in bytes: an im2col-style
 * column matrix for the GEMM ones, an index table for the precomputed one, a
 * staging image for ALGO_1 of the data gradient, padded transforms for FFT
 * and Winograd; zero for the implicit ones. */
size_t workspace_of(dir d, int a, const geom &g)
{
    size_t cg = (size_t)g.f.d[1], kk = (size_t)g.f.d[2] * g.f.d[3], P = (size_t)g.y.d[2] * g.y.d[3];
    size_t ch = (size_t)g.x.d[1] + g.y.d[1], padded = (size_t)(g.x.d[2] + 2 * g.ph) * (g.x.d[3] + 2 * g.pw);
    size_t cols = 4 * cg * kk * P, fft = 8 * ch * padded, wino = 4 * ch * 16 * P;
    switch (d) {
    case FWD:
        switch (a) {
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return 4 * cg * kk + 256;
        case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return cols;
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return fft;
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return 8 * ch * 32 * 32;
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return wino;
        default: return 0;
        }
    case DATA:
        switch (a) {
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return 4 * (size_t)g.x.d[1] * g.x.d[2] * g.x.d[3];
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return fft;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return 8 * ch * 32 * 32;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED: return wino;
        default: return 0;
        }
    case FILTER:
        switch (a) {
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return cols;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: return 4 * (size_t)g.f.count();
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: return fft;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING: return 8 * ch * 32 * 32;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED: return wino;
        default: return 0;
        }
    }
    return 0;
}

/* The heuristic's order of each direction (supported ones are then moved first). */
const int order_fwd[] = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                         CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
                         CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING, CUDNN_CONVOLUTION_FWD_ALGO_FFT,
                         CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, CUDNN_CONVOLUTION_FWD_ALGO_DIRECT};
const int order_data[] = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING, CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD};
const int order_filter[] = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3,
                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT,
                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING,
                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED,
                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD};
const int *const order[] = {order_fwd, order_data, order_filter};

/* The records of direction d for g, into any of the three record types. */
template <class R, class A>
cudnnStatus_t heuristics(const char *call, dir d, const geom &g, cudnnMathType_t math, int requested, int *returned,
                         R *out)
{
    if (requested < 1 || !returned || !out) {
        pg_emu_rt::note("%s: requestedAlgoCount %d (at least 1), returnedAlgoCount and perfResults non-null", call,
                        requested);
        return CUDNN_STATUS_BAD_PARAM;
    }
    int n = 0;
    for (int pass = 0; pass < 2; pass++) /* the supported algorithms, then the others */
        for (int i = 0; i < algo_count[d] && n < requested; i++) {
            int a = order[d][i];
            cudnnStatus_t s = supports(d, a, g);
            if ((s == CUDNN_STATUS_SUCCESS) != (pass == 0))
                continue;
            R r;
            memset(&r, 0, sizeof r);
            r.algo = (A)a;
            r.status = s;
            r.time = -1.0f; /* heuristics time nothing */
            r.memory = s == CUDNN_STATUS_SUCCESS ? workspace_of(d, a, g) : 0;
            r.determinism = deterministic(d, a) ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
            r.mathType = math;
            out[n++] = r;
        }
    *returned = n;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t workspace_size(const char *call, dir d, int a, const geom &g, size_t *bytes)
{
    if (!bytes)
        return CUDNN_STATUS_BAD_PARAM;
    if (a < 0 || a >= algo_count[d]) {
        pg_emu_rt::note("%s: %d is no %s algorithm", call, a, dir_name[d]);
        return CUDNN_STATUS_BAD_PARAM;
    }
    if (supports(d, a, g) != CUDNN_STATUS_SUCCESS) {
        pg_emu_rt::note("%s: the %s algorithm %d does not support this geometry (strides %dx%d, dilations %dx%d, "
                        "filter %dx%d)", call, dir_name[d], a, g.sh, g.sw, g.dh, g.dw, g.f.d[2], g.f.d[3]);
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    *bytes = workspace_of(d, a, g);
    return CUDNN_STATUS_SUCCESS;
}

/* The span [p, p + bytes) must be device memory inside one allocation. */
void need_device(const char *call, const char *name, const void *p, size_t bytes)
{
    char why[400];
    int k = pg_emu_rt::classify(p, bytes, why, sizeof why);
    if (k < 0)
        pg_emu_rt::violation("%s: %s: %s (its descriptor's shape reaches beyond it)", call, name, why);
    if (k != pg_emu_rt::MEM_DEVICE)
        pg_emu_rt::violation("%s: %s at %p is not device memory", call, name, p);
}

void need_apart(const char *call, const char *in, const void *a, size_t na, const char *out, const void *b, size_t nb)
{
    const char *a0 = (const char *)a, *b0 = (const char *)b;
    if (a0 < b0 + nb && b0 < a0 + na)
        pg_emu_rt::violation("%s: the output %s overlaps the input %s: cuDNN's result is undefined then", call, out,
                             in);
}

/* f(call, g) on the geometry of a query whose input is xd, filter fd and output
 * yd, once the handle and the descriptors pass. */
template <class Fn>
cudnnStatus_t on_geom(const char *call, cudnnHandle_t h, const cudnnTensorStruct *xd, const cudnnFilterStruct *fd,
                      const cudnnConvolutionStruct *cd, const cudnnTensorStruct *yd, Fn f)
{
    geom g;
    if (!h)
        return CUDNN_STATUS_NOT_INITIALIZED;
    cudnnStatus_t s = resolve(call, xd, fd, cd, yd, &g);
    return s != CUDNN_STATUS_SUCCESS ? s : f(call, g);
}

/* The checks every computing call shares, then the work enqueued on the
 * handle's stream: in0 and in1 the inputs (spans e0, e1 elements), out the
 * output (eo), the workspace, and compute(in0, in1, acc) filling acc (eo
 * doubles) before the blend. */
template <class C>
cudnnStatus_t launch(const char *call, cudnnHandle_t h, dir d, int algo, const geom &g, const void *alpha,
                     const void *beta, const char *n0, const void *in0, long long e0, const char *n1,
                     const void *in1, long long e1, const char *no, void *out, long long eo, void *ws,
                     size_t ws_bytes, C compute)
{
    if (!h)
        return CUDNN_STATUS_NOT_INITIALIZED;
    if (!alpha || !beta || !in0 || !in1 || !out) {
        pg_emu_rt::note("%s: alpha, beta, %s, %s and %s must not be null", call, n0, n1, no);
        return CUDNN_STATUS_BAD_PARAM;
    }
    size_t need;
    cudnnStatus_t s = workspace_size(call, d, algo, g, &need);
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    if ((!ws && ws_bytes) || ws_bytes < need) {
        pg_emu_rt::note("%s: the %s algorithm %d needs %zu bytes of workspace, given %zu at %p", call, dir_name[d],
                        algo, need, ws_bytes, ws);
        return CUDNN_STATUS_BAD_PARAM;
    }
    need_device(call, n0, in0, (size_t)e0 * 4);
    need_device(call, n1, in1, (size_t)e1 * 4);
    need_device(call, no, out, (size_t)eo * 4);
    need_apart(call, n0, in0, (size_t)e0 * 4, no, out, (size_t)eo * 4);
    need_apart(call, n1, in1, (size_t)e1 * 4, no, out, (size_t)eo * 4);
    if (need) {
        need_device(call, "the workspace", ws, need);
        need_apart(call, "the workspace", ws, need, no, out, (size_t)eo * 4);
    }
    float a = *(const float *)alpha, b = *(const float *)beta; /* host scalars, read at the call */
    const float *x0 = (const float *)in0, *x1 = (const float *)in1;
    float *y = (float *)out;
    pg_emu_rt::op o(call, nullptr, {{in0, (size_t)e0 * 4}, {in1, (size_t)e1 * 4}, {out, (size_t)eo * 4}});
    if (need)
        o.ranges.push_back({ws, need});
    o.run = [=] {
        if (need)
            memset(ws, 0xa5, need); /* the algorithm's scratch: nothing of the caller's survives there */
        std::vector<double> acc((size_t)eo, 0.0);
        compute(x0, x1, acc);
        blend(y, acc, a, b);
    };
    return pg_emu_rt::submit(h->stream, std::move(o)) == cudaSuccess ? CUDNN_STATUS_SUCCESS
                                                                     : CUDNN_STATUS_EXECUTION_FAILED;
}

template <class T> cudnnStatus_t create(T **p)
{
    if (!p)
        return CUDNN_STATUS_BAD_PARAM;
    *p = (T *)calloc(1, sizeof(T));
    return *p ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR;
}

template <class T> cudnnStatus_t destroy(T *p)
{
    free(p);
    return CUDNN_STATUS_SUCCESS;
}

bool format_ok(cudnnTensorFormat_t f) { return f == CUDNN_TENSOR_NCHW || f == CUDNN_TENSOR_NHWC; }
bool type_ok(cudnnDataType_t t) { return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_DOUBLE || t == CUDNN_DATA_HALF; }

} // namespace

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

const char *cudnnGetErrorString(cudnnStatus_t s)
{
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    }
    return "CUDNN_STATUS_UNKNOWN";
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
    if (!h)
        return CUDNN_STATUS_BAD_PARAM;
    void *probe = NULL;
    if (cudaMalloc(&probe, 256) != cudaSuccess) /* a context, and the capture rules of an allocation */
        return CUDNN_STATUS_NOT_INITIALIZED;
    cudaFree(probe);
    *h = new cudnnContext();
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t h)
{
    if (!h)
        return CUDNN_STATUS_BAD_PARAM;
    if (h->stream)
        cudaStreamSynchronize(h->stream);
    delete h;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s)
{
    if (!h)
        return CUDNN_STATUS_BAD_PARAM;
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) { return create(d); }
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { return destroy(d); }
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) { return create(d); }
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { return destroy(d); }
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d)
{
    cudnnStatus_t s = create(d);
    if (s == CUDNN_STATUS_SUCCESS)
        (*d)->groups = 1; /* cuDNN's defaults: one group, default math */
    return s;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) { return destroy(d); }

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w)
{
    if (!d || !format_ok(format) || !type_ok(type) || n <= 0 || c <= 0 || h <= 0 || w <= 0) {
        pg_emu_rt::note("cudnnSetTensor4dDescriptor: format %d, type %d, [%d, %d, %d, %d]: every dimension must be "
                        "positive", (int)format, (int)type, n, c, h, w);
        return CUDNN_STATUS_BAD_PARAM;
    }
    *d = {1, format, type, n, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w)
{
    if (!d || !format_ok(format) || !type_ok(type) || k <= 0 || c <= 0 || h <= 0 || w <= 0) {
        pg_emu_rt::note("cudnnSetFilter4dDescriptor: type %d, format %d, [%d, %d, %d, %d]: every dimension must be "
                        "positive", (int)type, (int)format, k, c, h, w);
        return CUDNN_STATUS_BAD_PARAM;
    }
    *d = {1, format, type, k, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int sh, int sw, int dh,
                                              int dw, cudnnConvolutionMode_t mode, cudnnDataType_t type)
{
    if (!d || ph < 0 || pw < 0 || sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0 ||
        (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) || !type_ok(type)) {
        pg_emu_rt::note("cudnnSetConvolution2dDescriptor: pads %dx%d (>= 0), strides %dx%d and dilations %dx%d (> 0), "
                        "mode %d", ph, pw, sh, sw, dh, dw, (int)mode);
        return CUDNN_STATUS_BAD_PARAM;
    }
    d->set = 1;
    d->ph = ph, d->pw = pw, d->sh = sh, d->sw = sw, d->dh = dh, d->dw = dw;
    d->mode = mode, d->type = type;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups)
{
    if (!d || groups < 1) {
        pg_emu_rt::note("cudnnSetConvolutionGroupCount: %d groups (at least 1)", groups);
        return CUDNN_STATUS_BAD_PARAM;
    }
    d->groups = groups;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math)
{
    if (!d || (math != CUDNN_DEFAULT_MATH && math != CUDNN_TENSOR_OP_MATH &&
               math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && math != CUDNN_FMA_MATH)) {
        pg_emu_rt::note("cudnnSetConvolutionMathType: math type %d", (int)math);
        return CUDNN_STATUS_BAD_PARAM;
    }
    d->math = math;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t cd,
                                                    const cudnnTensorDescriptor_t xd, const cudnnFilterDescriptor_t fd,
                                                    int *n, int *c, int *h, int *w)
{
    int o[4];
    if (!n || !c || !h || !w)
        return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t s = output_dims("cudnnGetConvolution2dForwardOutputDim", cd, xd, fd, o);
    if (s == CUDNN_STATUS_SUCCESS)
        *n = o[0], *c = o[1], *h = o[2], *w = o[3];
    return s;
}

/* ---- the heuristics and the workspace sizes ---------------------------------------- */

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                     const cudnnFilterDescriptor_t fd,
                                                     const cudnnConvolutionDescriptor_t cd,
                                                     const cudnnTensorDescriptor_t yd, const int requested,
                                                     int *returned, cudnnConvolutionFwdAlgoPerf_t *out)
{
    return on_geom(__func__, h, xd, fd, cd, yd, [&](const char *call, const geom &g) {
        return heuristics<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
            call, FWD, g, cd->math, requested, returned, out);
    });
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t fd,
                                                          const cudnnTensorDescriptor_t dyd,
                                                          const cudnnConvolutionDescriptor_t cd,
                                                          const cudnnTensorDescriptor_t dxd, const int requested,
                                                          int *returned, cudnnConvolutionBwdDataAlgoPerf_t *out)
{
    return on_geom(__func__, h, dxd, fd, cd, dyd, [&](const char *call, const geom &g) {
        return heuristics<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
            call, DATA, g, cd->math, requested, returned, out);
    });
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                            const cudnnTensorDescriptor_t dyd,
                                                            const cudnnConvolutionDescriptor_t cd,
                                                            const cudnnFilterDescriptor_t fd, const int requested,
                                                            int *returned, cudnnConvolutionBwdFilterAlgoPerf_t *out)
{
    return on_geom(__func__, h, xd, fd, cd, dyd, [&](const char *call, const geom &g) {
        return heuristics<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
            call, FILTER, g, cd->math, requested, returned, out);
    });
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                      const cudnnFilterDescriptor_t fd,
                                                      const cudnnConvolutionDescriptor_t cd,
                                                      const cudnnTensorDescriptor_t yd, cudnnConvolutionFwdAlgo_t algo,
                                                      size_t *bytes)
{
    return on_geom(__func__, h, xd, fd, cd, yd, [&](const char *call, const geom &g) {
        return workspace_size(call, FWD, algo, g, bytes);
    });
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, const cudnnFilterDescriptor_t fd,
                                                           const cudnnTensorDescriptor_t dyd,
                                                           const cudnnConvolutionDescriptor_t cd,
                                                           const cudnnTensorDescriptor_t dxd,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t *bytes)
{
    return on_geom(__func__, h, dxd, fd, cd, dyd, [&](const char *call, const geom &g) {
        return workspace_size(call, DATA, algo, g, bytes);
    });
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                             const cudnnTensorDescriptor_t dyd,
                                                             const cudnnConvolutionDescriptor_t cd,
                                                             const cudnnFilterDescriptor_t fd,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t *bytes)
{
    return on_geom(__func__, h, xd, fd, cd, dyd, [&](const char *call, const geom &g) {
        return workspace_size(call, FILTER, algo, g, bytes);
    });
}

/* ---- the three products ---------------------------------------------------------- */

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd,
                                      const void *x, const cudnnFilterDescriptor_t fd, const void *w,
                                      const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t algo, void *ws,
                                      size_t ws_bytes, const void *beta, const cudnnTensorDescriptor_t yd, void *y)
{
    const char *call = "cudnnConvolutionForward";
    geom g;
    cudnnStatus_t s = h ? resolve(call, xd, fd, cd, yd, &g) : CUDNN_STATUS_NOT_INITIALIZED;
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    return launch(call, h, FWD, algo, g, alpha, beta, "x", x, g.x.count(), "w", w, g.f.count(), "y", y, g.y.count(),
                  ws, ws_bytes, [g](const float *X, const float *F, std::vector<double> &acc) {
                      each_term(g, [&](long long xi, long long fi, long long yi) {
                          acc[(size_t)yi] += (double)F[fi] * X[xi];
                      });
                  });
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t fd,
                                           const void *w, const cudnnTensorDescriptor_t dyd, const void *dy,
                                           const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t algo,
                                           void *ws, size_t ws_bytes, const void *beta,
                                           const cudnnTensorDescriptor_t dxd, void *dx)
{
    const char *call = "cudnnConvolutionBackwardData";
    geom g;
    cudnnStatus_t s = h ? resolve(call, dxd, fd, cd, dyd, &g) : CUDNN_STATUS_NOT_INITIALIZED;
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    return launch(call, h, DATA, algo, g, alpha, beta, "w", w, g.f.count(), "dy", dy, g.y.count(), "dx", dx,
                  g.x.count(), ws, ws_bytes, [g](const float *F, const float *dY, std::vector<double> &acc) {
                      each_term(g, [&](long long xi, long long fi, long long yi) {
                          acc[(size_t)xi] += (double)F[fi] * dY[yi];
                      });
                  });
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd,
                                             const void *x, const cudnnTensorDescriptor_t dyd, const void *dy,
                                             const cudnnConvolutionDescriptor_t cd,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t ws_bytes,
                                             const void *beta, const cudnnFilterDescriptor_t dwd, void *dw)
{
    const char *call = "cudnnConvolutionBackwardFilter";
    geom g;
    cudnnStatus_t s = h ? resolve(call, xd, dwd, cd, dyd, &g) : CUDNN_STATUS_NOT_INITIALIZED;
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    return launch(call, h, FILTER, algo, g, alpha, beta, "x", x, g.x.count(), "dy", dy, g.y.count(), "dw", dw,
                  g.f.count(), ws, ws_bytes, [g](const float *X, const float *dY, std::vector<double> &acc) {
                      each_term(g, [&](long long xi, long long fi, long long yi) {
                          acc[(size_t)fi] += (double)dY[yi] * X[xi];
                      });
                  });
}

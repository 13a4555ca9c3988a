/* runtime/cuda/conv.cu — conv2d (conv1d is its h = 1 case) and
 * conv_transpose2d on the GPU through cuDNN's convolution API
 * (cudnnConvolutionForward / BackwardData / BackwardFilter, libcudnn_cnn).
 *
 * Why that API and not cuDNN's graph API: cuDNN 9 keeps the legacy
 * convolution calls (deprecated, still shipped in libcudnn_cnn) and they do
 * exactly the three products a layer needs with no fusion; each algorithm's
 * heuristic record carries its determinism flag and workspace size, so the
 * choice below is one call per direction. The graph API (libcudnn_graph) is
 * NVIDIA's recommended path and the one to move to when the legacy calls go:
 * an operation graph per direction, an engine filtered by the
 * CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC note, a plan executed with a variant
 * pack; the C++ frontend that makes it short is not in the toolkit.
 *
 * The three directions, in cuDNN's terms (a "conv input" X, a "conv output"
 * Y and a filter F [K, C / groups, kh, kw]):
 *
 *   conv2d            X = x [in, h, w],    Y = y [out, oh, ow], F = weight
 *                     fwd: Forward(X -> Y), bwd_in: BackwardData(dY -> dX),
 *                     bwd_w: BackwardFilter(X, dY -> dF)
 *   conv_transpose2d  X = y [out, oh, ow], Y = x [in, h, w],   F = weight
 *                     [in, out / groups, kh, kw] (the adjoint): fwd:
 *                     BackwardData(x -> y), bwd_in: Forward(dy -> dx),
 *                     bwd_w: BackwardFilter(dy, x -> dF)
 *
 * Determinism and the bits: only algorithms whose record says
 * CUDNN_DETERMINISTIC, chosen by cuDNN's heuristics (the _v7 queries: no
 * timing, so the choice depends on the shapes and the GPU, never on the run),
 * with CUDNN_FMA_MATH (full fp32, no TF32, as cuBLAS's default math here).
 * Every call is on one sample (N = 1), as the CPU's ops go sample by sample:
 * a plan depends on the geometry alone, so a layer's bits do not depend on
 * the micro-batch's rows, the stage count or the replicas; weight gradients
 * add each sample's into dw in sample order (beta = 1). Bias: y += b by an
 * elementwise kernel; db sums dy per channel in double, samples then
 * positions (the CPU's conv.c order: equal bit for bit).
 *
 * Memory: a plan per geometry (descriptors, the three algorithms and their
 * workspace bytes) is made at start-up for every geometry the stage's table
 * lists (pg_stage_desc.convs, passed by main.c to pg_conv_plan), and the
 * workspace, the context's scratch (pg_cuda_scratch), grown once then to the
 * largest need: no step plans, queries or allocates, and a captured step
 * never meets a new geometry (one the table lacks fails, naming the
 * disagreement). Called alone (the op tests), an op plans its geometry on
 * first use, outside a capture. The arena's planned `ws` (the CPU's column
 * matrix) is not used. */
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.h"
#include "op_args.h"

#define GRID(count) pg_cuda_blocks(count, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream

#define PG_CUDA_CONV_PLANS 128                   /* distinct geometries per stage */
#define PG_CUDA_CONV_WS_MAX ((size_t)256 << 20) /* an algorithm needing more is passed over */

static int cudnn_fail(const char *file, int line, const char *call, cudnnStatus_t s)
{
    pg_rt_error(file, line, "%s failed: %s (%d)", call, cudnnGetErrorString(s), (int)s);
    return 1;
}

#define CUDNN_CHECK(call)                                                           \
    do {                                                                            \
        cudnnStatus_t pg_s_ = (call);                                               \
        if (pg_s_ != CUDNN_STATUS_SUCCESS)                                          \
            return cudnn_fail(__FILE__, __LINE__, #call, pg_s_);                    \
    } while (0)

struct conv_plan {
    pg_conv g;
    cudnnTensorDescriptor_t X, Y;
    cudnnFilterDescriptor_t F;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t ws_fwd, ws_data, ws_filter;
};

struct pg_cuda_conv {
    cudnnHandle_t dnn;
    struct conv_plan plans[PG_CUDA_CONV_PLANS];
    int nplans;
    size_t ws_max; /* the largest workspace of any plan: what the scratch holds */
    int planned;   /* 1: every geometry of the stage planned at start-up (pg_conv_plan) */
};

static void plan_free(struct conv_plan *p)
{
    if (p->X)
        cudnnDestroyTensorDescriptor(p->X);
    if (p->Y)
        cudnnDestroyTensorDescriptor(p->Y);
    if (p->F)
        cudnnDestroyFilterDescriptor(p->F);
    if (p->conv)
        cudnnDestroyConvolutionDescriptor(p->conv);
    memset(p, 0, sizeof *p);
}

static void conv_release(pg_ctx *c)
{
    struct pg_cuda_conv *s = c->conv;
    if (!s)
        return;
    for (int i = 0; i < s->nplans; i++)
        plan_free(&s->plans[i]);
    if (s->dnn)
        cudnnDestroy(s->dnn);
    free(s);
    c->conv = NULL;
}

static void conv_report(const pg_ctx *c, int stage, FILE *out)
{
    if (c->conv && c->conv->nplans)
        fprintf(out, "stage %d: cuDNN %d.%d.%d: %d convolution geometr%s, deterministic fp32 algorithms, "
                     "workspace %zu bytes (in the scratch)\n",
                stage, CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL, c->conv->nplans, c->conv->nplans == 1 ? "y" : "ies",
                c->conv->ws_max);
}

/* An algorithm is usable when it ran in the heuristic's model, is
 * deterministic, keeps fp32 math and fits PG_CUDA_CONV_WS_MAX. */
#define USABLE(p) ((p).status == CUDNN_STATUS_SUCCESS && (p).determinism == CUDNN_DETERMINISTIC && \
                   (p).mathType != CUDNN_TENSOR_OP_MATH && (p).mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && \
                   (p).memory <= PG_CUDA_CONV_WS_MAX)

static int no_algo(const char *dir, const pg_conv *g)
{
    return PG_RT_FAIL("conv: cuDNN offers no deterministic fp32 %s algorithm within %zu MiB of workspace for "
                      "in=%lld out=%lld %lldx%lld kernel %lldx%lld stride %lldx%lld padding %lldx%lld dilation "
                      "%lldx%lld groups %lld%s",
                      dir, PG_CUDA_CONV_WS_MAX >> 20, (long long)g->in, (long long)g->out, (long long)g->h,
                      (long long)g->w, (long long)g->kh, (long long)g->kw, (long long)g->sh, (long long)g->sw,
                      (long long)g->ph, (long long)g->pw, (long long)g->dh, (long long)g->dw, (long long)g->groups,
                      g->transposed ? " (transposed)" : "");
}

/* The three algorithms of plan p: the first usable one of each heuristic list. */
static int choose_algos(cudnnHandle_t h, struct conv_plan *p)
{
    enum { N = 16 };
    int n = 0, i;
    cudnnConvolutionFwdAlgoPerf_t f[N];
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p->X, p->F, p->conv, p->Y, N, &n, f));
    for (i = 0; i < n && !USABLE(f[i]); i++)
        ;
    if (i == n)
        return no_algo("forward", &p->g);
    p->fwd = f[i].algo;
    p->ws_fwd = f[i].memory;
    cudnnConvolutionBwdDataAlgoPerf_t d[N];
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->F, p->Y, p->conv, p->X, N, &n, d));
    for (i = 0; i < n && !USABLE(d[i]); i++)
        ;
    if (i == n)
        return no_algo("backward-data", &p->g);
    p->bwd_data = d[i].algo;
    p->ws_data = d[i].memory;
    cudnnConvolutionBwdFilterAlgoPerf_t w[N];
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->X, p->Y, p->conv, p->F, N, &n, w));
    for (i = 0; i < n && !USABLE(w[i]); i++)
        ;
    if (i == n)
        return no_algo("backward-filter", &p->g);
    p->bwd_filter = w[i].algo;
    p->ws_filter = w[i].memory;
    return 0;
}

/* Plan p's descriptors for geometry g: X, Y and F as the header says. */
static int describe(struct conv_plan *p, const pg_conv *g)
{
    int tr = g->transposed;
    int64_t xc = tr ? g->out : g->in, xh = tr ? g->oh : g->h, xw = tr ? g->ow : g->w;
    int64_t yc = tr ? g->in : g->out, yh = tr ? g->h : g->oh, yw = tr ? g->w : g->ow;
    p->g = *g;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->X));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->Y));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->F));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->X, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, (int)xc, (int)xh, (int)xw));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->Y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, (int)yc, (int)yh, (int)yw));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->F, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)yc, (int)(xc / g->groups),
                                           (int)g->kh, (int)g->kw));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, (int)g->ph, (int)g->pw, (int)g->sh, (int)g->sw, (int)g->dh,
                                                (int)g->dw, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(p->conv, (int)g->groups));
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));
    /* cuDNN's own output size must be the plan's (a transposed layer's
     * output_padding makes X larger than the smallest image giving Y) */
    int n, oc, oh, ow;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv, p->X, p->F, &n, &oc, &oh, &ow));
    if (n != 1 || oc != yc || oh != yh || ow != yw)
        return PG_RT_FAIL("conv: cuDNN computes a %dx%dx%d output for the %lldx%lldx%lld image, the plan says "
                          "%lldx%lldx%lld", oc, oh, ow, (long long)xc, (long long)xh, (long long)xw, (long long)yc,
                          (long long)yh, (long long)yw);
    return 0;
}

/* The stage's cuDNN state: the handle on the context's stream, made once. */
static int conv_state(pg_ctx *c, const char *op, struct pg_cuda_conv **out)
{
    struct pg_cuda_conv *s = c->conv;
    if (!s) {
        s = (struct pg_cuda_conv *)calloc(1, sizeof *s);
        if (!s)
            return PG_RT_FAIL("%s: out of host memory for the cuDNN state", op);
        c->conv = s;
        c->conv_release = conv_release;
        c->conv_report = conv_report;
        CUDNN_CHECK(cudnnCreate(&s->dnn));
        CUDNN_CHECK(cudnnSetStream(s->dnn, c->stream));
    }
    *out = s;
    return 0;
}

/* The plan of geometry g, or NULL when there is none yet. */
static struct conv_plan *plan_find(struct pg_cuda_conv *s, const pg_conv *g)
{
    for (int i = 0; s && i < s->nplans; i++)
        if (pg_conv_same(&s->plans[i].g, g))
            return &s->plans[i];
    return NULL;
}

/* A new plan for geometry g: descriptors, algorithms, the largest workspace so far. */
static int plan_add(pg_ctx *c, const char *op, const pg_conv *g, struct conv_plan **out)
{
    struct pg_cuda_conv *s;
    if (conv_state(c, op, &s))
        return 1;
    if (s->nplans == PG_CUDA_CONV_PLANS)
        return PG_RT_FAIL("%s: more than %d convolution geometries in one stage", op, PG_CUDA_CONV_PLANS);
    struct conv_plan *p = &s->plans[s->nplans];
    memset(p, 0, sizeof *p);
    if (describe(p, g) || choose_algos(s->dnn, p)) {
        plan_free(p); /* not kept: the next call fails the same way */
        return 1;
    }
    s->nplans++;
    size_t ws = p->ws_fwd > p->ws_data ? p->ws_fwd : p->ws_data;
    ws = ws > p->ws_filter ? ws : p->ws_filter;
    if (ws > s->ws_max)
        s->ws_max = ws;
    *out = p;
    return 0;
}

/* The scratch grown to the largest plan's workspace (a no-op once it is). */
static int workspace_reserve(pg_ctx *c)
{
    void *scratch;
    return c->conv->ws_max ? pg_cuda_scratch(c, c->conv->ws_max, &scratch) : 0;
}

int pg_conv_plan(pg_ctx *c, int stage, int n, const pg_conv *g)
{
    FILE *out = stderr; /* with the other start-up lines */
    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++) {
        struct conv_plan *p;
        if (pg_args_conv_op("conv_plan", 1, &g[i], g[i].transposed) ||
            (!plan_find(c->conv, &g[i]) && plan_add(c, "conv_plan", &g[i], &p)))
            return 1;
    }
    if (workspace_reserve(c))
        return 1;
    c->conv->planned = 1;
    struct pg_cuda_conv *s = c->conv;
    fprintf(out, "stage %d: cuDNN %d.%d.%d at start-up: %d convolution geometr%s planned (forward / backward-data / "
                 "backward-filter algorithms:", stage, CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL, s->nplans,
            s->nplans == 1 ? "y" : "ies");
    for (int i = 0; i < s->nplans; i++) {
        const pg_conv *q = &s->plans[i].g;
        fprintf(out, "%s %lld->%lld %lldx%lld k%lldx%lld s%lldx%lld p%lldx%lld d%lldx%lld g%lld%s %d/%d/%d", i ? "," : "",
                (long long)q->in, (long long)q->out, (long long)q->h, (long long)q->w, (long long)q->kh,
                (long long)q->kw, (long long)q->sh, (long long)q->sw, (long long)q->ph, (long long)q->pw,
                (long long)q->dh, (long long)q->dw, (long long)q->groups, q->transposed ? " T" : "",
                (int)s->plans[i].fwd, (int)s->plans[i].bwd_data, (int)s->plans[i].bwd_filter);
    }
    fprintf(out, "), workspace %zu bytes, allocated once\n", s->ws_max);
    return 0;
}

/* The plan of geometry g: made at start-up (pg_conv_plan) for a stage; made
 * here on first use, outside a capture, when no start-up planned (the op
 * tests call the ops alone). */
static int plan_of(pg_ctx *c, const char *op, const pg_conv *g, struct conv_plan **out)
{
    if ((*out = plan_find(c->conv, g)))
        return 0;
    if (c->conv && c->conv->planned)
        return PG_RT_FAIL("%s: a convolution geometry the stage's table (pg_stage_desc.convs) does not list: the "
                          "stage file and its calls disagree", op);
    if (pg_cuda_capturing(c))
        return PG_RT_FAIL("%s: a convolution geometry first met while capturing a CUDA graph (its cuDNN plan "
                          "and workspace are made outside a capture); run with --no-graph", op);
    return plan_add(c, op, g, out) || workspace_reserve(c);
}

/* The workspace for `bytes` (the scratch, already as large: workspace_reserve grew it). */
static int workspace(pg_ctx *c, size_t bytes, void **ws)
{
    *ws = NULL;
    return bytes ? pg_cuda_scratch(c, bytes, ws) : 0;
}

/* ---- bias ---- */

/* y [r, C, P] += b[C] */
__global__ void bias_add_kernel(int64_t count, int64_t C, int64_t P, const float *b, float *y)
{
    PG_GRID_STRIDE(k, count) y[k] = __fadd_rn(y[k], b[(k / P) % C]);
}

/* db[C] += the sums of dy [r, C, P] per channel: in double, samples then positions */
__global__ void bias_grad_kernel(int64_t r, int64_t C, int64_t P, const float *dy, float *db)
{
    PG_GRID_STRIDE(ch, C) {
        double s = 0.0;
        for (int64_t k = 0; k < r; k++)
            for (int64_t i = 0; i < P; i++)
                s = __dadd_rn(s, (double)dy[(k * C + ch) * P + i]);
        db[ch] = __fadd_rn(db[ch], (float)s);
    }
}

static int bias_add(pg_ctx *c, int64_t r, int64_t C, int64_t P, const float *b, float *y)
{
    int64_t count = r * C * P;
    if (!b || !count)
        return 0;
    bias_add_kernel<<<GRID(count)>>>(count, C, P, b, y);
    LAUNCH_CHECK("bias_add_kernel");
    return 0;
}

static int bias_grad(pg_ctx *c, int64_t r, int64_t C, int64_t P, const float *dy, float *db)
{
    if (!db || !r)
        return 0;
    bias_grad_kernel<<<GRID(C)>>>(r, C, P, dy, db);
    LAUNCH_CHECK("bias_grad_kernel");
    return 0;
}

/* ---- the three directions, sample by sample ---- */

static const float one = 1.0f, zero = 0.0f;

/* Y = conv(X) for each sample */
static int run_fwd(pg_ctx *c, struct conv_plan *p, int64_t r, const float *X, int64_t xs, const float *F, float *Y,
                   int64_t ys)
{
    void *ws;
    if (workspace(c, p->ws_fwd, &ws))
        return 1;
    for (int64_t k = 0; k < r; k++)
        CUDNN_CHECK(cudnnConvolutionForward(c->conv->dnn, &one, p->X, X + k * xs, p->F, F, p->conv, p->fwd, ws,
                                            p->ws_fwd, &zero, p->Y, Y + k * ys));
    return 0;
}

/* dX = the adjoint of conv applied to dY, for each sample */
static int run_bwd_data(pg_ctx *c, struct conv_plan *p, int64_t r, const float *dY, int64_t ys, const float *F,
                        float *dX, int64_t xs)
{
    void *ws;
    if (workspace(c, p->ws_data, &ws))
        return 1;
    for (int64_t k = 0; k < r; k++)
        CUDNN_CHECK(cudnnConvolutionBackwardData(c->conv->dnn, &one, p->F, F, p->Y, dY + k * ys, p->conv,
                                                 p->bwd_data, ws, p->ws_data, &zero, p->X, dX + k * xs));
    return 0;
}

/* dF += the filter gradient of each sample, in sample order */
static int run_bwd_filter(pg_ctx *c, struct conv_plan *p, int64_t r, const float *X, int64_t xs, const float *dY,
                          int64_t ys, float *dF)
{
    void *ws;
    if (workspace(c, p->ws_filter, &ws))
        return 1;
    for (int64_t k = 0; k < r; k++)
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(c->conv->dnn, &one, p->X, X + k * xs, p->Y, dY + k * ys, p->conv,
                                                   p->bwd_filter, ws, p->ws_filter, &one, p->F, dF));
    return 0;
}

/* The checks and the plan every entry point starts with. */
static int conv_begin(pg_ctx *c, const char *op, int64_t r, const pg_conv *g, int transposed, struct conv_plan **p)
{
    if (pg_args_conv_op(op, r, g, transposed))
        return 1;
    return plan_of(c, op, g, p);
}

#define IN_SIZE(g) ((g)->in * (g)->h * (g)->w)   /* floats of one sample of x */
#define OUT_SIZE(g) ((g)->out * (g)->oh * (g)->ow) /* of y */

int pg_conv2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *w, const float *b, float *y,
                  float *ws)
{
    struct conv_plan *p;
    (void)ws;
    if (conv_begin(c, "conv2d_fwd", r, g, 0, &p) || run_fwd(c, p, r, x, IN_SIZE(g), w, y, OUT_SIZE(g)))
        return 1;
    return bias_add(c, r, g->out, g->oh * g->ow, b, y);
}

int pg_conv2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *dy, const float *w, float *dx, float *ws)
{
    struct conv_plan *p;
    (void)ws;
    if (conv_begin(c, "conv2d_bwd_in", r, g, 0, &p))
        return 1;
    return run_bwd_data(c, p, r, dy, OUT_SIZE(g), w, dx, IN_SIZE(g));
}

int pg_conv2d_bwd_w(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *dy, float *dw, float *db,
                    float *ws)
{
    struct conv_plan *p;
    (void)ws;
    if (conv_begin(c, "conv2d_bwd_w", r, g, 0, &p) || run_bwd_filter(c, p, r, x, IN_SIZE(g), dy, OUT_SIZE(g), dw))
        return 1;
    return bias_grad(c, r, g->out, g->oh * g->ow, dy, db);
}

int pg_conv_transpose2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *w, const float *b,
                            float *y, float *ws)
{
    struct conv_plan *p;
    (void)ws;
    if (conv_begin(c, "conv_transpose2d_fwd", r, g, 1, &p) ||
        run_bwd_data(c, p, r, x, IN_SIZE(g), w, y, OUT_SIZE(g)))
        return 1;
    return bias_add(c, r, g->out, g->oh * g->ow, b, y);
}

int pg_conv_transpose2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *dy, const float *w, float *dx,
                               float *ws)
{
    struct conv_plan *p;
    (void)ws;
    if (conv_begin(c, "conv_transpose2d_bwd_in", r, g, 1, &p))
        return 1;
    return run_fwd(c, p, r, dy, OUT_SIZE(g), w, dx, IN_SIZE(g));
}

int pg_conv_transpose2d_bwd_w(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *dy, float *dw,
                              float *db, float *ws)
{
    struct conv_plan *p;
    (void)ws;
    if (conv_begin(c, "conv_transpose2d_bwd_w", r, g, 1, &p) ||
        run_bwd_filter(c, p, r, dy, OUT_SIZE(g), x, IN_SIZE(g), dw))
        return 1;
    return bias_grad(c, r, g->out, g->oh * g->ow, dy, db);
}

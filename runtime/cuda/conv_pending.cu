/* runtime/cuda/conv_pending.cu — the ops of convolutional networks
 * (pg_ops.h's "convolutional networks" section: conv2d, conv_transpose2d,
 * pooling, upsample, mean, swap_dims, batchnorm2d, sigmoid/tanh/silu) are not
 * on the CUDA runtime yet: the cuDNN work of issue 24 (section 3) brings
 * them. Until then each entry point is here so that every generated stage
 * links against libpgrt_cuda.a, and refuses at run time, naming the op: such a
 * model trains on the CPU runtime. Replace an entry with its kernel file's
 * real one (conv.cu, pool.cu, ...) as it lands. */
#include "cuda_common.h"

/* "conv2d_fwd: not yet on the CUDA runtime ..." */
static int pending(const char *op)
{
    return PG_RT_FAIL("%s: not yet on the CUDA runtime (the layers of convolutional networks run on the CPU "
                      "runtime until their cuDNN kernels land); build this model's stages against the CPU runtime",
                      op);
}

int pg_conv2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *w, const float *b, float *y,
                  float *ws)
{
    (void)c; (void)r; (void)g; (void)x; (void)w; (void)b; (void)y; (void)ws;
    return pending("conv2d_fwd");
}

int pg_conv2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *dy, const float *w, float *dx, float *ws)
{
    (void)c; (void)r; (void)g; (void)dy; (void)w; (void)dx; (void)ws;
    return pending("conv2d_bwd_in");
}

int pg_conv2d_bwd_w(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *dy, float *dw, float *db,
                    float *ws)
{
    (void)c; (void)r; (void)g; (void)x; (void)dy; (void)dw; (void)db; (void)ws;
    return pending("conv2d_bwd_w");
}

int pg_conv_transpose2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *w, const float *b,
                            float *y, float *ws)
{
    (void)c; (void)r; (void)g; (void)x; (void)w; (void)b; (void)y; (void)ws;
    return pending("conv_transpose2d_fwd");
}

int pg_conv_transpose2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *dy, const float *w, float *dx,
                               float *ws)
{
    (void)c; (void)r; (void)g; (void)dy; (void)w; (void)dx; (void)ws;
    return pending("conv_transpose2d_bwd_in");
}

int pg_conv_transpose2d_bwd_w(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *dy, float *dw,
                              float *db, float *ws)
{
    (void)c; (void)r; (void)g; (void)x; (void)dy; (void)dw; (void)db; (void)ws;
    return pending("conv_transpose2d_bwd_w");
}

int pg_maxpool2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, float *y)
{
    (void)c; (void)r; (void)g; (void)x; (void)y;
    return pending("maxpool2d_fwd");
}

int pg_maxpool2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, const float *dy, float *dx)
{
    (void)c; (void)r; (void)g; (void)x; (void)dy; (void)dx;
    return pending("maxpool2d_bwd_in");
}

int pg_avgpool2d_fwd(pg_ctx *c, int64_t r, const pg_conv *g, const float *x, float *y)
{
    (void)c; (void)r; (void)g; (void)x; (void)y;
    return pending("avgpool2d_fwd");
}

int pg_avgpool2d_bwd_in(pg_ctx *c, int64_t r, const pg_conv *g, const float *dy, float *dx)
{
    (void)c; (void)r; (void)g; (void)dy; (void)dx;
    return pending("avgpool2d_bwd_in");
}

int pg_upsample_fwd(pg_ctx *c, int64_t n, int64_t h, int64_t w, int64_t scale, int bilinear, const float *x, float *y)
{
    (void)c; (void)n; (void)h; (void)w; (void)scale; (void)bilinear; (void)x; (void)y;
    return pending("upsample_fwd");
}

int pg_upsample_bwd_in(pg_ctx *c, int64_t n, int64_t h, int64_t w, int64_t scale, int bilinear, const float *dy,
                       float *dx)
{
    (void)c; (void)n; (void)h; (void)w; (void)scale; (void)bilinear; (void)dy; (void)dx;
    return pending("upsample_bwd_in");
}

int pg_mean_fwd(pg_ctx *c, int64_t outer, int64_t d, int64_t inner, const float *x, float *y)
{
    (void)c; (void)outer; (void)d; (void)inner; (void)x; (void)y;
    return pending("mean_fwd");
}

int pg_mean_bwd_in(pg_ctx *c, int64_t outer, int64_t d, int64_t inner, const float *dy, float *dx)
{
    (void)c; (void)outer; (void)d; (void)inner; (void)dy; (void)dx;
    return pending("mean_bwd_in");
}

int pg_swap_dims(pg_ctx *c, int64_t outer, int64_t a, int64_t mid, int64_t b, int64_t inner, const float *x, float *y)
{
    (void)c; (void)outer; (void)a; (void)mid; (void)b; (void)inner; (void)x; (void)y;
    return pending("swap_dims");
}

int pg_batchnorm2d_fwd(pg_ctx *c, int64_t r, int64_t C, int64_t hw, float eps, const float *x, const float *w,
                       const float *b, float *y, float *mean, float *rstd)
{
    (void)c; (void)r; (void)C; (void)hw; (void)eps; (void)x; (void)w; (void)b; (void)y; (void)mean; (void)rstd;
    return pending("batchnorm2d_fwd");
}

int pg_batchnorm2d_bwd_in(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, const float *w,
                          const float *mean, const float *rstd, const float *dy, float *dx)
{
    (void)c; (void)r; (void)C; (void)hw; (void)x; (void)w; (void)mean; (void)rstd; (void)dy; (void)dx;
    return pending("batchnorm2d_bwd_in");
}

int pg_batchnorm2d_bwd_w(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, const float *mean,
                         const float *rstd, const float *dy, float *dw, float *db)
{
    (void)c; (void)r; (void)C; (void)hw; (void)x; (void)mean; (void)rstd; (void)dy; (void)dw; (void)db;
    return pending("batchnorm2d_bwd_w");
}

int pg_batchnorm2d_eval_fwd(pg_ctx *c, int64_t r, int64_t C, int64_t hw, float eps, const float *x, const float *w,
                            const float *b, const float *run_mean, const float *run_var, float *y)
{
    (void)c; (void)r; (void)C; (void)hw; (void)eps; (void)x; (void)w; (void)b; (void)run_mean; (void)run_var; (void)y;
    return pending("batchnorm2d_eval_fwd");
}

int pg_batchnorm2d_stats_acc(pg_ctx *c, int64_t r, int64_t C, int64_t hw, const float *x, double *sum, double *sumsq)
{
    (void)c; (void)r; (void)C; (void)hw; (void)x; (void)sum; (void)sumsq;
    return pending("batchnorm2d_stats_acc");
}

int pg_sigmoid_fwd(pg_ctx *c, int64_t count, const float *x, float *y)
{
    (void)c; (void)count; (void)x; (void)y;
    return pending("sigmoid_fwd");
}

int pg_sigmoid_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx)
{
    (void)c; (void)count; (void)x; (void)dy; (void)dx;
    return pending("sigmoid_bwd_in");
}

int pg_tanh_fwd(pg_ctx *c, int64_t count, const float *x, float *y)
{
    (void)c; (void)count; (void)x; (void)y;
    return pending("tanh_fwd");
}

int pg_tanh_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx)
{
    (void)c; (void)count; (void)x; (void)dy; (void)dx;
    return pending("tanh_bwd_in");
}

int pg_silu_fwd(pg_ctx *c, int64_t count, const float *x, float *y)
{
    (void)c; (void)count; (void)x; (void)y;
    return pending("silu_fwd");
}

int pg_silu_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx)
{
    (void)c; (void)count; (void)x; (void)dy; (void)dx;
    return pending("silu_bwd_in");
}

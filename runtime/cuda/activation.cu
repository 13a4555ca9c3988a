/* runtime/cuda/activation.cu — relu, gelu (tanh form, as GPT-2 and
 * torch.nn.GELU(approximate="tanh")), sigmoid, tanh and silu. Elementwise
 * grid-stride kernels; y may alias x, dx may alias dy. Same formulas as
 * runtime/cpu/activation.c; relu is bitwise equal to the CPU, the others
 * differ by the device's tanhf / expf against the CPU's own exp (a few ulp). */
#include "cuda_common.h"
#include "op_args.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

__global__ void relu_fwd_kernel(int64_t count, const float *x, float *y)
{
    PG_GRID_STRIDE(i, count) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* PyTorch's threshold backward: the gradient passes where x > 0. */
__global__ void relu_bwd_in_kernel(int64_t count, const float *x, const float *dy, float *dx)
{
    PG_GRID_STRIDE(i, count) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

/* y = 0.5 x (1 + tanh(k (x + c x^3))) */
__global__ void gelu_fwd_kernel(int64_t count, const float *x, float *y)
{
    PG_GRID_STRIDE(i, count) {
        float v = x[i];
        float inner = GELU_K * (v + GELU_C * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(inner));
    }
}

/* dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2), t = tanh(inner) */
__global__ void gelu_bwd_in_kernel(int64_t count, const float *x, const float *dy, float *dx)
{
    PG_GRID_STRIDE(i, count) {
        float v = x[i];
        float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        float dinner = GELU_K * (1.0f + 3.0f * GELU_C * v * v);
        float g = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dinner;
        dx[i] = g * dy[i];
    }
}

static int count_ok(const char *op, int64_t count)
{
    if (pg_args_count(op, count))
        return 1;
    return 0;
}

#define GRID(count) pg_cuda_blocks(count, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream

int pg_relu_fwd(pg_ctx *c, int64_t count, const float *x, float *y)
{
    if (count_ok("relu_fwd", count))
        return 1;
    if (!count)
        return 0;
    relu_fwd_kernel<<<GRID(count)>>>(count, x, y);
    LAUNCH_CHECK("relu_fwd_kernel");
    return 0;
}

int pg_relu_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx)
{
    if (count_ok("relu_bwd_in", count))
        return 1;
    if (!count)
        return 0;
    relu_bwd_in_kernel<<<GRID(count)>>>(count, x, dy, dx);
    LAUNCH_CHECK("relu_bwd_in_kernel");
    return 0;
}

int pg_gelu_fwd(pg_ctx *c, int64_t count, const float *x, float *y)
{
    if (count_ok("gelu_fwd", count))
        return 1;
    if (!count)
        return 0;
    gelu_fwd_kernel<<<GRID(count)>>>(count, x, y);
    LAUNCH_CHECK("gelu_fwd_kernel");
    return 0;
}

int pg_gelu_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx)
{
    if (count_ok("gelu_bwd_in", count))
        return 1;
    if (!count)
        return 0;
    gelu_bwd_in_kernel<<<GRID(count)>>>(count, x, dy, dx);
    LAUNCH_CHECK("gelu_bwd_in_kernel");
    return 0;
}

/* ---- sigmoid, tanh, silu: activation.c's forms ----
 * e = exp(-x): sigmoid s = 1 / (1 + e), 1 - s = e s; tanh from e = exp(-2|x|):
 * |t| = (1 - e) / (1 + e), 1 - t^2 = 4 e / (1 + e)^2; silu x s. */
__device__ __forceinline__ float sig_of(float x, float *e)
{
    *e = expf(-x);
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, *e));
}

__global__ void sigmoid_fwd_kernel(int64_t count, const float *x, float *y)
{
    float e;
    PG_GRID_STRIDE(i, count) y[i] = sig_of(x[i], &e);
}

__global__ void sigmoid_bwd_in_kernel(int64_t count, const float *x, const float *dy, float *dx)
{
    float e;
    PG_GRID_STRIDE(i, count) {
        float s = sig_of(x[i], &e);
        dx[i] = __fmul_rn(dy[i], __fmul_rn(s, __fmul_rn(e, s)));
    }
}

__device__ __forceinline__ float tanh_e(float x) { return expf(x < 0.0f ? 2.0f * x : -2.0f * x); }

__global__ void tanh_fwd_kernel(int64_t count, const float *x, float *y)
{
    PG_GRID_STRIDE(i, count) {
        float e = tanh_e(x[i]);
        float t = __fdiv_rn(__fsub_rn(1.0f, e), __fadd_rn(1.0f, e));
        y[i] = x[i] < 0.0f ? -t : t;
    }
}

__global__ void tanh_bwd_in_kernel(int64_t count, const float *x, const float *dy, float *dx)
{
    PG_GRID_STRIDE(i, count) {
        float e = tanh_e(x[i]), q = __fadd_rn(1.0f, e);
        dx[i] = __fmul_rn(dy[i], __fdiv_rn(__fmul_rn(4.0f, e), __fmul_rn(q, q)));
    }
}

__global__ void silu_fwd_kernel(int64_t count, const float *x, float *y)
{
    float e;
    PG_GRID_STRIDE(i, count) y[i] = __fmul_rn(x[i], sig_of(x[i], &e));
}

/* d(x s)/dx = s (1 + x e s) */
__global__ void silu_bwd_in_kernel(int64_t count, const float *x, const float *dy, float *dx)
{
    float e;
    PG_GRID_STRIDE(i, count) {
        float s = sig_of(x[i], &e);
        dx[i] = __fmul_rn(dy[i], __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(x[i], __fmul_rn(e, s)))));
    }
}

/* pg_<name>(c, count, x, y) and pg_<name>_bwd_in(c, count, x, dy, dx) over their kernels */
#define ACT_OPS(name)                                                                   \
    int pg_##name##_fwd(pg_ctx *c, int64_t count, const float *x, float *y)             \
    {                                                                                   \
        if (count_ok(#name "_fwd", count))                                              \
            return 1;                                                                   \
        if (!count)                                                                     \
            return 0;                                                                   \
        name##_fwd_kernel<<<GRID(count)>>>(count, x, y);                                \
        LAUNCH_CHECK(#name "_fwd_kernel");                                              \
        return 0;                                                                       \
    }                                                                                   \
    int pg_##name##_bwd_in(pg_ctx *c, int64_t count, const float *x, const float *dy, float *dx) \
    {                                                                                   \
        if (count_ok(#name "_bwd_in", count))                                           \
            return 1;                                                                   \
        if (!count)                                                                     \
            return 0;                                                                   \
        name##_bwd_in_kernel<<<GRID(count)>>>(count, x, dy, dx);                        \
        LAUNCH_CHECK(#name "_bwd_in_kernel");                                           \
        return 0;                                                                       \
    }

ACT_OPS(sigmoid)
ACT_OPS(tanh)
ACT_OPS(silu)

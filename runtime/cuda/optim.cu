/* runtime/cuda/optim.cu — gradient norms and optimizer steps, one tensor at a
 * time, as runtime/cpu/optim.c: elementwise in float with the scalar factors
 * computed on the host in double, in torch.optim's single-tensor operation
 * order. The _rn intrinsics stop nvcc from fusing multiply-adds, so the steps
 * are bitwise equal to the CPU's. pg_sumsq's `out` is a HOST double (the step
 * driver passes &norms[i]); it synchronises the stream. A weight with a bf16
 * shadow (shadow.cu) gets its shadow written in the same kernel (`sh`, NULL
 * for none): bf16(w) of the new w, nothing else changes. */
#include <cuda_bf16.h>
#include <math.h>

#include "cuda_common.h"
#include "op_args.h"

#define GRID(count) pg_cuda_blocks(count, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream

struct sq_term {
    const float *g;
    __device__ double operator()(int64_t i) const { return (double)g[i] * g[i]; }
};

/* *out = sum g^2 in a fixed order (double). */
int pg_sumsq(pg_ctx *c, int64_t count, const float *g, double *out)
{
    if (pg_args_count("sumsq", count))
        return 1;
    sq_term f = {g};
    if (c->in_run) /* inside a step's run of compute: deferred (step.cu) */
        return pg_cuda_reduce_deferred(c, count, f, 1.0, 0.0);
    return pg_cuda_reduce_to_host(c, count, f, out);
}

__global__ void scale_kernel(int64_t count, float *x, float a)
{
    PG_GRID_STRIDE(i, count) x[i] = x[i] * a;
}

int pg_scale(pg_ctx *c, float *x, float a, int64_t count)
{
    if (pg_args_count("scale", count))
        return 1;
    if (!count)
        return 0;
    scale_kernel<<<GRID(count)>>>(count, x, a);
    LAUNCH_CHECK("scale_kernel");
    return 0;
}

/* d = g + wd w;  buf = d (first step) or momentum buf + d;  w += -lr d */
__device__ __forceinline__ void sgd_elem(int64_t i, float *w, const float *g, float *buf, float lr,
                                         float momentum, float weight_decay, int first_step, __nv_bfloat16 *sh)
{
    float d = g[i];
    if (weight_decay != 0.0f)
        d = __fadd_rn(d, __fmul_rn(weight_decay, w[i]));
    if (momentum != 0.0f) {
        d = first_step ? d : __fadd_rn(__fmul_rn(buf[i], momentum), d);
        buf[i] = d;
    }
    float wn = __fadd_rn(w[i], __fmul_rn(-lr, d));
    w[i] = wn;
    if (sh)
        sh[i] = __float2bfloat16_rn(wn);
}

__global__ void sgd_step_kernel(int64_t count, float *w, const float *g, float *buf, float lr,
                                float momentum, float weight_decay, int first_step, __nv_bfloat16 *sh)
{
    PG_GRID_STRIDE(i, count) sgd_elem(i, w, g, buf, lr, momentum, weight_decay, first_step, sh);
}

/* Inside a step: lr and the first-step flag from the step's device values. */
__global__ void sgd_step_dev_kernel(int64_t count, float *w, const float *g, float *buf,
                                    const pg_cuda_stepvals *sv, float momentum, float weight_decay,
                                    __nv_bfloat16 *sh)
{
    float lr = (float)sv->lr;
    int first_step = sv->first_step;
    PG_GRID_STRIDE(i, count) sgd_elem(i, w, g, buf, lr, momentum, weight_decay, first_step, sh);
}

/* The per-step values of this step (step.cu) are what the op was given. */
static int step_values_match(const pg_ctx *c, float lr, float beta1, float beta2, int64_t t)
{
    return c->in_step && lr == c->info.lr && beta1 == c->info.beta1 && beta2 == c->info.beta2 &&
           t == c->info.step + 1;
}

int pg_sgd_step(pg_ctx *c, int64_t count, float *w, const float *g, float *buf,
                float lr, float momentum, float weight_decay, int first_step)
{
    if (pg_args_count("sgd_step", count))
        return 1;
    if (momentum != 0.0f && !buf)
        return PG_RT_FAIL("sgd_step: momentum %g needs a momentum buffer", (double)momentum);
    if (!count)
        return 0;
    __nv_bfloat16 *sh = (__nv_bfloat16 *)pg_cuda_shadow_for_update(c, w, count);
    if (c->in_step && lr == c->info.lr && first_step == (c->info.step == 0)) {
        sgd_step_dev_kernel<<<GRID(count)>>>(count, w, g, buf, c->sv_dev, momentum, weight_decay, sh);
        LAUNCH_CHECK("sgd_step_dev_kernel");
        return 0;
    }
    if (pg_cuda_capturing(c))
        return PG_RT_FAIL("sgd_step: lr %g / first_step %d are not this step's (step %lld): cannot be captured",
                          (double)lr, first_step, (long long)c->info.step);
    sgd_step_kernel<<<GRID(count)>>>(count, w, g, buf, lr, momentum, weight_decay, first_step, sh);
    LAUNCH_CHECK("sgd_step_kernel");
    return 0;
}

/* w *= decay; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g g;
 * w += neg_step m / (sqrt(v) / sqrt(bc2) + eps) */
__device__ __forceinline__ void adamw_elem(int64_t i, float *w, const float *g, float *m, float *v, float decay,
                                           float b1, float one_b1, float b2, float one_b2, float eps,
                                           float neg_step, float bc2_sqrt, __nv_bfloat16 *sh)
{
    float gi = g[i];
    float wi = __fmul_rn(w[i], decay);
    float mi = __fadd_rn(__fmul_rn(m[i], b1), __fmul_rn(one_b1, gi));
    float vi = __fadd_rn(__fmul_rn(v[i], b2), __fmul_rn(__fmul_rn(one_b2, gi), gi));
    float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
    float wn = __fadd_rn(wi, __fdiv_rn(__fmul_rn(neg_step, mi), den));
    w[i] = wn;
    if (sh)
        sh[i] = __float2bfloat16_rn(wn);
    m[i] = mi;
    v[i] = vi;
}

__global__ void adamw_step_kernel(int64_t count, float *w, const float *g, float *m, float *v, float decay,
                                  float b1, float one_b1, float b2, float one_b2, float eps,
                                  float neg_step, float bc2_sqrt, __nv_bfloat16 *sh)
{
    PG_GRID_STRIDE(i, count)
        adamw_elem(i, w, g, m, v, decay, b1, one_b1, b2, one_b2, eps, neg_step, bc2_sqrt, sh);
}

/* Inside a step: decay, neg_step and bc2_sqrt from the step's device values;
 * decay = (float)(1 - lr*wd) in double with _rn, the host's operations. */
__global__ void adamw_step_dev_kernel(int64_t count, float *w, const float *g, float *m, float *v,
                                      const pg_cuda_stepvals *sv, double weight_decay, float b1, float one_b1,
                                      float b2, float one_b2, float eps, __nv_bfloat16 *sh)
{
    float decay = (float)__dsub_rn(1.0, __dmul_rn(sv->lr, weight_decay));
    float neg_step = sv->neg_step, bc2_sqrt = sv->bc2_sqrt;
    PG_GRID_STRIDE(i, count)
        adamw_elem(i, w, g, m, v, decay, b1, one_b1, b2, one_b2, eps, neg_step, bc2_sqrt, sh);
}

int pg_adamw_step(pg_ctx *c, int64_t count, float *w, const float *g, float *m, float *v,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t)
{
    if (pg_args_adamw(count, t))
        return 1;
    if (!count)
        return 0;
    float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    float one_b1 = (float)(1.0 - (double)beta1);
    float one_b2 = (float)(1.0 - (double)beta2);
    __nv_bfloat16 *sh = (__nv_bfloat16 *)pg_cuda_shadow_for_update(c, w, count);
    if (step_values_match(c, lr, beta1, beta2, t)) {
        adamw_step_dev_kernel<<<GRID(count)>>>(count, w, g, m, v, c->sv_dev, (double)weight_decay, beta1, one_b1,
                                               beta2, one_b2, eps, sh);
        LAUNCH_CHECK("adamw_step_dev_kernel");
        return 0;
    }
    if (pg_cuda_capturing(c))
        return PG_RT_FAIL("adamw_step: lr %g / t %lld are not this step's (step %lld): cannot be captured",
                          (double)lr, (long long)t, (long long)c->info.step);
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    float neg_step = (float)(-((double)lr / bc1));
    float bc2_sqrt = (float)sqrt(bc2);
    adamw_step_kernel<<<GRID(count)>>>(count, w, g, m, v, decay, beta1, one_b1, beta2, one_b2, eps,
                                       neg_step, bc2_sqrt, sh);
    LAUNCH_CHECK("adamw_step_kernel");
    return 0;
}

/* runtime/cuda/shadow.cu — bf16 shadow weights (the PG_CUDA_K_SHADOW path).
 *
 * With precision = bf16 every GEMM rounds both operands to bf16 into a
 * workspace first (linear.cu). For a weight that is one extra read of the f32
 * weight and one write per GEMM that uses it: per step, the forward, the
 * recomputed forward and the input-gradient GEMM of every micro-batch. The
 * generator plans a bf16 copy of each GEMM weight in the arena
 * (pg_stage_desc.shadows) and main.c registers them here; from then on:
 *  - registering rounds the weight into its shadow (on the stream);
 *  - a pg_copy_to_dev into a weight (init, --load, --resume) re-rounds it;
 *  - pg_param_written (a tied weight received from its owner) re-rounds it;
 *  - the optimizer steps (optim.cu) write bf16(w) along with w, in the same
 *    kernel: no extra pass.
 * pg_cuda_gemm then reads the shadow instead of rounding the weight again.
 * The values are the ones the rounding would give (__float2bfloat16_rn of the
 * same f32), so the GEMMs see the same operands either way. */
#include <cuda_bf16.h>
#include <stdlib.h>

#include "cuda_common.h"
#include "op_args.h"

__global__ void shadow_round_kernel(int64_t count, const float *w, __nv_bfloat16 *s)
{
    PG_GRID_STRIDE(i, count) s[i] = __float2bfloat16_rn(w[i]);
}

static int shadow_round(pg_ctx *c, const struct pg_cuda_shadow *s)
{
    if (s->count <= 0)
        return 0;
    shadow_round_kernel<<<pg_cuda_blocks(s->count, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(
        s->count, s->w, (__nv_bfloat16 *)s->shadow);
    LAUNCH_CHECK("shadow_round_kernel");
    return 0;
}

int pg_shadow_register(pg_ctx *c, const float *w, int64_t count, void *shadow)
{
    if (!w || !shadow || count < 0)
        return PG_RT_FAIL("shadow_register: bad weight %p, shadow %p or count %lld", (const void *)w, shadow,
                          (long long)count);
    if ((uintptr_t)shadow % 16 != 0)
        return PG_RT_FAIL("shadow_register: the bf16 shadow at %p is not 16-byte aligned (the arena plan aligns "
                          "every buffer to 64 bytes: is the stage file from another pipegen?)", shadow);
    const char *sb = (const char *)shadow, *wb = (const char *)w;
    if (sb < wb + count * 4 && wb < sb + count * 2)
        return PG_RT_FAIL("shadow_register: the shadow overlaps its weight");
    for (int i = 0; i < c->nshadows; i++)
        if (c->shadows[i].w == w)
            return PG_RT_FAIL("shadow_register: weight %p has a shadow already", (const void *)w);
    if (c->nshadows == c->shadows_cap) {
        int cap = c->shadows_cap ? 2 * c->shadows_cap : 64;
        struct pg_cuda_shadow *n = (struct pg_cuda_shadow *)realloc(c->shadows, (size_t)cap * sizeof *n);
        if (!n)
            return PG_RT_FAIL("out of memory for %d shadow weights", cap);
        c->shadows = n;
        c->shadows_cap = cap;
    }
    struct pg_cuda_shadow *s = &c->shadows[c->nshadows++];
    s->w = w;
    s->shadow = shadow;
    s->count = count;
    return shadow_round(c, s);
}

int pg_param_written(pg_ctx *c, const float *w, int64_t count)
{
    if (pg_args_count("param_written", count))
        return 1;
    return pg_cuda_shadow_touch(c, w, (size_t)count * sizeof(float));
}

/* The CPU runtime packs these weights for its GEMM (runtime/cpu/wpack.c);
 * cuBLAS reads W as it lies, so there is nothing to reserve here. */
int pg_gemm_weights_plan(pg_ctx *c, int stage, int n, const pg_gemm_weight *w, FILE *out)
{
    (void)c, (void)out;
    if (n < 0 || (n && !w))
        return PG_RT_FAIL("gemm_weights_plan: stage %d names %d weights at %p", stage, n, (const void *)w);
    return 0;
}

int pg_cuda_shadow_touch(pg_ctx *c, const void *dst, size_t bytes)
{
    const char *d = (const char *)dst;
    for (int i = 0; i < c->nshadows; i++) {
        const struct pg_cuda_shadow *s = &c->shadows[i];
        const char *w = (const char *)s->w;
        if (bytes && d < w + s->count * 4 && w < d + bytes && shadow_round(c, s))
            return 1;
    }
    return 0;
}

const void *pg_cuda_shadow_of(const pg_ctx *c, const float *p, int64_t span)
{
    if (!pg_cuda_fast(c, PG_CUDA_K_SHADOW) || span <= 0)
        return NULL;
    for (int i = 0; i < c->nshadows; i++) {
        const struct pg_cuda_shadow *s = &c->shadows[i];
        if (p >= s->w && p + span <= s->w + s->count)
            return (const __nv_bfloat16 *)s->shadow + (p - s->w);
    }
    return NULL;
}

void *pg_cuda_shadow_for_update(const pg_ctx *c, const float *w, int64_t count)
{
    for (int i = 0; i < c->nshadows; i++)
        if (c->shadows[i].w == w && c->shadows[i].count == count)
            return c->shadows[i].shadow;
    return NULL;
}

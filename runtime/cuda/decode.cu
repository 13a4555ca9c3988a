/* runtime/cuda/decode.cu — the ops of generation with the KV cache
 * (pg_attn_decode, pg_pos_embed_dec; runtime/core/decode.c), which the CUDA
 * runtime does not implement: a stage refuses --generate before the first step
 * (runtime/core/generate.c), and a call that comes here anyway fails with
 * that said. Generation runs on the CPU runtime (docs/gpu.md). */
#include "cuda_common.h"

#define NOT_HERE(op) \
    PG_RT_FAIL("%s: generation with the KV cache is not implemented on the CUDA runtime; generate with the CPU " \
               "runtime's stages", op)

int pg_pos_embed_dec(pg_ctx *c, int64_t seqs, int64_t t, int64_t seq, int64_t d, const int32_t *rows,
                     const float *x, const float *table, float *y)
{
    (void)c, (void)seqs, (void)t, (void)seq, (void)d, (void)rows, (void)x, (void)table, (void)y;
    return NOT_HERE("pos_embed_dec");
}

int pg_attn_decode(pg_ctx *c, int64_t seqs, int64_t t, int64_t batch, const pg_attn_dims *s, const int32_t *rows,
                   float *q, float *k, const float *v, float *kc, float *vc, float *ctx)
{
    (void)c, (void)seqs, (void)t, (void)batch, (void)s, (void)rows, (void)q, (void)k, (void)v, (void)kc, (void)vc,
        (void)ctx;
    return NOT_HERE("attn_decode");
}

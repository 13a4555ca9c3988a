/* runtime/core/pg_bf16ws.h — the bytes of the bf16 GEMM operand copies, as the
 * memory plan reserves them (codegen/gen/gen_prepare.c) and the CUDA backend
 * uses them (runtime/cuda/linear.cu, "the one GEMM entry").
 *
 * With precision = bf16 the CUDA backend rounds each GEMM operand that is not
 * a weight's bf16 shadow into a workspace before the product: its whole stored
 * span, two operands one after the other, the second at a 256-byte boundary;
 * a single matrix whose leading dimension is not a multiple of 8 elements (the
 * logits' 50257) is copied with its leading dimension padded to a multiple of
 * 64 elements. The plan makes that workspace one whole-step buffer of the
 * arena, sized by the functions below for the largest product of the stage:
 * they bound what linear.cu needs (the shadows read in place, the padding
 * counted), and a product that needs more (kernel paths turned off with
 * PIPE_CUDA_KERNELS: then the weights are copied too) gets its copies beside
 * the arena, saying so once. The CPU runtime rounds as it packs and leaves
 * the buffer unused, as it does the shadows. */
#ifndef PG_BF16WS_H
#define PG_BF16WS_H

#include <stdint.h>

/* Elements the copy of one column-major matrix of rows x cols (leading
 * dimension = rows, as every activation operand here) takes: padded to 64
 * rows when rows is not a multiple of 8 (linear.cu's pg_bf16_padded_ld). */
static inline int64_t pg_bf16ws_matrix(int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    return cols * (rows % 8 ? (rows + 63) / 64 * 64 : rows);
}

/* Bytes of two copies a elements and b elements, the second 256-byte aligned. */
static inline int64_t pg_bf16ws_pair(int64_t a, int64_t b)
{
    return (a * 2 + 255) / 256 * 256 + b * 2;
}

/* A linear op over n rows, in -> out features, its weight a shadow: the
 * forward copies x, the input gradient dy, the weight gradient x and dy. */
static inline int64_t pg_bf16ws_linear(int64_t n, int64_t in, int64_t out)
{
    return pg_bf16ws_pair(pg_bf16ws_matrix(in, n), pg_bf16ws_matrix(out, n));
}

/* The per-head products of one sample of attention (attention.cu, attn_core.cu):
 * each operand spans at most T rows of its tensor, whose leading dimension is
 * at most ld elements, or the sample's h score blocks of T x T; one head's
 * product alone (a batch of 1) pads a leading dimension that is not a
 * multiple of 8 as pg_bf16ws_matrix does. */
static inline int64_t pg_bf16ws_heads(int64_t T, int64_t ld, int64_t h)
{
    int64_t rows = pg_bf16ws_matrix(ld, T), scores = h * T * T;
    if (pg_bf16ws_matrix(T, T) > scores)
        scores = pg_bf16ws_matrix(T, T);
    return pg_bf16ws_pair(rows, rows > scores ? rows : scores);
}

#endif

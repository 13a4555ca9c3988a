/* runtime/cuda/linear.cu — linear layer through pg_cuda_gemm (cublasSgemm, or
 * cublasGemmEx on bf16 operands with precision = bf16), the bf16 forward
 * with its bias in a cuBLASLt epilogue, the bias broadcast of the other
 * cases, and the fixed-order column sums for the bias gradient.
 *
 * Row-major <-> column-major: cuBLAS is column-major. A row-major matrix
 * M[R,C] (leading dimension C) is, read column-major with ld C, the matrix
 * M^T[C,R]. So every row-major product Z = A B is computed as the column-major
 * product Z^T = B^T A^T, where each operand's "free" view is already the
 * transpose of the row-major matrix; the mappings are derived per call below. */
#include <cuda_bf16.h>
#include <stdio.h>
#include <string.h>

#include "cuda_common.h"
#include "op_args.h"
#include "kernel_ref.h"

/* ---- the one GEMM entry (pg_cuda_gemm, cuda_common.h) ---------------------
 * f32: exactly cublasSgemm / cublasSgemmStridedBatched. bf16 (precision =
 * bf16): each operand is rounded to bf16 (round to nearest even), then
 * cublasGemmEx / cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F multiply
 * the bf16 values exactly and accumulate in f32 into the f32 C. Weights,
 * gradients and every other op stay f32. Where a bf16 operand comes from:
 *  - a weight with a bf16 shadow (shadow.cu, PG_CUDA_K_SHADOW): the shadow,
 *    with the weight's own layout (no rounding pass);
 *  - else a copy in the operand workspace, starting at its base (256-byte
 *    aligned, so operand alignment is the same in every stage process): the
 *    operand's whole stored span (every batch, every column up to its leading
 *    dimension); except (PG_CUDA_K_PAD) a single matrix whose leading
 *    dimension is not a multiple of 8 elements (the logits' 50257), copied
 *    with its leading dimension padded to a multiple of 64 elements
 *    (pg_bf16_padded_ld), zeros in the padding: tensor-core kernels need
 *    16-byte aligned columns, and the copy is made anyway, so the padding
 *    costs nothing. */

__global__ void f32_to_bf16_kernel(int64_t count, const float *x, __nv_bfloat16 *y)
{
    PG_GRID_STRIDE(i, count) y[i] = __float2bfloat16_rn(x[i]);
}

/* y[col * ldy + row] = bf16(x[col * ldx + row]) for row < rows, 0 for rows <= row < ldy */
__global__ void f32_to_bf16_pitched_kernel(int64_t rows, int64_t cols, const float *x, int64_t ldx,
                                           __nv_bfloat16 *y, int64_t ldy)
{
    for (int64_t col = blockIdx.y; col < cols; col += gridDim.y)
        for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < ldy;
             row += (int64_t)gridDim.x * blockDim.x)
            y[col * ldy + row] = row < rows ? __float2bfloat16_rn(x[col * ldx + row]) : __float2bfloat16_rn(0.0f);
}

/* Elements a column-major operand of rows x cols (leading dimension ld)
 * spans, over `batch` matrices `stride` apart (batch 0: one). */
static int64_t operand_span(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int batch)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    return (batch > 1 ? (int64_t)(batch - 1) * stride : 0) + (cols - 1) * ld + rows;
}

int pg_bf16_workspace(pg_ctx *c, void *p, int64_t bytes)
{
    if (!p || bytes <= 0 || (uintptr_t)p % 256)
        return PG_RT_FAIL("bf16_workspace: bad buffer %p of %lld bytes (the plan aligns to 256)", p, (long long)bytes);
    c->bf16_plan = p;
    c->bf16_plan_bytes = (size_t)bytes;
    return 0;
}

/* Where the operand copies of one product go: the planned buffer when they
 * fit (pg_bf16ws.h bounds every product of the default kernel paths), else
 * memory of the backend's own, allocated outside any graph capture and said
 * once where a plan was too small. */
static int bf16_workspace(pg_ctx *c, size_t bytes, void **out)
{
    if (bytes > c->bf16_need_max)
        c->bf16_need_max = bytes;
    if (c->bf16_plan && bytes <= c->bf16_plan_bytes) {
        *out = c->bf16_plan;
        return 0;
    }
    if (bytes > c->bf16_ws_bytes) {
        if (c->bf16_plan)
            fprintf(stderr, "note: a bf16 GEMM's operand copies take %zu bytes, more than the %zu the memory plan "
                    "reserved (a kernel path turned off with PIPE_CUDA_KERNELS copies the weights too): they go "
                    "beside the arena\n", bytes, c->bf16_plan_bytes);
        if (pg_cuda_capturing(c))
            return PG_RT_FAIL("the bf16 operand workspace must grow from %zu to %zu bytes while step %lld is "
                              "captured as a CUDA graph; run with --no-graph",
                              c->bf16_ws_bytes, bytes, (long long)c->info.step);
        CUDA_CHECK(cudaStreamSynchronize(c->stream));
        pg_cuda_drop_graphs(c);
        if (c->bf16_ws) {
            CUDA_CHECK(cudaFree(c->bf16_ws));
            c->bf16_ws = NULL;
            c->bf16_ws_bytes = 0;
        }
        cudaError_t e = cudaMalloc(&c->bf16_ws, bytes);
        if (e != cudaSuccess) {
            cudaGetLastError();
            c->bf16_ws = NULL;
            size_t fr = 0, tot = 0;
            if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
                fr = tot = 0;
            return PG_RT_FAIL("cannot allocate %zu bytes of GPU memory (free %zu of %zu) for the bf16 GEMM "
                              "operands: %s", bytes, fr, tot, cudaGetErrorString(e));
        }
        c->bf16_ws_bytes = bytes;
    }
    *out = c->bf16_ws;
    return 0;
}

/* One bf16 operand of a GEMM: stored rows x cols (column-major, leading
 * dimension ld, `batch` matrices `stride` apart) in f32 at src; what the GEMM
 * reads: p with leading dimension ld16 (and the same stride), and the
 * workspace elements its copy needs (0: a shadow, no copy). */
struct bf16_operand {
    const float *src;
    int64_t rows, cols, ld, stride, span;
    int batch;
    const __nv_bfloat16 *p;
    int64_t ld16, ws_elems;
};

static void bf16_operand_plan(pg_ctx *c, struct bf16_operand *o)
{
    o->span = operand_span(o->rows, o->cols, o->ld, o->stride, o->batch);
    o->ld16 = o->ld;
    o->ws_elems = o->span;
    o->p = (const __nv_bfloat16 *)pg_cuda_shadow_of(c, o->src, o->span);
    if (o->p) {
        o->ws_elems = 0;
        pg_cuda_count(c, PG_CUDA_K_SHADOW);
    }
    else if (pg_cuda_fast(c, PG_CUDA_K_PAD) && o->batch == 0 && o->span > 0) {
        o->ld16 = pg_bf16_padded_ld(o->rows, o->ld);
        o->ws_elems = o->cols * o->ld16;
    }
}

static int bf16_operand_fill(pg_ctx *c, struct bf16_operand *o, __nv_bfloat16 *dst)
{
    if (o->p || o->span <= 0) /* a shadow (or nothing to read) */
        return 0;
    o->p = dst;
    if (o->ld16 == o->ld) {
        f32_to_bf16_kernel<<<pg_cuda_blocks(o->span, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(o->span, o->src,
                                                                                                        dst);
        LAUNCH_CHECK("f32_to_bf16_kernel");
        return 0;
    }
    pg_cuda_count(c, PG_CUDA_K_PAD);
    f32_to_bf16_pitched_kernel<<<PG_GEOM(pg_geom_pitched(o->ld16, o->cols)), 0, c->stream>>>(o->rows, o->cols, o->src,
                                                                                          o->ld, dst, o->ld16);
    LAUNCH_CHECK("f32_to_bf16_pitched_kernel");
    return 0;
}

/* The bf16 operands of op(A) op(B) (m x n, inner dimension k): a and b say
 * where each is read (a shadow, or a copy made here on the stream). */
static int bf16_operands(pg_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *A,
                         int lda, long long sA, const float *B, int ldb, long long sB, int batch,
                         struct bf16_operand *a, struct bf16_operand *b)
{
    *a = {A, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda, sA, 0, batch, NULL, 0, 0};
    *b = {B, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb, sB, 0, batch, NULL, 0, 0};
    bf16_operand_plan(c, a);
    bf16_operand_plan(c, b);
    if (a->ld16 > 2147483647LL || b->ld16 > 2147483647LL)
        return PG_RT_FAIL("a padded bf16 leading dimension (%lld, %lld) does not fit cuBLAS's int", (long long)a->ld16,
                          (long long)b->ld16);
    size_t offB = ((size_t)a->ws_elems * sizeof(__nv_bfloat16) + 255) / 256 * 256;
    void *ws = NULL;
    if (a->ws_elems + b->ws_elems > 0 &&
        bf16_workspace(c, offB + (size_t)b->ws_elems * sizeof(__nv_bfloat16), &ws))
        return 1;
    return bf16_operand_fill(c, a, (__nv_bfloat16 *)ws) ||
           bf16_operand_fill(c, b, (__nv_bfloat16 *)((char *)ws + offB));
}

/* cuBLAS's tensor-core kernels read 16 bytes at a time along an operand's
 * contiguous dimension: with the logits' 50257 (odd) as the inner dimension k
 * of an operand stored along it, cuBLAS fell back to a kernel of 1-element
 * alignment (on an H200: the logits' input gradient 1.18 ms a micro-batch, 134
 * TFLOP/s). So, on the pad path, such a product is the aligned first k & ~7
 * terms, then the last few with beta 1: a fixed split, the same two calls
 * (hence the same bits) for the same shapes (then 0.20 ms, nvjet's split-K
 * kernel, and 8 us for the rest). */
static int bf16_gemm_k(pg_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha,
                       const __nv_bfloat16 *ap, int64_t lda, const __nv_bfloat16 *bp, int64_t ldb, const float *beta,
                       float *C, int ldc)
{
    int kc = k;
    if (pg_cuda_fast(c, PG_CUDA_K_PAD) && k > 8 && k % 8 && (ta == CUBLAS_OP_T || tb == CUBLAS_OP_N))
        kc = k & ~7;
    CUBLAS_CHECK(cublasGemmEx(c->blas, ta, tb, m, n, kc, alpha, ap, CUDA_R_16BF, (int)lda, bp, CUDA_R_16BF, (int)ldb,
                              beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (kc == k)
        return 0;
    pg_cuda_count(c, PG_CUDA_K_PAD);
    const float one = 1.0f;
    const __nv_bfloat16 *a2 = ap + (ta == CUBLAS_OP_N ? (int64_t)kc * lda : (int64_t)kc);
    const __nv_bfloat16 *b2 = bp + (tb == CUBLAS_OP_N ? (int64_t)kc : (int64_t)kc * ldb);
    CUBLAS_CHECK(cublasGemmEx(c->blas, ta, tb, m, n, k - kc, alpha, a2, CUDA_R_16BF, (int)lda, b2, CUDA_R_16BF, (int)ldb,
                              &one, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

/* The logits' forward, whose C is 50257 (m) rows, got a 1-element-aligned
 * kernel on the H200 (1.68 ms a micro-batch, 94 TFLOP/s); writing C through an
 * aligned staging C did not change cuBLAS's choice (2.0 ms with the copies,
 * measured and removed), so the odd m itself is the suspect. On the msplit
 * path such a product is the first m & ~7 rows of C, then the last few rows
 * (the rows of op(A) and of C from there): every element of C is still one
 * call's dot product over all of k (no added sum), and the two calls are fixed
 * by the shapes, so the bits depend on the shapes alone as before. On the
 * H200: 1.68 -> 1.00 ms a micro-batch (a Hopper kernel instead of the
 * 1-element-aligned one), the step 1.049x (bench/README.md, "GPU"). */
static int bf16_gemm_ex(pg_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha,
                        const struct bf16_operand *a, const struct bf16_operand *b, const float *beta, float *C, int ldc)
{
    int mc = m;
    if (pg_cuda_fast(c, PG_CUDA_K_MSPLIT) && m > 8 && m % 8)
        mc = m & ~7;
    if (bf16_gemm_k(c, ta, tb, mc, n, k, alpha, a->p, a->ld16, b->p, b->ld16, beta, C, ldc))
        return 1;
    if (mc == m)
        return 0;
    pg_cuda_count(c, PG_CUDA_K_MSPLIT);
    const __nv_bfloat16 *a2 = a->p + (ta == CUBLAS_OP_N ? (int64_t)mc : (int64_t)mc * a->ld16);
    return bf16_gemm_k(c, ta, tb, m - mc, n, k, alpha, a2, a->ld16, b->p, b->ld16, beta, C + mc, ldc);
}

int pg_cuda_gemm(pg_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha,
                 const float *A, int lda, long long sA, const float *B, int ldb, long long sB, const float *beta,
                 float *C, int ldc, long long sC, int batch)
{
    if (c->precision == 0) {
        if (batch == 0)
            CUBLAS_CHECK(cublasSgemm(c->blas, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc));
        else
            CUBLAS_CHECK(cublasSgemmStridedBatched(c->blas, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C,
                                                   ldc, sC, batch));
        return 0;
    }
    struct bf16_operand a, b;
    if (bf16_operands(c, ta, tb, m, n, k, A, lda, sA, B, ldb, sB, batch, &a, &b))
        return 1;
    c->bf16_gemms++;
    if (batch == 0)
        return bf16_gemm_ex(c, ta, tb, m, n, k, alpha, &a, &b, beta, C, ldc);
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(c->blas, ta, tb, m, n, k, alpha, a.p, CUDA_R_16BF, (int)a.ld16, sA, b.p,
                                            CUDA_R_16BF, (int)b.ld16, sB, beta, C, CUDA_R_32F, ldc, sC, batch,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

/* ---- cuBLASLt: the bias in the epilogue (PG_CUDA_K_LT) ----------------------
 * C[m,n] = op(A) op(B) + bias[m] on every column, bf16 operands, f32 C, f32
 * bias, f32 accumulation (CUBLAS_COMPUTE_32F): the linear forward of precision
 * = bf16 without the bias broadcast pass before it (which writes C and makes
 * the GEMM read it back: two passes over [n, out] f32 saved). The algorithm is
 * chosen once per shape by cublasLtMatmulAlgoGetHeuristic with the minimum
 * alignment of A, B, C and D set to 16 bytes and a bias pointer that is
 * exactly 16-byte aligned (the heuristic reads the bias pointer's alignment):
 * so the choice depends on the shapes alone, never on where the arena plan
 * put the buffers, and every stage process picks the same kernel (the real
 * pointers are at least 16-byte aligned: checked, else the reference path).
 * Split-K reduction schemes are cuBLASLt's own, sequential by design (INPLACE
 * orders its parts with counters; the others reduce in a separate pass): no
 * atomics. */

/* 0: done; 1: failed (printed); 2: cuBLASLt offers nothing here, use the reference path. */
#define LT_FALLBACK 2

struct lt_objs { /* created per call (host-only), destroyed on every path */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
};

static void lt_objs_free(struct lt_objs *o)
{
    if (o->pref)
        cublasLtMatmulPreferenceDestroy(o->pref);
    if (o->lc)
        cublasLtMatrixLayoutDestroy(o->lc);
    if (o->lb)
        cublasLtMatrixLayoutDestroy(o->lb);
    if (o->la)
        cublasLtMatrixLayoutDestroy(o->la);
    if (o->op)
        cublasLtMatmulDescDestroy(o->op);
}

/* The cached algorithm for this key (NULL: cuBLASLt offered none). */
static int lt_algo(pg_ctx *c, const int key[8], struct lt_objs *o, const cublasLtMatmulAlgo_t **algo)
{
    for (int i = 0; i < c->nlt_plans; i++)
        if (!memcmp(c->lt_plans[i].key, key, sizeof c->lt_plans[i].key)) {
            *algo = c->lt_plans[i].ok ? &c->lt_plans[i].algo : NULL;
            return 0;
        }
    uint64_t wsb = PG_CUDA_BLAS_WS;
    uint32_t align = 16;
    const void *canon_bias = (const char *)c->blas_ws + 16; /* 256-byte aligned base + 16: exactly 16 */
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&o->pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof align));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof align));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof align));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof align));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(o->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &canon_bias, sizeof canon_bias));
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    int nres = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c->lt, o->op, o->la, o->lb, o->lc, o->lc, o->pref, 1, &res, &nres);
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE)
        return pg_cublas_fail(__FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic", st);
    int ok = st == CUBLAS_STATUS_SUCCESS && nres > 0 && res.state == CUBLAS_STATUS_SUCCESS;
    if (!ok) /* once per shape (the plan is cached): the same choice in every stage process */
        fprintf(stderr, "note: cuBLASLt offers no bf16 GEMM with a bias epilogue for m=%d n=%d k=%d (%s): the bias is "
                "broadcast before the GEMM instead (PIPE_CUDA_KERNELS without lt does this everywhere)\n",
                key[2], key[3], key[4], st != CUBLAS_STATUS_SUCCESS ? pg_cublas_status_name(st) : "no algorithm");
    /* a full cache (more shapes than any model has) recycles its last entry */
    struct pg_cuda_lt_plan *pl = &c->lt_plans[c->nlt_plans < PG_CUDA_LT_PLANS ? c->nlt_plans++ : PG_CUDA_LT_PLANS - 1];
    memcpy(pl->key, key, sizeof pl->key);
    pl->ok = ok;
    pl->algo = res.algo;
    *algo = ok ? &pl->algo : NULL;
    return 0;
}

static int lt_gemm_bias(pg_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *A,
                        int lda, const float *B, int ldb, const float *bias, float *C, int ldc)
{
    struct bf16_operand a, b;
    if (bf16_operands(c, ta, tb, m, n, k, A, lda, 0, B, ldb, 0, 0, &a, &b))
        return 1;
    if (((uintptr_t)a.p | (uintptr_t)b.p | (uintptr_t)bias | (uintptr_t)C) % 16)
        return LT_FALLBACK;
    struct lt_objs o;
    memset(&o, 0, sizeof o);
    int key[8] = {(int)ta, (int)tb, m, n, k, (int)a.ld16, (int)b.ld16, ldc};
    int32_t ta32 = ta, tb32 = tb;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    int32_t bias_type = CUDA_R_32F;
    const cublasLtMatmulAlgo_t *algo = NULL;
    const float one = 1.0f, zero = 0.0f;
    int rc = 1;
    cublasStatus_t st;
#define LT_TRY(call)                                                                                                  \
    if ((st = (call)) != CUBLAS_STATUS_SUCCESS) {                                                                     \
        pg_cublas_fail(__FILE__, __LINE__, #call, st);                                                                \
        goto out;                                                                                                     \
    }
    LT_TRY(cublasLtMatmulDescCreate(&o.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_TRY(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta32, sizeof ta32));
    LT_TRY(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb32, sizeof tb32));
    LT_TRY(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    LT_TRY(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
    LT_TRY(cublasLtMatrixLayoutCreate(&o.la, CUDA_R_16BF, (uint64_t)a.rows, (uint64_t)a.cols, a.ld16));
    LT_TRY(cublasLtMatrixLayoutCreate(&o.lb, CUDA_R_16BF, (uint64_t)b.rows, (uint64_t)b.cols, b.ld16));
    LT_TRY(cublasLtMatrixLayoutCreate(&o.lc, CUDA_R_32F, (uint64_t)m, (uint64_t)n, ldc));
    if (lt_algo(c, key, &o, &algo))
        goto out;
    if (!algo) {
        rc = LT_FALLBACK;
        goto out;
    }
    LT_TRY(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    LT_TRY(cublasLtMatmul(c->lt, o.op, &one, a.p, o.la, b.p, o.lb, &zero, C, o.lc, C, o.lc, algo, c->blas_ws,
                          PG_CUDA_BLAS_WS, c->stream));
#undef LT_TRY
    pg_cuda_count(c, PG_CUDA_K_LT);
    c->bf16_gemms++;
    rc = 0;
out:
    lt_objs_free(&o);
    return rc;
}

/* y[n,out] = b[out] on every row */
__global__ void bias_broadcast_kernel(int64_t n, int64_t out, const float *b, float *y)
{
    PG_GRID_STRIDE(k, n * out) y[k] = b[k % out];
}

/* The reference path (PG_CUDA_K_COLSUM off): acc[m] += sum over rows of
 * a[n,m], one thread per column walking the rows in index order in double
 * (the CPU backend's order, so the same bits); adjacent threads read adjacent
 * columns, so each row step is one coalesced load, but only m threads run. */
__global__ void colsum_acc_kernel(int64_t n, int64_t m, const float *a, float *acc)
{
    PG_GRID_STRIDE(j, m) {
        double s = 0.0;
        for (int64_t i = 0; i < n; i++)
            s += a[i * m + j];
        acc[j] += (float)s;
    }
}

int pg_cuda_colsum_acc(pg_ctx *c, int64_t n, int64_t m, const float *a, float *acc)
{
    if (n <= 0 || m <= 0)
        return 0;
    if (pg_cuda_fast(c, PG_CUDA_K_COLSUM))
        return pg_cuda_colsum_chunked(c, n, m, a, acc);
    colsum_acc_kernel<<<pg_cuda_blocks(m, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(n, m, a, acc);
    LAUNCH_CHECK("colsum_acc_kernel");
    return 0;
}

/* y[n,out] = x[n,in] W[out,in]^T + b[out]
 * Column-major, y^T[out,n] = W[out,in] x^T[in,n]:
 *   A = W: row-major [out,in] read column-major is W^T[in,out] (ld in); op T gives W.
 *   B = x: row-major [n,in] read column-major is x^T[in,n] (ld in); op N.
 *   C = y: row-major [n,out] read column-major is y^T[out,n] (ld out).
 *   m = out, n = n, k = in. */
int pg_linear_fwd(pg_ctx *c, int64_t n, int64_t in, int64_t out,
                  const float *x, const float *w, const float *b, float *y)
{
    if (pg_args_linear("linear_fwd", n, in, out))
        return 1;
    if (n == 0 || out == 0)
        return 0;
    if (b && in > 0 && c->precision == 1 && pg_cuda_fast(c, PG_CUDA_K_LT)) { /* the bias in the epilogue */
        int rc = lt_gemm_bias(c, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in, w, (int)in, x, (int)in, b, y,
                              (int)out);
        if (rc != LT_FALLBACK)
            return rc;
    }
    float beta = 0.0f;
    if (b) { /* y starts as the bias, the product adds to it (as the CPU backend) */
        bias_broadcast_kernel<<<pg_cuda_blocks(n * out, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(n, out, b, y);
        LAUNCH_CHECK("bias_broadcast_kernel");
        beta = 1.0f;
    }
    if (in == 0) {
        if (!b)
            CUDA_CHECK(cudaMemsetAsync(y, 0, (size_t)(n * out) * sizeof *y, c->stream));
        return 0;
    }
    const float one = 1.0f;
    return pg_cuda_gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in, &one, w, (int)in, 0, x, (int)in, 0,
                        &beta, y, (int)out, 0, 0);
}

/* dx[n,in] = dy[n,out] W[out,in]
 * Column-major, dx^T[in,n] = W^T[in,out] dy^T[out,n]:
 *   A = W: row-major [out,in] read column-major is W^T[in,out] (ld in); op N.
 *   B = dy: row-major [n,out] read column-major is dy^T[out,n] (ld out); op N.
 *   C = dx: dx^T[in,n] (ld in).  m = in, n = n, k = out. */
int pg_linear_bwd_in(pg_ctx *c, int64_t n, int64_t in, int64_t out,
                     const float *dy, const float *w, float *dx)
{
    if (pg_args_linear("linear_bwd_in", n, in, out))
        return 1;
    if (n == 0 || in == 0)
        return 0;
    if (out == 0) {
        CUDA_CHECK(cudaMemsetAsync(dx, 0, (size_t)(n * in) * sizeof *dx, c->stream));
        return 0;
    }
    const float one = 1.0f, zero = 0.0f;
    return pg_cuda_gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, (int)in, (int)n, (int)out, &one, w, (int)in, 0, dy, (int)out, 0,
                        &zero, dx, (int)in, 0, 0);
}

/* dx[n,in] += dy[n,out] W[out,in]: pg_linear_bwd_in's product with beta 1 */
int pg_linear_bwd_in_add(pg_ctx *c, int64_t n, int64_t in, int64_t out,
                         const float *dy, const float *w, float *dx)
{
    if (pg_args_linear("linear_bwd_in_add", n, in, out))
        return 1;
    if (n == 0 || in == 0 || out == 0)
        return 0;
    const float one = 1.0f;
    return pg_cuda_gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, (int)in, (int)n, (int)out, &one, w, (int)in, 0, dy, (int)out, 0,
                        &one, dx, (int)in, 0, 0);
}

/* The fused forms of pg_ops.h as their two calls (no fused kernel here: cuBLAS
 * writes s, the activation's kernel reads it back). */
int pg_linear_act_fwd(pg_ctx *c, pg_act_fwd_fn *act, int64_t n, int64_t in, int64_t out, const float *x,
                      const float *w, const float *b, float *s, float *y)
{
    if (pg_args_linear_act("linear_act_fwd", (const void *)act, n, in, out))
        return 1;
    if (pg_linear_fwd(c, n, in, out, x, w, b, s))
        return 1;
    return act(c, n * out, s, y);
}

int pg_linear_bwd_in_act(pg_ctx *c, pg_act_bwd_fn *act, int64_t n, int64_t in, int64_t out, const float *dy,
                         const float *w, const float *s, float *g, float *dx)
{
    if (pg_args_linear_act("linear_bwd_in_act", (const void *)act, n, in, out))
        return 1;
    if (pg_linear_bwd_in(c, n, in, out, dy, w, g))
        return 1;
    return act(c, n * in, s, g, dx);
}

/* dW[out,in] += dy[n,out]^T x[n,in]; db[out] += column sums of dy
 * Column-major, dW^T[in,out] += x^T[in,n] dy[n,out]:
 *   A = x: row-major [n,in] read column-major is x^T[in,n] (ld in); op N.
 *   B = dy: row-major [n,out] read column-major is dy^T[out,n] (ld out); op T gives dy.
 *   C = dW: row-major [out,in] read column-major is dW^T[in,out] (ld in); beta 1 accumulates.
 *   m = in, n = out, k = n. */
int pg_linear_bwd_w(pg_ctx *c, int64_t n, int64_t in, int64_t out,
                    const float *x, const float *dy, float *dw, float *db)
{
    if (pg_args_linear("linear_bwd_w", n, in, out))
        return 1;
    if (n == 0 || out == 0)
        return 0;
    if (in > 0) {
        const float one = 1.0f;
        if (pg_cuda_gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, (int)in, (int)out, (int)n, &one, x, (int)in, 0, dy, (int)out, 0,
                         &one, dw, (int)in, 0, 0))
            return 1;
    }
    if (db)
        return pg_cuda_colsum_acc(c, n, out, dy, db);
    return 0;
}

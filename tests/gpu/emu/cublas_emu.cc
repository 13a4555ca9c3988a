/* tests/gpu/emu/cublas_emu.cc — cuBLAS and cuBLASLt on the CPU, for the
 * emulated CUDA runtime (tests/gpu/emu/README.md): every GEMM runtime/cuda
 * makes is checked as cuBLAS checks its arguments (CUBLAS_STATUS_INVALID_VALUE
 * for a leading dimension smaller than the rows, a negative size, ...), its
 * operands' whole spans (leading dimensions, batch strides, padding) must lie
 * inside device allocations and C must not overlap A or B (a GPU would read
 * past the end or race), and the product itself is computed by an
 * independent column-major BLAS: the host's Fortran sgemm_ (OpenBLAS or the
 * reference BLAS, whose conventions are cuBLAS's), on the handle's stream,
 * so it is captured into CUDA graphs like any other work. bf16 operands are
 * widened to f32 (exactly) first, so a product of bf16 values accumulates in
 * f32, as CUBLAS_COMPUTE_32F does. The bias epilogue of cuBLASLt adds the
 * f32 bias to every column of the f32 product.
 *
 * What it cannot show: which kernels cuBLAS picks, their summation order and
 * so their exact bits, whether those kernels are deterministic, TF32 (the
 * math mode is recorded, the product stays f32), and which shapes cuBLASLt
 * offers a bias epilogue for (it offers one for every shape it can check). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memory>
#include <vector>

#include "cublasLt.h"
#include "emu_rt.h"

extern "C" void sgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k, const float *alpha,
                       const float *a, const int *lda, const float *b, const int *ldb, const float *beta, float *c,
                       const int *ldc, size_t la, size_t lb); /* la, lb: Fortran's hidden lengths of ta, tb */

struct cublasContext {
    cudaStream_t stream;
    void *ws;
    size_t ws_bytes;
    int math, atomics, pmode;
};

struct cublasLtContext {
    int live;
};

struct pg_emu_lt_desc {
    int compute, scale;
    int32_t ta, tb;
    uint32_t epi;
    const void *bias;
    int32_t bias_type;
};

struct pg_emu_lt_layout {
    int type;
    uint64_t rows, cols;
    int64_t ld;
};

struct pg_emu_lt_pref {
    uint64_t ws;
    uint32_t align[4]; /* A, B, C, D: what the caller promises */
};

namespace {

const uint64_t ALGO_MAGIC = 0x4f474c4155424c43ull;

size_t elem_bytes(int type) { return type == CUDA_R_32F ? 4 : 2; }

/* Elements a column-major rows x cols operand with leading dimension ld spans
 * over `batch` matrices `stride` apart (batch 0 or 1: one). */
long long span(long long rows, long long cols, long long ld, long long stride, int batch)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    return (batch > 1 ? (long long)(batch - 1) * stride : 0) + (cols - 1) * ld + rows;
}

/* The operand's span must lie in device memory (a GPU would read past it). */
void check_operand(const char *call, const char *name, const void *p, long long elems, int type)
{
    if (elems <= 0)
        return;
    char why[400];
    size_t bytes = (size_t)elems * elem_bytes(type);
    int k = pg_emu_rt::classify(p, bytes, why, sizeof why);
    if (k < 0)
        pg_emu_rt::violation("%s: %s: %s (its leading dimension, stride or batch count reaches beyond it)", call, name,
                             why);
    if (k != pg_emu_rt::MEM_DEVICE)
        pg_emu_rt::violation("%s: %s at %p is not device memory", call, name, p);
}

void check_apart(const char *call, const char *na, const void *a, long long ea, int ta, const char *nc, const void *c,
                 long long ec)
{
    if (ea <= 0 || ec <= 0)
        return;
    const char *a0 = (const char *)a, *a1 = a0 + (size_t)ea * elem_bytes(ta);
    const char *c0 = (const char *)c, *c1 = c0 + (size_t)ec * 4;
    if (a0 < c1 && c0 < a1)
        pg_emu_rt::violation("%s: %s [%p, %p) overlaps %s [%p, %p): cuBLAS's result is undefined then", call, nc,
                             (const void *)c0, (const void *)c1, na, (const void *)a0, (const void *)a1);
}

/* f32 copy of a stored operand's span (bf16 widened exactly). */
const float *as_f32(const void *p, int type, long long elems, std::vector<float> &tmp)
{
    if (type == CUDA_R_32F)
        return (const float *)p;
    tmp.resize((size_t)elems);
    const uint16_t *h = (const uint16_t *)p;
    for (long long i = 0; i < elems; i++)
        tmp[(size_t)i] = emu_bf16_float(h[i]);
    return tmp.data();
}

/* One GEMM or a strided batch of them, as cuBLAS defines it (column-major):
 * C = alpha op(A) op(B) + beta C, checked, then enqueued on the handle's stream. */
cublasStatus_t gemm(const char *call, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, float alpha, const void *A, int at, int lda, long long sA, const void *B, int bt, int ldb,
                    long long sB, float beta, float *C, int ldc, long long sC, int batch)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    long long ra = ta == CUBLAS_OP_N ? m : k, ca = ta == CUBLAS_OP_N ? k : m;
    long long rb = tb == CUBLAS_OP_N ? k : n, cb = tb == CUBLAS_OP_N ? n : k;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || m < 0 || n < 0 ||
        k < 0 || batch < 0 || lda < (ra > 1 ? ra : 1) || ldb < (rb > 1 ? rb : 1) || ldc < (m > 1 ? m : 1)) {
        pg_emu_rt::note("%s: m=%d n=%d k=%d, op(A) %s with lda=%d, op(B) %s with ldb=%d, ldc=%d, batch %d: invalid "
                        "(a leading dimension below its rows, or a negative size)", call, m, n, k,
                        ta == CUBLAS_OP_N ? "N" : "T", lda, tb == CUBLAS_OP_N ? "N" : "T", ldb, ldc, batch);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!m || !n)
        return CUBLAS_STATUS_SUCCESS; /* nothing to compute: cuBLAS returns at once */
    int nb = batch > 0 ? batch : 1;
    long long ea = k ? span(ra, ca, lda, sA, nb) : 0, eb = k ? span(rb, cb, ldb, sB, nb) : 0;
    long long ec = span(m, n, ldc, sC, nb);
    check_operand(call, "A", A, ea, at);
    check_operand(call, "B", B, eb, bt);
    check_operand(call, "C", C, ec, CUDA_R_32F);
    check_apart(call, "A", A, ea, at, "C", C, ec);
    check_apart(call, "B", B, eb, bt, "C", C, ec);
    pg_emu_rt::op o(call, nullptr);
    if (ea)
        o.ranges.push_back({A, (size_t)ea * elem_bytes(at)});
    if (eb)
        o.ranges.push_back({B, (size_t)eb * elem_bytes(bt)});
    o.ranges.push_back({C, (size_t)ec * 4});
    o.run = [=] {
        std::vector<float> ta32, tb32;
        char cta = ta == CUBLAS_OP_N ? 'N' : 'T', ctb = tb == CUBLAS_OP_N ? 'N' : 'T';
        for (int q = 0; q < nb; q++) {
            const char *a = (const char *)A + (size_t)(q * sA) * elem_bytes(at);
            const char *b = (const char *)B + (size_t)(q * sB) * elem_bytes(bt);
            const float *a32 = k ? as_f32(a, at, span(ra, ca, lda, 0, 1), ta32) : NULL;
            const float *b32 = k ? as_f32(b, bt, span(rb, cb, ldb, 0, 1), tb32) : NULL;
            float *c = C + q * sC;
            sgemm_(&cta, &ctb, &m, &n, &k, &alpha, a32, &lda, b32, &ldb, &beta, c, &ldc, 1, 1);
        }
    };
    cudaError_t e = pg_emu_rt::submit(h->stream, std::move(o));
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t types_ok(const char *call, cudaDataType a, cudaDataType b, cudaDataType c, cublasComputeType_t comp)
{
    if (a == b && (a == CUDA_R_32F || a == CUDA_R_16BF) && c == CUDA_R_32F && comp == CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_SUCCESS;
    pg_emu_rt::note("%s: A type %d, B type %d, C type %d, compute %d: not emulated (bf16 or f32 operands into f32 C "
                    "with CUBLAS_COMPUTE_32F are)", call, (int)a, (int)b, (int)c, (int)comp);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

/* The host BLAS computes on the calling (stream) thread only: a threaded BLAS
 * (OpenBLAS, BLIS) hands the work to threads it made at load time, which may
 * not touch device memory (they were never a stream's), so the emulator would
 * report host code touching it. Found by name, since -lblas may be any of
 * Debian's alternatives; the reference BLAS has neither and never threads. */
void blas_one_thread()
{
    void (*openblas)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
    void (*blis)(long) = (void (*)(long))dlsym(RTLD_DEFAULT, "bli_thread_set_num_threads");
    if (openblas)
        openblas(1);
    if (blis)
        blis(1);
}

} // namespace

/* ---- cuBLAS ------------------------------------------------------------------------ */

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    void *probe = NULL;
    if (cudaMalloc(&probe, 256) != cudaSuccess) /* a context, and the capture rules of an allocation */
        return CUBLAS_STATUS_NOT_INITIALIZED;
    cudaFree(probe);
    blas_one_thread();
    *h = new cublasContext();
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (h->stream)
        cudaStreamSynchronize(h->stream);
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = (int)mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetAtomicsMode(cublasHandle_t h, cublasAtomicsMode_t mode)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->atomics = (int)mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t mode)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_POINTER_MODE_HOST) {
        pg_emu_rt::note("cublasSetPointerMode: only CUBLAS_POINTER_MODE_HOST is emulated");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    h->pmode = (int)mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    char why[400];
    if (bytes && (pg_emu_rt::classify(ws, bytes, why, sizeof why) != pg_emu_rt::MEM_DEVICE || (uintptr_t)ws % 256)) {
        pg_emu_rt::note("cublasSetWorkspace(%p, %zu): the workspace must be 256-byte aligned device memory", ws, bytes);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    h->ws = ws;
    h->ws_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc)
{
    return gemm("cublasSgemm", h, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, *beta, C,
                ldc, 0, 0);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long sA,
                                         const float *B, int ldb, long long sB, const float *beta, float *C, int ldc,
                                         long long sC, int batch)
{
    if (batch == 0)
        return CUBLAS_STATUS_SUCCESS;
    return gemm("cublasSgemmStridedBatched", h, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, sA, B, CUDA_R_32F, ldb,
                sB, *beta, C, ldc, sC, batch);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
    (void)algo;
    cublasStatus_t s = types_ok("cublasGemmEx", at, bt, ct, compute);
    if (s)
        return s;
    return gemm("cublasGemmEx", h, ta, tb, m, n, k, *(const float *)alpha, A, at, lda, 0, B, bt, ldb, 0,
                *(const float *)beta, (float *)C, ldc, 0, 0);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long sA, const void *B, cudaDataType bt, int ldb, long long sB,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long sC, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)algo;
    cublasStatus_t s = types_ok("cublasGemmStridedBatchedEx", at, bt, ct, compute);
    if (s || batch == 0)
        return s;
    return gemm("cublasGemmStridedBatchedEx", h, ta, tb, m, n, k, *(const float *)alpha, A, at, lda, sA, B, bt, ldb,
                sB, *(const float *)beta, (float *)C, ldc, sC, batch);
}

/* ---- cuBLASLt ------------------------------------------------------------------------ */

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    blas_one_thread();
    *h = new cublasLtContext{1};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType scale)
{
    *d = new pg_emu_lt_desc{(int)compute, (int)scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, NULL,
                            -1};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t bytes)
{
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        if (bytes != 4)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(a == CUBLASLT_MATMUL_DESC_TRANSA   ? &d->ta
               : a == CUBLASLT_MATMUL_DESC_TRANSB ? &d->tb
                                                  : &d->bias_type,
               buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (bytes != 4)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->epi, buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (bytes != sizeof(void *))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->bias, buf, sizeof(void *));
        return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld)
{
    *l = NULL;
    if ((type != CUDA_R_32F && type != CUDA_R_16BF) || ld < (int64_t)(rows > 1 ? rows : 1)) {
        pg_emu_rt::note("cublasLtMatrixLayoutCreate: type %d, %llu x %llu, ld %lld: invalid or not emulated",
                        (int)type, (unsigned long long)rows, (unsigned long long)cols, (long long)ld);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    *l = new pg_emu_lt_layout{(int)type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = new pg_emu_lt_pref{0, {256, 256, 256, 256}}; /* cuBLASLt's default: cudaMalloc's alignment */
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                                                    size_t bytes)
{
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && bytes == 8) {
        memcpy(&p->ws, buf, 8);
        return CUBLAS_STATUS_SUCCESS;
    }
    if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES && bytes == 4) {
        memcpy(&p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

namespace {

/* The matmul the descriptors describe, checked: 0, or the status and a note. */
cublasStatus_t lt_shape(const char *call, const pg_emu_lt_desc *d, const pg_emu_lt_layout *la,
                        const pg_emu_lt_layout *lb, const pg_emu_lt_layout *lc, const pg_emu_lt_layout *ld, int *m,
                        int *n, int *k)
{
    if (!d || !la || !lb || !lc || !ld)
        return CUBLAS_STATUS_INVALID_VALUE;
    *m = (int)(d->ta == CUBLAS_OP_N ? la->rows : la->cols);
    *k = (int)(d->ta == CUBLAS_OP_N ? la->cols : la->rows);
    int kb = (int)(d->tb == CUBLAS_OP_N ? lb->rows : lb->cols);
    *n = (int)(d->tb == CUBLAS_OP_N ? lb->cols : lb->rows);
    if (kb != *k || lc->rows != (uint64_t)*m || lc->cols != (uint64_t)*n || ld->rows != lc->rows ||
        ld->cols != lc->cols) {
        pg_emu_rt::note("%s: op(A) is %d x %d, op(B) %d x %d, C %llu x %llu, D %llu x %llu: the shapes do not match",
                        call, *m, *k, kb, *n, (unsigned long long)lc->rows, (unsigned long long)lc->cols,
                        (unsigned long long)ld->rows, (unsigned long long)ld->cols);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F || la->type != lb->type || lc->type != CUDA_R_32F ||
        ld->type != CUDA_R_32F) {
        pg_emu_rt::note("%s: compute %d, scale %d, A %d, B %d, C %d, D %d: not emulated", call, d->compute, d->scale,
                        la->type, lb->type, lc->type, ld->type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->epi != CUBLASLT_EPILOGUE_DEFAULT && d->epi != CUBLASLT_EPILOGUE_BIAS) {
        pg_emu_rt::note("%s: epilogue %u: not emulated (DEFAULT and BIAS are)", call, d->epi);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->epi == CUBLASLT_EPILOGUE_BIAS && (!d->bias || (d->bias_type != -1 && d->bias_type != CUDA_R_32F))) {
        pg_emu_rt::note("%s: the bias epilogue needs CUBLASLT_MATMUL_DESC_BIAS_POINTER (and an f32 bias)", call);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

unsigned align_of(const void *p)
{
    uintptr_t v = (uintptr_t)p;
    return v ? (unsigned)(v & (~v + 1)) : 256u;
}

} // namespace

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t la,
                                              cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                                              cublasLtMatrixLayout_t ld, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t *res, int *returned)
{
    *returned = 0;
    if (!h || !p || requested < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    int m, n, k;
    cublasStatus_t s = lt_shape("cublasLtMatmulAlgoGetHeuristic", d, la, lb, lc, ld, &m, &n, &k);
    if (s)
        return s;
    memset(res, 0, sizeof *res);
    /* the one emulated algorithm, for buffers aligned as promised (and the
     * bias as the pointer given here is: the heuristic reads it) */
    res->algo.data[0] = ALGO_MAGIC;
    for (int i = 0; i < 4; i++)
        res->algo.data[1 + i] = p->align[i];
    res->algo.data[5] = d->epi == CUBLASLT_EPILOGUE_BIAS ? (align_of(d->bias) < 16 ? align_of(d->bias) : 16) : 1;
    res->workspaceSize = 0;
    res->state = CUBLAS_STATUS_SUCCESS;
    res->wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, const void *beta,
                              const void *C, cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t s)
{
    const char *call = "cublasLtMatmul";
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int m, n, k;
    cublasStatus_t st = lt_shape(call, d, la, lb, lc, ld, &m, &n, &k);
    if (st)
        return st;
    if (!algo || algo->data[0] != ALGO_MAGIC) {
        pg_emu_rt::note("%s: no algorithm from cublasLtMatmulAlgoGetHeuristic", call);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const void *ptr[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if (align_of(ptr[i]) < algo->data[1 + i])
            pg_emu_rt::violation("%s: %c at %p is %u-byte aligned, the algorithm was chosen for %llu-byte aligned "
                                 "buffers (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)", call, "ABCD"[i], ptr[i],
                                 align_of(ptr[i]), (unsigned long long)algo->data[1 + i], "ABCD"[i]);
    if (d->epi == CUBLASLT_EPILOGUE_BIAS && align_of(d->bias) < algo->data[5])
        pg_emu_rt::violation("%s: the bias at %p is less aligned than the one the algorithm was chosen for (%llu "
                             "bytes)", call, d->bias, (unsigned long long)algo->data[5]);
    if (ws_bytes && pg_emu_rt::classify(ws, ws_bytes, NULL, 0) != pg_emu_rt::MEM_DEVICE)
        pg_emu_rt::violation("%s: the workspace (%zu bytes at %p) is not device memory", call, ws_bytes, ws);
    int at = la->type, lda = (int)la->ld, ldb = (int)lb->ld, ldc = (int)lc->ld, ldd = (int)ld->ld;
    long long ea = span((long long)la->rows, (long long)la->cols, lda, 0, 1);
    long long eb = span((long long)lb->rows, (long long)lb->cols, ldb, 0, 1);
    long long ec = span(m, n, ldc, 0, 1), ed = span(m, n, ldd, 0, 1);
    check_operand(call, "A", A, ea, at);
    check_operand(call, "B", B, eb, at);
    check_operand(call, "C", C, ec, CUDA_R_32F);
    check_operand(call, "D", D, ed, CUDA_R_32F);
    check_apart(call, "A", A, ea, at, "D", D, ed);
    check_apart(call, "B", B, eb, at, "D", D, ed);
    const float *bias = d->epi == CUBLASLT_EPILOGUE_BIAS ? (const float *)d->bias : NULL;
    if (bias)
        check_operand(call, "the bias", bias, m, CUDA_R_32F);
    if (C != D && ldc != ldd) {
        pg_emu_rt::note("%s: C and D with different layouts: not emulated", call);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    float fa = *(const float *)alpha, fb = *(const float *)beta;
    int ta = d->ta, tb = d->tb;
    pg_emu_rt::op o(call, nullptr);
    o.ranges = {{A, (size_t)ea * elem_bytes(at)}, {B, (size_t)eb * elem_bytes(at)}, {D, (size_t)ed * 4}};
    if (bias)
        o.ranges.push_back({bias, (size_t)m * 4});
    o.run = [=] {
        std::vector<float> ta32, tb32;
        char cta = ta == CUBLAS_OP_N ? 'N' : 'T', ctb = tb == CUBLAS_OP_N ? 'N' : 'T';
        float *dd = (float *)D;
        if (C != D && fb != 0.0f)
            for (int j = 0; j < n; j++)
                memcpy(dd + (size_t)j * ldd, (const float *)C + (size_t)j * ldc, (size_t)m * 4);
        const float *a32 = as_f32(A, at, ea, ta32), *b32 = as_f32(B, at, eb, tb32);
        sgemm_(&cta, &ctb, &m, &n, &k, &fa, a32, &lda, b32, &ldb, &fb, dd, &ldd, 1, 1);
        if (bias)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++)
                    dd[(size_t)j * ldd + i] += bias[i];
    };
    cudaError_t e = pg_emu_rt::submit(s, std::move(o));
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

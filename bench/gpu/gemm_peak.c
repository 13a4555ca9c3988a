/* bench/gpu/gemm_peak.c — the measured bf16 GEMM peak that bench/gpu/run.sh
 * divides by for MFU: cublasGemmEx with bf16 operands, f32 output and
 * CUBLAS_COMPUTE_32F (what the CUDA runtime does with precision = bf16) on
 * square sizes, best of REPS timed runs each after a warm-up, timed with CUDA
 * events. Prints one line per size and a last line
 *     peak_tflops <best TFLOP/s over the sizes>
 * usage: gemm_peak [N ...]   (default 4096 8192)
 * Exit 0, or 1 with a message (no GPU, out of memory, a cuBLAS error). */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define REPS 20

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    fprintf(stderr, "gemm_peak: %s: %s\n", what, cudaGetErrorString(e));
    return 0;
}

static int blas_ok(cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 1;
    fprintf(stderr, "gemm_peak: %s failed (cuBLAS status %d)\n", what, (int)s);
    return 0;
}

/* TFLOP/s of the best of REPS n x n x n products, or -1 on failure. */
static double time_size(cublasHandle_t h, cudaStream_t st, int n)
{
    size_t e = (size_t)n * (size_t)n;
    void *a = NULL, *b = NULL, *c = NULL;
    cudaEvent_t t0 = NULL, t1 = NULL;
    double best = -1.0;
    const float one = 1.0f, zero = 0.0f;
    if (!cuda_ok(cudaMalloc(&a, e * 2), "cudaMalloc A") || !cuda_ok(cudaMalloc(&b, e * 2), "cudaMalloc B") ||
        !cuda_ok(cudaMalloc(&c, e * 4), "cudaMalloc C") || !cuda_ok(cudaMemset(a, 0x3c, e * 2), "cudaMemset") ||
        !cuda_ok(cudaMemset(b, 0x3c, e * 2), "cudaMemset") || !cuda_ok(cudaEventCreate(&t0), "cudaEventCreate") ||
        !cuda_ok(cudaEventCreate(&t1), "cudaEventCreate"))
        goto out;
    for (int r = -1; r < REPS; r++) { /* r = -1: warm-up (heuristics, clocks) */
        if (!cuda_ok(cudaEventRecord(t0, st), "cudaEventRecord") ||
            !blas_ok(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                                  &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx") ||
            !cuda_ok(cudaEventRecord(t1, st), "cudaEventRecord") || !cuda_ok(cudaEventSynchronize(t1), "sync")) {
            best = -1.0;
            goto out;
        }
        float ms = 0.0f;
        if (!cuda_ok(cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime")) {
            best = -1.0;
            goto out;
        }
        double tf = 2.0 * (double)n * (double)n * (double)n / ((double)ms * 1e-3) / 1e12;
        if (r >= 0 && tf > best)
            best = tf;
    }
out:
    if (t0)
        cudaEventDestroy(t0);
    if (t1)
        cudaEventDestroy(t1);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return best;
}

int main(int argc, char **argv)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "gemm_peak: no GPU found\n");
        return 1;
    }
    struct cudaDeviceProp prop;
    if (!cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"))
        return 1;
    cublasHandle_t h;
    cudaStream_t st;
    if (!cuda_ok(cudaStreamCreate(&st), "cudaStreamCreate") || !blas_ok(cublasCreate(&h), "cublasCreate") ||
        !blas_ok(cublasSetStream(h, st), "cublasSetStream"))
        return 1;
    static const int defaults[] = {4096, 8192};
    int nsizes = argc > 1 ? argc - 1 : 2;
    double peak = -1.0;
    printf("device %s\n", prop.name);
    for (int i = 0; i < nsizes; i++) {
        int n = argc > 1 ? atoi(argv[i + 1]) : defaults[i];
        if (n <= 0 || n > 65536) {
            fprintf(stderr, "gemm_peak: bad size '%s'\n", argv[i + 1]);
            return 1;
        }
        double tf = time_size(h, st, n);
        if (tf < 0)
            return 1;
        printf("bf16 gemm %d x %d x %d: %.1f TFLOP/s (best of %d)\n", n, n, n, tf, REPS);
        if (tf > peak)
            peak = tf;
    }
    printf("peak_tflops %.1f\n", peak);
    cublasDestroy(h);
    cudaStreamDestroy(st);
    return 0;
}

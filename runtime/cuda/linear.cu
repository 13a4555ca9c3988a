/* runtime/cuda/linear.cu — linear layer through cublasSgemm, plus the bias
 * broadcast and the fixed-order column sums for the bias gradient.
 *
 * Row-major <-> column-major: cuBLAS is column-major. A row-major matrix
 * M[R,C] (leading dimension C) is, read column-major with ld C, the matrix
 * M^T[C,R]. So every row-major product Z = A B is computed as the column-major
 * product Z^T = B^T A^T, where each operand's "free" view is already the
 * transpose of the row-major matrix; the mappings are derived per call below. */
#include "cuda_common.h"

static int linear_dims_ok(const char *op, int64_t n, int64_t in, int64_t out)
{
    if (!pg_cuda_dim_ok(n) || !pg_cuda_dim_ok(in) || !pg_cuda_dim_ok(out))
        return PG_RT_FAIL("%s: sizes n=%lld in=%lld out=%lld must be in [0, 2147483647]", op,
                          (long long)n, (long long)in, (long long)out);
    return 0;
}

/* y[n,out] = b[out] on every row */
__global__ void bias_broadcast_kernel(int64_t n, int64_t out, const float *b, float *y)
{
    PG_GRID_STRIDE(k, n * out) y[k] = b[k % out];
}

/* acc[m] += sum over rows of a[n,m]: one thread per column walks the rows in
 * index order in double (the CPU backend's order, so the same bits); adjacent
 * threads read adjacent columns, so each row step is one coalesced load. */
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
    if (linear_dims_ok("linear_fwd", n, in, out))
        return 1;
    if (n == 0 || out == 0)
        return 0;
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
    CUBLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in,
                             &one, w, (int)in, x, (int)in, &beta, y, (int)out));
    return 0;
}

/* dx[n,in] = dy[n,out] W[out,in]
 * Column-major, dx^T[in,n] = W^T[in,out] dy^T[out,n]:
 *   A = W: row-major [out,in] read column-major is W^T[in,out] (ld in); op N.
 *   B = dy: row-major [n,out] read column-major is dy^T[out,n] (ld out); op N.
 *   C = dx: dx^T[in,n] (ld in).  m = in, n = n, k = out. */
int pg_linear_bwd_in(pg_ctx *c, int64_t n, int64_t in, int64_t out,
                     const float *dy, const float *w, float *dx)
{
    if (linear_dims_ok("linear_bwd_in", n, in, out))
        return 1;
    if (n == 0 || in == 0)
        return 0;
    if (out == 0) {
        CUDA_CHECK(cudaMemsetAsync(dx, 0, (size_t)(n * in) * sizeof *dx, c->stream));
        return 0;
    }
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)in, (int)n, (int)out,
                             &one, w, (int)in, dy, (int)out, &zero, dx, (int)in));
    return 0;
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
    if (linear_dims_ok("linear_bwd_w", n, in, out))
        return 1;
    if (n == 0 || out == 0)
        return 0;
    if (in > 0) {
        const float one = 1.0f;
        CUBLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)in, (int)out, (int)n,
                                 &one, x, (int)in, dy, (int)out, &one, dw, (int)in));
    }
    if (db)
        return pg_cuda_colsum_acc(c, n, out, dy, db);
    return 0;
}

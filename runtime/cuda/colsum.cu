/* runtime/cuda/colsum.cu — deterministic column sums over many rows, in
 * parallel: the linear bias gradient and the layernorm / batchnorm weight
 * gradients (the PG_CUDA_K_COLSUM path; kernel_ref.h holds the host
 * reference these kernels match bit for bit).
 *
 * The reference path walks all n rows with one thread per column: for GPT-2's
 * 768 columns that is 3 blocks on a 132-SM GPU, each thread issuing 2048
 * dependent-order loads. Here the rows are cut into chunks of
 * pg_colsum_chunk_rows(n) rows (a function of n only): pass 1 has one thread
 * per (chunk, column) summing its chunk's rows in row order in double into a
 * partial [chunk][term][column] in the scratch workspace (adjacent threads,
 * adjacent columns: every row step is one coalesced load); pass 2 has one
 * thread per column summing its chunk partials in chunk order in double and
 * adding the float result to the accumulator. Each output element sees the
 * same additions in the same order whatever the GPU, the grid or the timing:
 * no atomics. */
#include "cuda_common.h"
#include "kernel_ref.h"

#define COLSUM_THREADS PG_COLSUM_THREADS

/* a[i, j] of a plain matrix (the bias gradient: sum of dy) */
struct col_plain {
    const float *a;
    int64_t m;
    __device__ void operator()(int64_t i, int64_t j, double *s) const { s[0] += a[i * m + j]; }
};

/* dy xhat and dy of a normalisation (xhat in float with _rn: no FMA, the
 * reference's rounding; the double product of two floats is exact). */
struct col_norm {
    const float *x, *mean, *rstd, *dy;
    int64_t m;
    int per_row;
    __device__ void operator()(int64_t i, int64_t j, double *s) const
    {
        int64_t k = i * m + j, st = per_row ? i : j;
        float xh = __fmul_rn(__fsub_rn(x[k], mean[st]), rstd[st]);
        float g = dy[k];
        s[0] += (double)g * xh;
        s[1] += g;
    }
};

/* pass 1: block (x, chunk) sums rows [chunk*rows, ...) of columns x*256.. */
template <int NT, typename F>
__global__ void __launch_bounds__(COLSUM_THREADS) colsum_chunks_kernel(int64_t n, int64_t m, int64_t rows, F f,
                                                                       double *part)
{
    int64_t j = (int64_t)blockIdx.x * COLSUM_THREADS + threadIdx.x;
    int64_t c = blockIdx.y;
    if (j >= m)
        return;
    int64_t i0 = c * rows, i1 = i0 + rows < n ? i0 + rows : n;
    double s[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        s[t] = 0.0;
    for (int64_t i = i0; i < i1; i++)
        f(i, j, s);
#pragma unroll
    for (int t = 0; t < NT; t++)
        part[(c * NT + t) * m + j] = s[t];
}

/* pass 2: out_t[j] += (float)(sum over chunks in order) */
template <int NT>
__global__ void colsum_finish_kernel(int64_t m, int64_t nchunks, const double *part, float *out0, float *out1)
{
    PG_GRID_STRIDE(j, m) {
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float *out = t == 0 ? out0 : out1;
            if (!out)
                continue;
            double s = 0.0;
            for (int64_t c = 0; c < nchunks; c++)
                s += part[(c * NT + t) * m + j];
            out[j] += (float)s;
        }
    }
}

template <int NT, typename F>
static int colsum_run(pg_ctx *c, const char *op, int64_t n, int64_t m, F f, float *out0, float *out1)
{
    if (n <= 0 || m <= 0)
        return 0;
    int64_t rows = pg_colsum_chunk_rows(n), nc = pg_colsum_nchunks(n);
    pg_geom g = pg_geom_colsum(m, nc);
    char why[256];
    if (pg_geom_check(g, why, sizeof why))
        return PG_RT_FAIL("%s: %lld rows x %lld columns exceed the column-sum grid: %s", op, (long long)n, (long long)m,
                          why);
    void *ws = NULL;
    if (pg_cuda_scratch(c, (size_t)(nc * NT * m) * sizeof(double), &ws))
        return 1;
    pg_cuda_count(c, PG_CUDA_K_COLSUM);
    colsum_chunks_kernel<NT, F><<<PG_GEOM(g), 0, c->stream>>>(n, m, rows, f, (double *)ws);
    LAUNCH_CHECK("colsum_chunks_kernel");
    colsum_finish_kernel<NT><<<pg_cuda_blocks(m, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(
        m, nc, (const double *)ws, out0, out1);
    LAUNCH_CHECK("colsum_finish_kernel");
    return 0;
}

int pg_cuda_colsum_chunked(pg_ctx *c, int64_t n, int64_t m, const float *a, float *acc)
{
    col_plain f = {a, m};
    return colsum_run<1>(c, "column sums", n, m, f, acc, NULL);
}

int pg_cuda_norm_bwd_w_chunked(pg_ctx *c, const char *op, int64_t n, int64_t m, int stats_per_row, const float *x,
                               const float *mean, const float *rstd, const float *dy, float *dw, float *db)
{
    if (!dw && !db)
        return 0;
    col_norm f = {x, mean, rstd, dy, m, stats_per_row};
    return colsum_run<2>(c, op, n, m, f, dw, db);
}

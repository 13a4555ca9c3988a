/* runtime/cpu/linear.c — linear layer and logits-by-table, all through the
 * backend's GEMM (gemm.c). Row-major, W is [out, in] as PyTorch. No copies of
 * the activations: every product is one GEMM call on the caller's buffers, so
 * a row's bits do not depend on how many rows share the call or on the
 * threads. The weight, the product's B, comes from its copy packed once a
 * step where the stage has one (wpack.c): the same values, the same bits. */
#include <string.h>

#include "cpu_ctx.h"
#include "op_args.h"

/* y[n,out] = x[n,in] W[out,in]^T + b[out], then epi on each strip of y (NULL: none) */
static int linear_fwd_run(pg_ctx *c, int64_t n, int64_t in, int64_t out, const float *x, const float *w,
                          const float *b, float *y, const pg_cpu_epi *epi)
{
    const float *bp;
    if (pg_cpu_wpack_b(c, w, out, in, PG_CPU_WT, &bp))
        return 1;
    if (b) /* y starts as the bias, the product adds to it */
        for (int64_t i = 0; i < n; i++)
            memcpy(y + i * out, b, (size_t)out * sizeof *y);
    if (bp)
        pg_cpu_gemm_packed(c, 0, n, out, in, 1.0f, x, in, bp, b != NULL, y, out, epi);
    else
        pg_cpu_gemm_epi(c, 0, 1, n, out, in, 1.0f, x, in, w, in, b != NULL, y, out, epi);
    return 0;
}

/* g[n,in] = (beta ? g : 0) + dy[n,out] W[out,in], then epi on each strip of g (NULL: none) */
static int linear_bwd_in_run(pg_ctx *c, int64_t n, int64_t in, int64_t out, const float *dy, const float *w, int beta,
                         float *g, const pg_cpu_epi *epi)
{
    const float *bp;
    if (pg_cpu_wpack_b(c, w, out, in, PG_CPU_W, &bp))
        return 1;
    if (bp)
        pg_cpu_gemm_packed(c, 0, n, in, out, 1.0f, dy, out, bp, beta, g, in, epi);
    else
        pg_cpu_gemm_epi(c, 0, 0, n, in, out, 1.0f, dy, out, w, in, beta, g, in, epi);
    return 0;
}

int pg_linear_fwd(pg_ctx *c, int64_t n, int64_t in, int64_t out,
                  const float *x, const float *w, const float *b, float *y)
{
    if (pg_args_linear("linear_fwd", n, in, out))
        return 1;
    if (n == 0 || out == 0)
        return 0;
    if (in == 0) {
        for (int64_t i = 0; i < n * out; i++)
            y[i] = b ? b[i % out] : 0.0f;
        return 0;
    }
    return linear_fwd_run(c, n, in, out, x, w, b, y, NULL);
}

/* dx[n,in] = dy[n,out] W[out,in] */
int pg_linear_bwd_in(pg_ctx *c, int64_t n, int64_t in, int64_t out,
                     const float *dy, const float *w, float *dx)
{
    if (pg_args_linear("linear_bwd_in", n, in, out))
        return 1;
    if (n == 0 || in == 0)
        return 0;
    if (out == 0) {
        for (int64_t i = 0; i < n * in; i++)
            dx[i] = 0.0f;
        return 0;
    }
    return linear_bwd_in_run(c, n, in, out, dy, w, 0, dx, NULL);
}

/* The activation of pg_linear_act_fwd / pg_linear_bwd_in_act on one strip of
 * the product (pg_cpu_epi), row by row: an activation's element depends on
 * that element alone (activation.c pads a last partial block), so a strip's
 * row pieces get the bits one call over the whole tensor gives them. */
typedef struct act_epi {
    pg_ctx *c;
    pg_act_fwd_fn *fwd; /* forward: out = fwd(s); NULL in a backward */
    pg_act_bwd_fn *bwd; /* backward-input: out = bwd(s, g) */
    const float *s;     /* [n, m] the activation's input */
    const float *g;     /* [n, m] the product in a backward: the activation output's gradient */
    float *out;         /* [n, m] y or dx */
    int64_t m;
} act_epi;

static void act_epi_strip(const void *arg, int64_t i0, int64_t rows, int64_t j0, int64_t cols)
{
    const act_epi *a = arg;
    for (int64_t i = i0; i < i0 + rows; i++) {
        int64_t o = i * a->m + j0;
        /* the counts are valid by construction: the ops cannot fail here */
        if (a->fwd)
            (void)a->fwd(a->c, cols, a->s + o, a->out + o);
        else
            (void)a->bwd(a->c, cols, a->s + o, a->g + o, a->out + o);
    }
}

/* s = x W^T + b and y = act(s), act applied to each strip of s in the GEMM's store */
int pg_linear_act_fwd(pg_ctx *c, pg_act_fwd_fn *act, int64_t n, int64_t in, int64_t out, const float *x,
                      const float *w, const float *b, float *s, float *y)
{
    if (pg_args_linear_act("linear_act_fwd", (const void *)act, n, in, out))
        return 1;
    if (n == 0 || out == 0)
        return 0;
    if (in == 0) /* no product to fuse into */
        return pg_linear_fwd(c, n, in, out, x, w, b, s) || act(c, n * out, s, y);
    act_epi a = {c, act, NULL, s, NULL, y, out};
    pg_cpu_epi epi = {act_epi_strip, &a};
    return linear_fwd_run(c, n, in, out, x, w, b, s, &epi);
}

/* g = dy W and dx = act's backward at s on g, applied to each strip of g in the GEMM's store */
int pg_linear_bwd_in_act(pg_ctx *c, pg_act_bwd_fn *act, int64_t n, int64_t in, int64_t out, const float *dy,
                         const float *w, const float *s, float *g, float *dx)
{
    if (pg_args_linear_act("linear_bwd_in_act", (const void *)act, n, in, out))
        return 1;
    if (n == 0 || in == 0)
        return 0;
    if (out == 0) /* no product to fuse into */
        return pg_linear_bwd_in(c, n, in, out, dy, w, g) || act(c, n * in, s, g, dx);
    act_epi a = {c, NULL, act, s, g, dx, in};
    pg_cpu_epi epi = {act_epi_strip, &a};
    return linear_bwd_in_run(c, n, in, out, dy, w, 0, g, &epi);
}

/* dx[n,in] += dy[n,out] W[out,in] */
int pg_linear_bwd_in_add(pg_ctx *c, int64_t n, int64_t in, int64_t out,
                         const float *dy, const float *w, float *dx)
{
    if (pg_args_linear("linear_bwd_in_add", n, in, out))
        return 1;
    if (n == 0 || in == 0 || out == 0)
        return 0;
    return linear_bwd_in_run(c, n, in, out, dy, w, 1, dx, NULL);
}

/* Column sums of a[n, m] added to acc[m]: rows in index order, in double per
 * block of columns, one float add into acc at the end (the CUDA reference
 * path's order, bit for bit: runtime/cuda/README.md); the baseline and AVX2
 * builds only run more columns of a block side by side. */
PG_CPU_INLINE void colsum_body(int64_t n, int64_t m, const float *a, float *acc)
{
    double s[PG_CPU_COLBLK];
    for (int64_t j0 = 0; j0 < m; j0 += PG_CPU_COLBLK) {
        int64_t nb = m - j0 < PG_CPU_COLBLK ? m - j0 : PG_CPU_COLBLK;
        for (int64_t j = 0; j < nb; j++)
            s[j] = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const float *row = a + i * m + j0;
            if (nb == PG_CPU_COLBLK) /* a fixed count: SIMD at -O2, same adds */
                for (int64_t j = 0; j < PG_CPU_COLBLK; j++)
                    s[j] += row[j];
            else
                for (int64_t j = 0; j < nb; j++)
                    s[j] += row[j];
        }
        for (int64_t j = 0; j < nb; j++)
            acc[j0 + j] += (float)s[j];
    }
}

static void colsum_acc(int64_t n, int64_t m, const float *a, float *acc) { colsum_body(n, m, a, acc); }
#ifdef PG_CPU_AVX2
PG_CPU_TARGET_AVX2 static void colsum_acc_avx2(int64_t n, int64_t m, const float *a, float *acc)
{
    colsum_body(n, m, a, acc);
}
#endif

/* dw[out,in] += dy[n,out]^T x[n,in]; db[out] += column sums of dy */
int pg_linear_bwd_w(pg_ctx *c, int64_t n, int64_t in, int64_t out,
                    const float *x, const float *dy, float *dw, float *db)
{
    if (pg_args_linear("linear_bwd_w", n, in, out))
        return 1;
    if (n == 0 || out == 0)
        return 0;
    if (in > 0)
        pg_cpu_gemm(c, 1, 0, out, in, n, 1.0f, dy, out, x, in, 1, dw, in);
    if (db)
        PG_CPU_PICK(c, colsum_acc)(n, out, dy, db);
    return 0;
}

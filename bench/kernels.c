/* bench/kernels.c — the CPU runtime's elementwise and row kernels alone, at
 * gpt_char's micro-batch shapes (256 rows of d = 128, the MLP's 512 columns;
 * llama_tiny's 344 for swiglu; Llama's attention core at the bench's llama, 4
 * samples of 64 positions, 8 heads of 32, 4 kv heads, rope, causal; its
 * cross-entropy over 2048 words), one thread: the time a call, best of ROUNDS
 * batches of calls (the best, not the median: on a shared machine the others'
 * work only ever adds). Built against a runtime library, so two trees' kernels
 * can be timed side by side (bench/kernels.sh alternates them).
 *
 * The fused linear and activation (pg_linear_act_fwd, pg_linear_bwd_in_act) are
 * weak references: against a library without them, "fc+gelu" and "proj+gelu"
 * time the two separate calls, so base against new is apart against fused;
 * "fc, gelu" and "proj, gelu" are always the two calls. The layernorm rows:
 * forward, backward-input and weight gradients over 256 rows of 128, and the
 * forms fused with the residual add (ln2's "add+layernorm fwd", the skip
 * gradient's "layernorm_bwd_in+add").
 *
 *   kernels ROUNDS        -> one line a kernel: name|elements|us a call
 *   kernels ROUNDS cpu    -> the same in the thread's CPU time (what other
 *                            work on the cores disturbs least)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pg_ops.h"

#pragma weak pg_linear_act_fwd
#pragma weak pg_linear_bwd_in_act

#define ROWS 256
#define D 128
#define HID 512
#define SWI 344

static clockid_t clock_id = CLOCK_MONOTONIC;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(clock_id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *buf(size_t n, unsigned seed)
{
    float *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "kernels: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) { /* a spread like fc's pre-activations: about +-4 */
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 8.0f;
    }
    return p;
}

#define AT_T 64  /* Llama's attention core: positions, heads, kv heads, head size */
#define AT_H 8
#define AT_KV 4
#define AT_HD 32
#define AT_R (ROWS / AT_T)
#define CE_V 2048 /* the bench's llama's vocabulary */

enum { GELU_F, GELU_B, SILU_F, SILU_B, SIGM_F, TANH_F, TANH_B, SWIGLU_F, SWIGLU_B, LIN_F, LIN_W, LN_F, LN_B, ATTN_F,
       ATTN_B, CE, FC_GELU, FC_THEN_GELU, PROJ_GELU, PROJ_THEN_GELU, LN_W, ADD_LN_F, LN_B_ADD, SWIGLU_F1, SWIGLU_B_EL,
       ADAMW, NK };
static const char *const names[NK] = {"gelu_fwd",   "gelu_bwd_in", "silu_fwd",   "silu_bwd_in",   "sigmoid_fwd",
                                      "tanh_fwd",   "tanh_bwd_in", "swiglu_fwd", "swiglu_bwd_in", "linear_fwd fc",
                                      "linear_bwd_w fc", "layernorm_fwd", "layernorm_bwd_in", "attn_fwd llama",
                                      "attn_bwd llama", "cross_entropy llama", "fc+gelu fwd", "fc, gelu fwd",
                                      "proj+gelu bwd_in", "proj, gelu bwd_in", "layernorm_bwd_w",
                                      "add+layernorm fwd", "layernorm_bwd_in+add", "swiglu_fwd d=1",
                                      "swiglu_bwd_in elem", "adamw_step"};
static const long elems[NK] = {ROWS * HID, ROWS * HID, ROWS * HID, ROWS * HID, ROWS * HID, ROWS * HID, ROWS * HID,
                               ROWS * SWI, ROWS * SWI, ROWS * HID, ROWS * HID, ROWS * D,   ROWS * D,
                               AT_R * AT_H * AT_T * AT_T, AT_R * AT_H * AT_T * AT_T, ROWS * CE_V,
                               ROWS * HID, ROWS * HID, ROWS * HID, ROWS * HID, ROWS * D, ROWS * D, ROWS * D,
                               ROWS * SWI, ROWS * SWI, ROWS * HID};
/* the score matrices fill big (ROWS * HID) floats */
_Static_assert(AT_R * AT_H * AT_T * AT_T == ROWS * HID, "the attention's scores are a big buffer");

static const pg_attn_dims at_dims = {AT_T, AT_H, AT_KV, AT_HD, 1, 10000.0f, AT_H * AT_HD, AT_KV * AT_HD, AT_KV * AT_HD};

typedef struct bufs {
    float *x, *dy, *y, *dx, *w, *w2, *b, *g, *u, *dg, *du, *h, *dh, *mean, *rstd, *lw, *lb;
    float *q, *k, *v, *att, *ctx, *dctx, *dq, *dk, *dv; /* the attention's: q [ROWS, 256], k and v [ROWS, 128] */
    float *logits, *dlogits;                             /* [ROWS, CE_V] */
    int32_t *tg;                                         /* [ROWS] */
} bufs;

static int fc_then_gelu(pg_ctx *c, bufs *B)
{
    return pg_linear_fwd(c, ROWS, D, HID, B->x, B->w, B->b, B->h) || pg_gelu_fwd(c, ROWS * HID, B->h, B->y);
}

static int proj_then_gelu(pg_ctx *c, bufs *B)
{
    return pg_linear_bwd_in(c, ROWS, HID, D, B->dy, B->w2, B->dh) || pg_gelu_bwd_in(c, ROWS * HID, B->h, B->dh, B->dx);
}

static void one(pg_ctx *c, int k, bufs *B)
{
    int rc = 0;
    switch (k) {
    case GELU_F: rc = pg_gelu_fwd(c, ROWS * HID, B->h, B->y); break;
    case GELU_B: rc = pg_gelu_bwd_in(c, ROWS * HID, B->h, B->dh, B->dx); break;
    case SILU_F: rc = pg_silu_fwd(c, ROWS * HID, B->h, B->y); break;
    case SILU_B: rc = pg_silu_bwd_in(c, ROWS * HID, B->h, B->dh, B->dx); break;
    case SIGM_F: rc = pg_sigmoid_fwd(c, ROWS * HID, B->h, B->y); break;
    case TANH_F: rc = pg_tanh_fwd(c, ROWS * HID, B->h, B->y); break;
    case TANH_B: rc = pg_tanh_bwd_in(c, ROWS * HID, B->h, B->dh, B->dx); break;
    case SWIGLU_F: rc = pg_swiglu_fwd(c, ROWS, D, SWI, B->x, B->w, NULL, B->w2, NULL, B->g, B->u, B->y); break;
    case SWIGLU_B:
        rc = pg_swiglu_bwd_in(c, ROWS, D, SWI, B->w, B->w2, B->h, B->dh, B->dy, B->dg, B->du, B->dx);
        break;
    case SWIGLU_F1: /* the projections over d = 1: little besides the elementwise part */
        rc = pg_swiglu_fwd(c, ROWS, 1, SWI, B->x, B->w, NULL, B->w2, NULL, B->g, B->u, B->y);
        break;
    case SWIGLU_B_EL: /* no dx: the elementwise part alone */
        rc = pg_swiglu_bwd_in(c, ROWS, D, SWI, B->w, B->w2, B->h, B->dh, B->dy, B->dg, B->du, NULL);
        break;
    case ADAMW: /* w, g, m, v: four big buffers, v >= 0 (main says; m and v drift over the calls, the work does not) */
        rc = pg_adamw_step(c, ROWS * HID, B->y, B->h, B->dh, B->dx, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 10);
        break;
    case LIN_F: rc = pg_linear_fwd(c, ROWS, D, HID, B->x, B->w, B->b, B->y); break;
    case LIN_W: rc = pg_linear_bwd_w(c, ROWS, D, HID, B->x, B->dh, B->dg, B->du); break;
    case LN_F: rc = pg_layernorm_fwd(c, ROWS, D, 1e-5f, B->x, B->lw, B->lb, B->y, B->mean, B->rstd); break;
    case LN_B: rc = pg_layernorm_bwd_in(c, ROWS, D, B->x, B->lw, B->mean, B->rstd, B->dy, B->dx); break;
    case ATTN_F: rc = pg_attn_fwd(c, AT_R, &at_dims, 0.0f, 0, 0, B->q, B->k, B->v, B->att, B->ctx); break;
    case ATTN_B:
        rc = pg_attn_bwd(c, AT_R, &at_dims, 0.0f, 0, 0, B->q, B->k, B->v, B->att, B->dctx, B->dq, B->dk, B->dv);
        break;
    case CE: {
        double loss;
        rc = pg_cross_entropy_fwd_bwd(c, ROWS, CE_V, B->logits, B->tg, ROWS, &loss, B->dlogits);
        break;
    }
    case FC_GELU: /* s = x W^T + b [ROWS, HID], y = gelu(s); the two calls in a library without it */
        rc = pg_linear_act_fwd ? pg_linear_act_fwd(c, pg_gelu_fwd, ROWS, D, HID, B->x, B->w, B->b, B->h, B->y)
                               : fc_then_gelu(c, B);
        break;
    case FC_THEN_GELU: rc = fc_then_gelu(c, B); break;
    case PROJ_GELU: /* g = dy W [ROWS, HID] (W [D, HID]), dx = gelu'(h) g */
        rc = pg_linear_bwd_in_act ? pg_linear_bwd_in_act(c, pg_gelu_bwd_in, ROWS, HID, D, B->dy, B->w2, B->h, B->dh, B->dx)
                                  : proj_then_gelu(c, B);
        break;
    case PROJ_THEN_GELU: rc = proj_then_gelu(c, B); break;
    case LN_W: rc = pg_layernorm_bwd_w(c, ROWS, D, B->x, B->mean, B->rstd, B->dy, B->dg, B->du); break;
    case ADD_LN_F: /* z = x + s, then its layernorm (the residual add before ln2) */
        rc = pg_add_layernorm_fwd(c, ROWS, D, 1e-5f, B->x, B->dg, B->u, B->lw, B->lb, B->y, B->mean, B->rstd);
        break;
    case LN_B_ADD: rc = pg_layernorm_bwd_in_add(c, ROWS, D, B->x, B->lw, B->mean, B->rstd, B->dy, B->du, B->dx); break;
    }
    if (rc) {
        fprintf(stderr, "kernels: %s failed\n", names[k]);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    int rounds = argc == 2 || argc == 3 ? atoi(argv[1]) : 0;
    if (rounds < 1 || (argc == 3 && strcmp(argv[2], "cpu") != 0)) {
        fprintf(stderr, "usage: kernels ROUNDS [cpu]\n");
        return 2;
    }
    if (argc == 3)
        clock_id = CLOCK_THREAD_CPUTIME_ID;
    pg_ctx *c = pg_backend_init(1);
    if (!c)
        return 1;
    size_t big = (size_t)ROWS * HID;
    bufs B = {buf(ROWS * D, 1), buf(big, 2), buf(big, 3),   buf(big, 4),      buf(HID * D, 5), buf(HID * D, 6),
              buf(HID, 7),      buf(big, 8), buf(big, 9),   buf(big, 10),     buf(big, 11),    buf(big, 12),
              buf(big, 13),     buf(ROWS, 14), buf(ROWS, 15), buf(D, 16),     buf(D, 17),
              buf(ROWS * AT_H * AT_HD, 18), buf(ROWS * AT_KV * AT_HD, 19), buf(ROWS * AT_KV * AT_HD, 20),
              buf(big, 21),     buf(ROWS * AT_H * AT_HD, 22), buf(ROWS * AT_H * AT_HD, 23),
              buf(ROWS * AT_H * AT_HD, 24), buf(ROWS * AT_KV * AT_HD, 25), buf(ROWS * AT_KV * AT_HD, 26),
              buf(ROWS * CE_V, 27), buf(ROWS * CE_V, 28), malloc(ROWS * sizeof(int32_t))};
    if (!B.tg) {
        fprintf(stderr, "kernels: out of memory\n");
        return 1;
    }
    for (int i = 0; i < ROWS; i++)
        B.tg[i] = (int32_t)((i * 977) % CE_V);
    for (int k = 0; k < NK; k++) {
        if (k == ADAMW) /* its v (dx, which the kernels before it wrote) a second moment: >= 0 */
            for (size_t i = 0; i < big; i++)
                B.dx[i] *= B.dx[i];
        one(c, k, &B); /* the mean and rstd the backward reads, and a warm cache */
        int calls = 20;
        double best = 1e30;
        for (int r = 0; r < rounds; r++) {
            double t0 = now_s();
            for (int i = 0; i < calls; i++)
                one(c, k, &B);
            double t = (now_s() - t0) / calls;
            if (t < best)
                best = t;
        }
        printf("%s|%ld|%.1f\n", names[k], elems[k], best * 1e6);
    }
    pg_backend_free(c);
    float *all[] = {B.x, B.dy, B.y, B.dx, B.w, B.w2, B.b, B.g, B.u, B.dg, B.du, B.h, B.dh, B.mean, B.rstd, B.lw, B.lb,
                    B.q, B.k, B.v, B.att, B.ctx, B.dctx, B.dq, B.dk, B.dv, B.logits, B.dlogits};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    free(B.tg);
    return 0;
}

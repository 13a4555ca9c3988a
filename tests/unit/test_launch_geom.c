/* tests/unit/test_launch_geom.c — the launch geometry of runtime/cuda
 * (runtime/cuda/launch_geom.h) over the shapes of real models: for every
 * plan.json given (the examples' generated/<model>/plan.json, GPT-2 small
 * among them), every layer's kernels at the largest micro-batch: each grid
 * within CUDA's limits, never empty, and every column, tile, head and sample
 * reached by the kernels that have no stride loop; then the edges (no rows,
 * counts beyond a grid). Run by tests/cuda_geom.t. Plain C, no CUDA. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "kernel_ref.h"
#include "launch_geom.h"
#include "../tap.h"

#define FLASH_THREADS 128 /* flash_attn.cuh: FA_THREADS, 4 warps */
#define MAX_DIMS 4

typedef struct layer {
    char kind[32];
    int64_t in[MAX_DIMS], out[MAX_DIMS];
    int nin, nout;
    int64_t heads, kv_heads, vocab; /* kv_heads: 0 unless grouped (attn_core.cu) */
} layer;

/* What one plan's launches gave. */
typedef struct tally {
    int launches, bad;
    char first_bad[512];
} tally;

static void launch(tally *t, const char *what, pg_geom g, int64_t reach_x, int64_t want_y, int64_t want_z)
{
    char why[300] = "";
    t->launches++;
    int bad = pg_geom_check(g, why, sizeof why);
    if (!bad && reach_x >= 0 && !pg_geom_reaches_x(g, reach_x)) {
        snprintf(why, sizeof why, "x reaches %llu of %lld", (unsigned long long)g.grid[0] * g.block[0],
                 (long long)reach_x);
        bad = 1;
    }
    if (!bad && ((want_y >= 0 && g.grid[1] != (uint64_t)want_y) || (want_z >= 0 && g.grid[2] != (uint64_t)want_z))) {
        snprintf(why, sizeof why, "grid y %u z %u, want %lld and %lld", g.grid[1], g.grid[2], (long long)want_y,
                 (long long)want_z);
        bad = 1;
    }
    if (bad && !t->bad++)
        snprintf(t->first_bad, sizeof t->first_bad, "%s: %s", what, why);
}

static int64_t prod(const int64_t *d, int n)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        p *= d[i];
    return p;
}

/* The kernels runtime/cuda launches for one layer of rows rows (a sample's
 * leading dimensions times the micro-batch), both kernel paths. */
static void layer_launches(tally *t, const layer *L, int64_t mb)
{
    int64_t rows = mb * prod(L->in, L->nin - 1), in = L->in[L->nin - 1], out = L->out[L->nout - 1];
    int64_t n_in = mb * prod(L->in, L->nin), n_out = mb * prod(L->out, L->nout);
    int64_t chunks = pg_colsum_nchunks(rows);
    char w[96];
    snprintf(w, sizeof w, "%s [%lld x %lld -> %lld]", L->kind, (long long)rows, (long long)in, (long long)out);
    if (!strcmp(L->kind, "linear") || !strcmp(L->kind, "logits")) {
        launch(t, w, pg_geom_stride(n_out, PG_CUDA_THREADS), -1, -1, -1);            /* bias broadcast */
        launch(t, w, pg_geom_colsum(out, chunks), out, chunks, 1);                    /* bias gradient, fast path */
        launch(t, w, pg_geom_stride(out, PG_CUDA_THREADS), -1, -1, -1);               /* its reference path */
        launch(t, w, pg_geom_stride(n_in, PG_CUDA_THREADS), -1, -1, -1);              /* bf16 copy of x */
        launch(t, w, pg_geom_stride(in * out, PG_CUDA_THREADS), -1, -1, -1);          /* bf16 copy of w */
        launch(t, w, pg_geom_pitched(pg_bf16_padded_ld(out, out), rows), -1, -1, -1); /* dy, padded */
        launch(t, w, pg_geom_pitched(pg_bf16_padded_ld(in, in), out), -1, -1, -1);   /* w, padded */
    } else if (!strcmp(L->kind, "layernorm")) {
        launch(t, w, pg_geom_rows(rows), -1, -1, -1);
        launch(t, w, pg_geom_colsum(in, chunks), in, chunks, 1);
        launch(t, w, pg_geom_stride(in, PG_CUDA_THREADS), -1, -1, -1);
    } else if (!strcmp(L->kind, "batchnorm")) {
        launch(t, w, pg_geom_stride(in, PG_CUDA_THREADS), -1, -1, -1);
        launch(t, w, pg_geom_stride(n_in, PG_CUDA_THREADS), -1, -1, -1);
        launch(t, w, pg_geom_colsum(in, chunks), in, chunks, 1);
    } else if (!strcmp(L->kind, "embed")) {
        launch(t, w, pg_geom_stride(n_out, PG_CUDA_THREADS), -1, -1, -1);
        launch(t, w, pg_geom_stride(n_in, PG_CUDA_THREADS), -1, -1, -1); /* the id check */
        launch(t, w, pg_geom_embed_bwd_w(out), out, PG_EMBED_BUCKETS, 1);
    } else if (!strcmp(L->kind, "pos_embed")) {
        launch(t, w, pg_geom_stride(n_out, PG_CUDA_THREADS), -1, -1, -1);
        launch(t, w, pg_geom_stride(prod(L->out, L->nout), PG_CUDA_THREADS), -1, -1, -1);
    } else if (!strcmp(L->kind, "rmsnorm")) {
        launch(t, w, pg_geom_rows(rows), -1, -1, -1);                 /* fwd, bwd_in */
        launch(t, w, pg_geom_stride(in, PG_CUDA_THREADS), -1, -1, -1); /* bwd_w */
    } else if (!strcmp(L->kind, "swiglu")) {
        launch(t, w, pg_geom_stride(n_out, PG_CUDA_THREADS), -1, -1, -1); /* fwd, bwd */
    } else if (!strcmp(L->kind, "attention") && L->kv_heads > 0) { /* attn_core.cu: q, k, v projected */
        int64_t T = L->in[0], h = L->heads, hd = in / (h > 0 ? h : 1);
        launch(t, w, pg_geom_stride(mb * T * (h + L->kv_heads) * (hd / 2), PG_CUDA_THREADS), -1, -1, -1); /* rope */
        launch(t, w, pg_geom_rows(mb * h * T), -1, -1, -1);                                         /* softmax */
        launch(t, w, pg_geom_rows(h * T), -1, -1, -1);                              /* its backward, per sample */
        launch(t, w, pg_geom_stride(h * T * T, PG_CUDA_THREADS), -1, -1, -1);         /* dropout, per sample */
    } else if (!strcmp(L->kind, "attention")) {
        int64_t T = L->in[0], h = L->heads, d = in;
        launch(t, w, pg_geom_stride(n_in * 3, PG_CUDA_THREADS), -1, -1, -1);
        launch(t, w, pg_geom_rows(mb * h * T), -1, -1, -1);                             /* softmax */
        launch(t, w, pg_geom_rows(h * T), -1, -1, -1);                                  /* its backward, per sample */
        pg_geom f = pg_geom_flash(mb, T, h, FLASH_THREADS);
        launch(t, w, f, -1, h, mb);                                                     /* fused, forward and backward */
        if ((int64_t)f.grid[0] * PG_FLASH_TILE < T)
            launch(t, w, pg_geom_of(0, 0, 0, 0), -1, -1, -1);                           /* a query tile missed */
        launch(t, w, pg_geom_stride(mb * h * T * 32, PG_CUDA_THREADS), -1, -1, -1);     /* the row terms */
        launch(t, w, pg_geom_colsum(3 * d, chunks), 3 * d, chunks, 1);
    } else { /* relu, gelu, dropout, add/concat, stash, pop: elementwise */
        launch(t, w, pg_geom_stride(n_out, PG_CUDA_THREADS), -1, -1, -1);
    }
}

/* a shape: [1024, 768] */
static int read_shape(pg_json *j, int64_t *d, int *n)
{
    *n = 0;
    if (pg_json_array(j))
        return -1;
    while (pg_json_item(j)) {
        uint64_t v = 0;
        if (pg_json_u64(j, &v) || *n >= MAX_DIMS)
            return -1;
        d[(*n)++] = (int64_t)v;
    }
    return j->failed ? -1 : 0;
}

static int read_layer(pg_json *j, layer *L)
{
    memset(L, 0, sizeof *L);
    char *k = NULL;
    if (pg_json_object(j))
        return -1;
    while (pg_json_member(j, &k)) {
        int rc = 0;
        if (!strcmp(k, "kind")) {
            char *s = NULL;
            rc = pg_json_string(j, &s);
            if (!rc)
                snprintf(L->kind, sizeof L->kind, "%s", s);
            free(s);
        } else if (!strcmp(k, "in"))
            rc = read_shape(j, L->in, &L->nin);
        else if (!strcmp(k, "out"))
            rc = read_shape(j, L->out, &L->nout);
        else if (!strcmp(k, "attrs")) {
            char *a = NULL;
            rc = pg_json_object(j);
            while (!rc && pg_json_member(j, &a)) {
                uint64_t v = 0;
                if (!strcmp(a, "heads") || !strcmp(a, "kv_heads") || !strcmp(a, "vocab")) {
                    rc = pg_json_u64(j, &v);
                    *(!strcmp(a, "heads") ? &L->heads : !strcmp(a, "kv_heads") ? &L->kv_heads : &L->vocab) = (int64_t)v;
                } else
                    rc = pg_json_skip(j);
                free(a);
                a = NULL;
            }
        } else
            rc = pg_json_skip(j);
        free(k);
        k = NULL;
        if (rc)
            return -1;
    }
    return j->failed || !L->nin || !L->nout ? -1 : 0;
}

/* One plan: its layers' launches at the largest micro-batch, the loss's and the optimizer's. */
static void check_plan(const char *path)
{
    FILE *f = fopen(path, "rb");
    static char text[1 << 22];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    pg_json j;
    pg_json_init(&j, text, n);
    tally t = {0, 0, ""};
    int64_t mb = 0, loss_rows = 0, vocab = 0;
    int nlayers = 0, ok = n > 0 && !pg_json_object(&j);
    char *k = NULL;
    layer L, last;
    memset(&last, 0, sizeof last);
    while (ok && pg_json_member(&j, &k)) {
        if (!strcmp(k, "microbatch_rows")) {
            ok = !pg_json_array(&j);
            while (ok && pg_json_item(&j)) {
                uint64_t v = 0;
                ok = !pg_json_u64(&j, &v);
                if ((int64_t)v > mb)
                    mb = (int64_t)v;
            }
        } else if (!strcmp(k, "layers")) {
            ok = !pg_json_array(&j);
            while (ok && pg_json_item(&j)) {
                ok = !read_layer(&j, &L);
                if (ok) {
                    layer_launches(&t, &L, mb > 0 ? mb : 1);
                    last = L;
                    nlayers++;
                }
            }
        } else
            ok = !pg_json_skip(&j);
        free(k);
        k = NULL;
    }
    ok = ok && !j.failed && nlayers > 0 && mb > 0;
    /* the loss on the last layer's output, the optimizer's reductions */
    loss_rows = mb * prod(last.out, last.nout - 1);
    vocab = last.out[last.nout - 1];
    launch(&t, "cross-entropy rows", pg_geom_rows(loss_rows), -1, -1, -1);
    launch(&t, "loss and sumsq reduction", pg_geom_reduce(), -1, -1, -1);
    launch(&t, "mse and the optimizer", pg_geom_stride(loss_rows * vocab, PG_CUDA_THREADS), -1, -1, -1);
    OK(ok && t.bad == 0, "%s: %d layers at micro-batches of %lld: %d launches within CUDA's limits, every column, tile, "
       "head and sample reached%s%s", path, nlayers, (long long)mb, t.launches, t.bad ? "; first wrong: " : "",
       t.first_bad);
    if (!ok)
        printf("# %s: %s\n", path, j.failed ? j.err : "no layers or micro-batches read");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        check_plan(argv[i]);
    char why[300];
    OK(pg_geom_rows(0).grid[0] == 1 && pg_geom_stride(0, 256).grid[0] == 1 && !pg_geom_check(pg_geom_rows(0), why, 300),
       "no rows, no items: still one block (an empty grid is cudaErrorInvalidConfiguration)");
    OK(pg_geom_rows(100000).grid[0] == 65535 && pg_geom_stride((int64_t)1 << 40, 256).grid[0] == 65535,
       "rows and items beyond a grid: 65535 blocks that stride over them");
    OK(pg_geom_check(pg_geom_colsum(768, 70000), why, sizeof why) == 1 && strstr(why, "outside CUDA's limits"),
       "70000 chunks of a column sum do not fit a grid's y (the launcher refuses: %s)", why);
    OK(pg_geom_reaches_x(pg_geom_embed_bwd_w(50257), 50257) && pg_geom_reaches_x(pg_geom_colsum(50257, 1), 50257) &&
           !pg_geom_reaches_x(pg_geom_of(1, 1, 1, 256), 257),
       "the column kernels reach GPT-2's vocabulary (50257 columns); one block of 256 does not reach 257");
    pg_geom f = pg_geom_flash(2, 1024, 12, FLASH_THREADS);
    OK(f.grid[0] == 16 && f.grid[1] == 12 && f.grid[2] == 2 && f.block[0] == 128,
       "GPT-2 small's fused attention: 16 query tiles x 12 heads x 2 samples of 128 threads");
    return DONE();
}

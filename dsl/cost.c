/* dsl/cost.c — the cost model (estimated flops per layer) and the reader of
 * measured profiles. See cost.h for the profile format. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cost.h"
#include "json.h"

/* ---- estimated cost ---------------------------------------------------------- */

/* Floating-point operations per sample, counting a multiply-add as 2:
 *   linear(in -> out) on r rows (r = numel(in) / in): F = B = W = 2 r in out
 *     (B: dX = dY W, W: dW = dY^T X), plus r out for the bias in F and W;
 *   logits (d -> V): as a linear without bias;
 *   attention on [T, d] with kv = kv_heads * d / heads key and value columns:
 *     q, k, v and output GEMMs 2 T d (2 d + 2 kv) in each of F, B, W (8 T d^2
 *     without grouped-query heads); scores and their weighted sum 4 T^2 d in F
 *     and 8 T^2 d in B (causal masking is not discounted); rotary positions
 *     3 per q and k element in F and B;
 *   swiglu (d -> h): its two GEMMs 4 r d h in each of F, B, W, plus 6 r h
 *     (silu and product) in F and B;
 *   layernorm / batchnorm: 5 per element in F and B, 2 in W (scale, shift);
 *   rmsnorm: 4 per element in F and B, 1 in W;
 *   embed: a row gather, 1 per output element in F and W, no B (integer input);
 *   pos_embed: 1 per element in F, B and W;
 *   relu, gelu, dropout, pop (add or concat): 1 per output element in F and B
 *     (gelu 8: its tanh);
 *   stash: nothing (the tensor is kept, not computed);
 *   the kinds of convolutional networks: cost_conv.c.
 * Element-wise layers are memory-bound, so flops understate them; measured
 * profiles (pipegen --balance) correct that. */
pg_layer_cost pg_layer_flops(const ir_layer *L)
{
    pg_layer_cost c = { 0, 0, 0, 0 };
    double out = (double)pg_shape_numel(&L->out), in = (double)pg_shape_numel(&L->in);
    switch (L->kind) {
    case LK_LINEAR: {
        double fi = L->in_features > 0 ? (double)L->in_features : 1.0, fo = (double)L->out_features;
        double rows = in / fi, gemm = 2.0 * rows * fi * fo, bias = L->bias ? rows * fo : 0.0;
        c.fwd = gemm + bias;
        c.bwd_b = gemm;
        c.bwd_w = gemm + bias;
        break;
    }
    case LK_LOGITS: {
        double d = L->dim > 0 ? (double)L->dim : 1.0, gemm = 2.0 * (in / d) * d * (double)L->vocab;
        c.fwd = c.bwd_b = c.bwd_w = gemm;
        break;
    }
    case LK_ATTENTION: {
        double T = L->in.rank >= 2 ? (double)L->in.dim[L->in.rank - 2] : 1.0;
        double d = L->in.rank >= 1 ? (double)L->in.dim[L->in.rank - 1] : 1.0;
        double kv = L->heads > 0 && L->kv_heads > 0 ? d * (double)L->kv_heads / (double)L->heads : d;
        double rows = in / (T * d > 0 ? T * d : 1.0), gemms = 2.0 * T * d * (2.0 * d + 2.0 * kv), mix = 4.0 * T * T * d;
        double rope = L->rope_theta > 0 ? 3.0 * T * (d + kv) : 0.0;
        c.fwd = rows * (gemms + mix + rope);
        c.bwd_b = rows * (gemms + 2.0 * mix + rope);
        c.bwd_w = rows * gemms;
        break;
    }
    case LK_SWIGLU: {
        double fi = L->in_features > 0 ? (double)L->in_features : 1.0, fo = (double)L->out_features;
        double rows = in / fi, gemms = 4.0 * rows * fi * fo;
        c.fwd = c.bwd_b = gemms + 6.0 * rows * fo;
        c.bwd_w = gemms;
        break;
    }
    case LK_RMSNORM:
        c.fwd = c.bwd_b = 4.0 * out;
        c.bwd_w = out;
        break;
    case LK_LAYERNORM: case LK_BATCHNORM:
        c.fwd = c.bwd_b = 5.0 * out;
        c.bwd_w = 2.0 * out;
        break;
    case LK_EMBED:
        c.fwd = c.bwd_w = out;
        break;
    case LK_POS_EMBED:
        c.fwd = c.bwd_b = c.bwd_w = out;
        break;
    case LK_GELU:
        c.fwd = c.bwd_b = 8.0 * out;
        break;
    case LK_RELU: case LK_DROPOUT: case LK_POP:
        c.fwd = c.bwd_b = out;
        break;
    case LK_CONV2D: case LK_CONV1D: case LK_CONV_T2D: case LK_MAXPOOL2D: case LK_AVGPOOL2D:
    case LK_GLOBAL_AVGPOOL: case LK_UPSAMPLE: case LK_FLATTEN: case LK_RESHAPE: case LK_TRANSPOSE:
    case LK_MEAN: case LK_BATCHNORM2D: case LK_SIGMOID: case LK_TANH: case LK_SILU:
        c = pg_layer_flops_conv(L); /* cost_conv.c */
        break;
    case LK_STASH: case LK__COUNT:
        break;
    }
    return c;
}

static int has_weights(const ir_layer *L)
{
    return L->nparam > 0;
}

pg_layer_cost pg_layer_cost_of(const ir_layer *L, const pg_profile *prof, double rows)
{
    const pg_profile_entry *e = prof && L->name ? pg_profile_find(prof, L->name) : NULL;
    if (e && e->bwd_b_s >= 0 && e->bwd_w_s >= 0) { /* measured apart (--profile) */
        pg_layer_cost c = { e->fwd_s, e->bwd_b_s, e->bwd_w_s, e->recompute_s >= 0 ? e->recompute_s : e->fwd_s };
        return c;
    }
    if (e) {
        pg_layer_cost c = { e->fwd_s, e->bwd_s, 0, e->recompute_s >= 0 ? e->recompute_s : e->fwd_s };
        if (has_weights(L))
            c.bwd_b = c.bwd_w = e->bwd_s / 2;
        return c;
    }
    pg_layer_cost c = pg_layer_flops(L);
    c.fwd *= rows;
    c.bwd_b *= rows;
    c.bwd_w *= rows;
    c.recompute = c.fwd;
    return c;
}

/* ---- the profile reader ----------------------------------------------------------- */

const pg_profile_entry *pg_profile_find(const pg_profile *p, const char *name)
{
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->e[i].name, name) == 0)
            return &p->e[i];
    return NULL;
}

void pg_profile_free(pg_profile *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->e[i].name);
    free(p->e);
    free(p->path);
    free(p->model);
    free(p->plan_hash);
    memset(p, 0, sizeof *p);
}

/* The reader (runtime/core/json.h) and what the profile collects. Every
 * error, the reader's or the profile's own, is reported once, as
 * "FILE:LINE:COL: error: profile: ...", through report(). */
typedef struct jcur {
    pg_json j;
    pg_diag *d;
    const char *path;
    int reported, cap;
    pg_profile *p;
    size_t *at; /* [cap]: the byte where each layer's object starts (repeats are reported there) */
} jcur;

static pg_loc jloc_at(const jcur *c, size_t at)
{
    pg_loc l = { c->path, 0, 0 };
    pg_json_place(&c->j, at, &l.line, &l.col);
    return l;
}

/* The reader's first error, reported once; 1 when there was one. */
static int report(jcur *c)
{
    if (!c->j.failed)
        return 0;
    if (!c->reported) {
        c->reported = 1;
        pg_loc l = { c->path, c->j.err_line, c->j.err_col };
        pg_error(c->d, l, "profile: %s", c->j.err);
    }
    return 1;
}

/* What a measured value may be at most: a time per micro-batch of more than
 * a million seconds (11 days) or a rate of more than 1e18 bytes a second is
 * no measurement, and sums of such values would overflow to inf and make the
 * split search compare NaN. */
#define PROFILE_MAX_S 1e6
#define PROFILE_MAX_RATE 1e18

/* A seconds (or, "..._per_s", bytes per second) value at the current place,
 * finite, >= 0 and not absurd; -1 after an error. */
static double jseconds(jcur *c, const char *key)
{
    size_t at = pg_json_here(&c->j);
    double v;
    if (pg_json_number(&c->j, &v))
        return -1;
    int rate = strstr(key, "_per_s") != NULL;
    double max = rate ? PROFILE_MAX_RATE : PROFILE_MAX_S;
    if (!isfinite(v)) {
        pg_json_fail_at(&c->j, at, "%s is not a finite number (%g)", key, v);
        return -1;
    }
    if (v < 0) {
        pg_json_fail_at(&c->j, at, "%s must not be negative", key);
        return -1;
    }
    if (v > max) {
        pg_json_fail_at(&c->j, at, "%s = %g is absurd: %s", key, v,
                        rate ? "more than 1e18 bytes a second" : "more than 1e6 seconds per micro-batch (a profile "
                                                                 "holds seconds)");
        return -1;
    }
    return v;
}

static void jlayer(jcur *c)
{
    pg_profile_entry e = { NULL, -1, -1, -1, -1, -1 };
    size_t at = pg_json_here(&c->j);
    char *key;
    if (pg_json_peek(&c->j) != PG_JSON_OBJECT) {
        pg_json_fail(&c->j, "expected a layer object `{\"name\": ..., \"fwd_s\": ..., \"bwd_s\": ...}`");
        return;
    }
    pg_json_object(&c->j);
    while (pg_json_member(&c->j, &key)) {
        if (strcmp(key, "name") == 0) {
            free(e.name);
            e.name = NULL;
            pg_json_string(&c->j, &e.name);
        } else if (strcmp(key, "fwd_s") == 0 || strcmp(key, "bwd_s") == 0 || strcmp(key, "bwd_b_s") == 0 ||
                   strcmp(key, "bwd_w_s") == 0 || strcmp(key, "recompute_s") == 0) {
            double v = jseconds(c, key);
            *(key[0] == 'f' ? &e.fwd_s : key[0] == 'r' ? &e.recompute_s : strcmp(key, "bwd_s") == 0 ? &e.bwd_s
                              : strcmp(key, "bwd_b_s") == 0 ? &e.bwd_b_s : &e.bwd_w_s) = v;
        } else {
            pg_json_skip(&c->j);
        }
        free(key);
    }
    if (!c->j.failed && (!e.name || e.fwd_s < 0 || e.bwd_s < 0))
        pg_json_fail_at(&c->j, at, "a layer needs \"name\", \"fwd_s\" and \"bwd_s\"");
    if (c->j.failed) {
        free(e.name);
        return;
    }
    if (c->p->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        pg_profile_entry *ne = realloc(c->p->e, (size_t)cap * sizeof *ne);
        if (ne)
            c->p->e = ne;
        size_t *na = ne ? realloc(c->at, (size_t)cap * sizeof *na) : NULL;
        if (na)
            c->at = na;
        if (!ne || !na) {
            free(e.name);
            pg_json_fail(&c->j, "out of memory (a smaller file?)");
            return;
        }
        c->cap = cap;
    }
    c->at[c->p->n] = at;
    c->p->e[c->p->n++] = e;
}

/* "messages": {"latency_s": L, "bytes_per_s": R, ...}: what one message costs */
static void jmessages(jcur *c)
{
    char *key;
    if (pg_json_peek(&c->j) != PG_JSON_OBJECT) {
        pg_json_fail(&c->j, "expected the messages object `{`");
        return;
    }
    pg_json_object(&c->j);
    while (pg_json_member(&c->j, &key)) {
        if (strcmp(key, "latency_s") == 0 || strcmp(key, "bytes_per_s") == 0 || strcmp(key, "send_latency_s") == 0 ||
            strcmp(key, "send_bytes_per_s") == 0 || strcmp(key, "send_s") == 0 ||
            strcmp(key, "recv_latency_s") == 0 || strcmp(key, "recv_bytes_per_s") == 0) {
            double v = jseconds(c, key);
            if (strcmp(key, "latency_s") == 0) {
                c->p->latency_s = v;
                c->p->has_messages = 1;
            } else if (strcmp(key, "bytes_per_s") == 0) {
                c->p->bytes_per_s = v;
            } else if (strcmp(key, "recv_latency_s") == 0) {
                c->p->recv_latency_s = v;
                c->p->has_recv_cost = 1;
            } else if (strcmp(key, "recv_bytes_per_s") == 0) {
                c->p->recv_bytes_per_s = v;
            } else if (strcmp(key, "send_bytes_per_s") == 0) {
                c->p->send_bytes_per_s = v;
            } else if (strcmp(key, "send_latency_s") == 0) {
                c->p->send_latency_s = v;
                c->p->has_send_cost = 2; /* the fit wins over the mean */
            } else if (c->p->has_send_cost < 2) { /* send_s: the mean, no size term */
                c->p->send_latency_s = v;
                c->p->has_send_cost = 1;
            }
        } else {
            pg_json_skip(&c->j);
        }
        free(key);
    }
}

/* One object of "stage_costs" (costs = 1) or "stage_times" (costs = 0: only
 * its optimizer_s, and only when no "stage_costs" came). */
static void jstage_cost(jcur *c, int costs)
{
    pg_stage_cost sc = { 0, 0, 0, 0, 0, 0, 0, 0 };
    int stage = -1;
    size_t at = pg_json_here(&c->j);
    char *key;
    if (pg_json_peek(&c->j) != PG_JSON_OBJECT) {
        pg_json_fail(&c->j, "expected a stage object `{\"stage\": ..., ...}`");
        return;
    }
    pg_json_object(&c->j);
    static const char *const keys[] = { "optimizer_s", "grad_norm_s", "verdict_s", "tie_s", "step_start_s",
                                        "step_end_s", "send_s" };
    double *slot[] = { &sc.optimizer_s, &sc.grad_norm_s, &sc.verdict_s, &sc.tie_s, &sc.step_start_s, &sc.step_end_s,
                       &sc.send_s };
    enum { SEND_S = 6 }; /* the key that sets has_send_s */
    enum { NKEYS = sizeof keys / sizeof keys[0] };
    while (pg_json_member(&c->j, &key)) {
        int k = 0;
        while (k < NKEYS && strcmp(key, keys[k]) != 0)
            k++;
        if (k < NKEYS) {
            double v = jseconds(c, key);
            if (!c->j.failed)
                *slot[k] = v;
            if (!c->j.failed && k == SEND_S)
                sc.has_send_s = 1;
        } else if (strcmp(key, "stage") == 0) {
            size_t nat = pg_json_here(&c->j);
            double v;
            if (!pg_json_number(&c->j, &v)) {
                if (v < 0 || v >= PG_PROFILE_MAX_STAGES || v != (int)v)
                    pg_json_fail_at(&c->j, nat, "stage must be 0 .. %d", PG_PROFILE_MAX_STAGES - 1);
                else
                    stage = (int)v; /* (int) only of a checked stage */
            }
        } else {
            pg_json_skip(&c->j);
        }
        free(key);
    }
    if (!c->j.failed && stage < 0)
        pg_json_fail_at(&c->j, at, "a stage entry needs \"stage\"");
    if (c->j.failed)
        return;
    if (costs) {
        if (c->p->has_stage_costs != 1)
            memset(c->p->stage, 0, sizeof c->p->stage);
        c->p->has_stage_costs = 1;
        c->p->stage[stage] = sc;
    } else if (c->p->has_stage_costs != 1) {
        c->p->has_stage_costs = 2;
        c->p->stage[stage].optimizer_s = sc.optimizer_s;
    }
}

static void jlist(jcur *c, void (*each)(jcur *, int), int arg, const char *what)
{
    if (pg_json_peek(&c->j) != PG_JSON_ARRAY) {
        pg_json_fail(&c->j, "expected `[` (%s)", what);
        return;
    }
    pg_json_array(&c->j);
    while (pg_json_item(&c->j)) {
        each(c, arg);
        if (c->j.failed)
            return;
    }
}

static void jlayer_item(jcur *c, int unused)
{
    (void)unused;
    jlayer(c);
}

static const pg_profile_entry *sort_base;

static int by_name(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    int c = strcmp(sort_base[x].name, sort_base[y].name);
    return c ? c : (x > y) - (x < y);
}

/* A layer listed twice, found by sorting the names (n log n: a 64 MiB
 * profile holds millions of layers): reported at the first repeat in the file. */
static int jrepeats(jcur *c)
{
    int n = c->p->n, rep = -1;
    if (n < 2)
        return 0;
    int *ix = malloc((size_t)n * sizeof *ix);
    if (!ix) {
        pg_loc l = { c->path, 0, 0 };
        pg_error(c->d, l, "profile: out of memory (a smaller file?)");
        return -1;
    }
    for (int i = 0; i < n; i++)
        ix[i] = i;
    sort_base = c->p->e;
    qsort(ix, (size_t)n, sizeof *ix, by_name);
    for (int i = 1; i < n; i++)
        if (!strcmp(c->p->e[ix[i - 1]].name, c->p->e[ix[i]].name) && (rep < 0 || ix[i] < rep))
            rep = ix[i]; /* ix[i] > ix[i - 1]: the later of the two */
    free(ix);
    if (rep >= 0) {
        pg_error(c->d, jloc_at(c, c->at[rep]), "profile: layer '%s' is listed twice", c->p->e[rep].name);
        return -1;
    }
    return 0;
}

int pg_profile_read(const char *path, pg_profile *p, pg_diag *d)
{
    memset(p, 0, sizeof *p);
    pg_source src;
    if (pg_source_read(&src, path, (size_t)64 << 20, d) != 0)
        return -1;
    const pg_source *saved = d->src;
    d->src = &src;
    jcur c = { .d = d, .path = src.path, .p = p };
    pg_json_init(&c.j, src.text, src.len);
    int seen_layers = 0, failed;
    char *key;
    if (pg_json_peek(&c.j) != PG_JSON_OBJECT)
        pg_json_fail(&c.j, "expected `{` (a profile is {\"layers\": [...]})");
    else
        pg_json_object(&c.j);
    while (pg_json_member(&c.j, &key)) {
        if (strcmp(key, "layers") == 0) {
            seen_layers = 1;
            jlist(&c, jlayer_item, 0, "the list of layers");
        } else if (strcmp(key, "messages") == 0) {
            jmessages(&c);
        } else if (strcmp(key, "stage_costs") == 0 || strcmp(key, "stage_times") == 0) {
            jlist(&c, jstage_cost, key[6] == 'c', "a list of stages");
        } else if ((strcmp(key, "model") == 0 || strcmp(key, "plan_hash") == 0) &&
                   pg_json_peek(&c.j) == PG_JSON_STRING) { /* what it was measured on (--profile writes them) */
            char **dst = key[0] == 'm' ? &p->model : &p->plan_hash;
            free(*dst);
            *dst = NULL;
            pg_json_string(&c.j, dst);
        } else {
            pg_json_skip(&c.j);
        }
        free(key);
    }
    pg_json_end(&c.j);
    failed = report(&c) || jrepeats(&c) < 0;
    free(c.at);
    if (!failed && !seen_layers) {
        pg_loc l = { src.path, 0, 0 };
        pg_error(d, l, "profile: no \"layers\" list");
        failed = 1;
    }
    d->src = saved;
    if (!failed) {
        p->path = src.path; /* keep the path; the text goes */
        src.path = NULL;
    }
    pg_source_free(&src);
    if (failed) {
        pg_profile_free(p);
        return -1;
    }
    return 0;
}

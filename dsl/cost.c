/* dsl/cost.c — the cost model (estimated flops per layer) and the reader of
 * measured profiles. See cost.h for the profile format. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cost.h"

/* ---- estimated cost ---------------------------------------------------------- */

/* Floating-point operations per sample, counting a multiply-add as 2:
 *   linear(in -> out) on r rows (r = numel(in) / in): F = B = W = 2 r in out
 *     (B: dX = dY W, W: dW = dY^T X), plus r out for the bias in F and W;
 *   logits (d -> V): as a linear without bias;
 *   attention on [T, d]: qkv and projection GEMMs 8 T d^2 in each of F, B, W;
 *     scores and their weighted sum 4 T^2 d in F and 8 T^2 d in B (causal
 *     masking is not discounted);
 *   layernorm / batchnorm: 5 per element in F and B, 2 in W (scale, shift);
 *   embed: a row gather, 1 per output element in F and W, no B (integer input);
 *   pos_embed: 1 per element in F, B and W;
 *   relu, gelu, dropout, pop (add or concat): 1 per output element in F and B
 *     (gelu 8: its tanh);
 *   stash: nothing (the tensor is kept, not computed).
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
        double rows = in / (T * d > 0 ? T * d : 1.0), gemms = 8.0 * T * d * d, mix = 4.0 * T * T * d;
        c.fwd = rows * (gemms + mix);
        c.bwd_b = rows * (gemms + 2.0 * mix);
        c.bwd_w = rows * gemms;
        break;
    }
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
    memset(p, 0, sizeof *p);
}

/* A cursor over the JSON text with its line and column for messages. */
typedef struct jcur {
    const char *s, *end;
    int line;
    const char *line_start;
    pg_diag *d;
    const char *path;
    int failed, cap;
    pg_profile *p;
    pg_loc *at;    /* [cap]: where each layer's object starts (repeats are reported there) */
} jcur;

static pg_loc jloc(const jcur *j)
{
    pg_loc l = { j->path, j->line, (int)(j->s - j->line_start) + 1 };
    return l;
}

static void jfail(jcur *j, const char *what)
{
    if (j->failed)
        return;
    j->failed = 1;
    if (j->s >= j->end)
        pg_error(j->d, jloc(j), "profile: expected %s, found the end of the file", what);
    else
        pg_error(j->d, jloc(j), "profile: expected %s, found `%c`", what, *j->s);
}

static void jspace(jcur *j)
{
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\r' || *j->s == '\n')) {
        if (*j->s == '\n') {
            j->line++;
            j->line_start = j->s + 1;
        }
        j->s++;
    }
}

static int jeat(jcur *j, char c)
{
    jspace(j);
    if (j->s < j->end && *j->s == c) {
        j->s++;
        return 1;
    }
    return 0;
}

/* A string without escapes other than \" \\ \/ (layer names need no more);
 * malloc'd, or NULL after reporting. */
static char *jstring(jcur *j)
{
    jspace(j);
    if (j->s >= j->end || *j->s != '"') {
        jfail(j, "a string");
        return NULL;
    }
    const char *start = ++j->s, *q = start;
    size_t n = 0;
    while (q < j->end && *q != '"' && *q != '\n') /* its length bounds the copy: no allocation of the rest of the file */
        q += *q == '\\' && q + 1 < j->end ? 2 : 1;
    char *out = malloc((size_t)(q - start) + 1);
    if (!out) {
        jfail(j, "a shorter file (out of memory)");
        return NULL;
    }
    while (j->s < j->end && *j->s != '"' && *j->s != '\n') {
        if (*j->s == '\\' && j->s + 1 < j->end && j->s[1] && strchr("\"\\/", j->s[1])) {
            out[n++] = j->s[1];
            j->s += 2;
            continue;
        }
        if (*j->s == '\\') {
            jfail(j, "no escape other than \\\" \\\\ \\/ in a name");
            free(out);
            return NULL;
        }
        out[n++] = *j->s++;
    }
    if (j->s >= j->end || *j->s != '"') {
        jfail(j, "the closing `\"` of a string");
        free(out);
        return NULL;
    }
    j->s++;
    out[n] = 0;
    return out;
}

static double jnumber(jcur *j)
{
    jspace(j);
    char buf[64];
    size_t n = 0;
    while (j->s + n < j->end && n < sizeof buf - 1 && j->s[n] && strchr("+-.0123456789eE", j->s[n]))
        n++;
    memcpy(buf, j->s, n);
    buf[n] = 0;
    char *e;
    double v = n ? strtod(buf, &e) : 0;
    if (!n || *e || !isfinite(v)) {
        jfail(j, "a number");
        return 0;
    }
    j->s += n;
    return v;
}

/* Skips any value (for keys the format does not use). */
static void jskip(jcur *j, int depth)
{
    jspace(j);
    if (depth > 64) {
        jfail(j, "less nesting");
        return;
    }
    if (j->s >= j->end) {
        jfail(j, "a value");
    } else if (*j->s == '"') {
        free(jstring(j));
    } else if (*j->s == '{' || *j->s == '[') {
        char close = *j->s == '{' ? '}' : ']';
        j->s++;
        if (jeat(j, close))
            return;
        do {
            if (close == '}') {
                free(jstring(j));
                if (!j->failed && !jeat(j, ':'))
                    jfail(j, "`:`");
            }
            if (!j->failed)
                jskip(j, depth + 1);
        } while (!j->failed && jeat(j, ','));
        if (!j->failed && !jeat(j, close))
            jfail(j, close == '}' ? "`,` or `}`" : "`,` or `]`");
    } else if (strncmp(j->s, "true", 4) == 0 || strncmp(j->s, "null", 4) == 0) {
        j->s += 4;
    } else if (strncmp(j->s, "false", 5) == 0) {
        j->s += 5;
    } else {
        jnumber(j);
    }
}

static void jlayer(jcur *j)
{
    pg_profile_entry e = { NULL, -1, -1, -1, -1, -1 };
    pg_loc at;
    jspace(j);
    at = jloc(j);
    if (!jeat(j, '{')) {
        jfail(j, "a layer object `{\"name\": ..., \"fwd_s\": ..., \"bwd_s\": ...}`");
        return;
    }
    if (!jeat(j, '}'))
        do {
            char *key = jstring(j);
            if (!key)
                break;
            if (!jeat(j, ':')) {
                free(key);
                jfail(j, "`:`");
                break;
            }
            if (strcmp(key, "name") == 0) {
                free(e.name);
                e.name = jstring(j);
            } else if (strcmp(key, "fwd_s") == 0 || strcmp(key, "bwd_s") == 0 || strcmp(key, "bwd_b_s") == 0 ||
                       strcmp(key, "bwd_w_s") == 0 || strcmp(key, "recompute_s") == 0) {
                pg_loc nl;
                jspace(j);
                nl = jloc(j);
                double v = jnumber(j);
                if (!j->failed && v < 0) {
                    pg_error(j->d, nl, "profile: %s must not be negative", key);
                    j->failed = 1;
                }
                *(key[0] == 'f' ? &e.fwd_s : key[0] == 'r' ? &e.recompute_s : strcmp(key, "bwd_s") == 0 ? &e.bwd_s
                                  : strcmp(key, "bwd_b_s") == 0 ? &e.bwd_b_s : &e.bwd_w_s) = v;
            } else {
                jskip(j, 1);
            }
            free(key);
        } while (!j->failed && jeat(j, ','));
    if (!j->failed && !jeat(j, '}'))
        jfail(j, "`,` or `}`");
    if (!j->failed && (!e.name || e.fwd_s < 0 || e.bwd_s < 0)) {
        pg_error(j->d, at, "profile: a layer needs \"name\", \"fwd_s\" and \"bwd_s\"");
        j->failed = 1;
    }
    if (j->failed) {
        free(e.name);
        return;
    }
    if (j->p->n == j->cap) {
        int cap = j->cap ? 2 * j->cap : 16;
        pg_profile_entry *ne = realloc(j->p->e, (size_t)cap * sizeof *ne);
        if (ne)
            j->p->e = ne;
        pg_loc *na = ne ? realloc(j->at, (size_t)cap * sizeof *na) : NULL;
        if (na)
            j->at = na;
        if (!ne || !na) {
            free(e.name);
            jfail(j, "a smaller file (out of memory)");
            return;
        }
        j->cap = cap;
    }
    j->at[j->p->n] = at;
    j->p->e[j->p->n++] = e;
}

/* "messages": {"latency_s": L, "bytes_per_s": R, ...}: what one message costs */
static void jmessages(jcur *j)
{
    if (!jeat(j, '{')) {
        jfail(j, "`{` (the messages object)");
        return;
    }
    if (!jeat(j, '}'))
        do {
            char *key = jstring(j);
            if (!key)
                break;
            if (!jeat(j, ':'))
                jfail(j, "`:`");
            else if (strcmp(key, "latency_s") == 0 || strcmp(key, "bytes_per_s") == 0 ||
                     strcmp(key, "send_latency_s") == 0 || strcmp(key, "send_bytes_per_s") == 0 ||
                     strcmp(key, "send_s") == 0 || strcmp(key, "recv_latency_s") == 0 ||
                     strcmp(key, "recv_bytes_per_s") == 0) {
                jspace(j);
                pg_loc nl = jloc(j);
                double v = jnumber(j);
                if (!j->failed && v < 0) {
                    pg_error(j->d, nl, "profile: %s must not be negative", key);
                    j->failed = 1;
                }
                if (strcmp(key, "latency_s") == 0) {
                    j->p->latency_s = v;
                    j->p->has_messages = 1;
                } else if (strcmp(key, "bytes_per_s") == 0) {
                    j->p->bytes_per_s = v;
                } else if (strcmp(key, "recv_latency_s") == 0) {
                    j->p->recv_latency_s = v;
                    j->p->has_recv_cost = 1;
                } else if (strcmp(key, "recv_bytes_per_s") == 0) {
                    j->p->recv_bytes_per_s = v;
                } else if (strcmp(key, "send_bytes_per_s") == 0) {
                    j->p->send_bytes_per_s = v;
                } else if (strcmp(key, "send_latency_s") == 0) {
                    j->p->send_latency_s = v;
                    j->p->has_send_cost = 2; /* the fit wins over the mean */
                } else if (j->p->has_send_cost < 2) { /* send_s: the mean, no size term */
                    j->p->send_latency_s = v;
                    j->p->has_send_cost = 1;
                }
            } else {
                jskip(j, 1);
            }
            free(key);
        } while (!j->failed && jeat(j, ','));
    if (!j->failed && !jeat(j, '}'))
        jfail(j, "`,` or `}`");
}

/* One object of "stage_costs" (costs = 1) or "stage_times" (costs = 0: only
 * its optimizer_s, and only when no "stage_costs" came). */
static void jstage_cost(jcur *j, int costs)
{
    pg_stage_cost c = { 0, 0, 0, 0, 0 };
    int stage = -1;
    pg_loc at;
    jspace(j);
    at = jloc(j);
    if (!jeat(j, '{')) {
        jfail(j, "a stage object `{\"stage\": ..., ...}`");
        return;
    }
    static const char *const keys[] = { "optimizer_s", "grad_norm_s", "tie_reduce_s", "step_start_s", "step_end_s" };
    double *slot[] = { &c.optimizer_s, &c.grad_norm_s, &c.tie_reduce_s, &c.step_start_s, &c.step_end_s };
    if (!jeat(j, '}'))
        do {
            char *key = jstring(j);
            if (!key)
                break;
            int k = 0;
            while (k < 5 && strcmp(key, keys[k]) != 0)
                k++;
            if (!jeat(j, ':'))
                jfail(j, "`:`");
            else if (strcmp(key, "stage") == 0 || k < 5) {
                jspace(j);
                pg_loc nl = jloc(j);
                double v = jnumber(j);
                if (!j->failed && (v < 0 || (k == 5 && (v >= PG_PROFILE_MAX_STAGES || v != (int)v)))) {
                    if (k == 5)
                        pg_error(j->d, nl, "profile: stage must be 0 .. %d", PG_PROFILE_MAX_STAGES - 1);
                    else
                        pg_error(j->d, nl, "profile: %s must not be negative", key);
                    j->failed = 1;
                }
                if (!j->failed && k == 5) /* (int) only of a checked stage */
                    stage = (int)v;
                else if (!j->failed)
                    *slot[k] = v;
            } else {
                jskip(j, 1);
            }
            free(key);
        } while (!j->failed && jeat(j, ','));
    if (!j->failed && !jeat(j, '}'))
        jfail(j, "`,` or `}`");
    if (!j->failed && stage < 0) {
        pg_error(j->d, at, "profile: a stage entry needs \"stage\"");
        j->failed = 1;
    }
    if (j->failed)
        return;
    if (costs) {
        if (j->p->has_stage_costs != 1)
            memset(j->p->stage, 0, sizeof j->p->stage);
        j->p->has_stage_costs = 1;
        j->p->stage[stage] = c;
    } else if (j->p->has_stage_costs != 1) {
        j->p->has_stage_costs = 2;
        j->p->stage[stage].optimizer_s = c.optimizer_s;
    }
}

static void jstage_list(jcur *j, int costs)
{
    if (!jeat(j, '[')) {
        jfail(j, "`[` (a list of stages)");
        return;
    }
    if (jeat(j, ']'))
        return;
    do
        jstage_cost(j, costs);
    while (!j->failed && jeat(j, ','));
    if (!j->failed && !jeat(j, ']'))
        jfail(j, "`,` or `]`");
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
static void jrepeats(jcur *j)
{
    int n = j->p->n, rep = -1;
    if (n < 2)
        return;
    int *ix = malloc((size_t)n * sizeof *ix);
    if (!ix) {
        jfail(j, "a smaller file (out of memory)");
        return;
    }
    for (int i = 0; i < n; i++)
        ix[i] = i;
    sort_base = j->p->e;
    qsort(ix, (size_t)n, sizeof *ix, by_name);
    for (int i = 1; i < n; i++)
        if (!strcmp(j->p->e[ix[i - 1]].name, j->p->e[ix[i]].name) && (rep < 0 || ix[i] < rep))
            rep = ix[i]; /* ix[i] > ix[i - 1]: the later of the two */
    free(ix);
    if (rep >= 0) {
        pg_error(j->d, j->at[rep], "profile: layer '%s' is listed twice", j->p->e[rep].name);
        j->failed = 1;
    }
}

int pg_profile_read(const char *path, pg_profile *p, pg_diag *d)
{
    memset(p, 0, sizeof *p);
    pg_source src;
    if (pg_source_read(&src, path, (size_t)64 << 20, d) != 0)
        return -1;
    const pg_source *saved = d->src;
    d->src = &src;
    jcur j = { src.text, src.text + src.len, 1, src.text, d, src.path, 0, 0, p, NULL };
    int seen_layers = 0;
    if (!jeat(&j, '{'))
        jfail(&j, "`{` (a profile is {\"layers\": [...]})");
    if (!j.failed && !jeat(&j, '}'))
        do {
            char *key = jstring(&j);
            if (!key)
                break;
            if (!jeat(&j, ':'))
                jfail(&j, "`:`");
            else if (strcmp(key, "layers") == 0) {
                seen_layers = 1;
                if (!jeat(&j, '['))
                    jfail(&j, "`[` (the list of layers)");
                else if (!jeat(&j, ']')) {
                    do
                        jlayer(&j);
                    while (!j.failed && jeat(&j, ','));
                    if (!j.failed && !jeat(&j, ']'))
                        jfail(&j, "`,` or `]`");
                }
            } else if (strcmp(key, "messages") == 0) {
                jmessages(&j);
            } else if (strcmp(key, "stage_costs") == 0 || strcmp(key, "stage_times") == 0) {
                jstage_list(&j, key[6] == 'c');
            } else {
                jskip(&j, 1);
            }
            free(key);
        } while (!j.failed && jeat(&j, ','));
    if (!j.failed && !jeat(&j, '}'))
        jfail(&j, "`,` or `}`");
    if (!j.failed) {
        jspace(&j);
        if (j.s < j.end)
            jfail(&j, "the end of the file");
    }
    if (!j.failed)
        jrepeats(&j);
    free(j.at);
    if (!j.failed && !seen_layers) {
        pg_loc l = { src.path, 0, 0 };
        pg_error(d, l, "profile: no \"layers\" list");
        j.failed = 1;
    }
    d->src = saved;
    if (!j.failed) {
        p->path = src.path; /* keep the path; the text goes */
        src.path = NULL;
    }
    pg_source_free(&src);
    if (j.failed) {
        pg_profile_free(p);
        return -1;
    }
    return 0;
}

/* codegen/gen/layers/attention.c — attention(heads[, causal]): multi-head self
 * attention over [T, d], qkv W [3d, d] and b [3d], projection W [d, d] and
 * b [d]. The forward saves qkv, the attention weights and the context; the
 * backward-input also leaves dctx and dqkv for the backward-weight
 * (runtime: pg_attention_*, GPT-2's block in one op each).
 *
 * With kv_heads, rope, dropout, bias = false or separate_qkv (dsl/layers_lm.c)
 * the layer is written out as its parts: the projections (pg_linear_*, into
 * one qkv buffer or into q, k and v), the core (pg_attn_*: grouped-query
 * heads, rotary positions, dropout on the probabilities) and the output
 * projection; the same buffers are saved, q, k and v apart when separate. */
#include <inttypes.h>

#include "gen/gen_layer.h"

enum { QKV, ATT, CTX, DCTX, DQKV }; /* its saved frame buffers */

static int64_t seq_len(const em_tensor *in)
{
    return in->shape.rank >= 2 ? in->shape.dim[in->shape.rank - 2] : 1;
}

static void gpt2_saved(const ir_model *m, em_chunk *ch, int i, int64_t R)
{
    const ir_layer *L = &m->layers[i];
    int li = i - ch->first;
    const em_tensor *in = &ch->tens[ch->lin[li]];
    int64_t T = seq_len(in), dd = last_dim(&in->shape);
    static const char *const names[5] = {"qkv", "att", "ctx", "dctx", "dqkv"};
    static const char *const shapes[5] = {"[r, T, 3d]", "[r, h, T, T]", "[r, T, d]", "[r, T, d]", "[r, T, 3d]"};
    int64_t sz[5] = {R * T * 3 * dd, R * L->heads * T * T, R * T * dd, R * T * dd, R * T * 3 * dd};
    em_aux *ax = &ch->aux[li];
    char note[200];
    for (int k = 0; k < 5; k++) {
        sfmt(note, sizeof note, "%s %s", L->name, names[k]);
        ax->off[k] = frame_alloc(ch, sz[k] * 4, note, shapes[k]);
    }
    ax->n = 5;
}

static void gpt2_fwd(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    const int64_t *s = e->ch->aux[a->li].off;
    fprintf(e->o, "    PG_TRY(pg_attention_fwd(c, r, %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %s, %s, %s, %s, %s,\n"
                  "                            %s, %s, %s, %s));\n",
            seq_len(a->in), last_dim(&a->in->shape), L->heads, L->causal, a->x, a->p[0], a->p[1], a->p[2], a->p[3],
            fa(e, s[QKV]), fa(e, s[ATT]), fa(e, s[CTX]), a->y);
}

/* always run: it also leaves dqkv for the weight gradient */
static void gpt2_bwd_b(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    const int64_t *s = e->ch->aux[a->li].off;
    em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_attention_bwd_in(c, r, %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %s, %s,\n"
                  "                               %s, %s, %s, %s,\n"
                  "                               %s, %s, %s)); /* %s */\n",
            seq_len(a->in), last_dim(&a->in->shape), L->heads, L->causal, a->p[0], a->p[2], fa(e, s[QKV]),
            fa(e, s[ATT]), fa(e, s[CTX]), a->dy, fa(e, s[DCTX]), fa(e, s[DQKV]), a->dx, L->name);
}

static void gpt2_bwd_w(em_out *e, em_layer *a)
{
    const int64_t *s = e->ch->aux[a->li].off;
    em_x(e, a);
    fprintf(e->o, "    PG_TRY(pg_attention_bwd_w(c, r, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s,\n"
                  "                              %s, %s, %s, %s)); /* %s */\n",
            seq_len(a->in), last_dim(&a->in->shape), a->x, fa(e, s[CTX]), a->dy, fa(e, s[DQKV]), a->p[0], a->p[1],
            a->p[2], a->p[3], a->L->name);
}

/* ---- the general form: projections, core, output projection ---- */

/* GPT-2's block, which pg_attention_* computes in one op each */
static int is_gpt2(const ir_layer *L)
{
    return L->kv_heads == L->heads && L->rope_theta == 0 && L->p == 0 && L->bias && !L->separate_qkv;
}

enum { GQ, GK, GV, GATT, GCTX, GDCTX, GDQ, GDK, GDV }; /* the general form's frame buffers */

/* head size, key/value columns, and the q | k | v width of one qkv row */
static int64_t head_dim(const ir_layer *L) { return L->dim / L->heads; }
static int64_t kv_dim(const ir_layer *L) { return L->kv_heads * head_dim(L); }

/* the saved buffers: one qkv buffer [r, T, d + 2 kv] (and its gradient) or, with
 * separate_qkv, q [r, T, d], k and v [r, T, kv] apart (GK, GV, GDK, GDV -1 otherwise) */
static void gen_saved(const ir_model *m, em_chunk *ch, int i, int64_t R)
{
    const ir_layer *L = &m->layers[i];
    int li = i - ch->first;
    const em_tensor *in = &ch->tens[ch->lin[li]];
    int64_t T = seq_len(in), d = L->dim, kv = kv_dim(L), n = R * T;
    int sep = L->separate_qkv;
    static const char *const names[9] = {"q", "k", "v", "att", "ctx", "dctx", "dq", "dk", "dv"};
    const char *shapes[9] = {sep ? "[r, T, d]" : "[r, T, d + 2 kv]", "[r, T, kv]", "[r, T, kv]", "[r, h, T, T]",
                             "[r, T, d]", "[r, T, d]", sep ? "[r, T, d]" : "[r, T, d + 2 kv]", "[r, T, kv]", "[r, T, kv]"};
    int64_t sz[9] = {n * (sep ? d : d + 2 * kv), n * kv, n * kv, R * L->heads * T * T, n * d, n * d,
                     n * (sep ? d : d + 2 * kv), n * kv, n * kv};
    em_aux *ax = &ch->aux[li];
    char note[200];
    for (int k = 0; k < 9; k++) {
        ax->off[k] = -1;
        if (!sep && (k == GK || k == GV || k == GDK || k == GDV))
            continue;
        sfmt(note, sizeof note, "%s %s%s", L->name, !sep && (k == GQ || k == GDQ) ? (k == GQ ? "qkv" : "dqkv") : names[k], "");
        ax->off[k] = frame_alloc(ch, sz[k] * 4, note, shapes[k]);
    }
    ax->n = 9;
}

static void saved(const ir_model *m, em_chunk *ch, int i, int64_t R)
{
    if (is_gpt2(&m->layers[i]))
        gpt2_saved(m, ch, i, R);
    else
        gen_saved(m, ch, i, R);
}

/* the parameters' positions: weights of the projections (q, k, v, o; one qkv
 * then o when combined) and their biases, -1 for none */
typedef struct attn_params {
    int w[3], b[3];  /* q, k, v (one qkv: [0] alone) */
    int wo, bo;      /* the output projection */
} attn_params;

static attn_params param_pos(const ir_layer *L)
{
    int b = L->bias, st = b ? 2 : 1, n = L->separate_qkv ? 3 : 1;
    attn_params P = {{-1, -1, -1}, {-1, -1, -1}, n * st, b ? n * st + 1 : -1};
    for (int k = 0; k < n; k++) {
        P.w[k] = k * st;
        P.b[k] = b ? k * st + 1 : -1;
    }
    return P;
}

/* the columns of projection k: q (or the whole q | k | v), k, v */
static int64_t proj_out(const ir_layer *L, int k)
{
    if (!L->separate_qkv)
        return L->dim + 2 * kv_dim(L);
    return k == 0 ? L->dim : kv_dim(L);
}

static const char *pp(const em_layer *a, int k) { return k >= 0 ? a->p[k] : "NULL"; }

/* the q, k, v (or dq, dk, dv) pointers of the core and their row strides */
typedef struct qkv_ptrs {
    char q[96], k[96], v[96];
    int64_t ldq, ldk;
} qkv_ptrs;

static qkv_ptrs qkv_of(em_out *e, const em_layer *a, int grad)
{
    const ir_layer *L = a->L;
    const int64_t *s = e->ch->aux[a->li].off;
    int64_t d = L->dim, kv = kv_dim(L);
    qkv_ptrs r;
    if (L->separate_qkv) {
        sfmt(r.q, sizeof r.q, "%s", fa(e, s[grad ? GDQ : GQ]));
        sfmt(r.k, sizeof r.k, "%s", fa(e, s[grad ? GDK : GK]));
        sfmt(r.v, sizeof r.v, "%s", fa(e, s[grad ? GDV : GV]));
        r.ldq = d;
        r.ldk = kv;
    } else {
        const char *b = fa(e, s[grad ? GDQ : GQ]);
        sfmt(r.q, sizeof r.q, "%s", b);
        sfmt(r.k, sizeof r.k, "%s + %" PRId64, b, d);
        sfmt(r.v, sizeof r.v, "%s + %" PRId64, b, d + kv);
        r.ldq = r.ldk = d + 2 * kv;
    }
    return r;
}

/* `&(const pg_attn_dims){...}` of the layer */
static void dims_text(const em_layer *a, const qkv_ptrs *x, char *buf, size_t n)
{
    const ir_layer *L = a->L;
    sfmt(buf, n, "&(const pg_attn_dims){%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, (float)%.9g, %" PRId64 ", %" PRId64
         ", %" PRId64 "}", seq_len(a->in), L->heads, L->kv_heads, head_dim(L), L->causal, L->rope_theta, x->ldq, x->ldk, x->ldk);
}

/* the dropout arguments: p (none in inference), the layer's mask seed, the first row */
static void drop_text(const em_layer *a, int fwd, char *buf, size_t n)
{
    if (a->L->p == 0)
        sfmt(buf, n, "0.0f, 0, 0");
    else
        sfmt(buf, n, "%s%.9gf, pg_dropout_seed(io->seed, io->step, %d), io->first_row", fwd ? "io->infer ? 0.0f : " : "",
             a->L->p, a->i);
}

static void gen_fwd(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    const int64_t *s = e->ch->aux[a->li].off;
    attn_params P = param_pos(L);
    int64_t d = L->dim;
    qkv_ptrs x = qkv_of(e, a, 0);
    char dims[256], drop[160];
    dims_text(a, &x, dims, sizeof dims);
    drop_text(a, 1, drop, sizeof drop);
    const char *out[3] = {x.q, x.k, x.v}, *note[3] = {L->separate_qkv ? "q" : "q | k | v", "k", "v"};
    for (int k = 0; k < (L->separate_qkv ? 3 : 1); k++)
        fprintf(e->o, "    PG_TRY(pg_linear_fwd(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s)); /* %s */\n", a->n, d,
                proj_out(L, k), a->x, pp(a, P.w[k]), pp(a, P.b[k]), out[k], note[k]);
    fprintf(e->o, "    PG_TRY(pg_attn_fwd(c, r, %s,\n                       %s, %s, %s, %s, %s, %s));\n", dims, drop, x.q, x.k,
            x.v, fa(e, s[GATT]), fa(e, s[GCTX]));
    fprintf(e->o, "    PG_TRY(pg_linear_fwd(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s)); /* output projection */\n", a->n,
            d, d, fa(e, s[GCTX]), pp(a, P.wo), pp(a, P.bo), a->y);
}

/* always run: it also leaves dctx and dq, dk, dv for the weight gradient */
static void gen_bwd_b(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    const int64_t *s = e->ch->aux[a->li].off;
    attn_params P = param_pos(L);
    int64_t d = L->dim;
    qkv_ptrs x = qkv_of(e, a, 0), g = qkv_of(e, a, 1);
    char dims[256], drop[160];
    dims_text(a, &x, dims, sizeof dims);
    drop_text(a, 0, drop, sizeof drop);
    fprintf(e->o, "    PG_TRY(pg_linear_bwd_in(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s)); /* %s: dctx */\n", a->n, d, d, a->dy,
            pp(a, P.wo), fa(e, s[GDCTX]), L->name);
    fprintf(e->o, "    PG_TRY(pg_attn_bwd(c, r, %s,\n                       %s, %s, %s, %s, %s, %s,\n"
                  "                       %s, %s, %s));\n",
            dims, drop, x.q, x.k, x.v, fa(e, s[GATT]), fa(e, s[GDCTX]), g.q, g.k, g.v);
    if (!a->dx_wanted)
        return;
    em_dx(e, a);
    const char *dout[3] = {g.q, g.k, g.v};
    for (int k = 0; k < (L->separate_qkv ? 3 : 1); k++) /* dx = dq Wq (+ dk Wk + dv Wv) */
        fprintf(e->o, "    PG_TRY(pg_linear_bwd_in%s(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s));\n", k ? "_add" : "", a->n, d,
                proj_out(L, k), dout[k], pp(a, P.w[k]), a->dx);
}

static void gen_bwd_w(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    const int64_t *s = e->ch->aux[a->li].off;
    attn_params P = param_pos(L);
    int64_t d = L->dim;
    qkv_ptrs g = qkv_of(e, a, 1);
    em_x(e, a);
    fprintf(e->o, "    PG_TRY(pg_linear_bwd_w(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s)); /* %s: output projection */\n",
            a->n, d, d, fa(e, s[GCTX]), a->dy, pp(a, P.wo), pp(a, P.bo), L->name);
    const char *dout[3] = {g.q, g.k, g.v};
    for (int k = 0; k < (L->separate_qkv ? 3 : 1); k++)
        fprintf(e->o, "    PG_TRY(pg_linear_bwd_w(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s));\n", a->n, d, proj_out(L, k),
                a->x, dout[k], pp(a, P.w[k]), pp(a, P.b[k]));
}

/* ---- generation with the KV cache: the projections of the new positions, the
 * core over each sequence's cache (pg_attn_decode), the output projection; the
 * same arithmetic for GPT-2's block, whose qkv is the combined form ---- */

enum { DQ, DK, DV, DC, DKC, DVC }; /* a decode call's buffers; the caches live through the whole generation */

static void dec_saved(const pg_gen *g, em_chunk *ch, int i, int64_t R)
{
    const ir_layer *L = &g->m->layers[i];
    int li = i - ch->first, sep = L->separate_qkv;
    int64_t d = L->dim, kv = kv_dim(L);
    em_aux *ax = &ch->aux[li];
    char note[200], sh[96];
    static const char *const names[6] = {"q", "k", "v", "ctx", "kcache", "vcache"};
    const char *shapes[4] = {sep ? "[r, d]" : "[r, d + 2 kv]", "[r, kv]", "[r, kv]", "[r, d]"};
    int64_t sz[4] = {R * (sep ? d : d + 2 * kv), R * kv, R * kv, R * d};
    for (int k = 0; k < 6; k++) {
        ax->off[k] = -1;
        if (!sep && (k == DK || k == DV))
            continue;
        sfmt(note, sizeof note, "%s %s", L->name, !sep && k == DQ ? "qkv" : names[k]);
        if (k < 4) {
            ax->off[k] = frame_alloc(ch, sz[k] * 4, note, shapes[k]);
            continue;
        }
        sfmt(sh, sizeof sh, "[%" PRId64 " sequences, %" PRId64 " positions, %" PRId64 "]", g->dec_batch, g->dec_len, kv);
        ax->off[k] = frame_alloc(ch, g->dec_batch * g->dec_len * kv * 4, note, sh);
        if (ax->off[k] >= 0)
            ch->fb[ax->off[k]].whole = 1;
    }
    ax->n = 6;
}

static void dec(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    const int64_t *s = e->ch->aux[a->li].off;
    attn_params P = param_pos(L);
    int64_t d = L->dim, kv = kv_dim(L);
    char q[96], k[96], v[96];
    int64_t ld;
    if (L->separate_qkv) {
        sfmt(q, sizeof q, "%s", fa(e, s[DQ]));
        sfmt(k, sizeof k, "%s", fa(e, s[DK]));
        sfmt(v, sizeof v, "%s", fa(e, s[DV]));
        ld = 0;
    } else {
        const char *b = fa(e, s[DQ]);
        sfmt(q, sizeof q, "%s", b);
        sfmt(k, sizeof k, "%s + %" PRId64, b, d);
        sfmt(v, sizeof v, "%s + %" PRId64, b, d + kv);
        ld = d + 2 * kv;
    }
    const char *out[3] = {q, k, v}, *note[3] = {L->separate_qkv ? "q" : "q | k | v", "k", "v"};
    for (int j = 0; j < (L->separate_qkv ? 3 : 1); j++)
        fprintf(e->o, "    PG_TRY(pg_linear_fwd(c, r, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s)); /* %s */\n", d,
                proj_out(L, j), a->x, pp(a, P.w[j]), pp(a, P.b[j]), out[j], note[j]);
    fprintf(e->o, "    PG_TRY(pg_attn_decode(c, io->seqs, io->t, %" PRId64 ", &(const pg_attn_dims){%" PRId64 ", %" PRId64
                  ", %" PRId64 ", %" PRId64 ", 1, (float)%.9g, %" PRId64 ", %" PRId64 ", %" PRId64 "},\n"
                  "                          DEC_ROWS, %s, %s, %s, %s, %s, %s));\n",
            e->g->dec_batch, e->g->dec_len, L->heads, L->kv_heads, head_dim(L), L->rope_theta, ld ? ld : d, ld ? ld : kv, ld ? ld : kv, q,
            k, v, fa(e, s[DKC]), fa(e, s[DVC]), fa(e, s[DC]));
    fprintf(e->o, "    PG_TRY(pg_linear_fwd(c, r, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s)); /* output projection */\n", d, d,
            fa(e, s[DC]), pp(a, P.wo), pp(a, P.bo), a->y);
}

/* a cache holds what came before: only a causal layer's positions ignore what follows them */
static const char *dec_check(const ir_layer *L)
{
    return L->causal ? NULL : "its attention is not causal (each position sees the later ones, which a new token "
                              "changes)";
}

static void fwd(em_out *e, em_layer *a) { (is_gpt2(a->L) ? gpt2_fwd : gen_fwd)(e, a); }
static void bwd_b(em_out *e, em_layer *a) { (is_gpt2(a->L) ? gpt2_bwd_b : gen_bwd_b)(e, a); }
static void bwd_w(em_out *e, em_layer *a) { (is_gpt2(a->L) ? gpt2_bwd_w : gen_bwd_w)(e, a); }

static unsigned gemm_weights_of(const ir_layer *L)
{
    attn_params P = param_pos(L);
    unsigned m = 1u << P.wo;
    for (int k = 0; k < 3; k++)
        if (P.w[k] >= 0)
            m |= 1u << P.w[k];
    return m;
}

/* GPT-2's attributes alone for its block (the plan, and so the hash, as before) */
static void json_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    fprintf(o, "\"heads\": %" PRId64 ", \"causal\": %s", L->heads, L->causal ? "true" : "false");
    if (is_gpt2(L))
        return;
    fprintf(o, ", \"kv_heads\": %" PRId64 ", \"rope\": ", L->kv_heads);
    json_num(o, L->rope_theta);
    fprintf(o, ", \"bias\": %s, \"separate_qkv\": %s, \"dropout\": ", L->bias ? "true" : "false",
            L->separate_qkv ? "true" : "false");
    json_num(o, L->p);
}

/* The projections' products, and the cores' per-head products of one sample:
 * GPT-2's block takes the fused kernels instead where the head dimension is
 * at most 64 (flash_attn.cu's pg_flash_hdp, always on with precision = bf16
 * unless PIPE_CUDA_KERNELS turns them off); the parts' core has none. */
static int64_t bf16_ws(const ir_layer *L, int64_t R)
{
    int64_t n = gen_gemm_rows(L, R), d = L->dim, T = L->in.rank >= 2 ? L->in.dim[L->in.rank - 2] : 1, ws = 0, w;
    if (is_gpt2(L)) {
        ws = pg_bf16ws_linear(n, d, 3 * d);
        if (head_dim(L) > 64 && (w = pg_bf16ws_heads(T, 3 * d, L->heads)) > ws)
            ws = w;
    } else {
        for (int k = 0; k < (L->separate_qkv ? 3 : 1); k++)
            if ((w = pg_bf16ws_linear(n, d, proj_out(L, k))) > ws)
                ws = w;
        if ((w = pg_bf16ws_heads(T, L->separate_qkv ? d : d + 2 * kv_dim(L), L->heads)) > ws)
            ws = w;
    }
    w = pg_bf16ws_linear(n, d, d); /* the output projection */
    return w > ws ? w : ws;
}

const gen_layer_kind gen_attention = {
    .gemm_weights_of = gemm_weights_of, /* the projections' weights */
    .bf16_ws = bf16_ws,
    .saved = saved, .fwd = fwd, .bwd_b = bwd_b, .bwd_w = bwd_w, .json_attrs = json_attrs,
    .dec = dec, .dec_saved = dec_saved, .dec_check = dec_check,
};

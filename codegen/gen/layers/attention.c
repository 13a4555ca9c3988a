/* codegen/gen/layers/attention.c — attention(heads[, causal]): multi-head self
 * attention over [T, d], qkv W [3d, d] and b [3d], projection W [d, d] and
 * b [d]. The forward saves qkv, the attention weights and the context; the
 * backward-input also leaves dctx and dqkv for the backward-weight
 * (runtime: pg_attention_*). */
#include <inttypes.h>

#include "gen/gen_layer.h"

enum { QKV, ATT, CTX, DCTX, DQKV }; /* its saved frame buffers */

static int64_t seq_len(const em_tensor *in)
{
    return in->shape.rank >= 2 ? in->shape.dim[in->shape.rank - 2] : 1;
}

static void saved(const ir_model *m, em_chunk *ch, int i, int64_t R)
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

static void fwd(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    const int64_t *s = e->ch->aux[a->li].off;
    fprintf(e->o, "    PG_TRY(pg_attention_fwd(c, r, %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %s, %s, %s, %s, %s,\n"
                  "                            %s, %s, %s, %s));\n",
            seq_len(a->in), last_dim(&a->in->shape), L->heads, L->causal, a->x, a->p[0], a->p[1], a->p[2], a->p[3],
            fa(e, s[QKV]), fa(e, s[ATT]), fa(e, s[CTX]), a->y);
}

/* always run: it also leaves dqkv for the weight gradient */
static void bwd_b(em_out *e, em_layer *a)
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

static void bwd_w(em_out *e, em_layer *a)
{
    const int64_t *s = e->ch->aux[a->li].off;
    em_x(e, a);
    fprintf(e->o, "    PG_TRY(pg_attention_bwd_w(c, r, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s,\n"
                  "                              %s, %s, %s, %s)); /* %s */\n",
            seq_len(a->in), last_dim(&a->in->shape), a->x, fa(e, s[CTX]), a->dy, fa(e, s[DQKV]), a->p[0], a->p[1],
            a->p[2], a->p[3], a->L->name);
}

static void json_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    fprintf(o, "\"heads\": %" PRId64 ", \"causal\": %s", L->heads, L->causal ? "true" : "false");
}

const gen_layer_kind gen_attention = {
    .gemm_weights = 1u << 0 | 1u << 2, /* the qkv and projection weights */
    .saved = saved, .fwd = fwd, .bwd_b = bwd_b, .bwd_w = bwd_w, .json_attrs = json_attrs,
};

/* codegen/gen/layers/conv.c — the convolutions: conv2d, conv1d (conv2d of one
 * row: h = kh = 1) and conv_transpose2d, weights [out, in / groups, kh, kw]
 * (transposed [in, out / groups, kh, kw]) and bias [out] (runtime:
 * pg_conv2d_*, pg_conv_transpose2d_*). The generated call passes the window
 * as a pg_conv constant (runtime/core/pg_conv.h). Each pass has its own
 * workspace frame buffer (pg_conv_ws_floats: one sample's column matrix),
 * used within that one call, so the memory plan keeps it alive for one layer
 * step and shares its bytes with everything else. */
#include <inttypes.h>
#include <stdlib.h>

#include "gen/gen_layer.h"

enum { WS_F, WS_B, WS_W }; /* the workspace of each pass: frame buffers in aux */

pg_conv gen_conv_geom(const ir_layer *L)
{
    pg_conv g = {0};
    int one_d = L->in.rank == 2, pool = L->kind == LK_MAXPOOL2D || L->kind == LK_AVGPOOL2D;
    g.in = pool ? L->in.dim[0] : L->in_features;
    g.out = pool ? L->in.dim[0] : L->out_features;
    g.h = one_d ? 1 : L->in.dim[1];
    g.w = L->in.dim[one_d ? 1 : 2];
    g.oh = one_d ? 1 : L->out.dim[1];
    g.ow = L->out.dim[one_d ? 1 : 2];
    g.kh = L->kernel[0], g.kw = L->kernel[1];
    g.sh = L->stride[0], g.sw = L->stride[1];
    g.ph = L->padding[0], g.pw = L->padding[1];
    g.dh = L->dilation[0], g.dw = L->dilation[1];
    g.groups = pool ? 1 : L->groups;
    g.transposed = L->kind == LK_CONV_T2D;
    return g;
}

void gen_conv_init(const pg_conv *g, char *buf, size_t n)
{
    sfmt(buf, n,
         "{.in = %" PRId64 ", .out = %" PRId64 ", .h = %" PRId64 ", .w = %" PRId64 ", .oh = %" PRId64
         ", .ow = %" PRId64 ", .kh = %" PRId64 ", .kw = %" PRId64 ", .sh = %" PRId64 ", .sw = %" PRId64
         ", .ph = %" PRId64 ", .pw = %" PRId64 ", .dh = %" PRId64 ", .dw = %" PRId64 ", .groups = %" PRId64 "%s}",
         g->in, g->out, g->h, g->w, g->oh, g->ow, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw, g->groups,
         g->transposed ? ", .transposed = 1" : "");
}

void gen_conv_text(const pg_conv *g, char *buf, size_t n)
{
    char init[512];
    gen_conv_init(g, init, sizeof init);
    sfmt(buf, n, "&(const pg_conv)%s", init);
}

int gen_stage_convs(const ir_model *m, const em_stage *S, pg_conv **out)
{
    int n = 0, cap = 0;
    pg_conv *a = NULL;
    for (int i = 0; i < S->nchunks; i++)
        for (int l = S->ch[i].first; l <= S->ch[i].last; l++) {
            ir_layer_kind k = m->layers[l].kind;
            if (k != LK_CONV2D && k != LK_CONV1D && k != LK_CONV_T2D)
                continue;
            pg_conv g = gen_conv_geom(&m->layers[l]);
            int seen = 0;
            for (int j = 0; j < n && !seen; j++)
                seen = pg_conv_same(&a[j], &g);
            if (seen)
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 8;
                pg_conv *b = realloc(a, (size_t)cap * sizeof *a);
                if (!b) {
                    free(a);
                    return -1;
                }
                a = b;
            }
            a[n++] = g;
        }
    if (out)
        *out = a;
    else
        free(a);
    return n;
}

static void saved(const ir_model *m, em_chunk *ch, int i, int64_t R)
{
    const ir_layer *L = &m->layers[i];
    pg_conv g = gen_conv_geom(L);
    int64_t ws = pg_conv_ws_floats(&g);
    em_aux *ax = &ch->aux[i - ch->first];
    static const char *const pass[3] = {"forward", "input gradient", "weight gradient"};
    char note[200], shape[64];
    (void)R; /* one sample at a time, whatever the rows */
    ax->n = 3;
    sfmt(shape, sizeof shape, "[%" PRId64 ", %" PRId64 "]", ws / pg_conv_pos(&g), pg_conv_pos(&g));
    for (int k = 0; k < 3; k++) {
        ax->off[k] = -1;
        if (ws == 0)
            continue;
        sfmt(note, sizeof note, "%s workspace of the %s", L->name, pass[k]);
        ax->off[k] = frame_alloc(ch, ws * 4, note, shape);
    }
}

/* the pass's workspace, or NULL */
static const char *ws(em_out *e, em_layer *a, int k)
{
    int64_t id = e->ch->aux[a->li].off[k];
    return id < 0 ? "NULL" : fa(e, id);
}

static const char *op_of(const ir_layer *L) { return L->kind == LK_CONV_T2D ? "conv_transpose2d" : "conv2d"; }

static void fwd(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    pg_conv g = gen_conv_geom(L);
    char gt[512];
    gen_conv_text(&g, gt, sizeof gt);
    fprintf(e->o, "    PG_TRY(pg_%s_fwd(c, r,\n        %s,\n        %s, %s, %s, %s, %s));\n", op_of(L), gt, a->x,
            a->p[0], L->bias ? a->p[1] : "NULL", a->y, ws(e, a, WS_F));
}

static void bwd_b(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    if (!a->dx_wanted)
        return;
    pg_conv g = gen_conv_geom(L);
    char gt[512];
    gen_conv_text(&g, gt, sizeof gt);
    em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_%s_bwd_in(c, r,\n        %s,\n        %s, %s, %s, %s)); /* %s */\n", op_of(L), gt,
            a->dy, a->p[0], a->dx, ws(e, a, WS_B), L->name);
}

static void bwd_w(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    pg_conv g = gen_conv_geom(L);
    char gt[512];
    gen_conv_text(&g, gt, sizeof gt);
    em_x(e, a);
    fprintf(e->o, "    PG_TRY(pg_%s_bwd_w(c, r,\n        %s,\n        %s, %s, %s, %s, %s)); /* %s */\n", op_of(L), gt,
            a->x, a->dy, a->p[0], L->bias ? a->p[1] : "NULL", ws(e, a, WS_W), L->name);
}

/* [h, w] of a 2-D layer, a number for conv1d */
static void pair(FILE *o, const char *key, const int64_t v[2], int one_d)
{
    if (one_d)
        fprintf(o, ", \"%s\": %" PRId64, key, v[1]);
    else
        fprintf(o, ", \"%s\": [%" PRId64 ", %" PRId64 "]", key, v[0], v[1]);
}

static void json_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    int one_d = L->kind == LK_CONV1D;
    (void)m;
    fprintf(o, "\"in_channels\": %" PRId64 ", \"out_channels\": %" PRId64, L->in_features, L->out_features);
    pair(o, "kernel", L->kernel, one_d);
    pair(o, "stride", L->stride, one_d);
    pair(o, "padding", L->padding, one_d);
    if (L->kind == LK_CONV_T2D)
        pair(o, "output_padding", L->output_padding, 0);
    else
        pair(o, "dilation", L->dilation, one_d);
    fprintf(o, ", \"groups\": %" PRId64 ", \"bias\": %s", L->groups, L->bias ? "true" : "false");
}

/* conv2d, conv1d and conv_transpose2d alike: the geometry tells them apart */
const gen_layer_kind gen_conv = {
    .saved = saved, .fwd = fwd, .bwd_b = bwd_b, .bwd_w = bwd_w, .json_attrs = json_attrs,
};

/* codegen/gen/layers/norm.c — the normalisations, weight and bias [C]; the
 * forward saves a mean and 1/std, which both backward passes read, and they
 * share their backward ops' signatures but for the sizes (runtime:
 * pg_layernorm_*, pg_batchnorm_*, pg_batchnorm2d_*):
 *  - layernorm([eps][, bias = false]): over the last dim, per row;
 *  - rmsnorm([eps]): per row, x / rms(x) * weight, saving 1/rms alone;
 *  - batchnorm([deferred][, eps, momentum]): per feature (the last dim) over
 *    the micro-batch's rows, with running mean and variance as buffers,
 *    updated in the step's forward (not when recomputing) from this
 *    micro-batch or, deferred, from sums over the step's micro-batches in a
 *    whole-step buffer;
 *  - batchnorm2d(...): the same per channel (dim 0 of [C, H, W]) over the
 *    micro-batch's samples and positions. */
#include <inttypes.h>

#include "gen/gen_layer.h"

/* ---- shared ---- */

/* "<layer> mean<of>" and "<layer> rstd<of>", n floats each */
static void save_mean_rstd(em_chunk *ch, int li, const char *layer, const char *of, int64_t n, const char *shape)
{
    em_aux *ax = &ch->aux[li];
    char note[200];
    sfmt(note, sizeof note, "%s mean%s", layer, of);
    ax->off[0] = frame_alloc(ch, n * 4, note, shape);
    sfmt(note, sizeof note, "%s rstd%s", layer, of);
    ax->off[1] = frame_alloc(ch, n * 4, note, shape);
    ax->n = 2;
}

/* The ops' size arguments: "n, C" (over the last dim) or, for batchnorm2d,
 * "r, C, hw"; and the ops' name: batchnorm or batchnorm2d. */
static int is_2d(const ir_layer *L) { return L->kind == LK_BATCHNORM2D; }

static void norm_sizes(const em_layer *a, char *buf, size_t n)
{
    const pg_shape *s = &a->in->shape;
    if (is_2d(a->L))
        sfmt(buf, n, "r, %" PRId64 ", %" PRId64, s->dim[0], a->in->numel / s->dim[0]);
    else
        sfmt(buf, n, "%s, %" PRId64, a->n, last_dim(s));
}

static const char *bn_op(const ir_layer *L) { return is_2d(L) ? "batchnorm2d" : "batchnorm"; }

/* pg_<op><suffix>(c, sizes, x, w, mean, rstd, dy, dx) */
static void norm_bwd_in(em_out *e, em_layer *a, const char *op, const char *suffix, const char *w)
{
    const int64_t *s = e->ch->aux[a->li].off;
    char sz[96];
    em_x(e, a);
    if (!a->dx_wanted)
        return;
    em_dx(e, a);
    norm_sizes(a, sz, sizeof sz);
    fprintf(e->o, "    PG_TRY(pg_%s%s(c, %s, %s, %s, %s, %s, %s, %s)); /* %s */\n", op, suffix, sz, a->x, w,
            fa(e, s[0]), fa(e, s[1]), a->dy, a->dx, a->L->name);
}

/* pg_<op><suffix>(c, sizes, x, mean, rstd, dy, dweight, dbias) */
static void norm_bwd_w(em_out *e, em_layer *a, const char *op, const char *suffix, const char *gw, const char *gb)
{
    const int64_t *s = e->ch->aux[a->li].off;
    char sz[96];
    em_x(e, a);
    norm_sizes(a, sz, sizeof sz);
    fprintf(e->o, "    PG_TRY(pg_%s%s(c, %s, %s, %s, %s, %s, %s, %s)); /* %s */\n", op, suffix, sz, a->x, fa(e, s[0]),
            fa(e, s[1]), a->dy, gw, gb, a->L->name);
}

static void eps_attr(FILE *o, const ir_layer *L)
{
    fprintf(o, "\"eps\": ");
    json_num(o, L->eps);
}

/* ---- layernorm ---- */

static void ln_saved(const ir_model *m, em_chunk *ch, int i, int64_t R)
{
    int li = i - ch->first;
    const em_tensor *in = &ch->tens[ch->lin[li]];
    save_mean_rstd(ch, li, m->layers[i].name, "", R * (in->numel / last_dim(&in->shape)), "[n]"); /* per row */
}

static void ln_fwd(em_out *e, em_layer *a)
{
    const int64_t *s = e->ch->aux[a->li].off;
    fprintf(e->o, "    PG_TRY(pg_layernorm_fwd(c, %s, %" PRId64 ", %.9gf, %s, %s, %s, %s, %s, %s));\n", a->n,
            last_dim(&a->in->shape), a->L->eps, a->x, a->p[0], a->L->nparam > 1 ? a->p[1] : "NULL", a->y, fa(e, s[0]),
            fa(e, s[1]));
}

static void ln_bwd_b(em_out *e, em_layer *a) { norm_bwd_in(e, a, "layernorm", "_bwd_in", a->p[0]); }

/* z = x + s (z: the norm's input a->x) and the norm of z in one call */
static void ln_fwd_add(em_out *e, em_layer *a, const char *x, const char *s)
{
    const int64_t *o = e->ch->aux[a->li].off;
    fprintf(e->o, "    PG_TRY(pg_add_layernorm_fwd(c, %s, %" PRId64 ", %.9gf, %s, %s, %s, %s, %s, %s, %s, %s));\n", a->n,
            last_dim(&a->in->shape), a->L->eps, x, s, a->x, a->p[0], a->L->nparam > 1 ? a->p[1] : "NULL", a->y,
            fa(e, o[0]), fa(e, o[1]));
}

/* dx, plus the skip's gradient ds, in one call */
static void ln_bwd_add(em_out *e, em_layer *a, const char *ds)
{
    const int64_t *o = e->ch->aux[a->li].off;
    em_x(e, a);
    em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_layernorm_bwd_in_add(c, %s, %" PRId64 ", %s, %s, %s, %s, %s, %s, %s)); /* %s */\n", a->n,
            last_dim(&a->in->shape), a->x, a->p[0], fa(e, o[0]), fa(e, o[1]), a->dy, ds, a->dx, a->L->name);
}
static void ln_bwd_w(em_out *e, em_layer *a) { norm_bwd_w(e, a, "layernorm", "_bwd_w", a->p[0], a->p[1]); } /* "NULL": no bias */

static void ln_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    eps_attr(o, L);
    if (!L->bias)
        fprintf(o, ", \"bias\": false");
}

const gen_layer_kind gen_layernorm = {
    .per_token = 1,
    .saved = ln_saved, .fwd = ln_fwd, .bwd_b = ln_bwd_b, .bwd_w = ln_bwd_w, .json_attrs = ln_attrs,
    .fwd_add = ln_fwd_add, .bwd_add = ln_bwd_add,
};

/* ---- rmsnorm: weight only, 1/rms per row saved ---- */

static void rms_saved(const ir_model *m, em_chunk *ch, int i, int64_t R)
{
    int li = i - ch->first;
    const em_tensor *in = &ch->tens[ch->lin[li]];
    char note[200];
    sfmt(note, sizeof note, "%s rstd", m->layers[i].name);
    ch->aux[li].off[0] = frame_alloc(ch, R * (in->numel / last_dim(&in->shape)) * 4, note, "[n]");
    ch->aux[li].n = 1;
}

static void rms_fwd(em_out *e, em_layer *a)
{
    const int64_t *s = e->ch->aux[a->li].off;
    fprintf(e->o, "    PG_TRY(pg_rmsnorm_fwd(c, %s, %" PRId64 ", %.9gf, %s, %s, %s, %s));\n", a->n, last_dim(&a->in->shape),
            a->L->eps, a->x, a->p[0], a->y, fa(e, s[0]));
}

static void rms_bwd_b(em_out *e, em_layer *a)
{
    const int64_t *s = e->ch->aux[a->li].off;
    if (!a->dx_wanted)
        return;
    em_x(e, a);
    em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_rmsnorm_bwd_in(c, %s, %" PRId64 ", %s, %s, %s, %s, %s)); /* %s */\n", a->n,
            last_dim(&a->in->shape), a->x, a->p[0], fa(e, s[0]), a->dy, a->dx, a->L->name);
}

static void rms_fwd_add(em_out *e, em_layer *a, const char *x, const char *s)
{
    const int64_t *o = e->ch->aux[a->li].off;
    fprintf(e->o, "    PG_TRY(pg_add_rmsnorm_fwd(c, %s, %" PRId64 ", %.9gf, %s, %s, %s, %s, %s, %s));\n", a->n,
            last_dim(&a->in->shape), a->L->eps, x, s, a->x, a->p[0], a->y, fa(e, o[0]));
}

static void rms_bwd_add(em_out *e, em_layer *a, const char *ds)
{
    const int64_t *o = e->ch->aux[a->li].off;
    em_x(e, a);
    em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_rmsnorm_bwd_in_add(c, %s, %" PRId64 ", %s, %s, %s, %s, %s, %s)); /* %s */\n", a->n,
            last_dim(&a->in->shape), a->x, a->p[0], fa(e, o[0]), a->dy, ds, a->dx, a->L->name);
}

static void rms_bwd_w(em_out *e, em_layer *a)
{
    const int64_t *s = e->ch->aux[a->li].off;
    em_x(e, a);
    fprintf(e->o, "    PG_TRY(pg_rmsnorm_bwd_w(c, %s, %" PRId64 ", %s, %s, %s, %s)); /* %s */\n", a->n,
            last_dim(&a->in->shape), a->x, fa(e, s[0]), a->dy, a->p[0], a->L->name);
}

static void rms_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    eps_attr(o, L);
}

const gen_layer_kind gen_rmsnorm = {
    .per_token = 1,
    .saved = rms_saved, .fwd = rms_fwd, .bwd_b = rms_bwd_b, .bwd_w = rms_bwd_w, .json_attrs = rms_attrs,
    .fwd_add = rms_fwd_add, .bwd_add = rms_bwd_add,
};

/* ---- batchnorm, batchnorm2d ---- */

/* the features (channels) normalised apart: the last dim, or dim 0 of an image */
static int64_t bn_channels(const pg_shape *in, const ir_layer *L)
{
    return is_2d(L) ? in->dim[0] : last_dim(in);
}

/* The running variance is unbiased (n - 1 in the denominator): a
 * per-micro-batch update needs at least 2 values per feature in the smallest
 * micro-batch, a deferred one in the whole batch. */
static int bn_check(const ir_model *m, const ir_layer *L, pg_diag *d)
{
    int64_t B = m->train.batch, M = m->train.microbatches;
    if (L->in.rank < 1)
        return 0;
    int64_t per = pg_shape_numel(&L->in) / bn_channels(&L->in, L);
    int64_t rows = L->deferred ? B : B / M;
    if (rows * per >= 2)
        return 0;
    pg_error(d, L->loc,
             "%s needs at least 2 values per %s %s, but %s has %" PRId64
             " (batch %" PRId64 " in %" PRId64 " micro-batch%s)%s", bn_op(L), is_2d(L) ? "channel" : "feature",
             L->deferred ? "in the batch" : "in every micro-batch",
             L->deferred ? "the batch" : "the smallest micro-batch", rows * per, B, M, M == 1 ? "" : "es",
             L->deferred ? "" : is_2d(L) ? "; use fewer micro-batches or batchnorm2d(deferred)"
                                         : "; use fewer micro-batches or batchnorm(deferred)");
    return -1;
}

/* sums and sums of squares over the step's micro-batches, for the running statistics */
static int bn_stage_buffer(em_stage *S, const ir_layer *L)
{
    char name[128];
    int64_t C = bn_channels(&L->in, L);
    sfmt(name, sizeof name, "bn sums %s", L->name);
    int b = pg_mp_add(&S->mp, name, MP_GRADS, 2 * C * 8, PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
    sfmt(S->mp.buf[b].note, sizeof S->mp.buf[0].note,
         "double sum[%" PRId64 "], sumsq[%" PRId64 "] of the input over the step's micro-batches", C, C);
    return b;
}

static void bn_saved(const ir_model *m, em_chunk *ch, int i, int64_t R)
{
    const ir_layer *L = &m->layers[i];
    int li = i - ch->first;
    (void)R; /* per feature, whatever the rows */
    save_mean_rstd(ch, li, L->name, " of this micro-batch", bn_channels(&ch->tens[ch->lin[li]].shape, L), "[C]");
}

static void bn_fwd(em_out *e, em_layer *a)
{
    FILE *o = e->o;
    const ir_model *m = e->g->m;
    const ir_layer *L = a->L;
    const int64_t *s = e->ch->aux[a->li].off;
    int64_t C = bn_channels(&a->in->shape, L), per = a->in->numel / C;
    int64_t so = e->S->mp.buf[e->S->layer_mp[a->i]].offset;
    const char *w = L->nparam > 0 ? a->p[0] : "NULL", *b = L->nparam > 1 ? a->p[1] : "NULL", *op = bn_op(L);
    const char *rm = plocal(e->ch, L->buffer[0], 0), *rv = plocal(e->ch, L->buffer[1], 0);
    char sz[96], cnt[64]; /* the sizes, and the values per feature in this micro-batch */
    norm_sizes(a, sz, sizeof sz);
    if (is_2d(L))
        sfmt(cnt, sizeof cnt, "r * %" PRId64, per);
    else
        sfmt(cnt, sizeof cnt, "%s", a->n);
    fprintf(o, "    if (io->infer) /* inference: the running statistics, nothing updated */\n"
               "        PG_TRY(pg_%s_eval_fwd(c, %s, %.9gf, %s, %s, %s, %s, %s, %s));\n"
               "    else\n",
            op, sz, L->eps, a->x, w, b, rm, rv, a->y);
    fprintf(o, "        PG_TRY(pg_%s_fwd(c, %s, %.9gf, %s, %s, %s, %s, %s, %s));\n", op, sz, L->eps, a->x, w, b, a->y,
            fa(e, s[0]), fa(e, s[1]));
    if (L->deferred) {
        fprintf(o, "    if (first && !io->infer) { /* deferred: running statistics from the whole mini-batch, once per step;\n"
                   "                  sums over the micro-batches in index order (not again when recomputing) */\n");
        fprintf(o, "        if (io->mb == 0)\n            PG_TRY(pg_zero(c, (float *)(A + %" PRId64 "), %" PRId64
                   ")); /* 2 x %" PRId64 " doubles */\n",
                so, 4 * C, C);
        fprintf(o, "        PG_TRY(pg_%s_stats_acc(c, %s, %s, (double *)(A + %" PRId64 "), (double *)(A + %" PRId64
                   ")));\n",
                op, sz, a->x, so, so + 8 * C);
        fprintf(o, "        if (io->mb == %d) { /* the sums over every replica's rows, then the update */\n"
                   "            PG_TRY(pg_batchnorm_stats_reduce(c, %" PRId64 ", (double *)(A + %" PRId64 "), (double *)(A + %" PRId64
                   ")));\n",
                e->g->s->nmb - 1, C, so, so + 8 * C);
        fprintf(o, "            PG_TRY(pg_batchnorm_running_update(c, %" PRId64 ", %" PRId64
                   ", %.9gf, (const double *)(A + %" PRId64 "), (const double *)(A + %" PRId64 "), %s, %s));\n        }\n    }\n",
                m->train.batch * per, C, L->momentum, so, so + 8 * C, rm, rv);
    } else {
        fprintf(o, "    if (first && !io->infer) { /* running statistics from this micro-batch alone, in index order */\n");
        fprintf(o, "        PG_TRY(pg_zero(c, (float *)(A + %" PRId64 "), %" PRId64 "));\n", so, 4 * C);
        fprintf(o, "        PG_TRY(pg_%s_stats_acc(c, %s, %s, (double *)(A + %" PRId64 "), (double *)(A + %" PRId64
                   ")));\n",
                op, sz, a->x, so, so + 8 * C);
        fprintf(o, "        PG_TRY(pg_batchnorm_running_update(c, %s, %" PRId64 ", %.9gf, (const double *)(A + %" PRId64
                   "), (const double *)(A + %" PRId64 "), %s, %s));\n    }\n",
                cnt, C, L->momentum, so, so + 8 * C, rm, rv);
    }
}

/* generation: inference alone, each position by the running statistics */
static void bn_dec(em_out *e, em_layer *a)
{
    const ir_layer *L = a->L;
    fprintf(e->o, "    PG_TRY(pg_batchnorm_eval_fwd(c, %s, %" PRId64 ", %.9gf, %s, %s, %s, %s, %s, %s));\n", a->n,
            last_dim(&a->in->shape), L->eps, a->x, L->nparam > 0 ? a->p[0] : "NULL", L->nparam > 1 ? a->p[1] : "NULL",
            plocal(e->ch, L->buffer[0], 0), plocal(e->ch, L->buffer[1], 0), a->y);
}

static void bn_bwd_b(em_out *e, em_layer *a)
{
    norm_bwd_in(e, a, bn_op(a->L), "_bwd_in", a->L->nparam > 0 ? a->p[0] : "NULL");
}

static void bn_bwd_w(em_out *e, em_layer *a)
{
    norm_bwd_w(e, a, bn_op(a->L), "_bwd_w", a->L->nparam > 0 ? a->p[0] : "NULL", a->L->nparam > 1 ? a->p[1] : "NULL");
}

static void bn_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    eps_attr(o, L);
    fprintf(o, ", \"momentum\": ");
    json_num(o, L->momentum);
    fprintf(o, ", \"deferred\": %s", L->deferred ? "true" : "false");
}

/* batchnorm and batchnorm2d (is_2d picks the sizes and the ops) */
const gen_layer_kind gen_batchnorm = {
    .fwd_uses_first = 1, /* the running statistics move in the step's forward only */
    .check = bn_check, .stage_buffer = bn_stage_buffer, .saved = bn_saved,
    .fwd = bn_fwd, .bwd_b = bn_bwd_b, .bwd_w = bn_bwd_w, .json_attrs = bn_attrs,
    .dec = bn_dec,
};

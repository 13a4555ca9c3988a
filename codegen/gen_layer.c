/* codegen/gen_layer.c — one layer's statements in each pass (forward,
 * backward-input, backward-weight) and the C text of its operands: a
 * tensor's value or gradient, a frame buffer, a parameter. Reading an
 * operand notes the frame buffer's use (plan_frames in gen_layout.c). */
#include <inttypes.h>
#include <string.h>

#include "gen_internal.h"


/* Note a use of frame buffer id in the current pass and layer step. */
void frame_use(em_out *e, int64_t id)
{
    if (!e->rec || id < 0)
        return;
    em_fbuf *f = &e->rec[id];
    int k = e->pass;
    if (f->lo[k] < 0 || e->step < f->lo[k])
        f->lo[k] = e->step;
    if (e->step > f->hi[k])
        f->hi[k] = e->step;
}

/* Frame buffer id's local (a float pointer at its offset in this
 * micro-batch's row of frame_c<k>, declared where it is used). */
const char *fa(em_out *e, int64_t id)
{
    char *b = e->fx[e->nfx++ % 8];
    frame_use(e, id);
    sfmt(b, sizeof e->fx[0], "%s", e->ch->fb[id].name);
    return b;
}

void tval(em_out *e, int t, char *buf, size_t n)
{
    const em_chunk *ch = e->ch;
    const em_tensor *T = &ch->tens[t];
    if (T->vloc == LOC_INPUT)
        input_local(e->g->m, buf, n);
    else if (T->vloc == LOC_SLOT)
        sfmt(buf, n, "%s", ch->sb[T->vslot].local);
    else
        sfmt(buf, n, "%s", ch->fb[T->voff].name), frame_use(e, T->voff);
}

void tgrad(em_out *e, int t, char *buf, size_t n)
{
    const em_chunk *ch = e->ch;
    const em_tensor *T = &ch->tens[t];
    if (T->gloc == LOC_SLOT)
        sfmt(buf, n, "%s", ch->sb[T->gslot].local);
    else
        sfmt(buf, n, "%s", ch->fb[T->goff].name), frame_use(e, T->goff);
}

/* n for a layer input: rows * every dim but the last */
void nexpr(const em_tensor *T, char *buf, size_t sz)
{
    int64_t per = T->numel / last_dim(&T->shape);
    if (per == 1)
        sfmt(buf, sz, "r");
    else
        sfmt(buf, sz, "r * %" PRId64, per);
}

void cexpr(const em_tensor *T, char *buf, size_t sz) { sfmt(buf, sz, "r * %" PRId64, T->numel); }

void emit_layer_fwd(em_out *e, int i)
{
    FILE *o = e->o;
    const ir_model *m = e->g->m;
    const em_chunk *ch = e->ch;
    const ir_layer *L = &m->layers[i];
    int li = i - ch->first;
    const em_tensor *TI = &ch->tens[ch->lin[li]], *TO = &ch->tens[ch->lout[li]];
    char x[64], y[64], n[64], cnt[64], p0[128], p1[128], p2[128], p3[128], shi[96], sho[96];
    tval(e, ch->lin[li], x, sizeof x);
    tval(e, ch->lout[li], y, sizeof y);
    nexpr(TI, n, sizeof n);
    cexpr(TI, cnt, sizeof cnt);
    shape_rows(&TI->shape, shi, sizeof shi);
    shape_rows(&TO->shape, sho, sizeof sho);
    if (L->nparam > 0) pmacro(m, L->param[0], 0, p0, sizeof p0);
    if (L->nparam > 1) pmacro(m, L->param[1], 0, p1, sizeof p1);
    if (L->nparam > 2) pmacro(m, L->param[2], 0, p2, sizeof p2);
    if (L->nparam > 3) pmacro(m, L->param[3], 0, p3, sizeof p3);
    if (L->kind != LK_STASH)
        fprintf(o, "    /* %s: %s %s -> %s */\n", L->name, layer_kind_name(L->kind), shi, sho);
    switch (L->kind) {
    case LK_LINEAR:
        fprintf(o, "    PG_TRY(pg_linear_fwd(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s));\n", n, L->in_features,
                L->out_features, x, p0, L->bias ? p1 : "NULL", y);
        break;
    case LK_RELU:
        fprintf(o, "    PG_TRY(pg_relu_fwd(c, %s, %s, %s));\n", cnt, x, y);
        break;
    case LK_GELU:
        fprintf(o, "    PG_TRY(pg_gelu_fwd(c, %s, %s, %s));\n", cnt, x, y);
        break;
    case LK_LAYERNORM:
        fprintf(o, "    PG_TRY(pg_layernorm_fwd(c, %s, %" PRId64 ", %.9gf, %s, %s, %s, %s, %s"
                   ", %s));\n",
                n, last_dim(&TI->shape), L->eps, x, p0, p1, y, fa(e, ch->aux[li].off[0]), fa(e, ch->aux[li].off[1]));
        break;
    case LK_BATCHNORM: {
        int64_t C = last_dim(&TI->shape), per = TI->numel / C;
        int64_t so = e->S->mp.buf[e->S->bnsum_mp[i]].offset;
        char rm[128], rv[128];
        pmacro(m, L->buffer[0], 0, rm, sizeof rm);
        pmacro(m, L->buffer[1], 0, rv, sizeof rv);
        fprintf(o, "    if (io->infer) /* inference: the running statistics, nothing updated */\n"
                   "        PG_TRY(pg_batchnorm_eval_fwd(c, %s, %" PRId64 ", %.9gf, %s, %s, %s, %s, %s, %s));\n"
                   "    else\n",
                n, C, L->eps, x, L->nparam > 0 ? p0 : "NULL", L->nparam > 1 ? p1 : "NULL", rm, rv, y);
        fprintf(o, "        PG_TRY(pg_batchnorm_fwd(c, %s, %" PRId64 ", %.9gf, %s, %s, %s, %s, %s"
                   ", %s));\n",
                n, C, L->eps, x, L->nparam > 0 ? p0 : "NULL", L->nparam > 1 ? p1 : "NULL", y, fa(e, ch->aux[li].off[0]),
                fa(e, ch->aux[li].off[1]));
        if (L->deferred) {
            fprintf(o, "    if (first && !io->infer) { /* deferred: running statistics from the whole mini-batch, once per step;\n"
                       "                  sums over the micro-batches in index order (not again when recomputing) */\n");
            fprintf(o, "        if (io->mb == 0)\n            PG_TRY(pg_zero(c, (float *)(A + %" PRId64 "), %" PRId64
                       ")); /* 2 x %" PRId64 " doubles */\n",
                    so, 4 * C, C);
            fprintf(o, "        PG_TRY(pg_batchnorm_stats_acc(c, %s, %" PRId64 ", %s, (double *)(A + %" PRId64
                       "), (double *)(A + %" PRId64 ")));\n",
                    n, C, x, so, so + 8 * C);
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
            fprintf(o, "        PG_TRY(pg_batchnorm_stats_acc(c, %s, %" PRId64 ", %s, (double *)(A + %" PRId64
                       "), (double *)(A + %" PRId64 ")));\n",
                    n, C, x, so, so + 8 * C);
            fprintf(o, "        PG_TRY(pg_batchnorm_running_update(c, %s, %" PRId64 ", %.9gf, (const double *)(A + %" PRId64
                       "), (const double *)(A + %" PRId64 "), %s, %s));\n    }\n",
                    n, C, L->momentum, so, so + 8 * C, rm, rv);
        }
        break;
    }
    case LK_EMBED:
        fprintf(o, "    PG_TRY(pg_embed_fwd(c, %s, %" PRId64 ", %" PRId64 ", (const int32_t *)%s, %s, %s));\n", cnt,
                L->vocab, L->dim, x, p0, y);
        break;
    case LK_POS_EMBED:
        fprintf(o, "    PG_TRY(pg_pos_embed_fwd(c, r, %" PRId64 ", %" PRId64 ", %s, %s, %s));\n", L->seq, L->dim, x,
                p0, y);
        break;
    case LK_LOGITS:
        fprintf(o, "    PG_TRY(pg_logits_fwd(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s));\n", n, L->dim, L->vocab,
                x, p0, y);
        break;
    case LK_ATTENTION: {
        int64_t T = TI->shape.rank >= 2 ? TI->shape.dim[TI->shape.rank - 2] : 1;
        const int64_t *a = ch->aux[li].off;
        fprintf(o, "    PG_TRY(pg_attention_fwd(c, r, %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %s, %s, %s, %s, %s,\n"
                   "                            %s, %s, %s, %s));\n",
                T, last_dim(&TI->shape), L->heads, L->causal, x, p0, p1, p2, p3, fa(e, a[0]), fa(e, a[1]), fa(e, a[2]), y);
        break;
    }
    case LK_DROPOUT:
        fprintf(o, "    PG_TRY(pg_dropout_fwd(c, r, %" PRId64 ", io->infer ? 0.0f : %.9gf, pg_dropout_seed(io->seed, io->step, %d), io->first_row, "
                   "%s, %s)); /* none in inference */\n",
                TI->numel, L->p, i, x, y);
        break;
    case LK_STASH: {
        const ir_skip *sk = &m->skips[L->skip];
        if (ch->skout[L->skip] >= 0) {
            fprintf(o, "    /* stash %s: %s, sent to chunk %d */\n", sk->name, shi, m->layers[sk->pop_layer].chunk);
            fprintf(o, "    PG_TRY(pg_copy(c, %s, %s, %s));\n", ch->sb[ch->skout[L->skip]].local, x, cnt);
        } else {
            fprintf(o, "    /* stash %s: %s stays in %s */\n", sk->name, shi, x);
        }
        break;
    }
    case LK_POP: {
        const ir_skip *sk = &m->skips[L->skip];
        char s[64];
        if (ch->skin[L->skip] >= 0)
            sfmt(s, sizeof s, "%s", ch->sb[ch->skin[L->skip]].local);
        else
            tval(e, ch->sktensor[L->skip], s, sizeof s);
        if (sk->mode == POP_ADD)
            fprintf(o, "    PG_TRY(pg_add_fwd(c, %s, %s, %s, %s));\n", cnt, x, s, y);
        else
            fprintf(o, "    PG_TRY(pg_concat_fwd(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s));\n", n,
                    last_dim(&TI->shape), last_dim(&sk->shape), x, s, y);
        break;
    }
    default:
        break;
    }
}

void emit_layer_bwd_b(em_out *e, int i)
{
    FILE *o = e->o;
    const ir_model *m = e->g->m;
    const em_chunk *ch = e->ch;
    const ir_layer *L = &m->layers[i];
    int li = i - ch->first;
    const em_tensor *TI = &ch->tens[ch->lin[li]];
    int dx_wanted = TI->need_grad;
    char x[64] = "", dx[64] = "", dy[64], n[64], cnt[64], p0[128], p2[128];
    /* only what the code below reads or writes counts as a use (plan_frames) */
    int reads_x = L->kind == LK_RELU || L->kind == LK_GELU || L->kind == LK_LAYERNORM || L->kind == LK_BATCHNORM;
    int writes_dx = dx_wanted || L->kind == LK_ATTENTION || (L->kind == LK_POP && m->skips[L->skip].mode != POP_ADD);
    if (reads_x)
        tval(e, ch->lin[li], x, sizeof x);
    if (writes_dx)
        tgrad(e, ch->lin[li], dx, sizeof dx);
    tgrad(e, ch->lout[li], dy, sizeof dy);
    nexpr(TI, n, sizeof n);
    cexpr(TI, cnt, sizeof cnt);
    if (L->nparam > 0) pmacro(m, L->param[0], 0, p0, sizeof p0);
    if (L->nparam > 2) pmacro(m, L->param[2], 0, p2, sizeof p2);
    switch (L->kind) {
    case LK_LINEAR:
        if (dx_wanted)
            fprintf(o, "    PG_TRY(pg_linear_bwd_in(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s)); /* %s */\n", n,
                    L->in_features, L->out_features, dy, p0, dx, L->name);
        break;
    case LK_RELU:
        if (dx_wanted)
            fprintf(o, "    PG_TRY(pg_relu_bwd_in(c, %s, %s, %s, %s)); /* %s */\n", cnt, x, dy, dx, L->name);
        break;
    case LK_GELU:
        if (dx_wanted)
            fprintf(o, "    PG_TRY(pg_gelu_bwd_in(c, %s, %s, %s, %s)); /* %s */\n", cnt, x, dy, dx, L->name);
        break;
    case LK_LAYERNORM:
        if (dx_wanted)
            fprintf(o, "    PG_TRY(pg_layernorm_bwd_in(c, %s, %" PRId64 ", %s, %s, %s"
                       ", %s, %s, %s)); /* %s */\n",
                    n, last_dim(&TI->shape), x, p0, fa(e, ch->aux[li].off[0]), fa(e, ch->aux[li].off[1]), dy, dx, L->name);
        break;
    case LK_BATCHNORM:
        if (dx_wanted)
            fprintf(o, "    PG_TRY(pg_batchnorm_bwd_in(c, %s, %" PRId64 ", %s, %s, %s"
                       ", %s, %s, %s)); /* %s */\n",
                    n, last_dim(&TI->shape), x, L->nparam > 0 ? p0 : "NULL", fa(e, ch->aux[li].off[0]), fa(e, ch->aux[li].off[1]), dy,
                    dx, L->name);
        break;
    case LK_POS_EMBED:
        if (dx_wanted)
            fprintf(o, "    PG_TRY(pg_copy(c, %s, %s, %s)); /* %s */\n", dx, dy, cnt, L->name);
        break;
    case LK_LOGITS:
        if (dx_wanted)
            fprintf(o, "    PG_TRY(pg_logits_bwd_in(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s)); /* %s */\n", n,
                    L->dim, L->vocab, dy, p0, dx, L->name);
        break;
    case LK_ATTENTION: {
        int64_t T = TI->shape.rank >= 2 ? TI->shape.dim[TI->shape.rank - 2] : 1;
        const int64_t *a = ch->aux[li].off;
        /* always run: it also leaves dqkv for the weight gradient */
        fprintf(o, "    PG_TRY(pg_attention_bwd_in(c, r, %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %s, %s,\n"
                   "                               %s, %s, %s"
                   ", %s,\n                               %s, %s"
                   ", %s)); /* %s */\n",
                T, last_dim(&TI->shape), L->heads, L->causal, p0, p2, fa(e, a[0]), fa(e, a[1]), fa(e, a[2]), dy, fa(e, a[3]), fa(e, a[4]), dx, L->name);
        break;
    }
    case LK_DROPOUT:
        if (dx_wanted)
            fprintf(o, "    PG_TRY(pg_dropout_bwd_in(c, r, %" PRId64 ", %.9gf, pg_dropout_seed(io->seed, io->step, %d), io->first_row, %s, %s)); /* %s */\n",
                    TI->numel, L->p, i, dy, dx, L->name);
        break;
    case LK_STASH: {
        const ir_skip *sk = &m->skips[L->skip];
        if (!dx_wanted)
            break;
        if (ch->skgin[L->skip] >= 0)
            fprintf(o, "    PG_TRY(pg_axpy_inplace(c, %s, %s, %s)); /* + gradient of skip %s from chunk %d */\n", dx,
                    ch->sb[ch->skgin[L->skip]].local, cnt, sk->name, m->layers[sk->pop_layer].chunk);
        else
            fprintf(o, "    PG_TRY(pg_axpy_inplace(c, %s, %s, %s)); /* + gradient of skip %s */\n",
                    dx, fa(e, ch->skgframe[L->skip]), cnt, sk->name);
        break;
    }
    case LK_POP: {
        const ir_skip *sk = &m->skips[L->skip];
        char ds[64];
        int ds_wanted = 1;
        if (ch->skgout[L->skip] >= 0)
            sfmt(ds, sizeof ds, "%s", ch->sb[ch->skgout[L->skip]].local);
        else {
            sfmt(ds, sizeof ds, "%s", fa(e, ch->skgframe[L->skip]));
            ds_wanted = ch->tens[ch->sktensor[L->skip]].need_grad;
        }
        if (sk->mode == POP_ADD) {
            if (dx_wanted)
                fprintf(o, "    PG_TRY(pg_copy(c, %s, %s, %s)); /* %s */\n", dx, dy, cnt, L->name);
            if (ds_wanted)
                fprintf(o, "    PG_TRY(pg_copy(c, %s, %s, r * %" PRId64 ")); /* gradient of skip %s */\n", ds, dy,
                        pg_shape_numel(&sk->shape), sk->name);
        } else {
            fprintf(o, "    PG_TRY(pg_concat_bwd(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s)); /* %s */\n", n,
                    last_dim(&TI->shape), last_dim(&sk->shape), dy, dx, ds, L->name);
        }
        break;
    }
    default:
        break;
    }
}

void emit_layer_bwd_w(em_out *e, int i)
{
    FILE *o = e->o;
    const ir_model *m = e->g->m;
    const em_chunk *ch = e->ch;
    const ir_layer *L = &m->layers[i];
    int li = i - ch->first;
    const em_tensor *TI = &ch->tens[ch->lin[li]];
    char x[64] = "", dy[64], n[64], cnt[64], g[4][128];
    /* only layers with weights have code here: only what it reads counts as a use (plan_frames) */
    if (L->kind != LK_LINEAR && L->kind != LK_BATCHNORM && L->kind != LK_LAYERNORM && L->kind != LK_EMBED &&
        L->kind != LK_POS_EMBED && L->kind != LK_LOGITS && L->kind != LK_ATTENTION)
        return;
    if (L->kind != LK_POS_EMBED)
        tval(e, ch->lin[li], x, sizeof x);
    tgrad(e, ch->lout[li], dy, sizeof dy);
    nexpr(TI, n, sizeof n);
    cexpr(TI, cnt, sizeof cnt);
    for (int k = 0; k < L->nparam && k < 4; k++) {
        int p = L->param[k];
        if (p < 0) {
            sfmt(g[k], sizeof g[k], "NULL");
            continue;
        }
        char gm[96];
        pmacro(m, p, 1, gm, sizeof gm);
        int j = e->g->acc_at[i * 4 + k]; /* this use's own accumulator */
        if (j)
            sfmt(g[k], sizeof g[k], "(%s + %d * %" PRId64 ")", gm, j, acc_numel(&m->params[p]));
        else
            sfmt(g[k], sizeof g[k], "%s", gm);
    }
    switch (L->kind) {
    case LK_LINEAR:
        fprintf(o, "    PG_TRY(pg_linear_bwd_w(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s)); /* %s */\n", n,
                L->in_features, L->out_features, x, dy, g[0], L->bias ? g[1] : "NULL", L->name);
        break;
    case LK_BATCHNORM:
        fprintf(o, "    PG_TRY(pg_batchnorm_bwd_w(c, %s, %" PRId64 ", %s, %s, %s"
                   ", %s, %s, %s)); /* %s */\n",
                n, last_dim(&TI->shape), x, fa(e, ch->aux[li].off[0]), fa(e, ch->aux[li].off[1]), dy, L->nparam > 0 ? g[0] : "NULL",
                L->nparam > 1 ? g[1] : "NULL", L->name);
        break;
    case LK_LAYERNORM:
        fprintf(o, "    PG_TRY(pg_layernorm_bwd_w(c, %s, %" PRId64 ", %s, %s, %s"
                   ", %s, %s, %s)); /* %s */\n",
                n, last_dim(&TI->shape), x, fa(e, ch->aux[li].off[0]), fa(e, ch->aux[li].off[1]), dy, g[0], g[1], L->name);
        break;
    case LK_EMBED:
        fprintf(o, "    PG_TRY(pg_embed_bwd_w(c, %s, %" PRId64 ", %" PRId64 ", (const int32_t *)%s, %s, %s)); /* %s */\n",
                cnt, L->vocab, L->dim, x, dy, g[0], L->name);
        break;
    case LK_POS_EMBED:
        fprintf(o, "    PG_TRY(pg_pos_embed_bwd_w(c, r, %" PRId64 ", %" PRId64 ", %s, %s)); /* %s */\n", L->seq, L->dim,
                dy, g[0], L->name);
        break;
    case LK_LOGITS:
        fprintf(o, "    PG_TRY(pg_logits_bwd_w(c, %s, %" PRId64 ", %" PRId64 ", %s, %s, %s)); /* %s */\n", n, L->dim,
                L->vocab, x, dy, g[0], L->name);
        break;
    case LK_ATTENTION: {
        int64_t T = TI->shape.rank >= 2 ? TI->shape.dim[TI->shape.rank - 2] : 1;
        const int64_t *a = ch->aux[li].off;
        fprintf(o, "    PG_TRY(pg_attention_bwd_w(c, r, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s"
                   ",\n                              %s, %s, %s, %s)); /* %s */\n",
                T, last_dim(&TI->shape), x, fa(e, a[2]), dy, fa(e, a[4]), g[0], g[1], g[2], g[3], L->name);
        break;
    }
    default:
        break;
    }
}


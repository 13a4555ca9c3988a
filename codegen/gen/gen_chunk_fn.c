/* codegen/gen/gen_chunk_fn.c — the chunk functions of stage<k>.c: a chunk's
 * frame table (frame_c<k>: arena offsets of its frame buffers per micro-batch
 * and pass), then fwd, bwd_b and bwd_w, each declaring the tensors and
 * parameters it uses as named, typed locals with their shapes (float *const
 * h0_ln1_out, const int32_t *const tokens, float *const h0_fc_weight and its
 * gradient accumulators d_h0_fc_weight; names: name_params in gen_layout.c),
 * so a debugger's `info locals` shows them (emit_fn; tests/debug_gdb.t). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen_layer.h"


/* The identifiers of C text outside comments and string literals, sorted. */
typedef struct em_idents {
    char **v;
    int n;
    char *text;
} em_idents;

static int cmp_str(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

static int is_idch(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

static int collect_idents(const char *body, em_idents *s)
{
    size_t len = strlen(body);
    s->text = malloc(len + 1);
    s->v = malloc((len / 2 + 1) * sizeof *s->v);
    s->n = 0;
    if (!s->text || !s->v)
        return -1;
    memcpy(s->text, body, len + 1);
    /* comments and string literals become blanks */
    for (char *p = s->text; *p;) {
        if (p[0] == '/' && p[1] == '*') {
            char *q = strstr(p + 2, "*/");
            char *end = q ? q + 2 : p + strlen(p);
            memset(p, ' ', (size_t)(end - p));
            p = end;
        } else if (*p == '"') {
            *p++ = ' ';
            while (*p && *p != '"') {
                if (*p == '\\' && p[1])
                    *p++ = ' ';
                *p++ = ' ';
            }
            if (*p)
                *p++ = ' ';
        } else {
            p++;
        }
    }
    for (char *p = s->text; *p;) {
        if (!is_idch(*p)) {
            p++;
            continue;
        }
        char *st = p;
        while (is_idch(*p))
            p++;
        int word = !(*st >= '0' && *st <= '9'); /* not a number */
        if (*p)
            *p++ = 0;
        if (word)
            s->v[s->n++] = st;
    }
    qsort(s->v, (size_t)s->n, sizeof *s->v, cmp_str);
    return 0;
}

static int has_ident(const em_idents *s, const char *name)
{
    return bsearch(&name, s->v, (size_t)s->n, sizeof *s->v, cmp_str) != NULL;
}

/* One chunk function: its body (in text) decides which locals it declares:
 * r, F (this micro-batch's row of frame_c<k>: frow), and each tensor and model parameter it uses
 * with its type and shape; an argument it does not use is cast to void. A
 * decode chunk's (ch->dec) frame buffers have one instance each, at a fixed
 * offset, and its buffers one per decode micro-batch (io->slot). */
static int emit_fn(em_out *e, const char *sig, const char *frow, int has_first, const char *body)
{
    FILE *o = e->o;
    const em_chunk *ch = e->ch;
    const em_stage *S = e->S;
    const ir_model *m = e->g->m;
    em_idents id;
    if (collect_idents(body, &id)) {
        free(id.text);
        free(id.v);
        return -1;
    }
    fprintf(o, "%s\n{\n", sig);
    int uses_A = has_ident(&id, "A") || has_ident(&id, "INPUT_ROWS") || has_ident(&id, "TARGET_ROWS") ||
                 has_ident(&id, "DEC_ROWS");
    int uses_io = has_ident(&id, "io") || has_ident(&id, "INPUT_ROWS") || has_ident(&id, "TARGET_ROWS");
    if (has_ident(&id, "r"))
        fprintf(o, "    const int64_t r = io->rows;%s\n", ch->dec ? " /* token rows: io->seqs x io->t */" : ""),
            uses_io = 1;
    int any_frame = 0;
    for (int f = 0; f < ch->nfb && !any_frame && !ch->dec; f++)
        any_frame = has_ident(&id, ch->fb[f].name);
    if (any_frame)
        fprintf(o, "    const int64_t *const F = frame_c%d[%s]; /* this micro-batch's frame buffers */\n", ch->chunk,
                frow), uses_A = uses_io = 1;
    char in[72], sh[96];
    input_local(m, in, sizeof in);
    if (has_ident(&id, in)) {
        pg_shape_str(m->input_dtype, &m->input, sh, sizeof sh);
        if (m->input_dtype == DT_I32)
            fprintf(o, "    const int32_t *const %s = (const int32_t *)INPUT_ROWS; /* %s per row */\n", in, sh);
        else
            fprintf(o, "    float *const %s = INPUT_ROWS; /* %s per row */\n", in, sh);
        uses_A = uses_io = 1;
    }
    for (int b = 0; b < ch->nsb; b++) {
        const em_slotbuf *B = &ch->sb[b];
        if (!has_ident(&id, B->local))
            continue;
        if (ch->dec) { /* one instance, or the decode micro-batch's */
            const em_slotbuf *T = B;
            for (int i = 0; B->alias_chunk >= 0 && i < S->nchunks; i++)
                if (S->dch[i].chunk == B->alias_chunk)
                    T = &S->dch[i].sb[B->alias_sb];
            if (T->count > 1)
                fprintf(o, "    float *const %s = (float *)(A + %" PRId64 " + (int64_t)io->slot * %" PRId64 "); /* %s */\n",
                        B->local, S->mp.buf[T->mp].offset, T->stride, B->note), uses_io = 1;
            else
                fprintf(o, "    float *const %s = (float *)(A + %" PRId64 "); /* %s */\n", B->local,
                        S->mp.buf[T->mp].offset, B->note);
        } else if (B->alias_chunk >= 0) {
            const em_chunk *to = find_chunk_c(S, B->alias_chunk);
            fprintf(o, "    float *const %s = (float *)(A + %" PRId64 " + (int64_t)mb_slot_c%d[io->mb] * %" PRId64 "); /* %s */\n",
                    B->local, to ? S->mp.buf[to->sb[B->alias_sb].mp].offset : 0, B->alias_chunk, B->stride, B->note);
        } else {
            fprintf(o, "    float *const %s = (float *)(A + %" PRId64 " + (int64_t)io->slot * %" PRId64 "); /* %s */\n",
                    B->local, S->mp.buf[B->mp].offset, B->stride, B->note);
        }
        uses_A = uses_io = 1;
    }
    for (int f = 0; f < ch->nfb; f++) {
        if (!has_ident(&id, ch->fb[f].name))
            continue;
        if (ch->dec)
            fprintf(o, "    float *const %s = (float *)(A + %" PRId64 "); /* %s: %s */\n", ch->fb[f].name,
                    S->mp.buf[ch->fb_mp[f]].offset, ch->fb[f].what, ch->fb[f].shape), uses_A = 1;
        else
            fprintf(o, "    float *const %s = (float *)(A + F[%d]); /* %s: %s */\n", ch->fb[f].name, f, ch->fb[f].what,
                    ch->fb[f].shape);
    }
    for (int p = 0; p < m->nparams; p++) { /* parameters, gradient accumulators */
        const ir_param *P = &m->params[p];
        int mp[2] = {S->param_mp[p], S->grad_mp[p]};
        for (int k = 0; k < 2; k++) {
            if (mp[k] < 0 || !has_ident(&id, plocal(ch, p, k)))
                continue;
            pg_shape_str(P->dtype, &P->shape, sh, sizeof sh);
            int nacc = k ? nacc_of(e->g, S->stage, p) : 1;
            fprintf(o, "    float *const %s = (float *)(A + %" PRId64 "); /* %s%s: %s", plocal(ch, p, k),
                    S->mp.buf[mp[k]].offset, k ? "gradient of " : "", P->name, sh);
            if (nacc > 1)
                fprintf(o, ", %d accumulators %" PRId64 " floats apart", nacc, acc_numel(P));
            fprintf(o, " */\n");
            uses_A = 1;
        }
    }
    if (!has_ident(&id, "c"))
        fprintf(o, "    (void)c;\n");
    if (!uses_A)
        fprintf(o, "    (void)A;\n");
    if (!uses_io)
        fprintf(o, "    (void)io;\n");
    if (has_first && !has_ident(&id, "first") && !(any_frame && strstr(frow, "first")))
        fprintf(o, "    (void)first;\n");
    fputs(body, o);
    fprintf(o, "    return 0;\n}\n\n");
    free(id.text);
    free(id.v);
    return 0;
}

enum { FN_FWD_BODY, FN_FWD, FN_BWD_B, FN_BWD_W, FN_DEC };

/* The statements of one chunk function (FN_*), into e->o. */
static void write_body(em_out *e, int fn, int split_fwd)
{
    const ir_model *m = e->g->m;
    const em_chunk *ch = e->ch;
    const em_stage *S = e->S;
    int c = ch->chunk;
    if (fn == FN_FWD_BODY) {
        for (int i = ch->first; i <= ch->last; i++)
            emit_layer_fwd(e, i);
        if (!ch->is_last)
            return;
        int tl = ch->lout[ch->last - ch->first];
        const em_tensor *TL = &ch->tens[tl];
        char y[80], dy[80];
        tval(e, tl, y, sizeof y);
        tgrad(e, tl, dy, sizeof dy);
        const ir_train *t = &m->train;
        if (t->loss == LOSS_CROSS_ENTROPY && S->count_mp >= 0) {
            int64_t V = last_dim(&TL->shape);
            fprintf(e->o, "    /* loss: cross_entropy, partial over this micro-batch; targets %" PRId64 " count nowhere, the rest\n"
                          "     * are divided by the batch's counted positions, which the runtime writes before the step */\n",
                    t->ignore_index);
            fprintf(e->o, "    PG_TRY(pg_cross_entropy_ignore_fwd_bwd(c, r * %" PRId64 ", %" PRId64 ", %s, (const int32_t *)TARGET_ROWS, %" PRId64
                          ",\n                                           (const double *)(A + %" PRId64 "), &io->loss, %s));\n",
                    TL->numel / V, V, y, t->ignore_index, S->mp.buf[S->count_mp].offset, dy);
        } else if (t->loss == LOSS_CROSS_ENTROPY) {
            int64_t V = last_dim(&TL->shape);
            fprintf(e->o, "    /* loss: cross_entropy, partial over this micro-batch, divided by batch * positions */\n");
            fprintf(e->o, "    PG_TRY(pg_cross_entropy_fwd_bwd(c, r * %" PRId64 ", %" PRId64 ", %s, (const int32_t *)TARGET_ROWS, %" PRId64
                       ".0, &io->loss, %s));\n",
                    TL->numel / V, V, y, t->batch * pg_shape_numel(&m->target), dy);
        } else {
            int64_t denom = t->loss == LOSS_MSE_MEAN ? t->batch * pg_shape_numel(&m->target) : 1;
            fprintf(e->o, "    /* loss: mse(%s), partial over this micro-batch */\n", t->loss == LOSS_MSE_MEAN ? "mean" : "sum");
            fprintf(e->o, "    PG_TRY(pg_mse_fwd_bwd(c, r * %" PRId64 ", %s, (const float *)TARGET_ROWS, %" PRId64
                       ".0, &io->loss, %s));\n",
                    TL->numel, y, denom, dy);
        }
    } else if (fn == FN_FWD) {
        const em_chunk *pv = ch->x_local ? find_chunk_c(S, c - 1) : NULL;
        if (pv) {
            const em_slotbuf *Y = &pv->sb[pv->y_slot];
            fprintf(e->o, "    /* the input: chunk %d's output of this micro-batch, on this stage */\n", c - 1);
            fprintf(e->o, "    PG_TRY(pg_copy(c, %s, (float *)(A + %" PRId64 " + (int64_t)mb_slot_c%d[io->mb] * %" PRId64
                       "), io->rows * %" PRId64 "));\n",
                    ch->sb[ch->x_slot].local, S->mp.buf[Y->mp].offset, c - 1, Y->stride, ch->tens[0].numel);
        }
        fprintf(e->o, "    PG_TRY(fwd_body_c%d(c, A, io, 1));\n", c);
    } else if (fn == FN_DEC) { /* a decode chunk's call */
        for (int i = ch->first; i <= ch->last; i++)
            emit_layer_dec(e, i);
    } else if (fn == FN_BWD_B) {
        fprintf(e->o, "    if (io->recompute) /* checkpointed: rebuild the interior from the stage input */\n"
                      "        PG_TRY(%s_c%d(c, A, io%s));\n", split_fwd ? "fwd_body" : "fwd", c, split_fwd ? ", 0" : "");
        for (int i = ch->last; i >= ch->first; i--)
            emit_layer_bwd_b(e, i);
    } else {
        long before = ftell(e->o);
        for (int i = ch->last; i >= ch->first; i--) {
            emit_layer_bwd_w(e, i);
            emit_grads_final(e, i);
        }
        if (ftell(e->o) == before)
            fprintf(e->o, "    /* no weights in this chunk */\n");
    }
}

/* One chunk function: its statements into a string first, then emit_fn. */
static int emit_chunk_fn(em_out *e, int fn, int split_fwd)
{
    static const char *const names[] = {"fwd_body", "fwd", "bwd_b", "bwd_w", "dec"};
    static const char *const rows[] = {"2 * io->mb + !first", "2 * io->mb", "2 * io->mb + 1", "2 * io->mb + 1", ""};
    FILE *saved = e->o;
    char *buf = NULL, sig[160];
    size_t len = 0;
    e->o = open_memstream(&buf, &len);
    if (!e->o) {
        e->o = saved;
        return -1;
    }
    write_body(e, fn, split_fwd);
    int rc = fclose(e->o) ? -1 : 0;
    e->o = saved;
    int has_first = fn == FN_FWD_BODY && split_fwd;
    sfmt(sig, sizeof sig, "static int %s_c%d(pg_ctx *c, unsigned char *A, pg_mb_io *io%s)",
         fn == FN_FWD_BODY && !split_fwd ? "fwd" : names[fn], e->ch->chunk, has_first ? ", int first" : "");
    if (!rc)
        rc = emit_fn(e, sig, rows[fn], has_first, buf);
    free(buf);
    return rc;
}

/* The decode function of a decode chunk (gen_decode.c): its layers' statements
 * for one call (emit_layer_dec), r the call's token rows. */
int emit_dec_fn(em_out *e)
{
    fprintf(e->o, "/* generation with the KV cache: chunk %d on io->t new positions of each of io->seqs sequences\n"
                  " * (the decode row table, DEC_ROWS); tensors per token, r = io->seqs x io->t rows */\n", e->ch->chunk);
    return emit_chunk_fn(e, FN_DEC, 0);
}

int emit_chunk_fns(em_out *e)
{
    const pg_gen *g = e->g;
    const ir_model *m = g->m;
    const em_chunk *ch = e->ch;
    const em_stage *S = e->S;
    int c = ch->chunk;
    FILE *o = e->o;

    fprintf(o, "/* ---- chunk %d: layers %s .. %s ---- */\n\n", c, m->layers[ch->first].name, m->layers[ch->last].name);
    int uses[PASS__COUNT] = {0, 0, 0};
    for (int f = 0; f < ch->nfb; f++)
        for (int k = 0; k < PASS__COUNT; k++)
            uses[k] |= ch->fb[f].lo[k] >= 0;
    if (uses[PASS_F] || uses[PASS_B] || uses[PASS_W]) {
        fprintf(o, "/* Arena offsets of this chunk's frame buffers (listed in %s.h): row 2 * mb is micro-batch mb's\n"
                   " * forward, row 2 * mb + 1 its backward (the recompute of a checkpointed one, BWD_B, BWD_W);\n"
                   " * -1 where that pass does not use the buffer. The memory plan shares bytes between buffers\n"
                   " * that are never alive at once in this stage's action order. */\n",
                m->name);
        fprintf(o, "static const int64_t frame_c%d[%d][%d] = {\n", c, 2 * g->s->nmb, ch->nfb);
        for (int row = 0; row < 2 * g->s->nmb; row++) {
            fprintf(o, "    {");
            for (int f = 0; f < ch->nfb; f++) {
                int k = ch->fb_mp[row * ch->nfb + f];
                fprintf(o, "%s%" PRId64, f ? ", " : "", k >= 0 ? S->mp.buf[k].offset : -1);
            }
            fprintf(o, "}, /* mb %d, %s */\n", row / 2, row % 2 ? "backward" : "forward");
        }
        fprintf(o, "};\n\n");
    }
    /* forward; with batchnorm, `first` tells the step's forward from a recompute; a chunk
     * whose input comes from chunk-1 on this stage copies it in the step's forward only */
    int uses_first = 0;
    for (int i = ch->first; i <= ch->last; i++)
        uses_first |= gen_layer_kind_of(m->layers[i].kind)->fwd_uses_first;
    int split_fwd = uses_first || ch->x_local || uses[PASS_F];
    if (emit_chunk_fn(e, FN_FWD_BODY, split_fwd) || (split_fwd && emit_chunk_fn(e, FN_FWD, split_fwd)) ||
        emit_chunk_fn(e, FN_BWD_B, split_fwd) || emit_chunk_fn(e, FN_BWD_W, split_fwd))
        return -1;
    return 0;
}


/* codegen/gen/gen_decode.c — generation with the KV cache: whether a model
 * decodes and with which static sizes (dec_plan), each stage's decode chunks
 * and their buffers in the memory plan (dec_layout_stage), and the decode
 * schedule's message offsets and bytes (dec_plan_messages).
 *
 * A decode call runs a chunk on t new positions of each sequence of a decode
 * micro-batch, t at most `prefill`: a prompt in pieces, or the one token
 * sampled last round. Every layer then works on r = sequences x t token rows
 * with its tensors per token (the positions dimension dropped: a [T, d]
 * tensor is [d] per row), which is how the step's forward already treats
 * every layer but attention (which reads each sequence's earlier keys and
 * values from its cache) and pos_embed (which adds each position's row):
 * their entries' `dec` (gen_layer.h). So a language model decodes when each
 * of its layers acts on one position at a time in inference (per_token), or
 * has a `dec`, and keeps the positions as its tensors' first dimension.
 *
 * Buffers of a stage, planned with the step's (runtime/core/decode.c runs
 * after training, so they may share bytes with the step's frame buffers):
 *  - each attention layer's key and value caches, [batch, length, kv], alive
 *    through the whole generation (MP_KVCACHE);
 *  - the row table (per sequence of a call: cache row, first position, real
 *    new positions, flags), the token ids of chunk 0's call, and per decode
 *    micro-batch every chunk's input (received), output (sent or read by the
 *    next chunk of the stage in place) and skips crossing chunks, alive
 *    through the generation (MP_DECODE: a micro-batch's output may wait in its
 *    buffer until the schedule sends it);
 *  - each chunk's frame buffers for one call of rows x prefill token rows,
 *    alive within their call (the decode timeline follows the step's: its
 *    ticks begin at the stage's nticks, one per layer step of each chunk's
 *    call in turn).
 * The last chunk's output (the logits) has one instance: the runtime samples
 * from it right after the call. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen_layer.h"

/* s per token: without its first dimension (the positions) */
static pg_shape per_token(const pg_shape *s)
{
    pg_shape t;
    memset(&t, 0, sizeof t);
    for (int k = 1; k < s->rank; k++)
        t.dim[t.rank++] = s->dim[k];
    return t;
}

/* Why this language model cannot decode, into why; 0 when it can. */
static int why_not(const ir_model *m, char *why, size_t n)
{
    int64_t T = m->input.dim[0];
    char a[96], b[96];
    for (int i = 0; i < m->nlayers; i++) {
        const ir_layer *L = &m->layers[i];
        const gen_layer_kind *K = gen_layer_kind_of(L->kind);
        const char *r = NULL;
        if (!K || (!K->per_token && !K->dec)) {
            sfmt(why, n, "layer '%s' (%s) has no form for a few positions at a time", L->name, layer_kind_name(L->kind));
            return -1;
        }
        if (K->dec_check && (r = K->dec_check(L)) != NULL) {
            sfmt(why, n, "layer '%s' (%s): %s", L->name, layer_kind_name(L->kind), r);
            return -1;
        }
        if (L->in.rank < 1 || L->in.dim[0] != T || L->out.rank < 1 || L->out.dim[0] != T) {
            sfmt(why, n, "layer '%s' (%s) does not keep the %" PRId64 " positions as the first dimension (%s -> %s)",
                 L->name, layer_kind_name(L->kind), T, pg_shape_str(L->in_dtype, &L->in, a, sizeof a),
                 pg_shape_str(DT_F32, &L->out, b, sizeof b));
            return -1;
        }
    }
    return 0;
}

/* `generate = kv_cache(...)` written in the .pipe: a model that cannot decode is an error then */
static int asked(const ir_model *m) { return m->train.gen_loc.line > 0 && !m->train.gen_off; }

int dec_plan(pg_gen *g, pg_diag *d)
{
    const ir_model *m = g->m;
    const ir_train *t = &m->train;
    char sh[2][96];
    g->dec_on = 0;
    g->dec_why[0] = '\0';
    if (t->gen_off) {
        sfmt(g->dec_why, sizeof g->dec_why, "its .pipe says `generate = none`");
        return 0;
    }
    if (m->input_dtype != DT_I32 || m->target_dtype != DT_I32 || m->input.rank != 1 || m->target.rank != 1 ||
        m->input.dim[0] != m->target.dim[0]) {
        if (!asked(m))
            return 0; /* not a language model: nothing to say */
        pg_error(d, t->gen_loc, "generate = kv_cache(...) needs a language model (input and target both i32[seq]), "
                 "but the input is %s and the target %s", pg_shape_str(m->input_dtype, &m->input, sh[0], sizeof sh[0]),
                 pg_shape_str(m->target_dtype, &m->target, sh[1], sizeof sh[1]));
        return -1;
    }
    if (why_not(m, g->dec_why, sizeof g->dec_why)) {
        if (!asked(m))
            return 0;
        pg_error(d, t->gen_loc, "generate = kv_cache(...): this model cannot generate with a KV cache: %s", g->dec_why);
        return -1;
    }
    int64_t T = m->input.dim[0], table = 0;
    const ir_layer *tl = NULL; /* the shortest position table */
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].kind == LK_POS_EMBED && (!tl || m->layers[i].seq < table))
            tl = &m->layers[i], table = tl->seq;
    g->dec_batch = t->gen_batch ? t->gen_batch : m->nstages;
    g->dec_nmb = (int)(t->gen_microbatches ? t->gen_microbatches : (g->dec_batch < m->nstages ? g->dec_batch : m->nstages));
    g->dec_len = t->gen_length ? t->gen_length : T;
    g->dec_prefill = t->gen_prefill ? t->gen_prefill : (g->dec_len < 32 ? g->dec_len : 32);
    if (g->dec_nmb > g->dec_batch) {
        pg_error(d, t->gen_loc, "kv_cache: microbatches = %d is more than batch = %" PRId64 " (%s): every micro-batch "
                 "needs a sequence", g->dec_nmb, g->dec_batch, t->gen_batch ? "as given" : "the default, the stage count");
        return -1;
    }
    if (tl && g->dec_len > table) {
        pg_error(d, t->gen_loc, "kv_cache: length = %" PRId64 " is more than the %" PRId64 " positions of pos_embed "
                 "'%s'", g->dec_len, table, tl->name);
        pg_note(d, tl->loc, "the position table is here");
        return -1;
    }
    if (g->dec_prefill > g->dec_len) {
        pg_error(d, t->gen_loc, "kv_cache: prefill = %" PRId64 " is more than length = %" PRId64 " (%s)", g->dec_prefill,
                 g->dec_len, t->gen_length ? "as given" : "the default, the input's positions");
        return -1;
    }
    g->dec_rows = (g->dec_batch + g->dec_nmb - 1) / g->dec_nmb;
    if (pg_schedule_decode(m, g->s, g->dec_nmb, &g->dsched, d))
        return -1;
    g->dec_on = 1;
    return 0;
}

/* ---- a stage's decode chunks ------------------------------------------------ */

/* A buffer of the decode chunk: count instances (decode micro-batches, or 1) of bytes each. */
static int dec_slot(em_chunk *ch, const char *local, const char *note, int64_t bytes, int count)
{
    int b = add_slotbuf(ch, local, note, MP_DECODE, bytes);
    if (b >= 0)
        ch->sb[b].count = count;
    return b;
}

/* The decode chunk dc (chunk, stage, first, last, is_first, is_last set):
 * its per-token tensors, buffers and frame buffers (module comment). */
static int dec_layout_chunk(pg_gen *g, em_stage *S, em_chunk *dc, pg_diag *d)
{
    const ir_model *m = g->m;
    int M = g->dec_nmb;
    int64_t R = g->dec_rows * g->dec_prefill;
    char note[200], local[64], sh[96];
    dc->dec = 1;
    if (chunk_tables(dc, m->nskips)) {
        pg_error(d, m->loc, "out of memory laying out the decode of chunk %d", dc->chunk);
        return -1;
    }
    const ir_layer *L0 = &m->layers[dc->first];
    pg_shape in = per_token(&L0->in);
    int t0 = new_tensor(dc, &in, L0->in_dtype == DT_I32 ? 2 : 0, dc->is_first ? "token ids" : "chunk input");
    em_chunk *prev = NULL;
    if (!dc->is_first && chunk_stage(g, dc->chunk - 1) == dc->stage) {
        for (int i = 0; i < S->nchunks; i++)
            if (S->dch[i].chunk == dc->chunk - 1)
                prev = &S->dch[i];
        if (!prev || prev->y_slot < 0) {
            pg_error(d, L0->loc, "decode of chunk %d: the chunk before it is not laid out", dc->chunk);
            return -1;
        }
    }
    sfmt(local, sizeof local, dc->is_first ? "dec_tokens" : "c%d_x", dc->chunk);
    if (dc->is_first) {
        sfmt(note, sizeof note, "the token ids of a decode call: i32[r]");
        dc->x_slot = dec_slot(dc, local, note, R * 4, 1);
    } else if (prev) {
        sfmt(note, sizeof note, "decode: chunk %d input: [r, %" PRId64 "], chunk %d's output on this stage, read in place",
             dc->chunk, last_dim(&in), prev->chunk);
        dc->x_slot = add_alias(dc, local, note, prev, prev->y_slot);
    } else {
        sfmt(note, sizeof note, "decode: chunk %d input: [r, %" PRId64 "] per decode micro-batch, received", dc->chunk,
             last_dim(&in));
        dc->x_slot = dec_slot(dc, local, note, R * dc->tens[t0].numel * 4, M);
    }
    dc->tens[t0].vloc = LOC_SLOT;
    dc->tens[t0].vslot = dc->x_slot;
    int cur = t0, full = 0; /* full: a buffer found no place among the chunk's 64 */
    for (int i = dc->first; i <= dc->last; i++) {
        const ir_layer *L = &m->layers[i];
        const gen_layer_kind *K = gen_layer_kind_of(L->kind);
        int li = i - dc->first;
        dc->lin[li] = cur;
        if (L->kind == LK_STASH || L->kind == LK_POP) {
            const ir_skip *sk = &m->skips[L->skip];
            int sc = m->layers[sk->stash_layer].chunk, pc = m->layers[sk->pop_layer].chunk;
            pg_shape ks = per_token(&sk->shape);
            shape_rows(&ks, sh, sizeof sh);
            if (L->kind == LK_STASH && pc == dc->chunk) {
                dc->sktensor[L->skip] = cur;
            } else if (L->kind == LK_STASH) {
                sfmt(local, sizeof local, "c%d_skip%d_out", dc->chunk, L->skip);
                sfmt(note, sizeof note, "decode: skip %s stashed: %s per decode micro-batch, for chunk %d", sk->name, sh, pc);
                dc->skout[L->skip] = dec_slot(dc, local, note, R * pg_shape_numel(&ks) * 4, M);
                full |= dc->skout[L->skip] < 0;
            } else if (sc != dc->chunk) {
                sfmt(local, sizeof local, "c%d_skip%d_in", dc->chunk, L->skip);
                em_chunk *sdc = NULL;
                for (int j = 0; j < S->nchunks && m->layers[sk->stash_layer].stage == dc->stage; j++)
                    if (S->dch[j].chunk == sc)
                        sdc = &S->dch[j];
                if (sdc && sdc->skout[L->skip] >= 0) {
                    sfmt(note, sizeof note, "decode: skip %s: %s, chunk %d's stash on this stage, read in place", sk->name, sh, sc);
                    dc->skin[L->skip] = add_alias(dc, local, note, sdc, sdc->skout[L->skip]);
                } else {
                    sfmt(note, sizeof note, "decode: skip %s: %s per decode micro-batch, received from chunk %d", sk->name, sh,
                         sc);
                    dc->skin[L->skip] = dec_slot(dc, local, note, R * pg_shape_numel(&ks) * 4, M);
                }
                full |= dc->skin[L->skip] < 0;
            }
        }
        if (K->passes_through) {
            dc->lout[li] = cur;
            continue;
        }
        char what[128];
        pg_shape out = per_token(&L->out);
        sfmt(what, sizeof what, "%s out", L->name);
        cur = dc->lout[li] = new_tensor(dc, &out, 0, what);
    }
    const em_tensor *Y = &dc->tens[cur];
    shape_rows(&Y->shape, sh, sizeof sh);
    sfmt(local, sizeof local, "c%d_y", dc->chunk);
    sfmt(note, sizeof note, "decode: chunk %d output: %s%s", dc->chunk, sh,
         dc->is_last ? ", the logits of a call (sampled at once)" : " per decode micro-batch");
    dc->y_slot = dec_slot(dc, local, note, R * Y->numel * 4, dc->is_last ? 1 : M);
    dc->tens[cur].vloc = LOC_SLOT;
    dc->tens[cur].vslot = dc->y_slot;
    if (full || dc->x_slot < 0 || dc->y_slot < 0) {
        pg_error(d, m->loc, "decode of chunk %d has too many buffers for the code generator", dc->chunk);
        return -1;
    }
    for (int k = 0; k < dc->ntens; k++) {
        em_tensor *T = &dc->tens[k];
        if (T->vloc != LOC_FRAME)
            continue;
        shape_rows(&T->shape, sh, sizeof sh);
        T->voff = frame_alloc(dc, R * T->numel * 4, T->what, sh);
    }
    for (int i = dc->first; i <= dc->last; i++) {
        const gen_layer_kind *K = gen_layer_kind_of(m->layers[i].kind);
        if (K->dec_saved)
            K->dec_saved(g, dc, i, R);
        else if (K->saved)
            K->saved(m, dc, i, R);
    }
    if (dc->fb_oom || unique_fb_names(dc) || name_params(m, dc)) {
        pg_error(d, m->loc, "out of memory laying out the decode of chunk %d", dc->chunk);
        return -1;
    }
    return 0;
}

/* Which frame buffers a decode call uses at which layer step: its code, emitted once into sink. */
static void record_dec_uses(pg_gen *g, em_stage *S, em_chunk *dc, FILE *sink)
{
    em_out e;
    memset(&e, 0, sizeof e);
    e.o = sink, e.g = g, e.S = S, e.ch = dc, e.rec = dc->fb, e.pass = PASS_F;
    for (int i = dc->first; i <= dc->last; i++) {
        e.step = i - dc->first;
        emit_layer_dec(&e, i);
    }
}

/* A buffer alive through the whole generation [lo, hi]: its memory-plan index, -1 out of memory. */
static int whole_buffer(em_stage *S, const char *name, pg_mp_cat cat, int64_t bytes, int lo, int hi, const char *note)
{
    int b = pg_mp_add(&S->mp, name, cat, bytes, lo, hi);
    if (b >= 0)
        sfmt(S->mp.buf[b].note, sizeof S->mp.buf[0].note, "%s", note);
    return b;
}

int dec_layout_stage(pg_gen *g, em_stage *S, pg_diag *d)
{
    const ir_model *m = g->m;
    if (!g->dec_on)
        return 0;
    int nd = g->dsched.stage[S->stage].n + 1;
    S->dch = calloc((size_t)S->nchunks + 1, sizeof *S->dch);
    S->dact_off = malloc((size_t)nd * sizeof(int64_t));
    S->dact_bytes = malloc((size_t)nd * sizeof(int64_t));
    S->dact_tag = malloc((size_t)nd * sizeof(uint32_t));
    if (!S->dch || !S->dact_off || !S->dact_bytes || !S->dact_tag) {
        pg_error(d, m->loc, "out of memory laying out the decode");
        return -1;
    }
    for (int i = 0; i < S->nchunks; i++) {
        em_chunk *dc = &S->dch[i];
        const em_chunk *ch = &S->ch[i];
        dc->chunk = ch->chunk, dc->stage = ch->stage, dc->first = ch->first, dc->last = ch->last;
        dc->is_first = ch->is_first, dc->is_last = ch->is_last;
        if (dec_layout_chunk(g, S, dc, d))
            return -1;
    }
    /* the decode timeline, after the step's: D0, then each chunk's call */
    int D0 = S->nticks, end = D0 + 1;
    for (int i = 0; i < S->nchunks; i++)
        end += S->dch[i].last - S->dch[i].first + 1;
    S->dec_nticks = end;
    FILE *sink = fopen("/dev/null", "w");
    if (!sink)
        sink = tmpfile();
    if (!sink) {
        pg_error(d, m->loc, "cannot open a scratch stream to plan the decode buffers");
        return -1;
    }
    char name[128];
    int rc = 0, base = D0 + 1;
    for (int i = 0; i < S->nchunks && !rc; i++) {
        em_chunk *dc = &S->dch[i];
        record_dec_uses(g, S, dc, sink);
        dc->fb_mp = malloc((size_t)(dc->nfb + 1) * sizeof(int));
        if (!dc->fb_mp) {
            rc = -1;
            break;
        }
        for (int f = 0; f < dc->nfb && !rc; f++) {
            const em_fbuf *F = &dc->fb[f];
            dc->fb_mp[f] = -1;
            if (F->lo[PASS_F] < 0)
                continue; /* not used in a call */
            sfmt(name, sizeof name, "dec c%d %s", dc->chunk, F->what);
            if (F->whole)
                dc->fb_mp[f] = whole_buffer(S, name, MP_KVCACHE, F->bytes, D0, end, F->shape);
            else
                dc->fb_mp[f] = whole_buffer(S, name, MP_DECODE, F->bytes, base + F->lo[PASS_F], base + F->hi[PASS_F],
                                            F->shape);
            rc = dc->fb_mp[f] < 0 ? -1 : 0;
        }
        for (int b = 0; b < dc->nsb && !rc; b++) {
            em_slotbuf *B = &dc->sb[b];
            if (B->alias_chunk >= 0)
                continue;
            sfmt(name, sizeof name, "dec c%d.%s", dc->chunk, B->local);
            char note[200];
            sfmt(note, sizeof note, "%d x %" PRId64 " bytes: %s", B->count, B->stride, B->note);
            B->mp = whole_buffer(S, name, MP_DECODE, B->stride * B->count, D0, end, note);
            rc = B->mp < 0 ? -1 : 0;
        }
        base += dc->last - dc->first + 1;
    }
    fclose(sink);
    if (!rc) {
        char note[160];
        sfmt(note, sizeof note, "int32 [%" PRId64 "][4]: per sequence of a decode call its cache row, first position, "
             "real new positions, flags", g->dec_rows);
        S->dec_rows_mp = whole_buffer(S, "dec rows", MP_DECODE, g->dec_rows * 16, D0, end, note);
        rc = S->dec_rows_mp < 0 ? -1 : 0;
    }
    if (rc)
        pg_error(d, m->loc, "out of memory planning the decode buffers of stage %d", S->stage);
    return rc;
}

/* ---- the decode schedule's messages ------------------------------------------ */

static const em_chunk *dec_chunk(const em_stage *S, int c)
{
    for (int i = 0; i < S->nchunks; i++)
        if (S->dch[i].chunk == c)
            return &S->dch[i];
    return NULL;
}

int dec_plan_messages(pg_gen *g, em_stage *S, pg_diag *d)
{
    const ir_model *m = g->m;
    if (!g->dec_on)
        return 0;
    const pg_stage_sched *ss = &g->dsched.stage[S->stage];
    int64_t *bytes = calloc((size_t)g->nstages, sizeof *bytes); /* one round's bytes to each peer, at most */
    if (!bytes) {
        pg_error(d, m->loc, "out of memory");
        return -1;
    }
    for (int a = 0; a < ss->n; a++) {
        const pg_act *A = &ss->act[a];
        S->dact_off[a] = -1, S->dact_bytes[a] = 0, S->dact_tag[a] = 0;
        if (A->kind == PG_FWD)
            continue;
        int skip = A->kind == PG_SEND_SKIP || A->kind == PG_RECV_SKIP;
        int own = A->chunk, sb = -1, x;
        const em_chunk *dc = dec_chunk(S, own);
        int64_t numel = 0;
        if (skip) {
            numel = pg_shape_numel(&m->skips[A->skip].shape) / m->input.dim[0];
            x = A->skip;
            if (dc)
                sb = A->kind == PG_SEND_SKIP ? dc->skout[A->skip] : dc->skin[A->skip];
        } else {
            x = A->kind == PG_SEND_ACT ? own : own - 1;
            if (dc)
                sb = A->kind == PG_SEND_ACT ? dc->y_slot : dc->x_slot;
            if (dc && sb >= 0)
                numel = A->kind == PG_SEND_ACT ? dc->tens[dc->lout[dc->last - dc->first]].numel : dc->tens[0].numel;
        }
        if (!dc || sb < 0 || dc->sb[sb].alias_chunk >= 0 || dc->sb[sb].count != g->dec_nmb) {
            char buf[160];
            free(bytes);
            pg_error(d, m->loc, "decode schedule: stage %d action %d %s does not match the decode layout", S->stage, a,
                     pg_act_str(A, buf, sizeof buf));
            return -1;
        }
        S->dact_off[a] = slot_off(&S->mp, dc, sb, A->mb);
        S->dact_bytes[a] = numel * 4;
        S->dact_tag[a] = PG_TAG(skip ? PG_SEND_SKIP : PG_SEND_ACT, A->mb, x);
        if ((A->kind == PG_SEND_ACT || A->kind == PG_SEND_SKIP) && A->peer >= 0 && A->peer < g->nstages)
            bytes[A->peer] += 16 + g->dec_rows * 16 + g->dec_rows * g->dec_prefill * numel * 4; /* the row table first */
    }
    /* the sampled tokens go back to the stage holding chunk 0, a round's at most */
    int first = chunk_stage(g, 0);
    for (int i = 0; i < S->nchunks; i++)
        if (S->ch[i].is_last && S->stage != first)
            bytes[first] += (int64_t)g->dec_nmb * g->dec_rows * 4;
    for (int k = 0; k < g->nstages; k++)
        if (bytes[k] > S->send_bytes[k]) /* the step's traffic is over when generation starts */
            S->send_bytes[k] = bytes[k];
    free(bytes);
    return 0;
}

void dec_free_stage(em_stage *S)
{
    for (int i = 0; S->dch && i < S->nchunks; i++)
        chunk_free(&S->dch[i]);
    free(S->dch);
    free(S->dact_off);
    free(S->dact_bytes);
    free(S->dact_tag);
}

/* codegen/gen/gen_layout.c — a chunk's layout on its stage (tensors, activation
 * slots, frame buffers) and the frame buffers' lifetimes in the memory plan.
 *
 * Layout of one chunk on its stage, for the largest micro-batch (rmax rows):
 *  - slot buffers, one per activation slot (micro-batch in flight): the chunk
 *    input x (received), its output y (sent), the gradient dy of y (received),
 *    the gradient dx of x (sent), and the skip tensors and skip gradients that
 *    cross to/from other chunks;
 *  - frame buffers: every interior tensor and its gradient plus saved
 *    statistics and attention's scratch. Each micro-batch has its own instance
 *    of each, one memory-plan buffer alive from its first to its last use in
 *    the stage's action order (the uses are recorded by emitting the chunk's
 *    code once, layer step by layer step: plan_frames), so the planner shares
 *    bytes between tensors that are never alive at once. A checkpointed
 *    micro-batch has two instances: one for its step's forward (each tensor
 *    alive from the layer that writes it to the last that reads it there) and
 *    one from the recompute in its BWD_B to its BWD_W; the generated code finds
 *    them in a static frame_c<k> table of offsets, a row per micro-batch and
 *    pass.
 * A stage may hold several chunks (interleaved(v): chunk c on stage c mod p;
 * V placement: chunks s and 2p-1-s on stage s; the schedule's chunk_stage).
 * What passes between two chunks of one stage is no message: chunk c copies
 * its input from chunk c-1's y at c-1's slot of the micro-batch (in the step's
 * FWD only; its own x must outlive c-1's slot, freed at c-1's BWD_W), writes
 * its dx straight into chunk c-1's dy, and a pop reads a stash of an earlier
 * chunk of the stage in place and writes the skip gradient into that chunk's
 * buffer. Those buffers are the earlier chunk's, held from its FWD to its
 * BWD_W, which the verifier orders after this chunk's BWD_B; the generated
 * code finds that chunk's slot of the micro-batch in a static mb_slot_c<k>
 * table.
 * What a layer kind adds (slot buffers of a skip, saved frame buffers) is its
 * entry's `slots` and `saved` (gen_layer.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen_layer.h"

int add_slotbuf(em_chunk *ch, const char *local, const char *note, pg_mp_cat cat, int64_t stride)
{
    if (ch->nsb >= 64)
        return -1;
    em_slotbuf *b = &ch->sb[ch->nsb];
    sfmt(b->local, sizeof b->local, "%s", local);
    sfmt(b->note, sizeof b->note, "%s", note);
    b->cat = cat;
    b->stride = al_plan(stride);
    b->mp = -1;
    b->alias_chunk = b->alias_sb = -1;
    b->count = 0;
    return ch->nsb++;
}

/* A slot buffer of ch that is buffer sb of chunk `to` (laid out before it, on
 * the same stage) at to's slot of the micro-batch: a skip or a gradient that
 * stays on the stage is written or read in place. */
int add_alias(em_chunk *ch, const char *local, const char *note, em_chunk *to, int sb)
{
    int b = add_slotbuf(ch, local, note, to->sb[sb].cat, 0);
    if (b < 0)
        return -1;
    ch->sb[b].stride = to->sb[sb].stride;
    ch->sb[b].alias_chunk = to->chunk;
    ch->sb[b].alias_sb = sb;
    to->slot_table = 1;
    return b;
}

static const em_fbuf *name_sort_fb; /* qsort has no context argument */

static int by_fb_name(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    int r = strcmp(name_sort_fb[a].name, name_sort_fb[b].name);
    return r ? r : a - b;
}

/* Two frame buffers whose descriptions differ only in punctuation (h.0 and
 * h_0) would get one name: the later ones get their id appended. */
int unique_fb_names(em_chunk *ch)
{
    int *ix = malloc((size_t)(ch->nfb + 1) * sizeof *ix);
    if (!ix)
        return -1;
    for (int f = 0; f < ch->nfb; f++)
        ix[f] = f;
    name_sort_fb = ch->fb;
    qsort(ix, (size_t)ch->nfb, sizeof *ix, by_fb_name);
    name_sort_fb = NULL;
    for (int k = 1; k < ch->nfb; k++)
        if (!strcmp(ch->fb[ix[k]].name, ch->fb[ix[k - 1]].name)) {
            char nm[80];
            sfmt(nm, sizeof nm, "%.60s_%d", ch->fb[ix[k]].name, ix[k]);
            sfmt(ch->fb[ix[k]].name, sizeof ch->fb[0].name, "%s", nm);
        }
    free(ix);
    return 0;
}

/* A new frame buffer of the chunk; its id, or -1 out of memory (fb_oom set). */
int64_t frame_alloc(em_chunk *ch, int64_t bytes, const char *what, const char *shape)
{
    if (ch->nfb == ch->fbcap) { /* doubling: thousands of layers stay linear */
        int cap = ch->fbcap ? 2 * ch->fbcap : 16;
        em_fbuf *nb = realloc(ch->fb, (size_t)cap * sizeof *nb);
        if (!nb) {
            ch->fb_oom = 1;
            return -1;
        }
        ch->fb = nb;
        ch->fbcap = cap;
    }
    em_fbuf *f = &ch->fb[ch->nfb];
    memset(f, 0, sizeof *f);
    f->bytes = bytes;
    sfmt(f->what, sizeof f->what, "%s", what);
    sfmt(f->shape, sizeof f->shape, "%s", shape);
    c_local(what, f->name, sizeof f->name);
    for (int k = 0; k < PASS__COUNT; k++)
        f->lo[k] = f->hi[k] = -1;
    return ch->nfb++;
}

/* The names a chunk's functions have, as a hash set (open addressing): a
 * model of thousands of layers names its parameters in linear time. */
typedef struct name_set {
    const char **v;
    size_t cap; /* a power of two, at least twice the names */
} name_set;

static size_t name_hash(const char *s)
{
    size_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static int name_in(const name_set *t, const char *id)
{
    for (size_t i = name_hash(id) & (t->cap - 1); t->v[i]; i = (i + 1) & (t->cap - 1))
        if (!strcmp(t->v[i], id))
            return 1;
    return 0;
}

static void name_add(name_set *t, const char *id)
{
    size_t i = name_hash(id) & (t->cap - 1);
    while (t->v[i] && strcmp(t->v[i], id))
        i = (i + 1) & (t->cap - 1);
    t->v[i] = id;
}

/* id is a name the chunk's functions have already: their own, a file-scope
 * table's or function's, or one in t (buffers, the input, named parameters) */
static int name_taken(const name_set *t, const char *id)
{
    static const char *const file_scope[] = {"frame_c", "mb_slot_c", "fwd_", "bwd_", "INPUT_ROWS", "TARGET_ROWS"};
    if (c_own_name(id) || name_in(t, id))
        return 1;
    for (size_t k = 0; k < sizeof file_scope / sizeof file_scope[0]; k++)
        if (!strncmp(id, file_scope[k], strlen(file_scope[k])))
            return 1;
    return 0;
}

/* The locals of the parameters the chunk's layers use: the name as a C
 * identifier (h.0.ln_1.w -> h_0_ln_1_w) and d_ before it for the gradient
 * accumulators; p<index>_ before both where that name is taken. */
int name_params(const ir_model *m, em_chunk *ch)
{
    char in[72];
    size_t n = (size_t)ch->nfb + (size_t)ch->nsb + 1;
    for (int i = ch->first; i <= ch->last; i++)
        n += 2 * (size_t)(m->layers[i].nparam + m->layers[i].nbuffer);
    name_set t = {NULL, 16};
    while (t.cap < 2 * n)
        t.cap *= 2;
    t.v = calloc(t.cap, sizeof *t.v);
    ch->pl = calloc((size_t)m->nparams + 1, sizeof *ch->pl);
    if (!t.v || !ch->pl) {
        free(t.v);
        return -1;
    }
    input_local(m, in, sizeof in);
    name_add(&t, in);
    for (int f = 0; f < ch->nfb; f++)
        name_add(&t, ch->fb[f].name);
    for (int b = 0; b < ch->nsb; b++)
        name_add(&t, ch->sb[b].local);
    for (int i = ch->first; i <= ch->last; i++) {
        const ir_layer *L = &m->layers[i];
        for (int k = 0; k < L->nparam + L->nbuffer; k++) {
            int p = k < L->nparam ? L->param[k] : L->buffer[k - L->nparam];
            if (p < 0 || p >= m->nparams || ch->pl[p][0][0])
                continue; /* none, or named already */
            char id[80], v[80], dv[84];
            c_local(m->params[p].name, id, sizeof id);
            sfmt(v, sizeof v, "%s", id);
            for (int r = 0;; r++) {
                sfmt(dv, sizeof dv, "d_%s", v);
                if (!name_taken(&t, v) && !name_taken(&t, dv))
                    break;
                if (r)
                    sfmt(v, sizeof v, "p%d_%d_%s", p, r, id);
                else
                    sfmt(v, sizeof v, "p%d_%s", p, id);
            }
            sfmt(ch->pl[p][0], sizeof ch->pl[p][0], "%s", v);
            sfmt(ch->pl[p][1], sizeof ch->pl[p][1], "%s", dv);
            name_add(&t, ch->pl[p][0]);
            name_add(&t, ch->pl[p][1]);
        }
    }
    free(t.v);
    return 0;
}

int new_tensor(em_chunk *ch, const pg_shape *sh, int dtype, const char *what)
{
    em_tensor *t = &ch->tens[ch->ntens];
    memset(t, 0, sizeof *t);
    t->shape = *sh;
    t->dtype = dtype;
    t->numel = pg_shape_numel(sh);
    t->vloc = LOC_FRAME;
    t->gloc = -1;
    t->vslot = t->gslot = -1;
    sfmt(t->what, sizeof t->what, "%s", what);
    return ch->ntens++;
}


int chunk_tables(em_chunk *ch, int nsk)
{
    int nl = ch->last - ch->first + 1;
    ch->tens = calloc((size_t)nl + 2, sizeof *ch->tens);
    ch->lin = calloc((size_t)nl, sizeof(int));
    ch->lout = calloc((size_t)nl, sizeof(int));
    ch->aux = calloc((size_t)nl, sizeof *ch->aux);
    ch->skin = malloc((size_t)(nsk + 1) * sizeof(int));
    ch->skgout = malloc((size_t)(nsk + 1) * sizeof(int));
    ch->skout = malloc((size_t)(nsk + 1) * sizeof(int));
    ch->skgin = malloc((size_t)(nsk + 1) * sizeof(int));
    ch->sktensor = malloc((size_t)(nsk + 1) * sizeof(int));
    ch->skgframe = malloc((size_t)(nsk + 1) * sizeof(int64_t));
    if (!ch->tens || !ch->lin || !ch->lout || !ch->aux || !ch->skin || !ch->skgout || !ch->skout || !ch->skgin ||
        !ch->sktensor || !ch->skgframe)
        return -1;
    for (int k = 0; k < nsk; k++)
        ch->skin[k] = ch->skgout[k] = ch->skout[k] = ch->skgin[k] = ch->sktensor[k] = -1, ch->skgframe[k] = -1;
    ch->x_slot = ch->y_slot = ch->dy_slot = ch->dx_slot = -1;
    return 0;
}

void chunk_free(em_chunk *ch)
{
    free(ch->tens); free(ch->lin); free(ch->lout); free(ch->aux);
    free(ch->skin); free(ch->skgout); free(ch->skout); free(ch->skgin);
    free(ch->sktensor); free(ch->skgframe); free(ch->fb); free(ch->fb_mp); free(ch->pl);
}

int layout_chunk(pg_gen *g, em_stage *S, em_chunk *ch, pg_diag *d)
{
    const ir_model *m = g->m;
    char note[200], sh[96];
    if (chunk_tables(ch, m->nskips)) {
        pg_error(d, m->loc, "out of memory laying out chunk %d", ch->chunk);
        return -1;
    }
    int64_t R = g->rmax;
    const ir_layer *L0 = &m->layers[ch->first];
    const ir_layer *LN = &m->layers[ch->last];
    char mac[64];

    /* the chunk input */
    int t0 = new_tensor(ch, &L0->in, L0->in_dtype == DT_I32 ? 2 : 0, ch->is_first ? "model input" : "chunk input");
    em_chunk *prev = NULL; /* chunk-1 when it is on this stage */
    if (!ch->is_first && chunk_stage(g, ch->chunk - 1) == ch->stage) {
        prev = find_chunk(S, ch->chunk - 1);
        if (!prev || prev->y_slot < 0 || prev->dy_slot < 0) {
            pg_error(d, L0->loc, "chunk %d: the chunk before it is not laid out", ch->chunk);
            return -1;
        }
    }
    if (ch->is_first) {
        ch->tens[t0].vloc = LOC_INPUT;
    } else {
        shape_rows(&L0->in, sh, sizeof sh);
        sfmt(mac, sizeof mac, "c%d_x", ch->chunk);
        if (prev) {
            /* a copy, not an alias: this chunk's BWD_W may come after chunk-1 frees its slot */
            sfmt(note, sizeof note, "chunk %d input x: %s, copied from chunk %d's output on this stage", ch->chunk, sh,
                 prev->chunk);
            ch->x_local = 1;
            prev->slot_table = 1;
        } else {
            sfmt(note, sizeof note, "chunk %d input x: %s, received", ch->chunk, sh);
        }
        ch->x_slot = add_slotbuf(ch, mac, note, prev ? MP_ACTIVATIONS : MP_RECV, pg_bytes_of(R, ch->tens[t0].numel, 4));
        ch->tens[t0].vloc = LOC_SLOT;
        ch->tens[t0].vslot = ch->x_slot;
        ch->tens[t0].need_grad = 1;
    }
    /* walk the layers: one new tensor per computing layer */
    int cur = t0;
    for (int i = ch->first; i <= ch->last; i++) {
        const ir_layer *L = &m->layers[i];
        int li = i - ch->first;
        ch->lin[li] = cur;
        const gen_layer_kind *K = gen_layer_kind_of(L->kind);
        if (!K) {
            pg_error(d, L->loc, "layer '%s' (%s) is not supported by the code generator yet", L->name,
                     layer_kind_name(L->kind));
            return -1;
        }
        if (K->slots && K->slots(g, S, ch, i, cur, d))
            return -1;
        if (K->passes_through) {
            ch->lout[li] = cur;
            continue;
        }
        char what[128];
        sfmt(what, sizeof what, "%s out", L->name);
        int t = new_tensor(ch, &L->out, 0, what);
        ch->tens[t].need_grad = 1;
        ch->lout[li] = t;
        cur = t;
    }
    if (cur == t0) {
        pg_error(d, L0->loc, "chunk %d has no computing layer (only stash/pop); the code generator needs one", ch->chunk);
        return -1;
    }
    /* The model input needs no gradient; everything else does. */
    /* chunk output lives in the slot */
    shape_rows(&LN->out, sh, sizeof sh);
    sfmt(mac, sizeof mac, "c%d_y", ch->chunk);
    sfmt(note, sizeof note, "chunk %d output y: %s%s", ch->chunk, sh, ch->is_last ? ", the model output" : ", sent");
    ch->y_slot = add_slotbuf(ch, mac, note, MP_ACTIVATIONS, pg_bytes_of(R, ch->tens[cur].numel, 4));
    ch->tens[cur].vloc = LOC_SLOT;
    ch->tens[cur].vslot = ch->y_slot;
    sfmt(mac, sizeof mac, "c%d_dy", ch->chunk);
    int next_here = !ch->is_last && chunk_stage(g, ch->chunk + 1) == ch->stage;
    if (next_here)
        sfmt(note, sizeof note, "gradient dy of the chunk output: %s, written by chunk %d on this stage", sh,
             ch->chunk + 1);
    else
        sfmt(note, sizeof note, "gradient dy of the chunk output: %s%s", sh,
             ch->is_last ? ", from the loss" : ", received");
    ch->dy_slot = add_slotbuf(ch, mac, note, ch->is_last || next_here ? MP_ACTIVATIONS : MP_RECV,
                              pg_bytes_of(R, ch->tens[cur].numel, 4));
    ch->tens[cur].gloc = LOC_SLOT;
    ch->tens[cur].gslot = ch->dy_slot;
    if (!ch->is_first) {
        shape_rows(&L0->in, sh, sizeof sh);
        sfmt(mac, sizeof mac, "c%d_dx", ch->chunk);
        if (prev) {
            /* chunk-1's dy of this micro-batch: its slot is held until its BWD_W, after this BWD_B */
            sfmt(note, sizeof note, "gradient dx of the chunk input: %s, written into chunk %d's dy on this stage", sh,
                 prev->chunk);
            ch->dx_slot = add_alias(ch, mac, note, prev, prev->dy_slot);
        } else {
            sfmt(note, sizeof note, "gradient dx of the chunk input: %s, sent", sh);
            ch->dx_slot = add_slotbuf(ch, mac, note, MP_ACTIVATIONS, pg_bytes_of(R, ch->tens[t0].numel, 4));
        }
        ch->tens[t0].gloc = LOC_SLOT;
        ch->tens[t0].gslot = ch->dx_slot;
    }
    /* frame: interior values and gradients */
    for (int t = 0; t < ch->ntens; t++) {
        em_tensor *T = &ch->tens[t];
        shape_rows(&T->shape, sh, sizeof sh);
        if (T->vloc == LOC_FRAME)
            T->voff = frame_alloc(ch, pg_bytes_of(R, T->numel, 4), T->what, sh);
        if (T->gloc < 0 && T->dtype == 0) {
            /* the model input has no gradient; a scratch buffer keeps ops that always write dx simple */
            sfmt(note, sizeof note, "gradient of %s%s", T->what, T->vloc == LOC_INPUT ? " (scratch)" : "");
            T->gloc = LOC_FRAME;
            T->goff = frame_alloc(ch, pg_bytes_of(R, T->numel, 4), note, sh);
        }
    }
    /* per-layer saved buffers (and same-chunk skip gradients) */
    for (int i = ch->first; i <= ch->last; i++) {
        const gen_layer_kind *K = gen_layer_kind_of(m->layers[i].kind);
        if (K->saved)
            K->saved(m, ch, i, R);
    }
    if (ch->fb_oom || unique_fb_names(ch) || name_params(m, ch)) {
        pg_error(d, m->loc, "out of memory laying out chunk %d", ch->chunk);
        return -1;
    }
    return 0;
}


/* Which frame buffers each pass of the chunk uses, at which layer step: its
 * code is emitted once into sink with recording on, so the lifetimes are
 * those of the code that runs. */
static void record_frame_uses(pg_gen *g, em_stage *S, em_chunk *ch, FILE *sink)
{
    em_out e;
    memset(&e, 0, sizeof e);
    e.o = sink, e.g = g, e.S = S, e.ch = ch, e.rec = ch->fb;
    for (int i = ch->first; i <= ch->last; i++) {
        e.pass = PASS_F, e.step = i - ch->first;
        emit_layer_fwd(&e, i);
        e.pass = PASS_B;
        emit_layer_bwd_b(&e, i);
        e.pass = PASS_W;
        emit_layer_bwd_w(&e, i);
    }
}

/* Ticks of a pass's layer step s in a chunk of nl layers: the forward runs
 * its layers first to last; BWD_B recomputes (first to last) then runs them
 * last to first; BWD_W last to first. */
static int pass_tick(int base, int nl, int pass, int s)
{
    if (pass == PASS_F)
        return base + s;
    if (pass == PASS_B)
        return base + nl + (nl - 1 - s);
    return base + (nl - 1 - s);
}

/* Widen [lo, hi] by pass k of buffer f run by action a (-1: none). */
static void widen(int *lo, int *hi, const em_fbuf *f, int k, int a, const int *tick, int nl)
{
    if (a < 0 || f->lo[k] < 0)
        return;
    int base = tick[a];
    int t1 = pass_tick(base, nl, k, f->lo[k]), t2 = pass_tick(base, nl, k, f->hi[k]);
    if (t1 > t2) {
        int t = t1;
        t1 = t2;
        t2 = t;
    }
    if (*lo < 0 || t1 < *lo)
        *lo = t1;
    if (t2 > *hi)
        *hi = t2;
}

/* The stage's timeline (ticks: one per layer step of FWD, BWD_B and BWD_W, one
 * per other action) and one memory-plan buffer per frame buffer instance,
 * alive from its first use to its last (module comment). */
int plan_frames(pg_gen *g, em_stage *S, pg_diag *d)
{
    const ir_model *m = g->m;
    const pg_stage_sched *ss = &g->s->stage[S->stage];
    int nmb = g->s->nmb, t = 0;
    for (int a = 0; a < ss->n; a++) {
        const pg_act *A = &ss->act[a];
        const em_chunk *ch = (A->kind == PG_FWD || A->kind == PG_BWD_B || A->kind == PG_BWD_W) ? find_chunk(S, A->chunk) : NULL;
        int nl = ch ? ch->last - ch->first + 1 : 1;
        S->act_tick[a] = t;
        t += A->kind == PG_BWD_B && ch ? 2 * nl : nl;
    }
    S->nticks = t;
    /* the tie workspace holds one received gradient block within a
     * TIE_GRAD_RECV action (runtime/core/step.c, add_block) */
    if (S->ws_mp >= 0) {
        int lo = -1, hi = -1;
        for (int a = 0; a < ss->n; a++)
            if (ss->act[a].kind == PG_TIE_GRAD_RECV) {
                if (lo < 0)
                    lo = S->act_tick[a];
                hi = S->act_tick[a];
            }
        if (lo >= 0)
            S->mp.buf[S->ws_mp].first_use = lo, S->mp.buf[S->ws_mp].last_use = hi;
    }
    FILE *sink = fopen("/dev/null", "w");
    if (!sink)
        sink = tmpfile();
    if (!sink) {
        pg_error(d, m->loc, "cannot open a scratch stream to plan frame buffers: %s", strerror(errno));
        return -1;
    }
    int rc = 0;
    int *at = malloc((size_t)(3 * nmb + 1) * sizeof(int));
    for (int ci = 0; ci < S->nchunks && !rc; ci++) {
        em_chunk *ch = &S->ch[ci];
        int nl = ch->last - ch->first + 1;
        record_frame_uses(g, S, ch, sink);
        ch->fb_mp = malloc((size_t)(2 * nmb * ch->nfb + 1) * sizeof(int));
        if (!at || !ch->fb_mp) {
            pg_error(d, m->loc, "out of memory planning the frame buffers of chunk %d", ch->chunk);
            rc = -1;
            break;
        }
        for (int k = 0; k < 3 * nmb; k++)
            at[k] = -1;
        for (int a = 0; a < ss->n; a++) {
            const pg_act *A = &ss->act[a];
            if (A->chunk != ch->chunk || A->mb < 0 || A->mb >= nmb)
                continue;
            if (A->kind == PG_FWD) at[3 * A->mb] = a;
            if (A->kind == PG_BWD_B) at[3 * A->mb + 1] = a;
            if (A->kind == PG_BWD_W) at[3 * A->mb + 2] = a;
        }
        char name[96];
        for (int mb = 0; mb < nmb && !rc; mb++) {
            int aF = at[3 * mb], aB = at[3 * mb + 1], aW = at[3 * mb + 2], ck = g->recompute[mb];
            for (int f = 0; f < ch->nfb && !rc; f++) {
                const em_fbuf *F = &ch->fb[f];
                int lo0 = -1, hi0 = -1, lo1 = -1, hi1 = -1;
                int *r0 = &ch->fb_mp[2 * mb * ch->nfb + f], *r1 = &ch->fb_mp[(2 * mb + 1) * ch->nfb + f];
                *r0 = *r1 = -1;
                /* kept: one instance from its forward to its BWD_W; checkpointed: the
                 * step's forward alone, then the recompute in BWD_B to BWD_W */
                widen(ck ? &lo0 : &lo1, ck ? &hi0 : &hi1, F, PASS_F, aF, S->act_tick, nl);
                if (ck && aB >= 0 && F->lo[PASS_F] >= 0) {
                    int t1 = S->act_tick[aB] + F->lo[PASS_F], t2 = S->act_tick[aB] + F->hi[PASS_F];
                    if (lo1 < 0 || t1 < lo1) lo1 = t1;
                    if (t2 > hi1) hi1 = t2;
                }
                widen(&lo1, &hi1, F, PASS_B, aB, S->act_tick, nl);
                widen(&lo1, &hi1, F, PASS_W, aW, S->act_tick, nl);
                if (lo0 >= 0) {
                    sfmt(name, sizeof name, "c%d mb%d fwd %s", ch->chunk, mb, F->what);
                    *r0 = pg_mp_add(&S->mp, name, MP_RECOMPUTE, F->bytes, lo0, hi0);
                    if (*r0 < 0) rc = -1;
                    else sfmt(S->mp.buf[*r0].note, sizeof S->mp.buf[0].note, "%s, the step's forward of a checkpointed micro-batch", F->shape);
                }
                if (lo1 >= 0 && !rc) {
                    sfmt(name, sizeof name, "c%d mb%d %s", ch->chunk, mb, F->what);
                    *r1 = pg_mp_add(&S->mp, name, ck ? MP_RECOMPUTE : MP_ACTIVATIONS, F->bytes, lo1, hi1);
                    if (*r1 < 0) rc = -1;
                    else sfmt(S->mp.buf[*r1].note, sizeof S->mp.buf[0].note, "%s%s", F->shape,
                              ck ? ", recomputed in BWD_B" : "");
                    if (!ck)
                        *r0 = *r1;
                }
                if (rc)
                    pg_error(d, m->loc, "out of memory planning the frame buffers of chunk %d", ch->chunk);
            }
        }
    }
    free(at);
    fclose(sink);
    return rc;
}

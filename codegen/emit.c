/* codegen/emit.c — the C emitter: per-stage layout (tensors, activation slots,
 * frames, memory plan) and the generated files.
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
 * Each chunk function declares the tensors it uses as named, typed locals with
 * their shapes (float *const h0_ln1_out, const int32_t *const tokens), so a
 * debugger's `info locals` shows them (emit_fn; tests/debug_gdb.t). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "emit.h"
#include "gen_files.h"
#include "progress.h"

enum { LOC_INPUT, LOC_SLOT, LOC_FRAME };

typedef struct em_tensor {
    pg_shape shape;
    int dtype;
    int64_t numel;         /* per sample */
    int vloc, gloc;        /* LOC_*; gloc < 0: no gradient buffer */
    int vslot, gslot;      /* slot buffer index when LOC_SLOT */
    int64_t voff, goff;    /* frame offset per row... absolute frame offset for rmax rows */
    int need_grad;         /* the gradient is needed upstream */
    char what[128];
} em_tensor;

typedef struct em_slotbuf {
    char local[64];        /* its local in the generated functions: c0_x, c0_skip6_out */
    char note[160];
    pg_mp_cat cat;
    int64_t stride;        /* bytes per slot */
    int mp;                /* memplan index */
    /* >= 0: no buffer of its own; the slot buffer alias_sb of chunk
     * alias_chunk on the same stage, at that chunk's slot of the micro-batch */
    int alias_chunk, alias_sb;
} em_slotbuf;

typedef struct em_aux { /* frame-only buffers of one layer: frame buffer ids */
    int64_t off[5];
    int n;
} em_aux;

/* A frame buffer: one per interior tensor, gradient or saved statistic of a
 * chunk; each micro-batch has its own instance(s) in the memory plan. */
enum { PASS_F, PASS_B, PASS_W, PASS__COUNT };
typedef struct em_fbuf {
    int64_t bytes;          /* for rmax rows */
    char what[96];          /* "h.0.ln_1 out", "gradient of h.0.ln_1 out" */
    char shape[64];
    char name[80];          /* its local in the generated functions: h_0_ln_1_out, d_h_0_ln_1_out */
    int lo[PASS__COUNT], hi[PASS__COUNT]; /* layer steps of the chunk using it per pass, -1: none */
} em_fbuf;

typedef struct em_chunk {
    int chunk, stage, first, last, is_first, is_last;
    int ntens;
    em_tensor *tens;
    int *lin, *lout;       /* per layer of the chunk: current tensor before/after */
    em_aux *aux;
    int x_slot, y_slot, dy_slot, dx_slot; /* slot buffer indices, -1 none */
    int x_local;           /* chunk-1 is on this stage: FWD copies its output into x */
    int slot_table;        /* another chunk of the stage reads this chunk's slot of a micro-batch */
    int *skin, *skgout, *skout, *skgin;   /* per skip: slot buffer index, -1 none */
    int *sktensor;         /* per skip: stash tensor when stashed in this chunk */
    int64_t *skgframe;     /* per skip: frame buffer id of the skip gradient (same-chunk skips) */
    int nsb;
    em_slotbuf sb[64];
    int nslots;
    em_fbuf *fb;           /* frame buffers */
    int nfb, fbcap, fb_oom;
    int *fb_mp;            /* [(2 * mb + row) * nfb + f]: memplan index of the instance, -1 unused;
                            * row 0: the micro-batch's forward, 1: its backward (recompute, B, W) */
} em_chunk;

typedef struct em_stage {
    int stage;
    int nchunks;
    em_chunk *ch;          /* chunks held by this stage, in chunk order */
    pg_memplan mp;
    int *param_mp, *grad_mp, *opt_mp[2]; /* per model param: memplan index or -1 */
    int *bnsum_mp;         /* per layer: batchnorm running-stat sums (2C doubles), -1 */
    int *shadow_mp;        /* per model param: its bf16 shadow (precision = bf16 GEMM weights), -1 */
    int ws_mp;             /* tie workspace: the largest gradient block received, -1 */
    int input_mp, target_mp;
    int *act_slot;         /* per action: slot used (-1) */
    int *act_tick;         /* per action: its first tick on the memory plan's timeline (plan_frames) */
    int nticks;
    int64_t *act_off, *act_bytes;
    uint32_t *act_tag;
    int64_t *send_bytes;   /* [nstages] */
} em_stage;

struct pg_gen {
    const ir_model *m;
    const pg_schedule *s;
    int64_t rmax;
    int64_t *mb_rows, *mb_first;
    int *recompute;        /* per mb */
    em_stage *st;
    int nstages;
    int64_t guard;         /* --guard-bytes: free bytes around every arena buffer (0: packed) */
    const char *auto_json; /* schedule = auto's candidates for plan.json, or NULL */
    int *nacc;             /* [nparams * nstages]: layers of stage s using param p (count_uses) */
    int *acc_at;           /* [nlayers * 4]: layer i's k-th param: its accumulator index on its stage */
};

/* snprintf that truncates silently: names and notes are cosmetic and bounded */
static void sfmt(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void sfmt(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

typedef struct em_out {
    FILE *o;
    const pg_gen *g;
    const em_stage *S;
    const em_chunk *ch;
    em_fbuf *rec;          /* non-NULL: record each frame buffer's uses (plan_frames) */
    int pass, step;        /* PASS_*, and the chunk's layer step being emitted */
    char fx[8][48];        /* fa's expressions, used in turn (a few per statement) */
    int nfx;
} em_out;

static void c_local(const char *what, char *buf, size_t n);

/* Note a use of frame buffer id in the current pass and layer step. */
static void frame_use(em_out *e, int64_t id)
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
static const char *fa(em_out *e, int64_t id)
{
    char *b = e->fx[e->nfx++ % 8];
    frame_use(e, id);
    sfmt(b, sizeof e->fx[0], "%s", e->ch->fb[id].name);
    return b;
}

/* The local holding this micro-batch's rows of the model input: its name in
 * the .pipe (in_<name> where that is one of the functions' own names). */
static void input_local(const ir_model *m, char *buf, size_t n)
{
    static const char *const own[] = {"c", "A", "io", "r", "F", "first", "int", "float", "char", "double", "long",
                                      "short", "const", "return", "if", "else", "for", "while", "do", "static",
                                      "void", "unsigned", "signed", "struct", "union", "enum", "switch", "case",
                                      "default", "break", "continue", "goto", "sizeof", "auto", "register",
                                      "extern", "volatile", "typedef", "inline", "restrict"};
    char id[72];
    c_local(m->input_name, id, sizeof id);
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++)
        if (!strcmp(id, own[k]) || !strncmp(id, "pg_", 3) || !strncmp(id, "PG_", 3)) {
            sfmt(buf, n, "in_%s", id);
            return;
        }
    sfmt(buf, n, "%s", id);
}

/* Every buffer, slot, frame tensor and gradient accumulator starts on a
 * PG_MP_ALIGN (256) byte boundary: cuBLAS may pick its kernel by operand
 * alignment, so an op must see the same alignment whatever the stage count. */
static int64_t al_plan(int64_t x) { return (x + PG_MP_ALIGN - 1) / PG_MP_ALIGN * PG_MP_ALIGN; }

/* Floats from one gradient accumulator of parameter p to the next. */
static int64_t acc_numel(const ir_param *P) { return al_plan(pg_shape_numel(&P->shape) * 4) / 4; }

/* Bytes of n consecutive accumulators of P (the last one unpadded): one tie message. */
static int64_t acc_block_bytes(const ir_param *P, int n)
{
    return ((int64_t)(n - 1) * acc_numel(P) + pg_shape_numel(&P->shape)) * 4;
}

static const char *layer_kind_name(ir_layer_kind k)
{
    static const char *const n[LK__COUNT] = {"linear", "relu", "gelu", "layernorm", "batchnorm", "embed",
                                             "pos_embed", "attention", "logits", "dropout", "stash", "pop"};
    return (unsigned)k < LK__COUNT ? n[k] : "?";
}

static void shape_rows(const pg_shape *s, char *buf, size_t n)
{
    size_t o = (size_t)snprintf(buf, n, "[r");
    for (int i = 0; i < s->rank && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, ", %" PRId64, s->dim[i]);
    if (o < n)
        sfmt(buf + o, n - o, "]");
}

static int64_t last_dim(const pg_shape *s) { return s->rank ? s->dim[s->rank - 1] : 1; }

static int is_last_chunk(const pg_gen *g, int c) { return c == g->m->nchunks - 1; }

static int layer_uses(const ir_layer *L, int p)
{
    for (int k = 0; k < L->nparam && k < 4; k++)
        if (L->param[k] == p)
            return 1;
    return 0;
}

/* Gradient accumulators of param p on stage s: one per using layer, in layer
 * order, so the gradient (their sum in layer order) is made by the same float
 * operations whatever the stage count. Counted once for the model, in one
 * pass over the layers (g->nacc), with each use's own index (g->acc_at). */
static int count_uses(pg_gen *g)
{
    const ir_model *m = g->m;
    g->nacc = calloc((size_t)(m->nparams ? m->nparams : 1) * (size_t)m->nstages, sizeof *g->nacc);
    g->acc_at = calloc((size_t)(m->nlayers ? m->nlayers : 1) * 4, sizeof *g->acc_at);
    if (!g->nacc || !g->acc_at)
        return -1;
    for (int i = 0; i < m->nlayers; i++) {
        const ir_layer *L = &m->layers[i];
        for (int k = 0; k < L->nparam && k < 4; k++) {
            int p = L->param[k], seen = -1;
            for (int j = 0; j < k; j++) /* a layer counts once per parameter */
                if (L->param[j] == p)
                    seen = j;
            if (p < 0 || p >= m->nparams || L->stage < 0 || L->stage >= m->nstages)
                continue;
            g->acc_at[i * 4 + k] = seen >= 0 ? g->acc_at[i * 4 + seen] : g->nacc[p * m->nstages + L->stage]++;
        }
    }
    return 0;
}

static int stage_nacc(const pg_gen *g, int s, int p)
{
    return g->nacc[p * g->m->nstages + s];
}

static int nacc_of(const pg_gen *g, int s, int p)
{
    int n = stage_nacc(g, s, p);
    return n ? n : 1;
}

/* cross-stage tie: a tie mode and two or more using stages */
static int is_tied(const ir_param *P)
{
    return P->tie != TIE_NONE && P->stage_mask && (P->stage_mask & (P->stage_mask - 1));
}

/* the stage table needs nacc per stage: several uses somewhere, or tied */
static int needs_nacc_table(const pg_gen *g, int p)
{
    const ir_model *m = g->m;
    if (is_tied(&m->params[p]))
        return 1;
    for (int s = 0; s < m->nstages; s++)
        if (stage_nacc(g, s, p) > 1)
            return 1;
    return 0;
}

/* ---- layout ---------------------------------------------------------------- */

static int add_slotbuf(em_chunk *ch, const char *local, const char *note, pg_mp_cat cat, int64_t stride)
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
    return ch->nsb++;
}

/* A slot buffer of ch that is buffer sb of chunk `to` (laid out before it, on
 * the same stage) at to's slot of the micro-batch: a skip or a gradient that
 * stays on the stage is written or read in place. */
static int add_alias(em_chunk *ch, const char *local, const char *note, em_chunk *to, int sb)
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

/* A C identifier for a buffer described as `what`: "h.0.ln_1 out" ->
 * h_0_ln_1_out, "gradient of h.0.ln_1 out" -> d_h_0_ln_1_out. */
static void c_local(const char *what, char *buf, size_t n)
{
    size_t i = 0;
    if (!strncmp(what, "gradient of ", 12)) {
        what += 12;
        sfmt(buf, n, "d_");
        i = 2;
    } else if (what[0] >= '0' && what[0] <= '9') {
        sfmt(buf, n, "t_");
        i = 2;
    }
    for (; *what && i + 1 < n; what++) {
        char c = *what;
        buf[i++] = (char)(((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) ? c : '_');
    }
    buf[i] = 0;
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
static int unique_fb_names(em_chunk *ch)
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
static int64_t frame_alloc(em_chunk *ch, int64_t bytes, const char *what, const char *shape)
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

static int new_tensor(em_chunk *ch, const pg_shape *sh, int dtype, const char *what)
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

static em_chunk *find_chunk(em_stage *S, int chunk);
static int plan_frames(pg_gen *g, em_stage *S, pg_diag *d);

/* the stage holding chunk c: the schedule's placement (schedule.h) */
static int chunk_stage(const pg_gen *g, int c)
{
    return c >= 0 && c < g->s->nchunks && c < 64 ? g->s->chunk_stage[c] : c % g->nstages;
}

static int layout_chunk(pg_gen *g, em_stage *S, em_chunk *ch, pg_diag *d)
{
    const ir_model *m = g->m;
    int nl = ch->last - ch->first + 1, nsk = m->nskips;
    char note[200], sh[96];
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
        !ch->sktensor || !ch->skgframe) {
        pg_error(d, m->loc, "out of memory laying out chunk %d", ch->chunk);
        return -1;
    }
    for (int k = 0; k < nsk; k++)
        ch->skin[k] = ch->skgout[k] = ch->skout[k] = ch->skgin[k] = ch->sktensor[k] = -1, ch->skgframe[k] = -1;
    ch->x_slot = ch->y_slot = ch->dy_slot = ch->dx_slot = -1;
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
        ch->x_slot = add_slotbuf(ch, mac, note, prev ? MP_ACTIVATIONS : MP_RECV, R * ch->tens[t0].numel * 4);
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
        switch (L->kind) {
        case LK_LINEAR: case LK_RELU: case LK_GELU: case LK_LAYERNORM: case LK_BATCHNORM: case LK_EMBED:
        case LK_POS_EMBED: case LK_ATTENTION: case LK_LOGITS: case LK_DROPOUT: case LK_POP: break;
        case LK_STASH: {
            const ir_skip *sk = &m->skips[L->skip];
            if (m->layers[sk->pop_layer].chunk == ch->chunk) {
                ch->sktensor[L->skip] = cur;
            } else {
                int pc = m->layers[sk->pop_layer].chunk, here = m->layers[sk->pop_layer].stage == ch->stage;
                shape_rows(&sk->shape, sh, sizeof sh);
                sfmt(mac, sizeof mac, "c%d_skip%d_out", ch->chunk, L->skip);
                sfmt(note, sizeof note, "skip %s stashed: %s, %s chunk %d%s", sk->name, sh, here ? "read by" : "sent to",
                     pc, here ? " on this stage" : "");
                ch->skout[L->skip] = add_slotbuf(ch, mac, note, MP_SKIP, R * pg_shape_numel(&sk->shape) * 4);
                sfmt(mac, sizeof mac, "c%d_skip%d_grad_in", ch->chunk, L->skip);
                if (here)
                    sfmt(note, sizeof note, "gradient of skip %s: %s, written by chunk %d on this stage", sk->name, sh, pc);
                else
                    sfmt(note, sizeof note, "gradient of skip %s: %s, received", sk->name, sh);
                ch->skgin[L->skip] = add_slotbuf(ch, mac, note, here ? MP_ACTIVATIONS : MP_RECV,
                                                 R * pg_shape_numel(&sk->shape) * 4);
            }
            ch->lout[li] = cur;
            continue;
        }
        default:
            pg_error(d, L->loc, "layer '%s' (%s) is not supported by the code generator yet", L->name,
                     layer_kind_name(L->kind));
            return -1;
        }
        if (L->kind == LK_POP) {
            const ir_skip *sk = &m->skips[L->skip];
            int sc = m->layers[sk->stash_layer].chunk;
            if (sc != ch->chunk && m->layers[sk->stash_layer].stage == ch->stage) {
                /* stashed by an earlier chunk of this stage: read the stash in place (it lives
                 * until that chunk's BWD_W, after this chunk's BWD_B) and write its gradient
                 * straight into that chunk's buffer */
                em_chunk *sch = find_chunk(S, sc);
                if (!sch || sch->skout[L->skip] < 0 || sch->skgin[L->skip] < 0) {
                    pg_error(d, L->loc, "skip '%s': the stashing chunk %d is not laid out", sk->name, sc);
                    return -1;
                }
                shape_rows(&sk->shape, sh, sizeof sh);
                sfmt(mac, sizeof mac, "c%d_skip%d_in", ch->chunk, L->skip);
                sfmt(note, sizeof note, "skip %s: %s, chunk %d's stash on this stage, read in place", sk->name, sh, sc);
                ch->skin[L->skip] = add_alias(ch, mac, note, sch, sch->skout[L->skip]);
                sfmt(mac, sizeof mac, "c%d_skip%d_grad_out", ch->chunk, L->skip);
                sfmt(note, sizeof note, "gradient of skip %s: %s, written into chunk %d's buffer on this stage",
                     sk->name, sh, sc);
                ch->skgout[L->skip] = add_alias(ch, mac, note, sch, sch->skgin[L->skip]);
                if (ch->skin[L->skip] < 0 || ch->skgout[L->skip] < 0) {
                    pg_error(d, L->loc, "chunk %d has too many buffers for the code generator", ch->chunk);
                    return -1;
                }
            } else if (sc != ch->chunk) {
                shape_rows(&sk->shape, sh, sizeof sh);
                sfmt(mac, sizeof mac, "c%d_skip%d_in", ch->chunk, L->skip);
                sfmt(note, sizeof note, "skip %s: %s, received from chunk %d", sk->name, sh, sc);
                ch->skin[L->skip] = add_slotbuf(ch, mac, note, MP_RECV, R * pg_shape_numel(&sk->shape) * 4);
                sfmt(mac, sizeof mac, "c%d_skip%d_grad_out", ch->chunk, L->skip);
                sfmt(note, sizeof note, "gradient of skip %s: %s, sent back", sk->name, sh);
                ch->skgout[L->skip] = add_slotbuf(ch, mac, note, MP_SKIP, R * pg_shape_numel(&sk->shape) * 4);
            }
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
    ch->y_slot = add_slotbuf(ch, mac, note, MP_ACTIVATIONS, R * ch->tens[cur].numel * 4);
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
                              R * ch->tens[cur].numel * 4);
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
            ch->dx_slot = add_slotbuf(ch, mac, note, MP_ACTIVATIONS, R * ch->tens[t0].numel * 4);
        }
        ch->tens[t0].gloc = LOC_SLOT;
        ch->tens[t0].gslot = ch->dx_slot;
    }
    /* frame: interior values and gradients */
    for (int t = 0; t < ch->ntens; t++) {
        em_tensor *T = &ch->tens[t];
        shape_rows(&T->shape, sh, sizeof sh);
        if (T->vloc == LOC_FRAME)
            T->voff = frame_alloc(ch, R * T->numel * 4, T->what, sh);
        if (T->gloc < 0 && T->dtype == 0) {
            /* the model input has no gradient; a scratch buffer keeps ops that always write dx simple */
            sfmt(note, sizeof note, "gradient of %s%s", T->what, T->vloc == LOC_INPUT ? " (scratch)" : "");
            T->gloc = LOC_FRAME;
            T->goff = frame_alloc(ch, R * T->numel * 4, note, sh);
        }
    }
    /* per-layer saved buffers and same-chunk skip gradients */
    for (int i = ch->first; i <= ch->last; i++) {
        const ir_layer *L = &m->layers[i];
        int li = i - ch->first;
        const em_tensor *in = &ch->tens[ch->lin[li]];
        int64_t rowsn = R * (in->numel / last_dim(&in->shape)); /* n for rmax rows */
        em_aux *ax = &ch->aux[li];
        if (L->kind == LK_LAYERNORM) {
            sfmt(note, sizeof note, "%s mean", L->name);
            ax->off[0] = frame_alloc(ch, rowsn * 4, note, "[n]");
            sfmt(note, sizeof note, "%s rstd", L->name);
            ax->off[1] = frame_alloc(ch, rowsn * 4, note, "[n]");
            ax->n = 2;
        } else if (L->kind == LK_BATCHNORM) {
            sfmt(note, sizeof note, "%s mean of this micro-batch", L->name);
            ax->off[0] = frame_alloc(ch, last_dim(&in->shape) * 4, note, "[C]");
            sfmt(note, sizeof note, "%s rstd of this micro-batch", L->name);
            ax->off[1] = frame_alloc(ch, last_dim(&in->shape) * 4, note, "[C]");
            ax->n = 2;
        } else if (L->kind == LK_ATTENTION) {
            int64_t T = in->shape.rank >= 2 ? in->shape.dim[in->shape.rank - 2] : 1, dd = last_dim(&in->shape);
            const char *names[5] = {"qkv", "att", "ctx", "dctx", "dqkv"};
            const char *shapes[5] = {"[r, T, 3d]", "[r, h, T, T]", "[r, T, d]", "[r, T, d]", "[r, T, 3d]"};
            int64_t sz[5] = {R * T * 3 * dd, R * L->heads * T * T, R * T * dd, R * T * dd, R * T * 3 * dd};
            for (int k = 0; k < 5; k++) {
                sfmt(note, sizeof note, "%s %s", L->name, names[k]);
                ax->off[k] = frame_alloc(ch, sz[k] * 4, note, shapes[k]);
            }
            ax->n = 5;
        } else if (L->kind == LK_STASH && ch->sktensor[L->skip] >= 0) {
            const ir_skip *sk = &m->skips[L->skip];
            shape_rows(&sk->shape, sh, sizeof sh);
            sfmt(note, sizeof note, "gradient of skip %s", sk->name);
            ch->skgframe[L->skip] = frame_alloc(ch, R * pg_shape_numel(&sk->shape) * 4, note, sh);
        }
    }
    if (ch->fb_oom || unique_fb_names(ch)) {
        pg_error(d, m->loc, "out of memory laying out chunk %d", ch->chunk);
        return -1;
    }
    return 0;
}

/* Slots used per chunk. */
static int analyse_schedule(pg_gen *g, em_stage *S, pg_diag *d)
{
    const pg_stage_sched *ss = &g->s->stage[S->stage];
    for (int ci = 0; ci < S->nchunks; ci++) {
        em_chunk *ch = &S->ch[ci];
        int maxslot = -1;
        for (int a = 0; a < ss->n; a++) {
            const pg_act *A = &ss->act[a];
            if (A->chunk != ch->chunk || (A->kind != PG_FWD && A->kind != PG_BWD_B && A->kind != PG_BWD_W))
                continue;
            if (A->slot < 0) {
                pg_error(d, g->m->loc, "schedule: stage %d action %d has no activation slot", S->stage, a);
                return -1;
            }
            if (A->slot > maxslot)
                maxslot = A->slot;
        }
        ch->nslots = maxslot + 1;
    }
    return 0;
}

static em_chunk *find_chunk(em_stage *S, int chunk)
{
    for (int i = 0; i < S->nchunks; i++)
        if (S->ch[i].chunk == chunk)
            return &S->ch[i];
    return NULL;
}

static const em_chunk *find_chunk_c(const em_stage *S, int chunk)
{
    for (int i = 0; i < S->nchunks; i++)
        if (S->ch[i].chunk == chunk)
            return &S->ch[i];
    return NULL;
}

static int slot_of(const pg_stage_sched *ss, pg_act_kind k, int chunk, int mb)
{
    for (int a = 0; a < ss->n; a++)
        if (ss->act[a].kind == k && ss->act[a].chunk == chunk && ss->act[a].mb == mb)
            return ss->act[a].slot;
    return -1;
}

static int64_t slot_off(const pg_memplan *mp, const em_chunk *ch, int sb, int slot)
{
    return mp->buf[ch->sb[sb].mp].offset + (int64_t)slot * ch->sb[sb].stride;
}

/* A tie action of the stage: what it sends or receives (the runtime does the
 * arithmetic; see runtime/core/step.c), and the bytes it adds to each link.
 *  TIE_SEND/TIE_RECV: the value, owner -> user, into the user's copy;
 *  TIE_GRAD_SEND/RECV: the user's nacc gradient accumulators -> the owner's workspace;
 *  TIE_REDUCE (replicate): users send their accumulators to the owner, which sums
 *  everything in layer order and sends the gradient back to each user; then, when
 *  the tie check is on, each user sends a hash of its stepped copy (8 bytes). */
static int plan_tie_message(pg_gen *g, em_stage *S, int a, pg_diag *d)
{
    const ir_model *m = g->m;
    const pg_act *A = &g->s->stage[S->stage].act[a];
    int p = A->param, s = S->stage;
    if (p < 0 || p >= m->nparams || S->param_mp[p] < 0 || S->grad_mp[p] < 0 || A->peer < 0 || A->peer >= g->nstages) {
        char buf[160];
        pg_error(d, m->loc, "schedule: stage %d action %d %s names a parameter this stage does not train", s, a,
                 pg_act_str(A, buf, sizeof buf));
        return -1;
    }
    const ir_param *P = &m->params[p];
    int64_t vb = pg_shape_numel(&P->shape) * 4;
    int64_t poff = S->mp.buf[S->param_mp[p]].offset, goff = S->mp.buf[S->grad_mp[p]].offset;
    /* the runtime's tags: PG_TAG(sending kind, param, 0) */
    int sendk = A->kind == PG_TIE_RECV ? PG_TIE_SEND : A->kind == PG_TIE_GRAD_RECV ? PG_TIE_GRAD_SEND : A->kind;
    S->act_tag[a] = PG_TAG(sendk, p, 0);
    switch (A->kind) {
    case PG_TIE_SEND:
        S->act_off[a] = poff, S->act_bytes[a] = vb;
        S->send_bytes[A->peer] += vb;
        break;
    case PG_TIE_RECV:
        S->act_off[a] = poff, S->act_bytes[a] = vb;
        break;
    case PG_TIE_GRAD_SEND:
        S->act_off[a] = goff, S->act_bytes[a] = acc_block_bytes(P, nacc_of(g, s, p));
        S->send_bytes[A->peer] += S->act_bytes[a];
        break;
    case PG_TIE_GRAD_RECV:
        S->act_off[a] = S->ws_mp >= 0 ? S->mp.buf[S->ws_mp].offset : -1;
        S->act_bytes[a] = acc_block_bytes(P, nacc_of(g, A->peer, p));
        break;
    default: /* PG_TIE_REDUCE */
        S->act_off[a] = goff;
        S->act_bytes[a] = acc_block_bytes(P, nacc_of(g, s, p));
        if (s != A->peer) {
            S->send_bytes[A->peer] += S->act_bytes[a] + 8;
        } else {
            for (int u = 0; u < g->nstages && u < 64; u++)
                if (u != s && (P->stage_mask >> u & 1))
                    S->send_bytes[u] += vb;
        }
        break;
    }
    return 0;
}

/* SEND/RECV: arena offset, bytes and tag of every message of the stage. */
static int plan_messages(pg_gen *g, em_stage *S, pg_diag *d)
{
    const ir_model *m = g->m;
    const pg_stage_sched *ss = &g->s->stage[S->stage];
    for (int a = 0; a < ss->n; a++) {
        const pg_act *A = &ss->act[a];
        S->act_slot[a] = A->slot;
        S->act_off[a] = -1;
        S->act_bytes[a] = 0;
        S->act_tag[a] = 0;
        int mb = A->mb, c = A->chunk, sb = -1, slot = -1, sendk = -1, x = 0;
        int64_t numel = 0;
        em_chunk *ch = NULL;
        switch (A->kind) {
        case PG_SEND_ACT: case PG_RECV_ACT: case PG_SEND_GRAD: case PG_RECV_GRAD:
            ch = find_chunk(S, c);
            if (!ch)
                break;
            slot = slot_of(ss, PG_FWD, c, mb);
            if (A->kind == PG_SEND_ACT) sb = ch->y_slot, sendk = PG_SEND_ACT, x = c, numel = ch->tens[ch->lout[ch->last - ch->first]].numel;
            if (A->kind == PG_RECV_ACT) sb = ch->x_slot, sendk = PG_SEND_ACT, x = c - 1, numel = ch->tens[0].numel;
            if (A->kind == PG_SEND_GRAD) sb = ch->dx_slot, sendk = PG_SEND_GRAD, x = c, numel = ch->tens[0].numel;
            if (A->kind == PG_RECV_GRAD) sb = ch->dy_slot, sendk = PG_SEND_GRAD, x = c + 1, numel = ch->tens[ch->lout[ch->last - ch->first]].numel;
            break;
        case PG_SEND_SKIP: case PG_RECV_SKIP: case PG_SEND_SKIP_GRAD: case PG_RECV_SKIP_GRAD: {
            if (A->skip < 0 || A->skip >= m->nskips)
                break;
            const ir_skip *sk = &m->skips[A->skip];
            int sc = m->layers[sk->stash_layer].chunk, pc = m->layers[sk->pop_layer].chunk;
            int own = (A->kind == PG_SEND_SKIP || A->kind == PG_RECV_SKIP_GRAD) ? sc : pc;
            ch = find_chunk(S, own);
            if (!ch)
                break;
            slot = slot_of(ss, PG_FWD, own, mb);
            x = A->skip;
            numel = pg_shape_numel(&sk->shape);
            if (A->kind == PG_SEND_SKIP) sb = ch->skout[A->skip], sendk = PG_SEND_SKIP;
            if (A->kind == PG_RECV_SKIP) sb = ch->skin[A->skip], sendk = PG_SEND_SKIP;
            if (A->kind == PG_SEND_SKIP_GRAD) sb = ch->skgout[A->skip], sendk = PG_SEND_SKIP_GRAD;
            if (A->kind == PG_RECV_SKIP_GRAD) sb = ch->skgin[A->skip], sendk = PG_SEND_SKIP_GRAD;
            break;
        }
        case PG_TIE_REDUCE: case PG_TIE_SEND: case PG_TIE_RECV: case PG_TIE_GRAD_SEND: case PG_TIE_GRAD_RECV:
            if (plan_tie_message(g, S, a, d))
                return -1;
            continue;
        default:
            continue;
        }
        if (!ch || sb < 0 || slot < 0 || ch->sb[sb].alias_chunk >= 0) {
            char buf[160];
            pg_error(d, m->loc, "schedule: stage %d action %d %s does not match the chunk layout", S->stage, a,
                     pg_act_str(A, buf, sizeof buf));
            return -1;
        }
        S->act_slot[a] = slot;
        S->act_off[a] = slot_off(&S->mp, ch, sb, slot);
        S->act_bytes[a] = g->mb_rows[mb] * numel * 4;
        S->act_tag[a] = PG_TAG(sendk, mb, x);
        if (A->kind == PG_SEND_ACT || A->kind == PG_SEND_GRAD || A->kind == PG_SEND_SKIP || A->kind == PG_SEND_SKIP_GRAD) {
            if (A->peer >= 0 && A->peer < g->nstages)
                S->send_bytes[A->peer] += S->act_bytes[a];
        } else {
            /* a receive into a slot must not land while that slot still holds another micro-batch */
            for (int b = a + 1; b < ss->n; b++) {
                const pg_act *B = &ss->act[b];
                if (B->chunk == ch->chunk && B->slot == slot && B->mb == mb && B->kind == PG_FWD)
                    break;
                if (A->kind == PG_RECV_ACT || A->kind == PG_RECV_SKIP) {
                    if ((B->kind == PG_FWD || B->kind == PG_BWD_B || B->kind == PG_BWD_W) && B->chunk == ch->chunk &&
                        B->slot == slot && B->mb != mb) {
                        pg_error(d, m->loc, "schedule: stage %d receives micro-batch %d into slot %d while micro-batch %d still uses it",
                                 S->stage, mb, slot, B->mb);
                        return -1;
                    }
                } else {
                    break;
                }
            }
        }
    }
    return 0;
}

static void emit_layer_fwd(em_out *e, int i);
static void emit_layer_bwd_b(em_out *e, int i);
static void emit_layer_bwd_w(em_out *e, int i);

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
static int plan_frames(pg_gen *g, em_stage *S, pg_diag *d)
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
    /* the tie workspace holds one received gradient block within a TIE_REDUCE
     * or TIE_GRAD_RECV action (runtime/core/step.c, add_block) */
    if (S->ws_mp >= 0) {
        int lo = -1, hi = -1;
        for (int a = 0; a < ss->n; a++)
            if (ss->act[a].kind == PG_TIE_REDUCE || ss->act[a].kind == PG_TIE_GRAD_RECV) {
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

static int build_stage(pg_gen *g, em_stage *S, pg_diag *d)
{
    const ir_model *m = g->m;
    int np = m->nparams;
    char name[128], note[200], sh[96];
    S->param_mp = malloc((size_t)(np + 1) * sizeof(int));
    S->grad_mp = malloc((size_t)(np + 1) * sizeof(int));
    S->opt_mp[0] = malloc((size_t)(np + 1) * sizeof(int));
    S->opt_mp[1] = malloc((size_t)(np + 1) * sizeof(int));
    S->send_bytes = calloc((size_t)g->nstages, sizeof(int64_t));
    S->bnsum_mp = malloc((size_t)(m->nlayers + 1) * sizeof(int));
    S->shadow_mp = malloc((size_t)(np + 1) * sizeof(int));
    S->ws_mp = -1;
    const pg_stage_sched *ss = &g->s->stage[S->stage];
    int nact = ss->n + 1;
    S->act_slot = malloc((size_t)nact * sizeof(int));
    S->act_tick = malloc((size_t)nact * sizeof(int));
    S->act_off = malloc((size_t)nact * sizeof(int64_t));
    S->act_bytes = malloc((size_t)nact * sizeof(int64_t));
    S->act_tag = malloc((size_t)nact * sizeof(uint32_t));
    S->ch = calloc((size_t)m->nchunks, sizeof *S->ch);
    if (!S->param_mp || !S->grad_mp || !S->opt_mp[0] || !S->opt_mp[1] || !S->send_bytes || !S->act_slot || !S->act_tick ||
        !S->act_off || !S->act_bytes || !S->act_tag || !S->ch || !S->bnsum_mp || !S->shadow_mp) {
        pg_error(d, m->loc, "out of memory");
        return -1;
    }
    /* parameters, gradients, optimizer state */
    for (int p = 0; p < np; p++) {
        const ir_param *P = &m->params[p];
        S->param_mp[p] = S->grad_mp[p] = S->opt_mp[0][p] = S->opt_mp[1][p] = -1;
        if (!(P->stage_mask >> S->stage & 1))
            continue;
        if (P->dtype != DT_F32) {
            pg_error(d, P->loc, "parameter '%s': only f32 parameters are supported by the code generator yet", P->name);
            return -1;
        }
        int64_t bytes = pg_shape_numel(&P->shape) * 4;
        pg_shape_str(P->dtype, &P->shape, sh, sizeof sh);
        sfmt(name, sizeof name, "param %s", P->name);
        S->param_mp[p] = pg_mp_add(&S->mp, name, MP_PARAMS, bytes, PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
        sfmt(S->mp.buf[S->param_mp[p]].note, sizeof S->mp.buf[0].note, "%s", sh);
        if (P->is_buffer)
            continue;
        int nacc = nacc_of(g, S->stage, p);
        sfmt(name, sizeof name, "grad %s", P->name);
        S->grad_mp[p] = pg_mp_add(&S->mp, name, MP_GRADS, acc_block_bytes(P, nacc), PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
        if (nacc > 1)
            sfmt(S->mp.buf[S->grad_mp[p]].note, sizeof S->mp.buf[0].note,
                 "%d x %s, every %" PRId64 " bytes: one accumulator per using layer, summed in layer order", nacc, sh,
                 acc_numel(P) * 4);
        else
            sfmt(S->mp.buf[S->grad_mp[p]].note, sizeof S->mp.buf[0].note, "%s", sh);
        /* transmit: a user's copy is overwritten from the owner every step; only the owner steps */
        int nopt = m->train.optimizer == OPT_ADAMW ? 2 : (m->train.momentum > 0 ? 1 : 0);
        if (is_tied(P) && P->tie == TIE_TRANSMIT && P->owner_stage != S->stage)
            nopt = 0;
        static const char *const on[2][2] = {{"momentum", ""}, {"adam_m", "adam_v"}};
        for (int k = 0; k < nopt; k++) {
            sfmt(name, sizeof name, "%s %s", on[m->train.optimizer == OPT_ADAMW][k], P->name);
            S->opt_mp[k][p] = pg_mp_add(&S->mp, name, MP_OPTSTATE, bytes, PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
            sfmt(S->mp.buf[S->opt_mp[k][p]].note, sizeof S->mp.buf[0].note, "%s", sh);
        }
    }
    /* bf16 shadows of the weights this stage's GEMMs read (pg_ops.h, "bf16 shadow weights") */
    for (int p = 0; p < np; p++)
        S->shadow_mp[p] = -1;
    for (int i = 0; i < m->nlayers && m->train.precision == DT_BF16; i++) {
        const ir_layer *L = &m->layers[i];
        int w[2] = {-1, -1};
        if (L->stage != S->stage)
            continue;
        if (L->kind == LK_LINEAR || L->kind == LK_LOGITS)
            w[0] = L->param[0];
        else if (L->kind == LK_ATTENTION)
            w[0] = L->param[0], w[1] = L->param[2];
        for (int k = 0; k < 2; k++) {
            int p = w[k];
            if (p < 0 || p >= np || S->shadow_mp[p] >= 0 || S->param_mp[p] < 0)
                continue;
            sfmt(name, sizeof name, "shadow %s", m->params[p].name);
            S->shadow_mp[p] = pg_mp_add(&S->mp, name, MP_PARAMS, pg_shape_numel(&m->params[p].shape) * 2,
                                        PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
            pg_shape_str(DT_BF16, &m->params[p].shape, sh, sizeof sh);
            sfmt(S->mp.buf[S->shadow_mp[p]].note, sizeof S->mp.buf[0].note,
                 "%s: bf16 copy for the GEMMs, written with the weight", sh);
        }
    }
    /* tie workspace on an owner: the largest gradient block one user sends */
    int64_t ws = 0;
    for (int p = 0; p < np; p++) {
        const ir_param *P = &m->params[p];
        if (!is_tied(P) || P->owner_stage != S->stage || P->is_buffer)
            continue;
        for (int u = 0; u < g->nstages && u < 64; u++)
            if (u != S->stage && (P->stage_mask >> u & 1) && acc_block_bytes(P, nacc_of(g, u, p)) > ws)
                ws = acc_block_bytes(P, nacc_of(g, u, p));
    }
    if (ws) {
        S->ws_mp = pg_mp_add(&S->mp, "tie workspace", MP_WORKSPACE, ws, PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
        sfmt(S->mp.buf[S->ws_mp].note, sizeof S->mp.buf[0].note, "a tied parameter's gradient accumulators from one user");
    }
    /* batchnorm: sums and sums of squares over the step's micro-batches, for the running statistics */
    for (int i = 0; i < m->nlayers; i++) {
        const ir_layer *L = &m->layers[i];
        S->bnsum_mp[i] = -1;
        if (L->kind != LK_BATCHNORM || L->stage != S->stage)
            continue;
        int64_t C = last_dim(&L->in);
        sfmt(name, sizeof name, "bn sums %s", L->name);
        S->bnsum_mp[i] = pg_mp_add(&S->mp, name, MP_GRADS, 2 * C * 8, PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
        sfmt(S->mp.buf[S->bnsum_mp[i]].note, sizeof S->mp.buf[0].note,
             "double sum[%" PRId64 "], sumsq[%" PRId64 "] of the input over the step's micro-batches", C, C);
    }
    /* chunks of this stage */
    for (int c = 0; c < m->nchunks; c++) {
        int first = -1, last = -1;
        for (int i = 0; i < m->nlayers; i++)
            if (m->layers[i].chunk == c) {
                if (first < 0)
                    first = i;
                last = i;
            }
        if (first < 0) {
            pg_error(d, m->loc, "chunk %d has no layers", c);
            return -1;
        }
        if (m->layers[first].stage != S->stage)
            continue;
        em_chunk *ch = &S->ch[S->nchunks++];
        ch->chunk = c;
        ch->stage = S->stage;
        ch->first = first;
        ch->last = last;
        ch->is_first = c == 0;
        ch->is_last = is_last_chunk(g, c);
        if (layout_chunk(g, S, ch, d))
            return -1;
    }
    if (analyse_schedule(g, S, d))
        return -1;
    /* batch input / targets */
    S->input_mp = S->target_mp = -1;
    if (S->stage == m->layers[0].stage) {
        int64_t es = 4;
        S->input_mp = pg_mp_add(&S->mp, "input", MP_IO, m->train.batch * pg_shape_numel(&m->input) * es,
                                PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
        pg_shape_str(m->input_dtype, &m->input, sh, sizeof sh);
        sfmt(S->mp.buf[S->input_mp].note, sizeof note, "%s %s per sample, the whole batch", m->input_name, sh);
    }
    if (S->stage == m->layers[m->nlayers - 1].stage) {
        S->target_mp = pg_mp_add(&S->mp, "target", MP_IO, m->train.batch * pg_shape_numel(&m->target) * 4,
                                 PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
        pg_shape_str(m->target_dtype, &m->target, sh, sizeof sh);
        sfmt(S->mp.buf[S->target_mp].note, sizeof note, "%s %s per sample, the whole batch", m->target_name, sh);
    }
    /* activation slots; frame buffers with their lifetimes */
    for (int ci = 0; ci < S->nchunks; ci++) {
        em_chunk *ch = &S->ch[ci];
        for (int b = 0; b < ch->nsb; b++) {
            if (ch->sb[b].alias_chunk >= 0)
                continue; /* another chunk's buffer */
            sfmt(name, sizeof name, "c%d.%s", ch->chunk, ch->sb[b].local);
            for (char *q = name; *q; q++)
                if (*q >= 'A' && *q <= 'Z')
                    *q = (char)(*q - 'A' + 'a');
            ch->sb[b].mp = pg_mp_add(&S->mp, name, ch->sb[b].cat, ch->sb[b].stride * ch->nslots, PG_MP_WHOLE_STEP,
                                     PG_MP_WHOLE_STEP);
            sfmt(S->mp.buf[ch->sb[b].mp].note, sizeof S->mp.buf[0].note, "%d slots x %" PRId64 " bytes: %s",
                     ch->nslots, ch->sb[b].stride, ch->sb[b].note);
        }
    }
    if (plan_frames(g, S, d))
        return -1;
    S->mp.guard = g->guard;
    pg_mp_solve(&S->mp);
    char err[600];
    if (pg_mp_check(&S->mp, err, sizeof err)) {
        pg_error(d, m->loc, "internal error: the memory plan of stage %d is wrong: %s", S->stage, err);
        return -1;
    }
    if (plan_messages(g, S, d))
        return -1;
    /* the final gather of parameters to stage 0 */
    if (S->stage != 0)
        for (int p = 0; p < np; p++)
            if (m->params[p].owner_stage == S->stage && m->params[p].stage_mask)
                S->send_bytes[0] += pg_shape_numel(&m->params[p].shape) * 4;
    if (m->train.grad_clip > 0)
        for (int k = 0; k < g->nstages; k++)
            if (k != S->stage)
                S->send_bytes[k] += (int64_t)np * 8;
    return 0;
}

/* A tied parameter's gradient is summed by the runtime stage by stage: the
 * owner's uses in layer order, then each other stage's, in stage order
 * (runtime/core/step.c). That is the layer order whenever stages hold the model
 * in order; with interleaved chunks it can differ, and a sum of three or more
 * accumulators in another order is other bits than one stage's. Refused. */
static int check_tie_order(const ir_model *m, pg_diag *d)
{
    int *byl = malloc((size_t)(m->nlayers + 1) * sizeof(int));
    int *bys = malloc((size_t)(m->nlayers + 1) * sizeof(int));
    int rc = 0;
    if (!byl || !bys) {
        pg_error(d, m->loc, "out of memory");
        rc = -1;
    }
    for (int p = 0; p < m->nparams && !rc; p++) {
        const ir_param *P = &m->params[p];
        if (!is_tied(P) || P->is_buffer)
            continue;
        int n = 0, k = 0;
        for (int i = 0; i < m->nlayers; i++)
            if (layer_uses(&m->layers[i], p))
                byl[n++] = i;
        for (int st = 0; st < m->nstages; st++)
            for (int j = 0; j < n; j++)
                if (m->layers[byl[j]].stage == st)
                    bys[k++] = byl[j];
        /* the first two may trade places: a + b is b + a */
        int bad = n >= 2 && !((byl[0] == bys[0] && byl[1] == bys[1]) || (byl[0] == bys[1] && byl[1] == bys[0]));
        for (int j = 2; j < n && !bad; j++)
            bad = byl[j] != bys[j];
        if (!bad)
            continue;
        int at = 2;
        while (at < n && byl[at] == bys[at])
            at++;
        if (at >= n)
            at = 1;
        const ir_layer *L = &m->layers[byl[at]], *E = NULL;
        for (int j = 0; j < at && !E; j++)
            if (m->layers[byl[j]].stage > L->stage)
                E = &m->layers[byl[j]];
        pg_error(d, L->loc, "parameter '%s' is used here on stage %d after a use on stage %d: with its %d uses spread "
                 "over the stages out of layer order, the tied gradient would be summed in another order than on one "
                 "stage (not bitwise reproducible)", P->name, L->stage, E ? E->stage : m->layers[byl[0]].stage, n);
        if (E)
            pg_note(d, E->loc, "the use on stage %d is here", E->stage);
        if (P->tie_loc.line > 0)
            pg_note(d, P->tie_loc, "tied here; move the splits so that the stages hold its uses in layer order, or "
                    "use a schedule without interleaving");
        rc = -1;
    }
    free(byl);
    free(bys);
    return rc;
}

int pg_gen_prepare(const ir_model *m, const pg_schedule *s, int64_t guard_bytes, pg_gen **out, pg_diag *d)
{
    *out = NULL;
    pg_gen *g = calloc(1, sizeof *g);
    if (!g) {
        pg_error(d, m->loc, "out of memory");
        return -1;
    }
    g->m = m;
    g->s = s;
    g->nstages = m->nstages;
    g->guard = guard_bytes > 0 ? (guard_bytes + 63) / 64 * 64 : 0;
    int64_t B = m->train.batch, M = m->train.microbatches;
    if (M < 1 || B < M || s->nmb != M || s->nstages != m->nstages) {
        pg_error(d, m->loc, "batch %" PRId64 " in %" PRId64 " micro-batches: every micro-batch needs a row", B, M);
        pg_gen_free(g);
        return -1;
    }
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].chunk < 0 || m->layers[i].chunk >= s->nchunks ||
            chunk_stage(g, m->layers[i].chunk) != m->layers[i].stage) {
            pg_error(d, m->layers[i].loc, "layer '%s' is on stage %d, but the schedule runs its chunk %d on stage %d",
                     m->layers[i].name, m->layers[i].stage, m->layers[i].chunk, chunk_stage(g, m->layers[i].chunk));
            pg_gen_free(g);
            return -1;
        }
    if (check_tie_order(m, d)) {
        pg_gen_free(g);
        return -1;
    }
    if (count_uses(g)) {
        pg_error(d, m->loc, "out of memory");
        pg_gen_free(g);
        return -1;
    }
    g->mb_rows = malloc((size_t)M * sizeof(int64_t));
    g->mb_first = malloc((size_t)M * sizeof(int64_t));
    g->recompute = malloc((size_t)M * sizeof(int));
    g->st = calloc((size_t)m->nstages, sizeof *g->st);
    if (!g->mb_rows || !g->mb_first || !g->recompute || !g->st) {
        pg_error(d, m->loc, "out of memory");
        pg_gen_free(g);
        return -1;
    }
    int64_t row = 0;
    for (int64_t i = 0; i < M; i++) {
        g->mb_rows[i] = B / M + (i < B % M);
        g->mb_first[i] = row;
        row += g->mb_rows[i];
        g->recompute[i] = m->train.checkpoint == CKPT_ALWAYS || (m->train.checkpoint == CKPT_EXCEPT_LAST && i < M - 1);
    }
    g->rmax = g->mb_rows[0];
    /* Batch norm's running variance is unbiased (n - 1 in the denominator): a
     * per-micro-batch update needs at least 2 values per feature in the
     * smallest micro-batch, a deferred one in the whole batch. */
    for (int i = 0; i < m->nlayers; i++) {
        const ir_layer *L = &m->layers[i];
        if (L->kind != LK_BATCHNORM || L->in.rank < 1)
            continue;
        int64_t per = pg_shape_numel(&L->in) / L->in.dim[L->in.rank - 1];
        int64_t rows = L->deferred ? B : B / M;
        if (rows * per < 2) {
            pg_error(d, L->loc,
                     "batchnorm needs at least 2 values per feature %s, but %s has %" PRId64
                     " (batch %" PRId64 " in %" PRId64 " micro-batch%s)%s",
                     L->deferred ? "in the batch" : "in every micro-batch",
                     L->deferred ? "the batch" : "the smallest micro-batch", rows * per, B, M, M == 1 ? "" : "es",
                     L->deferred ? "" : "; use fewer micro-batches or batchnorm(deferred)");
            pg_gen_free(g);
            return -1;
        }
    }
    for (int k = 0; k < m->nstages; k++) {
        g->st[k].stage = k;
        if (build_stage(g, &g->st[k], d)) {
            pg_gen_free(g);
            return -1;
        }
        pg_progress("stage %d of %d laid out (buffers, memory plan)", k + 1, g->nstages);
    }
    *out = g;
    return 0;
}

int64_t pg_gen_arena_bytes(const pg_gen *g, int k)
{
    return k >= 0 && k < g->nstages ? g->st[k].mp.total : 0;
}

void pg_gen_set_auto_json(pg_gen *g, const char *json)
{
    g->auto_json = json;
}

void pg_gen_free(pg_gen *g)
{
    if (!g)
        return;
    for (int k = 0; g->st && k < g->nstages; k++) {
        em_stage *S = &g->st[k];
        for (int i = 0; S->ch && i < S->nchunks; i++) {
            em_chunk *ch = &S->ch[i];
            free(ch->tens); free(ch->lin); free(ch->lout); free(ch->aux);
            free(ch->skin); free(ch->skgout); free(ch->skout); free(ch->skgin);
            free(ch->sktensor); free(ch->skgframe); free(ch->fb); free(ch->fb_mp);
        }
        free(S->ch);
        pg_mp_free(&S->mp);
        free(S->param_mp); free(S->grad_mp); free(S->opt_mp[0]); free(S->opt_mp[1]); free(S->bnsum_mp); free(S->shadow_mp);
        free(S->act_slot); free(S->act_tick); free(S->act_off); free(S->act_bytes); free(S->act_tag); free(S->send_bytes);
    }
    free(g->st);
    free(g->nacc);
    free(g->acc_at);
    free(g->mb_rows);
    free(g->mb_first);
    free(g->recompute);
    free(g);
}

/* ---- pipegen plan ------------------------------------------------------------ */

static void print_bytes(FILE *o, const char *what, int64_t b)
{
    fprintf(o, "  %-20s %12.3f MiB  %14" PRId64 " bytes\n", what, (double)b / (1024.0 * 1024.0), b);
}

/* The tick at which the stage's live buffers take the most bytes; their bytes
 * per category then in cat[MP__COUNT]. -1 when nothing is timed. */
static int peak_tick(const em_stage *S, int64_t *cat)
{
    int n = S->nticks, best = -1;
    int64_t *diff = calloc((size_t)n + 2, sizeof *diff), run = 0, max = -1;
    for (int c = 0; c < MP__COUNT; c++)
        cat[c] = 0;
    if (!diff)
        return -1;
    for (int b = 0; b < S->mp.n; b++) {
        const pg_mp_buf *B = &S->mp.buf[b];
        if (B->first_use == PG_MP_WHOLE_STEP || B->first_use < 0 || B->last_use >= n)
            continue;
        diff[B->first_use] += al_plan(B->bytes);
        diff[B->last_use + 1] -= al_plan(B->bytes);
    }
    for (int t = 0; t < n; t++) {
        run += diff[t];
        if (run > max)
            max = run, best = t;
    }
    free(diff);
    for (int b = 0; b < S->mp.n; b++) {
        const pg_mp_buf *B = &S->mp.buf[b];
        if (B->first_use == PG_MP_WHOLE_STEP || (best >= 0 && B->first_use <= best && best <= B->last_use))
            cat[B->cat] += al_plan(B->bytes);
    }
    return best;
}

/* The action running at tick t. */
static int action_at(const em_stage *S, int n, int t)
{
    int a = 0;
    while (a + 1 < n && S->act_tick[a + 1] <= t)
        a++;
    return a;
}

void pg_gen_report(const pg_gen *g, FILE *o)
{
    const ir_model *m = g->m;
    static const char *const ck[] = {"always", "except_last", "never"};
    fprintf(o, "model %s: %d stages, %d chunks, batch %" PRId64 " in %" PRId64 " micro-batches (%" PRId64
               " rows max), checkpoint %s\n",
            m->name, m->nstages, m->nchunks, m->train.batch, m->train.microbatches, g->rmax, ck[m->train.checkpoint]);
    int64_t total = 0, unshared = 0;
    for (int k = 0; k < g->nstages; k++) {
        const em_stage *S = &g->st[k];
        fprintf(o, "stage %d (", k);
        for (int i = 0; i < S->nchunks; i++)
            fprintf(o, "%schunk %d: %d slots", i ? ", " : "", S->ch[i].chunk, S->ch[i].nslots);
        fprintf(o, ")\n");
        for (int c = 0; c < MP__COUNT; c++) {
            int64_t b = pg_mp_cat_bytes(&S->mp, (pg_mp_cat)c);
            if (b)
                print_bytes(o, pg_mp_cat_name((pg_mp_cat)c), b);
        }
        int64_t before = pg_mp_unshared_bytes(&S->mp);
        print_bytes(o, "before sharing", before);
        print_bytes(o, "arena", S->mp.total);
        int64_t cat[MP__COUNT];
        int t = peak_tick(S, cat);
        if (t >= 0) {
            const pg_stage_sched *ss = &g->s->stage[k];
            char buf[160];
            fprintf(o, "  at the peak (tick %d, %s):\n", t, pg_act_str(&ss->act[action_at(S, ss->n, t)], buf, sizeof buf));
            for (int c = 0; c < MP__COUNT; c++)
                if (cat[c]) {
                    char what[64];
                    sfmt(what, sizeof what, "  %s", pg_mp_cat_name((pg_mp_cat)c));
                    print_bytes(o, what, cat[c]);
                }
        }
        total += S->mp.total;
        unshared += before;
    }
    fprintf(o, "all stages\n");
    print_bytes(o, "before sharing", unshared);
    print_bytes(o, "arenas", total);
}

/* ---- plan.json ---------------------------------------------------------------- */

static void json_str(FILE *o, const char *s)
{
    fputc('"', o);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(o, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(o, "\\u%04x", ch);
        else
            fputc(ch, o);
    }
    fputc('"', o);
}

static void json_shape(FILE *o, const pg_shape *s)
{
    fputc('[', o);
    for (int i = 0; i < s->rank; i++)
        fprintf(o, "%s%" PRId64, i ? ", " : "", s->dim[i]);
    fputc(']', o);
}

static void json_num(FILE *o, double v) { fprintf(o, "%.17g", v); }

static const char *base_name(const char *p)
{
    const char *b = p ? strrchr(p, '/') : NULL;
    return b ? b + 1 : (p ? p : "");
}

static const char *const sched_names[] = {"gpipe", "1f1b", "interleaved", "zb1", "file", "zbv", "auto"};
static const char *const ckpt_names[] = {"always", "except_last", "never"};
static const char *const loss_names[] = {"mse_sum", "mse_mean", "cross_entropy"};
static const char *const init_names[] = {"zeros", "ones", "uniform", "normal"};
static const char *const tie_names[] = {"none", "replicate", "transmit"};

static void json_layer_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    fprintf(o, "\"attrs\": {");
    switch (L->kind) {
    case LK_LINEAR:
        fprintf(o, "\"in_features\": %" PRId64 ", \"out_features\": %" PRId64 ", \"bias\": %s", L->in_features,
                L->out_features, L->bias ? "true" : "false");
        break;
    case LK_LAYERNORM: case LK_BATCHNORM:
        fprintf(o, "\"eps\": ");
        json_num(o, L->eps);
        if (L->kind == LK_BATCHNORM) {
            fprintf(o, ", \"momentum\": ");
            json_num(o, L->momentum);
            fprintf(o, ", \"deferred\": %s", L->deferred ? "true" : "false");
        }
        break;
    case LK_ATTENTION:
        fprintf(o, "\"heads\": %" PRId64 ", \"causal\": %s", L->heads, L->causal ? "true" : "false");
        break;
    case LK_DROPOUT:
        fprintf(o, "\"p\": ");
        json_num(o, L->p);
        break;
    case LK_EMBED: case LK_LOGITS:
        fprintf(o, "\"vocab\": %" PRId64 ", \"dim\": %" PRId64, L->vocab, L->dim);
        break;
    case LK_POS_EMBED:
        fprintf(o, "\"seq\": %" PRId64 ", \"dim\": %" PRId64, L->seq, L->dim);
        break;
    case LK_STASH: case LK_POP:
        fprintf(o, "\"skip\": ");
        json_str(o, m->skips[L->skip].name);
        if (L->kind == LK_POP)
            fprintf(o, ", \"mode\": \"%s\"", m->skips[L->skip].mode == POP_ADD ? "add" : "concat");
        break;
    default:
        break;
    }
    fprintf(o, "}");
}

/* FNV-1a 64 (= the runtime's pg_hash64 from the FNV offset basis). */
static uint64_t fnv1a64(const char *text, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)text[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

char *pg_gen_plan_json(const pg_gen *g, uint64_t *hash)
{
    const ir_model *m = g->m;
    const ir_train *t = &m->train;
    char *text = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&text, &len);
    if (!o)
        return NULL;
    fprintf(o, "{\n  \"format\": \"pipegen-plan\",\n  \"version\": 1,\n  \"pipegen\": \"%s\",\n", PIPEGEN_VERSION);
    fprintf(o, "  \"model\": ");
    json_str(o, m->name);
    fprintf(o, ",\n  \"source\": ");
    json_str(o, base_name(m->source_path));
    fprintf(o, ",\n  \"input\": {\"name\": ");
    json_str(o, m->input_name);
    fprintf(o, ", \"dtype\": \"%s\", \"shape\": ", pg_dtype_name(m->input_dtype));
    json_shape(o, &m->input);
    fprintf(o, "},\n  \"target\": {\"name\": ");
    json_str(o, m->target_name);
    fprintf(o, ", \"dtype\": \"%s\", \"shape\": ", pg_dtype_name(m->target_dtype));
    json_shape(o, &m->target);
    fprintf(o, "},\n  \"train\": {\"batch\": %" PRId64 ", \"microbatches\": %" PRId64 ", \"schedule\": \"%s\", "
               "\"interleave\": %d, \"checkpoint\": \"%s\", \"loss\": \"%s\", \"optimizer\": \"%s\", \"lr\": ",
            t->batch, t->microbatches, sched_names[t->schedule], t->interleave, ckpt_names[t->checkpoint],
            loss_names[t->loss], t->optimizer == OPT_ADAMW ? "adamw" : "sgd");
    json_num(o, t->lr);
    fprintf(o, ", \"momentum\": ");
    json_num(o, t->momentum);
    fprintf(o, ", \"weight_decay\": ");
    json_num(o, t->weight_decay);
    fprintf(o, ", \"beta1\": ");
    json_num(o, t->beta1);
    fprintf(o, ", \"beta2\": ");
    json_num(o, t->beta2);
    fprintf(o, ", \"eps\": ");
    json_num(o, t->adam_eps);
    fprintf(o, ", \"lr_schedule\": \"%s\", \"warmup\": %" PRId64 ", \"lr_min\": ",
            t->lr_schedule == LR_COSINE ? "cosine" : "constant", t->warmup);
    json_num(o, t->lr_min);
    fprintf(o, ", \"steps\": %" PRId64 ", \"grad_clip\": ", t->steps);
    json_num(o, t->grad_clip);
    fprintf(o, ", \"seed\": %" PRIu64 ", \"precision\": \"%s\"},\n", t->seed, pg_dtype_name(t->precision));
    if (g->auto_json) /* only then: other plans stay as they were */
        fprintf(o, "  \"auto\": %s,\n", g->auto_json);
    fprintf(o, "  \"microbatch_rows\": [");
    for (int64_t i = 0; i < t->microbatches; i++)
        fprintf(o, "%s%" PRId64, i ? ", " : "", g->mb_rows[i]);
    fprintf(o, "],\n  \"layers\": [\n");
    for (int i = 0; i < m->nlayers; i++) {
        const ir_layer *L = &m->layers[i];
        fprintf(o, "    {\"name\": ");
        json_str(o, L->name);
        fprintf(o, ", \"kind\": \"%s\", \"chunk\": %d, \"stage\": %d, \"in_dtype\": \"%s\", \"in\": ",
                layer_kind_name(L->kind), L->chunk, L->stage, pg_dtype_name(L->in_dtype));
        json_shape(o, &L->in);
        fprintf(o, ", \"out\": ");
        json_shape(o, &L->out);
        fprintf(o, ", ");
        json_layer_attrs(o, m, L);
        fprintf(o, ", \"params\": [");
        for (int k = 0; k < L->nparam; k++) {
            fprintf(o, "%s", k ? ", " : "");
            if (L->param[k] >= 0)
                json_str(o, m->params[L->param[k]].name);
            else
                fprintf(o, "null");
        }
        fprintf(o, "], \"buffers\": [");
        for (int k = 0; k < L->nbuffer; k++) {
            fprintf(o, "%s", k ? ", " : "");
            json_str(o, m->params[L->buffer[k]].name);
        }
        fprintf(o, "]}%s\n", i + 1 < m->nlayers ? "," : "");
    }
    fprintf(o, "  ],\n  \"params\": [\n");
    for (int p = 0; p < m->nparams; p++) {
        const ir_param *P = &m->params[p];
        fprintf(o, "    {\"name\": ");
        json_str(o, P->name);
        fprintf(o, ", \"shape\": ");
        json_shape(o, &P->shape);
        fprintf(o, ", \"dtype\": \"%s\", \"init\": \"%s\", \"scale\": ", pg_dtype_name(P->dtype), init_names[P->init]);
        json_num(o, P->init_scale);
        fprintf(o, ", \"decay\": %s, \"buffer\": %s, \"stages\": [", P->decay ? "true" : "false",
                P->is_buffer ? "true" : "false");
        int first = 1;
        for (int k = 0; k < 64; k++)
            if (P->stage_mask >> k & 1) {
                fprintf(o, "%s%d", first ? "" : ", ", k);
                first = 0;
            }
        fprintf(o, "], \"owner\": %d, \"tie\": \"%s\"}%s\n", P->owner_stage, tie_names[P->tie],
                p + 1 < m->nparams ? "," : "");
    }
    fprintf(o, "  ],\n  \"skips\": [\n");
    for (int k = 0; k < m->nskips; k++) {
        const ir_skip *sk = &m->skips[k];
        fprintf(o, "    {\"name\": ");
        json_str(o, sk->name);
        fprintf(o, ", \"stash\": ");
        json_str(o, m->layers[sk->stash_layer].name);
        fprintf(o, ", \"pop\": ");
        json_str(o, m->layers[sk->pop_layer].name);
        fprintf(o, ", \"mode\": \"%s\", \"shape\": ", sk->mode == POP_ADD ? "add" : "concat");
        json_shape(o, &sk->shape);
        fprintf(o, "}%s\n", k + 1 < m->nskips ? "," : "");
    }
    fprintf(o, "  ],\n  \"partition\": {\"nchunks\": %d, \"nstages\": %d, \"placement\": \"%s\", \"chunks\": [",
            m->nchunks, m->nstages, pg_placement_name(g->s->placement));
    for (int c = 0; c < m->nchunks; c++) {
        int first = -1, last = -1;
        for (int i = 0; i < m->nlayers; i++)
            if (m->layers[i].chunk == c) {
                if (first < 0)
                    first = i;
                last = i;
            }
        fprintf(o, "%s{\"chunk\": %d, \"stage\": %d, \"first_layer\": %d, \"last_layer\": %d}", c ? ", " : "", c,
                first >= 0 ? m->layers[first].stage : -1, first, last);
    }
    fprintf(o, "]},\n  \"stages\": [\n");
    for (int k = 0; k < g->nstages; k++) {
        const em_stage *S = &g->st[k];
        const pg_stage_sched *ss = &g->s->stage[k];
        fprintf(o, "    {\"stage\": %d, \"arena_bytes\": %" PRId64 ",", k, S->mp.total);
        if (g->guard) /* only then: plans without guard gaps stay as they were */
            fprintf(o, " \"guard_bytes\": %" PRId64 ",", g->guard);
        fprintf(o, "\n      \"memory\": {");
        for (int c = 0; c < MP__COUNT; c++)
            fprintf(o, "%s\"%s\": %" PRId64, c ? ", " : "", pg_mp_cat_name((pg_mp_cat)c),
                    pg_mp_cat_bytes(&S->mp, (pg_mp_cat)c));
        fprintf(o, "},\n      \"buffers\": [\n");
        for (int b = 0; b < S->mp.n; b++) {
            fprintf(o, "        {\"name\": ");
            json_str(o, S->mp.buf[b].name);
            fprintf(o, ", \"category\": \"%s\", \"offset\": %" PRId64 ", \"bytes\": %" PRId64 "}%s\n",
                    pg_mp_cat_name(S->mp.buf[b].cat), S->mp.buf[b].offset, S->mp.buf[b].bytes,
                    b + 1 < S->mp.n ? "," : "");
        }
        fprintf(o, "      ],\n      \"schedule\": [\n");
        for (int a = 0; a < ss->n; a++) {
            const pg_act *A = &ss->act[a];
            fprintf(o, "        {\"action\": \"%s\", \"mb\": %d, \"chunk\": %d, \"slot\": %d, \"peer\": %d, \"skip\": %d, "
                       "\"param\": %d, \"bytes\": %" PRId64 "}%s\n",
                    pg_act_name(A->kind), A->mb, A->chunk, S->act_slot[a], A->peer, A->skip, A->param, S->act_bytes[a],
                    a + 1 < ss->n ? "," : "");
        }
        fprintf(o, "      ]}%s\n", k + 1 < g->nstages ? "," : "");
    }
    fprintf(o, "  ],\n");
    fflush(o);
    uint64_t h = fnv1a64(text, len); /* everything before the hash line */
    fprintf(o, "  \"hash\": \"%016" PRIx64 "\"\n}\n", h);
    if (fclose(o)) {
        free(text);
        return NULL;
    }
    *hash = h;
    return text;
}

/* ---- stage<k>.c ------------------------------------------------------------------ */

static void cident(const char *s, char *buf, size_t n)
{
    size_t i = 0;
    for (; *s && i + 1 < n; s++, i++) {
        char c = *s;
        if (c >= 'a' && c <= 'z')
            c = (char)(c - 'a' + 'A');
        else if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            c = '_';
        buf[i] = c;
    }
    buf[i] = 0;
}

static void pmacro(const ir_model *m, int p, int grad, char *buf, size_t n)
{
    char id[96];
    cident(m->params[p].name, id, sizeof id);
    sfmt(buf, n, "%s%d_%s", grad ? "GP" : "P", p, id);
}

/* value / gradient of tensor t as a C expression */
static void tval(em_out *e, int t, char *buf, size_t n)
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

static void tgrad(em_out *e, int t, char *buf, size_t n)
{
    const em_chunk *ch = e->ch;
    const em_tensor *T = &ch->tens[t];
    if (T->gloc == LOC_SLOT)
        sfmt(buf, n, "%s", ch->sb[T->gslot].local);
    else
        sfmt(buf, n, "%s", ch->fb[T->goff].name), frame_use(e, T->goff);
}

/* n for a layer input: rows * every dim but the last */
static void nexpr(const em_tensor *T, char *buf, size_t sz)
{
    int64_t per = T->numel / last_dim(&T->shape);
    if (per == 1)
        sfmt(buf, sz, "r");
    else
        sfmt(buf, sz, "r * %" PRId64, per);
}

static void cexpr(const em_tensor *T, char *buf, size_t sz) { sfmt(buf, sz, "r * %" PRId64, T->numel); }

static void emit_layer_fwd(em_out *e, int i)
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

static void emit_layer_bwd_b(em_out *e, int i)
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

static void emit_layer_bwd_w(em_out *e, int i)
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

/* ---- chunk functions: locals a debugger shows -------------------------------- */

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

static int has_ident_prefix(const em_idents *s, const char *prefix)
{
    size_t n = strlen(prefix);
    for (int i = 0; i < s->n; i++)
        if (!strncmp(s->v[i], prefix, n) && s->v[i][n] >= '0' && s->v[i][n] <= '9')
            return 1;
    return 0;
}

/* One chunk function: its body (in text) decides which locals it declares:
 * r, F (this micro-batch's row of frame_c<k>: frow), and each tensor it uses
 * with its type and shape; a parameter it does not use is cast to void. */
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
                 has_ident_prefix(&id, "P") || has_ident_prefix(&id, "GP");
    int uses_io = has_ident(&id, "io") || has_ident(&id, "INPUT_ROWS") || has_ident(&id, "TARGET_ROWS");
    if (has_ident(&id, "r"))
        fprintf(o, "    const int64_t r = io->rows;\n"), uses_io = 1;
    int any_frame = 0;
    for (int f = 0; f < ch->nfb && !any_frame; f++)
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
        if (B->alias_chunk >= 0) {
            const em_chunk *to = find_chunk_c(S, B->alias_chunk);
            fprintf(o, "    float *const %s = (float *)(A + %" PRId64 " + (int64_t)mb_slot_c%d[io->mb] * %" PRId64 "); /* %s */\n",
                    B->local, to ? S->mp.buf[to->sb[B->alias_sb].mp].offset : 0, B->alias_chunk, B->stride, B->note);
        } else {
            fprintf(o, "    float *const %s = (float *)(A + %" PRId64 " + (int64_t)io->slot * %" PRId64 "); /* %s */\n",
                    B->local, S->mp.buf[B->mp].offset, B->stride, B->note);
        }
        uses_A = uses_io = 1;
    }
    for (int f = 0; f < ch->nfb; f++)
        if (has_ident(&id, ch->fb[f].name))
            fprintf(o, "    float *const %s = (float *)(A + F[%d]); /* %s: %s */\n", ch->fb[f].name, f, ch->fb[f].what,
                    ch->fb[f].shape);
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

enum { FN_FWD_BODY, FN_FWD, FN_BWD_B, FN_BWD_W };

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
        if (t->loss == LOSS_CROSS_ENTROPY) {
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
    } else if (fn == FN_BWD_B) {
        fprintf(e->o, "    if (io->recompute) /* checkpointed: rebuild the interior from the stage input */\n"
                      "        PG_TRY(%s_c%d(c, A, io%s));\n", split_fwd ? "fwd_body" : "fwd", c, split_fwd ? ", 0" : "");
        for (int i = ch->last; i >= ch->first; i--)
            emit_layer_bwd_b(e, i);
    } else {
        long before = ftell(e->o);
        for (int i = ch->last; i >= ch->first; i--)
            emit_layer_bwd_w(e, i);
        if (ftell(e->o) == before)
            fprintf(e->o, "    /* no weights in this chunk */\n");
    }
}

/* One chunk function: its statements into a string first, then emit_fn. */
static int emit_chunk_fn(em_out *e, int fn, int split_fwd)
{
    static const char *const names[] = {"fwd_body", "fwd", "bwd_b", "bwd_w"};
    static const char *const rows[] = {"2 * io->mb + !first", "2 * io->mb", "2 * io->mb + 1", "2 * io->mb + 1"};
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

static int emit_chunk_fns(em_out *e)
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
    int has_bn = 0;
    for (int i = ch->first; i <= ch->last; i++)
        has_bn |= m->layers[i].kind == LK_BATCHNORM;
    int split_fwd = has_bn || ch->x_local || uses[PASS_F];
    if (emit_chunk_fn(e, FN_FWD_BODY, split_fwd) || (split_fwd && emit_chunk_fn(e, FN_FWD, split_fwd)) ||
        emit_chunk_fn(e, FN_BWD_B, split_fwd) || emit_chunk_fn(e, FN_BWD_W, split_fwd))
        return -1;
    return 0;
}

/* The contract's names (pg_contract.h) of the IR's numbered settings. */
static const char *init_name(ir_init k)
{
    static const char *const n[] = {[INIT_ZEROS] = "PG_INIT_ZEROS", [INIT_ONES] = "PG_INIT_ONES",
                                    [INIT_UNIFORM] = "PG_INIT_UNIFORM", [INIT_NORMAL] = "PG_INIT_NORMAL"};
    return n[k];
}
static const char *tie_name(ir_tie_mode k)
{
    static const char *const n[] = {[TIE_NONE] = "PG_TIE_NONE", [TIE_REPLICATE] = "PG_TIE_REPLICATE",
                                    [TIE_TRANSMIT] = "PG_TIE_TRANSMIT"};
    return n[k];
}
static const char *loss_name(ir_loss k)
{
    static const char *const n[] = {[LOSS_MSE_SUM] = "PG_LOSS_MSE_SUM", [LOSS_MSE_MEAN] = "PG_LOSS_MSE_MEAN",
                                    [LOSS_CROSS_ENTROPY] = "PG_LOSS_CROSS_ENTROPY"};
    return n[k];
}

/* One row of a parameter table, designated: the model table's (S NULL: no
 * offsets) or stage S's. */
static void emit_param_entry(FILE *o, const pg_gen *g, int p, const em_stage *S)
{
    const ir_model *m = g->m;
    const ir_param *P = &m->params[p];
    fprintf(o, "    {.name = ");
    json_str(o, P->name); /* a C string literal too: names have no control characters */
    fprintf(o, ", .index = %d, .rank = %d, .dim = {", p, P->shape.rank);
    for (int k = 0; k < P->shape.rank; k++)
        fprintf(o, "%s%" PRId64, k ? ", " : "", P->shape.dim[k]);
    fprintf(o, "}, .numel = %" PRId64 ", .init = %s, .init_scale = %.17g, .decay = %d,%s .tie = %s, .owner = %d, "
               ".stage_mask = UINT64_C(0x%" PRIx64 "),\n     ",
            pg_shape_numel(&P->shape), init_name(P->init), P->init_scale, P->decay, P->is_buffer ? " .is_buffer = 1," : "",
            tie_name(P->tie), P->owner_stage, P->stage_mask);
    if (S)
        fprintf(o, ".off = %" PRId64 ", .grad_off = %" PRId64 ", .opt_off = {%" PRId64 ", %" PRId64 "}, .nacc = %d",
                S->mp.buf[S->param_mp[p]].offset, S->grad_mp[p] >= 0 ? S->mp.buf[S->grad_mp[p]].offset : -1,
                S->opt_mp[0][p] >= 0 ? S->mp.buf[S->opt_mp[0][p]].offset : -1,
                S->opt_mp[1][p] >= 0 ? S->mp.buf[S->opt_mp[1][p]].offset : -1, P->is_buffer ? 0 : nacc_of(g, S->stage, p));
    else
        fprintf(o, ".off = -1, .grad_off = -1, .opt_off = {-1, -1}, .nacc = 0");
    if (needs_nacc_table(g, p))
        fprintf(o, ", .stage_nacc = pg_nacc_p%d", p);
    fprintf(o, ", .acc_numel = %" PRId64 "},\n", acc_numel(P));
}

/* The model's identity apart from its layout: FNV-1a 64 of its input, target,
 * layers (kind, shapes, attributes, parameters) and skips as plan.json lists
 * them, without chunks, stages, schedule or tie modes (none changes the
 * numbers). A checkpoint resumes onto any plan of the same identity
 * (runtime/core/checkpoint.c adds the parameters and training settings). */
static uint64_t model_arch_hash(const pg_gen *g)
{
    const ir_model *m = g->m;
    char *text = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&text, &len);
    if (!o)
        return 0;
    fprintf(o, "input %s ", pg_dtype_name(m->input_dtype));
    json_shape(o, &m->input);
    fprintf(o, "\ntarget %s ", pg_dtype_name(m->target_dtype));
    json_shape(o, &m->target);
    fprintf(o, "\n");
    for (int i = 0; i < m->nlayers; i++) {
        const ir_layer *L = &m->layers[i];
        json_str(o, L->name);
        fprintf(o, " %s %s ", layer_kind_name(L->kind), pg_dtype_name(L->in_dtype));
        json_shape(o, &L->in);
        json_shape(o, &L->out);
        json_layer_attrs(o, m, L);
        for (int k = 0; k < L->nparam; k++)
            json_str(o, L->param[k] >= 0 ? m->params[L->param[k]].name : "");
        fprintf(o, " |");
        for (int k = 0; k < L->nbuffer; k++)
            json_str(o, m->params[L->buffer[k]].name);
        fprintf(o, "\n");
    }
    for (int k = 0; k < m->nskips; k++) {
        const ir_skip *sk = &m->skips[k];
        fprintf(o, "skip ");
        json_str(o, sk->name);
        json_str(o, m->layers[sk->stash_layer].name);
        json_str(o, m->layers[sk->pop_layer].name);
        fprintf(o, " %s ", sk->mode == POP_ADD ? "add" : "concat");
        json_shape(o, &sk->shape);
        fprintf(o, "\n");
    }
    if (fclose(o)) {
        free(text);
        return 0;
    }
    uint64_t h = fnv1a64(text, len);
    free(text);
    return h;
}

static int emit_stage_c(const pg_gen *g, int k, uint64_t hash, FILE *o)
{
    const ir_model *m = g->m;
    const em_stage *S = &g->st[k];
    const pg_stage_sched *ss = &g->s->stage[k];
    const ir_train *t = &m->train;
    char sh[96], mac[128];

    fprintf(o, "/* stage%d.c — generated by pipegen %s from %s: model %s, stage %d of %d.\n"
               " * Generated — do not edit; run `pipegen gen` again instead. Plan hash %016" PRIx64 ".\n"
               " * Buffers, offsets and sizes are documented in %s.h; r is the micro-batch's rows. */\n",
            k, PIPEGEN_VERSION, base_name(m->source_path), m->name, k, m->nstages, hash, m->name);
    fprintf(o, "#include <stddef.h>\n#include <stdint.h>\n\n#include \"pg_ops.h\"\n#include \"pg_stage.h\"\n#include \"%s.h\"\n\n",
            m->name);
    fprintf(o, "/* parameters and their gradients */\n");
    for (int p = 0; p < m->nparams; p++) {
        if (S->param_mp[p] < 0)
            continue;
        pg_shape_str(m->params[p].dtype, &m->params[p].shape, sh, sizeof sh);
        pmacro(m, p, 0, mac, sizeof mac);
        fprintf(o, "#define %s ((float *)(A + %" PRId64 ")) /* %s: %s */\n", mac, S->mp.buf[S->param_mp[p]].offset,
                m->params[p].name, sh);
        if (S->grad_mp[p] >= 0) {
            pmacro(m, p, 1, mac, sizeof mac);
            fprintf(o, "#define %s ((float *)(A + %" PRId64 ")) /* gradient of %s: %s */\n", mac,
                    S->mp.buf[S->grad_mp[p]].offset, m->params[p].name, sh);
        }
    }
    if (S->input_mp >= 0) {
        pg_shape_str(m->input_dtype, &m->input, sh, sizeof sh);
        fprintf(o, "/* this micro-batch's rows of the batch input %s %s */\n", m->input_name, sh);
        fprintf(o, "#define INPUT_ROWS ((float *)(A + %" PRId64 " + io->first_row * %" PRId64 "))\n",
                S->mp.buf[S->input_mp].offset, pg_shape_numel(&m->input) * 4);
    }
    if (S->target_mp >= 0) {
        pg_shape_str(m->target_dtype, &m->target, sh, sizeof sh);
        fprintf(o, "/* this micro-batch's rows of the batch target %s %s */\n", m->target_name, sh);
        fprintf(o, "#define TARGET_ROWS (A + %" PRId64 " + io->first_row * %" PRId64 ")\n",
                S->mp.buf[S->target_mp].offset, pg_shape_numel(&m->target) * 4);
    }
    fprintf(o, "\n");
    for (int i = 0; i < S->nchunks; i++) {
        const em_chunk *ch = &S->ch[i];
        if (!ch->slot_table)
            continue;
        fprintf(o, "/* chunk %d's activation slot of each micro-batch: another chunk of this stage reads it */\n"
                   "static const int mb_slot_c%d[] = {", ch->chunk, ch->chunk);
        for (int mb = 0; mb < g->s->nmb; mb++)
            fprintf(o, "%s%d", mb ? ", " : "", slot_of(ss, PG_FWD, ch->chunk, mb));
        fprintf(o, "};\n\n");
    }
    for (int i = 0; i < S->nchunks; i++) {
        em_out e;
        memset(&e, 0, sizeof e);
        e.o = o, e.g = g, e.S = S, e.ch = &S->ch[i];
        if (emit_chunk_fns(&e))
            return -1;
    }
    /* tables */
    fprintf(o, "/* ---- tables ---- */\n\n");
    fprintf(o, "static const pg_param_desc stage_params[] = {\n");
    int nsp = 0;
    for (int p = 0; p < m->nparams; p++)
        if (S->param_mp[p] >= 0) {
            emit_param_entry(o, g, p, S);
            nsp++;
        }
    if (!nsp)
        fprintf(o, "    {.name = NULL, .index = -1, .off = -1, .grad_off = -1, .opt_off = {-1, -1}},\n");
    fprintf(o, "};\n\nstatic const pg_chunk_desc chunks[] = {\n");
    for (int i = 0; i < S->nchunks; i++)
        fprintf(o, "    {.chunk = %d, .fwd = fwd_c%d, .bwd_b = bwd_b_c%d, .bwd_w = bwd_w_c%d},\n", S->ch[i].chunk,
                S->ch[i].chunk, S->ch[i].chunk, S->ch[i].chunk);
    fprintf(o, "};\n\n/* the step */\n");
    fprintf(o, "static const pg_step_action step[] = {\n");
    for (int a = 0; a < ss->n; a++) {
        const pg_act *A = &ss->act[a];
        char buf[160];
        fprintf(o, "    {.kind = PG_%s, .mb = %d, .chunk = %d, .slot = %d, .peer = %d, .skip = %d, .param = %d, "
                   ".tag = 0x%08" PRIx32 "u, .off = %" PRId64 ", .bytes = %" PRId64 "}, /* %d: %s */\n",
                pg_step_kind_name(A->kind), A->mb, A->chunk, S->act_slot[a], A->peer, A->skip, A->param, S->act_tag[a],
                S->act_off[a], S->act_bytes[a], a, pg_act_str(A, buf, sizeof buf));
    }
    if (!ss->n)
        fprintf(o, "    {.kind = PG_OPT_STEP, .mb = -1, .chunk = -1, .slot = -1, .peer = -1, .skip = -1, .param = -1, "
                   ".tag = 0, .off = -1, .bytes = 0},\n");
    fprintf(o, "};\n\nstatic const int64_t mb_rows[] = {");
    for (int i = 0; i < g->s->nmb; i++)
        fprintf(o, "%s%" PRId64, i ? ", " : "", g->mb_rows[i]);
    fprintf(o, "};\nstatic const int64_t mb_first_row[] = {");
    for (int i = 0; i < g->s->nmb; i++)
        fprintf(o, "%s%" PRId64, i ? ", " : "", g->mb_first[i]);
    fprintf(o, "};\nstatic const int mb_recompute[] = {");
    for (int i = 0; i < g->s->nmb; i++)
        fprintf(o, "%s%d", i ? ", " : "", g->recompute[i]);
    fprintf(o, "};\nstatic const int64_t send_bytes[] = {");
    for (int i = 0; i < g->nstages; i++)
        fprintf(o, "%s%" PRId64, i ? ", " : "", S->send_bytes[i]);
    fprintf(o, "};\n\n");
    /* this stage's layers for --profile (runtime/core/trace.c): a chunk's
     * measured time is split among them by the estimated flops */
    int nstage_layers = 0;
    fprintf(o, "/* this stage's layers: {name, chunk, estimated flops per sample of F, B, W} (--profile) */\n"
               "static const pg_layer_info stage_layers[] = {\n");
    for (int i = 0; i < S->nchunks; i++)
        for (int l = S->ch[i].first; l <= S->ch[i].last; l++) {
            pg_layer_cost fl = pg_layer_flops(&m->layers[l]);
            fprintf(o, "    {");
            json_str(o, m->layers[l].name ? m->layers[l].name : "?");
            fprintf(o, ", %d, %.17g, %.17g, %.17g},\n", S->ch[i].chunk, fl.fwd, fl.bwd_b, fl.bwd_w);
            nstage_layers++;
        }
    if (!nstage_layers)
        fprintf(o, "    {NULL, -1, 0, 0, 0},\n");
    fprintf(o, "};\n\n");

    int nshadow = 0; /* bf16 shadows {stage param index, offset}: only then, so f32 stage files stay as they were */
    for (int p = 0, sp = 0; p < m->nparams; p++) {
        if (S->param_mp[p] < 0)
            continue;
        if (S->shadow_mp[p] >= 0) {
            if (!nshadow++)
                fprintf(o, "/* bf16 shadows of the GEMM weights {stage parameter, offset} (pg_shadow_register) */\n"
                           "static const pg_shadow_desc stage_shadows[] = {\n");
            fprintf(o, "    {%d, %" PRId64 "}, /* %s */\n", sp, S->mp.buf[S->shadow_mp[p]].offset, m->params[p].name);
        }
        sp++;
    }
    if (nshadow)
        fprintf(o, "};\n\n");

    if (g->guard) { /* only then: stage files without guard gaps stay as they were */
        fprintf(o, "/* the arena's buffers {offset, bytes}: every other byte is a guard gap (--guard-bytes %" PRId64
                   "),\n * poisoned by a runtime built with AddressSanitizer (pg_arena_guard) */\n"
                   "static const pg_arena_buf arena_bufs[] = {\n", g->guard);
        for (int b = 0; b < S->mp.n; b++)
            fprintf(o, "    {%" PRId64 ", %" PRId64 "}, /* %s */\n", S->mp.buf[b].offset, S->mp.buf[b].bytes,
                    S->mp.buf[b].name);
        if (!S->mp.n)
            fprintf(o, "    {0, 0},\n");
        fprintf(o, "};\n\n");
    }

    int64_t in_vocab = 0, tg_vocab = 0;
    for (int i = 0; i < m->nlayers; i++) {
        if (m->layers[i].kind == LK_EMBED && in_vocab == 0)
            in_vocab = m->layers[i].vocab;
    }
    if (m->target_dtype == DT_I32)
        tg_vocab = last_dim(&m->layers[m->nlayers - 1].out);
    fprintf(o, "const pg_stage_desc pg_stage = {\n");
    fprintf(o, "    .contract = PG_CONTRACT_TAG(%d),\n", PG_CONTRACT_VERSION);
    fprintf(o, "    .pipegen_version = \"%s\",\n    .model = ", PIPEGEN_VERSION);
    json_str(o, m->name);
    fprintf(o, ",\n    .source = ");
    json_str(o, base_name(m->source_path));
    fprintf(o, ",\n    .stage = %d, .nstages = %d, .nchunks = %d, .nmb = %d,\n", k, m->nstages, m->nchunks, g->s->nmb);
    fprintf(o, "    .plan_hash = UINT64_C(0x%016" PRIx64 "),\n", hash);
    fprintf(o, "    .arena_bytes = STAGE%d_ARENA_BYTES,\n", k);
    fprintf(o, "    .train = {.batch = %" PRId64 ", .microbatches = %" PRId64 ", .steps = %" PRId64 ", .optimizer = %s,\n",
            t->batch, t->microbatches, t->steps, t->optimizer == OPT_ADAMW ? "PG_OPTIM_ADAMW" : "PG_OPTIM_SGD");
    fprintf(o, "              .lr = %.17g, .momentum = %.17g, .weight_decay = %.17g,\n", t->lr, t->momentum,
            t->weight_decay);
    fprintf(o, "              .beta1 = %.17g, .beta2 = %.17g, .adam_eps = %.17g,\n", t->beta1, t->beta2, t->adam_eps);
    fprintf(o, "              .lr_schedule = %s, .warmup = %" PRId64 ", .lr_min = %.17g, .grad_clip = %.17g,\n",
            t->lr_schedule == LR_COSINE ? "PG_LR_COSINE" : "PG_LR_CONSTANT", t->warmup, t->lr_min, t->grad_clip);
    fprintf(o, "              .seed = UINT64_C(%" PRIu64 "), .loss = %s},\n", t->seed, loss_name(t->loss));
    fprintf(o, "    .nparams = %d, .params = stage_params,\n", nsp);
    fprintf(o, "    .nmodel_params = %d, .model_params = pg_model_params,\n", m->nparams);
    fprintf(o, "    .nchunk_fns = %d, .chunks = chunks,\n", S->nchunks);
    fprintf(o, "    .nactions = %d, .actions = step,\n", ss->n);
    fprintf(o, "    .mb_rows = mb_rows, .mb_first_row = mb_first_row, .mb_recompute = mb_recompute,\n");
    fprintf(o, "    .has_input = %d, .input_off = %" PRId64 ", .input_dtype = %s, .input_rank = %d,\n", S->input_mp >= 0,
            S->input_mp >= 0 ? S->mp.buf[S->input_mp].offset : -1, m->input_dtype == DT_I32 ? "PG_DATA_I32" : "PG_DATA_F32",
            m->input.rank);
    fprintf(o, "    .input_dim = {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "}, .input_per_sample = %" PRId64
               ", .input_vocab = %" PRId64 ",\n",
            m->input.dim[0], m->input.dim[1], m->input.dim[2], m->input.dim[3], pg_shape_numel(&m->input), in_vocab);
    fprintf(o, "    .has_loss = %d, .target_off = %" PRId64 ", .target_dtype = %s, .target_rank = %d,\n",
            S->target_mp >= 0, S->target_mp >= 0 ? S->mp.buf[S->target_mp].offset : -1,
            m->target_dtype == DT_I32 ? "PG_DATA_I32" : "PG_DATA_F32", m->target.rank);
    fprintf(o, "    .target_dim = {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "}, .target_per_sample = %" PRId64
               ", .target_vocab = %" PRId64 ",\n",
            m->target.dim[0], m->target.dim[1], m->target.dim[2], m->target.dim[3], pg_shape_numel(&m->target), tg_vocab);
    fprintf(o, "    .send_bytes = send_bytes,\n    .ws_off = %" PRId64 ", .ws_bytes = %" PRId64 ",\n",
            S->ws_mp >= 0 ? S->mp.buf[S->ws_mp].offset : -1, S->ws_mp >= 0 ? S->mp.buf[S->ws_mp].bytes : 0);
    /* the model output (logits) for --generate: slot 0 and the slot stride */
    int64_t out_off = -1, out_stride = 0, out_numel = 0;
    for (int i = 0; i < S->nchunks; i++) {
        const em_chunk *ch = &S->ch[i];
        if (!ch->is_last || ch->y_slot < 0)
            continue;
        out_off = slot_off(&S->mp, ch, ch->y_slot, 0);
        out_stride = ch->sb[ch->y_slot].stride;
        out_numel = ch->tens[ch->lout[ch->last - ch->first]].numel;
    }
    fprintf(o, "    .output_off = %" PRId64 ", .output_slot_bytes = %" PRId64 ", .output_per_sample = %" PRId64 ",\n",
            out_off, out_stride, out_numel);
    fprintf(o, "    .nlayers = %d, .layers = stage_layers,\n", nstage_layers);
    if (m->train.precision == DT_BF16) /* only then: f32 stage files stay as they were */
        fprintf(o, "    .precision = 1, /* bf16 GEMM operands on the CUDA runtime (pg_backend_set_precision) */\n");
    if (g->guard)
        fprintf(o, "    .guard_bytes = %" PRId64 ", .narena_bufs = %d, .arena_bufs = arena_bufs,\n", g->guard, S->mp.n);
    if (nshadow)
        fprintf(o, "    .nshadows = %d, .shadows = stage_shadows,\n", nshadow);
    fprintf(o, "    .arch_hash = UINT64_C(0x%016" PRIx64 "), /* the layers, layout aside (checkpoint identity) */\n",
            model_arch_hash(g));
    fprintf(o, "};\n");
    return 0;
}

static int emit_header(const pg_gen *g, uint64_t hash, FILE *o)
{
    const ir_model *m = g->m;
    char guard[128];
    cident(m->name, guard, sizeof guard);
    fprintf(o, "/* %s.h — generated by pipegen %s from %s: the buffers of every stage of model %s.\n"
               " * Generated — do not edit. Plan hash %016" PRIx64 ".\n"
               " * Offsets are bytes into the stage's arena (256-byte aligned); shapes are per\n"
               " * micro-batch of r rows (at most %" PRId64 ").",
            m->name, PIPEGEN_VERSION, base_name(m->source_path), m->name, hash, g->rmax);
    if (g->guard)
        fprintf(o, "\n * Generated with --guard-bytes %" PRId64 ": the arena starts with at least that many free\n"
                   " * bytes and each buffer is followed by as many (poisoned under AddressSanitizer).", g->guard);
    fprintf(o, " */\n");
    fprintf(o, "#ifndef PG_GEN_%s_H\n#define PG_GEN_%s_H\n\n#include <stdint.h>\n\n#include \"pg_contract.h\"\n\n", guard, guard);
    fprintf(o, "#define %s_PLAN_HASH UINT64_C(0x%016" PRIx64 ")\n#define %s_NSTAGES %d\n\n", guard, hash, guard,
            m->nstages);
    for (int k = 0; k < g->nstages; k++) {
        const em_stage *S = &g->st[k];
        fprintf(o, "/* ---- stage %d ----\n *  %-12s %-12s  %-18s  %s\n", k, "offset", "bytes", "category", "buffer");
        for (int b = 0; b < S->mp.n; b++) {
            const pg_mp_buf *B = &S->mp.buf[b];
            fprintf(o, " *  %-12" PRId64 " %-12" PRId64 "  %-18s  %s: %s", B->offset, B->bytes, pg_mp_cat_name(B->cat),
                    B->name, B->note);
            if (B->first_use != PG_MP_WHOLE_STEP)
                fprintf(o, " (ticks %d..%d)", B->first_use, B->last_use);
            fprintf(o, "\n");
        }
        for (int i = 0; i < S->nchunks; i++) {
            const em_chunk *ch = &S->ch[i];
            if (!ch->nfb)
                continue;
            fprintf(o, " *  frame buffers of chunk %d (columns of frame_c%d in stage%d.c), for %" PRId64 " rows:\n",
                    ch->chunk, ch->chunk, k, g->rmax);
            for (int f = 0; f < ch->nfb; f++)
                fprintf(o, " *    F[%d] %12" PRId64 " bytes  %s: %s\n", f, ch->fb[f].bytes, ch->fb[f].what, ch->fb[f].shape);
        }
        if (S->nticks)
            fprintf(o, " *  ticks: the stage's actions in order, one per layer step of FWD, BWD_B (recompute,\n"
                       " *  then backward) and BWD_W, one per other action; %d in all\n", S->nticks);
        fprintf(o, " */\n#define STAGE%d_ARENA_BYTES INT64_C(%" PRId64 ")\n\n", k, S->mp.total);
    }
    /* the model's parameter table, once for every stage (pg_contract.h) */
    int ntab = 0;
    for (int p = 0; p < m->nparams; p++) {
        if (!needs_nacc_table(g, p))
            continue;
        if (!ntab++)
            fprintf(o, "/* gradient accumulators on each stage of the parameters used by several layers or tied */\n");
        fprintf(o, "static const int pg_nacc_p%d[] = {", p);
        for (int st = 0; st < m->nstages; st++)
            fprintf(o, "%s%d", st ? ", " : "", stage_nacc(g, st, p));
        fprintf(o, "}; /* %s */\n", m->params[p].name);
    }
    if (ntab)
        fprintf(o, "\n");
    fprintf(o, "/* every parameter of the model, in plan order: stage 0 gathers them for --save */\n"
               "static const pg_param_desc pg_model_params[] = {\n");
    for (int p = 0; p < m->nparams; p++)
        emit_param_entry(o, g, p, NULL);
    if (!m->nparams)
        fprintf(o, "    {.name = NULL, .index = -1, .off = -1, .grad_off = -1, .opt_off = {-1, -1}},\n");
    fprintf(o, "};\n\n#endif\n");
    return 0;
}

int pg_gen_write(const pg_gen *g, const char *dir, pg_diag *d)
{
    pg_loc none = {g->m->source_path, 0, 0};
    uint64_t hash = 0;
    int nf = g->nstages + 2, rc = 0;
    pg_gen_file *f = calloc((size_t)nf, sizeof *f);
    char *plan = f ? pg_gen_plan_json(g, &hash) : NULL;
    if (!plan) {
        pg_error(d, none, "out of memory writing plan.json");
        free(f);
        return -1;
    }
    sfmt(f[0].name, sizeof f[0].name, "plan.json");
    f[0].text = plan;
    f[0].len = strlen(plan);
    for (int k = -1; k < g->nstages && !rc; k++) { /* the header, then each stage */
        pg_gen_file *x = &f[k + 2];
        FILE *o = open_memstream(&x->text, &x->len);
        int erc = 0;
        if (!o) {
            rc = -1;
            break;
        }
        if (k < 0) {
            emit_header(g, hash, o);
            sfmt(x->name, sizeof x->name, "%s.h", g->m->name);
        } else {
            erc = emit_stage_c(g, k, hash, o);
            sfmt(x->name, sizeof x->name, "stage%d.c", k);
            pg_progress("stage%d.c emitted (%d of %d)", k, k + 1, g->nstages);
        }
        rc = fclose(o) || erc ? -1 : 0;
    }
    if (rc)
        pg_error(d, none, "out of memory");
    else
        rc = pg_gen_files_write(dir, f, nf, d, none);
    for (int i = 0; i < nf; i++)
        free(f[i].text);
    free(f);
    return rc;
}

/* codegen/schedule/schedule.c — the built-in compute schedules (gpipe, 1f1b,
 * interleaved(v), zb1, zbv) and the activation slots. The actions and the
 * schedule struct are sched_core.c's; the whole pass is sched_build.c's.
 *
 * Every built-in keeps the backward of one chunk in increasing micro-batch
 * order, so weight gradients accumulate in index order (the determinism
 * invariant of DESIGN.md); the verifier enforces that for every schedule. */
#include <stdlib.h>
#include <string.h>
#include "schedule/sched_internal.h"

/* ---- built-in compute schedules -------------------------------------------- */

/* Appends compute actions to one stage; remembers an allocation failure. */
typedef struct sched_builder {
    pg_stage_sched *st;
    int failed;
} sched_builder;

static void put(sched_builder *b, pg_act_kind k, int mb, int chunk)
{
    if (!b->failed && pg_sched_push(b->st, pg_act_make(k, mb, chunk)) != 0)
        b->failed = 1;
}

static void put_bw(sched_builder *b, int mb, int chunk)
{
    put(b, PG_BWD_B, mb, chunk);
    put(b, PG_BWD_W, mb, chunk);
}

/* One stage: each micro-batch forward through every chunk, then backward. */
static void build_single(sched_builder *b, int nchunks, int m)
{
    for (int mb = 0; mb < m; mb++) {
        for (int c = 0; c < nchunks; c++)
            put(b, PG_FWD, mb, c);
        for (int c = nchunks - 1; c >= 0; c--)
            put_bw(b, mb, c);
    }
}

/* Fill-drain: every forward of the stage's chunks (in chunk order, whatever
 * the placement), then every backward; backward in increasing micro-batch
 * order (not reversed) for determinism. */
static void build_gpipe(sched_builder *b, const int *chunks, int v, int m)
{
    for (int lc = 0; lc < v; lc++)
        for (int mb = 0; mb < m; mb++)
            put(b, PG_FWD, mb, chunks[lc]);
    for (int lc = v - 1; lc >= 0; lc--)
        for (int mb = 0; mb < m; mb++)
            put_bw(b, mb, chunks[lc]);
}

/* PipeDream-flush: min(p-s-1, m) warm-up forwards, then one forward / one
 * backward, then the remaining backwards. W follows its B immediately. */
static void build_1f1b(sched_builder *b, int s, int p, int m)
{
    int warm = p - s - 1 < m ? p - s - 1 : m;
    for (int i = 0; i < warm; i++)
        put(b, PG_FWD, i, s);
    for (int i = 0; i < m - warm; i++) {
        put(b, PG_FWD, warm + i, s);
        put_bw(b, i, s);
    }
    for (int i = m - warm; i < m; i++)
        put_bw(b, i, s);
}

/* Megatron's interleaved 1F1B: the k-th forward of a stage is local chunk
 * (k / p) % v of micro-batch (k / (p*v)) * p + k % p; backwards walk the
 * chunks in reverse. Warm-up 2(p-s-1) + (v-1)p forwards. */
static int inter_mb(int k, int p, int v)
{
    return (k / (p * v)) * p + k % p;
}

static void build_interleaved(sched_builder *b, int s, int p, int v, int m)
{
    int total = m * v;
    int warm = 2 * (p - s - 1) + (v - 1) * p;
    if (warm > total)
        warm = total;
    int nf = 0, nb = 0;
    for (; nf < warm; nf++)
        put(b, PG_FWD, inter_mb(nf, p, v), ((nf / p) % v) * p + s);
    for (; nf < total; nf++, nb++) {
        put(b, PG_FWD, inter_mb(nf, p, v), ((nf / p) % v) * p + s);
        put_bw(b, inter_mb(nb, p, v), (v - 1 - (nb / p) % v) * p + s);
    }
    for (; nb < total; nb++)
        put_bw(b, inter_mb(nb, p, v), (v - 1 - (nb / p) % v) * p + s);
}

/* ZB-H1 (Zero Bubble Pipeline Parallelism, arXiv 2401.10241): each stage
 * runs 1F1B's order of F and B (same warm-up forwards) and places its W
 * passes where it would otherwise wait. The lists are made by a list
 * scheduler over a unit-cost simulation (F = B = W = 1, messages free): in
 * time order, the earliest free stage (lowest index on ties) runs
 *   - its next F or B when the input is there (an F only while fewer than
 *     `limit` micro-batches hold activations: they are freed by W),
 *   - else its oldest pending W (so W of a chunk is in increasing mb order),
 *   - else waits for the input.
 * B before W keeps the gradient's critical path short; later stages end up
 * deferring more Ws, which fill the cool-down. limit = min(p, m) is 1F1B's
 * peak (stage 0's slot count): the paper's pM_B. With equal costs the step
 * is 3m + p - 1 for m >= p, bubble (p-1)/(3m+p-1): a third of 1F1B's.
 * The result is a fixed list per stage; timing plays no part at run time. */
typedef struct zb_stage {
    int nf, nb, nw;   /* F, B, W done (each in mb order) */
    int warm;         /* 1F1B's warm-up forwards */
    long free_at;     /* unit-cost clock */
    int blocked;      /* waits for an input whose producer is not placed yet */
} zb_stage;

static int build_zb1(pg_schedule *s, int p, int m)
{
    int limit = p < m ? p : m, rc = -1;
    long *ff = malloc((size_t)p * (size_t)m * sizeof *ff); /* finish of F(stage, mb), -1 unknown */
    long *fb = malloc((size_t)p * (size_t)m * sizeof *fb);
    zb_stage *z = calloc((size_t)p, sizeof *z);
    if (!ff || !fb || !z)
        goto out;
    for (long i = 0; i < (long)p * m; i++)
        ff[i] = fb[i] = -1;
    for (int st = 0; st < p; st++)
        z[st].warm = p - st - 1 < m ? p - st - 1 : m;
    for (;;) {
        int st = -1;
        for (int k = 0; k < p; k++) {
            zb_stage *c = &z[k];
            int finished = c->nf == m && c->nb == m && c->nw == m;
            if (!finished && !c->blocked && (st < 0 || c->free_at < z[st].free_at))
                st = k;
        }
        if (st < 0)
            break;
        zb_stage *c = &z[st];
        long t = c->free_at, ready = -1;
        int fwd = 0, mb = -1;
        if (c->nf < m || c->nb < m) {
            /* the next F or B in 1F1B order */
            fwd = c->nf < c->warm || (c->nf < m && c->nf - c->warm == c->nb);
            mb = fwd ? c->nf : c->nb;
            if (fwd)
                ready = st == 0 ? 0 : ff[(size_t)(st - 1) * (size_t)m + (size_t)mb];
            else
                ready = st == p - 1 ? ff[(size_t)st * (size_t)m + (size_t)mb]
                                    : fb[(size_t)(st + 1) * (size_t)m + (size_t)mb];
        }
        pg_act_kind k;
        if (mb >= 0 && ready >= 0 && ready <= t && (!fwd || c->nf - c->nw < limit)) {
            k = fwd ? PG_FWD : PG_BWD_B;
        } else if (c->nw < c->nb) {
            k = PG_BWD_W, mb = c->nw;
        } else if (ready >= 0) {
            c->free_at = ready > t ? ready : t + 1; /* t + 1: cannot happen, but never spin */
            continue;
        } else {
            c->blocked = 1;
            continue;
        }
        if (pg_sched_push(&s->stage[st], pg_act_make(k, mb, st)) != 0)
            goto out;
        c->free_at = t + 1;
        if (k == PG_FWD)
            ff[(size_t)st * (size_t)m + (size_t)c->nf++] = t + 1;
        else if (k == PG_BWD_B)
            fb[(size_t)st * (size_t)m + (size_t)c->nb++] = t + 1;
        else
            c->nw++;
        for (int o = 0; o < p; o++)
            z[o].blocked = 0;
    }
    rc = 0;
    for (int st = 0; st < p; st++)
        if (z[st].nw != m)
            rc = -1; /* a stage could not finish: a bug of the builder, caught here */
out:
    free(ff);
    free(fb);
    free(z);
    return rc;
}

/* ZBV (the zero-bubble V schedule): two chunks per stage in V placement,
 * stage s holding chunk s ("down") and chunk 2p-1-s ("up"), so a micro-batch
 * goes down the stages and comes back up, its loss on stage 0. Made, like
 * zb1, by a list scheduler over a unit-cost simulation (F = B = W = 1 per
 * chunk, messages free): the earliest free stage (lowest index on ties) runs
 * the first ready pass in its priority order, B first (up chunk, then down)
 * or F first (up chunk, then down), each chunk's passes in micro-batch order;
 * when none is ready, a W: the one that makes room for a down-chunk F (below),
 * else the down chunk's oldest; else it waits.
 * Room: each chunk holds at most p micro-batches' activations (from F to W),
 * and every micro-batch whose down-chunk F ran keeps a place in the up chunk,
 * so a down-chunk F runs only while the down chunk holds fewer than p and the
 * up chunk's held plus kept places are fewer than p. A stage then never needs
 * more than 2 min(p, m) chunk activation slots: min(p, m) whole stages', the
 * peak of 1F1B (its stage 0). Up-chunk F, B and W never wait for room, so the
 * oldest micro-batch in flight always moves and the scheduler finishes.
 * The four combinations of F-first or B-first and of the W choice (room, or
 * always the down chunk's) are built and the one with the shortest unit-cost
 * step is kept (the first on ties): the result is a fixed list per stage. */
typedef struct zbv_chunk {
    int nf, nb, nw;
} zbv_chunk;

typedef struct zbv_cand {
    pg_act_kind kind;
    int chunk;
    long ready; /* when its input is there, -1 unknown */
} zbv_cand;

/* One variant into s (empty lists); its unit-cost step in *step. */
static int build_zbv_variant(pg_schedule *s, int p, int m, int b_first, int w_room, long *step)
{
    int nc = 2 * p, rc = -1;
    long *ff = malloc((size_t)nc * (size_t)m * sizeof *ff); /* finish of F(chunk, mb), -1 unknown */
    long *fb = malloc((size_t)nc * (size_t)m * sizeof *fb);
    zbv_chunk *k = calloc((size_t)nc, sizeof *k);
    zb_stage *z = calloc((size_t)p, sizeof *z);
    if (!ff || !fb || !k || !z)
        goto out;
    for (long i = 0; i < (long)nc * m; i++)
        ff[i] = fb[i] = -1;
#define FF(c, mb) ff[(size_t)(c) * (size_t)m + (size_t)(mb)]
#define FB(c, mb) fb[(size_t)(c) * (size_t)m + (size_t)(mb)]
    for (;;) {
        int st = -1;
        for (int q = 0; q < p; q++) {
            int finished = k[q].nw == m && k[nc - 1 - q].nw == m;
            if (!finished && !z[q].blocked && (st < 0 || z[q].free_at < z[st].free_at))
                st = q;
        }
        if (st < 0)
            break;
        int down = st, up = nc - 1 - st;
        long t = z[st].free_at, next = -1;
        int kept = k[down].nf - k[up].nf;
        int room = k[down].nf - k[down].nw < p && k[up].nf - k[up].nw + kept < p;
        zbv_cand cand[4];
        int ncand = 0, bc[2] = { up, down };
        for (int pass = 0; pass < 2; pass++) {
            int want_b = pass == 0 ? b_first : !b_first;
            for (int i = 0; i < 2; i++) {
                int c = bc[i];
                if (want_b && k[c].nb < k[c].nf)
                    cand[ncand++] = (zbv_cand){ PG_BWD_B, c, c == nc - 1 ? FF(c, k[c].nb) : FB(c + 1, k[c].nb) };
                if (!want_b && k[c].nf < m && (c == up || room))
                    cand[ncand++] = (zbv_cand){ PG_FWD, c, c == 0 ? 0 : FF(c - 1, k[c].nf) };
            }
        }
        pg_act_kind kind = PG_STEP_KIND_COUNT;
        int chunk = -1;
        for (int i = 0; i < ncand && kind == PG_STEP_KIND_COUNT; i++) {
            if (cand[i].ready >= 0 && cand[i].ready <= t)
                kind = cand[i].kind, chunk = cand[i].chunk;
            else if (cand[i].ready > t && (next < 0 || cand[i].ready < next))
                next = cand[i].ready;
        }
        if (kind == PG_STEP_KIND_COUNT) {
            int wd = k[down].nw < k[down].nb, wu = k[up].nw < k[up].nb;
            if (w_room && wu && k[up].nf - k[up].nw + kept >= p)
                kind = PG_BWD_W, chunk = up;
            else if (wd)
                kind = PG_BWD_W, chunk = down;
            else if (wu)
                kind = PG_BWD_W, chunk = up;
        }
        if (kind == PG_STEP_KIND_COUNT) {
            if (next >= 0)
                z[st].free_at = next;
            else
                z[st].blocked = 1;
            continue;
        }
        int mb = kind == PG_FWD ? k[chunk].nf : kind == PG_BWD_B ? k[chunk].nb : k[chunk].nw;
        if (pg_sched_push(&s->stage[st], pg_act_make(kind, mb, chunk)) != 0)
            goto out;
        z[st].free_at = t + 1;
        if (kind == PG_FWD)
            FF(chunk, k[chunk].nf++) = t + 1;
        else if (kind == PG_BWD_B)
            FB(chunk, k[chunk].nb++) = t + 1;
        else
            k[chunk].nw++;
        for (int o = 0; o < p; o++)
            z[o].blocked = 0;
    }
#undef FF
#undef FB
    rc = 0;
    *step = 0;
    for (int q = 0; q < p; q++)
        if (z[q].free_at > *step)
            *step = z[q].free_at;
    for (int c = 0; c < nc; c++)
        if (k[c].nw != m)
            rc = -1; /* a stage could not finish: a bug of the builder, caught here */
out:
    free(ff);
    free(fb);
    free(k);
    free(z);
    return rc;
}

static int build_zbv(pg_schedule *s, int p, int m)
{
    long best = -1;
    for (int variant = 0; variant < 4; variant++) {
        pg_schedule t;
        long step;
        if (pg_sched_alloc(&t, p, s->nchunks, m, s->placement) != 0)
            return -1;
        if (build_zbv_variant(&t, p, m, variant < 2, variant % 2 == 0, &step) != 0) {
            pg_schedule_free(&t);
            return -1;
        }
        if (best < 0 || step < best) {
            best = step;
            for (int st = 0; st < p; st++) {
                pg_stage_sched x = s->stage[st];
                s->stage[st] = t.stage[st];
                t.stage[st] = x;
            }
        }
        pg_schedule_free(&t);
    }
    return 0;
}

int pg_schedule_builtin(const ir_model *m, pg_schedule *s, pg_diag *d)
{
    char kind[64];
    pg_schedule tmp = { 0 };
    pg_loc loc = pg_act_loc(m, &tmp, NULL);
    int p = m->nstages, nc = m->nchunks;
    int64_t mbs = m->train.microbatches;
    pg_schedule_name(m, kind, sizeof kind);
    memset(s, 0, sizeof *s);
    if (p < 1 || p > PG_SCHED_MAX_STAGES || nc < p || nc > PG_SCHED_MAX_CHUNKS || nc % p != 0) {
        pg_error(d, loc, "cannot schedule %d chunks on %d stages (at most %d of each, "
                 "and chunks a multiple of stages)", nc, p, PG_SCHED_MAX_CHUNKS);
        return -1;
    }
    if (mbs < 1 || mbs > 1 << 20) {
        pg_error(d, loc, "cannot schedule %lld micro-batches (1 to %d)", (long long)mbs, 1 << 20);
        return -1;
    }
    int nmb = (int)mbs, v = nc / p;
    if (m->train.schedule == SCHED_FILE) {
        pg_error(d, loc, "schedule %s is read from its file, not built in", kind);
        return -1;
    }
    if (p > 1 && v > 1 && (m->train.schedule == SCHED_1F1B || m->train.schedule == SCHED_ZB1)) {
        pg_error(d, loc, "schedule %s runs one chunk per stage, but the model has %d chunks "
                 "on %d stages; use interleaved(%d) or gpipe", kind, nc, p, v);
        return -1;
    }
    if (p > 1 && m->train.schedule == SCHED_INTERLEAVED && nmb % p != 0) {
        pg_error(d, loc, "schedule %s needs the micro-batch count (%d) to be a multiple of "
                 "the stage count (%d)", kind, nmb, p);
        return -1;
    }
    if (m->train.schedule == SCHED_AUTO) {
        pg_error(d, loc, "schedule auto has not been resolved into a schedule (codegen/choose/auto.c)");
        return -1;
    }
    int is_v = m->placement == PLACE_V && nc == 2 * p;
    if ((m->train.schedule == SCHED_ZBV && !is_v) ||
        (m->placement == PLACE_V && m->train.schedule != SCHED_ZBV && m->train.schedule != SCHED_GPIPE)) {
        pg_error(d, loc, "schedule %s cannot run %d chunks on %d stages in %s placement (zbv: two chunks per "
                 "stage in V placement)", kind, nc, p, pg_placement_name(m->placement));
        return -1;
    }
    if (pg_sched_alloc(s, p, nc, nmb, m->placement) != 0)
        goto oom;
    if (p > 1 && m->train.schedule == SCHED_ZB1) {
        if (build_zb1(s, p, nmb) != 0)
            goto oom;
        return 0;
    }
    if (p > 1 && m->train.schedule == SCHED_ZBV) {
        if (build_zbv(s, p, nmb) != 0)
            goto oom;
        return 0;
    }
    for (int st = 0; st < p; st++) {
        sched_builder b = { &s->stage[st], 0 };
        int chunks[PG_SCHED_MAX_CHUNKS];
        int nlocal = pg_stage_chunks(s, st, chunks);
        if (p == 1)
            build_single(&b, nc, nmb);
        else if (m->train.schedule == SCHED_GPIPE)
            build_gpipe(&b, chunks, nlocal, nmb);
        else if (m->train.schedule == SCHED_1F1B)
            build_1f1b(&b, st, p, nmb);
        else
            build_interleaved(&b, st, p, v, nmb);
        if (b.failed)
            goto oom;
    }
    return 0;
oom:
    pg_schedule_free(s);
    pg_error(d, loc, "out of memory building schedule %s", kind);
    return -1;
}

/* ---- activation slots ------------------------------------------------------- */

/* FWD takes the lowest free slot of its chunk on the stage, BWD_B uses it,
 * and it is free again after the micro-batch's BWD_W and after every send
 * that reads the chunk's buffers of that micro-batch (its output, input
 * gradient, stashed skips and skip gradients: a send may come after BWD_W
 * when its peer receives it late, see schedule_comms.c). */
static int reads_slot(pg_act_kind k)
{
    return k == PG_BWD_W || k == PG_SEND_ACT || k == PG_SEND_GRAD || k == PG_SEND_SKIP || k == PG_SEND_SKIP_GRAD;
}

void pg_assign_slots(pg_schedule *s)
{
    int p = s->nstages, nmb = s->nmb;
    size_t n1 = (size_t)(nmb > 0 ? nmb : 1);
    int *slot_of = malloc(n1 * sizeof *slot_of);
    int *last = malloc(n1 * sizeof *last); /* per mb: the action after which its slot is free */
    unsigned char *busy = malloc(n1 + 1);
    for (int st = 0; st < p; st++) {
        pg_stage_sched *ss = &s->stage[st];
        int chunks[PG_SCHED_MAX_CHUNKS];
        int nlocal = pg_stage_chunks(s, st, chunks);
        memset(ss->nslots_per_chunk, 0, sizeof ss->nslots_per_chunk);
        for (int lc = 0; lc < nlocal; lc++) {
            int chunk = chunks[lc], live = 0, peak = 0;
            if (!slot_of || !busy || !last)
                break;
            for (int i = 0; i < nmb; i++)
                slot_of[i] = last[i] = -1;
            memset(busy, 0, (size_t)nmb + 1);
            for (int i = 0; i < ss->n; i++) {
                const pg_act *a = &ss->act[i];
                if (reads_slot(a->kind) && a->chunk == chunk && a->mb >= 0 && a->mb < nmb)
                    last[a->mb] = i;
            }
            for (int i = 0; i < ss->n; i++) {
                pg_act *a = &ss->act[i];
                if (a->chunk != chunk || a->mb < 0 || a->mb >= nmb)
                    continue;
                if (a->kind == PG_FWD) {
                    int k = 0;
                    while (k < nmb && busy[k])
                        k++;
                    busy[k] = 1;
                    slot_of[a->mb] = k;
                    if (++live > peak)
                        peak = live;
                    if (k + 1 > peak)
                        peak = k + 1;
                }
                if (pg_act_is_compute(a->kind))
                    a->slot = slot_of[a->mb];
                if (i == last[a->mb] && slot_of[a->mb] >= 0) {
                    busy[slot_of[a->mb]] = 0;
                    slot_of[a->mb] = -1;
                    live--;
                }
            }
            ss->nslots_per_chunk[lc] = peak;
        }
    }
    free(slot_of);
    free(last);
    free(busy);
}

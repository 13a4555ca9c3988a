/* dsl/stages.c — chunks and stages: the pieces between top-level splits, or a
 * contiguous balance by the cost model (dsl/cost.c: estimated flops, or the
 * measured times of a profile) when only `stages = N` is given; then which
 * stages use each parameter, and the ties that sharing across stages needs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "check_ctx.h"
#include "cost.h"

static int is_compute(const ir_layer *L) { return L->kind != LK_STASH && L->kind != LK_POP; }

/* Cost of one layer for the balancer: F + B + W of the cost model, as an
 * integer (flops per sample, or picoseconds per micro-batch when measured),
 * at least 1 so that every layer counts and capped so sums cannot overflow. */
static int64_t layer_cost(const pg_profile *prof, const ir_layer *L) {
    pg_layer_cost lc = pg_layer_cost_of(L, prof, 1.0);
    double scale = prof ? 1e12 : 1.0, v = (lc.fwd + lc.bwd_b + lc.bwd_w) * scale;
    if (!(v >= 1)) return 1;
    if (v > 1e15) return (int64_t)1e15;
    return (int64_t)llround(v);
}

/* With a profile, every compute layer must be in it; 0 when so. */
static int check_profile_covers(chk *c) {
    int missing = 0;
    for (int i = 0; i < c->nlayers && missing < 5; i++) {
        const ir_layer *L = &c->layers[i];
        if (!is_compute(L) || pg_profile_find(c->profile, L->name)) continue;
        if (chk_error(c, L->loc, "layer '%s' is not in the profile %s", L->name, c->profile->path ? c->profile->path : ""))
            if (!missing) chk_note(c, L->loc, "profile again with the current model, or add the layer's fwd_s and bwd_s");
        missing++;
    }
    return missing;
}

static int greedy_chunks(const int64_t *cost, int n, int64_t limit) {
    int chunks = 1;
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
        if (sum > 0 && sum + cost[i] > limit) {
            chunks++;
            sum = 0;
        }
        sum += cost[i];
    }
    return chunks;
}

/* Contiguous partition of n costs into k non-empty chunks minimising the
 * largest chunk: binary search on the limit, then a greedy pass that cuts
 * early only when the remaining layers are just enough for the remaining chunks. */
static void balance(const int64_t *cost, int n, int k, int *chunk_of) {
    int64_t lo = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        if (cost[i] > lo) lo = cost[i];
        hi = hi > INT64_MAX - cost[i] ? INT64_MAX : hi + cost[i];
    }
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (greedy_chunks(cost, n, mid) <= k) hi = mid;
        else lo = mid + 1;
    }
    int ch = 0;
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
        int nonempty = i > 0 && chunk_of[i - 1] == ch;
        if (nonempty && ch < k - 1 && (sum + cost[i] > lo || n - i <= k - 1 - ch)) {
            ch++;
            sum = 0;
        }
        chunk_of[i] = ch;
        sum += cost[i];
    }
}

/* 1 when layer i (a stash or pop) comes before every compute layer of its
 * repeat instance and the instance has one after it: it opens the instance. */
static int opens_instance(const ir_layer *layers, int nlayers, int i) {
    int inst = layers[i].instance;
    if (inst < 0) return 0;
    for (int k = i - 1; k >= 0 && layers[k].instance == inst; k--)
        if (is_compute(&layers[k])) return 0;
    for (int k = i + 1; k < nlayers && layers[k].instance == inst; k++)
        if (is_compute(&layers[k])) return 1;
    return 0;
}

/* Layer i's chunk from chunk_of[j] of its compute layer j; stash and pop go
 * with the compute layer before them (the first chunk before any), except
 * those that open a repeat instance, which go with the instance's first
 * compute layer: a stage boundary between instances keeps each instance's
 * skips on its stage. */
static void assign_chunks(ir_layer *layers, int nlayers, const int *chunk_of) {
    for (int i = 0, j = 0; i < nlayers; i++) {
        if (is_compute(&layers[i])) layers[i].chunk = chunk_of[j++];
        else if (opens_instance(layers, nlayers, i)) layers[i].chunk = chunk_of[j];
        else layers[i].chunk = j > 0 ? chunk_of[j - 1] : 0;
    }
}

static int check_empty_chunks(chk *c) {
    int bad = 0, prev = 0;
    for (int s = 0; s <= c->nsplits; s++) {
        int end = s < c->nsplits ? c->splits[s].at_layer : c->nlayers, n = 0;
        for (int i = prev; i < end; i++) n += is_compute(&c->layers[i]);
        if (n == 0) {
            bad = 1;
            if (s == 0) chk_error(c, c->splits[0].loc, "split before the first layer leaves stage 0 empty");
            else if (s == c->nsplits) chk_error(c, c->splits[s - 1].loc, "split after the last layer leaves the last stage empty");
            else if (chk_error(c, c->splits[s].loc, "two splits with no layer between them leave a stage empty"))
                chk_note(c, c->splits[s - 1].loc, "the previous split is here");
        }
        prev = end;
    }
    return bad;
}

/* Chunks per stage and placement the schedule asks for: interleaved(v) v, zbv
 * (and `placement = v`) two in V placement, everything else one in loop
 * placement; schedule = auto starts from one chunk per stage (codegen/choose/auto.c
 * tries the others). 0, or -1 after reporting a placement the schedule
 * cannot run. */
static int chunks_per_stage(chk *c, int *v, ir_placement *pl) {
    ir_train *t = &c->m->train;
    *v = t->interleave > 0 ? t->interleave : 1;
    *pl = PLACE_LOOP;
    if (t->schedule == SCHED_ZBV) {
        *v = 2;
        *pl = PLACE_V;
        if (t->placement == PLACE_LOOP) {
            chk_error(c, t->placement_loc, "schedule zbv runs its two chunks per stage in V placement, not loop");
            return -1;
        }
    } else if (t->placement == PLACE_V) {
        if (t->schedule != SCHED_GPIPE && t->schedule != SCHED_FILE) {
            chk_error(c, t->placement_loc, "placement = v holds two chunks per stage: it works with schedule zbv, "
                                           "gpipe or file(...), not this schedule");
            return -1;
        }
        *v = 2;
        *pl = PLACE_V;
    }
    return 0;
}

void chk_stages(chk *c) {
    ir_model *m = c->m;
    ir_train *t = &m->train;
    int v;
    ir_placement pl;
    int ncompute = 0;
    for (int i = 0; i < c->nlayers; i++) ncompute += is_compute(&c->layers[i]);
    pg_loc at = t->schedule_loc.line ? t->schedule_loc : t->stages_loc;
    if (chunks_per_stage(c, &v, &pl) != 0) return;
    const char *what = t->schedule == SCHED_ZBV ? "zbv" : pl == PLACE_V ? "placement = v" : NULL;

    if (c->nsplits > 0) {
        if (check_empty_chunks(c)) return;
        if (c->profile)
            chk_warning(c, c->splits[0].loc, "the profile %s has no effect: the model's splits fix the stages",
                        c->profile->path ? c->profile->path : "");
        int nchunks = c->nsplits + 1;
        /* auto with splits keeps the stage count: `stages = N`, else one chunk per stage */
        if (t->schedule == SCHED_AUTO && t->stages) {
            if (nchunks % t->stages != 0) {
                if (chk_error(c, t->stages_loc, "stages = %d, but the %d splits make %d chunks, not a multiple of %d",
                              t->stages, c->nsplits, nchunks, t->stages))
                    chk_note(c, c->splits[0].loc, "the first split is here");
                return;
            }
            v = nchunks / t->stages;
        }
        if (nchunks % v != 0) {
            if (what)
                chk_error(c, at, "%s needs two chunks per stage, but the splits make %d chunks", what, nchunks);
            else
                chk_error(c, at, "interleaved(%d) needs a chunk count divisible by %d, but the splits make %d chunks",
                          v, v, nchunks);
            return;
        }
        int nstages = nchunks / v;
        if (t->stages && t->stages != nstages) {
            if (chk_error(c, t->stages_loc, "stages = %d, but the %d split%s make%s %d stage%s", t->stages, c->nsplits,
                          c->nsplits == 1 ? "" : "s", c->nsplits == 1 ? "s" : "", nstages, nstages == 1 ? "" : "s"))
                chk_note(c, c->splits[0].loc, "the first split is here");
            return;
        }
        if (nstages > PG_MAX_STAGES) {
            chk_error(c, c->splits[c->nsplits - 1].loc, "the splits make %d stages; at most %d are supported", nstages,
                      PG_MAX_STAGES);
            return;
        }
        m->nchunks = nchunks;
        m->nstages = nstages;
    } else {
        int nstages = t->stages ? t->stages : 1;
        int nchunks = nstages * v;
        if (nchunks > ncompute) {
            if (t->stages && v == 1)
                chk_error(c, t->stages_loc, "stages = %d is more than the %d layers of the model: each stage needs a layer", t->stages, ncompute);
            else if (what)
                chk_error(c, at, "%d stages of %s need %d chunks, more than the %d layers of the model", nstages, what,
                          nchunks, ncompute);
            else
                chk_error(c, at, "%d stages of interleaved(%d) need %d chunks, more than the %d layers of the model",
                          nstages, v, nchunks, ncompute);
            return;
        }
        if (c->profile && check_profile_covers(c)) return;
        int64_t *cost = chk_xmalloc(sizeof *cost * (size_t)(ncompute + 1));
        int *chunk_of = chk_xmalloc(sizeof *chunk_of * (size_t)(ncompute + 1));
        for (int i = 0, j = 0; i < c->nlayers; i++)
            if (is_compute(&c->layers[i])) cost[j++] = layer_cost(c->profile, &c->layers[i]);
        balance(cost, ncompute, nchunks, chunk_of);
        assign_chunks(c->layers, c->nlayers, chunk_of);
        free(cost);
        free(chunk_of);
        m->nchunks = nchunks;
        m->nstages = nstages;
        m->balanced = t->stages > 0;
    }
    m->placement = pl;
    for (int i = 0; i < c->nlayers; i++)
        c->layers[i].stage = pg_placement_stage(pl, c->layers[i].chunk, m->nchunks, m->nstages);
}

void chk_ties(chk *c) {
    for (int i = 0; i < c->nlayers; i++) {
        const ir_layer *L = &c->layers[i];
        for (int j = 0; j < L->nparam; j++) c->params[L->param[j]].stage_mask |= 1ull << L->stage;
        for (int j = 0; j < L->nbuffer; j++) c->params[L->buffer[j]].stage_mask |= 1ull << L->stage;
    }
    for (int i = 0; i < c->nparams_; i++) {
        ir_param *p = &c->params[i];
        p->owner_stage = p->stage_mask ? __builtin_ctzll(p->stage_mask) : 0;
    }
    for (int k = 0; k < c->nnparams; k++) {
        chk_nparam *np = &c->nparams[k];
        if (np->index < 0) {
            if (np->tie) chk_warning(c, np->tie->loc, "tie of '%s' has no effect: no layer uses it", np->st->name);
            continue;
        }
        ir_param *p = &c->params[np->index];
        int users = __builtin_popcountll(p->stage_mask);
        if (np->tie) {
            p->tie_decl = np->tie_mode;
            p->tie_loc = np->tie->loc;
        }
        if (users <= 1) {
            /* a V placement (or auto's choice) may put both uses on one stage: no message then */
            if (np->tie && c->m->placement != PLACE_V && c->m->train.schedule != SCHED_AUTO)
                chk_warning(c, np->tie->loc, "tie of '%s' has no effect: only stage %d uses it", np->st->name,
                            p->owner_stage);
            continue;
        }
        if (np->tie) {
            p->tie = np->tie_mode;
            p->tie_loc = np->tie->loc;
            continue;
        }
        /* the first use outside the owning stage */
        const ir_layer *first = &c->layers[np->first_user], *other = NULL;
        for (int i = 0; i < c->nlayers && !other; i++)
            for (int j = 0; j < c->layers[i].nparam; j++)
                if (c->layers[i].param[j] == np->index && c->layers[i].stage != p->owner_stage) other = &c->layers[i];
        if (other && chk_error(c, other->loc, "parameter '%s' is used in stages %d and %d but is not tied",
                               np->st->name, first->stage, other->stage)) {
            chk_note(c, first->loc, "'%s' is also used here, in stage %d", np->st->name, first->stage);
            pg_loc nowhere = {np->st->loc.file, 0, 0}; /* the line to add is the message: no source line under it */
            chk_note(c, nowhere,
                     "add this line to the model (each stage that uses '%s' keeps a copy; their gradients are "
                     "summed before every step):\n    tie %s replicate\n  or `tie %s transmit` (stage %d holds it, "
                     "sends it to the others every step and gets their gradients back)",
                     np->st->name, np->st->name, np->st->name, p->owner_stage);
        }
    }
}

/* ---- repartitioning a checked model (codegen/choose/balance.c, codegen/choose/auto.c) ---- */

int pg_balance_chunks(const ir_model *m, const pg_profile *prof, int nchunks, int *chunk_of) {
    int n = 0;
    for (int i = 0; i < m->nlayers; i++) n += is_compute(&m->layers[i]);
    if (nchunks < 1 || nchunks > n) return -1;
    int64_t *cost = malloc(sizeof *cost * (size_t)(n + 1));
    if (!cost) return -1;
    for (int i = 0, j = 0; i < m->nlayers; i++)
        if (is_compute(&m->layers[i])) cost[j++] = layer_cost(prof, &m->layers[i]);
    balance(cost, n, nchunks, chunk_of);
    free(cost);
    return 0;
}

int pg_model_repartition(ir_model *m, int nchunks, int nstages, ir_placement pl, const int *chunk_of) {
    assign_chunks(m->layers, m->nlayers, chunk_of);
    m->nchunks = nchunks;
    m->nstages = nstages;
    m->placement = pl;
    for (int i = 0; i < m->nlayers; i++)
        m->layers[i].stage = pg_placement_stage(pl, m->layers[i].chunk, nchunks, nstages);
    for (int k = 0; k < m->nparams; k++) m->params[k].stage_mask = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const ir_layer *L = &m->layers[i];
        for (int j = 0; j < L->nparam; j++)
            if (L->param[j] >= 0) m->params[L->param[j]].stage_mask |= 1ull << L->stage;
        for (int j = 0; j < L->nbuffer; j++) m->params[L->buffer[j]].stage_mask |= 1ull << L->stage;
    }
    int ok = 0;
    for (int k = 0; k < m->nparams; k++) {
        ir_param *p = &m->params[k];
        p->owner_stage = p->stage_mask ? __builtin_ctzll(p->stage_mask) : 0;
        int users = __builtin_popcountll(p->stage_mask);
        p->tie = users > 1 ? p->tie_decl : TIE_NONE;
        if (users > 1 && p->tie_decl == TIE_NONE) ok = -1; /* needs a tie the model does not have */
    }
    return ok;
}

/* codegen/choose/balance.c — the split of `stages = N` by the predicted step.
 *
 * The min-max split (dsl/stages.c: the largest chunk's F + B + W as small as
 * it can be) is blind to where a chunk runs in the schedule: the last stage of
 * 1F1B also does the loss first and waits least, a stage's B and W weigh
 * differently from its F, a checkpointed micro-batch reruns its forward. So
 * the split is searched against the schedule itself: the schedule's action
 * lists do not depend on where the split points are (only on stages, chunks,
 * micro-batches and placement), so they are built once, without skips and
 * ties (their messages add no wait when messages are free, and little when
 * priced), and each candidate split is timed by predict.c's simulation with
 * its chunks' costs. When there are few splits (PG_BALANCE_ENUM_MAX), every
 * one is timed; otherwise coordinate descent from the min-max split: each
 * boundary in turn moves to its best place between its neighbours, until a
 * whole pass moves none.
 *
 * Over repeat instances (transformer blocks) the search runs twice: with
 * boundaries only between whole instances (units of several layers), and
 * anywhere; a split inside an instance sends its residual across and breaks
 * "stage k holds blocks i..j", so it is taken only when its predicted step is
 * shorter by more than block_margin (pg_balance_choose). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/progress.h"
#include "choose/balance.h"
#include "gen/emit.h"
#include "schedule/schedule.h"
#include "schedule/svg.h"

static int is_compute(const ir_layer *L) { return L->kind != LK_STASH && L->kind != LK_POP; }

static int count_compute(const ir_model *m)
{
    int n = 0;
    for (int i = 0; i < m->nlayers; i++)
        n += is_compute(&m->layers[i]);
    return n;
}

/* chunk k = compute layers start[k] .. start[k+1]-1 */
static void starts_to_chunks(const int *start, int k, int n, int *chunk_of)
{
    for (int c = 0; c < k; c++)
        for (int j = start[c]; j < (c + 1 < k ? start[c + 1] : n); j++)
            chunk_of[j] = c;
}

/* A parameter that layers on several chunks may use only when they share a
 * stage (it has no tie to take it across): the compute layers that use it. */
typedef struct shared_param {
    int n, *layer;      /* [n] compute-layer indices, ascending */
} shared_param;

typedef struct split_eval split_eval;
struct split_eval {
    ir_model *m;
    const pg_profile *prof;
    int n, nchunks, nstages;
    ir_placement pl;
    pg_schedule skel;   /* the schedule's lists, built once */
    int *chunk_of;      /* scratch */
    /* What a split costs, in time independent of the layer count (a split
     * search of thousands of predictions on a model of thousands of layers):
     * chunk k is the layers [pos[start[k]], pos[start[k + 1]]) (a stash or pop
     * goes with the compute layer before it, as pg_model_repartition puts
     * it), its costs differences of prefix sums over the layers. */
    int *pos;           /* [n + 1]: the layer index of compute layer j; pos[n] = nlayers */
    /* Where boundaries may go: start[] counts units, unit u being the compute
     * layers ufirst[u] .. ufirst[u + 1] - 1 (each layer its own unit, or each
     * repeat instance one unit when instances are kept whole). */
    int nunits;
    int *ufirst;        /* [nunits + 1]; ufirst[nunits] = n */
    double *pre;        /* [4 (nlayers + 1)]: prefix sums of F, B, W and the rerun forward */
    pg_sched_costs base;/* the costs that do not depend on the split (messages, stages) */
    int nshared;
    shared_param *shared;
};

/* The predicted step of the split start[], INFINITY when it cannot run (an
 * untied parameter's users on two stages). */
static double eval_split(split_eval *e, const int *start)
{
    const ir_model *m = e->m;
    int L = m->nlayers;
    for (int q = 0; q < e->nshared; q++) { /* chunk of each user, by the boundaries */
        const shared_param *sp = &e->shared[q];
        int st0 = -1;
        for (int u = 0, k = 0; u < sp->n; u++) {
            while (k + 1 < e->nchunks && e->ufirst[start[k + 1]] <= sp->layer[u])
                k++;
            int st = pg_placement_stage(e->pl, k, e->nchunks, e->nstages);
            if (st0 >= 0 && st != st0)
                return INFINITY;
            st0 = st;
        }
    }
    pg_sched_costs c = e->base;
    for (int k = 0; k < e->nchunks && k < 64; k++) {
        int lo = k ? e->pos[e->ufirst[start[k]]] : 0, hi = k + 1 < e->nchunks ? e->pos[e->ufirst[start[k + 1]]] : L;
        double *cost[4] = { c.fwd, c.bwd_b, c.bwd_w, c.rerun };
        for (int v = 0; v < 4; v++)
            cost[v][k] = e->pre[v * (L + 1) + hi] - e->pre[v * (L + 1) + lo];
        c.in_elems[k] = (double)pg_shape_numel(&m->layers[lo].in);
        c.out_elems[k] = (double)pg_shape_numel(&m->layers[hi - 1].out);
    }
    pg_sched_prediction pr;
    if (pg_schedule_predict(m, &e->skel, &c, &pr) != 0)
        return INFINITY;
    return pr.step_time;
}

/* e's prefix sums, compute layer positions and shared parameters, from its
 * model (split as anything: the costs of a layer do not depend on where it
 * runs). 0, or -1 out of memory. */
static int eval_prepare(split_eval *e)
{
    const ir_model *m = e->m;
    int L = m->nlayers, missing;
    e->pos = malloc((size_t)(e->n + 1) * sizeof *e->pos);
    e->pre = malloc((size_t)4 * (size_t)(L + 1) * sizeof *e->pre);
    int *uses = calloc((size_t)(m->nparams + 1), sizeof *uses), *last = malloc((size_t)(m->nparams + 1) * sizeof *last);
    if (!e->pos || !e->pre || !uses || !last) {
        free(uses);
        free(last);
        return -1;
    }
    pg_sched_costs_of_model(m, e->prof, &e->base);
    const pg_profile *prof = e->prof && !pg_profile_missing(m, e->prof, &missing) ? e->prof : NULL;
    double nmb = m->train.microbatches > 0 ? (double)m->train.microbatches : 1.0;
    double rows = m->train.batch > 0 ? (double)m->train.batch / nmb : 1.0;
    for (int v = 0; v < 4; v++)
        e->pre[v * (L + 1)] = 0;
    for (int i = 0, j = 0; i < L; i++) {
        const ir_layer *ly = &m->layers[i];
        pg_layer_cost lc = pg_layer_cost_of(ly, prof, rows); /* as pg_sched_costs_of_model prices it */
        double x[4] = { lc.fwd, lc.bwd_b, lc.bwd_w, lc.recompute };
        for (int v = 0; v < 4; v++)
            e->pre[v * (L + 1) + i + 1] = e->pre[v * (L + 1) + i] + x[v];
        if (!is_compute(ly))
            continue;
        for (int k = 0; k < ly->nparam + ly->nbuffer; k++) { /* each untied parameter's distinct users */
            int p = k < ly->nparam ? ly->param[k] : ly->buffer[k - ly->nparam];
            if (p >= 0 && p < m->nparams && m->params[p].tie_decl == TIE_NONE && (uses[p] == 0 || last[p] != j)) {
                uses[p]++;
                last[p] = j;
            }
        }
        e->pos[j++] = i;
    }
    e->pos[e->n] = L;
    for (int p = 0; p < m->nparams; p++)
        e->nshared += uses[p] > 1;
    e->shared = calloc((size_t)(e->nshared + 1), sizeof *e->shared);
    int q = 0, rc = e->shared ? 0 : -1;
    for (int p = 0; p < m->nparams && !rc; p++) {
        if (uses[p] < 2)
            continue;
        shared_param *sp = &e->shared[q++];
        sp->layer = malloc((size_t)uses[p] * sizeof *sp->layer);
        if (!sp->layer) {
            rc = -1;
            break;
        }
        for (int i = 0, j = 0; i < L; i++) {
            const ir_layer *ly = &m->layers[i];
            if (!is_compute(ly))
                continue;
            for (int k = 0; k < ly->nparam + ly->nbuffer; k++)
                if ((k < ly->nparam ? ly->param[k] : ly->buffer[k - ly->nparam]) == p &&
                    (sp->n == 0 || sp->layer[sp->n - 1] != j))
                    sp->layer[sp->n++] = j;
            j++;
        }
    }
    free(uses);
    free(last);
    return rc;
}

static void eval_free(split_eval *e)
{
    for (int q = 0; e->shared && q < e->nshared; q++)
        free(e->shared[q].layer);
    free(e->shared);
    free(e->pos);
    free(e->pre);
    free(e->ufirst);
}

/* m's schedule for nchunks on nstages, without skips and ties; -1 when it
 * cannot be built (its rules refuse the counts). */
static int build_skeleton(const ir_model *m, int nchunks, int nstages, ir_placement pl, pg_schedule *s)
{
    ir_model sk = *m;
    pg_diag quiet;
    pg_diag_init(&quiet, NULL, NULL);
    sk.nskips = 0;
    sk.nparams = 0;
    sk.nchunks = nchunks;
    sk.nstages = nstages;
    sk.placement = pl;
    return pg_schedule_build(&sk, s, &quiet);
}

/* Number of splits of n layers into k non-empty chunks, C(n-1, k-1), capped at cap + 1. */
static long count_splits(int n, int k, long cap)
{
    double c = 1;
    for (int i = 1; i < k; i++) {
        c = c * (double)(n - i) / (double)i;
        if (c > (double)cap)
            return cap + 1;
    }
    return (long)(c + 0.5);
}

/* Every split, boundary b from after start[b-1] to leave room for the rest;
 * keeps the first best in lexicographic order in best_start. */
static void enumerate_splits(split_eval *e, int *start, int b, double *best, int *best_start)
{
    if (b == e->nchunks) {
        double t = eval_split(e, start);
        if (t < *best * (1 - 1e-12)) {
            *best = t;
            memcpy(best_start, start, (size_t)e->nchunks * sizeof *start);
        }
        return;
    }
    for (int pos = start[b - 1] + 1; pos <= e->nunits - (e->nchunks - b); pos++) {
        start[b] = pos;
        enumerate_splits(e, start, b + 1, best, best_start);
    }
}

/* A boundary tries every place in its range when the range holds at most
 * BALANCE_SCAN_ONE of them (every model the examples hold); a wider range (a
 * model of thousands of layers) is tried at an even stride first and then at
 * every place within a stride of the best, so a pass costs a bounded number of
 * predictions whatever the layer count (each is linear in it). Pairs of
 * boundaries likewise with BALANCE_SCAN_TWO places along each. */
#define BALANCE_SCAN_ONE 256
#define BALANCE_SCAN_TWO 64

/* Time start[] with boundary b at pos (pos == keep: skipped, it is *best);
 * 1 when it beats *best, which it then becomes. */
static int try_place(split_eval *e, int *start, int b, int pos, int keep, double *best)
{
    if (pos == keep)
        return 0;
    start[b] = pos;
    double t = eval_split(e, start);
    if (t < *best * (1 - 1e-12)) {
        *best = t;
        return 1;
    }
    return 0;
}

/* The best place of boundary b between its neighbours (the others fixed);
 * 1 when it moved (best improved). */
static int move_one(split_eval *e, int *start, int b, double *best)
{
    int lo = start[b - 1] + 1, hi = b + 1 < e->nchunks ? start[b + 1] - 1 : e->nunits - 1;
    int keep = start[b], at = keep;
    int stride = (hi - lo) / BALANCE_SCAN_ONE + 1;
    for (int pos = lo; pos <= hi; pos += stride)
        if (try_place(e, start, b, pos, keep, best))
            at = pos;
    if (stride > 1) { /* every place within a stride of the coarse best */
        int c = at, from = c - stride + 1 > lo ? c - stride + 1 : lo, to = c + stride - 1 < hi ? c + stride - 1 : hi;
        for (int pos = from; pos <= to; pos++)
            if ((pos - lo) % stride && try_place(e, start, b, pos, keep, best))
                at = pos;
    }
    start[b] = at;
    return at != keep;
}

/* The best places of boundaries b < c together, each between its neighbours
 * (c's lower neighbour being b when they are adjacent), at strides when the
 * ranges are wide (the single moves that follow refine them); 1 when they
 * moved. */
static int move_two(split_eval *e, int *start, int b, int c, double *best)
{
    int kb = start[b], kc = start[c], ab = kb, ac = kc;
    int chi = c + 1 < e->nchunks ? start[c + 1] - 1 : e->nunits - 1;
    int blo = start[b - 1] + 1, bhi = c == b + 1 ? chi - 1 : start[b + 1] - 1;
    int sb = (bhi - blo) / BALANCE_SCAN_TWO + 1, sc = (chi - blo) / BALANCE_SCAN_TWO + 1;
    for (int pb = blo; pb <= bhi; pb += sb) {
        start[b] = pb;
        for (int pc = (c == b + 1 ? pb : start[c - 1]) + 1; pc <= chi; pc += sc) {
            if (pb == kb && pc == kc)
                continue;
            start[c] = pc;
            double t = eval_split(e, start);
            if (t < *best * (1 - 1e-12)) {
                *best = t;
                ab = pb;
                ac = pc;
            }
        }
    }
    start[b] = ab;
    start[c] = ac;
    return ab != kb || ac != kc;
}

/* Local search from start[] (min-max): each boundary in turn to its best
 * place between its neighbours until a pass moves none; then each pair of
 * boundaries together (a chunk's load can move two places at once, which a
 * single move cannot do without first making the step longer), and back to
 * single moves after any pair moved, until neither moves anything. */
static double descend(split_eval *e, int *start)
{
    double best = eval_split(e, start);
    for (int round = 0; round < 64; round++) {
        for (int pass = 0, moved = 1; moved && pass < 64; pass++) {
            moved = 0;
            for (int b = 1; b < e->nchunks; b++)
                moved |= move_one(e, start, b, &best);
        }
        int moved = 0;
        for (int b = 1; b < e->nchunks && !moved; b++)
            for (int c = b + 1; c < e->nchunks && !moved; c++)
                moved = move_two(e, start, b, c, &best);
        if (!moved)
            break;
    }
    return best;
}

/* e's units: every compute layer its own (whole = 0), or each repeat instance
 * one unit and each compute layer outside the repeats its own (whole = 1).
 * 0, or -1 out of memory. */
static int make_units(split_eval *e, int whole)
{
    const ir_model *m = e->m;
    e->ufirst = malloc((size_t)(e->n + 1) * sizeof *e->ufirst);
    if (!e->ufirst)
        return -1;
    e->nunits = 0;
    for (int j = 0; j < e->n; j++) {
        int inst = m->layers[e->pos[j]].instance;
        if (!whole || j == 0 || inst < 0 || inst != m->layers[e->pos[j - 1]].instance)
            e->ufirst[e->nunits++] = j;
    }
    e->ufirst[e->nunits] = e->n;
    return 0;
}

/* The unit that begins nearest compute layer j (the earlier on ties). */
static int nearest_unit(const split_eval *e, int j)
{
    int u = 0;
    while (u + 1 < e->nunits && e->ufirst[u + 1] <= j)
        u++;
    if (u + 1 < e->nunits && e->ufirst[u + 1] - j < j - e->ufirst[u])
        u++;
    return u;
}

/* The best split of m into nchunks (see pg_balance_search), boundaries only
 * between units (make_units' whole); m is not changed. chunk_of[n] and *step
 * receive it. 0; 1 when no split can run (fewer units than chunks, or each
 * needs a tie the model lacks); -1 out of memory. */
static int search_split(ir_model *m, const pg_profile *prof, int nchunks, int nstages, ir_placement pl, long max_enum,
                        int whole, int *chunk_of, double *step, int *seconds)
{
    split_eval e;
    memset(&e, 0, sizeof e);
    e.m = m;
    e.prof = prof;
    e.n = count_compute(m);
    e.nchunks = nchunks;
    e.nstages = nstages;
    e.pl = pl;
    int *start = malloc((size_t)(nchunks + 1) * sizeof *start);
    int *minmax = malloc((size_t)(e.n + 1) * sizeof *minmax);
    int *cur = malloc((size_t)(nchunks + 1) * sizeof *cur);
    int rc = -1, built = 0;
    if (!start || !minmax || !cur || eval_prepare(&e) != 0 || make_units(&e, whole) != 0)
        goto out;
    if (seconds)
        *seconds = pg_sched_costs_of_model(m, prof, &e.base);
    rc = 1;
    if (nchunks < 1 || nchunks > e.nunits || nchunks > 64 || pg_balance_chunks(m, prof, nchunks, minmax) != 0 ||
        build_skeleton(m, nchunks, nstages, pl, &e.skel) != 0)
        goto out;
    built = 1;
    /* the min-max split's boundaries, each moved to the nearest unit's start */
    start[0] = 0;
    for (int j = 1, c = 1; j < e.n && c < nchunks; j++)
        if (minmax[j] != minmax[j - 1]) {
            int u = nearest_unit(&e, j), lo = start[c - 1] + 1, hi = e.nunits - (nchunks - c);
            start[c++] = u < lo ? lo : u > hi ? hi : u;
        }
    double best = descend(&e, start);
    if (count_splits(e.nunits, nchunks, max_enum) <= max_enum) {
        /* few enough to try them all: the optimum (min-max's descent as the bar) */
        cur[0] = 0;
        enumerate_splits(&e, cur, 1, &best, start);
    }
    if (!isfinite(best))
        goto out;
    for (int c = 0; c < nchunks; c++)
        cur[c] = e.ufirst[start[c]];
    starts_to_chunks(cur, nchunks, e.n, chunk_of);
    *step = best;
    rc = 0;
out:
    if (built)
        pg_schedule_free(&e.skel);
    eval_free(&e);
    free(start);
    free(minmax);
    free(cur);
    return rc;
}

int pg_balance_search(ir_model *m, const pg_profile *prof, int nchunks, int nstages, ir_placement pl, long max_enum,
                      int *chunk_of, double *step)
{
    int n = count_compute(m);
    int *of = malloc((size_t)(n + 1) * sizeof *of);
    double best;
    int rc = of ? search_split(m, prof, nchunks, nstages, pl, max_enum, 0, of, &best, NULL) : -1;
    if (rc == 0) {
        pg_model_repartition(m, nchunks, nstages, pl, of);
        if (chunk_of)
            memcpy(chunk_of, of, (size_t)n * sizeof *chunk_of);
        if (step)
            *step = best;
    }
    free(of);
    return rc == 0 ? 0 : -1;
}

/* The compute layers' repeat instances, in order. */
static void compute_instances(const ir_model *m, int *inst)
{
    for (int i = 0, j = 0; i < m->nlayers; i++)
        if (is_compute(&m->layers[i]))
            inst[j++] = m->layers[i].instance;
}

/* The cuts of the instances inst[n] (per compute layer) in the split chunk_of,
 * as pg_split_cuts. */
static int count_cuts(const int *inst, int n, const int *chunk_of, int *first_cut)
{
    int cuts = 0;
    if (first_cut)
        *first_cut = -1;
    for (int j = 1; j < n; j++)
        if (inst[j] >= 0 && inst[j] == inst[j - 1] && chunk_of[j] != chunk_of[j - 1]) {
            if (first_cut && !cuts)
                *first_cut = j;
            cuts++;
        }
    return cuts;
}

int pg_split_cuts(const ir_model *m, const int *chunk_of, int *first_cut)
{
    int n = count_compute(m);
    int *inst = malloc((size_t)(n + 1) * sizeof *inst);
    if (!inst)
        return -1;
    compute_instances(m, inst);
    int cuts = count_cuts(inst, n, chunk_of, first_cut);
    free(inst);
    return cuts;
}

/* Repeat instances per chunk of a split that keeps them whole. */
static void instances_per_chunk(const ir_model *m, const int *chunk_of, int *per_chunk)
{
    memset(per_chunk, 0, 64 * sizeof *per_chunk);
    for (int i = 0, j = 0, last = -1; i < m->nlayers; i++) {
        if (!is_compute(&m->layers[i]))
            continue;
        int inst = m->layers[i].instance;
        if (inst >= 0 && inst != last && chunk_of[j] < 64)
            per_chunk[chunk_of[j]]++;
        last = inst;
        j++;
    }
}

int pg_balance_choose(ir_model *m, const pg_profile *prof, int nchunks, int nstages, ir_placement pl, long max_enum,
                      int *chunk_of, int *other_of, double *step, pg_block_split *bs)
{
    int n = count_compute(m), whole_units = 0;
    memset(bs, 0, sizeof *bs);
    bs->margin = m->train.block_margin;
    bs->whole_step = bs->inside_step = INFINITY;
    bs->nchunks = nchunks;
    bs->nstages = nstages;
    int *inst = malloc((size_t)(n + 1) * sizeof *inst);
    int *w_of = malloc((size_t)(n + 1) * sizeof *w_of), *f_of = malloc((size_t)(n + 1) * sizeof *f_of);
    int rc = -1, rw = 1, rf;
    double w_step = INFINITY, f_step = INFINITY;
    if (!inst || !w_of || !f_of)
        goto out;
    compute_instances(m, inst);
    for (int j = 0; j < n; j++)
        whole_units += j == 0 || inst[j] < 0 || inst[j] != inst[j - 1];
    bs->considered = whole_units < n; /* some boundary would cut an instance */
    bs->whole_units = whole_units;
    if (bs->considered && (rw = search_split(m, prof, nchunks, nstages, pl, max_enum, 1, w_of, &w_step,
                                             &bs->seconds)) < 0)
        goto out;
    if ((rf = search_split(m, prof, nchunks, nstages, pl, max_enum, 0, f_of, &f_step, &bs->seconds)) < 0)
        goto out;
    if (rf == 0 && bs->considered && !count_cuts(inst, n, f_of, NULL) && (rw != 0 || f_step < w_step)) {
        memcpy(w_of, f_of, (size_t)n * sizeof *w_of); /* the best of all keeps the instances whole */
        w_step = f_step;
        rw = 0;
    }
    int have_inside = bs->considered && rf == 0 && count_cuts(inst, n, f_of, NULL) > 0;
    if (!bs->considered) {
        if (rf != 0) {
            rc = 1;
            goto out;
        }
        bs->taken_inside = 0;
    } else if (rw == 0 && (!have_inside || !(f_step < w_step * (1 - bs->margin)))) {
        bs->taken_inside = 0;
        bs->reason = have_inside && f_step < w_step ? PG_BLOCKS_WITHIN_MARGIN : PG_BLOCKS_NONE_FASTER;
    } else if (have_inside) {
        bs->taken_inside = 1;
        bs->reason = rw == 0 ? PG_BLOCKS_GAIN : whole_units < nchunks ? PG_BLOCKS_TOO_FEW : PG_BLOCKS_NONE_RUNS;
    } else {
        rc = 1;
        goto out;
    }
    if (rw == 0) {
        bs->whole_step = w_step;
        instances_per_chunk(m, w_of, bs->per_chunk);
    }
    if (have_inside)
        bs->inside_step = f_step;
    const int *take = !bs->considered || bs->taken_inside ? f_of : w_of;
    const int *other = bs->taken_inside ? (rw == 0 ? w_of : NULL) : have_inside ? f_of : NULL;
    if (bs->taken_inside)
        count_cuts(inst, n, f_of, &bs->cut_before);
    pg_model_repartition(m, nchunks, nstages, pl, take);
    if (chunk_of)
        memcpy(chunk_of, take, (size_t)n * sizeof *chunk_of);
    if (other_of && other)
        memcpy(other_of, other, (size_t)n * sizeof *other_of);
    bs->has_other = other != NULL;
    if (step)
        *step = take == f_of ? f_step : w_step;
    rc = 0;
out:
    free(inst);
    free(w_of);
    free(f_of);
    return rc;
}

/* 1 when m with its current split schedules and plans (quietly). */
static int pipeline_accepts(const ir_model *m)
{
    pg_diag quiet;
    pg_schedule s;
    pg_gen *g = NULL;
    pg_diag_init(&quiet, NULL, NULL);
    if (pg_schedule_build(m, &s, &quiet) != 0)
        return 0;
    int ok = pg_gen_prepare(m, &s, 0, &g, &quiet) == 0;
    pg_gen_free(g);
    pg_schedule_free(&s);
    return ok;
}

int pg_balance_split(ir_model *m, const pg_profile *prof, pg_block_split *bs)
{
    ir_train *t = &m->train;
    memset(bs, 0, sizeof *bs);
    if (!m->balanced || t->schedule == SCHED_FILE || t->schedule == SCHED_AUTO)
        return 0;
    int n = count_compute(m);
    int *minmax = malloc((size_t)(n + 1) * sizeof *minmax), *other = malloc((size_t)(n + 1) * sizeof *other);
    if (!minmax || !other) {
        free(minmax);
        free(other);
        return -1;
    }
    for (int i = 0, j = 0; i < m->nlayers; i++)
        if (is_compute(&m->layers[i]))
            minmax[j++] = m->layers[i].chunk;
    int nchunks = m->nchunks, nstages = m->nstages;
    ir_placement pl = m->placement;
    int rc = pg_balance_choose(m, prof, nchunks, nstages, pl, PG_BALANCE_ENUM_MAX, NULL, other, NULL, bs);
    if (rc < 0) {
        free(minmax);
        free(other);
        return -1;
    }
    int ok = rc == 0;
    if (ok) {
        pg_progress("the split into %d stages of %d layers (%d with compute) chosen by the predicted step", nstages,
                    m->nlayers, n);
        ok = pipeline_accepts(m);
    }
    if (!ok && rc == 0 && bs->has_other) {
        /* the pipeline refuses the one taken: the other of the two (whole blocks, inside a block) */
        pg_model_repartition(m, nchunks, nstages, pl, other);
        bs->taken_inside = !bs->taken_inside;
        bs->reason = PG_BLOCKS_REFUSED;
        if (bs->taken_inside)
            pg_split_cuts(m, other, &bs->cut_before);
        ok = pipeline_accepts(m);
    }
    if (!ok) {
        pg_model_repartition(m, nchunks, nstages, pl, minmax); /* the checker accepted this one */
        bs->considered = 0; /* no choice of the search's to report */
    }
    free(minmax);
    free(other);
    return 0;
}

void pg_block_split_report(const pg_block_split *bs, const ir_model *m, FILE *out)
{
    if (!bs->considered)
        return;
    const char *unit = pg_cost_unit(bs->seconds), *per = bs->nchunks == bs->nstages ? "stage" : "chunk";
    char ws[48], is[48], counts[400];
    size_t o = 0;
    counts[0] = 0;
    for (int k = 0; k < bs->nchunks && k < 64 && o < sizeof counts; k++)
        o += (size_t)snprintf(counts + o, sizeof counts - o, "%s%d", k ? "+" : "", bs->per_chunk[k]);
    pg_fmt_si(ws, sizeof ws, bs->whole_step, unit);
    pg_fmt_si(is, sizeof is, bs->inside_step, unit);
    double gain = 100.0 * (1.0 - bs->inside_step / bs->whole_step);
    if (!bs->taken_inside) {
        fprintf(out, "split: whole blocks per %s (%s of %d repeat instances), predicted step %s; ", per, counts,
                m->ninstances, ws);
        if (bs->reason == PG_BLOCKS_WITHIN_MARGIN)
            fprintf(out, "a split inside a block would gain %.3g%%, not more than block_margin %g%%\n", gain,
                    100.0 * bs->margin);
        else if (bs->reason == PG_BLOCKS_REFUSED)
            fprintf(out, "the split inside a block (%s) was refused by the schedule or the memory plan\n", is);
        else
            fprintf(out, "the search found no faster split inside a block\n");
        return;
    }
    const ir_layer *a = NULL, *b = NULL;
    for (int i = 0, j = 0; i < m->nlayers && bs->cut_before > 0; i++) {
        if (!is_compute(&m->layers[i]))
            continue;
        if (j == bs->cut_before - 1)
            a = &m->layers[i];
        if (j == bs->cut_before)
            b = &m->layers[i];
        j++;
    }
    fprintf(out, "split: inside a block (%s | %s), predicted step %s; ", a ? a->name : "?", b ? b->name : "?", is);
    switch (bs->reason) {
    case PG_BLOCKS_GAIN:
        fprintf(out, "%.3g%% faster than whole blocks per %s (%s of %d repeat instances, %s), more than "
                "block_margin %g%%\n", gain, per, counts, m->ninstances, ws, 100.0 * bs->margin);
        break;
    case PG_BLOCKS_TOO_FEW:
        fprintf(out, "%d whole repeat instances and layers outside them cannot fill %d %ss\n", bs->whole_units,
                bs->nchunks, per);
        break;
    case PG_BLOCKS_REFUSED:
        fprintf(out, "the whole-block split (%s) was refused by the schedule or the memory plan\n", ws);
        break;
    default:
        fprintf(out, "no split of whole blocks can run (each needs a `tie` the model lacks)\n");
        break;
    }
}

/* A step for JSON: null when there is none. */
static void json_step(FILE *o, double v)
{
    if (isfinite(v))
        fprintf(o, "%.17g", v);
    else
        fprintf(o, "null");
}

char *pg_block_split_json(const pg_block_split *bs)
{
    static const char *const reasons[] = {
        [PG_BLOCKS_NONE_FASTER] = "none_faster", [PG_BLOCKS_WITHIN_MARGIN] = "within_margin",
        [PG_BLOCKS_GAIN] = "gain", [PG_BLOCKS_TOO_FEW] = "too_few", [PG_BLOCKS_NONE_RUNS] = "none_runs",
        [PG_BLOCKS_REFUSED] = "refused", [PG_BLOCKS_MEMORY] = "memory",
    };
    char *text = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&text, &len);
    if (!o)
        return NULL;
    fprintf(o, "{\"taken\": \"%s\", \"reason\": \"%s\", \"margin\": %.15g, \"unit\": \"%s\", \"whole_step\": ",
            bs->taken_inside ? "inside" : "whole", reasons[bs->reason], bs->margin, bs->seconds ? "s" : "flop");
    json_step(o, bs->whole_step);
    fprintf(o, ", \"inside_step\": ");
    json_step(o, bs->inside_step);
    fprintf(o, ", \"whole_instances_per_chunk\": [");
    for (int k = 0; k < bs->nchunks && k < 64 && isfinite(bs->whole_step); k++)
        fprintf(o, "%s%d", k ? ", " : "", bs->per_chunk[k]);
    fprintf(o, "]}");
    if (fclose(o) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

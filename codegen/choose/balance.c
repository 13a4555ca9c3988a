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
 * whole pass moves none. */
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
            while (k + 1 < e->nchunks && start[k + 1] <= sp->layer[u])
                k++;
            int st = pg_placement_stage(e->pl, k, e->nchunks, e->nstages);
            if (st0 >= 0 && st != st0)
                return INFINITY;
            st0 = st;
        }
    }
    pg_sched_costs c = e->base;
    for (int k = 0; k < e->nchunks && k < 64; k++) {
        int lo = k ? e->pos[start[k]] : 0, hi = k + 1 < e->nchunks ? e->pos[start[k + 1]] : L;
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
    for (int pos = start[b - 1] + 1; pos <= e->n - (e->nchunks - b); pos++) {
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
    int lo = start[b - 1] + 1, hi = b + 1 < e->nchunks ? start[b + 1] - 1 : e->n - 1;
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
    int chi = c + 1 < e->nchunks ? start[c + 1] - 1 : e->n - 1;
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

int pg_balance_search(ir_model *m, const pg_profile *prof, int nchunks, int nstages, ir_placement pl, long max_enum,
                      int *chunk_of, double *step)
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
    int rc = -1, built = 0;
    e.chunk_of = malloc((size_t)(e.n + 1) * sizeof *e.chunk_of);
    if (!start || !minmax || !e.chunk_of || nchunks < 1 || nchunks > e.n || nchunks > 64 ||
        pg_balance_chunks(m, prof, nchunks, minmax) != 0 || eval_prepare(&e) != 0)
        goto out;
    if (build_skeleton(m, nchunks, nstages, pl, &e.skel) != 0)
        goto out;
    built = 1;
    for (int j = 0, c = 0; j < e.n; j++)
        if (j == 0 || minmax[j] != minmax[j - 1])
            start[c++] = j;
    double best = descend(&e, start);
    if (count_splits(e.n, nchunks, max_enum) <= max_enum) {
        /* few enough to try them all: the optimum (min-max's descent as the bar) */
        int *cur = malloc((size_t)(nchunks + 1) * sizeof *cur);
        if (!cur)
            goto out;
        cur[0] = 0;
        enumerate_splits(&e, cur, 1, &best, start);
        free(cur);
    }
    if (!isfinite(best))
        goto out;
    starts_to_chunks(start, nchunks, e.n, e.chunk_of);
    pg_model_repartition(m, nchunks, nstages, pl, e.chunk_of);
    if (chunk_of)
        memcpy(chunk_of, e.chunk_of, (size_t)e.n * sizeof *chunk_of);
    if (step)
        *step = best;
    rc = 0;
out:
    if (built)
        pg_schedule_free(&e.skel);
    eval_free(&e);
    free(start);
    free(minmax);
    free(e.chunk_of);
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

int pg_balance_split(ir_model *m, const pg_profile *prof)
{
    ir_train *t = &m->train;
    if (!m->balanced || t->schedule == SCHED_FILE || t->schedule == SCHED_AUTO)
        return 0;
    int n = count_compute(m);
    int *minmax = malloc((size_t)(n + 1) * sizeof *minmax);
    if (!minmax)
        return -1;
    for (int i = 0, j = 0; i < m->nlayers; i++)
        if (is_compute(&m->layers[i]))
            minmax[j++] = m->layers[i].chunk;
    int nchunks = m->nchunks, nstages = m->nstages;
    ir_placement pl = m->placement;
    int searched = pg_balance_search(m, prof, nchunks, nstages, pl, PG_BALANCE_ENUM_MAX, NULL, NULL) == 0;
    if (searched)
        pg_progress("the split into %d stages of %d layers (%d with compute) chosen by the predicted step", nstages,
                    m->nlayers, n);
    if (!searched || !pipeline_accepts(m))
        pg_model_repartition(m, nchunks, nstages, pl, minmax); /* the checker accepted this one */
    free(minmax);
    return 0;
}

/* codegen/choose/balance.h — splits and schedules chosen by the predicted step: the
 * split of `stages = N` that the model's schedule runs fastest (balance.c),
 * and `schedule = auto`, the fastest schedule and split whose exact arena fits
 * the `memory` budget of every stage (auto.c). Both predict by the cost model
 * of dsl/cost.h (estimated flops, or a --balance profile's seconds) through
 * the schedule simulation of predict.c, and change the checked model in place
 * (pg_model_repartition). */
#ifndef PG_BALANCE_H
#define PG_BALANCE_H

#include <stdint.h>
#include <stdio.h>
#include "cost.h"
#include "diag.h"
#include "ir.h"

/* Splits timed at most by pg_balance_split and auto: C(75, 3) = 67525 for
 * GPT-2 small's 4 stages, half a second. */
#define PG_BALANCE_ENUM_MAX 100000L

/* The split of m's compute layers into nchunks chunks on nstages under pl
 * for the schedule in m->train that gives the shortest predicted step. When
 * there are at most max_enum splits, every one is timed (the first best in
 * order wins); otherwise, from the split that minimises the largest chunk's
 * cost (pg_balance_chunks), each boundary in turn moves to its best place
 * between its neighbours until no move shortens the step (ties keep the
 * earlier place). Deterministic. m is left with that split; chunk_of (per
 * compute layer, may be NULL) and *step (may be NULL) receive it. -1 when out
 * of memory or when no split can run (too few layers, or every split needs a
 * tie the model lacks). */
int pg_balance_search(ir_model *m, const pg_profile *prof, int nchunks, int nstages, ir_placement pl, long max_enum,
                      int *chunk_of, double *step);

/* `stages = N` without splits (m->balanced) under a built-in schedule: the
 * split pg_balance_search finds, when the whole pipeline (schedule, memory
 * plan) accepts it; otherwise the min-max split stays. 0, or -1 out of memory. */
int pg_balance_split(ir_model *m, const pg_profile *prof);

/* ---- schedule = auto (auto.c) ------------------------------------------------ */

typedef struct pg_auto_cand {
    ir_schedule schedule;
    int interleave;
    ir_placement placement;
    int nchunks, nstages;
    const char *split;      /* "yours" (the .pipe's splits), "balanced" (pg_balance_search), "min-max" */
    int *chunk_of;          /* owned: compute layer -> chunk */
    int ok;                 /* built, verified and planned */
    char refused[200];      /* else: why not (the first error) */
    int64_t arena[64];      /* bytes per stage */
    int64_t arena_max;
    double step, bubble;    /* predicted; bubble over all stages */
    int fits;               /* arena_max <= the budget */
} pg_auto_cand;

typedef struct pg_auto {
    int n;
    pg_auto_cand *cand;     /* owned, [n], in the order they were tried */
    int chosen;             /* index, -1 when none fits */
    int64_t memory;         /* the budget per stage */
    int seconds;            /* steps are seconds (a profile), else flops */
} pg_auto;

/* Resolve m's `schedule = auto`: try every candidate (gpipe, 1f1b, zb1,
 * interleaved(v) for the v the model admits, zbv; with `stages = N` each on
 * its balanced split and on the min-max split), plan each one's arena exactly
 * and predict its step, and set m to the fastest whose every stage fits
 * m->train.memory (the first on ties). When none fits, reports at the memory
 * setting the smallest per-stage arena any candidate reaches and returns -1.
 * *a keeps the table for pipegen plan and plan.json; free it with pg_auto_free. */
int pg_auto_resolve(ir_model *m, const pg_profile *prof, pg_auto *a, pg_diag *d);
/* The candidates table and the choice, as `pipegen plan` prints them. */
void pg_auto_report(const pg_auto *a, FILE *out);
/* The table as a JSON object for plan.json (malloc'd), NULL out of memory. */
char *pg_auto_json(const pg_auto *a);
void pg_auto_free(pg_auto *a);

#endif

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

/* Why `stages = N` keeps whole repeat instances (transformer blocks) on each
 * stage or cuts one (pg_balance_choose). */
typedef enum pg_blocks_reason {
    PG_BLOCKS_NONE_FASTER,   /* whole: no split inside a block predicts a shorter step */
    PG_BLOCKS_WITHIN_MARGIN, /* whole: one inside is faster, by no more than block_margin */
    PG_BLOCKS_GAIN,          /* inside: faster than whole blocks by more than block_margin */
    PG_BLOCKS_TOO_FEW,       /* inside: too few instances (and layers outside them) for the chunks */
    PG_BLOCKS_NONE_RUNS,     /* inside: every whole-block split needs a tie the model lacks */
    PG_BLOCKS_REFUSED,       /* the other one: the schedule or memory plan refused the one preferred */
    PG_BLOCKS_MEMORY         /* inside: schedule = auto, only splits inside a block fit memory */
} pg_blocks_reason;

typedef struct pg_block_split {
    int considered;         /* the model has repeat instances a boundary could cut: a choice was made */
    int taken_inside;       /* the split taken cuts an instance */
    pg_blocks_reason reason;
    double margin;          /* m->train.block_margin */
    double whole_step, inside_step; /* the best predicted of each kind; INFINITY: none */
    int seconds;            /* steps are seconds (a profile), else flops */
    int nchunks, nstages;
    int whole_units;        /* instances plus compute layers outside them */
    int per_chunk[64];      /* the whole-block split's instances per chunk */
    int cut_before;         /* the split taken inside: the compute layer after its first cut */
    int has_other;          /* pg_balance_choose's other_of holds the other kind's best */
} pg_block_split;

/* The split of `stages = N` into nchunks on nstages: the best of
 * pg_balance_search's with boundaries only between whole repeat instances
 * (and around the compute layers outside them), and the best of all; the one
 * that cuts an instance only when its predicted step is shorter by more than
 * m->train.block_margin (or no whole-block split can run). A model without
 * repeat instances that a boundary could cut gets pg_balance_search's split.
 * m is left with the split taken; chunk_of (NULL or [compute layers]) receives
 * it, other_of (NULL or as large) the best of the other kind when there is one
 * (bs->has_other), *step (may be NULL) its prediction. 0; 1 when no split can
 * run; -1 out of memory. */
int pg_balance_choose(ir_model *m, const pg_profile *prof, int nchunks, int nstages, ir_placement pl, long max_enum,
                      int *chunk_of, int *other_of, double *step, pg_block_split *bs);

/* The cuts of repeat instances in the split chunk_of (per compute layer),
 * -1 out of memory; *first_cut (may be NULL) the compute layer after the
 * first cut, -1 none. */
int pg_split_cuts(const ir_model *m, const int *chunk_of, int *first_cut);

/* `stages = N` without splits (m->balanced) under a built-in schedule: the
 * split pg_balance_choose takes, when the whole pipeline (schedule, memory
 * plan) accepts it, else its other one; otherwise the min-max split stays.
 * *bs says what was chosen and why (bs->considered 0: nothing to say). 0, or
 * -1 out of memory. */
int pg_balance_split(ir_model *m, const pg_profile *prof, pg_block_split *bs);
/* One line for `pipegen plan` and `check`: whole blocks or inside one, and
 * why; nothing when !bs->considered. */
void pg_block_split_report(const pg_block_split *bs, const ir_model *m, FILE *out);
/* The same as a JSON object for plan.json (malloc'd): "taken" ("whole" or
 * "inside"), "reason", "margin", each kind's predicted step (null: none) and
 * the whole-block split's instances per chunk; NULL out of memory. */
char *pg_block_split_json(const pg_block_split *bs);

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
    int cuts;               /* its split cuts a repeat instance (a block) */
} pg_auto_cand;

typedef struct pg_auto {
    int n;
    pg_auto_cand *cand;     /* owned, [n], in the order they were tried */
    int chosen;             /* index, -1 when none fits */
    int64_t memory;         /* the budget per stage */
    int seconds;            /* steps are seconds (a profile), else flops */
    double margin;          /* block_margin: a candidate that cuts a block wins only by more */
    pg_blocks_reason blocks;/* with `stages = N` and blocks cut by some candidate: why the chosen one keeps
                               them whole (PG_BLOCKS_WITHIN_MARGIN) or cuts one (PG_BLOCKS_GAIN, _MEMORY);
                               PG_BLOCKS_NONE_FASTER: nothing to say */
    int rival;              /* the fastest fitting candidate of the other kind (whole or cut), -1 none */
} pg_auto;

/* Resolve m's `schedule = auto`: try every candidate (gpipe, 1f1b, zb1,
 * interleaved(v) for the v the model admits, zbv; with `stages = N` each on
 * its balanced split (pg_balance_choose's, and its other one: whole blocks
 * or inside a block) and on the min-max split), plan each one's arena exactly
 * and predict its step, and set m to the fastest whose every stage fits
 * m->train.memory (the first on ties); a candidate that cuts a repeat
 * instance only when it is faster than every fitting whole-block one by more
 * than block_margin, or none of those fits. When none fits, reports at the memory
 * setting the smallest per-stage arena any candidate reaches and returns -1.
 * *a keeps the table for pipegen plan and plan.json; free it with pg_auto_free. */
int pg_auto_resolve(ir_model *m, const pg_profile *prof, pg_auto *a, pg_diag *d);
/* The candidates table and the choice, as `pipegen plan` prints them. */
void pg_auto_report(const pg_auto *a, FILE *out);
/* The choice alone (its `chosen:` line, with whole blocks against cut ones), as `pipegen check` prints it. */
void pg_auto_chosen_report(const pg_auto *a, FILE *out);
/* The table as a JSON object for plan.json (malloc'd), NULL out of memory. */
char *pg_auto_json(const pg_auto *a);
void pg_auto_free(pg_auto *a);

#endif

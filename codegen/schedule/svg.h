/* codegen/schedule/svg.h — predicted timelines: the per-chunk costs a schedule is
 * timed with (from the cost model of dsl/cost.h), a per-stage summary, and
 * the SVG picture `pipegen plan --svg`, `pipegen schedule --svg` and `pipegen
 * trace --svg` draw (one row per stage, F / B / W boxes labelled with their
 * micro-batch, and their chunk when a stage runs several, shaded by the
 * chunk's place on its stage; sends and receives (a receive with its wait)
 * in the lower half, the step's end (tie gradients, the verdict, the clip,
 * the optimizer) and a measured step's batch loading, its end and the work
 * between steps (log line, evaluation, stop exchange, checkpoint) where they take time;
 * idle time left empty; bubble in the title, an axis in seconds or flops and
 * a legend in lines as wide as the plot; the width grows with the title and
 * the axis labels). Byte-stable. */
#ifndef PG_SVG_H
#define PG_SVG_H

#include <stdio.h>
#include "cost.h"
#include "schedule/schedule.h"

/* Per-chunk F/B/W costs of one (average-sized) micro-batch: measured seconds
 * when prof covers the model's layers, else estimated flops; a checkpointed
 * micro-batch's B adds the recomputed forward. Messages are free unless prof
 * has measured them ("messages", --profile). Returns 1 when the costs are
 * seconds, 0 when flops. */
int pg_sched_costs_of_model(const ir_model *m, const pg_profile *prof, pg_sched_costs *c);
/* The first compute layer of m that prof has no times for (NULL: it has
 * them all, or prof is NULL), *missing how many lack them: a profile that
 * lacks any is not used for the costs above (the cost model is). */
const char *pg_profile_missing(const ir_model *m, const pg_profile *prof, int *missing);

/* "s" or "flop": the unit of a step time predicted with those costs. */
const char *pg_cost_unit(int seconds);
/* A value with an SI prefix and unit, 4 significant digits: "1.25 Gflop", "3.2 ms". */
void pg_fmt_si(char *buf, size_t n, double v, const char *unit);

/* `pipegen plan`'s prediction: the stages' layers (the chosen splits), each
 * stage's predicted compute per step, busy share and bubble, and the step. */
void pg_schedule_report(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, int seconds, FILE *out);

/* Writes the picture; 0, or -1 when the schedule cannot be simulated or out
 * of memory. seconds: the costs are seconds (else flops). */
int pg_schedule_svg(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, int seconds, FILE *out);

/* One timeline, simulated or measured (pipegen trace): the same picture. */
#define PG_TIMELINE_DP (PG_STEP_KIND_COUNT + 1)   /* a box of the data-parallel reduction (a measured pp x dp step) */
/* a measured step's start: the batch loaded, the gradients zeroed (past the
 * reduction's parts, which pipegen trace numbers from PG_TIMELINE_DP on); its
 * end after the last action (the device waited for); and after it, until the
 * stage's next step, the work between steps, with its parts drawn over it:
 * the log line, an evaluation, the stop exchange (--save-on-exit), the
 * checkpoint */
#define PG_TIMELINE_DATA (PG_TIMELINE_DP + 8)
#define PG_TIMELINE_END (PG_TIMELINE_DATA + 1)
#define PG_TIMELINE_BETWEEN (PG_TIMELINE_DATA + 2)
#define PG_TIMELINE_LOG (PG_TIMELINE_DATA + 3)
#define PG_TIMELINE_EVAL (PG_TIMELINE_DATA + 4)
#define PG_TIMELINE_STOP (PG_TIMELINE_DATA + 5)
#define PG_TIMELINE_CKPT (PG_TIMELINE_DATA + 6)
typedef struct pg_timeline_box {
    int stage, kind;     /* the row; pg_act_kind, PG_TIMELINE_DP or PG_TIMELINE_DATA .. PG_TIMELINE_CKPT */
    int mb, chunk;       /* -1 for per-step actions */
    double start, dur;   /* from the step's start */
    int other_step;      /* a measured picture's neighbours, drawn faded: -1 the step before, 1 the step after */
} pg_timeline_box;
typedef struct pg_timeline {
    const char *model, *schedule; /* the title: "mlp: 1f1b, ..." */
    int nstages, nmb;
    double step;                  /* the time drawn: the step */
    const double *busy;           /* [nstages x replicas]: compute time of each row */
    int seconds;                  /* times are seconds (else flops) */
    const char *source;           /* where the times come from, for the title */
    int nbox;
    const pg_timeline_box *box;   /* drawn in this order */
    int replicas;                 /* rows: nstages x replicas, row = replica x nstages + stage, labelled
                                     "stage k replica q" when replicas > 1 (a pp x dp run) */
} pg_timeline;
void pg_timeline_svg(const pg_timeline *t, FILE *out);

/* pg_schedule_svg into the file path; errors (`path: error: ...`) through d. */
int pg_schedule_svg_write(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, int seconds,
                          const char *path, pg_diag *d);

#endif

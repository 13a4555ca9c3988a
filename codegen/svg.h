/* codegen/svg.h — predicted timelines: the per-chunk costs a schedule is
 * timed with (from the cost model of dsl/cost.h), a per-stage summary, and
 * the SVG picture `pipegen plan --svg` and `pipegen schedule --svg` draw (one
 * row per stage, F / B / W boxes with their micro-batch, idle time left
 * empty, bubble in the title, a time axis and a legend). Byte-stable. */
#ifndef PG_SVG_H
#define PG_SVG_H

#include <stdio.h>
#include "cost.h"
#include "schedule.h"

/* Per-chunk F/B/W costs of one (average-sized) micro-batch: measured seconds
 * when prof covers the model's layers, else estimated flops. Messages are
 * free. Returns 1 when the costs are seconds, 0 when flops. */
int pg_sched_costs_of_model(const ir_model *m, const pg_profile *prof, pg_sched_costs *c);

/* "s" or "flop": the unit of a step time predicted with those costs. */
const char *pg_cost_unit(int seconds);

/* `pipegen plan`'s prediction: the stages' layers (the chosen splits), each
 * stage's predicted compute per step, busy share and bubble, and the step. */
void pg_schedule_report(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, int seconds, FILE *out);

/* Writes the picture; 0, or -1 when the schedule cannot be simulated or out
 * of memory. seconds: the costs are seconds (else flops). */
int pg_schedule_svg(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, int seconds, FILE *out);

/* pg_schedule_svg into the file path; errors (`path: error: ...`) through d. */
int pg_schedule_svg_write(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, int seconds,
                          const char *path, pg_diag *d);

#endif

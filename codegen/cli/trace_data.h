/* codegen/cli/trace_data.h — a run's --trace as `pipegen trace` reads it
 * (cmd_trace.c), and what else is computed from it: trace_compare.c sets
 * each action beside the same action of the prediction's simulation. */
#ifndef PG_TRACE_DATA_H
#define PG_TRACE_DATA_H

#include <stdio.h>
#include "schedule/schedule.h"

typedef struct tev {
    int row, step, kind;   /* row: the process (pid = replica x stages + stage); kind: -1 step, else
                              pg_act_kind (0 F, 1 B, 2 W, ...), DP_KIND + i a part of the reduction, or
                              PG_STEP_KIND_COUNT unknown */
    int mb, chunk;
    int action;            /* the action's index in its stage's list (args.action), -1 when not given */
    double t0, t1;         /* seconds */
} tev;

typedef struct trace {
    int nstages, replicas, nrows, nmb, first, last; /* steps first..last (1-based); rows = stages x replicas */
    char *model;
    int device_rows, listed_rows; /* otherData's device_time: processes whose spans are device time, of those listed */
    int n;
    tev *ev;
} trace;

/* A time as `pipegen trace` prints it: "1.234 s", "12.34 ms", "123.4 us". */
void trace_fmt_time(char *buf, size_t n, double s);

/* `pipegen trace`'s "measured against simulated" lines (trace_compare.c):
 * per stage, each action's measured span (from the end of the action before
 * it) summed by what it is, beside the same action's span in the simulation
 * of s by the costs c (the prediction's), per step over the trace's steps
 * (the run's first left out when there are others). A trace of replicas, or
 * one whose actions are not s's, gets a line saying why instead. 0, or -1
 * when out of memory (said on stderr). */
int trace_compare(const trace *t, const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, FILE *out);

#endif

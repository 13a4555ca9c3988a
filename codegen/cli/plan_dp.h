/* codegen/cli/plan_dp.h — `pipegen plan`'s pp x dp table: what one process of a run
 * of D data-parallel replicas holds and sends per step, per stage. */
#ifndef PG_PLAN_DP_H
#define PG_PLAN_DP_H

#include <stdio.h>

#include "gen/emit.h"
#include "ir.h"

/* For D = dp, or 1, 2, 4 and 8 when dp is 0: per stage its arena (and the
 * parameters, gradients and optimizer state in it, from plan.json's memory),
 * the reduction's buffers and send rings and the bytes sent per step, by
 * runtime/core/dp_bytes.h (the formulas dp.c sizes them with). Counts the
 * runtime refuses (D not dividing the batch, fewer rows than micro-batches)
 * are left out of the default table with the reason; an explicit dp among
 * them is an error on stderr naming it. 0, or 1 after an error. */
int pg_plan_dp_report(const ir_model *m, const pg_gen *g, int dp, FILE *out);
/* The explicit dp's error alone (before anything is printed): 0, or 1 after it. */
int pg_plan_dp_check(const ir_model *m, int dp);

#endif

/* dsl/cost.h — the one cost model of pipegen: what a layer's forward (F),
 * input-gradient (B) and weight-gradient (W) passes cost. The balancer of
 * `stages = N` (dsl/stages.c) splits the model by it, the schedule predictor
 * and the timeline picture (codegen/) time actions by it.
 *
 * Two sources, one interface:
 *  - estimated: floating-point operations per sample, from the layer's shapes
 *    (model units: flops, not seconds; see pg_layer_flops in cost.c);
 *  - measured: a profile JSON file written by a stage binary's `--profile`
 *    (or by hand), seconds per micro-batch of the model's batch/microbatches:
 *
 *      {"layers": [{"name": "layer0", "fwd_s": 1.5e-4, "bwd_s": 3.1e-4}, ...]}
 *
 *    `name` is the layer's qualified name as `pipegen check` prints it; bwd_s
 *    is B + W together (split evenly for layers with parameters, all B for
 *    the others) unless the layer also gives "bwd_b_s" and "bwd_w_s" (B
 *    without any recomputed forward, and W), as --profile writes. An optional
 *    top-level "messages": {"latency_s": L, "bytes_per_s": R} times each
 *    message L + bytes / R (R 0 or absent: L alone). Other keys are ignored;
 *    every compute layer must appear. */
#ifndef PG_COST_H
#define PG_COST_H

#include "ast.h"
#include "diag.h"
#include "ir.h"

typedef struct pg_layer_cost {
    double fwd, bwd_b, bwd_w;
} pg_layer_cost;

typedef struct pg_profile_entry {
    char *name;          /* owned */
    double fwd_s, bwd_s;
    double bwd_b_s, bwd_w_s; /* the measured split of bwd_s; -1 when not given */
} pg_profile_entry;

typedef struct pg_profile {
    int n;
    pg_profile_entry *e; /* owned, [n] */
    char *path;          /* owned, for messages */
    int has_messages;    /* "messages" gave latency_s */
    double latency_s, bytes_per_s;
} pg_profile;

/* Read a profile; located errors (file:line:col) through d. 0 or -1. */
int pg_profile_read(const char *path, pg_profile *p, pg_diag *d);
void pg_profile_free(pg_profile *p);
/* The entry for a layer name, or NULL. */
const pg_profile_entry *pg_profile_find(const pg_profile *p, const char *name);

/* Estimated flops per sample of one layer's F, B and W (0 for stash/pop of
 * a skip that is only saved). */
pg_layer_cost pg_layer_flops(const ir_layer *L);
/* The cost of one layer: measured seconds per micro-batch when prof has it,
 * else pg_layer_flops times rows (the rows of one micro-batch). */
pg_layer_cost pg_layer_cost_of(const ir_layer *L, const pg_profile *prof, double rows);

/* pg_check (ir.h), but `stages = N` without splits is balanced by the
 * measured times of prof (NULL: by the estimate, as pg_check). */
int pg_check_profiled(const pg_ast *ast, ir_model *m, pg_diag *d, const pg_profile *prof);

#endif

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
 *    without any recomputed forward, and W), as --profile writes; an optional
 *    "recompute_s" is the forward a checkpointed micro-batch's B reruns, as
 *    measured (absent: fwd_s). An optional top-level "messages":
 *    {"latency_s": L, "bytes_per_s": R} times each message's transit L +
 *    bytes / R (R 0 or absent: L alone); its optional "send_latency_s" and
 *    "send_bytes_per_s" (or, older, "send_s") what a send costs its sender,
 *    "recv_latency_s" / "recv_bytes_per_s" what a receive of a message
 *    already there costs its receiver (absent: PG_SEND_DEFAULT_*). An optional top-level "stage_costs":
 *    [{"stage": k, "optimizer_s": .., "grad_norm_s": .., "verdict_s": ..,
 *    "tie_s": .., "step_start_s": .., "step_end_s": ..}] gives what a stage's
 *    OPT_STEP, GRAD_NORM and VERDICT and the folds and sums of its tie
 *    receives cost the stage itself (waits left out) and its time before the
 *    first and after the last action of a step, and optionally "send_s":
 *    what the stage's activation, gradient and skip sends cost it on average
 *    (then instead of the "messages" fit over every stage's sends: a send
 *    that wakes a receiver waiting in its RECV costs more, on a busy machine
 *    the woken process can take the sender's core, and which stage's sends
 *    find their receivers waiting depends on the schedule); a profile without it (older)
 *    gives only "stage_times"' "optimizer_s". Optional "model" and
 *    "plan_hash" (strings) say what it was measured on. Every value must be
 *    finite, >= 0 and not absurd (at most 1e6 s; rates at most 1e18
 *    bytes/s): refused at its line and column. Other keys are ignored; every
 *    compute layer must appear. */
#ifndef PG_COST_H
#define PG_COST_H

#include "ast.h"
#include "diag.h"
#include "ir.h"

typedef struct pg_layer_cost {
    double fwd, bwd_b, bwd_w;
    double recompute; /* the forward a checkpointed B reruns (measured, else fwd) */
} pg_layer_cost;

typedef struct pg_profile_entry {
    char *name;          /* owned */
    double fwd_s, bwd_s;
    double bwd_b_s, bwd_w_s; /* the measured split of bwd_s; -1 when not given */
    double recompute_s;  /* -1 when not given */
} pg_profile_entry;

#define PG_PROFILE_MAX_STAGES 64

/* What a send costs its sender (and a receive its receiver) when the profile
 * does not say (a hand-written or older profile): one system call and a copy
 * of the bytes into (out of) the socket buffer at memory speed. Modelled, not
 * measured. */
#define PG_SEND_DEFAULT_LATENCY_S 20e-6
#define PG_SEND_DEFAULT_BYTES_PER_S 5e9

typedef struct pg_stage_cost {
    double optimizer_s, grad_norm_s, verdict_s, tie_s; /* the stage's own time, waits left out */
    double step_start_s, step_end_s;                   /* before the first / after the last action */
    double send_s;                                     /* its micro-batches' sends' mean cost to it */
    int has_send_s;                                    /* 1: send_s given */
} pg_stage_cost;

typedef struct pg_profile {
    int n;
    pg_profile_entry *e; /* owned, [n] */
    char *path;          /* owned, for messages */
    int has_messages;    /* "messages" gave latency_s */
    double latency_s, bytes_per_s;
    int has_send_cost;   /* "messages" gave send_latency_s (or send_s) */
    double send_latency_s, send_bytes_per_s;
    int has_recv_cost;   /* "messages" gave recv_latency_s */
    double recv_latency_s, recv_bytes_per_s;
    int has_stage_costs; /* 1: "stage_costs"; 2: only "stage_times"' optimizer_s */
    pg_stage_cost stage[PG_PROFILE_MAX_STAGES]; /* by stage; zero where not given */
    char *model, *plan_hash; /* owned: what it was measured on ("model", "plan_hash"; NULL when not said) */
} pg_profile;

/* Read a profile; located errors (file:line:col) through d. 0 or -1. */
int pg_profile_read(const char *path, pg_profile *p, pg_diag *d);
void pg_profile_free(pg_profile *p);
/* The entry for a layer name, or NULL. */
const pg_profile_entry *pg_profile_find(const pg_profile *p, const char *name);

/* Estimated flops per sample of one layer's F, B and W (0 for stash/pop of
 * a skip that is only saved). */
pg_layer_cost pg_layer_flops(const ir_layer *L);
/* The same for the kinds of convolutional networks (LK_CONV2D on; cost_conv.c). */
pg_layer_cost pg_layer_flops_conv(const ir_layer *L);
/* The cost of one layer: measured seconds per micro-batch when prof has it,
 * else pg_layer_flops times rows (the rows of one micro-batch). */
pg_layer_cost pg_layer_cost_of(const ir_layer *L, const pg_profile *prof, double rows);

/* The contiguous split of m's compute layers (stash and pop excluded) into
 * nchunks that minimises the largest chunk's F + B + W cost (by prof, NULL:
 * the estimate): chunk_of[j] for compute layer j. -1 when nchunks is not in
 * 1 .. the compute layer count, or out of memory. */
int pg_balance_chunks(const ir_model *m, const pg_profile *prof, int nchunks, int *chunk_of);

/* pg_check (ir.h), but `stages = N` without splits is balanced by the
 * measured times of prof (NULL: by the estimate, as pg_check). */
int pg_check_profiled(const pg_ast *ast, ir_model *m, pg_diag *d, const pg_profile *prof);

#endif

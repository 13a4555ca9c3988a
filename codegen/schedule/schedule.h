/* codegen/schedule/schedule.h — a schedule is data: for each stage, the ordered list of
 * actions it performs in one training step. Built-in schedules (gpipe, 1f1b,
 * interleaved(v), zb1) and user CSV files produce the compute actions; a pass
 * inserts the communication; the verifier simulates all stages together and
 * rejects lists that would hang or leave a message unmatched.
 *
 * Communication semantics the verifier assumes and the runtimes honour:
 *  - a SEND never blocks (the transport copies it into a buffer sized by the
 *    plan for one step's traffic to that peer);
 *  - a RECV blocks until the matching SEND has happened;
 *  - messages between two stages arrive in the order they were sent, and the
 *    n-th RECV from a peer must match the n-th SEND to it in kind, mb, chunk.
 *    The communication pass pairs each RECV with its SEND by identity (kind,
 *    micro-batch, chunk or skip) and orders every stage's sends to a peer as
 *    that peer receives them, so the wire order is the receive order.
 */
#ifndef PG_SCHEDULE_H
#define PG_SCHEDULE_H

#include <stdio.h>
#include "ir.h"
#include "diag.h"
#include "pg_contract.h"

/* The action kinds are the contract's (runtime/core/pg_contract.h: PG_FWD,
 * PG_RECV_GRAD, ..., with what each does), shared with the runtime. */
typedef pg_step_kind pg_act_kind;

typedef struct pg_act {
    pg_act_kind kind;
    int mb;      /* micro-batch, -1 for per-step actions */
    int chunk;   /* model chunk, -1 for per-step actions */
    int peer;    /* stage on the other end of a SEND/RECV, else -1 */
    int skip;    /* skip index for *_SKIP*, else -1 */
    int param;   /* tied param index for TIE_*, else -1 */
    int slot;    /* activation slot of (chunk, mb) on this stage for FWD/BWD_*, else -1 */
    int line;    /* line in pg_schedule.file it was read from; 0 when generated */
    int origin;  /* in a forward-only schedule: this action's index in the step's list it was
                    taken from (its slot, offset, bytes and tag are that action's); else -1 */
} pg_act;

typedef struct pg_stage_sched {
    int n, cap;
    pg_act *act;
    int nslots_per_chunk[64]; /* activation slots needed per local chunk, the stage's
                                 chunks in chunk order (set by pg_assign_slots) */
} pg_stage_sched;

typedef struct pg_schedule {
    int nstages, nchunks, nmb;
    ir_placement placement;  /* how chunk_stage was made */
    int chunk_stage[64];     /* [nchunks]: the stage that runs each chunk */
    pg_stage_sched *stage;  /* [nstages] */
    char *file;             /* owned: the CSV the actions came from, NULL for built-ins */
    int forward_only;       /* 1: evaluation's schedule (pg_schedule_forward_only): forwards, no step */
} pg_schedule;

/* The chunks stage st runs, in chunk order, into out[64]; returns how many. */
int pg_stage_chunks(const pg_schedule *s, int st, int *out);

/* "FWD", "RECV_GRAD", ...; and a readable form "RECV_GRAD(mb 3, chunk 1) from stage 3". */
const char *pg_act_name(pg_act_kind k);
const char *pg_act_str(const pg_act *a, char *buf, size_t n);
/* 1 for an action that sends one message to its peer (SEND_*, TIE_SEND,
 * TIE_GRAD_SEND, TIE_SUM_SEND, VERDICT_SEND), or receives one (the RECVs);
 * every other action is local work. */
int pg_act_is_send(pg_act_kind k);
int pg_act_is_recv(pg_act_kind k);
/* The send a receive of kind k meets (PG_RECV_GRAD -> PG_SEND_GRAD, ...); k otherwise. */
pg_act_kind pg_act_send_kind(pg_act_kind k);
/* What an action is part of, for the pictures (svg.c) and `pipegen trace`'s
 * breakdown: a compute pass, a micro-batch's message, the step's end by part. */
typedef enum pg_act_group {
    PG_GROUP_F, PG_GROUP_B, PG_GROUP_W, PG_GROUP_SEND, PG_GROUP_RECV, PG_GROUP_TIE, PG_GROUP_VERDICT,
    PG_GROUP_CLIP, PG_GROUP_OPT, PG_GROUP__COUNT
} pg_act_group;
pg_act_group pg_act_group_of(pg_act_kind k);

/* The model's schedule for messages and listings: "1f1b", "interleaved(2)",
 * "zbv", "file(x.csv)"; returns buf. */
const char *pg_schedule_name(const ir_model *m, char *buf, size_t n);

/* Compute actions of a built-in schedule (FWD/BWD_B/BWD_W only, no comms). */
int pg_schedule_builtin(const ir_model *m, pg_schedule *s, pg_diag *d);
/* Read compute actions from CSV (`stage,action,mb,chunk` per line, header line
 * first), with located errors; write any schedule in the same format (all actions). */
int pg_schedule_read_csv(const char *path, const ir_model *m, pg_schedule *s, pg_diag *d);
void pg_schedule_write_csv(const pg_schedule *s, FILE *out);
/* Insert activation/gradient/skip/tie/norm communication and OPT_STEP; then
 * order each stage's sends to a peer as the peer receives them. */
int pg_schedule_add_comms(const ir_model *m, pg_schedule *s);
/* Give every FWD/BWD its activation slot (free list per stage and chunk): a
 * slot is taken at FWD and given back after the last of the micro-batch's
 * BWD_W and the sends that read its buffers. */
void pg_assign_slots(pg_schedule *s);
/* Simulate all stages together. 0 when every RECV meets its SEND and all stages
 * finish; otherwise reports the unmatched actions or the wait cycle through d. */
int pg_schedule_verify(const ir_model *m, const pg_schedule *s, pg_diag *d);

/* Predicted timing from per-action costs (seconds): step time, and per stage
 * its busy time and bubble fraction. costs[k] for compute actions per chunk. */
typedef struct pg_sched_costs {
    double fwd[64], bwd_b[64], bwd_w[64]; /* per chunk */
    double send_latency, send_bytes_per_s; /* a message's transit: latency + bytes / rate (rate 0: latency) */
    int recompute;  /* 1: a checkpointed micro-batch's BWD_B also reruns its chunk's forward, rerun[chunk] */
    double rerun[64]; /* per chunk: that rerun forward */
    /* What the stages themselves spend outside F/B/W (all 0: the textbook model) */
    double send_cost_latency, send_cost_bytes_per_s; /* a SEND keeps its sender busy latency + bytes / rate */
    double recv_cost_latency, recv_cost_bytes_per_s; /* a RECV its receiver, once the message arrived */
    int has_send_own[64]; /* per stage: 1 when the profile measured what its activation, gradient and skip
                             SENDs cost it, send_own (then instead of send_cost_*) */
    double send_own[64];
    double opt[64], grad_norm[64], verdict[64];   /* per stage: its OPT_STEP, GRAD_NORM and VERDICT (local work) */
    double tie[64];                                /* per stage: what its tie receives add (the folds and sums),
                                                      spread over them, beyond a receive's cost */
    double step_start[64], step_end[64];           /* per stage: before the first, after the last action */
    /* The sizes of the messages at each chunk's boundaries, per row: the
     * elements of its first layer's input (SEND_GRAD) and of its last
     * layer's output (SEND_ACT). has_elems 0: the predictor finds them in the
     * model's layers for each message (pg_sched_costs_of_model sets them once). */
    int has_elems;
    double in_elems[64], out_elems[64];
} pg_sched_costs;
typedef struct pg_sched_prediction {
    double step_time;
    double busy[64], bubble[64];  /* per stage */
} pg_sched_prediction;
int pg_schedule_predict(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c,
                        pg_sched_prediction *out);

/* The decode schedule of generation with the KV cache (codegen/gen/gen_decode.c):
 * nmb micro-batches forward through the chunks as s places them. A run of
 * consecutive chunks on one stage is a group; each stage runs its groups in
 * chunk order, and within a group micro-batch by micro-batch through the
 * group's chunks (a chunk's output goes on to the next chunk of its stage at
 * once). The messages are the step's (pg_schedule_add_comms: activations and
 * skips, sends ordered as their peers receive them), without the ties' and
 * the step's end; verified as a forward-only schedule. One round of decoding
 * runs it once. 0, or -1 with the reason in d. */
int pg_schedule_decode(const ir_model *m, const pg_schedule *s, int nmb, pg_schedule *out, pg_diag *d);
/* The forward-only schedule of a built training schedule s, for evaluation
 * and prediction: each stage's FWD, SEND/RECV_ACT, SEND/RECV_SKIP and (the
 * users' copies of a transmitted tie must be the optimizer's latest value)
 * TIE_SEND/TIE_RECV, in s's order, each with its origin in s; then verified
 * as a forward-only schedule (every forward once, after its inputs; every
 * message received; no stage waits forever). Since each stage's list is a
 * subsequence of its training list, every buffer it uses is alive in the
 * memory plan at least as long as it needs. 0, or -1 with the reason in d. */
int pg_schedule_forward_only(const ir_model *m, const pg_schedule *s, pg_schedule *out, pg_diag *d);
/* Build the whole schedule of m: builtin or CSV, comms, slots, verify. */
int pg_schedule_build(const ir_model *m, pg_schedule *s, pg_diag *d);
void pg_schedule_free(pg_schedule *s);

#endif

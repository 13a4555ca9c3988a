/* codegen/schedule/sched_internal.h — helpers shared by the schedule files (schedule.c,
 * schedule_comms.c, schedule_csv.c, sched_sim.c, verify.c, predict.c); not
 * part of the interface other phases code against (that is schedule.h). */
#ifndef PG_SCHED_INTERNAL_H
#define PG_SCHED_INTERNAL_H

#include "schedule/schedule.h"

#define PG_SCHED_MAX_STAGES 64
#define PG_SCHED_MAX_CHUNKS 64

/* An action with every optional field at -1. */
pg_act pg_act_make(pg_act_kind k, int mb, int chunk);
/* Append a to stage st; -1 when out of memory. */
int pg_sched_push(pg_stage_sched *st, pg_act a);
/* Allocate s->stage for nstages empty lists, chunks placed by pl; -1 when out
 * of memory. */
int pg_sched_alloc(pg_schedule *s, int nstages, int nchunks, int nmb, ir_placement pl);
/* 1 for FWD, BWD_B, BWD_W. */
int pg_act_is_compute(pg_act_kind k);

/* Stage that holds chunk c. */
static inline int pg_chunk_stage(const pg_schedule *s, int c)
{
    return c >= 0 && c < s->nchunks && c < PG_SCHED_MAX_CHUNKS ? s->chunk_stage[c] : c % s->nstages;
}
/* 1 when a layer of chunk c uses parameter i of m. */
int pg_chunk_uses_param(const ir_model *m, int c, int i);
/* Chunk of layer i of m. */
static inline int pg_layer_chunk(const ir_model *m, int i) { return m->layers[i].chunk; }
/* Where a diagnostic about action a of the schedule points: its CSV line,
 * else the model's `schedule =` setting, else the model file. */
pg_loc pg_act_loc(const ir_model *m, const pg_schedule *s, const pg_act *a);

/* What action a of stage st costs under c (predict.c): its chunk's F/B/W
 * cost, the stage's VERDICT, GRAD_NORM or OPT_STEP time, a message's transit
 * time. */
double pg_act_cost(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, int st, const pg_act *a);
/* What a message keeps its own stage busy beyond that (sched_sim.h's own): a
 * SEND's cost to its sender, a RECV's to its receiver once the message is
 * there (a tie receive's folds and sums included); 0 for the others. */
double pg_act_own_cost(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, int st, const pg_act *a);
/* The stage holding the loss: the last chunk's. */
static inline int pg_loss_stage(const pg_schedule *s) { return s->nchunks > 0 ? pg_chunk_stage(s, s->nchunks - 1) : s->nstages - 1; }
/* 1 when micro-batch mb of nmb is checkpointed (its BWD_B recomputes the
 * forward): the rule of gen_prepare.c's mb_recompute table. */
int pg_mb_recomputes(const ir_model *m, int mb, int nmb);

#endif

/* codegen/schedule/sched_sim.h — runs every stage's action list together, as the
 * runtime would: a SEND (every action that sends: SEND_*, TIE_*SEND,
 * VERDICT_SEND) appends to the FIFO of its (sender, receiver) pair and never
 * blocks, a RECV waits for the head of the FIFO from its peer and must match
 * it; every other action (compute, VERDICT, GRAD_NORM, OPT_STEP) is local.
 * Used by the verifier (does it finish?) and by the predictor (when does it
 * finish?). Assumes the static checks of verify.c passed: kinds, peers,
 * params in range. */
#ifndef PG_SCHED_SIM_H
#define PG_SCHED_SIM_H

#include "schedule/sched_internal.h"

typedef enum pg_sim_status {
    SIM_OK,          /* every stage finished, every message received */
    SIM_MISMATCH,    /* a RECV met a message it does not match */
    SIM_DEADLOCK,    /* some stages wait forever */
    SIM_UNRECEIVED,  /* all finished but messages were left in a FIFO */
    SIM_NOMEM
} pg_sim_status;

typedef struct pg_sim_ref {
    int stage, idx;  /* action idx of stage */
} pg_sim_ref;

typedef struct pg_sim {
    /* in */
    const ir_model *m;
    const pg_schedule *s;
    double **dur;    /* optional [stage][action]: seconds a local action takes, or a
                        SEND's transfer time; NULL: untimed */
    double **start;  /* optional out [stage][action]: when the action began (a local
                        action's work, a SEND's transfer; a RECV: when its message arrived) */
    double **own;    /* optional [stage][action]: seconds a SEND keeps its sender busy
                        (its message still arrives dur after the SEND began), a RECV
                        its receiver once the message arrived */
    const double *clock0; /* optional [nstages]: each stage's clock at the start */
    pg_sim_ref **met;     /* optional out [stage][action]: for a RECV the SEND it met, else {-1, -1} */
    int *const *lend_slot; /* optional [stage][action] (untimed runs): the runtime's lent messages
                              (runtime/core/step.c). A message SEND with a slot >= 0 is lent from that
                              slot: its stage runs no compute action of the same slot (or of slot -1,
                              which waits for all) until the peer's RECV has taken it. -1 on a SEND:
                              copied, never waited for. */
    /* out */
    pg_sim_status status;
    pg_sim_ref recv, send;                 /* SIM_MISMATCH: the RECV and what it met */
    int pc[PG_SCHED_MAX_STAGES];           /* where each stage stopped (n: finished) */
    int wait_for[PG_SCHED_MAX_STAGES];     /* SIM_DEADLOCK: the stage it waits for, -1 finished */
    int nleft;                             /* SIM_UNRECEIVED: sends nobody received */
    pg_sim_ref *left;                      /* owned, [nleft] in stage, action order */
    double clock[PG_SCHED_MAX_STAGES];     /* when each stage finished (timed runs) */
    double busy[PG_SCHED_MAX_STAGES];      /* sum of its compute durations */
} pg_sim;

/* Returns sim->status. */
pg_sim_status pg_sim_run(pg_sim *sim);
void pg_sim_free(pg_sim *sim);

/* A timed run of s by the costs c (predict.c): allocates sim's dur, own and
 * start ([stage][action]), fills dur and own by c, runs. Returns
 * sim->status (SIM_NOMEM: out of memory); pg_sim_timed_free after, whatever
 * it returned. */
pg_sim_status pg_sim_run_timed(pg_sim *sim, const ir_model *m, const pg_schedule *s, const pg_sched_costs *c);
void pg_sim_timed_free(pg_sim *sim);
/* The step of a finished timed run: the latest stage end, each stage's
 * step_end included. */
double pg_sim_step_time(const pg_sim *sim, const pg_sched_costs *c);

/* 1 when recv (on its stage) accepts the message that send produced. */
int pg_sim_match(const pg_act *send, const pg_act *recv);

#endif

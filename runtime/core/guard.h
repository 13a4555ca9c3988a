/* runtime/core/guard.h — the stage program's defences against bad input and a
 * bad environment: memory too small for the arena, too few file descriptors,
 * a non-finite loss or gradient (stop, or skip the step on every stage:
 * --skip-nonfinite), and SIGINT/SIGTERM stopping every stage at the same step
 * after a final checkpoint (--save-on-exit); ids outside the vocabulary are
 * data.c's (pg_data_ids). Messages go to stderr. */
#ifndef PG_GUARD_H
#define PG_GUARD_H

#include <stddef.h>
#include <stdint.h>
#include "stage_run.h"

/* The verdict on one step (r->step_verdict). */
enum { PG_VERDICT_OK = 0, PG_VERDICT_SKIP = 1, PG_VERDICT_STOP = 2 };

/* 0 when the arena of arena_bytes (d's, or less with --zero 1: zero.c) fits
 * in the memory this process may use (MemAvailable, RLIMIT_AS, RLIMIT_DATA);
 * -1 with both numbers in err. */
int pg_guard_memory(const pg_stage_desc *d, int64_t arena_bytes, char *err, size_t errlen);

/* 0 when RLIMIT_NOFILE (ulimit -n) leaves room for the connections and files
 * a stage needs in a world of `world` processes (raising the soft limit up to
 * the hard one if it must); -1 with both numbers in err. */
int pg_guard_files(const pg_stage_desc *d, int world, char *err, size_t errlen);

/* Collective, after pg_net_init: every stage learns which stage holds the loss. */
int pg_guard_init(pg_run *r);

/* The step's verdict, made by the actions of the step's end (step.c), so
 * that all stages decide alike before any optimizer commits anything:
 * findings (VERDICT, once the stage's gradients are final): the sums of
 * squares of the gradients it owns into r->norms (and r->norm_in; without
 * clipping on the CPU only those of a non-finite gradient), what it
 * found (the loss stage: a non-finite loss; every stage: a non-finite
 * gradient) into its verdict message; give (VERDICT_SEND x): that message,
 * the word and the sums, to stage x->peer; take (VERDICT_RECV x): stage
 * x->peer's, its word ORed into the others and the sums of squares of what
 * it owns into r->norm_in; decide (the first GRAD_NORM / OPT_STEP, every
 * verdict in): r->step_verdict ok, or on any finding stop (skip with
 * --skip-nonfinite); the finder says what it found, the others who found
 * it. 0, or 1 after printing the failure (a receive's timeout names the
 * stage it waits for). */
int pg_guard_findings(pg_run *r, int64_t step, int seg); /* seg: the VERDICT action's index (its run of sums) */
int pg_guard_give(pg_run *r, int a, const pg_step_action *x, int64_t step);
int pg_guard_take(pg_run *r, int a, const pg_step_action *x, int64_t step);
int pg_guard_decide(pg_run *r, int a, const pg_step_action *x, int64_t step);
/* 0 when the n floats at v are finite; -1 with the first other one's index
 * (blocks of 64 tested at once, then the block that holds one, in order). */
int pg_guard_finite(const float *v, size_t n, size_t *bad);
/* The same, -1 with "WHAT, element I is nan" (inf, -inf) in err. */
int pg_guard_finite_msg(const float *v, size_t n, const char *what, char *err, size_t errlen);

/* --save-on-exit: catch SIGINT, SIGTERM and SIGHUP (taken as SIGTERM: the
 * terminal closed; the handler only records them). */
void pg_guard_catch_signals(void);
/* Collective after each step: stage 0 ORs every stage's caught signal and
 * tells everyone, so all stop after the same step. *sig: 0 or the signal. */
int pg_guard_stop_agree(pg_run *r, int64_t step, int *sig);

#endif

/* runtime/core/agree.h — what the stages of one run must agree on, compared
 * once at the rendezvous instead of failing late with a message that does not
 * name the cause: the options whose values must be equal on every stage (a
 * table in agree.c; a later option, such as a data-parallel degree, is one
 * more row), the data files each reading stage actually opened (name, size
 * and hash: stage 0 and the loss stage reading one token stream must read the
 * same bytes), and that the inputs and the targets pair one to one (the same
 * number of samples).
 *
 * Text form (carried by every hello, pg_net_config.agree): one entry a line,
 * "KEY\tVALUE\n", with '\\' and a newline in VALUE written as "\\\\" and "\\n".
 * KEY is an option ("--steps"), "file --data" (BYTES HASH of the file as that
 * stage read it) or "samples inputs" / "samples targets". */
#ifndef PG_AGREE_H
#define PG_AGREE_H

#include <stddef.h>
#include "stage_run.h"

/* This stage's entries (after the data files are open) into r->agree. 0, or
 * 1 after printing (out of memory). */
int pg_agree_build(pg_run *r);
/* pg_net_config.agree_check: arg is the pg_run of stage 0 (the master). A
 * peer's entries against stage 0's and every accepted peer's: 0 when they fit
 * (then they join the accepted ones), -1 with the first difference in why,
 * naming the option, both stages and both values. */
int pg_agree_check(void *arg, int rank, const char *text, size_t len, char *why, size_t whylen);
/* Before pg_agree_build: one more data set this stage read (the evaluation
 * and --predict files, eval.c), compared as "file OPT" and, with samples,
 * "samples OPT" (--eval-data pairs with --eval-targets). */
void pg_agree_dataset(pg_run *r, const char *opt, const pg_dataset *ds, int samples);
/* Free what pg_agree_build and pg_agree_check kept. */
void pg_agree_free(pg_run *r);

#endif

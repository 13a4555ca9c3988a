/* codegen/cli/load.h — read, parse and check one .pipe file into a model; shared by
 * the subcommands that need a checked model (check, plan, gen, ...). */
#ifndef PG_LOAD_H
#define PG_LOAD_H

#include <stdio.h>
#include "ast.h"
#include "choose/balance.h"
#include "diag.h"
#include "ir.h"

#define PG_SOURCE_LIMIT ((size_t)16 << 20) /* bytes of .pipe source */

/* Everything one loaded file owns. diag stays usable for later phases (its
 * locations point into src, which lives as long as the pg_loaded). */
typedef struct pg_loaded {
    pg_source src;
    pg_diag diag;
    ir_model model;
    int have_src;
    int have_auto;   /* schedule = auto was resolved: autosel holds the candidates */
    pg_auto autosel;
    pg_block_split blocks; /* `stages = N`: whole blocks per stage or a split inside one, and why */
} pg_loaded;

/* Load path, reporting to diag_out. Returns 0 when the model is valid, 1 when
 * the file could not be read or has errors (already reported). `stages = N`
 * without splits is split for the schedule's predicted step (balance.h), and
 * `schedule = auto` resolved into a schedule and split. Always call pg_unload
 * afterwards. */
int pg_load(pg_loaded *l, const char *path, FILE *diag_out);
/* pg_load, with `stages = N` balanced (and auto's steps predicted) by measured
 * layer times (dsl/cost.h); profile NULL: as pg_load. */
int pg_load_profiled(pg_loaded *l, const char *path, const pg_profile *profile, FILE *diag_out);
void pg_unload(pg_loaded *l);

#endif

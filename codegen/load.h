/* codegen/load.h — read, parse and check one .pipe file into a model; shared by
 * the subcommands that need a checked model (check, plan, gen, ...). */
#ifndef PG_LOAD_H
#define PG_LOAD_H

#include <stdio.h>
#include "ast.h"
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
} pg_loaded;

/* Load path, reporting to diag_out. Returns 0 when the model is valid, 1 when
 * the file could not be read or has errors (already reported). Always call
 * pg_unload afterwards. */
int pg_load(pg_loaded *l, const char *path, FILE *diag_out);
/* pg_load, with `stages = N` balanced by measured layer times (dsl/cost.h);
 * profile NULL: as pg_load. */
struct pg_profile;
int pg_load_profiled(pg_loaded *l, const char *path, const struct pg_profile *profile, FILE *diag_out);
void pg_unload(pg_loaded *l);

#endif

/* codegen/cli/cmd_common.h — the one front end of the subcommands that take a
 * model (check, schedule, plan, gen): read the --balance profile, load the
 * .pipe file balanced by it, build and verify its schedule and lay out every
 * stage (pg_gen_prepare), so that each of them accepts and refuses exactly the
 * same models; then release it all together. */
#ifndef PG_CMD_COMMON_H
#define PG_CMD_COMMON_H

#include <stdint.h>

#include "cost.h"
#include "io_atomic.h"
#include "gen/emit.h"
#include "cli/load.h"
#include "schedule/schedule.h"

typedef struct cmd_model {
    pg_profile prof;  /* --balance PROFILE (empty without one) */
    pg_loaded l;      /* the checked model and its diagnostics */
    pg_schedule s;    /* its verified schedule */
    pg_gen *g;        /* every stage laid out (memory plan, buffers) */
} cmd_model;

/* The profile at balance (NULL: none) is read, path loaded (balanced by it),
 * its schedule built and verified and its stages laid out with guard_bytes
 * (see pg_gen_prepare); errors go to stderr. 0: all ready in *cm, release it
 * with cmd_release_model. 1: an error, already reported; nothing to release.
 * When `schedule = auto` finds no candidate that fits `memory`, the table of
 * every candidate goes to auto_table (pipegen plan: stdout; NULL: nowhere),
 * which the error's note points to. */
int cmd_load_model(const char *path, const char *balance, int64_t guard_bytes, FILE *auto_table, cmd_model *cm);
void cmd_release_model(cmd_model *cm);
/* No output of the command is one of its inputs or another output
 * (pg_io_check_distinct): 0, or 2 (usage) after "pipegen: --svg m.pipe is the
 * same file as the model m.pipe: ..." on stderr. */
int cmd_files_distinct(const pg_io_file *f, int n);
/* What stderr must say about a --balance profile used for model m (gen:
 * its plan, for the hash; NULL: not compared): one note when it was
 * measured on another model, or on another plan (hash), and one when it
 * lacks the times of some layer (then the cost model predicts, in flops). */
void cmd_profile_notes(const pg_profile *prof, const ir_model *m, const pg_gen *g);

/* The options of gen and build (FILE -o DIR [--balance PROFILE] [--guard-bytes
 * N], build's --cuda): 0, or 2 after printing the usage or what is wrong. */
typedef struct cmd_gen_opts {
    const char *path, *dir, *balance;
    int64_t guard;
    int cuda;
} cmd_gen_opts;
int cmd_gen_args(int argc, char **argv, int build, cmd_gen_opts *o);

/* pipegen gen's generation, which pipegen build runs too: path (balanced by
 * the profile at balance, NULL: none) into dir, all or nothing, one line on
 * stdout saying what it wrote. 0, or 1 after reporting the errors. *nstages
 * (when not NULL) is set to the model's stage count on success. */
int cmd_gen_dir(const char *path, const char *dir, const char *balance, int64_t guard_bytes, int *nstages);

#endif

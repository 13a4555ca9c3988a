/* codegen/cmd_common.h — what the subcommands that need a scheduled model
 * share (plan, gen): read the --balance profile, load the .pipe file balanced
 * by it and build its schedule, then release all three together. */
#ifndef PG_CMD_COMMON_H
#define PG_CMD_COMMON_H

#include "cost.h"
#include "load.h"
#include "schedule.h"

/* The profile at balance (NULL: none) is read into *prof, path is loaded
 * (balanced by it) into *l and its schedule built into *s; errors go to
 * stderr. 0: all ready, release them with cmd_release_scheduled. 1: an error,
 * already reported; nothing is left to release. */
int cmd_load_scheduled(const char *path, const char *balance, pg_profile *prof, pg_loaded *l, pg_schedule *s);
void cmd_release_scheduled(pg_profile *prof, pg_loaded *l, pg_schedule *s);

#endif

/* codegen/cmd_plan.c — `pipegen plan FILE`: the memory plan of every stage,
 * bytes per category and the arena total (MiB and exact bytes). */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "emit.h"
#include "load.h"
#include "schedule.h"

int cmd_plan(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: pipegen plan FILE\n");
        return 2;
    }
    pg_loaded l;
    pg_schedule s;
    pg_gen *g = NULL;
    int rc = 1;
    if (pg_load(&l, argv[1], stderr) == 0 && pg_schedule_build(&l.model, &s, &l.diag) == 0) {
        if (pg_gen_prepare(&l.model, &s, &g, &l.diag) == 0) {
            pg_gen_report(g, stdout);
            pg_gen_free(g);
            rc = 0;
        }
        pg_schedule_free(&s);
    }
    pg_unload(&l);
    return rc;
}

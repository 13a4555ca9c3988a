/* codegen/cmd_plan.c — `pipegen plan FILE [--svg OUT] [--balance PROFILE]`:
 * with `schedule = auto`, the candidates table and the choice (auto.c); then
 * the memory plan of every stage, bytes per category and the arena total
 * (MiB and exact bytes); then the chosen splits with each stage's predicted
 * compute, busy share and bubble (svg.c); --svg OUT draws the predicted
 * timeline, --balance PROFILE balances `stages = N` by measured layer times
 * (dsl/cost.h). */
#include <stdio.h>
#include <string.h>

#include "cmd_common.h"
#include "commands.h"
#include "emit.h"
#include "svg.h"

int cmd_plan(int argc, char **argv)
{
    const char *path = NULL, *svg = NULL, *balance = NULL;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--svg") == 0 && i + 1 < argc && argv[i + 1][0])
            svg = argv[++i];
        else if (strcmp(argv[i], "--balance") == 0 && i + 1 < argc && argv[i + 1][0])
            balance = argv[++i];
        else if (argv[i][0] == '-' || path)
            bad = 1;
        else
            path = argv[i];
    }
    if (bad || !path || !path[0]) {
        fprintf(stderr, "usage: pipegen plan FILE [--svg OUT] [--balance PROFILE]\n");
        return 2;
    }
    pg_loaded l;
    pg_schedule s;
    pg_profile prof;
    if (cmd_load_scheduled(path, balance, &prof, &l, &s) != 0)
        return 1;
    pg_gen *g = NULL;
    int rc = 1;
    if (l.have_auto)
        pg_auto_report(&l.autosel, stdout);
    if (pg_gen_prepare(&l.model, &s, 0, &g, &l.diag) == 0) {
        pg_gen_report(g, stdout);
        pg_gen_free(g);
        pg_sched_costs c;
        int seconds = pg_sched_costs_of_model(&l.model, balance ? &prof : NULL, &c);
        pg_schedule_report(&l.model, &s, &c, seconds, stdout);
        rc = svg && pg_schedule_svg_write(&l.model, &s, &c, seconds, svg, &l.diag) != 0 ? 1 : 0;
    }
    cmd_release_scheduled(&prof, &l, &s);
    return rc;
}

/* codegen/cli/cmd_plan.c — `pipegen plan FILE [--svg OUT] [--balance PROFILE]
 * [--dp D]`: with `schedule = auto`, the candidates table and the choice
 * (auto.c); then the memory plan of every stage, bytes per category and the
 * arena total (MiB and exact bytes); then what one process holds and sends
 * per step with D data-parallel replicas (plan_dp.c: D = 1, 2, 4, 8, or the
 * D of --dp); then the chosen splits with each stage's predicted
 * compute, busy share and bubble (svg.c); --svg OUT draws the predicted
 * timeline, --balance PROFILE balances `stages = N` by measured layer times
 * (dsl/cost.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd_common.h"
#include "cli/commands.h"
#include "gen/emit.h"
#include "cli/plan_dp.h"
#include "schedule/svg.h"

/* --dp D: a replica count in 1..256 (piperun's range); 0, or 1 after saying why. */
static int parse_dp(const char *s, int *dp)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 1 || v > 256) {
        fprintf(stderr, "pipegen plan: --dp wants a replica count in 1..256, not '%s'\n", s);
        return 1;
    }
    *dp = (int)v;
    return 0;
}

int cmd_plan(int argc, char **argv)
{
    const char *path = NULL, *svg = NULL, *balance = NULL;
    int bad = 0, dp = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--svg") == 0 && i + 1 < argc && argv[i + 1][0])
            svg = argv[++i];
        else if (strcmp(argv[i], "--balance") == 0 && i + 1 < argc && argv[i + 1][0])
            balance = argv[++i];
        else if (strcmp(argv[i], "--dp") == 0 && i + 1 < argc)
            bad |= parse_dp(argv[++i], &dp);
        else if (argv[i][0] == '-' || path)
            bad = 1;
        else
            path = argv[i];
    }
    if (bad || !path || !path[0]) {
        fprintf(stderr, "usage: pipegen plan FILE [--svg OUT] [--balance PROFILE] [--dp D]\n");
        return 2;
    }
    pg_io_file files[] = {{"--svg", svg, 1}, {"the model", path, 0}, {"--balance", balance, 0}};
    if (cmd_files_distinct(files, 3))
        return 2;
    cmd_model cm;
    if (cmd_load_model(path, balance, 0, stdout, &cm) != 0)
        return 1;
    if (pg_plan_dp_check(&cm.l.model, dp) != 0) {
        cmd_release_model(&cm);
        return 1;
    }
    if (cm.l.have_auto)
        pg_auto_report(&cm.l.autosel, stdout);
    pg_gen_report(cm.g, stdout);
    if (pg_plan_dp_report(&cm.l.model, cm.g, dp, stdout) != 0) {
        cmd_release_model(&cm);
        return 1;
    }
    pg_sched_costs c;
    int seconds = pg_sched_costs_of_model(&cm.l.model, balance ? &cm.prof : NULL, &c);
    pg_block_split_report(&cm.l.blocks, &cm.l.model, stdout);
    pg_schedule_report(&cm.l.model, &cm.s, &c, seconds, stdout);
    int rc = svg && pg_schedule_svg_write(&cm.l.model, &cm.s, &c, seconds, svg, &cm.l.diag) != 0 ? 1 : 0;
    if (svg && !rc)
        printf("wrote %s: the predicted timeline of one step (SVG)\n", svg);
    cmd_release_model(&cm);
    return rc;
}

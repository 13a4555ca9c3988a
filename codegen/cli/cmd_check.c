/* codegen/cli/cmd_check.c — `pipegen check FILE`: everything `plan` and `gen`
 * check (the one front end of cmd_common.h: the semantic checks, the schedule
 * and its verification, every stage's layout); on success a summary of the
 * model, its stages, the skips that cross stages and the ties. */
#include <stdio.h>
#include <string.h>
#include "cli/cmd_common.h"
#include "cli/commands.h"

int cmd_check(int argc, char **argv) {
    if (argc != 2 || argv[1][0] == '\0' || (argv[1][0] == '-' && argv[1][1] != '\0')) {
        fprintf(stderr, "usage: pipegen check FILE\n");
        return 2;
    }
    cmd_model cm;
    if (cmd_load_model(argv[1], NULL, 0, NULL, &cm) != 0)
        return 1;
    fflush(stderr);
    pg_model_summary(&cm.l.model, stdout);
    pg_block_split_report(&cm.l.blocks, &cm.l.model, stdout);
    if (cm.l.have_auto)
        pg_auto_chosen_report(&cm.l.autosel, stdout);
    cmd_release_model(&cm);
    return 0;
}

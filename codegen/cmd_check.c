/* codegen/cmd_check.c — `pipegen check FILE`: the semantic checks; on success a
 * summary of the model, its stages, the skips that cross stages and the ties. */
#include <stdio.h>
#include <string.h>
#include "commands.h"
#include "load.h"

int cmd_check(int argc, char **argv) {
    if (argc != 2 || argv[1][0] == '\0' || (argv[1][0] == '-' && argv[1][1] != '\0')) {
        fprintf(stderr, "usage: pipegen check FILE\n");
        return 2;
    }
    pg_loaded l;
    int rc = pg_load(&l, argv[1], stderr);
    if (rc == 0) {
        fflush(stderr);
        pg_model_summary(&l.model, stdout);
    }
    pg_unload(&l);
    return rc;
}

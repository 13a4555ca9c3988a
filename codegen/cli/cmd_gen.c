/* codegen/cli/cmd_gen.c — `pipegen gen FILE -o DIR [--balance PROFILE] [--guard-bytes N]`: writes
 * stage<k>.c per stage, <model>.h and plan.json into DIR (created with its parents if missing) as one
 * generation, all or nothing, removing what an older generation wrote there and this one does
 * not (gen_files.h); nothing is written for a model with errors. Byte-stable output.
 * --guard-bytes N (a multiple of 64, default 0): N free bytes around every arena buffer, listed
 * in the stage files for a runtime built with AddressSanitizer to poison (codegen/gen/emit.h). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd_common.h"
#include "cli/commands.h"
#include "gen/emit.h"
#include "base/progress.h"

int cmd_gen_args(int argc, char **argv, int build, cmd_gen_opts *o)
{
    memset(o, 0, sizeof *o);
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc)
            o->dir = argv[++i];
        else if (strcmp(argv[i], "--balance") == 0 && i + 1 < argc && argv[i + 1][0])
            o->balance = argv[++i]; /* stages = N split by measured layer times (dsl/cost.h) */
        else if (strcmp(argv[i], "--guard-bytes") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            long long v = strtoll(argv[++i], &end, 10);
            if (errno || end == argv[i] || *end || v < 0 || v % 64 || v > (1LL << 30)) {
                fprintf(stderr, "pipegen: --guard-bytes %s: want a multiple of 64 from 0 to 1073741824\n", argv[i]);
                return 2;
            }
            o->guard = v;
        }
        else if (build && strcmp(argv[i], "--cuda") == 0)
            o->cuda = 1;
        else if (argv[i][0] == '-' || o->path)
            bad = 1;
        else
            o->path = argv[i];
    }
    if (bad || !o->path || !o->dir || !o->dir[0]) {
        fprintf(stderr, "usage: pipegen %s FILE -o DIR%s [--balance PROFILE] [--guard-bytes N]\n", build ? "build" : "gen",
                build ? " [--cuda]" : "");
        return 2;
    }
    return 0;
}

int cmd_gen(int argc, char **argv)
{
    cmd_gen_opts o;
    int rc = cmd_gen_args(argc, argv, 0, &o);
    return rc ? rc : cmd_gen_dir(o.path, o.dir, o.balance, o.guard, NULL);
}

int cmd_gen_dir(const char *path, const char *dir, const char *balance, int64_t guard, int *nstages)
{
    cmd_model cm;
    if (cmd_load_model(path, balance, guard, NULL, &cm) != 0)
        return 1;
    int rc = 1;
    char *auto_json = NULL, *blocks_json = NULL;
    if ((cm.l.have_auto && !(auto_json = pg_auto_json(&cm.l.autosel))) ||
        (cm.l.blocks.considered && !(blocks_json = pg_block_split_json(&cm.l.blocks)))) {
        pg_error(&cm.l.diag, cm.l.model.loc, "out of memory");
    } else {
        if (auto_json)
            pg_gen_set_auto_json(cm.g, auto_json); /* plan.json records the choice */
        if (blocks_json)
            pg_gen_set_blocks_json(cm.g, blocks_json);
        rc = pg_gen_write(cm.g, dir, &cm.l.diag) == 0 ? 0 : 1;
    }
    free(auto_json);
    free(blocks_json);
    if (!rc)
        pg_progress("written to %s", dir);
    if (!rc && nstages)
        *nstages = cm.l.model.nstages;
    cmd_release_model(&cm);
    return rc;
}

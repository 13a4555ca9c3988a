/* codegen/cmd_gen.c — `pipegen gen FILE -o DIR [--balance PROFILE] [--guard-bytes N]`: writes
 * stage<k>.c per stage, <model>.h and plan.json into DIR (created if missing). Byte-stable output.
 * --guard-bytes N (a multiple of 64, default 0): N free bytes around every arena buffer, listed
 * in the stage files for a runtime built with AddressSanitizer to poison (codegen/emit.h). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd_common.h"
#include "commands.h"
#include "emit.h"

int cmd_gen(int argc, char **argv)
{
    const char *path = NULL, *dir = NULL, *balance = NULL;
    int64_t guard = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--balance") == 0 && i + 1 < argc && argv[i + 1][0])
            balance = argv[++i]; /* stages = N split by measured layer times (dsl/cost.h) */
        else if (strcmp(argv[i], "--guard-bytes") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            long long v = strtoll(argv[++i], &end, 10);
            if (errno || end == argv[i] || *end || v < 0 || v % 64 || v > (1LL << 30)) {
                fprintf(stderr, "pipegen: --guard-bytes %s: want a multiple of 64 from 0 to 1073741824\n", argv[i]);
                return 2;
            }
            guard = v;
        }
        else if (argv[i][0] == '-' || path)
            bad = 1;
        else
            path = argv[i];
    }
    if (bad || !path || !dir || !dir[0]) {
        fprintf(stderr, "usage: pipegen gen FILE -o DIR [--balance PROFILE] [--guard-bytes N]\n");
        return 2;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "pipegen: cannot create output directory %s: %s\n", dir, strerror(errno));
        return 1;
    }
    pg_loaded l;
    pg_schedule s;
    pg_profile prof;
    if (cmd_load_scheduled(path, balance, &prof, &l, &s) != 0)
        return 1;
    pg_gen *g = NULL;
    int rc = 1;
    char *auto_json = NULL;
    if (l.have_auto && !(auto_json = pg_auto_json(&l.autosel))) {
        pg_error(&l.diag, l.model.loc, "out of memory");
    } else if (pg_gen_prepare(&l.model, &s, guard, &g, &l.diag) == 0) {
        if (auto_json)
            pg_gen_set_auto_json(g, auto_json); /* plan.json records the choice */
        rc = pg_gen_write(g, dir, &l.diag) == 0 ? 0 : 1;
        pg_gen_free(g);
    }
    free(auto_json);
    cmd_release_scheduled(&prof, &l, &s);
    return rc;
}

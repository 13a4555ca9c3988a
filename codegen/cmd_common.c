/* codegen/cmd_common.c — see cmd_common.h. */
#include <stdio.h>

#include "cmd_common.h"

int cmd_load_scheduled(const char *path, const char *balance, pg_profile *prof, pg_loaded *l, pg_schedule *s)
{
    *prof = (pg_profile){ 0 };
    if (balance) {
        pg_diag pd;
        pg_diag_init(&pd, stderr, NULL);
        if (pg_profile_read(balance, prof, &pd) != 0)
            return 1;
    }
    if (pg_load_profiled(l, path, balance ? prof : NULL, stderr) == 0 &&
        pg_schedule_build(&l->model, s, &l->diag) == 0)
        return 0;
    pg_unload(l);
    pg_profile_free(prof);
    return 1;
}

void cmd_release_scheduled(pg_profile *prof, pg_loaded *l, pg_schedule *s)
{
    pg_schedule_free(s);
    pg_unload(l);
    pg_profile_free(prof);
}

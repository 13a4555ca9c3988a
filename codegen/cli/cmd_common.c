/* codegen/cli/cmd_common.c — see cmd_common.h. */
#include <stdio.h>
#include <string.h>

#include "cli/cmd_common.h"
#include "base/progress.h"

int cmd_load_model(const char *path, const char *balance, int64_t guard_bytes, FILE *auto_table, cmd_model *cm)
{
    memset(cm, 0, sizeof *cm);
    if (balance) {
        pg_diag pd;
        pg_diag_init(&pd, stderr, NULL);
        if (pg_profile_read(balance, &cm->prof, &pd) != 0)
            return 1;
    }
    if (pg_load_profiled(&cm->l, path, balance ? &cm->prof : NULL, stderr) == 0) {
        pg_progress("%d layers and %d parameters checked on %d stages", cm->l.model.nlayers, cm->l.model.nparams,
                    cm->l.model.nstages);
        if (pg_schedule_build(&cm->l.model, &cm->s, &cm->l.diag) == 0) {
            pg_progress("the schedule built and verified");
            if (pg_gen_prepare(&cm->l.model, &cm->s, guard_bytes, &cm->g, &cm->l.diag) == 0)
                return 0;
            pg_schedule_free(&cm->s);
        }
    } else if (auto_table && cm->l.have_auto && cm->l.autosel.n > 0 && cm->l.autosel.chosen < 0) {
        pg_auto_report(&cm->l.autosel, auto_table); /* nothing fits: every candidate, so the budget can be chosen */
    }
    pg_unload(&cm->l);
    pg_profile_free(&cm->prof);
    return 1;
}

void cmd_release_model(cmd_model *cm)
{
    pg_gen_free(cm->g);
    pg_schedule_free(&cm->s);
    pg_unload(&cm->l);
    pg_profile_free(&cm->prof);
    memset(cm, 0, sizeof *cm);
}

/* codegen/cli/cmd_common.c — see cmd_common.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd_common.h"
#include "base/progress.h"
#include "schedule/svg.h"

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
            if (pg_gen_prepare(&cm->l.model, &cm->s, guard_bytes, &cm->g, &cm->l.diag) == 0) {
                if (balance)
                    cmd_profile_notes(&cm->prof, &cm->l.model, cm->g);
                return 0;
            }
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

int cmd_files_distinct(const pg_io_file *f, int n)
{
    char err[9000];
    if (pg_io_check_distinct(f, n, err, sizeof err) == 0)
        return 0;
    fprintf(stderr, "pipegen: %s\n", err);
    return 2;
}

void cmd_profile_notes(const pg_profile *prof, const ir_model *m, const pg_gen *g)
{
    pg_diag d;
    pg_diag_init(&d, stderr, NULL);
    pg_loc loc = { prof->path, 0, 0 };
    const char *name = m->name ? m->name : "?";
    if (prof->model && strcmp(prof->model, name) != 0) {
        pg_note(&d, loc, "the profile was measured on model '%s', not '%s': only the layers named alike are used",
                prof->model, name);
    } else if (prof->plan_hash && g) {
        uint64_t h = 0;
        char *text = pg_gen_plan_json(g, &h);
        char hs[32];
        snprintf(hs, sizeof hs, "%016" PRIx64, h);
        if (text && strcmp(prof->plan_hash, hs) != 0)
            pg_note(&d, loc, "the profile was measured on plan hash %s, this plan's is %s (another split, schedule or "
                    "batch): the layers' times are used as measured there; messages and stage costs may differ",
                    prof->plan_hash, hs);
        free(text);
    }
    int missing;
    const char *first = pg_profile_missing(m, prof, &missing);
    if (first)
        pg_note(&d, loc, "the profile has no times for layer '%s'%s%.0d%s: the predicted times are the cost model's "
                "(flops), not the profile's; profile this model again", first, missing > 1 ? " (and " : "",
                missing > 1 ? missing - 1 : 0, missing > 1 ? " more)" : "");
}

/* codegen/cli/load.c — source -> tree -> checked model, with every error path
 * freeing what it made. The tree is dropped once checked: the model keeps
 * copies of every name it needs. */
#include <string.h>
#include "cost.h"
#include "cli/load.h"

int pg_load(pg_loaded *l, const char *path, FILE *diag_out) { return pg_load_profiled(l, path, NULL, diag_out); }

int pg_load_profiled(pg_loaded *l, const char *path, const pg_profile *profile, FILE *diag_out) {
    memset(l, 0, sizeof *l);
    pg_diag_init(&l->diag, diag_out, NULL);
    if (pg_source_read(&l->src, path, PG_SOURCE_LIMIT, &l->diag) != 0) return 1;
    l->have_src = 1;
    l->diag.src = &l->src;
    pg_ast ast;
    memset(&ast, 0, sizeof ast);
    int rc = 1;
    if (pg_parse(&l->src, &ast, &l->diag) == 0 && pg_check_profiled(&ast, &l->model, &l->diag, profile) == 0) rc = 0;
    pg_ast_free(&ast);
    if (rc == 0 && l->model.train.schedule == SCHED_AUTO) {
        l->have_auto = 1;
        if (pg_auto_resolve(&l->model, profile, &l->autosel, &l->diag) != 0) rc = 1;
    } else if (rc == 0 && pg_balance_split(&l->model, profile, &l->blocks) != 0) {
        pg_error(&l->diag, l->model.loc, "out of memory balancing the stages");
        rc = 1;
    }
    return rc;
}

void pg_unload(pg_loaded *l) {
    if (l->have_auto) pg_auto_free(&l->autosel);
    pg_model_free(&l->model);
    if (l->have_src) pg_source_free(&l->src);
    memset(l, 0, sizeof *l);
}

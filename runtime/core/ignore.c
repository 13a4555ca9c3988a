/* runtime/core/ignore.c — cross_entropy(ignore = id): the loss divides by the
 * target positions of the whole batch that are not the ignored id, so that a
 * micro-batch's partial loss is already its share of the batch's mean (as
 * every loss here, pg_ops.h). The stage holding the loss counts them before
 * each step over every row of the global batch, its replica's and the
 * others' (the data is at hand: token windows and file rows are functions of
 * the step), so the replicas agree without a message, and writes the count
 * into the arena, where the loss op reads it (device memory on CUDA, so a
 * replayed graph sees each step's count). */
#include <stdio.h>

#include "stage_run.h"

typedef struct rows_count {
    const pg_run *r;
    int64_t step, ignore;
    double count;
} rows_count;

/* every row of the step's batch: a token window one on from the input's, or a
 * target file's sample, cycling, as tokens.c and step.c read them */
static void count_rows(void *arg)
{
    rows_count *j = arg;
    const pg_run *r = j->r;
    const pg_stage_desc *d = r->d;
    const int32_t *t = r->tg.data;
    int64_t B = d->train.batch, m = d->target_per_sample;
    for (int64_t i = 0; i < B; i++) {
        uint64_t at = r->tokens ? pg_run_tokens_window(r, j->step, i) + 1
                                : ((uint64_t)j->step * (uint64_t)B + (uint64_t)i) % r->tg.samples * (uint64_t)m;
        for (int64_t k = 0; k < m; k++)
            j->count += t[at + (uint64_t)k] != j->ignore;
    }
}

int pg_run_ignore_count(pg_run *r, int64_t step)
{
    const pg_stage_desc *d = r->d;
    if (!d->has_ignore || !d->has_loss)
        return 0;
    /* synthetic ids are all in [0, classes): every position counts */
    rows_count j = {r, step, d->ignore_id, (double)d->train.batch * (double)d->target_per_sample};
    if (r->have_tg) {
        char err[512];
        j.count = 0.0;
        if (pg_data_guarded(&r->tg, count_rows, &j, err, sizeof err)) {
            fprintf(stderr, "stage %d: step %lld: %s\n", d->stage, (long long)step + 1, err);
            return 1;
        }
    }
    return pg_copy_to_dev(r->ctx, r->A + d->count_off, &j.count, sizeof j.count);
}

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

int pg_run_ignore_count(pg_run *r, int64_t step)
{
    const pg_stage_desc *d = r->d;
    if (!d->has_ignore || !d->has_loss)
        return 0;
    /* synthetic ids are all in [0, classes): every position counts */
    double count = (double)d->train.batch * (double)d->target_per_sample;
    if (r->have_tg) {
        /* every row of the step's batch: a token window one on from the
         * input's, or the data set's sample of that position (shuffled, from
         * its shard), as tokens.c and step.c read them; into the host
         * staging, which load_batch fills after this */
        int64_t B = d->train.batch, n = B * d->target_per_sample;
        int32_t *t = r->host;
        char err[512];
        for (int64_t i = 0; i < B; i++)
            r->sample_idx[i] = r->tokens ? pg_run_tokens_window(r, step, i)
                                         : pg_dataset_sample(d->train.seed, d->train.shuffle, r->tg.samples,
                                                             (uint64_t)step * (uint64_t)B + (uint64_t)i);
        int rc = r->tokens ? pg_tokens_windows(&r->tg.f[0], r->sample_idx, B, d->input_dim[0], 1, t, err, sizeof err)
                           : pg_dataset_gather(&r->tg, r->sample_idx, B, t, err, sizeof err);
        if (rc) {
            fprintf(stderr, "stage %d: step %lld: %s\n", d->stage, (long long)step + 1, err);
            return 1;
        }
        count = 0.0;
        for (int64_t k = 0; k < n; k++)
            count += t[k] != d->ignore_id;
    }
    return pg_copy_to_dev(r->ctx, r->A + d->count_off, &count, sizeof count);
}

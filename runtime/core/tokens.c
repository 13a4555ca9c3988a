/* runtime/core/tokens.c — `--data FILE` as a token stream for a language model.
 *
 * When the model's input and target are both i32[seq] and FILE is a rank-1
 * i32 .pgd (dims [ntokens], as `pipedata text` writes), sample i of step s is
 *     input  = tokens[o .. o+seq)      target = tokens[o+1 .. o+seq+1)
 *     o      = mix(mix(mix(seed ^ K) ^ s) ^ i) mod (ntokens - seq)
 * a pure function of (seed, step, sample index), so stage 0 (inputs) and the
 * stage holding the loss (targets) cut the same windows without talking. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "io_atomic.h"
#include "pg_le.h"
#include "stage_run.h"

#define TOKENS_KEY UINT64_C(0x746f6b656e73) /* "tokens": keeps the windows apart from other seeded streams */

static int lm_shaped(const pg_stage_desc *d)
{
    return d->input_dtype == 2 && d->target_dtype == 2 && d->input_rank == 1 && d->target_rank == 1 &&
           d->input_dim[0] == d->target_dim[0] && d->input_dim[0] > 0;
}

/* The rank in a .pgd header, -1 if the file cannot be read as one (the
 * ordinary reader then says what is wrong). */
static int pgd_rank(const char *path)
{
    char err[512];
    int fd = pg_io_open_regular(path, NULL, err, sizeof err);
    if (fd < 0)
        return -1;
    unsigned char h[16];
    ssize_t got = read(fd, h, sizeof h);
    close(fd);
    if (got != (ssize_t)sizeof h || memcmp(h, "PGD1", 4) != 0)
        return -1;
    return (int)pg_get32(h + 12);
}

static int64_t model_vocab(const pg_stage_desc *d)
{
    int64_t v = d->input_vocab;
    if (d->target_vocab > 0 && (v <= 0 || d->target_vocab < v))
        v = d->target_vocab;
    return v;
}

int pg_tokens_open_stream(const pg_stage_desc *d, const char *opt, const char *path, pg_dataset *ds)
{
    char err[512];
    pg_paths one = {1, {path}};
    if (pg_dataset_open(ds, opt, &one, 2, 0, NULL, 0, PG_DATA_NO_ID, NULL, NULL, err, sizeof err)) {
        fprintf(stderr, "stage %d: %s\n", d->stage, err);
        return -1;
    }
    const pg_datafile *f = &ds->f[0];
    int64_t seq = d->input_dim[0], vocab = model_vocab(d);
    if (f->samples < (uint64_t)seq + 1) {
        fprintf(stderr, "stage %d: %s holds %llu tokens, but one window of the model needs seq + 1 = %lld\n", d->stage,
                path, (unsigned long long)f->samples, (long long)seq + 1);
        pg_dataset_close(ds);
        return -1;
    }
    const int32_t *t = f->data;
    for (uint64_t i = 0; vocab > 0 && i < f->samples; i++)
        if (t[i] < 0 || t[i] >= vocab) {
            fprintf(stderr, "stage %d: %s: token %ld at position %llu is outside the model's vocabulary [0, %lld)\n",
                    d->stage, path, (long)t[i], (unsigned long long)i, (long long)vocab);
            pg_dataset_close(ds);
            return -1;
        }
    return 0;
}

int pg_tokens_is_stream(const pg_stage_desc *d, const pg_paths *p)
{
    return p->n > 0 && lm_shaped(d) && pgd_rank(p->p[0]) == 1;
}

int pg_run_tokens_open(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    if (!(d->has_input || d->has_loss) || !pg_tokens_is_stream(d, &r->opt.data))
        return 0;
    if (r->opt.targets.n) {
        fprintf(stderr, "stage %d: %s is a token stream, which holds the targets too: leave out --targets\n", d->stage,
                r->opt.data.p[0]);
        return -1;
    }
    if (r->opt.data.n > 1) {
        fprintf(stderr, "stage %d: --data %s is a token stream: a language model reads one stream, not %d files "
                "(join them: cat a.txt b.txt > all.txt, then `pipedata text`)\n", d->stage, r->opt.data.p[0],
                r->opt.data.n);
        return -1;
    }
    if (d->has_input) {
        if (pg_tokens_open_stream(d, "--data", r->opt.data.p[0], &r->in))
            return -1;
        r->have_in = 1;
    }
    if (d->has_loss) {
        if (pg_tokens_open_stream(d, "--data", r->opt.data.p[0], &r->tg))
            return -1;
        r->have_tg = 1;
    }
    r->tokens = 1;
    return 1;
}

/* Offset of sample i's window in step `step`: in [0, ntokens - seq). */
static uint64_t window(uint64_t seed, int64_t step, int64_t i, uint64_t ntokens, int64_t seq)
{
    uint64_t k = pg_mix64(pg_mix64(pg_mix64(seed ^ TOKENS_KEY) ^ (uint64_t)step) ^ (uint64_t)i);
    return k % (ntokens - (uint64_t)seq);
}

typedef struct win_job {
    const pg_datafile *f;
    const uint64_t *off;
    int64_t n, seq;
    int shift;
    int32_t *dst;
} win_job;

static void copy_windows(void *arg)
{
    const win_job *j = arg;
    const int32_t *t = j->f->data;
    for (int64_t i = 0; i < j->n; i++)
        memcpy(j->dst + i * j->seq, t + j->off[i] + (uint64_t)j->shift, (size_t)j->seq * 4);
}

int pg_tokens_windows(const pg_datafile *f, const uint64_t *off, int64_t n, int64_t seq, int shift, int32_t *dst,
                      char *err, size_t errlen)
{
    win_job j = {f, off, n, seq, shift, dst};
    return pg_data_guarded(f, copy_windows, &j, err, errlen);
}

/* This replica's windows of a step into their rows of dst: 0, or 1 after
 * printing that the stream changed under the run (SIGBUS). */
static int fill_windows(pg_run *r, const pg_datafile *f, int64_t step, int shift, int32_t *dst)
{
    const pg_stage_desc *d = r->d;
    int64_t seq = d->input_dim[0];
    for (int64_t i = 0; i < r->rows; i++) /* this replica's rows (dp.c) */
        r->sample_idx[i] = window(d->train.seed, step, r->row0 + i, f->samples, seq);
    char err[512];
    if (pg_tokens_windows(f, r->sample_idx, r->rows, seq, shift, dst + r->row0 * seq, err, sizeof err) == 0)
        return 0;
    fprintf(stderr, "stage %d: step %lld: %s\n", d->stage, (long long)step + 1, err);
    return 1;
}

uint64_t pg_run_tokens_window(const pg_run *r, int64_t step, int64_t i)
{
    return window(r->d->train.seed, step, i, r->tg.samples, r->d->input_dim[0]);
}

int pg_run_tokens_load(pg_run *r, int64_t step)
{
    const pg_stage_desc *d = r->d;
    size_t at = (size_t)(r->row0 * d->input_dim[0]) * 4, bytes = (size_t)(r->rows * d->input_dim[0]) * 4;
    if (d->has_input) {
        if (fill_windows(r, &r->in.f[0], step, 0, r->host) ||
            pg_copy_to_dev(r->ctx, r->A + d->input_off + at, (char *)r->host + at, bytes))
            return 1;
    }
    if (d->has_loss) {
        if (fill_windows(r, &r->tg.f[0], step, 1, r->host) ||
            pg_copy_to_dev(r->ctx, r->A + d->target_off + at, (char *)r->host + at, bytes))
            return 1;
    }
    return 0;
}

/* runtime/core/dataset.c — see dataset.h. */
#include "dataset.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "pg_contract.h"

#define SHUFFLE_KEY UINT64_C(0x73687566666c65) /* "shuffle": keeps the order apart from other seeded streams */

void pg_dataset_close(pg_dataset *ds)
{
    for (int i = 0; i < ds->n; i++)
        pg_data_close(&ds->f[i]);
    memset(ds, 0, sizeof *ds);
}

int pg_dataset_open(pg_dataset *ds, const char *opt, const pg_paths *paths, int dtype, int rank, const int64_t *dims,
                    int64_t vocab, int64_t allowed, const char *what, const char *limit, char *err, size_t errlen)
{
    memset(ds, 0, sizeof *ds);
    if (paths->n < 1 || paths->n > PG_MAX_SHARDS) {
        snprintf(err, errlen, "%s: %d files given; a data set has 1 to %d", opt, paths->n, PG_MAX_SHARDS);
        return -1;
    }
    uint64_t h = UINT64_C(0x7064617461736574); /* "pdataset" */
    for (int i = 0; i < paths->n; i++) {
        char why[900];
        if (pg_data_open(&ds->f[i], paths->p[i], dtype, rank, dims, why, sizeof why) ||
            pg_data_ids(&ds->f[i], vocab, allowed, paths->p[i], what, limit, why, sizeof why)) {
            if (paths->n > 1)
                snprintf(err, errlen, "%s (file %d of the %d given as %s)", why, i + 1, paths->n, opt);
            else
                snprintf(err, errlen, "%s", why);
            if (ds->f[i].mapped)
                pg_data_close(&ds->f[i]);
            pg_dataset_close(ds);
            return -1;
        }
        ds->n = i + 1;
        ds->start[i] = ds->samples;
        ds->samples += ds->f[i].samples;
        ds->sample_elems = ds->f[i].sample_elems;
        ds->bytes += ds->f[i].file_bytes;
        h = pg_mix64(h ^ ds->f[i].hash);
    }
    ds->start[ds->n] = ds->samples;
    ds->hash = paths->n == 1 ? ds->f[0].hash : h; /* one file: its own hash, as before shards */
    return 0;
}

/* The samples of idx that shard k holds, copied under that shard's guard. */
typedef struct gather_job {
    const pg_dataset *ds;
    int k;
    const uint64_t *idx;
    int64_t n;
    unsigned char *dst;
} gather_job;

static void gather_shard(void *arg)
{
    const gather_job *j = arg;
    const pg_dataset *ds = j->ds;
    size_t rb = (size_t)ds->sample_elems * 4;
    uint64_t lo = ds->start[j->k], hi = ds->start[j->k + 1];
    const unsigned char *src = ds->f[j->k].data;
    for (int64_t i = 0; i < j->n; i++)
        if (j->idx[i] >= lo && j->idx[i] < hi)
            memcpy(j->dst + (size_t)i * rb, src + (j->idx[i] - lo) * rb, rb);
}

int pg_dataset_gather(const pg_dataset *ds, const uint64_t *idx, int64_t n, void *dst, char *err, size_t errlen)
{
    for (int k = 0; k < ds->n; k++) {
        gather_job j = {ds, k, idx, n, dst};
        if (pg_data_guarded(&ds->f[k], gather_shard, &j, err, errlen))
            return -1;
    }
    return 0;
}

/* Four Feistel rounds over 2h bits (h a half), keyed by (seed, epoch): a
 * bijection of [0, 4^h); the walk from j stays on j's cycle, so it reaches a
 * value below n (j's own image at the latest) and never another j's. */
uint64_t pg_shuffle_index(uint64_t seed, uint64_t epoch, uint64_t n, uint64_t j)
{
    if (n <= 1)
        return 0;
    int h = 1;
    while (h < 32 && (UINT64_C(1) << (2 * h)) < n)
        h++;
    uint64_t mask = (UINT64_C(1) << h) - 1, key = pg_mix64(pg_mix64(seed ^ SHUFFLE_KEY) ^ epoch), x = j;
    do {
        uint64_t left = x >> h, right = x & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t f = pg_mix64(key ^ (round << 40) ^ right) & mask;
            uint64_t t = left ^ f;
            left = right;
            right = t;
        }
        x = left << h | right;
    } while (x >= n);
    return x;
}

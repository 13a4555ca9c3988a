/* runtime/core/dataset.h — a data set: one or more .pgd files read as one (the
 * shards of --data, --targets, --eval-data, --eval-targets, --predict, in the
 * order given: sample s of the whole is sample s - start[i] of shard i), the
 * order a pass visits it (file order, or train.shuffle's fresh permutation
 * every epoch: a pure function of the seed and the epoch), and the guarded
 * copy of chosen samples into a batch buffer. */
#ifndef PG_DATASET_H
#define PG_DATASET_H

#include <stddef.h>
#include <stdint.h>
#include "pg_io.h"

#define PG_MAX_SHARDS 16

/* The files of one option (`--data a.pgd --data b.pgd`), in the order given. */
typedef struct pg_paths {
    int n;
    const char *p[PG_MAX_SHARDS];
} pg_paths;

typedef struct pg_dataset {
    int n;                              /* shards open */
    pg_datafile f[PG_MAX_SHARDS];
    uint64_t start[PG_MAX_SHARDS + 1];  /* first sample of shard i in the whole; start[n] = samples */
    uint64_t samples, sample_elems;     /* the whole; elements per sample (4 bytes each) */
    uint64_t bytes, hash;               /* every shard's size summed, and a hash of their hashes in order
                                           (what the stages compare at the rendezvous) */
} pg_dataset;

/* Open every shard of paths as pg_data_open does (dtype, per-sample shape,
 * exact size, finite values) and, for i32 data with vocab > 0, every id in
 * [0, vocab) or `allowed` (pg_data_ids; `what` names them: "token id", "target
 * id"; `limit` the bound: "vocabulary size"). opt names the option in
 * messages. 0, or -1 with the reason in err (naming the shard); nothing stays
 * open then. */
int pg_dataset_open(pg_dataset *ds, const char *opt, const pg_paths *paths, int dtype, int rank, const int64_t *dims,
                    int64_t vocab, int64_t allowed, const char *what, const char *limit, char *err, size_t errlen);
void pg_dataset_close(pg_dataset *ds);

/* Copy samples idx[0..n) (each below ds->samples) into rows 0..n-1 of dst.
 * 0, or -1 with "P was truncated or changed while this stage read it ..." in
 * err (the shard's mapping raised SIGBUS). */
int pg_dataset_gather(const pg_dataset *ds, const uint64_t *idx, int64_t n, void *dst, char *err, size_t errlen);

/* A seeded permutation of [0, n): the j-th sample epoch `epoch` visits. A
 * pure function of its four numbers (a Feistel network over the smallest
 * power-of-four range holding n, walked until it lands below n), so every
 * stage, replica and resumed run computes the same order on its own. */
uint64_t pg_shuffle_index(uint64_t seed, uint64_t epoch, uint64_t n, uint64_t j);

/* The sample of a pass over n samples at position g (step x batch + row):
 * epoch g / n, its (g mod n)-th sample, in file order or shuffled. */
static inline uint64_t pg_dataset_sample(uint64_t seed, int shuffle, uint64_t n, uint64_t g)
{
    return shuffle ? pg_shuffle_index(seed, g / n, n, g % n) : g % n;
}

#endif

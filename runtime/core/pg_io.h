/* runtime/core/pg_io.h — files a stage reads and writes.
 *
 * Data files (.pgd): inputs and targets, documented in docs/runtime.md:
 *   offset 0  u8[4]  magic "PGD1"
 *          4  u32    version (1)
 *          8  u32    dtype (0 = f32, 2 = i32; pg_dtype numbering)
 *         12  u32    rank r (1..5): dim 0 is the sample count
 *         16  u64[r] dims
 *   then numel * 4 bytes, little-endian, row-major. Nothing after.
 *
 * Checkpoints and weights: safetensors (8-byte LE header length, JSON header
 * with dtype/shape/data_offsets per tensor and "__metadata__", raw data). */
#ifndef PG_IO_H
#define PG_IO_H

#include <stddef.h>
#include <stdint.h>

typedef struct pg_datafile {
    int dtype;           /* 0 f32, 2 i32 */
    int rank;
    uint64_t dim[5];
    uint64_t samples;    /* dim[0] */
    uint64_t sample_elems; /* product of dim[1..] */
    void *data;          /* mmap'd or read; samples*sample_elems*4 bytes */
    size_t map_bytes;
    int mapped;
    const char *path;    /* as given to pg_data_open (the caller keeps it alive) */
    uint64_t file_bytes; /* the whole file */
    uint64_t hash;       /* pg_data_hash of the whole file, made while it was checked */
    int fd1;             /* the file kept open, its descriptor + 1 (0: none, as a zeroed struct has):
                            its modification and change times are checked after every read */
    int64_t mtime_ns, ctime_ns; /* as they were when it was opened */
} pg_datafile;

/* Open and validate against the expected dtype and per-sample shape
 * (exp_dims[0..exp_rank-1], a negative one taking any size): a regular file (a FIFO is refused, never waited
 * on), magic, version, dtype, shape, the exact size, and for f32 every value
 * finite. -1 with a message naming the file and what differs. The mapping is
 * guarded: a file truncated while it is mapped gives SIGBUS on a read, which
 * pg_data_copy turns into an error and any other read into a message naming
 * the file and exit status 1, never a silent signal death. */
int pg_data_open(pg_datafile *f, const char *path, int exp_dtype, int exp_rank,
                 const int64_t *exp_dims, char *err, size_t errlen);
void pg_data_close(pg_datafile *f);
/* 0 when every i32 id of f is in [0, vocab) or is `allowed` (cross_entropy's
 * ignored id; PG_DATA_NO_ID: none) (vocab <= 0 or f32: no check); -1 with
 * "PATH: sample S, element E is WHAT V, outside [0, vocab): the model's LIMIT
 * is vocab" in err. */
#define PG_DATA_NO_ID INT64_MIN
int pg_data_ids(const pg_datafile *f, int64_t vocab, int64_t allowed, const char *path, const char *what,
                const char *limit, char *err, size_t errlen);
/* Run fn(arg), which reads f's mapping; 0, or -1 with "P was truncated or
 * changed while this stage read it ..." in err when a read faulted, or when
 * the file's modification or change time (fstat of the open file, after the
 * read) is no longer what it was at the start: a rewrite in place, even at
 * the same size, is caught by the next read (the change time cannot be set
 * back by the user). Not caught: a change after the last read; a file
 * replaced by another under its name (rename, a new inode): the run goes on
 * reading the one it opened and checked, unchanged. */
int pg_data_guarded(const pg_datafile *f, void (*fn)(void *arg), void *arg, char *err, size_t errlen);
/* The 64-bit hash of n bytes the stages compare data files by (word-wise,
 * fast): h' = pg_mix64(h ^ word) per little-endian 8 bytes, the tail padded
 * with zeros, then the length mixed in. */
uint64_t pg_data_hash(const void *p, size_t n);
/* pg_data_hash of a whole regular file and its size (a --load file, so the
 * stages can compare what they read). 0, or -1 with the reason in err. */
int pg_data_file_hash(const char *path, uint64_t *bytes, uint64_t *hash, char *err, size_t errlen);
/* The header of a data file of rank (1..5) dims into h (PG_DATA_HEADER_MAX
 * bytes); returns its length. */
#define PG_DATA_HEADER_MAX (16 + 8 * 5)
size_t pg_data_header(unsigned char *h, int dtype, int rank, const uint64_t *dims);
/* Write a data file atomically (tmp + rename). */
int pg_data_write(const char *path, int dtype, int rank, const uint64_t *dims,
                  const void *data, char *err, size_t errlen);

/* Seeded synthetic batch: deterministic from (seed, step, sample index) only,
 * so every stage that needs a sample makes the same one. f32 in [-1, 1);
 * i32 in [0, vocab). */
void pg_synth_f32(float *dst, uint64_t seed, uint64_t stream, int64_t first_sample,
                  int64_t rows, int64_t per_row);
void pg_synth_i32(int32_t *dst, uint64_t seed, uint64_t stream, int64_t first_sample,
                  int64_t rows, int64_t per_row, int32_t vocab);

/* safetensors */
typedef struct pg_st_tensor {
    const char *name;
    int dtype;              /* 0 f32, 2 i32 */
    int rank;
    int64_t dim[5];
    const void *data;       /* host memory */
    size_t bytes;
} pg_st_tensor;
/* Write atomically: path.tmp, fsync, rename, fsync dir. metadata: NULL-terminated
 * key, value pairs of strings. -1 with message on failure (old file untouched). */
int pg_st_write(const char *path, const pg_st_tensor *t, int n, const char *const *metadata,
                char *err, size_t errlen);
/* Read: fills data of each expected tensor (by name), checking dtype and shape.
 * -1 with a message on a missing tensor, wrong shape, truncated or malformed file. */
typedef struct pg_st_want {
    const char *name;
    int dtype, rank;
    int64_t dim[5];
    void *dst;
    size_t bytes;
    int bf16_ok;            /* in: an F32 tensor stored as BF16 is taken, widened exactly (bf16 is f32's top half) */
    int was_bf16;           /* out: it was */
} pg_st_want;
int pg_st_read(const char *path, pg_st_want *w, int n, char *err, size_t errlen);
/* The names of a file's tensors, sorted (strcmp), after validating its header
 * and layout: *names is one malloc'd block (free it), *n of them. -1 with a
 * message. */
int pg_st_names(const char *path, char ***names, int *n, char *err, size_t errlen);
/* The rank and dims of each named tensor of a file (rank -1: not in it), after
 * validating its header and layout. -1 with a message. */
int pg_st_shapes(const char *path, const char *const *names, int n, int *rank, int64_t (*dim)[5], char *err,
                 size_t errlen);
/* pg_hash64 (FNV-1a 64 from its offset basis) over every tensor's bytes in data
 * order, i.e. the whole data section, read in bounded pieces; with_table: first
 * over the tensor table (pg_st_table_hash's lines, in data order), so a
 * checksum covers what the bytes mean too. -1 with a message. */
int pg_st_data_hash(const char *path, int with_table, uint64_t *hash, char *err, size_t errlen);
/* The tensor table of t[n] as pg_st_write lays it out, hashed into h: a line
 * "name\tdtype\tdims\tbegin,end\n" per tensor (pg_hash64). A checkpoint's
 * checksum is the table's hash carried on over its data: two tensors' names
 * swapped, a shape, dtype or offset changed, all change it. */
uint64_t pg_st_table_hash(const pg_st_tensor *t, int n, uint64_t h);
/* Value of a __metadata__ key after pg_st_read_meta; -1 if missing. */
int pg_st_read_meta(const char *path, const char *key, char *val, size_t vallen, char *err, size_t errlen);

/* FNV-1a 64 over bytes (plan hashes). */
uint64_t pg_hash64(const void *p, size_t n, uint64_t h);
/* splitmix64's finaliser, a bijective 64-bit mix: every seeded stream of the
 * runtime (synthetic data, token windows, sampling) is built from it. */
uint64_t pg_mix64(uint64_t z);

#endif

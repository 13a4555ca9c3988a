/* runtime/core/data.c — .pgd data files (format in pg_io.h), the seeded
 * synthetic batches used when no data file is given, and pg_hash64. */
#include "pg_io.h"
#include "io_atomic.h"
#include "pg_le.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PGD_VERSION 1u
#define PGD_MAX_RANK 5

static const char *dtype_name(int dt)
{
    return dt == 0 ? "f32" : dt == 2 ? "i32" : "an unknown type";
}

/* "[512]" / "[32, 16]" */
static void shape_str(char *b, size_t len, int rank, const uint64_t *d)
{
    size_t o = (size_t)snprintf(b, len, "[");
    for (int i = 0; i < rank && o < len; i++)
        o += (size_t)snprintf(b + o, len - o, "%s%llu", i ? ", " : "", (unsigned long long)d[i]);
    if (o < len) snprintf(b + o, len - o, "]");
}

/* a * b, or -1 on overflow past 2^62 */
static int mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a && b > (UINT64_C(1) << 62) / a) return 0;
    *out = a * b;
    return 1;
}

int pg_data_open(pg_datafile *f, const char *path, int exp_dtype, int exp_rank,
                 const int64_t *exp_dims, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    unsigned char h[16 + 8 * PGD_MAX_RANK];
    ssize_t got = pread(fd, h, sizeof h, 0);
    if (got < 0) got = 0;
    if (got < 4 || memcmp(h, "PGD1", 4) != 0) {
        snprintf(err, errlen, "%s: not a pipegen data file (bad magic)", path);
        goto fail;
    }
    if (got < 16) {
        snprintf(err, errlen, "%s is truncated: the file has %llu bytes, shorter than its header", path,
                 (unsigned long long)fsize);
        goto fail;
    }
    uint32_t ver = pg_get32(h + 4), dt = pg_get32(h + 8), rank = pg_get32(h + 12);
    if (ver != PGD_VERSION) {
        snprintf(err, errlen, "%s: data file version %u, this build reads version %u", path, ver, PGD_VERSION);
        goto fail;
    }
    if (dt != 0 && dt != 2) {
        snprintf(err, errlen, "%s: unknown dtype code %u (0 = f32, 2 = i32)", path, dt);
        goto fail;
    }
    if (rank < 1 || rank > PGD_MAX_RANK) {
        snprintf(err, errlen, "%s: rank %u out of range 1..%d", path, rank, PGD_MAX_RANK);
        goto fail;
    }
    size_t hdr = 16 + 8 * (size_t)rank;
    if ((size_t)got < hdr) {
        snprintf(err, errlen, "%s is truncated: the file has %llu bytes, shorter than its %zu-byte header", path,
                 (unsigned long long)fsize, hdr);
        goto fail;
    }
    f->dtype = (int)dt;
    f->rank = (int)rank;
    for (uint32_t i = 0; i < rank; i++) f->dim[i] = pg_get64(h + 16 + 8 * i);
    char want[160], have[160];
    uint64_t wd[PGD_MAX_RANK] = {0};
    int wr = exp_rank < 0 ? 0 : exp_rank > PGD_MAX_RANK ? PGD_MAX_RANK : exp_rank;
    for (int i = 0; i < wr; i++) wd[i] = (uint64_t)exp_dims[i];
    shape_str(want, sizeof want, wr, wd);
    shape_str(have, sizeof have, (int)rank - 1, f->dim + 1);
    if ((int)dt != exp_dtype) {
        snprintf(err, errlen, "%s holds %s but the model expects %s%s", path, dtype_name((int)dt),
                 dtype_name(exp_dtype), want);
        goto fail;
    }
    int same = (int)rank - 1 == exp_rank;
    for (int i = 0; same && i < exp_rank; i++) same = exp_dims[i] >= 0 && f->dim[i + 1] == (uint64_t)exp_dims[i];
    if (!same) {
        snprintf(err, errlen, "%s holds samples of shape %s but the model expects %s", path, have, want);
        goto fail;
    }
    if (f->dim[0] == 0) {
        snprintf(err, errlen, "%s holds no samples", path);
        goto fail;
    }
    uint64_t per = 1, data_bytes;
    for (uint32_t i = 1; i < rank; i++)
        if (!mul_ok(per, f->dim[i], &per)) per = UINT64_MAX;
    uint64_t per_bytes = 0;
    if (per == UINT64_MAX || !mul_ok(per, 4, &per_bytes) || !mul_ok(per_bytes, f->dim[0], &data_bytes)) {
        snprintf(err, errlen, "%s: header dims are absurdly large", path);
        goto fail;
    }
    f->samples = f->dim[0];
    f->sample_elems = per;
    if (fsize - hdr != data_bytes) {
        if (fsize - hdr < data_bytes)
            snprintf(err, errlen,
                     "%s is truncated: header says %llu samples of %llu bytes = %llu bytes, file has %llu bytes", path,
                     (unsigned long long)f->samples, (unsigned long long)(per * 4), (unsigned long long)data_bytes,
                     (unsigned long long)(fsize - hdr));
        else
            snprintf(err, errlen,
                     "%s has %llu bytes after its data: header says %llu samples of %llu bytes = %llu bytes, "
                     "file has %llu bytes",
                     path, (unsigned long long)(fsize - hdr - data_bytes), (unsigned long long)f->samples,
                     (unsigned long long)(per * 4), (unsigned long long)data_bytes, (unsigned long long)(fsize - hdr));
        goto fail;
    }
    void *m = mmap(NULL, (size_t)fsize, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "cannot map %s: %s", path, strerror(errno));
        goto fail;
    }
    close(fd);
    f->map_bytes = (size_t)fsize;
    f->mapped = 1;
    f->data = (unsigned char *)m + hdr;
    return 0;
fail:
    close(fd);
    memset(f, 0, sizeof *f);
    return -1;
}

void pg_data_close(pg_datafile *f)
{
    if (!f) return;
    if (f->mapped && f->data) {
        /* data points past the header; the mapping starts at the file's first byte */
        size_t hdr = 16 + 8 * (size_t)f->rank;
        munmap((unsigned char *)f->data - hdr, f->map_bytes);
    } else {
        free(f->data);
    }
    memset(f, 0, sizeof *f);
}

int pg_data_write(const char *path, int dtype, int rank, const uint64_t *dims,
                  const void *data, char *err, size_t errlen)
{
    if (dtype != 0 && dtype != 2) {
        snprintf(err, errlen, "cannot write %s: dtype %d is not f32 (0) or i32 (2)", path, dtype);
        return -1;
    }
    if (rank < 1 || rank > PGD_MAX_RANK) {
        snprintf(err, errlen, "cannot write %s: rank %d out of range 1..%d", path, rank, PGD_MAX_RANK);
        return -1;
    }
    unsigned char h[16 + 8 * PGD_MAX_RANK];
    memcpy(h, "PGD1", 4);
    pg_put32(h + 4, PGD_VERSION);
    pg_put32(h + 8, (uint32_t)dtype);
    pg_put32(h + 12, (uint32_t)rank);
    uint64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        pg_put64(h + 16 + 8 * i, dims[i]);
        if (!mul_ok(numel, dims[i], &numel)) {
            snprintf(err, errlen, "cannot write %s: dims too large", path);
            return -1;
        }
    }
    const void *parts[2] = {h, data};
    size_t lens[2] = {16 + 8 * (size_t)rank, (size_t)numel * 4};
    return pg_io_write_atomic(path, parts, lens, 2, err, errlen);
}

/* ---- synthetic data ------------------------------------------------------ */

uint64_t pg_mix64(uint64_t z)
{
    z += UINT64_C(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Element e of sample s of stream t under seed S is a pure function of the four
 * numbers (counter-based, no state carried between calls):
 *     key(S, t, s) = pg_mix64(pg_mix64(pg_mix64(S) ^ t) ^ s)
 *     bits         = pg_mix64(key ^ e)
 *     f32: (bits >> 40) * 2^-23 - 1          (24 random bits -> [-1, 1), exact)
 *     i32: ((bits >> 32) * vocab) >> 32      (multiply-shift -> [0, vocab))
 * so stage 0 (inputs) and the loss stage (targets) make the same samples on
 * their own, for any batch split. */
static uint64_t row_key(uint64_t seed, uint64_t stream, int64_t sample)
{
    return pg_mix64(pg_mix64(pg_mix64(seed) ^ stream) ^ (uint64_t)sample);
}

void pg_synth_f32(float *dst, uint64_t seed, uint64_t stream, int64_t first_sample,
                  int64_t rows, int64_t per_row)
{
    for (int64_t r = 0; r < rows; r++) {
        uint64_t key = row_key(seed, stream, first_sample + r);
        for (int64_t e = 0; e < per_row; e++) {
            uint64_t bits = pg_mix64(key ^ (uint64_t)e);
            dst[r * per_row + e] = (float)(bits >> 40) * (1.0f / 8388608.0f) - 1.0f;
        }
    }
}

void pg_synth_i32(int32_t *dst, uint64_t seed, uint64_t stream, int64_t first_sample,
                  int64_t rows, int64_t per_row, int32_t vocab)
{
    uint64_t v = vocab > 0 ? (uint64_t)vocab : 1;
    for (int64_t r = 0; r < rows; r++) {
        uint64_t key = row_key(seed, stream, first_sample + r);
        for (int64_t e = 0; e < per_row; e++) {
            uint64_t bits = pg_mix64(key ^ (uint64_t)e);
            dst[r * per_row + e] = (int32_t)(((bits >> 32) * v) >> 32);
        }
    }
}

/* ---- hashing ------------------------------------------------------------- */

uint64_t pg_hash64(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

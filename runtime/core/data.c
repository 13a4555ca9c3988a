/* runtime/core/data.c — .pgd data files (format in pg_io.h) and their id
 * check, the seeded synthetic batches used when no data file is given, and
 * pg_hash64. */
#include "pg_io.h"
#include "io_atomic.h"
#include "pg_le.h"
#include "pg_contract.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
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
        if (d[i] == UINT64_MAX) /* an expected dimension of any size */
            o += (size_t)snprintf(b + o, len - o, "%sn", i ? ", " : "");
        else
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

/* ---- guarded mappings ------------------------------------------------------
 * A mapped file that shrinks under us (truncated, or replaced in place) makes
 * the next read of a vanished page raise SIGBUS. The handler finds the mapping
 * the faulting address lies in: inside pg_data_guarded it jumps back, which
 * returns an error; anywhere else it writes a message naming the file and
 * exits 1. A SIGBUS outside every mapping is not ours: default action. */
#define MAX_MAPS 96 /* every shard of --data, --targets, --eval-data, --eval-targets, --predict */
static struct {
    const unsigned char *base[MAX_MAPS];
    size_t len[MAX_MAPS];
    const char *path[MAX_MAPS];
    sigjmp_buf *armed;                /* set while pg_data_guarded runs fn */
    volatile sig_atomic_t hit;        /* the mapping that faulted */
    int installed;
} bus = {.hit = -1};

static void bus_say(const char *s)
{
    ssize_t w = write(2, s, strlen(s));
    (void)w;
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    const unsigned char *a = si ? (const unsigned char *)si->si_addr : NULL;
    for (int i = 0; i < MAX_MAPS; i++) {
        if (!bus.base[i] || a < bus.base[i] || a >= bus.base[i] + bus.len[i])
            continue;
        bus.hit = i;
        if (bus.armed)
            siglongjmp(*bus.armed, 1);
        bus_say("data file ");
        bus_say(bus.path[i] ? bus.path[i] : "?");
        bus_say(" was truncated or changed while this stage read it (SIGBUS on its mapping): "
                "leave data files unchanged while a run uses them\n");
        _exit(1);
    }
    signal(sig, SIG_DFL); /* not a data file: die of it as before */
    raise(sig);
}

static void map_register(const void *base, size_t len, const char *path)
{
    if (!bus.installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, NULL);
        bus.installed = 1;
    }
    for (int i = 0; i < MAX_MAPS; i++)
        if (!bus.base[i]) {
            bus.len[i] = len;
            bus.path[i] = path;
            bus.base[i] = base;
            return;
        }
}

static void map_forget(const void *base)
{
    for (int i = 0; i < MAX_MAPS; i++)
        if (bus.base[i] == base)
            bus.base[i] = NULL;
}

static int64_t ns_of(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int pg_data_guarded(const pg_datafile *f, void (*fn)(void *arg), void *arg, char *err, size_t errlen)
{
    sigjmp_buf jb;
    sigjmp_buf *volatile outer = bus.armed;
    if (sigsetjmp(jb, 1)) {
        bus.armed = outer;
        struct stat st;
        char now[64] = "it is gone";
        if (f->path && stat(f->path, &st) == 0)
            snprintf(now, sizeof now, "it now has %llu bytes", (unsigned long long)st.st_size);
        snprintf(err, errlen,
                 "%s was truncated or changed while this stage read it (%s, it had %llu at the start): leave data "
                 "files unchanged while a run uses them",
                 f->path ? f->path : "a data file", now, (unsigned long long)f->file_bytes);
        return -1;
    }
    bus.armed = &jb;
    fn(arg);
    bus.armed = outer;
    struct stat st;
    if (f->fd1 && fstat(f->fd1 - 1, &st) == 0 &&
        (ns_of(st.st_mtim) != f->mtime_ns || ns_of(st.st_ctim) != f->ctime_ns)) {
        snprintf(err, errlen,
                 "%s was changed while this stage read it (written to %.3f s after it was opened, at the same size "
                 "or not): leave data files unchanged while a run uses them",
                 f->path ? f->path : "a data file", (double)(ns_of(st.st_ctim) - f->ctime_ns) * 1e-9);
        return -1;
    }
    return 0;
}

uint64_t pg_data_hash(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = UINT64_C(0x70676468617368), w; /* "pgdhash" */
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, b + i, 8);
        h = pg_mix64(h ^ pg_get64((const unsigned char *)&w));
    }
    if (i < n) {
        unsigned char t[8] = {0};
        memcpy(t, b + i, n - i);
        h = pg_mix64(h ^ pg_get64(t));
    }
    return pg_mix64(h ^ (uint64_t)n);
}

typedef struct hash_job {
    const void *p;
    size_t n;
    uint64_t h;
} hash_job;

static void hash_all(void *arg)
{
    hash_job *j = arg;
    j->h = pg_data_hash(j->p, j->n);
}

int pg_data_file_hash(const char *path, uint64_t *bytes, uint64_t *hash, char *err, size_t errlen)
{
    uint64_t size = 0;
    int fd = pg_io_open_regular(path, &size, err, errlen);
    if (fd < 0)
        return -1;
    size_t n = (size_t)size;
    void *m = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (n && m == MAP_FAILED) {
        snprintf(err, errlen, "cannot map %s: %s", path, strerror(errno));
        return -1;
    }
    pg_datafile f;
    memset(&f, 0, sizeof f);
    f.path = path;
    f.file_bytes = n;
    hash_job j = {m, n, 0};
    int rc = 0;
    if (n) {
        map_register(m, n, path);
        rc = pg_data_guarded(&f, hash_all, &j, err, errlen);
        map_forget(m);
        munmap(m, n);
    } else {
        j.h = pg_data_hash("", 0);
    }
    *bytes = n;
    *hash = j.h;
    return rc;
}

/* The checks over every value, in one pass under the SIGBUS guard: the hash of
 * the whole file and (f32) the first value that is not finite. */
typedef struct scan_job {
    const unsigned char *file;  /* the mapping, from byte 0 */
    uint64_t bytes, hdr;
    int f32;
    uint64_t hash, bad;         /* bad: index of the first non-finite value, or UINT64_MAX */
    float badv;
} scan_job;

static void scan_values(void *arg)
{
    scan_job *j = arg;
    j->hash = pg_data_hash(j->file, (size_t)j->bytes);
    j->bad = UINT64_MAX;
    if (!j->f32)
        return;
    const unsigned char *v = j->file + j->hdr;
    uint64_t n = (j->bytes - j->hdr) / 4;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t u = pg_get32(v + 4 * i);
        if ((u & 0x7f800000u) == 0x7f800000u) { /* exponent all ones: inf or nan */
            memcpy(&j->badv, &u, 4);
            j->bad = i;
            return;
        }
    }
}

int pg_data_open(pg_datafile *f, const char *path, int exp_dtype, int exp_rank,
                 const int64_t *exp_dims, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    uint64_t fsize = 0;
    int fd = pg_io_open_regular(path, &fsize, err, errlen);
    if (fd < 0)
        return -1;
    struct stat st0;
    if (fstat(fd, &st0) == 0) { /* the times every later read is checked against (pg_data_guarded) */
        f->mtime_ns = ns_of(st0.st_mtim);
        f->ctime_ns = ns_of(st0.st_ctim);
    }
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
    for (int i = 0; same && i < exp_rank; i++) same = exp_dims[i] < 0 || f->dim[i + 1] == (uint64_t)exp_dims[i];
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
    f->fd1 = fd + 1; /* kept: its times say whether the file was written to meanwhile */
    fd = -1;
    f->map_bytes = (size_t)fsize;
    f->mapped = 1;
    f->data = (unsigned char *)m + hdr;
    f->path = path;
    f->file_bytes = fsize;
    map_register(m, (size_t)fsize, path);
    scan_job j = {m, fsize, hdr, dt == 0, 0, 0, 0.0f};
    if (pg_data_guarded(f, scan_values, &j, err, errlen))
        goto fail;
    f->hash = j.hash;
    if (j.bad != UINT64_MAX) {
        snprintf(err, errlen,
                 "%s: sample %llu, element %llu is %s: a data file must hold finite values (it would train to "
                 "garbage, or to NaN weights)",
                 path, (unsigned long long)(j.bad / per), (unsigned long long)(j.bad % per),
                 isnan(j.badv) ? "nan" : j.badv > 0 ? "inf" : "-inf");
        goto fail;
    }
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    pg_data_close(f);
    return -1;
}

void pg_data_close(pg_datafile *f)
{
    if (!f) return;
    if (f->mapped && f->data) {
        /* data points past the header; the mapping starts at the file's first byte */
        size_t hdr = 16 + 8 * (size_t)f->rank;
        map_forget((unsigned char *)f->data - hdr);
        munmap((unsigned char *)f->data - hdr, f->map_bytes);
    } else {
        free(f->data);
    }
    if (f->fd1)
        close(f->fd1 - 1);
    memset(f, 0, sizeof *f);
}

size_t pg_data_header(unsigned char *h, int dtype, int rank, const uint64_t *dims)
{
    memcpy(h, "PGD1", 4);
    pg_put32(h + 4, PGD_VERSION);
    pg_put32(h + 8, (uint32_t)dtype);
    pg_put32(h + 12, (uint32_t)rank);
    for (int i = 0; i < rank && i < PGD_MAX_RANK; i++)
        pg_put64(h + 16 + 8 * i, dims[i]);
    return 16 + 8 * (size_t)rank;
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
    unsigned char h[PG_DATA_HEADER_MAX];
    size_t hl = pg_data_header(h, dtype, rank, dims);
    uint64_t numel = 1;
    for (int i = 0; i < rank; i++)
        if (!mul_ok(numel, dims[i], &numel)) {
            snprintf(err, errlen, "cannot write %s: dims too large", path);
            return -1;
        }
    const void *parts[2] = {h, data};
    size_t lens[2] = {hl, (size_t)numel * 4};
    return pg_io_write_atomic(path, parts, lens, 2, err, errlen);
}

/* ---- token ids ----------------------------------------------------------- */

int pg_data_ids(const pg_datafile *f, int64_t vocab, int64_t allowed, const char *path, const char *what,
                const char *limit, char *err, size_t errlen)
{
    if (f->dtype != 2 || vocab <= 0)
        return 0;
    const int32_t *v = f->data;
    uint64_t n = f->samples * f->sample_elems;
    for (uint64_t i = 0; i < n; i++)
        if ((v[i] < 0 || (int64_t)v[i] >= vocab) && (int64_t)v[i] != allowed) {
            snprintf(err, errlen,
                     "%s: sample %" PRIu64 ", element %" PRIu64 " is %s %" PRId32 ", outside [0, %" PRId64
                     "): the model's %s is %" PRId64,
                     path, i / f->sample_elems, i % f->sample_elems, what, v[i], vocab, limit, vocab);
            return -1;
        }
    return 0;
}

/* ---- synthetic data ------------------------------------------------------ */

uint64_t pg_mix64(uint64_t z) { return pg_splitmix64(z); }

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

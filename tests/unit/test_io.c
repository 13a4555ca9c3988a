/* tests/unit/test_io.c — .pgd data files, data sets of several files and
 * their shuffled order, synthetic samples, pg_hash64 and safetensors: round
 * trips and every rejection message.
 *   usage: test_io DIR   (scratch directory; DIR/interop.safetensors is left
 *   behind for the PyTorch check in tests/io.t) */
#include "dataset.h"
#include "errcap.h"
#include "io_atomic.h"
#include "pg_io.h"
#include "../tap.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[512];
static char err[1024];

static const char *at(const char *name)
{
    static char b[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(b[k], sizeof b[k], "%s/%s", dir, name);
    return b[k];
}

static void write_raw(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) exit(99);
    fwrite(p, 1, n, f);
    fclose(f);
}

static size_t read_raw(const char *path, void *p, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(p, 1, cap, f);
    fclose(f);
    return n;
}

/* A .pgd header by hand: magic, version, dtype, rank, dims. */
static size_t pgd_header(unsigned char *b, const char *magic, uint32_t ver, uint32_t dt, uint32_t rank,
                         const uint64_t *dims)
{
    memcpy(b, magic, 4);
    memcpy(b + 4, &ver, 4);
    memcpy(b + 8, &dt, 4);
    memcpy(b + 12, &rank, 4);
    memcpy(b + 16, dims, 8 * rank);
    return 16 + 8 * rank;
}

static int tmp_files_left(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int c = 0;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) c++;
    if (d) closedir(d);
    return c;
}

static uint64_t mix64(uint64_t z) /* the documented formula, restated */
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void test_data(void)
{
    pg_datafile f;
    /* round trip f32 [10, 4, 3] */
    float v[120];
    for (int i = 0; i < 120; i++) v[i] = (float)i * 0.25f - 3.0f;
    uint64_t dims[3] = {10, 4, 3};
    int64_t per[2] = {4, 3};
    OK(pg_data_write(at("x.pgd"), 0, 3, dims, v, err, sizeof err) == 0, "pg_data_write f32 [10,4,3]: %s", err);
    int r = pg_data_open(&f, at("x.pgd"), 0, 2, per, err, sizeof err);
    OK(r == 0 && f.samples == 10 && f.sample_elems == 12 && f.rank == 3 && f.dtype == 0 &&
           memcmp(f.data, v, sizeof v) == 0,
       "f32 data file round trip: %s", r ? err : "");
    if (r == 0) pg_data_close(&f);
    int32_t iv[6] = {0, 5, 9, -1, 7, 2};
    uint64_t idims[2] = {3, 2};
    int64_t iper[1] = {2};
    OK(pg_data_write(at("y.pgd"), 2, 2, idims, iv, err, sizeof err) == 0 &&
           pg_data_open(&f, at("y.pgd"), 2, 1, iper, err, sizeof err) == 0 && f.samples == 3 &&
           memcmp(f.data, iv, sizeof iv) == 0,
       "i32 data file round trip: %s", err);
    pg_data_close(&f);

    unsigned char b[4096];
    char want[900];
    size_t h;
    uint64_t d1[2] = {3, 2};
    /* bad magic */
    h = pgd_header(b, "PGDX", 1, 0, 2, d1);
    memset(b + h, 0, 24);
    write_raw(at("bad.pgd"), b, h + 24);
    snprintf(want, sizeof want, "%s: not a pipegen data file (bad magic)", at("bad.pgd"));
    OK(pg_data_open(&f, at("bad.pgd"), 0, 1, iper, err, sizeof err) == -1 && !strcmp(err, want), "bad magic: %s", err);
    /* version */
    h = pgd_header(b, "PGD1", 2, 0, 2, d1);
    write_raw(at("bad.pgd"), b, h + 24);
    snprintf(want, sizeof want, "%s: data file version 2, this build reads version 1", at("bad.pgd"));
    OK(pg_data_open(&f, at("bad.pgd"), 0, 1, iper, err, sizeof err) == -1 && !strcmp(err, want), "bad version: %s", err);
    /* dtype */
    int64_t p512[1] = {512};
    snprintf(want, sizeof want, "%s holds i32 but the model expects f32[512]", at("y.pgd"));
    OK(pg_data_open(&f, at("y.pgd"), 0, 1, p512, err, sizeof err) == -1 && !strcmp(err, want), "dtype differs: %s", err);
    /* shape */
    int64_t p12[1] = {12};
    snprintf(want, sizeof want, "%s holds samples of shape [4, 3] but the model expects [12]", at("x.pgd"));
    OK(pg_data_open(&f, at("x.pgd"), 0, 1, p12, err, sizeof err) == -1 && !strcmp(err, want), "shape differs: %s", err);
    /* truncated */
    uint64_t d2[2] = {1000, 512};
    h = pgd_header(b, "PGD1", 1, 0, 2, d2);
    memset(b + h, 0, 1500);
    write_raw(at("t.pgd"), b, h + 1500);
    snprintf(want, sizeof want,
             "%s is truncated: header says 1000 samples of 2048 bytes = 2048000 bytes, file has 1500 bytes", at("t.pgd"));
    OK(pg_data_open(&f, at("t.pgd"), 0, 1, p512, err, sizeof err) == -1 && !strcmp(err, want), "truncated: %s", err);
    /* trailing bytes */
    h = pgd_header(b, "PGD1", 1, 2, 2, d1);
    memset(b + h, 0, 24 + 3);
    write_raw(at("t.pgd"), b, h + 27);
    snprintf(want, sizeof want,
             "%s has 3 bytes after its data: header says 3 samples of 8 bytes = 24 bytes, file has 27 bytes", at("t.pgd"));
    OK(pg_data_open(&f, at("t.pgd"), 2, 1, iper, err, sizeof err) == -1 && !strcmp(err, want), "trailing bytes: %s", err);
    /* header cut short */
    write_raw(at("t.pgd"), b, 20);
    OK(pg_data_open(&f, at("t.pgd"), 2, 1, iper, err, sizeof err) == -1 && strstr(err, "is truncated") &&
           strstr(err, "shorter than its 32-byte header"),
       "header cut short: %s", err);
    /* rank out of range */
    uint64_t d6[6] = {1, 1, 1, 1, 1, 1};
    h = pgd_header(b, "PGD1", 1, 0, 6, d6);
    write_raw(at("t.pgd"), b, h + 4);
    OK(pg_data_open(&f, at("t.pgd"), 0, 1, iper, err, sizeof err) == -1 && strstr(err, "rank 6 out of range 1..5"),
       "rank 6 refused: %s", err);
    /* (fuzz) 2^62 elements per sample: their byte count wraps to 0, and a
     * header-only file was taken as one sample of 2^62 elements */
    uint64_t dhuge[2] = {1, UINT64_C(1) << 62};
    int64_t phuge[1] = {INT64_C(1) << 62};
    h = pgd_header(b, "PGD1", 1, 0, 2, dhuge);
    write_raw(at("t.pgd"), b, h);
    OK(pg_data_open(&f, at("t.pgd"), 0, 1, phuge, err, sizeof err) == -1 && strstr(err, "t.pgd: header dims are absurdly large"),
       "a sample of 2^62 elements is refused: %s", err);
    /* missing */
    snprintf(want, sizeof want, "cannot open %s: No such file or directory", at("nope.pgd"));
    OK(pg_data_open(&f, at("nope.pgd"), 0, 1, iper, err, sizeof err) == -1 && !strcmp(err, want), "missing file: %s", err);
    /* a failed write leaves no temp file */
    OK(pg_data_write(at("no/such/dir.pgd"), 0, 3, dims, v, err, sizeof err) == -1 && strstr(err, "no/such/dir.pgd") &&
           strstr(err, "No such file or directory") && tmp_files_left() == 0,
       "write into a missing directory fails cleanly: %s", err);
}

/* Shards read as one, in order; the order of an epoch a permutation, a pure
 * function of (seed, epoch), another one for another epoch or seed. */
static void test_dataset(void)
{
    float a[12], b[8];
    for (int i = 0; i < 12; i++) a[i] = (float)i;
    for (int i = 0; i < 8; i++) b[i] = 100.0f + (float)i;
    uint64_t da[2] = {6, 2}, db[2] = {4, 2};
    int64_t per[1] = {2};
    pg_data_write(at("s0.pgd"), 0, 2, da, a, err, sizeof err);
    pg_data_write(at("s1.pgd"), 0, 2, db, b, err, sizeof err);
    char p0[700], p1[700], p2[700]; /* at()'s buffers are reused */
    snprintf(p0, sizeof p0, "%s", at("s0.pgd"));
    snprintf(p1, sizeof p1, "%s", at("s1.pgd"));
    snprintf(p2, sizeof p2, "%s", at("s2.pgd"));
    pg_paths two = {2, {p0, p1}};
    pg_dataset ds;
    int r = pg_dataset_open(&ds, "--data", &two, 0, 1, per, 0, PG_DATA_NO_ID, NULL, NULL, err, sizeof err);
    OK(r == 0 && ds.n == 2 && ds.samples == 10 && ds.start[1] == 6 && ds.sample_elems == 2,
       "two shards are one data set of 10 samples: %s", r ? err : "");
    uint64_t idx[3] = {7, 0, 5};
    float got[6];
    OK(r == 0 && pg_dataset_gather(&ds, idx, 3, got, err, sizeof err) == 0 && got[0] == 102.0f && got[1] == 103.0f &&
           got[2] == 0.0f && got[4] == 10.0f && got[5] == 11.0f,
       "samples 7, 0, 5 gathered from their shards in the order asked");
    if (r == 0) pg_dataset_close(&ds);
    uint64_t dc[3] = {2, 2, 1};
    pg_data_write(at("s2.pgd"), 0, 3, dc, a, err, sizeof err);
    two.p[1] = p2;
    char want[900];
    snprintf(want, sizeof want, "%s holds samples of shape [2, 1] but the model expects [2] (file 2 of the 2 given as "
             "--data)", p2);
    OK(pg_dataset_open(&ds, "--data", &two, 0, 1, per, 0, PG_DATA_NO_ID, NULL, NULL, err, sizeof err) == -1 && !strcmp(err, want),
       "a shard of another shape is refused, naming it and its place: %s", err);

    static const uint64_t ns[] = {1, 2, 3, 7, 64, 65, 1000, 4099};
    int perm_ok = 1, pure = 1, other = 0;
    static unsigned char seen[4099];
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        uint64_t n = ns[k];
        memset(seen, 0, sizeof seen);
        for (uint64_t j = 0; j < n; j++) {
            uint64_t x = pg_shuffle_index(42, 3, n, j);
            if (x >= n || seen[x]++)
                perm_ok = 0;
            pure &= x == pg_shuffle_index(42, 3, n, j);
            other += n > 2 && (x != pg_shuffle_index(42, 4, n, j) || x != pg_shuffle_index(43, 3, n, j));
        }
    }
    OK(perm_ok, "every epoch's order is a permutation of the samples (n = 1 .. 4099)");
    OK(pure && other > 4000, "...a function of (seed, epoch) alone, and another one for another epoch or seed");
    uint64_t moved = 0;
    for (uint64_t j = 0; j < 1000; j++)
        moved += pg_shuffle_index(7, 0, 1000, j) != j;
    OK(moved > 950, "a shuffle moves nearly every sample (%llu of 1000)", (unsigned long long)moved);
    OK(pg_dataset_sample(7, 0, 10, 23) == 3 && pg_dataset_sample(7, 1, 10, 23) == pg_shuffle_index(7, 2, 10, 3),
       "position 23 of passes over 10 samples: sample 3 in file order, else epoch 2's third");
}

static void test_synth(void)
{
    float a[10 * 7], b[5 * 7], c[10 * 7];
    pg_synth_f32(a, 1234, 1, 0, 10, 7);
    pg_synth_f32(b, 1234, 1, 5, 5, 7);
    pg_synth_f32(c, 1234, 2, 0, 10, 7);
    OK(memcmp(a + 35, b, sizeof b) == 0, "synthetic samples depend on the sample index only, not the batch split");
    OK(memcmp(a, c, sizeof a) != 0, "another stream gives other samples");
    uint64_t key = mix64(mix64(mix64(1234) ^ 1) ^ 3);
    float expect = (float)(mix64(key ^ 4) >> 40) * (1.0f / 8388608.0f) - 1.0f;
    OK(a[3 * 7 + 4] == expect, "f32 sample follows the documented formula (%g vs %g)", a[3 * 7 + 4], expect);
    float big[4096];
    pg_synth_f32(big, 7, 0, 0, 64, 64);
    double sum = 0;
    int inrange = 1;
    for (int i = 0; i < 4096; i++) {
        sum += big[i];
        inrange &= big[i] >= -1.0f && big[i] < 1.0f;
    }
    OK(inrange && fabs(sum / 4096) < 0.05, "f32 samples lie in [-1, 1) with mean %.3f", sum / 4096);
    int32_t t[4096];
    pg_synth_i32(t, 7, 3, 100, 64, 64, 1000);
    int ok = 1, hit0 = 0, hitmax = 0;
    for (int i = 0; i < 4096; i++) {
        ok &= t[i] >= 0 && t[i] < 1000;
        hit0 |= t[i] < 10;
        hitmax |= t[i] >= 990;
    }
    key = mix64(mix64(mix64(7) ^ 3) ^ 100);
    OK(ok && hit0 && hitmax && t[5] == (int32_t)(((mix64(key ^ 5) >> 32) * 1000) >> 32),
       "i32 samples lie in [0, vocab), cover it, and follow the formula");
}

static void test_hash(void)
{
    const uint64_t basis = 0xcbf29ce484222325ull;
    OK(pg_hash64("", 0, basis) == basis, "FNV-1a of nothing is the basis");
    OK(pg_hash64("a", 1, basis) == 0xaf63dc4c8601ec8cull, "FNV-1a 64 of \"a\"");
    OK(pg_hash64("foobar", 6, basis) == 0x85944171f73967e8ull, "FNV-1a 64 of \"foobar\"");
    OK(pg_hash64("bar", 3, pg_hash64("foo", 3, basis)) == pg_hash64("foobar", 6, basis), "hashing can be chained");
}

static void test_safetensors(void)
{
    float w[6] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f};
    int32_t ids[4] = {3, -1, 7, 100000};
    float s = 42.0f;
    float q[2] = {1.0f, 2.0f};
    pg_st_tensor t[4] = {
        {.name = "layer1.w", .dtype = 0, .rank = 2, .dim = {2, 3}, .data = w, .bytes = sizeof w},
        {.name = "ids", .dtype = 2, .rank = 1, .dim = {4}, .data = ids, .bytes = sizeof ids},
        {.name = "scale", .dtype = 0, .rank = 0, .dim = {0}, .data = &s, .bytes = sizeof s},
        {.name = "odd \"name\"\\x", .dtype = 0, .rank = 1, .dim = {2}, .data = q, .bytes = sizeof q},
    };
    const char *meta[] = {"step", "12", "model", "mlp \"v1\"", NULL};
    const char *p = at("interop.safetensors");
    OK(pg_st_write(p, t, 4, meta, err, sizeof err) == 0, "pg_st_write: %s", err);
    unsigned char raw[4096];
    size_t n = read_raw(p, raw, sizeof raw);
    uint64_t hl = 0;
    memcpy(&hl, raw, 8);
    OK(n > 8 && hl % 8 == 0 && 8 + hl + 6 * 4 + 16 + 4 + 8 == n && raw[8] == '{' &&
           (raw[8 + hl - 1] == ' ' || raw[8 + hl - 1] == '}'),
       "header length is a multiple of 8 and the data follows it (%zu bytes)", n);
    OK(tmp_files_left() == 0, "no temporary file is left behind");

    float w2[6] = {0}, q2[2] = {0}, s2 = 0;
    int32_t ids2[4] = {0};
    pg_st_want want[4] = {
        {.name = "ids", .dtype = 2, .rank = 1, .dim = {4}, .dst = ids2, .bytes = sizeof ids2},
        {.name = "layer1.w", .dtype = 0, .rank = 2, .dim = {2, 3}, .dst = w2, .bytes = sizeof w2},
        {.name = "scale", .dtype = 0, .rank = 0, .dst = &s2, .bytes = sizeof s2},
        {.name = "odd \"name\"\\x", .dtype = 0, .rank = 1, .dim = {2}, .dst = q2, .bytes = sizeof q2},
    };
    OK(pg_st_read(p, want, 4, err, sizeof err) == 0 && !memcmp(w, w2, sizeof w) && !memcmp(ids, ids2, sizeof ids) &&
           s2 == 42.0f && !memcmp(q, q2, sizeof q),
       "safetensors round trip, any order, escaped names: %s", err);
    char val[64];
    OK(pg_st_read_meta(p, "step", val, sizeof val, err, sizeof err) == 0 && !strcmp(val, "12"), "metadata step = %s", val);
    OK(pg_st_read_meta(p, "model", val, sizeof val, err, sizeof err) == 0 && !strcmp(val, "mlp \"v1\""),
       "metadata with quotes = %s", val);
    char m[900];
    snprintf(m, sizeof m, "%s has no metadata key 'epoch'", p);
    OK(pg_st_read_meta(p, "epoch", val, sizeof val, err, sizeof err) == -1 && !strcmp(err, m), "missing metadata: %s", err);

    pg_st_want one = {.name = "layer2.w", .dtype = 0, .rank = 2, .dim = {2, 3}, .dst = w2, .bytes = sizeof w2};
    snprintf(m, sizeof m, "%s has no tensor 'layer2.w'", p);
    OK(pg_st_read(p, &one, 1, err, sizeof err) == -1 && !strcmp(err, m), "missing tensor: %s", err);
    one.name = "layer1.w";
    one.dim[0] = 3;
    one.dim[1] = 2;
    snprintf(m, sizeof m, "%s: tensor 'layer1.w' has shape [2, 3] but the model expects [3, 2]", p);
    OK(pg_st_read(p, &one, 1, err, sizeof err) == -1 && !strcmp(err, m), "wrong shape: %s", err);
    pg_st_want wi = {.name = "ids", .dtype = 0, .rank = 1, .dim = {4}, .dst = ids2, .bytes = sizeof ids2};
    snprintf(m, sizeof m, "%s: tensor 'ids' is I32 but the model expects F32", p);
    OK(pg_st_read(p, &wi, 1, err, sizeof err) == -1 && !strcmp(err, m), "wrong dtype: %s", err);

    /* truncated: drop the last 4 bytes */
    const char *tp = at("trunc.safetensors");
    write_raw(tp, raw, n - 4);
    OK(pg_st_read(tp, want, 4, err, sizeof err) == -1 && strstr(err, "is truncated: its tensors end at data byte 52 but the file has 48 bytes of data"),
       "truncated file: %s", err);
    /* header length past the end of the file */
    write_raw(tp, raw, 8 + hl / 2);
    OK(pg_st_read(tp, want, 4, err, sizeof err) == -1 && strstr(err, "does not fit") && strstr(err, "truncated or not a safetensors file"),
       "header longer than the file: %s", err);
    /* malformed JSON: a missing comma, reported at its byte */
    const char *bad = "{\"a\":{\"dtype\":\"F32\" \"shape\":[1],\"data_offsets\":[0,4]}}    ";
    size_t bl = strlen(bad);
    unsigned char bb[256];
    uint64_t bl64 = bl;
    memcpy(bb, &bl64, 8);
    memcpy(bb + 8, bad, bl);
    memset(bb + 8 + bl, 0, 4);
    write_raw(tp, bb, 8 + bl + 4);
    snprintf(m, sizeof m, "%s: malformed safetensors header at byte %d: expected `,` or `}`, found `\"`", tp,
             (int)(strstr(bad, "\"shape\"") - bad));
    pg_st_want wa = {.name = "a", .dtype = 0, .rank = 1, .dim = {1}, .dst = &s2, .bytes = 4};
    OK(pg_st_read(tp, &wa, 1, err, sizeof err) == -1 && !strcmp(err, m), "malformed header names the byte: %s", err);
    const char *bad2 = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}    ";
    memcpy(bb + 8, bad2, bl);
    write_raw(tp, bb, 8 + bl + 4);
    OK(pg_st_read(tp, &wa, 1, err, sizeof err) == -1 && strstr(err, "has data_offsets [0, 8] but its shape needs 4 bytes"),
       "offsets that disagree with the shape: %s", err);

    /* the layout rules of the reference implementation: sorted by offsets,
     * the tensors cover the data exactly (no overlap, no gap, no trailing
     * bytes); the header is UTF-8; dtypes are the format's */
    static const struct { const char *hdr; size_t data; const char *want; } lay[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
         "tensors 'a' and 'b' overlap: 'b' begins at data byte 4, before 'a' ends at 8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
         "a gap of 4 bytes before tensor 'b' (data bytes 4..8 belong to no tensor)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
         "a gap of 4 bytes before tensor 'a'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 12,
         "has 8 bytes after its last tensor (the tensors end at data byte 4 of 12)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "tensors 'a' and 'b' overlap"},
        {"{\"a\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "tensor 'a' has dtype 'Q7', which safetensors does not define"},
        {"{\"a\":{\"dtype\":\"F16\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
         "tensor 'a': its shape overflows a 64-bit byte count"},
        {"{\"\xc3\x28\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "malformed safetensors header at byte 2: the header is not valid UTF-8"},
    };
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++) {
        unsigned char lb[512] = {0};
        size_t hl2 = strlen(lay[i].hdr), pad = (8 - hl2 % 8) % 8;
        uint64_t h64 = hl2 + pad;
        memcpy(lb, &h64, 8);
        memcpy(lb + 8, lay[i].hdr, hl2);
        memset(lb + 8 + hl2, ' ', pad);
        write_raw(tp, lb, 8 + h64 + lay[i].data);
        char v[32];
        OK(pg_st_read(tp, &wa, 0, err, sizeof err) == -1 && strstr(err, lay[i].want) &&
               pg_st_read_meta(tp, "k", v, sizeof v, err, sizeof err) == -1 && strstr(err, lay[i].want),
           "layout refused (as the reference implementation does): %s", err);
    }
    {   /* tensors listed out of offset order, exactly covering the data: fine */
        const char *ok = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                         "\"a\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                         "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}";
        unsigned char lb[512] = {0};
        size_t hl2 = strlen(ok), pad = (8 - hl2 % 8) % 8;
        uint64_t h64 = hl2 + pad;
        memcpy(lb, &h64, 8);
        memcpy(lb + 8, ok, hl2);
        memset(lb + 8 + hl2, ' ', pad);
        float fb = 2.5f;
        memcpy(lb + 8 + h64 + 4, &fb, 4);
        write_raw(tp, lb, 8 + h64 + 8);
        float got = 0;
        pg_st_want wb = {.name = "b", .dtype = 0, .rank = 1, .dim = {1}, .dst = &got, .bytes = 4};
        OK(pg_st_read(tp, &wb, 1, err, sizeof err) == 0 && got == 2.5f,
           "tensors out of offset order, a byte tensor and an empty one, covering the data exactly, are read: %s",
           err);
    }

    /* (fuzz) a repeated tensor name, found by sorting: reported at the later
     * one's byte, whichever pair comes first in the file */
    const char *rep = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    unsigned char rb[512];
    size_t rl = strlen(rep);
    uint64_t rl64 = rl;
    memcpy(rb, &rl64, 8);
    memcpy(rb + 8, rep, rl);
    memset(rb + 8 + rl, 0, 4);
    write_raw(tp, rb, 8 + rl + 4);
    snprintf(m, sizeof m, "%s: malformed safetensors header at byte %d: repeated tensor name", tp,
             (int)(strstr(strstr(rep, "\"b\"") + 1, "\"b\"") - rep));
    OK(pg_st_read(tp, &wa, 1, err, sizeof err) == -1 && !strcmp(err, m), "a repeated tensor name, at its byte: %s", err);

    /* atomic replace: a write that fails (file size limit -> EFBIG) leaves the old file */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {100, 100};
        setrlimit(RLIMIT_FSIZE, &rl);
        static float huge[1000];
        pg_st_tensor ht = {.name = "huge", .dtype = 0, .rank = 1, .dim = {1000}, .data = huge, .bytes = sizeof huge};
        char e2[1024];
        int rc = pg_st_write(p, &ht, 1, NULL, e2, sizeof e2);
        exit(rc == -1 && strstr(e2, "File too large") && strstr(e2, "untouched") ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    unsigned char raw2[4096];
    size_t n2 = read_raw(p, raw2, sizeof raw2);
    OK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && n2 == n && !memcmp(raw, raw2, n) && tmp_files_left() == 0,
       "a failed write (file too large) leaves the old file and no temp file");
    OK(pg_st_write(at("no/dir/x.safetensors"), t, 1, NULL, err, sizeof err) == -1 && strstr(err, "No such file or directory"),
       "write into a missing directory: %s", err);
}

/* A write for the user is not cut short by SIGTERM: the signal takes effect
 * once the file is complete; piperun is told 'W' then 'D' on its socket. */
static void test_protect(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) exit(99);
    const char *p = at("protected.safetensors");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", sv[1]);
        setenv("PIPE_CONTROL_FD", v, 1);
        static float w[4096];
        pg_st_tensor t = {.name = "w", .dtype = 0, .rank = 1, .dim = {4096}, .data = w, .bytes = sizeof w};
        char e2[1024];
        pg_io_protect_begin();                  /* as main.c around the final --save */
        kill(getpid(), SIGTERM);                /* piperun stopping the run */
        int rc = pg_st_write(p, &t, 1, NULL, e2, sizeof e2);
        if (rc == 0) write_raw(at("protected.written"), "1", 1);
        pg_io_protect_end();                    /* SIGTERM takes effect here */
        _exit(3);
    }
    close(sv[1]);
    int st;
    waitpid(pid, &st, 0);
    char got[16] = "";
    ssize_t n = read(sv[0], got, sizeof got - 1);
    close(sv[0]);
    got[n > 0 ? n : 0] = 0;
    unsigned char raw[32];
    OK(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM && read_raw(at("protected.written"), raw, 1) == 1 &&
           read_raw(p, raw, 8) == 8 && tmp_files_left() == 0,
       "SIGTERM during a protected write takes effect after the file is complete (status %d)", st);
    OK(!strcmp(got, "WD"), "piperun is told 'W' (writing) and then 'D' (done) once, nested writes included: '%s'", got);

    /* stale temporaries: a dead writer's go, a live writer's (ours: the parent of the child) stay */
    fflush(stdout);
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, &st, 0);
    char name[64];
    snprintf(name, sizeof name, "stage1.safetensors.tmp.%ld", (long)dead);
    write_raw(at(name), "x", 1);
    snprintf(name, sizeof name, "stage1.safetensors.tmp.%ld", (long)getppid());
    write_raw(at(name), "x", 1);
    write_raw(at("stage1.safetensors.tmp.notapid"), "x", 1);
    write_raw(at("stage2.safetensors.tmp.1"), "x", 1);
    int removed = pg_io_remove_stale_tmp(dir, "stage1.safetensors");
    OK(removed == 1 && tmp_files_left() == 3, "stale temporaries: only the dead writer's is removed (%d removed, %d left)",
       removed, tmp_files_left());
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) unlink(at(e->d_name));
    if (d) closedir(d);
}

/* Reads the last value of f's mapping (the arg is {f, sum}). */
static void sum_last(void *arg)
{
    struct { const pg_datafile *f; volatile float sum; } *j = arg;
    const float *v = j->f->data;
    j->sum += v[j->f->samples * j->f->sample_elems - 1];
}

/* Files that are not regular (a FIFO would block the open), non-finite
 * values in a data file, a data file truncated under its mapping. */
static void test_hostile(void)
{
    const char *fifo = at("fifo");
    mkfifo(fifo, 0600);
    char want[900];
    snprintf(want, sizeof want, "%s is not a regular file (it is a pipe (FIFO))", fifo);
    int64_t per[1] = {2};
    pg_datafile f;
    pg_st_want w = {.name = "a", .dtype = 0, .rank = 1, .dim = {1}, .dst = NULL, .bytes = 4};
    alarm(10); /* a blocking open would hang here: fail instead */
    OK(pg_io_open_regular(fifo, NULL, err, sizeof err) == -1 && !strcmp(err, want), "a FIFO is refused, not opened: %s", err);
    OK(pg_data_open(&f, fifo, 0, 1, per, err, sizeof err) == -1 && !strcmp(err, want), "a FIFO as a data file: %s", err);
    OK(pg_st_read(fifo, &w, 1, err, sizeof err) == -1 && !strcmp(err, want), "a FIFO as a safetensors file: %s", err);
    snprintf(want, sizeof want, "%s is not a regular file (it is a folder)", dir);
    OK(pg_data_open(&f, dir, 0, 1, per, err, sizeof err) == -1 && !strcmp(err, want), "a folder: %s", err);
    alarm(0);
    unlink(fifo);

    /* non-finite values in an f32 data file */
    unsigned char b[256];
    uint64_t dims[2] = {3, 2};
    size_t h = pgd_header(b, "PGD1", 1, 0, 2, dims);
    float v[6] = {0, 1, 2, 3, INFINITY, 5};
    memcpy(b + h, v, sizeof v);
    write_raw(at("inf.pgd"), b, h + sizeof v);
    snprintf(want, sizeof want, "%s: sample 2, element 0 is inf: a data file must hold finite values", at("inf.pgd"));
    OK(pg_data_open(&f, at("inf.pgd"), 0, 1, per, err, sizeof err) == -1 && strstr(err, want), "an Inf value: %s", err);
    v[4] = 4;
    v[1] = -NAN;
    memcpy(b + h, v, sizeof v);
    write_raw(at("nan.pgd"), b, h + sizeof v);
    OK(pg_data_open(&f, at("nan.pgd"), 0, 1, per, err, sizeof err) == -1 && strstr(err, "sample 0, element 1 is nan"),
       "a NaN value: %s", err);
    v[1] = 3.0e38f;
    memcpy(b + h, v, sizeof v);
    write_raw(at("big.pgd"), b, h + sizeof v);
    OK(pg_data_open(&f, at("big.pgd"), 0, 1, per, err, sizeof err) == 0 && f.file_bytes == h + sizeof v &&
           f.hash == pg_data_hash(b, h + sizeof v),
       "finite values are read, the whole file hashed: %s", err);
    pg_data_close(&f);

    /* a mapped file truncated under its reader: SIGBUS becomes an error */
    static float many[4096 * 4];
    uint64_t d2[2] = {4096 * 2, 2};
    unsigned char hb[64];
    size_t hl = pgd_header(hb, "PGD1", 1, 0, 2, d2);
    FILE *fp = fopen(at("long.pgd"), "wb");
    fwrite(hb, 1, hl, fp);
    fwrite(many, 1, sizeof many, fp);
    fclose(fp);
    OK(pg_data_open(&f, at("long.pgd"), 0, 1, per, err, sizeof err) == 0, "a 64 KiB data file opens: %s", err);
    truncate(at("long.pgd"), 100);
    struct { const pg_datafile *f; volatile float sum; } job = {&f, 0};
    int rc = pg_data_guarded(&f, sum_last, &job, err, sizeof err);
    snprintf(want, sizeof want, "%s was truncated or changed while this stage read it (it now has 100 bytes, it had %zu at the start)",
             at("long.pgd"), hl + sizeof many);
    OK(rc == -1 && strstr(err, want), "a read past the new end of a truncated data file: an error, not SIGBUS: %s", err);
    pg_data_close(&f);
}

/* errcap: the last line of the start-up's stderr; a FILE that stood for
 * stderr during the capture (a library kept it) still writes after it ends
 * (closing it made glibc abort a stage at exit under ncu: "invalid stdio
 * handle"; ASan reports the write into a freed FILE) */
static void test_errcap(void)
{
    pg_errcap c;
    FILE *before = stderr;
    OK(pg_errcap_begin(&c) == 0 && stderr != before, "errcap: stderr is the tap while capturing");
    FILE *kept = stderr;
    fprintf(stderr, "# errcap: first line\n# errcap: the last line\n");
    pg_errcap_end(&c);
    OK(stderr == before, "errcap: stderr restored at the end");
    OK(!strcmp(c.last, "# errcap: the last line"), "errcap: the last line kept (%s)", c.last);
    errno = 0;
    OK(fprintf(kept, "# errcap: a kept handle still writes after the capture\n") > 0 && fflush(kept) == 0,
       "errcap: a FILE kept from the capture still writes after it");
    pg_errcap c2;
    OK(pg_errcap_begin(&c2) == 0 && stderr == kept, "errcap: a second capture reuses the one tap");
    fprintf(stderr, "# errcap: second\n");
    pg_errcap_end(&c2);
    OK(!strcmp(c2.last, "# errcap: second") && !strcmp(c.last, "# errcap: the last line"),
       "errcap: each capture keeps its own last line");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_io DIR\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    test_errcap();
    test_data();
    test_dataset();
    test_synth();
    test_hash();
    test_safetensors();
    test_protect();
    test_hostile();
    return DONE();
}

/* tests/fuzz/fuzz_pgd.c — libFuzzer target: .pgd data files
 * (runtime/core/data.c pg_data_open) and token streams (runtime/core/tokens.c,
 * `--data FILE` of a language model). Each input is opened three ways: with
 * the shape its own header claims (so the size checks are reached), with a
 * fixed model shape, and as the token stream of a seq-4 model, whose windows
 * are then cut. Every byte a successful open promises is read. Seeds: made by
 * pg_data_write in LLVMFuzzerInitialize. */
#include "fuzz_util.h"

#include "pg_io.h"
#include "pg_le.h"
#include "stage_run.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("FUZZ_SEED_DIR");
    if (!dir || !*dir)
        return 0;
    char p[4096], err[512];
    float x[3 * 4];
    int32_t tok[12];
    for (int i = 0; i < 12; i++) {
        x[i] = (float)i * 0.5f - 1.0f;
        tok[i] = (i * 7) % 50;
    }
    struct { const char *name; int dt, rank; uint64_t dims[3]; const void *data; } s[] = {
        { "f32_3x4.pgd", 0, 2, { 3, 4, 0 }, x },
        { "f32_3x2x2.pgd", 0, 3, { 3, 2, 2 }, x },
        { "tokens12.pgd", 2, 1, { 12, 0, 0 }, tok },
        { "i32_2x6.pgd", 2, 2, { 2, 6, 0 }, tok },
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        snprintf(p, sizeof p, "%s/gen_%s", dir, s[i].name);
        if (pg_data_write(p, s[i].dt, s[i].rank, s[i].dims, s[i].data, err, sizeof err)) {
            fprintf(stderr, "fuzz_pgd: %s\n", err);
            exit(2);
        }
    }
    return 0;
}

static volatile unsigned sink;

static void open_as(const char *path, int dtype, int rank, const int64_t *dims)
{
    pg_datafile f;
    char err[512] = "";
    if (pg_data_open(&f, path, dtype, rank, dims, err, sizeof err) != 0) {
        fuzz_expect_located(err, path);
        return;
    }
    const unsigned char *b = f.data;
    unsigned acc = 0;
    for (uint64_t i = 0; i < f.samples * f.sample_elems * 4; i++)
        acc += b[i];
    sink = acc;
    pg_data_close(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    /* 1: as the header says */
    int64_t dims[5] = { 0 };
    int dtype = 0, rank = 0;
    if (size >= 16) {
        uint32_t dt = pg_get32(data + 8), r = pg_get32(data + 12);
        dtype = dt == 2 ? 2 : 0;
        if (r >= 1 && r <= 5 && size >= 16 + 8 * (size_t)r) {
            rank = (int)r - 1;
            for (int i = 0; i < rank; i++)
                dims[i] = (int64_t)pg_get64(data + 16 + 8 * (size_t)(i + 1));
        }
    }
    open_as(path, dtype, rank, dims);
    /* 2: a model's f32[4] */
    int64_t four[1] = { 4 };
    open_as(path, 0, 1, four);

    /* 3: the token stream of an i32[4] -> i32[4] model, batch 2, vocab 50 */
    pg_stage_desc d;
    memset(&d, 0, sizeof d);
    d.input_dtype = d.target_dtype = 2;
    d.input_rank = d.target_rank = 1;
    d.input_dim[0] = d.target_dim[0] = 4;
    d.input_vocab = d.target_vocab = 50;
    d.has_input = d.has_loss = 1;
    d.target_off = 32;
    d.train.batch = 2;
    d.train.seed = 1;
    unsigned char arena[64], host[32];
    uint64_t idx[2];
    pg_run r;
    memset(&r, 0, sizeof r);
    r.d = &d;
    r.opt.data.n = 1;
    r.opt.data.p[0] = path;
    r.A = arena;
    r.host = host;
    r.host_bytes = sizeof host;
    r.rows = 2; /* both rows of the batch, as one replica */
    r.sample_idx = idx;
    if (pg_run_tokens_open(&r) == 1)
        for (int64_t step = 0; step < 3; step++)
            if (pg_run_tokens_load(&r, step))
                abort();
    pg_dataset_close(&r.in);
    pg_dataset_close(&r.tg);
    return 0;
}

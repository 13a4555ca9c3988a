/* tests/fuzz/fuzz_safetensors.c — libFuzzer target: the safetensors reader
 * (runtime/core/safetensors.c) as --load and --resume use it: a metadata
 * lookup (pg_st_read_meta) and a read of two tensors by name, dtype and
 * shape (pg_st_read). Seeds: made by pg_st_write in LLVMFuzzerInitialize. */
#include "fuzz_util.h"

#include "pg_io.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("FUZZ_SEED_DIR");
    if (!dir || !*dir)
        return 0;
    float w[6] = { -1, -0.5f, 0, 0.5f, 1, 1.5f };
    int32_t ids[4] = { 3, -1, 7, 100000 };
    pg_st_tensor t[3] = {
        { "w", 0, 2, { 2, 3 }, w, sizeof w },
        { "ids", 2, 1, { 4 }, ids, sizeof ids },
        { "odd \"name\"\\\n", 0, 0, { 0 }, w, 4 },
    };
    const char *meta[] = { "format", "pipegen-checkpoint-1", "step", "12", "note", "caf\xc3\xa9\t", NULL };
    char p[4096], err[512];
    snprintf(p, sizeof p, "%s/gen_two.safetensors", dir);
    if (pg_st_write(p, t, 3, meta, err, sizeof err)) {
        fprintf(stderr, "fuzz_safetensors: %s\n", err);
        exit(2);
    }
    snprintf(p, sizeof p, "%s/gen_nometa.safetensors", dir);
    if (pg_st_write(p, t, 2, NULL, err, sizeof err)) {
        fprintf(stderr, "fuzz_safetensors: %s\n", err);
        exit(2);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    char err[1024] = "", val[64];
    if (pg_st_read_meta(path, "format", val, sizeof val, err, sizeof err) != 0)
        fuzz_expect_located(err, path);
    else if (strlen(val) >= sizeof val)
        abort();
    float w[6];
    int32_t ids[4];
    pg_st_want want[2] = {
        { "w", 0, 2, { 2, 3 }, w, sizeof w, 1, 0 }, /* bf16_ok: a BF16 "w" widens in place */
        { "ids", 2, 1, { 4 }, ids, sizeof ids, 0, 0 },
    };
    err[0] = 0;
    if (pg_st_read(path, want, 2, err, sizeof err) != 0)
        fuzz_expect_located(err, path);
    return 0;
}

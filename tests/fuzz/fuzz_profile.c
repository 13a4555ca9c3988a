/* tests/fuzz/fuzz_profile.c — libFuzzer target: the profile JSON reader
 * (dsl/cost.c pg_profile_read, what `pipegen plan/gen/trace --balance FILE`
 * reads). Seeds: tests/fuzz_seeds/profile/ (a --profile file of a run). */
#include "fuzz_util.h"

#include "cost.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    char *out = NULL;
    size_t outlen = 0;
    FILE *f = open_memstream(&out, &outlen);
    if (!f)
        return 0;
    pg_diag d;
    pg_diag_init(&d, f, NULL);
    pg_profile p;
    int rc = pg_profile_read(path, &p, &d);
    fclose(f);
    if (rc != 0)
        fuzz_expect_located(out, path);
    else
        for (int i = 0; i < p.n; i++)
            if (pg_profile_find(&p, p.e[i].name) != &p.e[i])
                abort(); /* names are unique */
    pg_profile_free(&p);
    free(out);
    return 0;
}

/* tests/fuzz/fuzz_ckpt.c — libFuzzer target: resuming from a checkpoint
 * (runtime/core/checkpoint.c pg_ckpt_resume) of a one-stage pipeline whose
 * directory holds any bytes. An input is
 *     u16 LE m | m bytes: step-00000001/MANIFEST | the rest: step-00000001/stage0.safetensors
 * written into a temporary directory, then resumed from. Seeds: a checkpoint
 * pg_ckpt_save writes in LLVMFuzzerInitialize. */
#include "fuzz_util.h"

#include <stdlib.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "stage_run.h"

static char dir[4096];
static pg_param_desc params[2];
static pg_stage_desc desc;
static unsigned char arena[128];

static void rm_dir(void)
{
    char p[4200];
    static const char *const files[] = { "step-00000001/MANIFEST", "step-00000001/stage0.safetensors",
                                         "step-00000001", "LATEST", "" };
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        remove(p);
    }
}

static void write_file(const char *name, const uint8_t *p, size_t n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/pg-fuzz-ckpt.XXXXXX", tmp);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(2);
    }
    atexit(rm_dir);
    if (!freopen("/dev/null", "w", stdout)) /* "checkpoint: step 1 saved", "resume: continuing" */
        exit(2);
    params[0] = (pg_param_desc){ .name = "w", .rank = 2, .dim = { 2, 3 }, .numel = 6, .off = 0,
                                 .opt_off = { 24, -1 } };
    params[1] = (pg_param_desc){ .name = "b", .index = 1, .rank = 1, .dim = { 4 }, .numel = 4, .off = 48,
                                 .opt_off = { -1, -1 } };
    desc.model = "fz";
    desc.nstages = 1;
    desc.nchunks = 1;
    desc.nmb = 1;
    desc.plan_hash = UINT64_C(0x0123456789abcdef);
    desc.nparams = 2;
    desc.params = params;
    for (size_t i = 0; i < sizeof arena / 4; i++) { /* finite weights: a checkpoint of others is refused */
        float v = (float)i * 0.25f - 3.0f;
        memcpy(arena + 4 * i, &v, 4);
    }
    if (getenv("FUZZ_SEED_DIR") && *getenv("FUZZ_SEED_DIR")) {
        pg_run r;
        memset(&r, 0, sizeof r);
        r.d = &desc;
        r.A = arena;
        r.opt.ckpt_dir = dir;
        int rc = pg_ckpt_save(&r, 1);
        size_t nm = 0, ns = 0;
        char p[4200];
        snprintf(p, sizeof p, "%s/step-00000001/MANIFEST", dir);
        unsigned char *m = fuzz_slurp(p, &nm);
        snprintf(p, sizeof p, "%s/step-00000001/stage0.safetensors", dir);
        unsigned char *s = fuzz_slurp(p, &ns);
        unsigned char *seed = malloc(2 + nm + ns);
        if (rc || !m || !s || !seed || nm > 65535) {
            fprintf(stderr, "fuzz_ckpt: cannot make the seed checkpoint\n");
            exit(2);
        }
        seed[0] = (unsigned char)nm;
        seed[1] = (unsigned char)(nm >> 8);
        memcpy(seed + 2, m, nm);
        memcpy(seed + 2 + nm, s, ns);
        fuzz_seed("ckpt", seed, 2 + nm + ns);
        free(seed);
        free(m);
        free(s);
        rm_dir();
        mkdir(dir, 0700);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t nm = size >= 2 ? (size_t)data[0] | (size_t)data[1] << 8 : 0;
    if (nm > size - (size >= 2 ? 2 : size))
        nm = size >= 2 ? size - 2 : 0;
    const uint8_t *m = data + (size >= 2 ? 2 : size), *s = m + nm;
    size_t ns = size - (size_t)(s - data);
    char p[4200];
    snprintf(p, sizeof p, "%s/step-00000001", dir);
    mkdir(p, 0700);
    write_file("step-00000001/MANIFEST", m, nm);
    write_file("step-00000001/stage0.safetensors", s, ns);
    pg_run r;
    memset(&r, 0, sizeof r);
    r.d = &desc;
    r.A = arena;
    r.opt.resume = dir;
    r.opt.steps = 10;
    int64_t start = -1;
    if (pg_ckpt_resume(&r, &start) == 0 && start != 1)
        abort();
    return 0;
}

/* tests/fuzz/fuzz_csv.c — libFuzzer target: schedule CSV files
 * (codegen/schedule/schedule_csv.c) through pg_schedule_build, as `schedule =
 * file("x.csv")` reaches them: the reader, the communication it adds and the
 * verifier. The model is examples/resmlp.pipe (4 stages, skips) or
 * $FUZZ_CSV_MODEL; seeds: tests/fuzz_seeds/csv/ and the model's own schedule
 * in both CSV forms (pg_schedule_write_csv). */
#include "fuzz_util.h"

#include "cli/load.h"
#include "schedule/schedule.h"

static pg_loaded L;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *model = getenv("FUZZ_CSV_MODEL");
    if (!model)
        model = "examples/resmlp.pipe";
    if (pg_load(&L, model, stderr) != 0) {
        fprintf(stderr, "fuzz_csv: cannot load %s (run from the repository root)\n", model);
        exit(2);
    }
    pg_schedule s;
    if (pg_schedule_build(&L.model, &s, &L.diag) != 0)
        exit(2);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        exit(2);
    pg_schedule_write_csv(&s, f);
    fclose(f);
    fuzz_seed("long.csv", text, len);
    /* the short form: the compute actions only */
    char *out = malloc(len + 1), *o = out;
    if (!out)
        exit(2);
    o += sprintf(o, "stage,action,mb,chunk\n");
    for (char *line = strchr(text, '\n') + 1; line && *line;) {
        char *nl = strchr(line, '\n');
        int st, mb, ch;
        char act[32];
        if (sscanf(line, "%d,%31[A-Z_],%d,%d", &st, act, &mb, &ch) == 4 &&
            (!strcmp(act, "FWD") || !strcmp(act, "BWD_B") || !strcmp(act, "BWD_W")))
            o += sprintf(o, "%d,%s,%d,%d\n", st, act, mb, ch);
        line = nl ? nl + 1 : NULL;
    }
    fuzz_seed("short.csv", out, (size_t)(o - out));
    free(out);
    free(text);
    pg_schedule_free(&s);
    L.model.train.schedule = SCHED_FILE;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    snprintf(path, sizeof path, "%s", fuzz_file(data, size));
    L.model.train.schedule_file = path;
    char *out = NULL;
    size_t outlen = 0;
    FILE *f = open_memstream(&out, &outlen);
    if (!f)
        return 0;
    pg_diag d;
    pg_diag_init(&d, f, &L.src);
    pg_schedule s;
    int rc = pg_schedule_build(&L.model, &s, &d);
    if (rc == 0) {
        pg_schedule_write_csv(&s, f);
        pg_schedule_free(&s);
    }
    fclose(f);
    if (rc != 0 && (!out || !*out))
        abort(); /* refused without a word */
    free(out);
    return 0;
}

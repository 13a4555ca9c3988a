/* codegen/cli/cmd_hf.c — `pipegen import hf DIR -o OUT [--stages N] [--seq T]
 * [--name NAME]` and `pipegen export hf WEIGHTS MODEL.pipe -o DIR`: Hugging
 * Face checkpoints in and out. The formats are Python's (transformers'
 * configs and models, safetensors' sharded checkpoints), so tools/hf.py does
 * the reading, renaming, transposing and writing, in the Python that
 * tools/deps.sh hf sets up; this command finds that Python and the script,
 * runs it without a shell, and checks the result with pipegen's own front end:
 * the imported .pipe must check, and an export is made from the model's
 * plan.json (the layers and parameter names the runtime saved by). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cmd_common.h"
#include "cli/commands.h"
#include "pytool.h"

/* Run tools/hf.py with args (NULL-terminated after the script): its exit
 * status, 1 when it could not run. What it prints goes to our standard output
 * and, up to outlen - 1 bytes, into out (NULL: not kept). */
static int run_hf(const char *const *args, char *out, size_t outlen)
{
    char err[1200], *said = NULL;
    size_t n = 0;
    int rc = pg_py_run("hf.py", args, NULL, 0, 1, &said, &n, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "pipegen: %s\n", err);
        return 1;
    }
    if (out)
        snprintf(out, outlen, "%s", said);
    free(said);
    return rc;
}

static int import_usage(void)
{
    fprintf(stderr, "usage: pipegen import hf DIR -o OUT [--stages N] [--seq T] [--name NAME]\n");
    return 2;
}

/* a positive integer option value, or -1 */
static int positive(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > 1000000) {
        fprintf(stderr, "pipegen: %s %s: want a positive integer\n", opt, s);
        return -1;
    }
    return (int)v;
}

int cmd_import(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "hf") != 0) {
        fprintf(stderr, "pipegen: import knows one format: `pipegen import hf DIR -o OUT` (a Hugging Face model folder)\n");
        return 2;
    }
    const char *dir = NULL, *out = NULL, *stages = "1", *seq = "0", *name = NULL;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc)
            out = argv[++i];
        else if (strcmp(argv[i], "--stages") == 0 && i + 1 < argc)
            stages = argv[++i];
        else if (strcmp(argv[i], "--seq") == 0 && i + 1 < argc)
            seq = argv[++i];
        else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
            name = argv[++i];
        else if (argv[i][0] == '-' || dir)
            return import_usage();
        else
            dir = argv[i];
    }
    if (!dir || !out || !*out || positive("--stages", stages) < 0 || (strcmp(seq, "0") && positive("--seq", seq) < 0))
        return import_usage();
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "pipegen: import hf: %s: %s\n", dir, stat(dir, &sb) != 0 ? strerror(errno) : "not a folder");
        return 1;
    }
    const char *args[] = {"import", dir, "-o", out, "--stages", stages, "--seq", seq,
                          name ? "--name" : NULL, name, NULL};
    char said[4096];
    int rc = run_hf(args, said, sizeof said);
    if (rc)
        return rc;
    /* the .pipe it wrote must check as any other: its path is the script's first line */
    char *nl = strchr(said, '\n');
    if (nl)
        *nl = '\0';
    cmd_model cm;
    if (!said[0] || cmd_load_model(said, NULL, 0, NULL, &cm) != 0) {
        fprintf(stderr, "pipegen: import hf: the model written (%s) does not check: please report this\n",
                said[0] ? said : "no path");
        return 1;
    }
    cmd_release_model(&cm);
    return 0;
}

static int export_usage(void)
{
    fprintf(stderr, "usage: pipegen export hf WEIGHTS.safetensors MODEL.pipe -o DIR\n");
    return 2;
}

int cmd_export(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "hf") != 0) {
        fprintf(stderr, "pipegen: export knows one format: `pipegen export hf WEIGHTS MODEL.pipe -o DIR` (a Hugging "
                        "Face model folder)\n");
        return 2;
    }
    const char *weights = NULL, *pipe = NULL, *out = NULL;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc)
            out = argv[++i];
        else if (argv[i][0] == '-' || pipe)
            return export_usage();
        else if (!weights)
            weights = argv[i];
        else
            pipe = argv[i];
    }
    if (!weights || !pipe || !out || !*out)
        return export_usage();
    if (access(weights, R_OK) != 0) {
        fprintf(stderr, "pipegen: export hf: %s: %s\n", weights, strerror(errno));
        return 1;
    }
    cmd_model cm;
    if (cmd_load_model(pipe, NULL, 0, NULL, &cm) != 0)
        return 1;
    uint64_t hash;
    char *plan = pg_gen_plan_json(cm.g, &hash);
    cmd_release_model(&cm);
    if (!plan) {
        fprintf(stderr, "pipegen: export hf: out of memory\n");
        return 1;
    }
    char tmp[] = "/tmp/pipegen-export-XXXXXX";
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    int ok = f && fputs(plan, f) >= 0;
    if (f && fclose(f) != 0)
        ok = 0;
    free(plan);
    if (!ok) {
        fprintf(stderr, "pipegen: export hf: cannot write the plan to %s: %s\n", tmp, strerror(errno));
        if (fd >= 0)
            unlink(tmp);
        return 1;
    }
    const char *args[] = {"export", weights, tmp, "-o", out, NULL};
    int rc = run_hf(args, NULL, 0);
    unlink(tmp);
    return rc;
}

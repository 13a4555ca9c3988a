/* cmd/pipedata.c — build/pipedata, a program of its own: makes .pgd
 * data files (format in pg_io.h) from plain files.
 *   pipedata text FILE -o OUT.pgd    every byte of FILE is one i32 token (vocab
 *                                    256): a rank-1 stream, dims [ntokens]
 *   pipedata bytes IN.pgd -o OUT     the reverse: a token stream back to bytes
 *   pipedata npy IN.npy -o OUT.pgd   a numpy array (cmd/pd_npy.c)
 *   pipedata csv IN.csv -o X.pgd --target COLUMN --targets-out Y.pgd
 *                                    a table with a header (cmd/pd_csv.c)
 *   pipedata tokenize ...            through a Hugging Face tokenizer (pd_tokenize.c)
 * This file: the command line, text and bytes, and what the converters share.
 * Outputs are written beside the target and renamed into place (io_atomic.h);
 * an output that is an input file, or another output, is refused.
 * Exit status: 0 ok, 1 failure (printed), 2 usage. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io_atomic.h"
#include "pd_tokenize.h"
#include "pg_io.h"
#include "pg_version.h"
#include "pipedata.h"

static void usage(FILE *o)
{
    fprintf(o,
            "usage: pipedata text FILE -o OUT.pgd   bytes of FILE as i32 tokens 0..255 (vocab 256),\n"
            "                                       one rank-1 stream (dims [ntokens]) for --data\n"
            "       pipedata bytes IN.pgd -o OUT    a token stream back to bytes (tokens 0..255)\n"
            "       pipedata npy IN.npy -o OUT.pgd [--dtype f32|i32]\n"
            "                                       a numpy array (np.save; C order; f32, f64, int32,\n"
            "                                       int64, uint8): its first dimension is the samples;\n"
            "                                       floats become f32, integers i32 (ids, classes),\n"
            "                                       unless --dtype says otherwise\n"
            "       pipedata csv IN.csv -o X.pgd [--target COLUMN --targets-out Y.pgd]\n"
            "                                       [--target-dtype i32|f32]\n"
            "                                       a table: a header line naming the columns, then\n"
            "                                       one sample a line, numbers separated by commas;\n"
            "                                       X gets every column but the target (f32[rows,\n"
            "                                       columns]), Y the target: i32 class indices when\n"
            "                                       every value is a whole number >= 0 (rank 1, for\n"
            "                                       `target y : i32`), else f32[rows, 1]\n");
    pd_tokenize_usage(o);
    fprintf(o,
            "       pipedata --help | --version\n"
            "A language model (input and target i32[seq]) reads the stream with --data: sample i\n"
            "is the window of seq tokens at a seeded offset, its target the window one further.\n"
            "Every file is written whole or not at all (a temporary, then renamed).\n");
}

const char *pd_shape(char *buf, size_t n, int dtype, int rank, const uint64_t *dims)
{
    size_t o = (size_t)snprintf(buf, n, "%s[", dtype < 0 ? "" : dtype == 2 ? "i32" : "f32");
    for (int i = 0; i < rank && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%llu", i ? ", " : "", (unsigned long long)dims[i]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
    return buf;
}

int pd_write(const char *path, int dtype, int rank, const uint64_t *dims, const void *data)
{
    char err[600];
    if (pg_data_write(path, dtype, rank, dims, data, err, sizeof err) == 0)
        return 0;
    fprintf(stderr, "pipedata: %s\n", err);
    return 1;
}

unsigned char *pd_slurp(const char *path, size_t *len)
{
    char err[600];
    int fd = pg_io_open_regular(path, NULL, err, sizeof err); /* a FIFO is refused, not waited on */
    FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
    if (!f) {
        fprintf(stderr, "pipedata: %s\n", fd < 0 ? err : strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap)
            break;
        unsigned char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(b, cap * 2);
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b || bad) {
        fprintf(stderr, "pipedata: cannot read %s: %s\n", path, b ? "read error" : "out of memory");
        free(b);
        return NULL;
    }
    *len = n;
    return b;
}

static int cmd_text(const char *in, const char *out)
{
    size_t n = 0;
    unsigned char *b = pd_slurp(in, &n);
    if (!b)
        return 1;
    if (n == 0) {
        fprintf(stderr, "pipedata: %s is empty: no tokens to write\n", in);
        free(b);
        return 1;
    }
    int32_t *t = malloc(n * sizeof *t);
    if (!t) {
        fprintf(stderr, "pipedata: out of memory for %zu tokens\n", n);
        free(b);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        t[i] = b[i];
    uint64_t dims[1] = {n};
    int rc = pd_write(out, 2, 1, dims, t);
    if (!rc)
        printf("pipedata: %s: %zu tokens (bytes, vocab 256) -> %s\n", in, n, out);
    free(b);
    free(t);
    return rc ? 1 : 0;
}

static int cmd_bytes(const char *in, const char *out)
{
    pg_datafile f;
    char err[512];
    if (pg_data_open(&f, in, 2, 0, NULL, err, sizeof err)) {
        fprintf(stderr, "pipedata: %s (a token stream is i32 of rank 1)\n", err);
        return 1;
    }
    const int32_t *t = f.data;
    unsigned char *b = malloc(f.samples ? f.samples : 1);
    int rc = !b;
    if (!b)
        fprintf(stderr, "pipedata: out of memory\n");
    for (uint64_t i = 0; !rc && i < f.samples; i++) {
        if (t[i] < 0 || t[i] > 255) {
            fprintf(stderr, "pipedata: %s: token %ld at position %llu is not a byte (0..255)\n", in, (long)t[i],
                    (unsigned long long)i);
            rc = 1;
        } else {
            b[i] = (unsigned char)t[i];
        }
    }
    if (!rc) { /* beside it, then renamed: a full disk leaves no torn file (io_atomic.h) */
        const void *parts[1] = {b};
        size_t lens[1] = {(size_t)f.samples};
        if (pg_io_write_atomic(out, parts, lens, 1, err, sizeof err) != 0) {
            fprintf(stderr, "pipedata: %s\n", err);
            rc = 1;
        }
    }
    free(b);
    pg_data_close(&f);
    return rc;
}

/* The value of option `name` at argv[*i] (then *i moves past it); NULL after
 * printing a usage error when it has none or is given twice. */
static const char *opt_value(int argc, char **argv, int *i, const char **slot)
{
    if (*i + 1 >= argc || !argv[*i + 1][0]) {
        fprintf(stderr, "pipedata: %s needs a value\n", argv[*i]);
        return NULL;
    }
    if (*slot) {
        fprintf(stderr, "pipedata: %s is given twice\n", argv[*i]);
        return NULL;
    }
    *slot = argv[++*i];
    return *slot;
}

int main(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        printf("pipedata (pipegen " PIPEGEN_VERSION ")\n");
        return 0;
    }
    /* over ulimit -f a write fails with EFBIG, reported with the file's name */
    signal(SIGXFSZ, SIG_IGN);
    if (argc > 1 && !strcmp(argv[1], "tokenize")) {
        int rc = pd_tokenize(argc, argv);
        if (pg_io_stdout_done("pipedata") != 0 && rc == 0)
            rc = 1;
        return rc;
    }
    static const char *const cmds[] = {"text", "bytes", "npy", "csv"};
    int cmd = -1;
    for (int k = 0; argc > 1 && k < 4; k++)
        if (!strcmp(argv[1], cmds[k]))
            cmd = k;
    if (cmd < 0) {
        if (argc > 1)
            fprintf(stderr, "pipedata: unknown command '%s' (the commands are text, bytes, npy, csv and tokenize)\n", argv[1]);
        usage(stderr);
        return 2;
    }
    /* the input, then options in any order */
    const char *in = NULL, *out = NULL, *dtype = NULL, *target = NULL, *targets_out = NULL, *target_dtype = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = !strcmp(a, "-o") ? &out : cmd == 2 && !strcmp(a, "--dtype") ? &dtype
                          : cmd == 3 && !strcmp(a, "--target") ? &target
                          : cmd == 3 && !strcmp(a, "--targets-out") ? &targets_out
                          : cmd == 3 && !strcmp(a, "--target-dtype") ? &target_dtype : NULL;
        if (slot) {
            if (!opt_value(argc, argv, &i, slot))
                return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "pipedata %s: unknown option '%s' (see pipedata --help)\n", cmds[cmd], a);
            return 2;
        } else if (in) {
            fprintf(stderr, "pipedata %s: one input file, not '%s' and '%s'\n", cmds[cmd], in, a);
            return 2;
        } else {
            in = a;
        }
    }
    if (!in || !out) {
        fprintf(stderr, "pipedata %s: %s (see pipedata --help)\n", cmds[cmd], !in ? "which file? give the input" : "-o OUT is missing");
        usage(stderr);
        return 2;
    }
    if ((dtype && strcmp(dtype, "f32") && strcmp(dtype, "i32")) ||
        (target_dtype && strcmp(target_dtype, "f32") && strcmp(target_dtype, "i32"))) {
        fprintf(stderr, "pipedata %s: %s wants f32 or i32, not '%s'\n", cmds[cmd], dtype ? "--dtype" : "--target-dtype",
                dtype ? dtype : target_dtype);
        return 2;
    }
    if (!target != !targets_out || (target_dtype && !target)) {
        fprintf(stderr, "pipedata csv: %s\n", target ? "--target needs --targets-out Y.pgd, the file the targets go to"
                                                      : targets_out ? "--targets-out needs --target COLUMN, the column "
                                                                      "that holds the targets"
                                                                    : "--target-dtype needs --target COLUMN");
        return 2;
    }
    pg_io_file files[] = {{"-o", out, 1}, {"--targets-out", targets_out, 1}, {"the input", in, 0}};
    char err[9000];
    if (pg_io_check_distinct(files, 3, err, sizeof err) != 0) { /* --targets-out NULL: not given */
        fprintf(stderr, "pipedata: %s\n", err);
        return 2;
    }
    int rc;
    switch (cmd) {
    case 0: rc = cmd_text(in, out); break;
    case 1: rc = cmd_bytes(in, out); break;
    case 2: rc = pd_npy(in, out, dtype); break;
    default: rc = pd_csv(in, out, target, targets_out, target_dtype); break;
    }
    if (pg_io_stdout_done("pipedata") != 0 && rc == 0)
        rc = 1;
    return rc;
}

/* cmd/pipedata.c — build/pipedata, a program of its own: makes .pgd
 * data files (format in pg_io.h) from plain files.
 *   pipedata text FILE -o OUT.pgd    every byte of FILE is one i32 token (vocab
 *                                    256): a rank-1 stream, dims [ntokens]
 *   pipedata bytes IN.pgd -o OUT     the reverse: a token stream back to bytes
 *   pipedata tokenize ...            through a Hugging Face tokenizer (pd_tokenize.c)
 * Outputs are written beside the target and renamed into place (io_atomic.h);
 * an output that is the input file is refused.
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

static void usage(FILE *o)
{
    fprintf(o,
            "usage: pipedata text FILE -o OUT.pgd   bytes of FILE as i32 tokens 0..255 (vocab 256),\n"
            "                                       one rank-1 stream (dims [ntokens]) for --data\n"
            "       pipedata bytes IN.pgd -o OUT    a token stream back to bytes (tokens 0..255)\n");
    pd_tokenize_usage(o);
    fprintf(o,
            "       pipedata --help | --version\n"
            "A language model (input and target i32[seq]) reads the stream with --data: sample i\n"
            "is the window of seq tokens at a seeded offset, its target the window one further.\n");
}

/* The whole of a file; NULL with a message. */
static unsigned char *slurp(const char *path, size_t *len)
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
    unsigned char *b = slurp(in, &n);
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
    char err[512];
    int rc = pg_data_write(out, 2, 1, dims, t, err, sizeof err);
    if (rc)
        fprintf(stderr, "pipedata: %s\n", err);
    else
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
    if (argc > 1 && !strcmp(argv[1], "tokenize"))
        return pd_tokenize(argc, argv);
    if (argc != 5 || strcmp(argv[3], "-o") || (strcmp(argv[1], "text") && strcmp(argv[1], "bytes"))) {
        if (argc > 1 && strcmp(argv[1], "text") && strcmp(argv[1], "bytes"))
            fprintf(stderr, "pipedata: unknown command '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    /* over ulimit -f a write fails with EFBIG, reported with the file's name */
    signal(SIGXFSZ, SIG_IGN);
    pg_io_file files[] = {{"-o", argv[4], 1}, {"the input", argv[2], 0}};
    char err[9000];
    if (pg_io_check_distinct(files, 2, err, sizeof err) != 0) {
        fprintf(stderr, "pipedata: %s\n", err);
        return 2;
    }
    int rc = !strcmp(argv[1], "text") ? cmd_text(argv[2], argv[4]) : cmd_bytes(argv[2], argv[4]);
    if (pg_io_stdout_done("pipedata") != 0 && rc == 0)
        rc = 1;
    return rc;
}

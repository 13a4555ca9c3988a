/* tests/fuzz/fuzz_util.h — shared by the libFuzzer targets of tests/fuzz/:
 * the input as a file the reader opens by path (a memfd, so nothing touches
 * the disk), seeds written by the real writers into $FUZZ_SEED_DIR, and the
 * check that a refused input got a message naming the file. */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_UNUSED __attribute__((unused))

static int fz_fd = -1;
static char fz_path[64];

/* The bytes as the contents of a file; returns its path (/proc/self/fd/N). */
FUZZ_UNUSED static const char *fuzz_file(const uint8_t *data, size_t size)
{
    if (fz_fd < 0) {
        fz_fd = memfd_create("fuzz-input", MFD_CLOEXEC);
        if (fz_fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(fz_path, sizeof fz_path, "/proc/self/fd/%d", fz_fd);
    }
    if (ftruncate(fz_fd, 0) != 0 || (size && pwrite(fz_fd, data, size, 0) != (ssize_t)size)) {
        perror("fuzz input");
        abort();
    }
    return fz_path;
}

/* Write one seed into $FUZZ_SEED_DIR (fuzz.sh sets it to the target's corpus;
 * libFuzzer reads the corpus after LLVMFuzzerInitialize). */
FUZZ_UNUSED static void fuzz_seed(const char *name, const void *p, size_t n)
{
    const char *dir = getenv("FUZZ_SEED_DIR");
    if (!dir || !*dir)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/gen_%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "fuzz: cannot write the seed %s\n", path);
        exit(2);
    }
}

/* Read a whole (small) file; NULL when it cannot. */
FUZZ_UNUSED static unsigned char *fuzz_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *b = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n == cap) {
            unsigned char *q = realloc(b, cap ? 2 * cap : 4096);
            if (!q)
                break;
            b = q;
            cap = cap ? 2 * cap : 4096;
        }
        size_t got = fread(b + *n, 1, cap - *n, f);
        if (!got)
            break;
        *n += got;
    }
    fclose(f);
    return b;
}

/* A refused input must be refused with a message that names the file. */
FUZZ_UNUSED static void fuzz_expect_located(const char *msg, const char *path)
{
    if (!msg || !*msg || !strstr(msg, path)) {
        fprintf(stderr, "fuzz: input refused without a message naming %s: \"%s\"\n", path, msg ? msg : "(null)");
        abort();
    }
}

#endif

/* codegen/gen/gen_files.c — see gen_files.h. The temporaries and the atomic
 * pieces are runtime/core/io_atomic.c's, linked into pipegen too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gen/gen_files.h"
#include "io_atomic.h"

#define GF_PATH 4096

/* A name pipegen gen writes (and so may remove): stage<k>.c, <model>.h,
 * plan.json, never a path or a hidden file. */
static int is_generated_name(const char *n)
{
    size_t l = strlen(n);
    if (l == 0 || n[0] == '.' || strchr(n, '/'))
        return 0;
    unsigned k;
    char tail;
    return strcmp(n, "plan.json") == 0 || (l > 2 && strcmp(n + l - 2, ".h") == 0) ||
           (sscanf(n, "stage%u.%c", &k, &tail) == 2 && tail == 'c' && strcmp(n + l - 2, ".c") == 0);
}

/* The names in DIR's list of a previous generation (malloc'd text, NUL-split
 * in place into *names); 0 names when there is none. */
static char *read_list(const char *dir, char ***names, int *count)
{
    char p[GF_PATH];
    *names = NULL;
    *count = 0;
    snprintf(p, sizeof p, "%s/%s", dir, PG_GEN_LIST);
    FILE *f = fopen(p, "rb");
    if (!f)
        return NULL;
    char *text = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            char *t = realloc(text, cap = cap * 2 + 8192);
            if (!t)
                break;
            text = t;
        }
        size_t r = fread(text + len, 1, 4096, f);
        len += r;
        if (r == 0 || len > (1u << 20))
            break;
    }
    fclose(f);
    if (!text)
        return NULL;
    text[len] = 0;
    int lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    *names = calloc((size_t)lines, sizeof **names);
    if (!*names)
        return text;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        if (line[0] && line[0] != '#')
            (*names)[(*count)++] = line;
        line = nl ? nl + 1 : NULL;
    }
    return text;
}

/* The list of this generation: a comment, then one name a line. */
static char *list_text(const pg_gen_file *f, int n, size_t *len)
{
    size_t cap = 256;
    for (int i = 0; i < n; i++)
        cap += strlen(f[i].name) + 1;
    char *t = malloc(cap);
    if (!t)
        return NULL;
    size_t o = (size_t)snprintf(t, cap, "# the files pipegen gen wrote here; the next pipegen gen removes those it does not\n"
                                        "# write again, and no other file\n");
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(t + o, cap - o, "%s\n", f[i].name);
    *len = o;
    return t;
}

/* Remove the files of the previous generation (names old[0..nold)) that this
 * one (f[0..n)) does not write; say which on stdout. */
static void remove_stale(const char *dir, char **old, int nold, const pg_gen_file *f, int n)
{
    int removed = 0;
    for (int j = 0; j < nold; j++) {
        int kept = !is_generated_name(old[j]);
        for (int i = 0; i < n && !kept; i++)
            kept = strcmp(old[j], f[i].name) == 0;
        char p[GF_PATH];
        if (kept || snprintf(p, sizeof p, "%s/%s", dir, old[j]) >= (int)sizeof p || unlink(p) != 0)
            continue;
        printf("%s %s", removed++ ? "," : "removed from the previous generation:", old[j]);
    }
    if (removed)
        printf("\n");
}

/* Phases 1 and 2 of gen_files.h for the files and then the list (entry n):
 * every temporary written, then all renamed into place. 0 or -1 (reported). */
static int write_generation(const char *dir, const pg_gen_file *f, int n, const char *ltext, size_t llen,
                            char (*tmp)[GF_PATH + 32], char (*path)[GF_PATH], pg_diag *d, pg_loc loc)
{
    char err[GF_PATH + 256];
    for (int i = 0; i <= n; i++) {
        const char *name = i < n ? f[i].name : PG_GEN_LIST;
        const void *part[1] = {i < n ? f[i].text : ltext};
        size_t plen[1] = {i < n ? f[i].len : llen};
        snprintf(path[i], GF_PATH, "%s/%s", dir, name);
        pg_io_remove_stale_tmp(dir, name); /* of a pipegen gen that was killed */
        if (pg_io_write_tmp(path[i], part, plen, 1, tmp[i], sizeof tmp[i], err, sizeof err) != 0) {
            pg_error(d, loc, "%s; nothing in %s was changed (the previous generation is intact)", err, dir);
            while (i-- > 0)
                unlink(tmp[i]);
            return -1;
        }
    }
    for (int i = 0; i <= n; i++) /* the list last: it records what is there */
        if (rename(tmp[i], path[i]) != 0) {
            pg_error(d, loc, "cannot put %s in place: %s; %s holds a mix of two generations: run pipegen gen again",
                     path[i], strerror(errno), dir);
            for (int j = i; j <= n; j++)
                unlink(tmp[j]);
            return -1;
        }
    pg_io_sync_dir_of(path[n]);
    return 0;
}

int pg_gen_mkdirs(const char *dir, char *err, size_t errlen)
{
    char p[GF_PATH];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof p) {
        snprintf(err, errlen, "the name is %s", n ? "too long" : "empty");
        return -1;
    }
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) { /* each prefix that ends a component, the whole name last */
        if (p[i] != '/' && p[i] != 0)
            continue;
        char c = p[i];
        p[i] = 0;
        struct stat st;
        if (p[i - 1] != '/' && mkdir(p, 0777) != 0) {
            int e = errno;
            if (e != EEXIST) {
                snprintf(err, errlen, "%s: %s", p, strerror(e));
                return -1;
            }
            if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "%s exists and is not a folder", p);
                return -1;
            }
        }
        p[i] = c;
    }
    return 0;
}

/* One line on stdout: what this generation wrote where; stage<k>.c files are
 * named by their range (a model of 100 stages takes one line too). */
static void say_written(const char *dir, const pg_gen_file *f, int n)
{
    int nstage = 0;
    unsigned k;
    char tail;
    for (int i = 0; i < n; i++)
        nstage += sscanf(f[i].name, "stage%u.%c", &k, &tail) == 2;
    int len = (int)strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    printf("wrote %d files to %.*s%s:", n + 1, len, dir, dir[len - 1] == '/' ? "" : "/");
    if (nstage > 4)
        printf(" stage0.c .. stage%d.c,", nstage - 1);
    for (int i = 0; i < n; i++)
        if (nstage <= 4 || sscanf(f[i].name, "stage%u.%c", &k, &tail) != 2)
            printf(" %s,", f[i].name);
    printf(" %s\n", PG_GEN_LIST);
}

int pg_gen_files_write(const char *dir, const pg_gen_file *f, int n, pg_diag *d, pg_loc loc)
{
    struct stat st;
    char why[GF_PATH + 64];
    if (pg_gen_mkdirs(dir, why, sizeof why) != 0) {
        pg_error(d, loc, "cannot create the output folder %s: %s", dir, why);
        return -1;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        pg_error(d, loc, "the output %s is not a folder", dir);
        return -1;
    }
    size_t llen = 0;
    char *ltext = list_text(f, n, &llen);
    char (*tmp)[GF_PATH + 32] = calloc((size_t)n + 1, sizeof *tmp);
    char (*path)[GF_PATH] = calloc((size_t)n + 1, sizeof *path);
    char **old = NULL;
    int nold = 0, rc = -1;
    char *oldtext = read_list(dir, &old, &nold);
    if (!ltext || !tmp || !path) {
        pg_error(d, loc, "out of memory writing %s", dir);
    } else {
        pg_io_protect_begin(); /* Ctrl-C waits until the generation is in place (or left as it was) */
        rc = write_generation(dir, f, n, ltext, llen, tmp, path, d, loc);
        if (rc == 0) {
            say_written(dir, f, n);
            remove_stale(dir, old, nold, f, n);
        }
        pg_io_protect_end();
    }
    free(old);
    free(oldtext);
    free(ltext);
    free(tmp);
    free(path);
    return rc;
}

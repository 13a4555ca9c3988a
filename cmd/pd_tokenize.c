/* cmd/pd_tokenize.c — `pipedata tokenize`: text through a Hugging Face
 * tokenizer into .pgd files. tools/tokens.py encodes (runtime/core/pytool.c
 * runs it in the Python of `tools/deps.sh hf`); the files, the windows and
 * the masks are made here.
 *   --tokenizer T FILE... -o OUT.pgd     the files' text, each ended by the
 *                                        end-of-text id: one rank-1 stream for --data
 *   --tokenizer T --prompts FILE -o P.pgd  a prompt per non-empty line: i32 [n, w],
 *   --tokenizer T --prompt TEXT -o P.pgd   each row ended by -1 (a stage's --prompts)
 *   --tokenizer T --pairs FILE.jsonl --seq N -o X.pgd --targets-out Y.pgd
 *                                        [--ignore ID] [--pad ID] [--prompt-key K] [--response-key K]
 *       prompt/response pairs for fine-tuning: row i is the pair's tokens (the
 *       prompt, then the response and the end-of-text id) cut or padded to N + 1;
 *       its input the first N, its target the last N, where a target that is a
 *       prompt token or padding holds the ignore id (default -100), so that only
 *       the response is learned (cross_entropy(ignore = -100)). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io_atomic.h"
#include "pd_tokenize.h"
#include "pg_io.h"
#include "pytool.h"

/* Lines of space-separated ids, as tokens.py prints them. */
typedef struct id_lines {
    int32_t **v;
    int64_t *n;
    int64_t count;
} id_lines;

static void lines_free(id_lines *l)
{
    for (int64_t i = 0; i < l->count; i++)
        free(l->v[i]);
    free(l->v);
    free(l->n);
}

/* Parse what tokens.py printed; -1 with a message. */
static int parse_lines(const char *s, id_lines *l)
{
    memset(l, 0, sizeof *l);
    int64_t cap = 0;
    for (const char *p = s; *p;) {
        const char *nl = strchr(p, '\n'), *end = nl ? nl : p + strlen(p);
        if (l->count == cap) {
            cap = cap ? 2 * cap : 64;
            int32_t **v = realloc(l->v, (size_t)cap * sizeof *v);
            if (v)
                l->v = v;
            int64_t *n = realloc(l->n, (size_t)cap * sizeof *n);
            if (n)
                l->n = n;
            if (!v || !n)
                goto oom;
        }
        int32_t *ids = malloc((size_t)(end - p) / 2 * sizeof *ids + sizeof *ids);
        if (!ids)
            goto oom;
        int64_t k = 0;
        for (const char *q = p; q < end;) {
            while (q < end && *q == ' ')
                q++;
            if (q == end)
                break;
            char *e;
            errno = 0;
            long x = strtol(q, &e, 10);
            if (errno || e == q || e > end || x < 0 || x > INT32_MAX) {
                fprintf(stderr, "pipedata: tools/tokens.py printed '%.20s', not token ids\n", q);
                free(ids);
                lines_free(l);
                return -1;
            }
            ids[k++] = (int32_t)x;
            q = e;
        }
        l->v[l->count] = ids;
        l->n[l->count++] = k;
        p = nl ? nl + 1 : end;
    }
    return 0;
oom:
    fprintf(stderr, "pipedata: out of memory reading token ids\n");
    lines_free(l);
    return -1;
}

/* tools/tokens.py CMD --tokenizer T ARGS... (input on its stdin): its lines of ids. */
static int tokens(const char *const *args, const char *in, id_lines *l)
{
    char err[1200], *out = NULL;
    size_t n = 0;
    int rc = pg_py_run("tokens.py", args, in, in ? strlen(in) : 0, 0, &out, &n, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "pipedata: %s\n", err);
    else if (rc > 0)
        fprintf(stderr, "pipedata: tools/tokens.py %s failed (exit status %d, its message above)\n", args[0], rc);
    if (rc) {
        free(out);
        return -1;
    }
    rc = parse_lines(out, l);
    free(out);
    return rc;
}

static int write_pgd(const char *path, int rank, const uint64_t *dims, const int32_t *v, const char *what)
{
    char err[600];
    if (pg_data_write(path, 2, rank, dims, v, err, sizeof err)) {
        fprintf(stderr, "pipedata: %s\n", err);
        return -1;
    }
    printf("pipedata: %s -> %s\n", what, path);
    return 0;
}

/* Token streams: every file's ids one after another. */
static int stream(const char *tok, char **files, int nfiles, const char *out)
{
    const char *args[PG_PY_MAX_ARGS + 1] = {"text", "--tokenizer", tok};
    int na = 3;
    for (int i = 0; i < nfiles && na < PG_PY_MAX_ARGS; i++)
        args[na++] = files[i];
    args[na] = NULL;
    if (nfiles > PG_PY_MAX_ARGS - 3) {
        fprintf(stderr, "pipedata: tokenize: at most %d files at once\n", PG_PY_MAX_ARGS - 3);
        return 1;
    }
    id_lines l;
    if (tokens(args, NULL, &l))
        return 1;
    int64_t total = 0;
    for (int64_t i = 0; i < l.count; i++)
        total += l.n[i];
    int32_t *all = malloc((size_t)(total ? total : 1) * sizeof *all);
    int rc = !all;
    if (!all)
        fprintf(stderr, "pipedata: out of memory for %lld tokens\n", (long long)total);
    else if (total == 0)
        fprintf(stderr, "pipedata: tokenize: the files hold no text\n"), rc = 1;
    for (int64_t i = 0, at = 0; !rc && i < l.count; at += l.n[i], i++)
        memcpy(all + at, l.v[i], (size_t)l.n[i] * sizeof *all);
    char what[160];
    snprintf(what, sizeof what, "%d file%s, %lld tokens", nfiles, nfiles == 1 ? "" : "s", (long long)total);
    uint64_t dims[1] = {(uint64_t)total};
    rc = rc || write_pgd(out, 1, dims, all, what);
    free(all);
    lines_free(&l);
    return rc ? 1 : 0;
}

/* Prompts: a row each, ended by -1. */
static int prompts(const char *tok, const char *file, const char *text, const char *out)
{
    const char *args[] = {file ? "lines" : "encode", "--tokenizer", tok, file, NULL};
    id_lines l;
    if (tokens(args, text, &l))
        return 1;
    int64_t w = 0;
    for (int64_t i = 0; i < l.count; i++)
        w = l.n[i] > w ? l.n[i] : w;
    int rc = 0;
    if (l.count == 0 || w == 0) {
        fprintf(stderr, "pipedata: tokenize: %s holds no prompt\n", file ? file : "--prompt");
        rc = 1;
    }
    int32_t *v = rc ? NULL : malloc((size_t)(l.count * w) * sizeof *v);
    if (!rc && !v) {
        fprintf(stderr, "pipedata: out of memory\n");
        rc = 1;
    }
    for (int64_t i = 0; !rc && i < l.count; i++)
        for (int64_t j = 0; j < w; j++)
            v[i * w + j] = j < l.n[i] ? l.v[i][j] : -1;
    char what[160];
    snprintf(what, sizeof what, "%lld prompt%s of at most %lld tokens", (long long)l.count, l.count == 1 ? "" : "s",
             (long long)w);
    uint64_t dims[2] = {(uint64_t)l.count, (uint64_t)w};
    rc = rc || write_pgd(out, 2, dims, v, what);
    free(v);
    lines_free(&l);
    return rc ? 1 : 0;
}

/* Pair i's row: x[seq] its first seq tokens, y[seq] the next token where it
 * is a response token, else the ignore id. 0 kept, 1 left out (the prompt
 * fills the window: no response token to learn). */
static int pair_row(const int32_t *p, int64_t np, const int32_t *r, int64_t nr, int64_t seq, int32_t pad,
                    int32_t ignore, int32_t *x, int32_t *y)
{
    if (np >= seq + 1 || nr == 0)
        return 1;
    for (int64_t j = 0; j < seq; j++) {
        int64_t k = j + 1; /* the position the target predicts */
        x[j] = j < np ? p[j] : j - np < nr ? r[j - np] : pad;
        y[j] = k >= np && k - np < nr ? r[k - np] : ignore;
    }
    return 0;
}

static int pairs(const char *tok, const char *file, const char *pk, const char *rk, int64_t seq, int32_t pad,
                 int32_t ignore, const char *xout, const char *yout)
{
    const char *args[] = {"pairs", "--tokenizer", tok, file, "--prompt", pk, "--response", rk, NULL};
    id_lines l;
    if (tokens(args, NULL, &l))
        return 1;
    int64_t n = l.count / 2, kept = 0, cut = 0;
    int32_t *x = malloc((size_t)(n ? n : 1) * (size_t)seq * sizeof *x), *y = malloc((size_t)(n ? n : 1) * (size_t)seq * sizeof *y);
    int rc = !x || !y;
    if (rc)
        fprintf(stderr, "pipedata: out of memory\n");
    for (int64_t i = 0; !rc && i < n; i++) {
        const int32_t *p = l.v[2 * i], *r = l.v[2 * i + 1];
        int64_t np = l.n[2 * i], nr = l.n[2 * i + 1];
        if (pair_row(p, np, r, nr, seq, pad, ignore, x + kept * seq, y + kept * seq)) {
            fprintf(stderr, "pipedata: %s: pair %lld left out: its prompt has %lld tokens, no room for the response "
                            "in --seq %lld\n", file, (long long)i, (long long)np, (long long)seq);
            continue;
        }
        cut += np + nr > seq + 1;
        kept++;
    }
    if (!rc && kept == 0) {
        fprintf(stderr, "pipedata: %s: no pair to write\n", file);
        rc = 1;
    }
    char what[200];
    snprintf(what, sizeof what, "%lld pairs (%lld cut to --seq %lld + 1 tokens), inputs", (long long)kept, (long long)cut,
             (long long)seq);
    uint64_t dims[2] = {(uint64_t)kept, (uint64_t)seq};
    rc = rc || write_pgd(xout, 2, dims, x, what);
    snprintf(what, sizeof what, "their targets (prompt and padding positions %ld)", (long)ignore);
    rc = rc || write_pgd(yout, 2, dims, y, what);
    free(x);
    free(y);
    lines_free(&l);
    return rc ? 1 : 0;
}

static int int_arg(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    char *e;
    errno = 0;
    long long x = strtoll(v, &e, 10);
    if (errno || e == v || *e || x < lo || x > hi) {
        fprintf(stderr, "pipedata: tokenize: %s %s: want an integer in [%lld, %lld]\n", opt, v, (long long)lo,
                (long long)hi);
        return -1;
    }
    *out = x;
    return 0;
}

void pd_tokenize_usage(FILE *o)
{
    fprintf(o,
            "       pipedata tokenize --tokenizer T FILE... -o OUT.pgd\n"
            "                                       the files' text through a Hugging Face tokenizer\n"
            "                                       (tokenizer.json or its folder), each ended by its\n"
            "                                       end-of-text id: one rank-1 stream for --data\n"
            "       pipedata tokenize --tokenizer T --prompts FILE -o P.pgd\n"
            "       pipedata tokenize --tokenizer T --prompt TEXT -o P.pgd\n"
            "                                       a prompt per line: i32 [n, w], -1 after each, for\n"
            "                                       a stage's --prompts\n"
            "       pipedata tokenize --tokenizer T --pairs FILE.jsonl --seq N -o X.pgd --targets-out Y.pgd\n"
            "                [--ignore ID] [--pad ID] [--prompt-key K] [--response-key K]\n"
            "                                       prompt/response pairs (a JSON object per line) for\n"
            "                                       fine-tuning: inputs [n, N]; targets [n, N] the next\n"
            "                                       token of the response, the ignore id (default\n"
            "                                       -100) at prompt and padding positions\n");
}

int pd_tokenize(int argc, char **argv)
{
    const char *tok = NULL, *out = NULL, *yout = NULL, *pfile = NULL, *ptext = NULL, *pairs_file = NULL;
    const char *pk = "prompt", *rk = "response";
    int64_t seq = 0, ignore = -100, pad = 0;
    char *files[PG_PY_MAX_ARGS];
    int nfiles = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = !strcmp(a, "--tokenizer") || !strcmp(a, "-o") || !strcmp(a, "--targets-out") ||
                    !strcmp(a, "--prompts") || !strcmp(a, "--prompt") || !strcmp(a, "--pairs") || !strcmp(a, "--seq") ||
                    !strcmp(a, "--ignore") || !strcmp(a, "--pad") || !strcmp(a, "--prompt-key") ||
                    !strcmp(a, "--response-key");
        if (takes && !v) {
            fprintf(stderr, "pipedata: tokenize: %s needs a value\n", a);
            return 2;
        }
        if (takes)
            i++;
        if (!strcmp(a, "--tokenizer")) tok = v;
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--targets-out")) yout = v;
        else if (!strcmp(a, "--prompts")) pfile = v;
        else if (!strcmp(a, "--prompt")) ptext = v;
        else if (!strcmp(a, "--pairs")) pairs_file = v;
        else if (!strcmp(a, "--prompt-key")) pk = v;
        else if (!strcmp(a, "--response-key")) rk = v;
        else if (!strcmp(a, "--seq")) { if (int_arg(a, v, 1, 1 << 20, &seq)) return 2; }
        else if (!strcmp(a, "--ignore")) { if (int_arg(a, v, INT32_MIN, INT32_MAX, &ignore)) return 2; }
        else if (!strcmp(a, "--pad")) { if (int_arg(a, v, 0, INT32_MAX, &pad)) return 2; }
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "pipedata: tokenize: unknown option '%s'\n", a);
            return 2;
        } else if (nfiles < PG_PY_MAX_ARGS) {
            files[nfiles++] = argv[i];
        }
    }
    int kinds = (nfiles > 0) + !!pfile + !!ptext + !!pairs_file;
    if (!tok || !out || kinds != 1 || (pairs_file && (!seq || !yout)) || (!pairs_file && (seq || yout))) {
        fprintf(stderr, "pipedata: tokenize wants --tokenizer T, -o OUT and one of: FILE..., --prompts FILE, --prompt "
                        "TEXT, --pairs FILE --seq N --targets-out Y\n");
        return 2;
    }
    /* no output is an input or the other output (io_atomic.h) */
    pg_io_file fl[PG_PY_MAX_ARGS + 4] = {{"-o", out, 1}, {"--targets-out", yout, 1}, {"--prompts", pfile, 0},
                                         {"--pairs", pairs_file, 0}};
    int nfl = 4;
    for (int i = 0; i < nfiles; i++)
        fl[nfl++] = (pg_io_file){"the input", files[i], 0};
    char err[9000];
    if (pg_io_check_distinct(fl, nfl, err, sizeof err) != 0) {
        fprintf(stderr, "pipedata: %s\n", err);
        return 2;
    }
    if (pairs_file)
        return pairs(tok, pairs_file, pk, rk, seq, (int32_t)pad, (int32_t)ignore, out, yout);
    if (pfile || ptext)
        return prompts(tok, pfile, ptext, out);
    return stream(tok, files, nfiles, out);
}

/* dsl/diag.c — located diagnostics (see diag.h): the message line, the source
 * line it points into, and a caret under the column. Also reads source files
 * and suggests near-miss names. */
#include "diag.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A quoted line longer than this is shown as a window of this many bytes that
 * contains the column, with "..." marking the cut ends (a 1 MB line stays a
 * readable diagnostic). */
#define QUOTE_MAX 200

void pg_diag_init(pg_diag *d, FILE *out, const pg_source *src)
{
    memset(d, 0, sizeof *d);
    d->out = out;
    d->src = src;
}

/* Start of line `line` (1-based) in d->src and its length without the
 * newline; returns 0 when the file has no such line. Resumes from the line
 * found last time (forwards, or backwards when that is nearer than the top). */
static int find_line(pg_diag *d, int line, const char **start, size_t *len)
{
    const pg_source *src = d->src;
    const char *text = src->text, *end = src->text + src->len, *p = text;
    int l = 1;
    if (d->line_src == src && d->line_no > 0 && d->line_off <= src->len &&
        (d->line_off == 0 || text[d->line_off - 1] == '\n') && (line >= d->line_no || line > d->line_no - line)) {
        p = text + d->line_off;
        l = d->line_no;
        while (l > line) { /* back to the start of the previous line */
            p--;               /* the newline that ends the previous line */
            while (p > text && p[-1] != '\n') p--;
            l--;
        }
    }
    for (; l < line; l++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) return 0;
        p = nl + 1;
    }
    if (p == end && line > 1) return 0; /* past the last newline: no such line */
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    *start = p;
    *len = (size_t)((nl ? nl : end) - p);
    d->line_src = src;
    d->line_no = line;
    d->line_off = (size_t)(p - text);
    return 1;
}

/* Print the line and the caret line. Control bytes other than tab are shown
 * as '?' (a NUL or an escape must not reach the terminal); a trailing CR is
 * dropped. One byte stays one column, so the caret lines up. */
static void quote_line(FILE *out, const char *line, size_t len, int col)
{
    if (len && line[len - 1] == '\r') len--;
    size_t at = col > 0 ? (size_t)col - 1 : 0; /* byte offset of the caret */
    if (at > len) at = len;                     /* at most just past the end */
    size_t from = 0, to = len;
    if (len > QUOTE_MAX) {
        from = at > QUOTE_MAX / 2 ? at - QUOTE_MAX / 2 : 0;
        if (from + QUOTE_MAX > len) from = len > QUOTE_MAX ? len - QUOTE_MAX : 0;
        to = from + QUOTE_MAX;
    }
    if (from > 0) fputs("...", out);
    for (size_t i = from; i < to; i++) {
        unsigned char c = (unsigned char)line[i];
        fputc(c == '\t' || (c >= 0x20 && c != 0x7f) ? c : '?', out);
    }
    if (to < len) fputs("...", out);
    fputc('\n', out);
    if (from > 0) fputs("   ", out);
    for (size_t i = from; i < at; i++) fputc(i < len && line[i] == '\t' ? '\t' : ' ', out);
    fputs("^\n", out);
}

static void hold(pg_diag *d, int is_note, pg_loc loc, char *text, size_t len);

void pg_vdiag(pg_diag *d, const char *level, pg_loc loc, const char *fmt, va_list ap)
{
    int is_error = strcmp(level, "error") == 0;
    if (is_error) d->errors++;
    else if (strcmp(level, "warning") == 0) d->warnings++;
    else d->notes++;
    /* Past the cap, errors and whatever follows them are counted, not shown. */
    if (d->max_errors > 0 && d->errors > d->max_errors) return;
    if (!d->out) return;

    char *buf = NULL;
    size_t blen = 0;
    FILE *out = d->deferring ? open_memstream(&buf, &blen) : NULL;
    if (!out) out = d->out; /* not deferring (or out of memory): printed at once */
    const char *file = loc.file ? loc.file : d->src ? d->src->path : NULL;
    if (file && loc.line > 0) fprintf(out, "%s:%d:%d: ", file, loc.line, loc.col);
    else if (file) fprintf(out, "%s: ", file);
    fprintf(out, "%s: ", level);
    vfprintf(out, fmt, ap);
    fputc('\n', out);

    const char *line;
    size_t len;
    if (loc.line > 0 && d->src && d->src->text &&
        (!loc.file || loc.file == d->src->path || strcmp(loc.file, d->src->path) == 0) &&
        find_line(d, loc.line, &line, &len))
        quote_line(out, line, len, loc.col);
    if (out != d->out && fclose(out) == 0)
        hold(d, strcmp(level, "note") == 0, loc, buf, blen);
}

/* Keep one formatted message (text: malloc'd, taken over); a note goes with
 * the message before it. Printed at once when it cannot be kept. */
static void hold(pg_diag *d, int is_note, pg_loc loc, char *text, size_t len)
{
    pg_diag_held *h = d->nheld ? &d->held[d->nheld - 1] : NULL;
    if (is_note && h) {
        char *t = realloc(h->text, h->len + len);
        if (t) {
            memcpy(t + h->len, text, len);
            h->text = t;
            h->len += len;
            free(text);
            return;
        }
    } else if (d->nheld < d->capheld || (h = realloc(d->held, sizeof *d->held * (size_t)(d->capheld * 2 + 16)))) {
        if (d->nheld == d->capheld) {
            d->held = h;
            d->capheld = d->capheld * 2 + 16;
        }
        d->held[d->nheld++] = (pg_diag_held){loc.line, loc.col, text, len};
        return;
    }
    fwrite(text, 1, len, d->out);
    free(text);
}

void pg_diag_defer(pg_diag *d)
{
    d->deferring = 1;
}

/* by line and column; whole-file messages (line 0) after the rest */
static int held_before(const pg_diag_held *a, const pg_diag_held *b)
{
    int la = a->line > 0 ? a->line : INT_MAX, lb = b->line > 0 ? b->line : INT_MAX;
    return la != lb ? la < lb : a->col < b->col;
}

void pg_diag_flush(pg_diag *d)
{
    for (int i = 1; i < d->nheld; i++) { /* insertion sort: stable, and the held messages are few (capped) */
        pg_diag_held x = d->held[i];
        int j = i;
        for (; j > 0 && held_before(&x, &d->held[j - 1]); j--)
            d->held[j] = d->held[j - 1];
        d->held[j] = x;
    }
    for (int i = 0; i < d->nheld; i++) {
        if (d->out)
            fwrite(d->held[i].text, 1, d->held[i].len, d->out);
        free(d->held[i].text);
    }
    free(d->held);
    d->held = NULL;
    d->nheld = d->capheld = 0;
    d->deferring = 0;
}

void pg_error(pg_diag *d, pg_loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pg_vdiag(d, "error", loc, fmt, ap);
    va_end(ap);
}

void pg_warning(pg_diag *d, pg_loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pg_vdiag(d, "warning", loc, fmt, ap);
    va_end(ap);
}

void pg_note(pg_diag *d, pg_loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pg_vdiag(d, "note", loc, fmt, ap);
    va_end(ap);
}

/* ---- source files ------------------------------------------------------- */

/* Report why path cannot be read (msg, or strerror(errno) when msg is NULL),
 * release what was opened, return -1. */
static int read_fail(pg_diag *d, const char *path, int fd, char *buf, const char *msg)
{
    pg_loc none = {path, 0, 0};
    pg_error(d, none, "%s", msg ? msg : strerror(errno));
    if (fd >= 0) close(fd);
    free(buf);
    return -1;
}

int pg_source_read(pg_source *s, const char *path, size_t limit, pg_diag *d)
{
    char msg[128];
    memset(s, 0, sizeof *s);
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; anything but a
     * regular file is refused (a FIFO or a device may never end) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return read_fail(d, path, -1, NULL, NULL);
    struct stat st;
    if (fstat(fd, &st) != 0) return read_fail(d, path, fd, NULL, NULL);
    if (S_ISDIR(st.st_mode)) return read_fail(d, path, fd, NULL, "is a directory");
    if (!S_ISREG(st.st_mode))
        return read_fail(d, path, fd, NULL,
                         S_ISFIFO(st.st_mode) ? "is not a regular file (it is a pipe (FIFO)); give the file itself"
                                              : "is not a regular file (a device or a socket)");
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (limit && (unsigned long long)st.st_size > limit) {
        snprintf(msg, sizeof msg, "file too large (%llu bytes, limit %llu)",
                 (unsigned long long)st.st_size, (unsigned long long)limit);
        return read_fail(d, path, fd, NULL, msg);
    }

    /* Read to EOF rather than trusting st_size: a file that grows meanwhile too. */
    size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) return read_fail(d, path, fd, NULL, NULL);
    for (;;) {
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) return read_fail(d, path, fd, buf, NULL);
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return read_fail(d, path, fd, buf, NULL);
        if (n == 0) break;
        len += (size_t)n;
        if (limit && len > limit) {
            snprintf(msg, sizeof msg, "file too large (more than %llu bytes, limit %llu)",
                     (unsigned long long)limit, (unsigned long long)limit);
            return read_fail(d, path, fd, buf, msg);
        }
    }
    close(fd);
    buf[len] = '\0'; /* the lexer's sentinel */
    s->path = strdup(path);
    if (!s->path) return read_fail(d, path, -1, buf, "out of memory");
    s->text = buf;
    s->len = len;
    return 0;
}

void pg_source_free(pg_source *s)
{
    free(s->path);
    free(s->text);
    memset(s, 0, sizeof *s);
}

/* ---- "did you mean" ----------------------------------------------------- */

/* Words longer than this get no suggestion (keeps the distance table small). */
#define SUGGEST_MAX 64

static size_t min3(size_t a, size_t b, size_t c)
{
    size_t m = a < b ? a : b;
    return m < c ? m : c;
}

/* Optimal string alignment distance of a and b, both at most SUGGEST_MAX
 * bytes: insertions, deletions, substitutions and swaps of two adjacent
 * letters each count one edit (`bais` is one edit from `bias`). Three rows of
 * the table: the one before last (for swaps), the last, the current. */
static size_t edit_distance(const char *a, size_t na, const char *b, size_t nb)
{
    size_t rows[3][SUGGEST_MAX + 1];
    size_t *pp = rows[0], *prev = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= nb; j++) prev[j] = j;
    for (size_t i = 1; i <= na; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t d = min3(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]));
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && pp[j - 2] + 1 < d)
                d = pp[j - 2] + 1;
            cur[j] = d;
        }
        size_t *t = pp;
        pp = prev;
        prev = cur;
        cur = t;
    }
    return prev[nb];
}

const char *pg_suggest(const char *word, const char *const *candidates, int n)
{
    size_t len = strlen(word);
    if (len > SUGGEST_MAX) return NULL;
    size_t limit = len / 3 > 1 ? len / 3 : 1, best_d = limit + 1;
    const char *best = NULL;
    for (int i = 0; i < n; i++) {
        if (!candidates[i]) continue;
        size_t cl = strlen(candidates[i]);
        if (cl > SUGGEST_MAX || (cl > len ? cl - len : len - cl) > limit) continue;
        size_t dist = edit_distance(word, len, candidates[i], cl);
        if (dist < best_d && strcmp(word, candidates[i]) != 0) {
            best_d = dist;
            best = candidates[i];
        }
    }
    return best;
}

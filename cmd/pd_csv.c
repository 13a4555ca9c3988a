/* cmd/pd_csv.c — `pipedata csv IN.csv -o X.pgd [--target COLUMN --targets-out
 * Y.pgd] [--target-dtype i32|f32]`: a table into data files. The first line
 * names the columns; every later line is one sample: numbers separated by
 * commas (a field may be quoted, "1.5"; spaces around a number are allowed;
 * empty lines are passed over; CRLF line ends and a UTF-8 byte-order mark are
 * taken). X gets every column but the target, as f32[rows, columns], in the
 * header's order; Y the target column: i32 class indices (rank 1, for
 * `target y : i32`) when every value is a whole number in [0, 2^31), else
 * f32[rows, 1] (`target y : f32[1]`), unless --target-dtype says which. Every
 * error names the line and the column (its number and its name). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipedata.h"

#define CSV_MAX_COLS 100000

/* One line's fields: [start, start + len) of each, quotes removed. */
typedef struct csv_line {
    int n, cap;
    const char **s;
    size_t *len;
    char **own;          /* a quoted field: its unescaped copy (s points into it), else NULL */
} csv_line;

static void line_free(csv_line *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->own[i]);
    free(l->s);
    free(l->len);
    free(l->own);
    memset(l, 0, sizeof *l);
}

static int push(csv_line *l, const char *s, size_t len, char *own)
{
    if (l->n == l->cap) {
        int c = l->cap ? l->cap * 2 : 16;
        const char **ns = realloc(l->s, (size_t)c * sizeof *ns);
        if (ns)
            l->s = ns;
        size_t *nl = realloc(l->len, (size_t)c * sizeof *nl);
        if (nl)
            l->len = nl;
        char **no = realloc(l->own, (size_t)c * sizeof *no);
        if (no)
            l->own = no;
        if (!ns || !nl || !no)
            return -1;
        l->cap = c;
    }
    l->s[l->n] = s;
    l->len[l->n] = len;
    l->own[l->n++] = own;
    return 0;
}

/* Split the line [p, end) (no line end) into fields. 0, or -1 with the
 * reason and the column in err. */
static int split_line(const char *p, const char *end, csv_line *l, char *err, size_t el)
{
    for (int i = 0; i < l->n; i++)
        free(l->own[i]);
    l->n = 0;
    for (;;) {
        const char *f = p;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p < end && *p == '"') { /* quoted: "" is one quote */
            char *own = malloc((size_t)(end - p) + 1);
            size_t ol = 0;
            if (!own)
                return -1;
            for (p++; p < end; p++) {
                if (*p == '"' && p + 1 < end && p[1] == '"')
                    p++;
                else if (*p == '"')
                    break;
                own[ol++] = *p;
            }
            if (p >= end) {
                free(own);
                snprintf(err, el, "column %d: a quoted field that does not end on its line", l->n + 1);
                return -1;
            }
            p++;
            while (p < end && (*p == ' ' || *p == '\t'))
                p++;
            if (p < end && *p != ',') {
                free(own);
                snprintf(err, el, "column %d: text after a quoted field", l->n + 1);
                return -1;
            }
            if (push(l, own, ol, own)) {
                free(own);
                return -1;
            }
        } else {
            while (p < end && *p != ',')
                p++;
            const char *e = p;
            while (e > f && (e[-1] == ' ' || e[-1] == '\t'))
                e--;
            while (f < e && (*f == ' ' || *f == '\t'))
                f++;
            if (push(l, f, (size_t)(e - f), NULL))
                return -1;
        }
        if (l->n > CSV_MAX_COLS) {
            snprintf(err, el, "more than %d columns", CSV_MAX_COLS);
            return -1;
        }
        if (p >= end)
            return 0;
        p++; /* the comma */
    }
}

/* A field as a finite number: 0, or -1 with why ("empty", "not a number"). */
static int number(const char *s, size_t len, double *out, const char **why)
{
    char buf[128];
    if (len == 0) {
        *why = "an empty value";
        return -1;
    }
    if (len >= sizeof buf) {
        *why = "not a number";
        return -1;
    }
    memcpy(buf, s, len);
    buf[len] = 0;
    char *e;
    errno = 0;
    double v = strtod(buf, &e);
    if (e == buf || *e) {
        *why = "not a number";
        return -1;
    }
    if (!isfinite(v) || errno == ERANGE) {
        *why = isnan(v) ? "not a number (NaN)" : "not finite";
        return -1;
    }
    *out = v;
    return 0;
}

/* The next line of [*p, end): [*ls, *le) without its line end; *p moves past it. */
static int next_line(const char **p, const char *end, const char **ls, const char **le)
{
    if (*p >= end)
        return 0;
    *ls = *p;
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    *le = nl ? nl : end;
    *p = nl ? nl + 1 : end;
    if (*le > *ls && (*le)[-1] == '\r')
        (*le)--;
    return 1;
}

/* Growing arrays of the values. */
typedef struct vec {
    size_t n, cap, size;
    void *v;
} vec;

static int vec_push(vec *a, const void *x)
{
    if (a->n == a->cap) {
        size_t c = a->cap ? a->cap * 2 : 4096;
        void *nv = realloc(a->v, c * a->size);
        if (!nv)
            return -1;
        a->v = nv;
        a->cap = c;
    }
    memcpy((char *)a->v + a->n++ * a->size, x, a->size);
    return 0;
}

int pd_csv(const char *in, const char *out, const char *target, const char *targets_out, const char *target_dtype)
{
    size_t n = 0;
    unsigned char *b = pd_slurp(in, &n);
    if (!b)
        return 1;
    const char *p = (const char *)b, *end = p + n, *ls, *le;
    if (n >= 3 && !memcmp(p, "\xef\xbb\xbf", 3)) /* a UTF-8 byte-order mark */
        p += 3;
    csv_line hdr = {0}, row = {0};
    vec x = {0, 0, sizeof(float), NULL}, y = {0, 0, sizeof(double), NULL}, at = {0, 0, sizeof(long), NULL};
    char err[300];
    int rc = 1, tcol = -1, have = 0;
    long line = 0;
    while (!have && next_line(&p, end, &ls, &le)) { /* empty lines before the header are passed over */
        line++;
        have = le > ls;
    }
    if (!have) {
        fprintf(stderr, "pipedata: %s is empty: a header line naming the columns, then one sample a line\n", in);
        goto done;
    }
    if (split_line(ls, le, &hdr, err, sizeof err)) {
        fprintf(stderr, "pipedata: %s:%ld: %s\n", in, line, err[0] ? err : "out of memory");
        goto done;
    }
    int numeric = 1;
    for (int c = 0; c < hdr.n; c++) {
        double v;
        const char *why;
        if (hdr.len[c] == 0) {
            fprintf(stderr, "pipedata: %s:%ld: column %d of the header has no name\n", in, line, c + 1);
            goto done;
        }
        for (int k = 0; k < c; k++)
            if (hdr.len[k] == hdr.len[c] && !memcmp(hdr.s[k], hdr.s[c], hdr.len[c])) {
                fprintf(stderr, "pipedata: %s:%ld: column %d is named '%.*s' like column %d: name every column once\n",
                        in, line, c + 1, (int)hdr.len[c], hdr.s[c], k + 1);
                goto done;
            }
        numeric &= number(hdr.s[c], hdr.len[c], &v, &why) == 0;
        if (target && strlen(target) == hdr.len[c] && !memcmp(target, hdr.s[c], hdr.len[c]))
            tcol = c;
    }
    if (numeric) {
        fprintf(stderr, "pipedata: %s:%ld: the first line holds only numbers; pipedata csv needs a header line naming "
                "the columns first (e.g. x1,x2,label)\n", in, line);
        goto done;
    }
    if (target && tcol < 0) {
        fprintf(stderr, "pipedata: %s:%ld: no column is named '%s'; the columns are:", in, line, target);
        for (int c = 0; c < hdr.n && c < 40; c++)
            fprintf(stderr, "%s '%.*s'", c ? "," : "", (int)hdr.len[c], hdr.s[c]);
        fprintf(stderr, "%s\n", hdr.n > 40 ? ", ..." : "");
        goto done;
    }
    int nx = hdr.n - (tcol >= 0);
    if (nx < 1) {
        fprintf(stderr, "pipedata: %s: the target '%s' is the only column: no inputs are left\n", in, target);
        goto done;
    }
    uint64_t rows = 0;
    while (next_line(&p, end, &ls, &le)) {
        line++;
        if (le == ls)
            continue; /* an empty line holds no sample */
        if (split_line(ls, le, &row, err, sizeof err)) {
            fprintf(stderr, "pipedata: %s:%ld: %s\n", in, line, err[0] ? err : "out of memory");
            goto done;
        }
        if (row.n != hdr.n) {
            fprintf(stderr, "pipedata: %s:%ld: %d field%s, but the header has %d columns\n", in, line, row.n,
                    row.n == 1 ? "" : "s", hdr.n);
            goto done;
        }
        for (int c = 0; c < row.n; c++) {
            double v;
            const char *why;
            if (number(row.s[c], row.len[c], &v, &why)) {
                fprintf(stderr, "pipedata: %s:%ld: column %d ('%.*s'): ", in, line, c + 1, (int)hdr.len[c], hdr.s[c]);
                if (row.len[c])
                    fprintf(stderr, "'%.*s' is %s\n", (int)(row.len[c] > 40 ? 40 : row.len[c]), row.s[c], why);
                else
                    fprintf(stderr, "%s\n", why);
                goto done;
            }
            float f = (float)v;
            if (c != tcol && !isfinite(f)) {
                fprintf(stderr, "pipedata: %s:%ld: column %d ('%.*s'): %.*s is beyond float32's range\n", in, line,
                        c + 1, (int)hdr.len[c], hdr.s[c], (int)row.len[c], row.s[c]);
                goto done;
            }
            if (c == tcol ? vec_push(&y, &v) : vec_push(&x, &f)) {
                fprintf(stderr, "pipedata: out of memory at %s:%ld\n", in, line);
                goto done;
            }
        }
        if (vec_push(&at, &line)) { /* each row's line, for the targets' messages */
            fprintf(stderr, "pipedata: out of memory at %s:%ld\n", in, line);
            goto done;
        }
        rows++;
    }
    if (!rows) {
        fprintf(stderr, "pipedata: %s has a header but no rows: one sample a line after it\n", in);
        goto done;
    }
    /* the targets: class indices when every value is a whole number >= 0 (or --target-dtype i32) */
    int classes = 0;
    double ymax = 0;
    if (tcol >= 0) {
        const double *yv = y.v;
        const long *ln = at.v;
        long bad = -1;
        for (size_t i = 0; i < y.n && bad < 0; i++) {
            if (yv[i] != floor(yv[i]) || yv[i] < 0 || yv[i] > 2147483647.0)
                bad = (long)i;
            if (yv[i] > ymax)
                ymax = yv[i];
        }
        classes = target_dtype ? !strcmp(target_dtype, "i32") : bad < 0;
        if (classes && bad >= 0) {
            fprintf(stderr, "pipedata: %s:%ld: column %d ('%s'): %.17g is not a class index (a whole number >= 0), "
                    "as --target-dtype i32 asks\n", in, ln[bad], tcol + 1, target, yv[bad]);
            goto done;
        }
        if (!classes)
            for (size_t i = 0; i < y.n; i++)
                if (!isfinite((float)yv[i])) {
                    fprintf(stderr, "pipedata: %s:%ld: column %d ('%s'): %.17g is beyond float32's range\n", in, ln[i],
                            tcol + 1, target, yv[i]);
                    goto done;
                }
    }
    uint64_t xd[2] = {rows, (uint64_t)nx};
    if (pd_write(out, 0, 2, xd, x.v))
        goto done;
    char sx[96], sy[96];
    printf("pipedata: %s: %llu rows -> %s: %s", in, (unsigned long long)rows, out, pd_shape(sx, sizeof sx, 0, 2, xd));
    if (tcol >= 0) {
        void *t = malloc(y.n ? y.n * 4 : 1);
        if (!t) {
            fprintf(stderr, "\npipedata: out of memory\n");
            goto done;
        }
        for (size_t i = 0; i < y.n; i++) {
            if (classes)
                ((int32_t *)t)[i] = (int32_t)((const double *)y.v)[i];
            else
                ((float *)t)[i] = (float)((const double *)y.v)[i];
        }
        uint64_t yd[2] = {rows, 1};
        int bad = pd_write(targets_out, classes ? 2 : 0, classes ? 1 : 2, yd, t);
        free(t);
        if (bad) {
            printf("\n");
            goto done;
        }
        if (classes)
            printf("; '%s' -> %s: %s, class indices 0..%.0f (every value a whole number; --target-dtype f32 for a "
                   "value to regress)", target, targets_out, pd_shape(sy, sizeof sy, 2, 1, yd), ymax);
        else
            printf("; '%s' -> %s: %s", target, targets_out, pd_shape(sy, sizeof sy, 0, 2, yd));
    }
    printf("\n");
    rc = 0;
done:
    line_free(&hdr);
    line_free(&row);
    free(x.v);
    free(y.v);
    free(at.v);
    free(b);
    return rc;
}

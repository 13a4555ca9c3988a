/* cmd/pd_npy.c — `pipedata npy IN.npy -o OUT.pgd [--dtype f32|i32]`: a numpy
 * array (the .npy format of np.save: "\x93NUMPY", a version, the length of a
 * header that is a Python dict literal {'descr': '<f4', 'fortran_order':
 * False, 'shape': (1000, 64), }, then the values) into a .pgd file: its first
 * dimension is the samples, the rest the per-sample shape. f32, f64, int32,
 * int64 and uint8, either byte order, in C order; anything else is refused
 * with the reason. Floats become f32, integers i32 (ids and class indices),
 * unless --dtype says otherwise; a value that does not survive the conversion
 * exactly (an int64 past int32, an f64 past f32's range, a fraction made i32,
 * an integer past 2^24 made f32) is refused naming the sample and element, as
 * are NaN and infinities, which no run accepts. */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipedata.h"

#define NPY_MAX_RANK 5 /* a .pgd file: samples and up to 4 per-sample dimensions */

/* What the header says. */
typedef struct npy_header {
    char kind;          /* 'f', 'i', 'u' */
    int size;           /* bytes per value */
    int big;            /* '>' byte order */
    int fortran;
    int rank;
    uint64_t dim[NPY_MAX_RANK];
    const char *descr;  /* as written, for messages */
} npy_header;

/* ---- the header's dict literal ---------------------------------------------- */

typedef struct lit {
    const char *p, *end;
    char err[300];
} lit;

static void skip_space(lit *l)
{
    while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' || *l->p == '\r'))
        l->p++;
}

static int expect(lit *l, char c)
{
    skip_space(l);
    if (l->p < l->end && *l->p == c) {
        l->p++;
        return 0;
    }
    snprintf(l->err, sizeof l->err, "expected '%c'", c);
    return -1;
}

/* A quoted string ('...' or "...", no escapes in what numpy writes) into out. */
static int string_lit(lit *l, char *out, size_t n)
{
    skip_space(l);
    if (l->p >= l->end || (*l->p != '\'' && *l->p != '"')) {
        snprintf(l->err, sizeof l->err, "expected a quoted string");
        return -1;
    }
    char q = *l->p++;
    const char *s = l->p;
    while (l->p < l->end && *l->p != q && *l->p != '\\')
        l->p++;
    if (l->p >= l->end || *l->p != q) {
        snprintf(l->err, sizeof l->err, "a string that does not end (or holds an escape)");
        return -1;
    }
    snprintf(out, n, "%.*s", (int)(l->p - s), s);
    l->p++;
    return 0;
}

/* (d0, d1, ...) with an optional trailing comma; () is rank 0. */
static int shape_lit(lit *l, npy_header *h)
{
    if (expect(l, '('))
        return -1;
    h->rank = 0;
    for (;;) {
        skip_space(l);
        if (l->p < l->end && *l->p == ')') {
            l->p++;
            return 0;
        }
        if (l->p >= l->end || !isdigit((unsigned char)*l->p)) {
            snprintf(l->err, sizeof l->err, "the shape holds something that is not a size");
            return -1;
        }
        char *e;
        unsigned long long v = strtoull(l->p, &e, 10);
        l->p = e;
        if (l->p < l->end && *l->p == 'L') /* Python 2's long */
            l->p++;
        if (h->rank == NPY_MAX_RANK) {
            snprintf(l->err, sizeof l->err, "the array has more than %d dimensions; a data file holds the samples and "
                     "at most %d per-sample dimensions", NPY_MAX_RANK, NPY_MAX_RANK - 1);
            return -1;
        }
        h->dim[h->rank++] = v;
        skip_space(l);
        if (l->p < l->end && *l->p == ',')
            l->p++;
    }
}

/* '<f4' and the like: kind, size, byte order; 0, or -1 with the reason. */
static int read_descr(const char *d, npy_header *h, char *why, size_t wl)
{
    char order = d[0];
    const char *t = strchr("<>|=", order) ? d + 1 : d;
    char kind = t[0];
    int size = atoi(t + 1);
    int known = (kind == 'f' && (size == 4 || size == 8)) || (kind == 'i' && (size == 4 || size == 8)) ||
                (kind == 'u' && size == 1);
    if (!known || !t[1] || strspn(t + 1, "0123456789") != strlen(t + 1)) {
        const char *what = kind == 'f' && size == 2 ? "float16" : kind == 'b' ? "bool" : kind == 'c' ? "complex"
                         : kind == 'U' || kind == 'S' ? "text" : kind == 'O' ? "Python objects"
                         : kind == 'M' || kind == 'm' ? "dates and times" : kind == 'i' || kind == 'u' ? "this integer size"
                         : "this type";
        snprintf(why, wl, "its values are %s (dtype '%s'); pipedata npy reads float32 ('<f4'), float64 ('<f8'), "
                 "int32 ('<i4'), int64 ('<i8') and uint8 ('|u1'): convert it first, e.g. a.astype(np.float32)", what, d);
        return -1;
    }
    h->kind = kind;
    h->size = size;
    h->big = order == '>';
    return 0;
}

/* The header of the file at b[n]: 0 with *data at its values, or -1 with the
 * reason in why. */
static int read_header(const unsigned char *b, size_t n, npy_header *h, size_t *data, char *descr, size_t dl,
                       char *why, size_t wl)
{
    memset(h, 0, sizeof *h);
    if (n < 10 || memcmp(b, "\x93NUMPY", 6) != 0) {
        snprintf(why, wl, "not a .npy file (it does not start with \\x93NUMPY, as np.save writes)");
        return -1;
    }
    int major = b[6];
    size_t hl, at;
    if (major == 1) {
        hl = (size_t)b[8] | (size_t)b[9] << 8;
        at = 10;
    } else if (major == 2 || major == 3) {
        if (n < 12) {
            snprintf(why, wl, "the file ends inside its header");
            return -1;
        }
        hl = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        at = 12;
    } else {
        snprintf(why, wl, ".npy format version %d.%d, which pipedata does not know (it reads 1.0, 2.0 and 3.0)", major,
                 b[7]);
        return -1;
    }
    if (hl > n - at) {
        snprintf(why, wl, "the file ends inside its header (%zu bytes said, %zu there)", hl, n - at);
        return -1;
    }
    lit l = {(const char *)b + at, (const char *)b + at + hl, ""};
    int have[3] = {0, 0, 0};
    if (expect(&l, '{'))
        goto bad;
    for (;;) {
        skip_space(&l);
        if (l.p < l.end && *l.p == '}')
            break;
        char key[64], val[64];
        if (string_lit(&l, key, sizeof key) || expect(&l, ':'))
            goto bad;
        skip_space(&l);
        if (!strcmp(key, "descr")) {
            if (l.p < l.end && *l.p == '[') {
                snprintf(why, wl, "it is a structured array (its dtype is a list of fields): save one plain array "
                         "per file");
                return -1;
            }
            if (string_lit(&l, val, sizeof val))
                goto bad;
            snprintf(descr, dl, "%s", val);
            if (read_descr(val, h, why, wl))
                return -1;
            have[0] = 1;
        } else if (!strcmp(key, "fortran_order")) {
            size_t left = (size_t)(l.end - l.p);
            if (left >= 4 && !strncmp(l.p, "True", 4))
                h->fortran = 1, l.p += 4;
            else if (left >= 5 && !strncmp(l.p, "False", 5))
                l.p += 5;
            else {
                snprintf(l.err, sizeof l.err, "fortran_order is neither True nor False");
                goto bad;
            }
            have[1] = 1;
        } else if (!strcmp(key, "shape")) {
            if (shape_lit(&l, h))
                goto bad;
            have[2] = 1;
        } else {
            snprintf(l.err, sizeof l.err, "an unknown key '%s'", key);
            goto bad;
        }
        skip_space(&l);
        if (l.p < l.end && *l.p == ',')
            l.p++;
    }
    if (!have[0] || !have[1] || !have[2]) {
        snprintf(why, wl, "its header lacks '%s'", !have[0] ? "descr" : !have[1] ? "fortran_order" : "shape");
        return -1;
    }
    *data = at + hl;
    return 0;
bad:
    snprintf(why, wl, "its header is not the dict np.save writes: %s", l.err[0] ? l.err : "malformed");
    return -1;
}

/* ---- the values -------------------------------------------------------------- */

/* Value i of the array as a double (in the file's byte order). */
static double value_at(const unsigned char *v, const npy_header *h, uint64_t i)
{
    unsigned char b[8];
    const unsigned char *s = v + i * (uint64_t)h->size;
    for (int k = 0; k < h->size; k++)
        b[k] = h->big ? s[h->size - 1 - k] : s[k];
    if (h->kind == 'u')
        return (double)b[0];
    if (h->kind == 'f' && h->size == 4) {
        float f;
        memcpy(&f, b, 4);
        return (double)f;
    }
    if (h->kind == 'f') {
        double x;
        memcpy(&x, b, 8);
        return x;
    }
    if (h->size == 4) {
        int32_t x;
        memcpy(&x, b, 4);
        return (double)x;
    }
    int64_t x;
    memcpy(&x, b, 8);
    return (double)x;
}

/* int64 values are checked as integers (a double holds 2^53 at most). */
static int64_t int_at(const unsigned char *v, const npy_header *h, uint64_t i)
{
    unsigned char b[8];
    const unsigned char *s = v + i * (uint64_t)h->size;
    for (int k = 0; k < h->size; k++)
        b[k] = h->big ? s[h->size - 1 - k] : s[k];
    if (h->size == 8) {
        int64_t x;
        memcpy(&x, b, 8);
        return x;
    }
    return (int64_t)value_at(v, h, i);
}

int pd_npy(const char *in, const char *out, const char *want)
{
    size_t n = 0;
    unsigned char *b = pd_slurp(in, &n);
    if (!b)
        return 1;
    npy_header h;
    size_t at = 0;
    char why[600], descr[64] = "?", shape[160];
    int rc = 1;
    void *dst = NULL;
    if (read_header(b, n, &h, &at, descr, sizeof descr, why, sizeof why)) {
        fprintf(stderr, "pipedata: %s: %s\n", in, why);
        goto done;
    }
    if (h.fortran) {
        fprintf(stderr, "pipedata: %s: the array is in Fortran order (column-major); pipedata npy reads C order: save "
                "it as np.save(path, np.ascontiguousarray(a))\n", in);
        goto done;
    }
    if (h.rank == 0) {
        fprintf(stderr, "pipedata: %s: a 0-d array (shape ()) holds one value; a data file's first dimension is its "
                "samples\n", in);
        goto done;
    }
    uint64_t count = 1;
    for (int i = 0; i < h.rank; i++)
        count = h.dim[i] && count > UINT64_MAX / 2 / h.dim[i] ? UINT64_MAX / 2 : count * h.dim[i];
    if (h.dim[0] == 0 || count == 0) {
        fprintf(stderr, "pipedata: %s: the array holds no samples (shape %s)\n", in,
                pd_shape(shape, sizeof shape, -1, h.rank, h.dim));
        goto done;
    }
    if (count > (UINT64_C(1) << 40) || (n - at) / (uint64_t)h.size != count || (n - at) % (uint64_t)h.size) {
        if (count <= (n - at) / (uint64_t)h.size)
            fprintf(stderr, "pipedata: %s has %llu bytes after its values: shape %s of %d-byte values is %llu bytes\n",
                    in, (unsigned long long)(n - at - count * (uint64_t)h.size),
                    pd_shape(shape, sizeof shape, -1, h.rank, h.dim), h.size,
                    (unsigned long long)(count * (uint64_t)h.size));
        else
            fprintf(stderr, "pipedata: %s is truncated: shape %s of %d-byte values needs %llu bytes of values, the "
                    "file has %zu\n", in, pd_shape(shape, sizeof shape, -1, h.rank, h.dim), h.size,
                    (unsigned long long)count * (unsigned long long)h.size, n - at);
        goto done;
    }
    int i32 = want ? !strcmp(want, "i32") : h.kind != 'f';
    uint64_t per = count / h.dim[0];
    dst = malloc((size_t)count * 4);
    if (!dst) {
        fprintf(stderr, "pipedata: out of memory for %llu values\n", (unsigned long long)count);
        goto done;
    }
    const unsigned char *v = b + at;
    for (uint64_t i = 0; i < count; i++) {
        double x = value_at(v, &h, i);
        const char *bad = NULL;
        if (h.kind == 'f' && !isfinite(x))
            bad = "a data file must hold finite values";
        else if (i32 && h.kind == 'i' && h.size == 8 && (int_at(v, &h, i) < INT32_MIN || int_at(v, &h, i) > INT32_MAX))
            bad = "outside int32's range";
        else if (i32 && h.kind == 'f' && (x != floor(x) || x < INT32_MIN || x > INT32_MAX))
            bad = "not a whole number in int32's range (--dtype i32)";
        else if (!i32 && h.kind == 'f' && h.size == 8 && fabs(x) > 3.4028234663852886e38)
            bad = "beyond float32's range";
        else if (!i32 && h.kind == 'i' && fabs(x) > 16777216.0)
            bad = "an integer past 2^24, which float32 does not hold exactly (--dtype f32)";
        if (bad) {
            if (h.kind == 'i' && h.size == 8)
                fprintf(stderr, "pipedata: %s: sample %llu, element %llu is %lld: %s\n", in,
                        (unsigned long long)(i / per), (unsigned long long)(i % per), (long long)int_at(v, &h, i), bad);
            else
                fprintf(stderr, "pipedata: %s: sample %llu, element %llu is %.17g: %s\n", in,
                        (unsigned long long)(i / per), (unsigned long long)(i % per), x, bad);
            goto done;
        }
        if (i32)
            ((int32_t *)dst)[i] = (int32_t)(h.kind == 'i' && h.size == 8 ? int_at(v, &h, i) : (int64_t)x);
        else
            ((float *)dst)[i] = (float)x;
    }
    if (pd_write(out, i32 ? 2 : 0, h.rank, h.dim, dst))
        goto done;
    char from[160];
    snprintf(from, sizeof from, "%s", pd_shape(shape, sizeof shape, -1, h.rank, h.dim));
    printf("pipedata: %s: dtype '%s', shape %s -> %s: %s, %llu samples%s\n", in, descr, from, out,
           pd_shape(shape, sizeof shape, i32 ? 2 : 0, h.rank, h.dim), (unsigned long long)h.dim[0],
           h.kind == 'u' && i32 ? " (uint8 as i32 ids or classes; --dtype f32 for pixel values)" : "");
    rc = 0;
done:
    free(dst);
    free(b);
    return rc;
}

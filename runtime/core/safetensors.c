/* runtime/core/safetensors.c — checkpoints and weights in the safetensors format:
 *   u64 LE  N (header length, a multiple of 8 here: padded with spaces)
 *   N bytes JSON {"name":{"dtype":"F32","shape":[..],"data_offsets":[b,e]},...,
 *                 "__metadata__":{"key":"value",...}}
 *   data    tensors back to back; offsets are relative to the data start.
 * The reader is a strict parser for exactly that JSON subset: bounded, every
 * error names the byte offset within the header. It then validates the layout
 * as the reference implementation (huggingface/safetensors, Metadata::validate
 * and read_metadata) does: the header is UTF-8 of at most 100,000,000 bytes;
 * sorted by their data_offsets, the tensors cover the data exactly, each
 * beginning where the one before it ends (no overlap, no gap), each exactly
 * shape x dtype size bytes (no overflow), and the last one ending at the end of
 * the file (no trailing bytes). */
#include "pg_io.h"
#include "io_atomic.h"
#include "pg_le.h"
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER 100000000u /* the reference implementation's limit (MAX_HEADER_SIZE) */
#define ST_MAX_RANK 8

/* ---- writer -------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->len + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) { b->oom = 1; return; }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char t[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t, sizeof t, fmt, ap);
    va_end(ap);
    if (n > 0) sb_put(b, t, (size_t)n < sizeof t ? (size_t)n : sizeof t - 1);
}

/* A JSON string literal: quotes, backslashes and control bytes escaped. */
static void sb_json_str(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"') sb_put(b, "\\\"", 2);
        else if (*p == '\\') sb_put(b, "\\\\", 2);
        else if (*p == '\n') sb_put(b, "\\n", 2);
        else if (*p == '\t') sb_put(b, "\\t", 2);
        else if (*p == '\r') sb_put(b, "\\r", 2);
        else if (*p < 0x20) sb_printf(b, "\\u%04x", *p);
        else sb_put(b, (const char *)p, 1);
    }
    sb_put(b, "\"", 1);
}

static const char *st_dtype(int dt)
{
    return dt == 0 ? "F32" : dt == 2 ? "I32" : NULL;
}

int pg_st_write(const char *path, const pg_st_tensor *t, int n, const char *const *metadata,
                char *err, size_t errlen)
{
    sbuf h = {0};
    uint64_t off = 0;
    sb_put(&h, "{", 1);
    for (int i = 0; i < n; i++) {
        const char *dt = st_dtype(t[i].dtype);
        if (!dt || t[i].rank < 0 || t[i].rank > 5 || !t[i].name || !strcmp(t[i].name, "__metadata__")) {
            snprintf(err, errlen, "cannot write %s: tensor %d ('%s') has an unsupported dtype, rank or name", path, i,
                     t[i].name ? t[i].name : "(null)");
            free(h.p);
            return -1;
        }
        uint64_t numel = 1;
        for (int d = 0; d < t[i].rank; d++) numel *= (uint64_t)t[i].dim[d];
        if (numel * 4 != (uint64_t)t[i].bytes) {
            snprintf(err, errlen, "cannot write %s: tensor '%s' has %llu elements but %zu bytes", path, t[i].name,
                     (unsigned long long)numel, t[i].bytes);
            free(h.p);
            return -1;
        }
        if (i) sb_put(&h, ",", 1);
        sb_json_str(&h, t[i].name);
        sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", dt);
        for (int d = 0; d < t[i].rank; d++) sb_printf(&h, "%s%lld", d ? "," : "", (long long)t[i].dim[d]);
        sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                  (unsigned long long)(off + t[i].bytes));
        off += t[i].bytes;
    }
    if (metadata && metadata[0]) {
        sb_put(&h, n ? ",\"__metadata__\":{" : "\"__metadata__\":{", n ? 17 : 16);
        for (int k = 0; metadata[k] && metadata[k + 1]; k += 2) {
            if (k) sb_put(&h, ",", 1);
            sb_json_str(&h, metadata[k]);
            sb_put(&h, ":", 1);
            sb_json_str(&h, metadata[k + 1]);
        }
        sb_put(&h, "}", 1);
    }
    sb_put(&h, "}", 1);
    while (h.len % 8) sb_put(&h, " ", 1);
    if (h.oom) {
        free(h.p);
        snprintf(err, errlen, "cannot write %s: out of memory", path);
        return -1;
    }
    unsigned char lenb[8];
    pg_put64(lenb, (uint64_t)h.len);
    const void **parts = calloc((size_t)n + 2, sizeof *parts);
    size_t *lens = calloc((size_t)n + 2, sizeof *lens);
    int rc = -1;
    if (parts && lens) {
        parts[0] = lenb;
        lens[0] = 8;
        parts[1] = h.p;
        lens[1] = h.len;
        for (int i = 0; i < n; i++) {
            parts[i + 2] = t[i].data;
            lens[i + 2] = t[i].bytes;
        }
        rc = pg_io_write_atomic(path, (const void *const *)parts, lens, n + 2, err, errlen);
    } else {
        snprintf(err, errlen, "cannot write %s: out of memory", path);
    }
    free(parts);
    free(lens);
    free(h.p);
    return rc;
}

/* ---- reader -------------------------------------------------------------- */

typedef struct st_entry {
    char *name;
    size_t at;          /* byte of its name in the header (messages) */
    char dtype[8];
    int rank;
    int64_t dim[ST_MAX_RANK];
    uint64_t begin, end;
} st_entry;

typedef struct st_header {
    const char *path;
    const char *s;      /* [n] the JSON text */
    size_t n, pos;
    st_entry *e;
    int ne, cap;
    st_entry **byname;  /* [ne] sorted by name, after parse_header */
    char **meta;        /* key, value, key, value ... */
    int nmeta, metacap;
    uint64_t data_bytes; /* bytes after the header */
    char *err;
    size_t errlen;
    pg_json j;
} st_header;

static int perr(st_header *h, const char *what)
{
    snprintf(h->err, h->errlen, "%s: malformed safetensors header at byte %zu: %s", h->path, h->pos, what);
    return -1;
}

/* The JSON reader's first error, as perr's. */
static int jerr(st_header *h)
{
    h->pos = h->j.err_pos;
    return perr(h, h->j.err);
}

static int parse_entry(st_header *h, st_entry *e)
{
    int seen_dt = 0, seen_shape = 0, seen_off = 0;
    pg_json *j = &h->j;
    char *key;
    if (pg_json_object(j)) return jerr(h);
    while (pg_json_member(j, &key)) {
        size_t at = pg_json_here(j);
        if (!strcmp(key, "dtype") && !seen_dt) {
            char *v;
            seen_dt = 1;
            if (pg_json_string(j, &v)) break;
            snprintf(e->dtype, sizeof e->dtype, "%s", v);
            free(v);
        } else if (!strcmp(key, "shape") && !seen_shape) {
            seen_shape = 1;
            if (pg_json_array(j)) break;
            while (pg_json_item(j)) {
                uint64_t d;
                if (e->rank >= ST_MAX_RANK) pg_json_fail(j, "too many dimensions");
                if (pg_json_u64(j, &d)) break;
                e->dim[e->rank++] = (int64_t)d;
            }
        } else if (!strcmp(key, "data_offsets") && !seen_off) {
            seen_off = 1;
            int k = 0;
            if (pg_json_array(j)) break;
            while (pg_json_item(j)) {
                if (k == 2) pg_json_fail(j, "data_offsets holds two numbers");
                if (pg_json_u64(j, k ? &e->end : &e->begin)) break;
                k++;
            }
            if (!j->failed && k != 2) pg_json_fail_at(j, at, "data_offsets holds two numbers");
        } else {
            pg_json_fail_at(j, at, "unknown or repeated key '%s' in tensor entry", key);
        }
        free(key);
        key = NULL;
        if (j->failed) break;
    }
    free(key);
    if (j->failed) return jerr(h);
    if (!seen_dt || !seen_shape || !seen_off) return perr(h, "tensor entry lacks dtype, shape or data_offsets");
    return 0;
}

static int parse_meta(st_header *h)
{
    pg_json *j = &h->j;
    char *k, *v;
    if (pg_json_object(j)) return jerr(h);
    while (pg_json_member(j, &k)) {
        if (pg_json_string(j, &v)) { free(k); break; }
        if (h->nmeta + 2 > h->metacap) {
            int c = h->metacap ? h->metacap * 2 : 8;
            char **q = realloc(h->meta, (size_t)c * sizeof *q);
            if (!q) { free(k); free(v); return perr(h, "out of memory"); }
            h->meta = q;
            h->metacap = c;
        }
        h->meta[h->nmeta++] = k;
        h->meta[h->nmeta++] = v;
    }
    return j->failed ? jerr(h) : 0;
}

static int entry_cmp(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : x->at < y->at ? -1 : x->at > y->at;
}

static int parse_header(st_header *h)
{
    int seen_meta = 0;
    pg_json *j = &h->j;
    char *name;
    pg_json_init(j, h->s, h->n);
    if (pg_json_object(j)) return jerr(h);
    for (;;) {
        size_t at = pg_json_here(j);
        if (!pg_json_member(j, &name)) break;
        at = j->s[at] == ',' ? at + 1 : at; /* the name, after the comma */
        while (at < h->n && j->s[at] != '"') at++;
        if (!strcmp(name, "__metadata__")) {
            free(name);
            if (seen_meta) { h->pos = at; return perr(h, "repeated __metadata__"); }
            seen_meta = 1;
            if (parse_meta(h)) return -1;
            continue;
        }
        if (h->ne == h->cap) {
            int c = h->cap ? h->cap * 2 : 16;
            st_entry *q = realloc(h->e, (size_t)c * sizeof *q);
            if (!q) { free(name); return perr(h, "out of memory"); }
            h->e = q;
            h->cap = c;
        }
        st_entry *e = &h->e[h->ne++];
        memset(e, 0, sizeof *e);
        e->name = name;
        e->at = at;
        if (parse_entry(h, e)) return -1;
    }
    if (j->failed || pg_json_end(j)) return jerr(h);
    /* names sorted once: repeats found and tensors looked up in n log n, not
     * n^2 (a 100 MB header holds millions of entries) */
    h->byname = malloc((size_t)(h->ne ? h->ne : 1) * sizeof *h->byname);
    if (!h->byname) return perr(h, "out of memory");
    for (int i = 0; i < h->ne; i++) h->byname[i] = &h->e[i];
    qsort(h->byname, (size_t)h->ne, sizeof *h->byname, entry_cmp);
    size_t rep = SIZE_MAX;
    for (int i = 1; i < h->ne; i++)
        if (!strcmp(h->byname[i - 1]->name, h->byname[i]->name)) {
            size_t later = h->byname[i - 1]->at > h->byname[i]->at ? h->byname[i - 1]->at : h->byname[i]->at;
            if (later < rep) rep = later;
        }
    if (rep != SIZE_MAX) {
        h->pos = rep; /* the first repeat in the file */
        return perr(h, "repeated tensor name");
    }
    return 0;
}

static const st_entry *find_entry(const st_header *h, const char *name)
{
    size_t lo = 0, hi = (size_t)h->ne;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(h->byname[mid]->name, name);
        if (c == 0) return h->byname[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static void header_free(st_header *h)
{
    for (int i = 0; i < h->ne; i++) free(h->e[i].name);
    for (int i = 0; i < h->nmeta; i++) free(h->meta[i]);
    free(h->e);
    free(h->byname);
    free(h->meta);
    free((char *)h->s);
    h->e = NULL;
    h->byname = NULL;
    h->meta = NULL;
    h->s = NULL;
}

/* Bytes per element of a safetensors dtype name; 0 for a name the format does
 * not define. */
static unsigned dtype_bytes(const char *dt)
{
    static const struct { const char *name; unsigned bytes; } t[] = {
        {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2},
        {"F16", 2}, {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"F64", 8}, {"I64", 8}, {"U64", 8}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(dt, t[i].name)) return t[i].bytes;
    return 0;
}

/* 0 when s[0..n) is well-formed UTF-8 (no overlong forms, no surrogates). */
static int utf8_ok(const unsigned char *s, size_t n, size_t *bad)
{
    for (size_t i = 0, l; i < n; i += l)
        if (!(l = pg_json_utf8_len(s + i, n - i))) {
            *bad = i;
            return -1;
        }
    return 0;
}

static int by_offsets(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* The layout rules of the reference implementation (see the top of the file). */
static int validate_layout(st_header *h)
{
    st_entry **o = malloc((size_t)(h->ne ? h->ne : 1) * sizeof *o);
    if (!o) return perr(h, "out of memory");
    for (int i = 0; i < h->ne; i++) o[i] = &h->e[i];
    qsort(o, (size_t)h->ne, sizeof *o, by_offsets);
    uint64_t at = 0;
    int rc = -1;
    for (int i = 0; i < h->ne; i++) {
        const st_entry *e = o[i];
        unsigned eb = dtype_bytes(e->dtype);
        uint64_t numel = 1;
        int over = 0;
        for (int d = 0; d < e->rank; d++) {
            uint64_t dim = (uint64_t)e->dim[d];
            if (dim && numel > UINT64_MAX / dim) over = 1;
            else numel *= dim;
        }
        if (!eb) {
            snprintf(h->err, h->errlen, "%s: tensor '%s' has dtype '%s', which safetensors does not define", h->path,
                     e->name, e->dtype);
            goto out;
        }
        if (over || numel > UINT64_MAX / eb) {
            snprintf(h->err, h->errlen, "%s: tensor '%s': its shape overflows a 64-bit byte count", h->path, e->name);
            goto out;
        }
        if (e->end < e->begin || e->end - e->begin != numel * eb) {
            snprintf(h->err, h->errlen,
                     "%s: tensor '%s' has data_offsets [%llu, %llu] but its shape needs %llu bytes (%llu elements of %s)",
                     h->path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                     (unsigned long long)(numel * eb), (unsigned long long)numel, e->dtype);
            goto out;
        }
        if (e->begin != at) {
            if (e->begin < at)
                snprintf(h->err, h->errlen,
                         "%s: tensors '%s' and '%s' overlap: '%s' begins at data byte %llu, before '%s' ends at %llu",
                         h->path, o[i - 1]->name, e->name, e->name, (unsigned long long)e->begin, o[i - 1]->name,
                         (unsigned long long)at);
            else
                snprintf(h->err, h->errlen, "%s: a gap of %llu bytes before tensor '%s' (data bytes %llu..%llu belong to no tensor)",
                         h->path, (unsigned long long)(e->begin - at), e->name, (unsigned long long)at,
                         (unsigned long long)e->begin);
            goto out;
        }
        at = e->end;
    }
    if (at != h->data_bytes) {
        if (at < h->data_bytes)
            snprintf(h->err, h->errlen, "%s has %llu bytes after its last tensor (the tensors end at data byte %llu of %llu)",
                     h->path, (unsigned long long)(h->data_bytes - at), (unsigned long long)at,
                     (unsigned long long)h->data_bytes);
        else
            snprintf(h->err, h->errlen,
                     "%s is truncated: its tensors end at data byte %llu but the file has %llu bytes of data", h->path,
                     (unsigned long long)at, (unsigned long long)h->data_bytes);
        goto out;
    }
    rc = 0;
out:
    free(o);
    return rc;
}

/* Open path and parse its header; on 0 the fd is open and h must be freed. */
static int header_load(const char *path, st_header *h, int *fdp, char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    h->path = path;
    h->err = err;
    h->errlen = errlen;
    uint64_t fsize = 0;
    int fd = pg_io_open_regular(path, &fsize, err, errlen);
    if (fd < 0)
        return -1;
    unsigned char lb[8];
    if (pread(fd, lb, 8, 0) != 8) {
        snprintf(err, errlen, "%s is truncated: shorter than the 8-byte header length", path);
        close(fd);
        return -1;
    }
    uint64_t n = pg_get64(lb);
    if (n > fsize - 8 || n > ST_MAX_HEADER || n < 2) {
        snprintf(err, errlen,
                 "%s: header length %llu does not fit (file has %llu bytes, limit %u): truncated or not a safetensors file",
                 path, (unsigned long long)n, (unsigned long long)fsize, ST_MAX_HEADER);
        close(fd);
        return -1;
    }
    char *s = malloc((size_t)n + 1);
    if (!s || pread(fd, s, (size_t)n, 8) != (ssize_t)n) {
        free(s);
        snprintf(err, errlen, "cannot read the header of %s", path);
        close(fd);
        return -1;
    }
    s[n] = 0;
    h->s = s;
    h->n = (size_t)n;
    h->data_bytes = fsize - 8 - n;
    size_t bad;
    if (utf8_ok((const unsigned char *)s, (size_t)n, &bad)) {
        h->pos = bad;
        perr(h, "the header is not valid UTF-8");
        header_free(h);
        close(fd);
        return -1;
    }
    if (parse_header(h) || validate_layout(h)) {
        header_free(h);
        close(fd);
        return -1;
    }
    *fdp = fd;
    return 0;
}

static void dims_str(char *b, size_t len, int rank, const int64_t *d)
{
    size_t o = (size_t)snprintf(b, len, "[");
    for (int i = 0; i < rank && o < len; i++) o += (size_t)snprintf(b + o, len - o, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (o < len) snprintf(b + o, len - o, "]");
}

int pg_st_read(const char *path, pg_st_want *w, int n, char *err, size_t errlen)
{
    st_header h;
    int fd, rc = -1;
    if (header_load(path, &h, &fd, err, errlen)) return -1;
    for (int i = 0; i < n; i++) {
        const st_entry *e = find_entry(&h, w[i].name);
        if (!e) {
            snprintf(err, errlen, "%s has no tensor '%s'", path, w[i].name);
            goto out;
        }
        const char *dt = st_dtype(w[i].dtype);
        int widen = w[i].bf16_ok && w[i].dtype == 0 && !strcmp(e->dtype, "BF16");
        if (!dt || (strcmp(e->dtype, dt) && !widen)) {
            snprintf(err, errlen, "%s: tensor '%s' is %s but the model expects %s", path, w[i].name, e->dtype,
                     dt ? dt : "?");
            goto out;
        }
        w[i].was_bf16 = widen;
        unsigned each = widen ? 2 : 4; /* bytes per element in the file */
        int same = e->rank == w[i].rank;
        for (int d = 0; same && d < e->rank; d++) same = e->dim[d] == w[i].dim[d];
        if (!same) {
            char a[128], b[128];
            dims_str(a, sizeof a, e->rank, e->dim);
            dims_str(b, sizeof b, w[i].rank < 0 ? 0 : w[i].rank > 5 ? 5 : w[i].rank, w[i].dim);
            snprintf(err, errlen, "%s: tensor '%s' has shape %s but the model expects %s", path, w[i].name, a, b);
            goto out;
        }
        uint64_t numel = 1;
        for (int d = 0; d < e->rank; d++) numel *= (uint64_t)e->dim[d];
        if (e->end < e->begin || e->end - e->begin != numel * each) {
            snprintf(err, errlen, "%s: tensor '%s' has data_offsets [%llu, %llu] but its shape needs %llu bytes", path,
                     w[i].name, (unsigned long long)e->begin, (unsigned long long)e->end,
                     (unsigned long long)(numel * each));
            goto out;
        }
        if (e->end > h.data_bytes) {
            snprintf(err, errlen,
                     "%s is truncated: tensor '%s' ends at data byte %llu but the file has %llu bytes of data", path,
                     w[i].name, (unsigned long long)e->end, (unsigned long long)h.data_bytes);
            goto out;
        }
        if (w[i].bytes != numel * 4) {
            snprintf(err, errlen, "%s: tensor '%s': destination holds %zu bytes, the tensor %llu", path, w[i].name,
                     w[i].bytes, (unsigned long long)(numel * 4));
            goto out;
        }
        /* a BF16 tensor lands in the upper half of dst, then widens forward in place: element k's
         * 4 bytes end at 4k + 4, never past bf16 element k + 1, which starts at 2n + 2k + 2 */
        size_t fbytes = (size_t)numel * each, at = w[i].bytes - fbytes, got = 0;
        while (got < fbytes) {
            ssize_t r = pread(fd, (char *)w[i].dst + at + got, fbytes - got, (off_t)(8 + h.n + e->begin + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                snprintf(err, errlen, "cannot read tensor '%s' from %s: %s", w[i].name, path,
                         r < 0 ? strerror(errno) : "unexpected end of file");
                goto out;
            }
            got += (size_t)r;
        }
        unsigned char *b = w[i].dst;
        for (uint64_t k = 0; widen && k < numel; k++) /* exact: bf16 is the top 16 bits of an f32 */
            pg_put32(b + 4 * k, (uint32_t)(b[at + 2 * k] | b[at + 2 * k + 1] << 8) << 16);
    }
    rc = 0;
out:
    header_free(&h);
    close(fd);
    return rc;
}

int pg_st_read_meta(const char *path, const char *key, char *val, size_t vallen, char *err, size_t errlen)
{
    st_header h;
    int fd, rc = -1;
    if (header_load(path, &h, &fd, err, errlen)) return -1;
    snprintf(err, errlen, "%s has no metadata key '%s'", path, key);
    for (int i = 0; i + 1 < h.nmeta; i += 2)
        if (!strcmp(h.meta[i], key)) {
            if (strlen(h.meta[i + 1]) >= vallen) {
                snprintf(err, errlen, "%s: metadata '%s' is longer than %zu bytes", path, key, vallen - 1);
            } else {
                snprintf(val, vallen, "%s", h.meta[i + 1]);
                rc = 0;
            }
            break;
        }
    header_free(&h);
    close(fd);
    return rc;
}

int pg_st_names(const char *path, char ***names, int *n, char *err, size_t errlen)
{
    st_header h;
    int fd;
    *names = NULL;
    *n = 0;
    if (header_load(path, &h, &fd, err, errlen)) return -1;
    close(fd);
    size_t bytes = (size_t)(h.ne + 1) * sizeof(char *);
    for (int i = 0; i < h.ne; i++) bytes += strlen(h.e[i].name) + 1;
    char **v = malloc(bytes);
    if (!v) {
        snprintf(err, errlen, "out of memory listing the tensors of %s", path);
        header_free(&h);
        return -1;
    }
    char *s = (char *)(v + h.ne + 1);
    for (int i = 0; i < h.ne; i++) { /* h.byname is sorted by name */
        size_t l = strlen(h.byname[i]->name) + 1;
        memcpy(s, h.byname[i]->name, l);
        v[i] = s;
        s += l;
    }
    v[h.ne] = NULL;
    *names = v;
    *n = h.ne;
    header_free(&h);
    return 0;
}

int pg_st_shapes(const char *path, const char *const *names, int n, int *rank, int64_t (*dim)[5], char *err,
                 size_t errlen)
{
    st_header h;
    int fd;
    if (header_load(path, &h, &fd, err, errlen)) return -1;
    close(fd);
    for (int i = 0; i < n; i++) {
        const st_entry *e = find_entry(&h, names[i]);
        rank[i] = e ? e->rank : -1;
        for (int d = 0; e && d < e->rank && d < 5; d++) dim[i][d] = e->dim[d];
    }
    header_free(&h);
    return 0;
}

/* One tensor of the table: "name\tdtype\td0,d1,...\tbegin,end\n" into h. */
static uint64_t table_line(uint64_t h, const char *name, const char *dtype, int rank, const int64_t *dim,
                           uint64_t begin, uint64_t end)
{
    char b[160];
    h = pg_hash64(name, strlen(name), h);
    int l = snprintf(b, sizeof b, "\t%s\t", dtype);
    h = pg_hash64(b, (size_t)l, h);
    for (int d = 0; d < rank; d++) {
        l = snprintf(b, sizeof b, "%s%lld", d ? "," : "", (long long)dim[d]);
        h = pg_hash64(b, (size_t)l, h);
    }
    l = snprintf(b, sizeof b, "\t%llu,%llu\n", (unsigned long long)begin, (unsigned long long)end);
    return pg_hash64(b, (size_t)l, h);
}

uint64_t pg_st_table_hash(const pg_st_tensor *t, int n, uint64_t h)
{
    uint64_t off = 0;
    for (int i = 0; i < n; i++) { /* laid out back to back in this order, as pg_st_write does */
        const char *dt = st_dtype(t[i].dtype);
        h = table_line(h, t[i].name, dt ? dt : "?", t[i].rank, t[i].dim, off, off + t[i].bytes);
        off += t[i].bytes;
    }
    return h;
}

int pg_st_data_hash(const char *path, int with_table, uint64_t *hash, char *err, size_t errlen)
{
    st_header h;
    int fd, rc = -1;
    if (header_load(path, &h, &fd, err, errlen)) return -1;
    size_t cap = 1u << 20;
    unsigned char *b = malloc(cap);
    uint64_t x = UINT64_C(0xcbf29ce484222325), at = 0;
    st_entry **o = with_table ? malloc((size_t)(h.ne ? h.ne : 1) * sizeof *o) : NULL;
    if (!b || (with_table && !o)) {
        snprintf(err, errlen, "out of memory reading %s", path);
        free(o);
        goto out;
    }
    if (with_table) { /* the table in data order, as the writer hashed it */
        for (int i = 0; i < h.ne; i++) o[i] = &h.e[i];
        qsort(o, (size_t)h.ne, sizeof *o, by_offsets);
        for (int i = 0; i < h.ne; i++)
            x = table_line(x, o[i]->name, o[i]->dtype, o[i]->rank, o[i]->dim, o[i]->begin, o[i]->end);
        free(o);
    }
    while (at < h.data_bytes) { /* validate_layout: the data is the tensors back to back */
        size_t want = h.data_bytes - at < cap ? (size_t)(h.data_bytes - at) : cap;
        ssize_t r = pread(fd, b, want, (off_t)(8 + h.n + at));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            snprintf(err, errlen, "cannot read %s: %s", path, r < 0 ? strerror(errno) : "unexpected end of file");
            goto out;
        }
        x = pg_hash64(b, (size_t)r, x);
        at += (uint64_t)r;
    }
    *hash = x;
    rc = 0;
out:
    free(b);
    header_free(&h);
    close(fd);
    return rc;
}

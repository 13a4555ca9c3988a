/* runtime/core/json.c — see json.h. */
#include "json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pg_json_init(pg_json *j, const char *text, size_t n)
{
    memset(j, 0, sizeof *j);
    j->s = text;
    j->n = n;
}

void pg_json_place(const pg_json *j, size_t at, int *line, int *col)
{
    int l = 1;
    size_t start = 0;
    if (at > j->n)
        at = j->n;
    for (size_t i = 0; i < at; i++)
        if (j->s[i] == '\n') {
            l++;
            start = i + 1;
        }
    *line = l;
    *col = (int)(at - start) + 1;
}

static int vfail_at(pg_json *j, size_t at, const char *fmt, va_list ap)
{
    if (j->failed)
        return -1;
    j->failed = 1;
    vsnprintf(j->err, sizeof j->err, fmt, ap);
    j->err_pos = at;
    pg_json_place(j, at, &j->err_line, &j->err_col);
    return -1;
}

int pg_json_fail_at(pg_json *j, size_t at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail_at(j, at, fmt, ap);
    va_end(ap);
    return -1;
}

static void skip_ws(pg_json *j)
{
    while (j->pos < j->n &&
           (j->s[j->pos] == ' ' || j->s[j->pos] == '\t' || j->s[j->pos] == '\n' || j->s[j->pos] == '\r'))
        j->pos++;
}

size_t pg_json_here(pg_json *j)
{
    skip_ws(j);
    return j->pos;
}

int pg_json_fail(pg_json *j, const char *fmt, ...)
{
    va_list ap;
    skip_ws(j);
    va_start(ap, fmt);
    vfail_at(j, j->pos, fmt, ap);
    va_end(ap);
    return -1;
}

/* "expected WHAT, found `c`" at byte `at`. */
static int expected_at(pg_json *j, size_t at, const char *what)
{
    if (at >= j->n)
        return pg_json_fail_at(j, at, "expected %s, found the end of the text", what);
    unsigned char c = (unsigned char)j->s[at];
    if (c >= 0x20 && c < 0x7f)
        return pg_json_fail_at(j, at, "expected %s, found `%c`", what, c);
    return pg_json_fail_at(j, at, "expected %s, found the byte 0x%02x", what, c);
}

static int expected(pg_json *j, const char *what) { return expected_at(j, j->pos, what); }

pg_json_kind pg_json_peek(pg_json *j)
{
    if (j->failed)
        return PG_JSON_NONE;
    skip_ws(j);
    if (j->pos >= j->n)
        return PG_JSON_NONE;
    char c = j->s[j->pos];
    switch (c) {
    case '{': return PG_JSON_OBJECT;
    case '[': return PG_JSON_ARRAY;
    case '"': return PG_JSON_STRING;
    case 't': case 'f': return PG_JSON_BOOL;
    case 'n': return PG_JSON_NULL;
    default: return c == '-' || (c >= '0' && c <= '9') ? PG_JSON_NUMBER : PG_JSON_NONE;
    }
}

/* ---- containers ------------------------------------------------------------ */

static int open_container(pg_json *j, char open, int array)
{
    if (j->failed)
        return -1;
    skip_ws(j);
    if (j->pos >= j->n || j->s[j->pos] != open)
        return expected(j, array ? "an array `[`" : "an object `{`");
    if (j->depth >= PG_JSON_MAX_DEPTH)
        return pg_json_fail_at(j, j->pos, "values nested deeper than %d levels", PG_JSON_MAX_DEPTH);
    j->pos++;
    uint64_t bit = UINT64_C(1) << j->depth++;
    j->in_array = array ? j->in_array | bit : j->in_array & ~bit;
    j->fresh |= bit;
    return 0;
}

int pg_json_object(pg_json *j) { return open_container(j, '{', 0); }
int pg_json_array(pg_json *j) { return open_container(j, '[', 1); }

/* Another member or item of the innermost container? Consumes the `,` before
 * it, or the closer (then 0). */
static int next_in(pg_json *j, int array)
{
    if (j->failed || j->depth < 1)
        return 0;
    uint64_t bit = UINT64_C(1) << (j->depth - 1);
    if (!(j->in_array & bit) != !array) { /* a caller's mistake: say so rather than misread */
        pg_json_fail_at(j, j->pos, "internal: reading %s inside %s", array ? "an item" : "a member",
                        array ? "an object" : "an array");
        return 0;
    }
    char close = array ? ']' : '}';
    skip_ws(j);
    if (j->pos < j->n && j->s[j->pos] == close && (j->fresh & bit)) {
        j->pos++;
        j->depth--;
        return 0;
    }
    if (!(j->fresh & bit)) {
        if (j->pos < j->n && j->s[j->pos] == close) {
            j->pos++;
            j->depth--;
            return 0;
        }
        if (j->pos >= j->n || j->s[j->pos] != ',') {
            expected(j, array ? "`,` or `]`" : "`,` or `}`");
            return 0;
        }
        j->pos++;
        skip_ws(j);
    }
    j->fresh &= ~bit;
    return 1;
}

int pg_json_member(pg_json *j, char **key)
{
    *key = NULL;
    if (!next_in(j, 0))
        return 0;
    skip_ws(j);
    if (j->pos >= j->n || j->s[j->pos] != '"') {
        expected(j, "a member name (a string)");
        return 0;
    }
    if (pg_json_string(j, key))
        return 0;
    skip_ws(j);
    if (j->pos >= j->n || j->s[j->pos] != ':') {
        expected(j, "`:`");
        free(*key);
        *key = NULL;
        return 0;
    }
    j->pos++;
    return 1;
}

int pg_json_item(pg_json *j) { return next_in(j, 1); }

/* ---- strings ----------------------------------------------------------------- */

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int hex4(pg_json *j, size_t at, unsigned *cp)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = at + (size_t)i < j->n ? hexval(j->s[at + (size_t)i]) : -1;
        if (h < 0)
            return expected_at(j, at + (size_t)i, "4 hex digits after \\u");
        v = v * 16 + (unsigned)h;
    }
    *cp = v;
    return 0;
}

size_t pg_json_utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, cp = c & 0x07;
    else
        return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
        return 0; /* overlong, beyond Unicode, or a surrogate */
    return len;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63));
    o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

int pg_json_string(pg_json *j, char **out)
{
    *out = NULL;
    if (j->failed)
        return -1;
    skip_ws(j);
    if (j->pos >= j->n || j->s[j->pos] != '"')
        return expected(j, "a string");
    size_t start = j->pos + 1, q = start;
    /* find the end first: the copy is never longer than the raw text */
    while (q < j->n && j->s[q] != '"')
        q += j->s[q] == '\\' ? 2 : 1;
    if (q >= j->n)
        return pg_json_fail_at(j, j->pos, "a string without its closing `\"` before the end of the file (truncated?)");
    char *b = malloc(q - start + 1);
    if (!b)
        return pg_json_fail_at(j, j->pos, "out of memory reading a string of %zu bytes", q - start);
    size_t len = 0, p = start;
    while (p < q) {
        unsigned char c = (unsigned char)j->s[p];
        if (c < 0x20) {
            free(b);
            return pg_json_fail_at(j, p, "a control character (0x%02x) inside a string: write it as an escape", c);
        }
        if (c >= 0x80) {
            size_t l = pg_json_utf8_len((const unsigned char *)j->s + p, q - p);
            if (!l) {
                free(b);
                return pg_json_fail_at(j, p, "a string that is not valid UTF-8");
            }
            memcpy(b + len, j->s + p, l);
            len += l, p += l;
            continue;
        }
        if (c != '\\') {
            b[len++] = (char)c;
            p++;
            continue;
        }
        char e = j->s[p + 1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            b[len++] = map[simple - "\"\\/bfnrt"];
            p += 2;
            continue;
        }
        if (e != 'u') {
            free(b);
            return expected_at(j, p + 1, "an escape: \\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\uXXXX");
        }
        unsigned cp, lo;
        if (hex4(j, p + 2, &cp)) {
            free(b);
            return -1;
        }
        size_t used = 6;
        if (cp >= 0xd800 && cp <= 0xdbff) { /* a high surrogate: its low one must follow */
            if (p + 7 >= q || j->s[p + 6] != '\\' || j->s[p + 7] != 'u') {
                free(b);
                return pg_json_fail_at(j, p, "a \\u escape of a high surrogate (\\u%04X) without its low one", cp);
            }
            if (hex4(j, p + 8, &lo)) {
                free(b);
                return -1;
            }
            if (lo < 0xdc00 || lo > 0xdfff) {
                free(b);
                return pg_json_fail_at(j, p + 6, "\\u%04X does not continue the high surrogate \\u%04X", lo, cp);
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            used = 12;
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            free(b);
            return pg_json_fail_at(j, p, "a \\u escape of a low surrogate (\\u%04X) with no high one before it", cp);
        } else if (cp == 0) {
            free(b);
            return pg_json_fail_at(j, p, "\\u0000 inside a string (names and values here are C strings)");
        }
        len += put_utf8(b + len, cp);
        p += used;
    }
    b[len] = 0;
    j->pos = q + 1;
    *out = b;
    return 0;
}

/* ---- numbers and literals --------------------------------------------------- */

/* The extent of a number by the grammar; 0 after recording the error. */
static size_t number_extent(pg_json *j)
{
    size_t p = j->pos;
    if (p < j->n && j->s[p] == '-')
        p++;
    if (p >= j->n || j->s[p] < '0' || j->s[p] > '9')
        return expected_at(j, p, "a number"), 0;
    if (j->s[p] == '0') {
        p++;
        if (p < j->n && j->s[p] >= '0' && j->s[p] <= '9')
            return pg_json_fail_at(j, p - 1, "a number with a leading zero"), 0;
    } else
        while (p < j->n && j->s[p] >= '0' && j->s[p] <= '9')
            p++;
    if (p < j->n && j->s[p] == '.') {
        p++;
        if (p >= j->n || j->s[p] < '0' || j->s[p] > '9')
            return expected_at(j, p, "a digit after the decimal point"), 0;
        while (p < j->n && j->s[p] >= '0' && j->s[p] <= '9')
            p++;
    }
    if (p < j->n && (j->s[p] == 'e' || j->s[p] == 'E')) {
        p++;
        if (p < j->n && (j->s[p] == '+' || j->s[p] == '-'))
            p++;
        if (p >= j->n || j->s[p] < '0' || j->s[p] > '9')
            return expected_at(j, p, "a digit in the exponent"), 0;
        while (p < j->n && j->s[p] >= '0' && j->s[p] <= '9')
            p++;
    }
    return p - j->pos;
}

/* The next value's extent as a number (white space skipped); 0 after an error. */
static size_t next_number(pg_json *j)
{
    if (j->failed)
        return 0;
    skip_ws(j);
    return number_extent(j);
}

int pg_json_number(pg_json *j, double *out)
{
    size_t len = next_number(j);
    if (!len)
        return -1;
    char buf[64];
    if (len >= sizeof buf)
        return pg_json_fail_at(j, j->pos, "a number of more than %zu characters", sizeof buf - 1);
    memcpy(buf, j->s + j->pos, len);
    buf[len] = 0;
    double v = strtod(buf, NULL);
    if (!isfinite(v))
        return pg_json_fail_at(j, j->pos, "a number too large for a double (%s)", buf);
    j->pos += len;
    *out = v;
    return 0;
}

int pg_json_u64(pg_json *j, uint64_t *out)
{
    size_t len = next_number(j);
    if (!len)
        return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        char c = j->s[j->pos + i];
        if (c < '0' || c > '9')
            return pg_json_fail_at(j, j->pos, "expected a non-negative integer, found `%.*s`", (int)len, j->s + j->pos);
        if (x > (UINT64_C(0x7fffffffffffffff) - (uint64_t)(c - '0')) / 10)
            return pg_json_fail_at(j, j->pos, "an integer above 2^63 - 1 (`%.*s`)", len > 40 ? 40 : (int)len,
                                   j->s + j->pos);
        x = x * 10 + (uint64_t)(c - '0');
    }
    j->pos += len;
    *out = x;
    return 0;
}

static int literal(pg_json *j, const char *word)
{
    size_t l = strlen(word);
    if (j->n - j->pos < l || memcmp(j->s + j->pos, word, l) != 0)
        return -1;
    j->pos += l;
    return 0;
}

int pg_json_bool(pg_json *j, int *out)
{
    if (j->failed)
        return -1;
    skip_ws(j);
    if (!literal(j, "true"))
        return *out = 1, 0;
    if (!literal(j, "false"))
        return *out = 0, 0;
    return expected(j, "`true` or `false`");
}

int pg_json_skip(pg_json *j)
{
    char *key;
    switch (pg_json_peek(j)) {
    case PG_JSON_OBJECT:
        if (pg_json_object(j))
            return -1;
        while (pg_json_member(j, &key)) {
            free(key);
            if (pg_json_skip(j))
                return -1;
        }
        return j->failed ? -1 : 0;
    case PG_JSON_ARRAY:
        if (pg_json_array(j))
            return -1;
        while (pg_json_item(j))
            if (pg_json_skip(j))
                return -1;
        return j->failed ? -1 : 0;
    case PG_JSON_STRING:
        if (pg_json_string(j, &key))
            return -1;
        free(key);
        return 0;
    case PG_JSON_NUMBER: {
        double v;
        return pg_json_number(j, &v);
    }
    case PG_JSON_BOOL: {
        int b;
        return pg_json_bool(j, &b);
    }
    case PG_JSON_NULL:
        if (!literal(j, "null"))
            return 0;
        return expected(j, "a value");
    case PG_JSON_NONE:
    default:
        if (j->failed)
            return -1;
        return expected(j, "a value");
    }
}

int pg_json_end(pg_json *j)
{
    if (j->failed)
        return -1;
    skip_ws(j);
    if (j->pos < j->n)
        return expected(j, "the end of the text after the value");
    return 0;
}

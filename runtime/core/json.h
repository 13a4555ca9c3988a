/* runtime/core/json.h — the one JSON reader of the project: a strict pull
 * reader (RFC 8259) over text in memory, used by the safetensors header
 * (safetensors.c), the layer-time profile (dsl/cost.c) and the trace reader
 * (codegen/cli/cmd_trace.c). It builds no tree, so a 100 MB safetensors header
 * costs no more than its own entries; each caller walks the values it expects
 * and skips the rest.
 *
 * Strict: the grammar exactly (no trailing commas, no comments, no leading
 * zeros, no `+1`, `.5`, `1.`, NaN or Infinity), strings of valid UTF-8 with no
 * raw control characters, every escape including \uXXXX and surrogate pairs
 * (\u0000 is refused: names are C strings), nesting at most PG_JSON_MAX_DEPTH,
 * nothing but white space after the top-level value (pg_json_end).
 *
 * Errors are sticky: the first one is kept with its place (byte offset, line
 * and column, 1-based) and every later call does nothing and fails, so a
 * caller may chain calls and look once. Messages read "expected X, found `c`"
 * or "..., found the end of the text". */
#ifndef PG_JSON_H
#define PG_JSON_H

#include <stddef.h>
#include <stdint.h>

#define PG_JSON_MAX_DEPTH 64

typedef enum pg_json_kind {
    PG_JSON_NONE, /* at the end of the text, or after an error */
    PG_JSON_OBJECT,
    PG_JSON_ARRAY,
    PG_JSON_STRING,
    PG_JSON_NUMBER,
    PG_JSON_BOOL,
    PG_JSON_NULL
} pg_json_kind;

typedef struct pg_json {
    const char *s;
    size_t n, pos;
    int depth;                                 /* containers open */
    uint64_t in_array;                         /* bit d-1: the container at depth d is an array */
    uint64_t fresh;                            /* bit d-1: it has had no member or item yet */
    /* the first error */
    int failed;
    char err[160];
    size_t err_pos;
    int err_line, err_col;
} pg_json;

void pg_json_init(pg_json *j, const char *text, size_t n);

/* The kind of the next value (white space skipped), without consuming it. */
pg_json_kind pg_json_peek(pg_json *j);

/* Objects: pg_json_object(j) consumes `{`; then while pg_json_member(j, &key)
 * returns 1 a member follows (its key malloc'd into *key, the `:` consumed; the
 * caller reads or skips its value); it returns 0 at the closing `}` (consumed)
 * or after an error (check j->failed). Arrays alike with pg_json_item. */
int pg_json_object(pg_json *j);
int pg_json_member(pg_json *j, char **key);
int pg_json_array(pg_json *j);
int pg_json_item(pg_json *j);

/* Values. 0 on success, -1 after recording the error. */
int pg_json_string(pg_json *j, char **out);   /* malloc'd, NUL-terminated UTF-8 */
int pg_json_number(pg_json *j, double *out);  /* finite */
int pg_json_u64(pg_json *j, uint64_t *out);   /* an integer in 0 .. 2^63 - 1, exactly */
int pg_json_bool(pg_json *j, int *out);
int pg_json_skip(pg_json *j);                 /* any value, however nested (up to the depth limit) */
/* Only white space is left. */
int pg_json_end(pg_json *j);

/* Record an error of the caller's at the current place (after white space),
 * or at byte `at` with pg_json_fail_at (a place the caller noted with
 * pg_json_here); printf-style. Returns -1. The first error wins. */
int pg_json_fail(pg_json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int pg_json_fail_at(pg_json *j, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The byte offset of the next value (white space skipped). */
size_t pg_json_here(pg_json *j);
/* The length of the well-formed UTF-8 sequence at s[0..n) (no overlong form,
 * no surrogate, at most U+10FFFF), or 0. */
size_t pg_json_utf8_len(const unsigned char *s, size_t n);
/* Line and column (1-based) of byte offset `at`. */
void pg_json_place(const pg_json *j, size_t at, int *line, int *col);

#endif

/* dsl/diag.h — located diagnostics: `file:line:col: error: message`, the source
 * line, and a caret under the column (ninja's habit). Every front-end and codegen
 * error goes through here; nothing in dsl/ or codegen/ prints errors by itself. */
#ifndef PG_DIAG_H
#define PG_DIAG_H

#include <stdarg.h>
#include <stdio.h>

/* A position in a source file. line and col are 1-based; col counts bytes.
 * line == 0 means "no position" (the message is printed as `file: error: ...`). */
typedef struct pg_loc {
    const char *file; /* not owned: points at pg_source.path */
    int line, col;
} pg_loc;

/* One source file held in memory so diagnostics can quote its lines. */
typedef struct pg_source {
    char *path;       /* owned */
    char *text;       /* owned, NUL-terminated; may contain NULs before len */
    size_t len;
} pg_source;

/* A message held while the diagnostics are deferred: its text (with the notes
 * that follow it) and where it points, for the sort into source order. */
typedef struct pg_diag_held {
    int line, col;        /* 0, 0: the whole file (sorted last) */
    char *text;
    size_t len;
} pg_diag_held;

typedef struct pg_diag {
    FILE *out;            /* where messages go (stderr in the CLI, a memstream in tests) */
    const pg_source *src; /* for quoting lines; may be NULL */
    int errors, warnings, notes;
    int max_errors;       /* stop reporting after this many (0 = unlimited) */
    /* The line last quoted and where it starts in line_src->text: the next
     * quote scans from there, so reporting in source order costs O(1)
     * amortised per message instead of a scan from the top of the file. */
    const pg_source *line_src;
    int line_no;
    size_t line_off;
    /* pg_diag_defer .. pg_diag_flush: messages are held and then printed in
     * source order (the checker finds a block body's errors when it expands a
     * call, after the top-level lines before that call) */
    int deferring;
    pg_diag_held *held;
    int nheld, capheld;
} pg_diag;

void pg_diag_init(pg_diag *d, FILE *out, const pg_source *src);
/* error / warning / note at loc, printf-style. Returns nothing; counts. */
void pg_error(pg_diag *d, pg_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void pg_warning(pg_diag *d, pg_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void pg_note(pg_diag *d, pg_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void pg_vdiag(pg_diag *d, const char *level, pg_loc loc, const char *fmt, va_list ap);
/* From now on hold every message (a note stays with the error or warning
 * before it) until pg_diag_flush, which prints them sorted by line and column
 * (the order found among equal places; whole-file messages last). */
void pg_diag_defer(pg_diag *d);
void pg_diag_flush(pg_diag *d);

/* Read a whole file; on failure reports `path: error: ...` through d and returns -1.
 * Refuses directories and files over limit bytes. */
int pg_source_read(pg_source *s, const char *path, size_t limit, pg_diag *d);
void pg_source_free(pg_source *s);

/* Closest candidate by edit distance (for "did you mean"), or NULL when none is close. */
const char *pg_suggest(const char *word, const char *const *candidates, int n);

#endif

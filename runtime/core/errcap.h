/* runtime/core/errcap.h — the last line a stage printed on stderr during its
 * start-up. When stage 0 fails before its rendezvous, the other stages are
 * told that line as the cause (pg_tcp_tell_failure) instead of waiting for
 * a master that never comes: every start-up check prints its own message,
 * and this keeps the last one without each of them reporting twice. */
#ifndef PG_ERRCAP_H
#define PG_ERRCAP_H

#include <stdio.h>

typedef struct pg_errcap {
    FILE *real;               /* the stderr replaced while capturing; NULL when not capturing */
    FILE *tap;
    char line[1024];          /* the line being written */
    size_t len;
    char last[1024];          /* the last complete non-empty line ("" none) */
} pg_errcap;

/* From here stderr writes straight through to file descriptor 2 (unbuffered,
 * as before) and c keeps its last line. 0, or -1 (nothing changed). */
int pg_errcap_begin(pg_errcap *c);
/* stderr as it was; c->last stays. The tap that stood for stderr stays open
 * (writing through to descriptor 2): a library that kept it may still write. */
void pg_errcap_end(pg_errcap *c);

#endif

/* codegen/base/progress.h — progress of a long pipegen run, on stderr: one line per
 * phase ("pipegen: 60012 layers checked, 0.6 s"), shown once a run has lasted
 * a second on a terminal, or always with PIPEGEN_PROGRESS=1 (logs, tests), and
 * never otherwise, so output that is captured stays byte-stable. The state is
 * one named struct in progress.c. */
#ifndef PG_PROGRESS_H
#define PG_PROGRESS_H

/* Start timing a command (pipegen's main calls it once). */
void pg_progress_start(void);
/* One phase done: printf-style, without "pipegen: " and the time. */
void pg_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

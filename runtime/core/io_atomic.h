/* runtime/core/io_atomic.h — write a file so that readers see either the old
 * contents or the complete new ones, never a torn mix (data files,
 * checkpoints, weights; pipegen gen links it too for the generated files). */
#ifndef PG_IO_ATOMIC_H
#define PG_IO_ATOMIC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The one way every program (the stages, pipegen, pipedata) writes an output
 * file: the n parts one after another to path.tmp.<pid> beside it, fsync,
 * rename over path, fsync the directory. A file-size limit (ulimit -f) makes
 * a write fail with EFBIG instead of killing the process (SIGXFSZ is ignored
 * while the temporary is written). On any failure (ENOSPC, EFBIG, a missing
 * directory) the temporary file is removed, path is left as it was, and -1 is
 * returned with a message naming the file in err. An existing device or pipe
 * (/dev/null, a process substitution) is written in place: a rename would
 * replace the node itself. */
int pg_io_write_atomic(const char *path, const void *const *parts, const size_t *lens, int n,
                       char *err, size_t errlen);

/* pg_io_write_atomic of what fill(f, arg) prints (an SVG, a CSV): rendered in
 * memory first, so a failed fill or write leaves path as it was. fill returns
 * 0, or -1 with its reason in err. */
int pg_io_write_printed(const char *path, int (*fill)(FILE *f, void *arg, char *err, size_t errlen), void *arg,
                        char *err, size_t errlen);

/* Standard output flushed and without a write error (a full disk under `>
 * file`, a file-size limit): 0, or -1 after "PROG: cannot write the standard
 * output: REASON" on stderr. Programs call it before they exit 0. */
int pg_io_stdout_done(const char *prog);

/* A file a program reads or writes, for pg_io_check_distinct. */
typedef struct pg_io_file {
    const char *what;         /* how the user named it: "--save", "-o", "the input" */
    const char *path;         /* NULL or "": not given */
    int output;               /* 1: the program writes it */
} pg_io_file;
/* No two outputs, and no output and input, are one file: by device and inode
 * where both exist (hard links and symbolic links included), else by the
 * real path of the folder and the name. 0, or -1 with e.g. "--save-grads w.st
 * is the same file as --save w.st: each would replace the other" in err. */
int pg_io_check_distinct(const pg_io_file *f, int n, char *err, size_t errlen);

/* The temporary name of path while it is written: "<path>.tmp.<pid>" (n bytes). */
void pg_io_tmp_name(char *tmp, size_t n, const char *path);
/* The first half of pg_io_write_atomic: the parts into path's temporary name
 * (into tmp), fsync'd; the caller renames it over path (or unlinks it). On a
 * failure nothing is left and -1 comes with err. */
int pg_io_write_tmp(const char *path, const void *const *parts, const size_t *lens, int n, char *tmp, size_t tmplen,
                    char *err, size_t errlen);
/* fsync the folder holding path (after renames into it). */
void pg_io_sync_dir_of(const char *path);

/* A file too large to hold in memory, written in pieces the same way: open
 * creates path.tmp.<pid>; write appends (on a failure the temporary is gone
 * and err names path and the reason); commit fsyncs it, renames it over path
 * (signals wait meanwhile) and fsyncs the folder; abort removes it. Every
 * call but open leaves nothing behind on a failure. 0, or -1 with err. */
typedef struct pg_io_stream {
    int fd;
    char *path, *tmp;
} pg_io_stream;
int pg_io_stream_open(pg_io_stream *s, const char *path, char *err, size_t errlen);
int pg_io_stream_write(pg_io_stream *s, const void *p, size_t n, char *err, size_t errlen);
int pg_io_stream_commit(pg_io_stream *s, char *err, size_t errlen);
void pg_io_stream_abort(pg_io_stream *s);

/* Writing a file for the user is never cut short by a signal: between begin
 * and end (nestable) SIGINT, SIGTERM and SIGHUP only take effect at the end,
 * and piperun is told (the PIPE_CONTROL_FD socket it gives each stage: 'W'
 * then 'D') not to kill this process meanwhile. pg_io_write_atomic does this
 * by itself; a caller wraps a whole gather-and-write in it. */
void pg_io_protect_begin(void);
void pg_io_protect_end(void);
/* Tell piperun one byte on PIPE_CONTROL_FD, if it gave one: 'W'/'D' (above),
 * 'P' (this stage fails after a link to a peer ended: its failure may only
 * follow the peer's, so piperun reports another stage's if one fails too). */
void pg_io_tell_launcher(char c);
/* The line a stage prints on stdout before its end-of-run summary (the bubble,
 * the throughput, the sample, the reports) when piperun started it: piperun
 * holds what follows and prints every stage's summary once the run is over,
 * in stage order, so that the stages' last lines do not interleave. */
#define PG_SUMMARY_MARK "\x1e" "pipegen: end of run"
/* Print PG_SUMMARY_MARK, only under piperun (PIPE_CONTROL_FD): a stage run by
 * hand, srun or mpirun prints nothing more. */
void pg_io_summary_begin(void);
/* From a signal handler, on a second SIGINT/SIGTERM: say so and _exit(128 +
 * sig) at once, no checkpoint (a file being written stays a temporary, which
 * the next start removes; the previous file is untouched). */
void pg_io_stop_now(int sig);
/* The stage that message names. */
void pg_io_set_stage(int stage);

/* Open path for reading, refusing anything but a regular file (a FIFO would
 * block the open or the read forever, a device never ends): the open itself
 * does not block (O_NONBLOCK, cleared after the check). fd (and its size in
 * *bytes, if not NULL), or -1 with "cannot open P: ..." / "P is not a
 * regular file (it is a pipe (FIFO))" in err. */
int pg_io_open_regular(const char *path, uint64_t *bytes, char *err, size_t errlen);
/* What kind of file mode is, for messages: "a folder", "a pipe (FIFO)", ... */
const char *pg_io_kind(unsigned mode);

/* Remove DIR/<base>.tmp.<pid> left by writers that died (their pid no longer
 * runs on this host); a live writer's temporary is kept. Returns how many were
 * removed. */
int pg_io_remove_stale_tmp(const char *dir, const char *base);

#endif

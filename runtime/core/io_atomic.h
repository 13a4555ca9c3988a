/* runtime/core/io_atomic.h — write a file so that readers see either the old
 * contents or the complete new ones, never a torn mix (data files,
 * checkpoints, weights; pipegen gen links it too for the generated files). */
#ifndef PG_IO_ATOMIC_H
#define PG_IO_ATOMIC_H

#include <stddef.h>

/* Write the n parts one after another to path.tmp.<pid>, fsync it, rename it
 * over path and fsync the directory. On any failure (ENOSPC, EFBIG, a missing
 * directory) the temporary file is removed, path is left as it was, and -1 is
 * returned with a message naming the file in err. */
int pg_io_write_atomic(const char *path, const void *const *parts, const size_t *lens, int n,
                       char *err, size_t errlen);

/* The temporary name of path while it is written: "<path>.tmp.<pid>" (n bytes). */
void pg_io_tmp_name(char *tmp, size_t n, const char *path);
/* The first half of pg_io_write_atomic: the parts into path's temporary name
 * (into tmp), fsync'd; the caller renames it over path (or unlinks it). On a
 * failure nothing is left and -1 comes with err. */
int pg_io_write_tmp(const char *path, const void *const *parts, const size_t *lens, int n, char *tmp, size_t tmplen,
                    char *err, size_t errlen);
/* fsync the folder holding path (after renames into it). */
void pg_io_sync_dir_of(const char *path);

/* Writing a file for the user is never cut short by a signal: between begin
 * and end (nestable) SIGINT, SIGTERM and SIGHUP only take effect at the end,
 * and piperun is told (the PIPE_CONTROL_FD socket it gives each stage: 'W'
 * then 'D') not to kill this process meanwhile. pg_io_write_atomic does this
 * by itself; a caller wraps a whole gather-and-write in it. */
void pg_io_protect_begin(void);
void pg_io_protect_end(void);

/* Remove DIR/<base>.tmp.<pid> left by writers that died (their pid no longer
 * runs on this host); a live writer's temporary is kept. Returns how many were
 * removed. */
int pg_io_remove_stale_tmp(const char *dir, const char *base);

#endif

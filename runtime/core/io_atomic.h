/* runtime/core/io_atomic.h — internal to the runtime: write a file so that
 * readers see either the old contents or the complete new ones, never a torn
 * mix (data files, checkpoints). */
#ifndef PG_IO_ATOMIC_H
#define PG_IO_ATOMIC_H

#include <stddef.h>

/* Write the n parts one after another to path.tmp.<pid>, fsync it, rename it
 * over path and fsync the directory. On any failure (ENOSPC, EFBIG, a missing
 * directory) the temporary file is removed, path is left as it was, and -1 is
 * returned with a message naming the file in err. */
int pg_io_write_atomic(const char *path, const void *const *parts, const size_t *lens, int n,
                       char *err, size_t errlen);

#endif

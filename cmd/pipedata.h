/* cmd/pipedata.h — what the converters of pipedata share (cmd/pipedata.c is
 * the driver and `text`/`bytes`, cmd/pd_npy.c `npy`, cmd/pd_csv.c `csv`). */
#ifndef PG_PIPEDATA_H
#define PG_PIPEDATA_H

#include <stddef.h>
#include <stdint.h>

/* The whole of a regular file (a FIFO is refused, not waited on); NULL after
 * printing why. */
unsigned char *pd_slurp(const char *path, size_t *len);
/* Write a .pgd file atomically: 0, or 1 after printing why. */
int pd_write(const char *path, int dtype, int rank, const uint64_t *dims, const void *data);
/* "f32[1000, 64]" into buf ("[1000, 64]" for dtype -1). */
const char *pd_shape(char *buf, size_t n, int dtype, int rank, const uint64_t *dims);

/* `pipedata npy IN.npy -o OUT.pgd [--dtype f32|i32]` (dtype: NULL for the
 * default: floats f32, integers i32). 0, 1 (a bad file, printed). */
int pd_npy(const char *in, const char *out, const char *dtype);
/* `pipedata csv IN.csv -o X.pgd [--target COLUMN --targets-out Y.pgd]
 * [--target-dtype i32|f32]`. 0, 1 (a bad file, printed). */
int pd_csv(const char *in, const char *out, const char *target, const char *targets_out, const char *target_dtype);

#endif

/* codegen/gen/gen_files.h — one generation of files into a folder (pipegen gen
 * -o DIR), all or nothing: every file is first written in full beside its
 * place (<name>.tmp.<pid>, fsync'd); only when all are written are they
 * renamed into place, so a failure (a full disk) leaves the previous
 * generation as it was. DIR/pipegen-files.txt lists what pipegen wrote there;
 * files of the previous generation that the new one does not write (the
 * stage<k>.c of a model that had more stages) are removed, and only those:
 * any other file in DIR is left alone. */
#ifndef PG_GEN_FILES_H
#define PG_GEN_FILES_H

#include <stddef.h>
#include "diag.h"

#define PG_GEN_LIST "pipegen-files.txt"

typedef struct pg_gen_file {
    char name[300]; /* a plain file name in DIR: no '/' */
    char *text;
    size_t len;
} pg_gen_file;

/* Write the n files into dir (created if missing, with its missing parents).
 * 0, or -1 after reporting at loc what failed and that the previous
 * generation is intact. Prints one line to stdout naming what it wrote, then
 * the stale files it removed. */
int pg_gen_files_write(const char *dir, const pg_gen_file *f, int n, pg_diag *d, pg_loc loc);

/* mkdir -p dir: every missing folder of the path made (0777 less the umask).
 * 0, or -1 with the component that failed and why in err. */
int pg_gen_mkdirs(const char *dir, char *err, size_t errlen);

#endif

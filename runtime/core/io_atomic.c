/* runtime/core/io_atomic.c — tmp file + fsync + rename + fsync(dir); see io_atomic.h. */
#include "io_atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* fsync the directory holding path, so the rename itself survives a crash. */
static void sync_dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY);
    if (fd < 0) return;
    fsync(fd); /* best effort: some file systems refuse fsync on directories */
    close(fd);
}

int pg_io_write_atomic(const char *path, const void *const *parts, const size_t *lens, int n,
                       char *err, size_t errlen)
{
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!tmp) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: cannot create %s: %s", path, tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    const char *what = "write";
    int e = 0;
    for (int i = 0; i < n && !e; i++) {
        const char *p = parts[i];
        size_t left = lens[i];
        while (left) {
            ssize_t w = write(fd, p, left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                e = w < 0 ? errno : ENOSPC;
                break;
            }
            p += w;
            left -= (size_t)w;
        }
    }
    if (!e && fsync(fd) != 0) { e = errno; what = "fsync"; }
    if (close(fd) != 0 && !e) { e = errno; what = "close"; }
    if (!e && rename(tmp, path) != 0) { e = errno; what = "rename"; }
    if (e) {
        unlink(tmp);
        snprintf(err, errlen, "cannot write %s: %s failed: %s (the previous file, if any, is untouched)", path,
                 what, strerror(e));
        free(tmp);
        return -1;
    }
    free(tmp);
    sync_dir_of(path);
    return 0;
}

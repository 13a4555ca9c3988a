/* runtime/core/io_atomic.c — tmp file + fsync + rename + fsync(dir); writes
 * protected from signals; stale temporaries of dead writers; see io_atomic.h. */
#include "io_atomic.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

void pg_io_tmp_name(char *tmp, size_t n, const char *path)
{
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
}

/* ---- protection from signals while a user's file is written -------------- */

static const int protected_sigs[3] = {SIGINT, SIGTERM, SIGHUP};

/* The one piece of state a signal handler touches, and the saved actions. */
static struct {
    int depth;                      /* nesting of begin/end */
    volatile sig_atomic_t deferred; /* a signal that arrived meanwhile, 0 if none */
    struct sigaction old[3];
    int ctl;                        /* piperun's control socket; -1 none */
} prot = {.ctl = -1};

static char stop_msg[160] = "a second interrupt: stopping at once (no checkpoint)\n";

void pg_io_set_stage(int stage)
{
    snprintf(stop_msg, sizeof stop_msg,
             "stage %d: a second interrupt: stopping at once (no checkpoint; a file being written is left as it "
             "was)\n", stage);
}

void pg_io_stop_now(int sig)
{
    ssize_t w = write(2, stop_msg, strlen(stop_msg));
    (void)w;
    _exit(128 + sig);
}

static void on_deferred(int sig)
{
    if (prot.deferred)
        pg_io_stop_now(sig);
    prot.deferred = sig;
}

/* Tell piperun 'W' (writing; looks up its control socket) or 'D' (done), when
 * it gave us one. */
static void tell_launcher(char c)
{
    if (c == 'W' || prot.ctl < 0) {
        const char *v = getenv("PIPE_CONTROL_FD");
        struct stat st;
        char *end;
        long fd = v ? strtol(v, &end, 10) : -1;
        prot.ctl = v && *v && !*end && fd > 2 && fd < 1024 && fstat((int)fd, &st) == 0 && S_ISSOCK(st.st_mode)
                       ? (int)fd : -1;
    }
    if (prot.ctl >= 0 && send(prot.ctl, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
        prot.ctl = -1; /* piperun is gone or not listening: nobody to tell */
}

void pg_io_tell_launcher(char c)
{
    tell_launcher(c);
}

void pg_io_summary_begin(void)
{
    if (prot.ctl < 0)
        tell_launcher('D'); /* looks up the socket; 'D' (done writing) changes nothing */
    if (prot.ctl >= 0) {
        printf("%s\n", PG_SUMMARY_MARK);
        fflush(stdout);
    }
}

void pg_io_protect_begin(void)
{
    if (prot.depth++ > 0)
        return;
    tell_launcher('W');
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_deferred;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < 3; i++)
        sigaction(protected_sigs[i], &sa, &prot.old[i]);
}

void pg_io_protect_end(void)
{
    if (prot.depth <= 0 || --prot.depth > 0)
        return;
    for (int i = 0; i < 3; i++)
        sigaction(protected_sigs[i], &prot.old[i], NULL);
    tell_launcher('D');
    int sig = prot.deferred;
    prot.deferred = 0;
    if (sig)
        raise(sig); /* now, with what the process had before: stop, or record (--save-on-exit) */
}

/* ---- reading only regular files ---------------------------------------------- */

const char *pg_io_kind(unsigned mode)
{
    return S_ISDIR(mode) ? "a folder" : S_ISFIFO(mode) ? "a pipe (FIFO)" : S_ISSOCK(mode) ? "a socket"
         : S_ISCHR(mode) ? "a character device" : S_ISBLK(mode) ? "a block device" : "not a regular file";
}

int pg_io_open_regular(const char *path, uint64_t *bytes, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s is not a regular file (it is %s)", path, pg_io_kind(st.st_mode));
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (bytes)
        *bytes = (uint64_t)st.st_size;
    return fd;
}

/* ---- stale temporaries ------------------------------------------------------- */

int pg_io_remove_stale_tmp(const char *dir, const char *base)
{
    DIR *dd = opendir(dir);
    if (!dd)
        return 0;
    size_t bl = strlen(base);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(dd))) {
        const char *n = e->d_name;
        if (strncmp(n, base, bl) != 0 || strncmp(n + bl, ".tmp.", 5) != 0)
            continue;
        char *end;
        long pid = strtol(n + bl + 5, &end, 10);
        if (*end || end == n + bl + 5 || pid <= 0 || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* its writer may still be running */
        char p[4096];
        if (snprintf(p, sizeof p, "%s/%s", dir, n) < (int)sizeof p && unlink(p) == 0)
            removed++;
    }
    closedir(dd);
    return removed;
}

/* fsync the directory holding path, so the rename itself survives a crash. */
void pg_io_sync_dir_of(const char *path)
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

/* n bytes at p to fd, whatever write() takes at a time: 0, or the errno
 * (ENOSPC for a write that took nothing). */
static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : ENOSPC;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int pg_io_write_tmp(const char *path, const void *const *parts, const size_t *lens, int n, char *tmp, size_t tmplen,
                    char *err, size_t errlen)
{
    pg_io_tmp_name(tmp, tmplen, path);
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) { /* a rename would replace /dev/null itself */
        snprintf(err, errlen, "cannot write %s: it is %s, not a regular file (it is left as it is)", path,
                 pg_io_kind(st.st_mode));
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: cannot create %s: %s", path, tmp, strerror(errno));
        return -1;
    }
    /* over ulimit -f a write fails with EFBIG (reported below) instead of the
     * default SIGXFSZ killing us with the temporary left behind */
    struct sigaction ign, old_xfsz;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGXFSZ, &ign, &old_xfsz);
    const char *what = "write";
    int e = 0;
    for (int i = 0; i < n && !e; i++)
        e = write_all(fd, parts[i], lens[i]);
    if (!e && fsync(fd) != 0) { e = errno; what = "fsync"; }
    if (close(fd) != 0 && !e) { e = errno; what = "close"; }
    sigaction(SIGXFSZ, &old_xfsz, NULL);
    if (e) {
        unlink(tmp);
        snprintf(err, errlen, "cannot write %s: %s failed: %s (the previous file, if any, is untouched)", path,
                 what, strerror(e));
        return -1;
    }
    return 0;
}

/* A device or a pipe (/dev/null, a process substitution) is written in
 * place: it has no contents to tear, and a rename would replace the node. */
static int write_in_place(const char *path, const void *const *parts, const size_t *lens, int n, char *err,
                          size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    int e = 0;
    for (int i = 0; i < n && !e; i++) {
        const char *p = parts[i];
        size_t left = lens[i];
        while (left && !e) {
            ssize_t w = write(fd, p, left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) e = w < 0 ? errno : ENOSPC;
            else { p += w; left -= (size_t)w; }
        }
    }
    if (close(fd) != 0 && !e) e = errno;
    if (e)
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
    return e ? -1 : 0;
}

int pg_io_write_atomic(const char *path, const void *const *parts, const size_t *lens, int n,
                       char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        return write_in_place(path, parts, lens, n, err, errlen);
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!tmp) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    pg_io_protect_begin();
    int rc = pg_io_write_tmp(path, parts, lens, n, tmp, tl, err, errlen);
    if (rc == 0 && rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot write %s: rename failed: %s (the previous file, if any, is untouched)", path,
                 strerror(errno));
        unlink(tmp);
        rc = -1;
    }
    if (rc == 0)
        pg_io_sync_dir_of(path);
    free(tmp);
    pg_io_protect_end();
    return rc;
}

int pg_io_write_printed(const char *path, int (*fill)(FILE *f, void *arg, char *err, size_t errlen), void *arg,
                        char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        snprintf(err, errlen, "cannot write %s: out of memory", path);
        return -1;
    }
    err[0] = 0;
    int bad = fill(f, arg, err, errlen) != 0;
    bad |= fclose(f) != 0; /* the text is complete (or the memory ran out) */
    if (bad) {
        if (!err[0])
            snprintf(err, errlen, "cannot write %s: out of memory", path);
        free(text);
        return -1;
    }
    const void *parts[1] = {text};
    int rc = pg_io_write_atomic(path, parts, &len, 1, err, errlen);
    free(text);
    return rc;
}

int pg_io_stdout_done(const char *prog)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return 0;
    int e = errno; /* 0: the failed write was an earlier one (line-buffered output): its errno is gone */
    fprintf(stderr, "%s: cannot write the standard output: %s%s\n", prog,
            e ? strerror(e) : "a write to it failed (a full disk, or a file-size limit?)",
            e == EFBIG ? " (the file-size limit, ulimit -f)" : "");
    return -1;
}

/* ---- outputs and inputs that are one file ----------------------------------- */

typedef struct file_id {
    int exists;
    dev_t dev;
    ino_t ino;
    char canon[4096 + 256];   /* the folder's real path / the name (when it does not exist) */
} file_id;

static void identify(const char *path, file_id *id)
{
    struct stat st;
    memset(id, 0, sizeof *id);
    if (stat(path, &st) == 0) {
        id->exists = 1;
        id->dev = st.st_dev;
        id->ino = st.st_ino;
        return;
    }
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    char dir[4096], real[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (realpath(dir, real))
        snprintf(id->canon, sizeof id->canon, "%s/%s", real, base);
    else
        snprintf(id->canon, sizeof id->canon, "%s", path); /* a folder that does not exist: the name as given */
}

int pg_io_check_distinct(const pg_io_file *f, int n, char *err, size_t errlen)
{
    file_id *id = calloc((size_t)(n > 0 ? n : 1), sizeof *id);
    if (!id) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (f[i].path && f[i].path[0])
            identify(f[i].path, &id[i]);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        for (int j = 0; j < i && !rc; j++) {
            if (!f[i].path || !f[i].path[0] || !f[j].path || !f[j].path[0] || (!f[i].output && !f[j].output))
                continue;
            int same = id[i].exists && id[j].exists ? id[i].dev == id[j].dev && id[i].ino == id[j].ino
                       : !id[i].exists && !id[j].exists && !strcmp(id[i].canon, id[j].canon);
            if (!same)
                continue;
            const pg_io_file *o = f[i].output ? &f[i] : &f[j], *x = o == &f[i] ? &f[j] : &f[i];
            snprintf(err, errlen, "%s %s is the same file as %s %s: %s", o->what, o->path, x->what, x->path,
                     x->output ? "each would replace the other; give each its own file"
                               : "writing it would destroy what is read from it; give the output another name");
            rc = -1;
        }
    free(id);
    return rc;
}

/* ---- a file written in pieces ------------------------------------------------ */

int pg_io_stream_open(pg_io_stream *s, const char *path, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    size_t tl = strlen(path) + 32;
    if (!(s->path = strdup(path)) || !(s->tmp = malloc(tl))) {
        free(s->path);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    pg_io_tmp_name(s->tmp, tl, path);
    s->fd = open(s->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (s->fd < 0) {
        snprintf(err, errlen, "cannot write %s: cannot create %s: %s", path, s->tmp, strerror(errno));
        free(s->path);
        free(s->tmp);
        memset(s, 0, sizeof *s);
        s->fd = -1;
        return -1;
    }
    return 0;
}

int pg_io_stream_write(pg_io_stream *s, const void *p, size_t n, char *err, size_t errlen)
{
    int e = write_all(s->fd, p, n);
    if (!e)
        return 0;
    snprintf(err, errlen, "cannot write %s: write failed: %s (the previous file, if any, is untouched)", s->path,
             strerror(e));
    pg_io_stream_abort(s);
    return -1;
}

int pg_io_stream_commit(pg_io_stream *s, char *err, size_t errlen)
{
    const char *what = "fsync";
    int e = fsync(s->fd) != 0 ? errno : 0;
    if (close(s->fd) != 0 && !e) {
        e = errno;
        what = "close";
    }
    s->fd = -1;
    pg_io_protect_begin();
    if (!e && rename(s->tmp, s->path) != 0) {
        e = errno;
        what = "rename";
    }
    if (!e)
        pg_io_sync_dir_of(s->path);
    pg_io_protect_end();
    if (e)
        snprintf(err, errlen, "cannot write %s: %s failed: %s (the previous file, if any, is untouched)", s->path, what,
                 strerror(e));
    pg_io_stream_abort(s);
    return e ? -1 : 0;
}

void pg_io_stream_abort(pg_io_stream *s)
{
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    if (s->tmp)
        unlink(s->tmp); /* after a commit the name is gone: nothing happens */
    free(s->tmp);
    free(s->path);
    s->tmp = s->path = NULL;
}

/* runtime/core/metrics.c — `--metrics FILE.jsonl`: every log line and every
 * evaluation as one JSON object a line, for plotting while a run goes on.
 * The stage that logs (the loss stage of replica 0) writes it: a fresh run
 * starts the file anew, a resumed one appends (both say so). Each line is
 * appended with one write() to a file opened O_APPEND, so a reader sees whole
 * lines; a write that fails half way is cut back, and the run stops with the
 * file named (a full disk must not go unnoticed until the end). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stage_run.h"

int pg_metrics_open(pg_run *r, int64_t start)
{
    const pg_stage_desc *d = r->d;
    r->metrics_fd = -1;
    if (!r->opt.metrics || !d->has_loss || r->replica != 0)
        return 0;
    int resumed = r->opt.resume != NULL;
    struct stat st;
    long long had = stat(r->opt.metrics, &st) == 0 && S_ISREG(st.st_mode) ? (long long)st.st_size : -1;
    int fd = open(r->opt.metrics, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (resumed ? 0 : O_TRUNC), 0644);
    if (fd < 0) {
        fprintf(stderr, "stage %d: --metrics %s: cannot open it: %s\n", d->stage, r->opt.metrics, strerror(errno));
        return 1;
    }
    r->metrics_fd = fd;
    if (resumed)
        printf("metrics: appending to %s from step %" PRId64 " (resumed%s)\n", r->opt.metrics, start + 1,
               had > 0 ? "; the lines of the run it continues stay before them" : "");
    else if (had > 0)
        printf("metrics: %s starts anew (a fresh run; --resume appends)\n", r->opt.metrics);
    fflush(stdout);
    return 0;
}

int pg_metrics_line(pg_run *r, const char *json)
{
    if (r->metrics_fd < 0)
        return 0;
    size_t n = strlen(json);
    char *line = malloc(n + 2);
    if (!line) {
        fprintf(stderr, "stage %d: --metrics %s: out of memory\n", r->d->stage, r->opt.metrics);
        return 1;
    }
    memcpy(line, json, n);
    line[n++] = '\n';
    off_t before = lseek(r->metrics_fd, 0, SEEK_END);
    ssize_t w;
    do
        w = write(r->metrics_fd, line, n);
    while (w < 0 && errno == EINTR);
    int e = w < 0 ? errno : (size_t)w < n ? ENOSPC : 0;
    free(line);
    if (!e)
        return 0;
    int torn = w > 0 && (before < 0 || ftruncate(r->metrics_fd, before) != 0); /* cut a half line back */
    fprintf(stderr, "stage %d: --metrics %s: cannot append a line: %s (%s)\n", r->d->stage, r->opt.metrics, strerror(e),
            torn ? "a part of it may remain at the end" : "the lines before it are intact");
    return 1;
}

void pg_metrics_close(pg_run *r)
{
    if (r->metrics_fd >= 0)
        close(r->metrics_fd);
    r->metrics_fd = -1;
}

/* runtime/core/pytool.c — running one of pipegen's Python tools (tools/NAME.py)
 * without a shell, in the Python that `tools/deps.sh hf` makes: pipegen's
 * import and export (tools/hf.py), pipedata's tokenizer and a stage's
 * --tokenizer (tools/tokens.py). The formats are Python's (transformers'
 * configs, safetensors' shards, tokenizers' tokenizer.json); what runs them
 * stays C. See pytool.h. */
#include "pytool.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PG_TOOLS_DIR
#define PG_TOOLS_DIR "tools"
#endif

const char *pg_py_python(char *buf, size_t n, char *err, size_t errlen)
{
    const char *p = getenv("PIPEGEN_PYTHON");
    if (p && *p)
        return p;
    const char *venv = getenv("PIPEGEN_VENV"), *home = getenv("HOME");
    if (venv && *venv)
        snprintf(buf, n, "%s/bin/python3", venv);
    else
        snprintf(buf, n, "%s/.cache/pipegen/venv/bin/python3", home && *home ? home : "/root");
    if (access(buf, X_OK) == 0)
        return buf;
    snprintf(err, errlen, "no Python with transformers and tokenizers at %s: run `tools/deps.sh hf` once (it makes "
             "that virtual environment), or set PIPEGEN_PYTHON", buf);
    return NULL;
}

/* append k bytes to the growing *out */
static int grow(char **out, size_t *len, size_t *cap, const char *b, size_t k)
{
    if (*len + k + 1 > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (*len + k + 1 > c)
            c *= 2;
        char *nb = realloc(*out, c);
        if (!nb)
            return -1;
        *out = nb, *cap = c;
    }
    memcpy(*out + *len, b, k);
    *len += k;
    (*out)[*len] = '\0';
    return 0;
}

int pg_py_run(const char *script, const char *const *args, const char *in, size_t inlen, int echo, char **out,
              size_t *outlen, char *err, size_t errlen)
{
    char py[1024], path[1024];
    const char *python = pg_py_python(py, sizeof py, err, errlen), *tools = getenv("PIPEGEN_TOOLS");
    *out = NULL;
    *outlen = 0;
    if (!python)
        return -1;
    snprintf(path, sizeof path, "%s/%s", tools && *tools ? tools : PG_TOOLS_DIR, script);
    if (access(path, R_OK) != 0) {
        snprintf(err, errlen, "%s: %s (set PIPEGEN_TOOLS to the folder holding pipegen's %s)", path, strerror(errno),
                 script);
        return -1;
    }
    const char *argv[PG_PY_MAX_ARGS + 3] = {python, path};
    int n = 2;
    for (int i = 0; args[i] && n < PG_PY_MAX_ARGS + 2; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    int to[2] = {-1, -1}, from[2] = {-1, -1};
    if (pipe(to) != 0 || pipe(from) != 0) {
        snprintf(err, errlen, "cannot start %s: %s", python, strerror(errno));
        for (int i = 0; i < 2; i++)
            if (to[i] >= 0) close(to[i]);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "cannot start %s: %s", python, strerror(errno));
        close(to[0]), close(to[1]), close(from[0]), close(from[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        close(to[0]), close(to[1]), close(from[0]), close(from[1]);
        execv(python, (char *const *)argv);
        fprintf(stderr, "cannot run %s: %s\n", python, strerror(errno));
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    /* write its input while reading its output: neither pipe may fill up and stall the other */
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    size_t sent = 0, cap = 0;
    int rc = 0, wfd = to[1];
    if (!in || !inlen)
        close(wfd), wfd = -1;
    for (int open_out = 1; open_out && !rc;) {
        struct pollfd pf[2] = {{from[0], POLLIN, 0}, {wfd, POLLOUT, 0}};
        if (poll(pf, wfd >= 0 ? 2 : 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            rc = -1;
            break;
        }
        if (wfd >= 0 && (pf[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t k = write(wfd, in + sent, inlen - sent);
            if (k > 0)
                sent += (size_t)k;
            if (k < 0 && errno != EINTR && errno != EAGAIN)
                sent = inlen; /* it stopped reading: its exit status says why */
            if (sent == inlen)
                close(wfd), wfd = -1;
        }
        if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            char chunk[4096];
            ssize_t k = read(from[0], chunk, sizeof chunk);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                open_out = 0;
                continue;
            }
            if (echo)
                fwrite(chunk, 1, (size_t)k, stdout);
            if (grow(out, outlen, &cap, chunk, (size_t)k))
                rc = -1;
        }
    }
    if (wfd >= 0)
        close(wfd);
    close(from[0]);
    signal(SIGPIPE, old);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            st = 0x100; /* reads as exit status 1 */
            break;
        }
    if (rc) {
        snprintf(err, errlen, "out of memory reading what %s printed", script);
        return -1;
    }
    if (!*out && grow(out, outlen, &cap, "", 0)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) != 127)
        return WEXITSTATUS(st);
    if (WIFEXITED(st))
        snprintf(err, errlen, "%s could not run %s", python, path);
    else
        snprintf(err, errlen, "%s %s died by signal %d", python, path, WTERMSIG(st));
    free(*out);
    *out = NULL;
    return -1;
}

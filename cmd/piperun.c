/* cmd/piperun.c — start the stage binaries of one pipeline on this machine.
 *
 *   piperun DIR [--] [stage args...]
 *
 * Runs DIR/stage0, DIR/stage1, ... (consecutive numbers) with PIPE_RANK,
 * PIPE_WORLD and PIPE_MASTER set (a free loopback port unless PIPE_MASTER is
 * already set) and PIPE_LOCAL_WORLD (the stage count: they share this host's
 * cores), relays every line they print prefixed "[stage k] ", forwards
 * SIGINT/SIGTERM, and when one stage fails stops the others (SIGTERM, then
 * SIGKILL after 5 s, but never while a stage says on its control socket,
 * PIPE_CONTROL_FD, that it writes a file for the user) and exits with the
 * first failure's status (128+signal for a stage killed by a signal). Each
 * stage runs in its own process group, so a stop reaches whatever it started,
 * and dies with piperun (PR_SET_PDEATHSIG). What a stage prints after its
 * end-of-run mark (PG_SUMMARY_MARK: its bubble, the throughput, the sample) is
 * held and printed once the run is over, every stage's in stage order.
 * A standalone program: not part of the runtime library. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io_atomic.h" /* PG_SUMMARY_MARK */
#include "pg_version.h"

#define MAX_STAGES 256
#define LINE_MAX_BYTES 65536
#define STOP_GRACE_S 5.0
#define HELD_MAX_BYTES (1 << 20) /* a stage's held end-of-run summary; beyond it, relayed as it comes */

/* Written by the signal handlers only: the signal to forward and a self-pipe
 * that wakes poll(). The one piece of state a handler may touch. */
static struct {
    volatile sig_atomic_t forward; /* SIGINT or SIGTERM (SIGHUP counts as it) received, 0 if none */
    volatile sig_atomic_t nforward; /* how many of them so far */
    volatile sig_atomic_t tstp;    /* SIGTSTP (Ctrl-Z): suspend the whole run */
    volatile sig_atomic_t cont;    /* SIGCONT: resume the stages */
    int wake_w;                    /* write end of the self-pipe */
} sigstate = {0, 0, 0, 0, -1};

static void on_signal(int sig)
{
    int e = errno;
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) { /* the terminal closed: stop the run as SIGTERM does */
        sigstate.forward = sig == SIGHUP ? SIGTERM : sig;
        sigstate.nforward++;
    }
    if (sig == SIGTSTP) sigstate.tstp = 1;
    if (sig == SIGCONT) sigstate.cont = 1;
    if (sigstate.wake_w >= 0) {
        char c = 0;
        ssize_t w = write(sigstate.wake_w, &c, 1);
        (void)w;
    }
    errno = e;
}

typedef struct stream {
    int fd;                 /* read end of the child's stdout/stderr pipe; -1 at EOF */
    int out;                /* 1 or 2: where its lines go */
    char buf[LINE_MAX_BYTES];
    size_t len;
    int holding;            /* its end-of-run mark came: its lines go to held */
    char *held;             /* those lines, prefixed, until the run is over */
    size_t held_len;
} stream;

typedef struct stage {
    pid_t pid;              /* 0 once reaped */
    int status;             /* wait status once reaped */
    stream s[2];
    int ctl;                /* our end of its control socket (PIPE_CONTROL_FD); -1 when closed */
    int writing;            /* it said 'W' (writing a file for the user) and not yet 'D' */
    int peer_lost;          /* it said 'P': its failure follows a link to a peer ending */
    int killed;             /* we sent it SIGKILL (kill_idle): it did not stop in time */
} stage;

typedef struct piperun {
    int n;
    stage *st;              /* [n] */
    int first_fail;         /* stage index of the first failure, -1 if none */
    int exit_code;
    double kill_at;         /* when to SIGKILL the survivors; 0: not stopping */
    int hard;               /* a second interrupt: kill even a stage writing a file */
    int follower;           /* the first stage that failed after a peer's link ended, -1 if none */
    int follower_status;
    double hold_until;      /* until then a primary failure may still come (follower set) */
} piperun;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* our own output is gone: keep running the stages */
        p += w;
        n -= (size_t)w;
    }
}

/* The run's layout, set once in main before any stage starts: P stages x D
 * replicas, process k = replica x P + stage. */
static struct {
    int P, D;
} layout = {1, 1};

/* Process k as messages name it: "stage 2", or "stage 2 replica 1" with replicas. */
static const char *proc_name(int k, char *b, size_t bl)
{
    if (layout.D > 1)
        snprintf(b, bl, "stage %d replica %d", k % layout.P, k / layout.P);
    else
        snprintf(b, bl, "stage %d", k);
    return b;
}

/* Keep the line (prefixed as emit_line writes it) in s->held; -1 when it
 * does not fit, and then what s held is written out and holding ends. */
static int hold_line(stream *s, const char *pre, size_t pl, const char *p, size_t n, int add_newline)
{
    size_t need = s->held_len + pl + n + 1;
    char *h = need <= HELD_MAX_BYTES ? realloc(s->held, need) : NULL;
    if (!h) {
        write_all(s->out, s->held ? s->held : "", s->held_len);
        free(s->held);
        s->held = NULL;
        s->held_len = 0;
        s->holding = 0;
        return -1;
    }
    s->held = h;
    memcpy(h + s->held_len, pre, pl);
    memcpy(h + s->held_len + pl, p, n);
    s->held_len += pl + n;
    if (add_newline)
        h[s->held_len++] = '\n';
    return 0;
}

static void emit_line(int k, stream *s, const char *p, size_t n, int add_newline)
{
    int out = s->out;
    size_t ml = strlen(PG_SUMMARY_MARK);
    if (out == 1 && n >= ml && n <= ml + 1 && memcmp(p, PG_SUMMARY_MARK, ml) == 0 && (n == ml || p[ml] == '\n')) {
        s->holding = 1; /* the stage's end-of-run summary follows */
        return;
    }
    char pre[48], nm[40];
    int pl = snprintf(pre, sizeof pre, "[%s] ", proc_name(k, nm, sizeof nm));
    /* A stage names itself ("stage k: ...", with replicas also "stage k of
     * replica r: ...") so that its lines say who wrote them when it runs
     * alone; here the prefix says so already. */
    char own[2][48];
    snprintf(own[0], sizeof own[0], "stage %d: ", k % layout.P);
    snprintf(own[1], sizeof own[1], "stage %d of replica %d: ", k % layout.P, k / layout.P);
    for (int i = 0; i < 2; i++) {
        size_t ol = strlen(own[i]);
        if (n >= ol && memcmp(p, own[i], ol) == 0) {
            p += ol;
            n -= ol;
            break;
        }
    }
    if (s->holding && hold_line(s, pre, (size_t)pl, p, n, add_newline) == 0)
        return;
    /* one write per line where it fits, so lines from stages do not interleave */
    char tmp[LINE_MAX_BYTES + 48];
    if (n + (size_t)pl + 1 <= sizeof tmp) {
        memcpy(tmp, pre, (size_t)pl);
        memcpy(tmp + pl, p, n);
        size_t t = (size_t)pl + n;
        if (add_newline) tmp[t++] = '\n';
        write_all(out, tmp, t);
        return;
    }
    write_all(out, pre, (size_t)pl);
    write_all(out, p, n);
    if (add_newline) write_all(out, "\n", 1);
}

/* Emit every complete line in s; at EOF (or a full buffer) the rest too. */
static void relay_lines(int k, stream *s, int final)
{
    size_t start = 0;
    for (size_t i = 0; i < s->len; i++)
        if (s->buf[i] == '\n') {
            emit_line(k, s, s->buf + start, i + 1 - start, 0);
            start = i + 1;
        }
    if (start < s->len && (final || (start == 0 && s->len == sizeof s->buf))) {
        emit_line(k, s, s->buf + start, s->len - start, 1);
        start = s->len;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
}

static void read_stream(int k, stream *s)
{
    ssize_t r = read(s->fd, s->buf + s->len, sizeof s->buf - s->len);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (r <= 0) {
        relay_lines(k, s, 1);
        close(s->fd);
        s->fd = -1;
        return;
    }
    s->len += (size_t)r;
    relay_lines(k, s, 0);
}

static void signal_all(piperun *pr, int sig)
{
    for (int k = 0; k < pr->n; k++)
        if (pr->st[k].pid > 0) kill(-pr->st[k].pid, sig); /* its process group */
}

/* After the grace period: SIGKILL every stage that is not writing a file for
 * the user (one that is gets it once it says it is done). */
static void kill_idle(piperun *pr)
{
    for (int k = 0; k < pr->n; k++)
        if (pr->st[k].pid > 0 && (!pr->st[k].writing || pr->hard)) {
            kill(-pr->st[k].pid, SIGKILL);
            pr->st[k].killed = 1;
        }
}

/* A stage's control messages: 'W' it starts writing a file for the user
 * (runtime/core/io_atomic.c), 'D' it is done; at EOF it is done too. */
static void read_control(stage *st)
{
    char b[64];
    ssize_t r = read(st->ctl, b, sizeof b);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (r <= 0) {
        close(st->ctl);
        st->ctl = -1;
        st->writing = 0;
        return;
    }
    for (ssize_t i = 0; i < r; i++)
        if (b[i] == 'W' || b[i] == 'D') st->writing = b[i] == 'W';
        else if (b[i] == 'P') st->peer_lost = 1;
}

static void start_stopping(piperun *pr)
{
    if (pr->kill_at == 0) {
        signal_all(pr, SIGTERM);
        pr->kill_at = now_s() + STOP_GRACE_S;
    }
}

/* Report stage k's failure (wait status) as the run's and stop the rest. */
static void report_failure(piperun *pr, int k, int status)
{
    pr->first_fail = k;
    char msg[160], nm[40];
    int ml;
    if (WIFEXITED(status)) {
        pr->exit_code = WEXITSTATUS(status);
        ml = snprintf(msg, sizeof msg, "piperun: %s exited with status %d\n", proc_name(k, nm, sizeof nm), pr->exit_code);
    } else if (pr->st[k].killed && WTERMSIG(status) == SIGKILL && sigstate.forward) {
        /* the user's interrupt stopped the run; we killed a stage that was slow
         * to follow it (stopped, or busy): the interrupt is the run's status */
        pr->exit_code = 128 + sigstate.forward;
        ml = snprintf(msg, sizeof msg, "piperun: %s did not stop after the interrupt: killed\n", proc_name(k, nm, sizeof nm));
    } else {
        pr->exit_code = 128 + WTERMSIG(status);
        ml = snprintf(msg, sizeof msg, "piperun: %s killed by signal %d\n", proc_name(k, nm, sizeof nm), WTERMSIG(status));
    }
    write_all(2, msg, (size_t)ml);
    if (WIFEXITED(status) && (pr->exit_code == 128 + SIGTERM || pr->exit_code == 128 + SIGINT)) {
        /* it stopped for a signal of its own (one process signalled alone):
         * with --save-on-exit the others stop after the same step by their
         * agreement, and a SIGTERM from us now would be their second signal
         * (stop at once, no checkpoint). They get the grace period first. */
        if (pr->kill_at == 0)
            pr->kill_at = now_s() + STOP_GRACE_S;
    } else {
        start_stopping(pr);
    }
}

/* A failure that followed a link to a peer ending ('P') is held back for a
 * moment: the peer that failed first (the cause) is reported instead when it
 * fails too. */
#define HOLD_S 2.0

static void reap(piperun *pr)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) break;
        for (int k = 0; k < pr->n; k++) {
            if (pr->st[k].pid != pid) continue;
            pr->st[k].pid = 0;
            pr->st[k].status = status;
            /* the rest of its group (whatever it started) goes with it */
            kill(-pid, SIGKILL);
            int failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            /* what it said before it exited is in its control socket already */
            while (pr->st[k].ctl >= 0) {
                char c;
                if (recv(pr->st[k].ctl, &c, 1, MSG_PEEK | MSG_DONTWAIT) < 0) break; /* nothing waiting */
                read_control(&pr->st[k]); /* its bytes, or EOF (then closed) */
            }
            if (!failed || pr->first_fail >= 0) continue;
            if (pr->st[k].peer_lost && pr->kill_at == 0) { /* maybe only a consequence: wait for the cause */
                if (pr->follower < 0) {
                    pr->follower = k;
                    pr->follower_status = status;
                    pr->hold_until = now_s() + HOLD_S;
                }
                continue;
            }
            report_failure(pr, k, status);
        }
    }
    if (pr->first_fail < 0 && pr->follower >= 0) {
        int any = 0;
        for (int k = 0; k < pr->n; k++) any |= pr->st[k].pid > 0;
        if (!any || now_s() >= pr->hold_until) report_failure(pr, pr->follower, pr->follower_status);
    }
}

static int alive(const piperun *pr)
{
    for (int k = 0; k < pr->n; k++)
        if (pr->st[k].pid > 0) return 1;
    return 0;
}

static int open_streams(const piperun *pr)
{
    int c = 0;
    for (int k = 0; k < pr->n; k++)
        for (int j = 0; j < 2; j++) c += pr->st[k].s[j].fd >= 0;
    return c;
}

/* pipe() with both ends close-on-exec (and optionally non-blocking). */
static int pipe_cloexec(int fds[2], int nonblock)
{
    if (pipe(fds) != 0) return -1;
    for (int i = 0; i < 2; i++) {
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
        if (nonblock) fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: piperun [--dp D] DIR [--] [stage options...]\n"
               "       piperun --help | --version\n"
               "\n"
               "Runs DIR/stage0, DIR/stage1, ... (consecutive numbers) as one pipeline on this\n"
               "machine and passes every stage the same stage options. The stage options\n"
               "(--steps, --data, --save, --checkpoint-dir, --trace, ...) are listed by\n"
               "`DIR/stage0 --help` and in docs/runtime.md; launching: docs/launch.md.\n"
               "--dp D runs D data-parallel replicas of the pipeline: P x D processes of the P\n"
               "stage binaries, rank = replica x P + stage, each given --dp D; replica r trains\n"
               "on its contiguous batch / D rows of every step and the gradients are summed\n"
               "over the replicas (docs/launch.md, \"Data-parallel replicas\"). Their lines are\n"
               "prefixed \"[stage k replica r] \".\n"
               "\n"
               "Environment of each stage: PIPE_RANK=k, PIPE_WORLD=N, PIPE_MASTER (a free\n"
               "loopback port, or PIPE_MASTER as set for piperun), PIPE_LOCAL_WORLD=N,\n"
               "PIPE_RUN_ID (a random id per run, or PIPE_RUN_ID as set for piperun: a\n"
               "stage of another run that reaches this run's master is refused),\n"
               "PIPE_RUN_TOKEN (64 random hex digits per run, the run's secret: only a process\n"
               "holding it joins; PIPE_RUN_TOKEN or PIPE_RUN_TOKEN_FILE as set for piperun is\n"
               "passed on instead).\n"
               "Threads: a stage's default --threads is the cores of this machine divided by\n"
               "PIPE_LOCAL_WORLD (at least 1), so the stages share the cores (under Slurm,\n"
               "SLURM_CPUS_PER_TASK divided likewise; else OMP_NUM_THREADS when set);\n"
               "--threads T gives every stage T threads instead.\n"
               "Output: every line a stage prints is relayed prefixed \"[stage k] \" (stdout to\n"
               "stdout, stderr to stderr); a line that starts \"stage k: \" or \"stage k of\n"
               "replica r: \" (the stage naming itself) loses those words, so the name is not\n"
               "said twice.\n"
               "Signals: SIGINT and SIGTERM (Ctrl-C) are forwarded to every stage (with\n"
               "--save-on-exit they finish the step and write a checkpoint first); SIGHUP\n"
               "(the terminal closed) is taken as SIGTERM and forwarded as one. When a\n"
               "stage fails, the others get SIGTERM. A stage still running %.0f s after a\n"
               "forwarded signal or a SIGTERM is killed (SIGKILL), except while it writes a\n"
               "file for the user (--save, --save-grads, a checkpoint, a trace or profile):\n"
               "that is never cut short, and the signal takes effect once the file is written.\n"
               "A second SIGINT or SIGTERM stops every stage at once (no checkpoint), writing\n"
               "or not. SIGTSTP (Ctrl-Z) stops every stage and then piperun; SIGCONT (fg)\n"
               "continues them all (a stage's --timeout does not count the stopped time).\n"
               "Each stage runs in its own process group and dies with piperun.\n"
               "Exit status: 0 when every stage exits 0; otherwise the first failing stage's\n"
               "status (its exit code, or 128+N when killed by signal N), where a stage that\n"
               "failed because a link to a peer ended gives way, for %.0f s, to a stage that\n"
               "fails for its own reason; 1 when piperun itself fails (cannot start a stage,\n"
               "too small a ulimit -n); 2 on a usage error.\n",
            STOP_GRACE_S, HOLD_S);
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &sl) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* Enough open files for n stages (ulimit -n): piperun holds 3 per stage
 * (output, errors, control) and briefly 6 while it starts one; each stage
 * needs a connection to every other stage and a few files (runtime/core/
 * guard.c). The soft limit is raised up to the hard one if it must (the
 * stages inherit it); 0, or -1 after saying what to do. */
static int check_files(int n)
{
    rlim_t need = (rlim_t)3 * (rlim_t)n + 16, stage_need = (rlim_t)n + 24;
    if (stage_need > need) need = stage_need;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
        return 0;
    if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) {
        rl.rlim_cur = need;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
            return 0;
    }
    fprintf(stderr, "piperun: %d stages need about %llu open files but ulimit -n allows %llu: raise it (ulimit -n %llu)\n",
            n, (unsigned long long)need, (unsigned long long)rl.rlim_cur, (unsigned long long)need);
    return -1;
}

/* In the child: set up the environment and exec; never returns. */
static void exec_stage(const char *path, int k, int n, const char *master, int out_w, int err_w, int ctl_w,
                       pid_t parent, char **extra, int nextra)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127); /* piperun died before prctl took effect */
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    dup2(out_w, 1);
    dup2(err_w, 2);
    char v[32];
    snprintf(v, sizeof v, "%d", k);
    setenv("PIPE_RANK", v, 1);
    snprintf(v, sizeof v, "%d", n);
    setenv("PIPE_WORLD", v, 1);
    setenv("PIPE_MASTER", master, 1);
    setenv("PIPE_LOCAL_WORLD", v, 1); /* every stage is on this host: they share its cores */
    if (ctl_w > 2 && fcntl(ctl_w, F_SETFD, 0) == 0) { /* kept across exec: the stage reports its writes */
        snprintf(v, sizeof v, "%d", ctl_w);
        setenv("PIPE_CONTROL_FD", v, 1);
    } else {
        unsetenv("PIPE_CONTROL_FD");
    }
    char **argv = calloc((size_t)nextra + 2, sizeof *argv);
    if (!argv) _exit(127);
    argv[0] = (char *)path;
    for (int i = 0; i < nextra; i++) argv[i + 1] = extra[i];
    execv(path, argv);
    fprintf(stderr, "piperun: cannot run %s: %s\n", path, strerror(errno));
    _exit(127);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("piperun (pipegen " PIPEGEN_VERSION ")\n");
        return 0;
    }
    int ai = 1;
    const char *dp = NULL;
    if (!strcmp(argv[1], "--dp")) {
        char *end = NULL;
        long v = argc > 2 ? strtol(argv[2], &end, 10) : 0;
        if (argc < 3 || end == argv[2] || *end || v < 1 || v > MAX_STAGES) {
            fprintf(stderr, "piperun: --dp wants a replica count in 1..%d, not '%s'\n", MAX_STAGES,
                    argc > 2 ? argv[2] : "");
            return 2;
        }
        layout.D = (int)v;
        dp = argv[2];
        ai = 3;
    }
    if (ai >= argc || argv[ai][0] == '-') {
        if (ai < argc)
            fprintf(stderr, "piperun: unknown option %s\n", argv[ai]);
        usage(stderr);
        return 2;
    }
    const char *dir = argv[ai++];
    if (ai < argc && !strcmp(argv[ai], "--")) ai++;
    /* the stage options, with --dp D first when given (every stage checks it against its world) */
    int nextra = argc - ai + (dp ? 2 : 0);
    char **extra = calloc((size_t)nextra + 1, sizeof *extra);
    if (!extra) {
        fprintf(stderr, "piperun: out of memory\n");
        return 1;
    }
    if (dp) {
        extra[0] = "--dp";
        extra[1] = (char *)dp;
    }
    for (int i = ai; i < argc; i++)
        extra[i - ai + (dp ? 2 : 0)] = argv[i];

    piperun pr = {.n = 0, .st = NULL, .first_fail = -1, .exit_code = 0, .kill_at = 0, .follower = -1};
    char (*paths)[PATH_MAX] = calloc(MAX_STAGES, PATH_MAX);
    if (!paths) {
        fprintf(stderr, "piperun: out of memory\n");
        return 1;
    }
    for (int k = 0; k < MAX_STAGES; k++) {
        struct stat sb;
        snprintf(paths[k], PATH_MAX, "%s/stage%d", dir, k);
        if (stat(paths[k], &sb) != 0) break;
        if (!S_ISREG(sb.st_mode) || access(paths[k], X_OK) != 0) {
            fprintf(stderr, "piperun: %s is not an executable file\n", paths[k]);
            free(paths);
            free(extra);
            return 2;
        }
        pr.n++;
    }
    if (pr.n == 0) {
        fprintf(stderr, "piperun: no stage binaries in %s (expected %s/stage0, %s/stage1, ...)\n", dir, dir, dir);
        free(paths);
        free(extra);
        return 2;
    }
    layout.P = pr.n;
    if (pr.n * layout.D > MAX_STAGES) {
        fprintf(stderr, "piperun: %d stages x %d replicas are more than %d processes\n", pr.n, layout.D, MAX_STAGES);
        free(paths);
        free(extra);
        return 2;
    }
    pr.n *= layout.D; /* processes: rank = replica x P + stage */

    char master[300];
    const char *pm = getenv("PIPE_MASTER");
    if (pm && *pm) {
        snprintf(master, sizeof master, "%s", pm);
    } else {
        int port = free_port();
        if (port < 0) {
            fprintf(stderr, "piperun: cannot find a free loopback port: %s (set PIPE_MASTER)\n", strerror(errno));
            free(paths);
            free(extra);
            return 1;
        }
        snprintf(master, sizeof master, "127.0.0.1:%d", port);
    }

    /* the run's identity: every stage's hello carries it, so a stage of
     * another run knocking at this run's master is refused without harm */
    const char *rid = getenv("PIPE_RUN_ID");
    if (!rid || !*rid) {
        unsigned char rb[12];
        char hex[32];
        if (getrandom(rb, sizeof rb, 0) != (ssize_t)sizeof rb) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            for (size_t i = 0; i < sizeof rb; i++)
                rb[i] = (unsigned char)(((uint64_t)ts.tv_nsec * 2654435761u + (uint64_t)getpid() * 40503u) >> (i % 8 * 8));
        }
        for (size_t i = 0; i < sizeof rb; i++) snprintf(hex + 2 * i, 3, "%02x", rb[i]);
        setenv("PIPE_RUN_ID", hex, 1);
    }
    /* the run's secret (docs/launch.md, "Security: the run token"): only a process holding it joins
     * the run; one given to piperun (PIPE_RUN_TOKEN or PIPE_RUN_TOKEN_FILE)
     * is passed on as it is */
    const char *tok = getenv("PIPE_RUN_TOKEN"), *tokf = getenv("PIPE_RUN_TOKEN_FILE");
    if ((!tok || !*tok) && (!tokf || !*tokf)) {
        unsigned char tb[32];
        char hex[2 * sizeof tb + 1];
        size_t got = 0;
        while (got < sizeof tb) {
            ssize_t g = getrandom(tb + got, sizeof tb - got, 0);
            if (g < 0 && errno == EINTR) continue;
            if (g <= 0) break;
            got += (size_t)g;
        }
        if (got < sizeof tb) { /* no guessable stand-in: a token is a secret or nothing */
            fprintf(stderr, "piperun: cannot make a run token: getrandom: %s (set PIPE_RUN_TOKEN)\n", strerror(errno));
            free(paths);
            free(extra);
            return 1;
        }
        for (size_t i = 0; i < sizeof tb; i++) snprintf(hex + 2 * i, 3, "%02x", tb[i]);
        setenv("PIPE_RUN_TOKEN", hex, 1);
        memset(tb, 0, sizeof tb);
        memset(hex, 0, sizeof hex);
    }
    if (check_files(pr.n) != 0) {
        free(paths);
        free(extra);
        return 1;
    }

    int wake[2];
    if (pipe_cloexec(wake, 1) != 0) {
        fprintf(stderr, "piperun: pipe: %s\n", strerror(errno));
        free(paths);
        free(extra);
        return 1;
    }
    sigstate.wake_w = wake[1];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    sigaction(SIGTSTP, &sa, NULL);
    sigaction(SIGCONT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    pr.st = calloc((size_t)pr.n, sizeof *pr.st);
    if (!pr.st) {
        fprintf(stderr, "piperun: out of memory\n");
        free(paths);
        free(extra);
        return 1;
    }
    for (int k = 0; k < pr.n; k++) {
        pr.st[k].ctl = -1;
        for (int j = 0; j < 2; j++) {
            pr.st[k].s[j].fd = -1;
            pr.st[k].s[j].out = j + 1;
        }
    }
    pid_t self = getpid();
    for (int k = 0; k < pr.n; k++) {
        int po[2], pe[2], pc[2];
        if (pipe_cloexec(po, 0) != 0) {
            fprintf(stderr, "piperun: cannot start stage %d: pipe: %s\n", k, strerror(errno));
            pr.exit_code = 1;
            break;
        }
        if (pipe_cloexec(pe, 0) != 0) {
            fprintf(stderr, "piperun: cannot start stage %d: pipe: %s\n", k, strerror(errno));
            close(po[0]); close(po[1]); pr.exit_code = 1; break;
        }
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pc) != 0) {
            fprintf(stderr, "piperun: cannot start stage %d: socketpair: %s\n", k, strerror(errno));
            close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
            pr.exit_code = 1;
            break;
        }
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "piperun: cannot start stage %d: %s\n", k, strerror(errno));
            close(po[0]); close(po[1]); close(pe[0]); close(pe[1]); close(pc[0]); close(pc[1]);
            pr.exit_code = 1;
            break;
        }
        if (pid == 0) exec_stage(paths[k % layout.P], k, pr.n, master, po[1], pe[1], pc[1], self, extra, nextra);
        setpgid(pid, pid); /* also here, so the group exists before we might signal it */
        close(po[1]);
        close(pe[1]);
        close(pc[1]);
        fcntl(pc[0], F_SETFL, fcntl(pc[0], F_GETFL) | O_NONBLOCK);
        pr.st[k].pid = pid;
        pr.st[k].s[0].fd = po[0];
        pr.st[k].s[1].fd = pe[0];
        pr.st[k].ctl = pc[0];
    }
    free(paths);
    free(extra);
    if (pr.exit_code != 0) {
        pr.first_fail = pr.n; /* not a stage: we failed to start them all */
        start_stopping(&pr);
    }

    double drain_until = 0; /* after the last child: bounded wait for leftover output */
    struct pollfd *pf = calloc((size_t)pr.n * 3 + 1, sizeof *pf);
    int (*who)[2] = calloc((size_t)pr.n * 3 + 1, sizeof *who);
    if (!pf || !who) {
        fprintf(stderr, "piperun: out of memory\n");
        signal_all(&pr, SIGKILL);
        free(pf);
        free(who);
        free(pr.st);
        return 1;
    }
    int handled = 0; /* interrupts forwarded so far */
    for (;;) {
        int sig = sigstate.forward;
        if (sig && sigstate.nforward != handled) {
            int second = handled > 0;
            handled = sigstate.nforward;
            signal_all(&pr, sig);
            if (second && !pr.hard) {
                /* the user insists: every stage stops now, a checkpoint or not */
                const char *m = "piperun: second interrupt: stopping every stage at once (no checkpoint)\n";
                write_all(2, m, strlen(m));
                pr.hard = 1;
                pr.kill_at = now_s() + 1.0;
            } else if (pr.kill_at == 0) {
                pr.kill_at = now_s() + STOP_GRACE_S;
            }
        }
        if (sigstate.tstp) {
            /* Ctrl-Z: stop every stage, then ourselves; on SIGCONT all go on together */
            sigstate.tstp = 0;
            signal_all(&pr, SIGSTOP);
            raise(SIGSTOP); /* stopped here until continued (SIGTSTP would be dropped in an orphaned process group) */
            sigstate.cont = 1;
        }
        if (sigstate.cont) {
            sigstate.cont = 0;
            signal_all(&pr, SIGCONT);
        }
        reap(&pr);
        if (pr.kill_at && now_s() >= pr.kill_at) kill_idle(&pr);
        if (!alive(&pr)) {
            if (drain_until == 0) drain_until = now_s() + 1.0;
            if (open_streams(&pr) == 0 || now_s() >= drain_until) break;
        }
        int np = 0;
        pf[np].fd = wake[0];
        pf[np].events = POLLIN;
        np++;
        for (int k = 0; k < pr.n; k++)
            for (int j = 0; j < 3; j++) {
                int fd = j < 2 ? pr.st[k].s[j].fd : pr.st[k].ctl;
                if (fd >= 0) {
                    pf[np].fd = fd;
                    pf[np].events = POLLIN;
                    who[np][0] = k;
                    who[np][1] = j;
                    np++;
                }
            }
        double next = 1.0;
        if (pr.kill_at) next = pr.kill_at - now_s();
        if (pr.follower >= 0 && pr.first_fail < 0 && pr.hold_until - now_s() < next) next = pr.hold_until - now_s();
        if (drain_until) next = drain_until - now_s();
        if (next > 1.0) next = 1.0;
        if (next < 0) next = 0;
        int r = poll(pf, (nfds_t)np, (int)(next * 1000) + 1);
        if (r < 0 && errno != EINTR) break;
        if (r <= 0) continue;
        if (pf[0].revents) {
            char b[64];
            while (read(wake[0], b, sizeof b) > 0) {}
        }
        for (int i = 1; i < np; i++)
            if (pf[i].revents && who[i][1] == 2)
                read_control(&pr.st[who[i][0]]);
            else if (pf[i].revents)
                read_stream(who[i][0], &pr.st[who[i][0]].s[who[i][1]]);
    }
    for (int k = 0; k < pr.n; k++) {
        for (int j = 0; j < 2; j++)
            if (pr.st[k].s[j].fd >= 0) {
                relay_lines(k, &pr.st[k].s[j], 1);
                close(pr.st[k].s[j].fd);
            }
        if (pr.st[k].ctl >= 0) close(pr.st[k].ctl);
    }
    for (int k = 0; k < pr.n; k++) { /* the end-of-run summaries, once, in stage (rank) order */
        stream *s = &pr.st[k].s[0];
        write_all(s->out, s->held ? s->held : "", s->held_len);
        free(s->held);
    }
    free(pf);
    free(who);
    free(pr.st);
    close(wake[0]);
    close(wake[1]);
    return pr.exit_code;
}

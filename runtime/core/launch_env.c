/* runtime/core/launch_env.c — where this process sits in the pipeline, read from
 * the environment of whatever launched it (piperun, Slurm, Open MPI, PMI, or by
 * hand). See pg_net.h for the variables and their order of preference. */
#include "pg_net.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Parse a decimal non-negative integer that fills the whole string. */
static int parse_uint(const char *s, long *out)
{
    if (!s || !*s || strlen(s) > 9) return -1;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9') return -1;
    *out = strtol(s, NULL, 10);
    return 0;
}

/* ---- Slurm's compressed host lists ------------------------------------------
 * list  := name (',' name)*         name  := (text | '[' range (',' range)* ']')+
 * range := number ['-' number]      text  := [A-Za-z0-9._-]+
 * A range's numbers are printed with the width of its first ("01-10": 01..10);
 * with several bracket groups in a name the last varies fastest. */
#define HL_MAX_HOSTS 10000000L
#define HL_MAX_GROUPS 16

static int hl_fail(const char *list, const char *at, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "'%s' at character %d: %s", list, (int)(at - list) + 1, what);
    return -1;
}

/* One range "lo[-hi]" at *p (advanced past it): its bounds and print width. */
static int hl_range(const char *list, const char **p, long *lo, long *hi, int *width, char *err, size_t errlen)
{
    const char *s = *p;
    long v[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        const char *d = s;
        while (*s >= '0' && *s <= '9') s++;
        if (s == d)
            return hl_fail(list, s, k ? "expected a number after '-'" : "expected a number in '[...]'", err, errlen);
        if (s - d > 9)
            return hl_fail(list, d, "number too long (at most 9 digits)", err, errlen);
        v[k] = strtol(d, NULL, 10);
        if (k == 0) *width = (int)(s - d);
        if (k == 0 && *s != '-') { v[1] = v[0]; break; }
        if (k == 0) s++;
    }
    if (v[1] < v[0])
        return hl_fail(list, *p, "range goes down (the first number must not exceed the second)", err, errlen);
    *lo = v[0];
    *hi = v[1];
    *p = s;
    return 0;
}

/* The bracket group at p ('[' ... ']'): how many numbers it names, and the
 * idx-th of them (value and width) when idx >= 0. Returns the count, -1 bad. */
static long hl_group(const char *list, const char *p, long idx, long *val, int *width, const char **end, char *err,
                     size_t errlen)
{
    long count = 0;
    p++; /* '[' */
    for (;;) {
        long lo, hi;
        int w;
        if (hl_range(list, &p, &lo, &hi, &w, err, errlen))
            return -1;
        if (idx >= count && idx <= count + (hi - lo)) {
            *val = lo + (idx - count);
            *width = w;
        }
        count += hi - lo + 1;
        if (count > HL_MAX_HOSTS)
            return hl_fail(list, p, "names too many hosts", err, errlen);
        if (*p == ']') break;
        if (*p != ',')
            return hl_fail(list, p, *p ? "expected ',', '-' or ']' in '[...]'" : "'[' is not closed", err, errlen);
        p++;
    }
    *end = p + 1;
    return count;
}

static int hl_namechar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_';
}

long pg_hostlist_nth(const char *list, long n, char *host, size_t hostlen, char *err, size_t errlen)
{
    long total = 0;
    const char *p = list;
    if (hostlen) host[0] = 0;
    if (!*list) {
        snprintf(err, errlen, "the host list is empty");
        return -1;
    }
    for (;;) { /* one name per turn */
        const char *start = p, *groups[HL_MAX_GROUPS];
        long sizes[HL_MAX_GROUPS], count = 1;
        int ng = 0;
        while (*p && *p != ',') {
            if (*p == '[') {
                long v;
                int w;
                if (ng == HL_MAX_GROUPS)
                    return hl_fail(list, p, "too many '[...]' groups in one name", err, errlen);
                groups[ng] = p;
                sizes[ng] = hl_group(list, p, -1, &v, &w, &p, err, errlen);
                if (sizes[ng] < 0)
                    return -1;
                count *= sizes[ng++];
                if (count > HL_MAX_HOSTS)
                    return hl_fail(list, start, "names too many hosts", err, errlen);
            } else if (*p == ']') {
                return hl_fail(list, p, "']' without '['", err, errlen);
            } else if (!hl_namechar(*p)) {
                return hl_fail(list, p, "not a host name character (letters, digits, '-', '.', '_')", err, errlen);
            } else {
                p++;
            }
        }
        if (p == start)
            return hl_fail(list, p, "empty host name", err, errlen);
        if (n >= total && n < total + count) { /* write this name's (n - total)-th host */
            long idx[HL_MAX_GROUPS], rest = n - total;
            for (int g = ng - 1; g >= 0; g--) {
                idx[g] = rest % sizes[g];
                rest /= sizes[g];
            }
            size_t len = 0;
            int g = 0;
            for (const char *q = start; q < p;) {
                char piece[32];
                size_t pl;
                const char *from = piece;
                if (*q == '[') {
                    long v = 0;
                    int w = 1;
                    hl_group(list, groups[g], idx[g], &v, &w, &q, err, errlen);
                    g++;
                    pl = (size_t)snprintf(piece, sizeof piece, "%0*ld", w, v);
                } else {
                    from = q;
                    pl = 1;
                    q++;
                }
                if (len + pl >= hostlen)
                    return hl_fail(list, start, "host name too long", err, errlen);
                memcpy(host + len, from, pl);
                len += pl;
            }
            host[len] = 0;
        }
        total += count;
        if (total > HL_MAX_HOSTS)
            return hl_fail(list, start, "names too many hosts", err, errlen);
        if (!*p)
            return total;
        p++; /* ',' */
        if (!*p)
            return hl_fail(list, p, "empty host name after ','", err, errlen);
    }
}

/* "host:port" -> host, port. The transport is IPv4 (tcp.c): an IPv6 address
 * ("[::1]:29500", "::1:29500") is refused here, saying so, rather than
 * failing later as a name that "does not resolve". */
static int parse_master(const char *var, const char *v, pg_launch *l, char *err, size_t errlen)
{
    const char *colon = strrchr(v, ':');
    if (!colon || colon == v) {
        snprintf(err, errlen, "%s=%s: expected host:port (e.g. 10.0.0.1:29500)", var, v);
        return -1;
    }
    const char *h = v;
    size_t hl = (size_t)(colon - v);
    if (h[0] == '[' || memchr(h, ':', hl)) {
        snprintf(err, errlen, "%s=%s: IPv6 addresses are not supported (the stages talk IPv4): name stage 0's host "
                 "by an IPv4 address or a host name that has one (e.g. 127.0.0.1:29500)", var, v);
        return -1;
    }
    if (hl == 0 || hl >= sizeof l->master_host) {
        snprintf(err, errlen, "%s=%s: host name is empty or too long", var, v);
        return -1;
    }
    long port;
    if (parse_uint(colon + 1, &port) || port < 1 || port > 65535) {
        snprintf(err, errlen, "%s=%s: port must be a number in 1..65535", var, v);
        return -1;
    }
    memcpy(l->master_host, h, hl);
    l->master_host[hl] = 0;
    l->master_port = (int)port;
    return 0;
}

/* The run's identity from the launcher that gave the rank (pg_net.h). */
static void run_identity(pg_launch *l)
{
    static const char *const by_source[][3] = {
        {"PIPE_RANK", "PIPE_RUN_ID", NULL},
        {"SLURM_PROCID", "SLURM_JOB_ID", "SLURM_STEP_ID"},
        {"OMPI_COMM_WORLD_RANK", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"},
        {"PMI_RANK", "PMIX_NAMESPACE", NULL},
    };
    l->run_id[0] = 0;
    l->run_id_source = NULL;
    for (size_t i = 0; i < sizeof by_source / sizeof by_source[0]; i++) {
        if (strcmp(l->source, by_source[i][0]) != 0)
            continue;
        const char *a = getenv(by_source[i][1]), *b = by_source[i][2] ? getenv(by_source[i][2]) : NULL;
        if (a && *a && !strcmp(by_source[i][0], "SLURM_PROCID")) { /* one job step: job id and step id */
            snprintf(l->run_id, sizeof l->run_id, "slurm-%s.%s", a, b && *b ? b : "0");
            l->run_id_source = by_source[i][1];
        } else if (a && *a) {
            snprintf(l->run_id, sizeof l->run_id, "%s", a);
            l->run_id_source = by_source[i][1];
        } else if (b && *b) {
            snprintf(l->run_id, sizeof l->run_id, "%s", b);
            l->run_id_source = by_source[i][2];
        }
    }
}

/* The run token (pg_net.h): PIPE_RUN_TOKEN, or the first line of the file
 * PIPE_RUN_TOKEN_FILE names. A short token could be guessed from one
 * exchange seen on the network; a file others can read is no secret. */
#define TOKEN_MIN 16
static int run_token(pg_launch *l, char *err, size_t errlen)
{
    const char *v = getenv("PIPE_RUN_TOKEN"), *f = getenv("PIPE_RUN_TOKEN_FILE");
    if (v && f) {
        snprintf(err, errlen, "both PIPE_RUN_TOKEN and PIPE_RUN_TOKEN_FILE are set: set one of them");
        return -1;
    }
    if (v) {
        size_t n = strlen(v);
        if (n < TOKEN_MIN || n >= sizeof l->token) {
            snprintf(err, errlen, "PIPE_RUN_TOKEN holds %zu bytes: a run token has %d to %zu (piperun makes 64 "
                     "random hex digits; by hand, e.g. `od -An -N32 -tx1 /dev/urandom | tr -d ' \\n'`)",
                     n, TOKEN_MIN, sizeof l->token - 1);
            return -1;
        }
        memcpy(l->token, v, n + 1);
        l->token_len = n;
        l->token_source = "PIPE_RUN_TOKEN";
        return 0;
    }
    if (!f)
        return 0;
    int fd = open(f, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO must not block us */
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "PIPE_RUN_TOKEN_FILE=%s: cannot open it: %s", f, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077)) {
        if (S_ISREG(st.st_mode))
            snprintf(err, errlen, "PIPE_RUN_TOKEN_FILE=%s: the file can be read by others (mode %04o): chmod 600 %s",
                     f, (unsigned)(st.st_mode & 07777), f);
        else
            snprintf(err, errlen, "PIPE_RUN_TOKEN_FILE=%s: not a regular file", f);
        close(fd);
        return -1;
    }
    char b[sizeof l->token + 1];
    ssize_t r = read(fd, b, sizeof b - 1);
    close(fd);
    if (r < 0) {
        snprintf(err, errlen, "PIPE_RUN_TOKEN_FILE=%s: cannot read it: %s", f, strerror(errno));
        return -1;
    }
    size_t n = 0;
    while (n < (size_t)r && b[n] != '\n' && b[n] != '\r') n++; /* the first line */
    if (memchr(b, 0, n) || n < TOKEN_MIN || n >= sizeof l->token) {
        snprintf(err, errlen, "PIPE_RUN_TOKEN_FILE=%s: its first line %s: a run token has %d to %zu bytes", f,
                 memchr(b, 0, n) ? "holds a NUL byte" : n < TOKEN_MIN ? "is too short" : "is too long", TOKEN_MIN,
                 sizeof l->token - 1);
        return -1;
    }
    memcpy(l->token, b, n);
    l->token[n] = 0;
    l->token_len = n;
    l->token_source = "PIPE_RUN_TOKEN_FILE";
    return 0;
}

/* A number variable that may be unset (*out untouched, 0) or must parse (-1, err). */
static int env_uint(const char *var, long lo, long *out, char *err, size_t errlen)
{
    const char *v = getenv(var);
    if (!v) return 0;
    long x;
    if (parse_uint(v, &x) || x < lo) {
        snprintf(err, errlen, "%s=%s: expected a number >= %ld", var, v, lo);
        return -1;
    }
    *out = x;
    return 1;
}

/* How many processes of this run share this host, from the launcher that gave
 * the rank (l->local_world 0 when it does not say). */
static int local_world(pg_launch *l, char *err, size_t errlen)
{
    static const char *const by_source[][3] = {
        {"PIPE_RANK", "PIPE_LOCAL_WORLD", NULL},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", NULL},
        {"PMI_RANK", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS_PER_NODE", NULL},
    };
    for (size_t i = 0; i < sizeof by_source / sizeof by_source[0]; i++) {
        if (strcmp(l->source, by_source[i][0]) != 0) continue;
        for (int k = 1; k < 3 && by_source[i][k]; k++) {
            long v;
            int got = env_uint(by_source[i][k], 1, &v, err, errlen);
            if (got < 0) return -1;
            if (got) {
                l->local_world = v < l->world ? (int)v : l->world;
                l->local_source = by_source[i][k];
                return 0;
            }
        }
    }
    if (!strcmp(l->source, "SLURM_PROCID")) { /* a step on one node: every task is here */
        long nodes;
        int got = env_uint("SLURM_STEP_NUM_NODES", 1, &nodes, err, errlen);
        if (got < 0) return -1;
        if (got && nodes == 1) {
            l->local_world = l->world;
            l->local_source = "SLURM_STEP_NUM_NODES";
        }
    }
    return 0;
}

/* The master under Slurm: the node list's first host (loopback when every
 * process is on this host) and a port derived from the job id. 1 when set,
 * 0 when Slurm says nothing, -1 on a bad variable. srun's tasks read their
 * step's list and job.step; an MPI launch inside an allocation reads the
 * allocation's list and the job alone (mpirun's own host runs outside any
 * step, its remote daemons inside one: only the job is the same for all). */
static int slurm_master(pg_launch *l, int spans, char *err, size_t errlen)
{
    int srun = !strcmp(l->source, "SLURM_PROCID");
    const char *var = srun ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
    const char *list = getenv(var);
    if (!list && srun) list = getenv(var = "SLURM_JOB_NODELIST");
    long job = 0, step = 0;
    if (!list)
        return 0;
    int got = env_uint("SLURM_JOB_ID", 0, &job, err, errlen);
    if (got <= 0) /* a node list without a job id is not Slurm's */
        return got;
    if (srun && env_uint("SLURM_STEP_ID", 0, &step, err, errlen) < 0)
        return -1;
    char first[sizeof l->master_host], why[256];
    long hosts = pg_hostlist_nth(list, 0, first, sizeof first, why, sizeof why);
    if (hosts < 0) {
        snprintf(err, errlen, "%s: %s", var, why);
        return -1;
    }
    if (spans == 0 || (spans < 0 && hosts == 1))
        snprintf(l->master_host, sizeof l->master_host, "127.0.0.1");
    else
        snprintf(l->master_host, sizeof l->master_host, "%s", first);
    /* 20000..39999: below Linux's ephemeral ports (32768 up) for most jobs,
     * and two steps of one job running at once get two ports */
    l->master_port = 20000 + (int)((job * 8 + step % 8) % 20000);
    l->master_source = var;
    return 1;
}

int pg_launch_from_env(pg_launch *l, char *err, size_t errlen)
{
    static const char *const pairs[][2] = {
        {"PIPE_RANK", "PIPE_WORLD"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"PMI_RANK", "PMI_SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS"}, /* last: mpirun's ranks in an allocation inherit SLURM_PROCID=0 */
    };
    memset(l, 0, sizeof *l);
    l->rank = 0;
    l->world = 1;
    l->replica = 0;
    l->replicas = 1;
    l->source = "default";
    l->world_source = "default";
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const char *rv = getenv(pairs[i][0]), *wv = getenv(pairs[i][1]);
        if (!rv && !wv) continue;
        if (!rv || !wv) {
            snprintf(err, errlen, "%s is set but %s is not: set both", rv ? pairs[i][0] : pairs[i][1],
                     rv ? pairs[i][1] : pairs[i][0]);
            return -1;
        }
        long r, w;
        if (parse_uint(rv, &r)) {
            snprintf(err, errlen, "%s=%s: expected a non-negative number", pairs[i][0], rv);
            return -1;
        }
        if (parse_uint(wv, &w) || w < 1) {
            snprintf(err, errlen, "%s=%s: expected a number >= 1", pairs[i][1], wv);
            return -1;
        }
        if (r >= w) {
            snprintf(err, errlen, "%s=%ld but %s=%ld: rank must be < world", pairs[i][0], r,
                     pairs[i][1], w);
            return -1;
        }
        l->rank = (int)r;
        l->world = (int)w;
        l->source = pairs[i][0];
        l->world_source = pairs[i][1];
        for (size_t k = i + 1; k < sizeof pairs / sizeof pairs[0] && !l->ignored[0]; k++) {
            const char *o = getenv(pairs[k][0]); /* say what was passed over when it differs */
            if (o && strcmp(o, rv) != 0)
                snprintf(l->ignored, sizeof l->ignored, "%s=%.40s", pairs[k][0], o);
        }
        break;
    }
    run_identity(l);
    if (run_token(l, err, errlen) || local_world(l, err, errlen))
        return -1;
    /* Do the processes span several hosts? 1 yes, 0 no, -1 nobody says. */
    int spans = l->world == 1 ? 0 : l->local_world > 0 ? l->local_world < l->world : -1;
    snprintf(l->master_host, sizeof l->master_host, "127.0.0.1");
    l->master_port = 29500;
    l->master_source = "default";
    const char *pm = getenv("PIPE_MASTER");
    if (pm) {
        l->master_source = "PIPE_MASTER";
        return parse_master("PIPE_MASTER", pm, l, err, errlen);
    }
    const char *ma = getenv("MASTER_ADDR"), *mp = getenv("MASTER_PORT");
    if (ma) {
        if (!*ma || strlen(ma) >= sizeof l->master_host) {
            snprintf(err, errlen, "MASTER_ADDR=%s: host name is empty or too long", ma);
            return -1;
        }
        snprintf(l->master_host, sizeof l->master_host, "%s", ma);
        l->master_source = "MASTER_ADDR";
    }
    if (mp) {
        long port;
        if (parse_uint(mp, &port) || port < 1 || port > 65535) {
            snprintf(err, errlen, "MASTER_PORT=%s: port must be a number in 1..65535", mp);
            return -1;
        }
        l->master_port = (int)port;
        if (!ma) l->master_source = "MASTER_PORT";
    }
    if (ma)
        return 0;
    int sm = slurm_master(l, spans, err, errlen);
    if (sm < 0)
        return -1;
    if (sm > 0 && mp) /* MASTER_PORT still names the port */
        l->master_port = (int)strtol(mp, NULL, 10);
    if (sm == 0 && spans == 1) {
        snprintf(err, errlen,
                 "the %d processes run on several hosts (%s=%d of %s=%d) and nothing names the master: set "
                 "PIPE_MASTER=host:port to rank 0's host and a free port (or MASTER_ADDR and MASTER_PORT) in "
                 "every process's environment",
                 l->world, l->local_source, l->local_world, l->world_source, l->world);
        return -1;
    }
    return 0;
}

int pg_launch_threads(const pg_launch *l, int requested, char *why, size_t whylen, char *err, size_t errlen)
{
    if (requested > 0) {
        snprintf(why, whylen, "--threads");
        return requested;
    }
    long v;
    int got = env_uint("SLURM_CPUS_PER_TASK", 1, &v, err, errlen);
    if (got < 0) return -1;
    if (got && !strcmp(l->source, "PIPE_RANK") && l->local_world > 1) { /* piperun as one Slurm task */
        snprintf(why, whylen, "SLURM_CPUS_PER_TASK=%ld / %d processes on this host, %s", v, l->local_world,
                 l->local_source);
        v /= l->local_world;
        return v < 1 ? 1 : v > 1024 ? 1024 : (int)v;
    }
    if (got) {
        snprintf(why, whylen, "SLURM_CPUS_PER_TASK");
        return v > 1024 ? 1024 : (int)v;
    }
    const char *omp = getenv("OMP_NUM_THREADS");
    if (omp) { /* "4" or a nested list "4,2": the first level is ours */
        char first[16];
        size_t n = strcspn(omp, ",");
        if (n < sizeof first) {
            memcpy(first, omp, n);
            first[n] = 0;
        }
        if (n >= sizeof first || parse_uint(first, &v) || v < 1) {
            snprintf(err, errlen, "OMP_NUM_THREADS=%s: expected a number >= 1", omp);
            return -1;
        }
        snprintf(why, whylen, "OMP_NUM_THREADS");
        return v > 1024 ? 1024 : (int)v;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    int local = l->local_world > 0 ? l->local_world : 1;
    long t = cores / local;
    if (l->local_world > 0)
        snprintf(why, whylen, "%ld cores / %d processes on this host, %s", cores, local, l->local_source);
    else
        snprintf(why, whylen, "%ld cores", cores);
    return t < 1 ? 1 : t > 1024 ? 1024 : (int)t;
}

void pg_launch_describe(const pg_launch *l, int threads, const char *threads_why, char *out, size_t outlen)
{
    char host[256] = "?";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = 0;
    snprintf(out, outlen, "started as replica %d/%d, rank %d/%d from %s%s%s%s, host %s, master %s:%d (%s), threads %d (%s)",
             l->replica, l->replicas, l->rank, l->world, l->source, l->ignored[0] ? " (not " : "", l->ignored,
             l->ignored[0] ? ")" : "", host, l->master_host, l->master_port, l->master_source, threads, threads_why);
}

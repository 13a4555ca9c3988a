/* runtime/core/launch_env.c — where this process sits in the pipeline, read from
 * the environment of whatever launched it (piperun, Slurm, Open MPI, PMI, or by
 * hand). See pg_net.h for the variables and their order of preference. */
#include "pg_net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parse a decimal non-negative integer that fills the whole string. */
static int parse_uint(const char *s, long *out)
{
    if (!s || !*s || strlen(s) > 9) return -1;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9') return -1;
    *out = strtol(s, NULL, 10);
    return 0;
}

/* "host:port" -> host, port; the host may be bracketed ("[::1]:29500"). */
static int parse_master(const char *var, const char *v, pg_launch *l, char *err, size_t errlen)
{
    const char *colon = strrchr(v, ':');
    if (!colon || colon == v) {
        snprintf(err, errlen, "%s=%s: expected host:port (e.g. 10.0.0.1:29500)", var, v);
        return -1;
    }
    const char *h = v;
    size_t hl = (size_t)(colon - v);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') { h++; hl -= 2; }
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

int pg_launch_from_env(pg_launch *l, char *err, size_t errlen)
{
    static const char *const pairs[][2] = {
        {"PIPE_RANK", "PIPE_WORLD"},
        {"SLURM_PROCID", "SLURM_NTASKS"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"PMI_RANK", "PMI_SIZE"},
    };
    memset(l, 0, sizeof *l);
    l->rank = 0;
    l->world = 1;
    l->source = "default";
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
        break;
    }
    run_identity(l);
    snprintf(l->master_host, sizeof l->master_host, "127.0.0.1");
    l->master_port = 29500;
    const char *pm = getenv("PIPE_MASTER");
    if (pm) return parse_master("PIPE_MASTER", pm, l, err, errlen);
    const char *ma = getenv("MASTER_ADDR"), *mp = getenv("MASTER_PORT");
    if (ma) {
        if (!*ma || strlen(ma) >= sizeof l->master_host) {
            snprintf(err, errlen, "MASTER_ADDR=%s: host name is empty or too long", ma);
            return -1;
        }
        snprintf(l->master_host, sizeof l->master_host, "%s", ma);
    }
    if (mp) {
        long port;
        if (parse_uint(mp, &port) || port < 1 || port > 65535) {
            snprintf(err, errlen, "MASTER_PORT=%s: port must be a number in 1..65535", mp);
            return -1;
        }
        l->master_port = (int)port;
    }
    return 0;
}

/* runtime/core/pg_limits.h — why a thread would not start, in words that name
 * the limit behind it. pthread_create says only EAGAIN ("Resource temporarily
 * unavailable") when the address-space limit (ulimit -v) leaves no room for
 * the thread's stack, or the process limit (ulimit -u) is reached; the user
 * must hear which. Header-only: the transport (tcp.c), the replicas'
 * reducer (dp.c) and the GEMM pool (runtime/cpu/gemm.c) all start threads. */
#ifndef PG_LIMITS_H
#define PG_LIMITS_H

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

/* err (pthread_create's return) in words, naming the limit when one applies. */
static inline const char *pg_thread_start_why(int err, char *buf, size_t n)
{
    struct rlimit as, np;
    size_t stack = 0;
    pthread_attr_t a;
    if (pthread_attr_init(&a) == 0) {
        pthread_attr_getstacksize(&a, &stack);
        pthread_attr_destroy(&a);
    }
    if ((err == EAGAIN || err == ENOMEM) && getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
        snprintf(buf, n, "%s: the address-space limit (ulimit -v) allows this process %.1f MiB and each thread "
                 "reserves a %.1f MiB stack in it: raise the limit, or ask for fewer threads (--threads)",
                 strerror(err), (double)as.rlim_cur / 1048576.0, (double)stack / 1048576.0);
    else if (err == EAGAIN && getrlimit(RLIMIT_NPROC, &np) == 0 && np.rlim_cur != RLIM_INFINITY)
        snprintf(buf, n, "%s: the limit of processes and threads (ulimit -u) is %llu: raise it, or ask for fewer "
                 "threads (--threads)", strerror(err), (unsigned long long)np.rlim_cur);
    else
        snprintf(buf, n, "%s", strerror(err));
    return buf;
}

#endif

/* bench/tcp_pair.c — the raw TCP anchor of bench/dp.sh: two processes on the
 * loopback path, each sending BYTES to the other while receiving BYTES from
 * it (full duplex, the pattern of one phase of the replicas' gradient
 * reduction with 2 replicas), ROUNDS times, over plain sockets with
 * TCP_NODELAY and nothing else. Prints the median round's bytes per second
 * one process sends:
 *     tcp_pair: BYTES bytes each way, median of ROUNDS rounds: X MiB/s
 * Usage: tcp_pair BYTES ROUNDS. Exit 0, or 1 after saying what failed. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct job {
    int fd;
    const char *buf;
    size_t bytes;
    int rc;
} job;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *send_all(void *arg)
{
    job *j = arg;
    size_t off = 0;
    while (off < j->bytes) {
        ssize_t w = send(j->fd, j->buf + off, j->bytes - off, MSG_NOSIGNAL);
        if (w <= 0) {
            j->rc = 1;
            return NULL;
        }
        off += (size_t)w;
    }
    return NULL;
}

static int recv_all(int fd, char *buf, size_t bytes)
{
    size_t off = 0;
    while (off < bytes) {
        ssize_t r = recv(fd, buf + off, bytes - off, 0);
        if (r <= 0)
            return 1;
        off += (size_t)r;
    }
    return 0;
}

/* ROUNDS full-duplex exchanges on fd; the time of each into t (parent only) */
static int exchange(int fd, size_t bytes, int rounds, double *t)
{
    char *out = malloc(bytes), *in = malloc(bytes);
    if (!out || !in) {
        free(out);
        free(in);
        return 1;
    }
    memset(out, 0x5a, bytes);
    int rc = 0;
    for (int i = 0; i < rounds && !rc; i++) {
        char go = 0;
        /* both sides start together: a one-byte handshake */
        if (send(fd, &go, 1, MSG_NOSIGNAL) != 1 || recv_all(fd, &go, 1)) {
            rc = 1;
            break;
        }
        job j = {fd, out, bytes, 0};
        pthread_t th;
        double t0 = now_s();
        if (pthread_create(&th, NULL, send_all, &j) != 0) {
            rc = 1;
            break;
        }
        rc = recv_all(fd, in, bytes);
        pthread_join(th, NULL);
        rc |= j.rc;
        if (t)
            t[i] = now_s() - t0;
    }
    free(out);
    free(in);
    return rc;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc != 3 || atol(argv[1]) < 1 || atoi(argv[2]) < 1) {
        fprintf(stderr, "usage: tcp_pair BYTES ROUNDS\n");
        return 1;
    }
    size_t bytes = (size_t)atol(argv[1]);
    int rounds = atoi(argv[2]), one = 1;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 1) ||
        getsockname(lfd, (struct sockaddr *)&a, &al)) {
        perror("tcp_pair: listen");
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("tcp_pair: fork");
        return 1;
    }
    if (pid == 0) {
        close(lfd);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a))
            _exit(1);
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        _exit(exchange(fd, bytes, rounds, NULL));
    }
    int fd = accept(lfd, NULL, NULL);
    close(lfd);
    if (fd < 0) {
        perror("tcp_pair: accept");
        return 1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    double *t = calloc((size_t)rounds, sizeof *t);
    int rc = !t || exchange(fd, bytes, rounds, t);
    close(fd);
    int st = 0;
    waitpid(pid, &st, 0);
    if (rc || !WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "tcp_pair: the exchange failed\n");
        free(t);
        return 1;
    }
    qsort(t, (size_t)rounds, sizeof *t, cmp_d);
    double med = t[rounds / 2];
    printf("tcp_pair: %zu bytes each way, median of %d rounds: %.1f MiB/s\n", bytes, rounds,
           (double)bytes / med / 1048576.0);
    free(t);
    return 0;
}

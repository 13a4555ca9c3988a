/* tests/unit/test_net.c — pg_net over loopback: each test forks one process per
 * stage, which reports its outcome (status and message) through a pipe. */
#include "pg_net.h"
#include "sha256.h"
#include "../tap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* What one forked stage does: fills out (<= 1000 bytes) and returns its exit code. */
typedef int (*stage_fn)(pg_net *n, int rank, char *out, size_t outlen, void *arg);

typedef struct spec {
    int rank, world;
    uint64_t hash;
    const char *model;
    double connect_timeout_s;
    stage_fn fn;
    void *arg;
    size_t send_buf;
    const char *run_id;       /* NULL: none (stages started by hand without PIPE_RUN_ID) */
    const char *token;        /* the run token (PIPE_RUN_TOKEN); NULL: none */
    int start_delay_ms;       /* sleep before pg_net_init */
    int block_cont;           /* SIGCONT blocked in every thread (before pg_net_init starts any) */
    double send_timeout_s;    /* a send's wait for room in a full queue (0: the default) */
} spec;

typedef struct result {
    pid_t pid;
    int fd;
    int status;
    char text[1100];
} result;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &sl);
    close(fd);
    return ntohs(a.sin_port);
}

static void start(result *r, const spec *s, int port)
{
    int p[2];
    if (pipe(p) != 0) exit(99);
    fflush(stdout);
    r->pid = fork();
    if (r->pid == 0) {
        close(p[0]);
        pg_launch l;
        memset(&l, 0, sizeof l);
        l.rank = s->rank;
        l.world = s->world;
        snprintf(l.master_host, sizeof l.master_host, "127.0.0.1");
        l.master_port = port;
        l.source = "test";
        if (s->token) {
            snprintf(l.token, sizeof l.token, "%s", s->token);
            l.token_len = strlen(l.token);
            l.token_source = "PIPE_RUN_TOKEN";
        }
        size_t bufs[16];
        for (int i = 0; i < 16; i++) bufs[i] = s->send_buf;
        pg_net_config c = {.model = s->model ? s->model : "mlp", .plan_hash = s->hash, .stage = s->rank,
                           .send_buf_bytes = bufs,
                           .connect_timeout_s = s->connect_timeout_s ? s->connect_timeout_s : 5.0,
                           .send_timeout_s = s->send_timeout_s, .run_id = s->run_id};
        if (s->block_cont) {
            sigset_t cont;
            sigemptyset(&cont);
            sigaddset(&cont, SIGCONT);
            pthread_sigmask(SIG_BLOCK, &cont, NULL);
        }
        if (s->start_delay_ms) {
            struct timespec d = {s->start_delay_ms / 1000, (long)(s->start_delay_ms % 1000) * 1000000L};
            nanosleep(&d, NULL);
        }
        char err[900] = "", out[1000] = "";
        int code;
        pg_net *n = pg_net_init(&l, &c, err, sizeof err);
        if (!n) {
            snprintf(out, sizeof out, "init: %s", err);
            code = 3;
        } else {
            code = s->fn ? s->fn(n, s->rank, out, sizeof out, s->arg) : 0;
            pg_net_close(n);
        }
        ssize_t w = write(p[1], out, strlen(out));
        (void)w;
        close(p[1]);
        exit(code); /* not _exit: LeakSanitizer checks the stage too */
    }
    close(p[1]);
    r->fd = p[0];
}

static void finish(result *r)
{
    size_t got = 0;
    ssize_t k;
    while (got < sizeof r->text - 1 && (k = read(r->fd, r->text + got, sizeof r->text - 1 - got)) > 0)
        got += (size_t)k;
    r->text[got] = 0;
    close(r->fd);
    waitpid(r->pid, &r->status, 0);
}

static int exited(const result *r, int code)
{
    return WIFEXITED(r->status) && WEXITSTATUS(r->status) == code;
}

/* Run n specs on one fresh port and wait for all. */
static void run_all(result *r, spec *s, int n)
{
    int port = free_port();
    for (int i = 0; i < n; i++) start(&r[i], &s[i], port);
    for (int i = 0; i < n; i++) finish(&r[i]);
}

/* ---- stage bodies ---- */

static int ring_body(pg_net *n, int rank, char *out, size_t outlen, void *arg)
{
    int world = *(int *)arg;
    for (int round = 0; round < 20; round++) {
        int32_t v = rank * 1000 + round, got = -1;
        if (pg_net_send(n, (rank + 1) % world, 7, &v, sizeof v) != PG_NET_OK ||
            pg_net_recv(n, (rank + world - 1) % world, 7, &got, sizeof got, 5.0) != PG_NET_OK) {
            snprintf(out, outlen, "%s", pg_net_error(n));
            return 1;
        }
        if (got != ((rank + world - 1) % world) * 1000 + round) {
            snprintf(out, outlen, "round %d: got %d", round, got);
            return 1;
        }
    }
    return pg_net_flush(n, 5.0) == PG_NET_OK ? 0 : 1;
}

#define BIG (6u << 20)
static int big_body(pg_net *n, int rank, char *out, size_t outlen, void *arg)
{
    (void)arg;
    uint32_t *a = malloc(BIG), *b = malloc(BIG);
    size_t cnt = BIG / 4;
    for (size_t i = 0; i < cnt; i++) a[i] = (uint32_t)(i * 2654435761u + (uint32_t)rank);
    int other = 1 - rank, code = 0;
    /* both sides send several MB before either receives: must not deadlock */
    for (int rep = 0; rep < 2 && !code; rep++) {
        if (pg_net_send(n, other, 100 + (uint32_t)rep, a, BIG) != PG_NET_OK ||
            pg_net_send(n, other, 200, a, 4) != PG_NET_OK) {
            snprintf(out, outlen, "send: %s", pg_net_error(n));
            code = 1;
            break;
        }
        memset(b, 0, BIG);
        if (pg_net_recv(n, other, 100 + (uint32_t)rep, b, BIG, 10.0) != PG_NET_OK ||
            pg_net_recv(n, other, 200, b, 4, 10.0) != PG_NET_OK) {
            snprintf(out, outlen, "recv: %s", pg_net_error(n));
            code = 1;
            break;
        }
        if (b[0] != (uint32_t)other) { snprintf(out, outlen, "small message corrupt"); code = 1; }
    }
    if (!code) {
        pg_net_recv(n, other, 999, NULL, 0, 0.05); /* nothing more: a timeout */
    }
    free(a);
    free(b);
    return code;
}

static int big_check_body(pg_net *n, int rank, char *out, size_t outlen, void *arg)
{
    (void)arg;
    uint32_t *a = malloc(BIG), *b = malloc(BIG);
    size_t cnt = BIG / 4;
    int other = 1 - rank, code = 0;
    for (size_t i = 0; i < cnt; i++) a[i] = (uint32_t)(i * 2654435761u + (uint32_t)rank);
    /* the socket takes part of the message straight from a, the ring the
     * rest: a is the caller's again when the send returns */
    int sent = pg_net_send(n, other, 1, a, BIG) == PG_NET_OK;
    memset(a, 0xee, BIG);
    if (!sent || pg_net_recv(n, other, 1, b, BIG, 10.0) != PG_NET_OK) {
        snprintf(out, outlen, "%s", pg_net_error(n));
        code = 1;
    } else {
        for (size_t i = 0; i < cnt; i++)
            if (b[i] != (uint32_t)(i * 2654435761u + (uint32_t)other)) {
                snprintf(out, outlen, "byte mismatch at word %zu", i);
                code = 1;
                break;
            }
    }
    free(a);
    free(b);
    return code;
}

/* Lent sends (pg_net_send_rank_lent) mixed with copied ones, both sides
 * sending everything before receiving anything, with a send ring far smaller
 * than the traffic: the payloads go out from the caller's buffers, in order
 * with the ring's messages. */
#define NSMALL 200
static int lent_body(pg_net *n, int rank, char *out, size_t outlen, void *arg)
{
    (void)arg;
    uint32_t *a = malloc(BIG), *b = malloc(BIG), small[NSMALL], got = 0;
    size_t cnt = BIG / 4;
    int other = 1 - rank, code = 0;
    uint64_t seq = 0, seq0 = 0;
    for (size_t i = 0; i < cnt; i++) a[i] = (uint32_t)(i * 2654435761u + (uint32_t)rank);
    for (int i = 0; i < NSMALL; i++) small[i] = (uint32_t)(rank * 100000 + i);
    uint32_t w1 = 11u + (uint32_t)rank, w3 = 33u + (uint32_t)rank;
    int bad = pg_net_send_rank(n, other, 1, &w1, 4) || pg_net_send_rank_lent(n, other, 2, a, BIG, &seq0) ||
              pg_net_send_rank(n, other, 3, &w3, 4);
    for (int i = 0; i < NSMALL && !bad; i++)
        bad = pg_net_send_rank_lent(n, other, 10 + (uint32_t)i, &small[i], 4, &seq) != PG_NET_OK;
    if (bad || seq != seq0 + NSMALL) {
        snprintf(out, outlen, "send: %s (seq %llu after %llu)", pg_net_error(n), (unsigned long long)seq,
                 (unsigned long long)seq0);
        code = 1;
    }
    if (!code && (pg_net_recv_rank(n, other, 1, &got, 4, 10.0) || got != 11u + (uint32_t)other)) {
        snprintf(out, outlen, "first copied message: %s (%u)", pg_net_error(n), got);
        code = 1;
    }
    if (!code && pg_net_recv_rank(n, other, 2, b, BIG, 10.0)) {
        snprintf(out, outlen, "lent 6 MB: %s", pg_net_error(n));
        code = 1;
    }
    for (size_t i = 0; i < cnt && !code; i++)
        if (b[i] != (uint32_t)(i * 2654435761u + (uint32_t)other)) {
            snprintf(out, outlen, "lent 6 MB: word %zu differs", i);
            code = 1;
        }
    if (!code && (pg_net_recv_rank(n, other, 3, &got, 4, 10.0) || got != 33u + (uint32_t)other)) {
        snprintf(out, outlen, "second copied message: %s (%u)", pg_net_error(n), got);
        code = 1;
    }
    for (int i = 0; i < NSMALL && !code; i++)
        if (pg_net_recv_rank(n, other, 10 + (uint32_t)i, &got, 4, 10.0) || got != (uint32_t)(other * 100000 + i)) {
            snprintf(out, outlen, "lent message %d: %s (%u)", i, pg_net_error(n), got);
            code = 1;
        }
    if (!code && pg_net_wait_lent(n, other, seq, 5.0) != PG_NET_OK) {
        snprintf(out, outlen, "wait_lent: %s", pg_net_error(n));
        code = 1;
    }
    free(a);
    free(b);
    return code;
}

/* Stage 1 reads nothing for a second: stage 0's wait for its lent 32 MB
 * (more than the sockets hold) times out, names what is unsent, and may be
 * called again; the bytes arrive intact once stage 1 reads. */
#define HUGE (32u << 20)
static int lent_wait_body(pg_net *n, int rank, char *out, size_t outlen, void *arg)
{
    (void)arg;
    unsigned char *a = malloc(HUGE);
    int code = 0;
    if (rank == 1) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
        if (pg_net_recv_rank(n, 0, 5, a, HUGE, 10.0) != PG_NET_OK) {
            snprintf(out, outlen, "recv: %s", pg_net_error(n));
            code = 1;
        }
        for (size_t i = 0; i < HUGE && !code; i += 4093)
            if (a[i] != (unsigned char)(i * 7)) {
                snprintf(out, outlen, "byte %zu differs", i);
                code = 1;
            }
        pg_net_send_rank(n, 0, 6, a, 1);
        free(a);
        return code;
    }
    for (size_t i = 0; i < HUGE; i++) a[i] = (unsigned char)(i * 7);
    uint64_t seq = 0;
    pg_net_status s = pg_net_send_rank_lent(n, 1, 5, a, HUGE, &seq);
    double t0 = now_s();
    pg_net_status w = s ? s : pg_net_wait_lent(n, 1, seq, 0.2);
    snprintf(out, outlen, "%d %.2f %s|", (int)w, now_s() - t0, pg_net_error(n));
    if (w != PG_NET_TIMEOUT)
        code = 1;
    if (pg_net_wait_lent(n, 1, seq, 10.0) != PG_NET_OK || pg_net_recv_rank(n, 1, 6, a, 1, 10.0) != PG_NET_OK)
        code = 1;
    free(a);
    return code;
}

static int mismatch_body(pg_net *n, int rank, char *out, size_t outlen, void *arg)
{
    (void)arg;
    char buf[16] = {0};
    if (rank == 1) {
        pg_net_send(n, 0, 5, buf, 8);
        pg_net_recv(n, 0, 1, buf, 1, 5.0); /* wait for the master to finish */
        return 0;
    }
    pg_net_status s = pg_net_recv(n, 1, 6, buf, 16, 5.0);
    snprintf(out, outlen, "%d %s", (int)s, pg_net_error(n));
    pg_net_send(n, 1, 1, buf, 1);
    return s == PG_NET_MISMATCH ? 0 : 1;
}

/* Stage 1 of the two bodies below: after ms of silence, the message stage 0
 * waits for (tag 3, "abcd"), then stage 0's word that it is done. */
static int send_late(pg_net *n, long ms)
{
    char b[4];
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    pg_net_send(n, 0, 3, "abcd", 4);
    pg_net_flush(n, 5.0);
    pg_net_recv(n, 0, 1, b, 1, 10.0);
    return 0;
}

static int timeout_body(pg_net *n, int rank, char *out, size_t outlen, void *arg)
{
    (void)arg;
    char b[4];
    if (rank == 1) /* the first half-second: nothing; then the message the master retries for */
        return send_late(n, 500);
    double t0 = now_s();
    pg_net_status s = pg_net_recv(n, 1, 3, b, 4, 0.2);
    double dt = now_s() - t0;
    int code = s == PG_NET_TIMEOUT && dt < 0.5 ? 0 : 1;
    snprintf(out, outlen, "%d %.2f %s|", (int)s, dt, pg_net_error(n));
    s = pg_net_recv(n, 1, 3, b, 4, 5.0); /* a timeout is retryable */
    if (s != PG_NET_OK || memcmp(b, "abcd", 4) != 0) code = 1;
    pg_net_send(n, 1, 1, b, 1);
    return code;
}

/* Stage 1 reads nothing for 2 s; stage 0 sends 256 KB messages (a 64 KB
 * queue: no planned traffic) until one cannot get into the full queue within
 * the 1 s send timeout: the loopback socket's buffers fill first, then the
 * queue, then the send waits and gives up, naming the peer. What was sent
 * before is not lost: stage 0 stays up (its sender thread draining) while
 * stage 1 reads every message that was sent whole, each intact; the one that
 * timed out never completes (a receive of it times out). */
#define FULL_MSG (256u << 10)
static int full_body(pg_net *n, int rank, char *out, size_t outlen, void *arg)
{
    (void)arg;
    unsigned char *b = malloc(FULL_MSG);
    if (!b) return 1;
    int k = 0;
    pg_net_status s = PG_NET_OK;
    if (rank == 1) {
        struct timespec d = {2, 0};
        nanosleep(&d, NULL);
        for (k = 0; k < 4096; k++) {
            memset(b, 0, FULL_MSG);
            if ((s = pg_net_recv(n, 0, 1, b, FULL_MSG, 1.0)) != PG_NET_OK)
                break;
            if (b[0] != (unsigned char)k || b[FULL_MSG / 2] != (unsigned char)(k * 3) ||
                b[FULL_MSG - 1] != (unsigned char)(k * 7)) {
                snprintf(out, outlen, "read %d: message %d is not what was sent", k, k);
                free(b);
                return 1;
            }
        }
        snprintf(out, outlen, "read %d, then %d", k, (int)s);
        free(b);
        return s == PG_NET_TIMEOUT ? 0 : 1;
    }
    double dt = 0;
    for (k = 0; k < 4096; k++) {
        memset(b, 0, FULL_MSG);
        b[0] = (unsigned char)k;
        b[FULL_MSG / 2] = (unsigned char)(k * 3);
        b[FULL_MSG - 1] = (unsigned char)(k * 7);
        double t0 = now_s();
        s = pg_net_send(n, 1, 1, b, FULL_MSG);
        dt = now_s() - t0;
        if (s != PG_NET_OK)
            break;
    }
    snprintf(out, outlen, "sent %d, then %d after %.2f s: %s", k, (int)s, dt, s ? pg_net_error(n) : "-");
    free(b);
    struct timespec d = {3, 500000000L}; /* while stage 1 reads */
    nanosleep(&d, NULL);
    return s == PG_NET_TIMEOUT && dt >= 0.9 && dt < 2.5 && k >= 1 ? 0 : 1;
}

/* Stage 0 receives with a 1 s timeout while the test stops it (SIGSTOP) for
 * 1.5 s; stage 1 sends 0.3 s after it is continued. The time stopped is not
 * the wait's: the message is received. SIGCONT is blocked in every thread, as
 * a program may have it: the accounting must not rest on a SIGCONT handler
 * (which another thread, or none, may run after the wait saw its deadline). */
static int stopped_body(pg_net *n, int rank, char *out, size_t outlen, void *arg)
{
    (void)arg;
    char b[4];
    if (rank == 1)
        return send_late(n, 2000);
    double t0 = now_s();
    pg_net_status s = pg_net_recv(n, 1, 3, b, 4, 1.0);
    snprintf(out, outlen, "%d after %.2f s: %s", (int)s, now_s() - t0, s ? pg_net_error(n) : "ok");
    pg_net_send(n, 1, 1, b, 1);
    pg_net_flush(n, 5.0);
    return s == PG_NET_OK && !memcmp(b, "abcd", 4) ? 0 : 1;
}

/* Stage 1 sends a message and exits; stage 0 sees it gone although that
 * message is still unread, and can still read it. */
static int gone_body(pg_net *n, int rank, char *out, size_t outlen, void *arg)
{
    (void)arg;
    char b[4] = "ping";
    if (rank == 1) {
        if (pg_net_recv(n, 0, 1, b, 1, 5.0) != PG_NET_OK) /* stage 0 has seen us alive */
            return 1;
        pg_net_send(n, 0, 2, "late", 4);
        pg_net_flush(n, 5.0);
        return 0;
    }
    int alive = pg_net_peer_gone(n, 1) == 0;
    pg_net_send(n, 1, 1, b, 1);
    double t0 = now_s();
    while (!pg_net_peer_gone(n, 1) && now_s() - t0 < 5.0) {
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
    double dt = now_s() - t0;
    int gone = pg_net_peer_gone(n, 1);
    pg_net_status s = pg_net_recv(n, 1, 2, b, 4, 1.0);
    snprintf(out, outlen, "alive %d gone %d after %.2f s, recv %d '%.4s'", alive, gone, dt, (int)s, b);
    return alive && gone && dt < 2.0 && s == PG_NET_OK && !memcmp(b, "late", 4) && pg_net_peer_gone(n, 9) ? 0 : 1;
}

/* Stage 2 waits to be killed; stage 1 waits on it; stage 0 just waits. */
static int killed_body(pg_net *n, int rank, char *out, size_t outlen, void *arg)
{
    int *ready_w = arg;
    char b[8];
    if (rank == 2) {
        ssize_t w = write(*ready_w, "r", 1);
        (void)w;
        pause();
        return 0;
    }
    double t0 = now_s();
    pg_net_status s = pg_net_recv(n, 2, 1, b, 8, 20.0);
    double dt = now_s() - t0;
    snprintf(out, outlen, "%d %.1f %s|", (int)s, dt, pg_net_error(n));
    /* sending to the dead stage fails too, without hanging */
    static char big[1 << 20];
    pg_net_status ss = PG_NET_OK;
    for (int i = 0; i < 64 && ss == PG_NET_OK; i++) ss = pg_net_send(n, 2, 2, big, sizeof big);
    size_t l = strlen(out);
    snprintf(out + l, outlen - l, "%d %s", (int)ss, pg_net_error(n));
    return s == PG_NET_CLOSED && dt < 3.0 && ss == PG_NET_CLOSED ? 0 : 1;
}

static void hex(const unsigned char *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    /* ---- SHA-256 and HMAC-SHA-256: what the run token's challenge rests on.
     * Messages of every padding case (bytes (7i + 1) mod 256), digests from
     * Python's hashlib; HMAC: RFC 4231's cases 1 and 6 (a key over one block). */
    {
        static const struct { size_t n; const char *want; } v[] = {
            {0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
            {3, "ce562c676ea7aba9812f54db146b0096011bf3e423edfb0a6f8fb2b02674a801"},
            {55, "16fa57a0a3423a715d594516339f36189d6b5f93754a9714fef202616a9fabfe"},
            {56, "c37b44e5f1b18554b36966f4f8e08bfbf3164c4b6c10374d12d89850892073c5"},
            {63, "bbba992d2c85af960fb2987a1fd05e0aa82a3db3c740dd8982a9e273b75e36a3"},
            {64, "66bd4633ed6f71c4ecfa4763bf7ba1c8ec7612de9aa6c0578a7b675207c71e0b"},
            {65, "9f7dc47107b750a1f3d35db5d9547f24ef40da5b731b9540d4f43710a154f6c9"},
            {119, "a3ed307b730fa77c07531300c6e4a282330011d4d4caf6bb7b63ae05950f4b66"},
            {120, "8e3b15d9fea7472655aa069620b7f8c2e55ee1499f763200a7515fe826e99d20"},
            {1000, "095ecb62e30793ab4b954cd6a0586d0cc91f7ea5b1332694d8da780e98676d78"},
        };
        unsigned char m[1000], d[PG_SHA256_BYTES];
        char h[2 * PG_SHA256_BYTES + 1];
        for (size_t i = 0; i < sizeof m; i++) m[i] = (unsigned char)(i * 7 + 1);
        int all = 1;
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
            pg_sha256 s;
            pg_sha256_init(&s);
            for (size_t at = 0; at < v[k].n; at += 13) /* in pieces, across block edges */
                pg_sha256_add(&s, m + at, v[k].n - at < 13 ? v[k].n - at : 13);
            pg_sha256_done(&s, d);
            hex(d, sizeof d, h);
            if (strcmp(h, v[k].want)) {
                all = 0;
                OK(0, "SHA-256 of %zu bytes: %s, expected %s", v[k].n, h, v[k].want);
            }
        }
        OK(all, "SHA-256 of 0 to 1000 bytes (every padding case, fed in pieces) is hashlib's");
        unsigned char k1[20], k6[131];
        memset(k1, 0x0b, sizeof k1);
        memset(k6, 0xaa, sizeof k6);
        const char *t6 = "Test Using Larger Than Block-Size Key - Hash Key First";
        const void *p1[] = {"Hi ", "There"}, *p6[] = {t6};
        size_t l1[] = {3, 5}, l6[] = {strlen(t6)};
        pg_hmac_sha256(k1, sizeof k1, p1, l1, 2, d);
        hex(d, sizeof d, h);
        OK(!strcmp(h, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"), "HMAC-SHA-256, RFC 4231 case 1: %s", h);
        pg_hmac_sha256(k6, sizeof k6, p6, l6, 1, d);
        hex(d, sizeof d, h);
        OK(!strcmp(h, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
           "HMAC-SHA-256, RFC 4231 case 6 (a key longer than a block): %s", h);
        unsigned char a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
        OK(pg_equal_ct(a, a, 4) && !pg_equal_ct(a, b, 4), "the constant-time comparison tells equal from unequal");
    }
    /* ---- pg_launch_from_env ---- */
    {
        char err[256];
        pg_launch l;
        const char *vars[] = {"PIPE_RANK", "PIPE_WORLD", "PIPE_MASTER", "SLURM_PROCID", "SLURM_NTASKS",
                              "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                              "MASTER_ADDR", "MASTER_PORT", "PIPE_LOCAL_WORLD", "OMPI_COMM_WORLD_LOCAL_SIZE",
                              "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "SLURM_STEP_NUM_NODES",
                              "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_JOB_ID", "SLURM_STEP_ID",
                              "SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"};
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && l.rank == 0 && l.world == 1 &&
               !strcmp(l.master_host, "127.0.0.1") && l.master_port == 29500,
           "no variables: rank 0 of world 1, master 127.0.0.1:29500");
        setenv("SLURM_PROCID", "2", 1);
        setenv("SLURM_NTASKS", "4", 1);
        setenv("MASTER_ADDR", "node7", 1);
        setenv("MASTER_PORT", "1234", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && l.rank == 2 && l.world == 4 &&
               !strcmp(l.source, "SLURM_PROCID") && !strcmp(l.master_host, "node7") && l.master_port == 1234,
           "Slurm variables and MASTER_ADDR/MASTER_PORT");
        setenv("PIPE_RANK", "1", 1);
        setenv("PIPE_WORLD", "3", 1);
        setenv("PIPE_MASTER", "10.0.0.1:29501", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && l.rank == 1 && l.world == 3 &&
               !strcmp(l.master_host, "10.0.0.1") && l.master_port == 29501,
           "PIPE_* wins over Slurm and MASTER_ADDR");
        setenv("PIPE_RANK", "3", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 &&
               !strcmp(err, "PIPE_RANK=3 but PIPE_WORLD=3: rank must be < world"),
           "rank >= world refused: %s", err);
        setenv("PIPE_RANK", "1x", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 && !strcmp(err, "PIPE_RANK=1x: expected a non-negative number"),
           "non-numeric rank refused: %s", err);
        setenv("PIPE_RANK", "0", 1);
        setenv("PIPE_WORLD", "0", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 && !strcmp(err, "PIPE_WORLD=0: expected a number >= 1"),
           "world 0 refused: %s", err);
        setenv("PIPE_WORLD", "2", 1);
        setenv("PIPE_MASTER", "10.0.0.1:70000", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 &&
               !strcmp(err, "PIPE_MASTER=10.0.0.1:70000: port must be a number in 1..65535"),
           "port out of range refused: %s", err);
        setenv("PIPE_MASTER", "10.0.0.1", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 && strstr(err, "PIPE_MASTER=10.0.0.1: expected host:port"),
           "master without port refused: %s", err);
        setenv("PIPE_MASTER", "[::1]:29500", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 &&
               strstr(err, "PIPE_MASTER=[::1]:29500: IPv6 addresses are not supported (the stages talk IPv4)"),
           "an IPv6 master is refused as such, not as a name that does not resolve: %s", err);
        setenv("PIPE_MASTER", "fe80::1:29500", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 && strstr(err, "IPv6 addresses are not supported"),
           "...bracketed or not: %s", err);
        /* the run token */
        setenv("PIPE_MASTER", "10.0.0.1:29501", 1);
        setenv("PIPE_RUN_TOKEN", "0123456789abcdef", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && l.token_len == 16 && !strcmp(l.token, "0123456789abcdef") &&
               !strcmp(l.token_source, "PIPE_RUN_TOKEN"),
           "PIPE_RUN_TOKEN is the run token: %s", err);
        setenv("PIPE_RUN_TOKEN", "short", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 && strstr(err, "PIPE_RUN_TOKEN holds 5 bytes: a run token has 16 to 255"),
           "a short token is refused: %s", err);
        char tf[] = "/tmp/pg_token_XXXXXX";
        int tfd = mkstemp(tf);
        OK(tfd >= 0 && write(tfd, "fedcba9876543210fedc\nsecond line\n", 33) == 33, "a token file");
        close(tfd);
        setenv("PIPE_RUN_TOKEN_FILE", tf, 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 &&
               !strcmp(err, "both PIPE_RUN_TOKEN and PIPE_RUN_TOKEN_FILE are set: set one of them"),
           "both the token and a token file: refused: %s", err);
        unsetenv("PIPE_RUN_TOKEN");
        chmod(tf, 0600);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && !strcmp(l.token, "fedcba9876543210fedc") &&
               !strcmp(l.token_source, "PIPE_RUN_TOKEN_FILE"),
           "PIPE_RUN_TOKEN_FILE: its first line is the token: %s", err);
        chmod(tf, 0644);
        char want[200];
        snprintf(want, sizeof want, "PIPE_RUN_TOKEN_FILE=%s: the file can be read by others (mode 0644): chmod 600 %s", tf, tf);
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 && !strcmp(err, want),
           "a token file others can read is refused: %s", err);
        unlink(tf);
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 && strstr(err, "cannot open it: No such file or directory"),
           "a missing token file: %s", err);
        unsetenv("PIPE_RUN_TOKEN_FILE");
        setenv("PIPE_MASTER", "10.0.0.1", 1);
        unsetenv("PIPE_WORLD");
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 && !strcmp(err, "PIPE_RANK is set but PIPE_WORLD is not: set both"),
           "rank without world refused: %s", err);
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
        setenv("OMPI_COMM_WORLD_RANK", "1", 1);
        setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
        setenv("MASTER_PORT", "0", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 && !strcmp(err, "MASTER_PORT=0: port must be a number in 1..65535"),
           "MASTER_PORT 0 refused: %s", err);
        unsetenv("MASTER_PORT");
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && l.rank == 1 && l.world == 2, "Open MPI variables");
        unsetenv("OMPI_COMM_WORLD_RANK");
        unsetenv("OMPI_COMM_WORLD_SIZE");
        setenv("PMI_RANK", "0", 1);
        setenv("PMI_SIZE", "5", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && l.rank == 0 && l.world == 5 && !strcmp(l.source, "PMI_RANK"),
           "PMI variables");
        unsetenv("PMI_RANK");
        unsetenv("PMI_SIZE");

        /* mpirun inside an sbatch allocation: every rank inherits SLURM_PROCID=0
         * and SLURM_NTASKS; the MPI variables name the real rank */
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
        setenv("SLURM_PROCID", "0", 1);
        setenv("SLURM_NTASKS", "1", 1);
        setenv("SLURM_JOB_ID", "4242", 1);
        setenv("SLURM_JOB_NODELIST", "c[07-08]", 1);
        setenv("SLURM_STEP_NODELIST", "c08", 1);
        setenv("OMPI_COMM_WORLD_RANK", "3", 1);
        setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
        setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && l.rank == 3 && l.world == 4 &&
               !strcmp(l.source, "OMPI_COMM_WORLD_RANK") && !strcmp(l.ignored, "SLURM_PROCID=0") &&
               l.local_world == 2,
           "sbatch + mpirun: the rank is Open MPI's (3 of 4), SLURM_PROCID=0 passed over (%s, %s)", l.source,
           l.ignored);
        OK(!strcmp(l.master_host, "c07") && !strcmp(l.master_source, "SLURM_JOB_NODELIST") &&
               l.master_port == 20000 + (4242 * 8) % 20000,
           "... two hosts: the master is the allocation's first host (%s:%d from %s)", l.master_host, l.master_port,
           l.master_source);
        setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && !strcmp(l.master_host, "127.0.0.1") &&
               l.master_port == 20000 + (4242 * 8) % 20000,
           "... every rank on this host: loopback, the job's port (%s:%d)", l.master_host, l.master_port);
        unsetenv("SLURM_JOB_NODELIST");
        unsetenv("SLURM_STEP_NODELIST");
        unsetenv("SLURM_JOB_ID");
        setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 &&
               strstr(err, "the 4 processes run on several hosts (OMPI_COMM_WORLD_LOCAL_SIZE=2 of "
                           "OMPI_COMM_WORLD_SIZE=4) and nothing names the master: set PIPE_MASTER=host:port"),
           "several hosts and no master anywhere: refused at once, saying what to set: %s", err);
        setenv("MASTER_ADDR", "head", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && !strcmp(l.master_host, "head") && l.master_port == 29500 &&
               !strcmp(l.master_source, "MASTER_ADDR"),
           "... MASTER_ADDR alone names it (port 29500)");
        unsetenv("MASTER_ADDR");
        unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && !strcmp(l.master_host, "127.0.0.1"),
           "nobody says how many are on this host: the old default (%s)", err);
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);

        /* Hydra (MPICH, Intel MPI): PMI_RANK/PMI_SIZE with MPI_LOCALNRANKS */
        setenv("SLURM_PROCID", "0", 1);
        setenv("SLURM_NTASKS", "1", 1);
        setenv("PMI_RANK", "1", 1);
        setenv("PMI_SIZE", "2", 1);
        setenv("MPI_LOCALNRANKS", "2", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && l.rank == 1 && !strcmp(l.source, "PMI_RANK") &&
               l.local_world == 2 && !strcmp(l.local_source, "MPI_LOCALNRANKS"),
           "Hydra's PMI_RANK over SLURM_PROCID, MPI_LOCALNRANKS for the host");
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);

        /* srun: SLURM_PROCID, the step's node list and job.step's port */
        setenv("SLURM_PROCID", "5", 1);
        setenv("SLURM_NTASKS", "8", 1);
        setenv("SLURM_JOB_ID", "77", 1);
        setenv("SLURM_STEP_ID", "3", 1);
        setenv("SLURM_JOB_NODELIST", "a[1-9]", 1);
        setenv("SLURM_STEP_NODELIST", "gpu-b[003-004,010],gpu-a1", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && l.rank == 5 && !strcmp(l.master_host, "gpu-b003") &&
               l.master_port == 20000 + 77 * 8 + 3 && !strcmp(l.master_source, "SLURM_STEP_NODELIST") &&
               !strcmp(l.run_id, "slurm-77.3"),
           "srun: master = first host of SLURM_STEP_NODELIST, port from job 77 step 3 (%s:%d, %s)", l.master_host,
           l.master_port, err);
        setenv("SLURM_STEP_NUM_NODES", "1", 1);
        setenv("SLURM_STEP_NODELIST", "gpu-b003", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && !strcmp(l.master_host, "127.0.0.1") && l.local_world == 8,
           "srun on one node: loopback, all 8 tasks local");
        setenv("MASTER_PORT", "4000", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && l.master_port == 4000,
           "MASTER_PORT still names the port under Slurm");
        unsetenv("MASTER_PORT");
        setenv("SLURM_STEP_NODELIST", "gpu-b[003", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == -1 &&
               !strcmp(err, "SLURM_STEP_NODELIST: 'gpu-b[003' at character 10: '[' is not closed"),
           "a bad node list is refused naming the variable: %s", err);
        setenv("PIPE_MASTER", "10.0.0.1:29501", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 && !strcmp(l.master_host, "10.0.0.1") &&
               !strcmp(l.master_source, "PIPE_MASTER"),
           "PIPE_MASTER wins over the node list (which is then not read)");
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);

        /* threads: --threads, SLURM_CPUS_PER_TASK, OMP_NUM_THREADS, cores / local */
        char why[128];
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        setenv("PIPE_RANK", "0", 1);
        setenv("PIPE_WORLD", "2", 1);
        setenv("PIPE_LOCAL_WORLD", "2", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0, "piperun's variables");
        OK(pg_launch_threads(&l, 0, why, sizeof why, err, sizeof err) == (cores / 2 > 0 ? cores / 2 : 1) &&
               strstr(why, "processes on this host, PIPE_LOCAL_WORLD"),
           "threads: the cores shared by piperun's count (%s)", why);
        setenv("OMP_NUM_THREADS", "3,2", 1);
        OK(pg_launch_threads(&l, 0, why, sizeof why, err, sizeof err) == 3 && !strcmp(why, "OMP_NUM_THREADS"),
           "OMP_NUM_THREADS's first level");
        setenv("SLURM_CPUS_PER_TASK", "5", 1);
        setenv("PIPE_LOCAL_WORLD", "1", 1);
        setenv("PIPE_MASTER", "127.0.0.1:29600", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0, "one of two stages on this host: %s", err);
        OK(pg_launch_threads(&l, 0, why, sizeof why, err, sizeof err) == 5 && !strcmp(why, "SLURM_CPUS_PER_TASK"),
           "SLURM_CPUS_PER_TASK before OMP_NUM_THREADS");
        OK(pg_launch_threads(&l, 7, why, sizeof why, err, sizeof err) == 7 && !strcmp(why, "--threads"),
           "--threads before both");
        setenv("SLURM_CPUS_PER_TASK", "8", 1);
        setenv("PIPE_LOCAL_WORLD", "3", 1);
        setenv("PIPE_WORLD", "3", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0 &&
               pg_launch_threads(&l, 0, why, sizeof why, err, sizeof err) == 2 &&
               !strcmp(why, "SLURM_CPUS_PER_TASK=8 / 3 processes on this host, PIPE_LOCAL_WORLD"),
           "piperun as one Slurm task: its CPUs shared by the stages (%s)", why);
        setenv("SLURM_CPUS_PER_TASK", "x", 1);
        OK(pg_launch_threads(&l, 0, why, sizeof why, err, sizeof err) == -1 &&
               !strcmp(err, "SLURM_CPUS_PER_TASK=x: expected a number >= 1"),
           "a bad SLURM_CPUS_PER_TASK is refused: %s", err);
        unsetenv("SLURM_CPUS_PER_TASK");
        setenv("OMP_NUM_THREADS", "0", 1);
        OK(pg_launch_threads(&l, 0, why, sizeof why, err, sizeof err) == -1 &&
               !strcmp(err, "OMP_NUM_THREADS=0: expected a number >= 1"),
           "OMP_NUM_THREADS=0 is refused: %s", err);
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
        char line[512];
        setenv("OMPI_COMM_WORLD_RANK", "1", 1);
        setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
        setenv("SLURM_PROCID", "0", 1);
        setenv("SLURM_NTASKS", "1", 1);
        OK(pg_launch_from_env(&l, err, sizeof err) == 0, "Open MPI again");
        pg_launch_describe(&l, 4, "--threads", line, sizeof line);
        OK(strstr(line, "started as replica 0/1, rank 1/2 from OMPI_COMM_WORLD_RANK (not SLURM_PROCID=0), host ") &&
               strstr(line, ", master 127.0.0.1:29500 (default), threads 4 (--threads)"),
           "the start-up line: %s", line);
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    }

    /* ---- Slurm's compressed host lists ---- */
    {
        static const struct {
            const char *list;
            long count;
            const char *hosts; /* every host, space-separated */
        } good[] = {
            {"node1", 1, "node1"},
            {"a,b,c", 3, "a b c"},
            {"node[01-04,07],gpu-a[1-2]", 7, "node01 node02 node03 node04 node07 gpu-a1 gpu-a2"},
            {"n[8-11]", 4, "n8 n9 n10 n11"},
            {"n[008-010]", 3, "n008 n009 n010"},
            {"n[09-10]x", 2, "n09x n10x"},
            {"r[1-2]-c[0-1]", 4, "r1-c0 r1-c1 r2-c0 r2-c1"},
            {"[1-2]", 2, "1 2"},
            {"h.example.org,h_2", 2, "h.example.org h_2"},
            {"n[5]", 1, "n5"},
        };
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
            char host[64], all[256] = "", err[256] = "";
            long c = pg_hostlist_nth(good[i].list, 0, host, sizeof host, err, sizeof err);
            for (long k = 0; k < c && k < 20; k++) {
                pg_hostlist_nth(good[i].list, k, host, sizeof host, err, sizeof err);
                snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", k ? " " : "", host);
            }
            long past = pg_hostlist_nth(good[i].list, c, host, sizeof host, err, sizeof err);
            OK(c == good[i].count && !strcmp(all, good[i].hosts) && past == c && host[0] == 0,
               "hostlist '%s': %ld hosts '%s' %s", good[i].list, c, all, err);
        }
        static const struct {
            const char *list, *err;
        } bad[] = {
            {"", "the host list is empty"},
            {"n[1-", "'n[1-' at character 5: expected a number after '-'"},
            {"n[1-3", "'n[1-3' at character 6: '[' is not closed"},
            {"n[3-1]", "'n[3-1]' at character 3: range goes down (the first number must not exceed the second)"},
            {"n[]", "'n[]' at character 3: expected a number in '[...]'"},
            {"n[a]", "'n[a]' at character 3: expected a number in '[...]'"},
            {"n[1[2]]", "'n[1[2]]' at character 4: expected ',', '-' or ']' in '[...]'"},
            {"n1]", "'n1]' at character 3: ']' without '['"},
            {"a,,b", "'a,,b' at character 3: empty host name"},
            {"a,", "'a,' at character 3: empty host name after ','"},
            {"a b", "'a b' at character 2: not a host name character (letters, digits, '-', '.', '_')"},
            {"n[1234567890]", "'n[1234567890]' at character 3: number too long (at most 9 digits)"},
            {"n[0-99999999]", "'n[0-99999999]' at character 13: names too many hosts"},
            {"a[0-9999]b[0-9999]", "'a[0-9999]b[0-9999]' at character 1: names too many hosts"},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            char host[64], err[256] = "";
            long c = pg_hostlist_nth(bad[i].list, 0, host, sizeof host, err, sizeof err);
            OK(c == -1 && !strcmp(err, bad[i].err), "bad hostlist '%s' refused: %s", bad[i].list, err);
        }
        char tiny[4], err[256];
        OK(pg_hostlist_nth("node[1-2]", 1, tiny, sizeof tiny, err, sizeof err) == -1 &&
               strstr(err, "host name too long"),
           "a host longer than the buffer is refused: %s", err);
    }

    /* ---- world 1: no sockets ---- */
    {
        int w = 1;
        result r[1];
        spec s[1] = {{.rank = 0, .world = 1, .fn = NULL, .arg = &w}};
        run_all(r, s, 1);
        OK(exited(&r[0], 0), "world 1 initialises without a network: %s", r[0].text);
    }
    /* ---- rendezvous + ring of messages, 4 stages ---- */
    {
        int w = 4;
        result r[4];
        spec s[4];
        for (int i = 0; i < 4; i++) s[i] = (spec){.rank = i, .world = 4, .hash = 42, .fn = ring_body, .arg = &w};
        double t0 = now_s();
        run_all(r, s, 4);
        int all = 1;
        for (int i = 0; i < 4; i++) all &= exited(&r[i], 0);
        OK(all, "4 stages meet and pass 20 rounds around a ring (%.2f s) %s%s%s%s", now_s() - t0, r[0].text,
           r[1].text, r[2].text, r[3].text);
    }
    /* ---- several MB both ways at once (the ring holds one step's traffic): no deadlock ---- */
    {
        result r[2];
        spec s[2];
        for (int i = 0; i < 2; i++)
            s[i] = (spec){.rank = i, .world = 2, .hash = 1, .fn = big_body, .send_buf = BIG + 64};
        double t0 = now_s();
        run_all(r, s, 2);
        OK(exited(&r[0], 0) && exited(&r[1], 0) && now_s() - t0 < 8,
           "two stages each send 6 MB before receiving, twice: no deadlock (%.2f s) %s %s",
           now_s() - t0, r[0].text, r[1].text);
        for (int i = 0; i < 2; i++)
            s[i] = (spec){.rank = i, .world = 2, .hash = 1, .fn = big_check_body, .send_buf = BIG};
        run_all(r, s, 2);
        OK(exited(&r[0], 0) && exited(&r[1], 0),
           "6 MB arrive intact both ways, each sender's buffer overwritten as soon as its send returned %s %s",
           r[0].text, r[1].text);
    }
    /* ---- lent sends: from the caller's buffer, in order with the copied ones ---- */
    {
        result r[2];
        spec s[2];
        for (int i = 0; i < 2; i++)
            s[i] = (spec){.rank = i, .world = 2, .hash = 1, .fn = lent_body, .send_buf = 4096};
        double t0 = now_s();
        run_all(r, s, 2);
        OK(exited(&r[0], 0) && exited(&r[1], 0) && now_s() - t0 < 8,
           "lent sends of 6 MB and 200 small ones between copied ones, both sides before receiving, with a 4 KiB "
           "ring: no wait, all in order and intact (%.2f s) %s %s", now_s() - t0, r[0].text, r[1].text);
        for (int i = 0; i < 2; i++)
            s[i] = (spec){.rank = i, .world = 2, .hash = 1, .fn = lent_wait_body};
        run_all(r, s, 2);
        OK(exited(&r[0], 0) && exited(&r[1], 0) && strstr(r[0].text, "1 message to stage 1 still unsent after 0.2 s"),
           "waiting for a lent send the peer does not read times out, says so, and can wait again: %s %s", r[0].text,
           r[1].text);
    }
    /* ---- tag/size mismatch ---- */
    {
        result r[2];
        spec s[2];
        for (int i = 0; i < 2; i++) s[i] = (spec){.rank = i, .world = 2, .hash = 1, .fn = mismatch_body};
        run_all(r, s, 2);
        OK(exited(&r[0], 0) && strstr(r[0].text, " expected tag 6 (16 bytes) from stage 1 but received tag 5 (8 bytes)") &&
               !strstr(r[0].text, "stage 0"),
           "a receive expecting another tag and size names both, not its own stage (the caller does): %s", r[0].text);
    }
    /* ---- timeout, then the same receive resumes ---- */
    {
        result r[2];
        spec s[2];
        for (int i = 0; i < 2; i++) s[i] = (spec){.rank = i, .world = 2, .hash = 1, .fn = timeout_body};
        run_all(r, s, 2);
        OK(exited(&r[0], 0) && strstr(r[0].text, "no message from stage 1 within 0.2 s (expected tag 3, 4 bytes)"),
           "recv times out on time and can be retried: %s", r[0].text);
    }
    /* ---- a send into a full queue waits at most the send timeout, then names the peer ---- */
    {
        result r[2];
        spec s[2];
        for (int i = 0; i < 2; i++) s[i] = (spec){.rank = i, .world = 2, .hash = 1, .fn = full_body, .send_timeout_s = 1.0};
        run_all(r, s, 2);
        int sent = -1, got = -2;
        sscanf(r[0].text, "sent %d", &sent);
        sscanf(r[1].text, "read %d", &got);
        OK(exited(&r[0], 0) && strstr(r[0].text, ": the queue of sends to stage 1 stayed full for 1 s (stage 1 reads "
                                                 "nothing: stopped or hung?)"),
           "a send whose peer reads nothing gives up after the send timeout (1 s), naming the peer: %s", r[0].text);
        OK(exited(&r[1], 0) && sent > 1 && got == sent,
           "... and every message sent before it arrives intact when the peer reads again (%d sent, stage 1: %s)", sent,
           r[1].text);
    }
    /* ---- a receive whose process was stopped meanwhile does not count that time ---- */
    {
        result r[2];
        spec s[2];
        for (int i = 0; i < 2; i++) s[i] = (spec){.rank = i, .world = 2, .hash = 1, .fn = stopped_body, .block_cont = 1};
        int port = free_port();
        for (int i = 0; i < 2; i++) start(&r[i], &s[i], port);
        struct timespec d = {0, 300000000L}, stop = {1, 500000000L};
        nanosleep(&d, NULL);
        kill(r[0].pid, SIGSTOP);
        nanosleep(&stop, NULL);
        kill(r[0].pid, SIGCONT);
        for (int i = 0; i < 2; i++) finish(&r[i]);
        OK(exited(&r[0], 0) && exited(&r[1], 0),
           "a receive (1 s timeout) stopped for 1.5 s, with SIGCONT blocked, gets the message sent after: %s",
           r[0].text);
    }
    /* ---- a peer that exits: pg_net_peer_gone sees it, unread messages stay readable ---- */
    {
        result r[2];
        spec s[2];
        for (int i = 0; i < 2; i++) s[i] = (spec){.rank = i, .world = 2, .hash = 1, .fn = gone_body};
        run_all(r, s, 2);
        OK(exited(&r[0], 0) && exited(&r[1], 0),
           "pg_net_peer_gone: 0 while the peer is up, 1 soon after it exits, with its last message still readable; "
           "1 for no such peer: %s", r[0].text);
    }
    /* ---- world-size mismatch ---- */
    const char *TOK = "0123456789abcdef-the-run-token";
    {
        result r[2];
        spec s[2] = {{.rank = 0, .world = 2, .hash = 1, .run_id = "R", .token = TOK},
                     {.rank = 1, .world = 3, .hash = 1, .run_id = "R", .token = TOK}};
        run_all(r, s, 2);
        const char *want = "stage 1 was started with world size 3 but stage 0 with world size 2";
        OK(exited(&r[0], 3) && strstr(r[0].text, want), "master refuses another world size: %s", r[0].text);
        OK(exited(&r[1], 3) && strstr(r[1].text, "rendezvous refused by master") && strstr(r[1].text, want),
           "the refused stage (holding the run's token) is told both sizes: %s", r[1].text);
        for (int i = 0; i < 2; i++) s[i].token = NULL;
        run_all(r, s, 2);
        OK(exited(&r[0], 3) && strstr(r[0].text, want), "without a token stage 0 still names both sizes: %s", r[0].text);
        OK(exited(&r[1], 3) && strstr(r[1].text, "stage 1 was started with world size 3, unlike stage 0") &&
               !strstr(r[1].text, "size 2"),
           "...but an unauthenticated stage is not told stage 0's: %s", r[1].text);
    }
    /* ---- the run token: challenge and response before anything is read ---- */
    {
        int w = 2;
        result r[3];
        /* a wrong token and a missing one are refused alone, saying so; the
         * run's own stage 1 then joins and the run works */
        spec s[3] = {{.rank = 0, .world = 2, .hash = 1, .run_id = "R", .token = TOK, .fn = ring_body, .arg = &w},
                     {.rank = 1, .world = 2, .hash = 1, .run_id = "R", .token = "not-the-token-of-this-run"},
                     {.rank = 1, .world = 2, .hash = 1, .run_id = "R", .token = TOK, .fn = ring_body, .arg = &w,
                      .start_delay_ms = 400}};
        run_all(r, s, 3);
        OK(exited(&r[1], 3) && strstr(r[1].text, "refused this stage's run token: give every stage of the run the same token"),
           "a stage with another token is refused at the challenge: %s", r[1].text);
        OK(exited(&r[0], 0) && exited(&r[2], 0), "...and the run goes on with the holder of the token: %s | %s",
           r[0].text, r[2].text);
        s[1].token = NULL;
        run_all(r, s, 3);
        OK(exited(&r[1], 3) && strstr(r[1].text, "needs the run's token and this stage has none"),
           "a stage without a token is told the run needs one: %s", r[1].text);
        OK(exited(&r[0], 0) && exited(&r[2], 0), "...and the run goes on: %s | %s", r[0].text, r[2].text);
        /* a stage with a token never greets a master without one */
        spec t[2] = {{.rank = 0, .world = 2, .hash = 1, .run_id = "R", .connect_timeout_s = 1.0},
                     {.rank = 1, .world = 2, .hash = 1, .run_id = "R", .token = TOK}};
        run_all(r, t, 2);
        OK(exited(&r[1], 3) && strstr(r[1].text, "was started without a run token but this stage has one (PIPE_RUN_TOKEN)") &&
               exited(&r[0], 3) && strstr(r[0].text, "refused: a connection from 127.0.0.1 (it holds a run token but "
                                                      "this process was started without one)"),
           "a master without a token and a stage with one: both say so: %s | %s", r[1].text, r[0].text);
    }
    /* ---- duplicate rank ---- */
    {
        result r[3];
        spec s[3] = {{.rank = 0, .world = 3, .hash = 1, .run_id = "R"}, {.rank = 1, .world = 3, .hash = 1, .run_id = "R"},
                     {.rank = 1, .world = 3, .hash = 1, .run_id = "R"}};
        run_all(r, s, 3);
        const char *want = "two processes claim stage 1 (duplicate rank)";
        OK(exited(&r[0], 3) && strstr(r[0].text, want), "master refuses a duplicate rank of its own run: %s", r[0].text);
        OK(exited(&r[1], 3) && exited(&r[2], 3) && strstr(r[1].text, want) && strstr(r[2].text, want),
           "both claimants fail with the reason: %s | %s", r[1].text, r[2].text);
        /* no run id: a second claimant cannot be told from a stranger, so it
         * alone is refused and the run goes on with the first */
        for (int i = 0; i < 3; i++) s[i].run_id = NULL;
        s[0].connect_timeout_s = 1.0;
        s[2].start_delay_ms = 300;
        run_all(r, s, 3);
        OK(exited(&r[2], 3) && strstr(r[2].text, want) && strstr(r[1].text, "the run failed at start-up: rendezvous: only 2 of 3") &&
               strstr(r[0].text, "only 2 of 3 stages reached the master within 1 s (missing stage 2); refused: two processes claim stage 1"),
           "without run ids a duplicate is refused alone and the master goes on waiting: %s | %s | %s", r[0].text,
           r[1].text, r[2].text);
    }
    /* ---- plan hash / model mismatch ---- */
    {
        result r[2];
        spec s[2] = {{.rank = 0, .world = 2, .hash = 0x1111, .run_id = "R", .token = TOK},
                     {.rank = 1, .world = 2, .hash = 0x2222, .run_id = "R", .token = TOK}};
        run_all(r, s, 2);
        const char *want = "stage 1 was built from another model or plan (hash 0000000000002222, expected "
                           "0000000000001111): rebuild all stages from the same pipegen output";
        OK(exited(&r[0], 3) && strstr(r[0].text, want), "master refuses another plan hash: %s", r[0].text);
        OK(exited(&r[1], 3) && strstr(r[1].text, want), "the stage with the other hash (and the token) reports it: %s",
           r[1].text);
        for (int i = 0; i < 2; i++) s[i].token = NULL;
        run_all(r, s, 2);
        OK(exited(&r[0], 3) && strstr(r[0].text, want), "without a token stage 0 names both hashes: %s", r[0].text);
        OK(exited(&r[1], 3) && strstr(r[1].text, "stage 1 was built from another model or plan than stage 0 (its plan "
                                                 "hash is 0000000000002222)") && !strstr(r[1].text, "1111"),
           "...but nobody who asks unauthenticated hears the expected hash: %s", r[1].text);
        spec m[2] = {{.rank = 0, .world = 2, .hash = 1, .run_id = "R", .token = TOK},
                     {.rank = 1, .world = 2, .hash = 1, .model = "gpt", .run_id = "R", .token = TOK}};
        run_all(r, m, 2);
        OK(exited(&r[1], 3) && strstr(r[1].text, "stage 1 was built from another model (model 'gpt', expected 'mlp')"),
           "another model name is refused: %s", r[1].text);
        for (int i = 0; i < 2; i++) m[i].token = NULL;
        run_all(r, m, 2);
        OK(exited(&r[1], 3) && strstr(r[1].text, "built from another model than stage 0 (its model is 'gpt')") &&
               !strstr(r[1].text, "'mlp'"),
           "...without a token, not naming stage 0's model: %s", r[1].text);
    }
    /* ---- unreachable master ---- */
    {
        result r[1];
        spec s[1] = {{.rank = 1, .world = 2, .hash = 1, .connect_timeout_s = 0.3}};
        int port = free_port();
        double t0 = now_s();
        start(&r[0], &s[0], port);
        finish(&r[0]);
        char want[128];
        snprintf(want, sizeof want, "cannot reach master 127.0.0.1:%d after 0.3 s: Connection refused", port);
        OK(exited(&r[0], 3) && strstr(r[0].text, want) && !strstr(r[0].text, "stage 1") && now_s() - t0 < 2.0,
           "unreachable master: gives up after the timeout (%.2f s), not naming its own stage: %s", now_s() - t0,
           r[0].text);
    }
    /* ---- master port in use ---- */
    {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        socklen_t sl = sizeof a;
        bind(fd, (struct sockaddr *)&a, sizeof a);
        listen(fd, 1);
        getsockname(fd, (struct sockaddr *)&a, &sl);
        int port = ntohs(a.sin_port);
        result r[1];
        spec s[1] = {{.rank = 0, .world = 2, .hash = 1, .connect_timeout_s = 0.5}};
        start(&r[0], &s[0], port);
        finish(&r[0]);
        close(fd);
        char want[160];
        snprintf(want, sizeof want,
                 "cannot listen on 127.0.0.1:%d: Address already in use (another pipegen run? set PIPE_MASTER)", port);
        OK(exited(&r[0], 3) && strstr(r[0].text, want), "master port in use: %s", r[0].text);
    }
    /* ---- strangers: another run, a forged hello, idle connections ---- */
    {
        /* a stage of another run (another id) greets first: refused alone;
         * this run's own stage 1 then joins and the run works */
        int w = 2;
        result r[3];
        spec s[3] = {{.rank = 0, .world = 2, .hash = 1, .run_id = "run-A", .fn = ring_body, .arg = &w},
                     {.rank = 1, .world = 2, .hash = 1, .run_id = "run-B"},
                     {.rank = 1, .world = 2, .hash = 1, .run_id = "run-A", .fn = ring_body, .arg = &w,
                      .start_delay_ms = 300}};
        run_all(r, s, 3);
        OK(exited(&r[1], 3) && strstr(r[1].text, "belongs to another run than this stage's (run run-B): two runs share "
                                                 "the master port") && !strstr(r[1].text, "run-A"),
           "a stage of another run is refused, not told the run's id: %s", r[1].text);
        OK(exited(&r[0], 0) && exited(&r[2], 0), "...and the run it knocked at goes on unharmed: %s | %s", r[0].text,
           r[2].text);
        /* a hello with no run id, a mismatching plan and the same rank: also a stranger */
        spec f[3] = {{.rank = 0, .world = 2, .hash = 1, .run_id = "run-A", .fn = ring_body, .arg = &w},
                     {.rank = 1, .world = 3, .hash = 7},
                     {.rank = 1, .world = 2, .hash = 1, .run_id = "run-A", .fn = ring_body, .arg = &w,
                      .start_delay_ms = 300}};
        run_all(r, f, 3);
        OK(exited(&r[1], 3) && exited(&r[0], 0) && exited(&r[2], 0),
           "a forged hello (no run id) cannot end a run: %s | %s | %s", r[1].text, r[0].text, r[2].text);
    }
    {
        /* 20 connections that never say anything, then the real stage 1: it
         * joins at once (each silent one is dropped on its own clock) */
        int port = free_port(), w = 2;
        result r[2];
        spec s[2] = {{.rank = 0, .world = 2, .hash = 1, .run_id = "R", .fn = ring_body, .arg = &w},
                     {.rank = 1, .world = 2, .hash = 1, .run_id = "R", .fn = ring_body, .arg = &w,
                      .start_delay_ms = 500}};
        double t0 = now_s();
        start(&r[0], &s[0], port);
        int idle[20], n = 0;
        for (int tries = 0; tries < 200 && n < 20; tries++) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in a;
            memset(&a, 0, sizeof a);
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            a.sin_port = htons((uint16_t)port);
            if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
                idle[n++] = fd;
            } else {
                close(fd);
                struct timespec d = {0, 20000000L};
                nanosleep(&d, NULL);
            }
        }
        start(&r[1], &s[1], port);
        finish(&r[1]);
        double el = now_s() - t0;
        finish(&r[0]);
        for (int i = 0; i < n; i++) close(idle[i]);
        OK(n == 20 && exited(&r[0], 0) && exited(&r[1], 0) && el < 4.0,
           "20 silent connections do not hold up the rendezvous (%d held, stage 1 done after %.2f s): %s | %s", n, el,
           r[0].text, r[1].text);
    }
    /* ---- the master listens on the address PIPE_MASTER names ---- */
    {
        int port = free_port();
        result r[1];
        spec s[1] = {{.rank = 0, .world = 2, .hash = 1, .connect_timeout_s = 1.0}};
        start(&r[0], &s[0], port);
        /* while it listens on 127.0.0.1:port, 127.0.0.2:port is free (not so
         * for a socket bound to every address) */
        int bound = -1;
        for (int tries = 0; tries < 50; tries++) {
            int probe = socket(AF_INET, SOCK_STREAM, 0), busy = 0;
            struct sockaddr_in a;
            memset(&a, 0, sizeof a);
            a.sin_family = AF_INET;
            a.sin_port = htons((uint16_t)port);
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            busy = connect(probe, (struct sockaddr *)&a, sizeof a) == 0; /* the master is up */
            close(probe);
            if (!busy) {
                struct timespec d = {0, 20000000L};
                nanosleep(&d, NULL);
                continue;
            }
            int other = socket(AF_INET, SOCK_STREAM, 0);
            a.sin_addr.s_addr = htonl(0x7f000002);
            bound = bind(other, (struct sockaddr *)&a, sizeof a) == 0;
            close(other);
            break;
        }
        finish(&r[0]);
        OK(bound == 1, "a master at 127.0.0.1 listens on loopback only (127.0.0.2:%d was free: %d)", port, bound);
    }
    /* ---- a master that waits for a stage that never comes ---- */
    {
        result r[1];
        spec s[1] = {{.rank = 0, .world = 3, .hash = 1, .connect_timeout_s = 0.3}};
        run_all(r, s, 1);
        OK(exited(&r[0], 3) && strstr(r[0].text, "only 1 of 3 stages reached the master within 0.3 s (missing stage 1, 2)"),
           "master names the stages that never came: %s", r[0].text);
    }
    /* ---- a stage killed with SIGKILL ---- */
    {
        int ready[2];
        if (pipe(ready) != 0) return 1;
        result r[3];
        spec s[3];
        for (int i = 0; i < 3; i++)
            s[i] = (spec){.rank = i, .world = 3, .hash = 1, .fn = killed_body, .arg = &ready[1], .send_buf = 1u << 16};
        s[0].fn = NULL; /* stage 0 only takes part in the rendezvous */
        int port = free_port();
        for (int i = 0; i < 3; i++) start(&r[i], &s[i], port);
        close(ready[1]);
        char c;
        ssize_t got = read(ready[0], &c, 1);
        close(ready[0]);
        struct timespec ts = {0, 200000000L};
        nanosleep(&ts, NULL);
        kill(r[2].pid, SIGKILL);
        for (int i = 0; i < 3; i++) finish(&r[i]);
        OK(got == 1 && exited(&r[1], 0) && strstr(r[1].text, "stage 2 closed its connection (it exited or was killed)"),
           "a killed stage: recv and send on its link return PG_NET_CLOSED quickly: %s", r[1].text);
        OK(WIFSIGNALED(r[2].status) && WTERMSIG(r[2].status) == SIGKILL, "stage 2 was killed");
    }
    return DONE();
}

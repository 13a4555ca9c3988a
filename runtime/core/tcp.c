/* runtime/core/tcp.c — the TCP transport (pg_tcp.h): rendezvous through the
 * master (rank 0), a full mesh of connections, one sender thread per peer that
 * drains a byte ring filled by pg_tcp_send and the buffers lent to it by
 * pg_tcp_send_rank_lent (written in place, in queue order), and receives read
 * straight into the caller's buffer with poll() and a deadline.
 *
 * Wire formats (all integers little-endian), protocol 3:
 *   challenge (the accepting side first, 44 bytes): u32 magic "PGNC", u32
 *     version (3), u32 flags (1: this run has a token), u8 nonce[32]
 *   response (76 bytes): u32 magic "PGNA", u32 version, u32 flags (1: a token),
 *     u8 nonce[32], u8 mac[32] = HMAC-SHA-256(token, label, challenge nonce,
 *     own nonce) (zeros without a token); read before anything else
 *   proof back (with a token, 40 bytes): u32 magic "PGNP", u32 version, u8 mac[32]
 *   hello (peer -> master, 296 bytes + n): u32 magic "PGNH", u32 version,
 *     u32 rank, u32 world, u64 plan_hash, u32 listen_port, u32 n, u32 pid,
 *     u32 0, char model[128], char run_id[64], char host[64], then n bytes of
 *     the agreement text (pg_net_config.agree)
 *   reply (master -> peer, 44 bytes + n): u32 magic "PGNR", u32 status (0 ok,
 *     1 refused, 2 the run failed elsewhere), u32 n, u8 mac[32] over the
 *     header's first 12 bytes and what follows (zeros without a token);
 *     refused or failed: n bytes of reason; ok: n == world entries of
 *     {char addr[64], u32 port}
 *   mesh hello (rank j -> rank i, i < j, after the challenge, 80 bytes): u32
 *     magic "PGNM", u32 rank, u64 plan_hash, char run_id[64]
 *   message: u32 magic "PGNS", u32 tag, u64 bytes, then the payload. */
#include "pg_tcp.h"
#include "pg_le.h"
#include "pg_limits.h"
#include "pg_version.h"
#include "sha256.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define CHAL_MAGIC 0x434e4750u  /* "PGNC" */
#define AUTH_MAGIC 0x414e4750u  /* "PGNA" */
#define PROOF_MAGIC 0x504e4750u /* "PGNP" */
#define HELLO_MAGIC 0x484e4750u /* "PGNH" */
#define REPLY_MAGIC 0x524e4750u /* "PGNR" */
#define MESH_MAGIC 0x4d4e4750u  /* "PGNM" */
#define MSG_MAGIC 0x534e4750u   /* "PGNS" */
#define PROTO_VERSION 3u
#define NONCE_BYTES 32
#define MAC_BYTES PG_SHA256_BYTES
#define CHAL_BYTES (12 + NONCE_BYTES)
#define AUTH_BYTES (12 + NONCE_BYTES + MAC_BYTES)
#define PROOF_BYTES (8 + MAC_BYTES)
#define REPLY_BYTES (12 + MAC_BYTES)
#define REPLY_OK 0u
#define REPLY_REFUSED 1u /* this process is refused (the reason follows) */
#define REPLY_FAILED 2u  /* the run failed at start-up for another process's reason (it follows) */
#define MODEL_BYTES 128
#define RUNID_BYTES 64
#define HOST_BYTES 64
#define HELLO_BYTES (40 + MODEL_BYTES + RUNID_BYTES + HOST_BYTES)
#define MESH_BYTES (16 + RUNID_BYTES)
#define ADDR_BYTES 64
#define MSG_HDR 16
#define RING_SLACK (64u << 10) /* headroom for headers and links with no planned traffic */

/* One connection to another stage. The ring is written by the main thread
 * (pg_tcp_send) and drained by the sender thread; both under mu. */
typedef struct peer {
    int fd;                 /* -1: no link (self, or world 1) */
    pthread_t thr;
    int thr_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* signalled on every change of used, dead or stop */
    unsigned char *ring;    /* [cap] */
    size_t cap, head, used; /* bytes [head, head+used) mod cap are queued */
    /* Lent payloads (pg_tcp_send_rank_lent): written from the caller's
     * buffer, each after the ring's first `at` bytes (counted from the
     * start: drained counts the ring bytes written so far); a FIFO of
     * lent_cap that grows, so a lent send never waits for the peer. */
    struct lent { const unsigned char *buf; size_t bytes; uint64_t at; } *lent;
    int lent_head, lent_n, lent_cap;
    uint64_t enq, drained;  /* ring bytes queued and written since the start */
    uint64_t lent_seq, lent_done; /* lent payloads queued and written since the start */
    int stop, dead;         /* dead: the sender thread saw a write error */
    int dead_errno;
    /* receive state, so a recv that timed out part-way can be resumed */
    unsigned char rx_hdr[MSG_HDR];
    size_t rx_hdr_got, rx_got;
    int rx_broken;          /* stream out of step after a mismatch */
    int rx_closed;
} peer;

typedef struct keyring {
    const unsigned char *token; /* the run token (pg_launch.token), token_len bytes; 0: none */
    size_t token_len;
} keyring;

struct pg_tcp {
    int rank, world;
    double send_timeout;    /* a send's wait for room in a full queue (pg_net_config.send_timeout_s) */
    int P, base;            /* stages per replica; rank of this replica's stage 0 (rank = replica x P + stage) */
    peer *p;                /* [world] */
    int lost;               /* a link ended (pg_tcp_peer_lost) */
    char err[512];
    /* the run's identity, kept for the doorman (the launch it came from may be gone) */
    char run_id[RUNID_BYTES];
    unsigned char token[256];
    keyring keys;           /* over token */
    int master_port;
    /* stage 0: who holds each rank (host, pid), for "rank 1 is already taken
     * by host:pid"; and the doorman, a thread answering at the master's
     * listening socket for the whole run */
    char (*host)[HOST_BYTES]; /* [world] */
    uint32_t *pid;            /* [world] */
    int door_fd, door_stop[2], door_started, door_logged;
    pthread_t door_thr;
};

/* ---- small helpers ------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void seterr(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* ---- a wait's own clock ------------------------------------------------------
 * A receive (or a wait for sends) gives up after timeout_s of its own time:
 * the time it waited while the process ran. A stopped process (SIGSTOP,
 * Ctrl-Z to piperun, which stops every stage) does not run, and that time is
 * no peer's delay. So a wait blocks in slices of at most WAIT_SLICE_S and
 * looks at the clock between them: an interval that took more than WAIT_SLACK_S
 * longer than it asked for (the process was stopped, or not scheduled) counts
 * only what it asked for. No signal is involved: it once relied on a SIGCONT
 * handler that another thread might run after the wait had already seen its
 * deadline pass, and a receive timed out on a message its peer had sent. */
#define WAIT_SLICE_S 0.1
#define WAIT_SLACK_S 0.25

typedef struct wclock {
    double timeout;            /* what the wait may take of its own time */
    double used;               /* its own time so far */
    double last, asked;        /* the previous look at the clock, and what the call since asked for */
} wclock;

static double now_s(void);

static void wc_start(wclock *w, double timeout)
{
    w->timeout = timeout;
    w->used = 0;
    w->last = now_s();
    w->asked = 0;
}

/* Look at the clock: the interval since the last look counts, but an
 * overrun past what it asked for (+ the slack) does not. Returns the wait's
 * own time left (<= 0: it is up). */
static double wc_left(wclock *w)
{
    double now = now_s(), took = now - w->last;
    w->used += took > w->asked + WAIT_SLACK_S ? w->asked : took;
    w->last = now;
    w->asked = 0;
    return w->timeout - w->used;
}

/* The next blocking call's slice, in ms (0: the wait is up); its length is
 * what the next wc_left counts at most. */
static int wc_slice_ms(wclock *w)
{
    double left = wc_left(w);
    if (left <= 0)
        return 0;
    w->asked = left < WAIT_SLICE_S ? left : WAIT_SLICE_S;
    return (int)(w->asked * 1000.0) + 1;
}

static int ms_left(double deadline)
{
    double left = deadline - now_s();
    if (left <= 0) return 0;
    if (left > 1e6) return 1000000000;
    return (int)(left * 1000.0) + 1;
}

/* Keepalive and a user timeout, so a link that is cut (host down, cable or
 * veth gone: no FIN, no RST) fails within ~8 s even while nothing is sent:
 * probes after 2 s idle, every 1 s; unacknowledged data or probes for 6 s
 * abort the connection (ETIMEDOUT). A live peer's kernel answers probes even
 * while its process computes, so only a dead link trips them. */
#define KEEPALIVE_IDLE_S 2
#define KEEPALIVE_INTVL_S 1
#define KEEPALIVE_CNT 4
#define USER_TIMEOUT_MS 6000

static void tune_socket(int fd)
{
    int one = 1, idle = KEEPALIVE_IDLE_S, intvl = KEEPALIVE_INTVL_S, cnt = KEEPALIVE_CNT;
    unsigned ut = USER_TIMEOUT_MS;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof ut);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
}

/* Write all of b; 0 ok, -1 with errno (EPIPE when the peer is gone). Blocking. */
static int write_all(int fd, const void *b, size_t n)
{
    const unsigned char *p = b;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Write all of iov[0..n) (modified as it goes); 0 ok, -1 with errno. Blocking. */
static int writev_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        struct msghdr m;
        memset(&m, 0, sizeof m);
        m.msg_iov = iov;
        m.msg_iovlen = (size_t)n;
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

/* Read exactly n bytes by deadline. 0 ok; -1 error (errno), -2 EOF, -3 timeout. */
static int read_until(int fd, void *b, size_t n, double deadline, size_t *got)
{
    unsigned char *p = b;
    size_t g = got ? *got : 0;
    int rc = 0;
    while (g < n) {
        /* what has arrived already is read without a poll() first */
        ssize_t r0 = recv(fd, p + g, n - g, MSG_DONTWAIT);
        if (r0 > 0) {
            g += (size_t)r0;
            continue;
        }
        if (r0 == 0) { rc = -2; break; }
        if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) { rc = -1; break; }
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int pr = poll(&pf, 1, ms_left(deadline));
        if (pr < 0) {
            if (errno == EINTR) continue;
            rc = -1;
            break;
        }
        if (pr == 0) { rc = -3; break; }
        ssize_t r = recv(fd, p + g, n - g, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            rc = -1;
            break;
        }
        if (r == 0) { rc = -2; break; }
        g += (size_t)r;
    }
    if (got) *got = g;
    return rc;
}

/* read_until on a wait's own clock (wclock): 0 ok; -1 error (errno), -2 EOF,
 * -3 its time is up. */
static int read_wc(int fd, void *b, size_t n, wclock *w, size_t *got)
{
    unsigned char *p = b;
    size_t g = *got;
    int rc = 0;
    while (g < n) {
        ssize_t r0 = recv(fd, p + g, n - g, MSG_DONTWAIT); /* what has arrived already, without a poll() first */
        if (r0 > 0) {
            g += (size_t)r0;
            continue;
        }
        if (r0 == 0) { rc = -2; break; }
        if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) { rc = -1; break; }
        int ms = wc_slice_ms(w);
        if (ms == 0) { rc = -3; break; }
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, ms) < 0 && errno != EINTR) { rc = -1; break; }
    }
    *got = g;
    return rc;
}

/* Connect to host:port once, waiting at most until deadline. fd or -1 (errno). */
static int connect_once(const char *host, int port, double deadline)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int gr = getaddrinfo(host, ps, &hints, &res);
    if (gr != 0) {
        errno = gr == EAI_SYSTEM ? errno : EHOSTUNREACH;
        return -1;
    }
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd < 0) { freeaddrinfo(res); return -1; }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int cr = connect(fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (cr < 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (cr < 0) {
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int pr;
        do pr = poll(&pf, 1, ms_left(deadline));
        while (pr < 0 && errno == EINTR);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (pr <= 0) soerr = pr == 0 ? ETIMEDOUT : errno;
        else getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr) {
            close(fd);
            errno = soerr;
            return -1;
        }
    }
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    tune_socket(fd);
    return fd;
}

/* A wait at start-up (a connection retried, greetings awaited) that lasts
 * longer than this is told on stderr, and again every as long: a stage never
 * waits in silence for the whole --connect-timeout. */
#define WAIT_NOTE_S 10.0
/* One connection attempt waits at most this long for its handshake, then a
 * fresh socket tries again: a SYN lost or dropped (a listener's full queue, a
 * filter) is retried from a new port instead of holding the whole timeout. */
#define CONNECT_TRY_S 5.0

/* Connect with retries and exponential back-off until timeout_s has passed;
 * every WAIT_NOTE_S of trying, a line "<me>: <whom> not reachable yet ...". */
static int connect_retry(const char *host, int port, double timeout_s, int *last_errno, int me, const char *whom)
{
    double t0 = now_s(), deadline = t0 + timeout_s, wait = 0.01, note = t0 + WAIT_NOTE_S;
    long tries = 0;
    for (;;) {
        double try_end = now_s() + CONNECT_TRY_S;
        int fd = connect_once(host, port, try_end < deadline ? try_end : deadline);
        if (fd >= 0) return fd;
        *last_errno = errno;
        tries++;
        double now = now_s(), left = deadline - now;
        if (left <= 0) return -1;
        if (now >= note) {
            fprintf(stderr, "stage %d: %s %s:%d not reachable yet after %.0f s (%s, %ld tries); trying until %g s "
                    "(--connect-timeout)\n", me, whom, host, port, now - t0, strerror(*last_errno), tries, timeout_s);
            while (note <= now) note += WAIT_NOTE_S;
        }
        double s = wait < left ? wait : left;
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        nanosleep(&ts, NULL);
        wait = wait * 2 > 1.0 ? 1.0 : wait * 2;
    }
}

/* A listening socket on addr:port (port 0: ephemeral; addr in network order,
 * INADDR_LOOPBACK stays loopback); fd and the bound port, or -1 (errno). */
static int listen_on(in_addr_t addr, int port, int *bound, int *err_no)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) { *err_no = errno; return -1; }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = addr;
    a.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 128) < 0) {
        *err_no = errno;
        close(fd);
        return -1;
    }
    socklen_t sl = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &sl);
    *bound = ntohs(a.sin_port);
    return fd;
}

/* host -> its IPv4 address (network order); -1 when it does not resolve. */
static int resolve4(const char *host, in_addr_t *out)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res)
        return -1;
    *out = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
    freeaddrinfo(res);
    return 0;
}

/* ---- who may talk to us: the challenge and its response ----------------------
 * Every accepted connection is sent a challenge (a fresh random nonce, and
 * whether this run has a token) before a byte is read from it. The other
 * side answers with a nonce of its own and HMAC-SHA-256(token, label, our
 * nonce, its nonce); only when that is right (or neither side has a token)
 * is the rest of its greeting read at all, and with a token we first prove
 * the same back (label reversed), so a process sends its greeting only to a
 * holder of the token. The master's answer carries a MAC over its bytes too.
 * The labels keep one kind of proof from passing for another. Without a
 * token nobody is authenticated: the challenge still comes first, and an
 * unauthenticated process is never told stage 0's own values (model, plan
 * hash, run id, options). */
#define LABEL_PEER "pipegen rendezvous 3: a stage to the master"
#define LABEL_MASTER "pipegen rendezvous 3: the master to a stage"
#define LABEL_ANSWER "pipegen rendezvous 3: the master's answer"
#define LABEL_MESH "pipegen rendezvous 3: a higher rank to a lower"
#define LABEL_MESH_BACK "pipegen rendezvous 3: a lower rank to a higher"

static int make_nonce(unsigned char *b)
{
    size_t got = 0;
    while (got < NONCE_BYTES) {
        ssize_t r = getrandom(b + got, NONCE_BYTES - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

/* HMAC over label, nonces a and b, then m1[l1] and m2[l2]; zeros without a token. */
static void rdv_mac(const keyring *k, const char *label, const unsigned char *a, const unsigned char *b,
                    const void *m1, size_t l1, const void *m2, size_t l2, unsigned char out[MAC_BYTES])
{
    if (!k->token_len) {
        memset(out, 0, MAC_BYTES);
        return;
    }
    const void *parts[] = {label, a, b, m1, m2};
    size_t lens[] = {strlen(label) + 1, NONCE_BYTES, NONCE_BYTES, l1, l2};
    pg_hmac_sha256(k->token, k->token_len, parts, lens, 5, out);
}

/* ---- accepting greetings, each connection on its own clock -------------------
 * A listening socket and the connections accepted on it are polled together;
 * each connection must deliver its greeting within HELLO_TIMEOUT_S of being
 * accepted or it is closed, without holding up the others (a port scan, an
 * idle client, a half-started process). At most MAX_PENDING wait at once:
 * beyond that the oldest is dropped. */
#define HELLO_TIMEOUT_S 5.0
#define MAX_PENDING 64
#define MAX_AGREE_BYTES (1u << 20)
#define MAX_REASON_BYTES 4096u
#define MAX_LOGGED 5 /* refusals printed by stage 0; later ones are counted */

typedef struct pending {
    int fd;
    double deadline;
    char addr[ADDR_BYTES];
    unsigned char nonce[NONCE_BYTES];      /* our challenge to it */
    unsigned char peer_nonce[NONCE_BYTES]; /* its own, from its response */
    int authed;                            /* its response passed: the greeting after it is read */
    unsigned char *buf;                    /* [cap]: its response (AUTH_BYTES), then its greeting */
    size_t got, cap;
} pending;

/* What the caller does with a connection's greeting (the bytes after its
 * response): need() says how many bytes the greeting has so far as it is
 * known (0: drop it, not ours or malformed; never 0 for "complete": a
 * complete greeting returns its length); done() takes a complete one, keeps
 * p->fd (setting it to -1) or leaves it to the loop to close: 0 go on, 1
 * finished, -1 failed. refused() hears of a connection refused
 * for its response (NULL: nobody keeps count). */
typedef struct greeter {
    const keyring *keys;
    const char *label, *back_label; /* what a response proves, and our proof back */
    size_t (*need)(void *arg, const unsigned char *b, size_t got);
    int (*done)(void *arg, pending *p, const unsigned char *b, size_t len);
    void (*refused)(void *arg, const char *addr, const char *why);
    void *arg;
    int stop_fd;                    /* readable: the loop ends (0); -1: none */
    void (*waiting)(void *arg, double waited); /* every WAIT_NOTE_S of the loop, or NULL */
} greeter;

static void pending_drop(pending *p)
{
    if (p->fd >= 0) close(p->fd);
    free(p->buf);
    memset(p, 0, sizeof *p);
    p->fd = -1;
}

/* The reply (status, body) to the process on p: header, the MAC of header
 * and body under LABEL_ANSWER (zeros unless p proved the token), body. */
static void send_reply(const keyring *k, const pending *p, uint32_t status, const char *body)
{
    size_t n = strlen(body);
    if (n > MAX_REASON_BYTES) n = MAX_REASON_BYTES;
    unsigned char h[REPLY_BYTES];
    pg_put32(h, REPLY_MAGIC);
    pg_put32(h + 4, status);
    pg_put32(h + 8, (uint32_t)n);
    if (p->authed) rdv_mac(k, LABEL_ANSWER, p->peer_nonce, p->nonce, h, 12, body, n, h + 12);
    else memset(h + 12, 0, MAC_BYTES);
    if (write_all(p->fd, h, sizeof h) == 0) write_all(p->fd, body, n);
}

/* p's complete response: NULL when it passes (its nonce kept), else what to
 * tell it; *why says it for stage 0's own output. */
static const char *response_check(const greeter *g, pending *p, const char **why)
{
    const unsigned char *b = p->buf;
    int theirs = (pg_get32(b + 8) & 1) != 0, ours = g->keys->token_len > 0;
    if (theirs && !ours) {
        *why = "it holds a run token but this process was started without one";
        return "this process holds a run token but the process at this address was started without one";
    }
    if (!theirs && ours) {
        *why = "it has no run token";
        return "the run at this address needs its run token (PIPE_RUN_TOKEN or PIPE_RUN_TOKEN_FILE) and this "
               "process has none";
    }
    if (ours) {
        unsigned char want[MAC_BYTES];
        rdv_mac(g->keys, g->label, p->nonce, b + 12, NULL, 0, NULL, 0, want);
        if (!pg_equal_ct(want, b + 12 + NONCE_BYTES, MAC_BYTES)) {
            *why = "its run token is not this run's";
            return "this process's run token is not the token of the run at this address (PIPE_RUN_TOKEN, "
                   "PIPE_RUN_TOKEN_FILE)";
        }
    }
    memcpy(p->peer_nonce, b + 12, NONCE_BYTES);
    return NULL;
}

enum { GS_WAIT, GS_DROP, GS_GO_ON, GS_FINISHED, GS_FAILED };

/* Read what p's response and greeting still need, as far as the socket has
 * it; check the response once complete; hand a complete greeting to done().
 * GS_WAIT (more to come), GS_DROP (p to be dropped), or what done() said. */
static int greet_step(const greeter *g, pending *p)
{
    for (;;) {
        size_t want;
        if (!p->authed && p->got >= 8 && (pg_get32(p->buf) == HELLO_MAGIC || pg_get32(p->buf) == AUTH_MAGIC) &&
            pg_get32(p->buf + 4) != PROTO_VERSION) { /* an older or newer pipegen */
            char why[200];
            seterr(why, sizeof why, "a stage speaks rendezvous protocol %u but the process at this address speaks %u: "
                   "rebuild all stages with the same pipegen", pg_get32(p->buf + 4), PROTO_VERSION);
            send_reply(g->keys, p, REPLY_REFUSED, why);
            if (g->refused) g->refused(g->arg, p->addr, why);
            return GS_DROP;
        }
        if (!p->authed) {
            want = p->got < 8 ? 8 : pg_get32(p->buf) == AUTH_MAGIC ? AUTH_BYTES : 0;
        } else {
            size_t w = g->need(g->arg, p->buf + AUTH_BYTES, p->got - AUTH_BYTES);
            want = w ? AUTH_BYTES + w : 0; /* 0: a length over the limit is "not ours", never "complete" */
        }
        if (want == 0 || want > AUTH_BYTES + HELLO_BYTES + MAX_AGREE_BYTES) return GS_DROP;
        if (want > p->got) {
            if (want > p->cap) {
                unsigned char *nb = realloc(p->buf, want);
                if (!nb) return GS_DROP;
                p->buf = nb;
                p->cap = want;
            }
            ssize_t r = recv(p->fd, p->buf + p->got, want - p->got, MSG_DONTWAIT);
            if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return GS_WAIT;
            if (r <= 0) return GS_DROP;
            p->got += (size_t)r;
            continue;
        }
        if (!p->authed) {
            const char *why = NULL, *tell = response_check(g, p, &why);
            if (tell) {
                send_reply(g->keys, p, REPLY_REFUSED, tell);
                if (g->refused) g->refused(g->arg, p->addr, why);
                return GS_DROP;
            }
            p->authed = 1;
            if (g->keys->token_len) { /* our proof back, before it sends anything it would not tell a stranger */
                unsigned char pr[PROOF_BYTES];
                pg_put32(pr, PROOF_MAGIC);
                pg_put32(pr + 4, PROTO_VERSION);
                rdv_mac(g->keys, g->back_label, p->peer_nonce, p->nonce, NULL, 0, NULL, 0, pr + 8);
                if (write_all(p->fd, pr, sizeof pr) != 0) return GS_DROP;
            }
            continue;
        }
        int d = g->done(g->arg, p, p->buf + AUTH_BYTES, p->got - AUTH_BYTES);
        return d == 0 ? GS_GO_ON : d > 0 ? GS_FINISHED : GS_FAILED;
    }
}

/* A connection just accepted into p: its challenge sent. 0, or -1 (drop it). */
static int pending_open(const greeter *g, pending *p, int fd, const char *addr)
{
    memset(p, 0, sizeof *p);
    p->fd = fd;
    p->deadline = now_s() + HELLO_TIMEOUT_S;
    snprintf(p->addr, sizeof p->addr, "%s", addr);
    if (make_nonce(p->nonce)) return -1;
    unsigned char c[CHAL_BYTES];
    pg_put32(c, CHAL_MAGIC);
    pg_put32(c + 4, PROTO_VERSION);
    pg_put32(c + 8, g->keys->token_len ? 1u : 0u);
    memcpy(c + 12, p->nonce, NONCE_BYTES);
    /* a new connection's send buffer takes it whole */
    return send(fd, c, sizeof c, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof c ? 0 : -1;
}

/* Run the greeting loop on lfd until done() says finished (0), fails (-1),
 * stop_fd becomes readable (0) or the deadline passes (-3). */
static int greet_loop(int lfd, double deadline, const greeter *g)
{
    pending pd[MAX_PENDING];
    struct pollfd pf[MAX_PENDING + 2];
    for (int i = 0; i < MAX_PENDING; i++) { memset(&pd[i], 0, sizeof pd[i]); pd[i].fd = -1; }
    /* a connection poll() saw may be gone by accept(): never block there */
    fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
    int rc = -3;
    double pause_until = 0; /* out of descriptors: stop accepting for a moment */
    double t0 = now_s(), note = t0 + WAIT_NOTE_S;
    for (;;) {
        double now = now_s(), wake = deadline;
        if (g->waiting && now >= note && now < deadline) {
            g->waiting(g->arg, now - t0);
            while (note <= now) note += WAIT_NOTE_S;
        }
        if (g->waiting && note < wake) wake = note;
        for (int i = 0; i < MAX_PENDING; i++) {
            if (pd[i].fd >= 0 && pd[i].deadline <= now) pending_drop(&pd[i]); /* silent too long */
            else if (pd[i].fd >= 0 && pd[i].deadline < wake) wake = pd[i].deadline;
        }
        if (now >= deadline) break;
        int np = 0, idx[MAX_PENDING + 2];
        if (now >= pause_until) { pf[np].fd = lfd; pf[np].events = POLLIN; idx[np++] = -1; }
        else if (pause_until < wake) wake = pause_until;
        if (g->stop_fd >= 0) { pf[np].fd = g->stop_fd; pf[np].events = POLLIN; idx[np++] = -2; }
        for (int i = 0; i < MAX_PENDING; i++)
            if (pd[i].fd >= 0) { pf[np].fd = pd[i].fd; pf[np].events = POLLIN; idx[np++] = i; }
        int pr = poll(pf, (nfds_t)np, ms_left(wake));
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) { rc = -1; break; }
        int finished = 0, accept_now = 0;
        for (int j = 0; j < np && !finished; j++) {
            if (!pf[j].revents) continue;
            if (idx[j] == -1) { accept_now = 1; continue; }
            if (idx[j] == -2) { rc = 0; finished = 1; break; }
            pending *p = &pd[idx[j]];
            int s = greet_step(g, p);
            if (s == GS_WAIT) continue;
            if (s == GS_FINISHED || s == GS_FAILED) { rc = s == GS_FINISHED ? 0 : -1; finished = 1; }
            pending_drop(p); /* done() closed or kept its fd */
        }
        if (finished) break;
        if (accept_now) {
            struct sockaddr_in a;
            socklen_t sl = sizeof a;
            int fd = accept(lfd, (struct sockaddr *)&a, &sl);
            if (fd < 0) {
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                    pause_until = now_s() + 0.1; /* it stays readable: do not spin */
                continue; /* EINTR, ECONNABORTED, EAGAIN: try again */
            }
            tune_socket(fd);
            int slot = -1;
            double oldest = 0;
            for (int i = 0; i < MAX_PENDING; i++)
                if (pd[i].fd < 0) { slot = i; break; }
                else if (slot < 0 || pd[i].deadline < oldest) { slot = i; oldest = pd[i].deadline; }
            if (pd[slot].fd >= 0) pending_drop(&pd[slot]); /* full: the oldest goes */
            char as[ADDR_BYTES];
            inet_ntop(AF_INET, &a.sin_addr, as, sizeof as);
            if (pending_open(g, &pd[slot], fd, as) != 0) pending_drop(&pd[slot]);
        }
    }
    for (int i = 0; i < MAX_PENDING; i++) pending_drop(&pd[i]);
    return rc;
}

/* ---- the greeting itself ------------------------------------------------------- */

typedef struct hello {
    uint32_t magic, version, rank, world, port, agree_len, pid;
    uint64_t hash;
    char model[MODEL_BYTES];
    char run_id[RUNID_BYTES];
    char host[HOST_BYTES];
    const char *agree;          /* agree_len bytes after the fixed part */
} hello;

static void hello_encode(unsigned char *b, const hello *h)
{
    memset(b, 0, HELLO_BYTES);
    pg_put32(b, h->magic);
    pg_put32(b + 4, h->version);
    pg_put32(b + 8, h->rank);
    pg_put32(b + 12, h->world);
    pg_put64(b + 16, h->hash);
    pg_put32(b + 24, h->port);
    pg_put32(b + 28, h->agree_len);
    pg_put32(b + 32, h->pid);
    memcpy(b + 40, h->model, MODEL_BYTES);
    b[40 + MODEL_BYTES - 1] = 0;
    memcpy(b + 40 + MODEL_BYTES, h->run_id, RUNID_BYTES);
    b[40 + MODEL_BYTES + RUNID_BYTES - 1] = 0;
    memcpy(b + 40 + MODEL_BYTES + RUNID_BYTES, h->host, HOST_BYTES);
    b[HELLO_BYTES - 1] = 0;
}

/* A complete greeting (len bytes) into h: 0, or -1 when its agreement length
 * is not the bytes that follow (never parsed past what was read). */
static int hello_decode(const unsigned char *b, size_t len, hello *h)
{
    if (len < HELLO_BYTES) return -1;
    h->magic = pg_get32(b);
    h->version = pg_get32(b + 4);
    h->rank = pg_get32(b + 8);
    h->world = pg_get32(b + 12);
    h->hash = pg_get64(b + 16);
    h->port = pg_get32(b + 24);
    h->agree_len = pg_get32(b + 28);
    h->pid = pg_get32(b + 32);
    memcpy(h->model, b + 40, MODEL_BYTES);
    h->model[MODEL_BYTES - 1] = 0;
    memcpy(h->run_id, b + 40 + MODEL_BYTES, RUNID_BYTES);
    h->run_id[RUNID_BYTES - 1] = 0;
    memcpy(h->host, b + 40 + MODEL_BYTES + RUNID_BYTES, HOST_BYTES);
    h->host[HOST_BYTES - 1] = 0;
    for (char *c = h->host; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e) *c = '?'; /* printed by stage 0 */
    for (char *c = h->model; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e) *c = '?';
    for (char *c = h->run_id; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e) *c = '?';
    h->agree = (const char *)b + HELLO_BYTES;
    return (size_t)h->agree_len == len - HELLO_BYTES ? 0 : -1;
}

static size_t hello_need(void *arg, const unsigned char *b, size_t got)
{
    (void)arg;
    if (got < 8) return 8;
    if (pg_get32(b) != HELLO_MAGIC || pg_get32(b + 4) != PROTO_VERSION) return 0; /* not one of ours */
    if (got < HELLO_BYTES) return HELLO_BYTES;
    uint32_t al = pg_get32(b + 28);
    return al > MAX_AGREE_BYTES ? 0 : HELLO_BYTES + al;
}

static const char *id_text(const char *id)
{
    return id[0] ? id : "(none)";
}

/* A peer as messages name it: "stage 2", or "stage 2 of replica 1" with replicas. */
static const char *pname(const pg_tcp *n, int rank, char *b, size_t bl)
{
    if (n->P >= n->world || rank < 0)
        snprintf(b, bl, "stage %d", rank);
    else
        snprintf(b, bl, "stage %d of replica %d", rank % n->P, rank / n->P);
    return b;
}

/* One refusal on stage 0's output, the first MAX_LOGGED of them; then one
 * line saying later ones are only counted (a flood of strangers must not
 * flood the log). */
static void log_refusal(int *logged, const char *fmt, ...)
{
    if (*logged > MAX_LOGGED) return;
    if (++*logged > MAX_LOGGED) {
        fprintf(stderr, "stage 0: more refused connections: not printed one by one\n");
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "stage 0: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* A hello of another run (run id) at this run's port: refuse it alone. */
static void refuse_other_run(const keyring *k, pending *p, const hello *h, const char *mine, int port, int *logged)
{
    char reason[600];
    if (k->token_len) /* it holds the token: one of ours, launched with another run id */
        seterr(reason, sizeof reason, "stage 0 at this address belongs to run %s, but this stage to run %s: two runs "
               "share the master port %d; give each its own (PIPE_MASTER)", id_text(mine), id_text(h->run_id), port);
    else
        seterr(reason, sizeof reason, "stage 0 at this address belongs to another run than this stage's (run %s): two "
               "runs share the master port %d; give each its own (PIPE_MASTER)", id_text(h->run_id), port);
    send_reply(k, p, REPLY_REFUSED, reason);
    log_refusal(logged, "refused a process at %s claiming stage %u of another run (%s; this is run %s): two runs "
                "share the master port %d; this run goes on", p->addr, h->rank, id_text(h->run_id), id_text(mine), port);
}

/* A complete greeting after the rendezvous (the doorman, a failed start-up):
 * 1 when it is a well-formed hello of this run (decoded into h); else 0, a
 * hello of another run refused as such, anything malformed left to close. */
static int of_this_run(pending *p, const unsigned char *b, size_t len, hello *h, const keyring *k, const char *run_id,
                       int port, int *logged)
{
    memset(h, 0, sizeof *h);
    if (hello_decode(b, len, h) != 0)
        return 0;
    if (strcmp(h->run_id, run_id) != 0) {
        refuse_other_run(k, p, h, run_id, port, logged);
        return 0;
    }
    return 1;
}

/* ---- rendezvous ---------------------------------------------------------- */

/* The master's state while the stages greet it. */
typedef struct master_ctx {
    pg_tcp *n;
    const pg_launch *l;
    const pg_net_config *cfg;
    const keyring *keys;
    char (*addr)[ADDR_BYTES];
    int *port;
    unsigned char (*nonce)[2][NONCE_BYTES]; /* [world]: ours and its, for the MAC of the table */
    int joined;
    char reason[700];          /* why the run fails (an authenticated peer's mismatch) */
    char pub[700];             /* the same without stage 0's own values (for the unauthenticated) */
    char refused[700];         /* the last stranger or unauthenticated peer refused (for the timeout message) */
    int nrefused, logged;
    int culprit;               /* the rank whose hello failed the run, or -1 */
} master_ctx;

/* The ranks in [lo, hi) without a connection, as "1, 3" into buf. */
static void missing_ranks(const pg_tcp *n, int lo, int hi, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = 0;
    for (int s = lo; s < hi && k + 12 < len; s++)
        if (n->p[s].fd < 0) k += (size_t)snprintf(buf + k, len - k, "%s%d", k ? ", " : "", s);
}

static void master_waiting(void *arg, double waited)
{
    master_ctx *m = arg;
    char miss[256];
    missing_ranks(m->n, 1, m->n->world, miss, sizeof miss);
    fprintf(stderr, "stage 0: %d of %d stages have reached the master at %s:%d after %.0f s (missing stage %s); "
            "waiting until %g s (--connect-timeout)\n", m->joined + 1, m->n->world, m->l->master_host,
            m->l->master_port, waited, miss, m->cfg->connect_timeout_s);
}

static void master_refused(void *arg, const char *addr, const char *why)
{
    master_ctx *m = arg;
    log_refusal(&m->logged, "refused a connection from %s: %s", addr, why);
    seterr(m->refused, sizeof m->refused, "a connection from %s (%s)", addr, why);
    m->nrefused++;
}

/* Does hello h fit this run? 0, or -1 with the reason (full, for stage 0's
 * output and for holders of the token) and pub (without stage 0's values). */
static int hello_fits(master_ctx *m, const hello *h, char *reason, size_t rl, char *pub, size_t pl)
{
    const pg_net_config *cfg = m->cfg;
    pg_tcp *n = m->n;
    int world = n->world;
    char nb[48];
    const char *model = cfg->model ? cfg->model : "";
    if (h->world != (uint32_t)world) {
        seterr(reason, rl, "stage %u was started with world size %u but stage 0 with world size %d: start every "
               "stage with the same PIPE_WORLD", h->rank, h->world, world);
        seterr(pub, pl, "stage %u was started with world size %u, unlike stage 0: start every stage with the same "
               "PIPE_WORLD", h->rank, h->world);
    } else if (h->rank == 0 || h->rank >= (uint32_t)world) { /* unsigned: a rank of 2^31 is no index */
        seterr(reason, rl, "a process claims stage %u but stage 0 is the master of a world of %d", h->rank, world);
        seterr(pub, pl, "a process claims stage %u, which is not a stage of the run at this address", h->rank);
    } else if (n->p[h->rank].fd >= 0) {
        seterr(reason, rl, "two processes claim %s (duplicate rank): %s:%u and %s:%u; check PIPE_RANK of each",
               pname(n, (int)h->rank, nb, sizeof nb), n->host[h->rank], n->pid[h->rank], h->host, h->pid);
        seterr(pub, pl, "%s", reason);
    } else if (strcmp(h->model, model) != 0) {
        seterr(reason, rl, "%s was built from another model (model '%s', expected '%s'): rebuild all stages from the "
               "same pipegen output", pname(n, (int)h->rank, nb, sizeof nb), h->model, model);
        seterr(pub, pl, "%s was built from another model than stage 0 (its model is '%s'): rebuild all stages from "
               "the same pipegen output", pname(n, (int)h->rank, nb, sizeof nb), h->model);
    } else if (h->hash != cfg->plan_hash) {
        seterr(reason, rl, "%s was built from another model or plan (hash %016llx, expected %016llx): rebuild all "
               "stages from the same pipegen output", pname(n, (int)h->rank, nb, sizeof nb),
               (unsigned long long)h->hash, (unsigned long long)cfg->plan_hash);
        seterr(pub, pl, "%s was built from another model or plan than stage 0 (its plan hash is %016llx): rebuild "
               "all stages from the same pipegen output", pname(n, (int)h->rank, nb, sizeof nb),
               (unsigned long long)h->hash);
    } else if (cfg->agree_check &&
               cfg->agree_check(cfg->agree_arg, (int)h->rank, h->agree, h->agree_len, reason, rl) != 0) {
        if (!reason[0])
            seterr(reason, rl, "%s does not agree with stage 0", pname(n, (int)h->rank, nb, sizeof nb));
        seterr(pub, pl, "%s was started with other options or data files than stage 0 (stage 0's output names the "
               "option and both values; with a run token every stage is told)", pname(n, (int)h->rank, nb, sizeof nb));
    } else {
        return 0;
    }
    return -1;
}

/* One complete hello at the master: accept it, refuse the peer alone, or (a
 * peer of this very run, authenticated by its run id, that does not fit) fail
 * the run. */
static int hello_done(void *arg, pending *p, const unsigned char *b, size_t len)
{
    master_ctx *m = arg;
    pg_tcp *n = m->n;
    const char *mine = n->run_id;
    char reason[700] = "", pub[700] = "";
    hello h;
    memset(&h, 0, sizeof h);
    if (hello_decode(b, len, &h) != 0) { /* the length field must be the bytes read */
        seterr(m->refused, sizeof m->refused, "a malformed greeting (agreement of %u bytes in %zu) from %s",
               h.agree_len, len - HELLO_BYTES, p->addr);
        m->nrefused++;
        return 0;
    }
    if (strcmp(h.run_id, mine) != 0) { /* another run on this port */
        refuse_other_run(m->keys, p, &h, mine, m->l->master_port, &m->logged);
        seterr(m->refused, sizeof m->refused, "a process of another run (%s) claiming stage %u, from %s",
               id_text(h.run_id), h.rank, p->addr);
        m->nrefused++;
        return 0;
    }
    if (hello_fits(m, &h, reason, sizeof reason, pub, sizeof pub) != 0) {
        int trusted = m->keys->token_len > 0; /* it proved the token: it may hear stage 0's values */
        send_reply(m->keys, p, REPLY_REFUSED, trusted ? reason : pub);
        if (mine[0]) { /* one of this run (its id): the run cannot work */
            seterr(m->reason, sizeof m->reason, "%s", reason);
            seterr(m->pub, sizeof m->pub, "%s", pub);
            m->culprit = h.rank > 0 && h.rank < (uint32_t)n->world && n->p[h.rank].fd < 0 ? (int)h.rank : -1;
            return -1;
        }
        /* no run id to tell ours from a stranger: refuse it alone, never end the run for it */
        log_refusal(&m->logged, "refused a process at %s: %s; still waiting for the stages of this run "
                    "(set PIPE_RUN_ID to tell runs apart)", p->addr, reason);
        seterr(m->refused, sizeof m->refused, "%s (from %s)", reason, p->addr);
        m->nrefused++;
        return 0;
    }
    n->p[h.rank].fd = p->fd;
    p->fd = -1;
    memcpy(m->addr[h.rank], p->addr, ADDR_BYTES);
    m->port[h.rank] = (int)h.port;
    memcpy(m->nonce[h.rank][0], p->nonce, NONCE_BYTES);
    memcpy(m->nonce[h.rank][1], p->peer_nonce, NONCE_BYTES);
    memcpy(n->host[h.rank], h.host, HOST_BYTES);
    n->pid[h.rank] = h.pid;
    return ++m->joined == n->world - 1;
}

/* The master's listening socket on PIPE_MASTER's address: fd, or -1 with err. */
static int master_listen(const pg_launch *l, char *err, size_t errlen)
{
    int bound, e = 0;
    in_addr_t ip;
    if (resolve4(l->master_host, &ip) != 0) {
        seterr(err, errlen, "cannot listen on %s:%d: the host name does not resolve to an IPv4 address (PIPE_MASTER "
               "must name this host)", l->master_host, l->master_port);
        return -1;
    }
    char ips[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &ip, ips, sizeof ips);
    int lfd = listen_on(ip, l->master_port, &bound, &e);
    if (lfd < 0)
        seterr(err, errlen, "cannot listen on %s:%d: %s (%s)", strcmp(ips, l->master_host) ? l->master_host : ips,
               l->master_port, strerror(e),
               e == EADDRINUSE ? "another pipegen run? set PIPE_MASTER"
               : e == EADDRNOTAVAIL ? "PIPE_MASTER must name an address of stage 0's own host" : "check PIPE_MASTER");
    return lfd;
}

/* Master side: accept world-1 hellos, check them, send the address table.
 * On return 0, n->p[r].fd is the connection to rank r and *lfd_out the
 * listening socket (kept for the doorman). */
static int master_rendezvous(pg_tcp *n, const pg_launch *l, const pg_net_config *cfg, int *lfd_out,
                             char *err, size_t errlen)
{
    int world = n->world;
    int lfd = master_listen(l, err, errlen);
    if (lfd < 0)
        return -1;
    in_addr_t ip;
    if (!n->keys.token_len && resolve4(l->master_host, &ip) == 0 && (ntohl(ip) >> 24) != 127)
        fprintf(stderr, "stage 0: note: no run token (PIPE_RUN_TOKEN): any process that reaches %s:%d may take "
                "part in this run's start-up (docs/launch.md, \"Security: the run token\")\n", l->master_host,
                l->master_port);
    master_ctx m;
    memset(&m, 0, sizeof m);
    m.n = n;
    m.l = l;
    m.cfg = cfg;
    m.keys = &n->keys;
    m.culprit = -1;
    m.addr = calloc((size_t)world, ADDR_BYTES);
    m.port = calloc((size_t)world, sizeof *m.port);
    m.nonce = calloc((size_t)world, sizeof *m.nonce);
    int rc = -1;
    if (!m.addr || !m.port || !m.nonce) {
        seterr(err, errlen, "out of memory during rendezvous");
        goto out;
    }
    greeter g = {&n->keys, LABEL_PEER, LABEL_MASTER, hello_need, hello_done, master_refused, &m, -1, master_waiting};
    int r = greet_loop(lfd, now_s() + cfg->connect_timeout_s, &g);
    if (r == -3) {
        char miss[256];
        missing_ranks(n, 1, world, miss, sizeof miss);
        seterr(m.reason, sizeof m.reason,
               "rendezvous: only %d of %d stages reached the master within %g s (missing stage %s)%s%s",
               m.joined + 1, world, cfg->connect_timeout_s, miss, m.nrefused ? "; refused: " : "", m.refused);
        seterr(m.pub, sizeof m.pub, "rendezvous: only %d of %d stages reached the master within %g s (missing stage %s)",
               m.joined + 1, world, cfg->connect_timeout_s, miss);
    } else if (r < 0 && !m.reason[0]) {
        seterr(m.reason, sizeof m.reason, "rendezvous: accept failed: %s", strerror(errno));
        seterr(m.pub, sizeof m.pub, "%s", m.reason);
    }
    if (r != 0) {
        /* every stage waiting is told, as a holder of the token would be */
        char full[800], pub[800];
        seterr(full, sizeof full, "the run failed at start-up: %s", m.reason);
        seterr(pub, sizeof pub, "the run failed at start-up: %s", m.pub);
        for (int s = 1; s < world; s++)
            if (n->p[s].fd >= 0) {
                pending p;
                memset(&p, 0, sizeof p);
                p.fd = n->p[s].fd;
                p.authed = 1;
                memcpy(p.nonce, m.nonce[s][0], NONCE_BYTES);
                memcpy(p.peer_nonce, m.nonce[s][1], NONCE_BYTES);
                send_reply(&n->keys, &p, REPLY_FAILED, n->keys.token_len ? full : pub);
                close(n->p[s].fd);
                n->p[s].fd = -1;
                if (cfg->told) cfg->told[s] = 1;
            }
        if (cfg->told && m.culprit > 0) cfg->told[m.culprit] = 1;
        seterr(err, errlen, "%s", m.reason);
        if (cfg->pub_err) seterr(cfg->pub_err, cfg->pub_errlen, "%s", m.pub);
        goto out;
    }
    size_t tb = (size_t)world * (ADDR_BYTES + 4);
    unsigned char *tbl = calloc(1, tb);
    if (!tbl) {
        seterr(err, errlen, "out of memory during rendezvous");
        goto out;
    }
    for (int s = 0; s < world; s++) {
        memcpy(tbl + (size_t)s * (ADDR_BYTES + 4), m.addr[s], ADDR_BYTES);
        pg_put32(tbl + (size_t)s * (ADDR_BYTES + 4) + ADDR_BYTES, (uint32_t)m.port[s]);
    }
    rc = 0;
    for (int s = 1; s < world && rc == 0; s++) {
        unsigned char h[REPLY_BYTES];
        pg_put32(h, REPLY_MAGIC);
        pg_put32(h + 4, REPLY_OK);
        pg_put32(h + 8, (uint32_t)world);
        rdv_mac(&n->keys, LABEL_ANSWER, m.nonce[s][1], m.nonce[s][0], h, 12, tbl, tb, h + 12);
        if (write_all(n->p[s].fd, h, sizeof h) != 0 || write_all(n->p[s].fd, tbl, tb) != 0) {
            seterr(err, errlen, "rendezvous: cannot send the address table to stage %d: %s", s, strerror(errno));
            rc = -1;
        }
    }
    free(tbl);
out:
    free(m.addr);
    free(m.port);
    free(m.nonce);
    if (rc == 0) *lfd_out = lfd;
    else close(lfd);
    return rc;
}

/* A lower rank's side of the mesh: the higher ranks greet it (rank, plan
 * hash, run id) after their response; anything else is dropped without
 * holding them up. */
typedef struct mesh_ctx {
    pg_tcp *n;
    const pg_net_config *cfg;
    int left;
} mesh_ctx;

static size_t mesh_need(void *arg, const unsigned char *b, size_t got)
{
    (void)arg;
    if (got >= 4 && pg_get32(b) != MESH_MAGIC) return 0;
    return MESH_BYTES;
}

static int mesh_done(void *arg, pending *p, const unsigned char *b, size_t len)
{
    mesh_ctx *m = arg;
    uint32_t who = pg_get32(b + 4);
    char id[RUNID_BYTES];
    memcpy(id, b + 16, RUNID_BYTES);
    id[RUNID_BYTES - 1] = 0;
    if (len != MESH_BYTES || who <= (uint32_t)m->n->rank || who >= (uint32_t)m->n->world || m->n->p[who].fd >= 0 ||
        pg_get64(b + 8) != m->cfg->plan_hash || strcmp(id, m->n->run_id) != 0)
        return 0; /* a stray connection (closed by the loop); keep waiting for the real ones */
    m->n->p[who].fd = p->fd;
    p->fd = -1;
    return --m->left == 0;
}

static void mesh_waiting(void *arg, double waited)
{
    mesh_ctx *m = arg;
    char miss[256];
    missing_ranks(m->n, m->n->rank + 1, m->n->world, miss, sizeof miss);
    fprintf(stderr, "stage %d: stage %s of the run not connected to this stage yet after %.0f s; waiting until %g s\n",
            m->n->rank, miss, waited, m->cfg->connect_timeout_s + 10.0);
}

/* The accepting side's challenge on fd (whom names it), answered: our
 * response (label), then, with a token, its proof back (back_label) checked.
 * 0, or -1 with err. */
static int answer_challenge(int fd, const keyring *k, const char *label, const char *back_label, double deadline,
                            unsigned char *mine, unsigned char *theirs, const char *whom, const char *token_source,
                            char *err, size_t errlen)
{
    unsigned char c[CHAL_BYTES];
    int r = read_until(fd, c, sizeof c, deadline, NULL);
    if (r != 0) {
        seterr(err, errlen, "%s %s before its challenge%s", whom,
               r == -2 ? "closed the connection" : r == -3 ? "sent nothing" : strerror(errno),
               r == -3 ? " (a stage of an older pipegen sends none: rebuild all stages with the same pipegen)" : "");
        return -1;
    }
    if (pg_get32(c) != CHAL_MAGIC) {
        seterr(err, errlen, "%s is not a stage of pipegen %s (it sent no rendezvous challenge): check PIPE_MASTER",
               whom, PIPEGEN_VERSION);
        return -1;
    }
    if (pg_get32(c + 4) != PROTO_VERSION) {
        seterr(err, errlen, "%s speaks rendezvous protocol %u but this stage speaks %u: rebuild all stages with the "
               "same pipegen", whom, pg_get32(c + 4), PROTO_VERSION);
        return -1;
    }
    int theirs_tok = (pg_get32(c + 8) & 1) != 0, ours = k->token_len > 0;
    memcpy(theirs, c + 12, NONCE_BYTES);
    if (make_nonce(mine)) {
        seterr(err, errlen, "cannot make a random nonce: %s", strerror(errno));
        return -1;
    }
    unsigned char a[AUTH_BYTES];
    pg_put32(a, AUTH_MAGIC);
    pg_put32(a + 4, PROTO_VERSION);
    pg_put32(a + 8, ours ? 1u : 0u);
    memcpy(a + 12, mine, NONCE_BYTES);
    if (ours && theirs_tok) rdv_mac(k, label, theirs, mine, NULL, 0, NULL, 0, a + 12 + NONCE_BYTES);
    else memset(a + 12 + NONCE_BYTES, 0, MAC_BYTES);
    if (write_all(fd, a, sizeof a) != 0) {
        seterr(err, errlen, "cannot answer the challenge of %s: %s", whom, strerror(errno));
        return -1;
    }
    if (theirs_tok && !ours) {
        seterr(err, errlen, "%s needs the run's token and this stage has none: give every stage of the run the same "
               "PIPE_RUN_TOKEN (or PIPE_RUN_TOKEN_FILE)", whom);
        return -1;
    }
    if (!theirs_tok && ours) {
        seterr(err, errlen, "%s was started without a run token but this stage has one (%s): give every stage of the "
               "run the same token, or none (or is another run using this port?)", whom, token_source ? token_source : "?");
        return -1;
    }
    if (!ours)
        return 0;
    unsigned char pr[PROOF_BYTES], want[MAC_BYTES];
    r = read_until(fd, pr, sizeof pr, deadline, NULL);
    if (r == 0 && pg_get32(pr) == REPLY_MAGIC) { /* refused at once: our token is not its */
        seterr(err, errlen, "%s refused this stage's run token: give every stage of the run the same token (%s)",
               whom, token_source ? token_source : "?");
        return -1;
    }
    rdv_mac(k, back_label, mine, theirs, NULL, 0, NULL, 0, want);
    if (r != 0 || pg_get32(pr) != PROOF_MAGIC || !pg_equal_ct(want, pr + 8, MAC_BYTES)) {
        seterr(err, errlen, "%s %s", whom, r == -2 ? "closed the connection after the challenge"
               : r != 0 ? "sent no proof of the run token" : "does not hold this run's token: not talking to it");
        return -1;
    }
    return 0;
}

/* The master's answer on fd: 0 with the address table (world entries,
 * malloc'd) in *tbl; 1 refused, 2 the run failed elsewhere (the reason in
 * why either way); -1 with why. With a token, a table is taken only with
 * the master's MAC over it. */
static int read_answer(int fd, const keyring *k, const unsigned char *mine, const unsigned char *theirs, int world,
                       double deadline, unsigned char **tbl, char *why, size_t whylen)
{
    unsigned char h[REPLY_BYTES], mac[MAC_BYTES];
    *tbl = NULL;
    int r = read_until(fd, h, sizeof h, deadline, NULL);
    if (r != 0 || pg_get32(h) != REPLY_MAGIC) {
        seterr(why, whylen, "%s during rendezvous", r == -2 ? "closed the connection" : r == -3 ? "did not answer"
               : r == 0 ? "sent garbage" : strerror(errno));
        return -1;
    }
    uint32_t st = pg_get32(h + 4), cnt = pg_get32(h + 8);
    if (st == REPLY_REFUSED || st == REPLY_FAILED) {
        char reason[MAX_REASON_BYTES + 1];
        size_t len = cnt < MAX_REASON_BYTES ? cnt : MAX_REASON_BYTES;
        if (read_until(fd, reason, len, deadline, NULL) != 0) len = 0;
        reason[len] = 0;
        for (size_t i = 0; i < len; i++) /* shown to the user: printable text only */
            if ((unsigned char)reason[i] < 0x20 || reason[i] == 0x7f) reason[i] = '?';
        seterr(why, whylen, "%s", len ? reason : "(no reason given)");
        return st == REPLY_REFUSED ? 1 : 2;
    }
    if (st != REPLY_OK || (int)cnt != world) {
        seterr(why, whylen, "sent an answer of status %u for %u stages, expected status 0 for %d", st, cnt, world);
        return -1;
    }
    size_t tb = (size_t)world * (ADDR_BYTES + 4);
    unsigned char *t = malloc(tb);
    if (!t || read_until(fd, t, tb, deadline, NULL) != 0) {
        free(t);
        seterr(why, whylen, "was lost while sending the address table");
        return -1;
    }
    rdv_mac(k, LABEL_ANSWER, mine, theirs, h, 12, t, tb, mac);
    if (k->token_len && !pg_equal_ct(mac, h + 12, MAC_BYTES)) {
        free(t);
        seterr(why, whylen, "sent an address table not signed with the run's token");
        return -1;
    }
    for (int s = 0; s < world; s++) /* addresses are text: ended within their field */
        t[(size_t)s * (ADDR_BYTES + 4) + ADDR_BYTES - 1] = 0;
    *tbl = t;
    return 0;
}

/* Peer side: hello to the master, read the table, connect the mesh. */
static int peer_rendezvous(pg_tcp *n, const pg_launch *l, const pg_net_config *cfg,
                           char *err, size_t errlen)
{
    int world = n->world, me = n->rank, e = 0, lport = 0, rc = -1, lfd = -1;
    unsigned char *tbl = NULL, *hb = NULL, mine[NONCE_BYTES], theirs[NONCE_BYTES];
    char whom[300], why[MAX_REASON_BYTES + 64];
    int mfd = connect_retry(l->master_host, l->master_port, cfg->connect_timeout_s, &e, me, "master");
    if (mfd < 0) {
        seterr(err, errlen, "cannot reach master %s:%d after %g s: %s%s", l->master_host,
               l->master_port, cfg->connect_timeout_s, strerror(e),
               e == ECONNREFUSED ? " (nothing listens there: stage 0 is not running, or it ended before this stage "
                                   "came; its output says why)" : "");
        return -1;
    }
    n->p[0].fd = mfd;
    seterr(whom, sizeof whom, "master %s:%d", l->master_host, l->master_port);
    /* The master may wait up to its own timeout for the others: allow for that. */
    double deadline = now_s() + 2 * cfg->connect_timeout_s + 10.0;
    if (answer_challenge(mfd, &n->keys, LABEL_PEER, LABEL_MASTER, deadline, mine, theirs, whom, l->token_source,
                         err, errlen))
        goto out;
    /* listen where the master sees us: the address of this end of the link
     * (loopback stays loopback) */
    struct sockaddr_in me_a;
    socklen_t sl = sizeof me_a;
    in_addr_t my_ip = htonl(INADDR_ANY);
    if (getsockname(mfd, (struct sockaddr *)&me_a, &sl) == 0)
        my_ip = me_a.sin_addr.s_addr;
    lfd = listen_on(my_ip, 0, &lport, &e);
    if (lfd < 0) {
        seterr(err, errlen, "cannot open a listening socket: %s", strerror(e));
        goto out;
    }
    hello h;
    memset(&h, 0, sizeof h);
    h.magic = HELLO_MAGIC;
    h.version = PROTO_VERSION;
    h.rank = (uint32_t)me;
    h.world = (uint32_t)world;
    h.hash = cfg->plan_hash;
    h.port = (uint32_t)lport;
    h.pid = (uint32_t)getpid();
    h.agree_len = cfg->agree ? (uint32_t)cfg->agree_len : 0;
    snprintf(h.model, sizeof h.model, "%s", cfg->model ? cfg->model : "");
    snprintf(h.run_id, sizeof h.run_id, "%s", n->run_id);
    if (gethostname(h.host, sizeof h.host) != 0) snprintf(h.host, sizeof h.host, "?");
    h.host[sizeof h.host - 1] = 0;
    hb = malloc(HELLO_BYTES + (size_t)h.agree_len);
    if (!hb) {
        seterr(err, errlen, "out of memory during rendezvous");
        goto out;
    }
    hello_encode(hb, &h);
    if (h.agree_len) memcpy(hb + HELLO_BYTES, cfg->agree, h.agree_len);
    if (write_all(mfd, hb, HELLO_BYTES + (size_t)h.agree_len) != 0) {
        seterr(err, errlen, "cannot send hello to %s: %s", whom, strerror(errno));
        goto out;
    }
    int a = read_answer(mfd, &n->keys, mine, theirs, world, deadline, &tbl, why, sizeof why);
    if (a == 1 || a == 2) {
        seterr(err, errlen, a == 1 ? "rendezvous refused by %s: %s" : "%s: %s", whom, why);
        if (a == 2 && cfg->elsewhere) *cfg->elsewhere = 1;
        rc = -2;
        goto out;
    }
    if (a != 0) {
        seterr(err, errlen, "%s %s", whom, why);
        goto out;
    }
    /* Lower ranks first: their listening sockets exist already, so connect()
     * completes from the backlog even before they call accept(). */
    for (int i = 1; i < me; i++) {
        char ad[ADDR_BYTES], w[120];
        memcpy(ad, tbl + (size_t)i * (ADDR_BYTES + 4), ADDR_BYTES);
        int p = (int)pg_get32(tbl + (size_t)i * (ADDR_BYTES + 4) + ADDR_BYTES);
        char sw[24];
        snprintf(sw, sizeof sw, "stage %d at", i);
        int fd = connect_retry(ad, p, cfg->connect_timeout_s, &e, me, sw);
        if (fd < 0) {
            seterr(err, errlen, "cannot connect to stage %d at %s:%d: %s", i, ad, p, strerror(e));
            goto out;
        }
        n->p[i].fd = fd;
        seterr(w, sizeof w, "stage %d at %s:%d", i, ad, p);
        unsigned char mn[NONCE_BYTES], tn[NONCE_BYTES];
        if (answer_challenge(fd, &n->keys, LABEL_MESH, LABEL_MESH_BACK, now_s() + cfg->connect_timeout_s + 10.0, mn,
                             tn, w, l->token_source, err, errlen))
            goto out;
        unsigned char mh[MESH_BYTES];
        memset(mh, 0, sizeof mh);
        pg_put32(mh, MESH_MAGIC);
        pg_put32(mh + 4, (uint32_t)me);
        pg_put64(mh + 8, cfg->plan_hash);
        snprintf((char *)mh + 16, RUNID_BYTES, "%s", n->run_id);
        if (write_all(fd, mh, sizeof mh) != 0) {
            seterr(err, errlen, "cannot greet stage %d: %s", i, strerror(errno));
            goto out;
        }
    }
    if (me + 1 < world) {
        mesh_ctx mc = {n, cfg, world - 1 - me};
        greeter g = {&n->keys, LABEL_MESH, LABEL_MESH_BACK, mesh_need, mesh_done, NULL, &mc, -1, mesh_waiting};
        if (greet_loop(lfd, now_s() + cfg->connect_timeout_s + 10.0, &g) != 0) {
            char miss[256];
            missing_ranks(n, me + 1, world, miss, sizeof miss);
            seterr(err, errlen, "stage %s of the run did not connect to this stage within %g s", miss,
                   cfg->connect_timeout_s + 10.0);
            goto out;
        }
    }
    rc = 0;
out:
    free(hb);
    free(tbl);
    if (lfd >= 0) close(lfd);
    return rc;
}

/* ---- the doorman: stage 0 answers at its port while the run goes on ---------- */

static int late_done(void *arg, pending *p, const unsigned char *b, size_t len)
{
    pg_tcp *n = arg;
    hello h;
    if (!of_this_run(p, b, len, &h, &n->keys, n->run_id, n->master_port, &n->door_logged))
        return 0;
    char reason[400], nb[48], which[80] = "";
    int ours = h.rank > 0 && h.rank < (uint32_t)n->world; /* unsigned: a rank of 2^31 is no index */
    if (ours && n->P < n->world) /* with replicas: which stage that rank is */
        seterr(which, sizeof which, " (%s)", pname(n, (int)h.rank, nb, sizeof nb));
    if (ours && h.world == (uint32_t)n->world)
        seterr(reason, sizeof reason, "rank %u%s is already taken by %s:%u: the run at this address is under way",
               h.rank, which, n->host[h.rank], n->pid[h.rank]);
    else
        seterr(reason, sizeof reason, "the run at this address is under way; this process claims rank %u of a world "
               "of %u, %s", h.rank, h.world, n->keys.token_len ? "which does not fit it" : "which stage 0 refuses");
    send_reply(&n->keys, p, REPLY_REFUSED, reason);
    log_refusal(&n->door_logged, "refused a process at %s (%s, pid %u): %s; this run goes on", p->addr, h.host, h.pid,
                reason);
    return 0;
}

static void door_refused(void *arg, const char *addr, const char *why)
{
    pg_tcp *n = arg;
    log_refusal(&n->door_logged, "refused a connection from %s: %s; this run goes on", addr, why);
}

static void *door_main(void *arg)
{
    pg_tcp *n = arg;
    greeter g = {&n->keys, LABEL_PEER, LABEL_MASTER, hello_need, late_done, door_refused, n, n->door_stop[0], NULL};
    while (greet_loop(n->door_fd, now_s() + 3600.0, &g) == -3) {} /* until pg_tcp_close says stop */
    return NULL;
}

/* Start the doorman on the master's listening socket lfd (owned from here). */
static void door_open(pg_tcp *n, int lfd)
{
    n->door_fd = lfd;
    if (pipe(n->door_stop) != 0) {
        n->door_stop[0] = n->door_stop[1] = -1;
        return;
    }
    fcntl(n->door_stop[0], F_SETFD, FD_CLOEXEC);
    fcntl(n->door_stop[1], F_SETFD, FD_CLOEXEC);
    /* the main thread takes the signals (--save-on-exit, SIGCONT) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    n->door_started = pthread_create(&n->door_thr, NULL, door_main, n) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void door_close(pg_tcp *n)
{
    if (n->door_started) {
        ssize_t w = write(n->door_stop[1], "x", 1);
        (void)w;
        pthread_join(n->door_thr, NULL);
        n->door_started = 0;
    }
    for (int i = 0; i < 2; i++)
        if (n->door_stop[i] >= 0) close(n->door_stop[i]);
    n->door_stop[0] = n->door_stop[1] = -1;
    if (n->door_fd >= 0) close(n->door_fd);
    n->door_fd = -1;
}

/* ---- telling the latecomers why the start-up failed ------------------------- */

typedef struct teller {
    const char *run_id;
    const keyring *keys;
    const char *cause, *pub;  /* for holders of the token / for the unauthenticated */
    unsigned char *told;      /* [world] */
    int world, left, port, logged;
} teller;

static int fail_done(void *arg, pending *p, const unsigned char *b, size_t len)
{
    teller *t = arg;
    hello h;
    if (!of_this_run(p, b, len, &h, t->keys, t->run_id, t->port, &t->logged))
        return 0;
    char msg[MAX_REASON_BYTES];
    seterr(msg, sizeof msg, "the run failed at start-up: %s", t->keys->token_len ? t->cause : t->pub);
    send_reply(t->keys, p, REPLY_FAILED, msg);
    if (h.world == (uint32_t)t->world && h.rank > 0 && h.rank < (uint32_t)t->world && !t->told[h.rank]) {
        t->told[h.rank] = 1;
        t->left--;
    }
    return t->left == 0;
}

static void tell_refused(void *arg, const char *addr, const char *why)
{
    teller *t = arg;
    log_refusal(&t->logged, "refused a connection from %s: %s", addr, why);
}

/* Written by tell_signal only: the self-pipe that ends the wait. */
static int tell_stop_w = -1;

static void tell_signal(int sig)
{
    (void)sig;
    int e = errno;
    ssize_t w = write(tell_stop_w, "x", 1);
    (void)w;
    errno = e;
}

void pg_tcp_tell_failure(const pg_launch *l, const pg_net_config *cfg, const char *cause, const char *pub,
                         double linger_s)
{
    if (l->rank != 0 || l->world < 2 || linger_s <= 0)
        return;
    unsigned char *told = calloc((size_t)l->world, 1);
    if (!told)
        return;
    int left = 0;
    for (int s = 1; s < l->world; s++) {
        told[s] = cfg->told ? cfg->told[s] : 0;
        left += !told[s];
    }
    char err[300];
    int lfd = left ? master_listen(l, err, sizeof err) : -1, stop[2] = {-1, -1};
    if (lfd < 0 || pipe(stop) != 0) {
        if (lfd >= 0) close(lfd);
        free(told);
        return;
    }
    fcntl(stop[1], F_SETFL, O_NONBLOCK);
    fprintf(stderr, "stage 0: telling the %d stage%s not yet told why the run failed, as they come (up to %g s; "
            "Ctrl-C ends it)\n", left, left == 1 ? "" : "s", linger_s);
    tell_stop_w = stop[1];
    struct sigaction sa, old[3];
    const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = tell_signal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &sa, &old[i]);
    keyring keys = {(const unsigned char *)l->token, l->token_len};
    teller t = {l->run_id, &keys, cause, pub ? pub : cause, told, l->world, left, l->master_port, 0};
    greeter g = {&keys, LABEL_PEER, LABEL_MASTER, hello_need, fail_done, tell_refused, &t, stop[0], NULL};
    greet_loop(lfd, now_s() + linger_s, &g);
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &old[i], NULL);
    tell_stop_w = -1;
    close(stop[0]);
    close(stop[1]);
    close(lfd);
    free(told);
}

/* ---- sender threads ------------------------------------------------------ */

/* Drains the ring and the lent payloads in the order they were queued: the
 * ring's bytes up to the next lent payload, then (in the same sendmsg when
 * they meet) the payload from the caller's buffer, which is then done. */
static void *sender_main(void *arg)
{
    peer *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->used == 0 && p->lent_n == 0 && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        if ((p->used == 0 && p->lent_n == 0) || p->dead) break; /* stopped and drained */
        const struct lent *L = p->lent_n ? &p->lent[p->lent_head] : NULL;
        size_t chunk = p->cap - p->head < p->used ? p->cap - p->head : p->used;
        if (L && L->at - p->drained < chunk)
            chunk = (size_t)(L->at - p->drained);
        int with_lent = L && p->drained + chunk == L->at; /* the payload follows these ring bytes */
        struct iovec iov[2] = {{p->ring + p->head, chunk}, {(void *)(with_lent ? L->buf : NULL), with_lent ? L->bytes : 0}};
        pthread_mutex_unlock(&p->mu); /* never hold the lock while blocked in send */
        int r = chunk ? (with_lent ? writev_all(p->fd, iov, 2) : writev_all(p->fd, iov, 1))
                      : writev_all(p->fd, iov + 1, 1);
        int e = errno;
        pthread_mutex_lock(&p->mu);
        if (r != 0) {
            p->dead = 1;
            p->dead_errno = e;
            pthread_cond_broadcast(&p->cv);
            break;
        }
        p->head = (p->head + chunk) % p->cap;
        p->used -= chunk;
        p->drained += chunk;
        if (with_lent) {
            p->lent_head = (p->lent_head + 1) % p->lent_cap;
            p->lent_n--;
            p->lent_done++;
        }
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- public API ---------------------------------------------------------- */

pg_tcp *pg_tcp_init(const pg_launch *l, const pg_net_config *cfg, char *err, size_t errlen)
{
    if (l->world < 1 || l->rank < 0 || l->rank >= l->world) {
        seterr(err, errlen, "rank %d of a world of %d: the rank must be in 0..world-1", l->rank, l->world);
        return NULL;
    }
    int D = l->replicas > 0 ? l->replicas : 1, P = l->world / D;
    if (P < 1 || P * D != l->world || cfg->stage != l->rank % P) {
        seterr(err, errlen, "this binary is stage %d but was launched as rank %d (%s) of %d replica%s: start stage<k> "
               "with rank replica x %d + k", cfg->stage, l->rank, l->source ? l->source : "environment", D,
               D == 1 ? "" : "s", P);
        return NULL;
    }
    pg_tcp *n = calloc(1, sizeof *n);
    if (!n || !(n->p = calloc((size_t)l->world, sizeof *n->p))) {
        free(n);
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    n->rank = l->rank;
    n->world = l->world;
    n->P = P;
    n->base = l->rank - l->rank % P;
    n->door_fd = n->door_stop[0] = n->door_stop[1] = -1;
    for (int i = 0; i < n->world; i++) n->p[i].fd = -1;
    snprintf(n->run_id, sizeof n->run_id, "%s", cfg->run_id ? cfg->run_id : "");
    n->keys.token_len = l->token_len < sizeof n->token ? l->token_len : 0;
    memcpy(n->token, l->token, n->keys.token_len);
    n->keys.token = n->token;
    n->master_port = l->master_port;
    n->send_timeout = cfg->send_timeout_s > 0 ? cfg->send_timeout_s : 300.0;
    if (n->world > 1 && n->rank == 0) {
        int lfd = -1;
        n->host = calloc((size_t)n->world, sizeof *n->host);
        n->pid = calloc((size_t)n->world, sizeof *n->pid);
        if (!n->host || !n->pid) {
            seterr(err, errlen, "out of memory");
            goto fail;
        }
        if (gethostname(n->host[0], HOST_BYTES) != 0) snprintf(n->host[0], HOST_BYTES, "?");
        n->host[0][HOST_BYTES - 1] = 0;
        n->pid[0] = (uint32_t)getpid();
        if (master_rendezvous(n, l, cfg, &lfd, err, errlen) != 0) goto fail;
        door_open(n, lfd); /* latecomers hear at once that the run is under way */
    } else if (n->world > 1 && peer_rendezvous(n, l, cfg, err, errlen) != 0) {
        goto fail;
    }
    for (int i = 0; i < n->world; i++) {
        peer *p = &n->p[i];
        if (p->fd < 0) continue;
        size_t want = cfg->send_buf_bytes ? cfg->send_buf_bytes[i] : 0;
        p->cap = want + RING_SLACK;
        p->ring = malloc(p->cap);
        if (!p->ring) {
            seterr(err, errlen, "cannot allocate a %zu-byte send buffer for stage %d", p->cap, i);
            goto fail;
        }
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->cv, NULL);
        int pe = pthread_create(&p->thr, NULL, sender_main, p);
        if (pe != 0) {
            char why[400], nb[48];
            pthread_cond_destroy(&p->cv);
            pthread_mutex_destroy(&p->mu);
            seterr(err, errlen, "cannot start the thread that sends to %s: %s", pname(n, i, nb, sizeof nb),
                   pg_thread_start_why(pe, why, sizeof why));
            goto fail;
        }
        p->thr_started = 1;
    }
    return n;
fail:
    pg_tcp_close(n);
    return NULL;
}

static int bad_peer(pg_tcp *n, int peer_, const char *what)
{
    char nb[48];
    if (peer_ < 0 || peer_ >= n->world || n->p[peer_].fd < 0 || !n->p[peer_].thr_started) {
        seterr(n->err, sizeof n->err, "%s %s: no such link (world %d)", what, pname(n, peer_, nb, sizeof nb), n->world);
        return 1;
    }
    return 0;
}

static pg_net_status dead_status(pg_tcp *n, int i, int e)
{
    char nb[48];
    n->lost = 1;
    if (e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH) {
        seterr(n->err, sizeof n->err,
               "lost the connection to %s: %s (its host is down or the network between us is cut)", pname(n, i, nb, sizeof nb),
               strerror(e));
        return PG_NET_CLOSED;
    }
    if (e == EPIPE || e == ECONNRESET || e == 0)
        seterr(n->err, sizeof n->err, "%s closed its connection (it exited or was killed)", pname(n, i, nb, sizeof nb));
    else
        seterr(n->err, sizeof n->err, "sending to %s failed: %s", pname(n, i, nb, sizeof nb), strerror(e));
    return e == EPIPE || e == ECONNRESET || e == 0 ? PG_NET_CLOSED : PG_NET_ERROR;
}

/* Wait on p's condition (mu held) for a change, one slice of w; 0, or -1
 * when w's time is up. */
static int wait_a_while(peer *p, wclock *w)
{
    int ms = wc_slice_ms(w);
    if (ms == 0)
        return -1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    return 0;
}

/* Copy len bytes into p's ring, waiting while it is full (mu held), at most
 * w's time. 0, -1 when the sender thread died (its errno in dead_errno), or
 * -2 when the ring stayed full for w's time (the peer reads nothing). */
static int ring_put(peer *p, const unsigned char *src, size_t left, wclock *w)
{
    while (left) {
        while (p->used == p->cap && !p->dead)
            if (wait_a_while(p, w) != 0)
                return -2;
        if (p->dead)
            return -1;
        size_t tail = (p->head + p->used) % p->cap;
        size_t room = p->cap - p->used, contig = p->cap - tail;
        size_t c = left < room ? left : room;
        if (c > contig) c = contig;
        memcpy(p->ring + tail, src, c);
        p->used += c;
        p->enq += c;
        src += c;
        left -= c;
        pthread_cond_broadcast(&p->cv);
    }
    return 0;
}

/* Twice the room for lent payloads, in queue order from index 0 (mu held;
 * the sender thread copies what it needs before it unlocks). 0, or -1. */
static int lent_grow(peer *p)
{
    int cap = p->lent_cap ? 2 * p->lent_cap : 64;
    struct lent *q = malloc((size_t)cap * sizeof *q);
    if (!q)
        return -1;
    for (int k = 0; k < p->lent_n; k++)
        q[k] = p->lent[(p->lent_head + k) % p->lent_cap];
    free(p->lent);
    p->lent = q;
    p->lent_cap = cap;
    p->lent_head = 0;
    return 0;
}

/* With nothing queued to p (the sender thread idle), write what the socket
 * takes at once of header and payload from this thread (no wake-up of the
 * sender, no copy): *hdr_done and *done say how much. 0, or -1 after a write
 * error (the link is dead then, as if the sender thread had seen it). */
static int send_now(peer *p, const unsigned char *h, size_t *hdr_done, const unsigned char *buf, size_t bytes,
                    size_t *done)
{
    for (;;) {
        struct iovec iov[2] = {{(void *)(h + *hdr_done), MSG_HDR - *hdr_done}, {(void *)(buf + *done), bytes - *done}};
        int first = *hdr_done == MSG_HDR;
        if (first && *done == bytes)
            return 0;
        struct msghdr m;
        memset(&m, 0, sizeof m);
        m.msg_iov = iov + first;
        m.msg_iovlen = (size_t)(2 - first);
        ssize_t w = sendmsg(p->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (w < 0) {
            p->dead = 1;
            p->dead_errno = errno;
            pthread_cond_broadcast(&p->cv);
            return -1;
        }
        size_t hw = (size_t)w < MSG_HDR - *hdr_done ? (size_t)w : MSG_HDR - *hdr_done;
        *hdr_done += hw;
        *done += (size_t)w - hw;
    }
}

/* The header of a message into the ring, then its payload: copied into the
 * ring too, or (lent) queued as the caller's buffer, *seq its number. */
static pg_net_status send_msg(pg_tcp *n, int to, uint32_t tag, const void *buf, size_t bytes, int lend, uint64_t *seq)
{
    char nb[48];
    if (bad_peer(n, to, "send to")) return PG_NET_ERROR;
    peer *p = &n->p[to];
    unsigned char h[MSG_HDR];
    pg_put32(h, MSG_MAGIC);
    pg_put32(h + 4, tag);
    pg_put64(h + 8, (uint64_t)bytes);
    pthread_mutex_lock(&p->mu);
    if (lend && p->lent_n == p->lent_cap && lent_grow(p)) {
        pthread_mutex_unlock(&p->mu);
        seterr(n->err, sizeof n->err, "out of memory for the queue of sends to %s", pname(n, to, nb, sizeof nb));
        return PG_NET_ERROR;
    }
    /* Nothing queued to p (every earlier send, lent or copied, is written):
     * this thread writes what the socket takes at once straight from buf, so
     * a message the socket holds whole is neither copied into the ring nor
     * handed to the sender thread (whose wake-up, on a busy machine, costs the
     * caller its core for a time slice); only the rest is queued. */
    size_t hdr_done = 0, done = 0;
    wclock w;
    wc_start(&w, n->send_timeout);
    int idle = !p->dead && p->used == 0 && p->lent_n == 0;
    if (idle && send_now(p, h, &hdr_done, (const unsigned char *)buf, bytes, &done)) {
        int e = p->dead_errno;
        pthread_mutex_unlock(&p->mu);
        return dead_status(n, to, e);
    }
    int r = p->dead ? -1 : ring_put(p, h + hdr_done, MSG_HDR - hdr_done, &w);
    if (r == 0 && idle && done == bytes) {
        if (lend) {
            p->lent_seq++; /* written already: nothing lent stays queued, so every earlier one is done too */
            p->lent_done++;
            *seq = p->lent_seq;
        }
        pthread_mutex_unlock(&p->mu);
        return PG_NET_OK;
    }
    buf = (const unsigned char *)buf + done;
    bytes -= done;
    if (r == 0 && !lend)
        r = ring_put(p, buf, bytes, &w);
    else if (r == 0 && bytes) {
        struct lent *L = &p->lent[(p->lent_head + p->lent_n) % p->lent_cap];
        L->buf = buf;
        L->bytes = bytes;
        L->at = p->enq;
        p->lent_n++;
        pthread_cond_broadcast(&p->cv);
    }
    if (r == 0 && lend)
        *seq = p->lent_seq += bytes != 0;
    int e = p->dead_errno;
    pthread_mutex_unlock(&p->mu);
    if (r == -2) { /* the header and payload already queued stay: the link is unusable from here on */
        const char *who = pname(n, to, nb, sizeof nb);
        seterr(n->err, sizeof n->err, "the queue of sends to %s stayed full for %g s (%s reads nothing: stopped or "
               "hung?)", who, n->send_timeout, who);
        return PG_NET_TIMEOUT;
    }
    return r ? dead_status(n, to, e) : PG_NET_OK;
}

pg_net_status pg_tcp_send_rank(pg_tcp *n, int to, uint32_t tag, const void *buf, size_t bytes)
{
    return send_msg(n, to, tag, buf, bytes, 0, NULL);
}

pg_net_status pg_tcp_send_rank_lent(pg_tcp *n, int to, uint32_t tag, const void *buf, size_t bytes, uint64_t *seq)
{
    return send_msg(n, to, tag, buf, bytes, 1, seq);
}

pg_net_status pg_tcp_wait_lent(pg_tcp *n, int to, uint64_t seq, double timeout_s)
{
    char nb[48];
    if (bad_peer(n, to, "wait for the sends to")) return PG_NET_ERROR;
    peer *p = &n->p[to];
    wclock w;
    wc_start(&w, timeout_s);
    pthread_mutex_lock(&p->mu);
    while (p->lent_done < seq && !p->dead) {
        if (wait_a_while(p, &w) != 0) {
            uint64_t behind = seq - p->lent_done;
            pthread_mutex_unlock(&p->mu);
            seterr(n->err, sizeof n->err, "%llu message%s to %s still unsent after %g s (it stopped reading)",
                   (unsigned long long)behind, behind == 1 ? "" : "s", pname(n, to, nb, sizeof nb), timeout_s);
            return PG_NET_TIMEOUT;
        }
    }
    int dead = p->lent_done < seq, e = p->dead_errno;
    pthread_mutex_unlock(&p->mu);
    return dead ? dead_status(n, to, e) : PG_NET_OK;
}

pg_net_status pg_tcp_recv_rank(pg_tcp *n, int from, uint32_t tag, void *buf, size_t bytes, double timeout_s)
{
    char nb[48];
    if (bad_peer(n, from, "receive from")) return PG_NET_ERROR;
    peer *p = &n->p[from];
    if (p->rx_closed) {
        n->lost = 1;
        seterr(n->err, sizeof n->err, "%s closed its connection (it exited or was killed)", pname(n, from, nb, sizeof nb));
        return PG_NET_CLOSED;
    }
    if (p->rx_broken) {
        seterr(n->err, sizeof n->err, "the link from %s is out of step after an earlier mismatch", pname(n, from, nb, sizeof nb));
        return PG_NET_MISMATCH;
    }
    wclock w;
    wc_start(&w, timeout_s);
    int r = 0;
    if (p->rx_hdr_got < MSG_HDR) {
        r = read_wc(p->fd, p->rx_hdr, MSG_HDR, &w, &p->rx_hdr_got);
        if (r == 0) {
            uint32_t m = pg_get32(p->rx_hdr), t = pg_get32(p->rx_hdr + 4);
            uint64_t b = pg_get64(p->rx_hdr + 8);
            if (m != MSG_MAGIC) {
                p->rx_broken = 1;
                seterr(n->err, sizeof n->err, "garbage on the link from %s (bad message magic)", pname(n, from, nb, sizeof nb));
                return PG_NET_MISMATCH;
            }
            if (t != tag || b != (uint64_t)bytes) {
                p->rx_broken = 1;
                seterr(n->err, sizeof n->err, "expected tag %u (%zu bytes) from %s but received tag %u (%llu bytes)",
                       tag, bytes, pname(n, from, nb, sizeof nb), t, (unsigned long long)b);
                return PG_NET_MISMATCH;
            }
            p->rx_got = 0;
        }
    }
    if (r == 0) r = read_wc(p->fd, buf, bytes, &w, &p->rx_got);
    if (r == 0) {
        p->rx_hdr_got = 0;
        p->rx_got = 0;
        return PG_NET_OK;
    }
    if (r == -3) {
        seterr(n->err, sizeof n->err, "no message from %s within %g s (expected tag %u, %zu bytes)", pname(n, from, nb, sizeof nb),
               timeout_s, tag, bytes);
        return PG_NET_TIMEOUT;
    }
    if (r == -1 && (errno == ETIMEDOUT || errno == EHOSTUNREACH || errno == ENETUNREACH)) {
        p->rx_closed = 1;
        n->lost = 1;
        seterr(n->err, sizeof n->err,
               "lost the connection to %s: %s (its host is down or the network between us is cut)", pname(n, from, nb, sizeof nb),
               strerror(errno));
        return PG_NET_CLOSED;
    }
    if (r == -2 || errno == ECONNRESET || errno == EPIPE) {
        p->rx_closed = 1;
        n->lost = 1;
        seterr(n->err, sizeof n->err, "%s closed its connection (it exited or was killed)", pname(n, from, nb, sizeof nb));
        return PG_NET_CLOSED;
    }
    seterr(n->err, sizeof n->err, "receiving from %s failed: %s", pname(n, from, nb, sizeof nb), strerror(errno));
    return PG_NET_ERROR;
}

/* Stage-addressed: a stage of this process's own replica. */
static int stage_rank(const pg_tcp *n, int stage) { return stage >= 0 && stage < n->P ? n->base + stage : -1; }

pg_net_status pg_tcp_send(pg_tcp *n, int to, uint32_t tag, const void *buf, size_t bytes)
{
    return pg_tcp_send_rank(n, stage_rank(n, to), tag, buf, bytes);
}

pg_net_status pg_tcp_send_lent(pg_tcp *n, int to, uint32_t tag, const void *buf, size_t bytes, uint64_t *seq)
{
    return pg_tcp_send_rank_lent(n, stage_rank(n, to), tag, buf, bytes, seq);
}

pg_net_status pg_tcp_wait_sent(pg_tcp *n, int to, uint64_t seq, double timeout_s)
{
    return pg_tcp_wait_lent(n, stage_rank(n, to), seq, timeout_s);
}

pg_net_status pg_tcp_recv(pg_tcp *n, int from, uint32_t tag, void *buf, size_t bytes, double timeout_s)
{
    return pg_tcp_recv_rank(n, stage_rank(n, from), tag, buf, bytes, timeout_s);
}

pg_net_status pg_tcp_flush(pg_tcp *n, double timeout_s)
{
    char nb[48];
    wclock w;
    wc_start(&w, timeout_s);
    for (int i = 0; i < n->world; i++) {
        peer *p = &n->p[i];
        if (!p->thr_started) continue;
        pthread_mutex_lock(&p->mu);
        while ((p->used > 0 || p->lent_n > 0) && !p->dead) {
            if (wait_a_while(p, &w) != 0) {
                size_t u = p->used;
                for (int k = 0; k < p->lent_n; k++)
                    u += p->lent[(p->lent_head + k) % p->lent_cap].bytes;
                pthread_mutex_unlock(&p->mu);
                seterr(n->err, sizeof n->err, "%zu bytes to %s still unsent after %g s",
                       u, pname(n, i, nb, sizeof nb), timeout_s);
                return PG_NET_TIMEOUT;
            }
        }
        int dead = p->dead && (p->used > 0 || p->lent_n > 0), e = p->dead_errno;
        pthread_mutex_unlock(&p->mu);
        if (dead) return dead_status(n, i, e);
    }
    return PG_NET_OK;
}

const char *pg_tcp_error(const pg_tcp *n)
{
    return n ? n->err : "no network";
}

/* The kernel's view of the connection: anything but ESTABLISHED means the
 * peer sent its FIN (CLOSE_WAIT) or the link was reset, whatever is unread. */
int pg_tcp_peer_gone(pg_tcp *n, int stage)
{
    int peer_ = n ? stage_rank(n, stage) : -1;
    if (!n || peer_ < 0 || peer_ >= n->world || n->p[peer_].fd < 0)
        return 1;
    peer *p = &n->p[peer_];
    if (p->rx_closed)
        return 1;
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(p->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
        return 0; /* cannot tell: the receive's own deadline still holds */
    return ti.tcpi_state != TCP_ESTABLISHED;
}

int pg_tcp_peer_lost(const pg_tcp *n)
{
    return n && n->lost;
}

void pg_tcp_close(pg_tcp *n)
{
    if (!n) return;
    door_close(n);
    pg_tcp_flush(n, 2.0); /* best effort: a peer that stopped reading must not hang us */
    for (int i = 0; i < n->world; i++) {
        peer *p = &n->p[i];
        if (p->thr_started) {
            pthread_mutex_lock(&p->mu);
            p->stop = 1;
            if (p->used || p->lent_n) p->dead = 1; /* undrained: drop it */
            pthread_cond_broadcast(&p->cv);
            pthread_mutex_unlock(&p->mu);
            if (p->fd >= 0) shutdown(p->fd, SHUT_RDWR); /* unblocks a send stuck on a full socket */
            pthread_join(p->thr, NULL);
            pthread_cond_destroy(&p->cv);
            pthread_mutex_destroy(&p->mu);
        }
        if (p->fd >= 0) close(p->fd);
        free(p->ring);
        free(p->lent);
    }
    free(n->p);
    free(n->host);
    free(n->pid);
    memset(n->token, 0, sizeof n->token);
    free(n);
}

/* runtime/core/tcp.c — the TCP transport (pg_tcp.h): rendezvous through the
 * master (rank 0), a full mesh of connections, one sender thread per peer that
 * drains a byte ring filled by pg_tcp_send and the buffers lent to it by
 * pg_tcp_send_rank_lent (written in place, in queue order), and receives read
 * straight into the caller's buffer with poll() and a deadline.
 *
 * Wire formats (all integers little-endian):
 *   hello (peer -> master, 224 bytes + n): u32 magic "PGNH", u32 version (2),
 *     u32 rank, u32 world, u64 plan_hash, u32 listen_port, u32 n, char model[128],
 *     char run_id[64], then n bytes of the agreement text (pg_net_config.agree)
 *   reply (master -> peer): u32 magic "PGNR", u32 status (0 ok, 1 refused), u32 n;
 *     refused: n bytes of reason; ok: n == world entries of {char addr[64], u32 port}
 *   mesh hello (rank j -> rank i, i < j, 80 bytes): u32 magic "PGNM", u32 rank,
 *     u64 plan_hash, char run_id[64]
 *   message: u32 magic "PGNS", u32 tag, u64 bytes, then the payload. */
#include "pg_tcp.h"
#include "pg_le.h"

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
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HELLO_MAGIC 0x484e4750u /* "PGNH" */
#define REPLY_MAGIC 0x524e4750u /* "PGNR" */
#define MESH_MAGIC 0x4d4e4750u  /* "PGNM" */
#define MSG_MAGIC 0x534e4750u   /* "PGNS" */
#define PROTO_VERSION 2u
#define MODEL_BYTES 128
#define RUNID_BYTES 64
#define HELLO_BYTES (32 + MODEL_BYTES + RUNID_BYTES)
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

struct pg_tcp {
    int rank, world;
    int P, base;            /* stages per replica; rank of this replica's stage 0 (rank = replica x P + stage) */
    peer *p;                /* [world] */
    int lost;               /* a link ended (pg_tcp_peer_lost) */
    char err[512];
};

/* ---- small helpers ------------------------------------------------------- */

/* SIGCONT after a stop (Ctrl-Z to piperun suspends the whole run): the time
 * a stage spent stopped is not time a peer kept it waiting, so a receive
 * whose deadline passed meanwhile starts its wait afresh. The handler only
 * counts. */
static volatile sig_atomic_t cont_gen;

static void on_cont(int sig)
{
    (void)sig;
    cont_gen++;
}

static void catch_cont(void)
{
    struct sigaction old;
    if (sigaction(SIGCONT, NULL, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
        return; /* the program handles it itself */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_cont;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGCONT, &sa, NULL);
}

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

/* Connect with retries and exponential back-off until timeout_s has passed. */
static int connect_retry(const char *host, int port, double timeout_s, int *last_errno)
{
    double deadline = now_s() + timeout_s, wait = 0.01;
    for (;;) {
        int fd = connect_once(host, port, deadline);
        if (fd >= 0) return fd;
        *last_errno = errno;
        double left = deadline - now_s();
        if (left <= 0) return -1;
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

/* ---- accepting greetings, each connection on its own clock -------------------
 * A listening socket and the connections accepted on it are polled together;
 * each connection must deliver its greeting within HELLO_TIMEOUT_S of being
 * accepted or it is closed, without holding up the others (a port scan, an
 * idle client, a half-started process). At most MAX_PENDING wait at once:
 * beyond that the oldest is dropped. */
#define HELLO_TIMEOUT_S 5.0
#define MAX_PENDING 64
#define MAX_AGREE_BYTES (1u << 20)

typedef struct pending {
    int fd;
    double deadline;
    char addr[ADDR_BYTES];
    unsigned char *buf;
    size_t got, cap;
} pending;

/* What the caller does with the bytes of one connection: need() says how many
 * bytes the greeting has so far as it is known (0: drop it, not ours or
 * malformed; never 0 for "complete": a complete greeting returns its length);
 * done() takes a complete one and owns fd from then on: 0 go on, 1 finished,
 * -1 failed (err set). */
typedef struct greeter {
    size_t (*need)(void *arg, const unsigned char *b, size_t got);
    int (*done)(void *arg, int fd, const char *addr, const unsigned char *b, size_t len);
    void *arg;
} greeter;

static void pending_drop(pending *p)
{
    if (p->fd >= 0) close(p->fd);
    free(p->buf);
    memset(p, 0, sizeof *p);
    p->fd = -1;
}

/* Run the greeting loop on lfd until done() says finished (0), fails (-1) or
 * the deadline passes (-3). */
static int greet_loop(int lfd, double deadline, const greeter *g)
{
    pending pd[MAX_PENDING];
    struct pollfd pf[MAX_PENDING + 1];
    for (int i = 0; i < MAX_PENDING; i++) { memset(&pd[i], 0, sizeof pd[i]); pd[i].fd = -1; }
    /* a connection poll() saw may be gone by accept(): never block there */
    fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
    int rc = -3;
    for (;;) {
        double now = now_s(), wake = deadline;
        for (int i = 0; i < MAX_PENDING; i++) {
            if (pd[i].fd >= 0 && pd[i].deadline <= now) pending_drop(&pd[i]); /* silent too long */
            else if (pd[i].fd >= 0 && pd[i].deadline < wake) wake = pd[i].deadline;
        }
        if (now >= deadline) break;
        int np = 0, idx[MAX_PENDING + 1];
        pf[np].fd = lfd; pf[np].events = POLLIN; idx[np++] = -1;
        for (int i = 0; i < MAX_PENDING; i++)
            if (pd[i].fd >= 0) { pf[np].fd = pd[i].fd; pf[np].events = POLLIN; idx[np++] = i; }
        int pr = poll(pf, (nfds_t)np, ms_left(wake));
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) { rc = -1; break; }
        int finished = 0;
        for (int j = 1; j < np && !finished; j++) {
            if (!pf[j].revents) continue;
            pending *p = &pd[idx[j]];
            size_t want = g->need(g->arg, p->buf, p->got);
            if (want == 0 || want > p->cap + MAX_AGREE_BYTES + 4096) { pending_drop(p); continue; }
            if (want > p->cap) {
                unsigned char *nb = realloc(p->buf, want);
                if (!nb) { pending_drop(p); continue; }
                p->buf = nb;
                p->cap = want;
            }
            ssize_t r = recv(p->fd, p->buf + p->got, want - p->got, MSG_DONTWAIT);
            if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
            if (r <= 0) { pending_drop(p); continue; }
            p->got += (size_t)r;
            if (p->got < want) continue;
            /* what the bytes now say: 0 drops it (a length over the limit
             * counts as "not ours", never as "complete") */
            size_t now_want = g->need(g->arg, p->buf, p->got);
            if (now_want == 0) { pending_drop(p); continue; }
            if (now_want > p->got) continue;
            int fd = p->fd, d;
            p->fd = -1;
            d = g->done(g->arg, fd, p->addr, p->buf, p->got);
            pending_drop(p);
            if (d != 0) { rc = d > 0 ? 0 : -1; finished = 1; }
        }
        if (finished) break;
        if (pf[0].revents) {
            struct sockaddr_in a;
            socklen_t sl = sizeof a;
            int fd = accept(lfd, (struct sockaddr *)&a, &sl);
            if (fd < 0) continue; /* EINTR, ECONNABORTED, EAGAIN: try again */
            tune_socket(fd);
            int slot = -1;
            double oldest = 0;
            for (int i = 0; i < MAX_PENDING; i++)
                if (pd[i].fd < 0) { slot = i; break; }
                else if (slot < 0 || pd[i].deadline < oldest) { slot = i; oldest = pd[i].deadline; }
            if (pd[slot].fd >= 0) pending_drop(&pd[slot]); /* full: the oldest goes */
            pd[slot].fd = fd;
            pd[slot].deadline = now_s() + HELLO_TIMEOUT_S;
            inet_ntop(AF_INET, &a.sin_addr, pd[slot].addr, sizeof pd[slot].addr);
        }
    }
    for (int i = 0; i < MAX_PENDING; i++) pending_drop(&pd[i]);
    return rc;
}

/* ---- rendezvous ---------------------------------------------------------- */

static void send_reply_refused(int fd, const char *reason)
{
    size_t n = strlen(reason);
    unsigned char h[12];
    pg_put32(h, REPLY_MAGIC);
    pg_put32(h + 4, 1);
    pg_put32(h + 8, (uint32_t)n);
    if (write_all(fd, h, sizeof h) == 0) write_all(fd, reason, n);
}

typedef struct hello {
    uint32_t magic, version, rank, world, port, agree_len;
    uint64_t hash;
    char model[MODEL_BYTES];
    char run_id[RUNID_BYTES];
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
    memcpy(b + 32, h->model, MODEL_BYTES);
    b[32 + MODEL_BYTES - 1] = 0;
    memcpy(b + 32 + MODEL_BYTES, h->run_id, RUNID_BYTES);
    b[HELLO_BYTES - 1] = 0;
}

static void hello_decode(const unsigned char *b, hello *h)
{
    h->magic = pg_get32(b);
    h->version = pg_get32(b + 4);
    h->rank = pg_get32(b + 8);
    h->world = pg_get32(b + 12);
    h->hash = pg_get64(b + 16);
    h->port = pg_get32(b + 24);
    h->agree_len = pg_get32(b + 28);
    memcpy(h->model, b + 32, MODEL_BYTES);
    h->model[MODEL_BYTES - 1] = 0;
    memcpy(h->run_id, b + 32 + MODEL_BYTES, RUNID_BYTES);
    h->run_id[RUNID_BYTES - 1] = 0;
    h->agree = (const char *)b + HELLO_BYTES;
}

/* The master's state while the stages greet it. */
typedef struct master_ctx {
    pg_tcp *n;
    const pg_launch *l;
    const pg_net_config *cfg;
    char (*addr)[ADDR_BYTES];
    int *port;
    int joined;
    char reason[700];          /* why the run fails (an authenticated peer's mismatch) */
    char refused[700];         /* the last stranger or unauthenticated peer refused (for the timeout message) */
    int nrefused;
} master_ctx;

static size_t hello_need(void *arg, const unsigned char *b, size_t got)
{
    (void)arg;
    if (got < 8) return 8;
    if (pg_get32(b) != HELLO_MAGIC) return 0; /* not one of ours */
    if (pg_get32(b + 4) != PROTO_VERSION) return got; /* complete: refused by its version */
    if (got < HELLO_BYTES) return HELLO_BYTES;
    uint32_t al = pg_get32(b + 28);
    return al > MAX_AGREE_BYTES ? 0 : HELLO_BYTES + al;
}

static const char *id_text(const char *id)
{
    return id[0] ? id : "(none)";
}

/* One complete hello at the master: accept it, refuse the peer alone, or (a
 * peer of this very run, authenticated by its run id, that does not fit) fail
 * the run. */
/* A peer as messages name it: "stage 2", or "stage 2 of replica 1" with replicas. */
static const char *pname(const pg_tcp *n, int rank, char *b, size_t bl)
{
    if (n->P >= n->world || rank < 0)
        snprintf(b, bl, "stage %d", rank);
    else
        snprintf(b, bl, "stage %d of replica %d", rank % n->P, rank / n->P);
    return b;
}

static int hello_done(void *arg, int fd, const char *addr, const unsigned char *b, size_t len)
{
    master_ctx *m = arg;
    const pg_net_config *cfg = m->cfg;
    pg_tcp *n = m->n;
    int world = n->world;
    const char *mine = cfg->run_id ? cfg->run_id : "";
    char reason[600] = "", nb[48];
    hello h;
    memset(&h, 0, sizeof h);
    if (len >= 8 && pg_get32(b + 4) != PROTO_VERSION) {
        seterr(reason, sizeof reason,
               "a stage speaks rendezvous protocol %u but stage 0 speaks %u: rebuild all stages with the same pipegen",
               pg_get32(b + 4), PROTO_VERSION);
        send_reply_refused(fd, reason);
        close(fd);
        seterr(m->refused, sizeof m->refused, "%s (from %s)", reason, addr);
        m->nrefused++;
        return 0;
    }
    if (len < HELLO_BYTES) { close(fd); return 0; } /* the loop never hands over less; be sure */
    hello_decode(b, &h);
    if ((size_t)h.agree_len != len - HELLO_BYTES) { /* the length field must be the bytes read */
        close(fd);
        seterr(m->refused, sizeof m->refused, "a malformed greeting (agreement of %u bytes in %zu) from %s",
               h.agree_len, len - HELLO_BYTES, addr);
        m->nrefused++;
        return 0;
    }
    if (strcmp(h.run_id, mine) != 0) { /* another run on this port */
        seterr(reason, sizeof reason,
               "stage 0 at this address belongs to run %s, but this stage to run %s: two runs share the master "
               "port %d; give each its own (PIPE_MASTER)",
               id_text(mine), id_text(h.run_id), m->l->master_port);
        send_reply_refused(fd, reason);
        close(fd);
        fprintf(stderr, "stage 0: refused a process at %s claiming stage %u of another run (%s; this is run %s): "
                        "two runs share the master port %d; this run goes on\n",
                addr, h.rank, id_text(h.run_id), id_text(mine), m->l->master_port);
        seterr(m->refused, sizeof m->refused, "a process of another run (%s) claiming stage %u, from %s",
               id_text(h.run_id), h.rank, addr);
        m->nrefused++;
        return 0;
    }
    if ((int)h.world != world)
        seterr(reason, sizeof reason,
               "stage %u was started with world size %u but stage 0 with world size %d: start every stage with the same PIPE_WORLD",
               h.rank, h.world, world);
    else if (h.rank == 0 || (int)h.rank >= world)
        seterr(reason, sizeof reason, "a process claims stage %u but stage 0 is the master of a world of %d",
               h.rank, world);
    else if (n->p[h.rank].fd >= 0)
        seterr(reason, sizeof reason, "two processes claim %s (duplicate rank): check PIPE_RANK of each",
               pname(n, (int)h.rank, nb, sizeof nb));
    else if (strcmp(h.model, cfg->model ? cfg->model : "") != 0)
        seterr(reason, sizeof reason,
               "%s was built from another model (model '%s', expected '%s'): rebuild all stages from the same pipegen output",
               pname(n, (int)h.rank, nb, sizeof nb), h.model, cfg->model ? cfg->model : "");
    else if (h.hash != cfg->plan_hash)
        seterr(reason, sizeof reason,
               "%s was built from another model or plan (hash %016llx, expected %016llx): rebuild all stages from the same pipegen output",
               pname(n, (int)h.rank, nb, sizeof nb), (unsigned long long)h.hash, (unsigned long long)cfg->plan_hash);
    else if (cfg->agree_check &&
             cfg->agree_check(cfg->agree_arg, (int)h.rank, h.agree, h.agree_len, reason, sizeof reason) != 0 &&
             !reason[0])
        seterr(reason, sizeof reason, "%s does not agree with stage 0", pname(n, (int)h.rank, nb, sizeof nb));
    if (reason[0]) {
        send_reply_refused(fd, reason);
        close(fd);
        if (mine[0]) { /* one of this run (its id): the run cannot work */
            seterr(m->reason, sizeof m->reason, "%s", reason);
            return -1;
        }
        /* no run id to tell ours from a stranger: refuse it alone, never end the run for it */
        fprintf(stderr, "stage 0: refused a process at %s: %s; still waiting for the stages of this run "
                        "(set PIPE_RUN_ID to tell runs apart)\n", addr, reason);
        seterr(m->refused, sizeof m->refused, "%s (from %s)", reason, addr);
        m->nrefused++;
        return 0;
    }
    n->p[h.rank].fd = fd;
    memcpy(m->addr[h.rank], addr, ADDR_BYTES);
    m->port[h.rank] = (int)h.port;
    return ++m->joined == world - 1;
}

/* Master side: accept world-1 hellos, check them, send the address table.
 * On return 0, n->p[r].fd is the connection to rank r. */
static int master_rendezvous(pg_tcp *n, const pg_launch *l, const pg_net_config *cfg,
                             char *err, size_t errlen)
{
    int world = n->world, lfd, bound, e = 0;
    in_addr_t ip;
    if (resolve4(l->master_host, &ip) != 0) {
        seterr(err, errlen, "cannot listen on %s:%d: the host name does not resolve (PIPE_MASTER must name this host)",
               l->master_host, l->master_port);
        return -1;
    }
    char ips[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &ip, ips, sizeof ips);
    lfd = listen_on(ip, l->master_port, &bound, &e);
    if (lfd < 0) {
        seterr(err, errlen, "cannot listen on %s:%d: %s (%s)", strcmp(ips, l->master_host) ? l->master_host : ips,
               l->master_port, strerror(e),
               e == EADDRINUSE ? "another pipegen run? set PIPE_MASTER"
               : e == EADDRNOTAVAIL ? "PIPE_MASTER must name an address of stage 0's own host" : "check PIPE_MASTER");
        return -1;
    }
    master_ctx m;
    memset(&m, 0, sizeof m);
    m.n = n;
    m.l = l;
    m.cfg = cfg;
    m.addr = calloc((size_t)world, ADDR_BYTES);
    m.port = calloc((size_t)world, sizeof *m.port);
    int rc = -1;
    if (!m.addr || !m.port) {
        seterr(err, errlen, "out of memory during rendezvous");
        goto out;
    }
    greeter g = {hello_need, hello_done, &m};
    int r = greet_loop(lfd, now_s() + cfg->connect_timeout_s, &g);
    if (r == -3) {
        char miss[256] = "";
        size_t k = 0;
        for (int s = 1; s < world && k + 12 < sizeof miss; s++)
            if (n->p[s].fd < 0) k += (size_t)snprintf(miss + k, sizeof miss - k, "%s%d", k ? ", " : "", s);
        seterr(m.reason, sizeof m.reason,
               "rendezvous: only %d of %d stages reached the master within %g s (missing stage %s)%s%s",
               m.joined + 1, world, cfg->connect_timeout_s, miss, m.nrefused ? "; refused: " : "", m.refused);
    } else if (r < 0 && !m.reason[0]) {
        seterr(m.reason, sizeof m.reason, "rendezvous: accept failed: %s", strerror(errno));
    }
    if (r != 0) {
        char other[800];
        seterr(other, sizeof other, "rendezvous failed at stage 0: %s", m.reason);
        for (int s = 1; s < world; s++)
            if (n->p[s].fd >= 0) {
                send_reply_refused(n->p[s].fd, other);
                close(n->p[s].fd);
                n->p[s].fd = -1;
            }
        seterr(err, errlen, "%s", m.reason);
        goto out;
    }
    size_t tb = 12 + (size_t)world * (ADDR_BYTES + 4);
    unsigned char *tbl = calloc(1, tb);
    if (!tbl) {
        seterr(err, errlen, "out of memory during rendezvous");
        goto out;
    }
    pg_put32(tbl, REPLY_MAGIC);
    pg_put32(tbl + 4, 0);
    pg_put32(tbl + 8, (uint32_t)world);
    for (int s = 0; s < world; s++) {
        memcpy(tbl + 12 + (size_t)s * (ADDR_BYTES + 4), m.addr[s], ADDR_BYTES);
        pg_put32(tbl + 12 + (size_t)s * (ADDR_BYTES + 4) + ADDR_BYTES, (uint32_t)m.port[s]);
    }
    rc = 0;
    for (int s = 1; s < world; s++)
        if (write_all(n->p[s].fd, tbl, tb) != 0) {
            seterr(err, errlen, "rendezvous: cannot send the address table to stage %d: %s", s, strerror(errno));
            rc = -1;
            break;
        }
    free(tbl);
out:
    free(m.addr);
    free(m.port);
    close(lfd);
    return rc;
}

/* A lower rank's side of the mesh: the higher ranks greet it (rank, plan
 * hash, run id); anything else is dropped without holding them up. */
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

static int mesh_done(void *arg, int fd, const char *addr, const unsigned char *b, size_t len)
{
    mesh_ctx *m = arg;
    (void)addr;
    uint32_t who = pg_get32(b + 4);
    char id[RUNID_BYTES];
    memcpy(id, b + 16, RUNID_BYTES);
    id[RUNID_BYTES - 1] = 0;
    if (len != MESH_BYTES || who <= (uint32_t)m->n->rank || (int)who >= m->n->world || m->n->p[who].fd >= 0 ||
        pg_get64(b + 8) != m->cfg->plan_hash || strcmp(id, m->cfg->run_id ? m->cfg->run_id : "") != 0) {
        close(fd); /* a stray connection; keep waiting for the real ones */
        return 0;
    }
    m->n->p[who].fd = fd;
    return --m->left == 0;
}

/* Peer side: hello to the master, read the table, connect the mesh. */
static int peer_rendezvous(pg_tcp *n, const pg_launch *l, const pg_net_config *cfg,
                           char *err, size_t errlen)
{
    int world = n->world, me = n->rank, e = 0, lport = 0, rc = -1, lfd = -1;
    unsigned char *tbl = NULL, *hb = NULL;
    int mfd = connect_retry(l->master_host, l->master_port, cfg->connect_timeout_s, &e);
    if (mfd < 0) {
        seterr(err, errlen, "cannot reach master %s:%d after %g s: %s", l->master_host,
               l->master_port, cfg->connect_timeout_s, strerror(e));
        return -1;
    }
    n->p[0].fd = mfd;
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
    h.agree_len = cfg->agree ? (uint32_t)cfg->agree_len : 0;
    snprintf(h.model, sizeof h.model, "%s", cfg->model ? cfg->model : "");
    snprintf(h.run_id, sizeof h.run_id, "%s", cfg->run_id ? cfg->run_id : "");
    hb = malloc(HELLO_BYTES + (size_t)h.agree_len);
    if (!hb) {
        seterr(err, errlen, "out of memory during rendezvous");
        goto out;
    }
    hello_encode(hb, &h);
    if (h.agree_len) memcpy(hb + HELLO_BYTES, cfg->agree, h.agree_len);
    if (write_all(mfd, hb, HELLO_BYTES + (size_t)h.agree_len) != 0) {
        seterr(err, errlen, "cannot send hello to master %s:%d: %s", l->master_host,
               l->master_port, strerror(errno));
        goto out;
    }
    /* The master may wait up to its own timeout for the others: allow for that. */
    double deadline = now_s() + 2 * cfg->connect_timeout_s + 10.0;
    unsigned char rh[12];
    int r = read_until(mfd, rh, sizeof rh, deadline, NULL);
    if (r != 0 || pg_get32(rh) != REPLY_MAGIC) {
        seterr(err, errlen, "master %s:%d %s during rendezvous", l->master_host, l->master_port,
               r == -2 ? "closed the connection" : r == -3 ? "did not answer" : "sent garbage");
        goto out;
    }
    uint32_t cnt = pg_get32(rh + 8);
    if (pg_get32(rh + 4) != 0) {
        char reason[900];
        size_t len = cnt < sizeof reason - 1 ? cnt : sizeof reason - 1;
        if (read_until(mfd, reason, len, deadline, NULL) != 0) len = 0;
        reason[len] = 0;
        seterr(err, errlen, "rendezvous refused by master %s:%d: %s", l->master_host,
               l->master_port, reason);
        rc = -2;
        goto out;
    }
    if ((int)cnt != world) {
        seterr(err, errlen, "master sent a table for %u stages, expected %d", cnt, world);
        goto out;
    }
    size_t tb = (size_t)world * (ADDR_BYTES + 4);
    tbl = malloc(tb);
    if (!tbl || read_until(mfd, tbl, tb, deadline, NULL) != 0) {
        seterr(err, errlen, "lost the master while reading the address table");
        goto out;
    }
    /* Lower ranks first: their listening sockets exist already, so connect()
     * completes from the backlog even before they call accept(). */
    for (int i = 1; i < me; i++) {
        char a[ADDR_BYTES];
        memcpy(a, tbl + (size_t)i * (ADDR_BYTES + 4), ADDR_BYTES);
        a[ADDR_BYTES - 1] = 0;
        int p = (int)pg_get32(tbl + (size_t)i * (ADDR_BYTES + 4) + ADDR_BYTES);
        int fd = connect_retry(a, p, cfg->connect_timeout_s, &e);
        if (fd < 0) {
            seterr(err, errlen, "cannot connect to stage %d at %s:%d: %s", i, a, p, strerror(e));
            goto out;
        }
        n->p[i].fd = fd;
        unsigned char mh[MESH_BYTES];
        memset(mh, 0, sizeof mh);
        pg_put32(mh, MESH_MAGIC);
        pg_put32(mh + 4, (uint32_t)me);
        pg_put64(mh + 8, cfg->plan_hash);
        snprintf((char *)mh + 16, RUNID_BYTES, "%s", cfg->run_id ? cfg->run_id : "");
        if (write_all(fd, mh, sizeof mh) != 0) {
            seterr(err, errlen, "cannot greet stage %d: %s", i, strerror(errno));
            goto out;
        }
    }
    if (me + 1 < world) {
        mesh_ctx mc = {n, cfg, world - 1 - me};
        greeter g = {mesh_need, mesh_done, &mc};
        if (greet_loop(lfd, now_s() + cfg->connect_timeout_s + 10.0, &g) != 0) {
            seterr(err, errlen, "higher stages did not connect within %g s", cfg->connect_timeout_s + 10.0);
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
    for (int i = 0; i < n->world; i++) n->p[i].fd = -1;
    catch_cont();
    if (n->world > 1) {
        int r = n->rank == 0 ? master_rendezvous(n, l, cfg, err, errlen)
                             : peer_rendezvous(n, l, cfg, err, errlen);
        if (r != 0) goto fail;
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
        if (pthread_create(&p->thr, NULL, sender_main, p) != 0) {
            pthread_cond_destroy(&p->cv);
            pthread_mutex_destroy(&p->mu);
            seterr(err, errlen, "cannot start the sender thread for stage %d", i);
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

/* Wait on p's condition (mu held) for a change, at most min(left, 0.1) s. */
static void wait_a_while(peer *p, double left)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double s = left < 0.1 ? left : 0.1;
    ts.tv_nsec += (long)(s * 1e9);
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&p->cv, &p->mu, &ts);
}

/* Copy len bytes into p's ring, waiting while it is full (mu held). 0, or
 * -1 when the sender thread died (its errno in dead_errno). */
static int ring_put(peer *p, const unsigned char *src, size_t left)
{
    while (left) {
        while (p->used == p->cap && !p->dead) pthread_cond_wait(&p->cv, &p->mu);
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
    int idle = !p->dead && p->used == 0 && p->lent_n == 0;
    if (idle && send_now(p, h, &hdr_done, (const unsigned char *)buf, bytes, &done)) {
        int e = p->dead_errno;
        pthread_mutex_unlock(&p->mu);
        return dead_status(n, to, e);
    }
    int r = p->dead ? -1 : ring_put(p, h + hdr_done, MSG_HDR - hdr_done);
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
        r = ring_put(p, buf, bytes);
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
    double deadline = now_s() + timeout_s;
    sig_atomic_t gen = cont_gen;
    pthread_mutex_lock(&p->mu);
    while (p->lent_done < seq && !p->dead) {
        double left = deadline - now_s();
        if (left <= 0 && gen != cont_gen) { /* stopped and continued meanwhile: wait afresh */
            gen = cont_gen;
            deadline = now_s() + timeout_s;
            continue;
        }
        if (left <= 0) {
            uint64_t behind = seq - p->lent_done;
            pthread_mutex_unlock(&p->mu);
            seterr(n->err, sizeof n->err, "%llu message%s to %s still unsent after %g s (it stopped reading)",
                   (unsigned long long)behind, behind == 1 ? "" : "s", pname(n, to, nb, sizeof nb), timeout_s);
            return PG_NET_TIMEOUT;
        }
        wait_a_while(p, left);
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
    double deadline = now_s() + timeout_s;
    int r = 0;
    sig_atomic_t gen = cont_gen;
again:
    if (p->rx_hdr_got < MSG_HDR) {
        r = read_until(p->fd, p->rx_hdr, MSG_HDR, deadline, &p->rx_hdr_got);
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
    if (r == 0) r = read_until(p->fd, buf, bytes, deadline, &p->rx_got);
    if (r == 0) {
        p->rx_hdr_got = 0;
        p->rx_got = 0;
        return PG_NET_OK;
    }
    if (r == -3 && gen != cont_gen) { /* stopped and continued meanwhile: wait afresh */
        gen = cont_gen;
        deadline = now_s() + timeout_s;
        r = 0;
        goto again;
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

pg_net_status pg_tcp_recv(pg_tcp *n, int from, uint32_t tag, void *buf, size_t bytes, double timeout_s)
{
    return pg_tcp_recv_rank(n, stage_rank(n, from), tag, buf, bytes, timeout_s);
}

pg_net_status pg_tcp_flush(pg_tcp *n, double timeout_s)
{
    char nb[48];
    double deadline = now_s() + timeout_s;
    for (int i = 0; i < n->world; i++) {
        peer *p = &n->p[i];
        if (!p->thr_started) continue;
        pthread_mutex_lock(&p->mu);
        while ((p->used > 0 || p->lent_n > 0) && !p->dead) {
            double left = deadline - now_s();
            if (left <= 0) {
                size_t u = p->used;
                for (int k = 0; k < p->lent_n; k++)
                    u += p->lent[(p->lent_head + k) % p->lent_cap].bytes;
                pthread_mutex_unlock(&p->mu);
                seterr(n->err, sizeof n->err, "%zu bytes to %s still unsent after %g s",
                       u, pname(n, i, nb, sizeof nb), timeout_s);
                return PG_NET_TIMEOUT;
            }
            wait_a_while(p, left);
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
    free(n);
}

/* runtime/cuda/cuda_net.cu — pg_net.h for the CUDA stage runtime: the same
 * semantics as the CPU's (runtime/cpu/net.c over runtime/core/tcp.c: rendezvous, tags and byte counts checked,
 * sends that do not wait for the peer, receives with a timeout that name the
 * peer), for device pointers in the arena as well as host pointers.
 *
 * Layers (runtime/cuda/README.md, "Transport", has the full story):
 *  - TCP: runtime/core/tcp.c, the same object the CPU runtime links
 *    (pg_tcp.h): rendezvous, the full mesh, and one small header per
 *    message carrying the caller's tag, the byte count and how the payload
 *    travels. The receiver's pg_tcp_recv checks tag and size exactly as
 *    on the CPU, for every message, in every build.
 *  - Host payloads (norm exchange, verdicts, checkpoint votes) follow the
 *    header on TCP ("inline"); so do device payloads on a direction that
 *    planned no traffic (rare: copied through host memory).
 *  - Device payloads between different GPUs: NCCL, one 2-rank communicator
 *    per direction (sender rank 0, receiver rank 1), the ncclUniqueId sent by
 *    the sender over TCP. pg_net_send copies the message into a device
 *    staging ring on the backend stream (so the arena slot can be reused at
 *    once, as on the CPU) and issues ncclSend from there on a separate send
 *    stream: a send never blocks the compute stream on the peer.
 *  - Device payloads between stages on the SAME GPU (NCCL refuses two ranks
 *    on one device; detected by cudaDeviceProp.uuid exchanged at init): the
 *    sender's staging ring is exported with cudaIpcGetMemHandle, with a pool
 *    of interprocess events; the receiver waits on the event named in the
 *    header and copies out of the ring with cudaMemcpyAsync, then writes the
 *    message's sequence number + 1 into a counter in the sender's ring
 *    allocation, which is how the sender knows the space is free again.
 *  - pg_net_recv returns once the payload is in place (it waits on an event
 *    with the caller's deadline, polling ncclCommGetAsyncError), so a dead
 *    peer gives PG_NET_CLOSED or PG_NET_TIMEOUT naming the stage instead of a
 *    hang; a failed or timed-out NCCL communicator is aborted.
 *
 * The backend stream comes from pg_cuda_process_ctx() (cuda_backend.h). */
#include <errno.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_common.h"
#include "cuda_backend.h"
#include "cuda_caps.h"
#include "cuda_nccl.h"
#include "pg_tcp.h"
#include "pg_le.h"

#define HDR_MAGIC 0x48434750u /* "PGCH" */
#define HDR_BYTES 32
#define TAG_INIT_INFO ((29u << 24) | 1u) /* before any caller traffic, so no clash */
#define TAG_INIT_LINK ((29u << 24) | 2u)
#define TAG_CLOSED ((29u << 24) | 3u) /* at close: I no longer map your ring */
#define NSLOTS 512                      /* at most: device messages in flight per direction (pg_cuda_msg_slots) */
#define RING_SLACK ((size_t)64 << 10)
#define RING_ALIGN 256
#define SEND_WAIT_S 300.0               /* a full staging ring waits this long for the peer */
#define GONE_GRACE_S 2.0                /* a peer's link closed: its in-flight message may still land */
#define GONE_POLL_S 0.01                /* how often a device wait looks at the peer's link */
#define CLOSE_WAIT_S 10.0               /* at close: how long an exporter waits for its importers */

enum { PATH_INLINE = 0, PATH_NCCL = 1, PATH_IPC = 2 };

typedef struct slot {
    uint64_t seq;
    size_t start, len;
} slot;

/* What a sender tells its receiver about the device link of one direction. */
typedef struct link_msg {
    uint32_t kind;       /* PATH_NCCL or PATH_IPC */
    uint32_t nslot;      /* messages in flight at most, one event each (ev[0..nslot) valid) */
    uint64_t cap;        /* ring bytes; the consumed counter sits at offset cap */
    ncclUniqueId id;
    cudaIpcMemHandle_t mem;
    cudaIpcEventHandle_t ev[NSLOTS];
} link_msg;

/* Both directions with one peer. */
typedef struct dlink {
    int same_dev;        /* the peer runs on this GPU: CUDA IPC, never NCCL */
    int dead;            /* its communicator failed and was aborted */
    int rbroken;         /* a received header did not match: out of step */
    /* me -> peer; send_cap 0: no device link, device payloads go inline */
    size_t send_cap;
    unsigned char *sring;          /* device: [send_cap] ring, then the consumed counter */
    size_t shead;
    uint64_t sseq;
    slot q[NSLOTS];                /* in flight, oldest at qhead (at most nslot) */
    int nslot;                     /* events of this direction: pg_cuda_msg_slots of a step's messages */
    int qhead, qlen;
    cudaEvent_t sev[NSLOTS];       /* IPC: "copied into the ring" (interprocess); NCCL: "sent" */
    int nsev;
    cudaEvent_t sready;            /* NCCL: the copy into the ring is done */
    cudaStream_t sstream;          /* NCCL: send stream */
    ncclComm_t scomm;
    ncclUniqueId sid;
    /* peer -> me */
    int has_recv;
    uint64_t rseq;
    size_t rcap;
    unsigned char *rring;          /* IPC: the peer's ring, opened */
    unsigned long long *rconsumed; /* IPC: the peer's counter */
    cudaEvent_t rev[NSLOTS];       /* IPC: the peer's events, opened */
    int rnslot;                    /* how many the peer made (its link_msg) */
    int nrev;
    ncclComm_t rcomm;
    ncclUniqueId rid;
    int rkind;
    /* CUDA IPC teardown (pg_net_close): an exporter may free its ring only
     * after the importer closed its mapping (CUDA: freeing it earlier is
     * undefined behaviour for the importer) */
    int exported;        /* our ring's IPC handle went to this peer */
    int unmapped;        /* the peer said it closed its mapping, or it exited */
} dlink;

struct pg_net {
    pg_tcp *tcp;
    pg_ctx *ctx;                   /* the backend's; poisoned when a receive is left waiting */
    cudaStream_t stream;           /* the backend's: every copy and receive goes here */
    cudaStream_t poll;             /* private: reads of the consumed counters */
    cudaEvent_t done;              /* completion of a receive on the backend stream */
    unsigned long long *poll_host; /* pinned */
    /* this replica's stages only (rank = replica x P + stage): the links
     * between replicas are host-memory TCP (pg_net_send_rank) */
    int rank, world;               /* this stage, the P stages */
    int base;                      /* the launch rank of this replica's stage 0 */
    dlink *l;                      /* [world], by stage */
    void *hstage;                  /* host staging: device payloads sent inline */
    size_t hstage_bytes;
    void *dstage;                  /* device staging: device payloads for a host destination */
    size_t dstage_bytes;
    char err[512];
};

/* ---- small helpers ------------------------------------------------------- */

double pg_cuda_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void pg_cuda_nap(void)
{
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

ncclResult_t pg_nccl_settle(ncclComm_t comm, ncclResult_t rc, double deadline)
{
    while (rc == ncclInProgress) {
        if (pg_cuda_now() > deadline)
            return ncclInProgress;
        pg_cuda_nap();
        ncclResult_t q = ncclCommGetAsyncError(comm, &rc);
        if (q != ncclSuccess)
            return q;
    }
    return rc;
}

static void seterr(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

static size_t align_up(size_t v) { return (v + RING_ALIGN - 1) / RING_ALIGN * RING_ALIGN; }

/* Device (or managed) memory: payload for NCCL/IPC; anything else is host. */
static int is_device(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* clear it: not a CUDA pointer means host */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* A CUDA error on link `peer`: message in n->err, PG_NET_ERROR. */
static pg_net_status cuda_err(pg_net *n, int peer, const char *what, cudaError_t e)
{
    seterr(n->err, sizeof n->err, "%s with stage %d failed on the GPU: %s (%s)", what, peer,
           cudaGetErrorString(e), cudaGetErrorName(e));
    return PG_NET_ERROR;
}

#define NET_CUDA(n, peer, what, call)                                                \
    do {                                                                             \
        cudaError_t pg_e_ = (call);                                                  \
        if (pg_e_ != cudaSuccess)                                                    \
            return cuda_err((n), (peer), (what), pg_e_);                             \
    } while (0)

static pg_net_status tcp_err(pg_net *n, pg_net_status st)
{
    seterr(n->err, sizeof n->err, "%s", pg_tcp_error(n->tcp));
    return st;
}

static void link_abort(dlink *L)
{
    if (L->scomm) ncclCommAbort(L->scomm);
    if (L->rcomm) ncclCommAbort(L->rcomm);
    L->scomm = L->rcomm = NULL;
    L->dead = 1;
}

/* A non-blocking communicator's call returned rc: wait until it settles. */
static pg_net_status nccl_settle(pg_net *n, dlink *L, int peer, ncclComm_t comm, ncclResult_t rc, double deadline,
                                 const char *what)
{
    rc = pg_nccl_settle(comm, rc, deadline);
    if (rc == ncclInProgress) {
        link_abort(L);
        seterr(n->err, sizeof n->err, "%s with stage %d did not complete in time (NCCL link aborted)", what, peer);
        return PG_NET_TIMEOUT;
    }
    if (rc != ncclSuccess) {
        const char *why = ncclGetErrorString(rc);
        link_abort(L);
        seterr(n->err, sizeof n->err, "%s with stage %d failed: %s (stage %d died or the link broke)", what, peer, why,
               peer);
        return PG_NET_CLOSED;
    }
    return PG_NET_OK;
}

/* The peer's TCP link is closed (it exited or was killed) and has been for
 * GONE_GRACE_S: whatever it had in flight has landed by now or never will.
 * Polled every GONE_POLL_S from the device waits below; *since and *next
 * carry the state between calls of one wait. */
static int peer_gone_for_good(pg_net *n, int peer, double *since, double *next)
{
    double t = pg_cuda_now();
    if (t < *next)
        return 0;
    *next = t + GONE_POLL_S;
    if (*since == 0.0 && pg_tcp_peer_gone(n->tcp, peer))
        *since = t;
    return *since != 0.0 && t - *since > GONE_GRACE_S;
}

static pg_net_status gone_err(pg_net *n, dlink *L, int peer, const char *what)
{
    link_abort(L);
    seterr(n->err, sizeof n->err, "stage %d closed its connection (it exited or was killed) %s", peer, what);
    return PG_NET_CLOSED;
}

/* The backend stream has work that waits for a peer that will never deliver:
 * from now on nothing may wait for that stream (pg_backend_poisoned). */
static void poison(pg_net *n, const char *why)
{
    if (n->ctx)
        pg_cuda_poison(n->ctx, why);
}

static int is_poisoned(pg_net *n, int peer)
{
    if (!n->ctx || !pg_backend_poisoned(n->ctx))
        return 0;
    seterr(n->err, sizeof n->err,
           "no transfer with stage %d: an earlier one left this GPU stream waiting for a stage that died", peer);
    return 1;
}

/* Wait for ev by deadline, watching comm (may be NULL) for an asynchronous
 * error and the peer's link for its death. On timeout the message is `late`
 * (already formatted). */
static pg_net_status wait_event(pg_net *n, dlink *L, int peer, cudaEvent_t ev, ncclComm_t comm, double deadline,
                                const char *late)
{
    double gone_since = 0.0, gone_next = 0.0;
    for (;;) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess)
            return PG_NET_OK;
        if (e != cudaErrorNotReady)
            return cuda_err(n, peer, "waiting for a transfer", e);
        if (peer_gone_for_good(n, peer, &gone_since, &gone_next))
            return gone_err(n, L, peer, "while a GPU transfer with it was in flight");
        if (comm) {
            ncclResult_t ae = ncclSuccess;
            if (ncclCommGetAsyncError(comm, &ae) == ncclSuccess && ae != ncclSuccess && ae != ncclInProgress) {
                link_abort(L);
                seterr(n->err, sizeof n->err,
                       "the NCCL link with stage %d failed: %s (stage %d died or the link broke)",
                       peer, ncclGetErrorString(ae), peer);
                return PG_NET_CLOSED;
            }
        }
        if (pg_cuda_now() > deadline) {
            if (comm)
                link_abort(L);
            seterr(n->err, sizeof n->err, "%s", late);
            return PG_NET_TIMEOUT;
        }
        pg_cuda_nap();
    }
}

static int grow_host(pg_net *n, size_t bytes)
{
    if (bytes <= n->hstage_bytes)
        return 0;
    void *p = realloc(n->hstage, bytes);
    if (!p) {
        seterr(n->err, sizeof n->err, "cannot allocate %zu bytes of host staging", bytes);
        return 1;
    }
    n->hstage = p;
    n->hstage_bytes = bytes;
    return 0;
}

static int grow_dev(pg_net *n, size_t bytes)
{
    if (bytes <= n->dstage_bytes)
        return 0;
    if (n->dstage) {
        cudaFree(n->dstage); /* no transfer is pending on it: receives complete before returning */
        pg_cuda_own_add(PG_CUDA_OWN_LINKS, -(long long)n->dstage_bytes);
    }
    n->dstage = NULL;
    n->dstage_bytes = 0;
    cudaError_t e = cudaMalloc(&n->dstage, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        n->dstage = NULL;
        seterr(n->err, sizeof n->err, "cannot allocate %zu bytes of GPU staging: %s", bytes,
               cudaGetErrorString(e));
        return 1;
    }
    n->dstage_bytes = bytes;
    pg_cuda_own_add(PG_CUDA_OWN_LINKS, (long long)bytes);
    return 0;
}

/* ---- sending ------------------------------------------------------------- */

/* The oldest in-flight message to `to` has left the ring. */
static pg_net_status retire_oldest(pg_net *n, int to, double deadline)
{
    dlink *L = &n->l[to];
    const slot *o = &L->q[L->qhead];
    char late[256];
    seterr(late, sizeof late,
           "stage %d has not taken message %llu (%zu bytes) out of the send ring within %g s", to,
           (unsigned long long)o->seq, o->len, SEND_WAIT_S);
    if (L->same_dev) {
        unsigned long long *ctr = (unsigned long long *)(L->sring + L->send_cap);
        double gone_since = 0.0, gone_next = 0.0;
        for (;;) {
            NET_CUDA(n, to, "reading the ring counter",
                     cudaMemcpyAsync(n->poll_host, ctr, sizeof *ctr, cudaMemcpyDeviceToHost, n->poll));
            NET_CUDA(n, to, "reading the ring counter", cudaStreamSynchronize(n->poll));
            if (*n->poll_host >= o->seq + 1)
                break;
            if (peer_gone_for_good(n, to, &gone_since, &gone_next))
                return gone_err(n, L, to, "before it took our message out of the send ring");
            if (pg_cuda_now() > deadline) {
                seterr(n->err, sizeof n->err, "%s", late);
                return PG_NET_TIMEOUT;
            }
            pg_cuda_nap();
        }
    } else {
        pg_net_status st = wait_event(n, L, to, L->sev[o->seq % (uint64_t)L->nslot], L->scomm, deadline, late);
        if (st)
            return st;
    }
    L->qhead = (L->qhead + 1) % NSLOTS;
    L->qlen--;
    return PG_NET_OK;
}

/* Where the next `bytes` go in the ring: after the last message, or at 0
 * when it does not fit before the end; waits for older messages that still
 * occupy that space (like the CPU ring, only when a step's traffic is full). */
static pg_net_status ring_place(pg_net *n, int to, size_t bytes, size_t *start)
{
    dlink *L = &n->l[to];
    size_t s = L->shead + bytes > L->send_cap ? 0 : L->shead;
    double deadline = pg_cuda_now() + SEND_WAIT_S;
    for (;;) {
        int clash = L->qlen == L->nslot;
        for (int i = 0; i < L->qlen && !clash; i++) {
            const slot *q = &L->q[(L->qhead + i) % NSLOTS];
            clash = s < q->start + q->len && q->start < s + bytes;
        }
        if (!clash)
            break;
        pg_net_status st = retire_oldest(n, to, deadline);
        if (st)
            return st;
    }
    *start = s;
    L->shead = align_up(s + bytes);
    return PG_NET_OK;
}

static pg_net_status send_header(pg_net *n, int to, uint32_t tag, uint32_t path, size_t bytes, size_t off,
                                 uint64_t seq)
{
    unsigned char h[HDR_BYTES];
    pg_put32(h, HDR_MAGIC);
    pg_put32(h + 4, path);
    pg_put64(h + 8, (uint64_t)bytes);
    pg_put64(h + 16, (uint64_t)off);
    pg_put64(h + 24, seq);
    pg_net_status st = pg_tcp_send(n->tcp, to, tag, h, sizeof h);
    return st ? tcp_err(n, st) : PG_NET_OK;
}

static int bad_peer(pg_net *n, int peer, const char *what)
{
    if (peer < 0 || peer >= n->world || peer == n->rank) {
        seterr(n->err, sizeof n->err, "%s stage %d: no such link (world %d)", what, peer,
               n->world);
        return 1;
    }
    return 0;
}

pg_net_status pg_net_send(pg_net *n, int to, uint32_t tag, const void *buf, size_t bytes)
{
    if (bad_peer(n, to, "send to"))
        return PG_NET_ERROR;
    dlink *L = &n->l[to];
    if (L->dead) {
        seterr(n->err, sizeof n->err, "the link to stage %d failed earlier", to);
        return PG_NET_CLOSED;
    }
    if (is_poisoned(n, to))
        return PG_NET_ERROR;
    int dev = bytes > 0 && is_device(buf);
    if (!dev || bytes > L->send_cap) {
        /* inline: header then payload on TCP; device data through host memory */
        const void *src = buf;
        if (dev) {
            if (grow_host(n, bytes))
                return PG_NET_ERROR;
            NET_CUDA(n, to, "staging a message", cudaMemcpyAsync(n->hstage, buf, bytes, cudaMemcpyDeviceToHost, n->stream));
            NET_CUDA(n, to, "staging a message", cudaStreamSynchronize(n->stream));
            src = n->hstage;
        }
        pg_net_status st = send_header(n, to, tag, PATH_INLINE, bytes, 0, 0);
        if (!st && (st = pg_tcp_send(n->tcp, to, tag, src, bytes)))
            return tcp_err(n, st);
        return st;
    }
    size_t start = 0;
    pg_net_status st = ring_place(n, to, bytes, &start);
    if (st)
        return st;
    uint64_t seq = L->sseq;
    cudaEvent_t ev = L->sev[seq % (uint64_t)L->nslot];
    /* NCCL: the header goes first, so the receiver is already on its way to
     * its ncclRecv while ours is enqueued (the links were connected at start-
     * up, init_comms, so ncclSend itself never waits for the peer). IPC: the
     * header must follow the event record it names. */
    if (!L->same_dev && (st = send_header(n, to, tag, PATH_NCCL, bytes, start, seq)))
        return st;
    NET_CUDA(n, to, "copying a message into the send ring",
             cudaMemcpyAsync(L->sring + start, buf, bytes, cudaMemcpyDeviceToDevice, n->stream));
    if (L->same_dev) {
        NET_CUDA(n, to, "recording a send", cudaEventRecord(ev, n->stream));
    } else {
        NET_CUDA(n, to, "recording a send", cudaEventRecord(L->sready, n->stream));
        NET_CUDA(n, to, "ordering a send", cudaStreamWaitEvent(L->sstream, L->sready, 0));
        ncclResult_t rc = ncclSend(L->sring + start, bytes, ncclUint8, 1, L->scomm, L->sstream);
        if ((st = nccl_settle(n, L, to, L->scomm, rc, pg_cuda_now() + SEND_WAIT_S, "ncclSend")))
            return st;
        NET_CUDA(n, to, "recording a send", cudaEventRecord(ev, L->sstream));
    }
    slot *q = &L->q[(L->qhead + L->qlen) % NSLOTS];
    q->seq = seq;
    q->start = start;
    q->len = bytes;
    L->qlen++;
    L->sseq++;
    return L->same_dev ? send_header(n, to, tag, PATH_IPC, bytes, start, seq) : PG_NET_OK;
}

/* ---- receiving ----------------------------------------------------------- */

__global__ void set_u64_kernel(unsigned long long *p, unsigned long long v)
{
    *p = v;
    __threadfence_system();
}

pg_net_status pg_net_recv(pg_net *n, int from, uint32_t tag, void *buf, size_t bytes, double timeout_s)
{
    if (bad_peer(n, from, "receive from"))
        return PG_NET_ERROR;
    dlink *L = &n->l[from];
    if (L->rbroken) {
        seterr(n->err, sizeof n->err, "the link from stage %d is out of step after an earlier mismatch", from);
        return PG_NET_MISMATCH;
    }
    if (L->dead) {
        seterr(n->err, sizeof n->err, "the link from stage %d failed earlier", from);
        return PG_NET_CLOSED;
    }
    if (is_poisoned(n, from))
        return PG_NET_ERROR;
    double deadline = pg_cuda_now() + timeout_s;
    unsigned char h[HDR_BYTES];
    pg_net_status st = pg_tcp_recv(n->tcp, from, tag, h, sizeof h, timeout_s);
    if (st == PG_NET_MISMATCH) {
        L->rbroken = 1;
        seterr(n->err, sizeof n->err, "%s [the header of a %zu-byte message; headers are %d bytes]",
               pg_tcp_error(n->tcp), bytes, HDR_BYTES);
        return st;
    }
    if (st)
        return tcp_err(n, st);
    uint32_t path = pg_get32(h + 4);
    uint64_t got = pg_get64(h + 8), off = pg_get64(h + 16), seq = pg_get64(h + 24);
    if (pg_get32(h) != HDR_MAGIC || path > PATH_IPC) {
        L->rbroken = 1;
        seterr(n->err, sizeof n->err, "garbage on the link from stage %d (bad message header)", from);
        return PG_NET_MISMATCH;
    }
    if (got != (uint64_t)bytes) {
        L->rbroken = 1;
        seterr(n->err, sizeof n->err, "expected tag %u (%zu bytes) from stage %d but received tag %u (%llu bytes)", tag,
               bytes, from, tag, (unsigned long long)got);
        return PG_NET_MISMATCH;
    }
    int dev = bytes > 0 && is_device(buf);
    if (path == PATH_INLINE) {
        void *dst = buf;
        if (dev) {
            if (grow_host(n, bytes))
                return PG_NET_ERROR;
            dst = n->hstage;
        }
        double left = deadline - pg_cuda_now();
        if ((st = pg_tcp_recv(n->tcp, from, tag, dst, bytes, left > 0 ? left : 0)))
            return tcp_err(n, st);
        if (dev) {
            NET_CUDA(n, from, "unstaging a message", cudaMemcpyAsync(buf, n->hstage, bytes, cudaMemcpyHostToDevice, n->stream));
            NET_CUDA(n, from, "unstaging a message", cudaStreamSynchronize(n->stream));
        }
        return PG_NET_OK;
    }
    /* device payload: into buf, or into device staging for a host buffer */
    if ((path == PATH_IPC) != (L->rkind == PATH_IPC) || (path == PATH_IPC && !L->rring) ||
        (path == PATH_NCCL && !L->rcomm) || seq != L->rseq || (path == PATH_IPC && off + bytes > L->rcap)) {
        L->rbroken = 1;
        seterr(n->err, sizeof n->err,
               "stage %d sent message %llu (%zu bytes at %llu) by %s, which does not match the link set up "
               "at start-up (expected message %llu)",
               from, (unsigned long long)seq, bytes, (unsigned long long)off, path == PATH_IPC ? "CUDA IPC" : "NCCL",
               (unsigned long long)L->rseq);
        return PG_NET_MISMATCH;
    }
    void *dst = buf;
    if (!dev) {
        if (grow_dev(n, bytes))
            return PG_NET_ERROR;
        dst = n->dstage;
    }
    /* from here the backend stream waits for the peer: if the payload never
     * comes, that stream is stuck for good (poison) */
    if (path == PATH_IPC) {
        cudaError_t e = cudaStreamWaitEvent(n->stream, L->rev[seq % (uint64_t)L->rnslot], 0);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(dst, L->rring + off, bytes, cudaMemcpyDeviceToDevice, n->stream);
        if (e == cudaSuccess) {
            set_u64_kernel<<<1, 1, 0, n->stream>>>(L->rconsumed, (unsigned long long)(seq + 1));
            e = cudaGetLastError();
        }
        if (e != cudaSuccess) {
            poison(n, "a CUDA IPC receive that failed half-way");
            return cuda_err(n, from, "receiving a message by CUDA IPC", e);
        }
    } else {
        ncclResult_t rc = ncclRecv(dst, bytes, ncclUint8, 0, L->rcomm, n->stream);
        if ((st = nccl_settle(n, L, from, L->rcomm, rc, deadline, "ncclRecv"))) {
            poison(n, "an NCCL receive that did not complete");
            return st;
        }
    }
    L->rseq++;
    NET_CUDA(n, from, "recording a receive", cudaEventRecord(n->done, n->stream));
    char late[256];
    seterr(late, sizeof late, "no message from stage %d within %g s (expected tag %u, %zu bytes; header received, "
           "payload by %s did not arrive)", from, timeout_s, tag, bytes, path == PATH_IPC ? "CUDA IPC" : "NCCL");
    if ((st = wait_event(n, L, from, n->done, path == PATH_NCCL ? L->rcomm : NULL, deadline, late))) {
        poison(n, path == PATH_IPC ? "a CUDA IPC receive whose sender never recorded its event"
                                   : "an NCCL receive that did not complete");
        return st;
    }
    if (!dev) {
        NET_CUDA(n, from, "copying a message to the host", cudaMemcpyAsync(buf, dst, bytes, cudaMemcpyDeviceToHost, n->stream));
        NET_CUDA(n, from, "copying a message to the host", cudaStreamSynchronize(n->stream));
    }
    return PG_NET_OK;
}

pg_net_status pg_net_flush(pg_net *n, double timeout_s)
{
    pg_net_status st = pg_tcp_flush(n->tcp, timeout_s);
    if (st)
        return tcp_err(n, st);
    double deadline = pg_cuda_now() + timeout_s;
    for (int i = 0; i < n->world; i++)
        while (n->l[i].qlen > 0 && !n->l[i].dead)
            if ((st = retire_oldest(n, i, deadline)))
                return st;
    return PG_NET_OK;
}

const char *pg_net_error(const pg_net *n) { return n ? n->err : "no network"; }

/* Host memory between ranks (data-parallel replicas, runtime/core/dp.c): the
 * TCP link as it is. */
pg_net_status pg_net_send_rank(pg_net *n, int rank, uint32_t tag, const void *buf, size_t bytes)
{
    pg_net_status st = pg_tcp_send_rank(n->tcp, rank, tag, buf, bytes);
    if (st)
        seterr(n->err, sizeof n->err, "%s", pg_tcp_error(n->tcp));
    return st;
}

pg_net_status pg_net_recv_rank(pg_net *n, int rank, uint32_t tag, void *buf, size_t bytes, double timeout_s)
{
    pg_net_status st = pg_tcp_recv_rank(n->tcp, rank, tag, buf, bytes, timeout_s);
    if (st)
        seterr(n->err, sizeof n->err, "%s", pg_tcp_error(n->tcp));
    return st;
}

/* The arena is device memory: a stage's message is staged through the link's
 * ring (or the host) as pg_net_send does, so nothing stays lent. */
pg_net_status pg_net_send_lent(pg_net *n, int peer, uint32_t tag, const void *buf, size_t bytes, uint64_t *seq)
{
    *seq = 0;
    return pg_net_send(n, peer, tag, buf, bytes);
}

pg_net_status pg_net_wait_sent(pg_net *n, int peer, uint64_t seq, double timeout_s)
{
    (void)n, (void)peer, (void)seq, (void)timeout_s;
    return PG_NET_OK;
}

pg_net_status pg_net_send_rank_lent(pg_net *n, int rank, uint32_t tag, const void *buf, size_t bytes, uint64_t *seq)
{
    pg_net_status st = pg_tcp_send_rank_lent(n->tcp, rank, tag, buf, bytes, seq);
    if (st)
        seterr(n->err, sizeof n->err, "%s", pg_tcp_error(n->tcp));
    return st;
}

pg_net_status pg_net_wait_lent(pg_net *n, int rank, uint64_t seq, double timeout_s)
{
    pg_net_status st = pg_tcp_wait_lent(n->tcp, rank, seq, timeout_s);
    if (st)
        seterr(n->err, sizeof n->err, "%s", pg_tcp_error(n->tcp));
    return st;
}

int pg_net_peer_lost(const pg_net *n) { return n && pg_tcp_peer_lost(n->tcp); }

/* ---- start-up ------------------------------------------------------------ */

#define INIT_CUDA(call, what)                                                         \
    do {                                                                              \
        cudaError_t pg_e_ = (call);                                                   \
        if (pg_e_ != cudaSuccess) {                                                   \
            seterr(err, errlen, "%s failed: %s (%s)", (what),       \
                   cudaGetErrorString(pg_e_), cudaGetErrorName(pg_e_));               \
            return -1;                                                                \
        }                                                                             \
    } while (0)

/* Every stage tells every other: how many bytes it sends it per step, and
 * which GPU it runs on. */
static int exchange_info(pg_net *n, const pg_net_config *cfg, char *err, size_t errlen)
{
    cudaDeviceProp prop;
    int dev = 0;
    INIT_CUDA(cudaGetDevice(&dev), "cudaGetDevice");
    INIT_CUDA(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    for (int j = 0; j < n->world; j++) {
        if (j == n->rank)
            continue;
        unsigned char m[32];
        memset(m, 0, sizeof m);
        pg_put64(m, (uint64_t)(cfg->send_buf_bytes ? cfg->send_buf_bytes[n->base + j] : 0));
        memcpy(m + 8, &prop.uuid, 16);
        if (pg_tcp_send(n->tcp, j, TAG_INIT_INFO, m, sizeof m)) {
            seterr(err, errlen, "start-up exchange with stage %d: %s", j, pg_tcp_error(n->tcp));
            return -1;
        }
    }
    for (int j = 0; j < n->world; j++) {
        if (j == n->rank)
            continue;
        unsigned char m[32];
        if (pg_tcp_recv(n->tcp, j, TAG_INIT_INFO, m, sizeof m, cfg->connect_timeout_s + 30.0)) {
            seterr(err, errlen, "start-up exchange with stage %d: %s", j, pg_tcp_error(n->tcp));
            return -1;
        }
        dlink *L = &n->l[j];
        size_t mine = cfg->send_buf_bytes ? cfg->send_buf_bytes[n->base + j] : 0;
        L->send_cap = mine ? align_up(2 * mine + RING_SLACK) : 0; /* 2x: room for the wrap-around */
        L->nslot = pg_cuda_msg_slots(cfg->send_msgs ? cfg->send_msgs[n->base + j] : -1, NSLOTS);
        L->has_recv = pg_get64(m) > 0;
        L->same_dev = memcmp(m + 8, &prop.uuid, 16) == 0;
        /* a device link on this GPU is CUDA IPC: can this device do it? */
        if (L->same_dev && (L->send_cap || L->has_recv)) {
            int ipc_ev = 0;
            if (cudaDeviceGetAttribute(&ipc_ev, cudaDevAttrIpcEventSupport, dev) != cudaSuccess)
                ipc_ev = 0, cudaGetLastError();
            if (pg_cuda_ipc_unusable(n->rank, j, dev, ipc_ev, err, errlen))
                return -1;
        }
    }
    return 0;
}

/* Device rings, IPC handles or NCCL ids: senders send, then receivers receive. */
static int setup_links(pg_net *n, const pg_net_config *cfg, char *err, size_t errlen)
{
    link_msg *m = (link_msg *)calloc(1, sizeof *m);
    if (!m) {
        seterr(err, errlen, "out of memory");
        return -1;
    }
    int rc = -1;
    for (int j = 0; j < n->world; j++) {
        dlink *L = &n->l[j];
        if (j == n->rank || !L->send_cap)
            continue;
        memset(m, 0, sizeof *m);
        m->cap = L->send_cap;
        cudaError_t e = cudaMalloc((void **)&L->sring, L->send_cap + RING_ALIGN);
        if (e == cudaSuccess)
            pg_cuda_own_add(PG_CUDA_OWN_LINKS, (long long)(L->send_cap + RING_ALIGN));
        if (e == cudaSuccess)
            e = cudaMemset(L->sring + L->send_cap, 0, sizeof(unsigned long long));
        if (e == cudaSuccess)
            e = cudaDeviceSynchronize(); /* the counter is 0 before the peer can see the ring */
        unsigned flags = cudaEventDisableTiming | (L->same_dev ? cudaEventInterprocess : 0);
        m->nslot = (uint32_t)L->nslot;
        for (int i = 0; i < L->nslot && e == cudaSuccess; i++)
            if ((e = cudaEventCreateWithFlags(&L->sev[i], flags)) == cudaSuccess) {
                L->nsev++;
                if (L->same_dev)
                    e = cudaIpcGetEventHandle(&m->ev[i], L->sev[i]);
            }
        if (e == cudaSuccess && L->same_dev) {
            m->kind = PATH_IPC;
            e = cudaIpcGetMemHandle(&m->mem, L->sring);
        } else if (e == cudaSuccess) {
            m->kind = PATH_NCCL;
            if ((e = cudaEventCreateWithFlags(&L->sready, cudaEventDisableTiming)) == cudaSuccess)
                e = cudaStreamCreateWithFlags(&L->sstream, cudaStreamNonBlocking);
            ncclResult_t r = e == cudaSuccess ? ncclGetUniqueId(&L->sid) : ncclSuccess;
            if (r != ncclSuccess) {
                seterr(err, errlen, "ncclGetUniqueId failed: %s", ncclGetErrorString(r));
                goto out;
            }
            m->id = L->sid;
        }
        if (e != cudaSuccess) {
            seterr(err, errlen, "setting up the %s link to stage %d (a %zu-byte ring): %s",
                   L->same_dev ? "CUDA IPC" : "NCCL", j, L->send_cap, cudaGetErrorString(e));
            goto out;
        }
        L->exported = L->same_dev; /* from here the peer may map our ring */
        if (pg_tcp_send(n->tcp, j, TAG_INIT_LINK, m, sizeof *m)) {
            seterr(err, errlen, "start-up exchange with stage %d: %s", j, pg_tcp_error(n->tcp));
            goto out;
        }
    }
    for (int j = 0; j < n->world; j++) {
        dlink *L = &n->l[j];
        if (j == n->rank || !L->has_recv)
            continue;
        if (pg_tcp_recv(n->tcp, j, TAG_INIT_LINK, m, sizeof *m, cfg->connect_timeout_s + 30.0)) {
            seterr(err, errlen, "start-up exchange with stage %d: %s", j, pg_tcp_error(n->tcp));
            goto out;
        }
        if (m->kind != (L->same_dev ? (uint32_t)PATH_IPC : (uint32_t)PATH_NCCL)) {
            seterr(err, errlen, "stage %d disagrees on whether we share a GPU", j);
            goto out;
        }
        if (m->nslot < 1 || m->nslot > NSLOTS) {
            seterr(err, errlen, "stage %d announced %u message slots (1 to %d)", j, m->nslot, NSLOTS);
            goto out;
        }
        L->rkind = (int)m->kind;
        L->rcap = (size_t)m->cap;
        if (m->kind == PATH_NCCL) {
            L->rid = m->id;
            continue;
        }
        cudaError_t e = cudaIpcOpenMemHandle((void **)&L->rring, m->mem, cudaIpcMemLazyEnablePeerAccess);
        if (e == cudaSuccess)
            L->rconsumed = (unsigned long long *)(L->rring + L->rcap);
        L->rnslot = (int)m->nslot;
        for (int i = 0; i < L->rnslot && e == cudaSuccess; i++)
            if ((e = cudaIpcOpenEventHandle(&L->rev[i], m->ev[i])) == cudaSuccess)
                L->nrev++;
        if (e != cudaSuccess) {
            seterr(err, errlen, "opening stage %d's CUDA IPC handles (same GPU): %s", j,
                   cudaGetErrorString(e));
            goto out;
        }
    }
    rc = 0;
out:
    free(m);
    return rc;
}

int pg_nccl_comm_init(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, double timeout_s, const char *what,
                      char *err, size_t errlen)
{
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.blocking = 0; /* so a peer that never joins is a timeout, not a hang */
    *comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(comm, nranks, id, rank, &c);
    if (*comm)
        r = pg_nccl_settle(*comm, r, pg_cuda_now() + timeout_s);
    if (r == ncclInProgress) {
        ncclCommAbort(*comm);
        *comm = NULL;
        seterr(err, errlen, "%s did not come up within %g s", what, timeout_s);
        return -1;
    }
    if (r != ncclSuccess) {
        if (*comm)
            ncclCommAbort(*comm);
        *comm = NULL;
        seterr(err, errlen, "setting up %s failed: %s", what, ncclGetErrorString(r));
        return -1;
    }
    return 0;
}

void pg_nccl_comm_close(ncclComm_t comm)
{
    if (!comm)
        return;
    if (pg_nccl_settle(comm, ncclCommFinalize(comm), pg_cuda_now() + 5.0) == ncclSuccess)
        ncclCommDestroy(comm);
    else
        ncclCommAbort(comm);
}

static int comm_init(int peer, ncclComm_t *comm, ncclUniqueId id, int rank, double timeout_s, char *err,
                     size_t errlen)
{
    char what[64];
    seterr(what, sizeof what, "the NCCL link with stage %d", peer);
    return pg_nccl_comm_init(comm, 2, id, rank, timeout_s, what, err, errlen);
}

/* NCCL connects a send/recv pair at its first ncclSend/ncclRecv, and both
 * ranks take part (the p2p "preconnect" of ncclGroupEnd: a non-blocking
 * communicator's first ncclSend stays ncclInProgress until the peer's
 * ncclRecv comes). A sender must never wait for its receiver (pg_net.h), so
 * each link is connected here, right after its communicator is made, by one
 * 1-byte transfer that both ends make at the same point of init_comms' order. */
static int warm_up(pg_net *n, int peer, int sender, double timeout_s, char *err, size_t errlen)
{
    dlink *L = &n->l[peer];
    double deadline = pg_cuda_now() + timeout_s;
    if (!sender && grow_dev(n, RING_ALIGN)) {
        seterr(err, errlen, "%s", n->err);
        return -1;
    }
    ncclComm_t comm = sender ? L->scomm : L->rcomm;
    cudaStream_t st = sender ? L->sstream : n->stream;
    cudaEvent_t ev = sender ? L->sready : n->done;
    ncclResult_t r = sender ? ncclSend(L->sring, 1, ncclUint8, 1, comm, st)
                            : ncclRecv(n->dstage, 1, ncclUint8, 0, comm, st);
    const char *what = sender ? "connecting the NCCL link (first ncclSend)" : "connecting the NCCL link (first ncclRecv)";
    pg_net_status s = nccl_settle(n, L, peer, comm, r, deadline, what);
    if (s == PG_NET_OK) {
        cudaError_t e = cudaEventRecord(ev, st);
        if (e != cudaSuccess) {
            seterr(err, errlen, "%s with stage %d: cudaEventRecord: %s", what, peer, cudaGetErrorString(e));
            return -1;
        }
        char late[256];
        seterr(late, sizeof late, "%s with stage %d did not complete within %g s", what, peer, timeout_s);
        s = wait_event(n, L, peer, ev, comm, deadline, late);
    }
    if (s != PG_NET_OK) {
        seterr(err, errlen, "%s", n->err);
        return -1;
    }
    return 0;
}

/* One communicator per direction, created and connected in one global order
 * (sender, receiver) that every stage walks alike, so no two stages wait on
 * each other's second communicator first: the first pair in the order that is
 * not done yet always has both its stages at it. */
static int init_comms(pg_net *n, const pg_net_config *cfg, char *err, size_t errlen)
{
    double t = cfg->connect_timeout_s + 30.0;
    for (int s = 0; s < n->world; s++)
        for (int r = 0; r < n->world; r++) {
            if (s == r)
                continue;
            if (s == n->rank && n->l[r].send_cap && !n->l[r].same_dev &&
                (comm_init(r, &n->l[r].scomm, n->l[r].sid, 0, t, err, errlen) ||
                 warm_up(n, r, 1, t, err, errlen)))
                return -1;
            if (r == n->rank && n->l[s].has_recv && !n->l[s].same_dev &&
                (comm_init(s, &n->l[s].rcomm, n->l[s].rid, 1, t, err, errlen) ||
                 warm_up(n, s, 0, t, err, errlen)))
                return -1;
        }
    return 0;
}

/* CUDA IPC teardown, after a clean flush: close the mappings of the peers'
 * rings and tell each exporter so (TAG_CLOSED); then, as an exporter, wait
 * for each importer's word, or its exit, before our ring may be freed
 * (release). Sends first, then waits: no two stages wait on each other. */
static void ipc_teardown(pg_net *n)
{
    for (int j = 0; j < n->world; j++) {
        dlink *L = &n->l[j];
        if (!L->rring)
            continue;
        for (int k = 0; k < L->nrev; k++)
            cudaEventDestroy(L->rev[k]);
        L->nrev = 0;
        cudaIpcCloseMemHandle(L->rring);
        L->rring = NULL;
        unsigned char b = 1;
        pg_tcp_send(n->tcp, j, TAG_CLOSED, &b, 1); /* best effort: our exit tells it as well */
    }
    double deadline = pg_cuda_now() + CLOSE_WAIT_S;
    for (int j = 0; j < n->world; j++) {
        dlink *L = &n->l[j];
        if (!L->exported || L->unmapped)
            continue;
        unsigned char b = 0;
        double left = deadline - pg_cuda_now();
        pg_net_status st = L->dead ? PG_NET_CLOSED : pg_tcp_recv(n->tcp, j, TAG_CLOSED, &b, 1, left > 0 ? left : 0);
        L->unmapped = st == PG_NET_OK || st == PG_NET_CLOSED; /* closed: it exited, its mapping with it */
    }
}

/* Releases everything. clean: every message left (flushed). A poisoned
 * backend (a receive left waiting for a dead peer) gets no CUDA call at all:
 * the communicators are aborted and the host side freed, the device side is
 * left to process exit (main.c leaves by _exit). An exported ring whose
 * importer has not unmapped it is never freed here either. */
static void release(pg_net *n, int clean)
{
    int stuck = n->ctx && pg_backend_poisoned(n->ctx);
    for (int i = 0; n->l && i < n->world; i++) {
        dlink *L = &n->l[i];
        if (!clean || stuck)
            link_abort(L);
        pg_nccl_comm_close(L->scomm);
        pg_nccl_comm_close(L->rcomm);
        if (stuck)
            continue;
        if (L->sstream) {
            if (clean)
                cudaStreamSynchronize(L->sstream);
            cudaStreamDestroy(L->sstream);
        }
        if (L->sready)
            cudaEventDestroy(L->sready);
        for (int k = 0; k < L->nsev; k++)
            cudaEventDestroy(L->sev[k]);
        for (int k = 0; k < L->nrev; k++)
            cudaEventDestroy(L->rev[k]);
        if (L->rring)
            cudaIpcCloseMemHandle(L->rring);
        if (L->sring && (!L->exported || L->unmapped)) {
            cudaFree(L->sring);
            pg_cuda_own_add(PG_CUDA_OWN_LINKS, -(long long)(L->send_cap + RING_ALIGN));
        }
    }
    free(n->l);
    free(n->hstage);
    if (!stuck) {
        if (n->dstage) {
            cudaFree(n->dstage);
            pg_cuda_own_add(PG_CUDA_OWN_LINKS, -(long long)n->dstage_bytes);
        }
        if (n->done)
            cudaEventDestroy(n->done);
        if (n->poll)
            cudaStreamDestroy(n->poll);
        if (n->poll_host)
            cudaFreeHost(n->poll_host);
    }
    pg_tcp_close(n->tcp);
    free(n);
}

pg_net *pg_net_init(const pg_launch *l, const pg_net_config *cfg, char *err, size_t errlen)
{
    pg_ctx *ctx = pg_cuda_process_ctx();
    if (!ctx) {
        seterr(err, errlen, "the CUDA transport needs the CUDA backend: call pg_backend_init first");
        return NULL;
    }
    pg_net *n = (pg_net *)calloc(1, sizeof *n);
    if (!n) {
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    n->tcp = pg_tcp_init(l, cfg, err, errlen);
    if (!n->tcp) {
        free(n);
        return NULL;
    }
    int D = l->replicas > 0 ? l->replicas : 1; /* pg_tcp_init checked world = P x D */
    n->world = l->world / D;
    n->rank = l->rank % n->world;
    n->base = l->rank - n->rank;
    n->ctx = ctx;
    n->stream = ctx->stream;
    n->l = (dlink *)calloc((size_t)n->world, sizeof *n->l);
    if (!n->l) {
        seterr(err, errlen, "out of memory");
        release(n, 0);
        return NULL;
    }
    cudaError_t e = cudaStreamCreateWithFlags(&n->poll, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&n->done, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&n->poll_host, sizeof *n->poll_host);
    if (e != cudaSuccess) {
        seterr(err, errlen, "setting up the CUDA transport: %s", cudaGetErrorString(e));
        release(n, 0);
        return NULL;
    }
    if (n->world > 1 &&
        (exchange_info(n, cfg, err, errlen) || setup_links(n, cfg, err, errlen) || init_comms(n, cfg, err, errlen))) {
        release(n, 0);
        return NULL;
    }
    return n;
}

int pg_net_peer_gone(pg_net *n, int peer) { return !n || pg_tcp_peer_gone(n->tcp, peer); }

void pg_net_close(pg_net *n)
{
    if (!n)
        return;
    /* best effort, as on the CPU: a peer that stopped reading must not hang
     * us; a poisoned stream is not waited for at all */
    int clean = !pg_backend_poisoned(n->ctx) && pg_net_flush(n, 2.0) == PG_NET_OK;
    if (clean)
        ipc_teardown(n);
    release(n, clean);
}

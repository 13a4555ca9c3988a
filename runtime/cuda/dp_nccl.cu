/* runtime/cuda/dp_nccl.cu — pg_dp_dev.h on the GPU: the replicas' gradient
 * reduction of runtime/core/dp.c with NCCL, one communicator per stage group
 * (the D replicas of one stage, rank = replica), the gradients never leaving
 * the device.
 *
 * Start-up (pg_dp_dev_init, collective over the group, on the replicas' TCP
 * links): every replica tells every other its GPU (cudaDeviceProp.uuid, and
 * the PCI bus id for messages) and whether it wants the path (not with
 * PIPE_DP_NCCL=0, dp.c). All of them then decide alike (cuda_caps.h): two
 * replicas on one GPU (NCCL refuses two ranks of a communicator on one device), or one that
 * does not want it, and dp.c keeps its host path and says why. Otherwise
 * replica 0 makes the ncclUniqueId and sends it to the others, and each makes
 * its rank of a non-blocking communicator (cuda_nccl.h), within --timeout.
 *
 * A reduction (pg_dp_dev_reduce), on the backend's stream after the backward:
 *  - the gradients of the reduced parameters as one vector of n floats in
 *    parameter order: in the arena itself when they lie there one after
 *    another, else packed into a device copy (`pack`, one device copy per
 *    parameter) and unpacked after;
 *  - reduce-scatter: shard q (dp_bytes.h's pg_dp_shard_lo, dp.c's cut) to
 *    replica q, the other replicas' copies of this replica's shard into
 *    `recv` (a slot per replica, in replica order), as grouped
 *    ncclSend/ncclRecv;
 *  - the sum in replica order 0 + 1 + ... + D-1 (dp_sum.cuh: __fadd_rn, one
 *    thread per element), in place into this replica's shard: dp.c's
 *    arithmetic on the CPU, bit for bit (never ncclAllReduce, whose order is
 *    NCCL's);
 *  - all-gather: this replica's summed shard to every other, theirs into
 *    place, grouped ncclSend/ncclRecv (the shards differ by up to one float,
 *    so not ncclAllGather);
 *  - the wait for all of it, polling the communicator's asynchronous error up
 *    to --timeout: a failed or late reduction prints NCCL's reason with stage
 *    and replica, aborts the communicator and marks the stream poisoned (its
 *    NCCL kernels may never end), and the run stops. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_caps.h"
#include "cuda_common.h"
#include "cuda_nccl.h"
#include "dp_bytes.h"
#include "dp_sum.cuh"
#include "pg_dp_dev.h"
#include "pg_le.h"

#define ID_BYTES (8 + NCCL_UNIQUE_ID_BYTES) /* ncclGetUniqueId's result (4), pad (4), the id */

struct pg_dp_dev {
    pg_ctx *ctx;
    ncclComm_t comm;
    int stage, replica, D;
    double timeout_s;
    unsigned char *arena;
    const pg_param_desc *params;
    int *param, n;       /* the reduced parameters, in order */
    int64_t numel;       /* their gradient floats */
    float *flat;         /* the n floats as one vector: in the arena, or pack */
    float *pack;         /* device [numel] when the gradients are apart in the arena, else NULL */
    long long own_bytes; /* recv and pack, counted in the context's report (pg_cuda_own_add) */
    float *recv;         /* device [(D - 1) x stride]: the other replicas' copies of this replica's shard */
    int64_t stride;      /* ceil(numel / D): the largest shard */
    size_t bytes;        /* pack + recv */
    cudaEvent_t done;
    int broken;          /* a reduction failed: the communicator is aborted, the device is not touched again */
};

static int rank_of(const pg_dp_dev_args *a, int q) { return q * a->nstages + a->stage; }

static int64_t shard_n(int64_t n, int D, int q) { return pg_dp_shard_lo(n, D, q + 1) - pg_dp_shard_lo(n, D, q); }

static void dev_release(pg_dp_dev *g)
{
    if (!g)
        return;
    if (g->broken) {
        if (g->comm)
            ncclCommAbort(g->comm);
    } else {
        pg_nccl_comm_close(g->comm);
        if (g->recv)
            cudaFree(g->recv);
        if (g->pack)
            cudaFree(g->pack);
        pg_cuda_own_add(PG_CUDA_OWN_REPLICAS, -g->own_bytes);
        if (g->done)
            cudaEventDestroy(g->done);
    }
    free(g->param);
    free(g);
}

/* Every replica's len bytes from `mine` into all[D][len], or (from0) replica
 * 0's into all: 0, or -1 after printing. */
static int exchange(const pg_dp_dev_args *a, uint32_t tag, const unsigned char *mine, unsigned char *all, size_t len,
                    int from0, const char *what)
{
    int D = a->replicas, me = a->replica;
    for (int q = 0; q < D; q++) {
        if (q == me || (from0 && me != 0))
            continue;
        if (pg_net_send_rank(a->net, rank_of(a, q), tag, mine, len)) {
            fprintf(stderr, "stage %d of replica %d: sending %s to stage %d of replica %d failed: %s\n", a->stage, me,
                    what, a->stage, q, pg_net_error(a->net));
            return -1;
        }
    }
    if (!from0)
        memcpy(all + (size_t)me * len, mine, len);
    for (int q = 0; q < D; q++) {
        if (q == me || (from0 && q != 0))
            continue;
        if (pg_net_recv_rank(a->net, rank_of(a, q), tag, from0 ? all : all + (size_t)q * len, len, a->timeout_s)) {
            fprintf(stderr, "stage %d of replica %d: receiving %s from stage %d of replica %d failed: %s\n", a->stage,
                    me, what, a->stage, q, pg_net_error(a->net));
            return -1;
        }
    }
    return 0;
}

/* The device buffers, and whether the gradients lie one after another. 0 or -1 after printing. */
static int dev_buffers(pg_dp_dev *g)
{
    int contiguous = 1;
    for (int k = 0; k < g->n; k++) {
        const pg_param_desc *p = &g->params[g->param[k]];
        if (k > 0) {
            const pg_param_desc *b = &g->params[g->param[k - 1]];
            contiguous &= p->grad_off == b->grad_off + b->numel * 4;
        }
        g->numel += p->numel;
    }
    int D = g->D;
    g->stride = (g->numel + D - 1) / D;
    g->bytes = (size_t)pg_dp_nccl_bytes(g->numel, D, !contiguous);
    size_t rb = (size_t)(D - 1) * (size_t)g->stride * 4;
    cudaError_t e = cudaMalloc((void **)&g->recv, rb ? rb : 4);
    if (e == cudaSuccess)
        g->own_bytes += (long long)(rb ? rb : 4);
    if (e == cudaSuccess && !contiguous)
        e = cudaMalloc((void **)&g->pack, g->numel ? (size_t)g->numel * 4 : 4);
    if (e == cudaSuccess && !contiguous)
        g->own_bytes += (long long)(g->numel ? (size_t)g->numel * 4 : 4);
    pg_cuda_own_add(PG_CUDA_OWN_REPLICAS, g->own_bytes);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        cudaGetLastError();
        fprintf(stderr, "stage %d of replica %d: cannot allocate the %zu bytes of GPU memory of the replicas' gradient "
                "reduction (NCCL): %s\n", g->stage, g->replica, g->bytes, cudaGetErrorString(e));
        return -1;
    }
    g->flat = contiguous ? (g->n ? (float *)(g->arena + g->params[g->param[0]].grad_off) : g->recv) : g->pack;
    return 0;
}

int pg_dp_dev_init(const pg_dp_dev_args *a, pg_dp_dev **out, char *why, size_t whylen)
{
    *out = NULL;
    int D = a->replicas, me = a->replica, dev = a->ctx->device, ver = 0;
    unsigned char mine[PG_DP_INFO_BYTES], id[ID_BYTES];
    memset(id, 0, sizeof id);
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, dev);
    if (e != cudaSuccess) {
        fprintf(stderr, "stage %d of replica %d: cudaGetDeviceProperties(%d) failed: %s\n", a->stage, me, dev,
                cudaGetErrorString(e));
        return -1;
    }
    char bus[40] = "";
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, dev) != cudaSuccess)
        cudaGetLastError(); /* for messages only */
    pg_dp_info_put(mine, !a->want ? PG_DP_WANT_ENV : ncclGetVersion(&ver) != ncclSuccess ? PG_DP_WANT_NO_NCCL
                                                                                         : PG_DP_WANT_YES,
                   (uint32_t)ver, (const unsigned char *)&prop.uuid, bus);
    unsigned char *all = (unsigned char *)malloc((size_t)D * PG_DP_INFO_BYTES);
    if (!all) {
        fprintf(stderr, "stage %d of replica %d: out of memory\n", a->stage, me);
        return -1;
    }
    int rc = exchange(a, a->tag_info, mine, all, PG_DP_INFO_BYTES, 0, "its GPU's identity");
    int use = rc == 0 && pg_dp_nccl_choice(all, D, why, whylen);
    free(all);
    if (rc || !use)
        return rc;
    /* replica 0 makes the id; a failure there is every replica's reason */
    ncclUniqueId uid;
    memset(&uid, 0, sizeof uid);
    if (me == 0) {
        ncclResult_t r = ncclGetUniqueId(&uid);
        pg_put32(id, (uint32_t)r);
        memcpy(id + 8, &uid, NCCL_UNIQUE_ID_BYTES);
    }
    if (exchange(a, a->tag_id, id, id, ID_BYTES, 1, "the NCCL id of the replicas' communicator"))
        return -1;
    ncclResult_t made = (ncclResult_t)pg_get32(id);
    if (made != ncclSuccess) {
        snprintf(why, whylen, "ncclGetUniqueId failed on replica 0: %s", ncclGetErrorString(made));
        return 0;
    }
    memcpy(&uid, id + 8, NCCL_UNIQUE_ID_BYTES);
    pg_dp_dev *g = (pg_dp_dev *)calloc(1, sizeof *g);
    if (!g || !(g->param = (int *)malloc((size_t)(a->n > 0 ? a->n : 1) * sizeof *g->param))) {
        free(g);
        fprintf(stderr, "stage %d of replica %d: out of memory\n", a->stage, me);
        return -1;
    }
    g->ctx = a->ctx;
    g->stage = a->stage;
    g->replica = me;
    g->D = D;
    g->timeout_s = a->timeout_s;
    g->arena = a->arena;
    g->params = a->params;
    g->n = a->n;
    if (a->n > 0)
        memcpy(g->param, a->param, (size_t)a->n * sizeof *g->param);
    char what[96], err[512];
    snprintf(what, sizeof what, "the NCCL communicator of stage %d's %d replicas", a->stage, D);
    if (dev_buffers(g)) {
        dev_release(g);
        return -1;
    }
    if (pg_nccl_comm_init(&g->comm, D, uid, me, a->timeout_s, what, err, sizeof err)) {
        fprintf(stderr, "stage %d of replica %d: %s\n", a->stage, me, err);
        dev_release(g);
        return -1;
    }
    *out = g;
    return 1;
}

/* 1, after printing what failed and why; the communicator aborted, the stream poisoned. */
static int reduce_fail(pg_dp_dev *g, const char *step, ncclResult_t r)
{
    const char *last = g->comm ? ncclGetLastError(g->comm) : NULL;
    if (r == ncclInProgress)
        fprintf(stderr, "stage %d of replica %d: the replicas' gradient reduction (NCCL, %s) did not complete within "
                "%g s (--timeout): a replica of stage %d died or stopped; the communicator is aborted\n", g->stage,
                g->replica, step, g->timeout_s, g->stage);
    else
        fprintf(stderr, "stage %d of replica %d: the replicas' gradient reduction (NCCL, %s) failed: %s%s%s\n",
                g->stage, g->replica, step, ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
    if (g->comm)
        ncclCommAbort(g->comm);
    g->comm = NULL;
    g->broken = 1;
    pg_cuda_poison(g->ctx, "an NCCL gradient reduction that did not complete");
    return 1;
}

static int cuda_fail(pg_dp_dev *g, const char *what, cudaError_t e)
{
    fprintf(stderr, "stage %d of replica %d: %s for the replicas' gradient reduction failed: %s (%s)\n", g->stage,
            g->replica, what, cudaGetErrorString(e), cudaGetErrorName(e));
    return reduce_fail(g, what, ncclUnhandledCudaError);
}

/* The gradients to the flat vector (to_flat) or back; nothing when they are one already. */
static cudaError_t repack(pg_dp_dev *g, int to_flat)
{
    cudaStream_t s = g->ctx->stream;
    int64_t at = 0;
    for (int k = 0; g->pack && k < g->n; k++) {
        const pg_param_desc *p = &g->params[g->param[k]];
        float *grad = (float *)(g->arena + p->grad_off);
        cudaError_t e = cudaMemcpyAsync(to_flat ? g->pack + at : grad, to_flat ? grad : g->pack + at,
                                        (size_t)p->numel * 4, cudaMemcpyDeviceToDevice, s);
        if (e != cudaSuccess)
            return e;
        at += p->numel;
    }
    return cudaSuccess;
}

/* One grouped exchange with every other replica: gather 0 sends shard q to q
 * and receives this replica's shard into recv (the reduce-scatter); gather 1
 * sends this replica's summed shard and receives shard q into place. */
static ncclResult_t group(pg_dp_dev *g, int gather, double deadline)
{
    int D = g->D, me = g->replica;
    int64_t N = g->numel, lo = pg_dp_shard_lo(N, D, me), m = shard_n(N, D, me);
    cudaStream_t s = g->ctx->stream;
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess)
        return r;
    for (int q = 0, slot = 0; q < D && (r == ncclSuccess || r == ncclInProgress); q++) {
        if (q == me)
            continue;
        int64_t ql = pg_dp_shard_lo(N, D, q), qm = shard_n(N, D, q);
        float *in = gather ? g->flat + ql : g->recv + (int64_t)slot++ * g->stride;
        const float *outp = gather ? g->flat + lo : g->flat + ql;
        int64_t in_n = gather ? qm : m, out_n = gather ? m : qm;
        if (out_n > 0)
            r = ncclSend(outp, (size_t)out_n, ncclFloat, q, g->comm, s);
        if (in_n > 0 && (r == ncclSuccess || r == ncclInProgress))
            r = ncclRecv(in, (size_t)in_n, ncclFloat, q, g->comm, s);
    }
    ncclResult_t end = ncclGroupEnd(); /* always: the group is closed whatever failed in it */
    if (r != ncclSuccess && r != ncclInProgress)
        return r;
    return pg_nccl_settle(g->comm, end, deadline);
}

int pg_dp_dev_reduce(pg_dp_dev *g)
{
    if (g->broken) {
        fprintf(stderr, "stage %d of replica %d: the replicas' gradient reduction (NCCL) failed earlier\n", g->stage,
                g->replica);
        return 1;
    }
    double deadline = pg_cuda_now() + g->timeout_s;
    int D = g->D, me = g->replica;
    int64_t N = g->numel, lo = pg_dp_shard_lo(N, D, me), m = shard_n(N, D, me);
    cudaStream_t s = g->ctx->stream;
    cudaError_t e = repack(g, 1);
    if (e != cudaSuccess)
        return cuda_fail(g, "packing the gradients", e);
    ncclResult_t r = group(g, 0, deadline);
    if (r != ncclSuccess)
        return reduce_fail(g, "reduce-scatter", r);
    if (m > 0) {
        pg_dp_sum_kernel<<<PG_GEOM(pg_geom_stride(m, PG_DP_SUM_THREADS)), 0, s>>>(
            g->flat + lo, g->recv, g->stride, D, me, m);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return cuda_fail(g, "launching the sum", e);
    }
    if ((r = group(g, 1, deadline)) != ncclSuccess)
        return reduce_fail(g, "all-gather", r);
    if ((e = repack(g, 0)) != cudaSuccess)
        return cuda_fail(g, "unpacking the gradients", e);
    if ((e = cudaEventRecord(g->done, s)) != cudaSuccess)
        return cuda_fail(g, "recording its end", e);
    /* the watchdog: the stream's NCCL kernels wait for the other replicas */
    for (;;) {
        e = cudaEventQuery(g->done);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return cuda_fail(g, "waiting for it", e);
        ncclResult_t ae = ncclSuccess;
        if (ncclCommGetAsyncError(g->comm, &ae) == ncclSuccess && ae != ncclSuccess && ae != ncclInProgress)
            return reduce_fail(g, "in flight", ae);
        if (pg_cuda_now() > deadline)
            return reduce_fail(g, "in flight", ncclInProgress);
        pg_cuda_nap();
    }
}

size_t pg_dp_dev_bytes(const pg_dp_dev *g) { return g ? g->bytes : 0; }

void pg_dp_dev_free(pg_dp_dev *g)
{
    if (!g)
        return;
    /* a stream left waiting (here or by the transport), or a context already
     * gone: abort only, touch no device memory (pg_backend_poisoned) */
    pg_ctx *live = pg_cuda_process_ctx();
    if (live != g->ctx || pg_backend_poisoned(live))
        g->broken = 1;
    dev_release(g);
}

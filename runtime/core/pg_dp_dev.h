/* runtime/core/pg_dp_dev.h — the replicas' gradient reduction on the device,
 * the backend's alternative to dp.c's host path when its arena is device
 * memory. The CUDA runtime runs it with NCCL, one communicator per stage
 * group (the D replicas of one stage: runtime/cuda/dp_nccl.cu); the CPU
 * runtime has none (runtime/cpu/net.c: pg_dp_dev_init says why, and dp.c
 * keeps its host path).
 *
 * The arithmetic is dp.c's, bit for bit: the gradients of the reduced
 * parameters, concatenated in the order given, are cut into D shards,
 * shard q = [n q / D, n (q + 1) / D); replica q sums shard q as replica
 * 0 + 1 + ... + D-1, one float addition after another for every element, and
 * every replica gets every summed shard back. */
#ifndef PG_DP_DEV_H
#define PG_DP_DEV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* pg_net.h and pg_ops.h are C: the CUDA runtime links their C symbols */
#endif

#include "pg_contract.h"
#include "pg_net.h"
#include "pg_ops.h"

typedef struct pg_dp_dev pg_dp_dev;

typedef struct pg_dp_dev_args {
    pg_ctx *ctx;
    pg_net *net;                 /* the replicas' TCP links (pg_net_send_rank) carry the start-up messages */
    int stage, nstages;          /* replica q's copy of this stage is launch rank q x nstages + stage */
    int replica, replicas;
    uint32_t tag_info, tag_id;   /* the two start-up messages: every replica's device, then the NCCL id */
    double timeout_s;            /* --timeout: start-up, and every reduction from its start */
    int want;                    /* 0: this replica asks for the host path (PIPE_DP_NCCL=0) */
    unsigned char *arena;
    const pg_param_desc *params; /* the stage's table */
    const int *param;            /* [n] the reduced parameters, in order: their gradients at grad_off */
    int n;
} pg_dp_dev_args;

/* Collective over the stage's replicas (each calls it at the same point of its
 * start-up). 1: the device path is up (*out). 0: it is not used, `why` says
 * why; every replica decides alike (each tells the others its device and
 * whether it wants the path). -1: it failed (printed, naming stage and
 * replica): the run stops. */
int pg_dp_dev_init(const pg_dp_dev_args *a, pg_dp_dev **out, char *why, size_t whylen);
/* The gradients summed over the replicas, in place, once the backward has
 * written them (on the backend's stream, waited for: the verdict reads them
 * next). 0, or 1 after printing the failure (--timeout passed: the
 * communicator is aborted). */
int pg_dp_dev_reduce(pg_dp_dev *g);
/* Device bytes it allocated (its own buffers; the library's are not counted). */
size_t pg_dp_dev_bytes(const pg_dp_dev *g);
/* Before pg_net_close and pg_backend_free. NULL: nothing. */
void pg_dp_dev_free(pg_dp_dev *g);

#ifdef __cplusplus
}
#endif

#endif

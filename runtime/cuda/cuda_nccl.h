/* runtime/cuda/cuda_nccl.h — the NCCL helpers that the transport
 * (cuda_net.cu, where they live) and the replicas' gradient reduction
 * (dp_nccl.cu) share. Every communicator is non-blocking (config.blocking =
 * 0), so that no NCCL call waits for a peer that never comes: a call that
 * returns ncclInProgress is polled (ncclCommGetAsyncError) until it settles
 * or its deadline passes, and a communicator that failed or timed out is
 * aborted (ncclCommAbort), as NCCL's documentation on non-blocking
 * communicators and error handling prescribes. */
#ifndef PG_CUDA_NCCL_H
#define PG_CUDA_NCCL_H

#include <nccl.h>
#include <stddef.h>

double pg_cuda_now(void); /* monotonic seconds */
void pg_cuda_nap(void);   /* 20 microseconds: one poll of a wait */

/* A call on the non-blocking comm returned rc: its final result once it is no
 * longer ncclInProgress, or ncclInProgress when deadline (pg_cuda_now) passed
 * first. */
ncclResult_t pg_nccl_settle(ncclComm_t comm, ncclResult_t rc, double deadline);
/* ncclCommInitRankConfig(non-blocking) for rank of nranks, settled within
 * timeout_s: 0, or -1 with *comm NULL (aborted) and err = "<what> did not come
 * up within T s" or "setting up <what> failed: <NCCL's reason>". */
int pg_nccl_comm_init(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, double timeout_s, const char *what,
                      char *err, size_t errlen);
/* Finalized and destroyed (ncclCommAbort if that does not settle in 5 s);
 * NULL: nothing. */
void pg_nccl_comm_close(ncclComm_t comm);

#endif

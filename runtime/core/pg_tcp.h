/* runtime/core/pg_tcp.h — the TCP transport (runtime/core/tcp.c), the one
 * both backends' transports run on: runtime/cpu/net.c uses it as pg_net.h
 * says, runtime/cuda/cuda_net.cu sends its small headers (and host-memory
 * messages) over it and the tensors themselves over NCCL or CUDA IPC.
 *
 * The semantics are pg_net.h's, word for word (rendezvous, tags and byte counts
 * checked, the per-peer send ring, timeouts, peers that are gone or lost),
 * with host memory only. The types it shares with pg_net.h (pg_launch,
 * pg_net_config, pg_net_status) are pg_net.h's. */
#ifndef PG_TCP_H
#define PG_TCP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "pg_net.h"

typedef struct pg_tcp pg_tcp;

pg_tcp *pg_tcp_init(const pg_launch *l, const pg_net_config *cfg, char *errbuf, size_t errlen);
pg_net_status pg_tcp_send(pg_tcp *n, int peer, uint32_t tag, const void *buf, size_t bytes);
pg_net_status pg_tcp_recv(pg_tcp *n, int peer, uint32_t tag, void *buf, size_t bytes, double timeout_s);
pg_net_status pg_tcp_send_rank(pg_tcp *n, int rank, uint32_t tag, const void *buf, size_t bytes);
pg_net_status pg_tcp_recv_rank(pg_tcp *n, int rank, uint32_t tag, void *buf, size_t bytes, double timeout_s);
pg_net_status pg_tcp_send_rank_lent(pg_tcp *n, int rank, uint32_t tag, const void *buf, size_t bytes, uint64_t *seq);
pg_net_status pg_tcp_wait_lent(pg_tcp *n, int rank, uint64_t seq, double timeout_s);
/* The lent send and its wait to a stage of this replica (peer, as pg_tcp_send). */
pg_net_status pg_tcp_send_lent(pg_tcp *n, int peer, uint32_t tag, const void *buf, size_t bytes, uint64_t *seq);
pg_net_status pg_tcp_wait_sent(pg_tcp *n, int peer, uint64_t seq, double timeout_s);
pg_net_status pg_tcp_flush(pg_tcp *n, double timeout_s);
const char *pg_tcp_error(const pg_tcp *n);
int pg_tcp_peer_gone(pg_tcp *n, int peer);
int pg_tcp_peer_lost(const pg_tcp *n);
void pg_tcp_close(pg_tcp *n);
/* Stage 0 (rank 0 of a world > 1) after its start-up failed, its message
 * printed: listen at the master address and answer every process of this run
 * that greets it "the run failed at start-up: <cause>" (pub instead, when
 * not NULL, to a process that proved no token: pg_net_config.pub_err),
 * until every rank that cfg->told does not mark has been told, linger_s has
 * passed, or SIGINT, SIGTERM or SIGHUP comes; strangers are refused as at
 * the rendezvous. A stage started after stage 0 failed hears why at once,
 * instead of retrying until its connect timeout. Prints one line ("stage 0:
 * telling ...") when it waits at all; nothing when the address cannot be
 * listened on (the failure may be just that). */
void pg_tcp_tell_failure(const pg_launch *l, const pg_net_config *cfg, const char *cause, const char *pub,
                         double linger_s);

#ifdef __cplusplus
}
#endif

#endif

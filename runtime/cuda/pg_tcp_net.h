/* runtime/cuda/pg_tcp_net.h — the TCP transport of runtime/core/net.c under
 * other names, for the CUDA transport (cuda_net.cu) that runs on top of it.
 *
 * net.c is compiled a second time for libpgrt_cuda.a with
 * `-include runtime/cuda/net_rename.h`, which renames its public symbols
 * (pg_net_init -> pg_tcp_net_init, ..., struct pg_net -> struct pg_tcp_net);
 * these declarations are what that object then exports. Same semantics as
 * pg_net.h (tags, byte counts, timeouts, the per-peer send ring), host memory
 * only. No copy of net.c's code exists anywhere. */
#ifndef PG_TCP_NET_H
#define PG_TCP_NET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "pg_net.h" /* C linkage in C++ too: cuda_net.cu defines pg_net_* */

typedef struct pg_tcp_net pg_tcp_net;

pg_tcp_net *pg_tcp_net_init(const pg_launch *l, const pg_net_config *cfg, char *errbuf, size_t errlen);
pg_net_status pg_tcp_net_send(pg_tcp_net *n, int peer, uint32_t tag, const void *buf, size_t bytes);
pg_net_status pg_tcp_net_recv(pg_tcp_net *n, int peer, uint32_t tag, void *buf, size_t bytes, double timeout_s);
pg_net_status pg_tcp_net_send_rank(pg_tcp_net *n, int rank, uint32_t tag, const void *buf, size_t bytes);
pg_net_status pg_tcp_net_recv_rank(pg_tcp_net *n, int rank, uint32_t tag, void *buf, size_t bytes, double timeout_s);
pg_net_status pg_tcp_net_flush(pg_tcp_net *n, double timeout_s);
const char *pg_tcp_net_error(const pg_tcp_net *n);
int pg_tcp_net_peer_gone(pg_tcp_net *n, int peer);
void pg_tcp_net_close(pg_tcp_net *n);
int pg_tcp_net_peer_lost(const pg_tcp_net *n);

#ifdef __cplusplus
}
#endif

#endif

/* runtime/cuda/net_rename.h — forced-included (-include) when runtime/core/net.c
 * is compiled into libpgrt_cuda.a: its public names become the pg_tcp_net_*
 * ones of pg_tcp_net.h, so the CUDA transport can implement pg_net.h itself
 * and use the TCP code underneath. Including pg_tcp_net.h here makes the
 * compiler check that the renamed definitions match those declarations. */
#ifndef PG_NET_RENAME_H
#define PG_NET_RENAME_H

#define pg_net pg_tcp_net
#define pg_net_init pg_tcp_net_init
#define pg_net_send pg_tcp_net_send
#define pg_net_recv pg_tcp_net_recv
#define pg_net_send_rank pg_tcp_net_send_rank
#define pg_net_recv_rank pg_tcp_net_recv_rank
#define pg_net_flush pg_tcp_net_flush
#define pg_net_error pg_tcp_net_error
#define pg_net_close pg_tcp_net_close
#define pg_net_peer_gone pg_tcp_net_peer_gone
#define pg_net_peer_lost pg_tcp_net_peer_lost

#include "pg_tcp_net.h"

#endif

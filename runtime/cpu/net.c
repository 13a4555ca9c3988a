/* runtime/cpu/net.c — pg_net.h on the CPU: the TCP transport of
 * runtime/core/tcp.c, every message in host memory (the arena is host memory
 * here). The CUDA runtime implements pg_net.h in runtime/cuda/cuda_net.cu on
 * the same TCP code. pg_dp_dev.h (the replicas' gradient sum on a device) has
 * no CPU implementation: pg_dp_dev_init says so and dp.c sums in place. */
#include <stdio.h>
#include <stdlib.h>

#include "pg_dp_dev.h"
#include "pg_tcp.h"

/* The CPU's pg_net is the TCP transport itself. */
struct pg_net {
    pg_tcp *tcp;
};

/* NULL for NULL: the TCP calls that accept no transport (a failed start) take NULL too */
static pg_tcp *tcp_of(const pg_net *n) { return n ? n->tcp : NULL; }

pg_net *pg_net_init(const pg_launch *l, const pg_net_config *cfg, char *errbuf, size_t errlen)
{
    pg_tcp *t = pg_tcp_init(l, cfg, errbuf, errlen);
    if (!t)
        return NULL;
    pg_net *n = malloc(sizeof *n);
    if (!n) {
        snprintf(errbuf, errlen, "out of memory");
        pg_tcp_close(t);
        return NULL;
    }
    n->tcp = t;
    return n;
}

pg_net_status pg_net_send(pg_net *n, int peer, uint32_t tag, const void *buf, size_t bytes)
{
    return pg_tcp_send(tcp_of(n), peer, tag, buf, bytes);
}

pg_net_status pg_net_recv(pg_net *n, int peer, uint32_t tag, void *buf, size_t bytes, double timeout_s)
{
    return pg_tcp_recv(tcp_of(n), peer, tag, buf, bytes, timeout_s);
}

pg_net_status pg_net_send_rank(pg_net *n, int rank, uint32_t tag, const void *buf, size_t bytes)
{
    return pg_tcp_send_rank(tcp_of(n), rank, tag, buf, bytes);
}

pg_net_status pg_net_recv_rank(pg_net *n, int rank, uint32_t tag, void *buf, size_t bytes, double timeout_s)
{
    return pg_tcp_recv_rank(tcp_of(n), rank, tag, buf, bytes, timeout_s);
}

pg_net_status pg_net_send_rank_lent(pg_net *n, int rank, uint32_t tag, const void *buf, size_t bytes, uint64_t *seq)
{
    return pg_tcp_send_rank_lent(tcp_of(n), rank, tag, buf, bytes, seq);
}

pg_net_status pg_net_wait_lent(pg_net *n, int rank, uint64_t seq, double timeout_s)
{
    return pg_tcp_wait_lent(tcp_of(n), rank, seq, timeout_s);
}

pg_net_status pg_net_send_lent(pg_net *n, int peer, uint32_t tag, const void *buf, size_t bytes, uint64_t *seq)
{
    return pg_tcp_send_lent(tcp_of(n), peer, tag, buf, bytes, seq);
}

pg_net_status pg_net_wait_sent(pg_net *n, int peer, uint64_t seq, double timeout_s)
{
    return pg_tcp_wait_sent(tcp_of(n), peer, seq, timeout_s);
}

pg_net_status pg_net_flush(pg_net *n, double timeout_s) { return pg_tcp_flush(tcp_of(n), timeout_s); }
const char *pg_net_error(const pg_net *n) { return pg_tcp_error(tcp_of(n)); }
int pg_net_peer_gone(pg_net *n, int peer) { return pg_tcp_peer_gone(tcp_of(n), peer); }
int pg_net_peer_lost(const pg_net *n) { return pg_tcp_peer_lost(tcp_of(n)); }

void pg_net_close(pg_net *n)
{
    if (!n)
        return;
    pg_tcp_close(tcp_of(n));
    free(n);
}

/* The replicas' gradients are summed in host memory where they lie (dp.c);
 * there is no device reduction on the CPU (pg_dp_dev.h). */
int pg_dp_dev_init(const pg_dp_dev_args *a, pg_dp_dev **out, char *why, size_t whylen)
{
    (void)a;
    *out = NULL;
    snprintf(why, whylen, "the CPU runtime has no NCCL");
    return 0;
}

int pg_dp_dev_reduce(pg_dp_dev *g)
{
    (void)g;
    fprintf(stderr, "the CPU runtime has no device reduction of the replicas' gradients (pg_dp_dev_reduce)\n");
    return 1;
}

size_t pg_dp_dev_bytes(const pg_dp_dev *g)
{
    (void)g;
    return 0;
}

void pg_dp_dev_free(pg_dp_dev *g) { (void)g; }

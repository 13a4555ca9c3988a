/* runtime/core/pg_net.h — how stage processes find and talk to each other on the
 * CPU backend: rendezvous through a master address, then one TCP connection per
 * pair of stages (loopback or across hosts).
 *
 * Semantics (codegen/schedule.h relies on them):
 *  - pg_net_send never blocks on the peer: it copies into a per-peer buffer of
 *    the size given at init (one step's traffic) and a sender thread drains it;
 *  - pg_net_recv blocks until the message arrives, up to a timeout;
 *  - messages on one pair arrive in send order; each carries a tag and a byte
 *    count, and a receive whose expectation differs fails with both named.
 * Every failure returns a pg_net_status and leaves a readable message in
 * pg_net_error(n) that names the peer stage. These messages (and pg_net_init's)
 * never name this process's own stage: the caller prints them after its own
 * "stage k: ", so that no line says "stage 1: stage 1: ...". */
#ifndef PG_NET_H
#define PG_NET_H

#include <stddef.h>
#include <stdint.h>

/* Where this process sits: from PIPE_RANK/PIPE_WORLD/PIPE_MASTER, or Slurm
 * (SLURM_PROCID/SLURM_NTASKS), Open MPI (OMPI_COMM_WORLD_RANK/SIZE), PMI
 * (PMI_RANK/PMI_SIZE). The master address comes from PIPE_MASTER (host:port),
 * else defaults to 127.0.0.1:29500 (MASTER_ADDR/MASTER_PORT are honoured too). */
typedef struct pg_launch {
    int rank, world;
    char master_host[256];
    int master_port;
    const char *source; /* "PIPE_RANK", "SLURM_PROCID", ... for messages */
    /* The run's identity, from the launcher that gave the rank: PIPE_RUN_ID
     * (piperun makes a random one per run), Slurm's SLURM_JOB_ID.SLURM_STEP_ID,
     * Open MPI's PMIX_NAMESPACE or OMPI_MCA_ess_base_jobid; "" when there is
     * none (stages started by hand without PIPE_RUN_ID). */
    char run_id[64];
    const char *run_id_source; /* the variable it came from, or NULL */
} pg_launch;
/* 0 ok; -1 with err filled (e.g. "PIPE_RANK=3 but PIPE_WORLD=3: rank must be < world"). */
int pg_launch_from_env(pg_launch *l, char *err, size_t errlen);

typedef enum pg_net_status {
    PG_NET_OK = 0,
    PG_NET_TIMEOUT,   /* recv waited longer than its timeout */
    PG_NET_CLOSED,    /* the peer's connection ended (the peer died or was stopped) */
    PG_NET_MISMATCH,  /* tag or size differs from what the receiver expects */
    PG_NET_REFUSED,   /* rendezvous refused: other model/plan hash, world size, duplicate rank */
    PG_NET_ERROR      /* any other socket error */
} pg_net_status;

typedef struct pg_net pg_net;

typedef struct pg_net_config {
    const char *model;        /* model name, compared at rendezvous */
    uint64_t plan_hash;       /* hash of model + plan: peers must agree */
    int stage;                /* must equal launch rank */
    const size_t *send_buf_bytes; /* [world]: one step's bytes to each peer (0: no link needed) */
    double connect_timeout_s; /* how long to keep retrying the master (back-off) */
    const char *run_id;       /* pg_launch.run_id: every hello carries it (NULL: "") */
    /* What the stages must agree on (options, data files): an opaque text
     * every peer's hello carries to the master, which hands it to
     * agree_check(agree_arg, rank, text, len, why, whylen): 0 fits, else the
     * peer is refused with `why` (runtime/core/agree.c). NULL: not compared. */
    const char *agree;
    size_t agree_len;
    int (*agree_check)(void *arg, int rank, const char *text, size_t len, char *why, size_t whylen);
    void *agree_arg;
} pg_net_config;

/* Rendezvous + connect. NULL on failure with the message written to errbuf.
 * The master listens on the address PIPE_MASTER names (loopback stays
 * loopback), each peer on the address its link to the master leaves from.
 * Every connection must greet within 5 s or is dropped, without holding up
 * the others. A hello of another run (another run id) is refused and the run
 * goes on; a hello of this run that does not fit (world, rank, model, plan,
 * agreement) fails the run, and every stage is told why; with no run id at
 * all nobody can be told apart, so such a hello is refused alone and the
 * master keeps waiting (its timeout message names what it refused). */
pg_net *pg_net_init(const pg_launch *l, const pg_net_config *cfg, char *errbuf, size_t errlen);
pg_net_status pg_net_send(pg_net *n, int peer, uint32_t tag, const void *buf, size_t bytes);
pg_net_status pg_net_recv(pg_net *n, int peer, uint32_t tag, void *buf, size_t bytes, double timeout_s);
/* Wait until every queued send has been written to its socket. */
pg_net_status pg_net_flush(pg_net *n, double timeout_s);
const char *pg_net_error(const pg_net *n);
/* 1 when `peer` has closed its end of the link (it exited or was killed, or
 * the link was reset), even while some of its messages are still unread; 0
 * while it is up. Never blocks. The CUDA transport polls it while it waits for
 * a payload that travels outside the link (NCCL, CUDA IPC). */
int pg_net_peer_gone(pg_net *n, int peer);
/* 1 when a link to a peer ended (it closed or reset, or the network to it
 * failed): this stage's failure may follow another's (piperun is told so). */
int pg_net_peer_lost(const pg_net *n);
void pg_net_close(pg_net *n);

#endif

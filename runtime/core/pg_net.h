/* runtime/core/pg_net.h — how stage processes find and talk to each other on the
 * CPU backend: rendezvous through a master address, then one TCP connection per
 * pair of stages (loopback or across hosts).
 *
 * Semantics (codegen/schedule/schedule.h relies on them):
 *  - pg_net_send never blocks on the peer: it writes what the socket takes at
 *    once (nothing queued to the peer) and copies the rest into a per-peer
 *    buffer of the size given at init (one step's traffic), which a sender
 *    thread drains; the caller's buffer is free again when it returns;
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

/* Where this process sits, read from the environment of whatever launched it.
 * The rank and world, first found of: PIPE_RANK/PIPE_WORLD (piperun, by hand),
 * Open MPI's OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE (MPICH's and Intel
 * MPI's Hydra, Slurm's pmi2), Slurm's SLURM_PROCID/SLURM_NTASKS last: ranks
 * that mpirun starts inside an sbatch allocation inherit SLURM_PROCID=0.
 * The master address: PIPE_MASTER (host:port), else MASTER_ADDR/MASTER_PORT,
 * else under Slurm the first host of the node list (SLURM_STEP_NODELIST for
 * srun's tasks, SLURM_JOB_NODELIST for an MPI launch inside an allocation,
 * whose first host runs the batch script and mpirun) with a port derived from
 * the job id, or loopback when every process is on one host; default
 * 127.0.0.1:29500. Processes on several hosts with none of these: an error. */
typedef struct pg_launch {
    int rank, world;
    char master_host[256];
    int master_port;
    const char *source;       /* "PIPE_RANK", "SLURM_PROCID", ... for messages */
    const char *world_source; /* its pair: "PIPE_WORLD", "SLURM_NTASKS", ... */
    /* The run's identity, from the launcher that gave the rank: PIPE_RUN_ID
     * (piperun makes a random one per run), Slurm's SLURM_JOB_ID.SLURM_STEP_ID,
     * Open MPI's PMIX_NAMESPACE or OMPI_MCA_ess_base_jobid; "" when there is
     * none (stages started by hand without PIPE_RUN_ID). */
    char run_id[64];
    const char *run_id_source; /* the variable it came from, or NULL */
    /* The run's shared secret (docs/launch.md, "Security: the run token"): PIPE_RUN_TOKEN (piperun
     * makes a random one per run), or the first line of the file
     * PIPE_RUN_TOKEN_FILE names (readable by its owner only); 16..255 bytes.
     * The rendezvous proves by challenge and response that every process
     * holds it, before anything else is read. token_len 0: no token (stages
     * started by hand without one): nobody is authenticated. */
    char token[256];
    size_t token_len;
    const char *token_source;  /* "PIPE_RUN_TOKEN", "PIPE_RUN_TOKEN_FILE", or NULL */
    /* Processes of this run on this host (0: unknown) and the variable that
     * said so (PIPE_LOCAL_WORLD, OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS,
     * SLURM_NTASKS_PER_NODE, or the world itself when Slurm's step has one node). */
    int local_world;
    const char *local_source;
    const char *master_source; /* "PIPE_MASTER", "MASTER_ADDR", "SLURM_STEP_NODELIST", ..., "default" */
    /* A variable of another launcher that names another rank, e.g.
     * "SLURM_PROCID=0" inherited by mpirun's ranks from the allocation ("" none). */
    char ignored[64];
    /* This process's pipeline replica and the replica count (issue 13 item 1:
     * filled by the data-parallel split of rank and world; 0 and 1 until then). */
    int replica, replicas;
} pg_launch;
/* 0 ok; -1 with err filled (e.g. "PIPE_RANK=3 but PIPE_WORLD=3: rank must be < world",
 * "PIPE_RUN_TOKEN_FILE=t: the file can be read by others (mode 0644): chmod 600 t"). */
int pg_launch_from_env(pg_launch *l, char *err, size_t errlen);
/* Threads for this process: `requested` when > 0 (--threads), else
 * SLURM_CPUS_PER_TASK, else OMP_NUM_THREADS (its first number), else the
 * host's online cores divided by l->local_world (at least 1). *why gets where
 * it came from ("--threads", "SLURM_CPUS_PER_TASK", "2 cores / 2 local
 * processes (OMPI_COMM_WORLD_LOCAL_SIZE)"). -1 with err on a bad variable. */
int pg_launch_threads(const pg_launch *l, int requested, char *why, size_t whylen, char *err, size_t errlen);
/* The one start-up line every process prints (without the newline): replica,
 * rank/world and where the rank came from, host, master and where it came from,
 * threads and why. */
void pg_launch_describe(const pg_launch *l, int threads, const char *threads_why, char *out, size_t outlen);
/* Slurm's compressed host list ("node[01-04,07],gpu-a[1-2]", ranges padded to
 * the width of their first number, several bracket groups in one name): the
 * number of hosts it names (>= 1), with the n-th (from 0) written to host
 * ("" when n is past the end). -1 with err saying where the list is bad. */
long pg_hostlist_nth(const char *list, long n, char *host, size_t hostlen, char *err, size_t errlen);

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
    int stage;                /* must equal the launch rank mod P, rank = replica x P + stage
                                 (P = world / l->replicas) */
    const size_t *send_buf_bytes; /* [world], by rank: one step's bytes to each peer (0: no link needed) */
    const int *send_msgs;     /* [world], by rank: one step's messages to each peer (NULL: not known;
                                 the CUDA transport sizes its per-message events by it) */
    double connect_timeout_s; /* how long to keep retrying the master (back-off) */
    double send_timeout_s;    /* how long a send may wait for room in a full queue (--timeout; 0: 300 s) */
    const char *run_id;       /* pg_launch.run_id: every hello carries it (NULL: "") */
    /* What the stages must agree on (options, data files): an opaque text
     * every peer's hello carries to the master, which hands it to
     * agree_check(agree_arg, rank, text, len, why, whylen): 0 fits, else the
     * peer is refused with `why` (runtime/core/agree.c). NULL: not compared. */
    const char *agree;
    size_t agree_len;
    int (*agree_check)(void *arg, int rank, const char *text, size_t len, char *why, size_t whylen);
    void *agree_arg;
    /* What a failed pg_net_init leaves for pg_tcp_tell_failure and the
     * launcher (each may be NULL): */
    unsigned char *told;      /* [world], stage 0: 1 for each rank it told why the start-up failed */
    int *elsewhere;           /* another stage: 1 when stage 0 said the run failed for a cause not this
                                 process's (its failure only follows that one: piperun is told so) */
    char *pub_err;            /* stage 0: the failure as an unauthenticated process may hear it (none of
                                 stage 0's own values: model, plan hash, options) */
    size_t pub_errlen;
} pg_net_config;

/* Rendezvous + connect. NULL on failure with the message written to errbuf.
 * The master listens on the address PIPE_MASTER names (loopback stays
 * loopback), each peer on the address its link to the master leaves from.
 * Every connection is challenged first: with a run token (pg_launch.token)
 * only a process that proves it holds the token is read any further, and
 * the master proves it back; strangers are refused without being told what
 * the run expects. Every connection must greet within 5 s or is dropped,
 * without holding up the others. A hello of another run (another run id) is
 * refused and the run goes on; a hello of this run that does not fit (world,
 * rank, model, plan, agreement) fails the run, and every stage is told why;
 * with no run id at all nobody can be told apart, so such a hello is refused
 * alone and the master keeps waiting (its timeout message names what it
 * refused). Once the run is under way the master goes on answering at its
 * port until pg_net_close: a late or second process claiming a rank hears
 * "rank 1 is already taken by host:pid" at once. */
pg_net *pg_net_init(const pg_launch *l, const pg_net_config *cfg, char *errbuf, size_t errlen);
pg_net_status pg_net_send(pg_net *n, int peer, uint32_t tag, const void *buf, size_t bytes);
pg_net_status pg_net_recv(pg_net *n, int peer, uint32_t tag, void *buf, size_t bytes, double timeout_s);
/* The same between any two ranks (rank = replica x P + stage): pg_net_send and
 * pg_net_recv name a stage of this process's own replica, these a rank, for
 * the exchanges between replicas (runtime/core/dp.c). Host memory only. */
pg_net_status pg_net_send_rank(pg_net *n, int rank, uint32_t tag, const void *buf, size_t bytes);
pg_net_status pg_net_recv_rank(pg_net *n, int rank, uint32_t tag, void *buf, size_t bytes, double timeout_s);
/* A send that lends buf instead of copying it (the gradient reduction,
 * runtime/core/dp.c): the header is queued as by pg_net_send_rank, the
 * payload is written by the sender thread straight from buf, in order with
 * the peer's other messages. buf must stay unchanged until
 * pg_net_wait_lent(n, rank, seq) has returned PG_NET_OK for the *seq this
 * send set (or the link failed, or pg_net_close returned). It never waits
 * for the peer (the queue of lent buffers grows; only the header takes ring
 * space). wait_lent: every lent send to rank numbered <= seq written to the socket,
 * up to timeout_s (PG_NET_TIMEOUT when the peer stopped reading). Host
 * memory only. */
pg_net_status pg_net_send_rank_lent(pg_net *n, int rank, uint32_t tag, const void *buf, size_t bytes, uint64_t *seq);
pg_net_status pg_net_wait_lent(pg_net *n, int rank, uint64_t seq, double timeout_s);
/* The same for a stage of this process's own replica (the pipeline's
 * activation and gradient messages, runtime/core/step.c), where buf may be
 * lent: in host memory (the CPU runtime) the payload is lent as above and
 * *seq numbers it; where buf is device memory (the CUDA runtime) the message
 * is copied as by pg_net_send and *seq is 0. wait_sent: pg_net_wait_lent for
 * that stage (PG_NET_OK at once for seq 0). */
pg_net_status pg_net_send_lent(pg_net *n, int peer, uint32_t tag, const void *buf, size_t bytes, uint64_t *seq);
pg_net_status pg_net_wait_sent(pg_net *n, int peer, uint64_t seq, double timeout_s);
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

/* runtime/core/dp_bytes.h — the bytes of one process's data-parallel gradient
 * reduction (dp.c) as a function of its stage's parameter table and the
 * replica count D: what dp.c allocates and asks the transport for, and what
 * `pipegen plan` prints for each D (codegen/cli/cmd_plan.c). Kept in this one
 * place so that the plan and the runtime cannot drift; tests/ppdp_plan.t
 * checks both against figures it computes itself.
 *
 * What it assumes of dp.c's reduction (change it with dp.c):
 *  - the stage reduces n floats: every trained parameter it holds, in table
 *    order, except a tied parameter's copy on a stage that does not own it
 *    (transmit: not stepped there; replicate: the owner sends the sum);
 *  - they are cut into D shards, shard q = [n q / D, n (q + 1) / D) (with
 *    buckets, each bucket's floats are cut so: see below); the other D - 1
 *    replicas' copies of a shard arrive one PG_DP_CHUNK-float chunk at a time,
 *    into D - 1 chunk buffers (in), and are summed straight into the gradients;
 *  - every replica's batch-norm sums, 2 C doubles each, C the stage's largest
 *    buffer (at least 1), are gathered into D x 2 C doubles (stats);
 *  - messages carry at most PG_DP_CHUNK floats and are also cut at the
 *    parameters' ends and the buckets' (a bucket holds a parameter at least,
 *    so there are at most nparams + 1 of them, whatever PIPE_DP_BUCKET_BYTES);
 *    the gradients themselves are lent to the transport (pg_net_send_rank_lent),
 *    not copied, so the send ring to each other replica holds only the
 *    batch-norm sums, the loss, the start word and 16 header bytes a message,
 *    + 4 KiB (the transport adds its own 64 KiB of headroom to every ring,
 *    tcp.c's RING_SLACK, not counted here);
 *  - a process sends the other D - 1 shards of its gradients and its summed
 *    shard to each other replica: 2 (D - 1) / D of its gradient bytes. With
 *    early buckets (reduced while the backward runs) every bucket is cut into
 *    its own D shards: for D = 2 the figure is exact, for D > 2 the process's
 *    share of the floats may differ by a few per bucket from n / D.
 * Not in these figures: on the CUDA runtime (a device arena) the process also
 * holds either a host copy of its n gradient floats for the sum (the staged
 * path, dp.c's `host`) or the NCCL path's device buffers (pg_dp_nccl_bytes
 * below, runtime/cuda/dp_nccl.cu, plus NCCL's own); its end-of-run line counts
 * them in its buffers. */
#ifndef PG_DP_BYTES_H
#define PG_DP_BYTES_H

#include <stdint.h>

#define PG_DP_CHUNK ((int64_t)1 << 16) /* floats a reduction message carries at most */
/* The tag kind of the replicas' messages (PG_TAG(PG_TAG_DP, bucket, x)): x 0
 * shard in, 1 shard summed, 2 loss, 3 batch-norm sums, 4 start word, 5 and 6
 * the device reduction's start-up (pg_dp_dev.h); --zero 1 (zero.c): 7 the
 * updated weights of a shard, 8 a replica's optimizer state for a checkpoint */
#define PG_TAG_DP 24u

typedef struct pg_dp_bytes {
    int64_t in;         /* bytes: (D - 1) x PG_DP_CHUNK floats, the other replicas' copies of a chunk of this shard */
    int64_t stats;      /* bytes: D x 2 x max(C, 1) doubles, every replica's batch-norm sums */
    int64_t link;       /* bytes of the send ring to each other replica */
    int64_t sent;       /* bytes replica q's process sends per step */
} pg_dp_bytes;

/* n: floats reduced; stats_max: the largest buffer's elements (C); buffer_numel:
 * every buffer's elements; nparams: entries of the stage's parameter table
 * (also the buckets' bound); replica q of D. All zero for D = 1 (no
 * reduction, nothing allocated). Messages to one replica per phase: a piece
 * per PG_DP_CHUNK of the shard, per parameter end, and 2 per bucket (its
 * shard's rounding and its last piece). */
static inline pg_dp_bytes pg_dp_bytes_of(int64_t n, int64_t stats_max, int64_t buffer_numel, int nparams, int D, int q)
{
    pg_dp_bytes b = {0, 0, 0, 0};
    if (D <= 1)
        return b;
    int64_t shard = (n + D - 1) / D, mine = n * (q + 1) / D - n * q / D;
    int64_t msgs = 2 * (shard / PG_DP_CHUNK + 3 * (int64_t)nparams + 4) + nparams + 8;
    b.in = (int64_t)(D - 1) * PG_DP_CHUNK * 4;
    b.stats = (int64_t)D * 2 * (stats_max > 0 ? stats_max : 1) * 8;
    b.link = buffer_numel * 8 + msgs * 16 + 4096;
    b.sent = (n - mine) * 4 + (int64_t)(D - 1) * mine * 4;
    return b;
}

/* The first float of shard q of n floats cut into D shards. */
static inline int64_t pg_dp_shard_lo(int64_t n, int D, int q) { return n * q / D; }

/* --zero 1 (runtime/core/zero.c): replica q's optimizer state, when the
 * stage's n stepped floats (its reduced parameters numel[0..np), in table
 * order) are cut into D shards as above and each parameter's part of shard q
 * keeps nopt state tensors (2 AdamW, 1 SGD with momentum, else 0), each
 * PG_ZERO_ALIGN-aligned in the compact region after the arena's other
 * buffers. Sent per step: the reduction's, plus the shard's updated weights
 * to the D - 1 others ((D-1) x its floats x 4: 3 (D-1)/D of the gradient
 * bytes in all). */
#define PG_ZERO_ALIGN 64
static inline int64_t pg_zero_part_bytes(int64_t floats, int nopt)
{
    return (floats * 4 + PG_ZERO_ALIGN - 1) / PG_ZERO_ALIGN * PG_ZERO_ALIGN * nopt;
}

static inline int64_t pg_zero_state_bytes(const int64_t *numel, int np, int nopt, int D, int q)
{
    int64_t n = 0, base = 0, bytes = 0;
    for (int i = 0; i < np; i++)
        n += numel[i];
    int64_t s0 = pg_dp_shard_lo(n, D, q), s1 = pg_dp_shard_lo(n, D, q + 1);
    for (int i = 0; i < np; i++) {
        int64_t a = s0 > base ? s0 : base, b = s1 < base + numel[i] ? s1 : base + numel[i];
        if (a < b)
            bytes += pg_zero_part_bytes(b - a, nopt);
        base += numel[i];
    }
    return bytes;
}

/* The NCCL path's device bytes for n floats over D replicas: the other D - 1
 * replicas' copies of this replica's shard, (D - 1) x ceil(n / D) floats, and
 * when the gradients do not lie one after another in the arena (flat != 0) a
 * copy of all n, packed before the reduction and unpacked after it. */
static inline int64_t pg_dp_nccl_bytes(int64_t n, int D, int flat)
{
    if (D <= 1)
        return 0;
    return ((int64_t)(D - 1) * ((n + D - 1) / D) + (flat ? n : 0)) * 4;
}

#endif

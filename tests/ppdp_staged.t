#!/bin/sh
# tests/ppdp_staged.t — the replicas' gradient reduction through a host copy of
# the gradients, the path the CUDA runtime takes (runtime/core/dp.c: its arena
# is device memory), run on the CPU runtime with PIPE_DP_STAGED=1:
#  - mlp_small and gpt_tiny (a tie across stages), 2 stages x 2 replicas: the
#    staged run gives the losses and saved weights of the in-place one, bit for
#    bit;
#  - replica 0 names the path at start-up, once per stage, and why it is not
#    NCCL (the CPU runtime has none; on CUDA: replicas sharing a GPU, or
#    PIPE_DP_NCCL=0); the in-place run does not;
#  - on interleaved(2) the staged path reduces in one bucket after the backward
#    (no early buckets: the reducer thread does not touch the device), bitwise
#    the in-place run with its early buckets.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
T=$(mktemp -d /tmp/pg-ppdp-staged.XXXXXX)
trap 'rm -rf "$T"' EXIT

# run DIR OUT [env...]: piperun --dp 2, 3 steps, weights to OUT.st, the loss lines in OUT.loss
run() {
    _d=$1 _o=$2
    shift 2
    env "$@" "$PIPERUN" --dp 2 "$_d/gen/bin" -- --steps 3 --threads 1 --log-every 1 --save "$_o.st" >"$_o.out" 2>&1 ||
        { sed 's/^/# /' "$_o.out" | tail -20; return 1; }
    sed -n 's/.* loss \([-0-9.eEinfa+]*\).*/\1/p' "$_o.out" >"$_o.loss"
    [ -s "$_o.loss" ]
}

for m in mlp_small gpt_tiny; do
    e2e_gen "$T/$m" "$m" "$(e2e_splits 2)" 1f1b except_last && build_strict "$T/$m/gen"
    ok $? "$m: 2 stages generate and build"
    run "$T/$m" "$T/$m.place" PIPE_DP_STAGED=0; ok $? "$m: 2 stages x 2 replicas, gradients summed in place"
    run "$T/$m" "$T/$m.staged" PIPE_DP_STAGED=1; ok $? "$m: 2 stages x 2 replicas, through a host copy"
    [ -s "$T/$m.place.st" ] && cmp -s "$T/$m.place.loss" "$T/$m.staged.loss" && cmp -s "$T/$m.place.st" "$T/$m.staged.st"
    ok $? "$m: the staged reduction gives the in-place one's losses and weights bitwise ($(tail -n 1 "$T/$m.staged.loss" 2>/dev/null))"
    n=$(grep -c 'gradient reduction over 2 replicas: through host memory over TCP' "$T/$m.staged.out" 2>/dev/null)
    is "$n" 2 "$m: replica 0 of each stage names the staged path at start-up"
    n=$(grep -c 'through host memory over TCP (.*; not by NCCL: the CPU runtime has no NCCL)$' "$T/$m.staged.out" 2>/dev/null)
    is "$n" 2 "$m: ... and why it is not NCCL (pg_dp_dev_init of the CPU runtime)"
    [ -s "$T/$m.place.loss" ] && ! grep -q 'through host memory' "$T/$m.place.out"
    ok $? "$m: the in-place run does not"
done

# interleaved(2) (2 stages of 2 chunks), a bucket per layer (PIPE_DP_BUCKET_BYTES=1):
# in place, a stage's later chunk is summed while the earlier one's backward runs
# (an early bucket); staged, the reducer thread must not touch the device, so
# everything is one bucket after the backward: the same bits either way
m=ovl
e2e_gen "$T/$m" mlp_small "$(e2e_splits 4)" 'interleaved(2)' never -e 's/microbatches = 5/microbatches = 4/' &&
    build_strict "$T/$m/gen"
ok $? "mlp_small on interleaved(2), 2 stages of 2 chunks: generate and build"
run "$T/$m" "$T/$m.place" PIPE_DP_STAGED=0 PIPE_DP_BUCKET_BYTES=1 &&
    run "$T/$m" "$T/$m.staged" PIPE_DP_STAGED=1 PIPE_DP_BUCKET_BYTES=1 &&
    cmp -s "$T/$m.place.loss" "$T/$m.staged.loss" && cmp -s "$T/$m.place.st" "$T/$m.staged.st"
ok $? "interleaved(2), 2 x 2: the staged reduction (one bucket) gives the in-place one's (early buckets) losses and weights bitwise"
grep -q 'reduced while the backward ran' "$T/$m.place.out" && ! grep -q 'reduced while the backward ran' "$T/$m.staged.out"
ok $? "... in place with early buckets, staged without"
done_testing

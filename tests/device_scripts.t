#!/bin/sh
# tests/device_scripts.t — tools/gpu_bundle/device_check.sh and
# device_rerun.sh, the commands a GPU session runs, end to end against the
# emulated CUDA runtime (PG_GPU_FAKE=emu; tests/gpu/emu): every phase runs in
# order and writes its files under OUT (at most 8 there when it ends: the
# device tool returns no more), the logs packed in logs.tgz, results.json
# parses and says what passed; a phase past its limit is stopped and the whole
# command still ends within its budget, its logs packed; a rerun of one
# section with the fast paths switched off; bad command lines. (Without a GPU in
# the bundle, exit 3 at once: tests/gpu_bundle.t.) Emulated: this checks the
# scripts and what they run, not a GPU's speed.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_emu.sh"
emu_need
T=$(mktemp -d /tmp/pg-device.XXXXXX)
trap 'rm -rf "$T"' EXIT
PY=${PYTHON:-/usr/bin/python3}
DC=$TOP/tools/gpu_bundle/device_check.sh
DR=$TOP/tools/gpu_bundle/device_rerun.sh

"$DC" >/dev/null 2>&1; a=$?
"$DR" "$T/x" >/dev/null 2>&1; b=$?
"$DR" "$T/x" 9 >/dev/null 2>&1; c=$?
out=$("$DR" "$T/x" 3 oops 2>&1); d=$?
[ $a = 2 ] && [ $b = 2 ] && [ $c = 2 ] && [ $d = 2 ] && printf '%s' "$out" | grep -q "'oops' is not VAR=value"
ok $? "bad command lines: usage, exit 2 (no OUT $a, no section $b, section 9 $c, not VAR=value $d)"
out=$("$DC" "$T/y" 2>&1); st=$?
[ $st = 2 ] && printf '%s' "$out" | grep -q 'run it from the GPU bundle'
ok $? "in a checkout without PG_GPU_FAKE=emu: says to run it from the bundle, exit 2 ($st)"

# the whole check, emulated: the training's section 3 (3 runs of 4 steps), a small bench
export PG_GPU_FAKE=emu DEVICE_STEPS=4 DEVICE_BENCH_STEPS=3 DEVICE_BENCH_WARMUP=1
export DEVICE_REF=$T/ref # the CPU references: made by the first check, used by all three
t0=$(date +%s)
DEVICE_SECTIONS=3 DEVICE_BUDGET_S=900 DEVICE_OPS_S=300 DEVICE_TRAIN_S=300 DEVICE_BENCH_S=200 "$DC" "$T/dc" \
    >"$T/dc.out" 2>&1
st=$?
ok $st "device_check.sh, emulated, sections 0 and 3: exit 0 ($(($(date +%s) - t0)) s)"
[ $st = 0 ] || sed 's/^/# /' "$T/dc/summary.txt"
got=$(cd "$T/dc" 2>/dev/null && ls | tr '\n' ' ')
is "$got" "bench.json facts.txt logs.tgz memcheck.log ops.tap results.json summary.txt train.tap " \
    "it leaves 8 files in OUT (the device tool brings back 8), logs/ packed into logs.tgz"
got=$("$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r["status"], r["emulated"], [(p["phase"], p["status"]) for p in r["phases"]], r["ops"].split(",")[1].strip(),
      r["bench"]["tokens_per_s"]["pipegen_1stage"] > 0)' "$T/dc/results.json" 2>&1)
is "$got" "pass True [('facts', 'pass'), ('ops', 'pass'), ('train', 'pass'), ('bench', 'pass'), ('memcheck', 'skipped')] 0 failed True" \
    "results.json: every phase in order, the op tests' counts, the bench's figures"
n_ops=$(grep -c '^ok .*tests/gpu/test_ops_gpu.cu, group' "$T/dc/ops.tap")
n_train=$(grep -c '^ok' "$T/dc/train.tap")
tar -tzf "$T/dc/logs.tgz" >"$T/list" 2>/dev/null
[ "$n_ops" -ge 14 ] && [ "$n_train" -ge 7 ] && grep -q '^logs/train/cuda4cos.out$' "$T/list" &&
    grep -q '^logs/ops/ops-flash.tap$' "$T/list" && grep -q '^logs/bench/bench.log$' "$T/list"
ok $? "ops.tap has every group ($n_ops), train.tap section 3 ($n_train checks), logs.tgz every run's log"
grep -q 'memcheck: skipped .* compute-sanitizer needs a GPU' "$T/dc/summary.txt"
ok $? "summary.txt: memcheck left out, saying why"

# phases past their limits: stopped (or, when their own deadline says so, not
# started), the command within its budget, the partial logs packed
t0=$(date +%s)
DEVICE_SECTIONS="1 5b 7" DEVICE_BUDGET_S=150 DEVICE_OPS_S=15 DEVICE_TRAIN_S=25 DEVICE_BENCH_S=20 "$DC" "$T/late" \
    >"$T/late.out" 2>&1
st=$? el=$(($(date +%s) - t0))
# a phase is given TEST_DEADLINE, 5 s before its limit, and no run starts
# with under 5 s left; what still runs at the limit is stopped (TERM, KILL 3 s
# later). The op tests given 15 s end within 18, passed (~6 s on a quiet
# machine) or not; the training given 25 (sections 1, 5b and 7 need far more)
# fails, either killed at its limit or, its last runs refused, within it:
# which one depends on where a run was when the deadline came (the load)
late_ops() {
    grep -q 'ops: fail (over its 15 s)' "$T/late/summary.txt" && return 0
    lo_s=$(sed -n 's/^.* ops: [a-z]* (\([0-9]*\) s).*$/\1/p' "$T/late/summary.txt")
    [ -n "$lo_s" ] && [ "$lo_s" -le 18 ]
}
late_train() {
    grep -q 'train: fail (over its 25 s)' "$T/late/summary.txt" && return 0
    lt_s=$(sed -n 's/^.* train: fail (\([0-9]*\) s).*$/\1/p' "$T/late/summary.txt")
    [ -n "$lt_s" ] && [ "$lt_s" -le 25 ] && grep -q 'not run: out of time (TEST_DEADLINE)' "$T/late/train.tap"
}
[ $st = 1 ] && [ $el -le 160 ] && late_ops && late_train &&
    tar -tzf "$T/late/logs.tgz" 2>/dev/null | grep -q '^logs/train/'
st8=$?
ok $st8 "the op tests given 15 s and the training 25: each done within its limit, the training stopped, the command done within its budget ($el s of 150, exit $st), the partial logs packed"
[ $st8 = 0 ] || sed 's/^/# /' "$T/late/summary.txt"

# one section again, the fast paths switched off (the runs say so, their counters show it)
t0=$(date +%s)
DEVICE_BUDGET_S=900 DEVICE_OPS_S=300 DEVICE_TRAIN_S=400 "$DR" "$T/rr" 3 PIPE_CUDA_KERNELS=reference >"$T/rr.out" 2>&1
st=$?
tar -xzf "$T/rr/logs.tgz" -C "$T/rr" logs/rerun/cuda1cos.out 2>/dev/null
[ $st = 0 ] && grep -q 'device rerun of 3: .*with PIPE_CUDA_KERNELS=reference' "$T/rr/summary.txt" &&
    grep -q '^ok .*cosine lr: 4 stages vs 1' "$T/rr/rerun.tap" &&
    grep -q 'CUDA kernel paths (PIPE_CUDA_KERNELS=reference)' "$T/rr/logs/rerun/cuda1cos.out" &&
    grep -q 'kernel paths taken .*: colsum 0,' "$T/rr/logs/rerun/cuda1cos.out"
ok $? "device_rerun.sh OUT 3 PIPE_CUDA_KERNELS=reference: section 3 again, its runs on the reference kernels, by their reports (exit $st, $(($(date +%s) - t0)) s)"
[ $st = 0 ] || tail -8 "$T/rr.out" | sed 's/^/# /'
done_testing

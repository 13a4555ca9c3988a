#!/bin/sh
# tests/device_scripts.t — tools/gpu_bundle/device_check.sh and
# device_rerun.sh, the commands a GPU session runs, end to end against the
# emulated CUDA runtime (PG_GPU_FAKE=emu; tests/gpu/emu): every phase runs in
# order and writes its files under OUT (exactly the 8 documented there when it
# ends, the device tool returns no more; the working files in a temporary
# folder, removed), the logs packed in logs.tgz without the programs linked,
# results.json parses and says what passed; every bench row in order, the
# device named; a phase past its limit is stopped and the whole command still
# ends within its budget, its logs packed; a rerun of one section with the
# fast paths switched off, of the bench's rows chosen by DEVICE_BENCH_ROWS, of
# memcheck (a stand-in for compute-sanitizer: the op tests told, the one
# deliberate CUDA failure skipped); bad command lines. (Without a GPU in the
# bundle, exit 3 at once; with a fake driver, the same 8 files:
# tests/gpu_bundle.t.) Emulated: this checks the scripts and what they run,
# not a GPU's speed.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_emu.sh"
emu_need
T=$(mktemp -d /tmp/pg-device.XXXXXX)
trap 'rm -rf "$T"' EXIT
PY=${PYTHON:-/usr/bin/python3}
DC=$TOP/tools/gpu_bundle/device_check.sh
DR=$TOP/tools/gpu_bundle/device_rerun.sh
mkdir -p "$T/tmp"
export TMPDIR=$T/tmp # where the checks' working folders go: empty again after each
# listing DIR: every name in DIR, dot files too, on one line
listing() { (cd "$1" 2>/dev/null && ls -A | tr '\n' ' '); }

"$DC" >/dev/null 2>&1; a=$?
"$DR" "$T/x" >/dev/null 2>&1; b=$?
"$DR" "$T/x" 9 >/dev/null 2>&1; c=$?
out=$("$DR" "$T/x" 3 oops 2>&1); d=$?
[ $a = 2 ] && [ $b = 2 ] && [ $c = 2 ] && [ $d = 2 ] && printf '%s' "$out" | grep -q "'oops' is not VAR=value"
ok $? "bad command lines: usage, exit 2 (no OUT $a, no section $b, section 9 $c, not VAR=value $d)"
out=$("$DC" "$T/y" 2>&1); st=$?
[ $st = 2 ] && printf '%s' "$out" | grep -q 'run it from the GPU bundle'
ok $? "in a checkout without PG_GPU_FAKE=emu: says to run it from the bundle, exit 2 ($st)"
out=$(PG_GPU_FAKE=emu DEVICE_BENCH_ROWS="p1 p5" "$DC" "$T/y" 2>&1); st=$?
[ $st = 2 ] && printf '%s' "$out" | grep -qF "device check: DEVICE_BENCH_ROWS: no row 'p5' (the rows: peak p1 p1n p4 p4t conv convn eager compile)" &&
    [ ! -e "$T/y" ]
ok $? "DEVICE_BENCH_ROWS with an unknown row: named with the rows there are, exit 2 before anything runs ($st)"
out=$(PG_GPU_FAKE=emu "$DR" "$T/y" bench BENCH_ROWS=p1 2>&1); st=$?
[ $st = 2 ] && printf '%s' "$out" | grep -qF "device check: BENCH_ROWS is bench/gpu/run.sh's; the check's rows are DEVICE_BENCH_ROWS"
ok $? "device_rerun.sh OUT bench BENCH_ROWS=...: says the knob is DEVICE_BENCH_ROWS, exit 2 ($st)"

# the whole check, emulated: the training's section 3 (3 runs of 4 steps), a small bench
export PG_GPU_FAKE=emu DEVICE_STEPS=4 DEVICE_BENCH_STEPS=3 DEVICE_BENCH_WARMUP=1
export DEVICE_REF=$T/ref # the CPU references: made by the first check, used by all three
t0=$(date +%s)
DEVICE_SECTIONS=3 DEVICE_BUDGET_S=900 DEVICE_OPS_S=300 DEVICE_TRAIN_S=300 DEVICE_BENCH_S=200 "$DC" "$T/dc" \
    >"$T/dc.out" 2>&1
st=$?
ok $st "device_check.sh, emulated, sections 0 and 3: exit 0 ($(($(date +%s) - t0)) s)"
[ $st = 0 ] || sed 's/^/# /' "$T/dc/summary.txt"
is "$(listing "$T/dc")|$(listing "$T/tmp")" "bench.json facts.txt logs.tgz memcheck.log ops.tap results.json summary.txt train.tap |" \
    "OUT holds exactly its 8 files (the device tool brings back 8), logs/ packed into logs.tgz; the working folder removed"
got=$("$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
t = r["bench"]["tokens_per_s"]
print(r["status"], r["emulated"], [(p["phase"], p["status"]) for p in r["phases"]], r["ops"].split(",")[1].strip(),
      all(t[k] > 0 for k in ("pipegen_1stage", "pipegen_1stage_nograph", "pipegen_4stage", "pipegen_4stage_traced")),
      r["bench"]["device"])' "$T/dc/results.json" 2>&1)
is "$got" "pass True [('facts', 'pass'), ('ops', 'pass'), ('train', 'pass'), ('bench', 'pass'), ('memcheck', 'skipped')] 0 failed True emulated CUDA runtime (no GPU)" \
    "results.json: every phase in order, the op tests' counts, every pipegen row of the bench, the device from the facts"
tar -xzf "$T/dc/logs.tgz" -C "$T" logs/bench/bench.err 2>/dev/null
got=$(sed -n 's/^bench-gpu: row \([a-z0-9]*\): .*$/\1/p' "$T/logs/bench/bench.err" 2>/dev/null | tr '\n' ' ')
grep -q 'bench: pass .* rows peak p1 p1n p4 p4t conv convn eager compile (limit' "$T/dc/summary.txt" &&
    [ "$got" = "p1 p1n p4 p4t eager compile " ]
ok $? "the bench's rows by default: every one, in order (emulated: no GEMM peak, convolutions or torch) ($got)"
n_ops=$(grep -c '^ok .*tests/gpu/test_ops_gpu.cu, group' "$T/dc/ops.tap")
n_train=$(grep -c '^ok' "$T/dc/train.tap")
tar -tzf "$T/dc/logs.tgz" >"$T/list" 2>/dev/null
[ "$n_ops" -ge 14 ] && [ "$n_train" -ge 7 ] && grep -q '^logs/train/cuda4cos.out$' "$T/list" &&
    grep -q '^logs/ops/ops-flash.tap$' "$T/list" && grep -q '^logs/bench/bench.log$' "$T/list" &&
    grep -q '^logs/bench/gpt2-1/model.pipe$' "$T/list" && ! grep -q '/bin/stage0$' "$T/list"
ok $? "ops.tap has every group ($n_ops), train.tap section 3 ($n_train checks), logs.tgz every run's log and not the stage programs"
grep -q 'memcheck: skipped .* compute-sanitizer needs a GPU' "$T/dc/summary.txt"
ok $? "summary.txt: memcheck left out, saying why"

# phases past their limits: stopped (or, when their own deadline says so, not
# started), the command within its budget, the partial logs packed
t0=$(date +%s)
DEVICE_SECTIONS="1 5b 7" DEVICE_BUDGET_S=150 DEVICE_OPS_S=15 DEVICE_TRAIN_S=25 DEVICE_BENCH_S=20 DEVICE_KEEP_LOGS=1 \
    "$DC" "$T/late" >"$T/late.out" 2>&1
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
is "$(listing "$T/late")|$(listing "$T/tmp")" "bench.json facts.txt logs logs.tgz memcheck.log ops.tap results.json summary.txt train.tap |" \
    "phases stopped, DEVICE_KEEP_LOGS=1: the same 8 files and logs/, nothing else; the working folder removed"

# rerun NAME SECTION [VAR=value...]: device_rerun.sh into $T/NAME (output
# $T/NAME.out), with time enough; st its status, files what it left in OUT
rerun() {
    rr_n=$1
    shift
    DEVICE_BUDGET_S=900 DEVICE_OPS_S=300 DEVICE_TRAIN_S=400 "$DR" "$T/$rr_n" "$@" >"$T/$rr_n.out" 2>&1
    st=$? files=$(listing "$T/$rr_n")
}

# one section again, the fast paths switched off (the runs say so, their counters show it)
t0=$(date +%s)
rerun rr 3 PIPE_CUDA_KERNELS=reference
tar -xzf "$T/rr/logs.tgz" -C "$T/rr" logs/rerun/cuda1cos.out 2>/dev/null
[ $st = 0 ] && grep -q 'device rerun of 3: .*with PIPE_CUDA_KERNELS=reference' "$T/rr/summary.txt" &&
    grep -q '^ok .*cosine lr: 4 stages vs 1' "$T/rr/rerun.tap" &&
    grep -q 'CUDA kernel paths (PIPE_CUDA_KERNELS=reference)' "$T/rr/logs/rerun/cuda1cos.out" &&
    grep -q 'kernel paths taken .*: colsum 0,' "$T/rr/logs/rerun/cuda1cos.out"
ok $? "device_rerun.sh OUT 3 PIPE_CUDA_KERNELS=reference: section 3 again, its runs on the reference kernels, by their reports (exit $st, $(($(date +%s) - t0)) s)"
[ $st = 0 ] || tail -8 "$T/rr.out" | sed 's/^/# /'
is "$files|$(listing "$T/tmp")" "facts.txt logs.tgz ops.tap rerun.tap results.json summary.txt |" \
    "a rerun of a training section leaves its documented files (rerun.tap for train.tap, no bench or memcheck), nothing else"

# the bench's rows chosen (DEVICE_BENCH_ROWS, given as VAR=value)
rerun rb bench DEVICE_BENCH_ROWS=p1n
got=$("$PY" -c '
import json, sys
t = json.load(open(sys.argv[1]))["tokens_per_s"]
print(t["pipegen_1stage_nograph"] > 0, t["pipegen_1stage"], t["pipegen_4stage"])' "$T/rb/bench.json" 2>&1)
is "$st $got $files" "0 True None None bench.json facts.txt logs.tgz ops.tap results.json summary.txt " \
    "device_rerun.sh OUT bench DEVICE_BENCH_ROWS=p1n: that row alone (the others null); its documented files"

# memcheck: the op tests told they run under it (PG_OPS_MEMCHECK=1), the one
# check whose CUDA call fails on purpose skipped, saying why, API errors still
# reported. compute-sanitizer needs a GPU: a stand-in notes its arguments and
# runs the (emulated) op tests
printf '%s\n' '#!/bin/sh' "echo \"\$*\" >>\"$T/cs.args\"" 'while [ $# -gt 2 ]; do shift; done' '"$1" "$2"; rc=$?' \
    'echo "========= ERROR SUMMARY: 0 errors"' 'exit $rc' >"$T/cs"
chmod +x "$T/cs"
rerun rm memcheck DEVICE_SANITIZER="$T/cs" DEVICE_MEMCHECK_GROUPS=setup
tar -xzf "$T/rm/logs.tgz" -C "$T/rm" logs/memcheck/setup.log logs/ops/ops-setup.tap 2>/dev/null
[ $st = 0 ] && grep -q -- '--tool memcheck --report-api-errors explicit --error-exitcode 9 .*/test_ops_gpu setup$' "$T/cs.args" &&
    grep -q '^ok [0-9]* # SKIP an impossible arena: its cudaMalloc fails on purpose, an API error under compute-sanitizer (PG_OPS_MEMCHECK=1)' \
        "$T/rm/logs/memcheck/setup.log" &&
    grep -q '^ok [0-9]* - every fast kernel path is on by default' "$T/rm/logs/memcheck/setup.log" &&
    grep -q 'the op tests run with PG_OPS_MEMCHECK=1: the one check that fails a CUDA call on purpose' "$T/rm/memcheck.log" &&
    grep -q '^group setup: exit 0; ========= ERROR SUMMARY: 0 errors; 1 skipped$' "$T/rm/memcheck.log" &&
    grep -q '^ok [0-9]* - an impossible arena fails with a message' "$T/rm/logs/ops/ops-setup.tap"
ok $? "memcheck: API errors reported, the op tests told (PG_OPS_MEMCHECK=1), the deliberate failure a SKIP saying why, memcheck.log saying so; the op tests' own run checks it (exit $st)"
[ $st = 0 ] || tail -8 "$T/rm.out" | sed 's/^/# /'
is "$files|$(listing "$T/tmp")" "facts.txt logs.tgz memcheck.log ops.tap results.json summary.txt |" \
    "a rerun of memcheck leaves its documented files, nothing else; the working folder removed"
done_testing

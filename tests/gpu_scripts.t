#!/bin/sh
# tests/gpu_scripts.t — the GPU test and benchmark scripts, run here without a
# GPU so that their first run on one is not their first run at all:
#  - every script parses (sh -n);
#  - the TAP counter: the variant helper leaves the test numbering alone
#    (it used to overwrite lib.sh's counter);
#  - tests/gpu/run_gpu_tests.sh with the CPU runtime standing in for the CUDA
#    one (PG_GPU_FAKE=cpu): every check runs and passes, the numbering is
#    sequential and matches the plan, each skip says why (20 at most: the
#    checks only the CUDA runtime can answer: op tests, graphs, the kernel
#    paths' and the bf16 operand copies' reports, the NCCL sections), logs in
#    LOGDIR;
#  - the same with nothing to run (pipegen fails): every check fails, none
#    passes by default, the killed-stage checks included; GPU_SECTIONS runs
#    the sections named and no other;
#  - bench/gpu/run.sh likewise on the CPU runtime with a small model: it
#    measures, compares graph and --no-graph bits, predicts the traced step
#    and writes bench.json that parses, numbers where it measured; BENCH_ROWS
#    runs the rows named (one that does not exist: named, exit 1), torch.compile
#    not started without BENCH_COMPILE_MIN_S left, bench.json's device from
#    BENCH_DEVICE;
#  - json_str and json_num (tools/gpu_env.sh) write valid JSON.
. "$(dirname "$0")/lib.sh"
cd "$TOP" || exit 1
T=$(mktemp -d /tmp/pg-gpu-scripts.XXXXXX)
trap 'rm -rf "$T"' EXIT
PY=${PYTHON:-/usr/bin/python3}

for f in tests/gpu/run_gpu_tests.sh tests/gpu/lib_gpu.sh tests/gpu/cpu_refs.sh bench/gpu/run.sh tools/gpu_env.sh \
    tools/gpu_ldlibs.sh tools/gpu_bundle.sh tools/gpu_bundle/run.sh tools/gpu_bundle_fresh.sh; do
    sh -n "$f" 2>"$T/sh.log"; st=$?
    ok $st "$f parses (sh -n)"
    [ $st = 0 ] || sed 's/^/# /' "$T/sh.log"
done

# the TAP counter across variant (gpt_tiny linked for the CPU)
(
    . tests/lib.sh
    TOP=$(pwd) PIPEGEN=$TOP/build/pipegen CPULIB=$TOP/build/libpgrt_cpu.a CUDALIB="" CC=${CC:-cc}
    GPU_MODEL=$TOP/tests/models/gpt_tiny.pipe T=$T/counter
    . tests/gpu/lib_gpu.sh
    ok 0 first
    variant v1 1; ok $? "after a 1-stage variant"
    variant v4 4; ok $? "after a 4-stage variant"
    done_testing
) >"$T/counter.tap" 2>&1
is "$(cat "$T/counter.tap")" "ok 1 - first
ok 2 - after a 1-stage variant
ok 3 - after a 4-stage variant
1..3" "the variant helper keeps the TAP numbering (1, 2, 3 after two variants)"

# tap_valid FILE: plan = number of lines, numbered 1..N in order, skips with a reason
tap_valid() {
    awk '/^(not )?ok / { n++; num = ($1 == "not") ? $3 : $2; if (num != n) bad = bad " " num "!=" n;
                         if (/# SKIP/ && !/# SKIP [^ ]/) bad = bad " skip-without-reason:" n }
         /^1\.\.[0-9]+$/ { split($0, p, "\\.\\."); plan = p[2] }
         END { if (plan != n) bad = bad " plan " plan " for " n " tests"; print (bad ? bad : "ok") }' "$1"
}

# the GPU test script on the CPU runtime
PG_GPU_FAKE=cpu STEPS=12 LOGDIR=$T/logs tests/gpu/run_gpu_tests.sh >"$T/fake.tap" 2>"$T/fake.err"
st=$?
ok $st "run_gpu_tests.sh on the CPU runtime (PG_GPU_FAKE=cpu): exit 0"
[ $st = 0 ] || grep -v '^ok' "$T/fake.tap" | head -20 | sed 's/^/# /'
is "$(tap_valid "$T/fake.tap")" ok "its TAP is numbered 1..N in order, matches its plan, and every skip says why"
n_ok=$(grep -c '^ok [0-9]* - ' "$T/fake.tap")
n_skip=$(grep -c '# SKIP' "$T/fake.tap")
[ "$n_ok" -ge 50 ] && [ "$n_skip" -le 20 ] && ! grep -q '^not ok' "$T/fake.tap"
ok $? "every check that the CPU runtime can answer ran and passed ($n_ok passed, $n_skip skipped)"
[ -s "$T/logs/cuda1.loss" ] && [ -s "$T/logs/kill0.log" ]; ok $? "LOGDIR gets the runs' logs"

# with nothing to run: every check that needs a run must fail
GPU_PIPEGEN=/bin/false PG_GPU_FAKE=cpu STEPS=12 KILL_S=5 tests/gpu/run_gpu_tests.sh >"$T/none.tap" 2>&1
st=$?
passed=$(sed -n 's/^ok [0-9]* - //p' "$T/none.tap")
[ $st != 0 ] && [ -z "$passed" ] && [ "$(grep -c '^not ok' "$T/none.tap")" -ge 40 ]
ok $? "nothing to run: no check that needs a run passes ($(grep -c '^not ok' "$T/none.tap") not ok, exit $st)"
[ -z "$passed" ] || printf '%s\n' "$passed" | sed 's/^/# passed anyway: /'
grep -q '^not ok .* stages 0, 2, 3 exit non-zero within' "$T/none.tap" && grep -q '^not ok .* four stages train' "$T/none.tap"
ok $? "the killed-stage checks fail when no stage ran"

# GPU_SECTIONS: only the sections named (3: the cosine lr; nothing of 1's stage counts)
GPU_SECTIONS=3 PG_GPU_FAKE=cpu STEPS=12 tests/gpu/run_gpu_tests.sh >"$T/sec3.tap" 2>&1
st=$?
[ $st = 0 ] && grep -q '^ok .* cosine lr: 4 stages vs 1' "$T/sec3.tap" && ! grep -q 'gpipe\|replicas\|killed\|4 stages vs 1 stage:' "$T/sec3.tap" &&
    [ "$(tap_valid "$T/sec3.tap")" = ok ]
ok $? "GPU_SECTIONS=3 runs the cosine-lr section alone ($(grep -c '^ok' "$T/sec3.tap") checks, exit $st)"

# the benchmark on the CPU runtime with a small model
PG_GPU_FAKE=cpu BENCH_MODEL=$TOP/examples/gpt_char.pipe BENCH_CONV_MODEL=$TOP/tests/models/conv_small.pipe \
    BENCH_STEPS=4 BENCH_WARMUP=1 BENCH_DIR=$T/bench bench/gpu/run.sh >"$T/bench.out" 2>&1
st=$?
ok $st "bench/gpu/run.sh on the CPU runtime (gpt_char, 4 steps): exit 0"
[ $st = 0 ] || tail -20 "$T/bench.out" | sed 's/^/# /'
got=$("$PY" -c '
import json, sys
b = json.load(open(sys.argv[1]))
t = b["tokens_per_s"]
print(all(isinstance(t[k], float) and t[k] > 0 for k in ("pipegen_1stage", "pipegen_1stage_nograph", "pipegen_4stage")),
      b["graph_same_bits"], isinstance(b["step_4stage_over_1stage"], float), isinstance(b["trace_ratio"], float),
      t["torch_eager"], b["memory_ratio"], b["complete"],
      all(isinstance(b["conv"][k], float) and b["conv"][k] > 0 for k in ("samples_per_s_1stage", "samples_per_s_1stage_nograph")),
      b["conv"]["same_bits"])' "$T/bench/bench.json" 2>&1)
is "$got" "True True True True None None True True True" \
    "bench.json parses: tokens/s measured, graph and --no-graph bits equal, 4/1 step ratio, traced step vs prediction; no torch, no GPU memory: null; the convolutional model's samples/s, graph = --no-graph bits"

# BENCH_ROWS: the rows named and no other (torch.compile among them, but with
# less time left than BENCH_COMPILE_MIN_S: left out, saying why, no failure);
# the device named by the caller (BENCH_DEVICE); a row that does not exist; a
# deadline already passed: no run starts (GNU timeout reads a limit of 0 as
# none at all)
PG_GPU_FAKE=cpu BENCH_MODEL=$TOP/examples/gpt_char.pipe BENCH_STEPS=4 BENCH_WARMUP=1 BENCH_DIR=$T/bench2 BENCH_ROWS="p1 compile" \
    BENCH_DEADLINE=$(($(date +%s) + 600)) BENCH_COMPILE_MIN_S=100000 BENCH_DEVICE="Some GPU" bench/gpu/run.sh >"$T/bench2.out" 2>&1
st=$?
got=$("$PY" -c '
import json, sys
b = json.load(open(sys.argv[1]))
t = b["tokens_per_s"]
print(isinstance(t["pipegen_1stage"], float), t["pipegen_4stage"], t["pipegen_1stage_nograph"], b["conv"]["samples_per_s_1stage"],
      t["torch_compile"], b["complete"], b["device"])' "$T/bench2/bench.json" 2>&1)
is "$st $got" "0 True None None None None True Some GPU" \
    "BENCH_ROWS=\"p1 compile\": only the 1-stage row runs, the others are null (the convolutional one too), torch.compile too without the time it needs; complete; the device as BENCH_DEVICE says"
grep -q '^torch-compile: left out, [0-9]* s left before BENCH_DEADLINE, under BENCH_COMPILE_MIN_S (100000)$' "$T/bench2/torch-compile.log"
ok $? "torch.compile with less than BENCH_COMPILE_MIN_S left: not started, its log says why"
out=$(PG_GPU_FAKE=cpu BENCH_MODEL=$TOP/examples/gpt_char.pipe BENCH_DIR=$T/bench4 BENCH_ROWS="p1 p9" bench/gpu/run.sh 2>&1); st=$?
[ $st = 1 ] && printf '%s\n' "$out" | grep -qF "bench-gpu: BENCH_ROWS: no row 'p9' (the rows: peak p1 p1n p4 p4t conv convn eager compile)" &&
    [ ! -e "$T/bench4" ]
ok $? "BENCH_ROWS with a row that does not exist: named, with the rows there are, exit 1 before anything runs ($st)"
out=$(PG_GPU_FAKE=cpu BENCH_MODEL=$TOP/examples/gpt_char.pipe BENCH_DIR=$T/bench5 BENCH_CHECKPOINT=sometimes bench/gpu/run.sh 2>&1); st=$?
[ $st = 1 ] && printf '%s\n' "$out" | grep -qF "bench-gpu: BENCH_CHECKPOINT: no mode 'sometimes' (always, never, except_last, or model: the model file's own)" &&
    [ ! -e "$T/bench5" ]
ok $? "BENCH_CHECKPOINT with a mode that does not exist: named, with the modes there are, exit 1 before anything runs ($st)"
PG_GPU_FAKE=cpu BENCH_MODEL=$TOP/examples/gpt_char.pipe BENCH_STEPS=4 BENCH_WARMUP=1 BENCH_DIR=$T/bench3 BENCH_ROWS=p1 \
    BENCH_DEADLINE=$(($(date +%s) - 1)) bench/gpu/run.sh >"$T/bench3.out" 2>&1
st=$?
[ $st = 1 ] && grep -q 'pipegen-1stage: not run, out of time (BENCH_DEADLINE)' "$T/bench3.out" &&
    ! grep -q 'samples/s' "$T/bench3/pipegen-1stage.log"
ok $? "BENCH_DEADLINE already passed: the row is not run, says why, exit 1 (exit $st)"

# JSON strings and numbers
. tools/gpu_env.sh
j=$(printf '[%s, %s, %s, %s, %s]' "$(json_str 'a"b\c')" "$(json_str "two
lines	tab")" "$(json_str '')" "$(json_num 1.5e3)" "$(json_num n/a)")
got=$("$PY" -c 'import json, sys; print(json.loads(sys.argv[1]))' "$j" 2>&1)
is "$got" "['a\"b\\\\c', 'two\\nlines\\ttab', '', 1500.0, None]" "json_str and json_num write valid JSON (quotes, backslashes, newlines, tabs, empty, numbers, n/a)"
done_testing

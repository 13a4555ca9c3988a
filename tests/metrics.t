#!/bin/sh
# tests/metrics.t — the log line and --metrics FILE.jsonl (runtime/core/main.c,
# metrics.c), on tests/models/oracle_groups.pipe (a linear learning-rate
# schedule after a warm-up) and lm_tiny (token inputs):
#  - every log line starts `step N/M  loss X`, then the learning rate, the
#    gradient norm before clipping, the epoch (data files), samples/s (tokens/s
#    for token inputs) and ms/step; step 1 and the last step are always logged;
#  - the learning rates are the schedule's formula; the gradient norm is the
#    norm of the step's gradients (--save-grads), the same with grad_clip (the
#    norm before clipping), and bitwise the same on 1 and 3 stages;
#  - --metrics writes one JSON object per log line (step, loss, lr, grad_norm,
#    epoch, samples_per_s or tokens_per_s, ms_per_step), readable while the run
#    goes on; a fresh run starts the file anew and a resumed one appends, each
#    saying so; a file that cannot be written is refused before the first step.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh"
. "$TOP/tests/lib_lm.sh"
fault_tmpdir metrics

need_python torch numpy

$PY - "$T" <<'EOF'
import sys, numpy as np
r = np.random.default_rng(8)
np.save(sys.argv[1] + "/x.npy", r.normal(size=(30, 16)).astype(np.float32))
np.save(sys.argv[1] + "/y.npy", r.normal(size=(30, 8)).astype(np.float32))
EOF
"$PIPEDATA" npy "$T/x.npy" -o "$T/x.pgd" >/dev/null && "$PIPEDATA" npy "$T/y.npy" -o "$T/y.pgd" >/dev/null
DATA="--data $T/x.pgd --targets $T/y.pgd"
gen() { # NAME SED: oracle_groups on 3 stages, edited by SED
    mkdir -p "$T/$1" && sed -e "$2" "$TOP/tests/models/oracle_groups.pipe" >"$T/$1/m.pipe" &&
        "$PIPEGEN" gen "$T/$1/m.pipe" -o "$T/$1/gen" >"$T/$1/gen.out" 2>&1 && build "$T/$1/gen"
}
run() { # NAME OUT [OPTION...]
    _r=$1 _o=$2
    shift 2
    "$PIPERUN" "$T/$_r/gen/bin" -- --threads 1 --timeout 60 "$@" >"$_o" 2>&1
}
lines() { sed -n 's/^\[stage [0-9]*\] \(step [0-9]*\/.*\)/\1/p' "$1"; }
notime() { lines "$1" | sed 's/  [0-9.]* \(samples\|tokens\)\/s  [0-9.]* ms\/step//'; }

gen g3 '' && gen g1 '/^split$/d' && gen clip 's/^  batch = 12 /  grad_clip = 1e-4  batch = 12 /'
ok $? "oracle_groups builds on 3 and 1 stages, and with grad_clip = 1e-4"

run g3 "$T/g3.out" --steps 10 --log-every 4 $DATA --metrics "$T/m.jsonl"
ok $? "3 stages train 10 steps with --log-every 4 and --metrics"
is "$(lines "$T/g3.out" | sed 's/  loss.*//' | tr '\n' ' ')" "step 1/10 step 4/10 step 8/10 step 10/10 " \
    "step 1, every 4th step and the last step are logged"
like "$(lines "$T/g3.out" | head -1)" \
    '^step 1/10  loss [0-9]+\.[0-9]{9}  lr [0-9.e+-]+  grad_norm [0-9.e+-]+  epoch 1  [0-9.]+ samples/s  [0-9.]+ ms/step$' \
    "a log line: step N/M, loss, lr, grad_norm, epoch, samples/s, ms/step"
like "$(lines "$T/g3.out" | tail -1)" '  epoch 4  ' "the epoch counts passes over the 30 samples (step 10 starts at row 108)"
$PY - "$T/g3.out" <<'EOF'
import re, sys
lr, w, lo, S = 1e-2, 3, 1e-3, 10          # oracle_groups: lr_schedule = linear(warmup = 3, min = 1e-3), steps = 10
def at(t):
    return lr * (t + 1) / w if t < w else lo + (lr - lo) * (1 - min((t - w) / (S - w), 1.0))
bad = []
for l in open(sys.argv[1]):
    m = re.search(r"step (\d+)/10  loss \S+  lr (\S+)", l)
    if m and ("%.6g" % at(int(m.group(1)) - 1)) != m.group(2):
        bad.append((m.group(1), m.group(2), "%.6g" % at(int(m.group(1)) - 1)))
sys.exit(1 if bad else 0)
EOF
ok $? "each line's lr is linear(warmup = 3, min = 1e-3)'s value at its step"
run g1 "$T/g1.out" --steps 10 --log-every 4 $DATA
is "$(notime "$T/g1.out")" "$(notime "$T/g3.out")" "the lines but their timing are bitwise the same on 1 stage (the norm summed in parameter order)"

run g3 "$T/grads.out" --steps 1 $DATA --save-grads "$T/g.st"
gn=$(lines "$T/grads.out" | sed 's/.*grad_norm \([^ ]*\).*/\1/')
$PY - "$T/g.st" "$gn" "$TOP/tools" <<'EOF'
import math, sys
sys.path.insert(0, sys.argv[3])
import load_safetensors
g = load_safetensors.load(sys.argv[1])
n = math.sqrt(sum(float((t.double() ** 2).sum()) for t in g.values()))
sys.exit(0 if abs(n - float(sys.argv[2])) <= 1e-5 * n else 1)
EOF
ok $? "grad_norm is the norm of the step's gradients ($gn, --save-grads)"
run clip "$T/clip.out" --steps 1 $DATA
is "$(lines "$T/clip.out" | sed 's/.*grad_norm \([^ ]*\).*/\1/')" "$gn" "with grad_clip = 1e-4 the line shows the norm before clipping"

$PY - "$T/m.jsonl" "$T/g3.out" <<'EOF'
import json, re, sys
js = [json.loads(l) for l in open(sys.argv[1])]
logs = [l for l in open(sys.argv[2]) if re.search(r"\] step \d+/", l)]
assert [j["step"] for j in js] == [1, 4, 8, 10], js
for j, l in zip(js, logs):
    for k in ("steps", "loss", "lr", "grad_norm", "epoch", "samples_per_s", "ms_per_step"):
        assert k in j, (k, j)
    assert "%.9f" % j["loss"] == re.search(r"loss (\S+)", l).group(1), (j, l)
    assert "%.6g" % j["grad_norm"] == re.search(r"grad_norm (\S+)", l).group(1), (j, l)
EOF
ok $? "--metrics: one JSON object per log line, with the line's step, loss, lr, grad_norm, epoch, rate, ms/step"

# a resumed run appends, a fresh one starts anew
run g3 "$T/r1.out" --steps 5 $DATA --checkpoint-dir "$T/ck" --metrics "$T/r.jsonl" &&
    run g3 "$T/r2.out" --steps 10 $DATA --resume "$T/ck" --checkpoint-dir "$T/ck" --metrics "$T/r.jsonl"
ok $? "5 steps, then a resume to 10, with the same --metrics file"
like "$(cat "$T/r2.out")" "metrics: appending to $T/r.jsonl from step 6 \\(resumed; the lines of the run it continues stay before them\\)" \
    "the resumed run says that it appends"
is "$($PY -c 'import json,sys; print(" ".join(str(json.loads(l)["step"]) for l in open(sys.argv[1])))' "$T/r.jsonl")" \
    "1 2 3 4 5 6 7 8 9 10" "the file holds the first run's steps, then the resumed run's"
run g3 "$T/r3.out" --steps 2 $DATA --metrics "$T/r.jsonl"
like "$(cat "$T/r3.out")" "metrics: $T/r.jsonl starts anew \\(a fresh run; --resume appends\\)" "a fresh run says that it starts the file anew"
is "$(wc -l <"$T/r.jsonl" | tr -d ' ')" 2 "...and the file holds its 2 lines only"

# readable while the run goes on
"$PIPERUN" "$T/g3/gen/bin" -- --threads 1 --steps 100000 $DATA --metrics "$T/live.jsonl" >"$T/live.out" 2>&1 &
echo $! >"$T/live.pid"
wait_for "$T/live.jsonl" '"step": 20,' 60
$PY -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$T/live.jsonl"
ok $? "while the run goes on, every line of the file is a whole JSON object"
kill -TERM "$(cat "$T/live.pid")" 2>/dev/null; wait_exit "$(cat "$T/live.pid")" 20

# token inputs: tokens/s
lm_build "$T/lm" 1 replicate && lm_text "$T/text.txt" && "$PIPEDATA" text "$T/text.txt" -o "$T/text.pgd" >/dev/null &&
    lm_run "$T/lm" "$T/lm.out" --steps 2 --data "$T/text.pgd" --metrics "$T/lm.jsonl"
ok $? "lm_tiny trains on a token stream with --metrics"
like "$(lines "$T/lm.out" | head -1)" '  grad_norm [0-9.e+-]+  [0-9.]+ tokens/s  [0-9.]+ ms/step$' \
    "token inputs: the line gives tokens/s (and no epoch: windows are drawn, not passed over)"
$PY -c 'import json,sys; j = json.loads(open(sys.argv[1]).readline()); sys.exit(0 if "tokens_per_s" in j and "epoch" not in j else 1)' \
    "$T/lm.jsonl"
ok $? "...and its JSON line tokens_per_s"

run g3 "$T/bad.out" --steps 1 $DATA --metrics "$T/nonexistent/m.jsonl"
is "$?" 2 "a --metrics file in a folder that does not exist: exit 2"
like "$(cat "$T/bad.out")" "--metrics $T/nonexistent/m.jsonl cannot be written: the folder $T/nonexistent does not exist; nothing was run" \
    "...before the first step, naming the folder"
done_testing

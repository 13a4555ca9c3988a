#!/bin/sh
# tests/cuda_emu_time.t — the CUDA stage's timings are the device's, emulated
# (tests/gpu/emu/: a timing event takes the host's clock when its emulated
# stream executes the record, so the figures are this CPU's, never a GPU's):
# pg_backend_mark from C (tests/gpu/marks.c: the CPU has no device clock, a
# mark's time is when the stream got there, a mark opening a captured run
# moves to the graph's launch, misuse fails with a message); gpt_tiny's
# stage programs on the emulated runtime print their bubble line in device
# time with compute <= wall (graphs and --no-graph); a 4-stage --trace has
# device spans (otherData device_time) nested in their steps and contiguous,
# which `pipegen trace` reads and says so, with a --profile it accepts; and
# timing adds no synchronisation: the host's waits for the device per step
# (the emulator's PG_EMU_COUNTS) are the same with --trace, which marks every
# action, as without.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_emu.sh"
emu_need
T=$(mktemp -d /tmp/pg-emu-time.XXXXXX)
trap 'rm -rf "$T"' EXIT
PY=${PYTHON:-/usr/bin/python3}
PIPERUN=$TOP/build/piperun
EMU_LIBS="-lstdc++ -lblas -lpthread -lm"

# ---- the hooks from C ---------------------------------------------------------
# shellcheck disable=SC2086
${CC:-cc} -std=c11 -Wall -Wextra -Werror -I"$TOP/runtime/core" -o "$T/marks_cpu" "$TOP/tests/gpu/marks.c" \
    "$TOP/build/libpgrt_cpu.a" -lpthread -lm >"$T/cc.log" 2>&1 &&
    ${CC:-cc} -std=c11 -Wall -Wextra -Werror -I"$TOP/runtime/core" -o "$T/marks_emu" "$TOP/tests/gpu/marks.c" \
        "$EMU/libpgrt_cuemu.a" $EMU_LIBS >>"$T/cc.log" 2>&1
ok $? "tests/gpu/marks.c links against the CPU runtime and the emulated CUDA runtime"
"$T/marks_cpu" >"$T/marks_cpu.tap" 2>"$T/marks_cpu.err"
emu_tap "CPU backend: " "$T/marks_cpu.tap"
is "$(sed 's/\.c:[0-9]*:/.c:N:/' "$T/marks_cpu.err")" "runtime/cpu/backend.c:N: error: pg_backend_mark: the CPU backend has no device clock (time it on the host)
runtime/cpu/backend.c:N: error: pg_backend_mark_times: the CPU backend has no device clock (time it on the host)" \
    "CPU backend: the marks' refusals say why"
"$T/marks_emu" >"$T/marks_emu.tap" 2>"$T/marks_emu.err"
emu_tap "emulated CUDA: " "$T/marks_emu.tap"
is "$(sed 's/\.cu:[0-9]*:/.cu:N:/' "$T/marks_emu.err")" "runtime/cuda/step.cu:N: error: pg_backend_mark outside a step
runtime/cuda/step.cu:N: error: pg_backend_mark inside a run of compute
runtime/cuda/step.cu:N: error: pg_backend_mark_times before the step's end waited for its work
runtime/cuda/step.cu:N: error: pg_backend_mark_times: 3 marks asked for, the step made 2" \
    "emulated CUDA: each misuse of the marks fails with a located message"

# ---- gpt_tiny on the emulated runtime ----------------------------------------------
# stages K: tests/models/gpt_tiny.pipe cut to K stages (1 or 4), built against the emulated runtime into $T/gK
stages() {
    s_d=$T/g$1
    mkdir -p "$s_d/bin" || return 1
    if [ "$1" = 1 ]; then sed '/# S[123]$/d' "$TOP/tests/models/gpt_tiny.pipe"; else cat "$TOP/tests/models/gpt_tiny.pipe"; fi \
        >"$s_d/model.pipe"
    "$PIPEGEN" gen "$s_d/model.pipe" -o "$s_d/gen" >"$s_d/gen.log" 2>&1 || { sed 's/^/# /' "$s_d/gen.log"; return 1; }
    for s_f in "$s_d"/gen/stage*.c; do
        # shellcheck disable=SC2086
        ${CC:-cc} -O1 -I"$TOP/runtime/core" -I"$s_d/gen" -o "$s_d/bin/$(basename "$s_f" .c)" "$s_f" \
            "$EMU/libpgrt_cuemu.a" $EMU_LIBS >"$s_d/cc.log" 2>&1 || { sed 's/^/# /' "$s_d/cc.log" | head; return 1; }
    done
}
stages 1
ok $? "gpt_tiny on 1 stage, built against the emulated CUDA runtime"
stages 4
ok $? "gpt_tiny on 4 stages, built against the emulated CUDA runtime"

# bubble_ok OUT WHAT: every stage's bubble line in OUT says device time, with 0 < compute <= wall
bubble_ok() {
    b_lines=$(grep 'bubble' "$1")
    like "$b_lines" '^\[stage [0-9]\] bubble [0-9.]+% \(compute [0-9.]+ s of [0-9.]+ s over steps 2\.\.[0-9]+; compute in device time\)$' \
        "$2: the bubble line says its compute is device time"
    b_bad=$(printf '%s\n' "$b_lines" | awk '{ for (i = 1; i <= NF; i++) if ($i == "(compute") { c = $(i + 1); w = $(i + 4) }
        if (!(c > 0 && c + 0 <= w + 0)) print }')
    is "$b_bad" "" "$2: 0 < compute <= wall on every stage"
}
# run DIR OUT [options]: the stage programs of DIR for --steps (STEPS, 4)
run() {
    r_dir=$1 r_out=$2
    shift 2
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$r_dir" -- --steps "${STEPS:-4}" --threads 1 --timeout 60 "$@" >"$r_out" 2>&1 ||
        { echo "# $r_dir failed (status $?):"; tail -15 "$r_out" | sed 's/^/# /'; return 1; }
}

run "$T/g1/bin" "$T/g1.out"
ok $? "1 stage, CUDA graphs: 4 steps"
bubble_ok "$T/g1.out" "1 stage, CUDA graphs"
run "$T/g1/bin" "$T/g1e.out" --no-graph
ok $? "1 stage, --no-graph: 4 steps"
bubble_ok "$T/g1e.out" "1 stage, --no-graph"

# ---- a 4-stage trace and profile in device time -------------------------------------
run "$T/g4/bin" "$T/g4.out" --trace-steps 3 --trace "$T/g4.json" --profile "$T/g4.prof.json"
ok $? "4 stages with --trace and --profile: 4 steps"
bubble_ok "$T/g4.out" "4 stages"
# nactions K DIR: stage K's training actions (its step table's length)
nactions() { sed -n 's/^.*\.nactions = \([0-9]*\), \.actions = step,$/\1/p' "$2/gen/stage$1.c"; }
acts="$(nactions 0 "$T/g4") $(nactions 1 "$T/g4") $(nactions 2 "$T/g4") $(nactions 3 "$T/g4")"
# shellcheck disable=SC2086
got=$("$PY" - "$T/g4.json" $acts <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
acts = [int(a) for a in sys.argv[2:]]
ev = [e for e in d["traceEvents"] if e["ph"] == "X"]
bad = []
if d["otherData"].get("device_time") != [1, 1, 1, 1]:
    bad.append("otherData device_time %s" % d["otherData"].get("device_time"))
busy = 0.0
for st in range(4):
    mine = [e for e in ev if e["pid"] == st]
    for s in sorted({e["args"]["step"] for e in mine}):
        top = [e for e in mine if e["args"]["step"] == s and e["cat"] == "step"]
        spans = sorted((e for e in mine if e["args"]["step"] == s and e["cat"] in ("data", "compute", "comm", "optimizer",
                                                                                   "step_end")), key=lambda e: e["ts"])
        if len(top) != 1 or len(spans) != acts[st] + 2:
            bad.append("stage %d step %d: %d step events, %d spans" % (st, s, len(top), len(spans)))
            continue
        t0, t1 = top[0]["ts"], top[0]["ts"] + top[0]["dur"]
        t = t0
        for a in spans:  # contiguous device spans inside the step's host span
            if abs(a["ts"] - t) > 2e-3 or a["dur"] < 0:
                bad.append("stage %d step %d: %s starts %.3f us after the span before it" % (st, s, a["name"], a["ts"] - t))
            t = a["ts"] + a["dur"]
            busy += a["dur"] if a["cat"] == "compute" else 0
        if abs(t - t1) > 2e-3:
            bad.append("stage %d step %d: the spans end %.3f us from the step's end" % (st, s, t - t1))
print("\n".join(bad) if bad else "ok %.0f us of F/B/W" % busy)
EOF
)
like "$got" '^ok [0-9]+ us of F/B/W$' "4 stages: the trace says its spans are device time (device_time [1, 1, 1, 1]); per stage and step contiguous, inside the step"
"$PIPEGEN" trace "$T/g4.json" "$T/g4/model.pipe" --balance "$T/g4.prof.json" >"$T/g4.trace.out" 2>&1
ok $? "pipegen trace reads the device-time trace with its profile"
like "$(cat "$T/g4.trace.out")" '^trace .*: model gpt_tiny, 4 stages, [0-9]+ micro-batches, steps 2\.\.4, spans in device time$' \
    "pipegen trace says the spans are device time"
like "$(cat "$T/g4.trace.out")" 'measured step [0-9.]+ m?s \(mean over 3 steps from step 2\), predicted [0-9.]+ m?s \(measured profile\)' \
    "pipegen trace predicts the step from the device-time profile"

# ---- timing adds no synchronisation -------------------------------------------------
# the host's waits for the device per step (steps 3 -> 5, so start-up is out): the
# same with --trace (a mark at every action) as without (marks around runs only)
per_step() { # per_step TAG [options]: "waits marks reads" per step
    p_tag=$1
    shift
    rm -f "$T/$p_tag.3" "$T/$p_tag.5"
    PG_EMU_COUNTS=$T/$p_tag.3 STEPS=3 run "$T/g1/bin" "$T/$p_tag.3.out" "$@" &&
        PG_EMU_COUNTS=$T/$p_tag.5 STEPS=5 run "$T/g1/bin" "$T/$p_tag.5.out" "$@" || return 1
    cat "$T/$p_tag.3" "$T/$p_tag.5" | awk 'NR == 1 { w = $4; m = $6; r = $8 } NR == 2 {
        printf "%d %d %d\n", ($4 - w) / 2, ($6 - m) / 2, ($8 - r) / 2 }'
}
plain=$(per_step plain)
traced=$(per_step traced --trace "$T/c.json")
n1=$(nactions 0 "$T/g1")
echo "# per step (host waits, timing marks, elapsed-time reads): without --trace $plain, with $traced; $n1 actions"
is "${traced%% *}" "${plain%% *}" "1 stage: as many host waits for the device per step with --trace as without (no synchronisation per mark)"
# the sums of squares of the VERDICT: one run of compute, read back once (not a wait per gradient)
np1=$(sed -n 's/^.*\.nparams = \([0-9]*\), \.params = stage_params,$/\1/p' "$T/g1/gen/stage0.c")
[ -n "$np1" ] && [ "${plain%% *}" -lt "$np1" ]
ok $? "1 stage: fewer host waits for the device per step (${plain%% *}) than gradients to sum ($np1): the sums are read back together"
losses() { sed -n 's/^.*step \([0-9]*\)\/[0-9]*  *loss \([-0-9.eEinfa+]*\).*$/\1 \2/p' "$1"; grep 'final loss' "$1"; }
[ -n "$(losses "$T/plain.5.out")" ] && [ "$(losses "$T/plain.5.out")" = "$(losses "$T/traced.5.out")" ]
ok $? "1 stage: the losses with --trace (a CUDA graph per action) are those without, bit for bit"
# shellcheck disable=SC2086
set -- $plain
p_marks=$2
# shellcheck disable=SC2086
set -- $traced
[ "$2" -gt "$n1" ] && [ "$2" -gt "$p_marks" ] && [ "$3" -lt "$2" ]
ok $? "1 stage, --trace: a timing mark per action at least ($2 per step for $n1 actions, $p_marks without), each read once per step"
done_testing

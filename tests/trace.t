#!/bin/sh
# tests/trace.t — the measured timeline: a stage program's --trace writes one
# Chrome-trace JSON for every stage (valid JSON, per stage and step the step,
# its batch loading, its actions and its end after them, nested in time and
# each starting where the one before ended, then the work between it and the
# next step: no time unaccounted for; every RECV ending after its SEND began);
# the work between steps (the log line, the stop exchange, the checkpoint)
# drawn so that no row of a measured step is white where its stage worked; with 2
# replicas, a row per process labelled stage and replica, and the reduction's
# spans in every step, read and drawn by `pipegen trace`; its
# --profile is accepted by `pipegen plan --balance`; `pipegen trace` draws the
# measured step as SVG and prints measured against predicted bubble; bad and
# truncated traces are refused with the file named.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
T=$(mktemp -d /tmp/pg-trace.XXXXXX)
trap 'rm -rf "$T"' EXIT
PY=${PYTHON:-/usr/bin/python3}

# the quickstart MLP on 2 stages (the second split dropped)
awk '/^[[:space:]]*split[[:space:]]*$/ { if (++seen > 1) next } { print }' "$TOP/examples/mlp.pipe" >"$T/mlp.pipe"
"$PIPEGEN" gen "$T/mlp.pipe" -o "$T/gen" >"$T/gen.out" 2>&1
ok $? "pipegen gen mlp on 2 stages"
build "$T/gen"
ok $? "the 2 stage programs compile"
OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$T/gen/bin" -- --steps 6 --threads 1 --trace-steps 4 \
    --trace "$T/run.json" --profile "$T/prof.json" >"$T/run.out" 2>&1
ok $? "a run with --trace and --profile succeeds"
like "$(cat "$T/run.out")" 'trace: 4 steps x 2 stages written to' "stage 0 reports the trace"

# actions per stage, from the generated step tables (not the forward-only one's "(step action N)" rows)
n0=$(grep '^    {\.kind = PG_[A-Z_]*, .*}, /\* [0-9]*:' "$T/gen/stage0.c" | grep -vc '(step action')
n1=$(grep '^    {\.kind = PG_[A-Z_]*, .*}, /\* [0-9]*:' "$T/gen/stage1.c" | grep -vc '(step action')
got=$("$PY" - "$T/run.json" "$n0" "$n1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
acts = [int(sys.argv[2]), int(sys.argv[3])]
ev = [e for e in d["traceEvents"] if e["ph"] == "X"]
bad = []
for st in (0, 1):
    mine = [e for e in ev if e["pid"] == st]
    steps = sorted({e["args"]["step"] for e in mine})
    if steps != [3, 4, 5, 6]:
        bad.append("stage %d steps %s" % (st, steps))
    # per step: the step, its batch loading, its actions, its end, the work
    # between it and the next step, and stage 1 (the loss stage) its log line
    want = len(steps) * (acts[st] + 4 + (st == 1))
    if len(mine) != want:
        bad.append("stage %d: %d events, want %d" % (st, len(mine), want))
    # nesting: the batch loading (and the gradients zeroed) starts the step,
    # each action starts where the one before ended, the step's end closes
    # it; the work between steps goes on to the next step's start
    for s in steps:
        top = [e for e in mine if e["args"]["step"] == s and e["cat"] == "step"]
        spans = sorted((e for e in mine if e["args"]["step"] == s and e["cat"] in ("data", "compute", "comm", "optimizer",
                                                                                   "step_end")), key=lambda e: e["ts"])
        acts_s = [e for e in spans if e["cat"] not in ("data", "step_end")]
        if len(top) != 1 or len(spans) != acts[st] + 2:
            bad.append("stage %d step %d: %d step events, %d spans" % (st, s, len(top), len(spans)))
            continue
        t0, t1 = top[0]["ts"], top[0]["ts"] + top[0]["dur"]
        if spans[0]["args"]["kind"] != "DATA" or spans[-1]["args"]["kind"] != "STEP_END":
            bad.append("stage %d step %d: not the batch loading first and the step's end last" % (st, s))
        t = t0
        for a in spans:
            if abs(a["ts"] - t) > 2e-3:
                bad.append("stage %d step %d: %s starts %.3f us after the span before it ended" % (st, s, a["name"], a["ts"] - t))
            t = a["ts"] + a["dur"]
        if abs(t - t1) > 2e-3:
            bad.append("stage %d step %d: the step's end is not the step's" % (st, s))
        if [a["args"]["action"] for a in acts_s] != list(range(acts[st])):
            bad.append("stage %d step %d: actions out of order" % (st, s))
        btw = [e for e in mine if e["args"]["step"] == s and e["cat"] == "between"]
        nxt = [e for e in mine if e["args"]["step"] == s + 1 and e["cat"] == "step"]
        whole = [e for e in btw if e["args"]["kind"] == "BETWEEN"]
        if len(whole) != 1 or abs(whole[0]["ts"] - t1) > 2e-3 or \
                (nxt and abs(whole[0]["ts"] + whole[0]["dur"] - nxt[0]["ts"]) > 2e-3):
            bad.append("stage %d step %d: the work between steps is not from its end to the next step" % (st, s))
        if sorted(e["args"]["kind"] for e in btw) != (["BETWEEN", "LOG"] if st == 1 else ["BETWEEN"]):
            bad.append("stage %d step %d: between steps %s" % (st, s, [e["name"] for e in btw]))
# the n-th RECV from a peer ends after the n-th SEND to it began (one clock)
pairs = 0
for s in (3, 4, 5, 6):
    for src, dst in ((0, 1), (1, 0)):
        sends = sorted((e for e in ev if e["pid"] == src and e["args"]["step"] == s and e["name"].startswith("SEND_")
                        and e["args"]["peer"] == dst), key=lambda e: e["ts"])
        recvs = sorted((e for e in ev if e["pid"] == dst and e["args"]["step"] == s and e["name"].startswith("RECV_")
                        and e["args"]["peer"] == src), key=lambda e: e["ts"])
        if len(sends) != len(recvs) or not sends:
            bad.append("step %d %d->%d: %d sends, %d recvs" % (s, src, dst, len(sends), len(recvs)))
        for a, b in zip(sends, recvs):
            pairs += 1
            if a["args"]["mb"] != b["args"]["mb"] or b["ts"] + b["dur"] < a["ts"]:
                bad.append("step %d: %s on %d ends before %s on %d begins" % (s, b["name"], dst, a["name"], src))
names = {e["name"] for e in ev}
for want in ("F0", "B0", "W0", "OPT_STEP"):
    if want not in names:
        bad.append("no event %s" % want)
if d["otherData"]["model"] != "mlp" or d["otherData"]["stages"] != 2 or d["otherData"]["device_time"] != [0, 0]:
    bad.append("otherData %s" % d["otherData"])  # the CPU's spans are host time
print("\n".join(bad) if bad else "ok %d pairs" % pairs)
EOF
)
like "$got" '^ok [0-9]+ pairs$' "the trace is valid JSON: steps x (actions + 2) events per stage, the batch loading first, nested, every RECV after its SEND"

# the profile: valid JSON, every layer, and accepted by --balance
"$PY" -c 'import json, sys; p = json.load(open(sys.argv[1])); assert [l["name"] for l in p["layers"]] == ["layer0", "relu0", "layer1", "relu1", "layer2", "relu2"]; assert all(l["fwd_s"] > 0 for l in p["layers"] if l["name"].startswith("layer"))' "$T/prof.json"
ok $? "the profile lists every layer with measured times"
"$PY" -c 'import json, sys; p = json.load(open(sys.argv[1])); c = p["stage_costs"]; m = p["messages"]; assert [s["stage"] for s in c] == [0, 1]; assert all(s["optimizer_s"] > 0 and s["step_start_s"] >= 0 for s in c); assert m["send_latency_s"] > 0 and "send_bytes_per_s" in m; assert all("recompute_s" in l for l in p["layers"] if l["name"].startswith("layer"))' "$T/prof.json"
ok $? "...each stage's own optimizer and step overhead times, the send cost and the rerun forward"
got=$("$PIPEGEN" plan "$T/mlp.pipe" --balance "$T/prof.json" 2>&1); rc=$?
ok $rc "pipegen plan --balance accepts the profile of a real run"
like "$got" 'predicted step \(1f1b, measured layer times, measured messages\): [0-9.]+ m?s' "...and predicts the step in seconds"
sed -e 's/^split$//' -e 's/checkpoint = except_last/checkpoint = except_last  stages = 2/' "$T/mlp.pipe" >"$T/auto.pipe"
got=$("$PIPEGEN" gen "$T/auto.pipe" --balance "$T/prof.json" -o "$T/auto" 2>&1); rc=$?
ok $rc "pipegen gen --balance splits stages = 2 by the measured profile"

# the profile's values and what it was measured on
got=$("$PIPEGEN" plan "$T/mlp.pipe" --balance "$T/prof.json" 2>&1 >/dev/null)
! printf '%s' "$got" | grep -q 'note: the profile was measured on'; ok $? "a profile of this very plan: no note"
got=$("$PIPEGEN" gen "$T/auto.pipe" --balance "$T/prof.json" -o "$T/auto" 2>&1 >/dev/null)
like "$got" "$T/prof\\.json: note: the profile was measured on plan hash [0-9a-f]{16}, this plan's is [0-9a-f]{16} \\(another split, schedule or batch\\)" \
    "a profile of another plan: a note names both plan hashes"
"$PY" -c 'import json, sys; p = json.load(open(sys.argv[1])); p["model"] = "gpt"; json.dump(p, open(sys.argv[2], "w"))' "$T/prof.json" "$T/other.json"
got=$("$PIPEGEN" plan "$T/mlp.pipe" --balance "$T/other.json" 2>&1 >/dev/null)
like "$got" "note: the profile was measured on model 'gpt', not 'mlp'" "a profile of another model: a note names both"
for v in 1e308 -0.5 1e400; do
    "$PY" -c 'import json, sys; p = json.load(open(sys.argv[1])); p["layers"][2]["fwd_s"] = "@"; open(sys.argv[2], "w").write(json.dumps(p, indent=1).replace("\"@\"", sys.argv[3]))' \
        "$T/prof.json" "$T/bad.json" "$v"
    line=$(grep -n '"fwd_s": '"$v" "$T/bad.json" | cut -d: -f1)
    got=$("$PIPEGEN" plan "$T/mlp.pipe" --balance "$T/bad.json" 2>&1); rc=$?
    is "$rc" 1 "a profile with fwd_s $v: refused (exit 1)"
    like "$got" "$T/bad\\.json:$line:[0-9]+: error: profile: (fwd_s = 1e\\+308 is absurd: more than 1e6 seconds per micro-batch|fwd_s must not be negative|a number too large for a double \\(1e400\\))" \
        "...at its line, saying why"
done
# a profile that lacks a layer: trace says so, not "give --balance PROFILE"
"$PY" -c 'import json, sys; p = json.load(open(sys.argv[1])); p["layers"] = [l for l in p["layers"] if l["name"] != "layer1"]; json.dump(p, open(sys.argv[2], "w"))' "$T/prof.json" "$T/part.json"
got=$("$PIPEGEN" trace "$T/run.json" "$T/mlp.pipe" --balance "$T/part.json" 2>&1); rc=$?
ok $rc "pipegen trace with a profile that lacks a layer still prints"
like "$got" "$T/part\\.json: note: the profile has no times for layer 'layer1': the predicted times are the cost model's \\(flops\\)" \
    "...a note names the layer it lacks"
like "$got" 'predicted [0-9.]+ Gflop \(cost model, flops: the profile lacks some layers. times \(see the note\)\)' \
    "...and the prediction says why it is in flops"
! printf '%s' "$got" | grep -q 'give --balance PROFILE'; ok $? "...without suggesting the profile it was given"

# pipegen trace: the measured timeline and measured against predicted
got=$("$PIPEGEN" trace "$T/run.json" "$T/mlp.pipe" --balance "$T/prof.json" --svg "$T/m.svg" 2>&1); rc=$?
ok $rc "pipegen trace RUN.json MODEL --balance PROFILE --svg succeeds"
like "$got" 'measured step [0-9.]+ m?s \(mean over 4 steps from step 3\), predicted [0-9.]+ m?s \(measured profile\): measured/predicted [0-9.]+' \
    "...prints measured against predicted step time"
like "$got" 'stage 1: bubble measured [0-9.]+%, predicted [0-9.]+%' "...and measured against predicted bubble per stage"
like "$got" '^trace [^ ]*: model mlp, 2 stages, [0-9]+ micro-batch(es)?, steps 3\.\.6$' "...after a first line without device time (the CPU's spans are host time)"
is "$(printf '%s\n' "$got" | tail -n 1)" "wrote $T/m.svg: the measured timeline of step 6 (SVG)" "...and says in one line what it wrote"
like "$(sed -n 3p "$T/m.svg")" 'mlp: 1f1b, 2 stages, 8 micro-batches - bubble [0-9.]+%, step [0-9.]+ ms \(measured: step 6 of the trace\)' \
    "the measured timeline is drawn like plan --svg"
is "$(grep -c '<title>F mb' "$T/m.svg")/$(grep -c '<title>B mb' "$T/m.svg")/$(grep -c '<title>W mb' "$T/m.svg")" "16/16/16" \
    "...with every F, B and W pass of both stages"
is "$(grep -c '<title>SEND_ACT mb' "$T/m.svg")/$(grep -c '<title>RECV_ACT mb' "$T/m.svg")/$(grep -c '<title>SEND_GRAD mb' "$T/m.svg")/$(grep -c '<title>RECV_GRAD mb' "$T/m.svg")/$(grep -c '<title>OPT_STEP</title>' "$T/m.svg")" \
    "8/8/8/8/2" "...and every send, receive and optimizer step, not white idle"
like "$(cat "$T/m.svg")" '>send</text>.*' "...the legend names sends"
like "$(tr -d '\n' <"$T/m.svg")" '>receive \(and its wait\)</text>.*>optimizer</text>' "...receives and the optimizer"
like "$(cat "$T/m.svg")" '>time</text>' "...on an axis of time"
is "$(grep -c '<title>batch loading, zeroed gradients</title>' "$T/m.svg")" 2 \
    "...and each stage's step start: its batch loaded, its gradients zeroed"
# what step 5 ran inside step 6's span (from its earliest start on any stage), per the trace itself
before=$("$PY" - "$T/run.json" <<'EOF'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
lo = min(e["ts"] for e in ev if e["args"]["step"] == 6)
print(sum(1 for e in ev if e["args"]["step"] == 5 and e["cat"] not in ("step", "dp") and e["ts"] + e["dur"] > lo))
EOF
)
is "$(grep -c '<title>the step before: ' "$T/m.svg")" "$before" \
    "...what the step before ran inside its span drawn too (a stage may start its step while another ends its own)"
is "$(grep -c '<title>the step before: ' "$T/m.svg")" "$(grep -c 'fill-opacity="0.35"><title>the step before: ' "$T/m.svg")" \
    "...faded"
is "$(tr -d '\n' <"$T/m.svg" | grep -c 'fill-opacity="0.35"/><text[^>]*>the steps before and after (faded)</text>')" \
    "$([ "$before" -gt 0 ] && echo 1 || echo 0)" "...and named in the legend where there are such"
is "$(echo "$got" | grep -A2 '^after the last F/B/W of a step (the same steps; % of the measured step):$' | grep -c '^stage [01]: [0-9.]* [mu]\?s ([0-9.]*%): receives and their waits [0-9.]* [mu]\?s ([0-9.]*%), its own work [0-9.]* [mu]\?s ([0-9.]*%)$')" 2 \
    "pipegen trace says what follows each stage's last F/B/W: receives with their waits, its own work"

# measured against simulated, action by action: the parts of each stage's step
# add up to it, measured and simulated; with the run's own profile the F/B/W
# sums are the profile's (its per-chunk means times the passes)
cmp=$(printf '%s\n' "$got" | grep -A2 '^measured (simulated) per step, action by action')
is "$(printf '%s\n' "$cmp" | grep -c '^stage [01]: F .*, sends .*, receives: waiting for the peer.s send .*, after it .*, the step.s end work .*, before and after the actions .*; its step ')" 2 \
    "pipegen trace sets each stage's actions beside the simulation's, by what they are"
is "$(printf '%s\n' "$cmp" | "$PY" -c '
import re, sys
P = r"([-0-9.e+]+) (s|ms|us) \(([-0-9.e+]+) (s|ms|us)\)"
def ms(v, u): return float(v) * {"s": 1e3, "ms": 1.0, "us": 1e-3}[u]
bad = []
for line in sys.stdin:
    if not line.startswith("stage "): continue
    parts, step = line.split("; its step ")
    pairs = re.findall(" " + P, parts)
    m = [ms(a, b) for a, b, _, _ in pairs]; p = [ms(c, d) for _, _, c, d in pairs]
    g = re.match(P, step).groups(); sm, sp = ms(g[0], g[1]), ms(g[2], g[3])
    if len(pairs) != 8: bad.append("%d parts" % len(pairs))
    if abs(sum(m) - sm) > 0.003 * sm: bad.append("measured parts %.3f, step %.3f" % (sum(m), sm))
    if abs(sum(p) - sp) > 0.003 * sp: bad.append("simulated parts %.3f, step %.3f" % (sum(p), sp))
    for k in range(3):
        if abs(m[k] - p[k]) > 0.002 * m[k] + 1e-6: bad.append("F/B/W %d: %.4f vs %.4f" % (k, m[k], p[k]))
print(" ".join(bad) or "ok")')" ok \
    "...the parts add up to the stage's step on both sides, and F, B, W match the run's own profile"
like "$got" 'replayed \(the simulation with each traced step.s own measured F/B/W, sends and step.s end work; transit and receives as predicted\): [0-9.]+ m?s, measured/replayed [0-9.]+; with each action.s mean over the steps instead: [0-9.]+ m?s, replayed/that [0-9.]+' \
    "...and replays each traced step with its own measured times, then with their means"
# every traced step a copy of one: no variation between steps, so the replay
# of the means is the replay of each step
"$PY" - "$T/run.json" "$T/same.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
lo = min(e["ts"] for e in x if e["args"]["step"] == 4)
hi = max(e["ts"] + e["dur"] for e in x if e["args"]["step"] == 4)
out = [e for e in ev if e["ph"] != "X"]
for s in (3, 4, 5, 6):
    for e in x:
        if e["args"]["step"] == 4:
            c = json.loads(json.dumps(e))
            c["args"]["step"] = s
            c["ts"] = e["ts"] + (s - 4) * (hi - lo + 1000.0)
            out.append(c)
d["traceEvents"] = out
json.dump(d, open(sys.argv[2], "w"))
EOF
like "$("$PIPEGEN" trace "$T/same.json" "$T/mlp.pipe" --balance "$T/prof.json" 2>&1)" 'replayed/that 1\.000' \
    "...steps that do not vary: the means replay to the same step"
# a trace of another schedule, and one without the actions' indices: said, not compared
sed 's/schedule = 1f1b/schedule = zb1/' "$T/mlp.pipe" >"$T/mlpzb.pipe"
got=$("$PIPEGEN" trace "$T/run.json" "$T/mlpzb.pipe" --balance "$T/prof.json" 2>&1); rc=$?
ok $rc "pipegen trace of a 1f1b run with a zb1 model still prints"
like "$got" "measured against simulated: not shown: stage [01].s action [0-9]+ is [A-Z_]+ in the trace but [A-Z_]+ in the model.s schedule \\(a trace of another schedule\\?\\)" \
    "...and says why it does not compare the actions"
"$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
for e in d["traceEvents"]: e.get("args", {}).pop("action", None)
json.dump(d, open(sys.argv[2], "w"))' "$T/run.json" "$T/noaction.json"
like "$("$PIPEGEN" trace "$T/noaction.json" "$T/mlp.pipe" --balance "$T/prof.json" 2>&1)" \
    'measured against simulated: not shown: step 3 of stage 0 has no event of action 0 \(a trace of another schedule, or of a runtime that did not write args.action\)' \
    "...nor for a trace whose events do not say their action"
# the profile's per-stage send cost: written by the run, and used for that stage's sends
is "$("$PY" -c 'import json, sys; print(sum(1 for s in json.load(open(sys.argv[1]))["stage_costs"] if s.get("send_s", -1) >= 0))' "$T/prof.json")" 2 \
    "the profile gives each stage's mean send cost (send_s)"
"$PY" -c 'import json, sys; p = json.load(open(sys.argv[1])); p["stage_costs"][0]["send_s"] = 0.5; json.dump(p, open(sys.argv[2], "w"))' "$T/prof.json" "$T/slowsend.json"
like "$("$PIPEGEN" plan "$T/mlp.pipe" --balance "$T/slowsend.json" 2>&1)" 'predicted step [^:]*: ([4-9]\.[0-9]*|[1-9][0-9]+\.?[0-9]*) s' \
    "...a stage whose 8 sends cost 0.5 s each is predicted a step of 4 s or more"
"$PY" -c 'import json, sys; p = json.load(open(sys.argv[1])); p["stage_costs"][1]["send_s"] = "@"; open(sys.argv[2], "w").write(json.dumps(p, indent=1).replace("\"@\"", "-1"))' "$T/prof.json" "$T/badsend.json"
line=$(grep -n '"send_s": -1' "$T/badsend.json" | cut -d: -f1)
got=$("$PIPEGEN" plan "$T/mlp.pipe" --balance "$T/badsend.json" 2>&1); rc=$?
is "$rc" 1 "a negative send_s is refused"
like "$got" "$T/badsend\\.json:$line:[0-9]+: error: profile: send_s must not be negative" "...at its line"

# the work between steps (the log line, the evaluation after the last step,
# --save-on-exit's stop exchange, a checkpoint every step): recorded after
# each step and drawn, so that no stage's row of a step in the middle of the
# trace is white anywhere
PIPEDATA=$TOP/build-san/pipedata
[ -x "$PIPEDATA" ] || PIPEDATA=$TOP/build/pipedata
"$PY" - "$T" <<'EOF'
import sys, numpy as np
rng = np.random.default_rng(3)
np.save(sys.argv[1] + "/val_x.npy", rng.normal(size=(24, 512)).astype(np.float32))
np.save(sys.argv[1] + "/val_y.npy", rng.normal(size=(24, 256)).astype(np.float32))
EOF
"$PIPEDATA" npy "$T/val_x.npy" -o "$T/val_x.pgd" >/dev/null && "$PIPEDATA" npy "$T/val_y.npy" -o "$T/val_y.pgd" >/dev/null &&
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$T/gen/bin" -- --steps 6 --threads 1 --trace-steps 4 --trace "$T/ck.json" \
        --checkpoint-dir "$T/ck" --save-every 1 --save-on-exit --eval-data "$T/val_x.pgd" --eval-targets "$T/val_y.pgd" \
        >"$T/ck.out" 2>&1
ok $? "a run with --trace, a checkpoint after every step, --save-on-exit and an evaluation succeeds"
got=$("$PY" - "$T/ck.json" <<'EOF'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
bad = []
for st in (0, 1):
    for s in (3, 4, 5, 6):
        mine = [e for e in ev if e["pid"] == st and e["args"]["step"] == s and e["cat"] == "between"]
        whole = [e for e in mine if e["args"]["kind"] == "BETWEEN"]
        parts = sorted((e for e in mine if e["args"]["kind"] != "BETWEEN"), key=lambda e: e["ts"])
        want = (["LOG"] if st == 1 else []) + (["EVAL"] if s == 6 else []) + ["STOP", "CHECKPOINT"]
        if len(whole) != 1 or [e["args"]["kind"] for e in parts] != want:
            bad.append("stage %d step %d: %s" % (st, s, [e["name"] for e in mine]))
            continue
        w = whole[0]
        for e in parts:
            if e["ts"] < w["ts"] - 2e-3 or e["ts"] + e["dur"] > w["ts"] + w["dur"] + 2e-3 or e["dur"] <= 0:
                bad.append("stage %d step %d: %s not inside the work between steps" % (st, s, e["name"]))
print("\n".join(bad) if bad else "ok")
EOF
)
is "$got" ok "...each stage's work after each step holds its stop exchange and checkpoint (the log line on the loss stage, the evaluation after the last step), in order"
got=$("$PIPEGEN" trace "$T/ck.json" "$T/mlp.pipe" --step 5 --svg "$T/ck.svg" 2>&1); rc=$?
ok $rc "pipegen trace draws a step in the middle of that trace"
is "$(echo "$got" | grep -c '^stage [01]: F .*, step end [0-9.e+-]* [mu]\?s, outside actions [0-9.e+-]* [mu]\?s, between steps [0-9.]* [mu]\?s (of which log line [0-9.]* [mu]\?s, evaluation [0-9.]* [mu]\?s, stop exchange [0-9.]* [mu]\?s, checkpoint [0-9.]* [mu]\?s)$')" 2 \
    "...says per stage how long the work between steps took, and of it the log line, stop exchange and checkpoint"
white=$("$PY" - "$T/ck.svg" <<'EOF'
import re, sys
# each row's plot: the x ranges no box covers (px; not the 0.01 px that the
# drawing's rounding to 2 decimals leaves between boxes)
svg = open(sys.argv[1]).read()
rows = re.findall(r'<rect x="(\d+)" y="(\d+)" width="(\d+)" height="(\d+)" fill="#ffffff" stroke="#bbbbbb" stroke-width="1"/>', svg)
boxes = re.findall(r'<rect x="([0-9.]+)" y="(\d+)" width="([0-9.]+)" height="(\d+)" [^>]*><title>[^<]*</title>', svg)
out = []
for x0, y0, w, h in rows:
    x0, y0, w, h = float(x0), int(y0), float(w), int(h)
    t, white = x0, 0.0
    for bx, by, bw, bh in sorted((b for b in boxes if y0 <= int(b[1]) < y0 + h), key=lambda b: float(b[0])):
        bx, bw = float(bx), float(bw)
        white += bx - t if bx - t > 0.05 else 0.0
        t = max(t, bx + bw)
    white += x0 + w - t if x0 + w - t > 0.05 else 0.0
    out.append("%.1f" % white)
print(" ".join(out))
EOF
)
is "$white" "0.0 0.0" "...with no white on either row: every interval of both stages drawn as what it was"
# which parts fall inside the step's span depends on timing: each drawn is named in the legend
named=ok
for part in "between steps:between steps" "log line:log line" "evaluation:evaluation" \
        "stop exchange:stop exchange (--save-on-exit)" "checkpoint:checkpoint"; do
    if grep -q "<title>\(the step [a-z]*: \)\?${part%%:*}</title>" "$T/ck.svg" &&
        ! grep -qF ">${part#*:}</text>" "$T/ck.svg"; then
        named="${part%%:*} drawn but not in the legend"
    fi
done
grep -q '<title>\(the step [a-z]*: \)\?between steps</title>' "$T/ck.svg" || named="no work between steps drawn"
is "$named" ok "...the work between steps and each of its parts drawn named in the legend"

# the tiny GPT on 2 stages under zb1: its tie and grad-norm exchanges in the measured picture
e2e_gen "$T/gpt" gpt_tiny '/# S[13]$/d' zb1 except_last >/dev/null 2>&1 && build "$T/gpt/gen" &&
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$T/gpt/gen/bin" -- --steps 3 --threads 1 --trace "$T/gpt.json" \
        >"$T/gpt.out" 2>&1 && "$PIPEGEN" trace "$T/gpt.json" --svg "$T/gpt.svg" >/dev/null 2>&1
ok $? "the tiny GPT (tie replicate, grad_clip) runs traced on 2 stages and its step is drawn"
is "$(grep -c '<title>TIE_GRAD_SEND</title>' "$T/gpt.svg")/$(grep -c '<title>TIE_GRAD_RECV</title>' "$T/gpt.svg")/$(grep -c '<title>TIE_SUM_SEND</title>' "$T/gpt.svg")/$(grep -c '<title>TIE_SUM_RECV</title>' "$T/gpt.svg")/$(grep -c '<title>VERDICT</title>' "$T/gpt.svg")/$(grep -c '<title>GRAD_NORM</title>' "$T/gpt.svg")" "1/1/1/1/2/2" \
    "...with the step's end: the tie gradient out and its sum back, each stage's verdict and clip"
like "$(tr -d '\n' <"$T/gpt.svg")" '>tie gradient exchange</text>.*>verdict \(sums of squares, exchange\)</text>.*>grad-norm clip</text>' "...named in the legend"
got=$("$PIPEGEN" trace "$T/run.json" 2>&1); rc=$?
ok $rc "pipegen trace without a model prints the measured side"
like "$got" 'stage 0: bubble measured [0-9.]+%' "...per stage"

# pp x dp: 2 stages x 2 replicas traced; every process its own row, labelled,
# with the reduction's spans in every step, nested in the action that ran it
OPENBLAS_NUM_THREADS=1 "$PIPERUN" --dp 2 "$T/gen/bin" -- --steps 5 --threads 1 --trace-steps 3 \
    --trace "$T/dp.json" >"$T/dp.out" 2>&1
ok $? "2 stages x 2 replicas run with --trace"
like "$(cat "$T/dp.out")" 'trace: 3 steps x 2 stages x 2 replicas written to' "rank 0 reports the trace of every process"
got=$("$PY" - "$T/dp.json" "$n0" "$n1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
acts = [int(sys.argv[2]), int(sys.argv[3])]
ev = d["traceEvents"]
bad = []
names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
if names != {0: "stage 0 replica 0", 1: "stage 1 replica 0", 2: "stage 0 replica 1", 3: "stage 1 replica 1"}:
    bad.append("rows %s" % names)
if d["otherData"]["stages"] != 2 or d["otherData"]["replicas"] != 2:
    bad.append("otherData %s" % d["otherData"])
parts = ["dp wait", "dp reduce-scatter", "dp sum", "dp all-gather"]
x = [e for e in ev if e["ph"] == "X"]
for pid in range(4):
    mine = [e for e in x if e["pid"] == pid]
    steps = sorted({e["args"]["step"] for e in mine})
    if steps != [3, 4, 5]:
        bad.append("pid %d steps %s" % (pid, steps))
    # the step, its batch loading, actions, end, the work after it, the
    # reduction's 5 spans; replica 0's loss stage also its log line
    want = len(steps) * (acts[pid % 2] + 4 + 5 + (pid == 1))
    if len(mine) != want:
        bad.append("pid %d: %d events, want %d" % (pid, len(mine), want))
    for s in steps:
        dp = [e for e in mine if e["args"]["step"] == s and e["cat"] == "dp"]
        red = [e for e in dp if e["name"] == "dp reduce"]
        if len(red) != 1:
            bad.append("pid %d step %d: %d dp reduce spans" % (pid, s, len(red)))
            continue
        r = red[0]
        # inside the action that ran it (the stage's VERDICT)
        host = [e for e in mine if e["args"]["step"] == s and e["name"] == "VERDICT"
                and e["ts"] <= r["ts"] + 1e-3 and r["ts"] + r["dur"] <= e["ts"] + e["dur"] + 1e-3]
        if len(host) != 1:
            bad.append("pid %d step %d: dp reduce not inside the VERDICT" % (pid, s))
        got = sorted((e for e in dp if e["name"] != "dp reduce"), key=lambda e: e["ts"])
        if [e["name"] for e in got] != parts:
            bad.append("pid %d step %d: parts %s" % (pid, s, [e["name"] for e in got]))
        t = r["ts"]
        for e in got:
            if abs(e["ts"] - t) > 2e-3 or e["ts"] + e["dur"] > r["ts"] + r["dur"] + 1e-3:
                bad.append("pid %d step %d: %s not in sequence inside dp reduce" % (pid, s, e["name"]))
            t = e["ts"] + e["dur"]
print("\n".join(bad) if bad else "ok")
EOF
)
is "$got" ok "the pp x dp trace: 4 rows labelled stage and replica, each step's actions, dp reduce inside the VERDICT with its wait, reduce-scatter, sum and all-gather in order"
got=$("$PIPEGEN" trace "$T/dp.json" "$T/mlp.pipe" --svg "$T/dp.svg" 2>&1); rc=$?
ok $rc "pipegen trace reads the pp x dp trace with its model"
like "$got" 'model mlp, 2 stages x 2 replicas, 8 micro-batches, steps 3\.\.5' "... 2 stages x 2 replicas"
is "$(echo "$got" | grep -c '^stage [01] replica [01]: bubble measured [0-9.]*%, predicted [0-9.]*%$')" 4 "... a bubble line per process"
is "$(echo "$got" | grep -c '^stage [01] replica [01]: F [0-9.]* [mu]\?s, .* dp reduce [0-9.]* [mu]\?s (of which waiting for the replicas [0-9.]* [mu]\?s), batch and zeroing [0-9.]* [mu]\?s, step end [0-9.e+-]* [mu]\?s, outside actions [0-9.e+-]* [mu]\?s, between steps')" 4 \
    "... and where each process's time goes, the reduction and its wait included"
is "$(grep -o '>stage [01] replica [01]</text>' "$T/dp.svg" | tr -d '\n')" \
    '>stage 0 replica 0</text>>stage 1 replica 0</text>>stage 0 replica 1</text>>stage 1 replica 1</text>' \
    "the drawn step has a row per process, labelled"
is "$(grep -c '<title>dp reduce</title>' "$T/dp.svg")" 4 "... a dp reduce box on each"
like "$(cat "$T/dp.svg")" '>data-parallel reduction</text>' "... named in the legend"
like "$(sed -n 3p "$T/dp.svg")" 'mlp: 1f1b, 2 stages x 2 replicas, 8 micro-batches' "... and the title says 2 stages x 2 replicas"
like "$("$PIPEGEN" trace "$T/dp.json" "$T/mlp.pipe" --balance "$T/prof.json" 2>&1)" \
    'measured against simulated: not shown for a pp x dp trace \(the simulation is of one replica\)' \
    "... whose actions are not set beside one replica's simulation, with a line saying so"

# bad input
head -c 700 "$T/run.json" >"$T/cut.json"
got=$("$PIPEGEN" trace "$T/cut.json" 2>&1); rc=$?
is "$rc" 1 "a truncated trace is refused"
like "$got" 'cut.json:[0-9]+:[0-9]+: error: trace: (expected .*(the end of the file \(truncated\?\)|found)|a string without its closing `"` before the end of the file \(truncated\?\))' \
    "...naming the file and place (the cut falls between values or inside a string)"
printf '{"traceEvents": [{"ph": "X", "pid": 0}]}\n' >"$T/bad.json"
got=$("$PIPEGEN" trace "$T/bad.json" 2>&1); rc=$?
is "$rc" 1 "an event without times is refused"
like "$got" 'bad.json: error: trace: event 0 of traceEvents lacks' "...and says what it lacks"
printf '{"layers": []}\n' >"$T/nottrace.json"
got=$("$PIPEGEN" trace "$T/nottrace.json" 2>&1); rc=$?
is "$rc" 1 "a file that is not a trace is refused"
like "$got" 'nottrace.json: error: trace: no "traceEvents" list' "...and says so"
got=$("$PIPEGEN" trace "$T/missing.json" 2>&1); rc=$?
is "$rc" 1 "a missing trace is refused"
got=$("$PIPEGEN" trace 2>&1); rc=$?
is "$rc" 2 "pipegen trace without a file is a usage error"
got=$("$T/gen/bin/stage0" --trace-steps 0 2>&1); rc=$?
is "$rc" 2 "--trace-steps 0 is a usage error"
done_testing

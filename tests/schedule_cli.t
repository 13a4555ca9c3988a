#!/bin/sh
# tests/schedule_cli.t — `pipegen schedule`: the readable listing of
# examples/mlp.pipe (golden), the CSV round trip through `schedule =
# file(...)`, and a hanging hand-written CSV rejected with its cycle named;
# zb1's listing and predicted timeline (SVG, golden, byte-stable); `pipegen
# plan`'s prediction; `stages = N` balanced by the cost model and by a
# measured profile (--balance).
. "$(dirname "$0")/lib.sh"
cd "$TOP" || exit 1
G=tests/golden/schedule
T=${TMPDIR:-/tmp}/pg-schedule-cli.$$
mkdir -p "$T" || exit 1
trap 'rm -rf "$T"' EXIT

got=$("$PIPEGEN" schedule examples/mlp.pipe 2>&1); rc=$?
ok $rc "pipegen schedule examples/mlp.pipe succeeds"
is "$got" "$(cat $G/mlp.txt)" "mlp listing matches $G/mlp.txt"

"$PIPEGEN" schedule examples/mlp.pipe --csv >"$T/mlp.csv" 2>&1
ok $? "pipegen schedule --csv succeeds"
is "$(head -1 "$T/mlp.csv")" "stage,action,mb,chunk,peer,skip,param" "CSV starts with its header"
is "$(grep -c ',OPT_STEP,' "$T/mlp.csv")" "3" "one OPT_STEP per stage"

# the written CSV drives the same model and gives the same schedule back
sed "s|schedule = 1f1b |schedule = file(\"mlp.csv\")|" examples/mlp.pipe >"$T/mlp.pipe"
like "$(grep 'schedule =' "$T/mlp.pipe")" 'file\("mlp.csv"\)' "the copy reads its schedule from the CSV"
"$PIPEGEN" schedule "$T/mlp.pipe" --csv >"$T/again.csv" 2>"$T/err"
ok $? "a schedule read from CSV verifies ($(head -1 "$T/err"))"
is "$(cat "$T/again.csv")" "$(cat "$T/mlp.csv")" "CSV round trip is exact"

# stage 0 waits for a gradient before sending the activation
awk -F, 'NR == 1 || $1 != 0 { print; next }
         $2 == "SEND_ACT" { held = held $0 "\n"; next }
         $2 == "OPT_STEP" { printf "%s", held } { print }' "$T/mlp.csv" >"$T/hang.csv"
sed "s|schedule = 1f1b |schedule = file(\"hang.csv\")|" examples/mlp.pipe >"$T/hang.pipe"
got=$("$PIPEGEN" schedule "$T/hang.pipe" 2>&1); rc=$?
is "$rc" "1" "a hanging schedule is refused"
like "$got" "hang.csv:[0-9]+:1: error: the schedule deadlocks: stage 0 waits at action [0-9]+ RECV_GRAD\(mb 0, chunk 0\) from stage 1, stage 1 waits at action [0-9]+ RECV_ACT\(mb [0-9]+, chunk 1\) from stage 0: a cycle" \
    "the deadlock is named with its cycle"

got=$("$PIPEGEN" schedule 2>&1); rc=$?
is "$rc" "2" "no file is a usage error"

# --- zb1 and the predicted timeline -------------------------------------------
got=$("$PIPEGEN" schedule $G/zb1_small.pipe --svg "$T/zb1.svg" 2>&1); rc=$?
ok $rc "pipegen schedule zb1_small.pipe --svg succeeds"
is "$got" "$(cat $G/zb1_small.txt)" "zb1 listing matches $G/zb1_small.txt"
cmp -s "$T/zb1.svg" $G/zb1_small.svg
ok $? "the zb1 timeline matches $G/zb1_small.svg byte for byte"
"$PIPEGEN" schedule $G/zb1_small.pipe --svg "$T/again.svg" >/dev/null 2>&1
cmp -s "$T/zb1.svg" "$T/again.svg"
ok $? "the timeline is byte-stable"
svg=$(cat "$T/zb1.svg")
like "$svg" '<svg xmlns="http://www.w3.org/2000/svg"' "the timeline is an SVG document"
is "$(grep -c '<title>F mb' "$T/zb1.svg")/$(grep -c '<title>B mb' "$T/zb1.svg")/$(grep -c '<title>W mb' "$T/zb1.svg")" \
   "18/18/18" "one box per F, B and W pass (3 stages x 6 micro-batches)"
like "$svg" 'bubble [0-9.]+%' "the title states the bubble"
like "$svg" 'weight gradient' "the legend names W"

got=$("$PIPEGEN" plan examples/mlp.pipe --svg "$T/mlp.svg" 2>&1); rc=$?
ok $rc "pipegen plan --svg succeeds"
like "$got" 'predicted step \(1f1b, model units: estimated flops, messages free\): [0-9.]+ [kMG]?flop, bubble [0-9.]+%' \
     "plan predicts the step time, saying its unit"
like "$got" 'stage 1: 2 layers \(layer1 \.\. relu1\), compute [0-9.]+ [kMG]?flop per step, busy [0-9.]+%, bubble [0-9.]+%' \
     "plan shows each stage's layers, busy share and bubble"
like "$(head -c 200 "$T/mlp.svg")" '<svg ' "plan writes the timeline"
got=$("$PIPEGEN" plan examples/mlp.pipe --svg /nonexistent/dir/x.svg 2>&1); rc=$?
is "$rc" "1" "an unwritable --svg path fails"
like "$got" '/nonexistent/dir/x.svg: error: cannot write the timeline' "...and says so"

# --- balancing ----------------------------------------------------------------------
got=$("$PIPEGEN" plan $G/heavy.pipe 2>&1); rc=$?
ok $rc "pipegen plan heavy.pipe succeeds"
like "$got" 'stage 1: 1 layer \(big\),' "stages = 3 gives the heavy layer a stage of its own"
like "$got" 'stage 0: 5 layers \(l0 \.\. up\),' "...the light layers before it share stage 0"
got=$("$PIPEGEN" plan $G/heavy.pipe --balance $G/heavy_profile.json 2>&1); rc=$?
ok $rc "pipegen plan --balance PROFILE succeeds"
like "$got" 'stage 2: 1 layer \(l3\),' "measured times move the split: the slowest measured layer is alone"
like "$got" 'predicted step \(1f1b, measured layer times, modelled messages\): [0-9.]+ m?s,' "...and the step is in seconds"
"$PIPEGEN" gen $G/heavy.pipe --balance $G/heavy_profile.json -o "$T/heavy" >/dev/null 2>&1
ok $? "pipegen gen --balance PROFILE succeeds"
like "$(cat "$T/heavy/stage2.c" 2>/dev/null)" 'l3' "the generated last stage holds l3"
printf '{"layers": [\n {"name": "l0", "fwd_s": 1e-4, "bwd_s": x}]}\n' >"$T/bad.json"
got=$("$PIPEGEN" plan $G/heavy.pipe --balance "$T/bad.json" 2>&1); rc=$?
is "$rc" "1" "a malformed profile is refused"
like "$got" 'bad.json:2:41: error: profile: expected a number, found `x`' "...at its line and column"
printf '{"layers": [{"name": "l0", "fwd_s": 1e-4, "bwd_s": 2e-4}]}\n' >"$T/short.json"
got=$("$PIPEGEN" gen $G/heavy.pipe --balance "$T/short.json" -o "$T/short" 2>&1); rc=$?
is "$rc" "1" "a profile missing layers is refused"
like "$got" "heavy.pipe:7:24: error: layer 'relu0' is not in the profile" "...naming the first missing layer"
done_testing

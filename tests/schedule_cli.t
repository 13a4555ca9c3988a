#!/bin/sh
# tests/schedule_cli.t — `pipegen schedule`: the readable listing of
# examples/mlp.pipe (golden), the CSV round trip through `schedule =
# file(...)`, and a hanging hand-written CSV rejected with its cycle named;
# zb1's and zbv's listings (placement table) and predicted timelines (SVG,
# golden, byte-stable; chunks told apart, the axis in flops, the width growing
# with a long title); zbv's CSV round trip under `placement = v`; `pipegen
# plan`'s prediction; `stages = N` balanced by the cost model and by a measured
# profile (--balance).
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
is "$(printf '%s\n' "$got" | sed '$d')" "$(cat $G/zb1_small.txt)" "zb1 listing matches $G/zb1_small.txt"
is "$(printf '%s\n' "$got" | tail -n 1)" "wrote $T/zb1.svg: the predicted timeline of one step (SVG)" "...then one line says what it wrote"
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
like "$svg" '>estimated flops \(the cost model.s units, not time\)</text>' "an axis in flops says so"
like "$svg" '<svg [^>]* width="1064" ' "the usual width when the text fits"
if printf '%s' "$svg" | grep -q 'c[0-9]*</text>'; then st=1; else st=0; fi
ok $st "one chunk per stage: labels are micro-batches only"

# zbv: the V placement in the listing, chunks in the picture
got=$("$PIPEGEN" schedule $G/zbv_small.pipe --svg "$T/zbv.svg" 2>&1); rc=$?
ok $rc "pipegen schedule zbv_small.pipe --svg succeeds"
is "$(printf '%s\n' "$got" | sed '$d')" "$(cat $G/zbv_small.txt)" "zbv listing matches $G/zbv_small.txt"
like "$got" "placement v: stage 0 runs chunks 0, 3; stage 1 runs chunks 1, 2" "...with its placement table"
cmp -s "$T/zbv.svg" $G/zbv_small.svg
ok $? "the zbv timeline matches $G/zbv_small.svg byte for byte"
svg=$(cat "$T/zbv.svg")
like "$svg" '>[0-9]+·c3</text>' "boxes wide enough say micro-batch and chunk (3·c3)"
like "$svg" 'fill="#4f81bd"[^>]*><title>F mb 0 chunk 0</title>' "a stage's first chunk in the full colour"
like "$svg" 'fill="#[0-9a-f]{6}"[^>]*><title>F mb 0 chunk 3</title>' "...its later chunk in a shade of it"
if printf '%s' "$svg" | grep -Eq 'fill="#4f81bd"[^>]*><title>F mb 0 chunk 3'; then st=1; else st=0; fi
ok $st "...not the same colour"
like "$svg" 'labels: micro-batch·chunk; a stage.s first chunk darkest' "the legend explains labels and shades"
# a label is the micro-batch and chunk, else the micro-batch, by the box's width: boxes of one
# width (the same kind and chunk cost) all get the same form
awk -F'"' '/<rect x=.*<title>/ { w = $6 } /font-size="11" fill=.* text-anchor="middle"/ { print w, ($0 ~ /·c/ ? "long" : "short") }' \
    "$T/zbv.svg" | sort -u | awk '{ n[$1]++ } END { for (w in n) if (n[w] > 1) bad++; exit bad > 0 }'
ok $? "labels degrade consistently: one form per box width"
sed -e 's/^model zbv_small$/model a_model_with_a_rather_long_name_that_does_not_fit_the_usual_width_of_the_picture/' \
    $G/zbv_small.pipe >"$T/long.pipe"
"$PIPEGEN" schedule "$T/long.pipe" --svg "$T/long.svg" >/dev/null 2>&1
w=$(sed -n 's/^<svg [^>]* width="\([0-9]*\)".*/\1/p' "$T/long.svg")
[ "${w:-0}" -gt 1064 ]
ok $? "a long title widens the picture (width $w)"

# zbv's schedule as CSV, read back with placement = v
# a CSV saved by a spreadsheet starts with a UTF-8 byte-order mark: read as the same schedule
printf '\357\273\277' >"$T/bom.csv" && cat "$T/mlp.csv" >>"$T/bom.csv"
sed "s|schedule = 1f1b |schedule = file(\"bom.csv\")|" examples/mlp.pipe >"$T/bom.pipe"
"$PIPEGEN" schedule "$T/bom.pipe" --csv >"$T/bom.out" 2>"$T/bom.err"
ok $? "a schedule CSV starting with a UTF-8 byte-order mark is read"
is "$(cat "$T/bom.out")" "$(cat "$T/mlp.csv")" "...as the same schedule (not 'expected the header')"
# a CSV of 20,000 repeated lines: at most 50 errors, then one note (it printed
# one error per line: 20,000 of them, megabytes)
{ head -1 "$T/mlp.csv"; yes "$(sed -n 2p "$T/mlp.csv")" | head -n 20000; tail -n +2 "$T/mlp.csv"; } >"$T/rep.csv"
sed "s|schedule = 1f1b |schedule = file(\"rep.csv\")|" examples/mlp.pipe >"$T/rep.pipe"
"$PIPEGEN" check "$T/rep.pipe" >/dev/null 2>"$T/rep.err"; rc=$?
is "$rc" 1 "a CSV of 20,000 repeated lines: exit 1"
is "$(grep -c ': error: ' "$T/rep.err")" 50 "...with 50 errors shown, not one per line"
like "$(grep ': error: ' "$T/rep.err" | head -1)" 'rep.csv:3:[0-9]+: error: duplicate FWD\(mb 0, chunk 0\); first at line 2' "...each at its line"
is "$(tail -1 "$T/rep.err")" "$T/rep.csv: note: too many errors (50), stopping at line 52" "...then a note says where it stopped"
"$PIPEGEN" schedule $G/zbv_small.pipe --csv >"$T/zbv.csv" 2>&1
sed -e 's|schedule = zbv|schedule = file("zbv.csv")  placement = v|' $G/zbv_small.pipe >"$T/zbvf.pipe"
"$PIPEGEN" schedule "$T/zbvf.pipe" --csv >"$T/zbv2.csv" 2>"$T/err"
ok $? "a zbv schedule read from CSV with placement = v verifies ($(head -1 "$T/err"))"
is "$(cat "$T/zbv2.csv")" "$(cat "$T/zbv.csv")" "...and round-trips exactly"
sed -e 's|schedule = zbv|schedule = file("zbv.csv")|' $G/zbv_small.pipe >"$T/zbvl.pipe"
got=$("$PIPEGEN" schedule "$T/zbvl.pipe" 2>&1); rc=$?
is "$rc" 1 "the same CSV without placement = v is refused"
like "$got" "zbv.csv:[0-9]+:[0-9]+: error: chunk 3 runs on stage 3, not stage 0" \
    "...where the model, one chunk per stage, runs a chunk on another stage"
sed -e 's|schedule = zbv|schedule = 1f1b  placement = v|' $G/zbv_small.pipe >"$T/bad.pipe"
like "$("$PIPEGEN" check "$T/bad.pipe" 2>&1)" "bad.pipe:8:68: error: placement = v holds two chunks per stage: it works with schedule zbv, gpipe or file\(...\), not this schedule" \
    "placement = v with a one-chunk schedule is refused"
sed -e 's|schedule = zbv|schedule = zbv  placement = loop|' $G/zbv_small.pipe >"$T/bad.pipe"
like "$("$PIPEGEN" check "$T/bad.pipe" 2>&1)" "bad.pipe:8:67: error: schedule zbv runs its two chunks per stage in V placement, not loop" \
    "zbv in loop placement is refused"
sed -e '/^split$/d' -e 's|schedule = zbv|schedule = zbv  stages = 4|' $G/zbv_small.pipe >"$T/bad.pipe"
like "$("$PIPEGEN" check "$T/bad.pipe" 2>&1)" "bad.pipe:8:50: error: 4 stages of zbv need 8 chunks, more than the 6 layers of the model" \
    "zbv on more stages than half the layers is refused"
sed -e '0,/^split$/{/^split$/d}' $G/zbv_small.pipe >"$T/bad.pipe"
like "$("$PIPEGEN" check "$T/bad.pipe" 2>&1)" "bad.pipe:8:50: error: zbv needs two chunks per stage, but the splits make 3 chunks" \
    "zbv over an odd chunk count is refused"

got=$("$PIPEGEN" plan examples/mlp.pipe --svg "$T/mlp.svg" 2>&1); rc=$?
ok $rc "pipegen plan --svg succeeds"
like "$got" 'predicted step \(1f1b, model units: estimated flops, messages free\): [0-9.]+ [kMG]?flop, bubble [0-9.]+%' \
     "plan predicts the step time, saying its unit"
like "$got" 'stage 1: 2 layers \(layer1 \.\. relu1\), compute [0-9.]+ [kMG]?flop per step, busy [0-9.]+%, bubble [0-9.]+%' \
     "plan shows each stage's layers, busy share and bubble"
like "$(head -c 200 "$T/mlp.svg")" '<svg ' "plan writes the timeline"
is "$(printf '%s\n' "$got" | tail -n 1)" "wrote $T/mlp.svg: the predicted timeline of one step (SVG)" "...and says so in one line"
got=$("$PIPEGEN" schedule $G/zb1_small.pipe --csv --svg "$T/csv.svg" 2>/dev/null)
is "$(printf '%s\n' "$got" | head -n 1)/$(printf '%s\n' "$got" | grep -c wrote)" "stage,action,mb,chunk,peer,skip,param/0" \
    "with --csv, stdout is the CSV alone (the line about the SVG goes to stderr)"
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

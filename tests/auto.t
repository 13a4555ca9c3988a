#!/bin/sh
# tests/auto.t — `schedule = auto` with `memory = BYTES` per stage
# (codegen/choose/auto.c): pipegen plan prints every candidate (schedule, placement,
# split, per-stage arena, predicted step and bubble, fits) and picks the fastest
# that fits; a tighter budget picks another; when nothing fits the smallest
# achievable per-stage memory is named; the choice is deterministic and recorded
# in plan.json; the settings' errors; candidates over the model's own splits;
# steps in seconds with --balance; over repeat instances (blocks), a candidate
# that cuts one only by more than block_margin or when only such a one fits.
. "$(dirname "$0")/lib.sh"
cd "$TOP" || exit 1
T=$(mktemp -d /tmp/pg-auto.XXXXXX)
trap 'rm -rf "$T"' EXIT
M=tests/models/auto_mlp.pipe

with_memory() { sed -e "s/memory = [0-9A-Za-z]*/memory = $1/" "$M" >"$T/m.pipe"; }

# cands PLAN.JSON: one line per candidate that ran: "index name arena_max step"
cands() {
    awk '/^    \{"schedule": / {
            i++
            if ($0 ~ /"refused"/) next
            match($0, /"schedule": "[^"]*"/); name = substr($0, RSTART + 13, RLENGTH - 14)
            match($0, /"arena_bytes": \[[0-9, ]*\]/); k = split(substr($0, RSTART + 16, RLENGTH - 17), a, ", ")
            max = 0; for (j = 1; j <= k; j++) if (a[j] + 0 > max) max = a[j] + 0
            match($0, /"step": [0-9.e+-]*/); step = substr($0, RSTART + 8, RLENGTH - 8)
            print i - 1, name, max, step }' "$1"
}
chosen_index() { sed -n 's/.*"auto": {.*"chosen": \(-*[0-9]*\),.*/\1/p' "$1"; }

with_memory 1GiB
got=$("$PIPEGEN" plan "$T/m.pipe" 2>&1); rc=$?
ok $rc "pipegen plan with schedule = auto succeeds"
like "$got" "^schedule = auto, memory = 1 GiB per stage: [0-9]+ candidates, step predicted by the cost model" \
    "the table says the budget and what predicts the step"
like "$got" "  schedule +placement +split +stages +arena per stage \(KiB\) +step +bubble +fits" "... has its columns"
for s in 1f1b zb1 gpipe zbv 'interleaved\(2\)'; do
    like "$got" "
  $s +(loop|v) +(balanced|min-max) +2  [0-9./]+ +[0-9.]+ Mflop +[0-9.]+%  (yes|no)" "... a row for $s"
done
like "$got" "
  zbv +v +" "... zbv in V placement"
like "$got" "
chosen: [a-z0-9()]+ \((loop|v) placement, (balanced|min-max) split\): the fastest whose every stage fits 1 GiB" \
    "the choice is named"
"$PIPEGEN" gen "$T/m.pipe" -o "$T/g1" >/dev/null 2>&1
ok $? "pipegen gen with schedule = auto succeeds"
c=$(chosen_index "$T/g1/plan.json")
cands "$T/g1/plan.json" >"$T/c1"
best=$(awk '(b == "" || $4 + 0 < b + 0) { b = $4 } END { print b }' "$T/c1")
is "$(awk -v i="$c" '$1 == i { print $4 }' "$T/c1")" "$best" "plan.json records the choice: the fastest candidate (step $best)"
name=$(awk -v i="$c" '$1 == i { print $2 }' "$T/c1")
like "$(grep '"train"' "$T/g1/plan.json")" "\"schedule\": \"$(echo "$name" | sed 's/(.*//')\"" \
    "... and the plan is the chosen schedule's ($name)"
"$PIPEGEN" plan "$T/m.pipe" >"$T/again" 2>&1
is "$(cat "$T/again")" "$got" "the choice and the table are deterministic"

# a budget one byte under the fastest's largest stage: the fastest of the rest that fit
amax=$(awk -v i="$c" '$1 == i { print $3 }' "$T/c1")
with_memory $((amax - 1))
"$PIPEGEN" gen "$T/m.pipe" -o "$T/g2" >/dev/null 2>&1
ok $? "a budget of $((amax - 1)) bytes still finds a schedule"
c2=$(chosen_index "$T/g2/plan.json")
cands "$T/g2/plan.json" >"$T/c2"
best2=$(awk -v lim=$((amax - 1)) '$3 <= lim && (b == "" || $4 + 0 < b + 0) { b = $4 } END { print b }' "$T/c2")
[ "$c2" != "$c" ] && [ "$(awk -v i="$c2" '$1 == i { print $4 }' "$T/c2")" = "$best2" ] &&
    [ "$(awk -v i="$c2" '$1 == i { print $3 }' "$T/c2")" -le $((amax - 1)) ]
ok $? "... another one: the fastest whose stages all fit ($(awk -v i="$c2" '$1 == i { print $2 }' "$T/c2"))"

# nothing fits: the smallest achievable is named, in bytes, at the setting
least=$(awk '(l == "" || $3 + 0 < l + 0) { l = $3 } END { print l }' "$T/c1")
with_memory 64KiB
got=$("$PIPEGEN" plan "$T/m.pipe" 2>&1); rc=$?
is "$rc" 1 "a budget nothing fits is refused"
like "$got" "m.pipe:9:29: error: no schedule fits memory = 64 KiB per stage: the smallest achievable is [0-9.]+ KiB per stage \([a-z0-9()]+, (balanced|min-max) split, on 2 stages\)" \
    "... at the memory setting, naming the smallest achievable per-stage memory"
like "$got" "note: raise memory to at least $least bytes, .*\(pipegen plan lists every candidate with its arena per stage\)" "... exactly, in bytes ($least), pointing to pipegen plan"
out=$("$PIPEGEN" plan "$T/m.pipe" 2>/dev/null)
like "$out" "^schedule = auto, memory = 64 KiB per stage: [0-9]+ candidates" "... and pipegen plan then lists every candidate, as the note says"
like "$out" "  1f1b +loop +(balanced|min-max) +2  [0-9.]+/[0-9.]+ .* no$" "... each with its arena per stage, none fitting"
like "$out" "chosen: none: no candidate fits 64 KiB on every stage" "... and says that none was chosen"
# a budget one byte short of the smallest: both would round to the same KiB, so both are said in bytes
with_memory $((least - 1))
got=$("$PIPEGEN" plan "$T/m.pipe" 2>&1)
like "$got" "error: no schedule fits memory = $((least - 1)) bytes per stage: the smallest achievable is $least bytes per stage" \
    "a budget just short of the smallest: the two are told apart in bytes, not both rounded alike"

# the settings
sed -e 's/memory = 1MiB/memory = 40GB/' "$M" >"$T/bad.pipe"
like "$("$PIPEGEN" check "$T/bad.pipe" 2>&1)" "bad.pipe:9:29: error: memory = 40GB: the unit must be KiB, MiB, GiB or TiB \(or give bytes\)" \
    "a memory unit that is not binary is refused, located"
sed -e 's/memory = 1MiB/memory = 0/' "$M" >"$T/bad.pipe"
like "$("$PIPEGEN" check "$T/bad.pipe" 2>&1)" "bad.pipe:9:29: error: memory = 0 is out of range: must be at least 1 byte" \
    "memory = 0 is refused"
sed -e 's/  memory = 1MiB//' "$M" >"$T/bad.pipe"
like "$("$PIPEGEN" check "$T/bad.pipe" 2>&1)" "bad.pipe:9:14: error: schedule = auto needs a per-stage memory budget: add \`memory = 40GiB\`" \
    "schedule = auto without memory is refused"
sed -e 's/schedule = auto/schedule = 1f1b/' "$M" >"$T/warn.pipe"
got=$("$PIPEGEN" check "$T/warn.pipe" 2>&1); rc=$?
ok $rc "memory without auto is accepted"
like "$got" "warn.pipe:9:29: warning: memory has no effect: only schedule = auto chooses by memory" "... with a warning"
sed -e 's/memory = 1MiB/memory = 2*512KiB/' "$M" >"$T/bad.pipe"
like "$("$PIPEGEN" check "$T/bad.pipe" 2>&1)" "bad.pipe:9:31: error: unknown name '512KiB'" \
    "a size with a unit inside an expression is refused, located"
sed -e 's/memory = 1MiB/memory = 1048576/' "$M" >"$T/bytes.pipe"
like "$("$PIPEGEN" plan "$T/bytes.pipe" 2>&1)" "memory = 1 MiB per stage" "memory in plain bytes"
like "$("$PIPEGEN" check "$M" 2>&1)" "schedule [a-z0-9()]+ \(chosen by schedule = auto\)" "pipegen check shows the chosen schedule"

# with the model's own splits: the stage count stays, the split is the model's
sed -e 's/  stages = 2//' -e 's/^relu$/relu\nsplit/' "$M" >"$T/split.pipe"
got=$("$PIPEGEN" plan "$T/split.pipe" 2>&1); rc=$?
ok $rc "auto over the model's 3 splits (3 stages) succeeds"
like "$got" "
  1f1b +loop +yours +3  " "... its candidates keep the 3 stages and the model's split"
sed -e 's/stages = 2/stages = 2/' -e 's/^relu$/relu\nsplit/' -e 's/^pop r add$/pop r add\nsplit/' "$M" >"$T/split4.pipe"
got=$("$PIPEGEN" plan "$T/split4.pipe" 2>&1)
like "$got" "
  zbv +v +yours +2  " "4 pieces on stages = 2: zbv over them"
like "$got" "
  interleaved\(2\) +loop +yours +2  " "... and interleaved(2)"

# with a measured profile the steps are seconds
cat >"$T/prof.json" <<'P'
{"layers": [{"name": "l0", "fwd_s": 1e-4, "bwd_s": 2e-4}, {"name": "relu0", "fwd_s": 1e-5, "bwd_s": 1e-5},
 {"name": "l1", "fwd_s": 2e-4, "bwd_s": 4e-4}, {"name": "relu1", "fwd_s": 1e-5, "bwd_s": 1e-5},
 {"name": "l2", "fwd_s": 2e-4, "bwd_s": 4e-4}, {"name": "l3", "fwd_s": 5e-5, "bwd_s": 1e-4}]}
P
with_memory 1GiB
got=$("$PIPEGEN" plan "$T/m.pipe" --balance "$T/prof.json" 2>&1); rc=$?
ok $rc "auto with --balance PROFILE succeeds"
like "$got" "step predicted by measured layer times \(s\)" "... and says its steps are measured seconds"
like "$got" "
  1f1b +loop +balanced +2  [0-9./]+ +[0-9.]+ [mu]?s " "... in seconds"

# blocks (tests/models/auto_blocks.pipe): whole blocks put two blocks' weights on one stage
# (like matches line by line: no pattern here spans two lines)
B=tests/models/auto_blocks.pipe
sed -e 's/memory = 7MiB/memory = 1GiB/' "$B" >"$T/b.pipe"
got=$("$PIPEGEN" plan "$T/b.pipe" 2>&1)
like "$got" "^  1f1b +loop +blocks +2  [0-9./]+ " "over blocks a schedule has a whole-block candidate"
like "$got" "^  1f1b +loop +inside +2  [0-9./]+ " "... and one that cuts a block"
like "$got" "^chosen: 1f1b \(loop placement, blocks split\): the fastest whose every stage fits 1 GiB and keeps blocks whole: the fastest that cuts one \(interleaved\(2\), inside split\) would gain 2[0-9.]+%, not more than block_margin 90%$" \
    "a faster candidate that cuts a block loses by block_margin, and the choice says so"
sed -e 's/block_margin = 0.9/block_margin = 0.05/' "$T/b.pipe" >"$T/b5.pipe"
like "$("$PIPEGEN" plan "$T/b5.pipe" 2>&1)" "^chosen: interleaved\(2\) \(loop placement, inside split\): the fastest whose every stage fits 1 GiB, inside a block: 2[0-9.]+% faster than the fastest of whole blocks \(1f1b, blocks split\), more than block_margin 5%$" \
    "... and wins when it gains more than block_margin"
got=$("$PIPEGEN" plan "$B" 2>&1)
like "$got" "^  1f1b +loop +blocks +2  [0-9./]+ .* no$" "memory = 7MiB: no whole-block candidate fits"
like "$got" "^chosen: [a-z0-9()]+ \(loop placement, inside split\): the fastest whose every stage fits 7 MiB, inside a block: no split of whole blocks fits$" \
    "... so a split inside a block is taken whatever block_margin, and the choice says why"
like "$("$PIPEGEN" check "$B" 2>&1)" "^chosen: [a-z0-9()]+ \(loop placement, inside split\): the fastest whose every stage fits 7 MiB, inside a block: no split of whole blocks fits$" \
    "pipegen check says the choice and why too"
done_testing

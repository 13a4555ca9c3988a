#!/bin/sh
# tests/schedule_cli.t — `pipegen schedule`: the readable listing of
# examples/mlp.pipe (golden), the CSV round trip through `schedule =
# file(...)`, and a hanging hand-written CSV rejected with its cycle named.
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
done_testing

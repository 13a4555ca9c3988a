#!/bin/sh
# tests/piperun.t — build/piperun with shell-script stand-ins for stage binaries:
# output prefixing, exit status, stopping the rest, Ctrl-C, no orphans.
. "$(dirname "$0")/lib.sh"
cd "$TOP" || exit 1
T=$(mktemp -d /tmp/pg_piperun_t.XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
PR=$T/piperun
if ! ${CC:-cc} -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -g -O1 \
        -fsanitize=address,undefined -fno-omit-frame-pointer -Iruntime/core -o "$PR" cmd/piperun.c 2>"$T/cc.log"; then
    echo "1..1"; echo "not ok 1 - piperun.c compiles"; sed 's/^/# /' "$T/cc.log"; exit 1
fi
# gone PID: no such process (or only a zombie left for init to reap)
gone() { ! kill -0 "$1" 2>/dev/null || grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
stage() { # stage DIR K SCRIPT-BODY
    mkdir -p "$1"; printf '#!/bin/sh\n%s\n' "$3" > "$1/stage$2"; chmod +x "$1/stage$2"; }

# ---- prefixing, environment, extra args, partial last lines ----
D=$T/ok
stage "$D" 0 'echo "hello from $PIPE_RANK of $PIPE_WORLD at $PIPE_MASTER args: $*"; printf "no newline"'
stage "$D" 1 'echo "to stderr" >&2; echo "line 2"; printf "partial err" >&2'
out=$(timeout 20 "$PR" "$D" -- --steps 3 2>"$T/err"); rc=$?
err=$(cat "$T/err")
is "$rc" 0 "all stages succeed: exit 0"
like "$out" '^\[stage 0\] hello from 0 of 2 at 127\.0\.0\.1:[0-9]+ args: --steps 3$' "stdout prefixed, PIPE_* set, args passed"
like "$out" '\[stage 0\] no newline' "a partial last line is flushed at exit"
like "$out" '^\[stage 1\] line 2$' "stage 1 stdout prefixed"
like "$err" '^\[stage 1\] to stderr$' "stderr goes to stderr, prefixed"
like "$err" '\[stage 1\] partial err' "partial stderr line flushed"
# a stage's own name is not repeated: "stage 1: x" from stage 1 is "[stage 1] x",
# but a line naming another stage keeps it
D2=$T/own
stage "$D2" 0 'echo "stage 0: bubble 12%"; echo "stage 1: is late"; echo "stage 0 x"'
stage "$D2" 1 'echo "stage 1: lost the link" >&2'
out=$(timeout 20 "$PR" "$D2" 2>"$T/err2")
like "$out" '^\[stage 0\] bubble 12%$' "a stage naming itself is relayed without repeating its name"
like "$out" '^\[stage 0\] stage 1: is late$' "a line naming another stage is kept whole"
like "$out" '^\[stage 0\] stage 0 x$' "only the exact 'stage k: ' prefix is dropped"
like "$(cat "$T/err2")" '^\[stage 1\] lost the link$' "on stderr too"
# with replicas a stage names itself "stage k of replica r: ": said once too
D3=$T/ownrep
stage "$D3" 0 'echo "stage 0 of replica $((PIPE_RANK / 2)): summed"'
stage "$D3" 1 'echo "stage 1 of replica 0: named by another"'
out=$(timeout 20 "$PR" --dp 2 "$D3" 2>/dev/null)
like "$out" '^\[stage 0 replica 1\] summed$' "with replicas, 'stage k of replica r: ' from that very process is dropped"
like "$out" '^\[stage 1 replica 1\] stage 1 of replica 0: named by another$' "...but kept when it names another process"
out=$(PIPE_MASTER=10.1.2.3:4567 timeout 20 "$PR" "$D" 2>/dev/null)
like "$out" 'at 10\.1\.2\.3:4567 args: $' "PIPE_MASTER from the environment is passed on"

# ---- the end-of-run summaries: held, then printed once, in stage order ----
# a stage prints the mark (runtime/core/io_atomic.h PG_SUMMARY_MARK) before
# its summary; stage 2 ends first and stage 0 last, and stage 1's lines would
# fall between stage 0's
D=$T/summary
stage "$D" 0 'echo "step 1"; printf "\036pipegen: end of run\n"; echo "stage 0: bubble 10%"; sleep 0.6; echo "stage 0: more of 0"'
stage "$D" 1 'sleep 0.2; printf "\036pipegen: end of run\n"; echo "stage 1: bubble 20%"; sleep 0.2; echo "stage 1: more of 1"; echo "late error" >&2'
stage "$D" 2 'echo "no mark from stage 2"'
out=$(timeout 20 "$PR" "$D" 2>"$T/err3"); rc=$?
is "$rc" 0 "stages with end-of-run summaries: exit 0"
is "$(printf '%s\n' "$out" | sed -n '/bubble 10%/,$p')" "[stage 0] bubble 10%
[stage 0] more of 0
[stage 1] bubble 20%
[stage 1] more of 1" "the summaries come last, once, whole and in stage order"
is "$(printf '%s\n' "$out" | sed -n '1,/bubble 10%/p' | grep -c 'step 1\|no mark')" 2 "...after the lines before the mark, relayed as they came"
printf '%s' "$out" | grep -q "$(printf '\036')"; [ $? = 1 ]; ok $? "...and the mark itself is not shown"
is "$(cat "$T/err3")" "[stage 1] late error" "stderr after the mark is relayed as it comes"

# ---- first failure: status propagates, the rest are stopped ----
D=$T/fail
stage "$D" 0 "echo \$\$ > $T/p0; sleep 30 & echo \$! > $T/g0; wait"
stage "$D" 1 'sleep 0.3; echo "bye"; exit 3'
stage "$D" 2 "echo \$\$ > $T/p2; exec sleep 30"
start=$(date +%s)
timeout 20 "$PR" "$D" >"$T/out" 2>"$T/err"; rc=$?
el=$(( $(date +%s) - start ))
is "$rc" 3 "exit status is the failing stage's status"
like "$(cat "$T/err")" '^piperun: stage 1 exited with status 3$' "the failure is reported"
gone "$(cat "$T/p0")" && gone "$(cat "$T/p2")"; ok $? "the other stages were stopped"
gone "$(cat "$T/g0")"; ok $? "what a stage started was stopped too (its process group)"
[ "$el" -le 3 ]; ok $? "stopped promptly (${el} s)"

# ---- killed by a signal ----
D=$T/sig
stage "$D" 0 'exec sleep 30'
stage "$D" 1 'kill -9 $$'
timeout 20 "$PR" "$D" >/dev/null 2>"$T/err"; rc=$?
is "$rc" 137 "a stage killed by signal 9: exit 128+9"
like "$(cat "$T/err")" '^piperun: stage 1 killed by signal 9$' "the signal is reported"

# ---- Ctrl-C is forwarded ----
D=$T/int
for k in 0 1; do stage "$D" $k "trap 'echo got INT; exit 130' INT; echo \$\$ > $T/i$k; sleep 30 & wait \$!"; done
rm -f "$T/i0" "$T/i1"
timeout 20 "$PR" "$D" >"$T/out" 2>"$T/err" & pid=$!
n=0; while [ ! -s "$T/i0" ] || [ ! -s "$T/i1" ]; do sleep 0.1; n=$((n+1)); [ $n -gt 50 ] && break; done
sleep 0.2
# timeout(1) runs piperun as its child: signal piperun itself
prpid=$(pgrep -P "$pid" -x piperun 2>/dev/null || ps -o pid= --ppid "$pid" | head -1)
kill -INT $prpid
wait $pid; rc=$?
is "$rc" 130 "after Ctrl-C piperun exits 130"
like "$(cat "$T/out")" '\[stage 0\] got INT' "stage 0 received SIGINT"
like "$(cat "$T/out")" '\[stage 1\] got INT' "stage 1 received SIGINT"

# ---- a second Ctrl-C with stages too slow to stop: killed, and the run's status is the interrupt's ----
D=$T/int2
for k in 0 1; do stage "$D" $k "trap '' INT; echo \$\$ > $T/j$k; sleep 30 & wait \$!"; done
rm -f "$T/j0" "$T/j1"
timeout 20 "$PR" "$D" >"$T/out2" 2>"$T/err2" & pid=$!
n=0; while [ ! -s "$T/j0" ] || [ ! -s "$T/j1" ]; do sleep 0.1; n=$((n+1)); [ $n -gt 50 ] && break; done
prpid=$(pgrep -P "$pid" -x piperun 2>/dev/null || ps -o pid= --ppid "$pid" | head -1)
kill -INT $prpid; sleep 0.3; kill -INT $prpid
wait $pid; rc=$?
is "$rc" 130 "a second Ctrl-C kills stages that ignore it: piperun still exits 130, not 137"
like "$(cat "$T/err2")" 'piperun: stage [01] did not stop after the interrupt: killed' "... saying the stage was killed for not stopping"

# ---- a stage that stopped for a signal of its own (exit 143): the others finish on their own ----
D=$T/own143
stage "$D" 0 'exit 143'
stage "$D" 1 "trap 'echo got TERM; exit 1' TERM; sleep 1 & wait \$!; echo finished its step; exit 143"
timeout 20 "$PR" "$D" >"$T/out143" 2>"$T/err143"; rc=$?
is "$rc" 143 "a stage exiting 143 by itself: piperun exits 143"
like "$(cat "$T/out143")" '\[stage 1\] finished its step' "... and lets the other stage finish within the grace period"
! grep -q 'got TERM' "$T/out143"
ok $? "... without sending it a SIGTERM (a second signal would cut its checkpoint short)"

# ---- a stage that ignores SIGTERM is killed after the grace period ----
D=$T/stubborn
stage "$D" 0 "trap '' TERM; echo \$\$ > $T/s0; while :; do sleep 0.2; done"
stage "$D" 1 'sleep 0.2; exit 1'
start=$(date +%s)
timeout 20 "$PR" "$D" >/dev/null 2>&1; rc=$?
el=$(( $(date +%s) - start ))
is "$rc" 1 "exit status 1 with a stubborn stage"
gone "$(cat "$T/s0")" && [ "$el" -ge 4 ] && [ "$el" -le 8 ]; ok $? "a stage ignoring SIGTERM is killed after ~5 s (${el} s)"

# ---- ...but never while it writes a file for the user (it said so on PIPE_CONTROL_FD) ----
D=$T/writer
# (bash: dash takes no fd numbers above 9 in a redirection)
stage "$D" 0 "trap '' TERM; bash -c 'printf W >&\$PIPE_CONTROL_FD'; echo \$\$ > $T/w0
sleep 7; echo done > $T/w0.file; bash -c 'printf D >&\$PIPE_CONTROL_FD'; sleep 30"
stage "$D" 1 'sleep 0.3; exit 1'
start=$(date +%s)
timeout 30 "$PR" "$D" >/dev/null 2>&1; rc=$?
el=$(( $(date +%s) - start ))
is "$rc" 1 "a writing stage: the exit status is still the first failure's"
[ -s "$T/w0.file" ]; ok $? "a stage writing a file for the user is not killed after the grace period: its file is complete"
gone "$(cat "$T/w0")" && [ "$el" -ge 7 ] && [ "$el" -le 12 ]; ok $? "...and it is killed once it says it is done (${el} s)"

# ---- the first failure, not a stage that died because its peer did ----
# stage 0 loses its link first ('P' on its control socket) and exits at once;
# stage 1, the cause, exits a little later: stage 1 is reported
D=$T/cause
stage "$D" 0 "bash -c 'printf P >&\$PIPE_CONTROL_FD'; sleep 0.1; exit 1"
stage "$D" 1 'sleep 0.6; echo "bad input" >&2; exit 3'
stage "$D" 2 "bash -c 'printf P >&\$PIPE_CONTROL_FD'; sleep 0.2; exit 1"
timeout 20 "$PR" "$D" >/dev/null 2>"$T/err"; rc=$?
is "$rc" 3 "a stage failing after its peer's link ended gives way to the peer that failed first: exit 3"
like "$(cat "$T/err")" '^piperun: stage 1 exited with status 3$' "...and that stage is the one reported"
! grep -q 'stage [02] exited' "$T/err"; ok $? "...the followers are not"
# only followers: the first of them is reported once the others are gone (or after 2 s)
D=$T/follow
stage "$D" 0 "bash -c 'printf P >&\$PIPE_CONTROL_FD'; exit 1"
stage "$D" 1 'exec sleep 30'
start=$(date +%s)
timeout 20 "$PR" "$D" >/dev/null 2>"$T/err"; rc=$?
el=$(( $(date +%s) - start ))
is "$rc" 1 "only a follower fails: its status"
like "$(cat "$T/err")" '^piperun: stage 0 exited with status 1$' "...it is reported after a short wait for the cause"
[ "$el" -le 5 ]; ok $? "...which does not hold the run up for long (${el} s)"

# ---- a second interrupt stops every stage at once ----
D=$T/twice
for k in 0 1; do stage "$D" $k "trap 'echo got INT' INT; trap '' TERM; echo \$\$ > $T/t$k; while :; do sleep 0.1; done"; done
stage "$D" 2 "bash -c 'printf W >&\$PIPE_CONTROL_FD'; trap '' INT TERM; echo \$\$ > $T/t2; while :; do sleep 0.1; done"
rm -f "$T/t0" "$T/t1" "$T/t2"
"$PR" "$D" >"$T/out" 2>"$T/err" & pid=$!
(sleep 30; kill -9 $pid "$(cat "$T/t0")" "$(cat "$T/t1")" "$(cat "$T/t2")") 2>/dev/null & dog=$! # a piperun that never stops them
n=0; while [ ! -s "$T/t0" ] || [ ! -s "$T/t1" ] || [ ! -s "$T/t2" ]; do sleep 0.1; n=$((n+1)); [ $n -gt 50 ] && break; done
sleep 0.3
kill -INT $pid
sleep 0.5
start=$(date +%s.%N)
kill -INT $pid
wait $pid; rc=$?
el=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
like "$(cat "$T/err")" 'piperun: second interrupt: stopping every stage at once \(no checkpoint\)' "a second Ctrl-C: piperun says it stops every stage at once"
awk -v e="$el" 'BEGIN { exit !(e < 3) }'; ok $? "...and does, within the second (${el} s; the grace period is 5 s), a stage writing a file included"
gone "$(cat "$T/t0")" && gone "$(cat "$T/t1")" && gone "$(cat "$T/t2")"; ok $? "...no stage is left ($rc)"
kill $(ps -o pid= --ppid $dog) $dog 2>/dev/null

# ---- Ctrl-Z suspends the whole run, fg resumes it ----
D=$T/tstp
for k in 0 1; do stage "$D" $k "echo \$\$ > $T/z$k; i=0; while [ \$i -lt 60 ]; do echo \$i > $T/c$k; i=\$((i+1)); sleep 0.1; done"; done
rm -f "$T/z0" "$T/z1"
"$PR" "$D" >/dev/null 2>&1 & pid=$!
(sleep 30; kill -9 $pid) 2>/dev/null & dog=$!
n=0; while [ ! -s "$T/z0" ] || [ ! -s "$T/z1" ]; do sleep 0.1; n=$((n+1)); [ $n -gt 50 ] && break; done
sleep 0.3
kill -TSTP $pid
sleep 0.5
st() { sed 's/^[0-9]* ([^)]*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null; }
is "$(st $pid) $(st "$(cat "$T/z0")") $(st "$(cat "$T/z1")")" "T T T" "SIGTSTP (Ctrl-Z): piperun and every stage are stopped"
c0=$(cat "$T/c0"); sleep 0.6
is "$(cat "$T/c0")" "$c0" "...and make no progress"
kill -CONT $pid
sleep 0.5
# (running again: any state but stopped; a busy machine shows R or D as well as S)
sts="$(st $pid) $(st "$(cat "$T/z0")") $(st "$(cat "$T/z1")")"
case "$sts" in *T* | *t* | *"  "* | " "* | *" ") false ;; *) true ;; esac
ok $? "SIGCONT (fg): they all run again ($sts)"
wait $pid; rc=$?
is "$rc" 0 "...and the run completes (exit $rc)"
kill $(ps -o pid= --ppid $dog) $dog 2>/dev/null

# ---- too small a ulimit -n: a clear message before any stage starts ----
D=$T/nofile
for k in 0 1 2 3; do stage "$D" $k "echo started > $T/nf$k"; done
rm -f "$T"/nf?
sh -c "ulimit -n 14; exec '$PR' '$D'" >/dev/null 2>"$T/err"; rc=$?
is "$rc" 1 "ulimit -n 14 for 4 stages: exit 1"
like "$(cat "$T/err")" '^piperun: 4 stages need about 28 open files but ulimit -n allows 14: raise it \(ulimit -n 28\)$' "...saying how many it needs"
[ ! -e "$T/nf0" ]; ok $? "...before starting any stage"

# ---- the run's identity ----
D=$T/rid
stage "$D" 0 'echo "id=$PIPE_RUN_ID"'
a=$("$PR" "$D" 2>/dev/null); b=$("$PR" "$D" 2>/dev/null)
like "$a" '^\[stage 0\] id=[0-9a-f]{24}$' "every run gets a random PIPE_RUN_ID"
[ "$a" != "$b" ]; ok $? "...a different one each time"
is "$(PIPE_RUN_ID=mine "$PR" "$D" 2>/dev/null)" "[stage 0] id=mine" "...or the one PIPE_RUN_ID gives"

# ---- piperun killed outright: no orphans ----
D=$T/orphan
for k in 0 1; do stage "$D" $k "echo \$\$ > $T/o$k; exec sleep 30"; done
rm -f "$T/o0" "$T/o1"
"$PR" "$D" >/dev/null 2>&1 & pid=$!
n=0; while [ ! -s "$T/o0" ] || [ ! -s "$T/o1" ]; do sleep 0.1; n=$((n+1)); [ $n -gt 50 ] && break; done
kill -9 $pid; wait $pid 2>/dev/null
sleep 0.5
gone "$(cat "$T/o0")" && gone "$(cat "$T/o1")"; ok $? "stages die with piperun (no orphans)"

# ---- usage ----
"$PR" >/dev/null 2>&1; is "$?" 2 "no arguments: exit 2"
out=$("$PR" --help); rc=$?
is "$rc" 0 "--help exits 0"
like "$out" '^usage: piperun \[--dp D\] DIR' "--help prints usage"
like "$out" 'SIGINT and SIGTERM \(Ctrl-C\) are forwarded' "--help documents signal forwarding"
like "$out" 'still running 5 s after' "--help documents the kill grace period"
like "$out" 'cores of this machine divided by' "--help documents how threads are split"
like "$out" 'Exit status: 0 when every stage exits 0' "--help documents the exit statuses"
like "$out" 'DIR/stage0 --help' "--help says where the stage options are listed"
out=$("$PR" --version); rc=$?
is "$rc.$out" "0.piperun (pipegen 0.1.0)" "--version prints the version, exit 0"
"$PR" --bogus >/dev/null 2>&1; is "$?" 2 "unknown option: exit 2"
mkdir -p "$T/empty"
err=$("$PR" "$T/empty" 2>&1); rc=$?
is "$rc" 2 "no stage binaries: exit 2"
like "$err" "no stage binaries in $T/empty" "says where it looked"
done_testing

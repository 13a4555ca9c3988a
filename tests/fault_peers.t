#!/bin/sh
# tests/fault_peers.t — a stage that dies (SIGKILL) or stops answering, and a
# network cut between two hosts (two network namespaces joined by a veth pair
# the test takes down): every other stage exits non-zero within 10 s naming the
# lost stage and what it was doing; piperun leaves no orphans; a stage blocked
# longer than --timeout says which action it waits on.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh"
T=$(mktemp -d /tmp/pg-fault-peers.XXXXXX)
NS=pgf$$
cleanup() {
    for k in 0 1 2; do [ -f "$T/s$k.log.pid" ] && kill -9 "$(cat "$T/s$k.log.pid")" 2>/dev/null; done
    ns_pair_del "$NS"
    rm -rf "$T"
}
trap cleanup EXIT
G=$T/m3
gen_mlp "$G" 3
ok $? "mlp_small on 3 stages builds"
gone() { ! kill -0 "$1" 2>/dev/null || grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }

# --- SIGKILL of the middle stage, stages started by hand ---------------------------
M=127.0.0.1:$(free_port)
for k in 0 1 2; do start_stage "$G/bin" $k 3 "$M" "$T/s$k.log" --steps 100000000 --log-every 1000; done
wait_for "$T/s2.log" 'step 1000/' 20; ok $? "three stages train"
t0=$(date +%s.%N)
kill -9 "$(cat "$T/s1.log.pid")"
wait_exit "$(cat "$T/s0.log.pid")" 10; r0=$WX
wait_exit "$(cat "$T/s2.log.pid")" 10; r2=$WX
el=$(elapsed_since "$t0")
wait "$(cat "$T/s1.log.pid")" 2>/dev/null
[ "$r0" != hung ] && [ "$r0" != 0 ]; ok $? "stage 0 exits non-zero after stage 1 is killed (status $r0)"
[ "$r2" != hung ] && [ "$r2" != 0 ]; ok $? "stage 2 exits non-zero after stage 1 is killed (status $r2)"
awk -v e="$el" 'BEGIN { exit !(e < 10) }'; ok $? "both within 10 s (${el} s)"
# (on a loaded machine stage 0 may be at the step's end, waiting for stage 1's verdict)
like "$(cat "$T/s0.log")" 'stage 0: (action [0-9]+ [A-Z_]+\(mb [0-9-]+\) (to|from)|(receiving|sending) the verdict on step [0-9]+ (from|to)) stage 1 failed: stage 1 closed its connection' "stage 0 names the lost stage and its action"
# (stage 2 may be waiting for stage 0's verdict on the step by then, and see
# stage 0 go first: piperun reports the first failure, see tests/piperun.t)
like "$(cat "$T/s2.log")" 'stage 2: .*stage [01] .*(closed its connection|failed)' "stage 2 names the lost stage"

# --- SIGKILL under piperun: non-zero exit, no orphans ------------------------------
timeout 30 "$PIPERUN" "$G/bin" -- --threads 1 --steps 100000000 --log-every 1000 >"$T/pr.out" 2>&1 &
prpid=$!
wait_for "$T/pr.out" 'step 1000/' 20
pids=$(pgrep -f "$G/bin/stage" | tr '\n' ' ')
victim=$(pgrep -f "$G/bin/stage2" | head -1)
t0=$(date +%s.%N)
kill -9 "$victim"
wait $prpid; rc=$?
el=$(elapsed_since "$t0")
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; ok $? "piperun exits non-zero when a stage is killed (status $rc, ${el} s)"
like "$(cat "$T/pr.out")" 'piperun: stage 2 killed by signal 9|stage 2 closed its connection' "the output names the killed stage"
sleep 0.3
left=0; for p in $pids; do gone "$p" || left=$((left + 1)); done
is "$left" 0 "no stage process is left behind"

# --- watchdog: a stage that stops answering (SIGSTOP) ------------------------------
M=127.0.0.1:$(free_port)
# (the first section's logs go first: a stage started in the background empties
# its log only when it gets to run, and the wait below must not read the old one)
rm -f "$T"/s?.log
for k in 0 1 2; do start_stage "$G/bin" $k 3 "$M" "$T/s$k.log" --steps 100000000 --log-every 1000 --timeout 2; done
wait_for "$T/s2.log" 'step 1000/' 20
ok $? "three stages train with --timeout 2" || for k in 0 1 2; do sed "s/^/# s$k: /" "$T/s$k.log"; done
kill -STOP "$(cat "$T/s1.log.pid")"
t0=$(date +%s.%N)
wait_exit "$(cat "$T/s0.log.pid")" 10; r0=$WX
wait_exit "$(cat "$T/s2.log.pid")" 10; r2=$WX
el=$(elapsed_since "$t0")
kill -9 "$(cat "$T/s1.log.pid")"; kill -CONT "$(cat "$T/s1.log.pid")" 2>/dev/null
wait "$(cat "$T/s1.log.pid")" 2>/dev/null
[ "$r0" = 1 ] && [ "$r2" = 1 ]; ok $? "--timeout 2: stages 0 and 2 give up with status 1 ($r0, $r2, ${el} s)"
# (stopped at the step's end, stage 0 waits for stage 1's verdict instead)
like "$(cat "$T/s0.log")" 'stage 0 waiting (at action [0-9]+ RECV_GRAD\(mb [0-9]+\)|for the verdict on step [0-9]+) from stage 1 for 2 s' "stage 0 says which action it waits on"
# stage 2 waits for stage 1's activations, or, at its optimizer, for stage 0's
# verdict on the step (every stage sends it once it has finished the step); in
# the second case stage 0 began waiting first, so it may give up first, and
# stage 2 then learns of it as a closed connection while waiting for the verdict
# (or, at a send or receive of an action, as that action's failure)
like "$(cat "$T/s2.log")" 'stage 2 waiting (at action [0-9]+ RECV_ACT\(mb [0-9]+\) from stage 1|for the verdict on step [0-9]+ from stage [01]) for 2 s|stage 2: ((receiving|sending) the verdict on step [0-9]+ (from|to)|action [0-9]+ [A-Z_]+\(mb [0-9-]+\) (from|to)) stage [01] failed: ' "stage 2 says which action it waits on"

# --- a network cut between two hosts (network namespaces + veth) -------------------
G2=$T/m2
gen_mlp "$G2" 2
if ns_pair "$NS" 10.251.0.1 10.251.0.2; then
    M=10.251.0.1:29517
    PIPE_RANK=0 PIPE_WORLD=2 PIPE_MASTER=$M ip netns exec "${NS}a" "$G2/bin/stage0" --threads 1 --steps 100000000 \
        --log-every 1000 >"$T/n0.log" 2>&1 &
    n0=$!
    PIPE_RANK=1 PIPE_WORLD=2 PIPE_MASTER=$M ip netns exec "${NS}b" "$G2/bin/stage1" --threads 1 --steps 100000000 \
        --log-every 1000 >"$T/n1.log" 2>&1 &
    n1=$!
    wait_for "$T/n1.log" 'step 1000/' 20; ok $? "two stages train across the veth link"
    ip -n "${NS}b" link set "${NS}vb" down
    t0=$(date +%s.%N)
    wait_exit $n0 12; r0=$WX
    wait_exit $n1 12; r1=$WX
    el=$(elapsed_since "$t0")
    [ "$r0" != hung ] && [ "$r0" != 0 ] && [ "$r1" != hung ] && [ "$r1" != 0 ]
    ok $? "after the link goes down both stages exit non-zero ($r0, $r1)"
    awk -v e="$el" 'BEGIN { exit !(e <= 10.5) }'; ok $? "within 10 s (${el} s)"
    like "$(cat "$T/n0.log")" 'stage 0: .*(lost the connection to stage 1|stage 1 closed)' "stage 0 names stage 1"
    like "$(cat "$T/n1.log")" 'stage 1: .*(lost the connection to stage 0|stage 0 closed)' "stage 1 names stage 0"
fi
done_testing

#!/bin/sh
# tests/fault_signals.t — SIGTERM or Ctrl-C to piperun with --save-on-exit: every
# stage finishes the same step, a final checkpoint is written, all exit 128+sig,
# and the run resumes from that checkpoint; SIGHUP is taken as SIGTERM (piperun
# and a stage alone); Ctrl-Z and fg, once and again and again under --dp and
# --zero, never counted as a peer's delay; resources: an arena larger than
# the memory allowed fails at start with the numbers.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh"
T=$(mktemp -d /tmp/pg-fault-sig.XXXXXX)
trap '[ -f "$T/tstpdp.pid" ] && kill -9 "$(cat "$T/tstpdp.pid")" 2>/dev/null; rm -rf "$T"' EXIT
G=$T/m3
gen_mlp "$G" 3
ok $? "mlp_small on 3 stages builds"
gone() { ! kill -0 "$1" 2>/dev/null || grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }

for sig in TERM INT; do
    num=$(kill -l "$sig" 2>/dev/null || echo 15); [ "$sig" = INT ] && num=2; [ "$sig" = TERM ] && num=15
    rm -rf "$T/ck"
    "$PIPERUN" "$G/bin" -- --threads 1 --steps 100000000 --log-every 500 --checkpoint-dir "$T/ck" --save-on-exit \
        >"$T/$sig.out" 2>&1 &
    pr=$!
    wait_for "$T/$sig.out" 'step 500/' 20
    pids=$(pgrep -f "$G/bin/stage" | tr '\n' ' ')
    kill -$sig $pr
    wait_exit $pr 10; rc=$WX
    is "$rc" $((128 + num)) "SIG$sig to piperun: exit $((128 + num))"
    n=$(grep -c "stopped by signal $num after step [0-9]* (checkpoint saved)" "$T/$sig.out")
    is "$n" 3 "SIG$sig: every stage stops after a final checkpoint"
    steps=$(sed -n "s/.*stopped by signal $num after step \([0-9]*\).*/\1/p" "$T/$sig.out" | sort -u)
    is "$(echo "$steps" | wc -l)" 1 "SIG$sig: all stages stopped after the same step ($steps)"
    is "$(head -1 "$T/ck/LATEST" 2>/dev/null)" "$(printf 'step-%08d' "$steps")" "SIG$sig: LATEST names that step"
    left=0; for p in $pids; do gone "$p" || left=$((left + 1)); done
    is "$left" 0 "SIG$sig: no stage process is left behind"
done
timeout 60 "$PIPERUN" "$G/bin" -- --threads 1 --steps $((steps + 2)) --resume "$T/ck" --save "$T/r.st" >"$T/r.out" 2>&1
ok $? "the run resumes from the checkpoint written on exit"
timeout 60 "$PIPERUN" "$G/bin" -- --threads 1 --steps $((steps + 2)) --save "$T/s.st" >/dev/null 2>&1
cmp -s "$T/r.st" "$T/s.st"; ok $? "and ends bitwise equal to an uninterrupted run"

# --- SIGHUP (the terminal closed) is taken as SIGTERM: checkpoint and stop ---------------
rm -rf "$T/ckh"
"$PIPERUN" "$G/bin" -- --threads 1 --steps 100000000 --log-every 500 --checkpoint-dir "$T/ckh" --save-on-exit \
    >"$T/HUP.out" 2>&1 &
pr=$!
wait_for "$T/HUP.out" 'step 500/' 20
kill -HUP $pr
wait_exit $pr 10
is "$WX" 143 "SIGHUP to piperun: the run stops as on SIGTERM (exit 143), not training on"
is "$(grep -c 'stopped by signal 15 after step [0-9]* (checkpoint saved)' "$T/HUP.out")" 3 "...every stage after a final checkpoint"
G1=$T/m1
gen_mlp "$G1" 1
PIPE_RANK=0 PIPE_WORLD=1 "$G1/bin/stage0" --threads 1 --steps 100000000 --log-every 500 --checkpoint-dir "$T/ckh1" \
    --save-on-exit >"$T/HUP1.out" 2>&1 &
pr=$!
wait_for "$T/HUP1.out" 'step 500/' 20
kill -HUP $pr
wait_exit $pr 10
is "$WX" 143 "SIGHUP to a stage started by hand with --save-on-exit: exit 143, not a death by SIGHUP"
like "$(cat "$T/HUP1.out")" 'stage 0: stopped by signal 15 after step [0-9]+ \(checkpoint saved\)' "...after its checkpoint"
[ -f "$T/ckh1/LATEST" ]; ok $? "...which is there"

# --- Ctrl-Z: the whole run stops, longer than --timeout, and goes on --------------------
"$PIPERUN" "$G/bin" -- --threads 1 --steps 100000000 --log-every 500 --timeout 2 --checkpoint-dir "$T/ckz" --save-on-exit \
    >"$T/tstp.out" 2>&1 &
pr=$!
wait_for "$T/tstp.out" 'step 500/' 20
pids=$(pgrep -f "$G/bin/stage" | tr '\n' ' ')
kill -TSTP $pr
sleep 0.5
states=$(for p in $pr $pids; do sed 's/^[0-9]* ([^)]*) \(.\).*/\1/' "/proc/$p/stat"; done | sort -u | tr -d '\n')
is "$states" "T" "SIGTSTP to piperun: piperun and all 3 stages are stopped"
before=$(grep -c 'step [0-9]*/' "$T/tstp.out")
sleep 4   # twice --timeout
is "$(grep -c 'step [0-9]*/' "$T/tstp.out")" "$before" "...and make no progress while stopped"
kill -CONT $pr
n=$((before + 2))
t=0; while [ "$(grep -c 'step [0-9]*/' "$T/tstp.out")" -lt "$n" ] && [ $t -lt 100 ]; do sleep 0.1; t=$((t + 1)); done
[ "$(grep -c 'step [0-9]*/' "$T/tstp.out")" -ge "$n" ]; ok $? "SIGCONT: the run goes on after 4 s stopped with --timeout 2"
! grep -q 'waiting at\|for 2 s' "$T/tstp.out"; ok $? "...no stage counted the stopped time as waiting for a peer"
kill -TERM $pr
wait_exit $pr 20
is "$WX" 143 "...and stops on SIGTERM as usual, after a final checkpoint"

# --- Ctrl-Z and fg again and again under --dp 2 --zero 1: no receive counts the stop ---------
# (the stopped time was told by a SIGCONT handler that another thread could run
# after a receive had already seen its deadline: 1 run in 33 failed with a
# timeout on a message sent before the stop; waits now keep their own clock)
G2=$T/m2
gen_mlp "$G2" 2
"$PIPERUN" --dp 2 "$G2/bin" -- --threads 1 --zero 1 --steps 100000000 --log-every 200 --timeout 3 \
    >"$T/tstpdp.out" 2>&1 &
pr=$!
echo "$pr" >"$T/tstpdp.pid"
wait_for "$T/tstpdp.out" 'step 200/' 30
cycles=0
for i in 1 2 3 4 5 6; do
    kill -TSTP $pr
    sleep 3.3   # past --timeout
    before=$(grep -c 'step [0-9]*/' "$T/tstpdp.out")
    kill -CONT $pr
    t=0; while [ "$(grep -c 'step [0-9]*/' "$T/tstpdp.out")" -lt $((before + 2)) ] && [ $t -lt 200 ]; do sleep 0.1; t=$((t + 1)); done
    [ "$(grep -c 'step [0-9]*/' "$T/tstpdp.out")" -ge $((before + 2)) ] && cycles=$((cycles + 1))
done
is "$cycles" 6 "2 stages x 2 replicas, --zero 1, --timeout 3: six Ctrl-Z of 3.3 s and fg, and it trains on after each"
! grep -q 'no message from\|still unsent after\|waiting at' "$T/tstpdp.out"; ok $? "...no receive or send counted a stop as a peer's delay"
kill -TERM $pr
wait_exit $pr 20
is "$WX" 143 "...and it stops on SIGTERM"

# --- a second Ctrl-C does not wait for a stuck stage ------------------------------------------
"$PIPERUN" "$G/bin" -- --threads 1 --steps 100000000 --log-every 500 --checkpoint-dir "$T/ck2c" --save-on-exit \
    >"$T/int2.out" 2>&1 &
pr=$!
wait_for "$T/int2.out" 'step 500/' 20
stuck=$(pgrep -f "$G/bin/stage2" | head -1)
kill -STOP "$stuck"   # a stage that stopped answering: the others wait for it to agree on a stop
sleep 0.2
kill -INT $pr
sleep 1
ls "$T/ck2c" >"$T/ck2c.before" 2>/dev/null
t0=$(date +%s.%N)
kill -INT $pr
wait_exit $pr 20; rc=$WX
el=$(elapsed_since "$t0")
is "$rc" 130 "a second SIGINT: exit 130"
awk -v e="$el" 'BEGIN { exit !(e < 3) }'; ok $? "...at once (${el} s), not after the grace period or --timeout"
like "$(cat "$T/int2.out")" '\[stage [01]\] a second interrupt: stopping at once \(no checkpoint' "...the stages say they stop at once, without a checkpoint"
like "$(cat "$T/int2.out")" 'piperun: second interrupt: stopping every stage at once' "...and so does piperun"
is "$(ls "$T/ck2c" 2>/dev/null)" "$(cat "$T/ck2c.before")" "...no checkpoint was written"
gone "$stuck"; ok $? "...and the stuck stage is gone too"

# --- the first failure is reported, not the stages that lost it as a peer ------------------
for i in 1 2 3; do
    "$PIPERUN" "$G/bin" -- --threads 1 --steps 100000000 --log-every 500 >"$T/kill$i.out" 2>&1 &
    pr=$!
    wait_for "$T/kill$i.out" 'step 500/' 20
    kill -9 "$(pgrep -f "$G/bin/stage1" | head -1)"
    wait_exit $pr 20
    printf '%s ' "$WX" >>"$T/kills"
    grep '^piperun:' "$T/kill$i.out" >>"$T/killmsg"
done
is "$(cat "$T/kills")" "137 137 137 " "stage 1 killed mid-run, three times: piperun exits 137 each time"
is "$(sort -u "$T/killmsg")" "piperun: stage 1 killed by signal 9" "...reporting stage 1, never a stage that lost it"

# --- an arena larger than the memory allowed -----------------------------------------
B=$T/big
mkdir -p "$B"
printf 'model big\ninput x : f32[60000]\ntarget y : f32[60000]\ntrain {\n batch = 2 microbatches = 1\n loss = mse(sum) optimizer = sgd(lr = 1e-3, momentum = 0.9) seed = 1\n}\nl = linear(60000 -> 60000)\n' >"$B/m.pipe"
"$PIPEGEN" gen "$B/m.pipe" -o "$B" >"$B/gen.log" 2>&1 && build "$B"
ok $? "a model with a 40 GB arena generates and builds"
need=$(sed -n 's/^#define STAGE0_ARENA_BYTES INT64_C(\([0-9]*\)).*/\1/p' "$B"/*.h | head -1)
avail=$(awk '/MemAvailable/ { print $2 * 1024 }' /proc/meminfo)
if [ -n "$need" ] && awk -v n="$need" -v a="$avail" 'BEGIN { exit !(n > a) }'; then
    out=$(PIPE_RANK=0 PIPE_WORLD=1 timeout 20 "$B/bin/stage0" --steps 1 --threads 1 2>&1); rc=$?
    is "$rc" 1 "an arena larger than MemAvailable: exit 1 at start"
    like "$out" "stage 0: its arena needs $need bytes \([0-9.]+ GiB\) but this machine has only [0-9]+ bytes \([0-9.]+ GiB\) available \(MemAvailable\)" "with both numbers"
else
    echo "ok $((_n + 1)) # SKIP this machine has more memory ($avail) than the big arena (${need:-?})"; _n=$((_n + 1))
fi
# the same through the address-space limit (checked after MemAvailable)
out=$(sh -c "ulimit -v 400000; PIPE_RANK=0 PIPE_WORLD=1 timeout 20 '$B/bin/stage0' --steps 1 --threads 1" 2>&1); rc=$?
is "$rc" 1 "ulimit -v 400 MB: exit 1 at start"
like "$out" "stage 0: its arena needs $need bytes .* (available \(MemAvailable\)|RLIMIT_AS \(ulimit -v\) allows this process only [0-9]+ bytes)" "names the arena and the limit"
# room for the arena and little more: the GEMM threads need no large buffers
# (OpenBLAS, used before, reserved 128 MiB of address space per thread and
# waited forever at the first large GEMM when it could not)
X=$T/mlp1
mkdir -p "$X"
sed -e '/^split/d' "$TOP/examples/mlp.pipe" >"$X/m.pipe"
"$PIPEGEN" gen "$X/m.pipe" -o "$X" >"$X/gen.log" 2>&1 && build "$X"
ok $? "examples/mlp.pipe on one stage (512-wide GEMMs) builds"
out=$(sh -c "ulimit -v 300000; PIPE_RANK=0 PIPE_WORLD=1 timeout 60 '$X/bin/stage0' --steps 2 --threads 2" 2>&1); rc=$?
is "$rc" 0 "ulimit -v 300 MB with 2 GEMM threads: it trains"
out=$(sh -c "ulimit -v 300000; PIPE_RANK=0 PIPE_WORLD=1 timeout 60 '$X/bin/stage0' --steps 2 --threads 64" 2>&1); rc=$?
is "$rc" 1 "ulimit -v 300 MB with 64 GEMM threads (8 MiB stacks): exit 1 at start"
like "$out" "cannot start GEMM thread [0-9]+ of 64: Resource temporarily unavailable: the address-space limit \(ulimit -v\) allows this process [0-9.]+ MiB and each thread reserves a [0-9.]+ MiB stack in it" \
    "...naming the address-space limit, not only EAGAIN"
done_testing

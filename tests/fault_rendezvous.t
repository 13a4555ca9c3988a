#!/bin/sh
# tests/fault_rendezvous.t — rendezvous errors with real stage binaries started by
# hand: stages of two different models, a wrong world size, two processes
# claiming one rank, an unreachable master, the master's port in use.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh"
fault_tmpdir fault-rdv
G=$T/m2
gen_mlp "$G" 2
ok $? "mlp_small on 2 stages builds"
O=$T/o2
mkdir -p "$O"
sed -e '/# S[13]$/d' -e 's/^model mlp_small/model mlp_other/' "$TOP/tests/models/mlp_small.pipe" >"$O/m.pipe"
"$PIPEGEN" gen "$O/m.pipe" -o "$O" >/dev/null 2>&1 && build "$O"
ok $? "a second model (mlp_other) on 2 stages builds"
G3=$T/m3
gen_mlp "$G3" 3

# --- two models against one master -------------------------------------------
M=127.0.0.1:$(free_port)
start_stage "$G/bin" 0 2 "$M" "$T/a0.log" --steps 2 --connect-timeout 10
start_stage "$O/bin" 1 2 "$M" "$T/a1.log" --steps 2 --connect-timeout 10
wait_exit "$(cat "$T/a0.log.pid")" 15; r0=$WX
wait_exit "$(cat "$T/a1.log.pid")" 15; r1=$WX
[ "$r0" = 1 ] && [ "$r1" = 1 ]; ok $? "stages of different models: both exit 1 ($r0, $r1)"
like "$(cat "$T/a0.log")" "stage 1 was built from another model \(model 'mlp_other', expected 'mlp_small'\)" "the master names both models"
like "$(cat "$T/a1.log")" "rendezvous refused by master .*another model" "the other stage is told why"

# --- wrong world size ------------------------------------------------------------
M=127.0.0.1:$(free_port)
start_stage "$G/bin" 0 2 "$M" "$T/b0.log" --steps 2 --connect-timeout 2
PIPE_RANK=1 PIPE_WORLD=3 PIPE_MASTER=$M "$G/bin/stage1" --steps 2 >"$T/b1.log" 2>&1; r1=$?
wait_exit "$(cat "$T/b0.log.pid")" 10; r0=$WX
[ "$r0" = 1 ] && [ "$r1" = 1 ]; ok $? "wrong world size: exit 1 ($r0, $r1)"
like "$(cat "$T/b1.log")" 'was started as rank 1 of 3 .*start stage k as rank k of 2' "the stage says what it was started as"
like "$(cat "$T/b0.log")" 'only 1 of 2 stages reached the master within 2 s \(missing stage 1\)' "the master names the missing stage"

# --- two processes claim one rank ---------------------------------------------------
M=127.0.0.1:$(free_port)
start_stage "$G3/bin" 0 3 "$M" "$T/c0.log" --steps 2 --connect-timeout 10
start_stage "$G3/bin" 1 3 "$M" "$T/c1.log" --steps 2 --connect-timeout 10
start_stage "$G3/bin" 1 3 "$M" "$T/c2.log" --steps 2 --connect-timeout 10
for f in c0 c1 c2; do wait_exit "$(cat "$T/$f.log.pid")" 15; eval "r_$f=\$WX"; done
[ "$r_c0" = 1 ] && [ "$r_c1" = 1 ] && [ "$r_c2" = 1 ]; ok $? "duplicate rank: every process exits 1 ($r_c0, $r_c1, $r_c2)"
like "$(cat "$T/c0.log")" 'two processes claim stage 1 \(duplicate rank\)' "the master says two processes claim stage 1"

# --- unreachable master --------------------------------------------------------------
M=127.0.0.1:$(free_port)
t0=$(date +%s.%N)
PIPE_RANK=1 PIPE_WORLD=2 PIPE_MASTER=$M timeout 20 "$G/bin/stage1" --steps 2 --connect-timeout 2 >"$T/d1.log" 2>&1; r1=$?
el=$(elapsed_since "$t0")
is "$r1" 1 "unreachable master: exit 1"
like "$(cat "$T/d1.log")" "cannot reach master $M after 2 s: Connection refused" "retries, then names the master and the error"
awk -v e="$el" 'BEGIN { exit !(e >= 1.9 && e < 6) }'; ok $? "it retried for the connect timeout (${el} s)"

# --- the master's port is in use ---------------------------------------------------------
P=$(free_port)
"${PYTHON:-/usr/bin/python3}" -c "import socket, time; s = socket.socket(); s.bind(('0.0.0.0', $P)); s.listen(1); open('$T/held', 'w').close(); time.sleep(30)" &
echo $! >"$T/py.pid"
while [ ! -f "$T/held" ]; do sleep 0.1; done
PIPE_RANK=0 PIPE_WORLD=2 PIPE_MASTER=127.0.0.1:$P timeout 20 "$G/bin/stage0" --steps 2 >"$T/e0.log" 2>&1; r0=$?
is "$r0" 1 "port in use: exit 1"
like "$(cat "$T/e0.log")" "cannot listen on 0\.0\.0\.0:$P: Address already in use" "names the port and the error"
done_testing

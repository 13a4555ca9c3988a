#!/bin/sh
# tests/fault_rendezvous.t — rendezvous errors with real stage binaries started by
# hand: stages of two different models, a wrong world size, two processes
# claiming one rank, options that differ between stages, an unreachable master,
# a slow start (told every 10 s), a master whose handshake never completes, a
# stage that cannot open its mesh connections (an LD_PRELOAD shim on connect),
# the master's port in use; and strangers that must not harm a run: a stage of
# another run (another run id) on the same master port, a forged hello, silent
# connections; the master listening on loopback only when PIPE_MASTER says so.
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
PY=${PYTHON:-/usr/bin/python3}

# --- two models against one master -------------------------------------------
# one run (one PIPE_RUN_ID): the misfit fails the run at once, every stage told why
M=127.0.0.1:$(free_port)
export PIPE_RUN_ID=run-a
start_stage "$G/bin" 0 2 "$M" "$T/a0.log" --steps 2 --connect-timeout 10
start_stage "$O/bin" 1 2 "$M" "$T/a1.log" --steps 2 --connect-timeout 10
wait_exit "$(cat "$T/a0.log.pid")" 8; r0=$WX
wait_exit "$(cat "$T/a1.log.pid")" 8; r1=$WX
[ "$r0" = 1 ] && [ "$r1" = 1 ]; ok $? "stages of different models in one run: both exit 1 at once ($r0, $r1)"
like "$(cat "$T/a0.log")" "stage 1 was built from another model \(model 'mlp_other', expected 'mlp_small'\)" "the master names both models"
like "$(cat "$T/a1.log")" "rendezvous refused by master .*another model" "the other stage is told why"
unset PIPE_RUN_ID
# no run id at all: the misfit cannot be told from a stranger, so it alone is
# refused and the master waits for its stage 1 (and says what it refused)
M=127.0.0.1:$(free_port)
start_stage "$G/bin" 0 2 "$M" "$T/b0.log" --steps 2 --connect-timeout 3
start_stage "$O/bin" 1 2 "$M" "$T/b1.log" --steps 2 --connect-timeout 3
wait_exit "$(cat "$T/b1.log.pid")" 8; r1=$WX
wait_exit "$(cat "$T/b0.log.pid")" 10; r0=$WX
[ "$r0" = 1 ] && [ "$r1" = 1 ]; ok $? "without a run id: the misfit is refused, the master times out ($r0, $r1)"
like "$(cat "$T/b0.log")" "only 1 of 2 stages reached the master within 3 s \(missing stage 1\); refused: stage 1 was built from another model \(model 'mlp_other'" \
    "...naming what it refused"

# --- wrong world size ------------------------------------------------------------
M=127.0.0.1:$(free_port)
start_stage "$G/bin" 0 2 "$M" "$T/c0.log" --steps 2 --connect-timeout 2
PIPE_RANK=1 PIPE_WORLD=3 PIPE_MASTER=$M "$G/bin/stage1" --steps 2 >"$T/c1.log" 2>&1; r1=$?
wait_exit "$(cat "$T/c0.log.pid")" 10; r0=$WX
[ "$r0" = 1 ] && [ "$r1" = 1 ]; ok $? "wrong world size: exit 1 ($r0, $r1)"
like "$(cat "$T/c1.log")" 'was started as rank 1 of 3 \(PIPE_RANK\): the world must be 2 x D processes, D data-parallel replicas of the 2 stages' "the stage says what it was started as"
like "$(cat "$T/c0.log")" 'only 1 of 2 stages reached the master within 2 s \(missing stage 1\)' "the master names the missing stage"

# --- two processes claim one rank ---------------------------------------------------
M=127.0.0.1:$(free_port)
export PIPE_RUN_ID=run-d
start_stage "$G3/bin" 0 3 "$M" "$T/d0.log" --steps 2 --connect-timeout 10
start_stage "$G3/bin" 1 3 "$M" "$T/d1.log" --steps 2 --connect-timeout 10
start_stage "$G3/bin" 1 3 "$M" "$T/d2.log" --steps 2 --connect-timeout 10
for f in d0 d1 d2; do wait_exit "$(cat "$T/$f.log.pid")" 15; eval "r_$f=\$WX"; done
[ "$r_d0" = 1 ] && [ "$r_d1" = 1 ] && [ "$r_d2" = 1 ]; ok $? "duplicate rank in one run: every process exits 1 ($r_d0, $r_d1, $r_d2)"
like "$(cat "$T/d0.log")" 'two processes claim stage 1 \(duplicate rank\)' "the master says two processes claim stage 1"
unset PIPE_RUN_ID
# without run ids the second claimant alone is refused and the run goes on
M=127.0.0.1:$(free_port)
start_stage "$G3/bin" 0 3 "$M" "$T/e0.log" --steps 2 --connect-timeout 10
start_stage "$G3/bin" 1 3 "$M" "$T/e1.log" --steps 2 --connect-timeout 10
sleep 1
start_stage "$G3/bin" 1 3 "$M" "$T/e2.log" --steps 2 --connect-timeout 10
wait_exit "$(cat "$T/e2.log.pid")" 10; r2=$WX
start_stage "$G3/bin" 2 3 "$M" "$T/e3.log" --steps 2 --connect-timeout 10
for f in e0 e1 e3; do wait_exit "$(cat "$T/$f.log.pid")" 15; eval "r_$f=\$WX"; done
[ "$r2" = 1 ] && [ "$r_e0" = 0 ] && [ "$r_e1" = 0 ] && [ "$r_e3" = 0 ]
ok $? "no run id: a second process claiming stage 1 is refused ($r2), the run completes ($r_e0, $r_e1, $r_e3)"
like "$(cat "$T/e2.log")" 'rendezvous refused by master .*two processes claim stage 1' "...and the refused one is told why"

# --- options that differ between stages ---------------------------------------------
# mismatch START-ARGS-0 START-ARGS-1 REGEX LABEL: one run started by hand
mismatch() {
    M=127.0.0.1:$(free_port)
    export PIPE_RUN_ID=run-m
    # shellcheck disable=SC2086 # lists of options
    start_stage "$G/bin" 0 2 "$M" "$T/m0.log" --connect-timeout 10 $1
    # shellcheck disable=SC2086
    start_stage "$G/bin" 1 2 "$M" "$T/m1.log" --connect-timeout 10 $2
    unset PIPE_RUN_ID
    wait_exit "$(cat "$T/m0.log.pid")" 15; m0=$WX
    wait_exit "$(cat "$T/m1.log.pid")" 15; m1=$WX
    [ "$m0" = 1 ] && [ "$m1" = 1 ] && ! grep -q 'step 1/' "$T/m1.log"; ok $? "$4: both stages exit 1 before any step ($m0, $m1)"
    like "$(cat "$T/m0.log" "$T/m1.log")" "$3" "...$4 named with both values"
}
mismatch "--steps 5" "--steps 6" 'stage 1 was started with --steps 6 but stage 0 with --steps 5: give every stage the same --steps' \
    "different --steps"
mismatch "--steps 5 --checkpoint-dir $T/ck --save-every 2" "--steps 5" \
    "stage 1 was started without --checkpoint-dir but stage 0 with --checkpoint-dir $T/ck" "--checkpoint-dir on one stage only"
mismatch "--steps 5 --skip-nonfinite --trace $T/t.json" "--steps 5 --trace $T/t.json" \
    'stage 1 was started without --skip-nonfinite but stage 0 with --skip-nonfinite:' "--skip-nonfinite on one stage only"
mismatch "--steps 5 --trace $T/t.json" "--steps 5 --trace $T/u.json" \
    "stage 1 was started with --trace $T/u\\.json but stage 0 with --trace $T/t\\.json" "different --trace files"

# --- unreachable master --------------------------------------------------------------
M=127.0.0.1:$(free_port)
t0=$(date +%s.%N)
PIPE_RANK=1 PIPE_WORLD=2 PIPE_MASTER=$M timeout 20 "$G/bin/stage1" --steps 2 --connect-timeout 2 >"$T/f1.log" 2>&1; r1=$?
el=$(elapsed_since "$t0")
is "$r1" 1 "unreachable master: exit 1"
like "$(cat "$T/f1.log")" "cannot reach master $M after 2 s: Connection refused" "retries, then names the master and the error"
awk -v e="$el" 'BEGIN { exit !(e >= 1.9 && e < 6) }'; ok $? "it retried for the connect timeout (${el} s)"

# --- a slow start is told, not waited out in silence -----------------------------------
# stage 1 alone for 11 s, then stage 0; stage 2 never comes: every 10 s of
# waiting each says what it waits for, then the timeout fails the run
M=127.0.0.1:$(free_port)
export PIPE_RUN_ID=run-slow
start_stage "$G3/bin" 1 3 "$M" "$T/w1.log" --steps 2 --connect-timeout 24
sleep 11
start_stage "$G3/bin" 0 3 "$M" "$T/w0.log" --steps 2 --connect-timeout 12
wait_exit "$(cat "$T/w0.log.pid")" 32; r0=$WX
wait_exit "$(cat "$T/w1.log.pid")" 10; r1=$WX
unset PIPE_RUN_ID
[ "$r0" = 1 ] && [ "$r1" = 1 ]; ok $? "a stage that never comes: both exit 1 after the master's timeout ($r0, $r1)"
like "$(cat "$T/w1.log")" "stage 1: master $M not reachable yet after 1[0-9] s \\(Connection refused, [0-9]+ tries\\); trying until 24 s \\(--connect-timeout\\)" \
    "a stage still trying to reach the master says so after 10 s"
like "$(cat "$T/w0.log")" "stage 0: 2 of 3 stages have reached the master at $M after 1[0-9] s \\(missing stage 2\\); waiting until 12 s \\(--connect-timeout\\)" \
    "the master still waiting says who is missing after 10 s"
like "$(cat "$T/w0.log")" "only 2 of 3 stages reached the master within 12 s \\(missing stage 2\\)" "...then times out naming it"

# --- a master whose handshake never completes (its accept queue full: SYNs dropped) -----
# each attempt waits 5 s at most, then a fresh socket tries again, and the wait is told
"$PY" -c "import socket, sys, time
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(0)
held = []
for i in range(3):
    c = socket.socket(); c.setblocking(False); c.connect_ex(s.getsockname()); held.append(c)
time.sleep(0.5); open(sys.argv[1], 'w').write(str(s.getsockname()[1])); time.sleep(30)" "$T/fq.port" &
echo $! >"$T/fq.pid"
while [ ! -s "$T/fq.port" ]; do sleep 0.1; done
M=127.0.0.1:$(cat "$T/fq.port")
PIPE_RANK=1 PIPE_WORLD=2 PIPE_MASTER=$M timeout 30 "$G/bin/stage1" --steps 2 --connect-timeout 12 >"$T/q1.log" 2>&1; r1=$?
kill "$(cat "$T/fq.pid")" 2>/dev/null
is "$r1" 1 "a master that never completes the handshake: exit 1 at the connect timeout"
like "$(cat "$T/q1.log")" "master $M not reachable yet after 1[0-9] s \\(Connection timed out, [2-9] tries\\)" \
    "the attempts are retried from fresh sockets and the wait is told"
like "$(cat "$T/q1.log")" "cannot reach master $M after 12 s: Connection timed out" "...then it names the master and the error"

# --- the master's port is in use ---------------------------------------------------------
P=$(free_port)
"$PY" -c "import socket, time; s = socket.socket(); s.bind(('0.0.0.0', $P)); s.listen(1); open('$T/held', 'w').close(); time.sleep(30)" &
echo $! >"$T/py.pid"
while [ ! -f "$T/held" ]; do sleep 0.1; done
PIPE_RANK=0 PIPE_WORLD=2 PIPE_MASTER=127.0.0.1:$P timeout 20 "$G/bin/stage0" --steps 2 >"$T/g0.log" 2>&1; r0=$?
is "$r0" 1 "port in use: exit 1"
like "$(cat "$T/g0.log")" "cannot listen on 127\\.0\\.0\\.1:$P: Address already in use" "names the address, the port and the error"
kill "$(cat "$T/py.pid")" 2>/dev/null

# --- strangers do not harm a run -------------------------------------------------------
# run A's stage 0 (started by hand with its id) waits at its master; meanwhile
# run B (piperun, its own random id) is started on the same PIPE_MASTER
P=$(free_port)
M=127.0.0.1:$P
export PIPE_RUN_ID=run-A
start_stage "$G/bin" 0 2 "$M" "$T/A0.log" --steps 3 --connect-timeout 30
unset PIPE_RUN_ID
while ! ss -Hltn "sport = :$P" 2>/dev/null | grep -q .; do sleep 0.1; done
is "$(ss -Hltn "sport = :$P" | awk '{ print $4 }')" "127.0.0.1:$P" "the master listens on the loopback address PIPE_MASTER names, not on every interface"
PIPE_MASTER=$M timeout 60 "$PIPERUN" "$G/bin" -- --threads 1 --steps 3 --connect-timeout 5 >"$T/B.log" 2>&1; rb=$?
[ "$rb" != 0 ]; ok $? "run B (piperun) on run A's master port fails ($rb)"
# whichever of run B's stages fails first says why (piperun then stops the other,
# on a loaded machine before stage 0 got as far as its listen): stage 0 cannot
# listen on the port, or stage 1 reached run A's master and was refused there
like "$(cat "$T/B.log")" "\\[stage 0\\] cannot listen on 127\\.0\\.0\\.1:$P: Address already in use|\\[stage 1\\] master $M was started without a run token but this stage has one \\(PIPE_RUN_TOKEN\\)" \
    "...its stage 0 cannot listen there, or its stage 1 (holding piperun's token) will not greet run A's master (none)"
PIPE_RUN_ID=run-B PIPE_RANK=1 PIPE_WORLD=2 PIPE_MASTER=$M timeout 20 "$G/bin/stage1" --threads 1 --steps 3 >"$T/B1.log" 2>&1; rb=$?
is "$rb" 1 "a stage 1 of run B that reaches run A's master: exit 1"
like "$(cat "$T/B1.log")" "stage 1: rendezvous refused by master $M: stage 0 at this address belongs to another run than this stage's \\(run run-B\\): two runs share the master port $P" \
    "...refused as a stranger, saying why"
! grep -q 'run-A' "$T/B1.log"; ok $? "...without being told run A's id"
like "$(cat "$T/A0.log")" "stage 0: refused a process at 127\\.0\\.0\\.1 claiming stage 1 of another run .*this run goes on" \
    "run A's master says what it refused"
# a forged hello (protocol 2, no run id, claiming stage 1) and ten silent connections
"$PY" - "$P" <<'PY' &
import socket, struct, sys, time
port = int(sys.argv[1])
idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
h = struct.pack("<IIIIQII", 0x484e4750, 2, 1, 2, 0, 1, 0) + b"mlp_small".ljust(128, b"\0") + b"".ljust(64, b"\0")
f = socket.create_connection(("127.0.0.1", port))
f.sendall(h)
f.recv(1000)
time.sleep(8)
PY
echo $! >"$T/forge.pid"
sleep 1
t0=$(date +%s.%N)
export PIPE_RUN_ID=run-A
start_stage "$G/bin" 1 2 "$M" "$T/A1.log" --steps 3 --connect-timeout 30
unset PIPE_RUN_ID
wait_exit "$(cat "$T/A1.log.pid")" 30; a1=$WX
el=$(elapsed_since "$t0")
wait_exit "$(cat "$T/A0.log.pid")" 30; a0=$WX
[ "$a0" = 0 ] && [ "$a1" = 0 ]; ok $? "run A completes after run B, a forged hello and ten silent connections ($a0, $a1)"
awk -v e="$el" 'BEGIN { exit !(e < 4.5) }'; ok $? "...its stage 1 was not held up by the silent connections (${el} s; each is dropped after 5 s)"
like "$(cat "$T/A1.log")" 'final loss' "...and trains"

# --- a forged greeting with everything public right (it answers the challenge
# of a run without a token) and an agreement length over the limit (or one
# that disagrees with the bytes sent) must be dropped, never parsed: it once
# made stage 0 read past its buffer and die by SIGSEGV
P=$(free_port)
M=127.0.0.1:$P
hash=$("$G/bin/stage0" --version | sed -n 's/.*plan hash \([0-9a-f]*\).*/\1/p')
export PIPE_RUN_ID=run-F
start_stage "$G/bin" 0 2 "$M" "$T/F0.log" --steps 3 --connect-timeout 30
unset PIPE_RUN_ID
while ! ss -Hltn "sport = :$P" 2>/dev/null | grep -q .; do sleep 0.1; done
"$PY" - "$P" "$hash" <<'PY'
import socket, struct, sys, time
port, h = int(sys.argv[1]), int(sys.argv[2], 16)
def hello(n):
    return (struct.pack("<IIIIQIIII", 0x484e4750, 3, 1, 2, h, 1, n, 4242, 0) + b"mlp_small".ljust(128, b"\0")
            + b"run-F".ljust(64, b"\0") + b"forger".ljust(64, b"\0"))
for n, extra in ((0xffffffff, b""), ((1 << 20) + 1, b"x" * 4096), (0x80000000, b"")):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(3)
    c = s.recv(44)  # the challenge: no token in this run, so a response without one passes
    s.sendall(struct.pack("<III", 0x414e4750, 3, 0) + b"\1" * 32 + b"\0" * 32 + hello(n) + extra)
    try: s.recv(100)
    except Exception: pass
    s.close()
time.sleep(0.5)
PY
kill -0 "$(cat "$T/F0.log.pid")" 2>/dev/null; ok $? "stage 0 survives forged greetings whose agreement length is over the limit"
export PIPE_RUN_ID=run-F
start_stage "$G/bin" 1 2 "$M" "$T/F1.log" --steps 3 --connect-timeout 30
unset PIPE_RUN_ID
wait_exit "$(cat "$T/F1.log.pid")" 30; f1=$WX
wait_exit "$(cat "$T/F0.log.pid")" 30; f0=$WX
[ "$f0" = 0 ] && [ "$f1" = 0 ]; ok $? "...and the run's real stage 1 then joins and the run completes ($f0, $f1)"

# run_completes X NAME: stage 1 joins the stage 0 started with log $T/X0.log
# (on $M, as $G/bin); both must exit 0
run_completes() {
    start_stage "$G/bin" 1 2 "$M" "$T/${1}1.log" --steps 3 --connect-timeout 30
    wait_exit "$(cat "$T/${1}1.log.pid")" 30; _c1=$WX
    wait_exit "$(cat "$T/${1}0.log.pid")" 30; _c0=$WX
    [ "$_c0" = 0 ] && [ "$_c1" = 0 ]; ok $? "$2 ($_c0, $_c1)"
}

# --- a greeting claiming rank 2^31 (read as a negative int, it passed the
# range check and indexed stage 0's table of peers: SIGSEGV); stage 0 has no
# run id, so the misfit is refused alone
P=$(free_port)
M=127.0.0.1:$P
start_stage "$G/bin" 0 2 "$M" "$T/R0.log" --steps 3 --connect-timeout 30
while ! ss -Hltn "sport = :$P" 2>/dev/null | grep -q .; do sleep 0.1; done
"$PY" - "$P" "$hash" >"$T/R.py.log" 2>&1 <<'PY'
import socket, struct, sys, time
port, h = int(sys.argv[1]), int(sys.argv[2], 16)
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(3)
c = s.recv(44)
s.sendall(struct.pack("<III", 0x414e4750, 3, 0) + b"\1" * 32 + b"\0" * 32
          + struct.pack("<IIIIQIIII", 0x484e4750, 3, 0x80000000, 2, h, 1, 0, 4242, 0)
          + b"mlp_small".ljust(128, b"\0") + b"".ljust(64, b"\0") + b"forger".ljust(64, b"\0"))
buf = b""   # the refusal may come in more than one segment: read to the close
try:
    while True:
        got = s.recv(1000)
        if not got: break
        buf += got
except Exception as e: print(e)
print(buf[44:].decode(errors="replace"))
s.close()
time.sleep(0.5)
PY
kill -0 "$(cat "$T/R0.log.pid")" 2>/dev/null; ok $? "stage 0 survives a greeting that claims rank 2^31"
like "$(cat "$T/R.py.log")" "a process claims stage 2147483648, which is not a stage of the run at this address" "...refused, saying so"
run_completes R "...and the run completes"

# --- no token on an address other than loopback: stage 0 says what that means
ext=$(ip -4 -o addr show scope global 2>/dev/null | awk '{ sub(/\/.*/, "", $4); print $4; exit }')
if [ -z "$ext" ]; then
    skip "this host has no IPv4 address but loopback"
    skip "this host has no IPv4 address but loopback"
else
    P=$(free_port)
    M=$ext:$P
    start_stage "$G/bin" 0 2 "$M" "$T/N0.log" --steps 3 --connect-timeout 30
    start_stage "$G/bin" 1 2 "$M" "$T/N1.log" --steps 3 --connect-timeout 30
    wait_exit "$(cat "$T/N1.log.pid")" 30; n1=$WX
    wait_exit "$(cat "$T/N0.log.pid")" 30; n0=$WX
    like "$(cat "$T/N0.log")" "stage 0: note: no run token \\(PIPE_RUN_TOKEN\\): any process that reaches $ext:$P may take part in this run's start-up" \
        "without a token on $ext (not loopback), stage 0 says anyone reaching it may take part"
    [ "$n0" = 0 ] && [ "$n1" = 0 ]; ok $? "...and the run works as before ($n0, $n1)"
fi
! grep -q 'no run token' "$T/R0.log"; ok $? "...on loopback it says nothing"

# --- the run token: nothing but the response to the challenge is read from a
# process that does not hold it, and it is told nothing of the run
P=$(free_port)
M=127.0.0.1:$P
export PIPE_RUN_ID=run-K PIPE_RUN_TOKEN=kkkkkkkkkkkkkkkkkkkkkkkk
start_stage "$G/bin" 0 2 "$M" "$T/K0.log" --steps 3 --connect-timeout 30
while ! ss -Hltn "sport = :$P" 2>/dev/null | grep -q .; do sleep 0.1; done
"$PY" - "$P" "$hash" >"$T/K.py.log" 2>&1 <<'PY'
import socket, struct, sys
port, h = int(sys.argv[1]), int(sys.argv[2], 16)
hello = (struct.pack("<IIIIQIIII", 0x484e4750, 3, 1, 2, h, 1, 0, 4242, 0) + b"mlp_small".ljust(128, b"\0")
         + b"run-K".ljust(64, b"\0") + b"forger".ljust(64, b"\0"))
def knock(first):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(3)
    c = s.recv(44)
    s.sendall(first + hello)
    got = b""
    try:
        while True:
            b = s.recv(4096)
            if not b: break
            got += b
    except Exception: pass
    s.close()
    return c, got
# everything public right, a response claiming a token with a made-up MAC
c, got = knock(struct.pack("<III", 0x414e4750, 3, 1) + b"\1" * 32 + b"\2" * 32)
print("flags", struct.unpack("<I", c[8:12])[0])
print("answer", got[44:].decode(errors="replace"))
# a hello straight away, as protocol 2 sent it: never read as one
c, got = knock(b"")
print("answer2", got[44:].decode(errors="replace"))
PY
like "$(cat "$T/K.py.log")" "flags 1" "a run with a token says so in its challenge"
like "$(cat "$T/K.py.log")" "answer this process's run token is not the token of the run at this address" \
    "a wrong MAC is refused at once, saying only that"
! grep -Eq "$hash|mlp_small|run-K" "$T/K.py.log"; ok $? "...without a word of the model, the plan hash or the run id"
like "$(cat "$T/K0.log")" "stage 0: refused a connection from 127\\.0\\.0\\.1: its run token is not this run's" \
    "stage 0 says what it refused"
PIPE_RUN_TOKEN=another-token-of-20-bytes PIPE_RANK=1 PIPE_WORLD=2 PIPE_MASTER=$M timeout 20 "$G/bin/stage1" --threads 1 \
    --steps 3 >"$T/K2.log" 2>&1; k2=$?
[ "$k2" = 1 ]; ok $? "a stage with another token: exit 1 ($k2)"
like "$(cat "$T/K2.log")" "stage 1: master $M refused this stage's run token: give every stage of the run the same token \\(PIPE_RUN_TOKEN\\)" \
    "...saying its token was refused"
run_completes K "the holders of the token then run"
unset PIPE_RUN_ID PIPE_RUN_TOKEN

# --- latecomers and duplicates hear the reason at once, during the whole run
P=$(free_port)
M=127.0.0.1:$P
export PIPE_RUN_ID=run-L PIPE_RUN_TOKEN=llllllllllllllllllllllll
start_stage "$G/bin" 0 2 "$M" "$T/L0.log" --steps 100000000 --connect-timeout 30
start_stage "$G/bin" 1 2 "$M" "$T/L1.log" --steps 100000000 --connect-timeout 30
wait_for "$T/L1.log" 'step 1/' 30
t0=$(date +%s.%N)
PIPE_RANK=1 PIPE_WORLD=2 PIPE_MASTER=$M timeout 60 "$G/bin/stage1" --threads 1 --steps 100000000 >"$T/L2.log" 2>&1; l2=$?
el=$(elapsed_since "$t0")
[ "$l2" = 1 ]; ok $? "a second stage 1 while the run trains: exit 1 ($l2)"
awk -v e="$el" 'BEGIN { exit !(e < 5) }'; ok $? "...at once (${el} s), not after its connect timeout"
like "$(cat "$T/L2.log")" "stage 1: rendezvous refused by master $M: rank 1 is already taken by [^:]+:$(cat "$T/L1.log.pid"): the run at this address is under way" \
    "...told which process holds rank 1 (host:pid)"
like "$(cat "$T/L0.log")" "stage 0: refused a process at 127\\.0\\.0\\.1 \\([^,]*, pid [0-9]+\\): rank 1 is already taken by .*; this run goes on" \
    "stage 0 says so and trains on"
kill -0 "$(cat "$T/L0.log.pid")" && kill -0 "$(cat "$T/L1.log.pid")"; ok $? "...and both stages of the run still run"
kill "$(cat "$T/L0.log.pid")" "$(cat "$T/L1.log.pid")" 2>/dev/null
wait_exit "$(cat "$T/L0.log.pid")" 10
wait_exit "$(cat "$T/L1.log.pid")" 10

# stage 0 fails at start-up (a --save folder that does not exist): a stage
# started after that hears why at once, and stage 0 leaves once it is told
P=$(free_port)
M=127.0.0.1:$P
start_stage "$G/bin" 0 2 "$M" "$T/S0.log" --steps 3 --save "$T/no/such/w.st" --connect-timeout 30
wait_for "$T/S0.log" 'telling the 1 stage not yet told why the run failed' 20; ok $? "stage 0 fails its start-up and waits to tell stage 1"
t0=$(date +%s.%N)
PIPE_RANK=1 PIPE_WORLD=2 PIPE_MASTER=$M timeout 60 "$G/bin/stage1" --threads 1 --steps 3 --save "$T/no/such/w.st" >"$T/S1.log" 2>&1; s1=$?
el=$(elapsed_since "$t0")
wait_exit "$(cat "$T/S0.log.pid")" 10; s0=$WX
[ "$s0" = 2 ] && [ "$s1" = 1 ]; ok $? "stage 0 exits 2 (nothing was run), the latecomer 1 ($s0, $s1)"
awk -v e="$el" 'BEGIN { exit !(e < 5) }'; ok $? "...the latecomer at once (${el} s), not after its connect timeout"
like "$(cat "$T/S1.log")" "stage 1: master $M: the run failed at start-up: --save $T/no/such/w\\.st cannot be written: the folder $T/no/such does not exist" \
    "...told the cause"
# under piperun the stages that hear it give way: the run's status is stage 0's
"$PIPERUN" "$G/bin" -- --threads 1 --steps 3 --save "$T/no/such/w.st" >"$T/S.log" 2>&1; sr=$?
[ "$sr" = 2 ]; ok $? "piperun: stage 0's start-up failure is the run's status ($sr)"
like "$(cat "$T/S.log")" "piperun: stage 0 exited with status 2" "...piperun names stage 0"
unset PIPE_RUN_ID PIPE_RUN_TOKEN

# --- a higher stage that never opens its mesh connection ---------------------------
# stage 2 reaches the master but every other connect() fails (an LD_PRELOAD
# shim): stage 1 waits for it, says so after 10 s, then names it
cat >"$T/refuse.c" <<'CEOF'
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
int connect(int fd, const struct sockaddr *a, socklen_t len)
{
    static int (*real)(int, const struct sockaddr *, socklen_t);
    const char *only = getenv("PG_TEST_ONLY_PORT");
    if (only && a && a->sa_family == AF_INET && ntohs(((const struct sockaddr_in *)a)->sin_port) != atoi(only)) {
        errno = ECONNREFUSED;
        return -1;
    }
    if (!real)
        real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
    return real(fd, a, len);
}
CEOF
if ${CC:-cc} -shared -fPIC -o "$T/refuse.so" "$T/refuse.c" -ldl 2>"$T/refuse.err"; then
    P=$(free_port)
    M=127.0.0.1:$P
    export PIPE_RUN_ID=run-mesh
    start_stage "$G3/bin" 0 3 "$M" "$T/h0.log" --steps 2 --connect-timeout 3
    start_stage "$G3/bin" 1 3 "$M" "$T/h1.log" --steps 2 --connect-timeout 3
    LD_PRELOAD=$T/refuse.so PG_TEST_ONLY_PORT=$P start_stage "$G3/bin" 2 3 "$M" "$T/h2.log" --steps 2 --connect-timeout 3
    wait_exit "$(cat "$T/h1.log.pid")" 25; r1=$WX
    wait_exit "$(cat "$T/h2.log.pid")" 10; r2=$WX
    wait_exit "$(cat "$T/h0.log.pid")" 25; r0=$WX
    unset PIPE_RUN_ID
    [ "$r0" = 1 ] && [ "$r1" = 1 ] && [ "$r2" = 1 ]; ok $? "a stage that cannot open its mesh connection: every stage exits 1 ($r0, $r1, $r2)"
    like "$(cat "$T/h2.log")" "stage 2: cannot connect to stage 1 at 127\\.0\\.0\\.1:[0-9]+: Connection refused" "...that stage names the stage it cannot reach"
    like "$(cat "$T/h1.log")" "stage 1: stage 2 of the run not connected to this stage yet after 1[0-9] s; waiting until 13 s" \
        "the stage waiting for it says so after 10 s"
    like "$(cat "$T/h1.log")" "stage 1: stage 2 of the run did not connect to this stage within 13 s" "...then names it"
else
    ok 1 "the connect() shim builds"; sed 's/^/# /' "$T/refuse.err"
fi
done_testing

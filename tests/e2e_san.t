#!/bin/sh
# tests/e2e_san.t — the stage runtime under ASan and UBSan. The other end-to-end
# tests link the stage programs against build/libpgrt_cpu.a; here they are built
# with -fsanitize=address,undefined -fno-sanitize-recover=undefined against
# build-san/libpgrt_cpu.a and launched by build-san/piperun, a few steps each,
# over as much of the runtime as fits in a short run (about 80% of its lines):
#  - mlp_small on 3 stages (1f1b, checkpoint except_last, 5 uneven micro-batches)
#    with --trace, --profile, --save and --save-grads: final loss, saved weights
#    and gradients byte-identical to the plain build's (the sanitizers must not
#    change the arithmetic); likewise a GPT with odd sizes below;
#  - --checkpoint-dir/--save-every then --resume (bitwise equal to a straight
#    run), a corrupted checkpoint refused, the checkpoints resumed on 2 stages
#    (bitwise equal to their straight run; a missing tensor and another model
#    refused), --load, --save-on-exit on SIGTERM;
#  - resmlp_small with its skip across the splits (1f1b always with weight decay;
#    zb1 never), a concat skip on gpipe, batch norm (deferred and per micro-batch)
#    on interleaved(2), on 4 stages and with 1-row micro-batches;
#  - skips_far on interleaved(2) over 3 stages (skips crossing rounds);
#  - gpt_tiny (dropout added) on interleaved(2) with its tie transmitted; on zbv; on zb1
#    with it replicated (PIPE_CHECK_TIES=1), a cosine schedule, trace and profile;
#    with odd sizes (d 70, vocab 37, seq 5: every kernel's tail) on gpipe; all
#    with --generate; lm_tiny on a token stream (pipedata text/bytes), --generate
#    --prompt, --load --steps 0;
#  - the trainer: eval_cls (shuffled, data in two shards from `pipedata csv`)
#    with an evaluation set and --metrics, then --predict: eval lines,
#    final loss and predictions byte-identical to the plain build's;
#  - failures: a peer killed with SIGKILL (by hand and under piperun) or stopped
#    (--timeout): the survivors exit 1; a second SIGINT while a stage is stuck;
#    Ctrl-Z then SIGCONT past --timeout; a stage of another model at the
#    rendezvous, options that differ, a stranger of another run; a bad
#    PIPE_MASTER; bad data files (size, magic, shape, token ids, class ids, NaN
#    targets, --data alone, unpaired sample counts, a FIFO, a file truncated
#    during the run; values near the float limit stopped or skipped by the
#    gradient verdict, a stream shorter than a window); a missing, truncated,
#    mismatched, overlapping or FIFO --load file; --resume past --steps, a fresh
#    run into another run's checkpoints, --replace-checkpoints, LATEST first;
#    usage errors; piperun relaying a line longer than its buffer and a failing
#    stage.
# Every run must exit as expected and no output may hold "ERROR: AddressSanitizer",
# "runtime error:" or "LeakSanitizer" (ASAN_OPTIONS=detect_leaks=1). LeakSanitizer
# works in this container; the first test checks that it reports a leaking program
# (it cannot run under ptrace, e.g. a debugger or strace: that test then fails).
# Processes killed by a signal exit without a leak check.
# Every model is generated with `pipegen gen --guard-bytes 64`: 64 free bytes
# before the first arena buffer and after each, and the stage files list the
# buffers, whose every other arena byte the sanitized runtime poisons. So a
# kernel (or the runtime: data, messages, optimizer, checkpoints, --generate)
# reading or writing past one tensor's buffer into the next is reported, to the
# exact byte of its end; a test stores one float just past a buffer from the
# generated code (reported) and just inside it (not). Not covered: overruns
# inside one buffer (between the slots of a slot buffer, between the tensors of
# a frame). The GEMM (runtime/cpu/gemm.c) is instrumented like every kernel.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh"
. "$TOP/tests/lib_lm.sh"
T=$(mktemp -d /tmp/pg-e2e-san.XXXXXX)
cleanup() {
    for f in "$T"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
SAN=$TOP/build-san
SANFLAGS="-g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1
export OPENBLAS_NUM_THREADS=1
SPIPERUN=$SAN/piperun
SPIPEDATA=$SAN/pipedata
for f in "$SAN/libpgrt_cpu.a" "$SPIPERUN" "$SPIPEDATA"; do
    [ -e "$f" ] || { echo "1..0 # SKIP $f missing: make SAN=1 san-all"; exit 0; }
done
SANRE='ERROR: AddressSanitizer|runtime error:|LeakSanitizer'
# every model below is generated with guard gaps between its arena buffers
E2E_GEN_FLAGS="--guard-bytes 64"

# LeakSanitizer itself: a program that leaks must be reported here
printf '#include <stdlib.h>\nint main(void) { void *volatile p = malloc(77); p = 0; return p != 0; }\n' >"$T/leak.c"
# shellcheck disable=SC2086 # SANFLAGS is a list of flags
$CC $SANFLAGS -o "$T/leak" "$T/leak.c" && "$T/leak" >"$T/leak.out" 2>&1
grep -q 'ERROR: LeakSanitizer: detected memory leaks' "$T/leak.out"
ok $? "LeakSanitizer reports a leak in this environment (if not: ptrace or the container blocks it)"

# sbuild GEN: every stage of GEN built with the sanitizers against build-san's
# runtime into GEN/bin (RTLIB restored after: the plain builds use build/'s)
sbuild() {
    _so=$RTLIB
    RTLIB=$SAN/libpgrt_cpu.a
    # shellcheck disable=SC2086 # SANFLAGS is a list of flags
    build "$1" $SANFLAGS -Wall -Wextra -Werror
    _sr=$?
    RTLIB=$_so
    return $_sr
}
# sgen DIR MODEL DEL SCHEDULE CKPT [SED-ARG...]: e2e_gen, then sbuild DIR/gen
sgen() {
    _sd=$1
    e2e_gen "$@" && sbuild "$_sd/gen"
}

# srun NAME WANT BIN [stage args]: the sanitized stages of BIN under build-san's
# piperun, output in $T/NAME.out; one test: exit status WANT and no sanitizer report
srun() {
    _sn=$1 _sw=$2 _sb=$3
    shift 3
    timeout 60 "$SPIPERUN" "$_sb" -- --threads 1 "$@" >"$T/$_sn.out" 2>&1
    san_check "$_sn" "$?" "$_sw"
}
# san_check NAME RC WANT: the test that $T/NAME.out ended with status WANT, clean
san_check() {
    if [ "$2" = "$3" ] && ! grep -Eq "$SANRE" "$T/$1.out"; then
        echo "ok $((_n + 1)) - $1: exit $3, no sanitizer report"
    else
        echo "not ok $((_n + 1)) - $1: exit $2 (want $3), no sanitizer report"
        _fail=$((_fail + 1))
        grep -E -A30 "$SANRE" "$T/$1.out" | head -60 | sed 's/^/# /'
        tail -5 "$T/$1.out" | sed 's/^/# /'
    fi
    _n=$((_n + 1))
}
final() { grep 'final loss' "$1" | sed 's/^\[stage [0-9]*\] //'; }
# (the generation line's time and rate left out: they are the clock's, not the model's)
sample() { grep -A100 '^\[stage [0-9]*\] sample: ' "$1" | grep -v 'bubble\|throughput\|started as replica ' |
    sed -e 's/^\[stage [0-9]*\] //' -e 's/ in [0-9.e+-]* s ([0-9.e+-]* tokens\/s)//'; }

# --- mlp_small on 3 stages: trace, profile, save, save-grads; against the plain build --
M=$T/mlp3
sgen "$M" mlp_small '/# S2$/d' 1f1b except_last
ok $? "mlp_small on 3 stages builds with the sanitizers"
srun mlp3 0 "$M/gen/bin" --steps 5 --trace-steps 3 --trace "$T/mlp3.json" --profile "$T/mlp3.prof" \
    --save "$T/mlp3.st" --save-grads "$T/mlp3.grads"
[ -s "$T/mlp3.json" ] && [ -s "$T/mlp3.prof" ] && [ -s "$T/mlp3.st" ] && [ -s "$T/mlp3.grads" ]
ok $? "mlp3: trace, profile, weights and gradients written"
# plain NAME GEN [stage args]: GEN's stage programs built plainly against build/'s
# runtime into $T/NAME, run by build/piperun ($PIPERUN), output in $T/NAME.out
plain() {
    _pn=$1 _pg=$2
    shift 2
    mkdir -p "$T/$_pn"
    cp "$_pg"/*.c "$_pg"/*.h "$T/$_pn/" && build "$T/$_pn" -Wall -Wextra -Werror &&
        timeout 60 "${PIPERUN:?}" "$T/$_pn/bin" -- --threads 1 "$@" >"$T/$_pn.out" 2>&1
}
plain plain "$M/gen" --steps 5 --save "$T/plain.st" --save-grads "$T/plain.grads"
ok $? "the same stages from the plain build train"
is "$(final "$T/mlp3.out")" "$(final "$T/plain.out")" "sanitized and plain final loss are the same text"
cmp -s "$T/mlp3.st" "$T/plain.st" && cmp -s "$T/mlp3.grads" "$T/plain.grads"
ok $? "sanitized and plain saved weights and gradients are byte-identical"

# --- guard gaps: a write one float past a buffer is reported ---------------------------
# poke NAME GEN AT: GEN's stages into $T/NAME with a float stored at arena byte AT
# at the start of stage 0's first forward, built with the sanitizers
poke() {
    mkdir -p "$T/$1"
    cp "$2"/*.c "$2"/*.h "$T/$1/" &&
        sed -i "/^static int fwd_c0(/{n;a\\
    ((float *)(A + $3))[0] = 0.5f; /* tests/e2e_san.t: a stray write */
}" "$T/$1/stage0.c" && grep -q 'a stray write' "$T/$1/stage0.c" && sbuild "$T/$1"
}
# stage 0's first arena buffer (parameter layer0.weight), {offset, bytes}
# shellcheck disable=SC2046 # two numbers
set -- $(sed -n '/^static const pg_arena_buf arena_bufs/{n;s/^ *{\([0-9]*\), \([0-9]*\)}.*/\1 \2/p;}' "$M/gen/stage0.c")
[ $# = 2 ] && grep -q '\.guard_bytes = 64, \.narena_bufs = [1-9]' "$M/gen/stage0.c"
ok $? "mlp3: stage 0 lists its arena buffers (first at $1, $2 bytes) with 64 guard bytes"
END=$(($1 + $2))
poke pokein "$M/gen" $((END - 4)) && srun pokein 0 "$T/pokein/bin" --steps 1
poke pokeout "$M/gen" "$END" &&
    timeout 60 "$SPIPERUN" "$T/pokeout/bin" -- --threads 1 --steps 1 >"$T/pokeout.out" 2>&1
rc=$?
grep -q 'ERROR: AddressSanitizer: use-after-poison' "$T/pokeout.out" && grep -q 'WRITE of size 4' "$T/pokeout.out" &&
    grep -q 'in fwd_c0 .*stage0\.c' "$T/pokeout.out" && [ $rc != 0 ]
ok $? "pokeout: a float stored just past the buffer's end is reported (use-after-poison in fwd_c0), exit $rc"
# the same stray write in the packed layout lands in the next buffer unseen: the
# gap --guard-bytes closes
P=$T/packed
E2E_GEN_FLAGS=
e2e_gen "$P" mlp_small '/# S2$/d' 1f1b except_last
E2E_GEN_FLAGS="--guard-bytes 64"
# shellcheck disable=SC2046 # two numbers
set -- $(sed -n 's/^ *{"name": "[^"]*", "category": "[^"]*", "offset": \([0-9]*\), "bytes": \([0-9]*\)}.*/\1 \2/p' \
    "$P/gen/plan.json" | head -1)
poke pokepacked "$P/gen" $(($1 + $2)) && srun pokepacked 0 "$T/pokepacked/bin" --steps 1
! grep -q 'arena_bufs' "$P/gen/stage0.c"
ok $? "pokepacked: without --guard-bytes no arena buffers are listed, the stray write goes unreported"

# --- checkpoints: --save-every, --resume, --load, --save-on-exit -----------------------
srun straight 0 "$M/gen/bin" --steps 6 --save "$T/straight.st"
srun ck 0 "$M/gen/bin" --steps 3 --checkpoint-dir "$T/ck" --save-every 2
srun resume 0 "$M/gen/bin" --steps 6 --resume "$T/ck" --save "$T/resumed.st"
like "$(cat "$T/resume.out")" 'resume: continuing from .*step-00000003' "resume: from step 3"
cmp -s "$T/straight.st" "$T/resumed.st"
ok $? "resume: weights byte-identical to the straight run's"
f=$T/ck/step-00000003/stage1.safetensors
printf '\377' | dd of="$f" bs=1 seek=$(($(stat -c %s "$f") - 5)) conv=notrunc 2>/dev/null
srun resumebad 0 "$M/gen/bin" --steps 6 --resume "$T/ck" --save "$T/resumed2.st"
like "$(cat "$T/resumebad.out")" 'continuing from .*step-00000002' \
    "resumebad: a corrupted checkpoint is refused, the previous one used"
cmp -s "$T/straight.st" "$T/resumed2.st"
ok $? "resumebad: weights still byte-identical to the straight run's"
# another layout of the same model: these 3-stage checkpoints resumed on 2 stages
# (checkpoint.c reads each tensor from whichever old stage file holds it)
M2=$T/mlp2
sgen "$M2" mlp_small '/# S[13]$/d' 1f1b except_last
ok $? "mlp_small on 2 stages builds with the sanitizers"
srun straight2 0 "$M2/gen/bin" --steps 6 --save "$T/straight2.st"
srun relayout 0 "$M2/gen/bin" --steps 6 --resume "$T/ck" --save "$T/relayout.st"
like "$(cat "$T/relayout.out")" 'continuing from .*step-00000002 \(step 2\), written by 3 stages' \
    "relayout: 3 -> 2 stages, past the corrupted step 3"
cmp -s "$T/straight2.st" "$T/relayout.st"
ok $? "relayout: weights byte-identical to the 2-stage straight run's"
cp -a "$T/ck" "$T/ckmiss"
perl -0777 -pi -e 's/"w:layer2\.bias"/"w:layer2.biaz"/' "$T/ckmiss/step-00000002/stage2.safetensors"
srun relayoutmissing 1 "$M2/gen/bin" --steps 6 --resume "$T/ckmiss"
like "$(cat "$T/relayoutmissing.out")" "holds tensor 'w:layer2.bias', which this stage needs" \
    "relayoutmissing: a tensor no old file holds is named"
sgen "$T/mlp2lr" mlp_small '/# S[13]$/d' 1f1b except_last -e 's/lr = 1e-3/lr = 2e-3/'
srun relayoutother 1 "$T/mlp2lr/gen/bin" --steps 6 --resume "$T/ck"
like "$(cat "$T/relayoutother.out")" 'its training settings differ: lr=0.001 there, lr=0.002 here' \
    "relayoutother: another model is refused, naming what differs"
srun resumebelow 2 "$M/gen/bin" --steps 1 --resume "$T/ck"
srun ckforeign 2 "$M/gen/bin" --steps 3 --checkpoint-dir "$T/ck"
srun ckreplace 0 "$M/gen/bin" --steps 4 --checkpoint-dir "$T/ck" --save-every 2 --replace-checkpoints
cp -a "$T/ck" "$T/ck3"
srun resumelatest 0 "$M/gen/bin" --steps 5 --resume "$T/ck3" --checkpoint-dir "$T/ck3"
like "$(cat "$T/resumelatest.out")" 'continuing from .*step-00000004' "resumelatest: from LATEST"
srun load 0 "$M/gen/bin" --steps 1 --load "$T/straight.st"
srun loadmiss 1 "$M/gen/bin" --steps 0 --load "$T/nonexistent.st"
head -c 300 "$T/straight.st" >"$T/trunc.st"
srun loadtrunc 1 "$M/gen/bin" --steps 0 --load "$T/trunc.st"
srun usage 2 "$M/gen/bin" --steps x
srun help 0 "$M/gen/bin" --help
PIPE_RANK=0 PIPE_WORLD=3 PIPE_MASTER=nohost "$M/gen/bin/stage0" --threads 1 >"$T/badenv.out" 2>&1
san_check badenv "$?" 1
"$SPIPERUN" "$M/gen/bin" -- --threads 1 --steps 100000000 --log-every 500 --checkpoint-dir "$T/ck2" --save-on-exit \
    >"$T/sigterm.out" 2>&1 &
pr=$!
echo $pr >"$T/sigterm.pid"
wait_for "$T/sigterm.out" 'step 500/' 30
kill -TERM $pr
wait_exit $pr 20
san_check sigterm "$WX" 143
rm -f "$T/sigterm.pid"
is "$(grep -c 'stopped by signal 15 after step [0-9]* (checkpoint saved)' "$T/sigterm.out")" 3 \
    "sigterm: every stage stops after a final checkpoint"

# bg NAME [stage args]: the sanitized mlp3 under build-san's piperun in the
# background, until it logged step 500; its pid in pr and $T/NAME.pid
bg() {
    _bn=$1
    shift
    "$SPIPERUN" "$M/gen/bin" -- --threads 1 --steps 100000000 --log-every 500 "$@" >"$T/$_bn.out" 2>&1 &
    pr=$!
    echo $pr >"$T/$_bn.pid"
    wait_for "$T/$_bn.out" 'step 500/' 30
}
# a second SIGINT while a stage is stuck: every stage stops at once
bg int2 --checkpoint-dir "$T/ck4" --save-on-exit
kill -STOP "$(pgrep -f "$M/gen/bin/stage2" | head -1)"
kill -INT $pr
sleep 1
kill -INT $pr
wait_exit $pr 20
san_check int2 "$WX" 130
rm -f "$T/int2.pid"
# Ctrl-Z: every stage stops; SIGCONT: they go on (past --timeout)
bg tstp --timeout 2 --checkpoint-dir "$T/ck5" --save-on-exit
kill -TSTP $pr
sleep 3
kill -CONT $pr
n=$(grep -c 'step [0-9]*/' "$T/tstp.out")
t=0; while [ "$(grep -c 'step [0-9]*/' "$T/tstp.out")" -le "$n" ] && [ $t -lt 300 ]; do sleep 0.1; t=$((t + 1)); done
kill -TERM $pr
wait_exit $pr 20
san_check tstp "$WX" 143
rm -f "$T/tstp.pid"

# --- a killed peer ---------------------------------------------------------------------
P=127.0.0.1:$(free_port)
for k in 0 1 2; do start_stage "$M/gen/bin" $k 3 "$P" "$T/k$k.out" --steps 100000000 --log-every 1000; done
wait_for "$T/k2.out" 'step 1000/' 30
kill -9 "$(cat "$T/k1.out.pid")"
wait_exit "$(cat "$T/k0.out.pid")" 20; san_check k0 "$WX" 1
wait_exit "$(cat "$T/k2.out.pid")" 20; san_check k2 "$WX" 1
wait "$(cat "$T/k1.out.pid")" 2>/dev/null
rm -f "$T"/k?.out.pid
timeout 60 "$SPIPERUN" "$M/gen/bin" -- --threads 1 --steps 100000000 --log-every 1000 >"$T/prkill.out" 2>&1 &
pr=$!
echo $pr >"$T/prkill.pid"
wait_for "$T/prkill.out" 'step 1000/' 30
kill -9 "$(pgrep -f "$M/gen/bin/stage2" | head -1)"
wait $pr
san_check prkill "$?" 137
rm -f "$T/prkill.pid"
# a stage that stops answering: the others give up after --timeout
P=127.0.0.1:$(free_port)
for k in 0 1 2; do start_stage "$M/gen/bin" $k 3 "$P" "$T/w$k.out" --steps 100000000 --log-every 1000 --timeout 1; done
wait_for "$T/w2.out" 'step 1000/' 30
kill -STOP "$(cat "$T/w1.out.pid")"
wait_exit "$(cat "$T/w0.out.pid")" 20; san_check w0 "$WX" 1
wait_exit "$(cat "$T/w2.out.pid")" 20; san_check w2 "$WX" 1
kill -9 "$(cat "$T/w1.out.pid")"; kill -CONT "$(cat "$T/w1.out.pid")" 2>/dev/null
wait "$(cat "$T/w1.out.pid")" 2>/dev/null
rm -f "$T"/w?.out.pid

# --- bad data ------------------------------------------------------------------------
pgd() { # pgd FILE f32|i32 SAMPLES SHAPE(AxB..) [INDEX VALUE]: a .pgd file, one value replaced
    "${PYTHON:-/usr/bin/python3}" - "$@" <<'PY'
import struct, sys
path, dt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
dims = [int(v) for v in sys.argv[4].split("x")]
per = 1
for v in dims:
    per *= v
vals = [((i * 37) % 200) / 100.0 - 1.0 if dt == "f32" else (i * 7) % 32 for i in range(n * per)]
if len(sys.argv) > 6:
    vals[int(sys.argv[5])] = float(sys.argv[6]) if dt == "f32" else int(sys.argv[6])
with open(path, "wb") as f:
    f.write(b"PGD1" + struct.pack("<III", 1, 0 if dt == "f32" else 2, 1 + len(dims)))
    f.write(struct.pack("<%dQ" % (1 + len(dims)), n, *dims))
    f.write(struct.pack("<%d%s" % (len(vals), "f" if dt == "f32" else "i"), *vals))
PY
}
pgd "$T/x.pgd" f32 48 64
pgd "$T/y.pgd" f32 48 32
pgd "$T/ynan.pgd" f32 48 32 100 nan
srun data 0 "$M/gen/bin" --steps 3 --data "$T/x.pgd" --targets "$T/y.pgd"
head -c 5000 "$T/x.pgd" >"$T/short.pgd"
srun datashort 1 "$M/gen/bin" --steps 2 --data "$T/short.pgd" --targets "$T/y.pgd"
{ printf 'PGDX'; tail -c +5 "$T/x.pgd"; } >"$T/magic.pgd"
srun datamagic 1 "$M/gen/bin" --steps 2 --data "$T/magic.pgd" --targets "$T/y.pgd"
pgd "$T/shape.pgd" f32 48 63
srun datashape 1 "$M/gen/bin" --steps 2 --data "$T/shape.pgd" --targets "$T/y.pgd"
srun datanan 1 "$M/gen/bin" --steps 3 --data "$T/x.pgd" --targets "$T/ynan.pgd"
like "$(cat "$T/datanan.out")" 'ynan\.pgd: sample 3, element 4 is nan' "datanan: refused when read"
srun dataalone 2 "$M/gen/bin" --steps 3 --data "$T/x.pgd"
pgd "$T/y40.pgd" f32 40 32
srun datapairs 1 "$M/gen/bin" --steps 3 --data "$T/x.pgd" --targets "$T/y40.pgd"
# finite but near the float limit: the gradients overflow; the verdict stops or skips
pgd "$T/xbig.pgd" f32 48 64 100 3e38
srun databig 1 "$M/gen/bin" --steps 3 --data "$T/xbig.pgd" --targets "$T/y.pgd"
like "$(cat "$T/databig.out")" 'the gradient of layer0\.weight in step 1 is not finite' "databig: stopped by the gradient verdict"
srun databig_skip 0 "$M/gen/bin" --steps 3 --data "$T/xbig.pgd" --targets "$T/y.pgd" --skip-nonfinite
mkfifo "$T/fifo"
srun datafifo 1 "$M/gen/bin" --steps 1 --data "$T/fifo" --targets "$T/y.pgd"
srun loadfifo 1 "$M/gen/bin" --steps 1 --load "$T/fifo"
# a --load file whose tensors overlap (the first tensor's offsets doubled)
"${PYTHON:-/usr/bin/python3}" - "$T/straight.st" "$T/overlap.st" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
k = [x for x in h if x != "__metadata__"][1]
h[k]["data_offsets"] = [0, h[k]["data_offsets"][1] - h[k]["data_offsets"][0]]
t = json.dumps(h).encode()
t += b" " * ((8 - len(t) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY
srun loadoverlap 1 "$M/gen/bin" --steps 1 --load "$T/overlap.st"
like "$(cat "$T/loadoverlap.out")" 'overlap' "loadoverlap: tensors that overlap are refused"
# a data file truncated while the stages read it
pgd "$T/long.pgd" f32 4800 64
pgd "$T/ylong.pgd" f32 4800 32
timeout 60 "$SPIPERUN" "$M/gen/bin" -- --threads 1 --steps 100000000 --log-every 1000 --data "$T/long.pgd" \
    --targets "$T/ylong.pgd" >"$T/datatrunc.out" 2>&1 &
pr=$!
echo $pr >"$T/datatrunc.pid"
wait_for "$T/datatrunc.out" 'step 1000/' 30
truncate -s 4096 "$T/long.pgd"
wait_exit $pr 30
san_check datatrunc "$WX" 1
rm -f "$T/datatrunc.pid"
like "$(cat "$T/datatrunc.out")" 'long\.pgd was truncated or changed while this stage read it' "datatrunc: SIGBUS turned into a message"

# --- skips, concat, batch norm ---------------------------------------------------------
WD='s/momentum = 0.9)/momentum = 0.9, weight_decay = 0.01)/'
R=$T/res4
sgen "$R" resmlp_small '' 1f1b always -e "$WD"; ok $? "resmlp_small on 4 stages (checkpoint always) builds"
srun res4 0 "$R/gen/bin" --steps 3
R=$T/reszb
sgen "$R" resmlp_small '/# S2$/d' zb1 never; ok $? "resmlp_small on 3 stages (zb1, never) builds"
srun reszb 0 "$R/gen/bin" --steps 3
# trio NAME WANT BIN1 ARGS0 ARGS1 ARGS2: mlp3's stages 0 and 2 and BIN1's stage 1,
# started by hand on one port; each must exit WANT, with no sanitizer report
trio() {
    _tn=$1 _tw=$2 _tb=$3
    P=127.0.0.1:$(free_port)
    # shellcheck disable=SC2086 # lists of options
    start_stage "$M/gen/bin" 0 3 "$P" "$T/${_tn}0.out" $4
    # shellcheck disable=SC2086
    start_stage "$_tb" 1 3 "$P" "$T/${_tn}1.out" $5
    # shellcheck disable=SC2086
    start_stage "$M/gen/bin" 2 3 "$P" "$T/${_tn}2.out" $6
    for k in 0 1 2; do wait_exit "$(cat "$T/$_tn$k.out.pid")" 30; san_check "$_tn$k" "$WX" "$_tw"; done
    rm -f "$T/$_tn"?.out.pid
}
# a stage of another model joins the rendezvous: refused, every stage exits 1
A="--steps 3 --connect-timeout 3"
trio r 1 "$R/gen/bin" "$A" "$A" "$A"
# options that differ (one run id): refused at the rendezvous; a stranger of another run: refused alone
export PIPE_RUN_ID=san-run
trio o 1 "$M/gen/bin" "--steps 3 --connect-timeout 10" "--steps 4 --connect-timeout 10" "--steps 3 --connect-timeout 10"
like "$(cat "$T/o0.out")" 'stage 1 was started with --steps 4 but stage 0 with --steps 3' "o0: the differing option named"
P=127.0.0.1:$(free_port)
start_stage "$M/gen/bin" 0 3 "$P" "$T/s0.out" --steps 3 --connect-timeout 10
PIPE_RUN_ID=other PIPE_RANK=1 PIPE_WORLD=3 PIPE_MASTER=$P "$M/gen/bin/stage1" --threads 1 --steps 3 >"$T/stranger.out" 2>&1
san_check stranger "$?" 1
start_stage "$M/gen/bin" 1 3 "$P" "$T/s1.out" --steps 3 --connect-timeout 10
start_stage "$M/gen/bin" 2 3 "$P" "$T/s2.out" --steps 3 --connect-timeout 10
for k in 0 1 2; do wait_exit "$(cat "$T/s$k.out.pid")" 30; san_check s$k "$WX" 0; done
rm -f "$T"/s?.out.pid
unset PIPE_RUN_ID
R=$T/concat
mkdir -p "$R"
# shellcheck disable=SC2086 # E2E_GEN_FLAGS is a list of options
"$PIPEGEN" gen $E2E_GEN_FLAGS "$TOP/tests/models/oracle_res_concat.pipe" -o "$R/gen" >"$R/gen.out" 2>&1 &&
    sbuild "$R/gen"
ok $? "a concat skip on 3 stages (gpipe, cross entropy over classes) builds"
srun concat 0 "$R/gen/bin" --steps 3
pgd "$T/cx.pgd" f32 16 2x12
pgd "$T/cy.pgd" i32 16 2
srun concatbad 1 "$R/gen/bin" --steps 1 --data "$T/cx.pgd" --targets "$T/cy.pgd"
like "$(cat "$T/concatbad.out")" 'target id' "concatbad: a class id outside the classes is named"
B=$T/bni2
sgen "$B" sched_bn '' 'interleaved(2)' except_last; ok $? "sched_bn on interleaved(2), 4 chunks, builds"
srun bni2 0 "$B/gen/bin" --steps 3 --save "$T/bn.st"
B=$T/bn4
sgen "$B" sched_bn '' 1f1b always; ok $? "sched_bn on 4 stages builds"
srun bn4 0 "$B/gen/bin" --steps 3
B=$T/bn1row
sgen "$B" sched_bn '' 1f1b never -e "s/batch = 10  microbatches = 4/batch = 5  microbatches = 4/" \
    -e "s/bn2 = batchnorm(momentum = 0.2)/bn2 = batchnorm(deferred)/"
ok $? "sched_bn (deferred) on 4 stages, micro-batches of 2, 1, 1, 1 rows, builds"
srun bn1row 0 "$B/gen/bin" --steps 3
srun bn1row0 0 "$B/gen/bin" --steps 0 --save "$T/bn0.st"

# --- the GPT: tie transmit on interleaved(2), replicate on zb1, dropout, generate ------
DROP='s/fc = linear(d -> 4\*d)  gelu/fc = linear(d -> 4*d)  gelu  dropout(p = 0.1)/'
G=$T/gpti2
sgen "$G" gpt_tiny '' 'interleaved(2)' except_last -e "s/^tie wte .*/tie wte transmit/" \
    -e "s/batch = 6  microbatches = 3/batch = 7  microbatches = 4/" -e "$DROP"
ok $? "gpt_tiny (dropout) on interleaved(2) with the tie transmitted builds"
srun gpti2 0 "$G/gen/bin" --steps 3 --generate 6 --save "$T/gpt.st"
like "$(sample "$T/gpti2.out")" '^sample: ' "gpti2: samples text"
G=$T/gptzb
sgen "$G" gpt_tiny '' zb1 never -e "s/^tie wte .*/tie wte replicate/" \
    -e "s/batch = 6  microbatches = 3/batch = 8  microbatches = 4/" \
    -e "s/grad_clip = 1.0  seed = 5/grad_clip = 1.0  seed = 5  steps = 4  lr_schedule = cosine(warmup = 2, min = 1e-3)/"
ok $? "gpt_tiny on zb1 (4 stages) with the tie replicated and a cosine schedule builds"
export PIPE_CHECK_TIES=1
srun gptzb 0 "$G/gen/bin" --generate 6 --temperature 0 --trace "$T/gpt.json" --profile "$T/gpt.prof"
unset PIPE_CHECK_TIES
[ -s "$T/gpt.json" ] && [ -s "$T/gpt.prof" ]
ok $? "gptzb: trace and profile written"
G=$T/gptzbv
sgen "$G" gpt_tiny '' zbv except_last -e "s/batch = 6  microbatches = 3/batch = 8  microbatches = 4/"
ok $? "gpt_tiny on zbv (2 stages in V placement: the loss and both uses of wte on stage 0) builds"
srun gptzbv 0 "$G/gen/bin" --steps 3 --generate 6
like "$(sample "$T/gptzbv.out")" '^sample: ' "gptzbv: samples text"
S=$T/far
sgen "$S" skips_far '' 'interleaved(2)' except_last
ok $? "skips_far on interleaved(2), 3 stages (skips across rounds, late sends), builds"
srun far 0 "$S/gen/bin" --steps 3
# odd sizes: every kernel's tail and block paths (d = 70: a full column block of 64
# and a tail; head size 35; 4d = 280 for gelu and dropout)
G=$T/gptodd
sgen "$G" gpt_tiny '/# S[13]$/d' gpipe always -e "s/^tie wte .*/tie wte transmit/" -e "$DROP" \
    -e "s/const vocab = 32/const vocab = 37/" -e "s/const seq = 8/const seq = 5/" -e "s/const d = 16/const d = 70/"
ok $? "gpt_tiny with odd sizes (vocab 37, seq 5, d 70) on 2 stages, gpipe, always, builds"
srun gptodd 0 "$G/gen/bin" --steps 2 --generate 7 --save "$T/gptodd.st"
plain gptodd_plain "$G/gen" --steps 2 --generate 7 --save "$T/gptodd_plain.st"
ok $? "gptodd: the plain build trains"
is "$(final "$T/gptodd.out"; sample "$T/gptodd.out")" "$(final "$T/gptodd_plain.out"; sample "$T/gptodd_plain.out")" \
    "gptodd: sanitized and plain final loss and sample are the same text"
cmp -s "$T/gptodd.st" "$T/gptodd_plain.st"
ok $? "gptodd: sanitized and plain saved weights are byte-identical"
L=$T/lm
sgen "$L" lm_tiny '' 1f1b except_last -e "s/^tie wte .*/tie wte transmit/"
ok $? "lm_tiny on 2 stages builds"
lm_text "$T/text.txt"
"$SPIPEDATA" text "$T/text.txt" -o "$T/text.pgd" >"$T/pipedata.out" 2>&1
san_check pipedata "$?" 0
"$SPIPEDATA" bytes "$T/text.pgd" -o "$T/back.txt" >"$T/pipedata3.out" 2>&1
san_check pipedata3 "$?" 0
cmp -s "$T/text.txt" "$T/back.txt"
ok $? "pipedata: text -> bytes gives the text back"
srun lm 0 "$L/gen/bin" --steps 4 --data "$T/text.pgd" --generate 20 --prompt the --save "$T/lm.st"
like "$(sample "$T/lm.out")" '^sample: the' "lm: samples after the prompt"
srun lmload 0 "$L/gen/bin" --steps 0 --load "$T/lm.st" --generate 20 --prompt the
is "$(sample "$T/lmload.out")" "$(sample "$T/lm.out")" "lm: --load --steps 0 gives the same text"
pgd "$T/ids.pgd" i32 12 16 21 200
srun gptload 1 "$G/gen/bin" --steps 0 --load "$T/lm.st"
like "$(cat "$T/gptload.out")" 'wte' "gptload: lm_tiny's weights do not fit gpt_tiny, the tensor named"
printf 'tiny' >"$T/tiny.txt"
"$SPIPEDATA" text "$T/tiny.txt" -o "$T/tiny.pgd" >"$T/pipedata2.out" 2>&1
san_check pipedata2 "$?" 0
srun lmshort 1 "$L/gen/bin" --steps 1 --data "$T/tiny.pgd"
srun lmids 1 "$L/gen/bin" --steps 1 --data "$T/ids.pgd" --targets "$T/ids.pgd"
srun lmprompt 2 "$L/gen/bin" --steps 0 --generate 5 --prompt "$(printf 'a\200')"
# --- the trainer (issue 26): eval_cls on 3 stages with an evaluation set (its last batch shorter than the
# micro-batches), --metrics, shuffled shards, --predict, pipedata csv; the eval lines and the predictions
# byte-identical to the plain build's ------------------------------------------------------------------
V=$T/evcls
sgen "$V" eval_cls '/# S2$/d' 1f1b except_last -e 's/^  eval_every = 3$/  eval_every = 2  shuffle = true/'
ok $? "eval_cls (shuffled) on 3 stages builds with the sanitizers"
awk 'BEGIN { srand(5); printf "x0"; for (j = 1; j < 16; j++) printf ",x%d", j; print ",class"
             for (i = 0; i < 38; i++) { s = 0; for (j = 0; j < 16; j++) { v = rand() * 2 - 1; s += v * (j % 4 - 1.5); printf "%s%.5f", j ? "," : "", v }
                                        printf ",%d\n", (s > 0) + 2 * (i % 2) } }' >"$T/cls.csv"
head -31 "$T/cls.csv" >"$T/cls_a.csv"
{ head -1 "$T/cls.csv"; sed -n '32,$p' "$T/cls.csv"; } >"$T/cls_b.csv"
{ head -1 "$T/cls.csv"; tail -3 "$T/cls.csv"; } >"$T/cls_e.csv"
"$SPIPEDATA" csv "$T/cls_a.csv" --target class -o "$T/ca.pgd" --targets-out "$T/cya.pgd" >"$T/pdcsv.out" 2>&1 &&
    "$SPIPEDATA" csv "$T/cls_b.csv" --target class -o "$T/cb.pgd" --targets-out "$T/cyb.pgd" >>"$T/pdcsv.out" 2>&1 &&
    "$SPIPEDATA" csv "$T/cls_e.csv" --target class -o "$T/ce.pgd" --targets-out "$T/cye.pgd" >>"$T/pdcsv.out" 2>&1
san_check pdcsv "$?" 0
VDATA="--data $T/ca.pgd --data $T/cb.pgd --targets $T/cya.pgd --targets $T/cyb.pgd --eval-data $T/ce.pgd --eval-targets $T/cye.pgd"
srun evcls 0 "$V/gen/bin" --steps 4 $VDATA --metrics "$T/ev.jsonl" --save "$T/ev.st"
is "$(grep -c 'eval step' "$T/evcls.out")" 2 "evcls: evaluated after steps 2 and 4 (3 rows: 3 micro-batches of one, a filler)"
srun evpred 0 "$V/gen/bin" --steps 0 --load "$T/ev.st" --predict "$T/ca.pgd" --out "$T/p.pgd" --eval-data "$T/ce.pgd" \
    --eval-targets "$T/cye.pgd"
plain evplain "$V/gen" --steps 4 $VDATA
evl() { sed -n 's/^\[stage [0-9]*\] \(eval step [0-9/]*  loss [^ ]*  accuracy [^ ]* ([^)]*)\).*/\1/p' "$1"; }
[ -n "$(evl "$T/evcls.out")" ] && [ "$(evl "$T/evcls.out")" = "$(evl "$T/evplain.out")" ] &&
    [ "$(final "$T/evcls.out")" = "$(final "$T/evplain.out")" ]
ok $? "evcls: eval lines and final loss byte-identical to the plain build's"
plain evpredplain "$V/gen" --steps 0 --load "$T/ev.st" --predict "$T/ca.pgd" --out "$T/pp.pgd"
cmp -s "$T/p.pgd" "$T/pp.pgd"
ok $? "evpred: --predict writes the plain build's bytes"
# --- piperun's relay: a 150000-byte line (over its 64 KiB line buffer), a last line without a newline, a stage that
# fails (its status passed on) while another is stopped -----------------------------
F=$T/fake
mkdir -p "$F"
printf '#!/bin/sh\nhead -c 150000 /dev/zero | tr "\\0" x; echo; printf "no newline" >&2; exit 3\n' >"$F/stage0"
printf '#!/bin/sh\nexec sleep 30\n' >"$F/stage1"
chmod +x "$F/stage0" "$F/stage1"
timeout 30 "$SPIPERUN" "$F" >"$T/relay.out" 2>&1
san_check relay "$?" 3
is "$(grep '^\[stage 0\] xx*$' "$T/relay.out" | tr -cd x | wc -c | tr -d ' ')" 150000 "relay: every byte of the long line comes through"
like "$(cat "$T/relay.out")" '\[stage 0\] no newline' "relay: the last line without a newline too"
timeout 10 "$SPIPERUN" "$T/nonexistent" >"$T/relay2.out" 2>&1
san_check relay2 "$?" 2
done_testing

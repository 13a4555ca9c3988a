#!/bin/sh
# tests/ppdp_zero.t — `--zero 1`: the optimizer state sharded over the
# data-parallel replicas (ZeRO-1, runtime/core/zero.c):
#  - mlp_small (SGD with momentum; and without momentum: no state at all) and
#    gpt_tiny (AdamW, wte tied across stages) at 2 stages x 2 replicas and
#    1 stage x 3 replicas: the losses, the saved weights and the checkpoint's
#    stage files (weights and the whole optimizer state, gathered on replica
#    0) bitwise equal to the same run without --zero; PIPE_DP_STAGED=1 and
#    early buckets (PIPE_DP_BUCKET_BYTES=1) too;
#  - the end-of-run line shows the smaller optimizer state and arena, and the
#    same figures as `pipegen plan`'s z1 columns (state, weights sent);
#  - a checkpoint written with --zero resumed without it, and the reverse,
#    equal an uninterrupted run bitwise; so does one written at SIGTERM
#    (--save-on-exit, the signal to replica 1 only);
#  - --zero 1 on one replica says it does nothing; --zero 2 and --zero x are
#    refused; --zero given to one process only is refused at the rendezvous;
#  - under ASan/UBSan/LSan (2 stages x 2 replicas, a checkpoint and resume;
#    generated with --guard-bytes 64, the gaps between buffers poisoned).
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh"
T=$(mktemp -d /tmp/pg-ppdp-zero.XXXXXX)
cleanup() {
    [ -f "$T/sigterm.pid" ] && kill -9 "$(cat "$T/sigterm.pid")" 2>/dev/null
    [ -n "$KEEP" ] || rm -rf "$T"
}
trap cleanup EXIT

# gen NAME-TAG MODEL DEL [SED-ARG...]: tests/models/MODEL.pipe into $T/NAME-TAG, built
gen() {
    _t=$1 _m=$2 _del=$3
    shift 3
    e2e_gen "$T/$_t" "$_m" "$_del" 1f1b except_last "$@" && build_strict "$T/$_t/gen"
}

# run TAG D OUT [args...]: 3 steps with a checkpoint, weights saved; the final loss in OUT.loss
run() {
    _t=$1 _D=$2 _o=$T/$3
    shift 3
    rm -rf "$_o.ck"
    PIPE_CHECK_TIES=1 "$PIPERUN" --dp "$_D" "$T/$_t/gen/bin" -- --steps 3 --threads 1 --save "$_o.st" \
        --checkpoint-dir "$_o.ck" "$@" >"$_o.out" 2>&1 || { sed 's/^/# /' "$_o.out" | tail -20 >&2; return 1; }
    sed -n 's/^\[stage [0-9]*\( replica 0\)*\] final loss //p' "$_o.out" >"$_o.loss"
    [ -s "$_o.loss" ]
}

# same A B: the two runs' losses, weights and checkpoint files bitwise equal
same() {
    cmp -s "$T/$1.loss" "$T/$2.loss" && cmp -s "$T/$1.st" "$T/$2.st" || return 1
    for f in "$T/$1.ck"/step-*/stage*.safetensors; do
        cmp -s "$f" "$T/$2.ck/$(basename "$(dirname "$f")")/$(basename "$f")" || { echo "# $f differs" >&2; return 1; }
    done
}

gen mlp-2 mlp_small "$(e2e_splits 2)" && gen mlp-1 mlp_small "$(e2e_splits 1)" &&
    gen gpt-2 gpt_tiny "$(e2e_splits 2)" -e 's/batch = 6  microbatches = 3/batch = 12  microbatches = 3/' &&
    gen gpt-1 gpt_tiny "$(e2e_splits 1)" -e 's/batch = 6  microbatches = 3/batch = 12  microbatches = 3/' &&
    gen sgd-2 mlp_small "$(e2e_splits 2)" -e 's/, momentum = 0.9//'
ok $? "mlp_small, gpt_tiny (2 and 1 stages) and mlp_small without momentum generate and build"

for c in "mlp-2 2" "mlp-1 3" "gpt-2 2" "gpt-1 3" "sgd-2 2"; do
    set -- $c
    run "$1" "$2" "$1-D$2" && run "$1" "$2" "$1-D$2-z" --zero 1 && same "$1-D$2" "$1-D$2-z"
    ok $? "$1 x $2 replicas: --zero 1 gives the same loss, weights and checkpoint bytes ($(cat "$T/$1-D$2-z.loss"))"
done
PIPE_DP_STAGED=1 run gpt-2 2 gpt-2-D2-zs --zero 1 && same gpt-2-D2 gpt-2-D2-zs
ok $? "gpt_tiny 2 x 2 on the staged path (PIPE_DP_STAGED=1) with --zero 1: the same bytes"
PIPE_DP_BUCKET_BYTES=1 run gpt-2 2 gpt-2-D2-zb --zero 1 && same gpt-2-D2 gpt-2-D2-zb
ok $? "... and with a bucket per layer reduced while the backward runs (PIPE_DP_BUCKET_BYTES=1)"

# the end-of-run line: replica 0 of each stage
zl=$(grep -- '--zero 1: optimizer state' "$T/gpt-2-D2-z.out")
is "$(printf '%s\n' "$zl" | wc -l)" 2 "gpt_tiny 2 x 2: each stage reports its share of the optimizer state"
printf '%s\n' "$zl" | awk '{ for (i = 1; i <= NF; i++) if ($i == "state") { s = $(i + 1); w = $(i + 7) }
                            if (!(s > 0 && 2 * s <= w + 256 && 4 * s >= w)) bad = 1 } END { exit bad }'
ok $? "... about half of the whole state, which it names ($(printf '%s' "$zl" | sed -n '1s/.*\(optimizer state [0-9]* bytes on this process of [0-9]*\).*/\1/p'))"
like "$zl" 'arena [0-9]+ of [0-9]+ bytes\); the updated weights all-gathered: [0-9]+ bytes sent per step \(in all 3 \(D-1\)/D' \
    "... the smaller arena and the traffic, 3 (D-1)/D of the gradient bytes"

# the same figures as pipegen plan's z1 columns: state and weights sent (replica 0)
"$PIPEGEN" plan "$T/gpt-2/gpt_tiny.pipe" --dp 2 >"$T/gpt.plan" 2>&1
want=$(awk '/^stage [0-9]+: arena/ { k = $2; sub(":", "", k) } /^ +2 / { print k, $7, $9 - $6 }' "$T/gpt.plan")
got=$(sed -n 's/^\[stage \([0-9]*\) replica 0\] --zero 1: optimizer state \([0-9]*\) bytes .* all-gathered: \([0-9]*\) bytes sent.*/\1 \2 \3/p' \
    "$T/gpt-2-D2-z.out" | sort)
is "$got" "$want" "pipegen plan's z1 state and z1 sent are what the runtime holds and sends"
"$PIPEGEN" plan "$T/mlp-1/mlp_small.pipe" >"$T/mlp.plan" 2>&1
like "$(grep -A4 '^stage 0: arena' "$T/mlp.plan")" ' +z1 state +z1 process +z1 sent' "pipegen plan: the z1 columns for each D"
awk '/^ +1 / { n1++; if ($8 != $5 || $9 != $6) bad = 1 }
     /^ +4 / { n4++; if (!($8 < $5 && $9 > $6)) bad = 1 } END { exit bad || !n1 || !n4 }' "$T/mlp.plan"
ok $? "... D = 1 as without --zero, D = 4 fewer bytes per process and more sent"

# resume across the option: 3 steps with --zero, 3 more without (and the reverse), against 6 straight
g=$T/gpt-2/gen/bin
"$PIPERUN" --dp 2 "$g" -- --steps 6 --threads 1 --save "$T/straight.st" >"$T/straight.out" 2>&1
ok $? "gpt_tiny 2 x 2: 6 steps straight"
for z in "1 0" "0 1"; do
    set -- $z
    rm -rf "$T/rck"
    "$PIPERUN" --dp 2 "$g" -- --steps 3 --threads 1 --zero "$1" --checkpoint-dir "$T/rck" >"$T/r$1.out" 2>&1 &&
        "$PIPERUN" --dp 2 "$g" -- --steps 6 --threads 1 --zero "$2" --resume "$T/rck" --save "$T/r$1$2.st" \
            >"$T/r$1$2.out" 2>&1 && cmp -s "$T/r$1$2.st" "$T/straight.st" &&
        [ "$(grep 'final loss' "$T/r$1$2.out")" = "$(grep 'final loss' "$T/straight.out")" ]
    ok $? "a checkpoint written with --zero $1, resumed with --zero $2: bitwise the uninterrupted run"
done
# 1 stage x 3 replicas of mlp_small with --zero resumed by 2 stages x 2 replicas without it
rm -rf "$T/xck"
"$PIPERUN" --dp 3 "$T/mlp-1/gen/bin" -- --steps 3 --threads 1 --zero 1 --checkpoint-dir "$T/xck" >"$T/x1.out" 2>&1 &&
    "$PIPERUN" --dp 2 "$T/mlp-2/gen/bin" -- --steps 6 --threads 1 --resume "$T/xck" --save "$T/x2.st" >"$T/x2.out" 2>&1 &&
    "$PIPERUN" --dp 2 "$T/mlp-2/gen/bin" -- --steps 6 --threads 1 --zero 1 --resume "$T/xck" --save "$T/x3.st" >"$T/x3.out" 2>&1 &&
    cmp -s "$T/x2.st" "$T/x3.st"
ok $? "mlp_small: 1 x 3 with --zero resumed by 2 x 2 with and without it: the same bytes"

# --save-on-exit with --zero 1: SIGTERM to replica 1's stage 1 stops every
# replica after the same step, and each sends replica 0 its optimizer state for
# the checkpoint; resumed without --zero it equals a straight run
m2=$T/mlp-2/gen/bin
"$PIPERUN" --dp 2 "$m2" -- --threads 1 --steps 100000000 --log-every 50 --checkpoint-dir "$T/ck2" --zero 1 \
    --save-on-exit >"$T/sigterm.out" 2>&1 &
pr=$!
echo $pr >"$T/sigterm.pid"
wait_for "$T/sigterm.out" 'step 50/' 60
kill -TERM "$(ps --ppid $pr -o pid= | sort -n | tail -1)"
wait_exit $pr 30
rm -f "$T/sigterm.pid"
n=$(sed -n 's/.*stopped by signal 15 after step \([0-9]*\) (checkpoint saved)/\1/p' "$T/sigterm.out" | sort -u)
is "$WX $(grep -c 'stopped by signal 15 after step' "$T/sigterm.out") $(echo "$n" | wc -l)" "143 4 1" \
    "--save-on-exit with --zero 1: every process stops after the same step ($n) with 143"
"$PIPERUN" --dp 2 "$m2" -- --threads 1 --steps $((n + 2)) --resume "$T/ck2" --save "$T/after-term.st" \
    >"$T/after-term.out" 2>&1 &&
    "$PIPERUN" --dp 2 "$m2" -- --threads 1 --steps $((n + 2)) --save "$T/straight-term.st" >"$T/straight-term.out" 2>&1 &&
    cmp -s "$T/after-term.st" "$T/straight-term.st"
ok $? "... its checkpoint, resumed without --zero for 2 more steps, equals a straight run bitwise"

# one replica, bad values, a mismatch
out=$("$PIPERUN" "$T/mlp-2/gen/bin" -- --steps 1 --threads 1 --zero 1 2>&1)
like "$out" '\[stage 0\] --zero 1 with one replica: nothing to shard, the optimizer state stays whole \(no effect\)' \
    "--zero 1 on one replica says it does nothing"
is "$(printf '%s\n' "$out" | grep -c 'nothing to shard')" 1 "... once"
for v in 2 x; do
    out=$("$PIPERUN" --dp 2 "$T/mlp-2/gen/bin" -- --steps 1 --zero $v 2>&1)
    is "$?" 2 "--zero $v is refused"
    like "$out" "--zero wants 0 or 1 \\(1: shard the optimizer state over the data-parallel replicas, ZeRO stage 1\\), not '$v'" \
        "... saying what it wants"
done
M=127.0.0.1:$(free_port)
for k in 1 2 3; do
    PIPE_RANK=$k PIPE_WORLD=4 PIPE_MASTER=$M PIPE_RUN_ID=zero-mismatch timeout 30 "$T/mlp-2/gen/bin/stage$((k % 2))" \
        --steps 1 --connect-timeout 20 >"$T/mm$k.out" 2>&1 &
done
out=$(PIPE_RANK=0 PIPE_WORLD=4 PIPE_MASTER=$M PIPE_RUN_ID=zero-mismatch timeout 30 "$T/mlp-2/gen/bin/stage0" --steps 1 \
    --zero 1 2>&1)
wait
like "$out" 'was started with --zero [01] but stage [01] of replica [01] with --zero [01]: give every stage the same --zero' \
    "--zero given to one process only is refused at the rendezvous, naming the option"

# the sanitizers: 2 stages x 2 replicas of gpt_tiny with --zero, a checkpoint and its resume
SAN=$TOP/build-san
if [ -e "$SAN/libpgrt_cpu.a" ] && [ -x "$SAN/piperun" ]; then
    RTLIB=$SAN/libpgrt_cpu.a build "$T/gpt-2/gen" -g -fsanitize=address,undefined -fno-sanitize-recover=undefined \
        -fno-omit-frame-pointer && mv "$T/gpt-2/gen/bin" "$T/gpt-2/san" &&
        ASAN_OPTIONS=detect_leaks=1 PIPE_CHECK_TIES=1 "$SAN/piperun" --dp 2 "$T/gpt-2/san" -- --steps 2 --threads 1 \
            --zero 1 --checkpoint-dir "$T/sck" >"$T/san1.out" 2>&1 &&
        ASAN_OPTIONS=detect_leaks=1 PIPE_CHECK_TIES=1 "$SAN/piperun" --dp 2 "$T/gpt-2/san" -- --steps 6 --threads 1 \
            --zero 1 --resume "$T/sck" --checkpoint-dir "$T/sck" --save "$T/san.st" >"$T/san2.out" 2>&1 &&
        ! grep -Eq 'ERROR: AddressSanitizer|runtime error:|LeakSanitizer' "$T/san1.out" "$T/san2.out" &&
        cmp -s "$T/san.st" "$T/straight.st"
    st=$?
    [ $st = 0 ] || tail -20 "$T/san1.out" "$T/san2.out" | sed 's/^/# /' >&2
    ok $st "gpt_tiny 2 x 2 with --zero 1, checkpoint and resume: clean under ASan/UBSan/LSan, the plain build's bytes"
    # with guard bytes between the arena's buffers (poisoned under ASan): the
    # compact state region is addressable, what lies past this arena's end is not
    E2E_GEN_FLAGS="--guard-bytes 64" e2e_gen "$T/gg" gpt_tiny "$(e2e_splits 2)" 1f1b except_last \
        -e 's/batch = 6  microbatches = 3/batch = 12  microbatches = 3/' &&
        RTLIB=$SAN/libpgrt_cpu.a build "$T/gg/gen" -g -fsanitize=address,undefined -fno-sanitize-recover=undefined \
            -fno-omit-frame-pointer &&
        ASAN_OPTIONS=detect_leaks=1 "$SAN/piperun" --dp 2 "$T/gg/gen/bin" -- --steps 3 --threads 1 --zero 1 \
            --save "$T/gg.st" >"$T/gg.out" 2>&1 &&
        ! grep -Eq 'ERROR: AddressSanitizer|runtime error:|LeakSanitizer' "$T/gg.out" && cmp -s "$T/gg.st" "$T/gpt-2-D2.st"
    st=$?
    [ $st = 0 ] || tail -20 "$T/gg.out" | sed 's/^/# /' >&2
    ok $st "... and generated with --guard-bytes 64 (the gaps poisoned): clean, the same bytes"
else
    skip "no sanitizer build (make SAN=1 binaries)"
    skip "no sanitizer build (make SAN=1 binaries)"
fi
done_testing

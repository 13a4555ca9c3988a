#!/bin/sh
# tests/ppdp.t — data-parallel replicas of the pipeline (pp x dp) on the CPU:
#  - mlp_small, resmlp_small (skips across splits), gpt_tiny (wte tied across
#    stages, checked after every step) and bn_small (deferred batch norm) at
#    P in {1,2,3} stages x D in {1,2,4} replicas where the batch allows
#    (`piperun --dp D`): each run twice gives the same bytes (loss and saved
#    weights); for a fixed D, every P gives the same bytes; every D agrees with
#    D = 1 on the same global batch: losses within 1e-6 relative, weights within
#    1e-5 of each tensor's largest magnitude. Batch norm normalises by its
#    micro-batch, so D replicas of m micro-batches are compared with one of
#    D x m (the same micro-batches of rows); its running statistics are then
#    the whole batch's;
#  - the reduction of a layer's gradients starts while the stage's backward
#    still runs (PIPE_CHECK_OVERLAP=1, a bucket per layer): 1f1b with one chunk
#    per stage (1 and 2 stages) and interleaved(2), with the same bytes as one
#    bucket after the backward (PIPE_DP_BUCKET_BYTES=0);
#  - a replica stopped during the reduction: the others give up after --timeout;
#  - resume: a D = 2 run stopped after step 3 and resumed equals the
#    uninterrupted run bitwise; the checkpoint is written once, replicas 2;
#    SIGTERM with --save-on-exit stops every replica after the same step, and
#    the run resumed from that checkpoint equals a straight one;
#  - the replicas under ASan/UBSan/LSan (gpt_tiny, bn_small, with a resume;
#    the overlapped buckets);
#  - the non-finite verdict over every replica (stop, --skip-nonfinite); --trace
#    and --save-grads (the global gradients) with replicas;
#  - piperun --dp 2 on the example mlp; Open MPI's mpirun MPMD of 2 stages x 2
#    replicas, bitwise equal to piperun's;
#  - refusals: a D that does not divide the batch or leaves fewer rows than
#    micro-batches, a world that is not a multiple of the stage count, --dp
#    against the world, --dp given to one process only, batch norm without
#    `deferred`, piperun --dp without a count.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh"
PY=${PYTHON:-/usr/bin/python3}
T=$(mktemp -d /tmp/pg-ppdp.XXXXXX)
cleanup() {
    for f in "$T"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT

# gen_model NAME STAGES DEL [SED-ARG...]: tests/models/NAME.pipe into $T/NAME-STAGES, built
gen_model() {
    _n=$1 _p=$2 _del=$3
    shift 3
    e2e_gen "$T/$_n-$_p" "$_n" "$_del" 1f1b except_last "$@" || return 1
    [ "$(ls "$T/$_n-$_p/gen"/stage*.c | wc -l)" = "$_p" ] || { echo "# $_n: expected $_p stages"; return 1; }
    build_strict "$T/$_n-$_p/gen"
}

# train DIR D OUT [args...]: piperun --dp D, 3 steps, weights saved to OUT.st; the loss in OUT.loss
train() {
    _d=$1 _D=$2 _o=$3
    shift 3
    PIPE_CHECK_TIES=1 "$PIPERUN" --dp "$_D" "$_d/gen/bin" -- --steps 3 --threads 1 --save "$_o.st" "$@" \
        >"$_o.out" 2>&1 || { sed 's/^/# /' "$_o.out" | tail -20; return 1; }
    sed -n 's/^\[stage [0-9]*\( replica 0\)*\] final loss //p' "$_o.out" >"$_o.loss"
    [ -s "$_o.loss" ]
}

# close A B: two losses within 1e-6 relative
close() {
    awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; exit !(d <= 1e-6 * m) }'
}

# matrix NAME DEL-FOR-P1 DEL-FOR-P2 DEL-FOR-P3 DS [SED-ARG...]: the checks above for one model
matrix() {
    name=$1 d1=$2 d2=$3 d3=$4 ds=$5
    shift 5
    fails=0 runs=0
    exec 3>&1 1>&2 # diagnostics to stderr; the counts on the caller's stdout
    for p in 1 2 3; do
        eval "del=\$d$p"
        [ "$del" = none ] && continue
        gen_model "$name" "$p" "$del" "$@" || { echo "# $name: $p stages did not build"; fails=$((fails + 1)); continue; }
        for D in $ds; do
            o="$T/$name-$p/D$D"
            runs=$((runs + 1))
            if ! train "$T/$name-$p" "$D" "$o.a" || ! train "$T/$name-$p" "$D" "$o.b"; then
                echo "# $name: $p stages x $D replicas failed"; fails=$((fails + 1)); continue
            fi
            if ! cmp -s "$o.a.loss" "$o.b.loss" || ! cmp -s "$o.a.st" "$o.b.st"; then
                echo "# $name: $p stages x $D replicas: two runs differ"; fails=$((fails + 1))
            fi
            ref="$T/$name-1/D$D.a"
            [ "$d1" = none ] && ref="$T/$name-2/D$D.a"
            if [ "$o.a" != "$ref" ] && { ! cmp -s "$o.a.loss" "$ref.loss" || ! cmp -s "$o.a.st" "$ref.st"; }; then
                echo "# $name: $D replicas: $p stages differ from $(basename "$(dirname "$ref")") ($(cat "$o.a.loss") vs $(cat "$ref.loss"))"
                fails=$((fails + 1))
            fi
        done
    done
    echo "$fails $runs" >&3
    exec 1>&3 3>&-
}

# vs_one NAME P D ONE-DIR [TOL]: D replicas of NAME-P against the run in ONE-DIR
# (D = 1): the loss within 1e-6 relative, each weight tensor within TOL (1e-5)
vs_one() {
    a="$T/$1-$2/D$3.a" b=$4
    close "$(cat "$a.loss")" "$(cat "$b.loss")" || { echo "# $1: $3 replicas: loss $(cat "$a.loss") vs $(cat "$b.loss")"; return 1; }
    _w=$("$PY" "$TOP/tests/st_close.py" "$a.st" "$b.st" "${5:-1e-5}")
    _s=$?
    echo "# $1, $3 replicas: $_w"
    return $_s
}

set -- $(matrix mlp_small "$(e2e_splits 1)" "$(e2e_splits 2)" "$(e2e_splits 3)" "1 2 4")
is "$1" 0 "mlp_small: $2 layouts (1-3 stages x 1, 2, 4 replicas) each bitwise equal twice and across stage counts"
fails=0
for D in 2 4; do vs_one mlp_small 1 $D "$T/mlp_small-1/D1.a" || fails=$((fails + 1)); done
is "$fails" 0 "mlp_small: 2 and 4 replicas agree with 1 (loss within 1e-6, weights within 1e-5)"

# buckets while the backward runs. PIPE_DP_BUCKET_BYTES=1 makes every layer
# with weights its own bucket (mlp_small's layers are far below the default
# 1 MiB). PIPE_CHECK_OVERLAP=1 makes each stage wait, as soon as its last
# early bucket is posted (some of its backward still to run), until every
# early bucket is reduced over the replicas, and count the steps where they
# were (no timing involved: a bucket that could start only after the backward
# would leave nothing to wait for, and the count says so).
#  - 1f1b, one chunk per stage: mlp_small on 1 stage (layer2 and layer1 are
#    summed while layer0's weight gradient of the last micro-batch is still to
#    come) and on 2 stages ([layer0] [layer1 layer2]: stage 1 has 1 early
#    bucket, stage 0's one layer none);
#  - interleaved(2), 2 stages of 2 chunks, 4 micro-batches: a stage's later
#    chunk ends its backward first, and is summed while the earlier one's runs;
# every one bitwise equal to the same layout with PIPE_DP_BUCKET_BYTES=0 (the
# whole reduction after the backward) and to 1 stage on 1f1b, D = 2 and 4.
fails=0
e2e_gen "$T/ovl" mlp_small "$(e2e_splits 4)" 'interleaved(2)' never -e 's/microbatches = 5/microbatches = 4/' &&
    build_strict "$T/ovl/gen" && e2e_gen "$T/ovl-ref" mlp_small "$(e2e_splits 1)" 1f1b never \
    -e 's/microbatches = 5/microbatches = 4/' && build_strict "$T/ovl-ref/gen" &&
    e2e_gen "$T/ovl2" mlp_small "$(e2e_splits 2)" 1f1b never -e 's/microbatches = 5/microbatches = 4/' &&
    build_strict "$T/ovl2/gen" || fails=1
# early OUT STAGE N: the check's line of stage STAGE (replica 0) says N early buckets, all reduced in 3 of 3 steps
early() {
    grep -q "^\[stage $2 replica 0\] stage $2 replica 0: $3 early gradient buckets\{0,1\}, all reduced before the stage's backward ended in $([ "$3" = 0 ] && echo 0 || echo 3) of 3 steps" "$1" ||
        { echo "# $1, stage $2: $(grep -h 'early gradient' "$1")"; return 1; }
}
export PIPE_CHECK_OVERLAP=1 PIPE_DP_BUCKET_BYTES=1
for D in 2 4; do
    train "$T/ovl-ref" $D "$T/ovl-ref/D$D" && early "$T/ovl-ref/D$D.out" 0 2 || fails=$((fails + 1))
    train "$T/ovl2" $D "$T/ovl2/D$D" && early "$T/ovl2/D$D.out" 0 0 && early "$T/ovl2/D$D.out" 1 1 || fails=$((fails + 1))
    train "$T/ovl" $D "$T/ovl/D$D" && early "$T/ovl/D$D.out" 0 1 && early "$T/ovl/D$D.out" 1 1 || fails=$((fails + 1))
done
unset PIPE_CHECK_OVERLAP
is "$fails" 0 "1f1b with one chunk per stage (1 and 2 stages) and interleaved(2), 2 and 4 replicas: the early buckets are summed over the replicas before the stage's backward ends, every step"
fails=0
for D in 2 4; do
    for l in ovl-ref ovl2 ovl; do
        PIPE_DP_BUCKET_BYTES=0 train "$T/$l" $D "$T/$l/one$D" && cmp -s "$T/$l/D$D.st" "$T/$l/one$D.st" &&
            cmp -s "$T/$l/D$D.st" "$T/ovl-ref/D$D.st" && cmp -s "$T/$l/D$D.loss" "$T/ovl-ref/D$D.loss" &&
            ! grep -q 'early gradient bucket' "$T/$l/one$D.out" || { echo "# $l, $D replicas: overlapped differs"; fails=$((fails + 1)); }
    done
done
is "$fails" 0 "... and train bitwise as with PIPE_DP_BUCKET_BYTES=0 (one bucket, after the backward) and as 1 stage on 1f1b"
unset PIPE_DP_BUCKET_BYTES
# (4 single-threaded processes: 1 MiB buckets with more than 4 cores, none otherwise)
ncores=$(getconf _NPROCESSORS_ONLN)
[ "$ncores" -gt 4 ] && bb=1048576 || bb=0
like "$(cat "$T/mlp_small-2/D2.a.out")" "\\[stage 1 replica 0\\] after the backward the step waited [0-9.]+ ms for the replicas' gradient sums \\(median of steps 2..3; [0-9]+ early buckets? of at least $bb bytes: PIPE_DP_BUCKET_BYTES unset: $ncores cores, 4 processes x 1 thread on this host\\)" \
    "PIPE_DP_BUCKET_BYTES unset: the bucket size follows the cores and the run's threads on the host, and the end-of-run line says so"
out=$(PIPE_DP_BUCKET_BYTES=1M "$PIPERUN" --dp 2 "$T/ovl2/gen/bin" -- --steps 1 --threads 1 2>&1)
like "$out" "PIPE_DP_BUCKET_BYTES='1M': want a byte count >= 0 \(0: sum the gradients over the replicas after the backward only\)" \
    "a PIPE_DP_BUCKET_BYTES that is no byte count is refused"

# a replica stopped (SIGSTOP) while the buckets are summed: its partner stage
# gives up after --timeout (2 s) and names it, from the reducer thread or the main
# one, whichever was waiting; every running process exits 1, none hangs
port=$(free_port)
for k in 0 1 2 3; do # rank k runs stage k mod 2
    PIPE_RANK=$k PIPE_WORLD=4 PIPE_MASTER=127.0.0.1:$port PIPE_DP_BUCKET_BYTES=1 "$T/ovl/gen/bin/stage$((k % 2))" --threads 1 --dp 2 \
        --timeout 2 --steps 100000000 --log-every 1000000 >"$T/stop$k.log" 2>&1 &
    echo $! >"$T/stop$k.log.pid"
done
wait_for "$T/stop3.log" 'started as replica 1/2' 20 && sleep 1 && kill -STOP "$(cat "$T/stop3.log.pid")"
res=""
for k in 0 1 2; do wait_exit "$(cat "$T/stop$k.log.pid")" 30; res="$res $WX"; done
kill -CONT "$(cat "$T/stop3.log.pid")" 2>/dev/null
kill -9 "$(cat "$T/stop3.log.pid")" 2>/dev/null
is "$res" " 1 1 1" "a replica stopped during the reduction: the others exit 1 after --timeout"
like "$(cat "$T/stop1.log")" 'stage 1 of replica 0: (receiving|sending) .* (from|to) stage 1 of replica 1(: nothing moved for 2 s \(--timeout\)| failed: .*within 2 s)' \
    "... and its partner stage names it and the timeout"

set -- $(matrix resmlp_small "$(e2e_splits 1)" "$(e2e_splits 2)" "$(e2e_splits 3)" "1 2 4")
is "$1" 0 "resmlp_small (skips across splits): $2 layouts bitwise equal twice and across stage counts"
fails=0
for D in 2 4; do vs_one resmlp_small 1 $D "$T/resmlp_small-1/D1.a" || fails=$((fails + 1)); done
is "$fails" 0 "resmlp_small: 2 and 4 replicas agree with 1"

# gpt_tiny: batch 12 in 3 micro-batches, so 4 replicas hold 3 rows each; wte tied (replicate) across stages
set -- $(matrix gpt_tiny "$(e2e_splits 1)" "$(e2e_splits 2)" "$(e2e_splits 3)" "1 2 4" \
    -e 's/batch = 6  microbatches = 3/batch = 12  microbatches = 3/')
is "$1" 0 "gpt_tiny (tied wte, copies checked every step): $2 layouts bitwise equal twice and across stage counts"
fails=0
# AdamW divides by the root of its second moment: a gradient near zero (qkv's
# bias) carries its rounding into the step almost undamped, so weights agree
# to 1e-3 of their magnitude there after 3 steps, the loss still to 1e-6
for D in 2 4; do vs_one gpt_tiny 1 $D "$T/gpt_tiny-1/D1.a" 1e-3 || fails=$((fails + 1)); done
is "$fails" 0 "gpt_tiny: 2 and 4 replicas agree with 1 (weights within 1e-3: AdamW)"
grep -q 'differs' "$T/gpt_tiny-3/D4.a.out" && st=1 || st=0
ok $st "gpt_tiny: the tied copies stay bitwise equal on 3 stages x 4 replicas"

# bn_small: batch 12; D replicas of 3 micro-batches against one replica of 3 x D
set -- $(matrix bn_small '/# S1$/d' '/^$/d' none "1 2 4" -e 's/batch = 10  microbatches = 3/batch = 12  microbatches = 3/')
is "$1" 0 "bn_small (deferred batch norm): $2 layouts bitwise equal twice and across stage counts"
fails=0
for D in 2 4; do
    m=$((3 * D))
    e2e_gen "$T/bn-one-$m" bn_small '/^$/d' 1f1b except_last -e "s/batch = 10  microbatches = 3/batch = 12  microbatches = $m/" &&
        build_strict "$T/bn-one-$m/gen" && train "$T/bn-one-$m" 1 "$T/bn-one-$m/D1.a" &&
        vs_one bn_small 2 $D "$T/bn-one-$m/D1.a" || fails=$((fails + 1))
done
is "$fails" 0 "bn_small: 2 and 4 replicas agree with one replica of the same micro-batches (running statistics included)"

# resume: D = 2 on 2 stages, stopped after step 3, resumed to 6, against 6 straight
g="$T/mlp_small-2/gen/bin"
"$PIPERUN" --dp 2 "$g" -- --steps 6 --threads 1 --save "$T/straight.st" >"$T/straight.out" 2>&1
"$PIPERUN" --dp 2 "$g" -- --steps 3 --threads 1 --checkpoint-dir "$T/ck" >"$T/first.out" 2>&1 &&
    "$PIPERUN" --dp 2 "$g" -- --steps 6 --threads 1 --resume "$T/ck" --checkpoint-dir "$T/ck" --save "$T/resumed.st" \
        >"$T/resumed.out" 2>&1
ok $? "2 stages x 2 replicas: stopped after step 3 and resumed"
cmp -s "$T/straight.st" "$T/resumed.st" && [ "$(grep 'final loss' "$T/straight.out")" = "$(grep 'final loss' "$T/resumed.out")" ]
ok $? "the resumed run equals the uninterrupted one bitwise ($(sed -n 's/.*final loss //p' "$T/resumed.out"))"
grep -qx 'replicas 2' "$T/ck/step-00000003/MANIFEST" && [ "$(ls "$T/ck/step-00000003" | grep -c safetensors)" = 2 ]
ok $? "the checkpoint records 2 replicas and holds one file per stage"
[ "$(grep -c 'final loss' "$T/straight.out")" = 1 ]
ok $? "replica 0 alone reports the loss"

# relayout and replicas at once: 4 stages x 1 replica write a checkpoint at step
# 3, 2 stages x 2 replicas resume it to step 6. Steps 1..3 had one replica, so
# the run ends bitwise where 2 stages x 1 replica for 3 steps, then 2 x 2 to
# step 6, end (the stage count changes no bit); against 6 steps of 2 x 2 from
# the start it differs only by the rounding of D = 1 against D = 2
e2e_gen "$T/mlp_small-4" mlp_small "$(e2e_splits 4)" 1f1b except_last && build_strict "$T/mlp_small-4/gen" &&
    "$PIPERUN" "$T/mlp_small-4/gen/bin" -- --steps 3 --threads 1 --checkpoint-dir "$T/ckr" >"$T/r1.out" 2>&1 &&
    "$PIPERUN" --dp 2 "$g" -- --steps 6 --threads 1 --resume "$T/ckr" --save "$T/r2.st" >"$T/r2.out" 2>&1
ok $? "4 stages x 1 replica checkpoint at step 3, resumed by 2 stages x 2 replicas to step 6"
like "$(cat "$T/r2.out")" 'written by 4 stages x 1 replica \(this run: 2 stages x 2 replicas\)' "... the resume line names both layouts"
"$PIPERUN" "$g" -- --steps 3 --threads 1 --checkpoint-dir "$T/ckq" >"$T/q1.out" 2>&1 &&
    "$PIPERUN" --dp 2 "$g" -- --steps 6 --threads 1 --resume "$T/ckq" --save "$T/q2.st" >"$T/q2.out" 2>&1 &&
    cmp -s "$T/q2.st" "$T/r2.st" && [ "$(grep 'final loss' "$T/q2.out")" = "$(grep 'final loss' "$T/r2.out")" ]
ok $? "... bitwise equal to 2 stages x 1 replica to step 3, then 2 x 2 to step 6"
a=$(sed -n 's/.*final loss //p' "$T/r2.out") b=$(sed -n 's/.*final loss //p' "$T/straight.out")
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-6 * (b < 0 ? -b : b)) }'
ok $? "... and within 1e-6 relative of 6 steps of 2 x 2 from the start ($a vs $b)"

# --save-on-exit: SIGTERM to one process of replica 1 stops every replica after
# the same step (replica 0's stage 0 decides for every replica), replica 0
# writes the checkpoint, and the run resumed from it equals a straight one
"$PIPERUN" --dp 2 "$g" -- --threads 1 --steps 100000000 --log-every 200 --checkpoint-dir "$T/ck2" \
    --save-on-exit >"$T/sigterm.out" 2>&1 &
pr=$!
echo $pr >"$T/sigterm.pid"
wait_for "$T/sigterm.out" 'step 200/' 60
# the signal to one process only, replica 1's stage 1 (rank 3, started last):
# replica 0 learns of it through the agreement alone
kill -TERM "$(ps --ppid $pr -o pid= | sort -n | tail -1)"
wait_exit $pr 30
rm -f "$T/sigterm.pid"
is "$WX" 143 "--save-on-exit with 2 replicas: SIGTERM to replica 1's stage 1 stops the run with 143"
n=$(sed -n 's/.*stopped by signal 15 after step \([0-9]*\) (checkpoint saved)/\1/p' "$T/sigterm.out" | sort -u)
is "$(grep -c 'stopped by signal 15 after step' "$T/sigterm.out") $(echo "$n" | wc -l)" "4 1" \
    "every process of 2 stages x 2 replicas stops after the same step ($n)"
"$PIPERUN" --dp 2 "$g" -- --threads 1 --steps $((n + 2)) --resume "$T/ck2" --checkpoint-dir "$T/ck2" \
    --save "$T/after-term.st" >"$T/after-term.out" 2>&1 &&
    "$PIPERUN" --dp 2 "$g" -- --threads 1 --steps $((n + 2)) --save "$T/straight-term.st" >"$T/straight-term.out" 2>&1 &&
    cmp -s "$T/after-term.st" "$T/straight-term.st"
ok $? "resumed after SIGTERM, 2 more steps equal a straight run of $((n + 2)) bitwise"

# the replicas' code under AddressSanitizer, UndefinedBehaviorSanitizer and
# LeakSanitizer: gpt_tiny (the tie) and bn_small (the batch-norm hook), 2 stages
# x 2 replicas with a checkpoint and its resume; the bytes of the plain build
SAN=$TOP/build-san
if [ -e "$SAN/libpgrt_cpu.a" ] && [ -x "$SAN/piperun" ]; then
    fails=0
    for m in gpt_tiny bn_small; do
        RTLIB=$SAN/libpgrt_cpu.a build "$T/$m-2/gen" -g -fsanitize=address,undefined -fno-sanitize-recover=undefined \
            -fno-omit-frame-pointer && mv "$T/$m-2/gen/bin" "$T/$m-2/san" && build "$T/$m-2/gen" -Wall -Wextra -Werror ||
            { fails=$((fails + 1)); continue; }
        ASAN_OPTIONS=detect_leaks=1 PIPE_CHECK_TIES=1 "$SAN/piperun" --dp 2 "$T/$m-2/san" -- --steps 2 --threads 1 \
            --checkpoint-dir "$T/$m-sck" >"$T/$m-san1.out" 2>&1 &&
            ASAN_OPTIONS=detect_leaks=1 PIPE_CHECK_TIES=1 "$SAN/piperun" --dp 2 "$T/$m-2/san" -- --steps 3 --threads 1 \
                --resume "$T/$m-sck" --checkpoint-dir "$T/$m-sck" --save "$T/$m-san.st" >"$T/$m-san2.out" 2>&1 ||
            { echo "# $m under the sanitizers failed:"; tail -20 "$T/$m-san1.out" "$T/$m-san2.out" | sed 's/^/# /'; fails=$((fails + 1)); continue; }
        if grep -Eq 'ERROR: AddressSanitizer|runtime error:|LeakSanitizer' "$T/$m-san1.out" "$T/$m-san2.out" ||
            ! cmp -s "$T/$m-san.st" "$T/$m-2/D2.a.st"; then
            echo "# $m under the sanitizers: a report, or other bytes than the plain build's"; fails=$((fails + 1))
        fi
    done
    is "$fails" 0 "gpt_tiny and bn_small, 2 stages x 2 replicas, checkpoint and resume: clean under ASan/UBSan/LSan, same bytes"
    # the reducer thread and the lent sends of the early buckets (interleaved(2) and 1f1b, above)
    fails=0
    for l in ovl ovl-ref; do
        RTLIB=$SAN/libpgrt_cpu.a build "$T/$l/gen" -g -fsanitize=address,undefined -fno-sanitize-recover=undefined \
            -fno-omit-frame-pointer && rm -rf "$T/$l/san" && mv "$T/$l/gen/bin" "$T/$l/san" &&
            ASAN_OPTIONS=detect_leaks=1 PIPE_CHECK_OVERLAP=1 PIPE_DP_BUCKET_BYTES=1 "$SAN/piperun" --dp 2 "$T/$l/san" -- \
                --steps 3 --threads 1 --save "$T/$l-san.st" >"$T/$l-san.out" 2>&1 ||
            { tail -20 "$T/$l-san.out" | sed 's/^/# /'; fails=$((fails + 1)); }
        if grep -Eq 'ERROR: AddressSanitizer|runtime error:|LeakSanitizer' "$T/$l-san.out" ||
            ! grep -q "all reduced before the stage's backward ended in 3 of 3 steps" "$T/$l-san.out" ||
            ! cmp -s "$T/$l-san.st" "$T/ovl-ref/D2.st"; then
            echo "# $l: the overlapped buckets under the sanitizers: a report, no overlap, or other bytes"; fails=$((fails + 1))
        fi
    done
    is "$fails" 0 "interleaved(2) and 1f1b on 1 stage, 2 replicas, buckets during the backward: clean under ASan/UBSan/LSan, same bytes"
else
    skip "build-san/libpgrt_cpu.a or build-san/piperun missing (make SAN=1 san-all; make test builds them)"
    skip "build-san/libpgrt_cpu.a or build-san/piperun missing (make SAN=1 san-all; make test builds them)"
fi

# the example itself (generated/mlp, 3 stages): piperun --dp 2 trains it, the
# loss within 1e-6 of one replica's
mkdir -p "$T/mlp" && cp "$TOP"/generated/mlp/stage*.c "$TOP"/generated/mlp/mlp.h "$T/mlp/" && build_strict "$T/mlp"
"$PIPERUN" "$T/mlp/bin" -- --steps 2 --threads 1 >"$T/mlp1.out" 2>&1 &&
    "$PIPERUN" --dp 2 "$T/mlp/bin" -- --steps 2 --threads 1 >"$T/mlp2.out" 2>&1 &&
    close "$(sed -n 's/.*final loss //p' "$T/mlp2.out")" "$(sed -n 's/.*final loss //p' "$T/mlp1.out")"
ok $? "piperun --dp 2 on examples/mlp.pipe's 3 stages: loss $(sed -n 's/.*final loss //p' "$T/mlp2.out") vs $(sed -n 's/.*final loss //p' "$T/mlp1.out") with one replica"

# Open MPI's mpirun, MPMD: ranks in app-context order, replica 0's stage0 and
# stage1, then replica 1's (rank = replica x 2 + stage): the bytes of piperun's run
MPIRUN=${MPIRUN:-mpirun}
if "$MPIRUN" --version 2>/dev/null | grep -q 'Open MPI'; then
    [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    port=$(free_port)
    x="-x PIPE_MASTER=127.0.0.1:$port"
    a="--steps 3 --threads 1 --save $T/mpi.st"
    # shellcheck disable=SC2086 # x and a are lists of words
    env -u PIPE_RANK -u PIPE_WORLD -u PIPE_MASTER timeout 120 "$MPIRUN" --oversubscribe --bind-to none \
        -np 1 $x "$g/stage0" $a : -np 1 $x "$g/stage1" $a : -np 1 $x "$g/stage0" $a : -np 1 $x "$g/stage1" $a \
        >"$T/mpi.out" 2>&1
    st=$?
    [ $st = 0 ] || tail -20 "$T/mpi.out" | sed 's/^/# /'
    [ $st = 0 ] && cmp -s "$T/mpi.st" "$T/mlp_small-2/D2.a.st" &&
        [ "$(sed -n 's/.*final loss //p' "$T/mpi.out")" = "$(cat "$T/mlp_small-2/D2.a.loss")" ]
    ok $? "mpirun MPMD of 2 stages x 2 replicas: the loss and weights of piperun --dp 2, bitwise"
    like "$(cat "$T/mpi.out")" 'stage 0: started as replica 1/2, rank 2/4 from OMPI_COMM_WORLD_RANK' "... rank 2 is replica 1's stage 0"
else
    skip "no Open MPI mpirun (Debian's openmpi-bin: tools/deps.sh test installs it)"
    skip "no Open MPI mpirun"
fi

# the non-finite verdict sees every replica: an input near the float limit in
# replica 1's rows (sample 20 of 24) overflows only replica 1's loss; every
# process stops before the optimizer, or with --skip-nonfinite every replica
# skips the step and they go on alike
"$PY" - "$T" <<'PYEOF'
import struct, sys
def pgd(path, rows, per, fill):
    with open(path, "wb") as f:
        f.write(b"PGD1" + struct.pack("<III", 1, 0, 2) + struct.pack("<2Q", rows, per))
        for i in range(rows):
            f.write(struct.pack("<%df" % per, *[fill(i, j) for j in range(per)]))
pgd(sys.argv[1] + "/x.pgd", 24, 64, lambda i, j: 3e38 if (i, j) == (20, 5) else ((i * 7 + j * 3) % 11 - 5) / 10.0)
pgd(sys.argv[1] + "/y.pgd", 24, 32, lambda i, j: ((i + j) % 5) / 10.0)
PYEOF
"$PIPERUN" --dp 2 "$g" -- --steps 2 --threads 1 --data "$T/x.pgd" --targets "$T/y.pgd" >"$T/nf.out" 2>&1
st=$?
# (piperun stops the others once one has exited, so not every process may get to say so)
is "$st $(grep -c 'step 1/2' "$T/nf.out")" "1 0" "an overflow from replica 1's rows (a value near the float limit) stops the run before the optimizer"
like "$(cat "$T/nf.out")" '\[stage [01] replica 0\] the (gradient of [a-z0-9.]* in step 1|loss of step 1) is not finite' \
    "... replica 0, whose rows are finite, finds it in the summed gradients (or the whole batch's loss)"
"$PIPERUN" --dp 2 "$g" -- --steps 3 --threads 1 --data "$T/x.pgd" --targets "$T/y.pgd" --skip-nonfinite \
    --save "$T/nf.st" >"$T/nfs.out" 2>&1 &&
    grep -q 'step 1/3 .*(skipped: ' "$T/nfs.out" && grep -q 'step 3/3 .*(skipped: ' "$T/nfs.out" &&
    [ -s "$T/nf.st" ]
ok $? "--skip-nonfinite with 2 replicas: every replica skips the steps whose batch holds the value, and the run goes on"

# --trace and --save-grads with replicas: replica 0 writes them
"$PIPERUN" --dp 2 "$g" -- --steps 2 --threads 1 --trace "$T/tr.json" --save-grads "$T/g2.st" >"$T/tr.out" 2>&1 &&
    "$PY" -c 'import json, sys; json.load(open(sys.argv[1]))' "$T/tr.json" &&
    "$PIPERUN" "$g" -- --steps 2 --threads 1 --save-grads "$T/g1.st" >"$T/g1.out" 2>&1 &&
    "$PY" "$TOP/tests/st_close.py" "$T/g2.st" "$T/g1.st" 1e-5 >/dev/null
ok $? "--trace and --save-grads with 2 replicas: replica 0 writes them; the gradients are the whole batch's (within 1e-5 of one replica's)"

# refusals
out=$("$PIPERUN" --dp 5 "$g" -- --steps 1 2>&1)
like "$out" '5 replicas do not divide the batch of 24 rows \(train.batch of mlp_small.pipe\)' "a replica count that does not divide the batch is refused"
out=$("$PIPERUN" --dp 8 "$g" -- --steps 1 2>&1)
like "$out" '8 replicas leave 3 rows each, fewer than the 5 micro-batches of mlp_small.pipe: use at most 4 replicas' "a replica count that leaves fewer rows than micro-batches is refused"
M=127.0.0.1:$(free_port)
out=$(PIPE_RANK=0 PIPE_WORLD=3 PIPE_MASTER=$M timeout 20 "$g/stage0" --steps 1 2>&1)
like "$out" 'stage 0 of model mlp_small \(2 stages\) was started as rank 0 of 3 \(PIPE_RANK\): the world must be 2 x D processes' "a world that is not a multiple of the stage count is refused"
out=$(PIPE_RANK=0 PIPE_WORLD=4 PIPE_MASTER=$M timeout 20 "$g/stage0" --steps 1 --dp 3 2>&1)
like "$out" 'stage 0: --dp 3 but the world of 4 processes \(PIPE_RANK\) holds 2 replicas of the 2 stages: start 6 processes' "--dp against the world size is refused"
out=$(PIPE_RANK=1 PIPE_WORLD=4 PIPE_MASTER=$M timeout 20 "$g/stage0" --steps 1 2>&1)
like "$out" 'started as rank 1 of 4 \(PIPE_RANK\): rank = replica x 2 \+ stage, so stage 0 runs as rank 0, 2' "a stage at another stage's rank is refused"
# --dp given to rank 0 only: refused at the rendezvous, naming the option
M=127.0.0.1:$(free_port)
for k in 1 2 3; do
    PIPE_RANK=$k PIPE_WORLD=4 PIPE_MASTER=$M PIPE_RUN_ID=dp-mismatch timeout 30 "$g/stage$((k % 2))" --steps 1 \
        --connect-timeout 20 >"$T/mm$k.out" 2>&1 &
done
out=$(PIPE_RANK=0 PIPE_WORLD=4 PIPE_MASTER=$M PIPE_RUN_ID=dp-mismatch timeout 30 "$g/stage0" --steps 1 --dp 2 2>&1)
wait
like "$out" 'stage [01] of replica [01] was started with --dp [02] but stage [01] of replica [01] with --dp [02]: give every stage the same --dp' "--dp given to one process only is refused at the rendezvous"
e2e_gen "$T/bn-plain" bn_small '/# S1$/d' 1f1b except_last -e 's/batchnorm(deferred)/batchnorm/' \
    -e 's/batch = 10  microbatches = 3/batch = 12  microbatches = 3/' && build_strict "$T/bn-plain/gen"
out=$("$PIPERUN" --dp 2 "$T/bn-plain/gen/bin" -- --steps 1 --threads 1 2>&1)
like "$out" 'batch norm without `deferred` cannot train with data-parallel replicas' "batch norm without deferred is refused with replicas"
out=$("$PIPERUN" --dp 0 "$g" 2>&1)
like "$out" "piperun: --dp wants a replica count in 1..256, not '0'" "piperun --dp 0 is refused"
done_testing

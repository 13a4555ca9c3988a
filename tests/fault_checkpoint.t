#!/bin/sh
# tests/fault_checkpoint.t — checkpoints and resume (--checkpoint-dir, --save-every,
# --resume): bitwise continuation, the 2 newest kept, and a corrupted, truncated,
# half-written or mismatched checkpoint (two tensors' names swapped included:
# the checksum covers names, dtypes, shapes and offsets) refused with a reason
# (thousands of never-completed step directories in one line, then removed);
# a second run into a directory another run writes into refused (DIR/LOCK)
# while the previous
# complete one stays usable; a full disk (a small tmpfs) keeps the previous one.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh"
PY=${PYTHON:-/usr/bin/python3}
T=$(mktemp -d /tmp/pg-fault-ck.XXXXXX)
cleanup() {
    [ -f "$T/lkA.pid" ] && kill -9 "$(cat "$T/lkA.pid")" 2>/dev/null
    mountpoint -q "$T/full" 2>/dev/null && umount "$T/full"
    rm -rf "$T"
}
trap cleanup EXIT
G=$T/m3
gen_mlp "$G" 3
ok $? "mlp_small on 3 stages builds"
run() { timeout 60 "$PIPERUN" "$G/bin" -- --threads 1 "$@"; }
final() { grep 'final loss' "$1" | sed 's/^\[stage [0-9]*\] //'; }

# --- bitwise continuation ------------------------------------------------------
run --steps 10 --save "$T/straight.st" >"$T/straight.out" 2>&1
ok $? "10 steps straight"
run --steps 5 --checkpoint-dir "$T/ck" --save-every 2 >"$T/first.out" 2>&1
ok $? "5 steps with --checkpoint-dir --save-every 2"
is "$(head -1 "$T/ck/LATEST" 2>/dev/null)" "step-00000005" "LATEST names the newest complete step"
is "$(cd "$T/ck" && echo step-*)" "step-00000004 step-00000005" "the 2 newest complete checkpoints are kept, step 2 removed"
[ -f "$T/ck/step-00000005/MANIFEST" ] && [ -f "$T/ck/step-00000005/stage2.safetensors" ]
ok $? "a step holds MANIFEST and one file per stage"
cp -a "$T/ck" "$T/ck.orig"
run --steps 10 --resume "$T/ck" --save "$T/resumed.st" >"$T/resumed.out" 2>&1
ok $? "resume and run to step 10"
like "$(cat "$T/resumed.out")" 'resume: continuing from .*step-00000005 \(step 5\)' "resumes from step 5"
is "$(final "$T/resumed.out")" "$(final "$T/straight.out")" "final loss text equals the uninterrupted run's"
cmp -s "$T/straight.st" "$T/resumed.st"
ok $? "saved weights are byte-identical to the uninterrupted run's"
like "$(grep -c 'step [0-9]*/10  loss' "$T/resumed.out")" '^5$' "the resumed run prints steps 6..10 only"
run --steps 5 --save "$T/ck2" --save-every 2 >"$T/first2.out" 2>&1
ok $? "the issue's spelling: --save DIR --save-every 2"
is "$(head -1 "$T/ck2/LATEST" 2>/dev/null)" "step-00000005" "--save DIR with --save-every is the checkpoint directory"
cmp -s "$T/ck/step-00000005/stage2.safetensors" "$T/ck2/step-00000005/stage2.safetensors"
ok $? "and holds the same bytes as --checkpoint-dir"
rm -rf "$T/ck2"
run --steps 1 --save-every 2 >"$T/u.out" 2>&1
is $? 2 "--save-every without a directory: usage error"
like "$(cat "$T/u.out")" 'needs --checkpoint-dir DIR \(or --save DIR\)' "saying what it needs"

# --- refusals, each falling back to step 4 ----------------------------------------
refuse() { # refuse NAME REGEX: resume from $T/ck, expect REGEX and a fall back to step 4 with equal weights
    run --steps 10 --resume "$T/ck" --save "$T/fb.st" >"$T/fb.out" 2>&1
    rc=$?
    is "$rc" 0 "$1: the run goes on"
    like "$(cat "$T/fb.out")" "$2" "$1: refused with the reason"
    like "$(cat "$T/fb.out")" 'continuing from .*step-00000004' "$1: falls back to the previous complete checkpoint"
    cmp -s "$T/straight.st" "$T/fb.st"; ok $? "$1: and still ends bitwise equal"
    rm -rf "$T/ck"; cp -a "$T/ck.orig" "$T/ck"
}
f=$T/ck/step-00000005/stage1.safetensors
sz=$(stat -c %s "$f")
b=$(od -An -tu1 -j $((sz - 5)) -N1 "$f" | tr -d ' ') # flip every bit of that byte: it always changes
printf "\\$(printf %o $((255 - b)))" | dd of="$f" bs=1 seek=$((sz - 5)) conv=notrunc 2>/dev/null
refuse "a corrupted byte in stage 1's tensors" 'stage1\.safetensors is corrupted: its tensor names, dtypes, shapes, offsets and bytes hash to'
# a weight and its momentum (one shape) under each other's names, every byte as
# written: the checksum covers the names, not only the bytes
w=$("$PY" -c 'import json, struct, sys; f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
print(sorted(k[2:] for k in json.loads(f.read(n)) if k.startswith("w:"))[0])' "$f")
"$PY" "$TOP/tests/ckpt_edit.py" swap "$f" "w:$w" "opt0:$w"
ok $? "stage 1's $w and its momentum swapped by name"
refuse "two same-shape tensors' names swapped" 'stage1\.safetensors is corrupted: its tensor names, dtypes, shapes, offsets and bytes hash to'
# a checkpoint of an older pipegen (its checksums over the data alone) still resumes
for k in 0 1 2; do
    sum=$("$PY" "$TOP/tests/ckpt_edit.py" legacy "$T/ck/step-00000005/stage$k.safetensors") &&
        "$PY" "$TOP/tests/ckpt_edit.py" manifest "$T/ck/step-00000005/MANIFEST" "stage $k=$sum" || echo "legacy $k failed"
done
run --steps 10 --resume "$T/ck" --save "$T/fb.st" >"$T/fb.out" 2>&1
like "$(cat "$T/fb.out")" 'continuing from .*step-00000005' "a checkpoint whose checksums cover the data alone (an older pipegen's) resumes"
cmp -s "$T/straight.st" "$T/fb.st"; ok $? "...bitwise"
rm -rf "$T/ck"; cp -a "$T/ck.orig" "$T/ck"
truncate -s $((sz / 2)) "$f"
refuse "a truncated stage file" 'stage1\.safetensors is truncated'
rm "$T/ck/step-00000005/MANIFEST"
refuse "a step without MANIFEST (half-written)" 'has no MANIFEST \(a checkpoint that was never completed\)'
# another first digit of stage 2's checksum (0 -> 1, anything else -> 0: it always changes)
sed -i -e 's/^stage 2 0/stage 2 X/' -e 's/^stage 2 [^X]/stage 2 0/' -e 's/^stage 2 X/stage 2 1/' "$T/ck/step-00000005/MANIFEST"
! cmp -s "$T/ck/step-00000005/MANIFEST" "$T/ck.orig/step-00000005/MANIFEST"; ok $? "the manifest was edited"
refuse "an edited manifest" 'MANIFEST is corrupted'
rm "$T/ck/step-00000005/stage1.safetensors"; mkfifo "$T/ck/step-00000005/stage1.safetensors"
refuse "a FIFO in place of a stage file (never waited on)" 'stage1\.safetensors is not a regular file \(it is a pipe \(FIFO\)\)'
rm "$T/ck/step-00000005/MANIFEST"; mkfifo "$T/ck/step-00000005/MANIFEST"
rm "$T/ck/LATEST"; mkfifo "$T/ck/LATEST"
refuse "a FIFO as MANIFEST and as LATEST" 'step-00000005 has no MANIFEST \(a checkpoint that was never completed\): not a regular file'

# --- every step directory is examined ----------------------------------------------------
# without LATEST, ten newer step directories that never completed (a stage's
# file, no MANIFEST) stand before the complete ones
rm "$T/ck/LATEST"
for i in 11 12 13 14 15 16 17 18 19 20; do
    mkdir -p "$T/ck/step-000000$i"
    cp "$T/ck/step-00000005/stage0.safetensors" "$T/ck/step-000000$i/"
done
run --steps 10 --resume "$T/ck" --save "$T/many.st" >"$T/many.out" 2>&1
ok $? "10 incomplete newer steps and no LATEST: the resume still finds a complete one"
like "$(cat "$T/many.out")" 'continuing from .*step-00000005' "...step 5, behind all ten"
cmp -s "$T/straight.st" "$T/many.st"; ok $? "...and ends bitwise equal"
rm -rf "$T/ck"; cp -a "$T/ck.orig" "$T/ck"

# --- --steps below the checkpoint: nothing to do is an error, and says so --------------
run --steps 3 --resume "$T/ck" --save "$T/below.st" >"$T/below.out" 2>&1; rc=$?
is "$rc" 2 "--resume from step 5 with --steps 3: exit 2, not 0"
like "$(cat "$T/below.out")" 'the checkpoint to continue from is at step 5, past --steps 3 \(the total, not a number of further steps\): nothing to train and nothing written' \
    "...saying what happened"
[ ! -e "$T/below.st" ]; ok $? "...and no --save file claims otherwise"
run --steps 5 --resume "$T/ck" --save "$T/at5.st" >"$T/at5.out" 2>&1
ok $? "--steps equal to the checkpoint's step: nothing left to train, the weights are saved"
run --steps 5 --save "$T/five.st" >/dev/null 2>&1
cmp -s "$T/at5.st" "$T/five.st"; ok $? "...and they are step 5's"

# --- a checkpoint directory belongs to one run ---------------------------------------------
run --steps 4 --checkpoint-dir "$T/ck" --save-every 2 >"$T/fresh.out" 2>&1; rc=$?
is "$rc" 2 "a fresh run into a directory holding another run's checkpoints: exit 2"
like "$(cat "$T/fresh.out")" "the checkpoint directory $T/ck cannot be used: it holds the checkpoints of another run \(step-00000005 of run [0-9a-f]+\).*--replace-checkpoints" \
    "...naming the step, the run and the way out"
! grep -q 'step 1/' "$T/fresh.out"; ok $? "...before any step"
cmp -s "$T/ck/step-00000005/stage1.safetensors" "$T/ck.orig/step-00000005/stage1.safetensors"; ok $? "...the old checkpoints untouched"
run --steps 4 --save "$T/b4.st" >/dev/null 2>&1
run --steps 4 --checkpoint-dir "$T/ck" --save-every 2 --replace-checkpoints >"$T/repl.out" 2>&1
ok $? "--replace-checkpoints: the fresh run goes on"
is "$(cd "$T/ck" && echo step-*)" "step-00000002 step-00000004" "...and its checkpoints replace the other run's (steps 4 and 5 gone)"
runb=$(sed -n 's/^run //p' "$T/ck/LATEST")
orun=$(sed -n 's/^run //p' "$T/ck.orig/LATEST")
[ -n "$runb" ] && [ -n "$orun" ] && [ "$runb" != "$orun" ]; ok $? "LATEST and the manifests record the new run ($runb, was $orun)"
# an older run's higher step left in the directory: LATEST (valid) is taken
cp -a "$T/ck.orig/step-00000005" "$T/ck/"
run --steps 6 --resume "$T/ck" --checkpoint-dir "$T/ck" --save "$T/latest.st" >"$T/latest.out" 2>&1
ok $? "resume with another run's higher step-00000005 beside this run's LATEST (step 4)"
like "$(cat "$T/latest.out")" 'continuing from .*step-00000004 \(step 4\)' "...LATEST is authoritative: step 4, not the other run's step 5"
run --steps 6 --save "$T/b6.st" >/dev/null 2>&1
cmp -s "$T/latest.st" "$T/b6.st"; ok $? "...and it ends bitwise equal to this run uninterrupted"
# LATEST's step corrupted: the fall back stays within its run
f=$T/ck/step-00000006/stage1.safetensors
printf '\377' | dd of="$f" bs=1 seek=$(($(stat -c %s "$f") - 5)) conv=notrunc 2>/dev/null
run --steps 6 --resume "$T/ck" --save "$T/fb6.st" >"$T/fb6.out" 2>&1
like "$(cat "$T/fb6.out")" 'passing over .*step-00000005: it belongs to another run' "LATEST unusable: the other run's step is passed over"
like "$(cat "$T/fb6.out")" 'continuing from .*step-00000004' "...and this run's previous checkpoint taken"
rm -rf "$T/ck"; cp -a "$T/ck.orig" "$T/ck"

# 3000 step directories above the last complete one, never completed (a run
# killed over and over while it wrote them): one line for all of them, and a
# resume into the same directory removes them
cp -a "$T/ck.orig" "$T/many"
rm "$T/many/LATEST"
(cd "$T/many" && seq -f 'step-%08g' 6 3005 | xargs mkdir && seq -f 'step-%08g/stage1.safetensors' 6 3005 | xargs touch)
run --steps 7 --resume "$T/many" --checkpoint-dir "$T/many" --save-every 1 >"$T/many.out" 2>&1
ok $? "3000 incomplete newer steps: the resume goes on from step 5"
is "$(grep -c 'passing over' "$T/many.out")" 1 "...saying so in one line, not one per directory"
like "$(cat "$T/many.out")" 'resume: passing over 3000 step directories \(step-00000006 \.\. step-00003005\): they have no MANIFEST \(checkpoints that were never completed\)' \
    "...with their count and range"
like "$(cat "$T/many.out")" 'resume: removed 3000 step directories above step 5 that never completed' "...which it removes"
is "$(cd "$T/many" && echo step-*)" "step-00000006 step-00000007" "...leaving this run's two newest checkpoints"
rm -rf "$T/many"

# --- a checkpoint directory is locked by the run that writes into it -------------------
"$PIPERUN" "$G/bin" -- --threads 1 --steps 100000000 --log-every 100000000 --checkpoint-dir "$T/lk" \
    --save-every 100000000 --save-on-exit >"$T/lkA.out" 2>&1 &
echo $! >"$T/lkA.pid" # piperun itself: one SIGTERM to forward
t=0; while [ ! -s "$T/lk/LOCK" ] && [ $t -lt 200 ]; do sleep 0.1; t=$((t + 1)); done
like "$(cat "$T/lk/LOCK" 2>/dev/null)" "^run [0-9a-f]+ on host [^,]+, pid [0-9]+$" "a run writing checkpoints holds DIR/LOCK, naming its run id, host and pid"
run --steps 4 --checkpoint-dir "$T/lk" --save-every 2 >"$T/lkB.out" 2>&1; rc=$?
is "$rc" 2 "a second run into that directory: exit 2"
like "$(cat "$T/lkB.out")" "the checkpoint directory $T/lk cannot be used: it is in use by another run \(run [0-9a-f]+ on host [^,]+, pid [0-9]+ holds $T/lk/LOCK\): two runs writing checkpoints into one directory would delete each other's" \
    "...naming the run that holds it"
! grep -q 'step 1/' "$T/lkB.out"; ok $? "...before any step"
kill -TERM "$(cat "$T/lkA.pid")" 2>/dev/null
wait_exit "$(cat "$T/lkA.pid")" 30
[ ! -e "$T/lk/LOCK" ] && [ -f "$T/lk/LATEST" ]; ok $? "the lock file goes when its run ends (after its checkpoint on SIGTERM)"
rm -rf "$T/lk"
mkdir -p "$T/lk" && printf 'run dead on host gone, pid 1\n' >"$T/lk/LOCK"
run --steps 2 --checkpoint-dir "$T/lk" --save-every 1 >"$T/lkC.out" 2>&1
ok $? "a lock file nobody holds (its run was killed) is taken over"
[ -f "$T/lk/step-00000002/MANIFEST" ] && [ ! -e "$T/lk/LOCK" ]; ok $? "...the run writes its checkpoints and then lets go"
run --steps 0 --checkpoint-dir "$T/lk0" >/dev/null 2>&1
ok $? "a run that writes no checkpoint (--steps 0)"
[ ! -e "$T/lk0" ]; ok $? "...leaves no directory behind: the one its lock made goes"
rm -rf "$T/lk"

# --- mismatches: nothing usable -> a clear refusal ---------------------------------
# (another layout of the same model resumes it: tests/relayout.t)
e2e_gen "$T/m2" mlp_small "$(e2e_splits 2)" 1f1b except_last -e 's/seed = 1/seed = 2/' && build "$T/m2/gen"
timeout 60 "$PIPERUN" "$T/m2/gen/bin" -- --threads 1 --steps 10 --resume "$T/ck" >"$T/mm.out" 2>&1
rc=$?
[ "$rc" -ne 0 ]; ok $? "another model (another seed, 2 stages) refuses a 3-stage checkpoint (exit $rc)"
like "$(cat "$T/mm.out")" "MANIFEST was written by another model 'mlp_small' than this one \(model identity [0-9a-f]+ there, [0-9a-f]+ here\): its training settings differ: seed=1 there, seed=2 here" \
    "the message names what differs"
like "$(cat "$T/mm.out")" 'no complete checkpoint there is usable by every stage' "and says nothing is usable"
timeout 60 "$PIPERUN" "$G/bin" -- --threads 1 --steps 10 --resume "$T/nothing" >"$T/none.out" 2>&1
[ $? -ne 0 ] && grep -q 'no checkpoint there' "$T/none.out"; ok $? "--resume of an empty place: refused"

# --- a full disk ------------------------------------------------------------------
mkdir -p "$T/full"
if ! mount -t tmpfs -o size=400k tmpfs "$T/full" 2>"$T/mount.err"; then
    echo "ok $((_n + 1)) # SKIP cannot mount a tmpfs: $(cat "$T/mount.err")"; _n=$((_n + 1))
else
    run --steps 40 --checkpoint-dir "$T/full/ck" --save-every 2 >"$T/full.out" 2>&1
    rc=$?
    [ "$rc" -ne 0 ]; ok $? "a full disk stops the run (exit $rc)"
    like "$(cat "$T/full.out")" 'No space left on device' "the disk-full error is named"
    like "$(cat "$T/full.out")" 'the previous checkpoint is kept: step-[0-9]+ is intact' "and says the previous checkpoint is intact"
    last=$(head -1 "$T/full/ck/LATEST")
    n=${last#step-}; n=$(expr "$n" + 0)
    run --steps "$n" --save "$T/full_ref.st" >/dev/null 2>&1
    run --steps "$n" --resume "$T/full/ck" --save "$T/full_res.st" >"$T/full_res.out" 2>&1
    ok $? "resume from the checkpoint left on the full disk ($last)"
    cmp -s "$T/full_ref.st" "$T/full_res.st"; ok $? "it holds exactly the weights of step $n"
fi
done_testing

#!/bin/sh
# tests/outputs.t — every program writes an output file one way (io_atomic.h:
# beside the target, fsync, rename; a file-size limit is an error naming the
# file, not a silent death by SIGXFSZ; a failure leaves the previous file
# whole and no temporary), checks its standard output (a truncated CSV on a
# full disk is not success), and refuses at start an output that is another
# output or one of its inputs (device and inode: hard and symbolic links too).
# pipegen (gen, plan/schedule/trace --svg, schedule --csv), pipedata, and the
# stage programs (--save, --save-grads, --trace, --profile against --data,
# --targets, --load).
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh"
fault_tmpdir outputs
PY=${PYTHON:-/usr/bin/python3}
PIPEDATA=${PIPEDATA:-$TOP/build-san/pipedata}
[ -x "$PIPEDATA" ] || PIPEDATA=$TOP/build/pipedata
MODEL=$TOP/tests/models/mlp_small.pipe
# no_tmp DIR: no temporary of a writer is left in DIR
no_tmp() { [ -z "$(ls -A "$1" | grep '\.tmp\.')" ]; }

# --- pipegen gen over a file-size limit ------------------------------------------------------
"$PIPEGEN" gen "$MODEL" -o "$T/g" >/dev/null 2>&1
sum0=$(cat "$T/g"/* | md5sum)
sh -c "ulimit -f 4; '$PIPEGEN' gen '$TOP/examples/gpt_char.pipe' -o '$T/g'" >"$T/gen.log" 2>&1; rc=$?
is "$rc" 1 "pipegen gen over ulimit -f: exit 1, not a death by SIGXFSZ"
like "$(cat "$T/gen.log")" "error: cannot write $T/g/[^ ]+: write failed: File too large .*the previous generation is intact" \
    "...naming the file and the reason"
no_tmp "$T/g"; ok $? "...no temporary is left in the output folder"
is "$(cat "$T/g"/* | md5sum)" "$sum0" "...and the previous generation is untouched"

# --- --svg: beside it and renamed, never torn -------------------------------------------------
"$PIPEGEN" plan "$MODEL" --svg "$T/p.svg" >/dev/null 2>&1
ok $? "pipegen plan --svg writes the timeline"
sum0=$(md5sum <"$T/p.svg")
sh -c "ulimit -f 1; '$PIPEGEN' plan '$MODEL' --svg '$T/p.svg' >/dev/null" 2>"$T/svg.log"; rc=$?
is "$rc" 1 "--svg over ulimit -f: exit 1"
like "$(cat "$T/svg.log")" "$T/p\\.svg: error: cannot write the timeline: cannot write $T/p\\.svg: write failed: File too large" \
    "...naming the file and the reason"
is "$(md5sum <"$T/p.svg")" "$sum0" "...and the previous SVG is whole"
no_tmp "$T"; ok $? "...no temporary left"
"$PIPEGEN" plan "$MODEL" --svg /dev/null >/dev/null 2>&1
ok $? "--svg /dev/null: a device is written in place"
[ -c /dev/null ]; ok $? "...and stays a device"
"$PIPEGEN" schedule "$MODEL" --svg "$T" >"$T/dir.log" 2>&1; rc=$?
is "$rc" 1 "--svg naming a folder: exit 1"
like "$(cat "$T/dir.log")" "cannot write $T: it is a folder, not a regular file" "...saying so"

# --- the standard output --------------------------------------------------------------------
"$PIPEGEN" schedule "$MODEL" --csv >/dev/full 2>"$T/full.log"; rc=$?
is "$rc" 1 "pipegen schedule --csv > a full disk (/dev/full): exit 1"
is "$(cat "$T/full.log")" "pipegen: cannot write the standard output: No space left on device" "...saying so"
sh -c "ulimit -f 1; '$PIPEGEN' schedule '$MODEL' --csv >'$T/s.csv'" 2>"$T/fsize.log"; rc=$?
is "$rc" 1 "pipegen schedule --csv over ulimit -f: exit 1"
is "$(cat "$T/fsize.log")" "pipegen: cannot write the standard output: File too large (the file-size limit, ulimit -f)" \
    "...naming the limit"
"$PIPEGEN" check "$MODEL" >/dev/full 2>/dev/null
is "$?" 1 "pipegen check > /dev/full: exit 1 too"

# --- an output that is an input ----------------------------------------------------------------
cp "$MODEL" "$T/m.pipe"
sum0=$(md5sum <"$T/m.pipe")
"$PIPEGEN" plan "$T/m.pipe" --svg "$T/m.pipe" >/dev/null 2>"$T/same.log"; rc=$?
is "$rc" 2 "pipegen plan --svg naming the model: exit 2"
is "$(cat "$T/same.log")" "pipegen: --svg $T/m.pipe is the same file as the model $T/m.pipe: writing it would destroy what is read from it; give the output another name" \
    "...saying so"
ln -s m.pipe "$T/link.pipe"
"$PIPEGEN" schedule "$T/m.pipe" --svg "$T/link.pipe" >/dev/null 2>"$T/same.log"; rc=$?
is "$rc" 2 "...a symbolic link to it as well"
is "$(md5sum <"$T/m.pipe")" "$sum0" "...and the model is untouched"
"$PIPEGEN" plan "$T/m.pipe" --svg "$T/./m.pipe" >/dev/null 2>&1
is "$?" 2 "...another spelling of its path as well"

# --- pipedata ---------------------------------------------------------------------------------
printf 'the text of a small data set\n' >"$T/in.txt"
"$PIPEDATA" text "$T/in.txt" -o "$T/in.txt" >/dev/null 2>"$T/pd.log"; rc=$?
is "$rc" 2 "pipedata text F -o F: exit 2"
is "$(cat "$T/pd.log")" "pipedata: -o $T/in.txt is the same file as the input $T/in.txt: writing it would destroy what is read from it; give the output another name" \
    "...saying so"
is "$(cat "$T/in.txt")" "the text of a small data set" "...and the input is untouched"
ln "$T/in.txt" "$T/hard.txt"
"$PIPEDATA" text "$T/in.txt" -o "$T/hard.txt" >/dev/null 2>&1
is "$?" 2 "...a hard link to the input as well"
"$PIPEDATA" text "$T/in.txt" -o "$T/t.pgd" >/dev/null
sum0=$(md5sum <"$T/t.pgd")
head -c 100000 /dev/zero | tr '\0' 'a' >"$T/big.txt"
sh -c "ulimit -f 64; '$PIPEDATA' text '$T/big.txt' -o '$T/t.pgd'" >"$T/pd.log" 2>&1; rc=$?
is "$rc" 1 "pipedata over ulimit -f: exit 1, not a death by SIGXFSZ"
like "$(cat "$T/pd.log")" "pipedata: cannot write $T/t\\.pgd: write failed: File too large" "...naming the file"
is "$(md5sum <"$T/t.pgd")" "$sum0" "...the previous output whole"
no_tmp "$T"; ok $? "...no temporary left"
"$PIPEDATA" bytes "$T/t.pgd" -o "$T/back.txt" >/dev/null
sh -c "ulimit -f 1; '$PIPEDATA' bytes '$T/t.pgd' -o '$T/back.txt'" >/dev/null 2>&1
is "$(cat "$T/back.txt")" "the text of a small data set" "pipedata bytes: a failed write leaves the previous file whole"
"$PIPEDATA" text "$T/in.txt" -o "$T/t2.pgd" >/dev/full 2>"$T/pd.log"; rc=$?
is "$rc" 1 "pipedata > /dev/full: exit 1"
is "$(cat "$T/pd.log")" "pipedata: cannot write the standard output: No space left on device" "...saying so"

# --- a stage's outputs and inputs -------------------------------------------------------------
G=$T/m1
gen_mlp "$G" 1
ok $? "mlp_small on 1 stage builds"
"$PY" - "$T/x.pgd" "$T/y.pgd" <<'PY'
import struct, sys
for path, per in ((sys.argv[1], 64), (sys.argv[2], 32)):
    with open(path, "wb") as f:
        f.write(b"PGD1" + struct.pack("<III", 1, 0, 2) + struct.pack("<QQ", 24, per))
        f.write(struct.pack("<%df" % (24 * per), *[((i * 37) % 200) / 100.0 - 1.0 for i in range(24 * per)]))
PY
xsum=$(md5sum <"$T/x.pgd")
stage() { PIPE_RANK=0 PIPE_WORLD=1 timeout 60 "$G/bin/stage0" --threads 1 --steps 2 "$@"; }
stage --save "$T/w.st" --save-grads "$T/w.st" >"$T/s.log" 2>&1; rc=$?
is "$rc" 2 "--save F --save-grads F: exit 2 before any step"
like "$(cat "$T/s.log")" "stage 0: --save-grads $T/w\\.st is the same file as --save $T/w\\.st: each would replace the other; give each its own file; nothing was run" \
    "...saying so"
[ ! -e "$T/w.st" ]; ok $? "...and nothing is written"
stage --save "$T/w.st" --trace "$T/w.st" >"$T/s.log" 2>&1
is "$?" 2 "--save F --trace F: exit 2"
stage --data "$T/x.pgd" --targets "$T/y.pgd" --save "$T/x.pgd" >"$T/s.log" 2>&1; rc=$?
is "$rc" 2 "--save naming the run's --data file: exit 2"
like "$(cat "$T/s.log")" "stage 0: --save $T/x\\.pgd is the same file as --data $T/x\\.pgd: writing it would destroy what is read from it" \
    "...saying so"
is "$(md5sum <"$T/x.pgd")" "$xsum" "...and the data set is untouched"
ln -s x.pgd "$T/xl.pgd"
stage --data "$T/xl.pgd" --targets "$T/y.pgd" --profile "$T/x.pgd" >/dev/null 2>&1
is "$?" 2 "--profile naming --data through a symbolic link: exit 2"
stage --data "$T/x.pgd" --targets "$T/y.pgd" --save "$T/w.st" >/dev/null 2>&1 && \
    stage --load "$T/w.st" --save "$T/w.st" >"$T/s.log" 2>&1; rc=$?
is "$rc" 2 "--load F --save F: exit 2"
stage --save "$T/w2.st" >/dev/full 2>"$T/s.log"; rc=$?
is "$rc" 1 "a stage whose standard output is a full disk: exit 1"
like "$(cat "$T/s.log")" "stage 0: cannot write the standard output: a write to it failed" "...saying so"
[ -s "$T/w2.st" ]; ok $? "...after writing its weights"
done_testing

#!/bin/sh
# tests/fault_data.t — bad data through real stage programs: a data file of the
# wrong size, dtype or magic; token ids at or above the vocabulary; NaN or Inf in
# a data file or a --load file (refused when read); values near the float limit
# (finite, but the gradients overflow: every stage stops before its optimizer,
# or skips the step with --skip-nonfinite, leaving the weights untouched); a
# loss that is not finite; inputs and targets that do not belong together
# (--data without --targets, different sample counts, stage 0 and the loss stage
# reading different token streams); a FIFO where a file is meant; a data file
# truncated while the run reads it (SIGBUS on the mapping), or rewritten in
# place at the same size (its change time, checked after every read); a file-size limit
# (SIGXFSZ) while the weights are written.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh"
. "$TOP/tests/lib_lm.sh"
fault_tmpdir fault-data
G=$T/m2
gen_mlp "$G" 2
ok $? "mlp_small on 2 stages builds"
run() { timeout 60 "$PIPERUN" "$G/bin" -- --threads 1 "$@"; }
# pgd FILE DTYPE(f32|i32) SAMPLES PER [INDEX VALUE]...: a .pgd data file
pgd() {
    "${PYTHON:-/usr/bin/python3}" - "$@" <<'PY'
import struct, sys
path, dt, n, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
vals = [((i * 37) % 200) / 100.0 - 1.0 if dt == "f32" else (i * 7) % 32 for i in range(n * per)]
for k in range(5, len(sys.argv), 2):
    vals[int(sys.argv[k])] = float(sys.argv[k + 1]) if dt == "f32" else int(sys.argv[k + 1])
code = 0 if dt == "f32" else 2
with open(path, "wb") as f:
    f.write(b"PGD1" + struct.pack("<III", 1, code, 2) + struct.pack("<QQ", n, per))
    f.write(struct.pack("<%d%s" % (len(vals), "f" if dt == "f32" else "i"), *vals))
PY
}
# same_tensors A B: two safetensors files hold the same tensor bytes (their
# "steps" metadata may differ)
same_tensors() {
    "${PYTHON:-/usr/bin/python3}" -c '
import struct, sys
d = [open(p, "rb").read() for p in sys.argv[1:]]
n = [struct.unpack("<Q", x[:8])[0] for x in d]
sys.exit(0 if d[0][8 + n[0]:] == d[1][8 + n[1]:] and len(d[0]) > n[0] + 8 else 1)' "$1" "$2"
}

# --- wrong magic, dtype, size --------------------------------------------------------
pgd "$T/good.pgd" f32 48 64
pgd "$T/y.pgd" f32 48 32
run --steps 2 --data "$T/good.pgd" --targets "$T/y.pgd" >"$T/good.out" 2>&1
ok $? "a good pair of data files trains"
cat "$T/good.pgd" >"$T/magic.pgd"
printf 'PGDX' | dd of="$T/magic.pgd" bs=1 conv=notrunc 2>/dev/null
run --steps 2 --data "$T/magic.pgd" --targets "$T/y.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "bad magic: exit 1"
like "$(cat "$T/o")" 'magic\.pgd: not a pipegen data file \(bad magic\)' "bad magic: named"
pgd "$T/dtype.pgd" i32 48 64
run --steps 2 --data "$T/dtype.pgd" --targets "$T/y.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "wrong dtype: exit 1"
like "$(cat "$T/o")" 'dtype\.pgd holds i32 but the model expects f32\[64\]' "wrong dtype: both named"
pgd "$T/shape.pgd" f32 48 63
run --steps 2 --data "$T/shape.pgd" --targets "$T/y.pgd" >"$T/o" 2>&1
like "$(cat "$T/o")" 'shape\.pgd holds samples of shape \[63\] but the model expects \[64\]' "wrong sample shape: both named"
head -c 5000 "$T/good.pgd" >"$T/short.pgd"
run --steps 2 --data "$T/short.pgd" --targets "$T/y.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "truncated file: exit 1"
like "$(cat "$T/o")" 'short\.pgd is truncated: header says 48 samples of 256 bytes = 12288 bytes, file has 4968 bytes' "truncated: both sizes named"

# --- token ids outside the vocabulary ---------------------------------------------------
L=$T/lm
mkdir -p "$L"
sed -e '/^split/d' "$TOP/tests/models/gpt_tiny.pipe" >"$L/m.pipe"
"$PIPEGEN" gen "$L/m.pipe" -o "$L" >/dev/null 2>&1 && build "$L"
ok $? "gpt_tiny on 1 stage builds"
pgd "$T/ids.pgd" i32 12 8 21 32
pgd "$T/tids.pgd" i32 12 8
timeout 60 "$PIPERUN" "$L/bin" -- --threads 1 --steps 1 --data "$T/ids.pgd" --targets "$T/tids.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "a token id = vocabulary size: exit 1"
like "$(cat "$T/o")" 'ids\.pgd: sample 2, element 5 is token id 32, outside \[0, 32\): the model.s vocabulary size is 32' "the sample, element, id and vocabulary are named"
pgd "$T/neg.pgd" i32 12 8 0 -1
timeout 60 "$PIPERUN" "$L/bin" -- --threads 1 --steps 1 --data "$T/tids.pgd" --targets "$T/neg.pgd" >"$T/o" 2>&1; rc=$?
like "$(cat "$T/o")" 'neg\.pgd: sample 0, element 0 is target id -1, outside \[0, 32\)' "a negative target id is refused ($rc)"

# --- NaN and Inf refused where they enter ---------------------------------------------
pgd "$T/xnan.pgd" f32 48 64 100 nan
run --steps 3 --data "$T/xnan.pgd" --targets "$T/y.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "a NaN in --data: exit 1"
like "$(cat "$T/o")" '\[stage 0\] .*xnan\.pgd: sample 1, element 36 is nan: a data file must hold finite values' \
    "...refused when read, naming the file, the sample and the element"
! grep -q 'step 1/' "$T/o"; ok $? "...before any step"
pgd "$T/yinf.pgd" f32 48 32 70 -inf
run --steps 3 --data "$T/good.pgd" --targets "$T/yinf.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "an -Inf in --targets: exit 1"
like "$(cat "$T/o")" '\[stage 1\] .*yinf\.pgd: sample 2, element 6 is -inf: a data file must hold finite values' "...refused when read"
run --steps 0 --save "$T/init.st" >/dev/null 2>&1
"${PYTHON:-/usr/bin/python3}" - "$T/init.st" "$T/wnan.st" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
b[8 + n + 4 * 7: 8 + n + 4 * 8] = struct.pack("<f", float("nan"))   # element 7 of the first tensor
open(sys.argv[2], "wb").write(b)
PY
run --steps 1 --load "$T/wnan.st" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "a NaN weight in a --load file: exit 1"
like "$(cat "$T/o")" "\[stage 0\] --load: .*wnan\\.st: tensor 'layer0\\.weight', element 7 is nan: refusing weights that are not finite" \
    "...refused, naming the tensor and the element"
# the same weights rounded to bf16 precision: as F32 (a), as BF16 (b, converted on load exactly), and with an
# extra tensor no parameter takes (c: load_check.c refuses it, naming it)
"${PYTHON:-/usr/bin/python3}" - "$T/init.st" "$T/wa.st" "$T/wb.st" "$T/wc.st" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr, data = json.loads(raw[8:8 + n]), raw[8 + n:]
def store(path, h, d):
    t = json.dumps(h, separators=(",", ":")).encode()
    t += b" " * (-len(t) % 8)
    open(path, "wb").write(struct.pack("<Q", len(t)) + t + d)
f32, bf, off = {}, {}, 0
ha, hb, da, db = {"__metadata__": hdr.get("__metadata__", {})}, {"__metadata__": hdr.get("__metadata__", {})}, b"", b""
for k, v in sorted(((k, v) for k, v in hdr.items() if k != "__metadata__"), key=lambda x: x[1]["data_offsets"][0]):
    b0, b1 = v["data_offsets"]
    words = struct.unpack("<%dI" % ((b1 - b0) // 4), data[b0:b1])
    top = [w >> 16 for w in words]
    ha[k] = {"dtype": "F32", "shape": v["shape"], "data_offsets": [len(da), len(da) + 4 * len(top)]}
    da += struct.pack("<%dI" % len(top), *[t << 16 for t in top])
    hb[k] = {"dtype": "BF16", "shape": v["shape"], "data_offsets": [len(db), len(db) + 2 * len(top)]}
    db += struct.pack("<%dH" % len(top), *top)
store(sys.argv[2], ha, da)
store(sys.argv[3], hb, db)
hc = dict(ha)
hc["junk.weight"] = {"dtype": "F32", "shape": [2], "data_offsets": [len(da), len(da) + 8]}
store(sys.argv[4], hc, da + struct.pack("<2f", 1.0, 2.0))
PY
run --steps 0 --load "$T/wa.st" --save "$T/sa.st" >/dev/null 2>&1
run --steps 0 --load "$T/wb.st" --save "$T/sb.st" >"$T/o" 2>&1; rc=$?
is "$rc" 0 "a --load file of BF16 tensors: taken (bf16 widens to f32 exactly), not refused"
like "$(cat "$T/o")" "\[stage 0\] note: --load .*wb\.st: [0-9]+ of its tensors are BF16 \(the first '[^']+'\), converted to F32 exactly" \
    "...saying so"
cmp -s "$T/sa.st" "$T/sb.st"; ok $? "...into exactly the weights the same values in F32 give"
run --steps 0 --load "$T/wc.st" --save "$T/sc.st" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "a --load file with a tensor no parameter takes: refused, not silent"
like "$(cat "$T/o")" "1 of the file's [0-9]+ tensors are not the model's: junk\.weight" "...naming the tensor"
# past the first blocks the test runs 64 floats at once: the element is still the first bad one
"${PYTHON:-/usr/bin/python3}" - "$T/init.st" "$T/winf.st" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
for e, v in ((1000, "-inf"), (1001, "nan")):   # elements 1000 and 1001 of the first tensor
    b[8 + n + 4 * e: 8 + n + 4 * (e + 1)] = struct.pack("<f", float(v))
open(sys.argv[2], "wb").write(b)
PY
run --steps 1 --load "$T/winf.st" >"$T/o" 2>&1
like "$(cat "$T/o")" "\[stage 0\] --load: .*winf\\.st: tensor 'layer0\\.weight', element 1000 is -inf: refusing weights" \
    "...the first bad element named, deep in the tensor"

# --- finite values near the float limit: the gradients overflow -----------------------
pgd "$T/xbig.pgd" f32 48 64 100 3e38   # relu hides it from the loss, not from the gradients
run --steps 3 --data "$T/xbig.pgd" --targets "$T/y.pgd" --save "$T/big.st" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "an input of 3e38: exit 1, not a run that ends with NaN weights"
like "$(cat "$T/o")" '\[stage 0\] the gradient of layer0\.weight in step 1 is not finite \(its sum of squares is (inf|nan)\): stopping before the optimizer' \
    "...the stage holding the gradient names it and the step"
[ ! -e "$T/big.st" ]; ok $? "...and no weights are written"
run --steps 1 --data "$T/xbig.pgd" --targets "$T/y.pgd" --skip-nonfinite --save "$T/bigskip.st" >"$T/o" 2>&1; rc=$?
is "$rc" 0 "--skip-nonfinite: the run goes on"
like "$(cat "$T/o")" 'step 1/1  loss [0-9.]+ .*\(skipped: gradients not finite\)' "...step 1 is reported skipped"
same_tensors "$T/bigskip.st" "$T/init.st"; ok $? "...and changes no weight on any stage"

# --- a loss that is not finite -----------------------------------------------------------
# mlp_small without its last relu (which would hide an infinite output): one
# sample of 3e38 inputs overflows the forward pass to inf and NaN
N=$T/m2n
mkdir -p "$N"
sed -e '/# S[13]$/d' -e 's/layer2 = linear(128 -> 32)  relu/layer2 = linear(128 -> 32)/' "$TOP/tests/models/mlp_small.pipe" >"$N/m.pipe"
"$PIPEGEN" gen "$N/m.pipe" -o "$N" >/dev/null 2>&1 && build "$N"
ok $? "mlp_small without its last relu on 2 stages builds"
# shellcheck disable=SC2046 # index value pairs
pgd "$T/xall.pgd" f32 48 64 $(i=0; while [ $i -lt 64 ]; do printf '%d 3e38 ' $i; i=$((i + 1)); done)
timeout 60 "$PIPERUN" "$N/bin" -- --threads 1 --steps 3 --data "$T/xall.pgd" --targets "$T/y.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "a loss that is not finite stops the run: exit 1"
like "$(cat "$T/o")" '\[stage 1\] the loss of step 1 is not finite \(-?(inf|nan) in micro-batch 0\): stopping before the optimizer' "the loss stage names the step"
# every stage says why it stops: started by hand, as piperun stops the others
# as soon as the first exits (on a loaded machine before they have printed)
M=127.0.0.1:$(free_port)
for k in 0 1; do
    start_stage "$N/bin" $k 2 "$M" "$T/nf$k.log" --steps 3 --data "$T/xall.pgd" --targets "$T/y.pgd"
done
wait_exit "$(cat "$T/nf0.log.pid")" 60; x0=$WX
wait_exit "$(cat "$T/nf1.log.pid")" 60; x1=$WX
[ "$x0 $x1" = "1 1" ] && grep -q 'step 1 .*not finite\|stopping: stage 1 found' "$T/nf0.log" &&
    grep -q 'step 1 .*not finite' "$T/nf1.log"
ok $? "every stage says why it stops (exits $x0, $x1)"
timeout 60 "$PIPERUN" "$N/bin" -- --threads 1 --steps 2 --data "$T/xall.pgd" --targets "$T/y.pgd" --skip-nonfinite >"$T/o" 2>&1; rc=$?
is "$rc" 0 "--skip-nonfinite: the run goes on"
like "$(cat "$T/o")" 'step 1/2  loss -?(inf|nan) .*\(skipped: loss not finite\)' "step 1 is reported skipped"
like "$(cat "$T/o")" 'step 2/2  loss [0-9]' "step 2 has a finite loss"

# --- inputs and targets that do not belong together --------------------------------------
run --steps 2 --data "$T/good.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 2 "--data without --targets: exit 2"
like "$(cat "$T/o")" '\[stage [01]\] --data .*good\.pgd without --targets: its inputs would be paired with synthetic targets' \
    "...it would pair real inputs with synthetic targets"
printf 'just some text, not a data file\n' >"$T/notpgd.txt"
run --steps 2 --data "$T/notpgd.txt" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "--data alone naming a file that is no .pgd: exit 1"
like "$(cat "$T/o")" '\[stage [01]\] .*notpgd\.txt: not a pipegen data file \(bad magic\)' "...said first as bad magic"
! grep -q 'without --targets' "$T/o"; ok $? "...not as --data without --targets"
run --steps 2 --targets "$T/y.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 2 "--targets without --data: exit 2"
like "$(cat "$T/o")" '\[stage [01]\] --targets .*y\.pgd without --data' "...named"
pgd "$T/y40.pgd" f32 40 32
run --steps 2 --data "$T/good.pgd" --targets "$T/y40.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "48 inputs, 40 targets: exit 1"
like "$(cat "$T/o")" 'good\.pgd holds 48 samples \(stage 0\) but --targets .*y40\.pgd holds 40 \(stage 1\): inputs and targets must pair one to one' \
    "...refused at the rendezvous with both files and counts"
timeout 60 "$PIPERUN" "$L/bin" -- --threads 1 --steps 1 --data "$T/tids.pgd" --targets "$T/ids.pgd" >/dev/null 2>&1
pgd "$T/tids10.pgd" i32 10 8
timeout 60 "$PIPERUN" "$L/bin" -- --threads 1 --steps 1 --data "$T/tids.pgd" --targets "$T/tids10.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "one stage holding both files: 12 inputs, 10 targets refused (exit 1)"
like "$(cat "$T/o")" 'holds 12 samples \(stage 0\) but --targets .*tids10\.pgd holds 10 \(stage 0\)' "...with both counts"
# stage 0 and the loss stage each read the token stream: started by hand, each in
# its own folder, the same name holds different text
LM=$T/lm2
lm_build "$LM" 2 replicate
ok $? "lm_tiny on 2 stages builds"
mkdir -p "$T/h0" "$T/h1"
lm_text "$T/text.txt"
"$PIPEDATA" text "$T/text.txt" -o "$T/h0/tokens.pgd" >/dev/null 2>&1
sed 's/cat/cow/' "$T/text.txt" >"$T/text2.txt"
"$PIPEDATA" text "$T/text2.txt" -o "$T/h1/tokens.pgd" >/dev/null 2>&1
# by_folder RUN-ID: stage k started in $T/hk with --data tokens.pgd; r0 and r1 their statuses
by_folder() {
    M=127.0.0.1:$(free_port)
    for k in 0 1; do
        (cd "$T/h$k" && PIPE_RUN_ID=$1 PIPE_RANK=$k PIPE_WORLD=2 PIPE_MASTER=$M "$LM/bin/stage$k" --threads 1 --steps 2 \
            --data tokens.pgd >"$T/t$k.log" 2>&1) & echo $! >"$T/t$k.pid"
    done
    wait_exit "$(cat "$T/t0.pid")" 30; r0=$WX
    wait_exit "$(cat "$T/t1.pid")" 30; r1=$WX
}
by_folder tok
[ "$r0" = 1 ] && [ "$r1" = 1 ]; ok $? "two different token streams under one name: both stages exit 1 ($r0, $r1)"
like "$(cat "$T/t0.log" "$T/t1.log")" 'stage 1 and stage 0 read different files as --data \([0-9]+ bytes, hash [0-9a-f]{16} on stage 1; [0-9]+ bytes, hash [0-9a-f]{16} on stage 0\): give every stage the same file' \
    "...the stages compared name, size and hash at the rendezvous"
cp "$T/h0/tokens.pgd" "$T/h1/tokens.pgd"
by_folder tok2
[ "$r0" = 0 ] && [ "$r1" = 0 ]; ok $? "...the same bytes in both folders train ($r0, $r1)"

# --- a FIFO where a regular file is meant: refused at once, never waited on -------------
mkfifo "$T/fifo"
for opt in "--data $T/fifo --targets $T/y.pgd" "--data $T/good.pgd --targets $T/fifo" "--load $T/fifo"; do
    # shellcheck disable=SC2086 # opt is a list of options
    timeout 20 "$PIPERUN" "$G/bin" -- --threads 1 --steps 1 $opt >"$T/o" 2>&1; rc=$?
    is "$rc" 1 "a FIFO as ${opt%% *}: exit 1 at once (not a hang: $rc)"
    like "$(cat "$T/o")" "$T/fifo is not a regular file \(it is a pipe \(FIFO\)\)" "...saying what it is"
done

# --- a data file truncated while the run reads it ----------------------------------------
pgd "$T/long.pgd" f32 4800 64
pgd "$T/ylong.pgd" f32 4800 32
M=127.0.0.1:$(free_port)
start_stage "$G/bin" 0 2 "$M" "$T/b0.log" --steps 100000000 --log-every 100000000 --data "$T/long.pgd" --targets "$T/ylong.pgd"
start_stage "$G/bin" 1 2 "$M" "$T/b1.log" --steps 100000000 --log-every 100000000 --data "$T/long.pgd" --targets "$T/ylong.pgd"
sleep 2
truncate -s 4096 "$T/long.pgd"
wait_exit "$(cat "$T/b0.log.pid")" 20; r0=$WX
wait_exit "$(cat "$T/b1.log.pid")" 20
is "$r0" 1 "a data file truncated under a running stage: exit 1, not a death by SIGBUS"
like "$(cat "$T/b0.log")" "stage 0: step [0-9]+: $T/long\\.pgd was truncated or changed while this stage read it \\(it now has 4096 bytes, it had [0-9]+ at the start\\)" \
    "...naming the file and both sizes"

# rewritten in place at the same size (no SIGBUS: every page is still there): the
# file's change time after each read gives it away
pgd "$T/long.pgd" f32 4800 64
M=127.0.0.1:$(free_port)
start_stage "$G/bin" 0 2 "$M" "$T/c0.log" --steps 100000000 --log-every 100000000 --data "$T/long.pgd" --targets "$T/ylong.pgd"
start_stage "$G/bin" 1 2 "$M" "$T/c1.log" --steps 100000000 --log-every 100000000 --data "$T/long.pgd" --targets "$T/ylong.pgd"
sleep 2
sz0=$(stat -c %s "$T/long.pgd")
"${PYTHON:-/usr/bin/python3}" -c '
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(4096)
    f.write(bytes(4096))' "$T/long.pgd"
wait_exit "$(cat "$T/c0.log.pid")" 20; r0=$WX
wait_exit "$(cat "$T/c1.log.pid")" 20
is "$r0" 1 "a data file rewritten in place at the same size under a running stage: exit 1, not training on the new values"
is "$(stat -c %s "$T/long.pgd")" "$sz0" "...(its size unchanged)"
like "$(cat "$T/c0.log")" "stage 0: step [0-9]+: $T/long\\.pgd was changed while this stage read it \\(written to [0-9.]+ s after it was opened, at the same size or not\\)" \
    "...naming the file"

# --- a file-size limit while the weights are written ---------------------------------------
prlimit --fsize=20000 "$PIPERUN" "$G/bin" -- --threads 1 --steps 2 --save "$T/limited.st" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "ulimit -f below the weights' size: exit 1, not a death by SIGXFSZ ($rc)"
like "$(cat "$T/o")" "cannot write $T/limited\\.st: write failed: File too large" "...the file and the reason named"
[ ! -e "$T/limited.st" ] && [ -z "$(ls "$T" | grep 'limited\.st\.tmp')" ]; ok $? "...and nothing is left behind"
done_testing

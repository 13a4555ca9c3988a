#!/bin/sh
# tests/fault_data.t — bad data through real stage programs: a data file of the
# wrong size, dtype or magic; token ids at or above the vocabulary; a NaN in the
# targets (the run stops naming the step, or skips it on every stage with
# --skip-nonfinite, leaving the weights untouched).
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh"
T=$(mktemp -d /tmp/pg-fault-data.XXXXXX)
trap 'rm -rf "$T"' EXIT
G=$T/m2
gen_mlp "$G" 2
ok $? "mlp_small on 2 stages builds"
run() { timeout 60 "$PIPERUN" "$G/bin" -- --threads 1 "$@"; }
# pgd FILE DTYPE(f32|i32) SAMPLES PER [BADINDEX BADVALUE]: a .pgd data file
pgd() {
    "${PYTHON:-/usr/bin/python3}" - "$@" <<'PY'
import struct, sys
path, dt, n, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
vals = [((i * 37) % 200) / 100.0 - 1.0 if dt == "f32" else (i * 7) % 32 for i in range(n * per)]
if len(sys.argv) > 6:
    vals[int(sys.argv[5])] = float(sys.argv[6]) if dt == "f32" else int(sys.argv[6])
code = 0 if dt == "f32" else 2
with open(path, "wb") as f:
    f.write(b"PGD1" + struct.pack("<III", 1, code, 2) + struct.pack("<QQ", n, per))
    f.write(struct.pack("<%d%s" % (len(vals), "f" if dt == "f32" else "i"), *vals))
PY
}

# --- wrong magic, dtype, size --------------------------------------------------------
pgd "$T/good.pgd" f32 48 64
run --steps 2 --data "$T/good.pgd" >"$T/good.out" 2>&1
ok $? "a good data file trains"
printf 'XXXX' | dd of="$T/magic.pgd" bs=1 conv=notrunc 2>/dev/null; cat "$T/good.pgd" >"$T/magic.pgd"
printf 'PGDX' | dd of="$T/magic.pgd" bs=1 conv=notrunc 2>/dev/null
run --steps 2 --data "$T/magic.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "bad magic: exit 1"
like "$(cat "$T/o")" 'magic\.pgd: not a pipegen data file \(bad magic\)' "bad magic: named"
pgd "$T/dtype.pgd" i32 48 64
run --steps 2 --data "$T/dtype.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "wrong dtype: exit 1"
like "$(cat "$T/o")" 'dtype\.pgd holds i32 but the model expects f32\[64\]' "wrong dtype: both named"
pgd "$T/shape.pgd" f32 48 63
run --steps 2 --data "$T/shape.pgd" >"$T/o" 2>&1
like "$(cat "$T/o")" 'shape\.pgd holds samples of shape \[63\] but the model expects \[64\]' "wrong sample shape: both named"
head -c 5000 "$T/good.pgd" >"$T/short.pgd"
run --steps 2 --data "$T/short.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "truncated file: exit 1"
like "$(cat "$T/o")" 'short\.pgd is truncated: header says 48 samples of 256 bytes = 12288 bytes, file has 4968 bytes' "truncated: both sizes named"

# --- token ids outside the vocabulary ---------------------------------------------------
L=$T/lm
mkdir -p "$L"
sed -e '/^split/d' "$TOP/tests/models/gpt_tiny.pipe" >"$L/m.pipe"
"$PIPEGEN" gen "$L/m.pipe" -o "$L" >/dev/null 2>&1 && build "$L"
ok $? "gpt_tiny on 1 stage builds"
pgd "$T/ids.pgd" i32 12 8 21 32
timeout 60 "$PIPERUN" "$L/bin" -- --threads 1 --steps 1 --data "$T/ids.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "a token id = vocabulary size: exit 1"
like "$(cat "$T/o")" 'ids\.pgd: sample 2, element 5 is token id 32, outside \[0, 32\): the model.s vocabulary size is 32' "the sample, element, id and vocabulary are named"
pgd "$T/neg.pgd" i32 12 8 0 -1
timeout 60 "$PIPERUN" "$L/bin" -- --threads 1 --steps 1 --targets "$T/neg.pgd" >"$T/o" 2>&1; rc=$?
like "$(cat "$T/o")" 'neg\.pgd: sample 0, element 0 is target id -1, outside \[0, 32\)' "a negative target id is refused ($rc)"

# --- NaN in the loss ---------------------------------------------------------------------
pgd "$T/nan.pgd" f32 48 32 200 nan  # a NaN target: relu would hide a NaN input
run --steps 3 --targets "$T/nan.pgd" >"$T/o" 2>&1; rc=$?
is "$rc" 1 "a NaN loss stops the run: exit 1"
like "$(cat "$T/o")" '\[stage 1\] the loss of step 1 is not finite \(nan in micro-batch [0-9]+\): stopping before the optimizer' "the loss stage names the step"
like "$(cat "$T/o")" '\[stage 0\] stopping: stage 1 found the loss of step 1 not finite' "every stage says why it stops"
run --steps 2 --targets "$T/nan.pgd" --skip-nonfinite --save "$T/skip.st" >"$T/o" 2>&1; rc=$?
is "$rc" 0 "--skip-nonfinite: the run goes on"
like "$(cat "$T/o")" 'step 1/2  loss nan .*\(skipped: loss not finite\)' "step 1 is reported skipped"
like "$(cat "$T/o")" 'step 2/2  loss [0-9]' "step 2 has a finite loss"
run --steps 1 --targets "$T/nan.pgd" --skip-nonfinite --save "$T/skip1.st" >/dev/null 2>&1
run --steps 0 --save "$T/init.st" >/dev/null 2>&1
# the files differ only in their "steps" metadata: compare the tensor bytes
"${PYTHON:-/usr/bin/python3}" -c '
import struct, sys
d = [open(p, "rb").read() for p in sys.argv[1:]]
n = [struct.unpack("<Q", x[:8])[0] for x in d]
sys.exit(0 if d[0][8 + n[0]:] == d[1][8 + n[1]:] and len(d[0]) > n[0] + 8 else 1)' "$T/skip1.st" "$T/init.st"
ok $? "a skipped step changes no weight on any stage"
done_testing

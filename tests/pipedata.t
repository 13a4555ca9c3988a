#!/bin/sh
# tests/pipedata.t — `pipedata npy` and `pipedata csv` (cmd/pd_npy.c,
# cmd/pd_csv.c): numpy arrays of every dtype it reads (f32, f64, int32, int64,
# uint8; either byte order; .npy versions 1 and 2) become .pgd files holding
# the same values (checked by reading them back in numpy), floats as f32 and
# integers as i32 unless --dtype says otherwise; CSV tables (a header, quoted
# fields, CRLF, blank lines) become inputs f32[rows, columns] and targets (i32
# class indices, or f32[rows, 1]); every refusal says why, a CSV one at its
# line and column; nothing is written by a refused conversion; a converted
# classifier trains (tests/models/oracle_cls.pipe).
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
PIPEDATA=$TOP/build-san/pipedata
[ -x "$PIPEDATA" ] || PIPEDATA=$TOP/build/pipedata
T=$(mktemp -d /tmp/pg-pipedata.XXXXXX)
trap 'rm -rf "$T"' EXIT

need_python numpy

$PY - "$T" <<'EOF'
import sys, numpy as np
d = sys.argv[1]
r = np.random.default_rng(3)
np.save(f"{d}/f32.npy", r.normal(size=(5, 3, 2)).astype(np.float32))
np.save(f"{d}/f64.npy", r.normal(size=(4, 6)))
np.save(f"{d}/i32.npy", r.integers(0, 10, size=7).astype(np.int32))
np.save(f"{d}/i64.npy", r.integers(-5, 5, size=(3, 4)))
np.save(f"{d}/u8.npy", r.integers(0, 256, size=(2, 8)).astype(np.uint8))
np.save(f"{d}/be.npy", np.arange(6, dtype=">f8").reshape(3, 2))
np.lib.format.write_array(open(f"{d}/v2.npy", "wb"), np.arange(4, dtype=np.float32), version=(2, 0))
np.save(f"{d}/fortran.npy", np.asfortranarray(np.ones((3, 4), dtype=np.float32)))
np.save(f"{d}/f16.npy", np.ones(3, dtype=np.float16))
np.save(f"{d}/bool.npy", np.ones(3, dtype=bool))
np.save(f"{d}/scalar.npy", np.float32(1))
np.save(f"{d}/empty.npy", np.zeros((0, 3), dtype=np.float32))
np.save(f"{d}/nan.npy", np.array([[1, 2], [3, np.nan]], dtype=np.float32))
np.save(f"{d}/big.npy", np.array([1, 2 ** 40], dtype=np.int64))
np.save(f"{d}/frac.npy", np.array([1.5, 2], dtype=np.float64))
np.save(f"{d}/struct.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
np.save(f"{d}/rank6.npy", np.zeros((1, 1, 1, 1, 1, 1), dtype=np.float32))
b = open(f"{d}/f64.npy", "rb").read()
open(f"{d}/short.npy", "wb").write(b[:-8])
open(f"{d}/long.npy", "wb").write(b + b"\0" * 8)
open(f"{d}/notnpy.npy", "wb").write(b"hello, world")
EOF

# same IN.npy OUT.pgd DTYPE: the .pgd holds IN's values as DTYPE in IN's shape
same() {
    $PY - "$1" "$2" "$3" <<'EOF'
import struct, sys, numpy as np
a = np.load(sys.argv[1])
b = open(sys.argv[2], "rb").read()
assert b[:4] == b"PGD1"
_, dt, rank = struct.unpack("<III", b[4:16])
dims = struct.unpack("<%dQ" % rank, b[16:16 + 8 * rank])
want = {"f32": 0, "i32": 2}[sys.argv[3]]
v = np.frombuffer(b[16 + 8 * rank:], "<f4" if dt == 0 else "<i4").reshape(dims)
assert dt == want, (dt, want)
assert v.shape == a.shape, (v.shape, a.shape)
assert np.array_equal(v, a.astype(v.dtype)), "values differ"
EOF
}

for c in "f32 f32" "f64 f32" "i32 i32" "i64 i32" "u8 i32" "be f32" "v2 f32"; do
    set -- $c
    "$PIPEDATA" npy "$T/$1.npy" -o "$T/$1.pgd" >"$T/$1.out" 2>&1 && same "$T/$1.npy" "$T/$1.pgd" "$2"
    ok $? "npy $1 -> $2: the same values, the same shape"
done
like "$(cat "$T/f64.out")" "pipedata: $T/f64.npy: dtype '<f8', shape \\[4, 6\\] -> $T/f64.pgd: f32\\[4, 6\\], 4 samples" \
    "it says what it read and what it wrote"
like "$(cat "$T/u8.out")" "uint8 as i32 ids or classes; --dtype f32 for pixel values" "uint8 says how to get f32"
"$PIPEDATA" npy "$T/u8.npy" -o "$T/u8f.pgd" --dtype f32 >/dev/null 2>&1 && same "$T/u8.npy" "$T/u8f.pgd" f32
ok $? "--dtype f32 makes uint8 pixels f32"
"$PIPEDATA" npy "$T/i32.npy" --dtype f32 -o "$T/i32f.pgd" >/dev/null 2>&1 && same "$T/i32.npy" "$T/i32f.pgd" f32
ok $? "--dtype f32 makes int32 f32 (options in any order)"
"$PIPEDATA" npy "$T/f64.npy" -o "$T/x.pgd" --dtype f16 >"$T/e" 2>&1; is $? 2 "--dtype f16: usage error"
like "$(cat "$T/e")" "--dtype wants f32 or i32, not 'f16'" "...named"

# refused npy files: NAME REGEX
refuse_npy() {
    "$PIPEDATA" npy "$T/$1.npy" -o "$T/$1.pgd" ${3:-} >"$T/$1.err" 2>&1
    _st=$?
    [ "$_st" = 1 ] && [ ! -e "$T/$1.pgd" ] && ! ls "$T/$1.pgd".tmp.* >/dev/null 2>&1
    ok $? "npy $1: refused (exit $_st), nothing written"
    like "$(cat "$T/$1.err")" "$2" "npy $1: the message says why"
}
refuse_npy fortran "fortran.npy: the array is in Fortran order \\(column-major\\); pipedata npy reads C order: save it as np.save\\(path, np.ascontiguousarray\\(a\\)\\)"
refuse_npy f16 "f16.npy: its values are float16 \\(dtype '<f2'\\); pipedata npy reads float32 \\('<f4'\\), float64 \\('<f8'\\), int32 \\('<i4'\\), int64 \\('<i8'\\) and uint8 \\('\\|u1'\\)"
refuse_npy bool "bool.npy: its values are bool \\(dtype '\\|b1'\\)"
refuse_npy struct "struct.npy: it is a structured array"
refuse_npy scalar "scalar.npy: a 0-d array \\(shape \\(\\)\\) holds one value; a data file's first dimension is its samples"
refuse_npy empty "empty.npy: the array holds no samples \\(shape \\[0, 3\\]\\)"
refuse_npy nan "nan.npy: sample 1, element 1 is nan: a data file must hold finite values"
refuse_npy big "big.npy: sample 1, element 0 is 1099511627776: outside int32's range"
refuse_npy frac "frac.npy: sample 0, element 0 is 1.5: not a whole number in int32's range \\(--dtype i32\\)" "--dtype i32"
refuse_npy rank6 "rank6.npy: its header is not the dict np.save writes: the array has more than 5 dimensions"
refuse_npy short "short.npy is truncated: shape \\[4, 6\\] of 8-byte values needs 192 bytes of values, the file has 184"
refuse_npy long "long.npy has 8 bytes after its values"
refuse_npy notnpy "notnpy.npy: not a .npy file"
refuse_npy missing "cannot open .*missing.npy"

# CSV
printf 'f1,f2,"f 3",label\r\n0.5,1,2,3\r\n\r\n "-1.5" , 2e3,0,1\r\n7,8,9,0\r\n' >"$T/t.csv"
"$PIPEDATA" csv "$T/t.csv" --target label -o "$T/tx.pgd" --targets-out "$T/ty.pgd" >"$T/csv.out" 2>&1
ok $? "csv: a header, quotes, spaces, CRLF and a blank line convert"
like "$(cat "$T/csv.out")" "pipedata: $T/t.csv: 3 rows -> $T/tx.pgd: f32\\[3, 3\\]; 'label' -> $T/ty.pgd: i32\\[3\\], class indices 0..3" \
    "it says the shapes and that the target became class indices"
$PY - "$T" <<'EOF'
import struct, sys, numpy as np
def rd(p):
    b = open(p, "rb").read(); _, dt, r = struct.unpack("<III", b[4:16]); d = struct.unpack("<%dQ" % r, b[16:16 + 8 * r])
    return np.frombuffer(b[16 + 8 * r:], "<f4" if dt == 0 else "<i4").reshape(d)
x, y = rd(sys.argv[1] + "/tx.pgd"), rd(sys.argv[1] + "/ty.pgd")
assert np.array_equal(x, np.array([[0.5, 1, 2], [-1.5, 2000, 0], [7, 8, 9]], np.float32)), x
assert y.dtype == np.int32 and list(y) == [3, 1, 0], y
EOF
ok $? "csv: the inputs hold every other column in order, the targets the label column"
printf 'a,b,y\n1,2,0.5\n3,4,-2\n' >"$T/r.csv"
"$PIPEDATA" csv "$T/r.csv" --target y -o "$T/rx.pgd" --targets-out "$T/ry.pgd" >"$T/r.out" 2>&1
like "$(cat "$T/r.out")" "'y' -> $T/ry.pgd: f32\\[2, 1\\]" "csv: a target with fractions stays f32[rows, 1] (a value to regress)"
"$PIPEDATA" csv "$T/t.csv" --target label --target-dtype f32 -o "$T/tx.pgd" --targets-out "$T/tf.pgd" >"$T/tf.out" 2>&1
like "$(cat "$T/tf.out")" "'label' -> $T/tf.pgd: f32\\[3, 1\\]" "csv: --target-dtype f32 keeps whole numbers as values"
"$PIPEDATA" csv "$T/t.csv" -o "$T/all.pgd" >"$T/all.out" 2>&1
like "$(cat "$T/all.out")" "3 rows -> $T/all.pgd: f32\\[3, 4\\]\$" "csv without --target: every column is an input (rows to --predict)"

# refused CSV files: NAME CONTENT REGEX [OPTION...]
refuse_csv() {
    _cn=$1 _cre=$3
    printf "$2" >"$T/$_cn.csv"
    shift 3
    "$PIPEDATA" csv "$T/$_cn.csv" -o "$T/$_cn.pgd" "$@" >"$T/$_cn.err" 2>&1
    _st=$?
    [ "$_st" = 1 ] && [ ! -e "$T/$_cn.pgd" ]
    ok $? "csv $_cn: refused (exit $_st), nothing written"
    like "$(cat "$T/$_cn.err")" "$_cre" "csv $_cn: the message says why"
}
refuse_csv empty_value 'a,b\n1,2\n3,\n' "empty_value.csv:3: column 2 \\('b'\\): an empty value"
refuse_csv not_number 'a,b\n1,2\n3,x7\n' "not_number.csv:3: column 2 \\('b'\\): 'x7' is not a number"
refuse_csv nan_value 'a,b\n1,nan\n' "nan_value.csv:2: column 2 \\('b'\\): 'nan' is not a number \\(NaN\\)"
refuse_csv fields 'a,b,c\n1,2,3\n4,5\n' "fields.csv:3: 2 fields, but the header has 3 columns"
refuse_csv no_header '1,2\n3,4\n' "no_header.csv:1: the first line holds only numbers; pipedata csv needs a header line naming the columns first"
refuse_csv twice 'a,b,a\n1,2,3\n' "twice.csv:1: column 3 is named 'a' like column 1: name every column once"
refuse_csv no_rows 'a,b\n' "no_rows.csv has a header but no rows"
refuse_csv empty '' "empty.csv is empty"
refuse_csv quote 'a,b\n1,"2\n' "quote.csv:2: column 2: a quoted field that does not end on its line"
refuse_csv target 'a,b\n1,2\n' "target.csv:1: no column is named 'lable'; the columns are: 'a', 'b'" --target lable --targets-out "$T/y.pgd"
refuse_csv only_target 'y\n1\n' "only_target.csv: the target 'y' is the only column: no inputs are left" --target y --targets-out "$T/y.pgd"
refuse_csv not_class 'a,y\n1,0\n2,0.5\n' "not_class.csv:3: column 2 \\('y'\\): 0.5 is not a class index \\(a whole number >= 0\\), as --target-dtype i32 asks" \
    --target y --targets-out "$T/y.pgd" --target-dtype i32
"$PIPEDATA" csv "$T/t.csv" --target label -o "$T/x.pgd" >"$T/e" 2>&1; is $? 2 "csv --target without --targets-out: usage error"
like "$(cat "$T/e")" "--target needs --targets-out Y.pgd, the file the targets go to" "...named"
"$PIPEDATA" csv "$T/t.csv" -o "$T/x.pgd" --dtype f32 >"$T/e" 2>&1; is $? 2 "csv takes no --dtype"
like "$(cat "$T/e")" "pipedata csv: unknown option '--dtype'" "...named"
"$PIPEDATA" npy "$T/f32.npy" >"$T/e" 2>&1; is $? 2 "npy without -o: usage error"
like "$(cat "$T/e")" "pipedata npy: -o OUT is missing" "...named"

# a converted classifier trains: 40 rows of 16 features, 10 classes
$PY - "$T" <<'EOF'
import sys, numpy as np
d = sys.argv[1]; r = np.random.default_rng(5)
x = r.normal(size=(40, 16)); w = r.normal(size=(16, 10))
with open(f"{d}/cls.csv", "w") as f:
    f.write(",".join(f"x{i}" for i in range(16)) + ",class\n")
    for row, c in zip(x, (x @ w).argmax(1)):
        f.write(",".join("%.6f" % v for v in row) + ",%d\n" % c)
EOF
"$PIPEDATA" csv "$T/cls.csv" --target class -o "$T/cx.pgd" --targets-out "$T/cy.pgd" >/dev/null 2>&1 &&
    "$PIPEGEN" gen "$TOP/tests/models/oracle_cls.pipe" -o "$T/cls" >/dev/null 2>&1 && build "$T/cls" &&
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$T/cls/bin" -- --threads 1 --steps 8 --data "$T/cx.pgd" --targets "$T/cy.pgd" \
        >"$T/cls.out" 2>&1
ok $? "a classifier trains on the converted CSV (--data x.pgd --targets y.pgd)"
done_testing

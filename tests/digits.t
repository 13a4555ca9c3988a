#!/bin/sh
# tests/digits.t — a real data set: scikit-learn's 8 x 8 handwritten digits
# (no download: they ship inside Debian's python3-sklearn).
#  - tools/digits_to_pgd.py writes 1,437 training and 360 validation images and
#    labels as .pgd files, the split fixed by its seed (the same bytes again; a
#    new seed, a new split), and refuses bad requests with what and why;
#  - examples/digits_cnn.pipe, built from generated/digits_cnn (what `make
#    build/digits_cnn/stages` links), trains as written (600 steps, 2 stages) and
#    reaches at least 97 % validation accuracy, printed by the run itself at its
#    end (--eval-data, --eval-targets: its eval line) and equal to what
#    tests/oracle.py accuracy computes independently from the saved weights
#    (the model in inference, batch norm by its running statistics).
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
PY=${PYTHON:-/usr/bin/python3}
TOOL=$TOP/tools/digits_to_pgd.py
T=$(mktemp -d /tmp/pg-digits.XXXXXX)
trap 'rm -rf "$T"' EXIT
if ! $PY -c 'import torch, sklearn' 2>/dev/null; then
    echo "1..0 # SKIP $PY cannot import torch and sklearn (Debian: python3-torch, python3-sklearn)"
    exit 0
fi

out=$($PY "$TOOL" "$T/d" 2>&1)
ok $? "digits_to_pgd.py writes the data set: $out"
like "$out" "1437 training and 360 validation images \\(seed 0\\)" "... 1,437 training and 360 validation images"
n=$(od -An -t u8 -j 16 -N 8 "$T/d/val_x.pgd" | tr -d ' ')
m=$(od -An -t u8 -j 16 -N 8 "$T/d/train_y.pgd" | tr -d ' ')
[ "$n" = 360 ] && [ "$m" = 1437 ] && [ "$(wc -c <"$T/d/train_x.pgd")" = $((16 + 32 + 1437 * 64 * 4)) ]
ok $? "... val_x.pgd holds 360 images, train_y.pgd 1437 labels, train_x.pgd f32[1437, 1, 8, 8]"
$PY "$TOOL" "$T/again" >/dev/null 2>&1 && cmp -s "$T/d/val_x.pgd" "$T/again/val_x.pgd" && cmp -s "$T/d/train_y.pgd" "$T/again/train_y.pgd"
ok $? "the same seed gives the same split, byte for byte"
$PY "$TOOL" "$T/other" --seed 1 >/dev/null 2>&1 && ! cmp -s "$T/d/val_y.pgd" "$T/other/val_y.pgd"
ok $? "another seed gives another split"

out=$($PY "$TOOL" "$T/bad" --val 1797 2>&1)
st=$?
[ $st = 2 ] && [ ! -e "$T/bad" ]
ok $? "--val 1797 is refused (exit $st), nothing written"
like "$out" "digits_to_pgd.py: --val 1797 is out of range: the data set has 1797 images, so 1 .. 1796 can be held out" \
    "... naming the range"
: >"$T/file"
out=$($PY "$TOOL" "$T/file/sub" 2>&1)
st=$?
[ $st = 1 ]
ok $? "an output folder that cannot be made fails (exit $st)"
like "$out" "digits_to_pgd.py: cannot write $T/file/sub: Not a directory" "... naming it and why"
mkdir -p "$T/fake/sklearn"
echo 'raise ImportError("no module named sklearn.datasets")' >"$T/fake/sklearn/__init__.py"
out=$(PYTHONPATH="$T/fake" $PY "$TOOL" "$T/nosk" 2>&1)
st=$?
[ $st = 1 ]
ok $? "without scikit-learn it fails (exit $st)"
like "$out" "cannot import scikit-learn .*; Debian: apt-get install python3-sklearn" "... naming the package to install"

# the example as written, from the committed generated/digits_cnn
mkdir -p "$T/gen"
cp "$TOP"/generated/digits_cnn/* "$T/gen/"
build "$T/gen" >"$T/build.out" 2>&1
ok $? "generated/digits_cnn builds"
OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$T/gen/bin" -- --threads 1 --data "$T/d/train_x.pgd" --targets "$T/d/train_y.pgd" \
    --eval-data "$T/d/val_x.pgd" --eval-targets "$T/d/val_y.pgd" --save "$T/w.st" --log-every 100 >"$T/train.out" 2>&1
st=$?
ok $st "examples/digits_cnn.pipe trains 600 steps on 2 stages: $(sed -n 's/.*\(final loss .*\)/\1/p' "$T/train.out")"
[ $st = 0 ] || sed 's/^/# /' "$T/train.out" | tail -20
ev=$(sed -n 's/^.*eval step 600\/600  loss [^ ]*  accuracy \([0-9.]*\) (\([0-9]*\) of 360).*$/\1 \2/p' "$T/train.out")
echo "# digits: the run's eval line: accuracy ${ev:-none}"
awk -v a="${ev%% *}" 'BEGIN { exit !(a != "" && a >= 0.97) }'
ok $? "the run prints a validation accuracy of at least 97 % at its end: ${ev:-no eval line}"
acc=$($PY "$TOP/tests/oracle.py" accuracy "$T/gen/plan.json" --weights "$T/w.st" --x "$T/d/val_x.pgd" --y "$T/d/val_y.pgd" 2>&1)
echo "# digits: PyTorch from the saved weights: $acc"
like "$acc" "^accuracy [0-9.]+ \\(${ev##* } of 360\\)" "...the same count of right answers as PyTorch's from the saved weights: $acc"
done_testing

#!/bin/sh
# tests/data_order.t — the order a run visits its data (runtime/core/dataset.c,
# step.c), on tests/models/oracle_groups.pipe with 36 samples (3 batches of 12:
# an epoch every 3 steps):
#  - `shuffle = true` visits a fresh permutation of the samples every epoch:
#    the losses differ from file order, yet each epoch still sees every sample
#    once (with a vanishing learning rate its losses sum to file order's);
#  - the order is a function of the seed and the epoch alone: bitwise the same
#    on 1 and 3 stages, after a resume, and on --dp 2 (within 1e-6, as replicas
#    are not bitwise, tests/ppdp.t);
#  - several --data/--targets files are shards of one data set: two halves
#    train bitwise as the whole file, shuffled or not; a shard of another
#    shape, too many shards, and several token streams are refused.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_lm.sh"
T=$(mktemp -d /tmp/pg-order.XXXXXX)
trap 'rm -rf "$T"' EXIT

need_python numpy

$PY - "$T" <<'EOF'
import sys, numpy as np
d = sys.argv[1]
r = np.random.default_rng(9)
x, y = r.normal(size=(36, 16)).astype(np.float32), r.normal(size=(36, 8)).astype(np.float32)
for name, a in (("x", x), ("y", y), ("xa", x[:20]), ("xb", x[20:]), ("ya", y[:20]), ("yb", y[20:]),
                ("xbad", x[20:, :8])):
    np.save(f"{d}/{name}.npy", a)
EOF
for f in x y xa xb ya yb xbad; do "$PIPEDATA" npy "$T/$f.npy" -o "$T/$f.pgd" >/dev/null || exit 1; done
DATA="--data $T/x.pgd --targets $T/y.pgd"
gen() { # NAME STAGES(1|3) SED...
    _g=$1 _s=$2
    shift 2
    _del=''; [ "$_s" = 1 ] && _del='/^split$/d'
    mkdir -p "$T/$_g" && sed -e "$_del" "$@" "$TOP/tests/models/oracle_groups.pipe" >"$T/$_g/m.pipe" &&
        "$PIPEGEN" gen "$T/$_g/m.pipe" -o "$T/$_g/gen" >"$T/$_g/gen.out" 2>&1 && build "$T/$_g/gen"
}
run() { # NAME OUT [OPTION...]
    _r=$1 _o=$2
    shift 2
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$T/$_r/gen/bin" -- --threads 1 --timeout 60 "$@" >"$_o" 2>&1
}
losses() { sed -n 's/^\[stage [0-9]*\( replica 0\)*\] step \([0-9]*\)\/[0-9]*  loss \([^ ]*\).*/\2 \3/p' "$1"; }
SHUF='s/^  lr_schedule = /  shuffle = true\n  lr_schedule = /'
TINY='s/lr = 1e-2/lr = 1e-30/; s/min = 1e-3/min = 0/'

gen plain 3 && gen shuf3 3 -e "$SHUF" && gen shuf1 1 -e "$SHUF" &&
    gen tiny 3 -e "$TINY" && gen tinyshuf 3 -e "$TINY" -e "$SHUF"
ok $? "oracle_groups builds in file order and shuffled (1 and 3 stages), and with a vanishing learning rate"

run plain "$T/plain.out" --steps 9 $DATA --save "$T/plain.st" && run shuf3 "$T/shuf3.out" --steps 9 $DATA --save "$T/shuf3.st"
ok $? "9 steps (3 epochs) in file order and shuffled"
losses "$T/plain.out" >"$T/a.l"; losses "$T/shuf3.out" >"$T/b.l"
n=$(paste -d' ' "$T/a.l" "$T/b.l" | awk '$2 != $4' | wc -l)
[ "$(losses "$T/plain.out" | wc -l)" = 9 ] && [ "$n" -ge 8 ]
ok $? "shuffled, the steps see other batches ($n of 9 losses differ from file order)"
like "$(grep 'step 4/9' "$T/shuf3.out")" '  epoch 2  ' "the log line names the epoch"

run tiny "$T/tiny.out" --steps 9 $DATA && run tinyshuf "$T/tinyshuf.out" --steps 9 $DATA
$PY - "$T/tiny.out" "$T/tinyshuf.out" <<'EOF'
import re, sys
def epochs(p):
    l = [float(m.group(1)) for m in re.finditer(r"step \d+/9  loss (\S+)", open(p).read())]
    return [sum(l[i:i + 3]) for i in (0, 3, 6)], l
(a, la), (b, lb) = epochs(sys.argv[1]), epochs(sys.argv[2])
assert la[0:3] != lb[0:3] and lb[0:3] != lb[3:6], (la, lb)          # other orders, epoch by epoch
assert all(abs(x - a[0]) <= 1e-6 * a[0] for x in a + b), (a, b)     # every sample once an epoch
EOF
ok $? "every epoch visits each sample once: its losses sum to file order's (a vanishing learning rate)"

run shuf1 "$T/shuf1.out" --steps 9 $DATA --save "$T/shuf1.st"
[ "$(losses "$T/shuf1.out")" = "$(losses "$T/shuf3.out")" ] && cmp -s "$T/shuf1.st" "$T/shuf3.st"
ok $? "shuffled, 1 stage trains bitwise as 3 (losses and weights)"
run shuf3 "$T/r1.out" --steps 4 $DATA --checkpoint-dir "$T/ck" &&
    run shuf3 "$T/r2.out" --steps 9 $DATA --resume "$T/ck" --checkpoint-dir "$T/ck" --save "$T/resumed.st"
[ "$(losses "$T/r2.out")" = "$(losses "$T/shuf3.out" | sed -n '5,$p')" ] && cmp -s "$T/resumed.st" "$T/shuf3.st"
ok $? "a run resumed after step 4 (in epoch 2) goes on bitwise as the straight run"
OPENBLAS_NUM_THREADS=1 "$PIPERUN" --dp 2 "$T/shuf1/gen/bin" -- --threads 1 --steps 9 $DATA >"$T/dp.out" 2>&1
losses "$T/dp.out" >"$T/a.l"; losses "$T/shuf1.out" >"$T/b.l"
paste -d' ' "$T/a.l" "$T/b.l" | awk '{ d = $2 - $4; if (d < 0) d = -d; if (d > 1e-6 * $4) bad++ } END { exit !(NR == 9 && !bad) }'
ok $? "--dp 2 visits the same order: every loss within 1e-6 of one replica's"

run plain "$T/sh.out" --steps 9 --data "$T/xa.pgd" --data "$T/xb.pgd" --targets "$T/ya.pgd" --targets "$T/yb.pgd" \
    --save "$T/sh.st"
[ "$(losses "$T/sh.out")" = "$(losses "$T/plain.out")" ] && cmp -s "$T/sh.st" "$T/plain.st"
ok $? "two shards of 20 and 16 samples train bitwise as the whole file"
run shuf3 "$T/shs.out" --steps 9 --data "$T/xa.pgd" --data "$T/xb.pgd" --targets "$T/ya.pgd" --targets "$T/yb.pgd"
is "$(losses "$T/shs.out")" "$(losses "$T/shuf3.out")" "...and shuffled likewise"
run plain "$T/bad.err" --steps 1 --data "$T/xa.pgd" --data "$T/xbad.pgd" --targets "$T/y.pgd"
is "$?" 1 "a shard of another shape: exit 1"
like "$(cat "$T/bad.err")" "$T/xbad.pgd holds samples of shape \\[8\\] but the model expects \\[16\\] \\(file 2 of the 2 given as --data\\)" \
    "...naming the shard and its place"
many=""
for i in $(seq 17); do many="$many --data $T/x.pgd"; done
run plain "$T/many.err" --steps 1 $many --targets "$T/y.pgd"
is "$?" 2 "17 --data files: exit 2"
like "$(cat "$T/many.err")" "--data is given more than 16 times: a data set has at most 16 files \\(shards\\)" "...said"
lm_build "$T/lm" 1 replicate && lm_text "$T/t.txt" && "$PIPEDATA" text "$T/t.txt" -o "$T/t.pgd" >/dev/null &&
    lm_run "$T/lm" "$T/lm.err" --steps 1 --data "$T/t.pgd" --data "$T/t.pgd"
is "$?" 1 "a language model given two token streams: exit 1"
like "$(cat "$T/lm.err")" "is a token stream: a language model reads one stream, not 2 files" "...said, with how to join them"
done_testing

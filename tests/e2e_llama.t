#!/bin/sh
# tests/e2e_llama.t — the Llama layers end to end:
#  - tests/models/oracle_llama.pipe (rmsnorm, grouped-query attention with
#    rotary positions and separate bias-free projections, swiglu, an untied
#    head, cross_entropy(ignore = -100) on data with ignored positions), with
#    dropout 0.1 on the attention probabilities, at 1, 2 and 3 stages x
#    gpipe/1f1b/zb1 x always/never checkpointing x 1 and 2 threads: the same
#    final loss text and byte-identical saved weights;
#  - examples/llama_tiny.pipe (the committed generated/llama_tiny) trains on
#    data/tiny_text.txt: its loss falls over 30 steps, and it samples text.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
T=$(mktemp -d /tmp/pg-e2e-llama.XXXXXX)
trap 'rm -rf "$T"' EXIT
PY=${PYTHON:-/usr/bin/python3}

# variant STAGES SCHEDULE CKPT THREADS: gen, build, 3 steps on the data, save
variant() {
    n=$1; s=$2; c=$3; th=$4
    d="$T/$n-$s-$c-$th"
    case $n in 1) del='/^split$/d' ;; 2) del='0,/^split$/{/^split$/d}' ;; *) del='' ;; esac
    e2e_gen "$d" oracle_llama "$del" "$s" "$c" -e 's/separate_qkv = true)/separate_qkv = true, dropout = 0.1)/' || return 1
    [ "$(ls "$d/gen"/stage*.c | wc -l)" = "$n" ] || { echo "# expected $n stages"; return 1; }
    grep -q 'dropout = 0.1' "$d/oracle_llama.pipe" || { echo "# the dropout edit did not apply"; return 1; }
    build_strict "$d/gen" || return 1
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$d/gen/bin" -- --steps 3 --threads "$th" --data "$T/x.pgd" \
        --targets "$T/y.pgd" --save "$d/w.safetensors" >"$d/run.out" 2>&1 || { sed 's/^/# /' "$d/run.out" | tail -20; return 1; }
    grep 'final loss' "$d/run.out" | sed 's/^\[stage [0-9]*\] //' >"$d/loss"
}

"$PIPEGEN" gen "$TOP/tests/models/oracle_llama.pipe" -o "$T/plan" >/dev/null 2>&1 &&
    $PY "$TOP/tests/oracle.py" data "$T/plan/plan.json" "$T" --samples 20 --seed 3
ok $? "data with a quarter of the target positions -100"
ref=""
fails=0
runs=0
for n in 1 2 3; do for s in gpipe 1f1b zb1; do for c in always never; do for th in 1 2; do
    [ "$n" = 1 ] && [ "$s" != 1f1b ] && continue
    runs=$((runs + 1))
    if ! variant $n $s $c $th; then
        echo "# $n stages, $s, checkpoint $c, $th threads: failed"; fails=$((fails + 1)); continue
    fi
    d="$T/$n-$s-$c-$th"
    if [ -z "$ref" ]; then ref=$d; continue; fi
    if ! cmp -s "$ref/loss" "$d/loss" || ! cmp -s "$ref/w.safetensors" "$d/w.safetensors"; then
        echo "# $n stages, $s, checkpoint $c, $th threads differs from $(basename "$ref"): $(cat "$d/loss") vs $(cat "$ref/loss")"
        fails=$((fails + 1))
    fi
done; done; done; done
is "$fails" 0 "oracle_llama with attention dropout: loss and saved weights bitwise equal over $runs runs (1/2/3 stages x gpipe/1f1b/zb1 x always/never x 1/2 threads)"
[ -s "$ref/loss" ]
ok $? "the runs print a final loss ($(cat "$ref/loss" 2>/dev/null))"

# examples/llama_tiny trains on the example text and samples
d="$T/tiny"
mkdir -p "$d"
cp -r "$TOP/generated/llama_tiny" "$d/gen" && build_strict "$d/gen" &&
    "$TOP/build/pipedata" text "$TOP/data/tiny_text.txt" -o "$d/text.pgd" >/dev/null &&
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$d/gen/bin" -- --steps 30 --log-every 1 --data "$d/text.pgd" \
        --generate 40 --prompt "The keeper " >"$d/run.out" 2>&1
st=$?
ok $st "examples/llama_tiny: 30 steps on data/tiny_text.txt and a sample"
[ $st = 0 ] || tail -10 "$d/run.out" | sed 's/^/# /'
l1=$(sed -n 's/.*step 1\/30  loss \([0-9.]*\).*/\1/p' "$d/run.out")
l30=$(sed -n 's/.*step 30\/30  loss \([0-9.]*\).*/\1/p' "$d/run.out")
awk -v a="${l1:-0}" -v b="${l30:-9}" 'BEGIN { exit !(b < a - 1.0) }'
ok $? "examples/llama_tiny: the loss falls by more than 1 in 30 steps ($l1 -> $l30)"
grep -q 'sample: The keeper ' "$d/run.out"
ok $? "examples/llama_tiny: --generate continues the prompt"
done_testing

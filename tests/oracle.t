#!/bin/sh
# tests/oracle.t — the independent oracle: for each tests/models/oracle_*.pipe
# (3 stages each: mse(sum) + SGD with momentum and even micro-batches, mse(mean)
# + AdamW with uneven ones, a cross_entropy classifier, skips by add and by
# concat across two splits, a tiny GPT with a tied embedding, a tiny Llama, the layers
# of convolutional networks at odd sizes, batch norm over images; AdamW with weight
# decay by parameter group and a linear schedule, Adam with inverse_sqrt, SGD with
# a group and constant(warmup)), generate and
# build the stage programs, write seeded data files, and train through piperun:
# the initial weights (--steps 0 --save), step 1's loss and gradients
# (--save-grads), the weights after 10 steps. tests/oracle.py rebuilds the model
# from plan.json in PyTorch (float64) and compares: loss and every gradient to
# relative 1e-5, every weight after 10 steps to relative 1e-4 (max|a-b|/max|b|).
# One TAP line per comparison.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
PY=${PYTHON:-/usr/bin/python3}
ORACLE=$TOP/tests/oracle.py
T=$(mktemp -d /tmp/pg-oracle.XXXXXX)
trap 'rm -rf "$T"' EXIT

if ! $PY -c 'import torch' 2>/dev/null; then
    echo "1..0 # SKIP $PY cannot import torch (Debian: apt-get install python3-torch)"
    exit 0
fi

# train DIR ARGS...: run the 3 stages through piperun, one thread each
train() {
    dir=$1; shift
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$dir/bin" -- --threads 1 --timeout 60 "$@"
}

# oracle MODEL SAMPLES [SOURCE]: everything for one model (tests/models/MODEL.pipe
# unless SOURCE is given); the oracle's lines become TAP lines
oracle() {
    m=$1; d="$T/$m"; src=${3:-$TOP/tests/models/$m.pipe}
    mkdir -p "$d"
    if ! "$PIPEGEN" gen "$src" -o "$d/gen" >"$d/gen.out" 2>&1 || ! build "$d/gen" >"$d/build.out" 2>&1; then
        ok 1 "$m: generate and build the stage programs"; sed 's/^/# /' "$d/gen.out" "$d/build.out" | head -20
        return
    fi
    $PY "$ORACLE" data "$d/gen/plan.json" "$d" --samples "$2" --seed 7 &&
        train "$d/gen" --steps 0 --save "$d/w0.safetensors" >"$d/run0.out" 2>&1 &&
        train "$d/gen" --steps 1 --data "$d/x.pgd" --targets "$d/y.pgd" --save-grads "$d/g1.safetensors" >"$d/run1.out" 2>&1 &&
        train "$d/gen" --steps 10 --data "$d/x.pgd" --targets "$d/y.pgd" --save "$d/w10.safetensors" >"$d/run10.out" 2>&1
    rc=$?
    ok $rc "$m: data, then 0, 1 and 10 training steps"
    if [ $rc != 0 ]; then
        cat "$d"/run*.out | sed 's/^/# /' | tail -20
        return
    fi
    loss=$(sed -n 's/.*final loss \([-+0-9.eE]*\).*/\1/p' "$d/run1.out")
    $PY "$ORACLE" check "$d/gen/plan.json" --init "$d/w0.safetensors" --x "$d/x.pgd" --y "$d/y.pgd" \
        --loss1 "${loss:-nan}" --grads "$d/g1.safetensors" --steps 10 --final "$d/w10.safetensors" \
        >"$d/oracle.out" 2>"$d/oracle.err"
    rc=$?
    while IFS= read -r line; do
        case $line in
            "ok - "*) ok 0 "$m: ${line#ok - }" ;;
            "not ok - "*) ok 1 "$m: ${line#not ok - }" ;;
        esac
    done <"$d/oracle.out"
    n=$(grep -c '^ok - ' "$d/oracle.out")
    [ "$rc" = 0 ] && [ "$n" -gt 2 ]
    ok $? "$m: the oracle ran and every comparison passed ($n lines, exit $rc)"
    [ -s "$d/oracle.err" ] && sed 's/^/# /' "$d/oracle.err"
}

oracle oracle_mlp_sgd 30          # batch 12: step t wraps around the 30 samples
oracle oracle_mean_adamw 25
oracle oracle_cls 40
oracle oracle_res_add 20
oracle oracle_res_concat 20
oracle oracle_gpt 13
oracle oracle_conv 20              # the convolutions at odd sizes, pooling, conv1d, the dims layers
oracle oracle_pool 20              # batchnorm2d (running statistics too), upsample, concat(dim = 0), take
oracle oracle_llama 13            # GQA, rope, rmsnorm, swiglu, bias-free, cross_entropy(ignore = -100)
oracle oracle_groups 30           # AdamW, weight decay by parameter group, linear(warmup, min)
oracle oracle_adam 30             # Adam, inverse_sqrt(warmup)
oracle oracle_warmup 30           # SGD, a group replacing the default rule, constant(warmup)

# The tiny GPT again on 2 and 4 stages, and with `tie wte transmit` on 2, 3 and 4:
# the tied embedding's gradient is summed over its stages in either mode.
gpt_variant() { # NAME SED-SCRIPT
    sed -e "$2" "$TOP/tests/models/oracle_gpt.pipe" >"$T/$1.pipe"
    oracle "$1" 13 "$T/$1.pipe"
}
two='0,/^split$/{/^split$/d}'
four='s/^fc = linear(d -> 4\*d) gelu$/&\nsplit/'
transmit='s/^tie wte replicate$/tie wte transmit/'
gpt_variant gpt_2stages_replicate "$two"
gpt_variant gpt_4stages_replicate "$four"
gpt_variant gpt_2stages_transmit "$two;$transmit"
gpt_variant gpt_3stages_transmit "$transmit"
gpt_variant gpt_4stages_transmit "$four;$transmit"
done_testing

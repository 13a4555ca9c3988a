#!/bin/sh
# tests/hf.t — Hugging Face checkpoints in and out (pipegen import hf / export
# hf, tools/hf.py), against transformers itself. tests/hf_check.py builds tiny
# random models inside the test (norms and biases perturbed so that they
# matter): GPT2LMHeadModel with a tied head, saved in shards with their index;
# LlamaForCausalLM with grouped-query attention (4 heads, 2 key/value heads),
# rope base 500 and an untied head; LlamaForCausalLM with multi-query attention
# (1 key/value head), attention biases, eps 3e-5 and a tied head. Each is
# imported on 1, 2 and 4 stages, generated, built and run with --load: the loss
# of one batch (a quarter of its targets -100, cross_entropy(ignore = -100))
# and every gradient of that step within 1e-5 relative of transformers in
# float64; the loaded weights saved back (--steps 0 --save) and exported:
# from_pretrained on the export gives the original model's logits exactly;
# greedy generation with the KV cache (4 prompts of 1 to 6 tokens, 3 of them
# in flight in 2 micro-batches, prefill in pieces of 4) gives transformers'
# generate(do_sample=False) token for token; the folder's tokenizer files are
# copied beside the imported model.
# Then the refusals: --load of a Hugging Face file, bad folders and configs.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
T=$(mktemp -d /tmp/pg-hf.XXXXXX)
trap 'rm -rf "$T"' EXIT
VENV=${PIPEGEN_VENV:-${HOME:-/root}/.cache/pipegen/venv}
PY=${PIPEGEN_PYTHON:-$VENV/bin/python3}
if ! "$PY" -c 'import transformers, safetensors, torch' 2>/dev/null; then
    echo "1..0 # SKIP no Python with transformers at $PY: run tools/deps.sh hf (as root it makes $VENV)"
    exit 0
fi
CHECK="$PY $TOP/tests/hf_check.py"
SEQ=8

# the .pipe import wrote, made exact for the comparison: batch 4 in 2
# micro-batches, no gradient clipping (the saved gradients are what the
# optimizer sees); generation: 3 sequences at a time in 2 micro-batches, 20
# positions, prompts in pieces of 4
exact() {
    sed -i -e 's/batch = 8  microbatches = 4/batch = 4  microbatches = 2/' -e 's/grad_clip = 1.0//' \
        -e 's/^train {$/train {\n  generate = kv_cache(batch = 3, microbatches = 2, length = 20, prefill = 4)/' "$1"
}

# The comparisons run in one Python process per model kind (hf_check.py multi:
# importing torch and transformers costs seconds a launch): its data and
# prompts first, then pipegen's side of each stage count, then every check.
# case_run KIND STAGES: import, build, one step, the weights saved back, greedy
# generation and the export; each check's command goes to the kind's spec
case_run() {
    kind=$1; s=$2; d="$T/$kind-$s"; R="$T/$kind-data"; mkdir -p "$d"
    "$PIPEGEN" import hf "$T/$kind" -o "$d/imp" --stages "$s" --seq $SEQ --name m >"$d/imp.out" 2>&1
    st=$?
    ok $st "$kind on $s stage(s): pipegen import hf writes the model and its weights"
    [ $st = 0 ] || { sed 's/^/# /' "$d/imp.out"; return; }
    exact "$d/imp/m.pipe"
    n=$(grep -c '^split$' "$d/imp/m.pipe")
    [ "$n" = $((s - 1)) ]; ok $? "$kind on $s stage(s): whole blocks per stage ($n split lines)"
    if ! "$PIPEGEN" gen "$d/imp/m.pipe" -o "$d/gen" >"$d/gen.out" 2>&1 || ! build "$d/gen" >"$d/build.out" 2>&1; then
        ok 1 "$kind on $s stage(s): generate and build"; sed 's/^/# /' "$d/gen.out" "$d/build.out" | tail -20
        return
    fi
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$d/gen/bin" -- --threads 1 --timeout 60 --load "$d/imp/m.safetensors" \
        --steps 1 --data "$R/x.pgd" --targets "$R/y.pgd" --save-grads "$d/g1.safetensors" >"$d/run1.out" 2>&1 &&
        OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$d/gen/bin" -- --threads 1 --timeout 60 --load "$d/imp/m.safetensors" \
            --steps 0 --save "$d/w0.safetensors" >"$d/run0.out" 2>&1
    st=$?
    ok $st "$kind on $s stage(s): --load the imported weights, one step, and saved back"
    [ $st = 0 ] || { cat "$d"/run*.out | tail -20 | sed 's/^/# /'; return; }
    loss=$(sed -n 's/.*final loss \([-+0-9.eE]*\).*/\1/p' "$d/run1.out")
    printf '%s\tstep %s %s --batch 4 --loss %s --grads %s\n' "$d/step.out" "$T/$kind" "$R" "${loss:-nan}" \
        "$d/g1.safetensors" >>"$T/$kind.spec"
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$d/gen/bin" -- --threads 1 --timeout 60 --load "$d/imp/m.safetensors" \
        --steps 0 --prompts "$R/prompts.pgd" --generate 12 --temperature 0 --gen-out "$d/gen.jsonl" >"$d/gen.out" 2>&1
    st=$?
    ok $st "$kind on $s stage(s): greedy generation with the KV cache runs"
    [ $st = 0 ] && printf '%s\tgreedy %s %s --gen %s --new 12\n' "$d/greedy.out" "$T/$kind" "$R" "$d/gen.jsonl" \
        >>"$T/$kind.spec"
    [ $st = 0 ] || tail -10 "$d/gen.out" | sed 's/^/# /'
    "$PIPEGEN" export hf "$d/w0.safetensors" "$d/imp/m.pipe" -o "$d/exp" >"$d/exp.out" 2>&1
    st=$?
    ok $st "$kind on $s stage(s): export hf writes a folder"
    [ $st = 0 ] && printf '%s\tsame %s %s %s\n' "$d/same.out" "$T/$kind" "$d/exp" "$R" >>"$T/$kind.spec"
    [ $st = 0 ] || tail -10 "$d/exp.out" | sed 's/^/# /'
}

# case_verify KIND STAGES: what transformers said of that case's files (a check
# whose command case_run did not queue was already reported failed)
case_verify() {
    kind=$1; s=$2; d="$T/$kind-$s"
    if [ -f "$d/step.out" ]; then
        n=$(grep -c '^ok - ' "$d/step.out")
        [ "$(cat "$d/step.out.rc" 2>/dev/null)" = 0 ] && ! grep -q '^not ok' "$d/step.out" && [ "$n" -gt 10 ]
        ok $? "$kind on $s stage(s): loss and all $n gradients within 1e-5 of transformers (float64)"
        grep -v '^ok - ' "$d/step.out" | head -10 | sed 's/^/# /'
    fi
    if [ -f "$d/greedy.out" ]; then
        [ "$(cat "$d/greedy.out.rc" 2>/dev/null)" = 0 ] && grep -q '^ok - ' "$d/greedy.out" && ! grep -q '^not ok' "$d/greedy.out"
        st=$?
        ok $st "$kind on $s stage(s): greedy generation with the KV cache equals transformers' generate, token for token"
        [ $st = 0 ] || tail -10 "$d/greedy.out" | sed 's/^/# /'
    fi
    if [ -f "$d/same.out" ]; then
        [ "$(cat "$d/same.out.rc" 2>/dev/null)" = 0 ] && grep -q '^ok - ' "$d/same.out"
        st=$?
        ok $st "$kind on $s stage(s): export hf, then from_pretrained gives the same logits"
        [ $st = 0 ] || tail -10 "$d/same.out" | sed 's/^/# /'
    fi
}

for kind in gpt2 llama_gqa llama_mqa_tied; do
    R="$T/$kind-data"; mkdir -p "$R"
    printf '%s\tmake %s %s\n%s\tdata %s %s --seq %s --samples 8\n%s\tprompts %s %s\n' \
        "$T/make-$kind.out" $kind "$T/$kind" "$R/data.out" "$T/$kind" "$R" $SEQ "$R/prompts.out" "$T/$kind" "$R" \
        >"$T/$kind.first"
    $CHECK multi "$T/$kind.first" >"$T/multi-$kind.out" 2>&1
    ok $? "transformers builds a tiny random $kind and saves it, with its data and prompts" ||
        { cat "$T/multi-$kind.out" "$T/make-$kind.out" "$R/data.out" "$R/prompts.out" 2>/dev/null | tail -20 | sed 's/^/# /'; continue; }
    : >"$T/$kind.spec"
    for s in 1 2 4; do
        case_run $kind $s
    done
    $CHECK multi "$T/$kind.spec" >"$T/multi2-$kind.out" 2>&1 || sed 's/^/# /' "$T/multi2-$kind.out" | tail -20
    for s in 1 2 4; do
        case_verify $kind $s
    done
done
[ -f "$T/gpt2/model.safetensors.index.json" ]; ok $? "the GPT-2 folder was sharded (model.safetensors.index.json)"

# the tokenizer comes across: its files copied beside the model, where --tokenizer finds them
cp -r "$T/gpt2" "$T/gpt2tok" && $PY "$TOP/tests/tok_check.py" make "$T/gpt2tok" &&
    "$PIPEGEN" import hf "$T/gpt2tok" -o "$T/tokimp" --seq $SEQ --name m >"$T/tokimp.out" 2>&1 &&
    cmp -s "$T/gpt2tok/tokenizer.json" "$T/tokimp/tokenizer.json" &&
    cmp -s "$T/gpt2tok/tokenizer_config.json" "$T/tokimp/tokenizer_config.json"
ok $? "import hf copies the folder's tokenizer.json and tokenizer_config.json into OUT"
"$TOP/build/pipedata" tokenize --tokenizer "$T/tokimp" --prompt "the cat" -o "$T/tokimp/p.pgd" >/dev/null 2>&1
ok $? "pipedata tokenize --tokenizer OUT reads it"
[ ! -e "$T/gpt2-1/imp/tokenizer.json" ]; ok $? "a folder without a tokenizer gives none"

# ---- refusals ----------------------------------------------------------------
# expect NAME STATUS PATTERN CMD...: the command fails with that status and says PATTERN
expect() {
    name=$1; want=$2; pat=$3; shift 3
    out=$("$@" 2>&1); st=$?
    [ "$st" = "$want" ] && printf '%s\n' "$out" | grep -q -- "$pat"
    ok $? "$name"
    [ "$st" = "$want" ] && printf '%s\n' "$out" | grep -q -- "$pat" || printf '%s\n' "exit $st: $out" | sed 's/^/# /'
}
mkdir -p "$T/empty" "$T/bad"
expect "import hf of a folder without config.json names it" 1 "no config.json" \
    "$PIPEGEN" import hf "$T/empty" -o "$T/o1"
cp "$T/llama_gqa/config.json" "$T/bad/" && sed -i 's/"silu"/"gelu"/' "$T/bad/config.json"
expect "import hf refuses a hidden_act that swiglu is not, naming the field" 1 "config.json: hidden_act = 'gelu'" \
    "$PIPEGEN" import hf "$T/bad" -o "$T/o2"
cp "$T/llama_gqa/config.json" "$T/bad/" && sed -i 's/"model_type": "llama"/"model_type": "bert"/' "$T/bad/config.json"
expect "import hf refuses another model type" 1 "model_type = 'bert': pipegen imports gpt2 and llama" \
    "$PIPEGEN" import hf "$T/bad" -o "$T/o3"
cp "$T/llama_gqa/config.json" "$T/bad/"
expect "import hf without the weights says which files it looked for" 1 "no model.safetensors or model.safetensors.index.json" \
    "$PIPEGEN" import hf "$T/bad" -o "$T/o4"
expect "import hf on more stages than blocks says whole blocks" 1 "whole blocks on each stage, so 1 to 4 stages" \
    "$PIPEGEN" import hf "$T/llama_gqa" -o "$T/o5" --stages 5
expect "import hf with a bad --stages is a usage error" 2 "want a positive integer" \
    "$PIPEGEN" import hf "$T/llama_gqa" -o "$T/o6" --stages x
expect "export hf of a model that is not a transformer names the layer" 1 "expected the token embedding (embed) but found" \
    "$PIPEGEN" export hf "$T/llama_gqa-1/w0.safetensors" "$TOP/tests/models/mlp_small.pipe" -o "$T/o7"
d="$T/llama_gqa-1"
expect "--load of a Hugging Face checkpoint says to import it" 1 "pipegen import hf" \
    env OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$d/gen/bin" -- --threads 1 --timeout 60 --load "$T/llama_gqa/model.safetensors" --steps 0
expect "--load of a mismatched file names the missing tensors and counts them" 1 "missing.*h0.attn.q.weight" \
    env OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$d/gen/bin" -- --threads 1 --timeout 60 --load "$T/llama_gqa/model.safetensors" --steps 0
$PY -c "import sys; from safetensors.torch import load_file, save_file
w = load_file(sys.argv[1]); w['h0.attn.k.weight'] = w['h0.attn.k.weight'][:4].contiguous(); save_file(w, sys.argv[2])" \
    "$d/imp/m.safetensors" "$T/short.safetensors"
expect "--load names a tensor whose shape differs, with both shapes" 1 "1 shape differs: h0.attn.k.weight (file \[4, 16\], model \[8, 16\])" \
    env OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$d/gen/bin" -- --threads 1 --timeout 60 --load "$T/short.safetensors" --steps 0
done_testing

#!/bin/sh
# tests/tokenize.t — text through a Hugging Face tokenizer (issue 25 §3): a
# tiny byte-level BPE tokenizer.json made in the test (tests/tok_check.py);
# `pipedata tokenize` of text files, prompts and prompt/response pairs equals
# transformers' reading of the same file (the pairs' prompt and padding
# targets -100); tests/models/lm_tiny.pipe trained on the tokenized text
# generates from tokenized prompts on 1 and 2 stages (the same tokens), its
# --gen-out text is the tokenizer's decoding, --prompt goes through
# --tokenizer; the sampler: --top-k 1 and a tiny --top-p are greedy at any
# temperature, --stop ends a sequence at the id; then the refusals, each
# naming the file, the line or the option.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_lm.sh"
T=$(mktemp -d /tmp/pg-tokenize.XXXXXX)
trap 'rm -rf "$T"' EXIT
VENV=${PIPEGEN_VENV:-${HOME:-/root}/.cache/pipegen/venv}
PY=${PIPEGEN_PYTHON:-$VENV/bin/python3}
if ! "$PY" -c 'import transformers, tokenizers' 2>/dev/null; then
    echo "1..0 # SKIP no Python with transformers and tokenizers at $PY: run tools/deps.sh hf"
    exit 0
fi
CHECK="$PY $TOP/tests/tok_check.py"
K=$T/tok

$CHECK make "$K"; ok $? "the tokenizers package makes a tiny tokenizer.json"

# ---- pipedata tokenize ----
printf 'the cat sat on the mat.\n' >"$T/b.txt"
"$PIPEDATA" tokenize --tokenizer "$K" "$K/text.txt" "$T/b.txt" -o "$T/text.pgd" >"$T/o" 2>&1
ok $? "tokenize two text files"
like "$(cat "$T/o")" "2 files, [0-9]+ tokens -> " "it says how many tokens"
$CHECK text "$K" "$T/text.pgd" "$K/text.txt" "$T/b.txt" >"$T/c" 2>&1
ok $? "the stream is transformers' ids of each file, each ended by the end-of-text id"
sed 's/^/# /' "$T/c"
"$PIPEDATA" tokenize --tokenizer "$K/tokenizer.json" "$T/b.txt" -o "$T/b.pgd" >/dev/null 2>&1 &&
    $CHECK text "$K" "$T/b.pgd" "$T/b.txt" >/dev/null
ok $? "the tokenizer.json itself, beside its tokenizer_config.json, gives the same"

printf 'the cat\n\n  \nthe dog ran to\ncaf\303\251\n' >"$T/p.txt"
"$PIPEDATA" tokenize --tokenizer "$K" --prompts "$T/p.txt" -o "$T/p.pgd" >"$T/o" 2>&1
ok $? "tokenize prompts, a line each"
$CHECK prompts "$K" "$T/p.pgd" "$T/p.txt" >"$T/c" 2>&1
ok $? "each non-empty line is a row of transformers' ids, -1 after"
grep -c '^ok - ' "$T/c" | grep -qx 4; ok $? "3 prompts and the row count checked"
printf 'the dog ran to\n' >"$T/one.txt"
"$PIPEDATA" tokenize --tokenizer "$K" --prompt "the dog ran to" -o "$T/one.pgd" >/dev/null 2>&1 &&
    $CHECK prompts "$K" "$T/one.pgd" "$T/one.txt" >/dev/null
ok $? "--prompt TEXT is one row"

cat >"$T/pairs.jsonl" <<'EOF'
{"prompt": "the cat sat", "response": " on the mat."}
{"prompt": "a bird", "response": " sang in the tree. the dog ran to the log."}

{"prompt": "the dog ran to the log. the cat sat on the mat. a bird sang", "response": " x"}
{"prompt": "caf\u00e9", "response": " na\u00efve"}
EOF
"$PIPEDATA" tokenize --tokenizer "$K" --pairs "$T/pairs.jsonl" --seq 12 -o "$T/x.pgd" --targets-out "$T/y.pgd" >"$T/o" 2>&1
ok $? "tokenize prompt/response pairs"
like "$(cat "$T/o")" "pair 2 left out: its prompt has [0-9]+ tokens, no room for the response in --seq 12" \
    "a prompt that fills the window is left out, said with its index"
like "$(cat "$T/o")" "3 pairs \(1 cut to --seq 12 \+ 1 tokens\)" "the kept and cut pairs are counted"
$CHECK pairs "$K" "$T/x.pgd" "$T/y.pgd" "$T/pairs.jsonl" 12 >"$T/c" 2>&1
ok $? "inputs are prompt + response + end of text; targets the next token, -100 at prompt and padding positions"
grep -v '^ok - ' "$T/c" | sed 's/^/# /'

# ---- generation through the tokenizer ----
lm_build "$T/one" 1 replicate; ok $? "lm_tiny builds on 1 stage"
lm_build "$T/two" 2 replicate; ok $? "lm_tiny builds on 2 stages"
"$PIPEDATA" tokenize --tokenizer "$K" "$K/text.txt" -o "$T/train.pgd" >/dev/null 2>&1
G="--steps 60 --log-every 60 --data $T/train.pgd --generate 10 --tokenizer $K"
lm_run "$T/one" "$T/g1.out" $G --prompts "$T/p.pgd" --gen-out "$T/g1.jsonl"; ok $? "1 stage trains and generates from 3 tokenized prompts"
lm_run "$T/two" "$T/g2.out" $G --prompts "$T/p.pgd" --gen-out "$T/g2.jsonl"; ok $? "2 stages do"
is "$(cat "$T/g2.jsonl")" "$(cat "$T/g1.jsonl")" "2 stages give the same tokens and text as 1"
$CHECK gen "$K" "$T/g1.jsonl" >"$T/c" 2>&1; ok $? "each sample's text is the tokenizer's decoding of its tokens"
sed 's/^/# /' "$T/c"
grep -q '^\[stage 0\] sample 2: ' "$T/g1.out"; ok $? "stage 0 prints the decoded samples, numbered"
lm_run "$T/one" "$T/g3.out" $G --prompt "the dog ran to" --gen-out "$T/g3.jsonl"
ok $? "--prompt TEXT through --tokenizer"
is "$(sed -n 's/.*"prompt_tokens": \(\[[^]]*\]\).*/\1/p' "$T/g3.jsonl")" \
    "$(sed -n 's/.*"prompt_tokens": \(\[[^]]*\]\).*/\1/p' "$T/g1.jsonl" | sed -n 2p)" \
    "--prompt's ids are those of pipedata tokenize"

# the sampler: a temperature with top-k 1 or a tiny top-p is greedy; --stop
toks() { sed -n 's/.*"tokens": \(\[[^]]*\]\).*/\1/p' "$1"; }
S="--steps 0 --generate 8 --prompts $T/p.pgd"
lm_run "$T/one" "$T/s0.out" $S --temperature 0 --gen-out "$T/s0.jsonl"; ok $? "greedy from the initial weights"
lm_run "$T/one" "$T/s1.out" $S --temperature 5 --gen-out "$T/s1.jsonl"
lm_run "$T/one" "$T/s2.out" $S --temperature 5 --top-k 1 --gen-out "$T/s2.jsonl"
lm_run "$T/one" "$T/s3.out" $S --temperature 5 --top-p 0.000001 --gen-out "$T/s3.jsonl"
[ "$(toks "$T/s1.jsonl")" != "$(toks "$T/s0.jsonl")" ]; ok $? "temperature 5 differs from greedy"
is "$(toks "$T/s2.jsonl")" "$(toks "$T/s0.jsonl")" "temperature 5 with --top-k 1 is greedy"
is "$(toks "$T/s3.jsonl")" "$(toks "$T/s0.jsonl")" "temperature 5 with --top-p 0.000001 is greedy"
lm_run "$T/one" "$T/s4.out" $S --temperature 5 --top-k 3 --gen-out "$T/s4.jsonl"
lm_run "$T/one" "$T/s5.out" $S --temperature 5 --top-k 3 --gen-out "$T/s5.jsonl"
is "$(toks "$T/s5.jsonl")" "$(toks "$T/s4.jsonl")" "sampling is seeded: the same tokens twice"
first=$(toks "$T/s0.jsonl" | head -1 | sed 's/^\[\([0-9]*\).*/\1/')
lm_run "$T/one" "$T/s6.out" $S --temperature 0 --stop "$first,120" --gen-out "$T/s6.jsonl"
like "$(head -1 "$T/s6.jsonl")" "\"tokens\": \[$first\], \"stop\": \"stop\"" "--stop ends the sequence at its id (kept)"
like "$(sed -n 2p "$T/s0.jsonl")" "\"stop\": \"length\"" "without it, N tokens"

# ---- refusals ----
"$PIPEDATA" tokenize --tokenizer "$T/none" "$T/b.txt" -o "$T/z.pgd" >"$T/o" 2>&1; st=$?
[ $st = 1 ] && grep -q "$T/none.*no such file\|$T/none: no tokenizer.json" "$T/o"; ok $? "a missing tokenizer is named"
mkdir -p "$T/bad" && printf 'not json' >"$T/bad/tokenizer.json"
"$PIPEDATA" tokenize --tokenizer "$T/bad" "$T/b.txt" -o "$T/z.pgd" >"$T/o" 2>&1
like "$(cat "$T/o")" "bad/tokenizer.json: not a tokenizer.json that the tokenizers package reads" "a broken tokenizer.json is named"
printf '{"prompt": "a", "response": "b"}\n{"prompt": "a" "response": "b"}\n' >"$T/bad.jsonl"
"$PIPEDATA" tokenize --tokenizer "$K" --pairs "$T/bad.jsonl" --seq 8 -o "$T/z.pgd" --targets-out "$T/zy.pgd" >"$T/o" 2>&1
like "$(cat "$T/o")" "bad.jsonl:2:16: Expecting ',' delimiter" "a bad JSONL line: file:line:col"
printf '{"prompt": "a", "answer": "b"}\n' >"$T/key.jsonl"
"$PIPEDATA" tokenize --tokenizer "$K" --pairs "$T/key.jsonl" --seq 8 -o "$T/z.pgd" --targets-out "$T/zy.pgd" >"$T/o" 2>&1
like "$(cat "$T/o")" "key.jsonl:1: no string \"response\"" "a pair without its response key"
"$PIPEDATA" tokenize --tokenizer "$K" --pairs "$T/key.jsonl" --seq 8 --response-key answer -o "$T/z.pgd" \
    --targets-out "$T/zy.pgd" >/dev/null 2>&1
ok $? "--response-key names it"
printf '\377\376\n' >"$T/bin.txt"
"$PIPEDATA" tokenize --tokenizer "$K" "$T/bin.txt" -o "$T/z.pgd" >"$T/o" 2>&1
like "$(cat "$T/o")" "bin.txt: not UTF-8 text \(byte 0\)" "a file that is not UTF-8"
"$PIPEDATA" tokenize --tokenizer "$K" --pairs "$T/pairs.jsonl" -o "$T/z.pgd" >"$T/o" 2>&1; st=$?
is "$st" 2 "--pairs without --seq and --targets-out: a usage error"
"$PIPEDATA" tokenize --tokenizer "$K" --pairs "$T/pairs.jsonl" --seq 0 -o "$T/z.pgd" --targets-out "$T/zy.pgd" >"$T/o" 2>&1
like "$(cat "$T/o")" "--seq 0: want an integer in \[1, " "--seq 0 is refused"
"$PIPEDATA" tokenize --tokenizer "$K" --pairs "$T/pairs.jsonl" --seq 8 -o "$T/z.pgd" --targets-out "$T/z.pgd" >"$T/o" 2>&1; st=$?
[ $st = 2 ] && grep -q -- "z.pgd is the same file as " "$T/o"; ok $? "--targets-out the same file as -o is refused"
"$PIPEDATA" tokenize --tokenizer "$K" "$T/b.txt" -o "$T/b.txt" >"$T/o" 2>&1; st=$?
[ $st = 2 ] && cmp -s "$T/b.txt" - <<EOF2
the cat sat on the mat.
EOF2
ok $? "-o the input file is refused, the file left alone"
PIPEGEN_PYTHON=$T/nopython "$PIPEDATA" tokenize --tokenizer "$K" "$T/b.txt" -o "$T/z.pgd" >"$T/o" 2>&1; st=$?
[ $st = 1 ] && grep -q "nopython" "$T/o"; ok $? "a missing Python is named"
"$PIPEDATA" tokenize --tokenizer "$K" "$T/b.txt" -o "$T/full.pgd" >/dev/full 2>"$T/o"; st=$?
[ $st = 1 ] && grep -q "cannot write the standard output" "$T/o"; ok $? "tokenize's report to a full disk (/dev/full): exit 1, said"
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do cat "$K/text.txt" "$T/b.txt"; done >"$T/big.txt"
sh -c "ulimit -f 1; '$PIPEDATA' tokenize --tokenizer '$K' '$T/big.txt' -o '$T/big.pgd'" >"$T/o" 2>&1; st=$?
[ $st = 1 ] && grep -q "big.pgd" "$T/o" && [ ! -e "$T/big.pgd" ]
ok $? "tokenize over ulimit -f: exit 1 naming the file, not a death by SIGXFSZ, nothing left"
lm_run "$T/one" "$T/e1.out" $S --prompts "$T/text.pgd"; st=$?
[ $st != 0 ] && grep -q -- "--prompts: .*text.pgd.*expects \[n\].*pipedata tokenize --prompts" "$T/e1.out"
ok $? "--prompts of a rank-1 stream is refused, saying what prompts are"
lm_run "$T/one" "$T/e2.out" $S --prompts "$T/p.pgd" --prompt "x"; st=$?
[ $st != 0 ] && grep -q -- "--prompt and --prompts together" "$T/e2.out"; ok $? "--prompt and --prompts together are refused"
lm_run "$T/one" "$T/e3.out" $S --top-p 2; st=$?
[ $st = 2 ] && grep -q -- "--top-p" "$T/e3.out"; ok $? "--top-p 2 is a usage error"
lm_run "$T/one" "$T/e5.out" --steps 0 --top-k 3; st=$?
[ $st = 2 ] && grep -q -- "--top-k without --generate N: nothing would be sampled" "$T/e5.out"
ok $? "--top-k without --generate is refused, naming it"
lm_run "$T/one" "$T/e4.out" $S --stop 128; st=$?
[ $st != 0 ] && grep -q -- "--stop: token 128 is outside the vocabulary \[0, 128)" "$T/e4.out"; ok $? "a --stop outside the vocabulary"
done_testing

#!/bin/sh
# tests/plan_align.t — every arena buffer, activation slot, frame tensor and
# gradient accumulator of every plan starts on a 256-byte boundary (cuBLAS
# may choose its kernel by operand alignment, so an op must see the same
# alignment whatever the stage count: runtime/cuda/README.md, "Determinism"):
#  - the committed generated/*/plan.json offsets and the headers' slot strides
#    and frame offsets;
#  - a tied parameter whose size is not a multiple of 256 bytes (gpt_tiny
#    with vocab 31: 1984 bytes): its two accumulators on one stage sit 2048
#    bytes apart, the stage code and the header say so, and the model trains
#    bitwise alike on 1, 2 and 4 stages, tie replicate and transmit (the
#    runtime's fold and tie messages use the same stride);
#  - --guard-bytes 64 keeps the alignment (tests/e2e_san.t checks the gaps).
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
T=$(mktemp -d /tmp/pg-align.XXXXXX)
trap 'rm -rf "$T"' EXIT

# misaligned FILE...: "file: what" for every offset/stride not a multiple of 256
misaligned() {
    awk '
        { s = $0 }
        # plan.json: "offset": N
        { while (match(s, /"offset": [0-9]+/)) { v = substr(s, RSTART + 10, RLENGTH - 10) + 0
              if (v % 256) print FILENAME ": offset " v; s = substr(s, RSTART + RLENGTH) } }
        # headers: "K slots x S bytes", frame tensors " *    +OFF   BYTES bytes"
        /slots x [0-9]+ bytes/ { t = $0; sub(/.*slots x /, "", t); sub(/ bytes.*/, "", t)
              if (t % 256) print FILENAME ": slot stride " t }
        /^ \*  *\+[0-9]+ / { t = $0; sub(/^ \*  *\+/, "", t); sub(/ .*/, "", t)
              if (t % 256) print FILENAME ": frame offset " t }
        # the header'"'"'s buffer table: " *  OFFSET  BYTES  category ..."
        /^ \*  +[0-9]+  +[0-9]+  +[a-z]/ { if ($2 % 256) print FILENAME ": buffer at " $2 }' "$@"
}

n=0
for m in "$TOP"/generated/*/; do
    set -- "$m"plan.json "$m"*.h
    [ -f "$1" ] || continue
    n=$((n + 1))
    bad=$(misaligned "$@")
    is "$bad" "" "generated/$(basename "$m"): every buffer offset, slot stride and frame offset is a multiple of 256"
done
[ "$n" -ge 5 ]; ok $? "the five examples are checked ($n)"
grep -c 'slots x' "$TOP"/generated/gpt_char/*.h | grep -qv '^0$'
ok $? "the checker sees the header's slot lines (so the check above can fail)"

# a vocabulary of 31: wte is f32[31, 16] = 1984 bytes, 2048 apart when padded
V31='s/const vocab = 32/const vocab = 31/'
e2e_gen "$T/v1" gpt_tiny "$(e2e_splits 1)" 1f1b except_last -e "$V31" || echo "# gen failed"
bad=$(misaligned "$T/v1/gen/plan.json" "$T/v1/gen/"*.h)
is "$bad" "" "gpt_tiny with vocab 31, 1 stage: everything 256-aligned"
like "$(cat "$T/v1/gen/"*.h)" 'grad wte: 2 x f32\[31, 16\], every 2048 bytes' \
    "the header says the two accumulators of wte are 2048 bytes apart"
like "$(cat "$T/v1/gen/stage0.c")" 'pg_logits_bwd_w\(.*\(d_wte \+ 1 \* 512\)' \
    "the logits' weight gradient goes to the second accumulator, 512 floats (2048 bytes) on"
like "$(grep -A1 '\.name = "wte", \.index = 0, \.rank = 2, \.dim = {31, 16}, \.numel = 496,' "$T/v1/gen/stage0.c" | tail -1)" \
    '\.nacc = 2, \.stage_nacc = pg_nacc_p0, \.acc_numel = 512, \.chunk = -1, \.grad_layer = -1\}' \
    "the parameter table gives the runtime the stride (acc_numel 512)"
grep -o '"offset": [0-9]*, "bytes": [0-9]*' "$T/v1/gen/plan.json" >/dev/null
ok $? "plan.json lists offsets and sizes"

E2E_GEN_FLAGS="--guard-bytes 64" e2e_gen "$T/g64" gpt_tiny "$(e2e_splits 2)" 1f1b except_last -e "$V31" ||
    echo "# gen --guard-bytes failed"
bad=$(misaligned "$T/g64/gen/plan.json")
is "$bad" "" "--guard-bytes 64: offsets still 256-aligned"
first=$(sed -n 's/.*"offset": \([0-9]*\), "bytes".*/\1/p' "$T/g64/gen/plan.json" | sort -n | head -1)
[ "${first:-0}" -ge 64 ]; ok $? "--guard-bytes 64: the arena starts with free bytes (first buffer at $first)"

# trained bitwise alike on 1, 2 and 4 stages (the runtime's stride matches the plan's)
train() { # DIR STAGES TIE
    e2e_gen "$1" gpt_tiny "$(e2e_splits "$2")" 1f1b except_last -e "$V31" -e "s/^tie wte .*/tie wte $3/" &&
        build_strict "$1/gen" &&
        OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$1/gen/bin" -- --steps 3 --threads 1 --save "$1/w.safetensors" \
            >"$1/run.out" 2>&1 || { tail -5 "$1/run.out" 2>/dev/null | sed 's/^/# /'; return 1; }
    grep 'final loss' "$1/run.out" | sed 's/^\[stage [0-9]*\] //' >"$1/loss"
}
train "$T/t1" 1 replicate; ok $? "vocab 31 on 1 stage trains"
for v in "2 replicate" "4 replicate" "2 transmit"; do
    set -- $v
    train "$T/t$1$2" "$1" "$2"; ok $? "vocab 31 on $1 stages, tie $2, trains"
    [ -s "$T/t1/loss" ] && cmp -s "$T/t1/loss" "$T/t$1$2/loss" && cmp -s "$T/t1/w.safetensors" "$T/t$1$2/w.safetensors"
    ok $? "vocab 31: $1 stages, tie $2: final loss and weights bitwise those of 1 stage ($(cat "$T/t$1$2/loss" 2>/dev/null))"
done
done_testing

#!/bin/sh
# tests/balance.t — `stages = N` is split for the schedule's predicted step
# (codegen/choose/balance.c), checked by enumerating splits:
#  - tests/unit/test_balance.c: for small models, every split into the
#    model's chunks is timed through the whole pipeline; the search finds the
#    best, and its coordinate descent alone (what larger models get) lands
#    within 2 points of bubble of it, never behind the min-max split;
#  - through the command line: `pipegen plan` of tests/models/balance_*.pipe
#    (`stages = N`) predicts a bubble within 2 points of the best of `pipegen
#    plan` over the same model with every explicit split (a `split` line before
#    the lines marked `# L`), under 1f1b and zb1;
#  - examples/gpt2_small.pipe (`stages = 4`) gets a split whose bubble is
#    within 2 points of the best of all its 67525 splits (test_balance --all)
#    and of every split at block boundaries through the command line, and is
#    under the bubble of three blocks per stage (51.4%); that split keeps whole
#    blocks on each stage (a split inside one gains less than block_margin:
#    no skip crosses a stage), said by pipegen plan; plan.json
#    records the choice ("blocks"), only where there was one.
. "$(dirname "$0")/lib.sh"
cd "$TOP" || exit 1
T=$(mktemp -d /tmp/pg-balance.XXXXXX)
trap 'rm -rf "$T"' EXIT

# the unit test, against the front end and codegen library pipegen is linked from
LIB=$TOP/build-san/libpgfront.a SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
[ -f "$LIB" ] || { LIB=$TOP/build/libpgfront.a; SAN=""; }
# shellcheck disable=SC2086
if cc -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -O1 -g $SAN -Idsl -Icodegen -Iruntime/core \
        -Ibuild/gen -Itests -o "$T/test_balance" tests/unit/test_balance.c "$LIB" -lm 2>"$T/cc.log"; then
    ok 0 "test_balance compiles"
    "$T/test_balance" tests/models/balance_mlp.pipe tests/models/balance_gpt.pipe tests/models/resmlp_small.pipe \
        --all examples/gpt2_small.pipe >"$T/unit.tap" 2>&1
    st=$?
    grep -v '^1\.\.' "$T/unit.tap" | sed 's/^/# /'
    ok $st "test_balance: the search against brute force ($(grep -c '^ok' "$T/unit.tap") ok, $(grep -c '^not ok' "$T/unit.tap") not ok)"
else
    ok 1 "test_balance compiles"; sed 's/^/# /' "$T/cc.log"
fi

bubble() { sed -n 's/^predicted step .*, bubble \([0-9.]*\)%$/\1/p'; }

# variant FILE SCHEDULE POSITIONS...: FILE with the schedule and a `split` before each
# marked line whose number (1-based among the marked lines) is in POSITIONS
variant() {
    f=$1 s=$2; shift 2
    awk -v pos=" $* " -v sch="$s" '
        / schedule = / { sub(/schedule = [a-z0-9()]*/, "schedule = " sch) }
        /# L$/ { n++; if (index(pos, " " n " ")) print "split" }
        { print }' "$f"
}

# best FILE SCHEDULE STAGES: the least bubble of every explicit split into STAGES
best() {
    f=$1 s=$2 p=$3 least=""
    n=$(grep -c '# L$' "$f")
    for combo in $(combos 2 "$n" $((p - 1))); do
        variant "$f" "$s" $(echo "$combo" | tr ',' ' ') >"$T/v.pipe"
        b=$("$PIPEGEN" plan "$T/v.pipe" 2>/dev/null | bubble)
        [ -n "$b" ] || continue
        least=$(awk -v a="$least" -v b="$b" 'BEGIN { print (a == "" || b + 0 < a + 0) ? b : a }')
    done
    echo "$least"
}

# combos FROM TO K: every K increasing numbers in FROM..TO, comma-joined, one per line
combos() {
    awk -v lo="$1" -v hi="$2" -v k="$3" '
        function rec(i, from, acc,    x) {
            if (i > k) { print substr(acc, 2); return }
            for (x = from; x <= hi - (k - i); x++) rec(i + 1, x + 1, acc "," x)
        }
        BEGIN { rec(1, lo, "") }'
}

for c in balance_mlp:3:1f1b balance_mlp:3:zb1 balance_gpt:4:1f1b balance_gpt:4:zb1; do
    m=${c%%:*} r=${c#*:} p=${r%%:*} s=${r#*:}
    f=tests/models/$m.pipe
    sed -e "s/schedule = [a-z0-9()]*/schedule = $s/" "$f" >"$T/auto.pipe"
    got=$("$PIPEGEN" plan "$T/auto.pipe" 2>&1 | bubble)
    # the explicit variants drop `stages = N` (the split lines say it)
    sed -e "s/stages = $p//" "$f" >"$T/base.pipe"
    want=$(best "$T/base.pipe" "$s" "$p")
    [ -n "$got" ] && [ -n "$want" ] && awk -v a="$got" -v b="$want" 'BEGIN { exit !(a <= b + 2.0) }'
    ok $? "$m, stages = $p, $s: pipegen's split predicts a bubble of $got%, the best explicit split $want%"
done

# GPT-2 small: every split of its 12 blocks at block boundaries into 4 stages
# (plus the embeddings on stage 0 and the head on the last), 1f1b
got=$("$PIPEGEN" plan examples/gpt2_small.pipe 2>&1 | bubble)
sed -e 's/stages = 4  //' -e 's/^h = repeat 12 transformer(d, heads)$/REPEAT/' examples/gpt2_small.pipe >"$T/g.pipe"
least=""
for combo in $(combos 1 11 3); do
    a=$(echo "$combo" | cut -d, -f1) b=$(echo "$combo" | cut -d, -f2) e=$(echo "$combo" | cut -d, -f3)
    awk -v a="$a" -v b="$b" -v e="$e" '/^REPEAT$/ {
            for (i = 0; i < 12; i++) {
                if (i == a || i == b || i == e) print "split"
                printf "h%d = transformer(d, heads)\n", i
            }
            next }
        { print }' "$T/g.pipe" >"$T/gv.pipe"
    bb=$("$PIPEGEN" plan "$T/gv.pipe" 2>/dev/null | bubble)
    [ -n "$bb" ] && least=$(awk -v x="$least" -v y="$bb" 'BEGIN { print (x == "" || y + 0 < x + 0) ? y : x }')
done
[ -n "$got" ] && [ -n "$least" ] && awk -v a="$got" -v b="$least" 'BEGIN { exit !(a <= b + 2.0 && a < 51.4) }'
ok $? "examples/gpt2_small.pipe: bubble $got%, the best of the 165 block-boundary splits $least%, three blocks per stage 51.4%"
"$PIPEGEN" check examples/gpt2_small.pipe >"$T/g.check" 2>&1 && ! grep -q '^skips crossing stages:' "$T/g.check"
ok $? "... its split keeps whole blocks: no skip crosses a stage"
like "$("$PIPEGEN" plan examples/gpt2_small.pipe 2>&1)" \
    "^split: whole blocks per stage \([0-9+]+ of 12 repeat instances\), predicted step [0-9.]+ Tflop; a split inside a block would gain [0-9.]+%, not more than block_margin 5%$" \
    "... and pipegen plan says so"
"$PIPEGEN" gen tests/golden/check/blocks_inside.pipe -o "$T/inside" >/dev/null 2>&1
like "$(grep '"blocks"' "$T/inside/plan.json")" \
    '^  "blocks": \{"taken": "inside", "reason": "gain", "margin": 0.05, "unit": "flop", "whole_step": [0-9]+, "inside_step": [0-9]+, "whole_instances_per_chunk": \[1, 2\]\},$' \
    "plan.json records a split inside a block, why and both predicted steps"
like "$(grep '"blocks"' generated/gpt2_small/plan.json)" '^  "blocks": \{"taken": "whole", "reason": "within_margin", ' \
    "... and gpt2_small's whole blocks"
"$PIPEGEN" gen tests/models/balance_mlp.pipe -o "$T/mlp" >/dev/null 2>&1
[ -f "$T/mlp/plan.json" ] && ! grep -q '"blocks"' "$T/mlp/plan.json"
ok $? "a model without repeats has no \"blocks\" in plan.json (its plan as before)"
done_testing

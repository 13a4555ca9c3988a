#!/bin/sh
# tests/run_example.t — `make run` generates: the example is turned into C by
# pipegen gen into build/run/<model>/c (never over the committed generated/),
# its stages are linked from there, a regeneration removes the stage binaries
# of the older one, and tools/run_example.sh (make run's script) trains the
# example it generated, prints the loss and a sample.
. "$(dirname "$0")/lib.sh"
T=$(mktemp -d /tmp/pg-run.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$TOP" || exit 1
B=build

make --no-print-directory "$B/run/mlp/stages" >"$T/make.log" 2>&1
st=$?
ok $st "make $B/run/mlp/stages generates and links examples/mlp.pipe"
[ $st = 0 ] || tail -5 "$T/make.log" | sed 's/^/# /'
diff -r generated/mlp "$B/run/mlp/c" >"$T/diff" 2>&1
ok $? "build/run/mlp/c is what pipegen gen emits (equal to the committed generated/mlp)"
ls "$B/run/mlp" | grep '^stage[0-9]*$' | tr '\n' ' ' >"$T/bins"
is "$(cat "$T/bins")" "stage0 stage1 stage2 " "one binary per stage of the example"

# an older generation's extra stage must not survive a regeneration
cp "$B/run/mlp/stage0" "$B/run/mlp/stage3"
# as if the example had just been regenerated: plan.json touched and the stamp
# made older than it (a touch alone may land in the stamp's own timestamp tick,
# and make says "up to date")
regenerated() {
    touch "$B/run/mlp/c/plan.json" &&
        touch -d "@$(($(stat -c %Y "$B/run/mlp/c/plan.json") - 2))" "$B/run/mlp/stages"
}
regenerated
make --no-print-directory "$B/run/mlp/stages" >"$T/make2.log" 2>&1
[ -e "$B/run/mlp/stage3" ] && st=1 || st=0
ok $st "relinking removes a stage binary the new generation does not have"
is "$(cat "$T/make2.log")" "$(printf '  LINK   %s\n' "$B/run/mlp/stage0" "$B/run/mlp/stage1" "$B/run/mlp/stage2")" \
    "... one short line per command, the compiler's own line left out"
regenerated
make --no-print-directory V=1 "$B/run/mlp/stages" >"$T/make_v.log" 2>&1
like "$(cat "$T/make_v.log")" "cc .* -o $B/run/mlp/stage0 $B/run/mlp/c/stage0.c $B/libpgrt_cpu.a" "... and with V=1 the whole command"

# an edit to the example takes effect: make sees the .pipe newer than its C
touch -d '2000-01-01' "$B/run/mlp/c/plan.json"
make --no-print-directory -n "$B/run/mlp/stages" >"$T/dry.log" 2>&1
like "$(cat "$T/dry.log")" "pipegen gen examples/mlp.pipe -o $B/run/mlp/c" "a changed example is generated again"
make --no-print-directory "$B/run/mlp/stages" >/dev/null 2>&1

out=$(tools/run_example.sh --steps 3 --log-every 1 --generate 8 --threads 1 2>&1)
st=$?
ok $st "tools/run_example.sh (make run) trains 3 steps"
[ $st = 0 ] || printf '%s\n' "$out" | tail -10 | sed 's/^/# /'
like "$out" "training examples/gpt_char.pipe on 4 stages \($B/run/gpt_char\)" "... the stages it generated from the example"
like "$out" "step 3/3 +loss [0-9.]+" "... prints the loss"
like "$out" "sample: The keeper of the light " "... and a sample"
done_testing

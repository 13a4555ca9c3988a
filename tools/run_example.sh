#!/bin/sh
# tools/run_example.sh — what `make run` does: generate examples/gpt_char.pipe
# into build/run/gpt_char/c/ (so an edit to the example takes effect; the
# committed generated/gpt_char stays the diff-tested copy), link its stages
# into build/run/gpt_char/stage<k>, turn data/tiny_text.txt into a token stream
# (build/pipedata), train the character-level GPT on its stages through piperun
# (the falling loss, the throughput, each stage's bubble), then let it continue
# a prompt (--generate).
# Extra arguments go to every stage (e.g. --steps 50). RUN_MODEL picks another
# example that reads a token stream (default gpt_char).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
M=${RUN_MODEL:-gpt_char}
[ -f "examples/$M.pipe" ] || { echo "run_example: no examples/$M.pipe" >&2; exit 2; }
make --no-print-directory "$BUILD/run/$M/stages" "$BUILD/piperun" "$BUILD/pipedata"
"$BUILD/pipedata" text data/tiny_text.txt -o "$BUILD/tiny_text.pgd"
n=$(ls "$BUILD/run/$M" | grep -c '^stage[0-9]*$')
echo "== training examples/$M.pipe on $n stages ($BUILD/run/$M) on data/tiny_text.txt"
exec "$BUILD/piperun" "$BUILD/run/$M" -- --data "$BUILD/tiny_text.pgd" --log-every 25 \
    --generate 200 --prompt "The keeper of the light " "$@"

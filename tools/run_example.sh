#!/bin/sh
# tools/run_example.sh — what `make run` does: turn data/tiny_text.txt into a
# token stream (build/pipedata), build the committed generated/gpt_char (kept
# in sync with examples/gpt_char.pipe by tests/generated.t; it is not
# regenerated here) into build/gpt_char/stage<k>, train the character-level
# GPT on 4 local stages through piperun (the falling loss, the throughput,
# each stage's bubble), then let it continue a prompt (--generate).
# Extra arguments go to every stage (e.g. --steps 50).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
make --no-print-directory "$BUILD/gpt_char/stages" "$BUILD/piperun" "$BUILD/pipedata"
"$BUILD/pipedata" text data/tiny_text.txt -o "$BUILD/tiny_text.pgd"
echo "== training examples/gpt_char.pipe on 4 stages (generated/gpt_char) on data/tiny_text.txt"
exec "$BUILD/piperun" "$BUILD/gpt_char" -- --data "$BUILD/tiny_text.pgd" --log-every 25 \
    --generate 200 --prompt "The keeper of the light " "$@"

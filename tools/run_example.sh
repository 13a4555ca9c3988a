#!/bin/sh
# tools/run_example.sh — what `make run` does: build the committed generated/mlp
# (kept in sync with examples/mlp.pipe by tests/generated.t; it is not
# regenerated here) into build/mlp/stage<k>, then train 30 steps on 3 local
# stages through piperun: the falling loss, the throughput, each stage's bubble.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
make --no-print-directory "$BUILD/mlp/stages" "$BUILD/piperun"
echo "== training examples/mlp.pipe on 3 stages (generated/mlp), 30 steps"
exec "$BUILD/piperun" "$BUILD/mlp" -- --steps 30 "$@"

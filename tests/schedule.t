#!/bin/sh
# tests/schedule.t — unit tests of codegen's schedules, communication, slots,
# verifier, CSV, predictor and memory planner (tests/unit/test_schedule.c),
# built with ASan and UBSan from those sources alone (plus dsl/diag.c).
TOP=$(cd "$(dirname "$0")/.." && pwd)
cd "$TOP" || exit 1
OUT=${TMPDIR:-/tmp}/pg-test-schedule.$$
mkdir -p "$OUT" || exit 1
trap 'rm -rf "$OUT"' EXIT
SRC="tests/unit/test_schedule.c dsl/diag.c codegen/schedule/sched_core.c codegen/schedule/sched_build.c codegen/schedule/schedule.c codegen/schedule/schedule_comms.c
     codegen/schedule/schedule_csv.c codegen/schedule/sched_sim.c codegen/schedule/verify.c codegen/schedule/predict.c codegen/gen/memplan.c"
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
if ! ${CC:-cc} -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -O1 -g $SAN \
        -Idsl -Icodegen -Iruntime/core -Itests -o "$OUT/test_schedule" $SRC 2>"$OUT/cc.log"; then
    echo "1..1"; echo "not ok 1 - test_schedule compiles"; sed 's/^/# /' "$OUT/cc.log"; exit 1
fi
ASAN_OPTIONS=detect_leaks=1 "$OUT/test_schedule" "$OUT"

#!/bin/sh
# tests/fuzz.t — a short libFuzzer run of the front end (tests/fuzz.sh 5):
# lexer, parser and checker under ASan/UBSan must survive whatever it makes.
# `make fuzz` runs the same for longer.
. "$(dirname "$0")/lib.sh"
if ! command -v clang >/dev/null 2>&1; then
    echo "1..0 # SKIP clang not installed (needed for libFuzzer)"
    exit 0
fi
# A fresh corpus from the seeds and a fixed seed: the same short run every time.
corpus=$(mktemp -d)
out=$(FUZZ_CORPUS=$corpus FUZZ_SEED=${FUZZ_SEED:-1} "$TOP/tests/fuzz.sh" "${FUZZ_T_SECONDS:-5}" 2>&1)
rc=$?
rm -rf "$corpus"
if [ $rc = 2 ]; then
    # The build itself failed: that is a failure too, but say which.
    printf '%s\n' "$out" | sed 's/^/# /' | tail -30
fi
ok $rc "the front end survives ${FUZZ_T_SECONDS:-5} s of fuzzing"
printf '%s\n' "$out" | grep -E '^(stat::number_of_executed_units|fuzz.sh)' | sed 's/^/# /'
done_testing

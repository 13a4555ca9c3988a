#!/bin/sh
# tests/fuzz.t — a short libFuzzer run (tests/fuzz.sh 4) of every parser of
# outside input: the front end, the profile JSON, `pipegen trace`'s Chrome
# trace, schedule CSV files, .pgd data files and token streams, safetensors
# and checkpoints, pipedata's numpy and CSV readers, and everything a stage
# parses from the network (the rendezvous's greetings, answers and message
# headers). Under ASan/UBSan each must survive whatever the fuzzer
# makes, starting with the regression inputs of tests/fuzz_seeds/. `make fuzz`
# runs the same for longer.
. "$(dirname "$0")/lib.sh"
if ! command -v clang >/dev/null 2>&1; then
    echo "1..0 # SKIP clang not installed (needed for libFuzzer)"
    exit 0
fi
targets="front profile trace csv pgd safetensors ckpt rdv pipedata"
# A fresh corpus from the seeds and a fixed seed: the same short run every time.
corpus=$(mktemp -d)
out=$(FUZZ_CORPUS=$corpus FUZZ_SEED=${FUZZ_SEED:-1} "$TOP/tests/fuzz.sh" "${FUZZ_T_SECONDS:-4}" $targets 2>&1)
rc=$?
rm -rf "$corpus"
if [ $rc = 2 ]; then
    # The build itself failed: that is a failure too, but say which.
    printf '%s\n' "$out" | sed 's/^/# /' | tail -30
fi
for t in $targets; do
    printf '%s\n' "$out" | grep -q "^fuzz.sh: ok $t:"
    ok $? "$t survives ${FUZZ_T_SECONDS:-4} s of fuzzing"
done
printf '%s\n' "$out" | grep -E '^(fuzz.sh|    )' | sed 's/^/# /'
done_testing

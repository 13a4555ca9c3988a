#!/bin/sh
# tests/fuzz.sh SECONDS — fuzz the front end (lexer, parser, checker) with
# libFuzzer under ASan and UBSan for SECONDS (default 60). Builds
# build/fuzz/fuzz_front from dsl/fuzz_front.c, dsl/*.c and the generated
# lexer and parser, seeds the corpus with examples/*.pipe and every golden
# .pipe, and exits non-zero when the fuzzer finds a crash (the input that did
# it is left as build/fuzz/crash-*). `make fuzz` runs it.
#   FUZZ_CORPUS=DIR   corpus folder (default build/fuzz/corpus, kept between runs)
#   FUZZ_SEED=N       libFuzzer's random seed (default: libFuzzer picks one)
#   FUZZ_TIMEOUT=S    an input running longer than S seconds is a failure (default 10;
#                     the front end should take well under 1 s on anything)
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
SECONDS_TO_RUN=${1:-60}
OUT=$TOP/build/fuzz
CLANG=${CLANG:-clang}
cd "$TOP" || exit 1
CORPUS=${FUZZ_CORPUS:-$OUT/corpus}
mkdir -p "$OUT" "$CORPUS" || exit 1

command -v "$CLANG" >/dev/null 2>&1 || { echo "fuzz.sh: $CLANG not found (apt-get install clang)" >&2; exit 2; }
make -s build/gen/lexer.c build/gen/pipe.c >"$OUT/build.log" 2>&1 || {
    echo "fuzz.sh: cannot generate the lexer and parser:" >&2; cat "$OUT/build.log" >&2; exit 2; }

# The checker's sources are dsl/*.c; no codegen file is needed for pg_check.
FLAGS="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -g -O1 -fno-omit-frame-pointer
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -Idsl -Icodegen -Ibuild/gen"
# shellcheck disable=SC2086
"$CLANG" $FLAGS -o "$OUT/fuzz_front" dsl/*.c build/gen/lexer.c build/gen/pipe.c -lm \
    >>"$OUT/build.log" 2>&1 || {
    echo "fuzz.sh: building the fuzz target failed:" >&2; tail -30 "$OUT/build.log" >&2; exit 2; }

for f in examples/*.pipe tests/golden/*/*.pipe tests/golden/*/*/*.pipe; do
    [ -f "$f" ] && cp "$f" "$CORPUS/seed_$(echo "$f" | tr '/' '_')"
done

# Keywords and operators as a dictionary, so mutations form real statements.
for w in model const input target param train block repeat split stash pop tie \
         linear relu gelu layernorm attention embed add concat replicate transmit \
         f32 bf16 i32 batch microbatches schedule checkpoint loss optimizer seed stages \
         '->' '(' ')' '[' ']' '{' '}' ',' '=' ':' '#' '"' '1e-3' '9223372036854775808'; do
    printf '"%s"\n' "$(printf '%s' "$w" | sed 's/["\\]/\\&/g')"
done >"$OUT/front.dict"

echo "fuzz.sh: fuzzing the front end for $SECONDS_TO_RUN s (corpus $CORPUS)"
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
"$OUT/fuzz_front" -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -timeout="${FUZZ_TIMEOUT:-10}" \
    -rss_limit_mb=2048 -print_final_stats=1 -dict="$OUT/front.dict" -artifact_prefix="$OUT/" ${FUZZ_SEED:+-seed="$FUZZ_SEED"} "$CORPUS" \
    >"$OUT/fuzz.log" 2>&1
rc=$?
tail -n 20 "$OUT/fuzz.log"
if [ $rc -ne 0 ]; then
    echo "fuzz.sh: the fuzzer found a failure (exit $rc); see $OUT/fuzz.log and $OUT/crash-*" >&2
    exit 1
fi
echo "fuzz.sh: no failures in $SECONDS_TO_RUN s"

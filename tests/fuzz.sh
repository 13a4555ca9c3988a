#!/bin/sh
# tests/fuzz.sh SECONDS [TARGET...] — fuzz the parsers of outside input with
# libFuzzer under ASan and UBSan, SECONDS (default 60) per target. Targets:
#   front        the .pipe front end: lexer, parser, checker (tests/fuzz/fuzz_front.c)
#   profile      the profile JSON of --balance (dsl/cost.c)
#   trace        `pipegen trace RUN.json --svg` (codegen/cli/cmd_trace.c)
#   csv          schedule CSV files through pg_schedule_build (codegen/schedule/schedule_csv.c)
#   pgd          .pgd data files and token streams (runtime/core/data.c, tokens.c)
#   safetensors  the safetensors reader of --load (runtime/core/safetensors.c)
#   ckpt         resuming from a checkpoint: MANIFEST and stage file (runtime/core/checkpoint.c)
#   rdv          what a stage parses from the network: the master's greetings (the response
#                to its challenge, the hello, the agreement text), the doorman and the
#                failed start-up's answers, the mesh, a peer's side, message headers
#                (runtime/core/tcp.c, agree.c)
#   pipedata     `pipedata npy` and `pipedata csv` (cmd/pd_npy.c, cmd/pd_csv.c)
# (the harnesses besides front are tests/fuzz/fuzz_<target>.c). The sources
# are compiled once into build/fuzz/b/ (the Makefile's rules, clang,
# -fsanitize=fuzzer-no-link,address,undefined), each target linked to
# build/fuzz/fuzz_<target>. Corpora start from tests/fuzz_seeds/<target>/ (the
# regression inputs of bugs found before: each is replayed first), the
# examples and goldens (front) and the seeds a harness writes with the real
# writers (FUZZ_SEED_DIR). Prints "fuzz.sh: ok TARGET ..." or "fuzz.sh: FAIL
# TARGET ..." per target and exits non-zero when any failed (the input that
# did it is left as build/fuzz/<target>/crash-* and the log as
# build/fuzz/<target>/fuzz.log). `make fuzz` runs it.
#   FUZZ_CORPUS=DIR   corpus folder, one subfolder per target (default build/fuzz/corpus, kept)
#   FUZZ_SEED=N       libFuzzer's random seed (default: libFuzzer picks one)
#   FUZZ_TIMEOUT=S    an input running longer than S seconds is a failure (default 10;
#                     every parser should take well under 1 s on anything)
#   FUZZ_JOBS=N       targets fuzzed at once (default 2)
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
SECONDS_TO_RUN=${1:-60}
[ $# -gt 0 ] && shift
TARGETS=${*:-front profile trace csv pgd safetensors ckpt rdv pipedata}
OUT=$TOP/build/fuzz
CLANG=${CLANG:-clang}
JOBS=${FUZZ_JOBS:-2}
cd "$TOP" || exit 1
CORPUS=${FUZZ_CORPUS:-$OUT/corpus}
mkdir -p "$OUT" "$CORPUS" || exit 1

command -v "$CLANG" >/dev/null 2>&1 || { echo "fuzz.sh: $CLANG not found (apt-get install clang)" >&2; exit 2; }

# Every source once, instrumented, with the Makefile's own rules and flags.
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
make -s -j"$JOBS" BUILD=build/fuzz/b CC="$CLANG" CFLAGS="-O1 -g" SANFLAGS="-fsanitize=fuzzer-no-link $SAN" \
    build/fuzz/b/libpgfront.a build/fuzz/b/libpgrt_cpu.a >"$OUT/build.log" 2>&1 || {
    echo "fuzz.sh: building the sources for fuzzing failed:" >&2; tail -30 "$OUT/build.log" >&2; exit 2; }
FLAGS="-std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer $SAN -Wall -Wextra -Werror
       -Idsl -Icodegen -Iruntime/core -Iruntime/cpu -Ibuild/fuzz/b/gen"
FRONT_LIB="build/fuzz/b/libpgfront.a -lm"
RT_LIB="build/fuzz/b/libpgrt_cpu.a -lpthread -lm"
for t in $TARGETS; do
    extra=
    case $t in
    front | profile | trace | csv) src=tests/fuzz/fuzz_$t.c; libs=$FRONT_LIB ;;
    pgd | safetensors | ckpt | rdv) src=tests/fuzz/fuzz_$t.c; libs=$RT_LIB ;;
    pipedata) # pipedata's own main gives way to libFuzzer's
        src="tests/fuzz/fuzz_$t.c cmd/pipedata.c cmd/pd_npy.c cmd/pd_csv.c cmd/pd_tokenize.c"; extra="-Icmd -Dmain=pipedata_main"
        libs=$RT_LIB ;;
    *) echo "fuzz.sh: unknown target '$t'" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086
    "$CLANG" $FLAGS $extra -o "$OUT/fuzz_$t" $src $libs >>"$OUT/build.log" 2>&1 || {
        echo "fuzz.sh: building the fuzz target $t failed:" >&2; tail -30 "$OUT/build.log" >&2; exit 2; }
done

# Keywords and operators as a dictionary, so mutations form real statements.
for w in model const input target param train block repeat split stash pop tie \
         linear relu gelu layernorm attention embed add concat replicate transmit \
         f32 bf16 i32 batch microbatches schedule checkpoint loss optimizer seed stages \
         '->' '(' ')' '[' ']' '{' '}' ',' '=' ':' '#' '"' '1e-3' '9223372036854775808'; do
    printf '"%s"\n' "$(printf '%s' "$w" | sed 's/["\\]/\\&/g')"
done >"$OUT/front.dict"
# JSON keys of the profile and trace formats, and of safetensors headers.
for w in layers name fwd_s bwd_s bwd_b_s bwd_w_s recompute_s messages latency_s bytes_per_s send_s \
         send_latency_s send_bytes_per_s recv_latency_s recv_bytes_per_s stage_costs stage_times stage \
         optimizer_s grad_norm_s tie_reduce_s step_start_s step_end_s traceEvents otherData ph X pid ts dur replicas DP_REDUCE DP_WAIT \
         args step mb chunk kind cat FWD BWD_B BWD_W microbatches stages model dtype shape data_offsets \
         __metadata__ F32 I32 format '{' '}' '[' ']' ':' ',' '"' '1e308' '-1' '2147483648' '\\u00e9' true null; do
    printf '"%s"\n' "$(printf '%s' "$w" | sed 's/["\\]/\\&/g')"
done >"$OUT/json.dict"
for w in stage action mb chunk peer skip param FWD BWD_B BWD_W SEND_ACT RECV_ACT SEND_GRAD RECV_GRAD \
         OPT_STEP ',' '-1' '#' '2147483648'; do
    printf '"%s"\n' "$w"
done >"$OUT/csv.dict"

# fuzz_one TARGET: fill its corpus, run it; writes $OUT/TARGET/rc
fuzz_one() {
    t=$1
    c=$CORPUS/$t
    o=$OUT/$t
    mkdir -p "$c" "$o" || return 1
    rm -f "$o"/crash-* "$o"/leak-* "$o"/timeout-* "$o"/oom-*
    if [ -d "tests/fuzz_seeds/$t" ]; then
        for f in "tests/fuzz_seeds/$t"/*; do
            [ -f "$f" ] && cp "$f" "$c/seed_$(basename "$f")"
        done
    fi
    dict=
    case $t in
    front)
        for f in examples/*.pipe tests/golden/*/*.pipe tests/golden/*/*/*.pipe; do
            [ -f "$f" ] && cp "$f" "$c/seed_$(echo "$f" | tr '/' '_')"
        done
        dict=$OUT/front.dict ;;
    profile | trace | safetensors) dict=$OUT/json.dict ;;
    csv) dict=$OUT/csv.dict ;;
    esac
    # -close_fd_mask=3: the readers' own error messages stay out of the log
    # (sanitizer reports still reach it); front prints nothing.
    mask=3
    [ "$t" = front ] && mask=0
    FUZZ_SEED_DIR=$c UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$OUT/fuzz_$t" -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -timeout="${FUZZ_TIMEOUT:-10}" \
        -rss_limit_mb=2048 -malloc_limit_mb=512 -close_fd_mask=$mask -print_final_stats=1 \
        ${dict:+-dict="$dict"} -artifact_prefix="$o/" ${FUZZ_SEED:+-seed="$FUZZ_SEED"} "$c" \
        >"$o/fuzz.log" 2>&1
    echo $? >"$o/rc"
}

echo "fuzz.sh: fuzzing $TARGETS for $SECONDS_TO_RUN s each, $JOBS at a time (corpus $CORPUS)"
set -- $TARGETS
while [ $# -gt 0 ]; do
    batch=
    k=0
    while [ $# -gt 0 ] && [ $k -lt "$JOBS" ]; do
        fuzz_one "$1" &
        batch="$batch $1"
        k=$((k + 1))
        shift
    done
    wait
done
failed=0
for t in $TARGETS; do
    rc=$(cat "$OUT/$t/rc" 2>/dev/null || echo 99)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$OUT/$t/fuzz.log" | tail -n 1)
    if [ "$rc" = 0 ]; then
        echo "fuzz.sh: ok $t: no failures in $SECONDS_TO_RUN s (${runs:-?} runs)"
    else
        failed=1
        echo "fuzz.sh: FAIL $t: the fuzzer found a failure (exit $rc); see $OUT/$t/fuzz.log and $OUT/$t/crash-* (or leak-, timeout-, oom-)"
        grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|fuzz:|artifact_prefix|Test unit written)' "$OUT/$t/fuzz.log" | head -n 8 | sed 's/^/    /'
    fi
done
exit $failed

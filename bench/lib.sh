# bench/lib.sh — shell functions shared by the bench scripts (POSIX sh; sourced,
# not run). The caller sets TOP (the repository root) and, for the functions
# that stop the run, defines fail MESSAGE; the rest read the knobs the caller
# set (STEPS, WARMUP, REPEAT, CPUS, BATCH, RES, CC).

# bench_check_knobs: STEPS, WARMUP and REPEAT are numbers, REPEAT >= 1, STEPS > WARMUP
bench_check_knobs() {
    case $STEPS in *[!0-9]*|'') fail "BENCH_STEPS must be a number" ;; esac
    case $WARMUP in *[!0-9]*|'') fail "BENCH_WARMUP must be a number" ;; esac
    case $REPEAT in *[!0-9]*|''|0) fail "BENCH_REPEAT must be a number >= 1" ;; esac
    [ "$STEPS" -gt "$WARMUP" ] || fail "BENCH_STEPS ($STEPS) must exceed BENCH_WARMUP ($WARMUP)"
}

# bench_need FILE...: each (relative to TOP) was built by `make all`
bench_need() {
    for b_f in "$@"; do
        [ -e "$TOP/$b_f" ] || fail "$b_f is missing: run \`make all\` first"
    done
}

# bench_hf_start NAME: the start of a bench against transformers (PY, the
# Python of tools/deps.sh hf): exits 0 with a line when PY lacks transformers;
# else pins (bench_pin), notes torch's BLAS, makes DIR/logs and RES
# (DIR/NAME-results.txt), and the random Llama of bench/hf_gen.py in M/hf
# (M = DIR/NAME-model)
bench_hf_start() {
    if ! "$PY" -c 'import transformers, safetensors, torch' 2>/dev/null; then
        echo "# $1 bench: skipped: no Python with transformers at $PY (tools/deps.sh hf)"
        exit 0
    fi
    bench_pin
    bench_torch_blas_note
    mkdir -p "$DIR/logs" || fail "cannot create $DIR"
    RES=$DIR/$1-results.txt
    : >"$RES" || fail "cannot write $RES"
    M=$DIR/$1-model
    rm -rf "$M" && "$PY" "$TOP/bench/hf_gen.py" make "$M/hf" >"$DIR/logs/$1-make.log" 2>&1 ||
        fail "bench/hf_gen.py make failed; log: $DIR/logs/$1-make.log"
}

# bench_torch_blas_note: a line when Debian's torch (BLAS_INFO=generic: the
# libblas.so.3 alternative) runs on the reference netlib BLAS, which makes every
# torch anchor many times slower (`make bench` installs OpenBLAS first:
# tools/deps.sh bench)
bench_torch_blas_note() {
    b_l=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null)
    case $b_l in
    *openblas*|'') ;;
    *) echo "# note: libblas.so.3 is $b_l (the reference BLAS), which Debian's torch calls: the torch rows are" \
            "not a fair anchor; install OpenBLAS (tools/deps.sh bench, as make bench does) and run again" ;;
    esac
}

# bench_pin: PIN pins to cores CPUS when it can (children inherit the mask),
# else is empty and CPUS becomes "unpinned" (with a note); TMO is a 600 s
# timeout prefix where `timeout` exists
bench_pin() {
    PIN=""
    if command -v taskset >/dev/null 2>&1 && taskset -c "$CPUS" true 2>/dev/null; then
        PIN="taskset -c $CPUS"
    else
        echo "# note: cannot pin to cores $CPUS (no taskset or no such cores); running unpinned"
        CPUS="unpinned"
    fi
    TMO=""
    command -v timeout >/dev/null 2>&1 && TMO="timeout 600"
}

# bench_cc_stages GEN BIN: compile GEN/stage<k>.c into BIN/stage<k> against
# build/libpgrt_cpu.a (-O2, like the runtime); 1 when one fails
bench_cc_stages() {
    for b_f in "$1"/stage*.c; do
        $CC -std=c11 -O2 -I"$TOP/runtime/core" -I"$1" -o "$2/$(basename "$b_f" .c)" "$b_f" \
            "$TOP/build/libpgrt_cpu.a" -lpthread -lm || return 1
    done
}

# median_ms LOG: the median step time (ms) of the steps after WARMUP, from the
# last stage's "step S/N  loss L ... T ms/step" lines
median_ms() {
    awk -v w="$WARMUP" '
        / step [0-9]+\/[0-9]+  loss / {
            for (i = 1; i <= NF; i++) {
                if ($i == "step") { split($(i + 1), p, "/"); s = p[1] + 0 }
                if ($i == "ms/step" && $(i - 1) + 0 > 0 && s > w) v[n++] = $(i - 1) + 0
            }
        }
        END {
            if (n == 0) exit 1
            for (i = 1; i < n; i++) { x = v[i]; for (j = i - 1; j >= 0 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
            printf "%.3f\n", n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2
        }' "$1"
}

# bench_pipegen NAME ROUND LOG THREADS BIN [OPTION...]: one pinned piperun of
# the stage programs in BIN for STEPS steps with THREADS (OpenBLAS) threads per
# stage and the OPTIONs, output in LOG; appends "NAME ROUND MS" to RES
bench_pipegen() {
    b_name=$1 b_round=$2 b_log=$3 b_thr=$4 b_bin=$5
    shift 5
    if ! OPENBLAS_NUM_THREADS=$b_thr $TMO $PIN "$TOP/build/piperun" "$b_bin" -- --steps "$STEPS" \
            --threads "$b_thr" "$@" >"$b_log" 2>&1; then
        tail -20 "$b_log" >&2
        fail "$b_name (round $b_round) failed; log: $b_log"
    fi
    b_ms=$(median_ms "$b_log") || fail "$b_name (round $b_round): no step lines in $b_log"
    echo "$b_name $b_round $b_ms" >>"$RES"
}

# bench_rounds: REPEAT interleaved rounds R = 1, 2, ...: each runs the caller's
# run_anchors R, then run_pipegen NAME X THREADS R for every line of CONFIGS
# ("NAME X THREADS"); stops the script when one fails
bench_rounds() {
    b_r=1
    while [ "$b_r" -le "$REPEAT" ]; do
        run_anchors "$b_r"
        echo "$CONFIGS" | while read -r b_cname b_x b_t; do
            run_pipegen "$b_cname" "$b_x" "$b_t" "$b_r" || exit 1
        done || exit 1
        b_r=$((b_r + 1))
    done
}

# bench_load_before [WHAT]: the load average before the rounds, and a warning
# (WHAT, e.g. "multi-threaded configs suffer most, ", is put in it) above 0.5;
# bench_load_after: the load average after them
bench_load_before() {
    b_load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)
    echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
    awk -v l="$b_load" 'BEGIN { exit !(l + 0 > 0.5) }' &&
        echo "# warning: load average $b_load before the run: other work shares these cores; ${1:-}numbers are noisy"
    return 0
}
bench_load_after() {
    echo "# load after:  $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
}

# bench_stat N...: "median (min..max)" of the numbers, to 2 decimals
bench_stat() {
    printf '%s\n' "$@" | sort -g | awk '{ v[n++] = $1 } END {
        m = n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2
        printf "%.2f (%.2f..%.2f)", m, v[0], v[n - 1] }'
}

# bench_gpt_char_1stage DIR: gpt_char on 1 stage (the example without its
# splits, its tie, which one stage does not need, or recompute), generated in
# DIR/gen and its stage built in DIR/bin; stops the script when it fails
bench_gpt_char_1stage() {
    mkdir -p "$1/bin" &&
        sed -e '/^split$/d' -e '/^tie wte/d' -e 's/checkpoint = [a-z_]*/checkpoint = never/' \
            "$TOP/examples/gpt_char.pipe" >"$1/gpt_char.pipe" &&
        "$TOP/build/pipegen" gen "$1/gpt_char.pipe" -o "$1/gen" >/dev/null &&
        bench_cc_stages "$1/gen" "$1/bin" || fail "building gpt_char on 1 stage failed"
}

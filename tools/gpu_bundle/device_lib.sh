# tools/gpu_bundle/device_lib.sh — the phases of device_check.sh and
# device_rerun.sh (POSIX sh, sourced; docs/gpu.md "The GPU check"). Each phase
# runs under its own `timeout`, inside a budget for the whole command
# (DEVICE_BUDGET_S, 360 s), and writes its logs under OUT as it goes:
#
#   OUT/summary.txt   a line when the check starts and one per phase as it ends
#   OUT/facts.txt     the GPU, driver, compute mode, toolkit, libraries, rebuild
#   OUT/ops.tap       the op tests (run_gpu_tests.sh section 0)
#   OUT/train.tap     the training matrix (the other sections)
#   OUT/bench.json    GPT-2 small's speed against PyTorch eager, MFU
#   OUT/memcheck.log  compute-sanitizer's memcheck of the op tests
#   OUT/results.json  the phases' statuses and counts, rewritten after each
#   OUT/logs.tgz      OUT/logs/ packed after each phase and every 20 s while
#                     one runs (a kill at a limit leaves it at most 20 s old),
#                     the programs linked on the host left out;
#                     OUT/logs/ itself is removed when the command ends
#                     normally (DEVICE_KEEP_LOGS=1 keeps it)
#
# and nothing else: the device tool brings back 8 files from OUT, so the
# working files (the probe, the library links, a rebuild, the memcheck
# program) live in WORK, a temporary folder outside OUT removed at the end.
# The caller sets B (the bundle, or with PG_GPU_FAKE=emu the checkout) and
# OUT. PG_GPU_FAKE=emu runs everything against the emulated CUDA runtime
# (tests/gpu/emu; tests/device_scripts.t): no GPU, no driver, build/emu.

DEVICE_BUDGET_S=${DEVICE_BUDGET_S:-360}
DEVICE_STEPS=${DEVICE_STEPS:-20} # the bundle's CPU references are of 20 steps (tools/gpu_bundle.sh)
DV_T0=$(date +%s)
DV_RC=0
DV_PHASES=""
DV_PACKER=""
WORK=""
# the bench's rows, in the order they run (bench/gpu/run.sh): torch.compile,
# the slowest to start, last and only when time is left
DV_BENCH_ROWS_ALL="peak p1 p1n p4 p4t conv convn eager compile"

# dv_left: seconds left of the budget, less DEVICE_RESERVE_S (20) for the end
# (the last results and packing)
dv_left() { echo $((DV_T0 + DEVICE_BUDGET_S - ${DEVICE_RESERVE_S:-20} - $(date +%s))); }

# dv_limit CAP: CAP seconds, or what is left of the budget when less (0: none)
dv_limit() {
    dl_l=$(dv_left)
    [ "$dl_l" -lt "$1" ] && echo $((dl_l > 0 ? dl_l : 0)) || echo "$1"
}

# dv_run LIMIT OUT ERR CMD...: CMD (stdout to OUT, stderr to ERR) in its own
# session, every process of which is stopped at LIMIT seconds (TERM, then
# KILL 3 s later): a phase past its limit leaves nothing running. The status
# is CMD's, or 124 at the limit.
dv_run() {
    dr_lim=$1 dr_out=$2 dr_err=$3
    shift 3
    if ! command -v setsid >/dev/null 2>&1; then
        timeout -k 5 "$dr_lim" "$@" >"$dr_out" 2>"$dr_err"
        return
    fi
    setsid "$@" >"$dr_out" 2>"$dr_err" &
    dr_pid=$!
    dr_end=$(($(date +%s) + dr_lim))
    while kill -0 "$dr_pid" 2>/dev/null; do
        if [ "$(date +%s)" -ge $dr_end ]; then
            kill -TERM -"$dr_pid" 2>/dev/null
            sleep 3
            kill -KILL -"$dr_pid" 2>/dev/null
            wait "$dr_pid" 2>/dev/null
            return 124
        fi
        sleep 1
    done
    wait "$dr_pid"
}

# dv_say TEXT: a line in OUT/summary.txt (and on stdout)
dv_say() {
    printf '%s %4ds  %s\n' "$(date +%H:%M:%S)" $(($(date +%s) - DV_T0)) "$*" | tee -a "$OUT/summary.txt"
}

# dv_pack: OUT/logs/ into OUT/logs.tgz, replaced atomically; the programs
# linked there (the bench's stages, gemm_peak: megabytes each, made again from
# the bundle in seconds) left out, so that the file stays small
dv_pack() {
    [ -d "$OUT/logs" ] || return 0
    (cd "$OUT" && find logs -type f ! -perm -100 | tar -cf - -T - 2>/dev/null) | gzip -1 >"$OUT/.logs.tgz.tmp" &&
        mv "$OUT/.logs.tgz.tmp" "$OUT/logs.tgz"
}

# dv_packer_start / dv_packer_stop: dv_pack every 20 s in the background
dv_packer_start() {
    (while sleep 20; do dv_pack; done) &
    DV_PACKER=$!
}
dv_packer_stop() {
    [ -n "$DV_PACKER" ] && kill "$DV_PACKER" 2>/dev/null && wait "$DV_PACKER" 2>/dev/null
    DV_PACKER=""
}

# dv_tap_counts FILE: "P passed, F failed, S skipped" of a TAP file
dv_tap_counts() {
    awk '/^ok .*# SKIP/ { s++; next } /^ok / { p++ } /^not ok/ { f++ }
         END { printf "%d passed, %d failed, %d skipped", p, f, s }' "$1" 2>/dev/null
}

# dv_results STATUS: OUT/results.json from the phases so far
dv_results() {
    {
        echo "{"
        printf '  "status": %s, "seconds": %d, "budget_s": %d,\n' "$(json_str "$1")" $(($(date +%s) - DV_T0)) "$DEVICE_BUDGET_S"
        printf '  "emulated": %s,\n' "$([ "${PG_GPU_FAKE:-}" = emu ] && echo true || echo false)"
        printf '  "gpu": %s, "driver_cuda": %s, "compute_mode": %s,\n' "$(json_str "${GPU_LINES:-}")" \
            "$(json_str "${DRIVER_CUDA:-}")" "$(json_str "${COMPUTE_MODE:-}")"
        printf '  "phases": [%s],\n' "${DV_PHASES#, }"
        printf '  "ops": %s, "train": %s,\n' "$(json_str "$(dv_tap_counts "$OUT/ops.tap")")" \
            "$(json_str "$(dv_tap_counts "$OUT/train.tap")")"
        printf '  "not_ok": [%s],\n' "$(cat "$OUT/ops.tap" "$OUT/train.tap" "$OUT/rerun.tap" 2>/dev/null | grep '^not ok' | cut -c1-160 |
            while read -r l; do printf '%s, ' "$(json_str "$l")"; done | sed 's/, $//')"
        printf '  "bench": %s\n' "$(if [ -s "$OUT/bench.json" ]; then sed '1!s/^/  /' "$OUT/bench.json"; else echo null; fi)"
        echo "}"
    } >"$OUT/.results.json.tmp" && mv "$OUT/.results.json.tmp" "$OUT/results.json"
}

# dv_phase NAME STATUS SECONDS WHAT: record a phase's end
dv_phase() {
    DV_PHASES="$DV_PHASES, {\"phase\": $(json_str "$1"), \"status\": $(json_str "$2"), \"seconds\": $3}"
    dv_say "$1: $2 ($3 s) $4"
    case $2 in pass | skipped) ;; *) DV_RC=1 ;; esac
    dv_pack
    dv_results running
}

# dv_start: the knobs checked (a bad one: exit 2, before anything runs), OUT
# made (emptied of a previous check's files), WORK made, the packer going
dv_start() {
    if [ -n "${BENCH_ROWS:-}" ]; then
        echo "device check: BENCH_ROWS is bench/gpu/run.sh's; the check's rows are DEVICE_BENCH_ROWS (of $DV_BENCH_ROWS_ALL)" >&2
        exit 2
    fi
    for r in ${DEVICE_BENCH_ROWS:-}; do
        case " $DV_BENCH_ROWS_ALL " in *" $r "*) ;;
        *) echo "device check: DEVICE_BENCH_ROWS: no row '$r' (the rows: $DV_BENCH_ROWS_ALL)" >&2; exit 2 ;; esac
    done
    mkdir -p "$OUT" || { echo "device check: cannot make $OUT" >&2; exit 1; }
    OUT=$(cd "$OUT" && pwd)
    rm -rf "$OUT/logs" "$OUT/summary.txt" "$OUT/facts.txt" "$OUT/ops.tap" "$OUT/train.tap" "$OUT/rerun.tap" "$OUT/bench.json" \
        "$OUT/memcheck.log" "$OUT/results.json" "$OUT/logs.tgz" "$OUT/.logs.tgz.tmp" "$OUT/.results.json.tmp"
    mkdir -p "$OUT/logs" || exit 1
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/pg-device.XXXXXX") || { echo "device check: cannot make a temporary folder" >&2; exit 1; }
    trap 'dv_packer_stop; dv_pack; dv_cleanup' EXIT
    trap 'exit 130' INT TERM
}

# dv_cleanup: WORK removed
dv_cleanup() {
    [ -n "$WORK" ] && rm -rf "$WORK"
    WORK=""
}

# dv_fill: each of the phases' files (DV_FILES, set by the caller) that no
# phase wrote, written as "not run", so that OUT always holds the same files
dv_fill() {
    for df_f in $DV_FILES; do
        [ -e "$OUT/$df_f" ] && continue
        case $df_f in
        *.tap) echo "1..0 # SKIP not run (summary.txt says why)" ;;
        *.json) echo '{"complete": false, "not_run": "summary.txt says why"}' ;;
        *) echo "not run (summary.txt says why)" ;;
        esac >"$OUT/$df_f"
    done
}

# dv_finish: the phases' files not written filled in, the last results, the
# last pack, OUT/logs and WORK removed; exits DV_RC
dv_finish() {
    dv_packer_stop
    dv_fill
    dv_results "$([ $DV_RC = 0 ] && echo pass || echo fail)"
    dv_pack
    [ "${DEVICE_KEEP_LOGS:-0}" = 1 ] || rm -rf "$OUT/logs"
    dv_cleanup
    dv_say "done: $([ $DV_RC = 0 ] && echo 'everything passed' || echo 'something failed: summary.txt, results.json, logs.tgz') ($(($(date +%s) - DV_T0)) s of $DEVICE_BUDGET_S)"
    trap - EXIT
    exit $DV_RC
}

# ---- phase: facts ------------------------------------------------------------
# The GPU first (no usable one: exit 3 at once, with the reason), then the
# driver and compute mode (nvidia-smi), the toolkit and libraries, and the
# rebuild when this GPU or driver needs one. Sets DV_SECTIONS_OK: the
# training sections this GPU can run (none that start several processes when
# the compute mode is exclusive).
dv_facts() {
    p_t=$(date +%s)
    DV_SECTIONS_OK="1 1b 2 3 4 5 5b 5c 6 6b 7"
    DV_REF=$B/tests/gpu/ref
    if [ "${PG_GPU_FAKE:-}" = emu ]; then
        GPU_LINES="the emulated CUDA runtime (tests/gpu/emu): no GPU" DRIVER_CUDA="" COMPUTE_MODE=DEFAULT
        DV_DEVICE="emulated CUDA runtime (no GPU)"
        { echo "gpu: $GPU_LINES"; echo "libraries: $B/build/emu/libpgrt_cuemu.a, ${LDLIBS_EMU:--lstdc++ -lblas -lpthread -lm}"; } >"$OUT/facts.txt"
        [ -f "$B/build/emu/libpgrt_cuemu.a" ] && [ -x "$B/build/emu/test_ops_gpu" ] ||
            { dv_phase facts fail $(($(date +%s) - p_t)) "build/emu is missing: make emu"; dv_finish; }
        # the CPU references of this many steps, once for every phase (the bundle carries its own),
        # or once for several checks (DEVICE_REF: tests/device_scripts.t)
        DV_REF=${DEVICE_REF:-$OUT/logs/ref}
        [ -s "$DV_REF/cpu1.loss" ] ||
            STEPS=$DEVICE_STEPS timeout -k 5 "$(dv_limit 120)" "$B/tests/gpu/cpu_refs.sh" "$DV_REF" >"$OUT/logs/cpu_refs.log" 2>&1 ||
            { dv_phase facts fail $(($(date +%s) - p_t)) "the CPU references (logs/cpu_refs.log)"; dv_finish; }
        dv_phase facts pass $(($(date +%s) - p_t)) "(emulated)"
        return
    fi
    bundle_probe
    { cat "$WORK/.probe.log" 2>/dev/null; printf '%s\n' "$GPU_LINES"; } >"$OUT/logs/probe.log" # its compiler's words, then its own
    if [ "$PROBE_RC" != 0 ]; then
        echo "gpu: none ($GPU_CAUSE)" >"$OUT/facts.txt"
        dv_phase facts "no GPU" $(($(date +%s) - p_t)) "$GPU_CAUSE"
        dv_packer_stop
        dv_results "no GPU"
        [ "${DEVICE_KEEP_LOGS:-0}" = 1 ] || rm -rf "$OUT/logs"
        dv_cleanup
        echo "device check: no GPU found ($GPU_CAUSE)" >&2
        trap - EXIT
        exit 3
    fi
    {
        printf '%s\n' "$GPU_LINES"
        echo "bundle: commit $BUILT_COMMIT, CUDA $BUILT_CUDA_MAJOR, $BUILT_ARCH"
    } >"$OUT/facts.txt"
    if command -v nvidia-smi >/dev/null 2>&1; then
        timeout -k 2 10 nvidia-smi >"$OUT/logs/nvidia-smi.txt" 2>&1
        timeout -k 2 10 nvidia-smi -q >"$OUT/logs/nvidia-smi-q.txt" 2>&1
        grep -m1 'Driver Version' "$OUT/logs/nvidia-smi-q.txt" >>"$OUT/facts.txt"
        grep -m1 'CUDA Version' "$OUT/logs/nvidia-smi-q.txt" >>"$OUT/facts.txt"
        grep -m1 'Compute Mode' "$OUT/logs/nvidia-smi-q.txt" >>"$OUT/facts.txt"
    else
        echo "nvidia-smi: not found" >>"$OUT/facts.txt"
    fi
    dv_gpu_name
    echo "device: $DV_DEVICE" >>"$OUT/facts.txt"
    case $COMPUTE_MODE in EXCLUSIVE_PROCESS | EXCLUSIVE_THREAD)
        DV_SECTIONS_OK="3 4"
        echo "compute mode $COMPUTE_MODE: one process at a time; the sections that start several processes (1 1b 2 5 5b 5c 6 6b 7) are left out (nvidia-smi -c DEFAULT, as root, allows them)" >>"$OUT/facts.txt" ;;
    esac
    bundle_env
    printf '%s\n' "$GPU_ENV_REPORT" >>"$OUT/facts.txt"
    [ "$REBUILD" = 1 ] && echo "rebuild: $REBUILD_WHY" >>"$OUT/facts.txt"
    if [ -n "$MISSING" ]; then
        echo "missing:$MISSING" >>"$OUT/facts.txt"
        dv_phase facts fail $(($(date +%s) - p_t)) "not found:$MISSING"
        dv_finish
    fi
    bundle_rebuild >"$OUT/logs/rebuild.log" 2>&1
    dv_rb=$?
    [ -f "$WORK/.rebuild/nvcc.log" ] && cp "$WORK/.rebuild/nvcc.log" "$OUT/logs/rebuild-nvcc.log"
    if [ $dv_rb != 0 ]; then
        dv_phase facts fail $(($(date +%s) - p_t)) "rebuilding the CUDA files failed (logs/rebuild.log, logs/rebuild-nvcc.log)"
        dv_finish
    fi
    dv_phase facts pass $(($(date +%s) - p_t)) "$(head -n 1 "$OUT/facts.txt")"
}

# dv_gpu_name: DV_DEVICE, GPU 0's name (for bench.json): the probe's line
# ("gpu 0: NAME, sm_90, ..."), else nvidia-smi -L's ("GPU 0: NAME (UUID:
# ...)"), else nvidia-smi -q's Product Name
dv_gpu_name() {
    DV_DEVICE=$(printf '%s\n' "$GPU_LINES" | sed -n 's/^gpu 0: \([^,]*\),.*$/\1/p; s/^GPU 0: \(.*\) (UUID.*$/\1/p' | head -n 1)
    [ -n "$DV_DEVICE" ] ||
        DV_DEVICE=$(sed -n 's/^ *Product Name *: *//p' "$OUT/logs/nvidia-smi-q.txt" 2>/dev/null | head -n 1)
}

# dv_tests SECTIONS CAP TAP [VAR=value...]: tests/gpu/run_gpu_tests.sh on those
# sections, under CAP seconds (or the budget left), TAP in OUT/TAP, logs in
# OUT/logs/NAME (NAME: TAP without .tap)
dv_tests() {
    dt_sec=$1 dt_cap=$2 dt_tap=$3
    shift 3
    p_t=$(date +%s)
    dt_lim=$(dv_limit "$dt_cap")
    dt_name=${dt_tap%.tap}
    if [ "$dt_lim" -lt 15 ]; then
        dv_phase "$dt_name" "not run: out of time" 0 "(sections $dt_sec)"
        return
    fi
    mkdir -p "$OUT/logs/$dt_name"
    dv_run "$dt_lim" "$OUT/$dt_tap" "$OUT/logs/$dt_name/stderr.log" env "$@" GPU_SECTIONS="$dt_sec" \
        STEPS="$DEVICE_STEPS" KILL_AT="${DEVICE_KILL_AT:-20}" TEST_DEADLINE=$(($(date +%s) + dt_lim - 5)) \
        LOGDIR="$OUT/logs/$dt_name" GPU_REF="$DV_REF" "$B/tests/gpu/run_gpu_tests.sh"
    dt_rc=$?
    cp "$OUT/$dt_tap" "$OUT/logs/$dt_name/" 2>/dev/null
    dt_st=pass
    [ $dt_rc = 0 ] || dt_st=fail
    [ $dt_rc = 124 ] || [ $dt_rc = 137 ] && dt_st="fail (over its $dt_lim s)"
    dv_phase "$dt_name" "$dt_st" $(($(date +%s) - p_t)) "sections $dt_sec: $(dv_tap_counts "$OUT/$dt_tap")"
}

# dv_bench RESERVE: GPT-2 small's speed (bench/gpu/run.sh), OUT/bench.json,
# under the budget left less RESERVE seconds (what the phases after it need),
# or DEVICE_BENCH_S when less. The rows DEVICE_BENCH_ROWS (default all: the
# bf16 GEMM peak, pipegen on 1 stage with and without graphs, on 4 stages,
# traced against the prediction, the convolutional network with and without
# graphs, PyTorch eager, then torch.compile only when DEVICE_COMPILE_S, 90,
# are left: it never takes the other rows' time); the device's name from the
# facts
dv_bench() {
    p_t=$(date +%s)
    db_lim=$(($(dv_left) - $1))
    [ -n "${DEVICE_BENCH_S:-}" ] && [ "$DEVICE_BENCH_S" -lt $db_lim ] && db_lim=$DEVICE_BENCH_S
    if [ "$db_lim" -lt 20 ]; then
        dv_phase bench "not run: out of time" 0 ""
        return
    fi
    db_rows=${DEVICE_BENCH_ROWS:-$DV_BENCH_ROWS_ALL}
    db_env=""
    [ "${PG_GPU_FAKE:-}" = emu ] && db_env="PG_GPU_FAKE=emu BENCH_MODEL=$B/tests/models/gpt_tiny.pipe" # emulated: small
    mkdir -p "$OUT/logs/bench"
    # shellcheck disable=SC2086
    dv_run "$db_lim" "$OUT/logs/bench/bench.log" "$OUT/logs/bench/bench.err" env $db_env BENCH_ROWS="$db_rows" \
        BENCH_STEPS="${DEVICE_BENCH_STEPS:-12}" BENCH_WARMUP="${DEVICE_BENCH_WARMUP:-4}" BENCH_DIR="$OUT/logs/bench" \
        BENCH_COMPILE_MIN_S="${DEVICE_COMPILE_S:-90}" BENCH_DEVICE="${DV_DEVICE:-}" \
        BENCH_DEADLINE=$(($(date +%s) + db_lim - 5)) "$B/bench/gpu/run.sh"
    db_rc=$?
    cp "$OUT/logs/bench/bench.json" "$OUT/bench.json" 2>/dev/null
    db_st=pass
    [ $db_rc = 0 ] || db_st=fail
    [ $db_rc = 124 ] && db_st="fail (over its $db_lim s)"
    dv_phase bench "$db_st" $(($(date +%s) - p_t)) "rows $db_rows (limit $db_lim s): $(grep -m1 'pipegen-1stage / torch-eager' "$OUT/logs/bench/bench.log" | tr -s ' ')"
}

# dv_memcheck: compute-sanitizer --tool memcheck on the op tests, group by
# group (DEVICE_MEMCHECK_GROUPS, default every one), while the budget lasts
# (and DEVICE_MEMCHECK_MIN_S are left to start). API errors are reported
# (--report-api-errors explicit: a failing CUDA call is evidence), so the op
# tests run with PG_OPS_MEMCHECK=1, which skips the one check whose CUDA call
# fails on purpose (an impossible arena; checked in ops.tap) with a TAP SKIP
# saying so; memcheck.log's first line says this. DEVICE_SANITIZER: the
# compute-sanitizer to use (also with PG_GPU_FAKE=emu, where a test's stand-in
# runs the emulated op tests)
dv_memcheck() {
    p_t=$(date +%s)
    dm_cs=${DEVICE_SANITIZER:-}
    if [ -z "$dm_cs" ] && [ "${PG_GPU_FAKE:-}" != emu ]; then
        dm_cs=$(command -v compute-sanitizer 2>/dev/null)
        [ -n "$dm_cs" ] || for dm_c in ${CUDA_HOME:+$CUDA_HOME/bin/compute-sanitizer} /usr/local/cuda/bin/compute-sanitizer; do
            [ -x "$dm_c" ] && dm_cs=$dm_c && break
        done
    fi
    if [ -z "$dm_cs" ]; then
        echo "compute-sanitizer: not run ($([ "${PG_GPU_FAKE:-}" = emu ] && echo 'emulated' || echo 'not found'))" >"$OUT/memcheck.log"
        dv_phase memcheck skipped 0 "compute-sanitizer $([ "${PG_GPU_FAKE:-}" = emu ] && echo 'needs a GPU' || echo 'not found')"
        return
    fi
    if [ "$(dv_left)" -lt "${DEVICE_MEMCHECK_MIN_S:-30}" ]; then
        echo "compute-sanitizer: not run (out of time)" >"$OUT/memcheck.log"
        dv_phase memcheck skipped 0 "out of time"
        return
    fi
    mkdir -p "$OUT/logs/memcheck"
    if [ "${PG_GPU_FAKE:-}" = emu ]; then
        dm_ops=$B/build/emu/test_ops_gpu
    else
        dm_ops=$WORK/test_ops_gpu # a program: not in OUT (logs.tgz leaves programs out anyway)
        # shellcheck disable=SC2086
        "${CC:-cc}" -o "$dm_ops" "$TEST_OPS_OBJ" "$CUDALIB" $LDLIBS_CUDA >"$OUT/logs/memcheck/link.log" 2>&1
    fi
    {
        echo "$dm_cs --tool memcheck --report-api-errors explicit: every failing CUDA API call counts as an error;"
        echo "the op tests run with PG_OPS_MEMCHECK=1: the one check that fails a CUDA call on purpose (group setup,"
        echo "an impossible arena: cudaMalloc out of memory) is skipped here (its SKIP line in logs/memcheck/setup.log)"
        echo "and checked in ops.tap"
    } >"$OUT/memcheck.log"
    dm_st=pass dm_n=0
    for g in ${DEVICE_MEMCHECK_GROUPS:-$("$dm_ops" --list 2>/dev/null)}; do
        dm_lim=$(($(dv_left) - 5))
        [ $dm_lim -ge 10 ] || { echo "group $g: not run (out of time)" >>"$OUT/memcheck.log"; continue; }
        dv_run "$dm_lim" "$OUT/logs/memcheck/$g.log" "$OUT/logs/memcheck/$g.err" env PG_OPS_MEMCHECK=1 "$dm_cs" \
            --tool memcheck --report-api-errors explicit --error-exitcode 9 "$dm_ops" "$g"
        dm_rc=$?
        dm_n=$((dm_n + 1))
        echo "group $g: exit $dm_rc; $(grep -m1 'ERROR SUMMARY' "$OUT/logs/memcheck/$g.log"); $(grep -c '^ok .*# SKIP' "$OUT/logs/memcheck/$g.log") skipped" >>"$OUT/memcheck.log"
        [ $dm_rc = 0 ] || dm_st=fail
    done
    dv_phase memcheck "$dm_st" $(($(date +%s) - p_t)) "$dm_n groups: $(grep -c 'ERROR SUMMARY: 0 errors' "$OUT/memcheck.log") without errors"
}

# dv_locate: B and the bundle's facts (BUILT_*), or with PG_GPU_FAKE=emu the
# checkout (the script in tools/gpu_bundle/); the environment as run.sh has it
dv_locate() {
    dl_here=$(cd "$(dirname "$1")" && pwd)
    if [ -f "$dl_here/BUNDLE" ]; then
        B=$dl_here
        . "$B/BUNDLE"
        export BUILT_CUDA_MAJOR
    elif [ "${PG_GPU_FAKE:-}" = emu ] && [ -f "$dl_here/../../tests/gpu/run_gpu_tests.sh" ]; then
        B=$(cd "$dl_here/../.." && pwd)
    else
        echo "device check: run it from the GPU bundle (make gpu-bundle; pipegen-gpu/$(basename "$1") OUT), or in a checkout with PG_GPU_FAKE=emu" >&2
        exit 2
    fi
    . "$B/tools/gpu_env.sh"
    . "$B/tools/gpu_bundle/prepare.sh"
    CC=${CC:-cc}
    export CC
}

# tests/gpu/lib_gpu.sh — the model variants and checks shared by the GPU test
# script (tests/gpu/run_gpu_tests.sh) and the CPU references it compares
# against (tests/gpu/cpu_refs.sh, run where the CPU runtime builds, e.g. by `make
# gpu-bundle`). POSIX sh, sourced after tests/lib.sh. The caller sets T (a work
# directory), PIPEGEN, PIPERUN, STEPS, CC, and for linking: CPULIB (the CPU
# runtime, empty: no CPU build) and CUDALIB with LDLIBS_CUDA (empty: no CUDA
# build). Runs' outputs are written where the caller says (run_gpu_tests.sh:
# its LOGDIR, as they happen).

CFLAGS_T=${CFLAGS_T:-"-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -O2 -Wall -Wextra"}
RUN_TIMEOUT=${RUN_TIMEOUT:-120} # seconds one training run may take before it is killed

# The train-block edits of the variants (sed expressions on tests/models/gpt_tiny.pipe)
COS='s/grad_clip = 1.0  seed = 5/grad_clip = 1.0  seed = 5  steps = 20  lr_schedule = cosine(warmup = 3, min = 1e-3)/'
BF16='s/grad_clip = 1.0  seed = 5/grad_clip = 1.0  seed = 5  precision = bf16/'
DROP='s/fc = linear(d -> 4\*d)  gelu/fc = linear(d -> 4*d)  gelu  dropout(p = 0.1)/'
# The Llama layers' model (rmsnorm, grouped-query attention with rotary
# positions, swiglu, cross_entropy ignoring -100): 3 stages, its bare `split`
# lines deleted for 1 (VARIANT_DEL)
LLAMA_MODEL=$TOP/tests/models/oracle_llama.pipe
LLAMA_1='/^split$/d'
LLAMA_BF16='s/^  seed = 5$/  seed = 5  precision = bf16/'

# variant NAME STAGES [sed-arg...]: gpt_tiny (GPU_MODEL) cut to STAGES stages
# (1, 2 or 4; VARIANT_DEL, when set, is the sed expression that cuts it instead,
# to any count)
# with the sed arguments applied, generated into $T/NAME/gen and linked into
# $T/NAME/cpu (when CPULIB is set) and $T/NAME/cuda (when CUDALIB is set);
# $T/NAME/hash is its plan hash. 0 or 1 (the reason as TAP comments).
variant() {
    v_d=$T/$1 v_stages=$2
    shift 2
    case $v_stages in 1) v_del='/# S[123]$/d' ;; 2) v_del='/# S[13]$/d' ;; 4) v_del='' ;;
    *) [ -n "${VARIANT_DEL+set}" ] || { echo "# variant: $v_stages stages is not 1, 2 or 4"; return 1; } ;; esac
    [ -n "${VARIANT_DEL+set}" ] && v_del=$VARIANT_DEL # another model's split tags
    mkdir -p "$v_d" || return 1
    sed -e "$v_del" "$@" "$GPU_MODEL" >"$v_d/gpt_tiny.pipe" || return 1
    "$PIPEGEN" gen "$v_d/gpt_tiny.pipe" -o "$v_d/gen" >"$v_d/gen.log" 2>&1 ||
        { sed 's/^/# /' "$v_d/gen.log" | head -20; return 1; }
    sed -n 's/^#define [A-Z0-9_]*_PLAN_HASH UINT64_C(0x\([0-9a-f]*\))$/\1/p' "$v_d/gen/"*.h >"$v_d/hash"
    v_n=$(ls "$v_d"/gen/stage*.c | wc -l)
    [ "$v_n" = "$v_stages" ] || { echo "# variant $1: $v_n stages generated, expected $v_stages"; return 1; }
    for v_f in "$v_d"/gen/stage*.c; do
        v_k=$(basename "$v_f" .c)
        if [ -n "${CPULIB:-}" ]; then
            mkdir -p "$v_d/cpu"
            # shellcheck disable=SC2086
            $CC $CFLAGS_T -I"$TOP/runtime/core" -I"$v_d/gen" -o "$v_d/cpu/$v_k" "$v_f" "$CPULIB" -lpthread -lm \
                >"$v_d/cc.log" 2>&1 || { sed 's/^/# /' "$v_d/cc.log" | head -20; return 1; }
        fi
        if [ -n "${CUDALIB:-}" ]; then
            mkdir -p "$v_d/cuda"
            # shellcheck disable=SC2086
            $CC $CFLAGS_T -I"$TOP/runtime/core" -I"$v_d/gen" -o "$v_d/cuda/$v_k" "$v_f" "$CUDALIB" $LDLIBS_CUDA \
                >"$v_d/cc.log" 2>&1 || { sed 's/^/# /' "$v_d/cc.log" | head -20; return 1; }
        fi
    done
}

# time_left LIMIT: LIMIT seconds, or fewer when TEST_DEADLINE (seconds since
# the epoch) comes sooner; 0 when it has passed
time_left() {
    tl_now=$(date +%s)
    if [ -n "${TEST_DEADLINE:-}" ] && [ $((TEST_DEADLINE - tl_now)) -lt "$1" ]; then
        tl_l=$((TEST_DEADLINE - tl_now))
        [ $tl_l -gt 0 ] && echo $tl_l || echo 0
    else
        echo "$1"
    fi
}
# the run's time limit, when the system has `timeout`
TIMEOUT_CMD=timeout
command -v timeout >/dev/null 2>&1 || TIMEOUT_CMD=no_timeout
no_timeout() { shift; "$@"; }

# limited LIMIT CMD...: CMD under a limit of LIMIT seconds, or of the time
# left before TEST_DEADLINE when that is less (killed at the limit, status
# 124 or 137); status 124 at once, with "not run: out of time", when under 5
# seconds are left. Never without a limit: `timeout 0` would mean none.
limited() {
    li_s=$(time_left "$1")
    shift
    [ "$li_s" -ge 5 ] || { echo "# not run: out of time (TEST_DEADLINE): $1"; return 124; }
    $TIMEOUT_CMD -k 5 "$li_s" "$@"
}

# train BINDIR OUT [stage options]: STEPS steps with every loss printed and the
# weights saved; OUT.loss gets "step loss" lines then the "final loss" line.
# With TRAIN_DP=D set, D data-parallel replicas (piperun --dp D; replica 0
# prints the losses and saves). 0 or 1 (the output's tail as TAP comments).
train() {
    t_dir=$1 t_out=$2
    shift 2
    : >"$t_out.loss"
    [ -d "$t_dir" ] || { echo "# $t_dir: not built"; return 1; }
    limited "${RUN_TIMEOUT:-120}" "$PIPERUN" ${TRAIN_DP:+--dp "$TRAIN_DP"} "$t_dir" -- --steps "$STEPS" --log-every 1 \
        --threads 1 --timeout 20 --save "$t_out.safetensors" "$@" >"$t_out.out" 2>&1 ||
        { echo "# $t_dir failed (status $?; 124: over its time limit):"; tail -20 "$t_out.out" | sed 's/^/# /'; return 1; }
    # "[stage k] step 3/20  loss 3.412345678  ..." -> "3 3.412345678", then the final loss
    sed -n 's/^.*step \([0-9]*\)\/[0-9]*  *loss \([-0-9.eEinfa+]*\).*$/\1 \2/p' "$t_out.out" >"$t_out.loss"
    grep 'final loss' "$t_out.out" | sed 's/^\[stage [0-9]*\( replica 0\)*\] //' >>"$t_out.loss"
}

# same A B WHAT: runs A and B (paths without .loss) have the same losses and
# saved weights bit for bit; both must have run
same() {
    [ -s "$1.loss" ] && [ -s "$2.loss" ] && [ -s "$1.safetensors" ] && cmp -s "$1.loss" "$2.loss" &&
        cmp -s "$1.safetensors" "$2.safetensors"
    s_st=$?
    ok $s_st "$3: losses and saved weights bitwise equal ($(basename "$1") = $(basename "$2"))"
    [ $s_st = 0 ] || diff "$1.loss" "$2.loss" 2>&1 | head -6 | sed 's/^/# /'
}

# close REF RUN TOL WHAT [VARIANT]: every step's loss of RUN within TOL
# (relative, floor 1) of REF's, the same steps in both, at least one; with
# VARIANT, REF must be the CPU reference of that variant's model and plan
# (REF.hash = $T/VARIANT/hash: a reference of another model fails the check)
close() {
    if [ -n "${5:-}" ] && ! { [ -s "$1.hash" ] && cmp -s "$1.hash" "$T/$5/hash"; }; then
        ok 1 "$4: losses within $3 of the reference at every step"
        echo "# the CPU reference $1 is missing or is not for this model and plan ($(cat "$1.hash" 2>/dev/null || echo none) vs $(cat "$T/$5/hash" 2>/dev/null || echo none))"
        return
    fi
    c_r=$(paste -d ' ' "$1.loss" "$2.loss" 2>/dev/null | awk -v tol="$3" '
        $1 == "final" || $3 == "final" { next }
        { d = $2 - $4; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; if (m < 1) m = 1;
          if ($1 != $3 || $4 == "" || d > tol * m || $4 != $4 + 0) { printf "step %s: ref %s run %s\n", $1, $2, $4; bad++ } n++ }
        END { if (n == 0) print "no losses"; else if (!bad) print "ok" }')
    is "$c_r" ok "$4: losses within $3 of the reference at every step"
}

# falls RUN WHAT: the last step's loss is below the first's (both numbers)
falls() {
    f_a=$(head -n 1 "$1.loss" 2>/dev/null | cut -d' ' -f2)
    f_b=$(sed -n "${STEPS}p" "$1.loss" 2>/dev/null | cut -d' ' -f2)
    awk -v a="$f_a" -v b="$f_b" 'BEGIN { exit !(a != "" && b != "" && a == a + 0 && b == b + 0 && a + 0 > b + 0) }'
    ok $? "$2: the loss falls (${f_a:-none} -> ${f_b:-none})"
}

# paths_used RUN: the "kernel paths taken" report of RUN.out, one line per
# stage: "colsum N, pad N, shadow N, flash N, lt N; bf16 GEMMs N"
paths_used() {
    sed -n 's/^.*CUDA kernel paths taken ([^)]*): //p' "$1.out" 2>/dev/null
}

# path_count RUN NAME: NAME's count ("bf16 GEMMs" too) summed over RUN's stages
path_count() {
    paths_used "$1" | tr ',;' '\n\n' | sed -n "s/^ *$2 \([0-9]*\)$/\1/p" | awk '{ s += $1 } END { print s + 0 }'
}

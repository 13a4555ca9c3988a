#!/bin/sh
# device_rerun.sh OUT SECTION [VAR=value...] — one targeted rerun on a GPU host
# after device_check.sh (docs/gpu.md "The GPU check"): the facts and the op
# tests again, then one section of tests/gpu/run_gpu_tests.sh (0 1 1b 2 3 4 5
# 5b 5c 6 6b 7), or `bench` or `memcheck`, with the environment given (a fast path
# switched off to bisect: PIPE_CUDA_KERNELS=colsum,pad,shadow,lt leaves the
# fused attention out; PIPE_CUDA_TF32=1; DEVICE_BENCH_ROWS="p4 p4t" for some
# of the bench's rows; DEVICE_MEMCHECK_GROUPS=flash; ...). The same budget,
# limits and knobs as device_check.sh; OUT holds summary.txt, facts.txt,
# ops.tap, results.json, logs.tgz and the section's own file (rerun.tap for a
# training section, bench.json for bench, memcheck.log for memcheck; none for
# 0), nothing else. Exit 0, 1, 2 (bad command line) or 3 (no usable GPU).
[ $# -ge 2 ] && [ -n "$1" ] || { echo "usage: $0 OUT SECTION [VAR=value...]" >&2; exit 2; }
OUT=$1 SECTION=$2
shift 2
case $SECTION in 0 | 1 | 1b | 2 | 3 | 4 | 5 | 5b | 5c | 6 | 6b | 7 | bench | memcheck) ;;
*) echo "$0: no section '$SECTION' (0 1 1b 2 3 4 5 5b 5c 6 6b 7 bench memcheck)" >&2; exit 2 ;; esac
for a in "$@"; do
    case $a in [A-Za-z_]*=*) export "${a?}" ;; *) echo "$0: '$a' is not VAR=value" >&2; exit 2 ;; esac
done
. "$(dirname "$0")/$( [ -f "$(dirname "$0")/device_lib.sh" ] && echo . || echo tools/gpu_bundle)/device_lib.sh"
dv_locate "$0"
case $SECTION in # the section's own file, beside summary.txt facts.txt ops.tap results.json logs.tgz
0) DV_FILES=ops.tap ;; bench) DV_FILES="ops.tap bench.json" ;; memcheck) DV_FILES="ops.tap memcheck.log" ;;
*) DV_FILES="ops.tap rerun.tap" ;;
esac
dv_start
dv_say "device rerun of $SECTION: $(hostname 2>/dev/null), budget $DEVICE_BUDGET_S s${*:+, with $*}${PG_GPU_FAKE:+, PG_GPU_FAKE=$PG_GPU_FAKE}"
dv_facts
dv_packer_start
dv_tests 0 "${DEVICE_OPS_S:-60}" ops.tap
case $SECTION in
bench) dv_bench 0 ;;
memcheck) dv_memcheck ;;
0) ;;
*) case " $DV_SECTIONS_OK " in
   *" $SECTION "*) dv_tests "$SECTION" "${DEVICE_TRAIN_S:-280}" rerun.tap ;;
   *) dv_say "section $SECTION left out (facts.txt says why)"; DV_RC=1 ;;
   esac ;;
esac
dv_finish

#!/bin/sh
# device_check.sh OUT — the one command to run on a GPU host (in the unpacked
# GPU bundle: pipegen-gpu/device_check.sh OUT; docs/gpu.md "The GPU check"). In
# order, each phase under its own time limit, all inside DEVICE_BUDGET_S (360
# s: the 6 minutes a GPU session gives it), every log under OUT as it goes:
#
#   facts     (20 s)  the GPU (none usable: exit 3 at once, with the reason),
#                     nvidia-smi, the driver's CUDA against the bundle's, the
#                     compute mode (exclusive: the multi-process sections are
#                     left out, saying why), the toolkit and libraries, and a
#                     rebuild when this GPU or driver needs one
#   ops       (60 s)  the op tests, a process per group (OUT/ops.tap)
#   train     (150 s) the training matrix of tests/gpu/run_gpu_tests.sh,
#                     DEVICE_STEPS (20, as the bundle's CPU references) steps a
#                     run (OUT/train.tap)
#   bench     (the budget left less DEVICE_MEMCHECK_S, 45 s) every row of
#                     bench/gpu/run.sh in order: the bf16 GEMM peak; GPT-2
#                     small on 1 stage, without graphs, on 4 stages, traced;
#                     the convolutional network with and without graphs;
#                     PyTorch eager; torch.compile last, only when
#                     DEVICE_COMPILE_S (90) are left (OUT/bench.json)
#   memcheck  (rest)  compute-sanitizer's memcheck of the op tests, group by
#                     group while time lasts, API errors reported, the one
#                     check that fails a CUDA call on purpose skipped
#                     (OUT/memcheck.log)
#
# Read the results in that order: summary.txt; facts.txt; ops.tap and the op
# logs (logs.tgz: logs/ops/ops-GROUP.log); train.tap (graphs, the multi-stage
# runs: logs/train/*.out, the killed stage: logs/train/kill*.log); bench.json;
# memcheck.log. results.json has it all in one file. OUT holds these 8 files
# and nothing else when the check ends (DEVICE_KEEP_LOGS=1: logs/ too); the
# working files live in a temporary folder, removed. A failing section:
# device_rerun.sh OUT SECTION. Exit 0 when every phase passed, 1 when one
# failed, 2 on a bad command line, 3 when there is no usable GPU.
# Knobs: DEVICE_BUDGET_S, DEVICE_OPS_S, DEVICE_TRAIN_S, DEVICE_BENCH_S (the
# phases' limits), DEVICE_MEMCHECK_S, DEVICE_STEPS, DEVICE_SECTIONS (the
# training sections, default all), DEVICE_BENCH_ROWS (of peak p1 p1n p4 p4t
# conv convn eager compile; default all), DEVICE_BENCH_STEPS,
# DEVICE_BENCH_WARMUP, DEVICE_COMPILE_S, DEVICE_MEMCHECK_GROUPS,
# DEVICE_SANITIZER, DEVICE_KEEP_LOGS=1, PG_GPU_FAKE=emu (in a checkout: everything against the
# emulated CUDA runtime, tests/device_scripts.t; DEVICE_REF there: a folder
# of CPU references of DEVICE_STEPS steps to use, made once when empty), and run.sh's (CC, CUDA_HOME,
# PYTHON, PG_REBUILD_CUDA, ...).
[ $# = 1 ] && [ -n "$1" ] || { echo "usage: $0 OUT" >&2; exit 2; }
OUT=$1
. "$(dirname "$0")/$( [ -f "$(dirname "$0")/device_lib.sh" ] && echo . || echo tools/gpu_bundle)/device_lib.sh"
dv_locate "$0"
DV_FILES="ops.tap train.tap bench.json memcheck.log" # and summary.txt facts.txt results.json logs.tgz
dv_start
dv_say "device check: $(hostname 2>/dev/null), budget $DEVICE_BUDGET_S s, bundle ${BUILT_COMMIT:-(checkout)}${PG_GPU_FAKE:+, PG_GPU_FAKE=$PG_GPU_FAKE}"
dv_facts
dv_packer_start
dv_tests 0 "${DEVICE_OPS_S:-60}" ops.tap
dv_secs=""
for s in ${DEVICE_SECTIONS:-1 1b 2 3 4 5 5b 5c 6 6b 7}; do
    case " $DV_SECTIONS_OK " in *" $s "*) dv_secs="$dv_secs $s" ;; *) dv_say "section $s left out (facts.txt says why)" ;; esac
done
dv_tests "${dv_secs# }" "${DEVICE_TRAIN_S:-150}" train.tap
dv_bench "${DEVICE_MEMCHECK_S:-45}"
dv_memcheck
dv_finish

#!/bin/sh
# tests/cuda_emu_train.t — tests/gpu/run_gpu_tests.sh, the script a GPU host
# runs, against the emulated CUDA runtime (PG_GPU_FAKE=emu; tests/gpu/emu/):
# runtime/cuda's stages train gpt_tiny on 1 and 4 processes sharing the
# emulated GPU (the CUDA IPC ring of cuda_net.cu over shared memory), and the
# Llama layers' oracle_llama on 1 and 3, with and without CUDA graphs (stream
# capture and replay under the emulator's capture rules), a cosine lr, bf16 with the
# fast kernel paths and without, dropout, 2 replicas (the host path), deferred
# batch norm, conv_small (cuDNN's convolutions through the emulated cuDNN,
# pooling, batchnorm2d, skips) on 1, 2 and 4 stages with and without graphs,
# and a stage killed mid-run — each check as on a GPU, bitwise
# where the GPU promises bits. STEPS is 7 (not 20): the graph steps start at
# the third, and 7 is the fewest in which the loss falls. Section 2 (gpipe, zb1,
# checkpoint always and never on 4 stages, each bitwise against 1 stage) runs
# too, since the reductions' empty blocks stopped costing their barriers (an
# emulated step costs a fifth of what it did). The NCCL sections skip (the emulator runs every
# process on one GPU). Emulated: the host logic, the kernels' logic, the IPC protocol and
# the capture rules, not a GPU's rounding or timing.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_emu.sh"
emu_need
OUT=$TOP/build/tests/cuda_emu_train
rm -rf "$OUT" && mkdir -p "$OUT" || exit 1
PG_GPU_FAKE=emu TOL_CONV=1e-5 GPU_SECTIONS="0 1 1b 2 3 4 5 5b 5c 6 6b 7" STEPS=7 KILL_AT=3 LOGDIR=$OUT/logs "$TOP/tests/gpu/run_gpu_tests.sh" >"$OUT/train.tap" 2>"$OUT/train.err"
echo "# run_gpu_tests.sh: exit $? (logs: $OUT/logs)"
emu_tap "emulated CUDA: " "$OUT/train.tap"
grep -h 'cuda-emu:' "$OUT"/logs/*.out "$OUT"/logs/*.log 2>/dev/null | sort | uniq -c | sort -rn | head -5 | sed 's/^/# /'
done_testing

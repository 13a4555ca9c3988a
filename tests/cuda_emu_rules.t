#!/bin/sh
# tests/cuda_emu_rules.t — the emulated CUDA runtime's own rules
# (tests/gpu/emu/emu_rules.cu; tests/gpu/emu/README.md): the block scheduler
# (a missing __syncthreads gives wrong sums; a barrier or shuffle that some
# threads never reach stops the process, naming the kernel and the counts),
# launch geometry and pointer arguments, device memory (256-byte alignment
# and no more, NaN fill, the guard page, host code touching device memory),
# the copies' synchronisation rules and a lagging device, timing events
# (cudaEventElapsedTime: the stream's time, its statuses), stream capture's
# refusals (thread-local and global mode) and graph replay, CUDA IPC between
# two processes, the cuBLAS and cuBLASLt shims against naive products, the
# cuDNN shim (a grouped, strided, dilated convolution against its definition,
# the statuses of bad descriptors and workspaces, capture, an operand's span), and
# the CUDA backend's messages for an unusable GPU (none, an old driver,
# compute modes PROHIBITED and EXCLUSIVE_PROCESS). Each check would fail
# without the rule it names.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_emu.sh"
emu_need
OUT=$TOP/build/tests/cuda_emu_rules
mkdir -p "$OUT" || exit 1
"$EMU/emu_rules" >"$OUT/rules.tap" 2>"$OUT/rules.log"
echo "# emu_rules: exit $?"
emu_tap "emulated CUDA: " "$OUT/rules.tap"
done_testing

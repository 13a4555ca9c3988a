#!/bin/sh
# tests/cuda_emu_ops.t — the GPU op tests (tests/gpu/test_ops_gpu.cu) against
# the emulated CUDA backend (runtime/cuda compiled against tests/gpu/emu/:
# its kernels on CPU fibers, its GEMMs through the cuBLAS shim), one process
# per group as on a GPU (tests/gpu/run_gpu_tests.sh), and against the CPU
# backend's results from the same inputs (recorded by the CPU build,
# tests/gpu/ops_on_cpu.sh): bit for bit where runtime/cuda/README.md promises
# the CPU's bits (relu, dropout, add/concat, scale, SGD, AdamW, embed,
# pos_embed, batch-norm statistics and running update, mse gradient, the
# reference path's bias and normalisation weight gradients), within stated
# relative tolerances elsewhere; the convolutions through the emulated cuDNN
# (tests/gpu/emu/cudnn_emu.cc: direct loops over the definition), the other
# layers of convolutional networks (pooling, upsample, batchnorm2d, channel
# ops: runtime/cuda's own kernels) emulated. Emulated: what it shows is the kernels' and
# the host code's logic, not a GPU's rounding (device tanhf/expf, cuBLAS's
# summation order) or speed.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_emu.sh"
emu_need
OUT=$TOP/build/tests/cuda_emu_ops
mkdir -p "$OUT" && rm -f "$OUT"/*.tap "$OUT"/*.log
if "$TOP/tests/gpu/ops_on_cpu.sh" "$OUT/cpu" && PG_OPS_RECORD=$OUT/cpu.rec "$OUT/cpu/test_ops_on_cpu" >/dev/null 2>&1; then
    ok 0 "the CPU backend's results recorded (tests/gpu/ops_on_cpu.sh, PG_OPS_RECORD)"
else
    ok 1 "the CPU backend's results recorded (tests/gpu/ops_on_cpu.sh, PG_OPS_RECORD)"
    tail -20 "$OUT/cpu/build.log" | sed 's/^/# /'
fi
for g in $("$EMU/test_ops_gpu" --list); do
    PG_OPS_AGAINST=$OUT/cpu.rec "$EMU/test_ops_gpu" "$g" >"$OUT/$g.tap" 2>"$OUT/$g.log"
    echo "# group $g: exit $?"
    emu_tap "emulated CUDA, group $g: " "$OUT/$g.tap"
    grep 'cuda-emu:' "$OUT/$g.log" | head -5 | sed 's/^/# /'
done
done_testing

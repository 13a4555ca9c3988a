#!/bin/sh
# tests/cuda_kernel_paths.t — the CUDA runtime's kernel-path switch and what
# the fast paths put into a linked stage (runtime/cuda/README.md, "Kernel
# paths"): PIPE_CUDA_KERNELS is read before the GPU is looked for, so its
# errors and its note show on any machine; the stages carry the cuBLASLt
# bias epilogue and the fused attention kernels. The stages are the ones
# `make test` links into build-cuda/ (skipped, with the reason, without nvcc).
. "$(dirname "$0")/lib.sh"
cd "$TOP" || exit 1
b=build-cuda/mlp/stage0
if [ ! -x "$b" ] || [ ! -x build-cuda/gpt_char/stage0 ]; then
    echo "1..0 # SKIP no CUDA stages in build-cuda/ (make test links them when nvcc is found)"
    exit 0
fi
run() { PIPE_RANK=0 PIPE_WORLD=3 PIPE_MASTER=127.0.0.1:1 timeout 20 "$b" --steps 1 --connect-timeout 1 2>&1; } # --connect-timeout 1: as in cuda_link.t

out=$(PIPE_CUDA_KERNELS=colsum,bogus run)
st=$?
[ $st = 1 ]; ok $? "PIPE_CUDA_KERNELS with an unknown path: exit 1 (status $st)"
like "$out" "PIPE_CUDA_KERNELS=colsum,bogus: unknown kernel path 'bogus' \(use fast, reference, or a comma list of colsum, pad, shadow, flash, lt, msplit\)" \
    "the error names the bad path and the good ones"

out=$(PIPE_CUDA_KERNELS=reference run)
like "$out" 'note: CUDA kernel paths \(PIPE_CUDA_KERNELS=reference\): colsum reference pad reference shadow reference flash reference lt reference msplit reference' \
    "PIPE_CUDA_KERNELS=reference: a note says every path is the reference one"
out=$(PIPE_CUDA_KERNELS=flash,lt run)
like "$out" 'colsum reference pad reference shadow reference flash fast lt fast msplit reference' "PIPE_CUDA_KERNELS=flash,lt: just those two are fast"
out=$(run)
if printf '%s' "$out" | grep -q 'CUDA kernel paths'; then st=1; else st=0; fi
ok $st "no PIPE_CUDA_KERNELS: no note (every fast path on)"

syms=$(nm build-cuda/gpt_char/stage0 2>/dev/null)
printf '%s\n' "$syms" | grep -q ' U cublasLtMatmul@' && printf '%s\n' "$syms" | grep -q ' U cublasLtMatmulAlgoGetHeuristic@'
ok $? "the stages call cuBLASLt (the bias epilogue) and link libcublasLt"
for k in flash_fwd_kernel flash_bwd_dkv_kernel flash_bwd_dq_kernel colsum_chunks_kernel shadow_round_kernel; do
    printf '%s\n' "$syms" | grep -q "$k"
    ok $? "the stages carry $k"
done
done_testing

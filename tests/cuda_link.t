#!/bin/sh
# tests/cuda_link.t — the CUDA stage runtime links, GPU or not: `make CUDA=1`
# builds build-cuda/libpgrt_cuda.a and links the generated mlp, gpt_char, llama_tiny
# and the convolutional examples' (resnet, unet, vit, digits_cnn) stages against
# it; every binary exists, its dynamic libraries (cudart, cuBLAS, NCCL; cuDNN
# for the convolutional ones only) resolve, a convolutional stage calls cuDNN's
# convolutions, and it carries the CUDA transport over the renamed
# TCP code (pg_tcp_*, ncclSend), the step hooks, graph capture and
# cublasGemmEx (bf16); tests/gpu/graph_smoke.c links from C; the GPU test
# script and the GPU benchmark parse, its gemm_peak timer links. Without a GPU a CUDA stage says "no GPU
# found" and exits 1. Nothing here needs a GPU; tests/gpu/run_gpu_tests.sh
# (make test-gpu) runs them on one.
. "$(dirname "$0")/lib.sh"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
if [ ! -x "$NVCC" ]; then
    echo "1..0 # SKIP nvcc not found at $NVCC"
    exit 0
fi
cd "$TOP" || exit 1
T=$(mktemp -d /tmp/pg-cuda-link.XXXXXX)
trap 'rm -rf "$T"' EXIT
models="mlp gpt_char llama_tiny resnet unet vit digits_cnn"
# shellcheck disable=SC2046
log=$(make --no-print-directory CUDA=1 NVCC="$NVCC" $(for m in $models; do echo "build-cuda/$m/stages"; done) 2>&1)
st=$?
ok $st "make CUDA=1 links the stages of $models against libpgrt_cuda.a"
[ $st = 0 ] || printf '%s\n' "$log" | tail -20 | sed 's/^/# /'
for m in $models; do
    n=$(ls generated/$m/stage*.c 2>/dev/null | wc -l)
    for f in generated/$m/stage*.c; do
        b=build-cuda/$m/$(basename "$f" .c)
        [ -x "$b" ]; ok $? "$b exists (one of $n)"
        deps=$(ldd "$b" 2>&1)
        ! printf '%s\n' "$deps" | grep -q 'not found' &&
            printf '%s\n' "$deps" | grep -q 'libcudart\.so' &&
            printf '%s\n' "$deps" | grep -q 'libcublas\.so' &&
            printf '%s\n' "$deps" | grep -q 'libnccl\.so'
        st=$?
        ok $st "$b: cudart, cuBLAS and NCCL resolve (ldd)"
        [ $st = 0 ] || printf '%s\n' "$deps" | sed 's/^/# /'
        syms=$(nm "$b" 2>/dev/null)
        # cuDNN exactly when the stage has a convolution (linked --as-needed)
        if printf '%s\n' "$syms" | grep -q ' U cudnnConvolutionForward'; then
            printf '%s\n' "$deps" | grep -q 'libcudnn\.so'
            ok $? "$b: calls cuDNN's convolutions, and cuDNN resolves (ldd)"
        else
            ! printf '%s\n' "$deps" | grep -q 'libcudnn'
            ok $? "$b: no convolution, no cuDNN"
        fi
        printf '%s\n' "$syms" | grep -q ' T pg_tcp_init$' &&
            printf '%s\n' "$syms" | grep -q ' T pg_net_send$' &&
            printf '%s\n' "$syms" | grep -q ' U ncclSend' &&
            printf '%s\n' "$syms" | grep -q ' T pg_backend_init$' &&
            ! printf '%s\n' "$syms" | grep -q 'cblas_sgemm'
        ok $? "$b: CUDA backend and transport over the TCP module (runtime/core/tcp.c), no OpenBLAS"
    done
done
LDLIBS_CUDA=$(tools/gpu_ldlibs.sh "$T/libs")
# shellcheck disable=SC2086
cc -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -O2 -Iruntime/core -Iruntime/cuda \
    -o "$T/graph_smoke" tests/gpu/graph_smoke.c build-cuda/libpgrt_cuda.a $LDLIBS_CUDA 2>"$T/cc.log"
st=$?
ok $st "tests/gpu/graph_smoke.c (graph capture/replay from C) links against libpgrt_cuda.a"
[ $st = 0 ] || sed 's/^/# /' "$T/cc.log"
b=build-cuda/bench/gemm_peak
[ -x "$b" ] || make --no-print-directory CUDA=1 "$b" >"$T/gp.log" 2>&1
[ -x "$b" ] && ldd "$b" 2>&1 | grep -q 'libcublas\.so' && ! ldd "$b" 2>&1 | grep -q 'not found'
ok $? "bench/gpu/gemm_peak.c (the bf16 GEMM peak timer of make bench-gpu) builds and links cuBLAS"
sh -n bench/gpu/run.sh 2>"$T/bsh.log" &&
    "${PYTHON:-/usr/bin/python3}" -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' bench/gpu/torch_gpt2.py 2>>"$T/bsh.log"
st=$?
ok $st "bench/gpu/run.sh and bench/gpu/torch_gpt2.py parse"
[ $st = 0 ] || sed 's/^/# /' "$T/bsh.log"
syms=$(nm build-cuda/gpt_char/stage0 2>/dev/null)
printf '%s\n' "$syms" | grep -q ' T pg_backend_step_begin$' && printf '%s\n' "$syms" | grep -q ' U cublasGemmEx' &&
    printf '%s\n' "$syms" | grep -q ' U cudaStreamBeginCapture'
ok $? "the CUDA stages carry the step hooks, CUDA graph capture and the bf16 GEMM path"
# the convolutional ops are the CUDA runtime's own (conv.cu, pool.cu, dims.cu,
# batchnorm2d.cu), no longer entry points that refuse
# every convolutional example has a stage with a convolution, the others none
for m in $models; do
    for b in build-cuda/$m/stage*; do
        nm "$b" 2>/dev/null | grep -q ' U cudnnConvolutionForward' && echo "$m"
    done
done | sort -u | tr '\n' ' ' >"$T/convs"
is "$(cat "$T/convs")" "digits_cnn resnet unet vit " "the stages that call cuDNN are those of the convolutional examples"
syms=$(nm build-cuda/resnet/stage0 2>/dev/null)
printf '%s\n' "$syms" | grep -q ' U cudnnConvolutionForward' && printf '%s\n' "$syms" | grep -q ' U cudnnConvolutionBackwardFilter' &&
    printf '%s\n' "$syms" | grep -q ' T pg_batchnorm2d_fwd$' && ! strings build-cuda/resnet/stage0 | grep -q 'not yet on the CUDA runtime'
ok $? "a resnet CUDA stage calls cuDNN's convolutions and carries no refusing entry point"
sh -n tests/gpu/run_gpu_tests.sh 2>"$T/sh.log"
st=$?
ok $st "tests/gpu/run_gpu_tests.sh parses (sh -n)"
[ $st = 0 ] || sed 's/^/# /' "$T/sh.log"
if ! nvidia-smi -L >/dev/null 2>&1 && [ -x build-cuda/mlp/stage0 ]; then
    out=$(PIPE_RANK=0 PIPE_WORLD=3 PIPE_MASTER=127.0.0.1:1 timeout 20 build-cuda/mlp/stage0 --steps 1 2>&1)
    st=$?
    [ $st = 1 ]; ok $? "no GPU: a CUDA stage exits 1 (status $st)"
    like "$out" 'no GPU found' "no GPU: it says so"
    out=$(timeout 20 build-cuda/bench/gemm_peak 2>&1)
    st=$?
    [ $st = 1 ]; ok $? "no GPU: gemm_peak exits 1 (status $st)"
    like "$out" 'no GPU found' "no GPU: gemm_peak says so"
fi
done_testing

#!/bin/sh
# tools/gpu_ldlibs.sh LIBDIR — the linker flags for a CUDA stage on this
# machine (the Makefile's LDLIBS_CUDA): the CUDA runtime, cuBLAS, cuDNN and NCCL that
# tools/gpu_env.sh finds (toolkit, system or NVIDIA Python wheels, versioned
# names included), through unversioned symlinks in LIBDIR, with an rpath to
# each library's directory. When one is missing, says so on stderr and prints
# the plain -lcudart -lcublas -lcudnn -lnccl flags against CUDA_HOME, so the link
# error names the library.
. "$(dirname "$0")/gpu_env.sh"
GPU_ENV_NO_TORCH=1
gpu_env_find "${1:?usage: tools/gpu_ldlibs.sh LIBDIR}" "${BUILT_CUDA_MAJOR:-}"
if [ -n "$GPU_ENV_MISSING" ] || [ -z "$LDLIBS_CUDA" ]; then
    echo "gpu_ldlibs: not found:$GPU_ENV_MISSING (set CUDA_HOME, CUDART_LIB, CUBLAS_LIB, CUDNN_LIB or NCCL_LIB)" >&2
    h=${CUDA_HOME:-/usr/local/cuda}
    echo "-L$h/lib64 -Wl,-rpath,$h/lib64 -lcudart -lcublas -lcublasLt -Wl,--as-needed -lcudnn -Wl,--no-as-needed -lnccl -lstdc++ -lpthread -lm"
else
    echo "$LDLIBS_CUDA"
fi

# tools/gpu_env.sh — find what a GPU run needs on a host (POSIX sh; sourced, not
# run): nvcc and its toolkit, the CUDA runtime, cuBLAS, cuDNN and NCCL libraries, a C
# compiler, and a Python with torch. Used by the GPU bundle's run.sh
# (tools/gpu_bundle/run.sh), tests/gpu/run_gpu_tests.sh and bench/gpu/run.sh.
#
# Where it looks, in order (the first hit wins):
#   nvcc      $NVCC; $CUDA_HOME/bin/nvcc; /usr/local/cuda/bin/nvcc; the newest
#             /usr/local/cuda-*/bin/nvcc; nvcc on PATH; the nvidia-cuda-nvcc wheel
#   libraries (libcudart.so.M, libcublas.so.M + libcublasLt.so.M with M the CUDA
#             major the objects were built with, libcudnn.so.9, libnccl.so.2):
#             $CUDART_LIB, $CUBLAS_LIB, $CUDNN_LIB, $NCCL_LIB (full paths) if set; the toolkit's lib64,
#             lib and targets/x86_64-linux/lib; $GPU_ENV_SYSTEM_DIRS (default
#             /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu
#             /usr/lib64 /usr/local/lib); then every Python's site-packages
#             under nvidia/*/lib and nvidia/*/*/lib (the NVIDIA wheels PyTorch
#             installs: nvidia/cublas/lib/libcublas.so.13, nvidia/nccl/lib/
#             libnccl.so.2, nvidia/cu13/lib/..., often with no unversioned name)
#   Pythons   $PYTHON, python3 and python on PATH, /usr/bin/python3,
#             /usr/local/bin/python3, /opt/conda/bin/python3, $CONDA_PREFIX and
#             $VIRTUAL_ENV's python3; each one's site and user-site directories
#
# gpu_env_find LIBDIR [MAJOR]: does the search (MAJOR: the CUDA major of the
# prebuilt objects, default nvcc's) and sets
#   NVCC, CUDA_HOME, CUDA_MAJOR     (empty when no nvcc)
#   CUDART_LIB CUBLAS_LIB CUBLASLT_LIB CUDNN_LIB NCCL_LIB   full paths (empty: not found;
#                                   cuDNN is optional: only convolutional stages need it)
#   NCCL_INC CUBLAS_INC CUDNN_INC   directories holding nccl.h / cublas_v2.h / cudnn.h
#   LDLIBS_CUDA                     what to link a CUDA stage with: -L LIBDIR, a
#                                   private directory of unversioned symlinks to
#                                   the libraries found, and an rpath to each
#                                   library's real directory
#   PY_TORCH, TORCH_VERSION         a Python that imports torch (empty: none; not
#                                   looked for when GPU_ENV_NO_TORCH is set)
#   GPU_ENV_REPORT                  one line per item: what was found where
#   GPU_ENV_MISSING                 what is missing, for a message (empty: all found)

# ge_first_exec PATH...: the first executable path
ge_first_exec() {
    for ge_p in "$@"; do
        [ -n "$ge_p" ] && [ -x "$ge_p" ] && [ ! -d "$ge_p" ] && { echo "$ge_p"; return 0; }
    done
    return 1
}

# ge_pythons: every candidate interpreter that runs, one per line, no duplicates
ge_pythons() {
    ge_seen=""
    for ge_p in "${PYTHON:-}" "$(command -v python3 2>/dev/null)" "$(command -v python 2>/dev/null)" \
        /usr/bin/python3 /usr/local/bin/python3 /opt/conda/bin/python3 \
        "${CONDA_PREFIX:+$CONDA_PREFIX/bin/python3}" "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python3}"; do
        [ -n "$ge_p" ] && [ -x "$ge_p" ] || continue
        ge_r=$(readlink -f "$ge_p" 2>/dev/null || echo "$ge_p")
        case " $ge_seen " in *" $ge_r "*) continue ;; esac
        ge_seen="$ge_seen $ge_r"
        "$ge_p" -c 'import sys' >/dev/null 2>&1 && echo "$ge_p"
    done
}

# ge_sites PYTHON: its site-packages directories (system, user, sys.path)
ge_sites() {
    "$1" -c '
import site, sys, sysconfig
d = []
try: d += site.getsitepackages()
except Exception: pass
try: d.append(site.getusersitepackages())
except Exception: pass
for k in ("purelib", "platlib"):
    try: d.append(sysconfig.get_paths()[k])
    except Exception: pass
d += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
print("\n".join(dict.fromkeys(x for x in d if x)))' 2>/dev/null
}

# ge_libdirs: the directories searched for libraries, in order, one per line
# (GPU_ENV_SYSTEM_DIRS: the ones besides the toolkit's and the wheels')
ge_libdirs() {
    for ge_d in "${CUDA_HOME:+$CUDA_HOME/lib64}" "${CUDA_HOME:+$CUDA_HOME/lib}" \
        "${CUDA_HOME:+$CUDA_HOME/targets/x86_64-linux/lib}" \
        ${GPU_ENV_SYSTEM_DIRS-/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/lib}; do
        [ -n "$ge_d" ] && [ -d "$ge_d" ] && echo "$ge_d"
    done
    ge_pythons | while read -r ge_py; do
        ge_sites "$ge_py" | while read -r ge_s; do
            for ge_d in "$ge_s"/nvidia/*/lib "$ge_s"/nvidia/*/*/lib; do
                [ -d "$ge_d" ] && echo "$ge_d"
            done
        done
    done
}

# ge_find_lib NAME MAJOR: full path of libNAME.so.MAJOR (or libNAME.so.MAJOR.*,
# or an unversioned libNAME.so that resolves to MAJOR) in the first directory
# of ge_libdirs that has one
ge_find_lib() {
    printf '%s\n' "$GE_DIRS" | while read -r ge_d; do
        [ -n "$ge_d" ] || continue
        for ge_f in "$ge_d/lib$1.so.$2" "$ge_d/lib$1.so.$2".*; do
            [ -f "$ge_f" ] && echo "$ge_f"
        done
        if [ -f "$ge_d/lib$1.so" ]; then
            case $(readlink -f "$ge_d/lib$1.so") in
            */lib$1.so.$2 | */lib$1.so.$2.*) echo "$ge_d/lib$1.so" ;;
            esac
        fi
    done 2>/dev/null | head -n 1
}

# ge_inc_for LIB HEADER: the include directory next to LIB's (lib/../include),
# or the toolkit's, holding HEADER
ge_inc_for() {
    for ge_i in "$(dirname "$1")/../include" "${CUDA_HOME:+$CUDA_HOME/include}" /usr/include; do
        [ -f "$ge_i/$2" ] && { (cd "$ge_i" && pwd); return 0; }
    done
    return 1
}

gpu_env_find() {
    ge_libdir=$1
    NVCC=$(ge_first_exec "${NVCC:-}" "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" /usr/local/cuda/bin/nvcc \
        $(ls -d /usr/local/cuda-*/bin/nvcc 2>/dev/null | sort -t- -k2 -V -r) "$(command -v nvcc 2>/dev/null)")
    if [ -z "$NVCC" ]; then
        for ge_py in $(ge_pythons); do
            for ge_s in $(ge_sites "$ge_py"); do
                NVCC=$(ge_first_exec "$ge_s"/nvidia/cuda_nvcc/bin/nvcc "$ge_s"/nvidia/cu*/bin/nvcc) && break 2
            done
        done
    fi
    CUDA_MAJOR=""
    if [ -n "$NVCC" ]; then
        [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ] || CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd)
        CUDA_MAJOR=$("$NVCC" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p' | head -n 1)
    fi
    ge_major=${2:-$CUDA_MAJOR}
    GE_DIRS=$(ge_libdirs)
    [ -n "$ge_major" ] || ge_major=13
    [ -n "${CUDART_LIB:-}" ] || CUDART_LIB=$(ge_find_lib cudart "$ge_major")
    [ -n "${CUBLAS_LIB:-}" ] || CUBLAS_LIB=$(ge_find_lib cublas "$ge_major")
    CUBLASLT_LIB=""
    if [ -n "$CUBLAS_LIB" ]; then
        for ge_f in "$(dirname "$CUBLAS_LIB")/libcublasLt.so.$ge_major" "$(dirname "$CUBLAS_LIB")/libcublasLt.so.$ge_major".* \
            "$(dirname "$CUBLAS_LIB")/libcublasLt.so"; do
            [ -f "$ge_f" ] && { CUBLASLT_LIB=$ge_f; break; }
        done
        [ -n "$CUBLASLT_LIB" ] || CUBLASLT_LIB=$(ge_find_lib cublasLt "$ge_major")
    fi
    [ -n "${NCCL_LIB:-}" ] || NCCL_LIB=$(ge_find_lib nccl 2)
    [ -n "${CUDNN_LIB:-}" ] || CUDNN_LIB=$(ge_find_lib cudnn 9)
    NCCL_INC=""; CUBLAS_INC=""; CUDNN_INC=""
    [ -n "$NCCL_LIB" ] && NCCL_INC=$(ge_inc_for "$NCCL_LIB" nccl.h)
    [ -n "$CUBLAS_LIB" ] && CUBLAS_INC=$(ge_inc_for "$CUBLAS_LIB" cublas_v2.h)
    [ -n "$CUDNN_LIB" ] && CUDNN_INC=$(ge_inc_for "$CUDNN_LIB" cudnn.h)
    PY_TORCH=""; TORCH_VERSION=""
    [ -n "${GPU_ENV_NO_TORCH:-}" ] || for ge_py in $(ge_pythons); do
        ge_v=$("$ge_py" -c 'import torch; print(torch.__version__)' 2>/dev/null) || continue
        PY_TORCH=$ge_py; TORCH_VERSION=$ge_v
        break
    done
    GPU_ENV_MISSING=""
    [ -n "$CUDART_LIB" ] || GPU_ENV_MISSING="$GPU_ENV_MISSING libcudart.so.$ge_major"
    [ -n "$CUBLAS_LIB" ] || GPU_ENV_MISSING="$GPU_ENV_MISSING libcublas.so.$ge_major"
    [ -n "$CUBLASLT_LIB" ] || GPU_ENV_MISSING="$GPU_ENV_MISSING libcublasLt.so.$ge_major"
    [ -n "$NCCL_LIB" ] || GPU_ENV_MISSING="$GPU_ENV_MISSING libnccl.so.2"
    # a private directory of unversioned names, and an rpath to each real one
    LDLIBS_CUDA=""
    ge_rpath=""
    if [ -n "$ge_libdir" ] && mkdir -p "$ge_libdir"; then
        for ge_pair in "cudart:$CUDART_LIB" "cublas:$CUBLAS_LIB" "cublasLt:$CUBLASLT_LIB" "cudnn:$CUDNN_LIB" "nccl:$NCCL_LIB"; do
            ge_f=${ge_pair#*:}
            [ -n "$ge_f" ] || continue
            ln -sfn "$ge_f" "$ge_libdir/lib${ge_pair%%:*}.so"
            ge_d=$(cd "$(dirname "$ge_f")" && pwd)
            case " $ge_rpath " in *" $ge_d "*) ;; *) ge_rpath="$ge_rpath $ge_d" ;; esac
        done
        LDLIBS_CUDA="-L$ge_libdir"
        for ge_d in $ge_rpath; do LDLIBS_CUDA="$LDLIBS_CUDA -Wl,-rpath,$ge_d -Wl,-rpath-link,$ge_d"; done
        # cuDNN only when found, and needed only by a stage that calls it (the
        # convolutions: runtime/cuda/conv.cu); the other models run without it
        LDLIBS_CUDA="$LDLIBS_CUDA -lcudart -lcublas -lcublasLt${CUDNN_LIB:+ -Wl,--as-needed -lcudnn -Wl,--no-as-needed} -lnccl -lstdc++ -lpthread -lm -ldl -lrt"
    fi
    GPU_ENV_REPORT="nvcc: ${NVCC:-not found}${CUDA_MAJOR:+ (CUDA $CUDA_MAJOR, toolkit $CUDA_HOME)}
cudart: ${CUDART_LIB:-not found}
cuBLAS: ${CUBLAS_LIB:-not found}${CUBLASLT_LIB:+ + $CUBLASLT_LIB}
cuDNN: ${CUDNN_LIB:-not found (only the convolutional layers need it)}
NCCL: ${NCCL_LIB:-not found}
C compiler: $(command -v "${CC:-cc}" 2>/dev/null || echo "${CC:-cc} not found")
Python with torch: ${PY_TORCH:-none found}${TORCH_VERSION:+ (torch $TORCH_VERSION)}"
}

# json_num VALUE: VALUE if it is a number, else null
json_num() {
    case $1 in
    '' | *[!0-9.eE+-]* | *[eE]*[eE]* | .) echo null ;;
    *) echo "$1" ;;
    esac
}

# json_str VALUE: a JSON string (backslashes, quotes, tabs, newlines escaped;
# other control characters dropped)
json_str() {
    printf '"%s"' "$(printf '%s' "$1" | tr -d '\001-\010\013-\037' | sed 's/\\/\\\\/g; s/"/\\"/g; s/	/\\t/g' |
        awk '{ printf "%s%s", (NR > 1 ? "\\n" : ""), $0 }')"
}

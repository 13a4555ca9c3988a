# tools/gpu_bundle/prepare.sh — what the GPU bundle's entry points (run.sh,
# device_check.sh, device_rerun.sh) do on a GPU host before anything runs
# (POSIX sh, sourced after tools/gpu_env.sh and the bundle's BUNDLE file; the
# caller sets B, the bundle's folder, and WORK, the folder for the working
# files below: the probe, its log, the library links, the rebuild. run.sh
# uses its OUTDIR; device_check.sh a temporary folder outside OUT, whose files
# the device tool would otherwise count among the 8 it brings back):
#
#   bundle_probe         is there a usable GPU? GPU_LINES (what the driver
#                        says, a line per GPU), PROBE_RC (0 usable, 3 not),
#                        GPU_CAUSE, ARCH (e.g. 90), DRIVER_CUDA (e.g. 13.0),
#                        COMPUTE_MODE (of GPU 0). Without any libcuda.so.1 it
#                        answers at once, before compiling the probe.
#   bundle_env           the toolkit and the libraries the stages will use:
#                        REBUILD (1: compile the CUDA sources here) and
#                        REBUILD_WHY, from PG_REBUILD_CUDA, the GPU's
#                        architecture and the driver's CUDA against the
#                        bundle's; then the libraries of the CUDA major that
#                        will run (the host nvcc's when rebuilding, the
#                        bundle's otherwise): LDLIBS_CUDA, GPU_ENV_REPORT,
#                        MISSING (empty: all found; else what, for a message).
#   bundle_rebuild       when REBUILD: nvcc -arch=sm_ARCH on the bundle's own
#                        sources (runtime/cuda, the op tests, gemm_peak),
#                        PG_REBUILD_JOBS at a time (default: the CPUs), into
#                        WORK/.rebuild; sets CUDALIB, TEST_OPS_OBJ, GEMM_OBJ
#                        (the prebuilt ones otherwise). 0 or 1 (the log's tail
#                        printed).

# bundle_probe: see above
bundle_probe() {
    GPU_LINES="" PROBE_RC=3 GPU_CAUSE="" ARCH="" DRIVER_CUDA="" COMPUTE_MODE=""
    bp_lib=""
    for bp_d in $(printf '%s' "${LD_LIBRARY_PATH:-}" | tr ':' ' '); do
        [ -e "$bp_d/libcuda.so.1" ] && bp_lib=$bp_d/libcuda.so.1 && break
    done
    [ -n "$bp_lib" ] || bp_lib=$(ldconfig -p 2>/dev/null | grep -m1 'libcuda\.so\.1 ')
    if [ -z "$bp_lib" ]; then
        GPU_CAUSE="no NVIDIA driver: libcuda.so.1 not found (not in LD_LIBRARY_PATH, nor known to ldconfig)"
        GPU_LINES=$GPU_CAUSE
        return
    fi
    if command -v "${CC:-cc}" >/dev/null 2>&1 &&
        "${CC:-cc}" -O1 -o "$WORK/.gpu_probe" "$B/tools/gpu_probe.c" -ldl >"$WORK/.probe.log" 2>&1; then
        GPU_LINES=$("$WORK/.gpu_probe" 2>&1)
        PROBE_RC=$?
    elif command -v nvidia-smi >/dev/null 2>&1; then
        GPU_LINES=$(nvidia-smi -L 2>&1)
        printf '%s\n' "$GPU_LINES" | grep -q '^GPU [0-9]' && PROBE_RC=0
    else
        GPU_LINES="no C compiler (${CC:-cc}) to ask the driver, and no nvidia-smi"
    fi
    [ "$PROBE_RC" = 0 ] || GPU_CAUSE=$(printf '%s\n' "$GPU_LINES" | tail -n 1)
    ARCH=$(printf '%s\n' "$GPU_LINES" | sed -n 's/^gpu 0: .*, sm_\([0-9]*\),.*/\1/p' | head -n 1)
    DRIVER_CUDA=$(printf '%s\n' "$GPU_LINES" | sed -n 's/^driver: CUDA \([0-9]*\.[0-9]*\).*/\1/p' | head -n 1)
    COMPUTE_MODE=$(printf '%s\n' "$GPU_LINES" | sed -n 's/^gpu 0: .*, compute mode \([A-Z_]*\).*/\1/p' | head -n 1)
}

# bundle_env: see above
bundle_env() {
    REBUILD=${PG_REBUILD_CUDA:-0} REBUILD_WHY=""
    [ "$REBUILD" = 1 ] && REBUILD_WHY="PG_REBUILD_CUDA=1"
    if [ -n "$ARCH" ] && [ "$ARCH" -lt "${BUILT_ARCH#sm_}" ] 2>/dev/null; then
        REBUILD=1 REBUILD_WHY="this GPU is sm_$ARCH, older than the prebuilt $BUILT_ARCH code"
    fi
    be_drv=${DRIVER_CUDA%%.*}
    if [ -n "$be_drv" ] && [ "$be_drv" -lt "$BUILT_CUDA_MAJOR" ] 2>/dev/null; then
        REBUILD=1 REBUILD_WHY="the driver supports CUDA $DRIVER_CUDA, older than the bundle's CUDA $BUILT_CUDA_MAJOR"
    fi
    # the libraries of the CUDA that will run: the host nvcc's when rebuilding
    be_major=$BUILT_CUDA_MAJOR
    if [ "$REBUILD" = 1 ]; then
        gpu_env_find "$WORK/.lib" ""
        be_major=${CUDA_MAJOR:-$BUILT_CUDA_MAJOR}
    else
        gpu_env_find "$WORK/.lib" "$BUILT_CUDA_MAJOR"
    fi
    MISSING=$GPU_ENV_MISSING
    command -v "${CC:-cc}" >/dev/null 2>&1 || MISSING="$MISSING a C compiler (${CC:-cc})"
    if [ "$REBUILD" = 1 ] && [ -z "$NVCC" ]; then
        MISSING="$MISSING nvcc (to rebuild the CUDA files: $REBUILD_WHY)"
    elif [ "$REBUILD" = 1 ] && [ -n "$be_drv" ] && [ "$be_drv" -lt "$be_major" ] 2>/dev/null; then
        MISSING="$MISSING a toolkit the driver can run (the driver supports CUDA $DRIVER_CUDA, this host's nvcc is CUDA $be_major: update the driver or use an older toolkit)"
    fi
    export LDLIBS_CUDA PY_TORCH TORCH_VERSION
}

# bundle_rebuild: see above
bundle_rebuild() {
    CUDALIB=$B/build-cuda/libpgrt_cuda.a
    TEST_OPS_OBJ=$B/build/cuda-tests/test_ops_gpu.o
    GEMM_OBJ=$B/build-cuda/bench/gemm_peak.o
    export CUDALIB TEST_OPS_OBJ GEMM_OBJ
    [ "$REBUILD" = 1 ] || return 0
    RB=$WORK/.rebuild
    rm -rf "$RB" && mkdir -p "$RB/obj" || return 1
    br_arch=sm_${ARCH:-${BUILT_ARCH#sm_}}
    br_jobs=${PG_REBUILD_JOBS:-$(nproc 2>/dev/null || echo 4)}
    echo "gpu-bundle: rebuilding ($REBUILD_WHY): nvcc -arch=$br_arch, $br_jobs at a time, log $RB/nvcc.log"
    br_inc="-I$B/runtime/core -I$B/runtime/cuda ${NCCL_INC:+-I$NCCL_INC} ${CUBLAS_INC:+-I$CUBLAS_INC} ${CUDNN_INC:+-I$CUDNN_INC}"
    br_st=0 br_n=0 br_pids=""
    for br_f in "$B"/runtime/cuda/*.cu "$B/tests/gpu/test_ops_gpu.cu"; do
        # shellcheck disable=SC2086
        "$NVCC" -std=c++17 -O2 -arch="$br_arch" -Xcompiler -Wall,-Wextra $br_inc -c \
            -o "$RB/obj/$(basename "$br_f" .cu).o" "$br_f" >"$RB/$(basename "$br_f").log" 2>&1 &
        br_pids="$br_pids $!"
        br_n=$((br_n + 1))
        if [ $br_n -ge "$br_jobs" ]; then
            for br_p in $br_pids; do wait "$br_p" || br_st=1; done
            br_pids="" br_n=0
        fi
    done
    for br_p in $br_pids; do wait "$br_p" || br_st=1; done
    cat "$RB"/*.log >"$RB/nvcc.log" 2>/dev/null
    # shellcheck disable=SC2086
    "${CC:-cc}" -std=c11 -O2 -I"$CUDA_HOME/include" ${CUBLAS_INC:+-I$CUBLAS_INC} -c -o "$RB/gemm_peak.o" \
        "$B/bench/gpu/gemm_peak.c" >>"$RB/nvcc.log" 2>&1 || br_st=1
    mv "$RB/obj/test_ops_gpu.o" "$RB/test_ops_gpu.o" 2>/dev/null || br_st=1
    rm -f "$RB/libpgrt_cuda.a"
    [ $br_st = 0 ] && ar rcs "$RB/libpgrt_cuda.a" "$B"/build-cuda/rt-c/*.o "$RB"/obj/*.o || br_st=1
    if [ $br_st != 0 ]; then
        tail -30 "$RB/nvcc.log"
        return 1
    fi
    CUDALIB=$RB/libpgrt_cuda.a TEST_OPS_OBJ=$RB/test_ops_gpu.o GEMM_OBJ=$RB/gemm_peak.o
    echo "gpu-bundle: rebuilt: $CUDALIB"
}

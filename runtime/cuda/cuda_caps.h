/* runtime/cuda/cuda_caps.h — what makes a GPU unusable for a stage, in words:
 * the compute mode (nvidia-smi -c) and CUDA IPC event support, checked by
 * backend.cu when the context is made and by cuda_net.cu before stages that
 * share a GPU open each other's rings. Plain C over the attribute values
 * (cudaComputeMode's numbering, cudaDevAttrIpcEventSupport's 0/1), so
 * tests/unit/test_cuda_host.c checks every message on any machine. */
#ifndef PG_CUDA_CAPS_H
#define PG_CUDA_CAPS_H

#include <stdio.h>

/* cudaComputeMode's values (driver_types.h) */
enum { PG_CUDA_MODE_DEFAULT = 0, PG_CUDA_MODE_EXCLUSIVE_THREAD = 1, PG_CUDA_MODE_PROHIBITED = 2,
       PG_CUDA_MODE_EXCLUSIVE_PROCESS = 3 };

static inline const char *pg_cuda_mode_name(int mode)
{
    switch (mode) {
    case PG_CUDA_MODE_DEFAULT: return "DEFAULT";
    case PG_CUDA_MODE_EXCLUSIVE_THREAD: return "EXCLUSIVE_THREAD";
    case PG_CUDA_MODE_PROHIBITED: return "PROHIBITED";
    case PG_CUDA_MODE_EXCLUSIVE_PROCESS: return "EXCLUSIVE_PROCESS";
    default: return "unknown";
    }
}

/* Before making a context on GPU dev in compute mode `mode`: 1 and the cause
 * in buf when no process may use it. */
static inline int pg_cuda_mode_forbids(int dev, int mode, char *buf, size_t n)
{
    if (mode != PG_CUDA_MODE_PROHIBITED)
        return 0;
    snprintf(buf, n,
             "GPU %d is in compute mode PROHIBITED: no process may use it (nvidia-smi -q -d COMPUTE shows it; "
             "its administrator can run nvidia-smi -i %d -c DEFAULT)", dev, dev);
    return 1;
}

/* Making the context failed with "devices unavailable" (busy): the cause. */
static inline void pg_cuda_busy_why(int dev, int mode, char *buf, size_t n)
{
    if (mode == PG_CUDA_MODE_EXCLUSIVE_PROCESS || mode == PG_CUDA_MODE_EXCLUSIVE_THREAD)
        snprintf(buf, n,
                 "GPU %d is in compute mode %s and another process already uses it: stages that share one GPU "
                 "need compute mode DEFAULT (nvidia-smi -i %d -c DEFAULT, as root) or CUDA MPS; or give each "
                 "stage its own GPU (CUDA_VISIBLE_DEVICES)", dev, pg_cuda_mode_name(mode), dev);
    else
        snprintf(buf, n,
                 "GPU %d is busy or unavailable (compute mode %s): another process may hold it, or the GPU is in "
                 "an error state (nvidia-smi -q shows both)", dev, pg_cuda_mode_name(mode));
}

/* Stages `me` and `peer` share GPU dev, so they exchange device payloads by
 * CUDA IPC (NCCL refuses two ranks on one GPU): 1 and the cause in buf when
 * the device cannot do that. */
static inline int pg_cuda_ipc_unusable(int me, int peer, int dev, int ipc_event_support, char *buf, size_t n)
{
    if (ipc_event_support)
        return 0;
    snprintf(buf, n,
             "stage %d: stages %d and %d share GPU %d, which needs CUDA IPC events, but this GPU or platform "
             "does not support them (cudaDevAttrIpcEventSupport = 0; e.g. WSL or a Jetson/Tegra): run each stage "
             "on its own GPU (CUDA_VISIBLE_DEVICES) or use the CPU runtime", me, me < peer ? me : peer,
             me < peer ? peer : me, dev);
    return 1;
}

#endif

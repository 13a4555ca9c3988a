/* runtime/cuda/cuda_caps.h — what makes a GPU unusable for a stage, in words:
 * the compute mode (nvidia-smi -c) and CUDA IPC event support, checked by
 * backend.cu when the context is made and by cuda_net.cu before stages that
 * share a GPU open each other's rings; and whether the data-parallel replicas
 * of a stage can sum their gradients with NCCL (dp_nccl.cu). Plain C over the
 * attribute values (cudaComputeMode's numbering, cudaDevAttrIpcEventSupport's
 * 0/1) and the replicas' start-up messages, so tests/unit/test_cuda_host.c
 * checks every message on any machine. */
#ifndef PG_CUDA_CAPS_H
#define PG_CUDA_CAPS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "pg_le.h"

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

/* ---- the device ring's message slots (cuda_net.cu) -------------------------
 * How many device messages may be in flight in one direction, each with its
 * own event: twice a step's messages to that peer (the ring holds two steps'
 * bytes too: the wrap-around) and a few more for what travels outside the
 * step (the final gather waits for its receiver, which is receiving); at
 * most `most`; `msgs` < 0 (not known): `most`. A step of gpt2_small's stage
 * sends some ten messages to a neighbour, not the 512 a fixed pool made. */
static inline int pg_cuda_msg_slots(int msgs, int most)
{
    if (msgs < 0)
        return most;
    int n = 2 * msgs + 4;
    return n < most ? n : most;
}

/* ---- the replicas' gradient reduction: NCCL or the host path --------------
 * At start-up each replica of a stage sends every other PG_DP_INFO_BYTES:
 * whether it wants the NCCL path (PG_DP_WANT_*), the NCCL version it runs,
 * its GPU's uuid (cudaDeviceProp.uuid) and PCI bus id (for messages). */
#define PG_DP_INFO_BYTES 64
enum { PG_DP_WANT_YES = 0, PG_DP_WANT_ENV = 1, PG_DP_WANT_NO_NCCL = 2 };

static inline void pg_dp_info_put(unsigned char m[PG_DP_INFO_BYTES], uint32_t want, uint32_t nccl_version,
                                  const unsigned char uuid[16], const char *bus)
{
    memset(m, 0, PG_DP_INFO_BYTES);
    pg_put32(m, want);
    pg_put32(m + 4, nccl_version);
    memcpy(m + 8, uuid, 16);
    if (bus)
        memcpy(m + 24, bus, strnlen(bus, PG_DP_INFO_BYTES - 25));
}

/* From every replica's message (all[D][PG_DP_INFO_BYTES], in replica order):
 * 1, NCCL; or 0 and why in buf, the same words on every replica: one that
 * does not want it, or two on one GPU (NCCL refuses two ranks of a
 * communicator on one device). */
static inline int pg_dp_nccl_choice(const unsigned char *all, int D, char *buf, size_t n)
{
    for (int q = 0; q < D; q++) {
        uint32_t w = pg_get32(all + (size_t)q * PG_DP_INFO_BYTES);
        if (w != PG_DP_WANT_YES) {
            snprintf(buf, n, "%s on replica %d", w == PG_DP_WANT_ENV ? "PIPE_DP_NCCL=0" : "no NCCL", q);
            return 0;
        }
    }
    for (int i = 0; i < D; i++)
        for (int j = i + 1; j < D; j++)
            if (!memcmp(all + (size_t)i * PG_DP_INFO_BYTES + 8, all + (size_t)j * PG_DP_INFO_BYTES + 8, 16)) {
                char bus[PG_DP_INFO_BYTES - 24 + 1];
                memcpy(bus, all + (size_t)i * PG_DP_INFO_BYTES + 24, PG_DP_INFO_BYTES - 24);
                bus[PG_DP_INFO_BYTES - 24] = 0;
                snprintf(buf, n, "replicas %d and %d share GPU %s (NCCL takes one rank per GPU)", i, j,
                         bus[0] ? bus : "?");
                return 0;
            }
    return 1;
}

#endif

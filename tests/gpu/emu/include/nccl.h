/* tests/gpu/emu/include/nccl.h — NCCL's names for the emulated build. NCCL is
 * not emulated (tests/gpu/emu/nccl_emu.cc): the emulated processes share one
 * GPU, where runtime/cuda never uses NCCL (CUDA IPC between stages, the host
 * path between replicas); every call that would move data or make a
 * communicator fails with ncclInvalidUsage and says why. */
#ifndef PG_EMU_NCCL_H
#define PG_EMU_NCCL_H

#include "cuda_runtime.h"

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7
} ncclResult_t;

typedef enum { ncclUint8 = 1, ncclFloat32 = 7, ncclFloat = 7 } ncclDataType_t;

struct ncclComm;
typedef struct ncclComm *ncclComm_t;

typedef struct {
    int blocking;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER {1}

ncclResult_t ncclGetVersion(int *version);
const char *ncclGetErrorString(ncclResult_t r);
const char *ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t s);

#endif

/* tests/gpu/emu/nccl_emu.cc — NCCL is not emulated. The emulated stage
 * processes share one GPU (tests/gpu/emu/README.md), where runtime/cuda never
 * makes a communicator: stages exchange device payloads by CUDA IPC (NCCL
 * refuses two ranks on one GPU), replicas sum their gradients on the host
 * path. ncclGetVersion answers (the replicas compare versions before they
 * choose a path); every call that would make a communicator or move data
 * fails with ncclInvalidUsage and a note, so a path that needs NCCL shows
 * itself instead of passing. */
#include "emu_rt.h"
#include "nccl.h"

static const char *const not_emulated =
    "NCCL is not emulated (pipegen's CUDA emulator runs every process on one GPU; NCCL between GPUs needs hardware)";

static ncclResult_t refuse(const char *call)
{
    pg_emu_rt::note("%s: %s", call, not_emulated);
    return ncclInvalidUsage;
}

ncclResult_t ncclGetVersion(int *version)
{
    *version = 22800;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidUsage: return "invalid usage (NCCL is not emulated)";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "NCCL error";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return not_emulated;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    (void)id;
    return refuse("ncclGetUniqueId");
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config)
{
    (void)nranks, (void)id, (void)rank, (void)config;
    *comm = NULL;
    return refuse("ncclCommInitRankConfig");
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err)
{
    (void)comm;
    *err = ncclInvalidUsage;
    return ncclInvalidArgument;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) { return comm ? refuse("ncclCommFinalize") : ncclInvalidArgument; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) { return comm ? refuse("ncclCommDestroy") : ncclInvalidArgument; }
ncclResult_t ncclCommAbort(ncclComm_t comm) { return comm ? refuse("ncclCommAbort") : ncclInvalidArgument; }
ncclResult_t ncclGroupStart(void) { return refuse("ncclGroupStart"); }
ncclResult_t ncclGroupEnd(void) { return refuse("ncclGroupEnd"); }

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t s)
{
    (void)buf, (void)count, (void)type, (void)peer, (void)comm, (void)s;
    return refuse("ncclSend");
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t s)
{
    (void)buf, (void)count, (void)type, (void)peer, (void)comm, (void)s;
    return refuse("ncclRecv");
}

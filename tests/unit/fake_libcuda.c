/* tests/unit/fake_libcuda.c — a stand-in for the NVIDIA driver's libcuda.so.1,
 * for tests/gpu_bundle.t: the GPU bundle's probe (tools/gpu_probe.c) opens it
 * instead of a real driver when LD_LIBRARY_PATH points at it. FAKE_CUDA picks
 * what the "driver" says: nodevice (cuInit: CUDA_ERROR_NO_DEVICE), zero (no
 * devices), prohibited (one GPU in compute mode PROHIBITED), h100 (one sm_90
 * GPU, 80 GiB, compute mode DEFAULT), a100 (the same, sm_80), exclusive (the
 * H100 in compute mode EXCLUSIVE_PROCESS), olddriver (the H100 with a driver
 * of CUDA 12.2). Only the calls the probe makes exist. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char *mode(void)
{
    const char *m = getenv("FAKE_CUDA");
    return m ? m : "h100";
}

int cuInit(unsigned flags)
{
    (void)flags;
    return strcmp(mode(), "nodevice") == 0 ? 100 : 0;
}

int cuDriverGetVersion(int *v)
{
    *v = strcmp(mode(), "olddriver") == 0 ? 12020 : 13000;
    return 0;
}

int cuDeviceGetCount(int *n)
{
    *n = strcmp(mode(), "zero") == 0 ? 0 : 1;
    return 0;
}

int cuDeviceGet(int *d, int i)
{
    *d = i;
    return 0;
}

int cuDeviceGetName(char *name, int len, int d)
{
    (void)d;
    strncpy(name, strcmp(mode(), "a100") == 0 ? "Fake A100" : "Fake H100", (size_t)len - 1);
    name[len - 1] = 0;
    return 0;
}

int cuDeviceGetAttribute(int *v, int attr, int d)
{
    (void)d;
    int a100 = strcmp(mode(), "a100") == 0;
    int cmode = strcmp(mode(), "prohibited") == 0 ? 2 : strcmp(mode(), "exclusive") == 0 ? 3 : 0;
    *v = attr == 20 ? cmode : attr == 75 ? (a100 ? 8 : 9) : 0;
    return 0;
}

int cuDeviceTotalMem_v2(size_t *bytes, int d)
{
    (void)d;
    *bytes = (size_t)80 << 30;
    return 0;
}

int cuGetErrorName(int e, const char **s)
{
    *s = e == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
    return 0;
}

int cuGetErrorString(int e, const char **s)
{
    *s = e == 100 ? "no CUDA-capable device is detected" : "unknown error";
    return 0;
}

/* tools/gpu_probe.c — is there a usable NVIDIA GPU here? The first thing the
 * GPU bundle's run.sh does (compiled there with the host's C compiler: it
 * needs no CUDA headers or libraries, it opens the driver's libcuda.so.1
 * with dlopen).
 *
 * usage: gpu_probe
 * Prints one line per device ("gpu 0: NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB,
 * compute mode DEFAULT") and the driver's CUDA version, and exits 0 when at
 * least one device can run a stage; otherwise prints the cause on one line
 * ("no NVIDIA driver: libcuda.so.1 not found (...)", "cuInit failed:
 * CUDA_ERROR_NO_DEVICE (...)", "0 CUDA devices", "every GPU is in compute
 * mode PROHIBITED") and exits 3. Exit 2 on a bad command line. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* The CUDA driver API's types and values (cuda.h), stable since CUDA 4. */
typedef int CUresult;
typedef int CUdevice;
enum { ATTR_COMPUTE_MODE = 20, ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76 };
enum { MODE_PROHIBITED = 2 };

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*count_fn)(int *);
typedef CUresult (*get_fn)(CUdevice *, int);
typedef CUresult (*name_fn)(char *, int, CUdevice);
typedef CUresult (*attr_fn)(int *, int, CUdevice);
typedef CUresult (*mem_fn)(size_t *, CUdevice);
typedef CUresult (*ver_fn)(int *);
typedef CUresult (*err_fn)(CUresult, const char **);

static const char *mode_name(int m)
{
    static const char *const n[] = {"DEFAULT", "EXCLUSIVE_THREAD", "PROHIBITED", "EXCLUSIVE_PROCESS"};
    return m >= 0 && m < 4 ? n[m] : "unknown";
}

int main(int argc, char **argv)
{
    (void)argv;
    if (argc != 1) {
        fprintf(stderr, "usage: gpu_probe\n");
        return 2;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        printf("no NVIDIA driver: libcuda.so.1 not found (%s)\n", e ? e : "dlopen failed");
        return 3;
    }
    init_fn cu_init = (init_fn)dlsym(h, "cuInit");
    count_fn cu_count = (count_fn)dlsym(h, "cuDeviceGetCount");
    get_fn cu_get = (get_fn)dlsym(h, "cuDeviceGet");
    name_fn cu_name = (name_fn)dlsym(h, "cuDeviceGetName");
    attr_fn cu_attr = (attr_fn)dlsym(h, "cuDeviceGetAttribute");
    mem_fn cu_mem = (mem_fn)dlsym(h, "cuDeviceTotalMem_v2");
    ver_fn cu_ver = (ver_fn)dlsym(h, "cuDriverGetVersion");
    err_fn cu_ename = (err_fn)dlsym(h, "cuGetErrorName");
    err_fn cu_estr = (err_fn)dlsym(h, "cuGetErrorString");
    if (!cu_init || !cu_count || !cu_get || !cu_name || !cu_attr || !cu_mem || !cu_ver) {
        printf("no usable NVIDIA driver: libcuda.so.1 lacks the CUDA driver API (cuInit, cuDeviceGetCount, ...)\n");
        return 3;
    }
    CUresult r = cu_init(0);
    if (r != 0) {
        const char *en = NULL, *es = NULL;
        if (cu_ename)
            cu_ename(r, &en);
        if (cu_estr)
            cu_estr(r, &es);
        printf("cuInit failed: %s (%s)\n", en ? en : "CUDA error", es ? es : "no description");
        return 3;
    }
    int ver = 0, n = 0;
    cu_ver(&ver);
    if (cu_count(&n) != 0 || n <= 0) {
        printf("0 CUDA devices (driver CUDA %d.%d)\n", ver / 1000, ver % 1000 / 10);
        return 3;
    }
    int usable = 0;
    for (int i = 0; i < n; i++) {
        CUdevice d = 0;
        char name[256] = "?";
        int mode = 0, maj = 0, min = 0;
        size_t mem = 0;
        if (cu_get(&d, i) != 0)
            continue;
        cu_name(name, (int)sizeof name, d);
        cu_attr(&mode, ATTR_COMPUTE_MODE, d);
        cu_attr(&maj, ATTR_CC_MAJOR, d);
        cu_attr(&min, ATTR_CC_MINOR, d);
        cu_mem(&mem, d);
        printf("gpu %d: %s, sm_%d%d, %.1f GiB, compute mode %s\n", i, name, maj, min,
               (double)mem / (1024.0 * 1024.0 * 1024.0), mode_name(mode));
        usable += mode != MODE_PROHIBITED;
    }
    printf("driver: CUDA %d.%d\n", ver / 1000, ver % 1000 / 10);
    if (!usable) {
        printf("every GPU is in compute mode PROHIBITED (nvidia-smi -c DEFAULT allows processes again)\n");
        return 3;
    }
    return 0;
}

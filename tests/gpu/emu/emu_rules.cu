/* tests/gpu/emu/emu_rules.cu — the rules of the emulated CUDA runtime
 * (tests/gpu/emu/), each shown by a check that would fail without it: the
 * block scheduler (a missing __syncthreads gives a wrong sum, a barrier or a
 * shuffle some threads never reach stops the process), launch geometry and
 * pointer arguments, device memory (alignment, NaN fill, the guard page, host
 * dereferences), copies and their synchronisation, events and their timing, stream capture's
 * refusals and graph replay, CUDA IPC between processes, the cuBLAS and
 * cuBLASLt shims against naive products, and the cuDNN shim's statuses,
 * spans and capture. Compiled like runtime/cuda's files
 * (tests/gpu/emu/emu_cu.sh rewrites its launches); run by
 * tests/cuda_emu_rules.t. What stops a process runs in a child (this program
 * again, `--child NAME`), whose status and message the parent checks. */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

extern "C" {
#include "pg_ops.h"
}
#include "tap.h" /* tests/tap.h */

extern char **environ;

static const char *self;

/* ---- children -------------------------------------------------------------------- */

/* our environment, plus extra_env (NAME=value) when given, NULL-terminated */
static std::vector<char *> env_with(const char *extra_env)
{
    std::vector<char *> env;
    for (char **e = environ; *e; e++)
        env.push_back(*e);
    if (extra_env)
        env.push_back((char *)extra_env);
    env.push_back(NULL);
    return env;
}

/* Runs `self --child NAME ARGS...` with env (NULL: ours) and returns its
 * status (128 + signal when killed); its stderr (and stdout) in *out. */
static int child(const char *name, const std::vector<std::string> &args, std::string *out,
                 const char *extra_env = NULL)
{
    char tmpl[] = "/tmp/pg-emu-rules.XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0)
        return -1;
    std::vector<const char *> argv = {self, "--child", name};
    for (const auto &a : args)
        argv.push_back(a.c_str());
    argv.push_back(NULL);
    std::vector<char *> env = env_with(extra_env);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 1);
    posix_spawn_file_actions_adddup2(&fa, fd, 2);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, self, &fa, NULL, (char *const *)argv.data(), env.data());
    posix_spawn_file_actions_destroy(&fa);
    int st = -1;
    if (rc == 0 && waitpid(pid, &st, 0) == pid)
        st = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    out->clear();
    char buf[4096];
    ssize_t n;
    lseek(fd, 0, SEEK_SET);
    while ((n = read(fd, buf, sizeof buf)) > 0)
        out->append(buf, (size_t)n);
    close(fd);
    unlink(tmpl);
    return st;
}

static bool has(const std::string &s, const char *part) { return s.find(part) != std::string::npos; }

/* Starts `self --child NAME ARG` (env: ours plus extra_env) with a pipe on its
 * stdin (*to: its write end; the child holds on until it closes) and waits
 * for its first line, which must start with `ready`. 0, or -1. */
static int start_holder(const char *name, const char *arg, const char *extra_env, pid_t *pid, int *to)
{
    int in[2], outp[2];
    if (pipe(in) || pipe(outp))
        return -1;
    const char *argv[] = {self, "--child", name, arg, NULL};
    std::vector<char *> env = env_with(extra_env);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, outp[0]);
    int rc = posix_spawn(pid, self, &fa, NULL, (char *const *)argv, env.data());
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(outp[1]);
    char buf[32] = "";
    ssize_t n = rc == 0 ? read(outp[0], buf, sizeof buf - 1) : -1;
    close(outp[0]);
    *to = in[1];
    return n > 0 && !strncmp(buf, "ready", 5) ? 0 : -1;
}

/* the holder lets go (its stdin closes) and is waited for */
static void stop_holder(pid_t pid, int to)
{
    close(to);
    int st;
    waitpid(pid, &st, 0);
}

/* a child that must stop with SIGABRT and a message containing `part` */
static void child_stops(const char *name, const std::vector<std::string> &args, const char *part, const char *what)
{
    std::string out;
    int st = child(name, args, &out);
    OK(st == 128 + SIGABRT && has(out, part), "%s: stopped (status %d) saying \"%s\"", what, st, part);
    if (!(st == 128 + SIGABRT && has(out, part)))
        printf("# %s\n", out.substr(0, 400).c_str());
}

/* ---- kernels ---------------------------------------------------------------------- */

__global__ void block_sum_kernel(const float *x, float *out, int skip_barriers)
{
    __shared__ float sh[256];
    sh[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        if (!skip_barriers) /* the same for the whole block: not divergent */
            __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = sh[0];
}

__global__ void divergent_barrier_kernel(int *p)
{
    if (threadIdx.x >= 200)
        return;
    __syncthreads();
    p[threadIdx.x] = 1;
}

__global__ void divergent_shuffle_kernel(float *p)
{
    if (threadIdx.x % 32 == 5)
        return;
    p[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
}

__global__ void shuffle_kernel(float *p) { p[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1); }

__global__ void fill_kernel(float *p, int n, float v)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = v;
}

__global__ void overrun_kernel(float *p, int n) { p[n + 1024 + threadIdx.x] = 1.0f; }

/* holds its stream until the host sets *go (pinned memory) */
__global__ void hold_kernel(volatile int *go)
{
    while (!*go)
        ;
}

/* ---- helpers ------------------------------------------------------------------------ */

static float *dev_floats(int n)
{
    void *p = NULL;
    if (cudaMalloc(&p, (size_t)n * 4) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc failed\n");
        exit(2);
    }
    return (float *)p;
}

static std::vector<float> get(const float *d, int n)
{
    std::vector<float> h((size_t)n);
    cudaMemcpy(h.data(), d, (size_t)n * 4, cudaMemcpyDeviceToHost);
    return h;
}

static void put(float *d, const std::vector<float> &h) { cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice); }

static std::string hex(const void *p, size_t n)
{
    std::string s;
    char b[3];
    for (size_t i = 0; i < n; i++) {
        snprintf(b, sizeof b, "%02x", ((const unsigned char *)p)[i]);
        s += b;
    }
    return s;
}

static void unhex(const char *s, void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        sscanf(s + 2 * i, "%2x", &v);
        ((unsigned char *)p)[i] = (unsigned char)v;
    }
}

/* ---- the block scheduler ------------------------------------------------------------- */

static void test_scheduler(void)
{
    const int blocks = 512;
    float *x = dev_floats(blocks * 256), *out = dev_floats(blocks);
    put(x, std::vector<float>((size_t)blocks * 256, 1.0f));
    block_sum_kernel<<<blocks, 256>>>(x, out, 0);
    std::vector<float> s = get(out, blocks);
    int right = 0;
    for (float v : s)
        right += v == 256.0f;
    OK(right == blocks, "a 512 x 256-thread block reduction: every block sums to 256 (%d of %d)", right, blocks);
    block_sum_kernel<<<blocks, 256>>>(x, out, 1);
    s = get(out, blocks);
    right = 0;
    for (float v : s)
        right += v == 256.0f;
    OK(right < blocks / 2, "the same reduction without its __syncthreads: wrong in %d of %d blocks (threads run in "
       "random order between barriers)", blocks - right, blocks);
    float *w = dev_floats(64);
    shuffle_kernel<<<1, 64>>>(w);
    std::vector<float> sw = get(w, 64);
    int good = 0;
    for (int t = 0; t < 64; t++)
        good += sw[(size_t)t] == (float)(t ^ 1);
    OK(good == 64, "__shfl_xor_sync(mask, v, 1) gives each lane its neighbour's value (%d of 64)", good);
    cudaFree(x), cudaFree(out), cudaFree(w);
    child_stops("divergent-barrier", {}, "__syncthreads reached by 200 of 256 threads", "a __syncthreads 56 threads "
                "return before");
    child_stops("divergent-shuffle", {}, "reached by 31 of its 32 lanes", "a shuffle one lane returned before");
}

/* ---- launches ---------------------------------------------------------------------------- */

static void test_launches(void)
{
    float *p = dev_floats(2048);
    cudaGetLastError();
    fill_kernel<<<1, 2048>>>(p, 2048, 1.0f);
    OK(cudaGetLastError() == cudaErrorInvalidConfiguration, "a block of 2048 threads: cudaErrorInvalidConfiguration");
    fill_kernel<<<dim3(1, 65536), 32>>>(p, 2048, 1.0f);
    OK(cudaGetLastError() == cudaErrorInvalidConfiguration, "a grid of 65536 in y: cudaErrorInvalidConfiguration");
    fill_kernel<<<3, 256>>>(p, 2048, 2.0f);
    std::vector<float> h = get(p, 2048);
    int twos = 0;
    for (float v : h)
        twos += v == 2.0f;
    OK(cudaGetLastError() == cudaSuccess && twos == 2048, "a grid-stride kernel of 3 x 256 threads fills 2048 (%d)",
       twos);
    cudaFree(p);
    child_stops("host-pointer-arg", {}, "which is host memory no CUDA call allocated", "a kernel given a host pointer");
    child_stops("overrun", {}, "bytes past the end of the device allocation", "a kernel writing past its allocation");
}

/* ---- memory and copies --------------------------------------------------------------------- */

static void test_memory(void)
{
    void *a = NULL, *b = NULL;
    size_t f0 = 0, t0 = 0, f1 = 0, t1 = 0;
    cudaMemGetInfo(&f0, &t0);
    OK(cudaMalloc(&a, 1000) == cudaSuccess && cudaMalloc(&b, 3000) == cudaSuccess, "two allocations");
    cudaMemGetInfo(&f1, &t1);
    OK((uintptr_t)a % 256 == 0 && (uintptr_t)a % 512 != 0 && (uintptr_t)b % 256 == 0 && (uintptr_t)b % 512 != 0,
       "cudaMalloc returns 256-byte aligned memory, and no more (%p %p)", a, b);
    OK(t1 == t0 && f0 - f1 == 4000, "cudaMemGetInfo counts them (%zu bytes fewer free)", f0 - f1);
    std::vector<float> h = get((float *)a, 250);
    OK(isnan(h[0]) && isnan(h[249]), "fresh device memory reads as NaN (0xff bytes), not zero");
    void *huge = NULL;
    OK(cudaMalloc(&huge, (size_t)1 << 50) == cudaErrorMemoryAllocation && !huge,
       "an allocation beyond the device's memory: cudaErrorMemoryAllocation");
    cudaGetLastError();
    float host[300];
    OK(cudaMemcpy(host, a, 1200, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
       "a copy of 1200 bytes out of a 1000-byte allocation: cudaErrorInvalidValue");
    OK(cudaMemcpy(a, host, 100, cudaMemcpyDeviceToHost) == cudaErrorInvalidMemcpyDirection,
       "a host-to-device copy called cudaMemcpyDeviceToHost: cudaErrorInvalidMemcpyDirection");
    OK(cudaGetLastError() == cudaErrorInvalidMemcpyDirection && cudaGetLastError() == cudaSuccess,
       "cudaGetLastError returns the last error once");
    OK(cudaFree(host) == cudaErrorInvalidValue && cudaFree((char *)a + 256) == cudaErrorInvalidValue,
       "cudaFree of host memory or inside an allocation: cudaErrorInvalidValue");
    cudaPointerAttributes at;
    cudaPointerGetAttributes(&at, (char *)b + 100);
    int dev = at.type == cudaMemoryTypeDevice;
    cudaPointerGetAttributes(&at, host);
    OK(dev && at.type == cudaMemoryTypeUnregistered, "cudaPointerGetAttributes: device inside an allocation, "
       "unregistered for the stack");
    cudaFree(a), cudaFree(b);

    /* pageable host -> device: the bytes are taken at the call */
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *d = dev_floats(64);
    std::vector<float> src(64, 1.0f);
    cudaMemcpyAsync(d, src.data(), 256, cudaMemcpyHostToDevice, s);
    std::fill(src.begin(), src.end(), 2.0f);
    cudaStreamSynchronize(s);
    OK(get(d, 64)[63] == 1.0f, "an asynchronous copy from pageable memory takes the bytes at the call");
    cudaFree(d);
    cudaStreamDestroy(s);
    std::string out;
    int st = 3;
    for (int tries = 0; tries < 4 && st == 3; tries++) /* 3: the host itself lagged longer than the device */
        st = child("lagging-device", {}, &out, "PG_EMU_LAG_US=300000");
    OK(st == 0, "a lagging device (PG_EMU_LAG_US): results appear after synchronising, not before (status %d)", st);
    if (st)
        printf("# %s\n", out.c_str());
    st = child("host-touches-device", {}, &out);
    if (has(out, "no protection keys"))
        printf("ok %d # SKIP this CPU or kernel has no memory protection keys (PKU): host reads of device memory "
               "are not caught here\n", ++tap_n);
    else
        OK(st == 128 + SIGABRT && has(out, "host code touched device memory"),
           "host code reading a device pointer: stopped saying so (status %d)", st);
}

/* ---- stream capture -------------------------------------------------------------------------- */

struct malloc_arg {
    cudaError_t e;
};

static void *malloc_thread(void *p)
{
    void *m = NULL;
    ((malloc_arg *)p)->e = cudaMalloc(&m, 64);
    cudaFree(m);
    return NULL;
}

struct end_arg {
    cudaError_t e;
    cudaStream_t s;
};

static void *end_capture_thread(void *p)
{
    cudaGraph_t g = NULL;
    end_arg *a = (end_arg *)p;
    a->e = cudaStreamEndCapture(a->s, &g);
    return NULL;
}

static void test_capture(void)
{
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *d = dev_floats(256);
    put(d, std::vector<float>(256, 0.0f));
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "begin a capture");
    fill_kernel<<<1, 256, 0, s>>>(d, 256, 5.0f);
    OK(cudaStreamEndCapture(s, &g) == cudaSuccess && g, "end it: a graph");
    OK(get(d, 256)[0] == 0.0f, "nothing captured ran");
    OK(cudaGraphInstantiate(&x, g, 0) == cudaSuccess && cudaGraphLaunch(x, s) == cudaSuccess &&
           cudaStreamSynchronize(s) == cudaSuccess && get(d, 256)[255] == 5.0f,
       "the graph's launch runs what was captured");

    /* what the programming guide prohibits during capture */
    struct {
        const char *what;
        int call;
        cudaError_t want;
    } bad[] = {
        {"cudaMalloc", 0, cudaErrorStreamCaptureUnsupported},
        {"cudaStreamSynchronize of the capturing stream", 1, cudaErrorStreamCaptureUnsupported},
        {"a synchronous cudaMemcpy", 2, cudaErrorStreamCaptureUnsupported},
        {"an asynchronous copy to pageable memory", 3, cudaErrorStreamCaptureUnsupported},
        {"waiting on an event recorded outside the capture", 4, cudaErrorStreamCaptureIsolation},
        {"cudaDeviceSynchronize", 5, cudaErrorStreamCaptureUnsupported},
    };
    cudaEvent_t ev;
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    cudaEventRecord(ev, s);
    for (const auto &b : bad) {
        float host[4];
        void *m = NULL;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        cudaError_t e = b.call == 0   ? cudaMalloc(&m, 64)
                        : b.call == 1 ? cudaStreamSynchronize(s)
                        : b.call == 2 ? cudaMemcpy(host, d, 16, cudaMemcpyDeviceToHost)
                        : b.call == 3 ? cudaMemcpyAsync(host, d, 16, cudaMemcpyDeviceToHost, s)
                        : b.call == 4 ? cudaStreamWaitEvent(s, ev, 0)
                                      : cudaDeviceSynchronize();
        cudaGraph_t bg = NULL;
        cudaError_t end = cudaStreamEndCapture(s, &bg);
        OK(e == b.want && end == cudaErrorStreamCaptureInvalidated && !bg,
           "%s while capturing: %s, and the capture is invalidated (%s)", b.what, cudaGetErrorName(e),
           cudaGetErrorName(end));
        cudaGetLastError();
    }
    /* thread-local mode: another thread's allocation is its own business; global mode: it breaks the capture */
    for (int global = 0; global < 2; global++) {
        cudaStreamBeginCapture(s, global ? cudaStreamCaptureModeGlobal : cudaStreamCaptureModeThreadLocal);
        malloc_arg ma = {cudaSuccess};
        pthread_t th;
        pthread_create(&th, NULL, malloc_thread, &ma);
        pthread_join(th, NULL);
        cudaGraph_t bg = NULL;
        cudaError_t end = cudaStreamEndCapture(s, &bg);
        if (global)
            OK(ma.e == cudaErrorStreamCaptureUnsupported && end == cudaErrorStreamCaptureInvalidated,
               "global capture mode: another thread's cudaMalloc is refused and invalidates the capture");
        else
            OK(ma.e == cudaSuccess && end == cudaSuccess && bg,
               "thread-local capture mode: another thread's cudaMalloc is allowed");
        cudaGraphDestroy(bg);
        cudaGetLastError();
    }
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    end_arg ec = {cudaSuccess, s};
    pthread_t th;
    pthread_create(&th, NULL, end_capture_thread, &ec);
    pthread_join(th, NULL);
    OK(ec.e == cudaErrorStreamCaptureWrongThread, "ending a thread-local capture from another thread: %s",
       cudaGetErrorName(ec.e));
    cudaEventRecord(ev, s); /* inside the capture */
    OK(cudaEventQuery(ev) == cudaErrorCapturedEvent, "querying an event recorded in a capture: cudaErrorCapturedEvent");
    cudaGraph_t g2 = NULL;
    cudaStreamEndCapture(s, &g2);
    cudaGraphDestroy(g2);
    cudaGetLastError();
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    cudaFree(d);
    child_stops("replay-after-free", {}, "no longer allocated", "a graph replayed after its buffer was freed");
}

/* ---- timing events ------------------------------------------------------------------------ */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void test_timing(void)
{
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEvent_t a, b, untimed, fresh;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventCreate(&fresh);
    cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming);
    int *go = NULL;
    cudaMallocHost((void **)&go, sizeof *go);
    *go = 0;
    float ms = -1.0f;
    double t0 = now_ms(); /* before `a`: no stream time between the events can exceed the host's since */
    cudaEventRecord(a, s);
    hold_kernel<<<1, 1, 0, s>>>(go);
    cudaEventRecord(b, s);
    /* the 30 ms hold starts once the stream has passed `a`: a stream thread
     * that starts late (a loaded machine) would otherwise stamp `a` after the
     * nap began, and the events' elapsed time would rightly be under 30 ms */
    struct timespec tick = {0, 100000};
    while (cudaEventQuery(a) == cudaErrorNotReady)
        nanosleep(&tick, NULL);
    OK(cudaEventElapsedTime(&ms, a, b) == cudaErrorNotReady && cudaGetLastError() == cudaSuccess,
       "cudaEventElapsedTime before the stream reached the end event: cudaErrorNotReady, not a last error");
    struct timespec nap = {0, 30 * 1000000};
    nanosleep(&nap, NULL);
    *go = 1;
    cudaStreamSynchronize(s);
    double host_ms = now_ms() - t0;
    OK(cudaEventElapsedTime(&ms, a, b) == cudaSuccess && ms >= 30.0f && ms <= host_ms + 1.0,
       "the elapsed time is the stream's: from its start event to the end of the work it waited for (%.3f ms, "
       "at least the 30 ms the work was held, at most the host's %.3f ms)", ms, host_ms);
    OK(cudaEventElapsedTime(&ms, a, untimed) == cudaErrorInvalidResourceHandle,
       "cudaEventElapsedTime of an event made with cudaEventDisableTiming: cudaErrorInvalidResourceHandle");
    OK(cudaEventElapsedTime(&ms, a, fresh) == cudaErrorInvalidResourceHandle,
       "cudaEventElapsedTime of an event never recorded: cudaErrorInvalidResourceHandle");
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    cudaEventRecord(b, s);
    cudaGraph_t g = NULL;
    cudaStreamEndCapture(s, &g);
    OK(cudaEventElapsedTime(&ms, a, b) == cudaErrorInvalidResourceHandle,
       "cudaEventElapsedTime of an event last recorded in a capture: cudaErrorInvalidResourceHandle");
    cudaGetLastError();
    cudaGraphDestroy(g);
    cudaEventDestroy(a), cudaEventDestroy(b), cudaEventDestroy(untimed), cudaEventDestroy(fresh);
    cudaFreeHost(go);
    cudaStreamDestroy(s);
}

/* ---- events and CUDA IPC ----------------------------------------------------------------- */

static void test_ipc(void)
{
    float *d = dev_floats(1024);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEvent_t ev;
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess);
    fill_kernel<<<2, 128, 0, s>>>(d, 1024, 3.0f);
    cudaEventRecord(ev, s);
    cudaIpcMemHandle_t mh;
    cudaIpcEventHandle_t eh;
    OK(cudaIpcGetMemHandle(&mh, d) == cudaSuccess && cudaIpcGetEventHandle(&eh, ev) == cudaSuccess,
       "memory and event handles of a device allocation and an interprocess event");
    void *mine = NULL;
    OK(cudaIpcOpenMemHandle(&mine, mh, cudaIpcMemLazyEnablePeerAccess) == cudaErrorInvalidValue,
       "a process cannot open its own memory handle");
    cudaGetLastError();
    cudaIpcMemHandle_t inner;
    OK(cudaIpcGetMemHandle(&inner, d + 64) == cudaErrorInvalidValue, "a memory handle of a pointer inside an allocation: "
       "cudaErrorInvalidValue");
    cudaGetLastError();
    std::string out;
    int st = child("ipc-import", {hex(&mh, sizeof mh), hex(&eh, sizeof eh)}, &out);
    OK(st == 0 && has(out, "imported 3 3"), "another process opens both handles, waits for the event, reads the "
       "values and writes its own (status %d)", st);
    if (st)
        printf("# %s\n", out.substr(0, 300).c_str());
    std::vector<float> h = get(d, 1024);
    OK(h[1000] == 42.0f, "its write is seen here (%g)", h[1000]);
    cudaEvent_t plain;
    cudaEventCreate(&plain);
    OK(cudaIpcGetEventHandle(&eh, plain) == cudaErrorInvalidResourceHandle,
       "an event without cudaEventInterprocess has no handle");
    cudaGetLastError();
    cudaFree(d);
    cudaStreamDestroy(s);
    child_stops("free-while-mapped", {}, "still maps this allocation by CUDA IPC",
                "freeing memory another live process has opened by CUDA IPC");
}

/* ---- what the CUDA backend says about an unusable GPU --------------------------------------------- */

static void test_devices(const char *lockdir)
{
    struct {
        const char *env, *want, *what;
    } cases[] = {
        {"PG_EMU_GPUS=0", "no GPU found (no CUDA-capable device is detected)", "no GPU"},
        {"PG_EMU_DRIVER=none", "no GPU found (no NVIDIA driver: cudaDriverGetVersion gives none)", "no driver"},
        {"PG_EMU_DRIVER=old", "the NVIDIA driver supports CUDA 11.4, older than this stage's CUDA runtime 13.0",
         "a driver older than the runtime"},
        {"PG_EMU_COMPUTE_MODE=PROHIBITED", "GPU 0 is in compute mode PROHIBITED", "a GPU in compute mode PROHIBITED"},
        {"CUDA_VISIBLE_DEVICES=", "no GPU found", "no GPU visible (CUDA_VISIBLE_DEVICES empty)"},
    };
    for (const auto &c : cases) {
        std::string out;
        int st = child("backend-init", {}, &out, c.env);
        OK(st == 1 && has(out, c.want), "%s (%s): the backend refuses, saying \"%s\"", c.what, c.env, c.want);
        if (!(st == 1 && has(out, c.want)))
            printf("# status %d: %s\n", st, out.substr(0, 300).c_str());
    }
    setenv("PG_EMU_LOCKDIR", lockdir, 1); /* the children's lock files: this test's own */
    pid_t pid;
    int to;
    int held = start_holder("hold-context", "", "PG_EMU_COMPUTE_MODE=EXCLUSIVE_PROCESS", &pid, &to);
    std::string out;
    int st = child("backend-init", {}, &out, "PG_EMU_COMPUTE_MODE=EXCLUSIVE_PROCESS");
    const char *want = "compute mode EXCLUSIVE_PROCESS and another process already uses it";
    OK(held == 0 && st == 1 && has(out, want), "a GPU in compute mode EXCLUSIVE_PROCESS held by another process: the "
       "backend refuses, saying \"%s\"", want);
    if (!(held == 0 && st == 1 && has(out, want)))
        printf("# holder %d, status %d: %s\n", held, st, out.substr(0, 300).c_str());
    if (held == 0)
        stop_holder(pid, to);
    st = child("backend-init", {}, &out, "PG_EMU_COMPUTE_MODE=EXCLUSIVE_PROCESS");
    OK(st == 0, "the same GPU once the other process is gone: the backend is made (status %d)", st);
    unsetenv("PG_EMU_LOCKDIR");
}

/* ---- cuBLAS and cuBLASLt --------------------------------------------------------------------- */

static uint64_t rng = 3;
static float uni()
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* C = op(A) op(B), column-major, naive in double */
static std::vector<double> ref_gemm(int ta, int tb, int m, int n, int k, const std::vector<float> &A, int lda,
                                    const std::vector<float> &B, int ldb)
{
    std::vector<double> C((size_t)m * n);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++)
                s += (double)(ta ? A[(size_t)i * lda + p] : A[(size_t)p * lda + i]) *
                     (tb ? B[(size_t)p * ldb + j] : B[(size_t)j * ldb + p]);
            C[(size_t)j * m + i] = s;
        }
    return C;
}

static void test_blas(void)
{
    cublasHandle_t h;
    cublasCreate(&h);
    const int m = 13, n = 7, k = 9;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int ra = ta ? k : m, ca = ta ? m : k, rb = tb ? n : k, cb = tb ? k : n;
            int lda = ra + 3, ldb = rb + 5, ldc = m + 2;
            std::vector<float> A((size_t)lda * ca), B((size_t)ldb * cb);
            for (auto &v : A)
                v = uni();
            for (auto &v : B)
                v = uni();
            float *dA = dev_floats((int)A.size()), *dB = dev_floats((int)B.size()), *dC = dev_floats(ldc * n);
            put(dA, A), put(dB, B);
            const float one = 1.0f, zero = 0.0f;
            cublasStatus_t st = cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                                            &one, dA, lda, dB, ldb, &zero, dC, ldc);
            std::vector<float> C = get(dC, ldc * n);
            std::vector<double> R = ref_gemm(ta, tb, m, n, k, A, lda, B, ldb);
            double worst = 0;
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++)
                    worst = fmax(worst, fabs(C[(size_t)j * ldc + i] - R[(size_t)j * m + i]));
            OK(st == CUBLAS_STATUS_SUCCESS && worst < 1e-5, "cublasSgemm %c%c with padded leading dimensions = the naive "
               "product (err %.1e)", "NT"[ta], "NT"[tb], worst);
            cudaFree(dA), cudaFree(dB), cudaFree(dC);
        }
    float *a = dev_floats(100), *b = dev_floats(100), *c = dev_floats(100);
    const float one = 1.0f, zero = 0.0f;
    OK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 10, 5, 5, &one, a, 9, b, 5, &zero, c, 10) == CUBLAS_STATUS_INVALID_VALUE,
       "lda below the rows of A: CUBLAS_STATUS_INVALID_VALUE");
    cudaFree(a), cudaFree(b), cudaFree(c);

    /* strided batches of bf16 operands into f32: each batch its own product of the bf16 values */
    const int bm = 6, bn = 5, bk = 7, nb = 3, sa = bm * bk + 4, sb = bk * bn + 2, sc = bm * bn + 1;
    std::vector<float> A((size_t)sa * nb), B((size_t)sb * nb);
    std::vector<uint16_t> A16(A.size()), B16(B.size());
    for (size_t i = 0; i < A.size(); i++) {
        A16[i] = __float2bfloat16_rn(uni()).bits;
        A[i] = emu_bf16_float(A16[i]);
    }
    for (size_t i = 0; i < B.size(); i++) {
        B16[i] = __float2bfloat16_rn(uni()).bits;
        B[i] = emu_bf16_float(B16[i]);
    }
    void *dA = NULL, *dB = NULL;
    cudaMalloc(&dA, A16.size() * 2), cudaMalloc(&dB, B16.size() * 2);
    cudaMemcpy(dA, A16.data(), A16.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B16.data(), B16.size() * 2, cudaMemcpyHostToDevice);
    float *dC = dev_floats(sc * nb);
    cublasStatus_t st = cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, bm, bn, bk, &one, dA, CUDA_R_16BF, bm,
                                                   sa, dB, CUDA_R_16BF, bk, sb, &zero, dC, CUDA_R_32F, bm, sc, nb,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    std::vector<float> C = get(dC, sc * nb);
    double worst = 0;
    for (int q = 0; q < nb; q++) {
        std::vector<float> Aq(A.begin() + q * sa, A.begin() + q * sa + bm * bk), Bq(B.begin() + q * sb, B.begin() + q * sb + bk * bn);
        std::vector<double> R = ref_gemm(0, 0, bm, bn, bk, Aq, bm, Bq, bk);
        for (int i = 0; i < bm * bn; i++)
            worst = fmax(worst, fabs(C[(size_t)(q * sc + i)] - R[(size_t)i]));
    }
    OK(st == CUBLAS_STATUS_SUCCESS && worst < 1e-5, "cublasGemmStridedBatchedEx, bf16 operands, 3 batches with gaps "
       "between them = the products of the bf16 values (err %.1e)", worst);

    /* cuBLASLt: D = A B + bias on every column */
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    float *bias = dev_floats(bm);
    std::vector<float> hb(bm);
    for (auto &v : hb)
        v = uni();
    put(bias, hb);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, bm, bk, bm);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, bk, bn, bk);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, bm, bn, bm);
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &nres);
    st = cublasLtMatmul(lt, op, &one, dA, la, dB, lb, &zero, dC, lc, dC, lc, &res.algo, NULL, 0, 0);
    C = get(dC, bm * bn);
    std::vector<float> A0(A.begin(), A.begin() + bm * bk), B0(B.begin(), B.begin() + bk * bn);
    std::vector<double> R = ref_gemm(0, 0, bm, bn, bk, A0, bm, B0, bk);
    worst = 0;
    for (int j = 0; j < bn; j++)
        for (int i = 0; i < bm; i++)
            worst = fmax(worst, fabs(C[(size_t)(j * bm + i)] - (R[(size_t)(j * bm + i)] + hb[(size_t)i])));
    OK(nres == 1 && st == CUBLAS_STATUS_SUCCESS && worst < 1e-5,
       "cublasLtMatmul with the bias epilogue = A B + the bias on every column (err %.1e)", worst);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(lt);
    cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(bias);
    cublasDestroy(h);
    child_stops("gemm-past-end", {}, "reaches beyond it", "a GEMM whose leading dimension reaches past its operand");
    child_stops("gemm-overlap", {}, "overlaps A", "a GEMM writing C over its A");
    child_stops("lt-misaligned", {}, "the algorithm was chosen for 16-byte aligned", "a cuBLASLt matmul on buffers "
                "less aligned than its algorithm was chosen for");
}

/* ---- the children ---------------------------------------------------------------------------- */

/* ---- cuDNN ------------------------------------------------------------------------- */

/* cross-correlation by its definition: x [n, c, h, w], f [k, c / groups, kh, kw] */
static std::vector<double> ref_conv(const std::vector<float> &x, const std::vector<float> &f, int n, int c, int h,
                                    int w, int k, int kh, int kw, int ph, int pw, int sh, int sw, int dh, int dw,
                                    int groups, int oh, int ow)
{
    std::vector<double> y((size_t)n * k * oh * ow, 0.0);
    int cg = c / groups, kg = k / groups;
    for (int b = 0; b < n; b++)
        for (int o = 0; o < k; o++)
            for (int p = 0; p < oh; p++)
                for (int q = 0; q < ow; q++)
                    for (int ci = 0; ci < cg; ci++)
                        for (int i = 0; i < kh; i++)
                            for (int j = 0; j < kw; j++) {
                                int yy = p * sh - ph + i * dh, xx = q * sw - pw + j * dw;
                                if (yy >= 0 && yy < h && xx >= 0 && xx < w)
                                    y[(((size_t)b * k + o) * oh + p) * ow + q] +=
                                        (double)f[(((size_t)o * cg + ci) * kh + i) * kw + j] *
                                        x[(((size_t)b * c + o / kg * cg + ci) * h + yy) * w + xx];
                            }
    return y;
}

/* a 2-image, 2-group geometry with unequal strides, pads and dilations */
struct dnn_case {
    cudnnTensorDescriptor_t X, Y;
    cudnnFilterDescriptor_t F;
    cudnnConvolutionDescriptor_t C;
};

static void dnn_case_make(dnn_case *d, int oh, int ow)
{
    cudnnCreateTensorDescriptor(&d->X), cudnnCreateTensorDescriptor(&d->Y);
    cudnnCreateFilterDescriptor(&d->F), cudnnCreateConvolutionDescriptor(&d->C);
    cudnnSetTensor4dDescriptor(d->X, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 4, 7, 6);
    cudnnSetFilter4dDescriptor(d->F, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 6, 2, 3, 2);
    cudnnSetConvolution2dDescriptor(d->C, 1, 0, 2, 1, 1, 2, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
    cudnnSetConvolutionGroupCount(d->C, 2);
    cudnnSetConvolutionMathType(d->C, CUDNN_FMA_MATH);
    cudnnSetTensor4dDescriptor(d->Y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 6, oh, ow);
}

static void test_dnn(void)
{
    cudnnHandle_t h;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    OK(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS && cudnnSetStream(h, s) == CUDNN_STATUS_SUCCESS,
       "cudnnCreate, cudnnSetStream");
    dnn_case d;
    dnn_case_make(&d, 4, 4);
    int n = 0, k = 0, oh = 0, ow = 0;
    OK(cudnnGetConvolution2dForwardOutputDim(d.C, d.X, d.F, &n, &k, &oh, &ow) == CUDNN_STATUS_SUCCESS && n == 2 &&
           k == 6 && oh == 4 && ow == 4,
       "the output of 7x6, filter 3x2, pads 1x0, strides 2x1, dilations 1x2: %dx%dx%dx%d (2x6x4x4)", n, k, oh, ow);
    std::vector<float> x(2 * 4 * 7 * 6), f(6 * 2 * 3 * 2);
    for (auto &v : x)
        v = uni();
    for (auto &v : f)
        v = uni();
    float *dx = dev_floats((int)x.size()), *df = dev_floats((int)f.size()), *dy = dev_floats(2 * 6 * 4 * 4);
    put(dx, x), put(df, f); /* dy keeps the allocation's NaNs: beta 0 must not read it */
    cudnnConvolutionFwdAlgoPerf_t rec[8];
    int nrec = 0;
    cudnnGetConvolutionForwardAlgorithm_v7(h, d.X, d.F, d.C, d.Y, 8, &nrec, rec);
    size_t ws_bytes = 0;
    cudnnGetConvolutionForwardWorkspaceSize(h, d.X, d.F, d.C, d.Y, rec[0].algo, &ws_bytes);
    OK(nrec == CUDNN_CONVOLUTION_FWD_ALGO_COUNT && rec[0].status == CUDNN_STATUS_SUCCESS &&
           rec[0].memory == ws_bytes && ws_bytes > 0 && rec[0].mathType == CUDNN_FMA_MATH,
       "the forward heuristic: every algorithm, the first usable, its workspace (%zu bytes) what "
       "cudnnGetConvolutionForwardWorkspaceSize says", ws_bytes);
    cudnnConvolutionBwdFilterAlgoPerf_t frec[8];
    cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.X, d.Y, d.C, d.F, 8, &nrec, frec);
    OK(nrec > 1 && frec[0].determinism == CUDNN_NON_DETERMINISTIC &&
           frec[0].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
       "the filter heuristic's first record is ALGO_0, flagged non-deterministic (a caller must filter)");
    float *ws = dev_floats((int)(ws_bytes / 4 + 1));
    const float one = 1.0f, zero = 0.0f;
    OK(cudnnConvolutionForward(h, &one, d.X, dx, d.F, df, d.C, rec[0].algo, ws, ws_bytes, &zero, d.Y, dy) ==
           CUDNN_STATUS_SUCCESS, "cudnnConvolutionForward");
    cudaStreamSynchronize(s);
    std::vector<float> y = get(dy, 2 * 6 * 4 * 4);
    std::vector<double> r = ref_conv(x, f, 2, 4, 7, 6, 6, 3, 2, 1, 0, 2, 1, 1, 2, 2, 4, 4);
    double worst = 0;
    for (size_t i = 0; i < r.size(); i++)
        worst = fmax(worst, fabs(y[i] - r[i]));
    OK(worst < 1e-5, "forward = the definition of grouped, strided, padded, dilated cross-correlation (err %.1e)",
       worst);
    /* beta 1 adds; a capture records it, the graph's launch runs it */
    cudaGraph_t g = NULL;
    cudaGraphExec_t gx = NULL;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    cudnnStatus_t cs =
        cudnnConvolutionForward(h, &one, d.X, dx, d.F, df, d.C, rec[0].algo, ws, ws_bytes, &one, d.Y, dy);
    OK(cs == CUDNN_STATUS_SUCCESS && cudaStreamEndCapture(s, &g) == cudaSuccess && get(dy, 1)[0] == y[0],
       "a convolution captured: nothing ran");
    cudaGraphInstantiate(&gx, g, 0);
    cudaGraphLaunch(gx, s);
    cudaStreamSynchronize(s);
    OK(get(dy, 1)[0] == 2.0f * y[0], "the graph's launch runs it, beta 1 adding to y");
    cudaGraphExecDestroy(gx);
    cudaGraphDestroy(g);

    /* what cuDNN rejects */
    cudnnTensorDescriptor_t t;
    cudnnCreateTensorDescriptor(&t);
    OK(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 0, 3, 3) == CUDNN_STATUS_BAD_PARAM,
       "a tensor with 0 channels: CUDNN_STATUS_BAD_PARAM");
    cudnnConvolutionDescriptor_t c;
    cudnnCreateConvolutionDescriptor(&c);
    OK(cudnnSetConvolution2dDescriptor(c, -1, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
               CUDNN_STATUS_BAD_PARAM &&
           cudnnSetConvolution2dDescriptor(c, 0, 0, 1, 0, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
               CUDNN_STATUS_BAD_PARAM &&
           cudnnSetConvolutionGroupCount(c, 0) == CUDNN_STATUS_BAD_PARAM,
       "a negative pad, a zero stride, zero groups: CUDNN_STATUS_BAD_PARAM");
    cudnnSetConvolution2dDescriptor(c, 1, 0, 2, 1, 1, 2, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
    OK(cudnnGetConvolution2dForwardOutputDim(c, d.X, d.F, &n, &k, &oh, &ow) == CUDNN_STATUS_BAD_PARAM,
       "a filter of 2 channels on 4 with one group: CUDNN_STATUS_BAD_PARAM");
    cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 6, 4, 3);
    OK(cudnnConvolutionForward(h, &one, d.X, dx, d.F, df, d.C, rec[0].algo, ws, ws_bytes, &zero, t, dy) ==
           CUDNN_STATUS_BAD_PARAM, "an output descriptor that is not the convolution's output: CUDNN_STATUS_BAD_PARAM");
    OK(cudnnConvolutionForward(h, &one, d.X, dx, d.F, df, d.C, rec[0].algo, ws, ws_bytes - 1, &zero, d.Y, dy) ==
           CUDNN_STATUS_BAD_PARAM, "a workspace a byte smaller than the algorithm's: CUDNN_STATUS_BAD_PARAM");
    OK(cudnnConvolutionForward(h, &one, d.X, dx, d.F, df, d.C, rec[0].algo, NULL, ws_bytes, &zero, d.Y, dy) ==
           CUDNN_STATUS_BAD_PARAM, "a null workspace of non-zero size: CUDNN_STATUS_BAD_PARAM");
    size_t fft = 0;
    OK(cudnnGetConvolutionForwardWorkspaceSize(h, d.X, d.F, d.C, d.Y, CUDNN_CONVOLUTION_FWD_ALGO_FFT, &fft) ==
           CUDNN_STATUS_NOT_SUPPORTED, "FFT at stride 2: CUDNN_STATUS_NOT_SUPPORTED");
    OK(strcmp(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "CUDNN_STATUS_BAD_PARAM") == 0 &&
           cudnnGetVersion() == CUDNN_VERSION, "cudnnGetErrorString, cudnnGetVersion");
    cudnnDestroyTensorDescriptor(t);
    cudnnDestroyConvolutionDescriptor(c);
    cudaFree(dx), cudaFree(df), cudaFree(dy), cudaFree(ws);
    cudnnDestroy(h);
    child_stops("dnn-overrun", {}, "cudnnConvolutionForward: y:", "an output smaller than its descriptor");
}

static int run_child(const char *name, int argc, char **argv)
{
    if (!strcmp(name, "divergent-barrier")) {
        int *p = NULL;
        cudaMalloc((void **)&p, 1024);
        divergent_barrier_kernel<<<1, 256>>>(p);
        return 0;
    }
    if (!strcmp(name, "divergent-shuffle")) {
        float *p = dev_floats(32);
        divergent_shuffle_kernel<<<1, 32>>>(p);
        return 0;
    }
    if (!strcmp(name, "host-pointer-arg")) {
        static float host[16];
        fill_kernel<<<1, 16>>>(host, 16, 1.0f);
        return 0;
    }
    if (!strcmp(name, "overrun")) {
        float *p = dev_floats(1000);
        overrun_kernel<<<1, 32>>>(p, 1000);
        return 0;
    }
    if (!strcmp(name, "lagging-device")) {
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        float *d = dev_floats(16), *pinned = NULL;
        cudaMallocHost((void **)&pinned, 64);
        put(d, std::vector<float>(16, 7.0f));
        pinned[0] = 1.0f;
        cudaEvent_t ev;
        cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        cudaMemcpyAsync(pinned, d, 64, cudaMemcpyDeviceToHost, s);
        cudaEventRecord(ev, s);
        float before = pinned[0];
        cudaError_t q = cudaEventQuery(ev);
        cudaError_t last = cudaGetLastError();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double took_us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
        const char *lag = getenv("PG_EMU_LAG_US");
        cudaStreamSynchronize(s);
        float after = pinned[0];
        printf("before %g (%s, last error %s), after %g (%s); the host's look took %.0f us\n", before,
               cudaGetErrorName(q), cudaGetErrorName(last), after, cudaGetErrorName(cudaEventQuery(ev)), took_us);
        int good = before == 1.0f && q == cudaErrorNotReady && last == cudaSuccess && after == 7.0f &&
                   cudaEventQuery(ev) == cudaSuccess;
        /* the host descheduled for longer than the lag (a loaded machine) proves nothing: say so, to be run again */
        if (!good && lag && took_us >= (double)atol(lag))
            return 3;
        return !good;
    }
    if (!strcmp(name, "host-touches-device")) {
        float *d = dev_floats(16);
        volatile float v = d[3]; /* a GPU's host code cannot do this */
        (void)v;
        printf("read without a fault: no protection keys on this machine\n");
        return 0;
    }
    if (!strcmp(name, "replay-after-free")) {
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        float *d = dev_floats(256);
        cudaGraph_t g;
        cudaGraphExec_t x;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        fill_kernel<<<1, 256, 0, s>>>(d, 256, 1.0f);
        cudaStreamEndCapture(s, &g);
        cudaGraphInstantiate(&x, g, 0);
        cudaFree(d);
        cudaGraphLaunch(x, s);
        cudaStreamSynchronize(s);
        return 0;
    }
    if (!strcmp(name, "ipc-import") && argc >= 2) {
        cudaIpcMemHandle_t mh;
        cudaIpcEventHandle_t eh;
        unhex(argv[0], &mh, sizeof mh);
        unhex(argv[1], &eh, sizeof eh);
        void *p = NULL;
        cudaEvent_t ev;
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess) || cudaIpcOpenEventHandle(&ev, eh))
            return 1;
        float v[2];
        cudaStreamWaitEvent(s, ev, 0);
        cudaMemcpyAsync(v, p, 4, cudaMemcpyDeviceToHost, s);
        cudaMemcpyAsync(v + 1, (float *)p + 1023, 4, cudaMemcpyDeviceToHost, s);
        float mark = 42.0f;
        cudaMemcpyAsync((float *)p + 1000, &mark, 4, cudaMemcpyHostToDevice, s);
        cudaStreamSynchronize(s);
        printf("imported %g %g\n", v[0], v[1]);
        return cudaIpcCloseMemHandle(p) != cudaSuccess;
    }
    if (!strcmp(name, "ipc-hold") && argc >= 1) { /* opens the handle, then waits for stdin to close */
        cudaIpcMemHandle_t mh;
        unhex(argv[0], &mh, sizeof mh);
        void *p = NULL;
        if (cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess))
            return 1;
        printf("ready: mapped\n");
        fflush(stdout);
        char c;
        while (read(0, &c, 1) > 0)
            ;
        return 0;
    }
    if (!strcmp(name, "hold-context")) { /* the GPU's context, held until stdin closes */
        if (cudaFree(0) != cudaSuccess)
            return 1;
        printf("ready: a context\n");
        fflush(stdout);
        char c;
        while (read(0, &c, 1) > 0)
            ;
        return 0;
    }
    if (!strcmp(name, "backend-init")) { /* what the CUDA backend says about this GPU */
        pg_ctx *c = pg_backend_init(0);
        printf("%s\n", c ? "backend made" : "no backend");
        pg_backend_free(c);
        return c ? 0 : 1;
    }
    if (!strcmp(name, "free-while-mapped")) {
        float *d = dev_floats(64);
        cudaIpcMemHandle_t mh;
        cudaIpcGetMemHandle(&mh, d);
        pid_t pid;
        int to;
        if (start_holder("ipc-hold", hex(&mh, sizeof mh).c_str(), NULL, &pid, &to))
            return 1;
        cudaFree(d); /* stops here: the holder still maps it (and sees its stdin close as we die) */
        stop_holder(pid, to);
        return 0;
    }
    if (!strcmp(name, "gemm-past-end") || !strcmp(name, "gemm-overlap")) {
        cublasHandle_t h;
        cublasCreate(&h);
        float *a = dev_floats(100), *b = dev_floats(100), *c = dev_floats(100);
        const float one = 1.0f, zero = 0.0f;
        if (!strcmp(name, "gemm-past-end")) /* 10 x 10 with lda 12 needs 118 floats */
            cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 10, 10, 10, &one, a, 12, b, 10, &zero, c, 10);
        else
            cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 5, 5, 5, &one, a, 5, b, 5, &zero, a + 10, 5);
        return 0;
    }
    if (!strcmp(name, "lt-misaligned")) {
        cublasLtHandle_t lt;
        cublasLtCreate(&lt);
        void *A = NULL, *B = NULL, *C = NULL, *bias = NULL;
        cudaMalloc(&A, 4096), cudaMalloc(&B, 4096), cudaMalloc(&C, 4096), cudaMalloc(&bias, 256);
        cublasLtMatmulDesc_t op;
        cublasLtMatrixLayout_t la, lb, lc;
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 8, 8, 8);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 8, 8, 8);
        cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 8, 8, 8);
        cublasLtMatmulPreferenceCreate(&pref);
        uint32_t al = 16;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, 4);
        cublasLtMatmulHeuristicResult_t res;
        int nres = 0;
        cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &nres);
        const float one = 1.0f, zero = 0.0f;
        cublasLtMatmul(lt, op, &one, (char *)A + 8, la, B, lb, &zero, C, lc, C, lc, &res.algo, NULL, 0, 0);
        cudaDeviceSynchronize();
        return 0;
    }
    if (!strcmp(name, "dnn-overrun")) { /* y one image short of its descriptor's two */
        cudnnHandle_t h;
        cudnnCreate(&h);
        dnn_case d;
        dnn_case_make(&d, 4, 4);
        float *x = dev_floats(2 * 4 * 7 * 6), *f = dev_floats(6 * 2 * 3 * 2), *y = dev_floats(6 * 4 * 4);
        const float one = 1.0f, zero = 0.0f;
        cudnnConvolutionForward(h, &one, d.X, x, d.F, f, d.C, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, NULL, 0, &zero,
                                d.Y, y);
        cudaDeviceSynchronize();
        return 0;
    }
    fprintf(stderr, "emu_rules: no child '%s'\n", name);
    return 2;
}

int main(int argc, char **argv)
{
    self = argv[0];
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && !strcmp(argv[1], "--child"))
        return run_child(argv[2], argc - 3, argv + 3);
    test_scheduler();
    test_launches();
    test_memory();
    test_capture();
    test_timing();
    test_ipc();
    test_blas();
    test_dnn();
    char lockdir[] = "/tmp/pg-emu-lock.XXXXXX";
    OK(mkdtemp(lockdir) != NULL, "a folder for the lock files of the compute-mode checks");
    test_devices(lockdir);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", lockdir);
    if (system(cmd) != 0)
        fprintf(stderr, "emu_rules: could not remove %s\n", lockdir);
    return DONE();
}

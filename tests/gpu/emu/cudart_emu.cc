/* tests/gpu/emu/cudart_emu.cc — the CUDA runtime on the CPU, for running
 * runtime/cuda unchanged in `make test` (tests/gpu/emu/README.md). It keeps
 * the rules a GPU keeps, so what breaks them fails here first:
 *
 *  - Device memory is its own mapping (a memfd, so another process can open
 *    it by CUDA IPC), 256-byte aligned and never 512 (nothing may assume more
 *    than cudaMalloc promises), filled with 0xff bytes (NaN) as it comes (a
 *    read before any write shows), a guard page after it (a kernel running
 *    past the end faults). With memory protection keys (x86 PKU), host
 *    threads cannot touch it at all: host code dereferencing a device
 *    pointer faults with a message, as it would on a GPU.
 *  - A stream is a worker thread running its operations in order; it starts
 *    a batch of work PG_EMU_LAG_US (100) microseconds after it was enqueued,
 *    so a host that reads a result without waiting sees the old bytes.
 *    Copies follow CUDA's synchronisation rules (pageable host to device:
 *    the bytes are taken at the call; device to pageable host: the call
 *    waits; pinned: asynchronous). Kernel launches check their geometry and
 *    that every pointer argument is device (or pinned) memory.
 *  - Events are sequence words, in shared memory when interprocess: record
 *    counts up at the call and the stream marks it done when it gets there;
 *    a wait waits for the count seen at the call (CUDA's semantics). A
 *    timing event takes the host's CLOCK_MONOTONIC when its stream executes
 *    the record: cudaEventElapsedTime is the emulated device's time between
 *    two of them (the host's speed, not a GPU's).
 *  - Stream capture records instead of running and refuses what the CUDA
 *    programming guide prohibits during capture: allocation and freeing,
 *    synchronous copies and sets, device synchronisation (from the capturing
 *    thread in thread-local mode, from any in global mode), synchronising or
 *    querying the capturing stream or a captured event, copies from or to
 *    pageable memory, waiting on an event from outside the capture; the
 *    call fails and the capture is invalidated (cudaStreamEndCapture says
 *    so). A graph launch replays the recorded operations, each checked
 *    again: memory freed since the capture stops the process.
 *  - CUDA IPC: memory handles open the exporter's memfd (/proc/PID/fd), event
 *    handles its event pool; opening one's own handle, an exporter freeing
 *    memory a live process still maps, or closing what was not opened are
 *    refused or reported.
 *  - The device: PG_EMU_GPUS emulated GPUs (1), CUDA_VISIBLE_DEVICES picks
 *    among them, each with a uuid from PG_EMU_MACHINE and its index (processes
 *    of one test agree on "the same GPU"); PG_EMU_MEM_MB of memory per process
 *    (16384); PG_EMU_COMPUTE_MODE (DEFAULT, EXCLUSIVE_PROCESS: a second
 *    process is refused its context, PROHIBITED); PG_EMU_DRIVER=old (every
 *    call says the driver is too old), none (no driver installed: the same
 *    error, and a driver version of 0, as the CUDA runtime reports it);
 *    PG_EMU_IPC_EVENTS=0 (no IPC events).
 *
 * Not emulated (a GPU alone shows these): a GPU's timing, occupancy, memory
 * bandwidth, cuBLAS's and the device's own rounding (tanhf, expf), the GPU's
 * memory model between concurrent blocks, texture and cooperative launches,
 * NCCL. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "emu_rt.h"

/* ---- the process's state ------------------------------------------------------ */

namespace {

const uint32_t HANDLE_MAGIC = 0x4d454750u; /* "PGEM" */
const size_t PAGE = 4096;
const int MAX_IMPORTERS = 16;

/* The first page of a device allocation's memfd: who maps it (IPC). */
struct meta {
    uint32_t magic;
    int32_t owner;
    uint64_t bytes;
    int32_t importers[MAX_IMPORTERS]; /* pids of processes that opened it, 0: free slot */
};

struct alloc {
    pg_emu_rt::region r;
    char *map;          /* the whole mapping (munmap on free) */
    size_t map_bytes;
    int fd;             /* device memory: its memfd; -1 otherwise */
    size_t file_bytes, user_off;
    meta *m;
};

/* An event's sequence words (in the process's event pool when interprocess)
 * and, for a timing event, when its stream executed its last record. */
struct ev_words {
    std::atomic<uint64_t> recorded, completed;
    std::atomic<int64_t> t_ns; /* CLOCK_MONOTONIC */
};
static_assert(sizeof(ev_words) <= 64, "an event's words fit a pool slot");

struct ipc_mem_handle {
    uint32_t magic, pid;
    int32_t fd, pad;
    uint64_t file_bytes, user_off, bytes;
};
struct ipc_ev_handle {
    uint32_t magic, pid;
    int32_t fd, index;
};
static_assert(sizeof(ipc_mem_handle) <= sizeof(cudaIpcMemHandle_t), "a memory handle fits CUDA's 64 bytes");
static_assert(sizeof(ipc_ev_handle) <= sizeof(cudaIpcEventHandle_t), "an event handle fits CUDA's 64 bytes");

const int POOL_EVENTS = 1024;

struct ev_pool {
    int fd;
    ev_words *w;
    int used;
};

struct settings {
    int gpus;              /* emulated GPUs on this machine */
    std::vector<int> visible;
    const char *machine;
    size_t mem_bytes;
    int compute_mode;
    int old_driver, no_driver; /* PG_EMU_DRIVER=old, none */
    int ipc_events;
    long lag_us;
    int pkey;              /* -1: no memory protection keys */
    const char *lockdir;
};

struct state {
    std::mutex mu;
    std::map<uintptr_t, alloc> allocs; /* by user base */
    uint64_t serial;
    size_t used;
    std::vector<cudaStream_t> streams;
    std::vector<ev_pool> pools;
    std::map<std::pair<int, int>, ev_words *> foreign_pools; /* (pid, fd) -> mapping */
    int device;
    int ctx_made, ctx_err;
    /* PG_EMU_COUNTS: how often the host waited for the device (stream, event
     * and device synchronisations, synchronous copies and sets), how many
     * timing events were recorded and elapsed times read */
    std::atomic<long> host_waits, timed_records, elapsed_reads;
    int lock_fd;
    settings cfg;
};

state *S; /* made once (pthread_once), never freed: streams outlive main */
pthread_once_t S_once = PTHREAD_ONCE_INIT;
thread_local cudaError_t last_error = cudaSuccess;
thread_local const pg_emu_rt::op *running_op; /* for fault messages */

int env_int(const char *name, int dflt)
{
    const char *e = getenv(name);
    return e && *e ? atoi(e) : dflt;
}

/* PG_EMU_COUNTS=FILE: at exit, one line per process appended to FILE (a
 * test counts the host's waits for the device per step). */
void write_counts()
{
    const char *path = getenv("PG_EMU_COUNTS");
    char line[200];
    int n = snprintf(line, sizeof line, "pid %ld host_waits %ld timed_records %ld elapsed_reads %ld\n", (long)getpid(),
                     S->host_waits.load(), S->timed_records.load(), S->elapsed_reads.load());
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, line, (size_t)n) != n)
        fprintf(stderr, "cuda-emu: PG_EMU_COUNTS=%s: cannot append the counts: %s\n", path, strerror(errno));
    if (fd >= 0)
        close(fd);
}

/* PKRU: the access rights of this thread to the device memory key. */
uint32_t pkru_read()
{
#if defined(__x86_64__)
    uint32_t eax, edx, ecx = 0;
    __asm__ volatile(".byte 0x0f, 0x01, 0xee" : "=a"(eax), "=d"(edx) : "c"(ecx)); /* rdpkru */
    return eax;
#else
    return 0;
#endif
}

void pkru_write(uint32_t v)
{
#if defined(__x86_64__)
    uint32_t ecx = 0, edx = 0;
    __asm__ volatile(".byte 0x0f, 0x01, 0xef" : : "a"(v), "c"(ecx), "d"(edx)); /* wrpkru */
#else
    (void)v;
#endif
}

/* This thread may (allow 1) or may not touch device memory. */
void dev_allow(int allow)
{
    if (S->cfg.pkey < 0)
        return;
    uint32_t bits = 3u << (2 * S->cfg.pkey);
    uint32_t v = pkru_read();
    pkru_write(allow ? v & ~bits : v | bits);
}

const char *region_words(const alloc &a, char *buf, size_t n)
{
    snprintf(buf, n, "%s #%llu of %zu bytes at %p", a.r.kind == pg_emu_rt::MEM_PINNED ? "pinned host allocation"
                     : a.r.imported ? "device allocation opened by CUDA IPC" : "device allocation",
             (unsigned long long)a.r.serial, a.r.bytes, (void *)a.r.base);
    return buf;
}

/* The allocation whose mapping (user range, slack or guard) holds p. */
const alloc *near_alloc(uintptr_t p)
{
    for (auto &kv : S->allocs)
        if (p >= (uintptr_t)kv.second.map && p < (uintptr_t)kv.second.map + kv.second.map_bytes + PAGE)
            return &kv.second;
    return nullptr;
}

void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    uintptr_t a = (uintptr_t)si->si_addr;
    const alloc *n = S ? near_alloc(a) : nullptr;
    char rw[200] = "";
    if (n)
        region_words(*n, rw, sizeof rw);
    const pg_emu_rt::op *o = running_op;
    if (si->si_code == 4 /* SEGV_PKUERR */ && n)
        fprintf(stderr, "cuda-emu: host code touched device memory at %p (%+lld bytes into the %s): on a GPU "
                "the host cannot dereference a device pointer; copy it with cudaMemcpy\n", (void *)a,
                (long long)(a - (uintptr_t)n->r.base), rw);
    else if (n && o)
        fprintf(stderr, "cuda-emu: %s (enqueued at %s:%d) accessed %p, %lld bytes past the end of the %s: a GPU "
                "faults here (cudaErrorIllegalAddress)\n", o->what, o->file, o->line, (void *)a,
                (long long)(a - ((uintptr_t)n->r.base + n->r.bytes)), rw);
    else if (n)
        fprintf(stderr, "cuda-emu: access at %p, %lld bytes past the end of the %s\n", (void *)a,
                (long long)(a - ((uintptr_t)n->r.base + n->r.bytes)), rw);
    else if (o)
        fprintf(stderr, "cuda-emu: %s (enqueued at %s:%d) faulted at %p: not device memory (a host pointer, or "
                "freed memory, given to the GPU)\n", o->what, o->file, o->line, (void *)a);
    else {
        signal(sig, SIG_DFL); /* not ours: the default action on return */
        return;
    }
    fflush(stderr);
    signal(SIGABRT, SIG_DFL);
    abort();
}

void init_once()
{
    S = new state();
    settings &c = S->cfg;
    c.gpus = env_int("PG_EMU_GPUS", 1);
    c.machine = getenv("PG_EMU_MACHINE") && *getenv("PG_EMU_MACHINE") ? getenv("PG_EMU_MACHINE") : "pipegen-emu";
    c.mem_bytes = (size_t)env_int("PG_EMU_MEM_MB", 16384) << 20;
    const char *m = getenv("PG_EMU_COMPUTE_MODE");
    c.compute_mode = !m || !*m || !strcmp(m, "DEFAULT") ? cudaComputeModeDefault
                     : !strcmp(m, "EXCLUSIVE_PROCESS")  ? cudaComputeModeExclusiveProcess
                     : !strcmp(m, "PROHIBITED")         ? cudaComputeModeProhibited
                                                        : -1;
    if (c.compute_mode < 0) {
        fprintf(stderr, "cuda-emu: PG_EMU_COMPUTE_MODE=%s: use DEFAULT, EXCLUSIVE_PROCESS or PROHIBITED\n", m);
        exit(2);
    }
    const char *d = getenv("PG_EMU_DRIVER");
    c.old_driver = d && (!strcmp(d, "old") || !strcmp(d, "none"));
    c.no_driver = d && !strcmp(d, "none");
    c.ipc_events = env_int("PG_EMU_IPC_EVENTS", 1);
    c.lag_us = env_int("PG_EMU_LAG_US", 100);
    c.lockdir = getenv("PG_EMU_LOCKDIR") && *getenv("PG_EMU_LOCKDIR") ? getenv("PG_EMU_LOCKDIR") : "/tmp";
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (!vis)
        for (int i = 0; i < c.gpus; i++)
            c.visible.push_back(i);
    else
        for (const char *p = vis; *p;) {
            char *end = NULL;
            long v = strtol(p, &end, 10);
            if (end == p || v < 0 || v >= c.gpus)
                break; /* as CUDA: the list ends at the first invalid entry */
            c.visible.push_back((int)v);
            p = *end == ',' ? end + 1 : end;
            if (*end && *end != ',')
                break;
        }
    S->lock_fd = -1;
    c.pkey = -1;
#if defined(__x86_64__) && defined(SYS_pkey_alloc)
    if (env_int("PG_EMU_PKEY", 1))
        c.pkey = (int)syscall(SYS_pkey_alloc, 0, 0);
    if (c.pkey < 0)
        c.pkey = -1;
#endif
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    dev_allow(0); /* this thread, and the threads it makes, are host threads */
    if (getenv("PG_EMU_COUNTS") && *getenv("PG_EMU_COUNTS"))
        atexit(write_counts);
}

state &st()
{
    pthread_once(&S_once, init_once);
    return *S;
}

/* An error result, recorded for cudaGetLastError (cudaErrorNotReady is a
 * status, not an error: CUDA does not record it either). */
cudaError_t fail(cudaError_t e)
{
    if (e != cudaErrorNotReady)
        last_error = e;
    return e;
}

#define RET(e) return fail(e)
/* the function's first line: the device (and its context) must be usable */
#define NEED_DRIVER()                                                                                                 \
    do {                                                                                                              \
        cudaError_t need_e_ = driver_ok();                                                                            \
        if (need_e_)                                                                                                  \
            return need_e_;                                                                                           \
    } while (0)
#define NEED_CTX()                                                                                                    \
    do {                                                                                                              \
        cudaError_t need_e_ = ctx();                                                                                  \
        if (need_e_)                                                                                                  \
            return need_e_;                                                                                           \
    } while (0)

/* The calling thread's capture sequences that a potentially unsafe call
 * breaks (thread-local mode: the ones it began; global: every one). */
cudaError_t capture_guard(const char *call);

/* ---- devices ------------------------------------------------------------------ */

cudaError_t driver_ok()
{
    st();
    if (S->cfg.old_driver)
        RET(cudaErrorInsufficientDriver);
    if (S->cfg.visible.empty())
        RET(cudaErrorNoDevice);
    return cudaSuccess;
}

void uuid_of(int dev, char out[16])
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = S->cfg.machine; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    uint64_t a = h ^ (0x9e3779b97f4a7c15ull * (uint64_t)(S->cfg.visible[(size_t)dev] + 1));
    uint64_t b = a * 0xbf58476d1ce4e5b9ull ^ 0x5043555045u; /* "EMUCP" */
    memcpy(out, &a, 8);
    memcpy(out + 8, &b, 8);
}

/* The context of the current device: what a first real call makes (and
 * where a GPU in EXCLUSIVE_PROCESS mode held by another process refuses). */
cudaError_t ctx()
{
    NEED_DRIVER();
    std::lock_guard<std::mutex> g(S->mu);
    if (S->ctx_made)
        return S->ctx_err ? fail((cudaError_t)S->ctx_err) : cudaSuccess;
    S->ctx_made = 1;
    if (S->cfg.compute_mode == cudaComputeModeProhibited)
        S->ctx_err = cudaErrorDevicesUnavailable;
    else if (S->cfg.compute_mode == cudaComputeModeExclusiveProcess) {
        char path[512], u[16];
        uuid_of(S->device, u);
        snprintf(path, sizeof path, "%s/pg-cuda-emu-%016llx.lock", S->cfg.lockdir, *(unsigned long long *)u);
        S->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (S->lock_fd < 0 || flock(S->lock_fd, LOCK_EX | LOCK_NB) != 0)
            S->ctx_err = cudaErrorDevicesUnavailable;
    }
    return S->ctx_err ? fail((cudaError_t)S->ctx_err) : cudaSuccess;
}

} // namespace

/* ---- errors ------------------------------------------------------------------------ */

static const struct {
    cudaError_t e;
    const char *name, *text;
} error_words[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidPitchValue, "cudaErrorInvalidPitchValue", "invalid pitch argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorDevicesUnavailable, "cudaErrorDevicesUnavailable", "CUDA-capable device(s) is/are busy or unavailable"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorMapBufferObjectFailed, "cudaErrorMapBufferObjectFailed", "mapping of buffer object failed"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
     "capture was not initiated in this stream"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {cudaErrorCapturedEvent, "cudaErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing stream"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const char *cudaGetErrorName(cudaError_t e)
{
    for (const auto &w : error_words)
        if (w.e == e)
            return w.name;
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e)
{
    for (const auto &w : error_words)
        if (w.e == e)
            return w.text;
    return "unrecognized error code";
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

cudaError_t cudaDriverGetVersion(int *v)
{
    st();
    *v = S->cfg.no_driver ? 0 : S->cfg.old_driver ? 11040 : 13000;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = 13000;
    return cudaSuccess;
}

/* ---- the helpers the other shims use ------------------------------------------------ */

namespace pg_emu_rt {

static void vnote(const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "cuda-emu: %s\n", msg);
    fflush(stderr);
}

void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vnote(fmt, ap);
    va_end(ap);
}

void violation(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vnote(fmt, ap);
    va_end(ap);
    abort();
}

void set_last(cudaError_t e) { last_error = e; }

dev_access::dev_access()
{
    st();
    saved = pkru_read();
    dev_allow(1);
}

dev_access::~dev_access()
{
    if (S->cfg.pkey >= 0)
        pkru_write(saved);
}

/* with S->mu held */
static const alloc *find_locked(uintptr_t p)
{
    auto it = S->allocs.upper_bound(p);
    if (it == S->allocs.begin())
        return nullptr;
    --it;
    const alloc &a = it->second;
    return p <= (uintptr_t)a.r.base + a.r.bytes ? &a : nullptr;
}

int find(const void *p, size_t bytes, region *out)
{
    st();
    std::lock_guard<std::mutex> g(S->mu);
    const alloc *a = find_locked((uintptr_t)p);
    if (!a || (uintptr_t)p + bytes > (uintptr_t)a->r.base + a->r.bytes)
        return 0;
    if (out)
        *out = a->r;
    return 1;
}

int classify(const void *p, size_t bytes, char *why, size_t whylen)
{
    st();
    std::lock_guard<std::mutex> g(S->mu);
    const alloc *a = find_locked((uintptr_t)p);
    if (!a)
        return MEM_HOST;
    if ((uintptr_t)p + bytes > (uintptr_t)a->r.base + a->r.bytes) {
        char rw[200];
        snprintf(why, whylen, "%zu bytes at %p run %lld bytes past the end of the %s", bytes, p,
                 (long long)((uintptr_t)p + bytes - ((uintptr_t)a->r.base + a->r.bytes)),
                 region_words(*a, rw, sizeof rw));
        return -1;
    }
    return a->r.kind;
}

} // namespace pg_emu_rt

using pg_emu_rt::op;

/* ---- streams ---------------------------------------------------------------------- */

struct CUstream_st {
    unsigned flags;
    int destroyed;                    /* cudaStreamDestroy'd: its work still runs, cudaFree still waits for it */
    std::mutex mu;
    std::condition_variable cv;       /* work came, or work was done */
    std::deque<op> q;
    uint64_t submitted, done;
    /* capture */
    int cap_status;                   /* cudaStreamCaptureStatus */
    int cap_mode;
    pthread_t cap_thread;
    uint64_t cap_id;
    const char *cap_why;              /* what invalidated it */
    std::vector<op> cap_ops;
};

struct CUevent_st {
    unsigned flags;
    ev_words *w;
    int imported;
    int pool_fd, index;
    uint64_t captured_in;             /* the capture it was last recorded in, 0: none */
};

struct CUgraph_st {
    std::vector<op> ops;
};

struct CUgraphExec_st {
    std::shared_ptr<std::vector<op>> ops;
};

namespace {

std::atomic<uint64_t> capture_ids{0};
CUstream_st legacy_stream_obj;

/* Runs o on this thread, its memory checked first. */
void execute(const op &o)
{
    for (const auto &r : o.ranges)
        if (r.first && !pg_emu_rt::find(r.first, r.second, NULL))
            pg_emu_rt::violation("%s (enqueued at %s:%d) uses %zu bytes at %p, which are no longer allocated (freed "
                                 "after the work was enqueued or captured into a CUDA graph)",
                                 o.what, o.file, o.line, r.second, r.first);
    const op *saved = running_op;
    running_op = &o;
    o.run();
    running_op = saved;
}

void nap_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

void worker(cudaStream_t s)
{
    dev_allow(1);
    for (;;) {
        op o;
        {
            std::unique_lock<std::mutex> g(s->mu);
            if (s->q.empty()) {
                s->cv.wait(g, [&] { return !s->q.empty(); });
                if (S->cfg.lag_us > 0) { /* a lagging device: see the top */
                    g.unlock();
                    nap_us(S->cfg.lag_us);
                    g.lock();
                }
            }
            o = std::move(s->q.front());
            s->q.pop_front();
        }
        execute(o);
        {
            std::lock_guard<std::mutex> g(s->mu);
            s->done++;
        }
        s->cv.notify_all();
    }
}

void stream_wait_idle(cudaStream_t s)
{
    std::unique_lock<std::mutex> g(s->mu);
    s->cv.wait(g, [&] { return s->done == s->submitted; });
}

std::vector<cudaStream_t> all_streams()
{
    std::lock_guard<std::mutex> g(S->mu);
    return S->streams;
}

void device_wait_idle()
{
    for (cudaStream_t s : all_streams())
        stream_wait_idle(s);
}

cudaStream_t real_stream(cudaStream_t s) { return s ? s : &legacy_stream_obj; }

/* The legacy stream: its work runs on the calling thread, after the blocking
 * streams' (non-blocking streams do not synchronise with it). */
void run_legacy(op &&o)
{
    for (cudaStream_t s : all_streams())
        if (!(s->flags & cudaStreamNonBlocking))
            stream_wait_idle(s);
    pg_emu_rt::dev_access a;
    execute(o);
}

void invalidate(cudaStream_t s, const char *why)
{
    if (s->cap_status == cudaStreamCaptureStatusActive) {
        s->cap_status = cudaStreamCaptureStatusInvalidated;
        s->cap_why = why;
        s->cap_ops.clear();
    }
}

cudaError_t capture_guard(const char *call)
{
    int hit = 0;
    pthread_t self = pthread_self();
    for (cudaStream_t s : all_streams()) {
        std::lock_guard<std::mutex> g(s->mu);
        if (s->cap_status != cudaStreamCaptureStatusActive || s->cap_mode == cudaStreamCaptureModeRelaxed)
            continue;
        if (s->cap_mode == cudaStreamCaptureModeGlobal || pthread_equal(s->cap_thread, self)) {
            invalidate(s, call);
            hit = 1;
        }
    }
    if (hit) {
        pg_emu_rt::note("%s during stream capture: not permitted (CUDA programming guide, \"Prohibited and "
                        "Unhandled Operations\"); the capture is invalidated", call);
        RET(cudaErrorStreamCaptureUnsupported);
    }
    return cudaSuccess;
}

} // namespace

namespace pg_emu_rt {

cudaError_t submit(cudaStream_t s, op &&o)
{
    st();
    if (!s) {
        for (cudaStream_t c : all_streams()) {
            std::lock_guard<std::mutex> g(c->mu);
            if (c->cap_status == cudaStreamCaptureStatusActive && !(c->flags & cudaStreamNonBlocking)) {
                invalidate(c, o.what);
                RET(cudaErrorStreamCaptureImplicit);
            }
        }
        run_legacy(std::move(o));
        return cudaSuccess;
    }
    {
        std::lock_guard<std::mutex> g(s->mu);
        if (s->cap_status == cudaStreamCaptureStatusActive) {
            s->cap_ops.push_back(std::move(o));
            return cudaSuccess;
        }
        if (s->cap_status == cudaStreamCaptureStatusInvalidated)
            RET(cudaErrorStreamCaptureInvalidated);
        s->q.push_back(std::move(o));
        s->submitted++;
    }
    s->cv.notify_all();
    return cudaSuccess;
}

} // namespace pg_emu_rt

/* ---- kernel launches (cuda_emu.h's operator*) ------------------------------------------ */

int pg_emu_launch(const pg_emu_launch_cfg &c, const pg_emu_ptrs &ptrs, std::function<void()> body)
{
    if (ctx())
        return 1;
    const dim3 &g = c.grid, &b = c.block;
    unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    if (!g.x || !g.y || !g.z || g.x > 2147483647u || g.y > 65535 || g.z > 65535 || !threads || b.x > 1024 ||
        b.y > 1024 || b.z > 64 || threads > 1024 || c.shmem > 48 * 1024) {
        pg_emu_rt::note("%s:%d: launch of %s with grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of dynamic shared "
                        "memory: outside CUDA's limits (grid x < 2^31, y and z <= 65535; at most 1024 threads a "
                        "block, z <= 64; 48 KiB)", c.file, c.line, c.name, g.x, g.y, g.z, b.x, b.y, b.z, c.shmem);
        pg_emu_rt::set_last(cudaErrorInvalidConfiguration);
        return 1;
    }
    op o(c.name, nullptr);
    o.file = c.file;
    o.line = c.line;
    for (int i = 0; i < ptrs.n; i++) {
        const void *p = ptrs.p[i];
        if (!p)
            continue;
        char why[300];
        int kind = pg_emu_rt::classify(p, 0, why, sizeof why);
        if (kind == pg_emu_rt::MEM_HOST)
            pg_emu_rt::violation("%s:%d: %s is launched with pointer argument %p, which is host memory no CUDA call "
                                 "allocated: on a GPU its accesses fault", c.file, c.line, c.name, p);
        o.ranges.push_back({p, 0});
    }
    pg_emu_launch_cfg cfg = c;
    o.run = [cfg, body]() {
        pg_emu::kernel_info saved = pg_emu::kinfo;
        pg_emu::kinfo = {cfg.name, cfg.file, cfg.line};
        pg_emu::run_grid(cfg.grid, cfg.block, [](void *p) { (*(const std::function<void()> *)p)(); },
                         (void *)&body);
        pg_emu::kinfo = saved;
    };
    cudaError_t e = pg_emu_rt::submit((cudaStream_t)c.stream, std::move(o));
    if (e)
        pg_emu_rt::set_last(e);
    return e != cudaSuccess;
}

/* ---- devices -------------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 0;
    NEED_DRIVER();
    *n = (int)S->cfg.visible.size();
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
    NEED_DRIVER();
    *d = S->device;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
    NEED_DRIVER();
    if (d < 0 || d >= (int)S->cfg.visible.size())
        RET(cudaErrorInvalidDevice);
    S->device = d;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    NEED_DRIVER();
    if (d < 0 || d >= (int)S->cfg.visible.size())
        RET(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "pipegen CUDA emulator (GPU %d of %s)", S->cfg.visible[(size_t)d],
             S->cfg.machine);
    uuid_of(d, p->uuid.bytes);
    p->totalGlobalMem = S->cfg.mem_bytes;
    p->sharedMemPerBlock = 48 * 1024;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;
    p->computeMode = S->cfg.compute_mode;
    p->pciBusID = S->cfg.visible[(size_t)d] + 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d)
{
    NEED_DRIVER();
    if (d < 0 || d >= (int)S->cfg.visible.size())
        RET(cudaErrorInvalidDevice);
    switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMultiProcessorCount: *v = 132; break;
    case cudaDevAttrComputeMode: *v = S->cfg.compute_mode; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrIpcEventSupport: *v = S->cfg.ipc_events; break;
    default: RET(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d)
{
    NEED_DRIVER();
    if (d < 0 || d >= (int)S->cfg.visible.size())
        RET(cudaErrorInvalidDevice);
    snprintf(bus, (size_t)len, "0000:%02x:00.0", S->cfg.visible[(size_t)d] + 1);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    cudaError_t e = ctx();
    if (e || (e = capture_guard("cudaDeviceSynchronize")))
        return e;
    S->host_waits++;
    device_wait_idle();
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    NEED_CTX();
    std::lock_guard<std::mutex> g(S->mu);
    *total_bytes = S->cfg.mem_bytes;
    *free_bytes = S->cfg.mem_bytes - S->used;
    return cudaSuccess;
}

/* ---- memory --------------------------------------------------------------------------- */

namespace {

uint64_t add_alloc(alloc &a)
{
    std::lock_guard<std::mutex> g(S->mu);
    a.r.serial = ++S->serial;
    S->allocs[(uintptr_t)a.r.base] = a;
    return a.r.serial;
}

/* file: [meta page][data pages]; mapping: the file, then a PROT_NONE guard page;
 * the user range ends within 512 bytes of the guard, 256-byte aligned and not 512. */
int map_device(int fd, size_t file_bytes, size_t user_off, size_t bytes, alloc *a)
{
    char *res = (char *)mmap(NULL, file_bytes + PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED)
        return -1;
    if (mmap(res, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        munmap(res, file_bytes + PAGE);
        return -1;
    }
#if defined(SYS_pkey_mprotect)
    if (S->cfg.pkey >= 0)
        syscall(SYS_pkey_mprotect, res + PAGE, file_bytes - PAGE, PROT_READ | PROT_WRITE, S->cfg.pkey);
#endif
    a->map = res;
    a->map_bytes = file_bytes;
    a->fd = fd;
    a->file_bytes = file_bytes;
    a->user_off = user_off;
    a->m = (meta *)res;
    a->r.base = res + user_off;
    a->r.bytes = bytes;
    a->r.kind = pg_emu_rt::MEM_DEVICE;
    return 0;
}

int pid_alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

} // namespace

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = NULL;
    cudaError_t e = ctx();
    if (e || (e = capture_guard("cudaMalloc")))
        return e;
    if (!bytes)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> g(S->mu);
        if (bytes > S->cfg.mem_bytes - S->used)
            RET(cudaErrorMemoryAllocation);
    }
    size_t data = (bytes + 512 + PAGE - 1) / PAGE * PAGE;
    size_t file_bytes = PAGE + data;
    size_t off = (data - bytes) / 256 * 256;
    if (off % 512 == 0)
        off -= 256;
    int fd = (int)syscall(SYS_memfd_create, "cuda-emu", 1u /* MFD_CLOEXEC */);
    alloc a;
    memset(&a, 0, sizeof a);
    if (fd < 0 || ftruncate(fd, (off_t)file_bytes) != 0 || map_device(fd, file_bytes, PAGE + off, bytes, &a) != 0) {
        if (fd >= 0)
            close(fd);
        RET(cudaErrorMemoryAllocation);
    }
    a.m->magic = HANDLE_MAGIC;
    a.m->owner = (int32_t)getpid();
    a.m->bytes = bytes;
    {
        pg_emu_rt::dev_access da;
        memset(a.r.base, 0xff, bytes); /* uninitialised device memory reads as NaN */
    }
    add_alloc(a);
    {
        std::lock_guard<std::mutex> g(S->mu);
        S->used += bytes;
    }
    *p = a.r.base;
    return cudaSuccess;
}

/* cudaFree and cudaFreeHost: allowed now? (p NULL: *done, nothing to free). Both synchronise the device. */
cudaError_t free_start(const char *call, void *p, int *done)
{
    cudaError_t e = ctx();
    if (e || (e = capture_guard(call)))
        return e;
    *done = !p;
    if (p)
        device_wait_idle();
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    int done = 0;
    cudaError_t e = free_start("cudaFree", p, &done);
    if (e || done)
        return e;
    alloc a;
    {
        std::lock_guard<std::mutex> g(S->mu);
        auto it = S->allocs.find((uintptr_t)p);
        if (it == S->allocs.end() || it->second.r.kind != pg_emu_rt::MEM_DEVICE || it->second.r.imported) {
            pg_emu_rt::note("cudaFree(%p): not the start of a device allocation of this process%s", p,
                            it != S->allocs.end() && it->second.r.imported ? " (memory opened by CUDA IPC is closed "
                                                                              "with cudaIpcCloseMemHandle)" : "");
            RET(cudaErrorInvalidValue);
        }
        a = it->second;
        for (int i = 0; i < MAX_IMPORTERS; i++) {
            int pid = __atomic_load_n(&a.m->importers[i], __ATOMIC_SEQ_CST);
            if (pid_alive(pid))
                pg_emu_rt::violation("cudaFree(%p): process %d still maps this allocation by CUDA IPC (it has not "
                                     "called cudaIpcCloseMemHandle): undefined behaviour for that process", p, pid);
        }
        S->allocs.erase(it);
        S->used -= a.r.bytes;
    }
    munmap(a.map, a.map_bytes + PAGE);
    close(a.fd);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    *p = NULL;
    cudaError_t e = ctx();
    if (e || (e = capture_guard("cudaMallocHost")))
        return e;
    size_t rounded = (bytes ? bytes : 1) + PAGE - 1;
    rounded -= rounded % PAGE;
    char *m = (char *)aligned_alloc(PAGE, rounded);
    if (!m)
        RET(cudaErrorMemoryAllocation);
    memset(m, 0xff, rounded);
    alloc a;
    memset(&a, 0, sizeof a);
    a.r.base = m;
    a.r.bytes = bytes;
    a.r.kind = pg_emu_rt::MEM_PINNED;
    a.map = m;
    a.map_bytes = rounded;
    a.fd = -1;
    add_alloc(a);
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    int done = 0;
    cudaError_t e = free_start("cudaFreeHost", p, &done);
    if (e || done)
        return e;
    std::lock_guard<std::mutex> g(S->mu);
    auto it = S->allocs.find((uintptr_t)p);
    if (it == S->allocs.end() || it->second.r.kind != pg_emu_rt::MEM_PINNED) {
        pg_emu_rt::note("cudaFreeHost(%p): not a pinned allocation (cudaMallocHost)", p);
        RET(cudaErrorInvalidValue);
    }
    S->allocs.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p)
{
    st();
    memset(a, 0, sizeof *a);
    pg_emu_rt::region r;
    if (!pg_emu_rt::find(p, 0, &r)) {
        a->type = cudaMemoryTypeUnregistered;
        return cudaSuccess;
    }
    a->type = r.kind == pg_emu_rt::MEM_DEVICE ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    a->device = S->device;
    a->devicePointer = (void *)p;
    a->hostPointer = r.kind == pg_emu_rt::MEM_PINNED ? (void *)p : NULL;
    return cudaSuccess;
}

/* ---- copies and sets --------------------------------------------------------------------- */

namespace {

/* The kinds of both ends, checked against `kind`: cudaSuccess or the error. */
cudaError_t copy_ends(const char *call, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, int *dk,
                      int *sk)
{
    char why[400];
    *dk = pg_emu_rt::classify(dst, bytes, why, sizeof why);
    if (*dk < 0) {
        pg_emu_rt::note("%s: the destination's %s", call, why);
        RET(cudaErrorInvalidValue);
    }
    *sk = pg_emu_rt::classify(src, bytes, why, sizeof why);
    if (*sk < 0) {
        pg_emu_rt::note("%s: the source's %s", call, why);
        RET(cudaErrorInvalidValue);
    }
    int dd = *dk == pg_emu_rt::MEM_DEVICE, sd = *sk == pg_emu_rt::MEM_DEVICE;
    int ok = kind == cudaMemcpyDefault || (kind == cudaMemcpyHostToDevice && dd && !sd) ||
             (kind == cudaMemcpyDeviceToHost && !dd && sd) || (kind == cudaMemcpyDeviceToDevice && dd && sd) ||
             (kind == cudaMemcpyHostToHost && !dd && !sd);
    if (!ok) {
        static const char *const kn[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost",
                                         "cudaMemcpyDeviceToDevice", "cudaMemcpyDefault"};
        pg_emu_rt::note("%s: %s from %s memory %p to %s memory %p", call, kn[kind], sd ? "device" : "host", src,
                        dd ? "device" : "host", dst);
        RET(cudaErrorInvalidMemcpyDirection);
    }
    return cudaSuccess;
}

/* (p, bytes) when it is CUDA memory (checked again when the copy runs), else nothing */
std::pair<const void *, size_t> cuda_range(const void *p, size_t bytes)
{
    return pg_emu_rt::find(p, bytes, NULL) ? std::make_pair(p, bytes) : std::make_pair((const void *)nullptr, (size_t)0);
}

op copy_op(const char *what, void *dst, const void *src, size_t bytes)
{
    op o(what, nullptr);
    o.run = [dst, src, bytes] { memcpy(dst, src, bytes); };
    o.ranges = {cuda_range(dst, bytes), cuda_range(src, bytes)};
    return o;
}

int capturing(cudaStream_t s)
{
    if (!s)
        return 0;
    std::lock_guard<std::mutex> g(s->mu);
    return s->cap_status != cudaStreamCaptureStatusNone;
}

void invalidate_locked(cudaStream_t s, const char *why)
{
    std::lock_guard<std::mutex> g(s->mu);
    invalidate(s, why);
}

} // namespace

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s)
{
    NEED_CTX();
    if (!bytes)
        return cudaSuccess;
    int dk, sk;
    cudaError_t e;
    if ((e = copy_ends("cudaMemcpyAsync", dst, src, bytes, kind, &dk, &sk)))
        return e;
    int pageable = dk == pg_emu_rt::MEM_HOST || sk == pg_emu_rt::MEM_HOST;
    if (pageable && capturing(s)) {
        invalidate_locked(s, "a copy from or to pageable host memory");
        pg_emu_rt::note("cudaMemcpyAsync of %zu bytes %s pageable host memory %p while the stream is captured: not "
                        "permitted (use pinned memory); the capture is invalidated", bytes,
                        dk == pg_emu_rt::MEM_HOST ? "to" : "from", dk == pg_emu_rt::MEM_HOST ? dst : src);
        RET(cudaErrorStreamCaptureUnsupported);
    }
    if (sk == pg_emu_rt::MEM_HOST && dk != pg_emu_rt::MEM_HOST) {
        /* pageable -> device: the bytes are taken now, the copy follows in order */
        auto snap = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + bytes);
        op o = copy_op("cudaMemcpyAsync (from pageable host memory)", dst, src, bytes);
        o.ranges[1].first = nullptr;
        o.run = [dst, snap] { memcpy(dst, snap->data(), snap->size()); };
        return pg_emu_rt::submit(s, std::move(o));
    }
    op o = copy_op("cudaMemcpyAsync", dst, src, bytes);
    if ((e = pg_emu_rt::submit(s, std::move(o))))
        return e;
    if (dk == pg_emu_rt::MEM_HOST && s) { /* device -> pageable host: returns when done */
        S->host_waits++;
        stream_wait_idle(s);
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t s)
{
    NEED_CTX();
    if (!width || !height)
        return cudaSuccess;
    cudaError_t e;
    if (dpitch < width || spitch < width) {
        pg_emu_rt::note("cudaMemcpy2DAsync: rows of %zu bytes with pitches %zu (destination) and %zu (source): a "
                        "pitch must be at least the width", width, dpitch, spitch);
        RET(cudaErrorInvalidPitchValue);
    }
    size_t dspan = (height - 1) * dpitch + width, sspan = (height - 1) * spitch + width;
    int dk, sk, dk2, sk2;
    if ((e = copy_ends("cudaMemcpy2DAsync", dst, src, 1, kind, &dk, &sk)))
        return e;
    char why[400];
    if ((dk2 = pg_emu_rt::classify(dst, dspan, why, sizeof why)) < 0 ||
        (sk2 = pg_emu_rt::classify(src, sspan, why, sizeof why)) < 0) {
        pg_emu_rt::note("cudaMemcpy2DAsync of %zu rows of %zu bytes: %s", height, width, why);
        RET(cudaErrorInvalidValue);
    }
    if ((dk == pg_emu_rt::MEM_HOST || sk == pg_emu_rt::MEM_HOST) && capturing(s)) {
        invalidate_locked(s, "a 2-D copy from or to pageable host memory");
        RET(cudaErrorStreamCaptureUnsupported);
    }
    if (dk == pg_emu_rt::MEM_HOST || sk == pg_emu_rt::MEM_HOST) {
        pg_emu_rt::note("cudaMemcpy2DAsync with pageable host memory: not emulated (runtime/cuda copies device to "
                        "device)");
        RET(cudaErrorNotSupported);
    }
    op o("cudaMemcpy2DAsync", nullptr);
    o.run = [=] {
        for (size_t r = 0; r < height; r++)
            memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    };
    o.ranges = {{dst, dspan}, {src, sspan}};
    return pg_emu_rt::submit(s, std::move(o));
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    NEED_CTX();
    if (!bytes)
        return cudaSuccess;
    char why[400];
    int k = pg_emu_rt::classify(p, bytes, why, sizeof why);
    if (k != pg_emu_rt::MEM_DEVICE) {
        if (k < 0)
            pg_emu_rt::note("cudaMemsetAsync: %s", why);
        else
            pg_emu_rt::note("cudaMemsetAsync(%p, %d, %zu): not device memory", p, value, bytes);
        RET(cudaErrorInvalidValue);
    }
    op o("cudaMemsetAsync", nullptr);
    o.run = [p, value, bytes] { memset(p, value, bytes); };
    o.ranges = {{p, bytes}};
    return pg_emu_rt::submit(s, std::move(o));
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    cudaError_t e = ctx();
    if (e || (e = capture_guard("cudaMemcpy")))
        return e;
    if (!bytes)
        return cudaSuccess;
    int dk, sk;
    if ((e = copy_ends("cudaMemcpy", dst, src, bytes, kind, &dk, &sk)))
        return e;
    S->host_waits++;
    return pg_emu_rt::submit(NULL, copy_op("cudaMemcpy", dst, src, bytes));
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    cudaError_t e = ctx();
    if (e || (e = capture_guard("cudaMemset")))
        return e;
    if (!bytes)
        return cudaSuccess;
    char why[400];
    if (pg_emu_rt::classify(p, bytes, why, sizeof why) != pg_emu_rt::MEM_DEVICE) {
        pg_emu_rt::note("cudaMemset(%p, %d, %zu): not inside device memory", p, value, bytes);
        RET(cudaErrorInvalidValue);
    }
    op o("cudaMemset", nullptr);
    o.run = [p, value, bytes] { memset(p, value, bytes); };
    o.ranges = {{p, bytes}};
    S->host_waits++;
    return pg_emu_rt::submit(NULL, std::move(o));
}

/* ---- streams ------------------------------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    *s = NULL;
    NEED_CTX();
    cudaStream_t n = new CUstream_st();
    n->flags = flags;
    std::thread(worker, n).detach(); /* lives as long as the process: a stuck stream never blocks exit */
    std::lock_guard<std::mutex> g(S->mu);
    S->streams.push_back(n);
    *s = n;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s)
        RET(cudaErrorInvalidResourceHandle);
    std::lock_guard<std::mutex> g(S->mu);
    auto it = std::find(S->streams.begin(), S->streams.end(), s);
    if (it == S->streams.end() || s->destroyed)
        RET(cudaErrorInvalidResourceHandle);
    /* the work already enqueued still runs (CUDA's semantics), and the device's
     * synchronisations wait for it: the stream stays listed, its worker too */
    s->destroyed = 1;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    NEED_CTX();
    S->host_waits++;
    if (!s) {
        device_wait_idle();
        return cudaSuccess;
    }
    {
        std::lock_guard<std::mutex> g(s->mu);
        if (s->cap_status != cudaStreamCaptureStatusNone) {
            invalidate(s, "cudaStreamSynchronize");
            pg_emu_rt::note("cudaStreamSynchronize of a stream being captured: not permitted; the capture is "
                            "invalidated");
            RET(cudaErrorStreamCaptureUnsupported);
        }
    }
    stream_wait_idle(s);
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
    NEED_CTX();
    cudaStream_t r = real_stream(s);
    std::lock_guard<std::mutex> g(r->mu);
    if (r->cap_status != cudaStreamCaptureStatusNone) {
        invalidate(r, "cudaStreamQuery");
        RET(cudaErrorStreamCaptureUnsupported);
    }
    return r->done == r->submitted ? cudaSuccess : fail(cudaErrorNotReady);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    NEED_CTX();
    if (!s) {
        pg_emu_rt::note("cudaStreamBeginCapture on the legacy stream: not permitted");
        RET(cudaErrorStreamCaptureUnsupported);
    }
    std::lock_guard<std::mutex> g(s->mu);
    if (s->cap_status != cudaStreamCaptureStatusNone)
        RET(cudaErrorIllegalState);
    s->cap_status = cudaStreamCaptureStatusActive;
    s->cap_mode = mode;
    s->cap_thread = pthread_self();
    s->cap_id = ++capture_ids;
    s->cap_why = NULL;
    s->cap_ops.clear();
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    *g = NULL;
    if (!s)
        RET(cudaErrorIllegalState);
    std::lock_guard<std::mutex> l(s->mu);
    if (s->cap_status == cudaStreamCaptureStatusNone)
        RET(cudaErrorIllegalState);
    if (s->cap_mode != cudaStreamCaptureModeRelaxed && !pthread_equal(s->cap_thread, pthread_self()))
        RET(cudaErrorStreamCaptureWrongThread);
    int bad = s->cap_status == cudaStreamCaptureStatusInvalidated;
    s->cap_status = cudaStreamCaptureStatusNone;
    if (bad) {
        pg_emu_rt::note("cudaStreamEndCapture: the capture was invalidated by %s", s->cap_why ? s->cap_why : "an error");
        RET(cudaErrorStreamCaptureInvalidated);
    }
    cudaGraph_t n = new CUgraph_st();
    n->ops.swap(s->cap_ops);
    *g = n;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status)
{
    *status = cudaStreamCaptureStatusNone;
    if (!s)
        return cudaSuccess;
    std::lock_guard<std::mutex> g(s->mu);
    *status = (enum cudaStreamCaptureStatus)s->cap_status;
    return cudaSuccess;
}

/* ---- events ------------------------------------------------------------------------------- */

namespace {

/* A slot of this process's interprocess event pool (memfd, shared). */
int pool_slot(ev_words **w, int *fd, int *index)
{
    std::lock_guard<std::mutex> g(S->mu);
    if (S->pools.empty() || S->pools.back().used == POOL_EVENTS) {
        int f = (int)syscall(SYS_memfd_create, "cuda-emu-events", 1u);
        size_t bytes = POOL_EVENTS * 64;
        if (f < 0 || ftruncate(f, (off_t)bytes) != 0) {
            if (f >= 0)
                close(f);
            return -1;
        }
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        if (m == MAP_FAILED) {
            close(f);
            return -1;
        }
        S->pools.push_back(ev_pool{f, (ev_words *)m, 0});
    }
    ev_pool &p = S->pools.back();
    *index = p.used++;
    *fd = p.fd;
    *w = (ev_words *)((char *)p.w + (size_t)*index * 64);
    return 0;
}

/* Waits until w's completed count reaches `target` (another stream or
 * process marks it): polls, as the device would spin. */
void wait_words(const ev_words *w, uint64_t target)
{
    for (int i = 0; w->completed.load(std::memory_order_acquire) < target; i++)
        if (i < 64)
            sched_yield();
        else
            nap_us(20);
}

} // namespace

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    *e = NULL;
    NEED_CTX();
    if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)) {
        pg_emu_rt::note("cudaEventCreateWithFlags: an interprocess event needs cudaEventDisableTiming too");
        RET(cudaErrorInvalidValue);
    }
    cudaEvent_t n = new CUevent_st();
    n->flags = flags;
    n->pool_fd = -1;
    if (flags & cudaEventInterprocess) {
        if (pool_slot(&n->w, &n->pool_fd, &n->index)) {
            delete n;
            RET(cudaErrorMemoryAllocation);
        }
    } else
        n->w = new ev_words();
    *e = n;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    if (!e)
        RET(cudaErrorInvalidResourceHandle);
    if (!(e->flags & cudaEventInterprocess) && !e->imported)
        delete e->w; /* pool slots stay: an importer may still look at them */
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    NEED_CTX();
    if (!e)
        RET(cudaErrorInvalidResourceHandle);
    if (e->imported) {
        pg_emu_rt::note("cudaEventRecord of an event opened by CUDA IPC: not emulated (the exporter records it)");
        RET(cudaErrorNotSupported);
    }
    if (s) {
        std::lock_guard<std::mutex> g(s->mu);
        if (s->cap_status == cudaStreamCaptureStatusActive) {
            e->captured_in = s->cap_id; /* a capture dependency, not a node */
            return cudaSuccess;
        }
        if (s->cap_status == cudaStreamCaptureStatusInvalidated)
            RET(cudaErrorStreamCaptureInvalidated);
    }
    e->captured_in = 0;
    uint64_t gen = e->w->recorded.fetch_add(1) + 1;
    ev_words *w = e->w;
    int timed = !(e->flags & cudaEventDisableTiming);
    if (timed)
        S->timed_records++;
    op o("cudaEventRecord", nullptr);
    o.run = [w, gen, timed] {
        if (timed) { /* the device's clock: when the stream got here */
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            w->t_ns.store((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec);
        }
        uint64_t c = w->completed.load();
        while (c < gen && !w->completed.compare_exchange_weak(c, gen))
            ;
    };
    return pg_emu_rt::submit(s, std::move(o));
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (!e)
        RET(cudaErrorInvalidResourceHandle);
    if (e->captured_in)
        RET(cudaErrorCapturedEvent);
    return e->w->completed.load() >= e->w->recorded.load() ? cudaSuccess : fail(cudaErrorNotReady);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (!e)
        RET(cudaErrorInvalidResourceHandle);
    if (e->captured_in)
        RET(cudaErrorCapturedEvent);
    S->host_waits++;
    wait_words(e->w, e->w->recorded.load());
    return cudaSuccess;
}

/* CUDA's rules: both events timing events (not cudaEventDisableTiming) that
 * were recorded outside a capture, both completed (else cudaErrorNotReady,
 * a status); the time between the moments their streams executed them. */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    NEED_CTX();
    if (!ms || !start || !end)
        RET(!ms ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
    for (cudaEvent_t e : {start, end}) {
        if (e->flags & cudaEventDisableTiming) {
            pg_emu_rt::note("cudaEventElapsedTime of an event created with cudaEventDisableTiming");
            RET(cudaErrorInvalidResourceHandle);
        }
        if (e->captured_in || !e->w->recorded.load()) {
            pg_emu_rt::note("cudaEventElapsedTime of an event %s", e->captured_in ? "last recorded in a stream capture"
                                                                                  : "never recorded");
            RET(cudaErrorInvalidResourceHandle);
        }
    }
    if (start->w->completed.load(std::memory_order_acquire) < start->w->recorded.load() ||
        end->w->completed.load(std::memory_order_acquire) < end->w->recorded.load())
        return fail(cudaErrorNotReady);
    S->elapsed_reads++;
    *ms = (float)((double)(end->w->t_ns.load() - start->w->t_ns.load()) * 1e-6);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)flags;
    NEED_CTX();
    if (!e)
        RET(cudaErrorInvalidResourceHandle);
    if (s) {
        std::lock_guard<std::mutex> g(s->mu);
        if (s->cap_status == cudaStreamCaptureStatusActive) {
            if (e->captured_in == s->cap_id)
                return cudaSuccess; /* ordered within the capture anyway: one stream */
            invalidate(s, "cudaStreamWaitEvent on an event from outside the capture");
            pg_emu_rt::note("cudaStreamWaitEvent while capturing, on an event not recorded in this capture: not "
                            "permitted without cudaEventWaitExternal; the capture is invalidated");
            RET(cudaErrorStreamCaptureIsolation);
        }
    }
    uint64_t target = e->w->recorded.load();
    if (!target)
        return cudaSuccess; /* never recorded: nothing to wait for */
    ev_words *w = e->w;
    op o("cudaStreamWaitEvent", nullptr);
    o.run = [w, target] { wait_words(w, target); };
    return pg_emu_rt::submit(s, std::move(o));
}

/* ---- graphs ------------------------------------------------------------------------------- */

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags)
{
    (void)flags;
    *exec = NULL;
    if (!g)
        RET(cudaErrorInvalidValue);
    cudaGraphExec_t x = new CUgraphExec_st();
    x->ops = std::make_shared<std::vector<op>>(g->ops);
    *exec = x;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s)
{
    NEED_CTX();
    if (!exec)
        RET(cudaErrorInvalidValue);
    if (capturing(s)) {
        pg_emu_rt::note("cudaGraphLaunch into a capturing stream: not emulated");
        RET(cudaErrorNotSupported);
    }
    std::shared_ptr<std::vector<op>> ops = exec->ops;
    op o("cudaGraphLaunch", nullptr);
    o.run = [ops] {
        for (const op &n : *ops)
            execute(n);
    };
    return pg_emu_rt::submit(s, std::move(o));
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    delete g;
    return cudaSuccess;
}

/* ---- CUDA IPC ------------------------------------------------------------------------------ */

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p)
{
    NEED_CTX();
    memset(h, 0, sizeof *h);
    std::lock_guard<std::mutex> g(S->mu);
    auto it = S->allocs.find((uintptr_t)p);
    if (it == S->allocs.end() || it->second.r.kind != pg_emu_rt::MEM_DEVICE || it->second.r.imported) {
        pg_emu_rt::note("cudaIpcGetMemHandle(%p): not the start of a device allocation of this process", p);
        RET(cudaErrorInvalidValue);
    }
    const alloc &a = it->second;
    ipc_mem_handle m = {HANDLE_MAGIC, (uint32_t)getpid(), a.fd, 0, a.file_bytes, a.user_off, a.r.bytes};
    memcpy(h, &m, sizeof m);
    return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned flags)
{
    (void)flags;
    *p = NULL;
    NEED_CTX();
    ipc_mem_handle m;
    memcpy(&m, &h, sizeof m);
    if (m.magic != HANDLE_MAGIC) {
        pg_emu_rt::note("cudaIpcOpenMemHandle: not a handle of this emulator");
        RET(cudaErrorInvalidResourceHandle);
    }
    if (m.pid == (uint32_t)getpid()) {
        pg_emu_rt::note("cudaIpcOpenMemHandle: a process cannot open its own memory handle");
        RET(cudaErrorInvalidValue);
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/fd/%d", m.pid, m.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        pg_emu_rt::note("cudaIpcOpenMemHandle: cannot open process %u's allocation (%s: %s): has it exited?", m.pid,
                        path, strerror(errno));
        RET(cudaErrorMapBufferObjectFailed);
    }
    alloc a;
    memset(&a, 0, sizeof a);
    if (map_device(fd, m.file_bytes, m.user_off, m.bytes, &a) != 0) {
        close(fd);
        RET(cudaErrorMapBufferObjectFailed);
    }
    a.r.imported = 1;
    int slot = -1;
    for (int i = 0; i < MAX_IMPORTERS && slot < 0; i++) {
        int32_t zero = 0;
        if (__atomic_compare_exchange_n(&a.m->importers[i], &zero, (int32_t)getpid(), 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            slot = i;
    }
    if (slot < 0)
        pg_emu_rt::note("cudaIpcOpenMemHandle: more than %d importers of one allocation; the free check misses this one",
                        MAX_IMPORTERS);
    add_alloc(a);
    *p = a.r.base;
    return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void *p)
{
    alloc a;
    {
        st();
        std::lock_guard<std::mutex> g(S->mu);
        auto it = S->allocs.find((uintptr_t)p);
        if (it == S->allocs.end() || !it->second.r.imported) {
            pg_emu_rt::note("cudaIpcCloseMemHandle(%p): not memory opened by cudaIpcOpenMemHandle", p);
            RET(cudaErrorInvalidValue);
        }
        a = it->second;
        S->allocs.erase(it);
    }
    for (int i = 0; i < MAX_IMPORTERS; i++) {
        int32_t me = (int32_t)getpid();
        __atomic_compare_exchange_n(&a.m->importers[i], &me, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    munmap(a.map, a.map_bytes + PAGE);
    close(a.fd);
    return cudaSuccess;
}

cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *h, cudaEvent_t e)
{
    memset(h, 0, sizeof *h);
    if (!e || !(e->flags & cudaEventInterprocess) || e->imported) {
        pg_emu_rt::note("cudaIpcGetEventHandle: the event was not created with cudaEventInterprocess here");
        RET(cudaErrorInvalidResourceHandle);
    }
    ipc_ev_handle m = {HANDLE_MAGIC, (uint32_t)getpid(), e->pool_fd, e->index};
    memcpy(h, &m, sizeof m);
    return cudaSuccess;
}

cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *e, cudaIpcEventHandle_t h)
{
    *e = NULL;
    NEED_CTX();
    ipc_ev_handle m;
    memcpy(&m, &h, sizeof m);
    if (m.magic != HANDLE_MAGIC || m.index < 0 || m.index >= POOL_EVENTS) {
        pg_emu_rt::note("cudaIpcOpenEventHandle: not an event handle of this emulator");
        RET(cudaErrorInvalidResourceHandle);
    }
    if (m.pid == (uint32_t)getpid()) {
        pg_emu_rt::note("cudaIpcOpenEventHandle: a process cannot open its own event handle");
        RET(cudaErrorInvalidValue);
    }
    ev_words *base = NULL;
    {
        std::lock_guard<std::mutex> g(S->mu);
        auto it = S->foreign_pools.find({(int)m.pid, m.fd});
        if (it != S->foreign_pools.end())
            base = it->second;
        else {
            char path[64];
            snprintf(path, sizeof path, "/proc/%u/fd/%d", m.pid, m.fd);
            int fd = open(path, O_RDWR | O_CLOEXEC);
            void *mp = fd < 0 ? MAP_FAILED : mmap(NULL, POOL_EVENTS * 64, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (fd >= 0)
                close(fd);
            if (mp == MAP_FAILED) {
                pg_emu_rt::note("cudaIpcOpenEventHandle: cannot open process %u's events (%s): has it exited?", m.pid,
                                path);
                RET(cudaErrorMapBufferObjectFailed);
            }
            base = (ev_words *)mp;
            S->foreign_pools[{(int)m.pid, m.fd}] = base;
        }
    }
    cudaEvent_t n = new CUevent_st();
    n->flags = cudaEventInterprocess | cudaEventDisableTiming;
    n->imported = 1;
    n->pool_fd = -1;
    n->w = (ev_words *)((char *)base + (size_t)m.index * 64);
    *e = n;
    return cudaSuccess;
}

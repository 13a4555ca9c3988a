/* tests/gpu/cuda_emu.h — CUDA's kernel language on the CPU (C++20), so that
 * the kernels of runtime/cuda run unchanged in `make test`: by themselves
 * (tests/gpu/flash_emu.cc and dp_sum_emu.cc call emu_launch), or inside the
 * whole emulated CUDA runtime (tests/gpu/emu/: the `kernel<<<...>>>(args)`
 * launches of a .cu file become `kernel * pg_emu_cfg(...)(args)`, which hands
 * the launch to the emulated stream, tests/gpu/emu/cudart_emu.cc).
 *
 * Blocks run one after another; the threads of a block are fibers (user-level
 * threads with their own stacks, switched by a few instructions), so a
 * 512 x 256-thread reduction costs some milliseconds, not 131072 OS threads.
 * A thread runs until it reaches a barrier (__syncthreads, or a warp
 * operation: a shuffle, the mma product); the block scheduler releases a
 * barrier when every thread it waits for has arrived, and runs the released
 * threads in a random order (PG_EMU_SEED, default 1; 0: thread order). So a
 * missing __syncthreads shows as a wrong result: a thread reads shared memory
 * another has not written yet, or overwrites what another has not read. A
 * __syncthreads that some threads of the block never reach (they returned
 * first), a warp operation some lanes never reach, or a deadlock stops the
 * process with the kernel, the block and the counts: on a GPU that hangs or
 * is undefined.
 *
 * Arithmetic is the host's IEEE arithmetic. Kernel code (__global__ and
 * __device__ functions, the lambdas they take) is compiled with contraction
 * on (GCC's optimize("fp-contract=fast"), FMA instructions where the build
 * enables them), as nvcc fuses a * b + c by default; the _rn intrinsics are
 * single IEEE operations that nothing fuses (their operands and results pass
 * through memory), as on the GPU. So a kernel that promises the CPU's bits
 * must spell them with _rn, here as there. Device tanhf/expf are the host
 * libm's (close to the GPU's, not equal). bf16 rounding is kernel_ref.h's
 * pg_ref_bf16 (round to nearest even, as __float2bfloat16_rn). `__shared__`
 * arrays are thread-local statics: one copy for the block being run, kept
 * from block to block (a read before any write sees the last block's values,
 * not garbage: not caught). There is deliberately no float atomicAdd: a
 * kernel using one does not compile here (runtime/cuda has no float atomics).
 * Warp operations and the m16n8k16 tensor-core product exchange values
 * through a per-warp buffer between two warp barriers; the product is
 * computed from the fragment layout as the PTX ISA defines it ("Matrix
 * Fragments for mma.m16n8k16 with floating point type"), written here
 * independently of the kernels' use of it. */
#ifndef PG_CUDA_EMU_H
#define PG_CUDA_EMU_H

#define PG_CUDA_EMU 1
#define PG_FLASH_EMU 1 /* flash_attn.cuh: the mma instruction is this file's */

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <atomic>
#include <functional>
#include <numeric>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if !defined(__x86_64__)
#error "tests/gpu/cuda_emu.h switches fibers with x86-64 code (pg_emu_fiber_switch): port it for this CPU"
#endif

#include "../../runtime/cuda/kernel_ref.h"

/* ---- qualifiers ------------------------------------------------------------ */

#define PG_EMU_KERNEL_CODE __attribute__((optimize("fp-contract=fast")))
#define __global__ PG_EMU_KERNEL_CODE
#define __device__ PG_EMU_KERNEL_CODE
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3;
typedef dim3 emu_dim3; /* tests/gpu/flash_emu.cc, dp_sum_emu.cc */

/* the running thread's coordinates: set by the scheduler before it runs a fiber */
inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
static constexpr int warpSize = 32;

/* ---- arithmetic -------------------------------------------------------------- */

/* A value nothing can fuse with: it passes through memory. */
template <class T>
static inline T pg_emu_opaque(T v)
{
    volatile T t = v;
    return t;
}

#define PG_EMU_RN2(name, T, op)                                                                                       \
    static inline T name(T a, T b) { return pg_emu_opaque((T)(pg_emu_opaque(a) op pg_emu_opaque(b))); }
PG_EMU_RN2(__fadd_rn, float, +)
PG_EMU_RN2(__fsub_rn, float, -)
PG_EMU_RN2(__fmul_rn, float, *)
PG_EMU_RN2(__fdiv_rn, float, /)
PG_EMU_RN2(__dadd_rn, double, +)
PG_EMU_RN2(__dsub_rn, double, -)
PG_EMU_RN2(__dmul_rn, double, *)
PG_EMU_RN2(__ddiv_rn, double, /)
#undef PG_EMU_RN2
static inline float __fsqrt_rn(float a) { return pg_emu_opaque(sqrtf(pg_emu_opaque(a))); }
static inline double __dsqrt_rn(double a) { return pg_emu_opaque(sqrt(pg_emu_opaque(a))); }
static inline float __frcp_rn(float a) { return pg_emu_opaque(1.0f / pg_emu_opaque(a)); }
static inline float __fmaf_rn(float a, float b, float c) { return pg_emu_opaque(fmaf(a, b, c)); }
static inline double __fma_rn(double a, double b, double c) { return pg_emu_opaque(fma(a, b, c)); }
/* CUDA's sincospi (the host's libm has none): x reduced exactly to f in
 * [-1/4, 1/4] and quadrant n, sin and cos of pi f by libm, rotated by n, so
 * integers and halves give exact zeros and ones as on a GPU. Within an ulp of
 * the device's result, not its bits (README "What it cannot show"). */
static inline void sincospi(double x, double *s, double *c)
{
    double n = rint(2.0 * x), f = x - 0.5 * n; /* exact: |x| < 2^52 */
    double sf = sin(M_PI * f), cf = cos(M_PI * f);
    switch ((int64_t)fmod(n, 4.0) & 3) {
    case 0: *s = sf, *c = cf; break;
    case 1: *s = cf, *c = -sf; break;
    case 2: *s = -sf, *c = -cf; break;
    default: *s = -cf, *c = sf; break;
    }
}
template <class T>
static inline T __ldg(const T *p)
{
    return *p;
}

/* ---- bf16 -------------------------------------------------------------------- */

struct __nv_bfloat16 {
    uint16_t bits;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
static_assert(sizeof(__nv_bfloat162) == 4, "two bf16 in one 32-bit register");

inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    float r = pg_ref_bf16(f);
    uint32_t u;
    memcpy(&u, &r, 4);
    return __nv_bfloat16{(uint16_t)(u >> 16)};
}

inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi)
{
    return __nv_bfloat162{__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}

/* The bf16 with bits h as a float (exact). */
inline float emu_bf16_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

inline float __bfloat162float(__nv_bfloat16 h) { return emu_bf16_float(h.bits); }

/* ---- integer atomics and fences (no float atomics: see the top) ---------------- */

template <class T>
static inline T pg_emu_atomic_min(T *p, T v)
{
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        ;
    return old;
}
inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) { return pg_emu_atomic_min(p, v); }
inline unsigned atomicMin(unsigned *p, unsigned v) { return pg_emu_atomic_min(p, v); }
inline int atomicMin(int *p, int v) { return pg_emu_atomic_min(p, v); }
inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicExch(unsigned long long *p, unsigned long long v)
{
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long cmp, unsigned long long v)
{
    __atomic_compare_exchange_n(p, &cmp, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
/* Another process (an IPC mapping) or the host may read what a kernel wrote:
 * the host's full fence covers the block, the device and the system. */
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }

/* ---- fibers: the threads of a block ----------------------------------------------- */

namespace pg_emu {

/* Saves the callee-saved registers on the current stack, stores its pointer
 * in *save, switches to the stack `to` and restores what is saved there
 * (SysV x86-64; kernels never change the floating-point control words, so
 * all fibers share them). One COMDAT copy per program. */
extern "C" void pg_emu_fiber_switch(void **save, void *to);
__asm__(".pushsection .text.pg_emu_fiber_switch,\"axG\",@progbits,pg_emu_fiber_switch,comdat\n"
        ".weak pg_emu_fiber_switch\n"
        ".type pg_emu_fiber_switch,@function\n"
        "pg_emu_fiber_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size pg_emu_fiber_switch, .-pg_emu_fiber_switch\n"
        ".popsection\n");

enum { F_RUN, F_BAR, F_WARP, F_DONE };

struct warp {
    int arrived, done, lanes;
    uint64_t xchg[32];             /* shuffles */
    uint32_t a[32][4], b[32][2];   /* mma operands */
};

/* What the kernel that runs is, for messages (set by the launcher). */
struct kernel_info {
    const char *name, *file;
    int line;
};
inline thread_local kernel_info kinfo = {"a kernel", "", 0};

[[noreturn]] inline void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
inline void fail(const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda-emu: %s%s%s%.0d%s block (%u,%u,%u): %s\n", kinfo.name, *kinfo.file ? " (launched at " : "",
            kinfo.file, kinfo.line, *kinfo.file ? ")," : ",", blockIdx.x, blockIdx.y, blockIdx.z, msg);
    fflush(stderr);
    abort();
}

/* One OS thread's fiber stacks (kept for its next launches), guard page below each. */
struct stacks {
    std::vector<char *> base;
    size_t bytes = 0;
    char *top(size_t i)
    {
        if (!bytes) {
            const char *e = getenv("PG_EMU_STACK_KB");
            bytes = (size_t)(e && atoi(e) >= 16 ? atoi(e) : 128) << 10;
        }
        while (base.size() <= i) {
            size_t page = 4096;
            char *p = (char *)mmap(NULL, bytes + page, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
            if (p == MAP_FAILED)
                fail("cannot map a %zu-byte fiber stack", bytes);
            mprotect(p, page, PROT_NONE); /* a stack overflow faults */
            base.push_back(p + page);
        }
        return base[i] + bytes;
    }
};

/* The block being run on this OS thread. */
struct block {
    unsigned n;                      /* threads */
    void (*fn)(void *);              /* the kernel body for one thread */
    void *arg;
    std::vector<void *> sp;          /* each fiber's saved stack pointer */
    std::vector<dim3> tid;           /* each fiber's threadIdx */
    std::vector<uint8_t> state;
    std::vector<int> runq;           /* runnable fibers, taken from the back */
    std::vector<int> ids;            /* scratch: the fibers a barrier releases */
    std::vector<warp> warps;
    int cur, live, bar_arrived;
    void *main_sp;
    uint64_t rng;
};
inline thread_local block *cur;
inline thread_local stacks fiber_stacks;

inline uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* PG_EMU_SEED: the order in which released threads run (0: thread order). */
inline uint64_t seed()
{
    static uint64_t s = [] {
        const char *e = getenv("PG_EMU_SEED");
        return e && *e ? strtoull(e, NULL, 0) : 1ull;
    }();
    return s;
}

/* Pushes the fibers in `ids` onto the run queue in a random order: from a
 * random start, with a random stride that is coprime with their count (so
 * any two of them run in either order, depending on the draw), forwards or
 * backwards. PG_EMU_SEED=0: thread order. */
inline void release(block &b, std::vector<int> &ids)
{
    size_t n = ids.size();
    size_t start = 0, stride = 1;
    if (seed() && n > 1) {
        uint64_t r = next_rand(&b.rng);
        start = (size_t)(r % n);
        stride = (size_t)((r >> 32) % n) | 1;
        while (std::gcd(stride, n) != 1)
            stride += 2;
        if (r & (1ull << 31))
            stride = n - stride; /* backwards */
    }
    b.runq.resize(n);
    size_t k = start;
    for (size_t i = 0; i < n; i++) { /* taken from the back: the first here runs last */
        int t = ids[k];
        b.state[(size_t)t] = F_RUN;
        b.runq[n - 1 - i] = t;
        k += stride;
        if (k >= n)
            k -= n;
    }
}

/* The calling fiber stops (its state already set): the next runnable fiber
 * runs, switched to directly, or the scheduler when none is left. */
inline void yield_next(block &b, void **save)
{
    if (!b.runq.empty()) {
        int t = b.runq.back();
        b.runq.pop_back();
        b.cur = t;
        threadIdx = b.tid[(size_t)t];
        pg_emu_fiber_switch(save, b.sp[(size_t)t]);
        return;
    }
    pg_emu_fiber_switch(save, b.main_sp);
}

extern "C" [[noreturn]] inline void pg_emu_fiber_entry()
{
    block &b = *cur;
    b.fn(b.arg);
    b.state[(size_t)b.cur] = F_DONE;
    b.live--;
    b.warps[(size_t)b.cur / 32].done++;
    void *dead;
    yield_next(b, &dead);
    __builtin_unreachable();
}

/* All runnable fibers have run: release a barrier, or fail. */
inline void release_barrier(block &b)
{
    std::vector<int> &ids = b.ids;
    ids.clear();
    if (b.bar_arrived == b.live) {
        if (b.live != (int)b.n)
            fail("__syncthreads reached by %d of %u threads (the others returned before it): a barrier in "
                 "divergent code hangs or corrupts on a GPU", b.live, b.n);
        for (unsigned t = 0; t < b.n; t++)
            if (b.state[t] == F_BAR)
                ids.push_back((int)t);
        b.bar_arrived = 0;
        release(b, ids);
        return;
    }
    for (size_t w = 0; w < b.warps.size(); w++) {
        warp &W = b.warps[w];
        if (!W.arrived || W.arrived != W.lanes - W.done)
            continue;
        if (W.done)
            fail("a warp operation (shuffle, mma, __syncwarp) in warp %zu reached by %d of its %d lanes (the others "
                 "returned): the full-mask operation is undefined then", w, W.arrived, W.lanes);
        for (unsigned t = (unsigned)w * 32; t < b.n && t < (unsigned)w * 32 + 32; t++)
            if (b.state[t] == F_WARP)
                ids.push_back((int)t);
        W.arrived = 0;
        release(b, ids);
        return;
    }
    int nw = 0;
    for (size_t w = 0; w < b.warps.size(); w++)
        nw += b.warps[w].arrived;
    fail("deadlock: %d threads wait at __syncthreads and %d at warp operations, %u returned: a barrier or a warp "
         "operation in divergent code", b.bar_arrived, nw, b.n - (unsigned)b.live);
}

/* Runs one block of n threads to its end on this OS thread. */
inline void run_block(block &b, const dim3 &bd)
{
    b.sp.assign(b.n, nullptr);
    b.state.assign(b.n, F_RUN);
    if (b.tid.size() != b.n) {
        b.tid.resize(b.n);
        for (unsigned t = 0; t < b.n; t++)
            b.tid[t] = dim3(t % bd.x, t / bd.x % bd.y, t / (bd.x * bd.y));
    }
    b.warps.assign((b.n + 31) / 32, warp{});
    for (size_t w = 0; w < b.warps.size(); w++)
        b.warps[w].lanes = (int)(b.n - w * 32 < 32 ? b.n - w * 32 : 32);
    b.live = (int)b.n;
    b.bar_arrived = 0;
    b.runq.clear();
    std::vector<int> &all = b.ids;
    all.resize(b.n);
    for (unsigned t = 0; t < b.n; t++) {
        all[t] = (int)t;
        /* the stack tops are staggered across cache sets: equal offsets in
         * every stack would make the fibers' frames evict each other */
        char *top = fiber_stacks.top(t) - (size_t)(t * 192) % 4096;
        /* the frame pg_emu_fiber_switch pops: six registers, then a "return"
         * into the entry with the stack as after a call */
        uint64_t *s = (uint64_t *)((uintptr_t)top & ~(uintptr_t)15);
        *--s = 0;
        *--s = (uint64_t)(uintptr_t)&pg_emu_fiber_entry;
        for (int r = 0; r < 6; r++)
            *--s = 0;
        b.sp[t] = s;
    }
    release(b, all);
    for (;;) {
        /* the released fibers run one after another, each switching to the
         * next, until none is runnable; then a barrier opens, or all are done */
        int t = b.runq.back();
        b.runq.pop_back();
        b.cur = t;
        threadIdx = b.tid[(size_t)t];
        pg_emu_fiber_switch(&b.main_sp, b.sp[(size_t)t]);
        if (b.live == 0)
            return;
        release_barrier(b);
    }
}

/* Runs the grid on this OS thread: blocks in order (x fastest), each to its
 * end, fn(arg) being one thread of the kernel. */
inline void run_grid(const dim3 &grid, const dim3 &bd, void (*fn)(void *), void *arg)
{
    static std::atomic<uint64_t> launches{0};
    block b;
    b.n = bd.x * bd.y * bd.z;
    b.fn = fn;
    b.arg = arg;
    b.rng = seed() ^ (0x5851f42d4c957f2dull * (launches.fetch_add(1) + 1));
    block *saved = cur;
    dim3 sb = blockIdx, sd = blockDim, sg = gridDim, st = threadIdx;
    cur = &b;
    blockDim = bd;
    gridDim = grid;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = dim3(x, y, z);
                run_block(b, bd);
            }
    cur = saved;
    blockIdx = sb, blockDim = sd, gridDim = sg, threadIdx = st;
}

/* The calling thread waits at a barrier of its block. */
inline void arrive(int what)
{
    block &b = *cur;
    b.state[(size_t)b.cur] = (uint8_t)what;
    if (what == F_BAR)
        b.bar_arrived++;
    else
        b.warps[(size_t)b.cur / 32].arrived++;
    yield_next(b, &b.sp[(size_t)b.cur]);
}

inline warp &my_warp() { return cur->warps[(size_t)cur->cur / 32]; }
inline unsigned my_lane() { return (unsigned)cur->cur % 32; }

} // namespace pg_emu

inline void __syncthreads() { pg_emu::arrive(pg_emu::F_BAR); }
inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
    pg_emu::arrive(pg_emu::F_WARP);
}

/* Runs body() as the kernel <<<grid, block>>> on the calling thread: blocks in
 * order, each block's threads as fibers (the tests that run one kernel by itself). */
template <class F>
inline void emu_launch(dim3 grid, dim3 block, F body)
{
    pg_emu::run_grid(grid, block, [](void *p) { (*(F *)p)(); }, &body);
}

/* ---- warp operations ------------------------------------------------------------- */

/* v of lane src of this warp, every lane passing its own (a full-mask shuffle) */
template <class T>
inline T pg_emu_shuffle(T v, unsigned src)
{
    static_assert(sizeof(T) <= 8, "shuffle of up to 8 bytes");
    pg_emu::warp &w = pg_emu::my_warp();
    memcpy(&w.xchg[pg_emu::my_lane()], &v, sizeof v);
    pg_emu::arrive(pg_emu::F_WARP);
    T r;
    memcpy(&r, &w.xchg[src % 32], sizeof r);
    pg_emu::arrive(pg_emu::F_WARP);
    return r;
}

template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lanemask)
{
    (void)mask;
    return pg_emu_shuffle(v, pg_emu::my_lane() ^ (unsigned)lanemask);
}

template <class T>
inline T __shfl_sync(unsigned mask, T v, int src)
{
    (void)mask;
    return pg_emu_shuffle(v, (unsigned)src);
}

/* A[row][col] of the m16n8k16 product from the lanes' A registers:
 * lane = 4 (row % 8) + (col % 8) / 2, register (row >= 8) + 2 (col >= 8),
 * the low half for an even col. */
inline float emu_a(const pg_emu::warp &w, int row, int col)
{
    uint32_t r = w.a[4 * (row % 8) + (col % 8) / 2][(row >= 8) + 2 * (col >= 8)];
    return emu_bf16_float((uint16_t)(col % 2 ? r >> 16 : r & 0xffffu));
}

/* B[row][col] (16 x 8): lane = 4 col + (row % 8) / 2, register row >= 8 */
inline float emu_b(const pg_emu::warp &w, int row, int col)
{
    uint32_t r = w.b[4 * col + (row % 8) / 2][row >= 8];
    return emu_bf16_float((uint16_t)(row % 2 ? r >> 16 : r & 0xffffu));
}

/* c += a b over the warp: C[row][col] with row = g (+8 for c2, c3),
 * col = 2t + (i & 1); products of bf16 values are exact in float, summed in k order. */
inline void mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    pg_emu::warp &w = pg_emu::my_warp();
    unsigned lane = pg_emu::my_lane();
    memcpy(w.a[lane], a, sizeof w.a[lane]);
    w.b[lane][0] = b0;
    w.b[lane][1] = b1;
    pg_emu::arrive(pg_emu::F_WARP);
    int g = (int)lane / 4, t = (int)lane % 4;
    float d[4];
    for (int i = 0; i < 4; i++) {
        int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
        float s = c[i];
        for (int k = 0; k < 16; k++)
            s += emu_a(w, row, k) * emu_b(w, k, col);
        d[i] = s;
    }
    pg_emu::arrive(pg_emu::F_WARP);
    memcpy(c, d, sizeof d);
}

/* ---- launches through the emulated runtime ------------------------------------------
 * tests/gpu/emu/emu_cu.sh rewrites `k<<<cfg>>>(args)` into
 * `k * pg_emu_cfg("k", __FILE__, __LINE__, cfg)(args)`: the arguments are
 * converted to the kernel's parameter types and copied, as a launch does, and
 * the launch goes to the stream (tests/gpu/emu/cudart_emu.cc). */
struct CUstream_st;
struct pg_emu_launch_cfg {
    const char *name, *file;
    int line;
    dim3 grid, block;
    size_t shmem;
    CUstream_st *stream;
};
/* The pointer arguments of a launch (checked: device memory, still allocated). */
struct pg_emu_ptrs {
    const void *p[24];
    int n;
};
/* cudart_emu.cc: checks the configuration and the pointers, then enqueues
 * body on the stream (or records it into the stream's capture). */
int pg_emu_launch(const pg_emu_launch_cfg &cfg, const pg_emu_ptrs &ptrs, std::function<void()> body);

template <class... A>
struct pg_emu_launch_args {
    pg_emu_launch_cfg cfg;
    std::tuple<A...> args;
};

struct pg_emu_cfg_t {
    pg_emu_launch_cfg cfg;
    template <class... A>
    pg_emu_launch_args<std::decay_t<A>...> operator()(A &&...a) const
    {
        return {cfg, std::tuple<std::decay_t<A>...>(std::forward<A>(a)...)};
    }
};

inline pg_emu_cfg_t pg_emu_cfg(const char *name, const char *file, int line, dim3 grid, dim3 block, size_t shmem = 0,
                               CUstream_st *stream = nullptr)
{
    return pg_emu_cfg_t{{name, file, line, grid, block, shmem, stream}};
}

template <class T>
inline void pg_emu_note_ptr(pg_emu_ptrs &ps, const T &v)
{
    if constexpr (std::is_pointer_v<T>)
        if (ps.n < (int)(sizeof ps.p / sizeof ps.p[0]))
            ps.p[ps.n++] = (const void *)v;
}

template <class... P, class... A>
inline void operator*(void (*kernel)(P...), pg_emu_launch_args<A...> &&l)
{
    static_assert(sizeof...(P) == sizeof...(A), "a kernel launch with the wrong number of arguments");
    std::tuple<P...> args = std::make_from_tuple<std::tuple<P...>>(std::move(l.args));
    pg_emu_ptrs ptrs{{}, 0};
    std::apply([&](const auto &...v) { (pg_emu_note_ptr(ptrs, v), ...); }, args);
    pg_emu_launch(l.cfg, ptrs, [kernel, args]() { std::apply(kernel, args); });
}

#endif

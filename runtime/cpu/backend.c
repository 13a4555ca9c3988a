/* runtime/cpu/backend.c — CPU backend lifetime, the arena, copies, errors.
 * Host memory is backend memory here, so copies are memcpy and sync is a no-op. */
#include <cblas.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cpu_kernels.h"
#include "pg_proc.h"

/* AddressSanitizer: clang says so by __has_feature, gcc by __SANITIZE_ADDRESS__ */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PG_ASAN 1
#endif
#endif
#if !defined(PG_ASAN) && defined(__SANITIZE_ADDRESS__)
#define PG_ASAN 1
#endif
#ifdef PG_ASAN
#include <sanitizer/asan_interface.h>
#endif

#define PG_ARENA_ALIGN 256 /* the plan's offset alignment (codegen/memplan.h), as cudaMalloc gives */

struct pg_ctx {
    int threads; /* OpenBLAS threads asked for; 0: OpenBLAS's own default */
};

/* Bytes of address space this process has mapped (VmSize), or 0 if unknown. */
static unsigned long long vm_size(void)
{
    return pg_proc_bytes("/proc/self/status", "VmSize:");
}

/* OpenBLAS reserves an address-space buffer (BUFFER_SIZE: 128 MiB in the
 * x86_64 builds, Debian's among them) for each thread that runs a GEMM the
 * first time it needs one, and when the reservation fails (ulimit -v) the
 * GEMM waits for a free buffer forever, silently. So at start one GEMM runs on
 * every thread, which reserves them all now, where a failure can be reported:
 * first the room RLIMIT_AS leaves is compared with what the buffers need; then
 * the GEMM runs on a helper thread, and if it has not finished within
 * BLAS_SETUP_S (it takes milliseconds) the stage says why and exits 1. */
#define BLAS_BUFFER_BYTES (128ull << 20)
#define BLAS_SETUP_S 20

typedef struct blas_setup {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} blas_setup;

static void *blas_warm(void *arg)
{
    blas_setup *b = arg;
    enum { N = 384 }; /* large enough that every thread takes part */
    static float m[3][N * N];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, N, 1.0f, m[0], N, m[1], N, 0.0f, m[2], N);
    pthread_mutex_lock(&b->mu);
    b->done = 1;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

static void say_no_room(int t, const char *what)
{
    struct rlimit rl;
    unsigned long long used = vm_size(), lim = getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                                                 ? (unsigned long long)rl.rlim_cur : 0;
    if (lim)
        fprintf(stderr, "stage %s: OpenBLAS %s: RLIMIT_AS (ulimit -v) allows %llu MiB and %llu MiB are mapped; "
                        "OpenBLAS takes %llu MiB of address space per thread (at least two buffers) before the "
                        "arena: raise ulimit -v or use fewer --threads (now %d)\n",
                getenv("PIPE_RANK") ? getenv("PIPE_RANK") : "0", what, lim >> 20, used >> 20, BLAS_BUFFER_BYTES >> 20,
                t);
    else
        fprintf(stderr, "stage %s: OpenBLAS %s (%llu MiB mapped)\n", getenv("PIPE_RANK") ? getenv("PIPE_RANK") : "0",
                what, used >> 20);
}

#ifndef PG_ASAN
/* Bytes of the anonymous mappings that look like OpenBLAS's buffers (whole
 * multiples of BLAS_BUFFER_BYTES; adjacent buffers merge into one mapping). */
static unsigned long long blas_reserved(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return 0;
    char line[512];
    unsigned long long sum = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b, inode;
        char perm[8], name[8] = "";
        if (sscanf(line, "%llx-%llx %7s %*s %*s %llu %7s", &a, &b, perm, &inode, name) < 4)
            continue;
        if (inode == 0 && !name[0] && !strcmp(perm, "rw-p") && b - a >= BLAS_BUFFER_BYTES &&
            (b - a) % BLAS_BUFFER_BYTES == 0)
            sum += b - a;
    }
    fclose(f);
    return sum;
}
#endif

static int blas_buffers(int threads)
{
    int t = threads > 0 ? threads : openblas_get_num_threads();
#ifndef PG_ASAN /* (AddressSanitizer maps terabytes of shadow and runs under no RLIMIT_AS) */
    /* measured with OpenBLAS 0.3.21: max(2, threads) buffers in all, some
     * reserved already when the threads were made */
    struct rlimit rl;
    unsigned long long used = vm_size(), all = (unsigned long long)(t > 2 ? t : 2) * BLAS_BUFFER_BYTES,
                       have = blas_reserved(), more = all > have ? all - have : 0;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        used + more + (16ull << 20) > (unsigned long long)rl.rlim_cur) {
        char what[96];
        snprintf(what, sizeof what, "cannot reserve its buffers (%llu MiB more)", more >> 20);
        say_no_room(t, what);
        fflush(stderr);
        _exit(1); /* (an orderly exit runs OpenBLAS's shutdown, which can wait forever here) */
    }
#endif
    blas_setup b = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    pthread_t th;
    if (pthread_create(&th, NULL, blas_warm, &b) != 0) {
        blas_warm(&b); /* no thread to spare: on this one */
        return 0;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += BLAS_SETUP_S;
    pthread_mutex_lock(&b.mu);
    while (!b.done && pthread_cond_timedwait(&b.cv, &b.mu, &until) == 0) {
    }
    int done = b.done;
    pthread_mutex_unlock(&b.mu);
    if (!done) { /* it waits for a buffer it will never get: say why and go */
        char what[64];
        snprintf(what, sizeof what, "could not reserve its buffers within %d s", BLAS_SETUP_S);
        say_no_room(t, what);
        fflush(stderr);
        _exit(1); /* (the helper is stuck inside OpenBLAS: no orderly exit) */
    }
    pthread_join(th, NULL);
    return 0;
}

pg_ctx *pg_backend_init(int threads)
{
    pg_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        pg_rt_error(__FILE__, __LINE__, "cannot allocate the CPU backend context (%zu bytes)", sizeof *c);
        return NULL;
    }
    c->threads = threads > 0 ? threads : 0;
    /* With OpenBLAS 0.3.21's SkylakeX kernels sgemm bits do not depend on the
     * thread count; with its Haswell/Zen kernels they do, so every stage of a
     * run must use the same count (see runtime/cpu/README.md). */
    if (threads > 0)
        openblas_set_num_threads(threads);
    if (blas_buffers(threads)) {
        free(c);
        return NULL;
    }
    return c;
}

void pg_backend_free(pg_ctx *c) { free(c); }

const char *pg_backend_name(void) { return "cpu"; }

void *pg_arena_create(pg_ctx *c, size_t bytes)
{
    (void)c;
    size_t rounded = bytes ? bytes : 1;
    if (rounded > SIZE_MAX - (PG_ARENA_ALIGN - 1)) {
        pg_rt_error(__FILE__, __LINE__, "arena of %zu bytes is too large to allocate", bytes);
        return NULL;
    }
    rounded = (rounded + PG_ARENA_ALIGN - 1) / PG_ARENA_ALIGN * PG_ARENA_ALIGN;
    void *p = aligned_alloc(PG_ARENA_ALIGN, rounded);
    if (!p) {
        pg_rt_error(__FILE__, __LINE__,
                    "cannot allocate the stage arena: %zu bytes (%.1f MiB); free memory or use more stages",
                    bytes, (double)bytes / (1024.0 * 1024.0));
        return NULL;
    }
    memset(p, 0, rounded);
    return p;
}

void pg_arena_destroy(pg_ctx *c, void *arena)
{
    (void)c;
    free(arena);
}

/* Poison the whole arena, then unpoison each buffer: buffers of disjoint
 * lifetimes may share bytes, and unpoisoning only ever widens what is
 * addressable, so the order does not matter. ASan keeps one shadow byte per 8
 * bytes that says how many of them, from the first, are addressable: a buffer
 * of 4 * odd bytes still gets its exact end. OpenBLAS is not instrumented: its
 * reads and writes (sgemm) go unchecked. */
void pg_arena_guard(pg_ctx *c, void *arena, size_t bytes, const pg_arena_buf *bufs, int n)
{
    (void)c;
#ifdef PG_ASAN
    if (!arena || n <= 0)
        return;
    unsigned char *a = arena;
    ASAN_POISON_MEMORY_REGION(a, bytes);
    for (int i = 0; i < n; i++) {
        if (bufs[i].off < 0 || bufs[i].bytes <= 0 || (uint64_t)bufs[i].off >= bytes)
            continue;
        size_t len = (size_t)bufs[i].bytes;
        if (len > bytes - (size_t)bufs[i].off)
            len = bytes - (size_t)bufs[i].off;
        ASAN_UNPOISON_MEMORY_REGION(a + bufs[i].off, len);
    }
#else
    (void)arena, (void)bytes, (void)bufs, (void)n;
#endif
}

int pg_copy_to_dev(pg_ctx *c, void *dst, const void *src, size_t bytes)
{
    (void)c;
    if (bytes)
        memmove(dst, src, bytes);
    return 0;
}

int pg_copy_to_host(pg_ctx *c, void *dst, const void *src, size_t bytes)
{
    (void)c;
    if (bytes)
        memmove(dst, src, bytes);
    return 0;
}

int pg_sync(pg_ctx *c)
{
    (void)c;
    return 0;
}

int pg_zero(pg_ctx *c, float *x, int64_t count)
{
    (void)c;
    if (count < 0)
        return PG_RT_FAIL("zero: negative count %lld", (long long)count);
    if (count)
        memset(x, 0, (size_t)count * sizeof *x);
    return 0;
}

int pg_copy(pg_ctx *c, float *dst, const float *src, int64_t count)
{
    (void)c;
    if (count < 0)
        return PG_RT_FAIL("copy: negative count %lld", (long long)count);
    if (count && dst != src)
        memmove(dst, src, (size_t)count * sizeof *dst);
    return 0;
}

int pg_axpy_inplace(pg_ctx *c, float *y, const float *x, int64_t count)
{
    (void)c;
    if (count < 0)
        return PG_RT_FAIL("axpy: negative count %lld", (long long)count);
    for (int64_t i = 0; i < count; i++)
        y[i] += x[i];
    return 0;
}

/* The step hooks (pg_ops.h): the CPU runs every op eagerly and writes its
 * results at once, so there is nothing to capture, defer or deliver. */
int pg_backend_step_begin(pg_ctx *c, const pg_step_info *s)
{
    (void)c;
    (void)s;
    return 0;
}

int pg_backend_compute(pg_ctx *c, int seg, double *scalar_dst)
{
    (void)c;
    (void)seg;
    (void)scalar_dst;
    return 0;
}

int pg_backend_compute_end(pg_ctx *c)
{
    (void)c;
    return 0;
}

int pg_backend_fetch(pg_ctx *c)
{
    (void)c;
    return 0;
}

int pg_backend_step_end(pg_ctx *c)
{
    (void)c;
    return 0;
}

/* Nothing runs asynchronously on the CPU, so nothing can be left waiting. */
int pg_backend_poisoned(const pg_ctx *c)
{
    (void)c;
    return 0;
}

void pg_backend_report(pg_ctx *c, int stage, int64_t arena_bytes, FILE *out)
{
    (void)c, (void)stage, (void)arena_bytes, (void)out;
}

/* bf16 is a CUDA-runtime compute setting: the CPU computes in f32 (its
 * results are then the f32 reference of the model) and says so once. */
int pg_backend_set_precision(pg_ctx *c, int precision)
{
    (void)c;
    if (precision == 1)
        fprintf(stderr, "note: precision = bf16 applies to the CUDA runtime; the CPU runtime computes in f32\n");
    else if (precision != 0)
        return PG_RT_FAIL("unknown precision %d (0 f32, 1 bf16)", precision);
    return 0;
}

/* bf16 shadow weights are a CUDA-runtime copy: the CPU's GEMMs read the f32
 * weights, so the planned shadows stay unused here. */
int pg_shadow_register(pg_ctx *c, const float *w, int64_t count, void *shadow)
{
    (void)c;
    if (!w || !shadow || count < 0)
        return PG_RT_FAIL("shadow_register: bad weight %p, shadow %p or count %lld", (const void *)w, shadow,
                          (long long)count);
    return 0;
}

int pg_param_written(pg_ctx *c, const float *w, int64_t count)
{
    (void)c, (void)w;
    if (count < 0)
        return PG_RT_FAIL("param_written: negative count %lld", (long long)count);
    return 0;
}

void pg_rt_error(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: error: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

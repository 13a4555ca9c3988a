/* runtime/cpu/backend.c — CPU backend lifetime, the arena, copies, errors.
 * Host memory is backend memory here, so copies are memcpy and sync is a no-op. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu_ctx.h"
#include "op_args.h"

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

#define PG_HUGE_PAGE ((size_t)2 << 20)
#define PG_ARENA_ALIGN 256 /* the plan's offset alignment (codegen/gen/memplan.h), as cudaMalloc gives */

pg_ctx *pg_backend_init(int threads)
{
    pg_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        pg_rt_error(__FILE__, __LINE__, "cannot allocate the CPU backend context (%zu bytes)", sizeof *c);
        return NULL;
    }
    if (threads <= 0) { /* the default: every online core */
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
    }
    c->threads = threads;
    /* The GEMMs (gemm.c) give the same bits for any thread count. */
    c->gemm = pg_cpu_gemm_pool_new(threads);
    if (!c->gemm) {
        free(c);
        return NULL;
    }
#ifdef PG_CPU_AVX2
    c->avx2 = pg_cpu_has_avx2() && strcmp(pg_cpu_gemm_kernel(c->gemm), "portable") != 0;
#endif
    return c;
}

void pg_backend_free(pg_ctx *c)
{
    if (!c)
        return;
    pg_cpu_gemm_pool_free(c->gemm);
    pg_cpu_wpack_free(c);
    free(c->rope_tab);
    free(c);
}

const char *pg_backend_name(void) { return "cpu"; }

void *pg_cpu_alloc_zeroed(size_t bytes)
{
    size_t rounded = bytes ? bytes : 1;
    if (rounded > SIZE_MAX - PG_HUGE_PAGE)
        return NULL;
    size_t align = PG_ARENA_ALIGN;
#ifdef MADV_HUGEPAGE
    if (rounded >= 4 * PG_HUGE_PAGE)
        align = PG_HUGE_PAGE;
#endif
    rounded = (rounded + align - 1) / align * align;
    void *p = aligned_alloc(align, rounded);
    if (!p)
        return NULL;
#ifdef MADV_HUGEPAGE
    /* 2 MiB pages where the kernel gives them on request (transparent huge
     * pages in "madvise" mode, Debian's default): a step streams the weights,
     * gradients and optimizer state, tens of MiB, through 4 KiB pages' TLB
     * misses otherwise. A refusal only leaves the small pages. */
    if (align == PG_HUGE_PAGE)
        (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
    memset(p, 0, rounded);
    return p;
}

void *pg_arena_create(pg_ctx *c, size_t bytes)
{
    (void)c;
    if (bytes > SIZE_MAX - PG_HUGE_PAGE) {
        pg_rt_error(__FILE__, __LINE__, "arena of %zu bytes is too large to allocate", bytes);
        return NULL;
    }
    void *p = pg_cpu_alloc_zeroed(bytes);
    if (!p)
        pg_rt_error(__FILE__, __LINE__,
                    "cannot allocate the stage arena: %zu bytes (%.1f MiB); free memory or use more stages",
                    bytes, (double)bytes / (1024.0 * 1024.0));
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
 * of 4 * odd bytes still gets its exact end; the GEMM (gemm.c) is compiled
 * with the sanitizers like every other kernel. */
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

/* The writes below mark the packed GEMM weights they overlap (wpack.c). */
int pg_copy_to_dev(pg_ctx *c, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memmove(dst, src, bytes);
    pg_cpu_wpack_touch(c, dst, bytes);
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
    if (pg_args_count("zero", count))
        return 1;
    if (count)
        memset(x, 0, (size_t)count * sizeof *x);
    pg_cpu_wpack_touch(c, x, (size_t)count * sizeof *x);
    return 0;
}

int pg_copy(pg_ctx *c, float *dst, const float *src, int64_t count)
{
    if (pg_args_count("copy", count))
        return 1;
    if (count && dst != src)
        memmove(dst, src, (size_t)count * sizeof *dst);
    pg_cpu_wpack_touch(c, dst, (size_t)count * sizeof *dst);
    return 0;
}

int pg_axpy_inplace(pg_ctx *c, float *y, const float *x, int64_t count)
{
    if (pg_args_count("axpy", count))
        return 1;
    for (int64_t i = 0; i < count; i++)
        y[i] += x[i];
    pg_cpu_wpack_touch(c, y, (size_t)count * sizeof *y);
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

/* Device time (pg_ops.h): the CPU's ops run at the call, so the host's clock
 * is the work's; step.c times them so and never marks. */
int pg_backend_device_clock(const pg_ctx *c)
{
    (void)c;
    return 0;
}

int pg_backend_mark(pg_ctx *c, int run_start)
{
    (void)c;
    (void)run_start;
    pg_rt_error(__FILE__, __LINE__, "pg_backend_mark: the CPU backend has no device clock (time it on the host)");
    return -1;
}

int pg_backend_mark_times(pg_ctx *c, double *sec, int n)
{
    (void)c;
    (void)sec;
    (void)n;
    return PG_RT_FAIL("pg_backend_mark_times: the CPU backend has no device clock (time it on the host)");
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
 * weights (or their packed copies, wpack.c), so the planned shadows stay
 * unused here. */
int pg_shadow_register(pg_ctx *c, const float *w, int64_t count, void *shadow)
{
    (void)c;
    if (!w || !shadow || count < 0)
        return PG_RT_FAIL("shadow_register: bad weight %p, shadow %p or count %lld", (const void *)w, shadow,
                          (long long)count);
    return 0;
}

/* The planned bf16 operand copies: the CPU rounds as it packs (unused here). */
int pg_bf16_workspace(pg_ctx *c, void *p, int64_t bytes)
{
    (void)c;
    if (!p || bytes <= 0)
        return PG_RT_FAIL("bf16_workspace: bad buffer %p of %lld bytes", p, (long long)bytes);
    return 0;
}

/* A weight written from outside the backend (received over the network):
 * its packed GEMM copies are packed again at their next use (wpack.c). */
int pg_param_written(pg_ctx *c, const float *w, int64_t count)
{
    if (pg_args_count("param_written", count))
        return 1;
    pg_cpu_wpack_touch(c, w, (size_t)count * sizeof *w);
    return 0;
}


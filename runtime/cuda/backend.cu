/* runtime/cuda/backend.cu — CUDA backend lifetime (device, stream, cuBLAS
 * handle), the arena (one cudaMalloc), host <-> device copies, the scratch
 * workspace, device-side id checks, the fixed-order final sum, pg_rt_error.
 * Everything runs on the context's one stream, so ops are ordered as called. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.h"
#include "op_args.h"
#include "cuda_backend.h"
#include "cuda_caps.h"

/* The one process-wide slot of the CUDA runtime (cuda_backend.h says why):
 * the live backend context, for the transport (cuda_net.cu). */
static struct {
    pg_ctx *ctx;
} pg_cuda_process;

pg_ctx *pg_cuda_process_ctx(void) { return pg_cuda_process.ctx; }

/* ---- kernel paths (README "Kernel paths") ---------------------------------- */

static const struct {
    const char *name;
    unsigned bit;
} kpath_names[] = {
    {"colsum", PG_CUDA_K_COLSUM}, {"pad", PG_CUDA_K_PAD}, {"shadow", PG_CUDA_K_SHADOW},
    {"flash", PG_CUDA_K_FLASH},   {"lt", PG_CUDA_K_LT},       {"msplit", PG_CUDA_K_MSPLIT},
};
#define NKPATHS (int)(sizeof kpath_names / sizeof kpath_names[0])
static_assert(NKPATHS == PG_CUDA_NKPATHS, "a name for every kernel path");

/* PIPE_CUDA_KERNELS: unset, empty or "fast": every fast path; "reference":
 * none (the kernels before them); else a comma list of the fast paths to use. */
static int parse_kernel_paths(const char *s, unsigned *out)
{
    *out = PG_CUDA_K_ALL;
    if (!s || !*s || !strcmp(s, "fast"))
        return 0;
    *out = 0;
    if (!strcmp(s, "reference"))
        return 0;
    for (const char *p = s; *p;) {
        size_t len = strcspn(p, ",");
        int k = 0;
        while (k < NKPATHS && !(strlen(kpath_names[k].name) == len && !strncmp(p, kpath_names[k].name, len)))
            k++;
        if (k == NKPATHS) {
            pg_rt_error(__FILE__, __LINE__, "PIPE_CUDA_KERNELS=%s: unknown kernel path '%.*s' (use fast, reference, "
                        "or a comma list of colsum, pad, shadow, flash, lt, msplit)", s, (int)len, p);
            return 1;
        }
        *out |= kpath_names[k].bit;
        p += len;
        if (*p == ',')
            p++;
    }
    return 0;
}

unsigned pg_cuda_kernel_paths(const pg_ctx *c) { return c->kpaths; }

void pg_cuda_set_kernel_paths(pg_ctx *c, unsigned paths) { c->kpaths = paths & PG_CUDA_K_ALL; }

int pg_cuda_lt_shapes(const pg_ctx *c)
{
    int n = 0;
    for (int i = 0; i < c->nlt_plans; i++)
        n += c->lt_plans[i].ok;
    return n;
}

/* ---- pinned staging of the step's host -> device copies (hstage.h) ------- */

static int hstage_alloc(void *u, size_t bytes, void **out)
{
    (void)u;
    CUDA_CHECK(cudaMallocHost(out, bytes));
    return 0;
}

static void hstage_release(void *u, void *buf)
{
    (void)u;
    cudaFreeHost(buf);
}

static int hstage_wait(void *u, int slot)
{
    pg_ctx *c = (pg_ctx *)u;
    CUDA_CHECK(cudaEventSynchronize(c->hstage_ev[slot]));
    return 0;
}

static int hstage_copy(void *u, int slot, void *dst, const void *src, size_t bytes)
{
    pg_ctx *c = (pg_ctx *)u;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    CUDA_CHECK(cudaEventRecord(c->hstage_ev[slot], c->stream));
    return 0;
}

static const pg_hstage_ops hstage_ops = {hstage_alloc, hstage_release, hstage_wait, hstage_copy};

/* Frees what init made so far; safe on a partly built context. A poisoned
 * context (pg_cuda_poison) has work that will never finish: waiting for it,
 * or freeing device or pinned memory (which synchronises the device), would
 * hang, so only host memory is freed and process exit does the rest. */
static void ctx_release(pg_ctx *c)
{
    if (!c)
        return;
    if (c->poisoned) {
        pg_hstage_free(&c->hstage, &hstage_ops, c, 1);
        free(c->segs);
        free(c->marks);
        free(c);
        return;
    }
    pg_hstage_free(&c->hstage, &hstage_ops, c, 0);
    if (c->conv_release)
        c->conv_release(c);
    for (int i = 0; i < PG_HSTAGE_SLOTS; i++)
        if (c->hstage_ev[i])
            cudaEventDestroy(c->hstage_ev[i]);
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    if (c->scratch)
        cudaFree(c->scratch);
    if (c->flag)
        cudaFree(c->flag);
    if (c->host_ret)
        cudaFreeHost(c->host_ret);
    for (int i = 0; i < c->nsegs; i++)
        pg_cuda_graph_free(c->segs[i].g);
    free(c->segs);
    for (int i = 0; i < c->marks_cap; i++)
        if (c->marks[i])
            cudaEventDestroy(c->marks[i]);
    free(c->marks);
    if (c->sv_dev)
        cudaFree(c->sv_dev); /* the step state block: sv_dev, slot_dev, step_flag */
    if (c->sv_host)
        cudaFreeHost(c->sv_host); /* pinned: sv_host, slot_host */
    if (c->blas_ws)
        cudaFree(c->blas_ws);
    if (c->bf16_ws)
        cudaFree(c->bf16_ws);
    free(c->shadows); /* the registry only: the shadows live in the arena */
    free(c->stats_host);
    if (c->lt)
        cublasLtDestroy(c->lt);
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

static int ctx_setup(pg_ctx *c)
{
    const char *kp = getenv("PIPE_CUDA_KERNELS");
    if (parse_kernel_paths(kp, &c->kpaths))
        return 1;
    if (kp && *kp) {
        fprintf(stderr, "note: CUDA kernel paths (PIPE_CUDA_KERNELS=%s):", kp);
        for (int k = 0; k < NKPATHS; k++)
            fprintf(stderr, " %s %s", kpath_names[k].name, c->kpaths & kpath_names[k].bit ? "fast" : "reference");
        fputc('\n', stderr);
    }
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    int drv = 0, rt = 0;
    if (e == cudaErrorInsufficientDriver) /* no driver at all reads as version 0 */
        cudaDriverGetVersion(&drv);
    if (e == cudaErrorInsufficientDriver && drv > 0) { /* a driver is there, too old for this runtime */
        cudaRuntimeGetVersion(&rt);
        pg_rt_error(__FILE__, __LINE__, "the NVIDIA driver supports CUDA %d.%d, older than this stage's CUDA runtime "
                    "%d.%d (cudaErrorInsufficientDriver): update the driver, or build the CUDA files with a toolkit "
                    "of at most CUDA %d.%d (the GPU bundle: PG_REBUILD_CUDA=1 with this host's nvcc)",
                    drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10);
        return 1;
    }
    if (e != cudaSuccess || ndev == 0) {
        pg_rt_error(__FILE__, __LINE__, "no GPU found (%s); "
                    "build the stages with the CPU runtime or run on a machine with a CUDA GPU",
                    e == cudaErrorInsufficientDriver ? "no NVIDIA driver: cudaDriverGetVersion gives none"
                    : e != cudaSuccess              ? cudaGetErrorString(e)
                                                    : "cudaGetDeviceCount: 0 devices");
        return 1;
    }
    CUDA_CHECK(cudaGetDevice(&c->device));
    /* the compute mode (nvidia-smi -c) can forbid this process the GPU: say so */
    int mode = 0;
    char why[512];
    if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, c->device) != cudaSuccess)
        mode = PG_CUDA_MODE_DEFAULT, cudaGetLastError();
    if (pg_cuda_mode_forbids(c->device, mode, why, sizeof why)) {
        pg_rt_error(__FILE__, __LINE__, "%s", why);
        return 1;
    }
    e = cudaFree(0); /* makes the context: where a GPU held by another process refuses us */
    if (e == cudaErrorDevicesUnavailable) {
        pg_cuda_busy_why(c->device, mode, why, sizeof why);
        pg_rt_error(__FILE__, __LINE__, "cannot use GPU %d (%s): %s", c->device, cudaGetErrorName(e), why);
        return 1;
    }
    if (e != cudaSuccess)
        return pg_cuda_fail(__FILE__, __LINE__, "cudaFree(0) (making the CUDA context)", e);
    size_t fr = 0, tot = 0;
    CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
    c->mem_base = c->mem_peak = tot - fr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    for (int i = 0; i < PG_HSTAGE_SLOTS; i++)
        CUDA_CHECK(cudaEventCreateWithFlags(&c->hstage_ev[i], cudaEventDisableTiming));
    CUBLAS_CHECK(cublasCreate(&c->blas));
    CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
    /* Full fp32 products (no TF32), and no atomics inside cuBLAS: with one
     * stream this makes every GEMM bitwise reproducible on a given GPU model. */
    CUBLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    CUBLAS_CHECK(cublasSetAtomicsMode(c->blas, CUBLAS_ATOMICS_NOT_ALLOWED));
    CUBLAS_CHECK(cublasSetPointerMode(c->blas, CUBLAS_POINTER_MODE_HOST));
    CUDA_CHECK(cudaMalloc((void **)&c->flag, sizeof *c->flag));
    CUDA_CHECK(cudaMallocHost((void **)&c->host_ret, 4 * sizeof *c->host_ret));
    /* A fixed cuBLAS workspace: cuBLAS then never allocates inside a graph
     * capture, and its kernel choice (which may depend on the workspace size)
     * is the same in every stage process. */
    CUDA_CHECK(cudaMalloc(&c->blas_ws, PG_CUDA_BLAS_WS));
    CUBLAS_CHECK(cublasSetWorkspace(c->blas, c->blas_ws, PG_CUDA_BLAS_WS));
    CUBLAS_CHECK(cublasLtCreate(&c->lt));
    /* The step state (step.cu): per-step values, deferred scalars, the id flag. */
    size_t dev_bytes = sizeof(struct pg_cuda_stepvals) + PG_CUDA_SLOTS * sizeof(double) + sizeof(unsigned long long);
    char *blk = NULL, *hblk = NULL;
    CUDA_CHECK(cudaMalloc((void **)&blk, dev_bytes));
    c->state_bytes = dev_bytes + sizeof *c->flag;
    c->sv_dev = (struct pg_cuda_stepvals *)blk;
    c->slot_dev = (double *)(blk + sizeof(struct pg_cuda_stepvals));
    c->step_flag = (unsigned long long *)(c->slot_dev + PG_CUDA_SLOTS);
    CUDA_CHECK(cudaMallocHost((void **)&hblk, sizeof(struct pg_cuda_stepvals) + PG_CUDA_SLOTS * sizeof(double)));
    c->sv_host = (struct pg_cuda_stepvals *)hblk;
    c->slot_host = (double *)(hblk + sizeof(struct pg_cuda_stepvals));
    c->nslots = 1; /* slot 0: values nobody asked for */
    c->mark_armed = c->run_mark = -1;
    return 0;
}

pg_ctx *pg_backend_init(int threads)
{
    (void)threads; /* host threads do not matter here: the GPU does the work */
    pg_ctx *c = (pg_ctx *)calloc(1, sizeof *c);
    if (!c) {
        pg_rt_error(__FILE__, __LINE__, "cannot allocate the CUDA backend context (%zu bytes)", sizeof *c);
        return NULL;
    }
    if (ctx_setup(c)) {
        ctx_release(c);
        return NULL;
    }
    pg_cuda_process.ctx = c;
    return c;
}

void pg_backend_free(pg_ctx *c)
{
    if (c && pg_cuda_process.ctx == c)
        pg_cuda_process.ctx = NULL;
    ctx_release(c);
}

void pg_cuda_poison(pg_ctx *c, const char *why)
{
    if (c && !c->poisoned)
        c->poisoned = why ? why : "a transfer that will never complete";
}

int pg_backend_poisoned(const pg_ctx *c) { return c && c->poisoned; }

void pg_backend_report(pg_ctx *c, int stage, int64_t arena_bytes, FILE *out)
{
    if (!c || c->poisoned)
        return;
    size_t used = c->mem_peak > c->mem_base ? c->mem_peak - c->mem_base : 0;
    fprintf(out,
            "stage %d: CUDA graphs: %lld captured, %lld launched; GPU memory: arena %lld bytes (the plan), "
            "%zu bytes in use at the peak of a step's end beyond the context (%.3f x the arena; cudaMemGetInfo: "
            "every process on GPU %d counts)\n",
            stage, c->graphs_captured, c->graph_launches, (long long)arena_bytes, used,
            arena_bytes > 0 ? (double)used / (double)arena_bytes : 0.0, c->device);
    /* what of it is the runtime's own beside the arena, by kind; the rest is
     * the CUDA libraries' and the driver's (and, on a real GPU, page rounding
     * and other processes on the device) */
    if (used) {
        const long long *o = c->own_at_peak;
        long long own = 0;
        for (int k = 0; k < PG_CUDA_NOWN; k++)
            own += o[k];
        fprintf(out,
                "stage %d: GPU memory beside the arena at that peak: %lld bytes of the runtime's own (cuBLAS workspace "
                "%lld, kernel scratch %lld, bf16 copies %lld, links %lld, replicas %lld, step state %lld); the rest, "
                "%lld bytes, the CUDA libraries' and the driver's (and any other process's on GPU %d)\n",
                stage, own, o[PG_CUDA_OWN_BLAS], o[PG_CUDA_OWN_SCRATCH], o[PG_CUDA_OWN_BF16], o[PG_CUDA_OWN_LINKS],
                o[PG_CUDA_OWN_REPLICAS], o[PG_CUDA_OWN_STATE], (long long)used - (long long)arena_bytes - own, c->device);
    }
    /* the paths this run took (tests/gpu/run_gpu_tests.sh reads it) */
    fprintf(out, "stage %d: CUDA kernel paths taken (host calls; graph replays not counted):", stage);
    for (int k = 0; k < NKPATHS; k++)
        fprintf(out, " %s %lld%s", kpath_names[k].name, c->kp_calls[k], k + 1 < NKPATHS ? "," : ";");
    fprintf(out, " bf16 GEMMs %lld\n", c->bf16_gemms);
    if (c->bf16_plan || c->bf16_ws)
        fprintf(out, "stage %d: bf16 operand copies: the largest product's took %zu bytes, the plan reserved %zu; "
                "%zu bytes beside the arena\n", stage, c->bf16_need_max, c->bf16_plan_bytes, c->bf16_ws_bytes);
    if (c->conv_report)
        c->conv_report(c, stage, out);
    fflush(out);
}

void pg_cuda_own_now(const pg_ctx *c, long long own[PG_CUDA_NOWN])
{
    own[PG_CUDA_OWN_BLAS] = c->blas_ws ? (long long)PG_CUDA_BLAS_WS : 0;
    own[PG_CUDA_OWN_SCRATCH] = (long long)c->scratch_bytes;
    own[PG_CUDA_OWN_BF16] = (long long)c->bf16_ws_bytes;
    own[PG_CUDA_OWN_LINKS] = c->own_links;
    own[PG_CUDA_OWN_REPLICAS] = c->own_replicas;
    own[PG_CUDA_OWN_STATE] = (long long)c->state_bytes;
}

void pg_cuda_own_add(int kind, long long delta)
{
    pg_ctx *c = pg_cuda_process.ctx;
    if (!c)
        return;
    if (kind == PG_CUDA_OWN_LINKS)
        c->own_links += delta;
    else if (kind == PG_CUDA_OWN_REPLICAS)
        c->own_replicas += delta;
}

void pg_cuda_mem_sample(pg_ctx *c)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    if (tot - fr > c->mem_peak) {
        c->mem_peak = tot - fr;
        pg_cuda_own_now(c, c->own_at_peak);
    }
}

const char *pg_backend_name(void) { return "cuda"; }

void *pg_arena_create(pg_ctx *c, size_t bytes)
{
    void *p = NULL;
    size_t want = bytes ? bytes : 1;
    cudaError_t e = cudaMalloc(&p, want);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear the (non-sticky) allocation error */
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
            fr = tot = 0;
        pg_rt_error(__FILE__, __LINE__,
                    "cannot allocate %zu bytes of GPU memory (free %zu of %zu) for the stage arena "
                    "(%.1f MiB): %s; use more stages or smaller micro-batches",
                    bytes, fr, tot, (double)bytes / (1024.0 * 1024.0), cudaGetErrorString(e));
        return NULL;
    }
    e = cudaMemsetAsync(p, 0, want, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        pg_cuda_fail(__FILE__, __LINE__, "cudaMemsetAsync(arena, 0)", e);
        cudaFree(p);
        return NULL;
    }
    return p;
}

/* Device memory: AddressSanitizer does not see it (compute-sanitizer does). */
void pg_arena_guard(pg_ctx *c, void *arena, size_t bytes, const pg_arena_buf *bufs, int n)
{
    (void)c, (void)arena, (void)bytes, (void)bufs, (void)n;
}

void pg_arena_destroy(pg_ctx *c, void *arena)
{
    if (!arena || (c && c->poisoned))
        return;
    if (c)
        cudaStreamSynchronize(c->stream);
    cudaFree(arena);
}

/* The host buffer may be reused as soon as this returns. Inside a step (the
 * step's data) the bytes go through the pinned staging ring (hstage.h): the
 * host does not wait for the copy; outside one, the copy is waited for. */
int pg_copy_to_dev(pg_ctx *c, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return 0;
    if (c->in_run)
        return PG_RT_FAIL("copy_to_dev inside a run of compute (step %lld): not capturable", (long long)c->info.step);
    /* a weight loaded from the host (--load, a tie message): its bf16 shadow too */
    if (c->in_step) {
        if (pg_hstage_copy(&c->hstage, &hstage_ops, c, dst, src, bytes))
            return 1;
        return pg_cuda_shadow_touch(c, dst, bytes);
    }
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    if (pg_cuda_shadow_touch(c, dst, bytes))
        return 1;
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return 0;
}

int pg_copy_to_host(pg_ctx *c, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return 0;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return 0;
}

int pg_sync(pg_ctx *c)
{
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    CUDA_CHECK(cudaGetLastError());
    return 0;
}

int pg_zero(pg_ctx *c, float *x, int64_t count)
{
    if (pg_args_count("zero", count))
        return 1;
    if (count)
        CUDA_CHECK(cudaMemsetAsync(x, 0, (size_t)count * sizeof *x, c->stream));
    return 0;
}

/* memmove semantics like the CPU backend: overlapping ranges are copied in
 * chunks no longer than the distance, walking away from the overlap. */
int pg_copy(pg_ctx *c, float *dst, const float *src, int64_t count)
{
    if (pg_args_count("copy", count))
        return 1;
    if (!count || dst == src)
        return 0;
    int64_t dist = dst > src ? dst - src : src - dst;
    if (dist >= count) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)count * sizeof *dst, cudaMemcpyDeviceToDevice, c->stream));
        return 0;
    }
    if (dst < src) {
        for (int64_t k = 0; k < count; k += dist) {
            int64_t len = count - k < dist ? count - k : dist;
            CUDA_CHECK(cudaMemcpyAsync(dst + k, src + k, (size_t)len * sizeof *dst,
                                       cudaMemcpyDeviceToDevice, c->stream));
        }
    } else {
        for (int64_t end = count; end > 0; end -= dist) {
            int64_t k = end - dist > 0 ? end - dist : 0;
            CUDA_CHECK(cudaMemcpyAsync(dst + k, src + k, (size_t)(end - k) * sizeof *dst,
                                       cudaMemcpyDeviceToDevice, c->stream));
        }
    }
    return 0;
}

__global__ void axpy_inplace_kernel(int64_t count, float *y, const float *x)
{
    PG_GRID_STRIDE(i, count) y[i] = y[i] + x[i];
}

int pg_axpy_inplace(pg_ctx *c, float *y, const float *x, int64_t count)
{
    if (pg_args_count("axpy", count))
        return 1;
    if (!count)
        return 0;
    axpy_inplace_kernel<<<pg_cuda_blocks(count, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(count, y, x);
    LAUNCH_CHECK("axpy_inplace_kernel");
    return 0;
}

/* ---- scratch, id checks, final sums --------------------------------------- */

int pg_cuda_scratch(pg_ctx *c, size_t bytes, void **out)
{
    if (bytes > c->scratch_bytes && pg_cuda_capturing(c))
        return PG_RT_FAIL("the kernel workspace must grow from %zu to %zu bytes while step %lld is captured "
                          "as a CUDA graph (an op larger than in the first step); run with --no-graph",
                          c->scratch_bytes, bytes, (long long)c->info.step);
    if (bytes > c->scratch_bytes) {
        /* Growing happens on the first call of the largest op, i.e. in the
         * first step; after that the workspace stays put. */
        size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
        CUDA_CHECK(cudaStreamSynchronize(c->stream));
        pg_cuda_drop_graphs(c);
        if (c->scratch) {
            CUDA_CHECK(cudaFree(c->scratch));
            c->scratch = NULL;
            c->scratch_bytes = 0;
        }
        cudaError_t e = cudaMalloc(&c->scratch, want);
        if (e != cudaSuccess) {
            cudaGetLastError();
            c->scratch = NULL;
            size_t fr = 0, tot = 0;
            if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
                fr = tot = 0;
            return PG_RT_FAIL("cannot allocate %zu bytes of GPU memory (free %zu of %zu) for the "
                              "kernel workspace: %s", want, fr, tot, cudaGetErrorString(e));
        }
        c->scratch_bytes = want;
    }
    *out = c->scratch;
    return 0;
}

/* flag = min bad row; integer atomicMin gives the same answer in any order. */
__global__ void find_bad_id_kernel(int64_t n, int64_t limit, const int32_t *ids, unsigned long long *flag)
{
    PG_GRID_STRIDE(i, n) {
        int32_t v = ids[i];
        if (v < 0 || (int64_t)v >= limit)
            atomicMin(flag, (unsigned long long)i);
    }
}

/* Inside a run: flag = min of (site << 40 | row), read at the end of the step. */
__global__ void find_bad_id_site_kernel(int64_t n, int64_t limit, const int32_t *ids, unsigned long long tag,
                                        unsigned long long *flag)
{
    PG_GRID_STRIDE(i, n) {
        int32_t v = ids[i];
        if (v < 0 || (int64_t)v >= limit)
            atomicMin(flag, tag | (unsigned long long)i);
    }
}

int pg_cuda_check_ids(pg_ctx *c, const char *op, const char *what, const char *range_what,
                      const char *hint, int64_t n, int64_t limit, const int32_t *ids)
{
    if (n <= 0)
        return 0;
    if (c->in_run) { /* deferred: the ops' kernels skip bad ids, pg_backend_step_end reports them */
        if (n >= ((int64_t)1 << 40))
            return PG_RT_FAIL("%s: %lld ids are too many to check", op, (long long)n);
        int site = pg_cuda_id_site(c, op, what, range_what, hint, n, limit, ids);
        if (site < 0)
            return 1;
        find_bad_id_site_kernel<<<pg_cuda_blocks(n, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(
            n, limit, ids, (unsigned long long)site << 40, c->step_flag);
        LAUNCH_CHECK("find_bad_id_site_kernel");
        return 0;
    }
    CUDA_CHECK(cudaMemsetAsync(c->flag, 0xff, sizeof *c->flag, c->stream));
    find_bad_id_kernel<<<pg_cuda_blocks(n, PG_CUDA_THREADS), PG_CUDA_THREADS, 0, c->stream>>>(n, limit, ids, c->flag);
    LAUNCH_CHECK("find_bad_id_kernel");
    unsigned long long row = 0;
    CUDA_CHECK(cudaMemcpyAsync(&row, c->flag, sizeof row, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    if (row == ~0ull)
        return 0;
    int32_t bad = 0;
    CUDA_CHECK(cudaMemcpyAsync(&bad, ids + row, sizeof bad, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return PG_RT_FAIL("%s: row %lld has %s id %ld, outside the %s [0, %lld); %s", op, (long long)row,
                      what, (long)bad, range_what, (long long)limit, hint);
}

/* One block: thread t sums partial[t], partial[t + B], ... in order, then the tree. */
__global__ void sum_partials_kernel(int64_t np, const double *partial, double *out)
{
    __shared__ double sh[PG_CUDA_RED_THREADS];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < np; i += PG_CUDA_RED_THREADS)
        s += partial[i];
    s = pg_block_sum(s, sh);
    if (threadIdx.x == 0)
        *out = s;
}

int pg_cuda_sum_to_dev(pg_ctx *c, const double *partial, int64_t np, double *dst)
{
    sum_partials_kernel<<<1, PG_CUDA_RED_THREADS, 0, c->stream>>>(np, partial, dst);
    LAUNCH_CHECK("sum_partials_kernel");
    return 0;
}

int pg_cuda_sum_to_host(pg_ctx *c, const double *partial, int64_t np, double *out)
{
    sum_partials_kernel<<<1, PG_CUDA_RED_THREADS, 0, c->stream>>>(np, partial, (double *)c->flag);
    LAUNCH_CHECK("sum_partials_kernel");
    CUDA_CHECK(cudaMemcpyAsync(c->host_ret, c->flag, sizeof(double), cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    *out = c->host_ret[0];
    return 0;
}


/* runtime/cuda/step.cu — the step hooks of pg_ops.h for the CUDA backend:
 * CUDA graphs of the step's runs of compute, the per-step values captured ops
 * read from device memory, deferred scalars and deferred id checks.
 *
 * step.c calls pg_backend_step_begin, then brackets each run of compute calls
 * (the gradient zeroing, each maximal sequence of FWD/BWD_B/BWD_W actions
 * between two transport or host actions, the optimizer) with
 * pg_backend_compute(seg, dst) ... pg_backend_compute_end, and ends with
 * pg_backend_step_end. Here:
 *  - the first step of the process runs eagerly (it grows the kernel and
 *    bf16 workspaces, which capture forbids);
 *  - after that, the first time a run `seg` is met it is captured on the
 *    backend stream (cudaStreamBeginCapture, thread-local mode), instantiated
 *    and launched; every later time the graph is launched and step.c skips
 *    the calls (pg_backend_compute returns 1);
 *  - transport actions stay eager between runs, on the same stream, so the
 *    order of work is the order of the action table;
 *  - with --no-graph (pg_step_info.graphs 0) every step runs like the first.
 * Eager and graph steps enqueue the same kernels with the same arguments (the
 * per-step values come from device memory in both), so they give the same
 * bits.
 *
 * Per-step values: the optimizer ops read lr, AdamW's bias corrections and
 * SGD's first-step flag from sv_dev, written here at step start with the host
 * formulas of optim.cu (so the bits do not change). Losses inside a run go to
 * device slots (pg_cuda_defer_scalar) read back by pg_backend_fetch, which
 * step.c calls where the loss is needed (the non-finite verdict) and
 * pg_backend_step_end calls again. Id checks inside a run set a device flag
 * that pg_backend_step_end reads. Dropout's seed is a per-step host value in
 * the generated code (DROPOUT_SEED of io->step): a stage whose step calls
 * dropout keeps graphs off and says so once.
 *
 * Device time: step.c's marks (pg_backend_mark) are timing events recorded
 * on the stream between runs, never inside one (an event recorded during a
 * capture is a dependency, not a timestamp); a mark that opens a captured
 * run is recorded again just before the graph's first launch, so the host's
 * capture and instantiation are not counted as device work. Their elapsed
 * times are read after pg_backend_step_end's synchronisation: the marks add
 * no synchronisation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.h"
#include "cuda_backend.h"

int pg_cuda_capturing(const pg_ctx *c) { return c->in_run && c->run_mode == 1; }

int pg_cuda_graph_blocker(pg_ctx *c, const char *why)
{
    if (!c->in_step)
        return 0;
    if (pg_cuda_capturing(c))
        return PG_RT_FAIL("%s cannot be captured in a CUDA graph (step %lld); run with --no-graph", why,
                          (long long)c->info.step);
    if (!c->graph_block)
        c->graph_block = why;
    return 0;
}

void pg_cuda_drop_graphs(pg_ctx *c)
{
    for (int i = 0; i < c->nsegs; i++)
        pg_cuda_graph_free(c->segs[i].g);
    c->nsegs = 0;
}

int pg_cuda_defer_scalar(pg_ctx *c, double mul, double div, double **slot)
{
    double *dst = c->cur_dst;
    int k = 0;
    if (dst) {
        for (k = 1; k < c->nslots && c->slots[k].dst != dst; k++)
            ;
        if (k == c->nslots) {
            if (c->nslots >= PG_CUDA_SLOTS)
                return PG_RT_FAIL("more than %d deferred scalars in one step", PG_CUDA_SLOTS - 1);
            c->nslots++;
        }
        c->slots[k].dst = dst;
        c->slots[k].mul = mul;
        c->slots[k].div = div;
    }
    *slot = c->slot_dev + k;
    return 0;
}

int pg_cuda_id_site(pg_ctx *c, const char *op, const char *what, const char *range_what, const char *hint,
                    int64_t n, int64_t limit, const int32_t *ids)
{
    for (int i = 0; i < c->nsites; i++) {
        const struct pg_cuda_site *s = &c->sites[i];
        if (s->op == op && s->ids == ids && s->n == n && s->limit == limit)
            return i;
    }
    if (c->nsites >= PG_CUDA_SITES) {
        pg_rt_error(__FILE__, __LINE__, "%s: more than %d id-check sites in one stage", op, PG_CUDA_SITES);
        return -1;
    }
    struct pg_cuda_site *s = &c->sites[c->nsites];
    s->op = op;
    s->what = what;
    s->range_what = range_what;
    s->hint = hint;
    s->n = n;
    s->limit = limit;
    s->ids = ids;
    return c->nsites++;
}

int pg_backend_set_precision(pg_ctx *c, int precision)
{
    if (precision != 0 && precision != 1)
        return PG_RT_FAIL("unknown precision %d (0 f32, 1 bf16)", precision);
    c->precision = precision;
    /* f32: full fp32 products unless PIPE_CUDA_TF32=1 asks for TF32 tensor
     * cores (faster, 10-bit mantissa products; still the same bits for the
     * same shapes). bf16 operands use tensor cores in either mode; reduced-
     * precision split-K reductions are disallowed. */
    const char *tf = getenv("PIPE_CUDA_TF32");
    int tf32 = precision == 0 && tf && tf[0] == '1';
    CUBLAS_CHECK(cublasSetMathMode(c->blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                   : (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    return 0;
}

int pg_backend_step_begin(pg_ctx *c, const pg_step_info *s)
{
    if (c->in_run)
        return PG_RT_FAIL("step %lld begins inside a run of compute", (long long)s->step);
    c->in_step = 1;
    c->info = *s;
    /* optim.cu's host formulas, once per step */
    struct pg_cuda_stepvals *v = c->sv_host;
    int64_t t = s->step + 1;
    v->lr = (double)s->lr;
    v->first_step = s->step == 0;
    v->pad = 0;
    if (s->beta1 != 0.0f || s->beta2 != 0.0f) {
        double bc1 = 1.0 - pow((double)s->beta1, (double)t);
        double bc2 = 1.0 - pow((double)s->beta2, (double)t);
        v->neg_step = (float)(-((double)s->lr / bc1));
        v->bc2_sqrt = (float)sqrt(bc2);
    } else {
        v->neg_step = -s->lr;
        v->bc2_sqrt = 1.0f;
    }
    /* sv_host is pinned and rewritten only here, after the previous step's
     * pg_backend_step_end waited for the stream: the copy cannot race. */
    CUDA_CHECK(cudaMemcpyAsync(c->sv_dev, c->sv_host, sizeof *v, cudaMemcpyHostToDevice, c->stream));
    CUDA_CHECK(cudaMemsetAsync(c->step_flag, 0xff, sizeof *c->step_flag, c->stream));
    c->nmarks = 0;
    c->mark_armed = c->run_mark = -1;
    return 0;
}

static struct pg_cuda_seg *find_seg(pg_ctx *c, int id)
{
    for (int i = 0; i < c->nsegs; i++)
        if (c->segs[i].id == id)
            return &c->segs[i];
    return NULL;
}

int pg_backend_compute(pg_ctx *c, int seg, double *scalar_dst)
{
    if (!c->in_step) /* not bracketed by a step: plain eager ops */
        return 0;
    if (!c->in_run) {
        c->in_run = 1;
        c->run_id = seg;
        c->run_calls = 0;
        c->run_mode = 0;
        c->run_mark = c->mark_armed;
        c->mark_armed = -1;
        if (c->info.graphs && c->steps_done >= 1 && !c->graph_block) {
            struct pg_cuda_seg *g = find_seg(c, seg);
            if (g) {
                if (pg_cuda_graph_launch(c, g->g))
                    return -1;
                c->graph_launches++;
                c->run_mode = 2;
                c->run_seg = (int)(g - c->segs);
            } else {
                if (pg_cuda_graph_begin(c))
                    return -1;
                c->run_mode = 1;
            }
        }
    }
    c->run_calls++;
    c->cur_dst = scalar_dst;
    return c->run_mode == 2;
}

int pg_backend_compute_end(pg_ctx *c)
{
    if (!c->in_run)
        return 0;
    int mode = c->run_mode, run_mark = c->run_mark;
    c->in_run = 0;
    c->run_mode = 0;
    c->cur_dst = NULL;
    c->run_mark = c->mark_armed = -1;
    if (mode == 2) {
        int want = c->segs[c->run_seg].calls;
        if (c->run_calls != want)
            return PG_RT_FAIL("step %lld: run %d of compute made %d calls, its CUDA graph was captured with %d",
                              (long long)c->info.step, c->run_id, c->run_calls, want);
        return 0;
    }
    if (mode != 1)
        return 0;
    pg_cuda_graph *g = NULL;
    if (pg_cuda_graph_end(c, &g)) {
        fprintf(stderr, "capturing run %d of step %lld as a CUDA graph failed; run with --no-graph\n", c->run_id,
                (long long)c->info.step);
        return 1;
    }
    if (c->nsegs == c->segs_cap) {
        int cap = c->segs_cap ? 2 * c->segs_cap : 16;
        struct pg_cuda_seg *n = (struct pg_cuda_seg *)realloc(c->segs, (size_t)cap * sizeof *n);
        if (!n) {
            pg_cuda_graph_free(g);
            return PG_RT_FAIL("out of memory for %d CUDA graphs", cap);
        }
        c->segs = n;
        c->segs_cap = cap;
    }
    struct pg_cuda_seg *s = &c->segs[c->nsegs++];
    s->id = c->run_id;
    s->calls = c->run_calls;
    s->g = g;
    c->graphs_captured++;
    c->graph_launches++;
    if (run_mark >= 0) /* the run's start: this launch, not the host's capture before it */
        CUDA_CHECK(cudaEventRecord(c->marks[run_mark], c->stream));
    return pg_cuda_graph_launch(c, g); /* the capture ran nothing: this step's work */
}

/* ---- device time (pg_ops.h) ------------------------------------------------ */

int pg_backend_device_clock(const pg_ctx *c)
{
    (void)c;
    return 1;
}

int pg_backend_mark(pg_ctx *c, int run_start)
{
    if (!c->in_step || c->in_run) {
        pg_rt_error(__FILE__, __LINE__, "pg_backend_mark %s", c->in_run ? "inside a run of compute" : "outside a step");
        return -1;
    }
    if (c->nmarks == c->marks_cap) { /* the first step makes them; later steps reuse them */
        int cap = c->marks_cap ? 2 * c->marks_cap : 64;
        cudaEvent_t *m = (cudaEvent_t *)realloc(c->marks, (size_t)cap * sizeof *m);
        if (!m) {
            pg_rt_error(__FILE__, __LINE__, "out of memory for %d timing events", cap);
            return -1;
        }
        memset(m + c->marks_cap, 0, (size_t)(cap - c->marks_cap) * sizeof *m);
        c->marks = m;
        c->marks_cap = cap;
    }
    cudaEvent_t *e = &c->marks[c->nmarks];
    cudaError_t err = *e ? cudaSuccess : cudaEventCreate(e);
    if (err != cudaSuccess) {
        *e = NULL;
        pg_cuda_fail(__FILE__, __LINE__, "cudaEventCreate (a timing mark)", err);
        return -1;
    }
    if ((err = cudaEventRecord(*e, c->stream)) != cudaSuccess) {
        pg_cuda_fail(__FILE__, __LINE__, "cudaEventRecord (a timing mark)", err);
        return -1;
    }
    c->mark_armed = run_start ? c->nmarks : -1;
    return c->nmarks++;
}

int pg_backend_mark_times(pg_ctx *c, double *sec, int n)
{
    if (c->in_step)
        return PG_RT_FAIL("pg_backend_mark_times before the step's end waited for its work");
    if (n > c->nmarks)
        return PG_RT_FAIL("pg_backend_mark_times: %d marks asked for, the step made %d", n, c->nmarks);
    for (int i = 0; i < n; i++) {
        float ms = 0.0f;
        if (i) /* complete: pg_backend_step_end waited for the stream */
            CUDA_CHECK(cudaEventElapsedTime(&ms, c->marks[0], c->marks[i]));
        sec[i] = (double)ms * 1e-3;
    }
    return 0;
}

int pg_backend_fetch(pg_ctx *c)
{
    if (c->in_run)
        return PG_RT_FAIL("pg_backend_fetch inside a run of compute");
    if (c->nslots <= 1)
        return 0;
    CUDA_CHECK(cudaMemcpyAsync(c->slot_host, c->slot_dev, (size_t)c->nslots * sizeof(double), cudaMemcpyDeviceToHost,
                               c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    for (int k = 1; k < c->nslots; k++) {
        const struct pg_cuda_slot *s = &c->slots[k];
        double raw = c->slot_host[k];
        *s->dst = s->div != 0.0 ? raw / s->div : raw * s->mul;
    }
    return 0;
}

int pg_backend_step_end(pg_ctx *c)
{
    if (!c->in_step)
        return 0;
    if (pg_backend_compute_end(c) || pg_backend_fetch(c))
        return 1;
    unsigned long long flag = 0;
    CUDA_CHECK(cudaMemcpyAsync(&flag, c->step_flag, sizeof flag, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    CUDA_CHECK(cudaGetLastError());
    int64_t step = c->info.step;
    c->in_step = 0;
    pg_cuda_mem_sample(c); /* every workspace of the step is allocated by now */
    if (flag != ~0ull) {
        int site = (int)(flag >> 40);
        long long row = (long long)(flag & ((1ull << 40) - 1));
        if (site >= c->nsites)
            return PG_RT_FAIL("step %lld: an id check failed at an unknown site %d", (long long)step, site);
        const struct pg_cuda_site *s = &c->sites[site];
        int32_t bad = 0;
        CUDA_CHECK(cudaMemcpy(&bad, s->ids + row, sizeof bad, cudaMemcpyDeviceToHost));
        return PG_RT_FAIL("%s: row %lld has %s id %ld, outside the %s [0, %lld); %s (found at the end of step %lld)",
                          s->op, row, s->what, (long)bad, s->range_what, (long long)s->limit, s->hint,
                          (long long)step + 1);
    }
    c->steps_done++;
    if (c->graph_block && c->info.graphs && !c->graph_note) {
        c->graph_note = 1;
        fprintf(stderr, "note: CUDA graphs off: this stage's step calls %s; it runs eagerly\n", c->graph_block);
    }
    return 0;
}

/* runtime/core/step.c — one training step of a stage: load this step's data,
 * run the generated action table (compute through the chunk functions,
 * messages through pg_net with the table's offsets, byte counts and tags),
 * then the optimizer. Every reduction has a fixed order. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "guard.h"
#include "stage_run.h"


static void net_fail(pg_run *r, int a, const pg_step_action *x, pg_net_status st)
{
    const pg_stage_desc *d = r->d;
    const char *kn = pg_step_kind_name(x->kind);
    int recv = pg_step_msg_recv(x->kind);
    if (st == PG_NET_TIMEOUT && recv)
        fprintf(stderr, "stage %d waiting at action %d %s(mb %d) from stage %d for %g s\n", d->stage, a, kn, x->mb,
                x->peer, r->opt.timeout_s);
    else if (st == PG_NET_TIMEOUT) /* a send: its queue full, or a lent message not written */
        fprintf(stderr, "stage %d waiting at action %d %s(mb %d) to stage %d for %g s: %s\n", d->stage, a, kn, x->mb,
                x->peer, r->opt.timeout_s, pg_net_error(r->net));
    else
        fprintf(stderr, "stage %d: action %d %s(mb %d) %s stage %d failed: %s\n", d->stage, a, kn, x->mb,
                recv ? "from" : "to", x->peer, pg_net_error(r->net));
}

/* Synthetic data cycles through this many batches (pg_run_synth_init). */
#define SYNTH_BATCHES 8

/* The samples of this replica's rows [row0, row0 + rows) of the batch of
 * `step` into r->sample_idx: row i is position step x batch + i of passes over
 * n samples, in file order or (train.shuffle) a fresh order every epoch. */
static void step_samples(pg_run *r, int64_t step, uint64_t n)
{
    const pg_train_desc *t = &r->d->train;
    for (int64_t i = 0; i < r->rows; i++)
        r->sample_idx[i] = pg_dataset_sample(t->seed, t->shuffle, n,
                                             (uint64_t)step * (uint64_t)t->batch + (uint64_t)(r->row0 + i));
}

/* This replica's rows of a data set (or the synthetic batches, 0: none) into
 * their places in host[batch, per_sample]. 0, or 1 after printing that a file
 * changed under the run (SIGBUS). */
static int rows_into_host(pg_run *r, int64_t step, const pg_dataset *ds, const void *synth, int64_t per_sample)
{
    size_t rb = (size_t)per_sample * 4;
    unsigned char *dst = (unsigned char *)r->host + (size_t)r->row0 * rb;
    step_samples(r, step, ds ? ds->samples : (uint64_t)(SYNTH_BATCHES * r->d->train.batch));
    if (!ds) {
        for (int64_t i = 0; i < r->rows; i++)
            memcpy(dst + (size_t)i * rb, (const unsigned char *)synth + r->sample_idx[i] * rb, rb);
        return 0;
    }
    char err[512];
    if (pg_dataset_gather(ds, r->sample_idx, r->rows, dst, err, sizeof err) == 0)
        return 0;
    fprintf(stderr, "stage %d: step %lld: %s\n", r->d->stage, (long long)step + 1, err);
    return 1;
}

/* Synthetic data (no --data / --targets): SYNTH_BATCHES fixed batches, made
 * once at start-up and cycled, so the loss visibly falls. Inputs are seeded
 * (stream 0). An f32 target of an f32 input is a teacher of its sample, which
 * the loss stage makes itself (pg_synth_f32 is a pure function of seed,
 * stream and sample index), so a model can learn it:
 *     t[j] = max(0, (x[j mod n] + x[(7j+3) mod n]) / 2),  n = input elements;
 * any other target is seeded random (stream 1; i32: ids in [0, classes)). */

int pg_run_synth_init(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    int64_t N = SYNTH_BATCHES * d->train.batch, n = d->input_per_sample, m = d->target_per_sample;
    int need_in = d->has_input && !r->have_in, need_tg = d->has_loss && !r->have_tg;
    size_t in_bytes = (size_t)N * (size_t)n * 4, tg_bytes = (size_t)N * (size_t)m * 4;
    float *x = NULL;
    if ((need_in && !(r->synth_in = malloc(in_bytes ? in_bytes : 1))) ||
        (need_tg && !(r->synth_tg = malloc(tg_bytes ? tg_bytes : 1))) || (need_tg && !(x = malloc(n > 0 ? (size_t)n * 4 : 1)))) {
        fprintf(stderr, "stage %d: out of memory for %zu bytes of synthetic data\n", d->stage,
                (need_in ? in_bytes : 0) + (need_tg ? tg_bytes : 0));
        free(x);
        return 1;
    }
    if (need_in && d->input_dtype == 2)
        pg_synth_i32(r->synth_in, d->train.seed, 0, 0, N, n, (int32_t)d->input_vocab);
    else if (need_in)
        pg_synth_f32(r->synth_in, d->train.seed, 0, 0, N, n);
    if (need_tg && d->target_dtype == 2) {
        pg_synth_i32(r->synth_tg, d->train.seed, 1, 0, N, m, (int32_t)d->target_vocab);
    } else if (need_tg && d->input_dtype == 0 && n > 0) {
        float *t = r->synth_tg;
        for (int64_t s = 0; s < N; s++) {
            pg_synth_f32(x, d->train.seed, 0, s, 1, n);
            for (int64_t j = 0; j < m; j++) {
                float v = 0.5f * (x[j % n] + x[(7 * j + 3) % n]);
                t[s * m + j] = v > 0.0f ? v : 0.0f;
            }
        }
    } else if (need_tg) {
        pg_synth_f32(r->synth_tg, d->train.seed, 1, 0, N, m);
    }
    free(x);
    return 0;
}

static int load_batch(pg_run *r, int64_t step)
{
    const pg_stage_desc *d = r->d;
    if (pg_run_ignore_count(r, step)) /* cross_entropy(ignore = id): the batch's counted positions */
        return 1;
    if (r->tokens) /* --data is a token stream: windows at seeded offsets (tokens.c) */
        return pg_run_tokens_load(r, step);
    /* this replica's rows only, at their places in the batch buffers */
    if (d->has_input) {
        size_t at = (size_t)(r->row0 * d->input_per_sample * 4), bytes = (size_t)(r->rows * d->input_per_sample * 4);
        if (rows_into_host(r, step, r->have_in ? &r->in : NULL, r->synth_in, d->input_per_sample) ||
            pg_copy_to_dev(r->ctx, r->A + d->input_off + at, (const char *)r->host + at, bytes))
            return 1;
    }
    if (d->has_loss) {
        size_t at = (size_t)(r->row0 * d->target_per_sample * 4), bytes = (size_t)(r->rows * d->target_per_sample * 4);
        if (rows_into_host(r, step, r->have_tg ? &r->tg : NULL, r->synth_tg, d->target_per_sample) ||
            pg_copy_to_dev(r->ctx, r->A + d->target_off + at, (const char *)r->host + at, bytes))
            return 1;
    }
    return 0;
}

/* A message of micro-batch mb holds its rows: the table's bytes are for the
 * .pipe's split of the batch, a replica's micro-batch holds r->mb_rows[mb]. */
static size_t msg_bytes(const pg_run *r, const pg_step_action *x)
{
    const pg_stage_desc *d = r->d;
    if (x->mb < 0 || x->mb >= d->nmb || r->mb_rows[x->mb] == d->mb_rows[x->mb])
        return (size_t)x->bytes;
    return (size_t)(x->bytes / d->mb_rows[x->mb] * r->mb_rows[x->mb]);
}

/* ---- messages lent from the arena ---------------------------------------
 * An activation, gradient or skip message leaves from its slot of the arena
 * (pg_net_send_lent: the sender thread writes it from there, no copy into the
 * send ring; issue 28). The plan gives every slot buffer the whole step to
 * itself (codegen/gen/gen_prepare.c: never shared with another buffer), and
 * only a compute action of the same slot writes a slot buffer (its chunk
 * function indexes them by io.slot), a RECV its own bytes. So before a
 * compute action of slot s the lent messages of slot s are waited for, before
 * a RECV those whose bytes it would overwrite, and at the step's end all:
 * none is ever rewritten while the sender thread may still read it. On the
 * CUDA runtime the arena is device memory and the message is copied as
 * before (pg_net.h). With PIPE_CHECK_SENDS set (the test suite) each lent
 * message is hashed when lent and again when written: a change between the
 * two stops the stage with a message. */

static uint64_t lent_hash(const unsigned char *p, size_t n) /* FNV-1a */
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int lent_send(pg_run *r, int a, const pg_step_action *x, pg_net_status *st)
{
    size_t bytes = msg_bytes(r, x);
    uint64_t seq = 0;
    if (r->nlent == r->lent_cap) { /* main.c made room for every send of the table */
        fprintf(stderr, "stage %d: action %d %s: more than %d lent sends in a step\n", r->d->stage, a,
                pg_step_kind_name(x->kind), r->lent_cap);
        return 1;
    }
    if (!r->d->lend_sends) { /* pipegen found a wait for a lent message could stall the pipeline */
        *st = pg_net_send(r->net, x->peer, x->tag, r->A + x->off, bytes);
        return 0;
    }
    if ((*st = pg_net_send_lent(r->net, x->peer, x->tag, r->A + x->off, bytes, &seq)) || !seq)
        return 0;
    struct pg_lent_send *L = &r->lent[r->nlent++];
    *L = (struct pg_lent_send){a, x->peer, x->slot, (size_t)x->off, bytes, seq,
                               r->check_sends ? lent_hash(r->A + x->off, bytes) : 0};
    return 0;
}

/* Waits for lent message i to be written and forgets it. 0, or 1 (printed). */
static int lent_wait(pg_run *r, int i)
{
    struct pg_lent_send L = r->lent[i];
    const pg_step_action *x = &r->d->actions[L.action];
    pg_net_status st = pg_net_wait_sent(r->net, L.peer, L.seq, r->opt.timeout_s);
    if (st) {
        net_fail(r, L.action, x, st);
        return 1;
    }
    if (r->check_sends && lent_hash(r->A + L.off, L.bytes) != L.hash) {
        fprintf(stderr, "stage %d: action %d %s(mb %d) to stage %d: its %zu bytes at arena offset %zu changed before "
                "they were sent (PIPE_CHECK_SENDS; a message lent from the arena must stay as it is)\n", r->d->stage,
                L.action, pg_step_kind_name(x->kind), x->mb, L.peer, L.bytes, L.off);
        return 1;
    }
    r->lent[i] = r->lent[--r->nlent];
    return 0;
}

/* Before action x: the lent messages it could overwrite, written (all of
 * them with x NULL: the step's end). 0, or 1 (printed). */
static int lent_before(pg_run *r, const pg_step_action *x)
{
    int cmp = x && (x->kind == PG_FWD || x->kind == PG_BWD_B || x->kind == PG_BWD_W);
    int recv = x && pg_step_msg_recv(x->kind);
    if (x && !cmp && !recv)
        return 0;
    for (int i = r->nlent - 1; i >= 0; i--) {
        const struct pg_lent_send *L = &r->lent[i];
        int hit = !x || (cmp && (x->slot < 0 || L->slot < 0 || x->slot == L->slot)) ||
                  (recv && (size_t)x->off < L->off + L->bytes && L->off < (size_t)x->off + msg_bytes(r, x));
        if (hit && lent_wait(r, i))
            return 1;
    }
    return 0;
}

const pg_chunk_desc *pg_run_chunk_fns(const pg_stage_desc *d, int chunk)
{
    for (int i = 0; i < d->nchunk_fns; i++)
        if (d->chunks[i].chunk == chunk)
            return &d->chunks[i];
    return NULL;
}

double pg_lr_at(const pg_train_desc *t, int64_t step)
{
    if (step < t->warmup) /* every schedule: a linear warm-up, lr (t + 1) / W */
        return t->lr * (double)(step + 1) / (double)t->warmup;
    if (t->lr_schedule == PG_LR_INVSQRT) /* lr sqrt(W / (t + 1)), W at least 1 */
        return t->lr * sqrt((double)(t->warmup > 0 ? t->warmup : 1) / (double)(step + 1));
    if (t->lr_schedule != PG_LR_COSINE && t->lr_schedule != PG_LR_LINEAR)
        return t->lr;
    int64_t span = t->steps - t->warmup; /* down to lr_min at the .pipe's steps, whatever --steps says */
    double p = span > 0 ? (double)(step - t->warmup) / (double)span : 1.0;
    if (p > 1.0)
        p = 1.0;
    if (t->lr_schedule == PG_LR_LINEAR)
        return t->lr_min + (t->lr - t->lr_min) * (1.0 - p);
    return t->lr_min + 0.5 * (t->lr - t->lr_min) * (1.0 + cos(3.14159265358979323846 * p));
}

/* The global norm from r->norm_in (every parameter's sum of squares, from
 * its owner: this stage's own in VERDICT, the others' with their verdicts),
 * added in model parameter order: the same bits for any partition. */
static double global_norm(const pg_run *r)
{
    double total = 0.0;
    for (int p = 0; p < r->d->nmodel_params; p++)
        if (!r->d->model_params[p].is_buffer)
            total += r->norm_in[p];
    return sqrt(total);
}

/* Global grad norm, then every local gradient scaled. */
static int grad_norm_clip(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    double norm = global_norm(r), coef = d->train.grad_clip / (norm + 1e-6);
    r->grad_norm = norm; /* the log line's, before clipping */
    if (coef < 1.0)
        for (int i = 0; i < d->nparams; i++) {
            const pg_param_desc *p = &d->params[i];
            if (!p->is_buffer && pg_scale(r->ctx, (float *)(r->A + p->grad_off), (float)coef, p->numel))
                return 1;
        }
    return 0;
}

static int opt_step(pg_run *r, int64_t step)
{
    const pg_stage_desc *d = r->d;
    const pg_train_desc *t = &d->train;
    float lr = (float)pg_lr_at(t, step);
    for (int i = 0; i < d->nparams; i++) {
        const pg_param_desc *p = &d->params[i];
        if (!pg_param_stepped(d, p)) /* a buffer, or a transmitted tie on a user: only the owner steps */
            continue;
        /* its elements [lo, hi) and their state: all of them, or with --zero 1
         * this replica's shard (zero.c; elementwise, so the same bits) */
        int64_t lo, hi;
        float *s0 = pg_zero_state(r, p, 0, &lo, &hi), *s1 = pg_zero_state(r, p, 1, &lo, &hi);
        if (hi <= lo)
            continue;
        float *w = (float *)(r->A + p->off) + lo;
        const float *g = (const float *)(r->A + p->grad_off) + lo;
        float wd = (float)p->weight_decay; /* by the rule or its group (adam: 0) */
        int rc;
        if (pg_optim_adam(t->optimizer))
            rc = pg_adamw_step(r->ctx, hi - lo, w, g, s0, s1, lr, (float)t->beta1, (float)t->beta2, (float)t->adam_eps,
                               wd, step + 1);
        else
            rc = pg_sgd_step(r->ctx, hi - lo, w, g, s0, lr, (float)t->momentum, wd, step == 0);
        if (rc)
            return 1;
    }
    return 0;
}

/* ---- parameters used by several layers, tied parameters ------------------
 * Each use of a parameter accumulates its gradient in its own buffer (nacc of
 * them from grad_off, in layer order). The gradient is their sum in layer
 * order, first into the first: on one stage by fold_uses; across stages the
 * owner (the lowest using stage, so it holds the first uses) folds its own,
 * then adds the other stages' accumulators in stage order. Both do the same
 * float operations, so a tied model trains bitwise alike on any stage count. */

static int nacc_at(const pg_param_desc *m, int stage)
{
    int n = m->stage_nacc ? m->stage_nacc[stage] : 1;
    return n > 0 ? n : 1;
}

static int nacc_local(const pg_param_desc *p) { return p->nacc > 0 ? p->nacc : 1; }

/* Floats from one accumulator to the next (pg_stage.h), and n of them as bytes. */
static int64_t acc_numel(const pg_param_desc *p) { return p->acc_numel > 0 ? p->acc_numel : p->numel; }
static size_t acc_block_bytes(const pg_param_desc *p, int n)
{
    return (size_t)((int64_t)(n - 1) * acc_numel(p) + p->numel) * 4;
}

static const pg_param_desc *local_param(const pg_stage_desc *d, int index)
{
    for (int i = 0; i < d->nparams; i++)
        if (d->params[i].index == index)
            return &d->params[i];
    return NULL;
}

static int is_cross_stage_tie(const pg_param_desc *p)
{
    return p->tie != 0 && p->stage_mask && (p->stage_mask & (p->stage_mask - 1));
}

static int fold_uses(pg_run *r, const pg_param_desc *p)
{
    float *g = (float *)(r->A + p->grad_off);
    for (int j = 1; j < nacc_local(p); j++)
        if (pg_axpy_inplace(r->ctx, g, g + (int64_t)j * acc_numel(p), p->numel))
            return 1;
    return 0;
}

/* g += each of the n accumulators received into the workspace, in order */
static int add_block(pg_run *r, const pg_param_desc *p, int n)
{
    float *g = (float *)(r->A + p->grad_off);
    const float *ws = (const float *)(r->A + r->d->ws_off);
    for (int j = 0; j < n; j++)
        if (pg_axpy_inplace(r->ctx, g, ws + (int64_t)j * acc_numel(p), p->numel))
            return 1;
    return 0;
}

static int tie_net(pg_run *r, int a, const pg_step_action *x, const pg_param_desc *p, int peer, const char *what,
                   pg_net_status st)
{
    if (st == PG_NET_TIMEOUT)
        fprintf(stderr, "stage %d waiting at action %d %s(%s) for %s from stage %d for %g s\n", r->d->stage, a,
                pg_step_kind_name(x->kind), p->name, what, peer, r->opt.timeout_s);
    else
        fprintf(stderr, "stage %d: action %d %s(%s): %s with stage %d failed: %s\n", r->d->stage, a,
                pg_step_kind_name(x->kind), p->name, what, peer, pg_net_error(r->net));
    return 1;
}

/* Every tie action names a parameter this stage trains. */
static const pg_param_desc *tie_param(pg_run *r, int a, const pg_step_action *x)
{
    const pg_stage_desc *d = r->d;
    const pg_param_desc *p = x->param >= 0 && x->param < d->nmodel_params ? local_param(d, x->param) : NULL;
    if (!p || p->grad_off < 0 || x->peer < 0 || x->peer >= d->nstages) {
        fprintf(stderr, "stage %d: action %d %s names parameter %d, which this stage does not train\n", d->stage, a,
                pg_step_kind_name(x->kind), x->param);
        return NULL;
    }
    return p;
}

/* The tie actions: the value out at the start (transmit), the users'
 * accumulators in as soon as they are final, the sum back (replicate). */
int pg_run_tie_action(pg_run *r, int a, const pg_step_action *x)
{
    const pg_stage_desc *d = r->d;
    const pg_param_desc *p = tie_param(r, a, x);
    if (!p)
        return 1;
    const pg_param_desc *m = &d->model_params[p->index];
    size_t vb = (size_t)p->numel * 4;
    pg_net_status st;
    switch (x->kind) {
    case PG_TIE_SEND:
        if ((st = pg_net_send(r->net, x->peer, PG_TAG(PG_TIE_SEND, p->index, 0), r->A + p->off, vb)))
            return tie_net(r, a, x, p, x->peer, "sending the value", st);
        return 0;
    case PG_TIE_RECV:
        if ((st = pg_net_recv(r->net, x->peer, PG_TAG(PG_TIE_SEND, p->index, 0), r->A + p->off, vb, r->opt.timeout_s)))
            return tie_net(r, a, x, p, x->peer, "receiving the value", st);
        return pg_param_written(r->ctx, (const float *)(r->A + p->off), p->numel); /* its bf16 shadow */
    case PG_TIE_GRAD_SEND:
        if ((st = pg_net_send(r->net, x->peer, PG_TAG(PG_TIE_GRAD_SEND, p->index, 0), r->A + p->grad_off,
                              acc_block_bytes(p, nacc_local(p)))))
            return tie_net(r, a, x, p, x->peer, "sending the gradient", st);
        return 0;
    case PG_TIE_SUM_SEND:
        if ((st = pg_net_send(r->net, x->peer, PG_TAG(PG_TIE_SUM_SEND, p->index, 0), r->A + p->grad_off, vb)))
            return tie_net(r, a, x, p, x->peer, "sending the summed gradient", st);
        return 0;
    case PG_TIE_SUM_RECV:
        if ((st = pg_net_recv(r->net, x->peer, PG_TAG(PG_TIE_SUM_SEND, p->index, 0), r->A + p->grad_off, vb,
                              r->opt.timeout_s)))
            return tie_net(r, a, x, p, x->peer, "receiving the summed gradient", st);
        return 0;
    default: { /* PG_TIE_GRAD_RECV, one per user in stage order: the first one folds the owner's own uses */
        int first = d->stage + 1;
        while (first < d->nstages && first < 64 && !(m->stage_mask >> first & 1))
            first++;
        if (x->peer == first && fold_uses(r, p))
            return 1;
        int n = nacc_at(m, x->peer);
        if ((st = pg_net_recv(r->net, x->peer, PG_TAG(PG_TIE_GRAD_SEND, p->index, 0), r->A + d->ws_off, acc_block_bytes(p, n),
                              r->opt.timeout_s)))
            return tie_net(r, a, x, p, x->peer, "receiving the gradient", st);
        return add_block(r, p, n);
    }
    }
}

/* Gradients of parameters used by several layers of this stage alone. */
static int fold_local(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    for (int i = 0; i < d->nparams; i++) {
        const pg_param_desc *p = &d->params[i];
        if (!p->is_buffer && nacc_local(p) > 1 && !is_cross_stage_tie(p) && fold_uses(r, p))
            return 1;
    }
    return 0;
}

/* PIPE_CHECK_TIES=1: after the optimizer, every user of a replicated parameter
 * sends a hash of its copy to the owner, which fails loudly on a difference. */
static int tie_check(pg_run *r, int a, const pg_step_action *x, int64_t step)
{
    const pg_stage_desc *d = r->d;
    for (int i = 0; i < d->nparams; i++) {
        const pg_param_desc *p = &d->params[i];
        if (p->tie != 1 || !is_cross_stage_tie(p))
            continue;
        if (pg_copy_to_host(r->ctx, r->host, r->A + p->off, (size_t)p->numel * 4))
            return 1;
        uint64_t h = pg_hash64(r->host, (size_t)p->numel * 4, 0xcbf29ce484222325ull), hu = 0;
        pg_net_status st;
        if (d->stage != p->owner) {
            if ((st = pg_net_send(r->net, p->owner, PG_TAG(PG_TIE_SUM_SEND, p->index, 2), &h, sizeof h)))
                return tie_net(r, a, x, p, p->owner, "sending the copy's hash", st);
            continue;
        }
        for (int u = 0; u < d->nstages && u < 64; u++) {
            if (u == d->stage || !(p->stage_mask >> u & 1))
                continue;
            if ((st = pg_net_recv(r->net, u, PG_TAG(PG_TIE_SUM_SEND, p->index, 2), &hu, sizeof hu, r->opt.timeout_s)))
                return tie_net(r, a, x, p, u, "receiving the copy's hash", st);
            if (hu != h) {
                fprintf(stderr, "stage %d: tied parameter %s: the copy on stage %d differs from stage %d's after step %lld "
                                "(hash %016llx vs %016llx)\n",
                        d->stage, p->name, u, d->stage, (long long)step + 1, (unsigned long long)hu,
                        (unsigned long long)h);
                return 1;
            }
        }
    }
    return 0;
}

/* VERDICT: this stage's gradients final (the local folds, the deferred sums
 * of squares and losses fetched, every gradient and the loss summed over the
 * replicas: dp.c), then its findings (guard.c). Its users' tie accumulators
 * were added before it (TIE_GRAD_RECV), so the sums of squares are of the
 * gradients the optimizer would see. */
static int make_verdict(pg_run *r, int a, int64_t step)
{
    if (fold_local(r) || pg_backend_fetch(r->ctx) || pg_dp_reduce(r, step))
        return 1;
    if (r->tracing && r->dp)
        pg_trace_dp(r, step); /* the reduction's spans (dp_mark, dp.c) */
    return pg_guard_findings(r, step, a);
}

/* ---- device time ---------------------------------------------------------------
 * On a backend with a device clock (CUDA; pg_ops.h's pg_backend_mark) the host
 * only enqueues the work, so the step is timed by marks on the device's
 * stream: mark 0 as the step begins (the host's time then maps the device's
 * clock onto the host's: the stream is idle after the previous step's end),
 * one where each action starts outside a run of compute (every action with
 * --trace/--profile: each F/B/W is then a run of its own, the same kernels
 * in the same order) and one where the last ends, and two around the clip's
 * and the optimizer's work. The step's compute is the device time of its
 * compute spans, a trace's action spans run from mark to mark, and both are
 * read once, after the step's synchronisation. The CPU's ops run at the
 * call: timed on the host, unmarked. */

int pg_run_clock_init(pg_run *r)
{
    int64_t n = r->d->nactions;
    r->dev_clock = pg_backend_device_clock(r->ctx);
    if (!r->dev_clock)
        return 0;
    r->mk_at = malloc((size_t)(n + 1) * sizeof *r->mk_at);
    r->mk_span = malloc((size_t)(2 * n + 1) * 2 * sizeof *r->mk_span);
    r->mk_t = malloc((size_t)(3 * n + 2) * sizeof *r->mk_t);
    if (!r->mk_at || !r->mk_span || !r->mk_t) {
        fprintf(stderr, "stage %d: out of memory for the device's timing marks of %" PRId64 " actions\n", r->d->stage, n);
        return 1;
    }
    return 0;
}

void pg_run_clock_free(pg_run *r)
{
    free(r->mk_at);
    free(r->mk_span);
    free(r->mk_t);
    r->mk_at = r->mk_span = NULL;
    r->mk_t = NULL;
}

/* A mark on the device's stream (run_start: a run of compute opens next); -1: failed */
static int dev_mark(pg_run *r, int run_start)
{
    int m = pg_backend_mark(r->ctx, run_start);
    if (m >= 0)
        r->nmk = m + 1;
    return m;
}

/* The compute span from mark m0 to a mark made now; 0, or 1 failed. */
static int dev_span_end(pg_run *r, int m0)
{
    int m1 = dev_mark(r, 0);
    if (m1 < 0)
        return 1;
    r->mk_span[2 * r->nmk_span] = m0;
    r->mk_span[2 * r->nmk_span + 1] = m1;
    r->nmk_span++;
    return 0;
}

/* The mark where action a starts (nactions: where the last ends): the
 * compute span open since mark *open ends there, and one opens if a
 * computes (at a mark of its own, made with run_start). */
static int dev_mark_action(pg_run *r, int a, int computes, int *open)
{
    int o = *open;
    *open = -1;
    if (o >= 0 && dev_span_end(r, o))
        return 1;
    if (o >= 0 && !computes) { /* the span's end is where a starts */
        r->mk_at[a] = r->nmk - 1;
        return 0;
    }
    if ((r->mk_at[a] = dev_mark(r, computes)) < 0)
        return 1;
    if (computes)
        *open = r->mk_at[a];
    return 0;
}

/* After the step's synchronisation: its compute time from the marks, and with
 * --trace its spans (batch and zeroing, each action, the step's end until
 * t_end) on the host's clock, mark 0 at h0. */
static int dev_times(pg_run *r, int64_t step, double step_t0, double h0, double t_end, double *compute)
{
    const pg_stage_desc *d = r->d;
    if (pg_backend_mark_times(r->ctx, r->mk_t, r->nmk))
        return 1;
    *compute = 0.0;
    for (int i = 0; i < r->nmk_span; i++)
        *compute += r->mk_t[r->mk_span[2 * i + 1]] - r->mk_t[r->mk_span[2 * i]];
    if (!r->tracing)
        return 0;
    double t = h0 + r->mk_t[r->mk_at[0]];
    pg_trace_data(r, step, step_t0, t);
    for (int a = 0; a < d->nactions; a++) { /* traced: every action starts at a mark */
        double t1 = h0 + r->mk_t[r->mk_at[a + 1]];
        pg_trace_action(r, step, a, t, t1);
        t = t1;
    }
    pg_trace_end(r, step, t, t_end);
    pg_trace_step(r, step, step_t0, t_end);
    return 0;
}

int pg_run_step(pg_run *r, int64_t step, double *loss_out)
{
    const pg_stage_desc *d = r->d;
    double step_t0 = r->tracing ? pg_run_now() : 0.0; /* --trace / --profile (trace.c) */
    pg_trace_between(r, step_t0); /* the main loop's work since the last step ends here */
    /* step hooks (pg_ops.h): the backend may replay runs of compute as CUDA graphs */
    int adamw = pg_optim_adam(d->train.optimizer), rep;
    pg_step_info si = {step, (float)pg_lr_at(&d->train, step), adamw ? (float)d->train.beta1 : 0.0f,
                       adamw ? (float)d->train.beta2 : 0.0f, !r->opt.no_graph};
    if (pg_backend_step_begin(r->ctx, &si))
        return 1;
    double h0 = r->dev_clock ? pg_run_now() : 0.0; /* device time: mark 0's on the host's clock */
    r->nmk = r->nmk_span = 0;
    if ((r->dev_clock && dev_mark(r, 0) < 0) || (rep = pg_backend_compute(r->ctx, -1, NULL)) < 0)
        return 1;
    for (int i = 0; i < d->nparams && !rep; i++)
        if (!d->params[i].is_buffer &&
            pg_zero(r->ctx, (float *)(r->A + d->params[i].grad_off), (int64_t)acc_block_bytes(&d->params[i], nacc_local(&d->params[i])) / 4))
            return 1;
    if (pg_backend_compute_end(r->ctx) || load_batch(r, step))
        return 1;
    /* the trace's spans are contiguous: each starts where the one before ended */
    double tr_t = r->tracing ? pg_run_now() : 0.0;
    if (r->tracing && !r->dev_clock)
        pg_trace_data(r, step, step_t0, tr_t); /* the gradients zeroed, the batch loaded */
    double compute = 0.0;
    int open = -1, prev_cmp = 0; /* device time: the open compute span's first mark; action a-1 computed */
    r->verdict_state = 0;
    int have_norm = 0;
    r->step_verdict = PG_VERDICT_OK;
    const char *ct = getenv("PIPE_CHECK_TIES");
    int check_ties = ct && *ct && strcmp(ct, "0") != 0;
    for (int a = 0; a < d->nactions; a++) {
        const pg_step_action *x = &d->actions[a];
        r->cur_action = a;
        pg_net_status st = PG_NET_OK;
        /* a run of compute ends before any other action; timed on the device
         * and traced, before each action (a span each) */
        int cmp = x->kind == PG_FWD || x->kind == PG_BWD_B || x->kind == PG_BWD_W;
        int split = !cmp || (r->dev_clock && r->tracing);
        if (split && pg_backend_compute_end(r->ctx))
            return 1;
        if (r->dev_clock && (split || !prev_cmp) && dev_mark_action(r, a, cmp, &open))
            return 1;
        if (r->nlent && lent_before(r, x))
            return 1;
        else if (r->dev_clock && !split && prev_cmp)
            r->mk_at[a] = -1; /* inside a run: its start and end only */
        prev_cmp = cmp;
        switch (x->kind) {
        case PG_FWD: case PG_BWD_B: case PG_BWD_W: {
            const pg_chunk_desc *cf = pg_run_chunk_fns(d, x->chunk);
            if (!cf) {
                fprintf(stderr, "stage %d: action %d names chunk %d, which this stage does not hold\n", d->stage, a, x->chunk);
                return 1;
            }
            pg_mb_io io = {x->mb, x->slot, d->mb_recompute[x->mb], r->mb_rows[x->mb], r->mb_first[x->mb], step,
                           d->train.seed, 0.0, 0, NULL, NULL, 0, 0}; /* this replica's rows (dp.c) */
            if (x->kind == PG_BWD_W)
                pg_dp_mb_io(r, a, &io); /* the replicas start summing gradients as its layers finish them */
            double t0 = pg_run_now();
            int is_loss = x->kind == PG_FWD && d->has_loss && x->chunk == d->nchunks - 1;
            rep = pg_backend_compute(r->ctx, a, is_loss ? &r->loss[x->mb] : NULL);
            int rc = rep < 0 ? 1 : rep ? 0 : x->kind == PG_FWD ? cf->fwd(r->ctx, r->A, &io)
                   : x->kind == PG_BWD_B ? cf->bwd_b(r->ctx, r->A, &io) : cf->bwd_w(r->ctx, r->A, &io);
            compute += pg_run_now() - t0;
            if (rc) {
                fprintf(stderr, "stage %d: action %d %s(mb %d, chunk %d) failed\n", d->stage, a, pg_step_kind_name(x->kind),
                        x->mb, x->chunk);
                return 1;
            }
            if (x->kind == PG_FWD && d->has_loss && x->chunk == d->nchunks - 1)
                r->loss[x->mb] = io.loss;
            break;
        }
        case PG_SEND_ACT: case PG_SEND_GRAD: case PG_SEND_SKIP: case PG_SEND_SKIP_GRAD:
            if (lent_send(r, a, x, &st))
                return 1;
            break;
        case PG_RECV_ACT: case PG_RECV_GRAD: case PG_RECV_SKIP: case PG_RECV_SKIP_GRAD:
            st = pg_net_recv(r->net, x->peer, x->tag, r->A + x->off, msg_bytes(r, x), r->opt.timeout_s);
            break;
        case PG_TIE_SEND: case PG_TIE_RECV: case PG_TIE_GRAD_SEND: case PG_TIE_GRAD_RECV: case PG_TIE_SUM_SEND:
        case PG_TIE_SUM_RECV:
            if (pg_run_tie_action(r, a, x))
                return 1;
            break;
        case PG_VERDICT:
            if (r->verdict_state) {
                fprintf(stderr, "stage %d: action %d VERDICT: the step's verdict is made already\n", d->stage, a);
                return 1;
            }
            if (make_verdict(r, a, step))
                return 1;
            break;
        case PG_VERDICT_SEND: case PG_VERDICT_RECV:
            if (x->kind == PG_VERDICT_SEND ? pg_guard_give(r, a, x, step) : pg_guard_take(r, a, x, step))
                return 1;
            break;
        case PG_GRAD_NORM: {
            if (pg_guard_decide(r, a, x, step) || r->step_verdict == PG_VERDICT_STOP)
                return 1;
            if (r->step_verdict == PG_VERDICT_SKIP)
                break;
            double t0 = pg_run_now();
            int m0 = r->dev_clock && d->train.grad_clip > 0 ? dev_mark(r, 0) : 0;
            if (m0 < 0 || (d->train.grad_clip > 0 && grad_norm_clip(r)) ||
                (r->dev_clock && d->train.grad_clip > 0 && dev_span_end(r, m0)))
                return 1;
            have_norm = d->train.grad_clip > 0;
            compute += pg_run_now() - t0;
            break;
        }
        case PG_OPT_STEP: {
            if (pg_guard_decide(r, a, x, step) || r->step_verdict == PG_VERDICT_STOP)
                return 1;
            if (r->step_verdict == PG_VERDICT_SKIP)
                break;
            double t0 = pg_run_now();
            int m0 = r->dev_clock ? dev_mark(r, 1) : 0;
            if (m0 < 0 || (rep = pg_backend_compute(r->ctx, a, NULL)) < 0)
                return 1;
            if ((!rep && opt_step(r, step)) || pg_backend_compute_end(r->ctx) || (r->dev_clock && dev_span_end(r, m0)) ||
                pg_zero_allgather(r))
                return 1;
            compute += pg_run_now() - t0;
            if (check_ties && tie_check(r, a, x, step))
                return 1;
            break;
        }
        default:
            fprintf(stderr, "stage %d: action %d: %s is not supported by this runtime yet\n", d->stage, a,
                    pg_step_kind_name(x->kind));
            return 1;
        }
        if (st) {
            net_fail(r, a, x, st);
            return 1;
        }
        pg_dp_action_end(r, a); /* the gradients its layers' hooks did not post (dp.c) */
        if (r->tracing && !r->dev_clock) {
            double t = pg_run_now();
            pg_trace_action(r, step, a, tr_t, t);
            tr_t = t;
        }
    }
    /* a table without OPT_STEP (none pipegen makes) still decides what its VERDICT found */
    if (lent_before(r, NULL) || pg_backend_compute_end(r->ctx) || (r->dev_clock && dev_mark_action(r, d->nactions, 0, &open)) ||
        (r->verdict_state == 1 && pg_guard_decide(r, -1, NULL, step)) || r->step_verdict == PG_VERDICT_STOP)
        return 1;
    if (pg_sync(r->ctx) || pg_backend_step_end(r->ctx))
        return 1;
    if (r->dev_clock && dev_times(r, step, step_t0, h0, pg_run_now(), &compute)) /* device time: the marks read */
        return 1;
    if (!have_norm && pg_run_logged(r, step)) /* the log line's norm: the verdicts brought every sum (guard.c) */
        r->grad_norm = global_norm(r);
    *loss_out = r->loss_global; /* this replica's micro-batches in order, then the replicas in order (dp.c) */
    if (step > r->first_step) /* the run's first step warms up: timed from the next */
        r->compute_s += compute;
    if (r->tracing && !r->dev_clock) { /* the step's end: the device's work waited for */
        double t = pg_run_now();
        pg_trace_end(r, step, tr_t, t);
        pg_trace_step(r, step, step_t0, t);
    }
    return 0;
}

/* runtime/core/step.c — one training step of a stage: load this step's data,
 * run the generated action table (compute through the chunk functions,
 * messages through pg_net with the table's offsets, byte counts and tags),
 * then the optimizer. Every reduction has a fixed order. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "stage_run.h"

double pg_run_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *const kind_names[PG_STEP_KIND_COUNT] = {
    "FWD", "BWD_B", "BWD_W", "SEND_ACT", "RECV_ACT", "SEND_GRAD", "RECV_GRAD", "SEND_SKIP", "RECV_SKIP",
    "SEND_SKIP_GRAD", "RECV_SKIP_GRAD", "TIE_REDUCE", "TIE_SEND", "TIE_RECV", "TIE_GRAD_SEND", "TIE_GRAD_RECV",
    "GRAD_NORM", "OPT_STEP"};

static void net_fail(pg_run *r, int a, const pg_step_action *x, pg_net_status st)
{
    const pg_stage_desc *d = r->d;
    const char *kn = (unsigned)x->kind < PG_STEP_KIND_COUNT ? kind_names[x->kind] : "?";
    int recv = x->kind == PG_RECV_ACT || x->kind == PG_RECV_GRAD || x->kind == PG_RECV_SKIP || x->kind == PG_RECV_SKIP_GRAD;
    if (st == PG_NET_TIMEOUT)
        fprintf(stderr, "stage %d waiting at action %d %s(mb %d) from stage %d for %g s\n", d->stage, a, kn, x->mb,
                x->peer, r->opt.timeout_s);
    else
        fprintf(stderr, "stage %d: action %d %s(mb %d) %s stage %d failed: %s\n", d->stage, a, kn, x->mb,
                recv ? "from" : "to", x->peer, pg_net_error(r->net));
}

/* Rows [first, first+rows) of the batch of `step` from a data file, cycling. */
static void rows_from_file(const pg_datafile *f, int64_t step, int64_t batch, void *dst)
{
    size_t rb = (size_t)f->sample_elems * 4;
    for (int64_t i = 0; i < batch; i++) {
        uint64_t s = ((uint64_t)step * (uint64_t)batch + (uint64_t)i) % f->samples;
        memcpy((char *)dst + (size_t)i * rb, (const char *)f->data + s * rb, rb);
    }
}

/* Synthetic data: a fixed set of 8 batches, cycled, so the loss visibly falls. */
#define SYNTH_BATCHES 8

static int load_batch(pg_run *r, int64_t step)
{
    const pg_stage_desc *d = r->d;
    int64_t B = d->train.batch, first = (step % SYNTH_BATCHES) * B;
    if (d->has_input) {
        size_t bytes = (size_t)(B * d->input_per_sample * 4);
        if (r->have_in)
            rows_from_file(&r->in, step, B, r->host);
        else if (d->input_dtype == 2)
            pg_synth_i32(r->host, d->train.seed, 0, first, B, d->input_per_sample, (int32_t)d->input_vocab);
        else
            pg_synth_f32(r->host, d->train.seed, 0, first, B, d->input_per_sample);
        if (pg_copy_to_dev(r->ctx, r->A + d->input_off, r->host, bytes))
            return 1;
    }
    if (d->has_loss) {
        size_t bytes = (size_t)(B * d->target_per_sample * 4);
        if (r->have_tg)
            rows_from_file(&r->tg, step, B, r->host);
        else if (d->target_dtype == 2)
            pg_synth_i32(r->host, d->train.seed, 1, first, B, d->target_per_sample, (int32_t)d->target_vocab);
        else
            pg_synth_f32(r->host, d->train.seed, 1, first, B, d->target_per_sample);
        if (pg_copy_to_dev(r->ctx, r->A + d->target_off, r->host, bytes))
            return 1;
    }
    return 0;
}

static const pg_chunk_desc *chunk_fns(const pg_stage_desc *d, int chunk)
{
    for (int i = 0; i < d->nchunk_fns; i++)
        if (d->chunks[i].chunk == chunk)
            return &d->chunks[i];
    return NULL;
}

/* Learning rate of a step: constant, or linear warm-up then cosine to lr_min
 * over train.steps (the horizon is the .pipe's steps, whatever --steps says). */
static double lr_at(const pg_train_desc *t, int64_t step)
{
    if (t->lr_schedule != PG_LR_COSINE)
        return t->lr;
    if (step < t->warmup)
        return t->lr * (double)(step + 1) / (double)t->warmup;
    int64_t span = t->steps - t->warmup;
    double p = span > 0 ? (double)(step - t->warmup) / (double)span : 1.0;
    if (p > 1.0)
        p = 1.0;
    return t->lr_min + 0.5 * (t->lr - t->lr_min) * (1.0 + cos(3.14159265358979323846 * p));
}

/* Global grad norm: every stage sends its owned parameters' sums of squares to
 * every other stage; each adds them in model parameter order, so the result
 * is the same bits for any partition. Then every local gradient is scaled. */
static int grad_norm_clip(pg_run *r, int a, const pg_step_action *x)
{
    const pg_stage_desc *d = r->d;
    int np = d->nmodel_params;
    memset(r->norms, 0, (size_t)np * sizeof(double));
    for (int i = 0; i < d->nparams; i++) {
        const pg_param_desc *p = &d->params[i];
        if (p->is_buffer || p->owner != d->stage)
            continue;
        if (pg_sumsq(r->ctx, p->numel, (const float *)(r->A + p->grad_off), &r->norms[p->index]))
            return 1;
    }
    uint32_t tag = PG_TAG(PG_TAG_NORM, 0, 0);
    for (int k = 0; k < d->nstages; k++) {
        if (k == d->stage)
            continue;
        pg_net_status st = pg_net_send(r->net, k, tag, r->norms, (size_t)np * sizeof(double));
        if (st) {
            net_fail(r, a, x, st);
            return 1;
        }
    }
    /* norm_in[p] takes the owner's value */
    memcpy(r->norm_in, r->norms, (size_t)np * sizeof(double));
    for (int k = 0; k < d->nstages; k++) {
        if (k == d->stage)
            continue;
        pg_net_status st = pg_net_recv(r->net, k, tag, r->norms, (size_t)np * sizeof(double), r->opt.timeout_s);
        if (st) {
            net_fail(r, a, x, st);
            return 1;
        }
        for (int p = 0; p < np; p++)
            if (d->model_params[p].owner == k)
                r->norm_in[p] = r->norms[p];
    }
    double total = 0.0;
    for (int p = 0; p < np; p++)
        if (!d->model_params[p].is_buffer)
            total += r->norm_in[p];
    double norm = sqrt(total), coef = d->train.grad_clip / (norm + 1e-6);
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
    float lr = (float)lr_at(t, step);
    for (int i = 0; i < d->nparams; i++) {
        const pg_param_desc *p = &d->params[i];
        if (p->is_buffer)
            continue;
        float *w = (float *)(r->A + p->off);
        const float *g = (const float *)(r->A + p->grad_off);
        float wd = p->decay ? (float)t->weight_decay : 0.0f;
        int rc;
        if (t->optimizer == PG_OPTIM_ADAMW)
            rc = pg_adamw_step(r->ctx, p->numel, w, g, (float *)(r->A + p->opt_off[0]), (float *)(r->A + p->opt_off[1]),
                               lr, (float)t->beta1, (float)t->beta2, (float)t->adam_eps, wd, step + 1);
        else
            rc = pg_sgd_step(r->ctx, p->numel, w, g, p->opt_off[0] >= 0 ? (float *)(r->A + p->opt_off[0]) : NULL, lr,
                             (float)t->momentum, wd, step == 0);
        if (rc)
            return 1;
    }
    return 0;
}

int pg_run_step(pg_run *r, int64_t step, double *loss_out)
{
    const pg_stage_desc *d = r->d;
    for (int i = 0; i < d->nparams; i++)
        if (!d->params[i].is_buffer && pg_zero(r->ctx, (float *)(r->A + d->params[i].grad_off), d->params[i].numel))
            return 1;
    if (load_batch(r, step))
        return 1;
    double compute = 0.0;
    for (int a = 0; a < d->nactions; a++) {
        const pg_step_action *x = &d->actions[a];
        r->cur_action = a;
        pg_net_status st = PG_NET_OK;
        switch (x->kind) {
        case PG_FWD: case PG_BWD_B: case PG_BWD_W: {
            const pg_chunk_desc *cf = chunk_fns(d, x->chunk);
            if (!cf) {
                fprintf(stderr, "stage %d: action %d names chunk %d, which this stage does not hold\n", d->stage, a, x->chunk);
                return 1;
            }
            pg_mb_io io = {x->mb, x->slot, d->mb_recompute[x->mb], d->mb_rows[x->mb], d->mb_first_row[x->mb], step,
                           d->train.seed, 0.0};
            double t0 = pg_run_now();
            int rc = x->kind == PG_FWD ? cf->fwd(r->ctx, r->A, &io)
                   : x->kind == PG_BWD_B ? cf->bwd_b(r->ctx, r->A, &io) : cf->bwd_w(r->ctx, r->A, &io);
            compute += pg_run_now() - t0;
            if (rc) {
                fprintf(stderr, "stage %d: action %d %s(mb %d, chunk %d) failed\n", d->stage, a, kind_names[x->kind],
                        x->mb, x->chunk);
                return 1;
            }
            if (x->kind == PG_FWD && d->has_loss && x->chunk == d->nchunks - 1)
                r->loss[x->mb] = io.loss;
            break;
        }
        case PG_SEND_ACT: case PG_SEND_GRAD: case PG_SEND_SKIP: case PG_SEND_SKIP_GRAD:
            st = pg_net_send(r->net, x->peer, x->tag, r->A + x->off, (size_t)x->bytes);
            break;
        case PG_RECV_ACT: case PG_RECV_GRAD: case PG_RECV_SKIP: case PG_RECV_SKIP_GRAD:
            st = pg_net_recv(r->net, x->peer, x->tag, r->A + x->off, (size_t)x->bytes, r->opt.timeout_s);
            break;
        case PG_GRAD_NORM: {
            double t0 = pg_run_now();
            if (d->train.grad_clip > 0 && grad_norm_clip(r, a, x))
                return 1;
            compute += pg_run_now() - t0;
            break;
        }
        case PG_OPT_STEP: {
            double t0 = pg_run_now();
            if (opt_step(r, step))
                return 1;
            compute += pg_run_now() - t0;
            break;
        }
        default:
            fprintf(stderr, "stage %d: action %d: %s is not supported by this runtime yet\n", d->stage, a,
                    (unsigned)x->kind < PG_STEP_KIND_COUNT ? kind_names[x->kind] : "?");
            return 1;
        }
        if (st) {
            net_fail(r, a, x, st);
            return 1;
        }
    }
    if (pg_sync(r->ctx))
        return 1;
    double sum = 0.0;
    if (d->has_loss)
        for (int mb = 0; mb < d->nmb; mb++)
            sum += r->loss[mb];
    *loss_out = sum;
    if (step > 0)
        r->compute_s += compute;
    return 0;
}

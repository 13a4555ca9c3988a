/* runtime/core/eval.c — evaluation (--eval-data, --eval-targets with
 * train.eval_every and train.eval_batches) and --predict FILE --out OUT.pgd.
 *
 * Both are passes of forwards through the pipeline by the stage's
 * forward-only action table (pg_stage_desc.eval_actions, which pipegen builds
 * from the step's table and verifies like it: no pass can hang), in
 * inference mode (io.infer: no dropout, batch norm by its running statistics,
 * nothing updated). No gradient is made, no optimizer runs, and every buffer
 * a pass writes is one the next step writes before it reads it (activations,
 * the batch's input and target, a transmitted tie's copy, which gets the
 * owner's current value, as the next step's TIE_SEND gives it), so a run with
 * evaluation trains bitwise as one without.
 *
 * A pass goes over its rows in batches of train.batch rows, the last one
 * shorter, each split into the step's micro-batches as the .pipe splits a
 * batch; a batch of fewer rows than micro-batches gives micro-batch i < rows
 * row i and every later one a filler row (a copy of row 0), whose loss and
 * output are dropped. Stage 0 loads the inputs and the loss stage the targets
 * (--predict: zeros, valid for any loss) of each batch on its own, in file
 * order; a language model's token stream is cut into windows one after
 * another (window w: tokens [w seq, (w + 1) seq), its target one further).
 *
 * The loss of a pass is the sum of its micro-batches' losses in order, batch
 * by batch, times batch / rows: the mean over the rows of what a step's loss
 * line shows for a batch. cross_entropy(ignore = id) divides by the counted
 * positions the runtime writes before each step (ignore.c): a pass writes 1
 * there, sums, and divides by the target positions of its rows that are not
 * the ignored id (the next step writes its own count again). Like the training loss, its bits do not depend on
 * the stage count, the schedule or the threads. With replicas, replica 0
 * runs every pass over whole batches (the same bits as one replica) while the
 * other replicas wait for it. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "io_atomic.h"
#include "stage_run.h"

/* The rows of one kind of pass: the evaluation set, or the --predict rows. */
typedef struct ev_set {
    const char *opt;     /* "--eval-data" or "--predict": messages */
    pg_dataset in, tg;   /* stage 0: in; the loss stage: tg (evaluation: the targets or the token stream) */
    int tokens;          /* a token stream: windows one after another */
    uint64_t rows;       /* rows of a whole pass (stage 0's count, which it tells every stage) */
} ev_set;

struct pg_eval {
    ev_set ev, pr;
    int eval_on, predict_on;        /* given --eval-data, --predict (every stage) */
    int64_t *mb_rows, *mb_first;    /* [nmb]: this batch's split */
    int *mb_real;                   /* [nmb]: 0 for a filler */
    uint64_t *idx;                  /* [batch]: the batch's samples, or its windows' offsets */
    unsigned char *in_host, *tg_host; /* [batch, per sample] */
    float *out;                     /* the loss stage: [batch, output per sample] */
};

/* What a pass measured (the loss stage). */
typedef struct ev_result {
    double loss_sum;                /* the real micro-batches' losses, in order */
    uint64_t rows, correct;         /* rows passed; classifier rows whose arg max is the target */
    uint64_t counted;               /* target positions that count (not cross_entropy's ignored id) */
} ev_result;

static int logs(const pg_run *r) { return r->d->has_loss && r->replica == 0; }

/* A classifier: cross entropy on one class index per sample. */
static int classifier(const pg_stage_desc *d)
{
    return d->train.loss == PG_LOSS_CROSS_ENTROPY && d->target_rank == 0;
}

static int lm_stream(const pg_stage_desc *d, const pg_paths *p) { return pg_tokens_is_stream(d, p); }

/* ---- opening --------------------------------------------------------------- */

/* Stage 0's inputs, and the loss stage's targets (tg; a token stream: its own
 * copy of the stream; NULL: none, --predict). 0 or 1 (printed). */
static int open_set(pg_run *r, ev_set *s, const pg_paths *in, const pg_paths *tg)
{
    const pg_stage_desc *d = r->d;
    char err[1024];
    s->tokens = lm_stream(d, in);
    if (s->tokens) {
        if (in->n > 1) {
            fprintf(stderr, "stage %d: %s %s is a token stream: a language model reads one stream, not %d files\n",
                    d->stage, s->opt, in->p[0], in->n);
            return 1;
        }
        if (d->has_input && pg_tokens_open_stream(d, s->opt, in->p[0], &s->in))
            return 1;
        if (d->has_loss && pg_tokens_open_stream(d, s->opt, in->p[0], &s->tg))
            return 1;
        pg_dataset *any = d->has_input ? &s->in : &s->tg;
        if (d->has_input || d->has_loss)
            s->rows = (any->samples - 1) / (uint64_t)d->input_dim[0];
        return 0;
    }
    if (d->has_input) {
        if (pg_dataset_open(&s->in, s->opt, in, d->input_dtype, d->input_rank, d->input_dim, d->input_vocab,
                            PG_DATA_NO_ID, "token id", "vocabulary size", err, sizeof err)) {
            fprintf(stderr, "stage %d: %s\n", d->stage, err);
            return 1;
        }
        s->rows = s->in.samples;
    }
    if (d->has_loss && tg &&
        pg_dataset_open(&s->tg, "--eval-targets", tg, d->target_dtype, d->target_rank, d->target_dim,
                        d->target_vocab, d->has_ignore ? d->ignore_id : PG_DATA_NO_ID, "target id", "number of classes",
                        err, sizeof err)) {
        fprintf(stderr, "stage %d: %s\n", d->stage, err);
        return 1;
    }
    return 0;
}

/* Combinations of options that cannot work: 0, or 2 (printed). */
static int check_options(const pg_run *r)
{
    const pg_stage_desc *d = r->d;
    const pg_run_opts *o = &r->opt;
    if (o->eval_targets.n && !o->eval_data.n) {
        fprintf(stderr, "stage %d: --eval-targets %s without --eval-data: give the evaluation inputs too "
                "(--eval-data FILE); nothing was run\n", d->stage, o->eval_targets.p[0]);
        return 2;
    }
    int tokens = o->eval_data.n && lm_stream(d, &o->eval_data);
    if (o->eval_data.n && !tokens && !o->eval_targets.n) {
        fprintf(stderr, "stage %d: --eval-data %s without --eval-targets: an evaluation needs the targets of its "
                "inputs (--eval-targets FILE)%s; nothing was run\n", d->stage, o->eval_data.p[0],
                d->input_dtype == 2 && d->target_dtype == 2 ? ", or a token stream (rank 1, `pipedata text`) as --eval-data" : "");
        return 2;
    }
    if (tokens && o->eval_targets.n) {
        fprintf(stderr, "stage %d: --eval-data %s is a token stream, which holds the targets too: leave out "
                "--eval-targets; nothing was run\n", d->stage, o->eval_data.p[0]);
        return 2;
    }
    if (!o->predict.n != !o->out) {
        fprintf(stderr, "stage %d: %s; nothing was run\n", d->stage, o->out
                ? "--out names where --predict writes the model's outputs: give the rows too (--predict FILE.pgd)"
                : "--predict needs --out OUT.pgd, the file that gets the model's outputs");
        return 2;
    }
    if (o->predict.n && lm_stream(d, &o->predict)) {
        fprintf(stderr, "stage %d: --predict %s is a token stream (rank 1): --predict takes samples of the model's "
                "input i32[%" PRId64 "], one a row; nothing was run\n", d->stage, o->predict.p[0], d->input_dim[0]);
        return 2;
    }
    if (o->predict.n && d->output_rank + 1 > 5) {
        fprintf(stderr, "stage %d: --predict: the model's output has %d dimensions, more than a data file holds (4); "
                "nothing was run\n", d->stage, d->output_rank);
        return 2;
    }
    return 0;
}

int pg_eval_open(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    const pg_run_opts *o = &r->opt;
    int bad = check_options(r);
    if (bad)
        return bad;
    if (!o->eval_data.n && !o->predict.n) {
        if (d->train.eval_every > 0 && logs(r))
            fprintf(stderr, "stage %d: train.eval_every = %" PRId64 " but no --eval-data: nothing is evaluated (give "
                    "--eval-data FILE --eval-targets FILE)\n", d->stage, d->train.eval_every);
        return 0;
    }
    struct pg_eval *e = calloc(1, sizeof *e);
    if (!e) {
        fprintf(stderr, "stage %d: out of memory for the evaluation\n", d->stage);
        return 1;
    }
    r->ev = e;
    e->ev.opt = "--eval-data";
    e->pr.opt = "--predict";
    e->eval_on = o->eval_data.n > 0;
    e->predict_on = o->predict.n > 0;
    int64_t B = d->train.batch, nmb = d->nmb;
    size_t in_b = (size_t)(B * d->input_per_sample) * 4, tg_b = (size_t)(B * d->target_per_sample) * 4;
    e->mb_rows = calloc((size_t)nmb, sizeof *e->mb_rows);
    e->mb_first = calloc((size_t)nmb, sizeof *e->mb_first);
    e->mb_real = calloc((size_t)nmb, sizeof *e->mb_real);
    e->idx = calloc((size_t)B, sizeof *e->idx);
    e->in_host = d->has_input ? malloc(in_b ? in_b : 1) : NULL;
    e->tg_host = d->has_loss ? malloc(tg_b ? tg_b : 1) : NULL;
    e->out = d->has_loss ? malloc((size_t)(B * (d->output_per_sample > 0 ? d->output_per_sample : 1)) * 4) : NULL;
    if (!e->mb_rows || !e->mb_first || !e->mb_real || !e->idx || (d->has_input && !e->in_host) ||
        (d->has_loss && (!e->tg_host || !e->out))) {
        fprintf(stderr, "stage %d: out of memory for the evaluation's buffers\n", d->stage);
        return 1;
    }
    if (d->has_loss && d->output_per_sample <= 0) {
        fprintf(stderr, "stage %d: this stage file does not say where the model's output is (generated by an older "
                "pipegen?): run `pipegen gen` again\n", d->stage);
        return 1;
    }
    if (r->replica > 0) /* replica 0 runs every pass; the others wait for it */
        return 0;
    if (e->eval_on && open_set(r, &e->ev, &o->eval_data, lm_stream(d, &o->eval_data) ? NULL : &o->eval_targets))
        return 1;
    if (e->predict_on && open_set(r, &e->pr, &o->predict, NULL))
        return 1;
    /* what the stages compare at the rendezvous: the same files, inputs pairing with targets */
    if (e->eval_on && d->has_input)
        pg_agree_dataset(r, "--eval-data", &e->ev.in, !e->ev.tokens);
    if (e->eval_on && d->has_loss)
        pg_agree_dataset(r, e->ev.tokens ? "--eval-data" : "--eval-targets", &e->ev.tg, !e->ev.tokens);
    if (e->predict_on && d->has_input)
        pg_agree_dataset(r, "--predict", &e->pr.in, 0);
    return 0;
}

void pg_eval_free(pg_run *r)
{
    struct pg_eval *e = r->ev;
    if (!e)
        return;
    pg_dataset_close(&e->ev.in);
    pg_dataset_close(&e->ev.tg);
    pg_dataset_close(&e->pr.in);
    pg_dataset_close(&e->pr.tg);
    free(e->mb_rows);
    free(e->mb_first);
    free(e->mb_real);
    free(e->idx);
    free(e->in_host);
    free(e->tg_host);
    free(e->out);
    free(e);
    r->ev = NULL;
}

int pg_eval_counts(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    struct pg_eval *e = r->ev;
    if (!e || r->replica > 0)
        return 0;
    uint64_t rows[2] = {e->ev.rows, e->pr.rows};
    uint32_t tag = PG_TAG(PG_TAG_EVAL, 0, 0);
    pg_net_status st = PG_NET_OK;
    for (int k = 1; k < d->nstages && d->stage == 0 && !st; k++)
        st = pg_net_send(r->net, k, tag, rows, sizeof rows);
    if (d->stage != 0)
        st = pg_net_recv(r->net, 0, tag, rows, sizeof rows, r->opt.timeout_s);
    if (st) {
        fprintf(stderr, "stage %d: telling the stages the evaluation's row counts failed: %s\n", d->stage,
                pg_net_error(r->net));
        return 1;
    }
    e->ev.rows = rows[0];
    e->pr.rows = rows[1];
    return 0;
}

int pg_eval_at(const pg_run *r, int64_t step)
{
    const int64_t every = r->d->train.eval_every;
    return r->ev && r->ev->eval_on && ((every > 0 && (step + 1) % every == 0) || step + 1 == r->opt.steps);
}

/* ---- one pass ----------------------------------------------------------------- */

/* The split of a batch of R rows into the micro-batches (the .pipe's rule for
 * its batch; fewer rows than micro-batches: one each, then fillers). Returns
 * the rows the batch buffers hold (R, or the micro-batch count). */
static int64_t split_batch(const pg_stage_desc *d, struct pg_eval *e, int64_t R)
{
    int64_t M = d->nmb, row = 0;
    for (int64_t i = 0; i < M; i++) {
        e->mb_rows[i] = R >= M ? R / M + (i < R % M) : 1;
        e->mb_first[i] = row;
        e->mb_real[i] = R >= M || i < R;
        row += e->mb_rows[i];
    }
    return row;
}

/* Rows [first, first + R) of the set (then fillers up to `used`) into host,
 * then to the arena at off: inputs (shift 0) or, for a token stream, targets
 * (shift 1). 0, or 1 (printed). */
static int load_rows(pg_run *r, const pg_dataset *ds, int tokens, int shift, uint64_t first, int64_t R,
                     int64_t used, int64_t per_sample, unsigned char *host, int64_t off)
{
    const pg_stage_desc *d = r->d;
    struct pg_eval *e = r->ev;
    int64_t seq = d->input_dim[0];
    for (int64_t i = 0; i < used; i++) {
        uint64_t row = first + (uint64_t)(i < R ? i : 0); /* a filler repeats row 0 */
        e->idx[i] = tokens ? row * (uint64_t)seq : row;
    }
    char err[512];
    int rc = tokens ? pg_tokens_windows(&ds->f[0], e->idx, used, seq, shift, (int32_t *)host, err, sizeof err)
                    : pg_dataset_gather(ds, e->idx, used, host, err, sizeof err);
    if (rc) {
        fprintf(stderr, "stage %d: %s\n", d->stage, err);
        return 1;
    }
    return pg_copy_to_dev(r->ctx, r->A + off, host, (size_t)(used * per_sample) * 4);
}

/* The arg max of each row of a classifier's logits against its target (a
 * row whose target is the ignored id counts nowhere). */
static uint64_t count_correct(const float *logits, const int32_t *target, int64_t rows, int64_t C, int64_t ignore)
{
    uint64_t n = 0;
    for (int64_t i = 0; i < rows; i++) {
        if (target[i] == ignore)
            continue;
        const float *l = logits + i * C;
        int64_t best = 0;
        for (int64_t j = 1; j < C; j++)
            if (l[j] > l[best])
                best = j;
        n += l[best] == l[best] && best == target[i];
    }
    return n;
}

static int pass_net(const pg_run *r, const char *what, int a, const pg_step_action *x, pg_net_status st)
{
    int recv = x->kind == PG_RECV_ACT || x->kind == PG_RECV_SKIP;
    if (st == PG_NET_TIMEOUT)
        fprintf(stderr, "stage %d waiting in the %s at action %d %s(mb %d) from stage %d for %g s\n", r->d->stage, what,
                a, pg_step_kind_name(x->kind), x->mb, x->peer, r->opt.timeout_s);
    else
        fprintf(stderr, "stage %d: %s: action %d %s(mb %d) %s stage %d failed: %s\n", r->d->stage, what, a,
                pg_step_kind_name(x->kind), x->mb, recv ? "from" : "to", x->peer, pg_net_error(r->net));
    return 1;
}

/* One batch through the forward-only table; the loss stage adds its
 * micro-batches' losses and its classifier hits to res, and keeps the rows'
 * outputs in e->out. 0, or 1 (printed). */
static int run_batch(pg_run *r, const char *what, int64_t step, ev_result *res)
{
    const pg_stage_desc *d = r->d;
    struct pg_eval *e = r->ev;
    int64_t ops = d->output_per_sample;
    for (int a = 0; a < d->neval_actions; a++) {
        const pg_step_action *x = &d->eval_actions[a];
        r->cur_action = a;
        pg_net_status st = PG_NET_OK;
        if (x->kind == PG_TIE_SEND || x->kind == PG_TIE_RECV) { /* the owner's current value, as the step gives it */
            if (pg_run_tie_action(r, a, x))
                return 1;
            continue;
        }
        if (x->mb < 0 || x->mb >= d->nmb) {
            fprintf(stderr, "stage %d: evaluation action %d names micro-batch %d of %d: the stage file is corrupt\n",
                    d->stage, a, x->mb, d->nmb);
            return 1;
        }
        int64_t rows = e->mb_rows[x->mb];
        if (x->kind == PG_FWD) {
            const pg_chunk_desc *cf = pg_run_chunk_fns(d, x->chunk);
            if (!cf) {
                fprintf(stderr, "stage %d: evaluation action %d names chunk %d, which this stage does not hold\n",
                        d->stage, a, x->chunk);
                return 1;
            }
            pg_mb_io io = {x->mb, x->slot, d->mb_recompute[x->mb], rows, e->mb_first[x->mb], step, d->train.seed, 0.0,
                           1, NULL, NULL, 0, 0};
            if (cf->fwd(r->ctx, r->A, &io)) {
                fprintf(stderr, "stage %d: %s: the forward of chunk %d, micro-batch %d failed\n", d->stage, what,
                        x->chunk, x->mb);
                return 1;
            }
            if (!(d->has_loss && x->chunk == d->nchunks - 1) || !e->mb_real[x->mb])
                continue;
            float *o = e->out + e->mb_first[x->mb] * ops;
            if (pg_copy_to_host(r->ctx, o, r->A + d->output_off + (int64_t)x->slot * d->output_slot_bytes,
                                (size_t)(rows * ops) * 4))
                return 1;
            res->loss_sum += io.loss;
            res->rows += (uint64_t)rows;
            const int32_t *tg = (const int32_t *)e->tg_host + e->mb_first[x->mb] * d->target_per_sample;
            int64_t np = rows * d->target_per_sample, ign = d->has_ignore ? d->ignore_id : PG_DATA_NO_ID;
            for (int64_t k = 0; k < np; k++)
                res->counted += d->target_dtype != PG_DATA_I32 || tg[k] != ign;
            if (classifier(d))
                res->correct += count_correct(o, tg, rows, ops, ign);
            continue;
        }
        /* a message of micro-batch mb holds its rows: the table's bytes are for the .pipe's split */
        size_t bytes = (size_t)(x->bytes / d->mb_rows[x->mb] * rows);
        if (x->kind == PG_SEND_ACT || x->kind == PG_SEND_SKIP)
            st = pg_net_send(r->net, x->peer, x->tag, r->A + x->off, bytes);
        else if (x->kind == PG_RECV_ACT || x->kind == PG_RECV_SKIP)
            st = pg_net_recv(r->net, x->peer, x->tag, r->A + x->off, bytes, r->opt.timeout_s);
        else {
            fprintf(stderr, "stage %d: evaluation action %d is %s, which a forward-only schedule does not hold\n",
                    d->stage, a, pg_step_kind_name(x->kind));
            return 1;
        }
        if (st)
            return pass_net(r, what, a, x, st);
    }
    return 0;
}

/* Every batch of the first `rows` rows of set s. predict: the targets are
 * zeros and the outputs go to out (the loss stage). */
static int run_pass(pg_run *r, ev_set *s, uint64_t rows, const char *what, int64_t step, int predict,
                    pg_io_stream *out, ev_result *res)
{
    const pg_stage_desc *d = r->d;
    struct pg_eval *e = r->ev;
    int64_t B = d->train.batch;
    memset(res, 0, sizeof *res);
    double one = 1.0; /* cross_entropy(ignore): the raw sum, divided here by the counted positions */
    if (d->has_loss && d->has_ignore && pg_copy_to_dev(r->ctx, r->A + d->count_off, &one, sizeof one))
        return 1;
    for (uint64_t first = 0; first < rows; first += (uint64_t)B) {
        int64_t R = rows - first < (uint64_t)B ? (int64_t)(rows - first) : B;
        int64_t used = split_batch(d, e, R);
        if (d->has_input && load_rows(r, &s->in, s->tokens, 0, first, R, used, d->input_per_sample, e->in_host,
                                      d->input_off))
            return 1;
        if (d->has_loss && !predict && load_rows(r, &s->tg, s->tokens, 1, first, R, used, d->target_per_sample,
                                             e->tg_host, d->target_off))
            return 1;
        if (d->has_loss && predict) { /* no targets: zeros, a valid class and a finite value */
            memset(e->tg_host, 0, (size_t)(used * d->target_per_sample) * 4);
            if (pg_copy_to_dev(r->ctx, r->A + d->target_off, e->tg_host, (size_t)(used * d->target_per_sample) * 4))
                return 1;
        }
        if (run_batch(r, what, step, res))
            return 1;
        char err[600];
        if (d->has_loss && predict && out &&
            pg_io_stream_write(out, e->out, (size_t)(R * d->output_per_sample) * 4, err, sizeof err)) {
            fprintf(stderr, "stage %d: --out: %s\n", d->stage, err);
            return 1;
        }
    }
    return 0;
}

/* Replica 0 tells every other replica's copy of this stage that the pass is
 * over; they wait for that word (as long as the pass takes: each wait of
 * --timeout is resumed while the link lives). */
static int replicas_meet(pg_run *r, const char *what)
{
    const pg_stage_desc *d = r->d;
    uint32_t tag = PG_TAG(PG_TAG_EVAL, 1, 0);
    uint64_t word = 1;
    pg_net_status st = PG_NET_OK;
    if (r->replica == 0) {
        for (int q = 1; q < r->replicas && !st; q++)
            st = pg_net_send_rank(r->net, pg_dp_rank(r, q), tag, &word, sizeof word);
    } else {
        while ((st = pg_net_recv_rank(r->net, pg_dp_rank(r, 0), tag, &word, sizeof word, r->opt.timeout_s)) ==
               PG_NET_TIMEOUT)
            ;
    }
    if (st)
        fprintf(stderr, "stage %d of replica %d: waiting for replica 0's %s failed: %s\n", d->stage, r->replica, what,
                pg_net_error(r->net));
    return st != PG_NET_OK;
}

int pg_eval_run(pg_run *r, int64_t step)
{
    const pg_stage_desc *d = r->d;
    struct pg_eval *e = r->ev;
    if (!e || !e->eval_on)
        return 0;
    if (r->replica > 0)
        return replicas_meet(r, "evaluation");
    uint64_t rows = e->ev.rows, K = (uint64_t)d->train.eval_batches;
    if (K > 0 && K <= rows / (uint64_t)d->train.batch)
        rows = K * (uint64_t)d->train.batch; /* its first eval_batches batches */
    double t0 = pg_run_now();
    ev_result res;
    char what[64];
    snprintf(what, sizeof what, "evaluation after step %" PRId64, step);
    if (run_pass(r, &e->ev, rows, what, step, 0, NULL, &res))
        return 1;
    if (logs(r)) {
        double loss = d->has_ignore ? (res.counted ? res.loss_sum / (double)res.counted : 0.0)
                      : res.rows ? res.loss_sum * (double)d->train.batch / (double)res.rows : 0.0;
        char line[512], json[512];
        int n = snprintf(line, sizeof line, "eval step %" PRId64 "/%" PRId64 "  loss %.9f", step, r->opt.steps, loss);
        int j = snprintf(json, sizeof json, "{\"step\": %" PRId64 ", \"eval_loss\": %.17g", step, loss);
        if (classifier(d)) {
            double acc = res.counted ? (double)res.correct / (double)res.counted : 0.0;
            n += snprintf(line + n, sizeof line - (size_t)n, "  accuracy %.4f (%" PRIu64 " of %" PRIu64 ")", acc,
                          res.correct, res.counted);
            j += snprintf(json + j, sizeof json - (size_t)j, ", \"accuracy\": %.17g", acc);
        } else if (d->train.loss == PG_LOSS_CROSS_ENTROPY) { /* a language model: per token */
            n += snprintf(line + n, sizeof line - (size_t)n, "  perplexity %.4f", exp(loss));
            j += snprintf(json + j, sizeof json - (size_t)j, ", \"perplexity\": %.17g", exp(loss));
        }
        snprintf(line + n, sizeof line - (size_t)n, "  %" PRIu64 " rows  %.2f s", res.rows, pg_run_now() - t0);
        snprintf(json + j, sizeof json - (size_t)j, ", \"eval_rows\": %" PRIu64 "}", res.rows);
        if (!isfinite(loss)) /* JSON has no NaN */
            snprintf(json, sizeof json, "{\"step\": %" PRId64 ", \"eval_loss\": null, \"eval_rows\": %" PRIu64 "}", step,
                     res.rows);
        printf("%s\n", line);
        fflush(stdout);
        if (pg_metrics_line(r, json))
            return 1;
    }
    return replicas_meet(r, "evaluation");
}

int pg_predict_run(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    struct pg_eval *e = r->ev;
    if (!e || !e->predict_on)
        return 0;
    if (r->replica > 0)
        return replicas_meet(r, "--predict");
    pg_io_stream out = {.fd = -1};
    char err[600];
    int writes = logs(r);
    if (writes) {
        unsigned char h[PG_DATA_HEADER_MAX];
        uint64_t dims[5] = {e->pr.rows};
        for (int i = 0; i < d->output_rank && i < 4; i++)
            dims[i + 1] = (uint64_t)d->output_dim[i];
        size_t hl = pg_data_header(h, PG_DATA_F32, d->output_rank + 1, dims);
        if (pg_io_stream_open(&out, r->opt.out, err, sizeof err) || pg_io_stream_write(&out, h, hl, err, sizeof err)) {
            fprintf(stderr, "stage %d: --out: %s\n", d->stage, err);
            return 1;
        }
    }
    ev_result res;
    if (run_pass(r, &e->pr, e->pr.rows, "--predict", r->opt.steps, 1, writes ? &out : NULL, &res)) {
        pg_io_stream_abort(&out);
        return 1;
    }
    if (writes) {
        if (pg_io_stream_commit(&out, err, sizeof err)) {
            fprintf(stderr, "stage %d: --out: %s\n", d->stage, err);
            return 1;
        }
        char shape[96];
        int n = snprintf(shape, sizeof shape, "f32[%" PRIu64, e->pr.rows);
        for (int i = 0; i < d->output_rank && n < (int)sizeof shape; i++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, ", %" PRId64, d->output_dim[i]);
        snprintf(shape + n, sizeof shape - (size_t)n, "]");
        printf("predict: the outputs of %" PRIu64 " rows of %s -> %s (%s)\n", e->pr.rows, r->opt.predict.p[0],
               r->opt.out, shape);
        fflush(stdout);
    }
    return replicas_meet(r, "--predict");
}

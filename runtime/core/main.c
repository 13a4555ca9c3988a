/* runtime/core/main.c — the stage program: options, start-up (launch
 * environment, rendezvous, arena, parameter init), the training loop, the
 * final parameter gather and save, and the timing report. The model itself
 * comes from the generated stage<k>.c through `pg_stage` (pg_stage.h).
 * Exit status: 0 ok, 1 runtime failure, 2 usage. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agree.h"
#include "checkpoint.h"
#include "errcap.h"
#include "guard.h"
#include "io_atomic.h"
#include "pg_tcp.h"
#include "pg_version.h"
#include "stage_run.h"

static void usage(FILE *o, const pg_stage_desc *d)
{
    fprintf(o,
            "usage: stage%d [options]    (stage %d of %d of model %s, from %s)\n"
            "  --steps N       training steps (default %" PRId64 ", train.steps)\n"
            "  --log-every N   print the log line every N steps (default 1; step 1 and the last\n"
            "                  always): step N/M, loss, lr, grad_norm (before clipping), the\n"
            "                  epoch (data files), samples/s (tokens/s for token inputs), ms/step\n"
            "  --metrics FILE  also each log line and evaluation as one JSON object a line\n"
            "                  (FILE.jsonl; a fresh run starts it anew, --resume appends)\n"
            "  --data FILE     inputs (.pgd), read by stage 0; default: synthetic data; given\n"
            "                  several times, the files are shards of one data set, in order\n"
            "  --targets FILE  targets (.pgd), read by the stage holding the loss (shards alike)\n"
            "  --eval-data FILE --eval-targets FILE  an evaluation set: after every eval_every\n"
            "                  steps (train.eval_every; 0: the last step only) a forward-only\n"
            "                  pass over its first eval_batches batches (0: every row) prints\n"
            "                  `eval step N  loss X` and accuracy (a classifier) or perplexity\n"
            "                  (a language model); nothing is trained by it. A language model\n"
            "                  takes a token stream as --eval-data (windows one after another)\n"
            "  --predict FILE --out OUT.pgd  after training (--steps 0: none), the model's\n"
            "                  outputs for every row of FILE, in order, into OUT.pgd (f32)\n"
            "  --save FILE     after training, stage 0 gathers every parameter and writes\n"
            "                  one safetensors file (--steps 0: the initial weights); with\n"
            "                  --save-every or --save-on-exit and no --checkpoint-dir, FILE\n"
            "                  names the checkpoint directory instead (--save DIR --save-every N)\n"
            "  --save-grads FILE  likewise the gradients of the last step, as the optimizer\n"
            "                  saw them (tied copies summed, clipped), named as the parameters;\n"
            "                  buffers are left out\n"
            "  --threads N     threads for the matrix products, the same bits for any N\n"
            "                  (default: SLURM_CPUS_PER_TASK, else OMP_NUM_THREADS, else the\n"
            "                  cores / the processes of this run on this host (PIPE_LOCAL_WORLD,\n"
            "                  OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, ...), at least 1)\n"
            "  --timeout S     give up a receive after S seconds (default 300)\n"
            "  --connect-timeout S  keep retrying the rendezvous for S seconds (default 60)\n"
            "  --checkpoint-dir DIR  write checkpoints (every stage's weights and optimizer\n"
            "                  state) to DIR/step-NNNNNNNN/, a MANIFEST last, DIR/LATEST; the 2\n"
            "                  newest complete ones are kept; one after the last step\n"
            "  --save-every N  also a checkpoint every N steps (into --checkpoint-dir DIR, or\n"
            "                  --save DIR when there is no --checkpoint-dir)\n"
            "  --resume DIR    continue from the newest complete checkpoint in DIR that every\n"
            "                  stage can use, bitwise as if never stopped (--steps is the total)\n"
            "  --save-on-exit  on SIGINT/SIGTERM finish the step, write a checkpoint, exit 128+sig\n"
            "                  (SIGHUP, the terminal closing, is taken as SIGTERM)\n"
            "                  (into --checkpoint-dir DIR, or --save DIR)\n"
            "  --replace-checkpoints  a fresh run (no --resume) into a checkpoint directory\n"
            "                  holding another run's checkpoints replaces them (they are removed\n"
            "                  once this run's first checkpoint is complete); without it such a\n"
            "                  start is refused\n"
            "  --skip-nonfinite  skip (on every stage) a step whose loss or gradients are NaN or\n"
            "                  Inf instead of stopping\n"
            "  --load FILE     start from the parameters in FILE (a --save file; each stage\n"
            "                  reads its own by name) instead of the seeded initial values\n",
            d->stage, d->stage, d->nstages, d->model, d->source, d->train.steps);
    pg_gen_usage(o); /* --generate and its options (generate.c) */
    fprintf(o,

            "  --trace FILE    record every action of the last --trace-steps steps on every\n"
            "                  stage (one clock) and write them, gathered on stage 0, as one\n"
            "                  Chrome-trace JSON file (Perfetto; `pipegen trace FILE`)\n"
            "  --profile FILE  likewise measure each layer's forward, B and W time and the\n"
            "                  message latency, written by stage 0 in the format that\n"
            "                  `pipegen plan/gen --balance FILE` read\n"
            "  --trace-steps N the last N steps are traced/profiled (default 10)\n"
            "                  (give every stage the same --trace/--profile/--trace-steps)\n"
            "  --dp D          D data-parallel replicas of the pipeline (default: the world size /\n"
            "                  the stage count); rank = replica x stages + stage; each replica\n"
            "                  trains on its contiguous batch / D rows of every step\n"
            "  --zero 1        with D replicas, shard the optimizer state over them (ZeRO-1):\n"
            "                  each steps 1/D of the weights, holds 1/D of the state and\n"
            "                  sends its updated weights to the others (same results bit\n"
            "                  for bit; CPU runtime only; --zero 0: off, the default)\n"
            "  --no-graph      CUDA runtime: run every op eagerly instead of replaying each\n"
            "                  step's compute as CUDA graphs (same results; no effect on the CPU)\n"
            "  --help          this text\n"
            "  --version       the pipegen version, model and plan hash of this binary\n"
            "A language model (input and target i32[seq]) also takes --data FILE holding one\n"
            "token stream (rank 1, `pipedata text`): sample i of a step is the window of seq\n"
            "tokens at a seeded offset, its target the window one token further.\n"
            "Without --data/--targets the data are synthetic: 8 batches made once at start-up\n"
            "and cycled. Inputs are seeded uniform in [-1, 1) (i32: ids in [0, vocab)). An f32\n"
            "target of an f32 input is a fixed teacher of the sample, so a model can learn it:\n"
            "t[j] = max(0, (x[j mod n] + x[(7j+3) mod n]) / 2) with n the input's elements;\n"
            "other targets are seeded random (i32: class ids in [0, classes)).\n"
            "Output paths (--save, --save-grads, --trace, --profile, the checkpoint directory)\n"
            "and --generate/--prompt are checked before the first step. After the last step\n"
            "the weights are written first, then the trace and profile, then the sample.\n"
            "Where this process sits comes from PIPE_RANK, PIPE_WORLD, PIPE_MASTER (or Slurm,\n"
            "Open MPI, PMI variables); piperun sets them.\n"
            "Exit status: 0 ok, 1 runtime failure, 2 bad command line, 128+N stopped by signal N.\n");
}

static int parse_int(const char *s, int64_t lo, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo)
        return -1;
    *out = v;
    return 0;
}

/* 0 ok, 1 --help printed, 2 usage error (printed) */
static int parse_args(int argc, char **argv, const pg_stage_desc *d, pg_run_opts *o)
{
    o->steps = d->train.steps;
    o->log_every = 1;
    o->threads = 0;
    o->timeout_s = 300.0;
    o->connect_timeout_s = 60.0;
    o->temperature = 0.8;
    o->top_p = 1.0;
    o->trace_steps = 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout, d);
            return 1;
        }
        if (!strcmp(a, "--version")) {
            printf("stage%d of model %s (%d stages, plan hash %016" PRIx64 "), generated by pipegen %s from %s; "
                   "runtime pipegen %s\n", d->stage, d->model, d->nstages, d->plan_hash,
                   d->pipegen_version ? d->pipegen_version : "?", d->source, PIPEGEN_VERSION);
            return 1;
        }
        if (!strcmp(a, "--no-graph")) { /* CUDA runtime: run every op eagerly (no effect on the CPU) */
            o->no_graph = 1;
            continue;
        }
        if (!strcmp(a, "--save-on-exit") || !strcmp(a, "--skip-nonfinite") || !strcmp(a, "--replace-checkpoints")) {
            *(!strcmp(a, "--save-on-exit") ? &o->save_on_exit : !strcmp(a, "--skip-nonfinite") ? &o->skip_nonfinite
                                                                                                 : &o->replace_ckpt) = 1;
            continue;
        }
        if (!strcmp(a, "--checkpoint-dir") || !strcmp(a, "--save-every") || !strcmp(a, "--resume") ||
            !strcmp(a, "--connect-timeout")) { /* reliability options (checkpoint.c, guard.c) */
            char *end = NULL;
            double t = v ? strtod(v, &end) : 0;
            if (!v || (!strcmp(a, "--save-every") && parse_int(v, 1, &n)) ||
                (!strcmp(a, "--connect-timeout") && (end == v || *end || !(t > 0)))) {
                fprintf(stderr, "stage %d: %s wants %s (see --help)\n", d->stage, a,
                        !strcmp(a, "--save-every") ? "a step count >= 1" : !strcmp(a, "--connect-timeout") ? "seconds > 0" : "a directory");
                return 2;
            }
            i++;
            if (!strcmp(a, "--checkpoint-dir")) o->ckpt_dir = v;
            else if (!strcmp(a, "--resume")) o->resume = v;
            else if (!strcmp(a, "--save-every")) o->save_every = n;
            else o->connect_timeout_s = t;
            continue;
        }
        int gk = pg_gen_option(a, v, o, d->stage); /* --generate and its options (generate.c) */
        if (gk == 2)
            return 2;
        if (gk == 1) {
            i++;
            continue;
        }
        if (!strcmp(a, "--trace") || !strcmp(a, "--profile") || !strcmp(a, "--trace-steps")) { /* trace.c */
            int steps = !strcmp(a, "--trace-steps");
            if (!v || !v[0] || (steps && (parse_int(v, 1, &n) || n > 1000000))) {
                fprintf(stderr, "stage %d: %s wants %s (see --help)\n", d->stage, a,
                        steps ? "a step count in 1..1000000" : "a file name");
                return 2;
            }
            i++;
            if (steps)
                o->trace_steps = n;
            else
                *(!strcmp(a, "--trace") ? &o->trace : &o->profile) = v;
            continue;
        }
        pg_paths *paths = !strcmp(a, "--data") ? &o->data : !strcmp(a, "--targets") ? &o->targets
                          : !strcmp(a, "--eval-data") ? &o->eval_data : !strcmp(a, "--eval-targets") ? &o->eval_targets
                          : !strcmp(a, "--predict") ? &o->predict : NULL;
        if (paths) { /* a data set: the option once per file (shards, in order) */
            if (!v || !v[0]) {
                fprintf(stderr, "stage %d: %s needs a file name (see --help)\n", d->stage, a);
                return 2;
            }
            if (paths->n == PG_MAX_SHARDS) {
                fprintf(stderr, "stage %d: %s is given more than %d times: a data set has at most %d files (shards)\n",
                        d->stage, a, PG_MAX_SHARDS, PG_MAX_SHARDS);
                return 2;
            }
            paths->p[paths->n++] = v;
            i++;
            continue;
        }
        int takes = !strcmp(a, "--steps") || !strcmp(a, "--log-every") || !strcmp(a, "--save") ||
                    !strcmp(a, "--save-grads") || !strcmp(a, "--threads") || !strcmp(a, "--timeout") ||
                    !strcmp(a, "--load") || !strcmp(a, "--dp") || !strcmp(a, "--zero") || !strcmp(a, "--out") || !strcmp(a, "--metrics");
        if (!takes) {
            fprintf(stderr, "stage %d: unknown option '%s' (see --help)\n", d->stage, a);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "stage %d: %s needs a value (see --help)\n", d->stage, a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--metrics")) o->metrics = v;
        else if (!strcmp(a, "--save")) o->save = v;
        else if (!strcmp(a, "--save-grads")) o->save_grads = v;
        else if (!strcmp(a, "--load")) o->load = v;
        else if (!strcmp(a, "--zero")) {
            if (strcmp(v, "0") && strcmp(v, "1")) {
                fprintf(stderr, "stage %d: --zero wants 0 or 1 (1: shard the optimizer state over the data-parallel "
                        "replicas, ZeRO stage 1), not '%s'\n", d->stage, v);
                return 2;
            }
            o->zero = v[0] == '1';
        }
        else if (!strcmp(a, "--timeout")) {
            char *end;
            double t = strtod(v, &end);
            if (end == v || *end || !(t > 0)) {
                fprintf(stderr, "stage %d: --timeout wants seconds > 0, not '%s'\n", d->stage, v);
                return 2;
            }
            o->timeout_s = t;
        } else {
            int64_t lo = !strcmp(a, "--steps") ? 0 : 1;
            if (parse_int(v, lo, &n)) {
                fprintf(stderr, "stage %d: %s wants an integer >= %" PRId64 ", not '%s'\n", d->stage, a, lo, v);
                return 2;
            }
            if (!strcmp(a, "--steps")) o->steps = n;
            else if (!strcmp(a, "--log-every")) o->log_every = n;
            else if (!strcmp(a, "--dp")) o->dp = n;
            else o->threads = n > 1024 ? 1024 : (int)n;
        }
    }
    if (o->gen_shaping && o->generate == 0) { /* they only shape what --generate samples */
        fprintf(stderr, "stage %d: %s without --generate N: nothing would be sampled; give --generate N (the "
                "tokens to sample) or leave %s out\n", d->stage, o->gen_shaping, o->gen_shaping);
        return 2;
    }
    if ((o->save_every || o->save_on_exit) && !o->ckpt_dir) {
        if (!o->save) {
            fprintf(stderr, "stage %d: %s needs --checkpoint-dir DIR (or --save DIR)\n", d->stage,
                    o->save_every ? "--save-every" : "--save-on-exit");
            return 2;
        }
        /* `--save DIR --save-every N`: with a checkpoint cadence and no
         * --checkpoint-dir, --save names the checkpoint directory. */
        o->ckpt_dir = o->save;
        o->save = NULL;
    }
    return 0; /* --threads 0 (not given): the launch decides (pg_launch_threads) */
}

/* 0, 1 (a bad file, printed) or 2 (a bad combination of options, printed). */
static int open_data(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    char err[1024];
    int tk = pg_run_tokens_open(r); /* --data as a token stream (tokens.c) */
    if (tk)
        return tk < 0;
    const pg_paths *x = &r->opt.data, *y = &r->opt.targets;
    if ((d->has_input || d->has_loss) && !x->n != !y->n) {
        /* real inputs with synthetic targets (or the other way round) train to garbage; but a file that
         * is no data file at all (bad magic, another shape) is said first: that is the first thing to fix */
        pg_datafile f;
        int is_in = x->n != 0;
        if (pg_data_open(&f, is_in ? x->p[0] : y->p[0], is_in ? d->input_dtype : d->target_dtype,
                         is_in ? d->input_rank : d->target_rank, is_in ? d->input_dim : d->target_dim, err,
                         sizeof err)) {
            fprintf(stderr, "stage %d: %s\n", d->stage, err);
            return 1;
        }
        pg_data_close(&f);
        if (x->n)
            fprintf(stderr, "stage %d: --data %s without --targets: its inputs would be paired with synthetic "
                            "targets; give the targets too (--targets FILE)%s; nothing was run\n", d->stage,
                    x->p[0], d->input_dtype == 2 && d->target_dtype == 2
                    ? ", or a token stream (rank 1, `pipedata text`) as --data" : "");
        else
            fprintf(stderr, "stage %d: --targets %s without --data: its targets would be paired with synthetic "
                            "inputs; give the inputs too (--data FILE); nothing was run\n", d->stage, y->p[0]);
        return 2;
    }
    if (d->has_input && x->n) {
        if (pg_dataset_open(&r->in, "--data", x, d->input_dtype, d->input_rank, d->input_dim, d->input_vocab,
                            PG_DATA_NO_ID, "token id", "vocabulary size", err, sizeof err)) {
            fprintf(stderr, "stage %d: %s\n", d->stage, err);
            return 1;
        }
        r->have_in = 1;
    }
    if (d->has_loss && y->n) {
        if (pg_dataset_open(&r->tg, "--targets", y, d->target_dtype, d->target_rank, d->target_dim, d->target_vocab,
                            d->has_ignore ? d->ignore_id : PG_DATA_NO_ID, "target id", "number of classes", err,
                            sizeof err)) {
            fprintf(stderr, "stage %d: %s\n", d->stage, err);
            return 1;
        }
        r->have_tg = 1;
    }
    return 0;
}

/* The stage's GEMM weights, named to the backend (pg_gemm_weights_plan). */
static int plan_gemm_weights(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    if (!d->gemm_weights || d->ngemm_weights < 0) {
        fprintf(stderr, "stage %d: %d GEMM weights without their table: the stage file is corrupt\n", d->stage,
                d->ngemm_weights);
        return 1;
    }
    pg_gemm_weight *w = calloc((size_t)d->ngemm_weights, sizeof *w);
    if (!w) {
        fprintf(stderr, "stage %d: out of memory for its %d GEMM weights' table\n", d->stage, d->ngemm_weights);
        return 1;
    }
    for (int i = 0; i < d->ngemm_weights; i++) {
        int k = d->gemm_weights[i];
        const pg_param_desc *p = k >= 0 && k < d->nparams ? &d->params[k] : NULL;
        if (!p || p->rank != 2 || p->off < 0) {
            fprintf(stderr, "stage %d: GEMM weight %d names parameter %d of %d%s: the stage file is corrupt\n",
                    d->stage, i, k, d->nparams, p ? ", not a matrix in the arena" : "");
            free(w);
            return 1;
        }
        w[i] = (pg_gemm_weight){p->name, (const float *)(r->A + p->off), p->dim[0], p->dim[1]};
    }
    int rc = pg_gemm_weights_plan(r->ctx, d->stage, d->ngemm_weights, w, stdout);
    free(w);
    return rc;
}

static int init_params(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    for (int i = 0; i < d->nparams; i++) {
        const pg_param_desc *p = &d->params[i];
        pg_init_param(r->host, p->numel, p->init, p->init_scale, p->name, d->train.seed);
        if (pg_copy_to_dev(r->ctx, r->A + p->off, r->host, (size_t)p->numel * 4))
            return 1;
    }
    return 0;
}

/* Stage 0 gathers every parameter once (tied ones from their owner), in plan
 * order, and writes one safetensors file to `path`; the others send what they
 * own. grads: the gradients (grad_off) instead of the values, buffers left
 * out, an unused parameter's gradient zero. */
static int save_params(pg_run *r, int64_t steps, const char *path, int grads)
{
    const pg_stage_desc *d = r->d;
    int np = d->nmodel_params;
    const char *what = grads ? "--save-grads" : "--save";
    if (d->stage != 0) {
        for (int i = 0; i < d->nparams; i++) {
            const pg_param_desc *p = &d->params[i];
            if (p->owner != d->stage || (grads && p->is_buffer))
                continue;
            pg_net_status st = pg_net_send(r->net, 0, PG_TAG(PG_TAG_SAVE, p->index, grads),
                                           r->A + (grads ? p->grad_off : p->off), (size_t)p->numel * 4);
            if (st) {
                fprintf(stderr, "stage %d: sending %s to stage 0 for %s failed: %s\n", d->stage, p->name, what,
                        pg_net_error(r->net));
                return 1;
            }
        }
        return 0;
    }
    size_t total = 0;
    for (int p = 0; p < np; p++)
        total += (size_t)d->model_params[p].numel * 4;
    char *all = malloc(total ? total : 1);
    pg_st_tensor *t = calloc((size_t)(np ? np : 1), sizeof *t);
    if (!all || !t) {
        fprintf(stderr, "stage 0: cannot allocate %zu bytes to gather the parameters for %s\n", total, what);
        free(all);
        free(t);
        return 1;
    }
    size_t off = 0;
    int rc = 0, nt = 0;
    for (int p = 0; p < np && !rc; p++) {
        const pg_param_desc *m = &d->model_params[p];
        if (grads && m->is_buffer)
            continue;
        size_t bytes = (size_t)m->numel * 4;
        float *dst = (float *)(all + off);
        const pg_param_desc *local = NULL;
        for (int i = 0; i < d->nparams; i++)
            if (d->params[i].index == p)
                local = &d->params[i];
        if (!m->stage_mask && grads) {
            memset(dst, 0, bytes); /* unused: no gradient */
        } else if (!m->stage_mask) {
            pg_init_param(dst, m->numel, m->init, m->init_scale, m->name, d->train.seed); /* unused: its initial value */
        } else if (m->owner == 0 && local) {
            rc = pg_copy_to_host(r->ctx, dst, r->A + (grads ? local->grad_off : local->off), bytes);
        } else {
            pg_net_status st = pg_net_recv(r->net, m->owner, PG_TAG(PG_TAG_SAVE, p, grads), dst, bytes, r->opt.timeout_s);
            if (st) {
                fprintf(stderr, "stage 0: receiving %s from stage %d for %s failed: %s\n", m->name, m->owner, what,
                        pg_net_error(r->net));
                rc = 1;
            }
        }
        pg_st_tensor *ti = &t[nt++];
        ti->name = m->name;
        ti->dtype = 0;
        ti->rank = m->rank;
        for (int k = 0; k < m->rank && k < 4; k++)
            ti->dim[k] = m->dim[k];
        ti->data = dst;
        ti->bytes = bytes;
        off += bytes;
    }
    if (!rc && !grads) { /* weights that are not finite are never saved */
        char err[600], tname[400];
        size_t at = 0;
        for (int i = 0; i < nt && !rc; at += t[i].bytes, i++) {
            snprintf(tname, sizeof tname, "parameter %s", t[i].name);
            if (pg_guard_finite_msg((const float *)(all + at), t[i].bytes / 4, tname, err, sizeof err)) {
                fprintf(stderr, "stage 0: %s %s: after step %" PRId64 " %s: not finite; not written\n", what, path,
                        steps, err);
                rc = 1;
            }
        }
    }
    if (!rc) {
        char stepbuf[32], err[512];
        snprintf(stepbuf, sizeof stepbuf, "%" PRId64, steps);
        const char *meta[] = {"model", d->model, "steps", stepbuf, "format", "pt",
                              grads ? "content" : NULL, "gradients", NULL};
        if (pg_st_write(path, t, nt, meta, err, sizeof err)) {
            fprintf(stderr, "stage 0: %s\n", err);
            rc = 1;
        } else {
            printf("saved %d %s to %s\n", nt, grads ? "gradients" : "parameters", path);
        }
    }
    free(all);
    free(t);
    return rc;
}

/* msgs[k] = the messages this stage's step sends to stage k through
 * pg_net_send from the arena (the transport's device ring: the CUDA transport
 * gives each of a step's messages in flight an event, so it sizes its events by
 * this; the verdicts, with their sums of squares, are host bytes, never in the ring). */
static void count_step_sends(const pg_stage_desc *d, int *msgs)
{
    for (int a = 0; a < d->nactions; a++) {
        const pg_step_action *x = &d->actions[a];
        switch (x->kind) {
        case PG_SEND_ACT: case PG_SEND_GRAD: case PG_SEND_SKIP: case PG_SEND_SKIP_GRAD: case PG_TIE_SEND:
        case PG_TIE_GRAD_SEND: case PG_TIE_SUM_SEND:
            if (x->peer >= 0 && x->peer < d->nstages)
                msgs[x->peer]++;
            break;
        default:
            break;
        }
    }
}

/* With --trace: the part `kind` of the work between steps ran from t0 to now
 * (kind 0: none, only the time); returns now, where the next part starts. */
static double trace_part(pg_run *r, int kind, double t0)
{
    if (!r->tracing)
        return 0.0;
    double t = pg_run_now();
    if (kind)
        pg_trace_part(r, kind, t0, t);
    return t;
}

/* The end-of-run bubble of this stage and, on the loss stage, the throughput,
 * over the steps this run timed: its first step (after --resume, the one after
 * the checkpoint) warms up, so steps first+2 .. steps. The compute is the
 * device's time where the backend has a device clock (CUDA: step.c's marks),
 * and the line says so. When the processes on this host want more threads
 * than it has cores, waiting for a core is idle time too, and the loss stage
 * says so once. */
static void report_speed(pg_run *r, int last)
{
    const pg_stage_desc *d = r->d;
    int64_t from = r->first_step + 2, timed = r->opt.steps - r->first_step - 1;
    printf("stage %d: bubble %.1f%% (compute %.3f s of %.3f s over steps %" PRId64 "..%" PRId64 "%s)\n", d->stage,
           100.0 * (1.0 - r->compute_s / r->wall_s), r->compute_s, r->wall_s, from, r->opt.steps,
           r->dev_clock ? "; compute in device time" : "");
    if (!last)
        return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (r->local_world > 1 && cores > 0 && (long)r->local_world * r->opt.threads > cores) {
        if (r->replicas > 1)
            printf("%d processes (stages x replicas) on %ld cores: waiting for a core counts as bubble\n",
                   r->local_world, cores);
        else
            printf("%d stages on %ld cores: waiting for a core counts as bubble\n", r->local_world, cores);
    }
    printf("throughput: %.1f samples/s (mean over steps %" PRId64 "..%" PRId64 ")\n",
           (double)d->train.batch * (double)timed / r->wall_s, from, r->opt.steps);
}

/* A JSON number, or null for what JSON cannot hold (NaN, infinities). */
static int json_num(char *b, size_t n, const char *key, double v)
{
    return isfinite(v) ? snprintf(b, n, ", \"%s\": %.17g", key, v) : snprintf(b, n, ", \"%s\": null", key);
}

/* The log line of step s (0-based), on the stage that logs: step N/M and the
 * loss first, then the learning rate, the gradient norm before clipping, the
 * epoch (data files), samples/s (tokens/s for token inputs) and ms/step; the
 * same as one JSON line for --metrics. 0, or 1 (the metrics file failed). */
static int log_step(pg_run *r, int64_t s, double loss, double dt)
{
    const pg_stage_desc *d = r->d;
    double lr = pg_lr_at(&d->train, s), gn = r->grad_norm;
    int tok = d->input_dtype == PG_DATA_I32; /* token inputs: a sample is input_per_sample tokens */
    double rate = dt > 0 ? (double)d->train.batch * (double)(tok ? d->input_per_sample : 1) / dt : 0.0;
    const char *skipped = r->step_verdict != PG_VERDICT_SKIP ? NULL
                          : r->step_bad & 1 ? "loss not finite" : "gradients not finite";
    char ep[48] = "";
    int64_t epoch = 0;
    if (r->have_tg && !r->tokens && r->tg.samples) { /* data files: the epoch of the step's first row */
        epoch = (int64_t)((uint64_t)s * (uint64_t)d->train.batch / r->tg.samples) + 1;
        snprintf(ep, sizeof ep, "  epoch %" PRId64, epoch);
    }
    printf("step %" PRId64 "/%" PRId64 "  loss %.9f  lr %.6g  grad_norm %.6g%s  %.1f %s/s  %.3f ms/step%s%s%s\n", s + 1,
           r->opt.steps, loss, lr, gn, ep, rate, tok ? "tokens" : "samples", dt * 1000.0, skipped ? "  (skipped: " : "",
           skipped ? skipped : "", skipped ? ")" : "");
    fflush(stdout);
    if (r->metrics_fd < 0)
        return 0;
    char j[768];
    size_t o = (size_t)snprintf(j, sizeof j, "{\"step\": %" PRId64 ", \"steps\": %" PRId64, s + 1, r->opt.steps);
    o += (size_t)json_num(j + o, sizeof j - o, "loss", loss);
    o += (size_t)json_num(j + o, sizeof j - o, "lr", lr);
    o += (size_t)json_num(j + o, sizeof j - o, "grad_norm", gn);
    if (epoch)
        o += (size_t)snprintf(j + o, sizeof j - o, ", \"epoch\": %" PRId64, epoch);
    o += (size_t)json_num(j + o, sizeof j - o, tok ? "tokens_per_s" : "samples_per_s", rate);
    o += (size_t)json_num(j + o, sizeof j - o, "ms_per_step", dt * 1000.0);
    if (skipped)
        o += (size_t)snprintf(j + o, sizeof j - o, ", \"skipped\": \"%s\"", skipped);
    snprintf(j + o, sizeof j - o, "}");
    return pg_metrics_line(r, j);
}

static int run(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    char err[1024];
    pg_launch l;
    if (pg_launch_from_env(&l, err, sizeof err)) {
        fprintf(stderr, "stage %d: %s\n", d->stage, err);
        return 1;
    }
    r->launch = l;
    r->have_launch = 1;
    if (!strcmp(l.source, "default") && d->nstages > 1) { /* no launcher variables at all */
        fprintf(stderr, "stage %d of model %s (%d stages) was started alone: start every stage with `piperun DIR`, "
                "or set PIPE_RANK=%d PIPE_WORLD=%d PIPE_MASTER=host:port (stage 0's host) for this process and "
                "likewise for the others (Slurm, Open MPI and PMI set their own variables)\n",
                d->stage, d->model, d->nstages, d->stage, d->nstages);
        return 1;
    }
    if (pg_dp_layout(r, &l)) /* replica and rows from rank and world (dp.c) */
        return 1;
    if (pg_zero_layout(r)) /* --zero 1: this replica's shard of the optimizer state (zero.c) */
        return 1;
    char why[128];
    int threads = pg_launch_threads(&l, r->opt.threads, why, sizeof why, err, sizeof err);
    if (threads < 0) {
        fprintf(stderr, "stage %d: %s\n", d->stage, err);
        return 1;
    }
    r->opt.threads = threads;
    r->local_world = l.local_world;
    pg_launch_describe(&l, threads, why, err, sizeof err);
    fprintf(stderr, "stage %d: %s\n", d->stage, err);
    if (pg_guard_files(d, l.world, err, sizeof err)) { /* ulimit -n: the links and files this stage needs */
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int pf = pg_run_preflight(r); /* options that cannot work, outputs that cannot be written */
    if (pf)
        return pf;
    r->ctx = pg_backend_init(r->opt.threads);
    if (!r->ctx) {
        fprintf(stderr, "stage %d: the %s backend could not start\n", d->stage, pg_backend_name());
        return 1;
    }
    if (pg_backend_set_precision(r->ctx, d->precision))
        return 1;
    if (pg_guard_memory(d, pg_zero_arena_bytes(r), err, sizeof err)) { /* --zero 1: its smaller arena */
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int64_t arena = pg_zero_arena_bytes(r); /* --zero 1: the optimizer state's shard only (zero.c) */
    r->A = pg_arena_create(r->ctx, (size_t)arena);
    if (!r->A) {
        fprintf(stderr, "stage %d: cannot get its arena of %" PRId64 " bytes (%.1f MiB); see `pipegen plan`\n", d->stage,
                arena, (double)arena / 1048576.0);
        return 1;
    }
    /* the convolutions' plans and their one workspace, beside the arena (CUDA: cuDNN's) */
    if (d->nconvs && (!d->conv_plan || !d->convs)) {
        fprintf(stderr, "stage %d: %d convolution geometries without their table or plan function: the stage file "
                        "is corrupt\n", d->stage, d->nconvs);
        return 1;
    }
    if (d->nconvs && d->conv_plan(r->ctx, d->stage, d->nconvs, d->convs))
        return 1;
    /* --guard-bytes: under AddressSanitizer the gaps between buffers become unaddressable */
    pg_zero_guard(r);
    /* bf16 shadows of the GEMM weights: registered before any weight is written */
    for (int i = 0; i < d->nshadows; i++) {
        const pg_shadow_desc *sh = &d->shadows[i];
        if (sh->param < 0 || sh->param >= d->nparams) {
            fprintf(stderr, "stage %d: shadow %d names parameter %d of %d: the stage file is corrupt\n", d->stage, i,
                    sh->param, d->nparams);
            return 1;
        }
        const pg_param_desc *p = &d->params[sh->param];
        if (pg_shadow_register(r->ctx, (const float *)(r->A + p->off), p->numel, r->A + sh->off))
            return 1;
    }
    /* the bf16 GEMMs' operand copies, planned in the arena */
    if (d->bf16_ws_bytes) {
        if (d->bf16_ws_off < 0 || d->bf16_ws_bytes < 0 || d->bf16_ws_off > arena - d->bf16_ws_bytes) {
            fprintf(stderr, "stage %d: the bf16 operand buffer (%lld bytes at %lld) is not inside the arena of %lld "
                            "bytes: the stage file is corrupt\n", d->stage, (long long)d->bf16_ws_bytes,
                    (long long)d->bf16_ws_off, (long long)arena);
            return 1;
        }
        if (pg_bf16_workspace(r->ctx, r->A + d->bf16_ws_off, d->bf16_ws_bytes))
            return 1;
    }
    /* the weights the GEMMs read: the CPU runtime reserves their packed copies now */
    if (d->ngemm_weights && plan_gemm_weights(r))
        return 1;
    /* host staging for data and parameter init */
    size_t hb = (size_t)(d->train.batch * (d->input_per_sample > d->target_per_sample ? d->input_per_sample : d->target_per_sample)) * 4;
    for (int i = 0; i < d->nparams; i++)
        if ((size_t)d->params[i].numel * 4 > hb)
            hb = (size_t)d->params[i].numel * 4;
    r->host = malloc(hb ? hb : 1);
    r->loss = calloc((size_t)d->nmb, sizeof(double));
    r->norms = calloc((size_t)(d->nmodel_params ? d->nmodel_params : 1), sizeof(double));
    r->norm_in = calloc((size_t)(d->nmodel_params ? d->nmodel_params : 1), sizeof(double));
    r->v_msg = calloc(2 * (size_t)(1 + d->nmodel_params), sizeof(double)); /* a verdict to send, one received */
    for (int a = 0; a < d->nactions; a++) /* step.c's lent sends */
        r->lent_cap += pg_step_msg_send(d->actions[a].kind);
    r->lent = calloc((size_t)(r->lent_cap ? r->lent_cap : 1), sizeof *r->lent);
    const char *cs = getenv("PIPE_CHECK_SENDS");
    r->check_sends = cs && *cs && strcmp(cs, "0") != 0;
    if (!r->host || !r->loss || !r->norms || !r->norm_in || !r->v_msg || !r->lent) {
        fprintf(stderr, "stage %d: out of memory for %zu bytes of staging\n", d->stage, hb);
        return 1;
    }
    int od = open_data(r);
    if (!od)
        od = pg_eval_open(r); /* --eval-data, --eval-targets, --predict (eval.c) */
    if (od)
        return od;
    if (!(r->sample_idx = malloc((size_t)d->train.batch * sizeof *r->sample_idx))) {
        fprintf(stderr, "stage %d: out of memory\n", d->stage);
        return 1;
    }
    if (pg_run_synth_init(r) || init_params(r) || (r->opt.load && pg_run_load_params(r)))
        return 1;
    if (r->opt.load && pg_data_file_hash(r->opt.load, &r->load_bytes, &r->load_hash, err, sizeof err)) {
        fprintf(stderr, "stage %d: --load: %s\n", d->stage, err);
        return 1;
    }
    if (pg_agree_build(r))
        return 1;
    { /* a stage holding both inputs and targets (one stage, or a V placement) checks them itself */
        char why[1024];
        if (pg_agree_check(r, d->stage, r->agree, r->agree_len, why, sizeof why)) {
            fprintf(stderr, "stage %d: %s\n", d->stage, why);
            return 1;
        }
    }
    if (pg_trace_init(r) || pg_run_clock_init(r)) /* --trace / --profile: the event ring; the device's marks */
        return 1;
    size_t *sb = calloc((size_t)l.world, sizeof *sb);
    int *sm = calloc((size_t)l.world, sizeof *sm);
    if (!sb || !sm) {
        free(sb);
        free(sm);
        return 1;
    }
    for (int k = 0; k < d->nstages; k++) /* this replica's stages, then the same stage of the other replicas */
        sb[r->replica * d->nstages + k] = (size_t)d->send_bytes[k];
    count_step_sends(d, sm + r->replica * d->nstages);
    for (int q = 0; q < r->replicas; q++)
        if (q != r->replica)
            sb[q * d->nstages + d->stage] = pg_dp_link_bytes(r);
    r->told = l.rank == 0 ? calloc((size_t)l.world, 1) : NULL;
    pg_net_config cfg = {.model = d->model, .plan_hash = d->plan_hash, .stage = d->stage, .send_buf_bytes = sb,
                         .send_msgs = sm,
                         .connect_timeout_s = r->opt.connect_timeout_s, .send_timeout_s = r->opt.timeout_s,
                         .run_id = l.run_id, .agree = r->agree,
                         .agree_len = r->agree_len, .agree_check = pg_agree_check, .agree_arg = r,
                         .told = r->told, .elsewhere = &r->fail_elsewhere, .pub_err = r->fail_pub,
                         .pub_errlen = sizeof r->fail_pub};
    r->net = pg_net_init(&l, &cfg, err, sizeof err);
    free(sb);
    free(sm);
    if (!r->net) {
        fprintf(stderr, "stage %d: %s\n", d->stage, err);
        return 1;
    }
    pg_errcap_end(&r->errcap); /* under way: a later failure is told by the links ending */
    if (r->replica > 0) { /* every replica traces (a row per process in rank 0's file); the profile is replica 0's */
        r->opt.profile = NULL;
        r->tracing = r->opt.trace != NULL;
    }
    int64_t start = 0;
    if (pg_guard_init(r) || pg_dp_init(r) || pg_eval_counts(r))
        return 1;
    int rs = r->opt.resume ? pg_ckpt_resume(r, &start) : 0;
    if (rs)
        return rs;
    if (pg_metrics_open(r, start))
        return 1;
    if (pg_trace_sync(r))
        return 1;
    int last = d->has_loss && r->replica == 0; /* replica 0 reports the loss of the whole batch */
    r->first_step = start;
    for (int64_t s = start; s < r->opt.steps; s++) {
        double t0 = pg_run_now(), loss = 0.0;
        if (pg_run_step(r, s, &loss))
            return 1;
        double dt = pg_run_now() - t0;
        if (s > start) /* the run's first step warms up: timed from the next (after --resume too) */
            r->wall_s += dt;
        else
            r->first_wall_s = dt;
        double tp = trace_part(r, 0, 0.0); /* the parts of the work between steps, for the trace */
        if (last && pg_run_logged(r, s) && log_step(r, s, loss, dt))
            return 1;
        if (last && s + 1 == r->opt.steps)
            printf("final loss %.17g\n", loss);
        if (last && pg_run_logged(r, s))
            tp = trace_part(r, PG_TRACE_LOG, tp);
        if (pg_eval_at(r, s)) {
            if (pg_eval_run(r, s + 1)) /* forward-only: no effect on the training (eval.c) */
                return 1;
            tp = trace_part(r, PG_TRACE_EVAL, tp);
        }
        int sig = 0; /* --save-on-exit: every stage stops after the same step */
        if (r->opt.save_on_exit) {
            if (pg_guard_stop_agree(r, s + 1, &sig))
                return 1;
            tp = trace_part(r, PG_TRACE_STOP, tp);
        }
        if (r->opt.ckpt_dir && (sig || s + 1 == r->opt.steps || (r->opt.save_every && (s + 1) % r->opt.save_every == 0))) {
            pg_io_protect_begin(); /* a signal waits until every stage's part is written */
            /* --zero 1: every replica's optimizer state to replica 0 first (zero.c) */
            int bad = pg_zero_ckpt_gather(r) || (r->replica == 0 && pg_ckpt_save(r, s + 1));
            pg_zero_ckpt_done(r);
            pg_io_protect_end();
            if (bad)
                return 1;
            trace_part(r, PG_TRACE_CKPT, tp);
        }
        if (sig) {
            fprintf(stderr, "stage %d: stopped by signal %d after step %" PRId64 " (checkpoint saved)\n", d->stage, sig, s + 1);
            return 128 + sig;
        }
    }
    pg_trace_between(r, pg_run_now()); /* the last step's work after it ends here */
    if (start == r->opt.steps && r->ev && pg_eval_run(r, start)) /* nothing to train: evaluate what was loaded */
        return 1;
    pg_io_summary_begin(); /* under piperun: what follows is printed with the other stages' summaries */
    /* The user's files, the weights first: whatever fails later cannot lose
     * them, and a signal (piperun stopping the run) waits until they are written. */
    pg_io_protect_begin();
    int bad = (r->replica == 0 && r->opt.save && save_params(r, r->opt.steps, r->opt.save, 0)) ||
              (r->replica == 0 && r->opt.save_grads && save_params(r, r->opt.steps, r->opt.save_grads, 1)) ||
              pg_trace_finish(r); /* every stage: the trace and profile gathered on stage 0 */
    pg_io_protect_end();
    if (bad)
        return 1;
    if (pg_predict_run(r) || (r->opt.generate > 0 && pg_run_generate(r)))
        return 1;
    pg_net_status st = pg_net_flush(r->net, r->opt.timeout_s);
    if (st) {
        fprintf(stderr, "stage %d: flushing the last messages failed: %s\n", d->stage, pg_net_error(r->net));
        return 1;
    }
    if (r->opt.steps - r->first_step > 1 && r->wall_s > 0 && r->replica == 0)
        report_speed(r, last);
    if (r->replica == 0) {
        pg_dp_report(r);
        pg_zero_report(r);
        pg_backend_report(r->ctx, d->stage, pg_zero_arena_bytes(r), stdout);
    }
    return 0;
}

/* Stage 0 whose start-up failed before the run was under way: the stages
 * that come later (started by hand, one after another) hear the cause at
 * once instead of retrying for their connect timeout (pg_tcp_tell_failure:
 * the rendezvous is TCP on every backend). The cause is the rendezvous's
 * own failure, else the last line this stage printed. */
static void tell_failure(pg_run *r)
{
    const pg_launch *l = &r->launch;
    if (!r->have_launch || l->rank != 0 || l->world < 2)
        return;
    char cause[1024];
    const char *last = r->errcap.last, *own = "stage 0: ";
    snprintf(cause, sizeof cause, "%s", !strncmp(last, own, strlen(own)) ? last + strlen(own) : last);
    if (!cause[0])
        snprintf(cause, sizeof cause, "stage 0 stopped (its output says why)");
    pg_net_config cfg = {.model = r->d->model, .plan_hash = r->d->plan_hash, .stage = 0,
                         .connect_timeout_s = r->opt.connect_timeout_s, .run_id = l->run_id, .told = r->told};
    pg_tcp_tell_failure(l, &cfg, cause, r->fail_pub[0] ? r->fail_pub : NULL, r->opt.connect_timeout_s);
}

int main(int argc, char **argv)
{
    pg_run r;
    memset(&r, 0, sizeof r);
    /* before anything else reads pg_stage: its layout is the one this runtime
     * was built with only when the contract tags agree */
    if (pg_stage.contract != PG_CONTRACT_TAG(PG_CONTRACT_VERSION)) {
        uint64_t t = pg_stage.contract;
        if ((t & ~UINT64_C(0xffff)) == PG_CONTRACT_TAG(0))
            fprintf(stderr, "%s: this stage was generated against contract version %u of pipegen's stage tables, "
                            "but this runtime reads version %d: generate it again with this pipegen (pipegen gen) "
                            "and rebuild it\n", argv[0], (unsigned)(t & 0xffff), PG_CONTRACT_VERSION);
        else
            fprintf(stderr, "%s: this stage was generated by a pipegen older than contract version %d of the stage "
                            "tables that this runtime reads: generate it again with this pipegen (pipegen gen) and "
                            "rebuild it\n", argv[0], PG_CONTRACT_VERSION);
        return 1;
    }
    r.d = &pg_stage;
    r.ck_first = -1;
    r.metrics_fd = -1;
    int a = parse_args(argc, argv, r.d, &r.opt);
    if (a)
        return a == 1 ? 0 : 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* a file-size limit (ulimit -f) makes a write fail with EFBIG, which every
     * writer reports with the file's name, instead of killing the stage */
    signal(SIGXFSZ, SIG_IGN);
    pg_io_set_stage(r.d->stage);
    if (r.opt.save_on_exit)
        pg_guard_catch_signals();
    pg_errcap_begin(&r.errcap); /* the cause of a failed start-up, for the stages still to come */
    int rc = run(&r);
    pg_errcap_end(&r.errcap);
    char self[32];
    snprintf(self, sizeof self, "stage %d", r.d->stage);
    if (pg_io_stdout_done(self) != 0 && rc == 0) /* the losses printed to a full disk: the record is torn */
        rc = 1;
    if (rc != 0 && !r.net)
        tell_failure(&r);
    if (rc == 1 && (pg_net_peer_lost(r.net) || r.fail_elsewhere))
        pg_io_tell_launcher('P'); /* this failure may follow a peer's: piperun reports the first one */
    pg_agree_free(&r);
    pg_ckpt_unlock(&r);
    pg_dp_stop(&r); /* the replicas' reducer thread uses the network */
    if (r.net)
        pg_net_close(r.net);
    /* a device left waiting for a dead peer: free host state only, then leave
     * without the CUDA runtime's exit handlers (pg_ops.h) */
    int poisoned = r.ctx && pg_backend_poisoned(r.ctx);
    pg_dataset_close(&r.in);
    pg_dataset_close(&r.tg);
    pg_eval_free(&r);
    pg_metrics_close(&r);
    free(r.sample_idx);
    if (r.A)
        pg_arena_destroy(r.ctx, r.A);
    if (r.ctx)
        pg_backend_free(r.ctx);
    free(r.host);
    free(r.loss);
    free(r.lent);
    free(r.norms);
    free(r.norm_in);
    free(r.v_msg);
    free(r.mb_rows);
    free(r.mb_first);
    pg_dp_free(&r);
    pg_zero_free(&r);
    free(r.synth_in);
    free(r.synth_tg);
    pg_run_generate_free(&r);
    free(r.told);
    free(r.tr_ev);
    pg_run_clock_free(&r);
    if (poisoned) {
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    return rc;
}

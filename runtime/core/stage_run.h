/* runtime/core/stage_run.h — the stage program's state (one named context
 * struct, no globals) shared by main.c (options, start-up, save) and step.c
 * (one training step: data, the action table, the optimizer). */
#ifndef PG_STAGE_RUN_H
#define PG_STAGE_RUN_H

#include <stdint.h>
#include <time.h>
#include "dataset.h"
#include "errcap.h"
#include "pg_io.h"
#include "pg_net.h"
#include "pg_ops.h"
#include "pg_stage.h"

#define PG_GEN_MAX_STOP 16 /* --stop ids */

typedef struct pg_run_opts {
    int64_t steps;
    int64_t log_every;
    pg_paths data, targets;   /* --data, --targets: one file each, or several as shards of one data set */
    const char *save;
    const char *save_grads;   /* --save-grads: the last step's gradients */
    int threads;
    double timeout_s;
    int64_t generate;         /* --generate N: up to N new tokens per prompt after training (generate.c) */
    const char *prompt;       /* --prompt TEXT */
    const char *prompts;      /* --prompts FILE: token ids, a prompt per row */
    const char *tokenizer;    /* --tokenizer T: --prompt encoded, the samples decoded by tools/tokens.py */
    double temperature;       /* --temperature T (0: greedy) */
    int64_t top_k;            /* --top-k K (0: every token) */
    double top_p;             /* --top-p P (1: every token) */
    int32_t stop[PG_GEN_MAX_STOP]; /* --stop IDS */
    int nstop;
    const char *stop_text;    /* --stop as given (the agreement) */
    const char *gen_out;      /* --gen-out FILE.jsonl (stage 0) */
    const char *gen_shaping;  /* the first of those options given (not --generate): refused without --generate */
    const char *load;         /* --load FILE: parameters from a --save file (generate.c) */
    const char *ckpt_dir;     /* --checkpoint-dir DIR (checkpoint.c) */
    int64_t save_every;       /* --save-every N: a checkpoint every N steps (0: only the last) */
    const char *resume;       /* --resume DIR */
    int save_on_exit;         /* --save-on-exit: SIGINT/SIGTERM stop after a final checkpoint */
    int skip_nonfinite;       /* --skip-nonfinite: skip a step whose loss or gradients are NaN/Inf (guard.c) */
    int replace_ckpt;         /* --replace-checkpoints: a fresh run may replace another run's checkpoints */
    double connect_timeout_s; /* --connect-timeout S: rendezvous retries */
    const char *trace;        /* --trace FILE: Chrome-trace JSON of every action (trace.c) */
    const char *profile;      /* --profile FILE: measured per-layer times, the --balance format */
    int64_t trace_steps;      /* --trace-steps N: the last N steps are kept (default 10) */
    int no_graph;             /* --no-graph: CUDA runtime, every op eagerly (pg_step_info.graphs) */
    int64_t dp;               /* --dp D: data-parallel replicas (0: not given, world / stages) */
    int64_t zero;             /* --zero 1: the optimizer state sharded over the replicas (zero.c) */
    pg_paths eval_data, eval_targets; /* --eval-data, --eval-targets: the evaluation set (eval.c) */
    pg_paths predict;         /* --predict FILE: the rows whose outputs --out gets (eval.c) */
    const char *out;          /* --out FILE.pgd */
    const char *metrics;      /* --metrics FILE.jsonl: a JSON object per log line and evaluation (metrics.c) */
} pg_run_opts;

/* The data-parallel reduction's spans in the trace (trace.c), kinds below -1:
 * the whole reduction, then its parts between dp_mark[i] and dp_mark[i + 1];
 * the step's start before its first action (the gradients zeroed, the batch
 * loaded) and its end after its last (the device's work waited for); and
 * outside the step, from its end to the next step's start, the main loop's
 * work between steps (BETWEEN), with the parts of it that ran (the log line,
 * an evaluation, the stop exchange of --save-on-exit, the checkpoint). So a stage's events
 * leave no time of its run unaccounted for, from its first traced step on. */
#define PG_TRACE_DP_MARKS 6
enum { PG_TRACE_DP_REDUCE = -2, PG_TRACE_DP_WAIT = -3, PG_TRACE_DP_SCATTER = -4, PG_TRACE_DP_SUM = -5,
       PG_TRACE_DP_GATHER = -6, PG_TRACE_DATA = -7, PG_TRACE_END = -8, PG_TRACE_BETWEEN = -9, PG_TRACE_LOG = -10,
       PG_TRACE_EVAL = -11, PG_TRACE_STOP = -12, PG_TRACE_CKPT = -13 };
#define PG_TRACE_DP_SPANS 5
#define PG_TRACE_PARTS 4 /* LOG, EVAL, STOP, CKPT: the parts of BETWEEN */

/* One traced action (or, kind -1, a whole step; below -1, the spans above)
 * of this stage; also the wire format of the gather to stage 0, so
 * fixed-width fields only. BETWEEN and its parts: action 1 when recorded
 * (the step after began, or the part ran), else 0 and not written. */
typedef struct pg_trace_ev {
    double t0, t1;            /* seconds, this stage's CLOCK_MONOTONIC (stage 0's after the gather) */
    int64_t bytes;            /* message bytes of a SEND/RECV, else 0 */
    int32_t step, action, kind, mb, chunk, peer; /* kind -1: the step */
} pg_trace_ev;

typedef struct pg_agree_file pg_agree_file;

typedef struct pg_run {
    const pg_stage_desc *d;
    pg_run_opts opt;
    int step_verdict;         /* this step: 0 ok, 1 skipped (non-finite loss or gradient), 2 stop (guard.c) */
    int step_bad;             /* what the verdict found: 1 a loss, 2 a gradient (both: 3) */
    /* The step's verdict as its actions make it (guard.c): 0 none yet, 1 this
     * stage's made (VERDICT), 2 decided (the first GRAD_NORM / OPT_STEP).
     * v_mine: its findings; v_all: every stage's received so far, ORed; v_who:
     * the first stage in stage order that found something (-1 none); v_what:
     * what this stage found, for its message. */
    int verdict_state;
    uint32_t v_mine;
    uint64_t v_all;
    int v_who;
    char v_what[480];
    double *v_msg;            /* [1 + nmodel_params]: a verdict message: the word's bits, then the sums of squares */
    int loss_stage;           /* the stage holding the loss (pg_guard_init) */
    pg_ctx *ctx;
    unsigned char *A;         /* the arena */
    pg_net *net;
    pg_dataset in, tg;        /* --data, --targets (a token stream: one file, in both) */
    int have_in, have_tg;
    void *host;               /* host staging: the largest of batch input, batch target, one parameter */
    size_t host_bytes;
    double *loss;             /* [nmb] partial losses of this step */
    void *synth_in, *synth_tg; /* synthetic data: the fixed batches, made at start-up (pg_run_synth_init) */
    double *norms, *norm_in;  /* [nmodel_params]: this stage's owned sums of squares; every parameter's (its owner's) */
    double compute_s;         /* time inside compute actions, steps after this run's first (on the device
                               * where the backend has a device clock: dev_clock) */
    /* device time (step.c, pg_ops.h's pg_backend_mark): a step's marks */
    int dev_clock;            /* the backend's work runs on a device: compute and trace spans from its marks */
    int *mk_at;               /* [nactions + 1] the mark where action a starts (nactions: where the last ends), -1: none */
    int *mk_span;             /* [2 x (2 nactions + 1)] compute spans as (first mark, last mark) */
    int nmk_span, nmk;        /* spans; marks made this step */
    double *mk_t;             /* [3 nactions + 2] the marks' times, seconds from the step's mark 0 */
    double wall_s;            /* wall time of the steps after this run's first */
    double first_wall_s;      /* wall time of this run's first step */
    int64_t first_step;       /* this run's first step: 0, or the checkpoint's step after --resume */
    int local_world;          /* processes of this run on this host (0: the launcher does not say) */
    int cur_action;
    /* This step's pipeline messages lent from the arena (step.c: sent from
     * where they lie, no copy into the send ring) and not yet known written:
     * [nlent] of [lent_cap] (the table's send actions). check_sends:
     * PIPE_CHECK_SENDS set: each lent message is hashed when lent and again
     * when written, a change is an error. */
    struct pg_lent_send {
        int action, peer, slot;
        size_t off, bytes;
        uint64_t seq, hash;
    } *lent;
    int nlent, lent_cap, check_sends;
    int tokens;               /* --data is a token stream: in/tg hold it (tokens.c) */
    uint64_t *sample_idx;     /* [batch]: the samples of this step's rows (load_batch, step.c) */
    double grad_norm;         /* this step's global gradient norm before clipping, on the loss stage (step.c) */
    int metrics_fd;           /* --metrics FILE.jsonl, open on the stage that logs (metrics.c); -1 none */
    struct pg_eval *ev;       /* evaluation and --predict (eval.c); NULL: neither */
    int tracing;              /* --trace or --profile: record every action (trace.c) */
    pg_trace_ev *tr_ev;       /* [trace_steps x events per step (trace.c)], made at start-up: a ring of steps */
    int64_t tr_first, tr_last; /* first and last step recorded (-1: none) */
    double tr_end;            /* the end of step tr_last: where its BETWEEN span starts */
    double tr_offset;         /* add to this stage's clock to get stage 0's */
    char *agree;              /* what the stages must agree on, as text (agree.c) */
    struct pg_agree_file {    /* more files this stage read, compared at the rendezvous (pg_agree_dataset) */
        const char *opt;
        const pg_dataset *ds;
        int samples;          /* also its sample count ("samples OPT"; inputs pair with targets) */
    } agree_extra[4];
    int agree_extra_n;
    size_t agree_len;
    void *agree_state;        /* stage 0: the accepted peers' entries */
    uint64_t load_bytes, load_hash; /* the --load file as this stage read it */
    struct pg_gen_in *gen;    /* --generate on stage 0: the prompts and stop ids (generate.c) */
    char ck_run[80];          /* the checkpoint run this run writes (checkpoint.c): kept across resumes */
    int ck_replace;           /* --replace-checkpoints in effect: step directories this run did not write go */
    int64_t ck_first;         /* the first step this run checkpointed (-1: none yet) */
    int ck_lock;              /* the checkpoint directory's lock: its fd + 1 (0: not held; checkpoint.c) */
    int ck_made_dir;          /* the lock made the checkpoint directory (removed again if left empty) */
    /* Data-parallel replicas (dp.c): rank = replica x nstages + stage. This
     * replica's rows of every step are [row0, row0 + rows) of the global
     * batch, its micro-batch i holds mb_rows[i] of them from global row
     * mb_first[i] (the split of `rows` into nmb as the .pipe splits batch). */
    int replica, replicas;
    int local_procs;          /* processes of this run on this host (pg_launch.local_world; 0: unknown) */
    int64_t row0, rows;
    int64_t *mb_rows, *mb_first;  /* [nmb] */
    double loss_global;       /* the step's loss over every replica (the loss stage) */
    struct pg_dp *dp;         /* the reduction's buffers (NULL with one replica) */
    struct pg_zero *zero;     /* --zero 1 with replicas: this stage's shards of the optimizer state (zero.c) */
    double dp_mark[PG_TRACE_DP_MARKS]; /* this step's reduction: its start, the replicas met (start word),
                                          shards sent, shards summed and sent back, summed shards in, end */
    /* A start-up that fails (main.c): where this process sits, and what
     * stage 0 tells the stages that come after it failed. */
    pg_launch launch;
    int have_launch;          /* launch is filled */
    unsigned char *told;      /* [world], stage 0: ranks told why the start-up failed (pg_net_config.told) */
    char fail_pub[700];       /* stage 0: the rendezvous's failure without its own values */
    int fail_elsewhere;       /* the rendezvous failed for another process's cause (pg_net_config.elsewhere) */
    pg_errcap errcap;         /* the last line printed during start-up */
} pg_run;

/* Seconds on the monotonic clock (step times, traces, deadlines). */
static inline double pg_run_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
/* Is step s (0-based) one the log shows? Step 1, every --log-every-th, the
 * last; every stage knows (--log-every is agreed), so the log line's norm is
 * exchanged on those steps only. */
static inline int pg_run_logged(const pg_run *r, int64_t s)
{
    return s == 0 || (s + 1) % r->opt.log_every == 0 || s + 1 == r->opt.steps;
}
/* The learning rate of a step (0-based): a linear warm-up over train.warmup
 * steps, then constant, cosine or linear down to lr_min at train.steps (the
 * .pipe's, whatever --steps says), or inverse_sqrt: lr sqrt(warmup / (t + 1)). */
double pg_lr_at(const pg_train_desc *t, int64_t step);
/* The forward / B / W functions of one of this stage's chunks (NULL if not its). */
const pg_chunk_desc *pg_run_chunk_fns(const pg_stage_desc *d, int chunk);
/* A tie's action a (TIE_SEND, TIE_RECV: the value; TIE_GRAD_*, TIE_SUM_*:
 * the gradients), of the step's table or evaluation's. 0, or 1 (printed). */
int pg_run_tie_action(pg_run *r, int a, const pg_step_action *x);
/* One training step (0-based). Returns 0 or 1 after printing the failure. */
int pg_run_step(pg_run *r, int64_t step, double *loss_out);
/* Allocate and fill the synthetic batches this stage reads (none when it reads
 * data files). 0 or 1 after printing the failure; main frees synth_in/_tg. */
int pg_run_synth_init(pg_run *r);
/* The step's device time, on a backend with a device clock: the marks' room (step.c) */
int pg_run_clock_init(pg_run *r);
void pg_run_clock_free(pg_run *r);
/* tokens.c: --data FILE holding a rank-1 i32 token stream, for a model whose
 * input and target are both i32[seq]: sample i of a step is the window at a
 * seeded offset o, target the window at o+1. open: 0 not a token stream (the
 * caller goes on), 1 opened into in/tg, -1 failed (printed). */
int pg_run_tokens_open(pg_run *r);
/* Is the first file of p a token stream for this model (i32[seq] input and
 * target, a rank-1 i32 file)? open_stream: open path as one (opt names the
 * option in messages), check its length and ids; 0, or -1 (printed). */
int pg_tokens_is_stream(const pg_stage_desc *d, const pg_paths *p);
int pg_tokens_open_stream(const pg_stage_desc *d, const char *opt, const char *path, pg_dataset *ds);
/* Copy the n windows of seq tokens at off[i] + shift of stream f into rows
 * 0..n-1 of dst, under f's guard: 0, or -1 with the reason in err. */
int pg_tokens_windows(const pg_datafile *f, const uint64_t *off, int64_t n, int64_t seq, int shift, int32_t *dst,
                      char *err, size_t errlen);
int pg_run_tokens_load(pg_run *r, int64_t step);
/* Where row i's input window of `step` starts in the stream (its target: one on). */
uint64_t pg_run_tokens_window(const pg_run *r, int64_t step, int64_t i);
/* ignore.c: cross_entropy(ignore = id): write this step's counted target
 * positions of the whole batch at d->count_off. 0, or 1 (printed). */
int pg_run_ignore_count(pg_run *r, int64_t step);
/* generate.c: --load (each stage reads its own parameters by name) and
 * --generate (forward-only sampling through the stages). 0 or 1 (printed). */
int pg_run_load_params(pg_run *r);
/* load_check.c: 0 when the --load file holds exactly the model's parameters
 * (names and shapes); 1 after printing what differs. */
int pg_run_load_check(const pg_run *r);
int pg_run_generate(pg_run *r);
/* Can --generate run as asked? Every stage: the model and this runtime can
 * generate; stage 0 reads the prompts (--prompt, --prompts, --tokenizer)
 * into r->gen and checks them. 0, or -1 with the reason in err. */
int pg_run_generate_check(pg_run *r, char *err, size_t errlen);
void pg_run_generate_free(pg_run *r);
/* A generation option (--generate, --prompt, --prompts, --tokenizer,
 * --temperature, --top-k, --top-p, --stop, --gen-out) with its value v:
 * 1 taken into o, 2 a usage error (printed), -1 not one of them. */
int pg_gen_option(const char *a, const char *v, pg_run_opts *o, int stage);
/* Their lines of --help. */
void pg_gen_usage(FILE *o);

/* dp.c: data-parallel replicas. layout (after pg_launch_from_env): the
 * replica and replica count from rank and world, this replica's rows; 0, or
 * 1 after printing why the layout cannot run. link_bytes: what one step
 * sends to the same stage of another replica (the send ring's size). init
 * (after pg_net_init): the reduction's buffers. reduce (every stage, once per
 * step, after the local gradient folds and before the verdict): each
 * gradient summed over the replicas, replica 0 + 1 + ... + D-1 for every
 * element (reduce-scatter then all-gather), and the loss stage's loss of the
 * whole batch into loss_global (also with one replica). free: the buffers. */
/* Does this stage step (and the replicas sum) parameter p? Everything it
 * trains; a transmitted tie's copy on a user is not stepped (its owner steps
 * the summed one). */
static inline int pg_param_stepped(const pg_stage_desc *d, const pg_param_desc *p)
{
    return !p->is_buffer && p->grad_off >= 0 && !(p->tie == 2 && p->owner != d->stage);
}
/* Do the replicas sum parameter p's gradient on this stage (dp.c)? What it
 * steps, but a replicated tie's copy on a user: the owner sums it over the
 * replicas and sends the sum (TIE_SUM_SEND). */
static inline int pg_param_reduced(const pg_stage_desc *d, const pg_param_desc *p)
{
    return pg_param_stepped(d, p) && !(p->tie == PG_TIE_REPLICATE && p->owner != d->stage);
}
/* The rank of this stage's copy in replica q (rank = replica x P + stage). */
static inline int pg_dp_rank(const pg_run *r, int q) { return q * r->d->nstages + r->d->stage; }
/* 1, after saying that sending (or receiving) `what` to (from) replica q's
 * copy of this stage failed and why (a timeout names --timeout). */
int pg_dp_xfer_fail(const pg_run *r, const char *what, int q, int sending, pg_net_status st);

int pg_dp_layout(pg_run *r, pg_launch *l);
size_t pg_dp_link_bytes(const pg_run *r);
int pg_dp_init(pg_run *r);
int pg_dp_reduce(pg_run *r, int64_t step);
/* mb_io (before a BWD_W action runs its chunk function): where that action
 * finishes the gradients of an early bucket (dp.c's plan_buckets: the
 * parameters of consecutive layers, in the order the step's last micro-batch
 * finishes them), io->grads_final is set, and the chunk's PG_GRADS_FINAL
 * after such a layer posts the bucket to the reducer thread, which sums it
 * over the replicas while the backward goes on; NULL otherwise (one replica,
 * a device arena, PIPE_DP_BUCKET_BYTES=0). action_end (after every action):
 * posts what a replayed action's hooks did not. pg_dp_reduce waits for every
 * early bucket, then reduces the rest. PIPE_CHECK_OVERLAP=1: once the last
 * early bucket is posted, wait until every early bucket is reduced, and count
 * the steps where they were.
 * report (replica 0, after the last step): the bytes one reduction sends after
 * the backward, its median time over steps 2.. and the rate, one line on
 * stdout (bench/dp.sh); the early buckets' bytes. stop (before the network
 * closes): the reducer thread leaves. free: the buffers. */
void pg_dp_mb_io(pg_run *r, int a, pg_mb_io *io);
void pg_dp_action_end(pg_run *r, int a);
void pg_dp_report(pg_run *r);
void pg_dp_stop(pg_run *r);
void pg_dp_free(pg_run *r);

/* ---- --zero 1 (zero.c): the optimizer state sharded over the replicas ----
 * layout: after pg_dp_layout, before the arena (refuses a non-CPU backend;
 * one replica: says it does nothing). arena_bytes: what the arena holds.
 * guard: pg_arena_guard for that arena. state: state k of parameter p for
 * its elements [lo, hi) that this replica steps (the whole parameter without
 * --zero; NULL: none). state_get: the whole state k into host dst [numel]
 * (replica 0, after ckpt_gather); state_put: this replica's part of it from
 * src [numel]. allgather: after the optimizer, every replica's updated
 * weights into place. ckpt_gather: at a checkpoint every replica's state to
 * replica 0 (every replica calls it); ckpt_done frees that. */
int pg_zero_layout(pg_run *r);
int64_t pg_zero_arena_bytes(const pg_run *r);
void pg_zero_guard(pg_run *r);
float *pg_zero_state(pg_run *r, const pg_param_desc *p, int k, int64_t *lo, int64_t *hi);
int pg_zero_state_get(pg_run *r, const pg_param_desc *p, int k, float *dst);
int pg_zero_state_put(pg_run *r, const pg_param_desc *p, int k, const float *src);
int pg_zero_allgather(pg_run *r);
int pg_zero_ckpt_gather(pg_run *r);
void pg_zero_ckpt_done(pg_run *r);
void pg_zero_report(const pg_run *r);
void pg_zero_free(pg_run *r);

/* ---- evaluation and --predict (eval.c) ----
 * open (after open_data): the evaluation and --predict files this stage
 * reads, every check of them; 0, 1 (a bad file, printed) or 2 (a bad
 * combination of options, printed). counts (collective, after pg_guard_init,
 * within each replica): stage 0 tells every stage how many rows each pass
 * holds. at (every stage, after step s, 0-based; and with steps == start,
 * once at the start): does this run evaluate after it? run (every stage,
 * collective): replica 0 evaluates the model as it is after `step` steps by
 * the forward-only schedule, its loss stage prints `eval step N ...` and
 * writes its metrics line; the other replicas wait for it. predict (every
 * stage, after training): the outputs of every --predict row into --out.
 * free: every buffer and file. 0, or 1 after printing the failure. */
int pg_eval_open(pg_run *r);
int pg_eval_counts(pg_run *r);
int pg_eval_at(const pg_run *r, int64_t step);
int pg_eval_run(pg_run *r, int64_t step);
int pg_predict_run(pg_run *r);
void pg_eval_free(pg_run *r);

/* ---- the log (metrics.c) ----
 * open (the logging stage: the loss stage of replica 0, after the resume is
 * known): --metrics FILE.jsonl, truncated by a fresh run, appended to by a
 * resumed one (it says which); line: one JSON object (text without the
 * newline) appended with one write, or the run fails naming the file. */
int pg_metrics_open(pg_run *r, int64_t start);
int pg_metrics_line(pg_run *r, const char *json);
void pg_metrics_close(pg_run *r);

/* Before any work (preflight.c): --generate/--prompt fit the model and every
 * file this stage will write can be written; removes temporaries of dead
 * writers. 0, or 2 (a usage error) after printing each problem. */
int pg_run_preflight(pg_run *r);
/* trace.c: --trace / --profile. init (start-up, before the network): the
 * event ring; sync (after pg_guard_init, every stage): stage 0's clock offset
 * (0 on the same host, else the best of a few pings); action/step (inside a
 * step: store one event, never allocate); finish (every stage, after the last
 * step): gather every stage's events on stage 0, which writes the trace and
 * the profile; with replicas, every replica's on its stage 0 and those on
 * replica 0's (rank 0), which writes every process into the trace (the
 * profile is replica 0's). 0, or 1 after printing the failure. */
int pg_trace_init(pg_run *r);
int pg_trace_sync(pg_run *r);
void pg_trace_action(pg_run *r, int64_t step, int a, double t0, double t1);
void pg_trace_step(pg_run *r, int64_t step, double t0, double t1);
/* the step's start: the gradients zeroed and the batch loaded, t0..t1; its
 * end after the last action (the device waited for), t0..t1 */
void pg_trace_data(pg_run *r, int64_t step, double t0, double t1);
void pg_trace_end(pg_run *r, int64_t step, double t0, double t1);
/* between steps (main.c): the part `kind` (PG_TRACE_LOG, _EVAL, _STOP, _CKPT) of
 * the work after the last recorded step ran t0..t1; between: that work is
 * over at t (the next step starts, or the run's loop ended) */
void pg_trace_part(pg_run *r, int kind, double t0, double t1);
void pg_trace_between(pg_run *r, double t);
/* the reduction's spans of this step from r->dp_mark (replicas > 1) */
void pg_trace_dp(pg_run *r, int64_t step);
int pg_trace_finish(pg_run *r);

#endif

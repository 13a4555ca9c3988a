/* codegen/cli/cmd_trace.c — `pipegen trace RUN.json [MODEL.pipe] [--svg OUT]
 * [--balance PROFILE] [--step N]`: reads the Chrome trace a run wrote with
 * --trace (runtime/core/trace.c), prints per stage the measured bubble and
 * the measured step time, and, given the model, what the verifier's
 * simulation predicts for them (by the cost model, or by the measured times
 * of PROFILE); --svg draws one measured step with the drawing code of
 * `pipegen plan --svg` (svg.c).
 *
 * Measured, over the trace's steps (the run's first step left out when there
 * are others): a step's time is its span over every stage (latest end of a
 * stage's step minus earliest start); a stage's bubble is 1 - its F/B/W time
 * divided by the span, both summed over the steps: the definitions of the
 * prediction (predict.c), which starts every stage together (each after its
 * measured time before the first action). Then where each stage's step goes
 * (F, B, W, messages, the step's end by kind, the batch loading, the time
 * outside actions), and what follows each stage's last F/B/W: its step's end,
 * and of it the receives (waits included) and its own work. The picture of a
 * measured step also draws, faded, what each stage ran of the steps before
 * and after inside that step's span, so no stage's row is white where it was
 * busy.
 *
 * A pp x dp trace (otherData "replicas" D > 1) has a process per row, pid =
 * replica x stages + stage: each is measured and drawn on its own, and the
 * data-parallel reduction's spans (args.kind DP_*, inside the action that ran
 * them) are counted apart and drawn over that action.
 *
 * A CUDA stage's action spans are its GPU's time (otherData "device_time",
 * runtime/core/step.c's marks); the first line says when they are. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd_common.h"
#include "cli/commands.h"
#include "io_atomic.h"
#include "json.h"
#include "cost.h"
#include "cli/load.h"
#include "schedule/sched_internal.h"
#include "schedule/schedule.h"
#include "schedule/svg.h"
#include "cli/trace_data.h"

/* ---- the trace ----------------------------------------------------------------- */

#define MAX_ROWS (PG_SCHED_MAX_STAGES * 256) /* processes: stages x replicas (piperun --dp allows 256) */

/* The data-parallel reduction's spans (runtime/core/trace.c): the whole, its wait
 * for the other replicas, reduce-scatter, sum, all-gather. */
enum { DP_KIND = PG_TIMELINE_DP, DP_PARTS = 5 };
static const char *const dp_kind[DP_PARTS] = { "DP_REDUCE", "DP_WAIT", "DP_REDUCE_SCATTER", "DP_SUM", "DP_ALL_GATHER" };

static int kind_of(const char *k)
{
    for (int i = 0; k && i < PG_STEP_KIND_COUNT; i++)
        if (!strcmp(k, pg_act_name((pg_act_kind)i)))
            return i;
    for (int i = 0; k && i < DP_PARTS; i++)
        if (!strcmp(k, dp_kind[i]))
            return DP_KIND + i;
    static const char *const around[] = { "DATA", "STEP_END", "BETWEEN", "LOG", "EVAL", "STOP", "CHECKPOINT" };
    for (int i = 0; k && i < (int)(sizeof around / sizeof around[0]); i++)
        if (!strcmp(k, around[i]))
            return PG_TIMELINE_DATA + i; /* PG_TIMELINE_DATA .. PG_TIMELINE_CKPT, in this order */
    return PG_STEP_KIND_COUNT;
}

/* One event object of traceEvents; its fields as read (NaN: absent). */
typedef struct rev {
    int is_x, is_step, kind;
    double pid, ts, dur, step, mb, chunk, action;
} rev;

/* A number field, or NaN when it is another kind of value (skipped). */
static double num_or_nan(pg_json *j)
{
    double v = NAN;
    if (pg_json_peek(j) == PG_JSON_NUMBER)
        pg_json_number(j, &v);
    else
        pg_json_skip(j);
    return v;
}

/* A string field into *out (malloc'd), or NULL when it is another kind. */
static void str_or_null(pg_json *j, char **out)
{
    free(*out);
    *out = NULL;
    if (pg_json_peek(j) == PG_JSON_STRING)
        pg_json_string(j, out);
    else
        pg_json_skip(j);
}

static void read_args(pg_json *j, rev *e)
{
    char *key, *kind = NULL;
    if (pg_json_peek(j) != PG_JSON_OBJECT) {
        pg_json_skip(j);
        return;
    }
    pg_json_object(j);
    while (pg_json_member(j, &key)) {
        if (!strcmp(key, "step"))
            e->step = num_or_nan(j);
        else if (!strcmp(key, "mb"))
            e->mb = num_or_nan(j);
        else if (!strcmp(key, "chunk"))
            e->chunk = num_or_nan(j);
        else if (!strcmp(key, "action"))
            e->action = num_or_nan(j);
        else if (!strcmp(key, "kind"))
            str_or_null(j, &kind);
        else
            pg_json_skip(j);
        free(key);
    }
    e->kind = kind_of(kind);
    free(kind);
}

static void read_event(pg_json *j, rev *e)
{
    char *key, *s = NULL;
    *e = (rev){ 0, 0, PG_STEP_KIND_COUNT, NAN, NAN, NAN, NAN, -1, -1, NAN };
    if (pg_json_peek(j) != PG_JSON_OBJECT) {
        pg_json_skip(j); /* not an event: ignored, as other phases are */
        return;
    }
    pg_json_object(j);
    while (pg_json_member(j, &key)) {
        if (!strcmp(key, "ph")) {
            str_or_null(j, &s);
            e->is_x = s && !strcmp(s, "X");
        } else if (!strcmp(key, "cat")) {
            str_or_null(j, &s);
            e->is_step = s && !strcmp(s, "step");
        } else if (!strcmp(key, "pid")) {
            e->pid = num_or_nan(j);
        } else if (!strcmp(key, "ts")) {
            e->ts = num_or_nan(j);
        } else if (!strcmp(key, "dur")) {
            e->dur = num_or_nan(j);
        } else if (!strcmp(key, "args")) {
            read_args(j, e);
        } else {
            pg_json_skip(j);
        }
        free(key);
    }
    free(s);
}

/* Adds event i (already read) to t; 0, or -1 after an error. */
static int add_event(trace *t, const rev *e, int i, int *cap, pg_diag *d, pg_loc whole)
{
    if (!e->is_x)
        return 0; /* metadata and other phases */
    if (!(e->pid >= 0 && e->pid < MAX_ROWS && isfinite(e->ts) && e->dur >= 0 && isfinite(e->dur) &&
          e->step >= 1 && e->step <= 2e9)) {
        pg_error(d, whole, "trace: event %d of traceEvents lacks a process (pid 0..%d), ts, dur >= 0 or args.step >= 1",
                 i, MAX_ROWS - 1);
        return -1;
    }
    double mb = isnan(e->mb) ? -1 : e->mb, chunk = isnan(e->chunk) ? -1 : e->chunk;
    if (!(mb >= -1 && mb < 1 << 20 && chunk >= -1 && chunk < PG_SCHED_MAX_CHUNKS)) {
        pg_error(d, whole, "trace: event %d of traceEvents has args.mb %g or args.chunk %g out of range "
                 "(-1 .. %d, -1 .. %d)", i, mb, chunk, (1 << 20) - 1, PG_SCHED_MAX_CHUNKS - 1);
        return -1;
    }
    if (t->n == *cap) {
        int nc = *cap ? 2 * *cap : 1024;
        tev *ne = realloc(t->ev, (size_t)nc * sizeof *ne);
        if (!ne) {
            pg_error(d, whole, "trace: out of memory");
            return -1;
        }
        t->ev = ne;
        *cap = nc;
    }
    int pid = (int)e->pid, step = (int)e->step;
    int action = e->action >= 0 && e->action < (1 << 24) && e->action == floor(e->action) ? (int)e->action : -1;
    t->ev[t->n++] = (tev){ pid, step, e->is_step ? -1 : e->kind, (int)mb, (int)chunk, action, e->ts * 1e-6,
                           (e->ts + e->dur) * 1e-6 };
    if (pid + 1 > t->nrows)
        t->nrows = pid + 1;
    if (t->first < 0 || step < t->first)
        t->first = step;
    if (step > t->last)
        t->last = step;
    if ((int)mb + 1 > t->nmb)
        t->nmb = (int)mb + 1;
    return 0;
}

/* "device_time": how many processes timed their actions on the device (of how many listed) */
static void read_device_time(pg_json *j, int *device, int *listed)
{
    if (pg_json_peek(j) != PG_JSON_ARRAY) {
        pg_json_skip(j);
        return;
    }
    pg_json_array(j);
    while (pg_json_item(j)) {
        double v = num_or_nan(j);
        *device += v == 1;
        (*listed)++;
    }
}

/* "otherData": the stage, replica and micro-batch counts, the model's name,
 * which processes' spans are device time */
static void read_other(pg_json *j, double *stages, double *replicas, double *mbs, char **model, int *device,
                       int *listed)
{
    char *key;
    if (pg_json_peek(j) != PG_JSON_OBJECT) {
        pg_json_skip(j);
        return;
    }
    pg_json_object(j);
    while (pg_json_member(j, &key)) {
        if (!strcmp(key, "stages"))
            *stages = num_or_nan(j);
        else if (!strcmp(key, "replicas"))
            *replicas = num_or_nan(j);
        else if (!strcmp(key, "microbatches"))
            *mbs = num_or_nan(j);
        else if (!strcmp(key, "model"))
            str_or_null(j, model);
        else if (!strcmp(key, "device_time"))
            read_device_time(j, device, listed);
        else
            pg_json_skip(j);
        free(key);
    }
}

/* 0, or -1 after an error naming the file. Read as it streams: a trace of
 * many steps is large, and only the events' times are kept. */
static int trace_read(const char *path, trace *t, pg_diag *d)
{
    memset(t, 0, sizeof *t);
    pg_source src;
    if (pg_source_read(&src, path, (size_t)1 << 30, d) != 0)
        return -1;
    pg_json j;
    pg_json_init(&j, src.text, src.len);
    pg_loc whole = { path, 0, 0 };
    double stages = NAN, replicas = NAN, mbs = NAN;
    char *model = NULL, *key;
    int rc = -1, cap = 0, seen_events = 0, bad = 0;
    t->first = -1;
    if (pg_json_peek(&j) != PG_JSON_OBJECT)
        pg_json_fail(&j, "expected `{` (a Chrome trace is {\"traceEvents\": [...], ...})");
    else
        pg_json_object(&j);
    while (!bad && pg_json_member(&j, &key)) {
        if (!strcmp(key, "traceEvents") && pg_json_peek(&j) == PG_JSON_ARRAY) {
            seen_events = 1;
            pg_json_array(&j);
            for (int i = 0; !bad && pg_json_item(&j); i++) {
                rev e;
                read_event(&j, &e);
                bad = !j.failed && add_event(t, &e, i, &cap, d, whole);
            }
        } else if (!strcmp(key, "otherData")) {
            read_other(&j, &stages, &replicas, &mbs, &model, &t->device_rows, &t->listed_rows);
        } else {
            pg_json_skip(&j);
        }
        free(key);
    }
    if (bad)
        goto out;
    if (pg_json_end(&j)) {
        pg_loc l = { path, j.err_line, j.err_col };
        pg_error(d, l, "trace: %s", j.err);
        goto out;
    }
    if (!seen_events) {
        pg_error(d, whole, "trace: no \"traceEvents\" list (not a Chrome trace written by --trace)");
        goto out;
    }
    if (t->n == 0) {
        pg_error(d, whole, "trace: no events (\"ph\": \"X\") in traceEvents");
        goto out;
    }
    if ((int64_t)t->last - t->first >= t->n) { /* --trace keeps consecutive steps, each with events */
        pg_error(d, whole, "trace: steps %d..%d in only %d events: not the consecutive steps --trace writes",
                 t->first, t->last, t->n);
        goto out;
    }
    /* rows: a process each; with replicas pid = replica x stages + stage */
    t->nstages = t->nrows;
    t->replicas = 1;
    if (replicas >= 2 && replicas <= 256 && stages >= 1 && stages <= PG_SCHED_MAX_STAGES && stages == floor(stages) &&
        replicas == floor(replicas) && t->nrows <= (int)stages * (int)replicas) {
        t->nstages = (int)stages;
        t->replicas = (int)replicas;
        t->nrows = t->nstages * t->replicas;
    } else if (stages > t->nstages && stages <= PG_SCHED_MAX_STAGES) {
        t->nstages = t->nrows = (int)stages;
    }
    if (t->nstages > PG_SCHED_MAX_STAGES) {
        pg_error(d, whole, "trace: %d processes but no \"stages\" and \"replicas\" in otherData to place them: at most "
                 "%d stages", t->nrows, PG_SCHED_MAX_STAGES);
        goto out;
    }
    if (mbs > t->nmb && mbs < 1e6)
        t->nmb = (int)mbs;
    t->model = model;
    model = NULL;
    rc = 0;
out:
    if (rc) {
        free(t->ev);
        t->ev = NULL;
    }
    free(model);
    pg_source_free(&src);
    return rc;
}

/* Per step (index step - first): the span's start and end over every
 * process, and each process's F/B/W time. */
typedef struct step_stat {
    double lo, hi;
    double *busy; /* [nrows] */
    int seen;
} step_stat;

/* Is kind the work between a step and the next (outside both)? */
static int is_between(int kind) { return kind >= PG_TIMELINE_BETWEEN && kind <= PG_TIMELINE_CKPT; }

/* busy: ns x nrows doubles for the steps' busy[] */
static void step_stats(const trace *t, step_stat *ss, double *busy)
{
    int ns = t->last - t->first + 1;
    for (int j = 0; j < ns; j++) {
        memset(&ss[j], 0, sizeof ss[j]);
        ss[j].lo = INFINITY;
        ss[j].hi = -INFINITY;
        ss[j].busy = busy + (size_t)j * (size_t)t->nrows;
    }
    for (int i = 0; i < t->n; i++) {
        const tev *e = &t->ev[i];
        step_stat *s = &ss[e->step - t->first];
        if (is_between(e->kind)) /* after the step: not in its span */
            continue;
        if (e->t0 < s->lo)
            s->lo = e->t0;
        if (e->t1 > s->hi)
            s->hi = e->t1;
        s->seen = 1;
        if (e->kind >= 0 && e->kind <= 2)
            s->busy[e->row] += e->t1 - e->t0;
    }
}

/* Where a process's time goes, seconds per step over the steps used: F, B, W,
 * sends, receives (their waits included), the step's end by kind (tie
 * gradients, the verdict with its messages, the clip, the optimizer; the
 * reduction taken out of the verdict), the reduction and its wait for the
 * other replicas, the batch loading, the step's end after its last action,
 * the rest of the step; then the work between steps, and of it the log
 * line, evaluation, the stop exchange and the checkpoint. */
enum { BR_F = PG_GROUP_F, BR_B = PG_GROUP_B, BR_W = PG_GROUP_W, BR_SEND = PG_GROUP_SEND, BR_RECV = PG_GROUP_RECV,
       BR_TIE = PG_GROUP_TIE, BR_VERDICT = PG_GROUP_VERDICT, BR_CLIP = PG_GROUP_CLIP, BR_OPT = PG_GROUP_OPT,
       BR_DP = PG_GROUP__COUNT, BR_DP_WAIT, BR_DATA, BR_END, BR_OUTSIDE, BR_BETWEEN, BR_LOG, BR_EVAL, BR_STOP,
       BR_CKPT, BR__COUNT };
static const char *const br_name[BR__COUNT] = { "F", "B", "W", "send", "receive (and wait)", "tie gradients",
                                                "verdict", "clip", "optimizer", "dp reduce",
                                                "of which waiting for the replicas", "batch and zeroing",
                                                "step end", "outside actions", "between steps", "log line",
                                                "evaluation", "stop exchange", "checkpoint" };

/* BR_F .. BR_OPT are pg_act_group's, in its order. */
static int br_of(int k)
{
    if (k >= 0 && k < PG_STEP_KIND_COUNT)
        return (int)pg_act_group_of((pg_act_kind)k);
    switch (k) {
    case DP_KIND: return BR_DP;
    case DP_KIND + 1: return BR_DP_WAIT;
    case PG_TIMELINE_DATA: return BR_DATA;
    case PG_TIMELINE_END: return BR_END;
    case PG_TIMELINE_BETWEEN: return BR_BETWEEN;
    case PG_TIMELINE_LOG: return BR_LOG;
    case PG_TIMELINE_EVAL: return BR_EVAL;
    case PG_TIMELINE_STOP: return BR_STOP;
    case PG_TIMELINE_CKPT: return BR_CKPT;
    default: return -1;
    }
}

static void breakdown(const trace *t, const step_stat *ss, int row, int skip_first, double out[BR__COUNT])
{
    int used = 0;
    memset(out, 0, BR__COUNT * sizeof out[0]);
    for (int j = 0; j <= t->last - t->first; j++)
        used += ss[j].seen && !(skip_first && t->first + j == 1);
    double step = 0, acts = 0;
    for (int i = 0; i < t->n; i++) {
        const tev *e = &t->ev[i];
        if (e->row != row || (skip_first && e->step == 1))
            continue;
        double dt = e->t1 - e->t0;
        int k = e->kind, b = br_of(k);
        if (k == -1)
            step += dt;
        if ((k >= 0 && k < PG_STEP_KIND_COUNT) || k == PG_TIMELINE_DATA || k == PG_TIMELINE_END)
            acts += dt;
        if (b >= 0)
            out[b] += dt;
    }
    out[BR_VERDICT] -= out[BR_DP]; /* the reduction runs inside VERDICT */
    out[BR_OUTSIDE] = round((step - acts) * 1e9) * 1e-9 + 0.0; /* to the ns (the spans are contiguous: 0), never -0 */
    for (int c = 0; c < BR__COUNT; c++)
        out[c] = used ? out[c] / used : 0;
}

/* What follows a process's last F/B/W of each step, seconds per step over the
 * steps used: the whole (to its step's end), and of it the receives with
 * their waits (a stage that finishes its backward before the others waits
 * for their messages there) and the rest, its own work. */
static void step_end_times(const trace *t, int row, int skip_first, double *whole, double *waits)
{
    int ns = t->last - t->first + 1, used = 0;
    *whole = *waits = 0;
    for (int j = 0; j < ns; j++) {
        int step = t->first + j;
        if (skip_first && step == 1)
            continue;
        double last = -INFINITY, end = -INFINITY;
        for (int i = 0; i < t->n; i++) {
            const tev *e = &t->ev[i];
            if (e->row != row || e->step != step)
                continue;
            if (e->kind == -1)
                end = e->t1;
            else if (e->kind >= 0 && e->kind <= PG_BWD_W && e->t1 > last)
                last = e->t1;
        }
        if (!isfinite(last) || !isfinite(end))
            continue;
        used++;
        *whole += end - last;
        for (int i = 0; i < t->n; i++) {
            const tev *e = &t->ev[i];
            if (e->row == row && e->step == step && e->kind >= 0 && e->kind < PG_STEP_KIND_COUNT && e->t0 >= last &&
                pg_act_is_recv((pg_act_kind)e->kind))
                *waits += e->t1 - e->t0;
        }
    }
    if (used) {
        *whole /= used;
        *waits /= used;
    }
}

/* "stage 1", or "stage 1 replica 0" in a pp x dp trace */
static const char *row_name(const trace *t, int row, char *buf, size_t n)
{
    if (t->replicas > 1)
        snprintf(buf, n, "stage %d replica %d", row % t->nstages, row / t->nstages);
    else
        snprintf(buf, n, "stage %d", row);
    return buf;
}

void trace_fmt_time(char *buf, size_t n, double s)
{
    if (s >= 1)
        snprintf(buf, n, "%.4g s", s);
    else if (s >= 1e-3)
        snprintf(buf, n, "%.4g ms", s * 1e3);
    else
        snprintf(buf, n, "%.4g us", s * 1e6);
}

static int timeline_fill(FILE *f, void *arg, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    pg_timeline_svg(arg, f);
    return 0;
}

/* The measured step `step` as a timeline (svg.c): every process's actions of
 * the step, the reduction over the action that ran it, its batch loading; and
 * faded, what the steps before and after ran inside this step's span. */
static int trace_svg(const trace *t, const step_stat *ss, int step, const char *schedule, const char *path, pg_diag *d)
{
    pg_loc loc = { path, 0, 0 };
    const step_stat *s = &ss[step - t->first];
    pg_timeline_box *box = malloc((size_t)t->n * sizeof *box);
    if (!box) {
        pg_error(d, loc, "cannot write the timeline: out of memory");
        return -1;
    }
    char src[64];
    snprintf(src, sizeof src, "measured: step %d of the trace", step);
    pg_timeline tl = { t->model, schedule, t->nstages, t->nmb, s->hi - s->lo, s->busy, 1, src, 0, box, t->replicas };
    for (int st = 0; st < t->nrows; st++) /* process by process, in time order as recorded: every action, */
        for (int i = 0; i < t->n; i++) { /* then the reduction over it (it runs inside an action) */
            const tev *e = &t->ev[i];
            int other = e->step - step;
            if (e->row != st || other < -1 || other > 1 || !((e->kind >= 0 && e->kind < PG_STEP_KIND_COUNT) ||
                                                             (e->kind >= PG_TIMELINE_DATA && e->kind <= PG_TIMELINE_CKPT)))
                continue;
            double t0 = e->t0 > s->lo ? e->t0 : s->lo, t1 = e->t1 < s->hi ? e->t1 : s->hi; /* clipped to the span */
            if (!other || t1 > t0)
                box[tl.nbox++] = (pg_timeline_box){ st, e->kind, e->mb, e->chunk, t0 - s->lo, t1 - t0, other };
        }
    for (int i = 0; i < t->n; i++) {
        const tev *e = &t->ev[i];
        if (e->step == step && e->kind == DP_KIND)
            box[tl.nbox++] = (pg_timeline_box){ e->row, e->kind, -1, -1, e->t0 - s->lo, e->t1 - e->t0, 0 };
    }
    char err[4096 + 256];
    int bad = pg_io_write_printed(path, timeline_fill, &tl, err, sizeof err) != 0; /* the one way outputs are written */
    free(box);
    if (bad) {
        pg_error(d, loc, "cannot write the timeline: %s", err);
        return -1;
    }
    printf("wrote %s: the measured timeline of step %d (SVG)\n", path, step);
    return 0;
}

int cmd_trace(int argc, char **argv)
{
    const char *path = NULL, *model = NULL, *svg = NULL, *balance = NULL;
    int bad = 0, want_step = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--svg") && i + 1 < argc && argv[i + 1][0])
            svg = argv[++i];
        else if (!strcmp(argv[i], "--balance") && i + 1 < argc && argv[i + 1][0])
            balance = argv[++i];
        else if (!strcmp(argv[i], "--step") && i + 1 < argc && atoi(argv[i + 1]) > 0)
            want_step = atoi(argv[++i]);
        else if (argv[i][0] == '-' || (path && model))
            bad = 1;
        else if (!path)
            path = argv[i];
        else
            model = argv[i];
    }
    if (bad || !path || (balance && !model)) {
        fprintf(stderr, "usage: pipegen trace RUN.json [MODEL.pipe [--balance PROFILE]] [--svg OUT] [--step N]\n");
        return 2;
    }
    pg_io_file files[] = {{"--svg", svg, 1}, {"the trace", path, 0}, {"the model", model, 0}, {"--balance", balance, 0}};
    if (cmd_files_distinct(files, 4))
        return 2;
    pg_diag d;
    pg_diag_init(&d, stderr, NULL);
    trace t;
    if (trace_read(path, &t, &d) != 0)
        return 1;
    int rc = 1, ns = t.last - t.first + 1;
    if ((double)ns * t.nrows > (double)(1 << 26)) { /* steps x processes of busy times */
        fprintf(stderr, "%s: error: trace: %d steps x %d processes: too many to measure\n", path, ns, t.nrows);
        free(t.ev);
        free(t.model);
        return 1;
    }
    step_stat *ss = calloc((size_t)ns, sizeof *ss);
    double *sbusy = calloc((size_t)ns * (size_t)t.nrows, sizeof *sbusy), *busy = calloc((size_t)t.nrows, sizeof *busy);
    pg_loaded l;
    pg_schedule s;
    pg_profile prof = { 0 };
    int have_model = 0, have_sched = 0, have_pr = 0, seconds = 0;
    pg_sched_prediction pr;
    pg_sched_costs c;
    char kind[64] = "measured";
    memset(&l, 0, sizeof l);
    if (!ss || !sbusy || !busy) {
        fprintf(stderr, "pipegen: out of memory\n");
        goto out;
    }
    step_stats(&t, ss, sbusy);
    if (want_step && (want_step < t.first || want_step > t.last || !ss[want_step - t.first].seen)) {
        fprintf(stderr, "%s: the trace holds steps %d..%d, not step %d\n", path, t.first, t.last, want_step);
        goto out;
    }
    if (balance && pg_profile_read(balance, &prof, &d) != 0)
        goto out;
    if (model) {
        have_model = 1;
        if (pg_load_profiled(&l, model, balance ? &prof : NULL, stderr) != 0 ||
            pg_schedule_build(&l.model, &s, &l.diag) != 0)
            goto out;
        have_sched = 1;
        if (l.model.nstages != t.nstages || (t.model && l.model.name && strcmp(t.model, l.model.name))) {
            fprintf(stderr, "%s: the trace is of model '%s' on %d stages, but %s is '%s' on %d stages\n", path,
                    t.model ? t.model : "?", t.nstages, model, l.model.name ? l.model.name : "?", l.model.nstages);
            goto out;
        }
        pg_schedule_name(&l.model, kind, sizeof kind);
        if (balance)
            cmd_profile_notes(&prof, &l.model, NULL);
        seconds = pg_sched_costs_of_model(&l.model, balance ? &prof : NULL, &c);
        have_pr = pg_schedule_predict(&l.model, &s, &c, &pr) == 0;
    }
    /* measured: the steps but the run's first (when there are others) */
    double span = 0;
    int used = 0, from = 0;
    for (int j = 0; j < ns; j++)
        if (ss[j].seen && !(t.first + j == 1 && ns > 1)) {
            if (!used)
                from = t.first + j;
            span += ss[j].hi - ss[j].lo;
            for (int st = 0; st < t.nrows; st++)
                busy[st] += ss[j].busy[st];
            used++;
        }
    char a[48], b[48];
    trace_fmt_time(a, sizeof a, used ? span / used : 0);
    char reps[32] = "";
    if (t.replicas > 1)
        snprintf(reps, sizeof reps, " x %d replicas", t.replicas);
    char clock[64] = ""; /* whose clock the actions' spans are on */
    if (t.device_rows && t.device_rows == t.listed_rows)
        snprintf(clock, sizeof clock, ", spans in device time");
    else if (t.device_rows)
        snprintf(clock, sizeof clock, ", spans in device time on %d of %d processes", t.device_rows, t.listed_rows);
    printf("trace %s: model %s, %d stage%s%s, %d micro-batch%s, steps %d..%d%s\n", path, t.model ? t.model : "?",
           t.nstages, t.nstages == 1 ? "" : "s", reps, t.nmb, t.nmb == 1 ? "" : "es", t.first, t.last, clock);
    printf("measured step %s (mean over %d step%s from step %d)", a, used, used == 1 ? "" : "s", from);
    if (have_pr && seconds) {
        trace_fmt_time(b, sizeof b, pr.step_time);
        printf(", predicted %s (%s): measured/predicted %.3f\n", b, balance ? "measured profile" : "cost model",
               pr.step_time > 0 ? span / used / pr.step_time : 0.0);
    } else if (have_pr) {
        printf(", predicted %.4g Gflop (cost model, flops: %s)\n", pr.step_time / 1e9,
               balance ? "the profile lacks some layers' times (see the note)" : "give --balance PROFILE for seconds");
    } else {
        printf("\n");
    }
    char nb[48];
    for (int st = 0; st < t.nrows; st++) {
        printf("%s: bubble measured %.1f%%", row_name(&t, st, nb, sizeof nb),
               span > 0 ? 100.0 * (1.0 - busy[st] / span) : 0.0);
        if (have_pr)
            printf(", predicted %.1f%%", 100.0 * pr.bubble[st % t.nstages]);
        printf("\n");
    }
    printf("time per step (the same steps):\n");
    for (int st = 0; st < t.nrows; st++) {
        double br[BR__COUNT];
        breakdown(&t, ss, st, ns > 1, br);
        printf("%s:", row_name(&t, st, nb, sizeof nb));
        for (int c = 0; c < BR__COUNT; c++) {
            if ((c == BR_DP || c == BR_DP_WAIT) && t.replicas < 2)
                continue;
            if (c >= BR_LOG && !(br[BR_LOG] + br[BR_EVAL] + br[BR_STOP] + br[BR_CKPT] > 0))
                continue; /* the parts of the work between steps, where there are any */
            trace_fmt_time(a, sizeof a, br[c]);
            if (c == BR_DP_WAIT)
                printf(" (%s %s)", br_name[c], a);
            else if (c >= BR_LOG)
                printf("%s%s %s%s", c == BR_LOG ? " (of which " : ", ", br_name[c], a, c == BR_CKPT ? ")" : "");
            else
                printf("%s %s %s", c ? "," : "", br_name[c], a);
        }
        printf("\n");
    }
    printf("after the last F/B/W of a step (the same steps; %% of the measured step):\n");
    for (int st = 0; st < t.nrows; st++) {
        double whole, waits, mean_step = used ? span / used : 0;
        step_end_times(&t, st, ns > 1, &whole, &waits);
        trace_fmt_time(a, sizeof a, whole);
        printf("%s: %s (%.1f%%): ", row_name(&t, st, nb, sizeof nb), a, mean_step > 0 ? 100.0 * whole / mean_step : 0.0);
        trace_fmt_time(a, sizeof a, waits);
        trace_fmt_time(b, sizeof b, whole - waits);
        printf("receives and their waits %s (%.1f%%), its own work %s (%.1f%%)\n", a,
               mean_step > 0 ? 100.0 * waits / mean_step : 0.0, b, mean_step > 0 ? 100.0 * (whole - waits) / mean_step : 0.0);
    }
    if (have_pr && seconds && trace_compare(&t, &l.model, &s, &c, stdout))
        goto out;
    rc = 0;
    if (svg) {
        int step = want_step ? want_step : t.last;
        while (step > t.first && !ss[step - t.first].seen)
            step--;
        rc = trace_svg(&t, ss, step, kind, svg, &d) != 0;
    }
out:
    if (have_sched)
        pg_schedule_free(&s);
    if (have_model)
        pg_unload(&l);
    pg_profile_free(&prof);
    free(ss);
    free(sbusy);
    free(busy);
    free(t.ev);
    free(t.model);
    return rc;
}

/* codegen/cmd_trace.c — `pipegen trace RUN.json [MODEL.pipe] [--svg OUT]
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
 * measured time before the first action). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "cost.h"
#include "load.h"
#include "sched_internal.h"
#include "schedule.h"
#include "svg.h"

/* ---- a small JSON reader: the whole document as a tree --------------------- */

typedef enum { JV_NULL, JV_BOOL, JV_NUM, JV_STR, JV_ARR, JV_OBJ } jv_kind;

typedef struct jv {
    jv_kind k;
    double num;
    char *str;          /* JV_STR */
    int n;              /* JV_ARR, JV_OBJ: members */
    struct jv *kid;     /* [n] */
    char **key;         /* JV_OBJ: [n] */
} jv;

typedef struct jparse {
    const char *s, *end, *line_start;
    int line, failed;
    pg_diag *d;
    const char *path;
} jparse;

static void jv_free(jv *v)
{
    if (v->k == JV_ARR || v->k == JV_OBJ) {
        for (int i = 0; i < v->n; i++) {
            jv_free(&v->kid[i]);
            if (v->key)
                free(v->key[i]);
        }
        free(v->kid);
        free(v->key);
    }
    free(v->str);
    memset(v, 0, sizeof *v);
}

static void jp_fail(jparse *p, const char *what)
{
    if (p->failed)
        return;
    p->failed = 1;
    pg_loc l = { p->path, p->line, (int)(p->s - p->line_start) + 1 };
    if (p->s >= p->end)
        pg_error(p->d, l, "trace: expected %s, found the end of the file (truncated?)", what);
    else
        pg_error(p->d, l, "trace: expected %s, found `%c`", what, *p->s);
}

static void jp_space(jparse *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\r' || *p->s == '\n')) {
        if (*p->s == '\n') {
            p->line++;
            p->line_start = p->s + 1;
        }
        p->s++;
    }
}

static int jp_eat(jparse *p, char c)
{
    jp_space(p);
    if (p->s < p->end && *p->s == c) {
        p->s++;
        return 1;
    }
    return 0;
}

/* A string; escapes kept simple: \" \\ \/ \b \f \n \r \t, \uXXXX as '?'. */
static char *jp_string(jparse *p)
{
    jp_space(p);
    if (p->s >= p->end || *p->s != '"') {
        jp_fail(p, "a string");
        return NULL;
    }
    p->s++;
    const char *q = p->s;
    while (q < p->end && *q != '"' && *q != '\n')
        q += *q == '\\' && q + 1 < p->end ? 2 : 1;
    if (q >= p->end || *q != '"') {
        p->s = q;
        jp_fail(p, "the closing `\"` of a string");
        return NULL;
    }
    char *out = malloc((size_t)(q - p->s) + 1);
    size_t n = 0;
    if (!out) {
        jp_fail(p, "a smaller file (out of memory)");
        return NULL;
    }
    while (p->s < q) {
        char c = *p->s++;
        if (c == '\\') {
            char e = *p->s++;
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e;
            if (e == 'u') {
                c = '?';
                for (int i = 0; i < 4 && p->s < q; i++)
                    p->s++;
            }
        }
        out[n++] = c;
    }
    out[n] = 0;
    p->s = q + 1;
    return out;
}

static int jp_value(jparse *p, jv *v, int depth)
{
    memset(v, 0, sizeof *v);
    jp_space(p);
    if (depth > 64) {
        jp_fail(p, "less nesting");
        return -1;
    }
    if (p->s >= p->end) {
        jp_fail(p, "a value");
        return -1;
    }
    char c = *p->s;
    if (c == '"') {
        v->k = JV_STR;
        return (v->str = jp_string(p)) ? 0 : -1;
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        int cap = 0;
        v->k = c == '{' ? JV_OBJ : JV_ARR;
        p->s++;
        if (jp_eat(p, close))
            return 0;
        do {
            if (v->n == cap) {
                cap = cap ? 2 * cap : 8;
                jv *nk = realloc(v->kid, (size_t)cap * sizeof *nk);
                char **nkey = v->k == JV_OBJ ? realloc(v->key, (size_t)cap * sizeof *nkey) : NULL;
                if (nk)
                    v->kid = nk;
                if (nkey)
                    v->key = nkey;
                if (!nk || (v->k == JV_OBJ && !nkey)) {
                    jp_fail(p, "a smaller file (out of memory)");
                    return -1;
                }
            }
            char *key = NULL;
            if (v->k == JV_OBJ) {
                if (!(key = jp_string(p)))
                    return -1;
                if (!jp_eat(p, ':')) {
                    free(key);
                    jp_fail(p, "`:`");
                    return -1;
                }
                v->key[v->n] = key;
            }
            int rc = jp_value(p, &v->kid[v->n], depth + 1);
            v->n++; /* counted even when it failed: jv_free frees what it holds */
            if (rc)
                return -1;
        } while (jp_eat(p, ','));
        if (!jp_eat(p, close)) {
            jp_fail(p, close == '}' ? "`,` or `}`" : "`,` or `]`");
            return -1;
        }
        return 0;
    }
    if (!strncmp(p->s, "true", 4) || !strncmp(p->s, "null", 4) || !strncmp(p->s, "false", 5)) {
        v->k = *p->s == 'n' ? JV_NULL : JV_BOOL;
        v->num = *p->s == 't';
        p->s += *p->s == 'f' ? 5 : 4;
        return 0;
    }
    char buf[64];
    size_t n = 0;
    while (p->s + n < p->end && n < sizeof buf - 1 && strchr("+-.0123456789eE", p->s[n]))
        n++;
    memcpy(buf, p->s, n);
    buf[n] = 0;
    char *e;
    double x = n ? strtod(buf, &e) : 0;
    if (!n || *e || !isfinite(x)) {
        jp_fail(p, "a value");
        return -1;
    }
    p->s += n;
    v->k = JV_NUM;
    v->num = x;
    return 0;
}

static const jv *jv_get(const jv *o, const char *key)
{
    if (!o || o->k != JV_OBJ)
        return NULL;
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->key[i], key))
            return &o->kid[i];
    return NULL;
}

static int jv_num(const jv *o, const char *key, double *out)
{
    const jv *v = jv_get(o, key);
    if (!v || v->k != JV_NUM)
        return -1;
    *out = v->num;
    return 0;
}

/* ---- the trace ----------------------------------------------------------------- */

typedef struct tev {
    int stage, step, kind; /* kind: -1 step, else pg_act_kind (0 F, 1 B, 2 W, ...), PG_STEP_KIND_COUNT unknown */
    int mb, chunk;
    double t0, t1;         /* seconds */
} tev;

typedef struct trace {
    int nstages, nmb, first, last; /* steps first..last (1-based) */
    char *model;
    int n;
    tev *ev;
} trace;

static int kind_of(const char *k)
{
    for (int i = 0; k && i < PG_STEP_KIND_COUNT; i++)
        if (!strcmp(k, pg_act_name((pg_act_kind)i)))
            return i;
    return PG_STEP_KIND_COUNT;
}

/* 0, or -1 after an error naming the file. */
static int trace_read(const char *path, trace *t, pg_diag *d)
{
    memset(t, 0, sizeof *t);
    pg_source src;
    if (pg_source_read(&src, path, (size_t)1 << 30, d) != 0)
        return -1;
    jparse p = { src.text, src.text + src.len, src.text, 1, 0, d, path };
    jv root;
    int rc = -1;
    pg_loc whole = { path, 0, 0 };
    if (jp_value(&p, &root, 0) == 0) {
        jp_space(&p);
        if (p.s < p.end)
            jp_fail(&p, "the end of the file");
    }
    if (p.failed)
        goto out;
    const jv *evs = jv_get(&root, "traceEvents");
    if (!evs || evs->k != JV_ARR) {
        pg_error(d, whole, "trace: no \"traceEvents\" list (not a Chrome trace written by --trace)");
        goto out;
    }
    t->ev = malloc((size_t)(evs->n > 0 ? evs->n : 1) * sizeof *t->ev);
    if (!t->ev) {
        pg_error(d, whole, "trace: out of memory");
        goto out;
    }
    t->first = -1;
    for (int i = 0; i < evs->n; i++) {
        const jv *e = &evs->kid[i], *ph = jv_get(e, "ph"), *args = jv_get(e, "args");
        if (!ph || ph->k != JV_STR || strcmp(ph->str, "X"))
            continue; /* metadata and other phases */
        double pid, ts, dur, step, mb = -1, chunk = -1;
        const jv *cat = jv_get(e, "cat"), *kind = jv_get(args, "kind");
        if (jv_num(e, "pid", &pid) || jv_num(e, "ts", &ts) || jv_num(e, "dur", &dur) || jv_num(args, "step", &step) ||
            pid < 0 || pid >= PG_SCHED_MAX_STAGES || dur < 0 || step < 1 || step > 2e9) {
            pg_error(d, whole, "trace: event %d of traceEvents lacks a stage (pid 0..63), ts, dur >= 0 or args.step >= 1", i);
            goto out;
        }
        int is_step = cat && cat->k == JV_STR && !strcmp(cat->str, "step");
        jv_num(args, "mb", &mb);
        jv_num(args, "chunk", &chunk);
        if (mb < -1 || mb >= 1 << 20 || chunk < -1 || chunk >= PG_SCHED_MAX_CHUNKS) {
            pg_error(d, whole, "trace: event %d of traceEvents has args.mb %g or args.chunk %g out of range "
                     "(-1 .. %d, -1 .. %d)", i, mb, chunk, (1 << 20) - 1, PG_SCHED_MAX_CHUNKS - 1);
            goto out;
        }
        t->ev[t->n++] = (tev){ (int)pid, (int)step, is_step ? -1 : kind_of(kind && kind->k == JV_STR ? kind->str : NULL),
                               (int)mb, (int)chunk, ts * 1e-6, (ts + dur) * 1e-6 };
        if ((int)pid + 1 > t->nstages)
            t->nstages = (int)pid + 1;
        if (t->first < 0 || (int)step < t->first)
            t->first = (int)step;
        if ((int)step > t->last)
            t->last = (int)step;
        if ((int)mb + 1 > t->nmb)
            t->nmb = (int)mb + 1;
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
    const jv *other = jv_get(&root, "otherData"), *model = jv_get(other, "model");
    double x;
    if (!jv_num(other, "stages", &x) && x > t->nstages && x <= PG_SCHED_MAX_STAGES)
        t->nstages = (int)x;
    if (!jv_num(other, "microbatches", &x) && x > t->nmb && x < 1e6)
        t->nmb = (int)x;
    if (model && model->k == JV_STR && !(t->model = strdup(model->str))) {
        pg_error(d, whole, "trace: out of memory");
        goto out;
    }
    rc = 0;
out:
    if (rc) {
        free(t->ev);
        t->ev = NULL;
    }
    jv_free(&root);
    pg_source_free(&src);
    return rc;
}

/* Per step (index step - first): the span's start and end over every stage,
 * and each stage's F/B/W time. */
typedef struct step_stat {
    double lo, hi;
    double busy[PG_SCHED_MAX_STAGES];
    int seen;
} step_stat;

static void step_stats(const trace *t, step_stat *ss)
{
    int ns = t->last - t->first + 1;
    for (int j = 0; j < ns; j++) {
        memset(&ss[j], 0, sizeof ss[j]);
        ss[j].lo = INFINITY;
        ss[j].hi = -INFINITY;
    }
    for (int i = 0; i < t->n; i++) {
        const tev *e = &t->ev[i];
        step_stat *s = &ss[e->step - t->first];
        if (e->t0 < s->lo)
            s->lo = e->t0;
        if (e->t1 > s->hi)
            s->hi = e->t1;
        s->seen = 1;
        if (e->kind >= 0 && e->kind <= 2)
            s->busy[e->stage] += e->t1 - e->t0;
    }
}

static void fmt_time(char *buf, size_t n, double s)
{
    if (s >= 1)
        snprintf(buf, n, "%.4g s", s);
    else if (s >= 1e-3)
        snprintf(buf, n, "%.4g ms", s * 1e3);
    else
        snprintf(buf, n, "%.4g us", s * 1e6);
}

/* The measured step `step` as a timeline (svg.c). */
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
    pg_timeline tl = { t->model, schedule, t->nstages, t->nmb, s->hi - s->lo, s->busy, 1, src, 0, box };
    for (int st = 0; st < t->nstages; st++) /* stage by stage, in time order as recorded: every action */
        for (int i = 0; i < t->n; i++) {
            const tev *e = &t->ev[i];
            if (e->stage == st && e->step == step && e->kind >= 0 && e->kind < PG_STEP_KIND_COUNT)
                box[tl.nbox++] = (pg_timeline_box){ st, e->kind, e->mb, e->chunk, e->t0 - s->lo, e->t1 - e->t0 };
        }
    FILE *f = fopen(path, "w");
    int bad = !f;
    if (f) {
        pg_timeline_svg(&tl, f);
        bad = ferror(f) != 0;
        if (fclose(f) != 0)
            bad = 1;
    }
    free(box);
    if (bad) {
        pg_error(d, loc, "cannot write the timeline");
        return -1;
    }
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
    pg_diag d;
    pg_diag_init(&d, stderr, NULL);
    trace t;
    if (trace_read(path, &t, &d) != 0)
        return 1;
    int rc = 1, ns = t.last - t.first + 1;
    step_stat *ss = calloc((size_t)ns, sizeof *ss);
    pg_loaded l;
    pg_schedule s;
    pg_profile prof = { 0 };
    int have_model = 0, have_sched = 0, have_pr = 0, seconds = 0;
    pg_sched_prediction pr;
    char kind[64] = "measured";
    memset(&l, 0, sizeof l);
    if (!ss) {
        fprintf(stderr, "pipegen: out of memory\n");
        goto out;
    }
    step_stats(&t, ss);
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
        pg_sched_costs c;
        seconds = pg_sched_costs_of_model(&l.model, balance ? &prof : NULL, &c);
        have_pr = pg_schedule_predict(&l.model, &s, &c, &pr) == 0;
    }
    /* measured: the steps but the run's first (when there are others) */
    double span = 0, busy[PG_SCHED_MAX_STAGES] = { 0 };
    int used = 0, from = 0;
    for (int j = 0; j < ns; j++)
        if (ss[j].seen && !(t.first + j == 1 && ns > 1)) {
            if (!used)
                from = t.first + j;
            span += ss[j].hi - ss[j].lo;
            for (int st = 0; st < t.nstages; st++)
                busy[st] += ss[j].busy[st];
            used++;
        }
    char a[48], b[48];
    fmt_time(a, sizeof a, used ? span / used : 0);
    printf("trace %s: model %s, %d stage%s, %d micro-batch%s, steps %d..%d\n", path, t.model ? t.model : "?",
           t.nstages, t.nstages == 1 ? "" : "s", t.nmb, t.nmb == 1 ? "" : "es", t.first, t.last);
    printf("measured step %s (mean over %d step%s from step %d)", a, used, used == 1 ? "" : "s", from);
    if (have_pr && seconds) {
        fmt_time(b, sizeof b, pr.step_time);
        printf(", predicted %s (%s): measured/predicted %.3f\n", b, balance ? "measured profile" : "cost model",
               pr.step_time > 0 ? span / used / pr.step_time : 0.0);
    } else if (have_pr) {
        printf(", predicted %.4g Gflop (cost model, flops: give --balance PROFILE for seconds)\n", pr.step_time / 1e9);
    } else {
        printf("\n");
    }
    for (int st = 0; st < t.nstages; st++) {
        printf("stage %d: bubble measured %.1f%%", st, span > 0 ? 100.0 * (1.0 - busy[st] / span) : 0.0);
        if (have_pr)
            printf(", predicted %.1f%%", 100.0 * pr.bubble[st]);
        printf("\n");
    }
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
    free(t.ev);
    free(t.model);
    return rc;
}

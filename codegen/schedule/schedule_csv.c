/* codegen/schedule/schedule_csv.c — schedules as CSV files.
 *
 * Format. A header line, then one action per line, in each stage's order
 * (lines of different stages may interleave; only the order within a stage
 * counts). Blank lines and lines starting with `#` are ignored; spaces around
 * fields are allowed.
 *
 *   stage,action,mb,chunk                  compute actions only: FWD, BWD_B,
 *   0,FWD,0,0                              BWD_W; pipegen inserts the
 *   ...                                    communication, ties and OPT_STEP.
 *
 *   stage,action,mb,chunk,peer,skip,param  any action (what `pipegen schedule
 *   0,FWD,0,0,-1,-1,-1                     --csv` writes); when a file lists
 *   0,SEND_ACT,0,0,1,-1,-1                 any non-compute action it is taken
 *   ...                                    exactly as written (then it must
 *   0,OPT_STEP,-1,-1,-1,-1,-1              hold every send, receive and
 *                                          OPT_STEP itself).
 *
 * -1 (or an empty field) means "none" for mb and chunk of per-step actions and
 * for peer, skip and param. Every (chunk, mb) needs exactly one FWD, BWD_B and
 * BWD_W on the stage that holds the chunk (chunk c is on stage c % stages).
 * The schedule is then verified like a built-in one. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "schedule/sched_internal.h"

#define CSV_LIMIT (64u << 20)
#define CSV_MAX_FIELDS 8

static const char *const hdr_short[] = { "stage", "action", "mb", "chunk" };
static const char *const hdr_long[] = { "stage", "action", "mb", "chunk", "peer", "skip", "param" };

typedef struct csv_field {
    const char *p;  /* trimmed text, not NUL-terminated */
    int len, col;   /* col: 1-based column of the trimmed text */
} csv_field;

#define CSV_MAX_ERRORS 50 /* the reader stops after this many errors (the .pipe checker's cap, CHK_MAX_ERRORS) */

typedef struct csv_ctx {
    const char *path;
    const ir_model *m;
    pg_schedule *s;
    pg_diag *d;
    int errors;
    int line;
    int *seen;      /* [chunk][mb][3]: line of the FWD/BWD_B/BWD_W, 0 when none */
} csv_ctx;

static void csv_error(csv_ctx *c, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void csv_error(csv_ctx *c, int line, int col, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pg_loc loc = { c->path, line, line > 0 ? col : 0 };
    pg_error(c->d, loc, "%s", buf);
    c->errors++;
}

/* Split one line (without its newline) at commas; returns the field count,
 * or CSV_MAX_FIELDS + 1 when there are more. */
static int split_fields(const char *line, int len, csv_field *f)
{
    int n = 0, start = 0;
    for (int i = 0; i <= len; i++) {
        if (i < len && line[i] != ',')
            continue;
        if (n == CSV_MAX_FIELDS)
            return CSV_MAX_FIELDS + 1;
        int a = start, b = i;
        while (a < b && (line[a] == ' ' || line[a] == '\t'))
            a++;
        while (b > a && (line[b - 1] == ' ' || line[b - 1] == '\t' || line[b - 1] == '\r'))
            b--;
        f[n].p = line + a;
        f[n].len = b - a;
        f[n].col = a + 1;
        n++;
        start = i + 1;
    }
    return n;
}

static int field_is(const csv_field *f, const char *word)
{
    return (size_t)f->len == strlen(word) && memcmp(f->p, word, (size_t)f->len) == 0;
}

/* Integer field; empty means -1 when allow_empty. 0 on success. */
static int field_int(csv_ctx *c, const csv_field *f, const char *what, int allow_empty, int *out)
{
    if (f->len == 0 && allow_empty) {
        *out = -1;
        return 0;
    }
    long long v = 0;
    int i = 0, neg = 0;
    if (i < f->len && f->p[i] == '-')
        neg = 1, i++;
    if (i == f->len) {
        csv_error(c, c->line, f->col, "expected an integer for %s, found `%.*s`", what, f->len, f->p);
        return -1;
    }
    for (; i < f->len; i++) {
        if (f->p[i] < '0' || f->p[i] > '9' || v > 100000000) {
            csv_error(c, c->line, f->col, "expected an integer for %s, found `%.*s`", what, f->len, f->p);
            return -1;
        }
        v = v * 10 + (f->p[i] - '0');
    }
    *out = (int)(neg ? -v : v);
    return 0;
}

static int parse_kind(csv_ctx *c, const csv_field *f, pg_act_kind *k)
{
    const char *names[PG_STEP_KIND_COUNT];
    for (int i = 0; i < PG_STEP_KIND_COUNT; i++) {
        names[i] = pg_act_name((pg_act_kind)i);
        if (field_is(f, names[i])) {
            *k = (pg_act_kind)i;
            return 0;
        }
    }
    char word[64];
    snprintf(word, sizeof word, "%.*s", f->len < 60 ? f->len : 60, f->p);
    const char *near = pg_suggest(word, names, PG_STEP_KIND_COUNT);
    if (near)
        csv_error(c, c->line, f->col, "unknown action `%s`; did you mean `%s`?", word, near);
    else
        csv_error(c, c->line, f->col, "unknown action `%s` (FWD, BWD_B, BWD_W, or a communication action)", word);
    return -1;
}

/* One action line. */
static void parse_action(csv_ctx *c, csv_field *f, int nf, int want_nf)
{
    const ir_model *m = c->m;
    pg_schedule *s = c->s;
    pg_act a = pg_act_make(PG_FWD, -1, -1);
    int st;
    a.line = c->line;
    if (nf != want_nf) {
        csv_error(c, c->line, nf > want_nf && nf <= CSV_MAX_FIELDS ? f[want_nf].col : 1,
                  "expected %d fields as in the header, found %s%d", want_nf,
                  nf > CSV_MAX_FIELDS ? "more than " : "", nf > CSV_MAX_FIELDS ? CSV_MAX_FIELDS : nf);
        return;
    }
    if (field_int(c, &f[0], "stage", 0, &st) != 0 || parse_kind(c, &f[1], &a.kind) != 0)
        return;
    if (st < 0 || st >= s->nstages) {
        csv_error(c, c->line, f[0].col, "stage %d out of range (the model has %d stage%s)", st, s->nstages,
                  s->nstages == 1 ? "" : "s");
        return;
    }
    int per_mb = a.kind <= PG_RECV_SKIP_GRAD;
    if (field_int(c, &f[2], "mb", !per_mb, &a.mb) != 0 || field_int(c, &f[3], "chunk", !per_mb, &a.chunk) != 0)
        return;
    if (want_nf == 7 && (field_int(c, &f[4], "peer", 1, &a.peer) != 0 ||
                         field_int(c, &f[5], "skip", 1, &a.skip) != 0 ||
                         field_int(c, &f[6], "param", 1, &a.param) != 0))
        return;
    if (!pg_act_is_compute(a.kind) && want_nf != 7) {
        csv_error(c, c->line, f[1].col, "action %s needs the columns peer,skip,param: use the header "
                  "`stage,action,mb,chunk,peer,skip,param`", pg_act_name(a.kind));
        return;
    }
    if (per_mb) {
        if (a.mb < 0 || a.mb >= s->nmb) {
            csv_error(c, c->line, f[2].col, "micro-batch %d out of range (0 to %d)", a.mb, s->nmb - 1);
            return;
        }
        if (a.chunk < 0 || a.chunk >= s->nchunks) {
            csv_error(c, c->line, f[3].col, "chunk %d out of range (the model has %d chunk%s)", a.chunk,
                      s->nchunks, s->nchunks == 1 ? "" : "s");
            return;
        }
        if (pg_chunk_stage(s, a.chunk) != st) {
            csv_error(c, c->line, f[3].col, "chunk %d runs on stage %d, not stage %d", a.chunk,
                      pg_chunk_stage(s, a.chunk), st);
            return;
        }
    } else if (a.mb != -1 || a.chunk != -1) {
        csv_error(c, c->line, f[a.mb != -1 ? 2 : 3].col, "%s is once per step: mb and chunk must be -1",
                  pg_act_name(a.kind));
        return;
    }
    if (want_nf == 7) {
        if (a.peer < -1 || a.peer >= s->nstages) {
            csv_error(c, c->line, f[4].col, "peer %d out of range (the model has %d stages)", a.peer, s->nstages);
            return;
        }
        if (a.skip < -1 || a.skip >= m->nskips) {
            csv_error(c, c->line, f[5].col, "skip %d out of range (the model has %d)", a.skip, m->nskips);
            return;
        }
        if (a.param < -1 || a.param >= m->nparams) {
            csv_error(c, c->line, f[6].col, "param %d out of range (the model has %d)", a.param, m->nparams);
            return;
        }
    }
    if (pg_act_is_compute(a.kind)) {
        int *seen = &c->seen[((size_t)a.chunk * (size_t)s->nmb + (size_t)a.mb) * 3 + (size_t)a.kind];
        if (*seen) {
            char sa[128];
            csv_error(c, c->line, f[1].col, "duplicate %s; first at line %d", pg_act_str(&a, sa, sizeof sa), *seen);
            return;
        }
        *seen = c->line;
    }
    if (pg_sched_push(&s->stage[st], a) != 0)
        csv_error(c, c->line, 1, "out of memory");
}

/* Every (chunk, mb) needs its three compute actions. */
static void check_complete(csv_ctx *c)
{
    pg_schedule *s = c->s;
    int missing = 0;
    char sa[128];
    for (int ch = 0; ch < s->nchunks; ch++)
        for (int mb = 0; mb < s->nmb; mb++)
            for (int k = 0; k < 3; k++) {
                if (c->seen[((size_t)ch * (size_t)s->nmb + (size_t)mb) * 3 + (size_t)k])
                    continue;
                if (++missing <= 8) {
                    pg_act a = pg_act_make((pg_act_kind)k, mb, ch);
                    csv_error(c, 0, 0, "stage %d has no %s", pg_chunk_stage(s, ch), pg_act_str(&a, sa, sizeof sa));
                }
            }
    if (missing > 8) {
        pg_loc loc = { c->path, 0, 0 };
        pg_note(c->d, loc, "%d more compute actions are missing", missing - 8);
    }
}

int pg_schedule_read_csv(const char *path, const ir_model *m, pg_schedule *s, pg_diag *d)
{
    pg_source src;
    pg_loc none = { path ? path : "<schedule>", 0, 0 };
    memset(s, 0, sizeof *s);
    if (!path) {
        pg_error(d, m->train.schedule_loc, "no schedule file given");
        return -1;
    }
    if (m->nstages < 1 || m->nstages > PG_SCHED_MAX_STAGES || m->nchunks < m->nstages ||
        m->nchunks > PG_SCHED_MAX_CHUNKS || m->nchunks % m->nstages != 0 || m->train.microbatches < 1 ||
        m->train.microbatches > 1 << 20) {
        pg_error(d, none, "cannot schedule %d chunks on %d stages with %lld micro-batches", m->nchunks,
                 m->nstages, (long long)m->train.microbatches);
        return -1;
    }
    if (pg_source_read(&src, path, CSV_LIMIT, d) != 0) {
        pg_note(d, m->train.schedule_loc, "the schedule file is named here (a relative name is relative to the "
                "folder of the .pipe file)");
        return -1;
    }
    csv_ctx c = { .path = src.path, .m = m, .s = s, .d = d };
    const pg_source *saved = d->src;
    d->src = &src; /* quote the CSV's lines */
    if (pg_sched_alloc(s, m->nstages, m->nchunks, (int)m->train.microbatches, m->placement) != 0 ||
        !(s->file = strdup(path)) ||
        !(c.seen = calloc((size_t)m->nchunks * (size_t)s->nmb * 3, sizeof *c.seen))) {
        c.path = s->file ? s->file : path;
        csv_error(&c, 0, 0, "out of memory reading the schedule");
        goto out;
    }
    c.path = s->file; /* diagnostics outlive src */
    int want_nf = 0;
    const char *p = src.text, *end = src.text + src.len;
    if (src.len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) /* a UTF-8 byte-order mark (spreadsheets write one): not text */
        p += 3;
    for (c.line = 1; p < end; c.line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        int len = (int)((nl ? nl : end) - p);
        csv_field f[CSV_MAX_FIELDS];
        int nf = split_fields(p, len, f);
        p = nl ? nl + 1 : end;
        if (nf == 1 && (f[0].len == 0 || f[0].p[0] == '#'))
            continue;
        if (nf >= 1 && f[0].len > 0 && f[0].p[0] == '#')
            continue;
        if (!want_nf) {
            int is_short = nf == 4, is_long = nf == 7;
            for (int i = 0; i < nf && (is_short || is_long); i++) {
                if (is_short && !field_is(&f[i], hdr_short[i]))
                    is_short = 0;
                if (is_long && !field_is(&f[i], hdr_long[i]))
                    is_long = 0;
            }
            if (!is_short && !is_long) {
                csv_error(&c, c.line, 1, "expected the header `stage,action,mb,chunk` or "
                          "`stage,action,mb,chunk,peer,skip,param`");
                goto out;
            }
            want_nf = nf;
            continue;
        }
        parse_action(&c, f, nf, want_nf);
        if (c.errors >= CSV_MAX_ERRORS || (d->max_errors > 0 && c.errors >= d->max_errors)) {
            if (c.errors >= CSV_MAX_ERRORS) { /* as the checker does: 300,000 repeated lines are not 300,000 errors */
                pg_loc l = { src.path, 0, 0 };
                pg_note(d, l, "too many errors (%d), stopping at line %d", CSV_MAX_ERRORS, c.line);
            }
            break;
        }
    }
    if (!want_nf && c.errors == 0)
        csv_error(&c, 0, 0, "empty schedule: expected the header `stage,action,mb,chunk` and one line per action");
    if (c.errors == 0)
        check_complete(&c);
out:
    d->src = saved;
    free(c.seen);
    pg_source_free(&src);
    if (c.errors) {
        pg_schedule_free(s);
        return -1;
    }
    return 0;
}

void pg_schedule_write_csv(const pg_schedule *s, FILE *out)
{
    fprintf(out, "stage,action,mb,chunk,peer,skip,param\n");
    for (int st = 0; st < s->nstages; st++)
        for (int i = 0; i < s->stage[st].n; i++) {
            const pg_act *a = &s->stage[st].act[i];
            fprintf(out, "%d,%s,%d,%d,%d,%d,%d\n", st, pg_act_name(a->kind), a->mb, a->chunk, a->peer, a->skip,
                    a->param);
        }
}

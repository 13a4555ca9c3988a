/* codegen/choose/auto.c — `schedule = auto` with `memory = BYTES` per stage: every
 * candidate schedule (and, for `stages = N`, the splits the balancer would
 * consider) is built, verified, memory-planned exactly (pg_gen_prepare's plan, the one
 * gen writes) and timed (predict.c by the cost model or a profile); the
 * fastest whose largest stage arena fits the budget wins, ties going to the
 * smaller arena and then to the earlier candidate, so the choice is
 * deterministic. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choose/balance.h"
#include "gen/emit.h"
#include "schedule/schedule.h"
#include "schedule/svg.h"

#define AUTO_MAX_V 8 /* interleaved(v) up to this many chunks per stage */

static int is_compute(const ir_layer *L) { return L->kind != LK_STASH && L->kind != LK_POP; }

static const char *cand_name(const pg_auto_cand *c, char *buf, size_t n)
{
    switch (c->schedule) {
    case SCHED_GPIPE: snprintf(buf, n, c->interleave > 1 ? "gpipe(%d chunks)" : "gpipe", c->interleave); break;
    case SCHED_1F1B: snprintf(buf, n, "1f1b"); break;
    case SCHED_ZB1: snprintf(buf, n, "zb1"); break;
    case SCHED_ZBV: snprintf(buf, n, "zbv"); break;
    case SCHED_INTERLEAVED: snprintf(buf, n, "interleaved(%d)", c->interleave); break;
    default: snprintf(buf, n, "?"); break;
    }
    return buf;
}

/* "40 GiB", "3.25 MiB", "512 bytes" */
static const char *fmt_bytes(int64_t b, char *buf, size_t n)
{
    static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB" };
    if (b < 1024) {
        snprintf(buf, n, "%" PRId64 " bytes", b);
        return buf;
    }
    double v = (double)b / 1024;
    int u = 0;
    while (v >= 1024 && u < 3) {
        v /= 1024;
        u++;
    }
    snprintf(buf, n, "%.4g %s", v, unit[u]);
    return buf;
}

typedef struct auto_ctx {
    ir_model *m;
    const pg_profile *prof;
    pg_auto *a;
    int ncompute;
} auto_ctx;

static pg_auto_cand *add_cand(auto_ctx *x, ir_schedule sch, int v, ir_placement pl, int nstages, const char *split)
{
    pg_auto *a = x->a;
    pg_auto_cand *nc = realloc(a->cand, (size_t)(a->n + 1) * sizeof *nc);
    if (!nc)
        return NULL;
    a->cand = nc;
    pg_auto_cand *c = &a->cand[a->n];
    memset(c, 0, sizeof *c);
    c->chunk_of = malloc((size_t)(x->ncompute + 1) * sizeof *c->chunk_of);
    if (!c->chunk_of)
        return NULL;
    a->n++;
    c->schedule = sch;
    c->interleave = v;
    c->placement = pl;
    c->nstages = nstages;
    c->nchunks = nstages * v;
    c->split = split;
    return c;
}

static void set_schedule(ir_model *m, const pg_auto_cand *c)
{
    m->train.schedule = c->schedule;
    m->train.interleave = c->interleave;
}

/* Build, verify, plan and time candidate c on m (already split as c says). */
static void evaluate(auto_ctx *x, pg_auto_cand *c)
{
    ir_model *m = x->m;
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    pg_diag d;
    pg_diag_init(&d, mem, NULL);
    set_schedule(m, c);
    pg_schedule s;
    pg_gen *g = NULL;
    if (pg_model_repartition(m, c->nchunks, c->nstages, c->placement, c->chunk_of) != 0) {
        snprintf(c->refused, sizeof c->refused, "a parameter without `tie` would be used on two stages");
    } else if (pg_schedule_build(m, &s, &d) == 0) {
        if (pg_gen_prepare(m, &s, 0, &g, &d) == 0) {
            pg_sched_costs costs;
            pg_sched_prediction pr;
            x->a->seconds = pg_sched_costs_of_model(m, x->prof, &costs);
            if (pg_schedule_predict(m, &s, &costs, &pr) == 0) {
                double busy = 0;
                for (int st = 0; st < c->nstages && st < 64; st++) {
                    c->arena[st] = pg_gen_arena_bytes(g, st);
                    if (c->arena[st] > c->arena_max)
                        c->arena_max = c->arena[st];
                    busy += pr.busy[st];
                }
                c->step = pr.step_time;
                c->bubble = pr.step_time > 0 ? 1.0 - busy / (pr.step_time * c->nstages) : 0.0;
                c->ok = 1;
                c->fits = c->arena_max <= x->a->memory;
                c->cuts = pg_split_cuts(m, c->chunk_of, NULL) != 0; /* out of memory: not a whole-block one */
            } else {
                snprintf(c->refused, sizeof c->refused, "the schedule cannot be simulated");
            }
            pg_gen_free(g);
        }
        pg_schedule_free(&s);
    }
    if (mem)
        fclose(mem);
    if (!c->ok && !c->refused[0]) {
        /* the first error line, without its location */
        const char *e = text ? strstr(text, "error: ") : NULL;
        e = e ? e + 7 : "refused";
        size_t k = strcspn(e, "\n");
        snprintf(c->refused, sizeof c->refused, "%.*s", (int)(k < 199 ? k : 199), e);
    }
    free(text);
}

/* The compute layers' chunks as m has them now. */
static void current_split(const ir_model *m, int *chunk_of)
{
    for (int i = 0, j = 0; i < m->nlayers; i++)
        if (is_compute(&m->layers[i]))
            chunk_of[j++] = m->layers[i].chunk;
}

static int same_split(const int *a, const int *b, int n)
{
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Candidates of one schedule kind with v chunks per stage on p stages. */
static int try_kind(auto_ctx *x, ir_schedule sch, int v, ir_placement pl, int p, const int *yours)
{
    ir_model *m = x->m;
    pg_auto_cand *c;
    if (yours) {
        if (!(c = add_cand(x, sch, v, pl, p, "yours")))
            return -1;
        memcpy(c->chunk_of, yours, (size_t)x->ncompute * sizeof *c->chunk_of);
        evaluate(x, c);
        return 0;
    }
    if (!(c = add_cand(x, sch, v, pl, p, "balanced")))
        return -1;
    int bal = x->a->n - 1; /* its index: add_cand may move the table */
    set_schedule(m, c);
    pg_block_split bs;
    int *other = malloc((size_t)(x->ncompute + 1) * sizeof *other);
    int rc = other ? pg_balance_choose(m, x->prof, p * v, p, pl, PG_BALANCE_ENUM_MAX, c->chunk_of, other, NULL, &bs)
                   : -1;
    if (rc < 0) {
        free(other);
        return -1;
    }
    if (rc != 0) {
        /* no split runs: still listed, with the min-max split's reason */
        free(other);
        c->split = "min-max";
        if (pg_balance_chunks(m, x->prof, p * v, c->chunk_of) != 0)
            return -1;
        evaluate(x, c);
        return 0;
    }
    if (bs.considered)
        c->split = bs.taken_inside ? "inside" : "blocks";
    evaluate(x, c);
    if (bs.has_other) { /* the other kind too: memory may admit only it */
        if (!(c = add_cand(x, sch, v, pl, p, bs.taken_inside ? "blocks" : "inside"))) {
            free(other);
            return -1;
        }
        memcpy(c->chunk_of, other, (size_t)x->ncompute * sizeof *c->chunk_of);
        evaluate(x, c);
    }
    free(other);
    if (!(c = add_cand(x, sch, v, pl, p, "min-max")))
        return -1;
    if (pg_balance_chunks(m, x->prof, p * v, c->chunk_of) != 0)
        return -1;
    for (int i = bal; i < x->a->n - 1; i++)
        if (same_split(c->chunk_of, x->a->cand[i].chunk_of, x->ncompute)) {
            free(c->chunk_of);
            x->a->n--;
            return 0;
        }
    evaluate(x, c);
    return 0;
}

static int enumerate(auto_ctx *x)
{
    ir_model *m = x->m;
    ir_train *t = &m->train;
    int nmb = (int)t->microbatches;
    if (m->balanced) {
        int p = t->stages;
        static const ir_schedule one[] = { SCHED_1F1B, SCHED_ZB1, SCHED_GPIPE };
        for (size_t k = 0; k < sizeof one / sizeof one[0]; k++)
            if (try_kind(x, one[k], 1, PLACE_LOOP, p, NULL) != 0)
                return -1;
        if (2 * p <= x->ncompute && try_kind(x, SCHED_ZBV, 2, PLACE_V, p, NULL) != 0)
            return -1;
        for (int v = 2; v <= AUTO_MAX_V && p * v <= x->ncompute && p * v <= 64; v++)
            if ((p == 1 || nmb % p == 0) && try_kind(x, SCHED_INTERLEAVED, v, PLACE_LOOP, p, NULL) != 0)
                return -1;
        return 0;
    }
    int p = m->nstages, v = m->nchunks / m->nstages;
    int *yours = malloc((size_t)(x->ncompute + 1) * sizeof *yours);
    if (!yours)
        return -1;
    current_split(m, yours);
    int rc = 0;
    if (v == 1) {
        static const ir_schedule one[] = { SCHED_1F1B, SCHED_ZB1, SCHED_GPIPE };
        for (size_t k = 0; k < sizeof one / sizeof one[0] && !rc; k++)
            rc = try_kind(x, one[k], 1, PLACE_LOOP, p, yours);
    } else {
        if (v == 2)
            rc = try_kind(x, SCHED_ZBV, 2, PLACE_V, p, yours);
        if (!rc && (p == 1 || nmb % p == 0))
            rc = try_kind(x, SCHED_INTERLEAVED, v, PLACE_LOOP, p, yours);
        if (!rc)
            rc = try_kind(x, SCHED_GPIPE, v, PLACE_LOOP, p, yours);
    }
    free(yours);
    return rc;
}

/* b better than a: faster, then a smaller arena (the earlier on full ties) */
static int better(const pg_auto_cand *b, const pg_auto_cand *a)
{
    if (b->step < a->step * (1 - 1e-12))
        return 1;
    if (b->step > a->step * (1 + 1e-12))
        return 0;
    return b->arena_max < a->arena_max;
}

int pg_auto_resolve(ir_model *m, const pg_profile *prof, pg_auto *a, pg_diag *d)
{
    memset(a, 0, sizeof *a);
    a->chosen = a->rival = -1;
    a->memory = m->train.memory;
    auto_ctx x = { m, prof, a, 0 };
    for (int i = 0; i < m->nlayers; i++)
        x.ncompute += is_compute(&m->layers[i]);
    pg_loc at = m->train.memory_loc.line > 0 ? m->train.memory_loc : m->train.schedule_loc;
    if (enumerate(&x) != 0) {
        pg_error(d, at, "out of memory choosing the schedule");
        return -1;
    }
    /* the fastest fitting of those that keep repeat instances whole and of those that cut one */
    int smallest = -1, whole = -1, cut = -1;
    for (int i = 0; i < a->n; i++) {
        const pg_auto_cand *c = &a->cand[i];
        if (!c->ok)
            continue;
        if (smallest < 0 || c->arena_max < a->cand[smallest].arena_max)
            smallest = i;
        int *best = c->cuts ? &cut : &whole;
        if (c->fits && (*best < 0 || better(c, &a->cand[*best])))
            *best = i;
    }
    a->margin = m->train.block_margin;
    a->chosen = whole;
    a->rival = cut;
    if (cut >= 0 && (whole < 0 || a->cand[cut].step < a->cand[whole].step * (1 - a->margin))) {
        a->chosen = cut;
        a->rival = whole;
        a->blocks = whole < 0 ? PG_BLOCKS_MEMORY : PG_BLOCKS_GAIN;
    } else if (cut >= 0 && a->cand[cut].step < a->cand[whole].step) {
        a->blocks = PG_BLOCKS_WITHIN_MARGIN;
    }
    if (!m->balanced) /* the model's own splits: nothing chosen about blocks */
        a->blocks = PG_BLOCKS_NONE_FASTER;
    char b1[48], b2[48], nm[48];
    if (smallest < 0) {
        pg_error(d, m->train.schedule_loc, "schedule = auto: none of the %d candidate schedules can run this model "
                 "(%s: %s)", a->n, a->n ? cand_name(&a->cand[0], nm, sizeof nm) : "-",
                 a->n ? a->cand[0].refused : "none");
        return -1;
    }
    if (a->chosen < 0) {
        const pg_auto_cand *c = &a->cand[smallest];
        fmt_bytes(a->memory, b1, sizeof b1);
        fmt_bytes(c->arena_max, b2, sizeof b2);
        if (!strcmp(b1, b2)) { /* rounded alike ("120 KiB" and "120 KiB"): the bytes tell them apart */
            snprintf(b1, sizeof b1, "%" PRId64 " bytes", a->memory);
            snprintf(b2, sizeof b2, "%" PRId64 " bytes", c->arena_max);
        }
        pg_error(d, at, "no schedule fits memory = %s per stage: the smallest achievable is %s per stage (%s, %s "
                 "split, on %d stages)", b1, b2, cand_name(c, nm, sizeof nm), c->split, c->nstages);
        pg_note(d, at, "raise memory to at least %" PRId64 " bytes, or use more stages, a smaller batch or more "
                "micro-batches (pipegen plan lists every candidate with its arena per stage)", c->arena_max);
        return -1;
    }
    const pg_auto_cand *c = &a->cand[a->chosen];
    set_schedule(m, c);
    pg_model_repartition(m, c->nchunks, c->nstages, c->placement, c->chunk_of);
    m->train.auto_chosen = 1;
    return 0;
}

/* The table's unit for arenas: KiB, MiB or GiB by the largest of them. */
static int table_shift(const pg_auto *a)
{
    int64_t top = 0;
    for (int i = 0; i < a->n; i++)
        if (a->cand[i].ok && a->cand[i].arena_max > top)
            top = a->cand[i].arena_max;
    return top >= (int64_t)10 << 30 ? 30 : top >= (int64_t)10 << 20 ? 20 : 10;
}

static void stage_list(const pg_auto_cand *c, int shift, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = 0;
    for (int st = 0; st < c->nstages && st < 64 && o < n; st++)
        o += (size_t)snprintf(buf + o, n - o, "%s%.1f", st ? "/" : "", (double)c->arena[st] / (double)(1LL << shift));
}

/* The end of the `chosen:` line: how block_margin weighed whole blocks against a cut one. */
static void blocks_note(const pg_auto *a, FILE *out)
{
    const pg_auto_cand *c = &a->cand[a->chosen], *r = a->rival >= 0 ? &a->cand[a->rival] : NULL;
    char nm[48];
    switch (a->blocks) {
    case PG_BLOCKS_WITHIN_MARGIN:
        fprintf(out, " and keeps blocks whole: the fastest that cuts one (%s, %s split) would gain %.3g%%, not "
                "more than block_margin %g%%\n", cand_name(r, nm, sizeof nm), r->split,
                100.0 * (1.0 - r->step / c->step), 100.0 * a->margin);
        break;
    case PG_BLOCKS_GAIN:
        fprintf(out, ", inside a block: %.3g%% faster than the fastest of whole blocks (%s, %s split), more than "
                "block_margin %g%%\n", 100.0 * (1.0 - c->step / r->step), cand_name(r, nm, sizeof nm), r->split,
                100.0 * a->margin);
        break;
    case PG_BLOCKS_MEMORY:
        fprintf(out, ", inside a block: no split of whole blocks fits\n");
        break;
    default:
        fputc('\n', out);
        break;
    }
}

void pg_auto_report(const pg_auto *a, FILE *out)
{
    char b[48], nm[48], list[700], step[48], head[48];
    int shift = table_shift(a);
    fprintf(out, "schedule = auto, memory = %s per stage: %d candidate%s, step predicted by %s\n",
            fmt_bytes(a->memory, b, sizeof b), a->n, a->n == 1 ? "" : "s",
            a->seconds ? "measured layer times (s)" : "the cost model (estimated flops)");
    snprintf(head, sizeof head, "arena per stage (%s)", shift == 30 ? "GiB" : shift == 20 ? "MiB" : "KiB");
    fprintf(out, "  %-18s %-9s %-9s %6s  %-28s %14s %7s  %s\n", "schedule", "placement", "split", "stages", head,
            "step", "bubble", "fits");
    for (int i = 0; i < a->n; i++) {
        const pg_auto_cand *c = &a->cand[i];
        cand_name(c, nm, sizeof nm);
        if (!c->ok) {
            fprintf(out, "  %-18s %-9s %-9s %6d  refused: %s\n", nm, pg_placement_name(c->placement), c->split,
                    c->nstages, c->refused);
            continue;
        }
        stage_list(c, shift, list, sizeof list);
        pg_fmt_si(step, sizeof step, c->step, pg_cost_unit(a->seconds));
        fprintf(out, "  %-18s %-9s %-9s %6d  %-28s %14s %6.1f%%  %s%s\n", nm, pg_placement_name(c->placement),
                c->split, c->nstages, list, step, 100.0 * c->bubble, c->fits ? "yes" : "no",
                i == a->chosen ? "  <- chosen" : "");
    }
    pg_auto_chosen_report(a, out);
}

void pg_auto_chosen_report(const pg_auto *a, FILE *out)
{
    char b[48], nm[48];
    if (a->chosen >= 0) {
        const pg_auto_cand *c = &a->cand[a->chosen];
        fprintf(out, "chosen: %s (%s placement, %s split): the fastest whose every stage fits %s",
                cand_name(c, nm, sizeof nm), pg_placement_name(c->placement), c->split,
                fmt_bytes(a->memory, b, sizeof b));
        blocks_note(a, out);
    } else {
        fprintf(out, "chosen: none: no candidate fits %s on every stage\n", fmt_bytes(a->memory, b, sizeof b));
    }
}

static void json_text(FILE *o, const char *s)
{
    fputc('"', o);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', o);
        if ((unsigned char)*s < 0x20)
            fprintf(o, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, o);
    }
    fputc('"', o);
}

char *pg_auto_json(const pg_auto *a)
{
    char *text = NULL, nm[48];
    size_t len = 0;
    FILE *o = open_memstream(&text, &len);
    if (!o)
        return NULL;
    fprintf(o, "{\"memory\": %" PRId64 ", \"unit\": \"%s\", \"chosen\": %d, \"candidates\": [", a->memory,
            a->seconds ? "s" : "flop", a->chosen);
    for (int i = 0; i < a->n; i++) {
        const pg_auto_cand *c = &a->cand[i];
        fprintf(o, "%s\n    {\"schedule\": \"%s\", \"placement\": \"%s\", \"split\": \"%s\", \"stages\": %d, "
                   "\"chunks\": %d, ", i ? "," : "", cand_name(c, nm, sizeof nm), pg_placement_name(c->placement),
                c->split, c->nstages, c->nchunks);
        if (!c->ok) {
            fprintf(o, "\"refused\": ");
            json_text(o, c->refused);
            fprintf(o, "}");
            continue;
        }
        fprintf(o, "\"arena_bytes\": [");
        for (int st = 0; st < c->nstages && st < 64; st++)
            fprintf(o, "%s%" PRId64, st ? ", " : "", c->arena[st]);
        fprintf(o, "], \"step\": %.17g, \"bubble\": %.17g, \"fits\": %s}", c->step, c->bubble,
                c->fits ? "true" : "false");
    }
    fprintf(o, "\n  ]}");
    if (fclose(o) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

void pg_auto_free(pg_auto *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->cand[i].chunk_of);
    free(a->cand);
    memset(a, 0, sizeof *a);
    a->chosen = -1;
}

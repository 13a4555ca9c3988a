/* tests/unit/test_schedule.c — built-in schedules, communication, slots, the
 * verifier, CSV and the predictor, on models built by hand (no parser); the
 * memory planner's guard gaps.
 * Run from the repository root (tests/schedule.t does). */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gen/memplan.h"
#include "schedule/schedule.h"
#include "schedule/sched_sim.h"
#include "tap.h"

/* The one ir.h function the schedule code uses, so this test links without
 * the checker. */
int64_t pg_shape_numel(const pg_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dim[i];
    return n;
}

/* ---- hand-made models ----------------------------------------------------- */

typedef struct fixture {
    ir_model m;
    ir_layer layers[2 * 64];  /* two per chunk: layer 2c and 2c+1 */
    ir_skip skips[8];
    ir_param params[8];
} fixture;

static void fx_init(fixture *f, int p, int v, int nmb, ir_schedule sch)
{
    memset(f, 0, sizeof *f);
    f->m.name = "t";
    f->m.source_path = "t.pipe";
    f->m.nstages = p;
    f->m.nchunks = p * v;
    f->m.train.microbatches = nmb;
    f->m.train.batch = 4 * nmb;
    f->m.train.schedule = sch;
    f->m.train.interleave = v;
    f->m.nlayers = 2 * p * v;
    f->m.placement = sch == SCHED_ZBV ? PLACE_V : PLACE_LOOP;
    f->m.layers = f->layers;
    f->m.skips = f->skips;
    f->m.params = f->params;
    for (int i = 0; i < f->m.nlayers; i++) {
        ir_layer *l = &f->layers[i];
        l->kind = LK_RELU;
        l->chunk = i / 2;
        l->stage = pg_placement_stage(f->m.placement, l->chunk, f->m.nchunks, p);
        l->in.rank = l->out.rank = 1;
        l->in.dim[0] = l->out.dim[0] = 8;
        l->skip = -1;
    }
}

static void fx_skip(fixture *f, int stash_chunk, int pop_chunk)
{
    ir_skip *k = &f->skips[f->m.nskips++];
    k->name = "res";
    k->stash_layer = 2 * stash_chunk;
    k->pop_layer = 2 * pop_chunk + 1;
    k->shape.rank = 1;
    k->shape.dim[0] = 8;
}

static void fx_param(fixture *f, uint64_t mask, ir_tie_mode tie)
{
    ir_param *p = &f->params[f->m.nparams++];
    p->name = "wte";
    p->shape.rank = 2;
    p->shape.dim[0] = p->shape.dim[1] = 4;
    p->stage_mask = mask;
    p->tie = tie;
    int s = 0;
    while (!(mask >> s & 1))
        s++;
    p->owner_stage = s;
    for (int st = 0; st < 64; st++) /* the first layer of each of its stages uses it */
        for (int i = 0; (mask >> st & 1) && i < f->m.nlayers; i++)
            if (f->layers[i].stage == st) {
                f->layers[i].param[f->layers[i].nparam++] = f->m.nparams - 1;
                break;
            }
}

/* Diagnostics into a string. */
typedef struct capture {
    char *text;
    size_t len;
    FILE *f;
    pg_diag d;
} capture;

static void cap_open(capture *c)
{
    c->text = NULL;
    c->len = 0;
    c->f = open_memstream(&c->text, &c->len);
    pg_diag_init(&c->d, c->f, NULL);
}

static const char *cap_text(capture *c)
{
    fflush(c->f);
    return c->text ? c->text : "";
}

static void cap_close(capture *c)
{
    fclose(c->f);
    free(c->text);
}

static void cap_reset(capture *c)
{
    cap_close(c);
    cap_open(c);
}

/* The first line of a diagnostic, for test names. */
static const char *line1(const char *text)
{
    static char buf[512];
    size_t n = strcspn(text, "\n");
    snprintf(buf, sizeof buf, "%.*s", (int)(n < 500 ? n : 500), text);
    return buf;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static int count_kind(const pg_stage_sched *st, pg_act_kind k)
{
    int n = 0;
    for (int i = 0; i < st->n; i++)
        n += st->act[i].kind == k;
    return n;
}

/* ---- the built-ins over a grid ---------------------------------------------- */

static int expected_slots(ir_schedule sch, int p, int s, int nmb)
{
    if (p == 1)
        return 1;
    if (sch == SCHED_GPIPE)
        return nmb;
    return p - s < nmb ? p - s : nmb;
}

/* zb1 defers W (which frees a micro-batch's activations) on later stages, so
 * they may hold more than their 1f1b count, but never more than 1f1b's peak
 * (stage 0's, min(p, m)), and stage 0 holds exactly its 1f1b count. */
static int slots_ok(ir_schedule sch, int p, int s, int nmb, int got)
{
    if (sch != SCHED_ZB1 || p == 1)
        return got == expected_slots(sch, p, s, nmb);
    int peak = expected_slots(SCHED_1F1B, p, 0, nmb);
    return s == 0 ? got == peak : got >= 1 && got <= peak;
}

static void test_grid(ir_schedule sch, const char *name, int v)
{
    int bad_verify = 0, bad_slots = 0, runs = 0;
    char first[512] = "";
    for (int p = 1; p <= 8; p++)
        for (int nmb = 1; nmb <= 32; nmb++) {
            if (sch == SCHED_INTERLEAVED && p > 1 && nmb % p)
                continue;
            fixture f;
            fx_init(&f, p, v, nmb, sch);
            pg_schedule s;
            capture c;
            cap_open(&c);
            runs++;
            if (pg_schedule_build(&f.m, &s, &c.d) != 0) {
                if (!bad_verify++)
                    snprintf(first, sizeof first, "p=%d m=%d: %s", p, nmb, cap_text(&c));
                cap_close(&c);
                continue;
            }
            cap_close(&c);
            /* zbv: a stage's two chunks together hold at most 1f1b's peak, min(p, m)
             * whole stages (2 chunk activations each) */
            for (int st = 0; sch == SCHED_ZBV && st < p; st++) {
                int held = s.stage[st].nslots_per_chunk[0] + s.stage[st].nslots_per_chunk[1];
                int peak = 2 * (p < nmb ? p : nmb);
                if (held > peak && !bad_slots++)
                    snprintf(first, sizeof first, "p=%d m=%d stage %d: %d + %d slots, more than %d", p, nmb, st,
                             s.stage[st].nslots_per_chunk[0], s.stage[st].nslots_per_chunk[1], peak);
            }
            if (v == 1)
                for (int st = 0; st < p; st++)
                    if (!slots_ok(sch, p, st, nmb, s.stage[st].nslots_per_chunk[0])) {
                        if (!bad_slots++)
                            snprintf(first, sizeof first, "p=%d m=%d stage %d: %d slots, want %d", p, nmb, st,
                                     s.stage[st].nslots_per_chunk[0], expected_slots(sch, p, st, nmb));
                    }
            pg_schedule_free(&s);
        }
    OK(bad_verify == 0, "%s passes the verifier for 1..8 stages x 1..32 micro-batches (%d runs) %s", name, runs,
       bad_verify ? first : "");
    if (v == 1)
        OK(bad_slots == 0, "%s needs the stated activation slots per stage %s", name, bad_slots ? first : "");
    if (sch == SCHED_ZBV)
        OK(bad_slots == 0, "%s holds at most 1f1b's peak activations on every stage %s", name, bad_slots ? first : "");
}

static void test_orders(void)
{
    fixture f;
    pg_schedule s;
    capture c;
    cap_open(&c);
    fx_init(&f, 4, 1, 6, SCHED_1F1B);
    int rc = pg_schedule_builtin(&f.m, &s, &c.d);
    OK(rc == 0, "1f1b builds");
    if (rc == 0) {
        /* stage 1: 2 warm-up forwards, then F B W, then cool-down */
        static const char *want = "F0 F1 F2 B0 W0 F3 B1 W1 F4 B2 W2 F5 B3 W3 B4 W4 B5 W5 ";
        char got[256] = "";
        for (int i = 0; i < s.stage[1].n; i++) {
            const pg_act *a = &s.stage[1].act[i];
            char t[16];
            snprintf(t, sizeof t, "%c%d ", "FBW"[a->kind], a->mb);
            strcat(got, t);
        }
        OK(strcmp(got, want) == 0, "1f1b stage 1 of 4, 6 micro-batches: %s", got);
        pg_schedule_free(&s);
    }
    fx_init(&f, 3, 1, 4, SCHED_GPIPE);
    rc = pg_schedule_builtin(&f.m, &s, &c.d);
    if (rc == 0) {
        static const char *want = "F0 F1 F2 F3 B0 W0 B1 W1 B2 W2 B3 W3 ";
        char got[256] = "";
        for (int i = 0; i < s.stage[2].n; i++) {
            char t[16];
            snprintf(t, sizeof t, "%c%d ", "FBW"[s.stage[2].act[i].kind], s.stage[2].act[i].mb);
            strcat(got, t);
        }
        OK(strcmp(got, want) == 0, "gpipe runs backward in increasing micro-batch order: %s", got);
        pg_schedule_free(&s);
    } else {
        OK(0, "gpipe builds");
    }
    fx_init(&f, 3, 1, 4, SCHED_INTERLEAVED);
    f.m.nchunks = 6;
    f.m.train.interleave = 2;
    rc = pg_schedule_builtin(&f.m, &s, &c.d);
    OK(rc != 0 && strstr(cap_text(&c), "multiple of the stage count"),
       "interleaved refuses a micro-batch count that is not a multiple of the stages: %s", line1(cap_text(&c)));
    if (rc == 0)
        pg_schedule_free(&s);
    /* ZB-H1 as in the paper's figure: 1F1B's F/B order, W where the stage
     * would wait, later stages deferring more W to the cool-down */
    fx_init(&f, 4, 1, 8, SCHED_ZB1);
    cap_reset(&c);
    rc = pg_schedule_builtin(&f.m, &s, &c.d);
    OK(rc == 0, "zb1 builds %s", line1(cap_text(&c)));
    if (rc == 0) {
        static const char *want[4] = {
            "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7 ",
            "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7 ",
            "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7 ",
            "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7 ",
        };
        for (int st = 0; st < 4; st++) {
            char got[512] = "";
            for (int i = 0; i < s.stage[st].n; i++) {
                char t[16];
                snprintf(t, sizeof t, "%c%d ", "FBW"[s.stage[st].act[i].kind], s.stage[st].act[i].mb);
                strcat(got, t);
            }
            OK(strcmp(got, want[st]) == 0, "zb1 stage %d of 4, 8 micro-batches: %s", st, got);
        }
        pg_schedule_free(&s);
    }
    fx_init(&f, 3, 2, 6, SCHED_ZB1);
    cap_reset(&c);
    rc = pg_schedule_builtin(&f.m, &s, &c.d);
    OK(rc != 0 && strstr(cap_text(&c), "runs one chunk per stage"), "zb1 refuses two chunks per stage: %s",
       line1(cap_text(&c)));
    if (rc == 0)
        pg_schedule_free(&s);
    cap_close(&c);
}

/* The compute order of one stage as "F0.1 B0.1 W0.1 ..." (kind, mb.chunk). */
static const char *order_of(const pg_stage_sched *st, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < st->n && o < n; i++) {
        const pg_act *a = &st->act[i];
        if (a->kind == PG_FWD || a->kind == PG_BWD_B || a->kind == PG_BWD_W)
            o += (size_t)snprintf(buf + o, n - o, "%s%c%d.%d", o ? " " : "", "FBW"[a->kind], a->mb, a->chunk);
    }
    return buf;
}

static void test_zbv(void)
{
    fixture f;
    pg_schedule s;
    capture c;
    char got[1024];
    cap_open(&c);
    fx_init(&f, 2, 2, 4, SCHED_ZBV);
    int rc = pg_schedule_builtin(&f.m, &s, &c.d);
    OK(rc == 0, "zbv builds on 2 stages %s", line1(cap_text(&c)));
    if (rc == 0) {
        OK(s.placement == PLACE_V && s.chunk_stage[0] == 0 && s.chunk_stage[1] == 1 && s.chunk_stage[2] == 1 &&
           s.chunk_stage[3] == 0, "zbv places chunks 0 and 3 on stage 0, 1 and 2 on stage 1");
        /* each chunk holds at most p = 2 micro-batches; stage 0 makes room for
         * micro-batch 2 with W, the rest of the Ws fill the end */
        static const char *want[2] = {
            "F0.0 F1.0 F0.3 B0.3 F1.3 B1.3 B0.0 W0.0 B1.0 W1.0 W0.3 F2.0 W1.3 F3.0 F2.3 B2.3 F3.3 B3.3 B2.0 W2.0 "
            "B3.0 W3.0 W2.3 W3.3",
            "F0.1 F0.2 F1.1 F1.2 B0.2 B0.1 B1.2 B1.1 W0.1 W1.1 W0.2 W1.2 F2.1 F2.2 F3.1 F3.2 B2.2 B2.1 B3.2 B3.1 "
            "W2.1 W3.1 W2.2 W3.2",
        };
        for (int st = 0; st < 2; st++)
            OK(strcmp(order_of(&s.stage[st], got, sizeof got), want[st]) == 0, "zbv stage %d of 2, 4 micro-batches: %s",
               st, got);
        pg_schedule_free(&s);
    }
    /* a bubble below zb1's at the same activation memory */
    for (int p = 2; p <= 8; p *= 2) {
        int m = 4 * p;
        pg_sched_costs uc;
        pg_sched_prediction pz, pv;
        memset(&uc, 0, sizeof uc);
        for (int i = 0; i < 64; i++)
            uc.fwd[i] = uc.bwd_b[i] = uc.bwd_w[i] = 1.0;
        fixture fz, fv;
        pg_schedule sz, sv;
        fx_init(&fz, p, 1, m, SCHED_ZB1);
        fx_init(&fv, p, 2, m, SCHED_ZBV);
        cap_reset(&c);
        int ok = pg_schedule_build(&fz.m, &sz, &c.d) == 0;
        if (ok && pg_schedule_build(&fv.m, &sv, &c.d) != 0) {
            pg_schedule_free(&sz);
            ok = 0;
        }
        if (!ok) {
            OK(0, "zb1 and zbv build on %d stages: %s", p, line1(cap_text(&c)));
            continue;
        }
        /* a zbv chunk is half a zb1 stage: its costs are halves */
        pg_sched_costs hc = uc;
        for (int i = 0; i < 64; i++)
            hc.fwd[i] = hc.bwd_b[i] = hc.bwd_w[i] = 0.5;
        ok = pg_schedule_predict(&fz.m, &sz, &uc, &pz) == 0 && pg_schedule_predict(&fv.m, &sv, &hc, &pv) == 0;
        double bz = 0, bv = 0;
        for (int st = 0; st < p; st++)
            bz += pz.bubble[st] / p, bv += pv.bubble[st] / p;
        OK(ok && bv < bz, "zbv on %d stages, %d micro-batches: bubble %.1f%% below zb1's %.1f%%", p, m, 100 * bv,
           100 * bz);
        pg_schedule_free(&sz);
        pg_schedule_free(&sv);
    }
    /* placement = v under gpipe: fill-drain over a stage's two chunks in V placement */
    int bad = 0, runs = 0;
    char first[512] = "";
    for (int p = 1; p <= 6; p++)
        for (int nmb = 1; nmb <= 12; nmb++) {
            fx_init(&f, p, 2, nmb, SCHED_ZBV);
            f.m.train.schedule = SCHED_GPIPE;
            cap_reset(&c);
            runs++;
            if (pg_schedule_build(&f.m, &s, &c.d) != 0) {
                if (!bad++)
                    snprintf(first, sizeof first, "p=%d m=%d: %s", p, nmb, line1(cap_text(&c)));
                continue;
            }
            if (s.placement != PLACE_V && !bad++)
                snprintf(first, sizeof first, "p=%d m=%d: placement %d", p, nmb, (int)s.placement);
            pg_schedule_free(&s);
        }
    OK(bad == 0, "gpipe in V placement verifies for 1..6 stages x 1..12 micro-batches (%d runs) %s", runs, first);
    fx_init(&f, 2, 1, 4, SCHED_ZBV);
    cap_reset(&c);
    rc = pg_schedule_builtin(&f.m, &s, &c.d);
    OK(rc != 0 && strstr(cap_text(&c), "two chunks per stage in V placement"),
       "zbv refuses one chunk per stage: %s", line1(cap_text(&c)));
    if (rc == 0)
        pg_schedule_free(&s);
    cap_close(&c);
}

/* ---- communication ------------------------------------------------------------ */

/* Every stage's per-micro-batch sends to a peer, in list order, name the
 * messages that peer's receives from it name, in its list order. */
static int sends_in_receive_order(const pg_schedule *s)
{
    for (int a = 0; a < s->nstages; a++)
        for (int b = 0; b < s->nstages; b++) {
            const pg_stage_sched *sa = &s->stage[a], *sb = &s->stage[b];
            int i = 0, j = 0;
            for (;;) {
                while (i < sa->n && !(sa->act[i].peer == b && (sa->act[i].kind == PG_SEND_ACT ||
                       sa->act[i].kind == PG_SEND_GRAD || sa->act[i].kind == PG_SEND_SKIP ||
                       sa->act[i].kind == PG_SEND_SKIP_GRAD)))
                    i++;
                while (j < sb->n && !(sb->act[j].peer == a && (sb->act[j].kind == PG_RECV_ACT ||
                       sb->act[j].kind == PG_RECV_GRAD || sb->act[j].kind == PG_RECV_SKIP ||
                       sb->act[j].kind == PG_RECV_SKIP_GRAD)))
                    j++;
                if (i == sa->n || j == sb->n) {
                    if (i != sa->n || j != sb->n)
                        return 0;
                    break;
                }
                const pg_act *x = &sa->act[i++], *y = &sb->act[j++];
                if (x->mb != y->mb || x->kind + 1 != y->kind || x->skip != y->skip)
                    return 0;
            }
        }
    return 1;
}

/* A send reads its micro-batch's buffers in the chunk's slot: no other
 * micro-batch's FWD takes that slot between the FWD and the send. Returns the
 * number of sends that would read another micro-batch's data. */
static int sends_read_overwritten_slots(const pg_schedule *s)
{
    int bad = 0;
    for (int st = 0; st < s->nstages; st++) {
        const pg_stage_sched *ss = &s->stage[st];
        for (int i = 0; i < ss->n; i++) {
            const pg_act *a = &ss->act[i];
            if (a->kind != PG_SEND_ACT && a->kind != PG_SEND_GRAD && a->kind != PG_SEND_SKIP &&
                a->kind != PG_SEND_SKIP_GRAD)
                continue;
            int f = -1;
            for (int j = 0; j < i && f < 0; j++)
                if (ss->act[j].kind == PG_FWD && ss->act[j].chunk == a->chunk && ss->act[j].mb == a->mb)
                    f = j;
            for (int j = f + 1; f >= 0 && j < i; j++)
                if (ss->act[j].kind == PG_FWD && ss->act[j].chunk == a->chunk && ss->act[j].slot == ss->act[f].slot)
                    bad++;
        }
    }
    return bad;
}

static void test_comms(void)
{
    fixture f;
    pg_schedule s;
    capture c;
    cap_open(&c);
    fx_init(&f, 1, 1, 4, SCHED_1F1B);
    int rc = pg_schedule_build(&f.m, &s, &c.d);
    OK(rc == 0 && s.stage[0].n == 14 && count_kind(&s.stage[0], PG_VERDICT) == 1 &&
       count_kind(&s.stage[0], PG_OPT_STEP) == 1, "one stage: 12 compute actions, VERDICT and OPT_STEP, no messages");
    if (rc == 0)
        pg_schedule_free(&s);

    fx_init(&f, 3, 1, 5, SCHED_1F1B);
    rc = pg_schedule_build(&f.m, &s, &c.d);
    OK(rc == 0, "1f1b on 3 stages builds %s", line1(cap_text(&c)));
    if (rc == 0) {
        OK(count_kind(&s.stage[0], PG_RECV_ACT) == 0 && count_kind(&s.stage[0], PG_SEND_ACT) == 5 &&
           count_kind(&s.stage[0], PG_RECV_GRAD) == 5 && count_kind(&s.stage[0], PG_SEND_GRAD) == 0,
           "first stage sends activations and receives gradients");
        OK(count_kind(&s.stage[2], PG_RECV_ACT) == 5 && count_kind(&s.stage[2], PG_SEND_ACT) == 0 &&
           count_kind(&s.stage[2], PG_SEND_GRAD) == 5 && count_kind(&s.stage[2], PG_RECV_GRAD) == 0,
           "last stage receives activations and sends gradients");
        const pg_act *a = &s.stage[1].act[0];
        OK(a->kind == PG_RECV_ACT && a->peer == 0 && a->chunk == 1 && s.stage[1].act[1].kind == PG_FWD &&
           s.stage[1].act[2].kind == PG_SEND_ACT && s.stage[1].act[2].peer == 2,
           "RECV_ACT right before FWD, SEND_ACT right after");
        char buf[128];
        OK(strcmp(pg_act_str(a, buf, sizeof buf), "RECV_ACT(mb 0, chunk 1) from stage 0") == 0,
           "pg_act_str: %s", buf);
        pg_schedule_free(&s);
    }

    /* a skip from chunk 0 to chunk 3 goes straight from stage 0 to stage 3 */
    fx_init(&f, 4, 1, 6, SCHED_1F1B);
    fx_skip(&f, 0, 3);
    fx_skip(&f, 1, 2);
    fx_skip(&f, 2, 2);                /* within one chunk: no messages */
    fx_param(&f, 0x9, TIE_TRANSMIT);  /* stages 0 and 3 */
    fx_param(&f, 0xe, TIE_REPLICATE); /* stages 1, 2, 3 */
    f.m.train.grad_clip = 1.0;
    rc = pg_schedule_build(&f.m, &s, &c.d);
    OK(rc == 0, "skips, ties and grad clipping verify %s", line1(cap_text(&c)));
    if (rc == 0) {
        OK(count_kind(&s.stage[0], PG_SEND_SKIP) == 6 && count_kind(&s.stage[3], PG_RECV_SKIP) == 6 &&
           count_kind(&s.stage[1], PG_RECV_SKIP) == 0 && count_kind(&s.stage[2], PG_RECV_SKIP) == 6 &&
           count_kind(&s.stage[3], PG_SEND_SKIP_GRAD) == 6 && count_kind(&s.stage[0], PG_RECV_SKIP_GRAD) == 6,
           "skips travel straight between stash and pop stage, no relay");
        OK(s.stage[0].act[0].kind == PG_TIE_SEND && s.stage[0].act[0].peer == 3 &&
           s.stage[3].act[0].kind == PG_TIE_RECV && count_kind(&s.stage[3], PG_TIE_GRAD_SEND) == 2 &&
           count_kind(&s.stage[0], PG_TIE_GRAD_RECV) == 1, "transmit: value out at the start, grads back at the end");
        OK(count_kind(&s.stage[1], PG_TIE_GRAD_RECV) == 2 && count_kind(&s.stage[1], PG_TIE_SUM_SEND) == 2 &&
           count_kind(&s.stage[2], PG_TIE_SUM_RECV) == 1 && count_kind(&s.stage[3], PG_TIE_SUM_RECV) == 1 &&
           count_kind(&s.stage[0], PG_TIE_SUM_SEND) == 0, "replicate: the owner adds its users' gradients and sends the sum back");
        int ok = 1;
        for (int st = 0; st < 4; st++) {
            int n = s.stage[st].n;
            ok &= s.stage[st].act[n - 1].kind == PG_OPT_STEP && s.stage[st].act[n - 2].kind == PG_GRAD_NORM &&
                  count_kind(&s.stage[st], PG_VERDICT) == 1 && count_kind(&s.stage[st], PG_VERDICT_SEND) == 3 &&
                  count_kind(&s.stage[st], PG_VERDICT_RECV) == 3;
        }
        OK(ok, "a VERDICT, a VERDICT_SEND to and a VERDICT_RECV from each other stage, GRAD_NORM, then OPT_STEP end every stage");
        /* a user's gradient goes as soon as it is final: right after its last
         * W of the chunk that uses it (and its messages to the owner) */
        const pg_stage_sched *u = &s.stage[3];
        int lastw = -1, send = -1, first_end = -1;
        for (int i = 0; i < u->n; i++) {
            if (u->act[i].kind == PG_BWD_W)
                lastw = i;
            if (u->act[i].kind == PG_TIE_GRAD_SEND && u->act[i].param == 1 && send < 0)
                send = i;
            if (u->act[i].kind == PG_VERDICT && first_end < 0)
                first_end = i;
        }
        OK(send >= 0 && send < first_end && send > lastw - 3, "a user's tie gradient leaves after its last W, before "
           "its VERDICT (action %d, last W %d, VERDICT %d)", send, lastw, first_end);
        pg_schedule_free(&s);
    }
    static const ir_schedule kinds[] = { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB1, SCHED_ZBV };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        ir_schedule sch = kinds[k];
        fx_init(&f, 4, sch == SCHED_INTERLEAVED || sch == SCHED_ZBV ? 2 : 1, 8, sch);
        fx_skip(&f, 0, f.m.nchunks - 1);
        fx_param(&f, 0x9, TIE_TRANSMIT);
        fx_param(&f, 0x6, TIE_REPLICATE);
        f.m.train.grad_clip = 0.5;
        rc = pg_schedule_build(&f.m, &s, &c.d);
        OK(rc == 0, "schedule %d with a long skip and ties verifies %s", sch, line1(cap_text(&c)));
        if (rc == 0)
            pg_schedule_free(&s);
    }
    /* skips stashed in one round and popped in a later round on another stage:
     * their messages share a stream with activations the peer takes first */
    static const struct { int p, stash, pop; ir_schedule sch; } far[] = {
        { 2, 0, 3, SCHED_INTERLEAVED }, { 3, 0, 4, SCHED_INTERLEAVED }, { 3, 1, 5, SCHED_INTERLEAVED },
        { 2, 0, 2, SCHED_ZBV },         { 3, 0, 4, SCHED_ZBV },         { 3, 1, 3, SCHED_ZBV },
        { 4, 0, 6, SCHED_ZBV },         { 4, 2, 7, SCHED_INTERLEAVED },
    };
    for (size_t k = 0; k < sizeof far / sizeof far[0]; k++)
        for (int nmb = far[k].p; nmb <= 4 * far[k].p; nmb += far[k].p) {
            fx_init(&f, far[k].p, 2, nmb, far[k].sch);
            fx_skip(&f, far[k].stash, far[k].pop);
            fx_skip(&f, 0, 2 * far[k].p - 1);
            cap_reset(&c);
            rc = pg_schedule_build(&f.m, &s, &c.d);
            int in_order = 1;
            if (rc == 0) {
                in_order = sends_in_receive_order(&s) && sends_read_overwritten_slots(&s) == 0;
                pg_schedule_free(&s);
            }
            if (nmb == far[k].p || rc != 0)
                OK(rc == 0 && in_order, "%s on %d stages, a skip from chunk %d to chunk %d, %d micro-batches: "
                   "builds, verifies, sends in receive order from live slots %s", far[k].sch == SCHED_ZBV ? "zbv" : "interleaved(2)", far[k].p,
                   far[k].stash, far[k].pop, nmb, line1(cap_text(&c)));
        }
    cap_close(&c);
}

/* ---- the verifier rejects ---------------------------------------------------------- */

static int find(const pg_stage_sched *st, pg_act_kind k, int mb)
{
    for (int i = 0; i < st->n; i++)
        if (st->act[i].kind == k && st->act[i].mb == mb)
            return i;
    return -1;
}

static void test_verify_rejects(void)
{
    fixture f;
    pg_schedule s;
    capture c;
    char *text;

    /* a send nobody receives */
    fx_init(&f, 2, 1, 2, SCHED_1F1B);
    cap_open(&c);
    if (pg_schedule_build(&f.m, &s, &c.d) == 0) {
        pg_stage_sched *st0 = &s.stage[0];
        pg_act extra = st0->act[find(st0, PG_SEND_ACT, 1)];
        st0->act[st0->n - 1] = extra; /* replaces OPT_STEP ... */
        pg_act opt = { PG_OPT_STEP, -1, -1, -1, -1, -1, -1, 0, -1 };
        st0->n < st0->cap ? (void)(st0->act[st0->n++] = opt) : (void)0;
        int rc = pg_schedule_verify(&f.m, &s, &c.d);
        text = (char *)cap_text(&c);
        OK(rc != 0 && strstr(text, "t.pipe: error: stage 0 action 13 SEND_ACT(mb 1, chunk 0) to stage 1 is never received"),
           "an unmatched send is rejected, named: %s", line1(text));
        pg_schedule_free(&s);
    }
    cap_close(&c);

    /* a receive that meets the wrong message */
    fx_init(&f, 2, 1, 2, SCHED_1F1B);
    fx_skip(&f, 0, 1);
    cap_open(&c);
    if (pg_schedule_build(&f.m, &s, &c.d) == 0) {
        pg_stage_sched *st1 = &s.stage[1];
        int r = find(st1, PG_RECV_ACT, 0), k = find(st1, PG_RECV_SKIP, 0);
        pg_act t = st1->act[r];
        st1->act[r] = st1->act[k];
        st1->act[k] = t;
        int rc = pg_schedule_verify(&f.m, &s, &c.d);
        text = (char *)cap_text(&c);
        OK(rc != 0 && strstr(text, "error: stage 1 action 0 RECV_SKIP(skip 0, mb 0, chunk 1) from stage 0 receives "
                                   "SEND_ACT(mb 0, chunk 0) of stage 0 action 1"),
           "a mismatched receive names both actions: %s", line1(text));
        pg_schedule_free(&s);
    }
    cap_close(&c);

    /* a forward before its input */
    fx_init(&f, 2, 1, 2, SCHED_1F1B);
    cap_open(&c);
    if (pg_schedule_build(&f.m, &s, &c.d) == 0) {
        pg_stage_sched *st1 = &s.stage[1];
        int r = find(st1, PG_RECV_ACT, 0);
        pg_act t = st1->act[r];
        st1->act[r] = st1->act[r + 1];
        st1->act[r + 1] = t;
        int rc = pg_schedule_verify(&f.m, &s, &c.d);
        text = (char *)cap_text(&c);
        OK(rc != 0 && strstr(text, "stage 1 action 0 FWD(mb 0, chunk 1) comes before its input "
                                   "(RECV_ACT(mb 0, chunk 1) from stage 0)"),
           "a forward before its input is rejected: %s", line1(text));
        pg_schedule_free(&s);
    }
    cap_close(&c);

    /* weight gradients out of index order */
    fx_init(&f, 1, 1, 2, SCHED_1F1B);
    cap_open(&c);
    if (pg_schedule_build(&f.m, &s, &c.d) == 0) {
        pg_stage_sched *st0 = &s.stage[0];
        /* F0 B0 W0 F1 B1 W1 -> F0 B0 F1 B1 W1 W0 */
        pg_act w0 = st0->act[2];
        memmove(&st0->act[2], &st0->act[3], 3 * sizeof w0);
        st0->act[5] = w0;
        int rc = pg_schedule_verify(&f.m, &s, &c.d);
        text = (char *)cap_text(&c);
        OK(rc != 0 && strstr(text, "increasing micro-batch order"), "W out of micro-batch order is rejected: %s", line1(text));
        pg_schedule_free(&s);
    }
    cap_close(&c);
}

/* ---- the step's end: what the verifier requires ------------------------------------------ */

/* Index of the first action of kind k (peer -1: any) in st, -1 when none. */
static int find_end(const pg_stage_sched *st, pg_act_kind k, int peer)
{
    for (int i = 0; i < st->n; i++)
        if (st->act[i].kind == k && (peer < 0 || st->act[i].peer == peer))
            return i;
    return -1;
}

static void drop_act(pg_stage_sched *st, int i)
{
    memmove(&st->act[i], &st->act[i + 1], (size_t)(st->n - i - 1) * sizeof st->act[0]);
    st->n--;
}

/* Move action i to just before action j (j < i). */
static void move_before(pg_stage_sched *st, int i, int j)
{
    pg_act a = st->act[i];
    memmove(&st->act[j + 1], &st->act[j], (size_t)(i - j) * sizeof a);
    st->act[j] = a;
}

/* One broken step's end (mutation m of a 4-stage 1f1b with a tie replicated
 * over stages 1 and 2 and grad clipping): the verifier's first error. */
static const char *step_end_error(int m, capture *c)
{
    static char out[1024];
    fixture f;
    pg_schedule s;
    fx_init(&f, 4, 1, 8, SCHED_1F1B);
    fx_param(&f, 0x6, TIE_REPLICATE);
    f.m.train.grad_clip = 1.0;
    cap_reset(c);
    if (pg_schedule_build(&f.m, &s, &c->d) != 0)
        return "(did not build)";
    pg_stage_sched *s0 = &s.stage[0], *s1 = &s.stage[1], *s2 = &s.stage[2];
    int i, j;
    switch (m) {
    case 0: /* the user's gradient before its last W */
        i = find_end(s2, PG_TIE_GRAD_SEND, -1);
        for (j = i; s2->act[j].kind != PG_BWD_W; j--)
            ;
        move_before(s2, i, j);
        break;
    case 1: /* the owner's verdict before it added the user's gradient */
        move_before(s1, find_end(s1, PG_VERDICT, -1), find_end(s1, PG_TIE_GRAD_RECV, -1));
        break;
    case 2: /* a verdict sent before it is made */
        move_before(s0, find_end(s0, PG_VERDICT_SEND, 3), find_end(s0, PG_VERDICT, -1));
        break;
    case 3: /* the summed gradient never received */
        drop_act(s2, find_end(s2, PG_TIE_SUM_RECV, -1));
        break;
    case 4: /* one verdict never sent, nor received */
        drop_act(s0, find_end(s0, PG_VERDICT_SEND, 3));
        drop_act(&s.stage[3], find_end(&s.stage[3], PG_VERDICT_RECV, 0));
        break;
    case 5: /* no clip though grad_clip is set */
        drop_act(s0, find_end(s0, PG_GRAD_NORM, -1));
        break;
    case 6: /* two verdicts */
        s0->act[find_end(s0, PG_GRAD_NORM, -1)].kind = PG_VERDICT;
        break;
    case 7: /* the sum received into the gradient before it was sent */
        move_before(s2, find_end(s2, PG_TIE_SUM_RECV, -1), find_end(s2, PG_TIE_GRAD_SEND, -1));
        break;
    default: /* the owner never sends the sum */
        drop_act(s1, find_end(s1, PG_TIE_SUM_SEND, -1));
        break;
    }
    int rc = pg_schedule_verify(&f.m, &s, &c->d);
    snprintf(out, sizeof out, "%s", rc ? cap_text(c) : "(accepted)");
    pg_schedule_free(&s);
    return out;
}

static void test_verify_step_end(void)
{
    capture c;
    cap_open(&c);
    static const char *const want[] = {
        "stage 2 action 55 TIE_GRAD_SEND(param 0) to stage 1 comes before its weight gradient pass that writes the "
        "tied gradient (BWD_W(mb 7, chunk 2))",
        "stage 1 action 57 TIE_GRAD_RECV(param 0) from stage 2 comes after the stage's VERDICT, whose sums of squares "
        "need it",
        "stage 0 action 40 VERDICT_SEND to stage 3 comes before its verdict (the gradients it sends are final there) "
        "(VERDICT)",
        "stage 2 action 64 GRAD_NORM comes before its summed tie gradient (TIE_SUM_RECV(param 0) from stage 1)",
        "stage 0 needs exactly one VERDICT_SEND to stage 3, it has 0",
        "stage 0 action 47 OPT_STEP comes before its clip (grad_clip is set) (GRAD_NORM)",
        "stage 0 action 47 VERDICT is a duplicate",
        "stage 2 action 56 TIE_SUM_RECV(param 0) from stage 1 comes before its own gradient's send (the sum "
        "overwrites it) (TIE_GRAD_SEND(param 0) to stage 1)",
        "stage 1 needs exactly one TIE_SUM_SEND(param 0) to stage 2 (wte is tied by replicate), it has 0",
    };
    static const char *const what[] = {
        "a user's tie gradient sent before its last W", "the owner's VERDICT before it added a user's gradient",
        "a VERDICT_SEND before the VERDICT", "a user's summed tie gradient never received", "a missing verdict message",
        "OPT_STEP without GRAD_NORM though grad_clip is set", "two VERDICTs",
        "a summed tie gradient received before the user sent its own", "a tie sum the owner never sends",
    };
    for (int m = 0; m < 9; m++) {
        const char *e = step_end_error(m, &c);
        OK(strstr(e, want[m]) != NULL, "the step's end: %s is rejected: %s", what[m], line1(e));
        if (m == 4)
            OK(strstr(e, "stage 3 action 46 GRAD_NORM comes before its peers' verdicts (VERDICT_RECV from stage 0)") != NULL,
               "...and the stage that never gets it names it: %s", e);
    }
    cap_close(&c);
}

/* ---- CSV -------------------------------------------------------------------------------- */

static const char *csv_error_of(fixture *f, const char *path, const char *text, capture *c)
{
    pg_schedule s;
    write_file(path, text);
    cap_reset(c);
    if (pg_schedule_read_csv(path, &f->m, &s, &c->d) == 0) {
        pg_schedule_free(&s);
        return "(accepted)";
    }
    return cap_text(c);
}

static void test_csv(const char *dir)
{
    fixture f;
    capture c;
    char path[512];
    const char *e;
    snprintf(path, sizeof path, "%s/s.csv", dir);
    fx_init(&f, 2, 1, 2, SCHED_FILE);
    cap_open(&c);

    /* each expected message is the whole first line, located */
    struct {
        const char *csv, *want, *name;
    } cases[] = {
        { "stage,action,mb,chunk\n0,FWD,0,0\n0,FWF,1,0\n", ":3:3: error: unknown action `FWF`; did you mean `FWD`?\n",
          "unknown action" },
        { "stage,action,mb,chunk\n2,FWD,0,0\n", ":2:1: error: stage 2 out of range (the model has 2 stages)\n",
          "stage out of range" },
        { "stage,action,mb,chunk\n0,FWD,0,4\n", ":2:9: error: chunk 4 out of range (the model has 2 chunks)\n",
          "chunk out of range" },
        { "stage,action,mb,chunk\n0,FWD,0,1\n", ":2:9: error: chunk 1 runs on stage 1, not stage 0\n",
          "chunk not on the stage" },
        { "stage,action,mb,chunk\n0,FWD,5,0\n", ":2:7: error: micro-batch 5 out of range (0 to 1)\n",
          "micro-batch out of range" },
        { "stage,action,mb,chunk\n0,FWD,0,0\n0,FWD,0,0\n", ":3:3: error: duplicate FWD(mb 0, chunk 0); first at line 2\n",
          "duplicate action" },
        { "stage,action,mb\n", ":1:1: error: expected the header `stage,action,mb,chunk` or "
                               "`stage,action,mb,chunk,peer,skip,param`\n", "bad header" },
        { "stage,action,mb,chunk\n0,FWD,x,0\n", ":2:7: error: expected an integer for mb, found `x`\n", "not a number" },
        { "stage,action,mb,chunk\n0,FWD,0\n", ":2:1: error: expected 4 fields as in the header, found 3\n",
          "too few fields" },
        { "stage,action,mb,chunk\n0,SEND_ACT,0,0\n", ":2:3: error: action SEND_ACT needs the columns peer,skip,param",
          "comm action in a compute-only file" },
        { "# compute only\nstage,action,mb,chunk\n0,FWD,0,0\n", ": error: stage 0 has no BWD_B(mb 0, chunk 0)\n",
          "missing action" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char want[512];
        snprintf(want, sizeof want, "%s%s", path, cases[i].want);
        e = csv_error_of(&f, path, cases[i].csv, &c);
        OK(strncmp(e, want, strlen(want)) == 0, "CSV: %s is located: %s", cases[i].name, line1(e));
    }
    OK(strstr(csv_error_of(&f, path, "stage,action,mb,chunk\n0,FWF,1,0\n", &c), "0,FWF,1,0\n  ^\n") != NULL,
       "CSV errors quote the line with a caret");

    /* round trip: write the full 1f1b schedule, read it back, same actions */
    fixture g;
    fx_init(&g, 3, 1, 4, SCHED_1F1B);
    fx_skip(&g, 0, 2);
    pg_schedule s, t;
    if (pg_schedule_build(&g.m, &s, &c.d) == 0) {
        FILE *out = fopen(path, "w");
        pg_schedule_write_csv(&s, out);
        fclose(out);
        int rc = pg_schedule_read_csv(path, &g.m, &t, &c.d);
        int same = rc == 0;
        for (int st = 0; same && st < 3; st++) {
            same &= s.stage[st].n == t.stage[st].n;
            for (int i = 0; same && i < s.stage[st].n; i++) {
                const pg_act *a = &s.stage[st].act[i], *b = &t.stage[st].act[i];
                same &= a->kind == b->kind && a->mb == b->mb && a->chunk == b->chunk && a->peer == b->peer &&
                        a->skip == b->skip && a->param == b->param;
            }
        }
        OK(same, "CSV: a written schedule reads back identically");
        OK(rc == 0 && pg_schedule_verify(&g.m, &t, &c.d) == 0, "CSV: the full schedule read back verifies");
        if (rc == 0)
            pg_schedule_free(&t);
        pg_schedule_free(&s);
    } else {
        OK(0, "1f1b with a skip builds: %s", line1(cap_text(&c)));
    }

    /* a compute-only CSV gets its communication inserted by pg_schedule_build */
    char sched[1024] = "stage,action,mb,chunk\n";
    for (int mb = 0; mb < 2; mb++) {
        char l[256];
        snprintf(l, sizeof l, "0,FWD,%d,0\n1,FWD,%d,1\n1,BWD_B,%d,1\n1,BWD_W,%d,1\n0,BWD_B,%d,0\n0,BWD_W,%d,0\n", mb,
                 mb, mb, mb, mb, mb);
        strcat(sched, l);
    }
    write_file(path, sched);
    f.m.train.schedule_file = path;
    cap_reset(&c);
    pg_schedule s2;
    int rc = pg_schedule_build(&f.m, &s2, &c.d);
    OK(rc == 0 && count_kind(&s2.stage[1], PG_RECV_ACT) == 2 && s2.stage[1].act[1].line == 3,
       "CSV: compute-only file gets its messages and keeps its line numbers %s", line1(cap_text(&c)));
    if (rc == 0)
        pg_schedule_free(&s2);
    cap_close(&c);
}

/* A schedule that hangs: stage 0 waits for the gradient before it sends the
 * activation. The whole diagnostic is golden. */
static void test_hang_golden(void)
{
    const char *csv = "tests/golden/schedule/hang.csv", *golden = "tests/golden/schedule/hang.err";
    fixture f;
    capture c;
    fx_init(&f, 2, 1, 1, SCHED_FILE);
    f.m.train.schedule_file = csv;
    cap_open(&c);
    pg_schedule s;
    int rc = pg_schedule_build(&f.m, &s, &c.d);
    if (rc == 0)
        pg_schedule_free(&s);
    const char *want = read_file(golden);
    const char *got = cap_text(&c);
    if (getenv("PG_UPDATE_GOLDEN"))
        write_file(golden, got);
    OK(rc != 0 && want && strcmp(got, want) == 0, "a hanging CSV schedule is rejected naming the cycle (%s)",
       golden);
    if (!want || strcmp(got, want))
        printf("# got:\n%s", got);

    /* a three-stage cycle */
    fx_init(&f, 3, 1, 1, SCHED_1F1B);
    if (pg_schedule_build(&f.m, &s, &c.d) == 0) {
        /* stage 0 waits for the gradient before sending the activation */
        pg_stage_sched *st0 = &s.stage[0];
        int snd = find(st0, PG_SEND_ACT, 0), rcv = find(st0, PG_RECV_GRAD, 0);
        pg_act t = st0->act[snd];
        memmove(&st0->act[snd], &st0->act[snd + 1], (size_t)(rcv - snd) * sizeof t);
        st0->act[rcv] = t;
        cap_reset(&c);
        rc = pg_schedule_verify(&f.m, &s, &c.d);
        got = cap_text(&c);
        OK(rc != 0 && strstr(got, "deadlocks: stage 0 waits at action 1 RECV_GRAD(mb 0, chunk 0) from stage 1, "
                                  "stage 1 waits at action 0 RECV_ACT(mb 0, chunk 1) from stage 0: a cycle") &&
               strstr(got, "note: stage 2 waits at action 0 RECV_ACT(mb 0, chunk 2) from stage 1, behind"),
           "a deadlock names its cycle and the stages behind it: %s", line1(got));
        pg_schedule_free(&s);
    }
    cap_close(&c);
}

/* ---- prediction --------------------------------------------------------------------------- */

static void test_predict(void)
{
    pg_sched_costs cost;
    memset(&cost, 0, sizeof cost);
    /* F = B = W = 1 with W's cost counted in B: the textbook setting */
    for (int i = 0; i < 64; i++) {
        cost.fwd[i] = 1.0;
        cost.bwd_b[i] = 2.0;
    }
    double worst = 0;
    int fails = 0;
    char first[256] = "";
    for (int p = 2; p <= 8; p++)
        for (int nmb = 1; nmb <= 32; nmb *= 2)
            for (int sch = SCHED_GPIPE; sch <= SCHED_1F1B; sch++) {
                fixture f;
                pg_schedule s;
                pg_sched_prediction pr;
                capture c;
                cap_open(&c);
                fx_init(&f, p, 1, nmb, (ir_schedule)sch);
                if (pg_schedule_build(&f.m, &s, &c.d) != 0 || pg_schedule_predict(&f.m, &s, &cost, &pr) != 0) {
                    fails++;
                    cap_close(&c);
                    continue;
                }
                double want = (double)(p - 1) / (nmb + p - 1);
                for (int st = 0; st < p; st++) {
                    double err = pr.bubble[st] - want;
                    err = err < 0 ? -err : err;
                    if (err > worst) {
                        worst = err;
                        snprintf(first, sizeof first, "p=%d m=%d sched %d stage %d: %.4f want %.4f", p, nmb, sch, st,
                                 pr.bubble[st], want);
                    }
                }
                pg_schedule_free(&s);
                cap_close(&c);
            }
    OK(fails == 0 && worst < 0.01, "gpipe and 1f1b bubble = (p-1)/(m+p-1) within 1%% (worst %.4f %s)", worst, first);

    /* ZB-H1 with F = B = W = 1: a third of 1f1b's bubble, (p-1)/(3m+p-1) on
     * every stage (the paper's formula, which assumes m >= p) */
    {
        pg_sched_costs unit;
        memset(&unit, 0, sizeof unit);
        for (int i = 0; i < 64; i++)
            unit.fwd[i] = unit.bwd_b[i] = unit.bwd_w[i] = 1.0;
        static const int ps[] = { 2, 4, 8 }, ms[] = { 8, 16, 32 };
        double worst_zb = 0, worst_ratio = 0;
        int zfails = 0, slots_worse = 0;
        char zfirst[256] = "";
        for (int ip = 0; ip < 3; ip++)
            for (int im = 0; im < 3; im++) {
                int p = ps[ip], nmb = ms[im];
                fixture f;
                pg_schedule s, s1;
                pg_sched_prediction pr;
                capture c;
                cap_open(&c);
                fx_init(&f, p, 1, nmb, SCHED_ZB1);
                if (pg_schedule_build(&f.m, &s, &c.d) != 0 || pg_schedule_predict(&f.m, &s, &unit, &pr) != 0) {
                    zfails++;
                    cap_close(&c);
                    continue;
                }
                fx_init(&f, p, 1, nmb, SCHED_1F1B);
                if (pg_schedule_build(&f.m, &s1, &c.d) == 0) {
                    int peak1 = 0, peakz = 0;
                    for (int st = 0; st < p; st++) {
                        if (s1.stage[st].nslots_per_chunk[0] > peak1)
                            peak1 = s1.stage[st].nslots_per_chunk[0];
                        if (s.stage[st].nslots_per_chunk[0] > peakz)
                            peakz = s.stage[st].nslots_per_chunk[0];
                    }
                    slots_worse += peakz > peak1 ||
                                   s.stage[0].nslots_per_chunk[0] != s1.stage[0].nslots_per_chunk[0];
                    pg_schedule_free(&s1);
                } else {
                    zfails++;
                }
                double want = (double)(p - 1) / (3 * nmb + p - 1);
                double b1f1b = (double)(p - 1) / (nmb + p - 1);
                for (int st = 0; st < p; st++) {
                    double err = pr.bubble[st] - want;
                    err = err < 0 ? -err : err;
                    /* the ratio (m+p-1)/(3m+p-1) tends to 1/3 as m grows past p */
                    double ratio = pr.bubble[st] / b1f1b;
                    if (ratio > worst_ratio && nmb >= 4 * p)
                        worst_ratio = ratio;
                    if (ratio >= 0.5)
                        worst_ratio = 1;
                    if (err > worst_zb) {
                        worst_zb = err;
                        snprintf(zfirst, sizeof zfirst, "p=%d m=%d stage %d: %.4f want %.4f", p, nmb, st,
                                 pr.bubble[st], want);
                    }
                }
                pg_schedule_free(&s);
                cap_close(&c);
            }
        OK(zfails == 0 && worst_zb < 0.01, "zb1 bubble = (p-1)/(3m+p-1) within 1%% for p in {2,4,8}, m in {8,16,32} "
           "(worst %.4f %s)", worst_zb, zfirst);
        OK(zfails == 0 && worst_ratio < 0.39, "zb1 bubble is under half of 1f1b's, about a third when m >= 4p "
           "(worst ratio there %.3f)", worst_ratio);
        OK(zfails == 0 && slots_worse == 0, "zb1 needs no more activation slots than 1f1b's peak, stage 0 the same");
    }

    /* with W a pass of its own, interleaved beats 1f1b; messages cost time */
    for (int i = 0; i < 64; i++)
        cost.fwd[i] = cost.bwd_b[i] = cost.bwd_w[i] = 1.0;
    double b[4] = { 0 };
    for (int sch = SCHED_GPIPE; sch <= SCHED_INTERLEAVED; sch++) {
        fixture f;
        pg_schedule s;
        pg_sched_prediction pr;
        capture c;
        cap_open(&c);
        fx_init(&f, 4, sch == SCHED_INTERLEAVED ? 2 : 1, 8, (ir_schedule)sch);
        if (pg_schedule_build(&f.m, &s, &c.d) == 0) {
            if (pg_schedule_predict(&f.m, &s, &cost, &pr) == 0)
                b[sch] = pr.bubble[0];
            pg_schedule_free(&s);
        }
        cap_close(&c);
    }
    OK(b[SCHED_INTERLEAVED] > 0 && b[SCHED_INTERLEAVED] < b[SCHED_1F1B] - 0.05, "interleaved(2) bubble %.3f < 1f1b %.3f",
       b[SCHED_INTERLEAVED], b[SCHED_1F1B]);

    fixture f;
    pg_schedule s;
    pg_sched_prediction p0, p1;
    capture c;
    cap_open(&c);
    fx_init(&f, 2, 1, 2, SCHED_1F1B);
    if (pg_schedule_build(&f.m, &s, &c.d) == 0) {
        pg_schedule_predict(&f.m, &s, &cost, &p0);
        cost.send_latency = 0.5;
        pg_schedule_predict(&f.m, &s, &cost, &p1);
        OK(p0.step_time == 8.0 && p1.step_time == 9.5, "2 stages, 2 micro-batches: step 8, with 0.5 s latency 9.5 "
           "(two hops on the path, and stage 0's verdict to stage 1 after its last W) (got %g, %g)", p0.step_time,
           p1.step_time);
        /* the stages' own time outside F/B/W: OPT_STEP after the last pass,
         * time before the first and after the last action; stage 1 steps
         * once stage 0's verdict is in (stage 0 finishes its backward last) */
        pg_sched_costs own = cost;
        own.send_latency = 0;
        for (int st = 0; st < 2; st++) {
            own.opt[st] = 0.5;
            own.step_start[st] = 0.25;
            own.step_end[st] = 0.125;
        }
        pg_schedule_predict(&f.m, &s, &own, &p1);
        OK(p1.step_time == 8.875 && p1.busy[0] == 6.0, "...with OPT_STEP 0.5, 0.25 before and 0.125 after the actions: "
           "8.875, busy unchanged (got %g, %g)", p1.step_time, p1.busy[0]);
        /* a SEND keeps its sender busy: at most each of the 4 sends on the path */
        own = cost;
        own.send_latency = 0;
        own.send_cost_latency = 0.25;
        pg_schedule_predict(&f.m, &s, &own, &p1);
        OK(p1.step_time > 8.0 && p1.step_time <= 9.0, "...with 0.25 per send charged to its sender: in (8, 9] (got %g)",
           p1.step_time);
        pg_schedule_free(&s);
    }
    cap_close(&c);
}

/* ---- the memory planner with guard bytes ------------------------------------ */

/* The same buffers planned packed and with 128 guard bytes: every offset is
 * PG_MP_ALIGN (256) aligned; with guards no two buffers live at once come
 * closer than 128 bytes, the first starts at the guard rounded up to the
 * alignment and the arena ends 128 bytes or more after every buffer; disjoint
 * lifetimes may still share bytes. Packed: the first buffer at 0. */
static void test_memplan_guard(void)
{
    static const struct { int64_t bytes; int first, last; } in[] = {
        {1000, PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP}, {4096, 0, 3}, {4096, 4, 7}, {12, 2, 5},
        {300, PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP}, {64, 6, 6}, {4, 1, 1},
    };
    int n = (int)(sizeof in / sizeof in[0]);
    for (int guard = 0; guard <= 128; guard += 128) {
        pg_memplan p;
        memset(&p, 0, sizeof p);
        p.guard = guard;
        for (int i = 0; i < n; i++)
            pg_mp_add(&p, "b", MP_ACTIVATIONS, in[i].bytes, in[i].first, in[i].last);
        pg_mp_solve(&p);
        int bad = 0, shared = 0;
        int64_t lo = INT64_MAX;
        for (int i = 0; i < n; i++) {
            const pg_mp_buf *a = &p.buf[i];
            lo = a->offset < lo ? a->offset : lo;
            bad |= a->offset % PG_MP_ALIGN != 0 || a->offset + a->bytes + guard > p.total;
            for (int j = 0; j < n; j++) {
                const pg_mp_buf *b = &p.buf[j];
                int whole = a->first_use == PG_MP_WHOLE_STEP || b->first_use == PG_MP_WHOLE_STEP;
                int live = whole || (a->first_use <= b->last_use && b->first_use <= a->last_use);
                int near = a->offset < b->offset + b->bytes + guard && b->offset < a->offset + a->bytes + guard;
                if (i != j && live && near)
                    bad = 1;
                if (i != j && !live && a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes)
                    shared = 1;
            }
        }
        int64_t first = (guard + PG_MP_ALIGN - 1) / PG_MP_ALIGN * PG_MP_ALIGN;
        OK(!bad && lo == first && shared && PG_MP_ALIGN == 256,
           "memplan, guard %d: offsets 256-aligned, live buffers %d bytes apart or more, the first at %" PRId64
           ", disjoint lifetimes share bytes, arena %" PRId64, guard, guard, lo, p.total);
        pg_mp_free(&p);
    }
}

/* Random lifetimes, few (greedy by size) and many (the linear scan): the
 * checker passes the solved plan, sharing brings the arena below the sum of
 * the buffers, and a plan with two live buffers moved onto each other is
 * refused naming both. */
static void test_memplan_check(void)
{
    for (int round = 0; round < 2; round++) {
        int n = round ? PG_MP_GREEDY_MAX + 500 : 300;
        for (int guard = 0; guard <= 64; guard += 64) {
            pg_memplan p;
            memset(&p, 0, sizeof p);
            p.guard = guard;
            uint64_t x = 12345;
            int64_t sum = 0;
            char name[32];
            for (int i = 0; i < n; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                int first = (int)((x >> 33) % 5000), len = (int)((x >> 20) % 200);
                int64_t bytes = 1 + (int64_t)((x >> 8) % 100000);
                snprintf(name, sizeof name, "t%d", i);
                if (i % 97 == 0)
                    pg_mp_add(&p, name, MP_PARAMS, bytes, PG_MP_WHOLE_STEP, PG_MP_WHOLE_STEP);
                else
                    pg_mp_add(&p, name, MP_ACTIVATIONS, bytes, first, first + len);
                sum += (bytes + guard + 255) / 256 * 256;
            }
            pg_mp_solve(&p);
            char err[600] = "";
            int rc = pg_mp_check(&p, err, sizeof err);
            OK(rc == 0 && p.total < sum / 2, "memplan check, %d buffers, guard %d: the plan passes (%s), arena %" PRId64
               " of %" PRId64 " unshared", n, guard, rc ? err : "ok", p.total, sum);
            /* two buffers alive at once (t1 and the first whole-step one) put at one offset */
            p.buf[1].offset = p.buf[0].offset;
            rc = pg_mp_check(&p, err, sizeof err);
            OK(rc != 0 && strstr(err, "'t0'") && strstr(err, "'t1'") && strstr(err, "alive at once"),
               "memplan check, %d buffers, guard %d: two live buffers on each other are refused: %s", n, guard, err);
            /* two timed buffers alive at once, one moved to just inside the other's guard gap */
            pg_mp_solve(&p); /* undo the move above */
            int i = 1, j = -1;
            for (int k = 2; k < n && j < 0; k++)
                if (k % 97 && p.buf[k].first_use <= p.buf[i].last_use && p.buf[i].first_use <= p.buf[k].last_use)
                    j = k;
            int64_t keep = p.buf[j].offset;
            p.buf[j].offset = p.buf[i].offset + (p.buf[i].bytes + guard) / 256 * 256;
            rc = j > 0 ? pg_mp_check(&p, err, sizeof err) : 0;
            p.buf[j].offset = keep;
            OK(rc != 0 && strstr(err, "alive at once"), "memplan check, %d buffers, guard %d: a timed buffer inside "
               "another's bytes or guard is refused: %s", n, guard, err);
            pg_mp_free(&p);
        }
    }
}

/* The waits for lent messages (sched_sim.h, lend_slot; runtime/core/step.c):
 * stage 0 lends A from slot 0 to stage 1, then runs a compute action of slot
 * 0, then sends C to stage 2; stage 1 receives D from stage 2 before A, and
 * stage 2 sends D only after C. Non-blocking sends finish; with A lent, stage
 * 0 waits for stage 1 to take A, which waits for D, which waits for C, which
 * comes after the wait: a hang that pipegen must see before it lends (then
 * the stages copy, gen_prepare.c's lend_ok). A lent A of another slot than
 * the compute's finishes; a compute of slot -1 waits for every lent message. */
static void test_lend_sim(void)
{
    pg_act s0[] = {{PG_SEND_ACT, 0, 0, 1, -1, -1, -1, 0, -1}, {PG_FWD, 1, 0, -1, -1, -1, 0, 0, -1},
                   {PG_SEND_SKIP, 0, 0, 2, 0, -1, -1, 0, -1}};
    pg_act s1[] = {{PG_RECV_SKIP, 0, 1, 2, 1, -1, -1, 0, -1}, {PG_RECV_ACT, 0, 1, 0, -1, -1, -1, 0, -1}};
    pg_act s2[] = {{PG_RECV_SKIP, 0, 2, 0, 0, -1, -1, 0, -1}, {PG_SEND_SKIP, 0, 2, 1, 1, -1, -1, 0, -1}};
    pg_stage_sched st[3] = {{.n = 3, .cap = 3, .act = s0}, {.n = 2, .cap = 2, .act = s1}, {.n = 2, .cap = 2, .act = s2}};
    pg_schedule s = {.nstages = 3, .nchunks = 3, .nmb = 2, .stage = st};
    int l0[3] = {0, 0, -1}, l1[2] = {-1, -1}, l2[2] = {-1, -1};
    int *ls[3] = {l0, l1, l2};
    pg_sim sim = {.s = &s};
    OK(pg_sim_run(&sim) == SIM_OK, "lent messages: the hand-made 3-stage schedule finishes with non-blocking sends");
    pg_sim_free(&sim);
    sim = (pg_sim){.s = &s, .lend_slot = ls};
    OK(pg_sim_run(&sim) == SIM_DEADLOCK && sim.pc[0] == 1 && sim.wait_for[0] == 1,
       "...with A lent from slot 0 it hangs: stage 0 waits at its compute of slot 0 for stage 1 (pc %d, waits for %d)",
       sim.pc[0], sim.wait_for[0]);
    pg_sim_free(&sim);
    l0[0] = 1;
    sim = (pg_sim){.s = &s, .lend_slot = ls};
    OK(pg_sim_run(&sim) == SIM_OK, "...lent from slot 1, the compute of slot 0 does not wait for it: it finishes");
    pg_sim_free(&sim);
    l0[1] = -1;
    sim = (pg_sim){.s = &s, .lend_slot = ls};
    OK(pg_sim_run(&sim) == SIM_DEADLOCK, "...a compute of slot -1 waits for every lent message: it hangs");
    pg_sim_free(&sim);
}

int main(int argc, char **argv)
{
    const char *tmp = argc > 1 ? argv[1] : "/tmp";
    test_grid(SCHED_GPIPE, "gpipe", 1);
    test_grid(SCHED_1F1B, "1f1b", 1);
    test_grid(SCHED_ZB1, "zb1", 1);
    test_grid(SCHED_INTERLEAVED, "interleaved(2)", 2);
    test_grid(SCHED_INTERLEAVED, "interleaved(3)", 3);
    test_grid(SCHED_GPIPE, "gpipe with 2 chunks per stage", 2);
    test_grid(SCHED_ZBV, "zbv", 2);
    test_zbv();
    test_orders();
    test_comms();
    test_verify_rejects();
    test_csv(tmp);
    test_hang_golden();
    test_verify_step_end();
    test_predict();
    test_lend_sim();
    test_memplan_guard();
    test_memplan_check();
    return DONE();
}

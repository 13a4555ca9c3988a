/* codegen/schedule/verify.c — pg_schedule_verify: a schedule is accepted only when
 *  1. every action is well-formed (chunk on its stage, right peer, known skip
 *     and param, one OPT_STEP, last);
 *  2. each stage respects its own data dependencies: FWD(c, mb) after its input
 *     (RECV_ACT or the local FWD(c-1, mb)) and its popped skips, BWD_B after its
 *     FWD and its output gradient, BWD_W after BWD_B, sends after what they
 *     send, every (chunk, mb) forward, B and W exactly once, and W of a chunk
 *     in increasing micro-batch order (gradients accumulate in index order);
 *     the step's end: a tie's gradient sent or added only after the stage's
 *     last W of a chunk that uses it, one VERDICT after every W and tie sum
 *     of the stage and before its VERDICT_SENDs and TIE_SUM_SENDs, one
 *     VERDICT_SEND to and VERDICT_RECV from every other stage, every tie
 *     message a tied parameter needs, and GRAD_NORM and OPT_STEP only once
 *     every verdict and summed tie gradient is in;
 *  3. run together (sched_sim.c), every RECV meets the matching SEND, no stage
 *     waits forever (a deadlock is reported with its wait-for cycle), and no
 *     message is left unreceived.
 * A forward-only schedule (evaluation, pg_schedule_forward_only) holds only
 * forwards, their messages and transmitted ties' values: every (chunk, mb)
 * forward exactly once, after its inputs, and no step (no backward, no OPT_STEP).
 * Diagnostics point at the action's CSV line when it came from a file. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "schedule/sched_sim.h"

typedef struct verify_ctx {
    const ir_model *m;
    const pg_schedule *s;
    pg_diag *d;
    int errors;
} verify_ctx;

static void report(verify_ctx *v, int note, const pg_act *a, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void report(verify_ctx *v, int note, const pg_act *a, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pg_loc loc = pg_act_loc(v->m, v->s, a);
    if (note) {
        pg_note(v->d, loc, "%s", buf);
    } else {
        pg_error(v->d, loc, "%s", buf);
        v->errors++;
    }
}

/* The action without its " to stage N" / " from stage N" tail. */
static const char *act_core(const pg_act *a, char *buf, size_t n)
{
    pg_act b = *a;
    b.peer = -1;
    pg_act_str(&b, buf, n);
    char *t = strstr(buf, " to stage -1");
    if (!t)
        t = strstr(buf, " from stage -1");
    if (t)
        *t = 0;
    return buf;
}

/* ---- 1. well-formed actions --------------------------------------------------- */

static int stage_of(const verify_ctx *v, int chunk) { return pg_chunk_stage(v->s, chunk); }
static int stash_chunk(const verify_ctx *v, int k) { return pg_layer_chunk(v->m, v->m->skips[k].stash_layer); }
static int pop_chunk(const verify_ctx *v, int k) { return pg_layer_chunk(v->m, v->m->skips[k].pop_layer); }

static int tie_users(const ir_param *p)
{
    uint64_t mk = p->stage_mask;
    return p->tie != TIE_NONE && mk && (mk & (mk - 1));
}

static int lowest(uint64_t mask)
{
    int s = 0;
    while (s < 63 && !(mask >> s & 1))
        s++;
    return s;
}

static int is_tie_kind(pg_act_kind k) { return k >= PG_TIE_SEND && k <= PG_TIE_SUM_RECV; }

/* Checks the fields of action a at (st, i); 0 when fine, else reports once. */
static int check_fields(verify_ctx *v, int st, int i, const pg_act *a)
{
    const pg_schedule *s = v->s;
    char sa[160];
    int p = s->nstages, last = s->nchunks - 1;
    if ((unsigned)a->kind >= PG_STEP_KIND_COUNT) {
        report(v, 0, a, "stage %d action %d has an unknown kind %d", st, i, (int)a->kind);
        return -1;
    }
    pg_act_str(a, sa, sizeof sa);
    int per_mb = a->kind <= PG_RECV_SKIP_GRAD;
    if (per_mb) {
        if (a->chunk < 0 || a->chunk > last) {
            report(v, 0, a, "stage %d action %d %s: chunk %d out of range (0 to %d)", st, i, sa, a->chunk, last);
            return -1;
        }
        if (stage_of(v, a->chunk) != st) {
            report(v, 0, a, "stage %d action %d %s: chunk %d runs on stage %d", st, i, sa, a->chunk,
                   stage_of(v, a->chunk));
            return -1;
        }
        if (a->mb < 0 || a->mb >= s->nmb) {
            report(v, 0, a, "stage %d action %d %s: micro-batch %d out of range (0 to %d)", st, i, sa,
                   a->mb, s->nmb - 1);
            return -1;
        }
    }
    if (a->kind >= PG_SEND_ACT && a->kind != PG_VERDICT && a->kind != PG_GRAD_NORM && a->kind != PG_OPT_STEP) {
        if (a->peer < 0 || a->peer >= p || a->peer == st) {
            report(v, 0, a, "stage %d action %d %s: peer must be another stage (0 to %d)", st, i, sa, p - 1);
            return -1;
        }
    }
    if (a->kind >= PG_SEND_SKIP && a->kind <= PG_RECV_SKIP_GRAD &&
        (a->skip < 0 || a->skip >= v->m->nskips)) {
        report(v, 0, a, "stage %d action %d %s: no skip %d (the model has %d)", st, i, sa, a->skip,
               v->m->nskips);
        return -1;
    }
    int want_peer = -1, want_chunk = a->chunk;
    switch (a->kind) {
    case PG_SEND_ACT: want_peer = a->chunk < last ? stage_of(v, a->chunk + 1) : -1; break;
    case PG_RECV_ACT: want_peer = a->chunk > 0 ? stage_of(v, a->chunk - 1) : -1; break;
    case PG_SEND_GRAD: want_peer = a->chunk > 0 ? stage_of(v, a->chunk - 1) : -1; break;
    case PG_RECV_GRAD: want_peer = a->chunk < last ? stage_of(v, a->chunk + 1) : -1; break;
    case PG_SEND_SKIP: case PG_RECV_SKIP_GRAD:
        want_chunk = stash_chunk(v, a->skip);
        want_peer = stage_of(v, pop_chunk(v, a->skip));
        break;
    case PG_RECV_SKIP: case PG_SEND_SKIP_GRAD:
        want_chunk = pop_chunk(v, a->skip);
        want_peer = stage_of(v, stash_chunk(v, a->skip));
        break;
    default: want_peer = a->peer; break;
    }
    if (want_chunk != a->chunk) {
        report(v, 0, a, "stage %d action %d %s: skip %d belongs to chunk %d here", st, i, sa, a->skip, want_chunk);
        return -1;
    }
    if (want_peer != a->peer) {
        if (want_peer < 0)
            report(v, 0, a, "stage %d action %d %s: chunk %d has no neighbour there", st, i, sa, a->chunk);
        else
            report(v, 0, a, "stage %d action %d %s: the peer must be stage %d", st, i, sa, want_peer);
        return -1;
    }
    if (is_tie_kind(a->kind)) {
        if (a->param < 0 || a->param >= v->m->nparams || !tie_users(&v->m->params[a->param])) {
            report(v, 0, a, "stage %d action %d %s: param %d is not tied across stages", st, i, sa, a->param);
            return -1;
        }
        const ir_param *pr = &v->m->params[a->param];
        int owner = lowest(pr->stage_mask);
        /* the value travels only by transmit, the sum comes back only by replicate */
        ir_tie_mode want = a->kind == PG_TIE_SEND || a->kind == PG_TIE_RECV ? TIE_TRANSMIT
                           : a->kind == PG_TIE_SUM_SEND || a->kind == PG_TIE_SUM_RECV ? TIE_REPLICATE : pr->tie;
        if (pr->tie != want) {
            report(v, 0, a, "stage %d action %d %s: %s is tied by %s", st, i, sa, pr->name ? pr->name : "param",
                   pr->tie == TIE_REPLICATE ? "replicate" : "transmit");
            return -1;
        }
        if (!(pr->stage_mask >> st & 1)) {
            report(v, 0, a, "stage %d action %d %s: stage %d does not use %s", st, i, sa, st,
                   pr->name ? pr->name : "the param");
            return -1;
        }
        int owner_side = a->kind == PG_TIE_SEND || a->kind == PG_TIE_GRAD_RECV || a->kind == PG_TIE_SUM_SEND;
        if ((owner_side && (st != owner || !(pr->stage_mask >> a->peer & 1))) ||
            (!owner_side && (st == owner || a->peer != owner))) {
            report(v, 0, a, "stage %d action %d %s: the owner of %s is stage %d, its users stages with it", st,
                   i, sa, pr->name ? pr->name : "the param", owner);
            return -1;
        }
    }
    if (a->kind == PG_GRAD_NORM && !(v->m->train.grad_clip > 0)) {
        report(v, 0, a, "stage %d action %d %s: the model does not clip gradients (grad_clip)", st, i, sa);
        return -1;
    }
    return 0;
}

/* ---- 2. per-stage dependencies --------------------------------------------------- */

/* The step's end of one stage as check_stage walks it. */
typedef struct end_state {
    int verdict;               /* its VERDICT seen */
    int norm;                  /* GRAD_NORM seen */
    int vsend[PG_SCHED_MAX_STAGES], vrecv[PG_SCHED_MAX_STAGES]; /* VERDICT_SEND / _RECV per peer */
    int *tie;                  /* [TIE_KINDS x nparams x nstages]: tie actions per (kind, param, peer) */
    int wdone[PG_SCHED_MAX_CHUNKS]; /* BWD_W passes of each chunk so far */
} end_state;

enum { TIE_KINDS = PG_TIE_SUM_RECV - PG_TIE_SEND + 1 };

static int *tie_count(const verify_ctx *v, end_state *e, pg_act_kind k, int param, int peer)
{
    return &e->tie[((size_t)(k - PG_TIE_SEND) * (size_t)v->m->nparams + (size_t)param) * (size_t)v->s->nstages +
                   (size_t)peer];
}

/* The first BWD_W of stage st's chunks using parameter i still to come (want), or 0 when none. */
static int tie_w_missing(const verify_ctx *v, const end_state *e, int st, int i, pg_act *want)
{
    int mine[PG_SCHED_MAX_CHUNKS], n = pg_stage_chunks(v->s, st, mine);
    for (int j = 0; j < n; j++)
        if (pg_chunk_uses_param(v->m, mine[j], i) && e->wdone[mine[j]] < v->s->nmb) {
            *want = pg_act_make(PG_BWD_W, e->wdone[mine[j]], mine[j]);
            return 1;
        }
    return 0;
}

/* What GRAD_NORM or OPT_STEP needs first and has not had (want, and what it
 * is), NULL when all is in: the stage's VERDICT, every other stage's verdict,
 * every tie sum it is owed. */
static const char *step_end_missing(const verify_ctx *v, end_state *e, int st, pg_act *want)
{
    if (!e->verdict) {
        *want = pg_act_make(PG_VERDICT, -1, -1);
        return "verdict";
    }
    for (int o = 0; o < v->s->nstages; o++)
        if (o != st && !e->vrecv[o]) {
            *want = pg_act_make(PG_VERDICT_RECV, -1, -1);
            want->peer = o;
            return "peers' verdicts";
        }
    for (int i = 0; i < v->m->nparams; i++) {
        const ir_param *p = &v->m->params[i];
        int owner = lowest(p->stage_mask);
        if (tie_users(p) && p->tie == TIE_REPLICATE && (p->stage_mask >> st & 1) && st != owner &&
            !*tie_count(v, e, PG_TIE_SUM_RECV, i, owner)) {
            *want = pg_act_make(PG_TIE_SUM_RECV, -1, -1);
            want->param = i, want->peer = owner;
            return "summed tie gradient";
        }
    }
    return NULL;
}

/* After the walk: every message of the step's end, once; 0 or -1 (reported). */
static int check_end_counts(verify_ctx *v, end_state *e, int st)
{
    char sb[160];
    int P = v->s->nstages;
    for (int o = 0; o < P; o++) /* (a missing VERDICT stopped OPT_STEP already) */
        if (o != st && (e->vsend[o] != 1 || e->vrecv[o] != 1)) {
            pg_act want = pg_act_make(e->vsend[o] != 1 ? PG_VERDICT_SEND : PG_VERDICT_RECV, -1, -1);
            want.peer = o;
            report(v, 0, NULL, "stage %d needs exactly one %s, it has %d", st, pg_act_str(&want, sb, sizeof sb),
                   e->vsend[o] != 1 ? e->vsend[o] : e->vrecv[o]);
            return -1;
        }
    for (int i = 0; i < v->m->nparams; i++) {
        const ir_param *p = &v->m->params[i];
        int owner = lowest(p->stage_mask);
        if (!tie_users(p) || !(p->stage_mask >> st & 1))
            continue;
        for (int u = 0; u < P && u < 64; u++) {
            if (u == owner || !(p->stage_mask >> u & 1) || (st != owner && st != u))
                continue;
            /* between the owner and user u: the value (transmit), the gradient, the sum (replicate) */
            pg_act_kind need[2] = { st == owner ? PG_TIE_GRAD_RECV : PG_TIE_GRAD_SEND, PG_STEP_KIND_COUNT };
            if (p->tie == TIE_TRANSMIT)
                need[1] = st == owner ? PG_TIE_SEND : PG_TIE_RECV;
            else
                need[1] = st == owner ? PG_TIE_SUM_SEND : PG_TIE_SUM_RECV;
            for (int k = 0; k < 2; k++) {
                int peer = st == owner ? u : owner, have = *tie_count(v, e, need[k], i, peer);
                if (have != 1) {
                    pg_act want = pg_act_make(need[k], -1, -1);
                    want.param = i, want.peer = peer;
                    report(v, 0, NULL, "stage %d needs exactly one %s (%s is tied by %s), it has %d", st,
                           pg_act_str(&want, sb, sizeof sb), p->name ? p->name : "the param",
                           p->tie == TIE_REPLICATE ? "replicate" : "transmit", have);
                    return -1;
                }
            }
        }
    }
    return 0;
}

enum { F_FWD = 1, F_B = 2, F_W = 4, F_RACT = 8, F_RGRAD = 16 };
enum { K_RSKIP = 1, K_RSKIPGRAD = 2 };

static int check_stage(verify_ctx *v, int st, unsigned char *cm, unsigned char *km, int *lastw, end_state *e)
{
    const pg_schedule *s = v->s;
    const pg_stage_sched *ss = &s->stage[st];
    int nmb = s->nmb, last = s->nchunks - 1, nw_done = 0, nw_total = 0, nopt = 0, nnorm = 0;
    char sa[160], sb[160];
    memset(cm, 0, (size_t)s->nchunks * (size_t)nmb);
    if (v->m->nskips)
        memset(km, 0, (size_t)v->m->nskips * (size_t)nmb);
    int mine[PG_SCHED_MAX_CHUNKS], nmine = pg_stage_chunks(s, st, mine);
    for (int j = 0; j < nmine; j++) {
        lastw[mine[j]] = -1;
        nw_total += nmb;
    }
    int *ties = e->tie;
    memset(e, 0, sizeof *e);
    e->tie = ties;
    memset(e->tie, 0, (size_t)TIE_KINDS * (size_t)(v->m->nparams > 0 ? v->m->nparams : 1) * (size_t)s->nstages *
                          sizeof *e->tie);
#define CM(c, mb) cm[(size_t)(c) * (size_t)nmb + (size_t)(mb)]
#define KM(k, mb) km[(size_t)(k) * (size_t)nmb + (size_t)(mb)]
    for (int i = 0; i < ss->n; i++) {
        const pg_act *a = &ss->act[i];
        if (check_fields(v, st, i, a) != 0)
            return -1;
        int c = a->chunk, mb = a->mb;
        pg_act_str(a, sa, sizeof sa);
        if (s->forward_only && a->kind != PG_FWD && a->kind != PG_SEND_ACT && a->kind != PG_RECV_ACT &&
            a->kind != PG_SEND_SKIP && a->kind != PG_RECV_SKIP && a->kind != PG_TIE_SEND && a->kind != PG_TIE_RECV) {
            report(v, 0, a, "stage %d action %d %s: a forward-only schedule holds forwards, their messages and "
                   "transmitted ties' values only", st, i, sa);
            return -1;
        }
        if (nopt) {
            report(v, 0, a, "stage %d action %d %s comes after OPT_STEP, which must be the stage's last action",
                   st, i, sa);
            return -1;
        }
        unsigned flag = 0;
        const char *need = NULL;
        pg_act want = pg_act_make(PG_FWD, -1, -1);
        switch (a->kind) {
        case PG_FWD:
            flag = F_FWD;
            if (c > 0 && stage_of(v, c - 1) == st && !(CM(c - 1, mb) & F_FWD))
                want = pg_act_make(PG_FWD, mb, c - 1), need = "input";
            else if (c > 0 && stage_of(v, c - 1) != st && !(CM(c, mb) & F_RACT))
                want = pg_act_make(PG_RECV_ACT, mb, c), want.peer = stage_of(v, c - 1), need = "input";
            for (int k = 0; !need && k < v->m->nskips; k++) {
                int sc = stash_chunk(v, k);
                if (pop_chunk(v, k) != c || sc == c) /* within one chunk: the forward itself */
                    continue;
                if (stage_of(v, sc) == st && !(CM(sc, mb) & F_FWD))
                    want = pg_act_make(PG_FWD, mb, sc), need = "stashed skip";
                else if (stage_of(v, sc) != st && !(KM(k, mb) & K_RSKIP))
                    want = pg_act_make(PG_RECV_SKIP, mb, c), want.skip = k, want.peer = stage_of(v, sc),
                    need = "stashed skip";
            }
            break;
        case PG_BWD_B:
            flag = F_B;
            if (!(CM(c, mb) & F_FWD))
                want = pg_act_make(PG_FWD, mb, c), need = "forward";
            else if (c < last && stage_of(v, c + 1) == st && !(CM(c + 1, mb) & F_B))
                want = pg_act_make(PG_BWD_B, mb, c + 1), need = "output gradient";
            else if (c < last && stage_of(v, c + 1) != st && !(CM(c, mb) & F_RGRAD))
                want = pg_act_make(PG_RECV_GRAD, mb, c), want.peer = stage_of(v, c + 1), need = "output gradient";
            for (int k = 0; !need && k < v->m->nskips; k++) {
                int pc = pop_chunk(v, k);
                if (stash_chunk(v, k) != c || pc == c)
                    continue;
                if (stage_of(v, pc) == st && !(CM(pc, mb) & F_B))
                    want = pg_act_make(PG_BWD_B, mb, pc), need = "skip gradient";
                else if (stage_of(v, pc) != st && !(KM(k, mb) & K_RSKIPGRAD))
                    want = pg_act_make(PG_RECV_SKIP_GRAD, mb, c), want.skip = k, want.peer = stage_of(v, pc),
                    need = "skip gradient";
            }
            break;
        case PG_BWD_W:
            flag = F_W;
            if (!(CM(c, mb) & F_B))
                want = pg_act_make(PG_BWD_B, mb, c), need = "input gradient pass";
            else if (lastw[c] > mb) {
                report(v, 0, a, "stage %d action %d %s comes after BWD_W(mb %d, chunk %d): weight gradients "
                       "must accumulate in increasing micro-batch order", st, i, sa, lastw[c], c);
                return -1;
            }
            break;
        case PG_RECV_ACT: flag = F_RACT; break;
        case PG_RECV_GRAD: flag = F_RGRAD; break;
        case PG_SEND_ACT:
            if (!(CM(c, mb) & F_FWD))
                want = pg_act_make(PG_FWD, mb, c), need = "forward";
            break;
        case PG_SEND_GRAD:
            if (!(CM(c, mb) & F_B))
                want = pg_act_make(PG_BWD_B, mb, c), need = "input gradient pass";
            break;
        case PG_SEND_SKIP:
            if (!(CM(c, mb) & F_FWD))
                want = pg_act_make(PG_FWD, mb, c), need = "forward";
            break;
        case PG_SEND_SKIP_GRAD:
            if (!(CM(c, mb) & F_B))
                want = pg_act_make(PG_BWD_B, mb, c), need = "input gradient pass";
            break;
        case PG_RECV_SKIP: case PG_RECV_SKIP_GRAD: {
            unsigned kf = a->kind == PG_RECV_SKIP ? K_RSKIP : K_RSKIPGRAD;
            if (KM(a->skip, mb) & kf) {
                report(v, 0, a, "stage %d action %d %s is a duplicate", st, i, sa);
                return -1;
            }
            KM(a->skip, mb) |= (unsigned char)kf;
            break;
        }
        case PG_TIE_RECV:
            for (int j = 0; j < nmine; j++)
                for (int m2 = 0; m2 < nmb; m2++)
                    if (CM(mine[j], m2) & F_FWD) {
                        report(v, 0, a, "stage %d action %d %s comes after a forward that may use it", st, i, sa);
                        return -1;
                    }
            break;
        case PG_TIE_GRAD_SEND: case PG_TIE_GRAD_RECV:
            if (tie_w_missing(v, e, st, a->param, &want))
                need = "weight gradient pass that writes the tied gradient";
            else if (a->kind == PG_TIE_GRAD_RECV && e->verdict) {
                report(v, 0, a, "stage %d action %d %s comes after the stage's VERDICT, whose sums of squares need it",
                       st, i, sa);
                return -1;
            }
            break;
        case PG_VERDICT:
            if (e->verdict) {
                report(v, 0, a, "stage %d action %d %s is a duplicate", st, i, sa);
                return -1;
            }
            if (nw_done < nw_total) {
                report(v, 0, a, "stage %d action %d %s comes before the stage's last weight gradient pass",
                       st, i, sa);
                return -1;
            }
            e->verdict = 1;
            break;
        case PG_VERDICT_SEND: case PG_TIE_SUM_SEND:
            if (!e->verdict)
                want = pg_act_make(PG_VERDICT, -1, -1), need = "verdict (the gradients it sends are final there)";
            break;
        case PG_TIE_SUM_RECV:
            if (!*tie_count(v, e, PG_TIE_GRAD_SEND, a->param, a->peer))
                want = pg_act_make(PG_TIE_GRAD_SEND, -1, -1), want.param = a->param, want.peer = a->peer,
                need = "own gradient's send (the sum overwrites it)";
            break;
        case PG_GRAD_NORM: case PG_OPT_STEP:
            if ((need = step_end_missing(v, e, st, &want)) != NULL)
                ;
            else if (a->kind == PG_OPT_STEP && v->m->train.grad_clip > 0 && !e->norm)
                want = pg_act_make(PG_GRAD_NORM, -1, -1), need = "clip (grad_clip is set)";
            nnorm += a->kind == PG_GRAD_NORM;
            e->norm |= a->kind == PG_GRAD_NORM;
            nopt |= a->kind == PG_OPT_STEP;
            break;
        default:
            break;
        }
        if (need) {
            report(v, 0, a, "stage %d action %d %s comes before its %s (%s)", st, i, sa, need,
                   pg_act_str(&want, sb, sizeof sb));
            if (want.kind == PG_VERDICT && v->s->file)
                report(v, 1, a, "a schedule file that lists every action lists the step's end too: VERDICT, "
                       "VERDICT_SEND, VERDICT_RECV and the tie messages (`pipegen schedule --csv` writes them)");
            return -1;
        }
        if (flag) {
            if (CM(c, mb) & flag) {
                report(v, 0, a, "stage %d action %d %s is a duplicate", st, i, sa);
                return -1;
            }
            CM(c, mb) |= (unsigned char)flag;
            if (flag == F_W) {
                lastw[c] = mb;
                nw_done++;
                e->wdone[c]++;
            }
        }
        if (is_tie_kind(a->kind))
            ++*tie_count(v, e, a->kind, a->param, a->peer);
        else if (a->kind == PG_VERDICT_SEND)
            e->vsend[a->peer]++;
        else if (a->kind == PG_VERDICT_RECV)
            e->vrecv[a->peer]++;
    }
    for (int j = 0; j < nmine; j++)
        for (int mb = 0; mb < nmb; mb++)
            for (int k = 0; k < (s->forward_only ? 1 : 3); k++) {
                static const pg_act_kind kinds[3] = { PG_FWD, PG_BWD_B, PG_BWD_W };
                if (!(CM(mine[j], mb) & (1u << k))) {
                    pg_act want = pg_act_make(kinds[k], mb, mine[j]);
                    report(v, 0, NULL, "stage %d has no %s", st, pg_act_str(&want, sb, sizeof sb));
                    return -1;
                }
            }
#undef CM
#undef KM
    if (s->forward_only)
        return 0;
    if (!nopt) {
        report(v, 0, NULL, "stage %d has no OPT_STEP at its end", st);
        return -1;
    }
    if (v->m->train.grad_clip > 0 && nnorm != 1) {
        report(v, 0, NULL, "stage %d needs exactly one GRAD_NORM (grad_clip is set), it has %d", st, nnorm);
        return -1;
    }
    return check_end_counts(v, e, st);
}

/* ---- 3. all stages together ---------------------------------------------------- */

static void describe_wait(const pg_sim *sim, const pg_schedule *s, int st, char *buf, size_t n)
{
    const pg_act *a = &s->stage[st].act[sim->pc[st]];
    char sa[160];
    pg_act_str(a, sa, sizeof sa);
    snprintf(buf, n, "stage %d waits at action %d %s", st, sim->pc[st], sa);
}

static void report_deadlock(verify_ctx *v, const pg_sim *sim)
{
    const pg_schedule *s = v->s;
    int p = s->nstages;
    int stuck[PG_SCHED_MAX_STAGES], seen[PG_SCHED_MAX_STAGES], incycle[PG_SCHED_MAX_STAGES];
    char line[4096], part[512];
    for (int st = 0; st < p; st++) {
        stuck[st] = sim->pc[st] < s->stage[st].n;
        incycle[st] = 0;
    }
    /* follow wait-for edges from each stuck stage until a repeat (a cycle) or
     * a finished stage */
    int cyc = -1;
    for (int st0 = 0; st0 < p && cyc < 0; st0++) {
        if (!stuck[st0])
            continue;
        for (int i = 0; i < p; i++)
            seen[i] = 0;
        int st = st0;
        while (st >= 0 && stuck[st] && !seen[st]) {
            seen[st] = 1;
            st = sim->wait_for[st];
        }
        if (st >= 0 && stuck[st] && seen[st])
            cyc = st;
    }
    if (cyc >= 0) {
        /* start the cycle at its lowest stage */
        int lo = cyc, st = sim->wait_for[cyc];
        while (st != cyc) {
            if (st < lo)
                lo = st;
            st = sim->wait_for[st];
        }
        size_t len = (size_t)snprintf(line, sizeof line, "the schedule deadlocks: ");
        st = lo;
        do {
            incycle[st] = 1;
            describe_wait(sim, s, st, part, sizeof part);
            len += (size_t)snprintf(line + len, len < sizeof line ? sizeof line - len : 0, "%s%s",
                                    st == lo ? "" : ", ", part);
            st = sim->wait_for[st];
        } while (st != lo && len < sizeof line);
        snprintf(line + (len < sizeof line ? len : sizeof line - 1),
                 len < sizeof line ? sizeof line - len : 1, ": a cycle");
        report(v, 0, &s->stage[lo].act[sim->pc[lo]], "%s", line);
    }
    int first = cyc < 0;
    for (int st = 0; st < p; st++) {
        if (!stuck[st] || incycle[st])
            continue;
        int w = sim->wait_for[st];
        describe_wait(sim, s, st, part, sizeof part);
        const pg_act *a = &s->stage[st].act[sim->pc[st]];
        if (w >= 0 && !stuck[w])
            report(v, !first, a, "%s, but stage %d finished without sending it", part, w);
        else
            report(v, !first, a, "%s, behind the stages that cannot move", part);
        first = 0;
    }
}

static void report_sim(verify_ctx *v, const pg_sim *sim)
{
    const pg_schedule *s = v->s;
    char sa[160], sb[160];
    switch (sim->status) {
    case SIM_MISMATCH: {
        const pg_act *r = &s->stage[sim->recv.stage].act[sim->recv.idx];
        const pg_act *x = &s->stage[sim->send.stage].act[sim->send.idx];
        pg_act_str(r, sa, sizeof sa);
        act_core(x, sb, sizeof sb);
        report(v, 0, r, "stage %d action %d %s receives %s of stage %d action %d", sim->recv.stage,
               sim->recv.idx, sa, sb, sim->send.stage, sim->send.idx);
        report(v, 1, x, "stage %d action %d sends %s", sim->send.stage, sim->send.idx, sb);
        break;
    }
    case SIM_DEADLOCK:
        report_deadlock(v, sim);
        break;
    case SIM_UNRECEIVED:
        for (int i = 0; i < sim->nleft; i++) {
            const pg_act *a = &s->stage[sim->left[i].stage].act[sim->left[i].idx];
            pg_act_str(a, sa, sizeof sa);
            report(v, 0, a, "stage %d action %d %s is never received", sim->left[i].stage, sim->left[i].idx, sa);
        }
        break;
    case SIM_NOMEM:
        report(v, 0, NULL, "out of memory simulating the schedule");
        break;
    case SIM_OK:
        break;
    }
}

int pg_schedule_verify(const ir_model *m, const pg_schedule *s, pg_diag *d)
{
    verify_ctx v = { m, s, d, 0 };
    const pg_source *saved = d->src;
    /* diagnostics point into the CSV: do not quote lines of another file */
    if (s->file && (!d->src || !d->src->path || strcmp(d->src->path, s->file) != 0))
        d->src = NULL;
    if (s->nstages < 1 || s->nstages > PG_SCHED_MAX_STAGES || s->nchunks < s->nstages ||
        s->nchunks > PG_SCHED_MAX_CHUNKS || s->nmb < 1 || !s->stage) {
        report(&v, 0, NULL, "a schedule of %d chunks on %d stages with %d micro-batches cannot run",
               s->nchunks, s->nstages, s->nmb);
        d->src = saved;
        return -1;
    }
    if (s->nstages != m->nstages || s->nchunks != m->nchunks) {
        report(&v, 0, NULL, "the schedule has %d stages and %d chunks, the model %d and %d", s->nstages,
               s->nchunks, m->nstages, m->nchunks);
        d->src = saved;
        return -1;
    }
    unsigned char *cm = malloc((size_t)s->nchunks * (size_t)s->nmb);
    unsigned char *km = malloc((size_t)(m->nskips > 0 ? m->nskips : 1) * (size_t)s->nmb);
    end_state e = { 0 };
    e.tie = malloc((size_t)TIE_KINDS * (size_t)(m->nparams > 0 ? m->nparams : 1) * (size_t)s->nstages * sizeof *e.tie);
    int lastw[PG_SCHED_MAX_CHUNKS];
    if (!cm || !km || !e.tie) {
        report(&v, 0, NULL, "out of memory verifying the schedule");
    } else {
        for (int st = 0; st < s->nstages; st++)
            check_stage(&v, st, cm, km, lastw, &e);
    }
    free(cm);
    free(km);
    free(e.tie);
    if (v.errors == 0) {
        pg_sim sim = { .m = m, .s = s };
        if (pg_sim_run(&sim) != SIM_OK)
            report_sim(&v, &sim);
        pg_sim_free(&sim);
    }
    d->src = saved;
    return v.errors ? -1 : 0;
}

/* codegen/schedule/sched_core.c — the schedule as data, under every other schedule
 * file: actions (names, readable forms, construction), a stage's list,
 * allocation and freeing, the chunks of a stage, where an action came from
 * (for messages), and the schedule's name. It calls none of them back. */
#include <stdlib.h>
#include <string.h>
#include "schedule/sched_internal.h"

const char *pg_act_name(pg_act_kind k) { return pg_step_kind_name((int)k); }

int pg_act_is_compute(pg_act_kind k)
{
    return k == PG_FWD || k == PG_BWD_B || k == PG_BWD_W;
}

int pg_chunk_uses_param(const ir_model *m, int c, int i)
{
    for (int l = 0; l < m->nlayers; l++)
        if (m->layers[l].chunk == c)
            for (int k = 0; k < m->layers[l].nparam; k++)
                if (m->layers[l].param[k] == i)
                    return 1;
    return 0;
}

pg_act_kind pg_act_send_kind(pg_act_kind k)
{
    switch (k) {
    case PG_RECV_ACT: return PG_SEND_ACT;
    case PG_RECV_GRAD: return PG_SEND_GRAD;
    case PG_RECV_SKIP: return PG_SEND_SKIP;
    case PG_RECV_SKIP_GRAD: return PG_SEND_SKIP_GRAD;
    case PG_TIE_RECV: return PG_TIE_SEND;
    case PG_TIE_GRAD_RECV: return PG_TIE_GRAD_SEND;
    case PG_TIE_SUM_RECV: return PG_TIE_SUM_SEND;
    case PG_VERDICT_RECV: return PG_VERDICT_SEND;
    default: return k;
    }
}

int pg_act_is_recv(pg_act_kind k) { return pg_act_send_kind(k) != k; }

pg_act_group pg_act_group_of(pg_act_kind k)
{
    switch (k) {
    case PG_FWD: return PG_GROUP_F;
    case PG_BWD_B: return PG_GROUP_B;
    case PG_BWD_W: return PG_GROUP_W;
    case PG_SEND_ACT: case PG_SEND_GRAD: case PG_SEND_SKIP: case PG_SEND_SKIP_GRAD: return PG_GROUP_SEND;
    case PG_RECV_ACT: case PG_RECV_GRAD: case PG_RECV_SKIP: case PG_RECV_SKIP_GRAD: return PG_GROUP_RECV;
    case PG_VERDICT: case PG_VERDICT_SEND: case PG_VERDICT_RECV: return PG_GROUP_VERDICT;
    case PG_GRAD_NORM: return PG_GROUP_CLIP;
    case PG_OPT_STEP: return PG_GROUP_OPT;
    default: return PG_GROUP_TIE; /* TIE_SEND .. TIE_SUM_RECV */
    }
}

int pg_act_is_send(pg_act_kind k)
{
    return k == PG_SEND_ACT || k == PG_SEND_GRAD || k == PG_SEND_SKIP || k == PG_SEND_SKIP_GRAD || k == PG_TIE_SEND ||
           k == PG_TIE_GRAD_SEND || k == PG_TIE_SUM_SEND || k == PG_VERDICT_SEND;
}

const char *pg_act_str(const pg_act *a, char *buf, size_t n)
{
    const char *name = pg_act_name(a->kind);
    int w;
    switch (a->kind) {
    case PG_SEND_SKIP: case PG_RECV_SKIP: case PG_SEND_SKIP_GRAD: case PG_RECV_SKIP_GRAD:
        w = snprintf(buf, n, "%s(skip %d, mb %d, chunk %d)", name, a->skip, a->mb, a->chunk);
        break;
    case PG_TIE_SEND: case PG_TIE_RECV: case PG_TIE_GRAD_SEND: case PG_TIE_GRAD_RECV: case PG_TIE_SUM_SEND:
    case PG_TIE_SUM_RECV:
        w = snprintf(buf, n, "%s(param %d)", name, a->param);
        break;
    case PG_VERDICT: case PG_VERDICT_SEND: case PG_VERDICT_RECV: case PG_GRAD_NORM: case PG_OPT_STEP:
        w = snprintf(buf, n, "%s", name);
        break;
    default:
        w = snprintf(buf, n, "%s(mb %d, chunk %d)", name, a->mb, a->chunk);
        break;
    }
    if (w < 0 || (size_t)w >= n)
        return buf;
    switch (a->kind) {
    case PG_SEND_ACT: case PG_SEND_GRAD: case PG_SEND_SKIP: case PG_SEND_SKIP_GRAD:
    case PG_TIE_SEND: case PG_TIE_GRAD_SEND: case PG_TIE_SUM_SEND: case PG_VERDICT_SEND:
        snprintf(buf + w, n - (size_t)w, " to stage %d", a->peer);
        break;
    case PG_RECV_ACT: case PG_RECV_GRAD: case PG_RECV_SKIP: case PG_RECV_SKIP_GRAD:
    case PG_TIE_RECV: case PG_TIE_GRAD_RECV: case PG_TIE_SUM_RECV: case PG_VERDICT_RECV:
        snprintf(buf + w, n - (size_t)w, " from stage %d", a->peer);
        break;
    default:
        break;
    }
    return buf;
}

pg_act pg_act_make(pg_act_kind k, int mb, int chunk)
{
    pg_act a = { .kind = k, .mb = mb, .chunk = chunk, .peer = -1, .skip = -1,
                 .param = -1, .slot = -1, .line = 0, .origin = -1 };
    return a;
}

int pg_sched_push(pg_stage_sched *st, pg_act a)
{
    if (st->n == st->cap) {
        int cap = st->cap ? 2 * st->cap : 64;
        pg_act *p = realloc(st->act, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        st->act = p;
        st->cap = cap;
    }
    st->act[st->n++] = a;
    return 0;
}

int pg_sched_alloc(pg_schedule *s, int nstages, int nchunks, int nmb, ir_placement pl)
{
    memset(s, 0, sizeof *s);
    s->stage = calloc((size_t)nstages, sizeof *s->stage);
    if (!s->stage)
        return -1;
    s->nstages = nstages;
    s->nchunks = nchunks;
    s->nmb = nmb;
    s->placement = pl == PLACE_V && nchunks == 2 * nstages ? PLACE_V : PLACE_LOOP;
    for (int c = 0; c < nchunks && c < PG_SCHED_MAX_CHUNKS; c++)
        s->chunk_stage[c] = pg_placement_stage(s->placement, c, nchunks, nstages);
    return 0;
}

int pg_stage_chunks(const pg_schedule *s, int st, int *out)
{
    int n = 0;
    for (int c = 0; c < s->nchunks && c < PG_SCHED_MAX_CHUNKS; c++)
        if (s->chunk_stage[c] == st)
            out[n++] = c;
    return n;
}

void pg_schedule_free(pg_schedule *s)
{
    if (s->stage)
        for (int i = 0; i < s->nstages; i++)
            free(s->stage[i].act);
    free(s->stage);
    free(s->file);
    memset(s, 0, sizeof *s);
}

pg_loc pg_act_loc(const ir_model *m, const pg_schedule *s, const pg_act *a)
{
    pg_loc loc = { 0 };
    if (s->file && a && a->line > 0) {
        loc.file = s->file;
        loc.line = a->line;
        loc.col = 1;
    } else if (s->file) {
        loc.file = s->file;
    } else if (m->train.schedule_loc.line > 0) {
        loc = m->train.schedule_loc;
    } else {
        loc.file = m->source_path ? m->source_path : (m->loc.file ? m->loc.file : "<model>");
    }
    return loc;
}

const char *pg_schedule_name(const ir_model *m, char *buf, size_t n)
{
    switch (m->train.schedule) {
    case SCHED_GPIPE: snprintf(buf, n, "gpipe"); break;
    case SCHED_1F1B: snprintf(buf, n, "1f1b"); break;
    case SCHED_INTERLEAVED: snprintf(buf, n, "interleaved(%d)", m->train.interleave); break;
    case SCHED_ZB1: snprintf(buf, n, "zb1"); break;
    case SCHED_ZBV: snprintf(buf, n, "zbv"); break;
    case SCHED_AUTO: snprintf(buf, n, "auto"); break;
    case SCHED_FILE:
        snprintf(buf, n, "file(%s)", m->train.schedule_file ? m->train.schedule_file : "?");
        break;
    }
    return buf;
}

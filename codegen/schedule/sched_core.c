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

const char *pg_act_str(const pg_act *a, char *buf, size_t n)
{
    const char *name = pg_act_name(a->kind);
    int w;
    switch (a->kind) {
    case PG_SEND_SKIP: case PG_RECV_SKIP: case PG_SEND_SKIP_GRAD: case PG_RECV_SKIP_GRAD:
        w = snprintf(buf, n, "%s(skip %d, mb %d, chunk %d)", name, a->skip, a->mb, a->chunk);
        break;
    case PG_TIE_REDUCE: case PG_TIE_SEND: case PG_TIE_RECV: case PG_TIE_GRAD_SEND: case PG_TIE_GRAD_RECV:
        w = snprintf(buf, n, "%s(param %d)", name, a->param);
        break;
    case PG_GRAD_NORM: case PG_OPT_STEP:
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
    case PG_TIE_SEND: case PG_TIE_GRAD_SEND:
        snprintf(buf + w, n - (size_t)w, " to stage %d", a->peer);
        break;
    case PG_RECV_ACT: case PG_RECV_GRAD: case PG_RECV_SKIP: case PG_RECV_SKIP_GRAD:
    case PG_TIE_RECV: case PG_TIE_GRAD_RECV:
        snprintf(buf + w, n - (size_t)w, " from stage %d", a->peer);
        break;
    case PG_TIE_REDUCE:
        snprintf(buf + w, n - (size_t)w, " at stage %d", a->peer);
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

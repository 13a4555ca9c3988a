/* codegen/schedule/sched_build.c — pg_schedule_build, the whole schedule pass: the
 * compute actions (built-in, schedule.c, or a CSV file, schedule_csv.c), the
 * communication (schedule_comms.c), the activation slots (schedule.c) and the
 * verifier (verify.c). The one file that calls them all; none calls it back. */
#include <stdlib.h>
#include <string.h>

#include "schedule/sched_internal.h"

/* ---- the whole pass ------------------------------------------------------------ */

static int has_comms(const pg_schedule *s)
{
    for (int st = 0; st < s->nstages; st++)
        for (int i = 0; i < s->stage[st].n; i++)
            if (!pg_act_is_compute(s->stage[st].act[i].kind))
                return 1;
    return 0;
}

/* What a round of decoding keeps of the step's messages: activations and skips. */
static int decode_kind(pg_act_kind k)
{
    return k == PG_FWD || k == PG_SEND_ACT || k == PG_RECV_ACT || k == PG_SEND_SKIP || k == PG_RECV_SKIP;
}

int pg_schedule_decode(const ir_model *m, const pg_schedule *s, int nmb, pg_schedule *out, pg_diag *d)
{
    memset(out, 0, sizeof *out);
    if (nmb < 1 || nmb > 0xffff || pg_sched_alloc(out, s->nstages, s->nchunks, nmb, s->placement) != 0) {
        pg_error(d, pg_act_loc(m, s, NULL), "out of memory building the decode schedule");
        return -1;
    }
    memcpy(out->chunk_stage, s->chunk_stage, sizeof out->chunk_stage);
    out->forward_only = 1;
    int failed = 0;
    for (int g0 = 0, g1; g0 < s->nchunks; g0 = g1 + 1) { /* a group: chunks g0..g1 on one stage */
        int st = pg_chunk_stage(s, g0);
        for (g1 = g0; g1 + 1 < s->nchunks && pg_chunk_stage(s, g1 + 1) == st; g1++)
            ;
        for (int mb = 0; mb < nmb; mb++)
            for (int c = g0; c <= g1; c++)
                failed |= pg_sched_push(&out->stage[st], pg_act_make(PG_FWD, mb, c)) != 0;
    }
    if (failed || pg_schedule_add_comms(m, out) != 0) {
        pg_schedule_free(out);
        pg_error(d, pg_act_loc(m, s, NULL), "out of memory building the decode schedule");
        return -1;
    }
    for (int st = 0; st < out->nstages; st++) { /* the step's ties and end are not a round's */
        pg_stage_sched *ss = &out->stage[st];
        int n = 0;
        for (int i = 0; i < ss->n; i++)
            if (decode_kind(ss->act[i].kind))
                ss->act[n++] = ss->act[i];
        ss->n = n;
    }
    if (pg_schedule_verify(m, out, d) != 0) {
        pg_schedule_free(out);
        return -1;
    }
    return 0;
}

/* The actions of a forward pass: a forward, its messages, and a transmitted
 * tie's value (sent at the start of the step, before any forward uses it). */
static int forward_kind(pg_act_kind k)
{
    return k == PG_FWD || k == PG_SEND_ACT || k == PG_RECV_ACT || k == PG_SEND_SKIP || k == PG_RECV_SKIP ||
           k == PG_TIE_SEND || k == PG_TIE_RECV;
}

int pg_schedule_forward_only(const ir_model *m, const pg_schedule *s, pg_schedule *out, pg_diag *d)
{
    memset(out, 0, sizeof *out);
    if (pg_sched_alloc(out, s->nstages, s->nchunks, s->nmb, s->placement) != 0) {
        pg_error(d, pg_act_loc(m, s, NULL), "out of memory building the forward-only schedule");
        return -1;
    }
    memcpy(out->chunk_stage, s->chunk_stage, sizeof out->chunk_stage);
    out->placement = s->placement;
    out->forward_only = 1;
    if (s->file && !(out->file = strdup(s->file))) {
        pg_schedule_free(out);
        pg_error(d, pg_act_loc(m, s, NULL), "out of memory building the forward-only schedule");
        return -1;
    }
    for (int st = 0; st < s->nstages; st++) {
        const pg_stage_sched *ss = &s->stage[st];
        memcpy(out->stage[st].nslots_per_chunk, ss->nslots_per_chunk, sizeof ss->nslots_per_chunk);
        for (int i = 0; i < ss->n; i++) {
            pg_act a = ss->act[i];
            if (!forward_kind(a.kind))
                continue;
            a.origin = i;
            if (pg_sched_push(&out->stage[st], a) != 0) {
                pg_schedule_free(out);
                pg_error(d, pg_act_loc(m, s, NULL), "out of memory building the forward-only schedule");
                return -1;
            }
        }
    }
    if (pg_schedule_verify(m, out, d) != 0) {
        pg_schedule_free(out);
        return -1;
    }
    return 0;
}

int pg_schedule_build(const ir_model *m, pg_schedule *s, pg_diag *d)
{
    int rc;
    if (m->train.schedule == SCHED_FILE)
        rc = pg_schedule_read_csv(m->train.schedule_file, m, s, d);
    else
        rc = pg_schedule_builtin(m, s, d);
    if (rc != 0)
        return -1;
    /* a CSV that lists its communication is taken as written */
    if (!has_comms(s) && pg_schedule_add_comms(m, s) != 0) {
        pg_error(d, pg_act_loc(m, s, NULL), "out of memory adding communication to the schedule");
        pg_schedule_free(s);
        return -1;
    }
    pg_assign_slots(s);
    if (pg_schedule_verify(m, s, d) != 0) {
        pg_schedule_free(s);
        return -1;
    }
    return 0;
}

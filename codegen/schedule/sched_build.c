/* codegen/schedule/sched_build.c — pg_schedule_build, the whole schedule pass: the
 * compute actions (built-in, schedule.c, or a CSV file, schedule_csv.c), the
 * communication (schedule_comms.c), the activation slots (schedule.c) and the
 * verifier (verify.c). The one file that calls them all; none calls it back. */
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

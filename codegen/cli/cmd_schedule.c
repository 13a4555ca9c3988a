/* codegen/cli/cmd_schedule.c — `pipegen schedule FILE [--csv] [--svg OUT]`:
 * builds and verifies the model's schedule, then prints its placement (which
 * chunks each stage runs), each stage's action list with its activation
 * slots and the bubble predicted for equal unit costs, or (--csv) the whole schedule in the CSV format of schedule_csv.c,
 * which `train { schedule = file("x.csv") }` reads back; --svg OUT also draws
 * the timeline predicted by the cost model (svg.c). */
#include <stdio.h>
#include <string.h>

#include "cli/cmd_common.h"
#include "cli/commands.h"
#include "schedule/svg.h"

static void print_schedule(const ir_model *m, const pg_schedule *s, FILE *out)
{
    char sa[160], kind[64];
    pg_sched_costs c;
    pg_sched_prediction pr;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < 64; i++)
        c.fwd[i] = c.bwd_b[i] = c.bwd_w[i] = 1.0;
    int have_pr = pg_schedule_predict(m, s, &c, &pr) == 0;
    fprintf(out, "model %s: schedule %s", m->name ? m->name : "?", pg_schedule_name(m, kind, sizeof kind));
    fprintf(out, ", %d stage%s, %d chunk%s, %d micro-batch%s\n", s->nstages, s->nstages == 1 ? "" : "s",
            s->nchunks, s->nchunks == 1 ? "" : "s", s->nmb, s->nmb == 1 ? "" : "es");
    fprintf(out, "placement %s:", pg_placement_name(s->placement));
    for (int st = 0; st < s->nstages; st++) {
        int chunks[64], n = pg_stage_chunks(s, st, chunks);
        fprintf(out, "%s stage %d runs chunk%s", st ? ";" : "", st, n == 1 ? "" : "s");
        for (int j = 0; j < n; j++)
            fprintf(out, "%s %d", j ? "," : "", chunks[j]);
    }
    fputc('\n', out);
    if (have_pr)
        fprintf(out, "predicted with unit costs (F = B = W = 1, messages free): step %g\n", pr.step_time);
    for (int st = 0; st < s->nstages; st++) {
        const pg_stage_sched *ss = &s->stage[st];
        int chunks[64], n = pg_stage_chunks(s, st, chunks);
        fprintf(out, "\nstage %d: %d actions; activation slots", st, ss->n);
        for (int lc = 0; lc < n; lc++)
            fprintf(out, "%s chunk %d: %d", lc ? "," : "", chunks[lc], ss->nslots_per_chunk[lc]);
        if (have_pr)
            fprintf(out, "; bubble %.1f%%", 100.0 * pr.bubble[st]);
        fputc('\n', out);
        for (int i = 0; i < ss->n; i++) {
            const pg_act *a = &ss->act[i];
            fprintf(out, "  %4d  %s", i, pg_act_str(a, sa, sizeof sa));
            if (a->slot >= 0)
                fprintf(out, "  [slot %d]", a->slot);
            fputc('\n', out);
        }
    }
}

int cmd_schedule(int argc, char **argv)
{
    const char *path = NULL, *svg = NULL;
    int csv = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--csv") == 0)
            csv = 1;
        else if (strcmp(argv[i], "--svg") == 0 && i + 1 < argc && argv[i + 1][0])
            svg = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1] != '\0')
            path = NULL, argc = -1;
        else if (!path)
            path = argv[i];
        else
            argc = -1;
        if (argc < 0)
            break;
    }
    if (argc < 0 || !path || !path[0]) {
        fprintf(stderr, "usage: pipegen schedule FILE [--csv] [--svg OUT]\n");
        return 2;
    }
    pg_io_file files[] = {{"--svg", svg, 1}, {"the model", path, 0}};
    if (cmd_files_distinct(files, 2))
        return 2;
    cmd_model cm;
    if (cmd_load_model(path, NULL, 0, NULL, &cm) != 0)
        return 1;
    if (csv)
        pg_schedule_write_csv(&cm.s, stdout);
    else
        print_schedule(&cm.l.model, &cm.s, stdout);
    pg_sched_costs c;
    int seconds = pg_sched_costs_of_model(&cm.l.model, NULL, &c);
    int rc = svg && pg_schedule_svg_write(&cm.l.model, &cm.s, &c, seconds, svg, &cm.l.diag) != 0 ? 1 : 0;
    if (svg && !rc) /* with --csv stdout is the schedule: the line goes to stderr */
        fprintf(csv ? stderr : stdout, "wrote %s: the predicted timeline of one step (SVG)\n", svg);
    cmd_release_model(&cm);
    return rc;
}

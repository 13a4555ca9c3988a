/* codegen/schedule/svg.c — the predicted timeline of a schedule as SVG, in the style
 * of the GPipe and Zero Bubble papers' figures: time runs right, one row per
 * stage, a box per F / B / W pass labelled with its micro-batch, idle time
 * left white. Times come from the verifier's simulation (sched_sim.c) fed
 * with the cost model's per-chunk costs. Every number is printed with a fixed
 * format, so the same model gives the same bytes. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "schedule/sched_sim.h"
#include "schedule/svg.h"
#include "io_atomic.h"

const char *pg_profile_missing(const ir_model *m, const pg_profile *prof, int *missing)
{
    const char *first = NULL;
    *missing = 0;
    for (int i = 0; prof && i < m->nlayers; i++) {
        const ir_layer *L = &m->layers[i];
        if (L->kind != LK_STASH && L->kind != LK_POP && (!L->name || !pg_profile_find(prof, L->name))) {
            if (!first)
                first = L->name ? L->name : "?";
            ++*missing;
        }
    }
    return first;
}

int pg_sched_costs_of_model(const ir_model *m, const pg_profile *prof, pg_sched_costs *c)
{
    memset(c, 0, sizeof *c);
    int missing;
    int covered = prof != NULL && !pg_profile_missing(m, prof, &missing);
    double nmb = m->train.microbatches > 0 ? (double)m->train.microbatches : 1.0;
    double rows = m->train.batch > 0 ? (double)m->train.batch / nmb : 1.0;
    for (int i = 0; i < m->nlayers; i++) {
        const ir_layer *L = &m->layers[i];
        if (L->chunk < 0 || L->chunk >= 64)
            continue;
        pg_layer_cost lc = pg_layer_cost_of(L, covered ? prof : NULL, rows);
        c->fwd[L->chunk] += lc.fwd;
        c->bwd_b[L->chunk] += lc.bwd_b;
        c->bwd_w[L->chunk] += lc.bwd_w;
        c->rerun[L->chunk] += lc.recompute;
        if (i == 0 || m->layers[i - 1].chunk != L->chunk) /* a chunk's first layer: its input comes in */
            c->in_elems[L->chunk] = (double)pg_shape_numel(&L->in);
        c->out_elems[L->chunk] = (double)pg_shape_numel(&L->out); /* its last: its output goes on */
    }
    c->has_elems = 1;
    c->recompute = 1;
    if (!covered) /* model units (flops): messages and the optimizer are not priced */
        return 0;
    if (prof->has_messages) { /* measured by --profile */
        c->send_latency = prof->latency_s;
        c->send_bytes_per_s = prof->bytes_per_s;
    } else { /* modelled: a message is there once its send returned */
        c->send_latency = PG_SEND_DEFAULT_LATENCY_S;
        c->send_bytes_per_s = PG_SEND_DEFAULT_BYTES_PER_S;
    }
    if (prof->has_send_cost) {
        c->send_cost_latency = prof->send_latency_s;
        c->send_cost_bytes_per_s = prof->send_bytes_per_s;
    } else {
        c->send_cost_latency = PG_SEND_DEFAULT_LATENCY_S;
        c->send_cost_bytes_per_s = PG_SEND_DEFAULT_BYTES_PER_S;
    }
    if (prof->has_recv_cost) {
        c->recv_cost_latency = prof->recv_latency_s;
        c->recv_cost_bytes_per_s = prof->recv_bytes_per_s;
    } else {
        c->recv_cost_latency = PG_SEND_DEFAULT_LATENCY_S;
        c->recv_cost_bytes_per_s = PG_SEND_DEFAULT_BYTES_PER_S;
    }
    for (int st = 0; st < m->nstages && st < 64 && st < PG_PROFILE_MAX_STAGES; st++) {
        const pg_stage_cost *sc = &prof->stage[st];
        c->opt[st] = sc->optimizer_s;
        c->grad_norm[st] = sc->grad_norm_s;
        c->verdict[st] = sc->verdict_s;
        c->tie[st] = sc->tie_s;
        c->step_start[st] = sc->step_start_s;
        c->step_end[st] = sc->step_end_s;
        c->has_send_own[st] = sc->has_send_s;
        c->send_own[st] = sc->send_s;
    }
    return 1;
}

/* What the prediction's message costs are: "messages free" (model units),
 * "measured messages" (--profile), "modelled messages" (a profile without). */
static const char *msg_words(const pg_sched_costs *c, int seconds)
{
    if (!seconds)
        return "messages free";
    return c->send_latency == PG_SEND_DEFAULT_LATENCY_S && c->send_bytes_per_s == PG_SEND_DEFAULT_BYTES_PER_S
               ? "modelled messages" : "measured messages";
}

const char *pg_cost_unit(int seconds)
{
    return seconds ? "s" : "flop";
}

void pg_fmt_si(char *buf, size_t n, double v, const char *unit)
{
    static const char *const big[] = { "", "k", "M", "G", "T", "P" };
    static const char *const small[] = { "", "m", "u", "n" };
    int k = 0;
    if (strcmp(unit, "s") == 0) {
        while (v != 0 && fabs(v) < 1 && k < 3) {
            v *= 1000;
            k++;
        }
        snprintf(buf, n, "%.4g %s%s", v, small[k], unit);
    } else {
        while (fabs(v) >= 1000 && k < 5) {
            v /= 1000;
            k++;
        }
        snprintf(buf, n, "%.4g %s%s", v, big[k], unit);
    }
}

void pg_schedule_report(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, int seconds, FILE *out)
{
    pg_sched_prediction pr;
    char kind[64], v[48];
    const char *unit = pg_cost_unit(seconds);
    pg_schedule_name(m, kind, sizeof kind);
    if (pg_schedule_predict(m, s, c, &pr) != 0) {
        fprintf(out, "prediction: the schedule cannot be simulated\n");
        return;
    }
    double busy = 0;
    for (int st = 0; st < s->nstages; st++)
        busy += pr.busy[st];
    pg_fmt_si(v, sizeof v, pr.step_time, unit);
    fprintf(out, "predicted step (%s, %s, %s): %s, bubble %.1f%%\n", kind,
            seconds ? "measured layer times" : "model units: estimated flops",
            msg_words(c, seconds), v,
            pr.step_time > 0 ? 100.0 * (1.0 - busy / (pr.step_time * s->nstages)) : 0.0);
    for (int st = 0; st < s->nstages; st++) {
        int first = -1, last = -1, n = 0;
        for (int i = 0; i < m->nlayers; i++)
            if (m->layers[i].stage == st && m->layers[i].kind != LK_STASH && m->layers[i].kind != LK_POP) {
                if (first < 0)
                    first = i;
                last = i;
                n++;
            }
        pg_fmt_si(v, sizeof v, pr.busy[st], unit);
        fprintf(out, "stage %d: %d layer%s", st, n, n == 1 ? "" : "s");
        if (first >= 0 && m->nchunks == m->nstages && first == last)
            fprintf(out, " (%s)", m->layers[first].name ? m->layers[first].name : "?");
        else if (first >= 0 && m->nchunks == m->nstages)
            fprintf(out, " (%s .. %s)", m->layers[first].name ? m->layers[first].name : "?",
                    m->layers[last].name ? m->layers[last].name : "?");
        fprintf(out, ", compute %s per step, busy %.1f%%, bubble %.1f%%\n", v,
                pr.step_time > 0 ? 100.0 * pr.busy[st] / pr.step_time : 0.0, 100.0 * pr.bubble[st]);
    }
}

/* A tick spacing of 1, 2 or 5 times a power of ten giving at most ~10 ticks. */
static double tick_step(double span)
{
    if (!(span > 0))
        return 1;
    double raw = span / 10, p = pow(10, floor(log10(raw)));
    double f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

/* Layout in pixels; the plot and the canvas widen when their text needs it. */
enum { LEFT = 80, LEFT_REPLICAS = 136, TOP = 48, ROW_H = 26, ROW_GAP = 6, PLOT_W = 960, RIGHT = 24 };

/* What a box is drawn as: compute passes full height, shaded by chunk; the
 * other work in its own colour; messages (every send and receive, a
 * receive with its wait) in the lower half, in the colour of what they carry. */
enum { CAT_F = PG_GROUP_F, CAT_B = PG_GROUP_B, CAT_W = PG_GROUP_W, CAT_SEND = PG_GROUP_SEND, CAT_RECV = PG_GROUP_RECV,
       CAT_TIE = PG_GROUP_TIE, CAT_VERDICT = PG_GROUP_VERDICT, CAT_NORM = PG_GROUP_CLIP, CAT_OPT = PG_GROUP_OPT,
       CAT_DP = PG_GROUP__COUNT, CAT_DATA, CAT_END, CAT_BETWEEN, CAT_LOG, CAT_EVAL, CAT_STOP, CAT_CKPT,
       CAT__COUNT };
static const char *const cat_fill[CAT__COUNT] = { "#4f81bd", "#f2a541", "#7cb85c", "#8c8c8c", "#c8c8c8", "#c0504d",
                                                  "#e6b8b7", "#4bacc6", "#8064a2", "#d16ba5", "#9bbb59", "#7f6084",
                                                  "#e8e1cf", "#c4bd97", "#76923c", "#948a54", "#31859c" };
static const char *const cat_label[CAT__COUNT] = { "F  forward", "B  input gradient", "W  weight gradient", "send",
                                                   "receive (and its wait)", "tie gradient exchange",
                                                   "verdict (sums of squares, exchange)", "grad-norm clip", "optimizer",
                                                   "data-parallel reduction", "batch loading, zeroed gradients",
                                                   "step end (the device waited for)", "between steps",
                                                   "log line", "evaluation", "stop exchange (--save-on-exit)",
                                                   "checkpoint" };

/* CAT_F .. CAT_OPT are pg_act_group's, in its order; CAT_DATA .. CAT_CKPT
 * follow PG_TIMELINE_DATA .. PG_TIMELINE_CKPT. */
static int category(int kind)
{
    if (kind >= 0 && kind < PG_STEP_KIND_COUNT)
        return (int)pg_act_group_of((pg_act_kind)kind);
    if (kind >= PG_TIMELINE_DATA && kind <= PG_TIMELINE_CKPT)
        return CAT_DATA + (kind - PG_TIMELINE_DATA);
    return kind == PG_TIMELINE_DP ? CAT_DP : -1;
}

/* Messages take the lower half of the row. */
static int is_message(int kind)
{
    return kind >= 0 && kind < PG_STEP_KIND_COUNT && (pg_act_is_send((pg_act_kind)kind) || pg_act_is_recv((pg_act_kind)kind));
}

/* Estimated text widths (DejaVu Sans): bold 15 px titles, 12 px legend, 11 px
 * box labels, 10 px ticks; a middle dot is narrow. */
static double text_w(const char *s, double per_char)
{
    double w = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == 0xc2 && p[1] == 0xb7) { /* U+00B7 MIDDLE DOT */
            w += per_char * 0.5;
            p++;
        } else {
            w += per_char;
        }
    }
    return w;
}

static void xml_text(FILE *o, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '<')
            fputs("&lt;", o);
        else if (*s == '>')
            fputs("&gt;", o);
        else if (*s == '&')
            fputs("&amp;", o);
        else if (*s == '"')
            fputs("&quot;", o);
        else
            fputc(*s, o);
    }
}

/* A fill mixed toward white by t in [0, 1]: the later chunks of a stage. */
static void shade(const char *hex, double t, char out[8])
{
    unsigned rgb = (unsigned)strtoul(hex + 1, NULL, 16);
    int c[3] = { (int)(rgb >> 16 & 255), (int)(rgb >> 8 & 255), (int)(rgb & 255) };
    for (int k = 0; k < 3; k++)
        c[k] = (int)lround(c[k] + (255 - c[k]) * t);
    snprintf(out, 8, "#%02x%02x%02x", c[0], c[1], c[2]);
}

/* Each chunk's place among the chunks its stage runs in the picture (0 the
 * first), and the most chunks one stage runs. */
static int chunk_places(const pg_timeline *t, int place[64])
{
    uint64_t on[64] = { 0 };
    int most = 1;
    for (int i = 0; i < t->nbox; i++) {
        const pg_timeline_box *a = &t->box[i];
        int st = a->stage >= 0 && t->nstages > 0 ? a->stage % t->nstages : -1; /* rows: replicas of the stages */
        if (st >= 0 && st < 64 && a->chunk >= 0 && a->chunk < 64 && category(a->kind) <= CAT_W &&
            category(a->kind) >= 0)
            on[st] |= 1ull << a->chunk;
    }
    for (int c = 0; c < 64; c++)
        place[c] = 0;
    for (int st = 0; st < 64; st++) {
        int k = 0;
        for (int c = 0; c < 64; c++)
            if (on[st] >> c & 1)
                place[c] = k++;
        if (k > most)
            most = k;
    }
    return most;
}

/* A pass's label: "3·c2" (micro-batch 3 of chunk 2) when stages run several
 * chunks, else "3"; on a box too narrow for it, the micro-batch alone, else
 * nothing: the same rule for every box. */
static const char *box_label(const pg_timeline_box *a, int chunks, double w, char *buf, size_t n)
{
    if (chunks > 1) {
        snprintf(buf, n, "%d\xc2\xb7" "c%d", a->mb, a->chunk);
        if (text_w(buf, 6.6) + 4 <= w)
            return buf;
    }
    snprintf(buf, n, "%d", a->mb);
    return text_w(buf, 6.6) + 4 <= w ? buf : NULL;
}

void pg_timeline_svg(const pg_timeline *t, FILE *o)
{
    int D = t->replicas > 1 ? t->replicas : 1, p = t->nstages * D, place[64], used[CAT__COUNT] = { 0 };
    int left = D > 1 ? LEFT_REPLICAS : LEFT; /* "stage 1 replica 0" */
    int chunks = chunk_places(t, place);
    double step = t->step, busy = 0;
    for (int st = 0; st < p; st++)
        busy += t->busy[st];
    int faded = 0; /* boxes of the steps before and after (a measured step) */
    for (int i = 0; i < t->nbox; i++)
        if (category(t->box[i].kind) >= 0 && t->box[i].dur > 0) {
            used[category(t->box[i].kind)] = 1;
            faded |= t->box[i].other_step != 0;
        }
    double bubble = step > 0 ? 1.0 - busy / (step * p) : 0.0;
    const char *unit = pg_cost_unit(t->seconds);
    char sstep[48], title[1024], lbl[48];
    pg_fmt_si(sstep, sizeof sstep, step, unit);
    char reps[32] = "";
    if (D > 1)
        snprintf(reps, sizeof reps, " x %d replicas", D);
    snprintf(title, sizeof title, "%s: %s, %d stage%s%s, %d micro-batch%s - bubble %.1f%%, step %s (%s)",
             t->model ? t->model : "model", t->schedule, t->nstages, t->nstages == 1 ? "" : "s", reps, t->nmb,
             t->nmb == 1 ? "" : "es", 100.0 * bubble, sstep, t->source);

    /* the axis: ticks of 1, 2 or 5 x 10^k, the plot wide enough for their labels */
    double dt = tick_step(step), widest = 0;
    int nticks = 0;
    for (int k = 0; step > 0 && k * dt <= step * (1 + 1e-9) && k <= 100; k++, nticks++) {
        pg_fmt_si(lbl, sizeof lbl, k * dt, unit);
        if (text_w(lbl, 6.0) > widest)
            widest = text_w(lbl, 6.0);
    }
    int plot_w = PLOT_W;
    if (nticks > 1 && (widest + 12) * (step / dt) > plot_w)
        plot_w = (int)ceil((widest + 12) * (step / dt));
    double scale = step > 0 ? plot_w / step : 0.0;
    int width = left + plot_w + RIGHT;
    if (left + text_w(title, 8.6) + RIGHT > width)
        width = (int)ceil(left + text_w(title, 8.6) + RIGHT);
    /* the legend: its entries in lines as wide as the plot */
    const char *entry[CAT__COUNT + 2];
    int ecat[CAT__COUNT + 2], nentry = 0;
    for (int k = 0; k < CAT__COUNT; k++)
        if (k <= CAT_W || used[k])
            ecat[nentry] = k, entry[nentry++] = cat_label[k];
    ecat[nentry] = -1, entry[nentry++] = "idle (bubble)";
    if (faded)
        ecat[nentry] = -2, entry[nentry++] = "the steps before and after (faded)";
    int lines = 1;
    for (int e = 0, lw = 0; e < nentry; e++) {
        int ew = 22 + (int)ceil(text_w(entry[e], 7.0)) + 20;
        if (lw > 0 && lw + ew > width - left - RIGHT)
            lines++, lw = 0;
        lw += ew;
    }
    int plot_h = p * (ROW_H + ROW_GAP) - ROW_GAP;
    int height = TOP + plot_h + 64 + 20 * lines + (chunks > 1 ? 16 : 0);

    fprintf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n", width, height, width, height);
    fprintf(o, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", width, height);
    fprintf(o, "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">", left);
    xml_text(o, title);
    fprintf(o, "</text>\n");

    /* rows: label, outline; idle time stays white */
    for (int st = 0; st < p; st++) {
        int y = TOP + st * (ROW_H + ROW_GAP);
        double b = step > 0 ? 1.0 - t->busy[st] / step : 0.0;
        char row[48];
        if (D > 1)
            snprintf(row, sizeof row, "stage %d replica %d", st % t->nstages, st / t->nstages);
        else
            snprintf(row, sizeof row, "stage %d", st);
        fprintf(o, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"end\">%s</text>\n", left - 8,
                y + ROW_H / 2 - 1, row);
        fprintf(o, "<text x=\"%d\" y=\"%d\" font-size=\"9\" fill=\"#666666\" text-anchor=\"end\">idle %.1f%%</text>\n",
                left - 8, y + ROW_H / 2 + 10, 100.0 * b);
        fprintf(o, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#ffffff\" stroke=\"#bbbbbb\" "
                   "stroke-width=\"1\"/>\n", left, y, plot_w, ROW_H);
    }
    /* the boxes */
    for (int i = 0; i < t->nbox; i++) {
        const pg_timeline_box *a = &t->box[i];
        int cat = category(a->kind);
        if (a->stage < 0 || a->stage >= p || cat < 0 || !(a->dur > 0))
            continue;
        int y = TOP + a->stage * (ROW_H + ROW_GAP), h = ROW_H - 2, y0 = y + 1;
        double x = left + a->start * scale, w = a->dur * scale;
        char fill[8], tip[160], txt[48];
        double light = cat <= CAT_W && chunks > 1 && a->chunk >= 0 && a->chunk < 64
                           ? 0.55 * place[a->chunk] / (chunks - 1) : 0.0;
        shade(cat_fill[cat], light, fill);
        if (is_message(a->kind)) { /* messages: the lower half of the row */
            h = ROW_H / 2 - 1;
            y0 = y + ROW_H / 2;
        }
        int n = a->other_step < 0 ? snprintf(tip, sizeof tip, "the step before: ")
                : a->other_step > 0 ? snprintf(tip, sizeof tip, "the step after: ") : 0;
        if (cat <= CAT_W)
            snprintf(tip + n, sizeof tip - (size_t)n, "%s mb %d chunk %d", cat == CAT_F ? "F" : cat == CAT_B ? "B" : "W",
                     a->mb, a->chunk);
        else if (cat == CAT_DP)
            snprintf(tip + n, sizeof tip - (size_t)n, "dp reduce");
        else if (cat >= CAT_DATA)
            snprintf(tip + n, sizeof tip - (size_t)n, "%s", cat_label[cat]);
        else if (a->mb >= 0)
            snprintf(tip + n, sizeof tip - (size_t)n, "%s mb %d chunk %d", pg_act_name((pg_act_kind)a->kind), a->mb,
                     a->chunk);
        else
            snprintf(tip + n, sizeof tip - (size_t)n, "%s", pg_act_name((pg_act_kind)a->kind));
        fprintf(o, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" stroke=\"#ffffff\" "
                   "stroke-width=\"0.75\"%s><title>%s</title></rect>\n", x, y0, w, h, fill,
                a->other_step ? " fill-opacity=\"0.35\"" : "", tip);
        const char *l = cat <= CAT_W && !a->other_step ? box_label(a, chunks, w, txt, sizeof txt) : NULL;
        if (l)
            fprintf(o, "<text x=\"%.2f\" y=\"%d\" font-size=\"11\" fill=\"%s\" text-anchor=\"middle\">%s</text>\n",
                    x + w / 2, y + ROW_H / 2 + 4, light > 0.25 ? "#222222" : "#ffffff", l);
    }
    /* the axis: time, or the cost model's flops */
    int ay = TOP + plot_h + 8;
    fprintf(o, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333333\" stroke-width=\"1\"/>\n", left, ay,
            left + plot_w, ay);
    for (int k = 0; k < nticks; k++) {
        double x = left + k * dt * scale;
        pg_fmt_si(lbl, sizeof lbl, k * dt, unit);
        fprintf(o, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#333333\" stroke-width=\"1\"/>\n", x, ay,
                x, ay + 4);
        fprintf(o, "<text x=\"%.2f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%s</text>\n", x, ay + 16,
                k == 0 ? "0" : lbl);
    }
    fprintf(o, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\" fill=\"#666666\">%s</text>\n",
            left + plot_w, ay + 30, t->seconds ? "time" : "estimated flops (the cost model's units, not time)");
    /* the legend: F, B, W, what else is drawn, idle (and the faded steps around) */
    int ly = ay + 40;
    double lx = left;
    for (int e = 0; e < nentry; e++) {
        int ew = 22 + (int)ceil(text_w(entry[e], 7.0)) + 20;
        if (lx > left && lx + ew > width - RIGHT)
            lx = left, ly += 20;
        if (ecat[e] >= 0)
            fprintf(o, "<rect x=\"%.0f\" y=\"%d\" width=\"16\" height=\"14\" fill=\"%s\"/>\n", lx, ly, cat_fill[ecat[e]]);
        else if (ecat[e] == -1)
            fprintf(o, "<rect x=\"%.0f\" y=\"%d\" width=\"16\" height=\"14\" fill=\"#ffffff\" stroke=\"#bbbbbb\"/>\n", lx, ly);
        else
            fprintf(o, "<rect x=\"%.0f\" y=\"%d\" width=\"16\" height=\"14\" fill=\"%s\" fill-opacity=\"0.35\"/>\n", lx,
                    ly, cat_fill[CAT_F]);
        fprintf(o, "<text x=\"%.0f\" y=\"%d\" font-size=\"12\">%s</text>\n", lx + 22, ly + 11, entry[e]);
        lx += ew;
    }
    if (chunks > 1)
        fprintf(o, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#666666\">labels: micro-batch\xc2\xb7" "chunk; "
                   "a stage's first chunk darkest, its later chunks lighter</text>\n", left, ly + 30);
    fprintf(o, "</svg>\n");
}

/* The simulated step as a timeline: the passes in stage and action order. */
static int draw(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, double **start, double **dur,
                double **own, const pg_sim *sim, int seconds, FILE *o)
{
    int p = s->nstages, n = 0;
    for (int st = 0; st < p; st++)
        n += s->stage[st].n;
    pg_timeline_box *box = malloc((size_t)(n > 0 ? n : 1) * sizeof *box);
    if (!box)
        return -1;
    char kind[64];
    pg_schedule_name(m, kind, sizeof kind);
    pg_timeline t = { m->name, kind, p, s->nmb, 0, sim->busy, seconds,
                      !seconds ? "estimated flops, messages free"
                      : !strcmp(msg_words(c, seconds), "measured messages") ? "measured layer and message times"
                                                        : "measured layer times, modelled messages", 0, box, 1 };
    t.step = pg_sim_step_time(sim, c);
    for (int st = 0; st < p; st++) {
        const pg_stage_sched *ss = &s->stage[st];
        for (int i = 0; i < ss->n; i++) {
            const pg_act *a = &ss->act[i];
            /* local work for its cost; a message for what it keeps its stage busy */
            int message = pg_act_is_send(a->kind) || pg_act_is_recv(a->kind);
            double d = message ? own[st][i] : dur[st][i];
            if (d > 0)
                box[t.nbox++] = (pg_timeline_box){ st, (int)a->kind, a->mb, a->chunk, start[st][i], d, 0 };
        }
    }
    pg_timeline_svg(&t, o);
    free(box);
    return 0;
}

int pg_schedule_svg(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, int seconds, FILE *out)
{
    pg_sim sim;
    int rc = -1;
    if (pg_sim_run_timed(&sim, m, s, c) == SIM_OK)
        rc = draw(m, s, c, sim.start, sim.dur, sim.own, &sim, seconds, out);
    pg_sim_timed_free(&sim);
    return rc;
}

typedef struct svg_job {
    const ir_model *m;
    const pg_schedule *s;
    const pg_sched_costs *c;
    int seconds;
} svg_job;

static int svg_fill(FILE *f, void *arg, char *err, size_t errlen)
{
    const svg_job *j = arg;
    if (pg_schedule_svg(j->m, j->s, j->c, j->seconds, f) == 0)
        return 0;
    snprintf(err, errlen, "the schedule cannot be simulated (or out of memory)");
    return -1;
}

int pg_schedule_svg_write(const ir_model *m, const pg_schedule *s, const pg_sched_costs *c, int seconds,
                          const char *path, pg_diag *d)
{
    pg_loc loc = { path, 0, 0 };
    svg_job j = { m, s, c, seconds };
    char err[4096 + 256];
    /* beside it, then renamed: a full disk leaves the previous drawing whole */
    if (pg_io_write_printed(path, svg_fill, &j, err, sizeof err) != 0) {
        pg_error(d, loc, "cannot write the timeline: %s", err);
        return -1;
    }
    return 0;
}

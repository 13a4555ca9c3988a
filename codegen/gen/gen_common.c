/* codegen/gen/gen_common.c — the small helpers every generation file shares
 * (gen_internal.h): sizes and gradient accumulators, finding chunks and slots,
 * names in the generated C, JSON text. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen_internal.h"

void sfmt(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* ---- sizes and gradient accumulators ---- */

int64_t acc_numel(const ir_param *P) { return al_plan(pg_shape_numel(&P->shape) * 4) / 4; }

int64_t acc_block_bytes(const ir_param *P, int n)
{
    return pg_bytes_mul(pg_bytes_add(pg_bytes_mul(n - 1, acc_numel(P)), pg_shape_numel(&P->shape)), 4);
}

void shape_rows(const pg_shape *s, char *buf, size_t n)
{
    size_t o = (size_t)snprintf(buf, n, "[r");
    for (int i = 0; i < s->rank && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, ", %" PRId64, s->dim[i]);
    if (o < n)
        sfmt(buf + o, n - o, "]");
}

int layer_uses(const ir_layer *L, int p)
{
    for (int k = 0; k < L->nparam && k < PG_MAX_LAYER_PARAMS; k++)
        if (L->param[k] == p)
            return 1;
    return 0;
}

/* Gradient accumulators of param p on stage s: one per using layer, in layer
 * order, so the gradient (their sum in layer order) is made by the same float
 * operations whatever the stage count. Counted once for the model, in one
 * pass over the layers (g->nacc), with each use's own index (g->acc_at). */
int count_uses(pg_gen *g)
{
    const ir_model *m = g->m;
    g->nacc = calloc((size_t)(m->nparams ? m->nparams : 1) * (size_t)m->nstages, sizeof *g->nacc);
    g->acc_at = calloc((size_t)(m->nlayers ? m->nlayers : 1) * PG_MAX_LAYER_PARAMS, sizeof *g->acc_at);
    if (!g->nacc || !g->acc_at)
        return -1;
    for (int i = 0; i < m->nlayers; i++) {
        const ir_layer *L = &m->layers[i];
        for (int k = 0; k < L->nparam && k < PG_MAX_LAYER_PARAMS; k++) {
            int p = L->param[k], seen = -1;
            for (int j = 0; j < k; j++) /* a layer counts once per parameter */
                if (L->param[j] == p)
                    seen = j;
            if (p < 0 || p >= m->nparams || L->stage < 0 || L->stage >= m->nstages)
                continue;
            g->acc_at[i * PG_MAX_LAYER_PARAMS + k] = seen >= 0 ? g->acc_at[i * PG_MAX_LAYER_PARAMS + seen] : g->nacc[p * m->nstages + L->stage]++;
        }
    }
    return 0;
}

int stage_nacc(const pg_gen *g, int s, int p)
{
    return g->nacc[p * g->m->nstages + s];
}

int nacc_of(const pg_gen *g, int s, int p)
{
    int n = stage_nacc(g, s, p);
    return n ? n : 1;
}

/* cross-stage tie: a tie mode and two or more using stages */
int is_tied(const ir_param *P)
{
    return P->tie != TIE_NONE && P->stage_mask && (P->stage_mask & (P->stage_mask - 1));
}

/* the stage table needs nacc per stage: several uses somewhere, or tied */
int needs_nacc_table(const pg_gen *g, int p)
{
    const ir_model *m = g->m;
    if (is_tied(&m->params[p]))
        return 1;
    for (int s = 0; s < m->nstages; s++)
        if (stage_nacc(g, s, p) > 1)
            return 1;
    return 0;
}


/* ---- chunks, slots ---- */

em_chunk *find_chunk(em_stage *S, int chunk)
{
    for (int i = 0; i < S->nchunks; i++)
        if (S->ch[i].chunk == chunk)
            return &S->ch[i];
    return NULL;
}

const em_chunk *find_chunk_c(const em_stage *S, int chunk)
{
    for (int i = 0; i < S->nchunks; i++)
        if (S->ch[i].chunk == chunk)
            return &S->ch[i];
    return NULL;
}

int index_fwd_slots(em_stage *S, const pg_stage_sched *ss, int nmb)
{
    S->fwd_slot = malloc((size_t)(S->nchunks > 0 ? S->nchunks : 1) * (size_t)(nmb > 0 ? nmb : 1) * sizeof(int));
    if (!S->fwd_slot)
        return -1;
    for (int i = 0; i < S->nchunks * nmb; i++)
        S->fwd_slot[i] = -1;
    for (int a = 0; a < ss->n; a++) { /* the first FWD of each (chunk, mb) */
        const pg_act *A = &ss->act[a];
        if (A->kind != PG_FWD || A->mb < 0 || A->mb >= nmb)
            continue;
        for (int i = 0; i < S->nchunks; i++)
            if (S->ch[i].chunk == A->chunk && S->fwd_slot[i * nmb + A->mb] < 0)
                S->fwd_slot[i * nmb + A->mb] = A->slot;
    }
    return 0;
}

int stage_fwd_slot(const em_stage *S, int nmb, int chunk, int mb)
{
    if (mb < 0 || mb >= nmb || !S->fwd_slot)
        return -1;
    for (int i = 0; i < S->nchunks; i++)
        if (S->ch[i].chunk == chunk)
            return S->fwd_slot[i * nmb + mb];
    return -1;
}

int64_t slot_off(const pg_memplan *mp, const em_chunk *ch, int sb, int slot)
{
    return mp->buf[ch->sb[sb].mp].offset + (int64_t)slot * ch->sb[sb].stride;
}

/* the stage holding chunk c: the schedule's placement (schedule.h) */
int chunk_stage(const pg_gen *g, int c)
{
    return c >= 0 && c < g->s->nchunks && c < 64 ? g->s->chunk_stage[c] : c % g->nstages;
}

void chunk_layers(const ir_model *m, int c, int *first, int *last)
{
    *first = *last = -1;
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].chunk == c) {
            if (*first < 0)
                *first = i;
            *last = i;
        }
}

/* ---- names in the generated C ---- */

/* A C identifier for a buffer described as `what`: "h.0.ln_1 out" ->
 * h_0_ln_1_out, "gradient of h.0.ln_1 out" -> d_h_0_ln_1_out. */
void c_local(const char *what, char *buf, size_t n)
{
    size_t i = 0;
    if (!strncmp(what, "gradient of ", 12)) {
        what += 12;
        sfmt(buf, n, "d_");
        i = 2;
    } else if (what[0] >= '0' && what[0] <= '9') {
        sfmt(buf, n, "t_");
        i = 2;
    }
    for (; *what && i + 1 < n; what++) {
        char c = *what;
        buf[i++] = (char)(((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) ? c : '_');
    }
    buf[i] = 0;
}

int c_own_name(const char *id)
{
    static const char *const own[] = {"c", "A", "io", "r", "F", "first", "int", "float", "char", "double", "long",
                                      "short", "const", "return", "if", "else", "for", "while", "do", "static",
                                      "void", "unsigned", "signed", "struct", "union", "enum", "switch", "case",
                                      "default", "break", "continue", "goto", "sizeof", "auto", "register",
                                      "extern", "volatile", "typedef", "inline", "restrict"};
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++)
        if (!strcmp(id, own[k]))
            return 1;
    return !strncmp(id, "pg_", 3) || !strncmp(id, "PG_", 3);
}

/* The local holding this micro-batch's rows of the model input: its name in
 * the .pipe (in_<name> where that is one of the functions' own names). */
void input_local(const ir_model *m, char *buf, size_t n)
{
    char id[72];
    c_local(m->input_name, id, sizeof id);
    if (c_own_name(id))
        sfmt(buf, n, "in_%s", id);
    else
        sfmt(buf, n, "%s", id);
}

void cident(const char *s, char *buf, size_t n)
{
    size_t i = 0;
    for (; *s && i + 1 < n; s++, i++) {
        char c = *s;
        if (c >= 'a' && c <= 'z')
            c = (char)(c - 'a' + 'A');
        else if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            c = '_';
        buf[i] = c;
    }
    buf[i] = 0;
}

const char *plocal(const em_chunk *ch, int p, int grad) { return ch->pl[p][grad]; }

/* ---- JSON text ---- */

void json_str(FILE *o, const char *s)
{
    fputc('"', o);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(o, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(o, "\\u%04x", ch);
        else
            fputc(ch, o);
    }
    fputc('"', o);
}

void json_shape(FILE *o, const pg_shape *s)
{
    fputc('[', o);
    for (int i = 0; i < s->rank; i++)
        fprintf(o, "%s%" PRId64, i ? ", " : "", s->dim[i]);
    fputc(']', o);
}

void json_num(FILE *o, double v) { fprintf(o, "%.17g", v); }

const char *base_name(const char *p)
{
    const char *b = p ? strrchr(p, '/') : NULL;
    return b ? b + 1 : (p ? p : "");
}


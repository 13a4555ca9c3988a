/* codegen/gen/layers/dims.c — the layers that rearrange per-sample dims:
 * flatten and reshape (the same elements in another shape: a copy each way),
 * transpose(i, j) (two dims swapped; its backward swaps them back) and
 * mean(dim) (the mean over one dim, which is dropped). No parameters
 * (runtime: pg_copy, pg_swap_dims, pg_mean_*). */
#include <inttypes.h>

#include "gen/gen_layer.h"

/* the product of dims [lo, hi) of s (1 when empty) */
static int64_t span(const pg_shape *s, int lo, int hi)
{
    int64_t p = 1;
    for (int k = lo; k < hi; k++)
        p *= s->dim[k];
    return p;
}

/* ---- flatten, reshape ---- */

static void copy_fwd(em_out *e, em_layer *a)
{
    fprintf(e->o, "    PG_TRY(pg_copy(c, %s, %s, %s));\n", a->y, a->x, a->cnt);
}

static void copy_bwd_b(em_out *e, em_layer *a)
{
    if (!a->dx_wanted)
        return;
    em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_copy(c, %s, %s, %s)); /* %s */\n", a->dx, a->dy, a->cnt, a->L->name);
}

static void reshape_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    fprintf(o, "\"shape\": ");
    json_shape(o, &L->out);
}

const gen_layer_kind gen_flatten = {.fwd = copy_fwd, .bwd_b = copy_bwd_b};
const gen_layer_kind gen_reshape = {.fwd = copy_fwd, .bwd_b = copy_bwd_b, .json_attrs = reshape_attrs};

/* ---- transpose(i, j): [outer, a, mid, b, inner] -> [outer, b, mid, a, inner] ---- */

static void swap_call(em_out *e, const pg_shape *s, int i, int j, const char *from, const char *to, const char *count,
                      const char *note)
{
    if (i == j) {
        fprintf(e->o, "    PG_TRY(pg_copy(c, %s, %s, %s));%s\n", to, from, count, note);
        return;
    }
    if (i > j) {
        int t = i;
        i = j;
        j = t;
    }
    fprintf(e->o, "    PG_TRY(pg_swap_dims(c, r * %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                  ", %s, %s));%s\n",
            span(s, 0, i), s->dim[i], span(s, i + 1, j), s->dim[j], span(s, j + 1, s->rank), from, to, note);
}

static void tr_fwd(em_out *e, em_layer *a)
{
    swap_call(e, &a->in->shape, a->L->axis[0], a->L->axis[1], a->x, a->y, a->cnt, "");
}

/* dy has the output's shape: swapping the same dims of it gives dx */
static void tr_bwd_b(em_out *e, em_layer *a)
{
    char note[160];
    if (!a->dx_wanted)
        return;
    em_dx(e, a);
    sfmt(note, sizeof note, " /* %s */", a->L->name);
    swap_call(e, &a->out->shape, a->L->axis[0], a->L->axis[1], a->dy, a->dx, a->cnt, note);
}

static void tr_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    fprintf(o, "\"dims\": [%d, %d]", L->axis[0], L->axis[1]);
}

const gen_layer_kind gen_transpose = {.fwd = tr_fwd, .bwd_b = tr_bwd_b, .json_attrs = tr_attrs};

/* ---- mean(dim): [outer, d, inner] -> [outer, inner] ---- */

static void mean_fwd(em_out *e, em_layer *a)
{
    const pg_shape *s = &a->in->shape;
    int k = a->L->axis[0];
    fprintf(e->o, "    PG_TRY(pg_mean_fwd(c, r * %" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %s));\n", span(s, 0, k),
            s->dim[k], span(s, k + 1, s->rank), a->x, a->y);
}

static void mean_bwd_b(em_out *e, em_layer *a)
{
    const pg_shape *s = &a->in->shape;
    int k = a->L->axis[0];
    if (!a->dx_wanted)
        return;
    em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_mean_bwd_in(c, r * %" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %s)); /* %s */\n",
            span(s, 0, k), s->dim[k], span(s, k + 1, s->rank), a->dy, a->dx, a->L->name);
}

static void mean_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    fprintf(o, "\"dim\": %d", L->axis[0]);
}

const gen_layer_kind gen_mean = {.fwd = mean_fwd, .bwd_b = mean_bwd_b, .json_attrs = mean_attrs};

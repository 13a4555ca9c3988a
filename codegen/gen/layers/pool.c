/* codegen/gen/layers/pool.c — pooling and resampling of images [C, H, W]:
 * maxpool2d and avgpool2d (the window a pg_conv constant, as conv.c's),
 * global_avgpool ([C, H, W] -> [C], the mean of each plane) and upsample
 * (nearest or bilinear by an integer scale). No parameters; maxpool's
 * backward finds each window's maximum again in x, so nothing is saved
 * (runtime: pg_maxpool2d_*, pg_avgpool2d_*, pg_mean_*, pg_upsample_*). */
#include <inttypes.h>

#include "gen/gen_layer.h"

static const char *op_of(const ir_layer *L) { return L->kind == LK_MAXPOOL2D ? "maxpool2d" : "avgpool2d"; }

static void pool_fwd(em_out *e, em_layer *a)
{
    pg_conv g = gen_conv_geom(a->L);
    char gt[512];
    gen_conv_text(&g, gt, sizeof gt);
    fprintf(e->o, "    PG_TRY(pg_%s_fwd(c, r,\n        %s,\n        %s, %s));\n", op_of(a->L), gt, a->x, a->y);
}

static void pool_bwd_b(em_out *e, em_layer *a)
{
    if (!a->dx_wanted)
        return;
    pg_conv g = gen_conv_geom(a->L);
    char gt[512];
    gen_conv_text(&g, gt, sizeof gt);
    em_dx(e, a);
    if (a->L->kind == LK_MAXPOOL2D) {
        em_x(e, a);
        fprintf(e->o, "    PG_TRY(pg_maxpool2d_bwd_in(c, r,\n        %s,\n        %s, %s, %s)); /* %s */\n", gt, a->x,
                a->dy, a->dx, a->L->name);
    } else {
        fprintf(e->o, "    PG_TRY(pg_avgpool2d_bwd_in(c, r,\n        %s,\n        %s, %s)); /* %s */\n", gt, a->dy,
                a->dx, a->L->name);
    }
}

static void pool_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    fprintf(o, "\"kernel\": [%" PRId64 ", %" PRId64 "], \"stride\": [%" PRId64 ", %" PRId64 "], \"padding\": [%" PRId64
               ", %" PRId64 "]",
            L->kernel[0], L->kernel[1], L->stride[0], L->stride[1], L->padding[0], L->padding[1]);
}

const gen_layer_kind gen_pool2d = {.fwd = pool_fwd, .bwd_b = pool_bwd_b, .json_attrs = pool_attrs};

/* ---- global_avgpool: the mean of each of the r C planes ---- */

static void gap_fwd(em_out *e, em_layer *a)
{
    const pg_shape *s = &a->in->shape;
    fprintf(e->o, "    PG_TRY(pg_mean_fwd(c, r * %" PRId64 ", %" PRId64 ", 1, %s, %s));\n", s->dim[0],
            s->dim[1] * s->dim[2], a->x, a->y);
}

static void gap_bwd_b(em_out *e, em_layer *a)
{
    const pg_shape *s = &a->in->shape;
    if (!a->dx_wanted)
        return;
    em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_mean_bwd_in(c, r * %" PRId64 ", %" PRId64 ", 1, %s, %s)); /* %s */\n", s->dim[0],
            s->dim[1] * s->dim[2], a->dy, a->dx, a->L->name);
}

const gen_layer_kind gen_global_avgpool = {.fwd = gap_fwd, .bwd_b = gap_bwd_b};

/* ---- upsample ---- */

static void up_fwd(em_out *e, em_layer *a)
{
    const pg_shape *s = &a->in->shape;
    fprintf(e->o, "    PG_TRY(pg_upsample_fwd(c, r * %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %s, %s));\n",
            s->dim[0], s->dim[1], s->dim[2], a->L->scale, a->L->bilinear, a->x, a->y);
}

static void up_bwd_b(em_out *e, em_layer *a)
{
    const pg_shape *s = &a->in->shape;
    if (!a->dx_wanted)
        return;
    em_dx(e, a);
    fprintf(e->o,
            "    PG_TRY(pg_upsample_bwd_in(c, r * %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %s, %s)); /* %s */\n",
            s->dim[0], s->dim[1], s->dim[2], a->L->scale, a->L->bilinear, a->dy, a->dx, a->L->name);
}

static void up_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    fprintf(o, "\"scale\": %" PRId64 ", \"mode\": \"%s\"", L->scale, L->bilinear ? "bilinear" : "nearest");
}

const gen_layer_kind gen_upsample = {.fwd = up_fwd, .bwd_b = up_bwd_b, .json_attrs = up_attrs};

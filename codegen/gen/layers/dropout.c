/* codegen/gen/layers/dropout.c — dropout(p), deterministic: the mask comes from
 * (seed, step, layer, sample row, element), so a recompute, another stage
 * count or a resumed run draws the same one; none in inference
 * (runtime: pg_dropout_*). */
#include <inttypes.h>

#include "gen/gen_layer.h"

static void fwd(em_out *e, em_layer *a)
{
    fprintf(e->o, "    PG_TRY(pg_dropout_fwd(c, r, %" PRId64 ", io->infer ? 0.0f : %.9gf, pg_dropout_seed(io->seed, io->step, %d), io->first_row, "
                  "%s, %s)); /* none in inference */\n",
            a->in->numel, a->L->p, a->i, a->x, a->y);
}

static void bwd_b(em_out *e, em_layer *a)
{
    if (!a->dx_wanted)
        return;
    em_dx(e, a);
    fprintf(e->o, "    PG_TRY(pg_dropout_bwd_in(c, r, %" PRId64 ", %.9gf, pg_dropout_seed(io->seed, io->step, %d), io->first_row, %s, %s)); /* %s */\n",
            a->in->numel, a->L->p, a->i, a->dy, a->dx, a->L->name);
}

static void json_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    (void)m;
    fprintf(o, "\"p\": ");
    json_num(o, L->p);
}

const gen_layer_kind gen_dropout = {.per_token = 1, /* none in inference */
                                    .fwd = fwd, .bwd_b = bwd_b, .json_attrs = json_attrs};

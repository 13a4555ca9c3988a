/* dsl/check.c — pg_check: the semantic checker's driver. Collects the top-level
 * declarations (model, const, input, target, param, block, train, tie), runs the
 * static structure checks, expands the items into layers with shapes (expand.c),
 * checks the loss against the target, assigns chunks and stages (stages.c) and
 * moves the result into the model's arena. The helpers every checker file
 * shares (reporting, name tables, allocation) are check_util.c's. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "check_ctx.h"
#include "cost.h"

/* ---- declarations -------------------------------------------------------- */

static void declare_const(chk *c, const ast_stmt *st) {
    int prev = chk_find_const(c, st->name);
    if (prev >= 0) {
        if (chk_error(c, st->name_loc, "duplicate constant '%s'", st->name))
            chk_note(c, c->consts[prev].loc, "'%s' is first defined here", st->name);
        return;
    }
    pg_val v;
    if (chk_eval(c, NULL, st->value, &v, 0) != 0) return;
    c->consts = chk_grow(c->consts, &c->capconsts, c->nconsts + 1, sizeof *c->consts);
    chk_index_put(&c->const_ix, st->name, c->nconsts);
    c->consts[c->nconsts++] = (chk_const){st->name, st->name_loc, v};
}

static void declare_io(chk *c, const ast_stmt *st, const ast_stmt **seen) {
    const char *what = st->kind == ST_INPUT ? "input" : "target";
    if (*seen) {
        if (chk_error(c, st->loc, "duplicate %s '%s': a model has one %s", what, st->name, what))
            chk_note(c, (*seen)->loc, "the %s is first declared here", what);
        return;
    }
    *seen = st;
    pg_dtype dt;
    pg_shape s;
    int bad = chk_dtype(c, st->dtype, st->dtype_loc, &dt);
    if (!bad && dt == DT_BF16) {
        chk_error(c, st->dtype_loc, "%s dtype must be f32 or i32, not bf16 (use `precision = bf16` in train)", what);
        bad = 1;
    }
    if (st->kind == ST_TARGET && st->dims.n == 0) /* `target y : i32` (or i32[]): one class index per sample */
        memset(&s, 0, sizeof s);
    else if (chk_eval_dims(c, &st->dims, st->loc, &s) != 0)
        bad = 1;
    if (bad) return;
    if (st->kind == ST_INPUT) {
        c->m->input_name = chk_strdup(c, st->name);
        c->m->input_dtype = dt;
        c->m->input = s;
    } else {
        c->m->target_name = chk_strdup(c, st->name);
        c->m->target_dtype = dt;
        c->m->target = s;
    }
}

/* param options: (init = normal(0.02) | uniform(s) | zeros | ones) */
static void param_options(chk *c, const ast_stmt *st, chk_nparam *p) {
    p->init = INIT_NORMAL;
    p->scale = 0.02;
    for (const ast_arg *a = st->args; a; a = a->next) {
        const char *key = a->key ? a->key : "init";
        if (strcmp(key, "init") != 0) {
            static const char *const cands[] = {"init"};
            char dm[128];
            chk_error(c, a->key_loc, "param has no option '%s'%s", key, chk_didyoumean(dm, sizeof dm, key, cands, 1));
            p->ok = 0;
            continue;
        }
        const ast_expr *e = a->value;
        const char *fn = (e->kind == EX_NAME || e->kind == EX_CALL) ? e->str : NULL;
        static const char *const inits[] = {"normal", "uniform", "zeros", "ones"};
        int k = -1;
        for (int i = 0; fn && i < 4; i++)
            if (strcmp(fn, inits[i]) == 0) k = i;
        if (k < 0) {
            char dm[128];
            chk_error(c, e->loc, "unknown init '%s'%s (expected normal(std), uniform(bound), zeros or ones)",
                      fn ? fn : "?", fn ? chk_didyoumean(dm, sizeof dm, fn, inits, 4) : "");
            p->ok = 0;
            continue;
        }
        p->init = k == 0 ? INIT_NORMAL : k == 1 ? INIT_UNIFORM : k == 2 ? INIT_ZEROS : INIT_ONES;
        if (k >= 2) {
            p->scale = 0;
            if (e->kind == EX_CALL && e->args) {
                chk_error(c, e->loc, "%s takes no arguments", fn);
                p->ok = 0;
            }
            continue;
        }
        if (e->kind != EX_CALL || !e->args || e->args->next || e->args->key) {
            chk_error(c, e->loc, "%s needs one number, e.g. %s(0.02)", fn, fn);
            p->ok = 0;
            continue;
        }
        pg_val v;
        if (chk_eval(c, NULL, e->args->value, &v, 0) != 0) { p->ok = 0; continue; }
        if (!(v.f > 0)) {
            chk_error(c, e->args->value->loc, "%s scale = %g is out of range: must be > 0", fn, v.f);
            p->ok = 0;
            continue;
        }
        p->scale = v.f;
    }
}

static void declare_param(chk *c, const ast_stmt *st) {
    int prev = chk_find_nparam(c, st->name);
    if (prev >= 0) {
        if (chk_error(c, st->name_loc, "duplicate parameter '%s'", st->name))
            chk_note(c, c->nparams[prev].st->name_loc, "'%s' is first declared here", st->name);
        return;
    }
    chk_nparam p = {.st = st, .index = -1, .first_user = -1, .ok = 1};
    if (chk_dtype(c, st->dtype, st->dtype_loc, &p.dt) != 0) p.ok = 0;
    else if (p.dt != DT_F32) {
        chk_error(c, st->dtype_loc, "parameter '%s' must be f32 (weights are kept in f32; `precision = bf16` "
                  "sets the compute precision)", st->name);
        p.ok = 0;
    }
    if (chk_eval_dims(c, &st->dims, st->loc, &p.shape) != 0) p.ok = 0;
    param_options(c, st, &p);
    c->nparams = chk_grow(c->nparams, &c->capnparams, c->nnparams + 1, sizeof *c->nparams);
    chk_index_put(&c->nparam_ix, st->name, c->nnparams);
    c->nparams[c->nnparams++] = p;
}

static void declare_block(chk *c, const ast_stmt *st) {
    int prev = chk_find_block(c, st->name);
    if (prev >= 0) {
        if (chk_error(c, st->name_loc, "duplicate block '%s'", st->name))
            chk_note(c, c->blocks[prev].st->name_loc, "'%s' is first defined here", st->name);
        return;
    }
    if (layer_kind_find(st->name) >= 0) {
        chk_error(c, st->name_loc, "block '%s' has the name of a layer kind", st->name);
        return;
    }
    chk_block b = {st, 0, {0}};
    for (int i = 0; i < st->nformals; i++) {
        int j = chk_index_put(&b.formals, st->formals[i], i);
        if (j >= 0 && chk_error(c, st->formal_locs[i], "duplicate block parameter '%s'", st->formals[i]))
            chk_note(c, st->formal_locs[j], "'%s' is first declared here", st->formals[i]);
    }
    c->blocks = chk_grow(c->blocks, &c->capblocks, c->nblocks + 1, sizeof *c->blocks);
    chk_index_put(&c->block_ix, st->name, c->nblocks);
    c->blocks[c->nblocks++] = b;
}

static void declare_tie(chk *c, const ast_stmt *st) {
    int np = chk_find_nparam(c, st->name);
    if (np < 0) {
        const char **cands = chk_xmalloc(sizeof *cands * (size_t)(c->nnparams + 1));
        for (int i = 0; i < c->nnparams; i++) cands[i] = c->nparams[i].st->name;
        char dm[128];
        chk_error(c, st->name_loc, "tie of unknown parameter '%s'%s", st->name,
                  chk_didyoumean(dm, sizeof dm, st->name, cands, c->nnparams));
        free(cands);
        return;
    }
    chk_nparam *p = &c->nparams[np];
    if (p->tie) {
        if (chk_error(c, st->loc, "parameter '%s' is tied twice", st->name))
            chk_note(c, p->tie->loc, "first tied here");
        return;
    }
    static const char *const modes[] = {"replicate", "transmit"};
    if (strcmp(st->mode, "replicate") == 0) p->tie_mode = TIE_REPLICATE;
    else if (strcmp(st->mode, "transmit") == 0) p->tie_mode = TIE_TRANSMIT;
    else {
        char dm[128];
        chk_error(c, st->mode_loc, "unknown tie mode '%s'%s (expected replicate or transmit)", st->mode,
                  chk_didyoumean(dm, sizeof dm, st->mode, modes, 2));
        return;
    }
    p->tie = st;
}

/* ---- the loss against the target ---------------------------------------- */

static void check_loss(chk *c, const chain *ch) {
    ir_model *m = c->m;
    if (!ch->known || c->nlayers == 0 || !m->target_name) return;
    const ir_layer *last = &c->layers[c->nlayers - 1];
    pg_loc at = c->have_loss ? c->loss_loc : last->loc;
    char a[96], b[96];
    pg_shape_str(ch->dt, &ch->shape, a, sizeof a);
    pg_shape_str(m->target_dtype, &m->target, b, sizeof b);
    if (m->train.loss == LOSS_CROSS_ENTROPY) {
        pg_shape want = ch->shape;
        want.rank = ch->shape.rank - 1;
        if (ch->shape.rank < 1 || m->target_dtype != DT_I32 || !pg_shape_eq(&want, &m->target)) {
            char w[96];
            pg_shape_str(DT_I32, &want, w, sizeof w);
            if (chk_error(c, at, "cross_entropy over the model output %s needs target %s (%s), but the target is %s",
                          a, ch->shape.rank >= 1 ? w : "i32[]",
                          ch->shape.rank == 1 ? "one class index per sample: `target NAME : i32`" : "class indices", b))
                chk_note(c, last->loc, "the last layer '%s' outputs %s", last->name, a);
        }
        return;
    }
    if (m->target_dtype != DT_F32 || !pg_shape_eq(&ch->shape, &m->target) || ch->dt != DT_F32) {
        if (chk_error(c, at, "%s needs the model output and the target to have one shape, but the output is %s "
                      "and the target is %s", m->train.loss == LOSS_MSE_SUM ? "mse(sum)" : "mse(mean)", a, b))
            chk_note(c, last->loc, "the last layer '%s' outputs %s", last->name, a);
    }
}

/* ---- moving the result into the arena ----------------------------------- */

static void *arena_copy(chk *c, const void *p, size_t n) {
    if (n == 0) return NULL;
    void *q = pg_arena_alloc(c->a, n);
    if (!q) {
        fputs("pipegen: out of memory\n", stderr);
        abort();
    }
    memcpy(q, p, n);
    return q;
}

static void chk_free(chk *c) {
    for (int i = 0; i < c->nblocks; i++) chk_index_free(&c->blocks[i].formals);
    chk_index_free(&c->const_ix);
    chk_index_free(&c->block_ix);
    chk_index_free(&c->nparam_ix);
    chk_index_free(&c->seen_ix);
    free(c->consts);
    free(c->blocks);
    free(c->nparams);
    free(c->layers);
    free(c->params);
    free(c->skips);
    free(c->splits);
    free(c->names);
    for (int i = 0; i < c->nseen; i++) free(c->seen[i]);
    free(c->seen);
}

static void train_defaults(ir_train *t) {
    memset(t, 0, sizeof *t);
    t->batch = 32;
    t->microbatches = 1;
    t->schedule = SCHED_1F1B;
    t->interleave = 1;
    t->placement = -1;
    t->checkpoint = CKPT_EXCEPT_LAST;
    t->loss = LOSS_MSE_MEAN;
    t->ignore_index = PG_NO_IGNORE;
    t->optimizer = OPT_SGD;
    t->lr = 1e-2;
    t->beta1 = 0.9;
    t->beta2 = 0.999;
    t->adam_eps = 1e-8;
    t->lr_schedule = LR_CONSTANT;
    t->steps = 100;
    t->precision = DT_F32;
    t->block_margin = 0.05;
    t->defaulted = ~0u; /* no train block: every setting is its default */
}

int pg_check(const pg_ast *ast, ir_model *m, pg_diag *d) { return pg_check_profiled(ast, m, d, NULL); }

int pg_check_profiled(const pg_ast *ast, ir_model *m, pg_diag *d, const pg_profile *prof) {
    memset(m, 0, sizeof *m);
    chk c = {.d = d, .m = m, .ast = ast, .a = &m->arena, .profile = prof};
    int errors0 = d->errors;
    c.errors0 = errors0;
    pg_diag_defer(d); /* found in expansion order (a block body at each call), printed in source order */
    train_defaults(&m->train);
    if (d->src && d->src->path) m->source_path = chk_strdup(&c, d->src->path);

    const ast_stmt *model = NULL, *input = NULL, *target = NULL, *train = NULL;
    for (const ast_stmt *st = ast->first; st && !c.too_many; st = st->next) {
        switch (st->kind) {
        case ST_MODEL:
            if (model) {
                if (chk_error(&c, st->loc, "duplicate model statement: a file holds one model"))
                    chk_note(&c, model->loc, "the model is first named here");
                break;
            }
            model = st;
            m->name = chk_strdup(&c, st->name);
            m->loc = st->loc;
            break;
        case ST_CONST: declare_const(&c, st); break;
        case ST_INPUT: declare_io(&c, st, &input); break;
        case ST_TARGET: declare_io(&c, st, &target); break;
        case ST_PARAM: declare_param(&c, st); break;
        case ST_BLOCK: declare_block(&c, st); break;
        case ST_TRAIN:
            if (train) {
                if (chk_error(&c, st->loc, "duplicate train block"))
                    chk_note(&c, train->loc, "the first train block is here");
                break;
            }
            train = st;
            c.train_loc = st->loc;
            break;
        default: break;
        }
    }
    /* train settings may name constants declared anywhere at the top */
    if (train) chk_train(&c, train);
    for (const ast_stmt *st = ast->first; st && !c.too_many; st = st->next)
        if (st->kind == ST_TIE) declare_tie(&c, st);

    pg_loc fileloc = {d->src ? d->src->path : NULL, 0, 0};
    if (!model) chk_error(&c, fileloc, "no `model NAME` statement");
    if (!input) chk_error(&c, fileloc, "no `input NAME : dtype[dims]` statement");
    if (!target) chk_error(&c, fileloc, "no `target NAME : dtype[dims]` statement");

    if (!c.too_many) chk_skips_static(&c);
    chain ch = {0};
    if (input && m->input_name) {
        ch.known = 1;
        ch.dt = m->input_dtype;
        ch.shape = m->input;
        chk_expand(&c, &ch);
        int items = 0;
        for (const ast_stmt *st = ast->first; st; st = st->next)
            items += st->kind == ST_LAYER || st->kind == ST_REPEAT || st->kind == ST_STASH || st->kind == ST_POP;
        if (items == 0) chk_error(&c, fileloc, "the model has no layers");
        else if (!c.expand_stopped && c.nlayers > 0) check_loss(&c, &ch);
    }
    if (d->errors == errors0) chk_stages(&c);
    if (d->errors == errors0) chk_ties(&c);
    if (d->errors == errors0) chk_weight_decay(&c);

    for (int i = 0; i < c.nnparams; i++)
        if (c.nparams[i].index < 0 && c.nparams[i].ok && d->errors == errors0)
            chk_warning(&c, c.nparams[i].st->name_loc, "parameter '%s' is never used", c.nparams[i].st->name);

    pg_diag_flush(d);
    if (c.too_many)
        pg_note(d, fileloc, "too many errors (%d), stopping here", CHK_MAX_ERRORS);
    if (c.warnings_hidden)
        pg_note(d, fileloc, "%d more warning%s not shown", c.warnings_hidden, c.warnings_hidden == 1 ? "" : "s");
    int nerr = d->errors - errors0;
    if (nerr == 0) {
        m->nlayers = c.nlayers;
        m->ninstances = c.ninstances;
        m->layers = arena_copy(&c, c.layers, (size_t)c.nlayers * sizeof *c.layers);
        m->nparams = c.nparams_;
        m->params = arena_copy(&c, c.params, (size_t)c.nparams_ * sizeof *c.params);
        m->nskips = c.nskips;
        m->skips = arena_copy(&c, c.skips, (size_t)c.nskips * sizeof *c.skips);
        chk_free(&c);
        return 0;
    }
    chk_free(&c);
    pg_model_free(m);
    return nerr;
}

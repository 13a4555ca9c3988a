/* dsl/expand.c — from statements to layers: static structure checks (split and
 * tie placement, stash/pop pairing per namespace, recursive blocks), then the
 * expansion of blocks and repeats into qualified layers, carrying the current
 * tensor's shape through every layer and skip.
 *
 * Every repeat instance and every block call is its own skip namespace
 * (torchgpipe's isolate). Since all instances of one statement list have the
 * same stashes and pops, pairing is checked once per list, on the tree. */
#include <stdlib.h>
#include <string.h>
#include "check_ctx.h"

/* ---- static checks ------------------------------------------------------- */

typedef struct skip_ref {
    const ast_stmt *st;
    int list; /* which statement list (namespace) it is in */
} skip_ref;

typedef struct walk {
    skip_ref *refs;
    int n, cap, nlists;
} walk;

static const char *list_kind(int top, int in_block) {
    return top ? "the model" : in_block ? "a block" : "a repeat";
}

static void walk_list(chk *c, walk *w, const ast_stmt *list, int top, int in_block) {
    int id = w->nlists++;
    for (const ast_stmt *st = list; st; st = st->next) {
        switch (st->kind) {
        case ST_SPLIT:
            if (!top)
                chk_error(c, st->loc, "split inside %s: splits go between top-level items", list_kind(top, in_block));
            break;
        case ST_TIE:
            if (!top) chk_error(c, st->loc, "tie inside %s: ties are top-level statements", list_kind(top, in_block));
            break;
        case ST_POP:
            if (strcmp(st->mode, "add") != 0 && strcmp(st->mode, "concat") != 0) {
                static const char *const modes[] = {"add", "concat"};
                char dm[128];
                chk_error(c, st->mode_loc, "unknown pop mode '%s'%s (expected add or concat)", st->mode,
                          chk_didyoumean(dm, sizeof dm, st->mode, modes, 2));
            }
            /* fall through */
        case ST_STASH:
            w->refs = chk_grow(w->refs, &w->cap, w->n + 1, sizeof *w->refs);
            w->refs[w->n++] = (skip_ref){st, id};
            break;
        case ST_REPEAT: walk_list(c, w, st->body, 0, in_block); break;
        default: break;
        }
    }
}

/* A stash or pop of the same name in another namespace, for the note. */
static const ast_stmt *elsewhere(const walk *w, const char *name, int list, ast_stmt_kind kind) {
    for (int i = 0; i < w->n; i++)
        if (w->refs[i].list != list && w->refs[i].st->kind == kind && strcmp(w->refs[i].st->name, name) == 0)
            return w->refs[i].st;
    return NULL;
}

static void check_pairs(chk *c, const walk *w) {
    for (int i = 0; i < w->n; i++) {
        const skip_ref *r = &w->refs[i];
        int first = 1;
        for (int j = 0; j < i; j++)
            if (w->refs[j].list == r->list && strcmp(w->refs[j].st->name, r->st->name) == 0) first = 0;
        if (!first) continue;
        const ast_stmt *stash[2] = {0}, *pop[2] = {0};
        for (int j = i; j < w->n; j++) {
            const ast_stmt *s = w->refs[j].st;
            if (w->refs[j].list != r->list || strcmp(s->name, r->st->name) != 0) continue;
            const ast_stmt **slot = s->kind == ST_STASH ? stash : pop;
            if (!slot[0]) slot[0] = s;
            else if (!slot[1]) slot[1] = s;
        }
        const char *n = r->st->name;
        if (stash[1] && chk_error(c, stash[1]->loc, "skip '%s' is stashed twice in one namespace", n))
            chk_note(c, stash[0]->loc, "first stashed here");
        if (pop[1] && chk_error(c, pop[1]->loc, "skip '%s' is popped twice in one namespace", n))
            chk_note(c, pop[0]->loc, "first popped here");
        if (stash[0] && pop[0] && pop[0] == r->st) {
            if (chk_error(c, pop[0]->loc, "skip '%s' is popped before it is stashed", n))
                chk_note(c, stash[0]->loc, "'%s' is stashed here, later", n);
        } else if (stash[0] && !pop[0]) {
            if (chk_error(c, stash[0]->loc, "skip '%s' is stashed but never popped", n)) {
                const ast_stmt *o = elsewhere(w, n, r->list, ST_POP);
                if (o) chk_note(c, o->loc, "this pop of '%s' is in another namespace: every repeat instance and "
                                "block call is isolated", n);
            }
        } else if (pop[0] && !stash[0]) {
            if (chk_error(c, pop[0]->loc, "skip '%s' is popped but never stashed", n)) {
                const ast_stmt *o = elsewhere(w, n, r->list, ST_STASH);
                if (o) chk_note(c, o->loc, "this stash of '%s' is in another namespace: every repeat instance and "
                                "block call is isolated", n);
            }
        }
    }
}

/* Recursive blocks: depth-first over block calls, color 1 = on the stack. */
static void find_calls(chk *c, const ast_stmt *list, int b, int *color, int *stack, int depth);

static void visit_block(chk *c, int b, int *color, int *stack, int depth) {
    color[b] = 1;
    stack[depth] = b;
    find_calls(c, c->blocks[b].st->body, b, color, stack, depth + 1);
    color[b] = 2;
}

static void find_calls(chk *c, const ast_stmt *list, int b, int *color, int *stack, int depth) {
    for (const ast_stmt *st = list; st; st = st->next) {
        if (st->kind == ST_REPEAT) find_calls(c, st->body, b, color, stack, depth);
        if (st->kind != ST_LAYER) continue;
        int callee = chk_find_block(c, st->callee);
        if (callee < 0) continue;
        if (color[callee] == 1) {
            char chain[512];
            size_t o = 0;
            int start = 0;
            while (stack[start] != callee) start++;
            for (int i = start; i < depth && o < sizeof chain; i++) {
                o += (size_t)snprintf(chain + o, sizeof chain - o, "%s -> ", c->blocks[stack[i]].st->name);
                c->blocks[stack[i]].recursive = 1;
            }
            if (o < sizeof chain) snprintf(chain + o, sizeof chain - o, "%s", st->callee);
            chk_error(c, st->callee_loc, "recursive block: %s", chain);
        } else if (color[callee] == 0) {
            visit_block(c, callee, color, stack, depth);
        }
    }
}

void chk_skips_static(chk *c) {
    walk w = {0};
    walk_list(c, &w, c->ast->first, 1, 0);
    for (int b = 0; b < c->nblocks; b++) walk_list(c, &w, c->blocks[b].st->body, 0, 1);
    check_pairs(c, &w);
    free(w.refs);

    int *color = calloc((size_t)c->nblocks + 1, sizeof *color);
    int *stack = calloc((size_t)c->nblocks + 1, sizeof *stack);
    if (!color || !stack) abort();
    for (int b = 0; b < c->nblocks; b++)
        if (color[b] == 0) visit_block(c, b, color, stack, 0);
    free(color);
    free(stack);
}

/* ---- counting layers before expanding ------------------------------------ */

static int64_t sat_add(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_add_overflow(a, b, &r) || r > PG_MAX_LAYERS ? PG_MAX_LAYERS + 1 : r;
}

static int64_t sat_mul(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) || r > PG_MAX_LAYERS ? PG_MAX_LAYERS + 1 : r;
}

static int bind_block_args(chk *c, const chk_env *env, const ast_stmt *st, const ast_stmt *blk, pg_val *vals, int quiet);

static int64_t count_list(chk *c, const ast_stmt *list, const chk_env *env, int depth, pg_loc *over) {
    int64_t total = 0;
    if (depth > 64) return 0;
    for (const ast_stmt *st = list; st; st = st->next) {
        int64_t n = 0;
        if (st->kind == ST_LAYER || st->kind == ST_STASH || st->kind == ST_POP) {
            int b = st->kind == ST_LAYER ? chk_find_block(c, st->callee) : -1;
            if (b < 0) n = 1;
            else if (!c->blocks[b].recursive) {
                const ast_stmt *blk = c->blocks[b].st;
                pg_val *vals = calloc((size_t)blk->nformals + 1, sizeof *vals);
                if (!vals) abort();
                int ok = bind_block_args(c, env, st, blk, vals, 1) == 0;
                chk_env inner = {(const char *const *)blk->formals, vals, ok ? blk->nformals : 0};
                n = count_list(c, blk->body, &inner, depth + 1, over);
                free(vals);
            }
        } else if (st->kind == ST_REPEAT) {
            int64_t times = 1;
            if (chk_eval_int(c, env, st->value, "repeat count", &times, 1) != 0 || times < 1) times = 1;
            n = sat_mul(times, count_list(c, st->body, env, depth, over));
            if (n > PG_MAX_LAYERS && over->line == 0) *over = st->loc;
        }
        total = sat_add(total, n);
    }
    return total;
}

/* ---- expansion ----------------------------------------------------------- */

typedef struct scope_skip {
    const char *name;
    int skip; /* index in c->skips */
} scope_skip;

typedef struct scope {
    const char *prefix; /* "" at the top, "h.3" inside */
    const chk_env *env;
    int top;
    int kind_count[LK__COUNT];
    int *block_count;   /* per block, for `transformer<k>` */
    int repeat_count;
    scope_skip *skips;
    int nskips, capskips;
} scope;

static void scope_init(chk *c, scope *s, const char *prefix, const chk_env *env, int top) {
    memset(s, 0, sizeof *s);
    s->prefix = prefix;
    s->env = env;
    s->top = top;
    s->block_count = calloc((size_t)c->nblocks + 1, sizeof *s->block_count);
    if (!s->block_count) abort();
}

static void scope_free(scope *s) {
    free(s->block_count);
    free(s->skips);
}

static void expand_list(chk *c, scope *sc, const ast_stmt *list, chain *ch);

static ir_layer *new_layer(chk *c, ir_layer_kind kind, const char *name, pg_loc loc, const chain *ch) {
    c->layers = chk_grow(c->layers, &c->caplayers, c->nlayers + 1, sizeof *c->layers);
    ir_layer *L = &c->layers[c->nlayers++];
    memset(L, 0, sizeof *L);
    L->kind = kind;
    L->name = name;
    L->loc = loc;
    L->chunk = c->cur_chunk;
    L->stage = -1;
    L->in_dtype = ch->known ? ch->dt : DT_F32;
    if (ch->known) L->in = L->out = ch->shape;
    for (int i = 0; i < 4; i++) L->param[i] = -1;
    L->buffer[0] = L->buffer[1] = -1;
    L->skip = -1;
    return L;
}

static char *auto_name(chk *c, const char *base, int k) {
    char buf[160];
    snprintf(buf, sizeof buf, "%s%d", base, k);
    return chk_strdup(c, buf);
}

static int shape_too_large(const pg_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        if (__builtin_mul_overflow(n, s->dim[i], &n) || n > ((int64_t)1 << 40)) return 1;
    return 0;
}

static void expand_layer(chk *c, scope *sc, const ast_stmt *st, ir_layer_kind kind, chain *ch) {
    int k = sc->kind_count[kind]++;
    char *name = chk_qualify(c, sc->prefix, st->name ? st->name : auto_name(c, layer_kind_name(kind), k));
    chk_name_define(c, name, st->name ? st->name_loc : st->loc, "layer");
    bound_attr b[PG_MAX_ATTRS];
    if (chk_bind_args(c, sc->env, layer_kind_name(kind), layer_kind_attrs(kind), st->args, st->callee_loc, b) != 0) {
        if (kind == LK_LINEAR || kind == LK_EMBED || kind == LK_LOGITS) ch->known = 0;
        return;
    }
    ir_layer *L = new_layer(c, kind, name, st->loc, ch);
    int np0 = c->nparams_;
    layer_apply(c, L, b, ch);
    /* every tensor must stay far from int64 overflow in later size arithmetic */
    for (int i = np0; i <= c->nparams_; i++) {
        const pg_shape *s = i < c->nparams_ ? &c->params[i].shape : &ch->shape;
        if (i == c->nparams_ && !ch->known) break;
        if (!shape_too_large(s)) continue;
        char a[96];
        chk_error(c, st->loc, "%s %s is too large: a tensor holds at most 2^40 elements",
                  i < c->nparams_ ? "parameter" : "output", pg_shape_str(DT_F32, s, a, sizeof a));
        ch->known = 0;
        break;
    }
}

static int bind_block_args(chk *c, const chk_env *env, const ast_stmt *st, const ast_stmt *blk, pg_val *vals, int quiet) {
    int nargs = 0, errs = 0;
    int *set = calloc((size_t)blk->nformals + 1, sizeof *set);
    if (!set) abort();
    for (const ast_arg *a = st->args; a; a = a->next) nargs++;
    if (nargs != blk->nformals) {
        if (!quiet && chk_error(c, st->callee_loc, "block '%s' takes %d argument%s but gets %d", blk->name,
                                blk->nformals, blk->nformals == 1 ? "" : "s", nargs))
            chk_note(c, blk->name_loc, "'%s' is defined here", blk->name);
        free(set);
        return 1;
    }
    int pos = 0;
    for (const ast_arg *a = st->args; a; a = a->next) {
        int k = -1;
        if (a->key) {
            for (int i = 0; i < blk->nformals; i++)
                if (strcmp(blk->formals[i], a->key) == 0) k = i;
            if (k < 0) {
                char dm[128];
                if (!quiet)
                    chk_error(c, a->key_loc, "block '%s' has no parameter '%s'%s", blk->name, a->key,
                              chk_didyoumean(dm, sizeof dm, a->key, (const char *const *)blk->formals, blk->nformals));
                errs++;
                continue;
            }
        } else {
            while (pos < blk->nformals && set[pos]) pos++;
            k = pos;
        }
        if (k >= blk->nformals || set[k]) {
            if (!quiet) chk_error(c, a->loc, "block '%s': parameter given twice", blk->name);
            errs++;
            continue;
        }
        set[k] = 1;
        if (chk_eval(c, env, a->value, &vals[k], quiet) != 0) errs++;
    }
    free(set);
    return errs;
}

static void expand_call(chk *c, scope *sc, const ast_stmt *st, int bi, const char *prefix, chain *ch) {
    const ast_stmt *blk = c->blocks[bi].st;
    int k = sc->block_count[bi]++;
    if (!prefix) {
        prefix = chk_qualify(c, sc->prefix, st->name ? st->name : auto_name(c, blk->name, k));
        chk_name_define(c, prefix, st->name ? st->name_loc : st->loc, "block call");
    }
    if (c->blocks[bi].recursive) {
        ch->known = 0;
        return;
    }
    pg_val *vals = calloc((size_t)blk->nformals + 1, sizeof *vals);
    if (!vals) abort();
    if (bind_block_args(c, sc->env, st, blk, vals, 0) != 0) {
        ch->known = 0;
        free(vals);
        return;
    }
    chk_env env = {(const char *const *)blk->formals, vals, blk->nformals};
    scope inner;
    scope_init(c, &inner, prefix, &env, 0);
    expand_list(c, &inner, blk->body, ch);
    scope_free(&inner);
    free(vals);
}

static void expand_repeat(chk *c, scope *sc, const ast_stmt *st, chain *ch) {
    int k = sc->repeat_count++;
    int64_t n;
    const char *prefix = chk_qualify(c, sc->prefix, st->name ? st->name : auto_name(c, "repeat", k));
    chk_name_define(c, prefix, st->name ? st->name_loc : st->loc, "repeat");
    if (chk_eval_int(c, sc->env, st->value, "repeat count", &n, 0) != 0) {
        ch->known = 0;
        return;
    }
    if (n < 1) {
        chk_error(c, st->value->loc, "repeat count is %lld: it must be >= 1", (long long)n);
        return;
    }
    /* `h = repeat 12 transformer(...)`: the instances are h.0 .. h.11 themselves */
    const ast_stmt *b = st->body;
    int bi = b && !b->next && b->kind == ST_LAYER && !b->name ? chk_find_block(c, b->callee) : -1;
    long reports0 = c->reports;
    /* instances are alike: once one has reported, the rest would only repeat it */
    for (int64_t i = 0; i < n && !c->expand_stopped && c->reports == reports0; i++) {
        char num[24];
        snprintf(num, sizeof num, "%lld", (long long)i);
        const char *ip = chk_qualify(c, prefix, num);
        if (bi >= 0) {
            expand_call(c, sc, b, bi, ip, ch);
            sc->block_count[bi]--;
            continue;
        }
        scope inner;
        scope_init(c, &inner, ip, sc->env, 0);
        expand_list(c, &inner, b, ch);
        scope_free(&inner);
    }
}

static void expand_stash(chk *c, scope *sc, const ast_stmt *st, chain *ch) {
    char buf[256];
    snprintf(buf, sizeof buf, "stash.%s", st->name);
    char *lname = chk_qualify(c, sc->prefix, buf);
    for (int i = 0; i < sc->nskips; i++)
        if (strcmp(sc->skips[i].name, st->name) == 0) return; /* stashed twice: reported statically */
    if (ch->known && ch->dt != DT_F32) {
        char a[96];
        chk_error(c, st->loc, "cannot stash the %s token ids: stash after embed",
                  pg_shape_str(ch->dt, &ch->shape, a, sizeof a));
        return;
    }
    ir_layer *L = new_layer(c, LK_STASH, lname, st->loc, ch);
    c->skips = chk_grow(c->skips, &c->capskips, c->nskips + 1, sizeof *c->skips);
    ir_skip *s = &c->skips[c->nskips];
    memset(s, 0, sizeof *s);
    s->name = chk_qualify(c, sc->prefix, st->name);
    s->stash_layer = c->nlayers - 1;
    s->pop_layer = -1;
    s->shape = ch->shape;
    s->stash_loc = st->loc;
    L->skip = c->nskips++;
    sc->skips = chk_grow(sc->skips, &sc->capskips, sc->nskips + 1, sizeof *sc->skips);
    sc->skips[sc->nskips++] = (scope_skip){st->name, L->skip};
    if (!ch->known) s->shape.rank = -1; /* unknown: no pop check */
}

static void expand_pop(chk *c, scope *sc, const ast_stmt *st, chain *ch) {
    int si = -1;
    for (int i = 0; i < sc->nskips; i++)
        if (strcmp(sc->skips[i].name, st->name) == 0) si = sc->skips[i].skip;
    int concat = strcmp(st->mode, "concat") == 0;
    if (si < 0 || c->skips[si].pop_layer >= 0 || (!concat && strcmp(st->mode, "add") != 0)) {
        ch->known = ch->known && !concat; /* pairing or mode errors are reported statically */
        return;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "pop.%s", st->name);
    ir_layer *L = new_layer(c, LK_POP, chk_qualify(c, sc->prefix, buf), st->loc, ch);
    ir_skip *s = &c->skips[si];
    L->skip = si;
    s->pop_layer = c->nlayers - 1;
    s->pop_loc = st->loc;
    s->mode = concat ? POP_CONCAT : POP_ADD;
    if (!ch->known || s->shape.rank < 0) {
        ch->known = ch->known && !concat;
        return;
    }
    char a[96], b[96];
    pg_shape_str(ch->dt, &ch->shape, a, sizeof a);
    pg_shape_str(DT_F32, &s->shape, b, sizeof b);
    if (!concat) {
        if (!pg_shape_eq(&ch->shape, &s->shape) &&
            chk_error(c, st->loc, "pop %s add needs equal shapes, but the current tensor is %s and the stash is %s",
                      st->name, a, b))
            chk_note(c, s->stash_loc, "'%s' is stashed here, as %s", st->name, b);
        return;
    }
    int same = ch->shape.rank == s->shape.rank;
    for (int i = 0; same && i < ch->shape.rank - 1; i++) same = ch->shape.dim[i] == s->shape.dim[i];
    int64_t sum = 0;
    if (!same) {
        if (chk_error(c, st->loc, "pop %s concat joins on the last dimension, so the other dimensions must agree, "
                      "but the current tensor is %s and the stash is %s", st->name, a, b))
            chk_note(c, s->stash_loc, "'%s' is stashed here, as %s", st->name, b);
        ch->known = 0;
        return;
    }
    int r = ch->shape.rank - 1;
    if (__builtin_add_overflow(ch->shape.dim[r], s->shape.dim[r], &sum)) {
        chk_error(c, st->loc, "integer overflow in the concatenated width");
        ch->known = 0;
        return;
    }
    ch->shape.dim[r] = sum;
    L->out = ch->shape;
}

static void expand_item(chk *c, scope *sc, const ast_stmt *st, chain *ch) {
    switch (st->kind) {
    case ST_LAYER: {
        int bi = chk_find_block(c, st->callee);
        if (bi >= 0) {
            expand_call(c, sc, st, bi, NULL, ch);
            return;
        }
        int k = layer_kind_find(st->callee);
        if (k >= 0) {
            expand_layer(c, sc, st, (ir_layer_kind)k, ch);
            return;
        }
        int nk;
        const char *const *kn = layer_kind_names(&nk);
        const char **cands = chk_xmalloc(sizeof *cands * (size_t)(nk + c->nblocks));
        for (int i = 0; i < nk; i++) cands[i] = kn[i];
        for (int i = 0; i < c->nblocks; i++) cands[nk + i] = c->blocks[i].st->name;
        char dm[128];
        chk_error(c, st->callee_loc, "unknown layer or block '%s'%s", st->callee,
                  chk_didyoumean(dm, sizeof dm, st->callee, cands, nk + c->nblocks));
        free(cands);
        ch->known = 0;
        return;
    }
    case ST_REPEAT: expand_repeat(c, sc, st, ch); return;
    case ST_STASH: expand_stash(c, sc, st, ch); return;
    case ST_POP: expand_pop(c, sc, st, ch); return;
    case ST_SPLIT:
        if (!sc->top) return; /* reported statically */
        c->splits = chk_grow(c->splits, &c->capsplits, c->nsplits + 1, sizeof *c->splits);
        c->splits[c->nsplits++] = (chk_split){st->loc, c->nlayers};
        c->cur_chunk++;
        return;
    default: return; /* declarations: check.c */
    }
}

static void expand_list(chk *c, scope *sc, const ast_stmt *list, chain *ch) {
    for (const ast_stmt *st = list; st && !c->expand_stopped; st = st->next) expand_item(c, sc, st, ch);
}

void chk_expand(chk *c, chain *ch) {
    pg_loc over = {0};
    int64_t n = count_list(c, c->ast->first, NULL, 0, &over);
    if (n > PG_MAX_LAYERS) {
        char lim[32];
        chk_error(c, over.line ? over : c->m->loc, "this repeat expands the model to more than %s layers",
                  chk_fmt_count(PG_MAX_LAYERS, lim, sizeof lim));
        c->expand_stopped = 1;
        return;
    }
    scope top;
    scope_init(c, &top, "", NULL, 1);
    expand_list(c, &top, c->ast->first, ch);
    scope_free(&top);
}

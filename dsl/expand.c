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
    int list;  /* which statement list (namespace) it is in */
    int order; /* position in the walk: source order within a list */
} skip_ref;

/* A statement list, i.e. a skip namespace: the model's top level, a block's
 * body or a repeat's body. */
typedef struct ns_info {
    const ast_stmt *block;  /* the enclosing block, or NULL */
    const ast_stmt *repeat; /* the repeat whose body this is, or NULL */
} ns_info;

typedef struct walk {
    skip_ref *refs;
    int n, cap;
    ns_info *lists;
    int nlists, caplists;
} walk;

static const char *list_kind(int top, int in_block) {
    return top ? "the model" : in_block ? "a block" : "a repeat";
}

/* "the model", "block 'transformer'", "the repeat at line 5 (in block 'b')" */
static const char *ns_text(const ns_info *ns, char *buf, size_t n) {
    if (ns->repeat && ns->block)
        snprintf(buf, n, "the repeat at line %d of block '%.64s'", ns->repeat->loc.line, ns->block->name);
    else if (ns->repeat)
        snprintf(buf, n, "the repeat at line %d", ns->repeat->loc.line);
    else if (ns->block)
        snprintf(buf, n, "block '%.64s'", ns->block->name);
    else
        snprintf(buf, n, "the model");
    return buf;
}

static void walk_list(chk *c, walk *w, const ast_stmt *list, const ast_stmt *block, const ast_stmt *repeat) {
    int top = !block && !repeat, in_block = block != NULL;
    w->lists = chk_grow(w->lists, &w->caplists, w->nlists + 1, sizeof *w->lists);
    int id = w->nlists++;
    w->lists[id] = (ns_info){block, repeat};
    for (const ast_stmt *st = list; st && !c->too_many; st = st->next) {
        switch (st->kind) {
        case ST_SPLIT:
            if (!top)
                chk_error(c, st->loc, "split inside %s: splits go between top-level items", list_kind(top, in_block));
            break;
        case ST_TIE:
            if (!top) chk_error(c, st->loc, "tie inside %s: ties are top-level statements", list_kind(top, in_block));
            break;
        case ST_POP:
            if (strcmp(st->mode, "add") != 0 && strcmp(st->mode, "concat") != 0 && strcmp(st->mode, "take") != 0) {
                static const char *const modes[] = {"add", "concat", "take"};
                char dm[128];
                chk_error(c, st->mode_loc, "unknown pop mode '%s'%s (expected add, concat or take)", st->mode,
                          chk_didyoumean(dm, sizeof dm, st->mode, modes, 3));
            } else if (st->args && strcmp(st->mode, "concat") != 0) {
                chk_error(c, st->args->value->loc, "pop %s %s takes no options (only concat does: concat(dim = k))",
                          st->name, st->mode);
            }
            /* fall through */
        case ST_STASH:
            w->refs = chk_grow(w->refs, &w->cap, w->n + 1, sizeof *w->refs);
            w->refs[w->n] = (skip_ref){st, id, w->n};
            w->n++;
            break;
        case ST_REPEAT: walk_list(c, w, st->body, block, st); break;
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

/* Order by namespace, name, then source order: each name's refs in one
 * namespace become one run. */
static int ref_cmp(const void *pa, const void *pb) {
    const skip_ref *a = pa, *b = pb;
    if (a->list != b->list) return a->list < b->list ? -1 : 1;
    int r = strcmp(a->st->name, b->st->name);
    if (r) return r;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* By the source order of their first ref, so errors come out top to bottom. */
static int run_cmp(const void *pa, const void *pb) {
    const skip_ref *const *a = pa, *const *b = pb;
    return (*a)->order < (*b)->order ? -1 : (*a)->order > (*b)->order;
}

/* A name for the second skip that this namespace does not use yet: res2, res3, ... */
static void fresh_name(const walk *w, const skip_ref *sorted, int n, int list, const char *base, char *buf, size_t bn) {
    for (int k = 2;; k++) {
        snprintf(buf, bn, "%.64s%d", base, k);
        int used = 0;
        for (int i = 0; i < n && !used; i++)
            used = sorted[i].list == list && strcmp(sorted[i].st->name, buf) == 0;
        if (!used || k > 1000) return;
    }
    (void)w;
}

/* One name in one namespace: its refs in source order, run[0..len). */
static void check_pair(chk *c, const walk *w, const skip_ref *sorted, const skip_ref *run, int len) {
    const ast_stmt *stash[2] = {0}, *pop[2] = {0};
    for (int j = 0; j < len; j++) {
        const ast_stmt **slot = run[j].st->kind == ST_STASH ? stash : pop;
        if (!slot[0]) slot[0] = run[j].st;
        else if (!slot[1]) slot[1] = run[j].st;
    }
    const char *n = run[0].st->name;
    int list = run[0].list;
    char where[160];
    ns_text(&w->lists[list], where, sizeof where);
    int stash_after_pop = stash[1] && pop[0] && (pop[0]->loc.line < stash[1]->loc.line ||
                          (pop[0]->loc.line == stash[1]->loc.line && pop[0]->loc.col < stash[1]->loc.col));
    if (stash_after_pop) {
        char fresh[96];
        fresh_name(w, sorted, w->n, list, n, fresh, sizeof fresh);
        if (chk_error(c, stash[1]->loc, "skip '%s' is stashed again after its pop in %s: each name is stashed "
                      "and popped once per namespace; use another name for the second skip, e.g. '%s'",
                      n, where, fresh)) {
            chk_note(c, stash[0]->loc, "'%s' is first stashed here", n);
            chk_note(c, pop[0]->loc, "'%s' is popped here", n);
        }
        return; /* a second pop, if any, is part of the same mistake */
    }
    if (stash[1] && chk_error(c, stash[1]->loc, "skip '%s' is stashed twice in %s: each name is stashed once per "
                              "namespace", n, where))
        chk_note(c, stash[0]->loc, "'%s' is first stashed here", n);
    if (pop[1] && chk_error(c, pop[1]->loc, "skip '%s' is popped twice in %s: each stash is popped once",
                            n, where))
        chk_note(c, pop[0]->loc, "'%s' is first popped here", n);
    if (stash[0] && pop[0] && pop[0] == run[0].st) {
        if (chk_error(c, pop[0]->loc, "skip '%s' is popped before it is stashed", n))
            chk_note(c, stash[0]->loc, "'%s' is stashed here, later: stash it before the pop", n);
    } else if (stash[0] && !pop[0]) {
        const ast_stmt *o = elsewhere(w, n, list, ST_POP);
        if (o && chk_error(c, stash[0]->loc, "skip '%s' is stashed but never popped in %s", n, where))
            chk_note(c, o->loc, "this pop of '%s' is in another namespace: every repeat instance and "
                     "block call is isolated", n);
        if (!o)
            chk_error(c, stash[0]->loc, "skip '%s' is stashed but never popped in %s; add `pop %s add` or "
                      "`pop %s concat` where the skip ends", n, where, n, n);
    } else if (pop[0] && !stash[0]) {
        if (chk_error(c, pop[0]->loc, "skip '%s' is popped but never stashed in %s", n, where)) {
            const ast_stmt *o = elsewhere(w, n, list, ST_STASH);
            if (o) chk_note(c, o->loc, "this stash of '%s' is in another namespace: every repeat instance and "
                            "block call is isolated", n);
        }
    }
}

static void check_pairs(chk *c, const walk *w) {
    if (w->n == 0) return;
    skip_ref *sorted = chk_xmalloc(sizeof *sorted * (size_t)w->n);
    const skip_ref **runs = chk_xmalloc(sizeof *runs * (size_t)w->n);
    int *lens = chk_xmalloc(sizeof *lens * (size_t)w->n);
    memcpy(sorted, w->refs, sizeof *sorted * (size_t)w->n);
    qsort(sorted, (size_t)w->n, sizeof *sorted, ref_cmp);
    int nruns = 0;
    for (int i = 0; i < w->n;) {
        int j = i + 1;
        while (j < w->n && sorted[j].list == sorted[i].list && strcmp(sorted[j].st->name, sorted[i].st->name) == 0) j++;
        runs[nruns++] = &sorted[i];
        i = j;
    }
    qsort(runs, (size_t)nruns, sizeof *runs, run_cmp);
    /* lengths: a run ends where the next one (in sorted order) begins */
    for (int r = 0; r < nruns; r++) {
        const skip_ref *a = runs[r];
        int k = (int)(a - sorted), j = k + 1;
        while (j < w->n && sorted[j].list == a->list && strcmp(sorted[j].st->name, a->st->name) == 0) j++;
        lens[r] = j - k;
    }
    for (int r = 0; r < nruns && !c->too_many; r++) check_pair(c, w, sorted, runs[r], lens[r]);
    free(sorted);
    free(runs);
    free(lens);
}

/* Recursive blocks: depth-first over block calls, color 1 = on the stack.
 * The walk goes at most PG_MAX_CALL_DEPTH calls deep (what lies deeper is
 * reached again from the loop over all blocks); expansion reports the depth. */
static void find_calls(chk *c, const ast_stmt *list, int b, int *color, int *stack, int depth);

static void visit_block(chk *c, int b, int *color, int *stack, int depth) {
    color[b] = 1;
    stack[depth] = b;
    find_calls(c, c->blocks[b].st->body, b, color, stack, depth + 1);
    color[b] = 2;
}

static void find_calls(chk *c, const ast_stmt *list, int b, int *color, int *stack, int depth) {
    for (const ast_stmt *st = list; st && !c->too_many; st = st->next) {
        if (st->kind == ST_REPEAT) find_calls(c, st->body, b, color, stack, depth);
        if (st->kind != ST_LAYER) continue;
        int callee = chk_find_block(c, st->callee);
        if (callee < 0) continue;
        if (color[callee] == 1) {
            char chain[512];
            size_t o = 0;
            int start = 0;
            while (stack[start] != callee) start++;
            for (int i = start; i < depth; i++) {
                if (o < sizeof chain - 1)
                    o += (size_t)snprintf(chain + o, sizeof chain - o, "%.64s -> ", c->blocks[stack[i]].st->name);
                c->blocks[stack[i]].recursive = 1;
            }
            if (o < sizeof chain - 1) snprintf(chain + o, sizeof chain - o, "%.64s", st->callee);
            chk_error(c, st->callee_loc, "recursive block call: %s (a block cannot call itself, directly or through others)", chain);
        } else if (color[callee] == 0 && depth < PG_MAX_CALL_DEPTH) {
            visit_block(c, callee, color, stack, depth);
        }
    }
}

void chk_skips_static(chk *c) {
    walk w = {0};
    walk_list(c, &w, c->ast->first, NULL, NULL);
    for (int b = 0; b < c->nblocks; b++) walk_list(c, &w, c->blocks[b].st->body, c->blocks[b].st, NULL);
    check_pairs(c, &w);
    free(w.refs);
    free(w.lists);

    int *color = calloc((size_t)c->nblocks + 1, sizeof *color);
    int *stack = calloc((size_t)PG_MAX_CALL_DEPTH + 2, sizeof *stack);
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

/* Layers that list expands to, saturating past PG_MAX_LAYERS; *over is set to
 * the innermost repeat or block call whose expansion crossed the limit. */
static int64_t count_list(chk *c, const ast_stmt *list, const chk_env *env, int depth, const ast_stmt **over) {
    int64_t total = 0;
    if (depth > PG_MAX_CALL_DEPTH) return 0; /* expansion stops there with an error */
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
                chk_env inner = {(const char *const *)blk->formals, vals, ok ? blk->nformals : 0,
                                 &c->blocks[b].formals};
                n = count_list(c, blk->body, &inner, depth + 1, over);
                if (n < 1) n = 1; /* an empty block still costs a call */
                if (n > PG_MAX_LAYERS && !*over) *over = st;
                free(vals);
            }
        } else if (st->kind == ST_REPEAT) {
            int64_t times = 1;
            if (chk_eval_int(c, env, st->value, "repeat count", &times, 1) != 0 || times < 1) times = 1;
            int64_t body = count_list(c, st->body, env, depth, over);
            n = sat_mul(times, body > 0 ? body : 1); /* an empty instance still costs a scope */
            if (n > PG_MAX_LAYERS && !*over) *over = st;
        }
        total = sat_add(total, n);
        if (total > PG_MAX_LAYERS && !*over && (st->kind == ST_REPEAT || st->kind == ST_LAYER)) *over = st;
        /* past the limit the answer is known: stop (a block that calls another
         * twice, 100 levels down, would otherwise take 2^100 steps) */
        if (total > PG_MAX_LAYERS) return total;
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
    int depth;          /* block calls around this scope */
    int kind_count[LK__COUNT];
    chk_index block_count; /* block name -> calls so far, for `transformer<k>` */
    int repeat_count;
    scope_skip *skips;
    int nskips, capskips;
} scope;

static void scope_init(chk *c, scope *s, const char *prefix, const chk_env *env, int top) {
    memset(s, 0, sizeof *s);
    s->prefix = prefix;
    s->env = env;
    s->top = top;
    (void)c;
}

/* How many calls of block bi this scope made before; counts this one. */
static int next_call_number(chk *c, scope *s, int bi) {
    const char *name = c->blocks[bi].st->name;
    int k = chk_index_get(&s->block_count, name);
    if (k < 0) k = 0;
    chk_index_set(&s->block_count, name, k + 1);
    return k;
}

static void unnumber_call(chk *c, scope *s, int bi) {
    const char *name = c->blocks[bi].st->name;
    chk_index_set(&s->block_count, name, chk_index_get(&s->block_count, name) - 1);
}

static void scope_free(scope *s) {
    chk_index_free(&s->block_count);
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
    L->instance = c->cur_instance;
    L->stage = -1;
    L->in_dtype = ch->known ? ch->dt : DT_F32;
    if (ch->known) L->in = L->out = ch->shape;
    for (int i = 0; i < PG_MAX_LAYER_PARAMS; i++) L->param[i] = -1;
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
        /* a kind that reshapes: its output is unknown (no errors follow from a guess) */
        if (kind == LK_LINEAR || kind == LK_EMBED || kind == LK_LOGITS || kind >= LK_CONV2D) ch->known = 0;
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
    const chk_index *formals = &c->blocks[chk_find_block(c, blk->name)].formals;
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
            k = chk_index_get(formals, a->key);
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
            if (!quiet)
                chk_error(c, a->loc, "block '%s': parameter '%s' is given twice", blk->name,
                          blk->formals[k < blk->nformals ? k : blk->nformals - 1]);
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
    int k = next_call_number(c, sc, bi);
    if (!prefix) {
        prefix = chk_qualify(c, sc->prefix, st->name ? st->name : auto_name(c, blk->name, k));
        chk_name_define(c, prefix, st->name ? st->name_loc : st->loc, "block call");
    }
    if (c->blocks[bi].recursive) {
        ch->known = 0;
        return;
    }
    if (sc->depth >= PG_MAX_CALL_DEPTH) {
        chk_error(c, st->callee_loc, "block calls nest too deeply: this call of '%s' is %d levels down; at most %d "
                  "are supported", blk->name, sc->depth + 1, PG_MAX_CALL_DEPTH);
        ch->known = 0;
        c->expand_stopped = 1;
        return;
    }
    pg_val *vals = calloc((size_t)blk->nformals + 1, sizeof *vals);
    if (!vals) abort();
    if (bind_block_args(c, sc->env, st, blk, vals, 0) != 0) {
        ch->known = 0;
        free(vals);
        return;
    }
    chk_env env = {(const char *const *)blk->formals, vals, blk->nformals, &c->blocks[bi].formals};
    scope inner;
    scope_init(c, &inner, prefix, &env, 0);
    inner.depth = sc->depth + 1;
    expand_list(c, &inner, blk->body, ch);
    scope_free(&inner);
    free(vals);
}

/* `split(NAME, K)`: two positional arguments, the first a name. */
static int split_shape_ok(const ast_stmt *sp) {
    const ast_arg *a = sp->args, *b = a ? a->next : NULL;
    return a && b && !b->next && !a->key && !b->key && a->value->kind == EX_NAME;
}

/* Whether a top-level `split(NAME, K)` names the top-level repeat NAME. */
static int splits_repeat(const ast_stmt *sp, const char *name) {
    return sp->kind == ST_SPLIT && sp->args && split_shape_ok(sp) && name && strcmp(sp->args->value->str, name) == 0;
}

/* The instance before which top-level `split(NAME, K)` (sp) puts a stage
 * boundary in `NAME = repeat n ...`; -1 with an error when K is not between
 * two instances. */
static int64_t split_instance(chk *c, const ast_stmt *sp, int64_t n) {
    const ast_arg *a = sp->args, *b = a->next;
    int64_t k;
    if (chk_eval_int(c, NULL, b->value, "split instance", &k, 0) != 0) return -1;
    if (k < 1 || k >= n) {
        chk_error(c, b->value->loc, "split(%s, %lld): %s has %lld instance%s (0 to %lld); the boundary goes before "
                  "one of 1 to %lld", a->value->str, (long long)k, a->value->str, (long long)n, n == 1 ? "" : "s",
                  (long long)(n - 1), (long long)(n - 1));
        return -1;
    }
    return k;
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
    /* `split(NAME, K)`: stage boundaries between instances, the parameters' names unchanged */
    const ast_stmt *sps[64];
    int64_t spk[64];
    int nsp = 0;
    for (const ast_stmt *sp = c->ast->first; sp && sc->top; sp = sp->next)
        if (splits_repeat(sp, st->name) && nsp < 64 && (spk[nsp] = split_instance(c, sp, n)) > 0) sps[nsp++] = sp;
    int outermost = c->cur_instance < 0; /* a repeat inside an instance is part of it */
    for (int64_t i = 0; i < n && !c->expand_stopped && c->reports == reports0; i++) {
        if (outermost)
            c->cur_instance = c->ninstances++;
        for (int j = 0; j < nsp; j++)
            if (spk[j] == i) {
                c->splits = chk_grow(c->splits, &c->capsplits, c->nsplits + 1, sizeof *c->splits);
                c->splits[c->nsplits++] = (chk_split){sps[j]->loc, c->nlayers};
                c->cur_chunk++;
            }
        char num[24];
        snprintf(num, sizeof num, "%lld", (long long)i);
        const char *ip = chk_qualify(c, prefix, num);
        if (bi >= 0) {
            expand_call(c, sc, b, bi, ip, ch);
            unnumber_call(c, sc, bi);
            continue;
        }
        scope inner;
        scope_init(c, &inner, ip, sc->env, 0);
        inner.depth = sc->depth;
        expand_list(c, &inner, b, ch);
        scope_free(&inner);
    }
    if (outermost)
        c->cur_instance = -1;
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

/* `pop NAME take`: the current tensor must be what the layer before stashed,
 * or its work would be lost. The error names the layer that made it. */
static int take_ok(chk *c, const ast_stmt *st, const chain *ch) {
    const ir_layer *prev = c->nlayers > 0 ? &c->layers[c->nlayers - 1] : NULL;
    if (prev && prev->kind == LK_STASH) return 1;
    char a[96];
    const char *from = prev ? prev->name : c->m->input_name ? c->m->input_name : "the input";
    if (chk_error(c, st->loc, "pop %s take replaces the current tensor %s (from '%s') with the stash, but the "
                  "current tensor was not stashed just before: its work would be lost; stash it first "
                  "(`stash NAME` before the pop)", st->name,
                  ch->known ? pg_shape_str(ch->dt, &ch->shape, a, sizeof a) : "?", from) && prev)
        chk_note(c, prev->loc, "'%s' makes the current tensor here", prev->name);
    return 0;
}

/* `pop NAME concat(dim = k)`: the per-sample dim joined, the last by default. */
static int concat_dim(chk *c, const scope *sc, const ast_stmt *st, const chain *ch, int *dim) {
    bound_attr b[PG_MAX_ATTRS];
    char what[300];
    snprintf(what, sizeof what, "pop %s concat", st->name);
    if (chk_bind_args(c, sc->env, what, pop_concat_attrs, st->args, st->mode_loc, b) != 0) return -1;
    int rank = ch->shape.rank;
    if (!b[0].set) {
        *dim = rank - 1;
        return 0;
    }
    if (b[0].i >= rank) {
        char a[96];
        chk_error(c, b[0].loc, "%s: dim %lld is out of range: the current tensor %s has dims 0 .. %d (per sample; "
                  "the batch is implicit)", what, (long long)b[0].i, pg_shape_str(ch->dt, &ch->shape, a, sizeof a),
                  rank - 1);
        return -1;
    }
    *dim = (int)b[0].i;
    return 0;
}

static void expand_pop(chk *c, scope *sc, const ast_stmt *st, chain *ch) {
    int si = -1;
    for (int i = 0; i < sc->nskips; i++)
        if (strcmp(sc->skips[i].name, st->name) == 0) si = sc->skips[i].skip;
    int concat = strcmp(st->mode, "concat") == 0, take = strcmp(st->mode, "take") == 0;
    if (si < 0 || c->skips[si].pop_layer >= 0 || (!concat && !take && strcmp(st->mode, "add") != 0) ||
        (st->args && !concat)) {
        ch->known = ch->known && !concat && !take; /* pairing or mode errors are reported statically */
        return;
    }
    if (take && !take_ok(c, st, ch)) {
        ch->known = 0;
        return;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "pop.%s", st->name);
    ir_layer *L = new_layer(c, LK_POP, chk_qualify(c, sc->prefix, buf), st->loc, ch);
    ir_skip *s = &c->skips[si];
    L->skip = si;
    s->pop_layer = c->nlayers - 1;
    s->pop_loc = st->loc;
    s->mode = concat ? POP_CONCAT : take ? POP_TAKE : POP_ADD;
    if (take) { /* the stash becomes the current tensor, whatever its shape */
        if (s->shape.rank < 0) {
            ch->known = 0;
            return;
        }
        ch->dt = DT_F32;
        ch->shape = s->shape;
        ch->known = 1;
        L->out = ch->shape;
        return;
    }
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
    int r;
    if (concat_dim(c, sc, st, ch, &r) != 0) {
        ch->known = 0;
        return;
    }
    s->concat_dim = r;
    int same = ch->shape.rank == s->shape.rank;
    for (int i = 0; same && i < ch->shape.rank; i++) same = i == r || ch->shape.dim[i] == s->shape.dim[i];
    int64_t sum = 0;
    if (!same) {
        char on[64];
        if (r == ch->shape.rank - 1) snprintf(on, sizeof on, "the last dimension");
        else snprintf(on, sizeof on, "dimension %d", r);
        if (chk_error(c, st->loc, "pop %s concat joins on %s, so the other dimensions must agree, "
                      "but the current tensor is %s and the stash is %s", st->name, on, a, b))
            chk_note(c, s->stash_loc, "'%s' is stashed here, as %s", st->name, b);
        ch->known = 0;
        return;
    }
    if (__builtin_add_overflow(ch->shape.dim[r], s->shape.dim[r], &sum)) {
        chk_error(c, st->loc, "integer overflow in the concatenated width");
        ch->known = 0;
        return;
    }
    ch->shape.dim[r] = sum;
    L->out = ch->shape;
}

/* Once per file: every layer kind there is and every block the model defines
 * (cands: the nk kinds, then the blocks), so a misspelling far from any name
 * still shows what may be written. */
static void note_known_layers(chk *c, const char *file, const char *const *cands, int nk) {
    size_t cap = 64;
    for (int i = 0; i < nk + c->nblocks; i++) cap += strlen(cands[i]) + 2;
    char *list = chk_xmalloc(cap);
    size_t o = 0;
    for (int i = 0; i < nk; i++) o += (size_t)snprintf(list + o, cap - o, "%s%s", i ? ", " : "", cands[i]);
    if (c->nblocks) o += (size_t)snprintf(list + o, cap - o, "; the blocks of this model: ");
    for (int i = 0; i < c->nblocks; i++)
        o += (size_t)snprintf(list + o, cap - o, "%s%s", i ? ", " : "", cands[nk + i]);
    chk_note(c, (pg_loc){file, 0, 0}, "the layers are: %s", list);
    free(list);
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
        if (chk_error(c, st->callee_loc, "unknown layer or block '%s'%s", st->callee,
                      chk_didyoumean(dm, sizeof dm, st->callee, cands, nk + c->nblocks)) &&
            !c->kinds_listed++)
            note_known_layers(c, st->callee_loc.file, cands, nk);
        free(cands);
        ch->known = 0;
        return;
    }
    case ST_REPEAT: expand_repeat(c, sc, st, ch); return;
    case ST_STASH: expand_stash(c, sc, st, ch); return;
    case ST_POP: expand_pop(c, sc, st, ch); return;
    case ST_SPLIT:
        if (!sc->top) return; /* reported statically */
        if (st->args) { /* split(NAME, K): taken where repeat NAME expands */
            int found = 0;
            for (const ast_stmt *r = c->ast->first; r; r = r->next)
                found |= r->kind == ST_REPEAT && splits_repeat(st, r->name);
            if (!split_shape_ok(st))
                chk_error(c, st->loc, "split(NAME, K) wants the name of a top-level `NAME = repeat N ...` and the "
                          "instance K (1 to N - 1) before which the stage boundary goes");
            else if (!found)
                chk_error(c, st->args->value->loc, "split(%s, ...): no top-level `%s = repeat N ...` to split",
                          st->args->value->str, st->args->value->str);
            return;
        }
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
    const ast_stmt *over = NULL;
    int64_t n = count_list(c, c->ast->first, NULL, 0, &over);
    if (n > PG_MAX_LAYERS) {
        char lim[32];
        chk_error(c, over ? over->loc : c->m->loc, "this %s takes the model past %s layers, the most pipegen expands",
                  !over || over->kind == ST_REPEAT ? "repeat" : chk_find_block(c, over->callee) >= 0 ? "block call"
                  : "layer", chk_fmt_count(PG_MAX_LAYERS, lim, sizeof lim));
        c->expand_stopped = 1;
        return;
    }
    scope top;
    scope_init(c, &top, "", NULL, 1);
    c->cur_instance = -1;
    expand_list(c, &top, c->ast->first, ch);
    scope_free(&top);
}

/* dsl/ast.c — the syntax tree: its arena, the constructors the grammar calls
 * (ast_build.h), and the indented dump the golden tests compare. */
#include "ast_build.h"
#include "pipe.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ----------------------------------------------------------------
 * A list of calloc'd blocks, bump-allocated; nothing is freed before the end. */
struct pg_arena_block {
    pg_arena_block *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

#define ARENA_BLOCK (64 * 1024)

void *pg_arena_alloc(pg_arena *a, size_t n)
{
    if (n > SIZE_MAX / 2) return NULL;
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    pg_arena_block *b = a->head;
    if (!b || b->size - b->used < n) {
        size_t size = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        size_t bytes = sizeof *b + size;
        if (a->limit && (bytes > a->limit || a->used_total > a->limit - bytes)) return NULL;
        b = calloc(1, bytes);
        if (!b) return NULL;
        b->size = size;
        b->next = a->head;
        a->head = b;
        a->used_total += bytes;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

char *pg_arena_strndup(pg_arena *a, const char *s, size_t n)
{
    if (n == SIZE_MAX) return NULL;
    char *p = pg_arena_alloc(a, n + 1);
    if (p) memcpy(p, s, n); /* already zeroed: p[n] == '\0' */
    return p;
}

void pg_arena_free(pg_arena *a)
{
    for (pg_arena_block *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    a->head = NULL;
    a->used_total = 0;
}

void pg_ast_free(pg_ast *ast)
{
    pg_arena_free(&ast->arena);
    ast->first = NULL;
}

/* ---- constructors ----------------------------------------------------------- */

static void *node(pg_parse_ctx *ctx, size_t n)
{
    void *p = pg_arena_alloc(&ctx->ast->arena, n);
    if (!p) ctx->oom = ctx->stop = 1;
    return p;
}

static const char *tok_str(pg_parse_ctx *ctx, const pg_token *t)
{
    char *s = pg_arena_strndup(&ctx->ast->arena, t->text, t->len);
    if (!s) ctx->oom = ctx->stop = 1;
    return s;
}

ast_stmt_list ast_stmt_list_empty(void)
{
    ast_stmt_list l = {NULL, NULL};
    return l;
}

ast_stmt_list ast_stmt_list_add(ast_stmt_list l, ast_stmt *s)
{
    if (!s) return l;
    if (l.last) l.last->next = s;
    else l.first = s;
    l.last = s;
    return l;
}

ast_arg_list ast_arg_list_empty(void)
{
    ast_arg_list l = {NULL, NULL, 0};
    return l;
}

ast_arg_list ast_arg_list_add(ast_arg_list l, ast_arg *a)
{
    if (!a) return l;
    if (l.last) l.last->next = a;
    else l.first = a;
    l.last = a;
    l.n++;
    return l;
}

void ast_top_add(pg_parse_ctx *ctx, ast_stmt *s)
{
    if (!s) return;
    if (ctx->top_last) ctx->top_last->next = s;
    else ctx->ast->first = s;
    ctx->top_last = s;
}

/* Expressions carry their depth, hidden after the public struct, so that a
 * long chain such as 1+1+...+1 (which the parser takes without nesting) still
 * gives a tree that recursive walkers (dump, checker) can follow safely. */
typedef struct expr_node {
    ast_expr e; /* first: an ast_expr * is an expr_node * */
    int depth;
} expr_node;

#define EXPR_MAX_DEPTH 1000

static int depth_of(const ast_expr *e)
{
    return e ? ((const expr_node *)e)->depth : 0;
}

static ast_expr *expr_new(pg_parse_ctx *ctx, ast_expr_kind kind, pg_loc loc)
{
    expr_node *n = node(ctx, sizeof *n);
    if (!n) return NULL;
    n->e.kind = kind;
    n->e.loc = loc;
    n->depth = 1;
    return &n->e;
}

/* Record that e sits above children of depth `below`; too deep stops the parse. */
static ast_expr *expr_depth(pg_parse_ctx *ctx, ast_expr *e, int below)
{
    if (!e) return NULL;
    ((expr_node *)e)->depth = below + 1;
    if (below + 1 > EXPR_MAX_DEPTH && !ctx->stop) {
        pg_error(ctx->d, e->loc, "expression nested too deeply (more than %d levels)", EXPR_MAX_DEPTH);
        ctx->stop = 1;
    }
    return e;
}

static int args_depth(const ast_arg *a)
{
    int d = 0;
    for (; a; a = a->next)
        if (depth_of(a->value) > d) d = depth_of(a->value);
    return d;
}

/* The string's text without quotes, with \" and \\ resolved. */
static const char *unquote(pg_parse_ctx *ctx, const pg_token *t)
{
    size_t n = t->len >= 2 ? t->len - 2 : 0;
    char *s = node(ctx, n + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (size_t i = 1; i <= n; i++) {
        if (t->text[i] == '\\' && i + 1 <= n && (t->text[i + 1] == '"' || t->text[i + 1] == '\\')) i++;
        s[k++] = t->text[i];
    }
    return s;
}

ast_expr *ast_literal(pg_parse_ctx *ctx, const pg_token *t)
{
    ast_expr_kind kind = t->type == TK_INT ? EX_INT : t->type == TK_FLOAT ? EX_FLOAT
                       : t->type == TK_STRING ? EX_STRING : EX_NAME;
    ast_expr *e = expr_new(ctx, kind, t->loc);
    if (!e) return NULL;
    e->ival = t->ival;
    e->fval = t->fval;
    if (kind == EX_STRING) e->str = unquote(ctx, t);
    else if (kind == EX_NAME) e->str = tok_str(ctx, t);
    return e;
}

ast_expr *ast_binop(pg_parse_ctx *ctx, ast_expr *l, const pg_token *op, ast_expr *r)
{
    ast_expr *e = expr_new(ctx, EX_BINOP, l ? l->loc : op->loc);
    if (!e) return NULL;
    e->op = op->text[0];
    e->op_loc = op->loc;
    e->lhs = l;
    e->rhs = r;
    return expr_depth(ctx, e, depth_of(l) > depth_of(r) ? depth_of(l) : depth_of(r));
}

ast_expr *ast_arrow(pg_parse_ctx *ctx, ast_expr *l, const pg_token *arrow, ast_expr *r)
{
    ast_expr *e = expr_new(ctx, EX_ARROW, l ? l->loc : arrow->loc);
    if (!e) return NULL;
    e->op_loc = arrow->loc;
    e->lhs = l;
    e->rhs = r;
    return expr_depth(ctx, e, depth_of(l) > depth_of(r) ? depth_of(l) : depth_of(r));
}

ast_expr *ast_neg(pg_parse_ctx *ctx, const pg_token *minus, ast_expr *x)
{
    ast_expr *e = expr_new(ctx, EX_NEG, minus->loc);
    if (e) {
        e->op_loc = minus->loc;
        e->lhs = x;
    }
    return expr_depth(ctx, e, depth_of(x));
}

ast_expr *ast_call(pg_parse_ctx *ctx, const pg_token *name, ast_arg_list args)
{
    ast_expr *e = expr_new(ctx, EX_CALL, name->loc);
    if (!e) return NULL;
    e->str = tok_str(ctx, name);
    e->args = args.first;
    return expr_depth(ctx, e, args_depth(e->args));
}

ast_expr *ast_tuple(pg_parse_ctx *ctx, const pg_token *lparen, ast_expr *first, ast_arg_list rest)
{
    ast_expr *e = expr_new(ctx, EX_TUPLE, lparen->loc);
    ast_arg *a = ast_arg_new(ctx, NULL, first);
    if (!e) return NULL;
    if (a) {
        a->next = rest.first;
        e->args = a;
    } else {
        e->args = rest.first;
    }
    return expr_depth(ctx, e, args_depth(e->args));
}

ast_expr *ast_for(pg_parse_ctx *ctx, ast_expr *value, const pg_token *kw, ast_arg_list patterns)
{
    ast_expr *e = expr_new(ctx, EX_FOR, value ? value->loc : kw->loc);
    if (!e) return NULL;
    e->op_loc = kw->loc;
    e->lhs = value;
    e->args = patterns.first;
    return expr_depth(ctx, e, depth_of(value) > args_depth(e->args) ? depth_of(value) : args_depth(e->args));
}

ast_arg *ast_arg_new(pg_parse_ctx *ctx, const pg_token *key, ast_expr *value)
{
    if (!key && !value) return NULL;
    ast_arg *a = node(ctx, sizeof *a);
    if (!a) return NULL;
    a->value = value;
    if (key) {
        a->key = tok_str(ctx, key);
        a->key_loc = key->loc;
    }
    a->loc = key ? key->loc : value->loc;
    return a;
}

static ast_stmt *stmt_new(pg_parse_ctx *ctx, ast_stmt_kind kind, pg_loc loc)
{
    ast_stmt *s = node(ctx, sizeof *s);
    if (s) {
        s->kind = kind;
        s->loc = loc;
    }
    return s;
}

static void set_name(pg_parse_ctx *ctx, ast_stmt *s, const pg_token *name)
{
    s->name = tok_str(ctx, name);
    s->name_loc = name->loc;
}

ast_stmt *ast_model(pg_parse_ctx *ctx, const pg_token *kw, const pg_token *name)
{
    ast_stmt *s = stmt_new(ctx, ST_MODEL, kw->loc);
    if (s) set_name(ctx, s, name);
    return s;
}

ast_stmt *ast_const(pg_parse_ctx *ctx, const pg_token *kw, const pg_token *name, ast_expr *value)
{
    ast_stmt *s = stmt_new(ctx, ST_CONST, kw->loc);
    if (!s) return NULL;
    set_name(ctx, s, name);
    s->value = value;
    return s;
}

ast_stmt *ast_decl(pg_parse_ctx *ctx, const pg_token *name, const pg_token *dtype, ast_arg_list dims)
{
    ast_stmt *s = stmt_new(ctx, ST_INPUT, name->loc);
    if (!s) return NULL;
    set_name(ctx, s, name);
    s->dtype = tok_str(ctx, dtype);
    s->dtype_loc = dtype->loc;
    s->dims.dim = node(ctx, sizeof *s->dims.dim * (size_t)(dims.n ? dims.n : 1));
    if (!s->dims.dim) return NULL;
    for (ast_arg *a = dims.first; a; a = a->next) s->dims.dim[s->dims.n++] = a->value;
    return s;
}

ast_stmt *ast_decl_as(pg_parse_ctx *ctx, ast_stmt *decl, ast_stmt_kind kind, const pg_token *kw,
                      ast_arg_list options)
{
    (void)ctx;
    if (!decl) return NULL;
    decl->kind = kind;
    decl->loc = kw->loc;
    decl->args = options.first;
    return decl;
}

ast_stmt *ast_train(pg_parse_ctx *ctx, const pg_token *kw, ast_arg_list settings, const pg_token *rbrace)
{
    ast_stmt *s = stmt_new(ctx, ST_TRAIN, kw->loc);
    if (!s) return NULL;
    s->args = settings.first;
    s->end_loc = rbrace->loc;
    return s;
}

ast_stmt *ast_block(pg_parse_ctx *ctx, const pg_token *kw, const pg_token *name, ast_arg_list formals,
                    ast_stmt_list body, const pg_token *rbrace)
{
    ast_stmt *s = stmt_new(ctx, ST_BLOCK, kw->loc);
    if (!s) return NULL;
    set_name(ctx, s, name);
    size_t n = (size_t)(formals.n ? formals.n : 1);
    s->formals = node(ctx, sizeof *s->formals * n);
    s->formal_locs = node(ctx, sizeof *s->formal_locs * n);
    if (!s->formals || !s->formal_locs) return NULL;
    for (ast_arg *a = formals.first; a; a = a->next) {
        s->formals[s->nformals] = a->key;
        s->formal_locs[s->nformals++] = a->key_loc;
    }
    s->body = body.first;
    s->end_loc = rbrace->loc;
    return s;
}

ast_stmt *ast_layer(pg_parse_ctx *ctx, const pg_token *callee, int has_parens, ast_arg_list args)
{
    ast_stmt *s = stmt_new(ctx, ST_LAYER, callee->loc);
    if (!s) return NULL;
    s->callee = tok_str(ctx, callee);
    s->callee_loc = callee->loc;
    s->has_parens = has_parens;
    s->args = args.first;
    return s;
}

ast_stmt *ast_repeat(pg_parse_ctx *ctx, const pg_token *kw, ast_expr *count, ast_stmt_list body,
                     const pg_token *rbrace)
{
    ast_stmt *s = stmt_new(ctx, ST_REPEAT, kw->loc);
    if (!s) return NULL;
    s->value = count;
    s->body = body.first;
    if (rbrace) s->end_loc = rbrace->loc;
    return s;
}

ast_stmt *ast_named(pg_parse_ctx *ctx, const pg_token *name, ast_stmt *s)
{
    if (!s) return NULL;
    set_name(ctx, s, name);
    s->loc = name->loc;
    return s;
}

ast_stmt *ast_simple(pg_parse_ctx *ctx, ast_stmt_kind kind, const pg_token *kw, const pg_token *name,
                     const pg_token *mode)
{
    ast_stmt *s = stmt_new(ctx, kind, kw->loc);
    if (!s) return NULL;
    if (name) set_name(ctx, s, name);
    if (mode) {
        s->mode = tok_str(ctx, mode);
        s->mode_loc = mode->loc;
    }
    return s;
}

ast_stmt *ast_pop_args(pg_parse_ctx *ctx, ast_stmt *pop, ast_arg_list args)
{
    (void)ctx;
    if (pop) pop->args = args.first;
    return pop;
}

/* ---- dump ------------------------------------------------------------------
 * One node per line: `line:col kind details`, children indented two spaces;
 * names carry their own position as name@line:col. The format is what
 * the tests/golden/parse .out files hold, so change it only with them. */

static void indent(FILE *out, int depth)
{
    for (int i = 0; i < depth; i++) fputs("  ", out);
}

static void put_loc(FILE *out, pg_loc l)
{
    fprintf(out, "%d:%d", l.line, l.col);
}

static void put_name(FILE *out, const char *s, pg_loc l)
{
    fprintf(out, " %s@", s ? s : "?");
    put_loc(out, l);
}

/* Shortest of %.15g / %.17g that reads back as the same double. */
static void put_double(FILE *out, double v)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, sizeof buf, "%.17g", v);
    fputs(buf, out);
}

static void put_quoted(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f) fprintf(out, "\\x%02x", *p);
        else fputc(*p, out);
    }
    fputc('"', out);
}

static void dump_args(FILE *out, const ast_arg *a, int depth);

static void dump_expr(FILE *out, const ast_expr *e, int depth, const char *key, pg_loc key_loc)
{
    indent(out, depth);
    if (!e && key) { /* a block formal */
        put_loc(out, key_loc);
        fprintf(out, " %s\n", key);
        return;
    }
    if (!e) {
        fputs("(missing)\n", out);
        return;
    }
    if (key) {
        put_loc(out, key_loc);
        fprintf(out, " %s = ", key);
    }
    put_loc(out, e->loc);
    switch (e->kind) {
    case EX_INT: fprintf(out, " int %" PRId64 "\n", e->ival); return;
    case EX_FLOAT: fputs(" float ", out); put_double(out, e->fval); fputc('\n', out); return;
    case EX_STRING: fputs(" string ", out); put_quoted(out, e->str); fputc('\n', out); return;
    case EX_NAME: fprintf(out, " name %s\n", e->str ? e->str : "?"); return;
    case EX_BINOP: fprintf(out, " binop %c\n", e->op); break;
    case EX_NEG: fputs(" neg\n", out); break;
    case EX_ARROW: fputs(" arrow\n", out); break;
    case EX_TUPLE: fputs(" tuple\n", out); dump_args(out, e->args, depth + 1); return;
    case EX_CALL: fprintf(out, " call %s\n", e->str ? e->str : "?"); dump_args(out, e->args, depth + 1); return;
    case EX_FOR: {
        fputs(" for\n", out);
        pg_loc none = {0};
        dump_expr(out, e->lhs, depth + 1, NULL, none);
        dump_args(out, e->args, depth + 1);
        return;
    }
    }
    pg_loc none = {0};
    dump_expr(out, e->lhs, depth + 1, NULL, none);
    if (e->kind != EX_NEG) dump_expr(out, e->rhs, depth + 1, NULL, none);
}

/* A positional argument is just its expression; a keyed one is
 * `line:col key = line:col value`. */
static void dump_args(FILE *out, const ast_arg *a, int depth)
{
    for (; a; a = a->next) dump_expr(out, a->value, depth, a->key, a->key_loc);
}

static void dump_stmts(FILE *out, const ast_stmt *s, int depth);

static void dump_stmt(FILE *out, const ast_stmt *s, int depth)
{
    static const char *const kinds[] = {"model", "const", "input", "target", "param", "train",
                                        "block", "layer", "repeat", "split", "stash", "pop", "tie"};
    pg_loc none = {0};
    indent(out, depth);
    put_loc(out, s->loc);
    fprintf(out, " %s", (unsigned)s->kind < sizeof kinds / sizeof *kinds ? kinds[s->kind] : "?");
    switch (s->kind) {
    case ST_LAYER:
        put_name(out, s->callee, s->callee_loc);
        if (s->has_parens) fputs(" ()", out);
        break;
    case ST_SPLIT: case ST_TRAIN: case ST_REPEAT:
        break;
    default:
        put_name(out, s->name, s->name_loc);
    }
    if (s->name && (s->kind == ST_LAYER || s->kind == ST_REPEAT)) {
        fputs(" name", out);
        put_name(out, s->name, s->name_loc);
    }
    if (s->mode) put_name(out, s->mode, s->mode_loc);
    if (s->dtype) {
        fputs(" :", out);
        put_name(out, s->dtype, s->dtype_loc);
    }
    if (s->kind == ST_BLOCK) {
        fputs(" (", out);
        for (int i = 0; i < s->nformals; i++) {
            if (i) fputc(',', out);
            put_name(out, s->formals[i], s->formal_locs[i]);
        }
        fputs(" )", out);
    }
    if (s->end_loc.line) {
        fputs(" end@", out);
        put_loc(out, s->end_loc);
    }
    fputc('\n', out);

    switch (s->kind) {
    case ST_CONST:
        dump_expr(out, s->value, depth + 1, NULL, none);
        break;
    case ST_INPUT: case ST_TARGET: case ST_PARAM:
        indent(out, depth + 1);
        fputs("dims\n", out);
        for (int i = 0; i < s->dims.n; i++) dump_expr(out, s->dims.dim[i], depth + 2, NULL, none);
        if (s->args) {
            indent(out, depth + 1);
            fputs("options\n", out);
            dump_args(out, s->args, depth + 2);
        }
        break;
    case ST_TRAIN: case ST_LAYER: case ST_POP:
        dump_args(out, s->args, depth + 1);
        break;
    case ST_REPEAT:
        indent(out, depth + 1);
        fputs("count\n", out);
        dump_expr(out, s->value, depth + 2, NULL, none);
        indent(out, depth + 1);
        fputs("body\n", out);
        dump_stmts(out, s->body, depth + 2);
        break;
    case ST_BLOCK:
        dump_stmts(out, s->body, depth + 1);
        break;
    default:
        break;
    }
}

static void dump_stmts(FILE *out, const ast_stmt *s, int depth)
{
    for (; s; s = s->next) dump_stmt(out, s, depth);
}

void pg_ast_dump(const pg_ast *ast, FILE *out)
{
    dump_stmts(out, ast->first, 0);
}

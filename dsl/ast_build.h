/* dsl/ast_build.h — internal to the parser: the parse context that the lemon
 * grammar (pipe.y) carries, and the ast_* constructors its actions call
 * (dsl/ast.c). Every constructor takes NULL children (left by error recovery
 * or a full arena) and returns NULL when the arena refuses, setting ctx->oom;
 * the driver (dsl/parse.c) stops on that. */
#ifndef PG_AST_BUILD_H
#define PG_AST_BUILD_H

#include "ast.h"
#include "lexer.h"

typedef struct pg_parse_ctx {
    pg_ast *ast;         /* the tree being built (its arena holds every node) */
    pg_diag *d;          /* where syntax errors go */
    pg_token tok;        /* the token being fed (for errors without one) */
    pg_token prev[2];    /* the two tokens fed before it ([1] the latest), for errors that need them */
    int stop;            /* set on stack overflow or a full arena: feed no more */
    int oom;             /* the arena refused an allocation */
    ast_stmt *top_last;  /* tail of ast->first, for O(1) appends */
} pg_parse_ctx;

/* Singly linked lists with a tail, built left to right by the grammar. */
typedef struct ast_stmt_list { ast_stmt *first, *last; } ast_stmt_list;
typedef struct ast_arg_list { ast_arg *first, *last; int n; } ast_arg_list;

/* ---- lists -------------------------------------------------------------- */
ast_stmt_list ast_stmt_list_empty(void);
ast_stmt_list ast_stmt_list_add(ast_stmt_list l, ast_stmt *s);
ast_arg_list ast_arg_list_empty(void);
ast_arg_list ast_arg_list_add(ast_arg_list l, ast_arg *a);
void ast_top_add(pg_parse_ctx *ctx, ast_stmt *s);

/* ---- expressions and arguments ----------------------------------------- */
ast_expr *ast_literal(pg_parse_ctx *ctx, const pg_token *t); /* INT FLOAT STRING WORD IDENT */
ast_expr *ast_binop(pg_parse_ctx *ctx, ast_expr *l, const pg_token *op, ast_expr *r);
ast_expr *ast_arrow(pg_parse_ctx *ctx, ast_expr *l, const pg_token *arrow, ast_expr *r);
ast_expr *ast_neg(pg_parse_ctx *ctx, const pg_token *minus, ast_expr *e);
ast_expr *ast_call(pg_parse_ctx *ctx, const pg_token *name, ast_arg_list args);
ast_expr *ast_tuple(pg_parse_ctx *ctx, const pg_token *lparen, ast_expr *first, ast_arg_list rest);
/* `value for "p" "q"` (a train setting by parameter name pattern); op_loc is `for` */
ast_expr *ast_for(pg_parse_ctx *ctx, ast_expr *value, const pg_token *kw, ast_arg_list patterns);
ast_arg *ast_arg_new(pg_parse_ctx *ctx, const pg_token *key, ast_expr *value); /* key may be NULL */

/* ---- statements --------------------------------------------------------- */
ast_stmt *ast_model(pg_parse_ctx *ctx, const pg_token *kw, const pg_token *name);
ast_stmt *ast_const(pg_parse_ctx *ctx, const pg_token *kw, const pg_token *name, ast_expr *value);
/* NAME : DTYPE [dims]  — kind and position are filled by ast_decl_as */
ast_stmt *ast_decl(pg_parse_ctx *ctx, const pg_token *name, const pg_token *dtype, ast_arg_list dims);
ast_stmt *ast_decl_as(pg_parse_ctx *ctx, ast_stmt *decl, ast_stmt_kind kind, const pg_token *kw,
                      ast_arg_list options);
ast_stmt *ast_train(pg_parse_ctx *ctx, const pg_token *kw, ast_arg_list settings, const pg_token *rbrace);
ast_stmt *ast_block(pg_parse_ctx *ctx, const pg_token *kw, const pg_token *name, ast_arg_list formals,
                    ast_stmt_list body, const pg_token *rbrace);
ast_stmt *ast_layer(pg_parse_ctx *ctx, const pg_token *callee, int has_parens, ast_arg_list args);
ast_stmt *ast_repeat(pg_parse_ctx *ctx, const pg_token *kw, ast_expr *count, ast_stmt_list body,
                     const pg_token *rbrace); /* rbrace NULL: `repeat N item` */
ast_stmt *ast_named(pg_parse_ctx *ctx, const pg_token *name, ast_stmt *s);
ast_stmt *ast_simple(pg_parse_ctx *ctx, ast_stmt_kind kind, const pg_token *kw, const pg_token *name,
                     const pg_token *mode); /* split, stash, pop, tie */
ast_stmt *ast_pop_args(pg_parse_ctx *ctx, ast_stmt *pop, ast_arg_list args); /* pop NAME MODE(args) */

/* ---- errors (called from pipe.y's %syntax_error / %stack_overflow) ---------- */
void pg_parse_syntax_error(pg_parse_ctx *ctx, const pg_token *t, const int *expected, int nexpected);
void pg_parse_stack_overflow(pg_parse_ctx *ctx);

#endif

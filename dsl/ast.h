/* dsl/ast.h — the syntax tree of a .pipe file, as the parser builds it.
 * Every node carries the position of its first token. All nodes live in one
 * pg_arena owned by the pg_ast; freeing the arena frees the tree, so parser
 * error paths cannot leak. The checker (dsl/check.c) turns this tree into the
 * flat, expanded model of dsl/ir.h. */
#ifndef PG_AST_H
#define PG_AST_H

#include <stddef.h>
#include <stdint.h>
#include "diag.h"

/* ---- arena --------------------------------------------------------------- */
typedef struct pg_arena_block pg_arena_block;
typedef struct pg_arena {
    pg_arena_block *head;
    size_t used_total;
    size_t limit; /* refuse to grow past this many bytes (0 = no limit) */
} pg_arena;

void *pg_arena_alloc(pg_arena *a, size_t n);        /* zeroed; NULL past limit */
char *pg_arena_strndup(pg_arena *a, const char *s, size_t n);
void pg_arena_free(pg_arena *a);

/* ---- expressions ----------------------------------------------------------
 * Used for shapes (`4*d`), attribute values (`512 -> 1024`, `causal`,
 * `lr = 1e-3`), and train settings (`sgd(lr = 1e-3)`, `interleaved(2)`,
 * `file("s.csv")`, `betas = (0.9, 0.95)`). */
typedef enum ast_expr_kind {
    EX_INT,    /* ival */
    EX_FLOAT,  /* fval (written with '.' or an exponent) */
    EX_STRING, /* str, quotes removed, escapes resolved */
    EX_NAME,   /* str: an identifier, or a word such as `1f1b` */
    EX_BINOP,  /* op in + - * / % ; lhs, rhs */
    EX_NEG,    /* -lhs */
    EX_ARROW,  /* lhs -> rhs (linear(512 -> 1024)) */
    EX_TUPLE,  /* (a, b, ...): args holds the items, keys NULL */
    EX_CALL,   /* str(args): a call inside a setting, e.g. sgd(lr = 1e-3) */
    EX_FOR     /* lhs for "p" "q": a setting for the parameters matching the patterns in args (EX_STRING) */
} ast_expr_kind;

typedef struct ast_arg ast_arg;

typedef struct ast_expr {
    ast_expr_kind kind;
    pg_loc loc;
    int64_t ival;
    double fval;
    const char *str;
    char op; /* '+', '-', '*', '/', '%' for EX_BINOP */
    pg_loc op_loc; /* EX_BINOP, EX_ARROW, EX_NEG: the operator token (errors point here) */
    struct ast_expr *lhs, *rhs;
    ast_arg *args; /* EX_CALL, EX_TUPLE */
} ast_expr;

/* One argument of a call: positional (key == NULL) or `key = value`. */
struct ast_arg {
    pg_loc loc;
    const char *key;
    pg_loc key_loc;
    ast_expr *value;
    ast_arg *next;
};

/* ---- statements ---------------------------------------------------------- */
typedef enum ast_stmt_kind {
    ST_MODEL,  /* model NAME                                  name */
    ST_CONST,  /* const NAME = expr                           name, value */
    ST_INPUT,  /* input NAME : dtype[dims]                    name, dtype, dims */
    ST_TARGET, /* target NAME : dtype[dims]                   name, dtype, dims */
    ST_PARAM,  /* param NAME : dtype[dims] [init = expr]      name, dtype, dims, args */
    ST_TRAIN,  /* train { key = value ... }                   args (key always set) */
    ST_BLOCK,  /* block NAME(p, q) { body }                   name, formals, body */
    ST_LAYER,  /* [NAME =] CALLEE [(args)]  (layer or block call) name?, callee, args */
    ST_REPEAT, /* [NAME =] repeat EXPR item | { body }        name?, value, body */
    ST_SPLIT,  /* split */
    ST_STASH,  /* stash NAME                                  name */
    ST_POP,    /* pop NAME MODE [(args)]                      name, mode, args */
    ST_TIE     /* tie NAME MODE                               name, mode */
} ast_stmt_kind;

typedef struct ast_dims {
    int n;
    ast_expr **dim;
} ast_dims;

typedef struct ast_stmt {
    ast_stmt_kind kind;
    pg_loc loc;            /* first token of the statement */
    const char *name;      /* may be NULL for unnamed layers / repeats */
    pg_loc name_loc;
    const char *callee;    /* ST_LAYER: layer kind or block name */
    pg_loc callee_loc;
    int has_parens;        /* ST_LAYER: `relu` vs `relu()` */
    ast_arg *args;         /* ST_LAYER call args, ST_TRAIN settings, ST_PARAM options, ST_POP mode options */
    const char *mode;      /* ST_POP: add|concat|take, ST_TIE: replicate|transmit (unchecked) */
    pg_loc mode_loc;
    const char *dtype;     /* ST_INPUT/TARGET/PARAM: f32|bf16|i32 (unchecked) */
    pg_loc dtype_loc;
    ast_dims dims;         /* ST_INPUT/TARGET/PARAM */
    ast_expr *value;       /* ST_CONST value, ST_REPEAT count */
    const char **formals;  /* ST_BLOCK parameter names */
    pg_loc *formal_locs;
    int nformals;
    struct ast_stmt *body; /* ST_BLOCK, ST_REPEAT: list */
    pg_loc end_loc;        /* ST_BLOCK / ST_REPEAT / ST_TRAIN: the closing brace */
    struct ast_stmt *next;
} ast_stmt;

typedef struct pg_ast {
    pg_arena arena;
    ast_stmt *first; /* top-level statements in source order */
} pg_ast;

/* Lex and parse src into ast. Syntax errors are reported through d (several
 * per run where the parser can resynchronise). Returns the number of errors;
 * the tree is usable by the checker only when it returns 0. */
int pg_parse(const pg_source *src, pg_ast *ast, pg_diag *d);
void pg_ast_free(pg_ast *ast);

/* Debug/golden dump of the tree, one node per line, indented (tests/golden). */
void pg_ast_dump(const pg_ast *ast, FILE *out);

#endif

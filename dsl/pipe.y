/* dsl/pipe.y — the .pipe grammar (lemon; syntax in dsl/README.md).
 * Every action is one call to an ast_* constructor (dsl/ast.c). Nodes live in
 * the tree's arena, so discarded values need no %destructor: freeing the arena
 * frees everything, error paths included. Errors go to the parse context,
 * never to stdout; dsl/parse.c drives the parser and stops after 20. */

%include {
/* The parser's trace hooks are global mutable state; leave them out. */
#define NDEBUG 1
#include <stdlib.h>
#include "ast_build.h"
struct yyParser;
static int pipe_expected(struct yyParser *p, int *out, int max);
}

%name pgParse
%token_prefix TK_
%token_type {pg_token}               /* a token by value: kind, position, text, literal value */
%extra_context {pg_parse_ctx *ctx}   /* the parse context: tree, arena, diagnostics */
%stack_size 1000                     /* bounds nesting; deeper input gets "nesting too deep" */
%stack_overflow { pg_parse_stack_overflow(ctx); }
/* Report `unexpected X, expected Y`; lemon then pops to a rule with `error`
 * (stmts, items, settings), skips tokens until one fits and goes on. */
%syntax_error {
  int expected[64];
  pg_parse_syntax_error(ctx, &TOKEN, expected, pipe_expected(yypParser, expected, 64));
}

/* Token codes in a fixed order (build/gen/pipe.h); ILLEGAL is what the lexer
 * returns for a bad byte or an unterminated string: no rule accepts it. */
%token MODEL CONST INPUT TARGET PARAM TRAIN BLOCK REPEAT SPLIT STASH POP TIE
       IDENT WORD INT FLOAT STRING
       LPAREN RPAREN LBRACKET RBRACKET LBRACE RBRACE COMMA EQ COLON ARROW
       PLUS MINUS STAR SLASH PERCENT ILLEGAL FOR.

%nonassoc ARROW.
%left PLUS MINUS.
%left STAR SLASH PERCENT.
%right NEG.

/* ---- file and statements ------------------------------------------------ */
file ::= stmts.
stmts ::= .
stmts ::= stmts stmt(S).                          { ast_top_add(ctx, S); }
stmts ::= stmts error.                            /* resync at the next statement */

%type stmt {ast_stmt *}
stmt(A) ::= MODEL(K) IDENT(N).                    { A = ast_model(ctx, &K, &N); }
stmt(A) ::= CONST(K) IDENT(N) EQ expr(E).         { A = ast_const(ctx, &K, &N, E); }
stmt(A) ::= INPUT(K) decl(D).                     { A = ast_decl_as(ctx, D, ST_INPUT, &K, ast_arg_list_empty()); }
stmt(A) ::= TARGET(K) decl(D).                    { A = ast_decl_as(ctx, D, ST_TARGET, &K, ast_arg_list_empty()); }
stmt(A) ::= PARAM(K) decl(D).                     { A = ast_decl_as(ctx, D, ST_PARAM, &K, ast_arg_list_empty()); }
stmt(A) ::= PARAM(K) decl(D) LPAREN args(O) RPAREN. { A = ast_decl_as(ctx, D, ST_PARAM, &K, O); }
stmt(A) ::= TRAIN(K) LBRACE settings(S) RBRACE(R).  { A = ast_train(ctx, &K, S, &R); }
stmt(A) ::= BLOCK(K) IDENT(N) LPAREN formals(F) RPAREN LBRACE items(B) RBRACE(R).
                                                  { A = ast_block(ctx, &K, &N, F, B, &R); }
stmt(A) ::= item(A).

%type decl {ast_stmt *}
decl(A) ::= IDENT(N) COLON IDENT(T) LBRACKET dims(D) RBRACKET. { A = ast_decl(ctx, &N, &T, D); }
/* a scalar per sample (a class index target): `y : i32` or `y : i32[]` */
decl(A) ::= IDENT(N) COLON IDENT(T).              { A = ast_decl(ctx, &N, &T, ast_arg_list_empty()); }
decl(A) ::= IDENT(N) COLON IDENT(T) LBRACKET RBRACKET. { A = ast_decl(ctx, &N, &T, ast_arg_list_empty()); }

%type dims {ast_arg_list}
dims(A) ::= expr(E).                              { A = ast_arg_list_add(ast_arg_list_empty(), ast_arg_new(ctx, NULL, E)); }
dims(A) ::= dims(L) COMMA expr(E).                { A = ast_arg_list_add(L, ast_arg_new(ctx, NULL, E)); }

%type settings {ast_arg_list}
settings(A) ::= .                                 { A = ast_arg_list_empty(); }
settings(A) ::= settings(L) IDENT(K) EQ expr(E).  { A = ast_arg_list_add(L, ast_arg_new(ctx, &K, E)); }
/* a setting for the parameters whose names match: `weight_decay = 0 for "*.bias" "*norm*"` */
settings(A) ::= settings(L) IDENT(K) EQ expr(E) FOR(F) patterns(P).
                                                  { A = ast_arg_list_add(L, ast_arg_new(ctx, &K, ast_for(ctx, E, &F, P))); }
settings(A) ::= settings(A) error.                /* resync at the next setting or '}' */

%type patterns {ast_arg_list}
patterns(A) ::= STRING(S).                        { A = ast_arg_list_add(ast_arg_list_empty(), ast_arg_new(ctx, NULL, ast_literal(ctx, &S))); }
patterns(A) ::= patterns(L) STRING(S).            { A = ast_arg_list_add(L, ast_arg_new(ctx, NULL, ast_literal(ctx, &S))); }
patterns(A) ::= patterns(L) COMMA STRING(S).      { A = ast_arg_list_add(L, ast_arg_new(ctx, NULL, ast_literal(ctx, &S))); }

/* Block parameters: names only, kept as keyless-valueless args. */
%type formals {ast_arg_list}
%type formal_list {ast_arg_list}
formals(A) ::= .                                  { A = ast_arg_list_empty(); }
formals(A) ::= formal_list(A).
formal_list(A) ::= IDENT(N).                      { A = ast_arg_list_add(ast_arg_list_empty(), ast_arg_new(ctx, &N, NULL)); }
formal_list(A) ::= formal_list(L) COMMA IDENT(N). { A = ast_arg_list_add(L, ast_arg_new(ctx, &N, NULL)); }

/* ---- items: what a model, a block or a repeat is made of ---------------- */
%type items {ast_stmt_list}
items(A) ::= .                                    { A = ast_stmt_list_empty(); }
items(A) ::= items(L) item(I).                    { A = ast_stmt_list_add(L, I); }
items(A) ::= items(A) error.                      /* resync at the next item or '}' */

%type item {ast_stmt *}
%type layer {ast_stmt *}
item(A) ::= layer(A).
item(A) ::= IDENT(N) EQ layer(L).                 { A = ast_named(ctx, &N, L); }
item(A) ::= SPLIT(K).                             { A = ast_simple(ctx, ST_SPLIT, &K, NULL, NULL); }
/* `split(h, 6)`: a stage boundary before instance 6 of `h = repeat N ...` (expand.c) */
item(A) ::= SPLIT(K) LPAREN args(G) RPAREN.       { A = ast_simple(ctx, ST_SPLIT, &K, NULL, NULL); if (A) A->args = G.first; }
item(A) ::= STASH(K) IDENT(N).                    { A = ast_simple(ctx, ST_STASH, &K, &N, NULL); }
item(A) ::= POP(K) IDENT(N) IDENT(M).             { A = ast_simple(ctx, ST_POP, &K, &N, &M); }
/* a mode with options: `pop enc concat(dim = 0)` */
item(A) ::= POP(K) IDENT(N) IDENT(M) LPAREN args(G) RPAREN. { A = ast_pop_args(ctx, ast_simple(ctx, ST_POP, &K, &N, &M), G); }
item(A) ::= TIE(K) IDENT(N) IDENT(M).             { A = ast_simple(ctx, ST_TIE, &K, &N, &M); }
layer(A) ::= IDENT(C).                            { A = ast_layer(ctx, &C, 0, ast_arg_list_empty()); }
layer(A) ::= IDENT(C) LPAREN RPAREN.              { A = ast_layer(ctx, &C, 1, ast_arg_list_empty()); }
layer(A) ::= IDENT(C) LPAREN args(G) RPAREN.      { A = ast_layer(ctx, &C, 1, G); }
layer(A) ::= REPEAT(K) expr(E) item(I).           { A = ast_repeat(ctx, &K, E, ast_stmt_list_add(ast_stmt_list_empty(), I), NULL); }
layer(A) ::= REPEAT(K) expr(E) LBRACE items(B) RBRACE(R). { A = ast_repeat(ctx, &K, E, B, &R); }

/* ---- arguments and expressions ------------------------------------------ */
%type args {ast_arg_list}
%type arg {ast_arg *}
args(A) ::= arg(X).                               { A = ast_arg_list_add(ast_arg_list_empty(), X); }
args(A) ::= args(L) COMMA arg(X).                 { A = ast_arg_list_add(L, X); }
arg(A) ::= expr(E).                               { A = ast_arg_new(ctx, NULL, E); }
arg(A) ::= IDENT(K) EQ expr(E).                   { A = ast_arg_new(ctx, &K, E); }

%type expr {ast_expr *}
%type exprs {ast_arg_list}
expr(A) ::= expr(L) ARROW(O) expr(R).             { A = ast_arrow(ctx, L, &O, R); }
expr(A) ::= expr(L) PLUS(O) expr(R).              { A = ast_binop(ctx, L, &O, R); }
expr(A) ::= expr(L) MINUS(O) expr(R).             { A = ast_binop(ctx, L, &O, R); }
expr(A) ::= expr(L) STAR(O) expr(R).              { A = ast_binop(ctx, L, &O, R); }
expr(A) ::= expr(L) SLASH(O) expr(R).             { A = ast_binop(ctx, L, &O, R); }
expr(A) ::= expr(L) PERCENT(O) expr(R).           { A = ast_binop(ctx, L, &O, R); }
expr(A) ::= MINUS(K) expr(E). [NEG]               { A = ast_neg(ctx, &K, E); }
expr(A) ::= INT(T).                               { A = ast_literal(ctx, &T); }
expr(A) ::= FLOAT(T).                             { A = ast_literal(ctx, &T); }
expr(A) ::= STRING(T).                            { A = ast_literal(ctx, &T); }
expr(A) ::= WORD(T).                              { A = ast_literal(ctx, &T); }
expr(A) ::= IDENT(T).                             { A = ast_literal(ctx, &T); }
expr(A) ::= IDENT(N) LPAREN RPAREN.               { A = ast_call(ctx, &N, ast_arg_list_empty()); }
expr(A) ::= IDENT(N) LPAREN args(G) RPAREN.       { A = ast_call(ctx, &N, G); }
expr(A) ::= LPAREN expr(E) RPAREN.               { A = E; }
expr(A) ::= LPAREN(K) expr(E) COMMA exprs(L) RPAREN. { A = ast_tuple(ctx, &K, E, L); }
exprs(A) ::= expr(E).                             { A = ast_arg_list_add(ast_arg_list_empty(), ast_arg_new(ctx, NULL, E)); }
exprs(A) ::= exprs(L) COMMA expr(E).              { A = ast_arg_list_add(L, ast_arg_new(ctx, NULL, E)); }

/* ---- "expected ..." for syntax errors ----------------------------------- */
%code {
/* Which terminals the parser could take next: for each one, replay lemon's
 * reductions on a copy of the state stack until it shifts (possible) or hits
 * an error. Up to max codes go to out; returns how many there are in all. */
static int pipe_can_take(const yyParser *p, int t)
{
  YYACTIONTYPE st[YYSTACKDEPTH + 64];
  int n = (int)(p->yytos - p->yystack) + 1;
  for (int i = 0; i < n; i++) st[i] = p->yystack[i].stateno;
  for (int guard = 0; guard < 10000; guard++) {
    YYACTIONTYPE act = yy_find_shift_action((YYCODETYPE)t, st[n - 1]);
    if (act >= YY_MIN_REDUCE && act <= YY_MAX_REDUCE) {
      int rule = act - YY_MIN_REDUCE;
      n += yyRuleInfoNRhs[rule];           /* pops: stored as minus the length */
      if (n < 1 || n >= (int)(sizeof st / sizeof st[0])) return 0;
      st[n] = yy_find_reduce_action(st[n - 1], (YYCODETYPE)yyRuleInfoLhs[rule]);
      n++;
      continue;
    }
    return act <= YY_MAX_SHIFTREDUCE || act == YY_ACCEPT_ACTION;
  }
  return 0;
}

static int pipe_expected(struct yyParser *p, int *out, int max)
{
  int count = 0;
  for (int t = 0; t < YYNTOKEN; t++) {
    if (t == TK_ILLEGAL || !pipe_can_take(p, t)) continue;
    if (count < max) out[count] = t;
    count++;
  }
  return count;
}
}

/* dsl/parse.c — the front-end driver: lexer tokens into the lemon parser,
 * lexical and syntax errors into the diagnostics, at most PARSE_MAX_ERRORS of
 * them, and a byte limit on the tree so no input allocates without bound. */
#include <stdlib.h>
#include <string.h>

#include "ast_build.h"
#include "pipe.h"

#define PARSE_MAX_ERRORS 20
#define PARSE_ARENA_LIMIT ((size_t)256 << 20) /* bytes of syntax tree */

/* lemon's interface (build/gen/pipe.c, %name pgParse) */
void *pgParseAlloc(void *(*alloc)(size_t), pg_parse_ctx *ctx);
void pgParse(void *parser, int major, pg_token minor);
void pgParseFree(void *parser, void (*dealloc)(void *));

/* How a token kind reads in "expected ..." and "unexpected ...". */
static const char *token_name(int type)
{
    switch (type) {
    case 0: return "end of file";
    case TK_MODEL: return "'model'";
    case TK_CONST: return "'const'";
    case TK_INPUT: return "'input'";
    case TK_TARGET: return "'target'";
    case TK_PARAM: return "'param'";
    case TK_TRAIN: return "'train'";
    case TK_BLOCK: return "'block'";
    case TK_REPEAT: return "'repeat'";
    case TK_SPLIT: return "'split'";
    case TK_STASH: return "'stash'";
    case TK_POP: return "'pop'";
    case TK_TIE: return "'tie'";
    case TK_FOR: return "'for'";
    case TK_IDENT: return "a name";
    case TK_WORD: return "a word";
    case TK_INT: return "an integer";
    case TK_FLOAT: return "a number";
    case TK_STRING: return "a string";
    case TK_LPAREN: return "'('";
    case TK_RPAREN: return "')'";
    case TK_LBRACKET: return "'['";
    case TK_RBRACKET: return "']'";
    case TK_LBRACE: return "'{'";
    case TK_RBRACE: return "'}'";
    case TK_COMMA: return "','";
    case TK_EQ: return "'='";
    case TK_COLON: return "':'";
    case TK_ARROW: return "'->'";
    case TK_PLUS: return "'+'";
    case TK_MINUS: return "'-'";
    case TK_STAR: return "'*'";
    case TK_SLASH: return "'/'";
    case TK_PERCENT: return "'%'";
    default: return "a token";
    }
}

static int has(const int *set, int n, int t)
{
    for (int i = 0; i < n; i++)
        if (set[i] == t) return 1;
    return 0;
}

static int is_operator(int t)
{
    return t == TK_ARROW || t == TK_PLUS || t == TK_MINUS || t == TK_STAR || t == TK_SLASH ||
           t == TK_PERCENT;
}

/* "unexpected X" plus, when the parser can say it briefly, "expected Y".
 * expected[] holds every terminal the parser could have taken (operators are
 * left out of the list: after an expression they always could). */
/* `pop NAME` or `tie NAME` cut short (only a mode could come next): say which
 * modes there are, at the keyword. 1 if reported. */
static int missing_mode(pg_parse_ctx *ctx, const int *expected, int nexpected)
{
    const pg_token *kw = &ctx->prev[0], *name = &ctx->prev[1];
    if ((kw->type != TK_POP && kw->type != TK_TIE) || name->type != TK_IDENT || nexpected != 1 ||
        expected[0] != TK_IDENT)
        return 0;
    int n = name->len > 64 ? 64 : (int)name->len;
    if (kw->type == TK_POP)
        pg_error(ctx->d, kw->loc, "`pop %.*s` needs a mode: `pop %.*s add` (sum) or `pop %.*s concat` (join the last "
                 "dimensions)", n, name->text, n, name->text, n, name->text);
    else
        pg_error(ctx->d, kw->loc, "`tie %.*s` needs a mode: `tie %.*s replicate` (a copy on every using stage) or "
                 "`tie %.*s transmit` (sent from its first stage)", n, name->text, n, name->text, n, name->text);
    return 1;
}

void pg_parse_syntax_error(pg_parse_ctx *ctx, const pg_token *t, const int *expected, int nexpected)
{
    if (t->type == TK_ILLEGAL) return; /* the lexer has said what is wrong */
    if (missing_mode(ctx, expected, nexpected)) return;
    char what[80];
    int n = t->len > 32 ? 32 : (int)t->len;
    const char *more = t->len > 32 ? "..." : "";
    if (t->type == 0) snprintf(what, sizeof what, "end of file");
    else if (t->type == TK_IDENT) snprintf(what, sizeof what, "name '%.*s%s'", n, t->text, more);
    else if (t->type == TK_STRING) snprintf(what, sizeof what, "string %.*s%s", n, t->text, more);
    else snprintf(what, sizeof what, "'%.*s%s'", n, t->text, more);

    int list[64], nl = 0;
    for (int i = 0; i < nexpected && nl < 64; i++)
        if (!is_operator(expected[i])) list[nl++] = expected[i];

    char exp[160] = "";
    /* after `NAME : DTYPE` the shape may follow (lemon has already reduced the scalar declaration) */
    int after_dtype = ctx->prev[0].type == TK_COLON && ctx->prev[1].type == TK_IDENT;
    if (has(list, nl, TK_MODEL) && after_dtype) snprintf(exp, sizeof exp, ", expected '[' or a statement");
    else if (has(list, nl, TK_MODEL)) snprintf(exp, sizeof exp, ", expected a statement");
    else if (has(list, nl, TK_SPLIT) && has(list, nl, TK_RBRACE)) snprintf(exp, sizeof exp, ", expected a layer or '}'");
    else if (has(list, nl, TK_SPLIT)) snprintf(exp, sizeof exp, ", expected a layer");
    else if (has(list, nl, TK_INT) && nl > 4) snprintf(exp, sizeof exp, ", expected an expression");
    else if (nl >= 1 && nl <= 4) {
        size_t k = (size_t)snprintf(exp, sizeof exp, ", expected ");
        for (int i = 0; i < nl && k < sizeof exp; i++)
            k += (size_t)snprintf(exp + k, sizeof exp - k, "%s%s", i == 0 ? "" : i == nl - 1 ? " or " : ", ",
                                  token_name(list[i]));
    }
    pg_error(ctx->d, t->loc, "unexpected %s%s", what, exp);
}

void pg_parse_stack_overflow(pg_parse_ctx *ctx)
{
    pg_error(ctx->d, ctx->tok.loc, "nesting too deep (blocks, repeats and parentheses nest at most a few hundred levels)");
    ctx->stop = 1;
}

int pg_parse(const pg_source *src, pg_ast *ast, pg_diag *d)
{
    memset(ast, 0, sizeof *ast);
    ast->arena.limit = PARSE_ARENA_LIMIT;
    pg_parse_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.ast = ast;
    ctx.d = d;
    int errors0 = d->errors;
    pg_loc file_only = {src->path, 0, 0};

    void *parser = pgParseAlloc(malloc, &ctx);
    if (!parser) {
        pg_error(d, file_only, "out of memory");
        return d->errors - errors0;
    }
    pg_lexer lx;
    pg_lex_init(&lx, src);
    for (;;) {
        int type = pg_lex_next(&lx, &ctx.tok);
        if (ctx.tok.err) pg_error(d, ctx.tok.err_loc, "%s", ctx.tok.err);
        if (d->errors - errors0 >= PARSE_MAX_ERRORS) break;
        pgParse(parser, type, ctx.tok);
        ctx.prev[0] = ctx.prev[1];
        ctx.prev[1] = ctx.tok;
        if (ctx.oom) pg_error(d, ctx.tok.loc, "input too large: its syntax tree needs more than %zu MiB",
                              PARSE_ARENA_LIMIT >> 20);
        if (ctx.stop || type == 0 || d->errors - errors0 >= PARSE_MAX_ERRORS) break;
    }
    if (d->errors - errors0 >= PARSE_MAX_ERRORS)
        pg_note(d, file_only, "too many errors (%d), stopping here", PARSE_MAX_ERRORS);
    pgParseFree(parser, free);
    return d->errors - errors0;
}

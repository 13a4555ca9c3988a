/* dsl/lexer.re — the .pipe tokenizer; re2c turns it into build/gen/lexer.c.
 * One flat rule table, longest match, `[^]` catches everything else. The
 * buffer ends in a NUL sentinel (pg_source guarantees it), so no rule reads
 * past the end; a NUL before the end is an error token. Every rule either
 * accepts at each step or is a fixed string, so scanning never backtracks
 * at all (re2c needs no YYMARKER): lexing is linear, a 1 MB line is just long. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lexer.h"
#include "pipe.h"

void pg_lex_init(pg_lexer *lx, const pg_source *src)
{
    memset(lx, 0, sizeof *lx);
    lx->begin = lx->cur = lx->line_start = src->text;
    lx->end = src->text + src->len;
    lx->line = 1;
    lx->file = src->path;
}

static pg_loc loc_at(const pg_lexer *lx, const char *p)
{
    size_t col = (size_t)(p - lx->line_start) + 1;
    pg_loc l = {lx->file, lx->line, col > 0x7fffffff ? 0x7fffffff : (int)col};
    return l;
}

/* Mark tok as bad: the driver reports msg at p. Returns the token's type. */
static int lex_error(pg_token *tok, pg_loc at, const char *msg)
{
    tok->err = msg;
    tok->err_loc = at;
    return tok->type;
}

/* The end-of-input token sits just after the last byte of the last line, so
 * "unexpected end of file" quotes a real line. */
static int lex_eof(pg_lexer *lx, pg_token *tok)
{
    lx->cur = lx->end;
    const char *ls = lx->line_start;
    int line = lx->line;
    if (ls == lx->end && lx->end > lx->begin) { /* after a final newline */
        const char *p = lx->end - 1;            /* that newline */
        while (p > lx->begin && p[-1] != '\n') p--;
        ls = p;
        line--;
    }
    size_t col = (size_t)(lx->end - ls) + (ls < lx->end && lx->end[-1] == '\n' ? 0 : 1);
    tok->type = 0;
    tok->loc = (pg_loc){lx->file, line, col > 0x7fffffff ? 0x7fffffff : (int)col};
    return 0;
}

static int lex_int(pg_token *tok)
{
    int64_t v = 0;
    for (size_t i = 0; i < tok->len; i++) {
        int dgt = tok->text[i] - '0';
        if (v > (INT64_MAX - dgt) / 10) {
            tok->ival = INT64_MAX;
            return lex_error(tok, tok->loc, "integer literal too large (the limit is 2^63-1)");
        }
        v = v * 10 + dgt;
    }
    tok->ival = v;
    return tok->type;
}

/* The rule already matched the float syntax, which strtod accepts whole. */
static int lex_float(pg_token *tok)
{
    char *stop;
    errno = 0;
    tok->fval = strtod(tok->text, &stop);
    if (stop != tok->text + tok->len) return lex_error(tok, tok->loc, "invalid float literal");
    if (isinf(tok->fval)) {
        tok->fval = 0;
        return lex_error(tok, tok->loc, "float literal out of range");
    }
    return tok->type;
}

/* Strings know only the escapes \" and \\ (README); anything else is an error
 * at the backslash, and the token stays a usable STRING. */
static int lex_string(pg_lexer *lx, pg_token *tok)
{
    for (size_t i = 1; i + 1 < tok->len; i++) {
        if (tok->text[i] != '\\') continue;
        char c = tok->text[i + 1];
        if (c != '"' && c != '\\') {
            snprintf(lx->msg, sizeof lx->msg, "invalid escape sequence in string "
                     "(only \\\" and \\\\ are allowed)");
            return lex_error(tok, loc_at(lx, tok->text + i), lx->msg);
        }
        i++;
    }
    return tok->type;
}

static int lex_bad_byte(pg_lexer *lx, pg_token *tok)
{
    unsigned char c = (unsigned char)tok->text[0];
    if (c > 0x20 && c < 0x7f) snprintf(lx->msg, sizeof lx->msg, "unexpected character '%c'", c);
    else if (c == 0) snprintf(lx->msg, sizeof lx->msg, "unexpected NUL byte (0x00)");
    else snprintf(lx->msg, sizeof lx->msg, "unexpected byte 0x%02x", c);
    return lex_error(tok, tok->loc, lx->msg);
}

/* Names longer than this are refused: every message that quotes a name stays
 * readable, and the checker's tables stay small. */
#define NAME_MAX_BYTES 255

static int lex_name(pg_lexer *lx, pg_token *tok)
{
    if (tok->len <= NAME_MAX_BYTES) return tok->type;
    snprintf(lx->msg, sizeof lx->msg, "name '%.24s...' is too long (%zu bytes; at most %d)", tok->text, tok->len,
             NAME_MAX_BYTES);
    return lex_error(tok, tok->loc, lx->msg); /* the parser goes on with the name */
}

static int lex_bad_number(pg_lexer *lx, pg_token *tok, const char *what)
{
    int n = tok->len > 40 ? 40 : (int)tok->len;
    snprintf(lx->msg, sizeof lx->msg, "%s '%.*s%s'", what, n, tok->text, tok->len > 40 ? "..." : "");
    tok->type = TK_FLOAT; /* the parser goes on as if it were a number */
    return lex_error(tok, tok->loc, lx->msg);
}

int pg_lex_next(pg_lexer *lx, pg_token *tok)
{
    const unsigned char *cur = (const unsigned char *)lx->cur;
    for (;;) {
        const unsigned char *start = cur;
        memset(tok, 0, sizeof *tok);
        tok->text = (const char *)start;
        tok->loc = loc_at(lx, tok->text);
#define TOKEN(t) do { tok->type = (t); tok->len = (size_t)(cur - start); lx->cur = (const char *)cur; } while (0)
        /*!re2c
        re2c:define:YYCTYPE = "unsigned char";
        re2c:define:YYCURSOR = cur;
        re2c:yyfill:enable = 0;

        digit  = [0-9];
        letter = [A-Za-z_];
        exp    = [eE] [+-]? digit+;
        float  = digit+ "." digit* exp? | "." digit+ exp? | digit+ exp;
        badexp = (digit+ ("." digit*)? | "." digit+) [eE] [+-]?;
        word   = digit+ letter (letter | digit)*;
        junk   = (digit | "." digit) (letter | digit | ".")*;
        strch  = [^"\\\n\x00] | [\\] [^\n\x00];

        [\x00]                 { if ((const char *)cur - 1 == lx->end) return lex_eof(lx, tok);
                                 TOKEN(TK_ILLEGAL); return lex_bad_byte(lx, tok); }
        [ \t\r\f\v]+           { continue; }
        "\n"                   { lx->line++; lx->line_start = (const char *)cur; continue; }
        "#" [^\n\x00]*         { continue; }

        "model"                { TOKEN(TK_MODEL); return tok->type; }
        "const"                { TOKEN(TK_CONST); return tok->type; }
        "input"                { TOKEN(TK_INPUT); return tok->type; }
        "target"               { TOKEN(TK_TARGET); return tok->type; }
        "param"                { TOKEN(TK_PARAM); return tok->type; }
        "train"                { TOKEN(TK_TRAIN); return tok->type; }
        "block"                { TOKEN(TK_BLOCK); return tok->type; }
        "repeat"               { TOKEN(TK_REPEAT); return tok->type; }
        "split"                { TOKEN(TK_SPLIT); return tok->type; }
        "stash"                { TOKEN(TK_STASH); return tok->type; }
        "pop"                  { TOKEN(TK_POP); return tok->type; }
        "tie"                  { TOKEN(TK_TIE); return tok->type; }
        "for"                  { TOKEN(TK_FOR); return tok->type; }

        digit+                 { TOKEN(TK_INT); return lex_int(tok); }
        float                  { TOKEN(TK_FLOAT); return lex_float(tok); }
        badexp                 { TOKEN(TK_FLOAT); return lex_bad_number(lx, tok, "exponent has no digits in"); }
        word                   { TOKEN(TK_WORD); return lex_name(lx, tok); }
        junk                   { TOKEN(TK_FLOAT); return lex_bad_number(lx, tok, "invalid number"); }
        letter (letter|digit)* { TOKEN(TK_IDENT); return lex_name(lx, tok); }
        ["] strch* ["]         { TOKEN(TK_STRING); return lex_string(lx, tok); }
        ["] strch* [\\]?       { TOKEN(TK_ILLEGAL); return lex_error(tok, tok->loc, "unterminated string (strings end on the same line)"); }

        "("                    { TOKEN(TK_LPAREN); return tok->type; }
        ")"                    { TOKEN(TK_RPAREN); return tok->type; }
        "["                    { TOKEN(TK_LBRACKET); return tok->type; }
        "]"                    { TOKEN(TK_RBRACKET); return tok->type; }
        "{"                    { TOKEN(TK_LBRACE); return tok->type; }
        "}"                    { TOKEN(TK_RBRACE); return tok->type; }
        ","                    { TOKEN(TK_COMMA); return tok->type; }
        "="                    { TOKEN(TK_EQ); return tok->type; }
        ":"                    { TOKEN(TK_COLON); return tok->type; }
        "+"                    { TOKEN(TK_PLUS); return tok->type; }
        "-"                    { TOKEN(TK_MINUS); return tok->type; }
        "*"                    { TOKEN(TK_STAR); return tok->type; }
        "/"                    { TOKEN(TK_SLASH); return tok->type; }
        "%"                    { TOKEN(TK_PERCENT); return tok->type; }
        "->"                   { TOKEN(TK_ARROW); return tok->type; }

        [^]                    { TOKEN(TK_ILLEGAL); return lex_bad_byte(lx, tok); }
        */
#undef TOKEN
    }
}

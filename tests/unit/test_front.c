/* tests/unit/test_front.c — the front end's pieces one by one: diagnostics
 * format, source reading, suggestions, the lexer's tokens and positions, the
 * arena's limit, the parser's error cap. Run by tests/front.t. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tap.h"
#include "ast.h"
#include "lexer.h"
#include "pipe.h"

static pg_source mem_source(const char *path, const char *text, size_t len)
{
    pg_source s;
    s.path = strdup(path);
    s.text = malloc(len + 1);
    memcpy(s.text, text, len);
    s.text[len] = '\0';
    s.len = len;
    return s;
}

/* Run fn's diagnostics into a string (caller frees). */
static char *capture_error(const pg_source *src, pg_loc loc, const char *msg)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    pg_diag d;
    pg_diag_init(&d, f, src);
    pg_error(&d, loc, "%s", msg);
    fclose(f);
    return buf;
}

static void test_diag(void)
{
    pg_source s = mem_source("m.pipe", "model m\n\tlinear(1 -> )\r\nlast", 28);
    char *out = capture_error(&s, (pg_loc){s.path, 2, 14}, "boom");
    OK(strcmp(out, "m.pipe:2:14: error: boom\n\tlinear(1 -> )\n\t            ^\n") == 0,
       "error: message, line with its tab, caret after a tab, CR dropped");
    free(out);
    out = capture_error(&s, (pg_loc){s.path, 0, 0}, "no place");
    OK(strcmp(out, "m.pipe: error: no place\n") == 0, "line 0: `file: error: message` only");
    free(out);
    out = capture_error(&s, (pg_loc){s.path, 3, 5}, "end");
    OK(strcmp(out, "m.pipe:3:5: error: end\nlast\n    ^\n") == 0, "a caret just past the end of the last line");
    free(out);
    out = capture_error(&s, (pg_loc){s.path, 9, 1}, "far");
    OK(strcmp(out, "m.pipe:9:1: error: far\n") == 0, "a line past the end is not quoted");
    free(out);
    pg_source_free(&s);

    /* A 1000-byte line: a 200-byte window around the column, "..." where cut. */
    char line[1001];
    for (int i = 0; i < 1000; i++) line[i] = (char)('a' + i % 26);
    line[1000] = '\0';
    s = mem_source("l.pipe", line, 1000);
    out = capture_error(&s, (pg_loc){s.path, 1, 500}, "mid");
    char *l2 = strchr(out, '\n') + 1, *l3 = strchr(l2, '\n') + 1;
    OK(strncmp(l2, "...", 3) == 0 && (size_t)(l3 - l2) == 3 + 200 + 3 + 1, "a long line is a 200-byte window");
    OK(strncmp(l2 + 3, line + 399, 200) == 0, "the window starts 100 bytes before the column");
    OK(strlen(l3) == 3 + 100 + 2 && l3[103] == '^', "the caret sits under the column in the window");
    free(out);
    out = capture_error(&s, (pg_loc){s.path, 1, 3}, "start");
    l2 = strchr(out, '\n') + 1;
    OK(strncmp(l2, line, 200) == 0 && strncmp(l2 + 200, "...\n  ^\n", 8) == 0, "near the start: no leading ...");
    free(out);
    pg_source_free(&s);

    /* One pg_diag quoting lines in any order: the remembered line start must
     * give the right line forwards, backwards, and back at the top. */
    {
        const char *text = "l1\nl2\n\nl4\nl5\nl6";
        pg_source src = mem_source("o.pipe", text, strlen(text));
        char *b = NULL;
        size_t bn = 0;
        FILE *f = open_memstream(&b, &bn);
        pg_diag d;
        pg_diag_init(&d, f, &src);
        static const int order[] = {5, 2, 6, 3, 1, 4, 4, 6, 1};
        for (int i = 0; i < 9; i++) pg_error(&d, (pg_loc){src.path, order[i], 1}, "x");
        fclose(f);
        OK(strcmp(b, "o.pipe:5:1: error: x\nl5\n^\no.pipe:2:1: error: x\nl2\n^\no.pipe:6:1: error: x\nl6\n^\n"
                     "o.pipe:3:1: error: x\n\n^\no.pipe:1:1: error: x\nl1\n^\no.pipe:4:1: error: x\nl4\n^\n"
                     "o.pipe:4:1: error: x\nl4\n^\no.pipe:6:1: error: x\nl6\n^\no.pipe:1:1: error: x\nl1\n^\n") == 0,
           "lines quoted out of order are the right lines");
        free(b);
        pg_source_free(&src);
    }

    s = mem_source("c.pipe", "a\001b\033c", 5);
    out = capture_error(&s, (pg_loc){s.path, 1, 3}, "ctl");
    OK(strcmp(out, "c.pipe:1:3: error: ctl\na?b?c\n  ^\n") == 0, "control bytes are shown as '?'");
    free(out);
    pg_source_free(&s);

    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    pg_diag d;
    pg_diag_init(&d, f, NULL);
    d.max_errors = 2;
    pg_loc nowhere = {"x.pipe", 0, 0};
    pg_error(&d, nowhere, "one");
    pg_warning(&d, nowhere, "w");
    pg_error(&d, nowhere, "two");
    pg_note(&d, nowhere, "about two");
    pg_error(&d, nowhere, "three");
    pg_note(&d, nowhere, "about three");
    fclose(f);
    OK(strcmp(buf, "x.pipe: error: one\nx.pipe: warning: w\nx.pipe: error: two\nx.pipe: note: about two\n") == 0,
       "max_errors: later errors and their notes are counted, not shown");
    OK(d.errors == 3 && d.warnings == 1 && d.notes == 2, "counts: 3 errors, 1 warning, 2 notes");
    free(buf);
}

static void test_source_read(void)
{
    char dir[] = "/tmp/pgfrontXXXXXX";
    OK(mkdtemp(dir) != NULL, "temporary folder");
    char path[64], *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    pg_diag d;
    pg_diag_init(&d, f, NULL);
    pg_source s;
    OK(pg_source_read(&s, dir, 0, &d) == -1, "a directory is refused");
    snprintf(path, sizeof path, "%s/big.pipe", dir);
    FILE *w = fopen(path, "w");
    fputs("relu relu\n", w);
    fclose(w);
    OK(pg_source_read(&s, path, 5, &d) == -1, "a file over the limit is refused");
    OK(pg_source_read(&s, path, 10, &d) == 0 && s.len == 10 && s.text[10] == '\0' && strcmp(s.path, path) == 0,
       "a file at the limit is read whole and NUL-terminated");
    pg_source_free(&s);
    snprintf(path, sizeof path, "%s/none.pipe", dir);
    OK(pg_source_read(&s, path, 0, &d) == -1, "a missing file is refused");
    fclose(f);
    char want[512];
    snprintf(want, sizeof want, "%s: error: is a directory\n%s/big.pipe: error: file too large (10 bytes, limit 5)\n"
             "%s/none.pipe: error: No such file or directory\n", dir, dir, dir);
    OK(strcmp(buf, want) == 0, "the three refusals, as reported");
    OK(d.errors == 3, "three errors counted");
    free(buf);
    snprintf(path, sizeof path, "%s/big.pipe", dir);
    unlink(path);
    rmdir(dir);
}

static void test_suggest(void)
{
    const char *const names[] = {"linear", "relu", "gelu", "layernorm", "attention", NULL};
    OK(pg_suggest("lienar", names, 6) && strcmp(pg_suggest("lienar", names, 6), "linear") == 0, "lienar -> linear");
    OK(pg_suggest("rel", names, 6) && strcmp(pg_suggest("rel", names, 6), "relu") == 0, "rel -> relu (distance 1)");
    OK(pg_suggest("xyz", names, 6) == NULL, "nothing close: NULL");
    OK(pg_suggest("layernrom", names, 6) && strcmp(pg_suggest("layernrom", names, 6), "layernorm") == 0,
       "a transposition within len/3");
    OK(pg_suggest("gelu", names, 6) == NULL || strcmp(pg_suggest("gelu", names, 6), "gelu") != 0,
       "the word itself is not suggested");
    /* a swap of two adjacent letters is one edit, so short words get it too */
    const char *const attrs[] = {"in", "out", "bias", "width", "sgd", "adamw"};
    OK(pg_suggest("bais", attrs, 6) && strcmp(pg_suggest("bais", attrs, 6), "bias") == 0, "bais -> bias (one swap)");
    OK(pg_suggest("widht", attrs, 6) && strcmp(pg_suggest("widht", attrs, 6), "width") == 0, "widht -> width");
    OK(pg_suggest("sdg", attrs, 6) && strcmp(pg_suggest("sdg", attrs, 6), "sgd") == 0, "sdg -> sgd");
    OK(pg_suggest("gleu", names, 6) && strcmp(pg_suggest("gleu", names, 6), "gelu") == 0, "gleu -> gelu");
    OK(pg_suggest("abis", attrs, 6) == NULL, "two swaps in a short word are too far");
}

static void test_lexer(void)
{
    pg_source s = mem_source("t.pipe", "model m # c\n  x=linear(1f1b, 2.5e-1 -> \"a\\\"b\")\n", 47);
    pg_lexer lx;
    pg_lex_init(&lx, &s);
    int want[] = {TK_MODEL, TK_IDENT, TK_IDENT, TK_EQ, TK_IDENT, TK_LPAREN, TK_WORD, TK_COMMA,
                  TK_FLOAT, TK_ARROW, TK_STRING, TK_RPAREN, 0};
    pg_token t;
    int i = 0, same = 1;
    do {
        pg_lex_next(&lx, &t);
        if (t.type != want[i] || t.err) same = 0;
        if (t.type == TK_FLOAT) OK(t.fval == 0.25, "2.5e-1 is 0.25");
        if (t.type == TK_STRING) OK(t.len == 6 && t.loc.line == 2 && t.loc.col == 28, "string token at 2:28");
        if (t.type == TK_IDENT && i == 2) OK(t.loc.line == 2 && t.loc.col == 3, "x at 2:3 after a comment line");
    } while (want[i++] != 0 && i < 13);
    OK(same && i == 13, "token kinds in order, no errors");
    OK(t.type == 0 && t.loc.line == 2 && t.loc.col == 35, "end of input sits after the last line's text (%d:%d)", t.loc.line, t.loc.col);
    OK(pg_lex_next(&lx, &t) == 0, "end of input again after the end");
    pg_source_free(&s);

    s = mem_source("t.pipe", "9223372036854775807 9223372036854775808 \"x", 42);
    pg_lex_init(&lx, &s);
    pg_lex_next(&lx, &t);
    OK(t.type == TK_INT && t.ival == INT64_MAX && !t.err, "2^63-1 is an INT");
    pg_lex_next(&lx, &t);
    OK(t.type == TK_INT && t.err && strstr(t.err, "too large") && t.err_loc.col == 21, "2^63 is too large, at 1:21");
    pg_lex_next(&lx, &t);
    OK(t.type == TK_ILLEGAL && t.err && strstr(t.err, "unterminated"), "an unterminated string is ILLEGAL");
    OK(pg_lex_next(&lx, &t) == 0, "then end of input");
    pg_source_free(&s);

    s = mem_source("t.pipe", "a\0b", 3);
    pg_lex_init(&lx, &s);
    pg_lex_next(&lx, &t);
    pg_lex_next(&lx, &t);
    OK(t.type == TK_ILLEGAL && t.err && t.loc.col == 2, "a NUL before the end is an error token");
    pg_lex_next(&lx, &t);
    OK(t.type == TK_IDENT && t.len == 1 && t.text[0] == 'b', "lexing goes on after it");
    pg_source_free(&s);
}

static void test_arena(void)
{
    pg_arena a = {NULL, 0, 200 * 1024};
    int refused = 0;
    for (int i = 0; i < 100 && !refused; i++) refused = pg_arena_alloc(&a, 10000) == NULL;
    OK(refused && a.used_total <= 200 * 1024, "the arena refuses to grow past its limit");
    OK(pg_arena_alloc(&a, SIZE_MAX - 8) == NULL, "an absurd size is refused");
    char *s = pg_arena_strndup(&a, "abcdef", 3);
    OK(s && strcmp(s, "abc") == 0, "strndup copies n bytes and terminates");
    pg_arena_free(&a);
    OK(a.head == NULL && a.used_total == 0, "free resets the arena");
}

static void test_parse(void)
{
    char text[4000] = "";
    for (int i = 0; i < 50; i++) strcat(text, "@ split split split split\n");
    pg_source s = mem_source("p.pipe", text, strlen(text));
    FILE *f = fopen("/dev/null", "w");
    pg_diag d;
    pg_diag_init(&d, f, &s);
    pg_ast ast;
    OK(pg_parse(&s, &ast, &d) == 20 && d.errors == 20 && d.notes == 1, "parsing stops at 20 errors, with a note");
    pg_ast_free(&ast);
    pg_source_free(&s);

    s = mem_source("p.pipe", "model m relu", 12);
    pg_diag_init(&d, f, &s);
    OK(pg_parse(&s, &ast, &d) == 0 && ast.first && ast.first->kind == ST_MODEL && ast.first->next &&
       ast.first->next->kind == ST_LAYER && strcmp(ast.first->next->callee, "relu") == 0,
       "a good file gives its statements in order");
    pg_ast_free(&ast);
    pg_source_free(&s);
    fclose(f);
}

int main(void)
{
    test_diag();
    test_source_read();
    test_suggest();
    test_lexer();
    test_arena();
    test_parse();
    return DONE();
}

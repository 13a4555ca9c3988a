/* tests/fuzz/fuzz_front.c — libFuzzer target for the front end: any bytes go through
 * the lexer, the parser and, when they parse, the checker (pg_check), with
 * every diagnostic formatted into a memory stream. A crash, a sanitizer
 * report or a leak is a bug; errors in the input are not. Built and run by
 * tests/fuzz.sh (`make fuzz`), never part of build/pipegen. Built with
 * -DFUZZ_PARSE_ONLY it stops after the parser (to fuzz the syntax alone). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"
#include "ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pg_source src;
    src.path = strdup("fuzz.pipe");
    src.text = malloc(size + 1);
    if (!src.path || !src.text) {
        pg_source_free(&src);
        return 0;
    }
    if (size) memcpy(src.text, data, size);
    src.text[size] = '\0'; /* the lexer's sentinel, as pg_source_read leaves it */
    src.len = size;

    char *out = NULL;
    size_t outlen = 0;
    FILE *f = open_memstream(&out, &outlen);
    if (f) {
        pg_diag d;
        pg_diag_init(&d, f, &src);
        pg_ast ast;
        int errors = pg_parse(&src, &ast, &d);
        pg_ast_dump(&ast, f); /* the partial tree too: the dump must cope with error leftovers */
#ifndef FUZZ_PARSE_ONLY
        if (errors == 0) {
            ir_model m;
            memset(&m, 0, sizeof m);
            pg_check(&ast, &m, &d);
            pg_model_free(&m);
        }
#else
        (void)errors;
#endif
        pg_ast_free(&ast);
        fclose(f);
    }
    free(out);
    pg_source_free(&src);
    return 0;
}

/* codegen/cli/cmd_parse.c — `pipegen parse FILE` (hidden, for the golden tests and
 * for debugging the grammar): the syntax tree dump on stdout, or the lexical
 * and syntax errors on stderr. */
#include <stdio.h>
#include <string.h>

#include "ast.h"
#include "cli/commands.h"

#define PARSE_SOURCE_LIMIT ((size_t)16 << 20) /* bytes of .pipe source */

int cmd_parse(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '\0' || (argv[1][0] == '-' && argv[1][1] != '\0')) {
        fprintf(stderr, "usage: pipegen parse FILE\n");
        return 2;
    }
    pg_diag d;
    pg_source src;
    pg_diag_init(&d, stderr, NULL);
    if (pg_source_read(&src, argv[1], PARSE_SOURCE_LIMIT, &d) != 0) return 1;
    d.src = &src;
    pg_ast ast;
    int errors = pg_parse(&src, &ast, &d);
    if (errors == 0) pg_ast_dump(&ast, stdout);
    pg_ast_free(&ast);
    pg_source_free(&src);
    return errors ? 1 : 0;
}

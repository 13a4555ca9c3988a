/* cmd/pd_tokenize.h — `pipedata tokenize` (pd_tokenize.c). */
#ifndef PD_TOKENIZE_H
#define PD_TOKENIZE_H

#include <stdio.h>

/* argv[1] is "tokenize": 0, 1 failure (printed), 2 usage (printed). */
int pd_tokenize(int argc, char **argv);
/* its lines of pipedata's usage */
void pd_tokenize_usage(FILE *o);

#endif

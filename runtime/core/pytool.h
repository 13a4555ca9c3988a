/* runtime/core/pytool.h — one of pipegen's Python tools (tools/NAME.py) run
 * without a shell in the Python that `tools/deps.sh hf` makes (pytool.c):
 * `pipegen import/export hf` (tools/hf.py), `pipedata tokenize` and a stage's
 * --tokenizer (tools/tokens.py). Linked into pipegen, pipedata and every
 * stage binary. */
#ifndef PG_PYTOOL_H
#define PG_PYTOOL_H

#include <stddef.h>

#define PG_PY_MAX_ARGS 24

/* The Python: $PIPEGEN_PYTHON, else the virtual environment at $PIPEGEN_VENV
 * (default $HOME/.cache/pipegen/venv). NULL with what to do in err. */
const char *pg_py_python(char *buf, size_t n, char *err, size_t errlen);
/* Run $PIPEGEN_TOOLS/script (default: the checkout's tools/, PG_TOOLS_DIR)
 * with args (NULL-terminated, at most PG_PY_MAX_ARGS), inlen bytes of in on
 * its standard input (none: NULL), its standard output collected into *out
 * (malloc'd, NUL-terminated, *outlen bytes; also copied to ours when echo),
 * its standard error left as ours. Its exit status (0: it worked; its own
 * message is on stderr otherwise), or -1 when it could not run, with the
 * reason in err (*out NULL then). */
int pg_py_run(const char *script, const char *const *args, const char *in, size_t inlen, int echo, char **out,
              size_t *outlen, char *err, size_t errlen);

#endif

/* runtime/core/pg_version.h — the one version of pipegen: the compiler, the
 * runtime, piperun and pipedata print it with --version, and every generated
 * file records the pipegen that wrote it. */
#ifndef PG_VERSION_H
#define PG_VERSION_H

#define PIPEGEN_VERSION "0.1.0"

#endif

/* runtime/core/pg_proc.h — one number from a /proc file of "Key: N kB" lines
 * (/proc/meminfo's MemAvailable, /proc/self/status's VmSize), for the checks
 * that compare memory with what a stage needs (guard.c). Header-only. */
#ifndef PG_PROC_H
#define PG_PROC_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The value of line `key` ("VmSize:") of `file` in bytes, or 0 if unknown. */
static inline uint64_t pg_proc_bytes(const char *file, const char *key)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && sscanf(line + kl, " %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024u;
}

#endif

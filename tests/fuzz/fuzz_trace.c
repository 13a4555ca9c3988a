/* tests/fuzz/fuzz_trace.c — libFuzzer target: `pipegen trace RUN.json --svg
 * OUT` (codegen/cli/cmd_trace.c) on any bytes: the Chrome-trace reader, the
 * per-step statistics and the drawing of the measured step. Standard output
 * and the SVG go to /dev/null. Seeds: tests/fuzz_seeds/trace/. */
#include "fuzz_util.h"

#include "cli/commands.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (!freopen("/dev/null", "w", stdout))
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    char a0[] = "trace", a2[] = "--svg", a3[] = "/dev/null", a4[] = "--step", a5[] = "2";
    char p[64];
    snprintf(p, sizeof p, "%s", path);
    char *argv[] = { a0, p, a2, a3, NULL, NULL, NULL };
    int argc = 4;
    if (size && data[0] == '{' && size % 2) { /* sometimes a chosen step too */
        argv[argc++] = a4;
        argv[argc++] = a5;
    }
    int rc = cmd_trace(argc, argv);
    if (rc != 0 && rc != 1)
        abort();
    return 0;
}

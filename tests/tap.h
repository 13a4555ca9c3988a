/* tests/tap.h — minimal TAP for C unit tests: OK(cond, fmt...), then DONE(). */
#ifndef PG_TAP_H
#define PG_TAP_H
#include <stdio.h>
static int tap_n, tap_fail;
#define OK(cond, ...) do { ++tap_n; int c_ = (cond); \
    printf("%s %d - ", c_ ? "ok" : "not ok", tap_n); printf(__VA_ARGS__); printf("\n"); \
    if (!c_) { ++tap_fail; printf("#   at %s:%d\n", __FILE__, __LINE__); } } while (0)
#define DONE() (printf("1..%d\n", tap_n), tap_fail ? 1 : 0)
#endif

/* tests/unit/test_json.c — the one JSON reader (runtime/core/json.c): values
 * walked, the strict grammar's refusals with their place, strings (escapes,
 * surrogates, UTF-8), numbers, the depth limit, sticky errors. */
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "tap.h"

/* Skip the whole text as one value; "" when it is valid JSON, else
 * "LINE:COL: message". */
static const char *check(const char *text)
{
    static char out[256];
    pg_json j;
    pg_json_init(&j, text, strlen(text));
    if (pg_json_skip(&j) == 0 && pg_json_end(&j) == 0)
        return "";
    snprintf(out, sizeof out, "%d:%d: %s", j.err_line, j.err_col, j.err);
    return out;
}

static void refusals(void)
{
    static const struct {
        const char *text, *want, *what;
    } bad[] = {
        {"{\"a\": 1,}", "1:9: expected a member name (a string), found `}`", "a trailing comma in an object"},
        {"[1, 2,]", "1:7: expected a value, found `]`", "a trailing comma in an array"},
        {"[1 2]", "1:4: expected `,` or `]`, found `2`", "a missing comma"},
        {"{\"a\" 1}", "1:6: expected `:`, found `1`", "a missing colon"},
        {"{a: 1}", "1:2: expected a member name (a string), found `a`", "an unquoted name"},
        {"[01]", "1:2: a number with a leading zero", "a leading zero"},
        {"[+1]", "1:2: expected a value, found `+`", "a plus sign"},
        {"[.5]", "1:2: expected a value, found `.`", "no digit before the point"},
        {"[1.]", "1:4: expected a digit after the decimal point, found `]`", "no digit after the point"},
        {"[1e]", "1:4: expected a digit in the exponent, found `]`", "an empty exponent"},
        {"[-]", "1:3: expected a number, found `]`", "a lone minus"},
        {"[NaN]", "1:2: expected a value, found `N`", "NaN"},
        {"[1e999]", "1:2: a number too large for a double (1e999)", "an infinite number"},
        {"[tru]", "1:2: expected `true` or `false`, found `t`", "a cut literal"},
        {"[nul]", "1:2: expected a value, found `n`", "a cut null"},
        {"\"abc", "1:1: a string without its closing `\"` before the end of the file (truncated?)", "an unterminated string"},
        {"\"a\tb\"", "1:3: a control character (0x09) inside a string: write it as an escape", "a raw tab"},
        {"\"a\\qb\"", "1:4: expected an escape: \\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\uXXXX, found `q`", "a bad escape"},
        {"\"\\u12G4\"", "1:6: expected 4 hex digits after \\u, found `G`", "a bad \\u escape"},
        {"\"\\u0000\"", "1:2: \\u0000 inside a string (names and values here are C strings)", "\\u0000"},
        {"\"\\uDC00\"", "1:2: a \\u escape of a low surrogate (\\uDC00) with no high one before it", "a lone low surrogate"},
        {"\"\\uD800x\"", "1:2: a \\u escape of a high surrogate (\\uD800) without its low one", "a lone high surrogate"},
        {"\"\\uD800\\u0041\"", "1:8: \\u0041 does not continue the high surrogate \\uD800", "a high surrogate and no low one"},
        {"\"\xc3\x28\"", "1:2: a string that is not valid UTF-8", "invalid UTF-8"},
        {"\"\xc0\xaf\"", "1:2: a string that is not valid UTF-8", "an overlong form"},
        {"\"\xed\xa0\x80\"", "1:2: a string that is not valid UTF-8", "an encoded surrogate"},
        {"{} x", "1:4: expected the end of the text after the value, found `x`", "bytes after the value"},
        {"", "1:1: expected a value, found the end of the text", "nothing"},
        {"{\n  \"a\": [1,\n", "3:1: expected a value, found the end of the text", "a truncated text, at its line"},
        {"[1]\x01", "1:4: expected the end of the text after the value, found the byte 0x01", "a control byte"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *got = check(bad[i].text);
        OK(!strcmp(got, bad[i].want), "refused: %s (%s)", bad[i].what, got);
    }
    OK(!strcmp(check(" {\"a\": [1, -0.5e+3, true, false, null, \"x\", {}, []], \"b\": {\"c\": \"\\/\"}} \n"), ""),
       "a valid document with every kind of value is accepted");
}

static void depth(void)
{
    char deep[200];
    int n = PG_JSON_MAX_DEPTH;
    for (int i = 0; i < n; i++)
        deep[i] = '[', deep[2 * n - 1 - i] = ']';
    deep[2 * n] = 0;
    OK(!strcmp(check(deep), ""), "%d nested arrays are read", n);
    memmove(deep + 1, deep, strlen(deep) + 1);
    deep[0] = '[';
    strcat(deep, "]");
    OK(strstr(check(deep), "values nested deeper than 64 levels") != NULL, "%d are refused: %s", n + 1, check(deep));
}

static void strings(void)
{
    const char *t = "[\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\", \"\\u00e9\\u20AC\\uD83D\\uDE00\", \"\xc3\xa9\xf0\x9f\x98\x80\"]";
    pg_json j;
    char *a = NULL, *b = NULL, *c = NULL;
    pg_json_init(&j, t, strlen(t));
    int ok = pg_json_array(&j) == 0 && pg_json_item(&j) && pg_json_string(&j, &a) == 0 && pg_json_item(&j) &&
             pg_json_string(&j, &b) == 0 && pg_json_item(&j) && pg_json_string(&j, &c) == 0 && !pg_json_item(&j) &&
             pg_json_end(&j) == 0;
    OK(ok, "three strings read: %s", j.err);
    OK(a && !strcmp(a, "a\"b\\c/d\b\f\n\r\t"), "the simple escapes");
    OK(b && !strcmp(b, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"), "\\u escapes, a surrogate pair, into UTF-8");
    OK(c && !strcmp(c, "\xc3\xa9\xf0\x9f\x98\x80"), "raw UTF-8 kept as it is");
    free(a), free(b), free(c);
}

static void numbers(void)
{
    const char *t = "{\"big\": 9223372036854775807, \"over\": 9223372036854775808, \"x\": 1.25e2}";
    pg_json j;
    char *k;
    uint64_t u = 0;
    double d = 0;
    pg_json_init(&j, t, strlen(t));
    pg_json_object(&j);
    OK(pg_json_member(&j, &k) && !strcmp(k, "big") && pg_json_u64(&j, &u) == 0 && u == UINT64_C(9223372036854775807),
       "2^63 - 1 read exactly as an integer");
    free(k);
    OK(pg_json_member(&j, &k) && pg_json_u64(&j, &u) == -1 && strstr(j.err, "an integer above 2^63 - 1"),
       "2^63 refused as an integer: %s", j.err);
    free(k);
    OK(!pg_json_member(&j, &k) && k == NULL, "after an error nothing more is read (sticky)");
    OK(pg_json_number(&j, &d) == -1 && pg_json_end(&j) == -1 && j.err_col == 38, "every later call fails, the first error kept");

    const char *f = "[1.5, -3, 1e2]";
    int bad = 0;
    pg_json_init(&j, f, strlen(f));
    pg_json_array(&j);
    for (int i = 0; pg_json_item(&j); i++)
        bad += pg_json_u64(&j, &u) == 0;
    OK(bad == 0 && j.failed && strstr(j.err, "expected a non-negative integer, found `1.5`"), "u64 refuses 1.5: %s", j.err);
    pg_json_init(&j, f, strlen(f));
    double sum = 0;
    pg_json_array(&j);
    while (pg_json_item(&j) && pg_json_number(&j, &d) == 0)
        sum += d;
    OK(!j.failed && sum == 98.5, "numbers read as doubles (sum %g)", sum);
}

static void objects(void)
{
    const char *t = "{\"a\": {\"skip\": [1, {\"x\": [true]}]}, \"b\": \"v\", \"c\": null}";
    pg_json j;
    char *k, *v = NULL;
    int n = 0;
    pg_json_init(&j, t, strlen(t));
    pg_json_object(&j);
    while (pg_json_member(&j, &k)) {
        n++;
        if (!strcmp(k, "b"))
            pg_json_string(&j, &v);
        else
            pg_json_skip(&j);
        free(k);
    }
    OK(!j.failed && n == 3 && v && !strcmp(v, "v") && pg_json_end(&j) == 0, "members walked, nested values skipped");
    free(v);
    pg_json_init(&j, "{}", 2);
    OK(pg_json_object(&j) == 0 && !pg_json_member(&j, &k) && !j.failed && pg_json_end(&j) == 0, "an empty object");
    pg_json_init(&j, "[]", 2);
    OK(pg_json_object(&j) == -1 && strstr(j.err, "expected an object `{`, found `[`"), "an array where an object is expected: %s",
       j.err);
    pg_json_init(&j, "{\"a\":1}", 7);
    pg_json_object(&j);
    pg_json_member(&j, &k);
    free(k);
    OK(pg_json_fail(&j, "my own %s", "reason") == -1 && !strcmp(j.err, "my own reason") && j.err_col == 6,
       "a caller's error at the current place");
}

int main(void)
{
    refusals();
    depth();
    strings();
    numbers();
    objects();
    return DONE();
}

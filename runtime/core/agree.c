/* runtime/core/agree.c — see agree.h. */
#include "agree.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The options every stage must be given alike: a row per option, its value
 * as text. A mismatch would fail late (a collective one stage skips, a file
 * one stage expects and another never sends) or silently (different data on
 * the two ends of the pipeline). */
typedef enum { AG_STR, AG_INT, AG_FLAG, AG_REAL, AG_PATHS } ag_kind;
static const struct {
    const char *name;
    ag_kind kind;
    size_t off;
} agreed[] = {
    {"--steps", AG_INT, offsetof(pg_run_opts, steps)},
    {"--log-every", AG_INT, offsetof(pg_run_opts, log_every)}, /* the steps whose gradient norm goes to the loss stage */
    {"--data", AG_PATHS, offsetof(pg_run_opts, data)},
    {"--targets", AG_PATHS, offsetof(pg_run_opts, targets)},
    {"--eval-data", AG_PATHS, offsetof(pg_run_opts, eval_data)},
    {"--eval-targets", AG_PATHS, offsetof(pg_run_opts, eval_targets)},
    {"--predict", AG_PATHS, offsetof(pg_run_opts, predict)},
    {"--out", AG_STR, offsetof(pg_run_opts, out)},
    {"--metrics", AG_STR, offsetof(pg_run_opts, metrics)},
    {"--load", AG_STR, offsetof(pg_run_opts, load)},
    {"--save", AG_STR, offsetof(pg_run_opts, save)},
    {"--save-grads", AG_STR, offsetof(pg_run_opts, save_grads)},
    {"--checkpoint-dir", AG_STR, offsetof(pg_run_opts, ckpt_dir)},
    {"--save-every", AG_INT, offsetof(pg_run_opts, save_every)},
    {"--resume", AG_STR, offsetof(pg_run_opts, resume)},
    {"--replace-checkpoints", AG_FLAG, offsetof(pg_run_opts, replace_ckpt)},
    {"--save-on-exit", AG_FLAG, offsetof(pg_run_opts, save_on_exit)},
    {"--skip-nonfinite", AG_FLAG, offsetof(pg_run_opts, skip_nonfinite)},
    {"--trace", AG_STR, offsetof(pg_run_opts, trace)},
    {"--profile", AG_STR, offsetof(pg_run_opts, profile)},
    {"--trace-steps", AG_INT, offsetof(pg_run_opts, trace_steps)},
    {"--generate", AG_INT, offsetof(pg_run_opts, generate)},
    {"--prompt", AG_STR, offsetof(pg_run_opts, prompt)},
    {"--temperature", AG_REAL, offsetof(pg_run_opts, temperature)},
    {"--top-k", AG_INT, offsetof(pg_run_opts, top_k)},
    {"--top-p", AG_REAL, offsetof(pg_run_opts, top_p)},
    {"--stop", AG_STR, offsetof(pg_run_opts, stop_text)},
    {"--dp", AG_INT, offsetof(pg_run_opts, dp)},
    {"--zero", AG_INT, offsetof(pg_run_opts, zero)},
};

/* The accepted entries (stage 0's and every accepted peer's). */
typedef struct ag_entry {
    char *key, *val;
    int rank;
} ag_entry;

typedef struct ag_state {
    ag_entry *e;
    int n, cap;
} ag_state;

/* ---- text form ------------------------------------------------------------- */

static void entry(FILE *o, const char *key, const char *val)
{
    fprintf(o, "%s\t", key);
    for (const char *v = val; *v; v++)
        if (*v == '\\') fputs("\\\\", o);
        else if (*v == '\n') fputs("\\n", o);
        else fputc(*v, o);
    fputc('\n', o);
}

/* Split one "KEY\tVALUE\n" at *pos of text[len]: malloc'd key and value
 * (unescaped); 0, 1 at the end, -1 malformed. */
static int next_entry(const char *t, size_t len, size_t *pos, char **key, char **val)
{
    if (*pos >= len) return 1;
    const char *s = t + *pos, *end = memchr(s, '\n', len - *pos), *tab = end ? memchr(s, '\t', (size_t)(end - s)) : NULL;
    if (!end || !tab) return -1;
    *key = strndup(s, (size_t)(tab - s));
    *val = malloc((size_t)(end - tab));
    if (!*key || !*val) { free(*key); free(*val); return -1; }
    size_t o = 0;
    for (const char *v = tab + 1; v < end; v++) {
        if (*v == '\\' && v + 1 < end) {
            v++;
            (*val)[o++] = *v == 'n' ? '\n' : *v;
        } else {
            (*val)[o++] = *v;
        }
    }
    (*val)[o] = 0;
    *pos = (size_t)(end - t) + 1;
    return 0;
}

/* ---- this stage's entries --------------------------------------------------- */

static void file_entry(FILE *b, const char *opt, const pg_dataset *ds)
{
    char key[64], val[64];
    snprintf(key, sizeof key, "file %s", opt);
    snprintf(val, sizeof val, "%" PRIu64 " %016" PRIx64, ds->bytes, ds->hash);
    entry(b, key, val);
}

/* "samples --data": how many samples the data set of that option holds */
static void samples_entry(FILE *b, const char *opt, const pg_dataset *ds)
{
    char key[64], val[32];
    snprintf(key, sizeof key, "samples %s", opt);
    snprintf(val, sizeof val, "%" PRIu64, ds->samples);
    entry(b, key, val);
}

void pg_agree_dataset(pg_run *r, const char *opt, const pg_dataset *ds, int samples)
{
    if (r->agree_extra_n < (int)(sizeof r->agree_extra / sizeof r->agree_extra[0]))
        r->agree_extra[r->agree_extra_n++] = (pg_agree_file){opt, ds, samples};
}

int pg_agree_build(pg_run *r)
{
    char *text = NULL;
    size_t len = 0;
    FILE *b = open_memstream(&text, &len);
    if (!b) {
        fprintf(stderr, "stage %d: out of memory\n", r->d->stage);
        return 1;
    }
    for (size_t i = 0; i < sizeof agreed / sizeof agreed[0]; i++) {
        const char *base = (const char *)&r->opt + agreed[i].off;
        char v[64];
        const char *val = v;
        switch (agreed[i].kind) {
        case AG_STR: {
            const char *s;
            memcpy(&s, base, sizeof s);
            val = s ? s : "";
            break;
        }
        case AG_INT: {
            int64_t x;
            memcpy(&x, base, sizeof x);
            snprintf(v, sizeof v, "%" PRId64, x);
            break;
        }
        case AG_FLAG: {
            int x;
            memcpy(&x, base, sizeof x);
            snprintf(v, sizeof v, "%s", x ? "yes" : "");
            break;
        }
        case AG_REAL: {
            double x;
            memcpy(&x, base, sizeof x);
            snprintf(v, sizeof v, "%.17g", x);
            break;
        }
        case AG_PATHS: { /* the files in order, as one value */
            const pg_paths *p = (const pg_paths *)base;
            char *l = NULL;
            size_t ll = 0;
            FILE *t = open_memstream(&l, &ll);
            for (int k = 0; t && k < p->n; k++)
                fprintf(t, "%s%s", k ? ", " : "", p->p[k]);
            if (!t || fclose(t) != 0) {
                fclose(b);
                free(text);
                fprintf(stderr, "stage %d: out of memory\n", r->d->stage);
                return 1;
            }
            entry(b, agreed[i].name, l);
            free(l);
            continue;
        }
        }
        entry(b, agreed[i].name, val);
    }
    /* the files this stage read, as it read them */
    if (r->have_in)
        file_entry(b, "--data", &r->in);
    if (r->have_tg)
        file_entry(b, r->tokens ? "--data" : "--targets", &r->tg);
    if (r->have_in && !r->tokens)
        samples_entry(b, "--data", &r->in);
    if (r->have_tg && !r->tokens)
        samples_entry(b, "--targets", &r->tg);
    for (int i = 0; i < r->agree_extra_n; i++) { /* the evaluation and --predict files (eval.c) */
        file_entry(b, r->agree_extra[i].opt, r->agree_extra[i].ds);
        if (r->agree_extra[i].samples)
            samples_entry(b, r->agree_extra[i].opt, r->agree_extra[i].ds);
    }
    if (r->load_bytes) {
        char val[64];
        snprintf(val, sizeof val, "%" PRIu64 " %016" PRIx64, r->load_bytes, r->load_hash);
        entry(b, "file --load", val);
    }
    if (fclose(b) != 0) {
        free(text);
        fprintf(stderr, "stage %d: out of memory\n", r->d->stage);
        return 1;
    }
    r->agree = text;
    r->agree_len = len;
    return 0;
}

/* ---- comparing ------------------------------------------------------------------ */

static int add(ag_state *st, char *key, char *val, int rank)
{
    if (st->n == st->cap) {
        int c = st->cap ? st->cap * 2 : 64;
        ag_entry *q = realloc(st->e, (size_t)c * sizeof *q);
        if (!q) return -1;
        st->e = q;
        st->cap = c;
    }
    st->e[st->n++] = (ag_entry){key, val, rank};
    return 0;
}

/* The option a key is about, for messages. */
static const char *opt_of(const char *key)
{
    return !strncmp(key, "file ", 5) ? key + 5 : key;
}

/* Rank k as messages name it: "stage 2", or "stage 2 of replica 1" with
 * replicas (rank = replica x stages + stage). */
static const char *who(const pg_run *r, int rank, char *b, size_t bl)
{
    int P = r->d->nstages;
    if (r->replicas > 1)
        snprintf(b, bl, "stage %d of replica %d", rank % P, rank / P);
    else
        snprintf(b, bl, "stage %d", rank);
    return b;
}

/* Does entry a (of rank ra) fit entry b (of rank rb)? 0, or -1 with why. */
static int fits(const pg_run *r, const char *ka, const char *va, int ra, const char *kb, const char *vb, int rb,
                char *why, size_t wl)
{
    if (!strncmp(ka, "samples ", 8) && !strncmp(kb, "samples ", 8)) {
        /* inputs pair with targets: --data with --targets, --eval-data with --eval-targets */
        int eval_a = !strncmp(ka + 8, "--eval-", 7), eval_b = !strncmp(kb + 8, "--eval-", 7);
        if (!strcmp(ka, kb) || !strcmp(va, vb) || eval_a != eval_b || !strcmp(ka + 8, "--predict") ||
            !strcmp(kb + 8, "--predict"))
            return 0;
        int in_a = !strcmp(ka + 8, "--data") || !strcmp(ka + 8, "--eval-data");
        const pg_paths *x = eval_a ? &r->opt.eval_data : &r->opt.data, *y = eval_a ? &r->opt.eval_targets : &r->opt.targets;
        char na[48], nb[48];
        snprintf(why, wl,
                 "%s %s%s holds %s samples (%s) but %s %s%s holds %s (%s): inputs and targets must "
                 "pair one to one (give files with the same number of samples)", eval_a ? "--eval-data" : "--data",
                 x->n ? x->p[0] : "?", x->n > 1 ? " ..." : "", in_a ? va : vb, who(r, in_a ? ra : rb, na, sizeof na),
                 eval_a ? "--eval-targets" : "--targets", y->n ? y->p[0] : "?", y->n > 1 ? " ..." : "", in_a ? vb : va,
                 who(r, in_a ? rb : ra, nb, sizeof nb));
        return -1;
    }
    if (strcmp(ka, kb) || !strcmp(va, vb))
        return 0;
    if (!strncmp(ka, "file ", 5)) {
        unsigned long long ba = 0, bb = 0;
        char ha[32] = "?", hb[32] = "?";
        sscanf(va, "%llu %31s", &ba, ha);
        sscanf(vb, "%llu %31s", &bb, hb);
        char na[48], nb[48];
        who(r, ra, na, sizeof na);
        who(r, rb, nb, sizeof nb);
        snprintf(why, wl,
                 "%s and %s read different files as %s (%llu bytes, hash %s on %s; %llu bytes, "
                 "hash %s on %s): give every stage the same file",
                 na, nb, opt_of(ka), ba, ha, na, bb, hb, nb);
        return -1;
    }
    int flag = 0;
    for (size_t i = 0; i < sizeof agreed / sizeof agreed[0]; i++)
        flag |= !strcmp(agreed[i].name, ka) && agreed[i].kind == AG_FLAG;
    char wa[300], wb[300];
    if (va[0]) snprintf(wa, sizeof wa, "with %s%s%s", ka, flag ? "" : " ", flag ? "" : va);
    else snprintf(wa, sizeof wa, "without %s", ka);
    if (vb[0]) snprintf(wb, sizeof wb, "with %s%s%s", kb, flag ? "" : " ", flag ? "" : vb);
    else snprintf(wb, sizeof wb, "without %s", kb);
    char na[48], nb[48];
    snprintf(why, wl, "%s was started %s but %s %s: give every stage the same %s", who(r, ra, na, sizeof na), wa,
             who(r, rb, nb, sizeof nb), wb, ka);
    return -1;
}

int pg_agree_check(void *arg, int rank, const char *text, size_t len, char *why, size_t whylen)
{
    pg_run *r = arg;
    ag_state *st = r->agree_state;
    if (!st) {
        st = calloc(1, sizeof *st);
        if (!st) {
            snprintf(why, whylen, "stage 0 ran out of memory comparing the options");
            return -1;
        }
        r->agree_state = st;
        size_t pos = 0;
        char *k, *v;
        int e;
        while ((e = next_entry(r->agree, r->agree_len, &pos, &k, &v)) == 0)
            if (add(st, k, v, r->d->stage)) { free(k); free(v); break; }
    }
    /* the peer's entries, checked against every accepted one (and each other) */
    ag_state mine = {0};
    size_t pos = 0;
    char *k, *v;
    int e, rc = 0;
    while ((e = next_entry(text, len, &pos, &k, &v)) == 0)
        if (add(&mine, k, v, rank)) { free(k); free(v); e = -1; break; }
    if (e < 0) {
        char nb[48];
        snprintf(why, whylen, "%s sent a malformed list of its options (another pipegen version?)", who(r, rank, nb, sizeof nb));
        rc = -1;
    }
    for (int i = 0; i < mine.n && !rc; i++)
        for (int j = 0; j < st->n && !rc; j++)
            rc = fits(r, mine.e[i].key, mine.e[i].val, rank, st->e[j].key, st->e[j].val, st->e[j].rank, why, whylen);
    if (!rc) { /* accepted: its entries join */
        for (int i = 0; i < mine.n; i++)
            if (add(st, mine.e[i].key, mine.e[i].val, rank)) {
                for (; i < mine.n; i++) { free(mine.e[i].key); free(mine.e[i].val); }
                break;
            }
        free(mine.e);
        return 0;
    }
    for (int i = 0; i < mine.n; i++) {
        free(mine.e[i].key);
        free(mine.e[i].val);
    }
    free(mine.e);
    return -1;
}

void pg_agree_free(pg_run *r)
{
    ag_state *st = r->agree_state;
    if (st) {
        for (int i = 0; i < st->n; i++) {
            free(st->e[i].key);
            free(st->e[i].val);
        }
        free(st->e);
        free(st);
    }
    free(r->agree);
    r->agree = NULL;
    r->agree_state = NULL;
}

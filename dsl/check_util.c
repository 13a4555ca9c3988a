/* dsl/check_util.c — what every file of the checker shares (check_ctx.h):
 * reporting (errors, warnings and notes, each once, with "did you mean"),
 * string-keyed index tables, allocation that never returns NULL, qualified
 * names and the table of defined names. It calls no checker file back. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "check_ctx.h"

/* ---- reporting ----------------------------------------------------------- */

/* Was this exact message (level, place, text) reported before? Remembers it if not. */
static int seen_before(chk *c, pg_loc loc, const char *level, const char *msg) {
    char key[1200];
    snprintf(key, sizeof key, "%s:%d:%d:%s:%s", loc.file ? loc.file : "", loc.line, loc.col, level, msg);
    if (chk_index_get(&c->seen_ix, key) >= 0) return 1;
    c->seen = chk_grow(c->seen, &c->capseen, c->nseen + 1, sizeof *c->seen);
    c->seen[c->nseen] = chk_xmalloc(strlen(key) + 1);
    strcpy(c->seen[c->nseen], key);
    chk_index_put(&c->seen_ix, c->seen[c->nseen], c->nseen);
    c->nseen++;
    return 0;
}

/* Print unless already printed; past CHK_MAX_ERRORS errors the checker stops:
 * nothing more is printed and expansion ends (pg_check adds a final note). */
static int report(chk *c, const char *level, pg_loc loc, const char *fmt, va_list ap) {
    char msg[1024];
    int is_error = strcmp(level, "error") == 0;
    c->reports++;
    if (c->too_many) return 0;
    if (is_error && c->d->errors - c->errors0 >= CHK_MAX_ERRORS) {
        c->too_many = 1;
        c->expand_stopped = 1;
        return 0;
    }
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (seen_before(c, loc, level, msg)) return 0;
    if (is_error) {
        pg_error(c->d, loc, "%s", msg);
    } else if (c->d->warnings >= CHK_MAX_WARNINGS) {
        c->warnings_hidden++;
        return 0;
    } else {
        pg_warning(c->d, loc, "%s", msg);
    }
    return 1;
}

int chk_error(chk *c, pg_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = report(c, "error", loc, fmt, ap);
    va_end(ap);
    return r;
}

int chk_warning(chk *c, pg_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = report(c, "warning", loc, fmt, ap);
    va_end(ap);
    return r;
}

void chk_note(chk *c, pg_loc loc, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pg_note(c->d, loc, "%s", msg);
}

const char *chk_didyoumean(char *buf, size_t n, const char *word, const char *const *cands, int ncands) {
    const char *s = pg_suggest(word, cands, ncands);
    if (s) snprintf(buf, n, "; did you mean '%s'?", s);
    else if (n) buf[0] = '\0';
    return buf;
}

/* ---- string index ------------------------------------------------------- */

/* FNV-1a, then a final mix: the tables take the low bits, and without the mix
 * those depend only on the low bits of each byte (h.0.fc, h.1.fc collide). */
static size_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)h;
}

int chk_index_get(const chk_index *ix, const char *key) {
    if (ix->cap == 0) return -1;
    for (size_t j = name_hash(key) & (ix->cap - 1); ix->keys[j]; j = (j + 1) & (ix->cap - 1))
        if (strcmp(ix->keys[j], key) == 0) return ix->vals[j];
    return -1;
}

int chk_index_put(chk_index *ix, const char *key, int val) {
    int old = chk_index_get(ix, key);
    if (old >= 0) return old;
    if (2 * (ix->count + 1) > ix->cap) {
        size_t nc = ix->cap ? ix->cap * 2 : 64;
        const char **nk = calloc(nc, sizeof *nk);
        int *nv = calloc(nc, sizeof *nv);
        if (!nk || !nv) {
            fputs("pipegen: out of memory\n", stderr);
            abort();
        }
        for (size_t i = 0; i < ix->cap; i++) {
            if (!ix->keys[i]) continue;
            size_t j = name_hash(ix->keys[i]) & (nc - 1);
            while (nk[j]) j = (j + 1) & (nc - 1);
            nk[j] = ix->keys[i];
            nv[j] = ix->vals[i];
        }
        free(ix->keys);
        free(ix->vals);
        ix->keys = nk;
        ix->vals = nv;
        ix->cap = nc;
    }
    size_t j = name_hash(key) & (ix->cap - 1);
    while (ix->keys[j]) j = (j + 1) & (ix->cap - 1);
    ix->keys[j] = key;
    ix->vals[j] = val;
    ix->count++;
    return -1;
}

void chk_index_set(chk_index *ix, const char *key, int val) {
    if (chk_index_put(ix, key, val) < 0) return;
    for (size_t j = name_hash(key) & (ix->cap - 1); ix->keys[j]; j = (j + 1) & (ix->cap - 1))
        if (strcmp(ix->keys[j], key) == 0) {
            ix->vals[j] = val;
            return;
        }
}

void chk_index_free(chk_index *ix) {
    free(ix->keys);
    free(ix->vals);
    memset(ix, 0, sizeof *ix);
}

/* ---- memory -------------------------------------------------------------- */

void *chk_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fputs("pipegen: out of memory\n", stderr);
        abort();
    }
    return p;
}

void *chk_grow(void *p, int *cap, int need, size_t elem) {
    if (need <= *cap) return p;
    int nc = *cap ? *cap : 8;
    while (nc < need) nc *= 2;
    void *q = realloc(p, (size_t)nc * elem);
    if (!q) {
        fputs("pipegen: out of memory\n", stderr);
        abort();
    }
    *cap = nc;
    return q;
}

char *chk_strdup(chk *c, const char *s) {
    char *r = pg_arena_strndup(c->a, s, strlen(s));
    if (!r) {
        fputs("pipegen: out of memory\n", stderr);
        abort();
    }
    return r;
}

char *chk_qualify(chk *c, const char *prefix, const char *name) {
    if (!prefix || !*prefix) return chk_strdup(c, name);
    size_t lp = strlen(prefix), ln = strlen(name);
    char *r = pg_arena_alloc(c->a, lp + ln + 2);
    if (!r) {
        fputs("pipegen: out of memory\n", stderr);
        abort();
    }
    memcpy(r, prefix, lp);
    r[lp] = '.';
    memcpy(r + lp + 1, name, ln + 1);
    return r;
}

const char *chk_fmt_count(int64_t v, char *buf, size_t n) {
    char tmp[32];
    int neg = v < 0;
    uint64_t u = neg ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    int len = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)u);
    size_t o = 0;
    if (neg && o + 1 < n) buf[o++] = '-';
    for (int i = 0; i < len && o + 1 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0 && o + 1 < n) buf[o++] = ',';
        if (o + 1 < n) buf[o++] = tmp[i];
    }
    buf[o] = '\0';
    return buf;
}

/* ---- qualified names ----------------------------------------------------- */

int chk_name_define(chk *c, const char *name, pg_loc loc, const char *what) {
    if (2 * (c->namecount + 1) > c->namecap) {
        size_t nc = c->namecap ? c->namecap * 2 : 256;
        chk_name *nt = calloc(nc, sizeof *nt);
        if (!nt) {
            fputs("pipegen: out of memory\n", stderr);
            abort();
        }
        for (size_t i = 0; i < c->namecap; i++) {
            if (!c->names[i].name) continue;
            size_t j = name_hash(c->names[i].name) & (nc - 1);
            while (nt[j].name) j = (j + 1) & (nc - 1);
            nt[j] = c->names[i];
        }
        free(c->names);
        c->names = nt;
        c->namecap = nc;
    }
    size_t j = name_hash(name) & (c->namecap - 1);
    while (c->names[j].name) {
        if (strcmp(c->names[j].name, name) == 0) {
            if (chk_error(c, loc, "duplicate %s name '%s'", what, name))
                chk_note(c, c->names[j].loc, "'%s' is first defined here", name);
            return -1;
        }
        j = (j + 1) & (c->namecap - 1);
    }
    c->names[j].name = name;
    c->names[j].loc = loc;
    c->namecount++;
    return 0;
}

int chk_find_block(const chk *c, const char *name) { return chk_index_get(&c->block_ix, name); }
int chk_find_nparam(const chk *c, const char *name) { return chk_index_get(&c->nparam_ix, name); }
int chk_find_const(const chk *c, const char *name) { return chk_index_get(&c->const_ix, name); }

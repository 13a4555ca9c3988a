/* codegen/memplan.c — greedy-by-size, first-fit-over-lifetimes placement. */
#include <stdlib.h>
#include <string.h>

#include "memplan.h"

static const char *const cat_names[MP__COUNT] = {
    "parameters", "gradients", "optimizer state", "activations", "recompute",
    "receive buffers", "skip buffers", "batch input/target", "workspace",
};

const char *pg_mp_cat_name(pg_mp_cat c) { return (unsigned)c < MP__COUNT ? cat_names[c] : "?"; }

static int64_t align_up(int64_t x) { return (x + PG_MP_ALIGN - 1) / PG_MP_ALIGN * PG_MP_ALIGN; }

int pg_mp_add(pg_memplan *p, const char *name, pg_mp_cat cat, int64_t bytes, int first_use, int last_use)
{
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 32;
        pg_mp_buf *nb = realloc(p->buf, (size_t)cap * sizeof *nb);
        if (!nb)
            return -1;
        p->buf = nb;
        p->cap = cap;
    }
    pg_mp_buf *b = &p->buf[p->n];
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "%s", name);
    b->cat = cat;
    b->bytes = bytes;
    b->first_use = first_use;
    b->last_use = last_use;
    b->offset = -1;
    return p->n++;
}

static int lifetimes_overlap(const pg_mp_buf *a, const pg_mp_buf *b)
{
    if (a->first_use == PG_MP_WHOLE_STEP || b->first_use == PG_MP_WHOLE_STEP)
        return 1;
    return a->first_use <= b->last_use && b->first_use <= a->last_use;
}

/* Largest first; equal sizes in insertion order (what a stable sort gives). */
typedef struct mp_key {
    int64_t bytes;
    int index;
} mp_key;

static int by_size(const void *x, const void *y)
{
    const mp_key *a = x, *b = y;
    if (a->bytes != b->bytes)
        return a->bytes > b->bytes ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* An occupied byte range [start, end) of the arena. */
typedef struct mp_span {
    int64_t start, end;
} mp_span;

static int by_start(const void *x, const void *y)
{
    const mp_span *a = x, *b = y;
    return a->start < b->start ? -1 : a->start > b->start;
}

/* The lowest offset >= lo where [off, off + size) meets none of the spans
 * (sorted by start). Every span ends on an aligned offset, so an aligned lo
 * gives an aligned result. */
static int64_t lowest_fit(const mp_span *s, int n, int64_t lo, int64_t size)
{
    int64_t off = lo;
    for (int i = 0; i < n; i++) {
        if (s[i].start >= off + size)
            break;
        if (s[i].end > off)
            off = s[i].end;
    }
    return off;
}

/* Add [start, end) to the union of occupied spans u (disjoint, sorted). 0, or
 * -1 out of memory. */
static int union_add(mp_span **u, int *n, int *cap, int64_t start, int64_t end)
{
    if (end <= start)
        return 0;
    int lo = 0, hi = *n; /* first span ending at or after start */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if ((*u)[mid].end < start) lo = mid + 1;
        else hi = mid;
    }
    int k = lo;
    while (k < *n && (*u)[k].start <= end) { /* merge every span it touches */
        if ((*u)[k].start < start) start = (*u)[k].start;
        if ((*u)[k].end > end) end = (*u)[k].end;
        k++;
    }
    int removed = k - lo;
    if (removed == 0) {
        if (*n == *cap) {
            int c = *cap ? *cap * 2 : 64;
            mp_span *q = realloc(*u, (size_t)c * sizeof *q);
            if (!q) return -1;
            *u = q;
            *cap = c;
        }
        memmove(*u + lo + 1, *u + lo, (size_t)(*n - lo) * sizeof **u);
        (*n)++;
    } else if (removed > 1) {
        memmove(*u + lo + 1, *u + k, (size_t)(*n - k) * sizeof **u);
        *n -= removed - 1;
    }
    (*u)[lo] = (mp_span){start, end};
    return 0;
}

/* Each buffer, largest first, at the lowest aligned offset where it meets no
 * placed buffer whose lifetime overlaps its own. A buffer alive the whole
 * step overlaps every one, so its obstacles are the union of all placed
 * spans, kept merged (near-linear in the buffer count: the parameters,
 * gradients and optimizer state of a model with thousands of layers); a
 * buffer with a shorter lifetime (few: activation frames, receive and skip
 * buffers) looks at the placed ones one by one. */
void pg_mp_solve(pg_memplan *p)
{
    int n = p->n, nu = 0, capu = 0;
    mp_key *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    int *placed = malloc((size_t)(n ? n : 1) * sizeof *placed);
    mp_span *near = malloc((size_t)(n ? n : 1) * sizeof *near), *u = NULL;
    /* guard gaps are at least g bytes; every offset stays aligned */
    int64_t g = p->guard > 0 ? p->guard : 0;
    p->total = align_up(g);
    int ok = order && placed && near;
    if (ok) {
        for (int i = 0; i < n; i++)
            order[i] = (mp_key){p->buf[i].bytes, i};
        qsort(order, (size_t)n, sizeof *order, by_size);
    }
    int nplaced = 0;
    for (int k = 0; k < n && ok; k++) {
        pg_mp_buf *b = &p->buf[order[k].index];
        /* a buffer holds [off, off + size): its bytes and the guard gap after them */
        int64_t off, size = b->bytes + g;
        if (b->first_use == PG_MP_WHOLE_STEP) {
            off = lowest_fit(u, nu, align_up(g), size);
        } else {
            int m = 0;
            for (int j = 0; j < nplaced; j++) {
                const pg_mp_buf *o = &p->buf[placed[j]];
                if (lifetimes_overlap(b, o))
                    near[m++] = (mp_span){o->offset, align_up(o->offset + o->bytes + g)};
            }
            qsort(near, (size_t)m, sizeof *near, by_start);
            off = lowest_fit(near, m, align_up(g), size);
        }
        b->offset = off;
        placed[nplaced++] = order[k].index;
        if (align_up(off + size) > p->total)
            p->total = align_up(off + size);
        ok = union_add(&u, &nu, &capu, off, align_up(off + size)) == 0;
    }
    if (!ok) { /* out of memory: a bump allocator, still correct */
        p->total = align_up(g);
        for (int i = 0; i < n; i++) {
            p->buf[i].offset = p->total;
            p->total = align_up(p->total + p->buf[i].bytes + g);
        }
    }
    free(order);
    free(placed);
    free(near);
    free(u);
}

int64_t pg_mp_cat_bytes(const pg_memplan *p, pg_mp_cat c)
{
    int64_t s = 0;
    for (int i = 0; i < p->n; i++)
        if (p->buf[i].cat == c)
            s += align_up(p->buf[i].bytes);
    return s;
}

void pg_mp_free(pg_memplan *p)
{
    free(p->buf);
    memset(p, 0, sizeof *p);
}

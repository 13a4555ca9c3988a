/* codegen/gen/memplan.c — placement over lifetimes: greedy by size (linear scan
 * for very many buffers), and the checker of a solved plan. */
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "gen/memplan.h"

static const char *const cat_names[MP__COUNT] = {
    "parameters", "gradients", "optimizer state", "activations", "recompute",
    "receive buffers", "skip buffers", "batch input/target", "workspace",
    "kv cache", "generation",
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

/* A min-heap of placed buffers by last use: the ones a linear scan frees. */
typedef struct mp_heap {
    int *v, n;
    const pg_mp_buf *buf;
} mp_heap;

static int heap_less(const mp_heap *h, int a, int b)
{
    const pg_mp_buf *x = &h->buf[h->v[a]], *y = &h->buf[h->v[b]];
    return x->last_use != y->last_use ? x->last_use < y->last_use : h->v[a] < h->v[b];
}

static void heap_swap(mp_heap *h, int a, int b)
{
    int t = h->v[a];
    h->v[a] = h->v[b];
    h->v[b] = t;
}

static void heap_push(mp_heap *h, int i)
{
    int k = h->n++;
    h->v[k] = i;
    while (k > 0 && heap_less(h, k, (k - 1) / 2)) {
        heap_swap(h, k, (k - 1) / 2);
        k = (k - 1) / 2;
    }
}

static int heap_pop(mp_heap *h)
{
    int top = h->v[0], k = 0;
    h->v[0] = h->v[--h->n];
    for (;;) {
        int l = 2 * k + 1, r = l + 1, m = k;
        if (l < h->n && heap_less(h, l, m)) m = l;
        if (r < h->n && heap_less(h, r, m)) m = r;
        if (m == k) break;
        heap_swap(h, k, m);
        k = m;
    }
    return top;
}

typedef struct mp_key2 {
    int first;
    int index;
} mp_key2;

static int by_first_use(const void *x, const void *y)
{
    const mp_key2 *a = x, *b = y;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* Linear scan over the timed buffers idx[0..n) in order of first use, above
 * base: a buffer's bytes return to the free ranges after its last use; each new
 * one takes the smallest free range it fits in (the lowest on ties), else the
 * top. Returns the high-water mark, or -1 out of memory. */
static int64_t linear_scan(pg_memplan *p, const int *idx, int n, int64_t base, int64_t g)
{
    mp_key2 *ord = malloc((size_t)(n ? n : 1) * sizeof *ord);
    mp_heap h = {malloc((size_t)(n ? n : 1) * sizeof(int)), 0, p->buf};
    mp_span *fr = NULL; /* free ranges below top, disjoint, sorted */
    int nfr = 0, capfr = 0;
    int64_t top = base, high = base;
    if (!ord || !h.v) {
        free(ord);
        free(h.v);
        return -1;
    }
    for (int k = 0; k < n; k++)
        ord[k] = (mp_key2){p->buf[idx[k]].first_use, idx[k]};
    qsort(ord, (size_t)n, sizeof *ord, by_first_use);
    int64_t rc = 0;
    for (int k = 0; k < n && rc == 0; k++) {
        pg_mp_buf *b = &p->buf[ord[k].index];
        while (h.n && p->buf[h.v[0]].last_use < b->first_use) { /* free what ended before */
            const pg_mp_buf *o = &p->buf[heap_pop(&h)];
            int64_t s = o->offset, e = align_up(o->offset + o->bytes + g);
            if (e == top) {
                top = s;
                if (nfr && fr[nfr - 1].end == top) /* the range below joins the top */
                    top = fr[--nfr].start;
            } else if (union_add(&fr, &nfr, &capfr, s, e)) {
                rc = -1;
            }
        }
        int64_t size = align_up(b->bytes + g);
        int best = -1;
        for (int j = 0; j < nfr; j++)
            if (fr[j].end - fr[j].start >= size &&
                (best < 0 || fr[j].end - fr[j].start < fr[best].end - fr[best].start))
                best = j;
        if (best >= 0) {
            b->offset = fr[best].start;
            fr[best].start += size;
            if (fr[best].start == fr[best].end) {
                memmove(fr + best, fr + best + 1, (size_t)(nfr - best - 1) * sizeof *fr);
                nfr--;
            }
        } else {
            if (nfr && fr[nfr - 1].end == top) /* extend the highest free range upwards */
                top = fr[--nfr].start;
            b->offset = top;
            top += size;
            if (top > high)
                high = top;
        }
        heap_push(&h, ord[k].index);
    }
    free(ord);
    free(h.v);
    free(fr);
    return rc ? -1 : high;
}

/* The buffers alive the whole step overlap every one: their obstacles are the
 * union of all placed spans, kept merged (near-linear in the buffer count: the
 * parameters, gradients and optimizer state of a model with thousands of
 * layers). Then the timed buffers above them, greedy by size when few, else a
 * linear scan (pg_mp_solve in memplan.h). */
void pg_mp_solve(pg_memplan *p)
{
    int n = p->n, nu = 0, capu = 0, nt = 0;
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
    for (int k = 0; k < n && ok; k++) {
        pg_mp_buf *b = &p->buf[order[k].index];
        if (b->cat == MP_OPTSTATE)
            continue; /* at the end, below */
        if (b->first_use != PG_MP_WHOLE_STEP) {
            placed[nt++] = order[k].index; /* timed: later, in size order */
            continue;
        }
        int64_t size = b->bytes + g; /* its bytes and the guard gap after them */
        b->offset = lowest_fit(u, nu, align_up(g), size);
        if (align_up(b->offset + size) > p->total)
            p->total = align_up(b->offset + size);
        ok = union_add(&u, &nu, &capu, b->offset, align_up(b->offset + size)) == 0;
    }
    int64_t base = p->total;
    if (ok && nt > PG_MP_GREEDY_MAX) {
        int64_t high = linear_scan(p, placed, nt, base, g);
        ok = high >= 0;
        if (ok && high > p->total)
            p->total = high;
    } else {
        for (int k = 0; k < nt && ok; k++) {
            pg_mp_buf *b = &p->buf[placed[k]];
            int64_t size = b->bytes + g;
            int m = 0;
            for (int j = 0; j < k; j++) {
                const pg_mp_buf *o = &p->buf[placed[j]];
                if (lifetimes_overlap(b, o))
                    near[m++] = (mp_span){o->offset, align_up(o->offset + o->bytes + g)};
            }
            qsort(near, (size_t)m, sizeof *near, by_start);
            b->offset = lowest_fit(near, m, base, size);
            if (align_up(b->offset + size) > p->total)
                p->total = align_up(b->offset + size);
        }
    }
    if (!ok) { /* out of memory: a bump allocator, still correct */
        p->total = align_up(g);
        for (int i = 0; i < n; i++) {
            if (p->buf[i].cat == MP_OPTSTATE)
                continue;
            p->buf[i].offset = p->total;
            p->total = align_up(p->total + p->buf[i].bytes + g);
        }
    }
    /* the optimizer state: one region at the end, in insertion order (a
     * parameter's state 0, then its state 1, parameters in table order), so
     * that a process holding a shard of it (--zero 1) can leave it out */
    p->opt_lo = p->total;
    for (int i = 0; i < n; i++)
        if (p->buf[i].cat == MP_OPTSTATE) {
            p->buf[i].offset = p->total;
            p->total = align_up(p->total + p->buf[i].bytes + g);
        }
    free(order);
    free(placed);
    free(near);
    free(u);
}

static const pg_memplan *check_plan; /* qsort and bsearch have no context argument */

/* a buffer alive the whole step sorts before every other */
static int first_tick(const pg_mp_buf *b) { return b->first_use == PG_MP_WHOLE_STEP ? INT_MIN : b->first_use; }

static int by_first_tick(const void *x, const void *y)
{
    const pg_mp_buf *a = &check_plan->buf[*(const int *)x], *b = &check_plan->buf[*(const int *)y];
    if (first_tick(a) != first_tick(b))
        return first_tick(a) < first_tick(b) ? -1 : 1;
    return *(const int *)x - *(const int *)y;
}

static int by_offset(const void *x, const void *y)
{
    const pg_mp_buf *a = &check_plan->buf[*(const int *)x], *b = &check_plan->buf[*(const int *)y];
    if (a->offset != b->offset)
        return a->offset < b->offset ? -1 : 1;
    return *(const int *)x - *(const int *)y;
}

static void lifetime_str(const pg_mp_buf *b, char *buf, size_t n)
{
    if (b->first_use == PG_MP_WHOLE_STEP)
        snprintf(buf, n, "the whole step");
    else
        snprintf(buf, n, "ticks %d..%d", b->first_use, b->last_use);
}

/* A sweep over time: the buffers alive at once, kept sorted by offset, each at
 * least the guard apart from its neighbours; a new one needs checking against
 * its two neighbours only (anything further is further still). */
int pg_mp_check(const pg_memplan *p, char *err, size_t errlen)
{
    int64_t g = p->guard > 0 ? p->guard : 0;
    int n = p->n, na = 0, rc = 0, bad = -1, with = -1;
    int *ord = malloc((size_t)(n ? n : 1) * sizeof *ord), *act = malloc((size_t)(n ? n : 1) * sizeof *act);
    if (!ord || !act) {
        free(ord);
        free(act);
        snprintf(err, errlen, "out of memory checking the memory plan");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const pg_mp_buf *a = &p->buf[i];
        if (a->first_use != PG_MP_WHOLE_STEP && (a->first_use < 0 || a->last_use < a->first_use)) {
            snprintf(err, errlen, "buffer '%s' has no lifetime (ticks %d..%d)", a->name, a->first_use, a->last_use);
            free(ord);
            free(act);
            return -1;
        }
        if (a->offset < align_up(g) || a->offset % PG_MP_ALIGN || a->offset + a->bytes + g > p->total) {
            snprintf(err, errlen, "buffer '%s' at %" PRId64 " (%" PRId64 " bytes) is misaligned or outside the "
                     "arena of %" PRId64 " bytes", a->name, a->offset, a->bytes, p->total);
            free(ord);
            free(act);
            return -1;
        }
        ord[i] = i;
    }
    check_plan = p;
    qsort(ord, (size_t)n, sizeof *ord, by_first_tick);
    /* the buffers alive the whole step come first (INT_MIN) and stay: apart,
     * sorted by offset, they are ws[0..nw); the others sweep through act */
    int nw = 0;
    while (nw < n && p->buf[ord[nw]].first_use == PG_MP_WHOLE_STEP)
        nw++;
    int *ws = malloc((size_t)(nw ? nw : 1) * sizeof *ws);
    mp_heap h = {malloc((size_t)(n ? n : 1) * sizeof(int)), 0, p->buf};
    if (!ws || !h.v) {
        free(ws);
        free(h.v);
        free(ord);
        free(act);
        check_plan = NULL;
        snprintf(err, errlen, "out of memory checking the memory plan");
        return -1;
    }
    memcpy(ws, ord, (size_t)nw * sizeof *ws);
    qsort(ws, (size_t)nw, sizeof *ws, by_offset);
    for (int k = 1; k < nw && bad < 0; k++)
        if (p->buf[ws[k - 1]].offset + p->buf[ws[k - 1]].bytes + g > p->buf[ws[k]].offset &&
            (p->buf[ws[k - 1]].bytes || g))
            bad = ws[k], with = ws[k - 1];
    for (int k = nw; k < n && bad < 0; k++) {
        int i = ord[k];
        const pg_mp_buf *b = &p->buf[i];
        if (b->bytes == 0 && g == 0)
            continue; /* no bytes: meets nothing */
        while (h.n && p->buf[h.v[0]].last_use < b->first_use) { /* ended before this one starts */
            int e = heap_pop(&h), lo = 0, hi = na;
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (by_offset(&act[mid], &e) < 0) lo = mid + 1;
                else hi = mid;
            }
            memmove(act + lo, act + lo + 1, (size_t)(na - lo - 1) * sizeof *act);
            na--;
        }
        for (int pass = 0; pass < 2 && bad < 0; pass++) { /* its neighbours among ws, then among act */
            const int *arr = pass ? act : ws;
            int cnt = pass ? na : nw, lo = 0, hi = cnt;
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (by_offset(&arr[mid], &i) < 0) lo = mid + 1;
                else hi = mid;
            }
            const pg_mp_buf *l = lo > 0 ? &p->buf[arr[lo - 1]] : NULL, *r = lo < cnt ? &p->buf[arr[lo]] : NULL;
            if (l && l->offset + l->bytes + g > b->offset)
                bad = i, with = arr[lo - 1];
            else if (r && b->offset + b->bytes + g > r->offset)
                bad = i, with = arr[lo];
            if (pass) {
                memmove(act + lo + 1, act + lo, (size_t)(na - lo) * sizeof *act);
                act[lo] = i;
                na++;
                heap_push(&h, i);
            }
        }
    }
    free(ws);
    free(h.v);
    check_plan = NULL;
    if (bad >= 0) {
        const pg_mp_buf *a = &p->buf[with < bad ? with : bad], *b = &p->buf[with < bad ? bad : with];
        char la[64], lb[64];
        lifetime_str(a, la, sizeof la);
        lifetime_str(b, lb, sizeof lb);
        snprintf(err, errlen, "buffers '%s' (%" PRId64 " + %" PRId64 " bytes, %s) and '%s' (%" PRId64
                 " + %" PRId64 " bytes, %s) are alive at once and closer than %" PRId64 " guard bytes",
                 a->name, a->offset, a->bytes, la, b->name, b->offset, b->bytes, lb, g);
        rc = -1;
    }
    free(ord);
    free(act);
    return rc;
}

/* Sums saturate at PG_BYTES_OVER (base/bytes.h): every buffer is at most
 * that, so one addition cannot overflow, and a sum that reaches it stays. */
int64_t pg_mp_unshared_bytes(const pg_memplan *p)
{
    int64_t g = p->guard > 0 ? p->guard : 0, s = align_up(g);
    for (int i = 0; i < p->n; i++)
        s = pg_bytes_add(s, align_up(pg_bytes_add(p->buf[i].bytes, g)));
    return s;
}

int64_t pg_mp_cat_bytes(const pg_memplan *p, pg_mp_cat c)
{
    int64_t s = 0;
    for (int i = 0; i < p->n; i++)
        if (p->buf[i].cat == c)
            s = pg_bytes_add(s, align_up(p->buf[i].bytes));
    return s;
}

void pg_mp_free(pg_memplan *p)
{
    free(p->buf);
    memset(p, 0, sizeof *p);
}

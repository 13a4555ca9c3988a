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

void pg_mp_solve(pg_memplan *p)
{
    int n = p->n;
    int *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    int *placed = malloc((size_t)(n ? n : 1) * sizeof *placed);
    /* guard gaps are at least g bytes; every offset stays aligned */
    int64_t g = p->guard > 0 ? p->guard : 0;
    p->total = align_up(g);
    if (!order || !placed) { /* fall back to a bump allocator: still correct */
        for (int i = 0; i < n; i++) {
            p->buf[i].offset = p->total;
            p->total = align_up(p->total + p->buf[i].bytes + g);
        }
        free(order);
        free(placed);
        return;
    }
    for (int i = 0; i < n; i++)
        order[i] = i;
    /* insertion sort: largest first, stable, so the output is deterministic */
    for (int i = 1; i < n; i++) {
        int v = order[i], j = i;
        while (j > 0 && p->buf[order[j - 1]].bytes < p->buf[v].bytes) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    int nplaced = 0;
    for (int k = 0; k < n; k++) {
        pg_mp_buf *b = &p->buf[order[k]];
        /* a buffer holds [off, off + size): its bytes and the guard gap after them */
        int64_t off = align_up(g), size = b->bytes + g;
        /* first fit: bump past every overlapping placed buffer that collides, until none does */
        for (int moved = 1; moved;) {
            moved = 0;
            for (int j = 0; j < nplaced; j++) {
                const pg_mp_buf *o = &p->buf[placed[j]];
                if (!lifetimes_overlap(b, o))
                    continue;
                int64_t oend = o->offset + o->bytes + g;
                if (off < oend && o->offset < off + size) {
                    off = align_up(oend);
                    moved = 1;
                }
            }
        }
        b->offset = off;
        placed[nplaced++] = order[k];
        if (align_up(off + size) > p->total)
            p->total = align_up(off + size);
    }
    free(order);
    free(placed);
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

/* runtime/cuda/hstage.h — pinned host staging for the step's input and target
 * copies (backend.cu's pg_copy_to_dev inside a step).
 *
 * step.c refills its one host buffer for the target right after it handed the
 * input to pg_copy_to_dev, and again next step; an asynchronous copy from that
 * pageable buffer would rely on the driver having staged the bytes before the
 * call returned (which, for large copies, it does by waiting for the stream).
 * Instead each copy goes through a ring of PG_HSTAGE_SLOTS pinned buffers: the
 * caller's bytes are memcpy'd into the next slot, the device copy is enqueued
 * from there and an event recorded; a slot is refilled only after its event
 * says its previous copy is done. The caller's buffer is free at once, the
 * host never waits for the copy it just made, and a copy is never read from
 * bytes that were overwritten.
 *
 * The ring logic is plain C with the CUDA calls passed in (pg_hstage_ops), so
 * tests/unit/test_hstage.c checks it on any machine with a fake device whose
 * copies complete only when waited for. */
#ifndef PG_HSTAGE_H
#define PG_HSTAGE_H

#include <stddef.h>
#include <string.h>

#define PG_HSTAGE_SLOTS 4 /* a step's input and target, twice */

typedef struct pg_hstage_slot {
    void *buf;   /* pinned host memory, cap bytes */
    size_t cap;
    int pending; /* a device copy from buf may still be running */
} pg_hstage_slot;

typedef struct pg_hstage {
    pg_hstage_slot slot[PG_HSTAGE_SLOTS];
    int next; /* the slot the next copy uses */
} pg_hstage;

/* The device side. Each returns 0 or non-zero after reporting the error. */
typedef struct pg_hstage_ops {
    int (*alloc)(void *u, size_t bytes, void **out); /* pinned host memory */
    void (*release)(void *u, void *buf);
    int (*wait)(void *u, int slot);                   /* slot's last copy is complete */
    int (*copy)(void *u, int slot, void *dst, const void *src, size_t bytes); /* enqueue, then record slot's event */
} pg_hstage_ops;

/* Stage `bytes` from src (any host memory, reusable on return) to device dst. */
static inline int pg_hstage_copy(pg_hstage *h, const pg_hstage_ops *ops, void *u, void *dst, const void *src,
                                 size_t bytes)
{
    int k = h->next;
    pg_hstage_slot *s = &h->slot[k];
    if (s->pending && ops->wait(u, k))
        return 1;
    s->pending = 0;
    if (s->cap < bytes) {
        if (s->buf)
            ops->release(u, s->buf);
        s->buf = NULL;
        s->cap = 0;
        if (ops->alloc(u, bytes, &s->buf))
            return 1;
        s->cap = bytes;
    }
    memcpy(s->buf, src, bytes);
    if (ops->copy(u, k, dst, s->buf, bytes))
        return 1;
    s->pending = 1;
    h->next = (k + 1) % PG_HSTAGE_SLOTS;
    return 0;
}

/* Wait for every pending copy (skip = 1: do not wait, the device is stuck),
 * then release the buffers. */
static inline void pg_hstage_free(pg_hstage *h, const pg_hstage_ops *ops, void *u, int skip)
{
    for (int k = 0; k < PG_HSTAGE_SLOTS; k++) {
        pg_hstage_slot *s = &h->slot[k];
        if (s->pending && !skip)
            ops->wait(u, k);
        if (s->buf && !skip)
            ops->release(u, s->buf);
        s->buf = NULL;
        s->cap = 0;
        s->pending = 0;
    }
    h->next = 0;
}

#endif

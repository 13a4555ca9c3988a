/* tests/unit/test_cuda_host.c — the host-side logic of the CUDA runtime, which
 * needs no GPU: the pinned staging ring of the step's copies
 * (runtime/cuda/hstage.h), against a fake device whose copies read their
 * source only when they "complete" (when waited for, or at the end), and the
 * causes cuda_caps.h names for an unusable GPU. */
#include <stdlib.h>
#include <string.h>

#include "../tap.h"
#include "hstage.h"
#include "cuda_caps.h"

/* ---- a fake device: copies complete when their slot is waited for ---------- */
typedef struct fake {
    struct { void *dst; const void *src; size_t bytes; int live; } q[PG_HSTAGE_SLOTS];
    int allocs, releases, waits, copies;
    int fail_alloc, fail_copy, fail_wait;
    size_t last_alloc;
} fake;

static void complete(fake *f, int k)
{
    if (f->q[k].live)
        memcpy(f->q[k].dst, f->q[k].src, f->q[k].bytes);
    f->q[k].live = 0;
}

static int f_alloc(void *u, size_t bytes, void **out)
{
    fake *f = u;
    if (f->fail_alloc)
        return 1;
    f->allocs++;
    f->last_alloc = bytes;
    *out = malloc(bytes);
    return *out == NULL;
}

static void f_release(void *u, void *buf)
{
    ((fake *)u)->releases++;
    free(buf);
}

static int f_wait(void *u, int slot)
{
    fake *f = u;
    f->waits++;
    if (f->fail_wait)
        return 1;
    complete(f, slot);
    return 0;
}

static int f_copy(void *u, int slot, void *dst, const void *src, size_t bytes)
{
    fake *f = u;
    if (f->fail_copy)
        return 1;
    if (f->q[slot].live) /* the ring reused a slot whose copy had not completed */
        return 2;
    f->copies++;
    f->q[slot].dst = dst;
    f->q[slot].src = src;
    f->q[slot].bytes = bytes;
    f->q[slot].live = 1;
    return 0;
}

static const pg_hstage_ops ops = {f_alloc, f_release, f_wait, f_copy};

static void test_ring(void)
{
    fake f;
    memset(&f, 0, sizeof f);
    pg_hstage h;
    memset(&h, 0, sizeof h);
    enum { N = 10, LEN = 64 };
    static int dev[N][LEN];
    int host[LEN]; /* the caller's one buffer, refilled after every call, as step.c does */
    int rc = 0;
    for (int i = 0; i < N && !rc; i++) {
        for (int j = 0; j < LEN; j++)
            host[j] = i * 1000 + j;
        rc = pg_hstage_copy(&h, &ops, &f, dev[i], host, sizeof host);
        memset(host, 0xab, sizeof host); /* refilled at once: the copy must not read it */
    }
    OK(rc == 0, "10 copies through the ring succeed");
    for (int k = 0; k < PG_HSTAGE_SLOTS; k++)
        complete(&f, k); /* the device catches up */
    int good = 1;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < LEN; j++)
            good &= dev[i][j] == i * 1000 + j;
    OK(good, "every copy delivers its own bytes although the caller's buffer was overwritten at once");
    OK(f.allocs == PG_HSTAGE_SLOTS && f.last_alloc == sizeof host,
       "one pinned buffer per slot, allocated once (%d allocations)", f.allocs);
    OK(f.waits == N - PG_HSTAGE_SLOTS, "a slot is waited for only when it is reused (%d waits for %d copies)", f.waits,
       N);
    /* a larger copy grows the next slot (release, then alloc) */
    int big[2 * LEN], bigdev[2 * LEN];
    for (int j = 0; j < 2 * LEN; j++)
        big[j] = 7 * j;
    int releases = f.releases;
    rc = pg_hstage_copy(&h, &ops, &f, bigdev, big, sizeof big);
    for (int k = 0; k < PG_HSTAGE_SLOTS; k++)
        complete(&f, k);
    OK(rc == 0 && f.releases == releases + 1 && f.last_alloc == sizeof big && !memcmp(big, bigdev, sizeof big),
       "a larger copy grows its slot and arrives intact");
    /* failures are reported and leave the ring usable */
    f.fail_alloc = 1;
    int slot_before = h.next;
    int huge[8 * LEN];
    memset(huge, 0, sizeof huge);
    rc = pg_hstage_copy(&h, &ops, &f, huge, huge, sizeof huge); /* needs a new buffer: alloc fails */
    f.fail_alloc = 0;
    OK(rc == 1, "a failed pinned allocation is reported");
    f.fail_copy = 1;
    int r2 = pg_hstage_copy(&h, &ops, &f, dev[0], host, sizeof host);
    f.fail_copy = 0;
    OK(r2 == 1, "a failed copy is reported");
    rc = pg_hstage_copy(&h, &ops, &f, dev[1], host, sizeof host);
    OK(rc == 0, "the ring works again after failures (slot %d then %d)", slot_before, h.next);
    f.fail_wait = 1;
    int waits = f.waits, r3 = 0;
    for (int i = 0; i < PG_HSTAGE_SLOTS + 1 && !r3; i++)
        r3 = pg_hstage_copy(&h, &ops, &f, dev[2], host, sizeof host);
    f.fail_wait = 0;
    OK(r3 == 1 && f.waits > waits, "a failed wait for a slot's previous copy is reported");
    /* teardown: skip = 1 (a poisoned device) neither waits nor frees */
    waits = f.waits;
    releases = f.releases;
    pg_hstage h2 = h;
    pg_hstage_free(&h2, &ops, &f, 1);
    OK(f.waits == waits && f.releases == releases && h2.slot[0].buf == NULL,
       "free on a stuck device: no waits, no frees (the buffers are left to process exit)");
    pg_hstage_free(&h, &ops, &f, 0);
    int pending = 0;
    for (int k = 0; k < PG_HSTAGE_SLOTS; k++)
        pending += f.q[k].live;
    OK(pending == 0 && f.releases == releases + PG_HSTAGE_SLOTS, "free waits for pending copies and releases every buffer");
}

static void test_caps(void)
{
    char b[512];
    OK(!strcmp(pg_cuda_mode_name(0), "DEFAULT") && !strcmp(pg_cuda_mode_name(2), "PROHIBITED") &&
           !strcmp(pg_cuda_mode_name(3), "EXCLUSIVE_PROCESS") && !strcmp(pg_cuda_mode_name(9), "unknown"),
       "compute modes are named as nvidia-smi names them");
    OK(pg_cuda_mode_forbids(1, PG_CUDA_MODE_DEFAULT, b, sizeof b) == 0 &&
           pg_cuda_mode_forbids(1, PG_CUDA_MODE_EXCLUSIVE_PROCESS, b, sizeof b) == 0,
       "DEFAULT and EXCLUSIVE_PROCESS do not forbid a first process");
    OK(pg_cuda_mode_forbids(1, PG_CUDA_MODE_PROHIBITED, b, sizeof b) == 1 &&
           strstr(b, "GPU 1 is in compute mode PROHIBITED") && strstr(b, "nvidia-smi -i 1 -c DEFAULT"),
       "PROHIBITED is refused with the cause and the fix: %s", b);
    pg_cuda_busy_why(0, PG_CUDA_MODE_EXCLUSIVE_PROCESS, b, sizeof b);
    OK(strstr(b, "compute mode EXCLUSIVE_PROCESS and another process already uses it") && strstr(b, "CUDA MPS"),
       "a busy EXCLUSIVE_PROCESS GPU names the mode and what to do: %s", b);
    pg_cuda_busy_why(0, PG_CUDA_MODE_DEFAULT, b, sizeof b);
    OK(strstr(b, "busy or unavailable (compute mode DEFAULT)") != NULL, "a busy DEFAULT GPU says so: %s", b);
    OK(pg_cuda_ipc_unusable(2, 1, 0, 1, b, sizeof b) == 0, "IPC events supported: stages may share a GPU");
    OK(pg_cuda_ipc_unusable(2, 1, 0, 0, b, sizeof b) == 1 &&
           strstr(b, "stage 2: stages 1 and 2 share GPU 0, which needs CUDA IPC events") &&
           strstr(b, "cudaDevAttrIpcEventSupport = 0"),
       "no IPC events: sharing a GPU is refused, naming both stages and the attribute: %s", b);
    OK(pg_cuda_msg_slots(10, 512) == 24 && pg_cuda_msg_slots(0, 512) == 4 && pg_cuda_msg_slots(400, 512) == 512 &&
           pg_cuda_msg_slots(-1, 512) == 512,
       "a direction's message slots: twice a step's messages and 4 (10: %d, none: %d), at most 512, all when not known",
       pg_cuda_msg_slots(10, 512), pg_cuda_msg_slots(0, 512));
}

/* The replicas' choice of the NCCL path (cuda_caps.h, dp_nccl.cu). */
static void test_dp_choice(void)
{
    unsigned char all[4 * PG_DP_INFO_BYTES];
    unsigned char u[4][16];
    char b[256];
    for (int q = 0; q < 4; q++) {
        memset(u[q], 0xa0 + q, 16);
        char bus[32];
        snprintf(bus, sizeof bus, "00000000:%02X:00.0", 0x18 + q);
        pg_dp_info_put(all + q * PG_DP_INFO_BYTES, PG_DP_WANT_YES, 22803, u[q], bus);
    }
    OK(pg_dp_nccl_choice(all, 4, b, sizeof b) == 1, "4 replicas on 4 GPUs, all wanting it: NCCL");
    OK(pg_get32(all + 3 * PG_DP_INFO_BYTES + 4) == 22803 && all[3 * PG_DP_INFO_BYTES + 8] == 0xa3,
       "the message carries the NCCL version and the uuid at their places");
    pg_dp_info_put(all + 2 * PG_DP_INFO_BYTES, PG_DP_WANT_YES, 22803, u[1], "00000000:19:00.0");
    OK(pg_dp_nccl_choice(all, 4, b, sizeof b) == 0 &&
           !strcmp(b, "replicas 1 and 2 share GPU 00000000:19:00.0 (NCCL takes one rank per GPU)"),
       "replicas 1 and 2 on one GPU: the host path, naming both and the GPU: %s", b);
    OK(pg_dp_nccl_choice(all, 2, b, sizeof b) == 1, "... the first 2 replicas alone: NCCL");
    pg_dp_info_put(all + 3 * PG_DP_INFO_BYTES, PG_DP_WANT_ENV, 22803, u[3], "x");
    OK(pg_dp_nccl_choice(all, 4, b, sizeof b) == 0 && !strcmp(b, "PIPE_DP_NCCL=0 on replica 3"),
       "PIPE_DP_NCCL=0 on one replica: the host path on all, naming it: %s", b);
    pg_dp_info_put(all, PG_DP_WANT_NO_NCCL, 0, u[0], NULL);
    OK(pg_dp_nccl_choice(all, 4, b, sizeof b) == 0 && !strcmp(b, "no NCCL on replica 0"),
       "no NCCL on replica 0: the host path: %s", b);
    char longbus[80];
    memset(longbus, 'b', sizeof longbus - 1);
    longbus[sizeof longbus - 1] = 0;
    for (int q = 0; q < 2; q++)
        pg_dp_info_put(all + q * PG_DP_INFO_BYTES, PG_DP_WANT_YES, 1, u[0], longbus);
    OK(pg_dp_nccl_choice(all, 2, b, sizeof b) == 0 && strstr(b, "share GPU bbbb") && strlen(b) < 120,
       "an overlong bus id is cut to the message's room: %s", b);
}

int main(void)
{
    test_ring();
    test_caps();
    test_dp_choice();
    return DONE();
}

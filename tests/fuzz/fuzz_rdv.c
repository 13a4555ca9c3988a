/* tests/fuzz/fuzz_rdv.c — libFuzzer target: everything a stage parses from the
 * network (runtime/core/tcp.c), through the code that parses it at run time.
 * tcp.c is included whole, so its static state machine is reached as it is:
 *
 *   0, 1  the master's greetings (greet_step: the response to the challenge,
 *         then the hello and its agreement text, checked by agree.c's
 *         pg_agree_check), without (0) and with (1) a run token
 *   2     the doorman answering latecomers while the run goes on (late_done)
 *   3     stage 0 telling latecomers why its start-up failed (fail_done)
 *   4     a lower rank's mesh listener (mesh_done)
 *   5     a peer's side: the master's challenge and its proof, the answer
 *         (refusal, failure or address table; answer_challenge, read_answer)
 *   6     data messages' headers on an established link (pg_tcp_recv_rank)
 *
 * An input is u8 mode, u8 flags, then for modes 0-4 connections of
 *     u16 LE n | n bytes
 * each written to one end of a socketpair (then shut) and fed to the state
 * machine at the other; flags bit k: connection k starts with a response the
 * harness computes right (nonce and MAC), so the bytes after it reach the
 * hello even when the run has a token. Modes 5 and 6 read the rest as one
 * stream (mode 5, flags bit 0: the harness signs an address table right).
 * Seeds: well-formed greetings of every mode, made in LLVMFuzzerInitialize. */
#include "fuzz_util.h"

#include "../../runtime/core/tcp.c"

#include <sys/socket.h>

#include "agree.h"
#include "stage_run.h"

#define WORLD 3
#define FZ_TOKEN "fuzz-run-token-0123456789"
#define FZ_RUN "run-F"
#define FZ_HASH 0x1234abcdULL

static pg_stage_desc desc;
static pg_run run;   /* stage 0's options: what pg_agree_check compares against */

/* One socketpair holding bytes b[n] then EOF at fds[0]; -1 when it cannot. */
static int feed(const void *b, size_t n, int fds[2])
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        return -1;
    int big = 1 << 20;
    setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(fds[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    if (n && write_all(fds[1], b, n) != 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    shutdown(fds[1], SHUT_WR); /* EOF after the bytes; what tcp.c writes back still lands in fds[1] */
    return 0;
}

static void init_tcp(pg_tcp *n, int rank, int with_token)
{
    memset(n, 0, sizeof *n);
    n->rank = rank;
    n->world = WORLD;
    n->P = WORLD;
    n->door_fd = n->door_stop[0] = n->door_stop[1] = -1;
    n->p = calloc(WORLD, sizeof *n->p);
    n->host = calloc(WORLD, sizeof *n->host);
    n->pid = calloc(WORLD, sizeof *n->pid);
    if (!n->p || !n->host || !n->pid)
        abort();
    for (int i = 0; i < WORLD; i++) n->p[i].fd = -1;
    snprintf(n->run_id, sizeof n->run_id, FZ_RUN);
    if (with_token) {
        memcpy(n->token, FZ_TOKEN, strlen(FZ_TOKEN));
        n->keys.token_len = strlen(FZ_TOKEN);
    }
    n->keys.token = n->token;
    n->master_port = 29500;
}

static void free_tcp(pg_tcp *n)
{
    for (int i = 0; i < WORLD; i++)
        if (n->p[i].fd >= 0) close(n->p[i].fd);
    free(n->p);
    free(n->host);
    free(n->pid);
}

/* A response to challenge nonce `theirs` that passes (label, the keys). */
static void good_response(const keyring *k, const char *label, const unsigned char *theirs, unsigned char *a)
{
    unsigned char mine[NONCE_BYTES];
    memset(mine, 0x5a, sizeof mine);
    pg_put32(a, AUTH_MAGIC);
    pg_put32(a + 4, PROTO_VERSION);
    pg_put32(a + 8, k->token_len ? 1u : 0u);
    memcpy(a + 12, mine, NONCE_BYTES);
    rdv_mac(k, label, theirs, mine, NULL, 0, NULL, 0, a + 12 + NONCE_BYTES);
}

/* Connections of the rest of the input, each through greet_step as
 * greet_loop would feed it; stops when done() finishes or fails. */
static void greet_all(const greeter *g, const uint8_t *d, size_t n, unsigned flags)
{
    for (int c = 0; n >= 2; c++) {
        size_t len = (size_t)d[0] | (size_t)d[1] << 8;
        d += 2;
        n -= 2;
        if (len > n) len = n;
        unsigned char *b = malloc(AUTH_BYTES + len + 1);
        if (!b) abort();
        pending p;
        memset(&p, 0, sizeof p);
        memset(p.nonce, c + 1, NONCE_BYTES); /* the challenge "sent" */
        size_t off = 0;
        if (c < 8 && (flags >> c & 1)) {
            good_response(g->keys, g->label, p.nonce, b);
            off = AUTH_BYTES;
        }
        memcpy(b + off, d, len);
        int fds[2];
        if (feed(b, off + len, fds) != 0) {
            free(b);
            return;
        }
        free(b);
        p.fd = fds[0];
        snprintf(p.addr, sizeof p.addr, "10.0.0.%d", c);
        int s;
        while ((s = greet_step(g, &p)) == GS_WAIT) {} /* all bytes are there, then EOF: it always moves on */
        pending_drop(&p);
        close(fds[1]);
        d += len;
        n -= len;
        if (s == GS_FINISHED || s == GS_FAILED)
            return;
    }
}

static void mode_master(const uint8_t *d, size_t n, unsigned flags, int with_token)
{
    pg_tcp t;
    init_tcp(&t, 0, with_token);
    pg_launch l;
    memset(&l, 0, sizeof l);
    l.world = WORLD;
    l.master_port = 29500;
    pg_net_config cfg = {.model = "mlp", .plan_hash = FZ_HASH, .run_id = FZ_RUN, .agree_check = pg_agree_check,
                         .agree_arg = &run};
    master_ctx m;
    memset(&m, 0, sizeof m);
    m.n = &t;
    m.l = &l;
    m.cfg = &cfg;
    m.keys = &t.keys;
    m.culprit = -1;
    char addr[WORLD][ADDR_BYTES];
    int port[WORLD];
    unsigned char nonce[WORLD][2][NONCE_BYTES];
    m.addr = addr;
    m.port = port;
    m.nonce = nonce;
    greeter g = {&t.keys, LABEL_PEER, LABEL_MASTER, hello_need, hello_done, master_refused, &m, -1, NULL};
    greet_all(&g, d, n, flags);
    free_tcp(&t);
    /* the peers accepted so far joined the agreement: start afresh */
    pg_agree_free(&run);
    if (pg_agree_build(&run))
        abort();
}

static void mode_door(const uint8_t *d, size_t n, unsigned flags)
{
    pg_tcp t;
    init_tcp(&t, 0, flags & 0x80);
    snprintf(t.host[1], HOST_BYTES, "node1");
    t.pid[1] = 77;
    greeter g = {&t.keys, LABEL_PEER, LABEL_MASTER, hello_need, late_done, door_refused, &t, -1, NULL};
    greet_all(&g, d, n, flags & 0x7f);
    free_tcp(&t);
}

static void mode_tell(const uint8_t *d, size_t n, unsigned flags)
{
    unsigned char told[WORLD] = {0};
    keyring keys = {(const unsigned char *)FZ_TOKEN, flags & 0x80 ? strlen(FZ_TOKEN) : 0};
    teller t = {FZ_RUN, &keys, "--data x: cannot open", "--data x: cannot open", told, WORLD, WORLD - 1, 29500, 0};
    greeter g = {&keys, LABEL_PEER, LABEL_MASTER, hello_need, fail_done, tell_refused, &t, -1, NULL};
    greet_all(&g, d, n, flags & 0x7f);
}

static void mode_mesh(const uint8_t *d, size_t n, unsigned flags)
{
    pg_tcp t;
    init_tcp(&t, 1, flags & 0x80);
    pg_net_config cfg = {.plan_hash = FZ_HASH, .run_id = FZ_RUN};
    mesh_ctx mc = {&t, &cfg, WORLD - 2};
    greeter g = {&t.keys, LABEL_MESH, LABEL_MESH_BACK, mesh_need, mesh_done, NULL, &mc, -1, NULL};
    greet_all(&g, d, n, flags & 0x7f);
    free_tcp(&t);
}

/* The peer's side: the bytes as what the master sends it. */
static void mode_peer(const uint8_t *d, size_t n, unsigned flags)
{
    keyring none = {NULL, 0}, tok = {(const unsigned char *)FZ_TOKEN, strlen(FZ_TOKEN)};
    const keyring *k = flags & 0x80 ? &tok : &none;
    int fds[2];
    if (feed(d, n, fds) != 0)
        return;
    unsigned char mine[NONCE_BYTES], theirs[NONCE_BYTES], *tbl = NULL;
    char err[MAX_REASON_BYTES + 200];
    answer_challenge(fds[0], k, LABEL_PEER, LABEL_MASTER, now_s() + 0.2, mine, theirs, "master", "PIPE_RUN_TOKEN", err,
                     sizeof err);
    close(fds[0]);
    close(fds[1]);
    /* the answer alone, with known nonces; flags bit 0: its MAC made right */
    unsigned char *b = malloc(n + 1);
    if (!b) abort();
    memcpy(b, d, n);
    memset(mine, 1, sizeof mine);
    memset(theirs, 2, sizeof theirs);
    if ((flags & 1) && n >= REPLY_BYTES)
        rdv_mac(k, LABEL_ANSWER, mine, theirs, b, 12, b + REPLY_BYTES, n - REPLY_BYTES, b + 12);
    if (feed(b, n, fds) == 0) {
        if (read_answer(fds[0], k, mine, theirs, WORLD, now_s() + 0.2, &tbl, err, sizeof err) == 0)
            for (int s = 0; s < WORLD; s++) /* every address is a string within its field */
                if (strlen((const char *)tbl + (size_t)s * (ADDR_BYTES + 4)) >= ADDR_BYTES) abort();
        free(tbl);
        close(fds[0]);
        close(fds[1]);
    }
    free(b);
}

/* Data messages from rank 1: the expected tag and size of each receive from
 * the input too, so matches and mismatches are both reached. */
static void mode_messages(const uint8_t *d, size_t n)
{
    if (n < 4)
        return;
    uint32_t tag = d[0], sizes[3] = {d[1], (uint32_t)d[2] * 16u, 0};
    int fds[2];
    if (feed(d + 3, n - 3, fds) != 0)
        return;
    pg_tcp t;
    init_tcp(&t, 0, 0);
    t.P = 2;
    t.world = 2;
    t.p[1].fd = fds[0];
    t.p[1].thr_started = 1; /* a link as pg_tcp_init leaves it (no sender thread needed to receive) */
    unsigned char buf[4096];
    for (int i = 0; i < 64; i++)
        if (pg_tcp_recv_rank(&t, 1, tag + (uint32_t)(i % 2), buf, sizes[i % 3], 0.0) != PG_NET_OK)
            break;
    t.p[1].thr_started = 0;
    close(fds[1]);
    free_tcp(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    unsigned mode = data[0] % 7, flags = data[1];
    data += 2;
    size -= 2;
    switch (mode) {
    case 0: mode_master(data, size, flags, 0); break;
    case 1: mode_master(data, size, flags, 1); break;
    case 2: mode_door(data, size, flags); break;
    case 3: mode_tell(data, size, flags); break;
    case 4: mode_mesh(data, size, flags); break;
    case 5: mode_peer(data, size, flags); break;
    default: mode_messages(data, size); break;
    }
    return 0;
}

/* ---- seeds ---------------------------------------------------------------- */

static size_t seed_hello(unsigned char *b, uint32_t rank, uint32_t world, uint64_t hash, const char *model,
                         const char *run_id, const char *agree)
{
    hello h;
    memset(&h, 0, sizeof h);
    h.magic = HELLO_MAGIC;
    h.version = PROTO_VERSION;
    h.rank = rank;
    h.world = world;
    h.hash = hash;
    h.port = 4000;
    h.pid = 1234;
    h.agree_len = (uint32_t)strlen(agree);
    snprintf(h.model, sizeof h.model, "%s", model);
    snprintf(h.run_id, sizeof h.run_id, "%s", run_id);
    snprintf(h.host, sizeof h.host, "node%u", rank);
    hello_encode(b, &h);
    memcpy(b + HELLO_BYTES, agree, h.agree_len);
    return HELLO_BYTES + h.agree_len;
}

/* mode, flags, then connections of u16 n + n bytes */
static void seed_conns(const char *name, int mode, int flags, unsigned char (*conn)[2048], const size_t *len, int nc)
{
    unsigned char out[8192];
    size_t o = 0;
    out[o++] = (unsigned char)mode;
    out[o++] = (unsigned char)flags;
    for (int c = 0; c < nc; c++) {
        out[o++] = (unsigned char)(len[c] & 0xff);
        out[o++] = (unsigned char)(len[c] >> 8);
        memcpy(out + o, conn[c], len[c]);
        o += len[c];
    }
    fuzz_seed(name, out, o);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* stage 0 of a 3-stage run: its options as pg_agree_build writes them */
    desc.stage = 0;
    desc.nstages = WORLD;
    run.d = &desc;
    run.replicas = 1;
    run.opt.steps = 5;
    run.opt.data = (pg_paths){1, {"tokens.pgd"}};
    if (pg_agree_build(&run))
        abort();
    if (!getenv("FUZZ_SEED_DIR"))
        return 0;
    static unsigned char conn[3][2048];
    size_t len[3];
    /* a whole run's greetings (the agreement text equal to stage 0's) */
    for (int r = 1; r < WORLD; r++) {
        char agree[1024];
        snprintf(agree, sizeof agree, "%.*s", (int)run.agree_len, run.agree);
        len[r - 1] = seed_hello(conn[r - 1], (uint32_t)r, WORLD, FZ_HASH, "mlp", FZ_RUN, agree);
    }
    seed_conns("master_ok", 0, 0x3, conn, len, 2);
    seed_conns("master_token_ok", 1, 0x3, conn, len, 2);
    seed_conns("door", 2, 0x83, conn, len, 2);
    seed_conns("tell", 3, 0x3, conn, len, 2);
    /* options that differ, another run, another hash, a duplicate */
    len[0] = seed_hello(conn[0], 1, WORLD, FZ_HASH, "mlp", FZ_RUN, "--steps\t6\n--data\tother.pgd\nfile --data\t12 00ab\n");
    len[1] = seed_hello(conn[1], 2, WORLD, FZ_HASH, "mlp", "run-X", "");
    len[2] = seed_hello(conn[2], 1, WORLD + 1, FZ_HASH ^ 1, "gpt", FZ_RUN, "bad");
    seed_conns("master_misfits", 0, 0x7, conn, len, 3);
    seed_conns("master_token_misfits", 1, 0x7, conn, len, 3);
    /* the mesh: rank 2 greets rank 1 */
    memset(conn[0], 0, MESH_BYTES);
    pg_put32(conn[0], MESH_MAGIC);
    pg_put32(conn[0] + 4, 2);
    pg_put64(conn[0] + 8, FZ_HASH);
    snprintf((char *)conn[0] + 16, RUNID_BYTES, FZ_RUN);
    len[0] = MESH_BYTES;
    seed_conns("mesh", 4, 0x1, conn, len, 1);
    seed_conns("mesh_token", 4, 0x81, conn, len, 1);
    /* the peer's side: a challenge, then a table; a refusal */
    unsigned char pb[1024];
    size_t o = 0;
    pb[o++] = 5;
    pb[o++] = 1;
    pg_put32(pb + o, CHAL_MAGIC);
    pg_put32(pb + o + 4, PROTO_VERSION);
    pg_put32(pb + o + 8, 0);
    memset(pb + o + 12, 7, NONCE_BYTES);
    o += CHAL_BYTES;
    size_t at = o;
    pg_put32(pb + o, REPLY_MAGIC);
    pg_put32(pb + o + 4, REPLY_OK);
    pg_put32(pb + o + 8, WORLD);
    memset(pb + o + 12, 0, MAC_BYTES);
    o += REPLY_BYTES;
    for (int s = 0; s < WORLD; s++) {
        memset(pb + o, 0, ADDR_BYTES + 4);
        snprintf((char *)pb + o, ADDR_BYTES, "127.0.0.%d", s + 1);
        pg_put32(pb + o + ADDR_BYTES, 4000u + (uint32_t)s);
        o += ADDR_BYTES + 4;
    }
    fuzz_seed("peer_table", pb, o);
    o = at;
    pg_put32(pb + o + 4, REPLY_FAILED);
    pg_put32(pb + o + 8, 30);
    o += REPLY_BYTES;
    memcpy(pb + o, "the run failed at start-up: x", 30);
    fuzz_seed("peer_failed", pb, o + 30);
    /* data messages: a header of tag 9 and 4 bytes, then its payload */
    unsigned char mb[64] = {6, 0, 9, 4, 0};
    pg_put32(mb + 5, MSG_MAGIC);
    pg_put32(mb + 9, 9);
    pg_put64(mb + 13, 4);
    fuzz_seed("messages", mb, 5 + MSG_HDR + 4);
    return 0;
}

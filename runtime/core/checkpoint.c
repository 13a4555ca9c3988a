/* runtime/core/checkpoint.c — pipeline checkpoints and resume; the layout and
 * the rules are in checkpoint.h. Every file is written atomically
 * (io_atomic.c); the manifest is the commit point, LATEST a hint. */
#include "checkpoint.h"
#include "guard.h"
#include "io_atomic.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CK_FORMAT "pipegen-checkpoint-1"
#define CK_PATH 4096
#define RUN_BYTES 80           /* sizeof pg_run.ck_run */

/* snprintf whose truncation is accepted (long paths give clipped messages). */
static void ck_fmt(char *b, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void ck_fmt(char *b, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, len, fmt, ap);
    va_end(ap);
}

/* One tensor of a stage's checkpoint file: an arena range. */
typedef struct ck_item {
    char name[320];            /* "w:<param>", "opt0:<param>", "opt1:<param>" */
    const pg_param_desc *p;
    int64_t off;               /* arena byte offset */
    size_t bytes;
} ck_item;

/* The tensors this stage saves, in file order; *n of them (malloc'd). */
static ck_item *ck_items(const pg_stage_desc *d, int *n, size_t *total)
{
    ck_item *it = calloc((size_t)d->nparams * 3 + 1, sizeof *it);
    *n = 0;
    *total = 0;
    if (!it)
        return NULL;
    for (int i = 0; i < d->nparams; i++) {
        const pg_param_desc *p = &d->params[i];
        int64_t offs[3] = {p->off, p->opt_off[0], p->opt_off[1]};
        static const char *const pre[3] = {"w", "opt0", "opt1"};
        for (int j = 0; j < 3; j++) {
            if (offs[j] < 0 || (j > 0 && p->is_buffer))
                continue;
            ck_item *x = &it[(*n)++];
            snprintf(x->name, sizeof x->name, "%s:%s", pre[j], p->name);
            x->p = p;
            x->off = offs[j];
            x->bytes = (size_t)p->numel * 4;
            *total += x->bytes;
        }
    }
    return it;
}

/* How a checkpoint file holds item it: f32, in its parameter's shape. */
static void ck_shape(const ck_item *it, int *dtype, int *rank, int64_t dim[5])
{
    *dtype = 0;
    *rank = it->p->rank;
    for (int k = 0; k < it->p->rank && k < 4; k++)
        dim[k] = it->p->dim[k];
}

static void step_dir(char *b, size_t len, const char *dir, int64_t step)
{
    snprintf(b, len, "%s/step-%08" PRId64, dir, step);
}

static int mkdir_ok(const char *path, char *err, size_t errlen)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    ck_fmt(err, errlen, "cannot create the checkpoint directory %s: %s", path, strerror(errno));
    return -1;
}

/* A small text file of the checkpoint directory (LATEST, MANIFEST) into buf
 * (NUL-terminated, at most n-1 bytes); a FIFO or other non-regular file is
 * refused, never waited on. Bytes read, or -1 with errno set. */
static ssize_t read_small(const char *path, char *buf, size_t n)
{
    char err[CK_PATH + 64];
    int fd = pg_io_open_regular(path, NULL, err, sizeof err);
    if (fd < 0) {
        struct stat st;
        errno = stat(path, &st) == 0 ? EINVAL : ENOENT;
        return -1;
    }
    size_t got = 0;
    while (got < n - 1) {
        ssize_t r = read(fd, buf + got, n - 1 - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    return (ssize_t)got;
}

/* The step LATEST names and its run ("" when it names none), or -1. */
static int64_t read_latest(const char *dir, char *run, size_t rl)
{
    char p[CK_PATH], buf[256];
    ck_fmt(p, sizeof p, "%s/LATEST", dir);
    if (run && rl) run[0] = 0;
    if (read_small(p, buf, sizeof buf) < 0)
        return -1;
    long long s = -1;
    if (sscanf(buf, "step-%lld", &s) != 1)
        return -1;
    const char *r = strstr(buf, "\nrun ");
    if (r && run && rl)
        sscanf(r + 5, "%79[^\n ]", run); /* RUN_BYTES - 1 */
    return s;
}

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Every DIR/step-* directory's step, newest first (malloc'd into *out). */
static int list_steps(const char *dir, int64_t **out)
{
    *out = NULL;
    DIR *dd = opendir(dir);
    if (!dd)
        return 0;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dd))) {
        long long s;
        char tail;
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1 || s < 0)
            continue;
        if (n == cap) {
            int c = cap ? cap * 2 : 64;
            int64_t *q = realloc(*out, (size_t)c * sizeof *q);
            if (!q)
                break;
            *out = q;
            cap = c;
        }
        (*out)[n++] = s;
    }
    closedir(dd);
    if (n)
        qsort(*out, (size_t)n, sizeof **out, cmp_desc);
    return n;
}

/* The run a complete step belongs to (its MANIFEST's "run" line) into run;
 * 1 complete (run "" for a checkpoint older than run ids), 0 no manifest. */
static int step_run(const char *dir, int64_t step, char *run, size_t rl)
{
    char p[CK_PATH], buf[8192];
    ck_fmt(p, sizeof p, "%s/step-%08" PRId64 "/MANIFEST", dir, step);
    run[0] = 0;
    if (read_small(p, buf, sizeof buf) < 0)
        return 0;
    const char *r = strstr(buf, "\nrun ");
    if (r && rl >= RUN_BYTES)
        sscanf(r + 5, "%79[^\n ]", run);
    return 1;
}

/* ---- the manifest ------------------------------------------------------ */

static int manifest_write(const pg_stage_desc *d, int replicas, const char *sdir, int64_t step, const uint64_t *sums,
                          const char *run, char *err, size_t errlen)
{
    size_t cap = 256 + (size_t)d->nstages * 64 + strlen(d->model) + strlen(run);
    char *t = malloc(cap);
    if (!t) {
        ck_fmt(err, errlen, "out of memory writing the manifest");
        return -1;
    }
    /* replicas: the data-parallel replica count of the run that wrote it (one
     * copy of each stage is written, by replica 0: the replicas are identical) */
    size_t o = (size_t)snprintf(t, cap, "%s\nmodel %s\nplan_hash %016" PRIx64 "\nnstages %d\nstep %" PRId64 "\nreplicas %d\n",
                                CK_FORMAT, d->model, d->plan_hash, d->nstages, step, replicas);
    for (int k = 0; k < d->nstages && o < cap; k++)
        o += (size_t)snprintf(t + o, cap - o, "stage %d %016" PRIx64 "\n", k, sums[k]);
    if (o < cap)
        o += (size_t)snprintf(t + o, cap - o, "run %s\n", run);
    if (o < cap)
        o += (size_t)snprintf(t + o, cap - o, "manifest_hash %016" PRIx64 "\n",
                              pg_hash64(t, o, UINT64_C(0xcbf29ce484222325)));
    char p[CK_PATH];
    ck_fmt(p, sizeof p, "%s/MANIFEST", sdir);
    const void *parts[1] = {t};
    size_t lens[1] = {o};
    int rc = pg_io_write_atomic(p, parts, lens, 1, err, errlen);
    free(t);
    return rc;
}

/* Read and check sdir/MANIFEST against this stage; *sum_out: this stage's checksum. */
static int manifest_check(const pg_stage_desc *d, const char *sdir, int64_t step, uint64_t *sum_out, char *err,
                          size_t errlen)
{
    char p[CK_PATH];
    ck_fmt(p, sizeof p, "%s/MANIFEST", sdir);
    char buf[8192];
    if (read_small(p, buf, sizeof buf) < 0) {
        ck_fmt(err, errlen, "%s has no MANIFEST (a checkpoint that was never completed): %s", sdir,
               errno == ENOENT ? strerror(errno) : "not a regular file");
        return -1;
    }
    char *mh = strstr(buf, "manifest_hash ");
    unsigned long long want = 0;
    if (!mh || sscanf(mh, "manifest_hash %llx", &want) != 1 || !strchr(mh, '\n')) {
        ck_fmt(err, errlen, "%s is truncated or malformed (no manifest_hash line)", p);
        return -1;
    }
    if (pg_hash64(buf, (size_t)(mh - buf), UINT64_C(0xcbf29ce484222325)) != want) {
        ck_fmt(err, errlen, "%s is corrupted (its hash does not match its contents)", p);
        return -1;
    }
    char model[256] = "";
    unsigned long long ph = 0;
    int ns = -1;
    long long st = -1;
    if (strncmp(buf, CK_FORMAT "\n", strlen(CK_FORMAT) + 1) != 0 ||
        sscanf(buf + strlen(CK_FORMAT) + 1, "model %255s plan_hash %llx nstages %d step %lld", model, &ph, &ns, &st) != 4) {
        ck_fmt(err, errlen, "%s: not a %s manifest", p, CK_FORMAT);
        return -1;
    }
    if (strcmp(model, d->model) != 0 || ph != d->plan_hash) {
        ck_fmt(err, errlen, "%s belongs to model '%s' (plan hash %016llx) but this stage is model '%s' (plan hash %016" PRIx64 ")",
                 p, model, ph, d->model, d->plan_hash);
        return -1;
    }
    if (ns != d->nstages) {
        ck_fmt(err, errlen, "%s was written by %d stages but this pipeline has %d", p, ns, d->nstages);
        return -1;
    }
    if (st != step) {
        ck_fmt(err, errlen, "%s says step %lld but lies in the directory of step %" PRId64, p, st, step);
        return -1;
    }
    char key[32];
    snprintf(key, sizeof key, "\nstage %d ", d->stage);
    char *line = strstr(buf, key);
    unsigned long long sum;
    if (!line || sscanf(line + strlen(key), "%llx", &sum) != 1) {
        ck_fmt(err, errlen, "%s has no entry for stage %d", p, d->stage);
        return -1;
    }
    *sum_out = sum;
    return 0;
}

/* ---- one stage's file ---------------------------------------------------- */

static int meta_is(const char *path, const char *key, char *val, size_t vl, char *err, size_t errlen)
{
    return pg_st_read_meta(path, key, val, vl, err, errlen);
}

/* Validate sdir/stage<k>.safetensors and read its tensors into buf
 * ([total] bytes, items' order). 0 ok, -1 with err. */
static int stage_file_load(const pg_run *r, const char *sdir, int64_t step, const ck_item *it, int n, size_t total,
                           unsigned char *buf, char *err, size_t errlen)
{
    const pg_stage_desc *d = r->d;
    uint64_t msum;
    if (manifest_check(d, sdir, step, &msum, err, errlen))
        return -1;
    char p[CK_PATH], v[256], e2[512];
    ck_fmt(p, sizeof p, "%s/stage%d.safetensors", sdir, d->stage);
    if (meta_is(p, "format", v, sizeof v, err, errlen))
        return -1;
    if (strcmp(v, CK_FORMAT) != 0) {
        ck_fmt(err, errlen, "%s is not a pipegen stage checkpoint (format '%s')", p, v);
        return -1;
    }
    if (meta_is(p, "model", v, sizeof v, err, errlen))
        return -1;
    char ph[32];
    snprintf(ph, sizeof ph, "%016" PRIx64, d->plan_hash);
    char vh[256];
    if (meta_is(p, "plan_hash", vh, sizeof vh, err, errlen))
        return -1;
    if (strcmp(v, d->model) != 0 || strcmp(vh, ph) != 0) {
        ck_fmt(err, errlen, "%s belongs to model '%s' (plan hash %s) but this stage is model '%s' (plan hash %s)", p,
                 v, vh, d->model, ph);
        return -1;
    }
    if (meta_is(p, "nstages", v, sizeof v, err, errlen))
        return -1;
    if (atoi(v) != d->nstages) {
        ck_fmt(err, errlen, "%s was written by a pipeline of %s stages but this one has %d", p, v, d->nstages);
        return -1;
    }
    if (meta_is(p, "stage", v, sizeof v, err, errlen))
        return -1;
    if (atoi(v) != d->stage) {
        ck_fmt(err, errlen, "%s holds stage %s, not stage %d", p, v, d->stage);
        return -1;
    }
    if (meta_is(p, "step", v, sizeof v, err, errlen))
        return -1;
    if (strtoll(v, NULL, 10) != step) {
        ck_fmt(err, errlen, "%s holds step %s, not step %" PRId64 " of its directory", p, v, step);
        return -1;
    }
    if (meta_is(p, "checksum", v, sizeof v, err, errlen))
        return -1;
    uint64_t fsum = strtoull(v, NULL, 16);
    pg_st_want *w = calloc((size_t)n + 1, sizeof *w);
    if (!w) {
        ck_fmt(err, errlen, "out of memory reading %s", p);
        return -1;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        w[i].name = it[i].name;
        ck_shape(&it[i], &w[i].dtype, &w[i].rank, w[i].dim);
        w[i].dst = buf + off;
        w[i].bytes = it[i].bytes;
        off += it[i].bytes;
    }
    int rc = pg_st_read(p, w, n, e2, sizeof e2);
    free(w);
    if (rc) {
        ck_fmt(err, errlen, "%s", e2);
        return -1;
    }
    uint64_t sum = pg_hash64(buf, total, UINT64_C(0xcbf29ce484222325));
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        char what[CK_PATH + 400];
        ck_fmt(what, sizeof what, "%s: tensor '%s'", p, it[i].name);
        if (sum == fsum && sum == msum && pg_guard_finite_msg((const float *)(buf + at), it[i].bytes / 4, what, err, errlen))
            return -1;
        at += it[i].bytes;
    }
    if (sum != fsum || sum != msum) {
        ck_fmt(err, errlen,
                 "%s is corrupted: its tensors hash to %016" PRIx64 " but its metadata says %016" PRIx64
                 " and the manifest %016" PRIx64,
                 p, sum, fsum, msum);
        return -1;
    }
    return 0;
}

/* ---- save ------------------------------------------------------------------ */

/* Remove sdir/stage<k>.safetensors (and MANIFEST first, on stage 0), then the
 * directory if it is empty. */
static void remove_step(const pg_stage_desc *d, const char *sdir)
{
    char p[CK_PATH];
    if (d->stage == 0) {
        ck_fmt(p, sizeof p, "%s/MANIFEST", sdir);
        unlink(p);
    }
    ck_fmt(p, sizeof p, "%s/stage%d.safetensors", sdir, d->stage);
    unlink(p);
    rmdir(sdir); /* the last stage to get here removes it */
}

/* Remove this stage's temporaries in sdir whose writer died; how many. */
static int clean_step_tmp(const pg_stage_desc *d, const char *sdir)
{
    char base[64];
    snprintf(base, sizeof base, "stage%d.safetensors", d->stage);
    return pg_io_remove_stale_tmp(sdir, base) + (d->stage == 0 ? pg_io_remove_stale_tmp(sdir, "MANIFEST") : 0);
}

int pg_ckpt_clean_stale(const pg_stage_desc *d, const char *dir)
{
    int removed = 0;
    if (d->stage == 0)
        removed += pg_io_remove_stale_tmp(dir, "LATEST");
    DIR *dd = opendir(dir);
    if (!dd)
        return removed;
    struct dirent *e;
    while ((e = readdir(dd))) {
        long long s;
        char tail, sdir[CK_PATH];
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1 || s < 0)
            continue;
        ck_fmt(sdir, sizeof sdir, "%s/%s", dir, e->d_name);
        removed += clean_step_tmp(d, sdir);
        rmdir(sdir); /* only when that left it empty */
    }
    closedir(dd);
    return removed;
}

/* After a checkpoint at step `newest` is complete: keep the PG_CKPT_KEEP
 * newest complete checkpoints at or below it and remove this stage's part of
 * every older step directory (with its temporaries of dead writers); the
 * complete checkpoints of another run (`run` is this one's) are left alone.
 * A run that replaces another's checkpoints (--replace-checkpoints) removes
 * every step directory it did not write: those below its first checkpoint
 * (first) and above `newest`. */
static void prune(const pg_run *r, const char *dir, int64_t newest, int64_t first, const char *run)
{
    const pg_stage_desc *d = r->d;
    int64_t *steps;
    int n = list_steps(dir, &steps), complete = 0;
    for (int i = 0; i < n; i++) {
        char sdir[CK_PATH], sr[RUN_BYTES];
        step_dir(sdir, sizeof sdir, dir, steps[i]);
        int theirs = r->ck_replace && (steps[i] > newest || steps[i] < first);
        if (!theirs && steps[i] > newest)
            continue;
        int has = step_run(dir, steps[i], sr, sizeof sr);
        if (!theirs && has && run[0] && strcmp(sr, run) != 0)
            continue; /* another run's checkpoint, kept (and not counted) */
        if (theirs || complete >= PG_CKPT_KEEP) {
            clean_step_tmp(d, sdir);
            remove_step(d, sdir);
        } else if (has) {
            complete++;
        }
    }
    free(steps);
}

int pg_ckpt_save(pg_run *r, int64_t step)
{
    const pg_stage_desc *d = r->d;
    const char *dir = r->opt.ckpt_dir;
    char sdir[CK_PATH], path[CK_PATH], err[1024] = "";
    step_dir(sdir, sizeof sdir, dir, step);
    ck_fmt(path, sizeof path, "%s/stage%d.safetensors", sdir, d->stage);
    int n = 0, ok = 0;
    size_t total = 0;
    ck_item *it = ck_items(d, &n, &total);
    unsigned char *buf = malloc(total ? total : 1);
    pg_st_tensor *t = calloc((size_t)n + 1, sizeof *t);
    uint64_t sum = 0;
    if (!it || !buf || !t) {
        ck_fmt(err, sizeof err, "out of memory for a %zu-byte checkpoint", total);
    } else if (!mkdir_ok(dir, err, sizeof err) && !mkdir_ok(sdir, err, sizeof err)) {
        size_t off = 0;
        int rc = 0;
        for (int i = 0; i < n && !rc; i++) {
            rc = pg_copy_to_host(r->ctx, buf + off, r->A + it[i].off, it[i].bytes);
            t[i].name = it[i].name;
            ck_shape(&it[i], &t[i].dtype, &t[i].rank, t[i].dim);
            t[i].data = buf + off;
            t[i].bytes = it[i].bytes;
            off += it[i].bytes;
        }
        sum = pg_hash64(buf, total, UINT64_C(0xcbf29ce484222325));
        size_t at = 0;
        for (int i = 0; i < n && !rc; at += it[i].bytes / 4, i++) {
            char what[400];
            snprintf(what, sizeof what, "tensor '%s'", it[i].name);
            if (pg_guard_finite_msg((const float *)buf + at, it[i].bytes / 4, what, err, sizeof err))
                rc = 2;
        }
        char sstep[32], sst[16], sns[16], sph[32], ssum[32], sseed[32];
        snprintf(sstep, sizeof sstep, "%" PRId64, step);
        snprintf(sst, sizeof sst, "%d", d->stage);
        snprintf(sns, sizeof sns, "%d", d->nstages);
        snprintf(sph, sizeof sph, "%016" PRIx64, d->plan_hash);
        snprintf(ssum, sizeof ssum, "%016" PRIx64, sum);
        snprintf(sseed, sizeof sseed, "%" PRIu64, d->train.seed);
        const char *meta[] = {"format", CK_FORMAT, "model", d->model, "plan_hash", sph, "stage", sst,
                              "nstages", sns, "step", sstep, "data_position", sstep, "seed", sseed,
                              "checksum", ssum, NULL};
        if (rc == 2)
            ck_fmt(err + strlen(err), sizeof err - strlen(err), ": the weights are not finite; not written");
        else if (rc)
            ck_fmt(err, sizeof err, "cannot copy the parameters to the host");
        else if (!pg_st_write(path, t, n, meta, err, sizeof err))
            ok = 1;
    }
    free(it);
    free(buf);
    free(t);
    if (!ok)
        fprintf(stderr, "stage %d: checkpoint of step %" PRId64 ": %s\n", d->stage, step, err);

    /* every stage reports {ok, checksum} to stage 0, which commits and answers */
    uint64_t rep[2] = {(uint64_t)ok, sum}, verdict = 0;
    uint32_t tag = PG_TAG(PG_TAG_CKPT, 0, 0);
    pg_net_status st = PG_NET_OK;
    int failed_stage = ok ? -1 : d->stage;
    if (d->stage != 0) {
        if ((st = pg_net_send(r->net, 0, tag, rep, sizeof rep)) == PG_NET_OK)
            st = pg_net_recv(r->net, 0, PG_TAG(PG_TAG_CKPT, 0, 1), &verdict, sizeof verdict, r->opt.timeout_s);
        if (st) {
            fprintf(stderr, "stage %d: checkpoint of step %" PRId64 ": waiting for stage 0's verdict failed: %s\n",
                    d->stage, step, pg_net_error(r->net));
            return 1;
        }
    } else {
        uint64_t *sums = calloc((size_t)d->nstages, sizeof *sums);
        if (!sums) {
            fprintf(stderr, "stage 0: out of memory committing a checkpoint\n");
            return 1;
        }
        sums[0] = sum;
        int all = ok;
        for (int k = 1; k < d->nstages; k++) {
            uint64_t rk[2];
            if ((st = pg_net_recv(r->net, k, tag, rk, sizeof rk, r->opt.timeout_s))) {
                fprintf(stderr, "stage 0: checkpoint of step %" PRId64 ": waiting for stage %d's report failed: %s\n",
                        step, k, pg_net_error(r->net));
                free(sums);
                return 1;
            }
            if (!rk[0] && all) {
                all = 0;
                failed_stage = k;
            }
            sums[k] = rk[1];
        }
        if (!r->ck_run[0])
            pg_ckpt_new_run(r);
        if (all && manifest_write(d, r->replicas, sdir, step, sums, r->ck_run, err, sizeof err)) {
            fprintf(stderr, "stage 0: checkpoint of step %" PRId64 ": %s\n", step, err);
            all = 0;
            failed_stage = 0;
        }
        free(sums);
        if (all) {
            char lp[CK_PATH], txt[160];
            ck_fmt(lp, sizeof lp, "%s/LATEST", dir);
            int tl = snprintf(txt, sizeof txt, "step-%08" PRId64 "\nrun %s\n", step, r->ck_run);
            const void *parts[1] = {txt};
            size_t lens[1] = {(size_t)tl};
            if (pg_io_write_atomic(lp, parts, lens, 1, err, sizeof err)) /* the manifest is what counts */
                fprintf(stderr, "stage 0: warning: %s (resume finds the step without it)\n", err);
        }
        verdict = (uint64_t)all | (uint64_t)(uint32_t)(failed_stage + 1) << 8;
        for (int k = 1; k < d->nstages; k++)
            if ((st = pg_net_send(r->net, k, PG_TAG(PG_TAG_CKPT, 0, 1), &verdict, sizeof verdict))) {
                fprintf(stderr, "stage 0: checkpoint of step %" PRId64 ": telling stage %d failed: %s\n", step, k,
                        pg_net_error(r->net));
                return 1;
            }
    }
    if (!(verdict & 1)) {
        int64_t prev = read_latest(dir, NULL, 0);
        int who = (int)(verdict >> 8) - 1;
        remove_step(d, sdir); /* free the space the incomplete step holds */
        char prevs[64] = "there is no earlier complete checkpoint";
        if (prev >= 0)
            snprintf(prevs, sizeof prevs, "step-%08" PRId64 " is intact", prev);
        fprintf(stderr, "stage %d: checkpoint of step %" PRId64 " in %s failed (stage %d could not write its part); "
                        "the previous checkpoint is kept: %s\n",
                d->stage, step, dir, who, prevs);
        return 1;
    }
    if (r->ck_first < 0)
        r->ck_first = step;
    char run[RUN_BYTES];
    if (d->stage == 0)
        snprintf(run, sizeof run, "%s", r->ck_run);
    else if (!step_run(dir, step, run, sizeof run)) /* the manifest stage 0 just wrote names it */
        run[0] = 0;
    prune(r, dir, step, r->ck_first, run);
    if (d->stage == 0)
        printf("checkpoint: step %" PRId64 " saved to %s\n", step, sdir);
    return 0;
}

/* ---- whose directory ------------------------------------------------------- */

static int same_dir(const char *a, const char *b)
{
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

int pg_ckpt_check_owner(pg_run *r, char *err, size_t errlen)
{
    const char *dir = r->opt.ckpt_dir;
    r->ck_first = -1;
    if (!dir || (r->opt.resume && same_dir(r->opt.resume, dir)))
        return 0;
    if (r->opt.replace_ckpt) { /* whatever is there goes once this run's first checkpoint is complete */
        r->ck_replace = 1;
        return 0;
    }
    /* the run this one continues: the one LATEST of the --resume directory names */
    char want[RUN_BYTES] = "", lrun[RUN_BYTES], run[RUN_BYTES];
    int known = r->opt.resume && read_latest(r->opt.resume, want, sizeof want) >= 0 && want[0];
    int64_t latest = read_latest(dir, lrun, sizeof lrun), *steps, found = -1;
    const char *frun = "";
    if (latest >= 0 && !(known && !strcmp(lrun, want))) {
        found = latest;
        frun = lrun;
    }
    int n = list_steps(dir, &steps);
    for (int i = 0; i < n && found < 0; i++)
        if (step_run(dir, steps[i], run, sizeof run) && !(known && !strcmp(run, want))) {
            found = steps[i];
            frun = run;
        }
    if (found >= 0)
        ck_fmt(err, errlen,
               "it holds the checkpoints of another run (step-%08" PRId64 " of run %s): a %s run would mix its "
               "checkpoints with them and a later --resume could take theirs; %s write to another directory, or pass "
               "--replace-checkpoints to replace them",
               found, frun[0] ? frun : "(older than run ids)", r->opt.resume ? "resumed" : "fresh",
               r->opt.resume ? "resume from this directory itself," : "resume that run (--resume DIR),");
    free(steps);
    return found >= 0 ? -1 : 0;
}

/* ---- resume ----------------------------------------------------------------
 * Stage 0 proposes steps one at a time: the one LATEST names first (it is
 * authoritative when every stage can use it), then every other step
 * directory, newest first, of the same run as LATEST (all of them when there
 * is no LATEST). A step stage 0 cannot use itself is passed over at once;
 * otherwise every stage checks its own file and answers; the first step every
 * stage can use is taken. Messages (two i64): {CHECK, step}, answered by one
 * i64 (1 usable), then {USE, step} or {NONE, -1}. */
enum { RS_CHECK = 1, RS_USE = 2, RS_NONE = 3 };

void pg_ckpt_new_run(pg_run *r)
{
    unsigned char b[8];
    uint64_t x;
    if (getrandom(b, sizeof b, 0) == (ssize_t)sizeof b) {
        memcpy(&x, b, sizeof x);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = pg_mix64((uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid());
    }
    snprintf(r->ck_run, sizeof r->ck_run, "%016" PRIx64, x);
}

/* Stage 0: the next step to propose after index *i of steps[n] (LATEST's
 * first), or -1 when none is left. */
static int64_t next_candidate(const char *dir, const int64_t *steps, int n, int *i, int64_t latest,
                              const char *latest_run, int *latest_done)
{
    char sdir[CK_PATH], p[CK_PATH];
    if (!*latest_done) {
        *latest_done = 1;
        step_dir(sdir, sizeof sdir, dir, latest);
        if (latest >= 0 && access(sdir, F_OK) == 0)
            return latest;
    }
    while (*i < n) {
        int64_t s = steps[(*i)++];
        char run[RUN_BYTES];
        if (s == latest)
            continue;
        if (latest_run[0] && step_run(dir, s, run, sizeof run) && strcmp(run, latest_run) != 0) {
            step_dir(sdir, sizeof sdir, dir, s);
            ck_fmt(p, sizeof p, "%s", sdir);
            printf("resume: passing over %s: it belongs to another run (%s, not %s, which LATEST names)\n", p,
                   run[0] ? run : "one older than run ids", latest_run);
            continue;
        }
        return s;
    }
    return -1;
}

int pg_ckpt_resume(pg_run *r, int64_t *start_step)
{
    const pg_stage_desc *d = r->d;
    const char *dir = r->opt.resume;
    int n = 0;
    size_t total = 0;
    ck_item *it = ck_items(d, &n, &total);
    unsigned char *buf = malloc(total ? total : 1);
    char err[1024], latest_run[RUN_BYTES];
    if (!it || !buf) {
        fprintf(stderr, "stage %d: out of memory for a %zu-byte checkpoint\n", d->stage, total);
        free(it);
        free(buf);
        return 1;
    }
    int64_t latest = read_latest(dir, latest_run, sizeof latest_run), pick = -1, loaded = -1;
    uint32_t down = PG_TAG(PG_TAG_CKPT, 1, 0), up = PG_TAG(PG_TAG_CKPT, 1, 1);
    pg_net_status st = PG_NET_OK;
    int peer = 0;
    if (d->stage == 0) {
        int64_t *steps;
        int ns = list_steps(dir, &steps), i = 0, latest_done = 0;
        if (ns == 0)
            fprintf(stderr, "stage 0: --resume %s: no checkpoint there (no step-* directories)\n", dir);
        for (;;) {
            int64_t c = next_candidate(dir, steps, ns, &i, latest, latest_run, &latest_done);
            if (c < 0)
                break;
            char sdir[CK_PATH];
            step_dir(sdir, sizeof sdir, dir, c);
            if (stage_file_load(r, sdir, c, it, n, total, buf, err, sizeof err)) {
                fprintf(stderr, "stage 0: cannot resume from %s: %s\n", sdir, err);
                loaded = -1;
                continue;
            }
            loaded = c;
            int all = 1;
            int64_t msg[2] = {RS_CHECK, c};
            for (int k = 1; k < d->nstages && !st; k++)
                st = pg_net_send(r->net, peer = k, down, msg, sizeof msg);
            for (int k = 1; k < d->nstages && !st; k++) {
                int64_t ok = 0;
                if (!(st = pg_net_recv(r->net, peer = k, up, &ok, sizeof ok, r->opt.timeout_s)) && !ok)
                    all = 0;
            }
            if (st || all) {
                pick = st ? -1 : c;
                break;
            }
        }
        free(steps);
        int64_t fin[2] = {pick >= 0 ? RS_USE : RS_NONE, pick};
        for (int k = 1; k < d->nstages && !st; k++)
            st = pg_net_send(r->net, peer = k, down, fin, sizeof fin);
    } else {
        for (;;) {
            int64_t msg[2];
            if ((st = pg_net_recv(r->net, 0, down, msg, sizeof msg, r->opt.timeout_s)))
                break;
            if (msg[0] != RS_CHECK) {
                pick = msg[0] == RS_USE ? msg[1] : -1;
                break;
            }
            char sdir[CK_PATH];
            step_dir(sdir, sizeof sdir, dir, msg[1]);
            int64_t ok = stage_file_load(r, sdir, msg[1], it, n, total, buf, err, sizeof err) == 0;
            if (!ok)
                fprintf(stderr, "stage %d: cannot resume from %s: %s\n", d->stage, sdir, err);
            loaded = ok ? msg[1] : -1;
            if ((st = pg_net_send(r->net, 0, up, &ok, sizeof ok)))
                break;
        }
    }
    if (st) {
        fprintf(stderr, "stage %d: agreeing on the checkpoint to resume from failed (with stage %d): %s\n", d->stage,
                peer, pg_net_error(r->net));
        free(it);
        free(buf);
        return 1;
    }
    if (pick < 0) {
        fprintf(stderr, "stage %d: --resume %s: no complete checkpoint there is usable by every stage%s\n", d->stage,
                dir, d->stage == 0 ? " (see each stage's reasons above)" : "");
        free(it);
        free(buf);
        return 1;
    }
    char sdir[CK_PATH];
    step_dir(sdir, sizeof sdir, dir, pick);
    if (pick > r->opt.steps) {
        fprintf(stderr, "stage %d: --resume %s: the checkpoint to continue from is at step %" PRId64
                        ", past --steps %" PRId64 " (the total, not a number of further steps): nothing to train and "
                        "nothing written; pass --steps above %" PRId64 "\n",
                d->stage, dir, pick, r->opt.steps, pick);
        free(it);
        free(buf);
        return 2;
    }
    if (pick != loaded && stage_file_load(r, sdir, pick, it, n, total, buf, err, sizeof err)) {
        fprintf(stderr, "stage %d: cannot resume from %s: %s\n", d->stage, sdir, err);
        free(it);
        free(buf);
        return 1;
    }
    size_t off = 0;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = pg_copy_to_dev(r->ctx, r->A + it[i].off, buf + off, it[i].bytes);
        off += it[i].bytes;
    }
    free(it);
    free(buf);
    if (rc)
        return 1;
    if (d->stage == 0) {
        char run[RUN_BYTES];
        if (step_run(dir, pick, run, sizeof run) && run[0])
            snprintf(r->ck_run, sizeof r->ck_run, "%s", run); /* this run continues that one */
        if (latest >= 0 && latest != pick)
            printf("resume: LATEST names step %" PRId64 " but not every stage can use it; falling back\n", latest);
        printf("resume: continuing from %s (step %" PRId64 ")\n", sdir, pick);
    }
    *start_step = pick;
    return 0;
}

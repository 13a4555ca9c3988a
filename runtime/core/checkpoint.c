/* runtime/core/checkpoint.c — pipeline checkpoints and resume; the layout and
 * the rules are in checkpoint.h. Every file is written atomically
 * (io_atomic.c); the manifest is the commit point, LATEST a hint. */
#include "checkpoint.h"
#include "io_atomic.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CK_FORMAT "pipegen-checkpoint-1"
#define CK_MAX_CAND 8          /* candidate steps looked at on resume */
#define CK_PATH 4096

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

/* The step LATEST names, or -1. */
static int64_t read_latest(const char *dir)
{
    char p[CK_PATH], buf[64];
    ck_fmt(p, sizeof p, "%s/LATEST", dir);
    FILE *f = fopen(p, "r");
    if (!f)
        return -1;
    long long s = -1;
    if (!fgets(buf, sizeof buf, f) || sscanf(buf, "step-%lld", &s) != 1)
        s = -1;
    fclose(f);
    return s;
}

/* Steps of DIR/step-* directories, newest first (at most max). */
static int list_steps(const char *dir, int64_t *out, int max)
{
    DIR *dd = opendir(dir);
    if (!dd)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dd))) {
        long long s;
        char tail;
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1 || s < 0)
            continue;
        /* insertion into a descending list, keeping the newest max */
        int at = n;
        while (at > 0 && out[at - 1] < s)
            at--;
        if (at >= max)
            continue;
        if (n < max)
            n++;
        memmove(out + at + 1, out + at, (size_t)(n - 1 - at) * sizeof *out);
        out[at] = s;
    }
    closedir(dd);
    return n;
}

/* ---- the manifest ------------------------------------------------------ */

static int manifest_write(const pg_stage_desc *d, const char *sdir, int64_t step, const uint64_t *sums,
                          char *err, size_t errlen)
{
    size_t cap = 256 + (size_t)d->nstages * 64 + strlen(d->model);
    char *t = malloc(cap);
    if (!t) {
        ck_fmt(err, errlen, "out of memory writing the manifest");
        return -1;
    }
    size_t o = (size_t)snprintf(t, cap, "%s\nmodel %s\nplan_hash %016" PRIx64 "\nnstages %d\nstep %" PRId64 "\n",
                                CK_FORMAT, d->model, d->plan_hash, d->nstages, step);
    for (int k = 0; k < d->nstages && o < cap; k++)
        o += (size_t)snprintf(t + o, cap - o, "stage %d %016" PRIx64 "\n", k, sums[k]);
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
    FILE *f = fopen(p, "rb");
    if (!f) {
        ck_fmt(err, errlen, "%s has no MANIFEST (a checkpoint that was never completed): %s", sdir,
                 strerror(errno));
        return -1;
    }
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
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

/* Keep the PG_CKPT_KEEP newest complete checkpoints; remove this stage's part
 * of every older step directory (with its temporaries of dead writers). */
static void prune(const pg_stage_desc *d, const char *dir, int64_t newest)
{
    int64_t steps[64];
    int n = list_steps(dir, steps, 64), complete = 0;
    for (int i = 0; i < n; i++) {
        char sdir[CK_PATH], p[CK_PATH];
        if (steps[i] > newest)
            continue;
        step_dir(sdir, sizeof sdir, dir, steps[i]);
        ck_fmt(p, sizeof p, "%s/MANIFEST", sdir);
        int has = access(p, F_OK) == 0;
        if (complete >= PG_CKPT_KEEP) {
            clean_step_tmp(d, sdir);
            remove_step(d, sdir);
        }
        else if (has)
            complete++;
    }
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
        if (rc)
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
        if (all && manifest_write(d, sdir, step, sums, err, sizeof err)) {
            fprintf(stderr, "stage 0: checkpoint of step %" PRId64 ": %s\n", step, err);
            all = 0;
            failed_stage = 0;
        }
        free(sums);
        if (all) {
            char lp[CK_PATH], txt[64];
            ck_fmt(lp, sizeof lp, "%s/LATEST", dir);
            int tl = snprintf(txt, sizeof txt, "step-%08" PRId64 "\n", step);
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
        int64_t prev = read_latest(dir);
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
    prune(d, dir, step);
    if (d->stage == 0)
        printf("checkpoint: step %" PRId64 " saved to %s\n", step, sdir);
    return 0;
}

/* ---- resume ---------------------------------------------------------------- */

int pg_ckpt_resume(pg_run *r, int64_t *start_step)
{
    const pg_stage_desc *d = r->d;
    const char *dir = r->opt.resume;
    int64_t cand[CK_MAX_CAND + 1], valid[CK_MAX_CAND];
    int nc = list_steps(dir, cand, CK_MAX_CAND), nv = 0;
    int64_t latest = read_latest(dir);
    int n = 0;
    size_t total = 0;
    ck_item *it = ck_items(d, &n, &total);
    unsigned char *buf = malloc(total ? total : 1);
    char err[1024];
    if (!it || !buf) {
        fprintf(stderr, "stage %d: out of memory for a %zu-byte checkpoint\n", d->stage, total);
        free(it);
        free(buf);
        return 1;
    }
    if (nc == 0)
        fprintf(stderr, "stage %d: --resume %s: no checkpoint there (no step-* directories)\n", d->stage, dir);
    int64_t loaded = -1; /* buf holds this step (the last one validated) */
    for (int i = 0; i < nc; i++) {
        char sdir[CK_PATH];
        step_dir(sdir, sizeof sdir, dir, cand[i]);
        if (stage_file_load(r, sdir, cand[i], it, n, total, buf, err, sizeof err)) {
            fprintf(stderr, "stage %d: cannot resume from %s: %s\n", d->stage, sdir, err);
            continue;
        }
        loaded = cand[i];
        valid[nv++] = cand[i];
        if (nv >= 2)
            break; /* the newest two valid ones are enough to agree on */
    }
    (void)latest;
    /* agree: every stage sends its valid steps to stage 0, which picks the
     * newest step valid everywhere and tells everyone (-1: none) */
    int64_t msg[CK_MAX_CAND], pick = -1;
    for (int i = 0; i < CK_MAX_CAND; i++)
        msg[i] = i < nv ? valid[i] : -1;
    uint32_t tag = PG_TAG(PG_TAG_CKPT, 1, 0), tag2 = PG_TAG(PG_TAG_CKPT, 1, 1);
    pg_net_status st = PG_NET_OK;
    if (d->stage != 0) {
        if ((st = pg_net_send(r->net, 0, tag, msg, sizeof msg)) == PG_NET_OK)
            st = pg_net_recv(r->net, 0, tag2, &pick, sizeof pick, r->opt.timeout_s);
    } else {
        int64_t common[CK_MAX_CAND];
        memcpy(common, msg, sizeof common);
        for (int k = 1; k < d->nstages && !st; k++) {
            int64_t mk[CK_MAX_CAND];
            if ((st = pg_net_recv(r->net, k, tag, mk, sizeof mk, r->opt.timeout_s)))
                break;
            for (int i = 0; i < CK_MAX_CAND; i++) {
                int found = 0;
                for (int j = 0; j < CK_MAX_CAND; j++)
                    found |= common[i] >= 0 && mk[j] == common[i];
                if (!found)
                    common[i] = -1;
            }
        }
        for (int i = 0; i < CK_MAX_CAND; i++)
            if (common[i] > pick)
                pick = common[i];
        for (int k = 1; k < d->nstages && !st; k++)
            st = pg_net_send(r->net, k, tag2, &pick, sizeof pick);
    }
    if (st) {
        fprintf(stderr, "stage %d: agreeing on the checkpoint to resume from failed: %s\n", d->stage,
                pg_net_error(r->net));
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
        if (latest >= 0 && latest != pick)
            printf("resume: LATEST names step %" PRId64 " but not every stage can use it; falling back\n", latest);
        printf("resume: continuing from %s (step %" PRId64 ")\n", sdir, pick);
    }
    *start_step = pick;
    return 0;
}

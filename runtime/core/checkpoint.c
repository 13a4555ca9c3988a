/* runtime/core/checkpoint.c — pipeline checkpoints and resume; the layout and
 * the rules are in checkpoint.h. Every file is written atomically
 * (io_atomic.c); the manifest is the commit point, LATEST a hint. */
#include "checkpoint.h"
#include "guard.h"
#include "io_atomic.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CK_FORMAT "pipegen-checkpoint-1"
/* What a stage file's checksum covers (its "checksum_covers"): the tensor
 * table and the data. A file without the key (an older pipegen's) has a
 * checksum of its data alone, and is checked so. */
#define CK_SUM_COVERS "tensor table (names, dtypes, shapes, offsets) and data"
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
    int64_t off;               /* arena byte offset (the weights) */
    int opt;                   /* -1 the weights, else optimizer state opt (through zero.c: --zero 1 holds a part) */
    size_t bytes;
} ck_item;

/* The tensors this stage saves (saving) or loads, in file order; *n of them
 * (malloc'd). A user of a transmitted tie holds the value the owner sent at
 * the start of the last step, not the stepped one, and receives it again
 * before its next use: it does not save that copy (the owner's file holds
 * the parameter; every copy a checkpoint holds is then current and equal) but
 * loads the owner's. */
static ck_item *ck_items(const pg_stage_desc *d, int saving, int *n, size_t *total)
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
            if (offs[j] < 0 || (j > 0 && p->is_buffer) || (saving && p->tie == 2 && p->owner != d->stage))
                continue;
            ck_item *x = &it[(*n)++];
            snprintf(x->name, sizeof x->name, "%s:%s", pre[j], p->name);
            x->p = p;
            x->off = offs[j];
            x->opt = j - 1;
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

/* The data-parallel replicas of this run (identical copies of the pipeline;
 * replica 0 writes the checkpoint). */
static int run_replicas(const pg_run *r) { return r->replicas > 0 ? r->replicas : 1; }

/* ---- the model identity ------------------------------------------------------
 * What must agree between the run that wrote a checkpoint and the run that
 * resumes it for the continuation to be bitwise the one an uninterrupted run of
 * the new layout gives: the model (its name, its layers and skips, its
 * parameters' names, shapes and initialisation) and every training setting
 * that enters the arithmetic. The stage count, the split, the schedule, the
 * checkpoint mode, the tie mode and the replica count do not (DESIGN.md:
 * results do not depend on them) and may differ. */
typedef struct ck_ident {
    char train[640];   /* "batch=24 microbatches=5 loss=mse_sum ...", space-separated key=value */
    uint64_t params;   /* every parameter's name, shape, initialisation, decay and buffer flag */
    uint64_t arch;     /* pg_stage_desc.arch_hash: the layers and skips */
    uint64_t id;       /* the model name and the three above */
} ck_ident;

static int by_param_name(const void *a, const void *b)
{
    return strcmp((*(const pg_param_desc *const *)a)->name, (*(const pg_param_desc *const *)b)->name);
}

static void ident_train(const pg_stage_desc *d, char *b, size_t n)
{
    static const char *const loss[] = {"mse_sum", "mse_mean", "cross_entropy"};
    static const char *const optim[] = {"sgd", "adamw", "adam"};
    static const char *const sched[] = {"constant", "cosine", "linear", "inverse_sqrt"};
    const pg_train_desc *t = &d->train;
    int adamw = pg_optim_adam(t->optimizer), cosine = t->lr_schedule == PG_LR_COSINE || t->lr_schedule == PG_LR_LINEAR;
    int ls = t->lr_schedule >= 0 && t->lr_schedule < 4 ? t->lr_schedule : 0;
    size_t o = (size_t)snprintf(b, n, "batch=%" PRId64 " microbatches=%" PRId64 " loss=%s optimizer=%s lr=%.17g",
                                t->batch, t->microbatches, t->loss >= 0 && t->loss < 3 ? loss[t->loss] : "?",
                                t->optimizer >= 0 && t->optimizer < 3 ? optim[t->optimizer] : "?", t->lr);
    if (o < n && adamw)
        o += (size_t)snprintf(b + o, n - o, " beta1=%.17g beta2=%.17g eps=%.17g", t->beta1, t->beta2, t->adam_eps);
    else if (o < n)
        o += (size_t)snprintf(b + o, n - o, " momentum=%.17g", t->momentum);
    if (o < n)
        o += (size_t)snprintf(b + o, n - o, " weight_decay=%.17g grad_clip=%.17g lr_schedule=%s", t->weight_decay,
                              t->grad_clip, sched[ls]);
    if (o < n && cosine) /* the cosine's (and linear's) horizon is the .pipe's steps */
        o += (size_t)snprintf(b + o, n - o, " warmup=%" PRId64 " lr_min=%.17g horizon=%" PRId64, t->warmup, t->lr_min,
                              t->steps);
    else if (o < n && (t->warmup > 0 || t->lr_schedule == PG_LR_INVSQRT))
        o += (size_t)snprintf(b + o, n - o, " warmup=%" PRId64, t->warmup);
    if (o < n)
        o += (size_t)snprintf(b + o, n - o, " seed=%" PRIu64 " precision=%s", t->seed, d->precision ? "bf16" : "f32");
    if (o < n && t->shuffle) /* only then: the identities of models without it stay as they were */
        snprintf(b + o, n - o, " shuffle=1");
}

/* This model's identity; -1 on out of memory. */
static int ident_of(const pg_stage_desc *d, ck_ident *id)
{
    const pg_param_desc **ps = malloc((size_t)(d->nmodel_params + 1) * sizeof *ps);
    if (!ps)
        return -1;
    for (int i = 0; i < d->nmodel_params; i++)
        ps[i] = &d->model_params[i];
    qsort(ps, (size_t)d->nmodel_params, sizeof *ps, by_param_name);
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (int i = 0; i < d->nmodel_params; i++) {
        const pg_param_desc *p = ps[i];
        char line[600];
        int l = snprintf(line, sizeof line, "%s %d %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %d %.17g %d %d\n",
                         p->name, p->rank, p->dim[0], p->dim[1], p->dim[2], p->dim[3], p->init, p->init_scale,
                         p->decay, p->is_buffer);
        /* a rate other than the default rule's (a `weight_decay = V for` group, adam) is part of it */
        double rule = p->is_buffer || d->train.optimizer == PG_OPTIM_ADAM ? 0.0 : p->decay ? d->train.weight_decay : 0.0;
        if (p->weight_decay != rule && l > 0 && (size_t)l < sizeof line)
            l += snprintf(line + l - 1, sizeof line - (size_t)l + 1, " wd %.17g\n", p->weight_decay) - 1;
        h = pg_hash64(line, (size_t)l < sizeof line ? (size_t)l : sizeof line - 1, h);
    }
    free(ps);
    id->params = h;
    id->arch = d->arch_hash;
    ident_train(d, id->train, sizeof id->train);
    char all[1024];
    int l = snprintf(all, sizeof all, "model %s\narch %016" PRIx64 "\nparams %016" PRIx64 "\ntrain %s\n", d->model,
                     id->arch, id->params, id->train);
    id->id = pg_hash64(all, (size_t)l < sizeof all ? (size_t)l : sizeof all - 1, UINT64_C(0xcbf29ce484222325));
    return 0;
}

/* The value of key in "k=v k=v" text into v ("" when absent). */
static void train_value(const char *text, const char *key, char *v, size_t vl)
{
    size_t kl = strlen(key);
    v[0] = 0;
    for (const char *p = text; p && *p; p = strchr(p, ' ') ? strchr(p, ' ') + 1 : NULL)
        if (!strncmp(p, key, kl) && p[kl] == '=') {
            size_t e = strcspn(p + kl + 1, " ");
            snprintf(v, vl, "%.*s", (int)e, p + kl + 1);
            return;
        }
}

/* "lr=0.001 there, lr=0.01 here; ..." for the training settings that differ. */
static void train_diff(const char *there, const char *here, char *b, size_t n)
{
    size_t o = 0;
    b[0] = 0;
    for (int pass = 0; pass < 2; pass++) { /* every key of theirs, then the keys only this model has */
        const char *text = pass ? here : there;
        for (const char *p = text; p && *p; p = strchr(p, ' ') ? strchr(p, ' ') + 1 : NULL) {
            char key[64], a[160], c[160];
            snprintf(key, sizeof key, "%.*s", (int)strcspn(p, "= "), p);
            train_value(there, key, a, sizeof a);
            train_value(here, key, c, sizeof c);
            if (!strcmp(a, c) || (pass && a[0]) || o >= n)
                continue;
            o += (size_t)snprintf(b + o, n - o, "%s%s%s%s there, %s%s%s here", o ? "; " : "", a[0] ? key : "no ",
                                  a[0] ? "=" : key, a, c[0] ? key : "no ", c[0] ? "=" : key, c);
        }
    }
}

/* ---- the manifest ------------------------------------------------------ */

/* A checkpoint's MANIFEST, as read. */
typedef struct ck_manifest {
    char model[256];
    uint64_t plan_hash;
    int nstages, replicas;
    int64_t step;
    int has_id;          /* 0: written before checkpoints recorded a model identity */
    ck_ident id;
    uint64_t *sums;      /* [nstages] each stage file's checksum (malloc'd) */
} ck_manifest;

static int manifest_write(const pg_stage_desc *d, int replicas, const char *sdir, int64_t step, const uint64_t *sums,
                          const char *run, char *err, size_t errlen)
{
    ck_ident id;
    size_t cap = 1024 + sizeof id.train + (size_t)d->nstages * 64 + strlen(d->model) + strlen(run);
    char *t = malloc(cap);
    if (!t || ident_of(d, &id)) {
        ck_fmt(err, errlen, "out of memory writing the manifest");
        free(t);
        return -1;
    }
    size_t o = (size_t)snprintf(t, cap, "%s\nmodel %s\nplan_hash %016" PRIx64 "\nnstages %d\nstep %" PRId64 "\n",
                                CK_FORMAT, d->model, d->plan_hash, d->nstages, step);
    o += (size_t)snprintf(t + o, cap - o, "replicas %d\nmodel_id %016" PRIx64 "\narch %016" PRIx64 "\nparams %016" PRIx64
                          "\ntrain %s\n", replicas, id.id, id.arch, id.params, id.train);
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

/* The rest of the manifest line "\nKEY value" into v; 0, or -1 when absent. */
static int manifest_field(const char *buf, const char *key, char *v, size_t vl)
{
    char k[40];
    snprintf(k, sizeof k, "\n%s ", key);
    const char *l = strstr(buf, k);
    if (!l)
        return -1;
    l += strlen(k);
    snprintf(v, vl, "%.*s", (int)strcspn(l, "\n"), l);
    return 0;
}

/* Read and check sdir/MANIFEST (format, its own hash, the step, an entry for
 * every stage) into *m; free m->sums. 0, or -1 with err. */
static int manifest_read(const char *sdir, int64_t step, ck_manifest *m, char *err, size_t errlen)
{
    char p[CK_PATH];
    memset(m, 0, sizeof *m);
    ck_fmt(p, sizeof p, "%s/MANIFEST", sdir);
    size_t cap = (size_t)1 << 20;
    char *buf = malloc(cap);
    int rc = -1;
    if (!buf) {
        ck_fmt(err, errlen, "out of memory reading %s", p);
        return -1;
    }
    if (read_small(p, buf, cap) < 0) {
        ck_fmt(err, errlen, "%s has no MANIFEST (a checkpoint that was never completed): %s", sdir,
               errno == ENOENT ? strerror(errno) : "not a regular file");
        goto out;
    }
    char *mh = strstr(buf, "manifest_hash ");
    unsigned long long want = 0;
    if (!mh || sscanf(mh, "manifest_hash %llx", &want) != 1 || !strchr(mh, '\n')) {
        ck_fmt(err, errlen, "%s is truncated or malformed (no manifest_hash line)", p);
        goto out;
    }
    if (pg_hash64(buf, (size_t)(mh - buf), UINT64_C(0xcbf29ce484222325)) != want) {
        ck_fmt(err, errlen, "%s is corrupted (its hash does not match its contents)", p);
        goto out;
    }
    unsigned long long ph = 0;
    long long st = -1;
    if (strncmp(buf, CK_FORMAT "\n", strlen(CK_FORMAT) + 1) != 0 ||
        sscanf(buf + strlen(CK_FORMAT) + 1, "model %255s plan_hash %llx nstages %d step %lld", m->model, &ph,
               &m->nstages, &st) != 4 || m->nstages < 1 || m->nstages > 65536) {
        ck_fmt(err, errlen, "%s: not a %s manifest", p, CK_FORMAT);
        goto out;
    }
    m->plan_hash = ph;
    m->step = st;
    if (st != step) {
        ck_fmt(err, errlen, "%s says step %lld but lies in the directory of step %" PRId64, p, st, step);
        goto out;
    }
    char v[sizeof m->id.train];
    m->replicas = 1; /* absent before replicas were recorded */
    if (!manifest_field(buf, "replicas", v, sizeof v) && (sscanf(v, "%d", &m->replicas) != 1 || m->replicas < 1)) {
        ck_fmt(err, errlen, "%s: replicas '%s' is not a count", p, v);
        goto out;
    }
    if (!manifest_field(buf, "model_id", v, sizeof v)) { /* absent before model identities were recorded */
        unsigned long long a = 0, b = 0, c = 0;
        char a_s[40] = "", b_s[40] = "";
        m->has_id = sscanf(v, "%llx", &a) == 1 && !manifest_field(buf, "arch", a_s, sizeof a_s) &&
                    sscanf(a_s, "%llx", &b) == 1 && !manifest_field(buf, "params", b_s, sizeof b_s) &&
                    sscanf(b_s, "%llx", &c) == 1 && !manifest_field(buf, "train", m->id.train, sizeof m->id.train);
        if (!m->has_id) {
            ck_fmt(err, errlen, "%s: its model identity (model_id, arch, params, train) is malformed", p);
            goto out;
        }
        m->id.id = a;
        m->id.arch = b;
        m->id.params = c;
    }
    m->sums = calloc((size_t)m->nstages, sizeof *m->sums);
    if (!m->sums) {
        ck_fmt(err, errlen, "out of memory reading %s", p);
        goto out;
    }
    for (int k = 0; k < m->nstages; k++) {
        char key[32];
        unsigned long long sum;
        snprintf(key, sizeof key, "stage %d", k);
        if (manifest_field(buf, key, v, sizeof v) || sscanf(v, "%llx", &sum) != 1) {
            ck_fmt(err, errlen, "%s has no entry for stage %d (of %d)", p, k, m->nstages);
            free(m->sums);
            m->sums = NULL;
            goto out;
        }
        m->sums[k] = sum;
    }
    rc = 0;
out:
    free(buf);
    return rc;
}

/* May this stage resume from the checkpoint of manifest m (in sdir)? The same
 * model identity; a checkpoint older than identities only onto its own plan. */
static int ident_check(const pg_stage_desc *d, const ck_manifest *m, const char *sdir, char *err, size_t errlen)
{
    char p[CK_PATH];
    ck_fmt(p, sizeof p, "%s/MANIFEST", sdir);
    if (strcmp(m->model, d->model) != 0) {
        ck_fmt(err, errlen, "%s belongs to model '%s' but this stage is model '%s'", p, m->model, d->model);
        return -1;
    }
    if (!m->has_id) {
        if (m->plan_hash == d->plan_hash && m->nstages == d->nstages)
            return 0;
        ck_fmt(err, errlen, "%s belongs to model '%s' (plan hash %016" PRIx64 ", %d stages) but this stage is model "
                            "'%s' (plan hash %016" PRIx64 ", %d stages); it was written before checkpoints recorded "
                            "a model identity, so it resumes only onto its own plan",
               p, m->model, m->plan_hash, m->nstages, d->model, d->plan_hash, d->nstages);
        return -1;
    }
    ck_ident mine;
    if (ident_of(d, &mine)) {
        ck_fmt(err, errlen, "out of memory");
        return -1;
    }
    if (mine.id == m->id.id)
        return 0;
    char why[1024] = "", diff[640];
    size_t o = 0;
    if (mine.arch != m->id.arch)
        o += (size_t)snprintf(why + o, sizeof why - o, "its layers differ (a layer's kind, shape or attributes, or a skip)");
    if (o < sizeof why && mine.params != m->id.params)
        o += (size_t)snprintf(why + o, sizeof why - o, "%sits parameters differ (a name, shape, initialisation or "
                              "weight-decay flag)", o ? "; " : "");
    if (o < sizeof why && strcmp(mine.train, m->id.train) != 0) {
        train_diff(m->id.train, mine.train, diff, sizeof diff);
        o += (size_t)snprintf(why + o, sizeof why - o, "%sits training settings differ: %s", o ? "; " : "", diff);
    }
    if (!o)
        snprintf(why, sizeof why, "its identity differs");
    ck_fmt(err, errlen, "%s was written by another model '%s' than this one (model identity %016" PRIx64 " there, %016"
                        PRIx64 " here): %s; only the layout (stage count, split, schedule, checkpoint mode, tie mode, "
                        "replicas) may differ on resume",
           p, m->model, m->id.id, mine.id, why);
    return -1;
}

/* ---- the stage files ------------------------------------------------------- */

static int meta_is(const char *path, const char *key, char *val, size_t vl, char *err, size_t errlen)
{
    return pg_st_read_meta(path, key, val, vl, err, errlen);
}

/* Check the metadata of the checkpoint's stage file k (path) against its
 * manifest; *fsum: the checksum it records. 0, or -1 with err. */
static int stage_meta_check(const char *path, int k, int64_t step, const ck_manifest *m, uint64_t *fsum, char *err,
                            size_t errlen)
{
    char v[256], want[32];
    if (meta_is(path, "format", v, sizeof v, err, errlen))
        return -1;
    if (strcmp(v, CK_FORMAT) != 0) {
        ck_fmt(err, errlen, "%s is not a pipegen stage checkpoint (format '%s')", path, v);
        return -1;
    }
    if (meta_is(path, "model", v, sizeof v, err, errlen))
        return -1;
    if (strcmp(v, m->model) != 0) {
        ck_fmt(err, errlen, "%s belongs to model '%s' but its manifest to model '%s'", path, v, m->model);
        return -1;
    }
    snprintf(want, sizeof want, "%016" PRIx64, m->has_id ? m->id.id : m->plan_hash);
    if (meta_is(path, m->has_id ? "model_id" : "plan_hash", v, sizeof v, err, errlen))
        return -1;
    if (strcmp(v, want) != 0) {
        ck_fmt(err, errlen, "%s records %s %s but its manifest %s", path, m->has_id ? "model identity" : "plan hash", v,
               want);
        return -1;
    }
    if (meta_is(path, "nstages", v, sizeof v, err, errlen))
        return -1;
    if (atoi(v) != m->nstages) {
        ck_fmt(err, errlen, "%s was written by a pipeline of %s stages but its manifest says %d", path, v, m->nstages);
        return -1;
    }
    if (meta_is(path, "stage", v, sizeof v, err, errlen))
        return -1;
    if (atoi(v) != k) {
        ck_fmt(err, errlen, "%s holds stage %s, not stage %d", path, v, k);
        return -1;
    }
    if (meta_is(path, "step", v, sizeof v, err, errlen))
        return -1;
    if (strtoll(v, NULL, 10) != step) {
        ck_fmt(err, errlen, "%s holds step %s, not step %" PRId64 " of its directory", path, v, step);
        return -1;
    }
    if (meta_is(path, "checksum", v, sizeof v, err, errlen))
        return -1;
    *fsum = strtoull(v, NULL, 16);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Read from stage file k (path; data hash checked against its metadata, fsum,
 * and the manifest) the items src[] assigns to it into buf (item i at off[i]),
 * and compare those it also holds but another file supplied (a tied
 * parameter's copies must be bitwise equal). 0, or -1 with err. */
static int stage_file_read(const char *sdir, int k, const ck_manifest *m, uint64_t fsum, const ck_item *it, int n,
                           const int *src, char **const *names, const int *nn, const size_t *off, unsigned char *buf,
                           char *err, size_t errlen)
{
    char p[CK_PATH], e2[CK_PATH + 512];
    ck_fmt(p, sizeof p, "%s/stage%d.safetensors", sdir, k);
    uint64_t sum;
    char covers[128] = "";
    int with_table = pg_st_read_meta(p, "checksum_covers", covers, sizeof covers, e2, sizeof e2) == 0;
    if (with_table && strcmp(covers, CK_SUM_COVERS) != 0) {
        ck_fmt(err, errlen, "%s has a checksum of '%s', which this pipegen does not know", p, covers);
        return -1;
    }
    if (pg_st_data_hash(p, with_table, &sum, err, errlen))
        return -1;
    if (sum != fsum || sum != m->sums[k]) {
        ck_fmt(err, errlen,
               "%s is corrupted: its %s hash to %016" PRIx64 " but its metadata says %016" PRIx64
               " and the manifest %016" PRIx64,
               p, with_table ? "tensor names, dtypes, shapes, offsets and bytes" : "tensors", sum, fsum, m->sums[k]);
        return -1;
    }
    pg_st_want *w = calloc((size_t)n + 1, sizeof *w);
    size_t dup = 0;
    for (int i = 0; i < n; i++)
        if (src[i] != k && bsearch(&(const char *){it[i].name}, names[k], (size_t)nn[k], sizeof *names[k], cmp_str))
            dup += it[i].bytes;
    unsigned char *tmp = malloc(dup ? dup : 1);
    int nw = 0, rc = -1;
    if (!w || !tmp) {
        ck_fmt(err, errlen, "out of memory reading %s", p);
        goto out;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        int mine = src[i] == k;
        if (!mine && !bsearch(&(const char *){it[i].name}, names[k], (size_t)nn[k], sizeof *names[k], cmp_str))
            continue;
        w[nw].name = it[i].name;
        ck_shape(&it[i], &w[nw].dtype, &w[nw].rank, w[nw].dim);
        w[nw].dst = mine ? buf + off[i] : tmp + at;
        w[nw].bytes = it[i].bytes;
        at += mine ? 0 : it[i].bytes;
        nw++;
    }
    if (pg_st_read(p, w, nw, e2, sizeof e2)) {
        ck_fmt(err, errlen, "%s", e2);
        goto out;
    }
    at = 0;
    for (int i = 0; i < n; i++) {
        if (src[i] == k) {
            ck_fmt(e2, sizeof e2, "%s: tensor '%s'", p, it[i].name);
            if (pg_guard_finite_msg((const float *)(buf + off[i]), it[i].bytes / 4, e2, err, errlen))
                goto out;
        } else if (bsearch(&(const char *){it[i].name}, names[k], (size_t)nn[k], sizeof *names[k], cmp_str)) {
            if (memcmp(buf + off[i], tmp + at, it[i].bytes) != 0) {
                ck_fmt(err, errlen, "tensor '%s' differs between %s/stage%d.safetensors and stage%d.safetensors: the "
                                    "copies of a parameter held by several stages must be bitwise equal",
                       it[i].name, sdir, src[i], k);
                goto out;
            }
            at += it[i].bytes;
        }
    }
    rc = 0;
out:
    free(w);
    free(tmp);
    return rc;
}

/* Validate the checkpoint in sdir for this stage and read its tensors (items
 * it[n], into buf [total] bytes in items' order) from whichever of the
 * checkpoint's stage files hold them: its own layout may differ from this
 * pipeline's (another stage count, split or schedule of the same model). *m:
 * its manifest (free m->sums). 0 ok, -1 with err. */
static int stage_gather(const pg_run *r, const char *sdir, int64_t step, const ck_item *it, int n,
                        unsigned char *buf, ck_manifest *m, char *err, size_t errlen)
{
    if (manifest_read(sdir, step, m, err, errlen))
        return -1;
    if (ident_check(r->d, m, sdir, err, errlen)) {
        free(m->sums);
        m->sums = NULL;
        return -1;
    }
    int P = m->nstages, rc = -1;
    char ***names = calloc((size_t)P, sizeof *names);
    int *nn = calloc((size_t)P, sizeof *nn), *src = malloc(((size_t)n + 1) * sizeof *src);
    uint64_t *fsum = calloc((size_t)P, sizeof *fsum);
    size_t *off = malloc(((size_t)n + 1) * sizeof *off);
    unsigned char *used = calloc((size_t)P, 1);
    if (!names || !nn || !src || !fsum || !off || !used) {
        ck_fmt(err, errlen, "out of memory reading the checkpoint in %s", sdir);
        goto out;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        src[i] = -1;
        off[i] = at;
        at += it[i].bytes;
    }
    for (int k = 0; k < P && n > 0; k++) { /* which file holds what: their headers */
        char p[CK_PATH];
        if (!m->has_id && k != r->d->stage) /* an older checkpoint: its own plan, each stage its own file */
            continue;
        ck_fmt(p, sizeof p, "%s/stage%d.safetensors", sdir, k);
        if (stage_meta_check(p, k, step, m, &fsum[k], err, errlen) || pg_st_names(p, &names[k], &nn[k], err, errlen))
            goto out;
        for (int i = 0; i < n; i++)
            if (bsearch(&(const char *){it[i].name}, names[k], (size_t)nn[k], sizeof *names[k], cmp_str)) {
                used[k] = 1;
                if (src[i] < 0)
                    src[i] = k;
            }
    }
    for (int i = 0; i < n; i++)
        if (src[i] < 0) {
            ck_fmt(err, errlen, "no file of the checkpoint in %s (%d stage files) holds tensor '%s', which this stage "
                                "needs", sdir, P, it[i].name);
            goto out;
        }
    for (int k = 0; k < P; k++)
        if (used[k] && stage_file_read(sdir, k, m, fsum[k], it, n, src, names, nn, off, buf, err, errlen))
            goto out;
    rc = 0;
out:
    for (int k = 0; names && k < P; k++)
        free(names[k]);
    free(names);
    free(nn);
    free(src);
    free(fsum);
    free(off);
    free(used);
    if (rc) {
        free(m->sums);
        m->sums = NULL;
    }
    return rc;
}

/* ---- save ------------------------------------------------------------------ */

/* Stage 0: remove the files in sdir of stages beyond this layout's, left by a
 * run of more stages that this one resumed: with tmp 0 stage<k>.safetensors,
 * with tmp 1 the temporaries stage<k>.safetensors.tmp.<pid> whose writer
 * died. How many were removed. */
static int clean_beyond(const pg_stage_desc *d, const char *sdir, int tmp)
{
    int removed = 0;
    DIR *dd = opendir(sdir);
    struct dirent *e;
    while (dd && (e = readdir(dd))) {
        int k, end = 0;
        if (sscanf(e->d_name, "stage%d.safetensors%n", &k, &end) != 1 || !end || k < d->nstages)
            continue;
        char p[CK_PATH];
        if (!tmp && !e->d_name[end]) {
            ck_fmt(p, sizeof p, "%s/%s", sdir, e->d_name);
            removed += unlink(p) == 0;
        } else if (tmp && !strncmp(e->d_name + end, ".tmp.", 5)) {
            snprintf(p, sizeof p, "stage%d.safetensors", k);
            removed += pg_io_remove_stale_tmp(sdir, p);
        }
    }
    if (dd)
        closedir(dd);
    return removed;
}

/* Remove sdir/stage<k>.safetensors (and MANIFEST first, on stage 0, with the
 * files of stages beyond this layout's), then the directory if it is empty. */
static void remove_step(const pg_stage_desc *d, const char *sdir)
{
    char p[CK_PATH];
    if (d->stage == 0) {
        ck_fmt(p, sizeof p, "%s/MANIFEST", sdir);
        unlink(p);
        clean_beyond(d, sdir, 0);
    }
    ck_fmt(p, sizeof p, "%s/stage%d.safetensors", sdir, d->stage);
    unlink(p);
    rmdir(sdir); /* the last stage to get here removes it */
}

/* Remove this stage's temporaries in sdir whose writer died (stage 0: also
 * MANIFEST's and those of stages beyond this layout's); how many. */
static int clean_step_tmp(const pg_stage_desc *d, const char *sdir)
{
    char base[64];
    snprintf(base, sizeof base, "stage%d.safetensors", d->stage);
    return pg_io_remove_stale_tmp(sdir, base) +
           (d->stage == 0 ? pg_io_remove_stale_tmp(sdir, "MANIFEST") + clean_beyond(d, sdir, 1) : 0);
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
    ck_item *it = ck_items(d, 1, &n, &total);
    unsigned char *buf = malloc(total ? total : 1);
    pg_st_tensor *t = calloc((size_t)n + 1, sizeof *t);
    uint64_t sum = 0;
    if (!it || !buf || !t) {
        ck_fmt(err, sizeof err, "out of memory for a %zu-byte checkpoint", total);
    } else if (!mkdir_ok(dir, err, sizeof err) && !mkdir_ok(sdir, err, sizeof err)) {
        size_t off = 0;
        int rc = 0;
        for (int i = 0; i < n && !rc; i++) {
            rc = it[i].opt < 0 ? pg_copy_to_host(r->ctx, buf + off, r->A + it[i].off, it[i].bytes)
                               : pg_zero_state_get(r, it[i].p, it[i].opt, (float *)(buf + off));
            t[i].name = it[i].name;
            ck_shape(&it[i], &t[i].dtype, &t[i].rank, t[i].dim);
            t[i].data = buf + off;
            t[i].bytes = it[i].bytes;
            off += it[i].bytes;
        }
        /* the checksum covers the meaning too: names, dtypes, shapes, offsets, then the bytes */
        sum = pg_hash64(buf, total, pg_st_table_hash(t, n, UINT64_C(0xcbf29ce484222325)));
        size_t at = 0;
        for (int i = 0; i < n && !rc; at += it[i].bytes / 4, i++) {
            char what[400];
            snprintf(what, sizeof what, "tensor '%s'", it[i].name);
            if (pg_guard_finite_msg((const float *)buf + at, it[i].bytes / 4, what, err, sizeof err))
                rc = 2;
        }
        char sstep[32], sst[16], sns[16], sph[32], ssum[32], sseed[32], sid[32], srep[16];
        ck_ident id;
        if (!rc && ident_of(d, &id))
            rc = 1;
        snprintf(sid, sizeof sid, "%016" PRIx64, rc ? 0 : id.id);
        snprintf(srep, sizeof srep, "%d", run_replicas(r));
        snprintf(sstep, sizeof sstep, "%" PRId64, step);
        snprintf(sst, sizeof sst, "%d", d->stage);
        snprintf(sns, sizeof sns, "%d", d->nstages);
        snprintf(sph, sizeof sph, "%016" PRIx64, d->plan_hash);
        snprintf(ssum, sizeof ssum, "%016" PRIx64, sum);
        snprintf(sseed, sizeof sseed, "%" PRIu64, d->train.seed);
        const char *meta[] = {"format", CK_FORMAT, "model", d->model, "plan_hash", sph, "stage", sst,
                              "nstages", sns, "replicas", srep, "model_id", sid, "step", sstep,
                              "data_position", sstep, "seed", sseed, "checksum", ssum,
                              "checksum_covers", CK_SUM_COVERS, NULL};
        if (rc == 2)
            ck_fmt(err + strlen(err), sizeof err - strlen(err), ": the weights are not finite; not written");
        else if (rc)
            ck_fmt(err, sizeof err, "cannot copy the parameters to the host (or out of memory)");
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
        if (all && manifest_write(d, run_replicas(r), sdir, step, sums, r->ck_run, err, sizeof err)) {
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

/* ---- the directory's lock -------------------------------------------------
 * DIR/LOCK, flock'ed by the rank that writes the manifests for the whole run
 * and naming it ("run ID host H pid P"): a second run into the directory
 * (two fresh runs started together would delete each other's checkpoints)
 * is refused at start with that name. The file goes when its holder ends; one
 * left by a killed holder is unlocked and taken over. A taker re-checks that
 * the name still leads to the file it locked (its holder may have removed it
 * meanwhile). */
#define CK_LOCK "LOCK"

int pg_ckpt_lock(pg_run *r, char *err, size_t errlen)
{
    const char *dir = r->opt.ckpt_dir;
    char p[CK_PATH], host[256] = "?", holder[512];
    if (!dir || r->d->stage != 0 || r->replica != 0)
        return 0;
    if (mkdir(dir, 0777) == 0) /* made here, to hold the lock: it goes again if nothing was written */
        r->ck_made_dir = 1;
    else if (errno != EEXIST) {
        ck_fmt(err, errlen, "cannot create it: %s", strerror(errno));
        return -1;
    }
    ck_fmt(p, sizeof p, "%s/" CK_LOCK, dir);
    for (int tries = 0; tries < 100; tries++) {
        int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            ck_fmt(err, errlen, "cannot create its lock %s: %s", p, strerror(errno));
            return -1;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            ssize_t n = e == EWOULDBLOCK ? pread(fd, holder, sizeof holder - 1, 0) : -1;
            close(fd);
            if (e != EWOULDBLOCK) {
                ck_fmt(err, errlen, "cannot lock %s: %s", p, strerror(e));
                return -1;
            }
            holder[n > 0 ? n : 0] = 0;
            holder[strcspn(holder, "\n")] = 0;
            ck_fmt(err, errlen, "it is in use by another run (%s holds %s): two runs writing checkpoints into one "
                   "directory would delete each other's; wait for that run to end, or use another directory",
                   holder[0] ? holder : "a process that has not said who it is yet", p);
            return -1;
        }
        struct stat a, b;
        if (fstat(fd, &a) != 0 || stat(p, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
            close(fd); /* its holder removed it after we opened it: try the new one */
            continue;
        }
        if (gethostname(host, sizeof host) != 0)
            snprintf(host, sizeof host, "?");
        host[sizeof host - 1] = 0;
        int l = snprintf(holder, sizeof holder, "run %s on host %s, pid %ld\n",
                         r->launch.run_id[0] ? r->launch.run_id : "(no run id)", host, (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, holder, (size_t)l, 0) != l) {
            ck_fmt(err, errlen, "cannot write its lock %s: %s", p, strerror(errno));
            close(fd);
            return -1;
        }
        r->ck_lock = fd + 1;
        return 0;
    }
    ck_fmt(err, errlen, "cannot take its lock %s: it keeps being replaced", p);
    return -1;
}

void pg_ckpt_unlock(pg_run *r)
{
    if (!r->ck_lock)
        return;
    char p[CK_PATH];
    ck_fmt(p, sizeof p, "%s/" CK_LOCK, r->opt.ckpt_dir);
    unlink(p); /* while it is still held: a taker that opened it re-checks the name */
    close(r->ck_lock - 1);
    r->ck_lock = 0;
    if (r->ck_made_dir)
        rmdir(r->opt.ckpt_dir); /* only when no checkpoint was written into it */
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

/* Step directories the resume scan passes over for one reason: counted and
 * reported in one line (thousands of them must not print thousands of lines). */
typedef struct ck_passed {
    int n;
    int64_t lo, hi;            /* the lowest and highest of them */
    char one[CK_PATH + 256];   /* the first one's message, said as it is when it is alone */
} ck_passed;

static void passed_add(ck_passed *ps, int64_t step, const char *msg)
{
    if (ps->n++ == 0) {
        ps->lo = ps->hi = step;
        ck_fmt(ps->one, sizeof ps->one, "%s", msg);
    }
    if (step < ps->lo) ps->lo = step;
    if (step > ps->hi) ps->hi = step;
}

/* "resume: passing over ..." once: the one message, or the count, the range and why. */
static void passed_say(const ck_passed *ps, const char *why)
{
    if (ps->n == 1)
        printf("resume: passing over %s\n", ps->one);
    else if (ps->n > 1)
        printf("resume: passing over %d step directories (step-%08" PRId64 " .. step-%08" PRId64 "): %s\n", ps->n,
               ps->lo, ps->hi, why);
}

/* Stage 0: the next step to propose after index *i of steps[n] (LATEST's
 * first), or -1 when none is left. Those of another run go to other, those
 * without a MANIFEST (never completed) to incomplete, each said once. */
static int64_t next_candidate(const char *dir, const int64_t *steps, int n, int *i, int64_t latest,
                              const char *latest_run, int *latest_done, ck_passed *other, ck_passed *incomplete)
{
    char sdir[CK_PATH], p[CK_PATH + 256];
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
        step_dir(sdir, sizeof sdir, dir, s);
        int complete = step_run(dir, s, run, sizeof run);
        if (!complete && errno == ENOENT) {
            ck_fmt(p, sizeof p, "%s: it has no MANIFEST (a checkpoint that was never completed)", sdir);
            passed_add(incomplete, s, p);
            continue;
        }
        if (complete && latest_run[0] && strcmp(run, latest_run) != 0) {
            ck_fmt(p, sizeof p, "%s: it belongs to another run (%s, not %s, which LATEST names)", sdir,
                   run[0] ? run : "one older than run ids", latest_run);
            passed_add(other, s, p);
            continue;
        }
        return s;
    }
    return -1;
}

/* After resuming from step `pick` of DIR into DIR itself: every step
 * directory above it that never completed (no MANIFEST: a run killed while it
 * wrote them) goes, this stage's part of each. How many there were. `listed`
 * (stage 0: its list from before it told the others the pick, n of them;
 * NULL: list now): another stage prunes at the same time and removes a
 * directory whose last part it held, so only a list taken before any stage
 * began counts them all (one gone already was incomplete: the others prune
 * nothing else). */
static int prune_incomplete(const pg_stage_desc *d, const char *dir, int64_t pick, const int64_t *listed, int nlisted)
{
    int64_t *steps = NULL;
    int n = listed ? nlisted : list_steps(dir, &steps), gone = 0;
    const int64_t *at = listed ? listed : steps;
    char run[RUN_BYTES], sdir[CK_PATH];
    for (int i = 0; i < n && at[i] > pick; i++) {
        if (step_run(dir, at[i], run, sizeof run) || errno != ENOENT)
            continue;
        step_dir(sdir, sizeof sdir, dir, at[i]);
        clean_step_tmp(d, sdir);
        remove_step(d, sdir);
        gone++;
    }
    free(steps);
    return gone;
}

int pg_ckpt_resume(pg_run *r, int64_t *start_step)
{
    const pg_stage_desc *d = r->d;
    const char *dir = r->opt.resume;
    int n = 0;
    size_t total = 0;
    ck_item *it = ck_items(d, 0, &n, &total);
    unsigned char *buf = malloc(total ? total : 1);
    char err[CK_PATH + 1024], latest_run[RUN_BYTES];
    ck_manifest man = {0};
    if (!it || !buf) {
        fprintf(stderr, "stage %d: out of memory for a %zu-byte checkpoint\n", d->stage, total);
        free(it);
        free(buf);
        return 1;
    }
    int64_t latest = read_latest(dir, latest_run, sizeof latest_run), pick = -1, loaded = -1, *listed = NULL;
    int nlisted = 0;
    uint32_t down = PG_TAG(PG_TAG_CKPT, 1, 0), up = PG_TAG(PG_TAG_CKPT, 1, 1);
    pg_net_status st = PG_NET_OK;
    int peer = 0;
    if (d->stage == 0) {
        int64_t *steps;
        int ns = list_steps(dir, &steps), i = 0, latest_done = 0;
        ck_passed other = {0}, incomplete = {0};
        if (ns == 0)
            fprintf(stderr, "stage 0: --resume %s: no checkpoint there (no step-* directories)\n", dir);
        for (;;) {
            int64_t c = next_candidate(dir, steps, ns, &i, latest, latest_run, &latest_done, &other, &incomplete);
            if (c < 0)
                break;
            char sdir[CK_PATH];
            step_dir(sdir, sizeof sdir, dir, c);
            free(man.sums);
            if (stage_gather(r, sdir, c, it, n, buf, &man, err, sizeof err)) {
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
        listed = steps, nlisted = ns; /* for prune_incomplete */
        passed_say(&incomplete, "they have no MANIFEST (checkpoints that were never completed)");
        passed_say(&other, "they belong to other runs than the one LATEST names");
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
            free(man.sums);
            int64_t ok = stage_gather(r, sdir, msg[1], it, n, buf, &man, err, sizeof err) == 0;
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
        free(man.sums);
        free(it);
        free(buf);
        free(listed);
        return 1;
    }
    if (pick < 0) {
        fprintf(stderr, "stage %d: --resume %s: no complete checkpoint there is usable by every stage%s\n", d->stage,
                dir, d->stage == 0 ? " (see each stage's reasons above)" : "");
        free(man.sums);
        free(it);
        free(buf);
        free(listed);
        return 1;
    }
    char sdir[CK_PATH];
    step_dir(sdir, sizeof sdir, dir, pick);
    if (pick > r->opt.steps) {
        fprintf(stderr, "stage %d: --resume %s: the checkpoint to continue from is at step %" PRId64
                        ", past --steps %" PRId64 " (the total, not a number of further steps): nothing to train and "
                        "nothing written; pass --steps above %" PRId64 "\n",
                d->stage, dir, pick, r->opt.steps, pick);
        free(man.sums);
        free(it);
        free(buf);
        free(listed);
        return 2;
    }
    if (pick != loaded) {
        free(man.sums);
        if (stage_gather(r, sdir, pick, it, n, buf, &man, err, sizeof err)) {
            fprintf(stderr, "stage %d: cannot resume from %s: %s\n", d->stage, sdir, err);
            free(it);
            free(buf);
            free(listed);
            return 1;
        }
    }
    free(man.sums);
    size_t off = 0;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = it[i].opt < 0 ? pg_copy_to_dev(r->ctx, r->A + it[i].off, buf + off, it[i].bytes)
                           : pg_zero_state_put(r, it[i].p, it[i].opt, (const float *)(buf + off));
        off += it[i].bytes;
    }
    free(it);
    free(buf);
    if (rc) {
        free(listed);
        return 1;
    }
    if (d->stage == 0) {
        char run[RUN_BYTES];
        if (step_run(dir, pick, run, sizeof run) && run[0])
            snprintf(r->ck_run, sizeof r->ck_run, "%s", run); /* this run continues that one */
        if (latest >= 0 && latest != pick)
            printf("resume: LATEST names step %" PRId64 " but not every stage can use it; falling back\n", latest);
        char layout[256] = ""; /* the layout that wrote it, when this run's differs */
        int reps = run_replicas(r);
        if (man.nstages != d->nstages || man.replicas != reps || man.plan_hash != d->plan_hash)
            snprintf(layout, sizeof layout, ", written by %d stage%s x %d replica%s%s (this run: %d stage%s x %d replica%s)",
                     man.nstages, man.nstages == 1 ? "" : "s", man.replicas, man.replicas == 1 ? "" : "s",
                     man.nstages == d->nstages && man.replicas == reps ? " of another plan" : "", d->nstages,
                     d->nstages == 1 ? "" : "s", reps, reps == 1 ? "" : "s");
        printf("resume: continuing from %s (step %" PRId64 ")%s\n", sdir, pick, layout);
    }
    /* into the same directory: the step directories above it that never
     * completed would stand among this run's new ones */
    if (r->opt.ckpt_dir && same_dir(dir, r->opt.ckpt_dir)) {
        int gone = prune_incomplete(d, dir, pick, listed, nlisted);
        if (d->stage == 0 && gone)
            printf("resume: removed %d step director%s above step %" PRId64 " that never completed\n", gone,
                   gone == 1 ? "y" : "ies", pick);
    }
    free(listed);
    *start_step = pick;
    return 0;
}

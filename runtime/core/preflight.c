/* runtime/core/preflight.c — what a stage checks before any work, so that a
 * run never trains for an hour and then fails on a typo: --generate/--prompt
 * fit the model, and every file this stage will write can be written (the
 * folder exists and takes a new file, the name is not a folder or a device,
 * and there is room for the weights). A check leaves nothing behind: the
 * probe file is the writer's own temporary name, removed at once, and the
 * checkpoint directory is not created here. No two outputs, and no output
 * and input, may be one file. Temporaries that killed writers
 * left (FILE.tmp.<pid>, checkpoints' stage<k>.safetensors.tmp.<pid>) go. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "checkpoint.h"
#include "io_atomic.h"
#include "stage_run.h"

#define PF_PATH 4096

/* The folder holding path ("." for a bare name) into dir. */
static void folder_of(const char *path, char *dir, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, n, ".");
    else if (slash == path)
        snprintf(dir, n, "/");
    else
        snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

/* Can a new file appear in folder dir? Creates and removes probe (a name of
 * ours in it). 0, or -1 with the reason in err. */
static int probe_folder(const char *dir, const char *probe, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        snprintf(err, errlen, "the folder %s %s", dir,
                 errno == ENOENT ? "does not exist" : strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s is not a folder", dir);
        return -1;
    }
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create a file in %s: %s", dir, strerror(errno));
        return -1;
    }
    close(fd);
    unlink(probe);
    return 0;
}

/* The output file of option `opt` (path) can be written atomically: its
 * folder takes new files, it is not a folder or another non-regular file, and
 * (need > 0) the folder's file system has need bytes free. */
static int check_file(const pg_stage_desc *d, const char *opt, const char *path, uint64_t need)
{
    char dir[PF_PATH], tmp[PF_PATH + 32], why[PF_PATH + 128] = "";
    struct stat st;
    size_t len = strlen(path);
    if (len == 0 || len >= PF_PATH || path[len - 1] == '/') {
        snprintf(why, sizeof why, "%s", len >= PF_PATH ? "the name is too long" : "it names a folder, not a file");
    } else if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(why, sizeof why, "%s exists and is %s", path,
                 S_ISDIR(st.st_mode) ? "a folder" : "not a regular file (a device, pipe or socket)");
    } else {
        folder_of(path, dir, sizeof dir);
        pg_io_remove_stale_tmp(dir, strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
        pg_io_tmp_name(tmp, sizeof tmp, path);
        struct statvfs vf;
        if (probe_folder(dir, tmp, why, sizeof why) == 0 && need > 0 && statvfs(dir, &vf) == 0 &&
            (uint64_t)vf.f_bavail * vf.f_frsize < need)
            snprintf(why, sizeof why, "it needs %" PRIu64 " bytes but the file system of %s has only %" PRIu64
                     " free", need, dir, (uint64_t)vf.f_bavail * vf.f_frsize);
    }
    if (!why[0])
        return 0;
    fprintf(stderr, "stage %d: %s %s cannot be written: %s; nothing was run\n", d->stage, opt, path, why);
    return -1;
}

/* The checkpoint folder exists and takes new files, or can be created in its
 * parent folder (it is not created here: a failed start leaves nothing). */
static int check_ckpt_dir(const pg_stage_desc *d, const char *dir)
{
    char trimmed[PF_PATH], parent[PF_PATH], probe[PF_PATH + 64], why[PF_PATH + 128] = "";
    struct stat st;
    size_t n = strlen(dir);
    if (n == 0 || n >= PF_PATH) {
        snprintf(why, sizeof why, "%s", n ? "the name is too long" : "the name is empty");
    } else if (stat(dir, &st) == 0) {
        snprintf(probe, sizeof probe, "%s/.pipegen-probe.tmp.%ld", dir, (long)getpid());
        probe_folder(dir, probe, why, sizeof why);
    } else if (errno != ENOENT) {
        snprintf(why, sizeof why, "%s", strerror(errno));
    } else {
        snprintf(trimmed, sizeof trimmed, "%s", dir);
        while (n > 1 && trimmed[n - 1] == '/')
            trimmed[--n] = 0;
        folder_of(trimmed, parent, sizeof parent);
        snprintf(probe, sizeof probe, "%s.tmp.%ld", trimmed, (long)getpid());
        if (probe_folder(parent, probe, why, sizeof why) == 0)
            return 0;
    }
    if (!why[0])
        return 0;
    fprintf(stderr, "stage %d: the checkpoint directory %s cannot be used: %s; nothing was run\n", d->stage, dir, why);
    return -1;
}

/* Bytes of the one safetensors file --save (grads: --save-grads) writes: every
 * tensor's f32 data plus a generous allowance for the JSON header. */
static uint64_t save_bytes(const pg_stage_desc *d, int grads)
{
    uint64_t b = 4096;
    for (int p = 0; p < d->nmodel_params; p++)
        if (!(grads && d->model_params[p].is_buffer))
            b += (uint64_t)d->model_params[p].numel * 4 + 256 + strlen(d->model_params[p].name);
    return b;
}

int pg_run_preflight(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    const pg_run_opts *o = &r->opt;
    char err[1024];
    int bad = 0;
    if (o->generate > 0 && pg_run_generate_check(r, err, sizeof err)) {
        fprintf(stderr, "stage %d: %s; nothing was run\n", d->stage, err);
        bad = 1;
    }
    /* no two outputs, and no output and input, are one file: every shard of every data set counts */
    pg_io_file files[8 + 5 * PG_MAX_SHARDS] = {
        {"--save", o->save, 1},       {"--save-grads", o->save_grads, 1}, {"--trace", o->trace, 1},
        {"--profile", o->profile, 1}, {"--metrics", o->metrics, 1},       {"--out", o->out, 1},
        {"--load", o->load, 0}};
    int nf = 7;
    const struct { const char *what; const pg_paths *p; } ins[] = {
        {"--data", &o->data}, {"--targets", &o->targets}, {"--eval-data", &o->eval_data},
        {"--eval-targets", &o->eval_targets}, {"--predict", &o->predict}};
    for (size_t k = 0; k < sizeof ins / sizeof ins[0]; k++)
        for (int i = 0; i < ins[k].p->n && i < PG_MAX_SHARDS; i++)
            files[nf++] = (pg_io_file){ins[k].what, ins[k].p->p[i], 0};
    if (pg_io_check_distinct(files, nf, err, sizeof err)) {
        fprintf(stderr, "stage %d: %s; nothing was run\n", d->stage, err);
        return 2;
    }
    if (d->stage == 0) { /* stage 0 alone writes these */
        bad |= o->save && check_file(d, "--save", o->save, save_bytes(d, 0));
        bad |= o->save_grads && check_file(d, "--save-grads", o->save_grads, save_bytes(d, 1));
        bad |= o->trace && check_file(d, "--trace", o->trace, 0);
        bad |= o->profile && check_file(d, "--profile", o->profile, 0);
        bad |= o->generate > 0 && o->gen_out && check_file(d, "--gen-out", o->gen_out, 0);
    }
    if (d->has_loss && r->replica == 0) { /* the stage that logs and predicts writes these */
        bad |= o->metrics && check_file(d, "--metrics", o->metrics, 0);
        bad |= o->out && check_file(d, "--out", o->out, 0);
    }
    if (o->ckpt_dir) {
        bad |= check_ckpt_dir(d, o->ckpt_dir) != 0;
        if (!bad && pg_ckpt_check_owner(r, err, sizeof err)) {
            fprintf(stderr, "stage %d: the checkpoint directory %s cannot be used: %s; nothing was run\n", d->stage,
                    o->ckpt_dir, err);
            bad = 1;
        }
        if (!bad && pg_ckpt_lock(r, err, sizeof err)) { /* last: a refused start takes no lock */
            fprintf(stderr, "stage %d: the checkpoint directory %s cannot be used: %s; nothing was run\n", d->stage,
                    o->ckpt_dir, err);
            bad = 1;
        }
        if (!bad)
            pg_ckpt_clean_stale(d, o->ckpt_dir);
    }
    if (o->resume && !bad && (!o->ckpt_dir || strcmp(o->resume, o->ckpt_dir)))
        pg_ckpt_clean_stale(d, o->resume);
    return bad ? 2 : 0;
}

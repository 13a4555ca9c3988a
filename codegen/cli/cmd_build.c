/* codegen/cli/cmd_build.c — `pipegen build FILE -o DIR [--cuda] [--balance PROFILE]
 * [--guard-bytes N]`: generates the model into DIR/c/ (as `pipegen gen`, all or
 * nothing) and compiles and links every stage into DIR/stage<k> against the
 * runtime that came with this pipegen: the installed one (PREFIX/lib/pipegen,
 * PREFIX/include/pipegen: `make install`) or the checkout's (build/, runtime/core).
 * The build folder is DIR and nothing else, so two builds of one model (2 and
 * 4 stages) in two folders never meet. The new binaries are compiled beside their
 * places and renamed in only when every stage compiled; the stage<k> binaries of
 * an older build in DIR that the new one does not have are removed (piperun runs
 * every stage<k> it finds). One line says what was built, one what was removed.
 * The compiler is $CC (default cc) with $CFLAGS (default -O2). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cmd_common.h"
#include "cli/commands.h"
#include "gen/gen_files.h"

#define BP 4096      /* a path */
#define BARGS 256    /* words of one compiler command */

/* Where the runtime a stage links against lies. */
typedef struct build_rt {
    char lib[BP];     /* libpgrt_cpu.a or libpgrt_cuda.a */
    char inc[BP];     /* the folder holding pg_stage.h */
    char flags[BP];   /* lib's .flags file: how the runtime was compiled (may be absent) */
    char ldlibs[BP];  /* --cuda: gpu_ldlibs.sh, which finds cudart, cuBLAS and NCCL on this host */
} build_rt;

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The folder of this pipegen's own executable, into dir. 0 or -1. */
static int exe_dir(char *dir, size_t len)
{
    char p[BP];
    ssize_t n = readlink("/proc/self/exe", p, sizeof p - 1);
    if (n <= 0)
        return -1;
    p[n] = 0;
    char *slash = strrchr(p, '/');
    if (!slash || (size_t)(slash - p) >= len)
        return -1;
    *slash = 0;
    if (!p[0])
        p[0] = '/', p[1] = 0;
    memcpy(dir, p, strlen(p) + 1);
    return 0;
}

/* The runtime next to this pipegen: installed (BIN/../lib/pipegen, BIN/../include/pipegen)
 * or in the checkout (build/libpgrt_cpu.a beside build/pipegen, build-cuda/libpgrt_cuda.a,
 * runtime/core). 0, or -1 after saying where it looked. */
static int find_runtime(int cuda, build_rt *rt)
{
    char bin[BP / 2]; /* room for what follows it in every path below */
    const char *lib = cuda ? "libpgrt_cuda.a" : "libpgrt_cpu.a";
    if (exe_dir(bin, sizeof bin) != 0) {
        fprintf(stderr, "pipegen build: cannot tell where this pipegen is installed (/proc/self/exe): %s\n",
                strerror(errno));
        return -1;
    }
    char inst_lib[BP], tree_lib[BP], inc[BP];
    snprintf(inst_lib, sizeof inst_lib, "%s/../lib/pipegen/%s", bin, lib);
    snprintf(inc, sizeof inc, "%s/../include/pipegen/pg_stage.h", bin);
    if (is_file(inst_lib) && is_file(inc)) {
        snprintf(rt->lib, sizeof rt->lib, "%s", inst_lib);
        snprintf(rt->inc, sizeof rt->inc, "%s/../include/pipegen", bin);
        snprintf(rt->ldlibs, sizeof rt->ldlibs, "%s/../lib/pipegen/gpu_ldlibs.sh", bin);
    } else {
        snprintf(tree_lib, sizeof tree_lib, cuda ? "%s/../build-cuda/%s" : "%s/%s", bin, lib);
        snprintf(inc, sizeof inc, "%s/../runtime/core/pg_stage.h", bin);
        if (!is_file(tree_lib) || !is_file(inc)) {
            fprintf(stderr,
                    "pipegen build: no %s runtime for this pipegen: neither %s (installed by make install) nor %s (a "
                    "checkout's build) exists; %s\n",
                    cuda ? "CUDA" : "CPU", inst_lib, tree_lib,
                    cuda ? "build it on a machine with the CUDA toolkit (make CUDA=1 build-cuda/libpgrt_cuda.a), then "
                           "make install"
                         : "run make, or make install PREFIX=DIR and use DIR/bin/pipegen");
            return -1;
        }
        snprintf(rt->lib, sizeof rt->lib, "%s", tree_lib);
        snprintf(rt->inc, sizeof rt->inc, "%s/../runtime/core", bin);
        snprintf(rt->ldlibs, sizeof rt->ldlibs, "%s/../tools/gpu_ldlibs.sh", bin);
    }
    char real[PATH_MAX];
    if (realpath(rt->lib, real) && strlen(real) < sizeof rt->lib) /* named plainly in what build prints */
        memcpy(rt->lib, real, strlen(real) + 1);
    if (realpath(rt->inc, real) && strlen(real) < sizeof rt->inc)
        memcpy(rt->inc, real, strlen(real) + 1);
    snprintf(rt->flags, sizeof rt->flags, "%.*s.flags", (int)strlen(rt->lib) - 2, rt->lib);
    return 0;
}

/* Split s at blanks into argv[*n...] (s is changed in place). -1: too many words. */
static int add_words(char *s, char **argv, int *n)
{
    for (char *w = strtok(s, " \t\n"); w; w = strtok(NULL, " \t\n")) {
        if (*n >= BARGS - 1)
            return -1;
        argv[(*n)++] = w;
    }
    return 0;
}

/* The value of the line "KEY value" of the runtime's .flags file, into out
 * ("" when the file or the line is missing: a runtime compiled without extra flags). */
static void read_flag(const char *path, const char *key, char *out, size_t len)
{
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[BP];
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ' ') {
            line[strcspn(line, "\n")] = 0;
            snprintf(out, len, "%s", line + kl + 1);
            break;
        }
    fclose(f);
}

/* Run argv and wait; with out, its stdout is read into out (len bytes at
 * most, NUL-terminated). The exit status, or -1 when it could not start or
 * died by a signal (said on stderr). */
static int run(char **argv, char *out, size_t len)
{
    int fd[2] = {-1, -1};
    if (out && pipe(fd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "pipegen build: cannot start %s: %s\n", argv[0], strerror(errno));
        return -1;
    }
    if (pid == 0) {
        if (out) {
            dup2(fd[1], 1);
            close(fd[0]);
            close(fd[1]);
        }
        execvp(argv[0], argv);
        fprintf(stderr, "pipegen build: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (out) {
        close(fd[1]);
        size_t got = 0;
        ssize_t r;
        while ((r = read(fd[0], out + got, len - 1 - got)) > 0 || (r < 0 && errno == EINTR))
            if (r > 0 && (got += (size_t)r) >= len - 1)
                break;
        out[got] = 0;
        close(fd[0]);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (WIFSIGNALED(st)) {
        fprintf(stderr, "pipegen build: %s was killed by signal %d\n", argv[0], WTERMSIG(st));
        return -1;
    }
    return WEXITSTATUS(st);
}

/* The linker flags of a CUDA stage on this host (cudart, cuBLAS, NCCL, as
 * tools/gpu_ldlibs.sh finds them), with its symlink folder in DIR/c. 0 or -1. */
static int cuda_ldlibs(const build_rt *rt, const char *dir, char *out, size_t len)
{
    char libdir[BP + 16];
    snprintf(libdir, sizeof libdir, "%s/c/cuda-libs", dir);
    char *argv[] = {"sh", (char *)rt->ldlibs, libdir, NULL};
    if (!is_file(rt->ldlibs)) {
        fprintf(stderr, "pipegen build: %s is missing: it finds the CUDA libraries a stage links with\n", rt->ldlibs);
        return -1;
    }
    if (run(argv, out, len) != 0 || !out[0]) {
        fprintf(stderr, "pipegen build: %s found no CUDA libraries to link with\n", rt->ldlibs);
        return -1;
    }
    return 0;
}

/* Compile and link DIR/c/stage<k>.c into tmp. 0, or -1 (the compiler said why). */
static int compile_stage(const build_rt *rt, const char *dir, int k, const char *tmp, const char *ldlibs)
{
    char cc[BP], cflags[BP], rtflags[BP], rtlibs[BP], libs[BP * 2], inc[BP + 8], gen[BP + 8], src[BP + 32];
    snprintf(cc, sizeof cc, "%s", getenv("CC") && getenv("CC")[0] ? getenv("CC") : "cc");
    snprintf(cflags, sizeof cflags, "%s", getenv("CFLAGS") ? getenv("CFLAGS") : "-O2");
    read_flag(rt->flags, "cflags", rtflags, sizeof rtflags);
    read_flag(rt->flags, "libs", rtlibs, sizeof rtlibs);
    snprintf(libs, sizeof libs, "%s", ldlibs ? ldlibs : rtlibs[0] ? rtlibs : "-lpthread -lm");
    snprintf(inc, sizeof inc, "-I%s", rt->inc);
    snprintf(gen, sizeof gen, "-I%s/c", dir);
    snprintf(src, sizeof src, "%s/c/stage%d.c", dir, k);
    char *argv[BARGS];
    int n = 0;
    int bad = add_words(cc, argv, &n);
    argv[n++] = "-std=c11";
    if (bad || add_words(cflags, argv, &n) || add_words(rtflags, argv, &n) || n > BARGS - 16) {
        fprintf(stderr, "pipegen build: too many words in CC and CFLAGS\n");
        return -1;
    }
    argv[n++] = inc;
    argv[n++] = gen;
    argv[n++] = "-o";
    argv[n++] = (char *)tmp;
    argv[n++] = src;
    argv[n++] = (char *)rt->lib;
    if (add_words(libs, argv, &n)) {
        fprintf(stderr, "pipegen build: too many linker flags\n");
        return -1;
    }
    argv[n] = NULL;
    int st = run(argv, NULL, 0);
    if (st != 0) {
        fprintf(stderr, "pipegen build: compiling %s failed (%s exited with %d); nothing in %s was replaced\n", src,
                argv[0], st, dir);
        return -1;
    }
    return 0;
}

/* Remove DIR/stage<j> for every j >= n (an older build's extra stages, which
 * piperun would start); one line names them. */
static void remove_old_stages(const char *dir, int n)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned j;
        int end = 0;
        if (sscanf(e->d_name, "stage%u%n", &j, &end) != 1 || e->d_name[end] || (int)j < n || j > INT_MAX)
            continue;
        char p[BP + 300];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) == 0)
            printf("%s %s", removed++ ? "," : "removed the stages of the previous build:", e->d_name);
    }
    closedir(d);
    if (removed)
        printf("\n");
}

int cmd_build(int argc, char **argv)
{
    cmd_gen_opts o;
    int rc = cmd_gen_args(argc, argv, 1, &o);
    if (rc)
        return rc;
    build_rt rt;
    if (find_runtime(o.cuda, &rt) != 0)
        return 1;
    char dir[BP], gdir[BP + 8];
    size_t dl = strlen(o.dir);
    while (dl > 1 && o.dir[dl - 1] == '/')
        dl--;
    if (dl >= sizeof dir - 64) {
        fprintf(stderr, "pipegen build: the folder name %s is too long\n", o.dir);
        return 2;
    }
    snprintf(dir, sizeof dir, "%.*s", (int)dl, o.dir);
    snprintf(gdir, sizeof gdir, "%s/c", dir);
    int nstages = 0;
    if (cmd_gen_dir(o.path, gdir, o.balance, o.guard, &nstages) != 0)
        return 1;
    char ldlibs[BP * 2];
    if (o.cuda && cuda_ldlibs(&rt, dir, ldlibs, sizeof ldlibs) != 0)
        return 1;
    char (*tmp)[BP + 64] = calloc((size_t)nstages, sizeof *tmp);
    if (!tmp) {
        fprintf(stderr, "pipegen build: out of memory\n");
        return 1;
    }
    int k;
    for (k = 0; k < nstages; k++) { /* each stage beside its place, then all renamed in */
        snprintf(tmp[k], sizeof tmp[k], "%s/stage%d.tmp.%ld", dir, k, (long)getpid());
        if (compile_stage(&rt, dir, k, tmp[k], o.cuda ? ldlibs : NULL) != 0)
            break;
    }
    for (int j = 0; j < nstages && k == nstages; j++) {
        char p[BP + 32];
        snprintf(p, sizeof p, "%s/stage%d", dir, j);
        if (rename(tmp[j], p) != 0) {
            fprintf(stderr, "pipegen build: cannot put %s in place: %s; build again\n", p, strerror(errno));
            k = -1;
        }
    }
    for (int j = 0; j < nstages && k != nstages; j++)
        unlink(tmp[j]);
    free(tmp);
    if (k != nstages)
        return 1;
    printf("built %d stage%s in %s/:", nstages, nstages == 1 ? "" : "s", dir);
    if (nstages > 4)
        printf(" stage0 .. stage%d", nstages - 1);
    else
        for (int j = 0; j < nstages; j++)
            printf("%s stage%d", j ? "," : "", j);
    printf(" (linked with %s); run them with: piperun %s\n", rt.lib, dir);
    remove_old_stages(dir, nstages);
    return 0;
}

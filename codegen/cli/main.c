/* codegen/cli/main.c — the pipegen command line: a table of subcommands. To add
 * one, declare `int cmd_NAME(int argc, char **argv)` in commands.h, write it in
 * codegen/cmd_NAME.c and add a row to `commands` below.
 * Exit status: 0 ok, 1 errors in the input, 2 usage errors. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include "cli/commands.h"
#include "base/progress.h"
#include "io_atomic.h"
#include "pg_version.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *usage;   /* one line: the arguments */
    const char *summary; /* one line: what it does */
    const char *help;    /* more, for `pipegen help NAME`; may be NULL */
    int hidden;          /* not listed by --help (debugging aids) */
} command;

static const command commands[] = {
    {"check", cmd_check, "check FILE", "check a .pipe model and print its stages",
     "Checks names, shapes, skips, ties, train settings and stages, builds and verifies\n"
     "the schedule (or reads it from its file) and lays out every stage's memory: what\n"
     "plan and gen check, no more and no less. On success prints the model, each\n"
     "stage's layers with output shapes and parameter counts, the skips that cross\n"
     "stages and the tied parameters. Errors go to stderr as file:line:col: error:\n"
     "message, with the source line and a caret.\n",
     0},
    {"schedule", cmd_schedule, "schedule FILE [--csv] [--svg OUT]", "print each stage's action list (or the schedule as CSV)",
     "Prints the placement (which chunks each stage runs: loop or v), then every stage's\n"
     "actions with their activation slots and the bubble for equal unit costs.\n"
     "--svg OUT also draws the predicted timeline (cost model of dsl/cost.h) as SVG.\n", 0},
    {"plan", cmd_plan, "plan FILE [--svg OUT] [--balance PROFILE] [--dp D]", "print each stage's memory plan: bytes per category and the arena",
     "Builds and verifies the schedule, plans one arena per stage and prints, per\n"
     "stage, the bytes of parameters, gradients, optimizer state, activations in\n"
     "flight, communication and skip buffers, workspace, and the arena total; then,\n"
     "for D = 1, 2, 4, 8 data-parallel replicas (or the D of --dp D), what one\n"
     "process of each stage holds (the arena and the gradient reduction's buffers and\n"
     "send rings) and sends per step, without and with the optimizer state sharded\n"
     "over the replicas (the stages' --zero 1: the z1 columns); then the splits and\n"
     "each stage's predicted\n"
     "compute, busy share and bubble. With\n"
     "`schedule = auto` it first prints every candidate (schedule, placement, split,\n"
     "arena per stage, predicted step and bubble, fits the memory budget or not) and\n"
     "the choice. --svg OUT draws the predicted timeline; --balance PROFILE splits\n"
     "`stages = N` (and times auto's candidates) by measured layer times\n"
     "({\"layers\": [{\"name\": ..., \"fwd_s\": ..., \"bwd_s\": ...}]}).\n",
     0},
    {"gen", cmd_gen, "gen FILE -o DIR [--balance PROFILE] [--guard-bytes N]",
     "generate the C of every stage, the header and plan.json into DIR",
     "Writes DIR/stage<k>.c for every stage, DIR/<model>.h documenting every buffer\n"
     "(STAGE<k>_ARENA_BYTES) and DIR/plan.json. Output is byte-stable. --guard-bytes N\n"
     "(a multiple of 64) leaves N free bytes before the first arena buffer and after\n"
     "each, which a runtime built with AddressSanitizer (make SAN=1) poisons: a kernel\n"
     "running past one tensor into the next is then reported. Another plan hash.\n",
     0},
    {"build", cmd_build, "build FILE -o DIR [--cuda] [--balance PROFILE] [--guard-bytes N]",
     "generate, compile and link every stage into DIR (DIR/stage<k>)",
     "Generates the model into DIR/c/ as gen does (all or nothing), then compiles and\n"
     "links every DIR/c/stage<k>.c into DIR/stage<k> against the runtime that came with\n"
     "this pipegen: the installed one (PREFIX/lib/pipegen, PREFIX/include/pipegen, from\n"
     "make install) or, for a pipegen in a checkout's build/, the checkout's. --cuda\n"
     "links the CUDA runtime instead (cuBLAS, NCCL and the CUDA runtime as found on this\n"
     "host). The compiler is $CC (default cc) with $CFLAGS (default -O2). DIR is the\n"
     "build's own folder: builds into two folders never overwrite each other; the\n"
     "stage binaries are replaced only when every stage compiled, and an older build's\n"
     "extra stages are removed. Run the result with: piperun DIR -- [stage options].\n",
     0},
    {"trace", cmd_trace, "trace RUN.json [FILE [--balance PROFILE]] [--svg OUT] [--step N]",
     "measured against predicted bubble and step time from a --trace file",
     "Reads the Chrome-trace JSON a run wrote with the stage option --trace RUN.json and\n"
     "prints the measured step time (mean over the traced steps, the run's first left\n"
     "out, of each step's span over every stage) and each stage's measured bubble (1 -\n"
     "its F/B/W time / the span). Given the model FILE it also prints what the\n"
     "schedule's simulation predicts, by the cost model or, with --balance PROFILE\n"
     "(a --profile file), by measured layer and message times. --svg OUT draws one\n"
     "measured step (--step N, default the last) like `pipegen plan --svg`.\n",
     0},
    {"import", cmd_import, "import hf DIR -o OUT [--stages N] [--seq T]",
     "a Hugging Face model folder (gpt2, llama) as a .pipe and its weights",
     "Reads DIR's config.json and model.safetensors (or its shards and their index) and\n"
     "writes OUT/<name>.pipe, the model in pipegen's layers (GPT-2's blocks, or Llama's:\n"
     "rmsnorm, grouped-query attention with rotary positions, swiglu), and\n"
     "OUT/<name>.safetensors, its weights in pipegen's names and layouts for --load.\n"
     "--stages N puts whole blocks on N stages (split lines); --seq T is the training\n"
     "window (default the model's positions, at most 256); --name NAME the model's name\n"
     "(default DIR's). Runs tools/hf.py in the Python of `tools/deps.sh hf` (or\n"
     "$PIPEGEN_PYTHON): transformers and safetensors read the checkpoint.\n",
     0},
    {"export", cmd_export, "export hf WEIGHTS MODEL.pipe -o DIR",
     "a trained model's weights as a Hugging Face model folder",
     "Writes DIR/config.json and DIR/model.safetensors that transformers'\n"
     "from_pretrained loads (GPT2LMHeadModel or LlamaForCausalLM), from a --save file\n"
     "of MODEL.pipe, a model whose layers are those `pipegen import hf` writes.\n",
     0},
    {"parse", cmd_parse, "parse FILE", "print the syntax tree (debugging)", NULL, 1},
};
#define NCOMMANDS ((int)(sizeof commands / sizeof commands[0]))

static const command *find_command(const char *name) {
    for (int i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static void print_usage(FILE *out) {
    fprintf(out, "usage: pipegen COMMAND [ARGS]\n\n"
                 "pipegen compiles a .pipe model into one C program per pipeline stage.\n\n"
                 "commands:\n");
    for (int i = 0; i < NCOMMANDS; i++)
        if (!commands[i].hidden) fprintf(out, "  %-24s %s\n", commands[i].usage, commands[i].summary);
    fprintf(out, "\n  pipegen help COMMAND     more about one command (or pipegen COMMAND --help)\n"
                 "  pipegen --version        print the version\n\n"
                 "On a terminal a run that lasts over a second shows its phases on stderr;\n"
                 "PIPEGEN_PROGRESS=1 always shows them, PIPEGEN_PROGRESS=0 never.\n"
                 "exit status: 0 ok, 1 errors in the input, 2 usage errors\n");
}

static int help_command(const char *name) {
    const command *c = find_command(name);
    if (!c) {
        fprintf(stderr, "pipegen: unknown command '%s' (see pipegen --help)\n", name);
        return 2;
    }
    printf("usage: pipegen %s\n\n%s\n", c->usage, c->summary);
    if (c->help) printf("\n%s", c->help);
    return 0;
}

int main(int argc, char **argv) {
    /* over ulimit -f a write fails with EFBIG, reported with the file's name
     * (or the standard output's), instead of SIGXFSZ killing pipegen silently */
    signal(SIGXFSZ, SIG_IGN);
    pg_progress_start();
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        print_usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("pipegen " PIPEGEN_VERSION "\n");
        return 0;
    }
    if (strcmp(cmd, "help") == 0) {
        if (argc == 2) {
            print_usage(stdout);
            return 0;
        }
        if (argc > 3) {
            fprintf(stderr, "usage: pipegen help COMMAND\n");
            return 2;
        }
        return help_command(argv[2]);
    }
    if (cmd[0] == '-') {
        fprintf(stderr, "pipegen: unknown option '%s' (see pipegen --help)\n", cmd);
        return 2;
    }
    const command *c = find_command(cmd);
    if (!c) {
        fprintf(stderr, "pipegen: unknown command '%s' (see pipegen --help)\n", cmd);
        return 2;
    }
    for (int i = 2; i < argc; i++) /* `pipegen gen --help`: that command's help, whatever else is given */
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return help_command(cmd);
    int rc = c->run(argc - 1, argv + 1);
    /* `pipegen schedule --csv > file` on a full disk: a truncated file must not exit 0 */
    if (pg_io_stdout_done("pipegen") != 0 && rc == 0)
        rc = 1;
    return rc;
}

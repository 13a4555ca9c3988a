/* codegen/cli/commands.h — pipegen's subcommands, dispatched by codegen/cli/main.c.
 * Each takes the arguments from the subcommand name on (argv[0] is "parse"
 * for `pipegen parse FILE`) and returns the exit status: 0 ok, 1 errors in
 * the input, 2 usage errors. */
#ifndef PG_COMMANDS_H
#define PG_COMMANDS_H

/* `pipegen check FILE`: check the model and print its stages, or the errors. */
int cmd_check(int argc, char **argv);
/* `pipegen parse FILE` (hidden): print the syntax tree, or the syntax errors. */
int cmd_parse(int argc, char **argv);
/* `pipegen schedule FILE [--csv]`: each stage's action list, or the schedule as CSV. */
int cmd_schedule(int argc, char **argv);
/* `pipegen plan FILE`: bytes per stage in each memory category and the arena total. */
int cmd_plan(int argc, char **argv);
/* `pipegen gen FILE -o DIR`: stage<k>.c per stage, <model>.h and plan.json. */
int cmd_gen(int argc, char **argv);
/* `pipegen build FILE -o DIR [--cuda]`: gen into DIR/c, then every stage compiled into DIR/stage<k>. */
int cmd_build(int argc, char **argv);
/* `pipegen trace RUN.json [MODEL.pipe]`: measured against predicted bubble and step; --svg. */
int cmd_trace(int argc, char **argv);
/* `pipegen import hf DIR -o OUT` / `pipegen export hf WEIGHTS MODEL.pipe -o DIR` (cmd_hf.c). */
int cmd_import(int argc, char **argv);
int cmd_export(int argc, char **argv);

#endif

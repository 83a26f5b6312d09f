/*
 * cli/commands.h — the `clef` subcommands, one file each (cli/cmd_NAME.c).
 * Each takes the arguments after its name (argv[0] is the subcommand) and
 * returns the process exit status.  They use only the public API (clef.h).
 */
#ifndef CLEF_CLI_COMMANDS_H
#define CLEF_CLI_COMMANDS_H

int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_forward(int argc, char **argv);
int cmd_decide(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_synth(int argc, char **argv);

#endif

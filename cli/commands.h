/* commands.h — the commands of qkv, one per cli/cmd_<name>.c. */
#ifndef QKV_CLI_COMMANDS_H
#define QKV_CLI_COMMANDS_H


int cmd_attend(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_explain(int argc, char **argv);
int cmd_scaling(int argc, char **argv);
int cmd_cost(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_sinks(int argc, char **argv);
int cmd_ablate(int argc, char **argv);
int cmd_stream(int argc, char **argv);
int cmd_needle(int argc, char **argv);
int cmd_patch(int argc, char **argv);
int cmd_attribute(int argc, char **argv);
int cmd_lens(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif /* QKV_CLI_COMMANDS_H */

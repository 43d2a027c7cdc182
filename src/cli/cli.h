/* The CLI's verbs. Each takes the arguments after the verb and returns the process exit status:
 * 0 success, 1 failure (message on stderr), 2 usage error. */
#ifndef SG_CLI_H
#define SG_CLI_H

int sg_cli_doctor(int argc, char **argv);
int sg_cli_inspect(int argc, char **argv);
int sg_cli_eval(int argc, char **argv);
int sg_cli_bench(int argc, char **argv);
int sg_cli_pull(int argc, char **argv);
int sg_cli_list(int argc, char **argv);
int sg_cli_rm(int argc, char **argv);
int sg_cli_serve(int argc, char **argv);
int sg_cli_tokenize(int argc, char **argv);
int sg_cli_detokenize(int argc, char **argv);
int sg_cli_template(int argc, char **argv);
int sg_cli_run(int argc, char **argv);
int sg_cli_generate(int argc, char **argv);
int sg_cli_embed(int argc, char **argv);
int sg_cli_transcribe(int argc, char **argv);
int sg_cli_rerank(int argc, char **argv);
int sg_cli_speak(int argc, char **argv);

/* Prints "saragossa: <msg>" and the one-line usage of `verb` on stderr; returns 2. */
int sg_cli_usage_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

/* saragossa: command-line entry point. Dispatches to one function per verb (src/cli/<verb>.c). */
#include "cli/cli.h"
#include "saragossa.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct verb {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *usage;   /* arguments, for the one-line usage */
	const char *summary; /* one line for `help` */
} verb;

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const verb verbs[] = {
	{"help", cmd_help, "[VERB]", "show this help, or one verb's usage"},
	{"version", cmd_version, "", "print the version and build flags"},
	{"run", sg_cli_run, "[MODEL] [--system TEXT] [--temperature T] [--max-tokens N] ...", "chat with a model (the default model when none is named)"},
	{"generate", sg_cli_generate, "[--model M] --prompt TEXT [--system TEXT] [--chat] [--max-tokens N] [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S] [--stop STR]... [--metrics] [--json]", "generate one answer to a prompt, for scripts"},
	{"doctor", sg_cli_doctor, "", "report the machine, the build and every runtime flag"},
	{"eval", sg_cli_eval, "--model M --tokens I,J,K [--logits-out FILE] [--greedy N] [--backend cpu|cuda] [--threads N] [--chunk N] [--ctx N] [--kv f32|f16]", "run token ids through a model: logits of every position, greedy continuation"},
	{"bench", sg_cli_bench, "[--model M] [-p 512] [-n 128] [-d 0] [-r 5] [--threads N] [--chunk N] [--backend cpu|cuda] [--verify K] [--ctx N] [--expert-cache C]", "measure prompt (pp) and decode (tg) speed like llama-bench"},
	{"inspect", sg_cli_inspect, "PATH [--tensors] [--dump TENSOR --out FILE]", "show a model's format, architecture, tensors and memory needs"},
	{"pull", sg_cli_pull, "[-q] MODEL", "download a model from the Hugging Face hub and print its local path"},
	{"list", sg_cli_list, "[--json]", "list the models on this machine (Hugging Face cache, saragossa's folder)"},
	{"serve", sg_cli_serve, "[--socket PATH] [--port N --api-key KEY] --model NAME=MODEL ...", "serve the OpenAI and Ollama APIs over a Unix socket or loopback TCP"},
	{"rm", sg_cli_rm, "MODEL...", "remove models from the Hugging Face cache or saragossa's folder"},
	{"embed", sg_cli_embed, "[-m MODEL] [--format json|jsonl|npy] [--dimensions N] [--truncate] [TEXT... | -f FILE]", "embed texts (or stdin lines) with an encoder model: one vector per input"},
	{"rerank", sg_cli_rerank, "-m MODEL --query Q [--top-n N] [--format text|json] DOC...", "score documents against a query with a cross-encoder, best first"},
	{"transcribe", sg_cli_transcribe, "FILE... [-m MODEL] [--language xx] [--task transcribe|translate] [--format text|json|verbose_json|srt|vtt] [--word-timestamps] [--beam N] [--temperature T] [--prompt P] [--pcm-rate R]", "speech to text with a Whisper model (FILE '-' reads stdin)"},
	{"speak", sg_cli_speak, "[-m MODEL] [--voice NAME] [--speed X] [-o out.wav | --play] [--format wav|pcm|f32] TEXT...|-", "text to speech with a voice model (a Piper voice; TEXT '-' reads stdin)"},
	{"tokenize", sg_cli_tokenize, "--model M [--no-special] [--batch [--threads N]] [--time]", "text on stdin -> token ids"},
	{"detokenize", sg_cli_detokenize, "--model M [--skip-special] [--stream] [--batch] [--time]", "token ids on stdin -> text"},
	{"template", sg_cli_template, "--model M --messages FILE.json [--tools FILE] [--add-generation-prompt] [--var NAME=JSON]...", "render a chat template (prints the prompt)"},
};
#define N_VERBS ((int)(sizeof(verbs) / sizeof(verbs[0])))

static const verb *find_verb(const char *name)
{
	for (int i = 0; i < N_VERBS; i++)
		if (!strcmp(verbs[i].name, name)) return &verbs[i];
	return NULL;
}

int sg_cli_usage_error(const char *verb_name, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "saragossa: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	const verb *v = verb_name ? find_verb(verb_name) : NULL;
	if (v) fprintf(stderr, "usage: saragossa %s %s\n", v->name, v->usage);
	else fprintf(stderr, "usage: saragossa <verb> [options]   (saragossa help lists the verbs)\n");
	return 2;
}

static void print_help(FILE *f)
{
	fprintf(f, "saragossa %s: local inference engine\n\nusage: saragossa <verb> [options]\n\nverbs:\n",
		sg_version());
	for (int i = 0; i < N_VERBS; i++) fprintf(f, "  %-10s %s\n", verbs[i].name, verbs[i].summary);
	fprintf(f, "\nsaragossa help VERB shows a verb's usage; saragossa --version the version.\n");
}

static int cmd_help(int argc, char **argv)
{
	if (argc > 1) return sg_cli_usage_error("help", "help takes at most one verb");
	if (argc == 1) {
		const verb *v = find_verb(argv[0]);
		if (!v) return sg_cli_usage_error(NULL, "unknown verb '%s'", argv[0]);
		printf("usage: saragossa %s %s\n  %s\n", v->name, v->usage, v->summary);
		return 0;
	}
	print_help(stdout);
	return 0;
}

static int cmd_version(int argc, char **argv)
{
	if (argc) return sg_cli_usage_error("version", "unexpected argument '%s'", argv[0]);
	printf("saragossa %s (%s)\n", sg_version(), SG_BUILD_FLAGS);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		print_help(stderr);
		return 2;
	}
	const char *a = argv[1];
	if (!strcmp(a, "--version") || !strcmp(a, "-V")) return cmd_version(argc - 2, argv + 2);
	if (!strcmp(a, "--help") || !strcmp(a, "-h")) return cmd_help(argc - 2, argv + 2);
	if (a[0] == '-') return sg_cli_usage_error(NULL, "unknown option '%s'", a);
	const verb *v = find_verb(a);
	if (!v) return sg_cli_usage_error(NULL, "unknown verb '%s'", a);
	return v->fn(argc - 2, argv + 2);
}

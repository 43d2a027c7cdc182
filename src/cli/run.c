/*
 * saragossa run [MODEL]: chat with a model.
 *
 * On a terminal: a prompt with line editing and history (libedit), the answer streamed as it is
 * generated, the model's chat template, and commands: /clear, /system TEXT, /set NAME VALUE,
 * /set (show), /bye, /?. Ctrl-C during an answer stops it and returns to the prompt (the partial
 * answer stays in the conversation); Ctrl-C at the prompt drops the line, a second one in a row
 * exits; Ctrl-D exits. Every turn sends the whole conversation to the engine, which keeps the KV
 * cache of the turns before and prefills only the new tokens; a conversation that starts over
 * (/clear, /system) restores the blocks of an earlier one it shares a prefix with from the
 * engine's prefix cache, as the server does.
 *
 * With stdin not a terminal: all of stdin is one prompt; the answer is printed and run exits.
 */
#include <editline/readline.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/timer.h"
#include "cli/cli.h"
#include "cli/lm_cli.h"
#include "hub/repo.h"
#include "saragossa.h"

/* An answer's cap unless --max-tokens or /set max_tokens says otherwise: a few hundred tokens hold
 * an answer to a question (a chat model ends its turn well before), and a model that loops stops
 * after seconds on a CPU, not minutes. */
#define RUN_MAX_TOKENS 512
#define RUN_STR_(x) #x
#define RUN_STR(x) RUN_STR_(x)

#define RUN_USAGE                                                                                                    \
	"usage: saragossa run [MODEL] [options]\n"                                                                    \
	"  chat with MODEL: a folder, a .gguf, a Hugging Face repo id (downloaded when missing) or a name in\n"      \
	"  saragossa's models folder (default: SARAGOSSA_DEFAULT_MODEL, else " SG_CLI_DEFAULT_MODEL_NAME ")\n"                      \
	"  --system TEXT      system message\n"                                                                       \
	"  --max-tokens N     tokens per answer at most (default " RUN_STR(RUN_MAX_TOKENS) "; 0 = until the context is full)\n"                        \
	"  --temperature T, --top-p P, --top-k K, --min-p P, --repeat-penalty R, --seed S   sampling\n"             \
	"  --ctx N            context length (default: the model's, at most 4096)\n"                                  \
	"  --threads N        CPU threads\n"                                                                          \
	"  --backend B        cpu, cuda or auto (default: SARAGOSSA_BACKEND, auto: the GPU when one\n"                                                                          \
	"                     takes the model, else the CPU)\n"                                                                          \
	"  --verbose          print the metrics of every answer on stderr\n"                                          \
	"  --expert-cache C   MoE: routed experts read from disk into a slot cache: off (default), auto, 6g, 25%\n"   \
	SG_CLI_SPEC_USAGE                                                                                             \
	"  stdin not a terminal: all of it is one prompt, answered once\n"

static const char HELP[] = "commands:\n"
			   "  /clear              forget the conversation (the system message stays)\n"
			   "  /system TEXT        set the system message (and start over)\n"
			   "  /set                show the sampling parameters\n"
			   "  /set NAME VALUE     temperature, top_p, top_k, min_p, repeat_penalty, seed, max_tokens\n"
			   "  /bye                exit (also Ctrl-D)\n"
			   "  /?                  this help\n"
			   "Ctrl-C stops an answer; at the prompt, twice in a row, it exits.\n";

typedef struct chat {
	sg_lm *lm;
	json_t *messages; /* the conversation: [{role, content}] */
	char *system;     /* heap, or NULL */
	sg_sampler_params sp;
	long max_tokens; /* 0 = what the context leaves */
	int verbose;
	int interactive;
	atomic_int cancel;
	char *answer; /* [len] the answer being generated */
	size_t len, cap;
	int at_line_start;
	sg_cli_spec spec; /* speculative decoding */
} chat;

static int on_event(const sg_gen_event *ev, void *user)
{
	chat *c = user;
	if (!ev->len) return 0;
	const char *t = ev->text;
	size_t n = ev->len;
	/* An answer opens with a newline or spaces more often than not: not worth a blank line. */
	if (c->len == 0)
		while (n && (*t == '\n' || *t == ' ')) t++, n--;
	if (!n) return 0;
	fwrite(t, 1, n, stdout);
	fflush(stdout);
	c->at_line_start = t[n - 1] == '\n';
	if (c->len + n + 1 > c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 1024;
		while (cap < c->len + n + 1) cap *= 2;
		char *a = sg_realloc(c->answer, cap);
		if (!a) return 1;
		c->answer = a;
		c->cap = cap;
	}
	memcpy(c->answer + c->len, t, n);
	c->len += n;
	c->answer[c->len] = 0;
	return 0;
}

static int add_message(json_t *msgs, const char *role, const char *content)
{
	json_t *m = json_pack("{s:s, s:s}", "role", role, "content", content);
	return !m || json_array_append_new(msgs, m);
}

/* Starts the conversation over: only the system message, if any. */
static void reset_messages(chat *c)
{
	json_array_clear(c->messages);
	if (c->system) add_message(c->messages, "system", c->system);
}

/* One turn: the user's text in, the answer streamed out and kept in the conversation. Returns 0,
 * or 1 when the turn failed (the message is printed; the conversation is as it was). */
static int turn(chat *c, const char *text)
{
	if (add_message(c->messages, "user", text)) {
		fprintf(stderr, "saragossa run: out of memory\n");
		return 1;
	}
	char *prompt = NULL;
	size_t plen = 0, n_ids = 0;
	int32_t *ids = NULL;
	sg_status st = sg_lm_chat_prompt(c->lm, c->messages, NULL, &prompt, &plen);
	if (!st) st = sg_lm_tokenize(c->lm, prompt, plen, 0, &ids, &n_ids);
	sg_free(prompt);
	if (st) goto fail;
	int32_t n_ctx = sg_lm_n_ctx(c->lm);
	if (n_ids + 1 >= (size_t)n_ctx) {
		sg_error(SG_ERR_RANGE, "the conversation (%zu tokens) fills the context (%d): /clear starts over", n_ids,
			 n_ctx);
		st = SG_ERR_RANGE;
		goto fail;
	}
	sg_gen_params gp = sg_gen_default_params();
	gp.prompt = ids;
	gp.n_prompt = n_ids;
	gp.sampler = c->sp;
	gp.eos_ids = sg_lm_eos(c->lm, &gp.n_eos);
	long room = n_ctx - (long)n_ids;
	gp.max_tokens = (int32_t)(c->max_tokens && c->max_tokens < room ? c->max_tokens : room);
	gp.cancel = &c->cancel;
	gp.on_event = on_event;
	gp.user = c;
	sg_cli_spec_apply(&c->spec, &gp);
	c->len = 0;
	c->at_line_start = 1;
	/* no reset of c->cancel here: the prompt loop clears it before reading the line, and a
	 * Ctrl-C typed while the prompt is templated and tokenized must stop this answer */
	double t0 = sg_time_s();
	sg_gen_result res;
	/* the conversation goes on: the engine keeps what the live state holds of it */
	sg_lm_turn lt = {.continues = 1};
	st = sg_lm_generate(c->lm, &lt, &gp, &res);
	double t1 = sg_time_s();
	sg_free(ids);
	ids = NULL;
	if (!c->at_line_start) fputc('\n', stdout);
	fflush(stdout);
	if (st) goto fail;
	if (res.finish == SG_GEN_CANCELLED && c->interactive) fprintf(stderr, "[stopped]\n");
	if (res.finish == SG_GEN_LENGTH && !c->max_tokens) fprintf(stderr, "[the context is full: /clear starts over]\n");
	/* The answer so far stays in the conversation, so the next turn continues from what the
	 * model holds. */
	if (add_message(c->messages, "assistant", c->answer ? c->answer : "")) {
		fprintf(stderr, "saragossa run: out of memory\n");
		return 1;
	}
	if (c->verbose) {
		sg_cli_metrics m;
		sg_cli_metrics_from(&res, 0, t1 - t0, &m);
		sg_cli_metrics_print(stderr, &m);
	}
	return 0;
fail:
	sg_free(ids);
	fprintf(stderr, "saragossa run: %s\n", sg_last_error());
	json_array_remove(c->messages, json_array_size(c->messages) - 1);
	return 1;
}

static void show_params(const chat *c)
{
	printf("temperature %g, top_p %g, top_k %d, min_p %g, repeat_penalty %g, seed %s, max_tokens ",
	       c->sp.temperature, c->sp.top_p, c->sp.top_k, c->sp.min_p, c->sp.repetition_penalty,
	       c->sp.seed == SG_SAMPLER_SEED_RANDOM ? "random" : "set");
	if (c->max_tokens) printf("%ld\n", c->max_tokens);
	else printf("auto\n");
}

/* A line that starts with '/'. Returns 1 to exit. */
static int command(chat *c, char *line)
{
	char *cmd = line, *arg = line;
	while (*arg && *arg != ' ' && *arg != '\t') arg++;
	if (*arg) *arg++ = 0;
	while (*arg == ' ' || *arg == '\t') arg++;
	if (!strcmp(cmd, "/bye") || !strcmp(cmd, "/exit") || !strcmp(cmd, "/quit")) return 1;
	if (!strcmp(cmd, "/?") || !strcmp(cmd, "/help")) {
		fputs(HELP, stdout);
	} else if (!strcmp(cmd, "/clear")) {
		reset_messages(c);
		printf("Cleared the conversation.\n");
	} else if (!strcmp(cmd, "/system")) {
		sg_free(c->system);
		c->system = NULL;
		if (*arg) {
			size_t n = strlen(arg);
			if ((c->system = sg_malloc(n + 1))) memcpy(c->system, arg, n + 1);
		}
		reset_messages(c);
		printf(*arg ? "Set the system message (the conversation starts over).\n"
			    : "Removed the system message (the conversation starts over).\n");
	} else if (!strcmp(cmd, "/set")) {
		if (!*arg) {
			show_params(c);
			return 0;
		}
		char *name = arg, *val = arg;
		while (*val && *val != ' ' && *val != '\t') val++;
		if (*val) *val++ = 0;
		while (*val == ' ' || *val == '\t') val++;
		char *end = val + strlen(val);
		while (end > val && (end[-1] == ' ' || end[-1] == '\t')) *--end = 0;
		char err[160];
		sg_sampler_params sp = c->sp;
		int rc = sg_cli_sampler_opt(name, val, &sp, err, sizeof err);
		if (rc == 1 && (!strcmp(name, "max_tokens") || !strcmp(name, "max-tokens"))) {
			long v;
			if (sg_cli_parse_int(val, 0, 1 << 24, &v)) {
				printf("max_tokens wants an integer >= 0 (0 = what the context leaves), got '%s'\n", val);
				return 0;
			}
			c->max_tokens = v;
		} else if (rc == 1) {
			printf("unknown parameter '%s' (temperature, top_p, top_k, min_p, repeat_penalty, seed, max_tokens)\n",
			       name);
			return 0;
		} else if (rc == 2) {
			printf("%s\n", err);
			return 0;
		} else {
			c->sp = sp;
		}
		printf("Set %s to %s.\n", name, val);
	} else {
		printf("unknown command '%s' (/? lists them)\n", cmd);
	}
	return 0;
}

static char *read_all_stdin(void)
{
	size_t cap = 4096, n = 0;
	char *buf = sg_malloc(cap);
	while (buf) {
		if (n + 1 == cap) {
			char *b = sg_realloc(buf, cap * 2);
			if (!b) break;
			buf = b;
			cap *= 2;
		}
		size_t r = fread(buf + n, 1, cap - 1 - n, stdin);
		n += r;
		if (r == 0) {
			buf[n] = 0;
			return buf;
		}
	}
	sg_free(buf);
	return NULL;
}

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
	char *e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) *--e = 0;
	return s;
}

/* rl_getc_function: returns EOF on Ctrl-C so readline hands back control (libedit would retry
 * the read otherwise); the SIGINT counter tells Ctrl-C from Ctrl-D. */
static int getc_fn(FILE *f)
{
	unsigned char ch;
	int n = sg_cli_read_byte(fileno(f), &ch);
	return n == 1 ? ch : EOF;
}

static int interactive_loop(chat *c, const char *path)
{
	fprintf(stderr, "saragossa run: %s (%s, context %d). /? for help, /bye or Ctrl-D to exit.\n", path,
		sg_model_arch(sg_lm_model(c->lm)), sg_lm_n_ctx(c->lm));
	rl_catch_signals = 0;
	rl_getc_function = getc_fn;
	using_history();
	int ctrl_c = 0;
	for (;;) {
		sg_cli_sigint_install(&c->cancel);
		atomic_store(&c->cancel, 0);
		sg_cli_sigint_take();
		char *line = readline(">>> ");
		if (!line) {
			if (atomic_load(&c->cancel)) { /* Ctrl-C at the prompt */
				if (++ctrl_c >= 2) {
					printf("\n");
					return 0;
				}
				printf("\n(Ctrl-C again, Ctrl-D or /bye exits)\n");
				continue;
			}
			printf("\n");
			return 0;
		}
		ctrl_c = 0;
		char *text = trim(line);
		if (!*text) {
			free(line);
			continue;
		}
		add_history(text);
		if (text[0] == '/') {
			int quit = command(c, text);
			free(line);
			if (quit) return 0;
			continue;
		}
		turn(c, text);
		free(line);
	}
}

int sg_cli_run(int argc, char **argv)
{
	const char *model = NULL, *system = NULL;
	long max_tokens = RUN_MAX_TOKENS, n_ctx = 0, threads = 0;
	const char *backend = NULL;
	int verbose = 0;
	sg_sampler_params sp = sg_sampler_default_params();
	sg_cli_spec spec;
	sg_cli_spec_init(&spec);
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(RUN_USAGE, stdout);
			return 0;
		}
		if (!strcmp(a, "--verbose")) {
			verbose = 1;
			continue;
		}
		if (a[0] != '-') {
			if (model) return sg_cli_usage_error("run", "run takes one MODEL (got '%s' and '%s')", model, a);
			model = a;
			continue;
		}
		if (!v) return sg_cli_usage_error("run", "%s needs a value", a);
		i++;
		char err[160];
		int rc = sg_cli_sampler_opt(a, v, &sp, err, sizeof err);
		if (rc == 2) return sg_cli_usage_error("run", "%s", err);
		if (rc == 0) continue;
		if ((rc = sg_cli_spec_opt(a, v, &spec, err, sizeof err)) == 2) return sg_cli_usage_error("run", "%s", err);
		if (rc == 0) continue;
		if (!strcmp(a, "--system")) system = v;
		else if (!strcmp(a, "--max-tokens") || !strcmp(a, "-n")) {
			if (sg_cli_parse_int(v, 0, 1 << 24, &max_tokens))
				return sg_cli_usage_error("run", "--max-tokens wants an integer >= 0, got '%s'", v);
		} else if (!strcmp(a, "--ctx")) {
			if (sg_cli_parse_int(v, 1, 1 << 24, &n_ctx))
				return sg_cli_usage_error("run", "--ctx wants an integer >= 1, got '%s'", v);
		} else if (!strcmp(a, "--backend")) {
			if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "auto"))
				return sg_cli_usage_error("run", "--backend wants cpu, cuda or auto, got '%s'", v);
			backend = v;
		} else if (!strcmp(a, "--expert-cache")) {
			if (sg_cli_expert_cache_opt("run", v)) return 2;
		} else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
			if (sg_cli_parse_int(v, 0, 4096, &threads))
				return sg_cli_usage_error("run", "--threads wants an integer >= 0, got '%s'", v);
		} else {
			return sg_cli_usage_error("run", "unknown option '%s'", a);
		}
	}

	chat c = {.sp = sp, .max_tokens = max_tokens, .verbose = verbose, .interactive = isatty(STDIN_FILENO), .spec = spec};
	char path[SG_HUB_PATH_MAX];
	char *input = NULL;
	int rc = 1;
	if (!c.interactive) {
		/* Read the prompt first: a pipe that brings nothing costs no model load. */
		if (!(input = read_all_stdin())) {
			fprintf(stderr, "saragossa run: cannot read the prompt from stdin\n");
			return 1;
		}
	}
	/* the prefix cache serves a chat's later conversations; a piped prompt is answered once */
	if (sg_cli_load_lm("run", model, (int32_t)n_ctx, (int)threads, backend, c.interactive, &c.lm, path, sizeof path))
		goto done;
	if (sg_cli_spec_start("run", &c.spec, c.lm, (int)threads, backend)) goto done;
	if (!sg_lm_has_template(c.lm)) {
		fprintf(stderr, "saragossa run: %s has no chat template; `saragossa generate --prompt TEXT` continues raw text\n",
			path);
		goto done;
	}
	if (system) {
		size_t n = strlen(system);
		if (!(c.system = sg_malloc(n + 1))) goto done;
		memcpy(c.system, system, n + 1);
	}
	if (!(c.messages = json_array())) goto done;
	reset_messages(&c);
	sg_cli_sigint_install(&c.cancel);
	if (c.interactive) {
		rc = interactive_loop(&c, path);
	} else {
		char *text = trim(input);
		if (!*text) {
			fprintf(stderr, "saragossa run: stdin held no prompt\n");
			goto done;
		}
		rc = turn(&c, text);
	}
done:
	sg_free(input);
	sg_free(c.answer);
	sg_free(c.system);
	json_decref(c.messages);
	sg_cli_spec_free(&c.spec);
	sg_lm_free(c.lm);
	return rc;
}

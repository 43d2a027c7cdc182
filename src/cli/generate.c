/*
 * saragossa generate: one prompt, one answer, for scripts.
 *
 * Without --chat the prompt is raw text (BOS added as the tokenizer says) and the model continues
 * it; with --chat (or --system) it becomes a user message rendered with the model's chat
 * template. The answer streams to stdout as it is generated (ending with a newline); --json
 * prints one JSON object instead, with the text, the finish reason and the metrics. --metrics
 * prints the metrics on stderr. Ctrl-C stops the answer and keeps what was generated.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/timer.h"
#include "cli/cli.h"
#include "cli/lm_cli.h"
#include "hub/repo.h"
#include "saragossa.h"

#define USAGE_TAIL                                                                                                   \
	"  --model M          a folder, a .gguf, a Hugging Face repo id or a name in saragossa's models folder\n"      \
	"                     (default: SARAGOSSA_DEFAULT_MODEL, else " SG_CLI_DEFAULT_MODEL_NAME ")\n"                             \
	"  --prompt TEXT      the prompt ('-' reads it from stdin)\n"                                                 \
	"  --system TEXT      a system message (implies --chat)\n"                                                    \
	"  --chat             render the prompt as a user message with the model's chat template\n"                  \
	"  --max-tokens N     tokens to generate at most (default 256)\n"                                             \
	"  --temperature T    0 = greedy (default 0.8)\n"                                                             \
	"  --top-p P          nucleus sampling, (0, 1] (default 0.95)\n"                                              \
	"  --top-k K          keep the K most likely tokens, 0 = off (default 40)\n"                                  \
	"  --min-p P          drop tokens below P x the most likely one's probability (default 0.05)\n"               \
	"  --repeat-penalty R repetition penalty, 1 = off (default 1)\n"                                              \
	"  --seed S           sampler seed (same seed, same text)\n"                                                  \
	"  --stop STR         stop before STR (repeatable)\n"                                                         \
	"  --ctx N            context length (default: the model's, at most 4096)\n"                                  \
	"  --threads N        CPU threads (default: SARAGOSSA_THREADS, else one per core)\n"                          \
	"  --backend B        cpu, cuda or auto (default: SARAGOSSA_BACKEND, auto: the GPU when one\n"                          \
	"                     takes the model, else the CPU)\n"                          \
	"  --metrics          print prompt tokens, prefill tok/s, time to first token, decode tok/s,\n"               \
	"                     total time and peak memory on stderr\n"                                                 \
	"  --json             print one JSON object: text, finish_reason, seed, metrics\n"                       \
	"  --expert-cache C   MoE: routed experts read from disk into a slot cache: off (default), auto\n"         \
	"                     (the planner's size when the model does not fit), a size (6g) or a share (25%%)\n"   \
	SG_CLI_SPEC_USAGE

typedef struct out_ctx {
	int json;
	char *text; /* [len] collected answer (for --json) */
	size_t len, cap;
	int failed;
} out_ctx;

static int on_event(const sg_gen_event *ev, void *user)
{
	out_ctx *o = user;
	if (!ev->len) return 0;
	if (!o->json) {
		fwrite(ev->text, 1, ev->len, stdout);
		fflush(stdout);
		return 0;
	}
	if (o->len + ev->len + 1 > o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 1024;
		while (cap < o->len + ev->len + 1) cap *= 2;
		char *t = sg_realloc(o->text, cap);
		if (!t) {
			o->failed = 1;
			return 1;
		}
		o->text = t;
		o->cap = cap;
	}
	memcpy(o->text + o->len, ev->text, ev->len);
	o->len += ev->len;
	o->text[o->len] = 0;
	return 0;
}

/* All of stdin as a string (heap); NULL when it cannot be read. */
static char *read_stdin(void)
{
	size_t cap = 4096, n = 0;
	char *buf = sg_malloc(cap);
	if (!buf) return NULL;
	for (;;) {
		if (n + 1 == cap) {
			char *b = sg_realloc(buf, cap * 2);
			if (!b) {
				sg_free(buf);
				return NULL;
			}
			buf = b;
			cap *= 2;
		}
		size_t r = fread(buf + n, 1, cap - 1 - n, stdin);
		n += r;
		if (r == 0) break;
	}
	buf[n] = 0;
	return buf;
}

int sg_cli_generate(int argc, char **argv)
{
	const char *model = NULL, *prompt = NULL, *system = NULL;
	const char *stops[SG_STOP_MAX_STRINGS];
	size_t n_stop = 0;
	int chat = 0, metrics = 0, json = 0;
	long max_tokens = 256, n_ctx = 0, threads = 0;
	const char *backend = NULL;
	sg_sampler_params sp = sg_sampler_default_params();
	sg_cli_spec spec;
	sg_cli_spec_init(&spec);
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: saragossa generate [--model M] --prompt TEXT [options]\n"
			       "  generate one answer and print it\n" USAGE_TAIL);
			return 0;
		}
		if (!strcmp(a, "--chat")) {
			chat = 1;
			continue;
		}
		if (!strcmp(a, "--metrics")) {
			metrics = 1;
			continue;
		}
		if (!strcmp(a, "--json")) {
			json = 1;
			continue;
		}
		if (a[0] != '-' || !a[1]) return sg_cli_usage_error("generate", "unexpected argument '%s'", a);
		if (!v) return sg_cli_usage_error("generate", "%s needs a value", a);
		i++;
		char err[160];
		int rc = sg_cli_sampler_opt(a, v, &sp, err, sizeof err);
		if (rc == 2) return sg_cli_usage_error("generate", "%s", err);
		if (rc == 0) continue;
		if ((rc = sg_cli_spec_opt(a, v, &spec, err, sizeof err)) == 2) return sg_cli_usage_error("generate", "%s", err);
		if (rc == 0) continue;
		if (!strcmp(a, "--model") || !strcmp(a, "-m")) model = v;
		else if (!strcmp(a, "--prompt") || !strcmp(a, "-p")) prompt = v;
		else if (!strcmp(a, "--system")) system = v, chat = 1;
		else if (!strcmp(a, "--max-tokens") || !strcmp(a, "-n")) {
			if (sg_cli_parse_int(v, 1, 1 << 24, &max_tokens))
				return sg_cli_usage_error("generate", "--max-tokens wants an integer >= 1, got '%s'", v);
		} else if (!strcmp(a, "--ctx")) {
			if (sg_cli_parse_int(v, 1, 1 << 24, &n_ctx))
				return sg_cli_usage_error("generate", "--ctx wants an integer >= 1, got '%s'", v);
		} else if (!strcmp(a, "--backend")) {
			if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "auto"))
				return sg_cli_usage_error("generate", "--backend wants cpu, cuda or auto, got '%s'", v);
			backend = v;
		} else if (!strcmp(a, "--expert-cache")) {
			if (sg_cli_expert_cache_opt("generate", v)) return 2;
		} else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
			if (sg_cli_parse_int(v, 0, 4096, &threads))
				return sg_cli_usage_error("generate", "--threads wants an integer >= 0, got '%s'", v);
		} else if (!strcmp(a, "--stop")) {
			if (!v[0]) return sg_cli_usage_error("generate", "--stop wants a non-empty string");
			if (n_stop == SG_STOP_MAX_STRINGS)
				return sg_cli_usage_error("generate", "at most %d --stop strings", SG_STOP_MAX_STRINGS);
			stops[n_stop++] = v;
		} else {
			return sg_cli_usage_error("generate", "unknown option '%s'", a);
		}
	}
	if (!prompt) return sg_cli_usage_error("generate", "--prompt is required");

	double t0 = sg_time_s();
	char *stdin_text = NULL;
	if (!strcmp(prompt, "-")) {
		if (!(stdin_text = read_stdin())) {
			fprintf(stderr, "saragossa generate: cannot read the prompt from stdin\n");
			return 1;
		}
		prompt = stdin_text;
	}
	int rc = 1;
	sg_lm *lm = NULL;
	char *templated = NULL;
	int32_t *ids = NULL;
	size_t n_ids = 0;
	out_ctx o = {.json = json};
	json_t *messages = NULL;
	char path[SG_HUB_PATH_MAX];
	/* one answer per process: no later turn could read a prefix-cache block */
	if (sg_cli_load_lm("generate", model, (int32_t)n_ctx, (int)threads, backend, 0, &lm, path, sizeof path)) goto done;
	if (sg_cli_spec_start("generate", &spec, lm, (int)threads, backend)) goto done;
	double t_loaded = sg_time_s();
	sg_status st;
	if (chat) {
		if (!sg_lm_has_template(lm)) {
			fprintf(stderr, "saragossa generate: %s has no chat template; drop --chat/--system to continue raw text\n",
				path);
			goto done;
		}
		messages = json_array();
		if (system) json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "system", "content", system));
		json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "user", "content", prompt));
		size_t tl;
		if ((st = sg_lm_chat_prompt(lm, messages, NULL, &templated, &tl)) ||
		    (st = sg_lm_tokenize(lm, templated, tl, 0, &ids, &n_ids)))
			goto fail;
	} else if ((st = sg_lm_tokenize(lm, prompt, strlen(prompt), 1, &ids, &n_ids))) {
		goto fail;
	}

	/* A seed the user can pass back with --seed to get the same text (53 bits: exact in JSON
	 * numbers everywhere). */
	if (sp.seed == SG_SAMPLER_SEED_RANDOM) {
		uint64_t r = 0;
		if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) r = sg_time_ns();
		sp.seed = r & ((1ull << 53) - 1);
	}
	atomic_int cancel = 0;
	sg_cli_sigint_install(&cancel);
	sg_gen_params gp = sg_gen_default_params();
	gp.prompt = ids;
	gp.n_prompt = n_ids;
	gp.sampler = sp;
	gp.eos_ids = sg_lm_eos(lm, &gp.n_eos);
	gp.stop = stops;
	gp.n_stop = n_stop;
	gp.max_tokens = (int32_t)max_tokens;
	gp.cancel = &cancel;
	gp.on_event = on_event;
	gp.user = &o;
	sg_cli_spec_apply(&spec, &gp);
	sg_gen_result res;
	if ((st = sg_lm_generate(lm, NULL, &gp, &res))) goto fail;
	if (o.failed) {
		fprintf(stderr, "saragossa generate: out of memory collecting the answer\n");
		goto done;
	}
	double t_end = sg_time_s();
	sg_cli_metrics m;
	sg_cli_metrics_from(&res, t_loaded - t0, t_end - t0, &m);
	if (json) {
		json_t *obj = json_pack("{s:s%, s:s, s:s, s:I, s:o}", "text", o.text ? o.text : "", o.len, "finish_reason",
					sg_gen_finish_str(res.finish), "model", path, "seed", (json_int_t)res.seed, "metrics",
					sg_cli_metrics_json(&m));
		char *s = obj ? json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
		json_decref(obj);
		if (!s) {
			fprintf(stderr, "saragossa generate: out of memory writing JSON\n");
			goto done;
		}
		printf("%s\n", s);
		free(s);
	} else {
		printf("\n");
	}
	fflush(stdout);
	if (res.finish == SG_GEN_CANCELLED) fprintf(stderr, "saragossa generate: stopped (Ctrl-C)\n");
	if (metrics) {
		sg_cli_metrics_print(stderr, &m);
		sg_cli_expert_metrics(sg_lm_model(lm), stderr);
	}
	rc = 0;
	goto done;
fail:
	fprintf(stderr, "saragossa generate: %s\n", sg_last_error());
done:
	json_decref(messages);
	sg_free(o.text);
	sg_free(ids);
	sg_free(templated);
	sg_free(stdin_text);
	sg_cli_spec_free(&spec);
	sg_lm_free(lm);
	return rc;
}

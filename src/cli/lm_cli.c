/* Shared by the generating verbs (see lm_cli.h). */
#include "cli/lm_cli.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/flags.h"
#include "cli/cli.h"
#include "base/sysinfo.h"
#include "base/timer.h"
#include "engine/draft.h"
#include "engine/expert_cache.h"
#include "engine/session.h"
#include "hub/repo.h"
#include "hub/resolve.h"
#include "saragossa.h"

int sg_cli_default_model(char *buf, size_t n)
{
	const char *env = sg_flag_str("SARAGOSSA_DEFAULT_MODEL");
	if (env && env[0]) {
		snprintf(buf, n, "%s", env);
		return 1;
	}
	char dir[SG_HUB_PATH_MAX];
	if (sg_hub_models_dir(dir, sizeof dir)) dir[0] = 0;
	snprintf(buf, n, "%s/%s", dir[0] ? dir : "~/.cache/saragossa/models", SG_CLI_DEFAULT_MODEL_FILE);
	return 0;
}

int sg_cli_model_path(const char *verb, const char *model, char *path, size_t n)
{
	char def[SG_HUB_PATH_MAX];
	int from_env = 0;
	if (!model) {
		from_env = sg_cli_default_model(def, sizeof def);
		struct stat st;
		if (!from_env && stat(def, &st)) {
			fprintf(stderr,
				"saragossa %s: no model given, and the default model (" SG_CLI_DEFAULT_MODEL_NAME
				") is not at %s.\n"
				"  Fetch it with `make run` in the source tree, or `tools/fetch_models.py " SG_CLI_DEFAULT_MODEL_FETCH
				"`;\n"
				"  or name a model: `saragossa %s org/name` (a Hugging Face repo id), a .gguf file or a "
				"folder;\n  or set SARAGOSSA_DEFAULT_MODEL. `saragossa list` shows the models on this "
				"machine.\n",
				verb, def, verb);
			return 1;
		}
		model = def;
	}
	sg_hub_model hm;
	if (sg_hub_resolve(model, NULL, &hm)) {
		fprintf(stderr, "saragossa %s: %s%s\n", verb, sg_last_error(),
			from_env ? " (from SARAGOSSA_DEFAULT_MODEL)" : "");
		return 1;
	}
	snprintf(path, n, "%s", hm.path);
	return 0;
}

int sg_cli_embed_model_path(const char *verb, const char *model, char *path, size_t n)
{
	if (model) return sg_cli_model_path(verb, model, path, n);
	const char *env = sg_flag_str("SARAGOSSA_DEFAULT_EMBED_MODEL");
	if (env && env[0]) return sg_cli_model_path(verb, env, path, n);
	char dir[SG_HUB_PATH_MAX], def[SG_HUB_PATH_MAX + 64];
	if (sg_hub_models_dir(dir, sizeof dir)) dir[0] = 0;
	snprintf(def, sizeof def, "%s/%s", dir[0] ? dir : "~/.cache/saragossa/models", SG_CLI_DEFAULT_EMBED_MODEL_DIR);
	struct stat st;
	if (stat(def, &st)) {
		fprintf(stderr,
			"saragossa %s: no model given, and the default embedding model (" SG_CLI_DEFAULT_EMBED_MODEL_NAME
			") is not at %s.\n"
			"  Fetch it with `tools/fetch_models.py " SG_CLI_DEFAULT_EMBED_MODEL_FETCH "` in the source tree;\n"
			"  or name a model with -m (a folder or a Hugging Face repo id), or set SARAGOSSA_DEFAULT_EMBED_MODEL.\n",
			verb, def);
		return 1;
	}
	snprintf(path, n, "%s", def);
	return 0;
}

int sg_cli_load_lm(const char *verb, const char *model, int32_t n_ctx, int n_threads, const char *backend, int prefix_cache,
		   sg_lm **out, char *path, size_t path_n)
{
	if (sg_cli_model_path(verb, model, path, path_n)) return 1;
	sg_lm_params lp = sg_lm_default_params();
	lp.n_ctx = n_ctx;
	lp.n_threads = n_threads;
	lp.backend = backend;
	lp.no_prefix_cache = !prefix_cache;
	if (sg_lm_load(path, &lp, out)) {
		fprintf(stderr, "saragossa %s: %s\n", verb, sg_last_error());
		return 1;
	}
	return 0;
}

int sg_cli_parse_int(const char *s, long lo, long hi, long *out)
{
	if (!s || !*s) return -1;
	errno = 0;
	char *end;
	long v = strtol(s, &end, 10);
	if (errno || *end || v < lo || v > hi) return -1;
	*out = v;
	return 0;
}

int sg_cli_parse_float(const char *s, double lo, double hi, double *out)
{
	if (!s || !*s) return -1;
	errno = 0;
	char *end;
	double v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v < lo || v > hi) return -1;
	*out = v;
	return 0;
}

/* "--top-p", "top_p" and "top-p" name the same option. */
static int same_opt(const char *given, const char *canon)
{
	while (*given == '-') given++;
	for (; *given && *canon; given++, canon++) {
		char g = *given == '_' ? '-' : *given;
		if (g != *canon) return 0;
	}
	return !*given && !*canon;
}

int sg_cli_sampler_opt(const char *name, const char *value, sg_sampler_params *p, char *err, size_t errn)
{
	double f;
	long i;
	if (same_opt(name, "temperature")) {
		if (sg_cli_parse_float(value, 0, 100, &f)) goto bad_float;
		p->temperature = (float)f;
	} else if (same_opt(name, "top-p")) {
		if (sg_cli_parse_float(value, 0, 1, &f) || f <= 0) {
			snprintf(err, errn, "top-p wants a number in (0, 1], got '%s'", value ? value : "");
			return 2;
		}
		p->top_p = (float)f;
	} else if (same_opt(name, "min-p")) {
		if (sg_cli_parse_float(value, 0, 1, &f)) {
			snprintf(err, errn, "min-p wants a number in [0, 1], got '%s'", value ? value : "");
			return 2;
		}
		p->min_p = (float)f;
	} else if (same_opt(name, "top-k")) {
		if (sg_cli_parse_int(value, 0, 1 << 30, &i)) {
			snprintf(err, errn, "top-k wants an integer >= 0 (0 = off), got '%s'", value ? value : "");
			return 2;
		}
		p->top_k = (int32_t)i;
	} else if (same_opt(name, "repeat-penalty")) {
		if (sg_cli_parse_float(value, 0, 100, &f) || f <= 0) {
			snprintf(err, errn, "repeat-penalty wants a number > 0 (1 = off), got '%s'", value ? value : "");
			return 2;
		}
		p->repetition_penalty = (float)f;
	} else if (same_opt(name, "seed")) {
		char *end;
		errno = 0;
		unsigned long long s = value && *value && *value != '-' ? strtoull(value, &end, 10) : 0;
		if (!value || !*value || *value == '-' || errno || *end || s == SG_SAMPLER_SEED_RANDOM) {
			snprintf(err, errn, "seed wants an integer in [0, 2^64-1), got '%s'", value ? value : "");
			return 2;
		}
		p->seed = (uint64_t)s;
	} else {
		return 1;
	}
	return 0;
bad_float:
	snprintf(err, errn, "temperature wants a number >= 0 (0 = greedy), got '%s'", value ? value : "");
	return 2;
}

static atomic_int *sigint_flag;
static volatile sig_atomic_t sigint_count;
static pthread_t sigint_thread; /* the thread that installed the handler: it reads the terminal */

static void on_sigint(int sig)
{
	if (sigint_flag) atomic_store(sigint_flag, 1);
	/* SIGINT goes to any thread of the process that does not block it, as often as not a
	 * compute worker sleeping in the thread pool: then the thread blocked in the chat prompt's
	 * read() is never interrupted, the line discipline has thrown the typed input away, and
	 * the prompt waits for a line that will not come. Hand the signal to the reading thread
	 * (pthread_kill is async-signal-safe); it is counted there, once. */
	if (!pthread_equal(pthread_self(), sigint_thread)) {
		int e = errno;
		pthread_kill(sigint_thread, sig);
		errno = e;
		return;
	}
	sigint_count = sigint_count + 1;
}

void sg_cli_sigint_install(atomic_int *flag)
{
	sigint_flag = flag;
	sigint_thread = pthread_self();
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
}

int sg_cli_read_byte(int fd, unsigned char *ch)
{
	/* SIGINT stays blocked from the check of the counter until pselect unblocks it atomically:
	 * a Ctrl-C that lands after the prompt is printed but before the wait starts is seen at
	 * the check or interrupts the wait, never lost while read() blocks. */
	sigset_t block, old;
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	int r;
	for (;;) {
		if (sigint_count) {
			errno = EINTR;
			r = -1;
			break;
		}
		fd_set rs;
		FD_ZERO(&rs);
		FD_SET(fd, &rs);
		if (pselect(fd + 1, &rs, NULL, NULL, NULL, &old) < 0) {
			if (errno == EINTR) continue; /* the counter says whether it was a Ctrl-C */
			r = -1;
			break;
		}
		/* readable: SIGINT unblocked again, so the read is interruptible like any other */
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		ssize_t n = read(fd, ch, 1);
		if (n < 0 && errno == EINTR && !sigint_count) {
			pthread_sigmask(SIG_BLOCK, &block, NULL);
			continue;
		}
		return n == 1 ? 1 : n == 0 ? 0 : -1;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}

int sg_cli_sigint_take(void)
{
	int n = sigint_count;
	sigint_count = 0;
	return n;
}

void sg_cli_metrics_from(const sg_gen_result *r, double load_s, double total_s, sg_cli_metrics *m)
{
	memset(m, 0, sizeof *m);
	m->prompt_tokens = r->n_prompt;
	m->cached_tokens = r->n_cached;
	m->generated_tokens = r->n_generated;
	m->load_s = load_s;
	m->prefill_s = r->prefill_s;
	m->ttft_s = r->ttft_s;
	m->decode_s = r->decode_s;
	m->total_s = total_s;
	size_t prefilled = r->n_prompt - r->n_cached;
	m->prefill_tps = r->prefill_s > 0 ? (double)prefilled / r->prefill_s : 0;
	/* The first token comes out of the prefill; the decode steps are the ones after it. */
	m->decode_tps = r->decode_s > 0 && r->n_generated > 1 ? (double)(r->n_generated - 1) / r->decode_s : 0;
	m->peak_rss = sg_mem_peak_rss();
	m->spec_verify = r->n_verify;
	m->spec_drafted = r->n_drafted;
	m->spec_accepted = r->n_accepted;
}

void sg_cli_spec_init(sg_cli_spec *sp)
{
	memset(sp, 0, sizeof(*sp));
	sp->draft_max = 16;
	sp->draft_min = 1;
}

int sg_cli_spec_opt(const char *name, const char *value, sg_cli_spec *sp, char *err, size_t errn)
{
	if (!strcmp(name, "--spec")) {
		sp->ngram = sp->mtp = 0;
		if (!strcmp(value, "ngram")) sp->ngram = 1;
		else if (!strcmp(value, "mtp")) sp->mtp = 1;
		else if (strcmp(value, "none")) {
			snprintf(err, errn, "--spec wants ngram, mtp or none, got '%s'", value);
			return 2;
		}
		return 0;
	}
	if (!strcmp(name, "--draft-model")) {
		if (!value[0]) {
			snprintf(err, errn, "--draft-model wants a model");
			return 2;
		}
		sp->draft_model = value;
		return 0;
	}
	if (!strcmp(name, "--draft-max") || !strcmp(name, "--draft-min")) {
		long v;
		int is_max = !strcmp(name, "--draft-max");
		if (sg_cli_parse_int(value, is_max, 256, &v)) {
			snprintf(err, errn, "%s wants an integer in [%d, 256], got '%s'", name, is_max, value);
			return 2;
		}
		if (is_max) sp->draft_max = v;
		else sp->draft_min = v;
		return 0;
	}
	return 1;
}

int sg_cli_spec_start(const char *verb, sg_cli_spec *sp, sg_lm *target, int n_threads, const char *backend)
{
	if (sp->draft_min > sp->draft_max) {
		fprintf(stderr, "saragossa %s: --draft-min %ld is above --draft-max %ld\n", verb, sp->draft_min, sp->draft_max);
		return 1;
	}
	if (sp->draft_model && (sp->ngram || sp->mtp)) {
		fprintf(stderr, "saragossa %s: --spec %s and --draft-model are two drafters; pick one\n", verb, sp->mtp ? "mtp" : "ngram");
		return 1;
	}
	if (!sp->draft_model && !sp->ngram && !sp->mtp) return 0;
	const char *kind = sp->draft_model ? "model" : sp->mtp ? "mtp" : "ngram";
	if (!sg_drafter_enabled(kind)) {
		fprintf(stderr, "saragossa %s: speculative decoding (%s) is switched off by its flag; decoding without it\n", verb, kind);
		return 0;
	}
	if (!sg_lm_state(target)->model->eval_rows) {
		fprintf(stderr, "saragossa %s: this backend cannot verify guesses exactly yet (SARAGOSSA_SPEC_STEPWISE=0); decoding without "
			"speculation\n", verb);
		return 0;
	}
	if (sg_session_verify_stepwise(sg_lm_session(target)))
		fprintf(stderr, "saragossa %s: this backend verifies guesses one decode step per token: the answer is exact, not faster "
			"yet\n", verb);
	sg_status st;
	if (sp->ngram) {
		if ((st = sg_drafter_ngram(SG_DRAFT_NGRAM_MIN, SG_DRAFT_NGRAM_MAX, &sp->drafter))) goto fail;
		return 0;
	}
	if (sp->mtp) {
		st = sg_drafter_mtp(sg_lm_session(target), &sp->drafter);
		if (st == SG_ERR_UNSUPPORTED) {
			fprintf(stderr, "saragossa %s: --spec mtp: %s; decoding without speculation\n", verb, sg_last_error());
			return 0;
		}
		if (st) goto fail;
		return 0;
	}
	char path[SG_HUB_PATH_MAX];
	if (sg_cli_load_lm(verb, sp->draft_model, sg_lm_n_ctx(target), n_threads, backend, 0, &sp->draft_lm, path, sizeof path))
		return 1;
	if ((st = sg_drafter_check_vocab(target, sp->draft_lm))) goto fail;
	if ((st = sg_drafter_model(sg_lm_session(sp->draft_lm), sg_lm_n_vocab(target), &sp->drafter))) goto fail;
	return 0;
fail:
	fprintf(stderr, "saragossa %s: %s\n", verb, sg_last_error());
	return 1;
}

void sg_cli_spec_apply(const sg_cli_spec *sp, sg_gen_params *gp)
{
	if (!sp->drafter) return;
	gp->drafter = sg_drafter_ops(sp->drafter);
	gp->draft_max = (int32_t)sp->draft_max;
	gp->draft_min = (int32_t)sp->draft_min;
}

void sg_cli_spec_free(sg_cli_spec *sp)
{
	sg_drafter_free(sp->drafter);
	sg_lm_free(sp->draft_lm);
	sp->drafter = NULL;
	sp->draft_lm = NULL;
}

void sg_cli_metrics_print(FILE *f, const sg_cli_metrics *m)
{
	fprintf(f, "prompt tokens:       %zu (%zu reused from the cache)\n", m->prompt_tokens, m->cached_tokens);
	fprintf(f, "prefill:             %.2f tok/s (%.3f s)\n", m->prefill_tps, m->prefill_s);
	fprintf(f, "time to first token: %.3f s\n", m->ttft_s);
	fprintf(f, "generated tokens:    %zu\n", m->generated_tokens);
	fprintf(f, "decode:              %.2f tok/s (%.3f s)\n", m->decode_tps, m->decode_s);
	fprintf(f, "load time:           %.3f s\n", m->load_s);
	fprintf(f, "total time:          %.3f s\n", m->total_s);
	fprintf(f, "peak memory:         %.1f MiB\n", (double)m->peak_rss / 1048576.0);
	if (m->spec_verify)
		fprintf(f, "speculative:         %zu of %zu guesses kept (%.1f%%), %.2f tokens per verify step\n", m->spec_accepted,
			m->spec_drafted, m->spec_drafted ? 100.0 * (double)m->spec_accepted / (double)m->spec_drafted : 0.0,
			(double)(m->spec_accepted + m->spec_verify) / (double)m->spec_verify);
}

json_t *sg_cli_metrics_json(const sg_cli_metrics *m)
{
	json_t *o = json_pack("{s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I}", "prompt_tokens",
			 (json_int_t)m->prompt_tokens, "cached_tokens", (json_int_t)m->cached_tokens, "generated_tokens",
			 (json_int_t)m->generated_tokens, "prefill_tokens_per_s", m->prefill_tps, "prefill_s", m->prefill_s,
			 "time_to_first_token_s", m->ttft_s, "decode_tokens_per_s", m->decode_tps, "decode_s", m->decode_s,
			 "load_s", m->load_s, "total_s", m->total_s, "peak_memory_bytes", (json_int_t)m->peak_rss);
	if (o && m->spec_verify) {
		json_object_set_new(o, "spec_verify_steps", json_integer((json_int_t)m->spec_verify));
		json_object_set_new(o, "spec_drafted_tokens", json_integer((json_int_t)m->spec_drafted));
		json_object_set_new(o, "spec_accepted_tokens", json_integer((json_int_t)m->spec_accepted));
		json_object_set_new(o, "spec_acceptance", json_real(m->spec_drafted ? (double)m->spec_accepted / (double)m->spec_drafted : 0.0));
		json_object_set_new(o, "spec_tokens_per_verify",
				    json_real((double)(m->spec_accepted + m->spec_verify) / (double)m->spec_verify));
	}
	return o;
}

int sg_cli_expert_cache_opt(const char *verb, const char *value)
{
	sg_xc_spec xs;
	char err[200];
	if (sg_xc_parse(value, &xs, err, sizeof err)) return sg_cli_usage_error(verb, "%s", err);
	setenv("SARAGOSSA_EXPERT_CACHE", value, 1);
	sg_flags_reload(); /* single-threaded still: the options are parsed before any work */
	return 0;
}

int sg_cli_expert_on(void)
{
	sg_xc_spec xs;
	char err[200];
	return !sg_xc_parse(sg_flag_str("SARAGOSSA_EXPERT_CACHE"), &xs, err, sizeof err) && xs.mode != SG_XC_OFF;
}

int sg_cli_expert_apply(const char *verb, sg_model *m, int n_ctx)
{
	sg_xc_spec xs;
	char err[200];
	if (sg_xc_parse(sg_flag_str("SARAGOSSA_EXPERT_CACHE"), &xs, err, sizeof err)) {
		fprintf(stderr, "saragossa %s: SARAGOSSA_EXPERT_CACHE: %s\n", verb, err);
		return 1;
	}
	if (sg_xc_apply(m, &xs, n_ctx, NULL)) {
		fprintf(stderr, "saragossa %s: %s\n", verb, sg_last_error());
		return 1;
	}
	return 0;
}

void sg_cli_expert_metrics(const sg_model *m, FILE *f)
{
	sg_xc_stats st;
	if (!m || !sg_xc_stats_get(m, &st)) return;
	char line[512];
	sg_xc_stats_line(&st, line, sizeof line);
	fprintf(f, "  %s\n", line);
}

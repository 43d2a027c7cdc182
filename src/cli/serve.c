/* saragossa serve: the OpenAI- and Ollama-compatible HTTP server (src/server/). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/flags.h"
#include "base/log.h"
#include "cli/cli.h"
#include "cli/lm_cli.h"
#include "hub/resolve.h"
#include "saragossa.h"
#include "server/server.h"

#define DEFAULT_SOCKET "/tmp/saragossa-serve.sock"

static void usage(void)
{
	printf("usage: saragossa serve [options] --model NAME=MODEL ...\n"
	       "  serve the OpenAI API (/v1/chat/completions, /v1/completions, /v1/models, /tokenize,\n"
	       "  /detokenize) and the Ollama API (/api/chat, /api/generate, /api/tags, /api/show, /api/ps,\n"
	       "  /api/version) on a Unix socket and/or loopback TCP. docs/api.md describes every route.\n"
	       "\n"
	       "models:\n"
	       "  --model NAME=MODEL    serve MODEL (a folder, a .gguf file, a name in the models folder or a\n"
	       "                        Hugging Face repo id) under NAME, the request's \"model\" field;\n"
	       "                        repeatable; the first is the default. --model MODEL names it MODEL\n"
	       "  --stt-model NAME=MODEL  serve a Whisper model (Hugging Face, MLX or CTranslate2 folder, or a\n"
	       "                        whisper.cpp ggml file) on\n"
	       "                        /v1/audio/transcriptions and /v1/audio/translations under NAME;\n"
	       "                        repeatable, in the same pool and memory guard as --model; the first\n"
	       "                        also answers requests for \"whisper-1\"\n"
	       "  --stt-vocab FILE      the vocabulary of each --stt-model whose files carry none (MLX\n"
	       "                        folders): openai-whisper's gpt2.tiktoken (English-only models) or\n"
	       "                        multilingual.tiktoken, or a tokenizer.json\n"
	       "  --embed-model NAME=MODEL  serve an embedding model (a sentence-transformers folder: BERT,\n"
	       "                        MiniLM, BGE, XLM-R, MPNet, a last-token decoder...) or a cross-encoder reranker under NAME on /v1/embeddings,\n"
	       "                        /api/embed, /api/embeddings and /v1/rerank; repeatable; same pool and\n"
	       "                        memory guard as --model; the first is the default of those routes\n"
	       "  --tts-model NAME=MODEL  serve a text-to-speech model (a Piper voice: .onnx with its .onnx.json,\n"
	       "                        or a folder holding one) on /v1/audio/speech under NAME, and speak\n"
	       "                        chat answers that ask for audio; repeatable; same pool and memory guard\n"
	       "                        as --model; the first also answers requests for tts-1, tts-1-hd and\n"
	       "                        gpt-4o-mini-tts\n"
	       "  --ctx N               context tokens per model (default: the model's, capped at 4096)\n"
	       "  --backend B           cpu, cuda or auto: where models run (default $RETI_SERVE_BACKEND,\n"
	       "                        auto: the GPU when this build has CUDA and one is usable)\n"
	       "  --expert-cache C      MoE models: routed experts read from disk into a slot cache: off\n"
	       "                        (default), auto (the planner's size when a model does not fit), a size\n"
	       "                        (6g) or a share of the experts (25%%); the memory guard shrinks it\n"
	       "\n"
	       "transport (a Unix socket unless --port is given; both when --socket is given too):\n"
	       "  --socket PATH         Unix socket, created mode 0600 (default " DEFAULT_SOCKET "); a stale\n"
	       "                        socket file is replaced, a live server on it is refused\n"
	       "  --port N              also/instead listen on TCP port N (needs an API key)\n"
	       "  --host ADDR           TCP bind address (default 127.0.0.1; anything else is reachable from\n"
	       "                        other machines and still needs the key)\n"
	       "  --ollama-port N       one more TCP port for Ollama clients (11434 is theirs), same key\n"
	       "  --api-key KEY         bearer token TCP clients must send ('Authorization: Bearer KEY');\n"
	       "                        default $SARAGOSSA_API_KEY. Required for TCP; the socket needs none\n"
	       "\n"
	       "limits:\n"
	       "  --max-tokens-cap N    hard cap on tokens generated per request (default 4096)\n"
	       "  --max-body BYTES      largest request body (default 4m; larger: 413)\n"
	       "  --max-upload BYTES    largest audio upload, the whole multipart body (default 25m; larger: 413)\n"
	       "  --queue N             requests that may wait behind the running one (default 16; more: 503\n"
	       "                        with Retry-After)\n"
	       "  --read-timeout S      seconds a client has to send its request (default 30; then 408 or\n"
	       "                        the connection is closed)\n"
	       "  --max-connections N   open connections per listener (default 64)\n"
	       "  --no-prefix-cache     prefill every prompt whole (as RETI_SERVE_PREFIX_CACHE=0)\n"
	       "  --spec ngram          speculative decoding with n-gram guesses for every request that does\n"
	       "                        not say otherwise (request field \"speculative\")\n"
	       "  --draft-model M       speculative decoding with draft model M (same vocabulary) beside every\n"
	       "                        served model\n"
	       "  --draft-max N         guesses per verify step at most (default 16)\n"
	       "  --draft-min N         shorter guesses are not verified (default 1)\n"
	       "  -q, --quiet           log warnings and errors only\n");
}

static int parse_num(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
	if (!v) return sg_cli_usage_error("serve", "%s needs a value", flag);
	if (sg_parse_int(v, out) || *out < lo || *out > hi)
		return sg_cli_usage_error("serve", "%s '%s' must be a number in [%lld, %lld]", flag, v, (long long)lo, (long long)hi);
	return 0;
}

int sg_cli_serve(int argc, char **argv)
{
	sg_server_opts o = sg_server_default_opts();
	const char *socket_path = NULL;
	const char *key = NULL;
	static char names[SG_SERVER_MAX_MODELS][128];
	static sg_hub_model resolved[SG_SERVER_MAX_MODELS];
	const char *specs[SG_SERVER_MAX_MODELS];
	int spec_stt[SG_SERVER_MAX_MODELS];
	int is_embed[SG_SERVER_MAX_MODELS];
	int is_tts[SG_SERVER_MAX_MODELS];
	int n_specs = 0;
	static sg_hub_model draft;
	const char *draft_model = NULL, *stt_vocab = NULL;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int64_t x;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage();
			return 0;
		} else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
			sg_log_set_level(SG_LOG_WARN);
			continue;
		} else if (!strcmp(a, "--no-prefix-cache")) {
			o.no_prefix_cache = 1;
		} else if (!strcmp(a, "--model") || !strcmp(a, "--stt-model") || !strcmp(a, "--embed-model") ||
			   !strcmp(a, "--tts-model")) {
			if (!v) return sg_cli_usage_error("serve", "%s needs NAME=MODEL", a);
			if (n_specs == SG_SERVER_MAX_MODELS)
				return sg_cli_usage_error("serve", "at most %d --model, --stt-model, --embed-model and --tts-model flags",
							  SG_SERVER_MAX_MODELS);
			spec_stt[n_specs] = !strcmp(a, "--stt-model");
			is_embed[n_specs] = !strcmp(a, "--embed-model");
			is_tts[n_specs] = !strcmp(a, "--tts-model");
			specs[n_specs++] = v;
		} else if (!strcmp(a, "--socket")) {
			if (!v) return sg_cli_usage_error("serve", "--socket needs a PATH");
			socket_path = v;
		} else if (!strcmp(a, "--host")) {
			if (!v) return sg_cli_usage_error("serve", "--host needs an address");
			o.host = v;
		} else if (!strcmp(a, "--api-key")) {
			if (!v) return sg_cli_usage_error("serve", "--api-key needs a KEY");
			key = v;
		} else if (!strcmp(a, "--port")) {
			if (parse_num(a, v, 1, 65535, &x)) return 2;
			o.port = (int)x;
		} else if (!strcmp(a, "--ollama-port")) {
			if (parse_num(a, v, 1, 65535, &x)) return 2;
			o.ollama_port = (int)x;
		} else if (!strcmp(a, "--ctx")) {
			if (parse_num(a, v, 16, 1 << 24, &x)) return 2;
			o.n_ctx = (int32_t)x;
		} else if (!strcmp(a, "--backend")) {
			if (!v || (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "auto")))
				return sg_cli_usage_error("serve", "--backend wants cpu, cuda or auto, got '%s'", v ? v : "");
			/* the server reads the flag where it loads models and sizes the memory guard */
			setenv("RETI_SERVE_BACKEND", v, 1);
			sg_flags_reload();
		} else if (!strcmp(a, "--stt-vocab")) {
			if (!v) return sg_cli_usage_error("serve", "--stt-vocab needs a FILE");
			stt_vocab = v;
		} else if (!strcmp(a, "--expert-cache")) {
			if (!v) return sg_cli_usage_error("serve", "--expert-cache needs a value");
			if (sg_cli_expert_cache_opt("serve", v)) return 2;
		} else if (!strcmp(a, "--max-tokens-cap")) {
			if (parse_num(a, v, 1, 1 << 24, &x)) return 2;
			o.max_tokens_cap = (int32_t)x;
		} else if (!strcmp(a, "--max-body")) {
			if (parse_num(a, v, 1024, 1LL << 30, &x)) return 2;
			o.max_body = (size_t)x;
		} else if (!strcmp(a, "--max-upload")) {
			if (parse_num(a, v, 1024, 1LL << 32, &x)) return 2;
			o.max_upload = (size_t)x;
		} else if (!strcmp(a, "--queue")) {
			if (parse_num(a, v, 0, 4096, &x)) return 2;
			o.queue = (int)x;
		} else if (!strcmp(a, "--read-timeout")) {
			if (parse_num(a, v, 1, 3600, &x)) return 2;
			o.read_timeout_s = (int)x;
		} else if (!strcmp(a, "--spec")) {
			if (!v || (strcmp(v, "ngram") && strcmp(v, "mtp") && strcmp(v, "none")))
				return sg_cli_usage_error("serve", "--spec wants ngram, mtp or none, got '%s'", v ? v : "");
			o.spec_mode = !strcmp(v, "ngram") ? 1 : !strcmp(v, "mtp") ? 3 : 0;
		} else if (!strcmp(a, "--draft-model")) {
			if (!v || !*v) return sg_cli_usage_error("serve", "--draft-model needs a MODEL");
			draft_model = v;
		} else if (!strcmp(a, "--draft-max")) {
			if (parse_num(a, v, 1, 256, &x)) return 2;
			o.draft_max = (int32_t)x;
		} else if (!strcmp(a, "--draft-min")) {
			if (parse_num(a, v, 0, 256, &x)) return 2;
			o.draft_min = (int32_t)x;
		} else if (!strcmp(a, "--max-connections")) {
			if (parse_num(a, v, 1, 4096, &x)) return 2;
			o.max_connections = (int)x;
		} else return sg_cli_usage_error("serve", "unknown option '%s'", a);
		i++;
	}
	if (!key) {
		const char *env = sg_flag_str("SARAGOSSA_API_KEY");
		if (env && *env) key = env;
	}
	o.api_key = key;
	if (socket_path) o.socket_path = socket_path;
	else if (!o.port && !o.ollama_port) o.socket_path = DEFAULT_SOCKET;
	if ((o.port || o.ollama_port) && !key) {
		fprintf(stderr, "saragossa: serve over TCP needs an API key: pass --api-key KEY or set SARAGOSSA_API_KEY "
				"(clients then send 'Authorization: Bearer KEY'); without a key use the Unix socket (--socket)\n");
		return 2;
	}
	for (int i = 0; i < n_specs; i++) {
		const char *eq = strchr(specs[i], '=');
		const char *model = eq ? eq + 1 : specs[i];
		size_t nl = eq ? (size_t)(eq - specs[i]) : strlen(specs[i]);
		if (!nl || !*model) return sg_cli_usage_error("serve", "--model '%s' is not NAME=MODEL", specs[i]);
		if (nl >= sizeof names[i]) return sg_cli_usage_error("serve", "model name '%.*s...' is too long", 40, specs[i]);
		memcpy(names[i], specs[i], nl);
		names[i][nl] = 0;
		sg_hub_opts ho = {.quiet = 0};
		struct stat sb;
		/* a voice is a file the hub does not know (a Piper .onnx, a .tone.json): taken as it is */
		if (is_tts[i] && !stat(model, &sb) && S_ISREG(sb.st_mode)) {
			if (!realpath(model, resolved[i].path)) snprintf(resolved[i].path, sizeof resolved[i].path, "%s", model);
		} else if (sg_hub_resolve(model, &ho, &resolved[i])) {
			fprintf(stderr, "saragossa: --model %s: %s\n", specs[i], sg_last_error());
			return 1;
		}
		o.models[i].name = names[i];
		o.models[i].path = resolved[i].path;
		o.models[i].stt = spec_stt[i];
		o.models[i].vocab = spec_stt[i] ? stt_vocab : NULL;
		o.models[i].embed = is_embed[i];
		o.models[i].tts = is_tts[i];
	}
	o.n_models = n_specs;
	if (o.draft_max && o.draft_min > o.draft_max)
		return sg_cli_usage_error("serve", "--draft-min %d is above --draft-max %d", o.draft_min, o.draft_max);
	if (draft_model) {
		if (o.spec_mode == 1 || o.spec_mode == 3)
			return sg_cli_usage_error("serve", "--spec %s and --draft-model are two drafters; pick one", o.spec_mode == 1 ? "ngram" : "mtp");
		sg_hub_opts ho = {.quiet = 0};
		if (sg_hub_resolve(draft_model, &ho, &draft)) {
			fprintf(stderr, "saragossa: --draft-model %s: %s\n", draft_model, sg_last_error());
			return 1;
		}
		o.draft_model = draft.path;
		o.spec_mode = 2;
	}
	int n_text = 0;
	for (int i = 0; i < n_specs; i++) n_text += !is_embed[i] && !spec_stt[i] && !is_tts[i];
	if (n_specs && !n_text) SG_INFO("serve: no text model: the text routes answer 404");
	if (!n_specs) SG_WARN("serve: no --model given: generation routes answer 404 until a model is served");
	if (sg_server_run(&o)) {
		fprintf(stderr, "saragossa: %s\n", sg_last_error());
		return 1;
	}
	return 0;
}

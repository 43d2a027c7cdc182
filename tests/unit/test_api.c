/*
 * The public text-generation API (include/saragossa.h: sg_llm, the sampler), through the public
 * header alone, on the qwen3 fixture (run from the repository root) given a small tokenizer and
 * a ChatML template in a temporary folder: bad input (NULL pointers, a missing path, ids outside
 * the vocabulary, sampler values out of their domain) is a status and a message, never a crash;
 * tokens round-trip; the streamed answer is the one a hand-written loop over the public session
 * and sampler calls gives; a second turn reuses the first one's state.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "saragossa.h"

#define FIXTURE "tests/fixtures/qwen3"
#define N_VOCAB 384 /* the fixture's vocab_size: the tokenizer below fills it */
#define SP "\xE2\x96\x81" /* U+2581, the word-boundary mark */

/* ChatML, the template the end-to-end test models carry too */
#define CHATML                                                                                                       \
	"{% for m in messages %}<|im_start|>{{ m['role'] }}\\n{{ m['content'] }}<|im_end|>\\n{% endfor %}"              \
	"{% if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}"

typedef struct model_dir {
	char path[PATH_MAX];
} model_dir;

static void write_file(const char *dir, const char *name, const char *text)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	cr_assert(f, "cannot write %s", p);
	cr_assert_eq(fwrite(text, 1, strlen(text), f), strlen(text));
	fclose(f);
}

/* A byte-fallback BPE vocabulary of N_VOCAB tokens: 5 special ones (ChatML's among them), the 256
 * byte tokens, the space mark, a-z, then fillers; no merges, so text encodes character by
 * character (and bytes for anything else). */
static char *tokenizer_json(void)
{
	size_t cap = 64 << 10, n = 0;
	char *j = malloc(cap);
	cr_assert(j);
	n += (size_t)snprintf(j + n, cap - n,
			      "{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"byte_fallback\":true,\"vocab\":{"
			      "\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<|im_start|>\":3,\"<|im_end|>\":4");
	int id = 5;
	for (int b = 0; b < 256; b++) n += (size_t)snprintf(j + n, cap - n, ",\"<0x%02X>\":%d", b, id++);
	n += (size_t)snprintf(j + n, cap - n, ",\"" SP "\":%d", id++);
	for (char c = 'a'; c <= 'z'; c++) n += (size_t)snprintf(j + n, cap - n, ",\"%c\":%d", c, id++);
	while (id < N_VOCAB) n += (size_t)snprintf(j + n, cap - n, ",\"<f%d>\":%d", id, id), id++;
	n += (size_t)snprintf(
		j + n, cap - n,
		"},\"merges\":[]},"
		"\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" SP "\"},"
		"\"pre_tokenizer\":null,"
		"\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"" SP
		"\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]},"
		"\"added_tokens\":[");
	const char *special[] = {"<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"};
	for (int i = 0; i < 5; i++)
		n += (size_t)snprintf(j + n, cap - n, "%s{\"id\":%d,\"content\":\"%s\",\"special\":true,\"normalized\":false}",
				      i ? "," : "", i, special[i]);
	n += (size_t)snprintf(j + n, cap - n, "]}");
	cr_assert_lt(n, cap);
	return j;
}

/* The fixture's config and weights (linked) with the tokenizer above and a chat template. */
static model_dir make_model(void)
{
	model_dir m;
	snprintf(m.path, sizeof m.path, "/tmp/sg_test_api_XXXXXX");
	cr_assert(mkdtemp(m.path), "mkdtemp");
	char cwd[PATH_MAX], src[PATH_MAX + 64], dst[PATH_MAX + 64];
	cr_assert(getcwd(cwd, sizeof cwd));
	snprintf(src, sizeof src, "%s/" FIXTURE "/model.safetensors", cwd);
	snprintf(dst, sizeof dst, "%s/model.safetensors", m.path);
	cr_assert_eq(symlink(src, dst), 0);
	snprintf(src, sizeof src, "%s/" FIXTURE "/config.json", cwd);
	snprintf(dst, sizeof dst, "%s/config.json", m.path);
	cr_assert_eq(symlink(src, dst), 0);
	char *tj = tokenizer_json();
	write_file(m.path, "tokenizer.json", tj);
	free(tj);
	write_file(m.path, "tokenizer_config.json",
		   "{\"tokenizer_class\":\"PreTrainedTokenizerFast\",\"bos_token\":\"<s>\",\"eos_token\":\"<|im_end|>\","
		   "\"add_bos_token\":false,\"chat_template\":\"" CHATML "\"}");
	return m;
}

static void remove_model(const model_dir *m)
{
	const char *files[] = {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"};
	char p[PATH_MAX + 64];
	for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
		snprintf(p, sizeof p, "%s/%s", m->path, files[i]);
		unlink(p);
	}
	rmdir(m->path);
}

static sg_llm *load(const model_dir *m, int n_ctx)
{
	sg_llm_params lp = sg_llm_default_params();
	lp.backend = "cpu";
	lp.n_threads = 1;
	lp.n_ctx = n_ctx;
	sg_llm *llm = NULL;
	cr_assert_eq(sg_llm_load(m->path, &lp, &llm), SG_OK, "%s", sg_last_error());
	cr_assert(llm);
	return llm;
}

/* ChatML prompt of one user message, tokenized. */
static int32_t *chat_ids(sg_llm *llm, const char *text, size_t *n)
{
	sg_message msg = {.role = "user", .content = text};
	char *prompt = NULL;
	size_t len = 0;
	cr_assert_eq(sg_llm_chat_prompt(llm, &msg, 1, 1, &prompt, &len), SG_OK, "%s", sg_last_error());
	int32_t *ids = NULL;
	cr_assert_eq(sg_llm_tokenize(llm, prompt, len, 0, &ids, n), SG_OK, "%s", sg_last_error());
	sg_free(prompt);
	return ids;
}

static void assert_error(sg_status got, sg_status want, const char *needle)
{
	cr_assert_eq(got, want, "status %s (%s), want %s", sg_status_str(got), sg_last_error(), sg_status_str(want));
	cr_assert(strstr(sg_last_error(), needle), "message '%s' lacks '%s'", sg_last_error(), needle);
}

Test(api, load_refuses_null_arguments_and_bad_params)
{
	sg_llm *llm = (sg_llm *)&llm;
	assert_error(sg_llm_load(NULL, NULL, &llm), SG_ERR_INVALID_ARG, "sg_llm_load: path is NULL");
	cr_assert_null(llm, "a failed load leaves *out NULL");
	assert_error(sg_llm_load("", NULL, &llm), SG_ERR_INVALID_ARG, "path is empty");
	assert_error(sg_llm_load(FIXTURE, NULL, NULL), SG_ERR_INVALID_ARG, "out is NULL");
	sg_llm_params lp = sg_llm_default_params();
	lp.n_ctx = -1;
	assert_error(sg_llm_load(FIXTURE, &lp, &llm), SG_ERR_INVALID_ARG, "n_ctx = -1");
	lp = sg_llm_default_params();
	lp.n_threads = -2;
	assert_error(sg_llm_load(FIXTURE, &lp, &llm), SG_ERR_INVALID_ARG, "n_threads = -2");
	cr_assert_null(llm);
}

Test(api, load_of_a_missing_path_names_it)
{
	sg_llm *llm = NULL;
	sg_status st = sg_llm_load("tests/fixtures/no-such-model", NULL, &llm);
	cr_assert_neq(st, SG_OK);
	cr_assert_null(llm);
	cr_assert(strstr(sg_last_error(), "tests/fixtures/no-such-model"), "%s", sg_last_error());
}

Test(api, load_of_a_model_without_tokenizer_fails_with_a_message)
{
	sg_llm_params lp = sg_llm_default_params();
	lp.backend = "cpu";
	sg_llm *llm = NULL;
	sg_status st = sg_llm_load(FIXTURE, &lp, &llm);
	cr_assert_neq(st, SG_OK);
	cr_assert_null(llm);
	cr_assert(strstr(sg_last_error(), "tokenizer"), "%s", sg_last_error());
}

Test(api, calls_on_a_null_handle_are_errors_not_crashes)
{
	int32_t *ids = (int32_t *)1;
	size_t n = 7, len = 7;
	char *text = (char *)1;
	assert_error(sg_llm_tokenize(NULL, "a", 1, 0, &ids, &n), SG_ERR_INVALID_ARG, "sg_llm_tokenize: llm is NULL");
	cr_assert(ids == NULL && n == 0, "outputs are cleared on failure");
	assert_error(sg_llm_tokenize(NULL, "a", 1, 0, NULL, &n), SG_ERR_INVALID_ARG, "ids and n are required");
	assert_error(sg_llm_detokenize(NULL, (const int32_t[]){1}, 1, &text, &len), SG_ERR_INVALID_ARG, "llm is NULL");
	cr_assert(text == NULL && len == 0);
	assert_error(sg_llm_token_text(NULL, 1, &text, &len), SG_ERR_INVALID_ARG, "llm is NULL");
	sg_message msg = {.role = "user", .content = "hi"};
	assert_error(sg_llm_chat_prompt(NULL, &msg, 1, 1, &text, &len), SG_ERR_INVALID_ARG, "llm is NULL");
	sg_llm_gen_params gp = sg_llm_gen_default_params();
	sg_llm_gen_result res;
	res.n_generated = 99;
	assert_error(sg_llm_generate(NULL, (const int32_t[]){1}, 1, &gp, &res), SG_ERR_INVALID_ARG, "llm is NULL");
	cr_assert_eq(res.n_generated, 0, "the result is cleared on failure");
	cr_assert_eq(res.stop_index, -1);
	assert_error(sg_llm_reset(NULL), SG_ERR_INVALID_ARG, "sg_llm_reset");
	cr_assert_null(sg_llm_model(NULL));
	cr_assert_eq(sg_llm_n_ctx(NULL), 0);
	cr_assert_eq(sg_llm_n_vocab(NULL), 0);
	cr_assert_eq(sg_llm_has_chat_template(NULL), 0);
	cr_assert_null(sg_llm_eos(NULL, &n));
	cr_assert_eq(n, 0);
	sg_llm_free(NULL);
	sg_free(NULL);
}

Test(api, sampler_refuses_null_and_out_of_range_input)
{
	sg_sampler *s = NULL;
	assert_error(sg_sampler_create(NULL, 8, &s), SG_ERR_INVALID_ARG, "required");
	sg_sampler_params p = sg_sampler_default_params();
	p.top_p = 1.5f;
	assert_error(sg_sampler_create(&p, 8, &s), SG_ERR_INVALID_ARG, "top_p");
	cr_assert_null(s);
	float logits[8] = {0, 1, 2, 3, 4, 5, 6, 7};
	sg_sample_result r;
	assert_error(sg_sampler_sample(NULL, logits, 8, &r), SG_ERR_INVALID_ARG, "sampler, logits and out are required");
	assert_error(sg_sampler_accept(NULL, 1), SG_ERR_INVALID_ARG, "sampler is NULL");
	p = sg_sampler_default_params();
	p.temperature = 0;
	cr_assert_eq(sg_sampler_create(&p, 8, &s), SG_OK, "%s", sg_last_error());
	assert_error(sg_sampler_accept(s, 8), SG_ERR_RANGE, "token 8 is outside [0, 8)");
	assert_error(sg_sampler_sample(s, logits, 7, &r), SG_ERR_INVALID_ARG, "7 logits given");
	cr_assert_eq(sg_sampler_sample(s, logits, 8, &r), SG_OK);
	cr_assert_eq(r.token, 7, "greedy takes the largest logit");
	sg_sampler_free(s);
}

Test(api, tokens_round_trip_and_ids_outside_the_vocabulary_are_range_errors)
{
	model_dir m = make_model();
	sg_llm *llm = load(&m, 0);
	cr_assert_eq(sg_llm_n_vocab(llm), N_VOCAB);
	cr_assert_eq(sg_model_n_vocab(sg_llm_model(llm)), N_VOCAB);
	cr_assert_eq(sg_llm_n_ctx(llm), 256, "the fixture's context");
	size_t n_eos = 0;
	const int32_t *eos = sg_llm_eos(llm, &n_eos);
	int has_im_end = 0;
	for (size_t i = 0; i < n_eos; i++) has_im_end |= eos[i] == 4;
	cr_assert(has_im_end, "<|im_end|> (id 4) ends an answer");

	const char *text = "hello world, caf\xC3\xA9";
	int32_t *ids = NULL;
	size_t n = 0;
	cr_assert_eq(sg_llm_tokenize(llm, text, strlen(text), 0, &ids, &n), SG_OK, "%s", sg_last_error());
	cr_assert_eq(ids[0], 5 + 256 + 1 + ('h' - 'a'), "'h' has its own token");
	char *back = NULL;
	size_t len = 0;
	cr_assert_eq(sg_llm_detokenize(llm, ids, n, &back, &len), SG_OK, "%s", sg_last_error());
	cr_assert_str_eq(back, text);
	cr_assert_eq(len, strlen(text));
	sg_free(back);
	sg_free(ids);

	char *piece = NULL;
	cr_assert_eq(sg_llm_token_text(llm, 3, &piece, &len), SG_OK, "%s", sg_last_error());
	cr_assert_str_eq(piece, "<|im_start|>");
	sg_free(piece);
	assert_error(sg_llm_token_text(llm, N_VOCAB, &piece, &len), SG_ERR_RANGE, "id 384, outside the vocabulary [0, 384)");
	cr_assert_null(piece);
	assert_error(sg_llm_token_text(llm, -1, &piece, &len), SG_ERR_RANGE, "id -1");
	assert_error(sg_llm_detokenize(llm, (const int32_t[]){7, 9, N_VOCAB + 5}, 3, &back, &len), SG_ERR_RANGE,
		     "token 2 is id 389");
	assert_error(sg_llm_detokenize(llm, NULL, 2, &back, &len), SG_ERR_INVALID_ARG, "ids is NULL");
	assert_error(sg_llm_tokenize(llm, NULL, 3, 0, &ids, &n), SG_ERR_INVALID_ARG, "text is NULL");
	sg_llm_free(llm);
	remove_model(&m);
}

Test(api, chat_prompt_renders_the_template_and_refuses_bad_messages)
{
	model_dir m = make_model();
	sg_llm *llm = load(&m, 0);
	cr_assert(sg_llm_has_chat_template(llm));
	sg_message msgs[] = {{.role = "system", .content = "be brief"}, {.role = "user", .content = "hi"}};
	char *p = NULL;
	size_t len = 0;
	cr_assert_eq(sg_llm_chat_prompt(llm, msgs, 2, 1, &p, &len), SG_OK, "%s", sg_last_error());
	cr_assert_str_eq(p, "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
	cr_assert_eq(len, strlen(p));
	sg_free(p);
	cr_assert_eq(sg_llm_chat_prompt(llm, msgs + 1, 1, 0, &p, &len), SG_OK, "%s", sg_last_error());
	cr_assert_str_eq(p, "<|im_start|>user\nhi<|im_end|>\n", "no generation prompt when not asked");
	sg_free(p);
	assert_error(sg_llm_chat_prompt(llm, msgs, 0, 1, &p, &len), SG_ERR_INVALID_ARG, "no messages");
	assert_error(sg_llm_chat_prompt(llm, NULL, 1, 1, &p, &len), SG_ERR_INVALID_ARG, "no messages");
	sg_message bad[] = {{.role = "user", .content = "ok"}, {.role = "user", .content = NULL}};
	assert_error(sg_llm_chat_prompt(llm, bad, 2, 1, &p, &len), SG_ERR_INVALID_ARG, "messages[1] has no content");
	bad[1] = (sg_message){.role = NULL, .content = "x"};
	assert_error(sg_llm_chat_prompt(llm, bad, 2, 1, &p, &len), SG_ERR_INVALID_ARG, "messages[1] has no role");
	bad[1] = (sg_message){.role = "user", .content = "\xC3("};
	assert_error(sg_llm_chat_prompt(llm, bad, 2, 1, &p, &len), SG_ERR_INVALID_ARG, "UTF-8");
	cr_assert_null(p);
	assert_error(sg_llm_chat_prompt(llm, msgs, 1, 1, NULL, &len), SG_ERR_INVALID_ARG, "prompt and len are required");
	sg_llm_free(llm);
	remove_model(&m);
}

Test(api, generate_refuses_bad_prompts_and_params_and_keeps_working)
{
	model_dir m = make_model();
	sg_llm *llm = load(&m, 32);
	sg_llm_gen_params gp = sg_llm_gen_default_params();
	gp.max_tokens = 2;
	sg_llm_gen_result res;
	assert_error(sg_llm_generate(llm, (const int32_t[]){3, N_VOCAB}, 2, &gp, &res), SG_ERR_RANGE,
		     "prompt token 1 is id 384, outside the vocabulary [0, 384)");
	assert_error(sg_llm_generate(llm, (const int32_t[]){3, -7}, 2, &gp, &res), SG_ERR_RANGE, "id -7");
	assert_error(sg_llm_generate(llm, (const int32_t[]){3}, 0, &gp, &res), SG_ERR_INVALID_ARG, "the prompt is empty");
	assert_error(sg_llm_generate(llm, NULL, 3, &gp, &res), SG_ERR_INVALID_ARG, "the prompt is empty");
	assert_error(sg_llm_generate(llm, (const int32_t[]){3}, 1, NULL, &res), SG_ERR_INVALID_ARG, "params is NULL");
	int32_t long_prompt[40];
	for (int i = 0; i < 40; i++) long_prompt[i] = 270 + i % 20;
	assert_error(sg_llm_generate(llm, long_prompt, 40, &gp, &res), SG_ERR_RANGE, "prompt has 40 tokens, the context holds 32");
	gp.max_tokens = 0;
	assert_error(sg_llm_generate(llm, (const int32_t[]){3}, 1, &gp, &res), SG_ERR_INVALID_ARG, "max_tokens = 0");
	gp = sg_llm_gen_default_params();
	gp.max_tokens = 2;
	gp.sampler.min_p = 2;
	assert_error(sg_llm_generate(llm, (const int32_t[]){3}, 1, &gp, &res), SG_ERR_INVALID_ARG, "min_p");
	gp.sampler = sg_sampler_default_params();
	gp.n_stop = 1;
	assert_error(sg_llm_generate(llm, (const int32_t[]){3}, 1, &gp, &res), SG_ERR_INVALID_ARG, "stop is NULL");
	const char *stops[] = {"ab", NULL};
	gp.stop = stops;
	gp.n_stop = 2;
	assert_error(sg_llm_generate(llm, (const int32_t[]){3}, 1, &gp, &res), SG_ERR_INVALID_ARG, "stop[1] is NULL");
	gp.n_stop = 0;
	gp.sampler.seed = 42;
	cr_assert_eq(sg_llm_generate(llm, (const int32_t[]){3, 270, 271}, 3, &gp, &res), SG_OK, "%s", sg_last_error());
	cr_assert_eq(res.n_prompt, 3);
	cr_assert_eq(res.seed, 42);
	cr_assert(res.n_generated >= 1 && res.n_generated <= 2);
	cr_assert_neq(res.finish, SG_LLM_FINISH_NONE);
	sg_llm_free(llm);
	remove_model(&m);
}

typedef struct collected {
	int32_t tokens[64];
	int n_tokens;
	char text[4096];
	size_t len;
	int calls, tail_calls, last_token, stop_after;
} collected;

static int collect(int32_t token, const char *text, size_t len, void *user)
{
	collected *c = user;
	c->calls++;
	c->last_token = token;
	if (token >= 0) {
		cr_assert_eq(c->tail_calls, 0, "no token after the tail");
		cr_assert_lt(c->n_tokens, 64);
		c->tokens[c->n_tokens++] = token;
	} else {
		c->tail_calls++;
	}
	cr_assert_lt(c->len + len, sizeof c->text);
	memcpy(c->text + c->len, text, len);
	c->len += len;
	c->text[c->len] = 0;
	return c->stop_after && c->n_tokens >= c->stop_after;
}

static int is_eos(sg_llm *llm, int32_t t)
{
	size_t n = 0;
	const int32_t *eos = sg_llm_eos(llm, &n);
	for (size_t i = 0; i < n; i++)
		if (eos[i] == t) return 1;
	return 0;
}

Test(api, greedy_answer_is_what_a_session_and_sampler_loop_gives, .timeout = 120)
{
	model_dir m = make_model();
	sg_llm *llm = load(&m, 0);
	size_t n = 0;
	int32_t *ids = chat_ids(llm, "what is the capital of france", &n);
	sg_llm_gen_params gp = sg_llm_gen_default_params();
	gp.sampler.temperature = 0;
	gp.max_tokens = 24;
	collected c = {0};
	gp.on_token = collect;
	gp.user = &c;
	sg_llm_gen_result res;
	cr_assert_eq(sg_llm_generate(llm, ids, n, &gp, &res), SG_OK, "%s", sg_last_error());
	cr_assert_eq((size_t)c.n_tokens, res.n_generated);
	cr_assert_eq(c.last_token, -1, "the last call is the tail");
	cr_assert_eq(res.n_prompt, n);
	cr_assert_eq(res.n_cached, 0);
	cr_assert_eq(res.stop_index, -1);

	/* The same tokens from the public building blocks: a session of the same model, the logits
	 * of the prompt, greedy samples fed back one at a time. */
	sg_session_params sp = sg_session_default_params();
	sp.kv_type = SG_KV_F32;
	sg_session *s = NULL;
	cr_assert_eq(sg_session_new(sg_llm_model(llm), &sp, &s), SG_OK, "%s", sg_last_error());
	sg_sampler_params smp = sg_sampler_default_params();
	smp.temperature = 0;
	sg_sampler *sampler = NULL;
	cr_assert_eq(sg_sampler_create(&smp, N_VOCAB, &sampler), SG_OK);
	cr_assert_eq(sg_session_eval(s, ids, (int)n, NULL), SG_OK, "%s", sg_last_error());
	int32_t want[64];
	int nw = 0, ended = 0;
	while (nw < gp.max_tokens) {
		sg_sample_result r;
		cr_assert_eq(sg_sampler_sample(sampler, sg_session_logits(s), N_VOCAB, &r), SG_OK);
		want[nw++] = r.token;
		if (is_eos(llm, r.token)) {
			ended = 1;
			break;
		}
		cr_assert_eq(sg_session_eval(s, &r.token, 1, NULL), SG_OK, "%s", sg_last_error());
	}
	cr_assert_eq(c.n_tokens, nw, "streamed %d tokens, the loop gives %d", c.n_tokens, nw);
	for (int i = 0; i < nw; i++) cr_assert_eq(c.tokens[i], want[i], "token %d: %d != %d", i, c.tokens[i], want[i]);
	cr_assert_eq(res.finish, ended ? SG_LLM_FINISH_STOP : SG_LLM_FINISH_LENGTH);
	cr_assert_str_eq(sg_llm_finish_str(res.finish), ended ? "stop" : "length");

	/* The pieces, in order, are the answer's text (an end-of-turn token adds none). */
	char *text = NULL;
	size_t len = 0;
	cr_assert_eq(sg_llm_detokenize(llm, want, (size_t)(nw - ended), &text, &len), SG_OK, "%s", sg_last_error());
	cr_assert_eq(c.len, len);
	cr_assert(!memcmp(c.text, text, len), "streamed '%s', decoded '%s'", c.text, text);
	sg_free(text);
	sg_sampler_free(sampler);
	sg_session_free(s);
	sg_free(ids);
	sg_llm_free(llm);
	remove_model(&m);
}

Test(api, second_turn_reuses_the_first_and_reset_forgets_it, .timeout = 120)
{
	model_dir m = make_model();
	sg_llm *llm = load(&m, 0);
	size_t n = 0;
	int32_t *ids = chat_ids(llm, "hello", &n);
	sg_llm_gen_params gp = sg_llm_gen_default_params();
	gp.sampler.temperature = 0;
	gp.max_tokens = 6;
	collected c = {0};
	gp.on_token = collect;
	gp.user = &c;
	sg_llm_gen_result res;
	cr_assert_eq(sg_llm_generate(llm, ids, n, &gp, &res), SG_OK, "%s", sg_last_error());
	/* Turn two: the first prompt, its answer, then a new message. */
	int32_t turn2[256];
	memcpy(turn2, ids, n * sizeof *ids);
	memcpy(turn2 + n, c.tokens, (size_t)c.n_tokens * sizeof *ids);
	size_t n2 = n + (size_t)c.n_tokens;
	const int32_t more[] = {4, 3, 270, 271, 272};
	memcpy(turn2 + n2, more, sizeof more);
	n2 += sizeof more / sizeof *more;
	collected c2 = {0};
	gp.user = &c2;
	cr_assert_eq(sg_llm_generate(llm, turn2, n2, &gp, &res), SG_OK, "%s", sg_last_error());
	/* the state holds the prompt and every answer token but the last (never evaluated) */
	cr_assert_eq(res.n_cached, n + (size_t)c.n_tokens - 1, "cached %zu of %zu", res.n_cached, n2);
	cr_assert_eq(sg_llm_reset(llm), SG_OK);
	collected c3 = {0};
	gp.user = &c3;
	cr_assert_eq(sg_llm_generate(llm, turn2, n2, &gp, &res), SG_OK, "%s", sg_last_error());
	cr_assert_eq(res.n_cached, 0, "after a reset the whole prompt is evaluated");
	cr_assert_eq(c3.n_tokens, c2.n_tokens, "the same answer with or without the reuse");
	cr_assert(!memcmp(c3.tokens, c2.tokens, (size_t)c2.n_tokens * sizeof *c2.tokens));
	sg_free(ids);
	sg_llm_free(llm);
	remove_model(&m);
}

Test(api, callback_stops_the_answer, .timeout = 120)
{
	model_dir m = make_model();
	sg_llm *llm = load(&m, 0);
	sg_llm_gen_params gp = sg_llm_gen_default_params();
	gp.sampler.temperature = 0;
	gp.max_tokens = 20;
	collected c = {.stop_after = 2};
	gp.on_token = collect;
	gp.user = &c;
	sg_llm_gen_result res;
	cr_assert_eq(sg_llm_generate(llm, (const int32_t[]){3, 270, 271, 272}, 4, &gp, &res), SG_OK, "%s", sg_last_error());
	if (res.finish == SG_LLM_FINISH_STOP) cr_assert_leq(c.n_tokens, 2, "ended on its own first");
	else cr_assert_eq(res.finish, SG_LLM_FINISH_CANCELLED);
	cr_assert_eq(res.n_generated, (size_t)c.n_tokens);
	cr_assert_leq(c.n_tokens, 2);
	cr_assert_eq(c.last_token, -1);
	sg_llm_free(llm);
	remove_model(&m);
}

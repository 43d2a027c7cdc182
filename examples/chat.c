/*
 * chat: one chat turn through libsaragossa's public header, and nothing else.
 *
 *     chat MODEL MESSAGE [MAX_TOKENS]
 *
 * Loads MODEL (a Hugging Face folder or a .gguf file) with its tokenizer and chat template,
 * renders MESSAGE as a user message, and streams the greedy reply to stdout as it is decoded,
 * ending with a newline; the finish reason and token counts go to stderr. The reply is the one
 * `saragossa generate --chat --temperature 0` prints for the same model and message (`make test`
 * checks it: tests/e2e/test_example.py).
 */
#include <saragossa.h>
#include <stdio.h>
#include <stdlib.h>

/* Each piece is complete UTF-8: it can be written out as it comes. */
static int print_piece(int32_t token, const char *text, size_t len, void *user)
{
	(void)token;
	(void)user;
	fwrite(text, 1, len, stdout);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: chat MODEL MESSAGE [MAX_TOKENS]\n");
		return 2;
	}
	char *end = NULL;
	long max_tokens = argc == 4 ? strtol(argv[3], &end, 10) : 128;
	if (argc == 4 && (*end || max_tokens < 1 || max_tokens > 1 << 20)) {
		fprintf(stderr, "chat: MAX_TOKENS wants an integer >= 1, got '%s'\n", argv[3]);
		return 2;
	}

	sg_llm_params lp = sg_llm_default_params();
	sg_llm *llm = NULL;
	if (sg_llm_load(argv[1], &lp, &llm)) {
		fprintf(stderr, "chat: %s\n", sg_last_error());
		return 1;
	}
	int rc = 1;
	char *prompt = NULL;
	int32_t *ids = NULL;
	size_t len = 0, n = 0;
	if (!sg_llm_has_chat_template(llm)) {
		fprintf(stderr, "chat: %s has no chat template\n", argv[1]);
		goto done;
	}
	sg_message msg = {.role = "user", .content = argv[2]};
	/* The rendered prompt spells its own special tokens: tokenized without adding any. */
	if (sg_llm_chat_prompt(llm, &msg, 1, 1, &prompt, &len) || sg_llm_tokenize(llm, prompt, len, 0, &ids, &n)) {
		fprintf(stderr, "chat: %s\n", sg_last_error());
		goto done;
	}
	sg_llm_gen_params gp = sg_llm_gen_default_params();
	gp.sampler.temperature = 0; /* greedy: the same reply on every run */
	gp.max_tokens = (int)max_tokens;
	gp.on_token = print_piece;
	sg_llm_gen_result res;
	if (sg_llm_generate(llm, ids, n, &gp, &res)) {
		fprintf(stderr, "\nchat: %s\n", sg_last_error());
		goto done;
	}
	printf("\n");
	fprintf(stderr, "finish: %s, prompt tokens: %zu, generated tokens: %zu\n", sg_llm_finish_str(res.finish),
		res.n_prompt, res.n_generated);
	rc = 0;
done:
	sg_free(ids);
	sg_free(prompt);
	sg_llm_free(llm);
	return rc;
}

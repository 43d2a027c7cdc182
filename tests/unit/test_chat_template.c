/* Unit tests of src/text/template/chat_template.c: where templates come from, the variables a template sees,
 * transformers' message normalisation, and bad GGUF / config input. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "text/template/chat_template.h"

static char *render_src(const char *src, const char *special, const char *msgs, const char *tools, const char *kwargs,
			int agp, sg_status *st_out)
{
	json_t *sp = special ? json_loads(special, 0, NULL) : NULL;
	json_t *m = json_loads(msgs, 0, NULL), *t = tools ? json_loads(tools, 0, NULL) : NULL;
	json_t *kw = kwargs ? json_loads(kwargs, 0, NULL) : NULL;
	sg_chat_template *ct;
	sg_status st = sg_chat_template_from_source(src, strlen(src), sp, &ct);
	char *out = NULL;
	if (!st) {
		sg_chat_params p = {.messages = m, .tools = t, .add_generation_prompt = agp, .kwargs = kw};
		st = sg_chat_template_render(ct, &p, &out, NULL);
		sg_chat_template_free(ct);
	}
	if (st_out) *st_out = st;
	json_decref(sp);
	json_decref(m);
	json_decref(t);
	json_decref(kw);
	return out;
}

Test(chat_template, passes_transformers_variables)
{
	char *out = render_src("{{ bos_token }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|{{ enable_thinking }}|{{ messages | length }}",
			       "{\"bos_token\": \"<s>\"}", "[{\"role\": \"user\", \"content\": \"x\"}]", NULL, "{\"enable_thinking\": false}", 1, NULL);
	cr_assert(out != NULL, "%s", sg_last_error());
	cr_expect_str_eq(out, "<s>|True|True|True|False|1");
	sg_free(out);
}

Test(chat_template, kwargs_override_special_tokens)
{
	char *out = render_src("{{ bos_token }}", "{\"bos_token\": \"<s>\"}", "[{\"role\": \"user\"}]", NULL, "{\"bos_token\": \"B\"}", 0, NULL);
	cr_assert(out != NULL, "%s", sg_last_error());
	cr_expect_str_eq(out, "B");
	sg_free(out);
}

Test(chat_template, drops_null_keys_and_aliases_reasoning)
{
	/* {"thinking": r, **message, "reasoning_content": r} after dropping null values */
	char *out = render_src("{% for m in messages %}{{ m | tojson }};{% endfor %}", NULL,
			       "[{\"role\": \"assistant\", \"content\": null, \"reasoning\": \"why\"},"
			       " {\"role\": \"assistant\", \"content\": \"a\", \"reasoning_content\": \"r\"},"
			       " {\"role\": \"user\", \"content\": \"u\", \"tool_calls\": null}]",
			       NULL, NULL, 0, NULL);
	cr_assert(out != NULL, "%s", sg_last_error());
	cr_expect_str_eq(out,
			 "{\"thinking\": \"why\", \"role\": \"assistant\", \"reasoning\": \"why\", \"reasoning_content\": \"why\"};"
			 "{\"thinking\": \"r\", \"role\": \"assistant\", \"content\": \"a\", \"reasoning_content\": \"r\"};"
			 "{\"role\": \"user\", \"content\": \"u\"};");
	sg_free(out);
}

Test(chat_template, rejects_bad_conversations)
{
	sg_status st;
	cr_expect(render_src("x", NULL, "[]", NULL, NULL, 0, &st) == NULL);
	cr_expect(strstr(sg_last_error(), "empty conversation") != NULL, "%s", sg_last_error());
	cr_expect(render_src("x", NULL, "[1]", NULL, NULL, 0, &st) == NULL);
	cr_expect(strstr(sg_last_error(), "messages[0] must be a JSON object") != NULL, "%s", sg_last_error());
	cr_expect(render_src("x", NULL, "[{}]", "[1]", NULL, 0, &st) == NULL);
	cr_expect(strstr(sg_last_error(), "tools[0]") != NULL, "%s", sg_last_error());
}

static char tmpdir[256];

static void write_file(const char *name, const void *data, size_t n)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", tmpdir, name);
	FILE *f = fopen(p, "wb");
	cr_assert(f != NULL);
	fwrite(data, 1, n, f);
	fclose(f);
}

static void make_tmpdir(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/sg_ct_XXXXXX");
	cr_assert(mkdtemp(tmpdir) != NULL);
}

static char *render_model(const char *path, const char *tools, sg_status *st)
{
	sg_chat_template *ct;
	*st = sg_chat_template_load(path, &ct);
	if (*st) return NULL;
	json_t *m = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}]", 0, NULL);
	json_t *t = tools ? json_loads(tools, 0, NULL) : NULL;
	sg_chat_params p = {.messages = m, .tools = t};
	char *out = NULL;
	*st = sg_chat_template_render(ct, &p, &out, NULL);
	json_decref(m);
	json_decref(t);
	sg_chat_template_free(ct);
	return out;
}

Test(chat_template, folder_sources_in_transformers_priority)
{
	make_tmpdir();
	const char *cfg = "{\"bos_token\": {\"content\": \"<B>\", \"special\": true}, \"chat_template\": "
			  "[{\"name\": \"default\", \"template\": \"D{{ bos_token }}\"}, {\"name\": \"tool_use\", \"template\": \"T\"}]}";
	write_file("tokenizer_config.json", cfg, strlen(cfg));
	sg_status st;
	char *out = render_model(tmpdir, NULL, &st);
	cr_assert(out != NULL, "%s", sg_last_error());
	cr_expect_str_eq(out, "D<B>");
	sg_free(out);
	out = render_model(tmpdir, "[{\"type\": \"function\"}]", &st);
	cr_assert(out != NULL, "%s", sg_last_error());
	cr_expect_str_eq(out, "T");
	sg_free(out);
	/* chat_template.jinja wins over the config's entry; special_tokens_map.json over the config */
	write_file("chat_template.jinja", "J{{ bos_token }}", 16);
	write_file("special_tokens_map.json", "{\"bos_token\": \"<M>\"}", 20);
	out = render_model(tmpdir, NULL, &st);
	cr_assert(out != NULL, "%s", sg_last_error());
	cr_expect_str_eq(out, "J<M>");
	sg_free(out);
	/* a template with a syntax error names the file */
	write_file("chat_template.jinja", "{% if %}", 8);
	cr_expect(render_model(tmpdir, NULL, &st) == NULL);
	cr_expect(strstr(sg_last_error(), "chat_template.jinja: line 1, column 7") != NULL, "%s", sg_last_error());
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	cr_expect_eq(system(cmd), 0);
}

/* A GGUF with a template and a 3-token vocabulary. */
static size_t make_gguf(uint8_t *buf, size_t cap)
{
	size_t n = 0;
#define PUT(p, len)                                                                                \
	do {                                                                                       \
		cr_assert(n + (len) <= cap);                                                       \
		memcpy(buf + n, (p), (len));                                                       \
		n += (len);                                                                        \
	} while (0)
#define U32(v)                                                                                     \
	do {                                                                                       \
		uint32_t x_ = (v);                                                                 \
		PUT(&x_, 4);                                                                       \
	} while (0)
#define U64(v)                                                                                     \
	do {                                                                                       \
		uint64_t x_ = (v);                                                                 \
		PUT(&x_, 8);                                                                       \
	} while (0)
#define STR(s)                                                                                     \
	do {                                                                                       \
		U64(strlen(s));                                                                    \
		PUT((s), strlen(s));                                                               \
	} while (0)
	PUT("GGUF", 4);
	U32(3);
	U64(0);
	U64(3);
	STR("tokenizer.ggml.tokens");
	U32(9);
	U32(8);
	U64(3);
	STR("<pad>");
	STR("<eos>");
	STR("<bos>");
	STR("tokenizer.ggml.bos_token_id");
	U32(4);
	U32(2);
	STR("tokenizer.chat_template");
	U32(8);
	STR("{{ bos_token }}{{ messages[0].content }}");
	return n;
}

Test(chat_template, gguf_template_and_bos_from_vocabulary)
{
	make_tmpdir();
	uint8_t buf[1024];
	size_t n = make_gguf(buf, sizeof(buf));
	write_file("m.gguf", buf, n);
	char path[512];
	snprintf(path, sizeof(path), "%s/m.gguf", tmpdir);
	sg_status st;
	char *out = render_model(path, NULL, &st);
	cr_assert(out != NULL, "%s", sg_last_error());
	cr_expect_str_eq(out, "<bos>hi");
	sg_free(out);
	/* every truncation is an error, never a crash or a read past the end */
	for (size_t cut = 0; cut < n; cut++) {
		write_file("m.gguf", buf, cut);
		sg_chat_template *ct = NULL;
		st = sg_chat_template_load(path, &ct);
		cr_expect_neq(st, SG_OK, "truncated at %zu loaded", cut);
		sg_chat_template_free(ct);
	}
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	cr_expect_eq(system(cmd), 0);
}

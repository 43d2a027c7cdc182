/* saragossa template: render a model's chat template for a conversation, as transformers'
 * apply_chat_template(..., tokenize=False) would, and print the prompt exactly (no newline added). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/json.h"
#include "cli/cli.h"
#include "saragossa.h"
#include "text/template/chat_template.h"

#define MAX_INPUT (256u << 20)

static int fail(const char *what)
{
	fprintf(stderr, "saragossa: template: %s%s%s\n", what ? what : "", what ? ": " : "", sg_last_error());
	return 1;
}

int sg_cli_template(int argc, char **argv)
{
	const char *model = NULL, *messages_path = NULL, *tools_path = NULL, *name = NULL;
	int add_gen = 0;
	long long now = 0;
	json_t *kwargs = json_object();
	if (!kwargs) return fail("out of memory");
	int rc = 2;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: saragossa template --model M --messages FILE.json [--tools FILE.json] [--add-generation-prompt]\n"
			       "                          [--var NAME=JSON]... [--template-name NAME] [--now EPOCH_SECONDS]\n"
			       "  M is a model folder (tokenizer_config.json / chat_template.jinja), a .gguf file or a .jinja file.\n"
			       "  FILE.json holds the messages array (or an object with \"messages\" and optionally \"tools\").\n"
			       "  --var sets a template variable to a JSON value, e.g. --var enable_thinking=false.\n");
			json_decref(kwargs);
			return 0;
		}
		if (!strcmp(a, "--add-generation-prompt")) {
			add_gen = 1;
			continue;
		}
		if (!strcmp(a, "--model") || !strcmp(a, "--messages") || !strcmp(a, "--tools") || !strcmp(a, "--var") ||
		    !strcmp(a, "--template-name") || !strcmp(a, "--now")) {
			if (!val) {
				json_decref(kwargs);
				return sg_cli_usage_error("template", "%s needs a value", a);
			}
			i++;
			if (!strcmp(a, "--model")) model = val;
			else if (!strcmp(a, "--messages")) messages_path = val;
			else if (!strcmp(a, "--tools")) tools_path = val;
			else if (!strcmp(a, "--template-name")) name = val;
			else if (!strcmp(a, "--now")) {
				char *end;
				now = strtoll(val, &end, 10);
				if (*end || now <= 0) {
					json_decref(kwargs);
					return sg_cli_usage_error("template", "--now needs a positive number of seconds, got '%s'", val);
				}
			} else {
				const char *eq = strchr(val, '=');
				if (!eq || eq == val) {
					json_decref(kwargs);
					return sg_cli_usage_error("template", "--var needs NAME=JSON, got '%s'", val);
				}
				json_error_t err;
				json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, &err);
				if (!v) {
					json_decref(kwargs);
					return sg_cli_usage_error("template", "--var %.*s: the value is not JSON (%s); quote strings: NAME='\"text\"'",
								  (int)(eq - val), val, err.text);
				}
				char key[256];
				snprintf(key, sizeof(key), "%.*s", (int)(eq - val), val);
				json_object_set_new(kwargs, key, v);
			}
			continue;
		}
		json_decref(kwargs);
		return sg_cli_usage_error("template", "unknown option '%s'", a);
	}
	if (!model || !messages_path) {
		json_decref(kwargs);
		return sg_cli_usage_error("template", "--model and --messages are required");
	}
	json_t *msgs = NULL, *tools = NULL, *doc = NULL, *tools_doc = NULL;
	sg_chat_template *ct = NULL;
	char *out = NULL;
	size_t n = 0;
	rc = 1;
	if (sg_json_load_file(messages_path, MAX_INPUT, &doc)) {
		fail(NULL);
		goto done;
	}
	if (json_is_object(doc)) {
		msgs = json_object_get(doc, "messages");
		tools = json_object_get(doc, "tools");
	} else msgs = doc;
	if (!json_is_array(msgs)) {
		fprintf(stderr, "saragossa: template: %s: expected a JSON array of messages (or an object with \"messages\")\n", messages_path);
		goto done;
	}
	if (tools_path) {
		if (sg_json_load_file(tools_path, MAX_INPUT, &tools_doc)) {
			fail(NULL);
			goto done;
		}
		tools = tools_doc;
	}
	if (sg_chat_template_load(model, &ct)) {
		fail(NULL);
		goto done;
	}
	sg_chat_params p = {.messages = msgs, .tools = tools, .add_generation_prompt = add_gen, .kwargs = kwargs,
			    .template_name = name, .now = now};
	if (sg_chat_template_render(ct, &p, &out, &n)) {
		fail(NULL);
		goto done;
	}
	if (n && fwrite(out, 1, n, stdout) != n) {
		fprintf(stderr, "saragossa: template: write error\n");
		goto done;
	}
	if (fflush(stdout)) {
		fprintf(stderr, "saragossa: template: write error\n");
		goto done;
	}
	rc = 0;
done:
	sg_free(out);
	sg_chat_template_free(ct);
	json_decref(doc);
	json_decref(tools_doc);
	json_decref(kwargs);
	return rc;
}

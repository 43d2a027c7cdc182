/* Fuzz target: the Jinja lexer, parser and evaluator on arbitrary template bytes, rendered with a
 * conversation that has tools, tool calls and reasoning. Tight limits keep each input fast; any
 * crash, sanitizer report or leak is a bug, an error status is fine. */
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "text/template/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char VARS[] =
	"{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
	" {\"role\": \"user\", \"content\": \"h\\u00e9llo \\ud83d\\udc4d\"},"
	" {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"hmm\","
	"  \"tool_calls\": [{\"id\": \"abcdefghi\", \"type\": \"function\","
	"   \"function\": {\"name\": \"f\", \"arguments\": {\"x\": [1, 2.5, null, true]}}}]},"
	" {\"role\": \"tool\", \"content\": \"42\", \"tool_call_id\": \"abcdefghi\"}],"
	" \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\":"
	"   {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"array\"}}}}}],"
	" \"add_generation_prompt\": true, \"enable_thinking\": false,"
	" \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static json_t *vars;
	if (!vars) vars = json_loads(VARS, 0, NULL);
	if (size > 65536) return 0;
	sg_jinja_template *t;
	if (sg_jinja_parse((const char *)data, size, "fuzz", &t) != SG_OK) return 0;
	sg_jinja_limits lim = {.max_output = 1 << 20, .max_memory = 64 << 20, .max_steps = 200000, .max_depth = 100,
			       .now = 1721952000};
	char *out = NULL;
	size_t n = 0;
	if (sg_jinja_render(t, vars, &lim, &out, &n) == SG_OK) sg_free(out);
	sg_jinja_free(t);
	return 0;
}

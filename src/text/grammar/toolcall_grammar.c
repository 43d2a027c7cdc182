/* Grammars that force a tool call (tool_choice "required" or a named function): the model's
 * call syntax around a call object whose arguments follow the function's parameters schema. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/toolcall.h"

static const json_t *tool_function(const json_t *tool)
{
	const json_t *f = json_object_get(tool, "function");
	return f ? f : tool;
}

/* {"name": "<name>", "<args_key>": <parameters>} for one tool. */
static sg_status call_object(sg_grammar *g, const json_t *fn, const char *args_key, int *node)
{
	const char *name = json_string_value(json_object_get(fn, "name"));
	if (!name || !*name) return sg_error(SG_ERR_INVALID_ARG, "tools: a function has no name");
	const json_t *params = json_object_get(fn, "parameters");
	json_t *empty = NULL;
	if (!params) params = empty = json_pack("{s:s}", "type", "object");
	int args = 0;
	sg_status st = sg_json_schema_compile_into(g, params, 1, &args, NULL, 0);
	json_decref(empty);
	if (st != SG_OK) return sg_error_wrap(st, "tools: function '%s' parameters", name);
	if (args == 0) return sg_error(SG_ERR_INVALID_ARG, "tools: function '%s' parameters admit no value", name);
	json_t *nm = json_string(name);
	char *lit = nm ? json_dumps(nm, JSON_ENCODE_ANY) : NULL;
	json_decref(nm);
	if (!lit) return SG_FAIL(SG_ERR_NOMEM, "tool name");
	int name_node = sg_grammar_add_literal(g, lit);
	free(lit);
	sg_grammar_prop props[2] = {{"name", 4, name_node, 1}, {args_key, strlen(args_key), args, 1}};
	*node = sg_grammar_add_object(g, props, 2, -1);
	return SG_OK;
}

/* Whether the Qwen XML form writes a parameter as raw text: its schema is a string type (the
 * parser reads such values back as text). */
static int xml_is_text(const json_t *ps)
{
	const json_t *ty = json_object_get(ps, "type");
	if (json_is_string(ty)) return strcmp(json_string_value(ty), "string") == 0;
	for (size_t k = 0; json_is_array(ty) && k < json_array_size(ty); k++)
		if (json_is_string(json_array_get(ty, k)) && strcmp(json_string_value(json_array_get(ty, k)), "string") == 0)
			return 1;
	return 0;
}

/* <tool_call>\n<function=f>\n then each parameter in schema order (optional ones skippable) as
 * <parameter=k>\nVALUE\n</parameter>\n, then </function>\n</tool_call>. A text parameter is raw
 * text (its enum values when it has one); any other constraint on a text parameter cannot be
 * expressed on raw text and is an error; other parameters are JSON constrained by their schema. */
static sg_status xml_call(sg_grammar *g, const json_t *fn, int *node)
{
	static const char *term = "\n</parameter>\n";
	const char *name = json_string_value(json_object_get(fn, "name"));
	if (!name || !*name) return sg_error(SG_ERR_INVALID_ARG, "tools: a function has no name");
	const json_t *params = json_object_get(fn, "parameters");
	const json_t *props = json_object_get(params, "properties");
	const json_t *req = json_object_get(params, "required");
	size_t np = json_object_size(props);
	int *parts = sg_calloc(np + 2, sizeof(int));
	if (!parts) return SG_FAIL(SG_ERR_NOMEM, "tool grammar");
	int n = 0;
	char buf[512];
	snprintf(buf, sizeof(buf), "<tool_call>\n<function=%s>\n", name);
	parts[n++] = sg_grammar_add_literal(g, buf);
	const char *k;
	json_t *ps;
	sg_status st = SG_OK;
	json_object_foreach((json_t *)props, k, ps)
	{
		int required = 0;
		for (size_t i = 0; i < json_array_size(req); i++)
			if (json_is_string(json_array_get(req, i)) && strcmp(json_string_value(json_array_get(req, i)), k) == 0)
				required = 1;
		snprintf(buf, sizeof(buf), "<parameter=%s>\n", k);
		int seq[3], ns = 0;
		seq[ns++] = sg_grammar_add_literal(g, buf);
		if (xml_is_text(ps)) {
			const json_t *en = json_object_get(ps, "enum");
			if (json_object_get(ps, "const")) en = NULL;
			const char *kw = json_object_get(ps, "const") ? "const" : json_object_get(ps, "pattern") ? "pattern"
				       : json_object_get(ps, "format") ? "format" : json_object_get(ps, "minLength") ? "minLength"
				       : json_object_get(ps, "maxLength") ? "maxLength" : NULL;
			if (kw) {
				st = sg_error(SG_ERR_UNSUPPORTED, "tools: function '%s' parameter '%s': '%s' is not enforced on XML text values", name, k, kw);
				break;
			}
			if (json_is_array(en)) {
				size_t ne = json_array_size(en);
				const char **vals = sg_calloc(ne + 1, sizeof(char *));
				size_t *lens = sg_calloc(ne + 1, sizeof(size_t));
				char **own = sg_calloc(ne + 1, sizeof(char *));
				int m = 0;
				for (size_t i = 0; vals && lens && own && i < ne; i++) {
					const json_t *v = json_array_get(en, i);
					if (!json_is_string(v)) continue;
					size_t l = json_string_length(v) + strlen(term);
					own[m] = sg_malloc(l + 1);
					if (!own[m]) break;
					snprintf(own[m], l + 1, "%s%s", json_string_value(v), term);
					vals[m] = own[m];
					lens[m] = l;
					m++;
				}
				seq[ns++] = m ? sg_grammar_add_literals(g, vals, lens, m) : 0;
				for (int i = 0; i < m; i++) sg_free(own[i]);
				sg_free(own);
				sg_free(vals);
				sg_free(lens);
			} else {
				seq[ns++] = sg_grammar_add_raw_until(g, term);
			}
		} else {
			int v = 0;
			st = sg_json_schema_compile_into(g, ps, 1, &v, NULL, 0);
			if (st != SG_OK) {
				st = sg_error_wrap(st, "tools: function '%s' parameters", name);
				break;
			}
			seq[ns++] = v;
			seq[ns++] = sg_grammar_add_literal(g, term);
		}
		int one = sg_grammar_add_seq(g, seq, ns, 0);
		parts[n++] = required ? one : sg_grammar_add_repeat(g, one, 0, 1, 0);
	}
	if (st == SG_OK) {
		parts[n++] = sg_grammar_add_literal(g, "</function>\n</tool_call>");
		*node = sg_grammar_add_seq(g, parts, n, 0);
	}
	sg_free(parts);
	return st;
}

sg_status sg_toolcall_grammar(sg_toolcall_syntax syntax, const json_t *tools, const char *name,
			      int max_calls, sg_grammar **out)
{
	*out = NULL;
	if (syntax != SG_TC_HERMES && syntax != SG_TC_LLAMA3 && syntax != SG_TC_MISTRAL &&
	    syntax != SG_TC_QWEN_XML)
		return SG_FAIL(SG_ERR_UNSUPPORTED, "forcing tool calls is not supported for this syntax");
	if (!json_is_array(tools) || json_array_size(tools) == 0)
		return sg_error(SG_ERR_INVALID_ARG, "tool_choice needs a non-empty tools array");
	if (max_calls < 1) max_calls = 1;
	sg_grammar *g = sg_grammar_new();
	if (!g) return SG_FAIL(SG_ERR_NOMEM, "grammar");
	size_t n = json_array_size(tools);
	int *alts = sg_calloc(n, sizeof(int));
	sg_status st = alts ? SG_OK : SG_FAIL(SG_ERR_NOMEM, "tools");
	int k = 0;
	const char *args_key = syntax == SG_TC_LLAMA3 ? "parameters" : "arguments";
	for (size_t i = 0; st == SG_OK && i < n; i++) {
		const json_t *fn = tool_function(json_array_get(tools, i));
		const char *fname = json_string_value(json_object_get(fn, "name"));
		if (name && (!fname || strcmp(fname, name) != 0)) continue;
		st = syntax == SG_TC_QWEN_XML ? xml_call(g, fn, &alts[k]) : call_object(g, fn, args_key, &alts[k]);
		if (st == SG_OK) k++;
	}
	if (st == SG_OK && k == 0) st = sg_error(SG_ERR_INVALID_ARG, "tool_choice names '%s', which is not in tools", name ? name : "");
	if (st == SG_OK) {
		int call = sg_grammar_add_union(g, alts, k), root;
		if (syntax == SG_TC_QWEN_XML) {
			root = sg_grammar_add_repeat(g, call, 1, max_calls, 1);
		} else if (syntax == SG_TC_HERMES) {
			int seq[] = {sg_grammar_add_literal(g, "<tool_call>\n"), call,
				     sg_grammar_add_literal(g, "\n</tool_call>")};
			int one = sg_grammar_add_seq(g, seq, 3, 0);
			root = sg_grammar_add_repeat(g, one, 1, max_calls, 1);
		} else if (syntax == SG_TC_LLAMA3) {
			int sep = sg_grammar_add_literal(g, ";");
			int more[] = {sep, call};
			int tail = sg_grammar_add_seq(g, more, 2, 1);
			int rep = sg_grammar_add_repeat(g, tail, 0, max_calls - 1, 1);
			int seq[] = {call, rep};
			root = max_calls > 1 ? sg_grammar_add_seq(g, seq, 2, 1) : call;
		} else {
			int seq[] = {sg_grammar_add_literal(g, "[TOOL_CALLS]"),
				     sg_grammar_add_array(g, call, 1, max_calls)};
			root = sg_grammar_add_seq(g, seq, 2, 0);
		}
		st = sg_grammar_finish(g, root);
	}
	sg_free(alts);
	if (st != SG_OK) {
		sg_grammar_free(g);
		return st;
	}
	*out = g;
	return SG_OK;
}

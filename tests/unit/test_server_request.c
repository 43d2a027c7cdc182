/* Request parsing (bodies -> generation parameters) and the bearer check of the server. */
#include <criterion/criterion.h>
#include <string.h>

#include "server/request.h"
#include "server/routes.h"
#include "server/server.h"

static const sg_srv_limits LIM = {.max_tokens_cap = 4096};

static int parse(sg_srv_route r, const char *body, sg_srv_req *q, sg_srv_err *e)
{
	return sg_srv_parse_request(r, body, strlen(body), &LIM, q, e);
}

Test(server_request, openai_chat_maps_every_sampling_field)
{
	sg_srv_req q;
	sg_srv_err e;
	int st = parse(SG_ROUTE_OAI_CHAT,
		       "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
		       "{\"type\":\"text\",\"text\":\"b\"}]}],\"max_completion_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,"
		       "\"top_k\":5,\"min_p\":0.1,\"seed\":42,\"stop\":\"END\",\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,"
		       "\"logit_bias\":{\"3\":-100},\"logprobs\":true,\"top_logprobs\":3,\"stream\":true,"
		       "\"stream_options\":{\"include_usage\":true},\"user\":\"u1\",\"n\":1}",
		       &q, &e);
	cr_assert_eq(st, 0, "%s", e.message);
	cr_assert_str_eq(q.model, "m");
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(q.messages, 0), "content")), "ab");
	cr_assert_eq(q.max_tokens, 7);
	cr_assert_float_eq(q.sp.temperature, 0.5f, 1e-6);
	cr_assert_float_eq(q.sp.top_p, 0.9f, 1e-6);
	cr_assert_eq(q.sp.top_k, 5);
	cr_assert_eq(q.sp.seed, 42);
	cr_assert_eq(q.n_stop, 1);
	cr_assert_str_eq(q.stop[0], "END");
	cr_assert_eq(q.sp.n_logit_bias, 1);
	cr_assert_eq(q.sp.logit_bias[0].token, 3);
	cr_assert(q.sp.logprobs && q.sp.top_logprobs == 3);
	cr_assert(q.stream && q.include_usage);
	cr_assert_str_eq(q.user, "u1");
	sg_srv_req_free(&q);
}

Test(server_request, max_tokens_is_capped_and_defaults_to_the_cap)
{
	sg_srv_req q;
	sg_srv_err e;
	cr_assert_eq(parse(SG_ROUTE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":100000}", &q, &e), 0);
	cr_assert_eq(q.max_tokens, 4096);
	sg_srv_req_free(&q);
	cr_assert_eq(parse(SG_ROUTE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &q, &e), 0);
	cr_assert_eq(q.max_tokens, 4096);
	cr_assert_not(q.max_tokens_given);
	sg_srv_req_free(&q);
}

Test(server_request, wrong_types_name_the_field)
{
	sg_srv_req q;
	sg_srv_err e;
	cr_assert_eq(parse(SG_ROUTE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}", &q, &e), 400);
	cr_assert_str_eq(e.param, "temperature");
	cr_assert(strstr(e.message, "must be a number, got string"), "%s", e.message);
	sg_srv_req_free(&q);
	cr_assert_eq(parse(SG_ROUTE_OLLAMA_GENERATE, "{\"model\":\"m\",\"options\":{\"top_k\":\"x\"}}", &q, &e), 400);
	cr_assert_str_eq(e.param, "options.top_k");
	sg_srv_req_free(&q);
}

Test(server_request, malformed_json_names_the_position)
{
	sg_srv_req q;
	sg_srv_err e;
	cr_assert_eq(parse(SG_ROUTE_OAI_CHAT, "{\"messages\": [,]}", &q, &e), 400);
	cr_assert(strstr(e.message, "line 1, column 15"), "%s", e.message);
	sg_srv_req_free(&q);
}

Test(server_request, n_choices_between_one_and_the_cap)
{
	sg_srv_req q;
	sg_srv_err e;
	cr_assert_eq(parse(SG_ROUTE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":3}", &q, &e), 0);
	cr_assert_eq(q.n_choices, 3);
	sg_srv_req_free(&q);
	cr_assert_eq(parse(SG_ROUTE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &q, &e), 0);
	cr_assert_eq(q.n_choices, 1);
	sg_srv_req_free(&q);
	cr_assert_eq(parse(SG_ROUTE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":17}", &q, &e), 400);
	cr_assert_str_eq(e.param, "n");
	sg_srv_req_free(&q);
	cr_assert_eq(parse(SG_ROUTE_OAI_COMPLETIONS, "{\"prompt\":\"x\",\"n\":0}", &q, &e), 400);
	cr_assert_str_eq(e.param, "n");
	sg_srv_req_free(&q);
}

Test(server_request, ollama_defaults_options_and_streaming)
{
	sg_srv_req q;
	sg_srv_err e;
	cr_assert_eq(parse(SG_ROUTE_OLLAMA_GENERATE,
			   "{\"model\":\"m\",\"prompt\":\"p\",\"options\":{\"num_predict\":9,\"temperature\":0,\"seed\":7,"
			   "\"stop\":[\"a\",\"b\"],\"repeat_penalty\":1.2},\"template\":\"{{ .Prompt }}\",\"keep_alive\":\"5m\"}",
			   &q, &e),
		     0, "%s", e.message);
	cr_assert(q.stream, "Ollama streams by default");
	cr_assert_eq(q.max_tokens, 9);
	cr_assert_float_eq(q.sp.temperature, 0.0f, 1e-9);
	cr_assert_eq(q.sp.seed, 7);
	cr_assert_eq(q.n_stop, 2);
	cr_assert_float_eq(q.sp.repetition_penalty, 1.2f, 1e-6);
	cr_assert(strstr(q.note, "template"), "the ignored template is noted");
	sg_srv_req_free(&q);
}

Test(server_request, completion_prompt_as_token_ids)
{
	sg_srv_req q;
	sg_srv_err e;
	cr_assert_eq(parse(SG_ROUTE_OAI_COMPLETIONS, "{\"prompt\":[5,6,7],\"logprobs\":2}", &q, &e), 0, "%s", e.message);
	cr_assert_eq(q.n_prompt_ids, 3);
	cr_assert_eq(q.prompt_ids[2], 7);
	cr_assert(q.logprobs && q.top_logprobs == 2);
	sg_srv_req_free(&q);
}

Test(server_request, bearer_check_accepts_only_the_exact_key)
{
	cr_assert(sg_server_auth_ok("Bearer secret", "secret"));
	cr_assert(sg_server_auth_ok("bearer  secret ", "secret"));
	cr_assert_not(sg_server_auth_ok(NULL, "secret"));
	cr_assert_not(sg_server_auth_ok("Bearer secre", "secret"));
	cr_assert_not(sg_server_auth_ok("Bearer secretx", "secret"));
	cr_assert_not(sg_server_auth_ok("Bearer Secret", "secret"));
	cr_assert_not(sg_server_auth_ok("secret", "secret"));
	cr_assert_not(sg_server_auth_ok("Basic secret", "secret"));
	cr_assert_not(sg_server_auth_ok("Bearer ", "secret"));
}

/* ---- the Responses API: its body becomes a chat request ---- */

Test(server_request, responses_input_items_become_chat_messages)
{
	sg_srv_req q;
	sg_srv_err e;
	int st = parse(SG_ROUTE_OAI_RESPONSES,
		       "{\"model\":\"m\",\"instructions\":\"sys\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
		       "\"text\":\"a\"},{\"type\":\"input_text\",\"text\":\"b\"}]},{\"type\":\"function_call\",\"name\":\"f\","
		       "\"call_id\":\"c1\",\"arguments\":\"{\\\"x\\\":1}\"},{\"type\":\"function_call\",\"name\":\"f\",\"call_id\":\"c2\","
		       "\"arguments\":\"{}\"},{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"ok\"},"
		       "{\"type\":\"reasoning\",\"summary\":[]}],\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":"
		       "{\"type\":\"object\"}},{\"type\":\"web_search\"}],\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},"
		       "\"max_output_tokens\":9,\"prompt_cache_key\":\"k\",\"store\":false}",
		       &q, &e);
	cr_assert_eq(st, 0, "%s", e.message);
	cr_assert_eq(q.route, SG_ROUTE_OAI_RESPONSES);
	cr_assert(q.chat);
	cr_assert_eq(json_array_size(q.messages), 4); /* system, user, assistant (two calls), tool */
	json_t *m0 = json_array_get(q.messages, 0), *m1 = json_array_get(q.messages, 1), *m2 = json_array_get(q.messages, 2),
	       *m3 = json_array_get(q.messages, 3);
	cr_assert_str_eq(json_string_value(json_object_get(m0, "role")), "system");
	cr_assert_str_eq(json_string_value(json_object_get(m1, "content")), "ab");
	cr_assert_str_eq(json_string_value(json_object_get(m2, "role")), "assistant");
	json_t *calls = json_object_get(m2, "tool_calls");
	cr_assert_eq(json_array_size(calls), 2);
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments"), "x")), 1);
	cr_assert_str_eq(json_string_value(json_object_get(m3, "role")), "tool");
	cr_assert_str_eq(json_string_value(json_object_get(m3, "tool_call_id")), "c1");
	cr_assert_str_eq(json_string_value(json_object_get(m3, "name")), "f");
	/* the hosted tool is left out; the function tool is in the chat shape, and forced */
	cr_assert_eq(json_array_size(q.tools), 1);
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(json_array_get(q.tools, 0), "function"), "name")), "f");
	cr_assert_eq(q.tool_choice, SG_TOOLS_NAMED);
	cr_assert_str_eq(q.tool_name, "f");
	cr_assert_eq(q.max_tokens, 9);
	cr_assert_str_eq(q.user, "k");
	cr_assert(json_is_false(json_object_get(q.rsp, "store")));
	cr_assert_eq(json_integer_value(json_object_get(q.rsp, "n_instructions")), 1);
	sg_srv_req_free(&q);
}

Test(server_request, responses_text_format_and_reasoning_map_to_chat_fields)
{
	sg_srv_req q;
	sg_srv_err e;
	int st = parse(SG_ROUTE_OAI_RESPONSES,
		       "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"o\",\"schema\":{\"type\":\"object\"},"
		       "\"strict\":true}},\"reasoning\":{\"effort\":\"none\"}}",
		       &q, &e);
	cr_assert_eq(st, 0, "%s", e.message);
	cr_assert_eq(q.json_format, 2);
	cr_assert(json_is_object(q.schema) && q.schema_strict);
	cr_assert_eq(q.think, 0);
	cr_assert(json_is_true(json_object_get(q.rsp, "store")), "store defaults to true");
	sg_srv_req_free(&q);
	cr_assert_eq(parse(SG_ROUTE_OAI_RESPONSES, "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_object\"}}}", &q, &e), 0);
	cr_assert_eq(q.json_format, 1);
	sg_srv_req_free(&q);
}

Test(server_request, responses_bad_fields_are_400s_naming_them)
{
	static const struct {
		const char *body, *param;
	} cases[] = {
		{"{}", "input"},
		{"{\"input\":[]}", "input"},
		{"{\"input\":[{\"type\":\"computer_call\"}]}", "input[0].type"},
		{"{\"input\":[{\"type\":\"message\",\"role\":\"tool\",\"content\":\"x\"}]}", "input[0].role"},
		{"{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":7}]}", "input[0].output"},
		{"{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"\"}]}", "tools[0].name"},
		{"{\"input\":\"x\",\"tool_choice\":{\"type\":\"function\"}}", "tool_choice.name"},
		{"{\"input\":\"x\",\"reasoning\":{\"effort\":\"max\"}}", "reasoning.effort"},
		{"{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens"},
		{"{\"input\":\"x\",\"metadata\":{\"k\":\"v\",\"a\":1}}", "metadata"},
		{"{\"input\":\"x\",\"background\":true}", "background"},
		{"{\"input\":\"x\",\"truncation\":\"middle\"}", "truncation"},
		{"{\"input\":\"x\",\"include\":\"all\"}", "include"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		sg_srv_req q;
		sg_srv_err e;
		cr_assert_eq(parse(SG_ROUTE_OAI_RESPONSES, cases[i].body, &q, &e), 400, "%s", cases[i].body);
		cr_assert_str_eq(e.param, cases[i].param, "%s: %s", cases[i].body, e.message);
		sg_srv_req_free(&q);
	}
}

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

Test(server_request, n_other_than_one_is_refused)
{
	sg_srv_req q;
	sg_srv_err e;
	cr_assert_eq(parse(SG_ROUTE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":3}", &q, &e), 400);
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

/* The routes by API (see routes.h). */
#include "server/routes.h"

#include "server/routes_anthropic.h"
#include "server/routes_ollama.h"
#include "server/routes_openai.h"
#include "server/routes_responses.h"

int sg_srv_parse_request(sg_srv_route route, const char *body, size_t len, const sg_srv_limits *lim, sg_srv_req *req,
			 sg_srv_err *err)
{
	json_t *b;
	int st = sg_srv_req_begin(route, body, len, lim, req, &b, err);
	if (st) return st;
	if (sg_srv_route_is_anthropic(route)) st = sg_anthropic_parse(b, req, lim, err);
	else if (sg_srv_route_is_ollama(route)) st = sg_ollama_parse(b, req, lim, err);
	else if (route == SG_ROUTE_OAI_RESPONSES) st = sg_responses_parse(b, req, lim, err);
	else st = sg_openai_parse(b, req, lim, err);
	json_decref(b);
	if (st < 0) st = err->status;
	if (st == 0 && req->logprobs) {
		req->sp.logprobs = 1;
		req->sp.top_logprobs = req->top_logprobs;
	}
	return st;
}

void sg_routes_run_generation(sg_job *job)
{
	if (sg_srv_route_is_anthropic(job->req.route)) sg_anthropic_run(job);
	else if (sg_srv_route_is_ollama(job->req.route)) sg_ollama_run(job);
	else if (job->req.route == SG_ROUTE_OAI_RESPONSES) sg_responses_run(job);
	else sg_openai_run(job);
}

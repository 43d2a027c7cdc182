/* The routes by API: which parser reads a route's body and which writer answers its generation
 * (routes_openai.c, routes_ollama.c, routes_anthropic.c). The top of server/ below http.c. */
#ifndef SG_SERVER_ROUTES_H
#define SG_SERVER_ROUTES_H

#include <stddef.h>

#include "server/job.h"
#include "server/request.h"

/* Parses body[0..len) for route into *req (zeroed first; free with sg_srv_req_free even on
 * failure) with the parser of the route's API. Returns 0, or the HTTP status set in *err. */
int sg_srv_parse_request(sg_srv_route route, const char *body, size_t len, const sg_srv_limits *lim, sg_srv_req *req,
			 sg_srv_err *err);

/* The worker's entry for every generation route (job->req.route says which API answers). */
void sg_routes_run_generation(sg_job *job);

#endif

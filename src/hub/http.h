/* The small slice of HTTP the hub client needs, over libcurl: a GET of a small JSON body, a HEAD
 * that keeps the hub's headers, and a streamed GET into a callback. Every response keeps the
 * headers the hub protocol uses; a transport failure is classified so callers can tell "the hub
 * is unreachable" from "the transfer was cut" (worth resuming). */
#ifndef SG_HUB_HTTP_H
#define SG_HUB_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

typedef enum {
	SG_HTTP_OK = 0,      /* a response came (any status) */
	SG_HTTP_UNREACHABLE, /* DNS failure, connection refused, connect timeout, TLS handshake */
	SG_HTTP_CUT,         /* the connection broke or stalled mid-transfer */
	SG_HTTP_ABORTED,     /* the body callback asked to stop */
	SG_HTTP_FAILED,      /* anything else curl reports */
} sg_http_outcome;

typedef struct sg_http_resp {
	sg_http_outcome outcome;
	long status;             /* HTTP status of the last response, 0 if none */
	char error[256];         /* curl's message when outcome != OK */
	/* Headers of the last response (a redirect's when redirects are not followed). */
	char repo_commit[64];    /* X-Repo-Commit */
	char etag[160];          /* ETag, raw */
	char linked_etag[160];   /* X-Linked-Etag, raw */
	char error_code[64];     /* X-Error-Code (GatedRepo, RepoNotFound, ...) */
	char error_message[256]; /* X-Error-Message */
	char location[2048];     /* Location */
	int64_t linked_size;     /* X-Linked-Size, -1 if absent */
	int64_t content_length;  /* Content-Length, -1 if absent */
	int64_t range_start;     /* first byte of Content-Range, -1 if absent */
	char *body;              /* sg_http_get: NUL-terminated body (owned); else a short error body */
	size_t body_len;
} sg_http_resp;

/* Receives body bytes of a 2xx response; returns 0 to continue, non-zero to abort. `resp` holds
 * the status and headers already received. */
typedef int (*sg_http_sink)(void *ctx, const sg_http_resp *resp, const void *data, size_t n);

typedef struct sg_http_req {
	const char *url;
	const char *token;     /* sent as Authorization: Bearer only to the same host as auth_host */
	const char *auth_host; /* scheme://host[:port] the token belongs to */
	int head;              /* HEAD instead of GET */
	int follow;            /* follow redirects */
	int64_t range_from;    /* > 0: ask for bytes range_from- */
	size_t max_body;       /* sg_http_get: refuse bodies larger than this */
	sg_http_sink sink;     /* streamed body of 2xx responses; NULL: keep the body in resp */
	void *sink_ctx;
} sg_http_req;

/* Performs the request. Returns SG_OK when a response came (check resp->status) and an error
 * status with resp->outcome set otherwise; the caller frees with sg_http_resp_free. */
sg_status sg_http_do(const sg_http_req *req, sg_http_resp *resp);
void sg_http_resp_free(sg_http_resp *resp);

/* "scheme://host[:port]" of url into buf (for comparing where a token may go). */
void sg_http_origin(const char *url, char *buf, size_t n);
/* Appends s to buf percent-encoded; '/' is kept when keep_slash. Returns 0, or -1 if it does not fit. */
int sg_http_escape(char *buf, size_t n, const char *s, int keep_slash);

#endif

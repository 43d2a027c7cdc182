#include "hub/http.h"
#include "base/alloc.h"
#include "base/error.h"
#include "saragossa.h"

#include <ctype.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ERROR_BODY_MAX 4096

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CURLcode init_rc;
static void init(void) { init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

typedef struct xfer {
	const sg_http_req *req;
	sg_http_resp *resp;
	size_t cap;
	int aborted;
} xfer;

static void copy_value(char *dst, size_t n, const char *v, size_t len)
{
	if (len >= n) len = n - 1;
	memcpy(dst, v, len);
	dst[len] = 0;
}

static int64_t parse_i64(const char *v, size_t len)
{
	char tmp[32];
	if (len == 0 || len >= sizeof(tmp)) return -1;
	memcpy(tmp, v, len);
	tmp[len] = 0;
	char *end;
	long long x = strtoll(tmp, &end, 10);
	return (end == tmp || x < 0) ? -1 : (int64_t)x;
}

static void reset_headers(sg_http_resp *r)
{
	r->repo_commit[0] = r->etag[0] = r->linked_etag[0] = r->error_code[0] = 0;
	r->error_message[0] = r->location[0] = 0;
	r->linked_size = r->content_length = r->range_start = -1;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud)
{
	xfer *x = ud;
	sg_http_resp *r = x->resp;
	size_t len = size * nitems;
	if (len >= 5 && !strncmp(buf, "HTTP/", 5)) {
		/* A new response (after a redirect or a 100 Continue): its headers replace the last. */
		reset_headers(r);
		const char *sp = memchr(buf, ' ', len);
		r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		r->body_len = 0;
		return len;
	}
	const char *colon = memchr(buf, ':', len);
	if (!colon) return len;
	size_t klen = (size_t)(colon - buf);
	const char *v = colon + 1, *end = buf + len;
	while (v < end && (*v == ' ' || *v == '\t')) v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) end--;
	size_t vlen = (size_t)(end - v);
#define IS(name) (klen == sizeof(name) - 1 && !strncasecmp(buf, name, klen))
	if (IS("X-Repo-Commit")) copy_value(r->repo_commit, sizeof(r->repo_commit), v, vlen);
	else if (IS("ETag")) copy_value(r->etag, sizeof(r->etag), v, vlen);
	else if (IS("X-Linked-Etag")) copy_value(r->linked_etag, sizeof(r->linked_etag), v, vlen);
	else if (IS("X-Error-Code")) copy_value(r->error_code, sizeof(r->error_code), v, vlen);
	else if (IS("X-Error-Message")) copy_value(r->error_message, sizeof(r->error_message), v, vlen);
	else if (IS("Location")) copy_value(r->location, sizeof(r->location), v, vlen);
	else if (IS("X-Linked-Size")) r->linked_size = parse_i64(v, vlen);
	else if (IS("Content-Length")) r->content_length = parse_i64(v, vlen);
	else if (IS("Content-Range")) {
		/* "bytes START-END/TOTAL" */
		if (vlen > 6 && !strncasecmp(v, "bytes ", 6)) {
			const char *dash = memchr(v + 6, '-', vlen - 6);
			if (dash) r->range_start = parse_i64(v + 6, (size_t)(dash - (v + 6)));
		}
	}
#undef IS
	return len;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud)
{
	xfer *x = ud;
	sg_http_resp *r = x->resp;
	size_t n = size * nmemb;
	int ok = r->status >= 200 && r->status < 300;
	if (ok && x->req->sink) {
		if (x->req->sink(x->req->sink_ctx, r, data, n)) {
			x->aborted = 1;
			return 0;
		}
		return n;
	}
	/* Error bodies and small bodies are kept (bounded); an oversized body aborts. */
	size_t limit = ok ? x->req->max_body : ERROR_BODY_MAX;
	if (r->body_len + n > limit) {
		if (!ok) return n; /* keep the head of an error body, drop the rest */
		x->aborted = 1;
		return 0;
	}
	if (r->body_len + n + 1 > x->cap) {
		size_t cap = x->cap ? x->cap : 4096;
		while (cap < r->body_len + n + 1) cap *= 2;
		char *nb = sg_realloc(r->body, cap);
		if (!nb) {
			x->aborted = 1;
			return 0;
		}
		r->body = nb;
		x->cap = cap;
	}
	memcpy(r->body + r->body_len, data, n);
	r->body_len += n;
	r->body[r->body_len] = 0;
	return n;
}

void sg_http_origin(const char *url, char *buf, size_t n)
{
	const char *p = strstr(url, "://");
	p = p ? p + 3 : url;
	size_t len = (size_t)(p - url) + strcspn(p, "/?#");
	if (len >= n) len = n - 1;
	memcpy(buf, url, len);
	buf[len] = 0;
}

int sg_http_escape(char *buf, size_t n, const char *s, int keep_slash)
{
	size_t used = strlen(buf);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		int plain = isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/');
		if (used + (plain ? 1 : 3) >= n) return -1;
		if (plain) buf[used++] = (char)*p;
		else used += (size_t)snprintf(buf + used, n - used, "%%%02X", *p);
	}
	buf[used] = 0;
	return 0;
}

static sg_http_outcome classify(CURLcode c)
{
	switch (c) {
	case CURLE_OK: return SG_HTTP_OK;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_CONNECT:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
		return SG_HTTP_UNREACHABLE;
	case CURLE_PARTIAL_FILE:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return SG_HTTP_CUT;
	case CURLE_WRITE_ERROR: return SG_HTTP_ABORTED;
	default: return SG_HTTP_FAILED;
	}
}

sg_status sg_http_do(const sg_http_req *req, sg_http_resp *resp)
{
	memset(resp, 0, sizeof(*resp));
	reset_headers(resp);
	pthread_once(&init_once, init);
	if (init_rc != CURLE_OK) {
		resp->outcome = SG_HTTP_FAILED;
		snprintf(resp->error, sizeof(resp->error), "%s", curl_easy_strerror(init_rc));
		return sg_error(SG_ERR_IO, "http: libcurl init failed: %s", resp->error);
	}
	CURL *c = curl_easy_init();
	if (!c) {
		resp->outcome = SG_HTTP_FAILED;
		return sg_error(SG_ERR_NOMEM, "http: curl_easy_init failed");
	}
	xfer x = {.req = req, .resp = resp};
	char errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdrs = NULL, *h;
	char line[4200];
	char origin[512];
	sg_http_origin(req->url, origin, sizeof(origin));
	if (req->token && req->token[0] && req->auth_host && !strcmp(origin, req->auth_host)) {
		snprintf(line, sizeof(line), "Authorization: Bearer %s", req->token);
		if ((h = curl_slist_append(hdrs, line))) hdrs = h;
	}
	/* The hub's ETag and size headers describe the file as stored: ask for it unencoded. */
	if ((h = curl_slist_append(hdrs, "Accept-Encoding: identity"))) hdrs = h;
	char range[64];
	if (req->range_from > 0) snprintf(range, sizeof(range), "%lld-", (long long)req->range_from);
	char ua[64];
	snprintf(ua, sizeof(ua), "saragossa/%s", sg_version());

	curl_easy_setopt(c, CURLOPT_URL, req->url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c, CURLOPT_USERAGENT, ua);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
	/* A stalled transfer (under 1 kB/s for 30 s) counts as cut, so it is retried or resumed. */
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 30L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	if (req->head) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	if (req->follow) {
		curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
		curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
	}
	if (req->range_from > 0) curl_easy_setopt(c, CURLOPT_RANGE, range);

	CURLcode rc = curl_easy_perform(c);
	curl_easy_cleanup(c);
	curl_slist_free_all(hdrs);
	resp->outcome = x.aborted ? SG_HTTP_ABORTED : classify(rc);
	if (resp->outcome == SG_HTTP_OK) return SG_OK;
	snprintf(resp->error, sizeof(resp->error), "%s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
	return sg_error(SG_ERR_IO, "%s: %s", req->url, resp->error);
}

void sg_http_resp_free(sg_http_resp *resp)
{
	sg_free(resp->body);
	resp->body = NULL;
	resp->body_len = 0;
}

/* HTTP pieces below the server's dispatch: an answer written straight to a socket, header and URL
 * checks, the loopback test of a listener's host. */
#include "server/http_raw.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server/response.h"

int sg_http_bad_content_length(const char *v, int *too_large)
{
	uint64_t x = 0;
	*too_large = 0;
	if (!*v) return 1;
	for (const char *p = v; *p; p++) {
		if (*p < '0' || *p > '9') return 1;
		unsigned d = (unsigned)(*p - '0');
		if (x > (UINT64_MAX - d) / 10) return *too_large = 1;
		x = x * 10 + d;
	}
	return 0;
}

/* URL escapes decoded in place (MHD_OPTION_UNESCAPE_CALLBACK), all but %00: decoded, a NUL would
 * end the path early ("/v1/models/tiny%00x" would name model "tiny"), so it stays as written and
 * matches no route or model. */
static int hex_digit(char ch)
{
	return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

size_t sg_http_unescape_url(void *cls, struct MHD_Connection *c, char *url)
{
	(void)cls;
	(void)c;
	char *w = url;
	for (const char *r = url; *r;) {
		int hi, lo;
		if (r[0] == '%' && (hi = hex_digit(r[1])) >= 0 && (lo = hex_digit(r[2])) >= 0 && (hi | lo)) {
			*w++ = (char)(hi * 16 + lo);
			r += 3;
		} else *w++ = *r++;
	}
	*w = 0;
	return (size_t)(w - url);
}

void sg_http_send_raw(int fd, sg_srv_route route, int status, const char *reason, const char *code, const char *msg)
{
	sg_srv_err e;
	sg_srv_err_set(&e, status, "invalid_request_error", NULL, "%s", msg);
	snprintf(e.code, sizeof e.code, "%s", code);
	json_t *o = sg_resp_error_body(route, &e);
	char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (body && fd >= 0) {
		char buf[1024];
		int n = snprintf(buf, sizeof buf,
				 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
				 "Connection: close\r\nServer: saragossa\r\n\r\n%s",
				 status, reason, strlen(body), body);
		if (n > 0 && (size_t)n < sizeof buf) {
			ssize_t w = send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
			(void)w;
		}
	}
	free(body);
}

int sg_http_is_loopback(const char *host)
{
	return !strcmp(host, "127.0.0.1") || !strcmp(host, "localhost") || !strncmp(host, "127.", 4);
}

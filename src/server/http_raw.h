/* HTTP pieces below the server's dispatch (http.c): an answer written straight to a socket, the
 * Content-Length check, URL unescaping, the loopback test. */
#ifndef SG_SERVER_HTTP_RAW_H
#define SG_SERVER_HTTP_RAW_H

#include <stddef.h>

#include "server/request.h"

/* 1 when a Content-Length value is not a number of bytes (*too_large = 1: past 2^64 - 1). */
int sg_http_bad_content_length(const char *v, int *too_large);
/* libmicrohttpd's MHD_OPTION_UNESCAPE_CALLBACK: URL escapes decoded in place, all but %00; the
 * new length. cls and c are unused. */
struct MHD_Connection;
size_t sg_http_unescape_url(void *cls, struct MHD_Connection *c, char *url);
/* An error answer in route's API format written to fd with the connection closed (for the paths
 * libmicrohttpd gives no response object: bad headers, timeouts); nothing when fd < 0. */
void sg_http_send_raw(int fd, sg_srv_route route, int status, const char *reason, const char *code, const char *msg);
/* 1 for 127.x.y.z and localhost. */
int sg_http_is_loopback(const char *host);

#endif

/* The Unix socket listener of `saragossa serve` (http.c serves on it). */
#ifndef SG_SERVER_LISTEN_H
#define SG_SERVER_LISTEN_H

#include "saragossa.h"

/* A listening Unix socket at path, mode 0600 (set at creation), into *out. A stale socket file
 * (no server answers on it) is replaced; a live one, or a path that is not a socket, is refused
 * with a message that says what to do. */
sg_status sg_srv_open_unix(const char *path, int *out);

#endif

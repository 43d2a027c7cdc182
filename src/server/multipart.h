/* multipart/form-data bodies (RFC 7578), as the OpenAI audio routes receive them: the boundary
 * from the Content-Type header, then each part's Content-Disposition (name, filename) and
 * Content-Type, and its bytes. A pure function of the bytes (fuzzed: tests/fuzz/fuzz_multipart.c);
 * the parts point into the body, which must outlive them. Errors are 400s naming what is wrong. */
#ifndef SG_SERVER_MULTIPART_H
#define SG_SERVER_MULTIPART_H

#include <stddef.h>

#include "server/request.h"

#define SG_MP_MAX_PARTS 64

typedef struct sg_mp_part {
	char name[128];     /* the form field's name (NUL-free, may be empty) */
	char filename[256]; /* the filename parameter, "" when none */
	int has_filename;   /* a filename parameter was given (a file field) */
	char ctype[128];    /* the part's Content-Type, "" when none */
	const char *data;   /* [len] bytes inside the body */
	size_t len;
} sg_mp_part;

typedef struct sg_multipart {
	sg_mp_part parts[SG_MP_MAX_PARTS];
	int n;
} sg_multipart;

/* The boundary of a "multipart/form-data; boundary=..." Content-Type value (quoted or not) into
 * out[cap]: 0, or -1 when the type is another one or the boundary is missing or malformed. */
int sg_multipart_boundary(const char *content_type, char *out, size_t cap);

/* Parses body[0..len) sent with content_type into *mp. Returns 0, or the HTTP status (400, or 415
 * for a Content-Type that is not multipart/form-data) with *e filled. */
int sg_multipart_parse(const char *content_type, const char *body, size_t len, sg_multipart *mp, sg_srv_err *e);

/* The first part named name, NULL when none. */
const sg_mp_part *sg_multipart_get(const sg_multipart *mp, const char *name);

#endif

/* multipart/form-data (see multipart.h). */
#include "server/multipart.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAX_BOUNDARY 70 /* RFC 2046 */
#define MAX_HEADERS 8192 /* bytes of one part's header block */

static int is_space(char c)
{
	return c == ' ' || c == '\t';
}

/* Reads the parameter `key` of a header value ("form-data; name=\"x\"; filename=y") into
 * out[cap]: 1 when found, 0 when absent, -1 when malformed (unterminated quote, too long, a NUL
 * or control byte). Quoted values take backslash escapes. */
static int header_param(const char *v, size_t n, const char *key, char *out, size_t cap)
{
	size_t kl = strlen(key), i = 0;
	/* skip the first token (the disposition type or the media type) */
	while (i < n && v[i] != ';') {
		if (v[i] == '"') return -1;
		i++;
	}
	while (i < n) {
		i++; /* ';' */
		while (i < n && is_space(v[i])) i++;
		size_t ks = i;
		while (i < n && v[i] != '=' && v[i] != ';' && !is_space(v[i])) i++;
		size_t ke = i;
		while (i < n && is_space(v[i])) i++;
		int match = ke - ks == kl && !strncasecmp(v + ks, key, kl);
		if (i >= n || v[i] != '=') {
			if (match) return -1;
			continue; /* a parameter without a value */
		}
		i++;
		while (i < n && is_space(v[i])) i++;
		size_t k = 0;
		if (i < n && v[i] == '"') {
			i++;
			int closed = 0;
			while (i < n) {
				char c = v[i++];
				if (c == '\\' && i < n) c = v[i++];
				else if (c == '"') {
					closed = 1;
					break;
				}
				if ((unsigned char)c < 0x20 && c != '\t') return -1;
				if (match) {
					if (k + 1 >= cap) return -1;
					out[k++] = c;
				}
			}
			if (!closed) return -1;
			while (i < n && v[i] != ';') {
				if (!is_space(v[i])) return -1;
				i++;
			}
		} else {
			while (i < n && v[i] != ';') {
				char c = v[i++];
				if ((unsigned char)c < 0x20 && c != '\t') return -1;
				if (match) {
					if (k + 1 >= cap) return -1;
					out[k++] = c;
				}
			}
			while (match && k && is_space(out[k - 1])) k--;
		}
		if (match) {
			out[k] = 0;
			return 1;
		}
	}
	return 0;
}

int sg_multipart_boundary(const char *content_type, char *out, size_t cap)
{
	if (!content_type) return -1;
	size_t n = strlen(content_type);
	const char *t = content_type;
	while (is_space(*t)) t++;
	if (strncasecmp(t, "multipart/form-data", 19) || (t[19] && t[19] != ';' && !is_space(t[19]))) return -1;
	char b[MAX_BOUNDARY + 2];
	if (header_param(content_type, n, "boundary", b, sizeof b) != 1) return -1;
	size_t bl = strlen(b);
	if (!bl || bl > MAX_BOUNDARY || bl + 1 > cap) return -1;
	memcpy(out, b, bl + 1);
	return 0;
}

static const char *find(const char *h, size_t hn, const char *needle, size_t nn)
{
	return memmem(h, hn, needle, nn);
}

/* One part's header block [s, e): Content-Disposition and Content-Type into p. 0, or the 400. */
static int part_headers(const char *s, const char *e, sg_mp_part *p, int index, sg_srv_err *err)
{
	int have_cd = 0;
	while (s < e) {
		const char *eol = find(s, (size_t)(e - s), "\r\n", 2);
		const char *le = eol ? eol : e;
		const char *colon = memchr(s, ':', (size_t)(le - s));
		if (!colon)
			return sg_srv_err_set(err, 400, NULL, NULL, "multipart body: part %d has a header line without ':'", index + 1);
		size_t nl = (size_t)(colon - s);
		const char *v = colon + 1;
		while (v < le && is_space(*v)) v++;
		size_t vn = (size_t)(le - v);
		for (size_t i = 0; i < vn; i++)
			if (!v[i]) return sg_srv_err_set(err, 400, NULL, NULL, "multipart body: part %d has a NUL in a header", index + 1);
		if (nl == 19 && !strncasecmp(s, "Content-Disposition", 19)) {
			if (vn < 9 || strncasecmp(v, "form-data", 9) || (vn > 9 && v[9] != ';' && !is_space(v[9])))
				return sg_srv_err_set(err, 400, NULL, NULL, "multipart body: part %d is not form-data", index + 1);
			int r = header_param(v, vn, "name", p->name, sizeof p->name);
			if (r < 0)
				return sg_srv_err_set(err, 400, NULL, NULL, "multipart body: part %d has a malformed or too long name", index + 1);
			r = header_param(v, vn, "filename", p->filename, sizeof p->filename);
			if (r < 0)
				return sg_srv_err_set(err, 400, NULL, NULL, "multipart body: part %d has a malformed or too long filename",
						      index + 1);
			p->has_filename = r == 1;
			have_cd = 1;
		} else if (nl == 12 && !strncasecmp(s, "Content-Type", 12)) {
			size_t k = vn < sizeof p->ctype - 1 ? vn : sizeof p->ctype - 1;
			memcpy(p->ctype, v, k);
			p->ctype[k] = 0;
		}
		s = eol ? eol + 2 : e;
	}
	if (!have_cd)
		return sg_srv_err_set(err, 400, NULL, NULL, "multipart body: part %d has no Content-Disposition header", index + 1);
	return 0;
}

int sg_multipart_parse(const char *content_type, const char *body, size_t len, sg_multipart *mp, sg_srv_err *e)
{
	memset(mp, 0, sizeof *mp);
	char b[MAX_BOUNDARY + 1];
	if (sg_multipart_boundary(content_type, b, sizeof b))
		return sg_srv_err_set(e, content_type && !strncasecmp(content_type, "multipart/form-data", 19) ? 400 : 415, NULL, NULL,
				      "the body must be multipart/form-data with a boundary (Content-Type: '%.100s')",
				      content_type ? content_type : "(none)");
	if (!body) len = 0;
	/* the delimiter: CRLF "--" boundary; the first one may open the body without the CRLF */
	char delim[MAX_BOUNDARY + 5];
	size_t bl = strlen(b);
	int dl = snprintf(delim, sizeof delim, "\r\n--%s", b);
	const char *p = body, *end = body + len;
	const char *first;
	if (len >= bl + 2 && !memcmp(body, delim + 2, bl + 2)) first = body;
	else {
		first = len ? find(body, len, delim, (size_t)dl) : NULL;
		if (first) first += 2;
	}
	if (!first) return sg_srv_err_set(e, 400, NULL, NULL, "multipart body: no boundary '--%.70s' found", b);
	p = first + 2 + bl;
	for (;;) {
		/* after a delimiter: "--" ends the body, else optional whitespace then CRLF */
		if (end - p >= 2 && p[0] == '-' && p[1] == '-') return 0;
		while (p < end && is_space(*p)) p++;
		if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
			return sg_srv_err_set(e, 400, NULL, NULL, "multipart body: a boundary is not followed by CRLF (truncated body?)");
		p += 2;
		if (mp->n == SG_MP_MAX_PARTS)
			return sg_srv_err_set(e, 400, NULL, NULL, "multipart body: more than %d parts", SG_MP_MAX_PARTS);
		sg_mp_part *part = &mp->parts[mp->n];
		/* headers end at an empty line (a part may have none: then the CRLF comes at once) */
		const char *he;
		if (end - p >= 2 && p[0] == '\r' && p[1] == '\n') he = p;
		else {
			size_t lim = (size_t)(end - p) < MAX_HEADERS ? (size_t)(end - p) : MAX_HEADERS;
			he = find(p, lim, "\r\n\r\n", 4);
			if (!he)
				return sg_srv_err_set(e, 400, NULL, NULL, "multipart body: part %d's headers do not end (truncated, or over %d bytes)",
						      mp->n + 1, MAX_HEADERS);
		}
		int st = part_headers(p, he, part, mp->n, e);
		if (st) return st;
		const char *data = he + (he == p ? 2 : 4);
		const char *next = data <= end ? find(data, (size_t)(end - data), delim, (size_t)dl) : NULL;
		if (!next)
			return sg_srv_err_set(e, 400, NULL, NULL, "multipart body: part %d ('%.100s') does not end with a boundary (truncated body?)",
					      mp->n + 1, part->name);
		part->data = data;
		part->len = (size_t)(next - data);
		mp->n++;
		p = next + dl;
	}
}

const sg_mp_part *sg_multipart_get(const sg_multipart *mp, const char *name)
{
	for (int i = 0; i < mp->n; i++)
		if (!strcmp(mp->parts[i].name, name)) return &mp->parts[i];
	return NULL;
}

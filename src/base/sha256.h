/* SHA-256 through OpenSSL's EVP interface (downloads verification, prefix-cache chain hashes). */
#ifndef SG_BASE_SHA256_H
#define SG_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

typedef struct sg_sha256_ctx {
	void *md_ctx; /* EVP_MD_CTX */
} sg_sha256_ctx;

sg_status sg_sha256_init(sg_sha256_ctx *h);
void sg_sha256_update(sg_sha256_ctx *h, const void *data, size_t len);
/* Writes the digest and releases the context. */
void sg_sha256_final(sg_sha256_ctx *h, uint8_t out[32]);
/* Releases a context without finishing it. */
void sg_sha256_abort(sg_sha256_ctx *h);

sg_status sg_sha256(const void *data, size_t len, uint8_t out[32]);
/* 64 lowercase hex digits plus NUL. */
void sg_hex(const uint8_t *bytes, size_t n, char *out);

#endif

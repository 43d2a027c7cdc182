#include "base/sha256.h"
#include "base/error.h"

#include <openssl/evp.h>

sg_status sg_sha256_init(sg_sha256_ctx *h)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(c);
		h->md_ctx = NULL;
		return SG_FAIL(SG_ERR_INTERNAL, "OpenSSL SHA-256 init failed");
	}
	h->md_ctx = c;
	return SG_OK;
}

void sg_sha256_update(sg_sha256_ctx *h, const void *data, size_t len)
{
	if (len) EVP_DigestUpdate(h->md_ctx, data, len);
}

void sg_sha256_final(sg_sha256_ctx *h, uint8_t out[32])
{
	unsigned n = 32;
	EVP_DigestFinal_ex(h->md_ctx, out, &n);
	EVP_MD_CTX_free(h->md_ctx);
	h->md_ctx = NULL;
}

void sg_sha256_abort(sg_sha256_ctx *h)
{
	EVP_MD_CTX_free(h->md_ctx);
	h->md_ctx = NULL;
}

sg_status sg_sha256(const void *data, size_t len, uint8_t out[32])
{
	sg_sha256_ctx h;
	sg_status st = sg_sha256_init(&h);
	if (st) return st;
	sg_sha256_update(&h, data, len);
	sg_sha256_final(&h, out);
	return SG_OK;
}

void sg_hex(const uint8_t *bytes, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 15];
	}
	out[2 * n] = 0;
}

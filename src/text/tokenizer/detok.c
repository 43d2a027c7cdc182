/* The streaming detokenizer: ids pushed one at a time come out as pieces of complete UTF-8 whose
 * concatenation is the full decode (sg_tokenizer_decode, over a sliding context of ids). */
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "text/tokenizer/tokenizer_int.h"

struct sg_detok {
	const sg_tokenizer *t;
	int skip_special;
	sg_tokens ids;     /* context ids then the pending ones */
	size_t n_ctx;      /* ids[0..n_ctx) were emitted already; kept as context for the decoders */
	size_t ctx_len;    /* byte length of decode(ids[0..n_ctx)) */
	char *piece;
};

sg_status sg_detok_create(const sg_tokenizer *t, int skip_special, sg_detok **out)
{
	sg_detok *d = sg_calloc(1, sizeof(*d));
	if (!d) return SG_FAIL(SG_ERR_NOMEM, "detok");
	d->t = t;
	d->skip_special = skip_special;
	*out = d;
	return SG_OK;
}

void sg_detok_free(sg_detok *d)
{
	if (!d) return;
	sg_tokens_free(&d->ids);
	sg_free(d->piece);
	sg_free(d);
}

/* Emits decode(ids) minus the context's text when it does not end in an unfinished character
 * (shown by the decoders as U+FFFD), then makes the newly emitted ids the next context: the
 * decoders (Metaspace's first-token rule, WordPiece's spaces) see the same neighbours as in a
 * full decode, so the pieces concatenate to the full decode. */
static sg_status step(sg_detok *d, int final, const char **piece, size_t *len)
{
	*piece = "";
	*len = 0;
	sg_free(d->piece);
	d->piece = NULL;
	if (d->ids.n == d->n_ctx) return SG_OK;
	char *text;
	size_t n;
	sg_status st = sg_tokenizer_decode(d->t, d->ids.ids, d->ids.n, d->skip_special, &text, &n);
	if (st) return st;
	int incomplete = n >= 3 && !memcmp(text + n - 3, "\xEF\xBF\xBD", 3);
	if ((incomplete && !final) || n < d->ctx_len) {
		sg_free(text);
		return SG_OK;
	}
	d->piece = text;
	*piece = text + d->ctx_len;
	*len = n - d->ctx_len;
	/* The new context: the ids just emitted; its text is what they decode to alone. */
	size_t keep = d->ids.n - d->n_ctx;
	memmove(d->ids.ids, d->ids.ids + d->n_ctx, keep * sizeof(int32_t));
	d->ids.n = keep;
	d->n_ctx = keep;
	char *ctx;
	size_t cn;
	if ((st = sg_tokenizer_decode(d->t, d->ids.ids, d->ids.n, d->skip_special, &ctx, &cn))) return st;
	sg_free(ctx);
	d->ctx_len = cn;
	return SG_OK;
}

sg_status sg_detok_push(sg_detok *d, int32_t id, const char **piece, size_t *len)
{
	/* Ids the decode drops never enter the context: a context that decodes to nothing would
	 * make the decoders treat the next token as the first (no space before a WordPiece word). */
	const sg_tokenizer *t = d->t;
	if (id < 0 || id >= t->n_vocab || !t->tok[id].s || (d->skip_special && t->special[id])) {
		*piece = "";
		*len = 0;
		return SG_OK;
	}
	if (sg_tokens_push(&d->ids, id)) return SG_FAIL(SG_ERR_NOMEM, "detok");
	return step(d, 0, piece, len);
}

sg_status sg_detok_flush(sg_detok *d, const char **piece, size_t *len) { return step(d, 1, piece, len); }

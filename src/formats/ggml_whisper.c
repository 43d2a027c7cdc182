/* whisper.cpp's ggml model file: see ggml_whisper.h. */
#include "formats/ggml_whisper.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"

typedef struct rd {
	const uint8_t *p;
	size_t size, off;
	const char *what;
} rd;

static int take_i32(rd *r, int32_t *v)
{
	if (r->size - r->off < 4) return 0;
	const uint8_t *b = r->p + r->off;
	*v = (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
	r->off += 4;
	return 1;
}

void sg_ggml_whisper_close(sg_ggml_whisper *g)
{
	if (!g) return;
	for (int i = 0; i < g->n_vocab_words; i++) sg_free(g->vocab[i]);
	sg_free(g->vocab);
	sg_free(g->vocab_len);
	for (int i = 0; i < g->n_tensors; i++) sg_free(g->tensors[i].name);
	sg_free(g->tensors);
	sg_mapped_file m = g->map;
	memset(g, 0, sizeof(*g));
	if (m.path) sg_mmap_close(&m);
}

static int plain_or_block(sg_type t)
{
	return t == SG_TYPE_F32 || t == SG_TYPE_F16 || t == SG_TYPE_Q4_0 || t == SG_TYPE_Q4_1 || t == SG_TYPE_Q5_0 ||
	       t == SG_TYPE_Q5_1 || t == SG_TYPE_Q8_0;
}

static sg_status parse_tensors(rd *r, sg_ggml_whisper *g)
{
	int cap = 0;
	while (r->off < r->size) {
		size_t at = r->off;
		int32_t nd, len, ty, ne[4] = {1, 1, 1, 1};
		if (!take_i32(r, &nd) || !take_i32(r, &len) || !take_i32(r, &ty))
			return sg_error(SG_ERR_FORMAT, "%s: tensor header at %zu cut short by the end of the file", r->what, at);
		if (nd < 1 || nd > 4 || len < 1 || len > 1024 || ty < 0 || !plain_or_block((sg_type)ty))
			return sg_error(SG_ERR_FORMAT, "%s: tensor at %zu: %d dims, name of %d bytes, type %d (F32, F16, Q4_0..Q8_0 expected)",
					r->what, at, nd, len, ty);
		int64_t n = 1;
		for (int i = 0; i < nd; i++) {
			if (!take_i32(r, &ne[i])) return sg_error(SG_ERR_FORMAT, "%s: tensor at %zu: shape cut short", r->what, at);
			if (ne[i] < 1 || ne[i] > (1 << 24)) return sg_error(SG_ERR_FORMAT, "%s: tensor at %zu: dimension %d = %d", r->what, at, i, ne[i]);
			n *= ne[i];
			if (n > ((int64_t)1 << 36)) return sg_error(SG_ERR_FORMAT, "%s: tensor at %zu: too many elements", r->what, at);
		}
		if (r->size - r->off < (size_t)len) return sg_error(SG_ERR_FORMAT, "%s: tensor at %zu: name cut short", r->what, at);
		char *name = sg_strndup((const char *)r->p + r->off, (size_t)len);
		if (!name) return sg_error(SG_ERR_NOMEM, "%s: a tensor name", r->what);
		r->off += (size_t)len;
		size_t row = sg_type_row_bytes((sg_type)ty, ne[0]);
		uint64_t bytes = (uint64_t)row * (uint64_t)(n / ne[0]);
		sg_status st = SG_OK;
		if (!row || strlen(name) != (size_t)len)
			st = sg_error(SG_ERR_FORMAT, "%s: tensor '%s': %d columns are not whole blocks of %s (or the name holds a NUL)",
				      r->what, name, ne[0], sg_type_name(ty));
		else if (r->size - r->off < bytes)
			st = sg_error(SG_ERR_FORMAT, "%s: tensor '%s' data [%zu, %llu) runs past the file size %zu", r->what, name, r->off,
				      (unsigned long long)(r->off + bytes), r->size);
		for (int i = 0; i < g->n_tensors && !st; i++)
			if (!strcmp(g->tensors[i].name, name)) st = sg_error(SG_ERR_FORMAT, "%s: tensor '%s' appears twice", r->what, name);
		if (!st && g->n_tensors == cap) {
			int nc = cap ? 2 * cap : 256;
			sg_tensor *t = sg_realloc(g->tensors, sizeof(*t) * (size_t)nc);
			if (!t) st = sg_error(SG_ERR_NOMEM, "%s: %d tensors", r->what, nc);
			else g->tensors = t, cap = nc;
		}
		if (st) {
			sg_free(name);
			return st;
		}
		sg_tensor *t = &g->tensors[g->n_tensors++];
		memset(t, 0, sizeof(*t));
		t->name = name;
		t->type = (sg_type)ty;
		t->n_dims = nd;
		for (int i = 0; i < nd; i++) t->ne[i] = ne[i];
		t->offset = r->off;
		t->nbytes = bytes;
		t->data = r->p + r->off;
		r->off += bytes;
	}
	return SG_OK;
}

sg_status sg_ggml_whisper_parse(const uint8_t *data, size_t size, const char *what, sg_ggml_whisper *out)
{
	memset(out, 0, sizeof(*out));
	rd r = {data, size, 0, what};
	int32_t magic = 0;
	if (!take_i32(&r, &magic) || (uint32_t)magic != SG_GGML_MAGIC)
		return sg_error(SG_ERR_FORMAT, "%s: not a ggml Whisper file (magic 0x%08x, expected 0x%08x)", what, (unsigned)magic, SG_GGML_MAGIC);
	for (int i = 0; i < 11; i++)
		if (!take_i32(&r, &out->hp[i])) return sg_error(SG_ERR_FORMAT, "%s: hparams cut short by the end of the file", what);
	int32_t nm = 0, nf = 0;
	if (!take_i32(&r, &nm) || !take_i32(&r, &nf)) return sg_error(SG_ERR_FORMAT, "%s: mel filter header cut short", what);
	if (nm < 1 || nm > 1024 || nf < 1 || nf > 8192 || (r.size - r.off) / 4 / (size_t)nf < (size_t)nm)
		return sg_error(SG_ERR_FORMAT, "%s: mel filters %d x %d at %zu do not fit the file", what, nm, nf, r.off);
	out->n_mel = nm;
	out->n_fft = nf;
	out->filters = r.p + r.off;
	r.off += (size_t)nm * (size_t)nf * 4;
	int32_t nv = 0;
	if (!take_i32(&r, &nv) || nv < 0 || nv > (1 << 20) || (r.size - r.off) / 4 < (size_t)nv)
		return sg_error(SG_ERR_FORMAT, "%s: vocabulary count %d at %zu does not fit the file", what, nv, r.off - 4);
	out->vocab = sg_calloc((size_t)(nv ? nv : 1), sizeof(char *));
	out->vocab_len = sg_calloc((size_t)(nv ? nv : 1), sizeof(uint32_t));
	sg_status st = out->vocab && out->vocab_len ? SG_OK : sg_error(SG_ERR_NOMEM, "%s: %d tokens", what, nv);
	for (int i = 0; i < nv && !st; i++) {
		int32_t len;
		if (!take_i32(&r, &len) || len < 0 || r.size - r.off < (size_t)len) {
			st = sg_error(SG_ERR_FORMAT, "%s: vocabulary token %d at %zu runs past the file", what, i, r.off);
			break;
		}
		out->vocab[i] = sg_strndup((const char *)r.p + r.off, (size_t)len);
		if (!out->vocab[i]) st = sg_error(SG_ERR_NOMEM, "%s: token %d", what, i);
		out->vocab_len[i] = (uint32_t)len;
		out->n_vocab_words = i + 1;
		r.off += (size_t)len;
	}
	if (!st) st = parse_tensors(&r, out);
	if (st) sg_ggml_whisper_close(out);
	return st;
}

sg_status sg_ggml_whisper_open(const char *path, sg_ggml_whisper *out)
{
	memset(out, 0, sizeof(*out));
	sg_mapped_file m;
	sg_status st = sg_mmap_open(path, &m);
	if (st) return st;
	st = sg_ggml_whisper_parse(m.data, m.size, path, out);
	if (st) {
		sg_mmap_close(&m);
		return st;
	}
	out->map = m;
	return SG_OK;
}

const sg_tensor *sg_ggml_whisper_find(const sg_ggml_whisper *g, const char *name)
{
	for (int i = 0; i < g->n_tensors; i++)
		if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
	return NULL;
}

int sg_ggml_whisper_detect(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) return 0;
	uint8_t b[4];
	int ok = fread(b, 1, 4, f) == 4 && ((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24) == SG_GGML_MAGIC;
	fclose(f);
	return ok;
}

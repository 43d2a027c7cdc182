/* CTranslate2 model.bin: the committed fixture read back, and damaged files refused by name. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/mmap.h"
#include "formats/ct2.h"

#define FIXTURE "tests/fixtures/ct2"
#define HAS(s) cr_expect(strstr(sg_last_error(), s) != NULL, "message: %s", sg_last_error())

/* A model.bin written byte by byte, with the offsets of its parts kept for the truncation test. */
typedef struct buf {
	uint8_t b[1024];
	size_t n;
} buf;

static void put(buf *w, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++) w->b[w->n++] = (uint8_t)(v >> (8 * i));
}

static void put_str(buf *w, const char *s)
{
	size_t n = strlen(s) + 1;
	put(w, n, 2);
	memcpy(w->b + w->n, s, n);
	w->n += n;
}

/* One variable: rank dims (outermost first), dtype id, byte count, then `data` bytes of 0x11. */
static void put_var(buf *w, const char *name, int rank, const uint32_t *dims, int dtype, uint32_t nbytes,
		    uint32_t data)
{
	put_str(w, name);
	put(w, (uint64_t)rank, 1);
	for (int i = 0; i < rank; i++) put(w, dims[i], 4);
	put(w, (uint64_t)dtype, 1);
	put(w, nbytes, 4);
	memset(w->b + w->n, 0x11, data);
	w->n += data;
}

static void put_head(buf *w, uint32_t n_vars)
{
	put(w, SG_CT2_VERSION, 4);
	put_str(w, "TestSpec");
	put(w, 7, 4);
	put(w, n_vars, 4);
}

static sg_status parse(const buf *w)
{
	sg_ct2 c;
	sg_status st = sg_ct2_parse(w->b, w->n, "m.bin", &c);
	if (!st) sg_ct2_close(&c);
	return st;
}

static const uint32_t D23[] = {2, 3}, D3[] = {3};

Test(ct2, reads_the_fixture_listing)
{
	sg_ct2 c;
	cr_assert_eq(sg_ct2_open(FIXTURE, &c), SG_OK, "%s", sg_last_error());
	cr_expect_eq(c.version, 6);
	cr_expect_str_eq(c.spec, "TinySpec");
	cr_expect_eq(c.revision, 2);
	cr_assert_eq(c.n_vars, 11);
	cr_assert_eq(c.n_aliases, 1);
	cr_expect_eq(c.data_bytes, 177);
	const char *names[] = {"decoder/activation", "decoder/embeddings/weight", "decoder/empty",
			       "decoder/layer_0/linear/bias", "decoder/layer_0/linear/weight",
			       "decoder/layer_0/linear/weight_scale", "decoder/num_heads", "encoder/conv/weight",
			       "encoder/ids", "encoder/proj/weight", "encoder/proj/weight_scale"};
	const sg_type types[] = {SG_TYPE_I8, SG_TYPE_F16, SG_TYPE_F32, SG_TYPE_BF16, SG_TYPE_I8, SG_TYPE_F32,
				 SG_TYPE_I16, SG_TYPE_F32, SG_TYPE_I32, SG_TYPE_I16, SG_TYPE_F32};
	const uint64_t offsets[] = {50, 93, 163, 203, 255, 315, 353, 395, 495, 547, 593};
	for (int i = 0; i < 11; i++) {
		cr_expect_str_eq(c.vars[i].t.name, names[i]);
		cr_expect_eq(c.vars[i].t.type, types[i], "%s", names[i]);
		cr_expect_eq(c.vars[i].t.offset, offsets[i], "%s", names[i]);
		cr_expect_eq(c.vars[i].t.data, c.map.data + offsets[i]);
	}
	const sg_tensor *conv = &c.vars[7].t; /* [2, 3, 3] outermost first: ggml order {3, 3, 2} */
	cr_expect(conv->n_dims == 3 && conv->ne[0] == 3 && conv->ne[1] == 3 && conv->ne[2] == 2);
	cr_expect_eq(c.vars[0].t.n_dims, 0);
	cr_expect(c.vars[2].t.ne[1] == 0 && c.vars[2].t.nbytes == 0);
	cr_expect_str_eq(c.aliases[0].name, "decoder/projection/weight");
	sg_ct2_close(&c);
}

Test(ct2, reads_values_back_in_every_dtype)
{
	sg_ct2 c;
	cr_assert_eq(sg_ct2_open(FIXTURE "/model.bin", &c), SG_OK, "%s", sg_last_error());
	/* element i of each variable is start + i * step (tools/make_ct2.py); the data is not
	 * aligned in the file, so it is copied out before it is read as wider types */
	float f[20];
	uint8_t raw[72];
	const sg_ct2_var *v = sg_ct2_find(&c, "decoder/embeddings/weight");
	memcpy(raw, v->t.data, v->t.nbytes);
	sg_dequantize_ref(SG_TYPE_F16, raw, f, 20);
	for (int i = 0; i < 20; i++) cr_expect_float_eq(f[i], -1.0f + 0.125f * (float)i, 0.0f, "f16 %d", i);
	v = sg_ct2_find(&c, "decoder/layer_0/linear/bias");
	memcpy(raw, v->t.data, v->t.nbytes);
	sg_dequantize_ref(SG_TYPE_BF16, raw, f, 3);
	for (int i = 0; i < 3; i++) cr_expect_float_eq(f[i], 0.5f + 0.25f * (float)i, 0.0f, "bf16 %d", i);
	v = sg_ct2_find(&c, "encoder/conv/weight");
	memcpy(raw, v->t.data, v->t.nbytes);
	sg_dequantize_ref(SG_TYPE_F32, raw, f, 18);
	for (int i = 0; i < 18; i++) cr_expect_float_eq(f[i], -2.0f + 0.25f * (float)i, 0.0f, "f32 %d", i);
	v = sg_ct2_find(&c, "decoder/layer_0/linear/weight");
	for (int i = 0; i < 12; i++) cr_expect_eq((int8_t)v->t.data[i], -6 + i, "i8 %d", i);
	cr_assert_not_null(v->scale);
	cr_expect_str_eq(v->scale->name, "decoder/layer_0/linear/weight_scale");
	cr_expect(sg_ct2_find(&c, "decoder/layer_0/linear/weight_scale")->is_scale);
	v = sg_ct2_find(&c, "encoder/proj/weight");
	for (int i = 0; i < 6; i++) {
		int16_t x;
		memcpy(&x, v->t.data + 2 * i, 2);
		cr_expect_eq(x, -300 + 101 * i, "i16 %d", i);
	}
	cr_expect_str_eq(v->scale->name, "encoder/proj/weight_scale");
	v = sg_ct2_find(&c, "encoder/ids");
	for (int i = 0; i < 4; i++) {
		int32_t x;
		memcpy(&x, v->t.data + 4 * i, 4);
		cr_expect_eq(x, -70000 + 40000 * i, "i32 %d", i);
	}
	cr_expect_eq((int8_t)sg_ct2_find(&c, "decoder/activation")->t.data[0], 3);
	cr_expect_null(sg_ct2_find(&c, "decoder/activation")->scale); /* an int8 flag, not a weight */
	/* the alias leads to its variable; an unknown name to nothing */
	cr_expect_eq(sg_ct2_find(&c, "decoder/projection/weight"), sg_ct2_find(&c, "decoder/embeddings/weight"));
	cr_expect_null(sg_ct2_find(&c, "decoder/projection"));
	cr_expect_null(sg_ct2_find(&c, ""));
	sg_ct2_close(&c);
}

Test(ct2, every_truncation_is_refused_naming_the_part)
{
	sg_mapped_file m;
	cr_assert_eq(sg_mmap_open(FIXTURE "/model.bin", &m), SG_OK);
	/* the part that each cut lands in, from the fixture's layout (see the listing test) */
	for (size_t cut = 0; cut < m.size; cut++) {
		sg_ct2 c;
		sg_status st = sg_ct2_parse(m.data, cut, "cut.bin", &c);
		cr_expect_eq(st, SG_ERR_FORMAT, "cut at %zu accepted", cut);
		const char *e = sg_last_error();
		cr_expect(strstr(e, "ct2: cut.bin: ") == e, "cut %zu: %s", cut, e);
		cr_expect(strstr(e, "truncated") || strstr(e, "past file size") || strstr(e, "cannot fit"), "cut %zu: %s",
			  cut, e);
		if (cut < 4) cr_expect(strstr(e, "binary version"), "cut %zu: %s", cut, e);
		else if (cut < 15) cr_expect(strstr(e, "spec name"), "cut %zu: %s", cut, e);
		else if (cut < 19) cr_expect(strstr(e, "spec revision"), "cut %zu: %s", cut, e);
		else if (cut < 23) cr_expect(strstr(e, "truncated: variable count"), "cut %zu: %s", cut, e);
		/* 11 variables need at least 99 bytes: a shorter rest is refused before any is read */
		else if (cut < 23 + 99) cr_expect(strstr(e, "variable count 11 cannot fit"), "cut %zu: %s", cut, e);
		else if (cut < 133) cr_expect(strstr(e, "'decoder/embeddings/weight' data [93, 133) runs past file size"), "%s", e);
		else if (cut >= 255 && cut < 267) cr_expect(strstr(e, "'decoder/layer_0/linear/weight' data [255, 267)"), "%s", e);
		else if (cut >= 593 && cut < 597) cr_expect(strstr(e, "'encoder/proj/weight_scale' data [593, 597)"), "%s", e);
		else if (cut >= 597 && cut < 601) cr_expect(strstr(e, "truncated: alias count"), "cut %zu: %s", cut, e);
		else if (cut >= 601 && cut < 607) cr_expect(strstr(e, "alias count 1 cannot fit"), "cut %zu: %s", cut, e);
		else if (cut >= 607 && cut < 629) cr_expect(strstr(e, "name of alias 0"), "cut %zu: %s", cut, e);
		else if (cut >= 629) cr_expect(strstr(e, "target of alias 0"), "cut %zu: %s", cut, e);
		if (cut >= 133 && cut < 593) /* inside the later variables: a record or data cut short */
			cr_expect(strstr(e, "variable"), "cut %zu: %s", cut, e);
		if (!st) sg_ct2_close(&c);
	}
	/* and a byte past the alias table is refused too */
	uint8_t *more = sg_calloc(1, m.size + 1);
	memcpy(more, m.data, m.size);
	sg_ct2 c;
	cr_expect_eq(sg_ct2_parse(more, m.size + 1, "long.bin", &c), SG_ERR_FORMAT);
	HAS("1 unexpected bytes after the alias table (it ends at offset 657)");
	sg_free(more);
	sg_mmap_close(&m);
}

Test(ct2, byte_counts_and_dimensions_must_agree)
{
	buf w = {0};
	put_head(&w, 1);
	put_var(&w, "w", 2, D23, 0, 24, 24);
	put(&w, 0, 4);
	cr_expect_eq(parse(&w), SG_OK, "%s", sg_last_error());

	w.n = 0;
	put_head(&w, 1);
	put_var(&w, "w", 2, D23, 0, 20, 20);
	put(&w, 0, 4);
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("variable 'w' is float32 [3, 2] = 24 bytes but its byte count says 20");

	/* a byte count that runs past the end of the file */
	w.n = 0;
	put_head(&w, 1);
	put_var(&w, "w", 2, (const uint32_t[]){1000, 1000}, 4, 2000000, 8);
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("variable 'w' data [");
	HAS("runs past file size");

	/* absurd dimensions: every dimension 2^32-1 in rank 8 */
	w.n = 0;
	put_head(&w, 1);
	uint32_t big[8];
	for (int i = 0; i < 8; i++) big[i] = 0xffffffffu;
	put_var(&w, "huge", 8, big, 0, 0xffffffffu, 0);
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("variable 'huge' shape");
	HAS("is too large");
	/* a product that fits but disagrees with the 32-bit byte count */
	w.n = 0;
	put_head(&w, 1);
	put_var(&w, "wide", 2, (const uint32_t[]){0x10000, 0x10000}, 1, 0, 0);
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("variable 'wide' is int8 [65536, 65536] = 4294967296 bytes but its byte count says 0");

	w.n = 0;
	put_head(&w, 1);
	put_var(&w, "deep", 9, (const uint32_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, 4, 4);
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("variable 'deep' has rank 9 (at most 8)");

	w.n = 0;
	put_head(&w, 1);
	put_var(&w, "q", 1, D3, 6, 3, 3);
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("variable 'q' has unknown dtype 6");
}

Test(ct2, absurd_counts_versions_and_strings)
{
	buf w = {0};
	put_head(&w, 0xffffffffu);
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("variable count 4294967295 cannot fit in the 0 bytes left at offset 23");

	w.n = 0;
	put_head(&w, 0);
	put(&w, 1000000, 4);
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("alias count 1000000 cannot fit");

	w.n = 0;
	put(&w, 5, 4);
	put_str(&w, "OldSpec");
	cr_expect_eq(parse(&w), SG_ERR_UNSUPPORTED);
	HAS("binary version 5 is not supported (this reader knows version 6)");

	/* a string without its NUL, one with a NUL inside, one of length 0 */
	w.n = 0;
	put(&w, 6, 4);
	put(&w, 3, 2);
	memcpy(w.b + w.n, "abc", 3), w.n += 3;
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("spec name at offset 4 is not a NUL-terminated string of length 3");
	w.b[5 + 2] = 0, w.b[5 + 1] = 0; /* "a\0\0" */
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("not a NUL-terminated string");
	w.n = 4;
	put(&w, 0, 2);
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("spec name at offset 4 is not a NUL-terminated string of length 0");

	w.n = 0;
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("truncated: binary version needs 4 bytes at offset 0, file is 0");
}

Test(ct2, names_aliases_and_scales_are_checked)
{
	buf w = {0};
	put_head(&w, 2);
	put_var(&w, "a", 1, D3, 0, 12, 12);
	put_var(&w, "a", 1, D3, 0, 12, 12);
	put(&w, 0, 4);
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("two variables are named 'a'");

	w.n = 0;
	put_head(&w, 1);
	put_var(&w, "a", 1, D3, 0, 12, 12);
	put(&w, 1, 4);
	put_str(&w, "b"), put_str(&w, "nothing");
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("alias 'b' names 'nothing', which is not a variable");

	w.n = 0;
	put_head(&w, 1);
	put_var(&w, "a", 1, D3, 0, 12, 12);
	put(&w, 1, 4);
	put_str(&w, "a"), put_str(&w, "a");
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("alias 'a' has the name of a variable");

	w.n = 0;
	put_head(&w, 1);
	put_var(&w, "a", 1, D3, 0, 12, 12);
	put(&w, 2, 4);
	put_str(&w, "b"), put_str(&w, "a");
	put_str(&w, "b"), put_str(&w, "a");
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("two aliases are named 'b'");

	/* an int8 weight of 2 rows with a scale of 3 values, then of an integer type */
	w.n = 0;
	put_head(&w, 2);
	put_var(&w, "w", 2, D23, 1, 6, 6);
	put_var(&w, "w_scale", 1, D3, 0, 12, 12);
	put(&w, 0, 4);
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("scale 'w_scale' is F32 [3]; weight 'w' (2 rows) needs float [2] or a scalar");
	w.n = 0;
	put_head(&w, 2);
	put_var(&w, "w", 2, D23, 1, 6, 6);
	put_var(&w, "w_scale", 1, (const uint32_t[]){2}, 3, 8, 8);
	put(&w, 0, 4);
	cr_expect_eq(parse(&w), SG_ERR_FORMAT);
	HAS("scale 'w_scale' is I32 [2]");
}

Test(ct2, open_names_the_missing_file_and_detect_tells_formats_apart)
{
	sg_ct2 c;
	cr_expect_neq(sg_ct2_open("tests/fixtures/no-such-ct2", &c), SG_OK);
	HAS("cannot open 'tests/fixtures/no-such-ct2'");
	cr_expect_neq(sg_ct2_open("tests/fixtures/qwen3", &c), SG_OK); /* a folder without model.bin */
	HAS("cannot open 'tests/fixtures/qwen3/model.bin'");
	cr_expect_eq(sg_ct2_detect(FIXTURE), 1);
	cr_expect_eq(sg_ct2_detect(FIXTURE "/model.bin"), 1);
	cr_expect_eq(sg_ct2_detect("tests/fixtures/qwen3"), 0);
	cr_expect_eq(sg_ct2_detect("tests/fixtures/qwen3/model.safetensors"), 0);
	cr_expect_eq(sg_ct2_detect("tests/fixtures/qwen3/config.json"), 0);
	cr_expect_eq(sg_ct2_detect("tests/fixtures/no-such-ct2"), 0);
}

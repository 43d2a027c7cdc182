/* safetensors header validation on hand-built buffers. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "formats/safetensors.h"

/* header JSON + `data` zero bytes, in a heap buffer of exactly the file's size */
static uint8_t *make(const char *json, size_t data, size_t *size)
{
	size_t h = strlen(json);
	*size = 8 + h + data;
	uint8_t *p = sg_calloc(1, *size);
	for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)h >> (8 * i));
	memcpy(p + 8, json, h);
	return p;
}

static sg_status parse(const char *json, size_t data)
{
	size_t n;
	uint8_t *p = make(json, data, &n);
	sg_safetensors s;
	sg_status st = sg_safetensors_parse(p, n, "m.safetensors", 0, &s);
	if (!st) sg_safetensors_free(&s);
	sg_free(p);
	return st;
}

#define HAS(s) cr_expect(strstr(sg_last_error(), s) != NULL, "message: %s", sg_last_error())

Test(safetensors, parses_shapes_in_ggml_order_and_metadata)
{
	const char *j = "{\"__metadata__\":{\"format\":\"pt\"},"
			"\"b\":{\"dtype\":\"BF16\",\"shape\":[3,2],\"data_offsets\":[16,28]},"
			"\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
			"\"e\":{\"dtype\":\"I8\",\"shape\":[0,5],\"data_offsets\":[28,28]}}";
	size_t n;
	uint8_t *p = make(j, 28, &n);
	sg_safetensors s;
	cr_assert_eq(sg_safetensors_parse(p, n, "m", 2, &s), SG_OK, "%s", sg_last_error());
	cr_assert_eq(s.n_tensors, 3);
	cr_expect_str_eq(s.tensors[0].name, "a"); /* sorted by offset */
	cr_expect_str_eq(s.tensors[1].name, "b");
	cr_expect(s.tensors[1].ne[0] == 2 && s.tensors[1].ne[1] == 3 && s.tensors[1].type == SG_TYPE_BF16);
	cr_expect_eq(s.tensors[1].offset, 8 + strlen(j) + 16);
	cr_expect_eq(s.tensors[1].data, p + s.tensors[1].offset);
	cr_expect_eq(s.tensors[1].file, 2);
	cr_expect_not_null(s.metadata);
	sg_safetensors_free(&s);
	sg_free(p);
}

Test(safetensors, every_dtype_name_maps)
{
	const char *names[] = {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "U32", "BOOL", "F8_E4M3", "F8_E5M2"};
	for (size_t i = 0; i < 13; i++) {
		int t = sg_safetensors_dtype(names[i]);
		cr_assert_geq(t, 0, "%s", names[i]);
		cr_expect_str_eq(sg_type_name(t), names[i]);
	}
	cr_expect_eq(sg_safetensors_dtype("F4"), -1);
}

Test(safetensors, rejects_with_tensor_name_and_numbers)
{
	cr_expect_eq(parse("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,20]}}", 16), SG_ERR_FORMAT);
	HAS("tensor 'w' data ends at");
	HAS("past file size");
	cr_expect_eq(parse("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", 24), SG_ERR_FORMAT);
	HAS("'w' is F32 [3, 2] = 24 bytes but data_offsets [0, 16] hold 16");
	cr_expect_eq(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
			   "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[12,16]}}",
			   16),
		     SG_ERR_FORMAT);
	HAS("'a' [0, 16) and 'b' [12, 16) overlap");
	cr_expect_eq(parse("{\"w\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,2]}}", 2), SG_ERR_FORMAT);
	HAS("unknown dtype 'Q4'");
	cr_expect_eq(parse("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0), SG_ERR_FORMAT);
	cr_expect_eq(parse("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,4]}}", 16), SG_ERR_FORMAT);
	cr_expect_eq(parse("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,0]}}", 0),
		     SG_ERR_FORMAT);
	HAS("too large");
	cr_expect_eq(parse("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4), SG_ERR_FORMAT);
	cr_expect_eq(parse("{\"w\":[1,2]}", 0), SG_ERR_FORMAT);
	cr_expect_eq(parse("{\"w\":{\"dtype\":\"F32\"}}", 0), SG_ERR_FORMAT);
	cr_expect_eq(parse("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"w\":{}}", 4), SG_ERR_FORMAT);
	cr_expect_eq(parse("{\"__metadata__\":3}", 0), SG_ERR_FORMAT);
	cr_expect_eq(parse("{bad json", 0), SG_ERR_FORMAT);
	HAS("invalid JSON");
}

Test(safetensors, absurd_header_lengths)
{
	uint8_t p[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
	sg_safetensors s;
	cr_expect_eq(sg_safetensors_parse(p, sizeof(p), "m", 0, &s), SG_ERR_FORMAT);
	HAS("exceeds");
	p[0] = 100, memset(p + 1, 0, 7);
	cr_expect_eq(sg_safetensors_parse(p, sizeof(p), "m", 0, &s), SG_ERR_FORMAT);
	HAS("runs past file size");
	cr_expect_eq(sg_safetensors_parse(p, 5, "m", 0, &s), SG_ERR_FORMAT);
	HAS("too short");
}

Test(safetensors, every_truncation_is_a_clean_error)
{
	size_t n;
	uint8_t *full = make("{\"a\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}", 8, &n);
	for (size_t k = 0; k < n; k++) {
		uint8_t *c = sg_malloc(k ? k : 1);
		memcpy(c, full, k);
		sg_safetensors s;
		cr_assert_neq(sg_safetensors_parse(c, k, "m", 0, &s), SG_OK, "cut at %zu", k);
		sg_free(c);
	}
	sg_free(full);
}

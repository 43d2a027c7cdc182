/* Unit tests of src/text/grammar/json_schema.c: what is enforced, errors naming keyword and path, and the
 * property test on random schemas (mask == oracle at every step; complete outputs parse).
 *
 * With SG_GRAMMAR_SAMPLES_DIR set, json_schema::writes_samples_for_validation writes each schema
 * of a fixed set plus random ones, with outputs generated through the mask, into that folder;
 * tests/e2e/test_grammar.py runs it and validates every output with the jsonschema package. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "grammar_oracle.h"
#include "text/grammar/json_schema.h"

static sg_grammar *compile_str(const char *schema, int strict)
{
	json_error_t e;
	json_t *j = json_loads(schema, JSON_DECODE_ANY, &e);
	cr_assert_not_null(j, "bad test schema: %s", e.text);
	sg_grammar *g = NULL;
	char warn[256];
	sg_status st = sg_json_schema_compile(j, strict, &g, warn, sizeof(warn));
	json_decref(j);
	cr_assert_eq(st, SG_OK, "%s: %s", schema, sg_last_error());
	return g;
}

static sg_status compile_err(const char *schema, int strict, char *warn, size_t wn)
{
	json_t *j = json_loads(schema, JSON_DECODE_ANY, NULL);
	cr_assert_not_null(j);
	sg_grammar *g = NULL;
	sg_status st = sg_json_schema_compile(j, strict, &g, warn, wn);
	json_decref(j);
	sg_grammar_free(g);
	return st;
}

static int run_str(const sg_grammar *g, const char *s)
{
	sg_grammar_state *st;
	cr_assert_eq(sg_grammar_state_new(g, &st), SG_OK);
	int ok = sg_grammar_advance(st, (const uint8_t *)s, strlen(s)) == SG_OK;
	int r = ok ? 2 + sg_grammar_accepts_eos(st) : 0;
	sg_grammar_state_free(st);
	return r;
}

#define EXPECT(g, text, want) cr_expect_eq(run_str(g, text), want, "'%s' want %d", text, want)

Test(json_schema, unsupported_keywords_are_errors_naming_keyword_and_pointer)
{
	struct {
		const char *schema, *msg;
	} c[] = {
		{"{\"type\":\"string\",\"pattern\":\"^a\"}", "'pattern' at /pattern"},
		{"{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"}}}",
		 "'format' at /properties/d/format"},
		{"{\"type\":\"array\",\"items\":{\"type\":\"number\",\"multipleOf\":2}}",
		 "'multipleOf' at /items/multipleOf"},
		{"{\"$defs\":{\"a/b\":{\"not\":{}}},\"$ref\":\"#/$defs/a~1b\"}", "'not' at /$defs/a~1b/not"},
		{"{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems'"},
		{"{\"anyOf\":[{\"type\":\"object\",\"minProperties\":1}]}", "/anyOf/0/minProperties"},
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		cr_expect_eq(compile_err(c[i].schema, 1, NULL, 0), SG_ERR_UNSUPPORTED, "%s", c[i].schema);
		cr_expect(strstr(sg_last_error(), c[i].msg) != NULL, "'%s' not in '%s'", c[i].msg,
			  sg_last_error());
	}
}

Test(json_schema, non_strict_mode_skips_unsupported_keywords_with_a_warning)
{
	char warn[256];
	cr_expect_eq(compile_err("{\"type\":\"string\",\"format\":\"email\"}", 0, warn, sizeof(warn)), SG_OK);
	cr_expect(strstr(warn, "'format' at /format") != NULL, "%s", warn);
	cr_expect_eq(compile_err("{\"type\":\"string\",\"x-vendor\":1,\"title\":\"t\"}", 1, warn, sizeof(warn)),
		     SG_OK, "unknown keywords are annotations");
	cr_expect_str_eq(warn, "");
}

Test(json_schema, malformed_schemas_are_refused)
{
	const char *c[] = {
		"{\"type\":\"strin\"}", "{\"type\":[\"string\",3]}", "{\"$ref\":\"#/nope\"}",
		"{\"$ref\":\"http://x/y\"}", "{\"type\":\"string\",\"minLength\":-1}",
		"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}",
		"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "{\"enum\":3}", "3",
		"{\"type\":\"object\",\"properties\":{\"a\":false},\"required\":[\"a\"]}",
		"{\"type\":\"object\",\"required\":[\"a\"],\"properties\":{\"b\":{}},\"additionalProperties\":false}",
		"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "false",
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		cr_expect_eq(compile_err(c[i], 1, NULL, 0), SG_ERR_INVALID_ARG, "%s -> %s", c[i],
			     sg_last_error());
}

/* A required entry holding U+0000 names no key the request parser can read: it is refused, never
 * taken for the declared property its first bytes spell ("a\u0000b" is not "a"). */
Test(json_schema, required_entry_with_a_nul_is_refused_not_cut)
{
	const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},"
	                "\"required\":[\"a\\u0000b\"],\"additionalProperties\":false}";
	json_t *j = json_loads(s, JSON_ALLOW_NUL, NULL); /* as the request parser reads it */
	cr_assert_not_null(j);
	sg_grammar *g = NULL;
	cr_expect_eq(sg_json_schema_compile(j, 1, &g, NULL, 0), SG_ERR_INVALID_ARG, "%s", sg_last_error());
	cr_expect(strstr(sg_last_error(), "U+0000") != NULL, "%s", sg_last_error());
	json_decref(j);
	sg_grammar_free(g);
}

Test(json_schema, properties_in_schema_order_required_mandatory_optional_skippable)
{
	sg_grammar *g = compile_str(
		"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
		"\"string\"},\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"],\"additionalProperties\":false}",
		1);
	EXPECT(g, "{\"b\":\"x\"}", 3);
	EXPECT(g, "{\"a\":1,\"b\":\"x\",\"c\":true}", 3);
	EXPECT(g, "{\"b\":\"x\",\"c\":false}", 3);
	EXPECT(g, "{\"a\":1}", 0);         /* b is required */
	EXPECT(g, "{\"c\":true", 0);       /* c cannot come before b */
	EXPECT(g, "{\"b\":\"x\",\"a\":1", 0); /* order */
	EXPECT(g, "{\"b\":\"x\",\"d\":1", 0); /* no additional */
	EXPECT(g, "{\"b\":\"x\",\"c\":true,", 0); /* no key can follow: no comma */
	EXPECT(g, "{}", 0);
	sg_grammar_free(g);
}

Test(json_schema, additional_properties_schema_applies_after_declared_ones)
{
	sg_grammar *g = compile_str("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
				    "\"additionalProperties\":{\"type\":\"boolean\"}}",
				    1);
	EXPECT(g, "{\"a\":1,\"zz\":true,\"yy\":false}", 3);
	EXPECT(g, "{\"zz\":true}", 3);
	EXPECT(g, "{\"zz\":1", 0);
	EXPECT(g, "{\"a\":1,\"a\":true", 0); /* a declared name is not an additional one */
	EXPECT(g, "{\"ab\":true}", 3);       /* sharing a prefix with a declared name is fine */
	EXPECT(g, "{\"\":true}", 3);
	sg_grammar_free(g);
	g = compile_str("{\"type\":\"object\"}", 1);
	EXPECT(g, "{\"any\":[1,{\"x\":null}]}", 3);
	sg_grammar_free(g);
	g = compile_str("{\"type\":\"object\",\"properties\":{\"a\":{}}}", 1);
	EXPECT(g, "{\"b\":1", 0); /* declared properties and no additionalProperties: none */
	sg_grammar_free(g);
}

Test(json_schema, integer_bounds_are_exact_digit_by_digit)
{
	sg_grammar *g = compile_str("{\"type\":\"integer\",\"minimum\":-15,\"maximum\":120}", 1);
	EXPECT(g, "-15", 3);
	EXPECT(g, "-16", 0);
	EXPECT(g, "-1", 3);
	EXPECT(g, "-0", 0);
	EXPECT(g, "0", 3);
	EXPECT(g, "120", 3);
	EXPECT(g, "121", 0);
	EXPECT(g, "12", 3);
	EXPECT(g, "1200", 0);
	EXPECT(g, "1.0", 0);
	EXPECT(g, "1e2", 0);
	sg_grammar_free(g);
	g = compile_str("{\"type\":\"integer\",\"exclusiveMinimum\":10,\"exclusiveMaximum\":20}", 1);
	EXPECT(g, "10", 0);
	EXPECT(g, "1", 2); /* a prefix of 11..19 */
	EXPECT(g, "11", 3);
	EXPECT(g, "20", 0);
	EXPECT(g, "2", 0); /* nothing in 11..19 starts with 2 */
	sg_grammar_free(g);
	g = compile_str("{\"type\":\"integer\",\"minimum\":100}", 1);
	EXPECT(g, "1", 2);
	EXPECT(g, "99", 2); /* 990 */
	EXPECT(g, "-", 0);
	sg_grammar_free(g);
}

Test(json_schema, number_bounds_allow_integers_and_decimals_whose_unit_interval_fits)
{
	sg_grammar *g = compile_str("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", 1);
	EXPECT(g, "0", 3);
	EXPECT(g, "1", 3);
	EXPECT(g, "0.5", 3);
	EXPECT(g, "0.999", 3);
	EXPECT(g, "1.5", 0);
	EXPECT(g, "1.0", 0); /* valid, but 1.x is not produced: its unit interval leaves the range */
	EXPECT(g, "2", 0);
	EXPECT(g, "-0.5", 0);
	EXPECT(g, "0.5e1", 0);
	sg_grammar_free(g);
	g = compile_str("{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":-1}", 1);
	EXPECT(g, "-1", 3);
	EXPECT(g, "-2", 3);
	EXPECT(g, "-1.5", 3);
	EXPECT(g, "-0.5", 0);
	EXPECT(g, "-3", 0);
	EXPECT(g, "1", 0);
	sg_grammar_free(g);
	g = compile_str("{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":100}", 1);
	EXPECT(g, "0", 0);
	EXPECT(g, "100", 0);
	EXPECT(g, "99", 3);
	EXPECT(g, "99.9", 3);
	EXPECT(g, "12.25", 3);
	sg_grammar_free(g);
	g = compile_str("{\"type\":\"number\",\"minimum\":1000}", 1);
	EXPECT(g, "1000.5", 3);
	EXPECT(g, "123456789.5", 3);
	EXPECT(g, "999.9", 0);
	sg_grammar_free(g);
	cr_expect_eq(compile_err("{\"type\":\"number\",\"minimum\":0.2,\"maximum\":0.4}", 1, NULL, 0),
		     SG_ERR_INVALID_ARG, "no integer and no unit interval fits: refused, not silently loosened");
}

Test(json_schema, string_length_counts_code_points_and_escapes)
{
	sg_grammar *g = compile_str("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", 1);
	EXPECT(g, "\"a\"", 0);
	EXPECT(g, "\"ab\"", 3);
	EXPECT(g, "\"abc\"", 3);
	EXPECT(g, "\"abcd", 0);
	EXPECT(g, "\"\xc3\xa9\xc3\xa9\xc3\xa9\"", 3);
	EXPECT(g, "\"\\n\\u0041\\ud83d\\ude00\"", 3); /* three code points */
	EXPECT(g, "\"\\n\\u0041\\ud83d\\ude00\\t", 0);
	sg_grammar_free(g);
}

Test(json_schema, enum_const_and_boolean_schemas)
{
	sg_grammar *g = compile_str("{\"enum\":[\"red\",\"green\",1,12,null,{\"a\":[1,2]},1.5]}", 1);
	EXPECT(g, "\"red\"", 3);
	EXPECT(g, "\"re\"", 0);
	EXPECT(g, "1", 3);
	EXPECT(g, "12", 3);
	EXPECT(g, "123", 0);
	EXPECT(g, "{\"a\":[1,2]}", 3);
	EXPECT(g, "1.5", 3);
	EXPECT(g, "null", 3);
	sg_grammar_free(g);
	g = compile_str("{\"type\":\"string\",\"enum\":[\"a\",1]}", 1);
	EXPECT(g, "1", 0); /* enum values of another type are dropped */
	EXPECT(g, "\"a\"", 3);
	sg_grammar_free(g);
	g = compile_str("{\"const\":\"x\\\"y\"}", 1);
	EXPECT(g, "\"x\\\"y\"", 3);
	sg_grammar_free(g);
	g = compile_str("true", 1);
	EXPECT(g, "[1,\"a\",{}]", 3);
	sg_grammar_free(g);
	g = compile_str("{\"type\":\"object\",\"properties\":{\"a\":false,\"b\":true}}", 1);
	EXPECT(g, "{\"a\"", 0);
	EXPECT(g, "{\"b\":[]}", 3);
	sg_grammar_free(g);
}

Test(json_schema, arrays_items_and_counts)
{
	sg_grammar *g = compile_str("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}", 1);
	EXPECT(g, "[]", 0);
	EXPECT(g, "[1]", 3);
	EXPECT(g, "[1, 2]", 3);
	EXPECT(g, "[1,2,", 0);
	EXPECT(g, "[\"a\"", 0);
	sg_grammar_free(g);
}

Test(json_schema, anyof_with_shared_prefixes_keeps_every_live_alternative)
{
	sg_grammar *g = compile_str(
		"{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":"
		"{\"type\":\"number\"}},\"required\":[\"kind\",\"r\"],\"additionalProperties\":false},"
		"{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"rect\"},\"w\":{\"type\":"
		"\"number\"},\"h\":{\"type\":\"number\"}},\"required\":[\"kind\",\"w\",\"h\"],"
		"\"additionalProperties\":false},{\"type\":[\"string\",\"null\"]}]}",
		1);
	EXPECT(g, "{\"kind\":\"circle\",\"r\":1.5}", 3);
	EXPECT(g, "{\"kind\":\"rect\",\"w\":1,\"h\":2}", 3);
	EXPECT(g, "{\"kind\":\"rect\",\"r\":1", 0);
	EXPECT(g, "\"s\"", 3);
	EXPECT(g, "null", 3);
	EXPECT(g, "1", 0);
	sg_grammar_free(g);
	g = compile_str("{\"type\":[\"integer\",\"number\"]}", 1);
	EXPECT(g, "1.5", 3);
	sg_grammar_free(g);
}

Test(json_schema, recursive_refs_are_bounded_by_the_nesting_limit)
{
	sg_grammar *g = compile_str(
		"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
		"\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"],"
		"\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}",
		1);
	EXPECT(g, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}", 3);
	EXPECT(g, "{\"v\":1,\"kids\":[{\"w\":2", 0);
	char buf[2048];
	size_t k = 0;
	for (int i = 0; i < 40; i++) k += (size_t)snprintf(buf + k, sizeof(buf) - k, "{\"v\":1,\"kids\":[");
	EXPECT(g, buf, 0); /* 80 levels */
	sg_grammar_free(g);
	g = compile_str("{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#\"}}}", 1);
	EXPECT(g, "{\"next\":{\"next\":{}}}", 3);
	sg_grammar_free(g);
}

Test(json_schema, response_format_variants)
{
	sg_grammar *g = (sg_grammar *)1;
	json_t *rf = json_loads("{\"type\":\"text\"}", 0, NULL);
	cr_expect_eq(sg_json_schema_response_format(rf, &g, NULL, 0), SG_OK);
	cr_expect_null(g);
	json_decref(rf);
	rf = json_loads("{\"type\":\"json_object\"}", 0, NULL);
	cr_expect_eq(sg_json_schema_response_format(rf, &g, NULL, 0), SG_OK);
	EXPECT(g, "{}", 3);
	EXPECT(g, "[]", 0);
	sg_grammar_free(g);
	json_decref(rf);
	rf = json_loads("{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,"
			"\"schema\":{\"type\":\"string\",\"pattern\":\"a\"}}}", 0, NULL);
	cr_expect_eq(sg_json_schema_response_format(rf, &g, NULL, 0), SG_ERR_UNSUPPORTED);
	json_decref(rf);
	rf = json_loads("{\"type\":\"xml\"}", 0, NULL);
	cr_expect_eq(sg_json_schema_response_format(rf, &g, NULL, 0), SG_ERR_INVALID_ARG);
	json_decref(rf);
}

/* ---- property test on random schemas ---- */

static json_t *rand_schema(uint64_t *r, int depth, json_t *defs);

static json_t *rand_leaf(uint64_t *r)
{
	switch (rng_int(r, 8)) {
	case 7: {
		json_t *s = json_pack("{s:s}", "type", "number");
		int lo = rng_int(r, 20) - 10;
		json_object_set_new(s, rng_int(r, 2) ? "minimum" : "exclusiveMinimum", json_real(lo - 0.5));
		if (rng_int(r, 2)) json_object_set_new(s, "maximum", json_integer(lo + 1 + rng_int(r, 30)));
		return s;
	}
	case 0: {
		json_t *s = json_pack("{s:s}", "type", "string");
		if (rng_int(r, 2)) json_object_set_new(s, "minLength", json_integer(rng_int(r, 3)));
		if (rng_int(r, 2)) json_object_set_new(s, "maxLength", json_integer(3 + rng_int(r, 6)));
		return s;
	}
	case 1: {
		json_t *s = json_pack("{s:s}", "type", "integer");
		int lo = rng_int(r, 200) - 100;
		if (rng_int(r, 2)) json_object_set_new(s, "minimum", json_integer(lo));
		if (rng_int(r, 2)) json_object_set_new(s, "maximum", json_integer(lo + rng_int(r, 300)));
		return s;
	}
	case 2: return json_pack("{s:s}", "type", "number");
	case 3: return json_pack("{s:s}", "type", "boolean");
	case 4: return json_pack("{s:[s,s]}", "type", "string", "null");
	case 5: return json_pack("{s:[s,s,i,i,n]}", "enum", "a", "ab", 1, 12);
	default: return json_pack("{s:s}", "const", "x\"y");
	}
}

static json_t *rand_schema(uint64_t *r, int depth, json_t *defs)
{
	int k = depth >= 3 ? 0 : rng_int(r, 6);
	if (k <= 1) return rand_leaf(r);
	if (k == 2) {
		json_t *s = json_pack("{s:s,s:o}", "type", "array", "items", rand_schema(r, depth + 1, defs));
		if (rng_int(r, 2)) json_object_set_new(s, "minItems", json_integer(rng_int(r, 2)));
		if (rng_int(r, 2)) json_object_set_new(s, "maxItems", json_integer(2 + rng_int(r, 3)));
		return s;
	}
	if (k == 3) {
		json_t *alts = json_array();
		json_array_append_new(alts, rand_schema(r, depth + 1, defs));
		json_array_append_new(alts, rand_schema(r, depth + 1, defs));
		return json_pack("{s:o}", "anyOf", alts);
	}
	if (k == 4 && defs) {
		char name[16];
		snprintf(name, sizeof(name), "d%zu", json_object_size(defs));
		json_object_set_new(defs, name, json_true()); /* reserve the name */
		json_object_set_new(defs, name, rand_schema(r, depth + 1, defs));
		char ref[32];
		snprintf(ref, sizeof(ref), "#/$defs/%s", name);
		return json_pack("{s:s}", "$ref", ref);
	}
	json_t *props = json_object(), *req = json_array();
	static const char *names[] = {"a", "ab", "name", "x", "y", "k", "v"};
	int np = 1 + rng_int(r, 4);
	for (int i = 0; i < np; i++) {
		const char *n = names[rng_int(r, 7)];
		if (json_object_get(props, n)) continue;
		json_object_set_new(props, n, rand_schema(r, depth + 1, defs));
		if (rng_int(r, 2)) json_array_append_new(req, json_string(n));
	}
	json_t *s = json_pack("{s:s,s:o,s:o}", "type", "object", "properties", props, "required", req);
	int ap = rng_int(r, 3);
	if (ap == 0) json_object_set_new(s, "additionalProperties", json_false());
	else if (ap == 1) json_object_set_new(s, "additionalProperties", rand_leaf(r));
	return s;
}

static json_t *rand_root(uint64_t seed)
{
	uint64_t r = seed * 2654435761u + 1;
	json_t *defs = json_object();
	json_t *s = rand_schema(&r, 0, defs);
	if (json_is_object(s) && json_object_size(defs)) json_object_set(s, "$defs", defs);
	json_decref(defs);
	return s;
}

Test(json_schema, mask_equals_the_oracle_on_random_schemas_and_walks, .timeout = 60)
{
	rvocab v;
	rv_make(&v, 4242, 300);
	int completed = 0, total = 0;
	for (uint64_t seed = 1; seed <= 30; seed++) {
		json_t *schema = rand_root(seed);
		sg_grammar *g = NULL;
		sg_status st = sg_json_schema_compile(schema, 1, &g, NULL, 0);
		char *text = json_dumps(schema, JSON_COMPACT);
		cr_assert_eq(st, SG_OK, "%s: %s", text, sg_last_error());
		uint64_t rng = seed;
		uint8_t out[4096];
		for (int w = 0; w < 3; w++) {
			size_t n;
			total++;
			if (!random_walk(g, &v, &rng, 100, 30, w == 0, out, sizeof(out), &n)) continue;
			completed++;
			json_error_t e;
			json_t *j = json_loadb((const char *)out, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
			cr_assert_not_null(j, "schema %s: output '%.*s' does not parse: %s", text, (int)n,
					   out, e.text);
			json_decref(j);
		}
		free(text);
		json_decref(schema);
		sg_grammar_free(g);
	}
	cr_expect_geq(completed, total * 3 / 4, "%d of %d walks completed", completed, total);
	rv_free(&v);
}

/* Schemas written for the e2e validation with the jsonschema package (>= 20). */
static const char *fixed_schemas[] = {
	"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
	"{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":5},\"minItems\":1,\"maxItems\":3}},\"required\":[\"tags\"]}",
	"{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"},\"n\":{\"type\":\"null\"}},\"required\":[\"ok\"]}",
	"{\"type\":\"object\",\"properties\":{\"color\":{\"enum\":[\"red\",\"green\",\"blue\"]}},\"required\":[\"color\"],\"additionalProperties\":false}",
	"{\"type\":\"object\",\"properties\":{\"v\":{\"const\":42},\"s\":{\"const\":\"fixed\"}},\"required\":[\"v\",\"s\"]}",
	"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"number\"}},\"required\":[\"x\",\"y\"],\"additionalProperties\":false}",
	"{\"type\":\"object\",\"properties\":{\"value\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"},{\"type\":\"null\"}]}},\"required\":[\"value\"]}",
	"{\"type\":\"object\",\"properties\":{\"shape\":{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":\"number\"}},\"required\":[\"kind\",\"r\"],\"additionalProperties\":false},{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"square\"},\"side\":{\"type\":\"number\"}},\"required\":[\"kind\",\"side\"],\"additionalProperties\":false}]}},\"required\":[\"shape\"]}",
	"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},\"required\":[\"v\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}",
	"{\"type\":\"object\",\"properties\":{\"meta\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}},\"required\":[\"meta\"]}",
	"{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1000}},\"required\":[\"id\"]}",
	"{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\",\"minLength\":3,\"maxLength\":3}},\"required\":[\"code\"]}",
	"{\"type\":\"object\",\"properties\":{\"matrix\":{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":3},\"maxItems\":3}},\"required\":[\"matrix\"]}",
	"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":[\"string\",\"null\"]},\"b\":{\"type\":[\"integer\",\"boolean\"]}},\"required\":[\"a\",\"b\"]}",
	"{\"type\":\"object\",\"properties\":{\"user\":{\"type\":\"object\",\"properties\":{\"first\":{\"type\":\"string\"},\"last\":{\"type\":\"string\"},\"email\":{\"type\":\"string\"}},\"required\":[\"first\",\"last\"],\"additionalProperties\":false},\"active\":{\"type\":\"boolean\"}},\"required\":[\"user\",\"active\"],\"additionalProperties\":false}",
	"{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"sku\":{\"type\":\"string\"},\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":99}},\"required\":[\"sku\",\"qty\"],\"additionalProperties\":false},\"minItems\":1,\"maxItems\":4}},\"required\":[\"items\"]}",
	"{\"type\":\"object\",\"properties\":{\"any\":{}},\"required\":[\"any\"]}",
	"{\"type\":\"object\",\"properties\":{\"e\":{\"enum\":[1,2.5,\"three\",null,true,[1,2],{\"k\":\"v\"}]}},\"required\":[\"e\"]}",
	"{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"integer\",\"minimum\":-50,\"maximum\":-10}},\"required\":[\"t\"]}",
	"{\"type\":\"object\",\"properties\":{\"answer\":{\"type\":\"string\"},\"confidence\":{\"type\":\"number\"},\"sources\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"answer\",\"confidence\",\"sources\"],\"additionalProperties\":false}",
	"{\"type\":\"object\",\"properties\":{\"é\":{\"type\":\"string\"},\"q\\\"k\":{\"type\":\"integer\"}},\"required\":[\"é\",\"q\\\"k\"]}",
	"{\"definitions\":{\"pt\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"},\"y\":{\"type\":\"integer\"}},\"required\":[\"x\",\"y\"],\"additionalProperties\":false}},\"type\":\"object\",\"properties\":{\"from\":{\"$ref\":\"#/definitions/pt\"},\"to\":{\"$ref\":\"#/definitions/pt\"}},\"required\":[\"from\",\"to\"],\"additionalProperties\":false}",
	"{\"type\":\"object\",\"properties\":{\"f\":{\"allOf\":[{\"type\":\"string\",\"maxLength\":4}]}},\"required\":[\"f\"]}",
	"{\"type\":\"object\",\"additionalProperties\":false}",
	"{\"type\":\"object\",\"properties\":{\"confidence\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1},\"temp\":{\"type\":\"number\",\"exclusiveMinimum\":-40.5,\"exclusiveMaximum\":60}},\"required\":[\"confidence\",\"temp\"]}",
};

Test(json_schema, writes_samples_for_validation, .timeout = 60)
{
	const char *dir = getenv("SG_GRAMMAR_SAMPLES_DIR");
	rvocab v;
	rv_make(&v, 777, 400);
	int nfixed = (int)(sizeof(fixed_schemas) / sizeof(fixed_schemas[0]));
	int nrand = dir ? 40 : 5;
	for (int i = 0; i < nfixed + nrand; i++) {
		json_t *schema = i < nfixed ? json_loads(fixed_schemas[i], 0, NULL) : rand_root(1000 + (uint64_t)i);
		cr_assert_not_null(schema, "fixed schema %d", i);
		sg_grammar *g;
		cr_assert_eq(sg_json_schema_compile(schema, 1, &g, NULL, 0), SG_OK, "schema %d: %s", i,
			     sg_last_error());
		json_t *outs = json_array();
		uint64_t rng = 31 + (uint64_t)i;
		uint8_t out[8192];
		for (int w = 0; w < 6; w++) {
			size_t n;
			if (!random_walk(g, &v, &rng, 200, 25 + w * 10, 0, out, sizeof(out), &n)) continue;
			json_t *j = json_loadb((const char *)out, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
			cr_assert_not_null(j, "schema %d: output '%.*s' does not parse", i, (int)n, out);
			json_decref(j);
			json_array_append_new(outs, json_stringn((const char *)out, n));
		}
		cr_expect_gt(json_array_size(outs), 0, "schema %d: no walk completed", i);
		if (dir) {
			char path[4096];
			snprintf(path, sizeof(path), "%s/sample_%03d.json", dir, i);
			json_t *doc = json_pack("{s:O,s:O}", "schema", schema, "outputs", outs);
			cr_assert_eq(json_dump_file(doc, path, JSON_INDENT(1)), 0, "writing %s", path);
			json_decref(doc);
		}
		json_decref(outs);
		json_decref(schema);
		sg_grammar_free(g);
	}
	rv_free(&v);
}

Test(json_schema, allocation_failures_give_errors_never_crashes)
{
	json_t *schema = json_loads(fixed_schemas[8], 0, NULL); /* recursive, refs, arrays, bounds */
	cr_assert_not_null(schema);
	rvocab v;
	rv_make(&v, 3, 40);
	int ok = 0, failed = 0;
	for (long n = 0; n < 400; n++) {
		sg_alloc_fail_after(n);
		sg_grammar *g = NULL;
		sg_status st = sg_json_schema_compile(schema, 1, &g, NULL, 0);
		sg_grammar_state *s = NULL;
		if (st == SG_OK) st = sg_grammar_state_new(g, &s);
		uint32_t *m = calloc((size_t)v.trie->words, 4);
		const char *pre = "{\"v\":1,\"children\":[{\"v\":";
		if (st == SG_OK) st = sg_grammar_advance(s, (const uint8_t *)pre, strlen(pre));
		if (st == SG_OK) st = sg_grammar_mask(s, v.trie, m);
		sg_alloc_fail_after(-1);
		if (st == SG_OK) ok++;
		else {
			cr_expect_eq(st, SG_ERR_NOMEM, "n=%ld: %s", n, sg_last_error());
			failed++;
		}
		free(m);
		sg_grammar_state_free(s);
		sg_grammar_free(g);
	}
	cr_expect_gt(failed, 10);
	cr_expect_gt(ok, 10, "enough allocations eventually succeed");
	rv_free(&v);
	json_decref(schema);
}

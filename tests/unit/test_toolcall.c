/* Unit tests of src/text/grammar/toolcall*: each family's syntax parsed into name + arguments, streaming
 * in any chunking gives the same result as one piece, partial markers are held back, malformed
 * calls come back as text, the reasoning split, and the grammars that force a call. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "text/grammar/grammar.h"
#include "text/grammar/toolcall.h"
#include "grammar_oracle.h"

typedef struct {
	char text[4096];
	char malformed[4096];
	char cut[4096];
	int n_cut;
	int n_calls;
	char names[8][64];
	char args[8][1024];
	int ended[8];
	int order_ok;    /* START before DELTA before END, indices increasing */
	int deltas;      /* ARGS_DELTA events seen */
	int text_events; /* TEXT events seen */
} coll;

static void cat(char *dst, size_t cap, const char *s, size_t n)
{
	size_t l = strlen(dst);
	cr_assert(l + n < cap, "collector overflow");
	memcpy(dst + l, s, n);
	dst[l + n] = 0;
}

static void on_event(void *ud, const sg_toolcall_event *e)
{
	coll *c = ud;
	switch (e->kind) {
	case SG_TCE_TEXT:
		cat(c->text, sizeof(c->text), e->text, e->len);
		c->text_events++;
		break;
	case SG_TCE_CALL_START:
		if (e->index != c->n_calls) c->order_ok = 0;
		cr_assert_lt(c->n_calls, 8);
		snprintf(c->names[c->n_calls], sizeof(c->names[0]), "%s", e->name);
		c->n_calls++;
		break;
	case SG_TCE_ARGS_DELTA:
		if (e->index != c->n_calls - 1 || c->ended[e->index]) c->order_ok = 0;
		cat(c->args[e->index], sizeof(c->args[0]), e->text, e->len);
		c->deltas++;
		break;
	case SG_TCE_CALL_END:
		if (e->index != c->n_calls - 1) c->order_ok = 0;
		c->ended[e->index] = 1;
		break;
	case SG_TCE_MALFORMED: cat(c->malformed, sizeof(c->malformed), e->text, e->len); break;
	case SG_TCE_CALL_CUT:
		cat(c->cut, sizeof(c->cut), e->text, e->len);
		c->n_cut++;
		break;
	}
}

/* Feeds s in chunks of `chunk` bytes (0: one piece). */
static sg_toolcall_parser *parse(sg_toolcall_syntax syn, const json_t *tools, const char *s,
				 size_t chunk, coll *c)
{
	memset(c, 0, sizeof(*c));
	c->order_ok = 1;
	sg_toolcall_parser *p;
	cr_assert_eq(sg_toolcall_parser_new(syn, tools, &p), SG_OK);
	size_t n = strlen(s);
	if (!chunk) chunk = n ? n : 1;
	for (size_t i = 0; i < n; i += chunk)
		cr_assert_eq(sg_toolcall_feed(p, s + i, i + chunk > n ? n - i : chunk, on_event, c), SG_OK);
	cr_assert_eq(sg_toolcall_finish(p, on_event, c), SG_OK);
	return p;
}

/* The arguments equal `want` as JSON values. */
static void expect_args(const char *got, const char *want)
{
	json_t *a = json_loads(got, 0, NULL), *b = json_loads(want, 0, NULL);
	cr_assert_not_null(b);
	cr_expect(a && json_equal(a, b), "arguments '%s', want '%s'", got, want);
	json_decref(a);
	json_decref(b);
}

typedef struct {
	sg_toolcall_syntax syn;
	const char *out;
	const char *text; /* expected plain text */
	int n_calls;
	const char *name0, *args0, *name1, *args1;
} tc_case;

static const tc_case cases[] = {
	{SG_TC_HERMES, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>",
	 "Let me check.\n", 1, "get_weather", "{\"city\":\"Paris\",\"days\":[1,2]}", NULL, NULL},
	{SG_TC_HERMES, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"arguments\": {\"x\": \"}</tool_call>\"}, \"name\": \"b\"}\n</tool_call>",
	 "\n", 2, "a", "{}", "b", "{\"x\":\"}</tool_call>\"}"},
	{SG_TC_HERMES, "<tool_call>{\"name\":\"s\",\"arguments\":\"{\\\"q\\\": 1}\"}</tool_call>", "", 1, "s", "{\"q\":1}", NULL, NULL},
	{SG_TC_HERMES, "a < b and <tool_c is not a call", "a < b and <tool_c is not a call", 0, NULL, NULL, NULL, NULL},
	/* Hermes with tools offered: a call written without its tags (the whole answer is call objects) */
	{SG_TC_HERMES, "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", "\n", 1, "get_weather", "{\"city\":\"Paris\"}", NULL, NULL},
	{SG_TC_HERMES, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n{\"name\": \"note\", \"parameters\": {\"text\": \"}{\"}}",
	 "\n", 2, "get_weather", "{\"city\":\"Paris\"}", "note", "{\"text\":\"}{\"}"},
	{SG_TC_HERMES, "{\"arguments\": {\"days\": 2}, \"name\": \"get_weather\"}", "", 1, "get_weather", "{\"days\":2}", NULL, NULL},
	{SG_TC_HERMES, "{\"name\": \"get_time\", \"arguments\": {}}", "{\"name\": \"get_time\", \"arguments\": {}}", 0, NULL, NULL, NULL, NULL},
	{SG_TC_HERMES, "{\"name\": \"get_weather_now\", \"arguments\": {}}", "{\"name\": \"get_weather_now\", \"arguments\": {}}", 0, NULL, NULL, NULL, NULL},
	{SG_TC_HERMES, "{\"name\": \"get_weather\"}", "{\"name\": \"get_weather\"}", 0, NULL, NULL, NULL, NULL},
	{SG_TC_HERMES, "{\"name\": \"get_weather\", \"arguments\": \"{}\"}", "{\"name\": \"get_weather\", \"arguments\": \"{}\"}", 0, NULL, NULL, NULL, NULL},
	{SG_TC_HERMES, "{\"answer\": 42, \"name\": \"get_weather\", \"arguments\": {}}", "{\"answer\": 42, \"name\": \"get_weather\", \"arguments\": {}}", 0, NULL, NULL, NULL, NULL},
	{SG_TC_HERMES, "Call it: {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
	 "Call it: {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", 0, NULL, NULL, NULL, NULL},
	{SG_TC_HERMES, "{\"x\": 1}<tool_call>\n{\"name\": \"note\", \"arguments\": {}}\n</tool_call>", "{\"x\": 1}", 1, "note", "{}", NULL, NULL},
	{SG_TC_HERMES, "{\"name\": \"get_weather\", \"arguments\": {}}\nIt is sunny.", "\nIt is sunny.", 1, "get_weather", "{}", NULL, NULL},
	/* ... also in a Markdown fence */
	{SG_TC_HERMES, "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```", "", 1, "get_weather", "{\"city\":\"Paris\"}", NULL, NULL},
	{SG_TC_HERMES, "```\n{\"name\": \"get_weather\", \"arguments\": {}}\n```\n```json\n{\"name\": \"note\", \"arguments\": {\"text\": \"```\"}}\n```\nDone.",
	 "\n\nDone.", 2, "get_weather", "{}", "note", "{\"text\":\"```\"}"},
	{SG_TC_HERMES, "```json\n{\"name\": \"note\", \"arguments\": {}}", "", 1, "note", "{}", NULL, NULL},
	{SG_TC_HERMES, "```json\n{\"answer\": 1}\n```", "```json\n{\"answer\": 1}\n```", 0, NULL, NULL, NULL, NULL},
	{SG_TC_HERMES, "```python\nget_weather(city=\"Paris\")\n```", "```python\nget_weather(city=\"Paris\")\n```", 0, NULL, NULL, NULL, NULL},
	{SG_TC_HERMES, "``` not a fence {\"name\": \"note\", \"arguments\": {}}", "``` not a fence {\"name\": \"note\", \"arguments\": {}}", 0, NULL, NULL, NULL, NULL},
	{SG_TC_QWEN_XML, "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"metric\": true}\n</parameter>\n</function>\n</tool_call>",
	 "Sure.\n", 1, "get_weather", "{\"city\":\"New York\",\"days\":3,\"opts\":{\"metric\":true}}", NULL, NULL},
	{SG_TC_QWEN_XML, "<tool_call>\n<function=note>\n<parameter=text>\nline 1\nline 2\n</parameter>\n</function>\n</tool_call><tool_call>\n<function=ping>\n</function>\n</tool_call>",
	 "", 2, "note", "{\"text\":\"line 1\\nline 2\"}", "ping", "{}"},
	{SG_TC_GEMMA4, "<|tool_call>call:get_weather{city:<|\"|>Paris, France<|\"|>,days:3,opts:{metric:true,unit:<|\"|>C<|\"|>},l:[1,2.5]}<tool_call|>",
	 "", 1, "get_weather", "{\"city\":\"Paris, France\",\"days\":3,\"opts\":{\"metric\":true,\"unit\":\"C\"},\"l\":[1,2.5]}", NULL, NULL},
	{SG_TC_GEMMA3, "I'll look.\n```tool_code\nget_weather(city=\"Paris\", days=3, metric=True, tags=['a', \"b\"], extra=None)\n```\nDone",
	 "I'll look.\n\nDone", 1, "get_weather", "{\"city\":\"Paris\",\"days\":3,\"metric\":true,\"tags\":[\"a\",\"b\"],\"extra\":null}", NULL, NULL},
	{SG_TC_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", 1, "get_weather", "{\"city\":\"Paris\"}", NULL, NULL},
	{SG_TC_LLAMA3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}", "", 2, "a", "{\"x\":1}", "b", "{}"},
	{SG_TC_LLAMA3, "{\"answer\": 42}", "{\"answer\": 42}", 0, NULL, NULL, NULL, NULL},
	{SG_TC_LLAMA3, "The answer is {\"name\": \"x\"}", "The answer is {\"name\": \"x\"}", 0, NULL, NULL, NULL, NULL},
	{SG_TC_MISTRAL, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}, \"id\": \"abc123def\"}, {\"name\": \"b\", \"arguments\": {}}]",
	 "", 2, "a", "{\"q\":\"x\"}", "b", "{}"},
	{SG_TC_MISTRAL, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}",
	 "", 2, "get_weather", "{\"city\":\"Paris\"}", "get_time", "{}"},
};

static const json_t *xml_tools(void)
{
	static json_t *t;
	if (!t)
		t = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
			       "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":"
			       "{\"type\":\"integer\"},\"opts\":{\"type\":\"object\"}}}}},{\"type\":\"function\","
			       "\"function\":{\"name\":\"note\",\"parameters\":{\"type\":\"object\",\"properties\":"
			       "{\"text\":{\"type\":\"string\"}}}}}]",
			       0, NULL);
	return t;
}

static void check_case(const tc_case *k, size_t chunk)
{
	coll c;
	sg_toolcall_parser *p = parse(k->syn, xml_tools(), k->out, chunk, &c);
	cr_expect_str_eq(c.text, k->text, "text of '%s' (chunk %zu)", k->out, chunk);
	cr_expect_eq(c.n_calls, k->n_calls, "calls in '%s' (chunk %zu)", k->out, chunk);
	cr_expect_str_eq(c.malformed, "", "chunk %zu", chunk);
	cr_expect(c.order_ok, "event order (chunk %zu)", chunk);
	cr_expect_eq(sg_toolcall_count(p), k->n_calls);
	cr_expect_eq(sg_toolcall_malformed(p), 0);
	for (int i = 0; i < k->n_calls && i < 2; i++) {
		cr_expect_str_eq(c.names[i], i ? k->name1 : k->name0, "chunk %zu", chunk);
		expect_args(c.args[i], i ? k->args1 : k->args0);
		cr_expect(c.ended[i]);
	}
	sg_toolcall_parser_free(p);
}

Test(toolcall, every_syntax_parses_whole_and_in_every_chunking)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		for (size_t chunk = 0; chunk <= 9; chunk++) check_case(&cases[i], chunk);
}

Test(toolcall, hermes_arguments_stream_as_deltas_before_the_call_closes)
{
	coll c;
	sg_toolcall_parser *p = parse(SG_TC_HERMES, NULL,
				      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"text\": \"a long value\"}}\n</tool_call>", 3, &c);
	cr_expect_gt(c.deltas, 5, "arguments arrive in several deltas (%d)", c.deltas);
	expect_args(c.args[0], "{\"text\":\"a long value\"}");
	sg_toolcall_parser_free(p);
}

Test(toolcall, text_is_released_as_soon_as_it_cannot_start_a_marker)
{
	coll c;
	memset(&c, 0, sizeof(c));
	sg_toolcall_parser *p;
	cr_assert_eq(sg_toolcall_parser_new(SG_TC_HERMES, NULL, &p), SG_OK);
	sg_toolcall_feed(p, "Hello <tool", 11, on_event, &c);
	cr_expect_str_eq(c.text, "Hello ", "the partial marker is held");
	sg_toolcall_feed(p, "box> ok", 7, on_event, &c);
	cr_expect_str_eq(c.text, "Hello <toolbox> ok");
	sg_toolcall_finish(p, on_event, &c);
	sg_toolcall_parser_free(p);
}

Test(toolcall, malformed_calls_come_back_as_text_and_are_counted)
{
	const struct {
		sg_toolcall_syntax syn;
		const char *out, *malformed, *text;
	} c[] = {
		{SG_TC_HERMES, "x<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru}}\n</tool_call>y",
		 "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru}}\n</tool_call>", "xy"},
		{SG_TC_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}", "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}", ""},
		{SG_TC_HERMES, "<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", ""},
		{SG_TC_QWEN_XML, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>",
		 "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>", ""},
		{SG_TC_GEMMA4, "<|tool_call>call:f{a:<|\"|>x}<tool_call|>", "<|tool_call>call:f{a:<|\"|>x}<tool_call|>", ""},
		{SG_TC_MISTRAL, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {]", "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {]", ""},
		{SG_TC_LLAMA3, "<|python_tag|>{\"name\": 3}", "<|python_tag|>{\"name\": 3}", ""},
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		for (size_t chunk = 0; chunk <= 4; chunk++) {
			coll k;
			sg_toolcall_parser *p = parse(c[i].syn, NULL, c[i].out, chunk, &k);
			cr_expect_str_eq(k.malformed, c[i].malformed, "case %zu chunk %zu", i, chunk);
			cr_expect_str_eq(k.text, c[i].text, "case %zu chunk %zu", i, chunk);
			cr_expect_eq(sg_toolcall_malformed(p), 1, "case %zu", i);
			cr_expect_eq(sg_toolcall_count(p), 0, "case %zu", i);
			sg_toolcall_parser_free(p);
		}
	}
}

static void on_reason(void *ud, int is_reasoning, const char *t, size_t n)
{
	char(*bufs)[256] = ud;
	size_t l = strlen(bufs[is_reasoning]);
	cr_assert(l + n < 256);
	memcpy(bufs[is_reasoning] + l, t, n);
	bufs[is_reasoning][l + n] = 0;
}

/* Every prefix of an output with one complete call, then a second, is ended as a cut (max_tokens):
 * a call is reported only once complete, the unfinished one (or the start of its marker) is cut,
 * never text nor malformed, and the text before it is text. */
Test(toolcall, an_output_cut_anywhere_reports_only_complete_calls)
{
	const struct {
		sg_toolcall_syntax syn;
		const char *out;
		size_t call1_end, call2_start; /* the first call is complete from call1_end on; the
						* second begins at call2_start (text between) */
	} c[] = {
		{SG_TC_HERMES, "Hi <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"x\"]}}\n</tool_call>"
			       "\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>", 71, 72},
		{SG_TC_QWEN_XML, "Hi <tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>"
				 "<tool_call>\n<function=g>\n</function>\n</tool_call>", 81, 81},
		{SG_TC_MISTRAL, "Hi [TOOL_CALLS]f[ARGS]{\"a\": 1}[TOOL_CALLS]g[ARGS]{}", 30, 30},
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		size_t n = strlen(c[i].out);
		cr_assert_eq(c[i].out[c[i].call1_end - 1], c[i].syn == SG_TC_MISTRAL ? '}' : '>', "case %zu: call1_end", i);
		for (size_t len = 0; len <= n; len++) {
			coll k;
			memset(&k, 0, sizeof(k));
			sg_toolcall_parser *p;
			cr_assert_eq(sg_toolcall_parser_new(c[i].syn, NULL, &p), SG_OK);
			cr_assert_eq(sg_toolcall_feed(p, c[i].out, len, on_event, &k), SG_OK);
			cr_assert_eq(sg_toolcall_cut(p, on_event, &k), SG_OK);
			int complete = 0;
			for (int j = 0; j < k.n_calls; j++) complete += k.ended[j];
			int want = len == n ? 2 : len >= c[i].call1_end ? 1 : 0;
			cr_expect_eq(complete, want, "case %zu cut at %zu: %d complete calls, want %d", i, len, complete, want);
			cr_expect_eq(sg_toolcall_count(p), want);
			cr_expect_str_eq(k.malformed, "", "case %zu cut at %zu: nothing is malformed", i, len);
			/* the text is what came before and between the calls, never a piece of a call */
			char want_text[8] = "";
			memcpy(want_text, c[i].out, len < 3 ? len : 3);
			want_text[len < 3 ? len : 3] = 0;
			if (len > c[i].call1_end && c[i].call2_start > c[i].call1_end) strcat(want_text, "\n");
			cr_expect_str_eq(k.text, want_text, "case %zu cut at %zu: text '%s'", i, len, k.text);
			cr_expect_eq(k.n_cut, sg_toolcall_cut_count(p));
			int in_call = (len > 3 && len < c[i].call1_end) || (len > c[i].call2_start && len < n);
			cr_expect_eq(k.n_cut, in_call, "case %zu cut at %zu: %d cut", i, len, k.n_cut);
			sg_toolcall_parser_free(p);
		}
	}
}

/* A bare call is held back while it may still be one, and released as text the moment it cannot be;
 * without tools it is text at once. */
Test(toolcall, hermes_bare_call_is_held_until_decided_and_streams_its_arguments)
{
	coll c;
	memset(&c, 0, sizeof(c));
	sg_toolcall_parser *p;
	cr_assert_eq(sg_toolcall_parser_new(SG_TC_HERMES, xml_tools(), &p), SG_OK);
	const char *a = " {\"name\": \"get_wea";
	sg_toolcall_feed(p, a, strlen(a), on_event, &c);
	cr_expect_str_eq(c.text, " ", "only the blank before the object goes out");
	cr_expect_eq(c.n_calls, 0);
	const char *b = "ther\", \"arguments\": {\"city\": \"Par";
	sg_toolcall_feed(p, b, strlen(b), on_event, &c);
	cr_expect_eq(c.n_calls, 1, "the call starts once its arguments open");
	cr_expect_str_eq(c.args[0], "{\"city\": \"Par", "the arguments stream before the call closes");
	sg_toolcall_feed(p, "is\"}}", 5, on_event, &c);
	cr_expect(c.ended[0]);
	sg_toolcall_finish(p, on_event, &c);
	cr_expect_eq(sg_toolcall_count(p), 1);
	sg_toolcall_parser_free(p);

	memset(&c, 0, sizeof(c));
	cr_assert_eq(sg_toolcall_parser_new(SG_TC_HERMES, xml_tools(), &p), SG_OK);
	sg_toolcall_feed(p, "{\"answ", 6, on_event, &c);
	cr_expect_str_eq(c.text, "{\"answ", "a key no call has is text at once");
	sg_toolcall_parser_free(p);

	memset(&c, 0, sizeof(c));
	cr_assert_eq(sg_toolcall_parser_new(SG_TC_HERMES, xml_tools(), &p), SG_OK);
	sg_toolcall_feed(p, "{\"name\": \"get_x", 15, on_event, &c);
	cr_expect_str_eq(c.text, "{\"name\": \"get_x", "a name no offered tool starts with is text at once");
	sg_toolcall_parser_free(p);

	p = parse(SG_TC_HERMES, NULL, "{\"name\": \"get_weather\", \"arguments\": {}}", 4, &c);
	cr_expect_eq(c.n_calls, 0, "without tools a bare object is text");
	cr_expect_str_eq(c.text, "{\"name\": \"get_weather\", \"arguments\": {}}");
	sg_toolcall_parser_free(p);
}

/* Every prefix of two bare calls, ended as a cut (max_tokens): only complete calls are reported; an
 * object that may still have been a call is cut (neither call nor text); text is blanks only. The
 * model's own end inside an undecided object makes it text, inside a started call malformed. */
Test(toolcall, hermes_bare_calls_cut_anywhere_report_only_complete_calls)
{
	const char *out = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n{\"name\": \"note\", \"arguments\": {}}";
	size_t n = strlen(out), call1_end = 55;
	cr_assert_eq(out[call1_end - 1], '}');
	cr_assert_eq(out[call1_end], '\n');
	for (size_t len = 0; len <= n; len++) {
		coll k;
		memset(&k, 0, sizeof(k));
		sg_toolcall_parser *p;
		cr_assert_eq(sg_toolcall_parser_new(SG_TC_HERMES, xml_tools(), &p), SG_OK);
		cr_assert_eq(sg_toolcall_feed(p, out, len, on_event, &k), SG_OK);
		cr_assert_eq(sg_toolcall_cut(p, on_event, &k), SG_OK);
		int complete = 0;
		for (int j = 0; j < k.n_calls; j++) complete += k.ended[j];
		int want = len == n ? 2 : len >= call1_end ? 1 : 0;
		cr_expect_eq(complete, want, "cut at %zu: %d complete calls, want %d", len, complete, want);
		cr_expect_eq(sg_toolcall_count(p), want);
		cr_expect_str_eq(k.malformed, "", "cut at %zu", len);
		cr_expect_str_eq(k.text, len > call1_end ? "\n" : "", "cut at %zu: text '%s'", len, k.text);
		int in_call = (len > 0 && len < call1_end) || (len > call1_end + 1 && len < n);
		cr_expect_eq(k.n_cut, in_call, "cut at %zu: %d cut", len, k.n_cut);
		sg_toolcall_parser_free(p);
	}

	/* in a fence: its opening alone is not yet a call (text); inside the object it is cut; in
	 * or after its close the call is complete and nothing else is reported */
	const char *fenced = "```json\n{\"name\": \"note\", \"arguments\": {\"text\": \"a\"}}\n```";
	size_t fn = strlen(fenced), obj_end = 52;
	cr_assert_eq(fenced[obj_end - 1], '}');
	for (size_t len = 0; len <= fn; len++) {
		coll f;
		memset(&f, 0, sizeof(f));
		sg_toolcall_parser *q;
		cr_assert_eq(sg_toolcall_parser_new(SG_TC_HERMES, xml_tools(), &q), SG_OK);
		cr_assert_eq(sg_toolcall_feed(q, fenced, len, on_event, &f), SG_OK);
		cr_assert_eq(sg_toolcall_cut(q, on_event, &f), SG_OK);
		cr_expect_eq(sg_toolcall_count(q), len >= obj_end, "fenced cut at %zu", len);
		cr_expect_eq(f.n_cut, len > 8 && len < obj_end, "fenced cut at %zu", len);
		cr_expect_str_eq(f.malformed, "", "fenced cut at %zu", len);
		char want[16] = "";
		if (len <= 8) memcpy(want, fenced, len), want[len] = 0;
		cr_expect_str_eq(f.text, want, "fenced cut at %zu: text '%s'", len, f.text);
		sg_toolcall_parser_free(q);
	}

	coll k;
	sg_toolcall_parser *p = parse(SG_TC_HERMES, xml_tools(), "{\"name\": \"get_weather\", \"argu", 0, &k);
	cr_expect_str_eq(k.text, "{\"name\": \"get_weather\", \"argu", "never a call: the model's end makes it text");
	cr_expect_eq(k.n_cut + sg_toolcall_malformed(p) + k.n_calls, 0);
	sg_toolcall_parser_free(p);
	p = parse(SG_TC_HERMES, xml_tools(), "{\"name\": \"get_weather\", \"arguments\": {\"ci", 0, &k);
	cr_expect_str_eq(k.malformed, "{\"name\": \"get_weather\", \"arguments\": {\"ci");
	cr_expect_eq(k.n_cut, 0);
	sg_toolcall_parser_free(p);
	/* cut where the object can no longer be a call: its text is text */
	memset(&k, 0, sizeof(k));
	cr_assert_eq(sg_toolcall_parser_new(SG_TC_HERMES, xml_tools(), &p), SG_OK);
	sg_toolcall_feed(p, "{\"name\": \"get_time\", \"argu", 26, on_event, &k);
	sg_toolcall_cut(p, on_event, &k);
	cr_expect_str_eq(k.text, "{\"name\": \"get_time\", \"argu");
	cr_expect_eq(k.n_cut, 0);
	sg_toolcall_parser_free(p);
}

Test(toolcall, an_unfinished_call_the_model_ended_is_still_malformed)
{
	coll k;
	sg_toolcall_parser *p = parse(SG_TC_HERMES, NULL, "<tool_call>\n{\"name\": \"f\", \"arg", 0, &k);
	cr_expect_str_eq(k.malformed, "<tool_call>\n{\"name\": \"f\", \"arg");
	cr_expect_eq(k.n_cut, 0);
	sg_toolcall_parser_free(p);
}

Test(toolcall, reasoning_split_streams_in_any_chunking)
{
	const char *out = "<think>\nI should call a tool. </thin is not the end\n</think>\n\nThe answer.";
	for (size_t chunk = 1; chunk <= 8; chunk++) {
		char bufs[2][256] = {"", ""};
		sg_reasoning_split *r;
		cr_assert_eq(sg_reasoning_split_new("<think>", "</think>", 0, &r), SG_OK);
		for (size_t i = 0; i < strlen(out); i += chunk)
			sg_reasoning_feed(r, out + i, i + chunk > strlen(out) ? strlen(out) - i : chunk, on_reason, bufs);
		sg_reasoning_finish(r, on_reason, bufs);
		cr_expect_str_eq(bufs[1], "\nI should call a tool. </thin is not the end\n", "chunk %zu", chunk);
		cr_expect_str_eq(bufs[0], "\n\nThe answer.", "chunk %zu", chunk);
		sg_reasoning_split_free(r);
	}
	char bufs[2][256] = {"", ""};
	sg_reasoning_split *r;
	cr_assert_eq(sg_reasoning_split_new("<think>", "</think>", 1, &r), SG_OK);
	sg_reasoning_feed(r, "hmm</think>ok", 13, on_reason, bufs);
	sg_reasoning_finish(r, on_reason, bufs);
	cr_expect_str_eq(bufs[1], "hmm", "the prompt opened the block");
	cr_expect_str_eq(bufs[0], "ok");
	sg_reasoning_split_free(r);
}

Test(toolcall, reasoning_split_takes_one_leading_block_only)
{
	const char *outs[][3] = {
		/* output, reasoning, answer */
		{" <think>a</think>{\"s\": \"<think>x</think>\"}", "a", "{\"s\": \"<think>x</think>\"}"},
		{"{\"s\": \"<think>x</think>\"}", "", "{\"s\": \"<think>x</think>\"}"},
		{"answer <think>not reasoning", "", "answer <think>not reasoning"},
	};
	for (size_t t = 0; t < sizeof outs / sizeof *outs; t++) {
		for (size_t chunk = 1; chunk <= 5; chunk++) {
			char bufs[2][256] = {"", ""};
			sg_reasoning_split *r;
			cr_assert_eq(sg_reasoning_split_new("<think>", "</think>", 0, &r), SG_OK);
			const char *out = outs[t][0];
			for (size_t i = 0; i < strlen(out); i += chunk)
				sg_reasoning_feed(r, out + i, i + chunk > strlen(out) ? strlen(out) - i : chunk, on_reason, bufs);
			sg_reasoning_finish(r, on_reason, bufs);
			cr_expect_str_eq(bufs[1], outs[t][1], "case %zu chunk %zu", t, chunk);
			/* blanks before the block count as answer text */
			const char *ans = bufs[0];
			while (*ans == ' ') ans++;
			cr_expect_str_eq(ans, outs[t][2], "case %zu chunk %zu", t, chunk);
			sg_reasoning_split_free(r);
		}
	}
}

/* ---- forcing a call ---- */

static int accepts(const sg_grammar *g, const char *s)
{
	sg_grammar_state *st;
	cr_assert_eq(sg_grammar_state_new(g, &st), SG_OK);
	int ok = sg_grammar_advance(st, (const uint8_t *)s, strlen(s)) == SG_OK;
	int r = ok ? 2 + sg_grammar_accepts_eos(st) : 0;
	sg_grammar_state_free(st);
	return r;
}

static json_t *weather_tools(void)
{
	return json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
			  "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":"
			  "[\"C\",\"F\"]}},\"required\":[\"city\"],\"additionalProperties\":false}}},"
			  "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":"
			  "\"object\",\"properties\":{}}}}]",
			  0, NULL);
}

Test(toolcall, required_tool_choice_forces_a_hermes_call_with_schema_arguments)
{
	json_t *tools = weather_tools();
	sg_grammar *g;
	cr_assert_eq(sg_toolcall_grammar(SG_TC_HERMES, tools, NULL, 1, &g), SG_OK, "%s", sg_last_error());
	const char *ok = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"C\"}}\n</tool_call>";
	cr_expect_eq(accepts(g, ok), 3);
	cr_expect_eq(accepts(g, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"), 3);
	cr_expect_eq(accepts(g, "Sure"), 0, "no text instead of the call");
	cr_expect_eq(accepts(g, "<tool_call>\n{\"name\": \"get_wea\"}"), 0);
	cr_expect_eq(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"C\"}"), 0, "city is required");
	cr_expect_eq(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}"), 2, "not closed yet");
	/* the forced output parses back into the same call */
	coll c;
	sg_toolcall_parser *p = parse(SG_TC_HERMES, NULL, ok, 5, &c);
	cr_expect_eq(c.n_calls, 1);
	cr_expect_str_eq(c.names[0], "get_weather");
	expect_args(c.args[0], "{\"city\":\"Paris\",\"unit\":\"C\"}");
	sg_toolcall_parser_free(p);
	sg_grammar_free(g);
	cr_assert_eq(sg_toolcall_grammar(SG_TC_HERMES, tools, "get_time", 2, &g), SG_OK);
	cr_expect_eq(accepts(g, ok), 0, "a named function excludes the others");
	cr_expect_eq(accepts(g, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"), 3, "two parallel calls");
	sg_grammar_free(g);
	cr_expect_eq(sg_toolcall_grammar(SG_TC_HERMES, tools, "nope", 1, &g), SG_ERR_INVALID_ARG);
	json_decref(tools);
}

Test(toolcall, required_tool_choice_for_llama3_and_mistral)
{
	json_t *tools = weather_tools();
	sg_grammar *g;
	cr_assert_eq(sg_toolcall_grammar(SG_TC_LLAMA3, tools, NULL, 2, &g), SG_OK, "%s", sg_last_error());
	cr_expect_eq(accepts(g, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}"), 3);
	cr_expect_eq(accepts(g, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; {\"name\": \"get_time\", \"parameters\": {}}"), 3);
	cr_expect_eq(accepts(g, "{\"name\": \"get_weather\", \"arguments\""), 0);
	sg_grammar_free(g);
	cr_assert_eq(sg_toolcall_grammar(SG_TC_MISTRAL, tools, "get_weather", 1, &g), SG_OK);
	cr_expect_eq(accepts(g, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]"), 3);
	sg_grammar_free(g);
	json_t *bad = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"}}}}}]", 0, NULL);
	cr_expect_eq(sg_toolcall_grammar(SG_TC_HERMES, bad, NULL, 1, &g), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "'f'") && strstr(sg_last_error(), "format"), "%s", sg_last_error());
	cr_expect_eq(sg_toolcall_grammar(SG_TC_GEMMA4, tools, NULL, 1, &g), SG_ERR_UNSUPPORTED);
	cr_expect_eq(sg_toolcall_grammar(SG_TC_GEMMA3, tools, NULL, 1, &g), SG_ERR_UNSUPPORTED);
	json_decref(bad);
	json_decref(tools);
}

Test(toolcall, required_tool_choice_for_qwen_xml_constrains_text_and_json_parameters)
{
	json_t *tools = json_loads(
		"[{\"type\":\"function\",\"function\":{\"name\":\"write\",\"parameters\":{\"type\":\"object\","
		"\"properties\":{\"path\":{\"type\":\"string\"},\"mode\":{\"type\":\"string\",\"enum\":[\"a\",\"w\"]},"
		"\"lines\":{\"type\":\"integer\",\"minimum\":1},\"text\":{\"type\":\"string\"}},"
		"\"required\":[\"path\",\"text\"]}}}]",
		0, NULL);
	sg_grammar *g;
	cr_assert_eq(sg_toolcall_grammar(SG_TC_QWEN_XML, tools, NULL, 2, &g), SG_OK, "%s", sg_last_error());
	const char *full = "<tool_call>\n<function=write>\n<parameter=path>\n/tmp/a b.txt\n</parameter>\n"
			   "<parameter=mode>\nw\n</parameter>\n<parameter=lines>\n12\n</parameter>\n"
			   "<parameter=text>\nline 1\n</param is not the end\nline 3\n</parameter>\n"
			   "</function>\n</tool_call>";
	cr_expect_eq(accepts(g, full), 3);
	const char *minimal = "<tool_call>\n<function=write>\n<parameter=path>\nx\n</parameter>\n"
			      "<parameter=text>\n\n</parameter>\n</function>\n</tool_call>";
	cr_expect_eq(accepts(g, minimal), 3, "optional parameters skipped");
	cr_expect_eq(accepts(g, "<tool_call>\n<function=write>\n<parameter=text>"), 0, "path is required first");
	cr_expect_eq(accepts(g, "<tool_call>\n<function=write>\n<parameter=path>\nx\n</parameter>\n<parameter=mode>\nr"), 0,
		     "mode is an enum");
	cr_expect_eq(accepts(g, "<tool_call>\n<function=write>\n<parameter=path>\nx\n</parameter>\n<parameter=lines>\n0"), 0,
		     "lines >= 1");
	/* what the grammar forces parses back to the same call */
	coll c;
	sg_toolcall_parser *p = parse(SG_TC_QWEN_XML, tools, full, 7, &c);
	cr_expect_eq(c.n_calls, 1);
	expect_args(c.args[0], "{\"path\":\"/tmp/a b.txt\",\"mode\":\"w\",\"lines\":12,\"text\":\"line 1\\n</param is not the end\\nline 3\"}");
	sg_toolcall_parser_free(p);
	sg_grammar_free(g);
	json_t *bad = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
				 "\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":3}}}}}]", 0, NULL);
	cr_expect_eq(sg_toolcall_grammar(SG_TC_QWEN_XML, bad, NULL, 1, &g), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "maxLength") != NULL, "%s", sg_last_error());
	json_decref(bad);
	json_decref(tools);
}

Test(toolcall, forced_call_masks_equal_the_oracle_for_every_supported_syntax, .timeout = 60)
{
	json_t *tools = json_loads(
		"[{\"type\":\"function\",\"function\":{\"name\":\"x\",\"parameters\":{\"type\":\"object\","
		"\"properties\":{\"a\":{\"type\":\"string\"},\"k\":{\"type\":\"integer\"}},\"required\":[\"a\"]}}}]",
		0, NULL);
	rvocab v;
	rv_make(&v, 99, 200);
	sg_toolcall_syntax syns[] = {SG_TC_HERMES, SG_TC_QWEN_XML, SG_TC_LLAMA3, SG_TC_MISTRAL};
	for (int i = 0; i < 4; i++) {
		sg_grammar *g;
		cr_assert_eq(sg_toolcall_grammar(syns[i], tools, NULL, 2, &g), SG_OK, "%s", sg_last_error());
		uint64_t rng = 5 + (uint64_t)i;
		uint8_t out[4096];
		for (int w = 0; w < 3; w++) {
			size_t n;
			random_walk(g, &v, &rng, 250, 250, 1, out, sizeof(out), &n);
		}
		sg_grammar_free(g);
	}
	rv_free(&v);
	json_decref(tools);
}

/* Unit tests of the Jinja interpreter (src/text/template/jinja_*.c). The expected outputs of the table below
 * were produced by Python jinja2 configured as transformers configures it (sandboxed, trim_blocks,
 * lstrip_blocks, loop controls, transformers' tojson), rendering each template with VARS_JSON. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "text/template/jinja.h"

typedef struct jcase {
	const char *name, *src, *want;
} jcase;

static const jcase CASES[] = {
	{"if_elif_else", "{% if i > 10 %}big{% elif i > 5 %}mid{% else %}small{% endif %}",
	 "mid"},
	{"for_loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
	 "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|"},
	{"for_prev_next", "{% for x in xs %}[{{ loop.previtem }}>{{ x }}<{{ loop.nextitem }}]{% endfor %}",
	 "[>3<1][3>1<2][1>2<]"},
	{"for_else_empty", "{% for x in [] %}x{% else %}empty{% endfor %}",
	 "empty"},
	{"for_filter", "{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% endfor %}",
	 "3222"},
	{"for_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
	 "b=2;a=1;C=3;"},
	{"for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}",
	 "baC"},
	{"for_string", "{% for ch in 'a\303\261b' %}[{{ ch }}]{% endfor %}",
	 "[a][\303\261][b]"},
	{"nested_loop_depth", "{% for a in [1,2] %}{% for b in [3] %}{{ loop.depth }}{{ a }}{{ b }}{% endfor %}{% endfor %}",
	 "113123"},
	{"loop_cycle", "{% for x in xs %}{{ loop.cycle('a','b') }}{% endfor %}",
	 "aba"},
	{"break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
	 "0134"},
	{"loop_scope", "{% set x = 0 %}{% for i in [1,2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}",
	 "01020"},
	{"namespace", "{% set ns = namespace(c=0, s='') %}{% for x in xs %}{% set ns.c = ns.c + x %}{% set ns.s = ns.s ~ x %}{% endfor %}{{ ns.c }} {{ ns.s }}",
	 "6 312"},
	{"namespace_empty", "{% set ns = namespace() %}{% set ns.k = 5 %}{{ ns.k }}",
	 "5"},
	{"set_block", "{% set b %}  inner {{ i }}  {% endset %}[{{ b }}]",
	 "[  inner 7  ]"},
	{"set_block_filter", "{% set b | trim | upper %}  inner {{ i }}  {% endset %}[{{ b }}]",
	 "[INNER 7]"},
	{"set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}",
	 "12"},
	{"macro_defaults", "{% macro m(a, b='B', c=none) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{ m(1, c=3) }}",
	 "1-B-None 1-2-None 1-B-3"},
	{"macro_caller", "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inside {{ i }}{% endcall %}",
	 "<inside 7>"},
	{"macro_recursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(4) }}",
	 "4321"},
	{"macro_sees_globals", "{% macro m() %}{{ g }}{% endmacro %}{% set g = 5 %}{{ m() }}",
	 "5"},
	{"filter_block", "{% filter upper %}abc {{ s }}{% endfilter %}",
	 "ABC HELLO WORLD"},
	{"with_block", "{% with a = 2, b = 3 %}{{ a * b }}{% endwith %}",
	 "6"},
	{"raw_block", "{% raw %}{{ not evaluated }}{% endraw %}",
	 "{{ not evaluated }}"},
	{"arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -i }} {{ +i }}",
	 "3 -4 1 2 3.5 2.0 1024 0.5 7 9 -7 7"},
	{"float_print", "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-5 }} {{ 123456789012345678.0 }} {{ 0.0001 }} {{ -0.0 }} {{ f * 2 }}",
	 "1.0 0.30000000000000004 1e+20 1.5e-05 1.2345678901234568e+17 0.0001 -0.0 3.0"},
	{"concat_tilde", "{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ xs }}",
	 "a1NoneTrue1.5[3, 1, 2]"},
	{"string_concat_plus", "{{ 'a' + 'b' }}{{ xs + [4] }}",
	 "ab[3, 1, 2, 4]"},
	{"repeat", "{{ 'ab' * 3 }}{{ 2 * 'x' }}{{ [1] * 2 }}",
	 "abababxx[1, 1]"},
	{"compare", "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ none == none }} {{ 1 != 2 }} {{ 2 >= 2 }} {{ (1,2) == [1,2] }}",
	 "True True True True True True True False"},
	{"in_ops", "{{ 'ell' in s }} {{ 2 in xs }} {{ 'a' in d }} {{ 'z' not in d }} {{ 5 not in xs }}",
	 "True True True True True"},
	{"and_or_values", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or none }} {{ not 0 }}",
	 "x b  None True"},
	{"ternary", "{{ 'yes' if t else 'no' }} {{ 'yes' if n else 'no' }} [{{ 'only' if n }}]",
	 "yes no []"},
	{"literals", "{{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v', 'n': [1, (2, 3)]} }} {{ (1,) }} {{ () }}",
	 "[1, 'a', None, True, 1.5] {'k': 'v', 'n': [1, (2, 3)]} (1,) ()"},
	{"print_repr_strings", "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'tab\\there', 'nl\\n', '\303\274', '\\u00a0'] }}",
	 "[\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\there', 'nl\\n', '\303\274', '\\xa0']"},
	{"attr_item", "{{ d.a }} {{ d['b'] }} {{ nested.a.b[1].c }} {{ xs[0] }} {{ xs[-1] }} {{ nested['a']['b'][0] }} {{ xs.0 }}",
	 "1 2 deep 3 2 1 3"},
	{"slicing", "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ s[1:4] }} {{ s[::2] }} {{ s[-5:] }} {{ u[1:3] }} {{ xs[5:] }}",
	 "[1, 2] [3, 1] [2, 1, 3] ell HloWrd World \303\251l []"},
	{"undefined_prints_empty", "[{{ nope }}][{{ d.zz }}][{{ xs[10] }}][{{ n.x }}]",
	 "[][][][]"},
	{"undefined_tests", "{{ nope is defined }} {{ nope is undefined }} {{ d.a is defined }} {{ n is none }} {{ nope is none }} {{ nope | length }} {{ nope is iterable }}",
	 "False True True True False 0 True"},
	{"undefined_default", "{{ nope | default('dflt') }} {{ n | default('dflt') }} {{ e | default('dflt', true) }} {{ d.zz | d(5) }}",
	 "dflt None dflt 5"},
	{"undefined_iteration", "{% for x in nope %}x{% else %}none{% endfor %}",
	 "none"},
	{"tests_types", "{{ s is string }} {{ xs is sequence }} {{ d is mapping }} {{ xs is mapping }} {{ i is number }} {{ i is integer }} {{ f is float }} {{ t is boolean }} {{ t is true }} {{ t is false }} {{ i is odd }} {{ i is even }} {{ 9 is divisibleby 3 }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ s is iterable }} {{ i is iterable }}",
	 "True True True False True True True True True False True False True True True True False"},
	{"tests_compare", "{{ 3 is eq 3 }} {{ 3 is equalto 4 }} {{ 3 is ne 4 }} {{ 3 is lt 4 }} {{ 3 is gt 4 }} {{ 3 is ge 3 }} {{ 3 is le 2 }} {{ 2 is in xs }} {{ 'x' is in 'xyz' }} {{ n is sameas none }} {{ 1 is not eq 2 }}",
	 "True False True True False True False True True True True"},
	{"filter_trim_case", "[{{ '  a b  ' | trim }}][{{ 'xxaxx' | trim('x') }}]{{ s | upper }}{{ s | lower }}{{ 'hello wORLD-foo (bar' | title }}{{ 'hELLO world' | capitalize }}{{ u | upper }}",
	 "[a b][a]HELLO WORLDhello worldHello World-Foo (BarHello worldH\303\211LLO W\303\226RLD SS"},
	{"filter_replace_join", "{{ s | replace('o', '0') }} {{ s | replace('o', '0', 1) }} {{ xs | join(', ') }} {{ xs | join }} {{ msgs | join('|', attribute='role') }}",
	 "Hell0 W0rld Hell0 World 3, 1, 2 312 user|assistant|user"},
	{"filter_first_last_length", "{{ xs | first }} {{ xs | last }} {{ xs | length }} {{ s | length }} {{ u | length }} {{ d | length }} {{ s | first }} {{ s | last }} {{ xs | count }}",
	 "3 2 3 11 13 3 H d 3"},
	{"filter_list_string", "{{ 'abc' | list }} {{ d | list }} {{ xs | string }} {{ 5 | string }} {{ n | string }}",
	 "['a', 'b', 'c'] ['b', 'a', 'C'] [3, 1, 2] 5 None"},
	{"filter_int_float_abs_round", "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(-1) }} {{ 3.9 | int }} {{ '2.5' | float }} {{ 'x' | float }} {{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(0, 'floor') }} {{ 7 | float }}",
	 "42 4 0 -1 3 2.5 0.0 3 2.5 2.0 3.14 3.0 2.0 7.0"},
	{"filter_items_dictsort", "{{ d | items | list }} {{ d | dictsort }} {{ d | dictsort(true) }} {{ d | dictsort(false, 'value') }} {{ d | dictsort(reverse=true) }}",
	 "[('b', 2), ('a', 1), ('C', 3)] [('a', 1), ('b', 2), ('C', 3)] [('C', 3), ('a', 1), ('b', 2)] [('a', 1), ('b', 2), ('C', 3)] [('C', 3), ('b', 2), ('a', 1)]"},
	{"filter_unique_reverse_sort", "{{ ['a', 'A', 'b', 'a'] | unique | list }} {{ xs | reverse | list }} {{ 'abc' | reverse }} {{ xs | sort }} {{ xs | sort(reverse=true) }} {{ ['b', 'A', 'c'] | sort }} {{ msgs | sort(attribute='content') | map(attribute='content') | list }}",
	 "['a', 'b'] [2, 1, 3] cba [1, 2, 3] [3, 2, 1] ['A', 'b', 'c'] ['hi', 'q', 'yo']"},
	{"filter_select_map", "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ msgs | rejectattr('role', 'eq', 'user') | list | length }} {{ xs | select('odd') | list }} {{ xs | reject('odd') | list }} {{ ['a','b'] | map('upper') | list }} {{ msgs | selectattr('role') | list | length }}",
	 "['hi', 'q'] 1 [3, 1] [2] ['A', 'B'] 3"},
	{"filter_min_max_sum", "{{ xs | min }} {{ xs | max }} {{ xs | sum }} {{ msgs | map(attribute='content') | max }} {{ [1.5, 2] | sum }}",
	 "1 3 6 yo 3.5"},
	{"filter_tojson", "{{ d | tojson }} {{ xs | tojson }} {{ '\303\251 \"q\" \\n' | tojson }} {{ n | tojson }} {{ t | tojson }} {{ f | tojson }} {{ nested | tojson(indent=2) }} {{ d | tojson(separators=(',', ':')) }} {{ d | tojson(sort_keys=true) }} {{ [] | tojson(indent=4) }} {{ {} | tojson }}",
	 "{\"b\": 2, \"a\": 1, \"C\": 3} [3, 1, 2] \"\303\251 \\\"q\\\" \\n\" null true 1.5 {\n  \"a\": {\n    \"b\": [\n      1,\n      {\n        \"c\": \"deep\"\n      }\n    ]\n  }\n} {\"b\":2,\"a\":1,\"C\":3} {\"C\": 3, \"a\": 1, \"b\": 2} [] {}"},
	{"filter_indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'x\\ny' | indent('> ') }}",
	 "a\n    b\n\n    c|  a\n  b|a\n  \n  b|x\n> y"},
	{"filter_misc", "{{ '<a href=\"x\">&</a>' | e }} {{ '%s-%d' | format('a', 3) }} {{ 'one two  three' | wordcount }} {{ s | safe }} {{ d | attr('a') }}",
	 "&lt;a href=&#34;x&#34;&gt;&amp;&lt;/a&gt; a-3 3 Hello World "},
	{"str_methods", "{{ s.startswith('He') }} {{ s.endswith('x') }} {{ s.startswith(('x', 'H')) }} {{ s.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  x  '.strip() }}|{{ '  x  '.lstrip() }}|{{ '  x  '.rstrip() }}| {{ 'xxhixx'.strip('x') }} {{ s.upper() }} {{ s.lower() }} {{ 'hello world'.title() }} {{ s.replace('l', 'L') }} {{ s.find('o') }} {{ s.count('l') }} {{ '-'.join(['a', 'b']) }} {{ '12'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }}",
	 "True False True ['Hello', 'World'] ['a', 'b', '', 'c'] ['a', 'b,c'] ['a,b', 'c'] x|x  |  x| hi HELLO WORLD hello world Hello World HeLLo WorLd 4 3 a-b True True True"},
	{"str_format", "{{ '{} and {}'.format('a', 1) }} {{ '{0}{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='Bob') }} {{ '{{literal}}'.format() }}",
	 "a and 1 xyx Bob! {literal}"},
	{"dict_methods", "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 9) }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }}",
	 "1 None 9 ['b', 'a', 'C'] [2, 1, 3] [('b', 2), ('a', 1), ('C', 3)]"},
	{"unicode_strings", "{{ u | length }} {{ u[0] }} {{ u[-1] }} {{ u.upper() }} {{ u | title }} {{ '\346\227\245\346\234\254\350\252\236'[1] }} {{ '\360\237\221\215\360\237\217\275x' | length }}",
	 "13 h \303\237 H\303\211LLO W\303\226RLD SS H\303\251llo W\303\266rld SS \346\234\254 3"},
	{"whitespace_control", "a  {%- if t -%}  b  {%- endif -%}  c\n  {{- ' d ' -}}  e",
	 "abc d e"},
	{"trim_lstrip_blocks", "<ul>\n    {% for x in xs %}\n    <li>{{ x }}</li>\n    {% endfor %}\n</ul>\n",
	 "<ul>\n    <li>3</li>\n    <li>1</li>\n    <li>2</li>\n</ul>"},
	{"lstrip_plus", "x\n    {%+ if t %}y{% endif %}\n    {% if t +%}\nz{% endif %}",
	 "x\n    y\nz"},
	{"comments", "a {# comment #} b\n  {# own line #}\nc {#- strip -#}  d",
	 "a  b\ncd"},
	{"string_escapes", "{{ 'a\\tb\\\\c\\x41\\u00e9' }}|{{ \"d'q\" }}|{{ 'adj' 'acent' }}",
	 "a\tb\\cA\303\251|d'q|adjacent"},
	{"dict_literal_print", "{{ {'a': 1, 'b': {'c': [true, none]}} }}",
	 "{'a': 1, 'b': {'c': [True, None]}}"},
	{"range_fn", "{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }}",
	 "[0, 1, 2] [1, 4, 7] [5, 3, 1]"},
	{"dict_fn", "{{ dict(a=1, b='x') }}",
	 "{'a': 1, 'b': 'x'}"},
	{"loop_filter_with_loop_index", "{% for m in msgs if m.role == 'user' %}{{ loop.index }}:{{ m.content }}{% if not loop.last %},{% endif %}{% endfor %}",
	 "1:hi,2:q"},
	{"messages_slice_set", "{% set msgs2 = msgs[1:] %}{{ msgs2 | length }}{{ msgs2[0].role }}",
	 "2assistant"},
	{"int_overflow_ok", "{{ 9223372036854775807 }} {{ -9223372036854775807 - 1 }}",
	 "9223372036854775807 -9223372036854775808"},
	{"crlf_text", "a\r\nb{% if t %}\r\nc{% endif %}\rd",
	 "a\nbcd"},
	{"generation_tag", "{% generation %}gen {{ i }}{% endgeneration %}",
	 "gen 7"},
	{"is_not", "{{ n is not none }} {{ s is not string }} {{ not (n is none) }}",
	 "False False False"},
	{"neg_filter_precedence", "{{ -1 | abs }} {{ -xs | length if false else 'ok' }}",
	 "1 ok"},
	{"items_on_undefined", "{% for k, v in nope | items %}x{% endfor %}done",
	 "done"},
	{"strip_chars_and_split_ws", "{{ '\\n\\nabc\\n'.strip('\\n') }} {{ ' a  b\\tc\\n'.split() }} {{ 'a b c'.split(none, 1) }}",
	 "abc ['a', 'b', 'c'] ['a', 'b c']"},
};
static const char *const VARS_JSON = "{\"xs\": [3, 1, 2], \"d\": {\"b\": 2, \"a\": 1, \"C\": 3}, \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"msgs\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}, {\"role\": \"user\", \"content\": \"q\"}], \"u\": \"h\303\251llo w\303\266rld \303\237\", \"e\": \"\", \"i\": 7, \"neg\": -7, \"nested\": {\"a\": {\"b\": [1, {\"c\": \"deep\"}]}}}";

/* Renders src with vars (a JSON object text, may be NULL); returns the output or NULL with the
 * error in sg_last_error(). */
static char *render(const char *src, const char *vars, sg_status *st_out)
{
	sg_jinja_template *t;
	sg_status st = sg_jinja_parse(src, strlen(src), "t", &t);
	if (st_out) *st_out = st;
	if (st) return NULL;
	json_t *v = NULL;
	if (vars) {
		json_error_t err;
		v = json_loads(vars, 0, &err);
		cr_assert(v != NULL, "bad test vars: %s", err.text);
	}
	char *out = NULL;
	size_t n = 0;
	st = sg_jinja_render(t, v, NULL, &out, &n);
	if (st_out) *st_out = st;
	json_decref(v);
	sg_jinja_free(t);
	if (!st) cr_assert_eq(strlen(out), n);
	return st ? NULL : out;
}

Test(jinja, renders_every_construct_like_jinja2)
{
	for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
		char *out = render(CASES[i].src, VARS_JSON, NULL);
		cr_expect(out != NULL, "%s: failed: %s", CASES[i].name, sg_last_error());
		if (out) cr_expect_str_eq(out, CASES[i].want, "%s", CASES[i].name);
		sg_free(out);
	}
}

/* Error cases: each must fail (never print), with the line and column of the construct. */
static void expect_error(const char *src, const char *vars, const char *pos, const char *needle)
{
	sg_status st;
	char *out = render(src, vars, &st);
	cr_assert(out == NULL, "'%s' rendered '%s' but should fail", src, out ? out : "");
	cr_expect_neq(st, SG_OK);
	const char *e = sg_last_error();
	cr_expect(strstr(e, pos) != NULL, "'%s': error '%s' lacks position '%s'", src, e, pos);
	cr_expect(strstr(e, needle) != NULL, "'%s': error '%s' lacks '%s'", src, e, needle);
}

Test(jinja, undefined_errors_where_jinja_errors)
{
	expect_error("{{ nope.x }}", NULL, "line 1, column 8", "'nope' is undefined");
	expect_error("ab\n  {{ nope + 1 }}", NULL, "line 2, column 11", "'nope' is undefined");
	expect_error("{{ d.zz.yy }}", "{\"d\": {}}", "line 1, column 8", "'dict object' has no attribute 'zz'");
	expect_error("{{ nope < 1 }}", NULL, "line 1", "'nope' is undefined");
	expect_error("{{ nope() }}", NULL, "line 1", "'nope' is undefined");
	expect_error("{{ nope | tojson }}", NULL, "line 1", "not JSON serializable");
}

Test(jinja, undefined_is_falsy_empty_and_iterable_as_in_jinja)
{
	char *out = render("[{{ nope }}][{{ d.zz }}]{% if not nope %}F{% endif %}{% for x in nope %}x{% endfor %}"
			   "{{ nope | length }}{{ nope is defined }}{{ d.zz is undefined }}{{ nope ~ 'a' }}",
			   "{\"d\": {}}", NULL);
	cr_assert(out != NULL, "%s", sg_last_error());
	cr_expect_str_eq(out, "[][]F0FalseTruea");
	sg_free(out);
}

Test(jinja, type_errors_fail_like_python)
{
	expect_error("{{ 'a' + 1 }}", NULL, "line 1, column 8", "can only concatenate str");
	expect_error("{% for x in n %}{% endfor %}", "{\"n\": null}", "line 1", "'NoneType' object is not iterable");
	expect_error("{{ 1 / 0 }}", NULL, "line 1", "division by zero");
	expect_error("{{ 1 // 0 }}", NULL, "line 1", "division or modulo by zero");
	expect_error("{{ [1] < 'a' }}", NULL, "line 1", "not supported between");
	expect_error("{% for a, b in [[1, 2, 3]] %}{% endfor %}", NULL, "line 1", "cannot unpack");
	expect_error("{{ 9223372036854775807 + 1 }}", NULL, "line 1", "integer overflow");
}

Test(jinja, raise_exception_message_reaches_the_caller)
{
	expect_error("x\n{{ raise_exception('Conversation roles must alternate') }}", NULL, "line 2, column 19",
		     "raise_exception: Conversation roles must alternate");
}

Test(jinja, sandbox_refuses_mutation)
{
	expect_error("{{ xs.append(4) }}", "{\"xs\": [1]}", "line 1", "unsafe");
	expect_error("{{ d.update({'x': 1}) }}", "{\"d\": {}}", "line 1", "unsafe");
	expect_error("{% set ns = namespace(_x=1) %}", NULL, "line 1", "underscore-prefixed");
	expect_error("{% set ns = namespace() %}{% set ns._y = 1 %}", NULL, "line 1", "underscore-prefixed");
	expect_error("{% set s = 'a' %}{% set s.x = 1 %}", NULL, "line 1", "non-namespace");
}

Test(jinja, syntax_errors_name_the_construct_and_position)
{
	expect_error("{% if t %}x", NULL, "line 1, column 4", "expected 'endif'");
	expect_error("a\n{{ x ", NULL, "line 2, column 1", "never closed");
	expect_error("{% endfor %}", NULL, "line 1, column 4", "unexpected tag 'endfor'");
	expect_error("{{ x | nosuchfilter }}", NULL, "line 1, column 8", "unsupported filter 'nosuchfilter'");
	expect_error("{{ x is nosuchtest }}", NULL, "line 1, column 9", "unsupported test 'nosuchtest'");
	expect_error("ok\n\n  {% include 'x.jinja' %}", NULL, "line 3, column 6", "unsupported construct: tag 'include'");
	expect_error("{% extends 'base' %}", NULL, "line 1", "tag 'extends'");
	expect_error("{% for x in xs recursive %}{% endfor %}", NULL, "line 1", "recursive");
	expect_error("{% break %}", NULL, "line 1, column 4", "'break' outside of a for loop");
	expect_error("{{ 'abc }}", NULL, "line 1, column 4", "unterminated string");
	expect_error("{{ (1 }}", NULL, "line 1", "unexpected '}'");
	expect_error("{{ f(a=1, 2) }}", NULL, "line 1", "positional argument follows keyword argument");
	expect_error("{# never closed", NULL, "line 1, column 1", "unterminated comment");
}

Test(jinja, macro_argument_errors)
{
	expect_error("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", NULL, "line 1", "no keyword argument 'b'");
	expect_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", NULL, "line 1", "takes not more than 1");
}

Test(jinja, limits_stop_runaway_templates)
{
	/* output size */
	sg_jinja_template *t;
	const char *src = "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}";
	cr_assert_eq(sg_jinja_parse(src, strlen(src), "big", &t), SG_OK);
	sg_jinja_limits lim = {.max_output = 1 << 20};
	char *out = NULL;
	cr_expect_neq(sg_jinja_render(t, NULL, &lim, &out, NULL), SG_OK);
	cr_expect(strstr(sg_last_error(), "output larger than") != NULL, "%s", sg_last_error());
	/* steps */
	sg_jinja_limits lim2 = {.max_steps = 10000};
	cr_expect_neq(sg_jinja_render(t, NULL, &lim2, &out, NULL), SG_OK);
	cr_expect(strstr(sg_last_error(), "steps") != NULL, "%s", sg_last_error());
	sg_jinja_free(t);
	/* recursion */
	expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "line 1", "nested more than");
	/* the sandbox's range cap */
	expect_error("{{ range(1000000) | length }}", NULL, "line 1", "MAX_RANGE");
	/* deep nesting in the source is refused while parsing */
	char deep[2048];
	size_t k = 0;
	k += (size_t)snprintf(deep, sizeof(deep), "{{ ");
	for (int i = 0; i < 400; i++) deep[k++] = '(';
	deep[k++] = '1';
	for (int i = 0; i < 400; i++) deep[k++] = ')';
	snprintf(deep + k, sizeof(deep) - k, " }}");
	expect_error(deep, NULL, "line 1", "nested");
}

Test(jinja, whitespace_control_matches_trim_and_lstrip_blocks)
{
	/* trim_blocks eats the newline after a block tag, lstrip_blocks the indentation before it,
	 * `-` all whitespace on its side, `+` keeps it; {{ }} is not affected by either. */
	char *out = render("<\n  {% if true %}\n  a\n  {% endif %}\n  {{ 'b' }}\n  {%- if true %} c {% endif -%}\n d\n", NULL, NULL);
	cr_assert(out != NULL, "%s", sg_last_error());
	cr_expect_str_eq(out, "<\n  a\n  b c d");
	sg_free(out);
}

Test(jinja, strftime_now_formats_the_given_time)
{
	setenv("TZ", "UTC", 1);
	sg_jinja_template *t;
	const char *src = "{{ strftime_now('%d %b %Y') }}";
	cr_assert_eq(sg_jinja_parse(src, strlen(src), "t", &t), SG_OK);
	sg_jinja_limits lim = {.now = 1721952000}; /* 2024-07-26 00:00 UTC */
	char *out;
	cr_assert_eq(sg_jinja_render(t, NULL, &lim, &out, NULL), SG_OK, "%s", sg_last_error());
	cr_expect_str_eq(out, "26 Jul 2024");
	sg_free(out);
	sg_jinja_free(t);
}

Test(jinja, template_is_reusable_and_thread_independent_of_renders)
{
	sg_jinja_template *t;
	const char *src = "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}";
	cr_assert_eq(sg_jinja_parse(src, strlen(src), "t", &t), SG_OK);
	for (int i = 0; i < 3; i++) {
		json_t *v = json_pack("{s:[i,i,i]}", "messages", 1, 2, 3);
		char *out;
		cr_assert_eq(sg_jinja_render(t, v, NULL, &out, NULL), SG_OK);
		cr_expect_str_eq(out, "3");
		sg_free(out);
		json_decref(v);
	}
	sg_jinja_free(t);
}

Test(jinja, json_values_keep_types_and_key_order)
{
	char *out = render("{{ d }} {{ d | tojson }} {{ d.f is float }} {{ d.i is integer }}",
			   "{\"d\": {\"z\": 1, \"a\": [true, null], \"f\": 2.0, \"i\": 3, \"s\": \"\\u00e9\\n\"}}", NULL);
	cr_assert(out != NULL, "%s", sg_last_error());
	cr_expect_str_eq(out,
			 "{'z': 1, 'a': [True, None], 'f': 2.0, 'i': 3, 's': '\303\251\\n'} "
			 "{\"z\": 1, \"a\": [true, null], \"f\": 2.0, \"i\": 3, \"s\": \"\303\251\\n\"} True True");
	sg_free(out);
}

Test(jinja, allocation_failures_are_errors_not_crashes)
{
	const char *src = "{% for m in messages %}{{ m.content | upper }}{% endfor %}";
	json_t *v = json_pack("{s:[{s:s},{s:s}]}", "messages", "content", "hello", "content", "world");
	for (long n = 0; n < 40; n++) {
		sg_jinja_template *t = NULL;
		sg_alloc_fail_after(n);
		sg_status st = sg_jinja_parse(src, strlen(src), "t", &t);
		char *out = NULL;
		if (!st) st = sg_jinja_render(t, v, NULL, &out, NULL);
		sg_alloc_fail_after(-1);
		if (!st) cr_expect_str_eq(out, "HELLOWORLD");
		sg_free(out);
		sg_jinja_free(t);
	}
	json_decref(v);
}

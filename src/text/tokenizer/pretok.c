/* Pre-tokenizers of tokenizer.json (Split, ByteLevel, Metaspace, Digits, Whitespace,
 * WhitespaceSplit, BertPreTokenizer, Punctuation, Sequence). Split's patterns run on the regex
 * wrapper of regex.c. */
#include <string.h>
#include <utf8proc.h>

#include "base/alloc.h"
#include "base/error.h"
#include "text/tokenizer/tokenizer_int.h"

/* ---- pre-tokenizers ---- */

enum { P_SPLIT = 1, P_BYTELEVEL, P_METASPACE, P_DIGITS, P_WHITESPACE, P_WSSPLIT, P_BERT, P_PUNCT };
enum { B_REMOVED, B_ISOLATED, B_MERGED_PREV, B_MERGED_NEXT, B_CONTIGUOUS };
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

struct pre_step {
	int kind, behavior, invert;
	sg_regex re; /* Split (regex), ByteLevel (use_regex), Whitespace */
	char *lit;   /* Split with a literal pattern */
	size_t lit_n;
	int prefix_space, individual, prepend, split;
	char rep[8]; /* Metaspace replacement (UTF-8) */
	size_t rep_n;
	uint32_t rep_cp;
};


static const char GPT2_RE[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int parse_behavior(const json_t *j, int def)
{
	const char *b = json_string_value(json_object_get(j, "behavior"));
	if (!b) return def;
	if (!strcmp(b, "Removed")) return B_REMOVED;
	if (!strcmp(b, "Isolated")) return B_ISOLATED;
	if (!strcmp(b, "MergedWithPrevious")) return B_MERGED_PREV;
	if (!strcmp(b, "MergedWithNext")) return B_MERGED_NEXT;
	if (!strcmp(b, "Contiguous")) return B_CONTIGUOUS;
	return -1;
}

static int jbool(const json_t *j, const char *k, int def)
{
	const json_t *v = json_object_get(j, k);
	return json_is_boolean(v) ? json_is_true(v) : def;
}

static sg_status parse_one(const json_t *j, sg_pretok *pt)
{
	if (!j || json_is_null(j)) return SG_OK;
	const char *type = json_string_value(json_object_get(j, "type"));
	if (!type) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: pre_tokenizer without a type");
	if (!strcmp(type, "Sequence")) {
		const json_t *e;
		size_t i;
		json_array_foreach(json_object_get(j, "pretokenizers"), i, e)
		{
			sg_status st = parse_one(e, pt);
			if (st) return st;
		}
		return SG_OK;
	}
	if (pt->byte_level) return SG_FAIL(SG_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer '%s' after ByteLevel is not supported", type);
	pre_step s = {0};
	sg_status st = SG_OK;
	if (!strcmp(type, "Split")) {
		const char *p;
		size_t pn;
		int is_re;
		if ((st = sg_tok_pattern(json_object_get(j, "pattern"), &p, &pn, &is_re))) return st;
		s.kind = P_SPLIT;
		s.behavior = parse_behavior(j, B_REMOVED);
		s.invert = jbool(j, "invert", 0);
		if (s.behavior < 0) return SG_FAIL(SG_ERR_UNSUPPORTED, "tokenizer: Split behavior not supported");
		if (is_re) st = sg_regex_compile(&s.re, p, pn);
		else if (!pn) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: Split with an empty pattern");
		else if (!(s.lit = sg_strndup(p, pn))) st = SG_FAIL(SG_ERR_NOMEM, "Split");
		s.lit_n = pn;
	} else if (!strcmp(type, "ByteLevel")) {
		s.kind = P_BYTELEVEL;
		s.prefix_space = jbool(j, "add_prefix_space", 1);
		if (jbool(j, "use_regex", 1)) st = sg_regex_compile(&s.re, GPT2_RE, sizeof(GPT2_RE) - 1);
		pt->byte_level = 1;
	} else if (!strcmp(type, "Metaspace")) {
		s.kind = P_METASPACE;
		const char *r = json_string_value(json_object_get(j, "replacement"));
		if (!r) r = "\xE2\x96\x81";
		s.rep_n = strlen(r);
		if (s.rep_n == 0 || s.rep_n > 4 || sg_uc_next(r, s.rep_n, &s.rep_cp) != (int)s.rep_n)
			return SG_FAIL(SG_ERR_FORMAT, "tokenizer: Metaspace replacement must be one character");
		memcpy(s.rep, r, s.rep_n);
		const char *ps = json_string_value(json_object_get(j, "prepend_scheme"));
		if (ps) s.prepend = !strcmp(ps, "first") ? PREPEND_FIRST : !strcmp(ps, "never") ? PREPEND_NEVER : PREPEND_ALWAYS;
		else s.prepend = jbool(j, "add_prefix_space", 1) ? PREPEND_ALWAYS : PREPEND_NEVER;
		s.split = jbool(j, "split", 1);
	} else if (!strcmp(type, "Digits")) {
		s.kind = P_DIGITS;
		s.individual = jbool(j, "individual_digits", 0);
	} else if (!strcmp(type, "Whitespace")) {
		s.kind = P_WHITESPACE;
		st = sg_regex_compile(&s.re, "\\w+|[^\\w\\s]+", 13);
	} else if (!strcmp(type, "WhitespaceSplit")) {
		s.kind = P_WSSPLIT;
	} else if (!strcmp(type, "BertPreTokenizer")) {
		s.kind = P_BERT;
	} else if (!strcmp(type, "Punctuation")) {
		s.kind = P_PUNCT;
		s.behavior = parse_behavior(j, B_ISOLATED);
		if (s.behavior < 0) return SG_FAIL(SG_ERR_UNSUPPORTED, "tokenizer: Punctuation behavior not supported");
	} else {
		return SG_FAIL(SG_ERR_UNSUPPORTED, "tokenizer: pre_tokenizer '%s' is not supported", type);
	}
	if (st) {
		sg_regex_free(&s.re);
		sg_free(s.lit);
		return st;
	}
	pre_step *v = sg_realloc(pt->steps, (size_t)(pt->n + 1) * sizeof(*v));
	if (!v) {
		sg_regex_free(&s.re);
		sg_free(s.lit);
		return SG_FAIL(SG_ERR_NOMEM, "pre_tokenizer");
	}
	pt->steps = v;
	v[pt->n++] = s;
	return SG_OK;
}

sg_status sg_pretok_parse(const json_t *j, sg_pretok *out)
{
	memset(out, 0, sizeof(*out));
	sg_status st = parse_one(j, out);
	if (st) sg_pretok_free(out);
	return st;
}

void sg_pretok_free(sg_pretok *p)
{
	for (int i = 0; i < p->n; i++) {
		sg_regex_free(&p->steps[i].re);
		sg_free(p->steps[i].lit);
	}
	sg_free(p->steps);
	p->steps = NULL;
	p->n = 0;
}

int sg_pieces_push(sg_pieces *p, size_t off, size_t len, int start)
{
	if (!len) return 0;
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 32;
		sg_piece *v = sg_realloc(p->v, cap * sizeof(*v));
		if (!v) return -1;
		p->v = v;
		p->cap = cap;
	}
	p->v[p->n++] = (sg_piece){off, len, start};
	return 0;
}

/* Segments of one piece: [b, e) with a match flag, covering the piece in order. */
typedef struct seg {
	size_t b, e;
	int m;
} seg;
typedef struct segs {
	seg *v;
	size_t n, cap;
} segs;

static int seg_push(segs *s, size_t b, size_t e, int m)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 32;
		seg *v = sg_realloc(s->v, cap * sizeof(*v));
		if (!v) return -1;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = (seg){b, e, m};
	return 0;
}

/* Applies a split behaviour to the segments (offsets absolute in buf) and emits pieces. */
static int emit(segs *sg, int behavior, int invert, int start, size_t p_off, sg_pieces *out)
{
	if (invert)
		for (size_t i = 0; i < sg->n; i++) sg->v[i].m = !sg->v[i].m;
	size_t w = 0;
	int prev = 0;
	switch (behavior) {
	case B_REMOVED:
		for (size_t i = 0; i < sg->n; i++)
			if (!sg->v[i].m) sg->v[w++] = sg->v[i];
		break;
	case B_ISOLATED: w = sg->n; break;
	case B_MERGED_PREV:
		for (size_t i = 0; i < sg->n; i++) {
			if (sg->v[i].m && !prev && w) sg->v[w - 1].e = sg->v[i].e;
			else sg->v[w++] = sg->v[i];
			prev = sg->v[i].m;
		}
		break;
	case B_CONTIGUOUS:
		for (size_t i = 0; i < sg->n; i++) {
			if (sg->v[i].m == prev && w) sg->v[w - 1].e = sg->v[i].e;
			else sg->v[w++] = sg->v[i];
			prev = sg->v[i].m;
		}
		break;
	case B_MERGED_NEXT: {
		/* Right to left: a match joins the piece after it. */
		size_t k = sg->n;
		for (size_t i = sg->n; i-- > 0;) {
			int m = sg->v[i].m;
			if (m && !prev && k < sg->n) sg->v[k].b = sg->v[i].b;
			else sg->v[--k] = sg->v[i];
			prev = m;
		}
		memmove(sg->v, sg->v + k, (sg->n - k) * sizeof(seg));
		w = sg->n - k;
		break;
	}
	}
	for (size_t i = 0; i < w; i++)
		if (sg_pieces_push(out, sg->v[i].b, sg->v[i].e - sg->v[i].b, start && sg->v[i].b == p_off)) return -1;
	return 0;
}

static int regex_segs(const sg_regex *re, const char *buf, size_t off, size_t len, segs *sg)
{
	size_t prev = 0, ms, me, at = 0;
	int r;
	const char *s = buf + off;
	while (at <= len && (r = sg_regex_next(re, s, len, at, &ms, &me)) == 1) {
		if (ms > prev && seg_push(sg, off + prev, off + ms, 0)) return -1;
		if (seg_push(sg, off + ms, off + me, 1)) return -1;
		prev = me;
		if (me == ms) {
			if (ms >= len) break;
			uint32_t cp;
			at = ms + (size_t)sg_uc_next(s + ms, len - ms, &cp);
		} else {
			at = me;
		}
	}
	if (r < 0) return -1;
	if (prev < len && seg_push(sg, off + prev, off + len, 0)) return -1;
	return 0;
}

static int lit_segs(const char *lit, size_t ln, const char *buf, size_t off, size_t len, segs *sg)
{
	size_t prev = 0;
	const char *s = buf + off;
	while (prev < len) {
		const char *f = ln <= len - prev ? memmem(s + prev, len - prev, lit, ln) : NULL;
		if (!f) break;
		size_t ms = (size_t)(f - s);
		if (ms > prev && seg_push(sg, off + prev, off + ms, 0)) return -1;
		if (seg_push(sg, off + ms, off + ms + ln, 1)) return -1;
		prev = ms + ln;
	}
	if (prev < len && seg_push(sg, off + prev, off + len, 0)) return -1;
	return 0;
}

static int is_numeric(uint32_t c)
{
	if (c < 128) return c >= '0' && c <= '9';
	utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
	return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}

/* Each char for which pred holds is its own match. */
static int char_segs(int (*pred)(uint32_t), const char *buf, size_t off, size_t len, segs *sg)
{
	size_t prev = 0;
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		int k = sg_uc_next(buf + off + i, len - i, &cp);
		if (pred(cp)) {
			if (i > prev && seg_push(sg, off + prev, off + i, 0)) return -1;
			if (seg_push(sg, off + i, off + i + (size_t)k, 1)) return -1;
			prev = i + (size_t)k;
		}
		i += (size_t)k;
	}
	if (prev < len && seg_push(sg, off + prev, off + len, 0)) return -1;
	return 0;
}

static int metaspace_is(uint32_t c) { return c == 0x2581; }

static int step_piece(const pre_step *ps, sg_buf *buf, sg_piece pc, segs *sg, sg_pieces *out)
{
	sg->n = 0;
	switch (ps->kind) {
	case P_SPLIT:
		if (ps->lit ? lit_segs(ps->lit, ps->lit_n, buf->p, pc.off, pc.len, sg)
			    : regex_segs(&ps->re, buf->p, pc.off, pc.len, sg))
			return -1;
		return emit(sg, ps->behavior, ps->invert, pc.start, pc.off, out);
	case P_BYTELEVEL:
		if (ps->prefix_space && buf->p[pc.off] != ' ') {
			size_t off = buf->n;
			/* Reserve first: the source lies in the buffer that grows. */
			if (sg_buf_reserve(buf, pc.len + 1) || sg_buf_putc(buf, ' ') || sg_buf_put(buf, buf->p + pc.off, pc.len))
				return -1;
			pc.off = off;
			pc.len++;
		}
		if (!ps->re.code) return sg_pieces_push(out, pc.off, pc.len, pc.start);
		if (regex_segs(&ps->re, buf->p, pc.off, pc.len, sg)) return -1;
		return emit(sg, B_ISOLATED, 0, pc.start, pc.off, out);
	case P_METASPACE: {
		size_t off = buf->n;
		int pre = ps->prepend == PREPEND_ALWAYS || (ps->prepend == PREPEND_FIRST && pc.start);
		if (pre && !(pc.len >= ps->rep_n && !memcmp(buf->p + pc.off, ps->rep, ps->rep_n)) && buf->p[pc.off] != ' ')
			if (sg_buf_put(buf, ps->rep, ps->rep_n)) return -1;
		for (size_t i = 0; i < pc.len; i++) {
			char c = buf->p[pc.off + i];
			if (c == ' ' ? sg_buf_put(buf, ps->rep, ps->rep_n) : sg_buf_putc(buf, c)) return -1;
		}
		pc.off = off;
		pc.len = buf->n - off;
		if (!ps->split) return sg_pieces_push(out, pc.off, pc.len, pc.start);
		if (ps->rep_cp == 0x2581 ? char_segs(metaspace_is, buf->p, pc.off, pc.len, sg)
					 : lit_segs(ps->rep, ps->rep_n, buf->p, pc.off, pc.len, sg))
			return -1;
		return emit(sg, B_MERGED_NEXT, 0, pc.start, pc.off, out);
	}
	case P_DIGITS:
		if (char_segs(is_numeric, buf->p, pc.off, pc.len, sg)) return -1;
		return emit(sg, ps->individual ? B_ISOLATED : B_CONTIGUOUS, 0, pc.start, pc.off, out);
	case P_WHITESPACE:
		if (regex_segs(&ps->re, buf->p, pc.off, pc.len, sg)) return -1;
		return emit(sg, B_REMOVED, 1, pc.start, pc.off, out);
	case P_WSSPLIT:
		if (char_segs(sg_uc_is_whitespace, buf->p, pc.off, pc.len, sg)) return -1;
		return emit(sg, B_REMOVED, 0, pc.start, pc.off, out);
	case P_PUNCT:
		if (char_segs(sg_bert_is_punct, buf->p, pc.off, pc.len, sg)) return -1;
		return emit(sg, ps->behavior, 0, pc.start, pc.off, out);
	case P_BERT: {
		sg_pieces mid = {0};
		int r = char_segs(sg_uc_is_whitespace, buf->p, pc.off, pc.len, sg) ||
			emit(sg, B_REMOVED, 0, pc.start, pc.off, &mid);
		for (size_t i = 0; !r && i < mid.n; i++) {
			sg->n = 0;
			r = char_segs(sg_bert_is_punct, buf->p, mid.v[i].off, mid.v[i].len, sg) ||
			    emit(sg, B_ISOLATED, 0, mid.v[i].start, mid.v[i].off, out);
		}
		sg_free(mid.v);
		return r ? -1 : 0;
	}
	}
	return -1;
}

sg_status sg_pretok_apply(const sg_pretok *p, const char *s, size_t n, int at_start, sg_buf *buf, sg_pieces *out)
{
	size_t off = buf->n;
	if (sg_buf_put(buf, s, n)) return SG_FAIL(SG_ERR_NOMEM, "pre-tokenize");
	if (!p->n) return sg_pieces_push(out, off, n, at_start) ? SG_FAIL(SG_ERR_NOMEM, "pre-tokenize") : SG_OK;
	sg_pieces a = {0}, b = {0};
	segs sg = {0};
	sg_status st = SG_OK;
	if (sg_pieces_push(&a, off, n, at_start)) st = SG_FAIL(SG_ERR_NOMEM, "pre-tokenize");
	for (int k = 0; k < p->n && !st; k++) {
		sg_pieces *dst = k == p->n - 1 ? out : &b;
		if (dst == &b) b.n = 0;
		for (size_t i = 0; i < a.n && !st; i++)
			if (step_piece(&p->steps[k], buf, a.v[i], &sg, dst)) st = SG_FAIL(SG_ERR_NOMEM, "pre-tokenize");
		if (dst == &b) {
			sg_pieces t = a;
			a = b;
			b = t;
		}
	}
	sg_free(a.v);
	sg_free(b.v);
	sg_free(sg.v);
	return st;
}

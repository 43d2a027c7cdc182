/* The agent side of a generation (see agent.h). */
#include "server/agent.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/log.h"

#include "text/grammar/grammar.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/token_trie.h"
#include "text/grammar/toolcall.h"

/* Reasoning budgets of reasoning_effort / Ollama think levels, in tokens. */
static int32_t effort_budget(int effort)
{
	switch (effort) {
	case 1: return 512;
	case 2: return 2048;
	case 3: return 8192;
	}
	return 0;
}

int sg_agent_plan_make(const sg_srv_model *m, const sg_srv_req *q, sg_agent_plan **out, sg_srv_err *e)
{
	*out = NULL;
	const sg_srv_model_agent *ma = sg_srv_model_agent_get(m);
	int tools = q->chat && q->tools && q->tool_choice != SG_TOOLS_NONE;
	int reasoning = q->chat && ma->think_start[0] && q->think != 0;
	if (!q->json_format && !tools && !reasoning) return 0;
	sg_agent_plan *p = sg_calloc(1, sizeof *p);
	if (!p) return sg_srv_err_set(e, 500, "server_error", NULL, "out of memory");
	p->syntax = ma->syntax;
	p->tools = tools;
	if (tools) p->tool_defs = json_incref(q->tools);
	p->reasoning = reasoning;
	p->think_end_id = ma->think_end_id;
	p->think_start_id = ma->think_start_id;
	memcpy(p->think_start, ma->think_start, sizeof p->think_start);
	memcpy(p->think_end, ma->think_end, sizeof p->think_end);
	const char *field = sg_srv_route_is_ollama(q->route) ? "format" : "response_format";
	char warn[256] = "";
	sg_status st = SG_OK;
	if (tools && (q->tool_choice == SG_TOOLS_REQUIRED || q->tool_choice == SG_TOOLS_NAMED)) {
		field = "tool_choice";
		st = sg_toolcall_grammar((sg_toolcall_syntax)p->syntax, q->tools,
					 q->tool_choice == SG_TOOLS_NAMED ? q->tool_name : NULL, q->parallel_tools ? 8 : 1,
					 &p->grammar);
		if (st == SG_ERR_UNSUPPORTED && p->syntax != SG_TC_HERMES && p->syntax != SG_TC_LLAMA3 && p->syntax != SG_TC_MISTRAL &&
		    p->syntax != SG_TC_QWEN_XML)
			sg_error(st, "tool_choice 'required' or a named function cannot be enforced for model '%s' (its tool-call "
				     "syntax has no grammar yet): use 'auto'",
				 sg_srv_model_info_get(m)->name);
	} else if (q->json_format == 1) {
		p->json = 1;
		st = sg_grammar_json_object(&p->grammar);
	} else if (q->json_format == 2) {
		p->json = 1;
		st = sg_json_schema_compile(q->schema, q->schema_strict, &p->grammar, warn, sizeof warn);
		if (st == SG_OK && warn[0]) SG_INFO("serve: schema keyword skipped (not strict): %s", warn);
	}
	if (st) {
		int status = st == SG_ERR_NOMEM ? 500 : 400;
		sg_srv_err_set(e, status, status == 400 ? "invalid_request_error" : "server_error", field, "%s", sg_last_error());
		sg_agent_plan_free(p);
		return status;
	}
	if (reasoning) {
		p->reasoning_budget = q->reasoning_budget > 0 ? q->reasoning_budget : effort_budget(q->reasoning_effort);
		/* With a constrained answer, the reasoning may use half of max_tokens: the answer needs
		 * room to finish. */
		if (p->grammar && (p->reasoning_budget == 0 || p->reasoning_budget > q->max_tokens / 2))
			p->reasoning_budget = q->max_tokens / 2 > 0 ? q->max_tokens / 2 : 1;
	}
	*out = p;
	return 0;
}

/* The last non-whitespace bytes of s[0..n) end with w. */
static int ends_with_trimmed(const char *s, size_t n, const char *w)
{
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == '\t')) n--;
	size_t k = strlen(w);
	return k && n >= k && !memcmp(s + n - k, w, k);
}

void sg_agent_plan_prompt(sg_agent_plan *p, const char *prompt, size_t len)
{
	if (!p || !p->reasoning) return;
	if (ends_with_trimmed(prompt, len, p->think_end)) p->thinking_off = 1;
	else if (ends_with_trimmed(prompt, len, p->think_start)) p->start_in_reasoning = 1;
}

void sg_agent_plan_free(sg_agent_plan *p)
{
	if (!p) return;
	sg_grammar_free(p->grammar);
	json_decref(p->tool_defs);
	sg_free(p);
}

enum { PH_ANSWER, PH_REASONING, PH_UNDECIDED };

struct sg_agent_run {
	const sg_agent_plan *plan;
	sg_agent_out out;
	int32_t n_vocab;
	const sg_token_trie *trie;
	const uint8_t *const *tok;
	const uint32_t *tlen;
	const int32_t *eos;
	size_t n_eos;
	sg_grammar_gate *gate;   /* the active gate */
	sg_grammar_gate *direct; /* PH_UNDECIDED: the gate of an answer without reasoning */
	int phase;
	int reasoning_ended;
	int32_t reasoning_tokens;
	int answer_started; /* a non-blank answer byte went out (leading blank lines are dropped) */
	int reasoning_seen;
	sg_reasoning_split *split;
	sg_toolcall_parser *parser;
	sg_gen_constraint con;
	int has_con;
	int calls, malformed;
	int cut;             /* a call was cut short by the end of the generation */
	int open_call;       /* index + 1 of the call started and not ended, else 0 */
	uint32_t *bits;      /* [(n_vocab + 31) / 32] the allowed tokens of this step */
	char *ws;            /* blank answer text held back: dropped when a tool call follows it */
	size_t ws_len, ws_cap;
};

static int blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t') return 0;
	return 1;
}

/* Answer text to the writer; with tool calls possible, blank text waits to see whether a call
 * (whose grammar allows blanks around it) follows. */
static void emit_text(sg_agent_run *r, const char *s, size_t n)
{
	if (!n || !r->out.text) return;
	if (r->parser && blank(s, n)) {
		if (r->ws_len + n > r->ws_cap) {
			size_t c = (r->ws_len + n) * 2;
			char *nb = sg_realloc(r->ws, c);
			if (!nb) return;
			r->ws = nb;
			r->ws_cap = c;
		}
		memcpy(r->ws + r->ws_len, s, n);
		r->ws_len += n;
		return;
	}
	if (r->ws_len) r->out.text(r->out.ud, r->ws, r->ws_len);
	r->ws_len = 0;
	r->out.text(r->out.ud, s, n);
}

static void all_allowed(const sg_agent_run *r, uint32_t *bits)
{
	size_t words = (size_t)(r->n_vocab + 31) / 32;
	memset(bits, 0xFF, words * 4);
	if (r->n_vocab % 32) bits[words - 1] = (1u << (r->n_vocab % 32)) - 1;
}

/* Is the model inside its reasoning now (unconstrained, counting against the budget)? */
static int reasoning_now(const sg_agent_run *r)
{
	if (r->phase == PH_REASONING) return r->gate ? !sg_grammar_gate_constrained(r->gate) : !r->reasoning_ended;
	return 0;
}

static sg_status con_bits(sg_agent_run *r, uint32_t *bits)
{
	const sg_agent_plan *p = r->plan;
	if (reasoning_now(r) && p->reasoning_budget > 0 && r->reasoning_tokens >= p->reasoning_budget && p->think_end_id >= 0 &&
	    p->think_end_id < r->n_vocab) {
		/* The budget is spent: the reasoning ends here. */
		memset(bits, 0, (size_t)(r->n_vocab + 31) / 32 * 4);
		bits[p->think_end_id >> 5] |= 1u << (p->think_end_id & 31);
		return SG_OK;
	}
	if (!r->gate) {
		all_allowed(r, bits);
		return SG_OK;
	}
	if (r->phase == PH_UNDECIDED) {
		/* The first token: the model opens its reasoning, or answers at once (constrained). */
		sg_status st = sg_grammar_gate_mask(r->direct, r->trie, bits);
		if (!st) bits[p->think_start_id >> 5] |= 1u << (p->think_start_id & 31);
		return st;
	}
	sg_status st = sg_grammar_gate_mask(r->gate, r->trie, bits);
	if (st) return st;
	if (reasoning_now(r)) /* the constrained answer must come: no end of turn inside the reasoning */
		for (size_t i = 0; i < r->n_eos; i++) bits[r->eos[i] >> 5] &= ~(1u << (r->eos[i] & 31));
	return SG_OK;
}

/* The loop's hook: the allowed-token bitmap, then -inf for every token outside it. */
static sg_status con_mask(void *self, float *logits, int32_t n_vocab)
{
	sg_agent_run *r = self;
	if (n_vocab != r->n_vocab) return sg_error(SG_ERR_INTERNAL, "constraint: %d logits for a vocabulary of %d", n_vocab, r->n_vocab);
	sg_status st = con_bits(r, r->bits);
	if (st) return st;
	for (int32_t i = 0; i < n_vocab; i++)
		if (!((r->bits[i >> 5] >> (i & 31)) & 1)) logits[i] = -INFINITY;
	return SG_OK;
}

static sg_status con_accept(void *self, int32_t token)
{
	sg_agent_run *r = self;
	const sg_agent_plan *p = r->plan;
	if (reasoning_now(r)) r->reasoning_tokens++;
	if (token == p->think_end_id) r->reasoning_ended = 1;
	if (r->phase == PH_UNDECIDED) {
		if (token == p->think_start_id) {
			r->phase = PH_REASONING;
			return SG_OK;
		}
		/* Answering at once: the constrained-from-the-start gate takes over. */
		sg_grammar_gate *t = r->gate;
		r->gate = r->direct;
		r->direct = t;
		r->phase = PH_ANSWER;
	}
	if (!r->gate || token < 0 || token >= r->n_vocab) return SG_OK;
	for (size_t i = 0; i < r->n_eos; i++)
		if (r->eos[i] == token) return SG_OK;
	const uint8_t *b = r->tok[token];
	size_t n = r->tlen[token];
	if (token == p->think_end_id && !n) b = (const uint8_t *)p->think_end, n = strlen(p->think_end);
	if (n && sg_grammar_gate_advance(r->gate, b, n) != SG_OK)
		/* The mask allowed it, so the automaton must take it: a bug, not bad input. */
		return sg_error(SG_ERR_INTERNAL, "constrained decoding: token %d was allowed but rejected: %s", token, sg_last_error());
	return SG_OK;
}

sg_status sg_agent_run_new(const sg_agent_plan *plan, sg_srv_model *m, const sg_agent_out *out, sg_agent_run **res)
{
	*res = NULL;
	sg_agent_run *r = sg_calloc(1, sizeof *r);
	if (!r) return SG_FAIL(SG_ERR_NOMEM, "agent run");
	r->plan = plan;
	r->out = *out;
	r->n_vocab = sg_srv_model_info_get(m)->n_vocab;
	r->eos = sg_srv_model_eos(m, &r->n_eos);
	sg_status st = SG_OK;
	int thinks = plan && plan->reasoning && !plan->thinking_off;
	r->phase = !thinks ? PH_ANSWER : plan->start_in_reasoning || plan->think_start_id < 0 ? PH_REASONING : PH_UNDECIDED;
	if (plan && plan->grammar) {
		st = sg_srv_model_trie(m, &r->trie, &r->tok, &r->tlen);
		if (st == SG_OK) st = sg_grammar_gate_new(plan->grammar, thinks ? plan->think_end : NULL, !thinks, &r->gate);
		if (st == SG_OK && r->phase == PH_UNDECIDED) st = sg_grammar_gate_new(plan->grammar, NULL, 1, &r->direct);
	}
	if (st == SG_OK && plan && plan->reasoning && !plan->thinking_off)
		st = sg_reasoning_split_new(plan->think_start, plan->think_end, plan->start_in_reasoning, &r->split);
	if (st == SG_OK && plan && plan->tools)
		st = sg_toolcall_parser_new((sg_toolcall_syntax)plan->syntax, plan->tool_defs, &r->parser);
	if (st) {
		sg_agent_run_free(r);
		return st;
	}
	r->bits = sg_malloc((size_t)(r->n_vocab + 31) / 32 * sizeof *r->bits);
	if (!r->bits) {
		sg_agent_run_free(r);
		return SG_FAIL(SG_ERR_NOMEM, "token mask");
	}
	r->has_con = plan && (plan->grammar || (plan->reasoning && plan->reasoning_budget > 0 && plan->think_end_id >= 0));
	r->con = (sg_gen_constraint){.self = r, .mask = con_mask, .accept = con_accept};
	*res = r;
	return SG_OK;
}

void sg_agent_run_free(sg_agent_run *r)
{
	if (!r) return;
	sg_grammar_gate_free(r->gate);
	sg_grammar_gate_free(r->direct);
	sg_reasoning_split_free(r->split);
	sg_toolcall_parser_free(r->parser);
	sg_free(r->ws);
	sg_free(r->bits);
	sg_free(r);
}

const sg_gen_constraint *sg_agent_run_constraint(sg_agent_run *r)
{
	return r && r->has_con ? &r->con : NULL;
}

static void on_call(void *ud, const sg_toolcall_event *ev)
{
	sg_agent_run *r = ud;
	switch (ev->kind) {
	case SG_TCE_TEXT:
		emit_text(r, ev->text, ev->len);
		break;
	case SG_TCE_CALL_START:
		r->ws_len = 0;
		r->open_call = ev->index + 1;
		if (r->out.call_start) r->out.call_start(r->out.ud, ev->index, ev->name);
		break;
	case SG_TCE_ARGS_DELTA:
		if (r->out.call_args) r->out.call_args(r->out.ud, ev->index, ev->text, ev->len);
		break;
	case SG_TCE_CALL_END:
		r->calls++;
		r->open_call = 0;
		if (r->out.call_end) r->out.call_end(r->out.ud, ev->index);
		break;
	case SG_TCE_CALL_CUT:
		/* Not a call (its arguments are unfinished) and not answer text (it is call syntax):
		 * the answer reports the truncation instead. */
		r->cut++;
		r->ws_len = 0;
		if (r->open_call && r->out.call_void) r->out.call_void(r->out.ud, r->open_call - 1);
		r->open_call = 0;
		break;
	case SG_TCE_MALFORMED:
		if (r->open_call && r->out.call_void) r->out.call_void(r->out.ud, r->open_call - 1);
		r->open_call = 0;
		r->malformed++;
		SG_WARN("serve: a malformed tool call is returned as text: %.*s", (int)(ev->len > 300 ? 300 : ev->len), ev->text);
		emit_text(r, ev->text, ev->len);
		break;
	}
}

static void answer(sg_agent_run *r, const char *s, size_t n)
{
	if (!r->answer_started && r->reasoning_seen) {
		/* Templates put blank lines between the reasoning and the answer. */
		while (n && (*s == '\n' || *s == '\r')) s++, n--;
		if (!n) return;
	}
	r->answer_started = 1;
	if (r->parser) sg_toolcall_feed(r->parser, s, n, on_call, r);
	else if (r->out.text) r->out.text(r->out.ud, s, n);
}

static void on_split(void *ud, int is_reasoning, const char *s, size_t n)
{
	sg_agent_run *r = ud;
	if (is_reasoning) {
		r->reasoning_seen = 1;
		if (r->out.reasoning && n) r->out.reasoning(r->out.ud, s, n);
	} else answer(r, s, n);
}

void sg_agent_run_feed(sg_agent_run *r, const char *text, size_t n)
{
	if (!n) return;
	if (r->split) sg_reasoning_feed(r->split, text, n, on_split, r);
	else answer(r, text, n);
}

void sg_agent_run_finish(sg_agent_run *r, const sg_gen_result *res)
{
	int cut = res && (res->finish == SG_GEN_LENGTH || res->stop_index >= 0);
	if (r->split) sg_reasoning_finish(r->split, on_split, r);
	if (r->parser) (cut ? sg_toolcall_cut : sg_toolcall_finish)(r->parser, on_call, r);
	/* Blank text held back is the answer only when nothing but blanks came: not when a call
	 * followed or was cut, nor when a call was forced (its grammar allows blanks before it). */
	int forced = r->plan && r->plan->tools && r->plan->grammar;
	if (r->ws_len && !r->calls && !r->cut && !forced && r->out.text) r->out.text(r->out.ud, r->ws, r->ws_len);
	r->ws_len = 0;
}

int sg_agent_run_calls(const sg_agent_run *r)
{
	return r ? r->calls : 0;
}

int sg_agent_run_malformed(const sg_agent_run *r)
{
	return r ? r->malformed : 0;
}

int sg_agent_run_cut(const sg_agent_run *r)
{
	return r ? r->cut : 0;
}

int sg_agent_run_tool_finish(const sg_agent_run *r)
{
	return r && r->calls && !r->malformed && !r->cut;
}

int sg_agent_run_complete(const sg_agent_run *r)
{
	if (!r || !r->gate) return 1;
	/* A JSON answer that was a tool call (written bare) cut short is that call's truncation,
	 * reported as such (finish "length"), not an unfinished JSON answer. */
	if (r->cut) return 1;
	return r->phase != PH_UNDECIDED && sg_grammar_gate_accepts_eos(r->gate);
}


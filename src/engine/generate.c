/* The generation loop (see generate.h). */
#include "engine/generate.h"

#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/timer.h"

sg_gen_params sg_gen_default_params(void)
{
	sg_gen_params p;
	memset(&p, 0, sizeof p);
	p.sampler = sg_sampler_default_params();
	p.max_tokens = 256;
	p.prefill_chunk = 512;
	p.draft_max = 16;
	p.draft_min = 1;
	return p;
}

void sg_gen_state_init(sg_gen_state *st, const sg_gen_model *model)
{
	memset(st, 0, sizeof *st);
	st->model = model;
}

void sg_gen_state_free(sg_gen_state *st)
{
	sg_free(st->tokens);
	memset(st, 0, sizeof *st);
}

sg_status sg_gen_state_reset(sg_gen_state *st)
{
	st->n = 0;
	return st->model->reset(st->model->self);
}

size_t sg_gen_common_prefix(const sg_gen_state *st, const int32_t *prompt, size_t n)
{
	size_t i = 0;
	while (i < n && i < st->n && st->tokens[i] == prompt[i]) i++;
	return i;
}

static sg_status history_append(sg_gen_state *st, const int32_t *t, size_t n)
{
	if (st->n + n > st->cap) {
		size_t cap = st->cap ? st->cap : 256;
		while (cap < st->n + n) cap *= 2;
		int32_t *nt = sg_realloc(st->tokens, cap * sizeof *nt);
		if (!nt) return SG_FAIL(SG_ERR_NOMEM, "token history of %zu entries", cap);
		st->tokens = nt;
		st->cap = cap;
	}
	memcpy(st->tokens + st->n, t, n * sizeof *t);
	st->n += n;
	return SG_OK;
}

/* Evaluates tokens and records them; a failed eval leaves the model state unknown, so the
 * history is forgotten (the next turn starts from scratch). */
static sg_status evaluated(sg_gen_state *st, sg_status s, const int32_t *t, size_t n)
{
	if (s) {
		st->n = 0;
		(void)st->model->reset(st->model->self);
		return s;
	}
	return history_append(st, t, n);
}

static sg_status eval_tokens(sg_gen_state *st, const int32_t *t, size_t n, float *logits)
{
	const sg_gen_model *m = st->model;
	return evaluated(st, m->eval(m->self, t, n, st->n, logits), t, n);
}

/* eval_tokens for one token whose successor is its logits' argmax (sg_gen_model.eval_greedy). */
static sg_status eval_greedy(sg_gen_state *st, int32_t t, int32_t *next)
{
	const sg_gen_model *m = st->model;
	sg_status s = m->eval_greedy(m->self, t, st->n, next);
	if (!s && (*next < 0 || *next >= m->n_vocab)) s = sg_error(SG_ERR_INTERNAL, "greedy step gave id %d of %d", *next, m->n_vocab);
	return evaluated(st, s, &t, 1);
}

/* Sampling candidates of a decode step (sg_gen_model.eval_top): the request's shape and ids, and
 * the last step's candidates. */
typedef struct top_step {
	int on, have; /* the loop samples from candidates; the last eval left some */
	int32_t k, m;
	int32_t *ids, *tid; /* [SG_SAMPLER_TOP_MAX_IDS], [k] */
	float *tv, *v;      /* [k], [m] */
} top_step;

/* Decides whether the loop can sample from candidates and allocates their buffers. */
static sg_status top_step_init(top_step *t, const sg_gen_model *m, const sg_gen_params *p, const sg_sampler *smp)
{
	memset(t, 0, sizeof(*t));
	/* plain greedy has its own path (or its kill-switch asks for the logits) */
	if (!m->eval_top || p->constraint || sg_sampler_plain_greedy(smp) || !sg_flag_bool("SARAGOSSA_SAMPLE_IN_BACKEND"))
		return SG_OK;
	t->ids = sg_malloc(SG_SAMPLER_TOP_MAX_IDS * sizeof(*t->ids));
	if (!t->ids) return SG_FAIL(SG_ERR_NOMEM, "candidate ids");
	if (!sg_sampler_top_request(smp, &t->k, t->ids, SG_SAMPLER_TOP_MAX_IDS, &t->m) || t->k > m->top_max) return SG_OK;
	t->tid = sg_malloc((size_t)t->k * sizeof(*t->tid));
	t->tv = sg_malloc((size_t)t->k * sizeof(*t->tv));
	t->v = sg_malloc(((size_t)t->m + 1) * sizeof(*t->v));
	if (!t->tid || !t->tv || !t->v) return SG_FAIL(SG_ERR_NOMEM, "%d sampling candidates", t->k);
	t->on = 1;
	return SG_OK;
}

static void top_step_free(top_step *t)
{
	sg_free(t->ids);
	sg_free(t->tid);
	sg_free(t->tv);
	sg_free(t->v);
}

/* eval_tokens for one token whose successor is drawn from candidates: the request is renewed
 * (the penalty window moved), its shape stays. */
static sg_status eval_top(sg_gen_state *st, top_step *t, const sg_sampler *smp, int32_t tok)
{
	const sg_gen_model *m = st->model;
	int32_t k, mm;
	if (!sg_sampler_top_request(smp, &k, t->ids, SG_SAMPLER_TOP_MAX_IDS, &mm) || k != t->k || mm != t->m)
		return sg_error(SG_ERR_INTERNAL, "sampling candidates changed shape (%d, %d) -> (%d, %d)", t->k, t->m, k, mm);
	sg_status s = m->eval_top(m->self, tok, st->n, t->k, t->ids, t->m, t->tid, t->tv, t->v);
	t->have = !s;
	return evaluated(st, s, &tok, 1);
}

/* ---- speculative decoding ----
 *
 * After a token t is sampled, the drafter guesses d[0..k) to follow it and one eval_rows step
 * scores [t, d0 .. dk-1]: row i holds the logits after d[i-1] (row 0 after t). The loop then
 * samples from row 0 as it would from a plain step's logits; when the sampled token is d0, row 1
 * already holds the logits that follow it, and so on. The first sampled token that differs from
 * its guess drops the rows after it (the state is truncated back) and starts the next verify
 * step. Every token still goes through the same sampler, constraint and stop checks, in the same
 * order, from logits with the bits of a one-token step: the output is the output without
 * speculation, greedy or sampled with the same seed; the guesses only decide how many tokens
 * one forward pass scores. (For a guess picked without a draw, a point mass, this is rejection
 * sampling: the guess is kept with probability p(guess), and a rejection leaves a token drawn
 * from p without the guess.)
 *
 * A drafter that samples its guesses from a distribution q of its own (a draft model at a
 * temperature, sg_gen_drafter.sample_begin) is verified by rejection sampling instead
 * (sg_sampler_sample_spec): the guess is kept with probability min(1, p/q), a rejection draws
 * from norm(max(0, p - q)). The answer is distributed as plain sampling's, not token for token
 * the same for a seed. */
typedef struct spec_run {
	int on;
	const sg_gen_drafter *dr;
	int32_t max, min;
	int32_t *draft; /* [max] the current step's guesses */
	int sampled;    /* the drafter samples its guesses: q holds their distributions */
	float *q;       /* [max][n_vocab] when sampled */
	float *rows;    /* [max + 1][n_vocab] its logits */
	int greedy;     /* plain greedy without a constraint: the rows' argmaxes (ids) stand for the rows */
	int32_t *ids;   /* [max + 1] when greedy */
	int32_t nd, at; /* guesses verified; rows used (rows[at] gave the last logits) */
	int32_t cur;    /* the draft length asked for now (SARAGOSSA_SPEC_ADAPTIVE), else max */
	int adaptive;
	int32_t skip;   /* tokens still to decode without guesses (after steps that kept none) */
	int32_t fails;  /* verify steps in a row that kept no guess (or did not pay, with cost) */
	/* SARAGOSSA_SPEC_COST: what guessing costs, measured (ns): a plain step's time (moving average),
	 * the last guessing step's (drafting and verifying), the decayed sums of kept guesses and of
	 * the guessing steps' cost beyond a plain step, in plain steps */
	int cost;
	double t_plain, t_step, kept_sum, cost_sum;
} spec_run;

static sg_status spec_init(spec_run *sp, const sg_gen_model *m, const sg_gen_params *p, const sg_sampler *smp, uint64_t seed)
{
	memset(sp, 0, sizeof(*sp));
	if (!p->drafter || !m->eval_rows || !m->truncate) return SG_OK;
	if (p->draft_max < 1 || p->draft_min < 0 || p->draft_min > p->draft_max)
		return SG_FAIL(SG_ERR_INVALID_ARG, "draft_max %d, draft_min %d (want 1 <= draft_max, 0 <= draft_min <= draft_max)",
			       p->draft_max, p->draft_min);
	if (p->draft_max > 256) return SG_FAIL(SG_ERR_INVALID_ARG, "draft_max %d (at most 256)", p->draft_max);
	sp->dr = p->drafter;
	sp->max = p->draft_max;
	sp->min = p->draft_min > 0 ? p->draft_min : 1;
	sp->adaptive = sg_flag_bool("SARAGOSSA_SPEC_ADAPTIVE");
	sp->cur = sp->adaptive ? (sp->min > 4 ? sp->min : 4 < sp->max ? 4 : sp->max) : sp->max;
	sp->greedy = m->eval_rows_greedy && m->eval_greedy && !p->constraint && sg_sampler_plain_greedy(smp) && sg_flag_bool("SARAGOSSA_GREEDY_IN_BACKEND");
	sp->draft = sg_malloc((size_t)sp->max * sizeof(*sp->draft));
	if (sp->greedy) sp->ids = sg_malloc((size_t)(sp->max + 1) * sizeof(*sp->ids));
	else sp->rows = sg_malloc((size_t)(sp->max + 1) * (size_t)m->n_vocab * sizeof(*sp->rows));
	if (!sp->draft || !(sp->greedy ? (void *)sp->ids : (void *)sp->rows))
		return SG_FAIL(SG_ERR_NOMEM, "speculative buffers for %d draft tokens", sp->max);
	sg_status s;
	if (p->sampler.temperature > 0.0f && sp->dr->sample_begin && sp->dr->draft_q && sg_flag_bool("SARAGOSSA_SPEC_REJECTION") &&
	    (s = sp->dr->sample_begin(sp->dr->self, &p->sampler, seed, &sp->sampled)))
		return s;
	/* timings decide when to guess, so not where the guesses' own draws (rejection sampling) would
	 * make a seed's answer depend on them */
	sp->cost = sp->adaptive && !sp->sampled && sg_flag_bool("SARAGOSSA_SPEC_COST");
	if (sp->sampled) {
		sp->q = sg_malloc((size_t)sp->max * (size_t)m->n_vocab * sizeof(*sp->q));
		if (!sp->q) return SG_FAIL(SG_ERR_NOMEM, "draft distributions for %d draft tokens", sp->max);
	}
	sp->on = 1;
	return SG_OK;
}

static void spec_free(spec_run *sp)
{
	sg_free(sp->draft);
	sg_free(sp->rows);
	sg_free(sp->ids);
	sg_free(sp->q);
}

/* Positions evaluated past the last confirmed token (guesses not sampled yet). */
static size_t spec_pending(const spec_run *sp) { return sp->on ? (size_t)(sp->nd - sp->at) : 0; }

/* Drops the pending guesses from the state. */
static sg_status spec_drop(sg_gen_state *st, spec_run *sp)
{
	size_t pend = spec_pending(sp);
	if (!pend) return SG_OK;
	const sg_gen_model *m = st->model;
	sg_status s = m->truncate(m->self, st->n - pend);
	if (s) return s;
	st->n -= pend;
	sp->nd = sp->at = 0;
	return SG_OK;
}

static sg_status history_reserve(sg_gen_state *st, size_t n)
{
	if (n <= st->cap) return SG_OK;
	size_t cap = st->cap ? st->cap : 256;
	while (cap < n) cap *= 2;
	int32_t *nt = sg_realloc(st->tokens, cap * sizeof *nt);
	if (!nt) return SG_FAIL(SG_ERR_NOMEM, "token history of %zu entries", cap);
	st->tokens = nt;
	st->cap = cap;
	return SG_OK;
}

/* The step after sampling tok: the logits that follow it into logits[], from a verified row when
 * tok was the guess there, else from a new verify step of tok and up to `room` guesses. In greedy
 * mode the next token itself into *next instead (the row's argmax). */
static sg_status spec_step(sg_gen_state *st, spec_run *sp, int32_t tok, int32_t room, float *logits, int32_t *next, sg_gen_result *res)
{
	const sg_gen_model *m = st->model;
	size_t V = (size_t)m->n_vocab;
	if (sp->at < sp->nd && sp->draft[sp->at] == tok) {
		sp->at++;
		res->n_accepted++;
		if (sp->greedy) *next = sp->ids[sp->at];
		else memcpy(logits, sp->rows + (size_t)sp->at * V, V * sizeof(*logits));
		return SG_OK;
	}
	if (sp->nd > 0)
		SG_DEBUG("spec: a verify step of %d guesses kept %d (%zu tokens in the history): %.3f ms, a plain step %.3f ms",
			 sp->nd, sp->at, st->n, sp->t_step / 1e6, sp->t_plain / 1e6);
	if (sp->adaptive && sp->nd > 0) {
		/* all kept: ask for twice as many; else one more than were kept (a verify step costs
		 * about a token's compute per guess on a CPU, so wasted guesses are not free) */
		int32_t c = sp->at == sp->nd ? 2 * sp->cur : sp->at + 1;
		sp->cur = c > sp->max ? sp->max : c < sp->min ? sp->min : c;
		/* none kept: decode the next 2, 4 or 8 tokens without guesses (free prose gives an
		 * n-gram drafter little to copy; short, so that a repeated span is still caught
		 * early); one kept guess ends the back-off */
		int fail = sp->at == 0, top = 3;
		if (sp->cost && sp->t_plain > 0) {
			/* with the costs measured: a step whose kept guesses did not make up for its time
			 * beyond a plain step's fails too when the recent steps (decayed sums) lost overall,
			 * and the back-off doubles up to 64 tokens */
			double extra = sp->t_step / sp->t_plain - 1.0;
			sp->kept_sum = 0.8 * sp->kept_sum + sp->at;
			sp->cost_sum = 0.8 * sp->cost_sum + extra;
			fail = fail || ((double)sp->at <= extra && sp->kept_sum < sp->cost_sum);
			top = 6;
		}
		if (fail) {
			sp->fails = sp->fails < top ? sp->fails + 1 : top;
			sp->skip = 1 << sp->fails;
		} else {
			sp->fails = 0;
		}
	}
	sg_status s = spec_drop(st, sp);
	if (s) return s;
	int32_t k = room < sp->cur ? room : sp->cur, nd = 0;
	if (sp->skip > 0) {
		sp->skip--;
		k = 0;
	}
	if ((s = history_reserve(st, st->n + 1 + (size_t)(k > 0 ? k : 0)))) return s;
	st->tokens[st->n] = tok;
	const uint64_t t0 = sg_time_ns();
	if (k > 0) {
		if (sp->sampled) s = sp->dr->draft_q(sp->dr->self, st->tokens, st->n + 1, k, sp->draft, sp->q, m->n_vocab, &nd);
		else s = sp->dr->draft(sp->dr->self, st->tokens, st->n + 1, k, sp->draft, &nd);
		if (s) return s;
		if (nd < 0 || nd > k) return sg_error(SG_ERR_INTERNAL, "the %s drafter gave %d tokens of %d", sp->dr->name, nd, k);
		for (int32_t i = 0; i < nd; i++)
			if (sp->draft[i] < 0 || sp->draft[i] >= m->n_vocab)
				return sg_error(SG_ERR_INTERNAL, "the %s drafter gave id %d of %d", sp->dr->name, sp->draft[i], m->n_vocab);
		if (nd < sp->min) nd = 0;
	}
	sp->nd = sp->at = 0;
	if (nd == 0) {
		/* a plain step's own time: drafting that gave nothing is a cost of guessing, not of it */
		const uint64_t tp = sg_time_ns();
		s = sp->greedy ? eval_greedy(st, tok, next) : eval_tokens(st, &tok, 1, logits);
		if (!s) {
			double t = (double)(sg_time_ns() - tp);
			/* down at once, up slowly: a plain step is slower than it is only by outliers (a
			 * graph recorded on a GPU's first step: 3x a step; the OS), never faster */
			sp->t_plain = sp->t_plain > 0 && t > sp->t_plain ? 0.8 * sp->t_plain + 0.2 * t : t;
		}
		return s;
	}
	memcpy(st->tokens + st->n + 1, sp->draft, (size_t)nd * sizeof(int32_t));
	if (m->mark && (s = m->mark(m->self, st->n))) return s;
	/* the history buffer is where they are appended: evaluate from a copy of them */
	int32_t batch[nd + 1];
	memcpy(batch, st->tokens + st->n, (size_t)(nd + 1) * sizeof(int32_t));
	if (sp->greedy) {
		s = m->eval_rows_greedy(m->self, batch, (size_t)nd + 1, st->n, sp->ids);
		for (int32_t i = 0; !s && i <= nd; i++)
			if (sp->ids[i] < 0 || sp->ids[i] >= m->n_vocab) s = sg_error(SG_ERR_INTERNAL, "verify step gave id %d of %d", sp->ids[i], m->n_vocab);
	} else {
		s = m->eval_rows(m->self, batch, (size_t)nd + 1, st->n, sp->rows);
	}
	if ((s = evaluated(st, s, batch, (size_t)nd + 1))) return s;
	sp->t_step = (double)(sg_time_ns() - t0);
	sp->nd = nd;
	res->n_verify++;
	res->n_drafted += (size_t)nd;
	if (sp->greedy) *next = sp->ids[0];
	else memcpy(logits, sp->rows, V * sizeof(*logits));
	return SG_OK;
}

/* Keeps the first `keep` tokens of the state: truncates when the model can, else restarts. */
static sg_status roll_back(sg_gen_state *st, size_t keep)
{
	if (keep >= st->n) return SG_OK;
	const sg_gen_model *m = st->model;
	if (keep > 0 && m->truncate) {
		sg_status s = m->truncate(m->self, keep);
		if (s == SG_OK) {
			st->n = keep;
			return SG_OK;
		}
		if (s != SG_ERR_UNSUPPORTED) return s;
	}
	return sg_gen_state_reset(st);
}

static int cancelled(const sg_gen_params *p)
{
	return p->cancel && atomic_load_explicit(p->cancel, memory_order_relaxed);
}

static int emit(const sg_gen_params *p, sg_gen_event *ev)
{
	return p->on_event ? p->on_event(ev, p->user) : 0;
}

const char *sg_gen_finish_str(sg_gen_finish f)
{
	switch (f) {
	case SG_GEN_STOP: return "stop";
	case SG_GEN_LENGTH: return "length";
	case SG_GEN_CANCELLED: return "cancelled";
	case SG_GEN_NONE: break;
	}
	return "none";
}

/* The text still held by the detokenizer and the stop matcher, as one final event. */
static int emit_tail(const sg_gen_params *p, const sg_gen_detok *detok, sg_stop *stop, int flush_detok)
{
	sg_stop_result r;
	if (flush_detok) {
		const char *piece = NULL;
		size_t len = 0;
		if (detok->flush(detok->self, &piece, &len) == SG_OK && len) {
			if (sg_stop_text(stop, piece, len, &r) == SG_OK && r.len) {
				sg_gen_event ev = {.text = r.text, .len = r.len};
				if (emit(p, &ev)) return 1;
			}
		}
	}
	if (sg_stop_flush(stop, &r) != SG_OK) return 0;
	sg_gen_event ev = {.text = r.text, .len = r.len, .is_final = 1};
	return emit(p, &ev);
}

sg_status sg_generate(sg_gen_state *st, const sg_gen_detok *detok, const sg_gen_params *p, sg_gen_result *res)
{
	const sg_gen_model *m = st->model;
	memset(res, 0, sizeof *res);
	res->stop_index = -1;
	res->n_prompt = p->n_prompt;
	if (!p->prompt || p->n_prompt == 0) return SG_FAIL(SG_ERR_INVALID_ARG, "the prompt is empty");
	if (p->max_tokens <= 0) return SG_FAIL(SG_ERR_INVALID_ARG, "max_tokens = %d must be > 0", p->max_tokens);
	if (p->n_prompt >= (size_t)m->n_ctx)
		return sg_error(SG_ERR_RANGE, "prompt has %zu tokens, the context holds %d (at least one more is needed to answer)",
				p->n_prompt, m->n_ctx);
	for (size_t i = 0; i < p->n_prompt; i++)
		if (p->prompt[i] < 0 || p->prompt[i] >= m->n_vocab)
			return sg_error(SG_ERR_RANGE, "prompt token %zu is id %d, outside the vocabulary [0, %d)", i,
					p->prompt[i], m->n_vocab);

	/* Timed from here: the TTFT covers setting up the sampler and stop matcher too. */
	uint64_t t0 = sg_time_ns();
	sg_sampler *smp = NULL;
	sg_stop *stop = NULL;
	float *logits = NULL;
	top_step top = {0};
	spec_run spec = {0};
	sg_status s = sg_sampler_create(&p->sampler, m->n_vocab, &smp);
	if (s) goto out;
	if ((s = spec_init(&spec, m, p, smp, sg_sampler_seed(smp)))) goto out;
	if (!spec.on && (s = top_step_init(&top, m, p, smp))) goto out;
	res->seed = sg_sampler_seed(smp);
	sg_stop_params sp = {.eos_ids = p->eos_ids,
			     .n_eos = p->n_eos,
			     .stop_strings = p->stop,
			     .stop_lens = p->stop_lens,
			     .n_stop_strings = p->n_stop,
			     .max_tokens = p->max_tokens};
	if ((s = sg_stop_create(&sp, &stop))) goto out;
	logits = sg_malloc((size_t)m->n_vocab * sizeof *logits);
	if (!logits) {
		s = SG_FAIL(SG_ERR_NOMEM, "logits of %d entries", m->n_vocab);
		goto out;
	}
	detok->reset(detok->self);
	if (p->constraint && p->constraint->reset) p->constraint->reset(p->constraint->self);

	/* Reuse what the state holds; at least the last prompt token is evaluated again, since
	 * its logits are needed to sample the first new token. */
	size_t keep = sg_gen_common_prefix(st, p->prompt, p->n_prompt);
	if (keep == p->n_prompt) keep--;
	if ((s = roll_back(st, keep))) goto out;
	res->n_cached = st->n;
	size_t chunk = p->prefill_chunk ? p->prefill_chunk : 512;
	for (size_t i = st->n; i < p->n_prompt;) {
		if (cancelled(p)) {
			res->finish = SG_GEN_CANCELLED;
			goto out;
		}
		size_t n = p->n_prompt - i < chunk ? p->n_prompt - i : chunk;
		if ((s = eval_tokens(st, p->prompt + i, n, logits))) goto out;
		i += n;
	}
	uint64_t t1 = sg_time_ns();
	res->prefill_s = (double)(t1 - t0) * 1e-9;

	uint64_t t_first = 0;
	/* plain greedy without a constraint: each step's argmax found where the logits are (on a
	 * GPU only the id comes back); the first token still comes from the prompt's logits */
	int fast = !spec.on && m->eval_greedy && !p->constraint && sg_sampler_plain_greedy(smp) && sg_flag_bool("SARAGOSSA_GREEDY_IN_BACKEND");
	int32_t next = -1;
	for (;;) {
		if (cancelled(p)) {
			res->finish = SG_GEN_CANCELLED;
			emit_tail(p, detok, stop, 1);
			break;
		}
		sg_sample_result sr;
		if (next >= 0) {
			memset(&sr, 0, sizeof(sr));
			sr.token = next;
			next = -1;
		} else if (top.have) {
			top.have = 0;
			if ((s = sg_sampler_sample_top(smp, top.tid, top.tv, top.k, top.ids, top.v, top.m, &sr))) goto out;
		} else {
			if (p->constraint && (s = p->constraint->mask(p->constraint->self, logits, m->n_vocab))) goto out;
			if (spec.sampled && spec.at < spec.nd)
				s = sg_sampler_sample_spec(smp, logits, m->n_vocab, spec.draft[spec.at], spec.q + (size_t)spec.at * (size_t)m->n_vocab,
							   &sr);
			else s = sg_sampler_sample(smp, logits, m->n_vocab, &sr);
			if (s) goto out;
		}
		if (p->constraint && (s = p->constraint->accept(p->constraint->self, sr.token))) goto out;
		if (!t_first) t_first = sg_time_ns();
		res->n_generated++;
		(void)sg_sampler_accept(smp, sr.token);
		const char *piece = "";
		size_t plen = 0;
		if (!sg_stop_is_eos(stop, sr.token) && (s = detok->push(detok->self, sr.token, &piece, &plen)))
			goto out;
		sg_stop_result r;
		if ((s = sg_stop_next(stop, sr.token, piece, plen, &r))) goto out;
		sg_gen_event ev = {.text = r.text, .len = r.len, .has_token = 1, .token = sr.token, .sample = &sr};
		int want_stop = emit(p, &ev);
		if (r.finish != SG_FINISH_NONE) {
			res->finish = r.finish == SG_FINISH_LENGTH ? SG_GEN_LENGTH : SG_GEN_STOP;
			res->stop_index = r.stop_index;
			emit_tail(p, detok, stop, r.finish == SG_FINISH_EOS);
			break;
		}
		if (want_stop) {
			res->finish = SG_GEN_CANCELLED;
			emit_tail(p, detok, stop, 1);
			break;
		}
		if (st->n - spec_pending(&spec) + 1 >= (size_t)m->n_ctx) {
			/* The sampled token has no room to be evaluated: the context is full. */
			res->finish = SG_GEN_LENGTH;
			emit_tail(p, detok, stop, 1);
			break;
		}
		if (cancelled(p)) {
			res->finish = SG_GEN_CANCELLED;
			emit_tail(p, detok, stop, 1);
			break;
		}
		if (spec.on) {
			/* guesses become answer tokens only up to max_tokens, and all of them and the
			 * token after them must fit the context (see the check above) */
			int64_t room = (int64_t)p->max_tokens - (int64_t)res->n_generated - 1;
			int64_t ctx_room = (int64_t)m->n_ctx - 2 - (int64_t)(st->n - spec_pending(&spec));
			if (ctx_room < room) room = ctx_room;
			s = spec_step(st, &spec, sr.token, room > 0 ? (int32_t)room : 0, logits, &next, res);
		} else if (fast) s = eval_greedy(st, sr.token, &next);
		else if (top.on) s = eval_top(st, &top, smp, sr.token);
		else s = eval_tokens(st, &sr.token, 1, logits);
		if (s) goto out;
	}
	/* the guesses past the last sampled token are not part of the answer */
	if ((s = spec_drop(st, &spec))) goto out;
	uint64_t t2 = sg_time_ns();
	res->ttft_s = t_first ? (double)(t_first - t0) * 1e-9 : 0;
	res->decode_s = t_first ? (double)(t2 - t_first) * 1e-9 : 0;
out:
	sg_free(logits);
	top_step_free(&top);
	spec_free(&spec);
	sg_stop_free(stop);
	sg_sampler_free(smp);
	return s;
}

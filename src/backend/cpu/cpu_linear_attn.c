/*
 * CPU ops of the hybrid architectures (Qwen3-Next / Qwen3.5 gated delta net) and of Gemma 4:
 * short causal conv, gated delta rule (token-by-token recurrence and its chunked form), gated
 * RMSNorm, sigmoid gate, column gather, split GLU, per-expert weight scale.
 *
 * The delta rule's inner products go through the kernel set (dot_f32, axpy_f32: SIMD or the
 * scalar reference), so the reference backend ("scalar") and the SIMD backends are compared by
 * the differential test. Work is split over value heads (delta rule) or rows; every output
 * element is computed by the same code whatever the thread count.
 */
#include "backend/cpu/cpu_internal.h"

#include <math.h>
#include <string.h>

#include "base/error.h"
#include "base/flags.h"
#include "base/threadpool.h"

/* Prefill chunk of the delta rule: the state is read and written once per chunk instead of
 * once per token, and the chunk's tokens interact through an L x L triangular system. 64 keeps
 * the per-thread scratch (q, k, delta of the chunk) in L2 for head dims up to 256. */
#define GDN_CHUNK 64

static float silu(float x) { return x / (1.0f + expf(-x)); }
static float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }
/* softplus as torch computes it (beta 1, threshold 20: linear past it) */
static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

static sg_status need(const char *op, const char *what, const sg_btensor *t, sg_type type)
{
	if (!t || !t->data) return sg_error(SG_ERR_INVALID_ARG, "cpu %s: %s is missing", op, what);
	if (t->type != type)
		return sg_error(SG_ERR_INVALID_ARG, "cpu %s: %s must be %s, found %s", op, what, sg_type_name_cpu(type),
				sg_type_name_cpu(t->type));
	return SG_OK;
}

static int64_t nelem(const sg_btensor *t) { return t->ne[0] * sg_btensor_rows(t); }

/* --- short conv --- */

typedef struct {
	const float *x, *w;
	float *state, *out;
	int64_t n, C, K;
} conv_job;

static void conv_range(void *ctx, int64_t c0, int64_t c1, int ith)
{
	conv_job *j = ctx;
	int64_t K = j->K, n = j->n, C = j->C;
	float u[64 + GDN_CHUNK]; /* a window of the channel: K-1 past inputs then up to 64 new */
	for (int64_t c = c0; c < c1; c++) {
		const float *w = j->w + c * K;
		for (int64_t t0 = 0; t0 < n; t0 += GDN_CHUNK) {
			int64_t m = n - t0 < GDN_CHUNK ? n - t0 : GDN_CHUNK;
			for (int64_t i = 0; i < K - 1; i++) u[i] = j->state[i * C + c];
			for (int64_t t = 0; t < m; t++) u[K - 1 + t] = j->x[(t0 + t) * C + c];
			for (int64_t t = 0; t < m; t++) {
				float s = 0;
				for (int64_t i = 0; i < K; i++) s += w[i] * u[t + i];
				j->out[(t0 + t) * C + c] = silu(s);
			}
			for (int64_t i = 0; i < K - 1; i++) j->state[i * C + c] = u[m + i];
		}
	}
}

sg_status sg_cpu_short_conv(sg_backend *be, const sg_btensor *x, const sg_btensor *w, sg_btensor *state, sg_btensor *out)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st;
	if ((st = need("short_conv", "x", x, SG_TYPE_F32)) || (st = need("short_conv", "w", w, SG_TYPE_F32)) ||
	    (st = need("short_conv", "state", state, SG_TYPE_F32)) || (st = need("short_conv", "out", out, SG_TYPE_F32)) ||
	    (st = sg_cpu_check_same("short_conv", x, out)))
		return st;
	int64_t C = x->ne[0], n = sg_btensor_rows(x);
	if (nelem(w) % C || nelem(w) / C < 1 || nelem(w) / C > 64)
		return SG_FAIL(SG_ERR_INVALID_ARG, "w has %lld values for %lld channels (want C * K, K <= 64)",
			       (long long)nelem(w), (long long)C);
	int64_t K = nelem(w) / C;
	if (K > 1 && (state->ne[0] != C || sg_btensor_rows(state) != K - 1))
		return SG_FAIL(SG_ERR_INVALID_ARG, "state is [%lld][%lld], expected [%lld][%lld]",
			       (long long)sg_btensor_rows(state), (long long)state->ne[0], (long long)(K - 1), (long long)C);
	if (x->data == out->data) return SG_FAIL(SG_ERR_INVALID_ARG, "out aliases x");
	conv_job j = {x->data, w->data, state->data, out->data, n, C, K};
	sg_parallel_for(cb->pool, C, 16, conv_range, &j);
	return SG_OK;
}

/* --- gated delta rule --- */

typedef struct {
	const sg_cpu_kernels *k;
	const float *qkv, *a, *b, *a_log, *dt_bias;
	float *state, *out;
	int64_t n, C;
	int Hk, Hv, dk, dv;
	float eps;
	int chunked;
	uint8_t *scratch; /* per thread: chunk_bytes */
	size_t chunk_bytes;
} gdn_job;

/* q or k of head hk at token t, L2-normalised, times `mul`. */
static void l2n(const sg_cpu_kernels *k, const float *x, int d, float eps, float mul, float *y)
{
	float inv = mul / sqrtf(k->dot_f32(x, x, d) + eps);
	for (int i = 0; i < d; i++) y[i] = x[i] * inv;
}

static void gdn_step_head(gdn_job *j, int h, float *q, float *kk)
{
	const sg_cpu_kernels *k = j->k;
	int dk = j->dk, dv = j->dv, hk = h / (j->Hv / j->Hk);
	float *S = j->state + (size_t)h * dk * dv, kv[1024];
	float qs = 1.0f / sqrtf((float)dk), eg_l = -expf(j->a_log[h]);
	for (int64_t t = 0; t < j->n; t++) {
		const float *row = j->qkv + t * j->C;
		const float *v = row + 2 * (size_t)j->Hk * dk + (size_t)h * dv;
		l2n(k, row + (size_t)hk * dk, dk, j->eps, qs, q);
		l2n(k, row + (size_t)j->Hk * dk + (size_t)hk * dk, dk, j->eps, 1.0f, kk);
		float g = eg_l * softplus(j->a[t * j->Hv + h] + j->dt_bias[h]);
		float eg = expf(g), beta = sigm(j->b[t * j->Hv + h]);
		/* decay, then what the decayed state predicts for k */
		memset(kv, 0, sizeof(float) * (size_t)dv);
		for (int i = 0; i < dk; i++) {
			float *Si = S + (size_t)i * dv;
			for (int c = 0; c < dv; c++) Si[c] *= eg;
			k->axpy_f32(kv, Si, kk[i], dv);
		}
		for (int c = 0; c < dv; c++) kv[c] = (v[c] - kv[c]) * beta; /* the delta */
		float *o = j->out + (t * j->Hv + h) * (size_t)dv;
		memset(o, 0, sizeof(float) * (size_t)dv);
		for (int i = 0; i < dk; i++) {
			float *Si = S + (size_t)i * dv;
			k->axpy_f32(Si, kv, kk[i], dv);
			k->axpy_f32(o, Si, q[i], dv);
		}
	}
}

/*
 * The chunked form. Inside a chunk with cumulative log decay G_t (G_t - G_s <= 0 for s <= t)
 * and the state S0 at its start, the delta written by token t is
 *   d_t = beta_t (v_t - e^{G_t} S0^T k_t) - beta_t sum_{s<t} e^{G_t - G_s} (k_t . k_s) d_s,
 * a unit lower-triangular system solved by forward substitution; then
 *   o_t = e^{G_t} S0^T q_t + sum_{s<=t} e^{G_t - G_s} (q_t . k_s) d_s,
 *   S_L = e^{G_L} S0 + sum_s e^{G_L - G_s} k_s d_s^T.
 * This is the recurrence with its products regrouped: equal to it up to f32 rounding.
 */
static void gdn_chunk_head(gdn_job *j, int h, uint8_t *mem)
{
	const sg_cpu_kernels *k = j->k;
	int dk = j->dk, dv = j->dv, hk = h / (j->Hv / j->Hk);
	float *S = j->state + (size_t)h * dk * dv;
	/* the cumulative log decay in double: its differences G_t - G_s would otherwise lose
	 * |G| * 2^-24 of absolute precision, which grows along the chunk */
	double *G = (double *)mem;
	float *Q = (float *)(G + GDN_CHUNK), *Kc = Q + GDN_CHUNK * dk, *D = Kc + GDN_CHUNK * dk;
	float *B = D + GDN_CHUNK * dv, *w = B + GDN_CHUNK;
	float qs = 1.0f / sqrtf((float)dk), eg_l = -expf(j->a_log[h]);
	for (int64_t t0 = 0; t0 < j->n; t0 += GDN_CHUNK) {
		int L = (int)(j->n - t0 < GDN_CHUNK ? j->n - t0 : GDN_CHUNK);
		double cum = 0;
		for (int t = 0; t < L; t++) {
			const float *row = j->qkv + (t0 + t) * j->C;
			l2n(k, row + (size_t)hk * dk, dk, j->eps, qs, Q + (size_t)t * dk);
			l2n(k, row + (size_t)j->Hk * dk + (size_t)hk * dk, dk, j->eps, 1.0f, Kc + (size_t)t * dk);
			cum += eg_l * softplus(j->a[(t0 + t) * j->Hv + h] + j->dt_bias[h]);
			G[t] = cum;
			B[t] = sigm(j->b[(t0 + t) * j->Hv + h]);
		}
		for (int t = 0; t < L; t++) {
			const float *v = j->qkv + (t0 + t) * j->C + 2 * (size_t)j->Hk * dk + (size_t)h * dv;
			float *dt = D + (size_t)t * dv, *kt = Kc + (size_t)t * dk, *o = j->out + ((t0 + t) * j->Hv + h) * (size_t)dv;
			float gt = (float)exp(G[t]);
			/* S0^T k_t and S0^T q_t in one pass over the state */
			memset(dt, 0, sizeof(float) * (size_t)dv);
			memset(o, 0, sizeof(float) * (size_t)dv);
			for (int i = 0; i < dk; i++) {
				k->axpy_f32(dt, S + (size_t)i * dv, kt[i], dv);
				k->axpy_f32(o, S + (size_t)i * dv, Q[(size_t)t * dk + i], dv);
			}
			for (int c = 0; c < dv; c++) {
				dt[c] = B[t] * (v[c] - gt * dt[c]);
				o[c] *= gt;
			}
			for (int s = 0; s < t; s++) {
				float e = (float)exp(G[t] - G[s]);
				k->axpy_f32(dt, D + (size_t)s * dv, -B[t] * e * k->dot_f32(kt, Kc + (size_t)s * dk, dk), dv);
			}
			for (int s = 0; s <= t; s++) {
				float e = (float)exp(G[t] - G[s]);
				k->axpy_f32(o, D + (size_t)s * dv, e * k->dot_f32(Q + (size_t)t * dk, Kc + (size_t)s * dk, dk), dv);
			}
		}
		float gl = (float)exp(G[L - 1]);
		for (int s = 0; s < L; s++) w[s] = (float)exp(G[L - 1] - G[s]);
		for (int i = 0; i < dk; i++) {
			float *Si = S + (size_t)i * dv;
			for (int c = 0; c < dv; c++) Si[c] *= gl;
			for (int s = 0; s < L; s++) k->axpy_f32(Si, D + (size_t)s * dv, w[s] * Kc[(size_t)s * dk + i], dv);
		}
	}
}

static void gdn_range(void *ctx, int64_t h0, int64_t h1, int ith)
{
	gdn_job *j = ctx;
	uint8_t *mem = j->scratch + (size_t)ith * j->chunk_bytes;
	for (int64_t h = h0; h < h1; h++) {
		if (j->chunked) gdn_chunk_head(j, (int)h, mem);
		else gdn_step_head(j, (int)h, (float *)mem, (float *)mem + j->dk);
	}
}

sg_status sg_cpu_gated_delta(sg_backend *be, const sg_btensor *qkv, const sg_btensor *a, const sg_btensor *b,
			     const sg_btensor *a_log, const sg_btensor *dt_bias, const sg_gdn_params *p,
			     sg_btensor *state, sg_btensor *out)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st;
	const char *op = "gated_delta";
	if ((st = need(op, "qkv", qkv, SG_TYPE_F32)) || (st = need(op, "a", a, SG_TYPE_F32)) ||
	    (st = need(op, "b", b, SG_TYPE_F32)) || (st = need(op, "a_log", a_log, SG_TYPE_F32)) ||
	    (st = need(op, "dt_bias", dt_bias, SG_TYPE_F32)) || (st = need(op, "state", state, SG_TYPE_F32)) ||
	    (st = need(op, "out", out, SG_TYPE_F32)))
		return st;
	int Hk = p->n_k_head, Hv = p->n_v_head, dk = p->dk, dv = p->dv;
	if (Hk < 1 || Hv < 1 || Hv % Hk || dk < 1 || dv < 1 || dk > 1024 || dv > 1024)
		return SG_FAIL(SG_ERR_INVALID_ARG, "heads %d/%d of dims %d/%d (value heads a multiple of key heads, dims <= 1024)",
			       Hk, Hv, dk, dv);
	int64_t n = sg_btensor_rows(qkv), C = 2 * (int64_t)Hk * dk + (int64_t)Hv * dv;
	if (qkv->ne[0] != C || a->ne[0] != Hv || b->ne[0] != Hv || sg_btensor_rows(a) != n || sg_btensor_rows(b) != n ||
	    nelem(a_log) != Hv || nelem(dt_bias) != Hv || nelem(state) != (int64_t)Hv * dk * dv ||
	    nelem(out) != n * Hv * dv)
		return SG_FAIL(SG_ERR_INVALID_ARG, "shapes: qkv [%lld][%lld] (want width %lld), a/b width %lld/%lld, state %lld, "
			       "out %lld values for %d value heads of %dx%d",
			       (long long)n, (long long)qkv->ne[0], (long long)C, (long long)a->ne[0], (long long)b->ne[0],
			       (long long)nelem(state), (long long)nelem(out), Hv, dk, dv);
	gdn_job j = {cb->k, qkv->data, a->data, b->data, a_log->data, dt_bias->data, state->data, out->data, n, C,
		     Hk, Hv, dk, dv, p->l2_eps, 0, NULL, 0};
	j.chunked = n > 1 && !cb->exact && sg_flag_bool("SARAGOSSA_CPU_GDN_CHUNK");
	size_t per = j.chunked ? sizeof(double) * GDN_CHUNK + sizeof(float) * ((size_t)GDN_CHUNK * (2 * dk + dv + 2)) : sizeof(float) * (size_t)(2 * dk);
	j.chunk_bytes = (per + 63) & ~(size_t)63;
	j.scratch = sg_cpu_scratch(cb, j.chunk_bytes * (size_t)cb->nth);
	if (!j.scratch) return SG_FAIL(SG_ERR_NOMEM, "scratch of %zu bytes", j.chunk_bytes * (size_t)cb->nth);
	sg_parallel_for(cb->pool, Hv, 1, gdn_range, &j);
	return SG_OK;
}

/* --- gated RMSNorm, sigmoid gate --- */

typedef struct {
	const sg_cpu_kernels *k;
	const float *x, *w, *g;
	float *y;
	int64_t D, gw;
	float eps;
} grow_job;

static void gnorm_range(void *ctx, int64_t r0, int64_t r1, int ith)
{
	grow_job *j = ctx;
	for (int64_t r = r0; r < r1; r++) {
		const float *x = j->x + r * j->D, *g = j->g + r * j->D;
		float *y = j->y + r * j->D;
		float sc = 1.0f / sqrtf(j->k->dot_f32(x, x, j->D) / (float)j->D + j->eps);
		for (int64_t i = 0; i < j->D; i++) y[i] = x[i] * sc * j->w[i] * silu(g[i]);
	}
}

sg_status sg_cpu_gated_rmsnorm(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *gate, float eps,
			       sg_btensor *y)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st;
	if ((st = need("gated_rmsnorm", "x", x, SG_TYPE_F32)) || (st = need("gated_rmsnorm", "w", w, SG_TYPE_F32)) ||
	    (st = need("gated_rmsnorm", "gate", gate, SG_TYPE_F32)) || (st = need("gated_rmsnorm", "y", y, SG_TYPE_F32)) ||
	    (st = sg_cpu_check_same("gated_rmsnorm", x, y)) || (st = sg_cpu_check_same("gated_rmsnorm", x, gate)))
		return st;
	if (nelem(w) != x->ne[0]) return SG_FAIL(SG_ERR_INVALID_ARG, "w has %lld values, rows %lld", (long long)nelem(w), (long long)x->ne[0]);
	grow_job j = {cb->k, x->data, w->data, gate->data, y->data, x->ne[0], 0, eps};
	sg_parallel_for(cb->pool, sg_btensor_rows(x), 1, gnorm_range, &j);
	return SG_OK;
}

static void sigmul_range(void *ctx, int64_t r0, int64_t r1, int ith)
{
	grow_job *j = ctx;
	for (int64_t r = r0; r < r1; r++) {
		const float *x = j->x + r * j->D, *g = j->g + r * j->gw;
		float *y = j->y + r * j->D;
		if (j->gw == 1) {
			float s = sigm(g[0]);
			for (int64_t i = 0; i < j->D; i++) y[i] = x[i] * s;
		} else {
			for (int64_t i = 0; i < j->D; i++) y[i] = x[i] * sigm(g[i]);
		}
	}
}

sg_status sg_cpu_sigmoid_mul(sg_backend *be, const sg_btensor *x, const sg_btensor *gate, sg_btensor *out)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st;
	if ((st = need("sigmoid_mul", "x", x, SG_TYPE_F32)) || (st = need("sigmoid_mul", "gate", gate, SG_TYPE_F32)) ||
	    (st = need("sigmoid_mul", "out", out, SG_TYPE_F32)) || (st = sg_cpu_check_same("sigmoid_mul", x, out)))
		return st;
	if ((gate->ne[0] != 1 && gate->ne[0] != x->ne[0]) || sg_btensor_rows(gate) != sg_btensor_rows(x))
		return SG_FAIL(SG_ERR_INVALID_ARG, "gate is [%lld][%lld] for x [%lld][%lld]", (long long)sg_btensor_rows(gate),
			       (long long)gate->ne[0], (long long)sg_btensor_rows(x), (long long)x->ne[0]);
	grow_job j = {cb->k, x->data, NULL, gate->data, out->data, x->ne[0], gate->ne[0], 0};
	sg_parallel_for(cb->pool, sg_btensor_rows(x), 1, sigmul_range, &j);
	return SG_OK;
}

/* --- gather, split GLU, per-expert scale --- */

sg_status sg_cpu_gather_cols(sg_backend *be, const sg_btensor *x, const sg_btensor *idx, sg_btensor *out)
{
	sg_status st;
	if ((st = need("gather_cols", "x", x, SG_TYPE_F32)) || (st = need("gather_cols", "idx", idx, SG_TYPE_I32)) ||
	    (st = need("gather_cols", "out", out, SG_TYPE_F32)))
		return st;
	int64_t n = sg_btensor_rows(x), W = x->ne[0], W2 = nelem(idx);
	if (out->ne[0] != W2 || sg_btensor_rows(out) != n || x->data == out->data)
		return SG_FAIL(SG_ERR_INVALID_ARG, "out is [%lld][%lld], expected [%lld][%lld] apart from x",
			       (long long)sg_btensor_rows(out), (long long)out->ne[0], (long long)n, (long long)W2);
	const int32_t *ix = idx->data;
	for (int64_t j = 0; j < W2; j++)
		if (ix[j] < 0 || ix[j] >= W) return SG_FAIL(SG_ERR_RANGE, "idx[%lld] = %d outside [0, %lld)", (long long)j, ix[j], (long long)W);
	const float *xs = x->data;
	float *o = out->data;
	/* a copy, too small to be worth the threadpool */
	for (int64_t t = 0; t < n; t++)
		for (int64_t j = 0; j < W2; j++) o[t * W2 + j] = xs[t * W + ix[j]];
	return SG_OK;
}

typedef struct {
	const float *x;
	float *y;
	int64_t F;
	sg_act act;
} split_job;

static float gelu_tanh(float x)
{
	const float c = 0.7978845608028654f; /* sqrt(2/pi) */
	return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

static void split_range(void *ctx, int64_t r0, int64_t r1, int ith)
{
	split_job *j = ctx;
	for (int64_t r = r0; r < r1; r++) {
		const float *g = j->x + r * 2 * j->F, *u = g + j->F;
		float *y = j->y + r * j->F;
		for (int64_t i = 0; i < j->F; i++) {
			float a = j->act == SG_ACT_SILU ? silu(g[i])
				  : j->act == SG_ACT_GELU_TANH ? gelu_tanh(g[i])
							       : 0.5f * g[i] * (1.0f + erff(g[i] * 0.70710678118654752f));
			y[i] = a * u[i];
		}
	}
}

sg_status sg_cpu_glu_split(sg_backend *be, const sg_btensor *x, sg_act act, sg_btensor *out)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st;
	if ((st = need("glu_split", "x", x, SG_TYPE_F32)) || (st = need("glu_split", "out", out, SG_TYPE_F32))) return st;
	if (x->ne[0] % 2 || out->ne[0] * 2 != x->ne[0] || sg_btensor_rows(out) != sg_btensor_rows(x))
		return SG_FAIL(SG_ERR_INVALID_ARG, "x [%lld][%lld] -> out [%lld][%lld] (want half the width)",
			       (long long)sg_btensor_rows(x), (long long)x->ne[0], (long long)sg_btensor_rows(out), (long long)out->ne[0]);
	if (act != SG_ACT_SILU && act != SG_ACT_GELU_TANH && act != SG_ACT_GELU)
		return SG_FAIL(SG_ERR_UNSUPPORTED, "activation %d", (int)act);
	if (x->data == out->data && sg_btensor_rows(x) > 1)
		return SG_FAIL(SG_ERR_INVALID_ARG, "out aliases x over several rows");
	split_job j = {x->data, out->data, out->ne[0], act};
	sg_parallel_for(cb->pool, sg_btensor_rows(x), 1, split_range, &j);
	return SG_OK;
}

sg_status sg_cpu_moe_weight_scale(sg_backend *be, sg_btensor *weights, const sg_btensor *ids, const sg_btensor *scale)
{
	sg_status st;
	if ((st = need("moe_weight_scale", "weights", weights, SG_TYPE_F32)) ||
	    (st = need("moe_weight_scale", "ids", ids, SG_TYPE_I32)) ||
	    (st = need("moe_weight_scale", "scale", scale, SG_TYPE_F32)))
		return st;
	if (nelem(ids) != nelem(weights))
		return SG_FAIL(SG_ERR_INVALID_ARG, "%lld ids for %lld weights", (long long)nelem(ids), (long long)nelem(weights));
	const int32_t *id = ids->data;
	const float *s = scale->data;
	float *w = weights->data;
	int64_t E = nelem(scale);
	for (int64_t i = 0; i < nelem(weights); i++) w[i] = id[i] >= 0 && id[i] < E ? w[i] * s[id[i]] : 0.0f;
	return SG_OK;
}

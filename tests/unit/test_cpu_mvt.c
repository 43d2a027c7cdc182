/*
 * The multi-token matvec kernels (sg_cpu_kernels.mvt, SARAGOSSA_CPU_VERIFY_MT) of Q4_K and Q6_K:
 * every token of a call gets the one-token kernel's bits (memcmp), for row lengths of a small
 * model's and a 1.5B model's shapes, odd row counts and 1 to SG_MVT_MAX tokens; a verify matmul
 * (match_decode) of 1 to 9 tokens equals one-token matmuls with the flag on and off; and, when
 * SG_SPEC_REAL_GGUF names a Q4_K_M GGUF, an exact session step of that model equals decode steps.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "base/flags.h"
#include "engine/session.h"
#include "saragossa.h"
#include "session_model.h"

#define TEST_RNG_SEED 0x243f6a8885a308d3ull
#include "test_rng.h"

/* Random rows of a Q4_K (144-byte) or Q6_K (210-byte) matrix with sane f16 scales. */
static uint8_t *rand_rows(sg_kt kt, int64_t N, int64_t K, size_t *row_bytes)
{
	size_t bb = kt == SG_KT_Q4_K ? 144 : 210, rb = bb * (size_t)(K / 256);
	uint8_t *m = malloc(rb * (size_t)N);
	for (size_t i = 0; i < rb * (size_t)N; i++) m[i] = (uint8_t)rnd();
	for (size_t o = 0; o < rb * (size_t)N; o += bb) {
		uint16_t d = sg_cpu_f32_to_f16(0.01f * (1.0f + 0.5f * frand())), dm = sg_cpu_f32_to_f16(0.005f * (1.0f + 0.5f * frand()));
		if (kt == SG_KT_Q4_K) {
			memcpy(m + o, &d, 2);
			memcpy(m + o + 2, &dm, 2);
		} else {
			memcpy(m + o + 208, &d, 2);
		}
	}
	*row_bytes = rb;
	return m;
}

static const char *sets[] = {"avx512", "avx2", "neon"};

Test(cpu_mvt, every_token_gets_the_one_token_kernels_bits)
{
	static const sg_kt kts[2] = {SG_KT_Q4_K, SG_KT_Q6_K};
	static const int64_t Ks[3] = {256, 1536, 8960}, Ns[3] = {1, 7, 37};
	int checked = 0;
	for (int s = 0; s < 3; s++) {
		const char *why = NULL;
		const sg_cpu_kernels *k = sg_cpu_kernels_pick(sets[s], &why);
		if (!k) continue;
		for (int i = 0; i < 2; i++) {
			if (!k->mvt[kts[i]]) continue;
			const sg_kt_info *in = sg_cpu_kt_info(kts[i]);
			cr_assert((k->q8_mask >> kts[i]) & 1, "%s %s: mvt takes 8-bit activations", k->name, in->name);
			for (int a = 0; a < 3; a++)
				for (int b = 0; b < 3; b++) {
					int64_t K = Ks[a], N = Ns[b];
					sg_wview w = {.kt = kts[i], .K = K};
					uint8_t *m = rand_rows(kts[i], N, K, &w.row_bytes);
					w.data = m;
					size_t xb = sg_xq_bytes(K);
					uint8_t *xm = aligned_alloc(64, xb * SG_MVT_MAX);
					float *xf = malloc(sizeof(float) * (size_t)K);
					sg_xq xq[SG_MVT_MAX];
					const void *xs[SG_MVT_MAX];
					float *y1 = malloc(sizeof(float) * (size_t)N), *yt[SG_MVT_MAX];
					for (int t = 0; t < SG_MVT_MAX; t++) {
						/* a spread of magnitudes: some blocks near zero, some large */
						float scale = t % 3 == 0 ? 0.01f : t % 3 == 1 ? 1.0f : 30.0f;
						for (int64_t e = 0; e < K; e++) xf[e] = scale * frand() * (e % 97 == 0 ? 8.0f : 1.0f);
						sg_xq_init(&xq[t], K, xm + xb * (size_t)t);
						k->quantize_x(xf, K, in->xl, in->xoff, &xq[t]);
						xs[t] = &xq[t];
						yt[t] = malloc(sizeof(float) * (size_t)N);
					}
					for (int nt = 1; nt <= SG_MVT_MAX; nt++) {
						/* a sub-range of rows too: r0 > 0 writes y from index 0 */
						int64_t r0 = N > 2 ? 1 : 0;
						k->mvt[kts[i]](&w, r0, N, nt, xs, yt);
						for (int t = 0; t < nt; t++) {
							k->mv[kts[i]](&w, r0, N, xs[t], y1);
							cr_expect(!memcmp(y1, yt[t], sizeof(float) * (size_t)(N - r0)),
								  "%s %s K %lld N %lld: token %d of %d differs from the one-token kernel", k->name,
								  in->name, (long long)K, (long long)N, t, nt);
						}
						checked++;
					}
					for (int t = 0; t < SG_MVT_MAX; t++) free(yt[t]);
					free(y1);
					free(xf);
					free(xm);
					free(m);
				}
		}
	}
	/* on x86 at least the AVX2 set runs here */
#if defined(__x86_64__)
	cr_expect(checked >= 2 * 9 * SG_MVT_MAX, "%d cases", checked);
#endif
}

/* A verify matmul (match_decode) of 1..9 tokens: each token's row is a one-token matmul's, with
 * SARAGOSSA_CPU_VERIFY_MT on (groups of up to SG_MVT_MAX, 9 = 4 + 5) and off, on 1 and 2 threads. */
Test(cpu_mvt, verify_matmul_equals_one_token_matmuls_flag_on_and_off)
{
	static const sg_kt kts[2] = {SG_KT_Q4_K, SG_KT_Q6_K};
	static const sg_type types[2] = {SG_TYPE_Q4_K, SG_TYPE_Q6_K};
	static const int64_t Ks[3] = {256, 1536, 8960};
	int checked = 0;
	for (int on = 0; on < 2; on++) {
		setenv("SARAGOSSA_CPU_VERIFY_MT", on ? "1" : "0", 1);
		sg_flags_reload();
		for (int s = 0; s < 3; s++)
			for (int nth = 1; nth <= 2; nth++) {
				sg_backend *be = NULL;
				sg_cpu_params p = {nth, sets[s]};
				if (sg_cpu_backend_create(&p, &be) != SG_OK) continue;
				cr_assert_eq(((sg_cpu_backend *)be)->verify_mt, on);
				for (int i = 0; i < 2; i++)
					for (int a = 0; a < 3; a++) {
						int64_t K = Ks[a], N = 45;
						size_t rb;
						uint8_t *m = rand_rows(kts[i], N, K, &rb);
						sg_btensor w = {.type = types[i], .ne = {K, N, 1, 1}, .data = m};
						cr_assert_eq(be->ops->tensor_bind(be, &w), SG_OK);
						for (int ntok = 1; ntok <= 9; ntok++) {
							sg_btensor x, y, x1, y1;
							cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_F32, (int64_t[4]){K, ntok, 1, 1}, &x), SG_OK);
							cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_F32, (int64_t[4]){N, ntok, 1, 1}, &y), SG_OK);
							cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_F32, (int64_t[4]){K, 1, 1, 1}, &x1), SG_OK);
							cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_F32, (int64_t[4]){N, 1, 1, 1}, &y1), SG_OK);
							for (int64_t e = 0; e < K * ntok; e++) ((float *)x.data)[e] = frand();
							be->ops->match_decode(be, 1);
							cr_assert_eq(be->ops->matmul(be, &w, &x, NULL, &y), SG_OK);
							be->ops->match_decode(be, 0);
							for (int t = 0; t < ntok; t++) {
								memcpy(x1.data, (float *)x.data + (size_t)t * (size_t)K, sizeof(float) * (size_t)K);
								cr_assert_eq(be->ops->matmul(be, &w, &x1, NULL, &y1), SG_OK);
								cr_expect(!memcmp(y1.data, (float *)y.data + (size_t)t * (size_t)N, sizeof(float) * (size_t)N),
									  "%s %d threads %s K %lld flag %d: token %d of %d differs from decode", sets[s],
									  nth, sg_cpu_kt_info(kts[i])->name, (long long)K, on, t, ntok);
							}
							sg_btensor *all[] = {&x, &y, &x1, &y1};
							for (int j = 0; j < 4; j++) be->ops->tensor_free(be, all[j]);
							checked++;
						}
						be->ops->tensor_free(be, &w);
						free(m);
					}
				sg_backend_free(be);
			}
	}
	unsetenv("SARAGOSSA_CPU_VERIFY_MT");
	sg_flags_reload();
	cr_expect(checked >= 2 * 2 * 2 * 3 * 9, "%d cases", checked);
}

/* A real Q4_K_M model (SG_SPEC_REAL_GGUF): the rows of an exact step of 9 tokens are the logits of
 * 9 decode steps, bit for bit, with the flag on and off. Skipped without the variable. */
Test(cpu_mvt, real_q4_k_m_exact_step_equals_decode_steps, .timeout = 600)
{
	const char *path = getenv("SG_SPEC_REAL_GGUF");
	if (!path) cr_skip_test("SG_SPEC_REAL_GGUF not set (a Q4_K_M GGUF, e.g. Qwen2.5-Coder-1.5B-Instruct)");
	static const int32_t prompt[16] = {151644, 872, 198, 7985, 264, 729, 304, 13027, 429, 4675, 279, 2629, 315, 1378, 5109, 13};
	for (int on = 0; on < 2; on++) {
		setenv("SARAGOSSA_CPU_VERIFY_MT", on ? "1" : "0", 1);
		sg_flags_reload();
		sg_model_params mp = sg_model_default_params();
		mp.n_threads = 2;
		sg_model *m = NULL;
		cr_assert_eq(sg_model_load(path, &mp, &m), SG_OK, "%s", sg_last_error());
		sg_session_params sp = sg_session_default_params();
		sp.n_ctx = 64;
		sg_session *s = NULL;
		cr_assert_eq(sg_session_new(m, &sp, &s), SG_OK, "%s", sg_last_error());
		cr_assert_eq(sg_session_eval(s, prompt, 7, NULL), SG_OK);
		sm_check_verify_rows(s, prompt + 7, 9, on ? "flag on" : "flag off");
		sg_session_free(s);
		sg_model_free(m);
	}
	unsetenv("SARAGOSSA_CPU_VERIFY_MT");
	sg_flags_reload();
}

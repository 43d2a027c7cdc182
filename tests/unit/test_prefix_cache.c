/*
 * The block prefix cache as a data structure (chain hashes, lookups, LRU and the per-session
 * share), block snapshots of a session (restoring a chain of them gives back exactly the state
 * of an uninterrupted run, sliding-window rings included), and the property the server's reuse
 * rests on: the CPU forward's logits do not depend on how a prompt is cut into chunks.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "base/flags.h"
#include "base/sha256.h"
#include "engine/prefix_cache.h"
#include "engine/session.h"
#include "saragossa.h"

#define B 4

static int freed;
static void count_free(void *p)
{
	freed++;
	free(p);
}

static sg_prefix_cache *cache(int capacity, int per_session)
{
	sg_pc_params p = {.block_tokens = B, .capacity = capacity, .per_session = per_session, .free_payload = count_free};
	sg_prefix_cache *pc = NULL;
	cr_assert_eq(sg_pc_new(&p, &pc), SG_OK, "%s", sg_last_error());
	freed = 0;
	return pc;
}

/* Inserts blocks 0..n_blocks-1 of t with payloads tagged by block index. */
static void insert_chain(sg_prefix_cache *pc, const uint8_t root[32], const int32_t *t, size_t n_blocks)
{
	for (size_t i = 0; i < n_blocks; i++) {
		int *pl = malloc(sizeof *pl);
		*pl = (int)i;
		int ok = 0;
		cr_assert_eq(sg_pc_insert(pc, "model", root, t, i, pl, 100, &ok), SG_OK, "%s", sg_last_error());
	}
}

static size_t match_len(sg_prefix_cache *pc, const uint8_t root[32], const int32_t *t, size_t n, long *div)
{
	sg_pc_match m;
	cr_assert_eq(sg_pc_lookup(pc, "model", root, t, n, &m), SG_OK);
	size_t k = m.n_blocks;
	for (size_t i = 0; i < k; i++) cr_assert_eq(*(int *)m.payloads[i], (int)i, "payload %zu out of order", i);
	if (div) *div = m.diverged_at;
	sg_pc_match_free(&m);
	return k;
}

static const int32_t A[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

Test(prefix_cache, chain_hash_is_sha256_of_parent_and_little_endian_ids)
{
	uint8_t root[32] = {0}, h[32], want[32];
	cr_assert_eq(sg_pc_hash(root, A, 2, h), SG_OK);
	uint8_t buf[40] = {0};
	buf[32] = 1, buf[36] = 2;
	cr_assert_eq(sg_sha256(buf, sizeof buf, want), SG_OK);
	cr_assert(!memcmp(h, want, 32));
	uint8_t r1[32], r2[32];
	sg_pc_root(NULL, 0, r1);
	for (int i = 0; i < 32; i++) cr_assert_eq(r1[i], 0, "the root without a key is [0; 32]");
	sg_pc_root("alice", 5, r2);
	cr_assert_eq(sg_sha256("alice", 5, want), SG_OK);
	cr_assert(!memcmp(r2, want, 32), "a session key's root is SHA-256(key)");
}

Test(prefix_cache, lookup_matches_only_whole_chains_and_reports_divergence)
{
	sg_prefix_cache *pc = cache(16, 16);
	uint8_t root[32] = {0};
	insert_chain(pc, root, A, 3);
	long div;
	cr_assert_eq(match_len(pc, root, A, 16, &div), 3);
	cr_assert_eq(div, -1, "the prompt goes on past the cached chain: no divergence");
	cr_assert_eq(match_len(pc, root, A, 11, NULL), 2, "only blocks that end inside the prompt");
	int32_t b[16];
	memcpy(b, A, sizeof b);
	b[6] = 99; /* block 1 differs: blocks 1 and 2 are unreachable even though block 2 is equal */
	cr_assert_eq(match_len(pc, root, b, 16, &div), 1);
	cr_assert_eq(div, 6, "diverged at token 6");
	b[6] = 7;
	b[0] = 42;
	cr_assert_eq(match_len(pc, root, b, 16, &div), 0);
	cr_assert_eq(div, 0);
	sg_pc_free(pc);
	cr_assert_eq(freed, 3);
}

Test(prefix_cache, sessions_and_owners_never_share_blocks)
{
	sg_prefix_cache *pc = cache(16, 16);
	uint8_t ra[32], rb[32];
	sg_pc_root("session-a", 9, ra);
	sg_pc_root("session-b", 9, rb);
	insert_chain(pc, ra, A, 2);
	cr_assert_eq(match_len(pc, ra, A, 16, NULL), 2);
	cr_assert_eq(match_len(pc, rb, A, 16, NULL), 0);
	sg_pc_match m;
	cr_assert_eq(sg_pc_lookup(pc, "another model", ra, A, 16, &m), SG_OK);
	cr_assert_eq(m.n_blocks, 0);
	sg_pc_match_free(&m);
	sg_pc_drop_owner(pc, "model");
	cr_assert_eq(sg_pc_blocks(pc), 0);
	sg_pc_free(pc);
}

Test(prefix_cache, a_full_cache_evicts_the_least_recently_used_chain_first)
{
	sg_prefix_cache *pc = cache(4, 16);
	uint8_t r1[32], r2[32], r3[32];
	sg_pc_root("one", 3, r1);
	sg_pc_root("two", 3, r2);
	sg_pc_root("three", 5, r3);
	insert_chain(pc, r1, A, 2); /* oldest */
	insert_chain(pc, r2, A, 2);
	cr_assert_eq(sg_pc_blocks(pc), 4);
	insert_chain(pc, r3, A, 2); /* evicts chain one, leaf first */
	cr_assert_eq(sg_pc_blocks(pc), 4);
	cr_assert_eq(freed, 2);
	cr_assert_eq(match_len(pc, r1, A, 16, NULL), 0);
	cr_assert_eq(match_len(pc, r3, A, 16, NULL), 2);
	cr_assert_eq(match_len(pc, r2, A, 16, NULL), 2);
	/* two was just used: one more block evicts three's leaf, never an ancestor before it */
	uint8_t r4[32];
	sg_pc_root("four", 4, r4);
	insert_chain(pc, r4, A, 1);
	cr_assert_eq(match_len(pc, r3, A, 16, NULL), 1);
	cr_assert_eq(match_len(pc, r2, A, 16, NULL), 2);
	cr_assert_eq(sg_pc_evict_lru(pc), 100);
	cr_assert_eq(sg_pc_blocks(pc), 3);
	sg_pc_free(pc);
}

Test(prefix_cache, a_session_share_is_capped_by_evicting_its_own_blocks)
{
	sg_prefix_cache *pc = cache(16, 3);
	uint8_t ra[32], rb[32];
	sg_pc_root("a", 1, ra);
	sg_pc_root("b", 1, rb);
	insert_chain(pc, rb, A, 2);
	int32_t other[16];
	for (int i = 0; i < 16; i++) other[i] = 100 + i;
	insert_chain(pc, ra, A, 2);
	insert_chain(pc, ra, other, 2); /* a holds 4 > 3: its least recent (A's leaf) goes */
	cr_assert_eq(sg_pc_session_blocks(pc, ra), 3);
	cr_assert_eq(sg_pc_session_blocks(pc, rb), 2, "another session's blocks are untouched");
	cr_assert_eq(match_len(pc, ra, A, 16, NULL), 1);
	cr_assert_eq(match_len(pc, ra, other, 16, NULL), 2);
	/* a chain longer than the share keeps only what fits and stays reachable */
	insert_chain(pc, ra, A, 4);
	cr_assert_leq(sg_pc_session_blocks(pc, ra), 3);
	size_t k = match_len(pc, ra, A, 16, NULL);
	cr_assert(k >= 1 && k <= 3, "matched %zu", k);
	sg_pc_free(pc);
}

Test(prefix_cache, inserting_an_existing_block_frees_the_new_payload)
{
	sg_prefix_cache *pc = cache(8, 8);
	uint8_t root[32] = {0};
	insert_chain(pc, root, A, 1);
	int ok = 1;
	cr_assert_eq(sg_pc_insert(pc, "model", root, A, 0, malloc(4), 100, &ok), SG_OK);
	cr_assert_eq(ok, 0);
	cr_assert_eq(freed, 1);
	cr_assert(sg_pc_contains(pc, "model", root, A, 0));
	cr_assert(!sg_pc_contains(pc, "model", root, A, 1));
	/* a block whose parent is not cached is not kept (it could never be reached) */
	cr_assert_eq(sg_pc_insert(pc, "model", root, A, 2, malloc(4), 100, &ok), SG_OK);
	cr_assert_eq(ok, 0);
	cr_assert_eq(sg_pc_blocks(pc), 1);
	sg_pc_free(pc);
}

/* ---- on real fixtures ---- */

static const int32_t P[] = {5, 17, 101, 33, 250, 9, 77, 64, 3, 199, 12, 88, 41, 150, 7, 222, 31, 18, 40, 41, 42, 43, 44, 45};
#define NP ((int)(sizeof P / sizeof *P))

static sg_model *load(const char *name)
{
	char path[256];
	snprintf(path, sizeof path, "tests/fixtures/%s", name);
	sg_model_params mp = sg_model_default_params();
	mp.n_threads = 1;
	sg_model *m = NULL;
	cr_assert_eq(sg_model_load(path, &mp, &m), SG_OK, "%s", sg_last_error());
	return m;
}

static sg_session *session(sg_model *m, int n_batch)
{
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = 64;
	sp.n_batch = n_batch;
	sp.kv_type = SG_KV_F32;
	sg_session *s = NULL;
	cr_assert_eq(sg_session_new(m, &sp, &s), SG_OK, "%s", sg_last_error());
	return s;
}

/* Prefills P in blocks of 4 with a block snapshot at each boundary; a fresh session restores the
 * first k blocks and prefills the rest: the last logits are bit-identical to the cold run. */
static void blocks_roundtrip(const char *name, int n_batch)
{
	sg_model *m = load(name);
	sg_session *s = session(m, n_batch);
	int V = sg_model_n_vocab(m), nb = NP / B - 1;
	sg_snapshot *snaps[NP / B];
	for (int b = 0; b < nb; b++) {
		cr_assert_eq(sg_session_eval(s, P + b * B, B, NULL), SG_OK, "%s", sg_last_error());
		cr_assert_eq(sg_session_snapshot_range(s, b * B, &snaps[b]), SG_OK, "%s", sg_last_error());
		cr_assert_gt(sg_snapshot_bytes(snaps[b]), 0);
	}
	cr_assert_eq(sg_session_eval(s, P + nb * B, NP - nb * B, NULL), SG_OK);
	float *cold = malloc(sizeof(float) * (size_t)V);
	memcpy(cold, sg_session_logits(s), sizeof(float) * (size_t)V);
	for (int k = 1; k <= nb; k++) {
		sg_session *t = session(m, n_batch);
		for (int b = 0; b < k; b++) cr_assert_eq(sg_session_restore_range(t, snaps[b]), SG_OK, "%s", sg_last_error());
		cr_assert_eq(sg_session_position(t), k * B);
		cr_assert_null(sg_session_logits(t));
		cr_assert(!memcmp(sg_session_tokens(t), P, sizeof(int32_t) * (size_t)(k * B)));
		/* the same pieces as the cold run: a recurrent state's arithmetic depends on them */
		for (int p = k * B; p < NP; p += B) cr_assert_eq(sg_session_eval(t, P + p, NP - p < B ? NP - p : B, NULL), SG_OK);
		cr_assert(!memcmp(cold, sg_session_logits(t), sizeof(float) * (size_t)V), "%s: restored %d blocks, logits differ",
			  name, k);
		/* out of order: a block must start at the position */
		cr_assert_eq(sg_session_restore_range(t, snaps[0]), SG_ERR_INVALID_ARG);
		sg_session_free(t);
	}
	for (int b = 0; b < nb; b++) sg_snapshot_free(snaps[b]);
	free(cold);
	sg_session_free(s);
	sg_model_free(m);
}

Test(prefix_cache, restoring_block_snapshots_gives_the_cold_logits)
{
	blocks_roundtrip("llama", 16);
}

Test(prefix_cache, restoring_blocks_into_a_wrapped_sliding_window_ring)
{
	/* gemma3_text: window 8, chunks of 2: rings of 10 rows, which 24 tokens wrap twice */
	blocks_roundtrip("gemma3_text", 2);
}

/* Blocks kept in host memory (SARAGOSSA_SNAPSHOT_RESIDENT=0) instead of the backend's: the same
 * restores. (On the CPU backend both are host memory, but they take different copy paths.) */
Test(prefix_cache, blocks_in_host_memory_restore_the_same)
{
	setenv("SARAGOSSA_SNAPSHOT_RESIDENT", "0", 1);
	sg_flags_reload();
	blocks_roundtrip("llama", 16);
	blocks_roundtrip("gemma3_text", 2);
	unsetenv("SARAGOSSA_SNAPSHOT_RESIDENT");
	sg_flags_reload();
}

/* The server reuses the live state of attention-only models from any position, although it was
 * prefilled in other pieces than a cold run would use (the answer's decode steps): that is only
 * exact because their chunking changes no bit. (A gated delta-rule layer's chunked form does
 * change bits: hybrid models reuse blocks only, prefilled in the same pieces.) */
static void chunking_invariance(const char *name)
{
	sg_model *m = load(name);
	int V = sg_model_n_vocab(m);
	static const int sizes[] = {32, 16, 7, 4, 1};
	float *ref = malloc(sizeof(float) * (size_t)V);
	for (int k = 0; k < 5; k++) {
		sg_session *s = session(m, sizes[k]);
		cr_assert_eq(sg_session_eval(s, P, NP, NULL), SG_OK, "%s", sg_last_error());
		if (!k) memcpy(ref, sg_session_logits(s), sizeof(float) * (size_t)V);
		else cr_assert(!memcmp(ref, sg_session_logits(s), sizeof(float) * (size_t)V), "%s: chunks of %d change the logits", name,
			       sizes[k]);
		sg_session_free(s);
	}
	free(ref);
	sg_model_free(m);
}

/* The one-token kernels everywhere (SARAGOSSA_CPU_GEMM=0): the setup the server reuses live state
 * in (sg_session_chunk_invariant). */
Test(prefix_cache, chunking_and_decode_steps_do_not_change_the_logits)
{
	setenv("SARAGOSSA_CPU_GEMM", "0", 1);
	sg_flags_reload();
	chunking_invariance("llama");
	chunking_invariance("qwen3");
	chunking_invariance("gemma3_text");
}

/* With the blocked GEMM on (the default), float weights: the logits of every prompt position
 * evaluated in one chunk (GEMM) equal, bit for bit, those of the prompt evaluated token by token
 * (the one-token kernels, as the answer's decode steps run), on one thread and on several. That is
 * what lets the server continue from the live state of a float model. */
static void one_chunk_equals_token_by_token(const char *name, int threads)
{
	char path[256];
	snprintf(path, sizeof path, "tests/fixtures/%s", name);
	sg_model_params mp = sg_model_default_params();
	mp.n_threads = threads;
	sg_model *m = NULL;
	cr_assert_eq(sg_model_load(path, &mp, &m), SG_OK, "%s", sg_last_error());
	int V = sg_model_n_vocab(m);
	float *all = malloc(sizeof(float) * (size_t)V * NP), *one = malloc(sizeof(float) * (size_t)V * NP);
	sg_session *s = session(m, NP);
	cr_assert(sg_session_chunk_invariant(s), "%s: float weights with the GEMM on", name);
	cr_assert_eq(sg_session_eval(s, P, NP, all), SG_OK, "%s", sg_last_error());
	sg_session_free(s);
	s = session(m, NP);
	for (int t = 0; t < NP; t++) {
		cr_assert_eq(sg_session_eval(s, P + t, 1, NULL), SG_OK, "%s", sg_last_error());
		memcpy(one + (size_t)t * V, sg_session_logits(s), sizeof(float) * (size_t)V);
	}
	for (int t = 0; t < NP; t++)
		cr_assert(!memcmp(all + (size_t)t * V, one + (size_t)t * V, sizeof(float) * (size_t)V),
			  "%s (%d threads): position %d's logits differ between one chunk and token by token", name, threads, t);
	sg_session_free(s);
	free(all);
	free(one);
	sg_model_free(m);
}

Test(prefix_cache, float_weights_one_chunk_equals_token_by_token_with_the_gemm_on)
{
	setenv("SARAGOSSA_CPU_GEMM", "1", 1);
	sg_flags_reload();
	one_chunk_equals_token_by_token("llama", 1);
	one_chunk_equals_token_by_token("qwen3", 1);
	one_chunk_equals_token_by_token("gemma3_text", 1);
	one_chunk_equals_token_by_token("llama", 3);
	chunking_invariance("qwen3");
}

/* With the blocked GEMM on, a model with quantized weights sums a prefill in another order than
 * decode: the session says so, and the server then reuses blocks only; float weights (and the
 * one-token kernels everywhere) are chunk-invariant. */
Test(prefix_cache, only_weight_types_whose_gemm_matches_the_gemv_are_chunk_invariant)
{
	cr_assert(sg_session_gemm_matches_gemv(SG_TYPE_F32) && sg_session_gemm_matches_gemv(SG_TYPE_F16) &&
		  sg_session_gemm_matches_gemv(SG_TYPE_BF16));
	cr_assert_not(sg_session_gemm_matches_gemv(SG_TYPE_Q4_K));
	cr_assert_not(sg_session_gemm_matches_gemv(SG_TYPE_Q8_0));
	cr_assert_not(sg_session_gemm_matches_gemv(SG_TYPE_MLX_AFFINE));
	setenv("SARAGOSSA_CPU_GEMM", "1", 1);
	sg_flags_reload();
	sg_model *m = load("llama_mlx_q4_g32");
	sg_session *s = session(m, 32);
	cr_assert_not(sg_session_chunk_invariant(s));
	sg_session_free(s);
	sg_model_free(m);
	m = load("llama");
	s = session(m, 32);
	cr_assert(sg_session_chunk_invariant(s));
	sg_session_free(s);
	sg_model_free(m);
	m = load("qwen3_5_moe_text"); /* recurrent state: never */
	s = session(m, 32);
	cr_assert_not(sg_session_chunk_invariant(s));
	sg_session_free(s);
	sg_model_free(m);
	setenv("SARAGOSSA_CPU_GEMM", "0", 1);
	sg_flags_reload();
	m = load("llama_mlx_q4_g32");
	s = session(m, 32);
	cr_assert(sg_session_chunk_invariant(s), "the one-token kernels for every chunk");
	sg_session_free(s);
	sg_model_free(m);
}

Test(prefix_cache, restoring_blocks_of_a_hybrid_model_restores_its_recurrent_state)
{
	/* qwen3_5_moe_text: gated delta-rule layers (conv + recurrent state) beside attention */
	blocks_roundtrip("qwen3_5_moe_text", 16);
}


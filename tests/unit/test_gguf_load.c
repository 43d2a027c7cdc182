/* A GGUF model file is mapped and parsed once per load: the weights, the vocabulary and the chat
 * template all read the one parse the model keeps (sg_model_gguf). The file here is a whole tiny
 * Llama written by hand: one layer, width 8, a byte-level vocabulary and a chat template. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/mmap.h"
#include "base/utf8.h"
#include "engine/lm.h"
#include "formats/gguf.h"
#include "text/template/chat_template.h"
#include "text/tokenizer/tokenizer.h"

/* ---- a growable GGUF writer ---- */

typedef struct gbuf {
	uint8_t *d;
	size_t n, cap;
} gbuf;

static void put(gbuf *b, const void *p, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2;
		b->d = realloc(b->d, b->cap);
		cr_assert_not_null(b->d);
	}
	memcpy(b->d + b->n, p, n);
	b->n += n;
}
static void u32(gbuf *b, uint32_t v) { put(b, &v, 4); }
static void u64(gbuf *b, uint64_t v) { put(b, &v, 8); }
static void str(gbuf *b, const char *s)
{
	u64(b, strlen(s));
	put(b, s, strlen(s));
}
static void kv_u32(gbuf *b, const char *k, uint32_t v)
{
	str(b, k);
	u32(b, SG_GGUF_U32);
	u32(b, v);
}
static void kv_str(gbuf *b, const char *k, const char *v)
{
	str(b, k);
	u32(b, SG_GGUF_STRING);
	str(b, v);
}

#define DIM 8
#define FFN 16
#define N_VOCAB 258 /* 256 bytes, "ab", <|endoftext|> */
#define EOS 257

typedef struct wtensor {
	const char *name;
	int n_dims;
	uint64_t ne[2];
} wtensor;

static const wtensor TENSORS[] = {
	{"token_embd.weight", 2, {DIM, N_VOCAB}},   {"output_norm.weight", 1, {DIM}},
	{"blk.0.attn_norm.weight", 1, {DIM}},       {"blk.0.attn_q.weight", 2, {DIM, DIM}},
	{"blk.0.attn_k.weight", 2, {DIM, DIM}},     {"blk.0.attn_v.weight", 2, {DIM, DIM}},
	{"blk.0.attn_output.weight", 2, {DIM, DIM}}, {"blk.0.ffn_norm.weight", 1, {DIM}},
	{"blk.0.ffn_gate.weight", 2, {DIM, FFN}},   {"blk.0.ffn_up.weight", 2, {DIM, FFN}},
	{"blk.0.ffn_down.weight", 2, {FFN, DIM}},
};
#define N_TENSORS (sizeof(TENSORS) / sizeof(TENSORS[0]))

static uint64_t n_elems(const wtensor *t) { return t->n_dims == 1 ? t->ne[0] : t->ne[0] * t->ne[1]; }

/* GPT-2's byte alphabet: printable Latin-1 stays, the other bytes move to U+0100.. in order. */
static void byte_token(int b, char *out)
{
	int next = 256;
	for (int x = 0; x < b; x++)
		if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) next++;
	int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
	int k = sg_utf8_encode(printable ? (uint32_t)b : (uint32_t)next, (uint8_t *)out);
	out[k] = 0;
}

static gbuf tiny_llama(void)
{
	gbuf b = {0};
	put(&b, "GGUF", 4);
	u32(&b, 3);
	u64(&b, N_TENSORS);
	u64(&b, 14);
	kv_str(&b, "general.architecture", "llama");
	kv_u32(&b, "llama.block_count", 1);
	kv_u32(&b, "llama.embedding_length", DIM);
	kv_u32(&b, "llama.feed_forward_length", FFN);
	kv_u32(&b, "llama.context_length", 64);
	kv_u32(&b, "llama.attention.head_count", 2);
	kv_u32(&b, "llama.attention.head_count_kv", 2);
	kv_str(&b, "tokenizer.ggml.model", "gpt2");
	kv_str(&b, "tokenizer.ggml.pre", "qwen2");
	str(&b, "tokenizer.ggml.tokens");
	u32(&b, SG_GGUF_ARRAY);
	u32(&b, SG_GGUF_STRING);
	u64(&b, N_VOCAB);
	for (int i = 0; i < 256; i++) {
		char s[8];
		byte_token(i, s);
		str(&b, s);
	}
	str(&b, "ab");
	str(&b, "<|endoftext|>");
	str(&b, "tokenizer.ggml.token_type");
	u32(&b, SG_GGUF_ARRAY);
	u32(&b, SG_GGUF_I32);
	u64(&b, N_VOCAB);
	for (int i = 0; i < N_VOCAB; i++) u32(&b, i == EOS ? 3 : 1);
	str(&b, "tokenizer.ggml.merges");
	u32(&b, SG_GGUF_ARRAY);
	u32(&b, SG_GGUF_STRING);
	u64(&b, 1);
	str(&b, "a b");
	kv_u32(&b, "tokenizer.ggml.eos_token_id", EOS);
	kv_str(&b, "tokenizer.chat_template",
	       "{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}");
	uint64_t off = 0;
	for (size_t i = 0; i < N_TENSORS; i++) {
		str(&b, TENSORS[i].name);
		u32(&b, (uint32_t)TENSORS[i].n_dims);
		for (int d = 0; d < TENSORS[i].n_dims; d++) u64(&b, TENSORS[i].ne[d]);
		u32(&b, SG_TYPE_F32);
		u64(&b, off);
		off += (n_elems(&TENSORS[i]) * 4 + 31) / 32 * 32;
	}
	while (b.n % 32) put(&b, "", 1);
	uint32_t seed = 12345;
	for (size_t i = 0; i < N_TENSORS; i++) {
		int norm = TENSORS[i].n_dims == 1;
		for (uint64_t k = 0; k < n_elems(&TENSORS[i]); k++) {
			seed = seed * 1664525u + 1013904223u;
			float v = norm ? 1.0f : ((float)(seed >> 8) / (float)(1u << 24) - 0.5f) * 0.5f;
			put(&b, &v, 4);
		}
		while (b.n % 32) put(&b, "", 1);
	}
	return b;
}

static char tmpdir[256];

static void write_model(const char *dir_name, char *path, size_t cap)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/sg_gguf_XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
	gbuf b = tiny_llama();
	snprintf(path, cap, "%s/%s", tmpdir, dir_name);
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(b.d, 1, b.n, f), b.n);
	fclose(f);
	free(b.d);
}

static void remove_model(void)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	cr_expect_eq(system(cmd), 0);
}

Test(gguf, lm_load_maps_and_parses_the_file_once)
{
	char path[512];
	write_model("tiny.gguf", path, sizeof(path));
	sg_lm_params lp = sg_lm_default_params();
	lp.backend = "cpu";
	lp.n_threads = 1;
	lp.no_memory_check = 1;
	uint64_t parses = sg_gguf_parse_count(), maps = sg_mmap_open_count();
	sg_lm *lm = NULL;
	cr_assert_eq(sg_lm_load(path, &lp, &lm), SG_OK, "%s", sg_last_error());
	cr_expect_eq(sg_gguf_parse_count() - parses, 1, "weights, vocabulary and template share one parse");
	cr_expect_eq(sg_mmap_open_count() - maps, 1, "the file is mapped once");

	/* the vocabulary and the template really came from that file */
	int32_t *ids = NULL;
	size_t n = 0;
	cr_assert_eq(sg_lm_tokenize(lm, "ab a", 4, 0, &ids, &n), SG_OK, "%s", sg_last_error());
	cr_assert_eq(n, 3);
	cr_expect(ids[0] == 256 && ids[1] == ' ' && ids[2] == 'a');
	sg_free(ids);
	json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "hi");
	char *prompt = NULL;
	size_t pn = 0;
	cr_assert_eq(sg_lm_chat_prompt(lm, msgs, NULL, &prompt, &pn), SG_OK, "%s", sg_last_error());
	cr_expect_str_eq(prompt, "<user>hi<|endoftext|>");
	sg_free(prompt);
	json_decref(msgs);
	sg_lm_free(lm);
	remove_model();
}

Test(gguf, readers_reuse_a_parse_of_the_same_file_only_and_keep_none_of_it)
{
	char path[512];
	write_model("m.gguf", path, sizeof(path));
	sg_mapped_file f;
	cr_assert_eq(sg_mmap_open(path, &f), SG_OK, "%s", sg_last_error());
	sg_gguf g;
	cr_assert_eq(sg_gguf_parse(f.data, f.size, path, 0, &g), SG_OK, "%s", sg_last_error());
	cr_assert_str_eq(g.path, path);

	/* the file itself, and a folder whose one .gguf it is: read from g, no new parse */
	uint64_t parses = sg_gguf_parse_count();
	sg_tokenizer *tok = NULL;
	sg_chat_template *ct = NULL, *ct_dir = NULL;
	cr_assert_eq(sg_tokenizer_load_with(path, &g, &tok), SG_OK, "%s", sg_last_error());
	cr_expect_eq(sg_tokenizer_n_vocab(tok), N_VOCAB);
	cr_assert_eq(sg_chat_template_load_with(path, &g, &ct), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_chat_template_load_with(tmpdir, &g, &ct_dir), SG_OK, "%s", sg_last_error());
	cr_expect_eq(sg_gguf_parse_count(), parses);

	/* another file (or none given) is parsed as before */
	char other[600];
	snprintf(other, sizeof(other), "%s/copy.gguf", tmpdir);
	cr_assert_eq(link(path, other), 0);
	sg_tokenizer *tok2 = NULL;
	sg_chat_template *ct2 = NULL;
	cr_assert_eq(sg_tokenizer_load_with(other, &g, &tok2), SG_OK, "%s", sg_last_error());
	sg_tokenizer_free(tok2);
	cr_assert_eq(sg_chat_template_load(path, &ct2), SG_OK, "%s", sg_last_error());
	sg_chat_template_free(ct2);
	cr_expect_eq(sg_gguf_parse_count(), parses + 2);

	/* what the readers made keeps nothing of the parse or the map: both gone, they still work
	 * (under ASan a pointer left into either would be caught here) */
	sg_gguf_free(&g);
	sg_mmap_close(&f);
	sg_tokens ids = {0};
	cr_assert_eq(sg_tokenizer_encode(tok, "ab<|endoftext|>", 15, 0, &ids), SG_OK, "%s", sg_last_error());
	cr_expect(ids.n == 2 && ids.ids[0] == 256 && ids.ids[1] == EOS);
	char *text = NULL;
	size_t tn = 0;
	cr_assert_eq(sg_tokenizer_decode(tok, ids.ids, ids.n, 0, &text, &tn), SG_OK, "%s", sg_last_error());
	cr_expect_str_eq(text, "ab<|endoftext|>");
	sg_free(text);
	sg_tokens_free(&ids);
	json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "hi");
	sg_chat_template *both[] = {ct, ct_dir};
	for (int i = 0; i < 2; i++) {
		sg_chat_params p = {.messages = msgs, .add_generation_prompt = 0};
		char *out = NULL;
		cr_assert_eq(sg_chat_template_render(both[i], &p, &out, NULL), SG_OK, "%s", sg_last_error());
		cr_expect_str_eq(out, "<user>hi<|endoftext|>");
		sg_free(out);
		sg_chat_template_free(both[i]);
	}
	json_decref(msgs);
	sg_tokenizer_free(tok);
	remove_model();
}

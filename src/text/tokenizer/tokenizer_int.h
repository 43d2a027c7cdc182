/* Internals shared by the tokenizer's files (not a public interface). */
#ifndef SG_TEXT_TOKENIZER_INT_H
#define SG_TEXT_TOKENIZER_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Largest token id accepted from a file: far above real vocabularies (262k), low enough that a
 * hostile id cannot ask for gigabytes. */
#define SG_TOK_MAX_ID (1 << 24)

typedef struct sg_str {
	const char *s;
	uint32_t n;
} sg_str;

/* A growable byte buffer. */
typedef struct sg_buf {
	char *p;
	size_t n, cap;
} sg_buf;
int sg_buf_reserve(sg_buf *b, size_t extra);
int sg_buf_put(sg_buf *b, const void *s, size_t n);
int sg_buf_putc(sg_buf *b, char c);
int sg_buf_put_cp(sg_buf *b, uint32_t cp);

/* String -> id over an external key table (keys[id]); duplicate keys: the last id wins, as a
 * Python dict built from the same list would. */
typedef struct sg_strmap {
	int32_t *slot; /* [mask+1], -1 empty */
	size_t mask;
	const sg_str *keys;
} sg_strmap;
sg_status sg_strmap_build(sg_strmap *m, const sg_str *keys, int32_t n);
int32_t sg_strmap_get(const sg_strmap *m, const char *s, size_t n);
void sg_strmap_free(sg_strmap *m);
uint64_t sg_str_hash(const char *s, size_t n);

/* Unicode classes as Rust's char methods define them (the reference is written in Rust). */
int sg_uc_is_whitespace(uint32_t cp);
int sg_uc_is_alnum(uint32_t cp);
int sg_uc_is_cjk(uint32_t cp);
int sg_uc_is_mark(uint32_t cp); /* M* category (StripAccents) */
/* BERT classes as the reference's tables have them (tokenizer_unicode.c, generated): removed
 * by clean_text, mapped to a space by it, punctuation, non-spacing marks. */
int sg_bert_is_removed(uint32_t cp);
int sg_bert_is_space(uint32_t cp);
int sg_bert_is_punct(uint32_t cp);
int sg_bert_is_mark(uint32_t cp);
/* Decodes one code point from valid UTF-8 at s (the caller validated the text). */
int sg_uc_next(const char *s, size_t n, uint32_t *cp);

/* A pattern of tokenizer.json, {"String": "x"} or {"Regex": "x"} (regex.c): its text and
 * whether it is a regex. */
sg_status sg_tok_pattern(const json_t *p, const char **s, size_t *n, int *is_regex);

/* ---- SentencePiece's precompiled normalisation map (charsmap.c) ---- */
typedef struct sg_charsmap {
	uint32_t *unit; /* the double-array trie */
	size_t n_unit;
	char *norm;     /* replacement strings, each ended by a NUL (valid UTF-8) */
	size_t n_norm;
} sg_charsmap;
/* From the base64 text of tokenizer.json's precompiled_charsmap / from the decoded blob. */
sg_status sg_charsmap_parse(const char *b64, size_t n, sg_charsmap *out);
sg_status sg_charsmap_parse_blob(const uint8_t *blob, size_t n, sg_charsmap *out);
void sg_charsmap_free(sg_charsmap *m);
/* Appends the normalisation of valid UTF-8 s[0..n) to out. */
sg_status sg_charsmap_apply(const sg_charsmap *m, const char *s, size_t n, sg_buf *out);

/* ---- normalizers ---- */
typedef struct norm_step norm_step;
typedef struct sg_normalizer {
	norm_step *steps;
	int n;
} sg_normalizer;
sg_status sg_norm_parse(const json_t *j, sg_normalizer *out);
void sg_norm_free(sg_normalizer *nz);
/* Normalizes s[0..n) into out (reset first). */
sg_status sg_norm_apply(const sg_normalizer *nz, const char *s, size_t n, sg_buf *out);

/* ---- regexes (PCRE2, JIT) with the reference's (Oniguruma's) meaning of \s ---- */
typedef struct sg_regex {
	pcre2_code *code;
	int jit;
} sg_regex;
sg_status sg_regex_compile(sg_regex *re, const char *pattern, size_t len);
void sg_regex_free(sg_regex *re);
/* Next match at or after `start` in s[0..n): 1 and [*ms, *me), 0 when none, -1 on error. */
int sg_regex_next(const sg_regex *re, const char *s, size_t n, size_t start, size_t *ms, size_t *me);

/* ---- pre-tokenizers ---- */
typedef struct pre_step pre_step;
typedef struct sg_pretok {
	pre_step *steps;
	int n;
	int byte_level; /* the chain ends with ByteLevel: words are raw bytes for a byte-level model */
} sg_pretok;
/* A piece of text being split: [off, off+len) in a buffer; start: it begins the input. */
typedef struct sg_piece {
	size_t off, len;
	int start;
} sg_piece;
typedef struct sg_pieces {
	sg_piece *v;
	size_t n, cap;
} sg_pieces;
sg_status sg_pretok_parse(const json_t *j, sg_pretok *out);
void sg_pretok_free(sg_pretok *p);
/* Splits text s[0..n) into words; appends pieces (offsets into *buf, which may grow). */
sg_status sg_pretok_apply(const sg_pretok *p, const char *s, size_t n, int at_start, sg_buf *buf,
			  sg_pieces *out);
int sg_pieces_push(sg_pieces *p, size_t off, size_t len, int start);

/* ---- models ---- */
enum { MODEL_BPE = 1, MODEL_WORDPIECE = 2, MODEL_UNIGRAM = 3 };

typedef struct merge_ent {
	uint64_t key; /* left << 32 | right, UINT64_MAX empty */
	int32_t rank, id;
} merge_ent;

typedef struct sg_model_bpe {
	merge_ent *merges; /* open addressing, [mask+1] */
	size_t mask;
	int32_t byte_id[256]; /* byte-level: id of each byte; byte fallback: id of <0xXX> */
	int byte_fallback, fuse_unk, ignore_merges;
	int cache; /* SARAGOSSA_TOKENIZER_CACHE, read at load */
	int32_t unk_id;
} sg_model_bpe;

typedef struct sg_model_wp {
	int32_t unk_id;
	char prefix[32];
	size_t prefix_len;
	int max_chars;
} sg_model_wp;

typedef struct sg_model_uni {
	double *score;      /* [model pieces] */
	double unk_score;   /* min(score) - 10 */
	int32_t unk_id;     /* -1: none */
	int byte_fallback;
	int32_t byte_id[256]; /* id of <0xXX>, -1 if absent */
	uint32_t max_len;   /* longest piece in bytes */
} sg_model_uni;

/* ---- added tokens ---- */
typedef struct added_tok {
	int32_t id;
	sg_str content; /* as written */
	sg_str norm;    /* after the normalizer (normalized tokens) */
	uint8_t special, lstrip, rstrip, single_word, normalized;
} added_tok;

struct sg_trie; /* added-token matcher (tokenizer.c) */

/* ---- post-processing ---- */
typedef struct sg_post {
	int32_t *pre, *post; /* ids before / after the sequence */
	int n_pre, n_post;
} sg_post;

/* ---- decoders ---- */
typedef struct dec_step dec_step;
typedef struct sg_decoder {
	dec_step *steps;
	int n;
} sg_decoder;
sg_status sg_dec_parse(const json_t *j, sg_decoder *out);
void sg_dec_free(sg_decoder *d);

struct sg_tokenizer {
	uint64_t uid; /* distinguishes tokenizers in per-thread caches */
	int model;
	int32_t n_vocab;  /* ids in [0, n_vocab) */
	sg_str *tok;      /* [n_vocab] spelling for decode: added content, else model vocab */
	uint8_t *special; /* [n_vocab] 1 for special added tokens */
	sg_str *mtok;     /* [n_vocab] model vocab in the model's working form (raw bytes when byte-level) */
	sg_strmap mmap;   /* over mtok */
	sg_strmap tmap;   /* over tok, when it differs from mtok (byte-level) */
	sg_strmap amap;   /* added token content -> index in added */
	sg_str *akeys;
	sg_model_bpe bpe;
	sg_model_wp wp;
	sg_model_uni uni;
	sg_normalizer norm;
	sg_pretok pre;
	sg_post post;
	sg_decoder dec;
	added_tok *added;
	int n_added;
	struct sg_trie *trie_raw, *trie_norm;
	int32_t bos_id, eos_id;
	char **blobs; /* owned string storage */
	int n_blobs;
};

/* Allocates a blob of n bytes owned by the tokenizer. */
char *sg_tok_blob(sg_tokenizer *t, size_t n);

/* Model encode of one word (a pre-token), appending ids. */
sg_status sg_bpe_word(const sg_tokenizer *t, const char *w, size_t n, sg_tokens *out);
sg_status sg_wp_word(const sg_tokenizer *t, const char *w, size_t n, sg_tokens *out);
sg_status sg_unigram_word(const sg_tokenizer *t, const char *w, size_t n, sg_tokens *out);
sg_status sg_bpe_add_merge(sg_tokenizer *t, int32_t a, int32_t b, int32_t id, int32_t rank);
sg_status sg_bpe_alloc_merges(sg_tokenizer *t, size_t n);

/* Byte-level alphabet (GPT-2): byte -> code point, and code point -> byte (-1 if not in it). */
uint32_t sg_bytelevel_cp(uint8_t b);
int sg_bytelevel_byte(uint32_t cp);

/* Decodes the token strings through the decoder chain into out (reset first). */
sg_status sg_dec_apply(const sg_decoder *d, const sg_str *toks, size_t n, sg_buf *out);
/* Appends s as UTF-8 with invalid sequences replaced by U+FFFD (Rust's from_utf8_lossy). */
int sg_buf_put_lossy(sg_buf *b, const char *s, size_t n);

/* The builder shared by tokenizer.json and GGUF arrays. */
typedef struct tok_spec {
	int model;
	const sg_str *vocab; /* [n_vocab] model vocabulary by id (NULL entries: holes) */
	int32_t n_vocab;
	const sg_str *merges; /* [2*n_merges] left, right */
	int32_t n_merges;
	const char *unk; /* model unk token, or NULL */
	const double *scores; /* Unigram: [n_vocab] piece scores */
	int32_t unk_id;       /* Unigram: unk piece id, -1 none */
	int byte_fallback, fuse_unk, ignore_merges;
	const char *wp_prefix;
	int wp_max_chars;
	const json_t *normalizer, *pre_tokenizer, *post_processor, *decoder;
	added_tok *added; /* content strings borrowed */
	int n_added;
	int add_bos, add_eos; /* from tokenizer_config / GGUF, -1 absent */
	const char *bos, *eos;
} tok_spec;
sg_status sg_tok_build(const tok_spec *s, sg_tokenizer **out);
/* The Unigram model of t from s (unigram.c), after the vocabulary; freed with the tokenizer. */
sg_status sg_unigram_init(sg_tokenizer *t, const tok_spec *s);
void sg_unigram_free(sg_model_uni *m);
sg_status sg_tok_json_spec(const json_t *root, const json_t *config, sg_tokenizer **out);

/* The vocabulary of the GGUF file at `path` (vocab_gguf.c): read from `parsed` when that is this
 * file (parsed->path equals path), else mapped and parsed here. parsed may be NULL. */
sg_status sg_tokenizer_load_gguf(const char *path, const sg_gguf *parsed, sg_tokenizer **out);

#endif

/* Text tokenizer: Hugging Face tokenizer.json (BPE, WordPiece; normalizers, pre-tokenizers,
 * post-processors, decoders, added tokens) and GGUF-embedded vocabularies, with the same ids as
 * the reference `tokenizers` library. A loaded tokenizer is immutable: every call below may run
 * on several threads at once (scratch and caches are per thread). */
#ifndef SG_TEXT_TOKENIZER_H
#define SG_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "formats/gguf.h"
#include "saragossa.h"

typedef struct sg_tokenizer sg_tokenizer;

/* A growable id list; zero-initialise, free with sg_tokens_free. */
typedef struct sg_tokens {
	int32_t *ids;
	size_t n, cap;
} sg_tokens;
void sg_tokens_free(sg_tokens *t);
/* Appends one id; 0, or -1 when out of memory. */
int sg_tokens_push(sg_tokens *t, int32_t id);

/* A vocabulary given as arrays, as GGUF stores it (tokenizer.ggml.*). Strings are borrowed for
 * the duration of the call. `model`: "gpt2" (byte-level BPE), "llama" (SentencePiece BPE with
 * byte fallback), "bert" (WordPiece). `arch` is general.architecture (Gemma respells its
 * whitespace tokens); `pre` is tokenizer.ggml.pre. merges: "a b" strings, or NULL to derive them
 * from the vocabulary. scores and types may be NULL. Ids < 0 mean absent. */
typedef struct sg_vocab_desc {
	const char *model, *arch, *pre;
	int32_t n_tokens;
	const char *const *tokens;
	const uint32_t *token_lens; /* byte lengths ([n_tokens]); NULL: NUL-terminated */
	const float *scores;        /* [n_tokens] or NULL */
	const int32_t *types;       /* [n_tokens] or NULL: 1 normal, 2 unknown, 3 control, 4 user, 6 byte */
	int32_t n_merges;
	const char *const *merges; /* [n_merges] "left right" */
	const uint32_t *merge_lens;
	int32_t bos_id, eos_id, unk_id, pad_id;
	int add_bos, add_eos; /* tokenizer.ggml.add_bos_token / add_eos_token (-1: absent) */
	/* gpt2 without merges: derive them from the scores as for llama (tiktoken's rule: a token's
	 * score is minus its rank, every split of it into two tokens merges at that rank) */
	int derive_merges;
	/* gpt2: the tokens are their raw bytes (whisper.cpp's files), spelled in the byte-level
	 * alphabet here whatever they look like; control tokens (types 3) are names, kept as given */
	int raw_bytes;
} sg_vocab_desc;

/* Loads from a folder holding tokenizer.json (and tokenizer_config.json when present), a
 * tokenizer.json file, or a .gguf file. *out is owned by the caller (sg_tokenizer_free). */
sg_status sg_tokenizer_load(const char *path, sg_tokenizer **out);
/* As sg_tokenizer_load, except that a GGUF file it would read which `parsed` was parsed from
 * (parsed->path equals that file's path) is read from `parsed`, not mapped and parsed again: a
 * model load passes its weights' GGUF (sg_model_gguf) so the file is parsed once. parsed may be
 * NULL; it is only read during the call (the tokenizer copies what it keeps). */
sg_status sg_tokenizer_load_with(const char *path, const sg_gguf *parsed, sg_tokenizer **out);
/* From the tokenizer.ggml.* metadata of a parsed GGUF file (borrowed for the call only). */
sg_status sg_tokenizer_from_gguf(const sg_gguf *g, sg_tokenizer **out);
/* From the text of a tokenizer.json and, optionally (NULL), of tokenizer_config.json. */
sg_status sg_tokenizer_from_json(const char *json, size_t len, const char *config, size_t config_len,
				 sg_tokenizer **out);
/* From vocabulary arrays (the GGUF route); the result matches the tokenizer that transformers
 * builds from the same GGUF metadata. */
sg_status sg_tokenizer_from_vocab(const sg_vocab_desc *d, sg_tokenizer **out);
void sg_tokenizer_free(sg_tokenizer *t);

/* Appends the ids of text[0..len) (valid UTF-8, else SG_ERR_INVALID_ARG naming the byte) to
 * out. add_special: add what the reference adds (BOS, [CLS]/[SEP], ...) around the text. */
sg_status sg_tokenizer_encode(const sg_tokenizer *t, const char *text, size_t len, int add_special,
			      sg_tokens *out);
/* Decodes ids into a NUL-terminated heap string (*out, caller frees with sg_free) of *out_len
 * bytes, as the reference's decode does; ids outside the vocabulary are skipped like the
 * reference. skip_special drops special added tokens. */
sg_status sg_tokenizer_decode(const sg_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
			      char **out, size_t *out_len);

int32_t sg_tokenizer_n_vocab(const sg_tokenizer *t);
/* The token's string as the vocabulary spells it (not NUL-terminated), NULL if id is unknown. */
const char *sg_tokenizer_token(const sg_tokenizer *t, int32_t id, size_t *len);
/* The raw bytes token id stands for in a byte-level BPE vocabulary (not NUL-terminated; part of
 * a UTF-8 character for some tokens, which decode turns into U+FFFD), NULL for other vocabularies,
 * added tokens and unknown ids. */
const char *sg_tokenizer_token_bytes(const sg_tokenizer *t, int32_t id, size_t *len);
/* Id of a token spelled exactly s, -1 if none (added tokens first, then the model's vocabulary). */
int32_t sg_tokenizer_token_id(const sg_tokenizer *t, const char *s, size_t len);
int sg_tokenizer_is_special(const sg_tokenizer *t, int32_t id);
int32_t sg_tokenizer_bos(const sg_tokenizer *t);
int32_t sg_tokenizer_eos(const sg_tokenizer *t);

/* Streaming detokenizer: push ids one at a time, receive text pieces that are complete UTF-8;
 * the concatenation of all pieces plus the final flush equals sg_tokenizer_decode of all ids.
 * One stream per generation; it borrows the tokenizer. */
typedef struct sg_detok sg_detok;
sg_status sg_detok_create(const sg_tokenizer *t, int skip_special, sg_detok **out);
/* *piece (may be empty) stays valid until the next call on this stream. */
sg_status sg_detok_push(sg_detok *d, int32_t id, const char **piece, size_t *len);
sg_status sg_detok_flush(sg_detok *d, const char **piece, size_t *len);
void sg_detok_free(sg_detok *d);

#endif

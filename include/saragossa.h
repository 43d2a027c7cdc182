/*
 * saragossa: a local inference engine (LLMs, speech-to-text, text-to-speech, embeddings).
 *
 * This is the one public header. Handles are opaque; every call that can fail returns an
 * sg_status, and sg_last_error() gives a message that names the function and the offending
 * values for the calling thread's last failure.
 *
 * Usage: load a model with its tokenizer and chat template, render one user message, and stream
 * the greedy reply (examples/chat.c is this program with a token limit and more messages; `make`
 * builds it and `make test` runs it).
 *
 *     #include <saragossa.h>
 *     #include <stdio.h>
 *
 *     static int print_piece(int32_t token, const char *text, size_t len, void *user) {
 *             fwrite(text, 1, len, stdout);
 *             return 0; // non-zero stops the answer
 *     }
 *
 *     int main(int argc, char **argv) {
 *             sg_llm_params lp = sg_llm_default_params();
 *             sg_llm *llm;
 *             if (argc < 3 || sg_llm_load(argv[1], &lp, &llm)) {
 *                     fprintf(stderr, "%s\n", argc < 3 ? "usage: demo MODEL MESSAGE" : sg_last_error());
 *                     return 1;
 *             }
 *             sg_message msg = {.role = "user", .content = argv[2]};
 *             char *prompt = NULL;
 *             int32_t *ids = NULL;
 *             size_t len, n;
 *             sg_llm_gen_params gp = sg_llm_gen_default_params();
 *             gp.sampler.temperature = 0; // greedy
 *             gp.on_token = print_piece;
 *             sg_llm_gen_result res;
 *             int rc = sg_llm_chat_prompt(llm, &msg, 1, 1, &prompt, &len) ||
 *                      sg_llm_tokenize(llm, prompt, len, 0, &ids, &n) ||
 *                      sg_llm_generate(llm, ids, n, &gp, &res);
 *             if (rc) fprintf(stderr, "%s\n", sg_last_error());
 *             else printf("\n");
 *             sg_free(ids);
 *             sg_free(prompt);
 *             sg_llm_free(llm);
 *             return rc;
 *     }
 *
 * Lower down the same calls run without the chat layer: sg_session_eval on token ids gives logits,
 * sg_sampler_sample picks a token from them.
 *
 * Only the functions declared here are exported from libsaragossa.so (`make test` checks it).
 */
#ifndef SARAGOSSA_H
#define SARAGOSSA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SG_VERSION_MAJOR 0
#define SG_VERSION_MINOR 1
#define SG_VERSION_PATCH 0

typedef enum sg_status {
	SG_OK = 0,
	SG_ERR_INVALID_ARG, /* a caller passed a value out of its domain */
	SG_ERR_IO,          /* open/read/write/mmap failed */
	SG_ERR_FORMAT,      /* a file or request is malformed */
	SG_ERR_UNSUPPORTED, /* well-formed, but not something this build can do */
	SG_ERR_NOMEM,       /* an allocation failed or would exceed a memory limit */
	SG_ERR_RANGE,       /* a value is valid but too large (context, token id, ...) */
	SG_ERR_CANCELLED,   /* stopped on request */
	SG_ERR_BACKEND,     /* a compute backend (e.g. CUDA) reported an error */
	SG_ERR_NOT_FOUND,   /* a named thing (file, tensor, model) does not exist */
	SG_ERR_INTERNAL,    /* a bug: an invariant did not hold */
} sg_status;

typedef struct sg_model sg_model;     /* immutable weights + description, shared read-only */
typedef struct sg_session sg_session; /* per-conversation state: KV cache, recurrent state, position */

/* "0.1.0" plus build flags are reported by `saragossa --version`. Static storage. */
const char *sg_version(void);

/* A short constant name for a status ("invalid argument", "i/o error", ...). */
const char *sg_status_str(sg_status st);

/* The calling thread's last error message ("" if none). Valid until the next failing call on this
 * thread. */
const char *sg_last_error(void);

/* Frees memory the library handed to the caller (token arrays, rendered prompts, text). NULL is
 * a no-op. */
void sg_free(void *p);

/* ---- models ---- */

typedef struct sg_model_params {
	const char *backend; /* "cpu", "cuda" or "auto" (the GPU when one is usable and takes the model, else the
	                      * CPU); NULL = the SARAGOSSA_BACKEND flag (default auto) */
	int n_threads;       /* CPU threads, caller included; 0 = SARAGOSSA_THREADS, else one per core */
} sg_model_params;

sg_model_params sg_model_default_params(void);

/* Loads a model from `path`: a Hugging Face folder (config.json + safetensors, MLX-quantized or
 * not) or a GGUF file. Weights are memory-mapped and used in place. An architecture this build
 * cannot run is SG_ERR_UNSUPPORTED ("unsupported architecture ..."). On success the caller owns
 * *out (sg_model_free), which must outlive its sessions. */
sg_status sg_model_load(const char *path, const sg_model_params *params, sg_model **out);
void sg_model_free(sg_model *model);

int sg_model_n_vocab(const sg_model *model);
/* The context length the model was trained for (max_position_embeddings / context_length). */
int sg_model_n_ctx_train(const sg_model *model);
/* The architecture as its files name it ("llama", "gemma3_text", "gemma3"). */
const char *sg_model_arch(const sg_model *model);

/* ---- sessions ---- */

/* SG_KV_AUTO: f16 when the model runs on a GPU, else f32 */
typedef enum sg_kv_type { SG_KV_F32 = 0, SG_KV_F16, SG_KV_AUTO } sg_kv_type;

typedef struct sg_session_params {
	int n_ctx;          /* tokens of context; 0 = the model's, capped at 4096 */
	int n_batch;        /* prompt tokens per forward chunk; 0 = SARAGOSSA_CHUNK */
	sg_kv_type kv_type; /* KV cache element type; the default params take SARAGOSSA_KV_TYPE */
} sg_session_params;

typedef struct sg_snapshot sg_snapshot; /* a session's state at a token boundary */

sg_session_params sg_session_default_params(void);

/* A conversation on `model`: KV cache, position, token history. Caller owns *out. */
sg_status sg_session_new(sg_model *model, const sg_session_params *params, sg_session **out);
void sg_session_free(sg_session *s);

/* Appends n tokens at the current position and runs them (prefill in chunks of n_batch; a single
 * token takes the decode path). logits_out, when not NULL, receives the logits of every one of
 * the n tokens ([n][n_vocab] floats, row-major). A token id outside [0, n_vocab), n < 1 or a
 * position past n_ctx is an error that leaves the session unchanged. */
sg_status sg_session_eval(sg_session *s, const int32_t *tokens, int n, float *logits_out);

/* The logits of the last token evaluated ([n_vocab]); valid until the next eval. NULL before
 * the first eval. */
const float *sg_session_logits(const sg_session *s);

int sg_session_n_ctx(const sg_session *s);
int sg_session_n_vocab(const sg_session *s);
/* Tokens evaluated so far (the position of the next token). */
int sg_session_position(const sg_session *s);
/* The tokens evaluated so far ([position]), owned by the session. */
const int32_t *sg_session_tokens(const sg_session *s);
/* Forgets every token: position 0. */
void sg_session_reset(sg_session *s);
/* Rolls the session back to its first `keep` tokens, so the next eval continues at `keep`.
 * SG_ERR_UNSUPPORTED (the session unchanged) when the state cannot go back: a linear-attention
 * (recurrent) state, or a sliding-window ring that no longer holds the window before `keep`. */
sg_status sg_session_truncate(sg_session *s, int keep);

/* Copies the state (KV cache, position, tokens) into *out (caller frees with sg_snapshot_free,
 * before the model: with SARAGOSSA_SNAPSHOT_RESIDENT, the default, the copies live in the model's
 * backend, device memory on a GPU). */
sg_status sg_session_snapshot(const sg_session *s, sg_snapshot **out);
/* Puts a session back at a snapshot taken from a session of the same model and context size. */
sg_status sg_session_restore(sg_session *s, const sg_snapshot *snap);
void sg_snapshot_free(sg_snapshot *snap);
/* Position of the token boundary a snapshot holds. */
int sg_snapshot_position(const sg_snapshot *snap);

/* Block snapshots, what a prefix cache keeps at each block boundary: the state the session has
 * at its position `to` that is not already held by the state at `from`. For attention layers
 * that is the KV rows of positions [from, to); for layers that carry a recurrent or convolution
 * state (hybrid architectures), a full copy of that state at `to`. Restoring the blocks of one
 * chain in order, from position 0, rebuilds exactly the state the session had at the last
 * block's end.
 *
 * sg_session_snapshot_range: from < position; the rows of [from, position) must still be in the
 * cache (a sliding-window ring keeps only its last rows: else SG_ERR_RANGE). Caller frees *out
 * with sg_snapshot_free. The snapshot holds no logits: a restored session is evaluated on. */
sg_status sg_session_snapshot_range(const sg_session *s, int from, sg_snapshot **out);
/* Appends a block snapshot: the session's position must be the snapshot's `from` (blocks go
 * back in chain order). Writes the rows and state and the tokens; the position becomes the
 * snapshot's end; sg_session_logits is NULL until the next eval. */
sg_status sg_session_restore_range(sg_session *s, const sg_snapshot *snap);
/* Host or device bytes a snapshot holds (for memory accounting). */
size_t sg_snapshot_bytes(const sg_snapshot *snap);
/* 1 when this session's snapshots are kept in GPU memory (SARAGOSSA_SNAPSHOT_RESIDENT on a GPU
 * backend), 0 when in host memory. */
int sg_session_snapshots_on_device(const sg_session *s);
/* Bytes a block snapshot of n tokens takes on this session (an estimate made before taking it,
 * for the memory guard). */
size_t sg_session_block_bytes(const sg_session *s, int n);

/* ---- sampler: logits -> token ---- */

/* The pipeline, in this order (docs/sampling.md has the full story): NaN logits are banned;
 * logit_bias is added; repetition, frequency and presence penalties apply over the penalty
 * window; log-probabilities are taken here; then temperature (0 = greedy: the largest logit,
 * lowest id on ties, no random draw), top-k, top-p, min-p, and one draw from a seeded generator.
 * The token depends only on the seed, the logits and the accepted tokens: the same on every
 * machine, compiler and thread count. A sampler is used by one thread at a time. */

#define SG_SAMPLER_MAX_LOGPROBS 20         /* top alternatives, as the OpenAI API allows */
#define SG_SAMPLER_SEED_RANDOM  UINT64_MAX /* seed from the OS entropy source at creation */
#define SG_SAMPLER_BAN_BIAS     (-100.0f)  /* a logit_bias at or below this bans the token */

typedef struct sg_sampler sg_sampler;

typedef struct sg_logit_bias {
	int32_t token;
	float bias; /* added to the logit; <= SG_SAMPLER_BAN_BIAS or -inf bans the token */
} sg_logit_bias;

typedef enum sg_logprobs_mode {
	SG_LOGPROBS_PROCESSED = 0, /* after logit_bias and penalties, before temperature/filters */
	SG_LOGPROBS_RAW,           /* the model's logits as given (NaN as -inf) */
} sg_logprobs_mode;

typedef struct sg_sampler_params {
	float temperature;               /* >= 0; 0 = greedy. default 0.8 */
	int32_t top_k;                   /* >= 0; 0 = off. default 40 */
	float top_p;                     /* (0, 1]; 1 = off. default 0.95 */
	float min_p;                     /* [0, 1]; 0 = off. default 0.05 */
	float repetition_penalty;        /* > 0; 1 = off. default 1 */
	float presence_penalty;          /* finite (OpenAI range -2..2); 0 = off */
	float frequency_penalty;         /* finite (OpenAI range -2..2); 0 = off */
	int32_t penalty_last_n;          /* window of accepted tokens the penalties see: N > 0 the last N,
	                                    -1 all since creation/reset, 0 none. default 64 */
	const sg_logit_bias *logit_bias; /* [n_logit_bias], copied at creation; ids distinct */
	size_t n_logit_bias;
	uint64_t seed;        /* default SG_SAMPLER_SEED_RANDOM; sg_sampler_seed() tells it */
	int logprobs;         /* 1: fill sg_sample_result.logprob and top[]. default 0 */
	int32_t top_logprobs; /* 0..SG_SAMPLER_MAX_LOGPROBS alternatives when logprobs. default 0 */
	sg_logprobs_mode logprobs_mode;
} sg_sampler_params;

typedef struct sg_token_logprob {
	int32_t token;
	float logprob;
} sg_token_logprob;

typedef struct sg_sample_result {
	int32_t token;
	float logprob; /* of token, when params.logprobs (else 0) */
	int32_t n_top; /* entries in top[]: min(top_logprobs, tokens not banned) */
	sg_token_logprob top[SG_SAMPLER_MAX_LOGPROBS]; /* highest first, ties by lowest id */
} sg_sample_result;

/* The defaults above (llama.cpp's), by value. */
sg_sampler_params sg_sampler_default_params(void);

/* Validates p and creates a sampler for logits of n_vocab entries. Every out-of-domain value
 * is refused with SG_ERR_INVALID_ARG and a message naming the parameter and the value
 * ("top_p = 1.5 is outside (0, 1]"); a logit_bias token outside [0, n_vocab) with SG_ERR_RANGE.
 * On success *out owns its copies of the bias list; free with sg_sampler_free. */
sg_status sg_sampler_create(const sg_sampler_params *p, int32_t n_vocab, sg_sampler **out);
void sg_sampler_free(sg_sampler *s);

/* The seed actually in use (the drawn one when params.seed was SG_SAMPLER_SEED_RANDOM). */
uint64_t sg_sampler_seed(const sg_sampler *s);
int32_t sg_sampler_n_vocab(const sg_sampler *s);

/* Samples one token from logits[n_vocab] (n_vocab must be the sampler's). The token is NOT
 * added to the penalty history: call sg_sampler_accept with it (and with prompt tokens, if the
 * penalties should see them). Greedy sampling never touches the random generator; every other
 * call consumes exactly one draw. SG_ERR_INVALID_ARG when every token is banned (all logits -inf
 * or NaN after bias and penalties); the generator is untouched then. */
sg_status sg_sampler_sample(sg_sampler *s, const float *logits, int32_t n_vocab, sg_sample_result *out);

/* Appends token to the penalty history. SG_ERR_RANGE for an id outside [0, n_vocab). */
sg_status sg_sampler_accept(sg_sampler *s, int32_t token);

/* Clears the penalty history and restarts the generator from the seed: the next calls repeat
 * the sequence of a fresh sampler. */
void sg_sampler_reset(sg_sampler *s);

/* ---- text generation: a model with its tokenizer, chat template and one conversation ---- */

/* sg_llm is a loaded model ready to chat: the weights (an sg_model), the tokenizer, the chat
 * template, the end-of-turn ids and one conversation state. It wraps the engine's own binding
 * and generation loop, those the CLI's run/generate verbs use, so a library caller gets the
 * same tokens; the engine's binding stays internal so that the public ABI does not move with
 * it. It is a handle of its own rather than a tokenizer and a template hung on sg_model because
 * the state it carries (the conversation, reused across turns) is per user, while an sg_model
 * stays immutable and shareable. Named for the kind of model, as the handles of the engines to
 * come (speech-to-text, text-to-speech, embeddings) will be.
 *
 * One sg_llm is used by one thread at a time; load one per concurrent conversation, or share
 * an sg_model through sessions (sg_session_new) and run the sampler yourself. */
typedef struct sg_llm sg_llm;

typedef struct sg_llm_params {
	const char *backend; /* as sg_model_params.backend: "cpu", "cuda", "auto"; NULL = SARAGOSSA_BACKEND */
	int n_threads;       /* CPU threads, caller included; 0 = SARAGOSSA_THREADS, else one per core */
	int n_ctx;           /* tokens of context; 0 = the model's, capped at 4096 */
	/* MoE models: the routed experts read from disk through a slot cache: "off" (all resident),
	 * "auto" (the memory planner's choice when the model does not fit), a size ("6g") or a share
	 * of the experts ("25%"); NULL = SARAGOSSA_EXPERT_CACHE (default off). Output is the same
	 * bit for bit; a cached model runs on the CPU. */
	const char *expert_cache;
} sg_llm_params;

sg_llm_params sg_llm_default_params(void);

/* Loads the model at `path` (a Hugging Face folder or a GGUF file, as sg_model_load) with its
 * tokenizer (tokenizer.json, or the GGUF's vocabulary) and chat template (tokenizer_config.json,
 * chat_template.jinja, or the GGUF's; Gemma models without one get Gemma's turn format; others
 * may have none: raw completion still works). Refuses (SG_ERR_NOMEM) weights larger than the
 * memory available (SARAGOSSA_MEM_LIMIT overrides). Caller owns *out (sg_llm_free). */
sg_status sg_llm_load(const char *path, const sg_llm_params *params, sg_llm **out);
void sg_llm_free(sg_llm *llm);

/* The weights, owned by llm (valid until sg_llm_free): for the sg_model_* queries, or for
 * sessions of one's own beside llm's conversation. */
sg_model *sg_llm_model(const sg_llm *llm);
/* Tokens the conversation state holds at most. */
int sg_llm_n_ctx(const sg_llm *llm);
int sg_llm_n_vocab(const sg_llm *llm);
/* The ids that end an answer: the tokenizer's end of sequence, the chat template's end-of-turn
 * tokens and generation_config.json's eos_token_id ([*n], owned by llm). */
const int32_t *sg_llm_eos(const sg_llm *llm, size_t *n);

/* Text (len bytes of UTF-8) -> token ids. add_special: 1 adds what the tokenizer's config says
 * (a beginning-of-sequence token...), for raw text; a rendered chat prompt already spells its
 * special tokens, so it is encoded with 0. *ids: caller frees with sg_free. */
sg_status sg_llm_tokenize(const sg_llm *llm, const char *text, size_t len, int add_special, int32_t **ids, size_t *n);
/* Token ids -> text (*text NUL-terminated, *len bytes; caller frees with sg_free). An id outside
 * [0, n_vocab) is SG_ERR_RANGE naming it. */
sg_status sg_llm_detokenize(const sg_llm *llm, const int32_t *ids, size_t n, char **text, size_t *len);
/* One token's own bytes, which may be part of a UTF-8 character (caller frees with sg_free).
 * SG_ERR_RANGE for an id outside [0, n_vocab). */
sg_status sg_llm_token_text(const sg_llm *llm, int32_t id, char **text, size_t *len);

/* One message of a conversation (role "system", "user", "assistant", or what the template
 * knows). */
typedef struct sg_message {
	const char *role;
	const char *content;
} sg_message;

/* 1 when the model has a chat template (its own or Gemma's fallback). */
int sg_llm_has_chat_template(const sg_llm *llm);
/* Renders messages[0..n) with the chat template; add_generation_prompt 1 ends with the opening
 * of the assistant's turn. *prompt (NUL-terminated, *len bytes, caller frees with sg_free) is
 * meant for sg_llm_tokenize with add_special 0. SG_ERR_INVALID_ARG for no messages or a NULL
 * role or content; SG_ERR_NOT_FOUND when the model has no chat template; a template that fails
 * to render (its raise_exception included) returns that error and its message. */
sg_status sg_llm_chat_prompt(const sg_llm *llm, const sg_message *messages, size_t n, int add_generation_prompt,
			     char **prompt, size_t *len);

/* Streaming: called once per sampled token with its id and the text that became complete with
 * it (UTF-8; empty while a token holds part of a character or text that may begin a stop
 * string, and then covering the earlier tokens too; an end-of-turn token adds none), then with
 * token -1 for the text still held back at the end: the last call of an answer that did not
 * fail has token -1, possibly with len 0. The pieces, in order, are the whole answer. text is
 * valid during the call only. Return 0 to go on, non-zero to stop after this token (the answer
 * ends SG_LLM_FINISH_CANCELLED; the tail calls still come, their return ignored). */
typedef int (*sg_token_fn)(int32_t token, const char *text, size_t len, void *user);

typedef enum sg_llm_finish {
	SG_LLM_FINISH_NONE = 0,
	SG_LLM_FINISH_STOP,      /* an end-of-turn id or a stop string */
	SG_LLM_FINISH_LENGTH,    /* max_tokens, or the context is full */
	SG_LLM_FINISH_CANCELLED, /* the callback asked to stop */
} sg_llm_finish;

typedef struct sg_llm_gen_params {
	sg_sampler_params sampler; /* sg_sampler_default_params(); temperature 0 is greedy */
	int max_tokens;            /* > 0, default 256; the context also bounds it */
	const char *const *stop;   /* [n_stop] strings that end the answer (not included); may be NULL */
	size_t n_stop;
	sg_token_fn on_token;      /* may be NULL */
	void *user;                /* passed to on_token */
} sg_llm_gen_params;

typedef struct sg_llm_gen_result {
	sg_llm_finish finish;
	int stop_index;     /* which stop string ended the answer, else -1 */
	size_t n_prompt;    /* prompt tokens */
	size_t n_cached;    /* of them, reused from the conversation state (not evaluated again) */
	size_t n_generated; /* tokens sampled (an end-of-turn id counts) */
	double prefill_s;   /* start to the end of the prompt's evaluation, seconds */
	double ttft_s;      /* start to the first sampled token */
	double decode_s;    /* first sampled token to the end */
	uint64_t seed;      /* the sampler's seed (pass it back for the same answer) */
} sg_llm_gen_result;

/* Sampler defaults, max_tokens 256, no stop strings, no callback. */
sg_llm_gen_params sg_llm_gen_default_params(void);

/* Generates an answer to prompt[0..n_prompt) (token ids), streaming it through on_token, until
 * an end-of-turn id, a stop string, max_tokens or the end of the context. The prompt is the whole
 * conversation so far: the tokens llm's state already holds from the previous call (that prompt
 * and its answer) are reused and only the new ones are evaluated, so a multi-turn chat re-renders
 * the conversation each turn at the cost of its new tokens. Errors: SG_ERR_INVALID_ARG (NULL
 * llm, prompt or params, n_prompt 0, a sampler parameter out of its domain), SG_ERR_RANGE (a
 * prompt id outside the vocabulary, a prompt longer than the context), or the model's own
 * failure. A stop from the callback is not an error. *result, when not NULL, is filled. */
sg_status sg_llm_generate(sg_llm *llm, const int32_t *prompt, size_t n_prompt, const sg_llm_gen_params *params,
			  sg_llm_gen_result *result);

/* Forgets the conversation: the next sg_llm_generate evaluates its whole prompt. */
sg_status sg_llm_reset(sg_llm *llm);

/* "stop", "length", "cancelled" or "none". */
const char *sg_llm_finish_str(sg_llm_finish f);

/* ---- speech-to-text ----
 *
 * sg_stt is a loaded Whisper model with its tokenizer, ready to transcribe: a Hugging Face
 * folder (model_type whisper), a CTranslate2 folder as faster-whisper ships it (model.bin,
 * config.json, tokenizer.json) or a whisper.cpp ggml .bin. Decoding follows the reference
 * (openai-whisper, faster-whisper): 30 s windows with seek from the last timestamp, timestamp
 * rules, temperature fallback on compression ratio and average log-probability, no-speech
 * detection, previous-text conditioning, greedy or beam search.
 *
 *     sg_stt *stt;
 *     sg_transcript *tr;
 *     sg_stt_params sp = sg_stt_default_params();
 *     sg_transcribe_params tp = sg_transcribe_default_params();
 *     if (!sg_stt_load("tiny.en", &sp, &stt) && !sg_transcribe_file(stt, "talk.wav", &tp, &tr)) {
 *             for (int i = 0; i < tr->n_segments; i++)
 *                     printf("[%.2f -> %.2f]%s\n", tr->segments[i].start, tr->segments[i].end, tr->segments[i].text);
 *             sg_transcript_free(tr);
 *     }
 *
 * One sg_stt transcribes one stream at a time (it holds the window being decoded). */
typedef struct sg_stt sg_stt;

typedef struct sg_stt_params {
	const char *backend; /* "cpu", "cuda", "auto"; NULL = the SARAGOSSA_BACKEND flag */
	int n_threads;       /* CPU threads; 0 = the default */
	int max_beam;        /* the widest beam search to be asked for (1..16; 0 = 5): the model keeps
	                      * 2 * max_beam decoder caches */
	const char *vocab;   /* the vocabulary when the model's files carry none (MLX folders): a
	                      * .tiktoken rank file (openai-whisper's gpt2.tiktoken for English-only
	                      * models, multilingual.tiktoken otherwise) or a tokenizer.json; NULL =
	                      * none. The model's own tokenizer files come first. */
} sg_stt_params;

sg_stt_params sg_stt_default_params(void);

/* Loads the model at path and its tokenizer: tokenizer.json beside it, else gpt2.tiktoken /
 * multilingual.tiktoken beside it, else the vocabulary the whisper.cpp file embeds, else
 * params->vocab. Caller owns *out (sg_stt_free). A file that is not a Whisper model, a model
 * without any vocabulary (SG_ERR_NOT_FOUND, naming what to pass), or a tokenizer that is not
 * Whisper's, is an error naming what is missing. */
sg_status sg_stt_load(const char *path, const sg_stt_params *params, sg_stt **out);
void sg_stt_free(sg_stt *stt);
/* 1 when the model knows several languages (then language detection and translation work). */
int sg_stt_multilingual(const sg_stt *stt);

/* One word of a segment (word_timestamps): its text with the leading space, its time span in
 * seconds and the probability of its tokens. */
typedef struct sg_stt_word {
	char *word;
	double start, end;
	float probability;
} sg_stt_word;

/* One segment of a transcript, as the reference reports it. */
typedef struct sg_stt_segment {
	int id;                  /* 0, 1, ... in the transcript */
	int seek;                /* the window's start, in 10 ms mel frames */
	double start, end;       /* seconds from the start of the audio */
	char *text;              /* UTF-8, with the leading space the model wrote */
	int32_t *tokens;         /* [n_tokens]: text and timestamp ids */
	int n_tokens;
	float temperature;       /* of the decode that was kept */
	float avg_logprob;       /* sum of the sampled tokens' log-probabilities / (tokens + 1) */
	float compression_ratio; /* of the window's text (zlib) */
	float no_speech_prob;    /* probability of <|nospeech|> after <|startoftranscript|> */
	sg_stt_word *words;      /* [n_words] with word_timestamps, else NULL */
	int n_words;
} sg_stt_segment;

/* Called with each segment as soon as its window is decoded; non-zero stops the transcription
 * (it then ends SG_ERR_CANCELLED, with the segments so far in the transcript). */
typedef int (*sg_segment_fn)(const sg_stt_segment *seg, void *user);
/* Called after each window with the seconds decoded so far and the audio's duration. */
typedef void (*sg_stt_progress_fn)(double done_s, double total_s, void *user);

typedef struct sg_transcribe_params {
	const char *language;       /* "en", "de", ...; NULL: detected (multilingual models), else "en" */
	int translate;              /* 1: translate to English (multilingual models) */
	int timestamps;             /* 1 (default): segment timestamps; 0: <|notimestamps|> */
	int word_timestamps;        /* 1: words with times (cross-attention alignment) */
	int beam_size;              /* 1: greedy; default 5 (the reference's); at most 16 */
	float patience;             /* beam search: finished candidates = beam_size * patience; default 1 */
	const float *temperatures;  /* [n_temperatures] tried in order; NULL: 0, 0.2, ... 1.0 */
	int n_temperatures;
	int best_of;                /* samples per temperature > 0; default 5 */
	float compression_ratio_threshold; /* above: retry hotter; default 2.4; <= 0 none */
	float logprob_threshold;    /* avg_logprob below: retry hotter; default -1; >= 0 none */
	float no_speech_threshold;  /* no_speech_prob above (and avg_logprob below the threshold):
	                             * the window is silence; default 0.6; <= 0 none */
	int condition_on_previous_text; /* default 1: earlier text prompts the next window */
	float prompt_reset_on_temperature; /* default 0.5: a hotter decode drops that prompt */
	const char *initial_prompt; /* text before the first window (NULL: none) */
	int suppress_blank;         /* default 1 */
	const int32_t *suppress_tokens; /* [n_suppress_tokens]; NULL: the model's non-speech set (-1) */
	int n_suppress_tokens;
	float max_initial_timestamp; /* seconds; default 1 */
	uint64_t seed;              /* sampling at temperature > 0 */
	sg_segment_fn on_segment;   /* may be NULL */
	sg_stt_progress_fn on_progress; /* may be NULL */
	void *user;
} sg_transcribe_params;

sg_transcribe_params sg_transcribe_default_params(void);

typedef struct sg_transcript {
	sg_stt_segment *segments; /* [n_segments] */
	int n_segments;
	char *text;               /* the segments' text joined */
	char language[8];         /* the language used ("en", or the detected one) */
	float language_prob;      /* its probability when detected, else 1 */
	double duration;          /* seconds of audio */
} sg_transcript;

/* Transcribes the audio file at path (any format libsndfile reads; resampled to 16 kHz mono).
 * *out is owned by the caller (sg_transcript_free). Errors: SG_ERR_IO / SG_ERR_FORMAT for a
 * file that is not audio, empty or truncated; SG_ERR_INVALID_ARG for parameters out of their
 * domain (an unknown language, translation on an English-only model); SG_ERR_CANCELLED when a
 * callback stopped it (*out then holds the segments so far). */
sg_status sg_transcribe_file(sg_stt *stt, const char *path, const sg_transcribe_params *params, sg_transcript **out);
/* The same from the n bytes of an audio file in memory (an upload: any format libsndfile reads),
 * streamed as a file is: the bytes are read in place a block at a time and never decoded whole,
 * so the only memory that grows with the audio's length is bytes itself, which stays the
 * caller's. Errors as sg_transcribe_file's (SG_ERR_FORMAT for 0 bytes, bytes that are not
 * audio, or audio without a sample). */
sg_status sg_transcribe_memory(sg_stt *stt, const void *bytes, size_t n, const sg_transcribe_params *params,
			       sg_transcript **out);
/* The same from n samples of 16 kHz mono audio in [-1, 1]. */
sg_status sg_transcribe_pcm(sg_stt *stt, const float *pcm, size_t n, const sg_transcribe_params *params,
			    sg_transcript **out);
void sg_transcript_free(sg_transcript *tr);

/* Writes tr as "text", "json" ({"text"}), "verbose_json" (OpenAI's shape: task, language,
 * duration, text, segments, words), "srt" or "vtt" into *out (NUL-terminated, *len bytes;
 * caller frees with sg_free). task is "transcribe" or "translate". */
sg_status sg_transcript_format(const sg_transcript *tr, const char *format, const char *task, char **out, size_t *len);
/* ---- text-to-speech ----
 *
 * sg_tts is a loaded voice model: a Piper voice (VITS: espeak-ng phonemes, text encoder,
 * stochastic duration predictor, flow and HiFi-GAN decoder, read from Piper's .onnx and its
 * .onnx.json) or Qwen3-TTS. sg_speak splits the text into sentences, speaks them one by one and
 * hands each chunk of audio to on_audio as soon as it exists.
 *
 *     sg_tts *tts;
 *     sg_speak_params sp = sg_speak_default_params();
 *     float *pcm;
 *     size_t n;
 *     if (!sg_tts_load("piper-joe", NULL, &tts) && !sg_speak(tts, "Hello there.", &sp, &pcm, &n)) {
 *             ... n samples of mono audio at sg_tts_sample_rate(tts) ...
 *             sg_free(pcm);
 *     }
 *     sg_tts_free(tts);
 *
 * One sg_tts speaks one text at a time. */
typedef struct sg_tts sg_tts; /* a loaded voice model: a Piper voice or Qwen3-TTS */

typedef struct sg_tts_params {
	const char *backend; /* "cpu", "cuda", "auto"; NULL = the SARAGOSSA_BACKEND flag */
	int n_threads;       /* CPU threads; 0 = the default */
} sg_tts_params;

sg_tts_params sg_tts_default_params(void);
/* path: a Piper voice (.onnx with its .onnx.json beside it, or a folder holding one), a
 * Qwen3-TTS folder, or a name in saragossa's models folder (tools/fetch_models.py fetches
 * "piper-joe"). Caller owns *out (sg_tts_free). A file that is none of these is an error naming
 * what is missing. */
sg_status sg_tts_load(const char *path, const sg_tts_params *params, sg_tts **out);
void sg_tts_free(sg_tts *tts);
const char *sg_tts_kind(const sg_tts *tts);         /* "piper" or "qwen3-tts" */
int sg_tts_sample_rate(const sg_tts *tts);          /* of the PCM it produces */
int sg_tts_n_voices(const sg_tts *tts);
const char *sg_tts_voice(const sg_tts *tts, int i); /* voice / speaker names; [0] is the default */

/* Mono float PCM in [-1, 1] at sg_tts_sample_rate; non-zero stops (the call ends
 * SG_ERR_CANCELLED). */
typedef int (*sg_audio_fn)(const float *pcm, size_t n, void *user);

typedef struct sg_speak_params {
	const char *voice;          /* NULL: the default voice; unknown: SG_ERR_INVALID_ARG listing the voices */
	const char *language;       /* NULL: the voice's own */
	const char *instructions;   /* style / voice-design text where the model takes it (Qwen3-TTS), else ignored */
	float speed;                /* 1 = the model's pace; 0.25 .. 4 */
	float noise_scale, noise_w; /* Piper's; < 0: the voice's config values */
	float temperature;          /* Qwen3-TTS code sampling; 0 = greedy */
	int top_k;
	float top_p;
	uint64_t seed;
	size_t max_chars;     /* input cap; 0 = 4096; over it: SG_ERR_INVALID_ARG naming the cap */
	sg_audio_fn on_audio; /* each chunk as soon as it exists; may be NULL */
	void *user;
	/* Voice cloning (Qwen3-TTS Base models): a reference clip, the bytes of an audio file in any
	 * format the audio decoder reads (WAV, FLAC, OGG, ...), resampled to the model's rate; it
	 * is only read during the call. NULL: no cloning. A model without a speaker encoder
	 * (CustomVoice, VoiceDesign, Piper): SG_ERR_UNSUPPORTED; bytes that are not audio:
	 * SG_ERR_FORMAT. */
	const void *ref_audio;
	size_t ref_audio_size;
	/* The clip's transcript: the clip's codes and this text go in the prompt (in-context
	 * cloning, the closer copy). Required unless x_vector_only. */
	const char *ref_text;
	int x_vector_only; /* 1: only the clip's speaker embedding (x-vector) makes the voice */
} sg_speak_params;

sg_speak_params sg_speak_default_params(void);
/* Speaks text (UTF-8) sentence by sentence. With pcm_out non-NULL the whole waveform is also
 * returned (*n_out samples; caller frees with sg_free). Empty text: SG_ERR_INVALID_ARG. */
sg_status sg_speak(sg_tts *tts, const char *text, const sg_speak_params *params, float **pcm_out, size_t *n_out);

/* ---- embeddings and reranking ----
 *
 * sg_embed_model is a loaded text encoder: a sentence-transformers folder (BERT-family encoders
 * such as all-MiniLM-L6-v2, BGE, e5, XLM-RoBERTa and MPNet ones, or a decoder whose Pooling module
 * takes the last token, Qwen3-Embedding's layout: config.json, model.safetensors, tokenizer.json,
 * modules.json with its Pooling and Normalize modules) that turns texts into vectors, or a cross-encoder
 * (BertForSequenceClassification, e.g. ms-marco-MiniLM) that scores (query, document) pairs.
 * The weights are immutable; each call allocates what it needs, so one model may serve calls
 * from one thread at a time (load one per thread for more).
 *
 *     sg_embed_model *m;
 *     const char *texts[] = {"A man is eating food.", "A man rides a horse."};
 *     float v[2 * 384];
 *     if (sg_embed_load("all-MiniLM-L6-v2", NULL, &m) == SG_OK &&
 *         sg_embed_texts(m, texts, NULL, 2, 0, 0, v, NULL) == SG_OK) { ... }
 *     sg_embed_free(m);
 */
typedef struct sg_embed_model sg_embed_model;

typedef struct sg_embed_params {
	const char *backend; /* "cpu", "cuda", "auto"; NULL = SARAGOSSA_BACKEND */
	int n_threads;       /* CPU threads; 0 = SARAGOSSA_THREADS, else one per core */
} sg_embed_params;

sg_embed_params sg_embed_default_params(void);

/* Loads the encoder folder at `path` (params NULL: the defaults). Caller owns *out
 * (sg_embed_free). SG_ERR_UNSUPPORTED names a model type or a sentence-transformers module this
 * build does not run. */
sg_status sg_embed_load(const char *path, const sg_embed_params *params, sg_embed_model **out);
void sg_embed_free(sg_embed_model *m);

/* Floats per embedding (before any Matryoshka truncation). */
int sg_embed_dim(const sg_embed_model *m);
/* Tokens one input may have, special tokens included. */
int sg_embed_max_tokens(const sg_embed_model *m);
/* 1 for a cross-encoder (sg_rerank), 0 for an embedding model (sg_embed_texts). */
int sg_embed_is_reranker(const sg_embed_model *m);

/* The embeddings of texts[0..n) (UTF-8; lens[i] bytes, or NUL-terminated when lens is NULL) into
 * out, row i for text i: n * d floats, d = dimensions when > 0 (the first d values, re-normalised
 * when the model normalises), else sg_embed_dim. The inputs run as packed batches in bounded
 * memory, however many there are. An input longer than sg_embed_max_tokens is SG_ERR_RANGE naming
 * it and both counts unless truncate (then its start is embedded). n_tokens (may be NULL) gets
 * each input's token count. Nothing is written to out on error. */
sg_status sg_embed_texts(sg_embed_model *m, const char *const *texts, const size_t *lens, size_t n, int truncate,
			 int dimensions, float *out, int *n_tokens);
/* sentence-transformers' prompts (config_sentence_transformers.json "prompts"): text put before
 * each input, such as "query: " for a search query. sg_embed_texts uses the model's
 * default_prompt_name prompt when it has one (as SentenceTransformer.encode does), else none. */
int sg_embed_n_prompts(const sg_embed_model *m);
const char *sg_embed_prompt_name(const sg_embed_model *m, int i); /* i in [0, sg_embed_n_prompts) */
/* The text of the prompt called name (NULL: the default prompt's); NULL when there is none. */
const char *sg_embed_prompt(const sg_embed_model *m, const char *name);
/* As sg_embed_texts with prompt (its text, e.g. sg_embed_prompt(m, "query")) before each input:
 * prompt and text are tokenized as one string, as sentence-transformers does, and a Pooling module
 * with include_prompt false leaves the prompt's tokens out of the mean. prompt NULL: the default
 * prompt; "": none. */
sg_status sg_embed_texts_prompt(sg_embed_model *m, const char *prompt, const char *const *texts, const size_t *lens, size_t n,
				int truncate, int dimensions, float *out, int *n_tokens);

/* As sg_embed_texts for inputs given as token ids (special tokens included): ids[i] holds
 * n_ids[i] ids. */
sg_status sg_embed_tokens(sg_embed_model *m, const int32_t *const *ids, const int *n_ids, size_t n, int dimensions,
			  float *out);

/* Relevance scores of docs[0..n) (NUL-terminated UTF-8) for query into scores[n], in the
 * documents' order (sort them yourself): sentence-transformers' CrossEncoder scores (sigmoid of
 * the logit for a one-label head). truncate: a pair longer than the model's limit is cut (the
 * longer text first) instead of refused. SG_ERR_UNSUPPORTED when m is not a cross-encoder. */
sg_status sg_rerank(sg_embed_model *m, const char *query, const char *const *docs, size_t n, int truncate, float *scores);

#ifdef __cplusplus
}
#endif
#endif

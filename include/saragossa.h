/*
 * saragossa: a local inference engine (LLMs, speech-to-text, text-to-speech, embeddings).
 *
 * This is the one public header. Handles are opaque; every call that can fail returns an
 * sg_status, and sg_last_error() gives a message that names the function and the offending
 * values for the calling thread's last failure.
 *
 * Usage: run a prompt's token ids through a model and take the greedy next token.
 *
 *     #include <saragossa.h>
 *     #include <stdio.h>
 *
 *     int main(int argc, char **argv) {
 *             sg_model_params mp = sg_model_default_params();
 *             sg_model *model;
 *             if (argc < 2 || sg_model_load(argv[1], &mp, &model)) {
 *                     fprintf(stderr, "%s\n", argc < 2 ? "usage: demo MODEL" : sg_last_error());
 *                     return 1;
 *             }
 *             sg_session_params sp = sg_session_default_params();
 *             sg_session *s;
 *             int32_t prompt[] = {2, 651, 6037}; // ids from the model's tokenizer
 *             if (sg_session_new(model, &sp, &s) || sg_session_eval(s, prompt, 3, NULL)) {
 *                     fprintf(stderr, "%s\n", sg_last_error());
 *                     return 1;
 *             }
 *             const float *logits = sg_session_logits(s); // [n_vocab] of the last token
 *             int best = 0;
 *             for (int i = 1; i < sg_model_n_vocab(model); i++)
 *                     if (logits[i] > logits[best]) best = i;
 *             printf("saragossa %s: next token %d\n", sg_version(), best);
 *             sg_session_free(s);
 *             sg_model_free(model);
 *             return 0;
 *     }
 *
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
typedef struct sg_backend sg_backend; /* a compute device: cpu, cuda */

/* "0.1.0" plus build flags are reported by `saragossa --version`. Static storage. */
const char *sg_version(void);

/* A short constant name for a status ("invalid argument", "i/o error", ...). */
const char *sg_status_str(sg_status st);

/* The calling thread's last error message ("" if none). Valid until the next failing call on this
 * thread. */
const char *sg_last_error(void);

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

#ifdef __cplusplus
}
#endif
#endif

/* `saragossa serve`: an HTTP server speaking the OpenAI and Ollama APIs over a Unix socket (the
 * default) and/or loopback TCP with a bearer token.
 *
 * Threads: libmicrohttpd runs one thread per connection (I/O, parsing, templating, tokenizing,
 * listings); one inference worker runs generations in arrival order from a bounded queue. A
 * connection waits on its job through an eventfd while watching its own socket, so a client
 * that goes away cancels its generation at the next token. */
#ifndef SG_SERVER_SERVER_H
#define SG_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

#define SG_SERVER_MAX_MODELS 8

typedef struct sg_server_model_spec {
	const char *name; /* what requests put in "model" */
	const char *path; /* resolved path (file or folder) */
	int stt;          /* 1: a Whisper model for the audio routes (--stt-model), 0: an LLM */
	int embed;        /* 1: an embedding model or cross-encoder (--embed-model): embeds, never generates */
	int tts;          /* 1: a text-to-speech model (--tts-model): /v1/audio/speech and spoken chat answers */
	const char *vocab; /* stt: the vocabulary when the model's files carry none (--stt-vocab), or NULL */
} sg_server_model_spec;

typedef struct sg_server_opts {
	const char *socket_path; /* Unix socket, NULL for none */
	const char *host;        /* TCP bind address (default 127.0.0.1) */
	int port;                /* TCP port, 0 for none */
	int ollama_port;         /* a second TCP port (Ollama's 11434), 0 for none */
	const char *api_key;     /* bearer token; required for TCP */
	sg_server_model_spec models[SG_SERVER_MAX_MODELS];
	int n_models;
	int32_t n_ctx;           /* per model; 0 = the model's default */
	int32_t max_tokens_cap;  /* default 4096 */
	size_t max_body;         /* bytes; default 4 MiB */
	size_t max_upload;       /* bytes of an audio upload (multipart body); default 25 MiB, OpenAI's */
	int queue;               /* requests waiting behind the running one; default 16 */
	int read_timeout_s;      /* per-connection read deadline; default 30 */
	int max_connections;     /* per listener; default 64 */
	int no_prefix_cache;     /* 1: no block prefix cache (--no-prefix-cache) */
	/* speculative decoding of every served model unless a request says otherwise: 0 none,
	 * 1 n-gram (--spec ngram), 2 the draft model (--draft-model, resolved path) */
	int spec_mode;
	const char *draft_model;
	int32_t draft_max, draft_min; /* 0: 16 and 1 */
} sg_server_opts;

sg_server_opts sg_server_default_opts(void);

/* Loads the models, opens the listeners and serves until SIGINT/SIGTERM (or sg_server_stop).
 * Returns SG_OK after a clean shutdown; a listener or model that cannot be set up is an error
 * with a message for the user (socket in use by a live server, TCP without a key, ...). */
sg_status sg_server_run(const sg_server_opts *opts);

/* Asks a running server to shut down (async-signal-safe). */
void sg_server_stop(void);

/* Constant-time check of an "Authorization" header value against "Bearer <key>". 1 if it
 * matches. The time depends only on the lengths, not on where the bytes differ. */
int sg_server_auth_ok(const char *header, const char *key);
/* The same check of an Anthropic-style "x-api-key: <key>" header value. */
int sg_server_api_key_ok(const char *header, const char *key);

#endif

/*
 * saragossa: a local inference engine (LLMs, speech-to-text, text-to-speech, embeddings).
 *
 * This is the one public header. Handles are opaque; every call that can fail returns an
 * sg_status, and sg_last_error() gives a message that names the function and the offending
 * values for the calling thread's last failure.
 *
 * Usage:
 *
 *     #include <saragossa.h>
 *     #include <stdio.h>
 *
 *     int main(void) {
 *             printf("saragossa %s\n", sg_version());
 *             return 0;
 *     }
 *
 * The model, session and generation calls are added as their modules land.
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

#ifdef __cplusplus
}
#endif
#endif

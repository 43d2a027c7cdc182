/*
 * Sessions: the state of one conversation on one model (KV cache, position, token history) and
 * its snapshots at token boundaries. The public calls are in include/saragossa.h; this header
 * holds what the engine's other modules (prefix cache, generation loop) may look into.
 */
#ifndef SG_ENGINE_SESSION_H
#define SG_ENGINE_SESSION_H

#include "models/forward.h"
#include "saragossa.h"

struct sg_session {
	sg_model *m;
	sg_fwd_state fs;    /* KV caches and chunk buffers */
	int n_ctx, n_batch;
	int n_past;         /* tokens evaluated = position of the next one */
	int32_t *tokens;    /* [n_ctx] history */
	float *last;        /* [n_vocab] logits of the last token */
	int has_last;
};

/* 1 if the session carries recurrent state (linear-attention conv and delta-rule states): such a
 * session cannot be moved back to an earlier position by lowering n_past, only restored from a
 * snapshot or reset. */
int sg_session_has_recurrent_state(const sg_session *s);

#endif

/*
 * Speech-to-text: long-form transcription with a Whisper model (models/whisper.h), as the
 * reference (faster-whisper's generate_segments over CTranslate2, which follows openai-whisper's
 * transcribe) does it. The public entry points (sg_stt_*, sg_transcribe_*, sg_transcript_*) are
 * declared in saragossa.h; this header adds what the CLI, the server and the tests reach below
 * them.
 *
 * One window at a time: the audio is cut into 30 s mel windows from `seek`; each window is
 * encoded once, decoded (greedy or beam search at temperature 0, sampling hotter ones when the
 * result looks like a loop or is improbable), split into segments at its timestamp pairs, and
 * the next window starts at the last complete timestamp. Segments go to the caller as soon as
 * their window is done.
 */
#ifndef SG_ENGINE_TRANSCRIBE_H
#define SG_ENGINE_TRANSCRIBE_H

#include <stddef.h>
#include <stdint.h>

#include "audio/stream.h"
#include "engine/stt_rules.h"
#include "saragossa.h"

#define SG_STT_MAX_BEAM 16
#define SG_STT_TIME_PRECISION 0.02 /* seconds per timestamp token */
#define SG_STT_INPUT_STRIDE 2      /* mel frames per encoder position (and timestamp token) */

/* The vocabulary's special ids of a loaded model (owned by stt). */
const sg_stt_vocab *sg_stt_vocab_of(const sg_stt *stt);
/* The Whisper model's description (sizes, weight type, source format; owned by stt). */
const struct sg_whisper_info *sg_stt_info(const sg_stt *stt);
/* The model's tokenizer (owned by stt). */
const sg_tokenizer *sg_stt_tokenizer(const sg_stt *stt);

/* Transcribes audio as sg_transcribe_file does, from a stream freshly opened (at its first
 * sample) that the caller keeps and closes: it is read twice (rewound once), one window of
 * samples held at a time. This is sg_transcribe_file and sg_transcribe_memory below their
 * open: a caller that must tell "not audio" (the open's error) from a failed transcription
 * opens the stream itself (the server, the CLI's stdin). */
sg_status sg_transcribe_stream(sg_stt *stt, sg_audio_stream *audio, const sg_transcribe_params *params,
			       sg_transcript **out);

/* One window's decode result split into segments, as the reference splits it: at each pair of
 * consecutive timestamps; a window that ends with a single timestamp is complete (seek moves a
 * whole window), else the text after the last pair is dropped and seek moves to that pair.
 * tokens[0..n) are the sampled ids (no end token). Segments are written to seg (at most n + 1
 * of them, each a slice [begin, end) of tokens with its start and end seconds); *n_seg is their
 * count; *seek is advanced in mel frames. segment_size is the window's content in frames. */
typedef struct sg_stt_slice {
	int begin, end;
	double start, end_s;
} sg_stt_slice;
void sg_stt_split_segments(const sg_stt_vocab *v, const int32_t *tokens, int n, double time_offset, int segment_size,
			   int *seek, sg_stt_slice *seg, int *n_seg);

#endif

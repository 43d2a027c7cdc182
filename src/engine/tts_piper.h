/* Piper voices in the engine's text-to-speech layer: the tts_model_vt of a VITS voice (its
 * phonemizer, phoneme ids and forward). */
#ifndef SG_ENGINE_TTS_PIPER_H
#define SG_ENGINE_TTS_PIPER_H

#include "engine/tts.h"

/* Loads the Piper voice onnx_path (its .onnx.json beside it) into *out. */
sg_status tts_piper_load(const char *onnx_path, const sg_tts_params *p, tts_model *out);

#endif

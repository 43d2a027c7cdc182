/* Loading a text-to-speech model of any kind the engine knows (tts_model_vt records). */
#ifndef SG_ENGINE_TTS_LOAD_H
#define SG_ENGINE_TTS_LOAD_H

#include "engine/tts.h"

/* Loads the model at path (a Piper voice .onnx, a folder holding one, or a name in saragossa's
 * models folder) into *out: the kind is told from the files. */
sg_status tts_model_load(const char *path, const sg_tts_params *p, tts_model *out);
void tts_model_free(tts_model *t);

#endif

/* Piper voices (tts_piper.h). */
#include "engine/tts_piper.h"

#include "base/error.h"

sg_status tts_piper_load(const char *onnx_path, const sg_tts_params *p, tts_model *out)
{
	(void)p;
	(void)out;
	return sg_error(SG_ERR_UNSUPPORTED, "tts: %s: Piper voices are not run by this build yet", onnx_path);
}

/* Loading a text-to-speech model: the kind is told from the files (tts_load.h). */
#include "engine/tts_load.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/error.h"
#include "engine/tts_piper.h"
#include "engine/tts_qwen3.h"
#include "engine/tts_tone.h"
#include "hub/repo.h"

static int is_dir(const char *p)
{
	struct stat s;
	return !stat(p, &s) && S_ISDIR(s.st_mode);
}

static int is_file(const char *p)
{
	struct stat s;
	return !stat(p, &s) && S_ISREG(s.st_mode);
}

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && !strcasecmp(s + a - b, suffix);
}

/* The first *.onnx of folder dir that has its .onnx.json beside it (in name order) into buf. */
static int find_voice(const char *dir, char *buf, size_t n)
{
	DIR *d = opendir(dir);
	if (!d) return 0;
	struct dirent *e;
	char best[512] = "";
	while ((e = readdir(d))) {
		if (!ends_with(e->d_name, ".onnx") || strlen(e->d_name) >= sizeof best) continue;
		char js[4096];
		if (snprintf(js, sizeof js, "%s/%s.json", dir, e->d_name) >= (int)sizeof js || !is_file(js)) continue;
		if (!best[0] || strcmp(e->d_name, best) < 0) snprintf(best, sizeof best, "%s", e->d_name);
	}
	closedir(d);
	if (!best[0]) return 0;
	return snprintf(buf, n, "%s/%s", dir, best) < (int)n;
}

sg_status tts_model_load(const char *path, const sg_tts_params *p, tts_model *out)
{
	memset(out, 0, sizeof *out);
	char where[4096];
	if (is_file(path) || is_dir(path)) {
		snprintf(where, sizeof where, "%s", path);
	} else {
		char dir[3072];
		if (strchr(path, '/') || sg_hub_models_dir(dir, sizeof dir) ||
		    snprintf(where, sizeof where, "%s/%s", dir, path) >= (int)sizeof where || !is_dir(where))
			return sg_error(SG_ERR_NOT_FOUND,
					"tts: '%s' is neither a file, a folder nor a model in saragossa's models folder "
					"(tools/fetch_models.py piper-joe fetches the default voice)",
					path);
	}
	char onnx[4200];
	if (is_dir(where)) {
		char cfg[4200];
		snprintf(cfg, sizeof cfg, "%s/config.json", where);
		if (find_voice(where, onnx, sizeof onnx)) return tts_piper_load(onnx, p, out);
		if (tts_qwen3_is(where)) return tts_qwen3_load(where, p, out);
		if (is_file(cfg))
			return sg_error(SG_ERR_UNSUPPORTED, "tts: %s is neither a Piper voice (no .onnx with its .onnx.json) nor a Qwen3-TTS folder (no talker_config in config.json)", where);
		return sg_error(SG_ERR_FORMAT, "tts: folder %s holds no voice model (a Piper .onnx with its .onnx.json beside it)", where);
	}
	if (ends_with(where, ".tone.json")) return tts_tone_load(where, out); /* the synthetic test voice */
	if (ends_with(where, ".onnx")) return tts_piper_load(where, p, out);
	if (ends_with(where, ".onnx.json")) {
		snprintf(onnx, sizeof onnx, "%.*s", (int)(strlen(where) - 5), where);
		return tts_piper_load(onnx, p, out);
	}
	return sg_error(SG_ERR_FORMAT, "tts: %s is not a voice model (a Piper .onnx with its .onnx.json, or a folder holding one)", where);
}

void tts_model_free(tts_model *t)
{
	if (t && t->vt && t->m) t->vt->free(t->m);
	if (t) memset(t, 0, sizeof *t);
}


/* A served model: an engine model binding (engine/lm.h) plus what the server reports about it
 * (see model.h). */
#include "server/model.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/error.h"
#include "engine/lm.h"

struct sg_srv_model {
	sg_srv_model_info info;
	sg_lm *lm;
};

const sg_srv_model_info *sg_srv_model_info_get(const sg_srv_model *m)
{
	return &m->info;
}

const int32_t *sg_srv_model_eos(const sg_srv_model *m, size_t *n)
{
	return sg_lm_eos(m->lm, n);
}

sg_gen_state *sg_srv_model_state(sg_srv_model *m)
{
	return sg_lm_state(m->lm);
}

const sg_gen_detok *sg_srv_model_detok(sg_srv_model *m)
{
	return sg_lm_detok(m->lm);
}

sg_status sg_srv_model_load(const char *name, const char *path, int32_t n_ctx, sg_srv_model **out)
{
	sg_srv_model *m = sg_calloc(1, sizeof *m);
	if (!m) return SG_FAIL(SG_ERR_NOMEM, "model state");
	snprintf(m->info.name, sizeof m->info.name, "%s", name);
	snprintf(m->info.path, sizeof m->info.path, "%s", path);
	m->info.created = (int64_t)time(NULL);
	m->info.size_bytes = sg_lm_weight_file_bytes(path);
	size_t pl = strlen(path);
	int gguf = pl > 5 && !strcmp(path + pl - 5, ".gguf");
	snprintf(m->info.format, sizeof m->info.format, "%s", gguf ? "gguf" : "safetensors");
	sg_lm_params lp = sg_lm_default_params();
	lp.n_ctx = n_ctx;
	sg_status s = sg_lm_load(path, &lp, &m->lm);
	if (s) {
		sg_free(m);
		return s;
	}
	snprintf(m->info.arch, sizeof m->info.arch, "%s", sg_model_arch(sg_lm_model(m->lm)));
	snprintf(m->info.quant, sizeof m->info.quant, "%s", gguf ? "gguf" : "bf16");
	m->info.n_ctx = sg_lm_n_ctx(m->lm);
	m->info.n_vocab = sg_lm_n_vocab(m->lm);
	*out = m;
	return SG_OK;
}

void sg_srv_model_free(sg_srv_model *m)
{
	if (!m) return;
	sg_lm_free(m->lm);
	sg_free(m);
}

sg_status sg_srv_model_chat_prompt(const sg_srv_model *m, const json_t *messages, const json_t *tools, char **out, size_t *len)
{
	if (!sg_lm_has_template(m->lm))
		return sg_error(SG_ERR_NOT_FOUND, "model '%s' has no chat template: use /v1/completions (or raw: true)", m->info.name);
	return sg_lm_chat_prompt(m->lm, messages, tools, out, len);
}

sg_status sg_srv_model_tokenize(const sg_srv_model *m, const char *text, size_t len, int add_special, int32_t **ids, size_t *n)
{
	return sg_lm_tokenize(m->lm, text, len, add_special, ids, n);
}

sg_status sg_srv_model_detokenize(const sg_srv_model *m, const int32_t *ids, size_t n, char **out, size_t *len)
{
	return sg_lm_detokenize(m->lm, ids, n, out, len);
}

sg_status sg_srv_model_token_bytes(const sg_srv_model *m, int32_t id, char **out, size_t *len)
{
	return sg_lm_token_bytes(m->lm, id, out, len);
}

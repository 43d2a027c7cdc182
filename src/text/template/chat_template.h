/* Chat templates: find a model's template(s) and render a conversation into the prompt text exactly
 * as transformers' apply_chat_template(..., tokenize=False) does.
 *
 * Where the template comes from, for a model folder (transformers' order): chat_template.jinja
 * (the "default" template) plus additional_chat_templates/<name>.jinja; otherwise
 * tokenizer_config.json "chat_template" (a string, or a list of {name, template}); otherwise
 * chat_template.json. For a .gguf file: the metadata string tokenizer.chat_template (and named
 * ones, tokenizer.chat_template.<name>). Special tokens (bos_token, eos_token, ...) come from
 * tokenizer_config.json and special_tokens_map.json, or from the GGUF vocabulary and its
 * tokenizer.ggml.*_token_id keys.
 *
 * Usage:
 *     sg_chat_template *ct;
 *     if (sg_chat_template_load("path/to/model", &ct)) ... sg_last_error() ...
 *     sg_chat_params p = {.messages = msgs, .add_generation_prompt = 1};
 *     char *prompt; size_t n;
 *     if (sg_chat_template_render(ct, &p, &prompt, &n) == SG_OK) { ...; sg_free(prompt); }
 *     sg_chat_template_free(ct);
 */
#ifndef SG_TEXT_CHAT_TEMPLATE_H
#define SG_TEXT_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "formats/gguf.h"
#include "saragossa.h"

typedef struct sg_chat_template sg_chat_template;

typedef struct sg_chat_params {
	const json_t *messages;    /* array of message objects (borrowed); required, non-empty */
	const json_t *tools;       /* array of tool schemas, or NULL for none */
	int add_generation_prompt; /* append the assistant header */
	const json_t *kwargs;      /* object of extra variables (enable_thinking, ...), or NULL; they
	                            * override the special tokens of the same name */
	const char *template_name; /* a named template to use, or NULL to pick as transformers does */
	int64_t now;               /* strftime_now's time (seconds since the epoch), 0 = now */
} sg_chat_params;

/* Loads the template(s) and special tokens of a model folder or .gguf file. *out is owned by the
 * caller. SG_ERR_NOT_FOUND when the model has no chat template; parse errors name the file. */
sg_status sg_chat_template_load(const char *model_path, sg_chat_template **out);
/* As sg_chat_template_load, except that a GGUF file it would read (the .gguf named, or the one
 * .gguf of a folder without template files) which `parsed` was parsed from (parsed->path equals
 * that file's path) is read from `parsed`, not mapped and parsed again: a model load passes its
 * weights' GGUF (sg_model_gguf) so the file is parsed once. parsed may be NULL; it is only read
 * during the call (the template copies what it keeps). */
sg_status sg_chat_template_load_with(const char *model_path, const sg_gguf *parsed, sg_chat_template **out);
/* The template(s) and special tokens of a parsed GGUF file (borrowed for the call only);
 * SG_ERR_NOT_FOUND when it has no tokenizer.chat_template. */
sg_status sg_chat_template_from_gguf(const sg_gguf *g, sg_chat_template **out);

/* One template from source text, with special tokens from a JSON object such as
 * {"bos_token": "<s>"} (borrowed, may be NULL). */
sg_status sg_chat_template_from_source(const char *src, size_t len, const json_t *special_tokens,
				       sg_chat_template **out);

/* Renders; *out is a NUL-terminated heap string (sg_free) of *out_len bytes, with no extra
 * newline. Messages are normalised as transformers does: keys whose value is null are dropped and
 * reasoning given as reasoning_content / thinking / reasoning is visible under both
 * reasoning_content and thinking. */
sg_status sg_chat_template_render(const sg_chat_template *ct, const sg_chat_params *p, char **out, size_t *out_len);

/* The special tokens the template sees (borrowed object). */
const json_t *sg_chat_template_special_tokens(const sg_chat_template *ct);

void sg_chat_template_free(sg_chat_template *ct);

#endif

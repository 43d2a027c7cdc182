/* saragossa inspect PATH: what a weight file or folder holds, without loading it. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "cli/cli.h"
#include "formats/ct2.h"
#include "formats/ggml_whisper.h"
#include "formats/model_desc.h"
#include "formats/weights.h"
#include "models/whisper.h"

static int fail(void)
{
	fprintf(stderr, "error: %s\n", sg_last_error());
	return 1;
}

static const char *act_name(sg_act a)
{
	return a == SG_ACT_SILU ? "silu" : a == SG_ACT_GELU_TANH ? "gelu_tanh" : "gelu";
}

static const char *scaling_name(sg_rope_scaling s)
{
	static const char *n[] = {"none", "linear", "yarn", "llama3", "proportional", "dynamic"};
	return (unsigned)s < 6 ? n[s] : "?";
}

static void print_desc(const sg_model_desc *d)
{
	printf("arch: %s\n", d->model_type);
	printf("family: %s\n", sg_arch_name(d->arch));
	printf("vocab: %d\ndim: %d\nlayers: %d\nffn: %d\ncontext: %d\n", d->n_vocab, d->dim, d->n_layer, d->ffn_dim,
	       d->max_ctx);
	printf("heads: %d\nkv_heads: %d\nhead_dim: %d\n", d->n_head, d->n_kv_head, d->head_dim);
	int kinds[3] = {0}, window = 0;
	for (int i = 0; i < d->n_layer; i++) {
		kinds[d->layers[i].kind]++;
		if (d->layers[i].sliding_window) window = d->layers[i].sliding_window;
	}
	printf("layer_kinds: full %d, sliding %d (window %d), linear %d\n", kinds[0], kinds[1], window, kinds[2]);
	if (d->n_layer) {
		const sg_layer_desc *l = &d->layers[0];
		printf("rope: theta %g, rotated %d of %d, scaling %s (factor %g)\n", d->layers[d->n_layer - 1].rope.theta,
		       d->layers[d->n_layer - 1].n_rot, d->layers[d->n_layer - 1].head_dim,
		       scaling_name(d->layers[d->n_layer - 1].rope.scaling), d->layers[d->n_layer - 1].rope.factor);
		if (kinds[1]) printf("rope_sliding: theta %g\n", l->kind == SG_LAYER_SLIDING_ATTN ? l->rope.theta : 0.0);
	}
	printf("norm: %s eps %g offset %g%s%s%s\n", d->norm == SG_NORM_RMS ? "rms" : "layer", d->norm_eps, d->norm_offset,
	       d->qk_norm ? ", qk_norm" : "", d->sandwich_norm ? ", sandwich" : "", d->v_norm ? ", v_norm" : "");
	printf("mlp: %s %s\n", d->mlp == SG_MLP_GATED ? "gated" : "plain", act_name(d->act));
	if (d->n_expert)
		printf("moe: %d experts, %d used, ffn %d, norm_topk %d, shared expert ffn %d%s\n", d->n_expert,
		       d->n_expert_used, d->moe_ffn_dim, d->norm_topk_prob, d->shared_expert_ffn_dim,
		       d->shared_expert_gate ? " (gated)" : "");
	if (kinds[2])
		printf("linear_attn: k heads %d x %d, v heads %d x %d, conv %d\n", d->lin_n_k_head, d->lin_k_head_dim,
		       d->lin_n_v_head, d->lin_v_head_dim, d->lin_conv_kernel);
	if (d->attn_softcap || d->final_softcap)
		printf("softcap: attention %g, final %g\n", d->attn_softcap, d->final_softcap);
	if (d->query_scale) printf("query_scale: %g\n", d->query_scale);
	printf("embedding: scale %g, tied %s\n", d->embed_scale, d->tied_embeddings ? "yes" : "no");
	if (d->attn_output_gate) printf("attn_output_gate: yes\n");
	if (d->per_layer_input_dim || d->n_kv_shared_layers)
		printf("per_layer_input: %d, kv_shared_layers: %d\n", d->per_layer_input_dim, d->n_kv_shared_layers);
	if (d->arch == SG_ARCH_WHISPER)
		printf("encoder_layers: %d\nmels: %d\naudio_ctx: %d\n", d->n_enc_layer, d->n_mels, d->n_audio_ctx);
}

static void human(uint64_t b, char *buf, size_t cap)
{
	if (b >= (1ull << 30)) snprintf(buf, cap, "%.2f GiB", (double)b / (1ull << 30));
	else if (b >= (1ull << 20)) snprintf(buf, cap, "%.1f MiB", (double)b / (1ull << 20));
	else snprintf(buf, cap, "%.1f KiB", (double)b / 1024.0);
}

/* The Whisper model path holds, as the model loader reads it (sizes, layers, dtype, source);
 * 1 when printed, 0 with the loader's reason on stdout when it would not load. */
static int print_whisper(const char *path)
{
	sg_whisper_info i;
	char dtype[32];
	if (sg_whisper_describe(path, &i, dtype, sizeof(dtype))) {
		printf("model: whisper, does not load: %s\n", sg_last_error());
		return 0;
	}
	printf("model: whisper (%s, %s)\n", i.multilingual ? "multilingual" : "English-only", i.source);
	printf("whisper_source: %s\nwhisper_dtype: %s\n", i.source, i.dtype);
	printf("whisper_encoder: %d layers, %d heads, d_model %d, ffn %d, %d mels, %d positions\n", i.n_audio_layer,
	       i.n_audio_head, i.d_model, i.n_ffn, i.n_mels, i.n_audio_ctx);
	printf("whisper_decoder: %d layers, %d heads, vocab %d, %d positions\n", i.n_text_layer, i.n_text_head, i.n_vocab,
	       i.n_text_ctx);
	printf("whisper_alignment_heads: %d\n", i.n_align_heads);
	return 1;
}

/* Dequantizes one tensor to little-endian f32 values in `out`. */
static int dump_tensor(const sg_weights *w, const char *name, const char *out)
{
	const sg_tensor *t = sg_weights_find(w, name);
	if (!t) {
		sg_error(SG_ERR_NOT_FOUND, "inspect: no tensor '%s' in %s", name, w->path);
		return fail();
	}
	if (t->type == SG_TYPE_MLX_AFFINE ? 0 : !sg_type_row_bytes(t->type, t->n_dims ? t->ne[0] : 1) && sg_tensor_nelem(t)) {
		sg_error(SG_ERR_UNSUPPORTED, "inspect: tensor '%s' of type %s cannot be dumped", name, sg_type_name(t->type));
		return fail();
	}
	FILE *f = fopen(out, "wb");
	if (!f) {
		sg_error(SG_ERR_IO, "inspect: cannot write '%s'", out);
		return fail();
	}
	int64_t cols = t->n_dims ? t->ne[0] : 1, rows = cols ? sg_tensor_nelem(t) / cols : 0;
	float *row = sg_malloc((size_t)(cols ? cols : 1) * sizeof(float));
	int rc = row ? 0 : 1;
	for (int64_t r = 0; r < rows && !rc; r++) {
		if (t->type == SG_TYPE_MLX_AFFINE) {
			int64_t words = sg_mlx_packed_words(t->mlx.bits, cols), groups = cols / t->mlx.group;
			sg_mlx_dequantize_row_ref(&t->mlx, (const uint32_t *)t->data + r * words,
						  t->scales->data + r * groups * 2, t->biases->data + r * groups * 2, row, cols);
		} else {
			sg_dequantize_ref(t->type, t->data + (size_t)r * sg_type_row_bytes(t->type, cols), row, cols);
		}
		if (fwrite(row, sizeof(float), (size_t)cols, f) != (size_t)cols) rc = 1;
	}
	sg_free(row);
	if (fclose(f) || rc) {
		sg_error(SG_ERR_IO, "inspect: writing '%s' failed", out);
		return fail();
	}
	return 0;
}

typedef struct type_total {
	char name[64];
	uint64_t bytes;
	int count;
} type_total;

/* Adds one tensor's bytes to the per-type totals (at most `cap` types). */
static void add_total(type_total *totals, int *n, int cap, const char *type, uint64_t bytes)
{
	int k = 0;
	while (k < *n && strcmp(totals[k].name, type)) k++;
	if (k == *n && *n < cap) snprintf(totals[(*n)++].name, sizeof(totals[0].name), "%s", type);
	if (k < *n) totals[k].bytes += bytes, totals[k].count++;
}

/* A CTranslate2 folder or model.bin: the spec, the variables and their bytes, and for a
 * WhisperSpec the model as the Whisper loader reads it. */
static int inspect_ct2(const char *path, int list, const char *dump)
{
	if (dump) {
		sg_error(SG_ERR_UNSUPPORTED, "inspect: --dump does not read CTranslate2 files yet (%s)", path);
		return fail();
	}
	sg_ct2 c;
	if (sg_ct2_open(path, &c)) return fail();
	type_total totals[8] = {0};
	int n_totals = 0, n_quant = 0;
	uint64_t params = 0;
	for (int i = 0; i < c.n_vars; i++) {
		const sg_ct2_var *v = &c.vars[i];
		params += (uint64_t)sg_tensor_nelem(&v->t);
		n_quant += v->scale != NULL;
		add_total(totals, &n_totals, 8, sg_type_name(v->t.type), v->t.nbytes);
	}
	printf("path: %s\n", path);
	printf("format: ctranslate2 v%u (%s)\n", c.version, c.map.path);
	printf("spec: %s revision %u\n", c.spec, c.revision);
	printf("variables: %d\naliases: %d\n", c.n_vars, c.n_aliases);
	printf("parameters: %" PRIu64 " (%.1fM)\n", params, (double)params / 1e6);
	for (int k = 0; k < n_totals; k++) {
		char h[32];
		human(totals[k].bytes, h, sizeof(h));
		printf("bytes %s: %" PRIu64 " (%s, %d variables)\n", totals[k].name, totals[k].bytes, h, totals[k].count);
	}
	if (n_quant) printf("quantization: %d weights int8/int16 with scales\n", n_quant);
	else printf("quantization: none\n");
	char h[32];
	human(c.data_bytes, h, sizeof(h));
	printf("total_bytes: %" PRIu64 " (%s)\n", c.data_bytes, h);
	if (!strcmp(c.spec, "WhisperSpec")) print_whisper(path);
	else printf("model: none runs from a CTranslate2 %s\n", c.spec);
	if (list) {
		printf("\n%-56s %-8s %-28s %s\n", "name", "type", "shape (innermost first)", "offset");
		for (int i = 0; i < c.n_vars; i++) {
			const sg_ct2_var *v = &c.vars[i];
			char sh[160];
			printf("%-56s %-8s %-28s %" PRIu64 "%s%s%s\n", v->t.name, sg_type_name(v->t.type),
			       sg_tensor_shape_str(&v->t, sh, sizeof(sh)), v->t.offset, v->scale ? " (scale " : "",
			       v->scale ? v->scale->name : "", v->scale ? ")" : "");
		}
		for (int i = 0; i < c.n_aliases; i++)
			printf("%-56s alias of %s\n", c.aliases[i].name, c.vars[c.aliases[i].target].t.name);
	}
	sg_ct2_close(&c);
	return 0;
}

/* whisper.cpp's ggml .bin: hparams, vocabulary, tensors, and the model as the loader reads it. */
static int inspect_ggml(const char *path, int list, const char *dump)
{
	if (dump) {
		sg_error(SG_ERR_UNSUPPORTED, "inspect: --dump does not read ggml files (%s)", path);
		return fail();
	}
	sg_ggml_whisper g;
	if (sg_ggml_whisper_open(path, &g)) return fail();
	type_total totals[8] = {0};
	int n_totals = 0;
	uint64_t params = 0, bytes = 0;
	for (int i = 0; i < g.n_tensors; i++) {
		params += (uint64_t)sg_tensor_nelem(&g.tensors[i]);
		bytes += g.tensors[i].nbytes;
		add_total(totals, &n_totals, 8, sg_type_name(g.tensors[i].type), g.tensors[i].nbytes);
	}
	printf("path: %s\nformat: ggml (whisper.cpp)\n", path);
	printf("ftype: %d\nmel_filters: %d x %d\nvocabulary: %d tokens\ntensors: %d\n", g.hp[10], g.n_mel, g.n_fft, g.n_vocab_words,
	       g.n_tensors);
	printf("parameters: %" PRIu64 " (%.1fM)\n", params, (double)params / 1e6);
	for (int k = 0; k < n_totals; k++) {
		char h[32];
		human(totals[k].bytes, h, sizeof(h));
		printf("bytes %s: %" PRIu64 " (%s, %d tensors)\n", totals[k].name, totals[k].bytes, h, totals[k].count);
	}
	print_whisper(path);
	if (list) {
		printf("\n%-56s %-8s %-28s %s\n", "name", "type", "shape (innermost first)", "offset");
		for (int i = 0; i < g.n_tensors; i++) {
			const sg_tensor *t = &g.tensors[i];
			char sh[160];
			printf("%-56s %-8s %-28s %" PRIu64 "\n", t->name, sg_type_name(t->type), sg_tensor_shape_str(t, sh, sizeof(sh)),
			       t->offset);
		}
	}
	sg_ggml_whisper_close(&g);
	return 0;
}

int sg_cli_inspect(int argc, char **argv)
{
	const char *path = NULL, *dump = NULL, *out = NULL;
	int list = 0;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--tensors")) list = 1;
		else if (!strcmp(argv[i], "--dump") && i + 1 < argc) dump = argv[++i];
		else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
		else if (argv[i][0] == '-') return sg_cli_usage_error("inspect", "unknown option '%s'", argv[i]);
		else if (!path) path = argv[i];
		else return sg_cli_usage_error("inspect", "unexpected argument '%s'", argv[i]);
	}
	if (!path) return sg_cli_usage_error("inspect", "missing PATH");
	if (dump && !out) return sg_cli_usage_error("inspect", "--dump needs --out FILE");
	if (sg_ct2_detect(path)) return inspect_ct2(path, list, dump);
	if (sg_ggml_whisper_detect(path)) return inspect_ggml(path, list, dump);
	sg_weights *w;
	if (sg_weights_open(path, &w)) return fail();
	if (dump) {
		int rc = dump_tensor(w, dump, out);
		sg_weights_close(w);
		return rc;
	}
	sg_model_desc d;
	sg_status st = SG_OK;
	int have_desc = 0;
	if (w->format == SG_WEIGHTS_GGUF) st = sg_model_desc_from_gguf(&w->gguf, &d), have_desc = !st;
	else if (w->config) st = sg_model_desc_from_config(w->config, &d), have_desc = !st;
	if (st) {
		sg_weights_close(w);
		return fail();
	}
	printf("path: %s\n", path);
	if (w->format == SG_WEIGHTS_GGUF) printf("format: gguf v%u (alignment %llu)\n", w->gguf.version, (unsigned long long)w->gguf.alignment);
	else if (w->format == SG_WEIGHTS_NPZ) printf("format: npz (%d arrays)\n", w->npz.n_tensors);
	else printf("format: safetensors (%d file%s)\n", w->n_files, w->n_files == 1 ? "" : "s");
	if (have_desc) print_desc(&d);
	else printf("arch: unknown (no config.json)\n");
	if (have_desc && d.arch == SG_ARCH_WHISPER && w->format != SG_WEIGHTS_GGUF) print_whisper(path);

	type_total totals[64] = {0};
	int n_totals = 0;
	uint64_t params = 0, bytes = 0;
	int n_visible = 0;
	for (int i = 0; i < w->n_tensors; i++) {
		const sg_tensor *t = w->tensors[i];
		char tn[64];
		if (t->companion) snprintf(tn, sizeof(tn), "%s (mlx scales/biases)", sg_type_name(t->type));
		else sg_tensor_type_str(t, tn, sizeof(tn));
		if (!t->companion) params += (uint64_t)sg_tensor_nelem(t), n_visible++;
		bytes += t->nbytes;
		add_total(totals, &n_totals, 64, tn, t->nbytes);
	}
	printf("tensors: %d\n", n_visible);
	printf("parameters: %" PRIu64 " (%.1fM)\n", params, (double)params / 1e6);
	for (int k = 0; k < n_totals; k++) {
		char h[32];
		human(totals[k].bytes, h, sizeof(h));
		printf("bytes %s: %" PRIu64 " (%s, %d tensors)\n", totals[k].name, totals[k].bytes, h, totals[k].count);
	}
	if (w->format == SG_WEIGHTS_GGUF) {
		int ft = have_desc ? d.quant.file_type : -1;
		const char *fn = sg_gguf_ftype_name(ft);
		printf("quantization: gguf file_type %d (%s)\n", ft, fn ? fn : "other");
	}
	else if (have_desc && d.quant.kind == SG_QUANT_MLX)
		printf("quantization: mlx affine u%d group %d\n", d.quant.bits, d.quant.group);
	else printf("quantization: none\n");
	char h[32];
	human(bytes, h, sizeof(h));
	/* the CPU backend uses the mapped bytes in place: the load needs the weights' pages */
	printf("cpu_load_bytes: %" PRIu64 " (%s, mapped in place)\n", bytes, h);
	if (list) {
		printf("\n%-56s %-26s %-28s %s\n", "name", "type", "shape (innermost first)", "offset");
		for (int i = 0; i < w->n_tensors; i++) {
			const sg_tensor *t = w->tensors[i];
			char tn[64], sh[160];
			printf("%-56s %-26s %-28s %" PRIu64 "%s\n", t->name, sg_tensor_type_str(t, tn, sizeof(tn)),
			       sg_tensor_shape_str(t, sh, sizeof(sh)), t->offset, t->companion ? " (companion)" : "");
		}
	}
	if (have_desc) sg_model_desc_free(&d);
	sg_weights_close(w);
	return 0;
}

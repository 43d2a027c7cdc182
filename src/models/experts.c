/*
 * The routed experts of one MoE layer, in the three layouts files hold them in (names are the
 * family's GGUF-style ones; `blk.L.ffn_experts` is the layer's expert module, which the name map
 * turns into model.layers.L.mlp.experts, or model.layers.L.experts for Gemma 4):
 *
 *   separate stacks  blk.L.ffn_{gate,up,down}_exps.weight [E][F][D], [E][F][D], [E][D][F]: GGUF,
 *                    and MLX (mlx_lm stacks Qwen's experts into mlp.switch_mlp.*, Gemma 4's into
 *                    experts.switch_glu.*). Bound in place.
 *   fused stack      blk.L.ffn_experts.gate_up_proj [E][2F][D] (per expert: F gate rows, then F
 *                    up rows) and blk.L.ffn_experts.down_proj [E][D][F]: the parameters of
 *                    transformers 5's expert modules, stored as they are (no ".weight") by
 *                    save_pretrained(save_original_format=False), by a model loaded from such a
 *                    checkpoint and by other writers (Qwen3.5-MoE releases, Gemma 4 always);
 *                    ".weight" with MLX scales and biases when quantized. down_proj is bound in
 *                    place; gate_up_proj too where the family's forward takes it fused (Gemma 4),
 *                    else it is split once into a gate and an up stack.
 *   one per expert   blk.L.ffn_experts.N.{gate,up,down}_proj.weight [F][D], [F][D], [D][F]
 *                    (transformers 4, and what transformers 5's save_pretrained writes by default
 *                    for the Qwen MoE families): stacked once into backend tensors.
 *
 * Why the fused gate_up of a Qwen family is split rather than bound in place: the generic forward
 * runs the experts as a gate and an up stack (the CUDA backend fuses them with the router for one
 * token), and the op table has no strided expert view. Split, a fused checkpoint runs exactly what
 * a per-expert one runs: the same tensors, bytes per decode step, kernels and numbers. The cost is
 * the copy at load, which the per-expert layout has always paid.
 */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "models/model.h"

static sg_status xloc_of(sg_model *m, int layer, sg_expert_loc **out);
static void deferred_stack(sg_type type, int64_t cols, int64_t rows, int64_t E, sg_btensor *out);

/* Deferred stacks on a backend of device memory (a GPU's slot cache): the three stacks are found
 * and checked but not uploaded; their experts are located in the files for the cache to read.
 * MLX stacks (their scales and biases have no place in a slot) are bound as usual. 1 when done. */
static int defer_stacks(sg_model *m, int layer, sg_layer_weights *lw, sg_status *st)
{
	sg_backend_caps caps;
	sg_backend_caps_get(m->be, &caps);
	if (!m->defer_experts || !caps.device_memory) return 0;
	const sg_model_desc *d = &m->desc;
	int64_t D = d->dim, F = d->moe_ffn_dim, E = d->n_expert;
	const sg_tensor *t[3] = {NULL, NULL, NULL};
	sg_bind specs[3] = {
		{"blk.{L}.ffn_gate_exps.weight", SG_WANT_MATMUL, 3, {D, F, E, 1}, 0, &t[0]},
		{"blk.{L}.ffn_up_exps.weight", SG_WANT_MATMUL, 3, {D, F, E, 1}, 0, &t[1]},
		{"blk.{L}.ffn_down_exps.weight", SG_WANT_MATMUL, 3, {F, D, E, 1}, 0, &t[2]},
	};
	if ((*st = sg_weights_bind(m->w, m->fam->names, specs, 3, layer))) return 1;
	for (int p = 0; p < 3; p++)
		if (t[p]->type == SG_TYPE_MLX_AFFINE) return 0;
	sg_expert_loc *loc;
	if ((*st = xloc_of(m, layer, &loc))) return 1;
	sg_btensor *out[3] = {&lw->gate_exps, &lw->up_exps, &lw->down_exps};
	for (int p = 0; p < 3; p++) {
		deferred_stack(t[p]->type, t[p]->ne[0], t[p]->ne[1], E, out[p]);
		size_t per = t[p]->nbytes / (size_t)E;
		for (int64_t e = 0; e < E; e++) loc[(size_t)p * (size_t)E + (size_t)e] = (sg_expert_loc){t[p]->file, t[p]->offset + (uint64_t)e * per};
		m->weight_bytes += per * (size_t)d->n_expert_used; /* a decode step reads k of the E experts */
	}
	m->xloc_set[layer] = 1;
	return 1;
}

sg_status sg_model_bind_stacked_experts(sg_model *m, int layer, sg_layer_weights *lw)
{
	const sg_model_desc *d = &m->desc;
	int64_t D = d->dim, F = d->moe_ffn_dim, E = d->n_expert;
	sg_status dst = SG_OK;
	if (defer_stacks(m, layer, lw, &dst)) return dst;
	sg_want ws[] = {
		{"blk.{L}.ffn_gate_exps.weight", SG_WANT_MATMUL, 3, {D, F, E}, 0, 0, &lw->gate_exps},
		{"blk.{L}.ffn_up_exps.weight", SG_WANT_MATMUL, 3, {D, F, E}, 0, 0, &lw->up_exps},
		{"blk.{L}.ffn_down_exps.weight", SG_WANT_MATMUL, 3, {F, D, E}, 0, 0, &lw->down_exps},
	};
	size_t before = m->weight_bytes;
	sg_status st = sg_model_bind_wants(m, ws, 3, layer);
	/* a decode step reads k of the E experts: the bench's byte count says so */
	m->weight_bytes = before + (m->weight_bytes - before) / (size_t)E * (size_t)d->n_expert_used;
	return st;
}

static int is_float(sg_type t) { return t == SG_TYPE_F32 || t == SG_TYPE_F16 || t == SG_TYPE_BF16; }

/* The file's name for a GGUF-style one (what the user sees in the folder). */
static const char *file_name(const sg_model *m, const char *gguf, char *buf, size_t cap)
{
	const sg_name_pair *map = m->fam->names ? m->fam->names : sg_names_default;
	if (m->w->format != SG_WEIGHTS_SAFETENSORS || !sg_names_gguf_to_hf(map, gguf, buf, cap)) snprintf(buf, cap, "%s", gguf);
	return buf;
}

/* t must be a 3-D matmul weight of shape ne (innermost first); the error names the file's tensor
 * and what its dimensions are (`dims`). */
static sg_status check3(const sg_tensor *t, const int64_t ne[3], const char *dims)
{
	if (t->n_dims == 3 && t->ne[0] == ne[0] && t->ne[1] == ne[1] && t->ne[2] == ne[2] &&
	    sg_type_is_float_or_quant(t->type) && t->type != SG_TYPE_F64)
		return SG_OK;
	char ts[64], ss[96];
	return sg_error(SG_ERR_FORMAT, "%s: expected float or quantized [%lld, %lld, %lld] (%s, innermost first), found %s %s",
			t->name, (long long)ne[0], (long long)ne[1], (long long)ne[2], dims, sg_tensor_type_str(t, ts, sizeof(ts)),
			sg_tensor_shape_str(t, ss, sizeof(ss)));
}

/* Deferred experts (m->defer_experts): layer's [3][E] entries of the location table. */
static sg_status xloc_of(sg_model *m, int layer, sg_expert_loc **out)
{
	const sg_model_desc *d = &m->desc;
	if (!m->xloc) {
		m->xloc = sg_calloc((size_t)d->n_layer * 3 * (size_t)d->n_expert, sizeof *m->xloc);
		m->xloc_set = sg_calloc((size_t)d->n_layer, 1);
		if (!m->xloc || !m->xloc_set) return sg_error(SG_ERR_NOMEM, "model: expert locations of %d layers", d->n_layer);
	}
	*out = m->xloc + (size_t)layer * 3 * (size_t)d->n_expert;
	return SG_OK;
}

/* A deferred stack [E][rows][cols]: type, shape and row bytes, no data (see sg_model). */
static void deferred_stack(sg_type type, int64_t cols, int64_t rows, int64_t E, sg_btensor *out)
{
	memset(out, 0, sizeof *out);
	out->type = type;
	out->ne[0] = cols;
	out->ne[1] = rows;
	out->ne[2] = E;
	out->ne[3] = 1;
	out->row_bytes = sg_type_row_bytes(type, cols);
}

/* gate_up [E][2F][D] -> gate [E][F][D] and up [E][F][D], copied once into backend tensors
 * (deferred: located, expert e's gate rows at e * 2F rows, its up rows F rows further). */
static sg_status split_gate_up(sg_model *m, const sg_tensor *t, sg_layer_weights *lw, int layer)
{
	int64_t E = t->ne[2], F = t->ne[1] / 2;
	size_t half = (size_t)F * sg_type_row_bytes(t->type, t->ne[0]);
	if (m->defer_experts) {
		sg_expert_loc *loc;
		sg_status st = xloc_of(m, layer, &loc);
		if (st) return st;
		deferred_stack(t->type, t->ne[0], F, E, &lw->gate_exps);
		deferred_stack(t->type, t->ne[0], F, E, &lw->up_exps);
		for (int64_t e = 0; e < E; e++) {
			loc[e] = (sg_expert_loc){t->file, t->offset + (uint64_t)e * 2 * half};
			loc[E + e] = (sg_expert_loc){t->file, t->offset + (uint64_t)e * 2 * half + half};
		}
		return SG_OK;
	}
	int64_t ne[4] = {t->ne[0], F, E, 1};
	sg_status st = m->be->ops->tensor_alloc(m->be, t->type, ne, &lw->gate_exps);
	if (!st) st = m->be->ops->tensor_alloc(m->be, t->type, ne, &lw->up_exps);
	for (int64_t e = 0; e < E && !st; e++) {
		const char *src = (const char *)t->data + (size_t)e * 2 * half;
		st = m->be->ops->write(m->be, &lw->gate_exps, (size_t)e * half, src, half);
		if (!st) st = m->be->ops->write(m->be, &lw->up_exps, (size_t)e * half, src + half, half);
	}
	return st ? sg_error_wrap(st, "%s", t->name) : SG_OK;
}

/* The fused stack: gate_up and its down_proj (named with ".weight", as MLX names a quantized
 * weight, when `suffixed`). */
static sg_status bind_fused(sg_model *m, int layer, const sg_tensor *gu, int suffixed, sg_layer_weights *lw,
			    sg_btensor *gate_up)
{
	const sg_model_desc *d = &m->desc;
	int64_t D = d->dim, F = d->moe_ffn_dim, E = d->n_expert;
	char name[96], shown[512], ts[64];
	snprintf(name, sizeof(name), "blk.%d.ffn_experts.down_proj%s", layer, suffixed ? ".weight" : "");
	const sg_tensor *down = sg_weights_lookup(m->w, m->fam->names, name);
	if (!down)
		return sg_error(SG_ERR_NOT_FOUND, "%s: missing (the layer's experts are stacked: %s is there)",
				file_name(m, name, shown, sizeof(shown)), gu->name);
	const int64_t gu_ne[3] = {D, 2 * F, E}, down_ne[3] = {F, D, E};
	sg_status st = check3(gu, gu_ne, "hidden, 2 x moe_intermediate_size, experts");
	if (!st) st = check3(down, down_ne, "moe_intermediate_size, hidden, experts");
	if (st) return st;
	if (!gate_up && !is_float(gu->type)) /* the split copies plain rows */
		return sg_error(SG_ERR_UNSUPPORTED, "%s: %s: this family splits a fused gate_up at load, which takes F32/F16/BF16",
				gu->name, sg_tensor_type_str(gu, ts, sizeof(ts)));
	st = gate_up ? sg_model_bind_tensor(m, gu, gate_up) : split_gate_up(m, gu, lw, layer);
	sg_backend_caps caps;
	sg_backend_caps_get(m->be, &caps);
	/* deferred on a device: down stays in the file too (located below), not uploaded */
	if (!st && m->defer_experts && !gate_up && caps.device_memory) deferred_stack(down->type, down->ne[0], down->ne[1], E, &lw->down_exps);
	else if (!st) st = sg_model_bind_tensor(m, down, &lw->down_exps);
	if (st) return st;
	if (m->defer_experts && !gate_up) { /* down in place, located too: the cache reads all three alike */
		sg_expert_loc *loc = m->xloc + (size_t)layer * 3 * (size_t)E;
		size_t per = down->nbytes / (size_t)E;
		for (int64_t e = 0; e < E; e++) loc[2 * E + e] = (sg_expert_loc){down->file, down->offset + (uint64_t)e * per};
		m->xloc_set[layer] = 1;
	}
	/* a decode step reads k of the E experts: the bench's byte count says so */
	m->weight_bytes += (gu->nbytes + down->nbytes) / (size_t)E * (size_t)d->n_expert_used;
	return SG_OK;
}

/* One tensor per expert: blk.L.ffn_experts.{0..E-1}.<proj>.weight into out [E][rows][cols]
 * (deferred: located as projection p of the layer). */
static sg_status stack(sg_model *m, int layer, int p, const char *proj, int64_t cols, int64_t rows, sg_btensor *out)
{
	int E = m->desc.n_expert;
	const sg_tensor *first = NULL;
	sg_expert_loc *loc = NULL;
	if (m->defer_experts) {
		sg_status st = xloc_of(m, layer, &loc);
		if (st) return st;
	}
	char name[96], shown[512];
	for (int e = 0; e < E; e++) {
		snprintf(name, sizeof(name), "blk.%d.ffn_experts.%d.%s.weight", layer, e, proj);
		const sg_tensor *t = sg_weights_lookup(m->w, m->fam->names, name);
		if (!t)
			return sg_error(SG_ERR_NOT_FOUND, "%s: missing (%d experts, one tensor each)",
					file_name(m, name, shown, sizeof(shown)), E);
		char ts[64], ss[96];
		if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows || (first && t->type != first->type) || !is_float(t->type))
			return sg_error(SG_ERR_FORMAT, "%s: expected %s [%lld, %lld], found %s %s", t->name,
					first ? sg_type_name(first->type) : "F32/F16/BF16", (long long)cols, (long long)rows,
					sg_tensor_type_str(t, ts, sizeof(ts)), sg_tensor_shape_str(t, ss, sizeof(ss)));
		if (!first) {
			int64_t ne[4] = {cols, rows, E, 1};
			sg_status st = loc ? SG_OK : m->be->ops->tensor_alloc(m->be, t->type, ne, out);
			if (loc) deferred_stack(t->type, cols, rows, E, out);
			if (st) return st;
			first = t;
		}
		if (loc) {
			loc[(size_t)p * (size_t)E + (size_t)e] = (sg_expert_loc){t->file, t->offset};
			continue;
		}
		sg_status st = m->be->ops->write(m->be, out, (size_t)e * t->nbytes, t->data, t->nbytes);
		if (st) return st;
	}
	m->weight_bytes += (size_t)m->desc.n_expert_used * first->nbytes; /* a decode step reads k of the E experts */
	return SG_OK;
}

sg_status sg_model_bind_experts(sg_model *m, int layer, sg_layer_weights *lw, sg_btensor *gate_up)
{
	const sg_model_desc *d = &m->desc;
	char name[96];
	snprintf(name, sizeof(name), "blk.%d.ffn_gate_exps.weight", layer);
	if (sg_weights_lookup(m->w, m->fam->names, name)) return sg_model_bind_stacked_experts(m, layer, lw);
	for (int suffixed = 0; suffixed < 2; suffixed++) {
		snprintf(name, sizeof(name), "blk.%d.ffn_experts.gate_up_proj%s", layer, suffixed ? ".weight" : "");
		const sg_tensor *gu = sg_weights_lookup(m->w, m->fam->names, name);
		if (gu) return bind_fused(m, layer, gu, suffixed, lw, gate_up);
	}
	snprintf(name, sizeof(name), "blk.%d.ffn_experts.0.gate_proj.weight", layer);
	if (!sg_weights_lookup(m->w, m->fam->names, name)) {
		if (m->w->format != SG_WEIGHTS_SAFETENSORS) return sg_error(SG_ERR_NOT_FOUND, "blk.%d.ffn_gate_exps.weight: missing", layer);
		char a[512], b[512], c[512], n2[96];
		snprintf(n2, sizeof(n2), "blk.%d.ffn_experts.gate_up_proj", layer);
		file_name(m, n2, a, sizeof(a));
		file_name(m, name, b, sizeof(b));
		snprintf(n2, sizeof(n2), "blk.%d.ffn_gate_exps.weight", layer);
		file_name(m, n2, c, sizeof(c));
		return sg_error(SG_ERR_NOT_FOUND, "layer %d: no experts: neither %s (stacked), %s (one per expert) nor %s (MLX)",
				layer, a, b, c);
	}
	int64_t D = d->dim, F = d->moe_ffn_dim;
	sg_status st = stack(m, layer, 0, "gate_proj", D, F, &lw->gate_exps);
	if (!st) st = stack(m, layer, 1, "up_proj", D, F, &lw->up_exps);
	if (!st) st = stack(m, layer, 2, "down_proj", F, D, &lw->down_exps);
	if (!st && m->defer_experts) m->xloc_set[layer] = 1;
	return st;
}

sg_status sg_model_fetch_experts(const sg_model *m, int layer, const sg_btensor *ids, const sg_btensor *h)
{
	if (!m->xsrc.fetch)
		return m->xloc ? sg_error(SG_ERR_INVALID_ARG, "model: layer %d's experts were left on disk for an expert cache, and none is installed", layer)
			       : SG_OK;
	int64_t n = sg_btensor_rows(ids) * ids->ne[0];
	int32_t stackbuf[512], *v = n <= 512 ? stackbuf : sg_malloc(sizeof(int32_t) * (size_t)n);
	if (!v) return sg_error(SG_ERR_NOMEM, "expert ids of layer %d (%lld)", layer, (long long)n);
	/* the ids are on the host for a backend of host memory (the only kind with expert tables):
	 * the read is a copy, not a round trip */
	sg_status st = m->be->ops->read(m->be, ids, 0, v, sizeof(int32_t) * (size_t)n);
	if (!st) st = m->xsrc.fetch(m->xsrc.ctx, layer, v, n, h);
	if (v != stackbuf) sg_free(v);
	return st;
}

sg_status sg_model_bind_deferred_experts(sg_model *m)
{
	if (!m->xloc || m->xsrc.fetch) return m->xsrc.fetch ? sg_error(SG_ERR_INVALID_ARG, "model: its experts are read by a cache") : SG_OK;
	const sg_model_desc *d = &m->desc;
	size_t E = (size_t)d->n_expert;
	sg_btensor *bound = sg_calloc((size_t)d->n_layer * 3, sizeof *bound);
	if (!bound) return sg_error(SG_ERR_NOMEM, "model: binding the experts of %d layers", d->n_layer);
	sg_status st = SG_OK;
	for (int li = 0; li < d->n_layer && !st; li++) {
		if (!m->xloc_set[li]) continue;
		sg_layer_weights *lw = &m->layers[li];
		const sg_btensor *t[3] = {&lw->gate_exps, &lw->up_exps, &lw->down_exps};
		for (int p = 0; p < 3 && !st; p++) {
			const sg_expert_loc *lc = m->xloc + ((size_t)li * 3 + (size_t)p) * E;
			size_t len = (size_t)t[p]->ne[1] * t[p]->row_bytes;
			int contiguous = 1;
			for (size_t e = 0; e < E; e++) {
				const sg_mapped_file *f = &m->w->files[lc[e].file];
				if (!f->data || lc[e].offset > f->size || len > f->size - lc[e].offset) {
					st = sg_error(SG_ERR_FORMAT, "model: expert %zu of layer %d lies past the end of '%s'", e, li, f->path);
					break;
				}
				contiguous &= lc[e].file == lc[0].file && lc[e].offset == lc[0].offset + e * len;
			}
			sg_btensor *b = &bound[(size_t)li * 3 + (size_t)p];
			*b = *t[p];
			if (st) break;
			if (contiguous) { /* one stack in the file: bound as a load would bind it */
				b->data = (void *)(m->w->files[lc[0].file].data + lc[0].offset);
				st = m->be->ops->tensor_bind(m->be, b);
				continue;
			}
			/* one tensor per expert, or a fused gate_up's halves: copied into a stack (float types) */
			b->data = NULL;
			st = m->be->ops->tensor_alloc(m->be, t[p]->type, t[p]->ne, b);
			for (size_t e = 0; e < E && !st; e++) st = m->be->ops->write(m->be, b, e * len, m->w->files[lc[e].file].data + lc[e].offset, len);
		}
	}
	if (st) {
		for (size_t i = 0; i < (size_t)d->n_layer * 3; i++)
			if (bound[i].data) m->be->ops->tensor_free(m->be, &bound[i]);
		sg_free(bound);
		return st;
	}
	for (int li = 0; li < d->n_layer; li++) {
		if (!m->xloc_set[li]) continue;
		m->layers[li].gate_exps = bound[(size_t)li * 3];
		m->layers[li].up_exps = bound[(size_t)li * 3 + 1];
		m->layers[li].down_exps = bound[(size_t)li * 3 + 2];
	}
	sg_free(bound);
	sg_free(m->xloc);
	sg_free(m->xloc_set);
	m->xloc = NULL;
	m->xloc_set = NULL;
	m->defer_experts = 0;
	return SG_OK;
}

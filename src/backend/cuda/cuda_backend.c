/*
 * The CUDA backend's host side: the op table, shape checks (the CPU backend's, same messages),
 * device memory, weight upload and repacking, scratch and graph capture (the cuBLAS paths for
 * many tokens are in cuda_gemm.c, the weights' repacking in cuda_repack.c, the linear-attention and
 * Gemma 4 stage ops in cuda_hybrid.c). Kernels live in one
 * file a kind of stage behind cuda_kernels.h: cuda_gemv.cu, cuda_attn.cu and cuda_flash.cu,
 * cuda_moe.cu, cuda_norm.cu, cuda_dequant.cu and cuda_linear.cu (the linear-attention and Gemma 4
 * stages); which kernel a stage takes is the policy's (cuda_policy.h).
 *
 * Weight layouts on the device (row r at data + r * row_bytes, so row views keep working):
 *  - F32 / F16 / BF16, Q5_K, MLX affine (but 4-bit rows of 256 k): the file's bytes (Q5_K's
 *    176-byte blocks are multiples of 16, so 16-byte loads stay aligned).
 *  - Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: per row, all the blocks' codes first, then their high bits,
 *    scales and minima as separate runs (the 18..34-byte blocks would misalign every wide load),
 *    the row padded to 16 bytes.
 *  - Q4_K, Q6_K, and MLX 4-bit rows of a multiple of 256 elements: planar rows (sg_cuda_repack_kq,
 *    cuda_repack.c). A block's 16-byte pieces of codes are spread
 *    over planes, piece p of block b at (p * nb + b) * 16 (nb blocks a row), then the small
 *    fields of every block as runs. The decode GEMV gives each lane a whole block: lane b's p-th
 *    load and lane b+1's are neighbours, so a warp's every load is one contiguous run (the file's
 *    interleaved blocks made each lane's loads 144 or 210 bytes apart). Same bytes as the file
 *    (Q6_K rounded up to 16 a row, instead of 224-byte blocks: 6.7% fewer bytes than before).
 */
#include "backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_policy.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"

/* --- scratch --- */

void *sg_cuda_scratch(sg_cuda_backend *cb, size_t n, sg_status *st)
{
	*st = SG_OK;
	if (n <= cb->scratch_cap) return cb->scratch;
	if (cb->capturing) {
		*st = sg_error(SG_ERR_INVALID_ARG, "cuda: %zu bytes of scratch needed while recording a graph "
				"(run the step once before recording it)", n);
		return NULL;
	}
	size_t cap = n + n / 4 + (1u << 20);
	void *p = NULL;
	cudaFree(cb->scratch); /* waits for the queued work that may still use it */
	cb->scratch = NULL;
	cb->scratch_cap = 0;
	int e = (int)cudaMalloc(&p, cap);
	if (e) {
		(void)cudaGetLastError(); /* not sticky: clear it, or the next launch check reports it */
		*st = sg_error(SG_ERR_NOMEM, "cuda: %zu bytes of scratch: %s", cap, cudaGetErrorString((cudaError_t)e));
		return NULL;
	}
	cb->scratch = p;
	cb->scratch_cap = cap;
	cb->scratch_gen++;
	return p;
}

/* --- weight formats --- */

static sg_cukt cukt_of(const sg_btensor *t)
{
	switch (t->type) {
	case SG_TYPE_F32: return SG_CUKT_F32;
	case SG_TYPE_F16: return SG_CUKT_F16;
	case SG_TYPE_BF16: return SG_CUKT_BF16;
	case SG_TYPE_Q8_0: return SG_CUKT_Q8_0;
	case SG_TYPE_Q4_0: return SG_CUKT_Q4_0;
	case SG_TYPE_Q4_1: return SG_CUKT_Q4_1;
	case SG_TYPE_Q5_0: return SG_CUKT_Q5_0;
	case SG_TYPE_Q5_1: return SG_CUKT_Q5_1;
	case SG_TYPE_Q4_K: return SG_CUKT_Q4_K;
	case SG_TYPE_Q5_K: return SG_CUKT_Q5_K;
	case SG_TYPE_Q6_K: return SG_CUKT_Q6_K;
	case SG_TYPE_MLX_AFFINE:
		if (t->mlx.group != 32 && t->mlx.group != 64 && t->mlx.group != 128) return SG_CUKT_NONE;
		if (t->mlx.sb_type != SG_TYPE_BF16 && t->mlx.sb_type != SG_TYPE_F16) return SG_CUKT_NONE;
		return t->mlx.bits == 4 ? SG_CUKT_MLX4 : t->mlx.bits == 6 ? SG_CUKT_MLX6 : t->mlx.bits == 8 ? SG_CUKT_MLX8 : SG_CUKT_NONE;
	default: return SG_CUKT_NONE;
	}
}

static int is_legacy(sg_cukt kt) { return kt >= SG_CUKT_Q8_0 && kt <= SG_CUKT_Q5_1; }
static int is_plain(sg_cukt kt) { return kt <= SG_CUKT_BF16; }

/* Elements a row length must be a multiple of for the type's kernels. */
static int64_t k_multiple(sg_cukt kt, const sg_btensor *t)
{
	if (is_plain(kt)) return 1;
	if (kt == SG_CUKT_Q4_K || kt == SG_CUKT_Q5_K || kt == SG_CUKT_Q6_K) return 256;
	if (kt >= SG_CUKT_MLX4) return t->mlx.group;
	return 32;
}

/* File bytes of one row, and the device's. */
static size_t file_row_bytes(sg_cukt kt, const sg_btensor *t)
{
	if (kt >= SG_CUKT_MLX4) return (size_t)t->ne[0] / 8 * (size_t)t->mlx.bits;
	return sg_type_row_bytes(t->type, t->ne[0]);
}

static size_t dev_row_bytes(sg_cukt kt, const sg_btensor *t)
{
	if (is_legacy(kt) || kt == SG_CUKT_Q6_K) return round16(file_row_bytes(kt, t));
	return file_row_bytes(kt, t);
}

/* MLX 4-bit rows are planar when they hold whole 256-blocks and nobody asked for the file's order
 * (sg_btensor.layout -1: the rows will be viewed as shorter ones, which the planes would not survive). */
static int planar_mlx4(sg_cukt kt, const sg_btensor *t) { return kt == SG_CUKT_MLX4 && t->ne[0] % 256 == 0 && t->layout != -1; }

/* The kernels' view of a bound weight tensor. */
sg_status sg_cuda_wview(const char *op, const sg_btensor *w, sg_cuw *v)
{
	memset(v, 0, sizeof(*v));
	sg_cukt kt = cukt_of(w);
	if (kt == SG_CUKT_NONE || !w->data)
		return sg_error(SG_ERR_UNSUPPORTED, "cuda %s: weights of type %s have no GPU kernel", op, tname(w->type));
	v->kt = kt;
	v->K = w->ne[0];
	v->data = w->data;
	v->row_bytes = w->row_bytes;
	v->planar = w->layout == 1;
	v->matmul_only = w->layout == SG_LAYOUT_MATMUL_ONLY;
	if (kt >= SG_CUKT_MLX4) {
		v->group = w->mlx.group;
		v->gsh = -1;
		for (int sh = 0; sh < 16; sh++)
			if (32 << sh == v->group) v->gsh = sh;
		v->sb_bf16 = w->mlx.sb_type == SG_TYPE_BF16;
		v->scales = w->scales;
		v->biases = w->biases;
		v->sb_row_bytes = sg_btensor_mlx_sb_row_bytes(w);
	}
	return SG_OK;
}

sg_status sg_cuda_weight_view(const sg_btensor *w, sg_cuw *out) { return sg_cuda_wview("weight_view", w, out); }

/* --- memory --- */

static size_t plain_size(sg_type t)
{
	switch (t) {
	case SG_TYPE_F32: case SG_TYPE_I32: return 4;
	case SG_TYPE_F16: case SG_TYPE_BF16: return 2;
	default: return 0;
	}
}

static sg_status cuda_tensor_alloc(sg_backend *be, sg_type type, const int64_t ne[4], sg_btensor *out)
{
	memset(out, 0, sizeof(*out));
	size_t es = plain_size(type);
	if (!es) return sg_error(SG_ERR_UNSUPPORTED, "cuda tensor_alloc: type %s cannot be allocated (F32, F16, BF16, I32 only)", tname(type));
	size_t n = 1;
	for (int i = 0; i < 4; i++) {
		if (ne[i] < 1) return sg_error(SG_ERR_INVALID_ARG, "cuda tensor_alloc: ne[%d] = %lld < 1", i, (long long)ne[i]);
		if (n > SIZE_MAX / 64 / (size_t)ne[i]) return sg_error(SG_ERR_NOMEM, "cuda tensor_alloc: tensor too large");
		n *= (size_t)ne[i];
		out->ne[i] = ne[i];
	}
	void *p = NULL;
	size_t bytes = round16(n * es);
	int e = (int)cudaMalloc(&p, bytes);
	if (e) {
		(void)cudaGetLastError(); /* an out-of-memory is not sticky (snapshots fall back to the host) */
		return sg_error(SG_ERR_NOMEM, "cuda tensor_alloc: %zu bytes: %s", bytes, cudaGetErrorString((cudaError_t)e));
	}
	/* on the backend's stream: the legacy stream is not ordered with it */
	e = (int)cudaMemsetAsync(p, 0, bytes, ((sg_cuda_backend *)be)->stream);
	if (e) {
		cudaFree(p);
		return cu_fail("tensor_alloc", e);
	}
	out->type = type;
	out->row_bytes = (size_t)ne[0] * es;
	out->data = p;
	out->owned = 1;
	return SG_OK;
}

/* Copies go on the backend's stream (ordered with the ops); from pageable memory a copy returns
 * once its source is staged, so the staging buffer may be refilled at once. */
static sg_status upload_rows(cudaStream_t s, sg_cukt kt, const sg_btensor *t, int64_t rows, size_t src_rb, size_t dst_rb, uint8_t *dev)
{
	if (!is_legacy(kt) && kt != SG_CUKT_Q6_K && kt != SG_CUKT_Q4_K && !planar_mlx4(kt, t))
		return cudaMemcpyAsync(dev, t->data, src_rb * (size_t)rows, cudaMemcpyHostToDevice, s) ? cu_fail("tensor_bind", (int)cudaGetLastError()) : SG_OK;
	/* repack through a bounded host buffer */
	int64_t chunk = (int64_t)((16u << 20) / dst_rb);
	if (chunk < 1) chunk = 1;
	if (chunk > rows) chunk = rows;
	uint8_t *buf = sg_malloc(dst_rb * (size_t)chunk);
	if (!buf) return sg_error(SG_ERR_NOMEM, "cuda tensor_bind: %zu bytes of staging", dst_rb * (size_t)chunk);
	sg_status st = SG_OK;
	for (int64_t r0 = 0; r0 < rows && !st; r0 += chunk) {
		int64_t nr = rows - r0 < chunk ? rows - r0 : chunk;
		for (int64_t r = 0; r < nr; r++)
			sg_cuda_repack_row(kt, t->ne[0], (const uint8_t *)t->data + (size_t)(r0 + r) * src_rb, buf + (size_t)r * dst_rb, dst_rb);
		int e = (int)cudaMemcpyAsync(dev + (size_t)r0 * dst_rb, buf, dst_rb * (size_t)nr, cudaMemcpyHostToDevice, s);
		if (e) st = cu_fail("tensor_bind", e);
	}
	sg_free(buf);
	return st;
}

static sg_status cuda_tensor_bind(sg_backend *be, sg_btensor *t)
{
	if (!t->data) return sg_error(SG_ERR_INVALID_ARG, "cuda tensor_bind: no data");
	for (int i = 1; i < 4; i++)
		if (t->ne[i] < 1) t->ne[i] = 1;
	int64_t rows = sg_btensor_rows(t);
	size_t src_rb, dst_rb, sb_bytes = 0;
	sg_cukt kt = SG_CUKT_NONE;
	if (t->type == SG_TYPE_I32) {
		src_rb = dst_rb = (size_t)t->ne[0] * 4;
	} else {
		kt = cukt_of(t);
		if (kt == SG_CUKT_NONE) {
			if (t->type == SG_TYPE_MLX_AFFINE)
				return sg_error(SG_ERR_UNSUPPORTED, "cuda: MLX affine weights of %d bits, group %d, %s scales have no GPU kernel "
						"(4, 6 or 8 bits, group 32/64/128, bf16 or f16 scales)", t->mlx.bits, t->mlx.group, tname(t->mlx.sb_type));
			return sg_error(SG_ERR_UNSUPPORTED, "cuda: weights of type %s have no GPU kernel (F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
					"Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MLX 4/6/8-bit)", tname(t->type));
		}
		int64_t km = k_multiple(kt, t);
		if ((kt == SG_CUKT_Q4_K || kt == SG_CUKT_Q6_K) && t->layout == -1)
			return sg_error(SG_ERR_UNSUPPORTED, "cuda: %s rows viewed as shorter rows have no GPU layout (the rows are planar)", tname(t->type));
		if (t->ne[0] < 1 || t->ne[0] % km)
			return sg_error(SG_ERR_INVALID_ARG, "cuda: %s rows of %lld elements (must be a multiple of %lld)", tname(t->type),
					(long long)t->ne[0], (long long)km);
		if (kt >= SG_CUKT_MLX4) {
			if (!t->scales || !t->biases) return sg_error(SG_ERR_INVALID_ARG, "cuda: MLX weights without scales or biases");
			sb_bytes = sg_btensor_mlx_sb_row_bytes(t) * (size_t)rows;
		}
		src_rb = file_row_bytes(kt, t);
		dst_rb = dev_row_bytes(kt, t);
	}
	size_t wbytes = round16(dst_rb * (size_t)rows);
	size_t total = wbytes + 2 * round16(sb_bytes);
	uint8_t *dev = NULL;
	int e = (int)cudaMalloc((void **)&dev, total ? total : 16);
	if (e) {
		(void)cudaGetLastError();
		return sg_error(SG_ERR_NOMEM, "cuda tensor_bind: %zu bytes of %s weights: %s", total, tname(t->type), cudaGetErrorString((cudaError_t)e));
	}
	cudaStream_t strm = ((sg_cuda_backend *)be)->stream;
	sg_status st = upload_rows(strm, kt, t, rows, src_rb, dst_rb, dev);
	if (!st && sb_bytes) {
		uint8_t *ds = dev + wbytes, *db = ds + round16(sb_bytes);
		if (cudaMemcpyAsync(ds, t->scales, sb_bytes, cudaMemcpyHostToDevice, strm) ||
		    cudaMemcpyAsync(db, t->biases, sb_bytes, cudaMemcpyHostToDevice, strm))
			st = cu_fail("tensor_bind", (int)cudaGetLastError());
		t->scales = ds;
		t->biases = db;
	}
	if (st) {
		cudaStreamSynchronize(strm);
		cudaFree(dev);
		return st;
	}
	t->data = dev;
	t->row_bytes = dst_rb;
	t->owned = 1; /* scales and biases live in the same allocation */
	/* planar rows; an encoder's weight keeps its matmul-only mark (gemm_x3_one keeps its split) */
	if (kt == SG_CUKT_Q4_K || kt == SG_CUKT_Q6_K || planar_mlx4(kt, t)) t->layout = 1;
	else if (t->layout != SG_LAYOUT_MATMUL_ONLY) t->layout = 0;
	return SG_OK;
}

/* --- experts in device slots (the engine's expert slot cache) --- */

/* The layout an expert stack takes here, as tensor_bind would give it (MLX weights are not read
 * from slots); SG_CUKT_NONE when the stack's type or row length has none. */
static sg_cukt slot_kt(const sg_btensor *w)
{
	sg_cukt kt = cukt_of(w);
	if (kt == SG_CUKT_NONE || kt >= SG_CUKT_MLX4 || w->layout == -1 || w->ne[0] < 1 || w->ne[0] % k_multiple(kt, w)) return SG_CUKT_NONE;
	return kt;
}

static size_t cuda_expert_bytes(sg_backend *be, const sg_btensor *w)
{
	(void)be;
	sg_cukt kt = slot_kt(w);
	return kt == SG_CUKT_NONE ? 0 : dev_row_bytes(kt, w) * (size_t)w->ne[1];
}

static sg_status cuda_expert_upload(sg_backend *be, const sg_btensor *w, const void *src, void *dst)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_cukt kt = slot_kt(w);
	if (kt == SG_CUKT_NONE) return sg_error(SG_ERR_UNSUPPORTED, "cuda expert_upload: %s experts cannot be read from slots", tname(w->type));
	if (!src || !dst) return sg_error(SG_ERR_INVALID_ARG, "cuda expert_upload: no %s", src ? "destination" : "source");
	if (cb->capturing) return sg_error(SG_ERR_INVALID_ARG, "cuda expert_upload: not allowed while recording a graph");
	int64_t rows = w->ne[1];
	size_t src_rb = file_row_bytes(kt, w), dst_rb = dev_row_bytes(kt, w), n = src_rb * (size_t)rows;
	sg_cu_fields f;
	int repack = !sg_cuda_repack_fields(kt, &f);
	if (repack && (!cb->xrepack || rows > 65535)) { /* the host's repack, through pageable memory */
		sg_btensor t = *w;
		t.data = (void *)src;
		t.ne[2] = t.ne[3] = 1;
		return upload_rows(cb->stream, kt, &t, rows, src_rb, dst_rb, dst);
	}
	/* the file's bytes in one copy (a DMA when src is pinned: sg_backend_ops.host_pin), then the
	 * repack on the device */
	uint8_t *to = dst;
	if (repack) {
		if (n > cb->xstage_cap) {
			cudaFree(cb->xstage); /* waits for the queued work that may still read it */
			cb->xstage = NULL;
			cb->xstage_cap = 0;
			if (cudaMalloc((void **)&cb->xstage, n)) {
				(void)cudaGetLastError();
				return sg_error(SG_ERR_NOMEM, "cuda expert_upload: %zu bytes of staging", n);
			}
			cb->xstage_cap = n;
		}
		to = cb->xstage;
	}
	CU_RET("expert_upload", cudaMemcpyAsync(to, src, n, cudaMemcpyHostToDevice, cb->stream));
	if (repack) CU_RET("expert_upload", sg_cu_repack_rows(to, src_rb, rows, w->ne[0] / (kt == SG_CUKT_Q4_K || kt == SG_CUKT_Q6_K ? 256 : 32), f, dst, dst_rb, S(cb)));
	/* src is the caller's again on return (a copy from pinned memory is still in flight here) */
	CU_RET("expert_upload", cudaStreamSynchronize(cb->stream));
	return SG_OK;
}

static sg_status cuda_host_pin(sg_backend *be, void *p, size_t n, int pin)
{
	(void)be;
	if (!pin) {
		(void)cudaHostUnregister(p);
		(void)cudaGetLastError();
		return SG_OK;
	}
	int e = (int)cudaHostRegister(p, n, cudaHostRegisterDefault);
	if (e) {
		(void)cudaGetLastError();
		return sg_error(SG_ERR_UNSUPPORTED, "cuda host_pin: %zu bytes: %s", n, cudaGetErrorString((cudaError_t)e));
	}
	return SG_OK;
}

/* The kernels' view of an expert stack read through device slots: expert s of the view is slot
 * s of the pool (*E the slot count), and ids renumbered from experts to slots in cb->slot_ids
 * (*sids, n values). */
static sg_status slot_view(sg_cuda_backend *cb, const char *op, const sg_btensor *w, const sg_btensor *ids, sg_cuw *v, int64_t *E,
			   const int32_t **sids)
{
	const sg_expert_table *t = w->experts;
	sg_cukt kt = slot_kt(w);
	if (!t->slot || !t->base)
		return sg_error(SG_ERR_UNSUPPORTED, "cuda %s: experts behind a table of host pointers (this backend reads device slots)", op);
	if (t->n_expert != w->ne[2] || t->n_slots < 1 || kt == SG_CUKT_NONE)
		return sg_error(SG_ERR_INVALID_ARG, "cuda %s: a slot table of %lld experts for a %s stack of %lld", op, (long long)t->n_expert,
				tname(w->type), (long long)w->ne[2]);
	if (t->n_slots > 4096) return sg_error(SG_ERR_UNSUPPORTED, "cuda %s: %lld expert slots (at most 4096)", op, (long long)t->n_slots);
	sg_btensor b = *w;
	b.data = (void *)t->base;
	b.row_bytes = dev_row_bytes(kt, w);
	b.layout = kt == SG_CUKT_Q4_K || kt == SG_CUKT_Q6_K ? 1 : 0;
	b.experts = NULL;
	sg_status st = sg_cuda_wview(op, &b, v);
	if (st) return st;
	v->expert_bytes = t->stride;
	int64_t n = nvals(ids);
	if (n > cb->slot_ids_cap) {
		if (cb->capturing) return sg_error(SG_ERR_INVALID_ARG, "cuda %s: expert slots while recording a graph", op);
		cudaFree(cb->slot_ids); /* waits for the queued work that may still read it */
		cb->slot_ids = NULL;
		cb->slot_ids_cap = 0;
		int64_t cap = n < 1024 ? 1024 : n;
		if (cudaMalloc((void **)&cb->slot_ids, sizeof(int32_t) * (size_t)cap)) {
			(void)cudaGetLastError();
			return sg_error(SG_ERR_NOMEM, "cuda %s: %lld expert slot ids", op, (long long)cap);
		}
		cb->slot_ids_cap = cap;
	}
	CU_RET(op, sg_cu_moe_slot_ids(ids->data, n, t->slot, t->n_expert, cb->slot_ids, S(cb)));
	*E = t->n_slots;
	*sids = cb->slot_ids;
	return SG_OK;
}

static void cuda_tensor_free(sg_backend *be, sg_btensor *t)
{
	if (t && t->owned && t->layout == SG_LAYOUT_MATMUL_ONLY) sg_cuda_x3_forget((sg_cuda_backend *)be, t->data);
	if (t && t->owned) cudaFree(t->data);
	if (t) memset(t, 0, sizeof(*t));
}

static size_t tensor_bytes(const sg_btensor *t) { return (size_t)sg_btensor_rows(t) * t->row_bytes; }

static sg_status cuda_write(sg_backend *be, sg_btensor *t, size_t off, const void *src, size_t n)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	if (off > tensor_bytes(t) || n > tensor_bytes(t) - off)
		return sg_error(SG_ERR_RANGE, "cuda write: %zu bytes at %zu past %zu", n, off, tensor_bytes(t));
	if (cb->capturing) return sg_error(SG_ERR_INVALID_ARG, "cuda write: not allowed while recording a graph");
	/* from pageable memory the copy has staged src when the call returns, so src is free again */
	CU_RET("write", cudaMemcpyAsync((char *)t->data + off, src, n, cudaMemcpyHostToDevice, cb->stream));
	cb->pos_ptr = NULL;
	if (t->type == SG_TYPE_I32 && off % 4 == 0 && n % 4 == 0 && n) {
		int32_t mx = INT32_MIN;
		for (size_t i = 0; i < n / 4; i++) {
			int32_t v;
			memcpy(&v, (const char *)src + 4 * i, 4);
			if (v > mx) mx = v;
		}
		cb->pos_ptr = (char *)t->data + off;
		cb->pos_n = (int64_t)(n / 4);
		cb->pos_max = mx;
	}
	return SG_OK;
}

static sg_status cuda_read(sg_backend *be, const sg_btensor *t, size_t off, void *dst, size_t n)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	if (off > tensor_bytes(t) || n > tensor_bytes(t) - off)
		return sg_error(SG_ERR_RANGE, "cuda read: %zu bytes at %zu past %zu", n, off, tensor_bytes(t));
	if (cb->capturing) return sg_error(SG_ERR_INVALID_ARG, "cuda read: not allowed while recording a graph");
	CU_RET("read", cudaMemcpyAsync(dst, (const char *)t->data + off, n, cudaMemcpyDeviceToHost, cb->stream));
	CU_RET("read", cudaStreamSynchronize(cb->stream));
	return SG_OK;
}

/* Device to device on the backend's stream: ordered with the kernels, no host round trip. */
static sg_status cuda_copy(sg_backend *be, const sg_btensor *src, size_t src_off, sg_btensor *dst, size_t dst_off, size_t n)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	if (src_off > tensor_bytes(src) || n > tensor_bytes(src) - src_off || dst_off > tensor_bytes(dst) || n > tensor_bytes(dst) - dst_off)
		return sg_error(SG_ERR_RANGE, "cuda copy: %zu bytes from %zu of %zu to %zu of %zu", n, src_off, tensor_bytes(src), dst_off,
				tensor_bytes(dst));
	if (n) CU_RET("copy", cudaMemcpyAsync((char *)dst->data + dst_off, (const char *)src->data + src_off, n, cudaMemcpyDeviceToDevice, cb->stream));
	return SG_OK;
}

static sg_status cuda_sync(sg_backend *be)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	CU_RET("sync", cudaStreamSynchronize(cb->stream));
	return SG_OK;
}

/* Free and total bytes of the backend's device, as the runtime sees them (other processes' and
 * contexts' allocations included). */
static sg_status cuda_mem_info(sg_backend *be, uint64_t *free_bytes, uint64_t *total_bytes)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	size_t f = 0, t = 0;
	*free_bytes = *total_bytes = 0;
	CU_RET("mem_info", cudaSetDevice(cb->device));
	CU_RET("mem_info", cudaMemGetInfo(&f, &t));
	*free_bytes = f;
	*total_bytes = t;
	return SG_OK;
}

/* --- matmul --- */

/* The one-token 8-bit hand-over buffer (q8a) holds K values: grown outside graph recordings only
 * (the per-op step before a recording sizes it). */
static int q8a_fit(sg_cuda_backend *cb, int64_t K)
{
	if (K > cb->q8a_cap && !cb->capturing) {
		cudaFree(cb->q8a);
		cb->q8a = NULL, cb->q8a_cap = 0;
		if (!cudaMalloc(&cb->q8a, sg_cu_q8_bytes(1, K)))
			cb->q8a_cap = K;
		else
			(void)cudaGetLastError();
	}
	return K <= cb->q8a_cap;
}

sg_status sg_cuda_check_x(const char *op, const sg_btensor *x, const sg_btensor *w, const sg_cuw *v)
{
	int64_t K = w->ne[0];
	sg_status st = check_f32(op, "x", x);
	if (st) return st;
	if (x->ne[0] != K)
		return sg_error(SG_ERR_INVALID_ARG, "cuda %s: x has %lld columns, weights %lld", op, (long long)x->ne[0], (long long)K);
	if (K % sg_cu_unit_elems(v->kt))
		return sg_error(SG_ERR_UNSUPPORTED, "cuda %s: %lld columns of %s weights (the GPU kernels need a multiple of %d)", op,
				(long long)K, tname(w->type), sg_cu_unit_elems(v->kt));
	if ((uintptr_t)x->data & 15) return sg_error(SG_ERR_INVALID_ARG, "cuda %s: x is not 16-byte aligned", op);
	return SG_OK;
}

sg_status sg_cuda_matmul(sg_backend *be, const sg_btensor *w, const sg_btensor *x, const sg_btensor *bias, sg_btensor *y)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_cuw v;
	sg_status st = sg_cuda_wview("matmul", w, &v);
	if (st || (st = sg_cuda_check_x("matmul", x, w, &v)) || (st = check_f32("matmul", "y", y))) return st;
	int64_t N = sg_btensor_rows(w), n = sg_btensor_rows(x);
	if (y->ne[0] != N || sg_btensor_rows(y) != n)
		return sg_error(SG_ERR_INVALID_ARG, "cuda matmul: y is [%lld][%lld], expected [%lld][%lld]", (long long)sg_btensor_rows(y),
				(long long)y->ne[0], (long long)n, (long long)N);
	if (bias && ((st = check_f32("matmul", "bias", bias)) || bias->ne[0] != N))
		return st ? st : sg_error(SG_ERR_INVALID_ARG, "cuda matmul: bias has %lld values, expected %lld", (long long)bias->ne[0], (long long)N);
	const float *b = bias ? bias->data : NULL;
	if (cb->exact && n > 1) { /* each token as a one-token step takes it */
		void *q8 = NULL;
		size_t qb = sg_cu_q8_bytes(1, v.K);
		if (cb->q8x && sg_cu_has_q8(v.kt) && !(q8 = sg_cuda_scratch(cb, qb * (size_t)n, &st))) return st;
		for (int64_t t = 0; t < n; t += cb->verify_batch ? n : 1) {
			int64_t nt = cb->verify_batch ? n : 1;
			CU_RET("matmul", sg_cu_gemv_exact(&v, (const float *)x->data + t * v.K, nt, (float *)y->data + t * N, N, b, q8, S(cb)));
		}
		return SG_OK;
	}
	/* cuBLAS is created outside a graph recording (its set-up allocates) */
	if (n > GEMV_MAX_TOKENS && cb->gemm && N <= INT32_MAX && w->ne[0] <= INT32_MAX && (cb->blas_state > 0 || (!cb->capturing && sg_cuda_blas_ready(cb))))
		return sg_cuda_gemm(cb, &v, x->data, n, y->data, N, b);
	void *q8 = NULL;
	if (cb->q8x && sg_cu_has_q8(v.kt) && !(q8 = sg_cuda_scratch(cb, sg_cu_q8_bytes(n, v.K), &st))) return st;
	CU_RET("matmul", sg_cu_gemv(&v, x->data, n, y->data, N, b, q8, S(cb)));
	return SG_OK;
}

sg_status sg_cuda_multi_check(const sg_matmul_multi *p, int i, const sg_cuw *v, int64_t n)
{
	const int64_t N = sg_btensor_rows(p->w[i]);
	const sg_btensor *b = p->bias[i];
	sg_status st;
	if ((st = sg_cuda_check_x("matmul", p->x, p->w[i], v)) || (st = check_f32("matmul", "y", p->y[i]))) return st;
	if (p->y[i]->ne[0] != N || sg_btensor_rows(p->y[i]) != n)
		return sg_error(SG_ERR_INVALID_ARG, "cuda matmul_multi: output %d is [%lld][%lld], expected [%lld][%lld]", i,
				(long long)sg_btensor_rows(p->y[i]), (long long)p->y[i]->ne[0], (long long)n, (long long)N);
	if (b && ((st = check_f32("matmul", "bias", b)) || b->ne[0] != N))
		return st ? st : sg_error(SG_ERR_INVALID_ARG, "cuda matmul_multi: bias %d has %lld values, expected %lld", i, (long long)b->ne[0],
					  (long long)N);
	return SG_OK;
}

/* Two weights one fused launch can share: same kernel format and row decoding. */
static int same_fmt(const sg_cuw *a, const sg_cuw *b) { return a->kt == b->kt && a->K == b->K && a->group == b->group && a->sb_bf16 == b->sb_bf16; }

/*
 * The fused stage for one token: a norm + activation-quantizing kernel and one GEMV launch over
 * every matrix (sg_cu_gemv_multi). Stores to matrices of several 8-bit-activation formats (q, k,
 * v of a Q4_K_M file, whose v is Q6_K in half the layers) take one launch per run of one format,
 * the later ones reading the activations the first one rounded. Everything else (many tokens,
 * other mixed formats, quantized weights without SARAGOSSA_CUDA_Q8X, whose exact path is the f32
 * GEMV) is the composition.
 */
/* An exact step's stage (match_decode) one token at a time: each through the one-token path. */
static sg_status multi_tokens(sg_backend *be, const sg_matmul_multi *p, int64_t n)
{
	for (int64_t t = 0; t < n; t++) {
		sg_matmul_multi q = *p;
		sg_btensor x = sg_btensor_rows_view(p->x, t, 1), xn, y[SG_MATMUL_MULTI_MAX], res, out;
		q.x = &x;
		if (p->xn) xn = sg_btensor_rows_view(p->xn, t, 1), q.xn = &xn;
		if (p->residual) res = sg_btensor_rows_view(p->residual, t, 1), q.residual = &res;
		if (p->out) out = sg_btensor_rows_view(p->out, t, 1), q.out = &out;
		for (int i = 0; i < p->nw; i++) y[i] = sg_btensor_rows_view(p->y[i], t, 1), q.y[i] = &y[i];
		sg_status st = be->ops->matmul_multi(be, &q);
		if (st) return st;
	}
	return SG_OK;
}

static sg_status cuda_matmul_multi(sg_backend *be, const sg_matmul_multi *p)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	/* an exact step's tokens: one launch over all (the one-token kernels, a grid of tokens), or
	 * one at a time where the stage hands its rounded x to the experts */
	const int64_t n = sg_btensor_rows(p->x);
	if (n > 1 && cb->exact && (!cb->verify_batch || p->feeds_moe || n > INT32_MAX)) return multi_tokens(be, p, n);
	if (n > GEMV_MAX_TOKENS && !cb->exact && p->nw > 1 && p->nw <= SG_CUDA_SHARED_MAX && !p->norm && !p->glu && !p->residual) {
		int done = 0;
		sg_status st = sg_cuda_matmul_shared_x(cb, p, n, &done);
		if (st || done) return st;
	}
	if (!cb->fused || p->nw < 1 || p->nw > SG_MATMUL_MULTI_MAX || (n != 1 && !cb->exact)) return sg_backend_matmul_multi_compose(be, p);
	if ((p->glu && p->nw != 2) || (p->residual && (p->nw != 1 || !p->out)) || (p->norm && !p->xn)) return sg_backend_matmul_multi_compose(be, p);
	sg_cu_multi m;
	memset(&m, 0, sizeof(m));
	m.nw = p->nw;
	m.epi = p->glu ? SG_CU_EPI_GLU : p->residual ? SG_CU_EPI_ADD : SG_CU_EPI_STORE;
	m.act = p->act == SG_ACT_SILU ? SG_CU_EW_SILU : p->act == SG_ACT_GELU_TANH ? SG_CU_EW_GELU : SG_CU_EW_GELU_ERF;
	if (p->glu && p->act != SG_ACT_SILU && p->act != SG_ACT_GELU_TANH && p->act != SG_ACT_GELU) return sg_backend_matmul_multi_compose(be, p);
	sg_status st;
	for (int i = 0; i < p->nw; i++) {
		const sg_btensor *w = p->w[i], *b = p->bias[i];
		if (sg_cuda_wview("matmul", w, &m.w[i]) != SG_OK) return sg_backend_matmul_multi_compose(be, p);
		m.N[i] = sg_btensor_rows(w);
		if (!same_fmt(&m.w[i], &m.w[0]) &&
		    (p->glu || p->residual || !cb->q8x || m.w[i].K != m.w[0].K || !sg_cu_has_q8(m.w[i].kt) || !sg_cu_has_q8(m.w[0].kt) ||
		     !sg_cu_multi_ok(m.w[i].kt)))
			return sg_backend_matmul_multi_compose(be, p);
		if ((st = sg_cuda_multi_check(p, i, &m.w[i], n))) return st;
		m.bias[i] = b ? b->data : NULL;
		m.y[i] = p->y[i]->data;
	}
	int kt = m.w[0].kt, plain = kt == SG_CUKT_F32 || kt == SG_CUKT_F16 || kt == SG_CUKT_BF16;
	if (!sg_cu_multi_ok(kt) || (!plain && !cb->q8x) || (p->glu && m.N[0] != m.N[1])) return sg_backend_matmul_multi_compose(be, p);
	if (p->residual) {
		if ((st = check_same("matmul_multi", p->residual, p->out)) || (st = check_f32("matmul_multi", "out", p->out))) return st;
		if (p->out->ne[0] != m.N[0]) return sg_error(SG_ERR_INVALID_ARG, "cuda matmul_multi: residual width %lld, expected %lld", (long long)p->out->ne[0], (long long)m.N[0]);
		m.res = p->residual->data;
		m.y[0] = p->out->data;
	}
	if (p->norm && ((st = check_f32("rmsnorm", "w", p->norm)) || (st = check_same("rmsnorm", p->x, p->xn)) || p->norm->ne[0] != p->x->ne[0]))
		return st ? st : sg_error(SG_ERR_INVALID_ARG, "cuda matmul_multi: norm weight of %lld values for rows of %lld", (long long)p->norm->ne[0],
					  (long long)p->x->ne[0]);
	void *q8 = NULL;
	const float *x = p->x->data;
	int64_t K = m.w[0].K;
	/* the normalised x handed to the MoE experts after the router, rounded once (the 512-thread
	 * norm kernel's sizes) */
	int moe_q8 = n == 1 && p->feeds_moe && p->norm && cb->q8x && K % 32 == 0 && K >= 1024 && q8a_fit(cb, K);
	m.ntok = (int)n;
	if (!plain && n == 1 && p->x_fed && !p->norm && cb->q8a_of && cb->q8a_of == p->x->data && K <= cb->q8a_cap) {
		q8 = cb->q8a, x = NULL; /* quantized by the attention just before */
	} else if (moe_q8) {
		q8 = cb->q8a;
	} else if (!plain && !(q8 = sg_cuda_scratch(cb, sg_cu_q8_bytes(1, K) * (size_t)n, &st))) {
		return st;
	}
	cb->q8a_of = NULL;
	int norm = p->norm != NULL;
	if (moe_q8 && plain) { /* normalised and rounded by one kernel; the plain GEMV reads xn */
		CU_RET("matmul_multi",
		       sg_cu_norm_quant(x, p->norm->data, p->eps, p->norm_offset, K, p->xn->data, q8, S(cb)));
		x = p->xn->data, norm = 0;
	}
	/* Q4_K and Q6_K matrices in one launch where the kernel takes both (SARAGOSSA_CUDA_GEMV_MIXED),
	 * else runs of one format; the first rounds x, the rest reuse it */
	int mixed = sg_cu_gemv_mixed_ok(&m);
	for (int i0 = 0, i1; i0 < m.nw; i0 = i1) {
		for (i1 = i0 + 1; i1 < m.nw && (mixed || same_fmt(&m.w[i1], &m.w[i0]));) i1++;
		sg_cu_multi g = m;
		g.nw = i1 - i0;
		for (int j = 0; j < g.nw; j++) g.w[j] = m.w[i0 + j], g.N[j] = m.N[i0 + j], g.bias[j] = m.bias[i0 + j], g.y[j] = m.y[i0 + j];
		int first = i0 == 0;
		CU_RET("matmul_multi",
		       sg_cu_gemv_multi(&g, first ? x : NULL, first && norm, p->norm ? p->norm->data : NULL,
		                        p->eps, p->norm_offset, p->xn ? p->xn->data : NULL, q8, S(cb)));
	}
	if (moe_q8) cb->q8a_of = p->xn->data;
	return SG_OK;
}

/* An exact step's expert op (match_decode) one token at a time: x of n rows (glu: always) or n * k,
 * g / u (moe_matmul: y) of n * k rows. -1: the shapes do not split so (the op's checks report it). */
static int moe_tokens(sg_backend *be, const sg_btensor *wg, const sg_btensor *wu, const sg_btensor *x, const sg_btensor *ids, sg_act act,
		      sg_btensor *g, sg_btensor *u, sg_status *st)
{
	int64_t n = sg_btensor_rows(ids), k = ids->ne[0], nx = sg_btensor_rows(x), xr = nx == n ? 1 : k;
	if ((nx != n && (wu || nx != n * k)) || sg_btensor_rows(g) != n * k || (u && sg_btensor_rows(u) != n * k)) return -1;
	*st = SG_OK;
	for (int64_t t = 0; t < n && !*st; t++) {
		sg_btensor xt = sg_btensor_rows_view(x, t * xr, xr), it = sg_btensor_rows_view(ids, t, 1), gt = sg_btensor_rows_view(g, t * k, k), ut;
		if (u) ut = sg_btensor_rows_view(u, t * k, k);
		*st = wu ? be->ops->moe_glu(be, wg, wu, &xt, &it, act, &gt, u ? &ut : NULL) : be->ops->moe_matmul(be, wg, &xt, &it, &gt);
	}
	return 0;
}

static sg_status cuda_moe_matmul(sg_backend *be, const sg_btensor *w, const sg_btensor *x, const sg_btensor *ids, sg_btensor *y)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_cuw v;
	sg_status st = check_i32("moe_matmul", "ids", ids);
	if (st) return st;
	if (cb->exact && sg_btensor_rows(ids) > 1 && !moe_tokens(be, w, NULL, x, ids, SG_ACT_SILU, y, NULL, &st)) return st;
	int64_t k = ids->ne[0], n = sg_btensor_rows(ids), E = w->ne[2], N = w->ne[1], nx = sg_btensor_rows(x);
	/* experts in the slot cache's pool: the kernels read slot ids[] of it */
	const int32_t *id = ids->data;
	st = w->experts ? slot_view(cb, "moe_matmul", w, ids, &v, &E, &id) : sg_cuda_wview("moe_matmul", w, &v);
	if (st || (st = sg_cuda_check_x("moe_matmul", x, w, &v)) || (st = check_f32("moe_matmul", "y", y))) return st;
	int shared_x;
	if (nx == n) shared_x = 1;
	else if (nx == n * k) shared_x = 0;
	else return sg_error(SG_ERR_INVALID_ARG, "cuda moe_matmul: x has %lld rows; expected n = %lld or n*k = %lld", (long long)nx, (long long)n, (long long)(n * k));
	if (y->ne[0] != N || sg_btensor_rows(y) != n * k)
		return sg_error(SG_ERR_INVALID_ARG, "cuda moe_matmul: y is [%lld][%lld], expected [%lld][%lld]", (long long)sg_btensor_rows(y),
				(long long)y->ne[0], (long long)(n * k), (long long)N);
	if (E > 4096) return sg_error(SG_ERR_UNSUPPORTED, "cuda moe_matmul: %lld experts (at most 4096)", (long long)E);
	if (!w->experts) v.expert_bytes = (size_t)N * w->row_bytes;
	v.expert_sb_bytes = (size_t)N * sg_btensor_mlx_sb_row_bytes(w);
	size_t ib = (sizeof(int32_t) * (size_t)(2 * E + n * k + 2) + 255) & ~(size_t)255;
	int q8 = cb->q8x && sg_cu_has_q8(v.kt);
	/* many tokens: tensor-core GEMMs (cuBLAS is set up outside graph recordings only; the path
	 * reads the expert offsets back, which a recording cannot) */
	if (q8 && cb->gemm_f16 && cb->gemm && cb->moe_gemm > 0 && n >= cb->moe_gemm && v.K % 32 == 0 && N <= INT32_MAX / 8 && v.K <= INT32_MAX &&
	    n * k <= INT32_MAX && !cb->capturing && (cb->blas_state > 0 || sg_cuda_blas_ready(cb)))
		return sg_cuda_moe_gemm(cb, &v, x->data, shared_x, id, n, k, E, y->data, N);
	uint8_t *sc = sg_cuda_scratch(cb, ib + (q8 ? sg_cu_q8_bytes(nx, v.K) : 0), &st);
	if (!sc) return st;
	int ready = cb->moe_ids_done && cb->moe_ids_done == ids->data && !w->experts;
	cb->moe_ids_done = NULL;
	CU_RET("moe_matmul", sg_cu_moe_matmul(&v, x->data, shared_x, id, n, k, E, y->data, N, (int32_t *)sc, q8 ? sc + ib : NULL, ready, S(cb)));
	return SG_OK;
}

/* One token (decode): the gate and up expert matmuls and the GLU as one activation rounding and
 * one launch; anything else is the composition. */
static sg_status cuda_moe_glu(sg_backend *be, const sg_btensor *wg, const sg_btensor *wu, const sg_btensor *x, const sg_btensor *ids, sg_act act,
			      sg_btensor *g, sg_btensor *u)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if (cb->exact && ids && ids->type == SG_TYPE_I32 && sg_btensor_rows(ids) > 1 && !moe_tokens(be, wg, wu, x, ids, act, g, u, &st)) return st;
	const void *fed = cb->q8a_of;
	cb->q8a_of = NULL; /* good for this op only */
	cb->moe_ids_done = NULL; /* set again below only by the planar kernel's launch */
	sg_cuw a, b;
	int ca = act == SG_ACT_SILU ? SG_CU_EW_SILU : act == SG_ACT_GELU_TANH ? SG_CU_EW_GELU : act == SG_ACT_GELU ? SG_CU_EW_GELU_ERF : -1;
	/* experts in the slot cache's pool: the composition (two moe_matmul reading the slots) */
	if (wg->experts || wu->experts) return sg_backend_moe_glu_compose(be, wg, wu, x, ids, act, g, u);
	if (!cb->fused || !cb->q8x || ca < 0 || !ids || ids->type != SG_TYPE_I32 || sg_btensor_rows(ids) != 1 || sg_cuda_wview("moe_matmul", wg, &a) ||
	    sg_cuda_wview("moe_matmul", wu, &b) || !sg_cu_moe_glu_ok(&a, &b) || wg->ne[2] != wu->ne[2] || wg->ne[1] != wu->ne[1] || wg->ne[2] > 4096)
		return sg_backend_moe_glu_compose(be, wg, wu, x, ids, act, g, u);
	int64_t k = ids->ne[0], E = wg->ne[2], N = wg->ne[1];
	if ((st = sg_cuda_check_x("moe_matmul", x, wg, &a)) || (st = check_f32("moe_matmul", "g", g))) return st;
	if (sg_btensor_rows(x) != 1) return sg_backend_moe_glu_compose(be, wg, wu, x, ids, act, g, u);
	if (g->ne[0] != N || sg_btensor_rows(g) != k)
		return sg_error(SG_ERR_INVALID_ARG, "cuda moe_glu: g is [%lld][%lld], expected [%lld][%lld]",
		                (long long)sg_btensor_rows(g), (long long)g->ne[0], (long long)k,
		                (long long)N);
	a.expert_bytes = (size_t)N * wg->row_bytes,
	a.expert_sb_bytes = (size_t)N * sg_btensor_mlx_sb_row_bytes(wg);
	b.expert_bytes = (size_t)N * wu->row_bytes,
	b.expert_sb_bytes = (size_t)N * sg_btensor_mlx_sb_row_bytes(wu);
	/* x rounded by the router stage just before (its feeds_moe hint) */
	int pre = fed && fed == x->data && a.K <= cb->q8a_cap;
	void *q8 = pre ? cb->q8a : sg_cuda_scratch(cb, sg_cu_q8_bytes(1, a.K), &st);
	if (!q8) return st;
	int done = 0;
	CU_RET("moe_glu",
	       sg_cu_moe_glu(&a, &b, pre ? NULL : x->data, ids->data, k, E, ca, g->data, N, q8, &done, S(cb)));
	cb->moe_ids_done = done ? ids->data : NULL; /* for the down experts after (SARAGOSSA_CUDA_MOE_IDS_EARLY) */
	return SG_OK;
}

static sg_status cuda_embed(sg_backend *be, const sg_btensor *w, const sg_btensor *ids, sg_btensor *out)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_cuw v;
	sg_status st = sg_cuda_wview("embed", w, &v);
	if (st || (st = check_i32("embed", "ids", ids)) || (st = check_f32("embed", "out", out))) return st;
	int64_t n = nvals(ids), V = sg_btensor_rows(w), D = w->ne[0];
	if (out->ne[0] != D || sg_btensor_rows(out) != n)
		return sg_error(SG_ERR_INVALID_ARG, "cuda embed: out is [%lld][%lld], expected [%lld][%lld]", (long long)sg_btensor_rows(out),
				(long long)out->ne[0], (long long)n, (long long)D);
	/* an id outside [0, V) gives a zero row; the device cannot report it without a round trip */
	CU_RET("embed", sg_cu_embed(&v, ids->data, n, V, out->data, S(cb)));
	return SG_OK;
}

/* --- norms, rope, cache, attention --- */

static sg_status cuda_rmsnorm(sg_backend *be, const sg_btensor *x, const sg_btensor *w, float eps, float off, sg_btensor *y)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("rmsnorm", "x", x)) || (st = check_f32("rmsnorm", "y", y)) || (st = check_same("rmsnorm", x, y))) return st;
	if (w && ((st = check_f32("rmsnorm", "w", w)) || w->ne[0] != x->ne[0]))
		return st ? st : sg_error(SG_ERR_INVALID_ARG, "cuda rmsnorm: w has %lld values, rows %lld", (long long)w->ne[0], (long long)x->ne[0]);
	CU_RET("rmsnorm", sg_cu_rmsnorm(x->data, w ? w->data : NULL, eps, off, y->data, sg_btensor_rows(x), x->ne[0], S(cb)));
	return SG_OK;
}

static sg_status cuda_layernorm(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *b, float eps, sg_btensor *y)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("layernorm", "x", x)) || (st = check_f32("layernorm", "y", y)) || (st = check_same("layernorm", x, y))) return st;
	if ((w && (w->type != SG_TYPE_F32 || w->ne[0] != x->ne[0])) || (b && (b->type != SG_TYPE_F32 || b->ne[0] != x->ne[0])))
		return sg_error(SG_ERR_INVALID_ARG, "cuda layernorm: w and b must be F32 [%lld]", (long long)x->ne[0]);
	CU_RET("layernorm", sg_cu_layernorm(x->data, w ? w->data : NULL, b ? b->data : NULL, eps, y->data, sg_btensor_rows(x), x->ne[0], S(cb)));
	return SG_OK;
}

/* The device copy of the rotation: frequencies from sg_rope_inv_freq (backend/rope.c), shared with the CPU. */
static sg_status rope_setup(const char *op, const sg_rope_params *p, sg_cu_rope *r)
{
	if (p->head_dim < 2 || p->head_dim > MAX_HEAD_DIM || p->n_rot < 0 || p->n_rot > p->head_dim || (p->n_rot & 1) || p->theta <= 0)
		return sg_error(SG_ERR_INVALID_ARG, "cuda %s: head_dim %d, n_rot %d, theta %g", op, p->head_dim, p->n_rot, (double)p->theta);
	int nr = p->n_rot, hd = p->head_dim;
	int prop = p->scaling == SG_ROPE_SCALING_PROPORTIONAL;
	int dim = prop ? hd : nr;
	memset(r, 0, sizeof(*r));
	r->hd = hd;
	r->half = dim / 2;
	r->neox = p->neox;
	r->dyn = p->scaling == SG_ROPE_SCALING_DYNAMIC;
	r->nr = nr, r->dim = dim, r->prop = prop, r->orig_ctx = p->orig_ctx, r->theta = p->theta, r->factor = p->factor;
	sg_rope_inv_freq(p, p->theta, r->inv_freq, &r->pos_scale, &r->mscale);
	return SG_OK;
}

/* Heads per token of x for n tokens of head_dim hd (0 and an error if they do not divide). */
sg_status sg_cuda_heads_of(const char *op, const sg_btensor *x, int64_t n, int64_t hd, int64_t *H)
{
	int64_t v = nvals(x);
	if (n < 1 || v % (n * hd))
		return sg_error(SG_ERR_INVALID_ARG, "cuda %s: %lld values are not %lld tokens x heads x %lld", op, (long long)v, (long long)n, (long long)hd);
	*H = v / (n * hd);
	return SG_OK;
}

static sg_status cuda_rope(sg_backend *be, sg_btensor *x, const sg_btensor *pos, const sg_rope_params *p)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	sg_cu_rope r;
	int64_t H = 0;
	if ((st = check_f32("rope", "x", x)) || (st = check_i32("rope", "pos", pos)) || (st = rope_setup("rope", p, &r))) return st;
	int64_t n = nvals(pos);
	if ((st = sg_cuda_heads_of("rope", x, n, p->head_dim, &H))) return st;
	CU_RET("rope", sg_cu_rope_apply(x->data, pos->data, n, H, &r, S(cb)));
	return SG_OK;
}

static sg_status cache_ok(const char *op, const sg_btensor *c, int64_t per)
{
	if (!c || !c->data || (c->type != SG_TYPE_F32 && c->type != SG_TYPE_F16))
		return sg_error(SG_ERR_INVALID_ARG, "cuda %s: cache must be F32 or F16", op);
	if (c->ne[0] * c->ne[1] != per)
		return sg_error(SG_ERR_INVALID_ARG, "cuda %s: a token has %lld values, a cache row %lld", op, (long long)per, (long long)(c->ne[0] * c->ne[1]));
	return SG_OK;
}

static sg_status cuda_kv_store(sg_backend *be, const sg_btensor *k, const sg_btensor *v, const sg_btensor *pos, sg_btensor *kc, sg_btensor *vc)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("kv_store", "k", k)) || (st = check_f32("kv_store", "v", v)) || (st = check_i32("kv_store", "pos", pos))) return st;
	int64_t n = nvals(pos), kper = nvals(k) / n, vper = nvals(v) / n;
	if (kper * n != nvals(k) || vper * n != nvals(v))
		return sg_error(SG_ERR_INVALID_ARG, "cuda kv_store: k, v do not split into %lld tokens", (long long)n);
	if ((st = cache_ok("kv_store", kc, kper)) || (st = cache_ok("kv_store", vc, vper))) return st;
	int64_t ctx = kc->ne[2] * kc->ne[3];
	if (vc->ne[2] * vc->ne[3] != ctx) return sg_error(SG_ERR_INVALID_ARG, "cuda kv_store: caches of %lld and %lld rows", (long long)ctx, (long long)(vc->ne[2] * vc->ne[3]));
	CU_RET("kv_store", sg_cu_kv_store(k->data, v->data, pos->data, n, kper, vper, kc->data, kc->type == SG_TYPE_F16, vc->data,
					  vc->type == SG_TYPE_F16, ctx, S(cb)));
	return SG_OK;
}

/* The checked arguments of an attention prep (qk-norm weights optional), for its kernel or for
 * the one-token attention that takes it fused in. */
typedef struct prep_args {
	float *q, *k;
	const float *v, *qn, *kn;
	const int32_t *pos;
	int64_t n, Hq, Hk, hdv, ctx;
	void *kc, *vc;
	int kf16, vf16;
	float eps, off;
	sg_cu_rope r;
} prep_args;

static sg_status prep_check(sg_btensor *q, sg_btensor *k, const sg_btensor *v, const sg_btensor *pos, const sg_rope_params *p,
			    const sg_btensor *qn, const sg_btensor *kn, float eps, float off, sg_btensor *kc, sg_btensor *vc, prep_args *a)
{
	sg_status st;
	int64_t Hv = 0;
	memset(a, 0, sizeof(*a));
	if ((st = check_f32("attn_prep", "q", q)) || (st = check_f32("attn_prep", "k", k)) || (st = check_f32("attn_prep", "v", v)) ||
	    (st = check_i32("attn_prep", "pos", pos)) || (st = rope_setup("attn_prep", p, &a->r)))
		return st;
	a->n = nvals(pos);
	if ((st = sg_cuda_heads_of("attn_prep", q, a->n, p->head_dim, &a->Hq)) || (st = sg_cuda_heads_of("attn_prep", k, a->n, p->head_dim, &a->Hk))) return st;
	if (!vc || vc->ne[1] != a->Hk || (st = sg_cuda_heads_of("attn_prep", v, a->n, vc->ne[0], &Hv)) || Hv != a->Hk)
		return st ? st : sg_error(SG_ERR_INVALID_ARG, "cuda attn_prep: v and its cache disagree with %lld kv heads", (long long)a->Hk);
	if ((st = cache_ok("attn_prep", kc, a->Hk * p->head_dim)) || (st = cache_ok("attn_prep", vc, a->Hk * vc->ne[0]))) return st;
	a->ctx = kc->ne[2] * kc->ne[3];
	if (vc->ne[2] * vc->ne[3] != a->ctx) return sg_error(SG_ERR_INVALID_ARG, "cuda attn_prep: caches of different lengths");
	if ((qn && ((st = check_f32("attn_prep", "q_norm", qn)) || qn->ne[0] != p->head_dim)) ||
	    (kn && ((st = check_f32("attn_prep", "k_norm", kn)) || kn->ne[0] != p->head_dim)))
		return st ? st
		          : sg_error(SG_ERR_INVALID_ARG,
		                     "cuda attn_prep: q/k norm weights must have head_dim = %d values",
		                     p->head_dim);
	if ((qn || kn) && p->head_dim >= 1024)
		return sg_error(SG_ERR_UNSUPPORTED, "cuda attn_prep: qk-norm of heads of %d dims",
		                p->head_dim);
	if (vc->ne[0] > MAX_HEAD_DIM)
		return sg_error(SG_ERR_UNSUPPORTED, "cuda attn_prep: v heads of %lld dims (at most %d)",
		                (long long)vc->ne[0], MAX_HEAD_DIM);
	a->q = q->data, a->k = k->data, a->v = v->data, a->pos = pos->data;
	a->qn = qn ? qn->data : NULL, a->kn = kn ? kn->data : NULL;
	a->hdv = vc->ne[0];
	a->kc = kc->data, a->vc = vc->data;
	a->kf16 = kc->type == SG_TYPE_F16, a->vf16 = vc->type == SG_TYPE_F16;
	a->eps = eps, a->off = off;
	return SG_OK;
}

static sg_status prep_run(sg_cuda_backend *cb, const prep_args *a)
{
	CU_RET("attn_prep", sg_cu_attn_prep(a->q, a->k, a->v, a->pos, a->n, a->Hq, a->Hk, a->hdv, &a->r, a->kc, a->kf16, a->vc, a->vf16,
	                                    a->ctx, a->qn, a->kn, a->eps, a->off, S(cb)));
	return SG_OK;
}

static sg_status prep(sg_backend *be, sg_btensor *q, sg_btensor *k, const sg_btensor *v, const sg_btensor *pos, const sg_rope_params *p,
		      const sg_btensor *qn, const sg_btensor *kn, float eps, float off, sg_btensor *kc, sg_btensor *vc)
{
	prep_args a;
	sg_status st = prep_check(q, k, v, pos, p, qn, kn, eps, off, kc, vc, &a);
	return st ? st : prep_run((sg_cuda_backend *)be, &a);
}

static sg_status cuda_attn_prep(sg_backend *be, sg_btensor *q, sg_btensor *k, const sg_btensor *v, const sg_btensor *pos, const sg_rope_params *p,
				sg_btensor *kc, sg_btensor *vc)
{
	return prep(be, q, k, v, pos, p, NULL, NULL, 0, 0, kc, vc);
}

static sg_status cuda_attn_prep_norm(sg_backend *be, sg_btensor *q, sg_btensor *k, const sg_btensor *v, const sg_btensor *pos,
				     const sg_rope_params *p, const sg_btensor *qn, const sg_btensor *kn, float eps, float off, sg_btensor *kc,
				     sg_btensor *vc)
{
	if (!qn || !kn) return sg_error(SG_ERR_INVALID_ARG, "cuda attn_prep_norm: both norm weights are required");
	return prep(be, q, k, v, pos, p, qn, kn, eps, off, kc, vc);
}

/* kv positions per block when the length is split: a warp's scan of its positions is a serial
 * chain (dot, warp sum, exp), so short chunks and many blocks hide its latency (256 took ~130 us
 * per layer at 1k positions of a 32-head decode step on the H200; 64 is ~4x more blocks) */
#define KV_CHUNK 64
/* pa: an attention prep to run first (checked by prep_check against the same q, caches and
 * positions), fused into the one-token kernel where it takes it, else as its own kernel. */
/* The attention's kernels for a (the prep done): the one-token kernel, else the many-token paths;
 * q8: the one-token kernel may round its output for the matmul after it (p->feeds_matmul). */
/* The one-token attention's slices, from static shapes (a recorded graph stays valid), each at
 * least 64 rows, and their scratch for ntok tokens. */
static int64_t dec_nslices(const sg_cu_attn *a, int64_t span)
{
	int64_t nc = (span + 63) / 64, cap = 512 / sg_cu_attn_decode_units(a);
	if (cap > 64) cap = 64;
	if (nc > cap) nc = cap;
	return nc < 1 ? 1 : nc;
}

static sg_status dec_slices(sg_cuda_backend *cb, sg_cu_attn *a, int64_t span, int64_t ntok)
{
	sg_status st = SG_OK;
	int64_t nc = dec_nslices(a, span);
	a->nchunk = (int)nc;
	if (nc > 1 && !(a->part = sg_cuda_scratch(cb, sizeof(float) * (size_t)(ntok * a->H * nc * (a->hdv + 2)), &st))) return st;
	return SG_OK;
}

static sg_status attn_launch(sg_cuda_backend *cb, sg_cu_attn a, const sg_btensor *pos, const sg_attn_params *p, int64_t span, int q8)
{
	sg_status st;
	if (a.n == 1 && cb->attn_dec && sg_cu_attn_decode_ok(&a)) {
		if ((st = dec_slices(cb, &a, span, 1))) return st;
		/* the output rounded to 8 bits for the matmul after it (its buffer grows outside graph
		 * recordings only; the per-op step before a recording sizes it) */
		int64_t K = a.H * a.hdv;
		cb->q8a_of = NULL;
		if (q8 && p->feeds_matmul && cb->q8x && q8a_fit(cb, K)) {
			sg_cu_q8_split(cb->q8a, K, &a.xq, &a.dx, &a.sx);
			cb->q8a_of = a.out;
		}
		CU_RET("attention", sg_cu_attn_decode(&a, S(cb)));
		return SG_OK;
	}
	if (a.n > GEMV_MAX_TOKENS && cb->attn_flash && cb->attn_f16 && sg_cu_attn_flash_ok(&a)) {
		cb->q8a_of = NULL;
		CU_RET("attention", sg_cu_attn_flash(&a, S(cb)));
		return SG_OK;
	}
	if (a.n > GEMV_MAX_TOKENS && cb->attn_gemm && !a.ring && !cb->capturing && a.ctx <= INT32_MAX / 2 && (cb->blas_state > 0 || sg_cuda_blas_ready(cb)))
		return sg_cuda_attn_gemm(cb, &a, pos);
	/* The split depends on static shapes only (the cache capacity, not the live length, which is
	 * on the device), so a recorded graph stays valid as the sequence grows. Enough (token, head)
	 * pairs fill the GPU on their own. */
	a.nchunk = 1;
	a.chunk = (int)(span < INT32_MAX ? span : INT32_MAX);
	if (a.n * a.H < 512 && span > KV_CHUNK) {
		int64_t nc = (span + KV_CHUNK - 1) / KV_CHUNK;
		if (nc > 256) nc = 256;
		a.nchunk = (int)nc;
		a.chunk = (int)((span + nc - 1) / nc);
		a.part = sg_cuda_scratch(cb, sizeof(float) * (size_t)(a.n * a.H * nc * (a.hdv + 2)), &st);
		if (!a.part) return st;
	}
	CU_RET("attention", sg_cu_attention(&a, S(cb)));
	return SG_OK;
}


static sg_status attention_run(sg_backend *be, const sg_btensor *q, const sg_btensor *kc, const sg_btensor *vc, const sg_btensor *pos,
			       const sg_attn_params *p, sg_btensor *out, const prep_args *pa)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("attention", "q", q)) || (st = check_f32("attention", "out", out)) || (st = check_i32("attention", "pos", pos))) return st;
	if (!kc || !vc || (kc->type != SG_TYPE_F32 && kc->type != SG_TYPE_F16) || (vc->type != SG_TYPE_F32 && vc->type != SG_TYPE_F16))
		return sg_error(SG_ERR_INVALID_ARG, "cuda attention: caches must be F32 or F16");
	if (p->bias) return sg_error(SG_ERR_UNSUPPORTED, "cuda attention: an additive logit bias (MPNet) is not implemented on CUDA");
	sg_cu_attn a;
	memset(&a, 0, sizeof(a));
	a.n = nvals(pos);
	a.hd = kc->ne[0];
	a.Hkv = kc->ne[1];
	a.ctx = kc->ne[2] * kc->ne[3];
	a.hdv = vc->ne[0];
	if (vc->ne[1] != a.Hkv || vc->ne[2] * vc->ne[3] != a.ctx || a.hd > SG_CU_MAX_HD || a.hdv > SG_CU_MAX_HD)
		return sg_error(SG_ERR_INVALID_ARG, "cuda attention: k cache [%lld][%lld][%lld] and v cache [%lld][%lld][%lld] disagree (or head dim > %d)",
				(long long)a.ctx, (long long)a.Hkv, (long long)a.hd, (long long)(vc->ne[2] * vc->ne[3]), (long long)vc->ne[1],
				(long long)a.hdv, SG_CU_MAX_HD);
	if ((st = sg_cuda_heads_of("attention", q, a.n, a.hd, &a.H))) return st;
	if (a.H % a.Hkv) return sg_error(SG_ERR_INVALID_ARG, "cuda attention: %lld query heads are not a multiple of %lld kv heads", (long long)a.H, (long long)a.Hkv);
	if (nvals(out) != a.n * a.H * a.hdv) return sg_error(SG_ERR_INVALID_ARG, "cuda attention: out must hold [%lld][%lld][%lld]", (long long)a.n, (long long)a.H, (long long)a.hdv);
	a.q = q->data;
	a.kc = kc->data;
	a.vc = vc->data;
	a.kf16 = kc->type == SG_TYPE_F16;
	a.vf16 = vc->type == SG_TYPE_F16;
	a.pos = pos->data;
	a.scale = p->scale > 0 ? p->scale : 1.0f / sqrtf((float)a.hd);
	a.cap = p->softcap;
	a.window = p->window;
	a.causal = p->causal;
	a.ring = p->causal && p->window > 0 && p->window < a.ctx;
	a.out = out->data;
	int64_t span = a.causal && a.window > 0 && a.window < a.ctx ? a.window : a.ctx;
	if (pa) {
		a.prep.r = pa->r;
		a.prep.k = pa->k, a.prep.v = pa->v, a.prep.qn = pa->qn, a.prep.kn = pa->kn;
		a.prep.eps = pa->eps, a.prep.off = pa->off;
		a.prep.on = cb->attn_dec && sg_cu_attn_prep_ok(&a); /* one token, no ring, the wide kernel */
		if (!a.prep.on && !(cb->exact && a.n > 1 && pa->r.dyn) && (st = prep_run(cb, pa))) return st;
	}
	/* an exact step (match_decode): each token as a one-token step after the prep of all of them
	 * (token by token for dynamic NTK rope, whose base follows the step's last position); the
	 * fence keeps the one-token kernel's loads before its wait (rows of earlier steps) from
	 * overtaking this prep's stores */
	if (cb->exact && a.n > 1) {
		for (int64_t t = 0; pa && pa->r.dyn && t < a.n; t++) {
			prep_args one = *pa;
			one.n = 1, one.pos = pa->pos + t;
			one.q = pa->q + t * pa->Hq * pa->r.hd, one.k = pa->k + t * pa->Hk * pa->r.hd, one.v = pa->v + t * pa->Hk * pa->hdv;
			if ((st = prep_run(cb, &one))) return st;
		}
		CU_RET("attention", sg_cu_fence(S(cb)));
		sg_cu_attn b = a;
		b.n = 1;
		b.prep.on = 0;
		cb->q8a_of = NULL;
		/* one launch, a token in the grid's z, while the slices it launches are at most
		 * SARAGOSSA_CUDA_VERIFY_ATTN (8). The one-token kernel's slices are sized by the cache's
		 * capacity (so that a recorded graph serves every length: at least 64 rows each, so a
		 * position p has live rows in the first p / 64 + 1 at most); outside a recording, with the
		 * positions known (rows_live), the grid stops there. With every slice launched, most are
		 * empty early in a sequence and the one launch took longer than a launch a token (H100, a
		 * 17-token step at a 2048-row cache: SmolLM2-135M 14.5 decode steps against 6.1; a
		 * Qwen2.5-1.5B-shaped model 13.4 against 8.3, its launch 325 us against 17 x 9) */
		if (cb->attn_dec && sg_cu_attn_decode_ok(&b)) {
			int64_t ns = dec_nslices(&b, span), ny = ns;
			if (!cb->capturing && p->rows_live > 0 && (p->rows_live - 1) / 64 + 1 < ny) ny = (p->rows_live - 1) / 64 + 1;
			if (ny <= cb->verify_attn) {
				if ((st = dec_slices(cb, &b, span, a.n))) return st;
				CU_RET("attention", sg_cu_attn_decode_tokens(&b, a.n, (int)ny, S(cb)));
				return SG_OK;
			}
		}
		for (int64_t t = 0; t < a.n; t++) {
			b.q = a.q + t * a.H * a.hd, b.pos = a.pos + t, b.out = a.out + t * a.H * a.hdv;
			if ((st = attn_launch(cb, b, pos, p, span, 0))) return st;
		}
		return SG_OK;
	}
	return attn_launch(cb, a, pos, p, span, 1);
}

static sg_status cuda_attention(sg_backend *be, const sg_btensor *q, const sg_btensor *kc, const sg_btensor *vc, const sg_btensor *pos,
				const sg_attn_params *p, sg_btensor *out)
{
	return attention_run(be, q, kc, vc, pos, p, out, NULL);
}

static sg_status cuda_attention_prep(sg_backend *be, sg_btensor *q, sg_btensor *k, const sg_btensor *v, const sg_btensor *pos,
				     const sg_rope_params *rope, const sg_btensor *qn, const sg_btensor *kn, float eps, float off,
				     sg_btensor *kc, sg_btensor *vc, const sg_attn_params *p, sg_btensor *out)
{
	prep_args a;
	sg_status st = prep_check(q, k, v, pos, rope, qn, kn, eps, off, kc, vc, &a);
	return st ? st : attention_run(be, q, kc, vc, pos, p, out, &a);
}

/* --- elementwise, softmax, routing, argmax --- */

static sg_status ew(sg_backend *be, const char *op, int kind, const sg_btensor *a, const sg_btensor *b, float s, sg_btensor *out)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32(op, "input", a)) || (st = check_f32(op, "out", out)) || (st = check_same(op, a, out))) return st;
	if (b && ((st = check_f32(op, "input", b)) || (st = check_same(op, a, b)))) return st;
	CU_RET(op, sg_cu_elementwise(kind, a->data, b ? b->data : NULL, s, out->data, nvals(a), S(cb)));
	return SG_OK;
}

static sg_status cuda_glu(sg_backend *be, const sg_btensor *gate, const sg_btensor *up, sg_act act, sg_btensor *out)
{
	if (!up) return sg_error(SG_ERR_INVALID_ARG, "cuda glu: up is missing");
	int kind = act == SG_ACT_SILU ? SG_CU_EW_SILU : act == SG_ACT_GELU_TANH ? SG_CU_EW_GELU : act == SG_ACT_GELU ? SG_CU_EW_GELU_ERF : -1;
	if (kind < 0) return sg_error(SG_ERR_UNSUPPORTED, "cuda glu: activation %d has no gated kernel", (int)act);
	return ew(be, "glu", kind, gate, up, 0, out);
}

static sg_status cuda_add(sg_backend *be, const sg_btensor *a, const sg_btensor *b, sg_btensor *out)
{
	if (!b) return sg_error(SG_ERR_INVALID_ARG, "cuda add: b is missing");
	return ew(be, "add", SG_CU_EW_ADD, a, b, 0, out);
}

static sg_status cuda_scale(sg_backend *be, const sg_btensor *x, float s, sg_btensor *out) { return ew(be, "scale", SG_CU_EW_SCALE, x, NULL, s, out); }

static sg_status cuda_softcap(sg_backend *be, const sg_btensor *x, float cap, sg_btensor *out)
{
	if (!(cap > 0)) return sg_error(SG_ERR_INVALID_ARG, "cuda softcap: cap %g must be > 0", (double)cap);
	return ew(be, "softcap", SG_CU_EW_SOFTCAP, x, NULL, cap, out);
}

static sg_status cuda_softmax(sg_backend *be, const sg_btensor *x, sg_btensor *out)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("softmax", "x", x)) || (st = check_f32("softmax", "out", out)) || (st = check_same("softmax", x, out))) return st;
	CU_RET("softmax", sg_cu_softmax(x->data, out->data, sg_btensor_rows(x), x->ne[0], S(cb)));
	return SG_OK;
}

static sg_status cuda_moe_route(sg_backend *be, const sg_btensor *logits, sg_router router, int k, int norm_topk, sg_btensor *ids, sg_btensor *weights)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("moe_route", "logits", logits)) || (st = check_i32("moe_route", "ids", ids)) || (st = check_f32("moe_route", "weights", weights)))
		return st;
	int64_t n = sg_btensor_rows(logits), E = logits->ne[0];
	if (E > 1024 || k < 1 || k > E) return sg_error(SG_ERR_INVALID_ARG, "cuda moe_route: k %d of %lld experts (at most 1024)", k, (long long)E);
	if (ids->ne[0] != k || sg_btensor_rows(ids) != n || weights->ne[0] != k || sg_btensor_rows(weights) != n)
		return sg_error(SG_ERR_INVALID_ARG, "cuda moe_route: ids and weights must be [%lld][%d]", (long long)n, k);
	cb->moe_ids_done = NULL; /* ids rewritten */
	CU_RET("moe_route", sg_cu_moe_route(logits->data, n, E, router == SG_ROUTER_SIGMOID, k, norm_topk, ids->data, weights->data, S(cb)));
	return SG_OK;
}

static sg_status moe_combine(sg_cuda_backend *cb, const sg_btensor *y, const sg_btensor *weights, const sg_btensor *res, sg_btensor *out)
{
	sg_status st;
	if ((st = check_f32("moe_combine", "y", y)) || (st = check_f32("moe_combine", "weights", weights)) || (st = check_f32("moe_combine", "out", out)))
		return st;
	int64_t n = sg_btensor_rows(out), D = out->ne[0], k = weights->ne[0];
	if (y->ne[0] != D || sg_btensor_rows(y) != n * k || sg_btensor_rows(weights) != n)
		return sg_error(SG_ERR_INVALID_ARG, "cuda moe_combine: y [%lld][%lld], weights [%lld][%lld], out [%lld][%lld] disagree",
				(long long)sg_btensor_rows(y), (long long)y->ne[0], (long long)sg_btensor_rows(weights), (long long)k, (long long)n, (long long)D);
	if (res && ((st = check_f32("moe_combine", "residual", res)) || (st = check_same("moe_combine", res, out)))) return st;
	CU_RET("moe_combine", sg_cu_moe_combine(y->data, weights->data, n, k, D, res ? res->data : NULL, out->data, S(cb)));
	return SG_OK;
}

static sg_status cuda_moe_combine(sg_backend *be, const sg_btensor *y, const sg_btensor *weights, sg_btensor *out)
{
	return moe_combine((sg_cuda_backend *)be, y, weights, NULL, out);
}

/* the residual add in the combine kernel (SARAGOSSA_CUDA_FUSED): one kernel fewer a MoE layer */
static sg_status cuda_moe_combine_add(sg_backend *be, const sg_btensor *y, const sg_btensor *weights, const sg_btensor *residual, sg_btensor *out,
				      sg_btensor *tmp)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	if (!cb->fused) return sg_backend_moe_combine_add_compose(be, y, weights, residual, out, tmp);
	return moe_combine(cb, y, weights, residual, out);
}

static sg_status cuda_argmax(sg_backend *be, const sg_btensor *x, sg_btensor *ids)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("argmax", "x", x)) || (st = check_i32("argmax", "ids", ids))) return st;
	if (nvals(ids) != sg_btensor_rows(x))
		return sg_error(SG_ERR_INVALID_ARG, "cuda argmax: ids has %lld values for %lld rows", (long long)nvals(ids), (long long)sg_btensor_rows(x));
	size_t sb = sg_cu_argmax_scratch(sg_btensor_rows(x), x->ne[0]);
	void *sc = NULL;
	if (sb && !(sc = sg_cuda_scratch(cb, sb, &st))) return st;
	CU_RET("argmax", sg_cu_argmax(x->data, sg_btensor_rows(x), x->ne[0], ids->data, sc, S(cb)));
	return SG_OK;
}

static sg_status cuda_top_candidates(sg_backend *be, const sg_btensor *x, int k, const sg_btensor *gather, sg_btensor *out)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("top_candidates", "x", x)) || (st = check_i32("top_candidates", "out", out)) ||
	    (gather && (st = check_i32("top_candidates", "gather", gather))))
		return st;
	int64_t V = x->ne[0], m = gather ? nvals(gather) : 0;
	if (sg_btensor_rows(x) != 1 || k < 1 || k > V || k > SG_BACKEND_TOPC_MAX || nvals(out) < 2 * (int64_t)k + m)
		return sg_error(SG_ERR_INVALID_ARG, "cuda top_candidates: %d of a row of %lld (%lld rows) and %lld ids into %lld values", k,
				(long long)V, (long long)sg_btensor_rows(x), (long long)m, (long long)nvals(out));
	size_t sb = sg_cu_topc_scratch(V, k);
	void *sc = NULL;
	if (sb && !(sc = sg_cuda_scratch(cb, sb, &st))) return st;
	CU_RET("top_candidates", sg_cu_topc(x->data, V, k, gather ? gather->data : NULL, (int)m, out->data, sc, S(cb)));
	return SG_OK;
}

/* --- table --- */

static int cuda_supports(sg_backend *be, sg_stage stage, sg_type type)
{
	switch (stage) {
	case SG_STAGE_EMBED:
	case SG_STAGE_MATMUL:
	case SG_STAGE_MOE_MATMUL: {
		/* MLX: 4, 6 and 8 bits (bind rejects 2, 3 and 5 by name) */
		sg_btensor t = {.type = type, .mlx = {4, 64, SG_TYPE_BF16}};
		return cukt_of(&t) != SG_CUKT_NONE;
	}
	case SG_STAGE_KV_STORE:
	case SG_STAGE_ATTENTION:
	case SG_STAGE_ATTN_PREP: return type == SG_TYPE_F32 || type == SG_TYPE_F16;
	case SG_STAGE_LINEAR_ATTN: return type == SG_TYPE_F32;
	case SG_STAGE_COUNT: return 0;
	default: return type == SG_TYPE_F32;
	}
}

static void cuda_destroy(sg_backend *be)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	if (!cb) return;
	cudaStreamSynchronize(cb->stream);
	sg_cu_trace_dump(sg_flag_str("SARAGOSSA_CUDA_TRACE"));
	if (cb->exec) cudaGraphExecDestroy(cb->exec);
	cudaFree(cb->scratch);
	cudaFree(cb->q8a);
	cudaFree(cb->slot_ids);
	cudaFree(cb->xstage);
	sg_cuda_x3_forget(cb, NULL);
	sg_cuda_blas_destroy(cb);
	if (cb->stream) cudaStreamDestroy(cb->stream);
	sg_free(cb);
}

/* The op table's capture, caps and measurement entries (defined after the graph functions). */
static void cuda_caps(sg_backend *be, sg_backend_caps *out);
/* match_decode: the ops that treat one token apart (the fused GEMV stages, the one-token attention,
 * the expert kernels, the GEMV against cuBLAS) give each of many tokens its one-token bits; the
 * others are per row already (backend.h). */
static void cuda_match_decode(sg_backend *be, int on) { ((sg_cuda_backend *)be)->exact = on != 0; }
static sg_status cuda_capture_begin(sg_backend *be);
static sg_status cuda_capture_end(sg_backend *be, sg_backend_graph **out);
static void cuda_capture_abort(sg_backend *be);
static int cuda_graph_stale(sg_backend *be, const sg_backend_graph *g);
static sg_status cuda_graph_replay(sg_backend *be, const sg_backend_graph *g);
static void cuda_graph_free(sg_backend *be, sg_backend_graph *g);
static sg_status cuda_copy_bandwidth(sg_backend *be, size_t bytes, double *gbps, const char **what);

static const sg_backend_ops cuda_ops = {
	.name = "cuda",
	.destroy = cuda_destroy,
	.supports = cuda_supports,
	.tensor_alloc = cuda_tensor_alloc,
	.tensor_bind = cuda_tensor_bind,
	.tensor_free = cuda_tensor_free,
	.expert_bytes = cuda_expert_bytes,
	.expert_upload = cuda_expert_upload,
	.host_pin = cuda_host_pin,
	.write = cuda_write,
	.read = cuda_read,
	.copy = cuda_copy,
	.sync = cuda_sync,
	.mem_info = cuda_mem_info,
	.embed = cuda_embed,
	.matmul = sg_cuda_matmul,
	.rmsnorm = cuda_rmsnorm,
	.layernorm = cuda_layernorm,
	.rope = cuda_rope,
	.kv_store = cuda_kv_store,
	.attn_prep = cuda_attn_prep,
	.attention = cuda_attention,
	.attention_packed = sg_cuda_attention_packed,
	.pool_rows = sg_cuda_pool_rows,
	.conv1d = sg_cuda_conv1d,
	.conv_transpose1d = sg_cuda_conv_transpose1d,
	.snake = sg_cuda_snake,
	.gelu = sg_cuda_gelu,
	.glu = cuda_glu,
	.add = cuda_add,
	.scale = cuda_scale,
	.softcap = cuda_softcap,
	.softmax = cuda_softmax,
	.moe_route = cuda_moe_route,
	.moe_matmul = cuda_moe_matmul,
	.moe_combine = cuda_moe_combine,
	.argmax = cuda_argmax,
	.top_candidates = cuda_top_candidates,
	.short_conv = sg_cuda_short_conv,
	.gated_delta = sg_cuda_gated_delta,
	.gated_rmsnorm = sg_cuda_gated_rmsnorm,
	.sigmoid_mul = sg_cuda_sigmoid_mul,
	.gather_cols = sg_cuda_gather_cols,
	.glu_split = sg_cuda_glu_split,
	.moe_weight_scale = sg_cuda_moe_weight_scale,
	.matmul_multi = cuda_matmul_multi,
	.attn_prep_norm = cuda_attn_prep_norm,
	.attention_prep = cuda_attention_prep,
	.moe_glu = cuda_moe_glu,
	.moe_combine_add = cuda_moe_combine_add,
	.match_decode = cuda_match_decode,
	.caps = cuda_caps,
	.capture_begin = cuda_capture_begin,
	.capture_end = cuda_capture_end,
	.capture_abort = cuda_capture_abort,
	.graph_stale = cuda_graph_stale,
	.graph_replay = cuda_graph_replay,
	.graph_free = cuda_graph_free,
	.copy_bandwidth = cuda_copy_bandwidth,
};

sg_status sg_cuda_backend_create(const sg_cuda_params *p, sg_backend **out)
{
	*out = NULL;
	sg_cuda_params d = sg_cuda_default_params();
	if (!p) p = &d;
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count == 0) {
		const char *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
		cudaGetLastError();
		return sg_error(SG_ERR_UNSUPPORTED, "cuda: no usable GPU (%s)", why);
	}
	if (p->device < 0 || p->device >= count)
		return sg_error(SG_ERR_INVALID_ARG, "cuda: device %d of %d", p->device, count);
	sg_cuda_backend *cb = sg_calloc(1, sizeof(*cb));
	if (!cb) return sg_error(SG_ERR_NOMEM, "cuda: backend");
	cb->base.ops = &cuda_ops;
	cb->device = p->device;
	const char *gm = sg_flag_str("SARAGOSSA_CUDA_GEMM");
	cb->gemm = !strcmp(gm, "bf16")			  ? GEMM_BF16
		   : !strcmp(gm, "tf32")		  ? GEMM_TF32
		   : !strcmp(gm, "tf32x3")		  ? GEMM_TF32X3
		   : !strcmp(gm, "f32")			  ? GEMM_F32
		   : !strcmp(gm, "off") || !strcmp(gm, "0") ? GEMM_OFF
							  : GEMM_TF32X3;
	sg_cu_policy_load(); /* the kernels' choices (cuda_policy.h), read once a backend */
	cb->attn_dec = sg_cu_policy_now()->attn.decode != SG_CU_DECODE_PER_HEAD;
	cb->verify_attn = (int)sg_flag_int("SARAGOSSA_CUDA_VERIFY_ATTN");
	cb->attn_gemm = sg_flag_bool("SARAGOSSA_CUDA_ATTN_GEMM");
	cb->attn_flash = sg_flag_bool("SARAGOSSA_CUDA_ATTN_FLASH");
	cb->attn_f16 = sg_flag_bool("SARAGOSSA_CUDA_ATTN_F16");
	cb->q8x = sg_flag_bool("SARAGOSSA_CUDA_Q8X");
	cb->gemm_f16 = sg_flag_bool("SARAGOSSA_CUDA_GEMM_F16");
	cb->x3_one = sg_flag_int("SARAGOSSA_CUDA_GEMM_X3_ONE");
	cb->x3c_max = (size_t)sg_flag_int("SARAGOSSA_CUDA_X3_CACHE") << 20;
	cb->shared_x = sg_flag_bool("SARAGOSSA_CUDA_SHARED_X");
	cb->packed_tiles = sg_flag_bool("SARAGOSSA_CUDA_PACKED_TILES");
	cb->fused = sg_flag_bool("SARAGOSSA_CUDA_FUSED");
	cb->moe_gemm = (int)sg_flag_int("SARAGOSSA_CUDA_MOE_GEMM");
	cb->xrepack = sg_flag_bool("SARAGOSSA_CUDA_EXPERT_REPACK");
	cb->verify_batch = sg_flag_bool("SARAGOSSA_CUDA_VERIFY_BATCH");
	sg_cu_trace_start();
	struct cudaDeviceProp prop;
	sg_status st = SG_OK;
	if ((e = cudaSetDevice(p->device)) || (e = cudaGetDeviceProperties(&prop, p->device)) ||
	    (e = cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking)))
		st = cu_fail("create", (int)e);
	if (st) {
		cuda_destroy(&cb->base);
		return st;
	}
	snprintf(cb->desc, sizeof(cb->desc), "%s, %.1f GiB, sm_%d%d", prop.name, (double)prop.totalGlobalMem / (1 << 30), prop.major, prop.minor);
	*out = &cb->base;
	return SG_OK;
}

const char *sg_cuda_backend_device(const sg_backend *be) { return ((const sg_cuda_backend *)be)->desc; }

int sg_cuda_graphs_enabled(void) { return sg_flag_bool("SARAGOSSA_CUDA_GRAPHS"); }

int sg_cuda_graphs_hybrid(void) { return sg_flag_bool("SARAGOSSA_CUDA_GRAPHS_HYBRID"); }

int sg_cuda_is_backend(const sg_backend *be) { return be && be->ops == &cuda_ops; }

static sg_cuda_backend *as_cuda(sg_backend *be) { return sg_cuda_is_backend(be) ? (sg_cuda_backend *)be : NULL; }

sg_status sg_cuda_copy_bandwidth(sg_backend *be, size_t bytes, double *gbps)
{
	sg_cuda_backend *cb = as_cuda(be);
	*gbps = 0;
	if (!cb || cb->capturing) return sg_error(SG_ERR_INVALID_ARG, "cuda bandwidth: not a CUDA backend, or recording");
	void *a = NULL, *b = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	cudaError_t e = cudaMalloc(&a, bytes);
	if (!e) e = cudaMalloc(&b, bytes);
	if (!e) e = cudaEventCreate(&e0);
	if (!e) e = cudaEventCreate(&e1);
	float best = 0;
	for (int r = 0; r < 6 && !e; r++) { /* the first is a warm-up; the fastest of the rest counts */
		if ((e = cudaEventRecord(e0, cb->stream))) break;
		if ((e = cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, cb->stream))) break;
		if ((e = cudaEventRecord(e1, cb->stream)) || (e = cudaEventSynchronize(e1))) break;
		float ms = 0;
		if ((e = cudaEventElapsedTime(&ms, e0, e1))) break;
		if (r && (best == 0 || ms < best)) best = ms;
	}
	if (e0) cudaEventDestroy(e0);
	if (e1) cudaEventDestroy(e1);
	cudaFree(a);
	cudaFree(b);
	if (e) return cu_fail("bandwidth", (int)e);
	*gbps = best > 0 ? 2.0 * (double)bytes / (best * 1e-3) / 1e9 : 0;
	return SG_OK;
}

/* A GPU: F16 KV cache (half the bytes each decode step reads), prefill chunks of 1024 tokens (a
 * chunk re-reads and dequantizes every weight once, so larger chunks amortise that: pp8192 on an
 * H200 ran at 1106 tok/s with 256 and 4507 with 1024), device memory, and decode graphs unless
 * SARAGOSSA_CUDA_GRAPHS=0 (hybrid stacks only with SARAGOSSA_CUDA_GRAPHS_HYBRID=1). */
static void cuda_caps(sg_backend *be, sg_backend_caps *out)
{
	memset(out, 0, sizeof *out);
	out->kv_f16 = 1;
	out->prefill_chunk = 1024;
	out->device_memory = 1;
	out->expert_slots = 1;
	out->capture = sg_cuda_graphs_enabled();
	out->capture_hybrid = out->capture && sg_cuda_graphs_hybrid();
	snprintf(out->device, sizeof out->device, "%s", sg_cuda_backend_device(be));
	snprintf(out->graphs_flag, sizeof out->graphs_flag, "SARAGOSSA_CUDA_GRAPHS");
}

/* sg_backend_graph is the backend's own sg_cuda_graph under the op table's opaque name. */
static sg_status cuda_capture_begin(sg_backend *be) { return sg_cuda_graph_begin(be); }
static sg_status cuda_capture_end(sg_backend *be, sg_backend_graph **out)
{
	return sg_cuda_graph_end_into(be, (sg_cuda_graph **)out);
}
static void cuda_capture_abort(sg_backend *be) { sg_cuda_graph_abort(be); }
static int cuda_graph_stale(sg_backend *be, const sg_backend_graph *g)
{
	return sg_cuda_graph_stale(be, (const sg_cuda_graph *)g);
}
static sg_status cuda_graph_replay(sg_backend *be, const sg_backend_graph *g)
{
	return sg_cuda_graph_launch(be, (const sg_cuda_graph *)g);
}
static void cuda_graph_free(sg_backend *be, sg_backend_graph *g)
{
	(void)be;
	sg_cuda_graph_free((sg_cuda_graph *)g);
}
static sg_status cuda_copy_bandwidth(sg_backend *be, size_t bytes, double *gbps, const char **what)
{
	*what = "cudaMemcpy D2D";
	return sg_cuda_copy_bandwidth(be, bytes, gbps);
}

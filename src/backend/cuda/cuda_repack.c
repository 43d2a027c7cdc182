/*
 * The CUDA backend's weight layouts, host side: a row of the file's blocks into the device's
 * order (the legacy 32-blocks' codes before their scales; the planar Q4_K, Q6_K and MLX 4-bit
 * rows) and, for the planar rows, back. The layouts are described at the top of cuda_backend.c.
 */
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"

/* The planar K-quant row (see cuda_backend.c's top): for each field of a block, its file offset,
 * its bytes and whether it is split into 16-byte pieces over planes. Q4_K: d dmin | scales[12] |
 * qs[128]; Q6_K: ql[128] | qh[64] | scales[16] | d. Planar order: the planes first (codes, then
 * Q6_K's high bits), then the other fields, each as a run over the row's blocks. */
typedef struct {
	int off, bytes, planes;
} kq_field;
static int kq_fields(sg_cukt kt, kq_field *f, int *block_bytes)
{
	if (kt == SG_CUKT_Q4_K) {
		f[0] = (kq_field){16, 128, 1}, f[1] = (kq_field){4, 12, 0}, f[2] = (kq_field){0, 4, 0};
		*block_bytes = 144;
		return 3;
	}
	if (kt == SG_CUKT_Q6_K) {
		f[0] = (kq_field){0, 128, 1}, f[1] = (kq_field){128, 64, 1}, f[2] = (kq_field){192, 16, 0}, f[3] = (kq_field){208, 2, 0};
		*block_bytes = 210;
		return 4;
	}
	if (kt == SG_CUKT_MLX4) { /* 256 elements of codes; the scales and biases are arrays of their own */
		f[0] = (kq_field){0, 128, 1};
		*block_bytes = 128;
		return 1;
	}
	return 0;
}

/* in -> out between the file's blocks and the planar row: file to device, or back when to_file;
 * -1 for a type without the planar layout or K not a positive multiple of 256 */
static int kq_move(sg_cukt kt, int64_t K, const uint8_t *in, uint8_t *out, int to_file)
{
	kq_field f[4];
	int bb, nf = kq_fields(kt, f, &bb);
	int64_t nb = K / 256;
	if (!nf || K < 256 || K % 256) return -1;
	size_t pos = 0;
	for (int i = 0; i < nf; i++) {
		const int pieces = f[i].planes ? f[i].bytes / 16 : 1, pb = f[i].planes ? 16 : f[i].bytes;
		for (int64_t b = 0; b < nb; b++)
			for (int p = 0; p < pieces; p++) {
				size_t d = pos + ((size_t)p * (size_t)nb + (size_t)b) * (size_t)pb;
				size_t s = (size_t)b * (size_t)bb + (size_t)f[i].off + (size_t)p * 16;
				if (to_file) memcpy(out + s, in + d, (size_t)pb);
				else memcpy(out + d, in + s, (size_t)pb);
			}
		pos += (size_t)f[i].bytes * (size_t)nb;
	}
	return 0;
}

int sg_cuda_repack_fields(sg_cukt kt, sg_cu_fields *f)
{
	memset(f, 0, sizeof *f);
	kq_field k[4];
	int bb, nf = kt == SG_CUKT_MLX4 ? 0 : kq_fields(kt, k, &bb);
	if (nf) {
		f->nf = nf;
		f->block_bytes = bb;
		for (int i = 0; i < nf; i++) f->off[i] = k[i].off, f->bytes[i] = k[i].bytes, f->planes[i] = k[i].planes;
		return 0;
	}
	/* the legacy 32-blocks: the codes, then the scale (and minimum / high bits) runs */
	static const struct { sg_cukt kt; int bb, nf, off[4], bytes[4]; } legacy[] = {
		{SG_CUKT_Q8_0, 34, 2, {2, 0}, {32, 2}},
		{SG_CUKT_Q4_0, 18, 2, {2, 0}, {16, 2}},
		{SG_CUKT_Q4_1, 20, 3, {4, 0, 2}, {16, 2, 2}},
		{SG_CUKT_Q5_0, 22, 3, {6, 2, 0}, {16, 4, 2}},
		{SG_CUKT_Q5_1, 24, 4, {8, 4, 0, 2}, {16, 4, 2, 2}},
	};
	for (size_t i = 0; i < sizeof legacy / sizeof legacy[0]; i++)
		if (legacy[i].kt == kt) {
			f->nf = legacy[i].nf;
			f->block_bytes = legacy[i].bb;
			for (int j = 0; j < f->nf; j++) f->off[j] = legacy[i].off[j], f->bytes[j] = legacy[i].bytes[j];
			return 0;
		}
	return -1;
}

int sg_cuda_repack_kq(int kt, int64_t K, const uint8_t *file_row, uint8_t *dev_row) { return kq_move((sg_cukt)kt, K, file_row, dev_row, 0); }

int sg_cuda_unpack_kq(int kt, int64_t K, const uint8_t *dev_row, uint8_t *file_row) { return kq_move((sg_cukt)kt, K, dev_row, file_row, 1); }

/* One row from the file layout into the device layout (legacy types and the planar K-quants). */
void sg_cuda_repack_row(sg_cukt kt, int64_t K, const uint8_t *src, uint8_t *dst, size_t dst_bytes)
{
	memset(dst, 0, dst_bytes);
	int64_t nb = K / 32;
	if (kt == SG_CUKT_Q4_K || kt == SG_CUKT_Q6_K || kt == SG_CUKT_MLX4) {
		sg_cuda_repack_kq(kt, K, src, dst);
		return;
	}
	for (int64_t b = 0; b < nb; b++) {
		switch (kt) {
		case SG_CUKT_Q8_0: {
			const uint8_t *s = src + b * 34;
			memcpy(dst + 32 * b, s + 2, 32);
			memcpy(dst + 32 * nb + 2 * b, s, 2);
			break;
		}
		case SG_CUKT_Q4_0: {
			const uint8_t *s = src + b * 18;
			memcpy(dst + 16 * b, s + 2, 16);
			memcpy(dst + 16 * nb + 2 * b, s, 2);
			break;
		}
		case SG_CUKT_Q4_1: {
			const uint8_t *s = src + b * 20;
			memcpy(dst + 16 * b, s + 4, 16);
			memcpy(dst + 16 * nb + 2 * b, s, 2);
			memcpy(dst + 18 * nb + 2 * b, s + 2, 2);
			break;
		}
		case SG_CUKT_Q5_0: {
			const uint8_t *s = src + b * 22;
			memcpy(dst + 16 * b, s + 6, 16);
			memcpy(dst + 16 * nb + 4 * b, s + 2, 4);
			memcpy(dst + 20 * nb + 2 * b, s, 2);
			break;
		}
		case SG_CUKT_Q5_1: {
			const uint8_t *s = src + b * 24;
			memcpy(dst + 16 * b, s + 8, 16);
			memcpy(dst + 16 * nb + 4 * b, s + 4, 4);
			memcpy(dst + 20 * nb + 2 * b, s, 2);
			memcpy(dst + 22 * nb + 2 * b, s + 2, 2);
			break;
		}
		default: break;
		}
	}
}

/*
 * mvx_kernel: an exact step's GEMV of Q4_K and Q6_K rows on the tensor cores (SARAGOSSA_CUDA_VERIFY_MMA).
 * Included by cuda_gemv.cu after the fused GEMV's helpers (slot_row, multi_epi, tok_at).
 *
 * The one-token kernel (mvs_kernel, sb_row_sum) gives lane sl of a row the blocks sl, sl + LPR, ...;
 * for each block the integer dot of every 32-element sub-block (Q4_K) or 16-element run (Q6_K)
 * with the token's 8-bit activations, then that piece's float step (q4k_term, q6k_term) into the
 * lane's running sum, then the lanes' sums by the butterfly of shuffles. A verify step gives every
 * token those bits, so only the integer dots are free to be computed another way: here an
 * mma.m16n8k32 (k16 for Q6_K's runs) takes them for 16 tokens x 8 rows at once, exact in int32,
 * and each thread then runs the float steps of the (token, row) pairs its accumulator fragment holds,
 * in the one-token kernel's order. The dp4a kernels of a step's tokens (mvt_kernel) are bound by
 * the latency of one dot chain per token and lane; here the dots of 16 tokens are one instruction.
 *
 * A block: W = min(LPR, 8) warps on one tile of 8 row slots (a GLU: 4 gate rows and the same 4 up
 * rows) and up to 32 tokens (two 16-token tiles); many small blocks, each warp one or a few lane
 * slots, so that the loads of many warps are in flight at once (a first form, 4 warps a block and up
 * to 8 lane slots a warp, ran slower than the dp4a kernels: too few warps an SM to cover the loads'
 * latency). Warp w takes the lane slots sl = w, w + W, ..., which the butterfly's first rounds (xor
 * LPR/2 .. W) sum among themselves: the warp sums its slots' partial sums in that tree (leaves in
 * bit-reversed order, a binary counter), and the last rounds (xor W/2 .. 1) sum the warps' results in
 * shared memory, as lane 0 of the butterfly does. Float addition being commutative, each pair's order
 * does not change its bits.
 *
 * mma fragments (PTX ISA, integer m16n8k32 / m16n8k16, row.col): groupID g = lane / 4, t = lane % 4;
 * A (tokens x k): a0 row g k 4t..4t+3, a1 row g + 8 the same k, a2 / a3 the same rows at k + 16
 * (k32); B (k x rows): b0 k 4t..4t+3 of column g, b1 k + 16 (k32); C: c0 / c1 row g, columns 2t and
 * 2t + 1, c2 / c3 row g + 8.
 */
#define MVX_TOK 32 /* tokens a block */

static __device__ __forceinline__ void mma_s8_k32(int *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
	c[0] = c[1] = c[2] = c[3] = 0;
	asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		     : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ void mma_s8_k16(int *c, uint32_t a0, uint32_t a1, uint32_t b0)
{
	c[0] = c[1] = c[2] = c[3] = 0;
	asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
		     : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
		     : "r"(a0), "r"(a1), "r"(b0));
}
static __device__ __forceinline__ uint32_t ld32(const void *p) { return __ldg((const uint32_t *)p); }

/* The tokens of a thread's fragments: its A and C rows g and g + 8 of each 16-token tile (clamped to
 * the last token: computed, never stored), as pointers to their 8-bit activations, scales and half
 * sums at block 0. */
template <int NM> struct MvxTok {
	const int8_t *x[NM][2];
	const float *d[NM][2], *s[NM][2];
};

/* Q4_K: block b's dots for the warp's column slot g (B) and its two accumulator rows' slots (C).
 * The pieces are loaded as they are used (not all of a block's ahead): with every load hoisted a
 * thread held 168 registers, and the register cap that lets many warps share an SM spilled them. */
template <int NM>
static __device__ __forceinline__ void mvx_q4k(const uint8_t *rb, const uint8_t *const *rc, int64_t nb, int64_t b, int q, const MvxTok<NM> &tk,
					       float (*acc)[4])
{
	uint32_t sc[2][2], mn[2][2];
	float d[2], dmin[2];
#pragma unroll
	for (int c = 0; c < 2; c++) {
		const uint32_t *sp = (const uint32_t *)(rc[c] + 128 * nb + 12 * b);
		uint32_t s0 = __ldg(sp), s1 = __ldg(sp + 1), s2 = __ldg(sp + 2), dm = __ldg((const uint32_t *)(rc[c] + 140 * nb) + b);
		sc[c][0] = s0 & 0x3f3f3f3fu, sc[c][1] = (s2 & 0x0f0f0f0fu) | ((s0 >> 2) & 0x30303030u);
		mn[c][0] = s1 & 0x3f3f3f3fu, mn[c][1] = ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 2) & 0x30303030u);
		d[c] = h2f((uint16_t)dm), dmin[c] = h2f((uint16_t)(dm >> 16));
	}
#pragma unroll 2
	for (int j = 0; j < 4; j++) {
		/* pieces 2j (k 0-15) and 2j + 1 (k 16-31): sub-block 2j in their low nibbles, 2j + 1 in the high */
		const uint32_t w0 = ld32(rb + ((int64_t)(2 * j) * nb + b) * 16 + 4 * q), w1 = ld32(rb + ((int64_t)(2 * j + 1) * nb + b) * 16 + 4 * q);
#pragma unroll
		for (int e = 0; e < 2; e++) {
			const int s = 2 * j + e, sh = 8 * (s & 3);
			const uint32_t b0 = (w0 >> (4 * e)) & 0x0f0f0f0fu, b1 = (w1 >> (4 * e)) & 0x0f0f0f0fu;
			float cs[2], ms[2];
#pragma unroll
			for (int c = 0; c < 2; c++)
				cs[c] = (float)(((j < 2 ? sc[c][0] : sc[c][1]) >> sh) & 255u), ms[c] = (float)(((j < 2 ? mn[c][0] : mn[c][1]) >> sh) & 255u);
#pragma unroll
			for (int mt = 0; mt < NM; mt++) {
				const int64_t o = 256 * b + 32 * s + 4 * q;
				int C[4];
				mma_s8_k32(C, ld32(tk.x[mt][0] + o), ld32(tk.x[mt][1] + o), ld32(tk.x[mt][0] + o + 16), ld32(tk.x[mt][1] + o + 16), b0, b1);
#pragma unroll
				for (int h = 0; h < 2; h++) {
					const float dv = __ldg(tk.d[mt][h] + 8 * b + s);
					const float2 sv = __ldg((const float2 *)(tk.s[mt][h] + 16 * b + 2 * s));
#pragma unroll
					for (int c = 0; c < 2; c++) acc[mt][2 * h + c] += q4k_term(d[c], cs[c], dv, C[2 * h + c], dmin[c], ms[c], sv.x, sv.y);
				}
			}
		}
	}
}

/* Q6_K: block b's dots, the runs of 16 in mv's order (p = 0..7: a run of low nibbles at ea, one of
 * high nibbles at ea + 64), each row's run sums into a, then a times the row's d into acc. */
template <int NM>
static __device__ __forceinline__ void mvx_q6k(const uint8_t *rb, const uint8_t *const *rc, int64_t nb, int64_t b, int q, const MvxTok<NM> &tk,
					       float (*acc)[4])
{
	uint4 sc[2];
	float d[2];
#pragma unroll
	for (int c = 0; c < 2; c++) sc[c] = ld16(rc[c] + 192 * nb + 16 * b), d[c] = h2f(__ldg((const unsigned short *)(rc[c] + 208 * nb) + b));
	float a[NM][4];
#pragma unroll
	for (int mt = 0; mt < NM; mt++)
#pragma unroll
		for (int e = 0; e < 4; e++) a[mt][e] = 0.0f;
#pragma unroll 2
	for (int p = 0; p < 8; p++) {
		const int n = p >> 2, kk = (p >> 1) & 1, ea = 128 * n + 32 * kk + 16 * (p & 1), eb = ea + 64;
		const uint32_t w = ld32(rb + ((int64_t)p * nb + b) * 16 + 4 * q), hb = ld32(rb + 128 * nb + ((int64_t)(2 * n + (p & 1)) * nb + b) * 16 + 4 * q);
		const uint32_t ca = (w & 0x0f0f0f0fu) | (((hb >> (2 * kk)) & 0x03030303u) << 4);
		const uint32_t cb = ((w >> 4) & 0x0f0f0f0fu) | (((hb >> (2 * kk + 4)) & 0x03030303u) << 4);
		float sa[2], sb[2];
#pragma unroll
		for (int c = 0; c < 2; c++) sa[c] = (float)(int8_t)qbyte(sc[c], ea >> 4), sb[c] = (float)(int8_t)qbyte(sc[c], eb >> 4);
#pragma unroll
		for (int mt = 0; mt < NM; mt++) {
			const int64_t o = 256 * b + 4 * q;
			int A[4], B[4];
			mma_s8_k16(A, ld32(tk.x[mt][0] + o + ea), ld32(tk.x[mt][1] + o + ea), ca);
			mma_s8_k16(B, ld32(tk.x[mt][0] + o + eb), ld32(tk.x[mt][1] + o + eb), cb);
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const float *dv = tk.d[mt][h] + 8 * b, *sv = tk.s[mt][h] + 16 * b;
				const float da = __ldg(dv + (ea >> 5)), db = __ldg(dv + (eb >> 5)), xa = __ldg(sv + (ea >> 4)), xb = __ldg(sv + (eb >> 4));
#pragma unroll
				for (int c = 0; c < 2; c++) {
					a[mt][2 * h + c] += q6k_term(sa[c], da, A[2 * h + c], xa);
					a[mt][2 * h + c] += q6k_term(sb[c], db, B[2 * h + c], xb);
				}
			}
		}
	}
#pragma unroll
	for (int mt = 0; mt < NM; mt++)
#pragma unroll
		for (int e = 0; e < 4; e++) acc[mt][e] += q6k_fin(d[e & 1], a[mt][e]);
}

static __host__ __device__ constexpr int mvx_log2(int n) { return n <= 1 ? 0 : 1 + mvx_log2(n / 2); }
static __device__ __forceinline__ int mvx_brev(int i, int bits) { return bits ? (int)(__brev((unsigned)i) >> (32 - bits)) : 0; }

/* W warps a block (LPR, at most 8): warp w takes the lane slots w, w + W, ... */
#define MVX_W(LPR) ((LPR) < 8 ? (LPR) : 8)

template <int KT, int LPR, int NM>
__global__ void __launch_bounds__(32 * MVX_W(LPR), 16 / MVX_W(LPR))
	mvx_kernel(const __grid_constant__ sg_cu_multi p, const int8_t *__restrict__ xq, const float *__restrict__ dx, const float *__restrict__ sx,
		   int64_t rows)
{
	enum { W = MVX_W(LPR), NI = LPR / W, LOG = mvx_log2(LPR / W) };
	__shared__ float part[W][16 * NM][8];
	const int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	const int glu = p.epi == SG_CU_EPI_GLU, per = glu ? 4 : 8;
	const int64_t g0 = (int64_t)blockIdx.x * per, t0 = (int64_t)blockIdx.y * MVX_TOK, nb = p.w[0].K / 256;
	const int nt = (int)(p.ntok - t0 < MVX_TOK ? p.ntok - t0 : MVX_TOK);
	pdl_trigger();
	int64_t r;
	int m = slot_row(p, g0, g, per, glu, rows, r);
	const uint8_t *rb = p.w[m].data + (size_t)r * p.w[m].row_bytes, *rc[2];
#pragma unroll
	for (int c = 0; c < 2; c++) {
		m = slot_row(p, g0, 2 * q + c, per, glu, rows, r);
		rc[c] = p.w[m].data + (size_t)r * p.w[m].row_bytes;
	}
	MvxTok<NM> tk;
#pragma unroll
	for (int mt = 0; mt < NM; mt++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int t = 16 * mt + 8 * h + g;
			const int64_t tt = t0 + (t < nt ? t : nt - 1);
			tk.x[mt][h] = tok_at(xq, tt, p.q8b), tk.d[mt][h] = tok_at(dx, tt, p.q8b), tk.s[mt][h] = tok_at(sx, tt, p.q8b);
		}
	pdl_wait();
	/* the warp's lane slots sl = warp + W i, leaves in bit-reversed order, summed by a binary counter
	 * (stk[l]: a finished subtree of 2^l leaves) */
	float cur[NM][4], stk[LOG > 0 ? LOG : 1][NM][4];
#pragma unroll
	for (int i = 0; i < NI; i++) {
		const int sl = warp + W * mvx_brev(i, LOG);
#pragma unroll
		for (int mt = 0; mt < NM; mt++)
#pragma unroll
			for (int e = 0; e < 4; e++) cur[mt][e] = 0.0f;
		for (int64_t b = sl; b < nb; b += LPR) {
			if (KT == SG_CUKT_Q4_K) mvx_q4k<NM>(rb, rc, nb, b, q, tk, cur);
			else mvx_q6k<NM>(rb, rc, nb, b, q, tk, cur);
		}
#pragma unroll
		for (int l = 0; l < LOG; l++) {
			if (!((i >> l) & 1)) {
#pragma unroll
				for (int mt = 0; mt < NM; mt++)
#pragma unroll
					for (int e = 0; e < 4; e++) stk[l][mt][e] = cur[mt][e];
				break;
			}
#pragma unroll
			for (int mt = 0; mt < NM; mt++)
#pragma unroll
				for (int e = 0; e < 4; e++) cur[mt][e] = stk[l][mt][e] + cur[mt][e];
		}
	}
#pragma unroll
	for (int mt = 0; mt < NM; mt++)
#pragma unroll
		for (int e = 0; e < 4; e++) part[warp][16 * mt + 8 * (e >> 1) + g][2 * q + (e & 1)] = cur[mt][e];
	__syncthreads();
	/* the butterfly's last rounds (xor W/2 .. 1) over the warps' sums: warp w and w + o, o = W/2 .. 1 */
	for (int i = (int)threadIdx.x; i < 16 * NM * 8; i += 32 * W) {
		const int t = i >> 3, s = i & 7;
		float v[W];
#pragma unroll
		for (int w = 0; w < W; w++) v[w] = part[w][t][s];
#pragma unroll
		for (int o = W / 2; o > 0; o >>= 1)
#pragma unroll
			for (int w = 0; w < o; w++) v[w] = v[w] + v[w + o];
		part[0][t][s] = v[0];
	}
	__syncthreads();
	for (int i = (int)threadIdx.x; i < nt * 8; i += 32 * W) multi_epi<8>(p, i & 7, g0, part[0][i >> 3], rows, NULL, t0 + (i >> 3));
}

typedef void (*mvx_fn)(const sg_cu_multi, const int8_t *, const float *, const float *, int64_t);

template <int KT, int NM> static mvx_fn mvx_pick_lpr(int lpr)
{
	switch (lpr) {
	case 4: return mvx_kernel<KT, 4, NM>;
	case 8: return mvx_kernel<KT, 8, NM>;
	case 16: return mvx_kernel<KT, 16, NM>;
	default: return mvx_kernel<KT, 32, NM>;
	}
}
static mvx_fn mvx_pick(int kt, int lpr, int nm)
{
	if (kt == SG_CUKT_Q4_K) return nm > 1 ? mvx_pick_lpr<SG_CUKT_Q4_K, 2>(lpr) : mvx_pick_lpr<SG_CUKT_Q4_K, 1>(lpr);
	return nm > 1 ? mvx_pick_lpr<SG_CUKT_Q6_K, 2>(lpr) : mvx_pick_lpr<SG_CUKT_Q6_K, 1>(lpr);
}

/* Runs m's stage (ntok tokens, already quantized to xq / dx / sx) through mvx_kernel when every
 * matrix is planar Q4_K or Q6_K; a store stage of both kinds runs as one launch per run of one kind.
 * Returns -1 when it does not take the stage. */
static int mvx_launch(const sg_cu_multi *mp, const int8_t *xq, const float *dx, const float *sx, cudaStream_t st)
{
	const int64_t K = mp->w[0].K;
	for (int i = 0; i < mp->nw; i++) {
		const sg_cuw *w = &mp->w[i];
		if ((w->kt != SG_CUKT_Q4_K && w->kt != SG_CUKT_Q6_K) || w->K != K || sb_kind(w) != w->kt || !sg_cu_sb_ok(w)) return -1;
	}
	const int glu = mp->epi == SG_CU_EPI_GLU;
	if (glu && mp->w[0].kt != mp->w[1].kt) return -1;
	if (!glu && mp->epi != SG_CU_EPI_STORE) { /* ADD: one matrix */
		if (mp->nw != 1) return -1;
	}
	const int lpr = sb_lanes(K / 256);
	const unsigned tg = (unsigned)((mp->ntok + MVX_TOK - 1) / MVX_TOK);
	const int nm = mp->ntok > 16 ? 2 : 1;
	int i0 = 0;
	while (i0 < mp->nw) { /* the runs of one kind (a GLU: its two matrices) */
		int i1 = glu ? mp->nw : i0 + 1;
		while (!glu && i1 < mp->nw && mp->w[i1].kt == mp->w[i0].kt) i1++;
		sg_cu_multi sub = *mp;
		int64_t rows = 0;
		if (!glu) {
			sub.nw = i1 - i0;
			for (int i = 0; i < sub.nw; i++) {
				sub.w[i] = mp->w[i0 + i], sub.N[i] = mp->N[i0 + i], sub.bias[i] = mp->bias[i0 + i], sub.y[i] = mp->y[i0 + i];
				rows += sub.N[i];
			}
		} else
			rows = mp->N[0];
		const int per = glu ? 4 : 8;
		pdl_launch(mvx_pick(sub.w[0].kt, lpr, nm), dim3((unsigned)((rows + per - 1) / per), tg), dim3(32 * MVX_W(lpr)), 0, st, sub, xq, dx, sx,
			   rows);
		int e = (int)cudaGetLastError();
		if (e) return e;
		i0 = i1;
	}
	return 0;
}

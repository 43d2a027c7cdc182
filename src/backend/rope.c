/* RoPE frequency tables: shared by every backend so the scaling schemes are defined once. */
#include <math.h>

#include "backend/backend.h"

int sg_rope_inv_freq(const sg_rope_params *p, double theta, float *inv_freq, float *pos_scale, float *mscale)
{
	int nr = p->n_rot, hd = p->head_dim;
	/* proportional: the rotated pairs span the whole head ((i, i + hd/2) in neox layout) with
	 * frequencies theta^(-2i/hd); pairs past n_rot/2 get frequency 0 (identity) */
	int prop = p->scaling == SG_ROPE_SCALING_PROPORTIONAL;
	int dim = prop ? hd : nr, half = dim / 2;
	*pos_scale = 1.0f;
	*mscale = 1.0f;
	for (int i = 0; i < half; i++) {
		double f = 1.0 / pow(theta, (double)(2 * i) / (double)dim);
		if (prop && 2 * i >= nr) f = 0;
		inv_freq[i] = (float)f;
	}
	if (p->scaling == SG_ROPE_SCALING_LINEAR && p->factor > 0) *pos_scale = 1.0f / p->factor;
	if (p->scaling == SG_ROPE_SCALING_LLAMA3 && p->factor > 0) {
		double lo = p->low_freq_factor > 0 ? p->low_freq_factor : 1, hi = p->high_freq_factor > 0 ? p->high_freq_factor : 4;
		double oc = p->orig_ctx > 0 ? p->orig_ctx : 8192;
		double lo_wl = oc / lo, hi_wl = oc / hi;
		for (int i = 0; i < half; i++) {
			double f = inv_freq[i], wl = 2 * M_PI / f;
			if (wl > lo_wl) f /= p->factor;
			else if (wl >= hi_wl) {
				double s = (oc / wl - lo) / (hi - lo);
				f = (1 - s) * f / p->factor + s * f;
			}
			inv_freq[i] = (float)f;
		}
	}
	if (p->scaling == SG_ROPE_SCALING_YARN && p->factor > 0) {
		double bf = p->beta_fast > 0 ? p->beta_fast : 32, bs = p->beta_slow > 0 ? p->beta_slow : 1;
		double oc = p->orig_ctx > 0 ? p->orig_ctx : 4096;
		/* the dims whose wavelength completes beta turns over the original context */
		double lo = floor(dim * log(oc / (bf * 2 * M_PI)) / (2 * log(p->theta)));
		double hi = ceil(dim * log(oc / (bs * 2 * M_PI)) / (2 * log(p->theta)));
		if (lo < 0) lo = 0;
		if (hi > dim - 1) hi = dim - 1;
		if (hi == lo) hi += 0.001;
		for (int i = 0; i < half; i++) {
			double ramp = ((double)i - lo) / (hi - lo);
			ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
			double extrap = 1 - ramp, f = inv_freq[i];
			inv_freq[i] = (float)(f / p->factor * (1 - extrap) + f * extrap);
		}
		*mscale = p->attn_factor > 0 ? p->attn_factor : (float)(0.1 * log(p->factor) + 1.0);
	}
	return half;
}

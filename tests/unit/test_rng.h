/* The unit tests' random numbers: xorshift64 from the seed the including file names in
 * TEST_RNG_SEED, so each file draws the same data on every run. */
#ifndef SG_TEST_RNG_H
#define SG_TEST_RNG_H

#include <stdint.h>

static uint64_t rng = TEST_RNG_SEED;
static inline uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}
/* uniform in [-1, 1) */
static inline float frand(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }
/* roughly bell-shaped, in (-3, 3) */
static inline float grand(void) { return frand() + frand() + frand(); }

#endif

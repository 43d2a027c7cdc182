/* libFuzzer target: audio decoding from memory (libsndfile's virtual I/O, downmix, soxr), and the
 * same bytes as raw 16-bit PCM with a rate and channel count taken from the first two bytes. */
#include <stddef.h>
#include <stdint.h>

#include "audio/decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sg_audio a;
	volatile float sink = 0.0f;
	if (sg_audio_decode_memory(data, size, &a) == SG_OK) {
		sink += a.samples[0] + a.samples[a.n - 1];
		sg_audio_free(&a);
	}
	if (size >= 2) {
		static const int rates[] = {8000, 11025, 16000, 22050, 44100, 48000, 96000, 0};
		int rate = rates[data[0] % 8], channels = data[1] % 9; /* 0 and rate 0: the refusals */
		if (sg_audio_from_pcm16(data + 2, size - 2, rate, channels, &a) == SG_OK) {
			sink += a.samples[0] + a.samples[a.n - 1];
			sg_audio_free(&a);
		}
	}
	(void)sink;
	return 0;
}

/* Reading the Qwen3-TTS fixtures' ref.json (written by tools/make_qwen_tts_fixtures.py with the
 * qwen-tts package) in the unit tests: the file, its arrays as C arrays (malloc'd), and a CPU backend. */
#ifndef SG_TEST_TTS_REF_H
#define SG_TEST_TTS_REF_H

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "backend/backend.h"

static inline json_t *tts_ref_load(const char *path)
{
	json_error_t e;
	json_t *r = json_load_file(path, 0, &e);
	cr_assert(r, "%s: %s", path, e.text);
	return r;
}

static inline float *floats(const json_t *a, int *n)
{
	*n = (int)json_array_size(a);
	float *v = malloc(sizeof(float) * (size_t)(*n ? *n : 1));
	for (int i = 0; i < *n; i++) v[i] = (float)json_number_value(json_array_get(a, (size_t)i));
	return v;
}

static inline int32_t *ints(const json_t *a, int *n)
{
	*n = (int)json_array_size(a);
	int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n ? *n : 1));
	for (int i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
	return v;
}

/* a one-thread CPU backend for the model parts under test */
static inline sg_backend *cpu(void)
{
	sg_backend *be = NULL;
	sg_cpu_params p = {1, NULL};
	cr_assert_eq(sg_cpu_backend_create(&p, &be), SG_OK);
	return be;
}

/* codes [frames][G] from a JSON array of arrays */
static inline int32_t *codes_of(const json_t *a, int G, int *frames)
{
	*frames = (int)json_array_size(a);
	int32_t *v = malloc(sizeof(int32_t) * (size_t)(*frames * G + 1));
	for (int f = 0; f < *frames; f++)
		for (int g = 0; g < G; g++) v[f * G + g] = (int32_t)json_integer_value(json_array_get(json_array_get(a, (size_t)f), (size_t)g));
	return v;
}

#endif

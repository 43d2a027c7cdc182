/* Unit tests of src/base: errors, flags, alloc, arena, threadpool, mmap, json, sha256, utf8,
 * progress, timer, sysinfo. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <criterion/redirect.h>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/arena.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/log.h"
#include "base/mmap.h"
#include "base/progress.h"
#include "base/sha256.h"
#include "base/sysinfo.h"
#include "base/threadpool.h"
#include "base/timer.h"
#include "base/utf8.h"

/* ---- errors ---- */

Test(error, sets_message_and_returns_status)
{
	sg_status st = sg_error(SG_ERR_FORMAT, "gguf: tensor '%s' ends at %d past %d", "w", 10, 5);
	cr_assert_eq(st, SG_ERR_FORMAT);
	cr_assert_str_eq(sg_last_error(), "gguf: tensor 'w' ends at 10 past 5");
}

static sg_status failing_function(void) { return SG_FAIL(SG_ERR_RANGE, "n=%d", 7); }

Test(error, fail_macro_names_the_function)
{
	cr_assert_eq(failing_function(), SG_ERR_RANGE);
	cr_assert_str_eq(sg_last_error(), "failing_function: n=7");
}

Test(error, wrap_prepends_context)
{
	sg_error(SG_ERR_IO, "cannot open 'x'");
	sg_error_wrap(SG_ERR_IO, "loading model %s", "m");
	cr_assert_str_eq(sg_last_error(), "loading model m: cannot open 'x'");
}

Test(error, long_messages_are_truncated_not_overflowed)
{
	char big[4000];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	sg_error(SG_ERR_FORMAT, "%s", big);
	cr_assert_lt(strlen(sg_last_error()), 1024);
	cr_assert_gt(strlen(sg_last_error()), 1000);
}

static void *other_thread_error(void *arg)
{
	(void)arg;
	sg_error(SG_ERR_IO, "from the other thread");
	return NULL;
}

Test(error, last_error_is_per_thread)
{
	sg_error(SG_ERR_FORMAT, "mine");
	pthread_t t;
	pthread_create(&t, NULL, other_thread_error, NULL);
	pthread_join(t, NULL);
	cr_assert_str_eq(sg_last_error(), "mine");
}

Test(error, status_names)
{
	cr_assert_str_eq(sg_status_str(SG_OK), "ok");
	cr_assert_str_eq(sg_status_str(SG_ERR_NOMEM), "out of memory");
	cr_assert_str_eq(sg_status_str((sg_status)999), "unknown status");
}

/* ---- flags ---- */

Test(flags, defaults_without_environment)
{
	unsetenv("SARAGOSSA_THREADS");
	sg_flags_reload();
	cr_assert_eq(sg_flag_int("SARAGOSSA_THREADS"), 0);
	cr_assert_str_eq(sg_flag_str("SARAGOSSA_SIMD"), "auto");
}

/* The bad value's warning is this test's own: captured (make test's output stays clean) and
 * checked word for word. */
Test(flags, environment_overrides_and_bad_values_fall_back, .init = cr_redirect_stderr)
{
	setenv("SARAGOSSA_THREADS", "3", 1);
	sg_flags_reload();
	cr_assert_eq(sg_flag_int("SARAGOSSA_THREADS"), 3);
	cr_assert_not(sg_flag_is_invalid("SARAGOSSA_THREADS"));
	setenv("SARAGOSSA_THREADS", "three", 1);
	sg_flags_reload();
	cr_assert_eq(sg_flag_int("SARAGOSSA_THREADS"), 0);
	cr_assert(sg_flag_is_invalid("SARAGOSSA_THREADS"));
	unsetenv("SARAGOSSA_THREADS");
	sg_flags_reload();
	fflush(stderr);
	cr_assert_stderr_eq_str("saragossa warn: SARAGOSSA_THREADS='three' is not a valid integer; using the default '0'\n");
}

Test(flags, table_is_iterable_and_described)
{
	int n = sg_flags_count();
	cr_assert_gt(n, 0);
	for (int i = 0; i < n; i++) {
		const char *v;
		int env;
		const sg_flag *f = sg_flag_at(i, &v, &env);
		cr_assert_not_null(f);
		cr_assert_gt(strlen(f->desc), 10, "flag %s needs a description", f->name);
		cr_assert(strncmp(f->name, "SARAGOSSA_", 10) == 0 || strncmp(f->name, "RETI_", 5) == 0);
		for (int j = 0; j < i; j++) cr_assert_str_neq(sg_flag_at(j, NULL, NULL)->name, f->name);
	}
	cr_assert_null(sg_flag_at(n, NULL, NULL));
}

Test(flags, parsers)
{
	int b;
	int64_t v;
	cr_assert_eq(sg_parse_bool("On", &b), 0);
	cr_assert_eq(b, 1);
	cr_assert_eq(sg_parse_bool("no", &b), 0);
	cr_assert_eq(b, 0);
	cr_assert_eq(sg_parse_bool("maybe", &b), -1);
	cr_assert_eq(sg_parse_int("2g", &v), 0);
	cr_assert_eq(v, 2LL << 30);
	cr_assert_eq(sg_parse_int("-5", &v), 0);
	cr_assert_eq(v, -5);
	cr_assert_eq(sg_parse_int("12x", &v), -1);
	cr_assert_eq(sg_parse_int("", &v), -1);
	cr_assert_eq(sg_parse_int("99999999999999999999", &v), -1);
	cr_assert_eq(sg_parse_int("9999999999999g", &v), -1);
}

Test(log, level_parsing)
{
	cr_assert_eq(sg_log_parse_level("debug"), SG_LOG_DEBUG);
	cr_assert_eq(sg_log_parse_level("WARN"), SG_LOG_WARN);
	cr_assert_eq(sg_log_parse_level("loud"), -1);
	sg_log_set_level(SG_LOG_ERROR);
	cr_assert_eq(sg_log_get_level(), SG_LOG_ERROR);
}

/* ---- alloc and arena ---- */

Test(alloc, injected_failures)
{
	sg_alloc_fail_after(2);
	void *a = sg_malloc(8), *b = sg_malloc(8), *c = sg_malloc(8);
	cr_assert_not_null(a);
	cr_assert_not_null(b);
	cr_assert_null(c);
	sg_alloc_fail_after(-1);
	void *d = sg_malloc(8);
	cr_assert_not_null(d);
	sg_free(a), sg_free(b), sg_free(d);
}

Test(alloc, calloc_overflow_is_null)
{
	cr_assert_null(sg_calloc((size_t)1 << 40, (size_t)1 << 40));
	char *s = sg_strndup("hello", 3);
	cr_assert_str_eq(s, "hel");
	sg_free(s);
}

Test(arena, aligned_zeroed_and_grows)
{
	sg_arena a;
	sg_arena_init(&a, 256);
	for (int i = 0; i < 100; i++) {
		size_t align = (size_t)1 << (i % 7);
		unsigned char *p = sg_arena_alloc(&a, 37, align);
		cr_assert_not_null(p);
		cr_assert_eq((uintptr_t)p % align, 0);
		for (int k = 0; k < 37; k++) cr_assert_eq(p[k], 0);
		memset(p, 0xAB, 37);
	}
	void *big = sg_arena_alloc(&a, 100000, 64);
	cr_assert_not_null(big);
	cr_assert_null(sg_arena_alloc(&a, 8, 3)); /* not a power of two */
	char *s = sg_arena_strdup(&a, "abc", 2);
	cr_assert_str_eq(s, "ab");
	sg_arena_reset(&a);
	cr_assert_eq(a.used, 0);
	cr_assert_not_null(sg_arena_alloc(&a, 16, 8));
	sg_arena_free(&a);
}

Test(arena, allocation_failure_returns_null)
{
	sg_arena a;
	sg_arena_init(&a, 64);
	sg_alloc_fail_after(0);
	cr_assert_null(sg_arena_alloc(&a, 16, 8));
	sg_alloc_fail_after(-1);
	sg_arena_free(&a);
}

/* ---- threadpool ---- */

typedef struct {
	atomic_int hits[64];
	atomic_int phase_errors;
	sg_threadpool *pool;
	int counter[8];
} tp_ctx;

static void count_task(void *arg, int ith, int nth)
{
	tp_ctx *c = arg;
	atomic_fetch_add(&c->hits[ith], 1);
	(void)nth;
}

Test(threadpool, every_thread_runs_once_per_run)
{
	sg_threadpool *p;
	cr_assert_eq(sg_threadpool_create(4, &p), SG_OK);
	cr_assert_eq(sg_threadpool_size(p), 4);
	tp_ctx c = {0};
	for (int r = 0; r < 1000; r++) sg_threadpool_run(p, count_task, &c);
	for (int i = 0; i < 4; i++) cr_assert_eq(atomic_load(&c.hits[i]), 1000);
	sg_threadpool_free(p);
}

static void barrier_task(void *arg, int ith, int nth)
{
	tp_ctx *c = arg;
	/* each phase: everyone writes its slot, barrier, everyone checks all slots */
	for (int ph = 1; ph <= 50; ph++) {
		c->counter[ith] = ph;
		sg_threadpool_barrier(c->pool);
		for (int j = 0; j < nth; j++)
			if (c->counter[j] != ph) atomic_fetch_add(&c->phase_errors, 1);
		sg_threadpool_barrier(c->pool);
	}
}

Test(threadpool, barrier_separates_phases)
{
	tp_ctx c = {0};
	cr_assert_eq(sg_threadpool_create(3, &c.pool), SG_OK);
	for (int r = 0; r < 20; r++) sg_threadpool_run(c.pool, barrier_task, &c);
	cr_assert_eq(atomic_load(&c.phase_errors), 0);
	sg_threadpool_free(c.pool);
}

static void fill_range(void *arg, int64_t b, int64_t e, int ith)
{
	int *v = arg;
	for (int64_t i = b; i < e; i++) v[i] += 1 + 0 * ith;
}

Test(threadpool, parallel_for_covers_each_index_once)
{
	sg_threadpool *p;
	cr_assert_eq(sg_threadpool_create(2, &p), SG_OK);
	int n_values[] = {1, 2, 3, 7, 64, 1000, 1001};
	for (size_t k = 0; k < sizeof(n_values) / sizeof(n_values[0]); k++) {
		int n = n_values[k];
		int *v = calloc((size_t)n, sizeof(int));
		sg_parallel_for(p, n, 4, fill_range, v);
		for (int i = 0; i < n; i++) cr_assert_eq(v[i], 1, "n=%d i=%d", n, i);
		free(v);
	}
	sg_parallel_for(p, 0, 1, fill_range, NULL); /* empty range: no call */
	sg_threadpool_free(p);
}

/* run_any: a slot may run on any thread, the caller taking those no worker has started, but each
 * slot runs exactly once per run, also when a slot's work is slow (a worker still in it while the
 * caller moves on would break the count), mixed with runs where every thread waits at barriers,
 * and with workers that have gone to sleep between runs. */
static void slow_count_task(void *arg, int ith, int nth)
{
	tp_ctx *c = arg;
	if (ith == nth - 1) sched_yield();
	atomic_fetch_add(&c->hits[ith], 1);
}

Test(threadpool, run_any_runs_each_slot_once)
{
	tp_ctx c = {0};
	cr_assert_eq(sg_threadpool_create(3, &c.pool), SG_OK);
	for (int r = 0; r < 3000; r++) {
		sg_threadpool_run_any(c.pool, r % 2 ? slow_count_task : count_task, &c);
		if (r % 100 == 0) sg_threadpool_run(c.pool, barrier_task, &c);
		if (r % 1000 == 999) usleep(2000); /* past the workers' spin: they sleep */
	}
	for (int i = 0; i < 3; i++) cr_assert_eq(atomic_load(&c.hits[i]), 3000, "slot %d", i);
	cr_assert_eq(atomic_load(&c.phase_errors), 0);
	sg_threadpool_free(c.pool);
}

Test(threadpool, null_pool_runs_on_caller_and_bad_sizes_fail)
{
	tp_ctx c = {0};
	sg_threadpool_run(NULL, count_task, &c);
	cr_assert_eq(atomic_load(&c.hits[0]), 1);
	cr_assert_eq(sg_threadpool_size(NULL), 1);
	sg_threadpool *p;
	cr_assert_eq(sg_threadpool_create(-1, &p), SG_ERR_INVALID_ARG);
	cr_assert_null(p);
	cr_assert_eq(sg_threadpool_create(0, &p), SG_OK); /* 0 = flag or core count */
	cr_assert_geq(sg_threadpool_size(p), 1);
	sg_threadpool_free(p);
}

/* ---- mmap and files ---- */

static char *tmp_file(const void *data, size_t n)
{
	char *path = strdup("/tmp/sg_test_XXXXXX");
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, data, n), (ssize_t)n);
	close(fd);
	return path;
}

Test(mmap, maps_file_contents)
{
	char *path = tmp_file("hello world", 11);
	sg_mapped_file f;
	cr_assert_eq(sg_mmap_open(path, &f), SG_OK);
	cr_assert_eq(f.size, 11);
	cr_assert(memcmp(f.data, "hello world", 11) == 0);
	sg_mmap_close(&f);
	unlink(path);
	free(path);
}

Test(mmap, missing_file_and_directory_are_clear_errors)
{
	sg_mapped_file f;
	cr_assert_eq(sg_mmap_open("/nonexistent/model.gguf", &f), SG_ERR_NOT_FOUND);
	cr_assert(strstr(sg_last_error(), "/nonexistent/model.gguf") != NULL);
	cr_assert_eq(sg_mmap_open("/tmp", &f), SG_ERR_IO);
	cr_assert(strstr(sg_last_error(), "directory") != NULL);
}

Test(mmap, empty_file_maps_to_null)
{
	char *path = tmp_file("", 0);
	sg_mapped_file f;
	cr_assert_eq(sg_mmap_open(path, &f), SG_OK);
	cr_assert_eq(f.size, 0);
	cr_assert_null(f.data);
	sg_mmap_close(&f);
	unlink(path);
	free(path);
}

Test(mmap, read_file_respects_limit)
{
	char *path = tmp_file("0123456789", 10);
	char *buf;
	size_t n;
	cr_assert_eq(sg_read_file(path, 100, &buf, &n), SG_OK);
	cr_assert_eq(n, 10);
	cr_assert_str_eq(buf, "0123456789");
	sg_free(buf);
	cr_assert_eq(sg_read_file(path, 5, &buf, &n), SG_ERR_RANGE);
	cr_assert_null(buf);
	unlink(path);
	free(path);
}

/* ---- json ---- */

Test(json, parse_error_names_position)
{
	json_t *j;
	cr_assert_eq(sg_json_parse("{\"a\": 1,\n \"b\": }", 17, "request", &j), SG_ERR_FORMAT);
	cr_assert_null(j);
	cr_assert(strstr(sg_last_error(), "request: invalid JSON at line 2") != NULL, "%s", sg_last_error());
}

Test(json, integers_beyond_int64_read_as_reals_in_config_files_only)
{
	/* transformers writes model_max_length 1000000000000000019884624838656 for a tokenizer without a limit */
	const char *src = "{\"model_max_length\": 1000000000000000019884624838656, \"n\": 7, \"x\": 1.5, \"a\": [3, -4]}";
	json_t *j = NULL;
	cr_expect_eq(sg_json_parse(src, strlen(src), "t", &j), SG_ERR_FORMAT, "a request stays strict");
	cr_assert_eq(sg_json_parse_config(src, strlen(src), "t", &j), SG_OK, "%s", sg_last_error());
	int big_real = json_is_real(json_object_get(j, "model_max_length"));
	double big = json_real_value(json_object_get(j, "model_max_length"));
	int n_int = json_is_integer(json_object_get(j, "n"));
	json_int_t n = json_integer_value(json_object_get(j, "n"));
	int x_real = json_is_real(json_object_get(j, "x"));
	json_int_t a1 = json_integer_value(json_array_get(json_object_get(j, "a"), 1));
	cr_expect(big_real && big > 9.9e29);
	cr_expect(n_int && n == 7);
	cr_expect(x_real);
	cr_expect(a1 == -4);
	json_decref(j);
	/* other errors stay errors */
	cr_expect_eq(sg_json_parse_config("{\"a\": 1000000000000000019884624838656,}", 38, "t", &j), SG_ERR_FORMAT);
}

Test(json, duplicate_keys_rejected)
{
	json_t *j;
	cr_assert_eq(sg_json_parse("{\"a\":1,\"a\":2}", 13, "x", &j), SG_ERR_FORMAT);
}

Test(json, typed_getters)
{
	json_t *j;
	const char *src = "{\"n\": 5, \"r\": 2.0, \"f\": 2.5, \"s\": \"x\", \"b\": true, \"big\": 1e300}";
	cr_assert_eq(sg_json_parse(src, strlen(src), "t", &j), SG_OK);
	int64_t i = -1;
	double d;
	int b;
	const char *s;
	cr_assert_eq(sg_json_get_int(j, "n", &i), SG_OK);
	cr_assert_eq(i, 5);
	cr_assert_eq(sg_json_get_int(j, "r", &i), SG_OK);
	cr_assert_eq(i, 2);
	cr_assert_eq(sg_json_get_int(j, "f", &i), SG_ERR_FORMAT);
	cr_assert(strstr(sg_last_error(), "field 'f' must be an integer, found real") != NULL);
	cr_assert_eq(sg_json_get_int(j, "big", &i), SG_ERR_FORMAT);
	cr_assert_eq(sg_json_get_int(j, "missing", &i), SG_ERR_NOT_FOUND);
	cr_assert_eq(sg_json_get_num(j, "f", &d), SG_OK);
	cr_assert_float_eq(d, 2.5, 1e-12);
	cr_assert_eq(sg_json_get_str(j, "s", &s), SG_OK);
	cr_assert_str_eq(s, "x");
	cr_assert_eq(sg_json_get_str(j, "n", &s), SG_ERR_FORMAT);
	cr_assert_eq(sg_json_get_bool(j, "b", &b), SG_OK);
	cr_assert_eq(b, 1);
	json_decref(j);
}

/* ---- sha256 ---- */

Test(sha256, known_vectors)
{
	uint8_t d[32];
	char hex[65];
	cr_assert_eq(sg_sha256("", 0, d), SG_OK);
	sg_hex(d, 32, hex);
	cr_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	cr_assert_eq(sg_sha256("abc", 3, d), SG_OK);
	sg_hex(d, 32, hex);
	cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

Test(sha256, streaming_equals_one_shot)
{
	char buf[1000];
	for (int i = 0; i < 1000; i++) buf[i] = (char)(i * 7);
	uint8_t a[32], b[32];
	sg_sha256(buf, sizeof(buf), a);
	sg_sha256_ctx h;
	cr_assert_eq(sg_sha256_init(&h), SG_OK);
	for (int off = 0; off < 1000; off += 333)
		sg_sha256_update(&h, buf + off, (size_t)(off + 333 > 1000 ? 1000 - off : 333));
	sg_sha256_final(&h, b);
	cr_assert(memcmp(a, b, 32) == 0);
}

/* ---- utf8 ---- */

Test(utf8, decode_valid_and_reject_invalid)
{
	uint32_t cp;
	cr_assert_eq(sg_utf8_decode((const uint8_t *)"A", 1, &cp), 1);
	cr_assert_eq(cp, 'A');
	cr_assert_eq(sg_utf8_decode((const uint8_t *)"\xC3\xA9", 2, &cp), 2);
	cr_assert_eq(cp, 0xE9);
	cr_assert_eq(sg_utf8_decode((const uint8_t *)"\xF0\x9F\x98\x80", 4, &cp), 4);
	cr_assert_eq(cp, 0x1F600);
	cr_assert_eq(sg_utf8_decode((const uint8_t *)"\xC0\xAF", 2, &cp), 0);         /* overlong */
	cr_assert_eq(sg_utf8_decode((const uint8_t *)"\xED\xA0\x80", 3, &cp), 0);     /* surrogate */
	cr_assert_eq(sg_utf8_decode((const uint8_t *)"\xF4\x90\x80\x80", 4, &cp), 0); /* > U+10FFFF */
	cr_assert_eq(sg_utf8_decode((const uint8_t *)"\xE2\x82", 2, &cp), 0);         /* truncated */
	cr_assert_eq(cp, 0xFFFD);
}

Test(utf8, encode_round_trip_every_plane)
{
	for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x1000 ? 1 : 97)) {
		uint8_t b[4];
		int n = sg_utf8_encode(cp, b);
		if (cp >= 0xD800 && cp <= 0xDFFF) {
			cr_assert_eq(n, 0);
			continue;
		}
		uint32_t back;
		cr_assert_eq(sg_utf8_decode(b, (size_t)n, &back), n);
		cr_assert_eq(back, cp);
	}
	uint8_t b[4];
	cr_assert_eq(sg_utf8_encode(0x110000, b), 0);
}

Test(utf8, complete_prefix_holds_back_partial_sequences)
{
	const uint8_t *s = (const uint8_t *)"ab\xE2\x82\xAC"; /* "ab€" */
	cr_assert_eq(sg_utf8_complete_prefix(s, 5), 5);
	cr_assert_eq(sg_utf8_complete_prefix(s, 4), 2);
	cr_assert_eq(sg_utf8_complete_prefix(s, 3), 2);
	cr_assert_eq(sg_utf8_complete_prefix(s, 2), 2);
	/* invalid bytes are never held back */
	cr_assert_eq(sg_utf8_complete_prefix((const uint8_t *)"a\xFF", 2), 2);
	cr_assert_eq(sg_utf8_complete_prefix((const uint8_t *)"a\x80", 2), 2);
	cr_assert_eq(sg_utf8_complete_prefix((const uint8_t *)"\xF0\x9F\x98", 3), 0);
	cr_assert(sg_utf8_valid((const uint8_t *)"h\xC3\xA9llo", 6));
	cr_assert_not(sg_utf8_valid((const uint8_t *)"h\xC3llo", 5));
}

/* ---- progress, timer, sysinfo ---- */

Test(progress, formats_percent_rate_and_eta)
{
	sg_progress p;
	sg_progress_begin(&p, "model.gguf", 100000000, 0);
	p.done = 50000000;
	char line[256];
	sg_progress_format(&p, p.t0 + 10.0, 100, line, sizeof(line));
	cr_assert(strstr(line, "model.gguf  50%") != NULL, "%s", line);
	cr_assert(strstr(line, "50.0 MB/100.0 MB") != NULL, "%s", line);
	cr_assert(strstr(line, "5.0 MB/s") != NULL, "%s", line);
	cr_assert(strstr(line, "ETA 10s") != NULL, "%s", line);
	char b[32];
	sg_format_bytes(512, b, sizeof(b));
	cr_assert_str_eq(b, "512 B");
	sg_format_bytes(1500000000, b, sizeof(b));
	cr_assert_str_eq(b, "1.5 GB");
}

Test(timer, monotonic)
{
	uint64_t a = sg_time_ns();
	usleep(2000);
	uint64_t b = sg_time_ns();
	cr_assert_geq(b - a, 2000000);
}

Test(sysinfo, reports_memory_and_cpu)
{
	cr_assert_gt(sg_mem_total(), 0);
	cr_assert_gt(sg_mem_rss(), 0);
	uint64_t rss = sg_mem_rss();
	uint64_t peak = sg_mem_peak_rss(); /* read after: the peak can only have grown */
	cr_assert_geq(peak, rss);
	cr_assert_gt(strlen(sg_cpu_model_name()), 0);
	cr_assert_geq(sg_cpu_count(), 1);
	char f[256];
	sg_cpu_features_str(f, sizeof(f));
	cr_assert_gt(strlen(f), 0);
}

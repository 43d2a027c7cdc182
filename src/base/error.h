/* Errors: sg_status plus a thread-local last-error message naming the function and the values. */
#ifndef SG_BASE_ERROR_H
#define SG_BASE_ERROR_H

#include "saragossa.h"

/* Sets the calling thread's last error to the formatted message and returns st, so a failing
 * function can end with `return sg_error(SG_ERR_FORMAT, "gguf: tensor '%s' ...", name);`. */
sg_status sg_error(sg_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes the message with the caller's function name: "sg_mmap_open: ...". */
#define SG_FAIL(st, ...) sg_error_fn((st), __func__, __VA_ARGS__)
sg_status sg_error_fn(sg_status st, const char *func, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to the current last error (adds context while unwinding). */
sg_status sg_error_wrap(sg_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void sg_error_clear(void);

/* For true invariants only (never for input validation): stays on in release builds. */
#define SG_ASSERT(cond)                                                                            \
	do {                                                                                       \
		if (!(cond)) sg_assert_fail(#cond, __FILE__, __LINE__, __func__);                  \
	} while (0)
_Noreturn void sg_assert_fail(const char *expr, const char *file, int line, const char *func);

#endif

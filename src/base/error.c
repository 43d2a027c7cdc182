#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SG_ERROR_MAX 1024

static _Thread_local char last_error[SG_ERROR_MAX];

static const char *status_names[] = {
	[SG_OK] = "ok",
	[SG_ERR_INVALID_ARG] = "invalid argument",
	[SG_ERR_IO] = "i/o error",
	[SG_ERR_FORMAT] = "malformed input",
	[SG_ERR_UNSUPPORTED] = "unsupported",
	[SG_ERR_NOMEM] = "out of memory",
	[SG_ERR_RANGE] = "out of range",
	[SG_ERR_CANCELLED] = "cancelled",
	[SG_ERR_BACKEND] = "backend error",
	[SG_ERR_NOT_FOUND] = "not found",
	[SG_ERR_INTERNAL] = "internal error",
};

const char *sg_status_str(sg_status st)
{
	if ((unsigned)st >= sizeof(status_names) / sizeof(status_names[0]) || !status_names[st])
		return "unknown status";
	return status_names[st];
}

const char *sg_last_error(void) { return last_error; }

void sg_error_clear(void) { last_error[0] = 0; }

sg_status sg_error(sg_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return st;
}

sg_status sg_error_fn(sg_status st, const char *func, const char *fmt, ...)
{
	int n = snprintf(last_error, sizeof(last_error), "%s: ", func);
	if (n < 0 || n >= (int)sizeof(last_error)) n = 0;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error + n, sizeof(last_error) - (size_t)n, fmt, ap);
	va_end(ap);
	return st;
}

sg_status sg_error_wrap(sg_status st, const char *fmt, ...)
{
	char prev[SG_ERROR_MAX];
	memcpy(prev, last_error, sizeof(prev));
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	if (n < 0) n = 0;
	if ((size_t)n < sizeof(last_error) && prev[0])
		snprintf(last_error + n, sizeof(last_error) - (size_t)n, ": %s", prev);
	return st;
}

void sg_assert_fail(const char *expr, const char *file, int line, const char *func)
{
	fprintf(stderr, "saragossa: internal invariant failed: %s (%s:%d, %s)\n", expr, file, line, func);
	abort();
}

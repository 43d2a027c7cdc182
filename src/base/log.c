#include "base/log.h"
#include "base/flags.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static atomic_int cur_level = -1; /* -1: not yet read from the flags */
static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;
static const char *level_names[] = {"debug", "info", "warn", "error", "off"};

int sg_log_parse_level(const char *s)
{
	if (!s) return -1;
	for (int i = 0; i <= SG_LOG_OFF; i++)
		if (strcasecmp(s, level_names[i]) == 0) return i;
	if (strcasecmp(s, "warning") == 0) return SG_LOG_WARN;
	return -1;
}

sg_log_level sg_log_get_level(void)
{
	int lv = atomic_load(&cur_level);
	if (lv < 0) {
		lv = sg_log_parse_level(sg_flag_str("SARAGOSSA_LOG"));
		if (lv < 0) lv = SG_LOG_INFO;
		atomic_store(&cur_level, lv);
	}
	return (sg_log_level)lv;
}

void sg_log_set_level(sg_log_level level) { atomic_store(&cur_level, (int)level); }

void sg_log(sg_log_level level, const char *fmt, ...)
{
	if (level < sg_log_get_level() || level >= SG_LOG_OFF) return;
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* One write per line under a lock so lines from several threads never interleave. */
	pthread_mutex_lock(&log_mutex);
	fprintf(stderr, "saragossa %s: %s\n", level_names[level], buf);
	pthread_mutex_unlock(&log_mutex);
}

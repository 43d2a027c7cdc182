/* Logging to stderr with levels; the level comes from SARAGOSSA_LOG (debug|info|warn|error). */
#ifndef SG_BASE_LOG_H
#define SG_BASE_LOG_H

typedef enum { SG_LOG_DEBUG = 0, SG_LOG_INFO, SG_LOG_WARN, SG_LOG_ERROR, SG_LOG_OFF } sg_log_level;

void sg_log(sg_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
sg_log_level sg_log_get_level(void);
void sg_log_set_level(sg_log_level level);
/* Parses "debug", "info", "warn", "error", "off"; returns -1 for anything else. */
int sg_log_parse_level(const char *s);

#define SG_DEBUG(...) sg_log(SG_LOG_DEBUG, __VA_ARGS__)
#define SG_INFO(...)  sg_log(SG_LOG_INFO, __VA_ARGS__)
#define SG_WARN(...)  sg_log(SG_LOG_WARN, __VA_ARGS__)
#define SG_LOGERR(...) sg_log(SG_LOG_ERROR, __VA_ARGS__)

#endif

/* The runtime-flags registry: every kill-switch and tunable of saragossa in one table (flags.c),
 * read from the environment once. `saragossa doctor` prints them all. */
#ifndef SG_BASE_FLAGS_H
#define SG_BASE_FLAGS_H

#include <stdint.h>

typedef enum { SG_FLAG_BOOL, SG_FLAG_INT, SG_FLAG_STR } sg_flag_kind;

typedef struct sg_flag {
	const char *name;  /* environment variable, e.g. "SARAGOSSA_THREADS" */
	sg_flag_kind kind;
	const char *def;   /* default, as text */
	const char *desc;  /* one line for doctor and docs */
} sg_flag;

/* Values. The name must be in the table (a missing name is a programming error: SG_ASSERT).
 * A bool accepts 1/0, on/off, true/false, yes/no; an int accepts a decimal with an optional
 * k/m/g suffix (x1024). An unparsable environment value falls back to the default, with one
 * warning on stderr; sg_flag_is_invalid() tells. */
int sg_flag_bool(const char *name);
int64_t sg_flag_int(const char *name);
const char *sg_flag_str(const char *name);

/* For doctor: iterate over the table; value is the effective value as text, from_env says
 * whether the environment set it. */
int sg_flags_count(void);
const sg_flag *sg_flag_at(int i, const char **value, int *from_env);
int sg_flag_is_invalid(const char *name);
/* 1 for a credential (an API key): doctor and logs show only whether it is set. */
int sg_flag_is_secret(const char *name);

/* Re-reads the environment (tests; not thread-safe against concurrent readers). */
void sg_flags_reload(void);

/* Parsers shared with the CLI: return 0 on success, -1 if s is not valid. */
int sg_parse_bool(const char *s, int *out);
int sg_parse_int(const char *s, int64_t *out);

#endif

/* Bearer-token check in constant time. */
#include <string.h>
#include <strings.h>

#include "server/server.h"

static int token_ok(const char *tok, const char *key);

int sg_server_auth_ok(const char *header, const char *key)
{
	if (!key || !*key) return 1;
	if (!header) return 0;
	while (*header == ' ') header++;
	if (strncasecmp(header, "Bearer ", 7) != 0) return 0;
	return token_ok(header + 7, key);
}

int sg_server_api_key_ok(const char *header, const char *key)
{
	if (!key || !*key) return 1;
	if (!header) return 0;
	return token_ok(header, key);
}

static int token_ok(const char *tok, const char *key)
{
	while (*tok == ' ') tok++;
	size_t n = strlen(tok), k = strlen(key);
	while (n && tok[n - 1] == ' ') n--;
	/* Every byte of the key is compared whatever the token's length, and the differences are
	 * OR-ed together: no early exit reveals how much of a guess was right. */
	volatile unsigned char diff = (unsigned char)(n != k);
	for (size_t i = 0; i < k; i++) {
		unsigned char t = i < n ? (unsigned char)tok[i] : 0;
		diff |= (unsigned char)(t ^ (unsigned char)key[i]);
	}
	return diff == 0;
}

/* The web chat page `saragossa serve` answers GET / with: one self-contained HTML file (inline
 * CSS and JavaScript, nothing fetched from elsewhere), kept as src/server/web/index.html and
 * embedded in the binary at build time (scripts/embed.sh). The page is served without the API
 * key; every API call it makes sends the key the user typed. */
#ifndef SG_SERVER_WEB_H
#define SG_SERVER_WEB_H

#include <stddef.h>

/* The page's bytes (static, NUL-terminated) and their number in *len. */
const char *sg_web_page(size_t *len);

#endif

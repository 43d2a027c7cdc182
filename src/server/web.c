/* The embedded web chat page (see web.h). */
#include "server/web.h"

#include "web_index.inc" /* made from src/server/web/index.html by scripts/embed.sh */

const char *sg_web_page(size_t *len)
{
	*len = sg_web_index_html_len;
	return (const char *)sg_web_index_html;
}

#include "saragossa.h"

#define STR2(x) #x
#define STR(x) STR2(x)

const char *sg_version(void)
{
	return STR(SG_VERSION_MAJOR) "." STR(SG_VERSION_MINOR) "." STR(SG_VERSION_PATCH);
}

#include "base/timer.h"

#include <time.h>

uint64_t sg_time_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double sg_time_s(void) { return (double)sg_time_ns() * 1e-9; }

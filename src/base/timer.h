/* Monotonic clock. */
#ifndef SG_BASE_TIMER_H
#define SG_BASE_TIMER_H

#include <stdint.h>

uint64_t sg_time_ns(void); /* CLOCK_MONOTONIC in nanoseconds */
double sg_time_s(void);    /* the same in seconds */

#endif

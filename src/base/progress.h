/* A terminal progress bar for downloads and long loads, on stderr, redrawn at most 10 times a
 * second; silent when stderr is not a terminal (then one line at the end). */
#ifndef SG_BASE_PROGRESS_H
#define SG_BASE_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

typedef struct sg_progress {
	char label[64];
	uint64_t total;   /* 0 if unknown */
	uint64_t done;
	uint64_t start;   /* bytes already present when resuming (not counted in the rate) */
	double t0, t_last;
	int tty;
	int drawn;
	int audio;        /* done/total are milliseconds of audio: shown as seconds, the rate as a
	                   * multiple of real time (transcribe) */
} sg_progress;

void sg_progress_begin(sg_progress *p, const char *label, uint64_t total, uint64_t already);
void sg_progress_update(sg_progress *p, uint64_t done);
void sg_progress_end(sg_progress *p);

/* Formats the bar line for `width` columns into buf (testable without a terminal):
 * "label  42% [=======>        ] 12.3 MB/29.1 MB  5.0 MB/s  ETA 3s". */
void sg_progress_format(const sg_progress *p, double now, int width, char *buf, size_t n);
/* "1.5 GB", "12.3 MB", "512 B": 1000-based units like download tools. */
void sg_format_bytes(uint64_t bytes, char *buf, size_t n);

#endif

#include "base/progress.h"
#include "base/timer.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

void sg_format_bytes(uint64_t b, char *buf, size_t n)
{
	static const char *units[] = {"B", "kB", "MB", "GB", "TB"};
	double v = (double)b;
	int u = 0;
	while (v >= 1000.0 && u < 4) v /= 1000.0, u++;
	if (u == 0) snprintf(buf, n, "%llu B", (unsigned long long)b);
	else snprintf(buf, n, "%.1f %s", v, units[u]);
}

void sg_progress_begin(sg_progress *p, const char *label, uint64_t total, uint64_t already)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->label, sizeof(p->label), "%s", label ? label : "");
	p->total = total;
	p->done = p->start = already;
	p->t0 = sg_time_s();
	p->tty = isatty(STDERR_FILENO);
}

void sg_progress_format(const sg_progress *p, double now, int width, char *buf, size_t n)
{
	char done[32], total[32], rate[32] = "", eta[32] = "";
	if (p->audio) {
		snprintf(done, sizeof(done), "%.1f s", (double)p->done / 1000);
		snprintf(total, sizeof(total), "%.1f s", (double)p->total / 1000);
	} else {
		sg_format_bytes(p->done, done, sizeof(done));
		sg_format_bytes(p->total, total, sizeof(total));
	}
	double dt = now - p->t0;
	double r = dt > 0 ? (double)(p->done - p->start) / dt : 0;
	if (r > 0) {
		if (p->audio) {
			snprintf(rate, sizeof(rate), "%.1fx real time", r / 1000);
		} else {
			sg_format_bytes((uint64_t)r, rate, sizeof(rate));
			strcat(rate, "/s");
		}
		if (p->total > p->done) {
			double s = (double)(p->total - p->done) / r;
			if (s < 3600) snprintf(eta, sizeof(eta), "ETA %.0fs", s);
			else snprintf(eta, sizeof(eta), "ETA %.1fh", s / 3600);
		}
	}
	if (!p->total) {
		snprintf(buf, n, "%s %s  %s", p->label, done, rate);
		return;
	}
	double frac = (double)p->done / (double)p->total;
	if (frac > 1) frac = 1;
	char tail[128];
	snprintf(tail, sizeof(tail), " %s/%s  %s  %s", done, total, rate, eta);
	int bar = width - (int)strlen(p->label) - 8 - (int)strlen(tail);
	if (bar > 40) bar = 40;
	if (bar < 10) bar = 10;
	char bars[64];
	int fill = (int)(frac * bar);
	for (int i = 0; i < bar; i++) bars[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
	bars[bar] = 0;
	snprintf(buf, n, "%s %3d%% [%s]%s", p->label, (int)(frac * 100), bars, tail);
}

static void draw(sg_progress *p, double now)
{
	char line[256];
	sg_progress_format(p, now, 100, line, sizeof(line));
	fprintf(stderr, "\r%s\033[K", line);
	fflush(stderr);
	p->drawn = 1;
}

void sg_progress_update(sg_progress *p, uint64_t done)
{
	p->done = done;
	if (!p->tty) return;
	double now = sg_time_s();
	if (now - p->t_last < 0.1) return;
	p->t_last = now;
	draw(p, now);
}

void sg_progress_end(sg_progress *p)
{
	double now = sg_time_s();
	if (p->tty) {
		draw(p, now);
		fputc('\n', stderr);
	} else {
		char line[256];
		sg_progress_format(p, now, 100, line, sizeof(line));
		fprintf(stderr, "%s\n", line);
	}
}

/* saragossa speak: text to speech with a voice model (a Piper voice).
 *
 *   speak [-m MODEL] [--voice NAME] [--speed X] [-o out.wav | --play] [--format wav|pcm|f32]
 *         [--noise-scale S] [--noise-w W] [--seed N] [--max-chars N] [--threads N] [--quiet] TEXT...|-
 *
 * TEXT "-" reads stdin. The audio is written as it is made (sentence by sentence, and in chunks
 * within a sentence): to out.wav (the WAV sizes are patched at the end when the file can seek),
 * to stdout with "-o -", or played through aplay, pw-play or paplay with --play. Long texts
 * show a progress bar on a terminal. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "audio/encode.h"
#include "base/timer.h"
#include "base/alloc.h"
#include "base/flags.h"
#include "base/progress.h"
#include "cli/cli.h"
#include "cli/lm_cli.h"
#include "engine/tts.h"
#include "saragossa.h"

#define DEFAULT_TTS "piper-joe"
#define MAX_STDIN (64u << 20)

static int usage(void)
{
	printf("usage: saragossa speak [-m MODEL] [--voice NAME] [--speed X] [-o FILE | --play] TEXT...|-\n"
	       "  TEXT             the text to speak (several words are joined by spaces); '-' reads stdin\n"
	       "  -m MODEL         a voice: a Piper .onnx (with its .onnx.json beside it), a folder holding one,\n"
	       "                   or a name in saragossa's models folder (default: SARAGOSSA_DEFAULT_TTS_MODEL,\n"
	       "                   else piper-joe, fetched by `tools/fetch_models.py piper-joe`)\n"
	       "  --voice NAME     one of the model's voices (default: its first)\n"
	       "  --speed X        pace, 0.25 .. 4 (default 1)\n"
	       "  -o FILE          write the audio to FILE ('-': stdout); default out.wav\n"
	       "  --format F       wav, flac, mp3, opus (Ogg, 48 kHz), pcm (s16le) or f32 (raw float); default:\n"
	       "                   from -o's extension (.wav .flac .mp3 .opus/.ogg .pcm/.raw .f32), else wav.\n"
	       "                   All but opus (and mp3 at a rate MPEG lacks) keep the model's sample rate\n"
	       "  --play           play it (aplay, pw-play or paplay, the first on PATH) instead of writing a file\n"
	       "  --noise-scale S, --noise-w W   Piper's sampling noise (default: the voice's)\n"
	       "  --seed N         noise seed (default 0)\n"
	       "  --temperature T  Qwen3-TTS code sampling, 0 (greedy) .. 2 (default 0.9)\n"
	       "  --ref-audio FILE clone the voice of FILE (any audio file saragossa decodes; Qwen3-TTS Base models)\n"
	       "  --ref-text TEXT  FILE's transcript: in-context cloning, the closer copy (required unless --x-vector-only)\n"
	       "  --x-vector-only  clone from FILE's speaker embedding alone (no transcript)\n"
	       "  --max-chars N    input cap (default 4096)\n"
	       "  --threads N      CPU threads (default: one per core)\n"
	       "  --metrics        print load time, time to first audio, total and CPU time, real-time factor (JSON) on stderr\n"
	       "  --quiet          no progress or summary on stderr\n");
	return 0;
}

/* CPU time of the whole process (every thread), in seconds. */
static double cpu_s(void)
{
	struct rusage r;
	getrusage(RUSAGE_SELF, &r);
	return (double)r.ru_utime.tv_sec + r.ru_utime.tv_usec * 1e-6 + (double)r.ru_stime.tv_sec + r.ru_stime.tv_usec * 1e-6;
}

static char *read_all(FILE *f, size_t *n_out)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = sg_malloc(cap + 1);
	for (size_t k; buf && (k = fread(buf + len, 1, cap - len, f)) > 0;) {
		len += k;
		if (len == cap) {
			if (cap >= MAX_STDIN) {
				sg_free(buf);
				errno = EFBIG;
				return NULL;
			}
			char *q = sg_realloc(buf, cap * 2 + 1);
			if (!q) sg_free(buf);
			buf = q;
			cap *= 2;
		}
	}
	if (buf) buf[len] = 0;
	if (n_out) *n_out = len;
	return buf;
}

/* The first of the players on PATH, as a command reading raw s16le mono at rate from stdin. */
static int player(int rate, char *cmd, size_t n)
{
	static const char *const names[] = {"aplay", "pw-play", "paplay"};
	const char *path = getenv("PATH");
	for (int i = 0; i < 3; i++) {
		char buf[4096];
		for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
			const char *e = strchr(p, ':');
			size_t len = e ? (size_t)(e - p) : strlen(p);
			snprintf(buf, sizeof buf, "%.*s/%s", (int)len, p, names[i]);
			if (len && !access(buf, X_OK)) {
				if (i == 0) snprintf(cmd, n, "aplay -q -t raw -f S16_LE -c 1 -r %d -", rate);
				else if (i == 1) snprintf(cmd, n, "pw-play --format s16 --channels 1 --rate %d -", rate);
				else snprintf(cmd, n, "paplay --raw --format=s16le --channels=1 --rate=%d", rate);
				return 1;
			}
			p += len + (e != NULL);
		}
	}
	return 0;
}

typedef struct out_state {
	double t0, first; /* when speaking began, and the first audio came (seconds; first < 0: none yet) */
	FILE *f;
	audio_encoder *enc;
	uint64_t bytes;
	size_t samples;
	sg_status enc_err;
} out_state;

static int write_bytes(const void *b, size_t n, void *user)
{
	out_state *o = user;
	if (fwrite(b, 1, n, o->f) != n) return 1;
	o->bytes += n;
	return 0;
}

static int on_audio(const float *pcm, size_t n, void *user)
{
	out_state *o = user;
	if (o->first < 0) o->first = sg_time_s() - o->t0;
	o->samples += n;
	o->enc_err = audio_encoder_push(o->enc, pcm, n);
	if (!o->enc_err) fflush(o->f); /* a player or a pipe gets each chunk as it is made */
	return o->enc_err != SG_OK;
}

int sg_cli_speak(int argc, char **argv)
{
	const char *model = NULL, *voice = NULL, *outfile = NULL, *format = NULL, *ref_audio = NULL, *ref_text = NULL;
	double speed = 1, noise_scale = -1, noise_w = -1, temperature = -1;
	int x_vector_only = 0;
	unsigned char *ref_bytes = NULL;
	size_t ref_size = 0;
	long seed = 0, threads = 0, max_chars = 0;
	int play = 0, quiet = 0, metrics = 0, rc = 2;
	char *text = NULL;
	size_t tlen = 0;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) model = argv[++i];
		else if (!strcmp(a, "--voice") && v) voice = argv[++i];
		else if (!strcmp(a, "-o") && v) outfile = argv[++i];
		else if (!strcmp(a, "--format") && v) format = argv[++i];
		else if (!strcmp(a, "--play")) play = 1;
		else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) quiet = 1;
		else if (!strcmp(a, "--metrics")) metrics = 1;
		else if (!strcmp(a, "--ref-audio") && v) ref_audio = argv[++i];
		else if (!strcmp(a, "--ref-text") && v) ref_text = argv[++i];
		else if (!strcmp(a, "--x-vector-only")) x_vector_only = 1;
		else if (!strcmp(a, "--temperature") && v) {
			if (sg_cli_parse_float(argv[++i], 0, 2, &temperature)) {
				rc = sg_cli_usage_error("speak", "--temperature must be in [0, 2], not '%s'", v);
				goto done;
			}
		}
		else if (!strcmp(a, "--speed") && v) {
			if (sg_cli_parse_float(argv[++i], 0.25, 4, &speed)) {
				rc = sg_cli_usage_error("speak", "--speed must be in [0.25, 4], not '%s'", v);
				goto done;
			}
		} else if ((!strcmp(a, "--noise-scale") || !strcmp(a, "--noise-w")) && v) {
			if (sg_cli_parse_float(argv[++i], 0, 10, a[8] == 's' ? &noise_scale : &noise_w)) {
				rc = sg_cli_usage_error("speak", "%s must be in [0, 10], not '%s'", a, v);
				goto done;
			}
		} else if (!strcmp(a, "--seed") && v) {
			if (sg_cli_parse_int(argv[++i], 0, 0x7fffffffL, &seed)) {
				rc = sg_cli_usage_error("speak", "--seed must be a non-negative integer, not '%s'", v);
				goto done;
			}
		} else if (!strcmp(a, "--threads") && v) {
			if (sg_cli_parse_int(argv[++i], 0, 256, &threads)) {
				rc = sg_cli_usage_error("speak", "--threads must be 0..256, not '%s'", v);
				goto done;
			}
		} else if (!strcmp(a, "--max-chars") && v) {
			if (sg_cli_parse_int(argv[++i], 1, 1L << 24, &max_chars)) {
				rc = sg_cli_usage_error("speak", "--max-chars must be 1..16777216, not '%s'", v);
				goto done;
			}
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			rc = usage();
			goto done;
		} else if (a[0] == '-' && a[1]) {
			rc = sg_cli_usage_error("speak", "unknown or incomplete option '%s'", a);
			goto done;
		} else {
			size_t k = strlen(a);
			char *t = sg_realloc(text, tlen + k + 2);
			if (!t) {
				rc = 1;
				goto done;
			}
			text = t;
			if (tlen) text[tlen++] = ' ';
			memcpy(text + tlen, a, k + 1);
			tlen += k;
		}
	}
	if (!text) {
		rc = sg_cli_usage_error("speak", "no text given (TEXT, or '-' for stdin)");
		goto done;
	}
	if (play && outfile) {
		rc = sg_cli_usage_error("speak", "-o and --play exclude each other");
		goto done;
	}
	if (!ref_audio && (ref_text || x_vector_only)) {
		rc = sg_cli_usage_error("speak", "%s clones the voice of --ref-audio FILE, which is missing",
					ref_text ? "--ref-text" : "--x-vector-only");
		goto done;
	}
	if (ref_audio && !ref_text && !x_vector_only) {
		rc = sg_cli_usage_error("speak", "--ref-audio needs --ref-text (the clip's transcript, for in-context cloning) or "
						 "--x-vector-only");
		goto done;
	}
	if (ref_audio) {
		FILE *rf = fopen(ref_audio, "rb");
		if (!rf) {
			fprintf(stderr, "saragossa speak: cannot open --ref-audio %s: %s\n", ref_audio, strerror(errno));
			rc = 1;
			goto done;
		}
		ref_bytes = (unsigned char *)read_all(rf, &ref_size);
		int rerr = ferror(rf);
		fclose(rf);
		if (!ref_bytes || rerr) {
			fprintf(stderr, "saragossa speak: cannot read --ref-audio %s (at most 64 MiB)\n", ref_audio);
			rc = 1;
			goto done;
		}
	}
	if (format && (!audio_format_available(format) || !strcmp(format, "aac"))) {
		rc = sg_cli_usage_error("speak", "--format must be wav, flac, %sopus, pcm or f32, not '%s'",
					audio_format_available("mp3") ? "mp3, " : "", format);
		goto done;
	}
	if (!strcmp(text, "-")) {
		sg_free(text);
		if (!(text = read_all(stdin, NULL))) {
			fprintf(stderr, "saragossa speak: cannot read stdin: %s\n", strerror(errno ? errno : ENOMEM));
			rc = 1;
			goto done;
		}
	}
	rc = 1;
	if (!model) {
		const char *env = sg_flag_str("SARAGOSSA_DEFAULT_TTS_MODEL");
		model = env && env[0] ? env : DEFAULT_TTS;
	}
	sg_tts_params tp = sg_tts_default_params();
	tp.n_threads = (int)threads;
	sg_tts *tts = NULL;
	double t_load = sg_time_s();
	if (sg_tts_load(model, &tp, &tts)) {
		fprintf(stderr, "saragossa speak: %s\n", sg_last_error());
		goto done;
	}
	int rate = sg_tts_sample_rate(tts);
	t_load = sg_time_s() - t_load;
	out_state o = {.first = -1};
	char cmd[256];
	if (play) {
		if (!player(rate, cmd, sizeof cmd)) {
			fprintf(stderr, "saragossa speak: --play needs aplay, pw-play or paplay on PATH (none found); write a file with -o instead\n");
			sg_tts_free(tts);
			goto done;
		}
		format = "pcm";
		o.f = popen(cmd, "w");
	} else if (!outfile || strcmp(outfile, "-")) {
		if (!outfile) outfile = "out.wav";
		o.f = fopen(outfile, "w+b"); /* read back to patch the WAV sizes */
	} else {
		o.f = stdout;
	}
	if (!o.f) {
		fprintf(stderr, "saragossa speak: cannot open %s: %s\n", play ? cmd : outfile, strerror(errno));
		sg_tts_free(tts);
		goto done;
	}
	if (!format) {
		const char *dot = outfile ? strrchr(outfile, '.') : NULL;
		static const char *const ext[][2] = {{".pcm", "pcm"}, {".raw", "pcm"}, {".f32", "f32"}, {".flac", "flac"},
						     {".mp3", "mp3"}, {".opus", "opus"}, {".ogg", "opus"}};
		format = "wav";
		for (size_t k = 0; dot && k < sizeof ext / sizeof *ext; k++)
			if (!strcasecmp(dot, ext[k][0])) format = ext[k][1];
	}
	/* Opus is coded at 48 kHz, MP3 at an MPEG rate (the encoder picks them); the rest keep the
	 * model's rate */
	int out_rate = !strcmp(format, "opus") || !strcmp(format, "mp3") ? 0 : rate;
	sg_status st = audio_encoder_open(format, rate, out_rate, write_bytes, &o, &o.enc);
	/* long texts: one sg_speak per sentence, so a progress bar can follow them */
	tts_span *sp = NULL;
	int n_sp = 0;
	size_t len = strlen(text);
	if (!st) st = tts_split_sentences(text, len, 0, &sp, &n_sp);
	int bar_on = !quiet && len > 400 && n_sp > 1 && isatty(STDERR_FILENO);
	sg_progress bar;
	if (bar_on) sg_progress_begin(&bar, "speaking", (uint64_t)len, 0);
	sg_speak_params pp = sg_speak_default_params();
	pp.voice = voice;
	pp.speed = (float)speed;
	pp.noise_scale = (float)noise_scale;
	pp.noise_w = (float)noise_w;
	pp.seed = (uint64_t)seed;
	pp.max_chars = (size_t)max_chars;
	if (temperature >= 0) pp.temperature = (float)temperature;
	pp.ref_audio = ref_bytes, pp.ref_audio_size = ref_size;
	pp.ref_text = ref_text, pp.x_vector_only = x_vector_only;
	pp.on_audio = on_audio;
	pp.user = &o;
	o.t0 = sg_time_s();
	double cpu0 = cpu_s();
	if (!st && !bar_on) {
		st = sg_speak(tts, text, &pp, NULL, NULL);
	} else if (!st) {
		/* the cap applies to the whole text, as one sg_speak call would apply it */
		size_t chars = 0, cap = max_chars ? (size_t)max_chars : TTS_DEFAULT_MAX_CHARS;
		for (size_t i = 0; i < len; i++) chars += ((unsigned char)text[i] & 0xC0) != 0x80;
		if (chars > cap) st = sg_speak(tts, text, &pp, NULL, NULL); /* its error names the cap */
		pp.max_chars = len + 1;
		for (int i = 0; i < n_sp && !st; i++) {
			char save = text[sp[i].start + sp[i].len];
			text[sp[i].start + sp[i].len] = 0;
			st = sg_speak(tts, text + sp[i].start, &pp, NULL, NULL);
			text[sp[i].start + sp[i].len] = save;
			sg_progress_update(&bar, (uint64_t)(sp[i].start + sp[i].len));
		}
	}
	double t_total = sg_time_s() - o.t0, t_cpu = cpu_s() - cpu0;
	if (bar_on) sg_progress_end(&bar);
	if (!st && metrics) /* one line of JSON, for scripts and benches */
		fprintf(stderr, "{\"load_s\": %.4f, \"ttfa_s\": %.4f, \"total_s\": %.4f, \"cpu_s\": %.4f, \"audio_s\": %.4f, \"rtf\": %.4f}\n",
			t_load, o.first, t_total, t_cpu, (double)o.samples / rate, o.samples ? t_total / ((double)o.samples / rate) : 0.0);
	if (st == SG_ERR_CANCELLED && o.enc_err) st = o.enc_err;
	if (!st) st = audio_encoder_finish(o.enc);
	if (st) fprintf(stderr, "saragossa speak: %s\n", sg_last_error());
	sg_free(sp);
	int close_err = 0;
	if (play) {
		close_err = pclose(o.f) != 0;
	} else if (o.f != stdout) {
		/* the real lengths, now known (WAV's sizes, FLAC's sample count) */
		if (!st && audio_encoder_fix_file(o.enc, o.f)) close_err = 1;
		close_err |= fclose(o.f) != 0;
	} else {
		close_err = fflush(stdout) != 0;
	}
	if (!st && close_err) fprintf(stderr, "saragossa speak: writing the audio failed: %s\n", strerror(errno));
	if (!st && !close_err && !quiet && !play && o.f != stdout)
		fprintf(stderr, "saragossa speak: %.2f s of audio (%d Hz) -> %s\n", (double)o.samples / rate, rate, outfile);
	rc = st || close_err ? 1 : 0;
	audio_encoder_free(o.enc);
	sg_tts_free(tts);
done:
	sg_free(text);
	sg_free(ref_bytes);
	return rc;
}

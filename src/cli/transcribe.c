/* saragossa transcribe: speech to text with a Whisper model.
 *
 *   transcribe FILE... [-m MODEL] [--language xx] [--task transcribe|translate]
 *              [--format text|json|verbose_json|srt|vtt] [--word-timestamps] [--beam N]
 *              [--temperature T] [--prompt P] [--no-timestamps] [--output-dir DIR]
 *              [--pcm-rate R [--pcm-channels C]] [--vocab FILE] [--backend B] [--threads N] [--quiet]
 *
 * FILE "-" reads stdin: an audio file, or with --pcm-rate raw little-endian 16-bit PCM. Each
 * file's transcript goes to stdout in order (or to DIR/NAME.FORMAT with --output-dir). Files
 * over a minute show a progress bar on a terminal. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audio/stream.h"
#include "base/alloc.h"
#include "base/flags.h"
#include "base/progress.h"
#include "cli/cli.h"
#include "cli/lm_cli.h"
#include "engine/transcribe.h"
#include "hub/repo.h"
#include "saragossa.h"

#define DEFAULT_STT_DIR "whisper-tiny.en"
#define MAX_STDIN (1ull << 32) /* bytes of audio taken from stdin at most (spooled to disk) */

static int usage(void)
{
	printf("usage: saragossa transcribe FILE... [-m MODEL] [--language xx] [--task transcribe|translate]\n"
	       "         [--format text|json|verbose_json|srt|vtt] [--word-timestamps] [--beam N] [--temperature T]\n"
	       "         [--prompt TEXT] [--no-timestamps] [--output-dir DIR] [--pcm-rate R [--pcm-channels C]]\n"
	       "         [--vocab FILE] [--backend cpu|cuda|auto] [--threads N] [--quiet]\n"
	       "  FILE             an audio file (WAV, FLAC, OGG, MP3, ...); '-' reads stdin\n"
	       "  -m MODEL         a Whisper model: Hugging Face, MLX or CTranslate2 folder, or ggml .bin\n"
	       "                   (default: SARAGOSSA_DEFAULT_STT_MODEL, else whisper-tiny.en in saragossa's models folder)\n"
	       "  --language xx    the spoken language (default: detected by multilingual models, else en)\n"
	       "  --task T         transcribe (default) or translate (to English; multilingual models)\n"
	       "  --format F       text (default), json, verbose_json, srt or vtt\n"
	       "  --beam N         beam width; 1 = greedy (default 5)\n"
	       "  --temperature T  first temperature; hotter retries go up by 0.2 to 1.0 (default 0)\n"
	       "  --prompt TEXT    text that precedes the audio (names, spelling, style)\n"
	       "  --pcm-rate R     stdin is raw 16-bit little-endian PCM at R Hz (--pcm-channels C, default 1)\n"
	       "  --vocab FILE     the vocabulary when the model's files carry none (MLX folders): openai-whisper's\n"
	       "                   gpt2.tiktoken (English-only models) or multilingual.tiktoken, or a tokenizer.json\n");
	return 0;
}

/* The default Whisper model, or 1 with a message saying how to get it. */
static int default_model(char *buf, size_t n)
{
	const char *env = sg_flag_str("SARAGOSSA_DEFAULT_STT_MODEL");
	if (env && env[0]) {
		snprintf(buf, n, "%s", env);
		return 0;
	}
	char dir[SG_HUB_PATH_MAX];
	if (sg_hub_models_dir(dir, sizeof dir)) dir[0] = 0;
	snprintf(buf, n, "%s/%s", dir[0] ? dir : "~/.cache/saragossa/models", DEFAULT_STT_DIR);
	struct stat st;
	if (stat(buf, &st)) {
		fprintf(stderr,
			"saragossa transcribe: no model given, and the default Whisper model (tiny.en) is not at %s.\n"
			"  Fetch it with `tools/fetch_models.py whisper-tiny.en` in the source tree, name one with -m,\n"
			"  or set SARAGOSSA_DEFAULT_STT_MODEL.\n",
			buf);
		return 1;
	}
	return 0;
}

/* Copies stdin into a temporary file in $TMPDIR (else /tmp), unlinked at once so that nothing is
 * left behind whatever happens, and returns its descriptor (-1 after a one-line message). The
 * audio is then streamed from it as a file is: the log-mel floor needs the whole recording before
 * the first window, so it is read twice, which a pipe cannot be; a spool keeps memory bounded. */
static int spool_stdin(void)
{
	const char *dir = getenv("TMPDIR"); /* the system's variable, not a saragossa flag */
	if (!dir || !dir[0]) dir = "/tmp";
	char path[4096];
	snprintf(path, sizeof path, "%s/saragossa-stdin-XXXXXX", dir);
	int fd = mkstemp(path);
	if (fd < 0) {
		fprintf(stderr, "saragossa transcribe: cannot create a temporary file in %s to hold stdin: %s\n", dir, strerror(errno));
		return -1;
	}
	unlink(path);
	static char buf[1 << 16];
	unsigned long long total = 0;
	for (;;) {
		ssize_t k = read(STDIN_FILENO, buf, sizeof buf);
		if (k < 0 && errno == EINTR) continue;
		if (k < 0) {
			fprintf(stderr, "saragossa transcribe: cannot read stdin: %s\n", strerror(errno));
			break;
		}
		if (k == 0) return fd;
		total += (unsigned long long)k;
		if (total > MAX_STDIN) {
			fprintf(stderr, "saragossa transcribe: stdin holds more than %llu GiB of audio; give it as a file\n", MAX_STDIN >> 30);
			break;
		}
		ssize_t done = 0;
		int err = 0;
		while (done < k && !err) {
			ssize_t w = write(fd, buf + done, (size_t)(k - done));
			if (w < 0 && errno == EINTR) continue;
			if (w < 0) err = errno;
			else if (w == 0) err = ENOSPC; /* nothing written, no reason given: the disk is full */
			else done += w;
		}
		if (err) {
			fprintf(stderr, "saragossa transcribe: cannot write stdin to a temporary file in %s: %s\n", dir, strerror(err));
			break;
		}
	}
	close(fd);
	return -1;
}

/* The bar starts with the first report, once the duration is known: only past a minute of
 * audio, on a terminal. */
typedef struct prog_state {
	sg_progress bar;
	int quiet, on;
} prog_state;

static void on_progress(double done_s, double total_s, void *user)
{
	prog_state *ps = user;
	if (!ps->on && !ps->quiet && total_s > 60 && isatty(STDERR_FILENO)) {
		sg_progress_begin(&ps->bar, "transcribing", (uint64_t)(total_s * 1000), 0);
		ps->bar.audio = 1;
		ps->on = 1;
	}
	if (ps->on) sg_progress_update(&ps->bar, (uint64_t)(done_s * 1000));
}

static int write_out(const char *dir, const char *file, const char *format, const char *text, size_t len)
{
	if (!dir) return fwrite(text, 1, len, stdout) == len ? 0 : 1;
	const char *base = strrchr(file, '/');
	base = base ? base + 1 : file;
	if (!strcmp(file, "-")) base = "stdin";
	char path[4096];
	const char *ext = !strcmp(format, "verbose_json") ? "json" : !strcmp(format, "text") ? "txt" : format;
	int k = snprintf(path, sizeof(path), "%s/%s", dir, base);
	char *dot = strrchr(path + k - strlen(base), '.');
	if (dot) *dot = 0;
	size_t used = strlen(path);
	snprintf(path + used, sizeof(path) - used, ".%s", ext);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(text, 1, len, f) != len || fclose(f)) {
		fprintf(stderr, "saragossa transcribe: cannot write %s: %s\n", path, strerror(errno));
		return 1;
	}
	return 0;
}

int sg_cli_transcribe(int argc, char **argv)
{
	const char *model = NULL, *language = NULL, *task = "transcribe", *format = "text", *prompt = NULL;
	const char *backend = NULL, *outdir = NULL, *vocab = NULL;
	long beam = 5, threads = 0, pcm_rate = 0, pcm_channels = 1;
	double temperature = 0;
	int words = 0, timestamps = 1, quiet = 0;
	const char **files = sg_calloc((size_t)argc + 1, sizeof(char *));
	int n_files = 0, rc = 2;
	if (!files) return 1;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) model = argv[++i];
		else if (!strcmp(a, "--language") && v) language = argv[++i];
		else if (!strcmp(a, "--task") && v) task = argv[++i];
		else if (!strcmp(a, "--format") && v) format = argv[++i];
		else if (!strcmp(a, "--prompt") && v) prompt = argv[++i];
		else if (!strcmp(a, "--backend") && v) backend = argv[++i];
		else if (!strcmp(a, "--output-dir") && v) outdir = argv[++i];
		else if (!strcmp(a, "--vocab") && v) vocab = argv[++i];
		else if (!strcmp(a, "--word-timestamps")) words = 1;
		else if (!strcmp(a, "--no-timestamps")) timestamps = 0;
		else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) quiet = 1;
		else if (!strcmp(a, "--beam") && v) {
			if (sg_cli_parse_int(argv[++i], 1, 16, &beam)) {
				rc = sg_cli_usage_error("transcribe", "--beam must be 1..16, not '%s'", v);
				goto done;
			}
		} else if (!strcmp(a, "--threads") && v) {
			if (sg_cli_parse_int(argv[++i], 0, 256, &threads)) {
				rc = sg_cli_usage_error("transcribe", "--threads must be 0..256, not '%s'", v);
				goto done;
			}
		} else if (!strcmp(a, "--pcm-rate") && v) {
			if (sg_cli_parse_int(argv[++i], 1000, 768000, &pcm_rate)) {
				rc = sg_cli_usage_error("transcribe", "--pcm-rate must be 1000..768000 Hz, not '%s'", v);
				goto done;
			}
		} else if (!strcmp(a, "--pcm-channels") && v) {
			if (sg_cli_parse_int(argv[++i], 1, 64, &pcm_channels)) {
				rc = sg_cli_usage_error("transcribe", "--pcm-channels must be 1..64, not '%s'", v);
				goto done;
			}
		} else if (!strcmp(a, "--temperature") && v) {
			if (sg_cli_parse_float(argv[++i], 0, 1, &temperature)) {
				rc = sg_cli_usage_error("transcribe", "--temperature must be in [0, 1], not '%s'", v);
				goto done;
			}
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			rc = usage();
			goto done;
		} else if (a[0] == '-' && a[1]) {
			rc = sg_cli_usage_error("transcribe", "unknown or incomplete option '%s'", a);
			goto done;
		} else {
			files[n_files++] = a;
		}
	}
	if (!n_files) {
		rc = sg_cli_usage_error("transcribe", "no audio file given");
		goto done;
	}
	if (strcmp(task, "transcribe") && strcmp(task, "translate")) {
		rc = sg_cli_usage_error("transcribe", "--task must be transcribe or translate, not '%s'", task);
		goto done;
	}
	static const char *const formats[] = {"text", "json", "verbose_json", "srt", "vtt"};
	int fmt_ok = 0;
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) fmt_ok |= !strcmp(format, formats[i]);
	if (!fmt_ok) {
		rc = sg_cli_usage_error("transcribe", "--format must be text, json, verbose_json, srt or vtt, not '%s'", format);
		goto done;
	}
	int n_stdin = 0;
	for (int i = 0; i < n_files; i++) n_stdin += !strcmp(files[i], "-");
	if (n_stdin > 1 || (pcm_rate && !n_stdin)) {
		rc = sg_cli_usage_error("transcribe", n_stdin > 1 ? "'-' (stdin) may be given once" : "--pcm-rate is for '-' (raw PCM on stdin)");
		goto done;
	}
	rc = 1;
	char path[4096], def[4096];
	if (!model) {
		if (default_model(def, sizeof def)) goto done;
		model = def;
	}
	if (sg_cli_model_path("transcribe", model, path, sizeof(path))) goto done;
	sg_stt_params sp = sg_stt_default_params();
	sp.backend = backend;
	sp.n_threads = (int)threads;
	sp.max_beam = (int)beam;
	sp.vocab = vocab;
	sg_stt *stt = NULL;
	if (sg_stt_load(path, &sp, &stt)) {
		fprintf(stderr, "saragossa transcribe: %s\n", sg_last_error());
		goto done;
	}
	float temps[8];
	int n_temps = 0;
	for (double t = temperature; t <= 1.0 + 1e-6 && n_temps < 8; t += 0.2) temps[n_temps++] = (float)t;
	rc = 0;
	for (int i = 0; i < n_files && !rc; i++) {
		const char *f = files[i];
		sg_transcribe_params tp = sg_transcribe_default_params();
		tp.language = language;
		tp.translate = !strcmp(task, "translate");
		tp.timestamps = timestamps;
		tp.word_timestamps = words;
		tp.beam_size = (int)beam;
		tp.temperatures = temps;
		tp.n_temperatures = n_temps;
		tp.initial_prompt = prompt;
		prog_state ps = {.quiet = quiet};
		tp.on_progress = on_progress;
		tp.user = &ps;
		sg_transcript *tr = NULL;
		sg_status st;
		if (!strcmp(f, "-")) {
			/* spooled, then streamed as a file is (raw PCM read by libsndfile as headerless s16le) */
			int fd = spool_stdin();
			if (fd < 0) {
				rc = 1;
				break;
			}
			sg_audio_stream *audio = NULL;
			st = sg_audio_stream_open_fd(fd, "stdin", (int)pcm_rate, (int)pcm_channels, &audio);
			if (!st) st = sg_transcribe_stream(stt, audio, &tp, &tr);
			sg_audio_stream_close(audio);
			close(fd);
		} else {
			/* a file is streamed: one 30 s window of samples in memory at a time */
			st = sg_transcribe_file(stt, f, &tp, &tr);
		}
		if (ps.on) sg_progress_end(&ps.bar);
		char *text = NULL;
		size_t len = 0;
		if (!st) st = sg_transcript_format(tr, format, task, &text, &len);
		sg_transcript_free(tr);
		if (st) {
			fprintf(stderr, "saragossa transcribe: %s: %s\n", f, sg_last_error());
			rc = 1;
			break;
		}
		rc = write_out(outdir, f, format, text, len);
		sg_free(text);
	}
	if (!rc && fflush(stdout)) rc = 1;
	sg_stt_free(stt);
done:
	sg_free(files);
	return rc;
}

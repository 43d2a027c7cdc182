/* Transcribes an audio file with a Whisper model and prints each segment as soon as its 30 s
 * window is decoded, then the whole transcript as SRT.
 *
 *     build/examples/transcribe MODEL FILE
 */
#include <saragossa.h>
#include <stdio.h>

static int print_segment(const sg_stt_segment *seg, void *user)
{
	(void)user;
	printf("[%7.2f -> %7.2f]%s\n", seg->start, seg->end, seg->text);
	fflush(stdout);
	return 0; /* non-zero would stop the transcription */
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: transcribe MODEL FILE\n");
		return 2;
	}
	sg_stt_params sp = sg_stt_default_params();
	sg_stt *stt;
	if (sg_stt_load(argv[1], &sp, &stt)) {
		fprintf(stderr, "%s\n", sg_last_error());
		return 1;
	}
	sg_transcribe_params tp = sg_transcribe_default_params();
	tp.beam_size = 1; /* greedy: faster; the default is the reference's beam of 5 */
	tp.on_segment = print_segment;
	sg_transcript *tr = NULL;
	char *srt = NULL;
	size_t len = 0;
	int rc = sg_transcribe_file(stt, argv[2], &tp, &tr) || sg_transcript_format(tr, "srt", "transcribe", &srt, &len);
	if (rc) fprintf(stderr, "%s\n", sg_last_error());
	else printf("\n%s", srt);
	sg_free(srt);
	sg_transcript_free(tr);
	sg_stt_free(stt);
	return rc;
}

/* libsndfile's virtual I/O over bytes the audio module was handed (internal to src/audio): a
 * read-only memory buffer, or a file descriptor read with pread (its own offset never used), each
 * with a read position of its own. */
#ifndef SG_AUDIO_VIO_H
#define SG_AUDIO_VIO_H

#include <sndfile.h>

typedef struct sg_audio_bytes {
	const unsigned char *data; /* the bytes, or NULL: read fd */
	int fd;
	sf_count_t size, pos;
} sg_audio_bytes;

/* sf_open_virtual over b from its start (info as sf_open takes it); NULL when libsndfile refuses. */
SNDFILE *sg_audio_bytes_open(sg_audio_bytes *b, SF_INFO *info);

#endif

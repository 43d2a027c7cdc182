/* Downloads from the Hugging Face hub into the Hugging Face cache, the way huggingface_hub does:
 *
 *   GET  {endpoint}/api/models/{org}/{name}/revision/{rev}   -> commit "sha" and "siblings"
 *   HEAD {endpoint}/{org}/{name}/resolve/{commit}/{file}      -> X-Repo-Commit, ETag or
 *        X-Linked-Etag (the SHA-256 of an LFS file), X-Linked-Size or Content-Length, Location
 *   GET  the file (redirects followed), with Range when a partial download exists
 *
 * A file is written to blobs/<etag>.incomplete, resumed from where it stopped, checked against
 * its size and (LFS) SHA-256, then renamed to blobs/<etag>. Only when every file of the request
 * is in place are the links snapshots/<commit>/<file> -> ../../blobs/<etag> and refs/<revision>
 * written, so a failed pull leaves no half snapshot. The endpoint is $HF_ENDPOINT (default
 * https://huggingface.co); $HF_TOKEN (else the token file huggingface-cli writes) is sent as a
 * bearer token. */
#ifndef SG_HUB_DOWNLOAD_H
#define SG_HUB_DOWNLOAD_H

#include <stdint.h>

#include "hub/cache.h"
#include "hub/repo.h"
#include "saragossa.h"

/* One file's progress, for a caller that reports it itself (the server's /api/pull). */
typedef enum { SG_HUB_FILE_START = 1, SG_HUB_FILE_BYTES, SG_HUB_FILE_VERIFY, SG_HUB_FILE_DONE } sg_hub_file_phase;
typedef struct sg_hub_progress {
	sg_hub_file_phase phase;
	const char *file;   /* its name in the repo */
	const char *digest; /* its ETag: the SHA-256 of an LFS file, else the git blob id */
	int64_t total;      /* bytes, -1 when the hub gave no size */
	int64_t completed;  /* bytes on disk so far (a resumed file starts above 0) */
} sg_hub_progress;

/* How a resolution (sg_hub_resolve) and its downloads behave. */
typedef struct sg_hub_opts {
	int offline; /* never use the network (HF_HUB_OFFLINE=1 sets it too) */
	int update;  /* ask the hub for the revision's current commit even when a copy is cached */
	int quiet;   /* no progress bars */
	/* Called (when set) for each file fetched: at its start, as bytes arrive, before its
	 * checks and when it is in place. A non-zero return stops the download with
	 * SG_ERR_CANCELLED (the partial file stays, to be resumed). */
	int (*on_progress)(void *user, const sg_hub_progress *p);
	void *progress_user;
} sg_hub_opts;

/* Fetches what `ref` needs into `cache` and fills *out (kind, path, repo, commit, counters).
 * Files already linked in the snapshot are not requested again. *unreachable is set to 1 when
 * the failure is that the hub could not be reached at all (DNS, refused, timeout). */
sg_status sg_hub_download(const sg_hub_ref *ref, const char *cache, const sg_hub_opts *opts, sg_hub_model *out,
			  int *unreachable);

/* The endpoint without a trailing '/': $HF_ENDPOINT or https://huggingface.co. */
void sg_hub_endpoint(char *buf, size_t n);
/* The token: $HF_TOKEN, else the file $HF_TOKEN_PATH, else $HF_HOME/token or
 * ~/.cache/huggingface/token; "" when none. */
void sg_hub_token(char *buf, size_t n);

#endif

#include "hub/download.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/log.h"
#include "base/progress.h"
#include "base/sha256.h"
#include "hub/fs.h"
#include "hub/http.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define API_BODY_MAX (64u << 20)
#define MAX_FILES 4096

void sg_hub_endpoint(char *buf, size_t n)
{
	const char *e = getenv("HF_ENDPOINT");
	snprintf(buf, n, "%s", e && e[0] ? e : "https://huggingface.co");
	size_t len = strlen(buf);
	while (len > 0 && buf[len - 1] == '/') buf[--len] = 0;
}

static void trim(char *s)
{
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
	size_t i = 0;
	while (isspace((unsigned char)s[i])) i++;
	memmove(s, s + i, n - i + 1);
}

void sg_hub_token(char *buf, size_t n)
{
	buf[0] = 0;
	const char *t = getenv("HF_TOKEN");
	if (!t || !t[0]) t = getenv("HUGGING_FACE_HUB_TOKEN");
	if (t && t[0]) {
		snprintf(buf, n, "%s", t);
		trim(buf);
		return;
	}
	char path[SG_HUB_PATH_MAX];
	const char *p = getenv("HF_TOKEN_PATH"), *home = getenv("HF_HOME");
	if (p && p[0]) snprintf(path, sizeof(path), "%s", p);
	else if (home && home[0]) snprintf(path, sizeof(path), "%s/token", home);
	else {
		const char *xdg = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
		if (xdg && xdg[0] == '/') snprintf(path, sizeof(path), "%s/huggingface/token", xdg);
		else if (h && h[0]) snprintf(path, sizeof(path), "%s/.cache/huggingface/token", h);
		else return;
	}
	FILE *f = fopen(path, "r");
	if (!f) return;
	if (!fgets(buf, (int)n, f)) buf[0] = 0;
	fclose(f);
	trim(buf);
}

typedef struct dl_ctx {
	const sg_hub_ref *ref;
	const sg_hub_opts *opts;
	char endpoint[1024];
	char origin[512]; /* scheme://host:port of the endpoint: the only place the token goes */
	char token[1024];
	char cache[SG_HUB_PATH_MAX];
	char repo_dir[SG_HUB_PATH_MAX];
	char commit[41];
	sg_hub_model *out;
} dl_ctx;

/* 401/403/404 from the hub, in words a user can act on. */
static sg_status refused(const dl_ctx *c, const sg_http_resp *r, const char *file)
{
	const char *repo = c->ref->repo;
	if (!strcmp(r->error_code, "RepoNotFound") || (r->status == 404 && !r->error_code[0] && !file))
		return sg_error(SG_ERR_NOT_FOUND,
				"%s: repository not found on %s (check the name; a private repo needs HF_TOKEN)", repo,
				c->endpoint);
	if (!strcmp(r->error_code, "RevisionNotFound"))
		return sg_error(SG_ERR_NOT_FOUND, "%s: revision '%s' not found on %s", repo, c->ref->revision,
				c->endpoint);
	if (r->status == 404 || !strcmp(r->error_code, "EntryNotFound"))
		return sg_error(SG_ERR_NOT_FOUND, "%s: file '%s' not found at commit %s", repo, file ? file : "?",
				c->commit);
	if (c->token[0])
		return sg_error(SG_ERR_IO,
				"%s: access refused (HTTP %ld) with the token in HF_TOKEN: this model may be gated; accept "
				"its licence on %s/%s with the account that owns the token, or check the token",
				repo, r->status, c->endpoint, repo);
	return sg_error(SG_ERR_IO,
			"%s: access refused (HTTP %ld): this model is gated or private; accept its licence on %s/%s, "
			"then export HF_TOKEN=<a read token from %s/settings/tokens> and try again",
			repo, r->status, c->endpoint, repo, c->endpoint);
}

static sg_status http_status_error(const dl_ctx *c, const sg_http_resp *r, const char *file)
{
	if (r->status == 401 || r->status == 403 || r->status == 404) return refused(c, r, file);
	return sg_error(SG_ERR_IO, "%s: the hub answered HTTP %ld for %s%s%s", c->ref->repo, r->status,
			file ? file : "the model info", r->error_message[0] ? ": " : "", r->error_message);
}

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && !strcmp(s + a - b, suffix);
}

/* "name-00001-of-00003.gguf": *prefix_len = length of "name", returns 1. */
static int split_gguf(const char *s, size_t *prefix_len)
{
	size_t n = strlen(s);
	/* -00001-of-00003.gguf is 20 characters */
	if (n < 21 || strcasecmp(s + n - 5, ".gguf")) return 0;
	const char *p = s + n - 20;
	for (int i = 0; i < 20; i++) {
		char ch = p[i];
		int digit = (i >= 1 && i <= 5) || (i >= 10 && i <= 14);
		if (digit ? !isdigit((unsigned char)ch) : (i == 0 && ch != '-')) return 0;
	}
	if (strncmp(p + 6, "-of-", 4)) return 0;
	*prefix_len = (size_t)(p - s);
	return 1;
}

/* Picks the files to fetch from the repo listing. Returns the count (0 with an error set). */
static int select_files(const dl_ctx *c, const char **names, int n, const char **sel, int *gguf_index)
{
	const sg_hub_ref *ref = c->ref;
	int k = 0;
	*gguf_index = -1;
	if (ref->file[0] || ref->quant[0]) {
		int pick = -1;
		if (ref->file[0]) {
			for (int i = 0; i < n; i++)
				if (!strcmp(names[i], ref->file)) pick = i;
		} else {
			pick = sg_hub_pick_gguf(names, n, ref->quant);
		}
		if (pick < 0) {
			char list[1024] = "";
			for (int i = 0; i < n; i++) {
				if (!sg_hub_is_gguf_name(names[i])) continue;
				size_t used = strlen(list);
				snprintf(list + used, sizeof(list) - used, "%s%s", used ? ", " : "", names[i]);
			}
			sg_error(SG_ERR_NOT_FOUND, "%s: no file %s '%s' at revision %s; GGUF files there: %s", ref->repo,
				 ref->file[0] ? "named" : "with quantization", ref->file[0] ? ref->file : ref->quant,
				 ref->revision, list[0] ? list : "none");
			return 0;
		}
		sel[k++] = names[pick];
		*gguf_index = 0;
	} else {
		int any_model_st = 0;
		for (int i = 0; i < n; i++)
			if (sg_hub_file_needed(names[i]) && ends_with(names[i], ".safetensors") &&
			    strncmp(names[i], "consolidated", 12))
				any_model_st = 1;
		int weights = 0;
		for (int i = 0; i < n && k < MAX_FILES; i++) {
			if (!sg_hub_file_needed(names[i])) continue;
			/* Mistral-style repos carry the same weights twice; take the transformers layout. */
			if (any_model_st && !strncmp(names[i], "consolidated", 12)) continue;
			weights += ends_with(names[i], ".safetensors") || !strcmp(names[i], "weights.npz");
			sel[k++] = names[i];
		}
		if (!weights) {
			int pick = sg_hub_pick_gguf(names, n, NULL);
			if (pick < 0) {
				sg_error(SG_ERR_UNSUPPORTED, "%s: the repo has neither safetensors nor GGUF weights", ref->repo);
				return 0;
			}
			k = 0;
			sel[k++] = names[pick];
			*gguf_index = 0;
		}
	}
	/* A split GGUF needs all its parts. */
	size_t plen;
	if (*gguf_index == 0 && split_gguf(sel[0], &plen)) {
		const char *first = sel[0];
		k = 0;
		for (int i = 0; i < n && k < MAX_FILES; i++) {
			size_t pl;
			if (split_gguf(names[i], &pl) && pl == plen && !strncmp(names[i], first, plen) &&
			    !strcmp(names[i] + strlen(names[i]) - 14, first + strlen(first) - 14))
				sel[k++] = names[i];
		}
		/* The loader opens the first part. */
		for (int i = 1; i < k; i++)
			if (strcmp(sel[i], sel[0]) < 0) {
				const char *t = sel[0];
				sel[0] = sel[i];
				sel[i] = t;
			}
	}
	return k;
}

/* ---- one file ---- */

typedef struct file_dl {
	int fd;
	sg_sha256_ctx sha;
	int sha_on;
	int64_t have;   /* bytes in the .incomplete file, all hashed */
	int64_t expect; /* -1 when the hub gave no size */
	int started;
	int io_errno;
	uint64_t received;
	sg_progress prog;
	int quiet;
	const sg_hub_opts *opts; /* its on_progress hook */
	sg_hub_progress hp;      /* what the hook is told */
	int cancelled;           /* the hook asked to stop */
} file_dl;

/* Tells the caller's hook (when set) where f stands: 0, or 1 when it asks to stop. */
static int report(file_dl *f, sg_hub_file_phase phase)
{
	if (!f->opts || !f->opts->on_progress) return 0;
	f->hp.phase = phase;
	f->hp.completed = f->have;
	if (f->opts->on_progress(f->opts->progress_user, &f->hp)) f->cancelled = 1;
	return f->cancelled;
}

static int restart_hash(file_dl *f)
{
	if (f->sha_on) sg_sha256_abort(&f->sha);
	f->sha_on = sg_sha256_init(&f->sha) == SG_OK;
	return f->sha_on ? 0 : -1;
}

static int write_sink(void *ctx, const sg_http_resp *r, const void *data, size_t n)
{
	file_dl *f = ctx;
	if (!f->started) {
		f->started = 1;
		/* Anything but a 206 starting where our file ends is the whole file again. */
		if ((r->status != 206 || r->range_start != f->have) && f->have > 0) {
			if (ftruncate(f->fd, 0) || lseek(f->fd, 0, SEEK_SET) < 0 || restart_hash(f)) {
				f->io_errno = errno ? errno : EIO;
				return 1;
			}
			f->have = 0;
		}
	}
	if (f->expect >= 0 && f->have + (int64_t)n > f->expect) {
		f->io_errno = EFBIG;
		return 1;
	}
	const char *p = data;
	size_t left = n;
	while (left) {
		ssize_t w = write(f->fd, p, left);
		if (w < 0) {
			if (errno == EINTR) continue;
			f->io_errno = errno;
			return 1;
		}
		p += w;
		left -= (size_t)w;
	}
	sg_sha256_update(&f->sha, data, n);
	f->have += (int64_t)n;
	f->received += n;
	if (!f->quiet) sg_progress_update(&f->prog, (uint64_t)f->have);
	return report(f, SG_HUB_FILE_BYTES);
}

/* Hashes the bytes already in the partial file so the digest covers the whole file. */
static sg_status hash_prefix(file_dl *f, const char *path)
{
	if (restart_hash(f)) return sg_error(SG_ERR_INTERNAL, "SHA-256 init failed");
	char *buf = sg_malloc(1 << 20);
	if (!buf) return sg_error(SG_ERR_NOMEM, "no memory for a 1 MB read buffer");
	int64_t off = 0;
	while (off < f->have) {
		size_t want = (size_t)(f->have - off < (1 << 20) ? f->have - off : (1 << 20));
		ssize_t r = pread(f->fd, buf, want, off);
		if (r <= 0) {
			sg_free(buf);
			return sg_error(SG_ERR_IO, "cannot read %s: %s", path, r < 0 ? strerror(errno) : "short file");
		}
		sg_sha256_update(&f->sha, buf, (size_t)r);
		off += r;
	}
	sg_free(buf);
	return SG_OK;
}

typedef struct file_meta {
	char etag[161];
	int64_t size;
	char url[4096]; /* where the bytes are (after the resolve redirect) */
} file_meta;

static sg_status head_file(dl_ctx *c, const char *file, file_meta *m)
{
	char url[4096];
	snprintf(url, sizeof(url), "%s/%s/%s/resolve/%s/", c->endpoint, c->ref->org, c->ref->name, c->commit);
	if (sg_http_escape(url, sizeof(url), file, 1)) return sg_error(SG_ERR_RANGE, "URL too long for %s", file);
	sg_http_resp r;
	/* Redirects that stay on the hub's host (renamed repos) are followed; one to another host is
	 * where the bytes are (a CDN), and the headers of the hub's answer describe the file. */
	for (int hop = 0;; hop++) {
		sg_http_req req = {.url = url, .token = c->token, .auth_host = c->origin, .head = 1};
		sg_status hs;
		for (int attempt = 0;; attempt++) {
			hs = sg_http_do(&req, &r);
			sg_http_resp_free(&r);
			if (!hs || attempt >= sg_flag_int("SARAGOSSA_HUB_RETRIES") ||
			    (r.outcome != SG_HTTP_CUT && r.outcome != SG_HTTP_UNREACHABLE))
				break;
			usleep((useconds_t)(250000 * (attempt + 1)));
		}
		if (hs) return sg_error_wrap(SG_ERR_IO, "%s: %s", c->ref->repo, file);
		char where[512];
		sg_http_origin(r.location, where, sizeof(where));
		int same_host = r.location[0] == '/' || !strcmp(where, c->origin);
		if (r.status >= 300 && r.status < 400 && r.location[0] && same_host && hop < 5) {
			char next[4096];
			if (r.location[0] == '/') snprintf(next, sizeof(next), "%s%s", c->origin, r.location);
			else snprintf(next, sizeof(next), "%s", r.location);
			snprintf(url, sizeof(url), "%s", next);
			continue;
		}
		break;
	}
	int redirect = r.status >= 300 && r.status < 400 && r.location[0];
	if (r.status != 200 && !redirect) return http_status_error(c, &r, file);
	snprintf(m->etag, sizeof(m->etag), "%s", r.linked_etag[0] ? r.linked_etag : r.etag);
	sg_hub_normalize_etag(m->etag);
	if (!m->etag[0]) return sg_error(SG_ERR_FORMAT, "%s: the hub sent no ETag for %s", c->ref->repo, file);
	sg_status st = sg_hub_check_etag(m->etag);
	if (st) return sg_error_wrap(st, "%s: %s", c->ref->repo, file);
	m->size = r.linked_size >= 0 ? r.linked_size : (r.status == 200 ? r.content_length : -1);
	if (!redirect) snprintf(m->url, sizeof(m->url), "%s", url);
	else if (strstr(r.location, "://")) snprintf(m->url, sizeof(m->url), "%s", r.location);
	else snprintf(m->url, sizeof(m->url), "%s%s", c->origin, r.location);
	if (r.repo_commit[0] && strcmp(r.repo_commit, c->commit))
		SG_WARN("%s: %s is served from commit %s, not %s", c->ref->repo, file, r.repo_commit, c->commit);
	return SG_OK;
}

static sg_status verify_and_commit(dl_ctx *c, const char *file, const file_meta *m, file_dl *f, const char *part,
				   const char *blob)
{
	if (m->size >= 0 && f->have != m->size) {
		unlink(part);
		return sg_error(SG_ERR_FORMAT, "%s: %s: received %lld bytes, the hub announced %lld; the partial file was deleted",
				c->ref->repo, file, (long long)f->have, (long long)m->size);
	}
	uint8_t d[32];
	char hex[65];
	sg_sha256_final(&f->sha, d);
	f->sha_on = 0;
	sg_hex(d, 32, hex);
	if (sg_hub_is_sha256(m->etag) && strcmp(hex, m->etag)) {
		unlink(part);
		return sg_error(SG_ERR_FORMAT,
				"%s: %s is corrupt: its SHA-256 is %s but the hub says %s; the download was deleted "
				"and nothing was added to the cache", c->ref->repo, file, hex, m->etag);
	}
	if (fdatasync(f->fd)) SG_WARN("fdatasync %s: %s", part, strerror(errno));
	if (rename(part, blob)) return sg_error(SG_ERR_IO, "cannot move %s to %s: %s", part, blob, strerror(errno));
	return SG_OK;
}

/* Downloads one file into blobs/<etag>, resuming blobs/<etag>.incomplete; fills m->etag. */
static sg_status fetch_file(dl_ctx *c, const char *file, file_meta *m)
{
	sg_status st = head_file(c, file, m);
	if (st) return st;
	char blob[SG_HUB_PATH_MAX], part[SG_HUB_PATH_MAX], lock[SG_HUB_PATH_MAX];
	if (snprintf(blob, sizeof(blob), "%s/blobs/%s", c->repo_dir, m->etag) >= (int)sizeof(blob) ||
	    snprintf(part, sizeof(part), "%s.incomplete", blob) >= (int)sizeof(part) ||
	    snprintf(lock, sizeof(lock), "%s/.locks/models--%s--%s/%s.lock", c->cache, c->ref->org, c->ref->name,
		     m->etag) >= (int)sizeof(lock))
		return sg_error(SG_ERR_RANGE, "cache path too long for %s", file);
	int64_t bs = sg_hub_file_size(blob);
	if (bs >= 0 && (m->size < 0 || bs == m->size)) return SG_OK; /* the blob is shared with another commit */

	/* The lock file is the one huggingface_hub takes, so the two never write the same blob. */
	int lock_fd = -1;
	if (!sg_hub_mkdirs_parent(lock)) lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (lock_fd >= 0) flock(lock_fd, LOCK_EX);
	bs = sg_hub_file_size(blob);
	if (bs >= 0 && (m->size < 0 || bs == m->size)) {
		if (lock_fd >= 0) close(lock_fd);
		return SG_OK;
	}

	file_dl f = {.quiet = c->opts->quiet, .expect = m->size, .opts = c->opts,
		     .hp = {.file = file, .digest = m->etag, .total = m->size}};
	f.fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (f.fd < 0) {
		st = sg_error(SG_ERR_IO, "cannot write %s: %s", part, strerror(errno));
		goto done;
	}
	struct stat sb;
	f.have = fstat(f.fd, &sb) ? 0 : sb.st_size;
	if (m->size >= 0 && f.have > m->size) {
		if (ftruncate(f.fd, 0)) f.have = -1;
		else f.have = 0;
	}
	if (f.have < 0 || (st = hash_prefix(&f, part))) {
		if (!st) st = sg_error(SG_ERR_IO, "cannot truncate %s", part);
		goto done;
	}
	if (lseek(f.fd, 0, SEEK_END) < 0) {
		st = sg_error(SG_ERR_IO, "cannot seek %s: %s", part, strerror(errno));
		goto done;
	}
	if (f.have > 0) SG_INFO("%s: resuming %s at byte %lld", c->ref->repo, file, (long long)f.have);
	if (!f.quiet) {
		const char *base = strrchr(file, '/');
		sg_progress_begin(&f.prog, base ? base + 1 : file, m->size > 0 ? (uint64_t)m->size : 0, (uint64_t)f.have);
	}
	int64_t retries = sg_flag_int("SARAGOSSA_HUB_RETRIES");
	if (report(&f, SG_HUB_FILE_START)) st = sg_error(SG_ERR_CANCELLED, "%s: the download of %s was stopped", c->ref->repo, file);
	for (int attempt = 0; !st; attempt++) {
		if (m->size >= 0 && f.have == m->size) break;
		f.started = 0;
		f.io_errno = 0;
		sg_http_req req = {.url = m->url, .token = c->token, .auth_host = c->origin, .follow = 1,
				   .range_from = f.have, .sink = write_sink, .sink_ctx = &f};
		sg_http_resp r;
		sg_status hs = sg_http_do(&req, &r);
		sg_http_resp_free(&r);
		if (f.cancelled) {
			st = sg_error(SG_ERR_CANCELLED, "%s: the download of %s was stopped at byte %lld (the partial file is kept "
				      "to be resumed)", c->ref->repo, file, (long long)f.have);
			break;
		}
		if (f.io_errno) {
			st = f.io_errno == EFBIG
				     ? sg_error(SG_ERR_FORMAT, "%s: %s: the hub sent more than the %lld bytes it announced",
						c->ref->repo, file, (long long)m->size)
				     : sg_error(SG_ERR_IO, "cannot write %s: %s", part, strerror(f.io_errno));
			if (f.io_errno == EFBIG) unlink(part);
			break;
		}
		if (!hs && r.status == 416 && f.have > 0) {
			/* The partial file does not fit what the hub has now: start over. */
			if (ftruncate(f.fd, 0) || lseek(f.fd, 0, SEEK_SET) < 0 || restart_hash(&f)) {
				st = sg_error(SG_ERR_IO, "cannot truncate %s: %s", part, strerror(errno));
				break;
			}
			f.have = 0;
			continue;
		}
		if (!hs && (r.status < 200 || r.status >= 300)) {
			st = http_status_error(c, &r, file);
			break;
		}
		if (!hs && (m->size < 0 || f.have == m->size)) break;
		/* Cut (or a clean close before the announced size): retry from where it stopped. */
		if (attempt >= retries) {
			char have[32], total[32];
			sg_format_bytes((uint64_t)f.have, have, sizeof(have));
			sg_format_bytes(m->size > 0 ? (uint64_t)m->size : 0, total, sizeof(total));
			st = sg_error(SG_ERR_IO,
				      "%s: download of %s interrupted at %s of %s (%s); run the same command again to "
				      "resume", c->ref->repo, file, have, total, hs ? r.error : "connection closed early");
			break;
		}
		SG_WARN("%s: %s: %s; retrying from byte %lld", c->ref->repo, file, hs ? r.error : "connection closed early",
			(long long)f.have);
		usleep((useconds_t)(250000 * (attempt + 1)));
	}
	if (!f.quiet) sg_progress_end(&f.prog);
	if (!st) {
		report(&f, SG_HUB_FILE_VERIFY);
		st = verify_and_commit(c, file, m, &f, part, blob);
	}
	if (!st) {
		c->out->files_downloaded++;
		report(&f, SG_HUB_FILE_DONE);
	}
done:
	c->out->bytes_downloaded += f.received;
	if (f.sha_on) sg_sha256_abort(&f.sha);
	if (f.fd >= 0) close(f.fd);
	if (lock_fd >= 0) close(lock_fd);
	return st;
}

/* ---- the request ---- */

static sg_status fetch_info(dl_ctx *c, json_t **info, int *unreachable)
{
	char url[2048];
	snprintf(url, sizeof(url), "%s/api/models/%s/%s/revision/", c->endpoint, c->ref->org, c->ref->name);
	if (sg_http_escape(url, sizeof(url), c->ref->revision, 0)) return sg_error(SG_ERR_RANGE, "URL too long");
	sg_http_req req = {.url = url, .token = c->token, .auth_host = c->origin, .follow = 1, .max_body = API_BODY_MAX};
	sg_http_resp r;
	if (sg_http_do(&req, &r)) {
		*unreachable = r.outcome == SG_HTTP_UNREACHABLE || r.outcome == SG_HTTP_CUT;
		sg_http_resp_free(&r);
		return sg_error(SG_ERR_IO, "the hub is unreachable: %s (%s)", r.error, c->endpoint);
	}
	if (r.status != 200) {
		/* A hub that is down (5xx) is as good as unreachable: a cached copy may still serve. */
		*unreachable = r.status >= 500;
		sg_status st = http_status_error(c, &r, NULL);
		sg_http_resp_free(&r);
		return st;
	}
	sg_status st = sg_json_parse(r.body ? r.body : "", r.body_len, "hub model info", info);
	sg_http_resp_free(&r);
	if (st) return sg_error_wrap(st, "%s", c->ref->repo);
	const char *sha = NULL;
	if (sg_json_get_str(*info, "sha", &sha) || !sg_hub_is_commit(sha)) {
		json_decref(*info);
		return sg_error(SG_ERR_FORMAT, "%s: the hub's model info has no valid commit 'sha'", c->ref->repo);
	}
	snprintf(c->commit, sizeof(c->commit), "%s", sha);
	return SG_OK;
}

sg_status sg_hub_download(const sg_hub_ref *ref, const char *cache, const sg_hub_opts *opts, sg_hub_model *out,
			  int *unreachable)
{
	static const sg_hub_opts none = {0};
	*unreachable = 0;
	memset(out, 0, sizeof(*out));
	dl_ctx c = {.ref = ref, .opts = opts ? opts : &none, .out = out};
	sg_hub_endpoint(c.endpoint, sizeof(c.endpoint));
	sg_http_origin(c.endpoint, c.origin, sizeof(c.origin));
	sg_hub_token(c.token, sizeof(c.token));
	snprintf(c.cache, sizeof(c.cache), "%s", cache);
	sg_status st = sg_hub_repo_dir(cache, ref, c.repo_dir, sizeof(c.repo_dir));
	if (st) return st;

	json_t *info = NULL;
	char snap[SG_HUB_PATH_MAX] = "", blobs[SG_HUB_PATH_MAX], path[SG_HUB_PATH_MAX];
	int made_snap = 0;
	if ((st = fetch_info(&c, &info, unreachable))) return st;
	const char **names = NULL, **sel = NULL;
	file_meta *metas = NULL;
	char *fetched = NULL;
	json_t *sib = json_object_get(info, "siblings");
	int n = json_is_array(sib) ? (int)json_array_size(sib) : -1;
	if (n < 0 || n > 100000) {
		st = sg_error(SG_ERR_FORMAT, "%s: the hub's model info has no 'siblings' list", ref->repo);
		goto out;
	}
	names = sg_calloc((size_t)n + 1, sizeof(*names));
	sel = sg_calloc(MAX_FILES, sizeof(*sel));
	if (!names || !sel) {
		st = sg_error(SG_ERR_NOMEM, "no memory for %d file names", n);
		goto out;
	}
	int m = 0;
	for (int i = 0; i < n; i++) {
		const char *fn = NULL;
		if (!sg_json_get_str(json_array_get(sib, (size_t)i), "rfilename", &fn)) names[m++] = fn;
	}
	int gguf_index;
	int k = select_files(&c, names, m, sel, &gguf_index);
	if (k == 0) {
		st = SG_ERR_NOT_FOUND;
		goto out;
	}
	for (int i = 0; i < k; i++)
		if ((st = sg_hub_check_filename(sel[i]))) {
			st = sg_error_wrap(st, "%s: the hub listed an unsafe file", ref->repo);
			goto out;
		}

	if ((st = sg_hub_join(snap, sizeof(snap), c.repo_dir, "snapshots")) ||
	    (st = sg_hub_join(blobs, sizeof(blobs), c.repo_dir, "blobs")) || (st = sg_hub_mkdirs(snap)) ||
	    (st = sg_hub_mkdirs(blobs)))
		goto out;
	if ((st = sg_hub_join(path, sizeof(path), snap, c.commit))) goto out;
	snprintf(snap, sizeof(snap), "%s", path);
	made_snap = !sg_hub_is_dir(snap);

	metas = sg_calloc((size_t)k, sizeof(*metas));
	fetched = sg_calloc((size_t)k, 1);
	if (!metas || !fetched) {
		st = sg_error(SG_ERR_NOMEM, "no memory for %d downloads", k);
		goto out;
	}
	for (int i = 0; i < k; i++) {
		if ((st = sg_hub_join(path, sizeof(path), snap, sel[i]))) goto out;
		if (sg_hub_is_file(path)) continue;
		if ((st = fetch_file(&c, sel[i], &metas[i]))) goto out;
		fetched[i] = 1;
	}
	/* Every file is in blobs/: now, and only now, the snapshot and the ref. */
	for (int i = 0; i < k; i++) {
		if (!fetched[i]) continue;
		char target[SG_HUB_PATH_MAX];
		if ((st = sg_hub_join(path, sizeof(path), snap, sel[i])) ||
		    (st = sg_hub_pointer_target(sel[i], metas[i].etag, target, sizeof(target))) ||
		    (st = sg_hub_mkdirs_parent(path)) || (st = sg_hub_symlink(target, path)))
			goto out;
	}
	if (strcmp(ref->revision, c.commit)) {
		char refs[SG_HUB_PATH_MAX];
		if (snprintf(refs, sizeof(refs), "%s/refs/%s", c.repo_dir, ref->revision) >= (int)sizeof(refs)) {
			st = sg_error(SG_ERR_RANGE, "ref path too long");
			goto out;
		}
		if ((st = sg_hub_mkdirs_parent(refs)) || (st = sg_hub_write_text(refs, c.commit))) goto out;
	}
	out->kind = gguf_index >= 0 ? SG_HUB_KIND_GGUF : SG_HUB_KIND_FOLDER;
	out->source = SG_HUB_SRC_HF_CACHE;
	snprintf(out->repo, sizeof(out->repo), "%s", ref->repo);
	snprintf(out->commit, sizeof(out->commit), "%s", c.commit);
	if (gguf_index >= 0) st = sg_hub_join(out->path, sizeof(out->path), snap, sel[gguf_index]);
	else st = sg_hub_join(out->path, sizeof(out->path), snap, "");
	if (!st && gguf_index < 0) out->path[strlen(out->path) - 1] = 0; /* no trailing '/' */
out:
	if (st && made_snap) rmdir(snap); /* an empty snapshot folder made for this request */
	sg_free(fetched);
	sg_free(metas);
	sg_free(sel);
	sg_free(names);
	json_decref(info);
	return st;
}

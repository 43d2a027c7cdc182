#include "base/mmap.h"
#include "base/alloc.h"
#include "base/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static sg_status open_regular(const char *path, int *fd, size_t *size)
{
	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0)
		return sg_error(errno == ENOENT ? SG_ERR_NOT_FOUND : SG_ERR_IO, "cannot open '%s': %s", path,
				strerror(errno));
	struct stat st;
	if (fstat(*fd, &st) < 0) {
		int e = errno;
		close(*fd);
		return sg_error(SG_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(*fd);
		return sg_error(SG_ERR_IO, "'%s' is not a regular file%s", path,
				S_ISDIR(st.st_mode) ? " (it is a directory)" : "");
	}
	*size = (size_t)st.st_size;
	return SG_OK;
}

static _Atomic uint64_t n_maps;

uint64_t sg_mmap_open_count(void) { return atomic_load(&n_maps); }

sg_status sg_mmap_open(const char *path, sg_mapped_file *out)
{
	memset(out, 0, sizeof(*out));
	int fd;
	size_t size;
	sg_status st = open_regular(path, &fd, &size);
	if (st) return st;
	void *p = NULL;
	if (size > 0) {
		p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			int e = errno;
			close(fd);
			return sg_error(SG_ERR_IO, "cannot map '%s' (%zu bytes): %s", path, size, strerror(e));
		}
	}
	close(fd); /* the map keeps the file referenced */
	out->path = sg_strdup(path);
	if (!out->path) {
		if (p) munmap(p, size);
		return sg_error(SG_ERR_NOMEM, "mapping '%s'", path);
	}
	out->data = p;
	out->size = size;
	atomic_fetch_add(&n_maps, 1);
	return SG_OK;
}

void sg_mmap_close(sg_mapped_file *f)
{
	if (f->data) munmap((void *)f->data, f->size);
	sg_free(f->path);
	memset(f, 0, sizeof(*f));
}

sg_status sg_read_file(const char *path, size_t max_bytes, char **out, size_t *len)
{
	*out = NULL;
	if (len) *len = 0;
	int fd;
	size_t size;
	sg_status st = open_regular(path, &fd, &size);
	if (st) return st;
	if (size > max_bytes) {
		close(fd);
		return sg_error(SG_ERR_RANGE, "'%s' is %zu bytes, more than the %zu allowed", path, size, max_bytes);
	}
	char *buf = sg_malloc(size + 1);
	if (!buf) {
		close(fd);
		return sg_error(SG_ERR_NOMEM, "reading '%s' (%zu bytes)", path, size);
	}
	size_t got = 0;
	while (got < size) {
		ssize_t r = read(fd, buf + got, size - got);
		if (r < 0 && errno == EINTR) continue;
		if (r <= 0) {
			int e = r < 0 ? errno : 0;
			close(fd);
			sg_free(buf);
			return sg_error(SG_ERR_IO, "reading '%s': %s", path, e ? strerror(e) : "file shrank");
		}
		got += (size_t)r;
	}
	close(fd);
	buf[size] = 0;
	*out = buf;
	if (len) *len = size;
	return SG_OK;
}

#include "hub/fs.h"
#include "base/error.h"
#include "hub/repo.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

sg_status sg_hub_join(char *buf, size_t n, const char *a, const char *b)
{
	int w = snprintf(buf, n, "%s/%s", a, b);
	if (w < 0 || (size_t)w >= n) return sg_error(SG_ERR_RANGE, "path too long: %s/%s", a, b);
	return SG_OK;
}

sg_status sg_hub_mkdirs(const char *path)
{
	char tmp[SG_HUB_PATH_MAX];
	size_t n = strlen(path);
	if (n == 0 || n >= sizeof(tmp)) return sg_error(SG_ERR_RANGE, "bad folder path '%s'", path);
	memcpy(tmp, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (tmp[i] != '/' && tmp[i] != 0) continue;
		char c = tmp[i];
		tmp[i] = 0;
		if (mkdir(tmp, 0755) && errno != EEXIST)
			return sg_error(SG_ERR_IO, "cannot create folder %s: %s", tmp, strerror(errno));
		tmp[i] = c;
	}
	if (!sg_hub_is_dir(path)) return sg_error(SG_ERR_IO, "%s exists and is not a folder", path);
	return SG_OK;
}

sg_status sg_hub_mkdirs_parent(const char *path)
{
	char tmp[SG_HUB_PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s", path);
	char *slash = strrchr(tmp, '/');
	if (!slash || slash == tmp) return SG_OK;
	*slash = 0;
	return sg_hub_mkdirs(tmp);
}

sg_status sg_hub_symlink(const char *target, const char *link)
{
	char tmp[SG_HUB_PATH_MAX];
	int w = snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", link, (long)getpid());
	if (w < 0 || (size_t)w >= sizeof(tmp)) return sg_error(SG_ERR_RANGE, "path too long: %s", link);
	unlink(tmp);
	if (symlink(target, tmp)) return sg_error(SG_ERR_IO, "cannot create link %s: %s", link, strerror(errno));
	if (rename(tmp, link)) {
		int e = errno;
		unlink(tmp);
		return sg_error(SG_ERR_IO, "cannot create link %s: %s", link, strerror(e));
	}
	return SG_OK;
}

sg_status sg_hub_write_text(const char *path, const char *text)
{
	char tmp[SG_HUB_PATH_MAX];
	int w = snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
	if (w < 0 || (size_t)w >= sizeof(tmp)) return sg_error(SG_ERR_RANGE, "path too long: %s", path);
	FILE *f = fopen(tmp, "w");
	if (!f) return sg_error(SG_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
	size_t n = strlen(text);
	int bad = fwrite(text, 1, n, f) != n;
	bad |= fclose(f) != 0;
	if (bad || rename(tmp, path)) {
		int e = errno;
		unlink(tmp);
		return sg_error(SG_ERR_IO, "cannot write %s: %s", path, strerror(e));
	}
	return SG_OK;
}

/* Removes the entries of the open folder `fd` (which it closes), recursing with openat and
 * O_NOFOLLOW so a symlink inside is removed as a link and never entered. */
static int rm_contents(int fd, int depth)
{
	if (depth > 64) {
		close(fd);
		errno = ELOOP;
		return -1;
	}
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -1;
	}
	int rc = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
		struct stat st;
		if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			rc = -1;
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			int sub = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0 || rm_contents(sub, depth + 1) || unlinkat(fd, e->d_name, AT_REMOVEDIR)) rc = -1;
		} else if (unlinkat(fd, e->d_name, 0)) {
			rc = -1;
		}
	}
	closedir(d);
	return rc;
}

sg_status sg_hub_rm_tree(const char *path)
{
	struct stat st;
	if (lstat(path, &st)) return errno == ENOENT ? SG_OK : sg_error(SG_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode)) {
		if (unlink(path)) return sg_error(SG_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
		return SG_OK;
	}
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || rm_contents(fd, 0) || rmdir(path))
		return sg_error(SG_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
	return SG_OK;
}

static uint64_t tree_size_fd(int fd, int depth)
{
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return 0;
	}
	uint64_t total = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
		struct stat st;
		if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW)) continue;
		if (S_ISREG(st.st_mode)) total += (uint64_t)st.st_size;
		else if (S_ISDIR(st.st_mode) && depth < 64) {
			int sub = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0) total += tree_size_fd(sub, depth + 1);
		}
	}
	closedir(d);
	return total;
}

uint64_t sg_hub_tree_size(const char *path)
{
	struct stat st;
	if (lstat(path, &st)) return 0;
	if (S_ISREG(st.st_mode)) return (uint64_t)st.st_size;
	if (!S_ISDIR(st.st_mode)) return 0;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? 0 : tree_size_fd(fd, 0);
}

int sg_hub_is_file(const char *path)
{
	struct stat st;
	return !stat(path, &st) && S_ISREG(st.st_mode);
}

int sg_hub_is_dir(const char *path)
{
	struct stat st;
	return !stat(path, &st) && S_ISDIR(st.st_mode);
}

int64_t sg_hub_file_size(const char *path)
{
	struct stat st;
	if (stat(path, &st) || !S_ISREG(st.st_mode)) return -1;
	return (int64_t)st.st_size;
}

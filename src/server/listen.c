/* The Unix socket listener (see listen.h). */
#include "server/listen.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"

/* A Unix socket at path, mode 0600. A stale socket file (no server answers on it) is replaced;
 * a live one, or a path that is not a socket, is refused. */
sg_status sg_srv_open_unix(const char *path, int *out)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof a.sun_path)
		return sg_error(SG_ERR_INVALID_ARG, "serve: socket path '%s' is longer than %zu bytes", path, sizeof a.sun_path - 1);
	memcpy(a.sun_path, path, strlen(path) + 1);
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return sg_error(SG_ERR_INVALID_ARG, "serve: %s exists and is not a socket; not replacing it", path);
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe < 0) return sg_error(SG_ERR_IO, "serve: socket: %s", strerror(errno));
		int live = connect(probe, (struct sockaddr *)&a, sizeof a) == 0;
		int err = errno;
		close(probe);
		if (live) return sg_error(SG_ERR_INVALID_ARG, "serve: another server is listening on %s; stop it or pick --socket PATH", path);
		if (err != ECONNREFUSED && err != ENOENT)
			return sg_error(SG_ERR_IO, "serve: cannot probe %s: %s", path, strerror(err));
		if (unlink(path) && errno != ENOENT)
			return sg_error(SG_ERR_IO, "serve: cannot remove the stale socket %s: %s", path, strerror(errno));
		SG_INFO("serve: replaced the stale socket %s", path);
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) return sg_error(SG_ERR_IO, "serve: socket: %s", strerror(errno));
	/* The mode is set at creation (umask) so no other user can connect in the window before
	 * chmod. */
	mode_t old = umask(0177);
	int b = bind(fd, (struct sockaddr *)&a, sizeof a);
	int err = errno;
	umask(old);
	if (b) {
		close(fd);
		return sg_error(SG_ERR_IO, "serve: cannot bind %s: %s", path, strerror(err));
	}
	if (chmod(path, 0600) || listen(fd, 128)) {
		err = errno;
		close(fd);
		unlink(path);
		return sg_error(SG_ERR_IO, "serve: cannot listen on %s: %s", path, strerror(err));
	}
	*out = fd;
	return SG_OK;
}

/* Fuzz target: raw bytes on the server's TCP socket, the whole HTTP request path of `serve`.
 * libmicrohttpd parses the request line, the headers and the body's framing (Content-Length,
 * chunked); the server's own code then routes the path (/v1/models/{id} included), checks the
 * method, the API key headers (Authorization: Bearer, x-api-key) and the body limit, and parses the
 * body of every route (the generation routes, /api/show, the embedding routes). No model is
 * served, so a generation stops at the 404 naming the model, after its body was parsed; nothing
 * reaches the inference worker. The server runs in this process (started once, on a loopback
 * port, with a small body limit and a short read deadline); each input is one connection: its
 * bytes are sent, the write side is shut, and the answer is read to the end.
 *
 * Checked: no sanitizer report, and an answer (when one comes) starts with an HTTP status line.
 * The seeds hold the key "k" ("Authorization: Bearer k"). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "server/server.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int port;

static void *serve(void *arg)
{
	sg_server_run(arg);
	return NULL;
}

/* A port nothing listens on now (the kernel's pick; the server binds it right after). */
static int pick_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &len)) return 0;
	close(fd);
	return ntohs(a.sin_port);
}

static int dial(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
	if (fd >= 0) close(fd);
	return -1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	sg_log_set_level(SG_LOG_ERROR);
	static sg_server_opts o;
	o = sg_server_default_opts();
	o.api_key = "k";
	o.max_body = 64 * 1024;
	o.read_timeout_s = 2;
	o.max_connections = 16;
	/* libFuzzer's own signal handlers stay in place (the server installs SIGINT/SIGTERM ones) */
	struct sigaction old_int, old_term;
	sigaction(SIGINT, NULL, &old_int);
	sigaction(SIGTERM, NULL, &old_term);
	pthread_t t;
	for (int attempt = 0; attempt < 20 && !port; attempt++) {
		o.port = pick_port();
		if (!o.port || pthread_create(&t, NULL, serve, &o)) continue;
		port = o.port;
		int fd = -1;
		for (int i = 0; i < 200 && fd < 0; i++) {
			fd = dial();
			if (fd < 0) usleep(10000);
		}
		if (fd < 0) {
			port = 0;
			pthread_join(t, NULL); /* the server could not bind: it returned */
			continue;
		}
		close(fd);
		pthread_detach(t);
	}
	usleep(100000); /* the server sets its handlers after its listeners are up */
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	if (!port) __builtin_trap(); /* no server: nothing could be fuzzed */
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = dial();
	if (fd < 0) return 0;
	size_t off = 0;
	while (off < size) {
		struct pollfd p = {fd, POLLOUT, 0};
		if (poll(&p, 1, 3000) <= 0) break;
		ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
		if (w <= 0) break; /* the server answered and closed early (a 413, a 401) */
		off += (size_t)w;
	}
	shutdown(fd, SHUT_WR);
	char head[16];
	size_t got = 0;
	char buf[4096];
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 1000) <= 0) {
			struct timespec t;
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (t.tv_sec - t0.tv_sec > 8) __builtin_trap(); /* the server never closed: a hang */
			continue;
		}
		ssize_t r = recv(fd, buf, sizeof buf, 0);
		if (r <= 0) break;
		for (ssize_t i = 0; i < r && got < sizeof head; i++) head[got++] = buf[i];
	}
	close(fd);
	if (got >= 7 && memcmp(head, "HTTP/1.", 7) != 0) __builtin_trap();
	return 0;
}

/* Jobs and the inference worker's queue (see job.h). */
#include "server/job.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/alloc.h"
#include "engine/draft.h"
#include "server/agent.h"

sg_job *sg_job_new(void)
{
	sg_job *j = sg_calloc(1, sizeof *j);
	if (!j) return NULL;
	j->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (j->evfd < 0) {
		sg_free(j);
		return NULL;
	}
	pthread_mutex_init(&j->mu, NULL);
	j->refs = 1;
	j->reused_prefix = -1;
	j->prefix_miss = -1;
	return j;
}

void sg_job_ref(sg_job *j)
{
	pthread_mutex_lock(&j->mu);
	j->refs++;
	pthread_mutex_unlock(&j->mu);
}

void sg_job_unref(sg_job *j)
{
	if (!j) return;
	pthread_mutex_lock(&j->mu);
	int left = --j->refs;
	pthread_mutex_unlock(&j->mu);
	if (left) return;
	if (j->on_free) j->on_free(j);
	if (j->extra_free) j->extra_free(j->extra);
	if (j->work_free) j->work_free(j->work);
	sg_free(j->session);
	close(j->evfd);
	pthread_mutex_destroy(&j->mu);
	sg_free(j->out);
	sg_free(j->prompt);
	sg_agent_plan_free(j->agent);
	sg_drafter_free(j->drafter);
	sg_srv_req_free(&j->req);
	sg_free(j);
}

static void wake(sg_job *j)
{
	uint64_t one = 1;
	ssize_t w = write(j->evfd, &one, sizeof one);
	(void)w; /* a full counter still wakes the reader */
}

int sg_job_write(sg_job *j, const char *buf, size_t len)
{
	if (!len) return 0;
	pthread_mutex_lock(&j->mu);
	if (j->out_len + len > j->out_cap) {
		size_t cap = j->out_cap ? j->out_cap : 1024;
		while (cap < j->out_len + len) cap *= 2;
		char *n = sg_realloc(j->out, cap);
		if (!n) {
			pthread_mutex_unlock(&j->mu);
			return -1;
		}
		j->out = n;
		j->out_cap = cap;
	}
	memcpy(j->out + j->out_len, buf, len);
	j->out_len += len;
	pthread_mutex_unlock(&j->mu);
	wake(j);
	return 0;
}

void sg_job_begin(sg_job *j, int status, const char *content_type)
{
	pthread_mutex_lock(&j->mu);
	j->status = status;
	j->content_type = content_type;
	if (j->state < SG_JOB_STREAMING) j->state = SG_JOB_STREAMING;
	pthread_mutex_unlock(&j->mu);
	wake(j);
}

void sg_job_finish(sg_job *j)
{
	pthread_mutex_lock(&j->mu);
	j->state = SG_JOB_DONE;
	pthread_mutex_unlock(&j->mu);
	wake(j);
}

void sg_job_respond(sg_job *j, int status, const char *content_type, const char *body, size_t len)
{
	pthread_mutex_lock(&j->mu);
	j->out_len = 0;
	pthread_mutex_unlock(&j->mu);
	if (sg_job_write(j, body, len)) status = 500;
	sg_job_begin(j, status, content_type);
	sg_job_finish(j);
}

int sg_job_wait(sg_job *j, sg_job_state state, int sock)
{
	for (;;) {
		pthread_mutex_lock(&j->mu);
		int ready = j->state >= state || (j->state >= SG_JOB_STREAMING && j->out_len > 0);
		pthread_mutex_unlock(&j->mu);
		if (ready) return 0;
		struct pollfd p[2] = {{.fd = j->evfd, .events = POLLIN}, {.fd = sock, .events = POLLRDHUP}};
		int n = poll(p, sock >= 0 ? 2 : 1, 1000);
		if (n < 0 && errno != EINTR) return -1;
		if (n > 0 && (p[0].revents & POLLIN)) {
			uint64_t v;
			ssize_t r = read(j->evfd, &v, sizeof v);
			(void)r;
		}
		if (sock >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
			atomic_store(&j->cancel, 1);
			return -1;
		}
	}
}

/* ---- the queue ---- */

struct sg_queue {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	sg_job *head, *tail;
	int waiting, capacity;
	sg_job *running;
	int stopping;
	pthread_t worker;
};

static void *worker_main(void *arg)
{
	sg_queue *q = arg;
	for (;;) {
		pthread_mutex_lock(&q->mu);
		while (!q->head && !q->stopping) pthread_cond_wait(&q->cv, &q->mu);
		if (q->stopping) {
			pthread_mutex_unlock(&q->mu);
			return NULL;
		}
		sg_job *j = q->head;
		q->head = j->next;
		if (!q->head) q->tail = NULL;
		q->waiting--;
		q->running = j;
		pthread_mutex_unlock(&q->mu);
		/* A job whose client left while it waited is skipped. */
		if (!atomic_load(&j->cancel)) j->run(j);
		if (j->state != SG_JOB_DONE) sg_job_finish(j);
		pthread_mutex_lock(&q->mu);
		q->running = NULL;
		pthread_mutex_unlock(&q->mu);
		sg_job_unref(j);
	}
}

sg_queue *sg_queue_start(int capacity)
{
	sg_queue *q = sg_calloc(1, sizeof *q);
	if (!q) return NULL;
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->cv, NULL);
	q->capacity = capacity;
	if (pthread_create(&q->worker, NULL, worker_main, q)) {
		sg_free(q);
		return NULL;
	}
	return q;
}

int sg_queue_push(sg_queue *q, sg_job *j)
{
	pthread_mutex_lock(&q->mu);
	if (q->waiting >= q->capacity || q->stopping) {
		pthread_mutex_unlock(&q->mu);
		return -1;
	}
	sg_job_ref(j);
	j->next = NULL;
	if (q->tail) q->tail->next = j;
	else q->head = j;
	q->tail = j;
	q->waiting++;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
	return 0;
}

void sg_queue_stats(sg_queue *q, int *waiting, int *running)
{
	pthread_mutex_lock(&q->mu);
	*waiting = q->waiting;
	*running = q->running != NULL;
	pthread_mutex_unlock(&q->mu);
}

void sg_queue_stop(sg_queue *q)
{
	if (!q) return;
	pthread_mutex_lock(&q->mu);
	if (q->stopping) {
		pthread_mutex_unlock(&q->mu);
		return;
	}
	q->stopping = 1;
	if (q->running) atomic_store(&q->running->cancel, 1);
	for (sg_job *j = q->head; j; j = j->next) atomic_store(&j->cancel, 1);
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
	pthread_join(q->worker, NULL);
	for (sg_job *j = q->head, *n; j; j = n) {
		n = j->next;
		sg_job_finish(j);
		sg_job_unref(j);
	}
	q->head = q->tail = NULL;
	q->waiting = 0;
}

void sg_queue_free(sg_queue *q)
{
	if (!q) return;
	pthread_cond_destroy(&q->cv);
	pthread_mutex_destroy(&q->mu);
	sg_free(q);
}

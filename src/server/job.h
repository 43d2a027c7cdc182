/* A generation job shared by a connection thread (which waits for it and sends its bytes) and the
 * inference worker (which runs it), plus the worker's bounded FIFO queue. */
#ifndef SG_SERVER_JOB_H
#define SG_SERVER_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "server/model.h"
#include "server/request.h"

typedef enum sg_job_state {
	SG_JOB_QUEUED = 0,
	SG_JOB_STREAMING, /* status and headers decided; bytes may follow */
	SG_JOB_DONE,      /* every byte is in out */
} sg_job_state;

typedef struct sg_job sg_job;
typedef void (*sg_job_fn)(sg_job *job);

struct sg_job {
	pthread_mutex_t mu;
	int refs;   /* the connection and the queue/worker */
	int evfd;   /* eventfd: the worker signals every change */
	atomic_int cancel; /* the client is gone (or the server stops) */
	/* under mu: */
	sg_job_state state;
	int status;               /* HTTP status once STREAMING/DONE */
	const char *content_type; /* static string */
	char *out;                /* [out_len] bytes not yet taken by the connection */
	size_t out_len, out_cap;
	/* owned by the job, read-only once queued: */
	sg_srv_req req;
	sg_srv_model *model;
	int32_t *prompt;          /* [n_prompt] token ids */
	size_t n_prompt;
	char id[40];              /* "chatcmpl-..." */
	int64_t created;
	struct sg_agent_plan *agent; /* constraint, reasoning and tool-call plan, or NULL */
	struct sg_drafter *drafter;  /* this request's own drafter (a prediction to look up), or NULL */
	sg_job_fn run;
	sg_job *next;
	/* prefix cache: the session key (header or request field, may be NULL), and what the
	 * worker reports in the response headers (set before the status is) */
	char *session;            /* [session_len] bytes (a key may hold NULs) */
	size_t session_len;
	long reused_prefix;       /* tokens restored from the cache; -1 = no header */
	long prefix_miss;         /* token where the prompt left the best cached chain; -1 = none */
	/* a route's own parsed request (the embedding routes'), freed with work_free when the job goes */
	void *work;
	void (*work_free)(void *work);
	/* owner hooks: on_free runs when the last reference goes (releases the model) */
	void (*on_free)(sg_job *j);
	void *user;
	int user_i;
	/* a route's own request (the audio routes: the upload and its options), freed with the job */
	void *extra;
	void (*extra_free)(void *extra);
};

/* A new job with one reference (the caller's). NULL when out of memory. */
sg_job *sg_job_new(void);
void sg_job_ref(sg_job *j);
void sg_job_unref(sg_job *j);

/* Worker side. write appends bytes (0, or -1 when out of memory); begin decides the status;
 * finish marks the end. Each wakes the connection. */
int sg_job_write(sg_job *j, const char *buf, size_t len);
void sg_job_begin(sg_job *j, int status, const char *content_type);
void sg_job_finish(sg_job *j);
/* A whole response at once (status + body), for errors and non-streamed answers. */
void sg_job_respond(sg_job *j, int status, const char *content_type, const char *body, size_t len);

/* Connection side: waits until the job's state is at least `state` or bytes are waiting,
 * watching sock for the client going away. Returns 0 when ready, -1 when the client left (the
 * job is then cancelled). */
int sg_job_wait(sg_job *j, sg_job_state state, int sock);

/* The queue and its one worker thread. */
typedef struct sg_queue sg_queue;
sg_queue *sg_queue_start(int capacity);
/* Appends j (taking a reference) unless capacity jobs already wait: then returns -1. */
int sg_queue_push(sg_queue *q, sg_job *j);
/* Jobs waiting (not counting the running one), and whether one runs. */
void sg_queue_stats(sg_queue *q, int *waiting, int *running);
/* Cancels the running and waiting jobs and joins the worker; later pushes are refused. */
void sg_queue_stop(sg_queue *q);
/* Frees a stopped queue (once no connection can push any more). */
void sg_queue_free(sg_queue *q);

#endif

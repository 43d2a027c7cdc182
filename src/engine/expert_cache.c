/*
 * The expert slot cache (see expert_cache.h for what it does and why).
 *
 * Slots: one anonymous mapping of n_max slots of slot_bytes, each slot three parts (gate, up,
 * down) of part_cap[p] bytes, every part 4096-aligned so an O_DIRECT read lands in it directly.
 * An expert's rows in the file start at an offset that is not block-aligned: its part is read
 * from the block boundary below, and the table points `lead` bytes into the part, where the
 * file's first row byte landed.
 *
 * On a backend of device memory (caps.expert_slots: a GPU) the slots are one device tensor of
 * n_max slots of dslot_bytes (parts at dpart_off[p], each the backend's bytes of the expert:
 * expert_bytes), the reads land in host staging slots of the layout above, and a finished read
 * is uploaded (expert_upload: the backend's own row layout) into its device slot; the tables
 * carry a device array of slot numbers per layer (map), written after each fetch.
 *
 * State: where[layer][e] is the slot holding expert e of layer, or -1; a slot is EMPTY, LOADING
 * (reads in flight: a prefetch) or READY. Eviction picks, among slots that are not LOADING and
 * not pinned by the layer being fetched, an EMPTY one, else the lowest score: the last use (lru)
 * or a use count that halves every `slots` lookups (freq).
 */
#include "engine/expert_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/log.h"
#include "engine/planner.h"

#define ALIGN 4096u
#define RING_DEPTH 256u

enum { EMPTY = 0, LOADING, READY };
enum { POLICY_LRU = 0, POLICY_FREQ };
enum { PF_OFF = 0, PF_ROUTER, PF_LAST };

typedef struct {
	int32_t layer, expert; /* owner, -1 when EMPTY */
	uint8_t state;
	uint8_t prefetched; /* read ahead and not asked for since */
	uint8_t failed;     /* a read of this load failed (LOADING only) */
	int pending;        /* reads in flight */
	uint32_t pin;       /* == cache epoch: in use by the layer being fetched */
	int stage;          /* device slots: the staging slot of the load in flight (LOADING) */
	uint64_t last;      /* tick of the last lookup */
	float freq;         /* use count at tick `last` (freq policy) */
} xslot;

typedef struct {
	int slot, part, file, direct;
	uint64_t off;  /* aligned file offset of the read */
	size_t len;    /* bytes asked for (aligned when direct) */
	size_t need;   /* bytes that must arrive (the expert's rows end there) */
	uint8_t *buf;
	int in_use;
} xreq;

typedef struct {
	int moe;
	size_t len[3];   /* bytes of one expert's rows of gate, up, down */
} xlayer;

typedef struct {
	int fd, dfd; /* buffered, O_DIRECT (-1 when refused) */
	struct stat st;
	char *path;
} xfile;

typedef struct sg_xcache {
	sg_model *m;
	int L, E, k;
	xlayer *ly;              /* [L] */
	sg_expert_loc *loc;      /* [L][3][E] where each expert's rows are */
	xfile *files;            /* [n_files] */
	int n_files;
	const void **tab;        /* [L][3][E] pointers the tables hold */
	sg_expert_table *tables; /* [L][3] */
	int32_t *where;          /* [L][E] */
	int32_t *last_ids;       /* [L][k] the ids a layer took last (PF_LAST), -1 unset */
	xslot *slots;            /* [n_max] */
	int64_t n, n_max;
	uint8_t *pool;
	size_t pool_bytes, slot_bytes, part_off[3], part_cap[3];
	int policy, prefetch, direct;
	uint64_t tick;
	uint32_t epoch;
	/* device slots (dev 1) */
	int dev;
	sg_btensor dpool;        /* I32 [dslot_bytes / 4][n_max] on the device */
	sg_btensor dmap;         /* I32 [E][L]: where[][], as the tables' slot arrays */
	size_t dslot_bytes, dpart_off[3];
	int32_t *stage_free;     /* [n_stage] stack of free staging slots */
	uint8_t *dirty;          /* [L] the layer's row of where[] changed since the device's map took it */
	int n_stage, n_stage_free;
	int pinned;              /* the staging slots are page-locked (host_pin) */
	uint8_t *stage;          /* host staging: n_stage slots of slot_bytes */
	struct io_uring ring;
	int uring;
	xreq *reqs;              /* [n_reqs] */
	int n_reqs, inflight;
	sg_btensor logits;       /* [1][E] F32: the next layer's router on this layer's input */
	float *lbuf;             /* [E] */
	int32_t *need;           /* [E] scratch */
	sg_xc_stats st;
	char uerr[256];          /* the last failed upload's message ("" when none) */
	pthread_mutex_t mu;
} sg_xcache;

/* ---- spec ---- */

int sg_xc_parse(const char *s, sg_xc_spec *out, char *err, size_t errn)
{
	memset(out, 0, sizeof *out);
	if (!s || !*s || !strcasecmp(s, "off") || !strcmp(s, "0")) return 0;
	if (!strcasecmp(s, "auto")) {
		out->mode = SG_XC_AUTO;
		return 0;
	}
	size_t n = strlen(s);
	if (s[n - 1] == '%') {
		char *end;
		errno = 0;
		double p = strtod(s, &end);
		if (errno || end != s + n - 1 || !(p > 0) || p > 100) {
			snprintf(err, errn, "--expert-cache: '%s' is not a percentage in (0, 100]", s);
			return -1;
		}
		out->mode = SG_XC_PERCENT;
		out->percent = p;
		return 0;
	}
	int64_t b;
	if (sg_parse_int(s, &b) || b <= 0) {
		snprintf(err, errn, "--expert-cache wants off, auto, a size (6g, 512m) or a percentage of the experts (25%%), got '%s'", s);
		return -1;
	}
	out->mode = SG_XC_BYTES;
	out->bytes = (uint64_t)b;
	return 0;
}

/* ---- layout ---- */

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* The file (index) and offset of a tensor bound in place, or -1. */
static int locate(const sg_model *m, const sg_btensor *t, uint64_t *off)
{
	if (!t->data || t->owned) return -1;
	for (int i = 0; i < m->w->n_files; i++) {
		const sg_mapped_file *f = &m->w->files[i];
		const uint8_t *p = t->data;
		if (f->data && p >= f->data && p < f->data + f->size) {
			*off = (uint64_t)(p - f->data);
			return i;
		}
	}
	return -1;
}

/* Fills ly[L] (and loc [L][3][E] when not NULL) from m's experts: the locations a deferred load
 * recorded, else the stacks bound in place; 0, or -1 with *why. */
static int layout(const sg_model *m, xlayer *ly, sg_expert_loc *loc, const char **why)
{
	const sg_model_desc *d = &m->desc;
	size_t E = (size_t)d->n_expert;
	int any = 0;
	for (int li = 0; li < d->n_layer; li++) {
		memset(&ly[li], 0, sizeof ly[li]);
		if (!d->layers[li].moe) continue;
		const sg_layer_weights *lw = &m->layers[li];
		if (m->hy.layers && m->hy.layers[li].gate_up_exps.data) {
			*why = "the experts are one fused gate_up stack (Gemma 4), which the slot cache does not read yet";
			return -1;
		}
		const sg_btensor *t[3] = {&lw->gate_exps, &lw->up_exps, &lw->down_exps};
		int located = m->xloc_set && m->xloc_set[li];
		ly[li].moe = 1;
		for (int p = 0; p < 3; p++) {
			if (t[p]->type == SG_TYPE_MLX_AFFINE) {
				*why = "the experts are MLX-quantized, which the slot cache does not read yet";
				return -1;
			}
			ly[li].len[p] = (size_t)t[p]->ne[1] * t[p]->row_bytes;
			sg_expert_loc *lp = loc ? loc + ((size_t)li * 3 + (size_t)p) * E : NULL;
			if (located) {
				if (lp) memcpy(lp, m->xloc + ((size_t)li * 3 + (size_t)p) * E, E * sizeof *lp);
				continue;
			}
			uint64_t off;
			int f = locate(m, t[p], &off);
			if (f < 0) {
				*why = "the experts were copied at load (load the model with its experts deferred: sg_model_load_ex)";
				return -1;
			}
			for (size_t e = 0; lp && e < E; e++) lp[e] = (sg_expert_loc){f, off + e * ly[li].len[p]};
		}
		any = 1;
	}
	if (!any) {
		*why = "the model has no routed experts";
		return -1;
	}
	return 0;
}

/* Device slots: the bytes of part p (gate, up, down) of one slot, the largest expert of any layer
 * in the backend's layout; 0 (*why set) when a layer's experts have none. */
static size_t dev_part(const sg_model *m, const xlayer *ly, int p, const char **why)
{
	size_t cap = 0;
	for (int li = 0; li < m->desc.n_layer; li++) {
		if (!ly[li].moe) continue;
		const sg_layer_weights *lw = &m->layers[li];
		const sg_btensor *t = p == 0 ? &lw->gate_exps : p == 1 ? &lw->up_exps : &lw->down_exps;
		size_t b = m->be->ops->expert_bytes ? m->be->ops->expert_bytes(m->be, t) : 0;
		if (!b) {
			*why = "the experts' type has no layout in the device's slots";
			return 0;
		}
		b = round_up(b, 256);
		if (b > cap) cap = b;
	}
	return cap;
}

/* 1 when m's backend keeps the slots in its own memory (a GPU), 0 for host memory slots, -1 when
 * it reads experts through no table at all. */
static int dev_slots(const sg_model *m)
{
	sg_backend_caps caps;
	sg_backend_caps_get(m->be, &caps);
	return caps.expert_table ? 0 : caps.expert_slots && m->be->ops->expert_upload ? 1 : -1;
}

uint64_t sg_xc_slot_bytes(const sg_model *m, int64_t *experts, const char **why)
{
	const char *w = NULL;
	if (experts) *experts = 0;
	xlayer *ly = sg_calloc((size_t)m->desc.n_layer, sizeof *ly);
	if (!ly) return 0;
	uint64_t total = 0;
	if (!layout(m, ly, NULL, &w)) {
		size_t cap[3] = {0, 0, 0};
		int64_t ne = 0;
		for (int li = 0; li < m->desc.n_layer; li++) {
			if (!ly[li].moe) continue;
			ne += m->desc.n_expert;
			for (int p = 0; p < 3; p++) {
				size_t c = round_up(ly[li].len[p], ALIGN) + ALIGN;
				if (c > cap[p]) cap[p] = c;
			}
		}
		total = cap[0] + cap[1] + cap[2];
		if (dev_slots(m) == 1) { /* the pool is the device's: its layout's bytes */
			total = 0;
			for (int p = 0; p < 3; p++) {
				size_t b = dev_part(m, ly, p, &w);
				total = b && (total || !p) ? total + b : 0;
			}
		}
		if (experts) *experts = total ? ne : 0;
	}
	sg_free(ly);
	if (why) *why = w;
	return total;
}

/* ---- slots ---- */

static sg_xcache *cache_of(const sg_model *m);

static void table_set(sg_xcache *c, int layer, int e, int s)
{
	if (c->dev) return; /* device slots: the map (where[]) is written after each fetch */
	for (int p = 0; p < 3; p++) {
		const void **slot = &c->tab[((size_t)layer * 3 + (size_t)p) * (size_t)c->E + (size_t)e];
		if (s < 0) {
			*slot = NULL;
			continue;
		}
		uint64_t off = c->loc[((size_t)layer * 3 + (size_t)p) * (size_t)c->E + (size_t)e].offset;
		*slot = c->pool + (size_t)s * c->slot_bytes + c->part_off[p] + (size_t)(off % ALIGN);
	}
}

static void slot_clear(sg_xcache *c, int s)
{
	xslot *x = &c->slots[s];
	if (x->layer >= 0 && c->dirty) c->dirty[x->layer] = 1;
	if (x->layer >= 0) {
		c->where[(size_t)x->layer * (size_t)c->E + (size_t)x->expert] = -1;
		table_set(c, x->layer, x->expert, -1);
	}
	x->layer = x->expert = -1;
	x->state = EMPTY;
	x->prefetched = x->failed = 0;
	x->pending = 0;
	x->freq = 0;
}

static float score(const sg_xcache *c, const xslot *x)
{
	if (c->policy == POLICY_LRU) return (float)x->last;
	/* the use count, halved every n lookups since its last use */
	return x->freq * exp2f(-(float)(c->tick - x->last) / (float)c->n);
}

/* A slot to load into: an empty one, else the lowest score among those neither loading nor
 * pinned; -1 when every slot is busy. */
static int victim(sg_xcache *c)
{
	int best = -1;
	float bs = 0;
	for (int64_t s = 0; s < c->n; s++) {
		xslot *x = &c->slots[s];
		if (x->state == LOADING || x->pin == c->epoch) continue;
		if (x->state == EMPTY) return (int)s;
		float v = score(c, x);
		if (best < 0 || v < bs) best = (int)s, bs = v;
	}
	return best;
}

static void touch(sg_xcache *c, xslot *x)
{
	if (c->policy == POLICY_FREQ) x->freq = score(c, x) + 1.0f;
	x->last = ++c->tick;
}

/* ---- reads ---- */

static xreq *req_new(sg_xcache *c)
{
	for (int i = 0; i < c->n_reqs; i++)
		if (!c->reqs[i].in_use) {
			memset(&c->reqs[i], 0, sizeof c->reqs[i]);
			c->reqs[i].in_use = 1;
			return &c->reqs[i];
		}
	return NULL;
}

/* Queues the three reads of expert e of layer into slot s (state LOADING); 0, or -1 when the
 * request table is full (nothing queued). */
static int queue_load(sg_xcache *c, int s, int layer, int e, xreq **out)
{
	int used = 0;
	for (int i = 0; i < c->n_reqs; i++) used += c->reqs[i].in_use;
	if (used + 3 > c->n_reqs || (c->dev && c->n_stage_free == 0)) return -1;
	xslot *x = &c->slots[s];
	slot_clear(c, s);
	if (c->dev) x->stage = c->stage_free[--c->n_stage_free];
	x->layer = layer;
	x->expert = e;
	x->state = LOADING;
	x->pending = 3;
	c->where[(size_t)layer * (size_t)c->E + (size_t)e] = s;
	if (c->dirty) c->dirty[layer] = 1;
	const xlayer *l = &c->ly[layer];
	for (int p = 0; p < 3; p++) {
		xreq *r = req_new(c);
		const sg_expert_loc *lc = &c->loc[((size_t)layer * 3 + (size_t)p) * (size_t)c->E + (size_t)e];
		const xfile *f = &c->files[lc->file];
		uint64_t off = lc->offset;
		r->slot = s;
		r->part = p;
		r->file = lc->file;
		r->direct = f->dfd >= 0;
		r->off = off / ALIGN * ALIGN;
		r->need = (size_t)(off - r->off) + l->len[p];
		r->len = r->direct ? round_up(r->need, ALIGN) : r->need;
		if (!r->direct) { /* buffered: read just the rows, at the same place in the part */
			r->off = off;
			r->need = r->len = l->len[p];
		}
		r->buf = (c->dev ? c->stage + (size_t)x->stage * c->slot_bytes : c->pool + (size_t)s * c->slot_bytes) + c->part_off[p] +
			 (r->direct ? 0 : (size_t)(off % ALIGN));
		out[p] = r;
	}
	return 0;
}

/* Finishes a read that came back short (or the synchronous path): buffered preads until `need`
 * bytes are in. 0, or an errno (-1: the file ended first). */
static int finish_sync(sg_xcache *c, xreq *r, size_t done)
{
	int fd = c->files[r->file].fd;
	while (done < r->need) {
		ssize_t got = pread(fd, r->buf + done, r->need - done, (off_t)(r->off + done));
		if (got < 0 && errno == EINTR) continue;
		if (got < 0) return errno ? errno : EIO;
		if (got == 0) return -1;
		done += (size_t)got;
	}
	return 0;
}

/* Device slots: the three parts of slot s's staged expert into its device slot (the backend's
 * row layout). 0, or -1 with the error set. */
static int upload(sg_xcache *c, int s)
{
	const xslot *x = &c->slots[s];
	sg_backend *be = c->m->be;
	const sg_layer_weights *lw = &c->m->layers[x->layer];
	const sg_btensor *t[3] = {&lw->gate_exps, &lw->up_exps, &lw->down_exps};
	for (int p = 0; p < 3; p++) {
		uint64_t off = c->loc[((size_t)x->layer * 3 + (size_t)p) * (size_t)c->E + (size_t)x->expert].offset;
		const uint8_t *src = c->stage + (size_t)x->stage * c->slot_bytes + c->part_off[p] + (size_t)(off % ALIGN);
		uint8_t *dst = (uint8_t *)c->dpool.data + (size_t)s * c->dslot_bytes + c->dpart_off[p];
		if (be->ops->expert_upload(be, t[p], src, dst)) {
			snprintf(c->uerr, sizeof c->uerr, "%s", sg_last_error());
			return -1;
		}
	}
	return 0;
}

static void complete(sg_xcache *c, xreq *r, int res)
{
	xslot *x = &c->slots[r->slot];
	int err = 0;
	if (res < 0) err = -res;
	else if ((size_t)res < r->need) err = finish_sync(c, r, (size_t)res);
	if (err) x->failed = 1;
	c->st.reads++;
	c->st.bytes_read += r->need;
	r->in_use = 0;
	if (--x->pending == 0) {
		if (!x->failed && c->dev && upload(c, r->slot)) x->failed = 1;
		if (c->dev) c->stage_free[c->n_stage_free++] = x->stage;
		if (x->failed) slot_clear(c, r->slot);
		else {
			x->state = READY;
			table_set(c, x->layer, x->expert, r->slot);
		}
	}
}

/* Sends the reads (io_uring, or pread one by one). */
static void submit(sg_xcache *c, xreq **rs, int n)
{
	if (!c->uring) {
		for (int i = 0; i < n; i++) {
			int err = finish_sync(c, rs[i], 0);
			complete(c, rs[i], err ? -(err > 0 ? err : EIO) : (int)rs[i]->need);
		}
		return;
	}
	for (int i = 0; i < n; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring);
		while (!sqe) { /* full: send what is queued, make room */
			io_uring_submit(&c->ring);
			struct io_uring_cqe *cqe;
			if (io_uring_wait_cqe(&c->ring, &cqe) == 0) {
				xreq *r = io_uring_cqe_get_data(cqe);
				int res = cqe->res;
				io_uring_cqe_seen(&c->ring, cqe);
				c->inflight--;
				complete(c, r, res);
			}
			sqe = io_uring_get_sqe(&c->ring);
		}
		xreq *r = rs[i];
		const xfile *f = &c->files[r->file];
		io_uring_prep_read(sqe, r->direct ? f->dfd : f->fd, r->buf, (unsigned)r->len, r->off);
		io_uring_sqe_set_data(sqe, r);
		c->inflight++;
	}
	io_uring_submit(&c->ring);
}

/* Waits for every read in flight. */
static void drain(sg_xcache *c)
{
	while (c->uring && c->inflight > 0) {
		struct io_uring_cqe *cqe;
		int rc = io_uring_wait_cqe(&c->ring, &cqe);
		if (rc == -EINTR) continue;
		if (rc < 0) break;
		xreq *r = io_uring_cqe_get_data(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&c->ring, cqe);
		c->inflight--;
		complete(c, r, res);
	}
}

/* A file that is not what was loaded: truncated, rewritten or replaced in place. */
static sg_status check_file(sg_xcache *c, int i)
{
	xfile *f = &c->files[i];
	struct stat now;
	if (fstat(f->fd, &now))
		return sg_error(SG_ERR_IO, "expert cache: cannot stat '%s': %s", f->path, strerror(errno));
	if (now.st_size != f->st.st_size)
		return sg_error(SG_ERR_IO, "expert cache: '%s' changed since the model was loaded (%lld bytes, now %lld): reload the model",
				f->path, (long long)f->st.st_size, (long long)now.st_size);
	if (now.st_mtim.tv_sec != f->st.st_mtim.tv_sec || now.st_mtim.tv_nsec != f->st.st_mtim.tv_nsec)
		return sg_error(SG_ERR_IO, "expert cache: '%s' was modified since the model was loaded: reload the model", f->path);
	return SG_OK;
}

/* ---- prefetch ---- */

static int next_moe(const sg_xcache *c, int layer)
{
	for (int l = layer + 1; l < c->L; l++)
		if (c->ly[l].moe) return l;
	return -1;
}

/* The k experts the next MoE layer will probably take; returns how many were written. */
static int predict(sg_xcache *c, int nl, const sg_btensor *h, int32_t *out)
{
	if (c->prefetch == PF_LAST) {
		int n = 0;
		for (int j = 0; j < c->k; j++)
			if (c->last_ids[(size_t)nl * (size_t)c->k + (size_t)j] >= 0) out[n++] = c->last_ids[(size_t)nl * (size_t)c->k + (size_t)j];
		return n;
	}
	sg_backend *be = c->m->be;
	const sg_btensor *router = &c->m->layers[nl].router;
	if (!router->data || !h || h->ne[0] != router->ne[0]) return 0;
	sg_btensor row = sg_btensor_rows_view(h, sg_btensor_rows(h) - 1, 1);
	if (be->ops->matmul(be, router, &row, NULL, &c->logits) || be->ops->read(be, &c->logits, 0, c->lbuf, sizeof(float) * (size_t)c->E))
		return 0;
	int n = 0;
	for (int j = 0; j < c->k; j++) { /* k passes of a max: k is small */
		int best = -1;
		for (int e = 0; e < c->E; e++) {
			int taken = 0;
			for (int i = 0; i < n; i++) taken |= out[i] == e;
			if (!taken && (best < 0 || c->lbuf[e] > c->lbuf[best])) best = e;
		}
		if (best < 0) break;
		out[n++] = best;
	}
	return n;
}

static void prefetch(sg_xcache *c, int layer, const sg_btensor *h)
{
	int nl = next_moe(c, layer);
	if (nl < 0 || c->prefetch == PF_OFF || !c->uring) return;
	int32_t *want = c->need; /* free again: the layer's needs are resident */
	int n = predict(c, nl, h, want);
	xreq *rs[3 * 64];
	int nr = 0;
	for (int i = 0; i < n && nr + 3 <= (int)(sizeof rs / sizeof rs[0]); i++) {
		if (c->where[(size_t)nl * (size_t)c->E + (size_t)want[i]] >= 0) continue;
		int s = victim(c);
		if (s < 0 || queue_load(c, s, nl, want[i], rs + nr)) break;
		c->slots[s].prefetched = 1;
		c->slots[s].last = c->tick; /* young: not the next victim */
		c->slots[s].freq = 1.0f;
		c->st.prefetched++;
		nr += 3;
	}
	if (nr) submit(c, rs, nr);
}

/* ---- fetch ---- */

static sg_status fetch(void *ctx, int layer, const int32_t *ids, int64_t n, const sg_btensor *h)
{
	sg_xcache *c = ctx;
	if (layer < 0 || layer >= c->L || !c->ly[layer].moe) return SG_OK;
	pthread_mutex_lock(&c->mu);
	drain(c); /* the prefetch of this layer lands */
	c->epoch++;
	if (c->epoch == 0) c->epoch = 1; /* 0 marks a slot never pinned */
	int first = 1;
	for (int l = 0; l < layer; l++) first &= !c->ly[l].moe;
	if (first && h) c->st.tokens += (uint64_t)sg_btensor_rows(h);
	/* the distinct experts, in order of first appearance */
	int nn = 0;
	for (int64_t i = 0; i < n; i++) {
		int32_t e = ids[i];
		if (e < 0 || e >= c->E) continue;
		int dup = 0;
		for (int j = 0; j < nn && !dup; j++) dup = c->need[j] == e;
		if (!dup) c->need[nn++] = e;
	}
	if (n == c->k)
		for (int j = 0; j < c->k; j++) c->last_ids[(size_t)layer * (size_t)c->k + (size_t)j] = ids[j];
	/* pin what is resident, load what is not */
	xreq **rs = sg_malloc(sizeof(xreq *) * (size_t)(3 * nn + 3));
	if (!rs) {
		pthread_mutex_unlock(&c->mu);
		return sg_error(SG_ERR_NOMEM, "expert cache: read list");
	}
	int nr = 0;
	sg_status st = SG_OK;
	for (int j = 0; j < nn; j++) {
		int32_t s = c->where[(size_t)layer * (size_t)c->E + (size_t)c->need[j]];
		c->st.lookups++;
		if (s >= 0 && c->slots[s].state == READY) {
			c->st.hits++;
			if (c->slots[s].prefetched) c->st.prefetch_used++;
			c->slots[s].prefetched = 0;
			c->slots[s].pin = c->epoch;
			touch(c, &c->slots[s]);
		}
	}
	int checked = 0;
	for (int j = 0; j < nn; j++) {
		int32_t e = c->need[j];
		if (c->where[(size_t)layer * (size_t)c->E + (size_t)e] >= 0) continue;
		if (!checked) { /* before the first read: the files are still the ones loaded */
			for (int i = 0; i < c->n_files && !st; i++)
				if (c->files[i].fd >= 0) st = check_file(c, i);
			if (st) break;
			checked = 1;
		}
		int s = victim(c);
		int q = s >= 0 ? queue_load(c, s, layer, e, rs + nr) : -1;
		if (q && s >= 0 && nr) { /* the request table or the staging slots are taken: send what is queued, wait, retry */
			submit(c, rs, nr);
			drain(c);
			nr = 0;
			q = queue_load(c, s, layer, e, rs + nr);
		}
		if (q) {
			st = sg_error(SG_ERR_INTERNAL, "expert cache: no free slot for expert %d of layer %d (%lld slots)", e, layer, (long long)c->n);
			break;
		}
		c->slots[s].pin = c->epoch;
		touch(c, &c->slots[s]);
		nr += 3;
	}
	if (nr) {
		submit(c, rs, nr);
		drain(c);
	}
	sg_free(rs);
	if (!st)
		for (int j = 0; j < nn; j++) {
			int32_t s = c->where[(size_t)layer * (size_t)c->E + (size_t)c->need[j]];
			if (s < 0 || c->slots[s].state != READY) {
				const sg_expert_loc *lc = &c->loc[(size_t)layer * 3 * (size_t)c->E + (size_t)c->need[j]];
				const xfile *f = &c->files[lc->file];
				uint64_t off = lc->offset;
				st = c->uerr[0] ? sg_error(SG_ERR_BACKEND, "expert cache: expert %d of layer %d into its device slot: %s", c->need[j], layer, c->uerr)
						: check_file(c, lc->file);
				c->uerr[0] = 0;
				if (!st)
					st = sg_error(SG_ERR_IO, "expert cache: reading expert %d of layer %d from '%s' (offset %llu) failed: the file is shorter or unreadable",
						      c->need[j], layer, f->path, (unsigned long long)off);
				break;
			}
		}
	/* device slots: the layer's slot numbers as its tables read them, when they changed */
	if (!st && c->dev && c->dirty[layer]) {
		st = c->m->be->ops->write(c->m->be, &c->dmap, sizeof(int32_t) * (size_t)layer * (size_t)c->E,
					  &c->where[(size_t)layer * (size_t)c->E], sizeof(int32_t) * (size_t)c->E);
		if (!st) c->dirty[layer] = 0;
	}
	if (!st && n == c->k) prefetch(c, layer, h);
	pthread_mutex_unlock(&c->mu);
	return st;
}

/* ---- lifetime ---- */

static void cache_free(void *ctx)
{
	sg_xcache *c = ctx;
	if (!c) return;
	drain(c);
	if (c->uring) io_uring_queue_exit(&c->ring);
	for (int i = 0; i < c->n_files; i++) {
		if (c->files[i].fd >= 0) close(c->files[i].fd);
		if (c->files[i].dfd >= 0) close(c->files[i].dfd);
		sg_free(c->files[i].path);
	}
	if (c->logits.data) c->m->be->ops->tensor_free(c->m->be, &c->logits);
	if (c->pool) munmap(c->pool, c->pool_bytes);
	if (c->pinned) c->m->be->ops->host_pin(c->m->be, c->stage, c->slot_bytes * (size_t)c->n_stage, 0);
	if (c->stage) munmap(c->stage, c->slot_bytes * (size_t)c->n_stage);
	if (c->dpool.data) c->m->be->ops->tensor_free(c->m->be, &c->dpool);
	if (c->dmap.data) c->m->be->ops->tensor_free(c->m->be, &c->dmap);
	/* the layers' tensors no longer point at tables of this cache */
	for (int li = 0; li < c->L && c->m->layers; li++) {
		c->m->layers[li].gate_exps.experts = NULL;
		c->m->layers[li].up_exps.experts = NULL;
		c->m->layers[li].down_exps.experts = NULL;
	}
	pthread_mutex_destroy(&c->mu);
	sg_free(c->files);
	sg_free(c->ly);
	sg_free(c->loc);
	sg_free(c->tab);
	sg_free(c->tables);
	sg_free(c->where);
	sg_free(c->last_ids);
	sg_free(c->slots);
	sg_free(c->reqs);
	sg_free(c->lbuf);
	sg_free(c->need);
	sg_free(c->stage_free);
	sg_free(c->dirty);
	sg_free(c);
}

static sg_xcache *cache_of(const sg_model *m) { return m->xsrc.fetch == fetch ? m->xsrc.ctx : NULL; }

/* Hands the mapped pages of [p, p + n) back and says they will be read at random (never, here):
 * the kernel neither keeps nor reads ahead expert pages of the map. */
static void advise_away(const uint8_t *p, size_t n)
{
	long ps = sysconf(_SC_PAGESIZE);
	uintptr_t pg = ps > 0 ? (uintptr_t)ps : 4096, a = ((uintptr_t)p + pg - 1) & ~(pg - 1), e = ((uintptr_t)p + n) & ~(pg - 1);
	if (e <= a) return;
	(void)madvise((void *)a, e - a, MADV_RANDOM);
	(void)madvise((void *)a, e - a, MADV_DONTNEED);
}

sg_status sg_xc_attach(sg_model *m, int64_t slots)
{
	if (m->xsrc.fetch) return sg_error(SG_ERR_INVALID_ARG, "expert cache: the model has one already");
	int dev = dev_slots(m);
	if (dev < 0)
		return sg_error(SG_ERR_UNSUPPORTED, "expert cache: the %s backend reads experts only from resident stacks (run on the CPU, or --expert-cache off)",
				m->be->ops->name);
	const sg_model_desc *d = &m->desc;
	const char *why = NULL;
	int64_t total = 0;
	uint64_t sb = sg_xc_slot_bytes(m, &total, &why);
	if (!sb) return sg_error(SG_ERR_UNSUPPORTED, "expert cache: %s", why ? why : "no expert stacks");
	if (slots > total) slots = total;
	if (dev && slots > 4096) { /* the device's expert kernels count at most 4096 experts */
		sg_log(SG_LOG_INFO, "expert cache: %lld slots asked, %d on the %s backend", (long long)slots, 4096, m->be->ops->name);
		slots = 4096;
	}
	if (slots < d->n_expert)
		return sg_error(SG_ERR_INVALID_ARG, "expert cache: %lld slots is fewer than one layer's %d experts (a prompt may need them all): at least %.1f MiB",
				(long long)slots, d->n_expert, (double)sb * d->n_expert / 1048576.0);
	sg_xcache *c = sg_calloc(1, sizeof *c);
	if (!c) return sg_error(SG_ERR_NOMEM, "expert cache");
	pthread_mutex_init(&c->mu, NULL);
	c->m = m;
	c->L = d->n_layer;
	c->E = d->n_expert;
	c->k = d->n_expert_used;
	c->n = c->n_max = slots;
	c->dev = dev;
	const char *pol = sg_flag_str("SARAGOSSA_EXPERT_POLICY");
	c->policy = pol && !strcasecmp(pol, "lru") ? POLICY_LRU : POLICY_FREQ;
	const char *pf = sg_flag_str("SARAGOSSA_EXPERT_PREFETCH");
	c->prefetch = pf && !strcasecmp(pf, "router") ? PF_ROUTER : pf && !strcasecmp(pf, "last") ? PF_LAST : PF_OFF;
	sg_status st = SG_OK;
	size_t LE = (size_t)c->L * (size_t)c->E;
	c->ly = sg_calloc((size_t)c->L, sizeof *c->ly);
	c->loc = sg_calloc(LE * 3, sizeof *c->loc);
	c->tab = sg_calloc(LE * 3, sizeof *c->tab);
	c->tables = sg_calloc((size_t)c->L * 3, sizeof *c->tables);
	c->where = sg_malloc(LE * sizeof *c->where);
	c->last_ids = sg_malloc((size_t)c->L * (size_t)(c->k > 0 ? c->k : 1) * sizeof *c->last_ids);
	c->slots = sg_calloc((size_t)slots, sizeof *c->slots);
	c->n_reqs = 3 * c->E + 3 * 64 + 3;
	c->reqs = sg_calloc((size_t)c->n_reqs, sizeof *c->reqs);
	c->lbuf = sg_calloc((size_t)c->E, sizeof *c->lbuf);
	c->need = sg_calloc((size_t)c->E + 64, sizeof *c->need);
	c->files = sg_calloc((size_t)m->w->n_files, sizeof *c->files);
	if (!c->ly || !c->loc || !c->tab || !c->tables || !c->where || !c->last_ids || !c->slots || !c->reqs || !c->lbuf || !c->need || !c->files) {
		cache_free(c);
		return sg_error(SG_ERR_NOMEM, "expert cache: tables for %d layers x %d experts", d->n_layer, d->n_expert);
	}
	for (size_t i = 0; i < LE; i++) c->where[i] = -1;
	for (size_t i = 0; i < (size_t)c->L * (size_t)(c->k > 0 ? c->k : 1); i++) c->last_ids[i] = -1;
	(void)layout(m, c->ly, c->loc, &why);
	for (int p = 0; p < 3; p++) {
		for (int li = 0; li < c->L; li++)
			if (c->ly[li].moe) {
				size_t cap = round_up(c->ly[li].len[p], ALIGN) + ALIGN;
				if (cap > c->part_cap[p]) c->part_cap[p] = cap;
			}
		c->part_off[p] = p ? c->part_off[p - 1] + c->part_cap[p - 1] : 0;
	}
	c->slot_bytes = c->part_off[2] + c->part_cap[2];
	if (dev) { /* the pool on the device; reads land in host staging slots first */
		for (int p = 0; p < 3; p++) {
			size_t b = dev_part(m, c->ly, p, &why);
			c->dpart_off[p] = c->dslot_bytes;
			c->dslot_bytes += b;
		}
		c->n_stage = (int)((512u << 20) / c->slot_bytes);
		if (c->n_stage < 4) c->n_stage = 4;
		if (c->n_stage > c->E + 64) c->n_stage = c->E + 64;
		c->stage_free = sg_malloc(sizeof *c->stage_free * (size_t)c->n_stage);
		c->dirty = sg_calloc((size_t)c->L, 1);
		void *stage = mmap(NULL, c->slot_bytes * (size_t)c->n_stage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		c->stage = stage == MAP_FAILED ? NULL : stage;
		int64_t pne[4] = {(int64_t)(c->dslot_bytes / 4), slots, 1, 1}, mne[4] = {c->E, c->L, 1, 1};
		if (!c->stage_free || !c->stage || !c->dirty) st = sg_error(SG_ERR_NOMEM, "expert cache: %d staging slots of %zu bytes", c->n_stage, c->slot_bytes);
		if (!st && (st = m->be->ops->tensor_alloc(m->be, SG_TYPE_I32, pne, &c->dpool)))
			st = sg_error(SG_ERR_NOMEM, "expert cache: %lld device slots of %.2f MiB (%.1f MiB): %s", (long long)slots,
				      c->dslot_bytes / 1048576.0, (double)c->dslot_bytes * (double)slots / 1048576.0, sg_last_error());
		if (!st) st = m->be->ops->tensor_alloc(m->be, SG_TYPE_I32, mne, &c->dmap);
		if (!st) st = m->be->ops->write(m->be, &c->dmap, 0, c->where, sizeof(int32_t) * LE);
		if (st) {
			cache_free(c);
			return st;
		}
		/* page-locked staging: its uploads are DMA transfers */
		if (sg_flag_bool("SARAGOSSA_EXPERT_PIN") && m->be->ops->host_pin &&
		    !m->be->ops->host_pin(m->be, c->stage, c->slot_bytes * (size_t)c->n_stage, 1))
			c->pinned = 1;
		for (int i = 0; i < c->n_stage; i++) c->stage_free[i] = i;
		c->n_stage_free = c->n_stage;
	} else {
		c->pool_bytes = c->slot_bytes * (size_t)slots;
		void *pool = mmap(NULL, c->pool_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (pool == MAP_FAILED) {
			c->pool = NULL;
			cache_free(c);
			return sg_error(SG_ERR_NOMEM, "expert cache: %lld slots of %zu bytes (%.1f MiB)", (long long)slots, (size_t)sb,
					(double)sb * (double)slots / 1048576.0);
		}
		c->pool = pool;
	}
	for (int64_t s = 0; s < slots; s++) c->slots[s].layer = c->slots[s].expert = -1;
	/* the files, opened again: the map's descriptor was closed after mapping */
	c->n_files = m->w->n_files;
	/* a GPU's pool: the page cache is the host-memory tier between the disk and its slots */
	const char *dv = sg_flag_str("SARAGOSSA_EXPERT_DIRECT");
	int want_direct = !dv || !strcasecmp(dv, "auto") ? !dev : !(!strcmp(dv, "0") || !strcasecmp(dv, "false") || !strcasecmp(dv, "off") || !strcasecmp(dv, "no"));
	for (int i = 0; i < c->n_files; i++) {
		xfile *f = &c->files[i];
		f->fd = f->dfd = -1;
	}
	c->direct = want_direct;
	for (int i = 0; i < c->n_files && !st; i++) {
		xfile *f = &c->files[i];
		int used = 0;
		for (size_t k = 0; k < LE * 3 && !used; k++) used = c->loc[k].file == i && c->ly[k / (3 * (size_t)c->E)].moe;
		if (!used) continue;
		f->path = sg_strdup(m->w->files[i].path);
		f->fd = open(m->w->files[i].path, O_RDONLY | O_CLOEXEC);
		if (f->fd < 0 || fstat(f->fd, &f->st)) {
			st = sg_error(SG_ERR_IO, "expert cache: cannot open '%s': %s", m->w->files[i].path, strerror(errno));
			break;
		}
		if ((uint64_t)f->st.st_size != m->w->files[i].size)
			st = sg_error(SG_ERR_IO, "expert cache: '%s' changed since it was mapped (%zu bytes, now %lld)", m->w->files[i].path,
				      m->w->files[i].size, (long long)f->st.st_size);
		if (want_direct) f->dfd = open(m->w->files[i].path, O_RDONLY | O_CLOEXEC | O_DIRECT);
		if (f->dfd < 0) c->direct = 0; /* a file system without O_DIRECT (tmpfs): the page cache */
	}
	if (st) {
		cache_free(c);
		return st;
	}
	c->uring = sg_flag_bool("SARAGOSSA_EXPERT_URING") && io_uring_queue_init(RING_DEPTH, &c->ring, 0) == 0;
	if (c->prefetch == PF_ROUTER) {
		int64_t ne[4] = {c->E, 1, 1, 1};
		if (m->be->ops->tensor_alloc(m->be, SG_TYPE_F32, ne, &c->logits)) c->prefetch = PF_LAST;
	}
	/* the tables, and the stacks' pages out of the map */
	for (int li = 0; li < c->L; li++) {
		if (!c->ly[li].moe) continue;
		sg_btensor *t[3] = {&m->layers[li].gate_exps, &m->layers[li].up_exps, &m->layers[li].down_exps};
		for (int p = 0; p < 3; p++) {
			sg_expert_table *tb = &c->tables[(size_t)li * 3 + (size_t)p];
			tb->n_expert = c->E;
			if (dev) {
				tb->slot = (const int32_t *)c->dmap.data + (size_t)li * (size_t)c->E;
				tb->base = (const uint8_t *)c->dpool.data + c->dpart_off[p];
				tb->stride = c->dslot_bytes;
				tb->n_slots = slots;
			} else {
				tb->data = &c->tab[((size_t)li * 3 + (size_t)p) * (size_t)c->E];
			}
			t[p]->experts = tb;
			for (int e = 0; e < c->E; e++) {
				const sg_expert_loc *lc = &c->loc[((size_t)li * 3 + (size_t)p) * (size_t)c->E + (size_t)e];
				advise_away(m->w->files[lc->file].data + lc->offset, c->ly[li].len[p]);
			}
		}
	}
	c->st.slots = c->st.slots_max = slots;
	c->st.slot_bytes = dev ? c->dslot_bytes : c->slot_bytes;
	c->st.device = dev;
	c->st.experts = total;
	c->st.direct = c->direct;
	c->st.uring = c->uring;
	c->st.policy = c->policy == POLICY_LRU ? "lru" : "freq";
	c->st.prefetch = !c->uring || c->prefetch == PF_OFF ? "off" : c->prefetch == PF_LAST ? "last" : "router";
	m->xsrc = (sg_expert_source){.fetch = fetch, .free = cache_free, .ctx = c};
	sg_log(SG_LOG_INFO, "expert cache: %lld %sslots of %.2f MiB (%.1f%% of %lld experts, %.1f MiB), %s reads%s, %s eviction, prefetch %s",
	       (long long)slots, dev ? "device " : "", c->st.slot_bytes / 1048576.0, 100.0 * (double)slots / (double)total, (long long)total,
	       (double)c->st.slot_bytes * (double)slots / 1048576.0, c->direct ? "O_DIRECT" : "buffered", c->uring ? " (io_uring)" : "", c->st.policy,
	       c->st.prefetch);
	return SG_OK;
}

int sg_xc_stats_get(const sg_model *m, sg_xc_stats *out)
{
	sg_xcache *c = cache_of(m);
	if (!c) return 0;
	pthread_mutex_lock(&c->mu);
	*out = c->st;
	out->slots = c->n;
	pthread_mutex_unlock(&c->mu);
	return 1;
}

void sg_xc_stats_reset(sg_model *m)
{
	sg_xcache *c = cache_of(m);
	if (!c) return;
	pthread_mutex_lock(&c->mu);
	c->st.lookups = c->st.hits = c->st.prefetched = c->st.prefetch_used = 0;
	c->st.reads = c->st.bytes_read = c->st.tokens = 0;
	pthread_mutex_unlock(&c->mu);
}

int64_t sg_xc_resize(sg_model *m, int64_t slots)
{
	sg_xcache *c = cache_of(m);
	if (!c) return 0;
	pthread_mutex_lock(&c->mu);
	drain(c);
	if (slots < c->E) slots = c->E;
	if (slots > c->n_max) slots = c->n_max;
	if (slots < c->n) {
		for (int64_t s = slots; s < c->n; s++) slot_clear(c, (int)s);
		/* the emptied slots' memory back to the system (an anonymous map: it reads as zeros) */
		if (c->pool) (void)madvise(c->pool + (size_t)slots * c->slot_bytes, (size_t)(c->n - slots) * c->slot_bytes, MADV_DONTNEED);
	}
	c->n = slots;
	pthread_mutex_unlock(&c->mu);
	return slots;
}

void sg_xc_stats_line(const sg_xc_stats *s, char *buf, size_t n)
{
	double hit = s->lookups ? 100.0 * (double)s->hits / (double)s->lookups : 0;
	double mbt = s->tokens ? (double)s->bytes_read / 1e6 / (double)s->tokens : 0;
	snprintf(buf, n,
		 "experts: %.1f%% hit (%llu of %llu), %.2f MB read/token (%.1f MB in %llu reads), prefetch %s %llu read %llu used, "
		 "%lld of %lld %sslots of %.2f MiB (%.1f%% of the experts), %s, %s",
		 hit, (unsigned long long)s->hits, (unsigned long long)s->lookups, mbt, (double)s->bytes_read / 1e6,
		 (unsigned long long)s->reads, s->prefetch, (unsigned long long)s->prefetched, (unsigned long long)s->prefetch_used,
		 (long long)s->slots, (long long)s->slots_max, s->device ? "device " : "", (double)s->slot_bytes / 1048576.0,
		 s->experts ? 100.0 * (double)s->slots / (double)s->experts : 0, s->policy, s->direct ? "O_DIRECT" : "buffered");
}

sg_status sg_xc_apply(sg_model *m, const sg_xc_spec *spec, int n_ctx, int64_t *slots_out)
{
	if (slots_out) *slots_out = 0;
	if (!spec || spec->mode == SG_XC_OFF) return SG_OK;
	int64_t total = 0;
	const char *why = NULL;
	uint64_t sb = sg_xc_slot_bytes(m, &total, &why);
	if (!sb) return sg_error(SG_ERR_UNSUPPORTED, "expert cache: %s", why ? why : "no expert stacks");
	int64_t slots = 0;
	if (spec->mode == SG_XC_PERCENT) {
		slots = (int64_t)floor((double)total * spec->percent / 100.0);
		if (slots < m->desc.n_expert) slots = m->desc.n_expert;
	} else if (spec->mode == SG_XC_BYTES) {
		slots = (int64_t)(spec->bytes / sb);
	} else {
		sg_plan plan;
		sg_plan_input in;
		sg_plan_input_from_model(m, n_ctx, &in);
		in.slot_bytes = sb;
		sg_plan_machine mc;
		sg_plan_machine_detect(&mc);
		uint64_t dfree = 0, dtotal = 0; /* a device's slots: the plan is for its memory */
		if (dev_slots(m) == 1 && m->be->ops->mem_info && !m->be->ops->mem_info(m->be, &dfree, &dtotal)) mc.vram = dtotal;
		sg_status st = sg_plan_make(&in, &mc, &plan);
		if (st) return st;
		/* experts left in the files at load (m->xloc) are bound now, as a plain load would */
		if (!plan.use_cache && (!m->xloc || !sg_model_bind_deferred_experts(m))) {
			sg_log(SG_LOG_INFO, "expert cache: auto: the whole model fits (%.2f GiB of %.2f GiB): experts resident",
			       plan.model_bytes / 1073741824.0, plan.limit_bytes / 1073741824.0);
			return SG_OK;
		}
		/* experts that could not be bound after all: a cache of every one of them */
		slots = plan.use_cache ? plan.slots : total;
	}
	sg_status st = sg_xc_attach(m, slots);
	if (!st && slots_out) *slots_out = cache_of(m)->n;
	return st;
}

/*
 * The CUDA backend: the sg_backend op table on one NVIDIA GPU (built with CUDA=1).
 *
 * Every op is enqueued on the backend's own stream and returns without waiting; only
 * sg_backend read / sync wait. Weights are uploaded once by tensor_bind (legacy 32-blocks and Q6_K
 * repacked so every load is 16 bytes wide; a type without a GPU kernel fails the bind with an
 * SG_ERR_UNSUPPORTED error naming it, never a silent CPU fallback).
 *
 * Graphs (one submission per decoded token): the per-token dynamic values (positions, token ids,
 * KV length derived from positions) live in device tensors, so a decode step can be recorded once
 * and replayed:
 *
 *     run the step once per-op (sizes the backend's scratch), then
 *     sg_cuda_graph_begin(be); <issue the step's ops>; sg_cuda_graph_end(be);
 *     per token: sg_backend write pos / ids (outside the capture); sg_cuda_graph_replay(be);
 *                sg_backend read the sampled id (the only wait).
 *
 * Writes and reads are not allowed while capturing. If a later per-op call grows the scratch
 * (a larger shape), the graph is stale and replay says so; capture again. SARAGOSSA_CUDA_GRAPHS=0
 * is the kill-switch the session checks (sg_cuda_graphs_enabled) to stay on the per-op path.
 */
#ifndef SG_BACKEND_CUDA_BACKEND_H
#define SG_BACKEND_CUDA_BACKEND_H

#include "backend/backend.h"
#include "base/error.h"

typedef struct sg_cuda_params {
	int device; /* CUDA device ordinal */
} sg_cuda_params;

static inline sg_cuda_params sg_cuda_default_params(void)
{
	sg_cuda_params p = {0};
	return p;
}

#if SG_CUDA
/* Creates the backend on device p->device: SG_ERR_UNSUPPORTED with the runtime's reason when no
 * GPU is usable. *out is freed with sg_backend_free. */
sg_status sg_cuda_backend_create(const sg_cuda_params *p, sg_backend **out);
/* 1 if be is a CUDA backend. */
int sg_cuda_is_backend(const sg_backend *be);
/* 1 unless SARAGOSSA_CUDA_GRAPHS=0. */
int sg_cuda_graphs_enabled(void);
/* 1 if SARAGOSSA_CUDA_GRAPHS_HYBRID=1: decode steps of hybrid layer stacks (gated delta net, gated
 * attention, shared experts) are recorded and replayed too. */
int sg_cuda_graphs_hybrid(void);
/* Starts recording the ops issued on be (a CUDA backend) into a graph. */
sg_status sg_cuda_graph_begin(sg_backend *be);
/* Ends the recording and instantiates the graph (replacing any earlier one). */
sg_status sg_cuda_graph_end(sg_backend *be);
/* Enqueues one replay of the recorded graph; does not wait. */
sg_status sg_cuda_graph_replay(sg_backend *be);
/* A recorded graph owned by its caller (several sessions can share one backend, each with its
 * own decode graph). */
typedef struct sg_cuda_graph sg_cuda_graph;
/* Ends a recording started by sg_cuda_graph_begin into a new graph *out (free with
 * sg_cuda_graph_free); the backend's own graph (sg_cuda_graph_replay) is left as it was. */
sg_status sg_cuda_graph_end_into(sg_backend *be, sg_cuda_graph **out);
/* Ends a recording and throws it away (an op failed while recording); no-op when not recording. */
void sg_cuda_graph_abort(sg_backend *be);
/* 1 if g was recorded before the backend's scratch moved (its launches would read freed memory). */
int sg_cuda_graph_stale(const sg_backend *be, const sg_cuda_graph *g);
/* Enqueues one replay of g; does not wait. Fails on a stale graph. */
sg_status sg_cuda_graph_launch(sg_backend *be, const sg_cuda_graph *g);
void sg_cuda_graph_free(sg_cuda_graph *g);
/* Device-to-device copy bandwidth in GB/s (1e9 bytes/s, counting bytes read + written) measured with
 * `bytes`-sized cudaMemcpy copies on the backend's device: the roofline a decode step is held to. */
sg_status sg_cuda_copy_bandwidth(sg_backend *be, size_t bytes, double *gbps);
/* The kernels' view of a weight tensor bound by a CUDA backend (benches and tests call the
 * launchers of cuda_kernels.h with it): SG_OK, or SG_ERR_UNSUPPORTED for a type without kernels. */
struct sg_cuw;
sg_status sg_cuda_weight_view(const sg_btensor *w, struct sg_cuw *out);
/* One row of K elements of a Q4_K, Q6_K or MLX 4-bit tensor (sg_cukt kt; MLX: the codes) between
 * the file's blocks and the planar device layout (cuda_backend.c); the device row is the file
 * row's bytes (Q6_K: rounded up to 16 by the caller). 0, or -1 for another type or K not a positive
 * multiple of 256. */
int sg_cuda_repack_kq(int kt, int64_t K, const uint8_t *file_row, uint8_t *dev_row);
int sg_cuda_unpack_kq(int kt, int64_t K, const uint8_t *dev_row, uint8_t *file_row);
/* Name, memory and capability of the backend's device: "NVIDIA H200, 139.8 GiB, sm_90". */
const char *sg_cuda_backend_device(const sg_backend *be);
#else
static inline sg_status sg_cuda_backend_create(const sg_cuda_params *p, sg_backend **out)
{
	(void)p;
	*out = 0;
	return sg_error(SG_ERR_UNSUPPORTED, "cuda: this build has no CUDA backend (rebuild with make CUDA=1)");
}
static inline int sg_cuda_graphs_enabled(void) { return 0; }
static inline int sg_cuda_graphs_hybrid(void) { return 0; }
static inline int sg_cuda_is_backend(const sg_backend *be) { (void)be; return 0; }
static inline sg_status sg_cuda_graph_begin(sg_backend *be) { (void)be; return SG_ERR_UNSUPPORTED; }
static inline sg_status sg_cuda_graph_end(sg_backend *be) { (void)be; return SG_ERR_UNSUPPORTED; }
static inline sg_status sg_cuda_graph_replay(sg_backend *be) { (void)be; return SG_ERR_UNSUPPORTED; }
static inline const char *sg_cuda_backend_device(const sg_backend *be) { (void)be; return "none"; }
typedef struct sg_cuda_graph sg_cuda_graph;
static inline sg_status sg_cuda_graph_end_into(sg_backend *be, sg_cuda_graph **out) { (void)be; *out = 0; return SG_ERR_UNSUPPORTED; }
static inline void sg_cuda_graph_abort(sg_backend *be) { (void)be; }
static inline int sg_cuda_graph_stale(const sg_backend *be, const sg_cuda_graph *g) { (void)be; (void)g; return 1; }
static inline sg_status sg_cuda_graph_launch(sg_backend *be, const sg_cuda_graph *g) { (void)be; (void)g; return SG_ERR_UNSUPPORTED; }
static inline void sg_cuda_graph_free(sg_cuda_graph *g) { (void)g; }
static inline sg_status sg_cuda_copy_bandwidth(sg_backend *be, size_t bytes, double *gbps) { (void)be; (void)bytes; *gbps = 0; return SG_ERR_UNSUPPORTED; }
#endif

#endif

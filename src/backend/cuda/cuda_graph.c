/*
 * The CUDA backend's recorded decode steps (cuda_backend.h: sg_cuda_graph_*): a stream capture
 * instantiated as a graph, tied to the scratch generation it was recorded against (a scratch that
 * moved makes it stale), replayed by one launch.
 */
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "base/alloc.h"
#include "base/error.h"

static sg_cuda_backend *as_cuda(sg_backend *be) { return sg_cuda_is_backend(be) ? (sg_cuda_backend *)be : NULL; }

sg_status sg_cuda_graph_begin(sg_backend *be)
{
	sg_cuda_backend *cb = as_cuda(be);
	if (!cb) return sg_error(SG_ERR_INVALID_ARG, "cuda graph: not a CUDA backend");
	if (cb->capturing) return sg_error(SG_ERR_INVALID_ARG, "cuda graph: already recording");
	CU_RET("graph_begin", cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeThreadLocal));
	cb->capturing = 1;
	return SG_OK;
}

sg_status sg_cuda_graph_end(sg_backend *be)
{
	sg_cuda_backend *cb = as_cuda(be);
	if (!cb || !cb->capturing) return sg_error(SG_ERR_INVALID_ARG, "cuda graph: not recording");
	cudaGraph_t g = NULL;
	cb->capturing = 0;
	CU_RET("graph_end", cudaStreamEndCapture(cb->stream, &g));
	if (cb->exec) cudaGraphExecDestroy(cb->exec);
	cb->exec = NULL;
	cudaError_t e = cudaGraphInstantiate(&cb->exec, g, 0);
	cudaGraphDestroy(g);
	if (e) return cu_fail("graph_end", (int)e);
	cb->exec_gen = cb->scratch_gen;
	return SG_OK;
}

sg_status sg_cuda_graph_replay(sg_backend *be)
{
	sg_cuda_backend *cb = as_cuda(be);
	if (!cb || !cb->exec) return sg_error(SG_ERR_INVALID_ARG, "cuda graph: nothing recorded");
	if (cb->exec_gen != cb->scratch_gen) return sg_error(SG_ERR_INVALID_ARG, "cuda graph: scratch moved since the recording; record it again");
	cb->pos_ptr = NULL;
	CU_RET("graph_replay", cudaGraphLaunch(cb->exec, cb->stream));
	return SG_OK;
}

struct sg_cuda_graph {
	cudaGraphExec_t exec;
	unsigned gen; /* the scratch generation it was recorded against */
};

sg_status sg_cuda_graph_end_into(sg_backend *be, sg_cuda_graph **out)
{
	sg_cuda_backend *cb = as_cuda(be);
	*out = NULL;
	if (!cb || !cb->capturing) return sg_error(SG_ERR_INVALID_ARG, "cuda graph: not recording");
	cudaGraph_t g = NULL;
	cb->capturing = 0;
	CU_RET("graph_end", cudaStreamEndCapture(cb->stream, &g));
	sg_cuda_graph *h = sg_calloc(1, sizeof(*h));
	if (!h) {
		cudaGraphDestroy(g);
		return sg_error(SG_ERR_NOMEM, "cuda graph: handle");
	}
	cudaError_t e = cudaGraphInstantiate(&h->exec, g, 0);
	cudaGraphDestroy(g);
	if (e) {
		sg_free(h);
		return cu_fail("graph_end", (int)e);
	}
	h->gen = cb->scratch_gen;
	*out = h;
	return SG_OK;
}

void sg_cuda_graph_abort(sg_backend *be)
{
	sg_cuda_backend *cb = as_cuda(be);
	if (!cb || !cb->capturing) return;
	cudaGraph_t g = NULL;
	cb->capturing = 0;
	if (cudaStreamEndCapture(cb->stream, &g) == cudaSuccess && g) cudaGraphDestroy(g);
	(void)cudaGetLastError(); /* clears the (non-sticky) error an invalidated capture leaves */
}

int sg_cuda_graph_stale(const sg_backend *be, const sg_cuda_graph *g)
{
	const sg_cuda_backend *cb = sg_cuda_is_backend(be) ? (const sg_cuda_backend *)be : NULL;
	return !cb || !g || g->gen != cb->scratch_gen;
}

sg_status sg_cuda_graph_launch(sg_backend *be, const sg_cuda_graph *g)
{
	sg_cuda_backend *cb = as_cuda(be);
	if (!cb || !g) return sg_error(SG_ERR_INVALID_ARG, "cuda graph: nothing recorded");
	if (g->gen != cb->scratch_gen) return sg_error(SG_ERR_INVALID_ARG, "cuda graph: scratch moved since the recording; record it again");
	cb->pos_ptr = NULL;
	CU_RET("graph_launch", cudaGraphLaunch(g->exec, cb->stream));
	return SG_OK;
}

void sg_cuda_graph_free(sg_cuda_graph *g)
{
	if (!g) return;
	cudaGraphExecDestroy(g->exec);
	sg_free(g);
}

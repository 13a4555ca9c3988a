/* runtime/cuda/graph.cu — CUDA-graph capture and replay on the backend stream
 * (cuda_backend.h); step.cu uses them for the step's runs of compute (the
 * README's "CUDA graphs" section). */
#include <stdlib.h>

#include "cuda_common.h"
#include "cuda_backend.h"

struct pg_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

int pg_cuda_graph_begin(pg_ctx *c)
{
    CUDA_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    return 0;
}

int pg_cuda_graph_end(pg_ctx *c, pg_cuda_graph **out)
{
    *out = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (e != cudaSuccess) {
        /* An illegal call during capture (a sync, a read-back, a cudaMalloc)
         * invalidates it; the error names it, the capture is over either way. */
        if (g)
            cudaGraphDestroy(g);
        return pg_cuda_fail(__FILE__, __LINE__,
                            "cudaStreamEndCapture (an op synchronised or allocated while capturing)", e);
    }
    pg_cuda_graph *pg = (pg_cuda_graph *)calloc(1, sizeof *pg);
    if (!pg) {
        cudaGraphDestroy(g);
        return PG_RT_FAIL("cannot allocate a CUDA graph handle (%zu bytes)", sizeof *pg);
    }
    pg->graph = g;
    e = cudaGraphInstantiate(&pg->exec, g, 0);
    if (e != cudaSuccess) {
        pg_cuda_graph_free(pg);
        return pg_cuda_fail(__FILE__, __LINE__, "cudaGraphInstantiate", e);
    }
    *out = pg;
    return 0;
}

int pg_cuda_graph_launch(pg_ctx *c, pg_cuda_graph *g)
{
    CUDA_CHECK(cudaGraphLaunch(g->exec, c->stream));
    return 0;
}

void pg_cuda_graph_free(pg_cuda_graph *g)
{
    if (!g)
        return;
    if (g->exec)
        cudaGraphExecDestroy(g->exec);
    if (g->graph)
        cudaGraphDestroy(g->graph);
    free(g);
}

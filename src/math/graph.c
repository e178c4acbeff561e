/* CUDA graphs of device math (blob/device.h). */
#include "blob/device.h"
#include "../core/core.h"
#include "../kernels/kernels.h"

struct blob_graph {
    void *graph; /* the capture, kept to count its nodes */
    void *exec;
};

blob_status blob_graph_begin(void *stream)
{
    if (!stream)
        return BLOB_FAIL(BLOB_EINVAL, "the default stream cannot be captured");
    BLOB_TRY(blob__require_gpu(__func__));
    /* cuBLAS may not create its handle while the stream is capturing: do it now */
    BLOB_TRY(blob__k_prepare(stream));
    return blob__be->graph_begin(stream);
}

blob_status blob_graph_end(void *stream, blob_graph **out)
{
    if (!stream)
        return BLOB_FAIL(BLOB_EINVAL, "the default stream is never captured");
    if (out)
        *out = NULL;
    BLOB_TRY(blob__require_gpu(__func__));
    blob_graph *g = out ? blob__obj_alloc(sizeof *g) : NULL;
    void *graph = NULL, *exec = NULL;
    blob_status st = blob__be->graph_end(stream, &graph, &exec); /* the capture ends either way */
    if (st != BLOB_OK || !g) {
        blob__be->graph_destroy(graph, exec);
        blob__obj_free(g);
        if (st != BLOB_OK)
            return st;
        return out ? BLOB_ENOMEM : BLOB_FAIL(BLOB_EINVAL, "out is NULL (capture ended)");
    }
    g->graph = graph;
    g->exec = exec;
    *out = g;
    return BLOB_OK;
}

blob_status blob_graph_launch(blob_graph *graph, void *stream)
{
    if (!graph)
        return BLOB_FAIL(BLOB_EINVAL, "graph is NULL");
    return blob__be->graph_launch(graph->exec, stream);
}

void blob_graph_free(blob_graph *graph)
{
    if (!graph)
        return;
    blob__be->graph_destroy(graph->graph, graph->exec);
    blob__obj_free(graph);
}

blob_status blob_graph_count_nodes(const blob_graph *graph, int64_t *kernels, int64_t *total)
{
    if (!graph || !kernels || !total)
        return BLOB_FAIL(BLOB_EINVAL, "%s is NULL",
                         !graph     ? "graph"
                         : !kernels ? "kernels"
                                    : "total");
    int64_t k = 0, h = 0, t = 0;
    BLOB_TRY(blob__be->graph_count_nodes(graph->graph, &k, &h, &t));
    *kernels = k;
    *total = t;
    return BLOB_OK;
}

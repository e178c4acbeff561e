/* CUDA graphs of device math (blob/device.h). */
#include "blob/device.h"
#include "../core/core.h"
#include "../kernels/kernels.h"

struct blob_graph {
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
    if (!stream || !out)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    *out = NULL;
    BLOB_TRY(blob__require_gpu(__func__));
    blob_graph *g = blob__obj_alloc(sizeof *g);
    void *exec = NULL;
    blob_status st = blob__be->graph_end(stream, &exec); /* ends the capture either way */
    if (st != BLOB_OK || !g) {
        blob__be->graph_destroy(exec);
        blob__obj_free(g);
        return st != BLOB_OK ? st : BLOB_ENOMEM;
    }
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
    blob__be->graph_destroy(graph->exec);
    blob__obj_free(graph);
}

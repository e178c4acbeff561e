/* Collectives on host values: blob_comm_all_reduce_host, the gather of the ranks'
 * registrations (list.c), and the decision made with them whether collectives may be
 * replayed from CUDA graphs. Each copies its values through the device and waits. */
#include <stdio.h>
#include <string.h>

#include "blob/alloc.h"
#include "../core/core.h"
#include "watch.h"

/* Copy in (in_bytes) to the device, run the collective there, bring out_bytes back to
 * out, and wait. An all-gather puts this rank's in at rank * in_bytes of out. */
static blob_status host_collective(blob_comm *c, const char *func, const char *name, bool gather,
                                   const void *in, size_t in_bytes, void *out, size_t out_bytes,
                                   blob_comm_op op)
{
    BLOB_TRY(blob__comm_usable(c, func));
    void *host = NULL, *dev = NULL;
    size_t at = gather ? (size_t)c->rank * in_bytes : 0;
    blob_status st = blob_place_alloc(blob_place_pinned(), out_bytes, c->stream, &host);
    if (st == BLOB_OK)
        st = blob_place_alloc(blob_place_device(c->device), out_bytes, c->stream, &dev);
    if (st == BLOB_OK) {
        memcpy(host, in, in_bytes);
        st = blob__be->copy_async((char *)dev + at, host, in_bytes, BLOB__H2D, c->stream);
    }
    if (st != BLOB_OK) {
        blob_place_free(blob_place_pinned(), host);
        blob_place_free(blob_place_device(c->device), dev);
        return blob__comm_poison(c, func, st, name);
    }
    char what[96];
    pthread_mutex_lock(&c->mu);
    snprintf(what, sizeof what, "%s #%llu", name, (unsigned long long)blob__comm_next_seq(c));
    if (c->failure != BLOB_OK)
        st = blob__comm_failed(c, func);
    else if (gather)
        st = c->ccl->all_gather(c->handle, (char *)dev + at, dev, in_bytes, c->stream);
    else
        st = c->ccl->all_reduce(c->handle, dev, in_bytes / sizeof(double), BLOB_FLOAT64, op,
                                c->stream);
    if (st != BLOB_OK && c->failure == BLOB_OK)
        st = blob__comm_fail_last(c, func, st, what);
    if (st == BLOB_OK)
        st = blob__comm_settle(c, func, what, BLOB__COMM_PEER_HINT);
    pthread_mutex_unlock(&c->mu);
    if (st == BLOB_OK) {
        st = blob__be->copy_async(host, dev, out_bytes, BLOB__D2H, c->stream);
        if (st != BLOB_OK)
            st = blob__comm_poison(c, func, st, what);
    }
    if (st == BLOB_OK) {
        pthread_mutex_lock(&c->mu);
        st = blob__comm_track(c, func, what);
        pthread_mutex_unlock(&c->mu);
    }
    if (st == BLOB_OK)
        st = blob_comm_synchronize(c);
    if (st == BLOB_OK)
        memcpy(out, host, out_bytes);
    /* after a failure the stream still runs the queued copies: both blocks are freed
     * once they have (the allocator waits for the stream) */
    blob_place_free(blob_place_pinned(), host);
    blob_place_free(blob_place_device(c->device), dev);
    return st;
}

blob_status blob__comm_gather_host(blob_comm *c, const char *func, const void *in, size_t bytes,
                                   void *out)
{
    return host_collective(c, func, "all_gather", true, in, bytes, out, bytes * (size_t)c->size,
                           BLOB_COMM_SUM);
}

/* Capture an all-reduce of one element on c's stream and look for host functions in
 * the graph: *ok when there are none. A graph that cannot be made leaves *ok false; a
 * failed collective call brings c down. */
static blob_status probe_capture(blob_comm *c, const char *func, bool *ok)
{
    *ok = false;
    void *buf = NULL, *graph = NULL, *exec = NULL;
    if (blob_place_alloc(blob_place_device(c->device), sizeof(float), c->stream, &buf) != BLOB_OK)
        return BLOB_OK;
    blob_status st = BLOB_OK;
    if (blob__be->graph_begin(c->stream) == BLOB_OK) {
        st = blob__comm_all_reduce_launch(c, func, "the replay probe", buf, 1, BLOB_FLOAT32,
                                          BLOB_COMM_SUM);
        int64_t kernels = 0, host = 0, total = 0;
        if (blob__be->graph_end(c->stream, &graph, &exec) == BLOB_OK &&
            blob__be->graph_count_nodes(graph, &kernels, &host, &total) == BLOB_OK)
            *ok = st == BLOB_OK && kernels > 0 && host == 0;
        blob__be->graph_destroy(graph, exec);
    }
    blob_place_free(blob_place_device(c->device), buf);
    return st;
}

blob_status blob__comm_decide_replay(blob_comm *c, const char *func)
{
    if (c->replay_decided)
        return BLOB_OK;
    bool ok = false;
    if (c->ccl->graphs)
        BLOB_TRY(probe_capture(c, func, &ok));
    double refusing = !ok; /* summed: the ranks that cannot replay */
    BLOB_TRY(host_collective(c, func, "replay_decision", false, &refusing, sizeof refusing,
                             &refusing, sizeof refusing, BLOB_COMM_SUM));
    c->replay = refusing == 0;
    c->replay_decided = true;
    return BLOB_OK;
}

blob_status blob_comm_all_reduce_host(blob_comm *c, double *values, int n, blob_comm_op op)
{
    if (!c || !values)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    blob_status st = BLOB_OK;
    if (n < 1)
        st = BLOB_FAIL(BLOB_EINVAL, "%d values", n);
    else if (op != BLOB_COMM_SUM && op != BLOB_COMM_MEAN)
        st = BLOB_FAIL(BLOB_EINVAL, "unknown op %d", (int)op);
    if (c->size == 1)
        return st; /* the sum and the mean of one rank's values are those values */
    if (st != BLOB_OK)
        return blob__comm_poison(c, __func__, st, "the arguments check");
    return host_collective(c, __func__, "all_reduce_host", false, values,
                           (size_t)n * sizeof(double), values, (size_t)n * sizeof(double), op);
}

/* Internal: the collective library under comm.h, behind a table as the device backend
 * is: NCCL (ccl_nccl.c), nothing in builds without it (ccl_none.c), or a fake in the
 * tests. Never installed.
 *
 * Handles are opaque communicators of one rank. Every call is nonblocking: it queues
 * work on a stream, or starts a join, and returns; it may leave the handle in progress,
 * and then state() must report it ready before the next call on the handle or before
 * anything depends on the queued work. Calls on one handle are serialised by the
 * caller (the communicator's lock); different handles may be used from different
 * threads at once. */
#ifndef BLOB_COMM_CCL_H
#define BLOB_COMM_CCL_H

#include <stdbool.h>
#include <stddef.h>

#include "blob/comm.h"

typedef struct blob__ccl {
    const char *name;
    bool multi_rank; /* can join more than one rank */
    bool graphs;     /* its collectives can be captured in a CUDA graph and replayed */
    blob_status (*new_id)(blob_comm_id *out);
    /* Start joining as `rank` of `world` on the current device. On success *handle is
     * set even while the join goes on. */
    blob_status (*init)(void **handle, const blob_comm_id *id, int world, int rank);
    /* Start joining all n ranks of a group in this process: handles[i] on devices[i]
     * (the current device is changed). On failure no handle is left. */
    blob_status (*init_local)(void **handles, int n, const int *devices);
    /* *ready: the last call (or the join) has finished. An error means the handle is
     * broken (a peer failed, a transport error): abort it. */
    blob_status (*state)(void *handle, bool *ready);
    /* In place on count elements of dtype (or BLOB__CCL_BFLOAT16) at buf. */
    blob_status (*all_reduce)(void *handle, void *buf, size_t count, blob_dtype dtype,
                              blob_comm_op op, void *stream);
    blob_status (*broadcast)(void *handle, void *buf, size_t count, blob_dtype dtype, int root,
                             void *stream);
    /* recv holds world * bytes: rank r's send at r * bytes. */
    blob_status (*all_gather)(void *handle, const void *send, void *recv, size_t bytes,
                              void *stream);
    /* Bracket several calls on one handle so that they start as one. */
    blob_status (*group_begin)(void);
    blob_status (*group_end)(void);
    /* Start flushing before destroy; poll state() until ready. */
    blob_status (*finalize)(void *handle);
    /* Release a finalized handle; blocks only briefly. */
    void (*destroy)(void *handle);
    /* Stop everything queued or running on the handle (kernels exit, streams move on)
     * and release it. Safe in any state, from any thread, once no other call on the
     * handle is in progress or can follow. It may wait until every CUDA graph holding a
     * collective of the handle is destroyed. */
    void (*abort)(void *handle);
} blob__ccl;

/* The entries of a table whose functions are named P_<entry>: P_new_id, P_init, ...,
 * P_abort; the table gives its name and flags. */
#define BLOB__CCL_ENTRIES(P)                                                                  \
    .new_id = P##_new_id, .init = P##_init, .init_local = P##_init_local, .state = P##_state, \
    .all_reduce = P##_all_reduce, .broadcast = P##_broadcast, .all_gather = P##_all_gather,   \
    .group_begin = P##_group_begin, .group_end = P##_group_end, .finalize = P##_finalize,     \
    .destroy = P##_destroy, .abort = P##_abort

/* The element type of collectives on bfloat16 (not a blob dtype). */
#define BLOB__CCL_BFLOAT16 ((blob_dtype)0x100)

/* The table this build uses by default (NCCL, or "none"). */
const blob__ccl *blob__ccl_default(void);

/* The table in use: read when a communicator is created. */
const blob__ccl *blob__ccl_current(void);

/* Switch tables (NULL: the default), for tests; no communicator may be alive. */
void blob__ccl_install(const blob__ccl *ccl);

#endif

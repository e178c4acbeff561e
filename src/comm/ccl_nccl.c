/* The collective library of builds with NCCL: nonblocking parents (a join, a split or
 * a launch returns at once and is polled), so that no call on them can wait for a dead
 * peer, and blocking children split from them for the all-reduces of every step (a
 * launch on a nonblocking communicator starts a thread in NCCL: tens of microseconds).
 *
 * A child's kernels run on a stream of its own of the device's highest priority,
 * ordered after and before the caller's stream by two events: the block scheduler then
 * starts them as soon as SMs free up, instead of after every kernel the caller (backward)
 * queued before them, so that the all-reduce overlaps backward. Only NCCL's kernels run
 * on that stream, so it goes with the child. */
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "../core/core.h"
#include "ccl.h"

typedef struct {
    ncclComm_t comm; /* a child's is set by NCCL when the split completes */
    cudaStream_t stream; /* children only (see above) */
    cudaEvent_t in, out;
} nccl_handle;

/* NCCL's detail of its last failure (process-wide in the versions we use). */
static blob_status nccl_fail(ncclResult_t r, const char *call, const char *func)
{
    const char *last = ncclGetLastError(NULL);
    return blob__fail(BLOB_ECOMM, func, "%s failed: %s (%s)%s%s", call,
                      ncclGetErrorString(r), r == ncclRemoteError ? "a peer failed or left"
                      : r == ncclSystemError ? "system or network error" : "NCCL error",
                      last && *last ? ": " : "", last ? last : "");
}

/* A call that may still be in progress has started fine. */
#define NCCL_TRY(expr)                                               \
    do {                                                             \
        ncclResult_t nccl_r_ = (expr);                               \
        if (nccl_r_ != ncclSuccess && nccl_r_ != ncclInProgress)     \
            return nccl_fail(nccl_r_, #expr, __func__);              \
    } while (0)

#define CUDA_TRY(expr)                                               \
    do {                                                             \
        cudaError_t cuda_e_ = (expr);                                \
        if (cuda_e_ != cudaSuccess)                                  \
            return blob__cuda_fail(cuda_e_, #expr, __func__);        \
    } while (0)

static ncclComm_t comm_of(void *handle)
{
    return ((nccl_handle *)handle)->comm;
}

static ncclDataType_t nccl_type(blob_dtype dtype)
{
    return dtype == BLOB_FLOAT64 ? ncclFloat64 : ncclFloat32;
}

/* A handle's memory and a child's stream and events (after its communicator). */
static void release(nccl_handle *h)
{
    if (h->in)
        (void)cudaEventDestroy(h->in);
    if (h->out)
        (void)cudaEventDestroy(h->out);
    if (h->stream)
        (void)cudaStreamDestroy(h->stream); /* released once the aborted kernels exit */
    (void)cudaGetLastError();
    blob__obj_free(h);
}

static blob_status nccl_new_id(blob_comm_id *out)
{
    ncclUniqueId u;
    NCCL_TRY(ncclGetUniqueId(&u));
    memcpy(out->bytes, u.internal, sizeof out->bytes);
    return BLOB_OK;
}

static ncclConfig_t nonblocking_config(void)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    return cfg;
}

static blob_status nccl_init(void **handle, const blob_comm_id *id, int world, int rank)
{
    nccl_handle *h = blob__obj_alloc(sizeof *h);
    if (!h)
        return BLOB_ENOMEM;
    ncclUniqueId u;
    memcpy(u.internal, id->bytes, sizeof u.internal);
    ncclConfig_t cfg = nonblocking_config();
    ncclResult_t r = ncclCommInitRankConfig(&h->comm, world, u, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        if (h->comm)
            (void)ncclCommAbort(h->comm);
        release(h);
        return nccl_fail(r, "ncclCommInitRankConfig", __func__);
    }
    *handle = h;
    return BLOB_OK;
}

static blob_status nccl_init_local(void **handles, int n, const int *devices)
{
    ncclUniqueId u;
    NCCL_TRY(ncclGetUniqueId(&u));
    ncclConfig_t cfg = nonblocking_config();
    blob_status st = BLOB_OK;
    for (int i = 0; i < n; i++) {
        handles[i] = blob__obj_alloc(sizeof(nccl_handle));
        if (!handles[i])
            st = BLOB_ENOMEM;
    }
    bool grouped = false;
    if (st == BLOB_OK) {
        ncclResult_t r = ncclGroupStart();
        grouped = r == ncclSuccess;
        if (!grouped)
            st = nccl_fail(r, "ncclGroupStart", __func__);
    }
    for (int i = 0; i < n && st == BLOB_OK; i++) {
        cudaError_t e = cudaSetDevice(devices[i]);
        if (e != cudaSuccess) {
            st = blob__cuda_fail(e, "cudaSetDevice", __func__);
            break;
        }
        nccl_handle *h = handles[i];
        ncclResult_t r = ncclCommInitRankConfig(&h->comm, n, u, i, &cfg);
        if (r != ncclSuccess && r != ncclInProgress)
            st = nccl_fail(r, "ncclCommInitRankConfig", __func__);
    }
    if (grouped) {
        ncclResult_t r = ncclGroupEnd();
        if (st == BLOB_OK && r != ncclSuccess && r != ncclInProgress)
            st = nccl_fail(r, "ncclGroupEnd", __func__);
    }
    if (st != BLOB_OK)
        for (int i = 0; i < n; i++) {
            if (handles[i]) {
                (void)ncclCommAbort(comm_of(handles[i]));
                release(handles[i]);
            }
            handles[i] = NULL;
        }
    return st;
}

/* A child's stream and events, on its parent's device (made current). */
static blob_status child_stream(nccl_handle *h, ncclComm_t parent)
{
    int device, least, greatest;
    NCCL_TRY(ncclCommCuDevice(parent, &device));
    CUDA_TRY(cudaSetDevice(device));
    CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_TRY(cudaStreamCreateWithPriority(&h->stream, cudaStreamNonBlocking, greatest));
    CUDA_TRY(cudaEventCreateWithFlags(&h->in, cudaEventDisableTiming));
    CUDA_TRY(cudaEventCreateWithFlags(&h->out, cudaEventDisableTiming));
    return BLOB_OK;
}

/* The child is a blocking communicator of the parent's ranks, in the same order,
 * sharing no resources with it (so that either may be aborted alone). The handle is
 * there at once; NCCL sets its communicator when the split completes. The split on a
 * nonblocking parent returns at once, so that one thread may split the parents of
 * several ranks one after the other. */
static blob_status nccl_split(void *parent, void **child)
{
    ncclComm_t from = comm_of(parent);
    nccl_handle *h = blob__obj_alloc(sizeof *h);
    if (!h)
        return BLOB_ENOMEM;
    int saved = -1;
    blob_status st = BLOB_OK;
    cudaError_t e = cudaGetDevice(&saved);
    if (e != cudaSuccess)
        st = blob__cuda_fail(e, "cudaGetDevice", __func__);
    if (st == BLOB_OK) {
        st = child_stream(h, from);
        (void)cudaSetDevice(saved);
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    cfg.splitShare = 0;
    int rank = 0;
    ncclResult_t r = ncclSuccess;
    if (st == BLOB_OK && (r = ncclCommUserRank(from, &rank)) == ncclSuccess)
        r = ncclCommSplit(from, 0, rank, &h->comm, &cfg);
    if (st == BLOB_OK && r != ncclSuccess && r != ncclInProgress)
        st = nccl_fail(r, "ncclCommSplit", __func__);
    if (st != BLOB_OK) {
        release(h); /* the split never started, or failed before it ran */
        return st;
    }
    *child = h;
    return BLOB_OK;
}

static blob_status nccl_state(void *handle, bool *ready)
{
    ncclComm_t comm = comm_of(handle);
    if (!comm)
        return blob__fail(BLOB_ECOMM, __func__, "NCCL made no communicator");
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &async);
    if (r != ncclSuccess)
        return nccl_fail(r, "ncclCommGetAsyncError", __func__);
    if (async != ncclSuccess && async != ncclInProgress)
        return nccl_fail(async, "NCCL", __func__);
    *ready = async == ncclSuccess;
    return BLOB_OK;
}

static blob_status nccl_all_reduce(void *handle, void *buf, size_t count, blob_dtype dtype,
                                   blob_comm_op op, void *stream)
{
    nccl_handle *h = handle;
    cudaStream_t caller = (cudaStream_t)stream, on = h->stream ? h->stream : caller;
    if (h->stream) {
        CUDA_TRY(cudaEventRecord(h->in, caller));
        CUDA_TRY(cudaStreamWaitEvent(h->stream, h->in, 0));
    }
    NCCL_TRY(ncclAllReduce(buf, buf, count, nccl_type(dtype),
                           op == BLOB_COMM_MEAN ? ncclAvg : ncclSum, h->comm, on));
    if (h->stream) {
        CUDA_TRY(cudaEventRecord(h->out, h->stream));
        CUDA_TRY(cudaStreamWaitEvent(caller, h->out, 0));
    }
    return BLOB_OK;
}

static blob_status nccl_broadcast(void *handle, void *buf, size_t count, blob_dtype dtype,
                                  int root, void *stream)
{
    NCCL_TRY(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, comm_of(handle),
                           (cudaStream_t)stream));
    return BLOB_OK;
}

static blob_status nccl_all_gather(void *handle, const void *send, void *recv, size_t bytes,
                                   void *stream)
{
    NCCL_TRY(ncclAllGather(send, recv, bytes, ncclUint8, comm_of(handle),
                           (cudaStream_t)stream));
    return BLOB_OK;
}

static blob_status nccl_group_begin(void)
{
    NCCL_TRY(ncclGroupStart());
    return BLOB_OK;
}

static blob_status nccl_group_end(void)
{
    NCCL_TRY(ncclGroupEnd());
    return BLOB_OK;
}

static blob_status nccl_finalize(void *handle)
{
    NCCL_TRY(ncclCommFinalize(comm_of(handle)));
    return BLOB_OK;
}

static void nccl_destroy(void *handle)
{
    (void)ncclCommDestroy(comm_of(handle));
    release(handle);
}

static void nccl_abort(void *handle)
{
    (void)ncclCommAbort(comm_of(handle)); /* a child's may be NULL: nothing to do */
    release(handle);
}

static const blob__ccl nccl_table = {
    .name = "nccl",
    .multi_rank = true,
    .new_id = nccl_new_id,
    .init = nccl_init,
    .init_local = nccl_init_local,
    .split = nccl_split,
    .state = nccl_state,
    .all_reduce = nccl_all_reduce,
    .broadcast = nccl_broadcast,
    .all_gather = nccl_all_gather,
    .group_begin = nccl_group_begin,
    .group_end = nccl_group_end,
    .finalize = nccl_finalize,
    .destroy = nccl_destroy,
    .abort = nccl_abort,
};

const blob__ccl *blob__ccl_default(void)
{
    return &nccl_table;
}

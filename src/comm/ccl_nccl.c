/* The collective library of builds with NCCL: nonblocking communicators (a join or a
 * launch returns at once and is polled), so that no call can wait for a dead peer. */
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "../core/core.h"
#include "ccl.h"

/* NCCL's detail of its last failure (process-wide in the versions we use). */
static blob_status nccl_fail(ncclResult_t r, const char *call, const char *func)
{
    const char *last = ncclGetLastError(NULL);
    return blob__fail(BLOB_ECOMM, func, "%s failed: %s (%s)%s%s", call, ncclGetErrorString(r),
                      r == ncclRemoteError   ? "a peer failed or left"
                      : r == ncclSystemError ? "system or network error"
                                             : "NCCL error",
                      last && *last ? ": " : "", last ? last : "");
}

/* A call that may still be in progress has started fine. */
#define NCCL_TRY(expr)                                           \
    do {                                                         \
        ncclResult_t nccl_r_ = (expr);                           \
        if (nccl_r_ != ncclSuccess && nccl_r_ != ncclInProgress) \
            return nccl_fail(nccl_r_, #expr, __func__);          \
    } while (0)

static ncclDataType_t nccl_type(blob_dtype dtype)
{
    return dtype == BLOB_FLOAT64         ? ncclFloat64
           : dtype == BLOB__CCL_BFLOAT16 ? ncclBfloat16
                                         : ncclFloat32;
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
    ncclUniqueId u;
    memcpy(u.internal, id->bytes, sizeof u.internal);
    ncclConfig_t cfg = nonblocking_config();
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&comm, world, u, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        if (comm)
            (void)ncclCommAbort(comm);
        return nccl_fail(r, "ncclCommInitRankConfig", __func__);
    }
    *handle = comm;
    return BLOB_OK;
}

static blob_status nccl_init_local(void **handles, int n, const int *devices)
{
    ncclUniqueId u;
    NCCL_TRY(ncclGetUniqueId(&u));
    ncclConfig_t cfg = nonblocking_config();
    for (int i = 0; i < n; i++)
        handles[i] = NULL;
    NCCL_TRY(ncclGroupStart());
    blob_status st = BLOB_OK;
    for (int i = 0; i < n && st == BLOB_OK; i++) {
        cudaError_t e = cudaSetDevice(devices[i]);
        if (e != cudaSuccess) {
            st = blob__cuda_fail(e, "cudaSetDevice", __func__);
            break;
        }
        ncclComm_t comm = NULL;
        ncclResult_t r = ncclCommInitRankConfig(&comm, n, u, i, &cfg);
        handles[i] = comm;
        if (r != ncclSuccess && r != ncclInProgress)
            st = nccl_fail(r, "ncclCommInitRankConfig", __func__);
    }
    ncclResult_t r = ncclGroupEnd();
    if (st == BLOB_OK && r != ncclSuccess && r != ncclInProgress)
        st = nccl_fail(r, "ncclGroupEnd", __func__);
    if (st != BLOB_OK)
        for (int i = 0; i < n; i++) {
            if (handles[i])
                (void)ncclCommAbort((ncclComm_t)handles[i]);
            handles[i] = NULL;
        }
    return st;
}

static blob_status nccl_state(void *handle, bool *ready)
{
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError((ncclComm_t)handle, &async);
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
    NCCL_TRY(ncclAllReduce(buf, buf, count, nccl_type(dtype),
                           op == BLOB_COMM_MEAN ? ncclAvg : ncclSum, (ncclComm_t)handle,
                           (cudaStream_t)stream));
    return BLOB_OK;
}

static blob_status nccl_broadcast(void *handle, void *buf, size_t count, blob_dtype dtype, int root,
                                  void *stream)
{
    NCCL_TRY(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, (ncclComm_t)handle,
                           (cudaStream_t)stream));
    return BLOB_OK;
}

static blob_status nccl_all_gather(void *handle, const void *send, void *recv, size_t bytes,
                                   void *stream)
{
    NCCL_TRY(ncclAllGather(send, recv, bytes, ncclUint8, (ncclComm_t)handle, (cudaStream_t)stream));
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
    NCCL_TRY(ncclCommFinalize((ncclComm_t)handle));
    return BLOB_OK;
}

static void nccl_destroy(void *handle) { (void)ncclCommDestroy((ncclComm_t)handle); }

static void nccl_abort(void *handle) { (void)ncclCommAbort((ncclComm_t)handle); }

static const blob__ccl nccl_table = {
    .name = "nccl",
    .multi_rank = true,
    .graphs = true,
    BLOB__CCL_ENTRIES(nccl),
};

const blob__ccl *blob__ccl_default(void) { return &nccl_table; }

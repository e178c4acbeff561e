/* The collective library of builds without NCCL: only 1-rank communicators, which
 * never call it; everything else says what is missing. */
#include "../core/core.h"
#include "ccl.h"

static blob_status no_nccl(const char *what)
{
    return blob__fail(BLOB_ENOTSUP, what,
                      "built without NCCL: only 1-rank communicators work (build with CUDA "
                      "and NCCL for more; see docs/distributed.md)");
}

static blob_status none_new_id(blob_comm_id *out)
{
    (void)out;
    return no_nccl("blob_comm_id_new");
}

static blob_status none_init(void **handle, const blob_comm_id *id, int world, int rank)
{
    (void)handle, (void)id, (void)world, (void)rank;
    return no_nccl("blob_comm_create");
}

static blob_status none_init_local(void **handles, int n, const int *devices)
{
    (void)handles, (void)n, (void)devices;
    return no_nccl("blob_comm_create_local");
}

static blob_status none_state(void *handle, bool *ready)
{
    (void)handle;
    *ready = true;
    return BLOB_OK;
}

static blob_status none_all_reduce(void *handle, void *buf, size_t count, blob_dtype dtype,
                                   blob_comm_op op, void *stream)
{
    (void)handle, (void)buf, (void)count, (void)dtype, (void)op, (void)stream;
    return no_nccl("all_reduce");
}

static blob_status none_broadcast(void *handle, void *buf, size_t count, blob_dtype dtype, int root,
                                  void *stream)
{
    (void)handle, (void)buf, (void)count, (void)dtype, (void)root, (void)stream;
    return no_nccl("broadcast");
}

static blob_status none_all_gather(void *handle, const void *send, void *recv, size_t bytes,
                                   void *stream)
{
    (void)handle, (void)send, (void)recv, (void)bytes, (void)stream;
    return no_nccl("all_gather");
}

static blob_status none_group_begin(void) { return BLOB_OK; }
static blob_status none_group_end(void) { return BLOB_OK; }
static blob_status none_finalize(void *handle)
{
    (void)handle;
    return BLOB_OK;
}
static void none_destroy(void *handle) { (void)handle; }
static void none_abort(void *handle) { (void)handle; }

static const blob__ccl none_table = {
    .name = "none",
    .multi_rank = false,
    BLOB__CCL_ENTRIES(none),
};

const blob__ccl *blob__ccl_default(void) { return &none_table; }

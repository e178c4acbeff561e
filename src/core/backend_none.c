/* The device backend of builds without CUDA: no GPU, every device entry says so. */
#include "blob/device.h"
#include "core.h"

static blob_status no_gpu(const char *what)
{
    return blob__fail(BLOB_ENODEV, what, "built without CUDA");
}

static int none_device_count(void) { return 0; }
static blob_status none_get_device(int *device)
{
    (void)device;
    return no_gpu("get_device");
}
static blob_status none_set_device(int device)
{
    (void)device;
    return no_gpu("set_device");
}
static blob_status none_alloc(size_t bytes, void **out)
{
    (void)bytes;
    (void)out;
    return no_gpu("alloc");
}
static void none_free(void *p) { (void)p; }
static blob_status none_pointer_device(const void *p, int *device)
{
    (void)p;
    *device = BLOB__HOST_MEMORY;
    return BLOB_OK;
}
static blob_status none_copy_async(void *dst, const void *src, size_t bytes, blob__copy_kind kind,
                                   void *stream)
{
    (void)dst, (void)src, (void)bytes, (void)kind, (void)stream;
    return no_gpu("copy_async");
}
static blob_status none_memset_async(void *dst, int value, size_t bytes, void *stream)
{
    (void)dst, (void)value, (void)bytes, (void)stream;
    return no_gpu("memset");
}
static blob_status none_device_synchronize(void) { return no_gpu("synchronize"); }
static blob_status none_event_create(void **out)
{
    (void)out;
    return no_gpu("create");
}
static blob_status none_stream_create(void **out, int priority)
{
    (void)out, (void)priority;
    return no_gpu("create");
}
static blob_status none_on(void *obj)
{
    (void)obj;
    return no_gpu("synchronize");
}
static blob_status none_event_elapsed(void *from, void *to, double *ms)
{
    (void)from, (void)to, (void)ms;
    return no_gpu("event_elapsed");
}
static blob_status none_stream_wait_event(void *stream, void *event)
{
    (void)stream, (void)event;
    return no_gpu("stream_wait_event");
}
static blob_status none_event_record(void *event, void *stream)
{
    (void)event, (void)stream;
    return no_gpu("event_record");
}
static blob_status none_event_query(void *event, bool *done)
{
    (void)event, (void)done;
    return no_gpu("event_query");
}

static blob_status none_graph_end(void *stream, void **graph, void **exec)
{
    (void)stream, (void)graph, (void)exec;
    return no_gpu("graph_end");
}
static blob_status none_graph_launch(void *exec, void *stream)
{
    (void)exec, (void)stream;
    return no_gpu("graph_launch");
}
static void none_graph_destroy(void *graph, void *exec) { (void)graph, (void)exec; }
static blob_status none_graph_count_nodes(void *graph, int64_t *kernels, int64_t *host,
                                          int64_t *total)
{
    (void)graph, (void)kernels, (void)host, (void)total;
    return no_gpu("graph_count_nodes");
}

/* The entries that share a body, by the table's names. */
#define none_host_alloc            blob__system_host_alloc
#define none_host_free             blob__system_host_free
#define none_pinned_alloc          none_alloc
#define none_pinned_free           none_free
#define none_device_alloc          none_alloc
#define none_device_free           none_free
#define none_stream_destroy        none_free
#define none_stream_synchronize    none_on
#define none_event_destroy         none_free
#define none_event_record_external none_event_record
#define none_event_synchronize     none_on
#define none_event_create_timed    none_event_create
#define none_graph_begin           none_on

static const blob__backend none_backend = {.name = "none", BLOB__BACKEND_ENTRIES(none)};

const blob__backend *blob__backend_default(void) { return &none_backend; }

bool blob_built_with_cuda(void) { return false; }

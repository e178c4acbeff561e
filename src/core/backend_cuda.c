/* The default device backend: plain C over the CUDA runtime API. */
#include <pthread.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "blob/device.h"
#include "core.h"

blob_status blob__cuda_fail(int err, const char *call, const char *func)
{
    cudaError_t e = (cudaError_t)err;
    (void)cudaGetLastError();
    blob_status st = BLOB_ECUDA;
    if (e == cudaErrorMemoryAllocation)
        st = BLOB_EDEVMEM;
    else if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
        st = BLOB_ENODEV;
    return blob__fail(st, func, "%s failed: %s (%s)", call, cudaGetErrorName(e),
                      cudaGetErrorString(e));
}

static int device_count_value;
static pthread_once_t device_count_once = PTHREAD_ONCE_INIT;

/* Any error (no driver, no device, driver too old) means no GPU. */
static void probe_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    device_count_value = n;
}

static int cuda_device_count(void)
{
    pthread_once(&device_count_once, probe_device_count);
    return device_count_value;
}

static blob_status cuda_get_device(int *device)
{
    CUDA_TRY(cudaGetDevice(device));
    return BLOB_OK;
}

static blob_status cuda_set_device(int device)
{
    CUDA_TRY(cudaSetDevice(device));
    return BLOB_OK;
}

static blob_status cuda_pinned_alloc(size_t bytes, void **out)
{
    cudaError_t err = cudaMallocHost(out, bytes);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return BLOB_FAIL(BLOB_ENOMEM, "cudaMallocHost(%zu) failed: %s", bytes,
                         cudaGetErrorName(err));
    }
    CUDA_TRY(err);
    return BLOB_OK;
}

static void cuda_pinned_free(void *p)
{
    if (p && cudaFreeHost(p) != cudaSuccess)
        (void)cudaGetLastError();
}

static blob_status cuda_device_alloc(size_t bytes, void **out)
{
    CUDA_TRY(cudaMalloc(out, bytes));
    return BLOB_OK;
}

static blob_status cuda_pointer_device(const void *p, int *device)
{
    struct cudaPointerAttributes a;
    CUDA_TRY(cudaPointerGetAttributes(&a, p));
    *device = a.type == cudaMemoryTypeDevice    ? a.device
              : a.type == cudaMemoryTypeManaged ? BLOB__MANAGED_MEMORY
                                                : BLOB__HOST_MEMORY;
    return BLOB_OK;
}

static void cuda_device_free(void *p)
{
    if (p && cudaFree(p) != cudaSuccess)
        (void)cudaGetLastError();
}

static enum cudaMemcpyKind copy_kind(blob__copy_kind kind)
{
    switch (kind) {
    case BLOB__H2D: return cudaMemcpyHostToDevice;
    case BLOB__D2H:
    case BLOB__D2H_PINNED: return cudaMemcpyDeviceToHost;
    case BLOB__D2D: return cudaMemcpyDeviceToDevice;
    }
    return cudaMemcpyDefault;
}

/* Copies into pinned host memory up to this size run as a kernel (backend_cuda_copy.cu);
 * it returns the launch's cudaError_t. */
#define PINNED_KERNEL_BYTES 16384
int blob__cuda_copy_to_pinned(void *dst, const void *src, size_t bytes, void *stream);

static blob_status cuda_copy_async(void *dst, const void *src, size_t bytes, blob__copy_kind kind,
                                   void *stream)
{
    if (kind == BLOB__D2H_PINNED && bytes && bytes <= PINNED_KERNEL_BYTES) {
        CUDA_TRY((cudaError_t)blob__cuda_copy_to_pinned(dst, src, bytes, stream));
        return BLOB_OK;
    }
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, copy_kind(kind), (cudaStream_t)stream));
    return BLOB_OK;
}

static blob_status cuda_memset_async(void *dst, int value, size_t bytes, void *stream)
{
    CUDA_TRY(cudaMemsetAsync(dst, value, bytes, (cudaStream_t)stream));
    return BLOB_OK;
}

static blob_status cuda_device_synchronize(void)
{
    CUDA_TRY(cudaDeviceSynchronize());
    return BLOB_OK;
}

static blob_status cuda_stream_create(void **out, int priority)
{
    int least, greatest; /* CUDA counts down: greatest is the most urgent, e.g. -5 */
    CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    const int cuda_priority = least - priority < greatest ? greatest : least - priority;
    cudaStream_t s;
    CUDA_TRY(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, cuda_priority));
    *out = s;
    return BLOB_OK;
}

static void cuda_stream_destroy(void *stream)
{
    if (stream && cudaStreamDestroy((cudaStream_t)stream) != cudaSuccess)
        (void)cudaGetLastError();
}

static blob_status cuda_stream_synchronize(void *stream)
{
    CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream));
    return BLOB_OK;
}

static blob_status cuda_stream_wait_event(void *stream, void *event)
{
    CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
    return BLOB_OK;
}

static blob_status cuda_event_create(void **out)
{
    cudaEvent_t e;
    CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *out = e;
    return BLOB_OK;
}

static blob_status cuda_event_create_timed(void **out)
{
    cudaEvent_t e;
    CUDA_TRY(cudaEventCreate(&e));
    *out = e;
    return BLOB_OK;
}

static blob_status cuda_event_elapsed(void *from, void *to, double *ms)
{
    float f;
    CUDA_TRY(cudaEventElapsedTime(&f, (cudaEvent_t)from, (cudaEvent_t)to));
    *ms = f;
    return BLOB_OK;
}

static void cuda_event_destroy(void *event)
{
    if (event && cudaEventDestroy((cudaEvent_t)event) != cudaSuccess)
        (void)cudaGetLastError();
}

static blob_status cuda_event_record(void *event, void *stream)
{
    CUDA_TRY(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
    return BLOB_OK;
}

/* The external flag is for captures only: elsewhere CUDA refuses it. */
static blob_status cuda_event_record_external(void *event, void *stream)
{
    enum cudaStreamCaptureStatus capture;
    CUDA_TRY(cudaStreamIsCapturing((cudaStream_t)stream, &capture));
    if (capture != cudaStreamCaptureStatusActive)
        return cuda_event_record(event, stream);
    CUDA_TRY(cudaEventRecordWithFlags((cudaEvent_t)event, (cudaStream_t)stream,
                                      cudaEventRecordExternal));
    return BLOB_OK;
}

static blob_status cuda_event_query(void *event, bool *done)
{
    cudaError_t err = cudaEventQuery((cudaEvent_t)event);
    if (err == cudaErrorNotReady) {
        (void)cudaGetLastError();
        *done = false;
        return BLOB_OK;
    }
    CUDA_TRY(err);
    *done = true;
    return BLOB_OK;
}

static blob_status cuda_event_synchronize(void *event)
{
    CUDA_TRY(cudaEventSynchronize((cudaEvent_t)event));
    return BLOB_OK;
}

static blob_status cuda_graph_begin(void *stream)
{
    CUDA_TRY(cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal));
    return BLOB_OK;
}

static blob_status cuda_graph_end(void *stream, void **graph, void **exec)
{
    cudaGraph_t g;
    CUDA_TRY(cudaStreamEndCapture((cudaStream_t)stream, &g));
    cudaGraphExec_t e;
    /* each kernel at the priority of the stream it was captured from */
    cudaError_t err = cudaGraphInstantiate(&e, g, cudaGraphInstantiateFlagUseNodePriority);
    if (err != cudaSuccess)
        (void)cudaGraphDestroy(g);
    CUDA_TRY(err);
    *graph = g;
    *exec = e;
    return BLOB_OK;
}

static blob_status cuda_graph_launch(void *exec, void *stream)
{
    CUDA_TRY(cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)stream));
    return BLOB_OK;
}

static void cuda_graph_destroy(void *graph, void *exec)
{
    if (exec && cudaGraphExecDestroy((cudaGraphExec_t)exec) != cudaSuccess)
        (void)cudaGetLastError();
    if (graph && cudaGraphDestroy((cudaGraph_t)graph) != cudaSuccess)
        (void)cudaGetLastError();
}

static blob_status cuda_graph_count_nodes(void *graph, int64_t *kernels, int64_t *host,
                                          int64_t *total)
{
    size_t n = 0;
    CUDA_TRY(cudaGraphGetNodes((cudaGraph_t)graph, NULL, &n));
    cudaGraphNode_t *nodes = n ? malloc(n * sizeof *nodes) : NULL;
    if (n && !nodes)
        return BLOB_FAIL(BLOB_ENOMEM, "no host memory for %zu graph nodes", n);
    cudaError_t err = n ? cudaGraphGetNodes((cudaGraph_t)graph, nodes, &n) : cudaSuccess;
    blob_status st =
        err == cudaSuccess ? BLOB_OK : blob__cuda_fail(err, "cudaGraphGetNodes", __func__);
    for (size_t i = 0; i < n && st == BLOB_OK; i++) {
        enum cudaGraphNodeType type;
        cudaGraph_t child;
        if ((err = cudaGraphNodeGetType(nodes[i], &type)) != cudaSuccess) {
            st = blob__cuda_fail(err, "cudaGraphNodeGetType", __func__);
        } else if (type != cudaGraphNodeTypeGraph) {
            *kernels += type == cudaGraphNodeTypeKernel;
            *host += type == cudaGraphNodeTypeHost;
            *total += 1;
        } else if ((err = cudaGraphChildGraphNodeGetGraph(nodes[i], &child)) != cudaSuccess) {
            st = blob__cuda_fail(err, "cudaGraphChildGraphNodeGetGraph", __func__);
        } else {
            st = cuda_graph_count_nodes(child, kernels, host, total);
        }
    }
    free(nodes);
    return st;
}

/* Pageable host memory is malloc's, as in the "no GPU" table. */
#define cuda_host_alloc blob__system_host_alloc
#define cuda_host_free  blob__system_host_free

static const blob__backend cuda_backend = {.name = "cuda", BLOB__BACKEND_ENTRIES(cuda)};

const blob__backend *blob__backend_default(void) { return &cuda_backend; }

bool blob_built_with_cuda(void) { return true; }

/* DLPack export and import over the public blob and syncedmem API. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "blob/dlpack.h"
#include "blob/device.h"
#include "../core/core.h"
#include "../syncedmem/syncedmem_internal.h"

/* An exported tensor: the DLPack struct first (the consumer holds a pointer to it), the
 * reference it keeps on the block, and its shape and strides. */
typedef struct {
    DLManagedTensor tensor;
    blob_syncedmem *mem;
    int64_t dims[]; /* shape, then strides: ndim of each */
} exported;

static void exported_delete(DLManagedTensor *t)
{
    exported *e = t->manager_ctx;
    blob_syncedmem_free(e->mem);
    blob__obj_free(e);
}

#ifdef BLOB_DLPACK_VERSIONED
/* The same for DLPack 1.0's versioned struct. */
typedef struct {
    DLManagedTensorVersioned tensor;
    blob_syncedmem *mem;
    int64_t dims[];
} exported_versioned;

static void exported_versioned_delete(DLManagedTensorVersioned *t)
{
    exported_versioned *e = t->manager_ctx;
    blob_syncedmem_free(e->mem);
    blob__obj_free(e);
}
#endif

/* Make `device` current until restore_device(*prev); *prev < 0 when nothing changed. */
static blob_status enter_device(int device, int *prev)
{
    *prev = -1;
    if (device < 0)
        return BLOB_OK;
    int cur;
    BLOB_TRY(blob__current_device(&cur));
    if (cur == device)
        return BLOB_OK;
    BLOB_TRY(blob_device_set(device));
    *prev = cur;
    return BLOB_OK;
}

static void restore_device(int prev)
{
    if (prev >= 0)
        (void)blob_device_set(prev);
}

/* Bring the side up to date (on `stream` for the device side) and return its pointer. */
static blob_status access_side(blob_syncedmem *mem, bool gpu, bool writable, void *stream,
                               void **ptr)
{
    if (!gpu)
        return writable ? blob_syncedmem_mutable_cpu_data(mem, ptr)
                        : blob_syncedmem_cpu_data(mem, (const void **)ptr);
    void *prev = blob__stream_enter(stream);
    blob_status st = writable ? blob_syncedmem_mutable_gpu_data(mem, ptr)
                              : blob_syncedmem_gpu_data(mem, (const void **)ptr);
    blob__stream_leave(prev);
    return st;
}

/* What an export describes: b's side brought up to date and referenced by mem, and the
 * tensor over it (export_make points its shape and strides at the export's block). */
typedef struct {
    blob_syncedmem *mem;
    DLTensor t;
} export_parts;

/* The checks of an export's arguments (blob_to_dlpack's contract). */
static blob_status export_check(const blob *b, blob_part part, blob_dlpack_side side,
                                unsigned flags)
{
    if (!b)
        return BLOB_FAIL(BLOB_EINVAL, "blob is NULL");
    if (part != BLOB_PART_DATA && part != BLOB_PART_DIFF)
        return BLOB_FAIL(BLOB_EINVAL, "bad part %d", (int)part);
    if (side != BLOB_DLPACK_HOST && side != BLOB_DLPACK_DEVICE)
        return BLOB_FAIL(BLOB_EINVAL, "bad side %d", (int)side);
    if (flags & ~(unsigned)(BLOB_DLPACK_WRITABLE | BLOB_DLPACK_CUDA_HOST | BLOB_DLPACK_UNORDERED))
        return BLOB_FAIL(BLOB_EINVAL, "unknown flags 0x%x", flags);
    if (side == BLOB_DLPACK_DEVICE && blob_device(b) < 0)
        return BLOB_FAIL(BLOB_ENODEV, "blob is host-only: it has no device side");
    return BLOB_OK;
}

/* Each dtype's DLPack type code and bits (1 lane). */
static const struct {
    blob_dtype dtype;
    uint8_t code, bits;
} DTYPES[] = {{BLOB_FLOAT32, kDLFloat, 32},   {BLOB_FLOAT64, kDLFloat, 64},
              {BLOB_BFLOAT16, kDLBfloat, 16}, {BLOB_FLOAT16, kDLFloat, 16},
              {BLOB_INT32, kDLInt, 32},       {BLOB_INT64, kDLInt, 64},
              {BLOB_UINT8, kDLUInt, 8}};

/* The access of a checked export; on success the block is retained in parts->mem. */
static blob_status export_begin(blob *b, blob_part part, blob_dlpack_side side, unsigned flags,
                                void *stream, export_parts *parts)
{
    bool gpu = side == BLOB_DLPACK_DEVICE;
    int device = blob_device(b);
    if (flags & BLOB_DLPACK_UNORDERED)
        stream = blob_stream_get();
    blob_syncedmem *mem = part == BLOB_PART_DATA ? blob_data_mem(b) : blob_diff_mem(b);
    void *ptr = NULL;
    int prev;
    BLOB_TRY(enter_device(device, &prev));
    blob_status st = access_side(mem, gpu, flags & BLOB_DLPACK_WRITABLE, stream, &ptr);
    restore_device(prev);
    BLOB_TRY(st);
    blob_syncedmem_retain(mem);
    parts->mem = mem;
    DLTensor *t = &parts->t;
    t->data = ptr;
    if (gpu)
        t->device = (DLDevice){kDLCUDA, device};
    else if ((flags & BLOB_DLPACK_CUDA_HOST) && blob_syncedmem_host_pinned(mem))
        t->device = (DLDevice){kDLCUDAHost, 0};
    else
        t->device = (DLDevice){kDLCPU, 0};
    t->ndim = blob_num_axes(b);
    for (size_t i = 0; i < sizeof DTYPES / sizeof *DTYPES; i++)
        if (DTYPES[i].dtype == blob_get_dtype(b))
            t->dtype = (DLDataType){DTYPES[i].code, DTYPES[i].bits, 1};
    t->byte_offset = 0;
    return BLOB_OK;
}

/* b's shape and its compact row-major strides into dims (2 * ndim), pointed at by t. */
static void export_dims(const blob *b, DLTensor *t, int64_t *dims)
{
    int ndim = t->ndim;
    int64_t *shape = dims, *strides = dims + ndim, stride = 1;
    memcpy(shape, blob_shape(b), (size_t)ndim * sizeof(int64_t));
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = stride;
        stride *= shape[i] ? shape[i] : 1; /* bounded by the count: no overflow */
    }
    t->shape = shape;
    t->strides = strides;
}

/* An export's checks, its block of dims_at bytes followed by b's shape and strides (the
 * tensor struct first, freed again on failure), and the access: parts->t then points at
 * those dims. */
static blob_status export_make(blob *b, blob_part part, blob_dlpack_side side, unsigned flags,
                               void *stream, size_t dims_at, void **block, export_parts *parts)
{
    BLOB_TRY(export_check(b, part, side, flags));
    int ndim = blob_num_axes(b);
    char *p = blob__obj_alloc(dims_at + 2 * (size_t)ndim * sizeof(int64_t));
    if (!p)
        return BLOB_ENOMEM;
    blob_status st = export_begin(b, part, side, flags, stream, parts);
    if (st != BLOB_OK) {
        blob__obj_free(p);
        return st;
    }
    export_dims(b, &parts->t, (int64_t *)(p + dims_at));
    *block = p;
    return BLOB_OK;
}

blob_status blob_to_dlpack(blob *b, blob_part part, blob_dlpack_side side, unsigned flags,
                           void *stream, DLManagedTensor **out)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    *out = NULL;
    void *block;
    export_parts parts;
    BLOB_TRY(export_make(b, part, side, flags, stream, offsetof(exported, dims), &block, &parts));
    exported *e = block;
    e->mem = parts.mem;
    e->tensor.dl_tensor = parts.t;
    e->tensor.manager_ctx = e;
    e->tensor.deleter = exported_delete;
    *out = &e->tensor;
    return BLOB_OK;
}

#ifdef BLOB_DLPACK_VERSIONED
blob_status blob_to_dlpack_versioned(blob *b, blob_part part, blob_dlpack_side side, unsigned flags,
                                     void *stream, DLManagedTensorVersioned **out)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    *out = NULL;
    void *block;
    export_parts parts;
    BLOB_TRY(export_make(b, part, side, flags, stream, offsetof(exported_versioned, dims), &block,
                         &parts));
    exported_versioned *e = block;
    e->mem = parts.mem;
    e->tensor.version = (DLPackVersion){DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    e->tensor.dl_tensor = parts.t;
    e->tensor.flags = flags & BLOB_DLPACK_WRITABLE ? 0 : DLPACK_FLAG_BITMASK_READ_ONLY;
    e->tensor.manager_ctx = e;
    e->tensor.deleter = exported_versioned_delete;
    *out = &e->tensor;
    return BLOB_OK;
}
#endif

static void release_tensor(void *ctx) { blob_dlpack_delete(ctx); }

void blob_dlpack_delete(DLManagedTensor *t)
{
    if (t && t->deleter)
        t->deleter(t);
}

/* The import's helpers report their failures under its name, func. */
#define IMPORT_FAIL(status, ...) blob__fail((status), func, __VA_ARGS__)

static blob_status dtype_of(const char *func, DLDataType d, blob_dtype *out)
{
    for (size_t i = 0; i < sizeof DTYPES / sizeof *DTYPES; i++)
        if (d.code == DTYPES[i].code && d.bits == DTYPES[i].bits && d.lanes == 1) {
            *out = DTYPES[i].dtype;
            return BLOB_OK;
        }
    return IMPORT_FAIL(BLOB_EINVAL,
                       "dtype code %u, %u bits, %u lanes: only float32, float64, "
                       "bfloat16, float16, int32, int64 and uint8 with 1 lane",
                       (unsigned)d.code, (unsigned)d.bits, (unsigned)d.lanes);
}

/* The dims are >= 0 and the strides (if given) describe a C-contiguous tensor; *empty
 * says whether a dim is 0. */
static blob_status check_layout(const char *func, const DLTensor *t, bool *empty)
{
    *empty = false;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return IMPORT_FAIL(BLOB_EINVAL, "dim %d is negative (%lld)", i, (long long)t->shape[i]);
        *empty |= t->shape[i] == 0;
    }
    if (!t->strides || *empty)
        return BLOB_OK;
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != expect)
            return IMPORT_FAIL(BLOB_EINVAL,
                               "not C-contiguous: axis %d has stride %lld, "
                               "compact row-major needs %lld",
                               i, (long long)t->strides[i], (long long)expect);
        if (__builtin_mul_overflow(expect, t->shape[i], &expect))
            return IMPORT_FAIL(BLOB_EOVERFLOW, "element count overflows at axis %d", i);
    }
    return BLOB_OK;
}

/* Where the tensor lives: *gpu for kDLCUDA (on *device), else host memory. */
static blob_status place_of(const char *func, DLDevice d, bool *gpu, int *device)
{
    switch ((int)d.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
        if (d.device_id != 0)
            return IMPORT_FAIL(BLOB_EINVAL, "host memory with device_id %d (must be 0)",
                               d.device_id);
        *gpu = false;
        return BLOB_OK;
    case kDLCUDA: {
        int n = blob_device_count();
        if (n == 0)
            return IMPORT_FAIL(BLOB_ENODEV, "tensor on CUDA device %d, but no GPU is usable",
                               d.device_id);
        if (d.device_id < 0 || d.device_id >= n)
            return IMPORT_FAIL(BLOB_ERANGE, "tensor on CUDA device %d, %d present", d.device_id, n);
        *gpu = true;
        *device = d.device_id;
        return BLOB_OK;
    }
    }
    return IMPORT_FAIL(BLOB_EINVAL, "device type %d: only kDLCPU, kDLCUDAHost and kDLCUDA",
                       (int)d.device_type);
}

/* t's data is memory of GPU `device` (BLOB__HOST_MEMORY: host memory), as its device
 * says, or managed memory: a tensor that names the wrong place would fault in the
 * library's kernels or copies. */
static blob_status check_memory(const char *func, const DLTensor *t, int device)
{
    if (!t->data || blob_device_count() == 0) /* no GPU: no memory but the host's */
        return BLOB_OK;
    int actual;
    BLOB_TRY(blob__be->pointer_device(t->data, &actual));
    if (actual == device || actual == BLOB__MANAGED_MEMORY)
        return BLOB_OK;
    if (actual == BLOB__HOST_MEMORY)
        return IMPORT_FAIL(BLOB_EINVAL, "data is host memory, but the tensor says CUDA device %d",
                           device);
    if (device < 0)
        return IMPORT_FAIL(BLOB_EINVAL,
                           "data is memory of GPU %d, but the tensor says host "
                           "memory",
                           actual);
    return IMPORT_FAIL(BLOB_EINVAL, "data is memory of GPU %d, but the tensor says CUDA device %d",
                       actual, device);
}

/* Whether t, a tensor of one of this library's exports, names a side of the block mem
 * that the export holds, as it stands: its device side on the block's GPU for kDLCUDA,
 * else its host side. Its memory is then where it says, and needs no question to the
 * driver (about 0.3 us, most of a round trip). */
static bool known_place(const DLTensor *t, const blob_syncedmem *mem)
{
    const bool gpu = t->device.device_type == kDLCUDA;
    if (gpu && t->device.device_id != blob_syncedmem_device(mem))
        return false;
    const void *side = blob__syncedmem_side(mem, gpu);
    return side && t->data == side;
}

/* A blob borrowing t's memory, release(ctx) called when the last reference goes
 * (blob_from_dlpack's contract, for either struct); `known`: known_place holds. */
static blob_status import_tensor(const char *func, blob **out, const DLTensor *t, int host_device,
                                 bool known, blob_release_fn release, void *ctx)
{
    blob_dtype dtype = BLOB_FLOAT32;
    BLOB_TRY(dtype_of(func, t->dtype, &dtype));
    size_t elem = blob_dtype_size(dtype);
    if (t->ndim < 0 || t->ndim > BLOB_MAX_AXES)
        return IMPORT_FAIL(BLOB_EINVAL, "ndim %d, at most %d allowed", t->ndim, BLOB_MAX_AXES);
    if (t->ndim > 0 && !t->shape)
        return IMPORT_FAIL(BLOB_EINVAL, "shape is NULL");
    bool gpu = false;
    int device = host_device;
    BLOB_TRY(place_of(func, t->device, &gpu, &device));
    if (!known)
        BLOB_TRY(check_memory(func, t, gpu ? device : BLOB__HOST_MEMORY));
    if (t->byte_offset % elem)
        return IMPORT_FAIL(BLOB_EINVAL,
                           "byte_offset %llu is not a multiple of the element "
                           "size %zu",
                           (unsigned long long)t->byte_offset, elem);
    uintptr_t addr = (uintptr_t)t->data;
    if (t->byte_offset > UINTPTR_MAX - addr)
        return IMPORT_FAIL(BLOB_EINVAL, "byte_offset %llu overflows the address",
                           (unsigned long long)t->byte_offset);
    addr += (uintptr_t)t->byte_offset;
    if (addr % elem)
        return IMPORT_FAIL(BLOB_EINVAL, "data + byte_offset is not aligned to %zu bytes", elem);
    bool empty;
    BLOB_TRY(check_layout(func, t, &empty));
    if (!t->data && !empty)
        return IMPORT_FAIL(BLOB_EINVAL, "data is NULL");

    blob *b;
    BLOB_TRY(blob_create(&b, dtype, device, t->ndim, t->shape));
    size_t bytes = (size_t)blob_count(b) * elem;
    void *data = t->data ? (char *)t->data + t->byte_offset : NULL;
    blob_status st;
    if (gpu) {
        int prev;
        st = enter_device(device, &prev);
        if (st == BLOB_OK) {
            st = blob_syncedmem_set_gpu_data_release(blob_data_mem(b), data, bytes, release, ctx);
            restore_device(prev);
        }
    } else {
        st = blob_syncedmem_set_cpu_data_release(blob_data_mem(b), data, bytes, release, ctx);
    }
    if (st != BLOB_OK) {
        blob_free(b);
        return st;
    }
    *out = b;
    return BLOB_OK;
}

blob_status blob_from_dlpack(blob **out, DLManagedTensor *tensor, int host_device)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    *out = NULL;
    if (!tensor)
        return BLOB_FAIL(BLOB_EINVAL, "tensor is NULL");
    const exported *e = tensor->deleter == exported_delete ? tensor->manager_ctx : NULL;
    bool known = e && known_place(&tensor->dl_tensor, e->mem);
    return import_tensor(__func__, out, &tensor->dl_tensor, host_device, known, release_tensor,
                         tensor);
}

#ifdef BLOB_DLPACK_VERSIONED
static void release_versioned(void *ctx) { blob_dlpack_versioned_delete(ctx); }

void blob_dlpack_versioned_delete(DLManagedTensorVersioned *t)
{
    if (t && t->deleter)
        t->deleter(t);
}

blob_status blob_from_dlpack_versioned(blob **out, DLManagedTensorVersioned *tensor,
                                       int host_device)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    *out = NULL;
    if (!tensor)
        return BLOB_FAIL(BLOB_EINVAL, "tensor is NULL");
    if (tensor->version.major != DLPACK_MAJOR_VERSION)
        return BLOB_FAIL(BLOB_EINVAL, "DLPack version %u.%u: this library reads %d.x",
                         tensor->version.major, tensor->version.minor, DLPACK_MAJOR_VERSION);
    if (tensor->flags & DLPACK_FLAG_BITMASK_READ_ONLY)
        return BLOB_FAIL(BLOB_EINVAL, "the tensor is read-only, and a blob's data is writable");
    const exported_versioned *e =
        tensor->deleter == exported_versioned_delete ? tensor->manager_ctx : NULL;
    bool known = e && known_place(&tensor->dl_tensor, e->mem);
    return import_tensor(__func__, out, &tensor->dl_tensor, host_device, known, release_versioned,
                         tensor);
}
#endif

/* Shape, reshape, data/diff blocks, borrowing and sharing. */
#include <stdio.h>
#include <string.h>

#include "../core/core.h"
#include "../syncedmem/syncedmem_internal.h"
#include "blob_impl.h"

blob_status blob__shape_count(const char *func, blob_dtype dtype, int num_axes,
                              const int64_t *shape, int64_t *count)
{
    size_t elem = blob_dtype_size(dtype);
    if (!elem)
        return blob__fail(BLOB_EINVAL, func, "bad dtype %d", (int)dtype);
    if (num_axes < 0 || num_axes > BLOB_MAX_AXES)
        return blob__fail(BLOB_EINVAL, func, "%d axes, at most %d allowed", num_axes,
                          BLOB_MAX_AXES);
    if (num_axes > 0 && !shape)
        return blob__fail(BLOB_EINVAL, func, "shape is NULL");
    int64_t n = 1;
    for (int i = 0; i < num_axes; i++)
        if (shape[i] < 0)
            return blob__fail(BLOB_EINVAL, func, "dim %d is negative (%lld)", i,
                              (long long)shape[i]);
    /* The product of the non-zero dims must fit (count * elem included) even when a zero
     * dim makes the count 0: every sub-range product (blob_count_range) stays defined. */
    int64_t limit = INT64_MAX / (int64_t)elem;
    bool empty = false;
    for (int i = 0; i < num_axes; i++) {
        if (shape[i] == 0) {
            empty = true;
            continue;
        }
        if (n > limit / shape[i])
            return blob__fail(BLOB_EOVERFLOW, func, "element count overflows at axis %d", i);
        n *= shape[i];
    }
    *count = empty ? 0 : n;
    return BLOB_OK;
}

static size_t bytes_of(const blob *b, int64_t count)
{
    return (size_t)count * blob_dtype_size(b->dtype);
}

int64_t blob__mem_capacity(const blob *b, const blob_syncedmem *mem)
{
    return (int64_t)(blob_syncedmem_size(mem) / blob_dtype_size(b->dtype));
}

void blob__commit(blob *b, int num_axes, const int64_t *shape, int64_t count, blob_syncedmem *data,
                  blob_syncedmem *diff)
{
    blob_syncedmem *old_data = b->data, *old_diff = b->diff;
    b->data = data;
    b->diff = diff;
    blob_syncedmem_free(old_data);
    blob_syncedmem_free(old_diff);
    if (shape != b->shape && num_axes > 0)
        memmove(b->shape, shape, (size_t)num_axes * sizeof *shape);
    b->num_axes = num_axes;
    b->count = count;
}

blob_status blob_create(blob **out, blob_dtype dtype, int device, int num_axes,
                        const int64_t *shape)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    *out = NULL;
    int64_t count;
    BLOB_TRY(blob__shape_count(__func__, dtype, num_axes, shape, &count));
    size_t bytes = (size_t)count * blob_dtype_size(dtype);
    blob_syncedmem *data = NULL, *diff = NULL;
    blob *b = blob__obj_alloc(sizeof *b);
    if (!b)
        return BLOB_ENOMEM;
    blob_status st = blob_syncedmem_create(&data, bytes, device);
    if (st == BLOB_OK)
        st = blob_syncedmem_create(&diff, bytes, blob_syncedmem_device(data));
    if (st != BLOB_OK) {
        blob_syncedmem_free(data);
        blob__obj_free(b);
        return st;
    }
    b->dtype = dtype;
    b->device = blob_syncedmem_device(data);
    blob__commit(b, num_axes, shape, count, data, diff);
    *out = b;
    return BLOB_OK;
}

void blob_free(blob *b)
{
    if (!b)
        return;
    blob_syncedmem_free(b->data);
    blob_syncedmem_free(b->diff);
    blob__obj_free(b);
}

blob_status blob__block_for(const blob *b, blob_syncedmem *mem, int64_t count, blob_syncedmem **out)
{
    if (blob__mem_capacity(b, mem) >= count) {
        blob_syncedmem_retain(mem);
        *out = mem;
        return BLOB_OK;
    }
    return blob_syncedmem_create(out, bytes_of(b, count), b->device);
}

blob_status blob_reshape(blob *b, int num_axes, const int64_t *shape)
{
    if (!b)
        return BLOB_FAIL(BLOB_EINVAL, "blob is NULL");
    int64_t count;
    BLOB_TRY(blob__shape_count(__func__, b->dtype, num_axes, shape, &count));
    blob_syncedmem *data, *diff;
    BLOB_TRY(blob__block_for(b, b->data, count, &data));
    blob_status st = blob__block_for(b, b->diff, count, &diff);
    if (st != BLOB_OK) {
        blob_syncedmem_free(data);
        return st;
    }
    blob__commit(b, num_axes, shape, count, data, diff);
    return BLOB_OK;
}

blob_status blob_reshape_like(blob *b, const blob *other)
{
    if (!b || !other)
        return BLOB_FAIL(BLOB_EINVAL, "blob is NULL");
    return blob_reshape(b, other->num_axes, other->shape);
}

/* A query: for NULL, the detail is recorded and the neutral value returned. */
#define BLOB__QUERY(type, name, neutral, expr) \
    BLOB__QUERY_FN(type, blob_##name, blob, b, "blob", neutral, expr)
BLOB__QUERY(blob_dtype, get_dtype, BLOB_DTYPE_NONE, b->dtype)
BLOB__QUERY(int, device, BLOB_HOST_ONLY, b->device)
BLOB__QUERY(int, num_axes, 0, b->num_axes)
BLOB__QUERY(int64_t, count, 0, b->count)
BLOB__QUERY(const int64_t *, shape, NULL, b->shape)
BLOB__QUERY(blob_syncedmem *, data_mem, NULL, b->data)
BLOB__QUERY(blob_syncedmem *, diff_mem, NULL, b->diff)
#undef BLOB__QUERY

int64_t blob_capacity(const blob *b)
{
    if (!b) {
        BLOB_FAIL(BLOB_EINVAL, "blob is NULL");
        return 0;
    }
    int64_t data = blob__mem_capacity(b, b->data);
    int64_t diff = blob__mem_capacity(b, b->diff);
    return data < diff ? data : diff;
}

blob_status blob_canonical_axis(const blob *b, int axis, int *out)
{
    if (!b || !out)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    if (axis < -b->num_axes || axis >= b->num_axes)
        return BLOB_FAIL(BLOB_ERANGE, "axis %d not in [-%d, %d)", axis, b->num_axes, b->num_axes);
    *out = axis < 0 ? axis + b->num_axes : axis;
    return BLOB_OK;
}

blob_status blob_shape_at(const blob *b, int axis, int64_t *out)
{
    int i;
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    BLOB_TRY(blob_canonical_axis(b, axis, &i));
    *out = b->shape[i];
    return BLOB_OK;
}

blob_status blob_count_range(const blob *b, int start, int end, int64_t *out)
{
    if (!b || !out)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    if (start < 0 || start > end || end > b->num_axes)
        return BLOB_FAIL(BLOB_ERANGE, "range [%d, %d) not within [0, %d]", start, end, b->num_axes);
    int64_t n = 1;
    for (int i = start; i < end; i++)
        n *= b->shape[i]; /* cannot overflow: blob__shape_count bounds every product */
    *out = n;
    return BLOB_OK;
}

blob_status blob_shape_string(const blob *b, char *buf, size_t size)
{
    if (!b || !buf)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    size_t used = 0;
    for (int i = 0; i <= b->num_axes; i++) {
        int n = i < b->num_axes ? snprintf(buf + used, size - used, "%lld ", (long long)b->shape[i])
                                : snprintf(buf + used, size - used, "(%lld)", (long long)b->count);
        if (n < 0 || (size_t)n >= size - used) {
            if (size)
                buf[0] = '\0';
            return BLOB_FAIL(BLOB_ERANGE, "buffer of %zu bytes too small", size);
        }
        used += (size_t)n;
    }
    return BLOB_OK;
}

blob_status blob_legacy_shape(const blob *b, int64_t *num, int64_t *channels, int64_t *height,
                              int64_t *width)
{
    if (!b)
        return BLOB_FAIL(BLOB_EINVAL, "blob is NULL");
    if (b->num_axes > 4)
        return BLOB_FAIL(BLOB_ESTATE, "legacy shape needs <= 4 axes, blob has %d", b->num_axes);
    int64_t *outs[4] = {num, channels, height, width};
    for (int i = 0; i < 4; i++)
        if (outs[i])
            *outs[i] = i < b->num_axes ? b->shape[i] : 1;
    return BLOB_OK;
}

blob_status blob_offset(const blob *b, int n, const int64_t *indices, int64_t *out)
{
    if (!b || !out || (n > 0 && !indices))
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    if (n < 0 || n > b->num_axes)
        return BLOB_FAIL(BLOB_ERANGE, "%d indices for %d axes", n, b->num_axes);
    int64_t off = 0;
    for (int i = 0; i < b->num_axes; i++) {
        int64_t idx = i < n ? indices[i] : 0;
        if (idx < 0 || idx >= b->shape[i]) /* a missing index is 0, which a 0 dim lacks */
            return BLOB_FAIL(BLOB_ERANGE, "index %lld of axis %d not in [0, %lld)", (long long)idx,
                             i, (long long)b->shape[i]);
        off = off * b->shape[i] + idx;
    }
    *out = off;
    return BLOB_OK;
}

#define BLOB__ACCESSOR(name, part, call, ptr_type)         \
    blob_status blob_##name(blob *b, ptr_type out)         \
    {                                                      \
        if (!b)                                            \
            return BLOB_FAIL(BLOB_EINVAL, "blob is NULL"); \
        return blob_syncedmem_##call(b->part, out);        \
    }
BLOB__ACCESSOR(cpu_data, data, cpu_data, const void **)
BLOB__ACCESSOR(mutable_cpu_data, data, mutable_cpu_data, void **)
BLOB__ACCESSOR(gpu_data, data, gpu_data, const void **)
BLOB__ACCESSOR(mutable_gpu_data, data, mutable_gpu_data, void **)
BLOB__ACCESSOR(cpu_diff, diff, cpu_data, const void **)
BLOB__ACCESSOR(mutable_cpu_diff, diff, mutable_cpu_data, void **)
BLOB__ACCESSOR(gpu_diff, diff, gpu_data, const void **)
BLOB__ACCESSOR(mutable_gpu_diff, diff, mutable_gpu_data, void **)
#undef BLOB__ACCESSOR

typedef blob_status (*borrow_fn)(blob_syncedmem *, void *, size_t);

/* Borrow into data; a shared or larger-than-count block is first replaced by an
 * exact-size block of this blob's own, so other blobs and the size check are unaffected. */
static blob_status set_data(const char *func, blob *b, void *data, size_t bytes, borrow_fn borrow)
{
    if (!b)
        return blob__fail(BLOB_EINVAL, func, "blob is NULL");
    size_t need = bytes_of(b, b->count);
    if (bytes < need)
        return blob__fail(BLOB_EINVAL, func, "borrowed memory holds %zu bytes, blob needs %zu",
                          bytes, need);
    if (!blob__syncedmem_shared(b->data) && blob_syncedmem_size(b->data) == need)
        return borrow(b->data, data, bytes);
    blob_syncedmem *mem;
    BLOB_TRY(blob_syncedmem_create(&mem, need, b->device));
    blob_status st = borrow(mem, data, bytes);
    if (st != BLOB_OK) {
        blob_syncedmem_free(mem);
        return st;
    }
    blob_syncedmem_retain(b->diff);
    blob__commit(b, b->num_axes, b->shape, b->count, mem, b->diff);
    return BLOB_OK;
}

blob_status blob_set_cpu_data(blob *b, void *data, size_t bytes)
{
    return set_data(__func__, b, data, bytes, blob_syncedmem_set_cpu_data);
}

blob_status blob_set_gpu_data(blob *b, void *data, size_t bytes)
{
    return set_data(__func__, b, data, bytes, blob_syncedmem_set_gpu_data);
}

/* Point b's data (diff) at other's block. */
static blob_status share(const char *func, blob *b, blob *other, bool diff)
{
    if (!b || !other)
        return blob__fail(BLOB_EINVAL, func, "blob is NULL");
    if (b->count != other->count)
        return blob__fail(BLOB_ESHAPE, func, "counts differ (%lld vs %lld)", (long long)b->count,
                          (long long)other->count);
    if (b->dtype != other->dtype || b->device != other->device)
        return blob__fail(BLOB_EINVAL, func, "dtype or device differ");
    blob_syncedmem *mem = diff ? other->diff : other->data;
    if (mem == (diff ? b->diff : b->data))
        return BLOB_OK;
    blob_syncedmem *keep = diff ? b->data : b->diff;
    blob_syncedmem_retain(mem);
    blob_syncedmem_retain(keep);
    blob__commit(b, b->num_axes, b->shape, b->count, diff ? keep : mem, diff ? mem : keep);
    return BLOB_OK;
}

blob_status blob_share_data(blob *b, blob *other) { return share(__func__, b, other, false); }

blob_status blob_share_diff(blob *b, blob *other) { return share(__func__, b, other, true); }

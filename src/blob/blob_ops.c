/* Math on whole blobs, dispatched on where the head is: update, norms, scaling, copies. */
#include <string.h>

#include "../core/core.h"
#include "../syncedmem/syncedmem_internal.h"
#include "blob/blas.h"
#include "blob_impl.h"

/* Whether the newest bytes of mem are on the device (computations run there). */
static bool head_on_gpu(const blob_syncedmem *mem)
{
    blob_head h = blob_syncedmem_head(mem);
    return h == BLOB_HEAD_AT_GPU || h == BLOB_HEAD_SYNCED;
}

/* The math of this file takes the float dtypes; the integers are BLOB_ENOTSUP. */
static blob_status check_float(const char *func, const blob *b)
{
    if (!blob_dtype_is_float(b->dtype))
        return blob__fail(BLOB_ENOTSUP, func, "%s blobs have no math (float dtypes only)",
                          blob_dtype_name(b->dtype));
    return BLOB_OK;
}

/* data -= diff: the math runs on the side holding the head, which is claimed only once
 * the math has succeeded, so a failure changes nothing. */
blob_status blob_update(blob *b)
{
    if (!b)
        return BLOB_FAIL(BLOB_EINVAL, "blob is NULL");
    BLOB_TRY(check_float(__func__, b));
    if (blob_syncedmem_head(b->data) == BLOB_HEAD_UNINITIALIZED)
        return BLOB_FAIL(BLOB_ESTATE, "data is uninitialized");
    if (b->count == 0)
        return BLOB_OK;
    bool gpu = head_on_gpu(b->data);
    const void *diff;
    void *data;
    BLOB_TRY(gpu ? blob_syncedmem_gpu_data(b->diff, &diff)
                 : blob_syncedmem_cpu_data(b->diff, &diff));
    BLOB_TRY(blob__syncedmem_write_side(__func__, b->data, gpu, &data));
    BLOB_TRY(gpu ? blob_gpu_axpy(b->dtype, b->count, -1.0, diff, data)
                 : blob_cpu_axpy(b->dtype, b->count, -1.0, diff, data));
    blob__syncedmem_claim(b->data, gpu);
    return BLOB_OK;
}

/* sum |x| (squares = false) or sum x^2 of a block, where its head is; for func. */
static blob_status reduce(const char *func, const blob *b, blob_syncedmem *mem, bool squares,
                          double *out)
{
    if (!b || !out)
        return blob__fail(BLOB_EINVAL, func, "NULL argument");
    BLOB_TRY(check_float(func, b));
    const void *x;
    if (blob_syncedmem_head(mem) == BLOB_HEAD_UNINITIALIZED || b->count == 0) {
        *out = 0;
        return BLOB_OK;
    }
    if (head_on_gpu(mem)) {
        BLOB_TRY(blob_syncedmem_gpu_data(mem, &x));
        return squares ? blob_gpu_dot(b->dtype, b->count, x, x, out)
                       : blob_gpu_asum(b->dtype, b->count, x, out);
    }
    BLOB_TRY(blob_syncedmem_cpu_data(mem, &x));
    return squares ? blob_cpu_dot(b->dtype, b->count, x, x, out)
                   : blob_cpu_asum(b->dtype, b->count, x, out);
}

blob_status blob_asum_data(blob *b, double *out)
{
    return reduce(__func__, b, b ? b->data : NULL, false, out);
}
blob_status blob_asum_diff(blob *b, double *out)
{
    return reduce(__func__, b, b ? b->diff : NULL, false, out);
}
blob_status blob_sumsq_data(blob *b, double *out)
{
    return reduce(__func__, b, b ? b->data : NULL, true, out);
}
blob_status blob_sumsq_diff(blob *b, double *out)
{
    return reduce(__func__, b, b ? b->diff : NULL, true, out);
}

static blob_status scale(const char *func, const blob *b, blob_syncedmem *mem, double s)
{
    if (!b)
        return blob__fail(BLOB_EINVAL, func, "blob is NULL");
    BLOB_TRY(check_float(func, b));
    if (blob_syncedmem_head(mem) == BLOB_HEAD_UNINITIALIZED || b->count == 0)
        return BLOB_OK;
    bool gpu = head_on_gpu(mem);
    void *x;
    BLOB_TRY(blob__syncedmem_write_side(func, mem, gpu, &x));
    BLOB_TRY(gpu ? blob_gpu_scal(b->dtype, b->count, s, x)
                 : blob_cpu_scal(b->dtype, b->count, s, x));
    blob__syncedmem_claim(mem, gpu);
    return BLOB_OK;
}

blob_status blob_scale_data(blob *b, double s) { return scale(__func__, b, b ? b->data : NULL, s); }
blob_status blob_scale_diff(blob *b, double s) { return scale(__func__, b, b ? b->diff : NULL, s); }

/* Copy `count` elements from block src of blob from to block dst of blob to, converted
 * to to's dtype (blob_*_convert) where the dtypes differ: on the GPU when src's newest
 * bytes are there and both blobs live on the same GPU, else on the host. A copy covering
 * all of dst transfers nothing beforehand and claims dst's head only once it has
 * succeeded. */
static blob_status copy_block(const char *func, const blob *from, blob_syncedmem *src,
                              const blob *to, blob_syncedmem *dst, int64_t count)
{
    size_t bytes = (size_t)count * blob_dtype_size(to->dtype);
    bool written = count && blob_syncedmem_head(src) != BLOB_HEAD_UNINITIALIZED;
    bool gpu = written && head_on_gpu(src) && to->device == from->device;
    const void *x = NULL;
    void *y;
    if (written)
        BLOB_TRY(gpu ? blob_syncedmem_gpu_data(src, &x) : blob_syncedmem_cpu_data(src, &x));
    if (bytes == blob_syncedmem_size(dst))
        BLOB_TRY(blob__syncedmem_write_side(func, dst, gpu, &y));
    else /* part of the block: the rest must stay current */
        BLOB_TRY(gpu ? blob_syncedmem_mutable_gpu_data(dst, &y)
                     : blob_syncedmem_mutable_cpu_data(dst, &y));
    if (gpu)
        BLOB_TRY(from->dtype == to->dtype ? blob_gpu_copy(to->dtype, count, x, y)
                                          : blob_gpu_convert(from->dtype, to->dtype, count, x, y));
    else if (x && from->dtype != to->dtype)
        BLOB_TRY(blob_cpu_convert(from->dtype, to->dtype, count, x, y));
    else if (x)
        memcpy(y, x, bytes);
    else if (bytes) /* nothing written yet: the destination reads as zeros too */
        memset(y, 0, bytes);
    blob__syncedmem_claim(dst, gpu);
    return BLOB_OK;
}

static bool same_shape(const blob *a, const blob *b)
{
    return a->num_axes == b->num_axes &&
           (a->num_axes == 0 || !memcmp(a->shape, b->shape, (size_t)a->num_axes * sizeof(int64_t)));
}

/* blob_copy_from, and with convert blob_convert_from, for func. */
static blob_status copy_from(const char *func, blob *dst, blob *src, bool copy_diff, bool reshape,
                             bool convert)
{
    if (!dst || !src)
        return blob__fail(BLOB_EINVAL, func, "blob is NULL");
    if (!convert && dst->dtype != src->dtype)
        return blob__fail(BLOB_EINVAL, func,
                          "dtypes differ (%s and %s; blob_convert_from "
                          "converts)",
                          blob_dtype_name(dst->dtype), blob_dtype_name(src->dtype));
    for (int i = 0; convert && i < 2; i++)
        if (!blob_dtype_is_float((i ? src : dst)->dtype))
            return blob__fail(BLOB_ENOTSUP, func,
                              "%s is not a float dtype: only float64, "
                              "float32, bfloat16 and float16 convert",
                              blob_dtype_name((i ? src : dst)->dtype));
    if (dst == src)
        return BLOB_OK;
    bool reshaping = !same_shape(dst, src);
    if (reshaping && !reshape) {
        char a[BLOB_SHAPE_STRING_MAX], b[BLOB_SHAPE_STRING_MAX];
        blob_shape_string(dst, a, sizeof a);
        blob_shape_string(src, b, sizeof b);
        return blob__fail(BLOB_ESHAPE, func, "shapes differ: %s vs %s", a, b);
    }
    /* Keep the old shape and blocks alive so a failed copy can put them back. */
    int old_axes = dst->num_axes;
    int64_t old_shape[BLOB_MAX_AXES];
    memcpy(old_shape, dst->shape, sizeof old_shape);
    int64_t old_count = dst->count;
    blob_syncedmem *old_data = dst->data, *old_diff = dst->diff;
    blob_syncedmem_retain(old_data);
    blob_syncedmem_retain(old_diff);
    blob_status st = reshaping ? blob_reshape_like(dst, src) : BLOB_OK;
    if (st == BLOB_OK)
        st = copy_diff ? copy_block(func, src, src->diff, dst, dst->diff, src->count)
                       : copy_block(func, src, src->data, dst, dst->data, src->count);
    if (st != BLOB_OK) {
        blob__commit(dst, old_axes, old_shape, old_count, old_data, old_diff);
        return st;
    }
    blob_syncedmem_free(old_data);
    blob_syncedmem_free(old_diff);
    return BLOB_OK;
}

blob_status blob_copy_from(blob *dst, blob *src, bool copy_diff, bool reshape)
{
    return copy_from(__func__, dst, src, copy_diff, reshape, false);
}

blob_status blob_convert_from(blob *dst, blob *src, bool copy_diff, bool reshape)
{
    return copy_from(__func__, dst, src, copy_diff, reshape, true);
}

/* A reference to an exact-size copy of block mem, or to mem itself when nothing is
 * spare or it is shared. */
static blob_status shrunk(const char *func, const blob *b, blob_syncedmem *mem,
                          blob_syncedmem **out)
{
    if (blob__mem_capacity(b, mem) == b->count || blob__syncedmem_shared(mem)) {
        blob_syncedmem_retain(mem);
        *out = mem;
        return BLOB_OK;
    }
    blob_syncedmem *fresh;
    BLOB_TRY(
        blob_syncedmem_create(&fresh, (size_t)b->count * blob_dtype_size(b->dtype), b->device));
    blob_status st = blob_syncedmem_head(mem) == BLOB_HEAD_UNINITIALIZED
                         ? BLOB_OK /* the fresh block stays lazy */
                         : copy_block(func, b, mem, b, fresh, b->count);
    if (st != BLOB_OK) {
        blob_syncedmem_free(fresh);
        return st;
    }
    *out = fresh;
    return BLOB_OK;
}

blob_status blob_shrink_to_fit(blob *b)
{
    if (!b)
        return BLOB_FAIL(BLOB_EINVAL, "blob is NULL");
    blob_syncedmem *data, *diff;
    BLOB_TRY(shrunk(__func__, b, b->data, &data));
    blob_status st = shrunk(__func__, b, b->diff, &diff);
    if (st != BLOB_OK) {
        blob_syncedmem_free(data);
        return st;
    }
    blob__commit(b, b->num_axes, b->shape, b->count, data, diff);
    return BLOB_OK;
}

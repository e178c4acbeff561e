/* DLPack export and import: the same memory on both sides, writes seen both ways, the
 * deleter called exactly once in every order of frees, stream order without host waits,
 * every bad input refused with nothing left behind, and allocation failures. Mostly
 * through the fake device; the real GPU where one is present. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blob/dlpack.h"
#include "../src/core/core.h"
#include "fake_backend.h"
#include "testutil.h"

/* ---- a producer: a tensor over memory the test owns, with a counting deleter ---- */

typedef struct {
    DLManagedTensor t;
    int64_t shape[BLOB_MAX_AXES + 2], strides[BLOB_MAX_AXES + 2];
    int deleted;
    int queued_at_delete;   /* device work still queued when the deleter ran */
    DLManagedTensor *inner; /* a wrapped tensor, deleted with this one */
} producer;

static void producer_delete(DLManagedTensor *t)
{
    producer *p = t->manager_ctx;
    p->deleted++;
    p->queued_at_delete = fake_queued();
    if (p->inner)
        p->inner->deleter(p->inner);
}

static DLDataType dl_type(blob_dtype dt)
{
    return (DLDataType){kDLFloat, dt == BLOB_FLOAT32 ? 32 : 64, 1};
}

/* A compact tensor (strides NULL) of `ndim` dims over data. */
static void producer_init(producer *p, void *data, DLDevice dev, blob_dtype dt, int ndim,
                          const int64_t *shape)
{
    memset(p, 0, sizeof *p);
    for (int i = 0; i < ndim; i++)
        p->shape[i] = shape[i];
    p->t.dl_tensor = (DLTensor){data, dev, ndim, dl_type(dt), p->shape, NULL, 0};
    p->t.manager_ctx = p;
    p->t.deleter = producer_delete;
}

/* A producer that holds `inner` (e.g. an export of ours) and counts its own deletion. */
static void producer_wrap(producer *p, DLManagedTensor *inner)
{
    memset(p, 0, sizeof *p);
    p->t.dl_tensor = inner->dl_tensor;
    p->t.manager_ctx = p;
    p->t.deleter = producer_delete;
    p->inner = inner;
}

static const DLDevice cpu_dev = {kDLCPU, 0};

/* A blob of shape 2x3x4 with random data on `device`, its values in *ref. */
static blob *random_blob(blob_dtype dt, int device, double **ref)
{
    int64_t shape[] = {2, 3, 4};
    blob *b;
    void *p;
    ck_ok(blob_create(&b, dt, device, 3, shape));
    ck_ok(blob_mutable_cpu_data(b, &p));
    test_fill(dt, p, 24, -2.0, 2.0);
    *ref = malloc(24 * sizeof **ref);
    for (int i = 0; i < 24; i++)
        (*ref)[i] = test_get(dt, p, i);
    return b;
}

static void assert_same(blob_dtype dt, const void *p, const double *ref, int64_t n)
{
    double err = test_rel_err(dt, p, ref, n, 1e-6);
    ck_assert_msg(err == 0, "values differ (relative error %g)", err);
}

static blob_head head(blob *b) { return blob_syncedmem_head(blob_data_mem(b)); }

/* ---- export ---- */

/* loop: dtype x (host-only, bound to fake GPU 0) */
START_TEST(test_export_host)
{
    blob_dtype dt = (blob_dtype)(_i % 2);
    bool gpu = _i / 2;
    double *ref;
    blob *b = random_blob(dt, gpu ? 0 : BLOB_HOST_ONLY, &ref);
    const void *host;
    ck_ok(blob_cpu_data(b, &host));

    DLManagedTensor *t;
    ck_ok(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_HOST, 0, NULL, &t));
    const DLTensor *d = &t->dl_tensor;
    ck_assert_ptr_eq(d->data, host); /* zero copy */
    ck_assert_int_eq(d->device.device_type, kDLCPU);
    ck_assert_int_eq(d->device.device_id, 0);
    ck_assert_int_eq(d->ndim, 3);
    ck_assert_int_eq(d->dtype.code, kDLFloat);
    ck_assert_int_eq(d->dtype.bits, dt == BLOB_FLOAT32 ? 32 : 64);
    ck_assert_int_eq(d->dtype.lanes, 1);
    ck_assert_int_eq(d->shape[0], 2);
    ck_assert_int_eq(d->shape[1], 3);
    ck_assert_int_eq(d->shape[2], 4);
    ck_assert_int_eq(d->strides[0], 12);
    ck_assert_int_eq(d->strides[1], 4);
    ck_assert_int_eq(d->strides[2], 1);
    ck_assert_uint_eq(d->byte_offset, 0);
    ck_assert_ptr_nonnull(t->deleter);

    /* a write by the blob is seen by the consumer */
    void *w;
    ck_ok(blob_mutable_cpu_data(b, &w));
    test_put(dt, w, 5, 42.0);
    ref[5] = 42.0;
    assert_same(dt, d->data, ref, 24);

    /* a write by the consumer of a writable export is seen by the blob */
    DLManagedTensor *tw;
    ck_ok(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_HOST, BLOB_DLPACK_WRITABLE, NULL, &tw));
    ck_assert_ptr_eq(tw->dl_tensor.data, host);
    test_put(dt, tw->dl_tensor.data, 7, -3.0);
    ref[7] = -3.0;
    const void *r;
    ck_ok(blob_cpu_data(b, &r));
    assert_same(dt, r, ref, 24);

    /* pinned host memory is kDLCUDAHost when asked for; pageable memory never is */
    DLManagedTensor *tp;
    ck_ok(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_HOST, BLOB_DLPACK_CUDA_HOST, NULL, &tp));
    ck_assert_int_eq(tp->dl_tensor.device.device_type, gpu ? kDLCUDAHost : kDLCPU);
    ck_assert_int_eq(blob_syncedmem_host_pinned(blob_data_mem(b)), gpu);

    /* the blob goes first: the memory stays for the consumers */
    blob_free(b);
    assert_same(dt, d->data, ref, 24);
    t->deleter(t);
    blob_dlpack_delete(tp);
    assert_same(dt, tw->dl_tensor.data, ref, 24);
    blob_dlpack_delete(tw);
    blob_dlpack_delete(NULL);
    free(ref);
}
END_TEST

/* Read-only exports sync the side; writable ones claim the head (loop: dtype). */
START_TEST(test_export_heads)
{
    blob_dtype dt = (blob_dtype)_i;
    double *ref;
    blob *b = random_blob(dt, 0, &ref);
    DLManagedTensor *t[4];
    void *w;
    const void *g;
    ck_ok(blob_mutable_gpu_data(b, &w)); /* AT_GPU */
    fake_reset_counts();
    ck_ok(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_HOST, 0, NULL, &t[0]));
    ck_assert_int_eq(head(b), BLOB_HEAD_SYNCED);
    ck_assert_int_eq(fake_get_stats().d2h, 1);
    ck_ok(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_DEVICE, 0, NULL, &t[1]));
    ck_assert_int_eq(head(b), BLOB_HEAD_SYNCED);
    ck_assert_ptr_eq(t[1]->dl_tensor.data, w);
    ck_assert_int_eq(t[1]->dl_tensor.device.device_type, kDLCUDA);
    ck_assert_int_eq(t[1]->dl_tensor.device.device_id, 0);
    ck_ok(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_HOST, BLOB_DLPACK_WRITABLE, NULL, &t[2]));
    ck_assert_int_eq(head(b), BLOB_HEAD_AT_CPU);
    test_put(dt, t[2]->dl_tensor.data, 0, 9.0); /* the consumer writes the host side ... */
    ref[0] = 9.0;
    ck_ok(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_DEVICE, BLOB_DLPACK_WRITABLE, NULL, &t[3]));
    ck_assert_int_eq(head(b), BLOB_HEAD_AT_GPU);
    ck_assert_int_eq(fake_get_stats().h2d, 1); /* ... and the device export carries it over */
    fake_drain();
    assert_same(dt, t[3]->dl_tensor.data, ref, 24);
    /* the diff is exported on its own, zero-filled on first touch */
    DLManagedTensor *td;
    ck_ok(blob_to_dlpack(b, BLOB_PART_DIFF, BLOB_DLPACK_DEVICE, 0, NULL, &td));
    ck_ok(blob_gpu_diff(b, &g));
    ck_assert_ptr_eq(td->dl_tensor.data, g);
    ck_assert_ptr_ne(td->dl_tensor.data, w);
    for (int i = 0; i < 4; i++)
        blob_dlpack_delete(t[i]);
    blob_dlpack_delete(td);
    blob_free(b);
    free(ref);
}
END_TEST

/* A blob on another GPU exports with the current device switched for the call only. */
START_TEST(test_export_other_device)
{
    int64_t shape[] = {8};
    blob *b;
    ck_ok(blob_create(&b, BLOB_FLOAT32, 1, 1, shape));
    DLManagedTensor *t;
    ck_ok(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_DEVICE, BLOB_DLPACK_WRITABLE, NULL, &t));
    ck_assert_int_eq(t->dl_tensor.device.device_type, kDLCUDA);
    ck_assert_int_eq(t->dl_tensor.device.device_id, 1);
    int cur;
    ck_ok(blob_device_get(&cur));
    ck_assert_int_eq(cur, 0);
    blob_free(b);
    blob_dlpack_delete(t);
}
END_TEST

/* The consumer's stream waits on the device for the blob's pending work; the host
 * never waits, and the thread's own stream is left as it was. */
START_TEST(test_export_stream_order)
{
    double *ref;
    blob *b = random_blob(BLOB_FLOAT32, 0, &ref);
    void *producer_stream, *consumer_stream;
    test_streams_create(&producer_stream, &consumer_stream);
    ck_ok(blob_syncedmem_async_gpu_push(blob_data_mem(b), producer_stream));
    fake_reset_counts();
    ck_assert_int_eq(fake_queued(), 1); /* the copy is in flight */
    DLManagedTensor *t;
    ck_ok(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_DEVICE, 0, consumer_stream, &t));
    fake_stats s = fake_get_stats();
    ck_assert_int_eq(s.h2d, 1); /* the consumer's stream waited for it (the fake runs it) */
    ck_assert_int_eq(s.stream_syncs + s.event_syncs + s.device_syncs, 0);
    ck_assert_ptr_null(blob_stream_get());
    assert_same(BLOB_FLOAT32, t->dl_tensor.data, ref, 24);

    /* later library work on another stream waits for the consumer's stream */
    ck_ok(blob__be->memset_async(t->dl_tensor.data, 0, 24 * sizeof(float), consumer_stream));
    ck_assert_int_eq(fake_queued(), 1); /* the consumer's write, queued */
    const void *g;
    ck_ok(blob_gpu_data(b, &g));
    ck_assert_int_eq(fake_queued(), 0);
    ck_assert_int_eq(fake_get_stats().stream_syncs + fake_get_stats().event_syncs, 0);

    /* unordered: the consumer orders itself; the thread's stream is used */
    DLManagedTensor *u;
    ck_ok(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_DEVICE, BLOB_DLPACK_UNORDERED,
                         consumer_stream, &u));
    blob_dlpack_delete(u);
    blob_dlpack_delete(t);
    blob_free(b);
    test_streams_destroy(producer_stream, consumer_stream);
    free(ref);
}
END_TEST

/* Reshape, share and free in any order: the exported memory lives until the deleter. */
START_TEST(test_export_lifetimes)
{
    double *ref;
    blob *b = random_blob(BLOB_FLOAT64, BLOB_HOST_ONLY, &ref);
    DLManagedTensor *data, *diff;
    ck_ok(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_HOST, 0, NULL, &data));
    ck_ok(blob_to_dlpack(b, BLOB_PART_DIFF, BLOB_DLPACK_HOST, BLOB_DLPACK_WRITABLE, NULL, &diff));
    int64_t big[] = {1000};
    ck_ok(blob_reshape(b, 1, big)); /* new blocks: the exported ones stay */
    ck_assert_ptr_ne(blob_data_mem(b), NULL);
    assert_same(BLOB_FLOAT64, data->dl_tensor.data, ref, 24);
    ck_assert_int_eq(data->dl_tensor.shape[0], 2); /* the tensor keeps its own shape */
    blob *c;
    int64_t shape[] = {24};
    ck_ok(blob_create(&c, BLOB_FLOAT64, BLOB_HOST_ONLY, 1, shape));
    DLManagedTensor *cd;
    ck_ok(blob_to_dlpack(c, BLOB_PART_DATA, BLOB_DLPACK_HOST, 0, NULL, &cd));
    blob_free(b);
    blob_free(c);
    ((double *)diff->dl_tensor.data)[3] = 1.0; /* still the consumer's to write */
    assert_same(BLOB_FLOAT64, data->dl_tensor.data, ref, 24);
    blob_dlpack_delete(diff);
    blob_dlpack_delete(cd);
    blob_dlpack_delete(data);
    free(ref);
}
END_TEST

/* A scalar (0 axes) and an empty blob (a 0 dim) export too. */
START_TEST(test_export_special_shapes)
{
    blob *s, *e;
    int64_t zero[] = {3, 0};
    ck_ok(blob_create(&s, BLOB_FLOAT32, BLOB_HOST_ONLY, 0, NULL));
    ck_ok(blob_create(&e, BLOB_FLOAT32, 0, 2, zero));
    DLManagedTensor *ts, *te;
    ck_ok(blob_to_dlpack(s, BLOB_PART_DATA, BLOB_DLPACK_HOST, BLOB_DLPACK_WRITABLE, NULL, &ts));
    ck_assert_int_eq(ts->dl_tensor.ndim, 0);
    ck_assert_ptr_nonnull(ts->dl_tensor.data);
    *(float *)ts->dl_tensor.data = 2.5f;
    const void *p;
    ck_ok(blob_cpu_data(s, &p));
    ck_assert_float_eq(*(const float *)p, 2.5f);
    ck_ok(blob_to_dlpack(e, BLOB_PART_DATA, BLOB_DLPACK_DEVICE, 0, NULL, &te));
    ck_assert_ptr_null(te->dl_tensor.data);
    ck_assert_int_eq(te->dl_tensor.shape[1], 0);
    blob_free(s);
    blob_free(e);
    blob_dlpack_delete(ts);
    blob_dlpack_delete(te);
}
END_TEST

START_TEST(test_export_bad_arguments)
{
    double *ref;
    blob *b = random_blob(BLOB_FLOAT32, BLOB_HOST_ONLY, &ref);
    DLManagedTensor *t = (DLManagedTensor *)&t;
    ck_status(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_HOST, 0, NULL, NULL), BLOB_EINVAL);
    ck_status(blob_to_dlpack(NULL, BLOB_PART_DATA, BLOB_DLPACK_HOST, 0, NULL, &t), BLOB_EINVAL);
    ck_assert_ptr_null(t);
    t = (DLManagedTensor *)&t;
    ck_status(blob_to_dlpack(b, (blob_part)2, BLOB_DLPACK_HOST, 0, NULL, &t), BLOB_EINVAL);
    ck_assert_ptr_null(t);
    ck_status(blob_to_dlpack(b, BLOB_PART_DATA, (blob_dlpack_side)-1, 0, NULL, &t), BLOB_EINVAL);
    ck_status(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_HOST, 64, NULL, &t), BLOB_EINVAL);
    ck_status(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_DEVICE, 0, NULL, &t), BLOB_ENODEV);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(head(b), BLOB_HEAD_AT_CPU);
    blob_free(b);
    free(ref);
}
END_TEST

/* An export failed at its k-th allocation: out of memory, no tensor (t NULL), b's head as
 * before. */
static void assert_export_failed(blob_status st, uint64_t k, const void *t, blob *b,
                                 blob_head before)
{
    ck_assert_msg(st == BLOB_ENOMEM || st == BLOB_EDEVMEM, "k=%llu: %s", (unsigned long long)k,
                  blob_status_name(st));
    ck_assert_ptr_null(t);
    ck_assert_int_eq(head(b), before);
}

/* The k-th allocation of an export fails, once or from then on: a clean error, no
 * tensor, the blob's head and values as before, no reference left on the block (the
 * fixture checks for leaks). A single failed allocation of a side is absorbed by the
 * allocator's retry. loop: (host, device) x (read-only, writable), from the other side's
 * head, so the side is allocated. */
START_TEST(test_export_alloc_failure)
{
    bool device = _i / 2, writable = _i % 2;
    for (int persistent = 0; persistent < 2; persistent++) {
        for (uint64_t k = 1;; k++) {
            int64_t shape[] = {16};
            blob *b;
            void *w;
            ck_ok(blob_create(&b, BLOB_FLOAT32, 0, 1, shape));
            if (device) {
                ck_ok(blob_mutable_cpu_data(b, &w));
                ((float *)w)[3] = 3.0f;
            } else {
                ck_ok(blob_mutable_gpu_data(b, &w));
            }
            blob_head before = head(b);
            DLManagedTensor *t = (DLManagedTensor *)&t;
            fake_fail_alloc_at(k, persistent);
            blob_status st =
                blob_to_dlpack(b, BLOB_PART_DATA, device ? BLOB_DLPACK_DEVICE : BLOB_DLPACK_HOST,
                               writable ? BLOB_DLPACK_WRITABLE : 0, NULL, &t);
            fake_fail_alloc_at(0, false);
            if (st == BLOB_OK) {
                ck_assert_msg(k > (persistent ? 2u : 1u), "k=%llu: succeeded too early",
                              (unsigned long long)k);
                blob_free(b);
                blob_dlpack_delete(t);
                break;
            }
            assert_export_failed(st, k, t, b, before);
            if (device) {
                const void *p;
                ck_ok(blob_cpu_data(b, &p));
                ck_assert_float_eq(((const float *)p)[3], 3.0f);
            }
            blob_free(b);
            ck_assert_msg(k < 8, "never succeeded");
        }
    }
}
END_TEST

/* ---- import ---- */

/* loop: dtype x (host-only blob, blob bound to GPU 0) */
START_TEST(test_import_host)
{
    blob_dtype dt = (blob_dtype)(_i % 2);
    int device = _i / 2 ? 0 : BLOB_HOST_ONLY;
    size_t elem = blob_dtype_size(dt);
    int64_t shape[] = {4, 5};
    void *buf = malloc(20 * elem);
    test_fill(dt, buf, 20, -1.0, 1.0);
    double ref[20];
    for (int i = 0; i < 20; i++)
        ref[i] = test_get(dt, buf, i);
    producer p;
    producer_init(&p, buf, cpu_dev, dt, 2, shape);
    blob *b;
    ck_ok(blob_from_dlpack(&b, &p.t, device));
    ck_assert_int_eq(p.deleted, 0);
    ck_assert_int_eq(blob_get_dtype(b), dt);
    ck_assert_int_eq(blob_num_axes(b), 2);
    ck_assert_int_eq(blob_shape(b)[1], 5);
    ck_assert_int_eq(blob_count(b), 20);
    ck_assert_int_eq(blob_device(b), device);
    ck_assert_int_eq(head(b), BLOB_HEAD_AT_CPU);
    const void *r;
    void *w;
    ck_ok(blob_cpu_data(b, &r));
    ck_assert_ptr_eq(r, buf);  /* zero copy */
    test_put(dt, buf, 2, 7.0); /* the producer writes ... */
    ref[2] = 7.0;
    ck_ok(blob_cpu_data(b, &r));
    assert_same(dt, r, ref, 20); /* ... the blob sees it */
    ck_ok(blob_mutable_cpu_data(b, &w));
    test_put(dt, w, 3, -7.0); /* and the other way */
    ref[3] = -7.0;
    assert_same(dt, buf, ref, 20);
    if (device >= 0) { /* the device side is filled from the borrowed memory */
        const void *g;
        fake_reset_counts();
        ck_ok(blob_gpu_data(b, &g));
        ck_assert_int_eq(fake_get_stats().h2d, 1);
        assert_same(dt, g, ref, 20);
    }
    /* the diff is the blob's own */
    ck_ok(blob_mutable_cpu_diff(b, &w));
    ck_assert_ptr_ne(w, buf);
    blob_free(b);
    ck_assert_int_eq(p.deleted, 1);
    free(buf);
}
END_TEST

enum {
    LIFE_FREE,           /* free: deleted */
    LIFE_SHARED,         /* another blob shares the block: deleted when both are gone */
    LIFE_RESHAPE_GROW,   /* reshape past capacity replaces the block */
    LIFE_RESHAPE_SHRINK, /* reshape within capacity keeps it */
    LIFE_SHRINK_TO_FIT,  /* shrink_to_fit after a smaller reshape replaces it */
    LIFE_SET_CPU,        /* set_cpu_data replaces the borrowed side */
    LIFE_REEXPORT,       /* an export of the imported blob outlives the blob */
    LIFE_SET_GPU,        /* set_gpu_data keeps the borrowed host side until the block goes */
    LIFE_COUNT
};

/* The deleter runs exactly once, at the moment the last holder lets go. */
START_TEST(test_import_lifetimes)
{
    int64_t shape[] = {6};
    float buf[6] = {1, 2, 3, 4, 5, 6}, other[6], *devbuf;
    producer p;
    producer_init(&p, buf, cpu_dev, BLOB_FLOAT32, 1, shape);
    blob *b, *c = NULL;
    ck_ok(blob_from_dlpack(&b, &p.t, _i == LIFE_SET_GPU ? 0 : BLOB_HOST_ONLY));
    const void *r;
    switch (_i) {
    case LIFE_FREE:
        blob_free(b);
        ck_assert_int_eq(p.deleted, 1);
        break;
    case LIFE_SHARED:
        ck_ok(blob_create(&c, BLOB_FLOAT32, BLOB_HOST_ONLY, 1, shape));
        ck_ok(blob_share_data(c, b));
        blob_free(b);
        ck_assert_int_eq(p.deleted, 0);
        ck_ok(blob_cpu_data(c, &r));
        ck_assert_ptr_eq(r, buf);
        blob_free(c);
        ck_assert_int_eq(p.deleted, 1);
        break;
    case LIFE_RESHAPE_GROW: {
        int64_t big[] = {7};
        ck_ok(blob_reshape(b, 1, big));
        ck_assert_int_eq(p.deleted, 1);
        blob_free(b);
        ck_assert_int_eq(p.deleted, 1);
        break;
    }
    case LIFE_RESHAPE_SHRINK:
    case LIFE_SHRINK_TO_FIT: {
        int64_t small[] = {2};
        ck_ok(blob_reshape(b, 1, small));
        ck_assert_int_eq(p.deleted, 0);
        ck_ok(blob_cpu_data(b, &r));
        ck_assert_ptr_eq(r, buf);
        if (_i == LIFE_SHRINK_TO_FIT) {
            ck_ok(blob_shrink_to_fit(b));
            ck_assert_int_eq(p.deleted, 1);
            ck_ok(blob_cpu_data(b, &r));
            ck_assert_float_eq(((const float *)r)[1], 2.0f); /* the values came along */
        }
        blob_free(b);
        ck_assert_int_eq(p.deleted, 1);
        break;
    }
    case LIFE_SET_CPU:
        ck_ok(blob_set_cpu_data(b, other, sizeof other));
        ck_assert_int_eq(p.deleted, 1);
        blob_free(b);
        ck_assert_int_eq(p.deleted, 1);
        break;
    case LIFE_REEXPORT: {
        DLManagedTensor *t;
        ck_ok(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_HOST, 0, NULL, &t));
        ck_assert_ptr_eq(t->dl_tensor.data, buf);
        blob_free(b);
        ck_assert_int_eq(p.deleted, 0);
        ck_assert_float_eq(((const float *)t->dl_tensor.data)[5], 6.0f);
        blob_dlpack_delete(t);
        ck_assert_int_eq(p.deleted, 1);
        break;
    }
    case LIFE_SET_GPU:
        ck_ok(blob__be->device_alloc(sizeof buf, (void **)&devbuf));
        ck_ok(blob_set_gpu_data(b, devbuf, sizeof buf));
        ck_assert_int_eq(p.deleted, 0);
        ck_ok(blob_cpu_data(b, &r)); /* D->H into the borrowed host side */
        ck_assert_ptr_eq(r, buf);
        blob_free(b);
        ck_assert_int_eq(p.deleted, 1);
        blob__be->device_free(devbuf);
        break;
    }
    ck_assert_int_eq(fake_get_stats().violations, 0);
}
END_TEST

/* Device memory of a producer (the fake's, on GPU 0 and 1): borrowed as the device
 * side; before the deleter runs the host waits for the device work queued on it, so the
 * producer may reuse the memory at once. loop: GPU 0, GPU 1 (not the current one). */
START_TEST(test_import_device)
{
    int dev = _i;
    int64_t shape[] = {2, 8};
    float *mem;
    ck_ok(blob_device_set(dev));
    ck_ok(blob__be->device_alloc(16 * sizeof(float), (void **)&mem));
    ck_ok(blob_device_set(0));
    for (int i = 0; i < 16; i++)
        mem[i] = (float)i;
    producer p;
    producer_init(&p, mem, (DLDevice){kDLCUDA, dev}, BLOB_FLOAT32, 2, shape);
    blob *b;
    ck_ok(blob_from_dlpack(&b, &p.t, BLOB_HOST_ONLY)); /* host_device is for host tensors */
    ck_assert_int_eq(blob_device(b), dev);
    ck_assert_int_eq(head(b), BLOB_HEAD_AT_GPU);
    int cur;
    ck_ok(blob_device_get(&cur));
    ck_assert_int_eq(cur, 0);
    ck_ok(blob_device_set(dev));
    const void *g, *h;
    ck_ok(blob_gpu_data(b, &g));
    ck_assert_ptr_eq(g, mem);
    ck_ok(blob_cpu_data(b, &h)); /* D->H from the producer's memory */
    ck_assert_float_eq(((const float *)h)[9], 9.0f);
    /* device work queued on the block's stream: the deleter must come after it */
    ck_ok(blob__be->memset_async(mem, 0, 16 * sizeof(float), blob_stream_get()));
    ck_assert_int_eq(fake_queued(), 1);
    blob_free(b);
    ck_assert_int_eq(p.deleted, 1);
    ck_assert_int_eq(p.queued_at_delete, 0);
    ck_assert_float_eq(mem[9], 0.0f);
    blob__be->device_free(mem);
    ck_ok(blob_device_set(0));
    ck_assert_int_eq(fake_get_stats().violations, 0);
}
END_TEST

/* Freed while another GPU is current: the wait for the block's device work is made on
 * the block's GPU (the fake runs a GPU's queued work only with that GPU current). */
START_TEST(test_import_device_freed_elsewhere)
{
    int64_t shape[] = {8};
    float *mem;
    ck_ok(blob_device_set(1));
    ck_ok(blob__be->device_alloc(8 * sizeof(float), (void **)&mem));
    producer p;
    producer_init(&p, mem, (DLDevice){kDLCUDA, 1}, BLOB_FLOAT32, 1, shape);
    blob *b;
    ck_ok(blob_from_dlpack(&b, &p.t, BLOB_HOST_ONLY));
    const void *g;
    ck_ok(blob_gpu_data(b, &g));
    ck_ok(blob__be->memset_async(mem, 0, 8 * sizeof(float), blob_stream_get()));
    ck_ok(blob_device_set(0));
    blob_free(b);
    ck_assert_int_eq(p.deleted, 1);
    ck_assert_int_eq(p.queued_at_delete, 0);
    ck_assert_int_eq(fake_get_stats().violations, 0);
    int cur;
    ck_ok(blob_device_get(&cur));
    ck_assert_int_eq(cur, 0);
    ck_ok(blob_device_set(1));
    blob__be->device_free(mem);
    ck_ok(blob_device_set(0));
}
END_TEST

/* A tensor whose data is not where its device says: host memory named as a GPU's,
 * one GPU's memory named as another's or as host memory. Refused with the two places
 * named; the producer keeps its tensor, nothing is made. */
START_TEST(test_import_wrong_place)
{
    float host[8];
    float *dev1;
    ck_ok(blob_device_set(1));
    ck_ok(blob__be->device_alloc(sizeof host, (void **)&dev1));
    ck_ok(blob_device_set(0));
    const struct {
        void *data;
        DLDevice dev;
        const char *message;
    } cases[] = {
        {host, {kDLCUDA, 0}, "data is host memory, but the tensor says CUDA device 0"},
        {dev1, {kDLCUDA, 0}, "data is memory of GPU 1, but the tensor says CUDA device 0"},
        {dev1, {kDLCPU, 0}, "data is memory of GPU 1, but the tensor says host memory"},
        {dev1 + 2, {kDLCUDAHost, 0}, "data is memory of GPU 1, but the tensor says host"},
    };
    int64_t shape[] = {2};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        producer p;
        producer_init(&p, cases[i].data, cases[i].dev, BLOB_FLOAT32, 1, shape);
        blob *b = (blob *)&b;
        ck_status(blob_from_dlpack(&b, &p.t, BLOB_HOST_ONLY), BLOB_EINVAL);
        ck_assert_ptr_null(b);
        ck_assert_msg(strstr(blob_last_error(), cases[i].message), "%s", blob_last_error());
        ck_assert_int_eq(p.deleted, 0);
    }
    ck_ok(blob_device_set(1));
    blob__be->device_free(dev1);
    ck_ok(blob_device_set(0));
}
END_TEST

/* A borrowed device side that no device work touched is given back without a wait. */
START_TEST(test_import_device_no_wait)
{
    int64_t shape[] = {4};
    float *mem;
    ck_ok(blob__be->device_alloc(4 * sizeof(float), (void **)&mem));
    producer p;
    producer_init(&p, mem, (DLDevice){kDLCUDA, 0}, BLOB_FLOAT32, 1, shape);
    blob *b;
    ck_ok(blob_from_dlpack(&b, &p.t, BLOB_HOST_ONLY));
    fake_reset_counts();
    blob_free(b);
    fake_stats s = fake_get_stats();
    ck_assert_int_eq(s.stream_syncs + s.event_syncs + s.device_syncs, 0);
    ck_assert_int_eq(p.deleted, 1);
    blob__be->device_free(mem);
}
END_TEST

/* Our own export imported again: one memory, and the export's deleter once both go. */
START_TEST(test_round_trip)
{
    blob_dtype dt = (blob_dtype)(_i % 2);
    bool device = _i / 2;
    double *ref;
    blob *a = random_blob(dt, 0, &ref);
    DLManagedTensor *t;
    ck_ok(blob_to_dlpack(a, BLOB_PART_DATA, device ? BLOB_DLPACK_DEVICE : BLOB_DLPACK_HOST,
                         BLOB_DLPACK_WRITABLE, NULL, &t));
    producer p;
    producer_wrap(&p, t);
    blob *c;
    ck_ok(blob_from_dlpack(&c, &p.t, 0));
    const void *pc;
    ck_ok(device ? blob_gpu_data(c, &pc) : blob_cpu_data(c, &pc));
    ck_assert_ptr_eq(pc, t->dl_tensor.data);
    blob_free(a); /* the producer's blob goes first */
    ck_assert_int_eq(p.deleted, 0);
    ck_ok(blob_cpu_data(c, &pc));
    assert_same(dt, pc, ref, 24);
    void *w;
    ck_ok(blob_mutable_cpu_data(c, &w));
    test_put(dt, w, 0, 5.0);
    blob_free(c);
    ck_assert_int_eq(p.deleted, 1);
    free(ref);
}
END_TEST

/* Our own export imported as it is: its place is known from the block it holds, and the
 * driver is not asked. Its data changed to memory elsewhere, or (device side) the
 * block's memory replaced since the export: asked, and refused as any tensor would be. */
START_TEST(test_round_trip_known_place)
{
    const bool device = _i;
    const blob_dlpack_side side = device ? BLOB_DLPACK_DEVICE : BLOB_DLPACK_HOST;
    double *ref;
    blob *a = random_blob(BLOB_FLOAT32, 0, &ref);
    DLManagedTensor *t;
    ck_ok(blob_to_dlpack(a, BLOB_PART_DATA, side, BLOB_DLPACK_WRITABLE, NULL, &t));
    fake_reset_counts();
    blob *c;
    ck_ok(blob_from_dlpack(&c, t, 0));
    ck_assert_int_eq(fake_get_stats().pointer_queries, 0);
    blob_free(c); /* the export goes with it */

    float *dev1;
    ck_ok(blob_device_set(1));
    ck_ok(blob__be->device_alloc(24 * sizeof(float), (void **)&dev1));
    ck_ok(blob_device_set(0));
    ck_ok(blob_to_dlpack(a, BLOB_PART_DATA, side, BLOB_DLPACK_WRITABLE, NULL, &t));
    void *made = t->dl_tensor.data;
    t->dl_tensor.data = dev1;
    c = (blob *)&c;
    ck_status(blob_from_dlpack(&c, t, 0), BLOB_EINVAL);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(blob_last_error(), "data is memory of GPU 1"), "%s", blob_last_error());
    ck_assert_uint_eq(fake_get_stats().pointer_queries, 1);
    t->dl_tensor.data = made;

    float *fresh = NULL;
    if (device) {
        ck_ok(blob__be->device_alloc(24 * sizeof(float), (void **)&fresh));
        ck_ok(blob_syncedmem_set_gpu_data(blob_data_mem(a), fresh, 24 * sizeof(float)));
        ck_status(blob_from_dlpack(&c, t, 0), BLOB_EINVAL);
        ck_assert_msg(strstr(blob_last_error(), "data is host memory"), "%s", blob_last_error());
        ck_assert_uint_eq(fake_get_stats().pointer_queries, 2);
    }
    blob_dlpack_delete(t);
    blob_free(a);
    blob__be->device_free(fresh);
    ck_ok(blob_device_set(1));
    blob__be->device_free(dev1);
    ck_ok(blob_device_set(0));
    free(ref);
}
END_TEST

/* ---- bad input: a clear error, no blob, the deleter not called ---- */

typedef struct {
    const char *name;
    blob_status expect; /* BLOB_OK: accepted */
    void (*mutate)(producer *p, float *buf);
} bad_case;

/* The tensor given with strides (s0, s1). */
static void with_strides(producer *p, int64_t s0, int64_t s1)
{
    p->strides[0] = s0, p->strides[1] = s1;
    p->t.dl_tensor.strides = p->strides;
}

static void m_ndim33(producer *p, float *b)
{
    (void)b;
    for (int i = 0; i < 33; i++)
        p->shape[i] = 1;
    p->t.dl_tensor.ndim = 33;
}
static void m_ndim_neg(producer *p, float *b)
{
    (void)b;
    p->t.dl_tensor.ndim = -1;
}
static void m_shape_null(producer *p, float *b)
{
    (void)b;
    p->t.dl_tensor.shape = NULL;
}
static void m_dim_neg(producer *p, float *b)
{
    (void)b;
    p->shape[1] = -3;
}
static void m_overflow(producer *p, float *b)
{
    (void)b;
    p->shape[0] = (int64_t)1 << 62;
}
static void m_transposed(producer *p, float *b)
{
    (void)b;
    with_strides(p, 1, 2);
}
static void m_gapped(producer *p, float *b)
{
    (void)b;
    with_strides(p, 6, 2);
}
static void m_offset_odd(producer *p, float *b)
{
    (void)b;
    p->t.dl_tensor.byte_offset = 2;
}
static void m_offset_wraps(producer *p, float *b)
{
    (void)b;
    p->t.dl_tensor.byte_offset = UINT64_MAX - 3;
}
static void m_misaligned(producer *p, float *b) { p->t.dl_tensor.data = (char *)b + 1; }
static void m_data_null(producer *p, float *b)
{
    (void)b;
    p->t.dl_tensor.data = NULL;
}
/* accepted */
static void m_compact(producer *p, float *b)
{
    (void)b;
    with_strides(p, 3, 1);
}
static void m_unit_dims(producer *p, float *b)
{
    (void)b;
    p->shape[0] = 2, p->shape[1] = 1, p->shape[2] = 3;
    p->strides[0] = 3, p->strides[1] = -77, p->strides[2] = 1; /* size 1: any stride */
    p->t.dl_tensor.ndim = 3;
    p->t.dl_tensor.strides = p->strides;
}
static void m_empty(producer *p, float *b)
{
    (void)b;
    p->shape[0] = 0;
    with_strides(p, 12345, -1); /* count 0: any strides, no data */
    p->t.dl_tensor.data = NULL;
}
static void m_scalar(producer *p, float *b)
{
    (void)b;
    p->t.dl_tensor.ndim = 0;
    p->t.dl_tensor.shape = NULL;
}
static void m_offset_ok(producer *p, float *b)
{
    (void)b;
    p->shape[0] = 1;
    p->t.dl_tensor.byte_offset = 3 * sizeof(float);
}

static const bad_case bad_cases[] = {
    {"ndim 33", BLOB_EINVAL, m_ndim33},
    {"ndim -1", BLOB_EINVAL, m_ndim_neg},
    {"NULL shape", BLOB_EINVAL, m_shape_null},
    {"negative dim", BLOB_EINVAL, m_dim_neg},
    {"count overflows", BLOB_EOVERFLOW, m_overflow},
    {"transposed strides", BLOB_EINVAL, m_transposed},
    {"gapped strides", BLOB_EINVAL, m_gapped},
    {"byte_offset not a multiple of 4", BLOB_EINVAL, m_offset_odd},
    {"byte_offset wraps the address", BLOB_EINVAL, m_offset_wraps},
    {"misaligned data", BLOB_EINVAL, m_misaligned},
    {"NULL data", BLOB_EINVAL, m_data_null},
    {"compact strides", BLOB_OK, m_compact},
    {"size-1 dims with any stride", BLOB_OK, m_unit_dims},
    {"count 0, any strides, NULL data", BLOB_OK, m_empty},
    {"0 axes", BLOB_OK, m_scalar},
    {"aligned byte_offset", BLOB_OK, m_offset_ok},
};
#define N_BAD_CASES ((int)(sizeof bad_cases / sizeof bad_cases[0]))

/* DLPack dtypes that are no blob dtype. */
static const struct {
    const char *name;
    DLDataType dtype;
} bad_dtypes[] = {
    {"int16", {kDLInt, 16, 1}},
    {"float8", {kDLFloat, 8, 1}},
    {"2 lanes", {kDLFloat, 32, 2}},
    {"0 lanes", {kDLFloat, 32, 0}},
    {"32-bit bfloat", {kDLBfloat, 32, 1}},
    {"complex64", {kDLComplex, 64, 1}},
    {"uint16", {kDLUInt, 16, 1}},
};
#define N_BAD_DTYPES ((int)(sizeof bad_dtypes / sizeof bad_dtypes[0]))

/* Devices of the tensor (host memory), and what the import says of each. */
static const struct {
    const char *name;
    blob_status expect;
    DLDevice device;
} device_cases[] = {
    {"OpenCL", BLOB_EINVAL, {kDLOpenCL, 0}},
    {"CUDA managed", BLOB_EINVAL, {kDLCUDAManaged, 0}},
    {"ROCm", BLOB_EINVAL, {kDLROCM, 0}},
    {"device type 999", BLOB_EINVAL, {(DLDeviceType)999, 0}},
    {"CPU device_id 1", BLOB_EINVAL, {kDLCPU, 1}},
    {"CUDA device not present", BLOB_ERANGE, {kDLCUDA, FAKE_DEVICES}},
    {"CUDA device -1", BLOB_ERANGE, {kDLCUDA, -1}},
    {"kDLCUDAHost", BLOB_OK, {kDLCUDAHost, 0}},
};
#define N_DEVICE_CASES ((int)(sizeof device_cases / sizeof device_cases[0]))

/* Import a 2x3 float32 tensor of host memory changed by mutate, or given dtype or device
 * instead of its own (each where not NULL): expect, a clear error (no blob, the deleter not
 * called) or the blob of the tensor's elements. */
static void import_case(const char *name, blob_status expect, void (*mutate)(producer *, float *),
                        const DLDataType *dtype, const DLDevice *device)
{
    float buf[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int64_t shape[] = {2, 3};
    producer p;
    producer_init(&p, buf, cpu_dev, BLOB_FLOAT32, 2, shape);
    if (mutate)
        mutate(&p, buf);
    if (dtype)
        p.t.dl_tensor.dtype = *dtype;
    if (device)
        p.t.dl_tensor.device = *device;
    blob *b = (blob *)&b;
    blob_status st = blob_from_dlpack(&b, &p.t, BLOB_HOST_ONLY);
    ck_assert_msg(st == expect, "%s: %s (%s), expected %s", name, blob_status_name(st),
                  blob_last_error(), blob_status_name(expect));
    if (st != BLOB_OK) {
        ck_assert_ptr_null(b);
        ck_assert_int_eq(p.deleted, 0);
        ck_assert_msg(strlen(blob_last_error()) > 0, "%s: no detail", name);
        return; /* the fixture checks that nothing was left allocated */
    }
    int64_t count = 1;
    for (int i = 0; i < p.t.dl_tensor.ndim; i++)
        count *= p.shape[i];
    ck_assert_int_eq(blob_count(b), count);
    if (count) {
        const void *r;
        ck_ok(blob_cpu_data(b, &r));
        ck_assert_ptr_eq(r, (char *)buf + p.t.dl_tensor.byte_offset);
    }
    blob_free(b);
    ck_assert_int_eq(p.deleted, 1);
}

START_TEST(test_import_bad_input)
{
    import_case(bad_cases[_i].name, bad_cases[_i].expect, bad_cases[_i].mutate, NULL, NULL);
}
END_TEST

START_TEST(test_import_bad_dtype)
{
    import_case(bad_dtypes[_i].name, BLOB_EINVAL, NULL, &bad_dtypes[_i].dtype, NULL);
}
END_TEST

START_TEST(test_import_device_kind)
{
    import_case(device_cases[_i].name, device_cases[_i].expect, NULL, NULL,
                &device_cases[_i].device);
}
END_TEST

START_TEST(test_import_bad_arguments)
{
    float buf[6];
    int64_t shape[] = {6};
    producer p;
    producer_init(&p, buf, cpu_dev, BLOB_FLOAT32, 1, shape);
    blob *b = (blob *)&b;
    ck_status(blob_from_dlpack(&b, NULL, BLOB_HOST_ONLY), BLOB_EINVAL);
    ck_assert_ptr_null(b);
    ck_status(blob_from_dlpack(NULL, &p.t, BLOB_HOST_ONLY), BLOB_EINVAL);
    ck_status(blob_from_dlpack(&b, &p.t, 7), BLOB_ERANGE); /* no such GPU for host memory */
    ck_status(blob_from_dlpack(&b, &p.t, -3), BLOB_EINVAL);
    ck_assert_ptr_null(b);
    ck_assert_int_eq(p.deleted, 0);
    /* a failed import leaves the tensor usable: the caller may retry */
    ck_ok(blob_from_dlpack(&b, &p.t, BLOB_HOST_ONLY));
    blob_free(b);
    ck_assert_int_eq(p.deleted, 1);
}
END_TEST

/* The k-th allocation of an import fails, once or from then on: a clean error, no blob,
 * the deleter not called, nothing leaked. loop: host-only, GPU-bound host, device. */
START_TEST(test_import_alloc_failure)
{
    int64_t shape[] = {3, 4};
    float host[12], *dev = NULL;
    if (_i == 2)
        ck_ok(blob__be->device_alloc(sizeof host, (void **)&dev));
    for (int persistent = 0; persistent < 2; persistent++) {
        for (uint64_t k = 1;; k++) {
            producer p;
            producer_init(&p, _i == 2 ? (void *)dev : host,
                          _i == 2 ? (DLDevice){kDLCUDA, 0} : cpu_dev, BLOB_FLOAT32, 2, shape);
            blob *b = (blob *)&b;
            fake_fail_alloc_at(k, persistent);
            blob_status st = blob_from_dlpack(&b, &p.t, _i == 1 ? 0 : BLOB_HOST_ONLY);
            fake_fail_alloc_at(0, false);
            if (st == BLOB_OK) {
                ck_assert_msg(k > 1, "the import allocated nothing");
                blob_free(b);
                ck_assert_int_eq(p.deleted, 1);
                break;
            }
            ck_assert_msg(st == BLOB_ENOMEM, "k=%llu: %s", (unsigned long long)k,
                          blob_status_name(st));
            ck_assert_ptr_null(b);
            ck_assert_int_eq(p.deleted, 0);
            ck_assert_msg(k < 8, "never succeeded");
        }
    }
    blob__be->device_free(dev);
}
END_TEST

/* ---- the syncedmem layer's borrowing with a release ---- */

static int released;
static void count_release(void *ctx)
{
    released++;
    *(int *)ctx += 1;
}

START_TEST(test_syncedmem_release)
{
    blob_syncedmem *m;
    float a[4], b[4];
    int ra = 0, rb = 0;
    released = 0;
    ck_ok(blob_syncedmem_create(&m, sizeof a, 0));
    /* a failed borrow calls nothing and keeps the old side */
    ck_status(blob_syncedmem_set_cpu_data_release(m, a, sizeof a - 1, count_release, &ra),
              BLOB_EINVAL);
    ck_status(blob_syncedmem_set_cpu_data_release(m, NULL, sizeof a, count_release, &ra),
              BLOB_EINVAL);
    ck_assert_int_eq(released, 0);
    ck_ok(blob_syncedmem_set_cpu_data_release(m, a, sizeof a, count_release, &ra));
    ck_ok(blob_syncedmem_set_cpu_data_release(m, b, sizeof b, count_release, &rb));
    ck_assert_int_eq(ra, 1); /* replaced: released */
    ck_assert_int_eq(rb, 0);
    blob_syncedmem_retain(m);
    blob_syncedmem_free(m);
    ck_assert_int_eq(rb, 0); /* a reference remains */
    blob_syncedmem_free(m);
    ck_assert_int_eq(rb, 1);
    ck_assert_int_eq(released, 2);

    /* plain borrowing (NULL release) still works; host-only blocks refuse a device side */
    blob_syncedmem *h;
    ck_ok(blob_syncedmem_create(&h, sizeof a, BLOB_HOST_ONLY));
    ck_ok(blob_syncedmem_set_cpu_data_release(h, a, sizeof a, NULL, NULL));
    ck_status(blob_syncedmem_set_gpu_data_release(h, b, sizeof b, count_release, &rb), BLOB_ENODEV);
    ck_status(blob_syncedmem_set_gpu_data_release(NULL, b, sizeof b, count_release, &rb),
              BLOB_EINVAL);
    blob_syncedmem_free(h);
    ck_assert_int_eq(released, 2);

    /* size 0: NULL memory, still released exactly once */
    blob_syncedmem *z;
    int rz = 0;
    ck_ok(blob_syncedmem_create(&z, 0, 0));
    ck_ok(blob_syncedmem_set_gpu_data_release(z, NULL, 0, count_release, &rz));
    blob_syncedmem_free(z);
    ck_assert_int_eq(rz, 1);
}
END_TEST

/* ---- the default backend: a million round trips in flat memory ---- */

static long resident_kib(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

START_TEST(test_million_round_trips)
{
    int64_t shape[] = {64, 64};
    blob *a;
    ck_ok(blob_create(&a, BLOB_FLOAT32, BLOB_HOST_ONLY, 2, shape));
    void *w;
    ck_ok(blob_mutable_cpu_data(a, &w));
    long before = 0;
    for (int i = 0; i < 1000000; i++) {
        if (i == 10000)
            before = resident_kib();
        DLManagedTensor *t;
        blob *c;
        blob_status st =
            blob_to_dlpack(a, BLOB_PART_DATA, BLOB_DLPACK_HOST, BLOB_DLPACK_WRITABLE, NULL, &t);
        if (st == BLOB_OK && (st = blob_from_dlpack(&c, t, BLOB_HOST_ONLY)) != BLOB_OK)
            blob_dlpack_delete(t);
        ck_assert_msg(st == BLOB_OK, "cycle %d: %s", i, blob_last_error());
        blob_free(c);
    }
    long after = resident_kib();
    blob_free(a);
#ifdef UNDER_ASAN
    printf("dlpack: 10^6 round trips done; the resident-memory check is skipped under "
           "AddressSanitizer (its quarantine holds freed memory)\n");
    (void)before, (void)after;
#else
    ck_assert_msg(before > 0 && after - before < 1024,
                  "resident memory grew from %ld KiB to %ld KiB over 10^6 round trips", before,
                  after);
#endif
}
END_TEST

/* Device memory of a GPU this process does not have: ENODEV without GPUs, ERANGE past
 * the last one (the default backend, whatever this machine has). */
START_TEST(test_import_missing_gpu)
{
    int n = blob_device_count();
    float buf[4];
    int64_t shape[] = {4};
    producer p;
    producer_init(&p, buf, (DLDevice){kDLCUDA, n}, BLOB_FLOAT32, 1, shape);
    blob *b = (blob *)&b;
    ck_status(blob_from_dlpack(&b, &p.t, BLOB_HOST_ONLY), n ? BLOB_ERANGE : BLOB_ENODEV);
    ck_assert_ptr_null(b);
    ck_assert_int_eq(p.deleted, 0);
}
END_TEST

/* ---- a real GPU ---- */

/* Import a float32 tensor of 4 at data, named as dev, and expect st; the producer's
 * deleter runs only when the import succeeded, at the blob's free. */
static void import_place(void *data, DLDevice dev, blob_status st)
{
    int64_t shape[] = {4};
    producer p;
    producer_init(&p, data, dev, BLOB_FLOAT32, 1, shape);
    blob *b = NULL;
    ck_status(blob_from_dlpack(&b, &p.t, BLOB_HOST_ONLY), st);
    ck_assert_int_eq(p.deleted, 0);
    blob_free(b);
    ck_assert_int_eq(p.deleted, st == BLOB_OK);
}

/* The driver's view of a tensor's memory: host memory named as GPU 0's and GPU 0's named
 * as host memory are refused; pinned host memory named as kDLCUDAHost is taken. */
START_TEST(test_gpu_wrong_place)
{
    float host[4];
    void *dev, *pinned;
    ck_ok(blob__be->device_alloc(sizeof host, &dev));
    ck_ok(blob__be->pinned_alloc(sizeof host, &pinned));
    import_place(host, (DLDevice){kDLCUDA, 0}, BLOB_EINVAL);
    import_place(dev, (DLDevice){kDLCPU, 0}, BLOB_EINVAL);
    import_place(pinned, (DLDevice){kDLCUDAHost, 0}, BLOB_OK);
    blob__be->pinned_free(pinned);
    blob__be->device_free(dev);
}
END_TEST

/* A tensor from another GPU: GPU 1's memory named as GPU 0's is refused. */
START_TEST(test_gpu_other_gpus_memory)
{
    void *dev;
    ck_ok(blob_device_set(1));
    ck_ok(blob__be->device_alloc(4 * sizeof(float), &dev));
    ck_ok(blob_device_set(0));
    import_place(dev, (DLDevice){kDLCUDA, 0}, BLOB_EINVAL);
    ck_ok(blob_device_set(1));
    blob__be->device_free(dev);
    ck_ok(blob_device_set(0));
}
END_TEST

/* Device memory both ways with the library on each side: a blob exported on a stream
 * of its own, imported as a second blob, scaled through the second, read through the
 * first; the producer's blob freed first. loop: dtype. */
START_TEST(test_gpu_round_trip)
{
    blob_dtype dt = (blob_dtype)_i;
    int64_t shape[] = {257, 129};
    int64_t n = 257 * 129;
    blob *a;
    void *w, *s;
    ck_ok(blob_create(&a, dt, 0, 2, shape));
    ck_ok(blob_mutable_cpu_data(a, &w));
    test_seed(11);
    test_fill(dt, w, n, -3.0, 3.0);
    double *ref = malloc((size_t)n * sizeof *ref);
    for (int64_t i = 0; i < n; i++)
        ref[i] = 2.0 * test_get(dt, w, i);
    ck_ok(blob_stream_create(&s));
    DLManagedTensor *t;
    ck_ok(blob_to_dlpack(a, BLOB_PART_DATA, BLOB_DLPACK_DEVICE, BLOB_DLPACK_WRITABLE, s, &t));
    ck_assert_int_eq(t->dl_tensor.device.device_type, kDLCUDA);
    producer p;
    producer_wrap(&p, t);
    blob *c;
    ck_ok(blob_from_dlpack(&c, &p.t, BLOB_HOST_ONLY));
    void *g;
    ck_ok(blob_mutable_gpu_data(c, &g));
    ck_assert_ptr_eq(g, t->dl_tensor.data);
    ck_ok(blob_gpu_scal(dt, n, 2.0, g)); /* a write through the importer ... */
    const void *r;
    ck_ok(blob_cpu_data(a, &r)); /* ... read through the exporter */
    double err = test_rel_err(dt, r, ref, n, 1e-6);
    ck_assert_msg(err == 0, "exporter sees relative error %g", err);
    blob_free(a);
    ck_assert_int_eq(p.deleted, 0);
    ck_ok(blob_cpu_data(c, &r));
    err = test_rel_err(dt, r, ref, n, 1e-6);
    ck_assert_msg(err == 0, "importer sees relative error %g", err);
    blob_free(c);
    ck_assert_int_eq(p.deleted, 1);
    ck_ok(blob_stream_destroy(s));
    free(ref);
}
END_TEST

START_TEST(test_gpu_pinned_host)
{
    int64_t shape[] = {100};
    blob *a;
    const void *h;
    ck_ok(blob_create(&a, BLOB_FLOAT32, 0, 1, shape));
    ck_ok(blob_cpu_data(a, &h));
    ck_assert(blob_syncedmem_host_pinned(blob_data_mem(a)));
    DLManagedTensor *t, *u;
    ck_ok(blob_to_dlpack(a, BLOB_PART_DATA, BLOB_DLPACK_HOST, BLOB_DLPACK_CUDA_HOST, NULL, &t));
    ck_assert_int_eq(t->dl_tensor.device.device_type, kDLCUDAHost);
    ck_ok(blob_to_dlpack(a, BLOB_PART_DATA, BLOB_DLPACK_HOST, 0, NULL, &u));
    ck_assert_int_eq(u->dl_tensor.device.device_type, kDLCPU);
    ck_assert_ptr_eq(t->dl_tensor.data, h);
    blob_free(a);
    blob *c;
    ck_ok(blob_from_dlpack(&c, t, 0)); /* pinned memory back in: a host side */
    const void *g;
    ck_ok(blob_gpu_data(c, &g));
    blob_free(c);
    blob_dlpack_delete(u);
}
END_TEST

/* ---- DLPack 1.0: versioned tensors (only with a header that has them: "dlpack1") ---- */

#ifdef BLOB_DLPACK_VERSIONED
typedef struct {
    DLManagedTensorVersioned t;
    int64_t shape[2];
    int deleted;
} vproducer;

static void vproducer_delete(DLManagedTensorVersioned *t)
{
    ((vproducer *)t->manager_ctx)->deleted++;
}

static void vproducer_init(vproducer *p, float *data, uint64_t flags)
{
    memset(p, 0, sizeof *p);
    p->shape[0] = 2;
    p->shape[1] = 3;
    p->t.version = (DLPackVersion){DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    p->t.dl_tensor = (DLTensor){data, cpu_dev, 2, dl_type(BLOB_FLOAT32), p->shape, NULL, 0};
    p->t.flags = flags;
    p->t.manager_ctx = p;
    p->t.deleter = vproducer_delete;
}
#endif

/* An export as the unversioned one, with the header's version and the read-only flag
 * unless writable (loop: read-only, writable); the blob may go first. */
START_TEST(test_versioned_export)
{
#ifdef BLOB_DLPACK_VERSIONED
    bool writable = _i;
    double *ref;
    blob *b = random_blob(BLOB_FLOAT32, BLOB_HOST_ONLY, &ref);
    const void *host;
    ck_ok(blob_cpu_data(b, &host));
    DLManagedTensorVersioned *t;
    ck_ok(blob_to_dlpack_versioned(b, BLOB_PART_DATA, BLOB_DLPACK_HOST,
                                   writable ? BLOB_DLPACK_WRITABLE : 0, NULL, &t));
    ck_assert_uint_eq(t->version.major, DLPACK_MAJOR_VERSION);
    ck_assert_uint_eq(t->version.minor, DLPACK_MINOR_VERSION);
    ck_assert_uint_eq(t->flags, writable ? 0 : DLPACK_FLAG_BITMASK_READ_ONLY);
    const DLTensor *d = &t->dl_tensor;
    ck_assert_ptr_eq(d->data, host);
    ck_assert_int_eq(d->device.device_type, kDLCPU);
    ck_assert_int_eq(d->ndim, 3);
    ck_assert_int_eq(d->dtype.bits, 32);
    ck_assert_int_eq(d->shape[2], 4);
    ck_assert_int_eq(d->strides[0], 12);
    blob_free(b);
    assert_same(BLOB_FLOAT32, d->data, ref, 24);
    blob_dlpack_versioned_delete(t);
    blob_dlpack_versioned_delete(NULL);
    free(ref);
#endif
}
END_TEST

/* Import borrows the memory and calls the deleter once; a read-only tensor, another
 * major version and NULL arguments are refused with the tensor left to its owner. */
START_TEST(test_versioned_import)
{
#ifdef BLOB_DLPACK_VERSIONED
    float data[6] = {1, 2, 3, 4, 5, 6};
    vproducer p;
    vproducer_init(&p, data, 0);
    blob *b;
    ck_ok(blob_from_dlpack_versioned(&b, &p.t, BLOB_HOST_ONLY));
    const void *r;
    ck_ok(blob_cpu_data(b, &r));
    ck_assert_ptr_eq(r, data);
    ck_assert_int_eq(blob_count(b), 6);
    blob_free(b);
    ck_assert_int_eq(p.deleted, 1);

    vproducer_init(&p, data, DLPACK_FLAG_BITMASK_READ_ONLY);
    b = (blob *)&b;
    ck_status(blob_from_dlpack_versioned(&b, &p.t, BLOB_HOST_ONLY), BLOB_EINVAL);
    ck_assert_ptr_null(b);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "read-only"));
    vproducer_init(&p, data, 0);
    p.t.version.major = DLPACK_MAJOR_VERSION + 1;
    ck_status(blob_from_dlpack_versioned(&b, &p.t, BLOB_HOST_ONLY), BLOB_EINVAL);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "DLPack version"));
    vproducer_init(&p, data, 0);
    p.t.dl_tensor.dtype = (DLDataType){kDLComplex, 64, 1}; /* the unversioned checks apply */
    ck_status(blob_from_dlpack_versioned(&b, &p.t, BLOB_HOST_ONLY), BLOB_EINVAL);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "blob_from_dlpack_versioned"));
    ck_status(blob_from_dlpack_versioned(&b, NULL, BLOB_HOST_ONLY), BLOB_EINVAL);
    ck_status(blob_from_dlpack_versioned(NULL, &p.t, BLOB_HOST_ONLY), BLOB_EINVAL);
    ck_assert_int_eq(p.deleted, 0);
    DLManagedTensorVersioned *t = (DLManagedTensorVersioned *)&t;
    ck_status(blob_to_dlpack_versioned(NULL, BLOB_PART_DATA, BLOB_DLPACK_HOST, 0, NULL, &t),
              BLOB_EINVAL);
    ck_assert_ptr_null(t);
#endif
}
END_TEST

/* A writable export imported again: the same memory, writes seen both ways, the block
 * released when the importing blob goes. */
START_TEST(test_versioned_round_trip)
{
#ifdef BLOB_DLPACK_VERSIONED
    double *ref;
    blob *a = random_blob(BLOB_FLOAT64, 0, &ref);
    DLManagedTensorVersioned *t;
    ck_ok(blob_to_dlpack_versioned(a, BLOB_PART_DATA, BLOB_DLPACK_HOST, BLOB_DLPACK_WRITABLE, NULL,
                                   &t));
    blob *c;
    ck_ok(blob_from_dlpack_versioned(&c, t, 0));
    const void *pc;
    ck_ok(blob_cpu_data(c, &pc));
    ck_assert_ptr_eq(pc, t->dl_tensor.data);
    blob_free(a);
    void *w;
    ck_ok(blob_mutable_cpu_data(c, &w));
    test_put(BLOB_FLOAT64, w, 3, 9.0);
    ref[3] = 9.0;
    assert_same(BLOB_FLOAT64, t->dl_tensor.data, ref, 24);
    blob_free(c); /* the export's deleter drops the last reference: fake_teardown checks */
    free(ref);
#endif
}
END_TEST

/* An allocation failure at every allocation of a versioned export: BLOB_ENOMEM,
 * nothing made, the blob as it was. */
START_TEST(test_versioned_alloc_failure)
{
#ifdef BLOB_DLPACK_VERSIONED
    for (uint64_t k = 1;; k++) {
        int64_t shape[] = {16};
        blob *b;
        void *w;
        ck_ok(blob_create(&b, BLOB_FLOAT32, 0, 1, shape));
        ck_ok(blob_mutable_gpu_data(b, &w));
        blob_head before = head(b);
        DLManagedTensorVersioned *t = (DLManagedTensorVersioned *)&t;
        fake_fail_alloc_at(k, false);
        blob_status st = blob_to_dlpack_versioned(b, BLOB_PART_DATA, BLOB_DLPACK_HOST,
                                                  BLOB_DLPACK_WRITABLE, NULL, &t);
        fake_fail_alloc_at(0, false);
        if (st == BLOB_OK) {
            ck_assert_msg(k > 1, "succeeded with an allocation failing");
            blob_free(b);
            blob_dlpack_versioned_delete(t);
            break;
        }
        assert_export_failed(st, k, t, b, before);
        blob_free(b);
        ck_assert_msg(k < 8, "never succeeded");
    }
#endif
}
END_TEST

void dlpack_suite(Suite *s)
{
    TCase *tc = suite_case(s, "fake", NULL, 0, fake_setup, fake_teardown);
    add_loop_tests(tc, 0, 4, test_export_host);
    add_loop_tests(tc, 0, 2, test_export_heads);
    add_tests(tc, test_export_other_device, test_export_stream_order, test_export_lifetimes,
              test_export_special_shapes, test_export_bad_arguments);
    add_loop_tests(tc, 0, 4, test_export_alloc_failure, test_import_host);
    add_loop_tests(tc, 0, LIFE_COUNT, test_import_lifetimes);
    add_loop_tests(tc, 0, FAKE_DEVICES, test_import_device);
    add_tests(tc, test_import_device_freed_elsewhere, test_import_wrong_place,
              test_import_device_no_wait);
    add_loop_tests(tc, 0, 4, test_round_trip);
    add_loop_tests(tc, 0, 2, test_round_trip_known_place);
    add_loop_tests(tc, 0, N_BAD_CASES, test_import_bad_input);
    add_loop_tests(tc, 0, N_BAD_DTYPES, test_import_bad_dtype);
    add_loop_tests(tc, 0, N_DEVICE_CASES, test_import_device_kind);
    add_tests(tc, test_import_bad_arguments);
    add_loop_tests(tc, 0, 3, test_import_alloc_failure);
    add_tests(tc, test_syncedmem_release);

    tc = suite_case(s, "host", NULL, 120, NULL, NULL);
    add_tests(tc, test_million_round_trips, test_import_missing_gpu);

    tc = suite_case(s, "versioned", "dlpack1", 0, fake_setup, fake_teardown);
    add_loop_tests(tc, 0, 2, test_versioned_export);
    add_tests(tc, test_versioned_import, test_versioned_round_trip, test_versioned_alloc_failure);

    tc = suite_case(s, "gpu", "gpu", 0, NULL, NULL);
    add_loop_tests(tc, 0, 2, test_gpu_round_trip);
    add_tests(tc, test_gpu_pinned_host, test_gpu_wrong_place);
    add_tests(suite_case(s, "gpu2", "gpu gpu2", 0, NULL, NULL), test_gpu_other_gpus_memory);
}

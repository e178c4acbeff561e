/* The head-state machine, through the fake device (exact transfer and allocation
 * counts) and, where a GPU is present, through CUDA. */
#include <stdlib.h>
#include <string.h>

#include "../src/core/core.h"
#include "fake_backend.h"
#include "testutil.h"

enum { N = 256 }; /* floats per test block */

typedef enum { ACC_CPU, ACC_MUT_CPU, ACC_GPU, ACC_MUT_GPU } access;

static blob_status do_access(blob_syncedmem *m, access a, void **p)
{
    switch (a) {
    case ACC_CPU: return blob_syncedmem_cpu_data(m, (const void **)p);
    case ACC_MUT_CPU: return blob_syncedmem_mutable_cpu_data(m, p);
    case ACC_GPU: return blob_syncedmem_gpu_data(m, (const void **)p);
    case ACC_MUT_GPU: return blob_syncedmem_mutable_gpu_data(m, p);
    }
    return BLOB_EINVAL;
}

/* A block of N floats brought to `head` with recognisable contents (i + 1). */
static blob_syncedmem *block_at(blob_head head)
{
    blob_syncedmem *m;
    void *p;
    ck_ok(blob_syncedmem_create(&m, N * sizeof(float), BLOB_DEVICE_DEFAULT));
    if (head == BLOB_HEAD_UNINITIALIZED)
        return m;
    ck_ok(blob_syncedmem_mutable_cpu_data(m, &p));
    for (int i = 0; i < N; i++)
        ((float *)p)[i] = (float)(i + 1);
    if (head == BLOB_HEAD_AT_GPU)
        ck_ok(blob_syncedmem_mutable_gpu_data(m, &p));
    if (head == BLOB_HEAD_SYNCED)
        ck_ok(blob_syncedmem_gpu_data(m, (const void **)&p));
    ck_assert_int_eq(blob_syncedmem_head(m), head);
    return m;
}

static void assert_contents(const void *p, bool zeros)
{
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(((const float *)p)[i], zeros ? 0.0f : (float)(i + 1));
}

/* One cell of the table: start head, access, expected head, copies, allocations. */
typedef struct {
    blob_head from;
    access acc;
    blob_head to;
    int h2d, d2h, pinned_allocs, device_allocs;
} transition;

static const transition table[] = {
    {BLOB_HEAD_UNINITIALIZED, ACC_CPU, BLOB_HEAD_AT_CPU, 0, 0, 1, 0},
    {BLOB_HEAD_UNINITIALIZED, ACC_MUT_CPU, BLOB_HEAD_AT_CPU, 0, 0, 1, 0},
    {BLOB_HEAD_UNINITIALIZED, ACC_GPU, BLOB_HEAD_AT_GPU, 0, 0, 0, 1},
    {BLOB_HEAD_UNINITIALIZED, ACC_MUT_GPU, BLOB_HEAD_AT_GPU, 0, 0, 0, 1},
    {BLOB_HEAD_AT_CPU, ACC_CPU, BLOB_HEAD_AT_CPU, 0, 0, 0, 0},
    {BLOB_HEAD_AT_CPU, ACC_MUT_CPU, BLOB_HEAD_AT_CPU, 0, 0, 0, 0},
    {BLOB_HEAD_AT_CPU, ACC_GPU, BLOB_HEAD_SYNCED, 1, 0, 0, 1},
    {BLOB_HEAD_AT_CPU, ACC_MUT_GPU, BLOB_HEAD_AT_GPU, 1, 0, 0, 1},
    {BLOB_HEAD_AT_GPU, ACC_CPU, BLOB_HEAD_SYNCED, 0, 1, 0, 0},
    {BLOB_HEAD_AT_GPU, ACC_MUT_CPU, BLOB_HEAD_AT_CPU, 0, 1, 0, 0},
    {BLOB_HEAD_AT_GPU, ACC_GPU, BLOB_HEAD_AT_GPU, 0, 0, 0, 0},
    {BLOB_HEAD_AT_GPU, ACC_MUT_GPU, BLOB_HEAD_AT_GPU, 0, 0, 0, 0},
    {BLOB_HEAD_SYNCED, ACC_CPU, BLOB_HEAD_SYNCED, 0, 0, 0, 0},
    {BLOB_HEAD_SYNCED, ACC_MUT_CPU, BLOB_HEAD_AT_CPU, 0, 0, 0, 0},
    {BLOB_HEAD_SYNCED, ACC_GPU, BLOB_HEAD_SYNCED, 0, 0, 0, 0},
    {BLOB_HEAD_SYNCED, ACC_MUT_GPU, BLOB_HEAD_AT_GPU, 0, 0, 0, 0},
};

START_TEST(test_transition)
{
    const transition *t = &table[_i];
    blob_syncedmem *m = block_at(t->from);
    fake_reset_counts();
    void *p = NULL;
    ck_ok(do_access(m, t->acc, &p));
    fake_drain();
    fake_stats s = fake_get_stats();
    ck_assert_int_eq(blob_syncedmem_head(m), t->to);
    ck_assert_int_eq(s.h2d, t->h2d);
    ck_assert_int_eq(s.d2h, t->d2h);
    ck_assert_int_eq(s.pinned_allocs, t->pinned_allocs);
    ck_assert_int_eq(s.device_allocs, t->device_allocs);
    ck_assert_int_eq(s.host_allocs, 0);
    ck_assert_int_eq(s.violations, 0);
    assert_contents(p, t->from == BLOB_HEAD_UNINITIALIZED); /* fake device memory is readable */
    /* the first allocation of a side from UNINITIALIZED is zero-filled */
    ck_assert_int_eq(s.memsets, t->from == BLOB_HEAD_UNINITIALIZED && t->device_allocs ? 1 : 0);
    blob_syncedmem_free(m);
}
END_TEST

/* The sequence of Caffe's documentation: exactly where data crosses the bus. */
START_TEST(test_caffe_sequence)
{
    blob_syncedmem *m = block_at(BLOB_HEAD_AT_CPU);
    void *p;
    struct {
        access a;
        int h2d, d2h;
        blob_head head;
    } steps[] = {
        {ACC_GPU, 1, 0, BLOB_HEAD_SYNCED},     /* data copied cpu->gpu */
        {ACC_CPU, 1, 0, BLOB_HEAD_SYNCED},     /* no copy: both up to date */
        {ACC_MUT_GPU, 1, 0, BLOB_HEAD_AT_GPU}, /* no copy */
        {ACC_MUT_GPU, 1, 0, BLOB_HEAD_AT_GPU}, /* still on the GPU */
        {ACC_CPU, 1, 1, BLOB_HEAD_SYNCED},     /* gpu->cpu: the GPU side was modified */
        {ACC_GPU, 1, 1, BLOB_HEAD_SYNCED},     /* no copy */
        {ACC_MUT_CPU, 1, 1, BLOB_HEAD_AT_CPU}, /* still no copy */
        {ACC_MUT_GPU, 2, 1, BLOB_HEAD_AT_GPU}, /* cpu->gpu */
        {ACC_MUT_CPU, 2, 2, BLOB_HEAD_AT_CPU}, /* gpu->cpu */
    };
    fake_reset_counts();
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        ck_ok(do_access(m, steps[i].a, &p));
        fake_stats s = fake_get_stats();
        ck_assert_msg(s.h2d == (uint64_t)steps[i].h2d && s.d2h == (uint64_t)steps[i].d2h,
                      "step %zu: %llu h2d %llu d2h", i, (unsigned long long)s.h2d,
                      (unsigned long long)s.d2h);
        ck_assert_int_eq(blob_syncedmem_head(m), steps[i].head);
        assert_contents(p, false);
    }
    ck_assert_int_eq(fake_get_stats().device_allocs, 1); /* buffers are reused */
    blob_syncedmem_free(m);
}
END_TEST

START_TEST(test_create_lazy_and_queries)
{
    blob_syncedmem *m;
    ck_ok(blob_syncedmem_create(&m, 40, BLOB_DEVICE_DEFAULT));
    ck_assert_int_eq(fake_get_stats().pinned_allocs + fake_get_stats().device_allocs, 0);
    ck_assert_uint_eq(blob_syncedmem_size(m), 40);
    ck_assert_int_eq(blob_syncedmem_head(m), BLOB_HEAD_UNINITIALIZED);
    ck_assert_int_eq(blob_syncedmem_device(m), 0);
    ck_assert(!blob_syncedmem_host_pinned(m));
    ck_assert(!blob_syncedmem_pending(m));
    blob_syncedmem_free(m);
    blob_syncedmem_free(NULL);
    ck_status(blob_syncedmem_create(&m, 4, 7), BLOB_ERANGE);
    ck_assert_ptr_null(m);
    ck_status(blob_syncedmem_create(&m, 4, -3), BLOB_EINVAL);
    ck_status(blob_syncedmem_create(NULL, 4, 0), BLOB_EINVAL);
}
END_TEST

START_TEST(test_pinned_vs_pageable)
{
    blob_syncedmem *gpu, *host;
    const void *p;
    ck_ok(blob_syncedmem_create(&gpu, 64, 0));
    ck_ok(blob_syncedmem_create(&host, 64, BLOB_HOST_ONLY));
    ck_ok(blob_syncedmem_cpu_data(gpu, &p));
    ck_assert(blob_syncedmem_host_pinned(gpu));
    fake_stats s = fake_get_stats();
    ck_assert_int_eq(s.pinned_allocs, 1);
    uint64_t host_before = s.host_allocs;
    ck_ok(blob_syncedmem_cpu_data(host, &p));
    ck_assert(!blob_syncedmem_host_pinned(host));
    s = fake_get_stats();
    ck_assert_int_eq(s.pinned_allocs, 1);
    ck_assert_int_eq(s.host_allocs, host_before + 1);
    ck_assert_int_eq(blob_syncedmem_device(host), BLOB_HOST_ONLY);
    ck_status(blob_syncedmem_gpu_data(host, &p), BLOB_ENODEV);
    ck_status(blob_syncedmem_async_gpu_push(host, NULL), BLOB_ENODEV);
    ck_assert_int_eq(blob_syncedmem_head(host), BLOB_HEAD_AT_CPU);
    blob_syncedmem_free(gpu);
    blob_syncedmem_free(host);
}
END_TEST

START_TEST(test_borrow_host)
{
    blob_syncedmem *m = block_at(BLOB_HEAD_AT_GPU);
    float *mine = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++)
        mine[i] = (float)(i + 1);
    ck_status(blob_syncedmem_set_cpu_data(m, mine, N * sizeof(float) - 1), BLOB_EINVAL);
    ck_status(blob_syncedmem_set_cpu_data(m, NULL, N * sizeof(float)), BLOB_EINVAL);
    ck_assert_int_eq(blob_syncedmem_head(m), BLOB_HEAD_AT_GPU);
    fake_reset_counts();
    ck_ok(blob_syncedmem_set_cpu_data(m, mine, N * sizeof(float)));
    ck_assert_int_eq(blob_syncedmem_head(m), BLOB_HEAD_AT_CPU);
    ck_assert_int_eq(fake_get_stats().pinned_frees, 1); /* the owned host block went */
    const void *p;
    ck_ok(blob_syncedmem_cpu_data(m, &p));
    ck_assert_ptr_eq(p, mine);
    ck_ok(blob_syncedmem_gpu_data(m, &p)); /* the kept device side is refreshed */
    ck_assert_int_eq(fake_get_stats().h2d, 1);
    ck_assert_int_eq(fake_get_stats().device_allocs, 0);
    assert_contents(p, false);
    blob_syncedmem_free(m); /* must not free `mine` */
    ck_assert_int_eq(fake_get_stats().violations, 0);
    free(mine);
}
END_TEST

START_TEST(test_borrow_device)
{
    blob_syncedmem *m = block_at(BLOB_HEAD_AT_CPU);
    void *dev;
    ck_ok(blob__be->device_alloc(N * sizeof(float), &dev));
    memset(dev, 0, N * sizeof(float));
    ck_ok(blob_syncedmem_set_gpu_data(m, dev, N * sizeof(float)));
    ck_assert_int_eq(blob_syncedmem_head(m), BLOB_HEAD_AT_GPU);
    const void *p;
    fake_reset_counts();
    ck_ok(blob_syncedmem_cpu_data(m, &p)); /* copies out of the borrowed memory */
    ck_assert_int_eq(fake_get_stats().d2h, 1);
    ck_assert_float_eq(((const float *)p)[3], 0.0f);
    blob_syncedmem_free(m);
    ck_assert_int_eq(fake_get_stats().device_frees, 0);
    blob__be->device_free(dev);
}
END_TEST

START_TEST(test_async_push)
{
    blob_syncedmem *m = block_at(BLOB_HEAD_AT_CPU);
    void *s;
    ck_ok(blob_stream_create(&s));
    fake_reset_counts();
    ck_ok(blob_syncedmem_async_gpu_push(m, s));
    ck_assert_int_eq(blob_syncedmem_head(m), BLOB_HEAD_SYNCED);
    ck_assert(blob_syncedmem_pending(m));
    ck_assert_int_eq(fake_get_stats().h2d, 0); /* queued, not done */
    ck_assert_int_eq(fake_queued(), 1);
    const void *p;
    /* a device reader on another stream is ordered after the copy on the device: the
     * fake runs the copy when a stream is made to wait for it; the host never waits */
    ck_ok(blob_syncedmem_gpu_data(m, &p));
    assert_contents(p, false);
    fake_stats st = fake_get_stats();
    ck_assert_int_eq(st.h2d, 1);
    ck_assert_int_eq(st.event_syncs + st.device_syncs + st.stream_syncs, 0);
    ck_assert(blob_syncedmem_pending(m));
    ck_ok(blob_syncedmem_wait(m)); /* a host wait clears it */
    ck_assert_int_eq(fake_get_stats().event_syncs, 1);
    ck_assert(!blob_syncedmem_pending(m));
    ck_ok(blob_syncedmem_async_gpu_push(m, s)); /* SYNCED: nothing to do */
    ck_assert_int_eq(fake_queued(), 0);
    void *w;
    ck_ok(blob_syncedmem_mutable_gpu_data(m, &w));
    ck_status(blob_syncedmem_async_gpu_push(m, s), BLOB_ESTATE);
    blob_syncedmem *u = block_at(BLOB_HEAD_UNINITIALIZED);
    ck_status(blob_syncedmem_async_gpu_push(u, s), BLOB_ESTATE);
    ck_assert_int_eq(blob_syncedmem_head(u), BLOB_HEAD_UNINITIALIZED);
    blob_syncedmem_free(u);
    blob_syncedmem_free(m);
    ck_ok(blob_stream_destroy(s));
}
END_TEST

/* A host write after a push waits for the copy, so the copy reads the old bytes. */
START_TEST(test_async_push_then_host_write)
{
    blob_syncedmem *m = block_at(BLOB_HEAD_AT_CPU);
    void *s, *h;
    const void *d;
    ck_ok(blob_stream_create(&s));
    ck_ok(blob_syncedmem_async_gpu_push(m, s));
    ck_ok(blob_syncedmem_mutable_cpu_data(m, &h));
    ck_assert(!blob_syncedmem_pending(m));
    ((float *)h)[0] = -5.0f;
    ck_ok(blob_syncedmem_wait(m));
    ck_ok(blob_syncedmem_gpu_data(m, &d)); /* AT_CPU again: copies the new value */
    ck_assert_float_eq(((const float *)d)[0], -5.0f);
    ck_assert_float_eq(((const float *)d)[1], 2.0f);
    blob_syncedmem_free(m);
    ck_ok(blob_stream_destroy(s));
}
END_TEST

/* Freeing a block with a copy in flight waits for it: no queued work touches freed memory. */
START_TEST(test_async_free_pending)
{
    blob_syncedmem *m = block_at(BLOB_HEAD_AT_CPU);
    void *s;
    ck_ok(blob_stream_create(&s));
    ck_ok(blob_syncedmem_async_gpu_push(m, s));
    blob_syncedmem_free(m);
    ck_assert_int_eq(fake_queued(), 0);
    ck_assert_int_eq(fake_get_stats().violations, 0);
    ck_ok(blob_stream_destroy(s));
}
END_TEST

START_TEST(test_async_pull)
{
    blob_syncedmem *m = block_at(BLOB_HEAD_AT_GPU);
    void *s;
    ck_ok(blob_stream_create(&s));
    fake_reset_counts();
    ck_ok(blob_syncedmem_async_cpu_pull(m, s));
    ck_assert_int_eq(blob_syncedmem_head(m), BLOB_HEAD_SYNCED);
    ck_assert_int_eq(fake_get_stats().d2h, 0);
    const void *p;
    ck_ok(blob_syncedmem_cpu_data(m, &p));
    assert_contents(p, false);
    fake_stats st = fake_get_stats();
    ck_assert_int_eq(st.d2h, 1);
    ck_assert_int_eq(st.event_syncs, 1);                    /* only this copy's event ... */
    ck_assert_int_eq(st.device_syncs + st.stream_syncs, 0); /* ... not the device */
    void *w;
    ck_ok(blob_syncedmem_mutable_cpu_data(m, &w));
    ck_status(blob_syncedmem_async_cpu_pull(m, s), BLOB_ESTATE);
    blob_syncedmem_free(m);
    ck_ok(blob_stream_destroy(s));
}
END_TEST

/* A block used on a second stream is not handed to another owner while that stream's
 * work on it is queued. */
START_TEST(test_cross_stream_reuse)
{
    void *a, *b, *d;
    test_streams_create(&a, &b);
    ck_ok(blob_alloc_set_caching(true));
    blob_stream_set(a);
    blob_syncedmem *m1 = block_at(BLOB_HEAD_UNINITIALIZED);
    ck_ok(blob_syncedmem_mutable_gpu_data(m1, &d)); /* allocated on a */
    blob_stream_set(b);
    const void *p;
    ck_ok(blob_syncedmem_gpu_data(m1, &p));                            /* now used on b too */
    ck_ok(blob__be->memset_async((void *)p, 1, N * sizeof(float), b)); /* b's work, queued */
    blob_syncedmem_free(m1);
    blob_stream_set(a);
    blob_syncedmem *m2 = block_at(BLOB_HEAD_UNINITIALIZED);
    void *d2;
    ck_ok(blob_syncedmem_mutable_gpu_data(m2, &d2));
    ck_assert_ptr_ne(d2, d); /* b has not finished with it */
    blob_syncedmem_free(m2);
    blob_stream_set(NULL);
    test_streams_destroy(a, b);
    ck_assert_int_eq(fake_get_stats().violations, 0);
}
END_TEST

/* The zero fill queued on one stream lands before a read queued on another. */
START_TEST(test_cross_stream_order)
{
    void *a, *b;
    test_streams_create(&a, &b);
    blob_stream_set(a);
    blob_syncedmem *m = block_at(BLOB_HEAD_UNINITIALIZED);
    const void *d, *h;
    ck_ok(blob_syncedmem_gpu_data(m, &d));   /* zero fill queued on a, not run */
    memset((void *)d, 7, N * sizeof(float)); /* stale bytes under the queued fill */
    blob_stream_set(b);
    ck_ok(blob_syncedmem_cpu_data(m, &h)); /* D->H on b, after a's fill */
    assert_contents(h, true);
    blob_stream_set(NULL);
    blob_syncedmem_free(m);
    test_streams_destroy(a, b);
}
END_TEST

START_TEST(test_device_mismatch)
{
    blob_syncedmem *m;
    const void *p;
    void *w;
    ck_ok(blob_device_set(1));
    ck_ok(blob_syncedmem_create(&m, 64, BLOB_DEVICE_DEFAULT));
    ck_assert_int_eq(blob_syncedmem_device(m), 1);
    ck_ok(blob_syncedmem_mutable_gpu_data(m, &w));
    ck_ok(blob_device_set(0));
    ck_status(blob_syncedmem_gpu_data(m, &p), BLOB_EDEVICE);
    ck_status(blob_syncedmem_mutable_gpu_data(m, &w), BLOB_EDEVICE);
    ck_status(blob_syncedmem_cpu_data(m, &p), BLOB_EDEVICE); /* needs a D->H copy */
    ck_status(blob_syncedmem_set_gpu_data(m, w, 64), BLOB_EDEVICE);
    ck_assert_int_eq(blob_syncedmem_head(m), BLOB_HEAD_AT_GPU);
    ck_ok(blob_device_set(1));
    ck_ok(blob_syncedmem_cpu_data(m, &p));
    ck_assert_int_eq(blob_syncedmem_head(m), BLOB_HEAD_SYNCED);
    ck_ok(blob_device_set(0));
    ck_ok(blob_syncedmem_cpu_data(m, &p)); /* no device work: allowed */
    blob_syncedmem_free(m);
    ck_status(blob_device_set(2), BLOB_ERANGE);
}
END_TEST

START_TEST(test_size_zero)
{
    blob_syncedmem *m;
    void *p = &p;
    ck_ok(blob_syncedmem_create(&m, 0, BLOB_DEVICE_DEFAULT));
    for (int a = 0; a < 4; a++) {
        ck_ok(do_access(m, (access)a, &p));
        ck_assert_ptr_null(p);
    }
    ck_assert_int_eq(blob_syncedmem_head(m), BLOB_HEAD_AT_GPU);
    ck_ok(blob_syncedmem_cpu_data(m, (const void **)&p));
    ck_assert_int_eq(blob_syncedmem_head(m), BLOB_HEAD_SYNCED);
    ck_ok(blob_syncedmem_mutable_cpu_data(m, &p));
    ck_ok(blob_syncedmem_async_gpu_push(m, NULL));
    ck_ok(blob_syncedmem_set_cpu_data(m, NULL, 0));
    fake_stats s = fake_get_stats();
    ck_assert_int_eq(s.pinned_allocs + s.device_allocs + s.h2d + s.d2h + s.memsets, 0);
    blob_syncedmem_free(m);
}
END_TEST

START_TEST(test_retain)
{
    blob_syncedmem *m = block_at(BLOB_HEAD_AT_CPU);
    blob_syncedmem_retain(m);
    blob_syncedmem_free(m);
    const void *p;
    ck_ok(blob_syncedmem_cpu_data(m, &p)); /* still alive */
    assert_contents(p, false);
    blob_syncedmem_free(m);
}
END_TEST

START_TEST(test_null_arguments)
{
    blob_syncedmem *m = block_at(BLOB_HEAD_UNINITIALIZED);
    ck_status(blob_syncedmem_cpu_data(m, NULL), BLOB_EINVAL);
    ck_status(blob_syncedmem_mutable_gpu_data(NULL, NULL), BLOB_EINVAL);
    ck_status(blob_syncedmem_async_gpu_push(NULL, NULL), BLOB_EINVAL);
    ck_status(blob_syncedmem_wait(NULL), BLOB_EINVAL);
    ck_assert_int_eq(blob_syncedmem_head(m), BLOB_HEAD_UNINITIALIZED);
    blob_syncedmem_free(m);
}
END_TEST

/* Every operation that allocates, with its k-th allocation failing (once, or from then
 * on): a clean error, the block exactly as before, nothing leaked (the fixture checks). */
typedef struct {
    const char *name;
    blob_head from;
    blob_status (*op)(blob_syncedmem *m, void *stream);
} alloc_case;

static blob_status op_cpu(blob_syncedmem *m, void *s)
{
    (void)s;
    const void *p;
    return blob_syncedmem_cpu_data(m, &p);
}
static blob_status op_mut_gpu(blob_syncedmem *m, void *s)
{
    (void)s;
    void *p;
    return blob_syncedmem_mutable_gpu_data(m, &p);
}
static blob_status op_gpu(blob_syncedmem *m, void *s)
{
    (void)s;
    const void *p;
    return blob_syncedmem_gpu_data(m, &p);
}
static blob_status op_push(blob_syncedmem *m, void *s)
{
    return blob_syncedmem_async_gpu_push(m, s);
}
static blob_status op_pull(blob_syncedmem *m, void *s)
{
    return blob_syncedmem_async_cpu_pull(m, s);
}

static const alloc_case alloc_cases[] = {
    {"cpu from UNINITIALIZED", BLOB_HEAD_UNINITIALIZED, op_cpu},
    {"gpu from UNINITIALIZED", BLOB_HEAD_UNINITIALIZED, op_mut_gpu},
    {"gpu from AT_CPU", BLOB_HEAD_AT_CPU, op_gpu},
    {"cpu from AT_GPU", BLOB_HEAD_AT_GPU, op_cpu},
    {"push from AT_CPU", BLOB_HEAD_AT_CPU, op_push},
    {"pull from AT_GPU", BLOB_HEAD_AT_GPU, op_pull},
};

/* A block at `head` whose other side was never allocated (so the op must allocate). */
static blob_syncedmem *one_sided(blob_head head)
{
    blob_syncedmem *m;
    void *p;
    ck_ok(blob_syncedmem_create(&m, N * sizeof(float), 0));
    if (head == BLOB_HEAD_AT_CPU)
        ck_ok(blob_syncedmem_mutable_cpu_data(m, &p));
    if (head == BLOB_HEAD_AT_GPU)
        ck_ok(blob_syncedmem_mutable_gpu_data(m, &p));
    fake_drain(); /* the zero fill is queued: let it land before writing */
    if (head != BLOB_HEAD_UNINITIALIZED)
        for (int i = 0; i < N; i++)
            ((float *)p)[i] = (float)(i + 1); /* fake device memory is host memory */
    return m;
}

START_TEST(test_alloc_failure_each_op)
{
    const alloc_case *c = &alloc_cases[_i / 2];
    bool persistent = _i % 2;
    void *s;
    ck_ok(blob_stream_create(&s));
    int failures = 0;
    for (uint64_t k = 1;; k++) {
        blob_syncedmem *m = one_sided(c->from);
        fake_fail_alloc_at(k, persistent);
        blob_status st = c->op(m, s);
        fake_fail_alloc_at(0, false);
        if (st == BLOB_OK) {
            blob_syncedmem_free(m);
            break;
        }
        failures++;
        ck_assert_msg(st == BLOB_ENOMEM || st == BLOB_EDEVMEM || st == BLOB_ECUDA, "%s k=%llu: %s",
                      c->name, (unsigned long long)k, blob_status_name(st));
        ck_assert_int_eq(blob_syncedmem_head(m), c->from);
        ck_assert(!blob_syncedmem_pending(m));
        if (c->from != BLOB_HEAD_UNINITIALIZED) {
            void *p;
            ck_ok(blob_syncedmem_mutable_cpu_data(m, &p));
            assert_contents(p, false);
        }
        blob_syncedmem_free(m);
        ck_assert_msg(k < 16, "%s never succeeded", c->name);
    }
    /* a transient failure may be absorbed by the allocator's retry */
    ck_assert_msg(failures > 0 || !persistent, "%s made no allocation", c->name);
    ck_assert_int_eq(fake_get_stats().violations, 0);
    ck_ok(blob_stream_destroy(s));
}
END_TEST

START_TEST(test_copy_failure_keeps_state)
{
    for (blob_head from = BLOB_HEAD_AT_CPU; from <= BLOB_HEAD_AT_GPU; from++) {
        blob_syncedmem *m = one_sided(from);
        const void *p;
        fake_fail_copies(true);
        if (from == BLOB_HEAD_AT_CPU)
            ck_status(blob_syncedmem_gpu_data(m, &p), BLOB_ECUDA);
        else
            ck_status(blob_syncedmem_cpu_data(m, &p), BLOB_ECUDA);
        fake_fail_copies(false);
        ck_assert_int_eq(blob_syncedmem_head(m), from);
        blob_syncedmem_free(m);
    }
    fake_stats s = fake_get_stats();
    ck_assert_int_eq(s.live_blocks, 0);
}
END_TEST

START_TEST(test_create_alloc_failure)
{
    blob_syncedmem *m = (blob_syncedmem *)&m;
    fake_fail_alloc_at(1, false);
    ck_status(blob_syncedmem_create(&m, 8, 0), BLOB_ENOMEM);
    ck_assert_ptr_null(m);
}
END_TEST

/* ---- real CUDA ---- */

START_TEST(test_gpu_sequence)
{
    blob_syncedmem *m;
    void *h;
    const void *c;
    ck_ok(blob_syncedmem_create(&m, N * sizeof(float), BLOB_DEVICE_DEFAULT));
    ck_assert_int_ge(blob_syncedmem_device(m), 0);
    ck_ok(blob_syncedmem_mutable_cpu_data(m, &h));
    ck_assert(blob_syncedmem_host_pinned(m));
    for (int i = 0; i < N; i++)
        ((float *)h)[i] = (float)(i + 1);
    void *d;
    ck_ok(blob_syncedmem_mutable_gpu_data(m, &d)); /* H->D */
    ck_ok(blob_syncedmem_mutable_cpu_data(m, &h)); /* D->H */
    assert_contents(h, false);
    ((float *)h)[0] = 42.0f;
    ck_ok(blob_syncedmem_gpu_data(m, &c));
    ck_assert_int_eq(blob_syncedmem_head(m), BLOB_HEAD_SYNCED);
    /* write the device side through a borrowed block, read back on the host */
    blob_syncedmem *z;
    ck_ok(blob_syncedmem_create(&z, N * sizeof(float), BLOB_DEVICE_DEFAULT));
    ck_ok(blob_syncedmem_set_gpu_data(z, (void *)c, N * sizeof(float)));
    ck_ok(blob_syncedmem_cpu_data(z, &c));
    ck_assert_float_eq(((const float *)c)[0], 42.0f);
    ck_assert_float_eq(((const float *)c)[N - 1], (float)N);
    blob_syncedmem_free(z);
    blob_syncedmem_free(m);
}
END_TEST

START_TEST(test_gpu_zero_fill_and_async)
{
    blob_syncedmem *m;
    const void *c;
    void *h, *s;
    ck_ok(blob_syncedmem_create(&m, N * sizeof(float), BLOB_DEVICE_DEFAULT));
    ck_ok(blob_syncedmem_gpu_data(m, &c)); /* device alloc + zero */
    ck_ok(blob_syncedmem_cpu_data(m, &c));
    assert_contents(c, true);
    ck_ok(blob_syncedmem_mutable_cpu_data(m, &h));
    for (int i = 0; i < N; i++)
        ((float *)h)[i] = (float)(i + 1);
    ck_ok(blob_stream_create(&s));
    ck_ok(blob_syncedmem_async_gpu_push(m, s));
    ck_ok(blob_syncedmem_gpu_data(m, &c)); /* ordered after the push on the device */
    ck_ok(blob_syncedmem_wait(m));
    ck_assert(!blob_syncedmem_pending(m));
    void *d;
    ck_ok(blob_syncedmem_mutable_gpu_data(m, &d));
    ck_ok(blob_syncedmem_async_cpu_pull(m, s));
    ck_ok(blob_syncedmem_cpu_data(m, &c));
    assert_contents(c, false);
    blob_syncedmem_free(m);
    ck_ok(blob_stream_destroy(s));
    blob_syncedmem *z;
    ck_ok(blob_syncedmem_create(&z, 0, BLOB_DEVICE_DEFAULT));
    ck_ok(blob_syncedmem_mutable_gpu_data(z, &d));
    ck_assert_ptr_null(d);
    blob_syncedmem_free(z);
}
END_TEST

START_TEST(test_gpu_device_mismatch)
{
    blob_syncedmem *m;
    const void *c;
    ck_ok(blob_device_set(1));
    ck_ok(blob_syncedmem_create(&m, 64, BLOB_DEVICE_DEFAULT));
    ck_ok(blob_device_set(0));
    ck_status(blob_syncedmem_gpu_data(m, &c), BLOB_EDEVICE);
    ck_ok(blob_device_set(1));
    ck_ok(blob_syncedmem_gpu_data(m, &c));
    blob_syncedmem_free(m);
}
END_TEST

/* Device-to-host copies into pinned memory, around the size below which the backend
 * stores them with a kernel: every size and alignment brings back the device's bytes,
 * through a queued pull and through a synchronous read, over a stale host side. */
static const size_t pull_sizes[] = {1, 3, 4, 6, 16, 20, 1000, 4096, 16383, 16384, 16385, 100000};

START_TEST(test_gpu_pull_sizes)
{
    const size_t bytes = pull_sizes[_i / 3], offset = (size_t)(_i % 3) * 2; /* 0, 2, 4 */
    uint8_t *want = malloc(bytes);
    ck_assert_ptr_nonnull(want);
    uint64_t r = 0x9e3779b97f4a7c15u + bytes;
    for (size_t i = 0; i < bytes; i++) {
        r = r * 6364136223846793005u + 1442695040888963407u;
        want[i] = (uint8_t)(r >> 56) | 1; /* never zero */
    }
    /* the device bytes at dev + offset, from a staging block */
    blob_syncedmem *stage, *m;
    void *h, *dev;
    const void *c;
    ck_ok(blob_syncedmem_create(&stage, bytes + offset, BLOB_DEVICE_DEFAULT));
    ck_ok(blob_syncedmem_mutable_cpu_data(stage, &h));
    memcpy((uint8_t *)h + offset, want, bytes);
    ck_ok(blob_syncedmem_mutable_gpu_data(stage, &dev));
    for (int sync = 0; sync < 2; sync++) {
        ck_ok(blob_syncedmem_create(&m, bytes, BLOB_DEVICE_DEFAULT));
        ck_ok(blob_syncedmem_mutable_cpu_data(m, &h));
        ck_assert(blob_syncedmem_host_pinned(m));
        memset(h, 0, bytes); /* stale, and unlike every device byte */
        ck_ok(blob_syncedmem_set_gpu_data(m, (uint8_t *)dev + offset, bytes));
        if (!sync)
            ck_ok(blob_syncedmem_async_cpu_pull(m, blob_stream_get()));
        ck_ok(blob_syncedmem_cpu_data(m, &c));
        ck_assert_ptr_eq(c, h);
        ck_assert_msg(!memcmp(c, want, bytes), "%zu bytes at offset %zu (%s)", bytes, offset,
                      sync ? "read" : "pull");
        blob_syncedmem_free(m);
    }
    blob_syncedmem_free(stage);
    free(want);
}
END_TEST

void syncedmem_suite(Suite *s)
{
    TCase *tc = suite_case(s, "fake", NULL, 0, fake_setup, fake_teardown);
    add_loop_tests(tc, 0, (int)(sizeof table / sizeof table[0]), test_transition);
    add_tests(tc, test_caffe_sequence, test_create_lazy_and_queries, test_pinned_vs_pageable,
              test_borrow_host, test_borrow_device, test_async_push,
              test_async_push_then_host_write, test_async_free_pending, test_async_pull,
              test_cross_stream_reuse, test_cross_stream_order, test_device_mismatch,
              test_size_zero, test_retain, test_null_arguments);
    add_loop_tests(tc, 0, (int)(2 * sizeof alloc_cases / sizeof alloc_cases[0]),
                   test_alloc_failure_each_op);
    add_tests(tc, test_copy_failure_keeps_state, test_create_alloc_failure);

    tc = suite_case(s, "gpu", "gpu", 0, NULL, NULL);
    add_tests(tc, test_gpu_sequence, test_gpu_zero_fill_and_async);
    add_loop_tests(tc, 0, (int)(3 * sizeof pull_sizes / sizeof pull_sizes[0]), test_gpu_pull_sizes);
    add_tests(suite_case(s, "gpu2", "gpu gpu2", 0, NULL, NULL), test_gpu_device_mismatch);
}

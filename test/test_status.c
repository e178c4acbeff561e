#include <stdio.h>
#include <string.h>

#include "../src/core/core.h"
#include "blob/alloc.h"
#include "blob/comm.h"
#include "blob/optim.h"
#include "fake_backend.h"
#include "testutil.h"

START_TEST(test_names_and_messages)
{
    ck_assert_str_eq(blob_status_name(BLOB_OK), "OK");
    ck_assert_str_eq(blob_status_name(BLOB_EDEVICE), "EDEVICE");
    ck_assert_str_eq(blob_strerror(BLOB_ENOMEM), "out of host memory");
    ck_assert_str_eq(blob_status_name((blob_status)-999), "UNKNOWN");
    ck_assert_str_eq(blob_strerror((blob_status)5), "unknown status");
}
END_TEST

START_TEST(test_last_error_detail)
{
    blob *b;
    int64_t shape[] = {2, -1};
    ck_status(blob_create(&b, BLOB_FLOAT32, BLOB_HOST_ONLY, 2, shape), BLOB_EINVAL);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "dim 1 is negative"));
}
END_TEST

/* The detail of a failure names the public call that failed, never a function inside the
 * library: expr fails with status, its detail starting "call: ". */
#define ck_names(expr, status, call)                                                             \
    do {                                                                                         \
        ck_status((expr), (status));                                                             \
        ck_assert_msg(!strncmp(blob_last_error(), call ": ", strlen(call ": ")),                 \
                      "%s: the detail \"%s\" does not name %s", #expr, blob_last_error(), call); \
    } while (0)

START_TEST(test_details_name_the_call)
{
    blob *a, *b, *none;
    int64_t two = 2, three = 3, bad = -1;
    ck_ok(blob_create(&a, BLOB_FLOAT32, BLOB_HOST_ONLY, 1, &two));
    ck_ok(blob_create(&b, BLOB_FLOAT64, BLOB_HOST_ONLY, 1, &three));
    ck_names(blob_create(&none, BLOB_FLOAT32, BLOB_HOST_ONLY, 1, &bad), BLOB_EINVAL, "blob_create");
    ck_names(blob_reshape(a, 1, &bad), BLOB_EINVAL, "blob_reshape");
    ck_names(blob_share_data(a, b), BLOB_ESHAPE, "blob_share_data");
    ck_names(blob_share_diff(a, b), BLOB_ESHAPE, "blob_share_diff");
    float small[1];
    ck_names(blob_set_cpu_data(a, small, sizeof small), BLOB_EINVAL, "blob_set_cpu_data");
    double sum;
    ck_names(blob_asum_data(NULL, &sum), BLOB_EINVAL, "blob_asum_data");
    ck_names(blob_sumsq_diff(NULL, &sum), BLOB_EINVAL, "blob_sumsq_diff");
    ck_names(blob_scale_diff(NULL, 2), BLOB_EINVAL, "blob_scale_diff");
    blob_optim opt = blob_optim_default(BLOB_OPTIM_SGD, 0.1);
    blob_optim_state *state;
    ck_ok(blob_optim_state_create(&state));
    blob *params[] = {a, b};
    ck_names(blob_optim_step(&opt, params, 2, state), BLOB_EINVAL, "blob_optim_step");
    blob_optim_state_free(state);
    void *p;
    ck_names(blob_place_alloc((blob_place){(blob_place_kind)7, 0}, 8, NULL, &p), BLOB_EINVAL,
             "blob_place_alloc");
    blob_alloc_stats stats;
    ck_names(blob_alloc_get_stats(blob_place_device(-1), &stats), BLOB_EINVAL,
             "blob_alloc_get_stats");
    blob_syncedmem *m;
    ck_ok(blob_syncedmem_create(&m, 16, BLOB_HOST_ONLY));
    const void *x;
    ck_names(blob_syncedmem_gpu_data(m, &x), BLOB_ENODEV, "blob_syncedmem_gpu_data");
    ck_names(blob_syncedmem_async_gpu_push(m, NULL), BLOB_ENODEV, "blob_syncedmem_async_gpu_push");
    ck_names(blob_syncedmem_set_cpu_data_release(m, NULL, 16, NULL, NULL), BLOB_EINVAL,
             "blob_syncedmem_set_cpu_data_release");
    blob_syncedmem_free(m);
    blob_comm *c;
    blob_comm_options o = {.rank = 3, .world_size = 2};
    ck_names(blob_comm_create(&c, &o), BLOB_EINVAL, "blob_comm_create");
    o = (blob_comm_options){0};
    ck_ok(blob_comm_create(&c, &o));
    blob *list[] = {a, NULL};
    blob_comm_list *l;
    ck_names(blob_comm_list_create(&l, c, list, 2), BLOB_EINVAL, "blob_comm_list_create");
    ck_ok(blob_comm_list_create(&l, c, list, 1));
    ck_ok(blob_reshape(a, 1, &three));
    ck_names(blob_comm_broadcast(l, 0), BLOB_ESHAPE, "blob_comm_broadcast");
    blob_comm_list_free(l);
    blob_comm_free(c);
    blob_free(a);
    blob_free(b);
}
END_TEST

/* Without a GPU every device call says so. */
START_TEST(test_no_gpu_reports)
{
    int d;
    void *s;
    ck_status(blob_device_get(&d), BLOB_ENODEV);
    ck_status(blob_device_set(0), BLOB_ENODEV);
    ck_status(blob_stream_create(&s), BLOB_ENODEV);
    ck_assert_ptr_null(s);
    ck_status(blob_stream_create_with_priority(&s, 1), BLOB_ENODEV);
    ck_assert_ptr_null(s);
    ck_status(blob_device_synchronize(), BLOB_ENODEV);
    ck_status(blob_stream_wait_stream(NULL, (void *)&s), BLOB_ENODEV);
    blob_event *e = (blob_event *)&e;
    ck_status(blob_event_create(&e), BLOB_ENODEV);
    ck_assert_ptr_null(e);
    blob_syncedmem *m;
    ck_ok(blob_syncedmem_create(&m, 16, BLOB_DEVICE_DEFAULT));
    ck_assert_int_eq(blob_syncedmem_device(m), BLOB_HOST_ONLY);
    const void *p;
    ck_ok(blob_syncedmem_cpu_data(m, &p));
    ck_assert(!blob_syncedmem_host_pinned(m));
    ck_status(blob_syncedmem_gpu_data(m, &p), BLOB_ENODEV);
    blob_syncedmem_free(m);
    ck_status(blob_syncedmem_create(&m, 16, 0), BLOB_ERANGE);
}
END_TEST

START_TEST(test_graph_arguments)
{
    blob_graph *g = (blob_graph *)&g;
    ck_status(blob_graph_begin(NULL), BLOB_EINVAL); /* the default stream */
    ck_status(blob_graph_end(NULL, &g), BLOB_EINVAL);
    ck_status(blob_graph_launch(NULL, NULL), BLOB_EINVAL);
    blob_graph_free(NULL);
    if (blob_device_count() == 0)
        ck_status(blob_graph_begin((void *)&g), BLOB_ENODEV);
}
END_TEST

/* A float32 blob of n elements, for the tests on a GPU. */
static blob *gpu_vector(int64_t n)
{
    blob *b;
    ck_ok(blob_create(&b, BLOB_FLOAT32, BLOB_DEVICE_DEFAULT, 1, &n));
    return b;
}

/* Capture y += 2x on a stream once, replay it three times. */
START_TEST(test_gpu_graph_replay)
{
    enum { N = 1000 };
    blob *b = gpu_vector(N);
    float *x, *y;
    ck_ok(blob_mutable_cpu_data(b, (void **)&y));
    ck_ok(blob_mutable_cpu_diff(b, (void **)&x));
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = 1.0f;
    }
    const void *dx;
    void *dy, *s;
    ck_ok(blob_gpu_diff(b, &dx));
    ck_ok(blob_mutable_gpu_data(b, &dy));
    ck_ok(blob_stream_create(&s));
    blob_stream_set(s);
    ck_ok(blob_graph_begin(s));
    ck_ok(blob_gpu_axpy(BLOB_FLOAT32, N, 2.0, dx, dy));
    blob_graph *g;
    ck_ok(blob_graph_end(s, &g));
    const float *h;
    ck_ok(blob_stream_synchronize(s));
    ck_ok(blob_cpu_data(b, (const void **)&h));
    ck_assert_float_eq(h[10], 1.0f); /* capturing ran nothing */
    ck_ok(blob_mutable_gpu_data(b, &dy));
    for (int r = 0; r < 3; r++)
        ck_ok(blob_graph_launch(g, s));
    ck_ok(blob_stream_synchronize(s));
    ck_ok(blob_cpu_data(b, (const void **)&h));
    for (int i = 0; i < N; i++)
        ck_assert_float_eq_tol(h[i], 1.0f + 6.0f * (float)i, 1e-3f * (1.0f + 6.0f * (float)i));
    ck_status(blob_graph_begin(s), BLOB_OK);
    ck_status(blob_graph_end(s, NULL), BLOB_EINVAL); /* still ends the capture ... */
    ck_ok(blob_graph_begin(s));                      /* ... so a new one can start */
    blob_graph *g2;
    ck_ok(blob_graph_end(s, &g2));
    blob_graph_free(g2);
    blob_stream_set(NULL);
    blob_graph_free(g);
    ck_ok(blob_stream_destroy(s));
    blob_free(b);
}
END_TEST

/* Work on urgent streams (a level, and more levels than the device has) runs, eagerly
 * and in a graph captured on one and launched on a default stream. */
START_TEST(test_gpu_stream_priority)
{
    enum { N = 4096 };
    blob *b = gpu_vector(N);
    void *urgent, *most, *plain, *y;
    ck_ok(blob_stream_create_with_priority(&urgent, 1));
    ck_ok(blob_stream_create_with_priority(&most, 1000));
    ck_ok(blob_stream_create(&plain));
    blob_stream_set(urgent);
    ck_ok(blob_mutable_gpu_data(b, &y));
    ck_ok(blob_gpu_set(BLOB_FLOAT32, N, 1.0, y));
    ck_ok(blob_stream_wait_stream(most, urgent));
    blob_stream_set(most);
    ck_ok(blob_mutable_gpu_data(b, &y));
    ck_ok(blob_gpu_scal(BLOB_FLOAT32, N, 3.0, y));
    ck_ok(blob_graph_begin(most));
    ck_ok(blob_gpu_add_scalar(BLOB_FLOAT32, N, 1.0, y));
    blob_graph *g;
    ck_ok(blob_graph_end(most, &g));
    ck_ok(blob_stream_wait_stream(plain, most));
    for (int r = 0; r < 2; r++)
        ck_ok(blob_graph_launch(g, plain));
    ck_ok(blob_stream_synchronize(plain));
    blob_stream_set(plain);
    const float *h;
    ck_ok(blob_cpu_data(b, (const void **)&h));
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(h[i], 5.0f);
    blob_stream_set(NULL);
    blob_graph_free(g);
    blob_free(b);
    ck_ok(blob_stream_destroy(urgent));
    ck_ok(blob_stream_destroy(most));
    ck_ok(blob_stream_destroy(plain));
}
END_TEST

/* A wait orders a stream after the work queued so far on another, through one pooled
 * event (the fake runs the waited-for work when the wait is queued). */
START_TEST(test_stream_wait_stream)
{
    void *a, *b;
    unsigned char *p;
    test_streams_create(&a, &b);
    ck_ok(blob_place_alloc(blob_place_device(0), 64, b, (void **)&p));
    memset(p, 0, 64);
    ck_ok(blob__be->memset_async(p, 7, 64, b));
    ck_assert_int_eq(fake_queued(), 1);
    fake_fail_alloc_at(1, false); /* no event can be made: nothing waits */
    ck_status(blob_stream_wait_stream(a, b), BLOB_ECUDA);
    ck_assert_int_eq(fake_queued(), 1);
    ck_ok(blob_stream_wait_stream(b, b)); /* a stream waiting for itself: nothing to do */
    ck_ok(blob_stream_wait_stream(NULL, NULL));
    ck_assert_uint_eq(fake_get_stats().events_created, 0);
    ck_ok(blob_stream_wait_stream(a, b));
    ck_assert_int_eq(fake_queued(), 0); /* a's later work comes after b's memset */
    ck_assert_int_eq(p[0], 7);
    ck_assert_int_eq(p[63], 7);
    ck_ok(blob_stream_wait_stream(NULL, a)); /* the default stream waits, and is waited for */
    ck_ok(blob_stream_wait_stream(b, NULL));
    ck_ok(blob_stream_wait_stream(b, a));
    ck_assert_uint_eq(fake_get_stats().events_created, 1); /* the pool's one event */
    ck_ok(blob_device_set(1));                             /* events are per device */
    ck_ok(blob_stream_wait_stream(NULL, b));
    ck_assert_uint_eq(fake_get_stats().events_created, 2);
    ck_ok(blob_device_set(0));
    blob_place_free(blob_place_device(0), p);
    test_streams_destroy(a, b);
    ck_assert_uint_eq(fake_get_stats().violations, 0);
}
END_TEST

/* A stream's priority reaches the backend; the pool hands a stream out again only for
 * the same priority; bad arguments fail before anything is made. */
START_TEST(test_stream_priority)
{
    void *a, *b, *c;
    ck_ok(blob_stream_create_with_priority(&a, 2));
    ck_assert_int_eq(fake_stream_priority(a), 2);
    ck_ok(blob_stream_destroy(a));
    ck_ok(blob_stream_create(&b)); /* not a: its priority differs */
    ck_assert_ptr_ne(b, a);
    ck_assert_int_eq(fake_stream_priority(b), 0);
    ck_ok(blob_stream_create_with_priority(&c, 2)); /* a again */
    ck_assert_ptr_eq(c, a);
    const uint64_t made = fake_get_stats().streams_created;
    c = (void *)&c;
    ck_status(blob_stream_create_with_priority(&c, -1), BLOB_EINVAL);
    ck_assert_ptr_null(c);
    ck_assert(strstr(blob_last_error(), "priority -1"));
    ck_status(blob_stream_create_with_priority(NULL, 1), BLOB_EINVAL);
    fake_fail_alloc_at(1, false); /* the backend cannot make it */
    ck_status(blob_stream_create_with_priority(&c, 3), BLOB_ECUDA);
    ck_assert_ptr_null(c);
    ck_assert_uint_eq(fake_get_stats().streams_created, made);
    test_streams_destroy(a, b);
}
END_TEST

/* An event marks the work queued on a stream so far: a wait for it orders another stream
 * after that work and not after later work (the fake runs the waited-for work when the
 * wait is queued), the host waits for it, and it is bound to its GPU. */
START_TEST(test_event)
{
    void *a, *b;
    unsigned char *p;
    blob_event *e = (blob_event *)&e;
    ck_status(blob_event_create(NULL), BLOB_EINVAL);
    ck_status(blob_event_record(NULL, NULL), BLOB_EINVAL);
    ck_status(blob_stream_wait_event(NULL, NULL), BLOB_EINVAL);
    ck_status(blob_event_synchronize(NULL), BLOB_EINVAL);
    blob_event_free(NULL);
    for (uint64_t n = 1; n <= 2; n++) { /* the object, then the device's event */
        fake_fail_alloc_at(n, false);
        ck_assert_int_ne(blob_event_create(&e), BLOB_OK);
        ck_assert_ptr_null(e);
    }
    fake_fail_alloc_at(0, false);
    ck_assert_uint_eq(fake_get_stats().events_created, 0);
    test_streams_create(&a, &b);
    ck_ok(blob_place_alloc(blob_place_device(0), 64, b, (void **)&p));
    memset(p, 0, 64);
    ck_ok(blob_event_create(&e));
    ck_ok(blob_stream_wait_event(a, e)); /* never marked: nothing to wait for */
    ck_ok(blob__be->memset_async(p, 7, 64, b));
    ck_ok(blob_event_record(e, b));
    ck_ok(blob__be->memset_async(p + 32, 9, 32, b)); /* after the mark */
    ck_assert_int_eq(fake_queued(), 2);
    ck_ok(blob_stream_wait_event(a, e));
    ck_assert_int_eq(fake_queued(), 1);
    ck_assert_int_eq(p[0], 7);
    ck_assert_int_eq(p[63], 7);
    ck_ok(blob_event_synchronize(e));
    ck_assert_int_eq(fake_queued(), 1);
    ck_ok(blob_device_set(1));
    ck_status(blob_event_record(e, NULL), BLOB_EDEVICE);
    ck_status(blob_stream_wait_event(NULL, e), BLOB_EDEVICE);
    ck_status(blob_event_synchronize(e), BLOB_EDEVICE);
    ck_ok(blob_device_set(0));
    ck_ok(blob_stream_synchronize(b));
    ck_assert_int_eq(p[63], 9);
    blob_event_free(e);
    blob_place_free(blob_place_device(0), p);
    test_streams_destroy(a, b);
    ck_assert_uint_eq(fake_get_stats().violations, 0);
}
END_TEST

/* A graph adds 1 to x, marks an event, then works on z for a while; after each launch a
 * second stream waits for the event and copies x to y: it sees that launch's x, also
 * when the host waits for the event first. The same eagerly, before the capture. Large
 * enough that a missing wait shows. */
START_TEST(test_gpu_event_in_graph)
{
    enum { N = 1 << 22, LATER = 8 };
    void *s, *copy, *x, *y, *dz;
    blob_event *ready;
    test_streams_create(&s, &copy);
    ck_ok(blob_event_create(&ready));
    blob_stream_set(s);
    blob *xy = gpu_vector(N), *z = gpu_vector(N);
    ck_ok(blob_mutable_gpu_data(xy, &x));
    ck_ok(blob_mutable_gpu_diff(xy, &y));
    ck_ok(blob_mutable_gpu_data(z, &dz));
    ck_ok(blob_gpu_set(BLOB_FLOAT32, N, 0.0, x));
    ck_ok(blob_gpu_set(BLOB_FLOAT32, N, 0.0, dz));
    blob_graph *g = NULL;
    for (int run = 0; run < 4; run++) { /* eagerly, then three launches of the capture */
        if (run <= 1) {
            if (run == 1)
                ck_ok(blob_graph_begin(s));
            ck_ok(blob_gpu_add_scalar(BLOB_FLOAT32, N, 1.0, x));
            ck_ok(blob_event_record(ready, s));
            for (int k = 0; k < LATER; k++)
                ck_ok(blob_gpu_add_scalar(BLOB_FLOAT32, N, 1.0, dz));
        }
        if (run == 1) {
            ck_ok(blob_graph_end(s, &g));
            int64_t kernels = 0, total = 0;
            ck_ok(blob_graph_count_nodes(g, &kernels, &total));
            ck_assert_int_eq(kernels, 1 + LATER);
            ck_assert_int_eq(total, 2 + LATER); /* and the event's record */
        }
        if (run >= 1)
            ck_ok(blob_graph_launch(g, s));
        if (run == 2)
            ck_ok(blob_event_synchronize(ready));
        ck_ok(blob_stream_wait_event(copy, ready));
        blob_stream_set(copy);
        ck_ok(blob_gpu_copy(BLOB_FLOAT32, N, x, y));
        blob_stream_set(s);
        ck_ok(blob_stream_synchronize(copy));
        ck_ok(blob_stream_synchronize(s));
        const float *h;
        ck_ok(blob_cpu_diff(xy, (const void **)&h));
        const float want = 1.0f + (float)run;
        for (int i = 0; i < N; i++)
            if (h[i] != want)
                ck_abort_msg("run %d: y[%d] = %g, want %g", run, i, h[i], want);
        ck_ok(blob_mutable_gpu_diff(xy, &y)); /* the device side again (same memory) */
    }
    const float *hz;
    ck_ok(blob_cpu_data(z, (const void **)&hz));
    ck_assert_float_eq(hz[N - 1], (float)(4 * LATER));
    blob_stream_set(NULL);
    blob_graph_free(g);
    blob_event_free(ready);
    blob_free(xy);
    blob_free(z);
    test_streams_destroy(copy, s);
}
END_TEST

/* y = 2x on a side stream forked from s after x is set, z = 1 on s meanwhile, then s
 * joins the side stream and adds y to z: eagerly, and captured as a graph with a
 * parallel branch that is replayed. Large enough that a missing wait shows. */
START_TEST(test_gpu_stream_fork_join)
{
    enum { N = 1 << 22 };
    void *s, *side, *x, *y, *dz;
    test_streams_create(&s, &side);
    blob_stream_set(s);
    blob *xy = gpu_vector(N), *z = gpu_vector(N);
    ck_ok(blob_mutable_gpu_data(xy, &x));
    ck_ok(blob_mutable_gpu_diff(xy, &y));
    ck_ok(blob_mutable_gpu_data(z, &dz));
    for (int run = 0; run < 2; run++) {
        const bool graph = run == 1;
        blob_graph *g = NULL;
        if (graph)
            ck_ok(blob_graph_begin(s));
        ck_ok(blob_gpu_set(BLOB_FLOAT32, N, 3.0 + run, x));
        ck_ok(blob_gpu_set(BLOB_FLOAT32, N, 0.0, y));
        ck_ok(blob_stream_wait_stream(side, s)); /* fork */
        blob_stream_set(side);
        ck_ok(blob_gpu_axpy(BLOB_FLOAT32, N, 2.0, x, y));
        blob_stream_set(s);
        ck_ok(blob_gpu_set(BLOB_FLOAT32, N, 1.0, dz));
        ck_ok(blob_stream_wait_stream(s, side)); /* join */
        ck_ok(blob_gpu_axpy(BLOB_FLOAT32, N, 1.0, y, dz));
        if (graph) {
            ck_ok(blob_graph_end(s, &g));
            int64_t kernels = 0, total = 0;
            ck_ok(blob_graph_count_nodes(g, &kernels, &total));
            printf("fork/join graph: %lld kernels, %lld nodes\n", (long long)kernels,
                   (long long)total);
            ck_ok(blob_gpu_set(BLOB_FLOAT32, N, -1.0, dz)); /* replaced by the replay */
            ck_ok(blob_graph_launch(g, s));
        }
        ck_ok(blob_stream_synchronize(s));
        const float *h, *hy;
        ck_ok(blob_cpu_data(z, (const void **)&h));
        ck_ok(blob_cpu_diff(xy, (const void **)&hy));
        const float want_y = 2.0f * (3.0f + (float)run), want_z = 1.0f + want_y;
        for (int i = 0; i < N; i++) {
            if (h[i] != want_z || hy[i] != want_y)
                ck_abort_msg("%s run: element %d: y %g (want %g), z %g (want %g)",
                             graph ? "graph" : "eager", i, hy[i], want_y, h[i], want_z);
        }
        ck_ok(blob_mutable_gpu_data(xy, &x)); /* the device sides again, for the next run */
        ck_ok(blob_mutable_gpu_diff(xy, &y));
        ck_ok(blob_mutable_gpu_data(z, &dz));
        blob_graph_free(g);
    }
    blob_stream_set(NULL);
    blob_free(xy);
    blob_free(z);
    test_streams_destroy(side, s);
}
END_TEST

void status_suite(Suite *s)
{
    add_tests(suite_case(s, "core", NULL, 0, NULL, NULL), test_names_and_messages,
              test_last_error_detail, test_details_name_the_call, test_graph_arguments);
    add_tests(suite_case(s, "fake", NULL, 0, fake_setup, fake_teardown), test_stream_wait_stream,
              test_event, test_stream_priority);
    add_tests(suite_case(s, "nogpu", "nogpu", 0, NULL, NULL), test_no_gpu_reports);
    add_tests(suite_case(s, "gpu", "gpu", 0, NULL, NULL), test_gpu_graph_replay,
              test_gpu_stream_fork_join, test_gpu_event_in_graph, test_gpu_stream_priority);
}

/* The caching allocators, through the fake device (exact driver counts, queued stream
 * work, injected failures, several threads) and, where a GPU is present, through CUDA. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "../src/core/core.h"
#include "fake_backend.h"
#include "testutil.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

static const blob_place HOST = {BLOB_PLACE_HOST, 0};
static const blob_place PINNED = {BLOB_PLACE_PINNED, 0};
static const blob_place DEV0 = {BLOB_PLACE_DEVICE, 0};
static const blob_place DEV1 = {BLOB_PLACE_DEVICE, 1};

/* Counters at the start of the test: the allocator keeps them for the process. */
static blob_alloc_stats base[2 + FAKE_DEVICES];

static blob_alloc_stats *base_of(blob_place place)
{
    return &base[place.kind == BLOB_PLACE_DEVICE ? 2 + place.device : (int)place.kind];
}

/* The place's statistics, with counters since the start of the test. */
static blob_alloc_stats stats_of(blob_place place)
{
    blob_alloc_stats s;
    const blob_alloc_stats *b = base_of(place);
    ck_ok(blob_alloc_get_stats(place, &s));
    s.requests -= b->requests;
    s.cache_hits -= b->cache_hits;
    s.driver_allocs -= b->driver_allocs;
    s.driver_frees -= b->driver_frees;
    s.oom_count -= b->oom_count;
    return s;
}

static char *get(blob_place place, size_t bytes, void *stream)
{
    void *p = NULL;
    ck_ok(blob_place_alloc(place, bytes, stream, &p));
    ck_assert_ptr_nonnull(p);
    return p;
}

static size_t round512(size_t n) { return (n + 511) / 512 * 512; }

/* The place's driver memory matches the fake's own count of live bytes. */
static void assert_reserved_matches(void)
{
    fake_stats f = fake_get_stats();
    ck_assert_uint_eq(stats_of(PINNED).reserved, (size_t)f.live_pinned_bytes);
    ck_assert_uint_eq(stats_of(DEV0).reserved + stats_of(DEV1).reserved,
                      (size_t)f.live_device_bytes);
}

static bool saved_caching;

static void alloc_setup(void)
{
    fake_setup();
    saved_caching = blob_alloc_caching();
    ck_ok(blob_alloc_set_caching(true));
    const blob_place all[] = {HOST, PINNED, DEV0, DEV1};
    for (int i = 0; i < 4; i++) {
        ck_ok(blob_alloc_get_stats(all[i], base_of(all[i])));
        ck_assert_uint_eq(base_of(all[i])->in_use, 0);
        ck_assert_uint_eq(base_of(all[i])->reserved, 0);
        ck_ok(blob_alloc_reset_peaks(all[i]));
    }
}

static void alloc_teardown(void)
{
    const blob_place all[] = {HOST, PINNED, DEV0, DEV1};
    for (int i = 0; i < 4; i++)
        ck_ok(blob_alloc_set_cache_limit(all[i], SIZE_MAX));
    ck_ok(blob_alloc_set_caching(saved_caching));
    ck_assert_int_eq(fake_get_stats().violations, 0);
    fake_teardown();
}

START_TEST(test_size_zero)
{
    uint64_t attempts = fake_alloc_attempts();
    const blob_place all[] = {HOST, PINNED, DEV0};
    for (int i = 0; i < 3; i++) {
        void *p = &p;
        ck_ok(blob_place_alloc(all[i], 0, NULL, &p));
        ck_assert_ptr_null(p);
        ck_assert_uint_eq(stats_of(all[i]).requests, 0);
        blob_place_free(all[i], NULL);
    }
    ck_assert_uint_eq(fake_alloc_attempts(), attempts);
}
END_TEST

START_TEST(test_bad_places)
{
    blob_alloc_stats s;
    void *p = &p;
    ck_status(blob_alloc_get_stats(blob_place_device(FAKE_DEVICES), &s), BLOB_ERANGE);
    ck_status(blob_alloc_empty_cache(blob_place_device(FAKE_DEVICES)), BLOB_ERANGE);
    ck_status(blob_alloc_set_cache_limit(blob_place_device(FAKE_DEVICES), 0), BLOB_ERANGE);
    ck_status(blob_alloc_reset_peaks(blob_place_device(FAKE_DEVICES)), BLOB_ERANGE);
    ck_status(blob_alloc_get_stats(blob_place_device(-1), &s), BLOB_EINVAL);
    ck_status(blob_alloc_get_stats((blob_place){(blob_place_kind)7, 0}, &s), BLOB_EINVAL);
    ck_status(blob_alloc_get_stats((blob_place){BLOB_PLACE_PINNED, 1}, &s), BLOB_EINVAL);
    ck_status(blob_alloc_get_stats(DEV0, NULL), BLOB_EINVAL);
    ck_status(blob_place_alloc(DEV0, 64, NULL, NULL), BLOB_EINVAL);
    ck_status(blob_place_alloc(blob_place_device(FAKE_DEVICES), 64, NULL, &p), BLOB_ERANGE);
    ck_assert_ptr_null(p);
    p = &p;
    ck_status(blob_place_alloc(DEV1, 64, NULL, &p), BLOB_EDEVICE); /* device 0 is current */
    ck_assert_ptr_null(p);
    ck_status(blob_place_record_stream(DEV0, &s, NULL), BLOB_EINVAL);
    ck_status(blob_place_record_stream(DEV0, NULL, NULL), BLOB_EINVAL);
    blob_place_free(DEV0, &s); /* never handed out: ignored */
    char *h = get(HOST, 10, NULL);
    ck_ok(blob_place_record_stream(HOST, h, NULL));
    blob_place_free(HOST, h);
    ck_assert_int_eq(fake_get_stats().live_blocks, 0);
}
END_TEST

/* Small blocks are carved from one 2 MiB segment and merge back into it. */
START_TEST(test_split_merge_small)
{
    char *a = get(DEV0, 1000, NULL), *b = get(DEV0, 1000, NULL), *c = get(DEV0, 1000, NULL);
    ck_assert_ptr_eq(b, a + 1024);
    ck_assert_ptr_eq(c, b + 1024);
    blob_alloc_stats s = stats_of(DEV0);
    ck_assert_uint_eq(s.driver_allocs, 1);
    ck_assert_uint_eq(s.reserved, 2 * MIB);
    ck_assert_uint_eq(s.in_use, 3 * 1024);
    ck_assert_uint_eq(s.cache_hits, 2);
    blob_place_free(DEV0, b);
    ck_assert_ptr_eq(get(DEV0, 1024, NULL), b); /* the hole fits exactly */
    blob_place_free(DEV0, b);
    blob_place_free(DEV0, a);
    blob_place_free(DEV0, c);
    ck_assert_ptr_eq(get(DEV0, 3000, NULL), a); /* a, b, c and the rest merged */
    blob_place_free(DEV0, a);
    ck_ok(blob_alloc_set_cache_limit(DEV0, 0)); /* only whole segments can go */
    s = stats_of(DEV0);
    ck_assert_uint_eq(s.reserved, 0);
    ck_assert_uint_eq(s.driver_frees, 1);
    ck_assert_uint_eq(fake_get_stats().device_frees, 1);
}
END_TEST

START_TEST(test_split_merge_large)
{
    /* 1 MiB and more: a segment of the request rounded up to 2 MiB */
    char *x = get(DEV0, 6 * MIB, NULL);
    ck_assert_uint_eq(stats_of(DEV0).reserved, 6 * MIB);
    blob_place_free(DEV0, x);
    char *y = get(DEV0, 4 * MIB, NULL); /* best fit splits the free 6 MiB */
    char *z = get(DEV0, 2 * MIB, NULL); /* and takes the rest */
    ck_assert_ptr_eq(y, x);
    ck_assert_ptr_eq(z, x + 4 * MIB);
    ck_assert_uint_eq(fake_get_stats().device_allocs, 1);
    blob_place_free(DEV0, y);
    blob_place_free(DEV0, z);
    ck_assert_ptr_eq(get(DEV0, 6 * MIB, NULL), x); /* merged back into one block */
    ck_assert_uint_eq(fake_get_stats().device_allocs, 1);
    blob_place_free(DEV0, x);
    ck_ok(blob_alloc_empty_cache(DEV0));
    char *h = get(DEV0, 10 * MIB + 1, NULL);
    blob_alloc_stats s = stats_of(DEV0);
    ck_assert_uint_eq(s.reserved, 12 * MIB);
    ck_assert_uint_eq(s.in_use, 10 * MIB + 512);
    blob_place_free(DEV0, h);
    assert_reserved_matches();
}
END_TEST

START_TEST(test_best_fit)
{
    char *a = get(DEV0, 8 * KIB, NULL);
    char *s1 = get(DEV0, 512, NULL);
    char *b = get(DEV0, 4 * KIB, NULL);
    char *s2 = get(DEV0, 512, NULL);
    char *c = get(DEV0, 16 * KIB, NULL);
    char *s3 = get(DEV0, 512, NULL);
    blob_place_free(DEV0, a);
    blob_place_free(DEV0, b);
    blob_place_free(DEV0, c);
    ck_assert_ptr_eq(get(DEV0, 3 * KIB, NULL), b);
    ck_assert_ptr_eq(get(DEV0, 6 * KIB, NULL), a);
    ck_assert_ptr_eq(get(DEV0, 12 * KIB, NULL), c);
    ck_assert_uint_eq(stats_of(DEV0).in_use, 21 * KIB + 3 * 512);
    ck_assert_ptr_eq(get(DEV0, 1000, NULL), b + 3 * KIB); /* the 1 KiB left of b */
    ck_assert_uint_eq(fake_get_stats().device_allocs, 1);
    /* A block less than 1/8 above the request is handed out whole (a fresh segment on
     * another stream: e at its start, s4 behind it). */
    void *t;
    ck_ok(blob_stream_create(&t));
    char *e = get(DEV0, 8 * KIB, t), *s4 = get(DEV0, 512, t);
    ck_assert_ptr_eq(s4, e + 8 * KIB);
    blob_place_free(DEV0, e);
    size_t in_use = stats_of(DEV0).in_use;
    ck_assert_ptr_eq(get(DEV0, 7600, t), e);
    ck_assert_uint_eq(stats_of(DEV0).in_use, in_use + 8 * KIB);
    char *all[] = {a, b, c, b + 3 * KIB, e, s1, s2, s3, s4};
    for (int i = 0; i < 9; i++)
        blob_place_free(DEV0, all[i]);
    ck_assert_uint_eq(stats_of(DEV0).in_use, 0);
    ck_ok(blob_stream_destroy(t));
}
END_TEST

/* Every counter against the fake's own counts, for the device and pinned engines. */
static void check_counts(blob_place place, bool pinned)
{
    const size_t sizes[] = {100, 5000, MIB, 3 * MIB, 12 * MIB, 700 * KIB, 24 * MIB};
    enum { N = sizeof sizes / sizeof sizes[0] };
    char *p[N];
    size_t in_use = 0, peak = 0;
    uint64_t hits = 0;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++) {
            uint64_t allocs = stats_of(place).driver_allocs;
            p[i] = get(place, sizes[i], NULL);
            hits += stats_of(place).driver_allocs == allocs;
            in_use += round512(sizes[i]);
            peak = in_use > peak ? in_use : peak;
            blob_alloc_stats s = stats_of(place);
            ck_assert_uint_eq(s.in_use, in_use);
            ck_assert_uint_eq(s.in_use_peak, peak);
        }
        for (int i = 0; i < N; i += 2) {
            blob_place_free(place, p[i]);
            in_use -= round512(sizes[i]);
        }
        ck_ok(blob_alloc_reset_peaks(place));
        peak = in_use;
        for (int i = 1; i < N; i += 2) {
            blob_place_free(place, p[i]);
            in_use -= round512(sizes[i]);
        }
    }
    blob_alloc_stats s = stats_of(place);
    fake_stats f = fake_get_stats();
    ck_assert_uint_eq(s.in_use, 0);
    ck_assert_uint_eq(s.in_use_peak, peak);
    ck_assert_uint_eq(s.requests, 2 * N);
    ck_assert_uint_eq(s.cache_hits, hits);
    ck_assert_uint_eq(s.cache_hits + s.driver_allocs, 2 * N);
    ck_assert_uint_eq(s.driver_allocs, pinned ? f.pinned_allocs : f.device_allocs);
    ck_assert_uint_eq(s.reserved_peak, s.reserved); /* the second round reused the first */
    assert_reserved_matches();
    ck_ok(blob_alloc_empty_cache(place));
    s = stats_of(place);
    f = fake_get_stats();
    ck_assert_uint_eq(s.reserved, 0);
    ck_assert_uint_eq(s.driver_frees, pinned ? f.pinned_frees : f.device_frees);
    ck_assert_uint_eq(s.driver_frees, s.driver_allocs);
    ck_assert_uint_eq(s.oom_count, 0);
}

START_TEST(test_stats_device) { check_counts(DEV0, false); }
END_TEST

START_TEST(test_stats_pinned) { check_counts(PINNED, true); }
END_TEST

START_TEST(test_stats_host)
{
    char *a = get(HOST, 100, NULL), *b = get(HOST, 3000, NULL);
    blob_alloc_stats s = stats_of(HOST);
    ck_assert_uint_eq(s.in_use, 3100);
    ck_assert_uint_eq(s.reserved, 3100);
    ck_assert_uint_eq(s.requests, 2);
    ck_assert_uint_eq(s.driver_allocs, fake_get_stats().host_allocs);
    blob_place_free(HOST, a);
    blob_place_free(HOST, b);
    s = stats_of(HOST);
    ck_assert_uint_eq(s.in_use, 0);
    ck_assert_uint_eq(s.reserved, 0);
    ck_assert_uint_eq(s.in_use_peak, 3100);
    ck_assert_uint_eq(s.cache_hits, 0);
    ck_assert_uint_eq(s.driver_frees, fake_get_stats().host_frees);
    ck_assert_int_eq(fake_get_stats().live_host_blocks, 0);
}
END_TEST

/* A block freed without other streams is reused at once, on its own stream only. */
START_TEST(test_stream_owner)
{
    void *a, *b;
    test_streams_create(&a, &b);
    char *x = get(DEV0, 4096, a);
    blob_place_free(DEV0, x);
    char *y = get(DEV0, 4096, b);
    ck_assert_ptr_ne(y, x);
    ck_assert_uint_eq(fake_get_stats().device_allocs, 2);
    ck_assert_ptr_eq(get(DEV0, 4096, a), x);
    ck_assert_uint_eq(fake_get_stats().event_syncs + fake_get_stats().events_created, 0);
    blob_place_free(DEV0, x);
    blob_place_free(DEV0, y);
    test_streams_destroy(a, b);
}
END_TEST

/* A 12 MiB block (a segment of its own) used on stream b with queued work on it. */
static char *used_elsewhere(void *a, void *b, int value)
{
    char *x = get(DEV0, 12 * MIB, a);
    ck_ok(blob_place_record_stream(DEV0, x, b));
    ck_ok(blob_place_record_stream(DEV0, x, b)); /* recorded once */
    ck_ok(blob_place_record_stream(DEV0, x, a)); /* its own stream: nothing to record */
    ck_ok(blob__be->memset_async(x, value, 64, b));
    return x;
}

/* used_elsewhere on two streams made for it (test_streams_create) into *a and *b. */
static char *used_on_new_streams(void **a, void **b, int value)
{
    test_streams_create(a, b);
    return used_elsewhere(*a, *b, value);
}

START_TEST(test_stream_event)
{
    void *a, *b;
    test_streams_create(&a, &b);
    for (int round = 0; round < 2; round++) {
        char *x = used_elsewhere(a, b, 7 + round);
        blob_place_free(DEV0, x);
        char *y = get(DEV0, 12 * MIB, a); /* the event has not completed: a new segment */
        ck_assert_ptr_ne(y, x);
        ck_assert_int_eq(fake_queued(), 1);
        fake_drain();
        ck_assert_int_eq(x[0], 7 + round); /* the work ran on the block while it was pending */
        char *z = get(DEV0, 12 * MIB, a);
        ck_assert_ptr_eq(z, x);
        blob_place_free(DEV0, y);
        blob_place_free(DEV0, z);
    }
    fake_stats f = fake_get_stats();
    ck_assert_uint_eq(f.events_created, 1); /* the idle event was reused */
    ck_assert_uint_eq(f.device_allocs, 2);
    ck_assert_uint_eq(f.event_syncs, 0);
    ck_assert_uint_eq(stats_of(DEV0).cache_hits, 4);
    ck_ok(blob_alloc_empty_cache(DEV0));
    ck_assert_int_eq(fake_get_stats().live_blocks, 2); /* the streams; the event is gone */
    test_streams_destroy(a, b);
}
END_TEST

START_TEST(test_empty_cache_waits)
{
    void *a, *b;
    char *x = used_on_new_streams(&a, &b, 5);
    blob_place_free(DEV0, x);
    ck_assert_uint_eq(stats_of(DEV0).reserved, 12 * MIB);
    ck_ok(blob_alloc_empty_cache(DEV0));
    fake_stats f = fake_get_stats();
    ck_assert_uint_eq(f.event_syncs, 1);
    ck_assert_uint_eq(f.memsets, 1);
    ck_assert_int_eq(f.live_device_bytes, 0);
    ck_assert_int_eq(f.live_blocks, 2);
    ck_assert_uint_eq(stats_of(DEV0).reserved, 0);
    test_streams_destroy(a, b);
}
END_TEST

/* A failed event record falls back to synchronising the stream. */
START_TEST(test_event_failure)
{
    void *a, *b;
    char *x = used_on_new_streams(&a, &b, 3);
    fake_fail_alloc_at(1, false);
    blob_place_free(DEV0, x);
    fake_stats f = fake_get_stats();
    ck_assert_uint_eq(f.failed_allocs, 1);
    ck_assert_uint_eq(f.stream_syncs, 1);
    ck_assert_int_eq(fake_queued(), 0);
    ck_assert_ptr_eq(get(DEV0, 12 * MIB, a), x);
    blob_place_free(DEV0, x);
    test_streams_destroy(a, b);
}
END_TEST

START_TEST(test_oom_retry)
{
    blob_place_free(DEV0, get(DEV0, 12 * MIB, NULL));
    ck_assert_uint_eq(stats_of(DEV0).reserved, 12 * MIB);
    fake_fail_alloc_at(1, false);
    char *y = get(DEV0, 14 * MIB, NULL);
    fake_stats f = fake_get_stats();
    ck_assert_uint_eq(f.failed_allocs, 1);
    ck_assert_uint_eq(f.device_frees, 1); /* the cached segment went back */
    ck_assert_uint_eq(f.device_allocs, 2);
    blob_alloc_stats s = stats_of(DEV0);
    ck_assert_uint_eq(s.oom_count, 0);
    ck_assert_uint_eq(s.reserved, 14 * MIB);
    ck_assert_uint_eq(s.driver_frees, 1);
    blob_place_free(DEV0, y);
}
END_TEST

START_TEST(test_oom_persistent)
{
    void *a, *b, *p = &p;
    blob_place_free(DEV0, used_on_new_streams(&a, &b, 9));
    fake_fail_alloc_at(1, true);
    ck_status(blob_place_alloc(DEV0, 14 * MIB, a, &p), BLOB_EDEVMEM);
    ck_assert_ptr_null(p);
    fake_stats f = fake_get_stats();
    ck_assert_uint_eq(f.failed_allocs, 2); /* the request and its retry */
    ck_assert_uint_eq(f.event_syncs, 1);   /* the pending block was waited for and freed */
    ck_assert_uint_eq(f.memsets, 1);
    ck_assert_int_eq(f.live_device_bytes, 0);
    blob_alloc_stats s = stats_of(DEV0);
    ck_assert_uint_eq(s.oom_count, 1);
    ck_assert_uint_eq(s.reserved, 0);
    ck_assert_uint_eq(s.in_use, 0);
    ck_status(blob_place_alloc(PINNED, 100, NULL, &p), BLOB_ENOMEM);
    ck_status(blob_place_alloc(HOST, 100, NULL, &p), BLOB_ENOMEM);
    ck_assert_uint_eq(stats_of(PINNED).oom_count, 1);
    ck_assert_uint_eq(stats_of(HOST).oom_count, 1);
    fake_fail_alloc_at(0, false);
    uint64_t attempts = fake_alloc_attempts();
    ck_status(blob_place_alloc(DEV0, SIZE_MAX, NULL, &p), BLOB_EDEVMEM);
    ck_assert_uint_eq(fake_alloc_attempts(), attempts);
    ck_assert_uint_eq(stats_of(DEV0).oom_count, 2);
    ck_assert_int_eq(fake_get_stats().live_blocks, 2);
    test_streams_destroy(a, b);
}
END_TEST

static size_t cached_bytes(blob_place place)
{
    blob_alloc_stats s = stats_of(place);
    return s.reserved - s.in_use;
}

START_TEST(test_cache_limit)
{
    ck_assert_uint_eq(stats_of(DEV0).cached_limit, SIZE_MAX);
    ck_ok(blob_alloc_set_cache_limit(DEV0, 4 * MIB));
    ck_assert_uint_eq(stats_of(DEV0).cached_limit, 4 * MIB);
    char *a = get(DEV0, 12 * MIB, NULL), *b = get(DEV0, 12 * MIB, NULL);
    char *c = get(DEV0, 1000, NULL);
    blob_place_free(DEV0, c);
    ck_assert_uint_eq(cached_bytes(DEV0), 2 * MIB); /* under the cap: kept */
    blob_place_free(DEV0, a);
    ck_assert_uint_le(cached_bytes(DEV0), 4 * MIB);
    ck_assert_uint_le(stats_of(DEV0).reserved, 14 * MIB);
    blob_place_free(DEV0, b);
    ck_assert_uint_le(cached_bytes(DEV0), 4 * MIB);
    ck_ok(blob_alloc_set_cache_limit(DEV0, SIZE_MAX));
    blob_place_free(DEV0, get(DEV0, 12 * MIB, NULL));
    ck_assert_uint_ge(cached_bytes(DEV0), 12 * MIB);
    ck_ok(blob_alloc_set_cache_limit(DEV0, 0)); /* the excess goes at once */
    ck_assert_uint_eq(stats_of(DEV0).reserved, 0);
    ck_assert_int_eq(fake_get_stats().live_device_bytes, 0);
    /* A cap applies to what becomes free later, too. */
    char *d = get(DEV0, 1000, NULL);
    ck_assert_uint_eq(stats_of(DEV0).reserved, 2 * MIB);
    blob_place_free(DEV0, d);
    ck_assert_uint_eq(stats_of(DEV0).reserved, 0);
    blob_alloc_stats s = stats_of(DEV0);
    ck_assert_uint_eq(s.driver_frees, fake_get_stats().device_frees);
}
END_TEST

START_TEST(test_caching_off)
{
    void *a, *b;
    test_streams_create(&a, &b);
    char *x = get(DEV0, 1000, NULL);
    char *w = used_elsewhere(a, b, 1);
    blob_place_free(DEV0, get(DEV0, 12 * MIB, NULL));
    ck_assert_uint_eq(stats_of(DEV0).reserved, 2 * MIB + 24 * MIB);
    ck_ok(blob_alloc_set_caching(false)); /* empties the caches */
    ck_assert(!blob_alloc_caching());
    ck_assert_uint_eq(stats_of(DEV0).reserved, 2 * MIB + 12 * MIB);
    fake_reset_counts();
    ck_ok(blob__be->memset_async(w, 2, 64, b)); /* the release's sync ran the first */
    char *p = get(DEV0, 1000, NULL), *q = get(DEV0, 1000, NULL);
    char *r = get(PINNED, 1000, NULL);
    fake_stats f = fake_get_stats();
    ck_assert_uint_eq(f.device_allocs, 2);
    ck_assert_uint_eq(f.pinned_allocs, 1);
    ck_assert_uint_eq(stats_of(DEV0).reserved, 14 * MIB + 2000);
    ck_assert_uint_eq(stats_of(DEV0).in_use, 1024 + 12 * MIB + 2000);
    blob_place_free(DEV0, w); /* waits for its other stream, then its segment goes back */
    f = fake_get_stats();
    ck_assert_uint_eq(f.event_syncs, 1);
    ck_assert_uint_eq(f.memsets, 1);
    ck_assert_uint_eq(f.device_frees, 1);
    blob_place_free(DEV0, x); /* allocated while caching was on: its segment goes back */
    blob_place_free(DEV0, p);
    blob_place_free(PINNED, r);
    f = fake_get_stats();
    ck_assert_uint_eq(f.device_frees, 3);
    ck_assert_uint_eq(f.pinned_frees, 1);
    ck_assert_uint_eq(stats_of(DEV0).reserved, 1000);
    ck_ok(blob_alloc_set_caching(true));
    blob_place_free(DEV0, get(DEV0, 1000, NULL));
    blob_place_free(DEV0, q); /* allocated while caching was off: straight back */
    f = fake_get_stats();
    ck_assert_uint_eq(f.device_allocs, 3);
    ck_assert_uint_eq(f.device_frees, 4);
    blob_alloc_stats s = stats_of(DEV0);
    ck_assert_uint_eq(s.reserved, 2 * MIB);
    ck_assert_uint_eq(s.requests, 6);
    ck_assert_uint_eq(s.cache_hits, 0);
    test_streams_destroy(a, b);
}
END_TEST

/* Pinned memory for requests of 1 MiB and more exceeds them by at most 1/8, whether it
 * comes fresh from the driver or from a larger cached block. */
START_TEST(test_pinned_waste)
{
    int checked = 0;
    for (size_t n = MIB; n <= 600 * MIB; n += n / 23 + 4099) {
        char *p = get(PINNED, n, NULL);
        blob_alloc_stats s = stats_of(PINNED);
        ck_assert_msg(s.in_use - n <= n / 8, "%zu bytes: %zu in use", n, s.in_use);
        ck_assert_msg(s.reserved - n <= n / 8, "%zu bytes: %zu reserved", n, s.reserved);
        blob_place_free(PINNED, p);
        size_t m = n - n / 3;
        if (m >= MIB) {
            ck_assert_ptr_eq(get(PINNED, m, NULL), p);
            s = stats_of(PINNED);
            ck_assert_msg(s.in_use - m <= m / 8, "%zu from %zu: %zu in use", m, n, s.in_use);
            blob_place_free(PINNED, p);
        }
        ck_ok(blob_alloc_empty_cache(PINNED));
        checked++;
    }
    ck_assert_int_gt(checked, 100);
    ck_assert_uint_eq(stats_of(PINNED).reserved, 0);
}
END_TEST

START_TEST(test_two_devices)
{
    void *s0, *s1;
    ck_ok(blob_stream_create(&s0));
    ck_ok(blob_device_set(1));
    ck_ok(blob_stream_create(&s1));
    char *x = get(DEV1, 12 * MIB, s1);
    ck_ok(blob_place_record_stream(DEV1, x, s0));
    ck_ok(blob__be->memset_async(x, 1, 64, s0));
    ck_ok(blob_device_set(0));
    blob_place_free(DEV1, x); /* with the other device current */
    int dev = -1;
    ck_ok(blob_device_get(&dev));
    ck_assert_int_eq(dev, 0);
    ck_assert_uint_eq(stats_of(DEV1).reserved, 12 * MIB);
    ck_assert_uint_eq(stats_of(DEV0).reserved, 0);
    ck_ok(blob_alloc_empty_cache(DEV1));
    ck_ok(blob_device_get(&dev));
    ck_assert_int_eq(dev, 0);
    ck_assert_uint_eq(stats_of(DEV1).reserved, 0);
    ck_assert_uint_eq(fake_get_stats().memsets, 1);
    test_streams_destroy(s0, s1);
}
END_TEST

/* Memory goes back through the table that allocated it; another table is refused. */
START_TEST(test_backend_contract)
{
    char *h = get(HOST, 100, NULL);
    blob__backend_install(NULL);
    void *p = &p;
    ck_status(blob_place_alloc(HOST, 100, NULL, &p), BLOB_EBUSY);
    ck_assert_ptr_null(p);
    blob_place_free(HOST, h);
    ck_assert_uint_eq(fake_get_stats().host_frees, 1);
    ck_ok(blob_place_alloc(HOST, 100, NULL, &p)); /* the place is empty: the new table serves */
    blob_place_free(HOST, p);
    fake_install();
}
END_TEST

/* ---- several threads ---- */

enum { THREADS = 4, ITERS = 4000, LIVE = 16 };

typedef struct {
    char *p;
    size_t n;
} span;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static span reg[THREADS * LIVE];
static int n_reg;
static void *side[FAKE_DEVICES]; /* shared streams, one per device */

/* Register a live block; false if it overlaps another. */
static bool reg_add(char *p, size_t n)
{
    bool ok = true;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < n_reg; i++)
        ok = ok && (p + n <= reg[i].p || reg[i].p + reg[i].n <= p);
    if (ok)
        reg[n_reg++] = (span){p, n};
    pthread_mutex_unlock(&reg_mu);
    return ok;
}

static void reg_del(char *p)
{
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < n_reg; i++)
        if (reg[i].p == p)
            reg[i] = reg[--n_reg];
    pthread_mutex_unlock(&reg_mu);
}

typedef struct {
    int id;
    uint64_t rng;
    int errors;
    uint64_t requests[3]; /* pinned, device 0, device 1 */
} worker;

static uint64_t next(worker *w)
{
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    return w->rng;
}

typedef struct {
    char *p;
    size_t n;
    int place; /* 0 pinned, 1 this thread's device */
    unsigned char tag;
} slot;

static bool intact(const slot *s)
{
    return s->p[0] == (char)s->tag && s->p[s->n / 2] == (char)s->tag &&
           s->p[s->n - 1] == (char)s->tag;
}

static void *stress_thread(void *arg)
{
    worker *w = arg;
    int dev = w->id % 2;
    blob_place places[2] = {PINNED, blob_place_device(dev)};
    void *own = NULL;
    if (blob__be->set_device(dev) != BLOB_OK || blob__be->stream_create(&own, 0) != BLOB_OK) {
        w->errors++;
        return NULL;
    }
    slot live[LIVE] = {{0}};
    unsigned char tag = (unsigned char)(w->id * 64);
    for (int it = 0; it < ITERS + LIVE; it++) {
        slot *s = &live[it < ITERS ? (int)(next(w) % LIVE) : it - ITERS];
        if (s->p) {
            w->errors += !intact(s);
            reg_del(s->p);
            blob_place pl = places[s->place];
            if (next(w) % 4 == 0) { /* used on the shared stream too, with work queued */
                w->errors += blob_place_record_stream(pl, s->p, side[dev]) != BLOB_OK;
                if (s->place)
                    w->errors += blob__be->memset_async(s->p, s->tag, 64, side[dev]) != BLOB_OK;
            }
            blob_place_free(pl, s->p);
            s->p = NULL;
        } else if (it < ITERS) {
            s->n = next(w) % 10 ? 64 + next(w) % (256 * KIB) : MIB + next(w) % (12 * MIB);
            s->place = (int)(next(w) % 2);
            if (!++tag)
                ++tag;
            s->tag = tag;
            void *stream = next(w) % 3 ? own : NULL, *p = NULL;
            if (blob_place_alloc(places[s->place], s->n, stream, &p) != BLOB_OK || !p ||
                !reg_add(p, s->n)) {
                w->errors++;
                continue;
            }
            s->p = p;
            s->p[0] = s->p[s->n / 2] = s->p[s->n - 1] = (char)s->tag;
            w->requests[s->place ? 1 + dev : 0]++;
        }
        if (it % 128 == 0) /* the fake runs device work with that device current */
            w->errors += blob__be->stream_synchronize(side[dev]) != BLOB_OK;
    }
    blob__be->stream_destroy(own);
    return NULL;
}

START_TEST(test_threads)
{
    const blob_place counted[3] = {PINNED, DEV0, DEV1};
    for (int d = 0; d < FAKE_DEVICES; d++)
        ck_ok(blob_stream_create(&side[d]));
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.id = i, .rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)};
        ck_assert_int_eq(pthread_create(&t[i], NULL, stress_thread, &w[i]), 0);
    }
    uint64_t requests[3] = {0};
    for (int i = 0; i < THREADS; i++) {
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
        ck_assert_int_eq(w[i].errors, 0);
        for (int k = 0; k < 3; k++)
            requests[k] += w[i].requests[k];
    }
    ck_assert_int_eq(n_reg, 0);
    for (int d = FAKE_DEVICES - 1; d >= 0; d--) {
        ck_ok(blob_device_set(d));
        ck_ok(blob_stream_synchronize(side[d]));
    }
    ck_assert_int_eq(fake_get_stats().violations, 0);
    for (int k = 0; k < 3; k++) {
        blob_alloc_stats s = stats_of(counted[k]);
        ck_assert_uint_eq(s.in_use, 0);
        ck_assert_uint_eq(s.requests, requests[k]);
        ck_assert_uint_gt(s.cache_hits, 0);
        ck_ok(blob_alloc_empty_cache(counted[k]));
        ck_assert_uint_eq(stats_of(counted[k]).reserved, 0);
    }
    fake_stats f = fake_get_stats();
    ck_assert_int_eq(f.live_device_bytes + f.live_pinned_bytes, 0);
    ck_assert_uint_eq(stats_of(PINNED).driver_allocs, f.pinned_allocs);
    ck_assert_uint_eq(stats_of(DEV0).driver_allocs + stats_of(DEV1).driver_allocs, f.device_allocs);
    for (int d = 0; d < FAKE_DEVICES; d++)
        ck_ok(blob_stream_destroy(side[d]));
}
END_TEST

/* ---- real CUDA ---- */

static void gpu_round_trip(blob_place place, size_t bytes, bool caching)
{
    ck_ok(blob_alloc_set_caching(caching));
    ck_ok(blob_alloc_empty_cache(place));
    blob_alloc_stats s0 = stats_of(place);
    ck_assert_uint_eq(s0.reserved, s0.in_use);
    char *x = get(place, bytes, NULL);
    if (place.kind == BLOB_PLACE_DEVICE)
        ck_ok(blob__be->memset_async(x, 1, bytes, NULL));
    else
        memset(x, 1, bytes);
    ck_ok(blob_device_synchronize());
    blob_place_free(place, x);
    char *y = get(place, bytes, NULL);
    blob_alloc_stats s = stats_of(place);
    ck_assert_uint_eq(s.requests, s0.requests + 2);
    if (caching) {
        ck_assert_ptr_eq(y, x);
        ck_assert_uint_eq(s.cache_hits, s0.cache_hits + 1);
        ck_assert_uint_eq(s.driver_allocs, s0.driver_allocs + 1);
    } else {
        ck_assert_uint_eq(s.cache_hits, s0.cache_hits);
        ck_assert_uint_eq(s.driver_allocs, s0.driver_allocs + 2);
        ck_assert_uint_eq(s.driver_frees, s0.driver_frees + 1);
        ck_assert_uint_eq(s.reserved, s0.reserved + bytes);
    }
    ck_assert_uint_ge(s.in_use, s0.in_use + bytes);
    blob_place_free(place, y);
    ck_ok(blob_alloc_empty_cache(place));
    s = stats_of(place);
    ck_assert_uint_eq(s.in_use, s0.in_use);
    ck_assert_uint_eq(s.reserved, s0.reserved);
    ck_assert_uint_eq(s.driver_frees - s0.driver_frees, s.driver_allocs - s0.driver_allocs);
}

START_TEST(test_gpu_cache)
{
    bool saved = blob_alloc_caching();
    ck_ok(blob_device_set(0));
    for (int caching = 1; caching >= 0; caching--) {
        gpu_round_trip(blob_place_device(0), MIB, caching);
        gpu_round_trip(blob_place_device(0), 12 * MIB + 3, caching);
        gpu_round_trip(blob_place_pinned(), 3 * MIB + 5, caching);
        gpu_round_trip(blob_place_pinned(), 1000, caching);
    }
    ck_ok(blob_alloc_set_caching(saved));
}
END_TEST

START_TEST(test_gpu_stream_event)
{
    bool saved = blob_alloc_caching();
    blob_place d = blob_place_device(0);
    void *a, *b;
    ck_ok(blob_device_set(0));
    ck_ok(blob_alloc_set_caching(true));
    ck_ok(blob_alloc_empty_cache(d));
    test_streams_create(&a, &b);
    char *x = get(d, 12 * MIB, a);
    ck_ok(blob_place_record_stream(d, x, b));
    ck_ok(blob__be->memset_async(x, 0, 12 * MIB, b));
    blob_place_free(d, x);
    ck_ok(blob_stream_synchronize(b));
    ck_assert_ptr_eq(get(d, 12 * MIB, a), x); /* the event has completed: reused */
    blob_place_free(d, x);
    ck_ok(blob_alloc_empty_cache(d));
    blob_alloc_stats s = stats_of(d);
    ck_assert_uint_eq(s.reserved, s.in_use);
    test_streams_destroy(a, b);
    ck_ok(blob_alloc_set_caching(saved));
}
END_TEST

void alloc_suite(Suite *s)
{
    TCase *tc = suite_case(s, "fake", NULL, 60, alloc_setup, alloc_teardown);
    add_tests(tc, test_size_zero, test_bad_places, test_split_merge_small, test_split_merge_large,
              test_best_fit, test_stats_device, test_stats_pinned, test_stats_host,
              test_stream_owner, test_stream_event, test_empty_cache_waits, test_event_failure,
              test_oom_retry, test_oom_persistent, test_cache_limit, test_caching_off,
              test_pinned_waste, test_two_devices, test_backend_contract, test_threads);
    tc = suite_case(s, "gpu", "gpu", 0, NULL, NULL);
    add_tests(tc, test_gpu_cache, test_gpu_stream_event);
}

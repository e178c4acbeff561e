/* The N-D blob: shapes, reshape and capacity, sharing, borrowing, update and friends,
 * for float32 and float64 (loop index = dtype). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fake_backend.h"
#include "testutil.h"

static blob *make(blob_dtype dt, int n, const int64_t *shape)
{
    blob *b;
    ck_ok(blob_create(&b, dt, BLOB_DEVICE_DEFAULT, n, shape));
    return b;
}

/* Fill data (diff) with random values and return a malloc'd double copy. */
static double *fill_random(blob *b, bool diff)
{
    void *p;
    ck_ok(diff ? blob_mutable_cpu_diff(b, &p) : blob_mutable_cpu_data(b, &p));
    int64_t n = blob_count(b);
    test_fill(blob_get_dtype(b), p, n, -2.0, 2.0);
    double *ref = malloc((size_t)(n ? n : 1) * sizeof *ref);
    for (int64_t i = 0; i < n; i++)
        ref[i] = test_get(blob_get_dtype(b), p, i);
    return ref;
}

static void assert_values(blob *b, bool diff, const double *ref, double tol)
{
    const void *p;
    ck_ok(diff ? blob_cpu_diff(b, &p) : blob_cpu_data(b, &p));
    double err = test_rel_err(blob_get_dtype(b), p, ref, blob_count(b), 1e-3);
    ck_assert_msg(err <= tol, "relative error %g > %g", err, tol);
}

START_TEST(test_create_and_queries)
{
    blob_dtype dt = (blob_dtype)_i;
    int64_t shape[] = {2, 3, 4, 5};
    blob *b = make(dt, 4, shape);
    ck_assert_int_eq(blob_get_dtype(b), dt);
    ck_assert_int_eq(blob_num_axes(b), 4);
    ck_assert_int_eq(blob_count(b), 120);
    ck_assert_int_eq(blob_capacity(b), 120);
    ck_assert_int_eq(blob_shape(b)[2], 4);
    ck_assert_int_eq(blob_device(b), 0);
    ck_assert_int_eq(blob_syncedmem_head(blob_data_mem(b)), BLOB_HEAD_UNINITIALIZED);
    char s[BLOB_SHAPE_STRING_MAX];
    ck_ok(blob_shape_string(b, s, sizeof s));
    ck_assert_str_eq(s, "2 3 4 5 (120)");
    ck_status(blob_shape_string(b, s, 8), BLOB_ERANGE);
    int64_t v;
    ck_ok(blob_shape_at(b, -1, &v));
    ck_assert_int_eq(v, 5);
    ck_ok(blob_shape_at(b, -4, &v));
    ck_assert_int_eq(v, 2);
    ck_status(blob_shape_at(b, -5, &v), BLOB_ERANGE);
    ck_status(blob_shape_at(b, 4, &v), BLOB_ERANGE);
    int axis;
    ck_ok(blob_canonical_axis(b, -2, &axis));
    ck_assert_int_eq(axis, 2);
    ck_ok(blob_count_range(b, 1, 3, &v));
    ck_assert_int_eq(v, 12);
    ck_ok(blob_count_range(b, 2, 2, &v));
    ck_assert_int_eq(v, 1);
    ck_ok(blob_count_range(b, 0, 4, &v));
    ck_assert_int_eq(v, 120);
    ck_status(blob_count_range(b, 3, 2, &v), BLOB_ERANGE);
    ck_status(blob_count_range(b, 0, 5, &v), BLOB_ERANGE);
    ck_status(blob_count_range(b, -1, 2, &v), BLOB_ERANGE);
    int64_t n, c, h, w;
    ck_ok(blob_legacy_shape(b, &n, &c, &h, &w));
    ck_assert(n == 2 && c == 3 && h == 4 && w == 5);
    ck_assert_uint_eq(blob_dtype_size(dt), dt == BLOB_FLOAT32 ? 4 : 8);
    blob_free(b);
    blob_free(NULL);
}
END_TEST

START_TEST(test_special_shapes)
{
    blob_dtype dt = (blob_dtype)_i;
    blob *b = make(dt, 0, NULL);
    ck_assert_int_eq(blob_count(b), 1);
    char s[BLOB_SHAPE_STRING_MAX];
    ck_ok(blob_shape_string(b, s, sizeof s));
    ck_assert_str_eq(s, "(1)");
    int64_t n, c, h, w;
    ck_ok(blob_legacy_shape(b, &n, &c, &h, &w));
    ck_assert(n == 1 && c == 1 && h == 1 && w == 1);
    int64_t two[] = {7, 3};
    ck_ok(blob_reshape(b, 2, two));
    ck_ok(blob_legacy_shape(b, &n, &c, &h, &w)); /* trailing axes read as 1 */
    ck_assert(n == 7 && c == 3 && h == 1 && w == 1);
    int64_t many[BLOB_MAX_AXES + 1];
    for (int i = 0; i <= BLOB_MAX_AXES; i++)
        many[i] = 1;
    ck_ok(blob_reshape(b, BLOB_MAX_AXES, many));
    ck_status(blob_legacy_shape(b, &n, &c, &h, &w), BLOB_ESTATE);
    ck_status(blob_reshape(b, BLOB_MAX_AXES + 1, many), BLOB_EINVAL);
    ck_assert_int_eq(blob_num_axes(b), BLOB_MAX_AXES);
    /* counts beyond INT_MAX are fine: nothing is allocated until touched */
    int64_t huge[] = {1 << 20, 1 << 20, 4};
    ck_ok(blob_reshape(b, 3, huge));
    ck_assert_int_eq(blob_count(b), (int64_t)1 << 42);
    int64_t over[] = {INT64_MAX / 2, 3};
    ck_status(blob_reshape(b, 2, over), BLOB_EOVERFLOW);
    ck_assert_int_eq(blob_count(b), (int64_t)1 << 42);
    int64_t zero_then_huge[] = {0, (int64_t)1 << 62, (int64_t)1 << 62};
    ck_status(blob_reshape(b, 3, zero_then_huge), BLOB_EOVERFLOW); /* every product must fit */
    int64_t neg[] = {2, -1};
    ck_status(blob_reshape(b, 2, neg), BLOB_EINVAL);
    ck_status(blob_reshape(b, 2, NULL), BLOB_EINVAL);
    blob_free(b);
    ck_status(blob_create(&b, (blob_dtype)9, BLOB_HOST_ONLY, 0, NULL), BLOB_EINVAL);
    ck_assert_ptr_null(b);
}
END_TEST

/* caffe#7060: every index is checked, with < rather than <=. */
START_TEST(test_offset)
{
    int64_t shape[] = {2, 3, 4, 5};
    blob *b = make((blob_dtype)_i, 4, shape);
    int64_t off;
    int64_t idx[] = {1, 2, 3, 4};
    ck_ok(blob_offset(b, 4, idx, &off));
    ck_assert_int_eq(off, ((1 * 3 + 2) * 4 + 3) * 5 + 4);
    ck_ok(blob_offset(b, 2, idx, &off));
    ck_assert_int_eq(off, (1 * 3 + 2) * 4 * 5);
    ck_ok(blob_offset(b, 0, NULL, &off));
    ck_assert_int_eq(off, 0);
    int64_t bad[][4] = {{2, 0, 0, 0},  {0, 3, 0, 0},  {0, 0, 4, 0},  {0, 0, 0, 5},
                        {0, -1, 0, 0}, {0, 0, -1, 0}, {0, 0, 0, -1}, {-1, 0, 0, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_status(blob_offset(b, 4, bad[i], &off), BLOB_ERANGE);
    int64_t five[] = {0, 0, 0, 0, 0};
    ck_status(blob_offset(b, 5, five, &off), BLOB_ERANGE);
    int64_t empty[] = {2, 0}, one[] = {1};
    ck_ok(blob_reshape(b, 2, empty));
    ck_status(blob_offset(b, 1, one, &off), BLOB_ERANGE); /* axis 1 has no index 0 */
    blob_free(b);
}
END_TEST

START_TEST(test_reshape_keeps_memory_within_capacity)
{
    blob_dtype dt = (blob_dtype)_i;
    int64_t big[] = {4, 6};
    blob *b = make(dt, 2, big);
    double *ref = fill_random(b, false);
    const void *before, *after;
    ck_ok(blob_cpu_data(b, &before));
    uint64_t allocs = fake_get_stats().pinned_allocs;
    int64_t small[] = {3, 5};
    ck_ok(blob_reshape(b, 2, small));
    ck_assert_int_eq(blob_count(b), 15);
    ck_assert_int_eq(blob_capacity(b), 24);
    ck_ok(blob_cpu_data(b, &after));
    ck_assert_ptr_eq(before, after);
    assert_values(b, false, ref, 0); /* contents kept */
    ck_ok(blob_reshape(b, 2, big));  /* back up to capacity: still no allocation */
    ck_ok(blob_cpu_data(b, &after));
    ck_assert_ptr_eq(before, after);
    ck_assert_int_eq(fake_get_stats().pinned_allocs, allocs);
    int64_t bigger[] = {5, 6};
    ck_ok(blob_reshape(b, 2, bigger)); /* growth: fresh lazy blocks, zero on first touch */
    ck_assert_int_eq(blob_capacity(b), 30);
    ck_assert_int_eq(blob_syncedmem_head(blob_data_mem(b)), BLOB_HEAD_UNINITIALIZED);
    ck_ok(blob_cpu_data(b, &after));
    for (int i = 0; i < 30; i++)
        ck_assert(test_get(dt, after, i) == 0.0);
    /* shrink_to_fit gives memory back and keeps the values */
    double *ref2 = fill_random(b, false);
    int64_t tiny[] = {2, 2};
    ck_ok(blob_reshape(b, 2, tiny));
    ck_ok(blob_shrink_to_fit(b));
    ck_assert_int_eq(blob_capacity(b), 4);
    assert_values(b, false, ref2, 0);
    ck_ok(blob_shrink_to_fit(b)); /* nothing spare: no-op */
    ck_assert_int_eq(blob_capacity(b), 4);
    int64_t like[] = {3, 1, 2};
    blob *o = make(dt, 3, like);
    ck_ok(blob_reshape_like(b, o));
    ck_assert_int_eq(blob_count(b), 6);
    ck_assert_int_eq(blob_shape(b)[2], 2);
    blob_free(o);
    blob_free(b);
    free(ref);
    free(ref2);
}
END_TEST

/* caffe#5571: a count-0 blob's accessors work. */
START_TEST(test_count_zero)
{
    int64_t shape[] = {3, 0, 2};
    blob *b = make((blob_dtype)_i, 3, shape);
    ck_assert_int_eq(blob_count(b), 0);
    const void *c;
    void *m;
    ck_ok(blob_cpu_data(b, &c));
    ck_ok(blob_mutable_cpu_diff(b, &m));
    ck_ok(blob_gpu_data(b, &c));
    ck_ok(blob_update(b));
    double v;
    ck_ok(blob_asum_data(b, &v));
    ck_assert(v == 0.0);
    ck_ok(blob_scale_diff(b, 3.0));
    blob *o = make((blob_dtype)_i, 3, shape);
    ck_ok(blob_copy_from(o, b, false, false));
    ck_ok(blob_share_data(o, b));
    blob_free(o);
    blob_free(b);
}
END_TEST

/* caffe#5439: sharing sets the capacity to what the shared block holds. */
START_TEST(test_share_data_capacity)
{
    blob_dtype dt = (blob_dtype)_i;
    int64_t s10[] = {10}, s20[] = {20}, s15[] = {15}, s7[] = {7};
    blob *a = make(dt, 1, s10);
    blob *b = make(dt, 1, s20);
    double *ref = fill_random(a, false);
    ck_ok(blob_reshape(b, 1, s10)); /* b's capacity stays 20 */
    blob *seven = make(dt, 1, s7);
    ck_status(blob_share_data(b, seven), BLOB_ESHAPE);
    blob_free(seven);
    ck_ok(blob_share_data(b, a));
    ck_assert_ptr_eq(blob_data_mem(b), blob_data_mem(a));
    ck_assert_int_eq(blob_capacity(b), 10);
    assert_values(b, false, ref, 0);
    void *p;
    ck_ok(blob_mutable_cpu_data(b, &p)); /* writes are seen by a */
    if (dt == BLOB_FLOAT32)
        ((float *)p)[0] = 99.0f;
    else
        ((double *)p)[0] = 99.0;
    ref[0] = 99.0;
    assert_values(a, false, ref, 0);
    ck_ok(blob_reshape(b, 1, s15)); /* past the shared block: b gets its own */
    ck_assert_ptr_ne(blob_data_mem(b), blob_data_mem(a));
    ck_ok(blob_mutable_cpu_data(b, &p));
    memset(p, 0, 15 * blob_dtype_size(dt));
    assert_values(a, false, ref, 0);
    ck_ok(blob_share_diff(b, b)); /* sharing with itself: no-op */
    blob_free(b);
    assert_values(a, false, ref, 0);
    blob_free(a);
    free(ref);
}
END_TEST

START_TEST(test_share_diff)
{
    blob_dtype dt = (blob_dtype)_i;
    int64_t s[] = {3, 4}, t[] = {12};
    blob *a = make(dt, 2, s), *b = make(dt, 1, t);
    double *ref = fill_random(a, true);
    ck_ok(blob_share_diff(b, a));
    assert_values(b, true, ref, 0);
    blob *f;
    ck_ok(blob_create(&f, dt == BLOB_FLOAT32 ? BLOB_FLOAT64 : BLOB_FLOAT32, BLOB_DEVICE_DEFAULT, 1,
                      t));
    ck_status(blob_share_diff(f, a), BLOB_EINVAL);
    ck_status(blob_share_diff(NULL, a), BLOB_EINVAL);
    blob_free(a);
    assert_values(b, true, ref, 0); /* the block outlives a */
    blob_free(b);
    blob_free(f);
    free(ref);
}
END_TEST

START_TEST(test_set_cpu_data)
{
    blob_dtype dt = (blob_dtype)_i;
    int64_t s[] = {6};
    blob *a = make(dt, 1, s), *b = make(dt, 1, s);
    double *ref = fill_random(a, false);
    ck_ok(blob_share_data(b, a));
    size_t bytes = 6 * blob_dtype_size(dt);
    void *mine = calloc(6, blob_dtype_size(dt));
    ck_status(blob_set_cpu_data(b, mine, bytes - 1), BLOB_EINVAL);
    ck_ok(blob_set_cpu_data(b, mine, bytes));
    ck_assert_ptr_ne(blob_data_mem(b), blob_data_mem(a)); /* a keeps its own data */
    assert_values(a, false, ref, 0);
    const void *p;
    ck_ok(blob_cpu_data(b, &p));
    ck_assert_ptr_eq(p, mine);
    int64_t s2[] = {2};
    ck_ok(blob_reshape(a, 1, s2)); /* block larger than count: replaced by an exact one */
    ck_ok(blob_set_cpu_data(a, mine, 2 * blob_dtype_size(dt)));
    ck_assert_uint_eq(blob_syncedmem_size(blob_data_mem(a)), 2 * blob_dtype_size(dt));
    blob_free(a);
    blob_free(b);
    free(mine);
    free(ref);
}
END_TEST

START_TEST(test_update_and_norms_cpu)
{
    blob_dtype dt = (blob_dtype)_i;
    int64_t s[] = {5, 7};
    blob *b = make(dt, 2, s);
    double v;
    ck_status(blob_update(b), BLOB_ESTATE);
    ck_ok(blob_asum_data(b, &v)); /* UNINITIALIZED: 0, nothing allocated */
    ck_assert(v == 0.0);
    ck_ok(blob_sumsq_diff(b, &v));
    ck_ok(blob_scale_data(b, 2.0));
    ck_assert_int_eq(blob_syncedmem_head(blob_data_mem(b)), BLOB_HEAD_UNINITIALIZED);
    ck_assert_int_eq(fake_get_stats().pinned_allocs, 0);
    double *x = fill_random(b, false), *d = fill_random(b, true);
    double asum = 0, sumsq = 0, dsq = 0;
    for (int i = 0; i < 35; i++) {
        asum += fabs(x[i]);
        sumsq += x[i] * x[i];
        dsq += d[i] * d[i];
        x[i] -= d[i];
    }
    double tol = dt == BLOB_FLOAT32 ? 1e-5 : 1e-12;
    ck_ok(blob_asum_data(b, &v));
    ck_assert_double_eq_tol(v, asum, asum * tol);
    ck_ok(blob_sumsq_data(b, &v));
    ck_assert_double_eq_tol(v, sumsq, sumsq * tol);
    ck_ok(blob_sumsq_diff(b, &v));
    ck_assert_double_eq_tol(v, dsq, dsq * tol);
    ck_ok(blob_update(b));
    ck_assert_int_eq(blob_syncedmem_head(blob_data_mem(b)), BLOB_HEAD_AT_CPU);
    assert_values(b, false, x, tol);
    ck_ok(blob_scale_diff(b, -0.5));
    for (int i = 0; i < 35; i++)
        d[i] *= -0.5;
    assert_values(b, true, d, tol);
    blob_free(b);
    free(x);
    free(d);
}
END_TEST

START_TEST(test_copy_from)
{
    blob_dtype dt = (blob_dtype)_i;
    int64_t s[] = {2, 3}, t[] = {3, 2};
    blob *a = make(dt, 2, s), *b = make(dt, 2, t);
    double *x = fill_random(a, false), *d = fill_random(a, true);
    ck_status(blob_copy_from(b, a, false, false), BLOB_ESHAPE);
    ck_assert_int_eq(blob_shape(b)[0], 3);
    ck_ok(blob_copy_from(b, a, false, true));
    ck_assert_int_eq(blob_shape(b)[0], 2);
    assert_values(b, false, x, 0);
    ck_ok(blob_copy_from(b, a, true, false));
    assert_values(b, true, d, 0);
    blob *f;
    ck_ok(blob_create(&f, dt == BLOB_FLOAT32 ? BLOB_FLOAT64 : BLOB_FLOAT32, BLOB_DEVICE_DEFAULT, 2,
                      s));
    ck_status(blob_copy_from(f, a, false, true), BLOB_EINVAL);
    ck_ok(blob_copy_from(a, a, false, false));
    blob_free(a);
    blob_free(b);
    blob_free(f);
    free(x);
    free(d);
}
END_TEST

/* A copy that overwrites the whole destination moves none of its stale bytes first. */
START_TEST(test_copy_from_transfers_nothing_extra)
{
    blob_dtype dt = (blob_dtype)_i;
    int64_t s[] = {8, 8};
    blob *src = make(dt, 2, s), *dst = make(dt, 2, s);
    double *x = fill_random(src, false);
    void *w;
    ck_ok(blob_mutable_gpu_data(dst, &w)); /* dst's newest bytes on the device */
    fake_reset_counts();
    ck_ok(blob_copy_from(dst, src, false, false));
    fake_drain();
    ck_assert_int_eq(fake_get_stats().d2h, 0);
    ck_assert_int_eq(blob_syncedmem_head(blob_data_mem(dst)), BLOB_HEAD_AT_CPU);
    assert_values(dst, false, x, 0);
    blob_free(src);
    blob_free(dst);
    free(x);
}
END_TEST

/* A failing device computation leaves the blob's heads and values as they were. Needs a
 * machine without a GPU: the real launchers would be handed fake pointers. */
START_TEST(test_failed_gpu_math_changes_nothing)
{
    int64_t s[] = {16};
    blob *b = make(BLOB_FLOAT32, 1, s);
    double *x = fill_random(b, false);
    free(fill_random(b, true));
    const void *p;
    ck_ok(blob_gpu_data(b, &p)); /* data SYNCED, diff AT_CPU */
    fake_reset_counts();
    ck_assert_int_ne(blob_update(b), BLOB_OK);
    ck_assert_int_ne(blob_scale_data(b, 2.0), BLOB_OK);
    ck_assert_int_eq(blob_syncedmem_head(blob_data_mem(b)), BLOB_HEAD_SYNCED);
    assert_values(b, false, x, 0);
    blob_free(b);
    free(x);
}
END_TEST

/* Operations that allocate, with the k-th allocation failing once or from then on:
 * clean error, blob exactly as before (shape, capacity, values), no leak. */
typedef struct {
    const char *name;
    blob_status (*op)(blob *b, blob *other);
    int64_t prepare_count; /* reshape b to this 1-axis count before arming (0: don't) */
} blob_case;

static blob_status op_grow(blob *b, blob *o)
{
    (void)o;
    int64_t s[] = {9, 9};
    return blob_reshape(b, 2, s);
}
static blob_status op_copy_reshape(blob *b, blob *o) { return blob_copy_from(b, o, false, true); }
static blob_status op_copy_diff(blob *b, blob *o) { return blob_copy_from(b, o, true, true); }
static blob_status op_shrink(blob *b, blob *o)
{
    (void)o;
    return blob_shrink_to_fit(b);
}
static blob_status op_update(blob *b, blob *o)
{
    (void)o;
    return blob_update(b);
}
static blob_status op_set_cpu(blob *b, blob *o)
{
    blob_share_data(b, o);
    static double mine[64];
    return blob_set_cpu_data(b, mine, sizeof mine);
}

static const blob_case blob_cases[] = {
    {"reshape growth", op_grow, 0},
    {"copy_from with reshape", op_copy_reshape, 0},
    {"copy_from diff", op_copy_diff, 0},
    {"shrink_to_fit", op_shrink, 5},
    {"update", op_update, 0},
    {"set_cpu_data of shared", op_set_cpu, 0},
};

START_TEST(test_alloc_failure_blob_ops)
{
    const blob_case *c = &blob_cases[_i / 2];
    bool persistent = _i % 2;
    int failures = 0;
    for (uint64_t k = 1;; k++) {
        int64_t s[] = {4, 3}, os[] = {4, 3}, bs[] = {3, 5};
        blob *b = make(BLOB_FLOAT64, 2, s);
        blob *o =
            make(BLOB_FLOAT64, 2, c->op == op_copy_reshape || c->op == op_copy_diff ? bs : os);
        double *x = fill_random(b, false);
        double *od = fill_random(o, false);
        free(od);
        if (c->op == op_copy_diff)
            free(fill_random(o, true));
        int64_t count = 12;
        if (c->prepare_count) {
            count = c->prepare_count;
            ck_ok(blob_reshape(b, 1, &count));
        }
        int64_t axis0 = blob_shape(b)[0], cap = blob_capacity(b);
        fake_fail_alloc_at(k, persistent);
        blob_status st = c->op(b, o);
        fake_fail_alloc_at(0, false);
        if (st == BLOB_OK) {
            blob_free(b);
            blob_free(o);
            free(x);
            break;
        }
        failures++;
        ck_assert_msg(st == BLOB_ENOMEM || st == BLOB_EDEVMEM, "%s k=%llu: %s", c->name,
                      (unsigned long long)k, blob_status_name(st));
        ck_assert_int_eq(blob_count(b), count);
        ck_assert_int_eq(blob_shape(b)[0], axis0);
        if (c->op != op_set_cpu) /* sharing happened before the failing step */
            ck_assert_int_eq(blob_capacity(b), cap);
        if (c->op != op_set_cpu)
            assert_values(b, false, x, 0);
        blob_free(b);
        blob_free(o);
        free(x);
        ck_assert_msg(k < 16, "%s never succeeded", c->name);
    }
    /* update allocates nothing here; a transient failure may be absorbed by a retry */
    ck_assert_msg(failures > 0 || c->op == op_update || !persistent, "%s made no allocation",
                  c->name);
}
END_TEST

START_TEST(test_create_alloc_failure)
{
    for (uint64_t k = 1; k <= 3; k++) {
        blob *b = (blob *)&b;
        int64_t s[] = {3};
        fake_fail_alloc_at(k, false);
        ck_status(blob_create(&b, BLOB_FLOAT32, BLOB_DEVICE_DEFAULT, 1, s), BLOB_ENOMEM);
        ck_assert_ptr_null(b);
    }
}
END_TEST

/* ---- real CUDA: the GPU side of update, norms, scale and copy ---- */

START_TEST(test_gpu_update_norms)
{
    blob_dtype dt = (blob_dtype)_i;
    int64_t s[] = {1000, 37};
    blob *b = make(dt, 2, s);
    int64_t n = blob_count(b);
    double *x = fill_random(b, false), *d = fill_random(b, true);
    const void *g;
    ck_ok(blob_gpu_data(b, &g));
    ck_ok(blob_gpu_diff(b, &g));
    double asum = 0, sumsq = 0;
    for (int64_t i = 0; i < n; i++) {
        asum += fabs(x[i]);
        sumsq += x[i] * x[i];
        x[i] -= d[i];
    }
    double tol = dt == BLOB_FLOAT32 ? 1e-4 : 1e-10, v;
    ck_ok(blob_asum_data(b, &v));
    ck_assert_double_eq_tol(v, asum, asum * tol);
    ck_ok(blob_sumsq_data(b, &v));
    ck_assert_double_eq_tol(v, sumsq, sumsq * tol);
    ck_assert_int_eq(blob_syncedmem_head(blob_data_mem(b)), BLOB_HEAD_SYNCED);
    ck_ok(blob_update(b)); /* SYNCED: on the GPU, data ends AT_GPU */
    ck_assert_int_eq(blob_syncedmem_head(blob_data_mem(b)), BLOB_HEAD_AT_GPU);
    assert_values(b, false, x, tol);
    ck_ok(blob_scale_diff(b, 0.25));
    ck_assert_int_eq(blob_syncedmem_head(blob_diff_mem(b)), BLOB_HEAD_AT_GPU);
    for (int64_t i = 0; i < n; i++)
        d[i] *= 0.25;
    assert_values(b, true, d, tol);
    blob *c = make(dt, 0, NULL);
    void *w;
    ck_ok(blob_mutable_gpu_data(b, &w));
    ck_ok(blob_copy_from(c, b, false, true)); /* device-to-device */
    ck_assert_int_eq(blob_syncedmem_head(blob_data_mem(c)), BLOB_HEAD_AT_GPU);
    assert_values(c, false, x, tol);
    blob_free(c);
    blob_free(b);
    free(x);
    free(d);
}
END_TEST

/* A blob larger than any GPU's memory (1 TiB): its first device access fails with a
 * clear error and leaves the blob as it was; the device keeps working (an update
 * checked against the host's). */
START_TEST(test_gpu_beyond_device_memory)
{
    int64_t huge = (int64_t)1 << 38;
    blob *big = make(BLOB_FLOAT32, 1, &huge);
    void *p = &p;
    blob_status st = blob_mutable_gpu_data(big, &p);
    ck_assert_msg(st == BLOB_EDEVMEM || st == BLOB_ENOMEM, "%s (%s)", blob_status_name(st),
                  blob_last_error());
    ck_assert_int_eq(blob_syncedmem_head(blob_data_mem(big)), BLOB_HEAD_UNINITIALIZED);
    blob_free(big);

    int64_t s[] = {1000};
    blob *b = make(BLOB_FLOAT32, 1, s);
    double *x = fill_random(b, false), *d = fill_random(b, true);
    for (int64_t i = 0; i < s[0]; i++)
        x[i] -= d[i];
    const void *g;
    ck_ok(blob_gpu_data(b, &g));
    ck_ok(blob_gpu_diff(b, &g));
    ck_ok(blob_update(b));
    assert_values(b, false, x, 1e-6);
    blob_free(b);
    free(x);
    free(d);
}
END_TEST

void blob_suite(Suite *s)
{
    TCase *tc = suite_case(s, "fake", NULL, 0, fake_setup, fake_teardown);
    add_loop_tests(tc, 0, 2, test_create_and_queries, test_special_shapes, test_offset,
                   test_reshape_keeps_memory_within_capacity, test_share_data_capacity,
                   test_share_diff, test_set_cpu_data, test_update_and_norms_cpu, test_copy_from,
                   test_count_zero, test_copy_from_transfers_nothing_extra);
    add_loop_tests(tc, 0, (int)(2 * sizeof blob_cases / sizeof blob_cases[0]),
                   test_alloc_failure_blob_ops);
    add_tests(tc, test_create_alloc_failure);

    tc = suite_case(s, "fake-nogpu", "nogpu", 0, fake_setup, fake_teardown);
    add_tests(tc, test_failed_gpu_math_changes_nothing);

    tc = suite_case(s, "gpu", "gpu", 0, NULL, NULL);
    add_loop_tests(tc, 0, 2, test_gpu_update_norms, test_count_zero);
    add_tests(tc, test_gpu_beyond_device_memory);
}

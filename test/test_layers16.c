/* The layer math on 16-bit storage: the elementwise calls (set, add_scalar, mul, axpby)
 * and softmax with loss on mixed storage (16-bit logits, integer labels, float32 loss),
 * the host against float64 references, the GPU against the host. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/core.h"
#include "testutil.h"

/* One unit in the last place of dtype at 1: a result computed in float32 and rounded
 * once to the dtype is within half of it, relative; float32's own roundings on the way
 * (2^-24 each) and the host's and GPU's different sum orders and expf stay well under
 * it. Two units are the tolerance of every 16-bit comparison below. Float32 results (the
 * mixed softmax on float32) take several float32 roundings (expf, the quotient): for
 * them a unit is 2^-20. */
static double ulp(blob_dtype dtype)
{
    return dtype == BLOB_BFLOAT16 || dtype == BLOB_FLOAT16 ? test_eps(dtype) : 0x1p-20;
}

/* n values of dtype in [lo, hi), and their exact float64 values in *wide. */
static void *values(blob_dtype dtype, int64_t n, double lo, double hi, double **wide)
{
    double *d = malloc(sizeof(double) * (size_t)n);
    void *h = malloc(blob_dtype_size(dtype) * (size_t)n);
    test_fill(BLOB_FLOAT64, d, n, lo, hi);
    ck_ok(blob_cpu_convert(BLOB_FLOAT64, dtype, n, d, h));
    ck_ok(blob_cpu_convert(dtype, BLOB_FLOAT64, n, h, d));
    *wide = d;
    return h;
}

/* max_i |a_i - ref_i| / max(|ref_i|, floor), a of dtype. */
static double rel_err(blob_dtype dtype, const void *a, const double *ref, int64_t n, double floor)
{
    double *w = malloc(sizeof(double) * (size_t)n), worst = 0;
    ck_ok(blob_cpu_convert(dtype, BLOB_FLOAT64, n, a, w));
    worst = test_rel_err(BLOB_FLOAT64, w, ref, n, floor);
    free(w);
    return worst;
}

/* Elementwise on the host: set, add_scalar, mul and axpby on positive values (no
 * cancellation), against float64 on the widened inputs. */
START_TEST(test_cpu_elementwise16)
{
    const blob_dtype dt = test_halves[_i];
    const int64_t n = 1003;
    test_seed(11);
    double *a, *b, *ref = malloc(sizeof(double) * n);
    uint16_t *x = values(dt, n, 0.5, 2, &a), *y = values(dt, n, 0.5, 2, &b);
    uint16_t *z = malloc(sizeof(uint16_t) * n);
    const double tol = 2 * ulp(dt);

    ck_ok(blob_cpu_set(dt, n, 0.3, z));
    for (int64_t i = 0; i < n; i++)
        ref[i] = 0.3;
    ck_assert_double_le(rel_err(dt, z, ref, n, 1e-30), ulp(dt) / 2);

    memcpy(z, y, sizeof(uint16_t) * n);
    ck_ok(blob_cpu_add_scalar(dt, n, 0.75, z));
    for (int64_t i = 0; i < n; i++)
        ref[i] = b[i] + 0.75;
    ck_assert_double_le(rel_err(dt, z, ref, n, 1e-30), tol);

    ck_ok(blob_cpu_mul(dt, n, x, y, z));
    for (int64_t i = 0; i < n; i++)
        ref[i] = a[i] * b[i];
    ck_assert_double_le(rel_err(dt, z, ref, n, 1e-30), tol);

    memcpy(z, y, sizeof(uint16_t) * n);
    ck_ok(blob_cpu_axpby(dt, n, 0.75, x, 1.25, z));
    for (int64_t i = 0; i < n; i++)
        ref[i] = 0.75 * a[i] + 1.25 * b[i];
    ck_assert_double_le(rel_err(dt, z, ref, n, 1e-30), tol);
    free(a), free(b), free(ref), free(x), free(y), free(z);
}
END_TEST

/* The float64 softmax of rows x classes logits w, with its loss and the gradient scale *
 * (p - onehot). */
static void softmax_ref(const double *w, const int32_t *labels, int64_t rows, int64_t classes,
                        double scale, double *p, double *loss, double *d)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *x = w + r * classes;
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < classes; j++)
            m = fmax(m, x[j]);
        for (int64_t j = 0; j < classes; j++)
            sum += exp(x[j] - m);
        for (int64_t j = 0; j < classes; j++) {
            p[r * classes + j] = exp(x[j] - m) / sum;
            d[r * classes + j] = scale * (p[r * classes + j] - (j == labels[r]));
        }
        loss[r] = -log(p[r * classes + labels[r]]);
    }
}

/* A mixed softmax case: dtype (float32 or a 16-bit float) and labels of int32 or int64. */
static const struct {
    blob_dtype dtype, label;
} softmax_cases[] = {{BLOB_BFLOAT16, BLOB_INT32},
                     {BLOB_FLOAT16, BLOB_INT64},
                     {BLOB_FLOAT32, BLOB_INT32},
                     {BLOB_BFLOAT16, BLOB_INT64}};

/* rows labels in [0, classes) as label dtype ldt, and their int32 copy. */
static void *labels_of(blob_dtype ldt, int64_t rows, int64_t classes, int32_t *copy)
{
    void *l = malloc(blob_dtype_size(ldt) * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) {
        copy[r] = (int32_t)(test_uniform(0, 1) * (double)classes);
        if (ldt == BLOB_INT32)
            ((int32_t *)l)[r] = copy[r];
        else
            ((int64_t *)l)[r] = copy[r];
    }
    return l;
}

/* The host's mixed softmax against float64 on the widened logits; the forward alone and
 * the backward from the rounded prob agree with it; bad labels and dtypes are refused. */
START_TEST(test_cpu_softmax_mixed)
{
    const blob_dtype dt = softmax_cases[_i].dtype, ldt = softmax_cases[_i].label;
    const int64_t rows = 37, classes = 11, n = rows * classes;
    const size_t bytes = blob_dtype_size(dt) * (size_t)n;
    const double scale = 1.0 / 37, tol = 2 * ulp(dt);
    test_seed(12);
    int32_t y[37];
    double *w, *p = malloc(sizeof(double) * n), *d = malloc(sizeof(double) * n), lref[37];
    void *x = values(dt, n, -4, 4, &w), *labels = labels_of(ldt, rows, classes, y);
    void *prob = malloc(bytes), *dx = malloc(bytes), *prob2 = malloc(bytes), *dx2 = malloc(bytes);
    float loss[37], loss2[37];
    softmax_ref(w, y, rows, classes, scale, p, lref, d);

    ck_ok(blob_cpu_softmax_loss_mixed(dt, ldt, rows, classes, x, labels, scale, prob, loss, dx));
    ck_assert_double_le(rel_err(dt, prob, p, n, 1e-3), tol); /* f16 subnormals below */
    ck_assert_double_le(test_rel_err(BLOB_FLOAT32, loss, lref, rows, 1e-3), 1e-5);
    /* the gradient relative to the scale: p - onehot cancels near 1 */
    ck_assert_double_le(rel_err(dt, dx, d, n, scale), tol);

    ck_ok(
        blob_cpu_softmax_loss_mixed(dt, ldt, rows, classes, x, labels, scale, prob2, loss2, NULL));
    ck_assert(memcmp(prob, prob2, bytes) == 0 && memcmp(loss, loss2, sizeof loss) == 0);
    ck_ok(blob_cpu_softmax_loss_backward_mixed(dt, ldt, rows, classes, prob, labels, scale, dx2));
    ck_assert_double_le(rel_err(dt, dx2, d, n, scale), 2 * tol); /* from the rounded prob */

    if (ldt == BLOB_INT32)
        ((int32_t *)labels)[5] = (int32_t)classes;
    else
        ((int64_t *)labels)[5] = -1;
    ck_status(blob_cpu_softmax_loss_mixed(dt, ldt, rows, classes, x, labels, scale, prob, loss, dx),
              BLOB_ERANGE);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "row 5"));
    ck_status(blob_cpu_softmax_loss_mixed(BLOB_FLOAT64, ldt, 1, 1, x, labels, 1, prob, loss, dx),
              BLOB_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "float64"));
    ck_status(blob_cpu_softmax_loss_backward_mixed(dt, BLOB_FLOAT32, 1, 1, prob, labels, 1, dx),
              BLOB_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "labels of float32"));
    free(w), free(p), free(d), free(x), free(labels), free(prob), free(dx), free(prob2), free(dx2);
}
END_TEST

/* Device copies of host arrays, and back. */
static void *to_device(const void *h, size_t bytes)
{
    void *d;
    ck_ok(blob__be->device_alloc(bytes, &d));
    if (h)
        ck_ok(blob__be->copy_async(d, h, bytes, BLOB__H2D, blob_stream_get()));
    return d;
}

static void from_device(void *h, const void *d, size_t bytes)
{
    ck_ok(blob__be->copy_async(h, d, bytes, BLOB__D2H, blob_stream_get()));
    ck_ok(blob__be->stream_synchronize(blob_stream_get()));
}

/* The GPU against the host on the same random data: set, add_scalar and mul give the
 * host's bits (one float32 operation rounded once on both sides); axpby and the mixed
 * softmax (fused multiply-adds, expf and the order of the sums differ) agree within two
 * units of the dtype. */
START_TEST(test_gpu_layers16)
{
    const blob_dtype dt = test_halves[_i], ldt = _i ? BLOB_INT64 : BLOB_INT32;
    const int64_t rows = 513, classes = 10, n = rows * classes;
    const size_t bytes = sizeof(uint16_t) * (size_t)n;
    const double scale = 1.0 / 513, tol = 2 * ulp(dt);
    test_seed(13);
    int32_t *y = malloc(sizeof(int32_t) * rows);
    double *a, *b, *ref = malloc(sizeof(double) * n);
    uint16_t *x = values(dt, n, -4, 4, &a), *v = values(dt, n, 0.5, 2, &b);
    uint16_t *h = malloc(bytes), *g = malloc(bytes), *h2 = malloc(bytes), *g2 = malloc(bytes);
    void *labels = labels_of(ldt, rows, classes, y);
    float *hl = malloc(sizeof(float) * rows), *gl = malloc(sizeof(float) * rows);
    double *hlw = malloc(sizeof(double) * rows);
    void *dx = to_device(x, bytes), *dv = to_device(v, bytes), *dz = to_device(NULL, bytes);
    void *dd = to_device(NULL, bytes), *dl = to_device(labels, blob_dtype_size(ldt) * rows);
    float *dloss = to_device(NULL, sizeof(float) * rows);

    ck_ok(blob_cpu_set(dt, n, -1.7, h));
    ck_ok(blob_gpu_set(dt, n, -1.7, dz));
    from_device(g, dz, bytes);
    ck_assert(memcmp(g, h, bytes) == 0);

    memcpy(h, v, bytes);
    ck_ok(blob_cpu_add_scalar(dt, n, 0.3, h));
    ck_ok(blob_cpu_mul(dt, n, x, h, h));
    ck_ok(blob_gpu_copy(dt, n, dv, dz));
    ck_ok(blob_gpu_add_scalar(dt, n, 0.3, dz));
    ck_ok(blob_gpu_mul(dt, n, dx, dz, dz));
    from_device(g, dz, bytes);
    ck_assert(memcmp(g, h, bytes) == 0);

    memcpy(h, v, bytes);
    ck_ok(blob_cpu_axpby(dt, n, 0.75, v, 1.25, h));
    ck_ok(blob_gpu_copy(dt, n, dv, dz));
    ck_ok(blob_gpu_axpby(dt, n, 0.75, dv, 1.25, dz));
    from_device(g, dz, bytes);
    ck_ok(blob_cpu_convert(dt, BLOB_FLOAT64, n, h, ref));
    ck_assert_double_le(rel_err(dt, g, ref, n, 1e-30), tol);

    ck_ok(blob_cpu_softmax_loss_mixed(dt, ldt, rows, classes, x, labels, scale, h, hl, h2));
    ck_ok(blob_gpu_softmax_loss_mixed(dt, ldt, rows, classes, dx, dl, scale, dz, dloss, dd));
    from_device(g, dz, bytes);
    from_device(g2, dd, bytes);
    from_device(gl, dloss, sizeof(float) * rows);
    ck_ok(blob_cpu_convert(dt, BLOB_FLOAT64, n, h, ref));
    ck_assert_double_le(rel_err(dt, g, ref, n, 1e-3), tol);
    ck_ok(blob_cpu_convert(dt, BLOB_FLOAT64, n, h2, ref));
    ck_assert_double_le(rel_err(dt, g2, ref, n, scale), tol);
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, BLOB_FLOAT64, rows, hl, hlw));
    ck_assert_double_le(test_rel_err(BLOB_FLOAT32, gl, hlw, rows, 1e-3), 1e-5);

    ck_ok(blob_cpu_softmax_loss_backward_mixed(dt, ldt, rows, classes, h, labels, scale, h2));
    ck_ok(blob_gpu_softmax_loss_backward_mixed(dt, ldt, rows, classes, dz, dl, scale, dd));
    from_device(g2, dd, bytes);
    ck_ok(blob_cpu_convert(dt, BLOB_FLOAT64, n, h2, ref));
    ck_assert_double_le(rel_err(dt, g2, ref, n, scale), tol);

    void *dev[] = {dx, dv, dz, dd, dl, dloss};
    for (size_t k = 0; k < sizeof dev / sizeof dev[0]; k++)
        blob__be->device_free(dev[k]);
    free(y), free(a), free(b), free(ref), free(x), free(v), free(h), free(g), free(h2), free(g2),
        free(labels), free(hl), free(gl), free(hlw);
}
END_TEST

void layers16_suite(Suite *s)
{
    TCase *tc = suite_case(s, "host", NULL, 0, NULL, NULL);
    add_loop_tests(tc, 0, 2, test_cpu_elementwise16);
    add_loop_tests(tc, 0, (int)(sizeof softmax_cases / sizeof softmax_cases[0]),
                   test_cpu_softmax_mixed);
    tc = suite_case(s, "gpu", "gpu", 0, NULL, NULL);
    add_loop_tests(tc, 0, 2, test_gpu_layers16);
}

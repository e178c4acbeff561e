/* The math API: every operation, host and GPU, against a double-precision reference
 * computed here; the host's CBLAS splitting with a tiny chunk; exact error codes; and
 * the GPU entry points without a GPU or without CUDA. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/core/core.h"
#include "../src/math/math_impl.h"
#include "testutil.h"

/* The operations of one side, so that one test body serves the host and the GPU. */
typedef struct {
    const char *name;
    bool gpu;
    __typeof__(blob_cpu_gemm) *gemm;
    __typeof__(blob_cpu_gemv) *gemv;
    __typeof__(blob_cpu_axpy) *axpy;
    __typeof__(blob_cpu_axpby) *axpby;
    __typeof__(blob_cpu_scal) *scal;
    __typeof__(blob_cpu_dot) *dot;
    __typeof__(blob_cpu_asum) *asum;
    __typeof__(blob_cpu_copy) *copy;
    __typeof__(blob_cpu_set) *set;
    __typeof__(blob_cpu_add_scalar) *add_scalar;
    __typeof__(blob_cpu_mul) *mul;
    __typeof__(blob_cpu_relu_forward) *relu_forward;
    __typeof__(blob_cpu_relu_backward) *relu_backward;
    __typeof__(blob_cpu_softmax_loss_forward) *softmax_loss_forward;
    __typeof__(blob_cpu_softmax_loss_backward) *softmax_loss_backward;
    __typeof__(blob_cpu_softmax_loss_forward_backward) *softmax_loss_forward_backward;
} side;

#define SIDE(s, on_gpu)                                                                        \
    {                                                                                          \
#s, on_gpu, blob_##s##_gemm, blob_##s##_gemv, blob_##s##_axpy, blob_##s##_axpby,       \
            blob_##s##_scal, blob_##s##_dot, blob_##s##_asum, blob_##s##_copy, blob_##s##_set, \
            blob_##s##_add_scalar, blob_##s##_mul, blob_##s##_relu_forward,                    \
            blob_##s##_relu_backward, blob_##s##_softmax_loss_forward,                         \
            blob_##s##_softmax_loss_backward, blob_##s##_softmax_loss_forward_backward         \
    }
static const side cpu_side = SIDE(cpu, false);
static const side gpu_side = SIDE(gpu, true);

/* ---- Test arrays: values of dtype on the host (h), the same as doubles for the
 * reference (v), and a copy in the memory of the side under test (d). ---- */

typedef struct {
    blob_dtype dt;
    int64_t n;
    void *h;
    double *v;
    void *d;
} arr;

/* n random values in [lo, hi), host only until arr_up. */
static arr arr_new(blob_dtype dt, int64_t n, double lo, double hi)
{
    arr a = {dt, n, malloc((size_t)n * blob_dtype_size(dt) + 1), malloc((size_t)n * 8 + 8), NULL};
    test_fill(dt, a.h, n, lo, hi);
    for (int64_t i = 0; i < n; i++)
        a.v[i] = test_get(dt, a.h, i);
    return a;
}

static void arr_set(arr *a, int64_t i, double v)
{
    test_put(a->dt, a->h, i, v);
    a->v[i] = test_get(a->dt, a->h, i);
}

/* Copy the host values to the side's memory (NULL for an empty array). */
static void arr_up(const side *s, arr *a)
{
    size_t bytes = (size_t)a->n * blob_dtype_size(a->dt);
    if (!bytes)
        return;
    if (!s->gpu) {
        a->d = malloc(bytes);
        memcpy(a->d, a->h, bytes);
        return;
    }
    void *st = blob_stream_get();
    ck_ok(blob__be->device_alloc(bytes, &a->d));
    ck_ok(blob__be->copy_async(a->d, a->h, bytes, BLOB__H2D, st));
    ck_ok(blob__be->stream_synchronize(st));
}

static arr arr_on(const side *s, blob_dtype dt, int64_t n, double lo, double hi)
{
    arr a = arr_new(dt, n, lo, hi);
    arr_up(s, &a);
    return a;
}

/* The side's values of a, read back into a->h. */
static void arr_down(const side *s, arr *a)
{
    size_t bytes = (size_t)a->n * blob_dtype_size(a->dt);
    if (!bytes)
        return;
    if (!s->gpu) {
        memcpy(a->h, a->d, bytes);
        return;
    }
    void *st = blob_stream_get();
    ck_ok(blob__be->copy_async(a->h, a->d, bytes, BLOB__D2H, st));
    ck_ok(blob__be->stream_synchronize(st));
}

static void arr_free(const side *s, arr *a)
{
    if (s->gpu)
        blob__be->device_free(a->d);
    else
        free(a->d);
    free(a->h);
    free(a->v);
}

/* The side's values of a match ref within tolerance t, relative to max(|ref|, floor). */
static void expect(const side *s, arr *a, const double *ref, double t, double floor,
                   const char *what)
{
    arr_down(s, a);
    double e = test_rel_err(a->dt, a->h, ref, a->n, floor);
    ck_assert_msg(e <= t, "%s %s %s (n = %lld): relative error %g > %g", s->name,
                  test_dtype_name(a->dt), what, (long long)a->n, e, t);
}

/* ---- One check per operation, on any side ---- */

static void check_gemm(const side *s, blob_dtype dt, blob_trans ta, blob_trans tb, int64_t M,
                       int64_t N, int64_t K, double alpha, double beta)
{
    arr A = arr_on(s, dt, M * K, -1, 1), B = arr_on(s, dt, K * N, -1, 1),
        C = arr_on(s, dt, M * N, -1, 1);
    double *ref = malloc((size_t)(M * N) * sizeof(double) + 8);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double sum = 0;
            for (int64_t k = 0; k < K; k++)
                sum +=
                    (ta ? A.v[k * M + i] : A.v[i * K + k]) * (tb ? B.v[j * K + k] : B.v[k * N + j]);
            ref[i * N + j] = alpha * sum + beta * C.v[i * N + j];
        }
    ck_ok(s->gemm(dt, ta, tb, M, N, K, alpha, A.d, B.d, beta, C.d));
    char what[64];
    snprintf(what, sizeof what, "gemm %c%c %lldx%lldx%lld", ta ? 'T' : 'N', tb ? 'T' : 'N',
             (long long)M, (long long)N, (long long)K);
    expect(s, &C, ref, test_tol(dt, K), 1, what);
    free(ref);
    arr_free(s, &A);
    arr_free(s, &B);
    arr_free(s, &C);
}

static void check_gemv(const side *s, blob_dtype dt, blob_trans ta, int64_t M, int64_t N,
                       double alpha, double beta)
{
    int64_t nx = ta ? M : N, ny = ta ? N : M;
    arr A = arr_on(s, dt, M * N, -1, 1), x = arr_on(s, dt, nx, -1, 1), y = arr_on(s, dt, ny, -1, 1);
    double *ref = malloc((size_t)ny * sizeof(double) + 8);
    for (int64_t i = 0; i < ny; i++) {
        double sum = 0;
        for (int64_t k = 0; k < nx; k++)
            sum += (ta ? A.v[k * N + i] : A.v[i * N + k]) * x.v[k];
        ref[i] = alpha * sum + beta * y.v[i];
    }
    ck_ok(s->gemv(dt, ta, M, N, alpha, A.d, x.d, beta, y.d));
    char what[64];
    snprintf(what, sizeof what, "gemv %c %lldx%lld", ta ? 'T' : 'N', (long long)M, (long long)N);
    expect(s, &y, ref, test_tol(dt, nx), 1, what);
    free(ref);
    arr_free(s, &A);
    arr_free(s, &x);
    arr_free(s, &y);
}

/* Every level-1 and elementwise operation on n elements, aliasing included. */
static void check_vector_ops(const side *s, blob_dtype dt, int64_t n)
{
    const double alpha = 0.75, beta = -1.25;
    arr x = arr_on(s, dt, n, -1, 1), y = arr_on(s, dt, n, -1, 1);
    double *ref = malloc((size_t)n * sizeof(double) + 8);
    double *y0 = malloc((size_t)n * sizeof(double) + 8);
    double t = test_tol(dt, 1);

    /* Each step updates y from its previous value y0 (the reference of the step before). */
    memcpy(y0, y.v, (size_t)n * sizeof(double));
#define STEP(call, formula, what)         \
    do {                                  \
        ck_ok(call);                      \
        for (int64_t i = 0; i < n; i++)   \
            ref[i] = (formula);           \
        expect(s, &y, ref, t, 1, what);   \
        for (int64_t i = 0; i < n; i++)   \
            y0[i] = test_get(dt, y.h, i); \
    } while (0)
    STEP(s->axpy(dt, n, alpha, x.d, y.d), y0[i] + alpha * x.v[i], "axpy");
    STEP(s->axpby(dt, n, alpha, x.d, beta, y.d), alpha * x.v[i] + beta * y0[i], "axpby");
    STEP(s->scal(dt, n, beta, y.d), beta * y0[i], "scal");
    STEP(s->add_scalar(dt, n, alpha, y.d), y0[i] + alpha, "add_scalar");
    STEP(s->mul(dt, n, x.d, y.d, y.d), x.v[i] * y0[i], "mul (y aliases b)");
    STEP(s->mul(dt, n, y.d, x.d, y.d), y0[i] * x.v[i], "mul (y aliases a)");
    STEP(s->copy(dt, n, x.d, y.d), x.v[i], "copy");
    STEP(s->relu_forward(dt, n, y.d, y.d), y0[i] > 0 ? y0[i] : 0, "relu_forward (in place)");
    STEP(s->set(dt, n, beta, y.d), beta, "set");
    STEP(s->relu_forward(dt, n, x.d, y.d), x.v[i] > 0 ? x.v[i] : 0, "relu_forward");
    arr dy = arr_on(s, dt, n, -1, 1);
    STEP(s->relu_backward(dt, n, x.d, dy.d, y.d), x.v[i] > 0 ? dy.v[i] : 0, "relu_backward");
    STEP(s->copy(dt, n, dy.d, y.d), dy.v[i], "copy");
    STEP(s->relu_backward(dt, n, x.d, y.d, y.d), x.v[i] > 0 ? y0[i] : 0,
         "relu_backward (dx aliases dy)");
#undef STEP

    double dot_ref = 0, asum_ref = 0, out = NAN;
    for (int64_t i = 0; i < n; i++) {
        dot_ref += x.v[i] * dy.v[i];
        asum_ref += fabs(x.v[i]);
    }
    ck_ok(s->dot(dt, n, x.d, dy.d, &out));
    ck_assert_msg(test_rel_err(BLOB_FLOAT64, &out, &dot_ref, 1, 1) <= test_tol(dt, n),
                  "%s %s dot (n = %lld): %.17g, expected %.17g", s->name, test_dtype_name(dt),
                  (long long)n, out, dot_ref);
    ck_ok(s->asum(dt, n, x.d, &out));
    ck_assert_msg(test_rel_err(BLOB_FLOAT64, &out, &asum_ref, 1, 1) <= test_tol(dt, n),
                  "%s %s asum (n = %lld): %.17g, expected %.17g", s->name, test_dtype_name(dt),
                  (long long)n, out, asum_ref);
    free(ref);
    free(y0);
    arr_free(s, &x);
    arr_free(s, &y);
    arr_free(s, &dy);
}

static double min_normal(blob_dtype dt) { return dt == BLOB_FLOAT32 ? FLT_MIN : DBL_MIN; }

/* Forward and backward of softmax with loss, apart and in one pass. Row 0 gets a label
 * whose probability underflows, so that its loss is the clamped -log(smallest normal);
 * row 1 gets logits near 1000, whose exponentials overflow unless the row maximum is
 * subtracted. */
static void check_softmax(const side *s, blob_dtype dt, int64_t rows, int64_t classes)
{
    arr logits = arr_new(dt, rows * classes, -5, 5), labels = arr_new(dt, rows, 0, 1);
    for (int64_t r = 0; r < rows; r++)
        arr_set(&labels, r, floor(test_uniform(0, (double)classes)));
    if (classes > 1) {
        arr_set(&logits, 0, 0);
        arr_set(&logits, 1, -1000);
        arr_set(&labels, 0, 1);
    }
    for (int64_t j = 0; rows > 1 && j < classes; j++)
        arr_set(&logits, classes + j, 1000 + logits.v[classes + j]);
    arr_up(s, &logits);
    arr_up(s, &labels);
    arr prob = arr_on(s, dt, rows * classes, 0, 1), loss = arr_on(s, dt, rows, 0, 1);
    double *p = malloc((size_t)(rows * classes) * sizeof(double));
    double *l = malloc((size_t)rows * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        const double *x = logits.v + r * classes;
        double m = x[0], sum = 0;
        for (int64_t j = 1; j < classes; j++)
            m = fmax(m, x[j]);
        for (int64_t j = 0; j < classes; j++)
            sum += exp(x[j] - m);
        for (int64_t j = 0; j < classes; j++)
            p[r * classes + j] = exp(x[j] - m) / sum;
        l[r] = -log(fmax(p[r * classes + (int64_t)labels.v[r]], min_normal(dt)));
    }
    ck_ok(s->softmax_loss_forward(dt, rows, classes, logits.d, labels.d, prob.d, loss.d));
    expect(s, &prob, p, test_tol(dt, classes), 1e-300, "softmax prob");
    expect(s, &loss, l, test_tol(dt, classes), 1, "softmax loss");
    if (classes > 1)
        ck_assert_double_eq_tol(test_get(dt, loss.h, 0), -log(min_normal(dt)), 1e-4);

    const double scale = 0.125;
    arr dlogits = arr_on(s, dt, rows * classes, -1, 1);
    for (int64_t i = 0; i < rows * classes; i++)
        p[i] = scale * (test_get(dt, prob.h, i) - (i % classes == (int64_t)labels.v[i / classes]));
    ck_ok(s->softmax_loss_backward(dt, rows, classes, prob.d, labels.d, scale, dlogits.d));
    expect(s, &dlogits, p, test_tol(dt, 1), 1, "softmax dlogits");

    /* in one pass: the same values as the two passes, bit for bit */
    arr prob1 = arr_on(s, dt, rows * classes, 0, 1), loss1 = arr_on(s, dt, rows, 0, 1);
    arr dlogits1 = arr_on(s, dt, rows * classes, -1, 1);
    ck_ok(s->softmax_loss_forward_backward(dt, rows, classes, logits.d, labels.d, scale, prob1.d,
                                           loss1.d, dlogits1.d));
    arr_down(s, &prob1);
    arr_down(s, &loss1);
    arr_down(s, &dlogits1);
    size_t size = blob_dtype_size(dt);
    ck_assert(!memcmp(prob1.h, prob.h, (size_t)(rows * classes) * size));
    ck_assert(!memcmp(loss1.h, loss.h, (size_t)rows * size));
    ck_assert(!memcmp(dlogits1.h, dlogits.h, (size_t)(rows * classes) * size));
    arr_free(s, &prob1);
    arr_free(s, &loss1);
    arr_free(s, &dlogits1);
    free(p);
    free(l);
    arr_free(s, &logits);
    arr_free(s, &labels);
    arr_free(s, &prob);
    arr_free(s, &loss);
    arr_free(s, &dlogits);
}

/* beta == 0 never reads the output (BLAS convention), and products whose reduction is
 * empty scale the output by beta. */
static void check_beta_edges(const side *s, blob_dtype dt)
{
    arr A = arr_on(s, dt, 12, -1, 1), x = arr_on(s, dt, 4, -1, 1), y = arr_new(dt, 12, 0, 1);
    for (int64_t i = 0; i < y.n; i++)
        arr_set(&y, i, NAN);
    arr_up(s, &y);
    double ref[12];
    for (int64_t i = 0; i < 3; i++) {
        ref[i] = 0;
        for (int64_t k = 0; k < 4; k++)
            ref[i] += 2 * A.v[i * 4 + k] * x.v[k];
    }
    ck_ok(s->gemv(dt, BLOB_NO_TRANS, 3, 4, 2, A.d, x.d, 0, y.d));
    arr y3 = y;
    y3.n = 3;
    expect(s, &y3, ref, test_tol(dt, 4), 1, "gemv beta = 0 over NaN");
    ck_ok(s->axpby(dt, 12, -3, A.d, 0, y.d));
    for (int64_t i = 0; i < 12; i++)
        ref[i] = -3 * A.v[i];
    expect(s, &y, ref, test_tol(dt, 1), 1, "axpby beta = 0");

    ck_ok(s->set(dt, 12, NAN, y.d));
    ck_ok(s->gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 3, 4, 0, 2, NULL, NULL, 0, y.d));
    for (int64_t i = 0; i < 12; i++)
        ref[i] = 0;
    expect(s, &y, ref, 0, 1, "gemm K = 0, beta = 0 over NaN");
    ck_ok(s->set(dt, 12, 3, y.d));
    ck_ok(s->gemm(dt, BLOB_TRANS, BLOB_NO_TRANS, 3, 4, 0, 2, NULL, NULL, 0.5, y.d));
    for (int64_t i = 0; i < 12; i++)
        ref[i] = 1.5;
    expect(s, &y, ref, 0, 1, "gemm K = 0, beta = 0.5");
    ck_ok(s->gemv(dt, BLOB_TRANS, 0, 12, 2, NULL, NULL, -2, y.d));
    for (int64_t i = 0; i < 12; i++)
        ref[i] = -3;
    expect(s, &y, ref, 0, 1, "gemv empty reduction, beta = -2");
    ck_ok(s->gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 0, 4, 3, 2, NULL, A.d, 0, NULL));
    ck_ok(s->gemv(dt, BLOB_NO_TRANS, 0, 4, 2, NULL, x.d, 0, NULL));

    ck_ok(s->set(dt, 12, NAN, y.d));
    ck_ok(s->gemm(dt, BLOB_NO_TRANS, BLOB_TRANS, 3, 4, 1, 1, x.d, x.d, 0, y.d));
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 4; j++)
            ref[i * 4 + j] = x.v[i] * x.v[j];
    expect(s, &y, ref, test_tol(dt, 1), 1, "gemm beta = 0 over NaN");
    arr_free(s, &A);
    arr_free(s, &x);
    arr_free(s, &y);
}

/* Every operation over odd sizes, all transpose combinations, alpha and beta not 0/1. */
static void check_all(const side *s, blob_dtype dt)
{
    static const int64_t vec_n[] = {0, 1, 7, 100, 1001};
    static const int64_t mnk[][3] = {{1, 1, 1}, {5, 7, 3}, {17, 13, 19}, {33, 2, 40}, {2, 33, 9}};
    static const int64_t softmax_shapes[][2] = {{1, 1}, {4, 10}, {7, 33}, {3, 300}, {2, 1500}};
    test_seed(12345 + (uint64_t)dt);
    for (size_t i = 0; i < sizeof vec_n / sizeof vec_n[0]; i++)
        check_vector_ops(s, dt, vec_n[i]);
    for (size_t i = 0; i < sizeof mnk / sizeof mnk[0]; i++)
        for (int t = 0; t < 4; t++) {
            check_gemm(s, dt, t & 1, t >> 1, mnk[i][0], mnk[i][1], mnk[i][2], 1.5, -0.75);
            if (t < 2)
                check_gemv(s, dt, t, mnk[i][0], mnk[i][1], -0.5, 1.25);
        }
    for (size_t i = 0; i < sizeof softmax_shapes / sizeof softmax_shapes[0]; i++)
        check_softmax(s, dt, softmax_shapes[i][0], softmax_shapes[i][1]);
    check_beta_edges(s, dt);
}

/* ---- Host ---- */

START_TEST(test_cpu_ops) { check_all(&cpu_side, (blob_dtype)_i); }
END_TEST

/* With CBLAS calls of at most 7 elements per dimension every result must stay the same. */
START_TEST(test_cpu_ops_chunked)
{
    blob__blas_chunk = 7;
    check_all(&cpu_side, (blob_dtype)_i);
    check_gemm(&cpu_side, (blob_dtype)_i, BLOB_TRANS, BLOB_NO_TRANS, 15, 8, 22, 0.5, 2);
    check_gemv(&cpu_side, (blob_dtype)_i, BLOB_NO_TRANS, 15, 22, 0.5, 2);
    blob__blas_chunk = INT_MAX;
}
END_TEST

/* The library's host threads, as blob_blas_get_info reports them. */
static int host_threads(void)
{
    blob_blas_info info;
    ck_ok(blob_blas_get_info(&info));
    return info.threads;
}

/* The GEMMs cut into blocks for 7 host threads (more blocks than pool workers at first,
 * odd grids, blocks ending inside rows and columns) and the vector operations split into
 * parts: the same results as the one-thread reference, also with CBLAS pieces of 7. */
START_TEST(test_cpu_ops_threaded)
{
    static const int64_t mnk[][3] = {{64, 256, 100}, {256, 96, 64}, {100, 37, 300},
                                     {9, 1000, 20},  {1000, 9, 20}, {130, 130, 130}};
    const blob_dtype dt = (blob_dtype)_i;
    const int before = host_threads();
    ck_ok(blob_host_threads_set(7));
    ck_assert_int_eq(host_threads(), 7);
    for (int chunked = 0; chunked < 2; chunked++) {
        blob__blas_chunk = chunked ? 7 : INT_MAX;
        for (size_t i = 0; i < sizeof mnk / sizeof mnk[0]; i++)
            for (int t = 0; t < 4; t++)
                check_gemm(&cpu_side, dt, t & 1, t >> 1, mnk[i][0], mnk[i][1], mnk[i][2], 1.5,
                           -0.75);
        check_gemv(&cpu_side, dt, BLOB_NO_TRANS, 3000, 400, 0.5, 2);
        check_gemv(&cpu_side, dt, BLOB_TRANS, 400, 3000, 0.5, 2);
    }
    blob__blas_chunk = INT_MAX;
    check_vector_ops(&cpu_side, dt, (3 << 20) + 5);
    ck_ok(blob_host_threads_set(before));
}
END_TEST

/* The blocks of a GEMM: within the host threads, aligned, covering C; one block for
 * small products, for one host thread, and once the BLAS is given its threads back (its
 * product then right on its own threads). */
START_TEST(test_gemm_grid)
{
    static const int64_t mnk[][3] = {{64, 256, 784},  {256, 784, 64},    {256, 10, 128},
                                     {10, 128, 64},   {1, 1, 1},         {3, 5000, 5000},
                                     {5000, 3, 5000}, {1000, 1000, 1000}};
    const int before = host_threads();
    ck_ok(blob_host_threads_set(7));
    bool cut = false;
    for (size_t i = 0; i < sizeof mnk / sizeof mnk[0]; i++)
        for (int d = 0; d < 2; d++) {
            const int64_t M = mnk[i][0], N = mnk[i][1], K = mnk[i][2];
            const size_t elem = d ? sizeof(double) : sizeof(float);
            int64_t rows, cols;
            blob__gemm_grid(M, N, K, elem, false, &rows, &cols);
            int64_t whole_rows, whole_cols;
            blob__gemm_grid(M, N, K, elem, true, &whole_rows, &whole_cols);
            ck_assert_int_eq(whole_rows, M);
            ck_assert(whole_cols == N || whole_cols % (int64_t)(64 / elem) == 0);
            ck_assert_int_le((N + whole_cols - 1) / whole_cols, 7);
            const int64_t blocks = ((M + rows - 1) / rows) * ((N + cols - 1) / cols);
            ck_assert_msg(rows >= 1 && rows <= M && cols >= 1 && cols <= N && blocks <= 7,
                          "%lld x %lld x %lld: blocks of %lld x %lld", (long long)M, (long long)N,
                          (long long)K, (long long)rows, (long long)cols);
            ck_assert(rows == M || rows % 8 == 0);
            ck_assert(cols == N || cols % (int64_t)(64 / elem) == 0);
            if (M * N * K < (1 << 16))
                ck_assert_int_eq(blocks, 1);
            cut |= blocks > 1;
        }
    if (blob__blas_one_thread())
        ck_assert_msg(cut, "no product was cut with 7 host threads");
    else
        printf("note: test_gemm_grid: the BLAS threads its own calls, products stay whole\n");
    int64_t rows, cols;
    if (blob__blas_one_thread()) { /* the BLAS given its threads back: whole products */
        ck_assert_int_eq(blob__blas_threads(), 1);
        blob__blas_set_threads(2);
        if (blob__blas_threads() == 2) { /* not a serial BLAS */
            blob__gemm_grid(1000, 1000, 1000, sizeof(float), false, &rows, &cols);
            ck_assert(rows == 1000 && cols == 1000);
            /* OpenBLAS starts the threads the library stopped at load time again */
            check_gemm(&cpu_side, BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_TRANS, 300, 200, 250, 1.5,
                       -0.75);
        }
        blob__blas_set_threads(1);
    }
    ck_ok(blob_host_threads_set(1));
    blob__gemm_grid(1000, 1000, 1000, sizeof(float), false, &rows, &cols);
    ck_assert(rows == 1000 && cols == 1000);
    ck_status(blob_host_threads_set(0), BLOB_EINVAL);
    ck_status(blob_host_threads_set(65), BLOB_EINVAL);
    ck_assert_int_eq(host_threads(), 1);
    ck_ok(blob_host_threads_set(before));
}
END_TEST

/* ---- Errors: each operation called with small valid arguments except for one ---- */

enum { N_OPS = 16 };
static const char *const op_names[N_OPS] = {"gemm",
                                            "gemv",
                                            "axpy",
                                            "axpby",
                                            "scal",
                                            "dot",
                                            "asum",
                                            "copy",
                                            "set",
                                            "add_scalar",
                                            "mul",
                                            "relu_forward",
                                            "relu_backward",
                                            "softmax_loss_forward",
                                            "softmax_loss_backward",
                                            "softmax_loss_forward_backward"};
static const int op_arrays[N_OPS] = {3, 3, 2, 2, 1, 2, 1, 2, 1, 1, 3, 2, 3, 4, 3, 5};

/* Op `op` of side s with sizes n and arrays all at buf except array null_arg (NULL). */
static blob_status call_op(const side *s, int op, blob_dtype dt, int64_t n, int null_arg, void *buf)
{
    void *p[5] = {buf, buf, buf, buf, buf};
    if (null_arg >= 0)
        p[null_arg] = NULL;
    double out;
    switch (op) {
    case 0: return s->gemm(dt, BLOB_NO_TRANS, BLOB_TRANS, n, n, n, 2, p[0], p[1], 3, p[2]);
    case 1: return s->gemv(dt, BLOB_TRANS, n, n, 2, p[0], p[1], 3, p[2]);
    case 2: return s->axpy(dt, n, 2, p[0], p[1]);
    case 3: return s->axpby(dt, n, 2, p[0], 3, p[1]);
    case 4: return s->scal(dt, n, 2, p[0]);
    case 5: return s->dot(dt, n, p[0], p[1], &out);
    case 6: return s->asum(dt, n, p[0], &out);
    case 7: return s->copy(dt, n, p[0], p[1]);
    case 8: return s->set(dt, n, 2, p[0]);
    case 9: return s->add_scalar(dt, n, 2, p[0]);
    case 10: return s->mul(dt, n, p[0], p[1], p[2]);
    case 11: return s->relu_forward(dt, n, p[0], p[1]);
    case 12: return s->relu_backward(dt, n, p[0], p[1], p[2]);
    case 13: return s->softmax_loss_forward(dt, n, n, p[0], p[1], p[2], p[3]);
    case 14: return s->softmax_loss_backward(dt, n, n, p[0], p[1], 0.5, p[2]);
    case 15: return s->softmax_loss_forward_backward(dt, n, n, p[0], p[1], 0.5, p[2], p[3], p[4]);
    }
    return BLOB_EINVAL;
}

static double err_buf[64]; /* zeros: valid data and valid labels (class 0) */

/* Bad dtype, negative size, NULL arrays and overflowing sizes, checked before any GPU
 * is looked for: the same codes on both sides. */
START_TEST(test_bad_arguments)
{
    const side *s = _i ? &gpu_side : &cpu_side;
    char name[64];
    for (int op = 0; op < N_OPS; op++) {
        snprintf(name, sizeof name, "blob_%s_%s", s->name, op_names[op]);
        ck_status(call_op(s, op, (blob_dtype)7, 2, -1, err_buf), BLOB_EINVAL);
        ck_assert_msg(strstr(blob_last_error(), name), "detail \"%s\" lacks %s", blob_last_error(),
                      name);
        ck_status(call_op(s, op, (blob_dtype)-1, 2, -1, err_buf), BLOB_EINVAL);
        ck_status(call_op(s, op, BLOB_FLOAT32, -1, -1, err_buf), BLOB_EINVAL);
        ck_status(call_op(s, op, BLOB_FLOAT64, INT64_MAX, -1, err_buf), BLOB_EOVERFLOW);
        for (int a = 0; a < op_arrays[op]; a++) {
            ck_status(call_op(s, op, BLOB_FLOAT64, 2, a, err_buf), BLOB_EINVAL);
            ck_assert_msg(strstr(blob_last_error(), "is NULL"), "%s", blob_last_error());
        }
    }
    ck_status(s->dot(BLOB_FLOAT32, 2, err_buf, err_buf, NULL), BLOB_EINVAL);
    ck_status(s->asum(BLOB_FLOAT32, 0, NULL, NULL), BLOB_EINVAL);
    ck_status(s->gemm(BLOB_FLOAT32, (blob_trans)2, BLOB_NO_TRANS, 1, 1, 1, 1, err_buf, err_buf, 0,
                      err_buf),
              BLOB_EINVAL);
    ck_status(s->gemm(BLOB_FLOAT32, BLOB_NO_TRANS, (blob_trans)-1, 1, 1, 1, 1, err_buf, err_buf, 0,
                      err_buf),
              BLOB_EINVAL);
    ck_status(s->gemv(BLOB_FLOAT32, (blob_trans)2, 1, 1, 1, err_buf, err_buf, 0, err_buf),
              BLOB_EINVAL);
    ck_status(s->gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 1, 1, -1, 1, err_buf, err_buf, 0,
                      err_buf),
              BLOB_EINVAL);
    ck_status(s->gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, INT64_MAX / 2, 1, 4, 1, err_buf,
                      err_buf, 0, err_buf),
              BLOB_EOVERFLOW);
    ck_status(s->softmax_loss_forward(BLOB_FLOAT32, 2, -3, err_buf, err_buf, err_buf, err_buf),
              BLOB_EINVAL);
    ck_assert(strstr(blob_last_error(), "classes = -3"));
}
END_TEST

/* Empty arrays may be NULL: fine on the host, and on the GPU side fine with a GPU. */
START_TEST(test_empty_null)
{
    const side *s = _i ? &gpu_side : &cpu_side;
    blob_status expected = s->gpu && blob_device_count() <= 0 ? BLOB_ENODEV : BLOB_OK;
    for (int op = 0; op < N_OPS; op++)
        for (int dt = 0; dt < 2; dt++)
            ck_status(call_op(s, op, (blob_dtype)dt, 0, -1, NULL), expected);
}
END_TEST

/* Host labels: anything but an integer class in [0, classes) fails before any write. */
START_TEST(test_cpu_bad_labels)
{
    const blob_dtype dt = (blob_dtype)_i;
    static const double bad[] = {-1, 3, 1.5, NAN, 1e30};
    double logits[6] = {0, 1, 2, 3, 4, 5}, labels[2], prob[6], loss[2];
    float logits32[6] = {0, 1, 2, 3, 4, 5}, labels32[2], prob32[6], loss32[2];
    void *lg = dt == BLOB_FLOAT32 ? (void *)logits32 : logits;
    void *lb = dt == BLOB_FLOAT32 ? (void *)labels32 : labels;
    void *pr = dt == BLOB_FLOAT32 ? (void *)prob32 : prob;
    void *ls = dt == BLOB_FLOAT32 ? (void *)loss32 : loss;
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        test_put(dt, lb, 0, 2);
        test_put(dt, lb, 1, bad[b]);
        for (int i = 0; i < 6; i++)
            test_put(dt, pr, i, 7);
        ck_status(blob_cpu_softmax_loss_forward(dt, 2, 3, lg, lb, pr, ls), BLOB_ERANGE);
        ck_assert(strstr(blob_last_error(), "row 1"));
        ck_status(blob_cpu_softmax_loss_backward(dt, 2, 3, lg, lb, 0.5, pr), BLOB_ERANGE);
        ck_status(blob_cpu_softmax_loss_forward_backward(dt, 2, 3, lg, lb, 0.5, pr, ls, pr),
                  BLOB_ERANGE);
        for (int i = 0; i < 6; i++)
            ck_assert_double_eq(test_get(dt, pr, i), 7);
    }
    ck_status(blob_cpu_softmax_loss_forward(dt, 1, 0, NULL, lb, NULL, ls), BLOB_ERANGE);
}
END_TEST

/* A row length beyond the host BLAS's int is refused; sizes beyond it are split. */
START_TEST(test_cpu_leading_dim_overflow)
{
    const int64_t big = (int64_t)INT_MAX + 1;
    ck_status(blob_cpu_gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 1, 1, big, 1, err_buf,
                            err_buf, 0, err_buf),
              BLOB_EOVERFLOW);
    ck_assert(strstr(blob_last_error(), "row length"));
    ck_status(blob_cpu_gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_TRANS, 1, big, 1, 1, err_buf, err_buf,
                            0, err_buf),
              BLOB_EOVERFLOW);
    ck_status(blob_cpu_gemv(BLOB_FLOAT64, BLOB_TRANS, 1, big, 1, err_buf, err_buf, 0, err_buf),
              BLOB_EOVERFLOW);
}
END_TEST

/* ---- The GPU side without a GPU, and without CUDA ---- */

/* With no GPU every blob_gpu_* says so, for valid arguments of any size. */
START_TEST(test_gpu_without_gpu)
{
    test_hide_gpus();
    for (int op = 0; op < N_OPS; op++) {
        ck_status(call_op(&gpu_side, op, BLOB_FLOAT32, 2, -1, err_buf), BLOB_ENODEV);
        ck_assert(strstr(blob_last_error(), "no GPU"));
        ck_status(call_op(&gpu_side, op, BLOB_FLOAT64, 0, -1, err_buf), BLOB_ENODEV);
    }
    test_show_gpus();
}
END_TEST

/* In a CPU-only build the launchers themselves refuse, even when a (fake) GPU is seen. */
START_TEST(test_launchers_without_cuda)
{
    for (int op = 0; op < N_OPS; op++) {
        ck_status(call_op(&gpu_side, op, BLOB_FLOAT32, 2, -1, err_buf), BLOB_ENODEV);
        ck_assert_msg(strstr(blob_last_error(), "built without CUDA"), "%s", blob_last_error());
    }
}
END_TEST

/* ---- Real GPU ---- */

START_TEST(test_gpu_ops) { check_all(&gpu_side, (blob_dtype)_i); }
END_TEST

/* Bad labels on the GPU: NaN loss and zero gradient for that row only. */
START_TEST(test_gpu_bad_labels)
{
    const blob_dtype dt = (blob_dtype)_i;
    static const double bad[] = {-1, 3, 1.5, NAN};
    const int64_t rows = 5, classes = 3;
    arr logits = arr_on(&gpu_side, dt, rows * classes, -2, 2), labels = arr_new(dt, rows, 0, 1);
    for (int64_t r = 0; r < rows; r++)
        arr_set(&labels, r, r == 0 ? 2 : bad[r - 1]);
    arr_up(&gpu_side, &labels);
    arr prob = arr_on(&gpu_side, dt, rows * classes, 0, 1);
    arr loss = arr_on(&gpu_side, dt, rows, 0, 1);
    arr dl = arr_on(&gpu_side, dt, rows * classes, -1, 1);
    ck_ok(blob_gpu_softmax_loss_forward(dt, rows, classes, logits.d, labels.d, prob.d, loss.d));
    ck_ok(blob_gpu_softmax_loss_backward(dt, rows, classes, prob.d, labels.d, 2, dl.d));
    arr_down(&gpu_side, &prob);
    arr_down(&gpu_side, &loss);
    arr_down(&gpu_side, &dl);
    ck_assert(isfinite(test_get(dt, loss.h, 0)));
    ck_assert_double_eq_tol(test_get(dt, loss.h, 0), -log(test_get(dt, prob.h, 2)), 1e-5);
    ck_assert_double_eq_tol(test_get(dt, dl.h, 2), 2 * (test_get(dt, prob.h, 2) - 1), 1e-5);
    for (int64_t r = 1; r < rows; r++) {
        ck_assert_msg(isnan(test_get(dt, loss.h, r)), "row %lld: loss %g", (long long)r,
                      test_get(dt, loss.h, r));
        for (int64_t j = 0; j < classes; j++)
            ck_assert_double_eq(test_get(dt, dl.h, r * classes + j), 0);
    }
    /* in one pass: the same */
    arr loss1 = arr_on(&gpu_side, dt, rows, 0, 1);
    arr dl1 = arr_on(&gpu_side, dt, rows * classes, -1, 1);
    ck_ok(blob_gpu_softmax_loss_forward_backward(dt, rows, classes, logits.d, labels.d, 2, prob.d,
                                                 loss1.d, dl1.d));
    arr_down(&gpu_side, &loss1);
    arr_down(&gpu_side, &dl1);
    ck_assert(isfinite(test_get(dt, loss1.h, 0)));
    ck_assert(!memcmp(dl1.h, dl.h, (size_t)(rows * classes) * blob_dtype_size(dt)));
    for (int64_t r = 1; r < rows; r++)
        ck_assert(isnan(test_get(dt, loss1.h, r)));
    arr_free(&gpu_side, &loss1);
    arr_free(&gpu_side, &dl1);
    arr_free(&gpu_side, &logits);
    arr_free(&gpu_side, &labels);
    arr_free(&gpu_side, &prob);
    arr_free(&gpu_side, &loss);
    arr_free(&gpu_side, &dl);
}
END_TEST

/* Everything again on a non-blocking stream: uploads, operations and downloads all go
 * to the thread's current stream. */
START_TEST(test_gpu_ops_on_stream)
{
    void *stream;
    ck_ok(blob_stream_create(&stream));
    blob_stream_set(stream);
    check_all(&gpu_side, (blob_dtype)_i);
    blob_stream_set(NULL);
    ck_ok(blob_stream_destroy(stream));
}
END_TEST

/* axpy and friends past INT_MAX elements: 2^31 + 37 floats per buffer (about 17 GB for
 * both; the case needs "gpumem"). */
START_TEST(test_gpu_beyond_int_max)
{
    const int64_t n = TEST_BIG_GPU_ELEMS, w = 64;
    const int64_t starts[] = {0, n / 2, n - w}; /* the last window crosses 2^31 */
    void *x = NULL, *y = NULL;
    ck_ok(blob__be->device_alloc(TEST_BIG_GPU_BYTES, &x));
    ck_ok(blob__be->device_alloc(TEST_BIG_GPU_BYTES, &y));
    ck_ok(blob_gpu_set(BLOB_FLOAT32, n, 2, x));
    ck_ok(blob_gpu_set(BLOB_FLOAT32, n, 1, y));
    float win[64], got[64];
    for (int i = 0; i < w; i++)
        win[i] = (float)(i + 3);
    for (int k = 0; k < 3; k++)
        ck_ok(blob__be->copy_async((float *)x + starts[k], win, sizeof win, BLOB__H2D, NULL));
    ck_ok(blob_gpu_axpy(BLOB_FLOAT32, n, 0.5, x, y));
    double expected_sum = (double)(n - 3 * w) * 2;
    for (int k = 0; k < 3; k++) {
        ck_ok(blob__be->copy_async(got, (float *)y + starts[k], sizeof got, BLOB__D2H, NULL));
        ck_ok(blob__be->stream_synchronize(NULL));
        for (int i = 0; i < w; i++) {
            ck_assert_float_eq(got[i], 1 + 0.5f * win[i]);
            expected_sum += got[i];
        }
    }
    double sum;
    ck_ok(blob_gpu_asum(BLOB_FLOAT32, n, y, &sum));
    ck_assert_double_eq_tol(sum / expected_sum, 1, 1e-3);
    blob__be->device_free(x);
    blob__be->device_free(y);
}
END_TEST

/* ---- the host threads of the loops (blob__host_for) ---- */

/* Counts, per index, how many ranges covered it. */
typedef struct {
    _Atomic int *hits;
} cover_ctx;

static void cover_range(void *ctx, int64_t begin, int64_t end)
{
    cover_ctx *c = ctx;
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add_explicit(&c->hits[i], 1, memory_order_relaxed);
}

/* Every index in exactly one range, for any split, including fewer indices than
 * threads and more threads than the pool holds. */
START_TEST(test_host_for_partition)
{
    static const int64_t sizes[] = {0, 1, 2, 3, 7, 64, 1000, 100003};
    static const int threads[] = {0, 1, 2, 3, 8, 64, 1000};
    _Atomic int *hits = calloc(100003, sizeof *hits);
    ck_assert_ptr_nonnull(hits);
    for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++)
        for (size_t b = 0; b < sizeof threads / sizeof *threads; b++) {
            const int64_t n = sizes[a];
            for (int64_t i = 0; i < n; i++)
                atomic_store(&hits[i], 0);
            cover_ctx c = {hits};
            blob__host_for(threads[b], n, cover_range, &c);
            for (int64_t i = 0; i < n; i++)
                ck_assert_msg(atomic_load(&hits[i]) == 1,
                              "n %lld, %d threads: index %lld hit %d times", (long long)n,
                              threads[b], (long long)i, atomic_load(&hits[i]));
        }
    free(hits);
}
END_TEST

enum { LOOP_THREADS = 4, LOOP_N = 1 << 20, LOOP_ROUNDS = 20 };

/* One caller of pooled loops: ReLU forward and backward on its own arrays, checked
 * against the serial result every round. */
static void *loop_caller(void *arg)
{
    const unsigned seed = (unsigned)(uintptr_t)arg;
    float *x = malloc(LOOP_N * sizeof *x), *y = malloc(LOOP_N * sizeof *y);
    float *dx = malloc(LOOP_N * sizeof *dx);
    intptr_t bad = !x || !y || !dx;
    for (int64_t i = 0; i < LOOP_N && !bad; i++)
        x[i] = (float)((int64_t)((i * 2654435761u + seed) % 2001) - 1000) / 1000.0f;
    for (int r = 0; r < LOOP_ROUNDS && !bad; r++) {
        bad |= blob_cpu_relu_forward(BLOB_FLOAT32, LOOP_N, x, y) != BLOB_OK;
        bad |= blob_cpu_relu_backward(BLOB_FLOAT32, LOOP_N, x, x, dx) != BLOB_OK;
        for (int64_t i = 0; i < LOOP_N && !bad; i++)
            bad |= y[i] != (x[i] > 0 ? x[i] : 0) || dx[i] != (x[i] > 0 ? x[i] : 0);
    }
    free(x);
    free(y);
    free(dx);
    return (void *)bad;
}

/* Run callers of pooled loops: `threads` of them at once, or, with fork_first, one in a
 * forked child of a process whose pool has run, which starts again from nothing. */
static void run_loop_callers(int threads, bool fork_first)
{
    const int before = host_threads();
    ck_ok(blob_host_threads_set(4));
    if (fork_first) {
        ck_assert_ptr_null(loop_caller((void *)(uintptr_t)3)); /* the workers start */
        pid_t child = fork();
        ck_assert_int_ge(child, 0);
        if (child == 0)
            _exit(loop_caller((void *)(uintptr_t)7) ? 1 : 0);
        int status;
        ck_assert_int_eq(waitpid(child, &status, 0), child);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the forked child failed");
    }
    pthread_t t[LOOP_THREADS];
    for (int i = 0; i < threads; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, loop_caller, (void *)(uintptr_t)i), 0);
    for (int i = 0; i < threads; i++) {
        void *bad;
        ck_assert_int_eq(pthread_join(t[i], &bad), 0);
        ck_assert_msg(!bad, "thread %d computed a wrong result", i);
    }
    ck_ok(blob_host_threads_set(before));
}

/* Several threads run pooled loops at once (one has the host threads, the others run
 * theirs alone): every result right, and, under ThreadSanitizer, no race. */
START_TEST(test_host_loops_threads) { run_loop_callers(LOOP_THREADS, false); }
END_TEST

START_TEST(test_host_loops_after_fork) { run_loop_callers(0, true); }
END_TEST

void math_suite(Suite *s)
{
    TCase *tc = suite_case(s, "host", NULL, 60, NULL, NULL);
    add_loop_tests(tc, 0, 2, test_cpu_ops, test_cpu_ops_chunked, test_cpu_ops_threaded);
    add_tests(tc, test_gemm_grid);
    add_loop_tests(tc, 0, 2, test_bad_arguments, test_empty_null, test_cpu_bad_labels);
    add_tests(tc, test_cpu_leading_dim_overflow, test_gpu_without_gpu, test_host_for_partition,
              test_host_loops_threads);

    add_tests(suite_case(s, "after fork", "forkthreads", 0, NULL, NULL),
              test_host_loops_after_fork);
    add_tests(suite_case(s, "no-cuda", "nocuda", 0, fake_setup, fake_teardown),
              test_launchers_without_cuda);

    tc = suite_case(s, "gpu", "gpu", 0, NULL, NULL);
    add_loop_tests(tc, 0, 2, test_gpu_ops, test_gpu_bad_labels, test_gpu_ops_on_stream);
    add_tests(suite_case(s, "gpu-memory", "gpu gpumem", 0, NULL, NULL), test_gpu_beyond_int_max);
}

/* blob/math.h: argument checks shared by both sides; the host side over CBLAS (split into
 * pieces that its 32-bit sizes can take) or plain loops; the GPU side handing validated
 * arguments to the launchers of src/kernels/. */
#include <cblas.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "blob/device.h"
#include "blob/math.h"
#include "../core/core.h"
#include "../kernels/kernels.h"
#include "math_impl.h"

int64_t blob__blas_chunk = INT_MAX;

/* ---- Argument checks: details are recorded under the public function's name fn. ---- */

static blob_status check_dtype(const char *fn, blob_dtype dtype)
{
    if (!blob_dtype_size(dtype))
        return blob__fail(BLOB_EINVAL, fn, "bad dtype %d", (int)dtype);
    return BLOB_OK;
}

static blob_status check_trans(const char *fn, blob_trans t)
{
    if (t != BLOB_NO_TRANS && t != BLOB_TRANS)
        return blob__fail(BLOB_EINVAL, fn, "bad transpose flag %d", (int)t);
    return BLOB_OK;
}

/* rows x cols (both >= 0) elements of dtype must be addressable. */
static blob_status check_count(const char *fn, blob_dtype dtype, int64_t rows, int64_t cols)
{
    if (cols && rows > (int64_t)(PTRDIFF_MAX / blob_dtype_size(dtype)) / cols)
        return blob__fail(BLOB_EOVERFLOW, fn, "%lld x %lld elements overflow", (long long)rows,
                          (long long)cols);
    return BLOB_OK;
}

/* An array of count elements may be NULL only when empty. Its name is the first entry of
 * the comma-separated list names. */
static blob_status check_ptr(const char *fn, const char *names, const void *p, int64_t count)
{
    if (!p && count > 0)
        return blob__fail(BLOB_EINVAL, fn, "%.*s is NULL with %lld elements",
                          (int)strcspn(names, ","), names, (long long)count);
    return BLOB_OK;
}

/* The list after its first entry. */
static const char *next_name(const char *names)
{
    names += strcspn(names, ",");
    return names + strspn(names, ", ");
}

/* dtype, n >= 0, and `count` arrays of n elements named by the list `names`. */
static blob_status check_vec(const char *fn, blob_dtype dtype, int64_t n, const char *names,
                             const void *const *arrays, size_t count)
{
    BLOB_TRY(check_dtype(fn, dtype));
    if (n < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative size n = %lld", (long long)n);
    BLOB_TRY(check_count(fn, dtype, 1, n));
    for (size_t i = 0; i < count; i++, names = next_name(names))
        BLOB_TRY(check_ptr(fn, names, arrays[i], n));
    return BLOB_OK;
}
#define CHECK_VEC(dtype, n, ...)                                                            \
    check_vec(__func__, (dtype), (n), #__VA_ARGS__, (const void *const[]){__VA_ARGS__}, \
              sizeof((const void *const[]){__VA_ARGS__}) / sizeof(const void *))

static blob_status check_out(const char *fn, const double *out)
{
    if (!out)
        return blob__fail(BLOB_EINVAL, fn, "out is NULL");
    return BLOB_OK;
}

static blob_status check_gemm(const char *fn, blob_dtype dtype, blob_trans trans_a,
                              blob_trans trans_b, int64_t M, int64_t N, int64_t K,
                              const void *A, const void *B, const void *C)
{
    BLOB_TRY(check_dtype(fn, dtype));
    BLOB_TRY(check_trans(fn, trans_a));
    BLOB_TRY(check_trans(fn, trans_b));
    if (M < 0 || N < 0 || K < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative size M = %lld, N = %lld, K = %lld",
                          (long long)M, (long long)N, (long long)K);
    BLOB_TRY(check_count(fn, dtype, M, K));
    BLOB_TRY(check_count(fn, dtype, K, N));
    BLOB_TRY(check_count(fn, dtype, M, N));
    BLOB_TRY(check_ptr(fn, "A", A, M * K));
    BLOB_TRY(check_ptr(fn, "B", B, K * N));
    return check_ptr(fn, "C", C, M * N);
}

static blob_status check_gemv(const char *fn, blob_dtype dtype, blob_trans trans_a, int64_t M,
                              int64_t N, const void *A, const void *x, const void *y)
{
    BLOB_TRY(check_dtype(fn, dtype));
    BLOB_TRY(check_trans(fn, trans_a));
    if (M < 0 || N < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative size M = %lld, N = %lld", (long long)M,
                          (long long)N);
    BLOB_TRY(check_count(fn, dtype, M, N));
    BLOB_TRY(check_ptr(fn, "A", A, M * N));
    BLOB_TRY(check_ptr(fn, "x", x, trans_a ? M : N));
    return check_ptr(fn, "y", y, trans_a ? N : M);
}

/* rows x classes matrices m1, m2, m3 and rows-long vectors v1, v2, as many as names
 * names. */
static blob_status check_softmax(const char *fn, blob_dtype dtype, int64_t rows, int64_t classes,
                                 const char *names, const void *m1, const void *v1,
                                 const void *m2, const void *v2, const void *m3)
{
    BLOB_TRY(check_dtype(fn, dtype));
    if (rows < 0 || classes < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative size rows = %lld, classes = %lld",
                          (long long)rows, (long long)classes);
    BLOB_TRY(check_count(fn, dtype, rows, classes));
    const void *arrays[] = {m1, v1, m2, v2, m3};
    const int64_t counts[] = {rows * classes, rows, rows * classes, rows, rows * classes};
    for (size_t i = 0; i < 5 && *names; i++, names = next_name(names))
        BLOB_TRY(check_ptr(fn, names, arrays[i], counts[i]));
    return BLOB_OK;
}

/* ---- Host side ---- */

/* &p[i] in an array of dtype. */
static void *at(blob_dtype dtype, const void *p, int64_t i)
{
    return (char *)p + (size_t)i * blob_dtype_size(dtype);
}

static double get(blob_dtype dtype, const void *p, int64_t i)
{
    return dtype == BLOB_FLOAT32 ? ((const float *)p)[i] : ((const double *)p)[i];
}

/* Length of the CBLAS piece of [0, n) that starts at off. */
static blasint piece(int64_t n, int64_t off)
{
    return (blasint)(n - off < blob__blas_chunk ? n - off : blob__blas_chunk);
}

/* A leading dimension is passed whole to CBLAS, so it must fit its int. */
static blob_status check_ld(const char *fn, const char *name, int64_t ld)
{
    if (ld > INT_MAX)
        return blob__fail(BLOB_EOVERFLOW, fn, "row length %lld of %s exceeds the host BLAS's %d",
                          (long long)ld, name, INT_MAX);
    return BLOB_OK;
}

static CBLAS_TRANSPOSE cblas_trans(blob_trans t)
{
    return t == BLOB_TRANS ? CblasTrans : CblasNoTrans;
}

/* cblas_s<name> or cblas_d<name> by dtype; arrays go as void * and scalars as double. */
#define BLAS(dtype, name, ...) \
    ((dtype) == BLOB_FLOAT32 ? cblas_s##name(__VA_ARGS__) : cblas_d##name(__VA_ARGS__))

/* Run the statements with T the element type of dtype. */
#define TYPED(dtype, ...)              \
    do {                               \
        if ((dtype) == BLOB_FLOAT32) { \
            typedef float T;           \
            __VA_ARGS__                \
        } else {                       \
            typedef double T;          \
            __VA_ARGS__                \
        }                              \
    } while (0)

static void cpu_set(blob_dtype dtype, int64_t n, double alpha, void *y)
{
    TYPED(dtype, T *p = y; for (int64_t i = 0; i < n; i++) p[i] = (T)alpha;);
}

static void cpu_scal(blob_dtype dtype, int64_t n, double alpha, void *x)
{
    for (int64_t off = 0; off < n; off += blob__blas_chunk)
        BLAS(dtype, scal, piece(n, off), alpha, at(dtype, x, off), 1);
}

/* The class a label value names, or -1 if it is not an integer in [0, classes). */
static int64_t label_index(double v, int64_t classes)
{
    return v >= 0 && v < (double)classes && v == floor(v) ? (int64_t)v : -1;
}

static blob_status check_labels(const char *fn, blob_dtype dtype, int64_t rows, int64_t classes,
                                const void *labels)
{
    for (int64_t i = 0; i < rows; i++)
        if (label_index(get(dtype, labels, i), classes) < 0)
            return blob__fail(BLOB_ERANGE, fn, "label %g of row %lld is not a class in [0, %lld)",
                              get(dtype, labels, i), (long long)i, (long long)classes);
    return BLOB_OK;
}

/* ---- GPU side, and the degenerate products of both sides ---- */

/* y = beta * y (n elements) for a product whose reduction is empty, which BLAS leaves
 * loosely defined; beta == 0 does not read y. */
static blob_status scale_empty(bool gpu, blob_dtype dtype, int64_t n, double beta, void *y)
{
    if (beta == 1)
        return BLOB_OK;
    if (gpu) {
        void *s = blob_get_stream();
        return beta == 0 ? blob__k_set(s, dtype, n, 0, y) : blob__k_scal(s, dtype, n, beta, y);
    }
    if (beta == 0)
        cpu_set(dtype, n, 0, y);
    else
        cpu_scal(dtype, n, beta, y);
    return BLOB_OK;
}

/* ---- The public functions, host and GPU side by side ---- */

blob_status blob_cpu_gemm(blob_dtype dtype, blob_trans trans_a, blob_trans trans_b, int64_t M,
                          int64_t N, int64_t K, double alpha, const void *A, const void *B,
                          double beta, void *C)
{
    BLOB_TRY(check_gemm(__func__, dtype, trans_a, trans_b, M, N, K, A, B, C));
    if (M == 0 || N == 0)
        return BLOB_OK;
    if (K == 0)
        return scale_empty(false, dtype, M * N, beta, C);
    int64_t lda = trans_a ? M : K, ldb = trans_b ? K : N, c = blob__blas_chunk;
    BLOB_TRY(check_ld(__func__, "A", lda));
    BLOB_TRY(check_ld(__func__, "B", ldb));
    BLOB_TRY(check_ld(__func__, "C", N));
    /* Blocks of C, each accumulated over the pieces of K (beta on the first only). */
    for (int64_t i = 0; i < M; i += c)
        for (int64_t j = 0; j < N; j += c)
            for (int64_t k = 0; k < K; k += c)
                BLAS(dtype, gemm, CblasRowMajor, cblas_trans(trans_a), cblas_trans(trans_b),
                     piece(M, i), piece(N, j), piece(K, k), alpha,
                     at(dtype, A, trans_a ? k * lda + i : i * lda + k), (blasint)lda,
                     at(dtype, B, trans_b ? j * ldb + k : k * ldb + j), (blasint)ldb,
                     k ? 1.0 : beta, at(dtype, C, i * N + j), (blasint)N);
    return BLOB_OK;
}

blob_status blob_gpu_gemm(blob_dtype dtype, blob_trans trans_a, blob_trans trans_b, int64_t M,
                          int64_t N, int64_t K, double alpha, const void *A, const void *B,
                          double beta, void *C)
{
    BLOB_TRY(check_gemm(__func__, dtype, trans_a, trans_b, M, N, K, A, B, C));
    BLOB_TRY(blob__require_gpu(__func__));
    if (M == 0 || N == 0)
        return BLOB_OK;
    if (K == 0)
        return scale_empty(true, dtype, M * N, beta, C);
    blob_math_mode mode = blob__math_mode_for(dtype, BLOB_MATH_DEFAULT);
    if (mode != BLOB_MATH_FP32)
        return blob__k_gemm_mode(blob_get_stream(), mode, trans_a, trans_b, M, N, K, alpha, A,
                                 B, beta, C);
    return blob__k_gemm(blob_get_stream(), dtype, trans_a, trans_b, M, N, K, alpha, A, B,
                        beta, C);
}

blob_status blob_cpu_gemv(blob_dtype dtype, blob_trans trans_a, int64_t M, int64_t N,
                          double alpha, const void *A, const void *x, double beta, void *y)
{
    BLOB_TRY(check_gemv(__func__, dtype, trans_a, M, N, A, x, y));
    int64_t out = trans_a ? N : M, red = trans_a ? M : N, c = blob__blas_chunk;
    if (out == 0)
        return BLOB_OK;
    if (red == 0)
        return scale_empty(false, dtype, out, beta, y);
    BLOB_TRY(check_ld(__func__, "A", N));
    /* Pieces of y, each accumulated over the pieces of x (beta on the first only). */
    for (int64_t o = 0; o < out; o += c)
        for (int64_t r = 0; r < red; r += c)
            BLAS(dtype, gemv, CblasRowMajor, cblas_trans(trans_a),
                 trans_a ? piece(red, r) : piece(out, o), trans_a ? piece(out, o) : piece(red, r),
                 alpha, at(dtype, A, trans_a ? r * N + o : o * N + r), (blasint)N,
                 at(dtype, x, r), 1, r ? 1.0 : beta, at(dtype, y, o), 1);
    return BLOB_OK;
}

blob_status blob_gpu_gemv(blob_dtype dtype, blob_trans trans_a, int64_t M, int64_t N,
                          double alpha, const void *A, const void *x, double beta, void *y)
{
    BLOB_TRY(check_gemv(__func__, dtype, trans_a, M, N, A, x, y));
    BLOB_TRY(blob__require_gpu(__func__));
    int64_t out = trans_a ? N : M, red = trans_a ? M : N;
    if (out == 0)
        return BLOB_OK;
    if (red == 0)
        return scale_empty(true, dtype, out, beta, y);
    return blob__k_gemv(blob_get_stream(), dtype, trans_a, M, N, alpha, A, x, beta, y);
}

blob_status blob_cpu_axpy(blob_dtype dtype, int64_t n, double alpha, const void *x, void *y)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x, y));
    for (int64_t off = 0; off < n; off += blob__blas_chunk)
        BLAS(dtype, axpy, piece(n, off), alpha, at(dtype, x, off), 1, at(dtype, y, off), 1);
    return BLOB_OK;
}

blob_status blob_gpu_axpy(blob_dtype dtype, int64_t n, double alpha, const void *x, void *y)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x, y));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_axpy(blob_get_stream(), dtype, n, alpha, x, y);
}

blob_status blob_cpu_axpby(blob_dtype dtype, int64_t n, double alpha, const void *x,
                           double beta, void *y)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x, y));
    for (int64_t off = 0; off < n; off += blob__blas_chunk)
        BLAS(dtype, axpby, piece(n, off), alpha, at(dtype, x, off), 1, beta, at(dtype, y, off),
             1);
    return BLOB_OK;
}

blob_status blob_gpu_axpby(blob_dtype dtype, int64_t n, double alpha, const void *x,
                           double beta, void *y)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x, y));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_axpby(blob_get_stream(), dtype, n, alpha, x, beta, y);
}

blob_status blob_cpu_scal(blob_dtype dtype, int64_t n, double alpha, void *x)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x));
    cpu_scal(dtype, n, alpha, x);
    return BLOB_OK;
}

blob_status blob_gpu_scal(blob_dtype dtype, int64_t n, double alpha, void *x)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_scal(blob_get_stream(), dtype, n, alpha, x);
}

blob_status blob_cpu_dot(blob_dtype dtype, int64_t n, const void *x, const void *y, double *out)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x, y));
    BLOB_TRY(check_out(__func__, out));
    double sum = 0;
    for (int64_t off = 0; off < n; off += blob__blas_chunk)
        sum += BLAS(dtype, dot, piece(n, off), at(dtype, x, off), 1, at(dtype, y, off), 1);
    *out = sum;
    return BLOB_OK;
}

blob_status blob_gpu_dot(blob_dtype dtype, int64_t n, const void *x, const void *y, double *out)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x, y));
    BLOB_TRY(check_out(__func__, out));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_dot(blob_get_stream(), dtype, n, x, y, out);
}

blob_status blob_cpu_asum(blob_dtype dtype, int64_t n, const void *x, double *out)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x));
    BLOB_TRY(check_out(__func__, out));
    double sum = 0;
    for (int64_t off = 0; off < n; off += blob__blas_chunk)
        sum += BLAS(dtype, asum, piece(n, off), at(dtype, x, off), 1);
    *out = sum;
    return BLOB_OK;
}

blob_status blob_gpu_asum(blob_dtype dtype, int64_t n, const void *x, double *out)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x));
    BLOB_TRY(check_out(__func__, out));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_asum(blob_get_stream(), dtype, n, x, out);
}

blob_status blob_cpu_copy(blob_dtype dtype, int64_t n, const void *x, void *y)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x, y));
    for (int64_t off = 0; off < n; off += blob__blas_chunk)
        BLAS(dtype, copy, piece(n, off), at(dtype, x, off), 1, at(dtype, y, off), 1);
    return BLOB_OK;
}

blob_status blob_gpu_copy(blob_dtype dtype, int64_t n, const void *x, void *y)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x, y));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_copy(blob_get_stream(), dtype, n, x, y);
}

blob_status blob_cpu_set(blob_dtype dtype, int64_t n, double alpha, void *y)
{
    BLOB_TRY(CHECK_VEC(dtype, n, y));
    cpu_set(dtype, n, alpha, y);
    return BLOB_OK;
}

blob_status blob_gpu_set(blob_dtype dtype, int64_t n, double alpha, void *y)
{
    BLOB_TRY(CHECK_VEC(dtype, n, y));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_set(blob_get_stream(), dtype, n, alpha, y);
}

blob_status blob_cpu_add_scalar(blob_dtype dtype, int64_t n, double alpha, void *y)
{
    BLOB_TRY(CHECK_VEC(dtype, n, y));
    TYPED(dtype, T *p = y; for (int64_t i = 0; i < n; i++) p[i] += (T)alpha;);
    return BLOB_OK;
}

blob_status blob_gpu_add_scalar(blob_dtype dtype, int64_t n, double alpha, void *y)
{
    BLOB_TRY(CHECK_VEC(dtype, n, y));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_add_scalar(blob_get_stream(), dtype, n, alpha, y);
}

blob_status blob_cpu_mul(blob_dtype dtype, int64_t n, const void *a, const void *b, void *y)
{
    BLOB_TRY(CHECK_VEC(dtype, n, a, b, y));
    TYPED(dtype, const T *pa = a; const T *pb = b; T *py = y;
          for (int64_t i = 0; i < n; i++) py[i] = pa[i] * pb[i];);
    return BLOB_OK;
}

blob_status blob_gpu_mul(blob_dtype dtype, int64_t n, const void *a, const void *b, void *y)
{
    BLOB_TRY(CHECK_VEC(dtype, n, a, b, y));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_mul(blob_get_stream(), dtype, n, a, b, y);
}

/* The host loops that run on the library's host threads (blob__host_for): their
 * arguments, and the range [lo, hi) of iterations each body does. */
typedef struct {
    blob_dtype dtype;
    int64_t classes;
    double scale;
    const void *a, *b, *labels;
    void *y, *z, *w;
} loop_args;

static void relu_forward_range(void *args, int64_t lo, int64_t hi)
{
    const loop_args *l = args;
    TYPED(l->dtype, const T *px = l->a; T *py = l->y;
          for (int64_t i = lo; i < hi; i++) py[i] = px[i] > 0 ? px[i] : 0;);
}

static void relu_backward_range(void *args, int64_t lo, int64_t hi)
{
    const loop_args *l = args;
    TYPED(l->dtype, const T *px = l->a; const T *pdy = l->b; T *pdx = l->y;
          for (int64_t i = lo; i < hi; i++) pdx[i] = px[i] > 0 ? pdy[i] : 0;);
}

/* Rows [lo, hi) of softmax with loss (logits a, prob y, loss z), and with w its
 * gradient (dlogits w, from the prob just written). */
static void softmax_loss_forward_range(void *args, int64_t lo, int64_t hi)
{
    const loop_args *l = args;
    const blob_dtype dtype = l->dtype;
    const int64_t classes = l->classes;
    TYPED(dtype, T *loss = l->z; const T tiny = dtype == BLOB_FLOAT32 ? FLT_MIN : DBL_MIN;
          for (int64_t r = lo; r < hi; r++) {
              const T *x = (const T *)l->a + r * classes;
              T *p = (T *)l->y + r * classes;
              T m = x[0];
              for (int64_t j = 1; j < classes; j++)
                  m = x[j] > m ? x[j] : m;
              double sum = 0;
              for (int64_t j = 0; j < classes; j++)
                  sum += p[j] = (T)exp((double)x[j] - m);
              for (int64_t j = 0; j < classes; j++)
                  p[j] = (T)(p[j] / sum);
              const int64_t k = label_index(get(dtype, l->labels, r), classes);
              T q = p[k];
              loss[r] = (T)-log(q > tiny ? q : tiny);
              if (l->w) {
                  T *d = (T *)l->w + r * classes;
                  for (int64_t j = 0; j < classes; j++)
                      d[j] = (T)(l->scale * (p[j] - (j == k)));
              }
          });
}

static void softmax_loss_backward_range(void *args, int64_t lo, int64_t hi)
{
    const loop_args *l = args;
    const int64_t classes = l->classes;
    TYPED(l->dtype, for (int64_t r = lo; r < hi; r++) {
              const T *p = (const T *)l->a + r * classes;
              T *d = (T *)l->y + r * classes;
              int64_t k = label_index(get(l->dtype, l->labels, r), classes);
              for (int64_t j = 0; j < classes; j++)
                  d[j] = (T)(l->scale * (p[j] - (j == k)));
          });
}

blob_status blob_cpu_relu_forward(blob_dtype dtype, int64_t n, const void *x, void *y)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x, y));
    loop_args l = {.dtype = dtype, .a = x, .y = y};
    blob__host_for(blob__host_threads(n), n, relu_forward_range, &l);
    return BLOB_OK;
}

blob_status blob_gpu_relu_forward(blob_dtype dtype, int64_t n, const void *x, void *y)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x, y));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_relu_forward(blob_get_stream(), dtype, n, x, y);
}

blob_status blob_cpu_relu_backward(blob_dtype dtype, int64_t n, const void *x, const void *dy,
                                   void *dx)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x, dy, dx));
    loop_args l = {.dtype = dtype, .a = x, .b = dy, .y = dx};
    blob__host_for(blob__host_threads(n), n, relu_backward_range, &l);
    return BLOB_OK;
}

blob_status blob_gpu_relu_backward(blob_dtype dtype, int64_t n, const void *x, const void *dy,
                                   void *dx)
{
    BLOB_TRY(CHECK_VEC(dtype, n, x, dy, dx));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_relu_backward(blob_get_stream(), dtype, n, x, dy, dx);
}

/* On the host a bad label fails the call before anything is written. */
blob_status blob_cpu_softmax_loss_forward(blob_dtype dtype, int64_t rows, int64_t classes,
                                          const void *logits, const void *labels, void *prob,
                                          void *loss)
{
    BLOB_TRY(check_softmax(__func__, dtype, rows, classes, "logits, labels, prob, loss", logits,
                           labels, prob, loss, NULL));
    BLOB_TRY(check_labels(__func__, dtype, rows, classes, labels));
    loop_args l = {.dtype = dtype, .classes = classes, .a = logits, .labels = labels,
                   .y = prob, .z = loss};
    blob__host_for(blob__host_threads(rows * classes), rows, softmax_loss_forward_range, &l);
    return BLOB_OK;
}

blob_status blob_gpu_softmax_loss_forward(blob_dtype dtype, int64_t rows, int64_t classes,
                                          const void *logits, const void *labels, void *prob,
                                          void *loss)
{
    BLOB_TRY(check_softmax(__func__, dtype, rows, classes, "logits, labels, prob, loss", logits,
                           labels, prob, loss, NULL));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_softmax_loss_forward(blob_get_stream(), dtype, rows, classes, logits,
                                        labels, prob, loss);
}

blob_status blob_cpu_softmax_loss_backward(blob_dtype dtype, int64_t rows, int64_t classes,
                                           const void *prob, const void *labels, double scale,
                                           void *dlogits)
{
    BLOB_TRY(check_softmax(__func__, dtype, rows, classes, "prob, labels, dlogits", prob, labels,
                           dlogits, NULL, NULL));
    BLOB_TRY(check_labels(__func__, dtype, rows, classes, labels));
    loop_args l = {.dtype = dtype, .classes = classes, .scale = scale, .a = prob,
                   .labels = labels, .y = dlogits};
    blob__host_for(blob__host_threads(rows * classes), rows, softmax_loss_backward_range, &l);
    return BLOB_OK;
}

blob_status blob_gpu_softmax_loss_backward(blob_dtype dtype, int64_t rows, int64_t classes,
                                           const void *prob, const void *labels, double scale,
                                           void *dlogits)
{
    BLOB_TRY(check_softmax(__func__, dtype, rows, classes, "prob, labels, dlogits", prob, labels,
                           dlogits, NULL, NULL));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_softmax_loss_backward(blob_get_stream(), dtype, rows, classes, prob,
                                         labels, scale, dlogits);
}

blob_status blob_cpu_softmax_loss_forward_backward(blob_dtype dtype, int64_t rows,
                                                   int64_t classes, const void *logits,
                                                   const void *labels, double scale,
                                                   void *prob, void *loss, void *dlogits)
{
    BLOB_TRY(check_softmax(__func__, dtype, rows, classes, "logits, labels, prob, loss, dlogits",
                           logits, labels, prob, loss, dlogits));
    BLOB_TRY(check_labels(__func__, dtype, rows, classes, labels));
    loop_args l = {.dtype = dtype, .classes = classes, .scale = scale, .a = logits,
                   .labels = labels, .y = prob, .z = loss, .w = dlogits};
    blob__host_for(blob__host_threads(rows * classes), rows, softmax_loss_forward_range, &l);
    return BLOB_OK;
}

blob_status blob_gpu_softmax_loss_forward_backward(blob_dtype dtype, int64_t rows,
                                                   int64_t classes, const void *logits,
                                                   const void *labels, double scale,
                                                   void *prob, void *loss, void *dlogits)
{
    BLOB_TRY(check_softmax(__func__, dtype, rows, classes, "logits, labels, prob, loss, dlogits",
                           logits, labels, prob, loss, dlogits));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_softmax_loss_forward_backward(blob_get_stream(), dtype, rows, classes,
                                                 logits, labels, scale, prob, loss, dlogits);
}

/* ---- The checks above, for the other math files ---- */

blob_status blob__check_gemm(const char *fn, blob_dtype dtype, blob_trans trans_a,
                             blob_trans trans_b, int64_t M, int64_t N, int64_t K, const void *A,
                             const void *B, const void *C)
{
    return check_gemm(fn, dtype, trans_a, trans_b, M, N, K, A, B, C);
}

blob_status blob__check_dtype(const char *fn, blob_dtype dtype)
{
    return check_dtype(fn, dtype);
}

blob_status blob__check_array(const char *fn, blob_dtype dtype, int64_t n, const char *name,
                              const void *p)
{
    if (n < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative size %lld of %s", (long long)n, name);
    BLOB_TRY(check_count(fn, dtype, 1, n));
    return check_ptr(fn, name, p, n);
}

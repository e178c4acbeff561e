/* blob/blas.h: argument checks shared by both sides; the host side over CBLAS (split into
 * pieces that its 32-bit sizes can take) or plain loops; the GPU side handing validated
 * arguments to the launchers of src/kernels/. */
#include "host_cblas.h"
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "blob/device.h"
#include "blob/blas.h"
#include "../core/core.h"
#include "../kernels/kernels.h"
#include "host_gemm.h"
#include "math_impl.h"

int64_t blob__blas_chunk = INT_MAX;

/* ---- Argument checks: details are recorded under the public function's name fn. ---- */

/* The dtypes a call takes: the float math takes float32 and float64; gemm, the vector
 * calls but gemv, and the ReLUs the 16-bit floats too (computing in float32); copy any
 * dtype. */
typedef enum { TAKES_FLOAT, TAKES_HALF, TAKES_ANY } dtypes_taken;

static bool is_half(blob_dtype dtype) { return dtype == BLOB_BFLOAT16 || dtype == BLOB_FLOAT16; }

static blob_status check_dtype_taken(const char *fn, dtypes_taken takes, blob_dtype dtype)
{
    if (!blob_dtype_size(dtype))
        return blob__fail(BLOB_EINVAL, fn, "bad dtype %d", (int)dtype);
    if (dtype == BLOB_FLOAT32 || dtype == BLOB_FLOAT64 || takes == TAKES_ANY ||
        (takes == TAKES_HALF && is_half(dtype)))
        return BLOB_OK;
    return blob__fail(BLOB_ENOTSUP, fn, "%s is not supported (float32 and float64%s only)",
                      blob_dtype_name(dtype), takes == TAKES_HALF ? ", bfloat16 and float16" : "");
}

static blob_status check_dtype(const char *fn, blob_dtype dtype)
{
    return check_dtype_taken(fn, TAKES_FLOAT, dtype);
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
static blob_status check_vec(const char *fn, dtypes_taken takes, blob_dtype dtype, int64_t n,
                             const char *names, const void *const *arrays, size_t count)
{
    BLOB_TRY(check_dtype_taken(fn, takes, dtype));
    if (n < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative size n = %lld", (long long)n);
    BLOB_TRY(check_count(fn, dtype, 1, n));
    for (size_t i = 0; i < count; i++, names = next_name(names))
        BLOB_TRY(check_ptr(fn, names, arrays[i], n));
    return BLOB_OK;
}
#define CHECK_VEC_OF(takes, dtype, n, ...)                                                       \
    check_vec(__func__, (takes), (dtype), (n), #__VA_ARGS__, (const void *const[]){__VA_ARGS__}, \
              sizeof((const void *const[]){__VA_ARGS__}) / sizeof(const void *))

static blob_status check_out(const char *fn, const double *out)
{
    if (!out)
        return blob__fail(BLOB_EINVAL, fn, "out is NULL");
    return BLOB_OK;
}

static blob_status check_gemm(const char *fn, blob_dtype dtype, blob_trans trans_a,
                              blob_trans trans_b, int64_t M, int64_t N, int64_t K, const void *A,
                              const void *B, const void *C)
{
    BLOB_TRY(check_dtype_taken(fn, TAKES_HALF, dtype));
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

/* The arrays m1, v1, m2, v2, m3 (rows x classes matrices m, rows-long vectors v), as many
 * as names names. */
static blob_status check_softmax(const char *fn, dtypes_taken takes, blob_dtype dtype, int64_t rows,
                                 int64_t classes, const char *names, const void *const arrays[5])
{
    BLOB_TRY(check_dtype_taken(fn, takes, dtype));
    if (rows < 0 || classes < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative size rows = %lld, classes = %lld",
                          (long long)rows, (long long)classes);
    BLOB_TRY(check_count(fn, dtype, rows, classes));
    const int64_t counts[] = {rows * classes, rows, rows * classes, rows, rows * classes};
    for (size_t i = 0; i < 5 && *names; i++, names = next_name(names))
        BLOB_TRY(check_ptr(fn, names, arrays[i], counts[i]));
    return BLOB_OK;
}

/* check_softmax of a float32 or float64 call, its arrays (up to 5) named as written. */
#define CHECK_SOFTMAX_OF(dtype, rows, classes, ...)                                \
    check_softmax(__func__, TAKES_FLOAT, (dtype), (rows), (classes), #__VA_ARGS__, \
                  (const void *const[5]){__VA_ARGS__})

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
static int piece(int64_t n, int64_t off)
{
    return (int)(n - off < blob__blas_chunk ? n - off : blob__blas_chunk);
}

/* A leading dimension is passed whole to CBLAS, so it must fit its int. */
static blob_status check_ld(const char *fn, const char *name, int64_t ld)
{
    if (ld > INT_MAX)
        return blob__fail(BLOB_EOVERFLOW, fn, "row length %lld of %s exceeds the host BLAS's %d",
                          (long long)ld, name, INT_MAX);
    return BLOB_OK;
}

static enum CBLAS_TRANSPOSE cblas_trans(blob_trans t)
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
    if (is_half(dtype)) {
        blob__elem_set(dtype, y, 0, alpha);
        for (int64_t i = 1; i < n; i++)
            memcpy(at(dtype, y, i), y, sizeof(uint16_t));
        return;
    }
    TYPED(dtype, T *p = y; for (int64_t i = 0; i < n; i++) p[i] = (T)alpha;);
}

/* The vector operations of the host BLAS, cut into one contiguous part per host thread;
 * dot and asum sum the parts' results in order. */
typedef enum { VEC_AXPY, VEC_AXPBY, VEC_SCAL, VEC_COPY, VEC_DOT, VEC_ASUM } vec_op;

typedef struct {
    vec_op op;
    blob_dtype dtype;
    int64_t n;
    int parts;
    double alpha, beta;
    const void *x;
    void *y;
    double sums[BLOB__MAX_HOST_THREADS]; /* per part: dot and asum */
} vec_job;

/* Elements [lo, hi) of op on a 16-bit float dtype (any dtype for VEC_COPY), in float32:
 * each product and sum rounded on its own, as the GPU's kernels do; returns the part's
 * sum of dot or asum, accumulated in float32. */
static double half_part(const vec_job *v, int64_t lo, int64_t hi)
{
    const blob_dtype dt = v->dtype;
    if (v->op == VEC_COPY) {
        memcpy(at(dt, v->y, lo), at(dt, v->x, lo), (size_t)(hi - lo) * blob_dtype_size(dt));
        return 0;
    }
    const float a = (float)v->alpha;
    float sum = 0;
    for (int64_t i = lo; i < hi; i++) {
        const float x = v->x ? (float)blob__elem_get(dt, v->x, i) : 0;
        const float y = v->y ? (float)blob__elem_get(dt, v->y, i) : 0;
        const float ax = a * (v->op == VEC_SCAL ? y : x);
        switch (v->op) {
        case VEC_AXPY: blob__elem_set(dt, v->y, i, y + ax); break;
        case VEC_SCAL: blob__elem_set(dt, v->y, i, ax); break;
        case VEC_DOT: sum += x * y; break;
        case VEC_ASUM: sum += fabsf(x); break;
        case VEC_AXPBY:
            blob__elem_set(dt, v->y, i, v->beta == 0 ? ax : ax + (float)v->beta * y);
            break;
        case VEC_COPY: break;
        }
    }
    return sum;
}

static void vec_parts(void *ctx, int64_t p0, int64_t p1)
{
    vec_job *v = ctx;
    const blob_dtype dt = v->dtype;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t lo = v->n * p / v->parts, hi = v->n * (p + 1) / v->parts;
        double sum = 0;
        if (dt != BLOB_FLOAT32 && dt != BLOB_FLOAT64) {
            v->sums[p] = half_part(v, lo, hi);
            continue;
        }
        for (int64_t off = lo; off < hi; off += blob__blas_chunk) {
            const int len = piece(hi, off);
            void *y = v->y ? at(dt, v->y, off) : NULL;
            const void *x = v->x ? at(dt, v->x, off) : NULL;
            switch (v->op) {
            case VEC_AXPY: BLAS(dt, axpy, len, v->alpha, x, 1, y, 1); break;
            case VEC_AXPBY: BLAS(dt, axpby, len, v->alpha, x, 1, v->beta, y, 1); break;
            case VEC_SCAL: BLAS(dt, scal, len, v->alpha, y, 1); break;
            case VEC_COPY: BLAS(dt, copy, len, x, 1, y, 1); break;
            case VEC_DOT: sum += BLAS(dt, dot, len, x, 1, y, 1); break;
            case VEC_ASUM: sum += BLAS(dt, asum, len, x, 1); break;
            }
        }
        v->sums[p] = sum;
    }
}

/* Run op over n elements; returns the sum of dot or asum (0 for the others). */
static double vec_run(vec_op op, blob_dtype dtype, int64_t n, double alpha, const void *x,
                      double beta, void *y)
{
    vec_job v = {op, dtype, n, blob__host_threads(n), alpha, beta, x, y, {0}};
    blob__host_for(v.parts, v.parts, vec_parts, &v);
    double sum = 0;
    for (int p = 0; p < v.parts; p++)
        sum += v.sums[p];
    return sum;
}

/* The class a label value names, or -1 if it is not an integer in [0, classes). */
static int64_t label_index(double v, int64_t classes)
{
    return v >= 0 && v < (double)classes && v == floor(v) ? (int64_t)v : -1;
}

/* Label i of labels of dtype: float32, float64, int32 or int64. */
static double label_at(blob_dtype dtype, const void *labels, int64_t i)
{
    return dtype == BLOB_INT32   ? ((const int32_t *)labels)[i]
           : dtype == BLOB_INT64 ? (double)((const int64_t *)labels)[i]
                                 : get(dtype, labels, i);
}

static blob_status check_labels(const char *fn, blob_dtype dtype, int64_t rows, int64_t classes,
                                const void *labels)
{
    for (int64_t i = 0; i < rows; i++)
        if (label_index(label_at(dtype, labels, i), classes) < 0)
            return blob__fail(BLOB_ERANGE, fn, "label %g of row %lld is not a class in [0, %lld)",
                              label_at(dtype, labels, i), (long long)i, (long long)classes);
    return BLOB_OK;
}

/* The arguments of the softmax_loss_*_mixed calls: float32 or a 16-bit float, int labels,
 * then check_softmax's checks of the shape and of the arrays a..d named by names. */
static blob_status check_mixed_softmax(const char *fn, blob_dtype dtype, blob_dtype label_dtype,
                                       int64_t rows, int64_t classes, const char *names,
                                       const void *a, const void *b, const void *c, const void *d)
{
    BLOB_TRY(check_dtype_taken(fn, TAKES_HALF, dtype));
    if (dtype == BLOB_FLOAT64)
        return blob__fail(BLOB_ENOTSUP, fn,
                          "float64 is not supported (float32, bfloat16 and "
                          "float16 only)");
    if (!blob_dtype_size(label_dtype))
        return blob__fail(BLOB_EINVAL, fn, "bad label dtype %d", (int)label_dtype);
    if (label_dtype != BLOB_INT32 && label_dtype != BLOB_INT64)
        return blob__fail(BLOB_ENOTSUP, fn,
                          "labels of %s are not supported (int32 and int64 "
                          "only)",
                          blob_dtype_name(label_dtype));
    return check_softmax(fn, TAKES_HALF, dtype, rows, classes, names,
                         (const void *const[5]){a, b, c, d});
}

/* ---- GPU side, and the degenerate products of both sides ---- */

/* y = beta * y (n elements) for a product whose reduction is empty, which BLAS leaves
 * loosely defined; beta == 0 does not read y (zero bits are +0 in every float dtype). */
static blob_status scale_empty(bool gpu, blob_dtype dtype, int64_t n, double beta, void *y)
{
    if (beta == 1)
        return BLOB_OK;
    if (gpu) {
        void *s = blob_stream_get();
        if (is_half(dtype))
            return beta == 0 ? blob__be->memset_async(y, 0, (size_t)n * blob_dtype_size(dtype), s)
                             : blob__k_half_scal(s, dtype, n, beta, y);
        return beta == 0 ? blob__k_set(s, dtype, n, 0, y) : blob__k_scal(s, dtype, n, beta, y);
    }
    if (beta == 0)
        memset(y, 0, (size_t)n * blob_dtype_size(dtype));
    else
        vec_run(VEC_SCAL, dtype, n, beta, NULL, 0, y);
    return BLOB_OK;
}

/* ---- The public functions, host and GPU side by side ---- */

/* A host GEMM, the blocks of C it is cut into, and what runs on each after it. */
typedef struct {
    blob__host_gemm h;
    double alpha, beta;
    blob__gemm_block_fn after;
    void *after_ctx;
} gemm_job;

/* C's rows [i0, i1) x columns [j0, j1) by the BLAS, in pieces that fit its ints, each
 * accumulated over the pieces of K (beta on the first only). */
static void gemm_block(const gemm_job *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    const blob__host_gemm *h = &g->h;
    const int64_t c = blob__blas_chunk;
    for (int64_t i = i0; i < i1; i += c)
        for (int64_t j = j0; j < j1; j += c)
            for (int64_t k = 0; k < h->K; k += c)
                BLAS(h->dtype, gemm, CblasRowMajor, cblas_trans(h->trans_a),
                     cblas_trans(h->trans_b), piece(i1, i), piece(j1, j), piece(h->K, k), g->alpha,
                     at(h->dtype, h->A, h->trans_a ? k * h->lda + i : i * h->lda + k), (int)h->lda,
                     at(h->dtype, h->B, h->trans_b ? j * h->ldb + k : k * h->ldb + j), (int)h->ldb,
                     k ? 1.0 : g->beta, at(h->dtype, h->C, i * h->N + j), (int)h->N);
}

static void gemm_blocks(void *ctx, int64_t lo, int64_t hi)
{
    const gemm_job *g = ctx;
    for (int64_t b = lo; b < hi; b++) {
        int64_t i0, i1, j0, j1;
        blob__host_gemm_block(&g->h, b, &i0, &i1, &j0, &j1);
        gemm_block(g, i0, i1, j0, j1);
        if (g->after)
            g->after(g->after_ctx, i0, i1, j0, j1);
    }
}

blob_status blob__cpu_gemm_blocks(blob_dtype dtype, blob_trans trans_a, blob_trans trans_b,
                                  int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                                  const void *B, double beta, void *C, int64_t rows, int64_t cols,
                                  blob__gemm_block_fn after, void *after_ctx)
{
    static const char fn[] = "blob_cpu_gemm";
    gemm_job g = {
        {dtype, trans_a, trans_b, M, N, K, trans_a ? M : K, trans_b ? K : N, rows, cols, A, B, C},
        alpha,
        beta,
        after,
        after_ctx};
    BLOB_TRY(check_ld(fn, "A", g.h.lda));
    BLOB_TRY(check_ld(fn, "B", g.h.ldb));
    BLOB_TRY(check_ld(fn, "C", N));
    const int64_t blocks = blob__host_gemm_blocks(&g.h);
    blob__host_for((int)blocks, blocks, gemm_blocks, &g);
    return BLOB_OK;
}

blob_status blob_cpu_gemm(blob_dtype dtype, blob_trans trans_a, blob_trans trans_b, int64_t M,
                          int64_t N, int64_t K, double alpha, const void *A, const void *B,
                          double beta, void *C)
{
    BLOB_TRY(check_gemm(__func__, dtype, trans_a, trans_b, M, N, K, A, B, C));
    if (M == 0 || N == 0)
        return BLOB_OK;
    if (K == 0)
        return scale_empty(false, dtype, M * N, beta, C);
    if (is_half(dtype))
        return blob__cpu_gemm16(__func__, dtype, trans_a, trans_b, M, N, K, alpha, A, B, beta, C,
                                BLOB_EPILOGUE_NONE, NULL, NULL);
    int64_t rows, cols;
    blob__gemm_grid(M, N, K, blob_dtype_size(dtype), false, &rows, &cols);
    return blob__cpu_gemm_blocks(dtype, trans_a, trans_b, M, N, K, alpha, A, B, beta, C, rows, cols,
                                 NULL, NULL);
}

blob_status blob_gpu_gemm(blob_dtype dtype, blob_trans trans_a, blob_trans trans_b, int64_t M,
                          int64_t N, int64_t K, double alpha, const void *A, const void *B,
                          double beta, void *C)
{
    BLOB_TRY(check_gemm(__func__, dtype, trans_a, trans_b, M, N, K, A, B, C));
    blob_math_mode mode;
    BLOB_TRY(blob__math_mode_for(__func__, dtype, BLOB_MATH_DEFAULT, &mode));
    BLOB_TRY(blob__require_gpu(__func__));
    if (M == 0 || N == 0)
        return BLOB_OK;
    if (K == 0)
        return scale_empty(true, dtype, M * N, beta, C);
    if (is_half(dtype)) { /* cuBLASLt, its plans cached, tuned and replayed */
        bool tuning;
        BLOB_TRY(blob__gemm_tuning(__func__, &tuning));
        return blob__k_gemm_epilogue(blob_stream_get(), dtype, mode, trans_a, trans_b, M, N, K,
                                     alpha, A, B, beta, C, BLOB_EPILOGUE_NONE, NULL, NULL, tuning);
    }
    if (mode != BLOB_MATH_FP32)
        return blob__k_gemm_mode(blob_stream_get(), mode, trans_a, trans_b, M, N, K, alpha, A, B,
                                 beta, C);
    return blob__k_gemm(blob_stream_get(), dtype, trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
}

typedef struct {
    blob_dtype dtype;
    blob_trans trans_a;
    int64_t N, red; /* A's row length; the length of x */
    double alpha, beta;
    const void *A, *x;
    void *y;
} gemv_job;

/* y's elements [o0, o1), in pieces, each accumulated over the pieces of x (beta on the
 * first only). */
static void gemv_range(void *ctx, int64_t o0, int64_t o1)
{
    const gemv_job *g = ctx;
    const int64_t c = blob__blas_chunk, N = g->N, red = g->red;
    const bool t = g->trans_a == BLOB_TRANS;
    for (int64_t o = o0; o < o1; o += c)
        for (int64_t r = 0; r < red; r += c)
            BLAS(g->dtype, gemv, CblasRowMajor, cblas_trans(g->trans_a),
                 t ? piece(red, r) : piece(o1, o), t ? piece(o1, o) : piece(red, r), g->alpha,
                 at(g->dtype, g->A, t ? r * N + o : o * N + r), (int)N, at(g->dtype, g->x, r), 1,
                 r ? 1.0 : g->beta, at(g->dtype, g->y, o), 1);
}

blob_status blob_cpu_gemv(blob_dtype dtype, blob_trans trans_a, int64_t M, int64_t N, double alpha,
                          const void *A, const void *x, double beta, void *y)
{
    BLOB_TRY(check_gemv(__func__, dtype, trans_a, M, N, A, x, y));
    int64_t out = trans_a ? N : M, red = trans_a ? M : N;
    if (out == 0)
        return BLOB_OK;
    if (red == 0)
        return scale_empty(false, dtype, out, beta, y);
    BLOB_TRY(check_ld(__func__, "A", N));
    gemv_job g = {dtype, trans_a, N, red, alpha, beta, A, x, y};
    blob__host_for(blob__host_threads(M * N), out, gemv_range, &g);
    return BLOB_OK;
}

blob_status blob_gpu_gemv(blob_dtype dtype, blob_trans trans_a, int64_t M, int64_t N, double alpha,
                          const void *A, const void *x, double beta, void *y)
{
    BLOB_TRY(check_gemv(__func__, dtype, trans_a, M, N, A, x, y));
    BLOB_TRY(blob__require_gpu(__func__));
    int64_t out = trans_a ? N : M, red = trans_a ? M : N;
    if (out == 0)
        return BLOB_OK;
    if (red == 0)
        return scale_empty(true, dtype, out, beta, y);
    return blob__k_gemv(blob_stream_get(), dtype, trans_a, M, N, alpha, A, x, beta, y);
}

blob_status blob_cpu_axpy(blob_dtype dtype, int64_t n, double alpha, const void *x, void *y)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, x, y));
    vec_run(VEC_AXPY, dtype, n, alpha, x, 0, y);
    return BLOB_OK;
}

blob_status blob_gpu_axpy(blob_dtype dtype, int64_t n, double alpha, const void *x, void *y)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, x, y));
    BLOB_TRY(blob__require_gpu(__func__));
    return is_half(dtype) ? blob__k_half_axpy(blob_stream_get(), dtype, n, alpha, x, y)
                          : blob__k_axpy(blob_stream_get(), dtype, n, alpha, x, y);
}

blob_status blob_cpu_axpby(blob_dtype dtype, int64_t n, double alpha, const void *x, double beta,
                           void *y)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, x, y));
    vec_run(VEC_AXPBY, dtype, n, alpha, x, beta, y);
    return BLOB_OK;
}

blob_status blob_gpu_axpby(blob_dtype dtype, int64_t n, double alpha, const void *x, double beta,
                           void *y)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, x, y));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_axpby(blob_stream_get(), dtype, n, alpha, x, beta, y);
}

blob_status blob_cpu_scal(blob_dtype dtype, int64_t n, double alpha, void *x)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, x));
    vec_run(VEC_SCAL, dtype, n, alpha, NULL, 0, x);
    return BLOB_OK;
}

blob_status blob_gpu_scal(blob_dtype dtype, int64_t n, double alpha, void *x)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, x));
    BLOB_TRY(blob__require_gpu(__func__));
    return is_half(dtype) ? blob__k_half_scal(blob_stream_get(), dtype, n, alpha, x)
                          : blob__k_scal(blob_stream_get(), dtype, n, alpha, x);
}

blob_status blob_cpu_dot(blob_dtype dtype, int64_t n, const void *x, const void *y, double *out)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, x, y));
    BLOB_TRY(check_out(__func__, out));
    *out = vec_run(VEC_DOT, dtype, n, 0, x, 0, (void *)y);
    return BLOB_OK;
}

blob_status blob_gpu_dot(blob_dtype dtype, int64_t n, const void *x, const void *y, double *out)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, x, y));
    BLOB_TRY(check_out(__func__, out));
    BLOB_TRY(blob__require_gpu(__func__));
    return is_half(dtype) ? blob__k_half_dot(blob_stream_get(), dtype, n, x, y, out)
                          : blob__k_dot(blob_stream_get(), dtype, n, x, y, out);
}

blob_status blob_cpu_asum(blob_dtype dtype, int64_t n, const void *x, double *out)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, x));
    BLOB_TRY(check_out(__func__, out));
    *out = vec_run(VEC_ASUM, dtype, n, 0, x, 0, NULL);
    return BLOB_OK;
}

blob_status blob_gpu_asum(blob_dtype dtype, int64_t n, const void *x, double *out)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, x));
    BLOB_TRY(check_out(__func__, out));
    BLOB_TRY(blob__require_gpu(__func__));
    return is_half(dtype) ? blob__k_half_asum(blob_stream_get(), dtype, n, x, out)
                          : blob__k_asum(blob_stream_get(), dtype, n, x, out);
}

blob_status blob_cpu_copy(blob_dtype dtype, int64_t n, const void *x, void *y)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_ANY, dtype, n, x, y));
    vec_run(VEC_COPY, dtype, n, 0, x, 0, y);
    return BLOB_OK;
}

blob_status blob_gpu_copy(blob_dtype dtype, int64_t n, const void *x, void *y)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_ANY, dtype, n, x, y));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_copy(blob_stream_get(), dtype, n, x, y);
}

blob_status blob_cpu_set(blob_dtype dtype, int64_t n, double alpha, void *y)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, y));
    cpu_set(dtype, n, alpha, y);
    return BLOB_OK;
}

blob_status blob_gpu_set(blob_dtype dtype, int64_t n, double alpha, void *y)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, y));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_set(blob_stream_get(), dtype, n, alpha, y);
}

blob_status blob_cpu_add_scalar(blob_dtype dtype, int64_t n, double alpha, void *y)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, y));
    if (is_half(dtype)) {
        for (int64_t i = 0; i < n; i++)
            blob__elem_set(dtype, y, i, (float)blob__elem_get(dtype, y, i) + (float)alpha);
        return BLOB_OK;
    }
    TYPED(dtype, T *p = y; for (int64_t i = 0; i < n; i++) p[i] += (T)alpha;);
    return BLOB_OK;
}

blob_status blob_gpu_add_scalar(blob_dtype dtype, int64_t n, double alpha, void *y)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, y));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_add_scalar(blob_stream_get(), dtype, n, alpha, y);
}

blob_status blob_cpu_mul(blob_dtype dtype, int64_t n, const void *a, const void *b, void *y)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, a, b, y));
    if (is_half(dtype)) {
        for (int64_t i = 0; i < n; i++)
            blob__elem_set(dtype, y, i,
                           (float)blob__elem_get(dtype, a, i) * (float)blob__elem_get(dtype, b, i));
        return BLOB_OK;
    }
    TYPED(dtype, const T *pa = a; const T *pb = b; T *py = y;
          for (int64_t i = 0; i < n; i++) py[i] = pa[i] * pb[i];);
    return BLOB_OK;
}

blob_status blob_gpu_mul(blob_dtype dtype, int64_t n, const void *a, const void *b, void *y)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, a, b, y));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_mul(blob_stream_get(), dtype, n, a, b, y);
}

/* The host loops that run on the library's host threads (blob__host_for): their
 * arguments, and the range [lo, hi) of iterations each body does. */
typedef struct {
    blob_dtype dtype, label_dtype;
    int64_t classes;
    double scale;
    const void *a, *b, *labels;
    void *y, *z, *w;
} loop_args;

/* y = a > 0 ? b : 0: the ReLU's backward (a = x, b = dy), and its forward with b = a = x.
 * On 16-bit floats it compares the exact value and copies the element's bits (or writes
 * +0), as the kernels do. */
static void relu_range(void *args, int64_t lo, int64_t hi)
{
    const loop_args *l = args;
    if (is_half(l->dtype)) {
        const uint16_t *pb = l->b;
        uint16_t *py = l->y;
        for (int64_t i = lo; i < hi; i++)
            py[i] = blob__elem_get(l->dtype, l->a, i) > 0 ? pb[i] : 0;
        return;
    }
    TYPED(l->dtype, const T *pa = l->a; const T *pb = l->b; T *py = l->y;
          for (int64_t i = lo; i < hi; i++) py[i] = pa[i] > 0 ? pb[i] : 0;);
}

/* Rows [lo, hi) of softmax with loss (logits a, prob y, loss z), and with w its
 * gradient (dlogits w, from the prob just written). */
static void softmax_loss_forward_range(void *args, int64_t lo, int64_t hi)
{
    const loop_args *l = args;
    const blob_dtype dtype = l->dtype;
    const int64_t classes = l->classes;
    TYPED(
        dtype, T *loss = l->z; const T tiny = dtype == BLOB_FLOAT32 ? FLT_MIN : DBL_MIN;
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
    TYPED(
        l->dtype, for (int64_t r = lo; r < hi; r++) {
            const T *p = (const T *)l->a + r * classes;
            T *d = (T *)l->y + r * classes;
            int64_t k = label_index(get(l->dtype, l->labels, r), classes);
            for (int64_t j = 0; j < classes; j++)
                d[j] = (T)(l->scale * (p[j] - (j == k)));
        });
}

/* Rows [lo, hi) of the mixed softmax with loss (logits a, prob y, float32 loss z, and
 * with w the gradient), in float32 with float64 sums. */
static void softmax_mixed_range(void *args, int64_t lo, int64_t hi)
{
    const loop_args *l = args;
    const blob_dtype dt = l->dtype;
    const int64_t classes = l->classes;
    float *loss = l->z;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t row = r * classes;
        float m = -INFINITY;
        for (int64_t j = 0; j < classes; j++) {
            const float x = (float)blob__elem_get(dt, l->a, row + j);
            m = x > m ? x : m;
        }
        double sum = 0;
        for (int64_t j = 0; j < classes; j++)
            sum += expf((float)blob__elem_get(dt, l->a, row + j) - m);
        const int64_t k = label_index(label_at(l->label_dtype, l->labels, r), classes);
        for (int64_t j = 0; j < classes; j++) {
            const float q = (float)(expf((float)blob__elem_get(dt, l->a, row + j) - m) / sum);
            blob__elem_set(dt, l->y, row + j, q);
            if (j == k)
                loss[r] = -logf(q > FLT_MIN ? q : FLT_MIN);
            if (l->w)
                blob__elem_set(dt, l->w, row + j, (float)l->scale * (q - (j == k)));
        }
    }
}

static void softmax_backward_mixed_range(void *args, int64_t lo, int64_t hi)
{
    const loop_args *l = args;
    const int64_t classes = l->classes;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t k = label_index(label_at(l->label_dtype, l->labels, r), classes);
        for (int64_t j = r * classes; j < (r + 1) * classes; j++)
            blob__elem_set(l->dtype, l->y, j,
                           (float)l->scale *
                               ((float)blob__elem_get(l->dtype, l->a, j) - (j - r * classes == k)));
    }
}

/* Runs range over the rows of a softmax with loss on the host threads: in (logits or
 * prob) and labels of label_dtype read, y, z and w written as the range says. */
static void softmax_rows_on_host(void (*range)(void *, int64_t, int64_t), blob_dtype dtype,
                                 blob_dtype label_dtype, int64_t rows, int64_t classes,
                                 double scale, const void *in, const void *labels, void *y, void *z,
                                 void *w)
{
    loop_args l = {.dtype = dtype,
                   .label_dtype = label_dtype,
                   .classes = classes,
                   .scale = scale,
                   .a = in,
                   .labels = labels,
                   .y = y,
                   .z = z,
                   .w = w};
    blob__host_for(blob__host_threads(rows * classes), rows, range, &l);
}

blob_status blob_cpu_relu_forward(blob_dtype dtype, int64_t n, const void *x, void *y)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, x, y));
    loop_args l = {.dtype = dtype, .a = x, .b = x, .y = y};
    blob__host_for(blob__host_threads(n), n, relu_range, &l);
    return BLOB_OK;
}

blob_status blob_gpu_relu_forward(blob_dtype dtype, int64_t n, const void *x, void *y)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, x, y));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_relu_forward(blob_stream_get(), dtype, n, x, y);
}

blob_status blob_cpu_relu_backward(blob_dtype dtype, int64_t n, const void *x, const void *dy,
                                   void *dx)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, x, dy, dx));
    loop_args l = {.dtype = dtype, .a = x, .b = dy, .y = dx};
    blob__host_for(blob__host_threads(n), n, relu_range, &l);
    return BLOB_OK;
}

blob_status blob_gpu_relu_backward(blob_dtype dtype, int64_t n, const void *x, const void *dy,
                                   void *dx)
{
    BLOB_TRY(CHECK_VEC_OF(TAKES_HALF, dtype, n, x, dy, dx));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_relu_backward(blob_stream_get(), dtype, n, x, dy, dx);
}

/* On the host a bad label fails the call before anything is written. */
blob_status blob_cpu_softmax_loss_forward(blob_dtype dtype, int64_t rows, int64_t classes,
                                          const void *logits, const void *labels, void *prob,
                                          void *loss)
{
    BLOB_TRY(CHECK_SOFTMAX_OF(dtype, rows, classes, logits, labels, prob, loss));
    BLOB_TRY(check_labels(__func__, dtype, rows, classes, labels));
    softmax_rows_on_host(softmax_loss_forward_range, dtype, dtype, rows, classes, 0, logits, labels,
                         prob, loss, NULL);
    return BLOB_OK;
}

blob_status blob_gpu_softmax_loss_forward(blob_dtype dtype, int64_t rows, int64_t classes,
                                          const void *logits, const void *labels, void *prob,
                                          void *loss)
{
    BLOB_TRY(CHECK_SOFTMAX_OF(dtype, rows, classes, logits, labels, prob, loss));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_softmax_loss_forward(blob_stream_get(), dtype, rows, classes, logits, labels,
                                        prob, loss);
}

blob_status blob_cpu_softmax_loss_backward(blob_dtype dtype, int64_t rows, int64_t classes,
                                           const void *prob, const void *labels, double scale,
                                           void *dlogits)
{
    BLOB_TRY(CHECK_SOFTMAX_OF(dtype, rows, classes, prob, labels, dlogits));
    BLOB_TRY(check_labels(__func__, dtype, rows, classes, labels));
    softmax_rows_on_host(softmax_loss_backward_range, dtype, dtype, rows, classes, scale, prob,
                         labels, dlogits, NULL, NULL);
    return BLOB_OK;
}

blob_status blob_gpu_softmax_loss_backward(blob_dtype dtype, int64_t rows, int64_t classes,
                                           const void *prob, const void *labels, double scale,
                                           void *dlogits)
{
    BLOB_TRY(CHECK_SOFTMAX_OF(dtype, rows, classes, prob, labels, dlogits));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_softmax_loss_backward(blob_stream_get(), dtype, rows, classes, prob, labels,
                                         scale, dlogits);
}

blob_status blob_cpu_softmax_loss_forward_backward(blob_dtype dtype, int64_t rows, int64_t classes,
                                                   const void *logits, const void *labels,
                                                   double scale, void *prob, void *loss,
                                                   void *dlogits)
{
    BLOB_TRY(CHECK_SOFTMAX_OF(dtype, rows, classes, logits, labels, prob, loss, dlogits));
    BLOB_TRY(check_labels(__func__, dtype, rows, classes, labels));
    softmax_rows_on_host(softmax_loss_forward_range, dtype, dtype, rows, classes, scale, logits,
                         labels, prob, loss, dlogits);
    return BLOB_OK;
}

blob_status blob_gpu_softmax_loss_forward_backward(blob_dtype dtype, int64_t rows, int64_t classes,
                                                   const void *logits, const void *labels,
                                                   double scale, void *prob, void *loss,
                                                   void *dlogits)
{
    BLOB_TRY(CHECK_SOFTMAX_OF(dtype, rows, classes, logits, labels, prob, loss, dlogits));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_softmax_loss_forward_backward(blob_stream_get(), dtype, rows, classes, logits,
                                                 labels, scale, prob, loss, dlogits);
}

blob_status blob_cpu_softmax_loss_mixed(blob_dtype dtype, blob_dtype label_dtype, int64_t rows,
                                        int64_t classes, const void *logits, const void *labels,
                                        double scale, void *prob, float *loss, void *dlogits)
{
    BLOB_TRY(check_mixed_softmax(__func__, dtype, label_dtype, rows, classes,
                                 "logits, labels, prob, loss", logits, labels, prob, loss));
    BLOB_TRY(check_labels(__func__, label_dtype, rows, classes, labels));
    softmax_rows_on_host(softmax_mixed_range, dtype, label_dtype, rows, classes, scale, logits,
                         labels, prob, loss, dlogits);
    return BLOB_OK;
}

blob_status blob_gpu_softmax_loss_mixed(blob_dtype dtype, blob_dtype label_dtype, int64_t rows,
                                        int64_t classes, const void *logits, const void *labels,
                                        double scale, void *prob, float *loss, void *dlogits)
{
    BLOB_TRY(check_mixed_softmax(__func__, dtype, label_dtype, rows, classes,
                                 "logits, labels, prob, loss", logits, labels, prob, loss));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_softmax_loss_mixed(blob_stream_get(), dtype, label_dtype, rows, classes, logits,
                                      labels, scale, prob, loss, dlogits);
}

blob_status blob_cpu_softmax_loss_backward_mixed(blob_dtype dtype, blob_dtype label_dtype,
                                                 int64_t rows, int64_t classes, const void *prob,
                                                 const void *labels, double scale, void *dlogits)
{
    BLOB_TRY(check_mixed_softmax(__func__, dtype, label_dtype, rows, classes,
                                 "prob, labels, dlogits", prob, labels, dlogits, NULL));
    BLOB_TRY(check_labels(__func__, label_dtype, rows, classes, labels));
    softmax_rows_on_host(softmax_backward_mixed_range, dtype, label_dtype, rows, classes, scale,
                         prob, labels, dlogits, NULL, NULL);
    return BLOB_OK;
}

blob_status blob_gpu_softmax_loss_backward_mixed(blob_dtype dtype, blob_dtype label_dtype,
                                                 int64_t rows, int64_t classes, const void *prob,
                                                 const void *labels, double scale, void *dlogits)
{
    BLOB_TRY(check_mixed_softmax(__func__, dtype, label_dtype, rows, classes,
                                 "prob, labels, dlogits", prob, labels, dlogits, NULL));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_softmax_loss_backward_mixed(blob_stream_get(), dtype, label_dtype, rows, classes,
                                               prob, labels, scale, dlogits);
}

/* ---- blob_*_convert ---- */

typedef struct {
    blob_dtype from, to;
    const void *x;
    void *y;
} convert_job;

static void convert_range(void *ctx, int64_t lo, int64_t hi)
{
    const convert_job *c = ctx;
    for (int64_t i = lo; i < hi; i++)
        blob__elem_set(c->to, c->y, i, blob__elem_get(c->from, c->x, i));
}

/* Both dtypes are float dtypes, n >= 0, and x and y are given for n > 0. */
static blob_status check_convert(const char *fn, blob_dtype from, blob_dtype to, int64_t n,
                                 const void *x, const void *y)
{
    const blob_dtype dts[2] = {from, to};
    for (int i = 0; i < 2; i++) {
        if (!blob_dtype_size(dts[i]))
            return blob__fail(BLOB_EINVAL, fn, "bad dtype %d", (int)dts[i]);
        if (!blob_dtype_is_float(dts[i]))
            return blob__fail(BLOB_ENOTSUP, fn,
                              "%s is not a float dtype: only float64, "
                              "float32, bfloat16 and float16 convert",
                              blob_dtype_name(dts[i]));
    }
    BLOB_TRY(blob__check_array(fn, from, n, "x", x));
    return blob__check_array(fn, to, n, "y", y);
}

blob_status blob_cpu_convert(blob_dtype from, blob_dtype to, int64_t n, const void *x, void *y)
{
    BLOB_TRY(check_convert(__func__, from, to, n, x, y));
    if (from == to) {
        if (n && x != y)
            memcpy(y, x, (size_t)n * blob_dtype_size(to));
        return BLOB_OK;
    }
    convert_job c = {from, to, x, y};
    blob__host_for(blob__host_threads(n), n, convert_range, &c);
    return BLOB_OK;
}

blob_status blob_gpu_convert(blob_dtype from, blob_dtype to, int64_t n, const void *x, void *y)
{
    BLOB_TRY(check_convert(__func__, from, to, n, x, y));
    BLOB_TRY(blob__require_gpu(__func__));
    if (from == to)
        return blob__k_copy(blob_stream_get(), to, n, x, y);
    return blob__k_convert(blob_stream_get(), from, to, n, x, y);
}

/* ---- The checks above, for the other math files ---- */

blob_status blob__check_gemm(const char *fn, blob_dtype dtype, blob_trans trans_a,
                             blob_trans trans_b, int64_t M, int64_t N, int64_t K, const void *A,
                             const void *B, const void *C)
{
    return check_gemm(fn, dtype, trans_a, trans_b, M, N, K, A, B, C);
}

blob_status blob__check_dtype(const char *fn, blob_dtype dtype) { return check_dtype(fn, dtype); }

blob_status blob__check_float_dtype(const char *fn, blob_dtype dtype)
{
    return check_dtype_taken(fn, TAKES_HALF, dtype);
}

blob_status blob__check_array(const char *fn, blob_dtype dtype, int64_t n, const char *name,
                              const void *p)
{
    if (n < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative size %lld of %s", (long long)n, name);
    BLOB_TRY(check_count(fn, dtype, 1, n));
    return check_ptr(fn, name, p, n);
}

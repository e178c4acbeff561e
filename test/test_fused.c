/* GEMM with fused epilogues and the math modes: the host reference against direct loops
 * in double, the GPU side against the same loops in every mode (within the mode's
 * tolerance), the mask layout of both sides, graph capture, the plain GEMM in the
 * tensor-core modes, the mode setting and its environment variable, the host BLAS's
 * description and its core switch, the host threads of the loops, and exact error codes. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/core/core.h"
#include "../src/kernels/kernels.h"
#include "testutil.h"

static const char *const epi_names[] = {"NONE",  "BIAS",        "RELU",   "BIAS_RELU",
                                        "DRELU", "DRELU_BGRAD", "BGRADA", "BGRADB"};

/* ---- Memory of a side: host malloc, or device memory of the real backend ---- */

static void *side_alloc(bool gpu, size_t bytes)
{
    void *p = NULL;
    if (!bytes)
        return NULL;
    if (gpu)
        ck_ok(blob__be->device_alloc(bytes, &p));
    else
        ck_assert_ptr_nonnull(p = aligned_alloc(64, (bytes + 63) / 64 * 64));
    return p;
}

static void side_free(bool gpu, void *p)
{
    if (gpu)
        blob__be->device_free(p);
    else
        free(p);
}

static void *side_copy(bool gpu, const void *host, size_t bytes)
{
    void *p = side_alloc(gpu, bytes);
    if (!bytes)
        return NULL;
    if (!gpu) {
        memcpy(p, host, bytes);
        return p;
    }
    ck_ok(blob__be->copy_async(p, host, bytes, BLOB__H2D, blob_stream_get()));
    ck_ok(blob__be->stream_synchronize(blob_stream_get()));
    return p;
}

static void side_read(bool gpu, void *host, const void *p, size_t bytes)
{
    if (!bytes)
        return;
    if (!gpu) {
        memcpy(host, p, bytes);
        return;
    }
    ck_ok(blob__be->copy_async(host, p, bytes, BLOB__D2H, blob_stream_get()));
    ck_ok(blob__be->stream_synchronize(blob_stream_get()));
}

/* ---- The reference ---- */

/* Relative tolerance, against sum_k |a_ik b_kj|, of a product of K terms in a mode. */
static double mode_tol(blob_dtype dt, blob_math_mode mode, bool gpu, int64_t K)
{
    if (mode == BLOB_MATH_DEFAULT)
        mode = blob_math_mode_get();
    double exact = 4 * (dt == BLOB_FLOAT32 ? FLT_EPSILON : DBL_EPSILON) * (double)(K + 2);
    if (!gpu || dt == BLOB_FLOAT64 || mode == BLOB_MATH_FP32)
        return exact;
    /* inputs rounded to 10 (TF32) or 7 (bfloat16) mantissa bits, either way */
    return exact + (mode == BLOB_MATH_TF32 ? 4.0 / 1024 : 4.0 / 128);
}

typedef struct {
    blob_dtype dt;
    blob_trans ta, tb;
    int64_t M, N, K;
    blob_epilogue e;
    bool with_mask;
} problem;

static bool reads_bias(blob_epilogue e)
{
    return e == BLOB_EPILOGUE_BIAS || e == BLOB_EPILOGUE_BIAS_RELU;
}

static bool is_relu(blob_epilogue e)
{
    return e == BLOB_EPILOGUE_RELU || e == BLOB_EPILOGUE_BIAS_RELU;
}

static bool is_drelu(blob_epilogue e)
{
    return e == BLOB_EPILOGUE_DRELU || e == BLOB_EPILOGUE_DRELU_BGRAD;
}

static int64_t bias_len(const problem *p)
{
    if (reads_bias(p->e) || p->e == BLOB_EPILOGUE_DRELU_BGRAD || p->e == BLOB_EPILOGUE_BGRADB)
        return p->N;
    return p->e == BLOB_EPILOGUE_BGRADA ? p->M : 0;
}

static bool bit(const unsigned char *mask, int64_t N, int64_t i, int64_t j)
{
    const int64_t b = i * BLOB_RELU_MASK_ROW_BITS(N) + j;
    return (mask[b / 8] >> (b % 8)) & 1;
}

/* Run problem p on one side in `mode` and compare everything it writes with loops in
 * double over the same inputs. */
static void check(const problem *p, bool gpu, blob_math_mode mode)
{
    const blob_dtype dt = p->dt;
    const size_t es = blob_dtype_size(dt);
    const int64_t M = p->M, N = p->N, K = p->K, nb = bias_len(p);
    const size_t mbytes = blob_relu_mask_bytes(M, N);
    const bool uses_mask = is_drelu(p->e) || (is_relu(p->e) && p->with_mask);
    void *hA = malloc((size_t)(M * K) * es + 8), *hB = malloc((size_t)(K * N) * es + 8);
    void *hC = malloc((size_t)(M * N) * es + 8), *hbias = malloc((size_t)nb * es + 8);
    unsigned char *hmask = malloc(mbytes + 16);
    test_fill(dt, hA, M * K, -1, 1);
    test_fill(dt, hB, K * N, -1, 1);
    test_fill(dt, hbias, nb, -1, 1);
    for (size_t i = 0; i < mbytes; i++)
        hmask[i] = (unsigned char)test_uniform(0, 256);
    if (dt == BLOB_FLOAT32)
        for (int64_t i = 0; i < M * N; i++)
            ((float *)hC)[i] = NAN; /* C is never read */
    else
        for (int64_t i = 0; i < M * N; i++)
            ((double *)hC)[i] = NAN;
    unsigned char *mask_in = malloc(mbytes + 16); /* the inputs, kept for the reference */
    memcpy(mask_in, hmask, mbytes);
    const unsigned char *in_mask = mask_in;
    void *bias_in = malloc((size_t)nb * es + 8);
    memcpy(bias_in, hbias, (size_t)nb * es);

    /* the product, its scale sum |a||b|, and the expected outputs */
    double *P = calloc((size_t)(M * N) + 1, sizeof(double));
    double *S = calloc((size_t)(M * N) + 1, sizeof(double));
    double *eb = calloc((size_t)nb + 1, sizeof(double));
    double *ebs = calloc((size_t)nb + 1, sizeof(double));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            for (int64_t k = 0; k < K; k++) {
                double a = test_get(dt, hA, p->ta ? k * M + i : i * K + k);
                double b = test_get(dt, hB, p->tb ? j * K + k : k * N + j);
                P[i * N + j] += a * b;
                S[i * N + j] += fabs(a * b);
            }

    void *dA = side_copy(gpu, hA, (size_t)(M * K) * es);
    void *dB = side_copy(gpu, hB, (size_t)(K * N) * es);
    void *dC = side_copy(gpu, hC, (size_t)(M * N) * es);
    void *dbias = side_copy(gpu, hbias, (size_t)nb * es);
    void *dmask = side_copy(gpu, hmask, mbytes);
    blob_status st = (gpu ? blob_gpu_gemm_epilogue : blob_cpu_gemm_epilogue)(
        dt, p->ta, p->tb, M, N, K, dA, dB, dC, p->e, nb ? dbias : NULL, uses_mask ? dmask : NULL,
        mode);
    ck_assert_msg(st == BLOB_OK, "%s %s %s %lldx%lldx%lld %c%c: %s", gpu ? "gpu" : "cpu",
                  epi_names[p->e], blob_math_mode_name(mode), (long long)M, (long long)N,
                  (long long)K, p->ta ? 'T' : 'N', p->tb ? 'T' : 'N', blob_last_error());
    side_read(gpu, hC, dC, (size_t)(M * N) * es);
    side_read(gpu, hbias, dbias, (size_t)nb * es);
    side_read(gpu, hmask, dmask, mbytes);

    const double t = mode_tol(dt, mode, gpu, K);
    char what[160];
    snprintf(what, sizeof what, "%s %s %s%s mode %s, %lldx%lldx%lld %c%c", gpu ? "gpu" : "cpu",
             test_dtype_name(dt), epi_names[p->e], p->with_mask && is_relu(p->e) ? "+mask" : "",
             blob_math_mode_name(mode), (long long)M, (long long)N, (long long)K, p->ta ? 'T' : 'N',
             p->tb ? 'T' : 'N');
    int bad = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            const int64_t ij = i * N + j;
            double v = P[ij], band = t * (S[ij] + 1e-30);
            if (reads_bias(p->e)) {
                v += test_get(dt, bias_in, j);
                band += t * fabs(test_get(dt, bias_in, j));
            }
            if (is_drelu(p->e) && !bit(in_mask, N, i, j))
                v = 0;
            const double got = test_get(dt, hC, ij);
            bool ok;
            if (is_relu(p->e) && fabs(v) <= band) /* either side of 0 within rounding */
                ok = got >= 0 && got <= 2 * band;
            else if (is_relu(p->e))
                ok = fabs(got - (v > 0 ? v : 0)) <= band &&
                     (!p->with_mask || bit(hmask, N, i, j) == (v > 0));
            else
                ok = fabs(got - v) <= band;
            if (!ok && bad++ < 5)
                fprintf(stderr, "%s: C[%lld,%lld] = %.9g, expected %.9g (band %.3g)%s\n", what,
                        (long long)i, (long long)j, got, is_relu(p->e) && v < 0 ? 0 : v, band,
                        p->with_mask && is_relu(p->e) ? (bit(hmask, N, i, j) ? " bit 1" : " bit 0")
                                                      : "");
            if (p->e == BLOB_EPILOGUE_DRELU_BGRAD) {
                eb[j] += is_drelu(p->e) && !bit(in_mask, N, i, j) ? 0 : P[ij];
                ebs[j] += is_drelu(p->e) && !bit(in_mask, N, i, j) ? 0 : S[ij];
            }
        }
    if (p->e == BLOB_EPILOGUE_BGRADA || p->e == BLOB_EPILOGUE_BGRADB)
        for (int64_t o = 0; o < nb; o++)
            for (int64_t k = 0; k < K; k++) {
                double x = p->e == BLOB_EPILOGUE_BGRADA
                               ? test_get(dt, hA, p->ta ? k * M + o : o * K + k)
                               : test_get(dt, hB, p->tb ? o * K + k : k * N + o);
                eb[o] += x;
                ebs[o] += fabs(x);
            }
    if (nb && !reads_bias(p->e))
        for (int64_t o = 0; o < nb; o++) {
            const double got = test_get(dt, hbias, o), band = t * (ebs[o] + 1e-30);
            if (!(fabs(got - eb[o]) <= band) && bad++ < 10)
                fprintf(stderr, "%s: bias[%lld] = %.9g, expected %.9g (band %.3g)\n", what,
                        (long long)o, got, eb[o], band);
        }
    if (is_drelu(p->e)) /* the mask is only read, and so is the bias of BIAS */
        ck_assert_msg(!memcmp(hmask, mask_in, mbytes), "%s: the mask was written", what);
    if (reads_bias(p->e))
        ck_assert_msg(!memcmp(hbias, bias_in, (size_t)nb * es), "%s: the bias was written", what);
    ck_assert_msg(bad == 0, "%s: %d values differ (see above)", what, bad);

    side_free(gpu, dA);
    side_free(gpu, dB);
    side_free(gpu, dC);
    side_free(gpu, dbias);
    side_free(gpu, dmask);
    free(hA), free(hB), free(hC), free(hbias), free(hmask), free(mask_in), free(bias_in);
    free(P), free(S), free(eb), free(ebs);
}

/* Every epilogue (ReLUs with and without mask) over shapes with odd sizes, empty ones,
 * the MLP's, and ones whose host loops take several threads; every transpose. */
static void check_all(blob_dtype dt, bool gpu, blob_math_mode mode)
{
    static const int64_t shapes[][3] = {{1, 1, 1},      {5, 7, 3},     {17, 130, 19}, {33, 2, 40},
                                        {64, 256, 300}, {3, 129, 0},   {0, 5, 3},     {4, 0, 3},
                                        {300, 2100, 3}, {2, 3, 300000}};
    test_seed(777 + (uint64_t)dt * 10 + (uint64_t)mode);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int e = 0; e <= BLOB_EPILOGUE_BGRADB; e++)
                for (int m = 0; m < (is_relu((blob_epilogue)e) ? 2 : 1); m++) {
                    problem p = {
                        dt,           (blob_trans)(t & 1), (blob_trans)(t >> 1), shapes[s][0],
                        shapes[s][1], shapes[s][2],        (blob_epilogue)e,     m == 1};
                    check(&p, gpu, mode);
                }
}

/* ---- Host ---- */

/* The host is exact whatever mode it is asked for. */
START_TEST(test_cpu_epilogues)
{
    check_all((blob_dtype)(_i / 2), false, _i % 2 ? BLOB_MATH_BF16 : BLOB_MATH_DEFAULT);
}
END_TEST

/* With 7 host threads the products are cut into blocks, each with its epilogue run by
 * the thread that computed it: the same results. */
START_TEST(test_cpu_epilogues_threaded)
{
    blob_blas_info info;
    ck_ok(blob_blas_get_info(&info));
    ck_ok(blob_host_threads_set(7));
    check_all((blob_dtype)_i, false, BLOB_MATH_DEFAULT);
    ck_ok(blob_host_threads_set(info.threads));
}
END_TEST

/* Bits past N in a mask row are unspecified, and the mask row length is N rounded up
 * to 128 bits: 16 bytes per 128 columns. */
START_TEST(test_mask_bytes)
{
    ck_assert_uint_eq(blob_relu_mask_bytes(0, 5), 0);
    ck_assert_uint_eq(blob_relu_mask_bytes(3, 0), 0);
    ck_assert_uint_eq(blob_relu_mask_bytes(1, 1), 16);
    ck_assert_uint_eq(blob_relu_mask_bytes(64, 256), 64 * 32);
    ck_assert_uint_eq(blob_relu_mask_bytes(2, 129), 2 * 32);
    ck_assert_uint_eq(blob_relu_mask_bytes(-1, 5), 0);
    ck_assert_uint_eq(blob_relu_mask_bytes(5, -1), 0);
    ck_assert_uint_eq(blob_relu_mask_bytes(INT64_MAX, 1000), 0);
    ck_assert_uint_eq(blob_relu_mask_bytes(1, INT64_MAX), 0);
    ck_assert_int_eq(BLOB_RELU_MASK_ROW_BITS(10), 128);
    ck_assert_int_eq(BLOB_RELU_MASK_ROW_BITS(256), 256);
}
END_TEST

/* Off by default, on from the environment's BLOB_GEMM_TUNING=1, and set by the call. */
START_TEST(test_gemm_tuning_setting)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("BLOB_GEMM_TUNING", "1", 1);
        int ok = blob_gemm_tuning_get();
        blob_gemm_tuning_set(false);
        ok &= !blob_gemm_tuning_get();
        _exit(ok ? 0 : 1);
    }
    int status = -1;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "BLOB_GEMM_TUNING=1 not seen");
    ck_assert(!blob_gemm_tuning_get());
    blob_gemm_tuning_set(true);
    ck_assert(blob_gemm_tuning_get());
    blob_gemm_tuning_set(false);
    ck_assert(!blob_gemm_tuning_get());
}
END_TEST

/* Exact codes and details, the same on both sides, checked before a GPU is looked for. */
START_TEST(test_epilogue_bad_arguments)
{
    const bool gpu = _i;
    __typeof__(blob_cpu_gemm_epilogue) *f = gpu ? blob_gpu_gemm_epilogue : blob_cpu_gemm_epilogue;
    const char *name = gpu ? "blob_gpu_gemm_epilogue" : "blob_cpu_gemm_epilogue";
    static _Alignas(16) double buf[512];
    void *b = buf, *odd = (char *)buf + 8;
    const blob_trans n = BLOB_NO_TRANS;
    ck_status(f((blob_dtype)7, n, n, 2, 2, 2, b, b, b, BLOB_EPILOGUE_NONE, NULL, NULL, 0),
              BLOB_EINVAL);
    ck_assert_msg(strstr(blob_last_error(), name), "%s", blob_last_error());
    ck_status(
        f(BLOB_FLOAT32, (blob_trans)3, n, 2, 2, 2, b, b, b, BLOB_EPILOGUE_NONE, NULL, NULL, 0),
        BLOB_EINVAL);
    ck_status(f(BLOB_FLOAT32, n, n, -1, 2, 2, b, b, b, BLOB_EPILOGUE_NONE, NULL, NULL, 0),
              BLOB_EINVAL);
    ck_status(
        f(BLOB_FLOAT32, n, n, INT64_MAX / 2, 2, 4, b, b, b, BLOB_EPILOGUE_NONE, NULL, NULL, 0),
        BLOB_EOVERFLOW);
    ck_status(f(BLOB_FLOAT32, n, n, 2, 2, 2, NULL, b, b, BLOB_EPILOGUE_NONE, NULL, NULL, 0),
              BLOB_EINVAL);
    ck_assert(strstr(blob_last_error(), "A is NULL"));
    ck_status(f(BLOB_FLOAT32, n, n, 2, 2, 2, b, NULL, b, BLOB_EPILOGUE_NONE, NULL, NULL, 0),
              BLOB_EINVAL);
    ck_status(f(BLOB_FLOAT32, n, n, 2, 2, 2, b, b, NULL, BLOB_EPILOGUE_NONE, NULL, NULL, 0),
              BLOB_EINVAL);
    ck_status(f(BLOB_FLOAT32, n, n, 2, 2, 2, b, b, b, (blob_epilogue)8, NULL, NULL, 0),
              BLOB_EINVAL);
    ck_assert(strstr(blob_last_error(), "bad epilogue"));
    ck_status(f(BLOB_FLOAT32, n, n, 2, 2, 2, b, b, b, (blob_epilogue)-1, NULL, NULL, 0),
              BLOB_EINVAL);
    ck_status(
        f(BLOB_FLOAT32, n, n, 2, 2, 2, b, b, b, BLOB_EPILOGUE_NONE, NULL, NULL, (blob_math_mode)4),
        BLOB_EINVAL);
    ck_assert(strstr(blob_last_error(), "bad math mode"));
    for (int e = BLOB_EPILOGUE_BIAS; e <= BLOB_EPILOGUE_BGRADB; e++) {
        if (e == BLOB_EPILOGUE_RELU || e == BLOB_EPILOGUE_DRELU)
            continue;
        ck_status(f(BLOB_FLOAT32, n, n, 2, 2, 2, b, b, b, (blob_epilogue)e, NULL, b, 0),
                  BLOB_EINVAL);
        ck_assert_msg(strstr(blob_last_error(), "bias is NULL"), "%s", blob_last_error());
    }
    for (int e = BLOB_EPILOGUE_DRELU; e <= BLOB_EPILOGUE_DRELU_BGRAD; e++) {
        ck_status(f(BLOB_FLOAT32, n, n, 2, 2, 2, b, b, b, (blob_epilogue)e, b, NULL, 0),
                  BLOB_EINVAL);
        ck_assert_msg(strstr(blob_last_error(), "mask is NULL"), "%s", blob_last_error());
    }
    for (int e = BLOB_EPILOGUE_RELU; e <= BLOB_EPILOGUE_DRELU_BGRAD; e++) {
        ck_status(f(BLOB_FLOAT32, n, n, 2, 2, 2, b, b, b, (blob_epilogue)e, b, odd, 0),
                  BLOB_EINVAL);
        ck_assert_msg(strstr(blob_last_error(), "16-byte"), "%s", blob_last_error());
    }
    ck_status(
        f(BLOB_FLOAT32, n, n, (int64_t)1 << 60, 1, 0, b, b, b, BLOB_EPILOGUE_RELU, NULL, b, 0),
        BLOB_EOVERFLOW);
    bool fused = true;
    ck_status(blob_gpu_gemm_epilogue_fused(BLOB_FLOAT32, n, n, 2, 2, 2, BLOB_EPILOGUE_NONE, false,
                                           0, NULL),
              BLOB_EINVAL);
    ck_status(blob_gpu_gemm_epilogue_fused(BLOB_FLOAT32, n, n, 2, 2, 2, (blob_epilogue)9, false, 0,
                                           &fused),
              BLOB_EINVAL);
    ck_assert(!fused);
}
END_TEST

/* Arrays an epilogue does not use may be NULL, and empty problems need no arrays. */
START_TEST(test_epilogue_unused_null)
{
    float A[6] = {1, -2, 3, -4, 5, -6}, B[6] = {1, 1, 1, 1, 1, 1}, C[4];
    ck_ok(blob_cpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 3, A, B, C,
                                 BLOB_EPILOGUE_RELU, NULL, NULL, BLOB_MATH_DEFAULT));
    ck_assert_float_eq(C[0], 2);
    ck_assert_float_eq(C[2], 0);
    ck_ok(blob_cpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 0, 0, 3, NULL, NULL,
                                 NULL, BLOB_EPILOGUE_DRELU_BGRAD, NULL, NULL, 0));
    blob_status expected = blob_device_count() > 0 ? BLOB_OK : BLOB_ENODEV;
    ck_status(blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 0, 0, 3, NULL,
                                     NULL, NULL, BLOB_EPILOGUE_BGRADA, NULL, NULL, 0),
              expected);
}
END_TEST

/* The mode setting, its names, and BLOB_MATH_MODE read on first use (in a fresh child). */
START_TEST(test_math_mode_setting)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("BLOB_MATH_MODE", "TF32", 1);
        int ok = blob_math_mode_get() == BLOB_MATH_TF32;
        ok &=
            blob_math_mode_set(BLOB_MATH_BF16) == BLOB_OK && blob_math_mode_get() == BLOB_MATH_BF16;
        ok &= blob_math_mode_set(BLOB_MATH_DEFAULT) == BLOB_OK &&
              blob_math_mode_get() == BLOB_MATH_TF32; /* back to the environment's */
        _exit(ok ? 0 : 1);
    }
    int status = -1;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "BLOB_MATH_MODE=TF32 not seen");

    ck_status(blob_math_mode_set((blob_math_mode)4), BLOB_EINVAL);
    ck_status(blob_math_mode_set((blob_math_mode)-1), BLOB_EINVAL);
    ck_ok(blob_math_mode_set(BLOB_MATH_TF32));
    ck_assert_int_eq(blob_math_mode_get(), BLOB_MATH_TF32);
    ck_ok(blob_math_mode_set(BLOB_MATH_FP32));
    ck_assert_int_eq(blob_math_mode_get(), BLOB_MATH_FP32);
    ck_ok(blob_math_mode_set(BLOB_MATH_DEFAULT));
    ck_assert_str_eq(blob_math_mode_name(BLOB_MATH_DEFAULT), "default");
    ck_assert_str_eq(blob_math_mode_name(BLOB_MATH_FP32), "fp32");
    ck_assert_str_eq(blob_math_mode_name(BLOB_MATH_TF32), "tf32");
    ck_assert_str_eq(blob_math_mode_name(BLOB_MATH_BF16), "bf16");
    ck_assert_str_eq(blob_math_mode_name((blob_math_mode)9), "unknown");
}
END_TEST

/* ---- The host BLAS ---- */

extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

/* Make OpenBLAS run `core`, as if it had chosen it at load time. */
static void force_core(const char *core)
{
    setenv("OPENBLAS_CORETYPE", core, 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
}

/* The name blob_blas_get_info gives the BLAS this build chose (the Makefile's BLAS). */
#if defined(BLOB_BLAS_BLIS)
#define BUILD_BLAS "BLIS "
#elif defined(BLOB_BLAS_MKL)
#define BUILD_BLAS "MKL "
#else
#define BUILD_BLAS "OpenBLAS "
#endif

/* A small product through the BLAS, checked. */
static void check_blas_product(void)
{
    float A[4 * 3], B[3 * 5], C[4 * 5];
    for (int i = 0; i < 12; i++)
        A[i] = (float)(i % 5) - 2;
    for (int i = 0; i < 15; i++)
        B[i] = (float)(i % 3) + 0.5f;
    ck_ok(blob_cpu_gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 4, 5, 3, 1, A, B, 0, C));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++) {
            float s = 0;
            for (int k = 0; k < 3; k++)
                s += A[i * 3 + k] * B[k * 5 + j];
            ck_assert_float_eq_tol(C[i * 5 + j], s, 1e-5);
        }
}

START_TEST(test_blas_info)
{
    blob_blas_info info;
    ck_status(blob_blas_get_info(NULL), BLOB_EINVAL);
    ck_ok(blob_blas_get_info(&info));
    ck_assert_int_ge(info.threads, 1);
    ck_assert(strlen(info.summary) > 0);
    ck_assert_msg(strstr(info.summary, info.name), "%s", info.summary);
    printf("host BLAS: %s\n", info.summary);
    ck_assert_msg(!strncmp(info.name, BUILD_BLAS, strlen(BUILD_BLAS)), "%s", info.name);
    check_blas_product();
    if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit) {
        printf("note: test_blas_info: not OpenBLAS with a runtime core choice, switch untested\n");
        return;
    }

    /* a generic core chosen by OpenBLAS itself: switched on a CPU with AVX2 or AVX-512 */
    force_core("Prescott");
    blob__blas_select_core(NULL);
    ck_ok(blob_blas_get_info(&info));
    printf("host BLAS after a generic core: %s\n", info.summary);
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        ck_assert_str_eq(info.detected, "Prescott");
        ck_assert_msg(strcmp(info.core, "Prescott"), "core %s", info.core);
        ck_assert_msg(strstr(info.summary, "Prescott -> "), "%s", info.summary);
        ck_assert_msg(!getenv("OPENBLAS_CORETYPE"), "the variable was left set");
    }
    check_blas_product();

    /* the user's own choice stays */
    force_core("Prescott");
    blob__blas_select_core("Prescott");
    ck_ok(blob_blas_get_info(&info));
    ck_assert_str_eq(info.core, "Prescott");
    ck_assert_str_eq(info.detected, "");
    ck_assert_msg(strstr(info.summary, "set by OPENBLAS_CORETYPE"), "%s", info.summary);
    check_blas_product();
}
END_TEST

/* ---- The host threads ---- */

static void mark(void *ctx, int64_t lo, int64_t hi)
{
    _Atomic int *hits = ctx;
    for (int64_t i = lo; i < hi; i++)
        atomic_fetch_add(&hits[i], 1);
}

/* Rounds of loops of varying sizes and thread counts; every index done exactly once. */
static void *pool_rounds(void *arg)
{
    const int seed = (int)(intptr_t)arg;
    static _Atomic int hits[2][5000];
    _Atomic int *h = hits[seed];
    for (int round = 0; round < 300; round++) {
        const int nt = 1 + (round + seed) % 9;
        const int64_t n = round % 17 == 0 ? round % 3 : 1000 + 13 * round % 4000;
        for (int64_t i = 0; i < n; i++)
            atomic_store(&h[i], 0);
        blob__host_for(nt, n, mark, h);
        for (int64_t i = 0; i < n; i++)
            if (atomic_load(&h[i]) != 1)
                return (void *)(intptr_t)(1 + i);
    }
    return NULL;
}

START_TEST(test_host_threads)
{
    ck_assert_ptr_null(pool_rounds((void *)0));
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, pool_rounds, (void *)1), 0);
    void *other = pool_rounds((void *)0); /* two threads share the workers */
    void *mine;
    ck_assert_int_eq(pthread_join(t, &mine), 0);
    ck_assert_ptr_null(other);
    ck_assert_ptr_null(mine);
    ck_assert_int_eq(blob__host_threads(1000), 1);
    ck_assert_int_ge(blob__host_threads((int64_t)1 << 30), 1);
}
END_TEST

/* ---- Without a GPU ---- */

START_TEST(test_epilogue_without_gpu)
{
    static _Alignas(16) float buf[64];
    test_hide_gpus();
    bool fused = true;
    ck_status(blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, buf, buf,
                                     buf, BLOB_EPILOGUE_BIAS_RELU, buf, buf, 0),
              BLOB_ENODEV);
    ck_assert(strstr(blob_last_error(), "no GPU"));
    ck_status(blob_gpu_gemm_epilogue_fused(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2,
                                           BLOB_EPILOGUE_NONE, false, 0, &fused),
              BLOB_ENODEV);
    ck_assert(!fused);
    test_show_gpus();
}
END_TEST

/* In a CPU-only build the launchers refuse even when a (fake) GPU is seen. */
START_TEST(test_epilogue_launchers_without_cuda)
{
    static _Alignas(16) float buf[64];
    bool fused;
    ck_status(blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, buf, buf,
                                     buf, BLOB_EPILOGUE_NONE, NULL, NULL, 0),
              BLOB_ENODEV);
    ck_assert_msg(strstr(blob_last_error(), "built without CUDA"), "%s", blob_last_error());
    ck_status(blob_gpu_gemm_epilogue_fused(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2,
                                           BLOB_EPILOGUE_NONE, false, 0, &fused),
              BLOB_ENODEV);
    ck_status(blob_math_mode_set(BLOB_MATH_TF32), BLOB_OK);
    ck_status(
        blob_gpu_gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, 1, buf, buf, 0, buf),
        BLOB_ENODEV);
    ck_ok(blob_math_mode_set(BLOB_MATH_DEFAULT));
}
END_TEST

/* ---- Real GPU ---- */

static const blob_math_mode gpu_modes[] = {BLOB_MATH_FP32, BLOB_MATH_TF32, BLOB_MATH_BF16};

/* Which epilogues cuBLASLt fuses at the MLP's shapes, printed for the record. */
static void print_fused(blob_math_mode mode)
{
    static const int64_t shapes[][3] = {{64, 256, 784}, {256, 128, 256}, {512, 4096, 4096}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        char line[256];
        int len = snprintf(
            line, sizeof line, "fused in %s at %lldx%lldx%lld (NT):", blob_math_mode_name(mode),
            (long long)shapes[s][0], (long long)shapes[s][1], (long long)shapes[s][2]);
        for (int e = 0; e <= BLOB_EPILOGUE_BGRADB; e++) {
            bool fused = false;
            ck_ok(blob_gpu_gemm_epilogue_fused(
                BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_TRANS, shapes[s][0], shapes[s][1], shapes[s][2],
                (blob_epilogue)e, is_relu((blob_epilogue)e), mode, &fused));
            len += snprintf(line + len, sizeof line - (size_t)len, " %s %s", epi_names[e],
                            fused ? "yes" : "no");
        }
        printf("%s\n", line);
    }
}

/* _i: float32 in FP32, TF32 and BF16, then float64 (asking for TF32, which it ignores). */
START_TEST(test_gpu_epilogues)
{
    const blob_dtype dt = _i < 3 ? BLOB_FLOAT32 : BLOB_FLOAT64;
    const blob_math_mode mode = gpu_modes[_i < 3 ? _i : 1];
    check_all(dt, true, mode);
    if (dt == BLOB_FLOAT32) /* after the calls: a plan refused at launch says so */
        print_fused(mode);
}
END_TEST

/* The process-wide mode reaches the plain GEMM and the epilogues' DEFAULT. */
START_TEST(test_gpu_global_mode)
{
    const blob_math_mode mode = gpu_modes[_i];
    ck_ok(blob_math_mode_set(mode));
    test_seed(99 + (uint64_t)_i);
    for (int t = 0; t < 4; t++) {
        problem p = {BLOB_FLOAT32,
                     (blob_trans)(t & 1),
                     (blob_trans)(t >> 1),
                     96,
                     200,
                     513,
                     BLOB_EPILOGUE_BIAS_RELU,
                     true};
        check(&p, true, BLOB_MATH_DEFAULT); /* the tolerance is the global mode's */
    }
    /* plain gemm: C = 0.5 * op(A) op(B) - 2 * C */
    const int64_t M = 64, N = 96, K = 1024;
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
    float *C = malloc(sizeof(float) * M * N);
    test_fill(BLOB_FLOAT32, A, M * K, -1, 1);
    test_fill(BLOB_FLOAT32, B, K * N, -1, 1);
    test_fill(BLOB_FLOAT32, C, M * N, -1, 1);
    void *dA = side_copy(true, A, sizeof(float) * M * K);
    void *dB = side_copy(true, B, sizeof(float) * K * N);
    void *dC = side_copy(true, C, sizeof(float) * M * N);
    ck_ok(blob_gpu_gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, M, N, K, 0.5, dA, dB, -2, dC));
    float *got = malloc(sizeof(float) * M * N);
    side_read(true, got, dC, sizeof(float) * M * N);
    double worst = 0, t = mode_tol(BLOB_FLOAT32, mode, true, K);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, sa = 0;
            for (int64_t k = 0; k < K; k++) {
                s += (double)A[i * K + k] * B[k * N + j];
                sa += fabs((double)A[i * K + k] * B[k * N + j]);
            }
            double e = fabs(got[i * N + j] - (0.5 * s - 2 * C[i * N + j])) / (0.5 * sa + 2);
            worst = e > worst ? e : worst;
        }
    printf("plain gemm in %s: relative error %.3g (tolerance %.3g)\n", blob_math_mode_name(mode),
           worst, t);
    ck_assert_msg(worst <= t, "plain gemm in %s: relative error %g > %g", blob_math_mode_name(mode),
                  worst, t);
    side_free(true, dA);
    side_free(true, dB);
    side_free(true, dC);
    free(A), free(B), free(C), free(got);
    ck_ok(blob_math_mode_set(BLOB_MATH_DEFAULT));
}
END_TEST

/* Column sums of a dtype's kernel against the host's in double: each within the sum's
 * own rounding (float32 accumulation over rows terms) and one rounding to the dtype. */
static void check_col_sums(blob_dtype dt, const void *got, const double *sum, const double *abs_sum,
                           int64_t n, int64_t rows, const char *what)
{
    const double acc = dt == BLOB_FLOAT64 ? DBL_EPSILON : FLT_EPSILON;
    for (int64_t j = 0; j < n; j++) {
        const double tol = (test_eps(dt) + (double)rows * acc) * abs_sum[j] + DBL_MIN;
        const double v = test_get(dt, got, j);
        ck_assert_msg(fabs(v - sum[j]) <= tol,
                      "%s, %s: sum %lld is %.9g, not %.9g (tolerance %.3g)", what,
                      test_dtype_name(dt), (long long)j, v, sum[j], tol);
    }
}

/* The library's epilogue kernels (blob__k_epilogue_apply), which the GEMM runs where
 * cuBLASLt does not fuse or was timed slower, on every float dtype. DRELU and DRELU_BGRAD
 * on rows of whole 16-byte vectors, rows at odd element offsets and short tails: a masked
 * entry becomes +0 and every other keeps its bits (the elements before C too), and the
 * bias gradient sums the columns kept. BGRADA of a transposed A: the column sums of a
 * narrow (10 classes) and a wide A. */
static const blob_dtype kernel_dtypes[] = {BLOB_FLOAT32, BLOB_FLOAT64, BLOB_BFLOAT16, BLOB_FLOAT16};

START_TEST(test_gpu_drelu_kernels)
{
    static const int64_t shapes[][3] = {/* M, N, C's offset in elements */
                                        {37, 64, 0}, {3, 4096, 0}, {5, 10, 0},
                                        {9, 20, 0},  {7, 24, 1},   {300, 136, 3}};
    const blob_dtype dt = kernel_dtypes[_i / 2];
    const blob_epilogue e = _i % 2 ? BLOB_EPILOGUE_DRELU_BGRAD : BLOB_EPILOGUE_DRELU;
    test_seed(77 + (uint64_t)_i);
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const int64_t M = shapes[k][0], N = shapes[k][1], off = shapes[k][2];
        const size_t es = blob_dtype_size(dt), cbytes = (size_t)(M * N + off) * es;
        const size_t mbytes = blob_relu_mask_bytes(M, N);
        const int64_t row_bits = BLOB_RELU_MASK_ROW_BITS(N);
        unsigned char *c = malloc(cbytes), *mask = malloc(mbytes), *got = malloc(cbytes);
        void *bias = malloc((size_t)N * es);
        double *sum = calloc((size_t)N, sizeof *sum), *abs_sum = calloc((size_t)N, sizeof *abs_sum);
        test_fill(dt, c, M * N + off, -1, 1);
        for (size_t b = 0; b < mbytes; b++)
            mask[b] = (unsigned char)test_uniform(0, 256);
        mask[0] = 0xFF; /* a group kept whole, and one dropped whole */
        mask[row_bits / 8 * (M - 1)] = 0;
        void *dc = side_copy(true, c, cbytes), *dmask = side_copy(true, mask, mbytes);
        void *dbias = side_alloc(true, (size_t)N * es);
        ck_ok(blob__k_epilogue_apply(__func__, blob_stream_get(), dt, BLOB_NO_TRANS, BLOB_NO_TRANS,
                                     M, N, 1, NULL, NULL, (char *)dc + (size_t)off * es, e,
                                     e == BLOB_EPILOGUE_DRELU_BGRAD ? dbias : NULL, dmask));
        side_read(true, got, dc, cbytes);
        if (e == BLOB_EPILOGUE_DRELU_BGRAD)
            side_read(true, bias, dbias, (size_t)N * es);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                const int64_t bit = i * row_bits + j, at = off + i * N + j;
                if (!((mask[bit / 8] >> (bit % 8)) & 1))
                    memset(c + (size_t)at * es, 0, es);
                sum[j] += test_get(dt, c, at);
                abs_sum[j] += fabs(test_get(dt, c, at));
            }
        char what[96];
        snprintf(what, sizeof what, "%s kernel, %lld x %lld at offset %lld", epi_names[e],
                 (long long)M, (long long)N, (long long)off);
        ck_assert_msg(!memcmp(c, got, cbytes), "%s, %s: C differs", what, test_dtype_name(dt));
        if (e == BLOB_EPILOGUE_DRELU_BGRAD)
            check_col_sums(dt, bias, sum, abs_sum, N, M, what);
        side_free(true, dc);
        side_free(true, dmask);
        side_free(true, dbias);
        free(c), free(mask), free(got), free(bias), free(sum), free(abs_sum);
    }
}
END_TEST

START_TEST(test_gpu_bgrad_kernel)
{
    static const int64_t shapes[][2] = {{512, 10}, {64, 4096}, {1000, 3}, {7, 33}}; /* K, M */
    const blob_dtype dt = kernel_dtypes[_i];
    test_seed(91 + (uint64_t)_i);
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const int64_t K = shapes[k][0], M = shapes[k][1];
        const size_t es = blob_dtype_size(dt);
        void *a = malloc((size_t)(K * M) * es), *bias = malloc((size_t)M * es);
        double *sum = calloc((size_t)M, sizeof *sum), *abs_sum = calloc((size_t)M, sizeof *abs_sum);
        test_fill(dt, a, K * M, -1, 1);
        for (int64_t i = 0; i < K; i++)
            for (int64_t j = 0; j < M; j++) {
                sum[j] += test_get(dt, a, i * M + j);
                abs_sum[j] += fabs(test_get(dt, a, i * M + j));
            }
        void *da = side_copy(true, a, (size_t)(K * M) * es);
        void *dbias = side_alloc(true, (size_t)M * es), *dc = side_alloc(true, (size_t)M * es);
        /* op(A) = A^T is M x K: C (M x 1) is the product, untouched; bias sums over K */
        ck_ok(blob__k_epilogue_apply(__func__, blob_stream_get(), dt, BLOB_TRANS, BLOB_NO_TRANS, M,
                                     1, K, da, dc, dc, BLOB_EPILOGUE_BGRADA, dbias, NULL));
        side_read(true, bias, dbias, (size_t)M * es);
        char what[64];
        snprintf(what, sizeof what, "BGRADA kernel, A^T of %lld x %lld", (long long)K,
                 (long long)M);
        check_col_sums(dt, bias, sum, abs_sum, M, K, what);
        side_free(true, da);
        side_free(true, dbias);
        side_free(true, dc);
        free(a), free(bias), free(sum), free(abs_sum);
    }
}
END_TEST

/* With tuning, every epilogue and transpose at the MLP's first layer (where K is split)
 * and at odd sizes, in FP32 and TF32: the timed algorithms compute what the loops do.
 * Then a problem met first inside a capture: the replay, and the call after it that
 * times the candidates, both agree with the loops. */
START_TEST(test_gpu_gemm_tuning)
{
    static const int64_t shapes[][3] = {{64, 256, 784}, {17, 130, 19}};
    blob_gemm_tuning_set(true);
    test_seed(2024);
    for (int mode = BLOB_MATH_FP32; mode <= BLOB_MATH_TF32; mode++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int t = 0; t < 4; t++)
                for (int e = 0; e <= BLOB_EPILOGUE_BGRADB; e++) {
                    problem p = {BLOB_FLOAT32,         (blob_trans)(t & 1),
                                 (blob_trans)(t >> 1), shapes[s][0],
                                 shapes[s][1],         shapes[s][2],
                                 (blob_epilogue)e,     is_relu((blob_epilogue)e)};
                    check(&p, true, (blob_math_mode)mode);
                }

    const int64_t M = 33, N = 65, K = 300;
    const size_t f = sizeof(float);
    float *A = malloc(f * M * K), *B = malloc(f * N * K), *bias = malloc(f * N);
    float *got = malloc(f * M * N);
    test_fill(BLOB_FLOAT32, A, M * K, -1, 1);
    test_fill(BLOB_FLOAT32, B, N * K, -1, 1);
    test_fill(BLOB_FLOAT32, bias, N, -1, 1);
    void *dA = side_copy(true, A, f * M * K), *dB = side_copy(true, B, f * N * K);
    void *dbias = side_copy(true, bias, f * N), *dC = side_alloc(true, f * M * N), *s;
    ck_ok(blob_stream_create(&s));
    blob_stream_set(s);
    ck_ok(blob_graph_begin(s));
    ck_ok(blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_TRANS, M, N, K, dA, dB, dC,
                                 BLOB_EPILOGUE_BIAS, dbias, NULL, BLOB_MATH_FP32));
    blob_graph *g;
    ck_ok(blob_graph_end(s, &g));
    for (int run = 0; run < 2; run++) {
        ck_ok(blob_gpu_set(BLOB_FLOAT32, M * N, -7.0, dC));
        if (run == 0)
            ck_ok(blob_graph_launch(g, s));
        else
            ck_ok(blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_TRANS, M, N, K, dA, dB,
                                         dC, BLOB_EPILOGUE_BIAS, dbias, NULL, BLOB_MATH_FP32));
        ck_ok(blob_stream_synchronize(s));
        side_read(true, got, dC, f * M * N);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double e = bias[j], sa = fabs(bias[j]);
                for (int64_t k = 0; k < K; k++) {
                    e += (double)A[i * K + k] * B[j * K + k];
                    sa += fabs((double)A[i * K + k] * B[j * K + k]);
                }
                ck_assert_msg(fabs(got[i * N + j] - e) <= 1e-5 * sa,
                              "%s: C[%lld,%lld] = %g, want %g", run ? "eager" : "replay",
                              (long long)i, (long long)j, got[i * N + j], e);
            }
    }
    blob_graph_free(g);
    blob_stream_set(NULL);
    ck_ok(blob_stream_destroy(s));
    side_free(true, dA), side_free(true, dB), side_free(true, dbias), side_free(true, dC);
    free(A), free(B), free(bias), free(got);
    blob_gemm_tuning_set(false);
}
END_TEST

/* A layer's forward and backward, captured in a graph on a stream and replayed: the same
 * results as eager calls, and as many kernels as the calls launch. */
START_TEST(test_gpu_epilogue_graph)
{
    const int64_t B = 64, I = 200, O = 130;
    const size_t f = sizeof(float);
    float *x = malloc(f * B * I), *w = malloc(f * O * I), *b = malloc(f * O);
    float *dy = malloc(f * B * O);
    test_seed(4242);
    test_fill(BLOB_FLOAT32, x, B * I, -1, 1);
    test_fill(BLOB_FLOAT32, w, O * I, -1, 1);
    test_fill(BLOB_FLOAT32, b, O, -1, 1);
    test_fill(BLOB_FLOAT32, dy, B * O, -1, 1);
    void *s;
    ck_ok(blob_stream_create(&s));
    blob_stream_set(s);
    float *dx = side_copy(true, x, f * B * I), *dw = side_copy(true, w, f * O * I);
    float *db = side_copy(true, b, f * O), *ddy = side_copy(true, dy, f * B * O);
    const size_t mb = blob_relu_mask_bytes(B, O);
    float *y = side_alloc(true, f * B * O), *dz = side_alloc(true, f * B * I);
    float *gw = side_alloc(true, f * O * I), *gb = side_alloc(true, f * O);
    float *gb2 = side_alloc(true, f * I);
    void *mask = side_alloc(true, mb), *mask_i = side_alloc(true, blob_relu_mask_bytes(B, I));
    ck_ok(blob__be->memset_async(mask_i, 0x5a, blob_relu_mask_bytes(B, I), s));
    ck_ok(blob__be->memset_async(mask, 0, mb, s)); /* cuBLASLt reads the bytes it updates */
    /* y = relu(x w^T + b) with mask; dz = (dy w) masked by mask_i, gb2 its column sums;
     * gw = dy^T x with gb = the column sums of dy */
#define STEP()                                                                                     \
    do {                                                                                           \
        ck_ok(blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_TRANS, B, O, I, dx, dw, y,  \
                                     BLOB_EPILOGUE_BIAS_RELU, db, mask, 0));                       \
        ck_ok(blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, B, I, O, ddy, dw, \
                                     dz, BLOB_EPILOGUE_DRELU_BGRAD, gb2, mask_i, 0));              \
        ck_ok(blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_TRANS, BLOB_NO_TRANS, O, I, B, ddy, dx,    \
                                     gw, BLOB_EPILOGUE_BGRADA, gb, NULL, 0));                      \
    } while (0)
    STEP();
    const size_t sizes[] = {f * B * O, f * B * I, f * O * I, f * O, f * I, mb};
    void *outs[] = {y, dz, gw, gb, gb2, mask};
    void *eager[6];
    for (int k = 0; k < 6; k++) {
        eager[k] = malloc(sizes[k]);
        side_read(true, eager[k], outs[k], sizes[k]);
        ck_ok(blob__be->memset_async(outs[k], 0, sizes[k], s));
    }
    blob_graph *g;
    ck_ok(blob_graph_begin(s));
    STEP();
    ck_ok(blob_graph_end(s, &g));
    int64_t kernels = -1, total = -1;
    ck_ok(blob_graph_count_nodes(g, &kernels, &total));
    printf("layer forward + backward graph: %lld kernels, %lld nodes\n", (long long)kernels,
           (long long)total);
    ck_assert_int_ge(kernels, 3);
    ck_assert_int_ge(total, kernels);
    ck_status(blob_graph_count_nodes(g, NULL, &total), BLOB_EINVAL);
    ck_status(blob_graph_count_nodes(NULL, &kernels, &total), BLOB_EINVAL);
    for (int r = 0; r < 3; r++)
        ck_ok(blob_graph_launch(g, s));
    for (int k = 0; k < 6; k++) {
        void *got = malloc(sizes[k]);
        side_read(true, got, outs[k], sizes[k]);
        if (k < 5) {
            const float *a = got, *e = eager[k];
            for (size_t i = 0; i < sizes[k] / f; i++)
                ck_assert_msg(fabsf(a[i] - e[i]) <= 1e-5f * (1 + fabsf(e[i])),
                              "output %d [%zu]: replay %g, eager %g", k, i, a[i], e[i]);
        } else {
            for (int64_t i = 0; i < B; i++)
                for (int64_t j = 0; j < O; j++)
                    ck_assert(bit(got, O, i, j) == bit(eager[k], O, i, j));
        }
        free(got);
        free(eager[k]);
    }
#undef STEP
    blob_graph_free(g);
    void *bufs[] = {dx, dw, db, ddy, y, dz, gw, gb, gb2, mask, mask_i};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        side_free(true, bufs[k]);
    blob_stream_set(NULL);
    ck_ok(blob_stream_destroy(s));
    free(x), free(w), free(b), free(dy);
}
END_TEST

/* The same product launched again and again (cuBLASLt's launch is then replayed from a
 * graph), with new inputs each time, on two streams and under a capture: each result
 * equals the host's. */
START_TEST(test_gpu_epilogue_replay)
{
    const int64_t B = 64, I = 200, O = 130;
    const size_t f = sizeof(float), mb = blob_relu_mask_bytes(B, O);
    float *x = malloc(f * B * I), *w = malloc(f * O * I), *b = malloc(f * O);
    float *ref = malloc(f * B * O), *got = malloc(f * B * O);
    unsigned char *ref_mask = aligned_alloc(16, mb), *got_mask = malloc(mb);
    test_seed(777);
    test_fill(BLOB_FLOAT32, w, O * I, -1, 1);
    test_fill(BLOB_FLOAT32, b, O, -1, 1);
    void *s[2];
    ck_ok(blob_stream_create(&s[0]));
    ck_ok(blob_stream_create(&s[1]));
    blob_stream_set(s[0]);
    float *dx = side_alloc(true, f * B * I), *dw = side_copy(true, w, f * O * I);
    float *db = side_copy(true, b, f * O), *y = side_alloc(true, f * B * O);
    void *mask = side_alloc(true, mb);
    ck_ok(blob__be->memset_async(mask, 0, mb, s[0])); /* cuBLASLt reads the bytes it updates */
    for (int r = 0; r < 12; r++) {
        /* rounds 0-4 on one stream, 5-9 on the other, 10-11 captured and replayed */
        blob_stream_set(s[r >= 5 && r < 10]);
        test_fill(BLOB_FLOAT32, x, B * I, -1, 1);
        ck_ok(blob__be->copy_async(dx, x, f * B * I, BLOB__H2D, blob_stream_get()));
        ck_ok(blob_cpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_TRANS, B, O, I, x, w, ref,
                                     BLOB_EPILOGUE_BIAS_RELU, b, ref_mask, 0));
        if (r < 10) {
            ck_ok(blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_TRANS, B, O, I, dx, dw,
                                         y, BLOB_EPILOGUE_BIAS_RELU, db, mask, 0));
        } else {
            blob_graph *g;
            ck_ok(blob_graph_begin(blob_stream_get()));
            ck_ok(blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_TRANS, B, O, I, dx, dw,
                                         y, BLOB_EPILOGUE_BIAS_RELU, db, mask, 0));
            ck_ok(blob_graph_end(blob_stream_get(), &g));
            ck_ok(blob_graph_launch(g, blob_stream_get()));
            blob_graph_free(g);
        }
        side_read(true, got, y, f * B * O);
        side_read(true, got_mask, mask, mb);
        for (int64_t i = 0; i < B * O; i++)
            ck_assert_msg(fabsf(got[i] - ref[i]) <= 1e-5f * (1 + fabsf(ref[i])),
                          "round %d [%lld]: GPU %g, host %g", r, (long long)i, got[i], ref[i]);
        for (int64_t i = 0; i < B; i++)
            for (int64_t j = 0; j < O; j++)
                ck_assert(bit(got_mask, O, i, j) == bit(ref_mask, O, i, j));
    }
    void *bufs[] = {dx, dw, db, y, mask};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        side_free(true, bufs[k]);
    blob_stream_set(NULL);
    ck_ok(blob_stream_destroy(s[0]));
    ck_ok(blob_stream_destroy(s[1]));
    free(x), free(w), free(b), free(ref), free(got), free(ref_mask), free(got_mask);
}
END_TEST

void fused_suite(Suite *s)
{
    TCase *tc = suite_case(s, "host", NULL, 120, NULL, NULL);
    add_loop_tests(tc, 0, 4, test_cpu_epilogues);
    add_loop_tests(tc, 0, 2, test_cpu_epilogues_threaded);
    add_tests(tc, test_mask_bytes);
    add_loop_tests(tc, 0, 2, test_epilogue_bad_arguments);
    add_tests(tc, test_epilogue_unused_null, test_math_mode_setting, test_gemm_tuning_setting,
              test_blas_info, test_host_threads, test_epilogue_without_gpu);

    if (!blob_built_with_cuda())
        add_tests(suite_case(s, "no-cuda", NULL, 0, fake_setup, fake_teardown),
                  test_epilogue_launchers_without_cuda);

    tc = suite_case(s, "gpu", "gpu", 300, NULL, NULL);
    add_loop_tests(tc, 0, 4, test_gpu_epilogues);
    add_loop_tests(tc, 0, 3, test_gpu_global_mode);
    add_tests(tc, test_gpu_epilogue_graph, test_gpu_epilogue_replay, test_gpu_gemm_tuning);
    tc = suite_case(s, "gpu-kernels", "gpu", 120, NULL, NULL);
    add_loop_tests(tc, 0, 8, test_gpu_drelu_kernels);
    add_loop_tests(tc, 0, 4, test_gpu_bgrad_kernel);
}

/* GEMM and GEMM epilogues on bfloat16 and float16 with float32 accumulation: the host
 * path against a float64 reference, the GPU against the host path, every transposition,
 * odd sizes, alpha/beta variants and every epilogue; the errors of bad arguments (C left
 * as it was), and the other math calls refusing 16-bit and integer dtypes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/core.h"
#include "testutil.h"

static const int64_t sizes[] = {1, 7, 33, 257};

/* Unit roundoff of a 16-bit dtype (half its ulp at 1) and of float32. */
static double unit(blob_dtype dt) { return test_eps(dt) / 2; }
static const double U32 = 0x1p-24;

/* Half the spacing of a 16-bit dtype's subnormals: the absolute error of rounding there,
 * which a relative bound does not cover. */
static double tiny(blob_dtype dt) { return dt == BLOB_BFLOAT16 ? 0x1p-134 : 0x1p-25; }

typedef struct {
    blob_dtype dt;
    blob_trans ta, tb;
    int64_t M, N, K;
    double alpha, beta;
    bool epi; /* blob_*_gemm_epilogue (alpha 1, beta 0) rather than blob_*_gemm */
    blob_epilogue e;
} problem;

/* The inputs of a problem, in its dtype, and their values as doubles (exact). */
typedef struct {
    uint16_t *A, *B, *C, *bias;
    unsigned char *mask;
    double *a, *b, *c, *bv;
    int64_t nbias;
    size_t mbytes;
} inputs;

static bool bias_along_m(const problem *p) { return p->epi && p->e == BLOB_EPILOGUE_BGRADA; }

/* n random values in [-1, 1) of dt, never all 0, and their exact doubles. */
static uint16_t *random16(blob_dtype dt, int64_t n, double **values)
{
    float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
    uint16_t *h = malloc(2 * (size_t)(n ? n : 1));
    *values = malloc(sizeof(double) * (size_t)(n ? n : 1));
    ck_assert(f && h && *values);
    if (n)
        test_fill(BLOB_FLOAT32, f, n, -1, 1);
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, dt, n, f, h));
    ck_ok(blob_cpu_convert(dt, BLOB_FLOAT64, n, h, *values));
    free(f);
    return h;
}

static void make_inputs(const problem *p, inputs *in)
{
    in->A = random16(p->dt, p->M * p->K, &in->a);
    in->B = random16(p->dt, p->K * p->N, &in->b);
    in->C = random16(p->dt, p->M * p->N, &in->c);
    in->nbias = bias_along_m(p) ? p->M : p->N;
    in->bias = random16(p->dt, in->nbias, &in->bv);
    in->mbytes = blob_relu_mask_bytes(p->M, p->N);
    in->mask = aligned_alloc(16, (in->mbytes + 15) / 16 * 16 + 16);
    ck_assert_ptr_nonnull(in->mask);
    for (size_t i = 0; i < in->mbytes; i++)
        in->mask[i] = (unsigned char)(test_uniform(0, 256));
}

static void free_inputs(inputs *in)
{
    free(in->A), free(in->B), free(in->C), free(in->bias), free(in->mask);
    free(in->a), free(in->b), free(in->c), free(in->bv);
}

static bool bit(const unsigned char *mask, int64_t N, int64_t i, int64_t j)
{
    const int64_t b = i * BLOB_RELU_MASK_ROW_BITS(N) + j;
    return (mask[b / 8] >> (b % 8)) & 1;
}

/* op(A)[i,k] and op(B)[k,j] of the stored doubles. */
static double opa(const problem *p, const double *a, int64_t i, int64_t k)
{
    return p->ta ? a[k * p->M + i] : a[i * p->K + k];
}
static double opb(const problem *p, const double *b, int64_t k, int64_t j)
{
    return p->tb ? b[j * p->K + k] : b[k * p->N + j];
}

/* The outputs of a side, read back to the host. */
typedef struct {
    uint16_t *C, *bias;
    unsigned char *mask;
} outputs;

static void *to_side(bool gpu, const void *host, size_t bytes)
{
    if (!gpu || !bytes)
        return (void *)host;
    void *d;
    ck_ok(blob__be->device_alloc(bytes, &d));
    ck_ok(blob__be->copy_async(d, host, bytes, BLOB__H2D, blob_stream_get()));
    return d;
}

static void from_side(bool gpu, void *host, void *d, size_t bytes)
{
    if (!gpu || !bytes)
        return;
    ck_ok(blob__be->copy_async(host, d, bytes, BLOB__D2H, blob_stream_get()));
    ck_ok(blob__be->stream_synchronize(blob_stream_get()));
    blob__be->device_free(d);
}

/* Run the problem on a side from copies of the inputs. */
static void run(const problem *p, const inputs *in, bool gpu, outputs *out)
{
    const size_t cb = 2 * (size_t)(p->M * p->N), bb = 2 * (size_t)in->nbias;
    out->C = malloc(cb + 2);
    out->bias = malloc(bb + 2);
    out->mask = aligned_alloc(16, (in->mbytes + 15) / 16 * 16 + 16);
    ck_assert(out->C && out->bias && out->mask);
    memcpy(out->C, in->C, cb);
    memcpy(out->bias, in->bias, bb);
    memcpy(out->mask, in->mask, in->mbytes);
    void *A = to_side(gpu, in->A, 2 * (size_t)(p->M * p->K));
    void *B = to_side(gpu, in->B, 2 * (size_t)(p->K * p->N));
    void *C = to_side(gpu, out->C, cb);
    void *bias = to_side(gpu, out->bias, bb);
    void *mask = to_side(gpu, out->mask, in->mbytes);
    blob_status st = p->epi
                         ? (gpu ? blob_gpu_gemm_epilogue : blob_cpu_gemm_epilogue)(
                               p->dt, p->ta, p->tb, p->M, p->N, p->K, A, B, C, p->e, bias, mask, 0)
                         : (gpu ? blob_gpu_gemm : blob_cpu_gemm)(p->dt, p->ta, p->tb, p->M, p->N,
                                                                 p->K, p->alpha, A, B, p->beta, C);
    ck_assert_msg(st == BLOB_OK, "%s: %s", blob_status_name(st), blob_last_error());
    from_side(gpu, out->C, C, cb);
    from_side(gpu, out->bias, bias, bb);
    from_side(gpu, out->mask, mask, in->mbytes);
    if (gpu) {
        blob__be->device_free(A);
        blob__be->device_free(B);
    }
}

static void free_outputs(outputs *o) { free(o->C), free(o->bias), free(o->mask); }

static double val(blob_dtype dt, const uint16_t *h, int64_t i)
{
    double v;
    ck_ok(blob_cpu_convert(dt, BLOB_FLOAT64, 1, h + i, &v));
    return v;
}

static void describe(const problem *p, char *s, size_t n)
{
    snprintf(s, n, "%s %s%s %lldx%lldx%lld %c%c alpha %g beta %g", blob_dtype_name(p->dt),
             p->epi ? "epilogue " : "gemm",
             p->epi ? (const char *[]){"NONE", "BIAS", "RELU", "BIAS_RELU", "DRELU", "DRELU_BGRAD",
                                       "BGRADA", "BGRADB"}[p->e]
                    : "",
             (long long)p->M, (long long)p->N, (long long)p->K, p->ta ? 'T' : 'N',
             p->tb ? 'T' : 'N', p->alpha, p->beta);
}

/* The float64 reference of every output, and the magnitude each one's error scales with:
 * |alpha| sum_k |op(A) op(B)| + |beta C| (+ |bias|) for C; the sum of those of its column
 * for DRELU_BGRAD's bias, sum_k |op(A)[i,k]| or |op(B)[k,j]| for BGRADA / BGRADB's. The
 * pre-ReLU value is kept to tell which mask bits are decided. */
typedef struct {
    double *C, *scale, *pre, *bias, *bscale;
} reference;

static void make_reference(const problem *p, const inputs *in, reference *r)
{
    const int64_t M = p->M, N = p->N, K = p->K;
    const double alpha = p->epi ? 1 : p->alpha, beta = p->epi ? 0 : p->beta;
    r->C = calloc((size_t)(M * N + 1), sizeof(double));
    r->scale = calloc((size_t)(M * N + 1), sizeof(double));
    r->pre = calloc((size_t)(M * N + 1), sizeof(double));
    r->bias = calloc((size_t)(in->nbias + 1), sizeof(double));
    r->bscale = calloc((size_t)(in->nbias + 1), sizeof(double));
    const blob_epilogue e = p->epi ? p->e : BLOB_EPILOGUE_NONE;
    const bool add_bias = e == BLOB_EPILOGUE_BIAS || e == BLOB_EPILOGUE_BIAS_RELU;
    const bool relu = e == BLOB_EPILOGUE_RELU || e == BLOB_EPILOGUE_BIAS_RELU;
    const bool drelu = e == BLOB_EPILOGUE_DRELU || e == BLOB_EPILOGUE_DRELU_BGRAD;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, sa = 0;
            for (int64_t k = 0; k < K; k++) {
                const double t = opa(p, in->a, i, k) * opb(p, in->b, k, j);
                s += t;
                sa += fabs(t);
            }
            double v = alpha * s + (beta != 0 ? beta * in->c[i * N + j] : 0);
            double sc = fabs(alpha) * sa + (beta != 0 ? fabs(beta * in->c[i * N + j]) : 0);
            if (add_bias) {
                v += in->bv[j];
                sc += fabs(in->bv[j]);
            }
            r->pre[i * N + j] = v;
            if (relu)
                v = v > 0 ? v : 0;
            if (drelu && !bit(in->mask, N, i, j))
                v = sc = 0;
            r->C[i * N + j] = v;
            r->scale[i * N + j] = sc;
        }
    for (int64_t x = 0; x < in->nbias; x++) {
        double s = 0, sa = 0;
        if (e == BLOB_EPILOGUE_DRELU_BGRAD)
            for (int64_t i = 0; i < M; i++) {
                s += r->C[i * N + x];
                sa += r->scale[i * N + x];
            }
        else if (e == BLOB_EPILOGUE_BGRADA)
            for (int64_t k = 0; k < K; k++) {
                s += opa(p, in->a, x, k);
                sa += fabs(opa(p, in->a, x, k));
            }
        else if (e == BLOB_EPILOGUE_BGRADB)
            for (int64_t k = 0; k < K; k++) {
                s += opb(p, in->b, k, x);
                sa += fabs(opb(p, in->b, k, x));
            }
        else
            s = in->bv[x]; /* not written */
        r->bias[x] = s;
        r->bscale[x] = sa;
    }
}

static void free_reference(reference *r)
{
    free(r->C), free(r->scale), free(r->pre), free(r->bias), free(r->bscale);
}

/* Whether the outputs are within tol(magnitude, value) of the wanted values: C and bias
 * against `want` doubles (want_C, want_bias), and the mask bits of the ReLUs where the
 * pre-ReLU value is farther from 0 than C's tolerance. */
typedef double (*tolerance_fn)(blob_dtype dt, int64_t terms, double scale, double want);

static void compare(const problem *p, const inputs *in, const reference *r, const outputs *o,
                    const double *want_C, const double *want_bias, const unsigned char *want_mask,
                    tolerance_fn tol, const char *what)
{
    char d[160];
    describe(p, d, sizeof d);
    const int64_t M = p->M, N = p->N;
    const blob_epilogue e = p->epi ? p->e : BLOB_EPILOGUE_NONE;
    const bool relu = e == BLOB_EPILOGUE_RELU || e == BLOB_EPILOGUE_BIAS_RELU;
    const bool writes_bias =
        e == BLOB_EPILOGUE_DRELU_BGRAD || e == BLOB_EPILOGUE_BGRADA || e == BLOB_EPILOGUE_BGRADB;
    const int64_t terms = p->K + 2;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            const int64_t x = i * N + j;
            const double got = val(p->dt, o->C, x), t = tol(p->dt, terms, r->scale[x], want_C[x]);
            ck_assert_msg(fabs(got - want_C[x]) <= t,
                          "%s %s: C[%lld,%lld] = %.9g, want %.9g (tolerance %.3g)", what, d,
                          (long long)i, (long long)j, got, want_C[x], t);
            if (relu && fabs(r->pre[x]) > tol(p->dt, terms, r->scale[x], r->pre[x]))
                ck_assert_msg(bit(o->mask, N, i, j) == bit(want_mask, N, i, j),
                              "%s %s: mask bit (%lld,%lld)", what, d, (long long)i, (long long)j);
        }
    for (int64_t x = 0; x < in->nbias; x++) {
        const double got = val(p->dt, o->bias, x);
        if (!writes_bias) {
            ck_assert_msg(o->bias[x] == in->bias[x], "%s %s: bias[%lld] written", what, d,
                          (long long)x);
            continue;
        }
        const int64_t bterms = e == BLOB_EPILOGUE_DRELU_BGRAD ? M + terms : p->K + 2;
        /* DRELU_BGRAD sums C's values, each with its own 16-bit rounding */
        const double t = tol(p->dt, bterms, r->bscale[x], want_bias[x]) +
                         (e == BLOB_EPILOGUE_DRELU_BGRAD ? unit(p->dt) * r->bscale[x] : 0);
        ck_assert_msg(fabs(got - want_bias[x]) <= t,
                      "%s %s: bias[%lld] = %.9g, want %.9g (tolerance %.3g)", what, d, (long long)x,
                      got, want_bias[x], t);
    }
    if (!relu)
        ck_assert_msg(!memcmp(o->mask, in->mask, in->mbytes), "%s %s: mask written", what, d);
}

/* The host path against float64: each result is the float32 accumulation, whose error is
 * at most `terms` float32 roundings of the magnitudes summed (the bias sums of
 * DRELU_BGRAD take C's own error, one per row, on top), then one rounding to the 16-bit
 * dtype, relative to the value (absolute among the subnormals). */
static double host_tol(blob_dtype dt, int64_t terms, double scale, double want)
{
    return unit(dt) * fabs(want) + (double)terms * U32 * (scale + unit(dt) * scale) + tiny(dt);
}

/* The GPU against the host path: both round the same float32 accumulation to the 16-bit
 * dtype, but in another order of the sums (cuBLASLt's tiles and splits of K), and a
 * product cuBLASLt does not fuse is rounded to the dtype before its epilogue kernel adds
 * the bias and rounds again. So they may differ by a rounding of the 16-bit dtype of
 * each magnitude involved on either side (the terms summed, the bias, not only the
 * result, which may have cancelled), with the float32 error of the sums beside it. The
 * bias sums of DRELU_BGRAD sum C's rounded values (host) or its unrounded ones (a fused
 * cuBLASLt): one 16-bit rounding per row, which the magnitude of the column covers. */
static double gpu_tol(blob_dtype dt, int64_t terms, double scale, double want)
{
    return 3 * unit(dt) * (scale + fabs(want)) + 2 * (double)terms * U32 * scale + 4 * tiny(dt);
}

static void check_host(const problem *p)
{
    inputs in;
    make_inputs(p, &in);
    reference r;
    make_reference(p, &in, &r);
    outputs o;
    run(p, &in, false, &o);
    /* the wanted mask: the reference's bits */
    unsigned char *want_mask = malloc(in.mbytes + 1);
    memcpy(want_mask, in.mask, in.mbytes);
    for (int64_t i = 0; i < p->M; i++)
        for (int64_t j = 0; j < p->N; j++)
            if (r.pre[i * p->N + j] > 0)
                want_mask[(i * BLOB_RELU_MASK_ROW_BITS(p->N) + j) / 8] |=
                    (unsigned char)(1u << ((i * BLOB_RELU_MASK_ROW_BITS(p->N) + j) % 8));
            else
                want_mask[(i * BLOB_RELU_MASK_ROW_BITS(p->N) + j) / 8] &=
                    (unsigned char)~(1u << ((i * BLOB_RELU_MASK_ROW_BITS(p->N) + j) % 8));
    compare(p, &in, &r, &o, r.C, r.bias, want_mask, host_tol, "host");
    free(want_mask);
    free_outputs(&o);
    free_reference(&r);
    free_inputs(&in);
}

static void check_gpu(const problem *p)
{
    inputs in;
    make_inputs(p, &in);
    reference r;
    make_reference(p, &in, &r);
    outputs h, g;
    run(p, &in, false, &h);
    run(p, &in, true, &g);
    double *hc = malloc(sizeof(double) * (size_t)(p->M * p->N + 1));
    double *hb = malloc(sizeof(double) * (size_t)(in.nbias + 1));
    ck_ok(blob_cpu_convert(p->dt, BLOB_FLOAT64, p->M * p->N, h.C, hc));
    ck_ok(blob_cpu_convert(p->dt, BLOB_FLOAT64, in.nbias, h.bias, hb));
    compare(p, &in, &r, &g, hc, hb, h.mask, gpu_tol, "gpu against host");
    free(hc), free(hb);
    free_outputs(&h);
    free_outputs(&g);
    free_reference(&r);
    free_inputs(&in);
}

/* C = alpha op(A) op(B) + beta C: (alpha, beta) of the plain products. */
static const double scalars[][2] = {{1, 0}, {0.5, -2}, {-1, 1}, {0, 0.75}};

/* _i: the dtype. Every size of sizes for M, N, K, every transposition, alpha/beta pairs
 * in turn. */
static void gemm_all(int dti, bool gpu)
{
    test_seed(1600 + (uint64_t)dti);
    int n = 0;
    for (size_t m = 0; m < 4; m++)
        for (size_t nn = 0; nn < 4; nn++)
            for (size_t k = 0; k < 4; k++)
                for (int t = 0; t < 4; t++, n++) {
                    const problem p = {test_halves[dti],  (blob_trans)(t & 1), (blob_trans)(t >> 1),
                                       sizes[m],          sizes[nn],           sizes[k],
                                       scalars[n % 4][0], scalars[n % 4][1],   false,
                                       BLOB_EPILOGUE_NONE};
                    (gpu ? check_gpu : check_host)(&p);
                }
}

/* Every epilogue and transposition on a few odd shapes. */
static void epilogues_all(int dti, bool gpu)
{
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {7, 33, 257}, {33, 257, 7}, {257, 7, 33}, {33, 33, 1}};
    test_seed(1700 + (uint64_t)dti);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int e = BLOB_EPILOGUE_NONE; e <= BLOB_EPILOGUE_BGRADB; e++)
            for (int t = 0; t < 4; t++) {
                const problem p = {test_halves[dti],
                                   (blob_trans)(t & 1),
                                   (blob_trans)(t >> 1),
                                   shapes[s][0],
                                   shapes[s][1],
                                   shapes[s][2],
                                   1,
                                   0,
                                   true,
                                   (blob_epilogue)e};
                (gpu ? check_gpu : check_host)(&p);
            }
}

START_TEST(test_cpu_gemm16) { gemm_all(_i, false); }
END_TEST

START_TEST(test_cpu_epilogue16) { epilogues_all(_i, false); }
END_TEST

/* beta == 0 does not read C: NaN there is overwritten; K == 0 scales C by beta. */
START_TEST(test_cpu_gemm16_beta)
{
    const blob_dtype dt = test_halves[_i];
    uint16_t A[6], B[6], C[4], nan16, two, four;
    const float one = 1, f2 = 2, f4 = 4, fnan = NAN;
    for (int i = 0; i < 6; i++) {
        ck_ok(blob_cpu_convert(BLOB_FLOAT32, dt, 1, &one, &A[i]));
        B[i] = A[i];
    }
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, dt, 1, &fnan, &nan16));
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, dt, 1, &f2, &two));
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, dt, 1, &f4, &four));
    for (int i = 0; i < 4; i++)
        C[i] = nan16;
    ck_ok(blob_cpu_gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 3, 1, A, B, 0, C));
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq(val(dt, C, i), 3);
    for (int i = 0; i < 4; i++)
        C[i] = two;
    ck_ok(blob_cpu_gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 0, 1, A, B, 2, C));
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(C[i], four);
    for (int i = 0; i < 4; i++)
        C[i] = nan16;
    ck_ok(blob_cpu_gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 0, 1, A, B, 0, C));
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(C[i], 0);
}
END_TEST

/* Results are the float32 sums rounded to nearest even: bfloat16 keeps 8 significant
 * bits (its ulp at 1 is 2^-7), and each sum below is exact in float32. */
START_TEST(test_cpu_gemm16_rounding)
{
    static const struct {
        float a[3];
        double want;
    } cases[] = {
        {{1, 0x1p-8f, 0}, 1},                /* halfway: to the even 1 */
        {{1, 0x1p-8f, 0x1p-9f}, 1 + 0x1p-7}, /* past halfway: up */
        {{1, 0x1p-7f, 0x1p-8f}, 1 + 0x1p-6}, /* halfway from an odd one: up to even */
        {{-1, -0x1p-9f, 0}, -1},             /* below halfway: down, sign kept */
    };
    const float ones[3] = {1, 1, 1};
    uint16_t A[3], B[3], C[1];
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, BLOB_BFLOAT16, 3, ones, B));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ck_ok(blob_cpu_convert(BLOB_FLOAT32, BLOB_BFLOAT16, 3, cases[c].a, A));
        ck_ok(blob_cpu_gemm(BLOB_BFLOAT16, BLOB_NO_TRANS, BLOB_NO_TRANS, 1, 1, 3, 1, A, B, 0, C));
        ck_assert_double_eq(val(BLOB_BFLOAT16, C, 0), cases[c].want);
    }
}
END_TEST

/* Bad arguments give the documented errors, name the call and leave C as it was. */
START_TEST(test_gemm16_bad_arguments)
{
    const bool gpu = _i;
    static _Alignas(16) uint16_t A[64], B[64], C[64], bias[64], before[64];
    static _Alignas(16) unsigned char mask[256];
    for (int i = 0; i < 64; i++)
        A[i] = B[i] = C[i] = bias[i] = (uint16_t)(0x3f80 + i);
    memcpy(before, C, sizeof C);
    blob_status (*gemm)(blob_dtype, blob_trans, blob_trans, int64_t, int64_t, int64_t, double,
                        const void *, const void *, double, void *) =
        gpu ? blob_gpu_gemm : blob_cpu_gemm;
    blob_status (*epi)(blob_dtype, blob_trans, blob_trans, int64_t, int64_t, int64_t, const void *,
                       const void *, void *, blob_epilogue, void *, void *, blob_math_mode) =
        gpu ? blob_gpu_gemm_epilogue : blob_cpu_gemm_epilogue;
    const char *gname = gpu ? "blob_gpu_gemm" : "blob_cpu_gemm";
    const char *ename = gpu ? "blob_gpu_gemm_epilogue" : "blob_cpu_gemm_epilogue";
    static const blob_dtype ints[] = {BLOB_INT32, BLOB_INT64, BLOB_UINT8};
    for (size_t d = 0; d < 3; d++) {
        ck_status(gemm(ints[d], BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, 1, A, B, 0, C),
                  BLOB_ENOTSUP);
        ck_assert_msg(strstr(blob_last_error(), gname) &&
                          strstr(blob_last_error(), blob_dtype_name(ints[d])),
                      "%s", blob_last_error());
        ck_status(epi(ints[d], BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, A, B, C, BLOB_EPILOGUE_BIAS,
                      bias, NULL, 0),
                  BLOB_ENOTSUP);
        ck_assert_msg(strstr(blob_last_error(), ename) &&
                          strstr(blob_last_error(), blob_dtype_name(ints[d])),
                      "%s", blob_last_error());
    }
    for (size_t d = 0; d < 2; d++) {
        const blob_dtype dt = test_halves[d];
        ck_status(gemm((blob_dtype)42, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, 1, A, B, 0, C),
                  BLOB_EINVAL);
        ck_status(gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, -1, 2, 2, 1, A, B, 0, C), BLOB_EINVAL);
        ck_status(gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, -3, 1, A, B, 0, C), BLOB_EINVAL);
        ck_status(gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, 1, NULL, B, 0, C), BLOB_EINVAL);
        ck_assert_msg(strstr(blob_last_error(), "A is NULL"), "%s", blob_last_error());
        ck_status(gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, 1, A, NULL, 0, C), BLOB_EINVAL);
        ck_status(gemm(dt, (blob_trans)7, BLOB_NO_TRANS, 2, 2, 2, 1, A, B, 0, C), BLOB_EINVAL);
        ck_status(gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, 1, A, B, 0, NULL), BLOB_EINVAL);
        ck_status(epi(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, A, B, C, BLOB_EPILOGUE_BIAS, NULL,
                      NULL, 0),
                  BLOB_EINVAL);
        ck_assert_msg(strstr(blob_last_error(), "bias is NULL"), "%s", blob_last_error());
        ck_status(epi(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, A, B, C, BLOB_EPILOGUE_DRELU, NULL,
                      NULL, 0),
                  BLOB_EINVAL);
        ck_status(epi(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, A, B, C, BLOB_EPILOGUE_DRELU, NULL,
                      mask + 1, 0),
                  BLOB_EINVAL);
        ck_status(epi(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, -2, A, B, C, BLOB_EPILOGUE_NONE, NULL,
                      NULL, 0),
                  BLOB_EINVAL);
        ck_status(epi(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, A, B, C, (blob_epilogue)99, bias,
                      mask, 0),
                  BLOB_EINVAL);
        ck_status(epi(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, A, B, C, BLOB_EPILOGUE_NONE, NULL,
                      NULL, (blob_math_mode)9),
                  BLOB_EINVAL);
    }
    ck_assert(!memcmp(C, before, sizeof C));
}
END_TEST

/* The rest of the float math takes float32 and float64 only: BLOB_ENOTSUP naming the
 * dtype and the call, for the 16-bit floats and the integers alike. */
START_TEST(test_math16_refused)
{
    static _Alignas(16) uint16_t x[64], y[64], z[64];
    static const blob_dtype refused[] = {BLOB_BFLOAT16, BLOB_FLOAT16, BLOB_INT32, BLOB_UINT8};
    for (size_t d = 0; d < sizeof refused / sizeof refused[0]; d++) {
        const blob_dtype dt = refused[d];
        const char *name = blob_dtype_name(dt);
#define REFUSED(call, fname)                                                                     \
    do {                                                                                         \
        ck_status(call, BLOB_ENOTSUP);                                                           \
        ck_assert_msg(strstr(blob_last_error(), fname) && strstr(blob_last_error(), name), "%s", \
                      blob_last_error());                                                        \
    } while (0)
        REFUSED(blob_cpu_gemv(dt, BLOB_NO_TRANS, 2, 2, 1, x, y, 0, z), "blob_cpu_gemv");
        REFUSED(blob_gpu_gemv(dt, BLOB_NO_TRANS, 2, 2, 1, x, y, 0, z), "blob_gpu_gemv");
        REFUSED(blob_cpu_softmax_loss_forward(dt, 2, 2, x, y, z, z + 8),
                "blob_cpu_softmax_loss_forward");
        REFUSED(blob_gpu_softmax_loss_backward(dt, 2, 2, x, y, 1, z),
                "blob_gpu_softmax_loss_backward");
        if (dt != BLOB_BFLOAT16 && dt != BLOB_FLOAT16) { /* the 16-bit floats' own calls */
            REFUSED(blob_cpu_axpby(dt, 4, 1, x, 1, y), "blob_cpu_axpby");
            REFUSED(blob_cpu_set(dt, 4, 1, y), "blob_cpu_set");
            REFUSED(blob_gpu_set(dt, 4, 1, y), "blob_gpu_set");
            REFUSED(blob_cpu_add_scalar(dt, 4, 1, y), "blob_cpu_add_scalar");
            REFUSED(blob_cpu_mul(dt, 4, x, y, z), "blob_cpu_mul");
            REFUSED(blob_cpu_softmax_loss_mixed(dt, BLOB_INT32, 2, 2, x, y, 1, z, (float *)z, NULL),
                    "blob_cpu_softmax_loss_mixed");
            REFUSED(blob_cpu_relu_forward(dt, 4, x, y), "blob_cpu_relu_forward");
            REFUSED(blob_gpu_relu_backward(dt, 4, x, y, z), "blob_gpu_relu_backward");
            REFUSED(blob_cpu_axpy(dt, 4, 1, x, y), "blob_cpu_axpy");
            REFUSED(blob_gpu_dot(dt, 4, x, y, (double[1]){0}), "blob_gpu_dot");
        }
#undef REFUSED
    }
}
END_TEST

static int no_devices(void) { return 0; }

/* Without a GPU the 16-bit GPU calls give BLOB_ENODEV once their arguments pass. */
START_TEST(test_gpu16_without_gpu)
{
    static _Alignas(16) uint16_t buf[64];
    blob__backend none = *blob__backend_default();
    none.device_count = no_devices;
    blob__backend_install(&none);
    for (size_t d = 0; d < 2; d++) {
        const blob_dtype dt = test_halves[d];
        bool fused = true;
        ck_status(blob_gpu_gemm(dt, BLOB_NO_TRANS, BLOB_TRANS, 2, 2, 2, 1, buf, buf, 0, buf),
                  BLOB_ENODEV);
        ck_status(blob_gpu_gemm_epilogue(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2, buf, buf, buf,
                                         BLOB_EPILOGUE_BIAS_RELU, buf, buf, 0),
                  BLOB_ENODEV);
        ck_status(blob_gpu_gemm_epilogue_fused(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, 2, 2, 2,
                                               BLOB_EPILOGUE_BIAS, false, 0, &fused),
                  BLOB_ENODEV);
        ck_assert(!fused);
    }
    blob__backend_install(NULL);
}
END_TEST

/* ---- Real GPU ---- */

START_TEST(test_gpu_gemm16) { gemm_all(_i, true); }
END_TEST

START_TEST(test_gpu_epilogue16) { epilogues_all(_i, true); }
END_TEST

/* The same tuned: each fused product is timed against the plain one and the epilogue
 * kernels, and whichever is kept computes what the host does. */
START_TEST(test_gpu_epilogue16_tuned)
{
    const bool tuning = blob_gemm_tuning_get();
    blob_gemm_tuning_set(true);
    epilogues_all(_i, true);
    blob_gemm_tuning_set(tuning);
}
END_TEST

/* Which epilogues cuBLASLt fuses on 16-bit floats at an MLP layer's shape, for the record
 * (those it does not run as the product and the 16-bit epilogue kernels, which the tests
 * above check either way). */
START_TEST(test_gpu16_fused_report)
{
    for (size_t d = 0; d < 2; d++) {
        const blob_dtype dt = test_halves[d];
        char line[256];
        int n = snprintf(line, sizeof line, "%s 512x4096x4096 NT fused:", blob_dtype_name(dt));
        for (int e = BLOB_EPILOGUE_NONE; e <= BLOB_EPILOGUE_BGRADB; e++) {
            bool fused;
            ck_ok(blob_gpu_gemm_epilogue_fused(dt, BLOB_NO_TRANS, BLOB_TRANS, 512, 4096, 4096,
                                               (blob_epilogue)e, true, 0, &fused));
            n += snprintf(line + n, sizeof line - (size_t)n, " %d:%s", e, fused ? "yes" : "no");
        }
        printf("%s\n", line);
    }
}
END_TEST

/* Tuned, replayed and captured: the same arrays with other scalars (a replayed graph
 * holds the scalars it was captured with), beta != 0 before the first beta == 0 (tuning
 * waits for it: its timing runs overwrite C), and a graph capture, all against the host. */
START_TEST(test_gpu_gemm16_replay)
{
    const blob_dtype dt = test_halves[_i];
    const bool tuning = blob_gemm_tuning_get();
    blob_gemm_tuning_set(true);
    void *stream; /* a stream of its own: the default stream cannot be captured */
    ck_ok(blob_stream_create(&stream));
    blob_stream_set(stream);
    test_seed(1800 + (uint64_t)_i);
    const int64_t M = 96, N = 200, K = 513;
    problem p = {dt, BLOB_NO_TRANS, BLOB_TRANS, M, N, K, 0.5, -2, false, BLOB_EPILOGUE_NONE};
    inputs in;
    make_inputs(&p, &in);
    const size_t cb = 2 * (size_t)(M * N);
    void *A = to_side(true, in.A, 2 * (size_t)(M * K));
    void *B = to_side(true, in.B, 2 * (size_t)(K * N));
    void *C;
    ck_ok(blob__be->device_alloc(cb, &C));
    uint16_t *host = malloc(cb), *got = malloc(cb);
    double *want = malloc(sizeof(double) * (size_t)(M * N));
    reference r;
    static const double runs[][2] = {{0.5, -2}, {0.5, -2}, {1, 0},    {1, 0},    {1, 0},
                                     {2, 0},    {2, 0},    {0.5, -2}, {0.5, -2}, {-1, 0.5}};
    for (int k = 0; k < 11; k++) {
        const bool graph = k == 10;
        p.alpha = runs[graph ? 9 : k][0];
        p.beta = runs[graph ? 9 : k][1];
        memcpy(host, in.C, cb);
        ck_ok(blob__be->copy_async(C, in.C, cb, BLOB__H2D, blob_stream_get()));
        ck_ok(blob_cpu_gemm(dt, p.ta, p.tb, M, N, K, p.alpha, in.A, in.B, p.beta, host));
        if (graph) {
            blob_graph *g;
            ck_ok(blob_graph_begin(blob_stream_get()));
            ck_ok(blob_gpu_gemm(dt, p.ta, p.tb, M, N, K, p.alpha, A, B, p.beta, C));
            ck_ok(blob_graph_end(blob_stream_get(), &g));
            ck_ok(blob_graph_launch(g, blob_stream_get()));
            blob_graph_free(g);
        } else {
            ck_ok(blob_gpu_gemm(dt, p.ta, p.tb, M, N, K, p.alpha, A, B, p.beta, C));
        }
        ck_ok(blob__be->copy_async(got, C, cb, BLOB__D2H, blob_stream_get()));
        ck_ok(blob__be->stream_synchronize(blob_stream_get()));
        make_reference(&p, &in, &r);
        ck_ok(blob_cpu_convert(dt, BLOB_FLOAT64, M * N, host, want));
        outputs o = {got, in.bias, in.mask};
        compare(&p, &in, &r, &o, want, r.bias, in.mask, gpu_tol, graph ? "graph" : "replay");
        free_reference(&r);
    }
    blob__be->device_free(A);
    blob__be->device_free(B);
    blob__be->device_free(C);
    free(host), free(got), free(want);
    free_inputs(&in);
    blob_stream_set(NULL);
    ck_ok(blob_stream_destroy(stream));
    blob_gemm_tuning_set(tuning);
}
END_TEST

void gemm16_suite(Suite *s)
{
    TCase *tc = suite_case(s, "host", NULL, 300, NULL, NULL);
    add_loop_tests(tc, 0, 2, test_cpu_gemm16);
    add_loop_tests(tc, 0, 2, test_cpu_epilogue16);
    add_loop_tests(tc, 0, 2, test_cpu_gemm16_beta);
    add_tests(tc, test_cpu_gemm16_rounding);
    add_loop_tests(tc, 0, 2, test_gemm16_bad_arguments);
    add_tests(tc, test_math16_refused);
    add_tests(tc, test_gpu16_without_gpu);

    TCase *gpu = suite_case(s, "gpu", "gpu", 600, NULL, NULL);
    add_loop_tests(gpu, 0, 2, test_gpu_gemm16);
    add_loop_tests(gpu, 0, 2, test_gpu_epilogue16);
    add_loop_tests(gpu, 0, 2, test_gpu_epilogue16_tuned);
    add_tests(gpu, test_gpu16_fused_report);
    add_loop_tests(gpu, 0, 2, test_gpu_gemm16_replay);
}

/* The dtypes past float32 and float64: bfloat16 and float16 (conversions, checked
 * exhaustively against a reference that searches the 16-bit values; the math in float32),
 * and int32, int64 and uint8 as storage; on the host, under the fake device (allocation
 * failures) and on a real GPU (against the host). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blob/dlpack.h"
#include "fake_backend.h"
#include "testutil.h"

static const blob_dtype NEW_DTYPES[] = {BLOB_BFLOAT16, BLOB_FLOAT16, BLOB_INT32, BLOB_INT64,
                                        BLOB_UINT8};
#define N_NEW 5

/* ---- the reference: 16-bit values decoded by definition, rounding by search ---- */

/* Fraction bits and the exponent field of Inf and NaN. */
static int frac_bits(blob_dtype dt) { return dt == BLOB_BFLOAT16 ? 7 : 10; }
static uint32_t inf_bits(blob_dtype dt) { return dt == BLOB_BFLOAT16 ? 0x7f80 : 0x7c00; }

/* The value of pattern h: bfloat16 is the top half of a float32; float16 is GCC's
 * _Float16 where the compiler has it, else its definition. */
static double ref_value(blob_dtype dt, uint16_t h)
{
    if (dt == BLOB_BFLOAT16)
        return test_bits_f32((uint32_t)h << 16);
#ifdef __FLT16_MAX__
    _Float16 v;
    memcpy(&v, &h, sizeof v);
    return (double)v;
#else
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0x1f ? (m ? NAN : INFINITY) : e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return h >> 15 ? -v : v;
#endif
}

/* The quiet NaN of a sign, per dtype (the library's rule). */
static uint16_t ref_nan(blob_dtype dt, bool neg)
{
    return (uint16_t)((neg ? 0x8000 : 0) | inf_bits(dt) | 1u << (frac_bits(dt) - 1));
}

/* x rounded to nearest even: the largest non-negative pattern p not above |x|, found by
 * bisection over the ordered patterns, then p or p + 1 by the midpoint (ties to the even
 * pattern); the pattern past the largest finite one is Inf, worth one more ulp. */
static uint16_t ref_round(blob_dtype dt, double x)
{
    if (isnan(x))
        return ref_nan(dt, signbit(x));
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    uint32_t inf = inf_bits(dt), lo = 0, hi = inf; /* value(lo) <= a < value(hi) */
    double top = 2 * ref_value(dt, (uint16_t)(inf - 1)) - ref_value(dt, (uint16_t)(inf - 2));
    if (a >= top)
        return (uint16_t)(sign | inf);
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (ref_value(dt, (uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double vlo = ref_value(dt, (uint16_t)lo), vhi = hi == inf ? top : ref_value(dt, (uint16_t)hi);
    double m = vlo + (vhi - vlo) / 2; /* exact: the values have few bits */
    uint32_t p = a < m ? lo : a > m ? hi : (lo % 2 ? hi : lo);
    return (uint16_t)(sign | p);
}

/* float32 inputs for the rounding tests, n of them into out (room for at least 20 per
 * pattern plus 4096): for every non-negative finite pattern the midpoint to the next
 * one and its float32 neighbours, with both signs; the extremes; random bit patterns. */
static int64_t tricky_floats(blob_dtype dt, float *out)
{
    int64_t n = 0;
    uint32_t inf = inf_bits(dt);
    for (uint32_t p = 0; p < inf; p++) {
        double v = ref_value(dt, (uint16_t)p);
        double next = p + 1 < inf ? ref_value(dt, (uint16_t)(p + 1))
                                  : 2 * v - ref_value(dt, (uint16_t)(p - 1));
        float mid = (float)(v + (next - v) / 2);
        float cand[] = {(float)v, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
        for (int i = 0; i < 4; i++) {
            out[n++] = cand[i];
            out[n++] = -cand[i];
        }
    }
    const uint32_t special[] = {0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001,
                                0xff812345, 0x7fffffff, 0x00000001, 0x80000001, 0x007fffff,
                                0x7f7fffff, 0xff7fffff, 0x00000000, 0x80000000};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        out[n++] = test_bits_f32(special[i]);
    for (int i = 0; i < 4000; i++)
        out[n++] = test_bits_f32((uint32_t)(test_uniform(0, 4294967296.0)));
    return n;
}

static float *tricky_alloc(blob_dtype dt, int64_t *n)
{
    float *x = malloc(((size_t)inf_bits(dt) * 8 + 4096 + 16) * sizeof *x);
    ck_assert_ptr_nonnull(x);
    *n = tricky_floats(dt, x);
    return x;
}

/* ---- names and sizes ---- */

START_TEST(test_names_sizes)
{
    const size_t sizes[] = {2, 2, 4, 8, 1};
    const char *names[] = {"bfloat16", "float16", "int32", "int64", "uint8"};
    for (int i = 0; i < N_NEW; i++) {
        ck_assert_uint_eq(blob_dtype_size(NEW_DTYPES[i]), sizes[i]);
        ck_assert_str_eq(blob_dtype_name(NEW_DTYPES[i]), names[i]);
        ck_assert(blob_dtype_is_float(NEW_DTYPES[i]) == (i < 2));
    }
    ck_assert_str_eq(blob_dtype_name(BLOB_FLOAT32), "float32");
    ck_assert_str_eq(blob_dtype_name(BLOB_FLOAT64), "float64");
    ck_assert_str_eq(blob_dtype_name((blob_dtype)7), "invalid");
    ck_assert_str_eq(blob_dtype_name(BLOB_DTYPE_NONE), "invalid");
    ck_assert_uint_eq(blob_dtype_size((blob_dtype)7), 0);
}
END_TEST

/* ---- conversions on the host ---- */

/* Every pattern to float32 (exact, against the reference value) and back (the same
 * pattern; a NaN the quiet NaN of its sign). */
START_TEST(test_round_trip_all_patterns)
{
    blob_dtype dt = test_halves[_i];
    uint16_t *h = malloc(65536 * sizeof *h), *back = malloc(65536 * sizeof *back);
    float *f = malloc(65536 * sizeof *f);
    for (uint32_t p = 0; p < 65536; p++)
        h[p] = (uint16_t)p;
    ck_ok(blob_cpu_convert(dt, BLOB_FLOAT32, 65536, h, f));
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, dt, 65536, f, back));
    for (uint32_t p = 0; p < 65536; p++) {
        double v = ref_value(dt, (uint16_t)p);
        if (isnan(v)) {
            ck_assert_msg(test_f32_bits(f[p]) == (p & 0x8000 ? 0xffc00000u : 0x7fc00000u),
                          "%s %04x -> %08x", blob_dtype_name(dt), p, test_f32_bits(f[p]));
            ck_assert_uint_eq(back[p], ref_nan(dt, p & 0x8000));
        } else {
            ck_assert_msg((double)f[p] == v && !signbit(f[p]) == !signbit(v), "%s %04x -> %g",
                          blob_dtype_name(dt), p, (double)f[p]);
            ck_assert_msg(back[p] == p, "%s %04x -> %04x", blob_dtype_name(dt), p, back[p]);
        }
    }
    free(h);
    free(back);
    free(f);
}
END_TEST

/* float32 values at every tie, beside it, subnormal, overflowing, NaN, and random. */
START_TEST(test_round_float32)
{
    blob_dtype dt = test_halves[_i];
    test_seed(23);
    int64_t n;
    float *x = tricky_alloc(dt, &n);
    uint16_t *y = malloc((size_t)n * sizeof *y);
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, dt, n, x, y));
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(y[i] == ref_round(dt, x[i]), "%s: %a (%08x) -> %04x, expected %04x",
                      blob_dtype_name(dt), (double)x[i], test_f32_bits(x[i]), y[i],
                      ref_round(dt, x[i]));
    free(x);
    free(y);
}
END_TEST

/* From float64 in one rounding: a tie plus a little rounds up, where rounding to float32
 * first would make it a tie. */
START_TEST(test_round_float64)
{
    blob_dtype dt = test_halves[_i];
    uint32_t inf = inf_bits(dt);
    int64_t n = 0;
    double *x = malloc((size_t)inf * 4 * sizeof *x);
    for (uint32_t p = 0; p + 1 < inf; p++) {
        double v = ref_value(dt, (uint16_t)p), w = ref_value(dt, (uint16_t)(p + 1));
        double mid = v + (w - v) / 2;
        x[n++] = nextafter(mid, INFINITY);
        x[n++] = -nextafter(mid, 0);
        x[n++] = mid;
        x[n++] = 1e300 * (p % 2 ? 1 : -1);
    }
    uint16_t *y = malloc((size_t)n * sizeof *y);
    ck_ok(blob_cpu_convert(BLOB_FLOAT64, dt, n, x, y));
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(y[i] == ref_round(dt, x[i]), "%s: %a -> %04x, expected %04x",
                      blob_dtype_name(dt), x[i], y[i], ref_round(dt, x[i]));
    free(x);
    free(y);
}
END_TEST

/* Between the two 16-bit dtypes, and float64 <-> float32 (a NaN as the quiet NaN of its
 * sign; values rounded as C rounds). */
START_TEST(test_convert_between)
{
    uint16_t *h = malloc(65536 * sizeof *h), *o = malloc(65536 * sizeof *o);
    for (uint32_t p = 0; p < 65536; p++)
        h[p] = (uint16_t)p;
    for (int k = 0; k < 2; k++) {
        blob_dtype from = test_halves[k], to = test_halves[1 - k];
        ck_ok(blob_cpu_convert(from, to, 65536, h, o));
        for (uint32_t p = 0; p < 65536; p++)
            ck_assert_msg(o[p] == ref_round(to, ref_value(from, (uint16_t)p)), "%s %04x -> %04x",
                          blob_dtype_name(from), p, o[p]);
    }
    double d[] = {1.0 / 3, -1e300, 1e-310, NAN, -NAN, INFINITY};
    float f[6];
    double back[6];
    ck_ok(blob_cpu_convert(BLOB_FLOAT64, BLOB_FLOAT32, 6, d, f));
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, BLOB_FLOAT64, 6, f, back));
    ck_assert(f[0] == (float)(1.0 / 3) && f[1] == -INFINITY && f[2] == 0 && f[5] == INFINITY);
    ck_assert_uint_eq(test_f32_bits(f[3]), 0x7fc00000u);
    ck_assert_uint_eq(test_f32_bits(f[4]), 0xffc00000u);
    ck_assert(back[0] == (double)f[0] && isnan(back[4]) && signbit(back[4]));
    free(h);
    free(o);
}
END_TEST

START_TEST(test_convert_errors)
{
    float x[2] = {1, 2};
    int32_t y[2];
    ck_status(blob_cpu_convert(BLOB_FLOAT32, BLOB_INT32, 2, x, y), BLOB_ENOTSUP);
    ck_assert_msg(strstr(blob_last_error(), "blob_cpu_convert") &&
                      strstr(blob_last_error(), "int32"),
                  "%s", blob_last_error());
    ck_status(blob_cpu_convert(BLOB_UINT8, BLOB_FLOAT32, 2, y, x), BLOB_ENOTSUP);
    ck_status(blob_cpu_convert((blob_dtype)9, BLOB_FLOAT32, 2, y, x), BLOB_EINVAL);
    ck_status(blob_cpu_convert(BLOB_FLOAT32, BLOB_FLOAT16, -1, x, y), BLOB_EINVAL);
    ck_status(blob_cpu_convert(BLOB_FLOAT32, BLOB_FLOAT16, 2, NULL, y), BLOB_EINVAL);
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, BLOB_FLOAT16, 0, NULL, NULL));
}
END_TEST

/* ---- blobs of every new dtype: storage ---- */

static blob *make(blob_dtype dt, int device, int64_t rows, int64_t cols)
{
    int64_t s[] = {rows, cols};
    blob *b;
    ck_ok(blob_create(&b, dt, device, 2, s));
    return b;
}

/* Fill a part with distinct non-zero bytes from seed. */
static void fill_bytes(blob *b, bool diff, unsigned seed)
{
    void *p;
    ck_ok(diff ? blob_mutable_cpu_diff(b, &p) : blob_mutable_cpu_data(b, &p));
    size_t bytes = (size_t)blob_count(b) * blob_dtype_size(blob_get_dtype(b));
    for (size_t i = 0; i < bytes; i++)
        ((unsigned char *)p)[i] = (unsigned char)(1 + (i * 7 + seed) % 53); /* finite floats */
}

static void assert_same_bytes(blob *a, bool adiff, blob *b, bool bdiff)
{
    const void *x, *y;
    ck_ok(adiff ? blob_cpu_diff(a, &x) : blob_cpu_data(a, &x));
    ck_ok(bdiff ? blob_cpu_diff(b, &y) : blob_cpu_data(b, &y));
    ck_assert_int_eq(blob_count(a), blob_count(b));
    ck_assert(!memcmp(x, y, (size_t)blob_count(a) * blob_dtype_size(blob_get_dtype(a))));
}

START_TEST(test_storage)
{
    blob_dtype dt = NEW_DTYPES[_i];
    blob *a = make(dt, BLOB_HOST_ONLY, 3, 5), *b = make(dt, BLOB_HOST_ONLY, 5, 3);
    ck_assert_int_eq(blob_get_dtype(a), dt);
    ck_assert_int_eq(blob_capacity(a), 15);
    ck_assert_uint_eq(blob_syncedmem_size(blob_data_mem(a)), 15 * blob_dtype_size(dt));
    fill_bytes(a, false, 1);
    fill_bytes(a, true, 2);
    ck_ok(blob_copy_from(b, a, false, true));
    assert_same_bytes(b, false, a, false);
    ck_ok(blob_copy_from(b, a, true, false));
    assert_same_bytes(b, true, a, true);
    int64_t s1[] = {15}, s2[] = {4, 4};
    ck_ok(blob_reshape(a, 1, s1));
    ck_ok(blob_share_data(a, b));
    ck_assert_ptr_eq(blob_data_mem(a), blob_data_mem(b));
    ck_ok(blob_reshape(b, 2, s2)); /* grows: a fresh block */
    ck_assert_int_eq(blob_capacity(b), 16);
    const void *z;
    ck_ok(blob_cpu_data(b, &z));
    for (size_t i = 0; i < 16 * blob_dtype_size(dt); i++)
        ck_assert_uint_eq(((const unsigned char *)z)[i], 0);
    ck_ok(blob_shrink_to_fit(a));
    blob *c = make(dt == BLOB_INT32 ? BLOB_FLOAT32 : BLOB_INT32, BLOB_HOST_ONLY, 15, 1);
    ck_status(blob_share_data(a, c), BLOB_EINVAL);
    ck_status(blob_copy_from(c, a, false, true), BLOB_EINVAL);
    ck_assert_msg(strstr(blob_last_error(), blob_dtype_name(dt)), "%s", blob_last_error());
    blob_free(a);
    blob_free(b);
    blob_free(c);
}
END_TEST

/* The integers have no math: each call names itself and the dtype, and changes nothing. */
START_TEST(test_int_math_refused)
{
    blob_dtype dt = NEW_DTYPES[2 + _i];
    blob *b = make(dt, BLOB_HOST_ONLY, 4, 4), *copy = make(dt, BLOB_HOST_ONLY, 4, 4);
    fill_bytes(b, false, 3);
    fill_bytes(b, true, 4);
    ck_ok(blob_copy_from(copy, b, false, false));
    double v = 7;
    struct {
        const char *name;
        blob_status st;
    } calls[] = {{"blob_update", blob_update(b)},
                 {"blob_asum_data", blob_asum_data(b, &v)},
                 {"blob_sumsq_diff", blob_sumsq_diff(b, &v)},
                 {"blob_scale_data", blob_scale_data(b, 2)},
                 {"blob_convert_from", blob_convert_from(b, copy, false, false)}};
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++)
        ck_assert_msg(calls[i].st == BLOB_ENOTSUP, "%s: %s", calls[i].name,
                      blob_status_name(calls[i].st));
    ck_status(blob_scale_diff(b, 2), BLOB_ENOTSUP);
    ck_assert_msg(strstr(blob_last_error(), "blob_scale_diff") &&
                      strstr(blob_last_error(), blob_dtype_name(dt)),
                  "%s", blob_last_error());
    ck_assert(v == 7);
    assert_same_bytes(b, false, copy, false);
    const void *p;
    ck_ok(blob_cpu_data(b, &p));
    ck_status(blob_cpu_axpy(dt, 16, 1, p, (void *)p), BLOB_ENOTSUP);
    ck_status(blob_cpu_gemv(BLOB_FLOAT16, BLOB_NO_TRANS, 1, 1, 1, p, p, 0, (void *)p),
              BLOB_ENOTSUP);
    ck_assert_msg(strstr(blob_last_error(), "float16"), "%s", blob_last_error());
    blob_free(b);
    blob_free(copy);
}
END_TEST

/* ---- bfloat16 and float16 math on the host, against float64 references ---- */

/* A random part of a 16-bit blob in [lo, hi), never all zero; *ref gets its values. */
static void fill_half(blob *b, bool diff, double lo, double hi, double **ref)
{
    blob_dtype dt = blob_get_dtype(b);
    int64_t n = blob_count(b);
    float *f = malloc((size_t)n * sizeof *f);
    *ref = malloc((size_t)n * sizeof **ref);
    test_fill(BLOB_FLOAT32, f, n, lo, hi);
    void *p;
    ck_ok(diff ? blob_mutable_cpu_diff(b, &p) : blob_mutable_cpu_data(b, &p));
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, dt, n, f, p));
    ck_ok(blob_cpu_convert(dt, BLOB_FLOAT32, n, p, f));
    for (int64_t i = 0; i < n; i++)
        (*ref)[i] = f[i];
    free(f);
}

/* Relative error of a 16-bit part against ref. */
static double half_err(blob *b, bool diff, const double *ref, bool gpu)
{
    int64_t n = blob_count(b);
    const void *p;
    if (gpu)
        ck_assert_int_eq(blob_syncedmem_head(diff ? blob_diff_mem(b) : blob_data_mem(b)),
                         BLOB_HEAD_AT_GPU);
    ck_ok(diff ? blob_cpu_diff(b, &p) : blob_cpu_data(b, &p));
    float *f = malloc((size_t)n * sizeof *f);
    ck_ok(blob_cpu_convert(blob_get_dtype(b), BLOB_FLOAT32, n, p, f));
    double e = test_rel_err(BLOB_FLOAT32, f, ref, n, 1e-2);
    free(f);
    return e;
}

/* The unit roundoff of dt. */
static double half_eps(blob_dtype dt) { return test_eps(dt) / 2; }

/* update, asum, sumsq and scale where the head is (host, or GPU with gpu), checked
 * against float64 sums of the 16-bit values. */
static void check_half_math(blob_dtype dt, bool gpu)
{
    test_seed(5 + (uint64_t)dt);
    blob *b = make(dt, gpu ? 0 : BLOB_HOST_ONLY, 123, 45);
    int64_t n = blob_count(b);
    double *x, *d;
    fill_half(b, false, -2, 2, &x);
    fill_half(b, true, -1, 1, &d);
    const void *g;
    if (gpu) {
        ck_ok(blob_gpu_data(b, &g));
        ck_ok(blob_gpu_diff(b, &g));
    }
    double asum = 0, sumsq = 0, v;
    for (int64_t i = 0; i < n; i++) {
        asum += fabs(x[i]);
        sumsq += x[i] * x[i];
    }
    double tol = 8 * 0x1p-24 * (double)n; /* float32 accumulation */
    ck_ok(blob_asum_data(b, &v));
    ck_assert_msg(fabs(v - asum) <= tol * asum, "asum %g, expected %g", v, asum);
    ck_ok(blob_sumsq_data(b, &v));
    ck_assert_msg(fabs(v - sumsq) <= tol * sumsq, "sumsq %g, expected %g", v, sumsq);
    for (int64_t i = 0; i < n; i++)
        x[i] -= d[i];
    ck_ok(blob_update(b));
    ck_assert_msg(half_err(b, false, x, gpu) <= half_eps(dt), "update");
    for (int64_t i = 0; i < n; i++)
        d[i] *= -0.75;
    ck_ok(blob_scale_diff(b, -0.75));
    ck_assert_msg(half_err(b, true, d, gpu) <= half_eps(dt), "scale");
    free(x);
    free(d);
    blob_free(b);
}

START_TEST(test_half_math_host) { check_half_math(test_halves[_i], false); }
END_TEST

/* blob_convert_from: float32 -> 16-bit -> float64 gives the rounded values, the same as
 * blob_cpu_convert; a reshape follows src. */
START_TEST(test_convert_from)
{
    blob_dtype dt = test_halves[_i];
    test_seed(9);
    blob *a = make(BLOB_FLOAT32, BLOB_HOST_ONLY, 7, 9), *h = make(dt, BLOB_HOST_ONLY, 1, 1),
         *w = make(BLOB_FLOAT64, BLOB_HOST_ONLY, 7, 9);
    void *p;
    ck_ok(blob_mutable_cpu_diff(a, &p));
    test_fill(BLOB_FLOAT32, p, 63, -100, 100);
    ck_status(blob_convert_from(h, a, true, false), BLOB_ESHAPE);
    ck_assert_int_eq(blob_count(h), 1);
    ck_ok(blob_convert_from(h, a, true, true));
    ck_ok(blob_convert_from(w, h, true, false));
    const void *hv, *wv;
    ck_ok(blob_cpu_diff(h, &hv));
    ck_ok(blob_cpu_diff(w, &wv));
    uint16_t expect[63];
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, dt, 63, p, expect));
    ck_assert(!memcmp(hv, expect, sizeof expect));
    for (int i = 0; i < 63; i++)
        ck_assert(((const double *)wv)[i] == ref_value(dt, expect[i]));
    blob_free(a);
    blob_free(h);
    blob_free(w);
}
END_TEST

/* ---- .npy ---- */

static char npy_path[64];

static void npy_setup(void)
{
    snprintf(npy_path, sizeof npy_path, "/tmp/blob_dtype_%d.npy", (int)getpid());
}

static void npy_teardown(void) { unlink(npy_path); }

/* Every dtype NumPy has: saved with its descr, loaded back into the same dtype. */
START_TEST(test_npy_round_trip)
{
    static const char *descr[] = {NULL, "'<f2'", "'<i4'", "'<i8'", "'|u1'"};
    blob_dtype dt = NEW_DTYPES[1 + _i];
    blob *a = make(dt, BLOB_HOST_ONLY, 3, 7), *b = make(dt, BLOB_HOST_ONLY, 1, 1);
    fill_bytes(a, true, 11);
    ck_ok(blob_save_npy(a, BLOB_PART_DIFF, npy_path));
    FILE *f = fopen(npy_path, "rb");
    char head[128] = {0};
    ck_assert_uint_gt(fread(head, 1, sizeof head - 1, f), 64);
    fclose(f);
    ck_assert_msg(strstr(head + 10, descr[1 + _i]), "%s", head + 10);
    ck_ok(blob_load_npy(b, BLOB_PART_DATA, npy_path));
    ck_assert_int_eq(blob_shape(b)[1], 7);
    assert_same_bytes(b, false, a, true);
    blob_free(a);
    blob_free(b);
}
END_TEST

/* A float file converts into float16; an integer file loads only into its own dtype;
 * bfloat16 has no .npy dtype. Failed loads leave the blob alone. */
START_TEST(test_npy_dtypes)
{
    blob *f32 = make(BLOB_FLOAT32, BLOB_HOST_ONLY, 2, 2),
         *f16 = make(BLOB_FLOAT16, BLOB_HOST_ONLY, 1, 3);
    float *p;
    ck_ok(blob_mutable_cpu_data(f32, (void **)&p));
    p[0] = 1.0f / 3;
    p[1] = -65520.0f;  /* overflows float16 */
    p[2] = 0x1p-25f;   /* a tie with 0: to 0 */
    p[3] = 0x1.8p-24f; /* a tie between the smallest two subnormals: to the even one */
    ck_ok(blob_save_npy(f32, BLOB_PART_DATA, npy_path));
    ck_ok(blob_load_npy(f16, BLOB_PART_DATA, npy_path));
    const uint16_t *h;
    ck_ok(blob_cpu_data(f16, (const void **)&h));
    ck_assert_uint_eq(h[0], 0x3555);
    ck_assert_uint_eq(h[1], 0xfc00);
    ck_assert_uint_eq(h[2], 0x0000);
    ck_assert_uint_eq(h[3], 0x0002);
    blob *i32 = make(BLOB_INT32, BLOB_HOST_ONLY, 1, 5),
         *bf = make(BLOB_BFLOAT16, BLOB_HOST_ONLY, 1, 5);
    ck_status(blob_load_npy(i32, BLOB_PART_DATA, npy_path), BLOB_EFORMAT);
    ck_assert_msg(strstr(blob_last_error(), "float32") && strstr(blob_last_error(), "int32"), "%s",
                  blob_last_error());
    ck_assert_int_eq(blob_count(i32), 5);
    ck_status(blob_load_npy(bf, BLOB_PART_DATA, npy_path), BLOB_ENOTSUP);
    ck_assert_msg(strstr(blob_last_error(), "blob_load_npy") &&
                      strstr(blob_last_error(), "bfloat16"),
                  "%s", blob_last_error());
    ck_assert_int_eq(blob_count(bf), 5);
    ck_status(blob_save_npy(bf, BLOB_PART_DATA, npy_path), BLOB_ENOTSUP);
    ck_assert_msg(strstr(blob_last_error(), "blob_save_npy"), "%s", blob_last_error());
    ck_ok(blob_save_npy(i32, BLOB_PART_DATA, npy_path));
    ck_status(blob_load_npy(f32, BLOB_PART_DATA, npy_path), BLOB_EFORMAT);
    ck_assert_int_eq(blob_count(f32), 4);
    ck_assert(p[0] == 1.0f / 3);
    blob_free(f32);
    blob_free(f16);
    blob_free(i32);
    blob_free(bf);
}
END_TEST

/* ---- DLPack ---- */

static int deleted;
static void count_delete(DLManagedTensor *t)
{
    (void)t;
    deleted++;
}

/* Export gives each dtype's code and bits; a tensor of them imports as that dtype. */
START_TEST(test_dlpack_dtypes)
{
    static const struct {
        uint8_t code, bits;
    } dl[] = {{kDLBfloat, 16}, {kDLFloat, 16}, {kDLInt, 32}, {kDLInt, 64}, {kDLUInt, 8}};
    blob_dtype dt = NEW_DTYPES[_i];
    blob *b = make(dt, BLOB_HOST_ONLY, 2, 3);
    fill_bytes(b, false, 5);
    DLManagedTensor *t;
    ck_ok(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_HOST, 0, NULL, &t));
    ck_assert_uint_eq(t->dl_tensor.dtype.code, dl[_i].code);
    ck_assert_uint_eq(t->dl_tensor.dtype.bits, dl[_i].bits);
    ck_assert_uint_eq(t->dl_tensor.dtype.lanes, 1);
    blob *c;
    ck_ok(blob_from_dlpack(&c, t, BLOB_HOST_ONLY));
    ck_assert_int_eq(blob_get_dtype(c), dt);
    assert_same_bytes(c, false, b, false);
    blob_free(c);

    unsigned char mem[48] = {1, 2, 3};
    int64_t shape[] = {3};
    DLManagedTensor m = {.dl_tensor = {.data = mem,
                                       .device = {kDLCPU, 0},
                                       .ndim = 1,
                                       .dtype = {dl[_i].code, dl[_i].bits, 1},
                                       .shape = shape},
                         .deleter = count_delete};
    deleted = 0;
    ck_ok(blob_from_dlpack(&c, &m, BLOB_HOST_ONLY));
    ck_assert_int_eq(blob_get_dtype(c), dt);
    const void *p;
    ck_ok(blob_cpu_data(c, &p));
    ck_assert_ptr_eq(p, mem);
    blob_free(c);
    ck_assert_int_eq(deleted, 1);
    m.dl_tensor.dtype.lanes = 2;
    ck_status(blob_from_dlpack(&c, &m, BLOB_HOST_ONLY), BLOB_EINVAL);
    ck_assert_int_eq(deleted, 1);
    blob_free(b);
}
END_TEST

/* ---- allocation failures under the fake device ---- */

/* Each allocation of create and of a converting copy that reshapes fails in turn: the
 * call reports it and the destination is as it was. */
START_TEST(test_alloc_failures)
{
    for (uint64_t k = 1;; k++) {
        ck_assert_msg(k < 16, "never succeeded");
        blob *src = make(BLOB_FLOAT32, BLOB_DEVICE_DEFAULT, 4, 8);
        blob *dst = make(BLOB_BFLOAT16, BLOB_DEVICE_DEFAULT, 2, 2);
        void *p;
        ck_ok(blob_mutable_cpu_data(src, &p));
        test_fill(BLOB_FLOAT32, p, 32, -1, 1);
        uint16_t *d;
        ck_ok(blob_mutable_cpu_data(dst, (void **)&d));
        for (int i = 0; i < 4; i++)
            d[i] = (uint16_t)(0x3f80 + i);
        blob_syncedmem *mem = blob_data_mem(dst);
        fake_fail_alloc_at(k, false);
        blob_status st = blob_convert_from(dst, src, false, true);
        fake_fail_alloc_at(0, false);
        if (st == BLOB_OK) {
            blob_free(src);
            blob_free(dst);
            break;
        }
        ck_assert_msg(st == BLOB_ENOMEM || st == BLOB_EDEVMEM, "k=%llu: %s", (unsigned long long)k,
                      blob_status_name(st));
        ck_assert_int_eq(blob_count(dst), 4);
        ck_assert_ptr_eq(blob_data_mem(dst), mem);
        ck_ok(blob_cpu_data(dst, (const void **)&d));
        for (int i = 0; i < 4; i++)
            ck_assert_uint_eq(d[i], 0x3f80 + i);
        blob_free(src);
        blob_free(dst);
    }
    for (int i = 0; i < N_NEW; i++)
        for (uint64_t k = 1; k <= 2; k++) {
            blob *b = (blob *)&b;
            int64_t s[] = {3};
            fake_fail_alloc_at(k, false);
            ck_status(blob_create(&b, NEW_DTYPES[i], BLOB_DEVICE_DEFAULT, 1, s), BLOB_ENOMEM);
            fake_fail_alloc_at(0, false);
            ck_assert_ptr_null(b);
        }
}
END_TEST

/* ---- a real GPU: each operation against the host ---- */

/* Every pattern and the tricky float32 values converted on the GPU: the host's bits. */
START_TEST(test_gpu_convert)
{
    blob_dtype dt = test_halves[_i];
    test_seed(31);
    int64_t n;
    float *x = tricky_alloc(dt, &n);
    uint16_t *host = malloc((size_t)n * sizeof *host), *dev = malloc((size_t)n * sizeof *dev);
    blob *f = make(BLOB_FLOAT32, 0, 1, n), *h = make(dt, 0, 1, n),
         *back = make(BLOB_FLOAT64, 0, 1, n);
    void *p;
    ck_ok(blob_mutable_cpu_data(f, &p));
    memcpy(p, x, (size_t)n * sizeof *x);
    const void *g;
    ck_ok(blob_gpu_data(f, &g));
    ck_ok(blob_convert_from(h, f, false, false));
    ck_assert_int_eq(blob_syncedmem_head(blob_data_mem(h)), BLOB_HEAD_AT_GPU);
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, dt, n, x, host));
    const void *hv;
    ck_ok(blob_cpu_data(h, &hv));
    ck_assert(!memcmp(hv, host, (size_t)n * sizeof *host));
    ck_ok(blob_convert_from(back, h, false, false)); /* widening on the GPU */
    double *wide = malloc((size_t)n * sizeof *wide);
    ck_ok(blob_cpu_convert(dt, BLOB_FLOAT64, n, host, wide));
    const void *bv;
    ck_ok(blob_cpu_data(back, &bv));
    ck_assert(!memcmp(bv, wide, (size_t)n * sizeof *wide));
    /* all patterns to the other 16-bit dtype and to float32 */
    blob *all = make(dt, 0, 1, 65536), *other = make(test_halves[1 - _i], 0, 1, 65536);
    uint16_t *pat;
    ck_ok(blob_mutable_cpu_data(all, (void **)&pat));
    for (uint32_t q = 0; q < 65536; q++)
        pat[q] = (uint16_t)q;
    ck_ok(blob_gpu_data(all, &g));
    ck_ok(blob_convert_from(other, all, false, false));
    ck_ok(blob_cpu_convert(dt, test_halves[1 - _i], 65536, pat, dev));
    ck_ok(blob_cpu_data(other, &hv));
    ck_assert(!memcmp(hv, dev, 65536 * sizeof *dev));
    free(x);
    free(host);
    free(dev);
    free(wide);
    blob_free(f);
    blob_free(h);
    blob_free(back);
    blob_free(all);
    blob_free(other);
}
END_TEST

START_TEST(test_gpu_half_math) { check_half_math(test_halves[_i], true); }
END_TEST

/* update and scale give the host's bits on the GPU. */
START_TEST(test_gpu_half_bits)
{
    blob_dtype dt = test_halves[_i];
    test_seed(77);
    blob *g = make(dt, 0, 100, 37), *h = make(dt, BLOB_HOST_ONLY, 100, 37);
    double *x, *d;
    fill_half(g, false, -3, 3, &x);
    fill_half(g, true, -3, 3, &d);
    ck_ok(blob_copy_from(h, g, false, false));
    ck_ok(blob_copy_from(h, g, true, false));
    const void *p;
    ck_ok(blob_gpu_data(g, &p));
    ck_ok(blob_gpu_diff(g, &p));
    ck_ok(blob_update(g));
    ck_ok(blob_update(h));
    ck_ok(blob_scale_data(g, 0.3));
    ck_ok(blob_scale_data(h, 0.3));
    ck_assert_int_eq(blob_syncedmem_head(blob_data_mem(g)), BLOB_HEAD_AT_GPU);
    assert_same_bytes(g, false, h, false);
    free(x);
    free(d);
    blob_free(g);
    blob_free(h);
}
END_TEST

/* Integer blobs go to the GPU and back, copy there, and export as kDLCUDA. */
START_TEST(test_gpu_int_storage)
{
    blob_dtype dt = NEW_DTYPES[2 + _i];
    blob *a = make(dt, 0, 33, 3), *b = make(dt, 0, 33, 3), *h = make(dt, BLOB_HOST_ONLY, 33, 3);
    fill_bytes(a, false, 8);
    ck_ok(blob_copy_from(h, a, false, false));
    const void *g;
    ck_ok(blob_gpu_data(a, &g));
    void *w;
    ck_ok(blob_mutable_gpu_data(a, &w)); /* the device side is now the head */
    ck_ok(blob_copy_from(b, a, false, false));
    ck_assert_int_eq(blob_syncedmem_head(blob_data_mem(b)), BLOB_HEAD_AT_GPU);
    assert_same_bytes(b, false, h, false);
    DLManagedTensor *t;
    ck_ok(blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_DEVICE, 0, NULL, &t));
    ck_assert_int_eq(t->dl_tensor.device.device_type, kDLCUDA);
    ck_assert_uint_eq(t->dl_tensor.dtype.bits, 8 * blob_dtype_size(dt));
    blob_dlpack_delete(t);
    blob_free(a);
    blob_free(b);
    blob_free(h);
}
END_TEST

void dtype_suite(Suite *s)
{
    TCase *tc = suite_case(s, "host", NULL, 120, NULL, NULL);
    add_tests(tc, test_names_sizes);
    add_loop_tests(tc, 0, 2, test_round_trip_all_patterns);
    add_loop_tests(tc, 0, 2, test_round_float32);
    add_loop_tests(tc, 0, 2, test_round_float64);
    add_tests(tc, test_convert_between);
    add_tests(tc, test_convert_errors);
    add_loop_tests(tc, 0, N_NEW, test_storage);
    add_loop_tests(tc, 0, 3, test_int_math_refused);
    add_loop_tests(tc, 0, 2, test_half_math_host);
    add_loop_tests(tc, 0, 2, test_convert_from);
    add_loop_tests(tc, 0, N_NEW, test_dlpack_dtypes);

    TCase *npy = suite_case(s, "npy", NULL, 0, npy_setup, npy_teardown);
    add_loop_tests(npy, 0, 4, test_npy_round_trip);
    add_tests(npy, test_npy_dtypes);

    TCase *fake = suite_case(s, "fake", NULL, 0, fake_setup, fake_teardown);
    add_tests(fake, test_alloc_failures);

    TCase *gpu = suite_case(s, "gpu", "gpu", 120, NULL, NULL);
    add_loop_tests(gpu, 0, 2, test_gpu_convert);
    add_loop_tests(gpu, 0, 2, test_gpu_half_math);
    add_loop_tests(gpu, 0, 2, test_gpu_half_bits);
    add_loop_tests(gpu, 0, 3, test_gpu_int_storage);
}

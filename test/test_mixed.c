/* Mixed precision: the optimizer step over float32 master weights with 16-bit gradients
 * and working copies (host against the float32 step on the same values, GPU against the
 * host), the split step over bfloat16 working copies and their remainders (its halves
 * against every float32 pattern, the host against the mixed step bit for bit, the GPU
 * against the host), finding Inf and NaN, the gradient scaler (a forced overflow skips the step and
 * backs the scale off; steps without one grow it after the interval), and the ReLUs on
 * 16-bit storage. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/core.h"
#include "../src/kernels/optim_formula.h"
#include "testutil.h"

/* The optimizers under test: every kind, with the options that change the arithmetic
 * (test_optim_config's 1, 3, 5 and 6). */
static blob_optim config(int c)
{
    static const int picked[] = {1, 3, 5, 6};
    return test_optim_config(picked[c]);
}
enum { CONFIGS = 4 };

/* ---- n tensors of a mixed step, on one side: w, h, v (float32), g and work (16-bit) ---- */

enum { W, H, V, G, WORK, ARRAYS };

/* The 16-bit dtype of the step is dt[G] (and dt[WORK]). */
typedef test_arrays mixed;

/* A split step's arrays: its remainders (16-bit) in the master weights' slot. */
enum { LO = W };

/* Random weights in [-1, 1), zero histories; with gap, odd tensors start one element late
 * (misaligned for the kernel's vectors). */
static mixed mixed_new(blob_dtype half, bool gpu, int n, const int64_t *counts, bool gap)
{
    const blob_dtype dt[ARRAYS] = {
        [W] = BLOB_FLOAT32, [H] = BLOB_FLOAT32, [V] = BLOB_FLOAT32, [G] = half, [WORK] = half};
    return test_arrays_new(gpu, n, counts, 8, gap, ARRAYS, dt);
}

/* Fresh 16-bit gradients in [-1, 1) times scale (a power of two: exact), on the side:
 * tensor by tensor, so that two layouts (gaps or none) get the same values. */
static void fill_grads(mixed *m, double scale)
{
    float *g = calloc((size_t)m->total + 8, sizeof(float));
    for (int i = 0; i < m->n; i++) {
        float *t = g + m->offset[i];
        test_fill(BLOB_FLOAT32, t, m->counts[i], -1, 1);
        for (int64_t k = 0; k < m->counts[i]; k++)
            t[k] = (float)(t[k] * scale);
    }
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, m->dt[G], m->total, g, m->host[G]));
    free(g);
    test_arrays_sync(m, G, true);
}

static blob_status mixed_step(mixed *m, const blob_optim *o, double inv_scale)
{
    return (m->gpu ? blob_gpu_optim_step_mixed : blob_cpu_optim_step_mixed)(
        o, m->dt[G], inv_scale, m->n, m->counts, m->ptr[W], (const void *const *)m->ptr[G],
        m->ptr[H], m->ptr[V], m->ptr[WORK], m->step);
}

/* The working copy of every tensor is the master weights rounded (as blob_cpu_convert does
 * it): the same bits. Both arrays read back from the side. */
static void expect_work_is_rounded(mixed *m, const char *what)
{
    test_arrays_sync(m, W, false);
    test_arrays_sync(m, WORK, false);
    uint16_t *r = malloc(sizeof(uint16_t) * (size_t)m->total + 8);
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, m->dt[G], m->total, m->host[W], r));
    const uint16_t *got = m->host[WORK];
    for (int i = 0; i < m->n; i++)
        for (int64_t j = 0; j < m->counts[i]; j++) {
            const int64_t k = m->offset[i] + j;
            ck_assert_msg(got[k] == r[k],
                          "%s: work of tensor %d [%lld] = 0x%04x, rounded "
                          "master 0x%04x",
                          what, i, (long long)j, got[k], r[k]);
        }
    free(r);
}

/* Float arrays p (of x's layout) within tol * max(|q|, 1) of q (of y's), per element. */
static void expect_close_at(const mixed *x, const float *p, const mixed *y, const float *q, int a,
                            double tol, const char *what)
{
    int bad = 0;
    for (int i = 0; i < x->n; i++)
        for (int64_t j = 0; j < x->counts[i]; j++) {
            const int64_t kx = x->offset[i] + j, ky = y->offset[i] + j;
            if (!(fabs((double)p[kx] - q[ky]) <= tol * fmax(fabs(q[ky]), 1)) && bad++ < 5)
                fprintf(stderr, "%s: array %d of tensor %d [%lld] = %.9g, expected %.9g\n", what, a,
                        i, (long long)j, p[kx], q[ky]);
        }
    ck_assert_msg(!bad, "%s: %d values of array %d differ (see above)", what, bad, a);
}

/* Float array a of x within tol * max(|y|, 1) of y's, per element (both read back). */
static void expect_close(mixed *x, mixed *y, int a, double tol, const char *what)
{
    test_arrays_sync(x, a, false);
    test_arrays_sync(y, a, false);
    expect_close_at(x, x->host[a], y, y->host[a], a, tol, what);
}

/* ---- Split master weights: arrays of a split step ---- */

/* The arrays of a split step (bfloat16) of m's layout, master weights of m's W split. */
static mixed split_new(const mixed *m, const int64_t *counts, bool gap)
{
    const blob_dtype dt[ARRAYS] = {[LO] = BLOB_BFLOAT16,
                                   [H] = BLOB_FLOAT32,
                                   [V] = BLOB_FLOAT32,
                                   [G] = BLOB_BFLOAT16,
                                   [WORK] = BLOB_BFLOAT16};
    mixed s = test_arrays_new(m->gpu, m->n, counts, 8, gap, ARRAYS, dt);
    ck_ok(blob_cpu_master_split(m->total, m->host[W], s.host[WORK], s.host[LO]));
    return s;
}

static blob_status split_step(mixed *m, const blob_optim *o, double inv_scale)
{
    return (m->gpu ? blob_gpu_optim_step_split : blob_cpu_optim_step_split)(
        o, inv_scale, m->n, m->counts, m->ptr[WORK], m->ptr[LO], (const void *const *)m->ptr[G],
        m->ptr[H], m->ptr[V], m->step);
}

/* The master weights of a split step's arrays, joined (read back; malloc'ed). */
static float *split_joined(mixed *m)
{
    test_arrays_sync(m, WORK, false);
    test_arrays_sync(m, LO, false);
    float *w = malloc(sizeof(float) * (size_t)m->total + 8);
    ck_ok(blob_cpu_master_join(m->total, m->host[WORK], m->host[LO], w));
    return w;
}

/* ---- Host ---- */

/* The mixed host step against the float32 host step on the widened gradients: the same
 * arithmetic, so the same bits; and a loss scale of 1024 divided back out changes nothing
 * (a power of two, exact in both 16-bit dtypes for gradients in [-1024, 1024]). */
START_TEST(test_cpu_mixed_matches_float32)
{
    const blob_dtype half = test_halves[_i % 2];
    const blob_optim o = config(_i / 2);
    test_seed(3 + (uint64_t)_i);
    const int64_t counts[] = {1, 7, 4096 + 3, 33};
    mixed m = mixed_new(half, false, 4, counts, _i % 2);
    mixed scaled = mixed_new(half, false, 4, counts, _i % 2); /* m's offsets */
    const size_t wb = m.bytes[W];
    memcpy(scaled.host[W], m.host[W], wb);
    /* the float32 step's own w, g, h, v, at m's offsets */
    float *w = malloc(wb), *g = malloc(wb), *h = calloc(1, wb), *v = calloc(1, wb);
    memcpy(w, m.host[W], wb);
    void *pw[4], *pg[4], *ph[4], *pv[4];
    for (int i = 0; i < 4; i++) {
        pw[i] = w + m.offset[i], pg[i] = g + m.offset[i];
        ph[i] = h + m.offset[i], pv[i] = v + m.offset[i];
    }
    test_arrays_init(&m);
    test_arrays_init(&scaled);
    int64_t step32[BLOB_OPTIM_STEP_WORDS] = {0};
    for (int s = 0; s < 5; s++) {
        test_seed(100 + (uint64_t)s);
        fill_grads(&m, 1);
        test_seed(100 + (uint64_t)s);
        fill_grads(&scaled, 1024);
        ck_ok(blob_cpu_convert(half, BLOB_FLOAT32, m.total, m.host[G], g));
        ck_ok(mixed_step(&m, &o, 1));
        ck_ok(mixed_step(&scaled, &o, 1.0 / 1024));
        ck_ok(blob_cpu_optim_step(&o, BLOB_FLOAT32, 4, counts, pw, (const void *const *)pg, ph, pv,
                                  step32));
    }
    ck_assert_int_eq(m.step[0], 5);
    test_arrays_sync(&m, W, false);
    test_arrays_sync(&m, H, false);
    test_arrays_sync(&scaled, W, false);
    const float *mw = m.host[W], *sw = scaled.host[W], *mh = m.host[H];
    for (int i = 0; i < 4; i++)
        for (int64_t j = 0; j < counts[i]; j++) {
            const int64_t k = m.offset[i] + j;
            ck_assert_msg(mw[k] == w[k] && mh[k] == h[k],
                          "tensor %d [%lld]: mixed %.9g %.9g, "
                          "float32 %.9g %.9g",
                          i, (long long)j, mw[k], mh[k], w[k], h[k]);
            ck_assert_msg(sw[k] == mw[k], "tensor %d [%lld]: scaled %.9g, unscaled %.9g", i,
                          (long long)j, sw[k], mw[k]);
        }
    expect_work_is_rounded(&m, "host");
    free(w), free(g), free(h), free(v);
    test_arrays_free(&m);
    test_arrays_free(&scaled);
}
END_TEST

/* Float32 bits b split into hi and lo, joined back as back, rounded by blob_cpu_convert as
 * rne: b back exactly (a NaN: a NaN of its sign, lo 0), hi rounded to nearest with ties away
 * from zero, the rounding of blob_cpu_convert but on ties. */
static void check_split_bits(uint32_t b, uint16_t hi, uint16_t lo, uint32_t back, uint16_t rne)
{
    ck_assert_msg(hi == BLOB__MASTER_HI(b) && lo == BLOB__MASTER_LO(b) &&
                      back == BLOB__MASTER_JOIN(hi, lo),
                  "0x%08x: the arrays' halves are not the macros'", b);
    if (isnan(test_bits_f32(b))) {
        ck_assert_msg(isnan(test_bits_f32(back)) && (back >> 31) == (b >> 31) && lo == 0 &&
                          (hi & 0x7fc0) == 0x7fc0,
                      "0x%08x: hi 0x%04x lo 0x%04x", b, hi, lo);
        return;
    }
    ck_assert_msg(back == b, "0x%08x joined back as 0x%08x (hi 0x%04x, lo 0x%04x)", b, back, hi,
                  lo);
    ck_assert_int_eq(hi & 0x8000, (b >> 16) & 0x8000); /* the sign */
    if ((b & 0xffff) != 0x8000)                        /* nearest: as blob_cpu_convert */
        ck_assert_msg(hi == rne, "0x%08x: hi 0x%04x, rounded 0x%04x", b, hi, rne);
    else /* a tie: away from zero */
        ck_assert_msg(hi == (uint16_t)((b >> 16) + 1), "0x%08x: hi 0x%04x on a tie", b, hi);
}

START_TEST(test_cpu_master_split_join)
{
    const uint32_t edges[] = {
        0x00000000, 0x80000000,                         /* zeros */
        0x00000001, 0x80000001, 0x00007fff, 0x00008000, /* denormals */
        0x00008001, 0x0000ffff, 0x007fffff, 0x807fffff, 0x007f8000, 0x80ff8000,
        0x00800000, 0x3f800000, 0xbf800000, 0x3f808000, 0x3f818000, /* normals, ties */
        0x3f7f8000, 0x3fff8000, 0xbf7fffff, 0x407fc000,             /* carries into the exponent */
        0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f7f7fff, 0xff7f8000, /* FLT_MAX, rounding to Inf */
        0x7f800000, 0xff800000,                                     /* Inf */
        0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fffffff, 0xffffffff,
        0x7fbf8000, 0xff80ffff, /* NaNs, quiet and signaling */
    };
    const int64_t ne = (int64_t)(sizeof edges / sizeof edges[0]), count = ne + 2 * (1 << 20);
    const size_t n4 = sizeof(uint32_t) * (size_t)count, n2 = sizeof(uint16_t) * (size_t)count;
    uint32_t *b = malloc(n4), *back = malloc(n4);
    float *f = malloc(n4), *g = malloc(n4);
    uint16_t *hi = malloc(n2), *lo = malloc(n2), *rne = malloc(n2);
    memcpy(b, edges, sizeof edges);
    test_seed(91);
    for (int64_t k = ne; k < count; k += 2) {
        b[k] = (uint32_t)test_uniform(0, 65536) << 16 | (uint32_t)test_uniform(0, 65536);
        b[k + 1] = (b[k] & 0xffff0000) | 0x8000; /* its tie */
    }
    memcpy(f, b, n4);
    ck_ok(blob_cpu_master_split(count, f, hi, lo));
    ck_ok(blob_cpu_master_join(count, hi, lo, g));
    memcpy(back, g, n4);
    ck_ok(blob_cpu_convert(BLOB_FLOAT32, BLOB_BFLOAT16, count, f, rne));
    for (int64_t k = 0; k < count; k++)
        check_split_bits(b[k], hi[k], lo[k], back[k], rne[k]);
    /* every hi with remainders: split(join) is the identity where the join is not a NaN */
    const uint16_t los[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234, 0xedcb};
    const int64_t pairs = 65536 * 8;
    uint16_t *h2 = malloc(n2), *l2 = malloc(n2);
    for (int64_t k = 0; k < pairs; k++)
        hi[k] = (uint16_t)(k / 8), lo[k] = los[k % 8];
    ck_ok(blob_cpu_master_join(pairs, hi, lo, f));
    ck_ok(blob_cpu_master_split(pairs, f, h2, l2));
    int64_t joined = 0;
    for (int64_t k = 0; k < pairs; k++) {
        if (isnan(f[k]))
            continue;
        joined++;
        ck_assert_msg(h2[k] == hi[k] && l2[k] == lo[k],
                      "hi 0x%04x lo 0x%04x split back as 0x%04x 0x%04x", hi[k], lo[k], h2[k],
                      l2[k]);
    }
    ck_assert_int_gt(joined, 65536 * 7);
    free(b), free(back), free(f), free(g), free(hi), free(lo), free(rne), free(h2), free(l2);
    /* arrays, and a count of 0 with NULL arrays */
    const float x[] = {1.0f, -0x1.0101p0f, FLT_MAX, -FLT_MIN / 3, INFINITY, -0.0f};
    uint16_t xh[6], xl[6];
    float y[6];
    ck_ok(blob_cpu_master_split(6, x, xh, xl));
    ck_ok(blob_cpu_master_join(6, xh, xl, y));
    ck_assert(memcmp(x, y, sizeof x) == 0);
    ck_ok(blob_cpu_master_split(0, NULL, NULL, NULL));
    ck_ok(blob_cpu_master_join(0, NULL, NULL, NULL));
}
END_TEST

/* The split host step against the mixed host step from the same master weights, on every
 * optimizer of test_optim_config: after each step the joined master weights and the
 * histories are the mixed step's bit for bit, the working copy is those weights rounded
 * with ties away from zero, and it differs from the mixed step's working copy (ties to
 * even) on ties alone. */
START_TEST(test_cpu_split_matches_mixed)
{
    const blob_optim o = test_optim_config(_i / 2);
    const bool gap = _i % 2;
    test_seed(41 + (uint64_t)_i);
    const int64_t counts[] = {1, 7, 4096 + 3, 33, 0, 5};
    mixed m = mixed_new(BLOB_BFLOAT16, false, 6, counts, gap);
    /* weights of every size, with ties of the rounding among them */
    float *mw = m.host[W];
    for (int64_t k = 0; k < m.total; k++) {
        mw[k] = (float)(mw[k] * pow(2, (double)(k % 30) - 15));
        if (k % 5 == 0)
            mw[k] = test_bits_f32((test_f32_bits(mw[k]) & 0xffff0000) | 0x8000);
    }
    mixed s = split_new(&m, counts, gap);
    test_arrays_init(&m);
    test_arrays_init(&s);
    for (int st = 0; st < 5; st++) {
        test_seed(500 + (uint64_t)st);
        fill_grads(&m, 1);
        memcpy(s.host[G], m.host[G], m.bytes[G]);
        test_arrays_sync(&s, G, true);
        ck_ok(mixed_step(&m, &o, 0.5));
        ck_ok(split_step(&s, &o, 0.5));
        for (int a = W; a < ARRAYS; a++)
            if (a != G) {
                test_arrays_sync(&m, a, false);
                test_arrays_sync(&s, a, false);
            }
        float *joined = split_joined(&s);
        const uint16_t *work = s.host[WORK], *mwork = m.host[WORK];
        const float *sh = s.host[H], *mh = m.host[H], *sv = s.host[V], *mv = m.host[V];
        for (int i = 0; i < m.n; i++)
            for (int64_t j = 0; j < counts[i]; j++) {
                const int64_t k = m.offset[i] + j;
                const uint32_t b = test_f32_bits(mw[k]);
                ck_assert_msg(test_f32_bits(joined[k]) == b && sh[k] == mh[k] && sv[k] == mv[k],
                              "step %d tensor %d [%lld]: split %.9g (0x%08x) %.9g %.9g, mixed "
                              "%.9g (0x%08x) %.9g %.9g",
                              st, i, (long long)j, joined[k], test_f32_bits(joined[k]), sh[k],
                              sv[k], mw[k], b, mh[k], mv[k]);
                ck_assert_int_eq(work[k], BLOB__MASTER_HI(b));
                if (work[k] != mwork[k]) {
                    ck_assert_msg((b & 0xffff) == 0x8000, "0x%08x: work 0x%04x, mixed 0x%04x", b,
                                  work[k], mwork[k]);
                }
            }
        free(joined);
    }
    ck_assert_int_eq(s.step[0], 5);
    test_arrays_free(&m);
    test_arrays_free(&s);
}
END_TEST

/* Bad arguments of the split step: the mixed step's errors, a NULL lo; nothing changes. */
START_TEST(test_split_errors)
{
    const blob_optim o = test_optim_config(5); /* Adam: both histories */
    float h[4] = {1, 2, 3, 4}, v[4] = {1, 2, 3, 4};
    uint16_t g[4] = {0x3f80, 0x3f80, 0x3f80, 0x3f80}, work[4] = {0x3f80, 0x4000, 0, 0x8000},
             lo[4] = {1, 0x8000, 0xffff, 0};
    int64_t counts[] = {4}, bad_counts[] = {-1};
    void *pk[] = {work}, *pl[] = {lo}, *ph[] = {h}, *pv[] = {v}, *none[] = {NULL};
    const void *pg[] = {g}, *nog[] = {NULL};
    int64_t step[BLOB_OPTIM_STEP_WORDS] = {0};
    float h0[4], v0[4];
    uint16_t work0[4], lo0[4];
    memcpy(h0, h, sizeof h), memcpy(v0, v, sizeof v);
    memcpy(work0, work, sizeof work), memcpy(lo0, lo, sizeof lo);
    blob_status (*steps[2])(const blob_optim *, double, int, const int64_t *, void *const *,
                            void *const *, const void *const *, void *const *, void *const *,
                            int64_t *) = {blob_cpu_optim_step_split, blob_gpu_optim_step_split};
    for (int side = 0; side < 2; side++) {
        blob_status (*f)(const blob_optim *, double, int, const int64_t *, void *const *,
                         void *const *, const void *const *, void *const *, void *const *,
                         int64_t *) = steps[side];
        ck_status(f(&o, 1, 1, counts, pk, NULL, pg, ph, pv, step), BLOB_EINVAL);
        ck_assert_ptr_nonnull(strstr(blob_last_error(), "lo is NULL"));
        ck_assert_ptr_nonnull(strstr(blob_last_error(), side ? "blob_gpu_optim_step_split"
                                                             : "blob_cpu_optim_step_split"));
        ck_status(f(&o, 1, 1, counts, pk, none, pg, ph, pv, step), BLOB_EINVAL);
        ck_status(f(&o, 1, 1, counts, NULL, pl, pg, ph, pv, step), BLOB_EINVAL);
        ck_status(f(&o, 1, 1, counts, none, pl, pg, ph, pv, step), BLOB_EINVAL);
        ck_status(f(&o, 1, 1, counts, pk, pl, NULL, ph, pv, step), BLOB_EINVAL);
        ck_status(f(&o, 1, 1, counts, pk, pl, nog, ph, pv, step), BLOB_EINVAL);
        ck_status(f(&o, 1, 1, counts, pk, pl, pg, ph, none, step), BLOB_EINVAL);
        ck_status(f(&o, 1, 1, counts, pk, pl, pg, ph, pv, NULL), BLOB_EINVAL);
        ck_status(f(NULL, 1, 1, counts, pk, pl, pg, ph, pv, step), BLOB_EINVAL);
        const double factors[] = {0, -1, INFINITY, NAN, 1e300};
        for (int k = 0; k < 5; k++)
            ck_status(f(&o, factors[k], 1, counts, pk, pl, pg, ph, pv, step), BLOB_EINVAL);
        ck_status(f(&o, 1, -1, counts, pk, pl, pg, ph, pv, step), BLOB_EINVAL);
        ck_status(f(&o, 1, 1, bad_counts, pk, pl, pg, ph, pv, step), BLOB_EINVAL);
        blob_optim bad = o;
        bad.lr = -1;
        ck_status(f(&bad, 1, 1, counts, pk, pl, pg, ph, pv, step), BLOB_EINVAL);
        /* nothing changed */
        ck_assert_int_eq(step[0], 0);
        ck_assert(memcmp(h, h0, sizeof h) == 0 && memcmp(v, v0, sizeof v) == 0);
        ck_assert(memcmp(work, work0, sizeof work) == 0 && memcmp(lo, lo0, sizeof lo) == 0);
    }
    /* no tensors: nothing needed, the step counted */
    ck_ok(blob_cpu_optim_step_split(&o, 1, 0, NULL, NULL, NULL, NULL, NULL, NULL, step));
    ck_assert_int_eq(step[0], 1);
    float m[2];
    ck_status(blob_cpu_master_split(-1, m, work, lo), BLOB_EINVAL);
    ck_status(blob_cpu_master_split(2, NULL, work, lo), BLOB_EINVAL);
    ck_status(blob_cpu_master_split(2, m, NULL, lo), BLOB_EINVAL);
    ck_status(blob_cpu_master_join(2, work, NULL, m), BLOB_EINVAL);
    ck_status(blob_cpu_master_join(-2, work, lo, m), BLOB_EINVAL);
    ck_assert(memcmp(work, work0, sizeof work) == 0 && memcmp(lo, lo0, sizeof lo) == 0);
}
END_TEST

START_TEST(test_cpu_find_nonfinite)
{
    const blob_dtype dt = (blob_dtype)_i; /* every float dtype */
    const int64_t counts[] = {5, 0, 9};
    double src[14];
    for (int k = 0; k < 14; k++)
        src[k] = k - 6.5;
    char a[14 * 8], b[14 * 8];
    ck_ok(blob_cpu_convert(BLOB_FLOAT64, dt, 14, src, a));
    const size_t es = blob_dtype_size(dt);
    const void *x[] = {a, a + 5 * es, a + 5 * es};
    int32_t found = 0;
    ck_ok(blob_cpu_find_nonfinite(dt, 3, counts, x, &found));
    ck_assert_int_eq(found, 0);
    const double bad[] = {INFINITY, -INFINITY, NAN};
    for (int t = 0; t < 3; t++) {
        memcpy(b, a, sizeof b);
        ck_ok(blob_cpu_convert(BLOB_FLOAT64, dt, 1, &bad[t], b + 12 * es));
        const void *y[] = {b, b + 5 * es, b + 5 * es};
        found = 0;
        ck_ok(blob_cpu_find_nonfinite(dt, 3, counts, y, &found));
        ck_assert_int_eq(found, 1);
        ck_ok(blob_cpu_find_nonfinite(dt, 3, counts, x, &found)); /* stays set */
        ck_assert_int_eq(found, 1);
    }
}
END_TEST

START_TEST(test_mixed_errors)
{
    const blob_optim o = config(2);
    float w[4] = {0}, h[4] = {0}, v[4] = {0};
    uint16_t g[4] = {0}, work[4] = {0};
    const int64_t counts[] = {4};
    void *pw[] = {w}, *ph[] = {h}, *pv[] = {v}, *pk[] = {work};
    const void *pg[] = {g};
    int64_t step[BLOB_OPTIM_STEP_WORDS] = {0};
    ck_status(blob_cpu_optim_step_mixed(&o, BLOB_FLOAT32, 1, 1, counts, pw, pg, ph, pv, pk, step),
              BLOB_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "float32"));
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "blob_cpu_optim_step_mixed"));
    ck_status(blob_gpu_optim_step_mixed(&o, BLOB_INT32, 1, 1, counts, pw, pg, ph, pv, pk, step),
              BLOB_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "int32"));
    ck_status(blob_cpu_optim_step_mixed(&o, BLOB_FLOAT16, 0, 1, counts, pw, pg, ph, pv, pk, step),
              BLOB_EINVAL);
    ck_status(
        blob_cpu_optim_step_mixed(&o, BLOB_FLOAT16, INFINITY, 1, counts, pw, pg, ph, pv, pk, step),
        BLOB_EINVAL);
    ck_status(blob_cpu_optim_step_mixed(&o, BLOB_FLOAT16, 1, 1, counts, pw, pg, ph, pv, NULL, step),
              BLOB_EINVAL);
    void *nowork[] = {NULL};
    ck_status(
        blob_cpu_optim_step_mixed(&o, BLOB_FLOAT16, 1, 1, counts, pw, pg, ph, pv, nowork, step),
        BLOB_EINVAL);
    ck_assert_int_eq(step[0], 0);
    int32_t found = 0;
    const void *ints[] = {w};
    ck_status(blob_cpu_find_nonfinite(BLOB_INT32, 1, counts, ints, &found), BLOB_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "int32"));
    blob_grad_scaler *sc;
    ck_status(blob_grad_scaler_create(&sc, 0), BLOB_EINVAL);
    ck_assert_ptr_null(sc);
    ck_ok(blob_grad_scaler_create(&sc, 8));
    ck_status(blob_grad_scaler_set(sc, 1, 0.5, 10), BLOB_EINVAL);
    ck_status(blob_grad_scaler_set(sc, 2, 1, 10), BLOB_EINVAL);
    ck_status(blob_grad_scaler_set(sc, 2, 0.5, 0), BLOB_EINVAL);
    ck_assert_double_eq(blob_grad_scaler_scale(sc), 8);
    blob_grad_scaler_free(sc);
}
END_TEST

/* ---- 16-bit layer kernels ---- */

/* n 16-bit values of dtype half: signed values of every size, zeros of both signs, Inf and
 * NaN among them. */
static uint16_t *half_values(blob_dtype half, int64_t n)
{
    double *d = malloc(sizeof(double) * (size_t)n);
    for (int64_t k = 0; k < n; k++)
        d[k] = test_uniform(-1, 1) * pow(2, (double)(k % 40) - 20);
    const double special[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN};
    for (int64_t k = 0; k < n && k < 6; k++)
        d[k * 7 % n] = special[k];
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    ck_ok(blob_cpu_convert(BLOB_FLOAT64, half, n, d, h));
    free(d);
    return h;
}

/* The host's ReLUs on 16-bit floats: the element's bits where x > 0, +0 elsewhere. */
START_TEST(test_cpu_relu_half)
{
    const blob_dtype half = test_halves[_i];
    test_seed(5);
    const int64_t n = 1001;
    uint16_t *x = half_values(half, n), *dy = half_values(half, n);
    uint16_t *y = malloc(sizeof(uint16_t) * n), *dx = malloc(sizeof(uint16_t) * n);
    ck_ok(blob_cpu_relu_forward(half, n, x, y));
    ck_ok(blob_cpu_relu_backward(half, n, x, dy, dx));
    for (int64_t k = 0; k < n; k++) {
        double v;
        ck_ok(blob_cpu_convert(half, BLOB_FLOAT64, 1, &x[k], &v));
        ck_assert_int_eq(y[k], v > 0 ? x[k] : 0);
        ck_assert_int_eq(dx[k], v > 0 ? dy[k] : 0);
    }
    ck_ok(blob_cpu_relu_forward(half, n, x, x)); /* in place */
    ck_assert(memcmp(x, y, sizeof(uint16_t) * n) == 0);
    ck_status(blob_cpu_relu_forward(BLOB_INT32, 1, x, y), BLOB_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "int32"));
    free(x), free(dy), free(y), free(dx);
}
END_TEST

/* The GPU's ReLUs on 16-bit floats give the host's bits. */
START_TEST(test_gpu_relu_half)
{
    const blob_dtype half = test_halves[_i];
    test_seed(6);
    const int64_t n = 300007;
    const size_t bytes = sizeof(uint16_t) * (size_t)n;
    uint16_t *x = half_values(half, n), *dy = half_values(half, n);
    uint16_t *y = malloc(bytes), *dx = malloc(bytes), *gy = malloc(bytes), *gdx = malloc(bytes);
    ck_ok(blob_cpu_relu_forward(half, n, x, y));
    ck_ok(blob_cpu_relu_backward(half, n, x, dy, dx));
    void *d[4], *s = blob_stream_get();
    for (int a = 0; a < 4; a++)
        ck_ok(blob__be->device_alloc(bytes, &d[a]));
    ck_ok(blob__be->copy_async(d[0], x, bytes, BLOB__H2D, s));
    ck_ok(blob__be->copy_async(d[1], dy, bytes, BLOB__H2D, s));
    ck_ok(blob_gpu_relu_forward(half, n, d[0], d[2]));
    ck_ok(blob_gpu_relu_backward(half, n, d[0], d[1], d[3]));
    ck_ok(blob__be->copy_async(gy, d[2], bytes, BLOB__D2H, s));
    ck_ok(blob__be->copy_async(gdx, d[3], bytes, BLOB__D2H, s));
    ck_ok(blob__be->stream_synchronize(s));
    ck_assert(memcmp(gy, y, bytes) == 0);
    ck_assert(memcmp(gdx, dx, bytes) == 0);
    for (int a = 0; a < 4; a++)
        blob__be->device_free(d[a]);
    free(x), free(dy), free(y), free(dx), free(gy), free(gdx);
}
END_TEST

/* ---- Blob level: master and working-copy blobs, the scaler ---- */

typedef struct {
    blob *master[2], *work[2];
} net;

static net net_new(int device, blob_dtype half)
{
    net t;
    const int64_t shapes[2][2] = {{33, 17}, {1, 10}};
    for (int i = 0; i < 2; i++) {
        ck_ok(blob_create(&t.master[i], BLOB_FLOAT32, device, 2, shapes[i]));
        ck_ok(blob_create(&t.work[i], half, device, 2, shapes[i]));
        void *p;
        ck_ok(blob_mutable_cpu_data(t.master[i], &p));
        test_fill(BLOB_FLOAT32, p, blob_count(t.master[i]), -1, 1);
    }
    return t;
}

static void net_free(net *t)
{
    for (int i = 0; i < 2; i++) {
        blob_free(t->master[i]);
        blob_free(t->work[i]);
    }
}

/* Gradients in [-1, 1) times scale into the works' diffs (host side), and, with bad, an
 * Inf or NaN among them. */
static void net_grads(net *t, double scale, double bad)
{
    for (int i = 0; i < 2; i++) {
        const int64_t n = blob_count(t->work[i]);
        float *g = malloc(sizeof(float) * (size_t)n);
        test_fill(BLOB_FLOAT32, g, n, -1, 1);
        for (int64_t k = 0; k < n; k++)
            g[k] = (float)(g[k] * scale);
        if (bad != 0 && i == 1)
            g[n / 2] = (float)bad;
        void *p;
        ck_ok(blob_mutable_cpu_diff(t->work[i], &p));
        ck_ok(blob_cpu_convert(BLOB_FLOAT32, blob_get_dtype(t->work[i]), n, g, p));
        free(g);
    }
}

/* Bring the blobs' data and diffs to the GPU, so that the steps run there. */
static void net_to_gpu(net *t)
{
    const void *p;
    for (int i = 0; i < 2; i++) {
        ck_ok(blob_gpu_data(t->master[i], &p));
        ck_ok(blob_gpu_diff(t->work[i], &p));
    }
}

static float *master_values(net *t, int i)
{
    const void *p;
    ck_ok(blob_cpu_data(t->master[i], &p));
    const size_t bytes = sizeof(float) * (size_t)blob_count(t->master[i]);
    return memcpy(malloc(bytes), p, bytes);
}

/* Each working copy is its master rounded. */
static void net_expect_work(net *t)
{
    for (int i = 0; i < 2; i++) {
        const int64_t n = blob_count(t->master[i]);
        const void *m, *w;
        ck_ok(blob_cpu_data(t->master[i], &m));
        ck_ok(blob_cpu_data(t->work[i], &w));
        uint16_t *r = malloc(sizeof(uint16_t) * (size_t)n);
        ck_ok(blob_cpu_convert(BLOB_FLOAT32, blob_get_dtype(t->work[i]), n, m, r));
        ck_assert_msg(memcmp(r, w, sizeof(uint16_t) * (size_t)n) == 0,
                      "param %d: the working copy is not the master rounded", i);
        free(r);
    }
}

/* A forced overflow: the step is skipped (nothing written, no step counted) and the scale
 * halves; steps without overflow leave the scale until the interval, then double it. */
static void check_scaler(int device, bool gpu, blob_dtype half)
{
    test_seed(21 + (uint64_t)gpu);
    net t = net_new(device, half);
    const blob_optim o = config(3);
    blob_optim_state *state;
    ck_ok(blob_optim_state_create(&state));
    blob_grad_scaler *sc;
    ck_ok(blob_grad_scaler_create(&sc, 1024));
    ck_ok(blob_grad_scaler_set(sc, 2, 0.5, 3));
    bool skipped = true;
    int64_t steps;
    for (int s = 1; s <= 2; s++) {
        net_grads(&t, blob_grad_scaler_scale(sc), 0);
        if (gpu)
            net_to_gpu(&t);
        ck_ok(blob_grad_scaler_unscale(sc, t.work, 2));
        ck_ok(blob_optim_step_mixed(&o, t.master, t.work, 2, state, sc, &skipped));
        ck_assert(!skipped);
        ck_assert_double_eq(blob_grad_scaler_scale(sc), 1024);
    }
    net_expect_work(&t);
    /* the overflow: an Inf (float16 past 65504 is Inf too), then a NaN */
    const double bads[2] = {INFINITY, NAN};
    double scale = 1024;
    for (int b = 0; b < 2; b++) {
        float *before = master_values(&t, 1);
        net_grads(&t, blob_grad_scaler_scale(sc), bads[b]);
        if (gpu)
            net_to_gpu(&t);
        ck_ok(blob_grad_scaler_unscale(sc, t.work, 2));
        ck_ok(blob_optim_step_mixed(&o, t.master, t.work, 2, state, sc, &skipped));
        ck_assert_msg(skipped, "an overflow did not skip the step");
        scale /= 2;
        ck_assert_double_eq(blob_grad_scaler_scale(sc), scale);
        ck_ok(blob_optim_state_steps(state, &steps));
        ck_assert_int_eq(steps, 2);
        float *after = master_values(&t, 1);
        ck_assert_msg(memcmp(before, after, sizeof(float) * 10) == 0,
                      "a skipped step changed the master weights");
        free(before), free(after);
    }
    /* three good steps (the step checks by itself when unscale was not called): growth */
    for (int s = 1; s <= 3; s++) {
        net_grads(&t, blob_grad_scaler_scale(sc), 0);
        if (gpu)
            net_to_gpu(&t);
        ck_ok(blob_optim_step_mixed(&o, t.master, t.work, 2, state, sc, &skipped));
        ck_assert(!skipped);
        ck_assert_double_eq(blob_grad_scaler_scale(sc), s < 3 ? scale : 2 * scale);
    }
    ck_ok(blob_optim_state_steps(state, &steps));
    ck_assert_int_eq(steps, 5);
    net_expect_work(&t);
    blob_grad_scaler_free(sc);
    blob_optim_state_free(state);
    net_free(&t);
}

START_TEST(test_blob_scaler_host) { check_scaler(BLOB_HOST_ONLY, false, test_halves[_i]); }
END_TEST

/* A scaled step is the unscaled step on the unscaled gradients (a power-of-two scale). */
START_TEST(test_blob_mixed_host)
{
    const blob_dtype half = test_halves[_i];
    test_seed(61);
    net a = net_new(BLOB_HOST_ONLY, half);
    test_seed(61);
    net b = net_new(BLOB_HOST_ONLY, half);
    const blob_optim o = config(0);
    blob_optim_state *sa, *sb;
    ck_ok(blob_optim_state_create(&sa));
    ck_ok(blob_optim_state_create(&sb));
    blob_grad_scaler *sc;
    ck_ok(blob_grad_scaler_create(&sc, 256));
    for (int s = 0; s < 3; s++) {
        test_seed(70 + (uint64_t)s);
        net_grads(&a, 1, 0);
        test_seed(70 + (uint64_t)s);
        net_grads(&b, 256, 0);
        bool skipped = true;
        ck_ok(blob_optim_step_mixed(&o, a.master, a.work, 2, sa, NULL, &skipped));
        ck_assert(!skipped);
        ck_ok(blob_optim_step_mixed(&o, b.master, b.work, 2, sb, sc, &skipped));
        ck_assert(!skipped);
    }
    for (int i = 0; i < 2; i++) {
        float *x = master_values(&a, i), *y = master_values(&b, i);
        ck_assert(memcmp(x, y, sizeof(float) * (size_t)blob_count(a.master[i])) == 0);
        free(x), free(y);
    }
    net_expect_work(&a);
    /* wrong blobs */
    blob_optim_state *fresh;
    ck_ok(blob_optim_state_create(&fresh));
    ck_status(blob_optim_step_mixed(&o, a.work, a.master, 2, fresh, NULL, NULL), BLOB_ENOTSUP);
    blob_optim_state_free(fresh);
    ck_status(blob_optim_step_mixed(&o, a.master, (blob *const[]){a.work[1], a.work[0]}, 2, sa,
                                    NULL, NULL),
              BLOB_ESHAPE);
    ck_status(blob_optim_step_mixed(&o, a.master, NULL, 2, sa, NULL, NULL), BLOB_EINVAL);
    blob_grad_scaler_free(sc);
    blob_optim_state_free(sa);
    blob_optim_state_free(sb);
    net_free(&a);
    net_free(&b);
}
END_TEST

/* ---- Real GPU ---- */

/* The tensors of the GPU-against-host checks, by shape: eight of odd sizes (0), or 600,
 * more than one launch takes, every seventh empty (1); *n of them. */
static const int64_t *gpu_host_counts(int shape, int *n)
{
    static const int64_t odd[] = {1, 3, 4, 7, 2048, 2051, 4096 * 3 + 5, 600001};
    static int64_t many[600];
    for (int i = 0; i < 600; i++)
        many[i] = i % 7 == 0 ? 0 : 1 + (i * 37) % 300;
    *n = shape ? 600 : 8;
    return shape ? many : odd;
}

enum { GPU_HOST_STEPS = 4 };

/* GPU_HOST_STEPS steps of g (on the GPU) and h (on the host) with the same gradients,
 * seeded from seed; then g's step counter reads the steps, its block count 0. */
static void steps_on_both(mixed *g, mixed *h, const blob_optim *o, uint64_t seed,
                          blob_status (*step)(mixed *, const blob_optim *, double))
{
    for (int s = 0; s < GPU_HOST_STEPS; s++) {
        test_seed(seed + (uint64_t)s);
        fill_grads(g, 512);
        test_seed(seed + (uint64_t)s);
        fill_grads(h, 512);
        ck_ok(step(g, o, 1.0 / 512));
        ck_ok(step(h, o, 1.0 / 512));
    }
    int64_t st[BLOB_OPTIM_STEP_WORDS];
    ck_ok(blob__be->copy_async(st, g->step, sizeof st, BLOB__D2H, blob_stream_get()));
    ck_ok(blob__be->stream_synchronize(blob_stream_get()));
    ck_assert_int_eq(st[0], GPU_HOST_STEPS);
    ck_assert_int_eq(st[1], 0);
}

/* The GPU's mixed step against the host's on the same values: every kind, both 16-bit
 * dtypes, odd sizes, misaligned arrays, more tensors than one launch takes, and a loss
 * scale. The GPU contracts the rule into fused multiply-adds, so master weights and
 * histories agree to a few float32 roundings per step, not bit for bit; each side's
 * working copy is its own master weights rounded, bit for bit. */
START_TEST(test_gpu_mixed_vs_host)
{
    const blob_dtype half = test_halves[_i % 2];
    const int c = _i / 2;
    const blob_optim o = config(c);
    for (int shape = 0; shape < 2; shape++) {
        int n;
        const int64_t *counts = gpu_host_counts(shape, &n);
        test_seed(7 + (uint64_t)_i);
        mixed g = mixed_new(half, true, n, counts, c % 2),
              h = mixed_new(half, false, n, counts, false);
        for (int i = 0; i < n; i++)
            memcpy((float *)h.host[W] + h.offset[i], (float *)g.host[W] + g.offset[i],
                   sizeof(float) * (size_t)counts[i]);
        test_arrays_init(&g);
        test_arrays_init(&h);
        steps_on_both(&g, &h, &o, 300, mixed_step);
        char what[96];
        snprintf(what, sizeof what, "gpu %s config %d, %d tensors", blob_dtype_name(half), c, n);
        const double tol = 16 * FLT_EPSILON * GPU_HOST_STEPS;
        expect_close(&g, &h, W, tol, what);
        for (int a = H; a < H + blob_optim_history_count(&o); a++)
            expect_close(&g, &h, a, tol, what);
        expect_work_is_rounded(&g, what);
        test_arrays_free(&g);
        test_arrays_free(&h);
    }
}
END_TEST

/* The GPU's mixed step against its float32 step on the widened gradients: the same rule
 * in float32 on the same values; the two kernels may contract differently, hence the
 * tolerance of test_gpu_mixed_vs_host. */
START_TEST(test_gpu_mixed_vs_float32)
{
    const blob_dtype half = test_halves[_i % 2];
    const blob_optim o = config(_i / 2);
    const int64_t counts[] = {4000003, 5, 2051};
    test_seed(17 + (uint64_t)_i);
    mixed m = mixed_new(half, true, 3, counts, false), f = mixed_new(half, true, 3, counts, false);
    memcpy(f.host[W], m.host[W], m.bytes[W]);
    test_arrays_init(&m);
    test_arrays_init(&f);
    for (int s = 0; s < 3; s++) {
        fill_grads(&m, 1);
        /* f's float32 gradients: the same values widened, in a device array of their own */
        float *g32 = malloc(m.bytes[W]);
        ck_ok(blob_cpu_convert(half, BLOB_FLOAT32, m.total, m.host[G], g32));
        void *dg;
        ck_ok(blob__be->device_alloc(m.bytes[W], &dg));
        ck_ok(blob__be->copy_async(dg, g32, m.bytes[W], BLOB__H2D, blob_stream_get()));
        ck_ok(blob__be->stream_synchronize(blob_stream_get()));
        const void *pg[3];
        for (int i = 0; i < 3; i++)
            pg[i] = (const float *)dg + f.offset[i];
        ck_ok(mixed_step(&m, &o, 1));
        ck_ok(blob_gpu_optim_step(&o, BLOB_FLOAT32, 3, counts, f.ptr[W], pg, f.ptr[H], f.ptr[V],
                                  f.step));
        ck_ok(blob__be->stream_synchronize(blob_stream_get()));
        blob__be->device_free(dg);
        free(g32);
    }
    expect_close(&m, &f, W, 16 * FLT_EPSILON * 3, "mixed vs float32");
    expect_work_is_rounded(&m, "mixed vs float32");
    test_arrays_free(&m);
    test_arrays_free(&f);
}
END_TEST

/* The GPU's split step against the host's on the same values: every kind, odd sizes (not
 * multiples of the vectors), misaligned arrays, more tensors than one launch takes, a
 * gradient factor, and master weights with non-zero remainders. The joined master weights
 * and the histories agree as the mixed step's do (fused multiply-adds on the GPU); each
 * side's working copy is its own master weights rounded with ties away, by construction. */
START_TEST(test_gpu_split_vs_host)
{
    const blob_optim o = test_optim_config(_i);
    for (int shape = 0; shape < 2; shape++) {
        int n;
        const int64_t *counts = gpu_host_counts(shape, &n);
        const bool gap = _i % 2;
        test_seed(9 + (uint64_t)_i);
        mixed mg = mixed_new(BLOB_BFLOAT16, true, n, counts, gap),
              mh = mixed_new(BLOB_BFLOAT16, false, n, counts, false);
        mixed g = split_new(&mg, counts, gap), h = split_new(&mh, counts, false);
        /* the same weights on both sides: mg's, in h's layout */
        for (int i = 0; i < n; i++) {
            const size_t b = sizeof(uint16_t) * (size_t)counts[i];
            memcpy((uint16_t *)h.host[WORK] + h.offset[i], (uint16_t *)g.host[WORK] + g.offset[i],
                   b);
            memcpy((uint16_t *)h.host[LO] + h.offset[i], (uint16_t *)g.host[LO] + g.offset[i], b);
        }
        test_arrays_init(&g);
        test_arrays_init(&h);
        steps_on_both(&g, &h, &o, 700, split_step);
        char what[96];
        snprintf(what, sizeof what, "gpu split config %d, %d tensors", _i, n);
        const double tol = 16 * FLT_EPSILON * GPU_HOST_STEPS;
        float *jg = split_joined(&g), *jh = split_joined(&h);
        expect_close_at(&g, jg, &h, jh, LO, tol, what);
        for (int a = H; a < H + blob_optim_history_count(&o); a++)
            expect_close(&g, &h, a, tol, what);
        free(jg), free(jh);
        test_arrays_free(&mg), test_arrays_free(&mh);
        test_arrays_free(&g), test_arrays_free(&h);
    }
}
END_TEST

/* The GPU's split step against its mixed step from the same master weights: the same
 * kernel body on the same values, so the joined master weights agree with the mixed
 * step's within the tolerance above, and the histories too. */
START_TEST(test_gpu_split_vs_mixed)
{
    const blob_optim o = test_optim_config(_i);
    const int64_t counts[] = {4000003, 5, 2051};
    test_seed(27 + (uint64_t)_i);
    mixed m = mixed_new(BLOB_BFLOAT16, true, 3, counts, false);
    mixed s = split_new(&m, counts, false);
    /* the mixed step's master weights are the joined ones (a NaN-free round trip) */
    ck_ok(blob_cpu_master_join(m.total, s.host[WORK], s.host[LO], m.host[W]));
    test_arrays_init(&m);
    test_arrays_init(&s);
    for (int st = 0; st < 3; st++) {
        fill_grads(&m, 1);
        memcpy(s.host[G], m.host[G], m.bytes[G]);
        test_arrays_sync(&s, G, true);
        ck_ok(mixed_step(&m, &o, 1));
        ck_ok(split_step(&s, &o, 1));
    }
    test_arrays_sync(&m, W, false);
    float *js = split_joined(&s);
    expect_close_at(&s, js, &m, m.host[W], W, 16 * FLT_EPSILON * 3, "split vs mixed");
    for (int a = H; a < H + blob_optim_history_count(&o); a++)
        expect_close(&s, &m, a, 16 * FLT_EPSILON * 3, "split vs mixed");
    free(js);
    test_arrays_free(&m);
    test_arrays_free(&s);
}
END_TEST

START_TEST(test_gpu_find_nonfinite)
{
    const blob_dtype dt = (blob_dtype)_i;
    const int64_t n = 100003, counts[] = {n, 0, 7};
    double *src = malloc(sizeof(double) * (size_t)(n + 7));
    for (int64_t k = 0; k < n + 7; k++)
        src[k] = (double)(k % 100) - 50;
    const size_t es = blob_dtype_size(dt), bytes = (size_t)(n + 7) * es;
    char *host = malloc(bytes);
    void *dev;
    int32_t *flag, found;
    ck_ok(blob__be->device_alloc(bytes, &dev));
    ck_ok(blob__be->device_alloc(sizeof(int32_t), (void **)&flag));
    const void *x[] = {dev, (char *)dev + (size_t)n * es, (char *)dev + (size_t)n * es};
    void *s = blob_stream_get();
    for (int t = 0; t < 3; t++) {
        ck_ok(blob_cpu_convert(BLOB_FLOAT64, dt, n + 7, src, host));
        const double bad = t == 1 ? INFINITY : NAN;
        if (t)
            ck_ok(blob_cpu_convert(BLOB_FLOAT64, dt, 1, &bad,
                                   host + (size_t)(t == 1 ? n - 1 : n + 3) * es));
        found = 0;
        ck_ok(blob__be->copy_async(dev, host, bytes, BLOB__H2D, s));
        ck_ok(blob__be->copy_async(flag, &found, sizeof found, BLOB__H2D, s));
        ck_ok(blob_gpu_find_nonfinite(dt, 3, counts, x, flag));
        ck_ok(blob__be->copy_async(&found, flag, sizeof found, BLOB__D2H, s));
        ck_ok(blob__be->stream_synchronize(s));
        ck_assert_int_eq(found, t ? 1 : 0);
    }
    blob__be->device_free(dev);
    blob__be->device_free(flag);
    free(host);
    free(src);
}
END_TEST

START_TEST(test_gpu_blob_scaler)
{
    int dev;
    ck_ok(blob_device_get(&dev));
    check_scaler(dev, true, test_halves[_i]);
}
END_TEST

void mixed_suite(Suite *s)
{
    TCase *tc = suite_case(s, "host", NULL, 60, NULL, NULL);
    add_loop_tests(tc, 0, 2 * CONFIGS, test_cpu_mixed_matches_float32);
    add_loop_tests(tc, 0, 4, test_cpu_find_nonfinite);
    add_tests(tc, test_mixed_errors);
    add_tests(tc, test_cpu_master_split_join);
    add_loop_tests(tc, 0, 2 * TEST_OPTIM_CONFIGS, test_cpu_split_matches_mixed);
    add_tests(tc, test_split_errors);
    add_loop_tests(tc, 0, 2, test_blob_scaler_host);
    add_loop_tests(tc, 0, 2, test_blob_mixed_host);
    add_loop_tests(tc, 0, 2, test_cpu_relu_half);

    TCase *gpu = suite_case(s, "gpu", "gpu", 300, NULL, NULL);
    add_loop_tests(gpu, 0, 2 * CONFIGS, test_gpu_mixed_vs_host);
    add_loop_tests(gpu, 0, 2 * CONFIGS, test_gpu_mixed_vs_float32);
    add_loop_tests(gpu, 0, 4, test_gpu_find_nonfinite);
    add_loop_tests(gpu, 0, 2, test_gpu_blob_scaler);
    add_loop_tests(gpu, 0, 2, test_gpu_relu_half);
}

/* The split step's GPU checks: a suite apart, which runs beside mixed (each took about a
 * minute on an H100) and which the sanitizers can run alone (CK_RUN_SUITE=split). */
void split_suite(Suite *s)
{
    TCase *tc = suite_case(s, "gpu", "gpu", 300, NULL, NULL);
    add_loop_tests(tc, 0, TEST_OPTIM_CONFIGS, test_gpu_split_vs_host, test_gpu_split_vs_mixed);
}

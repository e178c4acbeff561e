/* Optimizer steps: the host's multi-tensor step against the update rules written out in
 * double (every kind, many steps of Adam), the GPU's against the host's (odd sizes,
 * misaligned arrays, more tensors than one launch takes), graph capture of the GPU step,
 * the blob-level step and its state, allocation failures, and exact error codes. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/core.h"
#include "fake_backend.h"
#include "testutil.h"

/* One element by the rules of blob/optim.h, in double; t is the step number (from 1). */
static void ref_update(const blob_optim *o, int64_t t, double *w, double g, double *h, double *v)
{
    const double lr = o->lr, wd = o->weight_decay;
    switch (o->kind) {
    case BLOB_OPTIM_SGD: {
        double d = g + wd * *w;
        if (o->momentum != 0) {
            *h = t == 1 ? d : o->momentum * *h + (1 - o->dampening) * d;
            d = o->nesterov ? d + o->momentum * *h : *h;
        }
        *w -= lr * d;
        break;
    }
    case BLOB_OPTIM_SGD_CAFFE:
        *h = lr * (g + wd * *w) + o->momentum * *h;
        *w -= *h;
        break;
    case BLOB_OPTIM_ADAM:
    case BLOB_OPTIM_ADAMW: {
        double d = g;
        if (o->kind == BLOB_OPTIM_ADAMW)
            *w *= 1 - lr * wd;
        else
            d += wd * *w;
        *h = o->beta1 * *h + (1 - o->beta1) * d;
        *v = o->beta2 * *v + (1 - o->beta2) * d * d;
        *w -= lr / (1 - pow(o->beta1, (double)t)) * *h /
              (sqrt(*v) / sqrt(1 - pow(o->beta2, (double)t)) + o->eps);
        break;
    }
    }
}

/* ---- Tensors on one side: w, g, h, v of one dtype (dt[0]), host copies and the side's
 * arrays ---- */

typedef test_arrays tensors;

/* n tensors of the given counts; with gap, odd tensors start one element late (so their
 * arrays are not 16-byte aligned). */
static tensors tensors_new(blob_dtype dt, bool gpu, int n, const int64_t *counts, bool gap)
{
    return test_arrays_new(gpu, n, counts, 4, gap, 4, (const blob_dtype[4]){dt, dt, dt, dt});
}

static void read_step(const tensors *t, int64_t out[BLOB_OPTIM_STEP_WORDS])
{
    test_side_copy(t->gpu, t->step, out, BLOB_OPTIM_STEP_WORDS * sizeof(int64_t), false);
}

static blob_status step_on(tensors *t, const blob_optim *o)
{
    return (t->gpu ? blob_gpu_optim_step : blob_cpu_optim_step)(
        o, t->dt[0], t->n, t->counts, t->ptr[0], (const void *const *)t->ptr[1], t->ptr[2],
        t->ptr[3], t->step);
}

/* Array a of t matches ref (in double, over all tensors) within tol * max(|ref|, 1). */
static void expect_close(tensors *t, int a, const double *ref, double tol, const char *what)
{
    static const char *const names[] = {"w", "g", "h", "v"};
    test_arrays_sync(t, a, false);
    int bad = 0;
    for (int i = 0; i < t->n; i++)
        for (int64_t j = 0; j < t->counts[i]; j++) {
            const int64_t k = t->offset[i] + j;
            const double got = test_get(t->dt[0], t->host[a], k), e = ref[k];
            if (!(fabs(got - e) <= tol * fmax(fabs(e), 1)) && bad++ < 5)
                fprintf(stderr, "%s: %s of tensor %d [%lld] = %.10g, expected %.10g\n", what,
                        names[a], i, (long long)j, got, e);
        }
    ck_assert_msg(!bad, "%s: %d values of %s differ (see above)", what, bad, names[a]);
}

/* `steps` steps of config c on t, each with fresh gradients, checked against the rules in
 * double after the last with tolerance tol. */
static void run_and_check(tensors *t, int c, int steps, double tol, const char *label)
{
    const blob_optim o = test_optim_config(c);
    const int hist = blob_optim_history_count(&o);
    double *ref[4];
    for (int a = 0; a < 4; a++) {
        ref[a] = calloc((size_t)t->total + 1, sizeof(double));
        for (int64_t k = 0; k < t->total; k++)
            ref[a][k] = test_get(t->dt[0], t->host[a], k);
    }
    test_arrays_init(t);
    for (int s = 1; s <= steps; s++) {
        test_fill(t->dt[0], t->host[1], t->total, -1, 1);
        test_arrays_sync(t, 1, true);
        ck_ok(step_on(t, &o));
        for (int64_t k = 0; k < t->total; k++)
            ref_update(&o, s, &ref[0][k], test_get(t->dt[0], t->host[1], k), &ref[2][k],
                       &ref[3][k]);
    }
    char what[128];
    snprintf(what, sizeof what, "%s %s config %d (%d tensors, %d steps)", label,
             test_dtype_name(t->dt[0]), c, t->n, steps);
    expect_close(t, 0, ref[0], tol, what);
    for (int a = 2; a < 2 + hist; a++)
        expect_close(t, a, ref[a], tol, what);
    int64_t st[BLOB_OPTIM_STEP_WORDS];
    read_step(t, st);
    ck_assert_msg(st[0] == steps && st[1] == 0, "%s: step counter %lld %lld", what,
                  (long long)st[0], (long long)st[1]);
    for (int a = 0; a < 4; a++)
        free(ref[a]);
}

static double step_tol(blob_dtype dt, int steps)
{
    return 16 * (dt == BLOB_FLOAT32 ? FLT_EPSILON : DBL_EPSILON) * steps;
}

static const int64_t odd_counts[] = {1, 3, 4, 7, 2048, 2051, 4096 * 3 + 5, 600001};
#define N_ODD ((int)(sizeof odd_counts / sizeof odd_counts[0]))

/* ---- Host ---- */

START_TEST(test_cpu_optim_rules)
{
    const blob_dtype dt = (blob_dtype)_i;
    test_seed(31 + (uint64_t)dt);
    for (int c = 0; c < TEST_OPTIM_CONFIGS; c++) {
        tensors t = tensors_new(dt, false, N_ODD, odd_counts, true);
        run_and_check(&t, c, 5, step_tol(dt, 5), "cpu");
        test_arrays_free(&t);
    }
}
END_TEST

/* Adam and AdamW (loop i: the dtype i / 2, AdamW when odd) over 300 steps of tensors of
 * `first` and 33 parameters stay with the double-precision loop. */
static void check_adam_many_steps(int i, bool gpu, int64_t first)
{
    const blob_dtype dt = (blob_dtype)(i / 2);
    test_seed(57 + (uint64_t)i);
    const int64_t counts[] = {first, 33};
    tensors t = tensors_new(dt, gpu, 2, counts, false);
    run_and_check(&t, i % 2 ? 6 : 5, 300, step_tol(dt, 300), gpu ? "gpu" : "cpu");
    test_arrays_free(&t);
}

START_TEST(test_cpu_adam_many_steps) { check_adam_many_steps(_i, false, 1000); }
END_TEST

START_TEST(test_optim_defaults)
{
    blob_optim o = blob_optim_default(BLOB_OPTIM_ADAMW, 0.5);
    ck_assert(o.kind == BLOB_OPTIM_ADAMW && o.lr == 0.5 && o.beta1 == 0.9 && o.beta2 == 0.999 &&
              o.eps == 1e-8 && o.weight_decay == 0.01);
    o = blob_optim_default(BLOB_OPTIM_ADAM, 0.5);
    ck_assert(o.weight_decay == 0);
    ck_assert_int_eq(blob_optim_history_count(&o), 2);
    o = blob_optim_default(BLOB_OPTIM_SGD, 0.5);
    ck_assert(o.momentum == 0 && o.dampening == 0 && !o.nesterov && o.weight_decay == 0);
    ck_assert_int_eq(blob_optim_history_count(&o), 0);
    o.momentum = 0.9;
    ck_assert_int_eq(blob_optim_history_count(&o), 1);
    o = blob_optim_default(BLOB_OPTIM_SGD_CAFFE, 0.5);
    ck_assert_int_eq(blob_optim_history_count(&o), 1);
    ck_assert_int_eq(blob_optim_history_count(NULL), -1);
    o.kind = (blob_optim_kind)4;
    ck_assert_int_eq(blob_optim_history_count(&o), -1);
}
END_TEST

/* Exact codes, the same on both sides and before any GPU is looked for. */
START_TEST(test_optim_bad_arguments)
{
    __typeof__(blob_cpu_optim_step) *f = _i ? blob_gpu_optim_step : blob_cpu_optim_step;
    const char *name = _i ? "blob_gpu_optim_step" : "blob_cpu_optim_step";
    static _Alignas(16) double buf[16];
    int64_t step[BLOB_OPTIM_STEP_WORDS] = {0}, counts[2] = {4, 4}, neg[2] = {4, -1};
    void *p[2] = {buf, buf}, *null2[2] = {buf, NULL};
    const void *const *cp = (const void *const *)p;
    blob_optim adam = blob_optim_default(BLOB_OPTIM_ADAM, 0.1);
    ck_status(f(NULL, BLOB_FLOAT32, 2, counts, p, cp, p, p, step), BLOB_EINVAL);
    ck_assert_msg(strstr(blob_last_error(), name), "%s", blob_last_error());
    ck_status(f(&adam, (blob_dtype)7, 2, counts, p, cp, p, p, step), BLOB_EINVAL);
    ck_status(f(&adam, BLOB_FLOAT32, 2, counts, p, cp, p, p, NULL), BLOB_EINVAL);
    ck_assert(strstr(blob_last_error(), "step is NULL"));
    ck_status(f(&adam, BLOB_FLOAT32, -1, counts, p, cp, p, p, step), BLOB_EINVAL);
    ck_status(f(&adam, BLOB_FLOAT32, 2, NULL, p, cp, p, p, step), BLOB_EINVAL);
    ck_assert(strstr(blob_last_error(), "counts is NULL"));
    ck_status(f(&adam, BLOB_FLOAT32, 2, counts, NULL, cp, p, p, step), BLOB_EINVAL);
    ck_status(f(&adam, BLOB_FLOAT32, 2, counts, p, NULL, p, p, step), BLOB_EINVAL);
    ck_status(f(&adam, BLOB_FLOAT32, 2, counts, p, cp, NULL, p, step), BLOB_EINVAL);
    ck_assert(strstr(blob_last_error(), "hist1 is NULL"));
    ck_status(f(&adam, BLOB_FLOAT32, 2, counts, p, cp, p, NULL, step), BLOB_EINVAL);
    ck_status(f(&adam, BLOB_FLOAT32, 2, counts, p, cp, p, null2, step), BLOB_EINVAL);
    ck_assert_msg(strstr(blob_last_error(), "hist2[1] is NULL"), "%s", blob_last_error());
    ck_status(f(&adam, BLOB_FLOAT32, 2, neg, p, cp, p, p, step), BLOB_EINVAL);
    ck_status(f(&adam, BLOB_FLOAT32, 2, counts, null2, cp, p, p, step), BLOB_EINVAL);
    ck_assert_msg(strstr(blob_last_error(), "data[1] is NULL"), "%s", blob_last_error());
    blob_optim bad[] = {adam, adam, adam, adam, adam, adam, adam, adam};
    bad[0].lr = -1;
    bad[1].lr = NAN;
    bad[2].beta1 = 1;
    bad[3].beta2 = -0.1;
    bad[4].eps = -1;
    bad[5].weight_decay = INFINITY;
    bad[6].nesterov = true;
    bad[7].kind = (blob_optim_kind)7;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        ck_status(f(&bad[k], BLOB_FLOAT32, 2, counts, p, cp, p, p, step), BLOB_EINVAL);
    blob_optim sgd = blob_optim_default(BLOB_OPTIM_SGD, 0.1);
    sgd.nesterov = true; /* no momentum */
    ck_status(f(&sgd, BLOB_FLOAT32, 2, counts, p, cp, NULL, NULL, step), BLOB_EINVAL);
    ck_assert(strstr(blob_last_error(), "Nesterov"));
    sgd.momentum = 0.9;
    sgd.dampening = 0.5;
    ck_status(f(&sgd, BLOB_FLOAT32, 2, counts, p, cp, p, NULL, step), BLOB_EINVAL);
    sgd.nesterov = false;
    sgd.momentum = -0.5;
    ck_status(f(&sgd, BLOB_FLOAT32, 2, counts, p, cp, p, NULL, step), BLOB_EINVAL);
    ck_assert_int_eq(step[0], 0);
    /* what the kind does not use may be NULL; a step of no tensors still counts (step is
     * memory of the side: a blob's device copy for the GPU) */
    sgd = blob_optim_default(BLOB_OPTIM_SGD, 0.1);
    if (!_i) {
        ck_ok(f(&sgd, BLOB_FLOAT64, 2, counts, p, cp, NULL, NULL, step));
        ck_ok(f(&sgd, BLOB_FLOAT64, 0, NULL, NULL, NULL, NULL, NULL, step));
        ck_assert_int_eq(step[0], 2);
    } else if (blob_device_count() <= 0) {
        ck_status(f(&sgd, BLOB_FLOAT64, 0, NULL, NULL, NULL, NULL, NULL, step), BLOB_ENODEV);
    } else {
        blob *b;
        const int64_t words = BLOB_OPTIM_STEP_WORDS;
        void *dstep;
        const void *hstep;
        ck_ok(blob_create(&b, BLOB_INT64, 0, 1, &words));
        ck_ok(blob_mutable_cpu_data(b, &dstep));
        memset(dstep, 0, sizeof(int64_t) * words);
        ck_ok(blob_mutable_gpu_data(b, &dstep));
        ck_ok(f(&sgd, BLOB_FLOAT64, 0, NULL, NULL, NULL, NULL, NULL, dstep));
        ck_ok(blob_cpu_data(b, &hstep));
        ck_assert_int_eq(((const int64_t *)hstep)[0], 1);
        blob_free(b);
    }
}
END_TEST

/* ---- Blob level ---- */

static blob *param(blob_dtype dt, int device, int64_t rows, int64_t cols)
{
    blob *b;
    int64_t shape[2] = {rows, cols};
    void *p;
    ck_ok(blob_create(&b, dt, device, 2, shape));
    ck_ok(blob_mutable_cpu_data(b, &p));
    test_fill(dt, p, rows * cols, -1, 1);
    ck_ok(blob_mutable_cpu_diff(b, &p));
    test_fill(dt, p, rows * cols, -1, 1);
    return b;
}

/* The values of part of b into a fresh double array. */
static double *values(blob *b, bool diff)
{
    const void *p;
    ck_ok(diff ? blob_cpu_diff(b, &p) : blob_cpu_data(b, &p));
    int64_t n = blob_count(b);
    double *v = malloc(sizeof(double) * (size_t)n + 8);
    for (int64_t i = 0; i < n; i++)
        v[i] = test_get(blob_get_dtype(b), p, i);
    return v;
}

/* Blob steps against the rules in double, on the side the first blob's head says. */
static void check_blob_steps(int device, bool gpu, blob_dtype dt)
{
    test_seed(8 + (uint64_t)gpu);
    blob *ps[3] = {param(dt, device, 7, 5), param(dt, device, 1, 1), param(dt, device, 300, 31)};
    const void *cp;
    if (gpu)
        ck_ok(blob_gpu_data(ps[0], &cp));
    for (int c = 0; c < TEST_OPTIM_CONFIGS; c++) {
        const blob_optim o = test_optim_config(c);
        blob_optim_state *st;
        ck_ok(blob_optim_state_create(&st));
        double *w[3], *h[3], *v[3];
        for (int i = 0; i < 3; i++) {
            w[i] = values(ps[i], false);
            h[i] = calloc((size_t)blob_count(ps[i]) + 1, sizeof(double));
            v[i] = calloc((size_t)blob_count(ps[i]) + 1, sizeof(double));
        }
        for (int s = 1; s <= 3; s++) {
            for (int i = 0; i < 3; i++) { /* fresh gradients, written on the host */
                void *g;
                ck_ok(blob_mutable_cpu_diff(ps[i], &g));
                test_fill(dt, g, blob_count(ps[i]), -1, 1);
                for (int64_t k = 0; k < blob_count(ps[i]); k++)
                    ref_update(&o, s, &w[i][k], test_get(dt, g, k), &h[i][k], &v[i][k]);
            }
            if (gpu)
                ck_ok(blob_gpu_data(ps[0], &cp)); /* the first one's head decides */
            ck_ok(blob_optim_step(&o, ps, 3, st));
            ck_assert_int_eq(blob_syncedmem_head(blob_data_mem(ps[0])),
                             gpu ? BLOB_HEAD_AT_GPU : BLOB_HEAD_AT_CPU);
        }
        int64_t steps;
        ck_ok(blob_optim_state_steps(st, &steps));
        ck_assert_int_eq(steps, 3);
        const double tol = step_tol(dt, 3);
        for (int i = 0; i < 3; i++) {
            double *got = values(ps[i], false);
            for (int64_t k = 0; k < blob_count(ps[i]); k++)
                ck_assert_msg(fabs(got[k] - w[i][k]) <= tol * fmax(fabs(w[i][k]), 1),
                              "%s config %d param %d [%lld]: %.10g, expected %.10g",
                              gpu ? "gpu" : "cpu", c, i, (long long)k, got[k], w[i][k]);
            blob *hb = blob_optim_state_history(st, i, 0);
            ck_assert(!!hb == (blob_optim_history_count(&o) >= 1));
            if (hb) {
                double *hg = values(hb, false);
                for (int64_t k = 0; k < blob_count(ps[i]); k++)
                    ck_assert(fabs(hg[k] - h[i][k]) <= tol * fmax(fabs(h[i][k]), 1));
                free(hg);
            }
            ck_assert(!!blob_optim_state_history(st, i, 1) == (blob_optim_history_count(&o) == 2));
            free(got), free(w[i]), free(h[i]), free(v[i]);
        }
        blob_optim_state_free(st);
    }
    for (int i = 0; i < 3; i++)
        blob_free(ps[i]);
}

START_TEST(test_blob_optim_host) { check_blob_steps(BLOB_HOST_ONLY, false, (blob_dtype)_i); }
END_TEST

START_TEST(test_blob_optim_errors)
{
    blob *a = param(BLOB_FLOAT32, BLOB_HOST_ONLY, 2, 3);
    blob *b = param(BLOB_FLOAT32, BLOB_HOST_ONLY, 4, 1);
    blob *d = param(BLOB_FLOAT64, BLOB_HOST_ONLY, 2, 3);
    blob *ps[2] = {a, b}, *mixed[2] = {a, d}, *holes[2] = {a, NULL};
    blob_optim o = blob_optim_default(BLOB_OPTIM_ADAM, 0.1);
    blob_optim_state *st;
    ck_status(blob_optim_state_create(NULL), BLOB_EINVAL);
    ck_ok(blob_optim_state_create(&st));
    ck_status(blob_optim_step(NULL, ps, 2, st), BLOB_EINVAL);
    ck_status(blob_optim_step(&o, NULL, 2, st), BLOB_EINVAL);
    ck_status(blob_optim_step(&o, ps, 2, NULL), BLOB_EINVAL);
    ck_status(blob_optim_step(&o, ps, 0, st), BLOB_EINVAL);
    ck_status(blob_optim_step(&o, holes, 2, st), BLOB_EINVAL);
    ck_assert(strstr(blob_last_error(), "params[1] is NULL"));
    ck_status(blob_optim_step(&o, mixed, 2, st), BLOB_EINVAL);
    blob_optim bad = o;
    bad.beta2 = 2;
    double *before = values(a, false);
    ck_status(blob_optim_step(&bad, ps, 2, st), BLOB_EINVAL);
    double *after = values(a, false);
    ck_assert(!memcmp(before, after, sizeof(double) * 6));
    int64_t steps = -1;
    ck_ok(blob_optim_state_steps(st, &steps));
    ck_assert_int_eq(steps, 0);
    ck_assert_ptr_null(blob_optim_state_history(st, 0, 0)); /* unbound again */
    ck_ok(blob_optim_step(&o, ps, 2, st));
    ck_status(blob_optim_step(&o, ps, 1, st), BLOB_ESHAPE);
    int64_t shape[2] = {3, 3};
    ck_ok(blob_reshape(b, 2, shape));
    ck_status(blob_optim_step(&o, ps, 2, st), BLOB_ESHAPE);
    ck_assert_msg(strstr(blob_last_error(), "params[1]"), "%s", blob_last_error());
    ck_ok(blob_optim_state_steps(st, &steps));
    ck_assert_int_eq(steps, 1);
    ck_status(blob_optim_state_steps(st, NULL), BLOB_EINVAL);
    ck_status(blob_optim_state_steps(NULL, &steps), BLOB_EINVAL);
    ck_assert_ptr_nonnull(blob_optim_state_history(st, 1, 1));
    ck_assert_ptr_null(blob_optim_state_history(st, 2, 0));
    ck_assert_ptr_null(blob_optim_state_history(st, -1, 0));
    ck_assert_ptr_null(blob_optim_state_history(st, 0, 2));
    ck_assert_ptr_null(blob_optim_state_history(NULL, 0, 0));
    blob_optim_state_free(st);
    blob_optim_state_free(NULL);
    free(before), free(after);
    blob_free(a), blob_free(b), blob_free(d);
}
END_TEST

/* A failure at any allocation of a first step (on a fake GPU's blobs, heads on the host)
 * changes no value and leaves the state unbound; then the step succeeds. */
START_TEST(test_blob_optim_alloc_failure)
{
    blob *ps[2] = {param(BLOB_FLOAT32, 0, 3, 4), param(BLOB_FLOAT32, 0, 5, 1)};
    const blob_optim o = blob_optim_default(BLOB_OPTIM_ADAMW, 0.1);
    double *w0 = values(ps[0], false);
    int failures = 0;
    for (uint64_t k = 1;; k++) {
        blob_optim_state *st;
        ck_ok(blob_optim_state_create(&st));
        fake_fail_alloc_at(k, false);
        blob_status s = blob_optim_step(&o, ps, 2, st);
        fake_fail_alloc_at(0, false);
        if (s == BLOB_OK) {
            int64_t steps;
            ck_ok(blob_optim_state_steps(st, &steps));
            ck_assert_int_eq(steps, 1);
            blob_optim_state_free(st);
            break;
        }
        failures++;
        ck_assert_msg(s == BLOB_ENOMEM || s == BLOB_EDEVMEM, "k=%llu: %s", (unsigned long long)k,
                      blob_status_name(s));
        double *w = values(ps[0], false);
        ck_assert(!memcmp(w, w0, sizeof(double) * 12));
        free(w);
        ck_assert_ptr_null(blob_optim_state_history(st, 0, 0));
        blob_optim_state_free(st);
        ck_assert_msg(k < 64, "never succeeded");
    }
    ck_assert_int_gt(failures, 0);
    free(w0);
    blob_free(ps[0]);
    blob_free(ps[1]);
}
END_TEST

/* ---- Real GPU ---- */

/* Every kind, both dtypes: odd sizes, misaligned arrays, and tensors past one launch. */
START_TEST(test_gpu_optim_rules)
{
    const blob_dtype dt = (blob_dtype)_i;
    test_seed(31 + (uint64_t)dt);
    int64_t many[600];
    for (int i = 0; i < 600; i++)
        many[i] = i % 7 == 0 ? 0 : 1 + (i * 37) % 300; /* some empty */
    for (int c = 0; c < TEST_OPTIM_CONFIGS; c++) {
        tensors t = tensors_new(dt, true, N_ODD, odd_counts, c % 2 == 1);
        run_and_check(&t, c, 5, step_tol(dt, 5), "gpu");
        test_arrays_free(&t);
        tensors m = tensors_new(dt, true, c % 2 ? 40 : 600, many, c == 4);
        run_and_check(&m, c, 3, step_tol(dt, 3), "gpu (many)");
        test_arrays_free(&m);
    }
}
END_TEST

/* Tensors that fill the grid with chunks of two vectors per thread (the smaller ones above
 * take chunks of one): over 8 blocks of 2048 floats per SM on any GPU of up to 240 SMs. */
START_TEST(test_gpu_optim_large)
{
    const blob_dtype dt = (blob_dtype)_i;
    test_seed(41 + (uint64_t)dt);
    const int64_t counts[] = {4000003, 5, 2051};
    for (int c = 0; c < TEST_OPTIM_CONFIGS; c++) {
        tensors t = tensors_new(dt, true, 3, counts, c % 2 == 1);
        run_and_check(&t, c, 2, step_tol(dt, 2), "gpu (large)");
        test_arrays_free(&t);
    }
}
END_TEST

START_TEST(test_gpu_adam_many_steps) { check_adam_many_steps(_i, true, 100000); }
END_TEST

/* A captured step replayed: the count advances on the device, values as eager steps. */
START_TEST(test_gpu_optim_graph)
{
    const int c = _i ? 6 : 1; /* AdamW, or SGD with momentum (its first step is special) */
    const blob_optim o = test_optim_config(c);
    void *s;
    ck_ok(blob_stream_create(&s));
    blob_stream_set(s);
    test_seed(5);
    const int64_t counts[] = {5000, 17, 64};
    tensors t = tensors_new(BLOB_FLOAT32, true, 3, counts, false);
    test_fill(BLOB_FLOAT32, t.host[1], t.total, -1, 1); /* one gradient for every step */
    double *ref[4];
    for (int a = 0; a < 4; a++) {
        ref[a] = calloc((size_t)t.total + 1, sizeof(double));
        for (int64_t k = 0; k < t.total; k++)
            ref[a][k] = test_get(BLOB_FLOAT32, t.host[a], k);
    }
    test_arrays_init(&t);
    blob_graph *g;
    ck_ok(blob_graph_begin(s));
    ck_ok(step_on(&t, &o));
    ck_ok(blob_graph_end(s, &g));
    int64_t kernels, total;
    ck_ok(blob_graph_count_nodes(g, &kernels, &total));
    ck_assert_int_eq(kernels, 1);
    const int replays = 6;
    for (int r = 0; r < replays; r++)
        ck_ok(blob_graph_launch(g, s));
    for (int step = 1; step <= replays; step++)
        for (int64_t k = 0; k < t.total; k++)
            ref_update(&o, step, &ref[0][k], test_get(BLOB_FLOAT32, t.host[1], k), &ref[2][k],
                       &ref[3][k]);
    expect_close(&t, 0, ref[0], step_tol(BLOB_FLOAT32, replays), "graph replay");
    expect_close(&t, 2, ref[2], step_tol(BLOB_FLOAT32, replays), "graph replay");
    int64_t st[BLOB_OPTIM_STEP_WORDS];
    read_step(&t, st);
    ck_assert_int_eq(st[0], replays);
    ck_assert_int_eq(st[1], 0);
    blob_graph_free(g);
    for (int a = 0; a < 4; a++)
        free(ref[a]);
    test_arrays_free(&t);
    blob_stream_set(NULL);
    ck_ok(blob_stream_destroy(s));
}
END_TEST

START_TEST(test_gpu_blob_optim)
{
    int dev;
    ck_ok(blob_device_get(&dev));
    check_blob_steps(dev, true, (blob_dtype)_i);
}
END_TEST

/* The blob-level step captured and replayed, beside the same steps taken eagerly. */
START_TEST(test_gpu_blob_optim_graph)
{
    int dev;
    ck_ok(blob_device_get(&dev));
    void *s;
    ck_ok(blob_stream_create(&s));
    blob_stream_set(s);
    test_seed(77);
    blob *eager[2] = {param(BLOB_FLOAT32, dev, 64, 33), param(BLOB_FLOAT32, dev, 10, 1)};
    blob *cap[2];
    for (int i = 0; i < 2; i++) {
        ck_ok(
            blob_create(&cap[i], BLOB_FLOAT32, dev, blob_num_axes(eager[i]), blob_shape(eager[i])));
        ck_ok(blob_copy_from(cap[i], eager[i], false, false));
        ck_ok(blob_copy_from(cap[i], eager[i], true, false));
        const void *p;
        ck_ok(blob_gpu_data(eager[i], &p));
        ck_ok(blob_gpu_diff(eager[i], &p));
        ck_ok(blob_gpu_data(cap[i], &p));
        ck_ok(blob_gpu_diff(cap[i], &p));
    }
    const blob_optim o = test_optim_config(6);
    blob_optim_state *se, *sc;
    ck_ok(blob_optim_state_create(&se));
    ck_ok(blob_optim_state_create(&sc));
    ck_ok(blob_optim_step(&o, cap, 2, sc)); /* the first step makes the histories */
    ck_ok(blob_optim_step(&o, eager, 2, se));
    blob_graph *g;
    ck_ok(blob_graph_begin(s));
    ck_ok(blob_optim_step(&o, cap, 2, sc));
    ck_ok(blob_graph_end(s, &g));
    for (int r = 0; r < 4; r++) {
        ck_ok(blob_graph_launch(g, s));
        ck_ok(blob_optim_step(&o, eager, 2, se));
    }
    int64_t ne, nc;
    ck_ok(blob_optim_state_steps(se, &ne));
    ck_ok(blob_optim_state_steps(sc, &nc));
    ck_assert_int_eq(ne, 5);
    ck_assert_int_eq(nc, 5);
    for (int i = 0; i < 2; i++) {
        double *a = values(eager[i], false), *b = values(cap[i], false);
        for (int64_t k = 0; k < blob_count(eager[i]); k++)
            ck_assert_msg(a[k] == b[k], "param %d [%lld]: eager %.9g, replayed %.9g", i,
                          (long long)k, a[k], b[k]);
        free(a), free(b);
    }
    blob_graph_free(g);
    blob_optim_state_free(se);
    blob_optim_state_free(sc);
    for (int i = 0; i < 2; i++) {
        blob_free(eager[i]);
        blob_free(cap[i]);
    }
    blob_stream_set(NULL);
    ck_ok(blob_stream_destroy(s));
}
END_TEST

void optim_suite(Suite *s)
{
    TCase *tc = suite_case(s, "host", NULL, 60, NULL, NULL);
    add_loop_tests(tc, 0, 2, test_cpu_optim_rules);
    add_loop_tests(tc, 0, 4, test_cpu_adam_many_steps);
    add_tests(tc, test_optim_defaults);
    add_loop_tests(tc, 0, 2, test_optim_bad_arguments, test_blob_optim_host);
    add_tests(tc, test_blob_optim_errors);

    add_tests(suite_case(s, "fake", NULL, 0, fake_setup, fake_teardown),
              test_blob_optim_alloc_failure);

    tc = suite_case(s, "gpu", "gpu", 300, NULL, NULL);
    add_loop_tests(tc, 0, 2, test_gpu_optim_rules, test_gpu_optim_large);
    add_loop_tests(tc, 0, 4, test_gpu_adam_many_steps);
    add_loop_tests(tc, 0, 2, test_gpu_optim_graph, test_gpu_blob_optim);
    add_tests(tc, test_gpu_blob_optim_graph);
}

/* Rows measured through the public API alone, so every build runs them: 4 (accesses
 * needing no copy), 5 (reshape), the host side of 6 (update) and 7 (a training-like
 * loop whose batch changes every step). */
#include <stdio.h>
#include <string.h>

#include "../src/core/core.h"
#include "../src/math/host_cblas.h"
#include "bench.h"

/* ---- 4: accesses that need no copy ---- */

typedef enum { ACC_CPU, ACC_MUT_CPU, ACC_GPU, ACC_MUT_GPU } acc_kind;

static const struct access_case {
    const char *label;
    bool gpu;
    blob_head head;
    acc_kind acc;
} access_cases[] = {
    {"cpu_data, AT_CPU, host-only", false, BLOB_HEAD_AT_CPU, ACC_CPU},
    {"mutable_cpu, AT_CPU, host-only", false, BLOB_HEAD_AT_CPU, ACC_MUT_CPU},
    {"cpu_data, AT_CPU", true, BLOB_HEAD_AT_CPU, ACC_CPU},
    {"cpu_data, SYNCED", true, BLOB_HEAD_SYNCED, ACC_CPU},
    {"mutable_cpu, AT_CPU", true, BLOB_HEAD_AT_CPU, ACC_MUT_CPU},
    {"gpu_data, AT_GPU", true, BLOB_HEAD_AT_GPU, ACC_GPU},
    {"gpu_data, SYNCED", true, BLOB_HEAD_SYNCED, ACC_GPU},
    {"mutable_gpu, AT_GPU", true, BLOB_HEAD_AT_GPU, ACC_MUT_GPU},
};

typedef struct {
    blob *b;
    acc_kind acc;
} access_ctx;

static int access_run(void *ctx, int n)
{
    access_ctx *a = ctx;
    const void *c;
    void *m;
    int bad = 0;
    switch (a->acc) { /* one loop per accessor: nothing but the call is timed */
    case ACC_CPU:
        for (int i = 0; i < n; i++)
            bad |= blob_cpu_data(a->b, &c);
        break;
    case ACC_MUT_CPU:
        for (int i = 0; i < n; i++)
            bad |= blob_mutable_cpu_data(a->b, &m);
        break;
    case ACC_GPU:
        for (int i = 0; i < n; i++)
            bad |= blob_gpu_data(a->b, &c);
        break;
    case ACC_MUT_GPU:
        for (int i = 0; i < n; i++)
            bad |= blob_mutable_gpu_data(a->b, &m);
        break;
    }
    return bad ? bench_fail("accessor failed: %s", blob_last_error()) : 0;
}

/* Bring b's data to `head` by the accesses a user would make. */
static int set_head(blob *b, blob_head head)
{
    void *p;
    const void *c;
    if (head == BLOB_HEAD_AT_GPU) {
        BTRY(blob_mutable_gpu_data(b, &p));
        return 0;
    }
    BTRY(blob_mutable_cpu_data(b, &p));
    if (head == BLOB_HEAD_SYNCED)
        BTRY(blob_gpu_data(b, &c));
    return 0;
}

static int access_case_run(const struct access_case *k, double *ns)
{
    int64_t shape[] = {1024};
    access_ctx a = {NULL, k->acc};
    BTRY(blob_create(&a.b, BLOB_FLOAT32, k->gpu ? BLOB_DEVICE_DEFAULT : BLOB_HOST_ONLY, 1, shape));
    bench_op op = {access_run, NULL, &a};
    int rc = set_head(a.b, k->head);
    if (rc == 0) {
        *ns = bench_time(&op, 100000, 15, &bench_wall);
        blob_head now = blob_syncedmem_head(blob_data_mem(a.b));
        if (isnan(*ns))
            rc = -1;
        else if (now != k->head)
            rc = bench_fail("head moved from %d to %d: the access was not free", k->head, now);
    }
    blob_free(a.b);
    return rc;
}

void bench_access(bool gpu)
{
    static const char *const cols[] = {"ns/call"};
    report_section("4", "Data access needing no copy (blob_* accessors, 1024 floats)", 1, cols);
    for (size_t i = 0; i < sizeof access_cases / sizeof access_cases[0]; i++) {
        const struct access_case *k = &access_cases[i];
        if (k->gpu && !gpu)
            continue;
        double ns;
        if (access_case_run(k, &ns) != 0)
            report_error(k->label, bench_error());
        else
            report_row(k->label, &ns, GOAL_ACCESS, ns <= 20.0);
    }
    if (!gpu)
        report_note("GPU-bound rows skipped: no GPU found");
}

/* ---- 5: reshape ---- */

typedef struct {
    blob *b;
    int64_t rows;
} reshape_ctx;

/* Alternate between two shapes that fit the capacity. */
static int reshape_within_run(void *ctx, int n)
{
    reshape_ctx *r = ctx;
    for (int i = 0; i < n; i++) {
        int64_t shape[] = {i & 1 ? 512 : 256, 784};
        BTRY(blob_reshape(r->b, 2, shape));
    }
    return 0;
}

/* One more row every call, so every call outgrows the capacity. */
static int reshape_grow_run(void *ctx, int n)
{
    reshape_ctx *r = ctx;
    for (int i = 0; i < n; i++) {
        int64_t shape[] = {++r->rows, 256};
        BTRY(blob_reshape(r->b, 2, shape));
    }
    return 0;
}

static int reshape_case(int (*run)(void *, int), int64_t rows, int64_t cols, bool touch, double *ns)
{
    int64_t shape[] = {rows, cols};
    reshape_ctx r = {NULL, rows};
    BTRY(blob_create(&r.b, BLOB_FLOAT32, BLOB_DEVICE_DEFAULT, 2, shape));
    void *p;
    int rc = touch && blob_mutable_cpu_data(r.b, &p) != BLOB_OK
                 ? bench_fail("blob_mutable_cpu_data: %s", blob_last_error())
                 : 0;
    bench_op op = {run, NULL, &r};
    if (rc == 0 && isnan(*ns = bench_time(&op, 2000, 15, &bench_wall)))
        rc = -1;
    blob_free(r.b);
    return rc;
}

void bench_reshape(void)
{
    static const char *const cols[] = {"ns/call"};
    report_section("5", "Reshape (blob_reshape of a 2-axis float blob)", 1, cols);
    double ns;
    if (reshape_case(reshape_within_run, 512, 784, true, &ns) != 0)
        report_error("within capacity", bench_error());
    else
        report_row("within capacity", &ns, GOAL_NONE, false);
    if (reshape_case(reshape_grow_run, 1, 256, false, &ns) != 0)
        report_error("with growth", bench_error());
    else
        report_row("with growth", &ns, GOAL_NONE, false);
    report_note("within: {256,784} <-> {512,784}, data touched; growth: {k,256} -> {k+1,256},"
                " new lazy blocks each call (no data allocated)");
}

/* ---- 6, host side: blob_update vs cblas_saxpy ---- */

int bench_update_run(void *ctx, int n)
{
    bench_update_ctx *u = ctx;
    for (int i = 0; i < n; i++)
        BTRY(blob_update(u->b));
    return 0;
}

static int update_cblas_run(void *ctx, int n)
{
    bench_update_ctx *u = ctx;
    for (int i = 0; i < n; i++)
        cblas_saxpy((int)u->n, -1.0f, u->diff, 1, u->data, 1);
    return 0;
}

/* The arrays of size n: a host-only blob's data (ones) and diff (1e-7). */
static int update_host_setup(bench_update_ctx *u, int64_t n)
{
    *u = (bench_update_ctx){.n = n};
    BTRY(blob_create(&u->b, BLOB_FLOAT32, BLOB_HOST_ONLY, 1, &n));
    float *diff;
    blob_status st = blob_mutable_cpu_data(u->b, (void **)&u->data);
    if (st == BLOB_OK)
        st = blob_mutable_cpu_diff(u->b, (void **)&diff);
    if (st != BLOB_OK) {
        bench_fail("accessor: %s", blob_last_error());
        blob_free(u->b);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        u->data[i] = 1.0f;
        diff[i] = 1e-7f;
    }
    u->diff = diff;
    return 0;
}

/* us per call of run over n elements, or NaN. */
static double update_host_time(int (*run)(void *, int), int64_t n)
{
    bench_update_ctx u;
    if (update_host_setup(&u, n) != 0)
        return NAN;
    int batch = n >= (1 << 22) ? 1 : (int)((1 << 22) / n);
    int reps = n >= (1 << 22) ? 7 : 15;
    bench_op op = {run, NULL, &u};
    double us = bench_time(&op, batch, reps, &bench_wall) / 1e3;
    blob_free(u.b);
    return us;
}

/* libblob's figures first, then the BLAS's on its own threads (as many as the library's,
 * which runs it on one): OpenBLAS's spin for a while after each call and would take the
 * cores from the library's. */
void bench_update_host(void)
{
    static const char *const cols[] = {"blob us", "cblas us", "blob/cblas", "blob GB/s"};
    enum { SIZES = 4 };
    static const int64_t sizes[SIZES] = {1 << 10, 1 << 16, 1 << 20, 1 << 24};
    report_section("6h", "blob_update on the host (data AT_CPU) vs cblas_saxpy, float32", 4, cols);
    double blob_us[SIZES], cblas_us[SIZES];
    char why[SIZES][256] = {{0}};
    for (int i = 0; i < SIZES; i++)
        if (isnan(blob_us[i] = update_host_time(bench_update_run, sizes[i])))
            snprintf(why[i], sizeof why[i], "%s", bench_error());
    blob_blas_info blas = {.threads = 1};
    blob_blas_get_info(&blas);
    const int blas_threads = blob__blas_threads();
    blob__blas_set_threads(blas.threads);
    for (int i = 0; i < SIZES; i++)
        if (!why[i][0] && isnan(cblas_us[i] = update_host_time(update_cblas_run, sizes[i])))
            snprintf(why[i], sizeof why[i], "%s", bench_error());
    if (blas_threads > 0)
        blob__blas_set_threads(blas_threads);
    for (int i = 0; i < SIZES; i++) {
        char label[32];
        snprintf(label, sizeof label, "%lld elems", (long long)sizes[i]);
        double v[4] = {blob_us[i], cblas_us[i], blob_us[i] / cblas_us[i],
                       12.0 * (double)sizes[i] / (blob_us[i] * 1e3)};
        if (why[i][0])
            report_error(label, why[i]);
        else
            report_row(label, v, GOAL_NONE, false);
    }
    report_note("cblas: the BLAS on its own threads, as many as the library's, after all of "
                "libblob's rows; GB/s counts 12 bytes per element (read x, y; write y)");
}

/* ---- 7: a training-like loop whose batch changes every step ---- */

#define LOOP_IN       784
#define LOOP_HID_GPU  4096 /* a wide MLP: ~42 MiB in use at LOOP_BMAX */
#define LOOP_HID_HOST 256  /* keeps the host-only run short */
#define LOOP_OUT      10
#define LOOP_BMIN     16
#define LOOP_BMAX     512
#define LOOP_WARMUP   20 /* random steps after the first, at LOOP_BMAX */
#define LOOP_BATCH    20 /* steps per batch of the timing loop */
#define LOOP_REPS     10 /* timed batches, after one untimed */

typedef blob_status (*read_fn)(blob *, const void **);
typedef blob_status (*write_fn)(blob *, void **);
typedef blob_status (*gemm_fn)(blob_dtype, blob_trans, blob_trans, int64_t, int64_t, int64_t,
                               double, const void *, const void *, double, void *);
typedef blob_status (*copy_fn)(blob_dtype, int64_t, const void *, void *);

typedef struct {
    int device;
    int64_t hid;
    uint64_t rng;
    blob *w1, *w2, *h, *y;
    read_fn data;
    write_fn mdata, mdiff;
    gemm_fn gemm;
    copy_fn copy;
} loop_ctx;

static int64_t loop_batch(loop_ctx *l)
{
    l->rng ^= l->rng << 13; /* xorshift64: the same batches every run */
    l->rng ^= l->rng >> 7;
    l->rng ^= l->rng << 17;
    return LOOP_BMIN + (int64_t)(l->rng % (LOOP_BMAX - LOOP_BMIN + 1));
}

/* One step: a fresh input batch x (as a data layer makes), persistent activations
 * reshaped to it, forward and backward by gemm where the data lives, the loss read
 * back on the host, and an update of both weights. */
static int loop_step_body(loop_ctx *l, blob *x, int64_t b)
{
    const float lr = 1e-3f / (float)b;
    int64_t sh[] = {b, l->hid}, sy[] = {b, LOOP_OUT};
    const void *px, *pw1, *pw2, *loss;
    void *hostx, *ph, *py, *pdy, *pdh, *pdw1, *pdw2;
    BTRY(blob_mutable_cpu_data(x, &hostx));
    memset(hostx, 0x3c, (size_t)b * LOOP_IN * sizeof(float)); /* 0.0115 everywhere */
    BTRY(blob_reshape(l->h, 2, sh));
    BTRY(blob_reshape(l->y, 2, sy));
    BTRY(l->data(x, &px));
    BTRY(l->data(l->w1, &pw1));
    BTRY(l->data(l->w2, &pw2));
    BTRY(l->mdata(l->h, &ph));
    BTRY(l->mdata(l->y, &py));
    BTRY(
        l->gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, b, l->hid, LOOP_IN, 1, px, pw1, 0, ph));
    BTRY(l->gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, b, LOOP_OUT, l->hid, 1, ph, pw2, 0,
                 py));
    BTRY(blob_cpu_data(l->y, &loss));
    BTRY(l->mdiff(l->y, &pdy));
    BTRY(l->copy(BLOB_FLOAT32, b * LOOP_OUT, py, pdy));
    BTRY(l->mdiff(l->w2, &pdw2));
    BTRY(l->gemm(BLOB_FLOAT32, BLOB_TRANS, BLOB_NO_TRANS, l->hid, LOOP_OUT, b, lr, ph, pdy, 0,
                 pdw2));
    BTRY(l->mdiff(l->h, &pdh));
    BTRY(
        l->gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_TRANS, b, l->hid, LOOP_OUT, 1, pdy, pw2, 0, pdh));
    BTRY(l->mdiff(l->w1, &pdw1));
    BTRY(
        l->gemm(BLOB_FLOAT32, BLOB_TRANS, BLOB_NO_TRANS, LOOP_IN, l->hid, b, lr, px, pdh, 0, pdw1));
    BTRY(blob_update(l->w1));
    BTRY(blob_update(l->w2));
    return 0;
}

static int loop_step(loop_ctx *l, int64_t b)
{
    int64_t sx[] = {b, LOOP_IN};
    blob *x;
    BTRY(blob_create(&x, BLOB_FLOAT32, l->device, 2, sx));
    int rc = loop_step_body(l, x, b);
    blob_free(x);
    return rc;
}

static int loop_run(void *ctx, int n)
{
    loop_ctx *l = ctx;
    for (int i = 0; i < n; i++)
        if (loop_step(l, loop_batch(l)) != 0)
            return -1;
    return 0;
}

static int loop_setup(loop_ctx *l)
{
    int64_t s1[] = {LOOP_IN, l->hid}, s2[] = {l->hid, LOOP_OUT}, sa[] = {1, 1};
    BTRY(blob_create(&l->w1, BLOB_FLOAT32, l->device, 2, s1));
    BTRY(blob_create(&l->w2, BLOB_FLOAT32, l->device, 2, s2));
    BTRY(blob_create(&l->h, BLOB_FLOAT32, l->device, 2, sa));
    BTRY(blob_create(&l->y, BLOB_FLOAT32, l->device, 2, sa));
    void *p;
    BTRY(blob_mutable_cpu_data(l->w1, &p));
    memset(p, 0x3c, sizeof(float) * LOOP_IN * l->hid);
    BTRY(blob_mutable_cpu_data(l->w2, &p));
    memset(p, 0x3c, sizeof(float) * l->hid * LOOP_OUT);
    return 0;
}

/* Warm up from an empty cache (one step at the largest batch, then LOOP_WARMUP random
 * ones), then time the loop with bench_time (one untimed batch, then LOOP_REPS timed
 * ones): st[0], st[1] are the stats of `place` before and after all of its batches,
 * st[2], st[3] those of pinned memory (with a GPU). */
static int loop_measure(loop_ctx *l, blob_place place, bool gpu, double *us, blob_alloc_stats st[4])
{
    BTRY(blob_alloc_empty_cache(place));
    BTRY(blob_alloc_reset_peaks(place));
    if (loop_setup(l) != 0 || loop_step(l, LOOP_BMAX) != 0 || loop_run(l, LOOP_WARMUP) != 0)
        return -1;
    BTRY(blob_alloc_get_stats(place, &st[0]));
    if (gpu)
        BTRY(blob_alloc_get_stats(blob_place_pinned(), &st[2]));
    bench_op op = {loop_run, NULL, l};
    if (isnan(*us = bench_time(&op, LOOP_BATCH, LOOP_REPS, &bench_wall) / 1e3))
        return -1;
    BTRY(blob_alloc_get_stats(place, &st[1]));
    if (gpu)
        BTRY(blob_alloc_get_stats(blob_place_pinned(), &st[3]));
    return 0;
}

static double driver_calls(const blob_alloc_stats *a, const blob_alloc_stats *b)
{
    return (double)(b->driver_allocs - a->driver_allocs + b->driver_frees - a->driver_frees);
}

static void loop_rows(bool gpu, double us, const blob_alloc_stats st[4])
{
    const blob_alloc_stats *s0 = &st[0], *s1 = &st[1];
    double v = us;
    report_row("us per step", &v, GOAL_NONE, false);
    v = driver_calls(s0, s1);
    report_row("driver allocs+frees, timed", &v, gpu ? GOAL_LOOP_DRIVER : GOAL_NONE, v == 0);
    v = (double)s1->reserved / (double)MIB;
    report_row("reserved MiB", &v, GOAL_NONE, false);
    v = (double)s1->reserved_peak / (double)MIB;
    report_row("reserved peak MiB", &v, GOAL_NONE, false);
    v = (double)s1->in_use_peak / (double)MIB;
    report_row("peak in use MiB", &v, GOAL_NONE, false);
    v = s1->in_use_peak ? (double)s1->reserved / (double)s1->in_use_peak : NAN;
    report_row("reserved / peak in use", &v, gpu ? GOAL_LOOP_RESERVED : GOAL_NONE, v <= 1.25);
    v = s1->requests > s0->requests
            ? (double)(s1->cache_hits - s0->cache_hits) / (double)(s1->requests - s0->requests)
            : NAN;
    report_row("cache hits / requests, timed", &v, GOAL_NONE, false);
    if (gpu) {
        v = driver_calls(&st[2], &st[3]);
        report_row("pinned allocs+frees, timed", &v, GOAL_NONE, false);
    }
}

void bench_loop(bool gpu)
{
    static const char *const cols[] = {"value"};
    report_section("7", "Training-like loop, batch random in [16, 512] every step", 1, cols);
    loop_ctx l = {.device = BLOB_HOST_ONLY,
                  .hid = gpu ? LOOP_HID_GPU : LOOP_HID_HOST,
                  .rng = 0x9E3779B97F4A7C15ull};
    if (gpu && blob_device_get(&l.device) != BLOB_OK) {
        report_error("setup", blob_last_error());
        return;
    }
    blob_place place = gpu ? blob_place_device(l.device) : blob_place_host();
    l.data = gpu ? blob_gpu_data : blob_cpu_data;
    l.mdata = gpu ? blob_mutable_gpu_data : blob_mutable_cpu_data;
    l.mdiff = gpu ? blob_mutable_gpu_diff : blob_mutable_cpu_diff;
    l.gemm = gpu ? blob_gpu_gemm : blob_cpu_gemm;
    l.copy = gpu ? blob_gpu_copy : blob_cpu_copy;
    double us = NAN;
    blob_alloc_stats st[4] = {{0}};
    if (loop_measure(&l, place, gpu, &us, st) != 0)
        report_error("loop", bench_error());
    else
        loop_rows(gpu, us, st);
    report_note("each step: a fresh x {b,784} filled on the host; h {b,%lld}, y {b,10} "
                "reshaped; 5 gemm, loss read back, 2 updates (%s)",
                (long long)l.hid, gpu ? "GPU" : "host-only");
    report_note("warm-up: one step at b = %d, then %d random; then %d untimed and %d x %d "
                "timed random steps: us per step is the median over the %d timed batches, "
                "the 'timed' counts cover all %d steps after the warm-up",
                LOOP_BMAX, LOOP_WARMUP, LOOP_BATCH, LOOP_REPS, LOOP_BATCH, LOOP_REPS,
                (LOOP_REPS + 1) * LOOP_BATCH);
    report_note("stats of the %s place, peaks since its cache was emptied",
                gpu ? "device" : "host");
    blob_free(l.w1);
    blob_free(l.w2);
    blob_free(l.h);
    blob_free(l.y);
}

/* The GPU rows (CUDA builds): 1 device alloc+free, 2 pinned alloc+free, 3 H<->D sync
 * bandwidth, 6 blob_update, each beside the raw CUDA call and PyTorch. */
#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cuda.h"

static const size_t alloc_sizes[] = {512, 4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB};
static const size_t pinned_sizes[] = {512, 4 * KIB, 64 * KIB, MIB, 64 * MIB};
static const size_t sync_sizes[] = {4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB, GIB};
static const size_t update_sizes[] = {1 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 28}; /* floats */

static int device;
static cublasHandle_t cublas;
static cudaEvent_t ev[2];

/* CUDA events on the legacy default stream, where the library and the raw calls run. */
static void event_begin(void) { (void)cudaEventRecord(ev[0], 0); }

static double event_end(void)
{
    float ms = 0;
    cudaError_t e = cudaEventRecord(ev[1], 0);
    if (e == cudaSuccess)
        e = cudaEventSynchronize(ev[1]);
    if (e == cudaSuccess)
        e = cudaEventElapsedTime(&ms, ev[0], ev[1]);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        bench_fail("event timing: %s", cudaGetErrorName(e));
        return NAN;
    }
    return (double)ms * 1e6;
}

const bench_clock bench_gpu_events = {event_begin, event_end};

static int drain(void *ctx)
{
    (void)ctx;
    CTRY(cudaDeviceSynchronize());
    return 0;
}

/* Median us per call of run(ctx), or NAN. */
static double time_us(int (*run)(void *, int), int (*settle)(void *), void *ctx, int batch,
                      int reps, const bench_clock *clock)
{
    bench_op op = {run, settle, ctx};
    return bench_time(&op, batch, reps, clock) / 1e3;
}

static void append_sizes(char *buf, size_t size, const char *opt, const size_t *v, size_t n)
{
    size_t len = strlen(buf);
    len += (size_t)snprintf(buf + len, size - len, " %s ", opt);
    for (size_t i = 0; i < n && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, i ? ",%zu" : "%zu", v[i]);
}

static void run_torch(void)
{
    char args[2048] = "";
    append_sizes(args, sizeof args, "--alloc", alloc_sizes, COUNT(alloc_sizes));
    append_sizes(args, sizeof args, "--pinned", pinned_sizes, COUNT(pinned_sizes));
    append_sizes(args, sizeof args, "--copy", sync_sizes, COUNT(sync_sizes));
    append_sizes(args, sizeof args, "--axpy", update_sizes, COUNT(update_sizes));
    bench_conv_torch_args(args, sizeof args);
    bench_fused_torch_args(args, sizeof args);
    torch_load(args);
}

/* The NVIDIA driver's version as nvidia-smi prints it, or "" if it cannot be run. */
static void nvidia_driver(char *buf, size_t size)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd,
             "nvidia-smi --query-gpu=driver_version --format=csv,noheader -i %d 2>/dev/null",
             device);
    buf[0] = '\0';
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    if (!fgets(buf, (int)size, p))
        buf[0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    pclose(p);
}

bool bench_gpu_open(bool with_torch)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0 || blob_device_count() == 0) {
        (void)cudaGetLastError();
        report_meta("device", "none: no GPU found (%s)",
                    e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
        return false;
    }
    struct cudaDeviceProp prop;
    int drv = 0, rt = 0, cbv = 0;
    if ((e = cudaGetDevice(&device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess ||
        (e = cudaFree(NULL)) != cudaSuccess || (e = cudaEventCreate(&ev[0])) != cudaSuccess ||
        (e = cudaEventCreate(&ev[1])) != cudaSuccess) {
        (void)cudaGetLastError();
        report_meta("device", "none: GPU unusable (%s)", cudaGetErrorName(e));
        return false;
    }
    cublasStatus_t cs = cublasCreate(&cublas);
    if (cs != CUBLAS_STATUS_SUCCESS) {
        report_meta("device", "none: cublasCreate failed (%d)", (int)cs);
        return false;
    }
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cublasGetVersion(cublas, &cbv);
    char nv[64];
    nvidia_driver(nv, sizeof nv);
    report_meta("device", "%s", prop.name);
    report_meta("gpu", "device %d of %d, cc %d.%d, %d SMs, %.1f GiB, L2 %.0f MiB", device, n,
                prop.major, prop.minor, prop.multiProcessorCount,
                (double)prop.totalGlobalMem / (double)GIB, (double)prop.l2CacheSize / (double)MIB);
    report_meta("driver", "%s%sCUDA %d.%d", nv, *nv ? ", " : "", drv / 1000, drv % 1000 / 10);
    report_meta("runtime", "CUDA runtime %d.%d, cuBLAS %d.%d.%d", rt / 1000, rt % 1000 / 10,
                cbv / 10000, cbv / 100 % 100, cbv % 100);
    if (with_torch)
        run_torch();
    else
        report_meta("torch", "not run (--no-torch)");
    return true;
}

void bench_gpu_close(void)
{
    if (cublas)
        cublasDestroy(cublas);
    for (int i = 0; i < 2; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
}

/* ---- 1 and 2: alloc+free ---- */

typedef struct {
    size_t size;
    blob_place place;
} alloc_ctx;

/* The allocator: blob_place_alloc + blob_place_free at the place. */
static int place_run(void *ctx, int n)
{
    alloc_ctx *a = ctx;
    for (int i = 0; i < n; i++) {
        void *p;
        BTRY(blob_place_alloc(a->place, a->size, NULL, &p));
        blob_place_free(a->place, p);
    }
    return 0;
}

/* The blob path: a block bound to the GPU, its first touch of the side at the place, its
 * free: on the device an allocation and a queued zero-fill, in pinned memory a host
 * zero-fill. */
static int blob_block_run(void *ctx, int n)
{
    alloc_ctx *a = ctx;
    for (int i = 0; i < n; i++) {
        blob_syncedmem *m;
        void *p;
        BTRY(blob_syncedmem_create(&m, a->size, device));
        blob_status st = a->place.kind == BLOB_PLACE_DEVICE
                             ? blob_syncedmem_mutable_gpu_data(m, &p)
                             : blob_syncedmem_mutable_cpu_data(m, &p);
        blob_syncedmem_free(m);
        BTRY(st);
    }
    return 0;
}

/* The raw calls: n allocations, each freed at once. */
#define CUDA_ALLOC_RUN(name, alloc, free) \
    static int name(void *ctx, int n)     \
    {                                     \
        alloc_ctx *a = ctx;               \
        for (int i = 0; i < n; i++) {     \
            void *p;                      \
            CTRY(alloc);                  \
            CTRY(free);                   \
        }                                 \
        return 0;                         \
    }
CUDA_ALLOC_RUN(cuda_malloc_run, cudaMalloc(&p, a->size), cudaFree(p))
CUDA_ALLOC_RUN(cuda_malloc_async_run, cudaMallocAsync(&p, a->size, 0), cudaFreeAsync(p, 0))
CUDA_ALLOC_RUN(cuda_malloc_host_run, cudaMallocHost(&p, a->size), cudaFreeHost(p))

/* The library's path with caching on: us per call and the driver allocs+frees its timed
 * batches made (after one untimed call), or NAN. */
static double blob_cached_us(int (*run)(void *, int), alloc_ctx *a, blob_place place, int batch,
                             double *drv)
{
    blob_alloc_stats s0, s1;
    if (run(a, 1) != 0 || drain(a) != 0)
        return NAN;
    if (blob_alloc_get_stats(place, &s0) != BLOB_OK) {
        bench_fail("blob_alloc_get_stats: %s", blob_last_error());
        return NAN;
    }
    double us = time_us(run, drain, a, batch, 15, &bench_wall);
    if (isnan(us))
        return NAN;
    if (blob_alloc_get_stats(place, &s1) != BLOB_OK) {
        bench_fail("blob_alloc_get_stats: %s", blob_last_error());
        return NAN;
    }
    *drv = (double)(s1.driver_allocs - s0.driver_allocs + s1.driver_frees - s0.driver_frees);
    return us;
}

/* The same with caching off; caching is back on afterwards. */
static double blob_uncached_us(int (*run)(void *, int), alloc_ctx *a, int batch, int reps)
{
    if (blob_alloc_set_caching(false) != BLOB_OK) {
        bench_fail("blob_alloc_set_caching(false): %s", blob_last_error());
        return NAN;
    }
    double us = time_us(run, drain, a, batch, reps, &bench_wall);
    if (blob_alloc_set_caching(true) != BLOB_OK) {
        bench_fail("blob_alloc_set_caching(true): %s", blob_last_error());
        return NAN;
    }
    return us;
}

/* The allocator at a's place with caching on, batches of `batch` calls, and off, `slow`
 * calls a batch and `reps` batches: us per call into v[0] and v[1] (each only when the one
 * before it was measured), the driver allocs+frees of the cached batches into *drv. 0, or
 * -1 when either is missing. */
static int place_us(alloc_ctx *a, int batch, int slow, int reps, double *v, double *drv)
{
    v[0] = blob_cached_us(place_run, a, a->place, batch, drv);
    if (!isnan(v[0]))
        v[1] = blob_uncached_us(place_run, a, slow, reps);
    return isnan(v[1]) ? -1 : 0;
}

static int alloc_row(size_t size, double *v)
{
    alloc_ctx a = {size, blob_place_device(device)};
    int big = size >= 16 * MIB;
    double drv = NAN, block_drv = NAN;
    if (place_us(&a, big ? 20 : 200, 10, 7, v, &drv) == 0)
        v[2] = time_us(cuda_malloc_run, drain, &a, 10, 7, &bench_wall);
    if (!isnan(v[2]))
        v[3] = time_us(cuda_malloc_async_run, drain, &a, 200, 15, &bench_wall);
    if (!isnan(v[3]))
        v[4] = blob_cached_us(blob_block_run, &a, a.place, big ? 20 : 200, &block_drv);
    v[5] = torch_ref("alloc_dev", (double)size) / 1e3;
    v[6] = v[2] / v[0];
    v[7] = drv;
    return isnan(v[4]) ? -1 : 0;
}

void bench_gpu_alloc(void)
{
    static const char *const cols[] = {"cached",     "uncached", "cudaMalloc",    "mallocAsync",
                                       "blob block", "torch",    "Malloc/cached", "drv"};
    report_section("1", "Device alloc+free, us per call (wall clock)", 8, cols);
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess ||
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) {
        (void)cudaGetLastError();
        pool = NULL;
    }
    for (size_t i = 0; i < COUNT(alloc_sizes); i++) {
        char label[32];
        double v[8] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
        fmt_bytes(alloc_sizes[i], label);
        if (alloc_row(alloc_sizes[i], v) != 0)
            report_error(label, bench_error());
        else
            report_row(label, v, GOAL_DEV_ALLOC, v[0] <= 0.5 && v[6] >= 100);
    }
    if (pool)
        (void)cudaMemPoolTrimTo(pool, 0);
    blob_alloc_empty_cache(blob_place_device(device));
    report_note("cached/uncached: blob_place_alloc + blob_place_free, caching on/off; blob "
                "block: blob_syncedmem_create + mutable_gpu_data (allocation and a queued "
                "zero-fill) + free");
    report_note("cudaMalloc: cudaMalloc+cudaFree; mallocAsync: cudaMallocAsync+cudaFreeAsync, "
                "default pool, release threshold max");
    report_note("torch: torch.empty(uint8)+del, Python included; drv: driver allocs+frees in "
                "the cached batches; queued GPU work drains untimed between batches");
}

static int pinned_row(size_t size, double *v)
{
    alloc_ctx a = {size, blob_place_pinned()};
    int batch = size >= MIB ? (int)(16 * MIB / size) + 1 : 200, slow = size >= 16 * MIB ? 1 : 5;
    double drv = NAN, block_drv = NAN;
    if (place_us(&a, batch, slow, 5, v, &drv) == 0)
        v[2] = time_us(cuda_malloc_host_run, NULL, &a, slow, 5, &bench_wall);
    if (!isnan(v[2]))
        v[3] = blob_cached_us(blob_block_run, &a, a.place, batch, &block_drv);
    v[4] = torch_ref("alloc_pinned", (double)size) / 1e3;
    v[5] = v[2] / v[0];
    v[6] = drv;
    return isnan(v[3]) ? -1 : 0;
}

void bench_gpu_pinned(void)
{
    static const char *const cols[] = {"cached", "uncached",          "MallocHost", "blob block",
                                       "torch",  "MallocHost/cached", "drv"};
    report_section("2", "Pinned host alloc+free, us per call (wall clock)", 7, cols);
    for (size_t i = 0; i < COUNT(pinned_sizes); i++) {
        char label[32];
        double v[7] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN};
        fmt_bytes(pinned_sizes[i], label);
        if (pinned_row(pinned_sizes[i], v) != 0)
            report_error(label, bench_error());
        else
            report_row(label, v, GOAL_PINNED_ALLOC, v[0] <= 1.0);
    }
    blob_alloc_empty_cache(blob_place_pinned());
    report_note("cached/uncached: blob_place_alloc + blob_place_free of pinned memory, caching "
                "on/off; blob block: blob_syncedmem_create (GPU-bound) + mutable_cpu_data "
                "(allocation and a host zero-fill) + free");
    report_note("MallocHost: cudaMallocHost+cudaFreeHost; torch: torch.empty(pin_memory=True)+del");
}

/* ---- 3: H<->D sync bandwidth ---- */

typedef struct {
    size_t size;
    blob_syncedmem *m;
    void *dev, *pinned, *pageable;
} sync_ctx;

/* The block's copy: a write of one side, then a read of the other. */
#define BLOB_SYNC_RUN(name, write, read) \
    static int name(void *ctx, int n)    \
    {                                    \
        sync_ctx *s = ctx;               \
        void *p;                         \
        const void *c;                   \
        for (int i = 0; i < n; i++) {    \
            BTRY(write(s->m, &p));       \
            BTRY(read(s->m, &c));        \
        }                                \
        return 0;                        \
    }
BLOB_SYNC_RUN(blob_h2d_run, blob_syncedmem_mutable_cpu_data, blob_syncedmem_gpu_data)
BLOB_SYNC_RUN(blob_d2h_run, blob_syncedmem_mutable_gpu_data, blob_syncedmem_cpu_data)

#define COPY_RUN(name, dst, src, kind)                 \
    static int name(void *ctx, int n)                  \
    {                                                  \
        sync_ctx *s = ctx;                             \
        for (int i = 0; i < n; i++)                    \
            CTRY(cudaMemcpy(dst, src, s->size, kind)); \
        return 0;                                      \
    }
COPY_RUN(h2d_pinned_run, s->dev, s->pinned, cudaMemcpyHostToDevice)
COPY_RUN(d2h_pinned_run, s->pinned, s->dev, cudaMemcpyDeviceToHost)
COPY_RUN(h2d_pageable_run, s->dev, s->pageable, cudaMemcpyHostToDevice)
COPY_RUN(d2h_pageable_run, s->pageable, s->dev, cudaMemcpyDeviceToHost)

static int sync_setup(sync_ctx *s)
{
    void *p;
    BTRY(blob_syncedmem_create(&s->m, s->size, device));
    BTRY(blob_syncedmem_mutable_cpu_data(s->m, &p));
    memset(p, 0x3c, s->size);
    CTRY(cudaMalloc(&s->dev, s->size));
    CTRY(cudaMallocHost(&s->pinned, s->size));
    if (!(s->pageable = malloc(s->size)))
        return bench_fail("malloc(%zu) failed", s->size);
    memset(s->pinned, 0x3c, s->size);
    memset(s->pageable, 0x3c, s->size);
    return 0;
}

/* GB/s of one direction's rows (blob, pinned, ratio, pageable, torch x2) into v. */
static int sync_dir(sync_ctx *s, bool h2d, double *v)
{
    size_t per = 64 * MIB / s->size;
    int batch = per < 1 ? 1 : per > 50 ? 50 : (int)per;
    int reps = s->size >= 256 * MIB ? 5 : 11;
    double bytes = (double)s->size; /* bytes per ns = GB/s */
    double t_blob = time_us(h2d ? blob_h2d_run : blob_d2h_run, NULL, s, batch, reps, &bench_wall);
    if (isnan(t_blob))
        return -1;
    double t_pin =
        time_us(h2d ? h2d_pinned_run : d2h_pinned_run, NULL, s, batch, reps, &bench_wall);
    if (isnan(t_pin))
        return -1;
    double t_page =
        time_us(h2d ? h2d_pageable_run : d2h_pageable_run, NULL, s, batch, reps, &bench_wall);
    if (isnan(t_page))
        return -1;
    v[0] = bytes / (t_blob * 1e3);
    v[1] = bytes / (t_pin * 1e3);
    v[2] = v[0] / v[1];
    v[3] = bytes / (t_page * 1e3);
    v[4] = torch_ref(h2d ? "h2d_pinned" : "d2h_pinned", bytes);
    v[5] = torch_ref(h2d ? "h2d_pageable" : "d2h_pageable", bytes);
    return 0;
}

void bench_gpu_sync(void)
{
    static const char *const cols[] = {"blob",         "raw pinned",   "blob/raw",
                                       "raw pageable", "torch pinned", "torch pageable"};
    report_section("3", "Blob sync H->D and D->H, GB/s (wall clock, synchronous)", 6, cols);
    for (size_t i = 0; i < COUNT(sync_sizes); i++) {
        sync_ctx s = {sync_sizes[i], NULL, NULL, NULL, NULL};
        char size[32], label[48];
        fmt_bytes(s.size, size);
        int rc = sync_setup(&s);
        for (int dir = 0; dir < 2; dir++) {
            double v[6];
            snprintf(label, sizeof label, "%s %s", dir ? "D->H" : "H->D", size);
            if (rc != 0 || sync_dir(&s, dir == 0, v) != 0)
                report_error(label, bench_error());
            else if (s.size >= 16 * MIB)
                report_row(label, v, GOAL_SYNC_BW, v[2] >= 0.95);
            else
                report_row(label, v, GOAL_NONE, false);
        }
        blob_syncedmem_free(s.m);
        cudaFree(s.dev);
        cudaFreeHost(s.pinned);
        free(s.pageable);
        (void)cudaGetLastError();
    }
    blob_alloc_empty_cache(blob_place_pinned());
    blob_alloc_empty_cache(blob_place_device(device));
    report_note("blob H->D: mutable_cpu_data + gpu_data; D->H: mutable_gpu_data + cpu_data "
                "(one copy each); raw: cudaMemcpy from cudaMallocHost or malloc memory");
    report_note("torch: gpu.copy_(cpu) / cpu.copy_(gpu) + synchronize, pinned and pageable");
}

/* ---- 6: blob_update vs cublasSaxpy ---- */

static int update_saxpy_run(void *ctx, int n)
{
    bench_update_ctx *u = ctx;
    const float minus1 = -1.0f;
    for (int i = 0; i < n; i++) {
        cublasStatus_t st = cublasSaxpy(cublas, (int)u->n, &minus1, u->diff, 1, u->data, 1);
        if (st != CUBLAS_STATUS_SUCCESS)
            return bench_fail("cublasSaxpy: status %d", (int)st);
    }
    return 0;
}

/* A device copy moving the same 12 bytes per element: 6 read, 6 written. */
static int update_copy_run(void *ctx, int n)
{
    bench_update_ctx *u = ctx;
    for (int i = 0; i < n; i++)
        CTRY(cudaMemcpyAsync(u->c1, u->c0, (size_t)u->n * 6, cudaMemcpyDeviceToDevice, 0));
    return 0;
}

static int update_setup(bench_update_ctx *u)
{
    void *p;
    BTRY(blob_create(&u->b, BLOB_FLOAT32, device, 1, &u->n));
    BTRY(blob_mutable_gpu_data(u->b, &p));
    u->data = p;
    CTRY(cudaMemset(p, 0x3f, (size_t)u->n * 4)); /* 0.747 */
    BTRY(blob_mutable_gpu_diff(u->b, &p));
    u->diff = p;
    CTRY(cudaMemset(p, 0x2f, (size_t)u->n * 4)); /* 1.6e-10 */
    CTRY(cudaMalloc(&u->c0, (size_t)u->n * 6));
    CTRY(cudaMalloc(&u->c1, (size_t)u->n * 6));
    CTRY(cudaMemset(u->c0, 0x3f, (size_t)u->n * 6));
    return 0;
}

static int update_row(int64_t n, double *v)
{
    bench_update_ctx u = {.n = n};
    const bench_clock *events = &bench_gpu_events;
    int batch = n >= (1 << 22) ? 1 : (int)((1 << 22) / n < 200 ? (1 << 22) / n : 200);
    int reps = n >= (1 << 26) ? 9 : 15;
    const bench_op blob_op = {bench_update_run, NULL, &u}, saxpy_op = {update_saxpy_run, NULL, &u};
    double blob_ns, saxpy_ns;
    int rc = update_setup(&u);
    if (rc == 0)
        rc = bench_time_pair(&blob_op, &saxpy_op, batch, reps, events, &blob_ns, &saxpy_ns);
    if (rc == 0 && isnan(v[3] = time_us(update_copy_run, NULL, &u, batch, reps, events)))
        rc = -1;
    if (rc == 0) {
        v[0] = blob_ns / 1e3;
        v[1] = saxpy_ns / 1e3;
        v[2] = v[0] / v[1];
        v[4] = 12.0 * (double)n / (v[0] * 1e3);
        v[5] = torch_ref("axpy", (double)n) / 1e3;
    }
    blob_free(u.b);
    cudaFree(u.c0);
    cudaFree(u.c1);
    (void)cudaGetLastError();
    return rc;
}

void bench_gpu_update(void)
{
    static const char *const cols[] = {"blob us", "saxpy us",  "blob/saxpy",
                                       "copy us", "blob GB/s", "torch us"};
    report_section("6", "blob_update (data -= diff on the GPU), float32, CUDA events", 6, cols);
    for (size_t i = 0; i < COUNT(update_sizes); i++) {
        char label[32];
        double v[6];
        snprintf(label, sizeof label, "%zu elems", update_sizes[i]);
        if (update_row((int64_t)update_sizes[i], v) != 0)
            report_error(label, bench_error());
        else
            report_row(label, v, GOAL_UPDATE, v[2] <= 1.05);
    }
    blob_alloc_empty_cache(blob_place_device(device));
    report_note("saxpy: cublasSaxpy(alpha -1) on the blob's own buffers; copy: cudaMemcpyAsync "
                "D2D of 6 bytes per element (12 moved, as axpy); torch: y.add_(x, alpha=-1)");
    report_note("blob and saxpy timed in the order blob, saxpy, saxpy, blob; each figure is the "
                "mean of its two medians");
}

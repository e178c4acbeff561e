#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "blob/dlpack.h" /* BLOB_DLPACK_VERSIONED */
#include "../src/core/core.h"
#include "fake_backend.h"
#include "testutil.h"

bool test_real_gpu;

/* What req_probe found. */
static struct {
    int gpus;
    bool big_gpu_memory, numpy, tmpfile;
} found;

static bool have_gpu(void) { return found.gpus >= 1; }
static bool have_two_gpus(void) { return found.gpus >= 2; }
static bool have_big_gpu_memory(void) { return found.big_gpu_memory; }
static bool have_no_gpu(void) { return found.gpus == 0; }
static bool cpu_only_build(void) { return !blob_built_with_cuda(); }
static bool have_numpy(void) { return found.numpy; }
static bool have_tmpfile(void) { return found.tmpfile; }
static bool have_dlpack1(void)
{
#ifdef BLOB_DLPACK_VERSIONED
    return true;
#else
    return false;
#endif
}
#if defined(__SANITIZE_THREAD__) /* gcc */
#define UNDER_TSAN 1
#elif defined(__has_feature) /* clang */
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
static bool threads_after_fork(void)
{
#ifdef UNDER_TSAN
    return false; /* ThreadSanitizer stops a forked child of a threaded process that starts one */
#else
    return true;
#endif
}

/* The needs: tag, reason, whether the reason names the GPU count, the check, and how
 * many tests were skipped for it. */
static struct {
    const char *tag, *why;
    bool show_gpus;
    bool (*met)(void);
    int skipped;
} reqs[] = {
    {"gpu", "they need a GPU", true, have_gpu, 0},
    {"gpu2", "they need two GPUs", true, have_two_gpus, 0},
    {"gpumem", "they need two device buffers of 8 GiB", false, have_big_gpu_memory, 0},
    {"nogpu", "they need a machine without a GPU", true, have_no_gpu, 0},
    {"nocuda", "they need a build without CUDA", false, cpu_only_build, 0},
    {"numpy", "they need python3 with numpy", false, have_numpy, 0},
    {"tmpfile", "they need O_TMPFILE in /tmp", false, have_tmpfile, 0},
    {"dlpack1", "they need a DLPack 1.0 header: make DLPACK_CFLAGS=-I<its include dir>", false,
     have_dlpack1, 0},
    {"forkthreads", "they start threads in a forked child, which ThreadSanitizer forbids", false,
     threads_after_fork, 0},
};
#define NUM_REQS      ((int)(sizeof reqs / sizeof reqs[0]))
#define MAX_CASE_REQS 4

/* The needs of each case made by req_tcase, and its count of tests. */
static struct {
    TCase *tc;
    int reqs[MAX_CASE_REQS], num_reqs, tests;
} cases[64];
static int num_cases;

/* Under fork Check kills a test past its case's timeout; under CK_FORK=no nothing does,
 * so the tests of req_tcase's cases arm an alarm of their own that ends the run with a
 * failure instead of a hang. A fixture does not know its case, so the alarm allows the
 * longest timeout of any such case (watch_limit_s), times CK_TIMEOUT_MULTIPLIER. */
#define REQ_TIMEOUT_S 120
static int watch_limit_s = REQ_TIMEOUT_S;

static bool no_fork(void)
{
    const char *f = getenv("CK_FORK");
    return f && !strcmp(f, "no");
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "testutil: a test ran past its timeout under CK_FORK=no; "
                              "the run stops here (failed)\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
    _exit(EXIT_FAILURE);
}

static void watch_start(void)
{
    if (!no_fork())
        return;
    const char *m = getenv("CK_TIMEOUT_MULTIPLIER");
    double scale = m ? atof(m) : 1;
    signal(SIGALRM, on_alarm);
    alarm((unsigned)(watch_limit_s * (scale > 0 ? scale : 1)) + 1);
}

static void watch_stop(void)
{
    if (no_fork())
        alarm(0);
}

static void die(const char *msg, const char *arg)
{
    fprintf(stderr, "testutil: %s%s\n", msg, arg);
    exit(2);
}

TCase *req_tcase(const char *name, const char *tags)
{
    if (num_cases == (int)(sizeof cases / sizeof cases[0]))
        die("too many test cases with needs, at ", name);
    TCase *tc = tcase_create(name);
    tcase_set_tags(tc, tags);
    tcase_set_timeout(tc, REQ_TIMEOUT_S);
    tcase_add_checked_fixture(tc, watch_start, watch_stop);
    cases[num_cases].tc = tc;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", tags);
    for (char *save, *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        int r = 0;
        while (r < NUM_REQS && strcmp(reqs[r].tag, t) != 0)
            r++;
        if (r == NUM_REQS)
            die("unknown need tag ", t);
        if (cases[num_cases].num_reqs == MAX_CASE_REQS)
            die("too many need tags: ", tags);
        cases[num_cases].reqs[cases[num_cases].num_reqs++] = r;
    }
    num_cases++;
    return tc;
}

/* After a test that used CUDA (the driver is loaded in its process): no kernel it queued
 * faulted. A fault after a test's last synchronisation would otherwise go unseen, as the
 * test's forked process ends before the error is reported. */
static void device_check(void)
{
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!driver)
        return;
    dlclose(driver);
    const blob__backend *cuda = blob__backend_default();
    if (cuda->device_count() > 0)
        ck_assert_msg(cuda->device_synchronize() == BLOB_OK, "the test left a device fault: %s",
                      blob_last_error());
}

TCase *suite_case(Suite *s, const char *name, const char *tags, int timeout, SFun setup,
                  SFun teardown)
{
    TCase *tc = tags ? req_tcase(name, tags) : tcase_create(name);
    if (timeout)
        tcase_set_timeout(tc, timeout);
    if (tags && timeout > watch_limit_s)
        watch_limit_s = timeout;
    if (setup || teardown)
        tcase_add_checked_fixture(tc, setup, teardown);
    if (!tags || !strstr(tags, "gpu2")) /* (multi-GPU cases: their ranks' devices are others) */
        tcase_add_checked_fixture(tc, NULL, device_check);
    suite_add_tcase(s, tc);
    return tc;
}

void add_loop_test_list(TCase *tc, int start, int end, const TTest *const *tests)
{
    int n = 0;
    for (; tests[n]; n++)
        tcase_add_loop_test(tc, tests[n], start, end);
    for (int i = 0; i < num_cases; i++)
        if (cases[i].tc == tc)
            cases[i].tests += n * (end - start);
}

/* In a child: the GPU count, and whether GPU 0 holds the "gpumem" buffers. */
static void probe_gpus(void)
{
    int fds[2];
    if (pipe(fds) != 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        int reply[2] = {blob_device_count(), 0};
        void *a = NULL, *b = NULL;
        if (reply[0] > 0 && blob__be->device_alloc(TEST_BIG_GPU_BYTES, &a) == BLOB_OK &&
            blob__be->device_alloc(TEST_BIG_GPU_BYTES, &b) == BLOB_OK)
            reply[1] = 1;
        blob__be->device_free(a);
        blob__be->device_free(b);
        ssize_t n = write(fds[1], reply, sizeof reply);
        _exit(n == (ssize_t)sizeof reply ? 0 : 1);
    }
    close(fds[1]);
    int reply[2];
    if (pid > 0 && read(fds[0], reply, sizeof reply) == (ssize_t)sizeof reply) {
        found.gpus = reply[0];
        found.big_gpu_memory = reply[1];
    }
    close(fds[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
}

int req_probe(void)
{
    probe_gpus();
    test_real_gpu = found.gpus > 0;
    found.numpy = system("python3 -c 'import numpy' >/dev/null 2>&1") == 0;
    int fd = open("/tmp", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    found.tmpfile = fd >= 0;
    if (fd >= 0)
        close(fd);
    return found.gpus;
}

static req_part part = REQ_WHOLE;
static int part_gpus;

void req_set_part(req_part p, int gpus)
{
    part = p;
    part_gpus = gpus;
}

const char *req_exclusions(void)
{
    static char exclude[256];
    for (int i = 0; i < num_cases; i++)
        for (int k = 0; k < cases[i].num_reqs; k++)
            if (!reqs[cases[i].reqs[k]].met()) {
                reqs[cases[i].reqs[k]].skipped += cases[i].tests;
                break;
            }
    size_t used = 0;
    for (int r = 0; r < NUM_REQS; r++) {
        if (reqs[r].met())
            continue;
        used += (size_t)snprintf(exclude + used, sizeof exclude - used, "%s%s", used ? " " : "",
                                 reqs[r].tag);
        if (!reqs[r].skipped || part == REQ_MULTI_GPU_PART)
            continue;
        if (part == REQ_ONE_GPU_PART && !strcmp(reqs[r].tag, "gpu2")) {
            printf("deferred: %d tests (%s: they run next, with all %d)\n", reqs[r].skipped,
                   reqs[r].why, part_gpus);
            continue;
        }
        printf("skipped: %d tests (%s", reqs[r].skipped, reqs[r].why);
        if (reqs[r].show_gpus)
            printf("; %d found", found.gpus);
        printf(")\n");
    }
    /* the caller's own exclusions (Check reads CK_EXCLUDE_TAGS only when given none) */
    const char *more = getenv("CK_EXCLUDE_TAGS");
    if (more && *more) {
        used +=
            (size_t)snprintf(exclude + used, sizeof exclude - used, "%s%s", used ? " " : "", more);
        printf("excluded by CK_EXCLUDE_TAGS: %s\n", more);
    }
    if (used >= sizeof exclude)
        die("too many excluded tags: ", exclude);
    return used ? exclude : NULL;
}

static bool caching_before;

void fake_setup(void)
{
    fake_install();
    caching_before = blob_alloc_caching();
    blob_alloc_set_caching(false);
}

void fake_teardown(void)
{
    blob_alloc_set_caching(caching_before);
    int64_t live = fake_uninstall();
    ck_assert_msg(live == 0, "%lld fake blocks leaked", (long long)live);
}

static int no_devices(void) { return 0; }

void test_hide_gpus(void)
{
    static blob__backend none;
    none = *blob__backend_default();
    none.device_count = no_devices;
    blob__backend_install(&none);
}

void test_show_gpus(void) { blob__backend_install(NULL); }

blob_optim test_optim_config(int c)
{
    blob_optim o;
    switch (c) {
    case 0: return blob_optim_default(BLOB_OPTIM_SGD, 0.1);
    case 1:
        o = blob_optim_default(BLOB_OPTIM_SGD, 0.05);
        o.momentum = 0.9, o.dampening = 0.1, o.weight_decay = 1e-2;
        return o;
    case 2:
        o = blob_optim_default(BLOB_OPTIM_SGD, 0.05);
        o.momentum = 0.9, o.nesterov = true, o.weight_decay = 5e-4;
        return o;
    case 3:
        o = blob_optim_default(BLOB_OPTIM_SGD_CAFFE, 0.01);
        o.momentum = 0.9, o.weight_decay = 5e-4;
        return o;
    case 4: return blob_optim_default(BLOB_OPTIM_ADAM, 1e-2);
    case 5:
        o = blob_optim_default(BLOB_OPTIM_ADAM, 1e-2);
        o.weight_decay = 1e-2;
        return o;
    default: return blob_optim_default(BLOB_OPTIM_ADAMW, 1e-2);
    }
}

/* n tensors of the given counts laid out in one buffer: *counts_copy and *offset (malloc'ed)
 * get a copy of counts and each one's offset in elements, a multiple of align, or with gap,
 * for odd tensors, one element past the previous end (misaligned); returns the elements in
 * all. */
static int64_t test_pack_tensors(int n, const int64_t *counts, int64_t align, bool gap,
                                 int64_t **counts_copy, int64_t **offset)
{
    int64_t total = 0;
    *counts_copy = malloc(sizeof(int64_t) * (size_t)n + 8);
    *offset = malloc(sizeof(int64_t) * (size_t)n + 8);
    for (int i = 0; i < n; i++) {
        (*counts_copy)[i] = counts[i];
        total += gap && i % 2 ? 1 : (align - total % align) % align;
        (*offset)[i] = total;
        total += counts[i];
    }
    return total;
}

/* The n tensors' addresses (malloc'ed) in a buffer at base whose elements are es bytes. */
static void **test_tensor_pointers(void *base, int n, const int64_t *offset, size_t es)
{
    void **ptr = malloc(sizeof(void *) * (size_t)n + 8);
    for (int i = 0; i < n; i++)
        ptr[i] = (char *)base + (size_t)offset[i] * es;
    return ptr;
}

/* Memory for the array calls of one side: bytes of the device (the backend's device_alloc,
 * asserted) when gpu, else of the host, 64-byte aligned; test_side_free gives it back. */
static void *test_side_alloc(bool gpu, size_t bytes)
{
    void *p;
    if (gpu)
        ck_ok(blob__be->device_alloc(bytes, &p));
    else
        p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    return p;
}

static void test_side_free(bool gpu, void *p) { gpu ? blob__be->device_free(p) : free(p); }

void test_side_copy(bool gpu, void *side, void *host, size_t bytes, bool up)
{
    if (!gpu) {
        up ? memcpy(side, host, bytes) : memcpy(host, side, bytes);
        return;
    }
    void *s = blob_stream_get();
    ck_ok(up ? blob__be->copy_async(side, host, bytes, BLOB__H2D, s)
             : blob__be->copy_async(host, side, bytes, BLOB__D2H, s));
    ck_ok(blob__be->stream_synchronize(s));
}

test_arrays test_arrays_new(bool gpu, int n, const int64_t *counts, int64_t align, bool gap,
                            int arrays, const blob_dtype *dt)
{
    ck_assert_int_le(arrays, TEST_ARRAYS_MAX);
    test_arrays t = {.gpu = gpu, .n = n, .arrays = arrays};
    t.total = test_pack_tensors(n, counts, align, gap, &t.counts, &t.offset);
    for (int a = 0; a < arrays; a++) {
        const size_t es = blob_dtype_size(dt[a]);
        t.dt[a] = dt[a];
        t.bytes[a] = (size_t)(t.total + align) * es;
        t.host[a] = calloc(1, t.bytes[a]);
        t.side[a] = test_side_alloc(gpu, t.bytes[a]);
        t.ptr[a] = test_tensor_pointers(t.side[a], n, t.offset, es);
    }
    test_fill(dt[0], t.host[0], t.total, -1, 1);
    t.step = test_side_alloc(gpu, BLOB_OPTIM_STEP_WORDS * sizeof(int64_t));
    return t;
}

void test_arrays_sync(test_arrays *t, int a, bool up)
{
    test_side_copy(t->gpu, t->side[a], t->host[a], t->bytes[a], up);
}

void test_arrays_init(test_arrays *t)
{
    for (int a = 0; a < t->arrays; a++)
        test_arrays_sync(t, a, true);
    int64_t zero[BLOB_OPTIM_STEP_WORDS] = {0};
    test_side_copy(t->gpu, t->step, zero, sizeof zero, true);
}

void test_arrays_free(test_arrays *t)
{
    for (int a = 0; a < t->arrays; a++) {
        free(t->host[a]);
        test_side_free(t->gpu, t->side[a]);
        free(t->ptr[a]);
    }
    test_side_free(t->gpu, t->step);
    free(t->counts);
    free(t->offset);
}

void test_streams_create(void **a, void **b)
{
    ck_ok(blob_stream_create(a));
    ck_ok(blob_stream_create(b));
}

void test_streams_destroy(void *a, void *b)
{
    ck_ok(blob_stream_destroy(a));
    ck_ok(blob_stream_destroy(b));
}

void test_write_file(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

int test_dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

double test_time_scale(void)
{
    const char *v = getenv("TEST_TIME_SCALE");
    if (!v || !*v)
        return 1;
    char *end;
    double s = strtod(v, &end);
    if (*end || !(s >= 1 && s <= 1000))
        die("TEST_TIME_SCALE is not a number in [1, 1000]: ", v);
    return s;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

void test_seed(uint64_t seed) { rng_state = seed ? seed : 0x9e3779b97f4a7c15ull; }

double test_uniform(double lo, double hi)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545f4914f6cdd1dull;
    return lo + (hi - lo) * (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

double test_get(blob_dtype dtype, const void *p, int64_t i)
{
    double v;
    switch (dtype) {
    case BLOB_FLOAT32: return ((const float *)p)[i];
    case BLOB_FLOAT64: return ((const double *)p)[i];
    default:
        ck_ok(blob_cpu_convert(dtype, BLOB_FLOAT64, 1,
                               (const char *)p + (size_t)i * blob_dtype_size(dtype), &v));
        return v;
    }
}

void test_put(blob_dtype dtype, void *p, int64_t i, double v)
{
    switch (dtype) {
    case BLOB_FLOAT32: ((float *)p)[i] = (float)v; break;
    case BLOB_FLOAT64: ((double *)p)[i] = v; break;
    default:
        ck_ok(blob_cpu_convert(BLOB_FLOAT64, dtype, 1, &v,
                               (char *)p + (size_t)i * blob_dtype_size(dtype)));
        break;
    }
}

const blob_dtype test_halves[2] = {BLOB_BFLOAT16, BLOB_FLOAT16};

const char *test_dtype_name(blob_dtype dtype) { return blob_dtype_name(dtype); }

double test_eps(blob_dtype dtype)
{
    return dtype == BLOB_FLOAT32    ? 0x1p-23
           : dtype == BLOB_FLOAT64  ? 0x1p-52
           : dtype == BLOB_BFLOAT16 ? 0x1p-7
                                    : 0x1p-10;
}

double test_tol(blob_dtype dtype, int64_t k) { return 4 * test_eps(dtype) * (double)(k + 1); }

void test_fill(blob_dtype dtype, void *x, int64_t n, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++)
        test_put(dtype, x, i, test_uniform(lo, hi));
}

double test_rel_err(blob_dtype dtype, const void *a, const double *ref, int64_t n, double floor)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = test_get(dtype, a, i);
        double scale = fabs(ref[i]) > floor ? fabs(ref[i]) : floor;
        double e = fabs(v - ref[i]) / scale;
        if (!(e <= worst))
            worst = e; /* NaN propagates as the worst */
    }
    return worst;
}

uint32_t test_f32_bits(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

float test_bits_f32(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

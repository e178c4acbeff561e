/* Shared helpers of the Check suites. */
#ifndef BLOB_TESTUTIL_H
#define BLOB_TESTUTIL_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>

#include "blob/blob.h"

/* Assert a call's exact status, printing the detail message when it differs. */
#define ck_status(expr, expected)                                                               \
    do {                                                                                        \
        blob_status ck_st_ = (expr);                                                            \
        ck_assert_msg(ck_st_ == (expected), "%s returned %s (%s), expected %s", #expr,          \
                      blob_status_name(ck_st_), blob_last_error(), blob_status_name(expected)); \
    } while (0)
#define ck_ok(expr) ck_status((expr), BLOB_OK)

/* Test cases whose tests need something this machine or build may lack. Each need has
 * a tag; the runner probes them all before any test runs (req_probe), excludes the
 * cases whose needs are unmet and prints, per reason, how many tests were skipped, so
 * nothing is passed without having run. A test never returns early instead.
 *   "gpu"     a real GPU
 *   "gpu2"    two real GPUs
 *   "gpumem"  TEST_BIG_GPU_BYTES of device memory, twice, on GPU 0
 *   "nogpu"   no real GPU (tests whose fake device would hand fake pointers to the real
 *             launchers)
 *   "nocuda"  a build without CUDA
 *   "numpy"   python3 with numpy
 *   "tmpfile" O_TMPFILE on the file system of /tmp
 *   "dlpack1" a DLPack header of 1.0 or later (the versioned calls of blob/dlpack.h)
 *   "forkthreads" threads started in a forked child of a threaded process (not under
 *             ThreadSanitizer)
 * req_tcase takes the tags a case needs, separated by spaces ("gpu gpumem"); a skipped
 * test is counted under the first unmet one. */
TCase *req_tcase(const char *name, const char *tags);

/* A case of suite s, added to it at once: req_tcase's when tags are given (NULL: it needs
 * nothing), with a timeout of timeout seconds (0: req_tcase's 120 s, REQ_TIMEOUT_S, when
 * tags are given, else the runner's default), its tests run under the checked fixture
 * setup/teardown (NULL: none). */
TCase *suite_case(Suite *s, const char *name, const char *tags, int timeout, SFun setup,
                  SFun teardown);

/* Add tests to tc, each a loop test over _i in [start, end) (a plain test is [0, 1)),
 * counted for the needs of a req_tcase case. */
void add_loop_test_list(TCase *tc, int start, int end, const TTest *const *tests);
#define add_loop_tests(tc, start, end, ...) \
    add_loop_test_list((tc), (start), (end), (const TTest *const[]){__VA_ARGS__, NULL})
#define add_tests(tc, ...) add_loop_tests((tc), 0, 1, __VA_ARGS__)

/* Bytes of each of the two device buffers that "gpumem" tests allocate: 2^31 + 37
 * floats, past INT_MAX elements. */
#define TEST_BIG_GPU_ELEMS (((int64_t)1 << 31) + 37)
#define TEST_BIG_GPU_BYTES ((size_t)TEST_BIG_GPU_ELEMS * sizeof(float))

/* Probe every need (the GPUs in a child process, so that this one makes no CUDA call)
 * and set test_real_gpu; returns the number of GPUs found. */
int req_probe(void);

/* The tags to exclude (NULL: none), after printing a line per reason with its count of
 * skipped tests. Call after the suites are built and req_probe has run. */
const char *req_exclusions(void);

/* On a machine of several GPUs the runner runs in two parts (test/main.c): every forked
 * test starts CUDA, which costs seconds per GPU the process sees, so the first part sees
 * one GPU and leaves the multi-GPU ("gpu2") cases, counted as deferred, to the second,
 * which runs only them with all `gpus` GPUs and prints no skip lines of its own. */
typedef enum { REQ_WHOLE, REQ_ONE_GPU_PART, REQ_MULTI_GPU_PART } req_part;
void req_set_part(req_part part, int gpus);

/* Whether a real GPU is present (probed by the runner before any test runs). With the
 * fake backend installed, device math still reaches the real launchers: tests that
 * call it under the fake only do so when this is false, where the launchers fail. */
extern bool test_real_gpu;

/* Fixtures that install the fake backend with caching off (so every request reaches
 * the fake and its counts are exact) and, on teardown, assert no leak. */
void fake_setup(void);
void fake_teardown(void);

/* The default backend seeing no GPU, installed for the blob_gpu_* calls that must say so,
 * until test_show_gpus reinstalls the default. */
void test_hide_gpus(void);
void test_show_gpus(void);

/* Two streams for work across streams, created and destroyed (asserted). */
void test_streams_create(void **a, void **b);
void test_streams_destroy(void *a, void *b);

/* The optimizers the optimizer suites test, c in [0, TEST_OPTIM_CONFIGS): every kind, with
 * and without the options (0 plain SGD; 1 SGD with momentum, dampening and decay; 2
 * Nesterov; 3 Caffe's SGD; 4 Adam; 5 Adam with decay; 6 AdamW). */
blob_optim test_optim_config(int c);
enum { TEST_OPTIM_CONFIGS = 7 };

/* Copy bytes between host and side, memory of one side of the array calls (the device
 * when gpu, else the host): from host to side when up, else back, on the device on the
 * current stream, waited for (asserted). */
void test_side_copy(bool gpu, void *side, void *host, size_t bytes, bool up);

/* Arrays of n tensors on one side, for the optimizer steps: each array (of its own dtype)
 * holds all tensors in one buffer laid out with each tensor's offset a multiple of align
 * (or, with gap, odd tensors one element past the previous end: misaligned), with a host
 * copy, the side's buffer and per-tensor pointers into it; step holds the step words on
 * the side. test_arrays_new zero-fills the host copies but array 0's, random in [-1, 1);
 * test_arrays_sync copies array a to the side when up, else back; test_arrays_init copies
 * every array up and zeroes the step words. */
enum { TEST_ARRAYS_MAX = 5 };
typedef struct {
    bool gpu;
    int n, arrays;
    int64_t *counts, *offset, total; /* elements; offsets into each array's buffer */
    blob_dtype dt[TEST_ARRAYS_MAX];
    size_t bytes[TEST_ARRAYS_MAX]; /* of each buffer: all tensors and align elements more */
    void *host[TEST_ARRAYS_MAX];
    void *side[TEST_ARRAYS_MAX];
    void **ptr[TEST_ARRAYS_MAX];
    int64_t *step;
} test_arrays;
test_arrays test_arrays_new(bool gpu, int n, const int64_t *counts, int64_t align, bool gap,
                            int arrays, const blob_dtype *dt);
void test_arrays_sync(test_arrays *t, int a, bool up);
void test_arrays_init(test_arrays *t);
void test_arrays_free(test_arrays *t);

/* path written with the n bytes (asserted), and the number of entries of the directory dir
 * but "." and "..". */
void test_write_file(const char *path, const void *bytes, size_t n);
int test_dir_entries(const char *dir);

/* TEST_TIME_SCALE from the environment (a number >= 1, default 1): the factor the
 * communicator tests stretch their deadlines by, for runs under compute-sanitizer. */
double test_time_scale(void);

/* The bits of a float32, and the float32 of bits. */
uint32_t test_f32_bits(float f);
float test_bits_f32(uint32_t bits);

/* Deterministic pseudo-random numbers for test data: uniform in [lo, hi), never all 0. */
void test_seed(uint64_t seed);
double test_uniform(double lo, double hi);
void test_fill(blob_dtype dtype, void *x, int64_t n, double lo, double hi);

/* Element i of an array of a float dtype, read as a double; written from one (rounded to
 * nearest even for the 16-bit floats). */
double test_get(blob_dtype dtype, const void *p, int64_t i);
void test_put(blob_dtype dtype, void *p, int64_t i, double v);

/* The 16-bit float dtypes: bfloat16, float16 (the loop tests over them run _i in [0, 2)). */
extern const blob_dtype test_halves[2];

/* "float32", "bfloat16", ..., for messages. */
const char *test_dtype_name(blob_dtype dtype);

/* The unit in the last place at 1 of a float dtype: 2^-23 float32 (FLT_EPSILON), 2^-52
 * float64 (DBL_EPSILON), 2^-7 bfloat16, 2^-10 float16 (and any other dtype); half of it
 * is the dtype's unit roundoff. */
double test_eps(blob_dtype dtype);

/* Relative tolerance for results that sum k rounded terms of dtype: 4 test_eps each. */
double test_tol(blob_dtype dtype, int64_t k);

/* max_i |a_i - b_i| / max(|b_i|, floor): relative error against a reference. */
double test_rel_err(blob_dtype dtype, const void *a, const double *ref, int64_t n, double floor);

#endif

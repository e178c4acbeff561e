/* Shared helpers of the Check suites. */
#ifndef BLOB_TESTUTIL_H
#define BLOB_TESTUTIL_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>

#include "blob/blob.h"

/* Assert a call's exact status, printing the detail message when it differs. */
#define ck_status(expr, expected)                                                      \
    do {                                                                               \
        blob_status ck_st_ = (expr);                                                   \
        ck_assert_msg(ck_st_ == (expected), "%s returned %s (%s), expected %s", #expr, \
                      blob_status_name(ck_st_), blob_last_error(),                     \
                      blob_status_name(expected));                                     \
    } while (0)
#define ck_ok(expr) ck_status((expr), BLOB_OK)

/* Test cases whose tests need hardware this machine may lack. Each is tagged with what it
 * needs; the runner excludes the tags that cannot be met and prints, per tag, how many
 * tests were skipped and why, so nothing is passed without having run. Add tests to
 * such a case with req_add_test / req_add_loop_test, which keep the counts.
 *   gpu_tcase:       a real GPU ("gpu")
 *   multi_gpu_tcase: two real GPUs ("gpu2") */
TCase *gpu_tcase(const char *name);
TCase *multi_gpu_tcase(const char *name);
void req_count(TCase *tc, int tests);
#define req_add_test(tc, tf)        \
    do {                            \
        tcase_add_test((tc), (tf)); \
        req_count((tc), 1);         \
    } while (0)
#define req_add_loop_test(tc, tf, start, end)            \
    do {                                                 \
        tcase_add_loop_test((tc), (tf), (start), (end)); \
        req_count((tc), (end) - (start));                \
    } while (0)

/* The tags to exclude for `gpus` real GPUs (NULL: none), after printing a line per
 * excluded tag with its count of skipped tests. */
const char *req_exclusions(int gpus);

/* Whether a real GPU is present (probed by the runner before any test runs). With the
 * fake backend installed, device math still reaches the real launchers: tests that
 * call it under the fake only do so when this is false, where the launchers fail. */
extern bool test_real_gpu;

/* Fixtures that install the fake backend with caching off (so every request reaches
 * the fake and its counts are exact) and, on teardown, assert no leak. */
void fake_setup(void);
void fake_teardown(void);

/* Deterministic pseudo-random numbers for test data: uniform in [lo, hi), never all 0. */
void test_seed(uint64_t seed);
double test_uniform(double lo, double hi);
void test_fill(blob_dtype dtype, void *x, int64_t n, double lo, double hi);

/* max_i |a_i - b_i| / max(|b_i|, floor): relative error against a reference. */
double test_rel_err(blob_dtype dtype, const void *a, const double *ref, int64_t n,
                    double floor);

#endif

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

/* A test case whose tests need a real GPU: tagged "gpu", excluded (and counted as
 * such) when none is present. Add its tests with gpu_add_test. */
TCase *gpu_tcase(const char *name);
extern int gpu_tests_registered;
/* Whether a real GPU is present (probed by the runner before any test runs). With the
 * fake backend installed, device math still reaches the real launchers: tests that
 * call it under the fake only do so when this is false, where the launchers fail. */
extern bool test_real_gpu;
#define gpu_add_test(tc, tf)          \
    do {                              \
        tcase_add_test((tc), (tf));   \
        gpu_tests_registered++;       \
    } while (0)
#define gpu_add_loop_test(tc, tf, start, end)         \
    do {                                              \
        tcase_add_loop_test((tc), (tf), (start), (end)); \
        gpu_tests_registered += (end) - (start);      \
    } while (0)

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

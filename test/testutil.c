#include <math.h>

#include "fake_backend.h"
#include "testutil.h"

int gpu_tests_registered;
bool test_real_gpu;

TCase *gpu_tcase(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_set_tags(tc, "gpu");
    tcase_set_timeout(tc, 120);
    return tc;
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

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

void test_seed(uint64_t seed)
{
    rng_state = seed ? seed : 0x9e3779b97f4a7c15ull;
}

double test_uniform(double lo, double hi)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545f4914f6cdd1dull;
    return lo + (hi - lo) * (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

void test_fill(blob_dtype dtype, void *x, int64_t n, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++) {
        double v = test_uniform(lo, hi);
        if (dtype == BLOB_FLOAT32)
            ((float *)x)[i] = (float)v;
        else
            ((double *)x)[i] = v;
    }
}

double test_rel_err(blob_dtype dtype, const void *a, const double *ref, int64_t n, double floor)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = dtype == BLOB_FLOAT32 ? (double)((const float *)a)[i] : ((const double *)a)[i];
        double scale = fabs(ref[i]) > floor ? fabs(ref[i]) : floor;
        double e = fabs(v - ref[i]) / scale;
        if (!(e <= worst))
            worst = e; /* NaN propagates as the worst */
    }
    return worst;
}

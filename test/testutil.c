#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fake_backend.h"
#include "testutil.h"

bool test_real_gpu;

/* The requirement tags, the fewest GPUs each needs, and how many tests carry it. */
static struct {
    const char *tag, *why;
    int min_gpus, tests;
} reqs[] = {
    {"gpu", "they need a GPU", 1, 0},
    {"gpu2", "they need two GPUs", 2, 0},
};
#define NUM_REQS ((int)(sizeof reqs / sizeof reqs[0]))

/* Which requirement each registered case has (a suite holds a few dozen cases). */
static struct {
    TCase *tc;
    int req;
} cases[64];
static int num_cases;

static TCase *req_tcase(const char *name, int req, const char *tags)
{
    TCase *tc = tcase_create(name);
    tcase_set_tags(tc, tags);
    tcase_set_timeout(tc, 120);
    if (num_cases == (int)(sizeof cases / sizeof cases[0])) {
        fprintf(stderr, "testutil: more than %d requirement test cases\n", num_cases);
        exit(2);
    }
    cases[num_cases].tc = tc;
    cases[num_cases++].req = req;
    return tc;
}

TCase *gpu_tcase(const char *name) { return req_tcase(name, 0, "gpu"); }
TCase *multi_gpu_tcase(const char *name) { return req_tcase(name, 1, "gpu gpu2"); }

void req_count(TCase *tc, int tests)
{
    for (int i = 0; i < num_cases; i++)
        if (cases[i].tc == tc) {
            reqs[cases[i].req].tests += tests;
            return;
        }
    fprintf(stderr, "req_count: a test case not made by gpu_tcase or multi_gpu_tcase\n");
    exit(2);
}

const char *req_exclusions(int gpus)
{
    /* a case tagged "gpu gpu2" is excluded by either tag: count it once, under the
     * first requirement it fails */
    for (int r = 0; r < NUM_REQS; r++)
        if (gpus < reqs[r].min_gpus) {
            int skipped = 0;
            for (int q = r; q < NUM_REQS; q++)
                skipped += reqs[q].tests;
            printf("skipped: %d tests (%s; %d found)\n", skipped, reqs[r].why, gpus);
            return reqs[r].tag;
        }
    return NULL;
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

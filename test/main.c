/* The Check runner. No CUDA call happens in this process before the tests fork: the GPUs
 * are probed in a child. Test cases whose needs are unmet (more GPUs than there are,
 * numpy, ...) are excluded, and the number of tests skipped for each reason is printed. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

Suite *status_suite(void);
Suite *syncedmem_suite(void);
Suite *blob_suite(void);
Suite *npy_suite(void);
Suite *alloc_suite(void);
Suite *math_suite(void);
Suite *fused_suite(void);
Suite *optim_suite(void);
Suite *dlpack_suite(void);
Suite *conv_suite(void);
Suite *null_args_suite(void);
Suite *comm_suite(void);
Suite *env_suite(void);

static Suite *(*const suites[])(void) = {
    status_suite,
    syncedmem_suite,
    blob_suite,
    npy_suite,
    alloc_suite,
    math_suite,
    fused_suite,
    optim_suite,
    dlpack_suite,
    conv_suite,
    null_args_suite,
    comm_suite,
    env_suite,
};

int main(void)
{
    SRunner *sr = srunner_create(NULL);
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
        srunner_add_suite(sr, suites[i]());

    int gpus = req_probe();
    printf("libblob tests: %s build, %d GPU(s) found\n",
           blob_built_with_cuda() ? "CUDA" : "CPU-only", gpus);
    const char *exclude = req_exclusions();
    fflush(stdout);
    srunner_run_tagged(sr, NULL, NULL, NULL, exclude, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    blob_thread_release();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

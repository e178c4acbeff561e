/* The Check runner. No CUDA call happens in this process before the tests fork: the GPUs
 * are counted in a child. Test cases needing more GPUs than there are are excluded, and
 * the number of tests skipped for each reason is printed. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

Suite *status_suite(void);
Suite *syncedmem_suite(void);
Suite *blob_suite(void);
Suite *npy_suite(void);
Suite *alloc_suite(void);
Suite *math_suite(void);
Suite *comm_suite(void);

static Suite *(*const suites[])(void) = {
    status_suite,
    syncedmem_suite,
    blob_suite,
    npy_suite,
    alloc_suite,
    math_suite,
    comm_suite,
};

static int probe_gpu_count(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        int n = blob_device_count();
        _exit(n < 100 ? 100 + n : 199);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
        WEXITSTATUS(status) < 100)
        return 0;
    return WEXITSTATUS(status) - 100;
}

int main(void)
{
    SRunner *sr = srunner_create(NULL);
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
        srunner_add_suite(sr, suites[i]());

    int gpus = probe_gpu_count();
    test_real_gpu = gpus > 0;
    printf("libblob tests: %s build, %d GPU(s) found\n",
           blob_built_with_cuda() ? "CUDA" : "CPU-only", gpus);
    const char *exclude = req_exclusions(gpus);
    fflush(stdout);
    srunner_run_tagged(sr, NULL, NULL, NULL, exclude, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    blob_thread_release();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

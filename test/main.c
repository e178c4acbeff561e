/* The Check runner. No CUDA call happens in this process before the tests fork: GPU
 * presence is probed in a child. Without a GPU the "gpu" tagged cases are excluded and
 * the number of excluded tests is printed. */
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

static Suite *(*const suites[])(void) = {
    status_suite,
    syncedmem_suite,
    blob_suite,
    npy_suite,
    alloc_suite,
    math_suite,
};

static int probe_gpu_count(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(blob_device_count() > 0 ? 10 : 11);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status))
        return 0;
    return WEXITSTATUS(status) == 10;
}

int main(void)
{
    SRunner *sr = srunner_create(NULL);
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
        srunner_add_suite(sr, suites[i]());

    int have_gpu = probe_gpu_count();
    test_real_gpu = have_gpu;
    const char *exclude = NULL;
    printf("libblob tests: %s build, %s\n", blob_built_with_cuda() ? "CUDA" : "CPU-only",
           have_gpu ? "GPU found: GPU test cases included" : "no GPU found");
    if (!have_gpu) {
        exclude = "gpu";
        printf("excluded: %d GPU tests (no GPU)\n", gpu_tests_registered);
    }
    fflush(stdout);
    srunner_run_tagged(sr, NULL, NULL, NULL, exclude, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    blob_thread_release();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

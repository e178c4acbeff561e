/* The Check runner. No CUDA call happens in this process before the tests fork: the GPUs
 * are probed in a child. Test cases whose needs are unmet (more GPUs than there are,
 * numpy, ...) are excluded, and the number of tests skipped for each reason is printed.
 * With several GPUs and forked tests it runs itself twice (see req_set_part): the
 * one-GPU part with CUDA_VISIBLE_DEVICES set to the first GPU, then the multi-GPU cases
 * with every GPU. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* Run this program again as part `name` (BLOB_TESTS_PART) with `visible` as
 * CUDA_VISIBLE_DEVICES (NULL: as it is); its exit status. */
static int run_part(const char *self, const char *name, const char *visible, int gpus)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char count[16];
        snprintf(count, sizeof count, "%d", gpus);
        setenv("BLOB_TESTS_PART", name, 1);
        setenv("BLOB_TESTS_GPUS", count, 1);
        if (visible)
            setenv("CUDA_VISIBLE_DEVICES", visible, 1);
        execl("/proc/self/exe", self, (char *)NULL);
        perror("blob_tests: exec");
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return EXIT_FAILURE;
    return WIFEXITED(status) ? WEXITSTATUS(status) : EXIT_FAILURE;
}

/* The first device of CUDA_VISIBLE_DEVICES (or "0") into buf. */
static const char *first_gpu(char *buf, size_t size)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    snprintf(buf, size, "%s", v && *v ? v : "0");
    buf[strcspn(buf, ",")] = '\0';
    return buf;
}

int main(int argc, char **argv)
{
    (void)argc;
    SRunner *sr = srunner_create(NULL);
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
        srunner_add_suite(sr, suites[i]());

    const char *part = getenv("BLOB_TESTS_PART");
    const char *fork_mode = getenv("CK_FORK");
    int gpus = req_probe();
    if (!part && gpus >= 2 && !(fork_mode && !strcmp(fork_mode, "no"))) {
        srunner_free(sr);
        char first[64];
        printf("libblob tests: %d GPUs: the one-GPU tests run with GPU %s alone (each forked "
               "test starts CUDA on the GPUs it sees), then the multi-GPU tests with all\n",
               gpus, first_gpu(first, sizeof first));
        int one = run_part(argv[0], "one-gpu", first, gpus);
        int multi = run_part(argv[0], "multi-gpu", NULL, gpus);
        return one || multi ? EXIT_FAILURE : EXIT_SUCCESS;
    }
    const char *all = getenv("BLOB_TESTS_GPUS");
    const bool multi = part && !strcmp(part, "multi-gpu");
    if (part)
        req_set_part(multi ? REQ_MULTI_GPU_PART : REQ_ONE_GPU_PART, all ? atoi(all) : gpus);
    printf("libblob tests: %s build, %d GPU(s) found%s\n",
           blob_built_with_cuda() ? "CUDA" : "CPU-only", gpus,
           !part ? "" : multi ? ", the multi-GPU part" : ", the one-GPU part");
    const char *exclude = req_exclusions();
    fflush(stdout);
    srunner_run_tagged(sr, NULL, NULL, multi ? "gpu2" : NULL, exclude, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    blob_thread_release();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* The Check runner. No CUDA call happens in this process before the tests fork: the GPUs
 * are probed in a child. Test cases whose needs are unmet (more GPUs than there are,
 * numpy, ...) are excluded, and the number of tests skipped for each reason is printed.
 * With several GPUs and forked tests it runs itself twice (see req_set_part): the
 * one-GPU part with CUDA_VISIBLE_DEVICES set to the first GPU, then the multi-GPU cases
 * with every GPU. With forked tests the suites of a part run side by side, in processes
 * of their own (run_suites_side_by_side). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/core/clock.h"
#include "testutil.h"

/* The suites, in the order they run: each NAME's cases are added by NAME_suite. The list
 * gives their prototypes and the table of names and functions. */
#define SUITES(X) \
    X(status)     \
    X(syncedmem)  \
    X(blob)       \
    X(npy)        \
    X(alloc)      \
    X(math)       \
    X(fused)      \
    X(gemm16)     \
    X(optim)      \
    X(dlpack)     \
    X(conv)       \
    X(null_args)  \
    X(comm)       \
    X(env)        \
    X(dtype)      \
    X(mixed)      \
    X(layers16)   \
    X(split)      \
    X(conv_streams)

#define SUITE_PROTOTYPE(name) void name##_suite(Suite *s);
SUITES(SUITE_PROTOTYPE)

#define SUITE_ENTRY(name) {#name, name##_suite},
static const struct {
    const char *name;
    void (*add_cases)(Suite *s);
} suites[] = {SUITES(SUITE_ENTRY)};

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

/* Check's XML log (each test's duration) names one file, which suites run side by side
 * would overwrite: CK_XML_LOG_FILE_NAME=F gives each suite F.NAME.xml of its own. */
static void xml_log_of_suite(const char *name)
{
    const char *f = getenv("CK_XML_LOG_FILE_NAME");
    if (!f || !*f)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s.%s.xml", f, name);
    setenv("CK_XML_LOG_FILE_NAME", path, 1);
}

/* How many suites run at once: BLOB_TESTS_JOBS, or half the processors (the tests of
 * one suite are timed against deadlines, so each keeps a processor to spare), at most 8. */
static int suite_jobs(void)
{
    const char *v = getenv("BLOB_TESTS_JOBS");
    long n = v && *v ? strtol(v, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN) / 2;
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

typedef struct {
    int run, failed;
} suite_result;

/* Run each suite in a forked child of its own, `jobs` at a time, the last listed first
 * (on the GPU machines one of the last seven runs for minutes, and the part takes as long
 * as its longest suite and what started after it), each child's output held in a file and
 * printed whole, in the suites' order, with the seconds it took; then the totals. Returns
 * the number of failed tests (or of suites that ended without a result). */
static int run_suites_side_by_side(Suite **list, int n, const char *exclude, int jobs)
{
    suite_result *res = mmap(NULL, (size_t)n * sizeof *res, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    FILE **out = calloc((size_t)n, sizeof *out);
    pid_t *pid = calloc((size_t)n, sizeof *pid);
    int *ended = calloc((size_t)n, sizeof *ended);
    double *took = calloc((size_t)n, sizeof *took);
    if (res == MAP_FAILED || !out || !pid || !ended || !took) {
        perror("blob_tests: the suites side by side");
        exit(EXIT_FAILURE);
    }
    printf("suites side by side: %d at a time (BLOB_TESTS_JOBS), each printed when done\n", jobs);
    fflush(stdout);
    int started = 0, running = 0, printed = 0, failed = 0, run = 0;
    while (printed < n) {
        while (running < jobs && started < n) {
            const int i = n - 1 - started++;
            res[i] = (suite_result){0, -1};
            took[i] = blob__now();
            out[i] = tmpfile();
            if (!out[i] || (pid[i] = fork()) < 0) {
                perror("blob_tests: starting a suite");
                exit(EXIT_FAILURE);
            }
            if (pid[i] == 0) {
                dup2(fileno(out[i]), STDOUT_FILENO);
                dup2(fileno(out[i]), STDERR_FILENO);
                xml_log_of_suite(suites[i].name);
                SRunner *one = srunner_create(list[i]); /* never freed: sr owns the suite */
                srunner_run_tagged(one, NULL, NULL, NULL, exclude, CK_NORMAL);
                res[i] = (suite_result){srunner_ntests_run(one), srunner_ntests_failed(one)};
                fflush(stdout);
                _exit(0);
            }
            running++;
        }
        int status;
        pid_t done = wait(&status);
        for (int i = 0; i < n; i++)
            if (pid[i] == done && done > 0) {
                ended[i] = 1;
                took[i] = blob__now() - took[i];
                running--;
            }
        for (; printed < n && ended[printed]; printed++) {
            int i = printed;
            rewind(out[i]);
            char buf[4096];
            size_t got;
            while ((got = fread(buf, 1, sizeof buf, out[i])) > 0)
                fwrite(buf, 1, got, stdout);
            fclose(out[i]);
            printf("suite %s: %.1f s\n", suites[i].name, took[i]);
            if (res[i].failed < 0) {
                printf("suite %d of %d ended without a result (its output is above)\n", i + 1, n);
                failed++;
            } else {
                run += res[i].run;
                failed += res[i].failed;
            }
            fflush(stdout);
        }
    }
    printf("all suites: %d tests run, %d failed\n", run, failed);
    munmap(res, (size_t)n * sizeof *res);
    free(out);
    free(pid);
    free(ended);
    free(took);
    return failed;
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
    enum { NUM_SUITES = sizeof suites / sizeof suites[0] };
    /* A case's timeout catches a hang; it is no speed test (benchmarks are), so Check's
     * 4 s default, which a loaded machine can reach in a forked test's start alone, is
     * raised for the cases that set none (read as each case is made). */
    setenv("CK_DEFAULT_TIMEOUT", "60", 0);
    SRunner *sr = srunner_create(NULL);
    Suite *list[NUM_SUITES];
    for (int i = 0; i < NUM_SUITES; i++) {
        srunner_add_suite(sr, list[i] = suite_create(suites[i].name));
        suites[i].add_cases(list[i]);
    }

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
           !part   ? ""
           : multi ? ", the multi-GPU part"
                   : ", the one-GPU part");
    const char *exclude = req_exclusions();
    fflush(stdout);
    const char *one_suite = getenv("CK_RUN_SUITE");
    const int jobs = suite_jobs();
    int failed;
    if (!multi && jobs > 1 && !(fork_mode && !strcmp(fork_mode, "no")) &&
        !(one_suite && *one_suite)) {
        failed = run_suites_side_by_side(list, NUM_SUITES, exclude, jobs);
    } else {
        srunner_run_tagged(sr, NULL, NULL, multi ? "gpu2" : NULL, exclude, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
    }
    srunner_free(sr);
    blob_thread_release();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

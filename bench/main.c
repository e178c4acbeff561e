/* blob_bench: libblob beside raw CUDA and PyTorch. See bench/README.md.
 *   blob_bench [-o results.json] [--no-torch]       (or BLOB_BENCH_OUT=path) */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* build/bench/<GPU name, or host-<hostname>>.json, with the folders made. */
static const char *default_path(bool gpu, const char *host, char *buf, size_t size)
{
    char name[96];
    if (gpu)
        snprintf(name, sizeof name, "%s", report_meta_value("device"));
    else
        snprintf(name, sizeof name, "host-%s", host);
    for (char *c = name; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '.' && *c != '-')
            *c = '_';
    mkdir("build", 0777);
    mkdir("build/bench", 0777);
    snprintf(buf, size, "build/bench/%s.json", name);
    return buf;
}

/* The sections to run: all, or those named in a comma-separated list ("8,9,C"). */
static const char *only;

static bool want(const char *section)
{
    if (!only)
        return true;
    size_t n = strlen(section);
    for (const char *p = only; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && !strncmp(p, section, n))
            return true;
        p += len + (p[len] == ',');
    }
    return false;
}

/* argv into *out (-o), only (--only) and *with_torch: 0, or 2 after the usage. */
static int parse_options(int argc, char **argv, const char **out, bool *with_torch)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) {
            *out = argv[++i];
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(argv[i], "--no-torch")) {
            *with_torch = false;
        } else {
            fprintf(stderr, "usage: %s [-o results.json] [--no-torch] [--only 1,2,...,9,C,D]\n",
                    argv[0]);
            return 2;
        }
    }
    return 0;
}

/* The report's head: the date, this host (its name into host, size bytes), the library,
 * the BLAS and the math mode. */
static void report_head(char *host, size_t size)
{
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    gethostname(host, size - 1);
    report_meta("date", "%s", date);
    report_meta("host", "%s", host);
    report_meta("libblob", "%d.%d.%d, %s build", BLOB_VERSION_MAJOR, BLOB_VERSION_MINOR,
                BLOB_VERSION_PATCH, blob_built_with_cuda() ? "CUDA" : "CPU-only");
    blob_blas_info blas;
    if (blob_blas_get_info(&blas) == BLOB_OK)
        report_meta("blas", "%s", blas.summary);
    report_meta("math", "%s (the float32 GPU GEMMs; BLOB_MATH_MODE=tf32 or bf16 changes it)",
                blob_math_mode_name(blob_math_mode_get()));
}

/* The sections in the order they run: gpu_only ones only with a GPU; the rest take
 * whether there is one (run_with) or not (run). Section 6 has a GPU and a host part. */
static const struct section {
    const char *id;
    bool gpu_only;
    void (*run)(void);
    void (*run_with)(bool gpu);
} sections[] = {
    {"1", true, bench_gpu_alloc, NULL},  {"2", true, bench_gpu_pinned, NULL},
    {"3", true, bench_gpu_sync, NULL},   {"4", false, NULL, bench_access},
    {"5", false, bench_reshape, NULL},   {"6", true, bench_gpu_update, NULL},
    {"8", true, bench_gpu_optim, NULL},  {"9", true, bench_gpu_fused_gemm, NULL},
    {"H", true, bench_gpu_gemm16, NULL}, {"6", false, bench_update_host, NULL},
    {"7", false, NULL, bench_loop},      {"D", false, NULL, bench_dlpack},
    {"C", true, bench_gpu_conv, NULL},
};

/* The sections wanted, the GPU's with a GPU. */
static void run_sections(bool gpu)
{
    if (!gpu)
        printf("\nSections 1-3, 8, 9, H, C and the GPU rows of 4 and 6 skipped: no GPU found.\n");
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        const struct section *sec = &sections[i];
        if ((gpu || !sec->gpu_only) && want(sec->id)) {
            if (sec->run)
                sec->run();
            else
                sec->run_with(gpu);
        }
    }
}

int main(int argc, char **argv)
{
    const char *out = getenv("BLOB_BENCH_OUT");
    bool with_torch = true;
    int rc = parse_options(argc, argv, &out, &with_torch);
    if (rc)
        return rc;
    setvbuf(stdout, NULL, _IOLBF, 0);

    char host[64] = "unknown";
    report_head(host, sizeof host);
    bool gpu = bench_gpu_open(with_torch);

    char path[256];
    report_open(out && *out ? out : default_path(gpu, host, path, sizeof path));
    run_sections(gpu);
    bench_gpu_close();
    blob_thread_release();
    return report_close();
}

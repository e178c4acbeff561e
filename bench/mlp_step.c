/*
 * mlp_step - time one training step of the 784-256-128-10 MLP of examples/mlp: forward,
 * backward, SGD update, and the loss read back (as torch's loss.item() does). On the
 * GPU eagerly and as CUDA graphs, at batch 64 and 256, beside PyTorch eager on the same
 * device (bench/mlp_torch.py, which times the same way) when torch imports.
 *
 *   mlp_step [--device cpu|gpu] [--steps N] [--repeats R] [--torch PATH]
 *
 * Each figure: 20 warm-up steps, then R times: synchronize, wall clock over N steps
 * alternating between two resident batches, synchronize; the median is reported (for
 * an even R the mean of the two middle runs, as Python's statistics.median). PyTorch
 * runs under $BLOB_BENCH_PYTHON (default python3) and is stopped after 120 s.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net.h"

#define WARMUP 20
#define MAX_REPEATS 101

static const int64_t dims[] = {784, 256, 128, 10};
static const int64_t batches[] = {64, 256};
#define NUM_BATCHES 2

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static blob_status sync_device(nn_mode mode)
{
    return mode == NN_GPU ? blob_device_synchronize() : BLOB_OK;
}

/* Median microseconds per step over `repeats` runs of `steps` steps. */
static blob_status time_steps(net *n, nn_mode mode, blob **x, blob **y, int steps,
                              int repeats, double *us)
{
    double samples[MAX_REPEATS], loss;
    for (int s = 0; s < WARMUP; s++) {
        NN_TRY(net_train_step(n, x[s % 2], y[s % 2]));
        NN_TRY(net_loss(n, &loss));
    }
    for (int r = 0; r < repeats; r++) {
        NN_TRY(sync_device(mode));
        double t0 = now();
        for (int s = 0; s < steps; s++) {
            NN_TRY(net_train_step(n, x[s % 2], y[s % 2]));
            NN_TRY(net_loss(n, &loss)); /* as torch's loss.item() */
        }
        NN_TRY(sync_device(mode));
        samples[r] = 1e6 * (now() - t0) / steps;
    }
    qsort(samples, (size_t)repeats, sizeof *samples, by_value);
    *us = (samples[(repeats - 1) / 2] + samples[repeats / 2]) / 2;
    return BLOB_OK;
}

/* A fresh net and two random resident batches, timed. */
static blob_status bench(nn_mode mode, bool graph, int64_t batch, int steps, int repeats,
                         double *us)
{
    net_config cfg = {.def = net_def_find("mlp"), .mode = mode, .dtype = BLOB_FLOAT32,
                      .batch = batch, .seed = 1, .lr = 0.01, .momentum = 0.9,
                      .weight_decay = 5e-4, .graph = graph};
    int64_t xshape[2] = {batch, dims[0]};
    uint64_t rng = 5;
    blob *x[2] = {NULL, NULL}, *y[2] = {NULL, NULL};
    net *n = NULL;
    blob_status st = net_create(&n, &cfg);
    for (int k = 0; st == BLOB_OK && k < 2; k++) {
        float *labels;
        const void *p;
        if ((st = nn_blob_create(&x[k], mode, BLOB_FLOAT32, 2, xshape)) != BLOB_OK ||
            (st = nn_blob_create(&y[k], mode, BLOB_FLOAT32, 1, &batch)) != BLOB_OK ||
            (st = nn_fill_uniform(x[k], 0, 1, &rng)) != BLOB_OK ||
            (st = blob_mutable_cpu_data(y[k], (void **)&labels)) != BLOB_OK)
            break;
        for (int64_t i = 0; i < batch; i++)
            labels[i] = (float)((i + k) % dims[3]);
        if (mode == NN_GPU && ((st = blob_gpu_data(x[k], &p)) != BLOB_OK ||
                               (st = blob_gpu_data(y[k], &p)) != BLOB_OK))
            break;
    }
    if (st == BLOB_OK)
        st = time_steps(n, mode, x, y, steps, repeats, us);
    sync_device(mode);
    net_free(n);
    for (int k = 0; k < 2; k++) {
        blob_free(x[k]);
        blob_free(y[k]);
    }
    return st;
}

/* PyTorch's figures per batch (0 where missing), or a reason it has none. */
static const char *torch_figures(const char *script, nn_mode mode, int steps, int repeats,
                                 double *us, char *device, size_t device_size)
{
    static char why[160];
    const char *python = getenv("BLOB_BENCH_PYTHON");
    if (!python || !*python)
        python = "python3";
    char cmd[4096], line[512];
    snprintf(cmd, sizeof cmd, "timeout 120 %s -c 'import torch' >/dev/null 2>&1", python);
    if (system(cmd) != 0) {
        snprintf(why, sizeof why, "%.100s cannot import torch", python);
        return why;
    }
    snprintf(cmd, sizeof cmd,
             "timeout 120 %s '%s' --device %s --steps %d --repeats %d --warmup %d "
             "--batch %lld --batch %lld",
             python, script, mode == NN_GPU ? "cuda" : "cpu", steps, repeats, WARMUP,
             (long long)batches[0], (long long)batches[1]);
    FILE *p = popen(cmd, "r");
    if (!p)
        return "cannot start the interpreter";
    while (fgets(line, sizeof line, p)) {
        long long batch;
        double t;
        if (!strncmp(line, "device ", 7))
            snprintf(device, device_size, "%.*s", (int)strcspn(line + 7, "\n"), line + 7);
        else if (sscanf(line, "batch %lld us_per_step %lf", &batch, &t) == 2)
            for (int i = 0; i < NUM_BATCHES; i++)
                if (batches[i] == batch)
                    us[i] = t;
    }
    return pclose(p) == 0 ? NULL : "the PyTorch script failed or ran past 120 s";
}

static void usage(void)
{
    fprintf(stderr, "usage: mlp_step [--device cpu|gpu] [--steps N] [--repeats R] "
                    "[--torch bench/mlp_torch.py]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *device = NULL, *script = "bench/mlp_torch.py";
    int steps = 200, repeats = 5;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(a, "--device") && (!strcmp(v, "cpu") || !strcmp(v, "gpu")))
            device = v;
        else if (v && !strcmp(a, "--steps") && atoi(v) > 0)
            steps = atoi(v);
        else if (v && !strcmp(a, "--repeats") && atoi(v) > 0 && atoi(v) <= MAX_REPEATS)
            repeats = atoi(v);
        else if (v && !strcmp(a, "--torch"))
            script = v;
        else
            usage();
    }
    bool have_gpu = blob_device_count() > 0;
    if (device && !strcmp(device, "gpu") && !have_gpu) {
        fprintf(stderr, "mlp_step: no GPU found\n");
        return 1;
    }
    nn_mode mode = have_gpu && !(device && !strcmp(device, "cpu")) ? NN_GPU : NN_CPU;

    void *stream = NULL;
    blob_status st = mode == NN_GPU ? blob_stream_create(&stream) : BLOB_OK;
    blob_set_stream(stream);
    double eager[NUM_BATCHES] = {0}, graph[NUM_BATCHES] = {0}, torch[NUM_BATCHES] = {0};
    for (int i = 0; st == BLOB_OK && i < NUM_BATCHES; i++) {
        st = bench(mode, false, batches[i], steps, repeats, &eager[i]);
        if (st == BLOB_OK && mode == NN_GPU)
            st = bench(mode, true, batches[i], steps, repeats, &graph[i]);
    }
    blob_set_stream(NULL);
    blob_stream_destroy(stream);
    blob_thread_release();
    if (st != BLOB_OK) {
        fprintf(stderr, "mlp_step: %s: %s\n", blob_strerror(st), blob_last_error());
        return 1;
    }
    char torch_device[256] = "";
    const char *no_torch = torch_figures(script, mode, steps, repeats, torch, torch_device,
                                         sizeof torch_device);

    char where[32] = "the CPU";
    int gpu;
    if (mode == NN_GPU && blob_device_get(&gpu) == BLOB_OK)
        snprintf(where, sizeof where, "GPU %d", gpu);
    printf("mlp_step: one SGD step of MLP 784-256-128-10 (forward, backward, update, loss "
           "read back)\n");
    printf("libblob on %s%s%s; median of %d runs of %d steps after %d warm-up steps\n", where,
           *torch_device ? ", PyTorch on " : "", torch_device, repeats, steps, WARMUP);
    printf("batch  libblob eager  libblob graph   torch eager  torch / libblob best\n");
    for (int i = 0; i < NUM_BATCHES; i++) {
        double best = graph[i] > 0 && graph[i] < eager[i] ? graph[i] : eager[i];
        printf("%5lld  %10.1f us  ", (long long)batches[i], eager[i]);
        if (graph[i] > 0)
            printf("%10.1f us  ", graph[i]);
        else
            printf("%13s  ", "-");
        if (torch[i] > 0)
            printf("%9.1f us  %19.1fx\n", torch[i], torch[i] / best);
        else
            printf("%12s  %20s\n", "-", "-");
    }
    if (no_torch)
        printf("torch: no figures (%s)\n", no_torch);
    return 0;
}

/*
 * net_step - time one training step of a net of examples/nets: forward, backward, SGD
 * update, and the loss read back (as torch's loss.item() does). On the GPU eagerly and
 * as CUDA graphs, beside the same net in PyTorch eagerly and as a whole-step CUDA graph
 * on the same device (bench/net_torch.py, which times the same way) when torch imports.
 *
 *   net_step [--net NAME]... [--batch B]... [--device cpu|gpu] [--steps N] [--repeats R]
 *            [--torch PATH]
 *
 * Defaults: --net mlp, --batch 64 --batch 256. Each figure: 20 warm-up steps, then R
 * times: synchronize, wall clock over N steps alternating between two resident batches,
 * synchronize; the median is reported (for an even R the mean of the two middle runs,
 * as Python's statistics.median). PyTorch runs under $BLOB_BENCH_PYTHON (default
 * python3), once per net, and is stopped after 120 s.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net.h"

#define WARMUP 20
#define MAX_REPEATS 101
#define MAX_NETS 8
#define MAX_BATCHES 8
#define CLASSES 10 /* every net here classifies Fashion-MNIST */

typedef struct {
    const net_def *def;
    int64_t params;                       /* learnable values, to match torch's net */
    double eager, graph;                  /* libblob, us per step (0: not measured) */
    int64_t kernels;                      /* kernels of libblob's graph step (0: unknown) */
    double torch_eager, torch_graph;      /* PyTorch, us per step (0: not measured) */
    int64_t torch_kernels;                /* CUDA kernels of a torch eager step (0: none) */
} figures;

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

/* A fresh net and two random resident batches, timed into f->eager or f->graph; the
 * net's parameter count too. */
static blob_status bench(const net_def *def, nn_mode mode, bool graph, int64_t batch,
                         int steps, int repeats, figures *f)
{
    net_config cfg = {.def = def, .mode = mode, .dtype = BLOB_FLOAT32, .batch = batch,
                      .seed = 1, .lr = 0.01, .momentum = 0.9, .weight_decay = 5e-4,
                      .graph = graph};
    int64_t xshape[4] = {batch};
    for (int i = 0; i < def->input_axes; i++)
        xshape[i + 1] = def->input_shape[i];
    uint64_t rng = 5;
    blob *x[2] = {NULL, NULL}, *y[2] = {NULL, NULL};
    net *n = NULL;
    blob_status st = net_create(&n, &cfg);
    for (int k = 0; st == BLOB_OK && k < 2; k++) {
        float *labels;
        const void *p;
        if ((st = nn_blob_create(&x[k], mode, BLOB_FLOAT32, def->input_axes + 1, xshape)) !=
                BLOB_OK ||
            (st = nn_blob_create(&y[k], mode, BLOB_FLOAT32, 1, &batch)) != BLOB_OK ||
            (st = nn_fill_uniform(x[k], 0, 1, &rng)) != BLOB_OK ||
            (st = blob_mutable_cpu_data(y[k], (void **)&labels)) != BLOB_OK)
            break;
        for (int64_t i = 0; i < batch; i++)
            labels[i] = (float)((i + k) % CLASSES);
        if (mode == NN_GPU && ((st = blob_gpu_data(x[k], &p)) != BLOB_OK ||
                               (st = blob_gpu_data(y[k], &p)) != BLOB_OK))
            break;
    }
    if (st == BLOB_OK)
        st = time_steps(n, mode, x, y, steps, repeats, graph ? &f->graph : &f->eager);
    /* TODO(kernels per step): once libblob can count the kernel nodes of a graph, set
     * f->kernels here, in a graph run, to the count of net_graph(n), the graph of the
     * last step; the table prints it. */
    f->params = 0;
    for (int i = 0; st == BLOB_OK && i < net_num_params(n); i++)
        f->params += blob_count(net_param(n, i));
    sync_device(mode);
    net_free(n);
    for (int k = 0; k < 2; k++) {
        blob_free(x[k]);
        blob_free(y[k]);
    }
    return st;
}

/* PyTorch's figures for one net (f[i] for batches[i]; 0 where missing): NULL, or why
 * there are none, written to why. */
static const char *torch_figures(const char *script, const char *python, nn_mode mode,
                                 const char *name, int steps, int repeats,
                                 const int64_t *batches, int num_batches, figures *f,
                                 int64_t *params, char *device, size_t device_size,
                                 char *why, size_t why_size)
{
    char cmd[4096], line[512];
    int at = snprintf(cmd, sizeof cmd,
                      "timeout 120 %s '%s' --net '%s' --device %s --steps %d --repeats %d "
                      "--warmup %d%s",
                      python, script, name, mode == NN_GPU ? "cuda" : "cpu", steps, repeats,
                      WARMUP, mode == NN_GPU ? " --kernels" : "");
    for (int i = 0; i < num_batches; i++)
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, " --batch %lld",
                       (long long)batches[i]);
    FILE *p = popen(cmd, "r");
    if (!p) {
        snprintf(why, why_size, "cannot start %.100s", python);
        return why;
    }
    *params = 0;
    while (fgets(line, sizeof line, p)) {
        long long batch, count;
        double eager, graph;
        char rest[64];
        int fields;
        if (!strncmp(line, "device ", 7))
            snprintf(device, device_size, "%.*s", (int)strcspn(line + 7, "\n"), line + 7);
        else if (sscanf(line, "net %*s params %lld", &count) == 1)
            *params = count;
        else if (sscanf(line, "batch %lld kernels %lld", &batch, &count) == 2) {
            for (int i = 0; i < num_batches; i++)
                if (batches[i] == batch)
                    f[i].torch_kernels = count;
        }
        else if ((fields = sscanf(line, "batch %lld eager_us %lf graph_us %63s", &batch,
                                  &eager, rest)) >= 2) {
            graph = fields == 3 ? atof(rest) : 0; /* "-": no graph */
            for (int i = 0; i < num_batches; i++)
                if (batches[i] == batch) {
                    f[i].torch_eager = eager;
                    f[i].torch_graph = graph;
                }
        }
    }
    if (pclose(p) != 0) {
        snprintf(why, why_size, "%.100s --net %.32s failed or ran past 120 s", script, name);
        return why;
    }
    return NULL;
}

static void print_us(double us, int width)
{
    if (us > 0)
        printf("  %*.1f us", width - 3, us);
    else
        printf("  %*s", width, "-");
}

static void print_ratio(double num, double den)
{
    if (num > 0 && den > 0)
        printf("  %7.1fx", num / den);
    else
        printf("  %8s", "-");
}

static void print_table(const net_def *def, const int64_t *batches, int num_batches,
                        const figures *f, const char *no_torch)
{
    printf("%s (%s): one SGD step (forward, backward, update, loss read back)\n", def->name,
           def->title);
    printf("batch  libblob eager  libblob graph    torch eager    torch graph   eager x   "
           "graph x  kernels  torch kernels\n");
    for (int i = 0; i < num_batches; i++) {
        printf("%5lld", (long long)batches[i]);
        print_us(f[i].eager, 13);
        print_us(f[i].graph, 13);
        print_us(f[i].torch_eager, 13);
        print_us(f[i].torch_graph, 13);
        print_ratio(f[i].torch_eager, f[i].eager);
        print_ratio(f[i].torch_graph, f[i].graph);
        if (f[i].kernels > 0)
            printf("  %7lld", (long long)f[i].kernels);
        else
            printf("  %7s", "-");
        if (f[i].torch_kernels > 0)
            printf("  %13lld\n", (long long)f[i].torch_kernels);
        else
            printf("  %13s\n", "-");
    }
    if (no_torch)
        printf("  torch: no figures (%s)\n", no_torch);
    printf("  eager x, graph x: torch's time over libblob's (above 1: libblob is faster)\n");
}

static void usage(void)
{
    fprintf(stderr, "usage: net_step [--net NAME]... [--batch B]... [--device cpu|gpu] "
                    "[--steps N] [--repeats R] [--torch bench/net_torch.py]\nnets:");
    for (int i = 0; net_def_at(i); i++)
        fprintf(stderr, " %s", net_def_at(i)->name);
    fprintf(stderr, "\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *device = NULL, *script = "bench/net_torch.py";
    const net_def *defs[MAX_NETS];
    int64_t batches[MAX_BATCHES];
    int num_nets = 0, num_batches = 0, steps = 200, repeats = 5;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(a, "--net") && net_def_find(v) && num_nets < MAX_NETS)
            defs[num_nets++] = net_def_find(v);
        else if (v && !strcmp(a, "--batch") && atoi(v) > 0 && num_batches < MAX_BATCHES)
            batches[num_batches++] = atoi(v);
        else if (v && !strcmp(a, "--device") && (!strcmp(v, "cpu") || !strcmp(v, "gpu")))
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
    if (!num_nets)
        defs[num_nets++] = net_def_find("mlp");
    if (!num_batches) {
        batches[num_batches++] = 64;
        batches[num_batches++] = 256;
    }
    bool have_gpu = blob_device_count() > 0;
    if (device && !strcmp(device, "gpu") && !have_gpu) {
        fprintf(stderr, "net_step: no GPU found\n");
        return 1;
    }
    nn_mode mode = have_gpu && !(device && !strcmp(device, "cpu")) ? NN_GPU : NN_CPU;

    figures f[MAX_NETS][MAX_BATCHES] = {{{0}}};
    void *stream = NULL;
    blob_status st = mode == NN_GPU ? blob_stream_create(&stream) : BLOB_OK;
    blob_set_stream(stream);
    for (int k = 0; st == BLOB_OK && k < num_nets; k++)
        for (int i = 0; st == BLOB_OK && i < num_batches; i++) {
            st = bench(defs[k], mode, false, batches[i], steps, repeats, &f[k][i]);
            if (st == BLOB_OK && mode == NN_GPU)
                st = bench(defs[k], mode, true, batches[i], steps, repeats, &f[k][i]);
        }
    blob_set_stream(NULL);
    blob_stream_destroy(stream);
    blob_thread_release();
    if (st != BLOB_OK) {
        fprintf(stderr, "net_step: %s: %s\n", blob_strerror(st), blob_last_error());
        return 1;
    }

    /* PyTorch after all of libblob's figures, never beside them */
    const char *python = getenv("BLOB_BENCH_PYTHON");
    if (!python || !*python)
        python = "python3";
    char cmd[512], torch_device[256] = "", why[MAX_NETS][256];
    const char *no_torch[MAX_NETS] = {NULL};
    snprintf(cmd, sizeof cmd, "timeout 120 %s -c 'import torch' >/dev/null 2>&1", python);
    bool have_torch = system(cmd) == 0;
    for (int k = 0; k < num_nets; k++) {
        int64_t torch_params = 0;
        if (!have_torch) {
            snprintf(why[k], sizeof why[k], "%.100s cannot import torch", python);
            no_torch[k] = why[k];
            continue;
        }
        no_torch[k] = torch_figures(script, python, mode, defs[k]->name, steps, repeats,
                                    batches, num_batches, f[k], &torch_params, torch_device,
                                    sizeof torch_device, why[k], sizeof why[k]);
        if (!no_torch[k] && torch_params != f[k][0].params) {
            snprintf(why[k], sizeof why[k],
                     "its net has %lld parameters, libblob's %lld: not the same net",
                     (long long)torch_params, (long long)f[k][0].params);
            no_torch[k] = why[k];
            for (int i = 0; i < num_batches; i++) {
                f[k][i].torch_eager = f[k][i].torch_graph = 0;
                f[k][i].torch_kernels = 0;
            }
        }
    }

    char where[32] = "the CPU";
    int gpu;
    if (mode == NN_GPU && blob_device_get(&gpu) == BLOB_OK)
        snprintf(where, sizeof where, "GPU %d", gpu);
    printf("net_step: libblob on %s%s%s; median of %d runs of %d steps after %d warm-up "
           "steps\n", where, *torch_device ? ", PyTorch on " : "", torch_device, repeats,
           steps, WARMUP);
    for (int k = 0; k < num_nets; k++)
        print_table(defs[k], batches, num_batches, f[k], no_torch[k]);
    return 0;
}

/*
 * net_step - time one training step of a net of examples/nets: forward, backward, SGD
 * update, and the loss read back (as torch's loss.item() does). libblob's fused net
 * and its plain one (net_config.plain), eagerly and, on the GPU, as CUDA graphs, also
 * without waiting for each step's loss; beside the same net in PyTorch, eagerly, with
 * its fused SGD, as a whole-step CUDA graph and under torch.compile, on the same device
 * (bench/net_torch.py, which times the same way) when torch imports.
 *
 *   net_step [--net NAME]... [--batch B]... [--math fp32|tf32|bf16]... [--device cpu|gpu]
 *            [--if cpu|gpu] [--streams 1|2] [--tune 0|1] [--steps N] [--repeats R]
 *            [--torch PATH]
 *
 * --if DEVICE: run only where the steps would run on DEVICE (the GPU when there is one,
 * unless --device says otherwise); elsewhere say so and exit 0, so that one script can
 * ask for different rows on either.
 * --tune 1 times cuBLASLt's candidates for each GEMM of libblob's GPU steps once, in the
 * first warm-up step, and keeps the fastest (blob_gemm_tuning_set); the default is the
 * environment's (BLOB_GEMM_TUNING), and the tables' titles say which ran.
 * --streams 1 runs libblob's GPU steps on one stream (net_config.one_stream) instead of
 * the default two (the layers' parameter gradients beside the chain of the bottom
 * gradients).
 * Defaults: --net mlp, --batch 64 --batch 256, the process's math mode (BLOB_MATH_MODE).
 * On the host every math mode computes in float32, so several run once, as fp32.
 * Each figure: 20 warm-up steps (N if fewer), then R times: synchronize, wall clock over
 * N steps alternating between two resident batches, synchronize; the median is reported (for
 * an even R the mean of the two middle runs, as Python's statistics.median). PyTorch
 * runs under $BLOB_BENCH_PYTHON (default python3), once per net and math mode, after
 * all of libblob's figures, and is stopped after 600 s. On the host both sides use the
 * threads the library's host math uses (blob_blas_get_info). A line per figure goes to
 * stderr as it is measured; the tables go to stdout at the end.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "net.h"

#define WARMUP      20
#define MAX_REPEATS 101
#define MAX_NETS    8
#define MAX_BATCHES 8
#define MAX_MATHS   3
#define CLASSES     10 /* every net here classifies Fashion-MNIST */

static bool one_stream;     /* --streams 1 */
static int warmup = WARMUP; /* steps before the timed runs: WARMUP, or --steps if fewer */

/* One kind of libblob's net (fused or plain), us per step (0: not measured). */
typedef struct {
    double eager, graph, graph_async;
    int64_t kernels, nodes; /* of the graph of one step (0: unknown) */
} blob_figures;

typedef struct {
    int64_t params;       /* learnable values, to match torch's net */
    blob_figures kind[2]; /* fused, plain */
    /* PyTorch, us per step (0: not measured) */
    double torch_eager, torch_fused, torch_graph, torch_compile;
    int64_t torch_kernels; /* CUDA kernels of a torch eager step (0: none) */
    char compile_error[160];
} figures;

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static blob_status sync_device(nn_mode mode)
{
    return mode == NN_GPU ? blob_device_synchronize() : BLOB_OK;
}

/* Median microseconds per step over `repeats` runs of `steps` steps; with wait, every
 * step's loss is read on the host before the next is queued. */
static blob_status time_steps(net *n, nn_mode mode, blob **x, blob **y, int steps, int repeats,
                              bool wait, double *us)
{
    double samples[MAX_REPEATS], loss;
    for (int s = 0; s < warmup; s++) {
        NN_TRY(net_train_step(n, x[s % 2], y[s % 2]));
        NN_TRY(net_loss(n, &loss));
    }
    for (int r = 0; r < repeats; r++) {
        NN_TRY(sync_device(mode));
        double t0 = nn_now();
        for (int s = 0; s < steps; s++) {
            NN_TRY(net_train_step(n, x[s % 2], y[s % 2]));
            if (wait)
                NN_TRY(net_loss(n, &loss)); /* as torch's loss.item() */
        }
        NN_TRY(net_loss(n, &loss));
        NN_TRY(sync_device(mode));
        samples[r] = 1e6 * (nn_now() - t0) / steps;
    }
    qsort(samples, (size_t)repeats, sizeof *samples, by_value);
    *us = (samples[(repeats - 1) / 2] + samples[repeats / 2]) / 2;
    return BLOB_OK;
}

typedef enum { EAGER, GRAPH, GRAPH_ASYNC } run_kind;

/* The figure of k that run measures. */
static double *run_figure(blob_figures *k, run_kind run)
{
    return run == EAGER ? &k->eager : run == GRAPH ? &k->graph : &k->graph_async;
}

/* A fresh net (fused, or plain) and two random resident batches, timed as `run` says
 * into the figures of its kind; the net's parameter count too, and with graphs the
 * kernels and nodes of one step's graph. */
static blob_status bench(const net_def *def, nn_mode mode, bool plain, run_kind run, int64_t batch,
                         int steps, int repeats, figures *f)
{
    net_config cfg = {.def = def,
                      .mode = mode,
                      .dtype = BLOB_FLOAT32,
                      .batch = batch,
                      .seed = 1,
                      .lr = 0.01,
                      .momentum = 0.9,
                      .weight_decay = 5e-4,
                      .graph = run != EAGER,
                      .plain = plain,
                      .loss_only = true,
                      .one_stream = one_stream};
    blob_figures *k = &f->kind[plain];
    uint64_t rng = 5;
    blob *x[2] = {NULL, NULL}, *y[2] = {NULL, NULL};
    net *n = NULL;
    blob_status st = net_create(&n, &cfg);
    for (int b = 0; st == BLOB_OK && b < 2; b++)
        st = net_fake_batch(def, mode, batch, CLASSES, 1, b, &rng, &x[b], &y[b]);
    if (st == BLOB_OK)
        st = time_steps(n, mode, x, y, steps, repeats, run != GRAPH_ASYNC, run_figure(k, run));
    if (st == BLOB_OK && run == GRAPH && net_graph(n))
        st = blob_graph_count_nodes(net_graph(n), &k->kernels, &k->nodes);
    f->params = 0;
    for (int i = 0; st == BLOB_OK && i < net_num_params(n); i++)
        f->params += blob_count(net_param(n, i));
    sync_device(mode);
    net_free(n);
    for (int b = 0; b < 2; b++) {
        blob_free(x[b]);
        blob_free(y[b]);
    }
    return st;
}

/* "-" or a number: the figure, 0 for "-". */
static double figure(const char *s) { return strcmp(s, "-") ? atof(s) : 0; }

/* PyTorch's figures for one net (f[i] for batches[i]; 0 where missing): NULL, or why
 * there are none, written to why. */
static const char *torch_figures(const char *script, const char *python, nn_mode mode,
                                 const char *name, const char *math, int threads, int steps,
                                 int repeats, const int64_t *batches, int num_batches, figures *f,
                                 int64_t *params, char *device, size_t device_size, char *why,
                                 size_t why_size)
{
    char cmd[4096], line[512];
    int at = snprintf(cmd, sizeof cmd,
                      "timeout 600 %s '%s' --net '%s' --device %s --math %s --steps %d "
                      "--repeats %d --warmup %d",
                      python, script, name, mode == NN_GPU ? "cuda" : "cpu", math, steps, repeats,
                      warmup);
    if (mode == NN_GPU)
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, " --kernels");
    else
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, " --threads %d", threads);
    for (int i = 0; i < num_batches; i++)
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, " --batch %lld", (long long)batches[i]);
    FILE *p = popen(cmd, "r");
    if (!p) {
        snprintf(why, why_size, "cannot start %.100s", python);
        return why;
    }
    *params = 0;
    while (fgets(line, sizeof line, p)) {
        long long batch, count;
        char e[32], fu[32], g[32], c[32];
        int used = 0;
        line[strcspn(line, "\n")] = 0;
        figures *row = NULL;
        if (sscanf(line, "batch %lld %n", &batch, &used) == 1)
            for (int i = 0; i < num_batches; i++)
                if (batches[i] == batch)
                    row = &f[i];
        if (!strncmp(line, "device ", 7))
            snprintf(device, device_size, "%.200s", line + 7);
        else if (sscanf(line, "net %*s params %lld", &count) == 1)
            *params = count;
        else if (row && sscanf(line + used, "kernels %lld", &count) == 1)
            row->torch_kernels = count;
        else if (row && !strncmp(line + used, "compile_error ", 14))
            snprintf(row->compile_error, sizeof row->compile_error, "%.150s", line + used + 14);
        else if (row && sscanf(line + used,
                               "eager_us %31s fused_us %31s graph_us %31s "
                               "compile_us %31s",
                               e, fu, g, c) == 4) {
            row->torch_eager = figure(e);
            row->torch_fused = figure(fu);
            row->torch_graph = figure(g);
            row->torch_compile = figure(c);
        }
    }
    if (pclose(p) != 0) {
        snprintf(why, why_size, "%.100s --net %.32s failed or ran past 600 s", script, name);
        return why;
    }
    return NULL;
}

static void print_us(double us, int width)
{
    if (us > 0)
        printf(" %*.1f", width, us);
    else
        printf(" %*s", width, "-");
}

static void print_ratio(double num, double den)
{
    if (num > 0 && den > 0)
        printf(" %6.1fx", num / den);
    else
        printf(" %7s", "-");
}

/* The fastest of torch's figures (0: none). */
static double torch_best(const figures *f)
{
    const double all[] = {f->torch_eager, f->torch_fused, f->torch_graph, f->torch_compile};
    double best = 0;
    for (int i = 0; i < 4; i++)
        if (all[i] > 0 && (best == 0 || all[i] < best))
            best = all[i];
    return best;
}

static void print_table(const net_def *def, const char *math, nn_mode mode, const int64_t *batches,
                        int num_batches, const figures *f, const char *no_torch)
{
    printf("\n%s (%s), %s GEMMs%s: one SGD step (forward, backward, update, loss read back), "
           "us\n",
           def->name, def->title, math, mode == NN_GPU && blob_gemm_tuning_get() ? " (tuned)" : "");
    printf("                ----------------- libblob -----------------  "
           "------------------ torch -------------------  best torch over\n");
    printf("batch  kind         eager     graph  graph async  kernels/nodes      "
           "eager  fused SGD      graph    compile    eager   graph\n");
    for (int i = 0; i < num_batches; i++) {
        const double best = torch_best(&f[i]);
        for (int plain = 0; plain < 2; plain++) {
            const blob_figures *k = &f[i].kind[plain];
            printf("%5lld  %-6s", (long long)batches[i], plain ? "plain" : "fused");
            print_us(k->eager, 10);
            print_us(k->graph, 9);
            print_us(k->graph_async, 12);
            if (k->kernels > 0)
                printf(" %9lld/%-4lld", (long long)k->kernels, (long long)k->nodes);
            else
                printf(" %14s", "-");
            if (plain) {
                printf(" %43s", "");
            } else {
                print_us(f[i].torch_eager, 10);
                print_us(f[i].torch_fused, 10);
                print_us(f[i].torch_graph, 10);
                print_us(f[i].torch_compile, 10);
            }
            print_ratio(best, k->eager);
            print_ratio(best, k->graph);
            printf("\n");
        }
        if (f[i].torch_kernels > 0)
            printf("  batch %lld: a torch eager step launches %lld CUDA kernels\n",
                   (long long)batches[i], (long long)f[i].torch_kernels);
        if (f[i].compile_error[0])
            printf("  batch %lld: torch.compile failed: %s\n", (long long)batches[i],
                   f[i].compile_error);
    }
    if (no_torch)
        printf("  torch: no figures (%s)\n", no_torch);
    printf("  best torch over: the fastest of torch's four figures over libblob's eager and "
           "graph figure (above 1: libblob is faster)\n");
    if (mode == NN_GPU)
        printf("  graph async: graphs queued back to back, the loss copied back behind "
               "each without waiting (as the trainer runs); kernels/nodes: of one step's "
               "graph\n");
}

static void usage(void)
{
    fprintf(stderr, "usage: net_step [--net NAME]... [--batch B]... [--math fp32|tf32|bf16]... "
                    "[--device cpu|gpu] [--if cpu|gpu] [--streams 1|2] [--tune 0|1] "
                    "[--steps N] [--repeats R] [--torch bench/net_torch.py]"
                    "\nnets:");
    for (int i = 0; net_def_at(i); i++)
        fprintf(stderr, " %s", net_def_at(i)->name);
    fprintf(stderr, "\n");
    exit(2);
}

/* libblob's figures of every net and batch in math mode (already set), a line on stderr
 * for each. */
static blob_status bench_all(const net_def *const *defs, int num_nets, const int64_t *batches,
                             int num_batches, nn_mode mode, blob_math_mode math, int steps,
                             int repeats, figures f[][MAX_BATCHES])
{
    static const run_kind runs[] = {EAGER, GRAPH, GRAPH_ASYNC};
    static const char *const run_names[] = {"eager", "graph", "graph async"};
    const int num_runs = mode == NN_GPU ? 3 : 1;
    const int rows = num_nets * num_batches * 2 * num_runs;
    int row = 0;
    for (int k = 0; k < num_nets; k++)
        for (int i = 0; i < num_batches; i++)
            for (int plain = 0; plain < 2; plain++)
                for (int r = 0; r < num_runs; r++) {
                    const double t0 = nn_now();
                    NN_TRY(
                        bench(defs[k], mode, plain, runs[r], batches[i], steps, repeats, &f[k][i]));
                    fprintf(stderr,
                            "net_step: %d/%d %s batch %lld %s, %s %s: %.1f us per step "
                            "(%.1f s)\n",
                            ++row, rows, defs[k]->name, (long long)batches[i],
                            blob_math_mode_name(math), plain ? "plain" : "fused", run_names[r],
                            *run_figure(&f[k][i].kind[plain], runs[r]), nn_now() - t0);
                }
    return BLOB_OK;
}

/* What to measure, from the command line. */
typedef struct {
    const char *device, *only, *script;
    const net_def *defs[MAX_NETS];
    int64_t batches[MAX_BATCHES];
    blob_math_mode maths[MAX_MATHS];
    int num_nets, num_batches, num_maths, steps, repeats;
} options;

static options parse_options(int argc, char **argv)
{
    options o = {.script = "bench/net_torch.py", .steps = 200, .repeats = 5};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(a, "--net") && net_def_find(v) && o.num_nets < MAX_NETS)
            o.defs[o.num_nets++] = net_def_find(v);
        else if (v && !strcmp(a, "--batch") && atoi(v) > 0 && o.num_batches < MAX_BATCHES)
            o.batches[o.num_batches++] = atoi(v);
        else if (v && !strcmp(a, "--math") && nn_math_mode_find(v) && o.num_maths < MAX_MATHS)
            o.maths[o.num_maths++] = nn_math_mode_find(v);
        else if (v && !strcmp(a, "--device") && (!strcmp(v, "cpu") || !strcmp(v, "gpu")))
            o.device = v;
        else if (v && !strcmp(a, "--if") && (!strcmp(v, "cpu") || !strcmp(v, "gpu")))
            o.only = v;
        else if (v && !strcmp(a, "--streams") && (!strcmp(v, "1") || !strcmp(v, "2")))
            one_stream = !strcmp(v, "1");
        else if (v && !strcmp(a, "--tune") && (!strcmp(v, "0") || !strcmp(v, "1")))
            blob_gemm_tuning_set(!strcmp(v, "1"));
        else if (v && !strcmp(a, "--steps") && atoi(v) > 0)
            o.steps = atoi(v);
        else if (v && !strcmp(a, "--repeats") && atoi(v) > 0 && atoi(v) <= MAX_REPEATS)
            o.repeats = atoi(v);
        else if (v && !strcmp(a, "--torch"))
            o.script = v;
        else
            usage();
    }
    if (!o.num_nets)
        o.defs[o.num_nets++] = net_def_find("mlp");
    if (!o.num_batches) {
        o.batches[o.num_batches++] = 64;
        o.batches[o.num_batches++] = 256;
    }
    if (!o.num_maths)
        o.maths[o.num_maths++] = blob_math_mode_get();
    if (o.steps < warmup)
        warmup = o.steps;
    return o;
}

static figures f[MAX_MATHS][MAX_NETS][MAX_BATCHES];

/* libblob's figures of every math mode, net and batch. */
static blob_status run_libblob(const options *o, nn_mode mode)
{
    void *stream = NULL;
    /* above the nets' side streams, as the trainer's (net.h, one_stream) */
    blob_status st = mode == NN_GPU ? blob_stream_create_with_priority(&stream, 1) : BLOB_OK;
    blob_stream_set(stream);
    for (int m = 0; st == BLOB_OK && m < o->num_maths; m++)
        if ((st = blob_math_mode_set(o->maths[m])) == BLOB_OK)
            st = bench_all(o->defs, o->num_nets, o->batches, o->num_batches, mode, o->maths[m],
                           o->steps, o->repeats, f[m]);
    blob_stream_set(NULL);
    blob_stream_destroy(stream);
    blob_thread_release();
    return st;
}

/* PyTorch's figures of every math mode and net, after all of libblob's, never beside
 * them; no_torch[m][k] says why there are none (NULL: there are), in why. */
static void run_torch(const options *o, nn_mode mode, int threads, char *torch_device,
                      size_t device_size, const char *no_torch[][MAX_NETS],
                      char why[][MAX_NETS][256])
{
    const char *python = bench_python();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "timeout 120 %s -c 'import torch' >/dev/null 2>&1", python);
    bool have_torch = system(cmd) == 0;
    for (int m = 0; m < o->num_maths; m++)
        for (int k = 0; k < o->num_nets; k++) {
            int64_t torch_params = 0;
            char *w = why[m][k];
            const char *name = o->defs[k]->name, *math = blob_math_mode_name(o->maths[m]);
            if (!have_torch) {
                snprintf(w, sizeof why[m][k], "%.100s cannot import torch", python);
                no_torch[m][k] = w;
                continue;
            }
            const double t0 = nn_now();
            no_torch[m][k] =
                torch_figures(o->script, python, mode, name, math, threads, o->steps, o->repeats,
                              o->batches, o->num_batches, f[m][k], &torch_params, torch_device,
                              device_size, w, sizeof why[m][k]);
            fprintf(stderr, "net_step: torch %s %s, every batch: %s (%.1f s)\n", name, math,
                    no_torch[m][k] ? no_torch[m][k] : "done", nn_now() - t0);
            if (!no_torch[m][k] && torch_params != f[m][k][0].params) {
                snprintf(w, sizeof why[m][k],
                         "its net has %lld parameters, libblob's %lld: not the same net",
                         (long long)torch_params, (long long)f[m][k][0].params);
                no_torch[m][k] = w;
                for (int i = 0; i < o->num_batches; i++) {
                    f[m][k][i].torch_eager = f[m][k][i].torch_fused = 0;
                    f[m][k][i].torch_graph = f[m][k][i].torch_compile = 0;
                    f[m][k][i].torch_kernels = 0;
                }
            }
        }
}

/* The header and a table per math mode and net on stdout. */
static void report(const options *o, nn_mode mode, const blob_blas_info *blas,
                   const char *torch_device, const char *no_torch[][MAX_NETS])
{
    char where[32] = "the CPU";
    int gpu;
    if (mode == NN_GPU && blob_device_get(&gpu) == BLOB_OK)
        snprintf(where, sizeof where, "GPU %d", gpu);
    printf("net_step: libblob on %s%s%s%s; median of %d runs of %d steps after %d warm-up "
           "steps\n",
           where, mode == NN_GPU ? (one_stream ? " (one stream)" : " (two streams)") : "",
           *torch_device ? ", PyTorch on " : "", torch_device, o->repeats, o->steps, warmup);
    if (mode == NN_CPU)
        printf("host BLAS: %s (torch: as many threads)\n", blas->summary);
    for (int m = 0; m < o->num_maths; m++)
        for (int k = 0; k < o->num_nets; k++)
            print_table(o->defs[k], blob_math_mode_name(o->maths[m]), mode, o->batches,
                        o->num_batches, f[m][k], no_torch[m][k]);
}

int main(int argc, char **argv)
{
    options o = parse_options(argc, argv);
    bool have_gpu = blob_device_count() > 0;
    if (o.device && !strcmp(o.device, "gpu") && !have_gpu) {
        fprintf(stderr, "net_step: no GPU found\n");
        return 1;
    }
    nn_mode mode = have_gpu && !(o.device && !strcmp(o.device, "cpu")) ? NN_GPU : NN_CPU;
    if (o.only && strcmp(o.only, mode == NN_GPU ? "gpu" : "cpu")) {
        printf("net_step: skipped (--if %s): the steps would run on the %s\n", o.only,
               mode == NN_GPU ? "GPU" : "host");
        return 0;
    }
    if (mode == NN_CPU && (o.num_maths > 1 || o.maths[0] != BLOB_MATH_FP32)) {
        fprintf(stderr, "net_step: the host computes in float32 whatever the math mode: one "
                        "run, as fp32\n");
        o.num_maths = 1;
        o.maths[0] = BLOB_MATH_FP32;
    }
    blob_status st = run_libblob(&o, mode);
    if (st != BLOB_OK) {
        fprintf(stderr, "net_step: %s: %s\n", blob_strerror(st), blob_last_error());
        return 1;
    }
    blob_blas_info blas = {.threads = 1};
    blob_blas_get_info(&blas);
    char torch_device[256] = "", why[MAX_MATHS][MAX_NETS][256];
    const char *no_torch[MAX_MATHS][MAX_NETS] = {{NULL}};
    run_torch(&o, mode, blas.threads, torch_device, sizeof torch_device, no_torch, why);
    report(&o, mode, &blas, torch_device, no_torch);
    return 0;
}

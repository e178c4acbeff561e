/*
 * net_step - time one training step of a net of examples/nets: forward, backward, SGD
 * update, and the loss read back (as torch's loss.item() does). libblob's fused net
 * and its plain one (net_config.plain), eagerly and, on the GPU, as CUDA graphs, also
 * without waiting for each step's loss; beside the same net in PyTorch, eagerly, with
 * its fused SGD, as a whole-step CUDA graph and under torch.compile, on the same device
 * (bench/net_torch.py, which times the same way) when torch imports. In the mixed
 * precisions (the trainer's --precision bf16-mixed and fp16-mixed) torch runs under
 * autocast and with all its parameters in 16 bits instead. Each row also gives the
 * net's peak device memory, and its ratio to the fp32 row's.
 *
 *   net_step [--net NAME]... [--batch B]... [--precision NAME]... [--device cpu|gpu]
 *            [--if cpu|gpu] [--streams 1|2] [--tune 0|1] [--compile 0|1] [--steps N]
 *            [--repeats R] [--torch PATH]
 *
 * --precision: fp32, tf32 or bf16 (float32 storage, the GPU's GEMMs in that math mode),
 * bf16-mixed or fp16-mixed (net_config.dtype: 16-bit activations and weight copies,
 * float32 master weights; fp16 with a loss scaler); --math is the same option.
 * --if DEVICE: run only where the steps would run on DEVICE (the GPU when there is one,
 * unless --device says otherwise); elsewhere say so and exit 0, so that one script can
 * ask for different rows on either.
 * --tune 1 times cuBLASLt's candidates for each GEMM of libblob's GPU steps once, in the
 * first warm-up step, and keeps the fastest (blob_gemm_tuning_set); the default is the
 * environment's (BLOB_GEMM_TUNING), and the tables' titles say which ran.
 * --compile 0 leaves out torch.compile (its compilation takes most of torch's time).
 * --streams 1 runs libblob's GPU steps on one stream (net_config.one_stream) instead of
 * the default two (the layers' parameter gradients beside the chain of the bottom
 * gradients).
 * Defaults: --net mlp, --batch 64 --batch 256, the process's math mode (BLOB_MATH_MODE).
 * On the host every math mode computes in float32, so several run once, as fp32.
 * Each figure: 20 warm-up steps (N if fewer), then R times: synchronize, wall clock over
 * N steps alternating between two resident batches, synchronize; the median is reported (for
 * an even R the mean of the two middle runs, as Python's statistics.median). The peak:
 * the highest bytes in use at the steps' place (blob_alloc_stats.in_use_peak, reset
 * after the warm-up) less those still in use once the net and its batches are freed
 * (the threads' GEMM workspaces), the highest over the row's runs. PyTorch runs under
 * $BLOB_BENCH_PYTHON (default python3), once per net and precision, after all of
 * libblob's figures, and is stopped after 600 s. On the host both sides use the
 * threads the library's host math uses (blob_blas_get_info). A line per figure goes to
 * stderr as it is measured; the tables go to stdout at the end.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "net.h"

#define WARMUP         20
#define MAX_REPEATS    101
#define MAX_NETS       8
#define MAX_BATCHES    8
#define MAX_PRECISIONS 5
#define CLASSES        10 /* every net here classifies Fashion-MNIST */
#define TORCH_WAYS     4  /* net_torch.py's figures of a batch */

static bool one_stream;     /* --streams 1 */
static int warmup = WARMUP; /* steps before the timed runs: WARMUP, or --steps if fewer */

/* A precision of the step (--precision): float32 storage with the GPU's float32 GEMMs in
 * a math mode, or the trainer's mixed precision (dtype: activations, weight copies and
 * gradients; float32 master weights), whose net has no plain kind, and with a loss
 * scale no graphs (net.h). torch: the headers of net_torch.py's four figures under
 * --math NAME, in its order. */
typedef struct {
    const char *name, *title;
    blob_math_mode math;
    blob_dtype dtype;
    double loss_scale;        /* the grad scaler's first scale (0: none) */
    const char *const *torch; /* TORCH_WAYS of them */
    const char *torch_note;   /* what the headers mean, where they are not fp32's */
} precision;

static const char *const float32_ways[TORCH_WAYS] = {"eager", "fused SGD", "graph", "compile"};
static const char *const bf16_ways[TORCH_WAYS] = {"autocast", "ac graph", "bf16 eager",
                                                  "bf16 graph"};
static const char *const fp16_ways[TORCH_WAYS] = {"ac+scaler", "", "", ""};
static const precision precisions[MAX_PRECISIONS] = {
    {"fp32", "fp32 GEMMs", BLOB_MATH_FP32, BLOB_FLOAT32, 0, float32_ways, NULL},
    {"tf32", "tf32 GEMMs", BLOB_MATH_TF32, BLOB_FLOAT32, 0, float32_ways, NULL},
    {"bf16", "bf16 GEMMs", BLOB_MATH_BF16, BLOB_FLOAT32, 0, float32_ways, NULL},
    {"bf16-mixed", "bf16-mixed (bfloat16 activations and weight copies, float32 master weights)",
     BLOB_MATH_FP32, BLOB_BFLOAT16, 0, bf16_ways,
     "autocast: torch.autocast(bfloat16) on float32 parameters, eager; ac graph: the same as a "
     "whole-step CUDA graph; bf16: model.to(bfloat16), every tensor in bfloat16"},
    {"fp16-mixed",
     "fp16-mixed (float16 activations and weight copies, float32 master weights, loss scaler)",
     BLOB_MATH_FP32, BLOB_FLOAT16, 65536, fp16_ways,
     "ac+scaler: torch.autocast(float16) on float32 parameters with torch.amp.GradScaler, "
     "eager"},
};

static const precision *precision_find(const char *name)
{
    for (int i = 0; i < MAX_PRECISIONS; i++)
        if (!strcmp(name, precisions[i].name))
            return &precisions[i];
    return NULL;
}

typedef enum { EAGER, GRAPH, GRAPH_ASYNC, RUN_KINDS } run_kind;
static const char *const run_names[RUN_KINDS] = {"eager", "graph", "graph async"};

/* The runs of p on mode's device: eager, and on the GPU graphs unless p scales the loss. */
static int num_runs(nn_mode mode, const precision *p)
{
    return mode == NN_GPU && p->loss_scale == 0 ? RUN_KINDS : 1;
}

/* The kinds of p's net: fused, and plain with float32 storage. */
static int num_kinds(const precision *p) { return p->dtype == BLOB_FLOAT32 ? 2 : 1; }

/* One kind of libblob's net (fused or plain): us per step of each run kind (0: not
 * measured), the highest peak of its runs in MiB. */
typedef struct {
    double us[RUN_KINDS], peak;
    int64_t kernels, nodes; /* of the graph of one step (0: unknown) */
} blob_figures;

/* PyTorch's figures of one batch: us per step and peak MiB of each way (0: not measured). */
typedef struct {
    double us[TORCH_WAYS], peak[TORCH_WAYS];
    int64_t kernels; /* CUDA kernels of a torch eager step (0: none) */
    char error[160]; /* the first way that failed, and why */
} torch_side;

typedef struct {
    int64_t params;       /* learnable values, to match torch's net */
    blob_figures kind[2]; /* fused, plain */
    torch_side torch;
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

/* Where mode's steps keep their memory: the current GPU, or the host. */
static blob_place steps_place(nn_mode mode)
{
    int gpu = 0;
    return mode == NN_GPU && blob_device_get(&gpu) == BLOB_OK ? blob_place_device(gpu)
                                                              : blob_place_host();
}

/* Median microseconds per step over `repeats` runs of `steps` steps, and the highest
 * bytes in use at mode's place in them; with wait, every step's loss is read on the host
 * before the next is queued. */
static blob_status time_steps(net *n, nn_mode mode, blob **x, blob **y, int steps, int repeats,
                              bool wait, double *us, size_t *peak)
{
    double samples[MAX_REPEATS], loss;
    for (int s = 0; s < warmup; s++) {
        NN_TRY(net_train_step(n, x[s % 2], y[s % 2]));
        NN_TRY(net_loss(n, &loss));
    }
    NN_TRY(sync_device(mode));
    NN_TRY(blob_alloc_reset_peaks(steps_place(mode)));
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
    blob_alloc_stats st;
    NN_TRY(blob_alloc_get_stats(steps_place(mode), &st));
    *peak = st.in_use_peak;
    return BLOB_OK;
}

/* Two random batches for def in p, resident on mode's device (on failure all NULL). */
static blob_status fake_batches(const net_def *def, nn_mode mode, const precision *p, int64_t batch,
                                blob **x, blob **y)
{
    uint64_t rng = 5;
    blob_status st = BLOB_OK;
    x[0] = x[1] = y[0] = y[1] = NULL;
    for (int b = 0; st == BLOB_OK && b < 2; b++)
        st = net_fake_batch(def, mode, p->dtype, batch, CLASSES, 1, b, &rng, &x[b], &y[b]);
    for (int b = 0; st != BLOB_OK && b < 2; b++) {
        blob_free(x[b]);
        blob_free(y[b]);
        x[b] = y[b] = NULL;
    }
    return st;
}

/* A fresh net (fused, or plain) in precision p and two random resident batches, timed as
 * `run` says into the figures of its kind; the net's parameter count too, and with graphs
 * the kernels and nodes of one step's graph. */
static blob_status bench(const net_def *def, nn_mode mode, const precision *p, bool plain,
                         run_kind run, int64_t batch, int steps, int repeats, figures *f)
{
    net_config cfg = {.def = def,
                      .mode = mode,
                      .dtype = p->dtype,
                      .batch = batch,
                      .seed = 1,
                      .lr = 0.01,
                      .momentum = 0.9,
                      .weight_decay = 5e-4,
                      .graph = run != EAGER,
                      .plain = plain,
                      .loss_only = true,
                      .one_stream = one_stream,
                      .loss_scale = p->loss_scale};
    blob_figures *k = &f->kind[plain];
    blob *x[2], *y[2];
    net *n = NULL;
    size_t peak = 0;
    blob_status st = fake_batches(def, mode, p, batch, x, y);
    if (st == BLOB_OK)
        st = net_create(&n, &cfg);
    if (st == BLOB_OK)
        st = time_steps(n, mode, x, y, steps, repeats, run != GRAPH_ASYNC, &k->us[run], &peak);
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
    blob_alloc_stats left; /* what outlives the net: the threads' workspaces */
    if (st == BLOB_OK && (st = blob_alloc_get_stats(steps_place(mode), &left)) == BLOB_OK &&
        peak > left.in_use)
        k->peak = fmax(k->peak, (double)(peak - left.in_use) / (double)MIB);
    return st;
}

/* "-" or a number: the figure, 0 for "-". */
static double figure(const char *s) { return strcmp(s, "-") ? atof(s) : 0; }

/* Four figures after a prefix of line into v (0 for "-"): whether they were there. */
static bool four_figures(const char *line, const char *prefix, double *v)
{
    char s[TORCH_WAYS][32];
    const size_t len = strlen(prefix);
    if (strncmp(line, prefix, len) ||
        sscanf(line + len, "%31s %31s %31s %31s", s[0], s[1], s[2], s[3]) != TORCH_WAYS)
        return false;
    for (int i = 0; i < TORCH_WAYS; i++)
        v[i] = figure(s[i]);
    return true;
}

/* One line of net_torch.py's into f (f[i] for batches[i]), *params and device. */
static void torch_line(const char *line, const int64_t *batches, int num_batches, figures *f,
                       int64_t *params, char *device, size_t device_size)
{
    long long batch, count;
    int used = 0;
    torch_side *row = NULL;
    if (sscanf(line, "batch %lld %n", &batch, &used) == 1)
        for (int i = 0; i < num_batches; i++)
            if (batches[i] == batch)
                row = &f[i].torch;
    if (!strncmp(line, "device ", 7))
        snprintf(device, device_size, "%.200s", line + 7);
    else if (sscanf(line, "net %*s params %lld", &count) == 1)
        *params = count;
    else if (!row)
        return;
    else if (sscanf(line + used, "kernels %lld", &count) == 1)
        row->kernels = count;
    else if (!strncmp(line + used, "error ", 6) && !row->error[0])
        snprintf(row->error, sizeof row->error, "%.150s", line + used + 6);
    else if (!four_figures(line + used, "us ", row->us))
        four_figures(line + used, "peak_mib ", row->peak);
}

/* What net_torch.py is asked for. */
typedef struct {
    const char *script, *python, *name;
    const precision *prec;
    nn_mode mode;
    int threads, steps, repeats;
    bool compile;
    const int64_t *batches;
    int num_batches;
} torch_job;

/* PyTorch's figures for one net (f[i] for batches[i]; 0 where missing): NULL, or why
 * there are none, written to why. */
static const char *torch_figures(const torch_job *j, figures *f, int64_t *params, char *device,
                                 size_t device_size, char *why, size_t why_size)
{
    char cmd[4096], line[512];
    int at =
        snprintf(cmd, sizeof cmd,
                 "timeout 600 %s '%s' --net '%s' --device %s --math %s --steps %d "
                 "--repeats %d --warmup %d%s",
                 j->python, j->script, j->name, j->mode == NN_GPU ? "cuda" : "cpu", j->prec->name,
                 j->steps, j->repeats, warmup, j->compile ? "" : " --no-compile");
    if (j->mode == NN_GPU)
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, " --kernels");
    else
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, " --threads %d", j->threads);
    for (int i = 0; i < j->num_batches; i++)
        at +=
            snprintf(cmd + at, sizeof cmd - (size_t)at, " --batch %lld", (long long)j->batches[i]);
    FILE *p = popen(cmd, "r");
    if (!p) {
        snprintf(why, why_size, "cannot start %.100s", j->python);
        return why;
    }
    *params = 0;
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        torch_line(line, j->batches, j->num_batches, f, params, device, device_size);
    }
    if (pclose(p) != 0) {
        snprintf(why, why_size, "%.100s --net %.32s failed or ran past 600 s", j->script, j->name);
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

static void print_ratio(double num, double den, int decimals)
{
    if (num > 0 && den > 0)
        printf(" %6.*fx", decimals, num / den);
    else
        printf(" %7s", "-");
}

/* The fastest of torch's figures (0: none). */
static double torch_best(const torch_side *t)
{
    double best = 0;
    for (int i = 0; i < TORCH_WAYS; i++)
        if (t->us[i] > 0 && (best == 0 || t->us[i] < best))
            best = t->us[i];
    return best;
}

/* A row of the table: libblob's kind (fused or plain) of one batch; fp32: the same row in
 * fp32 (NULL: none). */
static void print_row(int64_t batch, bool plain, const figures *f, const figures *fp32)
{
    const blob_figures *k = &f->kind[plain];
    const double best = torch_best(&f->torch);
    printf("%5lld  %-6s", (long long)batch, plain ? "plain" : "fused");
    print_us(k->us[EAGER], 10);
    print_us(k->us[GRAPH], 9);
    print_us(k->us[GRAPH_ASYNC], 12);
    if (k->kernels > 0)
        printf(" %9lld/%-4lld", (long long)k->kernels, (long long)k->nodes);
    else
        printf(" %14s", "-");
    print_us(k->peak, 9);
    print_ratio(k->peak, fp32 ? fp32->kind[plain].peak : 0, 2);
    for (int i = 0; i < TORCH_WAYS; i++)
        print_us(plain ? 0 : f->torch.us[i], 10);
    print_ratio(best, k->us[EAGER], 1);
    print_ratio(best, k->us[GRAPH], 1);
    printf("\n");
}

/* Under a batch's rows: torch's peaks beside libblob's fused one, its kernels, its error. */
static void print_torch_notes(const precision *p, int64_t batch, const figures *f)
{
    const torch_side *t = &f->torch;
    if (torch_best(t) > 0 && t->peak[0] > 0) {
        printf("  batch %lld: torch's peak MiB (over libblob's):", (long long)batch);
        for (int i = 0; i < TORCH_WAYS; i++)
            if (t->peak[i] > 0) {
                printf(" %s %.1f", p->torch[i], t->peak[i]);
                print_ratio(t->peak[i], f->kind[0].peak, 2);
            }
        printf("\n");
    }
    if (t->kernels > 0)
        printf("  batch %lld: a torch eager step launches %lld CUDA kernels\n", (long long)batch,
               (long long)t->kernels);
    if (t->error[0])
        printf("  batch %lld: torch failed: %s\n", (long long)batch, t->error);
}

/* The table of one net in precision p; fp32: its figures in fp32 (NULL: none). */
static void print_table(const net_def *def, const precision *p, nn_mode mode,
                        const int64_t *batches, int num_batches, const figures *f,
                        const figures *fp32, const char *no_torch)
{
    printf("\n%s (%s), %s%s: one SGD step (forward, backward, update, loss read back), us\n",
           def->name, def->title, p->title,
           mode == NN_GPU && blob_gemm_tuning_get() ? " (tuned)" : "");
    printf("                --------------------------- libblob ----------------------------"
           "  ----------------- torch ------------------  best torch over\n");
    printf("batch  kind        eager     graph  graph async  kernels/nodes  peak MiB   /fp32");
    for (int i = 0; i < TORCH_WAYS; i++)
        printf(" %10s", p->torch[i]);
    printf("    eager   graph\n");
    for (int i = 0; i < num_batches; i++) {
        for (int plain = 0; plain < num_kinds(p); plain++)
            print_row(batches[i], plain, &f[i], fp32 ? &fp32[i] : NULL);
        print_torch_notes(p, batches[i], &f[i]);
    }
    if (no_torch)
        printf("  torch: no figures (%s)\n", no_torch);
    printf("  best torch over: the fastest of torch's figures over libblob's eager and graph "
           "figure (above 1: libblob is faster)\n");
    printf("  peak MiB: the net's memory at the steps' peak (parameters, optimizer state, "
           "activations, the two batches); /fp32: over the fp32 row's\n");
    if (p->torch_note)
        printf("  torch: %s\n", p->torch_note);
    if (mode == NN_GPU)
        printf("  graph async: graphs queued back to back, the loss copied back behind "
               "each without waiting (as the trainer runs); kernels/nodes: of one step's "
               "graph\n");
}

static void usage(FILE *out, int status)
{
    fprintf(out, "usage: net_step [--net NAME]... [--batch B]... [--precision NAME]... "
                 "[--device cpu|gpu] [--if cpu|gpu] [--streams 1|2] [--tune 0|1] [--compile 0|1] "
                 "[--steps N] [--repeats R] [--torch bench/net_torch.py]\nprecisions:");
    for (int i = 0; i < MAX_PRECISIONS; i++)
        fprintf(out, " %s", precisions[i].name);
    fprintf(out, " (--math NAME: the same)\nnets:");
    for (int i = 0; net_def_at(i); i++)
        fprintf(out, " %s", net_def_at(i)->name);
    fprintf(out, "\n");
    exit(status);
}

/* libblob's figures of every net and batch in precision p (its math mode already set), a
 * line on stderr for each. */
static blob_status bench_all(const net_def *const *defs, int num_nets, const int64_t *batches,
                             int num_batches, nn_mode mode, const precision *p, int steps,
                             int repeats, figures f[][MAX_BATCHES])
{
    const int runs = num_runs(mode, p), kinds = num_kinds(p);
    const int rows = num_nets * num_batches * kinds * runs;
    int row = 0;
    for (int k = 0; k < num_nets; k++)
        for (int i = 0; i < num_batches; i++)
            for (int plain = 0; plain < kinds; plain++)
                for (run_kind r = EAGER; r < (run_kind)runs; r++) {
                    const double t0 = nn_now();
                    NN_TRY(bench(defs[k], mode, p, plain, r, batches[i], steps, repeats, &f[k][i]));
                    fprintf(stderr,
                            "net_step: %d/%d %s batch %lld %s, %s %s: %.1f us per step "
                            "(%.1f s)\n",
                            ++row, rows, defs[k]->name, (long long)batches[i], p->name,
                            plain ? "plain" : "fused", run_names[r], f[k][i].kind[plain].us[r],
                            nn_now() - t0);
                }
    return BLOB_OK;
}

/* What to measure, from the command line. */
typedef struct {
    const char *device, *only, *script;
    const net_def *defs[MAX_NETS];
    int64_t batches[MAX_BATCHES];
    const precision *precs[MAX_PRECISIONS];
    int num_nets, num_batches, num_precs, steps, repeats;
    bool compile;
} options;

/* The float32 precision of the process's math mode (BLOB_MATH_MODE). */
static const precision *default_precision(void)
{
    for (int i = 0; i < MAX_PRECISIONS; i++)
        if (precisions[i].dtype == BLOB_FLOAT32 && precisions[i].math == blob_math_mode_get())
            return &precisions[i];
    return &precisions[0];
}

static options parse_options(int argc, char **argv)
{
    options o = {.script = "bench/net_torch.py", .steps = 200, .repeats = 5, .compile = true};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            usage(stdout, 0);
        else if (v && !strcmp(a, "--net") && net_def_find(v) && o.num_nets < MAX_NETS)
            o.defs[o.num_nets++] = net_def_find(v);
        else if (v && !strcmp(a, "--batch") && atoi(v) > 0 && o.num_batches < MAX_BATCHES)
            o.batches[o.num_batches++] = atoi(v);
        else if (v && (!strcmp(a, "--precision") || !strcmp(a, "--math")) && precision_find(v) &&
                 o.num_precs < MAX_PRECISIONS)
            o.precs[o.num_precs++] = precision_find(v);
        else if (v && !strcmp(a, "--device") && (!strcmp(v, "cpu") || !strcmp(v, "gpu")))
            o.device = v;
        else if (v && !strcmp(a, "--if") && (!strcmp(v, "cpu") || !strcmp(v, "gpu")))
            o.only = v;
        else if (v && !strcmp(a, "--streams") && (!strcmp(v, "1") || !strcmp(v, "2")))
            one_stream = !strcmp(v, "1");
        else if (v && !strcmp(a, "--tune") && (!strcmp(v, "0") || !strcmp(v, "1")))
            blob_gemm_tuning_set(!strcmp(v, "1"));
        else if (v && !strcmp(a, "--compile") && (!strcmp(v, "0") || !strcmp(v, "1")))
            o.compile = !strcmp(v, "1");
        else if (v && !strcmp(a, "--steps") && atoi(v) > 0)
            o.steps = atoi(v);
        else if (v && !strcmp(a, "--repeats") && atoi(v) > 0 && atoi(v) <= MAX_REPEATS)
            o.repeats = atoi(v);
        else if (v && !strcmp(a, "--torch"))
            o.script = v;
        else
            usage(stderr, 2);
    }
    if (!o.num_nets)
        o.defs[o.num_nets++] = net_def_find("mlp");
    if (!o.num_batches) {
        o.batches[o.num_batches++] = 64;
        o.batches[o.num_batches++] = 256;
    }
    if (!o.num_precs)
        o.precs[o.num_precs++] = default_precision();
    if (o.steps < warmup)
        warmup = o.steps;
    return o;
}

static figures f[MAX_PRECISIONS][MAX_NETS][MAX_BATCHES];

/* libblob's figures of every precision, net and batch. */
static blob_status run_libblob(const options *o, nn_mode mode)
{
    void *stream = NULL;
    /* above the nets' side streams, as the trainer's (net.h, one_stream) */
    blob_status st = mode == NN_GPU ? blob_stream_create_with_priority(&stream, 1) : BLOB_OK;
    blob_stream_set(stream);
    for (int m = 0; st == BLOB_OK && m < o->num_precs; m++)
        if ((st = blob_math_mode_set(o->precs[m]->math)) == BLOB_OK)
            st = bench_all(o->defs, o->num_nets, o->batches, o->num_batches, mode, o->precs[m],
                           o->steps, o->repeats, f[m]);
    blob_stream_set(NULL);
    blob_stream_destroy(stream);
    blob_thread_release();
    return st;
}

/* PyTorch's figures of every precision and net, after all of libblob's, never beside
 * them; no_torch[m][k] says why there are none (NULL: there are), in why. */
static void run_torch(const options *o, nn_mode mode, int threads, char *torch_device,
                      size_t device_size, const char *no_torch[][MAX_NETS],
                      char why[][MAX_NETS][256])
{
    torch_job j = {.script = o->script,
                   .python = bench_python(),
                   .mode = mode,
                   .threads = threads,
                   .steps = o->steps,
                   .repeats = o->repeats,
                   .compile = o->compile,
                   .batches = o->batches,
                   .num_batches = o->num_batches};
    char cmd[512];
    snprintf(cmd, sizeof cmd, "timeout 120 %s -c 'import torch' >/dev/null 2>&1", j.python);
    bool have_torch = system(cmd) == 0;
    for (int m = 0; m < o->num_precs; m++)
        for (int k = 0; k < o->num_nets; k++) {
            int64_t torch_params = 0;
            char *w = why[m][k];
            j.name = o->defs[k]->name;
            j.prec = o->precs[m];
            if (!have_torch) {
                snprintf(w, sizeof why[m][k], "%.100s cannot import torch", j.python);
                no_torch[m][k] = w;
                continue;
            }
            const double t0 = nn_now();
            no_torch[m][k] = torch_figures(&j, f[m][k], &torch_params, torch_device, device_size, w,
                                           sizeof why[m][k]);
            fprintf(stderr, "net_step: torch %s %s, every batch: %s (%.1f s)\n", j.name,
                    j.prec->name, no_torch[m][k] ? no_torch[m][k] : "done", nn_now() - t0);
            if (!no_torch[m][k] && torch_params != f[m][k][0].params) {
                snprintf(w, sizeof why[m][k],
                         "its net has %lld parameters, libblob's %lld: not the same net",
                         (long long)torch_params, (long long)f[m][k][0].params);
                no_torch[m][k] = w;
                for (int i = 0; i < o->num_batches; i++)
                    f[m][k][i].torch = (torch_side){.kernels = 0};
            }
        }
}

/* The index of the precision called name among o's (-1: not run). */
static int precision_at(const options *o, const char *name)
{
    for (int m = 0; m < o->num_precs; m++)
        if (!strcmp(o->precs[m]->name, name))
            return m;
    return -1;
}

/* A goal line: PASS or MISS for a figure (> 0), NOT MEASURED without one. */
static void print_goal(const char *goal, double value, const char *unit, double limit)
{
    if (value > 0)
        printf("  %-12s %s: %.2f%s (at most %g%s)\n", value <= limit ? "PASS" : "MISS", goal, value,
               unit, limit, unit);
    else
        printf("  %-12s %s (at most %g%s)\n", "NOT MEASURED", goal, limit, unit);
}

/* The mixed-precision step's goals (issue 23), where mlp4096 ran at batch 512 in
 * bf16-mixed: its graph step, and its peak over the fp32 step's. */
static void report_goals(const options *o)
{
    const int m = precision_at(o, "bf16-mixed"), m32 = precision_at(o, "fp32");
    int k = -1, i = -1;
    for (int n = 0; n < o->num_nets; n++)
        if (!strcmp(o->defs[n]->name, "mlp4096"))
            k = n;
    for (int b = 0; b < o->num_batches; b++)
        if (o->batches[b] == 512)
            i = b;
    if (m < 0 || k < 0 || i < 0)
        return;
    const blob_figures *mixed = &f[m][k][i].kind[0];
    const double fp32_peak = m32 < 0 ? 0 : f[m32][k][i].kind[0].peak;
    printf("\ngoals of the mixed-precision step (mlp4096 at batch 512, bf16-mixed, fused):\n");
    print_goal("a step replayed from a graph", mixed->us[GRAPH], " us", 450);
    print_goal("its peak memory over the fp32 step's", fp32_peak > 0 ? mixed->peak / fp32_peak : 0,
               "x", 0.6);
}

/* The header, a table per precision and net on stdout, and the goals. */
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
    const int m32 = precision_at(o, "fp32");
    for (int m = 0; m < o->num_precs; m++)
        for (int k = 0; k < o->num_nets; k++)
            print_table(o->defs[k], o->precs[m], mode, o->batches, o->num_batches, f[m][k],
                        m32 < 0 ? NULL : f[m32][k], no_torch[m][k]);
    report_goals(o);
}

/* On the host every math mode computes in float32: the float32 precisions run once, as
 * fp32 (the mixed ones as they are). */
static void host_precisions(options *o)
{
    int n = 0;
    bool fp32 = false, changed = false;
    for (int m = 0; m < o->num_precs; m++) {
        const precision *p = o->precs[m];
        if (p->dtype == BLOB_FLOAT32) {
            changed |= fp32 || p != &precisions[0];
            if (fp32)
                continue;
            fp32 = true;
            p = &precisions[0];
        }
        o->precs[n++] = p;
    }
    if (changed)
        fprintf(stderr, "net_step: the host computes in float32 whatever the math mode: one "
                        "run, as fp32\n");
    o->num_precs = n;
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
    if (mode == NN_CPU)
        host_precisions(&o);
    blob_status st = run_libblob(&o, mode);
    if (st != BLOB_OK) {
        fprintf(stderr, "net_step: %s: %s\n", blob_strerror(st), blob_last_error());
        return 1;
    }
    blob_blas_info blas = {.threads = 1};
    blob_blas_get_info(&blas);
    char torch_device[256] = "", why[MAX_PRECISIONS][MAX_NETS][256];
    const char *no_torch[MAX_PRECISIONS][MAX_NETS] = {{NULL}};
    run_torch(&o, mode, blas.threads, torch_device, sizeof torch_device, no_torch, why);
    report(&o, mode, &blas, torch_device, no_torch);
    return 0;
}

/*
 * gradcheck - check the layers and the MLP's training step.
 *
 *  1. Every layer's backward against central differences of its forward, in double
 *     precision, on the CPU and on the GPU.
 *  2. Six SGD steps of the 784-256-128-10 MLP in single precision on the CPU, on the GPU
 *     eagerly and on the GPU with CUDA graphs: the losses and the final weights agree.
 *
 * GPU parts are skipped, saying so, when no GPU is present. Exits 1 on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "net.h"

#define EPS 1e-6      /* finite-difference step */
#define GRAD_TOL 1e-6 /* |analytic - numeric| <= GRAD_TOL * max(1, |analytic| + |numeric|) */
#define AGREE_TOL 1e-3 /* relative, float32 CPU vs GPU after a few steps */

static int passed, failed, skipped;

static void report(blob_status st, const char *what)
{
    fprintf(stderr, "gradcheck: %s: %s: %s\n", what, blob_strerror(st), blob_last_error());
    failed++;
}

/* ---- 1. layers against finite differences ---- */

typedef struct {
    const char *name;
    nn_layer *layer;
    blob *bottom[2]; /* [1]: labels of SoftmaxWithLoss, else NULL */
    blob *top;
    double *weights; /* the objective is sum(weights * top) */
} layer_case;

/* The objective at the current data: forward, then read the top on the host. */
static blob_status objective(layer_case *c, double *out)
{
    const void *top;
    NN_TRY(nn_layer_forward(c->layer, c->bottom, c->top));
    NN_TRY(blob_cpu_data(c->top, &top));
    *out = 0;
    for (int64_t i = 0; i < blob_count(c->top); i++)
        *out += c->weights[i] * nn_load(top, BLOB_FLOAT64, i);
    return BLOB_OK;
}

/* Compare v's diff, as left by backward, with central differences of the objective in
 * each element of v's data; count the elements and those that differ. */
static blob_status check_blob(layer_case *c, blob *v, const char *label, double *max_err,
                              int64_t *checked, int64_t *bad)
{
    int64_t n = blob_count(v);
    double *analytic = malloc((size_t)n * sizeof *analytic);
    if (!analytic)
        return BLOB_ENOMEM;
    const void *diff;
    blob_status st = blob_cpu_diff(v, &diff);
    for (int64_t i = 0; st == BLOB_OK && i < n; i++)
        analytic[i] = nn_load(diff, BLOB_FLOAT64, i);
    for (int64_t i = 0; st == BLOB_OK && i < n; i++) {
        double *x, saved, plus = 0, minus = 0;
        if ((st = blob_mutable_cpu_data(v, (void **)&x)) != BLOB_OK)
            break;
        saved = x[i];
        x[i] = saved + EPS;
        if ((st = objective(c, &plus)) != BLOB_OK ||
            (st = blob_mutable_cpu_data(v, (void **)&x)) != BLOB_OK)
            break;
        x[i] = saved - EPS;
        if ((st = objective(c, &minus)) != BLOB_OK ||
            (st = blob_mutable_cpu_data(v, (void **)&x)) != BLOB_OK)
            break;
        x[i] = saved;
        double numeric = (plus - minus) / (2 * EPS), a = analytic[i];
        double err = fabs(a - numeric) / fmax(1.0, fabs(a) + fabs(numeric));
        *max_err = fmax(*max_err, err);
        if (err > GRAD_TOL) {
            printf("  %s %s[%lld]: analytic %.10g, numeric %.10g\n", c->name, label,
                   (long long)i, a, numeric);
            ++*bad;
        }
    }
    *checked += n;
    free(analytic);
    return st;
}

/* Random data in bottom[0] (|x| in [0.1, 1], away from ReLU's kink), labels, and
 * objective weights; then forward, backward and the comparisons. */
static blob_status check_layer(layer_case *c, nn_mode mode, uint64_t *rng)
{
    double *x;
    NN_TRY(nn_layer_reshape(c->layer, c->bottom, c->top));
    NN_TRY(blob_mutable_cpu_data(c->bottom[0], (void **)&x));
    for (int64_t i = 0; i < blob_count(c->bottom[0]); i++)
        x[i] = (nn_uniform(rng) < 0.5 ? -1 : 1) * (0.1 + 0.9 * nn_uniform(rng));
    if (c->bottom[1]) {
        double *y;
        int64_t classes = blob_shape(c->bottom[0])[1];
        NN_TRY(blob_mutable_cpu_data(c->bottom[1], (void **)&y));
        for (int64_t i = 0; i < blob_count(c->bottom[1]); i++)
            y[i] = (double)(int64_t)(nn_uniform(rng) * (double)classes);
    }
    int64_t n = blob_count(c->top);
    double *dy;
    if (!(c->weights = malloc((size_t)n * sizeof *c->weights)))
        return BLOB_ENOMEM;
    NN_TRY(nn_layer_forward(c->layer, c->bottom, c->top));
    NN_TRY(blob_mutable_cpu_diff(c->top, (void **)&dy));
    for (int64_t i = 0; i < n; i++) /* a loss layer's objective is its top: weight 1 */
        dy[i] = c->weights[i] = c->bottom[1] ? 1.0 : 2 * nn_uniform(rng) - 1;
    NN_TRY(nn_layer_backward(c->layer, c->top, true, c->bottom));

    double max_err = 0;
    int64_t checked = 0, bad = 0;
    NN_TRY(check_blob(c, c->bottom[0], "bottom", &max_err, &checked, &bad));
    for (int i = 0; i < nn_layer_num_params(c->layer); i++)
        NN_TRY(check_blob(c, nn_layer_param(c->layer, i), i ? "bias" : "weights", &max_err,
                          &checked, &bad));
    printf("gradcheck %s %-16s %4lld derivatives, max error %.1e  %s\n",
           mode == NN_GPU ? "GPU" : "CPU", c->name, (long long)checked, max_err,
           bad ? "FAILED" : "ok");
    if (bad)
        failed++;
    else
        passed++;
    return BLOB_OK;
}

static void check_layers(nn_mode mode)
{
    enum { ROWS = 4, IN = 6, OUT = 5 };
    const blob_dtype dt = BLOB_FLOAT64;
    int64_t in_shape[2] = {ROWS, IN}, rows = ROWS;
    uint64_t rng = 42;
    layer_case cases[3] = {{.name = "InnerProduct"}, {.name = "ReLU"},
                           {.name = "SoftmaxWithLoss"}};
    blob_status st;
    if ((st = nn_ip_create(&cases[0].layer, mode, dt, IN, OUT, 7)) != BLOB_OK ||
        (st = nn_relu_create(&cases[1].layer, mode, dt)) != BLOB_OK ||
        (st = nn_softmax_loss_create(&cases[2].layer, mode, dt)) != BLOB_OK ||
        (st = nn_blob_create(&cases[2].bottom[1], mode, dt, 1, &rows)) != BLOB_OK)
        report(st, "creating the layers");
    for (int i = 0; st == BLOB_OK && i < 3; i++) {
        if ((st = nn_blob_create(&cases[i].bottom[0], mode, dt, 2, in_shape)) != BLOB_OK ||
            (st = nn_blob_create(&cases[i].top, mode, dt, 0, NULL)) != BLOB_OK ||
            (st = check_layer(&cases[i], mode, &rng)) != BLOB_OK)
            report(st, cases[i].name);
    }
    for (int i = 0; i < 3; i++) {
        nn_layer_free(cases[i].layer);
        blob_free(cases[i].bottom[0]);
        blob_free(cases[i].bottom[1]);
        blob_free(cases[i].top);
        free(cases[i].weights);
    }
}

/* ---- 2. training steps: CPU, GPU eager and GPU graph agree ---- */

enum { BATCH = 64, STEPS = 6 };
static const int64_t dims[] = {784, 256, 128, 10};

typedef struct {
    double loss[STEPS];
    float *params; /* all parameters after the last step, concatenated */
    int64_t count;
} run_result;

/* Copy all parameters to r->params, allocating it on first use. */
static blob_status read_params(net *n, run_result *r)
{
    if (!r->params) {
        for (int i = 0; i < net_num_params(n); i++)
            r->count += blob_count(net_param(n, i));
        if (!(r->params = malloc((size_t)r->count * sizeof *r->params)))
            return BLOB_ENOMEM;
    }
    float *out = r->params;
    for (int i = 0; i < net_num_params(n); i++) {
        const float *p;
        NN_TRY(blob_cpu_data(net_param(n, i), (const void **)&p));
        for (int64_t j = 0; j < blob_count(net_param(n, i)); j++)
            *out++ = p[j];
    }
    return BLOB_OK;
}

/* Train STEPS steps alternating between two fixed random batches (so a graph run
 * captures one graph per batch), reading the parameters on the host halfway as a
 * checkpoint would, and collect the losses and final parameters. */
static blob_status run_steps(nn_mode mode, bool graph, run_result *r)
{
    void *stream = NULL;
    net *n = NULL;
    blob *x[2] = {NULL, NULL}, *y[2] = {NULL, NULL};
    int64_t xshape[2] = {BATCH, dims[0]}, batch = BATCH;
    uint64_t rng = 9;
    net_config cfg = {.def = net_def_find("mlp"), .mode = mode, .dtype = BLOB_FLOAT32,
                      .batch = BATCH, .seed = 3, .lr = 0.05, .momentum = 0.9,
                      .weight_decay = 1e-3, .graph = graph};
    blob_status st = mode == NN_GPU ? blob_stream_create(&stream) : BLOB_OK;
    blob_set_stream(stream);
    if (st == BLOB_OK)
        st = net_create(&n, &cfg);
    for (int k = 0; st == BLOB_OK && k < 2; k++) {
        float *labels;
        if ((st = nn_blob_create(&x[k], mode, BLOB_FLOAT32, 2, xshape)) != BLOB_OK ||
            (st = nn_blob_create(&y[k], mode, BLOB_FLOAT32, 1, &batch)) != BLOB_OK ||
            (st = nn_fill_uniform(x[k], 0, 1, &rng)) != BLOB_OK ||
            (st = blob_mutable_cpu_data(y[k], (void **)&labels)) != BLOB_OK)
            break;
        for (int i = 0; i < BATCH; i++)
            labels[i] = (float)(int)(nn_uniform(&rng) * 10);
    }
    int64_t correct;
    for (int s = 0; st == BLOB_OK && s < STEPS; s++) {
        if ((st = net_train_step(n, x[s % 2], y[s % 2])) == BLOB_OK)
            st = net_output(n, &r->loss[s], &correct);
        if (st == BLOB_OK && s == STEPS / 2)
            st = read_params(n, r);
    }
    if (st == BLOB_OK)
        st = read_params(n, r);
    if (stream)
        blob_stream_synchronize(stream);
    net_free(n);
    for (int k = 0; k < 2; k++) {
        blob_free(x[k]);
        blob_free(y[k]);
    }
    blob_set_stream(NULL);
    blob_stream_destroy(stream);
    return st;
}

static void compare(const char *what, const run_result *ref, const run_result *r)
{
    double loss_err = 0, param_err = 0, scale = 0;
    for (int s = 0; s < STEPS; s++)
        loss_err = fmax(loss_err, fabs(r->loss[s] - ref->loss[s]) / fmax(1.0, fabs(ref->loss[s])));
    for (int64_t i = 0; i < ref->count; i++) {
        param_err = fmax(param_err, fabs((double)r->params[i] - ref->params[i]));
        scale = fmax(scale, fabs(ref->params[i]));
    }
    param_err /= scale;
    bool ok = loss_err <= AGREE_TOL && param_err <= AGREE_TOL;
    printf("agreement %-22s %d steps: loss %.6f vs %.6f, max loss error %.1e, max weight "
           "error %.1e  %s\n", what, STEPS, r->loss[STEPS - 1], ref->loss[STEPS - 1], loss_err,
           param_err, ok ? "ok" : "FAILED");
    if (ok)
        passed++;
    else
        failed++;
}

static void check_training(bool gpu)
{
    run_result cpu = {0}, eager = {0}, graph = {0};
    blob_status st;
    if ((st = run_steps(NN_CPU, false, &cpu)) != BLOB_OK)
        report(st, "training on the CPU");
    else if (!gpu) {
        printf("agreement CPU vs GPU: skipped (no GPU)\n");
        skipped += 2;
    }
    else if ((st = run_steps(NN_GPU, false, &eager)) != BLOB_OK)
        report(st, "training on the GPU");
    else if ((st = run_steps(NN_GPU, true, &graph)) != BLOB_OK)
        report(st, "training on the GPU with graphs");
    else {
        compare("CPU vs GPU eager", &cpu, &eager);
        compare("CPU vs GPU graph", &cpu, &graph);
    }
    free(cpu.params);
    free(eager.params);
    free(graph.params);
}

int main(void)
{
    bool gpu = blob_device_count() > 0;
    check_layers(NN_CPU);
    if (gpu)
        check_layers(NN_GPU);
    else {
        printf("gradcheck GPU: skipped (no GPU; libblob %s CUDA)\n",
               blob_built_with_cuda() ? "built with" : "built without");
        skipped += 3;
    }
    check_training(gpu);
    blob_thread_release();
    printf("gradcheck: %d passed, %d failed, %d skipped", passed, failed, skipped);
    printf(skipped ? " (they need a GPU; 0 found)\n" : "\n");
    return failed ? 1 : 0;
}

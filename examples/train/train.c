/*
 * train - train one of the nets of nets/ on Fashion-MNIST with libblob, on the GPU when
 * there is one, and write its weights (.npy) and training curves (SVG).
 *
 *   train [--net mlp|lenet|...] [--data DIR] [--out DIR] [--device cpu|gpu] [--graph]
 *         [--precision fp32|tf32|bf16-mixed|fp16-mixed] [--math fp32|tf32|bf16] [--plain] ...
 *   train --gpus N ...                     data parallel on GPUs 0..N-1, a thread each
 *   blob-launch --nproc N train ...        data parallel, a process each
 *
 * Batches are double-buffered: while the GPU runs step i, the host fills the other
 * buffer and pushes it with blob_syncedmem_async_gpu_push on a copy stream (Caffe's
 * prefetch); the step that reads it waits for the push's event. The host reads step
 * i's loss and accuracy only after it has queued step i + 1 (the net copies them back
 * asynchronously), so the GPU never waits for the host between steps.
 *
 * Data parallel: every rank (a thread or a process, one GPU each, see blob/comm.h)
 * has its own stream, net and feeder. Of every global batch of N x --batch images of
 * the shuffled order (the same shuffle on every rank) rank r takes rows
 * [r * batch, (r + 1) * batch); the nets average their gradients, so the run trains
 * like one GPU with batch N x --batch. Losses and accuracies are summed over the ranks
 * when they are reported, and rank 0 prints and writes the outputs. A rank that fails
 * ends the run: in --gpus mode the process exits; under blob-launch the launcher stops
 * the others; ranks on other hosts get an error by the communicator's deadline.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmnist.h"
#include "net.h"
#include "plot.h"

typedef struct {
    const net_def *net;
    const char *data_dir, *out_dir, *device;
    bool graph, plain;
    blob_math_mode math; /* BLOB_MATH_DEFAULT: the environment's (BLOB_MATH_MODE) */
    blob_dtype dtype;    /* of activations and weights: float32, or 16-bit (mixed) */
    double loss_scale;   /* fp16-mixed: the scaler's initial scale */
    int epochs, gpus;
    int64_t batch, limit;
    int lr_step;
    double lr, lr_gamma, momentum, weight_decay, min_accuracy;
    uint64_t seed;
} options;

/* Epochs, batch size, learning rate and its step come from the net's definition unless
 * given (a batch size of 0 there means DEFAULT_BATCH). */
static const options defaults = {
    .out_dir = "demo-out",
    .lr_gamma = 0.1,
    .momentum = 0.9,
    .weight_decay = 5e-4,
    .seed = 1,
    .lr_step = -1,
    .dtype = BLOB_FLOAT32,
    .loss_scale = 65536,
};
#define DEFAULT_NET   "mlp"
#define MAX_GPUS      64
#define DEFAULT_BATCH 64

/* How an option's value is taken. */
typedef enum {
    OPT_FLAG,   /* no value: the bool field becomes true */
    OPT_TEXT,   /* the value itself, into a const char * field */
    OPT_INT,    /* decimal digits in [lo, hi], into an int field */
    OPT_INT64,  /* ... into an int64_t field */
    OPT_UINT64, /* ... into a uint64_t field */
    OPT_REAL,   /* a decimal number in [lo, hi], into a double field */
    OPT_CALL,   /* the handler's: false if it refuses the value */
} opt_kind;

/* One option of the command line, and its lines of the usage. */
typedef struct {
    const char *name, *arg; /* "--net", "NAME"; arg NULL for a flag */
    opt_kind kind;
    size_t field;                            /* offsetof(options, ...) (not OPT_CALL) */
    double lo, hi;                           /* the bounds of a number */
    bool (*take)(options *o, const char *v); /* OPT_CALL */
    const char *help;           /* a printf format given the field's default, if it is text,
                             * a number with a fraction or the seed */
    void (*more_help)(FILE *f); /* printed after help, or NULL */
} option_spec;

static bool take_net(options *o, const char *v)
{
    o->net = net_def_find(v);
    return o->net != NULL;
}

static bool take_device(options *o, const char *v)
{
    if (strcmp(v, "cpu") && strcmp(v, "gpu"))
        return false;
    o->device = v;
    return true;
}

static bool take_math(options *o, const char *v)
{
    blob_math_mode m = nn_math_mode_find(v);
    if (m)
        o->math = m;
    return m != 0;
}

/* fp32 and tf32 are float32 storage (tf32: --math tf32); the mixed modes 16-bit storage. */
static bool take_precision(options *o, const char *v)
{
    static const struct {
        const char *name;
        blob_dtype dtype;
        blob_math_mode math;
    } modes[] = {{"fp32", BLOB_FLOAT32, BLOB_MATH_FP32},
                 {"tf32", BLOB_FLOAT32, BLOB_MATH_TF32},
                 {"bf16-mixed", BLOB_BFLOAT16, BLOB_MATH_DEFAULT},
                 {"fp16-mixed", BLOB_FLOAT16, BLOB_MATH_DEFAULT}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (!strcmp(v, modes[i].name)) {
            o->dtype = modes[i].dtype;
            if (modes[i].math)
                o->math = modes[i].math;
            return true;
        }
    return false;
}

/* The --precision name of a 16-bit storage dtype. */
static const char *mixed_name(blob_dtype dtype)
{
    return dtype == BLOB_BFLOAT16 ? "bf16-mixed" : "fp16-mixed";
}

static void net_list(FILE *f)
{
    for (int i = 0; net_def_at(i); i++) {
        const net_def *d = net_def_at(i);
        long long batch = d->batch ? d->batch : DEFAULT_BATCH;
        fprintf(f, "      %-8s %s: %d epochs, batch %lld, lr %g (x0.1 every %d)\n", d->name,
                d->title, d->epochs, batch, d->lr, d->lr_step);
    }
}

#define FIELD(f) offsetof(options, f)
#define WRAP     "\n                      " /* a help line's continuation */

static const option_spec option_specs[] = {
    {"--net", "NAME", OPT_CALL, 0, 0, 0, take_net, "the net to train (default " DEFAULT_NET "):\n",
     net_list},
    {"--data", "DIR", OPT_TEXT, FIELD(data_dir), 0, 0, NULL,
     "Fashion-MNIST IDX files (default: $FASHION_MNIST_DIR," WRAP "else " FMNIST_DEFAULT_DIR ")\n",
     NULL},
    {"--out", "DIR", OPT_TEXT, FIELD(out_dir), 0, 0, NULL,
     "where the weights (.npy) and curve.svg go (default %s)\n", NULL},
    {"--device", "cpu|gpu", OPT_CALL, 0, 0, 0, take_device, "default: gpu when one is present\n",
     NULL},
    {"--graph", NULL, OPT_FLAG, FIELD(graph), 0, 0, NULL,
     "run training steps as CUDA graphs (one gpu only)\n", NULL},
    {"--math", "MODE", OPT_CALL, 0, 0, 0, take_math,
     "GPU GEMMs in fp32 (exact), tf32 or bf16 (tensor cores," WRAP
     "float32 storage and accumulation); default: $BLOB_MATH_MODE," WRAP "else fp32\n",
     NULL},
    {"--precision", "MODE", OPT_CALL, 0, 0, 0, take_precision,
     "fp32 (--math fp32), tf32 (--math tf32), bf16-mixed or" WRAP
     "fp16-mixed: bfloat16/float16 activations and weight copies," WRAP
     "float32 master weights, momentum and loss (fp16-mixed with" WRAP
     "loss scaling); default: float32 storage, --math's mode\n",
     NULL},
    {"--loss-scale", "X", OPT_REAL, FIELD(loss_scale), 1, 1e30, NULL,
     "fp16-mixed: the initial loss scale, in [1, 1e30], default %g\n", NULL},
    {"--plain", NULL, OPT_FLAG, FIELD(plain), 0, 0, NULL,
     "Caffe's layers and update (gemm, bias by a ones-gemm, ReLU" WRAP
     "layers, a four-kernel SGD) instead of the fused ones\n",
     NULL},
    {"--gpus", "N", OPT_INT, FIELD(gpus), 1, MAX_GPUS, NULL,
     "data parallel on GPUs 0..N-1, a thread each, with --batch" WRAP
     "images per GPU (blob-launch --nproc N train ... runs a" WRAP "process per GPU instead)\n",
     NULL},
    {"--epochs", "N", OPT_INT, FIELD(epochs), 1, 10000, NULL, "at most 10000, default: the net's\n",
     NULL},
    {"--batch", "N", OPT_INT64, FIELD(batch), 1, 1 << 20, NULL,
     "at most 2^20, default: the net's\n", NULL},
    {"--lr", "X", OPT_REAL, FIELD(lr), DBL_MIN, 1000, NULL,
     "learning rate, > 0 and at most 1000, default: the net's\n", NULL},
    {"--lr-step", "N", OPT_INT, FIELD(lr_step), 0, 10000, NULL,
     "multiply it by --lr-gamma every N epochs (0: never, at" WRAP
     "most 10000), default: the net's\n",
     NULL},
    {"--lr-gamma", "X", OPT_REAL, FIELD(lr_gamma), DBL_MIN, 1000, NULL,
     "> 0 and at most 1000, default %g\n", NULL},
    {"--momentum", "X", OPT_REAL, FIELD(momentum), 0, 0x1.fffffffffffffp-1 /* below 1 */, NULL,
     "in [0, 1), default %g\n", NULL},
    {"--weight-decay", "X", OPT_REAL, FIELD(weight_decay), 0, 1000, NULL,
     "in [0, 1000], default %g\n", NULL},
    {"--seed", "N", OPT_UINT64, FIELD(seed), 0, 1e15, NULL,
     "weight initialisation and shuffling, at most 10^15," WRAP "default %llu\n", NULL},
    {"--limit", "N", OPT_INT64, FIELD(limit), 1, 1 << 30, NULL,
     "train on the first N training images only (at most 2^30)\n", NULL},
    {"--min-accuracy", "X", OPT_REAL, FIELD(min_accuracy), 0, 1, NULL,
     "in [0, 1]: exit with status 1 if the final test accuracy" WRAP "is below X\n", NULL},
};
#define NUM_OPTIONS (sizeof option_specs / sizeof option_specs[0])

/* s's lines of the usage, its default (in `defaults`) filled in. */
static void option_help(FILE *f, const option_spec *s)
{
    char head[32];
    snprintf(head, sizeof head, "%s%s%s", s->name, s->arg ? " " : "", s->arg ? s->arg : "");
    fprintf(f, "  %-20s", head);
    const char *d = (const char *)&defaults + s->field;
    if (s->kind == OPT_TEXT)
        fprintf(f, s->help, *(const char *const *)d);
    else if (s->kind == OPT_REAL)
        fprintf(f, s->help, *(const double *)d);
    else if (s->kind == OPT_UINT64)
        fprintf(f, s->help, (unsigned long long)*(const uint64_t *)d);
    else
        fputs(s->help, f);
    if (s->more_help)
        s->more_help(f);
}

static void usage(FILE *f)
{
    fputs("usage: train [options]\n", f);
    for (size_t k = 0; k < NUM_OPTIONS; k++)
        option_help(f, &option_specs[k]);
    fputs("X is a decimal number (5e-4 too), N decimal digits, >= 1 (--lr-step and --seed:\n"
          ">= 0); no sign, space, hex, inf or nan.\n",
          f);
}

/* v as a number in [lo, hi]: a decimal, with an exponent ("5e-4") unless whole (digits
 * alone); no space, '+', hex, inf or nan. */
static bool number(const char *v, double lo, double hi, bool whole, double *out)
{
    size_t n = strlen(v);
    if (!n || strspn(v, whole ? "0123456789" : "0123456789.eE-") != n)
        return false;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !(x >= lo && x <= hi))
        return false;
    *out = x;
    return true;
}

static const option_spec *find_option(const char *name)
{
    for (size_t k = 0; k < NUM_OPTIONS; k++)
        if (!strcmp(option_specs[k].name, name))
            return &option_specs[k];
    return NULL;
}

/* s's value v into *o: false if v is not one it takes. */
static bool take_value(options *o, const option_spec *s, const char *v)
{
    char *field = (char *)o + s->field;
    double num;
    if (s->kind == OPT_CALL)
        return s->take(o, v);
    if (s->kind == OPT_TEXT) {
        *(const char **)field = v;
        return true;
    }
    if (!number(v, s->lo, s->hi, s->kind != OPT_REAL, &num))
        return false;
    if (s->kind == OPT_INT)
        *(int *)field = (int)num;
    else if (s->kind == OPT_INT64)
        *(int64_t *)field = (int64_t)num;
    else if (s->kind == OPT_UINT64)
        *(uint64_t *)field = (uint64_t)num;
    else
        *(double *)field = num;
    return true;
}

/* What was not given: the data from the environment, the rest from the net's definition. */
static void fill_defaults(options *o)
{
    if (!o->data_dir)
        o->data_dir =
            getenv("FASHION_MNIST_DIR") ? getenv("FASHION_MNIST_DIR") : FMNIST_DEFAULT_DIR;
    if (!o->net)
        o->net = net_def_find(DEFAULT_NET);
    if (!o->epochs)
        o->epochs = o->net->epochs;
    if (o->lr == 0)
        o->lr = o->net->lr;
    if (o->lr_step < 0)
        o->lr_step = o->net->lr_step;
    if (!o->batch)
        o->batch = o->net->batch ? o->net->batch : DEFAULT_BATCH;
}

/* Parse "--name value" pairs and flags; exits with status 2 on a bad command line. */
static options parse_options(int argc, char **argv)
{
    options o = defaults;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        const option_spec *s = find_option(a);
        if (s && s->kind == OPT_FLAG) {
            *(bool *)((char *)&o + s->field) = true;
            continue;
        }
        if (!s || i + 1 == argc || !take_value(&o, s, argv[++i])) {
            fprintf(stderr, "train: bad or incomplete option '%s'\n", a);
            usage(stderr);
            exit(2);
        }
    }
    fill_defaults(&o);
    return o;
}

/* Double-buffered input: x (rows x the net's input shape, 1 x 28 x 28 floats in [0, 1])
 * and labels. */
typedef struct {
    blob *x[2], *labels[2]; /* x of the net's dtype, int32 labels */
    float *pixels;          /* x of a 16-bit dtype: the batch in float32 first */
    int axes;               /* of x: rows, then the net's input shape */
    int64_t shape[4];
    int next;          /* the buffer the next fill goes into */
    void *copy_stream; /* GPU mode: where pushes are queued */
} feeder;

static blob_status feeder_init(feeder *f, const net_def *def, nn_mode mode, blob_dtype dtype,
                               int64_t batch, void *copy_stream)
{
    int64_t pixels = 1;
    if (def->input_axes < 1 || def->input_axes > 3)
        return BLOB_ESHAPE;
    f->axes = def->input_axes + 1;
    f->shape[0] = batch;
    for (int i = 0; i < def->input_axes; i++) {
        f->shape[i + 1] = def->input_shape[i];
        pixels *= def->input_shape[i];
    }
    if (pixels != FMNIST_PIXELS)
        return BLOB_ESHAPE; /* the net takes no Fashion-MNIST image */
    f->copy_stream = copy_stream;
    for (int k = 0; k < 2; k++) {
        NN_TRY(nn_blob_create(&f->x[k], mode, dtype, f->axes, f->shape));
        NN_TRY(nn_blob_create(&f->labels[k], mode, BLOB_INT32, 1, &batch));
    }
    if (dtype != BLOB_FLOAT32 &&
        !(f->pixels = malloc(sizeof(float) * (size_t)(batch * FMNIST_PIXELS))))
        return BLOB_ENOMEM;
    return BLOB_OK;
}

static void feeder_free(feeder *f)
{
    for (int k = 0; k < 2; k++) {
        blob_free(f->x[k]);
        blob_free(f->labels[k]);
    }
    free(f->pixels);
}

/* Fill the next buffer with images order[start .. start + rows) of set (file order when
 * order is NULL) and, on the GPU, start pushing it; *k is the buffer filled. The buffer
 * must not be in use by a step still running. */
static blob_status feed(feeder *f, const fmnist_set *set, const int32_t *order, int64_t start,
                        int64_t rows, int *k)
{
    *k = f->next;
    f->next ^= 1;
    blob *x = f->x[*k], *y = f->labels[*k];
    void *data;
    float *px;
    int32_t *py;
    f->shape[0] = rows;
    NN_TRY(blob_reshape(x, f->axes, f->shape));
    NN_TRY(blob_reshape(y, 1, &rows));
    NN_TRY(blob_mutable_cpu_data(x, &data));
    NN_TRY(blob_mutable_cpu_data(y, (void **)&py));
    px = f->pixels ? f->pixels : data;
    for (int64_t r = 0; r < rows; r++) {
        int64_t i = order ? order[start + r] : start + r;
        const uint8_t *img = set->images + i * FMNIST_PIXELS;
        for (int p = 0; p < FMNIST_PIXELS; p++)
            px[r * FMNIST_PIXELS + p] = (float)img[p] * (1.0f / 255.0f);
        py[r] = set->labels[i];
    }
    if (f->pixels)
        NN_TRY(blob_cpu_convert(BLOB_FLOAT32, blob_get_dtype(x), rows * FMNIST_PIXELS, px, data));
    if (!f->copy_stream)
        return BLOB_OK;
    NN_TRY(blob_syncedmem_async_gpu_push(blob_data_mem(x), f->copy_stream));
    return blob_syncedmem_async_gpu_push(blob_data_mem(y), f->copy_stream);
}

typedef struct {
    double loss; /* summed over rows */
    int64_t correct, rows, steps;
    double seconds;
} tally;

/* The ranks of a data-parallel run; one rank (comm NULL, or a 1-rank communicator)
 * trains as on one device. */
typedef struct {
    blob_comm *comm;
    int rank, size;
    bool threads; /* ranks are threads of this process (--gpus) */
} world;

/* The rows of step s of a pass over count images that this rank takes: of every global
 * batch of size x batch rows, rank r takes rows [r * batch, (r + 1) * batch); a last,
 * shorter global batch is split evenly, which may leave a rank none. */
static void share(const world *w, int64_t count, int64_t batch, int64_t s, int64_t *start,
                  int64_t *rows)
{
    int64_t global = batch * w->size, at = s * global, left = count - at;
    int64_t per = left >= global ? batch : (left + w->size - 1) / w->size;
    int64_t from = w->rank * per;
    *start = at + from;
    *rows = from >= left ? 0 : left - from < per ? left - from : per;
}

/* Sum a tally over the ranks: a collective, which every rank reaches at the same points
 * of the run. */
static blob_status tally_sum(const world *w, tally *t)
{
    if (!w->comm)
        return BLOB_OK;
    double v[3] = {t->loss, (double)t->correct, (double)t->rows};
    NN_TRY(blob_comm_all_reduce_host(w->comm, v, 3, BLOB_COMM_SUM));
    t->loss = v[0];
    t->correct = (int64_t)v[1];
    t->rows = (int64_t)v[2];
    return BLOB_OK;
}

/* A progress bar on a terminal, rewritten in place. */
static void progress(const char *what, int64_t done, int64_t total, double loss)
{
    enum { WIDTH = 30 };
    int fill = (int)(WIDTH * done / total);
    printf("\r%s [%.*s%*s] %3d%%  loss %.4f", what, fill, "##############################",
           WIDTH - fill, "", (int)(100 * done / total), loss);
    fflush(stdout);
}

/* Add the results of the call `ago` calls back (rows rows) to t. */
static blob_status count_output(net *n, int ago, int64_t rows, tally *t)
{
    double loss;
    int64_t correct;
    NN_TRY(net_output_ago(n, ago, &loss, &correct));
    t->loss += loss * (double)rows;
    t->correct += correct;
    t->rows += rows;
    return BLOB_OK;
}

/* Run over the first n images of set in `order`, this rank's share of each global
 * batch: training steps when train, else forward passes. Step s's results are read
 * once step s + 1 is queued, and then the batch of step s + 2 is filled and pushed
 * (into step s's buffers, which step s no longer needs) while step s + 1 runs. The
 * tally is summed over the ranks; a bar (given on every rank or none) is drawn by rank
 * 0 (one step behind). */
static blob_status run_pass(net *n, feeder *f, const world *w, const fmnist_set *set,
                            const int32_t *order, int64_t count, int64_t batch, bool train,
                            const char *bar, tally *t)
{
    double t0 = nn_now();
    int64_t global = batch * w->size;
    int64_t steps = (count + global - 1) / global, every = steps / 100 + 1;
    int64_t start, rows, unread = 0; /* unread: rows of the last call, not yet counted */
    int k = 0;
    memset(t, 0, sizeof *t);
    share(w, count, batch, 0, &start, &rows);
    if (rows)
        NN_TRY(feed(f, set, order, start, rows, &k));
    for (int64_t s = 0; s < steps; s++) {
        int cur = k;
        int64_t cur_rows = rows; /* 0: a rank left out of a last, short batch */
        if (cur_rows) {
            NN_TRY(train ? net_train_step(n, f->x[cur], f->labels[cur])
                         : net_forward(n, f->x[cur], f->labels[cur]));
            if (unread)
                NN_TRY(count_output(n, 1, unread, t));
            unread = cur_rows;
        }
        if (s + 1 < steps) {
            share(w, count, batch, s + 1, &start, &rows);
            if (rows)
                NN_TRY(feed(f, set, order, start, rows, &k));
        }
        if (bar && ((s + 1) % every == 0 || s + 1 == steps)) {
            tally all = *t;
            NN_TRY(tally_sum(w, &all));
            if (w->rank == 0 && all.rows)
                progress(bar, s, steps, all.loss / (double)all.rows);
        }
    }
    if (unread)
        NN_TRY(count_output(n, 0, unread, t));
    t->steps = steps;
    t->seconds = nn_now() - t0;
    return tally_sum(w, t);
}

static void shuffle(int32_t *order, int64_t n, uint64_t *rng)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(nn_uniform(rng) * (double)(i + 1));
        int32_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
}

typedef struct {
    options o;
    nn_mode mode;
    world world;
    fmnist_set train, test; /* shared by the ranks of one process */
    int64_t used;           /* training images */
    net *net;
    feeder feed;
    double *curves; /* 3 x epochs: loss, train accuracy, test accuracy */
    int32_t *order;
} trainer;

/* Whether rank 0's standard output is a terminal, on every rank (a collective). */
static blob_status rank0_tty(const world *w, bool *tty)
{
    double v = w->rank == 0 && isatty(STDOUT_FILENO);
    if (w->comm)
        NN_TRY(blob_comm_all_reduce_host(w->comm, &v, 1, BLOB_COMM_SUM));
    *tty = v > 0;
    return BLOB_OK;
}

static blob_status train(trainer *t, double *test_accuracy)
{
    const options *o = &t->o;
    const world *w = &t->world;
    int64_t used = t->used, global = o->batch * w->size;
    int64_t per_epoch = used / global * global; /* whole global batches only */
    uint64_t rng = o->seed;                     /* the same order on every rank */
    double *loss = t->curves, *train_acc = loss + o->epochs, *test_acc = train_acc + o->epochs;
    double t0 = nn_now(), train_seconds = 0;
    int64_t steps = 0;
    bool tty;
    NN_TRY(rank0_tty(w, &tty));
    for (int32_t i = 0; i < used; i++)
        t->order[i] = i;
    for (int e = 0; e < o->epochs; e++) {
        char bar[32];
        snprintf(bar, sizeof bar, "epoch %*d/%d", o->epochs > 9 ? 2 : 1, e + 1, o->epochs);
        tally tr, te;
        double e0 = nn_now();
        shuffle(t->order, used, &rng);
        if (o->lr_step)
            net_set_lr(t->net, o->lr * pow(o->lr_gamma, e / o->lr_step));
        NN_TRY(run_pass(t->net, &t->feed, w, &t->train, t->order, per_epoch, o->batch, true,
                        tty ? bar : NULL, &tr));
        NN_TRY(run_pass(t->net, &t->feed, w, &t->test, NULL, t->test.count, o->batch, false, NULL,
                        &te));
        loss[e] = tr.loss / (double)tr.rows;
        train_acc[e] = (double)tr.correct / (double)tr.rows;
        test_acc[e] = (double)te.correct / (double)te.rows;
        train_seconds += tr.seconds;
        steps += tr.steps;
        if (w->rank)
            continue;
        printf("%s%s  loss %.4f  train %.2f%%  test %.2f%%  %.1f s\n", tty ? "\r\033[K" : "", bar,
               loss[e], 100 * train_acc[e], 100 * test_acc[e], nn_now() - e0);
        fflush(stdout);
    }
    *test_accuracy = test_acc[o->epochs - 1];
    if (w->rank == 0)
        printf("test accuracy %.2f%% after %d epochs in %.1f s (%.1f us per training step)\n",
               100 * *test_accuracy, o->epochs, nn_now() - t0, 1e6 * train_seconds / (double)steps);
    if (w->rank == 0 && o->dtype == BLOB_FLOAT16)
        printf("loss scaling: %lld of %lld steps skipped for overflowing gradients\n",
               (long long)net_skipped_steps(t->net), (long long)steps);
    return BLOB_OK;
}

/* mkdir -p: 0, or -1 with errno set. */
static int make_dirs(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = path + 1;; p++) {
        bool end = !*p;
        if (*p != '/' && !end)
            continue;
        *p = 0;
        if (mkdir(path, 0777) && errno != EEXIST)
            return -1;
        if (end)
            return 0;
        *p = '/';
    }
}

/* The weights as OUT/ip1.weights.npy ... and the curves as OUT/curve.svg. */
static int save(trainer *t)
{
    const char *out = t->o.out_dir;
    char path[4096];
    if (make_dirs(out)) {
        fprintf(stderr, "train: %s: %s\n", out, strerror(errno));
        return -1;
    }
    for (int i = 0; i < net_num_params(t->net); i++) {
        snprintf(path, sizeof path, "%s/%s.npy", out, net_param_name(t->net, i));
        /* 16-bit weights as float32 (.npy has no bfloat16) */
        blob *w = net_param(t->net, i), *w32 = NULL;
        blob_status st = BLOB_OK;
        if (blob_get_dtype(w) != BLOB_FLOAT32 &&
            (st = blob_create(&w32, BLOB_FLOAT32, BLOB_HOST_ONLY, 0, NULL)) == BLOB_OK)
            st = blob_convert_from(w32, w, false, true);
        if (st == BLOB_OK)
            st = blob_save_npy(w32 ? w32 : w, BLOB_PART_DATA, path);
        blob_free(w32);
        if (st != BLOB_OK) {
            fprintf(stderr, "train: %s: %s\n", path, blob_last_error());
            return -1;
        }
    }
    snprintf(path, sizeof path, "%s/curve.svg", out);
    const double *c = t->curves;
    int epochs = t->o.epochs;
    char title[128];
    snprintf(title, sizeof title, "%s on Fashion-MNIST", t->o.net->title);
    if (plot_curves_svg(path, title, epochs, c, c + epochs, c + 2 * epochs)) {
        fprintf(stderr, "train: %s: %s\n", path, strerror(errno));
        return -1;
    }
    printf("wrote %d weight files (%s/*.npy) and %s\n", net_num_params(t->net), out, path);
    return 0;
}

static void print_header(const trainer *t)
{
    const options *o = &t->o;
    const world *w = &t->world;
    printf("%s on Fashion-MNIST (%s): %lld training images, %lld test images\n", o->net->title,
           o->data_dir, (long long)t->used, (long long)t->test.count);
    int device = 0;
    if (w->size > 1)
        printf("device: %d GPUs, a %s each, eager", w->size, w->threads ? "thread" : "process");
    else if (t->mode == NN_GPU && blob_device_get(&device) == BLOB_OK)
        printf("device: GPU %d, %s", device, o->graph ? "CUDA graphs" : "eager");
    else
        printf("device: CPU");
    if (t->mode == NN_GPU)
        printf(", %s GEMMs", blob_math_mode_name(blob_math_mode_get()));
    printf(", %s layers", o->plain ? "plain" : "fused");
    if (o->dtype != BLOB_FLOAT32)
        printf(", %s", mixed_name(o->dtype));
    printf(" | batch %lld", (long long)o->batch);
    if (w->size > 1)
        printf(" per GPU (%lld in all)", (long long)o->batch * w->size);
    printf(", lr %g", o->lr);
    if (o->lr_step)
        printf(" (x%g every %d epochs)", o->lr_gamma, o->lr_step);
    printf(", momentum %g, weight decay %g, %d epochs, seed %llu\n", o->momentum, o->weight_decay,
           o->epochs, (unsigned long long)o->seed);
    blob_blas_info blas;
    if (t->mode == NN_CPU && blob_blas_get_info(&blas) == BLOB_OK)
        printf("host BLAS: %s\n", blas.summary);
    fflush(stdout);
}

/* Report a failure of this rank; returns 1. In --gpus mode it ends the process at once,
 * as blob-launch ends a run when a rank fails: the other ranks would otherwise wait for
 * this one in their next collective until the communicator's deadline. */
static int rank_failed(const world *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rank_failed(const world *w, const char *fmt, ...)
{
    char msg[1024];
    int at = w->size > 1 ? snprintf(msg, sizeof msg, "train: rank %d: ", w->rank)
                         : snprintf(msg, sizeof msg, "train: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + at, sizeof msg - (size_t)at, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", msg); /* one write: ranks' lines do not mix */
    if (w->threads) {
        fflush(stdout);
        _exit(1);
    }
    return 1;
}

/* One rank's run (the only one on one device); 0 on success. Rank 0 prints and writes
 * the outputs and checks --min-accuracy. */
static int run(trainer *t)
{
    const options *o = &t->o;
    const world *w = &t->world;
    t->curves = malloc(3 * (size_t)o->epochs * sizeof *t->curves);
    t->order = malloc((size_t)t->used * sizeof *t->order);
    if (!t->curves || !t->order) {
        free(t->curves);
        free(t->order);
        return rank_failed(w, "out of memory");
    }
    if (w->rank == 0)
        print_header(t);

    net_config cfg = {
        .def = o->net,
        .mode = t->mode,
        .dtype = o->dtype,
        .batch = o->batch,
        .seed = o->seed,
        .lr = o->lr,
        .momentum = o->momentum,
        .weight_decay = o->weight_decay,
        .graph = o->graph,
        .plain = o->plain,
        .comm = w->comm,
        .loss_scale = o->dtype == BLOB_FLOAT16 ? o->loss_scale : 0,
    };
    void *compute = NULL, *copy = NULL;
    blob_status st = BLOB_OK;
    /* the step's chain above the net's side stream (net.h, one_stream) */
    if (t->mode == NN_GPU && (st = blob_stream_create_with_priority(&compute, 1)) == BLOB_OK)
        st = blob_stream_create(&copy);
    blob_stream_set(compute);
    double accuracy = 0;
    if (st == BLOB_OK)
        st = net_create(&t->net, &cfg);
    if (st == BLOB_OK)
        st = feeder_init(&t->feed, o->net, t->mode, o->dtype, o->batch, copy);
    if (st == BLOB_OK)
        st = train(t, &accuracy);
    int rc = 1;
    if (st != BLOB_OK)
        rank_failed(w, "%s: %s", blob_strerror(st), blob_last_error());
    else if (w->rank)
        rc = 0;
    else if (save(t) == 0) {
        rc = accuracy < o->min_accuracy;
        if (rc)
            fprintf(stderr, "train: test accuracy %.2f%% is below the required %.2f%%\n",
                    100 * accuracy, 100 * o->min_accuracy);
    }
    if (compute)
        blob_stream_synchronize(compute);
    net_free(t->net);
    feeder_free(&t->feed);
    blob_stream_set(NULL);
    blob_stream_destroy(copy);
    blob_stream_destroy(compute);
    blob_thread_release();
    free(t->curves);
    free(t->order);
    return rc;
}

/* A rank of a run started by blob-launch (RANK, WORLD_SIZE, ... in the environment). */
static int run_launched(trainer *t, const blob_comm_options *co)
{
    blob_comm *c;
    blob_status st = blob_comm_create(&c, co);
    if (st != BLOB_OK) {
        fprintf(stderr, "train: rank %d: %s: %s\n", co->rank, blob_strerror(st), blob_last_error());
        return 1;
    }
    t->world = (world){.comm = c, .rank = co->rank, .size = co->world_size};
    int rc = run(t);
    blob_comm_free(c); /* after the net, whose list it is */
    return rc;
}

static void *rank_thread(void *arg)
{
    trainer *t = arg;
    blob_status st = blob_device_set(blob_comm_device(t->world.comm));
    int rc = st == BLOB_OK ? run(t)
                           : rank_failed(&t->world, "%s: %s", blob_strerror(st), blob_last_error());
    blob_comm_free(t->world.comm);
    return (void *)(intptr_t)rc;
}

/* --gpus N: rank i is a thread on GPU i, with its own copy of the trainer (the data
 * sets are shared, read only). */
static int run_threads(const trainer *t, int n)
{
    int devices[MAX_GPUS] = {0};
    blob_comm *comms[MAX_GPUS];
    for (int i = 0; i < n; i++)
        devices[i] = i;
    blob_comm_options co;
    memset(&co, 0, sizeof co); /* the deadline and bucket size from the environment */
    blob_status st = blob_comm_create_local(comms, n, devices, &co);
    if (st != BLOB_OK) {
        fprintf(stderr, "train: --gpus %d: %s: %s\n", n, blob_strerror(st), blob_last_error());
        return 1;
    }
    trainer *ranks = calloc((size_t)n, sizeof *ranks);
    pthread_t threads[MAX_GPUS];
    for (int i = 0; i < n; i++) {
        world w = {.comm = comms[i], .rank = i, .size = n, .threads = true};
        if (!ranks)
            return rank_failed(&w, "out of memory");
        ranks[i] = *t;
        ranks[i].world = w;
        int err = pthread_create(&threads[i], NULL, rank_thread, &ranks[i]);
        if (err)
            return rank_failed(&w, "cannot start its thread: %s", strerror(err));
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        void *r;
        pthread_join(threads[i], &r);
        if ((intptr_t)r)
            rc = 1;
    }
    free(ranks);
    return rc;
}

/* Whether the options (on `ranks` ranks) ask a mixed precision for what it does not take,
 * said on stderr if so. */
static bool mixed_refused(const options *o, int ranks)
{
    if (o->dtype == BLOB_FLOAT32 ||
        !(o->plain || ranks > 1 || (o->graph && o->dtype == BLOB_FLOAT16)))
        return false;
    fprintf(stderr,
            "train: --precision %s takes the fused layers on one device%s: not with --plain, "
            "--gpus or a launcher\n",
            mixed_name(o->dtype),
            o->dtype == BLOB_FLOAT16
                ? ", and no --graph (its loss scale decides each step on the host)"
                : "");
    return true;
}

/* Train on one device, on --gpus N threads, or as a rank of blob-launch's. */
static int start(trainer *t)
{
    const options *o = &t->o;
    blob_comm_options co; /* a launcher's: torchrun's, blob-launch's, Slurm's or MPI's */
    if (blob_comm_options_from_env(&co) != BLOB_OK) {
        fprintf(stderr, "train: the launcher's variables: %s\n", blob_last_error());
        return 1;
    }
    bool launched = getenv("WORLD_SIZE") || co.world_size > 1;
    int size = o->gpus ? o->gpus : 1;
    if (launched && o->gpus) {
        fprintf(stderr, "train: --gpus with a launcher's WORLD_SIZE set: use one or the other "
                        "(blob-launch --nproc N runs a process per GPU)\n");
        return 2;
    }
    if (launched)
        size = co.world_size;
    if (o->gpus && (t->mode != NN_GPU || o->gpus > blob_device_count())) {
        if (t->mode == NN_GPU || blob_device_count() == 0)
            fprintf(stderr, "train: --gpus %d: %d GPUs found\n", o->gpus, blob_device_count());
        else
            fprintf(stderr, "train: --gpus trains on GPUs, not with --device cpu\n");
        return 1;
    }
    if (size > 1 && t->mode != NN_GPU) {
        fprintf(stderr, "train: %d ranks need a GPU each (this one trains on the CPU)\n", size);
        return 1;
    }
    if (size > 1 && o->graph) {
        fprintf(stderr, "train: --graph trains on one GPU only: with several the communicator "
                        "watches every collective with a deadline from the host, which a "
                        "replayed CUDA graph would escape (see docs/distributed.md)\n");
        return 1;
    }
    if (mixed_refused(o, size))
        return 1;
    if (t->used < o->batch * size) {
        if (size > 1)
            fprintf(stderr, "train: %lld training images make no batch of %d x %lld\n",
                    (long long)t->used, size, (long long)o->batch);
        else
            fprintf(stderr, "train: %lld training images make no batch of %lld\n",
                    (long long)t->used, (long long)o->batch);
        return 1;
    }
    if (launched)
        return run_launched(t, &co);
    if (size > 1)
        return run_threads(t, size);
    t->world = (world){.size = 1};
    return run(t);
}

int main(int argc, char **argv)
{
    trainer t = {.o = parse_options(argc, argv)};
    if (t.o.math)
        blob_math_mode_set(t.o.math);
    bool have_gpu = blob_device_count() > 0;
    if (t.o.device && !strcmp(t.o.device, "gpu") && !have_gpu) {
        fprintf(stderr, "train: --device gpu: no GPU found (libblob %s CUDA)\n",
                blob_built_with_cuda() ? "built with" : "built without");
        return 1;
    }
    t.mode = have_gpu && !(t.o.device && !strcmp(t.o.device, "cpu")) ? NN_GPU : NN_CPU;
    if (t.o.graph && t.mode != NN_GPU) {
        fprintf(stderr, "train: --graph needs a GPU\n");
        return 1;
    }
    if (mixed_refused(&t.o, t.o.gpus ? t.o.gpus : 1)) /* before the data; a launcher's later */
        return 1;
    char err[512];
    if (fmnist_load(&t.train, t.o.data_dir, "train", err, sizeof err) ||
        fmnist_load(&t.test, t.o.data_dir, "t10k", err, sizeof err)) {
        fprintf(stderr, "train: %s\n", err);
        fmnist_free(&t.train);
        return 1;
    }
    t.used = t.o.limit && t.o.limit < t.train.count ? t.o.limit : t.train.count;
    int rc = start(&t);
    fmnist_free(&t.train);
    fmnist_free(&t.test);
    return rc;
}

#include "net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAYERS 32
#define MAX_PARAMS (MAX_LAYERS * 2)
#define MAX_DEFS   16

/* The results of a step or forward pass, copied to the host behind it. */
typedef struct {
    blob_syncedmem *loss, *prob; /* host copies (on the GPU of blocks borrowing the step's) */
    blob *labels;                /* the step's, read on the host to count */
    int64_t rows, classes;       /* of the probabilities */
    bool valid;
} result;

struct net {
    net_config cfg;
    const nn_math *m;
    int num_layers;
    nn_layer *layers[MAX_LAYERS];
    char layer_names[MAX_LAYERS][16];
    blob *tops[MAX_LAYERS]; /* tops[i] is written by layers[i]; the last is the loss */
    int num_params;
    int first_param[MAX_LAYERS]; /* of layers[i] in params */
    blob *params[MAX_PARAMS];    /* the layers' blobs, viewing flat's memory */
    char names[MAX_PARAMS][24];
    blob *flat;    /* every parameter (data) and its gradient (diff) */
    blob *history; /* the momentum, one per element of flat (float32 with split_master) */
    /* float16, and bfloat16 with a loss scale: float32 master weights (flat's data is their
     * working copy), updated with state's histories */
    blob *master;
    /* bfloat16 without a loss scale (split_master): the master weights are flat's data and
     * these remainders (a uint16_t per element, blob_*_optim_step_split) */
    blob_syncedmem *lo;
    blob_optim_state *state;
    blob_grad_scaler *scaler;    /* cfg.loss_scale: dynamic loss scaling, else NULL */
    int64_t skipped;             /* steps the scaler skipped */
    blob_syncedmem *steps;       /* fused: the step counters of the updates, two sets */
    int64_t split;               /* see sgd_update; 0: one update of all of flat */
    result results[NET_RESULTS]; /* of the last calls, the last at last_result */
    int last_result;
    void *side;                  /* NN_GPU: the layers' side stream (see step), or NULL */
    blob_event *results_ready;   /* with side: where a captured step's results are done */
    bool capturing;              /* a step is being captured into a graph */
    blob_comm_list *comm_params; /* data parallel: params registered with cfg.comm */
    bool handed[MAX_LAYERS];     /* layer i's diffs went to the communicator this step */
    bool warm;                   /* a full-batch step ran, so all memory exists */
    int num_graphs;
    blob_graph *last_graph; /* of the last training step, NULL if eager */
    struct {                /* a graph bakes in device pointers: keyed by them, not by the blobs */
        const void *x, *labels;
        int64_t rows;
        blob_graph *graph;
    } graphs[NET_MAX_GRAPHS];
};

static blob *loss_top(const net *n) { return n->tops[n->num_layers - 1]; }
static blob *prob(const net *n) { return nn_softmax_loss_prob(n->layers[n->num_layers - 1]); }

static const net_def *defs[MAX_DEFS];
static int num_defs;

void net_register(const net_def *def)
{
    if (num_defs < MAX_DEFS)
        defs[num_defs++] = def;
}

const net_def *net_def_find(const char *name)
{
    for (int i = 0; i < num_defs; i++)
        if (!strcmp(defs[i]->name, name))
            return defs[i];
    return NULL;
}

const net_def *net_def_at(int i) { return i >= 0 && i < num_defs ? defs[i] : NULL; }

blob_status net_add(net *n, const char *name, nn_layer *layer)
{
    if (!layer)
        return BLOB_EINVAL;
    if (n->num_layers == MAX_LAYERS || n->num_params + nn_layer_num_params(layer) > MAX_PARAMS ||
        strlen(name) >= sizeof n->layer_names[0]) {
        nn_layer_free(layer);
        return BLOB_EINVAL;
    }
    int i = n->num_layers++;
    n->layers[i] = layer;
    n->first_param[i] = n->num_params;
    snprintf(n->layer_names[i], sizeof n->layer_names[i], "%s", name);
    for (int j = 0; j < nn_layer_num_params(layer); j++) {
        int k = n->num_params++;
        n->params[k] = nn_layer_param(layer, j);
        snprintf(n->names[k], sizeof n->names[k], "%s.%s", name, j ? "bias" : "weights");
    }
    int64_t zero = 0;
    return nn_blob_create(&n->tops[i], n->cfg.mode, nn_layer_top_dtype(layer), 1, &zero);
}

blob_status net_add_ip(net *n, const char *name, const char *relu_name, int64_t num_input,
                       int64_t num_output, uint64_t seed)
{
    const net_config *c = &n->cfg;
    nn_ip_param p = {.num_input = num_input,
                     .num_output = num_output,
                     .relu = relu_name && !c->plain,
                     .plain = c->plain};
    nn_layer *l;
    NN_TRY(nn_ip_create(&l, c->mode, c->dtype, &p, seed));
    NN_TRY(net_add(n, name, l));
    if (!relu_name || !c->plain)
        return BLOB_OK;
    NN_TRY(nn_relu_create(&l, c->mode, c->dtype));
    return net_add(n, relu_name, l);
}

/* The step counters' memory on the mode's side. */
static blob_status steps_memory(net *n, int64_t **out)
{
    return n->cfg.mode == NN_GPU ? blob_syncedmem_mutable_gpu_data(n->steps, (void **)out)
                                 : blob_syncedmem_mutable_cpu_data(n->steps, (void **)out);
}

/* Lay all parameters out in one blob, as Caffe's multi-GPU solver does: each one's data
 * and diff become views of a slice of flat's (borrowed memory on the mode's side), so
 * the SGD update is one optimizer step (four kernels plainly) for the whole net, or two
 * with a side stream (sgd_update). */
static bool mixed(const net *n)
{
    return n->cfg.dtype == BLOB_BFLOAT16 || n->cfg.dtype == BLOB_FLOAT16;
}

/* bfloat16 without loss scaling: the master weights split into flat's working copy and
 * remainders (blob_*_optim_step_split), updated with a float32 history and a step counter
 * of the net's own, by one step of the mode's side that a graph can capture. */
static bool split_master(const net *n)
{
    return n->cfg.dtype == BLOB_BFLOAT16 && n->cfg.loss_scale == 0;
}

/* The remainders' memory on the mode's side. */
static blob_status lo_memory(net *n, void **out)
{
    return n->cfg.mode == NN_GPU ? blob_syncedmem_mutable_gpu_data(n->lo, out)
                                 : blob_syncedmem_mutable_cpu_data(n->lo, out);
}

/* 16-bit dtypes: the float32 master weights from flat's working copy (their values, which
 * the fillers rounded), the optimizer's state and the scaler; split, the remainders, zero
 * (the fillers' weights are bfloat16: each is its own master weight), and the float32
 * history, both zero-filled on the mode's side. */
static blob_status mixed_init(net *n, int64_t total)
{
    if (split_master(n)) {
        void *lo, *history;
        NN_TRY(blob_syncedmem_create(&n->lo, (size_t)total * sizeof(uint16_t),
                                     nn_device(n->cfg.mode)));
        NN_TRY(lo_memory(n, &lo));
        return n->m->mutable_data(n->history, &history);
    }
    const void *work;
    void *master;
    NN_TRY(nn_blob_create(&n->master, n->cfg.mode, BLOB_FLOAT32, 1, &total));
    NN_TRY(blob_cpu_data(n->flat, &work));
    NN_TRY(blob_mutable_cpu_data(n->master, &master));
    NN_TRY(blob_cpu_convert(n->cfg.dtype, BLOB_FLOAT32, total, work, master));
    NN_TRY(n->m->mutable_data(n->master, &master)); /* the step runs where master's data is */
    NN_TRY(blob_optim_state_create(&n->state));
    return n->cfg.loss_scale > 0 ? blob_grad_scaler_create(&n->scaler, n->cfg.loss_scale) : BLOB_OK;
}

static blob_status flatten(net *n)
{
    const net_config *c = &n->cfg;
    size_t elem = blob_dtype_size(c->dtype);
    int64_t total = 0;
    for (int i = 0; i < n->num_params; i++)
        total += blob_count(n->params[i]);
    const int first = nn_layer_num_params(n->layers[0]);
    for (int i = 0; n->side && !c->plain && !c->comm && !mixed(n) && i < first; i++)
        n->split += blob_count(n->params[i]);
    if (n->split == total)
        n->split = 0;
    if (!mixed(n) || split_master(n))
        NN_TRY(nn_blob_create(&n->history, c->mode, split_master(n) ? BLOB_FLOAT32 : c->dtype, 1,
                              &total));
    if (!c->plain && (!mixed(n) || split_master(n)))
        NN_TRY(blob_syncedmem_create(&n->steps, 2 * BLOB_OPTIM_STEP_WORDS * sizeof(int64_t),
                                     nn_device(c->mode)));
    NN_TRY(nn_blob_create(&n->flat, c->mode, c->dtype, 1, &total));
    char *data, *diff;
    NN_TRY(blob_mutable_cpu_data(n->flat, (void **)&data));
    int64_t at = 0;
    for (int i = 0; i < n->num_params; at += blob_count(n->params[i++])) {
        const void *init;
        NN_TRY(blob_cpu_data(n->params[i], &init));
        memcpy(data + at * elem, init, (size_t)blob_count(n->params[i]) * elem);
    }
    NN_TRY(n->m->mutable_data(n->flat, (void **)&data));
    NN_TRY(n->m->mutable_diff(n->flat, (void **)&diff));
    /* the history and counters zero-filled on the mode's side now, on the current stream,
     * before any step: a split update reads them on the side stream (sgd_update) */
    void *history;
    int64_t *steps;
    if (mixed(n))
        NN_TRY(mixed_init(n, total));
    else
        NN_TRY(n->m->mutable_data(n->history, &history));
    if (n->steps)
        NN_TRY(steps_memory(n, &steps));
    blob_status (*borrow)(blob_syncedmem *, void *, size_t) =
        c->mode == NN_GPU ? blob_syncedmem_set_gpu_data : blob_syncedmem_set_cpu_data;
    at = 0;
    for (int i = 0; i < n->num_params; at += blob_count(n->params[i++])) {
        size_t bytes = (size_t)blob_count(n->params[i]) * elem;
        NN_TRY(borrow(blob_data_mem(n->params[i]), data + at * elem, bytes));
        NN_TRY(borrow(blob_diff_mem(n->params[i]), diff + at * elem, bytes));
    }
    return BLOB_OK;
}

static blob_status hand_over(net *n, int layer);
static blob_status start_readback(net *n, blob *labels, void *stream);

/* A layer's listener (data parallel): hand its diffs over as soon as they are queued. */
static blob_status params_ready(void *ctx, nn_layer *layer)
{
    net *n = ctx;
    for (int i = 0; i < n->num_layers; i++)
        if (n->layers[i] == layer) {
            n->handed[i] = true;
            return hand_over(n, i);
        }
    return BLOB_OK;
}

/* Data parallel: register the parameters with the communicator and start from rank 0's
 * weights. The registration is a collective, which a rank whose net could not be built
 * (built is not BLOB_OK; n may be NULL) joins all the same, so that every rank fails
 * at once rather than wait for it until the deadline. */
static blob_status join_ranks(net *n, blob_comm *comm, blob_status built)
{
    bool ok = built == BLOB_OK;
    blob_comm_list *l = NULL;
    blob_status st = blob_comm_list_create(&l, comm, ok ? n->params : NULL, ok ? n->num_params : 0);
    if (!ok)
        return built;
    NN_TRY(st);
    n->comm_params = l;
    for (int i = 0; i < n->num_layers; i++)
        nn_layer_on_params_ready(n->layers[i], params_ready, n);
    /* a step counter set per bucket, zero-filled now (see update_by_bucket) */
    const int sets = blob_comm_list_num_buckets(l);
    if (n->steps && sets > 2) {
        int64_t *steps;
        blob_syncedmem_free(n->steps);
        n->steps = NULL;
        NN_TRY(blob_syncedmem_create(&n->steps,
                                     (size_t)sets * BLOB_OPTIM_STEP_WORDS * sizeof(int64_t),
                                     nn_device(n->cfg.mode)));
        NN_TRY(steps_memory(n, &steps));
    }
    return blob_comm_broadcast(l, 0);
}

/* The side stream's priority. Data parallel: above the current stream's usual levels (0;
 * 1 in the trainer and net_step), so that the GPU starts each layer's weight gradients,
 * which the all-reduce waits for, before the bottom gradient beside them, whose GEMM
 * fills the SMs the other leaves free: the buckets' sums end sooner after backward (see
 * docs/distributed.md). Else the default, below a current stream of higher priority. */
static int side_priority(const net_config *cfg)
{
    return cfg->comm && blob_comm_size(cfg->comm) > 1 ? 2 : 0;
}

blob_status net_create(net **out, const net_config *cfg)
{
    *out = NULL;
    if (!cfg->def || cfg->batch <= 0 || (cfg->graph && (cfg->mode != NN_GPU || !blob_stream_get())))
        return BLOB_EINVAL;
    if (cfg->comm && blob_comm_size(cfg->comm) > 1 && (cfg->mode != NN_GPU || cfg->graph))
        return BLOB_ENOTSUP;
    const bool half = cfg->dtype == BLOB_BFLOAT16 || cfg->dtype == BLOB_FLOAT16;
    if (cfg->loss_scale < 0 || (cfg->loss_scale > 0 && !half))
        return BLOB_EINVAL;
    if (half && (cfg->plain || cfg->comm || (cfg->graph && cfg->loss_scale > 0)))
        return BLOB_ENOTSUP;
    net *n = calloc(1, sizeof *n);
    if (!n)
        return cfg->comm ? join_ranks(NULL, cfg->comm, BLOB_ENOMEM) : BLOB_ENOMEM;
    n->cfg = *cfg;
    n->m = nn_math_of(cfg->mode);
    blob_status st = cfg->def->build(n, cfg->mode, cfg->dtype, cfg->seed);
    if (st == BLOB_OK && n->num_layers == 0)
        st = BLOB_EINVAL;
    for (int i = 1; st == BLOB_OK && i < n->num_layers; i++)
        nn_layer_fuse_relu_backward(n->layers[i], n->layers[i - 1]);
    if (st == BLOB_OK && cfg->mode == NN_GPU && !cfg->one_stream &&
        (st = blob_stream_create_with_priority(&n->side, side_priority(cfg))) == BLOB_OK)
        st = blob_event_create(&n->results_ready);
    for (int i = 0; st == BLOB_OK && i < n->num_layers; i++)
        nn_layer_set_side_stream(n->layers[i], n->side);
    if (st == BLOB_OK)
        st = flatten(n);
    if (cfg->comm)
        st = join_ranks(n, cfg->comm, st);
    if (st != BLOB_OK) {
        net_free(n);
        return st;
    }
    *out = n;
    return BLOB_OK;
}

static void drop_graphs(net *n)
{
    for (int i = 0; i < n->num_graphs; i++)
        blob_graph_free(n->graphs[i].graph);
    n->num_graphs = 0;
    n->last_graph = NULL;
}

void net_free(net *n)
{
    if (!n)
        return;
    drop_graphs(n);
    blob_comm_list_free(n->comm_params); /* before the blobs it borrows */
    for (int i = 0; i < n->num_layers; i++) {
        nn_layer_free(n->layers[i]);
        blob_free(n->tops[i]);
    }
    blob_free(n->flat); /* after the parameters that borrow its memory */
    blob_free(n->history);
    blob_free(n->master);
    blob_syncedmem_free(n->lo);
    blob_optim_state_free(n->state);
    blob_grad_scaler_free(n->scaler);
    blob_syncedmem_free(n->steps);
    for (int k = 0; k < NET_RESULTS; k++) {
        blob_syncedmem_free(n->results[k].loss);
        blob_syncedmem_free(n->results[k].prob);
    }
    blob_event_free(n->results_ready);
    blob_stream_destroy(n->side); /* every pass joined it back (see step) */
    free(n);
}

/* Shape every layer for this batch (no memory moves while rows <= cfg.batch once a
 * full batch has been seen, so captured graphs stay valid). */
static blob_status reshape(net *n, blob *x, blob *labels)
{
    const blob_dtype ldt = blob_get_dtype(labels);
    if (blob_get_dtype(x) != n->cfg.dtype ||
        (ldt != n->cfg.dtype && ldt != BLOB_INT32 && ldt != BLOB_INT64) || blob_num_axes(x) < 1 ||
        blob_shape(x)[0] > n->cfg.batch)
        return BLOB_ESHAPE;
    for (int i = 0; i < n->num_layers; i++) {
        blob *bottom[2] = {i ? n->tops[i - 1] : x, labels};
        NN_TRY(nn_layer_reshape(n->layers[i], bottom, n->tops[i]));
    }
    return BLOB_OK;
}

/* The forward pass of the first `layers` layers. */
static blob_status forward(net *n, blob *x, blob *labels, int layers)
{
    for (int i = 0; i < layers; i++) {
        blob *bottom[2] = {i ? n->tops[i - 1] : x, labels};
        NN_TRY(nn_layer_forward(n->layers[i], bottom, n->tops[i]));
    }
    return BLOB_OK;
}

/* The end of a pass (st: how it went): the current stream waits for the side stream,
 * also after a failure, so that no side work is left unjoined (a capture could not end,
 * and the memory the side work uses could be handed out again under it). */
static blob_status join_side(net *n, blob_status st)
{
    blob_status joined = n->side ? blob_stream_wait_stream(blob_stream_get(), n->side) : BLOB_OK;
    return st != BLOB_OK ? st : joined;
}

/* Data parallel (no-ops without a communicator): a step's mean all-reduce of the
 * gradients in place on flat's diff. It begins before backward; each layer's diffs are
 * handed over as soon as they are queued (params_ready: before the layer's bottom
 * gradient; else once its backward is), so that they are summed while the work below
 * runs; the end makes the stream wait, on the device, for all the sums. */
static blob_status reduce_begin(net *n)
{
    return n->comm_params ? blob_comm_reduce_begin(n->comm_params, BLOB_COMM_MEAN) : BLOB_OK;
}

static blob_status hand_over(net *n, int layer)
{
    int count = nn_layer_num_params(n->layers[layer]);
    if (!n->comm_params || !count)
        return BLOB_OK;
    return blob_comm_reduce_ready(n->comm_params, n->first_param[layer], count);
}

static blob_status reduce_end(net *n)
{
    return n->comm_params ? blob_comm_reduce_end(n->comm_params) : BLOB_OK;
}

/* The last layer's forward is done, so are the step's loss and probabilities: queue
 * their copies to the host on the side stream forked from the current one, so that the
 * host can have them while the device runs the rest of the step. A captured step marks
 * results_ready there instead, and each launch of its graph queues the copies behind
 * that mark (net_train_step). Without a side stream the copies follow the step. */
static blob_status results_ready(net *n, blob *labels)
{
    if (!n->side)
        return BLOB_OK;
    NN_TRY(blob_stream_wait_stream(n->side, blob_stream_get()));
    return n->capturing ? blob_event_record(n->results_ready, n->side)
                        : start_readback(n, labels, n->side);
}

/* The backward pass from the top, the last layer's forward with it (the layers below
 * ran forward). */
static blob_status backward(net *n, blob *x, blob *labels)
{
    for (int i = n->num_layers - 1; i >= 0; i--) {
        blob *bottom[2] = {i ? n->tops[i - 1] : x, labels};
        const bool last = i == n->num_layers - 1;
        n->handed[i] = false;
        if (i == 0 && n->split) /* every other layer's gradients are queued */
            NN_TRY(blob_stream_wait_stream(n->side, blob_stream_get()));
        NN_TRY(last ? nn_layer_forward_backward(n->layers[i], bottom, n->tops[i], i > 0)
                    : nn_layer_backward(n->layers[i], n->tops[i], i > 0, bottom));
        if (last)
            NN_TRY(results_ready(n, labels));
        if (!n->handed[i])
            NN_TRY(hand_over(n, i));
    }
    return BLOB_OK;
}

/* Caffe's SGD rule over flat's elements [at, at + count), with step counter set `set`,
 * given the device (or host) memory of flat's data w and diff dw, the history h and the
 * counters. */
static blob_optim sgd_of(const net_config *c)
{
    blob_optim opt = blob_optim_default(BLOB_OPTIM_SGD_CAFFE, c->lr);
    opt.momentum = c->momentum;
    opt.weight_decay = c->weight_decay;
    return opt;
}

static blob_status update_range(net *n, char *w, const char *dw, char *h, int64_t *steps,
                                int64_t at, int64_t count, int set)
{
    const net_config *c = &n->cfg;
    const size_t elem = blob_dtype_size(c->dtype);
    const blob_optim opt = sgd_of(c);
    void *data = w + (size_t)at * elem, *hist = h + (size_t)at * elem;
    const void *diff = dw + (size_t)at * elem;
    return n->m->optim_step(&opt, c->dtype, 1, &count, &data, &diff, &hist, NULL,
                            steps + set * BLOB_OPTIM_STEP_WORDS);
}

/* Caffe's SGDSolver: Regularize, ComputeUpdateValue, then Net::Update, over all
 * parameters: one blob_*_optim_step of Caffe's rule, or plainly four kernels. With a
 * split (two streams, fused), two: the first layer's parameters, whose gradients come
 * last and on the current stream, are updated there, and the others on the side stream
 * behind theirs, so that no wait for the other stream lies between the last gradient
 * and the update of either (the side stream waited for the current one before the first
 * layer's backward: see backward and step). */
static blob_status sgd_update(net *n)
{
    const nn_math *m = n->m;
    const net_config *c = &n->cfg;
    if (split_master(n)) { /* flat's data and the remainders from flat's gradients */
        const blob_optim opt = sgd_of(c);
        void *w, *lo, *h;
        const void *dw;
        int64_t *steps, count = blob_count(n->flat);
        NN_TRY(m->mutable_data(n->flat, &w));
        NN_TRY(m->diff(n->flat, &dw));
        NN_TRY(m->mutable_data(n->history, &h));
        NN_TRY(lo_memory(n, &lo));
        NN_TRY(steps_memory(n, &steps));
        return m->optim_step_split(&opt, 1, 1, &count, &w, &lo, &dw, &h, NULL, steps);
    }
    if (mixed(n)) { /* the master weights from flat's 16-bit gradients, flat's data rounded */
        const blob_optim opt = sgd_of(c);
        bool skipped;
        NN_TRY(blob_optim_step_mixed(&opt, &n->master, &n->flat, 1, n->state, n->scaler, &skipped));
        n->skipped += skipped;
        return BLOB_OK;
    }
    if (!c->plain) {
        char *w, *h;
        const char *dw;
        int64_t *steps;
        NN_TRY(m->mutable_data(n->flat, (void **)&w));
        NN_TRY(m->diff(n->flat, (const void **)&dw));
        NN_TRY(m->mutable_data(n->history, (void **)&h));
        NN_TRY(steps_memory(n, &steps));
        const int64_t total = blob_count(n->flat);
        if (!n->split)
            return update_range(n, w, dw, h, steps, 0, total, 0);
        NN_TRY(update_range(n, w, dw, h, steps, 0, n->split, 0));
        void *main_stream = blob_stream_get();
        blob_stream_set(n->side);
        blob_status st = update_range(n, w, dw, h, steps, n->split, total - n->split, 1);
        blob_stream_set(main_stream);
        return st;
    }
    int64_t count = blob_count(n->flat);
    const void *w;
    void *dw, *h;
    NN_TRY(m->data(n->flat, &w));
    NN_TRY(m->mutable_diff(n->flat, &dw));
    NN_TRY(m->mutable_data(n->history, &h));
    NN_TRY(m->axpy(c->dtype, count, c->weight_decay, w, dw));     /* diff += wd * data */
    NN_TRY(m->axpby(c->dtype, count, c->lr, dw, c->momentum, h)); /* h = lr * diff + mom * h */
    NN_TRY(m->copy(c->dtype, count, h, dw));                      /* diff = h */
    return blob_update(n->flat);                                  /* data -= diff */
}

/* Data parallel, fused: each bucket's parameters are updated as soon as its sums are
 * in, the last bucket first, with a step counter set of its own, while the buckets
 * before it are still being reduced (DDP's optimizer waits for them all); then the
 * step is ended. */
static blob_status update_by_bucket(net *n)
{
    blob_comm_list *l = n->comm_params;
    char *w, *h;
    const char *dw;
    int64_t *steps;
    NN_TRY(n->m->mutable_data(n->flat, (void **)&w));
    NN_TRY(n->m->diff(n->flat, (const void **)&dw));
    NN_TRY(n->m->mutable_data(n->history, (void **)&h));
    NN_TRY(steps_memory(n, &steps));
    for (int k = blob_comm_list_num_buckets(l) - 1; k >= 0; k--) {
        int64_t begin, end;
        NN_TRY(blob_comm_list_bucket(l, k, &begin, &end));
        NN_TRY(blob_comm_reduce_wait(l, k));
        NN_TRY(update_range(n, w, dw, h, steps, begin, end - begin, k));
    }
    return blob_comm_reduce_end(l);
}

/* The side stream. On the GPU the layers put work that the rest of the pass does not
 * read on n->side (nn_layer_set_side_stream): the mean loss in forward, each weight and
 * bias gradient beside the gradient of the layer's bottom in backward; the net puts the
 * copies of the loss and probabilities to the host there (results_ready). Each such piece
 * of work is forked from the current ("main") stream when what it reads is complete on
 * it, and the main stream joins the side stream once, after backward, before the update,
 * or with a split update (sgd_update) after it, with part of the update on the side.
 * All device pointers are taken on the main stream, so every blob keeps it as its
 * stream, the library's accessors never order anything on the side stream, and the
 * ordering below is all there is. Happens-before, per step and across steps:
 *   - the side work of layer i reads its top diff dy (and InnerProduct's dz, after its
 *     own ReLU backward in place) and its bottom data x, all written on main before the
 *     fork; main never writes them again in this step (the bottom gradient writes
 *     the bottom's diff, the top diff of a fused InnerProduct below, whose ReLU mask it
 *     reads: not a side-work input of layer i); the next
 *     step's forward and backward, which do write them, come after the join;
 *   - the side work writes W's and b's diffs (and the loss, and a Convolution's columns
 *     when they are not fresh): nothing on main reads them before the join; the update
 *     comes after it, or reads them on the side stream (the split update);
 *   - the copies to the host read the loss and the probabilities, forked from main after
 *     the last layer's forward and backward (the loss is on the side stream already):
 *     only the next step writes them again, after this step's join, or under graphs
 *     after main has waited for the copies that follow the launch (net_train_step);
 *   - the split update (sgd_update): the side stream waits for main before the first
 *     layer's backward, when every other layer's gradients, and every read of their
 *     weights (by the bottom gradients), are queued; it then updates those layers'
 *     parameters and momentum, which main does not touch before the join, while main
 *     runs the first layer's backward and update, which touch that layer's only;
 *   - the side stream's own order puts layer i's work before layer i-1's and step s's
 *     before step s+1's;
 *   - graph replays: the fork and join are captured as edges, so a replay orders the same
 *     way, and a replay begins after the previous one (or eager step) on the main stream
 *     has ended, joins included;
 *   - data parallel: the params_ready listener hands the diffs over with the side
 *     stream current, so the communicator's sums wait for the side work; the update of
 *     each bucket waits on main for its sums (update_by_bucket), and reduce_end makes
 *     main wait for them all, before the next step writes the diffs again.
 * Memory: the side work touches only blocks of the net (parameters, tops, the layers'
 * buffers), never the caller's x and labels: the first layer computes no bottom
 * gradient, so its parameter gradients stay on main. These blocks live as long as the
 * net and are used through main only; they go back to the allocator (net_free, or a
 * reshape that grows them) only on main, after a join that follows all the side work
 * queued before it, so the allocator's record of main covers the side work too. */
static blob_status step(net *n, blob *x, blob *labels)
{
    if (n->scaler)
        nn_softmax_loss_set_grad_scale(n->layers[n->num_layers - 1],
                                       blob_grad_scaler_scale(n->scaler));
    blob_status st = forward(n, x, labels, n->num_layers - 1);
    if (st == BLOB_OK)
        st = reduce_begin(n);
    if (st == BLOB_OK)
        st = backward(n, x, labels);
    if (n->split) /* the update on both streams, then the join */
        return join_side(n, st == BLOB_OK ? sgd_update(n) : st);
    NN_TRY(join_side(n, st));
    if (n->comm_params && !n->cfg.plain && blob_comm_list_num_buckets(n->comm_params) > 0)
        return update_by_bucket(n);
    NN_TRY(reduce_end(n));
    return sgd_update(n);
}

/* The graph of a step on (x, labels), whose device data are at dx and dlabels, captured
 * now if the net is warm and there is room; NULL means run eagerly. */
static blob_status graph_for(net *n, blob *x, blob *labels, const void *dx, const void *dlabels,
                             blob_graph **out)
{
    int64_t rows = blob_shape(x)[0];
    *out = NULL;
    for (int i = 0; i < n->num_graphs; i++)
        if (n->graphs[i].x == dx && n->graphs[i].labels == dlabels && n->graphs[i].rows == rows) {
            *out = n->graphs[i].graph;
            return BLOB_OK;
        }
    if (!n->warm || n->num_graphs == NET_MAX_GRAPHS)
        return BLOB_OK;
    void *stream = blob_stream_get();
    NN_TRY(blob_graph_begin(stream));
    n->capturing = true;
    blob_status st = step(n, x, labels);
    n->capturing = false;
    blob_graph *g = NULL;
    blob_status end = blob_graph_end(stream, &g); /* ends the capture either way */
    if (st != BLOB_OK || end != BLOB_OK) {
        blob_graph_free(g);
        return st != BLOB_OK ? st : end;
    }
    n->graphs[n->num_graphs].x = dx;
    n->graphs[n->num_graphs].labels = dlabels;
    n->graphs[n->num_graphs].rows = rows;
    n->graphs[n->num_graphs++].graph = g;
    *out = g;
    return BLOB_OK;
}

/* The update writes the parameters through flat, and a launched graph writes device
 * memory without any accessor: claim the device side of what a caller may read (heads
 * only, nothing moves), so that a later host read copies it back. */
static blob_status claim_device_side(net *n, bool outputs)
{
    void *p;
    for (int i = 0; i < n->num_params; i++) {
        NN_TRY(blob_mutable_gpu_data(n->params[i], &p));
        NN_TRY(blob_mutable_gpu_diff(n->params[i], &p));
    }
    if (!outputs)
        return BLOB_OK;
    for (int i = 0; i < n->num_layers; i++)
        NN_TRY(blob_mutable_gpu_data(n->tops[i], &p));
    return blob_mutable_gpu_data(prob(n), &p);
}

/* Queue the copy of `from`'s data to the host side of `to` on stream, which the caller
 * ordered after the work on it: to's device side borrows from's. */
static blob_status pull(blob_syncedmem *to, blob *from, void *stream)
{
    const void *p;
    NN_TRY(blob_gpu_data(from, &p));
    NN_TRY(blob_syncedmem_set_gpu_data(to, (void *)p, blob_syncedmem_size(to)));
    return blob_syncedmem_async_cpu_pull(to, stream);
}

/* Copy `from`'s data to `to` on the host. */
static blob_status copy_on_host(blob_syncedmem *to, blob *from)
{
    const void *p;
    void *q;
    NN_TRY(blob_cpu_data(from, &p));
    NN_TRY(blob_syncedmem_mutable_cpu_data(to, &q));
    memcpy(q, p, blob_syncedmem_size(to));
    return BLOB_OK;
}

/* Keep the loss and probabilities of this call in the next result: on the GPU, copies
 * to the host queued on stream (nothing waits for them here). */
static blob_status start_readback(net *n, blob *labels, void *stream)
{
    const int k = (n->last_result + 1) % NET_RESULTS;
    result *r = &n->results[k];
    const size_t elem = blob_dtype_size(n->cfg.dtype);
    const size_t prob_bytes = n->cfg.loss_only ? 0 : (size_t)blob_count(prob(n)) * elem;
    const int device = nn_device(n->cfg.mode);
    r->valid = false;
    if (r->prob && blob_syncedmem_size(r->prob) != prob_bytes) {
        blob_syncedmem_free(r->prob);
        r->prob = NULL;
    }
    if (!r->prob && prob_bytes)
        NN_TRY(blob_syncedmem_create(&r->prob, prob_bytes, device));
    if (!r->loss)
        NN_TRY(
            blob_syncedmem_create(&r->loss, blob_dtype_size(blob_get_dtype(loss_top(n))), device));
    if (n->cfg.mode == NN_GPU) {
        NN_TRY(pull(r->loss, loss_top(n), stream));
        if (prob_bytes)
            NN_TRY(pull(r->prob, prob(n), stream));
    } else {
        NN_TRY(copy_on_host(r->loss, loss_top(n)));
        if (prob_bytes)
            NN_TRY(copy_on_host(r->prob, prob(n)));
    }
    r->labels = labels;
    r->rows = blob_shape(prob(n))[0];
    r->classes = blob_shape(prob(n))[1];
    r->valid = true;
    n->last_result = k;
    return BLOB_OK;
}

blob_status net_train_step(net *n, blob *x, blob *labels)
{
    NN_TRY(reshape(n, x, labels));
    bool full = blob_shape(x)[0] == n->cfg.batch;
    blob_graph *g = NULL;
    if (n->cfg.graph && full) {
        const void *dx, *dlabels;
        NN_TRY(blob_gpu_data(x, &dx));
        NN_TRY(blob_gpu_data(labels, &dlabels));
        NN_TRY(graph_for(n, x, labels, dx, dlabels, &g));
    }
    n->last_graph = g;
    void *stream = blob_stream_get();
    if (g)
        NN_TRY(blob_graph_launch(g, stream));
    else
        NN_TRY(step(n, x, labels));
    /* a smaller batch leaves blocks that a full one would still grow */
    n->warm |= full;
    if (n->cfg.mode == NN_GPU)
        NN_TRY(claim_device_side(n, g != NULL));
    if (!n->side)
        return start_readback(n, labels, stream);
    if (!g)
        return BLOB_OK; /* the step queued them (results_ready) */
    /* behind the graph's mark, then the stream waits for the copies: only the next step
     * writes what they read */
    NN_TRY(blob_stream_wait_event(n->side, n->results_ready));
    NN_TRY(start_readback(n, labels, n->side));
    return blob_stream_wait_stream(stream, n->side);
}

blob_status net_forward(net *n, blob *x, blob *labels)
{
    NN_TRY(reshape(n, x, labels));
    NN_TRY(join_side(n, forward(n, x, labels, n->num_layers)));
    return start_readback(n, labels, blob_stream_get());
}

void net_set_lr(net *n, double lr)
{
    if (lr != n->cfg.lr)
        drop_graphs(n);
    n->cfg.lr = lr;
}

const blob_graph *net_graph(const net *n) { return n->last_graph; }

/* The result of the call `ago` calls back, or NULL. */
static result *result_of(net *n, int ago)
{
    if (ago < 0 || ago >= NET_RESULTS)
        return NULL;
    result *r = &n->results[(n->last_result + NET_RESULTS - ago) % NET_RESULTS];
    return r->valid ? r : NULL;
}

static blob_status loss_of(net *n, const result *r, double *loss)
{
    const void *l;
    NN_TRY(blob_syncedmem_cpu_data(r->loss, &l));
    *loss = nn_load(l, blob_get_dtype(loss_top(n)), 0);
    return BLOB_OK;
}

blob_status net_loss(net *n, double *loss)
{
    const result *r = result_of(n, 0);
    return r ? loss_of(n, r, loss) : BLOB_EINVAL;
}

blob_status net_output_ago(net *n, int ago, double *loss, int64_t *correct)
{
    const result *r = result_of(n, ago);
    if (!r)
        return BLOB_EINVAL;
    if (n->cfg.loss_only)
        return BLOB_ENOTSUP;
    blob_dtype dt = n->cfg.dtype;
    const int64_t classes = r->classes;
    const void *p, *y;
    NN_TRY(loss_of(n, r, loss));
    *correct = 0;
    if (!r->rows)
        return BLOB_OK;
    NN_TRY(blob_syncedmem_cpu_data(r->prob, &p));
    NN_TRY(blob_cpu_data(r->labels, &y));
    for (int64_t row = 0; row < r->rows; row++) {
        int64_t best = 0;
        for (int64_t c = 1; c < classes; c++)
            if (nn_load(p, dt, row * classes + c) > nn_load(p, dt, row * classes + best))
                best = c;
        *correct += best == (int64_t)nn_load(y, blob_get_dtype(r->labels), row);
    }
    return BLOB_OK;
}

blob_status net_output(net *n, double *loss, int64_t *correct)
{
    return net_output_ago(n, 0, loss, correct);
}

int net_num_params(const net *n) { return n->num_params; }
blob_comm_list *net_comm_list(const net *n) { return n->comm_params; }
blob *net_param(const net *n, int i) { return n->params[i]; }
const char *net_param_name(const net *n, int i) { return n->names[i]; }

blob_status net_fake_batch(const net_def *def, nn_mode mode, blob_dtype dtype, int64_t rows,
                           int classes, int stride, int offset, uint64_t *rng, blob **x, blob **y)
{
    int64_t xshape[4] = {rows};
    for (int i = 0; i < def->input_axes; i++)
        xshape[i + 1] = def->input_shape[i];
    const blob_dtype ldt = dtype == BLOB_BFLOAT16 || dtype == BLOB_FLOAT16 ? BLOB_INT32 : dtype;
    void *labels;
    const void *p;
    *y = NULL;
    blob_status st = nn_blob_create(x, mode, dtype, def->input_axes + 1, xshape);
    if (st == BLOB_OK && (st = nn_blob_create(y, mode, ldt, 1, &rows)) == BLOB_OK &&
        (st = nn_fill_uniform(*x, 0, 1, rng)) == BLOB_OK &&
        (st = blob_mutable_cpu_data(*y, &labels)) == BLOB_OK) {
        for (int64_t i = 0; i < rows; i++)
            nn_store(labels, ldt, i,
                     stride ? (double)((stride * i + offset) % classes)
                            : (double)(int)(nn_uniform(rng) * classes));
        if (mode == NN_GPU && (st = blob_gpu_data(*x, &p)) == BLOB_OK)
            st = blob_gpu_data(*y, &p);
    }
    if (st != BLOB_OK) {
        blob_free(*x);
        blob_free(*y);
        *x = *y = NULL;
    }
    return st;
}

int64_t net_skipped_steps(const net *n) { return n->skipped; }

#include "net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAYERS 32
#define MAX_PARAMS (MAX_LAYERS * 2)
#define MAX_DEFS 16

struct net {
    net_config cfg;
    const nn_math *m;
    int num_layers;
    nn_layer *layers[MAX_LAYERS];
    char layer_names[MAX_LAYERS][16];
    blob *tops[MAX_LAYERS];       /* tops[i] is written by layers[i]; the last is the loss */
    int num_params;
    int first_param[MAX_LAYERS];  /* of layers[i] in params */
    blob *params[MAX_PARAMS];     /* the layers' blobs, viewing flat's memory */
    char names[MAX_PARAMS][24];
    blob *flat;                   /* every parameter (data) and its gradient (diff) */
    blob *history;                /* momentum, one per element of flat */
    blob *labels;                 /* of the last forward, for net_output */
    blob_comm_list *comm_params;  /* data parallel: params registered with cfg.comm */
    bool warm;                    /* a full-batch step ran, so all memory exists */
    int num_graphs;
    blob_graph *last_graph;       /* of the last training step, NULL if eager */
    struct { /* a graph bakes in device pointers: keyed by them, not by the blobs */
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
    if (n->num_layers == MAX_LAYERS ||
        n->num_params + nn_layer_num_params(layer) > MAX_PARAMS ||
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
    return nn_blob_create(&n->tops[i], n->cfg.mode, n->cfg.dtype, 1, &zero);
}

/* Lay all parameters out in one blob, as Caffe's multi-GPU solver does: each one's data
 * and diff become views of a slice of flat's (borrowed memory on the mode's side), so
 * the SGD update is four kernels for the whole net. */
static blob_status flatten(net *n)
{
    const net_config *c = &n->cfg;
    size_t elem = blob_dtype_size(c->dtype);
    int64_t total = 0;
    for (int i = 0; i < n->num_params; i++)
        total += blob_count(n->params[i]);
    /* the history is zero-filled on first access, as it starts */
    NN_TRY(nn_blob_create(&n->history, c->mode, c->dtype, 1, &total));
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

/* Data parallel: register the parameters with the communicator and start from rank 0's
 * weights. The registration is a collective, which a rank whose net could not be built
 * (built is not BLOB_OK; n may be NULL) joins all the same, so that every rank fails
 * at once rather than wait for it until the deadline. */
static blob_status join_ranks(net *n, blob_comm *comm, blob_status built)
{
    bool ok = built == BLOB_OK;
    blob_comm_list *l = NULL;
    blob_status st = blob_comm_list_create(&l, comm, ok ? n->params : NULL,
                                           ok ? n->num_params : 0);
    if (!ok)
        return built;
    NN_TRY(st);
    n->comm_params = l;
    return blob_comm_broadcast(l, 0);
}

blob_status net_create(net **out, const net_config *cfg)
{
    *out = NULL;
    if (!cfg->def || cfg->batch <= 0 ||
        (cfg->graph && (cfg->mode != NN_GPU || !blob_get_stream())))
        return BLOB_EINVAL;
    if (cfg->comm && blob_comm_size(cfg->comm) > 1 && (cfg->mode != NN_GPU || cfg->graph))
        return BLOB_ENOTSUP;
    net *n = calloc(1, sizeof *n);
    if (!n)
        return cfg->comm ? join_ranks(NULL, cfg->comm, BLOB_ENOMEM) : BLOB_ENOMEM;
    n->cfg = *cfg;
    n->m = nn_math_of(cfg->mode);
    blob_status st = cfg->def->build(n, cfg->mode, cfg->dtype, cfg->seed);
    if (st == BLOB_OK && n->num_layers == 0)
        st = BLOB_EINVAL;
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
    free(n);
}

/* Shape every layer for this batch (no memory moves while rows <= cfg.batch once a
 * full batch has been seen, so captured graphs stay valid). */
static blob_status reshape(net *n, blob *x, blob *labels)
{
    if (blob_get_dtype(x) != n->cfg.dtype || blob_get_dtype(labels) != n->cfg.dtype ||
        blob_num_axes(x) < 1 || blob_shape(x)[0] > n->cfg.batch)
        return BLOB_ESHAPE;
    for (int i = 0; i < n->num_layers; i++) {
        blob *bottom[2] = {i ? n->tops[i - 1] : x, labels};
        NN_TRY(nn_layer_reshape(n->layers[i], bottom, n->tops[i]));
    }
    n->labels = labels;
    return BLOB_OK;
}

static blob_status forward(net *n, blob *x, blob *labels)
{
    for (int i = 0; i < n->num_layers; i++) {
        blob *bottom[2] = {i ? n->tops[i - 1] : x, labels};
        NN_TRY(nn_layer_forward(n->layers[i], bottom, n->tops[i]));
    }
    return BLOB_OK;
}

/* Data parallel (no-ops without a communicator): a step's mean all-reduce of the
 * gradients in place on flat's diff. It begins before backward; each layer's diffs are
 * handed over once its backward is queued, so that they are summed while the layers
 * below run theirs; the end makes the stream wait, on the device, for all the sums. */
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

static blob_status backward(net *n, blob *x, blob *labels)
{
    for (int i = n->num_layers - 1; i >= 0; i--) {
        blob *bottom[2] = {i ? n->tops[i - 1] : x, labels};
        NN_TRY(nn_layer_backward(n->layers[i], n->tops[i], i > 0, bottom));
        NN_TRY(hand_over(n, i));
    }
    return BLOB_OK;
}

/* Caffe's SGDSolver: Regularize, ComputeUpdateValue, then Net::Update, over all
 * parameters at once. */
static blob_status sgd_update(net *n)
{
    const nn_math *m = n->m;
    const net_config *c = &n->cfg;
    int64_t count = blob_count(n->flat);
    const void *w;
    void *dw, *h;
    NN_TRY(m->data(n->flat, &w));
    NN_TRY(m->mutable_diff(n->flat, &dw));
    NN_TRY(m->mutable_data(n->history, &h));
    NN_TRY(m->axpy(c->dtype, count, c->weight_decay, w, dw));      /* diff += wd * data */
    NN_TRY(m->axpby(c->dtype, count, c->lr, dw, c->momentum, h));  /* h = lr * diff + mom * h */
    NN_TRY(m->copy(c->dtype, count, h, dw));                       /* diff = h */
    return blob_update(n->flat);                                   /* data -= diff */
}

static blob_status step(net *n, blob *x, blob *labels)
{
    NN_TRY(forward(n, x, labels));
    NN_TRY(reduce_begin(n));
    NN_TRY(backward(n, x, labels));
    NN_TRY(reduce_end(n));
    return sgd_update(n);
}

/* The graph of a step on (x, labels), whose device data are at dx and dlabels, captured
 * now if the net is warm and there is room; NULL means run eagerly. */
static blob_status graph_for(net *n, blob *x, blob *labels, const void *dx,
                             const void *dlabels, blob_graph **out)
{
    int64_t rows = blob_shape(x)[0];
    *out = NULL;
    for (int i = 0; i < n->num_graphs; i++)
        if (n->graphs[i].x == dx && n->graphs[i].labels == dlabels &&
            n->graphs[i].rows == rows) {
            *out = n->graphs[i].graph;
            return BLOB_OK;
        }
    if (!n->warm || n->num_graphs == NET_MAX_GRAPHS)
        return BLOB_OK;
    void *stream = blob_get_stream();
    NN_TRY(blob_graph_begin(stream));
    blob_status st = step(n, x, labels);
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

/* Queue the copy of the loss to the host behind the step (the probabilities are copied
 * only if net_output asks for them). */
static blob_status start_readback(net *n)
{
    if (n->cfg.mode != NN_GPU)
        return BLOB_OK;
    return blob_syncedmem_async_cpu_pull(blob_data_mem(loss_top(n)), blob_get_stream());
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
    if (g)
        NN_TRY(blob_graph_launch(g, blob_get_stream()));
    else
        NN_TRY(step(n, x, labels));
    /* a smaller batch leaves blocks that a full one would still grow */
    n->warm |= full;
    if (n->cfg.mode == NN_GPU)
        NN_TRY(claim_device_side(n, g != NULL));
    return start_readback(n);
}

blob_status net_forward(net *n, blob *x, blob *labels)
{
    NN_TRY(reshape(n, x, labels));
    NN_TRY(forward(n, x, labels));
    return start_readback(n);
}

void net_set_lr(net *n, double lr)
{
    if (lr != n->cfg.lr)
        drop_graphs(n);
    n->cfg.lr = lr;
}

const blob_graph *net_graph(const net *n) { return n->last_graph; }

blob_status net_loss(net *n, double *loss)
{
    const void *l;
    NN_TRY(blob_cpu_data(loss_top(n), &l));
    *loss = nn_load(l, n->cfg.dtype, 0);
    return BLOB_OK;
}

blob_status net_output(net *n, double *loss, int64_t *correct)
{
    blob_dtype dt = n->cfg.dtype;
    const void *p, *y;
    NN_TRY(net_loss(n, loss));
    NN_TRY(blob_cpu_data(prob(n), &p));
    NN_TRY(blob_cpu_data(n->labels, &y));
    int64_t rows = blob_shape(prob(n))[0], classes = blob_shape(prob(n))[1];
    *correct = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t best = 0;
        for (int64_t c = 1; c < classes; c++)
            if (nn_load(p, dt, r * classes + c) > nn_load(p, dt, r * classes + best))
                best = c;
        *correct += best == (int64_t)nn_load(y, dt, r);
    }
    return BLOB_OK;
}

int net_num_params(const net *n) { return n->num_params; }
blob *net_param(const net *n, int i) { return n->params[i]; }
const char *net_param_name(const net *n, int i) { return n->names[i]; }

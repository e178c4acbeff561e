/*
 * net.h - a multilayer perceptron on the layers of layers.h, trained by SGD with
 * momentum and weight decay the way Caffe's SGDSolver does it.
 *
 *   int64_t dims[] = {784, 256, 128, 10};
 *   net_config cfg = {.mode = NN_GPU, .dtype = BLOB_FLOAT32, .num_dims = 4, .dims = dims,
 *                     .batch = 64, .seed = 1, .lr = 0.01, .momentum = 0.9,
 *                     .weight_decay = 5e-4};
 *   net *n;
 *   net_create(&n, &cfg);
 *   net_train_step(n, x, labels);            // queued on the GPU ...
 *   ...                                      // ... while the host prepares the next batch
 *   net_output(n, &loss, &correct);          // waits for this step's results
 *   net_free(n);
 *
 * The stack is InnerProduct, ReLU, ..., ReLU, InnerProduct, SoftmaxWithLoss with the
 * widths in dims. x is rows x dims[0] and labels holds rows class indices; both have the
 * net's dtype and live on the mode's device, and rows may change from call to call up
 * to cfg.batch. In NN_GPU mode all work runs on the calling thread's current stream.
 */
#ifndef MLP_NET_H
#define MLP_NET_H

#include "layers.h"

#define NET_MAX_DIMS 8
/* Input buffer pairs that get a graph of their own (see graph in net_config). */
#define NET_MAX_GRAPHS 4

typedef struct {
    nn_mode mode;
    blob_dtype dtype;
    int num_dims;          /* 2 .. NET_MAX_DIMS widths, input first */
    const int64_t *dims;
    int64_t batch;         /* the largest number of rows per call */
    uint64_t seed;         /* weight initialisation */
    double lr, momentum, weight_decay;
    /* NN_GPU only: run training steps of cfg.batch rows as CUDA graphs. The first step
     * of cfg.batch rows runs eagerly and creates all memory; after it, the first such
     * step on each new pair of device buffers (where the data of x and of labels lie) is
     * captured on the current stream (which must not be the default one), and every
     * later step on that pair launches its graph. Pairs beyond NET_MAX_GRAPHS, and
     * smaller batches, run eagerly. */
    bool graph;
} net_config;

typedef struct net net;

/* Build the layers, fill the weights from cfg->seed and zero the momentum history.
 * *out is NULL on failure. Errors: BLOB_EINVAL for a bad config, libblob errors. */
blob_status net_create(net **out, const net_config *cfg);

/* NULL is a no-op. */
void net_free(net *n);

/* One SGD step on a batch: forward, backward, then for every parameter
 *   diff += weight_decay * data; history = lr * diff + momentum * history;
 *   diff = history; blob_update (data -= diff).
 * On the GPU the device sides of x and labels are brought up to date first (waiting for
 * an asynchronous push in flight), and the call returns once the step is queued, with
 * the copy of the loss back to the host queued after it (net_output copies the
 * probabilities when it needs them).
 * Errors: BLOB_ESHAPE (x or labels do not fit the net: their shape, or a dtype other
 * than the net's), libblob errors. */
blob_status net_train_step(net *n, blob *x, blob *labels);

/* Forward only (evaluation), queued and read back like net_train_step. */
blob_status net_forward(net *n, blob *x, blob *labels);

/* Use a new learning rate from the next step on; captured graphs, which hold the old
 * one, are dropped and captured again. Call it between steps (after net_output). */
void net_set_lr(net *n, double lr);

/* Mean loss of the last step or forward; waits for it. */
blob_status net_loss(net *n, double *loss);

/* Mean loss and number of rows whose most probable class is the label, of the last
 * step or forward; waits for them. */
blob_status net_output(net *n, double *loss, int64_t *correct);

/* The learnable parameters in layer order (weights, then bias, of each InnerProduct),
 * with names "ip1.weights", "ip1.bias", ... Their data and diffs are views of one flat
 * blob holding all of them, which the update works on; read them with the blob
 * accessors as usual. */
int net_num_params(const net *n);
blob *net_param(const net *n, int i);
const char *net_param_name(const net *n, int i);

#endif

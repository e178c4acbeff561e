/*
 * net.h - a net: a chain of layers from layers.h, named and built by a net definition
 * (one file per net in this directory), trained by SGD with momentum and weight decay
 * the way Caffe's SGDSolver does it.
 *
 *   net_config cfg = {.def = net_def_find("mlp"), .mode = NN_GPU, .dtype = BLOB_FLOAT32,
 *                     .batch = 64, .seed = 1, .lr = 0.01, .momentum = 0.9,
 *                     .weight_decay = 5e-4};
 *   net *n;
 *   net_create(&n, &cfg);
 *   net_train_step(n, x, labels);            // queued on the GPU ...
 *   ...                                      // ... while the host prepares the next batch
 *   net_output(n, &loss, &correct);          // waits for this step's results
 *   net_free(n);
 *
 * The results of the last NET_RESULTS calls are kept, so that a trainer can queue step
 * s + 1 before it reads step s's (net_output_ago(n, 1, ...)): the GPU never waits for the
 * host in between.
 *
 * Each layer reads the previous layer's top (the first reads x) and the last is a
 * SoftmaxWithLoss that also reads the labels. x is rows x (the net's input shape) and
 * labels holds rows class indices (int32, int64, or for float32 and float64 nets of
 * the net's dtype); x has the net's dtype; both live on the mode's device, and rows may
 * change from call to call up to cfg.batch. In NN_GPU mode all work runs on the calling
 * thread's current stream.
 *
 * Data parallel: give every rank's net the same config with that rank's communicator
 * (cfg.comm, see blob/comm.h) and feed each rank its own rows of every global batch;
 * each step then uses the mean of all ranks' gradients, so N ranks of batch B train as
 * one device with batch N x B.
 */
#ifndef NN_NET_H
#define NN_NET_H

#include "layers.h"

/* Input buffer pairs that get a graph of their own (see graph in net_config). */
#define NET_MAX_GRAPHS 4

/* Calls whose results can be read (net_output_ago). */
#define NET_RESULTS 2

typedef struct net net;

/* A net definition: its name, what it is, the input it takes and its layers. Defined
 * one per file with NET_DEFINE, which registers it at start-up. */
typedef struct {
    const char *name;  /* for --net, e.g. "mlp" */
    const char *title; /* for banners and plots, e.g. "MLP 784-256-128-10" */
    int input_axes;    /* the shape of one input sample */
    int64_t input_shape[3];
    /* Add the layers in order with net_add, the loss layer last; weights from seed. */
    blob_status (*build)(net *n, nn_mode mode, blob_dtype dtype, uint64_t seed);
    /* Training defaults of the trainer for this net (batch 0: the trainer's default). */
    int epochs, lr_step;
    double lr;
    int64_t batch;
} net_def;

#define NET_DEFINE(def) \
    static void __attribute__((constructor)) net_define_##def(void) { net_register(&def); }
void net_register(const net_def *def);

/* The registered definition called name, or NULL; the i-th one, or NULL past the end. */
const net_def *net_def_find(const char *name);
const net_def *net_def_at(int i);

/* For build: append a layer called name (its parameters become name.weights and
 * name.bias). The net owns the layer from here on, also when this fails. */
blob_status net_add(net *n, const char *name, nn_layer *layer);

/* For build: append an InnerProduct called name (num_input -> num_output, weights from
 * seed) and, unless relu_name is NULL, the ReLU after it: one layer of the fused kind
 * (nn_ip_param.relu), or with cfg.plain a plain InnerProduct and a ReLU layer called
 * relu_name. */
blob_status net_add_ip(net *n, const char *name, const char *relu_name, int64_t num_input,
                       int64_t num_output, uint64_t seed);

typedef struct {
    const net_def *def;
    nn_mode mode;
    blob_dtype dtype;
    int64_t batch; /* the largest number of rows per call */
    uint64_t seed; /* weight initialisation */
    double lr, momentum, weight_decay;
    /* NN_GPU only: run training steps of cfg.batch rows as CUDA graphs. The first step
     * of cfg.batch rows runs eagerly and creates all memory; after it, the first such
     * step on each new pair of device buffers (where the data of x and of labels lie) is
     * captured on the current stream (which must not be the default one), and every
     * later step on that pair launches its graph. Pairs beyond NET_MAX_GRAPHS, and
     * smaller batches, run eagerly. */
    bool graph;
    /* Caffe's layers and update instead of the fused ones: InnerProducts of the plain kind
     * with ReLU layers of their own (net_add_ip), and the update as four kernels (axpy,
     * axpby, copy, blob_update) instead of blob_*_optim_step of BLOB_OPTIM_SGD_CAFFE
     * (one kernel; two with the second stream, one per stream).
     * Both compute the same values (up to rounding). */
    bool plain;
    /* NN_GPU: queue all of a step on the current stream. By default the net has a second
     * stream of its own, of the default priority (above it in data parallel, so that the
     * gradients reach the all-reduce sooner), for the work that the rest of a pass
     * does not read (each layer's weight and bias gradients beside its bottom's gradient,
     * the mean loss beside backward; see nn_layer_set_side_stream; and the update of all
     * but the first layer's parameters), forked from the current stream and joined back
     * at the end of the step, so that the chain of kernels each step waits for is
     * shorter; under graphs the two become parallel branches. A current stream of a
     * higher priority (blob_stream_create_with_priority) has the GPU start the chain's
     * kernels first. Both compute the same values. */
    bool one_stream;
    /* Copy only the loss back to the host after each call, not the probabilities: then
     * net_output and net_output_ago refuse (BLOB_ENOTSUP) and net_loss alone reads. */
    bool loss_only;
    /* Data parallel: this rank's communicator (borrowed: it must outlive the net), or
     * NULL for one device. net_create registers the parameters with it (a collective:
     * every rank creates its net from the same config) and starts every rank from rank
     * 0's weights. Each training step then begins a mean all-reduce of the gradients,
     * hands each layer's over as soon as they are queued (before the layer's bottom
     * gradient, see nn_layer_on_params_ready; backward runs from the last layer down, so
     * the sums of the late layers overlap the backward of the early ones), and updates
     * each bucket's parameters as soon as its sums are in (blob_comm_reduce_wait), while
     * the buckets before it are still being reduced: the host never waits for them.
     * Every rank must call net_train_step equally often (net_forward and the readers of
     * the output are local). A 1-rank communicator changes nothing. Several ranks need
     * NN_GPU with the communicator's GPU current, and no graph (BLOB_ENOTSUP): the
     * communicator watches each collective with a deadline from the host, and a replayed
     * graph would run its collectives unwatched, so a dead peer would hang it.
     * Failures follow the fast contract of blob/comm.h: another rank's failure is
     * returned by a later step (BLOB_ETIMEDOUT or BLOB_ECOMM, within the communicator's
     * deadline) and nothing hangs, but the update of the step that failed may have used
     * partial sums: after a failed step the weights are not to be trusted (free the
     * net). */
    blob_comm *comm;
    /* bfloat16 and float16 dtypes (mixed precision): activations, weights and gradients
     * are 16-bit blobs, the GEMMs run on them with float32 accumulation, and the loss is
     * float32; float32 master weights and momentum are updated by one
     * blob_optim_step_mixed, which writes the 16-bit working copy (12 bytes per parameter
     * with the gradient). bfloat16 without loss_scale keeps no float32 master array: each
     * master weight is the working copy plus a 16-bit remainder, updated by one
     * blob_*_optim_step_split (10 bytes per parameter). loss_scale > 0 scales
     * the loss gradient dynamically from that scale (blob_grad_scaler, for float16):
     * steps whose gradients overflow are skipped (net_skipped_steps). Mixed precision
     * takes neither plain nor comm, nor graph with loss_scale (BLOB_ENOTSUP). */
    double loss_scale;
} net_config;

/* Build the layers, fill the weights from cfg->seed and zero the momentum history; fuse
 * the backward of each InnerProduct's ReLU into the InnerProduct above it
 * (nn_layer_fuse_relu_backward).
 * *out is NULL on failure. Errors: BLOB_EINVAL for a bad config, BLOB_ENOTSUP for
 * several ranks with NN_CPU or graphs, libblob errors; with a communicator also the
 * failure of another rank to build its net, and BLOB_ESHAPE for ranks whose nets
 * differ (on every rank). */
blob_status net_create(net **out, const net_config *cfg);

/* NULL is a no-op. */
void net_free(net *n);

/* One SGD step on a batch: forward, backward, then for every parameter
 *   history = lr * (diff + weight_decay * data) + momentum * history; data -= history
 * (plainly also diff = history). On the GPU the device sides of x and labels are
 * brought up to date first (the device waits for an asynchronous push in flight), and
 * the call returns once the step is queued, with the copies of the loss and
 * probabilities (cfg.loss_only: the loss) to the host queued after it: nothing on the
 * host waits for the device.
 * Errors: BLOB_ESHAPE (x or labels do not fit the net: their shape, or a dtype other
 * than the net's), libblob errors, and with a communicator its errors (BLOB_ETIMEDOUT,
 * BLOB_ECOMM: a rank failed). */
blob_status net_train_step(net *n, blob *x, blob *labels);

/* Forward only (evaluation), queued and read back like net_train_step. */
blob_status net_forward(net *n, blob *x, blob *labels);

/* Use a new learning rate from the next step on; captured graphs, which hold the old
 * one, are dropped and captured again. Call it between steps (after net_output). */
void net_set_lr(net *n, double lr);

/* The CUDA graph that ran the last training step, or NULL if it ran eagerly. It stays
 * the net's (valid until net_set_lr or net_free). */
const blob_graph *net_graph(const net *n);

/* Mean loss of the last step or forward; waits for it (on the GPU, for its copy to the
 * host only). Errors: BLOB_EINVAL before the first call. */
blob_status net_loss(net *n, double *loss);

/* Mean loss and number of rows whose most probable class is the label, of the last
 * step or forward; waits for them. The labels are read on the host then, so their blob
 * must still hold that call's. Errors: BLOB_EINVAL before the first call. */
blob_status net_output(net *n, double *loss, int64_t *correct);

/* The same for the call `ago` calls back: 0 is the last, up to NET_RESULTS - 1.
 * Errors: BLOB_EINVAL for an ago out of range or beyond the calls made, BLOB_ENOTSUP
 * with cfg.loss_only. */
blob_status net_output_ago(net *n, int ago, double *loss, int64_t *correct);

/* A fake batch for a net of def in dtype on mode's device (already there on the GPU), as
 * the trainer feeds one: x of rows inputs of dtype uniform in [0, 1) from *rng, y of rows
 * labels (of dtype, or int32 for the 16-bit floats), (stride x i + offset) mod classes,
 * or drawn from *rng after x when stride is 0. On failure both are NULL. */
blob_status net_fake_batch(const net_def *def, nn_mode mode, blob_dtype dtype, int64_t rows,
                           int classes, int stride, int offset, uint64_t *rng, blob **x, blob **y);

/* The learnable parameters in layer order, with names such as "ip1.weights",
 * "ip1.bias", ... Their data and diffs are views of one flat
 * blob holding all of them, which the update works on; read them with the blob
 * accessors as usual. */
int net_num_params(const net *n);
/* Training steps skipped by the loss scaler (cfg.loss_scale) for overflowing gradients. */
int64_t net_skipped_steps(const net *n);
/* The list of the parameters registered with cfg.comm (NULL without one), e.g. for
 * blob_comm_list_set_timing. */
blob_comm_list *net_comm_list(const net *n);
blob *net_param(const net *n, int i);
const char *net_param_name(const net *n, int i);

#endif

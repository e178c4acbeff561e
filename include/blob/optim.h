/*
 * blob/optim.h - optimizer steps: over the parameter blobs of a model, and over the raw
 * arrays of many tensors at once.
 *
 *   blob_optim opt = blob_optim_default(BLOB_OPTIM_SGD, 0.01);
 *   opt.momentum = 0.9;
 *   opt.weight_decay = 5e-4;
 *   blob_optim_state *state;
 *   blob_optim_state_create(&state);
 *   for (...) {
 *       ...                                         // forward, backward: diffs hold gradients
 *       blob_optim_step(&opt, params, n, state);    // data updated, one kernel on the GPU
 *   }
 *   blob_optim_state_free(state);
 *
 * Optimizers, as PyTorch defines them (torch.optim.SGD, Adam, AdamW, without amsgrad or
 * maximize) and as Caffe's SGD solver does. With w a parameter, g its gradient, t the
 * step number (1 for the first step), and lr, wd the learning rate and weight decay:
 *   SGD        d = g + wd*w; if momentum != 0: h = (t == 1) ? d : momentum*h +
 *              (1 - dampening)*d, and d = nesterov ? d + momentum*h : h; then w -= lr*d
 *   SGD_CAFFE  h = lr*(g + wd*w) + momentum*h; w -= h
 *   ADAM       d = g + wd*w; m = beta1*m + (1-beta1)*d; v = beta2*v + (1-beta2)*d*d;
 *              w -= lr/(1-beta1^t) * m / (sqrt(v)/sqrt(1-beta2^t) + eps)
 *   ADAMW      w *= 1 - lr*wd; then ADAM with d = g
 * h is the first history array (momentum), m and v the first and second (Adam's moment
 * estimates); all of them start at zero. g is never written. The settings, blob_optim,
 * and their small functions are in blob/types.h.
 *
 * A state holds what the rules keep between steps: the history blobs of each parameter
 * (momentum, or Adam's two moment estimates), made like the parameter on first use and
 * zero at first, and the step count. It binds to the parameter list of its first step:
 * later steps must pass as many parameters with the same counts.
 */
#ifndef BLOB_OPTIM_H
#define BLOB_OPTIM_H

#include <stdint.h>

#include "blob/status.h"
#include "blob/tensor.h"
#include "blob/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The step counter of the multi-tensor steps: BLOB_OPTIM_STEP_WORDS int64_t in the
 * memory of the side, zero before the first step. step[0] counts the steps taken; the
 * other word is the GPU side's scratch and stays 0 between steps. */
#define BLOB_OPTIM_STEP_WORDS 2

/* One optimizer step over n tensors: tensor i has counts[i] elements of dtype at data[i]
 * (updated), diff[i] (its gradient, read) and, as blob_optim_history_count says,
 * hist1[i] and hist2[i] (updated; the arrays hist1 / hist2 may be NULL when unused).
 * Then step[0] is incremented. counts and the pointer arrays are host memory; the arrays
 * they point to, and step, are memory of the side. Arrays of different tensors must not
 * overlap. The GPU side queues one kernel for up to 512 tensors (one per 512 more) on
 * the current stream; it reads the step number from step on the device and increments it
 * there, so a captured graph replays with the right count.
 * Errors: BLOB_EINVAL (NULL opt or step, a bad field of opt, bad dtype, n < 0, a negative
 * count, a NULL array that is needed), BLOB_ENODEV, BLOB_ECUDA. */
BLOB_API blob_status blob_cpu_optim_step(const blob_optim *opt, blob_dtype dtype, int n,
                                         const int64_t *counts, void *const *data,
                                         const void *const *diff, void *const *hist1,
                                         void *const *hist2, int64_t *step);
BLOB_API blob_status blob_gpu_optim_step(const blob_optim *opt, blob_dtype dtype, int n,
                                         const int64_t *counts, void *const *data,
                                         const void *const *diff, void *const *hist1,
                                         void *const *hist2, int64_t *step);

typedef struct blob_optim_state blob_optim_state;

/* An empty state; *out is NULL on failure. Errors: BLOB_EINVAL, BLOB_ENOMEM. */
BLOB_API blob_status blob_optim_state_create(blob_optim_state **out);

/* Free the state and its history blobs. NULL is a no-op. */
BLOB_API void blob_optim_state_free(blob_optim_state *state);

/* One step of opt over the n parameter blobs params (all of one dtype and device): each
 * one's data is updated from its diff, which is only read. It runs on the GPU when the
 * first parameter's data head is there (AT_GPU or SYNCED), as one blob_gpu_optim_step on
 * the current stream, and on the host otherwise; the other blobs follow (their blocks
 * copied to that side if they are stale there). The data and history heads end on that
 * side. History blobs are made on the first step that needs them. A GPU step only
 * queues work, and with every block already on the device it allocates and copies
 * nothing, so it can be captured in a graph (take one step before capturing): the step
 * count advances on the device at each replay. A failed step changes no value (a first
 * step that fails leaves the state unbound).
 * Errors: BLOB_EINVAL (NULL, n < 1, a bad field of opt, mixed dtypes or devices),
 * BLOB_ESHAPE (not the parameters the state is bound to), accessor and math errors. */
BLOB_API blob_status blob_optim_step(const blob_optim *opt, blob *const *params, int n,
                                     blob_optim_state *state);

/* The steps taken (read from the device if the count is there, waiting for it).
 * Errors: BLOB_EINVAL, accessor errors. */
BLOB_API blob_status blob_optim_state_steps(blob_optim_state *state, int64_t *out);

/* History `which` (0 or 1) of parameter `param` (borrowed, valid until the state is
 * freed), or NULL if there is none (yet) or an argument is out of range. */
BLOB_API blob *blob_optim_state_history(const blob_optim_state *state, int param, int which);

#ifdef __cplusplus
}
#endif
#endif

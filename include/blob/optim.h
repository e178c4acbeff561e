/*
 * blob/optim.h - one optimizer step over the parameter blobs of a model.
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
 * The update rules are those of blob_optim (blob/math.h): PyTorch's SGD, Adam and AdamW,
 * and Caffe's SGD. A state holds what the rules keep between steps: the history blobs of
 * each parameter (momentum, or Adam's two moment estimates), made like the parameter on
 * first use and zero at first, and the step count. It binds to the parameter list of its
 * first step: later steps must pass as many parameters with the same counts.
 */
#ifndef BLOB_OPTIM_H
#define BLOB_OPTIM_H

#include <stdint.h>

#include "blob/math.h"
#include "blob/status.h"
#include "blob/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

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

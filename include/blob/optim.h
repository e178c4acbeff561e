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

#include <stdbool.h>
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

/* The mixed-precision step: as above over float32 master weights data[i] and float32
 * histories, with gradients diff[i] of the 16-bit float dtype `half` (bfloat16 or
 * float16). Each gradient is widened to float32 and multiplied by inv_scale in float32
 * (the inverse of the loss scale, see blob_grad_scaler; 1 without loss scaling), the rule
 * runs in float32, and work[i] (counts[i] elements of half) is set to the updated data[i]
 * rounded to nearest even: the working copy that the next forward pass reads. On the GPU
 * the working copy is written by the step's own kernel, in the same pass over the arrays.
 * From the same values both sides give the same working copy of the same master weights,
 * up to the rounding of the rule (fused multiply-adds on the GPU).
 * Errors: as blob_*_optim_step; BLOB_ENOTSUP (half not bfloat16 or float16), BLOB_EINVAL
 * (inv_scale not positive and finite in float32, a NULL work). */
BLOB_API blob_status blob_cpu_optim_step_mixed(const blob_optim *opt, blob_dtype half,
                                               double inv_scale, int n, const int64_t *counts,
                                               void *const *data, const void *const *diff,
                                               void *const *hist1, void *const *hist2,
                                               void *const *work, int64_t *step);
BLOB_API blob_status blob_gpu_optim_step_mixed(const blob_optim *opt, blob_dtype half,
                                               double inv_scale, int n, const int64_t *counts,
                                               void *const *data, const void *const *diff,
                                               void *const *hist1, void *const *hist2,
                                               void *const *work, int64_t *step);

/* The split step, for bfloat16: the mixed step without float32 master weights, each one
 * kept as two 16-bit halves of its bits, work[i] (the bfloat16 working copy, the master
 * weight rounded to nearest with ties away from zero) and lo[i] (counts[i] uint16_t, the
 * remainder: bits == (work << 16) + (int16_t)lo, exactly; see blob_cpu_master_split).
 * Each element's master weight is joined from the two, the rule runs on it in float32 as
 * in blob_*_optim_step_mixed (gradients diff[i] of bfloat16 times inv_scale, float32
 * histories), and the result is split back into work[i] and lo[i]: 2 bytes per parameter
 * less than a float32 master with its working copy. On the host, from master weights
 * join(work, lo) equal to the mixed step's data and the same gradients and histories, the
 * joined result and the histories are those of blob_cpu_optim_step_mixed, bit for bit (the
 * working copy differs from the mixed step's on ties of the rounding). The GPU side is one
 * kernel as the mixed step's, reading and writing work and lo in its pass.
 * Errors: as blob_*_optim_step_mixed; BLOB_EINVAL (NULL lo or work, or a NULL lo[i]). */
BLOB_API blob_status blob_cpu_optim_step_split(const blob_optim *opt, double inv_scale, int n,
                                               const int64_t *counts, void *const *work,
                                               void *const *lo, const void *const *diff,
                                               void *const *hist1, void *const *hist2,
                                               int64_t *step);
BLOB_API blob_status blob_gpu_optim_step_split(const blob_optim *opt, double inv_scale, int n,
                                               const int64_t *counts, void *const *work,
                                               void *const *lo, const void *const *diff,
                                               void *const *hist1, void *const *hist2,
                                               int64_t *step);

/* Split count float32 master weights into the halves of blob_*_optim_step_split, on the
 * host: hi[j] the bits of master[j] rounded to bfloat16 (nearest, ties away from zero; a
 * finite value that rounds to Inf keeps its value in lo), lo[j] the rest. A NaN becomes
 * the quiet NaN of its sign and lo 0; every other value is joined back exactly by
 * blob_cpu_master_join, which sets master[j] from hi[j] and lo[j]. A bfloat16 working copy
 * is its own master weight with lo 0.
 * Errors: BLOB_EINVAL (count < 0, a NULL array with count > 0). */
BLOB_API blob_status blob_cpu_master_split(int64_t count, const float *master, uint16_t *hi,
                                           uint16_t *lo);
BLOB_API blob_status blob_cpu_master_join(int64_t count, const uint16_t *hi, const uint16_t *lo,
                                          float *master);

/* Set *found (one int32 in memory of the side) to 1 if any of the n arrays x[i] (counts[i]
 * elements of float dtype) holds an Inf or a NaN; it is left alone otherwise, so that a
 * flag cleared once collects several calls. The GPU side queues one kernel per non-empty
 * array on the current stream and does not wait.
 * Errors: BLOB_EINVAL (NULL found, n < 0, a NULL list or array that is needed),
 * BLOB_ENOTSUP (an integer dtype), BLOB_ENODEV, BLOB_ECUDA. */
BLOB_API blob_status blob_cpu_find_nonfinite(blob_dtype dtype, int n, const int64_t *counts,
                                             const void *const *x, int32_t *found);
BLOB_API blob_status blob_gpu_find_nonfinite(blob_dtype dtype, int n, const int64_t *counts,
                                             const void *const *x, int32_t *found);

typedef struct blob_optim_state blob_optim_state;

/* Dynamic loss scaling for float16 gradients, as torch.amp.GradScaler does it: multiply the
 * loss gradient by blob_grad_scaler_scale before the backward pass, check the gradients
 * with blob_grad_scaler_unscale, and step with blob_optim_step_mixed, which divides them
 * by the scale in float32 and skips the step on overflow:
 *
 *   blob_grad_scaler *sc;
 *   blob_grad_scaler_create(&sc, 65536);
 *   for (...) {
 *       ...                                           // forward; dloss scaled by the scale
 *       blob_grad_scaler_unscale(sc, work, n);        // a kernel sets a device flag
 *       bool skipped;
 *       blob_optim_step_mixed(&opt, master, work, n, state, sc, &skipped);
 *   }
 *
 * After a skipped step the scale is multiplied by the backoff factor (0.5 by default);
 * after growth_interval (2000) steps in a row without overflow, by the growth factor (2). */
typedef struct blob_grad_scaler blob_grad_scaler;

/* A scaler of scale init_scale (positive, and its inverse finite), growth factor 2,
 * backoff 0.5, growth interval 2000; *out is NULL on failure.
 * Errors: BLOB_EINVAL, BLOB_ENOMEM. */
BLOB_API blob_status blob_grad_scaler_create(blob_grad_scaler **out, double init_scale);

/* Free the scaler. NULL is a no-op. */
BLOB_API void blob_grad_scaler_free(blob_grad_scaler *sc);

/* Set the growth factor (> 1), the backoff factor (in (0, 1)) and the growth interval
 * (>= 1, in steps), and restart the count of steps without overflow.
 * Errors: BLOB_EINVAL (NULL, a value out of range; nothing changed). */
BLOB_API blob_status blob_grad_scaler_set(blob_grad_scaler *sc, double growth_factor,
                                          double backoff_factor, int64_t growth_interval);

/* The current scale; 0 for NULL. */
BLOB_API double blob_grad_scaler_scale(const blob_grad_scaler *sc);

/* Check the gradients in the diffs of the n blobs work (one float dtype, one device) for
 * Inf and NaN, on the side of work[0]'s diff head (blob_*_find_nonfinite into the scaler's
 * flag: on the GPU a kernel on the current stream, nothing waited for), for the next
 * blob_optim_step_mixed, which unscales the gradients as it reads them (in float32, so
 * that float16 gradients lose nothing to underflow) or skips the step. Calls between two
 * steps collect: an overflow seen by any of them skips the step.
 * Errors: BLOB_EINVAL (NULL, n < 1, mixed dtypes or devices), BLOB_ENOTSUP (an integer
 * dtype), accessor and math errors. */
BLOB_API blob_status blob_grad_scaler_unscale(blob_grad_scaler *sc, blob *const *work, int n);

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

/* The mixed-precision step over n parameters: master[i] (float32) holds the master
 * weights in its data, and work[i] (bfloat16 or float16, all of one dtype, as many
 * elements as master[i], on the same device) the working copy in its data and the
 * gradient in its diff, as a net's 16-bit forward and backward passes leave them. Each
 * master[i]'s data is updated from work[i]'s diff as blob_*_optim_step_mixed does it, and
 * work[i]'s data is set to the result rounded: one kernel on the GPU (the side chosen by
 * master[0], as blob_optim_step does; the state and its float32 histories bind to master;
 * master's diffs are not used). With a scaler (not NULL), each gradient is divided by its
 * scale, and the step is skipped when the gradients hold an Inf or a NaN (checked by
 * blob_grad_scaler_unscale, or here if it was not called since the last step): *skipped
 * (when not NULL) says whether it was, nothing is updated and the state's step count
 * stays; either way the scale is updated as blob_grad_scaler says. Without a scaler,
 * *skipped is false. A scaled step reads the scaler's flag back from the device, so it
 * waits for the work queued before it (and cannot be captured in a graph).
 * Errors: as blob_optim_step; BLOB_EINVAL (NULL work or work[i]), BLOB_ENOTSUP (master not
 * float32, work not bfloat16 or float16), BLOB_ESHAPE (work[i] not as large as master[i]). */
BLOB_API blob_status blob_optim_step_mixed(const blob_optim *opt, blob *const *master,
                                           blob *const *work, int n, blob_optim_state *state,
                                           blob_grad_scaler *scaler, bool *skipped);

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

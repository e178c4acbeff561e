/* Internal: the optimizer's update of one element (blob/optim.h, blob_optim), shared by the
 * host loop (src/math/optim.c) and the GPU kernel (optim.cu) so that both sides compute
 * exactly the same arithmetic in the element type, and the halves of a split master
 * weight (blob_*_optim_step_split). Plain C and C++. */
#ifndef BLOB_KERNELS_OPTIM_FORMULA_H
#define BLOB_KERNELS_OPTIM_FORMULA_H

#include <stdint.h>

#include "blob/types.h"

/* The fields of the scalars of one step in the element type T, converted from double
 * (a struct of them: struct { BLOB__OPTIM_SCALAR_FIELDS(T) }). */
#define BLOB__OPTIM_SCALAR_FIELDS(T)                                                 \
    T lr, wd, momentum, dampc;           /* dampc = 1 - dampening */                 \
    T beta1, beta1c, beta2, beta2c, eps; /* betaNc = 1 - betaN */                    \
    T decay;                             /* 1 - lr * wd (AdamW) */                   \
    T step_size, bc2_sqrt;               /* lr / (1 - beta1^t), sqrt(1 - beta2^t) */ \
    int nesterov, first;                 /* first: t == 1 */

/* Fill the scalars s for opt at step t >= 1. */
#define BLOB__OPTIM_FILL(T, s, opt, t)                                         \
    do {                                                                       \
        (s).lr = (T)(opt)->lr;                                                 \
        (s).wd = (T)(opt)->weight_decay;                                       \
        (s).momentum = (T)(opt)->momentum;                                     \
        (s).dampc = (T)(1 - (opt)->dampening);                                 \
        (s).beta1 = (T)(opt)->beta1;                                           \
        (s).beta1c = (T)(1 - (opt)->beta1);                                    \
        (s).beta2 = (T)(opt)->beta2;                                           \
        (s).beta2c = (T)(1 - (opt)->beta2);                                    \
        (s).eps = (T)(opt)->eps;                                               \
        (s).decay = (T)(1 - (opt)->lr * (opt)->weight_decay);                  \
        (s).nesterov = (opt)->nesterov;                                        \
        BLOB__OPTIM_FILL_STEP(T, s, (opt)->lr, (opt)->beta1, (opt)->beta2, t); \
    } while (0)

/* The fields that depend on the step number t (an integer >= 1), from doubles. */
#define BLOB__OPTIM_FILL_STEP(T, s, lr, beta1, beta2, t)             \
    do {                                                             \
        (s).first = (t) == 1;                                        \
        (s).step_size = (T)((lr) / (1 - pow((beta1), (double)(t)))); \
        (s).bc2_sqrt = (T)sqrt(1 - pow((beta2), (double)(t)));       \
    } while (0)

/* One element of kind KIND (a constant): w the parameter, g its gradient, h and v the
 * first and second history (lvalues; h unused by SGD without momentum, v by SGD), s the
 * scalars and SQRT the square root of T. */
#define BLOB__OPTIM_ELEMENT(T, KIND, s, SQRT, w, g, h, v)                         \
    do {                                                                          \
        const T g_ = (g);                                                         \
        if ((KIND) == BLOB_OPTIM_SGD) {                                           \
            T d_ = (s).wd != 0 ? g_ + (s).wd * (w) : g_;                          \
            if ((s).momentum != 0) {                                              \
                (h) = (s).first ? d_ : (s).momentum * (h) + (s).dampc * d_;       \
                d_ = (s).nesterov ? d_ + (s).momentum * (h) : (h);                \
            }                                                                     \
            (w) = (w) - (s).lr * d_;                                              \
        } else if ((KIND) == BLOB_OPTIM_SGD_CAFFE) {                              \
            (h) = (s).lr * (g_ + (s).wd * (w)) + (s).momentum * (h);              \
            (w) = (w) - (h);                                                      \
        } else {                                                                  \
            T d_ = g_;                                                            \
            if ((KIND) == BLOB_OPTIM_ADAMW)                                       \
                (w) = (w) * (s).decay;                                            \
            else if ((s).wd != 0)                                                 \
                d_ = g_ + (s).wd * (w);                                           \
            (h) = (s).beta1 * (h) + (s).beta1c * d_;                              \
            (v) = (s).beta2 * (v) + (s).beta2c * d_ * d_;                         \
            (w) = (w) - (s).step_size * (h) / (SQRT(v) / (s).bc2_sqrt + (s).eps); \
        }                                                                         \
    } while (0)

/* The split master weight of a bfloat16 mixed-precision step (blob_*_optim_step_split): the
 * bits b (a uint32_t) of a float32 weight kept as two 16-bit halves, hi = BLOB__MASTER_HI(b),
 * the bfloat16 working copy (b rounded to nearest, ties away from zero), and lo =
 * BLOB__MASTER_LO(b), read as a signed correction: b == BLOB__MASTER_JOIN(hi, lo) ==
 * (hi << 16) + (int16_t)lo, modulo 2^32, for every b but a NaN's. As the rounding adds
 * 0x8000 to the bits, lo is b's low half (0x8000 and up when hi was rounded up, a negative
 * correction), and a finite b that rounds up to Inf (from 0x7f7f8000) joins back exactly
 * from hi = Inf and its negative lo. A NaN splits into the quiet NaN of its sign and lo 0.
 * The arithmetic is on unsigned values alone, so that C and C++ define every case. */
#define BLOB__MASTER_IS_NAN(b) (((uint32_t)(b)&0x7fffffffu) > 0x7f800000u)
#define BLOB__MASTER_HI(b)                                                           \
    ((uint16_t)(BLOB__MASTER_IS_NAN(b) ? (((uint32_t)(b) >> 16) & 0x8000u) | 0x7fc0u \
                                       : ((uint32_t)(b) + 0x8000u) >> 16))
#define BLOB__MASTER_LO(b) ((uint16_t)(BLOB__MASTER_IS_NAN(b) ? 0u : (uint32_t)(b)&0xffffu))
#define BLOB__MASTER_JOIN(hi, lo)                                             \
    ((uint32_t)(((uint32_t)(uint16_t)(hi) << 16) + (uint32_t)(uint16_t)(lo) - \
                (((uint32_t)(uint16_t)(lo)&0x8000u) << 1)))

#endif

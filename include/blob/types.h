/*
 * blob/types.h - the vocabulary that the other headers share: element types, transposes,
 * math modes, GEMM epilogues and their ReLU mask, the window geometry of convolution and
 * pooling, and the optimizer settings.
 *
 *   size_t bytes = (size_t)n * blob_dtype_size(BLOB_FLOAT32);
 *   blob_optim opt = blob_optim_default(BLOB_OPTIM_ADAMW, 1e-3);
 *
 * The ground floor of the API: it includes only blob/status.h, and every other header
 * that names one of these types includes it. The functions that use them are declared
 * by subject: blob/blas.h, conv.h, math_mode.h, fused.h and optim.h.
 */
#ifndef BLOB_TYPES_H
#define BLOB_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blob/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. The float math (blob/blas.h, conv.h, fused.h, optim.h) takes float32 and
 * float64, and GEMM (blas.h, fused.h), the vector calls but gemv, the ReLUs and the mixed
 * softmax with loss (integer labels) the 16-bit floats too;
 * blob_update, the norms and scaling (blob/tensor.h) take the 16-bit floats, computing in
 * float32; the integers are storage (copies, transfers, sharing, .npy,
 * DLPack). A call that does not take a dtype fails with BLOB_ENOTSUP naming the dtype. */
typedef enum {
    BLOB_DTYPE_NONE = -1, /* not a dtype: blob_get_dtype(NULL); blob_dtype_size gives 0 */
    BLOB_FLOAT32 = 0,
    BLOB_FLOAT64 = 1,
    BLOB_BFLOAT16 = 2, /* 8 exponent bits, 7 fraction bits (float32's top half) */
    BLOB_FLOAT16 = 3,  /* IEEE 754 binary16: 5 exponent bits, 10 fraction bits */
    BLOB_INT32 = 4,
    BLOB_INT64 = 5,
    BLOB_UINT8 = 6
} blob_dtype;

/* Bytes per element of dtype; 0 for an invalid dtype. */
BLOB_API size_t blob_dtype_size(blob_dtype dtype);

/* The dtype's name ("float32", "bfloat16", "int64", ...); "invalid" for an invalid one.
 * Never NULL. */
BLOB_API const char *blob_dtype_name(blob_dtype dtype);

/* Whether dtype is one of the float dtypes (float32, float64, bfloat16, float16). */
BLOB_API bool blob_dtype_is_float(blob_dtype dtype);

typedef enum { BLOB_NO_TRANS = 0, BLOB_TRANS = 1 } blob_trans;

/* How float32 products are computed on the GPU (blob/math_mode.h). */
typedef enum {
    BLOB_MATH_DEFAULT = 0, /* per call: the process-wide setting */
    BLOB_MATH_FP32 = 1,    /* exact float32 */
    BLOB_MATH_TF32 = 2,    /* tensor cores, TF32 inputs, float32 accumulation */
    BLOB_MATH_BF16 = 3     /* tensor cores, bfloat16 inputs, float32 accumulation */
} blob_math_mode;

/* What blob_*_gemm_epilogue (blob/fused.h) does after the product P = op(A) op(B)
 * (M x N, row-major), which it writes to C (M x N) with nothing added from C's old
 * contents:
 *   NONE         C = P
 *   BIAS         C[i,j] = P[i,j] + bias[j]                      bias: N, read
 *   RELU         C = max(P, 0)                                  mask written if not NULL
 *   BIAS_RELU    C[i,j] = max(P[i,j] + bias[j], 0)              bias: N, read; mask too
 *   DRELU        C[i,j] = mask bit (i,j) set ? P[i,j] : 0       mask read
 *   DRELU_BGRAD  as DRELU, and bias[j] = sum_i C[i,j]           mask read; bias: N, written
 *   BGRADA       C = P, and bias[i] = sum_k op(A)[i,k]          bias: M, written
 *   BGRADB       C = P, and bias[j] = sum_k op(B)[k,j]          bias: N, written
 * The forward ReLU epilogues record in mask which outputs were positive, and the DRELU
 * epilogues take such a mask to compute the ReLU's backward pass fused into the GEMM that
 * produces its input gradient: after C = relu(X W^T + b) with mask, the backward of the
 * next layer, dX = dY W, runs as DRELU_BGRAD and yields this layer's dZ and db at once;
 * its dW = dZ^T X runs as BGRADA with op(A) = dZ^T, which yields db as well.
 * A ReLU of NaN gives 0 and a clear bit, as cuBLASLt's does. */
typedef enum {
    BLOB_EPILOGUE_NONE = 0,
    BLOB_EPILOGUE_BIAS = 1,
    BLOB_EPILOGUE_RELU = 2,
    BLOB_EPILOGUE_BIAS_RELU = 3,
    BLOB_EPILOGUE_DRELU = 4,
    BLOB_EPILOGUE_DRELU_BGRAD = 5,
    BLOB_EPILOGUE_BGRADA = 6,
    BLOB_EPILOGUE_BGRADB = 7
} blob_epilogue;

/* The ReLU mask of an M x N output is cuBLASLt's bit mask, on both sides: row i of C
 * takes BLOB_RELU_MASK_ROW_BITS(N) bits (N rounded up to a multiple of 128), starting at
 * bit i * BLOB_RELU_MASK_ROW_BITS(N); bit b of the mask is bit b % 8 of byte b / 8, and
 * it is set when C[i,j] > 0. The bits past N in a row are unspecified. A mask must be
 * 16-byte aligned and hold blob_relu_mask_bytes(M, N) bytes, in the memory of the side
 * that uses it (a mask can be copied between sides as plain bytes). Initialise its
 * memory once (any value; a blob's is zero-filled) before the first forward: cuBLASLt
 * reads the bytes it updates. */
#define BLOB_RELU_MASK_ROW_BITS(N) ((((int64_t)(N) + 127) / 128) * 128)

/* Bytes of the ReLU mask of an M x N output; 0 for a negative size or one that overflows. */
BLOB_API size_t blob_relu_mask_bytes(int64_t M, int64_t N);

/* How an output size that does not divide evenly is rounded. BLOB_ROUND_CEIL is Caffe's
 * pooling (and PyTorch's ceil_mode): one more window where a partial one remains, but a
 * last window that would start past height + pad_h is dropped (PyTorch's rule, which
 * Caffe applies only when padded; without padding Caffe would keep an empty window). */
typedef enum { BLOB_ROUND_FLOOR = 0, BLOB_ROUND_CEIL = 1 } blob_rounding;

/* One image's window geometry, shared by im2col, col2im and pooling (blob/conv.h).
 * Zero-initialised fields other than kernel, stride and dilation are valid defaults
 * (no pad, floor). */
typedef struct {
    int64_t channels, height, width; /* of one input image */
    int64_t kernel_h, kernel_w;      /* >= 1 */
    int64_t pad_h, pad_w;            /* >= 0, on each side */
    int64_t stride_h, stride_w;      /* >= 1 */
    int64_t dilation_h, dilation_w;  /* >= 1; pooling takes 1 only */
    blob_rounding rounding;          /* of the output size; convolutions use FLOOR */
} blob_conv_geometry;

/* An optimizer and its settings; the update rules are in blob/optim.h. */
typedef enum {
    BLOB_OPTIM_SGD = 0,
    BLOB_OPTIM_SGD_CAFFE = 1,
    BLOB_OPTIM_ADAM = 2,
    BLOB_OPTIM_ADAMW = 3
} blob_optim_kind;

typedef struct {
    blob_optim_kind kind;
    double lr;           /* >= 0 */
    double weight_decay; /* >= 0 */
    double momentum;     /* SGD: >= 0 */
    double dampening;    /* SGD: 0 with nesterov */
    bool nesterov;       /* SGD: needs momentum > 0 and dampening 0 */
    double beta1, beta2; /* Adam: in [0, 1) */
    double eps;          /* Adam: >= 0 */
} blob_optim;

/* PyTorch's defaults for kind with learning rate lr: no momentum, dampening or weight
 * decay for SGD; betas 0.9 and 0.999, eps 1e-8 and weight decay 0 (Adam) or 0.01 (AdamW). */
BLOB_API blob_optim blob_optim_default(blob_optim_kind kind, double lr);

/* History arrays per parameter that opt uses: 0 (SGD without momentum), 1 (SGD with
 * momentum, SGD_CAFFE) or 2 (Adam, AdamW); -1 for NULL or an unknown kind. */
BLOB_API int blob_optim_history_count(const blob_optim *opt);

#ifdef __cplusplus
}
#endif
#endif

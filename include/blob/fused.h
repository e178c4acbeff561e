/*
 * blob/fused.h - GEMM with a fused epilogue: bias, ReLU and their gradients.
 *
 *   // a layer's forward (relu(X W^T + b), keeping the mask) and backward, on the GPU
 *   size_t mbytes = blob_relu_mask_bytes(batch, out);     // allocate mask with this
 *   blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_TRANS, batch, out, in, X, W,
 *                          Y, BLOB_EPILOGUE_BIAS_RELU, b, mask, BLOB_MATH_DEFAULT);
 *   ...                                                   // dY of this layer's output
 *   blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_TRANS, BLOB_NO_TRANS, out, in, batch, dZ, X,
 *                          dW, BLOB_EPILOGUE_BGRADA, db, NULL, BLOB_MATH_DEFAULT);
 *
 * The epilogues and the ReLU mask's layout are defined in blob/types.h (blob_epilogue,
 * BLOB_RELU_MASK_ROW_BITS, blob_relu_mask_bytes), the math mode in blob/math_mode.h.
 */
#ifndef BLOB_FUSED_H
#define BLOB_FUSED_H

#include <stdbool.h>
#include <stdint.h>

#include "blob/status.h"
#include "blob/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C = epilogue(op(A) op(B)), row-major, as described at blob_epilogue; op(A) is M x K,
 * op(B) K x N, C M x N. bias and mask are needed only by the epilogues that name them (a
 * ReLU's mask is optional) and may be NULL otherwise. dtype is float32, float64, bfloat16
 * or float16, of A, B, C and bias alike; the 16-bit floats accumulate in float32, run the
 * epilogue on the float32 values (the bias sums in float32 too) and round the results to
 * nearest even, where cuBLASLt fuses the epilogue and on the host; elsewhere on the GPU
 * the product is rounded to the dtype before the epilogue kernels. mode applies to float32
 * on the GPU (BLOB_MATH_DEFAULT: the process-wide mode); the host is always exact (up to
 * the 16-bit floats' float32 sums). C must not overlap A, B, bias or mask. With K == 0
 * the product is 0 (bias sums too).
 * The GPU side runs cuBLASLt with the epilogue fused where cuBLASLt offers it for the
 * problem, and otherwise cuBLAS and one or two kernels of its own with the same results;
 * it queues its work on the current stream and may be captured in a graph (see
 * blob_graph_begin). Matmul descriptors and the algorithm chosen are cached per thread
 * and problem, and its workspace per thread, device and stream.
 * Errors: BLOB_EINVAL (bad dtype, transpose flag, epilogue or mode, negative size, a NULL
 * array the epilogue needs, a misaligned mask), BLOB_ENOTSUP (an integer dtype, named with
 * the call), BLOB_EOVERFLOW, BLOB_ENOMEM (the host's 16-bit tiles), BLOB_ENODEV (GPU side
 * without a GPU), BLOB_ECUBLAS, BLOB_ECUDA, BLOB_EDEVMEM (its workspace). */
BLOB_API blob_status blob_cpu_gemm_epilogue(blob_dtype dtype, blob_trans trans_a,
                                            blob_trans trans_b, int64_t M, int64_t N, int64_t K,
                                            const void *A, const void *B, void *C,
                                            blob_epilogue epilogue, void *bias, void *mask,
                                            blob_math_mode mode);
BLOB_API blob_status blob_gpu_gemm_epilogue(blob_dtype dtype, blob_trans trans_a,
                                            blob_trans trans_b, int64_t M, int64_t N, int64_t K,
                                            const void *A, const void *B, void *C,
                                            blob_epilogue epilogue, void *bias, void *mask,
                                            blob_math_mode mode);

/* *fused = whether blob_gpu_gemm_epilogue runs this problem as one cuBLASLt call with the
 * epilogue fused (true) or as a product followed by kernels of its own (false), on the
 * current GPU, for arrays aligned as the allocator's blocks are; with_mask says whether a
 * ReLU epilogue writes its mask. Empty products never fuse. With GEMM tuning on, a problem
 * whose fused form times slower than the other runs as the other, which this does not
 * tell (blob/math_mode.h). *fused is false on failure.
 * Errors: as blob_gpu_gemm_epilogue's (the arrays are not needed), BLOB_ENODEV. */
BLOB_API blob_status blob_gpu_gemm_epilogue_fused(blob_dtype dtype, blob_trans trans_a,
                                                  blob_trans trans_b, int64_t M, int64_t N,
                                                  int64_t K, blob_epilogue epilogue, bool with_mask,
                                                  blob_math_mode mode, bool *fused);

#ifdef __cplusplus
}
#endif
#endif

/*
 * blob/math_mode.h - how the GPU computes products: the math mode and GEMM tuning.
 *
 *   blob_math_mode_set(BLOB_MATH_TF32);               // float32 GEMMs on tensor cores
 *   blob_gemm_tuning_set(true);                        // time cuBLASLt's candidates
 *
 * Math modes (blob_math_mode, blob/types.h) choose how float32 products are computed on
 * the GPU: exactly (FP32, the default, as PyTorch's default), or on tensor cores with the
 * inputs rounded to TF32 (10-bit mantissa) or bfloat16 (7-bit mantissa), always with
 * float32 storage and float32 accumulation (cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32 and
 * _FAST_16BF). The mode is a
 * process-wide setting, read from the environment variable BLOB_MATH_MODE (fp32, tf32 or
 * bf16, in any case) on first use and changed by blob_math_mode_set; any other value
 * makes the calls that would use it fail with BLOB_EINVAL naming it, until
 * blob_math_mode_set chooses a mode (blob_math_mode_get then says fp32). It applies to
 * blob_gpu_gemm and to every blob_gpu_gemm_epilogue called with
 * BLOB_MATH_DEFAULT. float64 products, and everything on the host, are always exact: the
 * blob_cpu_* functions check the mode argument and otherwise ignore it.
 */
#ifndef BLOB_MATH_MODE_H
#define BLOB_MATH_MODE_H

#include <stdbool.h>

#include "blob/status.h"
#include "blob/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Set the process-wide mode; BLOB_MATH_DEFAULT restores the one the environment gave.
 * Thread-safe; work already queued keeps the mode it was queued with.
 * Errors: BLOB_EINVAL for a value outside the enum. */
BLOB_API blob_status blob_math_mode_set(blob_math_mode mode);

/* The process-wide mode (never BLOB_MATH_DEFAULT). */
BLOB_API blob_math_mode blob_math_mode_get(void);

/* "default", "fp32", "tf32", "bf16"; "unknown" outside the enum. */
BLOB_API const char *blob_math_mode_name(blob_math_mode mode);

/* GEMM tuning, as cuDNN's benchmark mode or PyTorch's TunableOp. cuBLASLt picks the
 * algorithm of a product by a heuristic. With tuning on, blob_gpu_gemm_epilogue times
 * instead, on the device, the heuristic's candidates and the splits of K each allows,
 * the first time the calling thread meets a problem (its shape, transposes, epilogue,
 * mode and pointer alignments), and keeps the fastest; for an epilogue, the fastest
 * fused product is timed against the plain product followed by the library's epilogue
 * kernels, and the faster of the two is kept. That first call waits on the host
 * for the stream's work and runs the product some hundred times on its own arrays (what
 * it writes, the call then writes again), tens of milliseconds; a problem met first while
 * its stream is captured is timed at its first call outside a capture. The fastest can
 * differ from run to run, and with it how a split K rounds. Off by default; the
 * environment variable BLOB_GEMM_TUNING=1 turns it on at first use (0 leaves it off; any
 * other value makes blob_gpu_gemm_epilogue fail with BLOB_EINVAL naming it, until
 * blob_gemm_tuning_set is called). Process-wide and thread-safe; problems already met
 * keep what they had. */
BLOB_API void blob_gemm_tuning_set(bool on);
BLOB_API bool blob_gemm_tuning_get(void);

#ifdef __cplusplus
}
#endif
#endif

/* Internal: knobs of the host math shared with the tests, and what the math files share.
 * Never installed. */
#ifndef BLOB_MATH_IMPL_H
#define BLOB_MATH_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "blob/status.h"
#include "blob/types.h"

/* The largest size passed to one CBLAS call (OpenBLAS takes 32-bit ints): longer vectors
 * and larger matrix dims are split into pieces of at most this many. INT_MAX by default;
 * tests lower it to prove the splitting. Must be >= 1. */
extern int64_t blob__blas_chunk;

/* ---- Shared by the math files: argument checks recording under fn (math.c), modes ---- */

/* The checks of blob_*_gemm: dtype, transpose flags, sizes, A, B and C. */
blob_status blob__check_gemm(const char *fn, blob_dtype dtype, blob_trans trans_a,
                             blob_trans trans_b, int64_t M, int64_t N, int64_t K, const void *A,
                             const void *B, const void *C);
/* A dtype the float math takes: float32 or float64 (BLOB_ENOTSUP for the others). */
blob_status blob__check_dtype(const char *fn, blob_dtype dtype);
/* A float dtype: float32, float64, bfloat16 or float16 (BLOB_ENOTSUP for the others). */
blob_status blob__check_float_dtype(const char *fn, blob_dtype dtype);
/* An array `name` of n >= 0 elements of dtype that is addressable and not NULL if n > 0. */
blob_status blob__check_array(const char *fn, blob_dtype dtype, int64_t n, const char *name,
                              const void *p);

/* Element i of an array of a float dtype, as a double (exact), and v stored there rounded
 * to nearest even (overflow to Inf, NaN as the quiet NaN of its sign): convert.c. */
double blob__elem_get(blob_dtype dtype, const void *p, int64_t i);
void blob__elem_set(blob_dtype dtype, void *p, int64_t i, double v);

/* Run by a host GEMM's thread on the block of C it has just computed: rows [i0, i1) x
 * columns [j0, j1). */
typedef void (*blob__gemm_block_fn)(void *ctx, int64_t i0, int64_t i1, int64_t j0, int64_t j1);

/* blob_cpu_gemm on checked arguments with M, N, K > 0, C cut into blocks of rows x cols
 * (blob__gemm_grid), each computed by one of the host threads, which then runs after on it
 * (when not NULL). Errors: BLOB_EOVERFLOW for a row longer than the BLAS's int. */
blob_status blob__cpu_gemm_blocks(blob_dtype dtype, blob_trans trans_a, blob_trans trans_b,
                                  int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                                  const void *B, double beta, void *C, int64_t rows, int64_t cols,
                                  blob__gemm_block_fn after, void *after_ctx);

/* C = epilogue(alpha * op(A) op(B) + beta * C) on bfloat16 or float16 arrays (gemm16.c):
 * checked arguments, alpha 1 and beta 0 with an epilogue other than NONE, bias and mask as
 * blob_cpu_gemm_epilogue takes them (NULL where unused). Accumulates in float32, applies
 * the epilogue there and rounds into C to nearest even; C is written only on success.
 * Errors: BLOB_ENOMEM (its float32 tiles), recorded under fn. */
blob_status blob__cpu_gemm16(const char *fn, blob_dtype dtype, blob_trans trans_a,
                             blob_trans trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                             const void *A, const void *B, double beta, void *C,
                             blob_epilogue epilogue, void *bias, void *mask);

/* A math mode in the enum (mode.c). */
blob_status blob__check_math_mode(const char *fn, blob_math_mode mode);
/* The mode a GPU product of dtype runs in: the process-wide one for BLOB_MATH_DEFAULT,
 * and always BLOB_MATH_FP32 (exact) for float64. BLOB_EINVAL, recorded under func, where
 * it would be the environment's and BLOB_MATH_MODE is malformed (*out then FP32). */
blob_status blob__math_mode_for(const char *func, blob_dtype dtype, blob_math_mode mode,
                                blob_math_mode *out);

/* Whether GEMMs are tuned: blob_gemm_tuning_get, and BLOB_EINVAL, recorded under func,
 * while it is the environment's and BLOB_GEMM_TUNING is malformed (*on then false). */
blob_status blob__gemm_tuning(const char *func, bool *on);

/* 16 bytes of elements (one SSE register), GCC's and Clang's vector types: the host loops
 * run their per-element arithmetic on them lane by lane, with the roundings of the
 * scalar code; loaded and stored with memcpy (any alignment). Comparisons give lanes of
 * the same-sized integers, -1 for true and 0 for false. */
typedef float blob__vec_f32 __attribute__((vector_size(16)));
typedef double blob__vec_f64 __attribute__((vector_size(16)));
typedef int32_t blob__vec_i32 __attribute__((vector_size(16)));
typedef int64_t blob__vec_i64 __attribute__((vector_size(16)));

#endif

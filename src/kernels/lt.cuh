/* Internal to src/kernels: what the cuBLASLt GEMM (gemm_lt.cu), its fallback epilogue
 * kernels (epilogue.cu) and the cuBLAS handles (cublas.cu) share. */
#ifndef BLOB_KERNELS_LT_CUH
#define BLOB_KERNELS_LT_CUH

#include "common.cuh"

/* C already holds P = op(A) op(B) (M x N, row-major): apply the epilogue to it and write
 * bias / mask as blob_gpu_gemm_epilogue does (the bias sums of BGRADA and BGRADB come
 * from A and B). Queued on stream; errors recorded under func. */
blob_status blob__epilogue_apply(const char *func, void *stream, blob_dtype dtype,
                                 blob_trans trans_a, blob_trans trans_b, int64_t M, int64_t N,
                                 int64_t K, const void *A, const void *B, void *C,
                                 blob_epilogue epilogue, void *bias, void *mask);

/* Make the calling thread's cuBLASLt handle for the current device and its workspace for
 * stream exist (before a stream capture). */
blob_status blob__lt_prepare(void *stream);

/* Drop the calling thread's cuBLASLt handles, plans and workspaces. */
void blob__lt_thread_release(void);

#endif

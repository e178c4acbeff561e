/* Internal to src/kernels: what the cuBLASLt GEMM (gemm_lt*.cu), its fallback epilogue
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

/* The calling thread's cuBLASLt workspace for stream on the current device, made (with
 * the thread's cuBLASLt handle) on first use, which must come before a stream capture.
 * The thread's cuBLAS handle takes it too: the calls queued on one stream run in order,
 * so they can share it, and cuBLAS calls on different streams never share one (as they
 * would share the handle's default pool, which makes results depend on how the streams
 * overlap). */
blob_status blob__lt_workspace(void *stream, void **ptr, size_t *bytes);

/* Drop the calling thread's cuBLASLt handles, plans and workspaces. */
void blob__lt_thread_release(void);

#endif

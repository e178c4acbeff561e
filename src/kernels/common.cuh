/* Internal to the .cu files of src/kernels: error recording, launch geometry and the elementwise
 * launcher shared by the kernel files. */
#ifndef BLOB_KERNELS_COMMON_CUH
#define BLOB_KERNELS_COMMON_CUH

#include <stdbool.h>
#include <stddef.h>

#include <cuda_runtime_api.h>

extern "C" {
#include "../core/core.h" /* a C header without linkage guards */
}
#include "kernels.h"

/* Check the kernel launch just made (and clear its error). */
static inline blob_status launch_check(const char *kernel, const char *func)
{
    cudaError_t err = cudaPeekAtLastError();
    return err == cudaSuccess ? BLOB_OK : blob__cuda_fail(err, kernel, func);
}

static constexpr unsigned THREADS = 256;
static constexpr int64_t MAX_BLOCKS = 65536;

/* Blocks for n items of per_block each, capped: kernels loop over the grid. */
static inline unsigned grid_for(int64_t n, int64_t per_block)
{
    int64_t blocks = (n + per_block - 1) / per_block;
    return (unsigned)(blocks < MAX_BLOCKS ? blocks : MAX_BLOCKS);
}

/* i over [0, n) across the whole grid, with 64-bit indices. */
#define GRID_LOOP(i, n)                                                       \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)blockDim.x * gridDim.x)

template <typename F>
static __global__ void each_kernel(int64_t n, F f)
{
    GRID_LOOP(i, n)
    f(i);
}

/* Queue f(i) for every i in [0, n) on stream. */
template <typename F>
static blob_status each(const char *func, void *stream, int64_t n, F f)
{
    if (n == 0)
        return BLOB_OK;
    each_kernel<<<grid_for(n, THREADS), THREADS, 0, (cudaStream_t)stream>>>(n, f);
    return launch_check("each_kernel", func);
}

/* Call each with Op<float> or Op<double> built from the arguments, by dtype. */
#define EACH(func, stream, dtype, n, Op, ...)                                      \
    ((dtype) == BLOB_FLOAT32 ? each((func), (stream), (n), Op<float>{__VA_ARGS__}) \
                             : each((func), (stream), (n), Op<double>{__VA_ARGS__}))

#endif

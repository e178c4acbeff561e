/* bench/bench_cuda.h - the CUDA check of the benchmarks' GPU code (CUDA builds). */
#ifndef BENCH_CUDA_H
#define BENCH_CUDA_H

#include <cuda_runtime_api.h>

#include "bench.h"

/* Fail with CUDA's name for the error unless expr returns cudaSuccess; the error is
 * cleared, so that it does not stand for a later call's. */
#define CTRY(expr)                                                       \
    do {                                                                 \
        cudaError_t ctry_ = (expr);                                      \
        if (ctry_ != cudaSuccess) {                                      \
            (void)cudaGetLastError();                                    \
            return bench_fail("%s: %s", #expr, cudaGetErrorName(ctry_)); \
        }                                                                \
    } while (0)

#endif

/*
 * blob/host_blas.h - the host BLAS, as the library uses it, and the library's host threads.
 *
 *   blob_blas_info info;
 *   blob_blas_get_info(&info);
 *   puts(info.summary);                // "OpenBLAS 0.3.21, core ... 16 threads ..."
 *   blob_host_threads_set(4);
 */
#ifndef BLOB_HOST_BLAS_H
#define BLOB_HOST_BLAS_H

#include "blob/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char name[64];     /* the BLAS and its version: "OpenBLAS 0.3.21", "BLIS 0.9.0",
                         "MKL 2026.2", or "CBLAS" for another */
    char core[32];     /* the kernel set in use, e.g. "SkylakeX" (OpenBLAS), "zen3" (BLIS);
                         "" when unknown */
    char detected[32]; /* the one OpenBLAS chose by itself, when the library changed it */
    int threads;       /* the library's host threads (blob_host_threads_set) */
    char summary[192]; /* one line, e.g. "OpenBLAS 0.3.21, core Prescott -> SkylakeX
                          (AVX-512 CPU; OPENBLAS_CORETYPE chooses), 16 threads (GEMMs cut
                          into blocks, one BLAS thread each)" */
} blob_blas_info;

/* Describe the host BLAS. OpenBLAS's runtime core choice is checked when the library is
 * loaded: where it chose a generic core (Prescott, Nehalem, ...) on a CPU with AVX-512 or
 * AVX2, as it does on virtual machines that hide the CPU model, the library switches it
 * to SkylakeX or Haswell, once; a core set with OPENBLAS_CORETYPE is always kept.
 *
 * The host math of blob_cpu_* runs on the library's host threads: a GEMM is cut into
 * blocks of C, one per thread, each a one-thread BLAS call; vector operations, epilogues,
 * ReLU, softmax and optimizer steps split their arrays the same way when large enough to
 * gain. With OpenBLAS built for pthreads (or serial), BLIS or MKL, the library sets the
 * BLAS's thread count to 1 at load time for this: other BLAS calls of the process then
 * run on one thread too, until openblas_set_num_threads, bli_thread_set_num_threads or
 * mkl_set_num_threads gives it more, after which the library's GEMMs are handed to the
 * BLAS whole. With an OpenMP OpenBLAS, or another CBLAS, GEMMs are always handed over
 * whole, to be threaded by the BLAS.
 * Errors: BLOB_EINVAL for NULL. */
BLOB_API blob_status blob_blas_get_info(blob_blas_info *out);

/* Set the number of the library's host threads (the calling thread included), 1 to 64.
 * The default is the thread count the BLAS chose at load time (OpenBLAS:
 * OPENBLAS_NUM_THREADS or OMP_NUM_THREADS, else the cores; BLIS: BLIS_NUM_THREADS or
 * OMP_NUM_THREADS, else the cores; MKL: MKL_NUM_THREADS or OMP_NUM_THREADS, else its
 * count of physical cores); 1 runs all host math on the calling thread.
 * Errors: BLOB_EINVAL for n out of range. */
BLOB_API blob_status blob_host_threads_set(int n);

#ifdef __cplusplus
}
#endif
#endif

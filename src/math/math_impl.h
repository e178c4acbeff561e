/* Internal: knobs of the host math shared with the tests. Never installed. */
#ifndef BLOB_MATH_IMPL_H
#define BLOB_MATH_IMPL_H

#include <stdint.h>

/* The largest size passed to one CBLAS call (OpenBLAS takes 32-bit ints): longer vectors
 * and larger matrix dims are split into pieces of at most this many. INT_MAX by default;
 * tests lower it to prove the splitting. Must be >= 1. */
extern int64_t blob__blas_chunk;

#endif

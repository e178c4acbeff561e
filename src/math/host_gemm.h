/* A host GEMM cut into blocks for the host threads: math.c's float32 and float64 GEMM and
 * gemm16.c's 16-bit one share its operands and its grid. */
#ifndef BLOB_MATH_HOST_GEMM_H
#define BLOB_MATH_HOST_GEMM_H

#include <stdint.h>

#include "blob/types.h"

/* A host GEMM's operands, C (M x N, leading dimension N) = op(A) op(B) with A's and B's
 * leading dimensions lda and ldb, and the blocks of rows x cols (blob__gemm_grid) that
 * C is cut into for the host threads. */
typedef struct {
    blob_dtype dtype;
    blob_trans trans_a, trans_b;
    int64_t M, N, K, lda, ldb, rows, cols;
    const void *A, *B;
    void *C;
} blob__host_gemm;

/* How many blocks g's grid has. */
static inline int64_t blob__host_gemm_blocks(const blob__host_gemm *g)
{
    return ((g->M + g->rows - 1) / g->rows) * ((g->N + g->cols - 1) / g->cols);
}

/* Block b of g's grid, counted along C's rows: C's rows [*i0, *i1) x columns [*j0, *j1). */
static inline void blob__host_gemm_block(const blob__host_gemm *g, int64_t b, int64_t *i0,
                                         int64_t *i1, int64_t *j0, int64_t *j1)
{
    const int64_t across = (g->N + g->cols - 1) / g->cols;
    *i0 = b / across * g->rows;
    *j0 = b % across * g->cols;
    *i1 = *i0 + g->rows < g->M ? *i0 + g->rows : g->M;
    *j1 = *j0 + g->cols < g->N ? *j0 + g->cols : g->N;
}

#endif

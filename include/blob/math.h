/*
 * blob/math.h - all the math on raw arrays, by subject:
 *
 *   blob/types.h      dtypes, transposes, math modes, epilogues, geometry, optimizer settings
 *   blob/blas.h       BLAS-style math (gemm ... softmax with loss), host and GPU
 *   blob/conv.h       im2col, col2im and pooling on NCHW arrays
 *   blob/math_mode.h  the math mode of float32 GPU products, GEMM tuning
 *   blob/fused.h      GEMM with a fused epilogue (bias, ReLU, their gradients)
 *   blob/optim.h      multi-tensor optimizer steps (and those over blobs)
 *   blob/host_blas.h  the host BLAS and the library's host threads
 *
 * Include this header for all of them, or one of them for its subject alone.
 */
#ifndef BLOB_MATH_H
#define BLOB_MATH_H

#include "blob/types.h"
#include "blob/blas.h"
#include "blob/conv.h"
#include "blob/math_mode.h"
#include "blob/fused.h"
#include "blob/optim.h"
#include "blob/host_blas.h"

#endif

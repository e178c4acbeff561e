/* The host's GEMM on bfloat16 and float16 (blob__cpu_gemm16, for blob_cpu_gemm and
 * blob_cpu_gemm_epilogue). C is cut into the blocks of blob__gemm_grid, one per host
 * thread, and each block into tiles of at most TILE_MN x TILE_MN, accumulated in float32
 * over panels of K of at most TILE_K: by OpenBLAS's cblas_sbgemm on the bfloat16 arrays
 * themselves where the library has it, else by sgemm on the panels widened to float32.
 * The epilogue runs on the float32 tile, which is then rounded into C to nearest even.
 * Memory: one tile and two panels of float32 per block, allocated before C is touched.
 * The bias sums (DRELU_BGRAD, BGRADA, BGRADB) follow in float32 over whole columns or
 * rows. */
#include "host_cblas.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "blob/blas.h"
#include "../core/core.h"
#include "host_gemm.h"
#include "math_impl.h"

#ifdef BLOB_BLAS_OPENBLAS
/* OpenBLAS declares cblas_sbgemm (from 0.3.10) but defines it only when built with
 * BUILD_BFLOAT16, which Debian's 0.3.21 is not: a weak reference, NULL where missing. */
#pragma weak cblas_sbgemm
#define HAVE_SBGEMM (cblas_sbgemm != NULL)
#else
#define HAVE_SBGEMM false
#endif

enum { TILE_MN = 128, TILE_K = 256, COLS_PER_SUM = 64 };

typedef struct {
    blob__host_gemm h;
    float alpha, beta;
    blob_epilogue e;
    const void *bias;    /* read by BIAS and BIAS_RELU, else NULL */
    unsigned char *mask; /* written by the ReLUs (may be NULL), read by the DRELUs */
    float *buf;          /* per block: a tile, then the panels of A and B */
    bool sbgemm;
} gemm16_job;

static float get(blob_dtype dtype, const void *p, int64_t i)
{
    return (float)blob__elem_get(dtype, p, i);
}

static bool mask_bit(const unsigned char *mask, int64_t row_bits, int64_t i, int64_t j)
{
    const int64_t b = i * row_bits + j;
    return (mask[b / 8] >> (b % 8)) & 1;
}

/* The tile t (ni x nj) += op(A)[i0.., k0..k0+nk) op(B)[k0.., j0..] * alpha, the tile first
 * scaled by beta_k (not read when 0). */
static void panel(const gemm16_job *g, float *t, int64_t i0, int64_t ni, int64_t j0, int64_t nj,
                  int64_t k0, int64_t nk, float beta_k, float *pa, float *pb)
{
    const blob__host_gemm *h = &g->h;
    const blob_dtype dt = h->dtype;
    const bool ta = h->trans_a == BLOB_TRANS, tb = h->trans_b == BLOB_TRANS;
#ifdef BLOB_BLAS_OPENBLAS
    if (g->sbgemm) {
        const uint16_t *A = h->A, *B = h->B;
        cblas_sbgemm(
            CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)ni,
            (int)nj, (int)nk, g->alpha, A + (ta ? k0 * h->lda + i0 : i0 * h->lda + k0), (int)h->lda,
            B + (tb ? j0 * h->ldb + k0 : k0 * h->ldb + j0), (int)h->ldb, beta_k, t, (int)nj);
        return;
    }
#endif
    for (int64_t i = 0; i < ni; i++)
        for (int64_t k = 0; k < nk; k++)
            pa[i * nk + k] =
                get(dt, h->A, ta ? (k0 + k) * h->lda + i0 + i : (i0 + i) * h->lda + k0 + k);
    for (int64_t k = 0; k < nk; k++)
        for (int64_t j = 0; j < nj; j++)
            pb[k * nj + j] =
                get(dt, h->B, tb ? (j0 + j) * h->ldb + k0 + k : (k0 + k) * h->ldb + j0 + j);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)ni, (int)nj, (int)nk, g->alpha, pa,
                (int)nk, pb, (int)nj, beta_k, t, (int)nj);
}

/* The tile of C at (i0, j0), ni x nj: the product in float32, the epilogue, C rounded.
 * j0 is a multiple of 8, so the tile's mask bytes are its own. */
static void tile(const gemm16_job *g, float *buf, int64_t i0, int64_t ni, int64_t j0, int64_t nj)
{
    const blob__host_gemm *h = &g->h;
    const blob_dtype dt = h->dtype;
    const int64_t N = h->N, row_bits = BLOB_RELU_MASK_ROW_BITS(N);
    float *t = buf, *pa = t + TILE_MN * TILE_MN, *pb = pa + TILE_MN * TILE_K;
    for (int64_t i = 0; i < ni; i++)
        for (int64_t j = 0; j < nj; j++)
            t[i * nj + j] = g->beta != 0 ? get(dt, h->C, (i0 + i) * N + j0 + j) : 0;
    for (int64_t k0 = 0; k0 < h->K; k0 += TILE_K) {
        const int64_t nk = h->K - k0 < TILE_K ? h->K - k0 : TILE_K;
        panel(g, t, i0, ni, j0, nj, k0, nk, k0 ? 1.0f : g->beta, pa, pb);
    }
    const bool relu = g->e == BLOB_EPILOGUE_RELU || g->e == BLOB_EPILOGUE_BIAS_RELU;
    const bool drelu = g->e == BLOB_EPILOGUE_DRELU || g->e == BLOB_EPILOGUE_DRELU_BGRAD;
    for (int64_t i = i0; i < i0 + ni; i++)
        for (int64_t j = j0; j < j0 + nj; j++) {
            float v = t[(i - i0) * nj + j - j0];
            if (g->bias)
                v += get(dt, g->bias, j);
            if (relu) {
                const bool pos = v > 0;
                v = pos ? v : 0;
                if (g->mask) {
                    unsigned char *byte = &g->mask[(i * row_bits + j) / 8];
                    const unsigned bit = 1u << ((i * row_bits + j) % 8);
                    *byte = (unsigned char)(pos ? *byte | bit : *byte & ~bit);
                }
            } else if (drelu && !mask_bit(g->mask, row_bits, i, j)) {
                v = 0;
            }
            blob__elem_set(dt, h->C, i * N + j, v);
        }
}

/* Blocks [lo, hi) of C, on the buffer of block lo. */
static void blocks(void *ctx, int64_t lo, int64_t hi)
{
    const gemm16_job *g = ctx;
    float *buf = g->buf + lo * (TILE_MN * TILE_MN + 2 * TILE_MN * TILE_K);
    for (int64_t b = lo; b < hi; b++) {
        int64_t i0, i1, j0, j1;
        blob__host_gemm_block(&g->h, b, &i0, &i1, &j0, &j1);
        for (int64_t i = i0; i < i1; i += TILE_MN)
            for (int64_t j = j0; j < j1; j += TILE_MN)
                tile(g, buf, i, i1 - i < TILE_MN ? i1 - i : TILE_MN, j,
                     j1 - j < TILE_MN ? j1 - j : TILE_MN);
    }
}

/* out = the sums of X (rows x cols) along its rows (one per row) or down its columns. */
typedef struct {
    blob_dtype dtype;
    int64_t rows, cols;
    const void *X;
    void *out;
    bool along_rows;
} sums_job;

/* Rows [lo, hi), or blocks of COLS_PER_SUM columns; each sum in float32, in order. */
static void sums(void *ctx, int64_t lo, int64_t hi)
{
    const sums_job *s = ctx;
    const blob_dtype dt = s->dtype;
    if (s->along_rows) {
        for (int64_t i = lo; i < hi; i++) {
            float acc = 0;
            for (int64_t j = 0; j < s->cols; j++)
                acc += get(dt, s->X, i * s->cols + j);
            blob__elem_set(dt, s->out, i, acc);
        }
        return;
    }
    for (int64_t j0 = lo * COLS_PER_SUM; j0 < hi * COLS_PER_SUM && j0 < s->cols;
         j0 += COLS_PER_SUM) {
        const int64_t nj = s->cols - j0 < COLS_PER_SUM ? s->cols - j0 : COLS_PER_SUM;
        float acc[COLS_PER_SUM] = {0};
        for (int64_t i = 0; i < s->rows; i++)
            for (int64_t j = 0; j < nj; j++)
                acc[j] += get(dt, s->X, i * s->cols + j0 + j);
        for (int64_t j = 0; j < nj; j++)
            blob__elem_set(dt, s->out, j0 + j, acc[j]);
    }
}

static void run_sums(blob_dtype dtype, int64_t rows, int64_t cols, const void *X, void *out,
                     bool along_rows)
{
    sums_job s = {dtype, rows, cols, X, out, along_rows};
    const int64_t n = along_rows ? rows : (cols + COLS_PER_SUM - 1) / COLS_PER_SUM;
    blob__host_for(blob__host_threads(rows * cols), n, sums, &s);
}

blob_status blob__cpu_gemm16(const char *fn, blob_dtype dtype, blob_trans trans_a,
                             blob_trans trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                             const void *A, const void *B, double beta, void *C,
                             blob_epilogue epilogue, void *bias, void *mask)
{
    const bool ta = trans_a == BLOB_TRANS, tb = trans_b == BLOB_TRANS;
    gemm16_job g = {{dtype, trans_a, trans_b, M, N, K, ta ? M : K, tb ? K : N, M, N, A, B, C},
                    (float)alpha,
                    (float)beta,
                    epilogue,
                    epilogue == BLOB_EPILOGUE_BIAS || epilogue == BLOB_EPILOGUE_BIAS_RELU ? bias
                                                                                          : NULL,
                    mask,
                    NULL,
                    false};
    g.sbgemm = dtype == BLOB_BFLOAT16 && HAVE_SBGEMM && g.h.lda <= INT_MAX && g.h.ldb <= INT_MAX;
    if (M && N) {
        blob__gemm_grid(M, N, K, blob_dtype_size(dtype), false, &g.h.rows, &g.h.cols);
        const int64_t nb = blob__host_gemm_blocks(&g.h);
        g.buf = malloc((size_t)nb * (TILE_MN * TILE_MN + 2 * TILE_MN * TILE_K) * sizeof(float));
        if (!g.buf)
            return blob__fail(BLOB_ENOMEM, fn, "no host memory for %lld float32 tiles",
                              (long long)nb);
        blob__host_for((int)nb, nb, blocks, &g);
        free(g.buf);
    }
    switch (epilogue) {
    case BLOB_EPILOGUE_DRELU_BGRAD: run_sums(dtype, M, N, C, bias, false); break;
    case BLOB_EPILOGUE_BGRADA: /* op(A) is M x K: A's rows, or A^T's columns */
        run_sums(dtype, ta ? K : M, ta ? M : K, A, bias, !ta);
        break;
    case BLOB_EPILOGUE_BGRADB: /* op(B) is K x N: B's columns, or B^T's rows */
        run_sums(dtype, tb ? N : K, tb ? K : N, B, bias, tb);
        break;
    default: break;
    }
    return BLOB_OK;
}

/* The launchers of builds without CUDA: every one reports that CUDA is absent. */
#include "../core/core.h"
#include "blob/device.h"
#include "kernels.h"

#pragma GCC diagnostic ignored "-Wunused-parameter" /* the arguments are never looked at */

/* The launcher `name` of the parameters that follow, reporting that CUDA is absent (a
 * statement macro for clang-format: no semicolon follows it). */
#define NO_CUDA(name, ...)                                              \
    blob_status name(__VA_ARGS__)                                       \
    {                                                                   \
        return blob__fail(BLOB_ENODEV, __func__, "built without CUDA"); \
    }

NO_CUDA(blob__k_gemm, void *stream, blob_dtype dtype, blob_trans trans_a, blob_trans trans_b,
        int64_t M, int64_t N, int64_t K, double alpha, const void *A, const void *B, double beta,
        void *C)
NO_CUDA(blob__k_gemv, void *stream, blob_dtype dtype, blob_trans trans_a, int64_t M, int64_t N,
        double alpha, const void *A, const void *x, double beta, void *y)
NO_CUDA(blob__k_axpy, void *stream, blob_dtype dtype, int64_t n, double alpha, const void *x,
        void *y)
NO_CUDA(blob__k_axpby, void *stream, blob_dtype dtype, int64_t n, double alpha, const void *x,
        double beta, void *y)
NO_CUDA(blob__k_scal, void *stream, blob_dtype dtype, int64_t n, double alpha, void *x)
NO_CUDA(blob__k_dot, void *stream, blob_dtype dtype, int64_t n, const void *x, const void *y,
        double *out)
NO_CUDA(blob__k_asum, void *stream, blob_dtype dtype, int64_t n, const void *x, double *out)
NO_CUDA(blob__k_convert, void *stream, blob_dtype from, blob_dtype to, int64_t n, const void *x,
        void *y)
NO_CUDA(blob__k_half_axpy, void *stream, blob_dtype dtype, int64_t n, double alpha, const void *x,
        void *y)
NO_CUDA(blob__k_half_scal, void *stream, blob_dtype dtype, int64_t n, double alpha, void *x)
NO_CUDA(blob__k_half_dot, void *stream, blob_dtype dtype, int64_t n, const void *x, const void *y,
        double *out)
NO_CUDA(blob__k_half_asum, void *stream, blob_dtype dtype, int64_t n, const void *x, double *out)
NO_CUDA(blob__k_prepare, void *stream)
NO_CUDA(blob__k_copy, void *stream, blob_dtype dtype, int64_t n, const void *x, void *y)
NO_CUDA(blob__k_set, void *stream, blob_dtype dtype, int64_t n, double alpha, void *y)
NO_CUDA(blob__k_add_scalar, void *stream, blob_dtype dtype, int64_t n, double alpha, void *y)
NO_CUDA(blob__k_mul, void *stream, blob_dtype dtype, int64_t n, const void *a, const void *b,
        void *y)
NO_CUDA(blob__k_relu_forward, void *stream, blob_dtype dtype, int64_t n, const void *x, void *y)
NO_CUDA(blob__k_relu_backward, void *stream, blob_dtype dtype, int64_t n, const void *x,
        const void *dy, void *dx)
NO_CUDA(blob__k_softmax_loss_forward, void *stream, blob_dtype dtype, int64_t rows, int64_t classes,
        const void *logits, const void *labels, void *prob, void *loss)
NO_CUDA(blob__k_softmax_loss_backward, void *stream, blob_dtype dtype, int64_t rows,
        int64_t classes, const void *prob, const void *labels, double scale, void *dlogits)
NO_CUDA(blob__k_softmax_loss_forward_backward, void *stream, blob_dtype dtype, int64_t rows,
        int64_t classes, const void *logits, const void *labels, double scale, void *prob,
        void *loss, void *dlogits)
NO_CUDA(blob__k_im2col, void *stream, blob_dtype dtype, const blob__conv_call *c, const void *im,
        void *col)
NO_CUDA(blob__k_col2im, void *stream, blob_dtype dtype, const blob__conv_call *c, const void *col,
        void *im)
NO_CUDA(blob__k_max_pool_forward, void *stream, blob_dtype dtype, const blob__conv_call *c,
        const void *x, void *y, int32_t *argmax)
NO_CUDA(blob__k_max_pool_backward, void *stream, blob_dtype dtype, const blob__conv_call *c,
        const void *dy, const int32_t *argmax, void *dx)
NO_CUDA(blob__k_avg_pool_forward, void *stream, blob_dtype dtype, const blob__conv_call *c,
        const void *x, void *y)
NO_CUDA(blob__k_avg_pool_backward, void *stream, blob_dtype dtype, const blob__conv_call *c,
        const void *dy, void *dx)

void blob_thread_release(void) {}

/* ---- GEMM in a math mode, GEMM with epilogues, optimizer steps ---- */

NO_CUDA(blob__k_gemm_mode, void *stream, blob_math_mode mode, blob_trans trans_a,
        blob_trans trans_b, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
        const void *B, double beta, void *C)
NO_CUDA(blob__k_gemm_epilogue, void *stream, blob_dtype dtype, blob_math_mode mode,
        blob_trans trans_a, blob_trans trans_b, int64_t M, int64_t N, int64_t K, double alpha,
        const void *A, const void *B, double beta, void *C, blob_epilogue epilogue, void *bias,
        void *mask, bool tune)
NO_CUDA(blob__k_epilogue_apply, const char *func, void *stream, blob_dtype dtype,
        blob_trans trans_a, blob_trans trans_b, int64_t M, int64_t N, int64_t K, const void *A,
        const void *B, void *C, blob_epilogue epilogue, void *bias, void *mask)
NO_CUDA(blob__k_gemm_epilogue_fused, blob_dtype dtype, blob_math_mode mode, blob_trans trans_a,
        blob_trans trans_b, int64_t M, int64_t N, int64_t K, blob_epilogue epilogue, bool with_mask,
        bool *fused)
NO_CUDA(blob__k_optim_step, void *stream, const blob_optim *opt, blob__step_form form,
        blob_dtype gdtype, int n, const int64_t *counts, void *const *data, void *const *lo,
        const void *const *diff, void *const *hist1, void *const *hist2, void *const *work,
        double inv_scale, int64_t *step)
NO_CUDA(blob__k_find_nonfinite, void *stream, blob_dtype dtype, int n, const int64_t *counts,
        const void *const *x, int32_t *found)
NO_CUDA(blob__k_softmax_loss_mixed, void *stream, blob_dtype dtype, blob_dtype label_dtype,
        int64_t rows, int64_t classes, const void *logits, const void *labels, double scale,
        void *prob, float *loss, void *dlogits)
NO_CUDA(blob__k_softmax_loss_backward_mixed, void *stream, blob_dtype dtype, blob_dtype label_dtype,
        int64_t rows, int64_t classes, const void *prob, const void *labels, double scale,
        void *dlogits)

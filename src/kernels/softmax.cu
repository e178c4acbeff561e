/* Softmax with cross-entropy loss: one block per row (rows loop over the grid) with a
 * stable max/sum reduction, which can write the gradient too; the backward pass alone
 * is elementwise. The mixed calls' 16-bit floats compute in float32 (half.cuh). */
#include <float.h>
#include <math.h>

#include "common.cuh"
#include "half.cuh"

static __device__ float dev_exp(float x) { return expf(x); }
static __device__ double dev_exp(double x) { return exp(x); }
static __device__ float dev_log(float x) { return logf(x); }
static __device__ double dev_log(double x) { return log(x); }
static __device__ float min_normal(float) { return FLT_MIN; }
static __device__ double min_normal(double) { return DBL_MIN; }

/* The class a label value names, or -1 if it is not an integer in [0, classes). */
template <typename T>
static __device__ int64_t label_index(T v, int64_t classes)
{
    double d = (double)v;
    return d >= 0 && d < (double)classes && d == floor(d) ? (int64_t)d : -1;
}

struct Max {
    template <typename T>
    __device__ T operator()(T a, T b) const
    {
        return a > b ? a : b;
    }
};
struct Sum {
    template <typename T>
    __device__ T operator()(T a, T b) const
    {
        return a + b;
    }
};

/* Reduce v over the block (blockDim.x a multiple of 32) with op; every thread gets the
 * result. buf holds one value per warp and may be reused at once by the next call. */
template <typename T, typename Op>
static __device__ T block_reduce(T v, Op op, T identity, T *buf)
{
    const unsigned lane = threadIdx.x % 32;
    for (int o = 16; o > 0; o >>= 1)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads(); /* the previous call has finished reading buf */
    if (lane == 0)
        buf[threadIdx.x / 32] = v;
    __syncthreads();
    v = lane < blockDim.x / 32 ? buf[lane] : identity;
    for (int o = 16; o > 0; o >>= 1)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* prob and loss of each row; with dlogits, also scale * (prob - onehot(label)). Logits
 * T, labels L, loss LT; computed in wide_t<T> (float for the 16-bit floats), prob and
 * dlogits rounded once from the unrounded probability, which the loss reads. */
template <typename T, typename L, typename LT>
static __global__ void softmax_loss_forward(int64_t rows, int64_t classes, const T *logits,
                                            const L *labels, T *prob, LT *loss, double scale,
                                            T *dlogits)
{
    using W = wide_t<T>;
    __shared__ W buf[32];
    const W s = (W)scale, tiny = min_normal(W());
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t k = label_index(labels[r], classes);
        const T *x = logits + r * classes;
        W m = -INFINITY;
        for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
            m = wide(x[j]) > m ? wide(x[j]) : m;
        m = block_reduce(m, Max(), W(-INFINITY), buf);
        W sum = 0;
        for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
            sum += dev_exp(wide(x[j]) - m);
        sum = block_reduce(sum, Sum(), W(0), buf);
        for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
            const W q = dev_exp(wide(x[j]) - m) / sum;
            prob[r * classes + j] = narrow<T>(q);
            if (dlogits)
                dlogits[r * classes + j] =
                    k < 0 ? T(0.0f) : narrow<T>(s * (q - (j == k ? W(1) : W(0))));
            if (j == k)
                loss[r] = (LT)-dev_log(q > tiny ? q : tiny);
        }
        if (k < 0 && threadIdx.x == 0)
            loss[r] = LT(NAN);
    }
}

template <typename T, typename L, typename LT>
static blob_status forward(const char *func, void *stream, int64_t rows, int64_t classes,
                           const void *logits, const void *labels, void *prob, void *loss,
                           double scale, void *dlogits)
{
    if (rows == 0)
        return BLOB_OK;
    /* Whole warps, one for short rows, up to THREADS threads for long ones. */
    const int64_t warps = (classes + 31) / 32;
    const unsigned threads = warps < 1 ? 32 : warps < THREADS / 32 ? (unsigned)warps * 32 : THREADS;
    softmax_loss_forward<T, L, LT><<<grid_for(rows, 1), threads, 0, (cudaStream_t)stream>>>(
        rows, classes, (const T *)logits, (const L *)labels, (T *)prob, (LT *)loss, scale,
        (T *)dlogits);
    return launch_check("softmax_loss_forward", func);
}

/* forward<T, L, float> for the mixed calls' dtypes (float32, bfloat16, float16). */
template <typename L>
static blob_status forward_mixed(const char *func, void *stream, blob_dtype dtype, int64_t rows,
                                 int64_t classes, const void *logits, const void *labels,
                                 double scale, void *prob, float *loss, void *dlogits)
{
    return dtype == BLOB_FLOAT32 ? forward<float, L, float>(func, stream, rows, classes, logits,
                                                            labels, prob, loss, scale, dlogits)
           : dtype == BLOB_BFLOAT16
               ? forward<__nv_bfloat16, L, float>(func, stream, rows, classes, logits, labels, prob,
                                                  loss, scale, dlogits)
               : forward<__half, L, float>(func, stream, rows, classes, logits, labels, prob, loss,
                                           scale, dlogits);
}

extern "C" blob_status blob__k_softmax_loss_mixed(void *stream, blob_dtype dtype,
                                                  blob_dtype label_dtype, int64_t rows,
                                                  int64_t classes, const void *logits,
                                                  const void *labels, double scale, void *prob,
                                                  float *loss, void *dlogits)
{
    return label_dtype == BLOB_INT32
               ? forward_mixed<int32_t>(__func__, stream, dtype, rows, classes, logits, labels,
                                        scale, prob, loss, dlogits)
               : forward_mixed<int64_t>(__func__, stream, dtype, rows, classes, logits, labels,
                                        scale, prob, loss, dlogits);
}

extern "C" blob_status blob__k_softmax_loss_forward(void *stream, blob_dtype dtype, int64_t rows,
                                                    int64_t classes, const void *logits,
                                                    const void *labels, void *prob, void *loss)
{
    return dtype == BLOB_FLOAT32
               ? forward<float, float, float>(__func__, stream, rows, classes, logits, labels, prob,
                                              loss, 0.0, nullptr)
               : forward<double, double, double>(__func__, stream, rows, classes, logits, labels,
                                                 prob, loss, 0.0, nullptr);
}

extern "C" blob_status blob__k_softmax_loss_forward_backward(void *stream, blob_dtype dtype,
                                                             int64_t rows, int64_t classes,
                                                             const void *logits, const void *labels,
                                                             double scale, void *prob, void *loss,
                                                             void *dlogits)
{
    return dtype == BLOB_FLOAT32
               ? forward<float, float, float>(__func__, stream, rows, classes, logits, labels, prob,
                                              loss, scale, dlogits)
               : forward<double, double, double>(__func__, stream, rows, classes, logits, labels,
                                                 prob, loss, scale, dlogits);
}

template <typename T, typename L = T>
struct SoftmaxLossBackward {
    int64_t classes;
    double scale;
    const void *prob, *labels;
    void *dlogits;
    __device__ void operator()(int64_t i) const
    {
        using W = wide_t<T>;
        const int64_t r = i / classes, k = label_index(((const L *)labels)[r], classes);
        const W p = wide(((const T *)prob)[i]);
        ((T *)dlogits)[i] =
            k < 0 ? T(0.0f) : narrow<T>((W)scale * (p - (i - r * classes == k ? W(1) : W(0))));
    }
};

/* SoftmaxLossBackward with labels of L, for EACH_FLOAT. */
template <typename L>
struct BackwardLabeled {
    template <typename T>
    using Op = SoftmaxLossBackward<T, L>;
};

extern "C" blob_status blob__k_softmax_loss_backward(void *stream, blob_dtype dtype, int64_t rows,
                                                     int64_t classes, const void *prob,
                                                     const void *labels, double scale,
                                                     void *dlogits)
{
    return EACH(__func__, stream, dtype, rows * classes, SoftmaxLossBackward, classes, scale, prob,
                labels, dlogits);
}

extern "C" blob_status blob__k_softmax_loss_backward_mixed(void *stream, blob_dtype dtype,
                                                           blob_dtype label_dtype, int64_t rows,
                                                           int64_t classes, const void *prob,
                                                           const void *labels, double scale,
                                                           void *dlogits)
{
    return label_dtype == BLOB_INT32
               ? EACH_FLOAT(__func__, stream, dtype, rows * classes, BackwardLabeled<int32_t>::Op,
                            classes, scale, prob, labels, dlogits)
               : EACH_FLOAT(__func__, stream, dtype, rows * classes, BackwardLabeled<int64_t>::Op,
                            classes, scale, prob, labels, dlogits);
}

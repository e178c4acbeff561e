/* Softmax with cross-entropy loss: one block per row (rows loop over the grid) with a
 * stable max/sum reduction, which can write the gradient too; the backward pass alone
 * is elementwise. */
#include <float.h>
#include <math.h>

#include "common.cuh"

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

/* prob and loss of each row; with dlogits, also scale * (prob - onehot(label)). */
template <typename T>
static __global__ void softmax_loss_forward(int64_t rows, int64_t classes, const T *logits,
                                            const T *labels, T *prob, T *loss, T scale, T *dlogits)
{
    __shared__ T buf[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t k = label_index(labels[r], classes);
        const T *x = logits + r * classes;
        T *p = prob + r * classes;
        T m = -INFINITY;
        for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
            m = x[j] > m ? x[j] : m;
        m = block_reduce(m, Max(), T(-INFINITY), buf);
        T sum = 0;
        for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
            const T e = dev_exp(x[j] - m);
            p[j] = e;
            sum += e;
        }
        sum = block_reduce(sum, Sum(), T(0), buf);
        for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
            const T q = p[j] / sum;
            p[j] = q;
            if (dlogits)
                dlogits[r * classes + j] = k < 0 ? T(0) : scale * (q - (j == k ? T(1) : T(0)));
        }
        __syncthreads(); /* p[label] may have been written by another thread */
        if (threadIdx.x == 0) {
            const T tiny = min_normal(T());
            loss[r] = k < 0 ? T(NAN) : -dev_log(p[k] > tiny ? p[k] : tiny);
        }
    }
}

template <typename T>
static blob_status forward(const char *func, void *stream, int64_t rows, int64_t classes,
                           const void *logits, const void *labels, void *prob, void *loss,
                           double scale, void *dlogits)
{
    if (rows == 0)
        return BLOB_OK;
    /* Whole warps, one for short rows, up to THREADS threads for long ones. */
    const int64_t warps = (classes + 31) / 32;
    const unsigned threads = warps < 1 ? 32 : warps < THREADS / 32 ? (unsigned)warps * 32 : THREADS;
    softmax_loss_forward<T><<<grid_for(rows, 1), threads, 0, (cudaStream_t)stream>>>(
        rows, classes, (const T *)logits, (const T *)labels, (T *)prob, (T *)loss, (T)scale,
        (T *)dlogits);
    return launch_check("softmax_loss_forward", func);
}

extern "C" blob_status blob__k_softmax_loss_forward(void *stream, blob_dtype dtype, int64_t rows,
                                                    int64_t classes, const void *logits,
                                                    const void *labels, void *prob, void *loss)
{
    return dtype == BLOB_FLOAT32 ? forward<float>(__func__, stream, rows, classes, logits, labels,
                                                  prob, loss, 0.0, nullptr)
                                 : forward<double>(__func__, stream, rows, classes, logits, labels,
                                                   prob, loss, 0.0, nullptr);
}

extern "C" blob_status blob__k_softmax_loss_forward_backward(void *stream, blob_dtype dtype,
                                                             int64_t rows, int64_t classes,
                                                             const void *logits, const void *labels,
                                                             double scale, void *prob, void *loss,
                                                             void *dlogits)
{
    return dtype == BLOB_FLOAT32 ? forward<float>(__func__, stream, rows, classes, logits, labels,
                                                  prob, loss, scale, dlogits)
                                 : forward<double>(__func__, stream, rows, classes, logits, labels,
                                                   prob, loss, scale, dlogits);
}

template <typename T>
struct SoftmaxLossBackward {
    int64_t classes;
    double scale;
    const void *prob, *labels;
    void *dlogits;
    __device__ void operator()(int64_t i) const
    {
        const int64_t r = i / classes, k = label_index(((const T *)labels)[r], classes);
        const T p = ((const T *)prob)[i];
        ((T *)dlogits)[i] = k < 0 ? T(0) : (T)scale * (p - (i - r * classes == k ? T(1) : T(0)));
    }
};

extern "C" blob_status blob__k_softmax_loss_backward(void *stream, blob_dtype dtype, int64_t rows,
                                                     int64_t classes, const void *prob,
                                                     const void *labels, double scale,
                                                     void *dlogits)
{
    return EACH(__func__, stream, dtype, rows * classes, SoftmaxLossBackward, classes, scale, prob,
                labels, dlogits);
}
